package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// RestartCost is the measured cost of one checkpoint-restart of a job: the
// wall time from the decision to restart until the job was training again,
// less the training it did in that time.
type RestartCost struct {
	ActionID  int64 // the restart's plan history entry
	JobID     int64
	ModelType string
	Cost      time.Duration
	// Signaled is when the restart was decided, just before the checkpoint
	// signal; Resumed is the time of the first sample reported after it.
	Signaled, Resumed time.Time
	// BeforeIter and AfterIter are the trainer's iteration counters of the
	// last sample before the restart and of the first one after it.
	BeforeIter, AfterIter int
	Measured              time.Time // set by the store
}

// Unmeasured returns the actions of kind that Slurm applied (result ok),
// decided at or after since, with no restart cost stored yet, whose job
// has reported an online sample since the action was applied (without
// one there is nothing to measure yet), oldest first.
func (s *Store) Unmeasured(ctx context.Context, kind string, since time.Time) ([]Action, error) {
	out, err := s.actions(ctx, s.r,
		`kind = ? AND result = 'ok' AND decided_ns >= ? AND id NOT IN (SELECT action_id FROM restart_costs)
		AND EXISTS (SELECT 1 FROM samples s WHERE s.source_job = plan_history.job_id AND s.source = ?
			AND s.iteration IS NOT NULL AND s.created_ns > plan_history.applied_ns)`,
		kind, since.UnixNano(), string(SourceOnline))
	if err != nil {
		return nil, fmt.Errorf("store: unmeasured %s actions: %w", kind, err)
	}
	return out, nil
}

// AddRestartCost stores c and reports whether it did: the first measurement
// of an action is kept and later ones are ignored. The action must be an
// applied action of c.JobID, and the model type must be stored.
func (s *Store) AddRestartCost(ctx context.Context, c RestartCost) (bool, error) {
	if err := checkRestartCost(c); err != nil {
		return false, fmt.Errorf("store: restart cost of action %d: %w", c.ActionID, err)
	}
	var added bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		var job int64
		var result sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT job_id, result FROM plan_history WHERE id = ?`, c.ActionID).Scan(&job, &result)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: action %d", ErrNotFound, c.ActionID)
		}
		if err != nil {
			return err
		}
		if job != c.JobID {
			return fmt.Errorf("%w: job_id=%d but action %d is job %d's", ErrInvalid, c.JobID, c.ActionID, job)
		}
		if result.String != string(ResultOK) {
			return fmt.Errorf("%w: action %d has result %q, want %q", ErrInvalid, c.ActionID, result.String, ResultOK)
		}
		if err := modelTypeExists(ctx, tx, c.ModelType); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `
			INSERT INTO restart_costs(action_id, job_id, model_type, cost_s, signaled_ns, resumed_ns,
				before_iter, after_iter, measured_ns)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(action_id) DO NOTHING`,
			c.ActionID, c.JobID, c.ModelType, c.Cost.Seconds(), c.Signaled.UnixNano(), c.Resumed.UnixNano(),
			c.BeforeIter, c.AfterIter, s.now().UnixNano())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		added = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("store: restart cost of action %d: %w", c.ActionID, err)
	}
	return added, nil
}

func checkRestartCost(c RestartCost) error {
	switch {
	case c.ActionID <= 0:
		return fmt.Errorf("%w: action_id=%d must be > 0", ErrInvalid, c.ActionID)
	case c.JobID <= 0:
		return fmt.Errorf("%w: job_id=%d must be > 0", ErrInvalid, c.JobID)
	case c.Cost < 0:
		return fmt.Errorf("%w: cost=%v must be >= 0", ErrInvalid, c.Cost)
	case c.Signaled.IsZero() || c.Resumed.Before(c.Signaled):
		return fmt.Errorf("%w: resumed=%v must not precede signaled=%v", ErrInvalid, c.Resumed, c.Signaled)
	case c.BeforeIter < 0 || c.AfterIter < c.BeforeIter:
		return fmt.Errorf("%w: after_iter=%d must be >= before_iter=%d >= 0", ErrInvalid, c.AfterIter, c.BeforeIter)
	}
	return checkName("model_type", c.ModelType)
}

// RestartCosts returns the newest limit restart costs of modelType, or of
// each model type when modelType is empty, newest first (by model type,
// then newest first, when empty); limit <= 0 means all.
func (s *Store) RestartCosts(ctx context.Context, modelType string, limit int) ([]RestartCost, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	out, err := s.restartCosts(ctx, `SELECT `+restartCostColumns+`
		FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY model_type ORDER BY action_id DESC) AS nth
			FROM restart_costs WHERE ?1 = '' OR model_type = ?1)
		WHERE ?2 < 0 OR nth <= ?2
		ORDER BY model_type, action_id DESC`, modelType, limit)
	if err != nil {
		return nil, fmt.Errorf("store: restart costs of %q: %w", modelType, err)
	}
	return out, nil
}

// JobRestartCosts returns the measured restart costs of the Slurm job,
// oldest first.
func (s *Store) JobRestartCosts(ctx context.Context, jobID int64) ([]RestartCost, error) {
	out, err := s.restartCosts(ctx, `SELECT `+restartCostColumns+` FROM restart_costs WHERE job_id = ? ORDER BY action_id`, jobID)
	if err != nil {
		return nil, fmt.Errorf("store: restart costs of job %d: %w", jobID, err)
	}
	return out, nil
}

const restartCostColumns = `action_id, job_id, model_type, cost_s, signaled_ns, resumed_ns,
	before_iter, after_iter, measured_ns`

// restartCosts runs query, a SELECT of restartCostColumns.
func (s *Store) restartCosts(ctx context.Context, query string, args ...any) ([]RestartCost, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []RestartCost
	for rows.Next() {
		c, err := scanRestartCost(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func scanRestartCost(sc scanner) (RestartCost, error) {
	var c RestartCost
	var cost float64
	var sig, res, at int64
	if err := sc.Scan(&c.ActionID, &c.JobID, &c.ModelType, &cost, &sig, &res, &c.BeforeIter, &c.AfterIter, &at); err != nil {
		return RestartCost{}, err
	}
	c.Cost = time.Duration(cost * float64(time.Second))
	c.Signaled, c.Resumed, c.Measured = time.Unix(0, sig).UTC(), time.Unix(0, res).UTC(), time.Unix(0, at).UTC()
	return c, nil
}

// JobsRestartCosts returns the measured restart costs of each of ids that
// has some, newest first.
func (s *Store) JobsRestartCosts(ctx context.Context, ids []int64) (map[int64][]RestartCost, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	out := map[int64][]RestartCost{}
	err := s.inChunks(ctx, `SELECT `+restartCostColumns+` FROM restart_costs WHERE job_id IN `, args, func(rows *sql.Rows) error {
		c, err := scanRestartCost(rows)
		if err != nil {
			return err
		}
		out[c.JobID] = append(out[c.JobID], c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: restart costs of %d jobs: %w", len(ids), err)
	}
	for _, cs := range out {
		slices.SortFunc(cs, func(a, b RestartCost) int { return cmp.Compare(b.ActionID, a.ActionID) })
	}
	return out, nil
}
