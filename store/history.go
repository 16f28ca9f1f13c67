package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/model"
)

// Result is the outcome of a recorded plan action.
type Result string

// Action results.
const (
	// ResultPending marks an action decided but not yet confirmed: it may or
	// may not have reached Slurm.
	ResultPending Result = ""
	// ResultOK marks an action Slurm accepted.
	ResultOK Result = "ok"
	// ResultFailed marks an action Slurm rejected or that failed part way.
	ResultFailed Result = "failed"
	// ResultAbandoned marks an action that will not be applied, for example
	// a pending action a restarted daemon found superseded by Slurm's state.
	ResultAbandoned Result = "abandoned"
)

// Action is one decided change to one job: its plan history entry.
type Action struct {
	ID        int64  // set by the store
	CycleID   int64  // the decision cycle that produced it; 0 for none
	JobID     int64  // Slurm job id; the job must be stored
	Kind      string // what to do, e.g. "start", "shrink", "reconfigure", "preempt"
	Plan      model.Plan
	Resources model.Resources
	DecidedAt time.Time // set by the store when recorded
	AppliedAt time.Time // set by the store by MarkApplied; zero while pending
	Result    Result
	Error     string // why the action failed or was abandoned
	// Tag is the rubick tag the action writes to its job, in the form of
	// its AdminComment segment; "" for none, and for the actions recorded
	// before schema 10.
	Tag string
	// AwaitsAck marks an action that may have requeued its job without the
	// job's tag saying so yet (AwaitAck), until Acked.
	AwaitsAck bool
	// AckMail is the mail types (a tag's mail= value) the action took out
	// of the job's, which the acknowledging tag keeps; "" for none.
	AckMail string
	// Nodes is the node list the action sends Slurm, a hostlist
	// ("node[1-2]"); "" for none, and for the actions recorded before
	// schema 11.
	Nodes string
	// RequeueCount is the restart count the action's requeue gives its job
	// (a preemption's or restart's), recorded just before rubick issues it
	// (WillRequeue); 0 while none was issued; RequeueUnknown for an action
	// an older rubickd left unresolved, whose requeue, if any, went
	// unrecorded.
	RequeueCount int
}

// RequeueUnknown is the RequeueCount of a preemption or restart that
// schema 16 found unresolved: a rubickd before it issued its requeue, if
// it did, without recording it.
const RequeueUnknown = -1

// Decision is one scheduling cycle: the policy's output and why.
type Decision struct {
	CycleID  int64     // set by the store; increasing, never reused
	At       time.Time // set by the store when recorded
	Policy   string
	Duration time.Duration // time the policy took to decide
	// Reasons holds, per Slurm job id, a JSON value explaining the job's
	// outcome in this cycle (plan, resources or wait).
	Reasons map[int64]json.RawMessage
	// Unchanged are the jobs the cycle left alone for the reason stored
	// with them in an earlier cycle (ReasonsAsOf finds it): rubickd stores
	// such a reason once, not every cycle. None of them is in Reasons.
	Unchanged []int64
	Actions   []Action
}

// Reason is a job's explanation from one decision cycle.
type Reason struct {
	CycleID int64
	At      time.Time
	Policy  string
	JobID   int64
	Reason  json.RawMessage
}

// RecordPlan records a as pending, before it is applied, and returns it
// with its ID and DecidedAt set; the ID, times, Result, Error and AwaitsAck
// given are ignored. It wraps ErrNotFound when the job or the cycle is not stored.
func (s *Store) RecordPlan(ctx context.Context, a Action) (Action, error) {
	if err := checkAction(a); err != nil {
		return Action{}, fmt.Errorf("store: record plan for job %d: %w", a.JobID, err)
	}
	now := s.now().UTC()
	var out Action
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = insertAction(ctx, tx, a, now)
		return err
	})
	if err != nil {
		// a, not what the failed insert returned: that names no job.
		return Action{}, fmt.Errorf("store: record plan for job %d: %w", a.JobID, err)
	}
	return out, nil
}

// KindRefused is the plan history entry of a plan a job's launch line
// refused (RecordRefusal): no action of rubickd's, but the reason its job
// requeued itself, which rubick report counts as a reconfiguration.
const KindRefused = "refused"

// RecordRefusal records that job jobID's launch line refused plan, why,
// as a resolved entry of its plan history (KindRefused, ResultFailed,
// why as its error) without resources: the plan ran on the job's
// allocation, whose record the start before has. It leaves the job's last
// plan as it is. It wraps ErrNotFound when the job is not stored.
func (s *Store) RecordRefusal(ctx context.Context, jobID int64, plan model.Plan, why string) (Action, error) {
	a := Action{JobID: jobID, Kind: KindRefused, Plan: plan, Result: ResultFailed, Error: why}
	err := checkPlanFields(plan)
	if jobID <= 0 {
		err = fmt.Errorf("%w: job_id=%d must be > 0", ErrInvalid, jobID)
	}
	if err != nil {
		return Action{}, fmt.Errorf("store: record refusal for job %d: %w", jobID, err)
	}
	now := s.now().UTC()
	err = s.write(ctx, func(tx *sql.Tx) error {
		var err error
		if a, err = insertAction(ctx, tx, a, now); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE plan_history SET result = ?, applied_ns = ?, error = ? WHERE id = ?`,
			string(ResultFailed), now.UnixNano(), why, a.ID)
		return err
	})
	if err != nil {
		return Action{}, fmt.Errorf("store: record refusal for job %d: %w", jobID, err)
	}
	a.AppliedAt, a.Result, a.Error = a.DecidedAt, ResultFailed, why
	return a, nil
}

// RecordDecision records d and its actions, all pending, in one
// transaction, and returns it with the cycle ID, the time and the action
// IDs set. The CycleID of each action is set to the new cycle's.
func (s *Store) RecordDecision(ctx context.Context, d Decision) (Decision, error) {
	if err := checkName("policy", d.Policy); err != nil {
		return Decision{}, fmt.Errorf("store: record decision: %w", err)
	}
	if d.Duration < 0 {
		return Decision{}, fmt.Errorf("store: record decision: %w: duration=%v must be >= 0", ErrInvalid, d.Duration)
	}
	for job, r := range d.Reasons {
		if !json.Valid(r) {
			return Decision{}, fmt.Errorf("store: record decision: %w: reason for job %d=%q is not JSON", ErrInvalid, job, r)
		}
	}
	for _, job := range d.Unchanged {
		if _, has := d.Reasons[job]; has || job <= 0 {
			return Decision{}, fmt.Errorf("store: record decision: %w: unchanged job %d must be > 0 and have no reason of this cycle", ErrInvalid, job)
		}
	}
	var unchanged sql.NullString
	var ids []int64 // sorted, once each
	if len(d.Unchanged) > 0 {
		ids = slices.Compact(slices.Sorted(slices.Values(d.Unchanged)))
		raw, err := json.Marshal(ids)
		if err != nil {
			return Decision{}, fmt.Errorf("store: record decision: unchanged jobs: %w", err)
		}
		unchanged = sql.NullString{String: string(raw), Valid: true}
	}
	for i, a := range d.Actions {
		if err := checkAction(a); err != nil {
			return Decision{}, fmt.Errorf("store: record decision: action %d (job %d): %w", i, a.JobID, err)
		}
	}
	out := d
	out.At = s.now().UTC()
	out.Actions = slices.Clone(d.Actions)
	out.Unchanged = ids
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO decisions(decided_ns, policy, duration_ns, unchanged) VALUES (?, ?, ?, ?)`,
			out.At.UnixNano(), d.Policy, int64(d.Duration), unchanged)
		if err != nil {
			return err
		}
		if out.CycleID, err = res.LastInsertId(); err != nil {
			return err
		}
		reason, err := tx.PrepareContext(ctx, `INSERT INTO decision_reasons(cycle_id, job_id, reason) VALUES (?, ?, ?)`)
		if err != nil {
			return err
		}
		defer reason.Close()
		// Sorted, so the write order and any error do not depend on map order.
		for _, job := range slices.Sorted(maps.Keys(d.Reasons)) {
			if _, err := reason.ExecContext(ctx, out.CycleID, job, string(d.Reasons[job])); err != nil {
				return fmt.Errorf("reason for job %d: %w", job, err)
			}
		}
		for i := range out.Actions {
			out.Actions[i].CycleID = out.CycleID
			if out.Actions[i], err = insertAction(ctx, tx, out.Actions[i], out.At); err != nil {
				return fmt.Errorf("action %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		return Decision{}, fmt.Errorf("store: record decision: %w", err)
	}
	return out, nil
}

func checkAction(a Action) error {
	if a.JobID <= 0 {
		return fmt.Errorf("%w: job_id=%d must be > 0", ErrInvalid, a.JobID)
	}
	if a.CycleID < 0 {
		return fmt.Errorf("%w: cycle_id=%d must be >= 0", ErrInvalid, a.CycleID)
	}
	if err := checkName("kind", a.Kind); err != nil {
		return err
	}
	if a.Plan != (model.Plan{}) {
		return checkPlan(a.Plan, a.Resources)
	}
	// Actions without a plan (preempt, cancel) may still carry resources.
	if len(a.Resources.Placement) > 0 {
		return checkResources(a.Resources)
	}
	if a.Resources.CPUs < 0 {
		return fmt.Errorf("%w: cpus=%d must be >= 0", ErrInvalid, a.Resources.CPUs)
	}
	return checkNonNeg("host_mem_gb", a.Resources.HostMemGB)
}

func insertAction(ctx context.Context, tx *sql.Tx, a Action, now time.Time) (Action, error) {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM jobs WHERE job_id = ?`, a.JobID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return Action{}, fmt.Errorf("job %d: %w", a.JobID, ErrNotFound)
	}
	if err != nil {
		return Action{}, err
	}
	cycle := sql.NullInt64{Int64: a.CycleID, Valid: a.CycleID != 0}
	if cycle.Valid {
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM decisions WHERE cycle_id = ?`, a.CycleID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return Action{}, fmt.Errorf("cycle %d: %w", a.CycleID, ErrNotFound)
		}
		if err != nil {
			return Action{}, err
		}
	}
	plan, placement := planColumns(a.Plan, a.Resources)
	tag := sql.NullString{String: a.Tag, Valid: a.Tag != ""}
	nodes := sql.NullString{String: a.Nodes, Valid: a.Nodes != ""}
	res, err := tx.ExecContext(ctx, `
		INSERT INTO plan_history(cycle_id, job_id, kind, plan, placement, cpus, host_mem_gb, decided_ns, error, tag, nodes)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', ?, ?)`,
		cycle, a.JobID, a.Kind, plan, placement, a.Resources.CPUs, a.Resources.HostMemGB, now.UnixNano(), tag, nodes)
	if err != nil {
		return Action{}, err
	}
	if a.ID, err = res.LastInsertId(); err != nil {
		return Action{}, err
	}
	a.DecidedAt, a.AppliedAt, a.Result, a.Error, a.AwaitsAck, a.AckMail = now, time.Time{}, ResultPending, "", false, ""
	return a, nil
}

// MarkApplied resolves the pending action id with res: ResultOK needs a nil
// applyErr, ResultFailed a non-nil one, ResultAbandoned either. ResultOK
// also makes the action's plan, if it has one, the job's last plan, in the
// same transaction. It wraps ErrNotFound for an unknown action and
// ErrResolved for one already resolved, so an action is never confirmed
// twice.
func (s *Store) MarkApplied(ctx context.Context, id int64, res Result, applyErr error) error {
	switch {
	case res == ResultOK && applyErr != nil:
		return fmt.Errorf("store: mark action %d: %w: result=ok with error %q", id, ErrInvalid, applyErr)
	case res == ResultFailed && applyErr == nil:
		return fmt.Errorf("store: mark action %d: %w: result=failed needs an error", id, ErrInvalid)
	case res != ResultOK && res != ResultFailed && res != ResultAbandoned:
		return fmt.Errorf("store: mark action %d: %w: result=%q must be ok, failed or abandoned", id, ErrInvalid, res)
	}
	msg := ""
	if applyErr != nil {
		msg = applyErr.Error()
	}
	now := s.now().UnixNano()
	err := s.write(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, `UPDATE plan_history SET result = ?, applied_ns = ?, error = ?
			WHERE id = ? AND result IS NULL`, string(res), now, msg, id)
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			var prev string
			err := tx.QueryRowContext(ctx, `SELECT result FROM plan_history WHERE id = ?`, id).Scan(&prev)
			if errors.Is(err, sql.ErrNoRows) {
				return ErrNotFound
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("%w: result is %s", ErrResolved, prev)
		}
		if res != ResultOK {
			return nil
		}
		_, err = tx.ExecContext(ctx, `
			UPDATE jobs SET (last_plan, last_placement, last_cpus, last_host_mem_gb) =
				(SELECT plan, placement, cpus, host_mem_gb FROM plan_history WHERE id = ?1)
			WHERE job_id = (SELECT job_id FROM plan_history WHERE id = ?1 AND plan IS NOT NULL)`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: mark action %d: %w", id, err)
	}
	return nil
}

const actionColumns = `id, cycle_id, job_id, kind, plan, placement, cpus, host_mem_gb,
	decided_ns, applied_ns, result, error, tag, awaits_ack, ack_mail, nodes, requeue_count`

func scanAction(sc scanner) (Action, error) {
	var a Action
	var cycle, decided, applied, requeues sql.NullInt64
	var plan, placement, result, tag, mail, nodes sql.NullString
	if err := sc.Scan(&a.ID, &cycle, &a.JobID, &a.Kind, &plan, &placement, &a.Resources.CPUs,
		&a.Resources.HostMemGB, &decided, &applied, &result, &a.Error, &tag, &a.AwaitsAck, &mail, &nodes, &requeues); err != nil {
		return Action{}, err
	}
	a.Tag, a.AckMail, a.Nodes, a.RequeueCount = tag.String, mail.String, nodes.String, int(requeues.Int64)
	var err error
	if a.Plan, a.Resources.Placement, err = fromPlanColumns(plan, placement); err != nil {
		return Action{}, fmt.Errorf("action %d: %w", a.ID, err)
	}
	a.CycleID, a.Result = cycle.Int64, Result(result.String)
	a.DecidedAt, a.AppliedAt = fromTimestamp(decided), fromTimestamp(applied)
	return a, nil
}

func (s *Store) actions(ctx context.Context, q querier, where string, args ...any) ([]Action, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+actionColumns+` FROM plan_history WHERE `+where+` ORDER BY id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Action
	for rows.Next() {
		a, err := scanAction(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Pending returns every action decided but not yet resolved, oldest first.
// A restarted daemon reconciles these against Slurm and resolves each one
// before deciding anything new for its job, so none is applied twice.
func (s *Store) Pending(ctx context.Context) ([]Action, error) {
	out, err := s.actions(ctx, s.r, `result IS NULL`)
	if err != nil {
		return nil, fmt.Errorf("store: pending actions: %w", err)
	}
	return out, nil
}

// WillRequeue records that rubick is about to requeue the job of action
// id, a preemption or restart, which gives the job restart count
// restarts: a restarted rubickd that finds the job requeued and held
// takes the requeue for its own only at that count (RequeueCount). tag,
// when not empty, replaces the action's Tag: the tag as the requeue
// leaves it (the job's run counted to the requeue), which such a
// rubickd acknowledges the requeue in. It wraps ErrNotFound for an
// unknown action, ErrInvalid for a count below 1.
func (s *Store) WillRequeue(ctx context.Context, id int64, restarts int, tag string) error {
	if restarts < 1 {
		return fmt.Errorf("store: action %d's requeue: %w: restart count %d, want at least 1", id, ErrInvalid, restarts)
	}
	if err := s.updateAction(ctx, `UPDATE plan_history SET requeue_count = ?1, tag = CASE WHEN ?2 = '' THEN tag ELSE ?2 END WHERE id = ?3`,
		restarts, tag, id); err != nil {
		return fmt.Errorf("store: record action %d's requeue: %w", id, err)
	}
	return nil
}

// updateAction runs query, an UPDATE of one action, in a write of its
// own; ErrNotFound when it changed none.
func (s *Store) updateAction(ctx context.Context, query string, args ...any) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNotFound
		}
		return nil
	})
}

// AwaitAck marks action id as one that may have requeued its job without
// the job's tag saying so yet: a preemption or restart that failed after
// its requeue, or whose requeue timed out after Slurm may have taken it.
// Until the tag is written (Acked), the requeue reads as someone else's,
// and a restarted rubickd finds it with Unacked, with mail (AckMail: the
// mail types the action quieted, "" for none). It wraps ErrNotFound for
// an unknown action.
func (s *Store) AwaitAck(ctx context.Context, id int64, mail string) error {
	if err := s.updateAction(ctx, `UPDATE plan_history SET awaits_ack = 1, ack_mail = NULLIF(?, '') WHERE id = ?`, mail, id); err != nil {
		return fmt.Errorf("store: mark action %d as awaiting its tag: %w", id, err)
	}
	return nil
}

// Acked clears AwaitAck from every action of job jobID: its tag says the
// requeue was rubick's now, or nothing waits for it any more (the job
// started again, or left Slurm).
func (s *Store) Acked(ctx context.Context, jobID int64) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE plan_history SET awaits_ack = 0 WHERE job_id = ? AND awaits_ack = 1`, jobID)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: acknowledge requeue of job %d: %w", jobID, err)
	}
	return nil
}

// Unacked returns the actions marked with AwaitAck and not Acked since,
// oldest first.
func (s *Store) Unacked(ctx context.Context) ([]Action, error) {
	out, err := s.actions(ctx, s.r, `awaits_ack = 1`)
	if err != nil {
		return nil, fmt.Errorf("store: actions awaiting their tag: %w", err)
	}
	return out, nil
}

// Starts returns, for each of the jobs ids that has any, its recorded
// starts (kind "start") that have a tag, newest first. Each was recorded
// before it resized its job, so its tag holds the job's request as it was
// then, and its resources and nodes what it resized the job to: what a
// start that failed or stopped after its resize, before its tag's write,
// left Slurm with, and without.
func (s *Store) Starts(ctx context.Context, ids []int64) (map[int64][]Action, error) {
	// A job rubick has not tagged has few starts: one, or, after such a
	// failure, one a cycle until one writes its tag.
	out, err := s.tagged(ctx, []string{"start"}, ids)
	if err != nil {
		return nil, fmt.Errorf("store: starts: %w", err)
	}
	return out, nil
}

// Tagged returns, for each of the jobs ids that has any, its recorded
// actions of the kinds given that have a tag, newest first, with their
// results: what each wrote, or may have written, to its job's tag, and
// whether Slurm took the whole action.
func (s *Store) Tagged(ctx context.Context, kinds []string, ids []int64) (map[int64][]Action, error) {
	out, err := s.tagged(ctx, kinds, ids)
	if err != nil {
		return nil, fmt.Errorf("store: tagged actions: %w", err)
	}
	return out, nil
}

func (s *Store) tagged(ctx context.Context, kinds []string, ids []int64) (map[int64][]Action, error) {
	out := map[int64][]Action{}
	if len(kinds) == 0 {
		return out, nil
	}
	args := idArgs(ids)
	fixed := make([]any, 0, len(kinds))
	for _, k := range kinds {
		fixed = append(fixed, k)
	}
	err := s.inChunks(ctx, `SELECT `+actionColumns+` FROM plan_history
		WHERE kind IN (?`+strings.Repeat(", ?", len(kinds)-1)+`) AND tag IS NOT NULL AND job_id IN `, args, func(rows *sql.Rows) error {
		a, err := scanAction(rows)
		if err != nil {
			return err
		}
		out[a.JobID] = append(out[a.JobID], a)
		return nil
	}, fixed...)
	if err != nil {
		return nil, err
	}
	for _, as := range out {
		slices.SortFunc(as, func(a, b Action) int { return cmp.Compare(b.ID, a.ID) })
	}
	return out, nil
}

// PlanHistory returns every action recorded for the job, oldest first.
func (s *Store) PlanHistory(ctx context.Context, jobID int64) ([]Action, error) {
	out, err := s.actions(ctx, s.r, `job_id = ?`, jobID)
	if err != nil {
		return nil, fmt.Errorf("store: plan history of job %d: %w", jobID, err)
	}
	return out, nil
}

// Decision returns the decision cycle with its reasons and actions, or an
// error wrapping ErrNotFound.
func (s *Store) Decision(ctx context.Context, cycleID int64) (Decision, error) {
	var d Decision
	err := s.read(ctx, func(tx *sql.Tx) error {
		var at, dur int64
		var unchanged sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT cycle_id, decided_ns, policy, duration_ns, unchanged FROM decisions WHERE cycle_id = ?`,
			cycleID).Scan(&d.CycleID, &at, &d.Policy, &dur, &unchanged)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if unchanged.Valid {
			if err := json.Unmarshal([]byte(unchanged.String), &d.Unchanged); err != nil {
				return fmt.Errorf("unchanged jobs %q: %w", unchanged.String, err)
			}
		}
		d.At, d.Duration = time.Unix(0, at).UTC(), time.Duration(dur)
		rows, err := tx.QueryContext(ctx, `SELECT job_id, reason FROM decision_reasons WHERE cycle_id = ?`, cycleID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var job int64
			var r string
			if err := rows.Scan(&job, &r); err != nil {
				return err
			}
			if d.Reasons == nil {
				d.Reasons = map[int64]json.RawMessage{}
			}
			d.Reasons[job] = json.RawMessage(r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		d.Actions, err = s.actions(ctx, tx, `cycle_id = ?`, cycleID)
		return err
	})
	if err != nil {
		return Decision{}, fmt.Errorf("store: decision %d: %w", cycleID, err)
	}
	return d, nil
}

// LastCycle returns the id of the newest recorded decision cycle, or an
// error wrapping ErrNotFound before the first.
func (s *Store) LastCycle(ctx context.Context) (int64, error) {
	var id sql.NullInt64
	if err := s.r.QueryRowContext(ctx, `SELECT MAX(cycle_id) FROM decisions`).Scan(&id); err != nil {
		return 0, fmt.Errorf("store: last cycle: %w", err)
	}
	if !id.Valid {
		return 0, fmt.Errorf("store: last cycle: %w", ErrNotFound)
	}
	return id.Int64, nil
}

// LastSeen returns when the newest decision cycle that saw the job was
// recorded: one that stored a reason for it or lists it as unchanged. The
// job's own record (Job.Updated) is not rewritten by a cycle that leaves
// it alone for a reason stored before, so it can be hours older. Zero
// when no stored cycle names the job.
func (s *Store) LastSeen(ctx context.Context, jobID int64) (time.Time, error) {
	// Only the cycles from the job's newest reason on can list it as
	// unchanged (an unchanged job's reason is stored before); newest first,
	// the first match ends the scan.
	var at int64
	err := s.r.QueryRowContext(ctx, `
		SELECT d.decided_ns FROM decisions d
		WHERE d.cycle_id >= COALESCE((SELECT MAX(cycle_id) FROM decision_reasons WHERE job_id = ?), 0)
		  AND (EXISTS (SELECT 1 FROM decision_reasons r WHERE r.cycle_id = d.cycle_id AND r.job_id = ?)
		       OR (d.unchanged IS NOT NULL AND EXISTS (SELECT 1 FROM json_each(d.unchanged) WHERE value = ?)))
		ORDER BY d.cycle_id DESC LIMIT 1`, jobID, jobID, jobID).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("store: last cycle that saw job %d: %w", jobID, err)
	}
	return time.Unix(0, at).UTC(), nil
}

// ReasonsAsOf returns, for each of the jobs ids with a reason stored in
// cycle cycleID or before, the newest such reason: what that cycle said of
// a job it lists as Unchanged. A job whose reasons up to the cycle were all
// pruned is missing from the map.
func (s *Store) ReasonsAsOf(ctx context.Context, cycleID int64, ids []int64) (map[int64]Reason, error) {
	out := map[int64]Reason{}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	// decision_reasons_by_job (job_id, cycle_id) finds each job's newest
	// reason up to the cycle without a scan.
	err := s.inChunks(ctx, `SELECT r.cycle_id, d.decided_ns, d.policy, r.job_id, r.reason
		FROM decision_reasons r JOIN decisions d USING (cycle_id)
		WHERE r.cycle_id = (SELECT MAX(cycle_id) FROM decision_reasons WHERE job_id = r.job_id AND cycle_id <= ?)
		  AND r.job_id IN `, args, func(rows *sql.Rows) error {
		r, err := scanReason(rows)
		if err != nil {
			return err
		}
		out[r.JobID] = r
		return nil
	}, cycleID)
	if err != nil {
		return nil, fmt.Errorf("store: reasons as of cycle %d: %w", cycleID, err)
	}
	return out, nil
}

// scanReason reads a row of cycle_id, decided_ns, policy, job_id, reason.
func scanReason(sc scanner) (Reason, error) {
	var r Reason
	var at int64
	var text string
	if err := sc.Scan(&r.CycleID, &at, &r.Policy, &r.JobID, &text); err != nil {
		return Reason{}, err
	}
	r.At, r.Reason = time.Unix(0, at).UTC(), json.RawMessage(text)
	return r, nil
}

// Reasons returns the explanations recorded for the job, newest first, at
// most limit of them (all when limit <= 0).
func (s *Store) Reasons(ctx context.Context, jobID int64, limit int) ([]Reason, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.r.QueryContext(ctx, `
		SELECT r.cycle_id, d.decided_ns, d.policy, r.job_id, r.reason
		FROM decision_reasons r JOIN decisions d USING (cycle_id)
		WHERE r.job_id = ? ORDER BY r.cycle_id DESC LIMIT ?`, jobID, limit)
	if err != nil {
		return nil, fmt.Errorf("store: reasons of job %d: %w", jobID, err)
	}
	defer rows.Close()
	var out []Reason
	for rows.Next() {
		r, err := scanReason(rows)
		if err != nil {
			return nil, fmt.Errorf("store: reasons of job %d: %w", jobID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: reasons of job %d: %w", jobID, err)
	}
	return out, nil
}

// Span is a stretch of time, From included, To not.
type Span struct{ From, To time.Time }

// NewestReasons returns, for each of spans in turn, the newest of the
// job's reasons recorded within it; a zero Reason (CycleID 0) for a span
// without one, its reasons never stored or pruned. One read serves every
// span: the report asks it for each run of a job.
func (s *Store) NewestReasons(ctx context.Context, jobID int64, spans []Span) ([]Reason, error) {
	out := make([]Reason, len(spans))
	// Three parameters a span, well within SQLite's 32,766.
	const chunk = 1000
	for first := 0; first < len(spans); first += chunk {
		part := spans[first:min(first+chunk, len(spans))]
		args := make([]any, 0, 3*len(part)+2)
		for i, sp := range part {
			args = append(args, first+i, sp.From.UnixNano(), sp.To.UnixNano())
		}
		args = append(args, jobID, jobID)
		// decision_reasons_by_job (job_id, cycle_id) walks the job's
		// reasons from the newest to each span's newest.
		rows, err := s.r.QueryContext(ctx, `
			WITH spans(i, from_ns, to_ns) AS (VALUES (?, ?, ?)`+strings.Repeat(", (?, ?, ?)", len(part)-1)+`)
			SELECT sp.i, r.cycle_id, d.decided_ns, d.policy, r.job_id, r.reason
			FROM spans sp
			JOIN decision_reasons r ON r.job_id = ? AND r.cycle_id = (
				SELECT r2.cycle_id FROM decision_reasons r2 JOIN decisions d2 USING (cycle_id)
				WHERE r2.job_id = ? AND d2.decided_ns >= sp.from_ns AND d2.decided_ns < sp.to_ns
				ORDER BY r2.cycle_id DESC LIMIT 1)
			JOIN decisions d ON d.cycle_id = r.cycle_id`, args...)
		if err != nil {
			return nil, fmt.Errorf("store: newest reasons of job %d: %w", jobID, err)
		}
		for rows.Next() {
			var i int
			var at int64
			var r Reason
			var text string
			if err := rows.Scan(&i, &r.CycleID, &at, &r.Policy, &r.JobID, &text); err != nil {
				rows.Close()
				return nil, fmt.Errorf("store: newest reasons of job %d: %w", jobID, err)
			}
			r.At, r.Reason = time.Unix(0, at).UTC(), json.RawMessage(text)
			out[i] = r
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("store: newest reasons of job %d: %w", jobID, err)
		}
	}
	return out, nil
}
