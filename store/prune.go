package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Retention says what Prune keeps. Zero values keep everything of that
// kind.
type Retention struct {
	// ReasonsBefore: per-job reasons of decision cycles older than this
	// are deleted, except each job's newest (what rubick explain shows
	// first), and then the cycles left with neither reasons nor actions.
	// Plan history is never pruned.
	ReasonsBefore time.Time
	// SamplesPerConfig bounds the online samples kept per job and
	// configuration (model type, plan, placement, CPUs): the newest are
	// kept. The Learner takes the median per configuration, which this
	// many samples already fix; profile and artifact samples are kept.
	SamplesPerConfig int
}

// Pruned counts what Prune deleted.
type Pruned struct {
	Reasons   int64 `json:"reasons"`
	Decisions int64 `json:"decisions"`
	Samples   int64 `json:"samples"`
}

// Prune deletes what r does not keep, one kind per transaction, so that a
// crash between kinds leaves a consistent database.
func (s *Store) Prune(ctx context.Context, r Retention) (Pruned, error) {
	var p Pruned
	if r.SamplesPerConfig < 0 {
		return p, fmt.Errorf("store: prune: %w: samples_per_config=%d must be >= 0", ErrInvalid, r.SamplesPerConfig)
	}
	exec := func(what string, n *int64, query string, args ...any) error {
		return s.write(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, query, args...)
			if err != nil {
				return fmt.Errorf("store: prune %s: %w", what, err)
			}
			*n, err = res.RowsAffected()
			return err
		})
	}
	if !r.ReasonsBefore.IsZero() {
		before := r.ReasonsBefore.UnixNano()
		if err := exec("reasons", &p.Reasons, `
			DELETE FROM decision_reasons
			WHERE cycle_id IN (SELECT cycle_id FROM decisions WHERE decided_ns < ?1)
			  AND (job_id, cycle_id) NOT IN (SELECT job_id, MAX(cycle_id) FROM decision_reasons GROUP BY job_id)`,
			before); err != nil {
			return p, err
		}
		if err := exec("decisions", &p.Decisions, `
			DELETE FROM decisions
			WHERE decided_ns < ?1
			  AND cycle_id NOT IN (SELECT cycle_id FROM decision_reasons)
			  AND cycle_id NOT IN (SELECT cycle_id FROM plan_history WHERE cycle_id IS NOT NULL)`,
			before); err != nil {
			return p, err
		}
	}
	if r.SamplesPerConfig > 0 {
		if err := exec("samples", &p.Samples, `
			DELETE FROM samples WHERE id IN (
				SELECT id FROM (
					SELECT id, ROW_NUMBER() OVER (
						PARTITION BY source_job, model_type, dp, tp, pp, micro_batch, accum, zero, offload,
							checkpoint, placement, cpus
						ORDER BY id DESC) AS nth
					FROM samples WHERE source = ?1)
				WHERE nth > ?2)`,
			string(SourceOnline), r.SamplesPerConfig); err != nil {
			return p, err
		}
	}
	return p, nil
}

// Stats is what the store holds, for operators sizing retention.
type Stats struct {
	SchemaVersion int `json:"schema_version"`
	// Rows counts the rows of each table of the schema, but
	// schema_migrations (SchemaVersion says what it holds).
	Rows map[string]int64 `json:"rows"`
	// OnlineSamples are the samples jobs reported (the ones Prune bounds).
	OnlineSamples int64 `json:"online_samples"`
	// PendingActions are the actions decided and not resolved: a running
	// rubickd's being applied, or those a rubickd that stopped left, which
	// the next one's Reconcile settles at its start. AwaitingTag are the
	// requeues awaiting the tag that says they were rubick's (AwaitAck).
	PendingActions int64 `json:"pending_actions"`
	AwaitingTag    int64 `json:"awaiting_tag"`
	// OldestCycle and NewestCycle are the times of the stored decision
	// cycles; zero without any.
	OldestCycle time.Time `json:"oldest_cycle,omitzero"`
	NewestCycle time.Time `json:"newest_cycle,omitzero"`
	// Bytes is the database's size in pages, FreeBytes the part SQLite
	// will reuse before growing the file.
	Bytes     int64 `json:"bytes"`
	FreeBytes int64 `json:"free_bytes"`
}

// Stats reads what the store holds in one read transaction.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	st := Stats{Rows: map[string]int64{}}
	err := s.read(ctx, func(tx *sql.Tx) error {
		v, err := schemaVersion(ctx, tx)
		if err != nil {
			return err
		}
		st.SchemaVersion = v
		tables, err := statsTables(ctx, tx)
		if err != nil {
			return err
		}
		for _, t := range tables {
			var n int64
			// t is a table name the schema holds, never input; quoted all the same.
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM "`+strings.ReplaceAll(t, `"`, `""`)+`"`).Scan(&n); err != nil {
				return fmt.Errorf("count %s: %w", t, err)
			}
			st.Rows[t] = n
		}
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM samples WHERE source = ?`, string(SourceOnline)).Scan(&st.OnlineSamples); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(result IS NULL), 0), COALESCE(SUM(awaits_ack = 1), 0) FROM plan_history`).
			Scan(&st.PendingActions, &st.AwaitingTag); err != nil {
			return err
		}
		var oldest, newest sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MIN(decided_ns), MAX(decided_ns) FROM decisions`).Scan(&oldest, &newest); err != nil {
			return err
		}
		st.OldestCycle, st.NewestCycle = fromTimestamp(oldest), fromTimestamp(newest)
		var pages, free, size int64
		for _, q := range []struct {
			pragma string
			into   *int64
		}{{"page_count", &pages}, {"freelist_count", &free}, {"page_size", &size}} {
			if err := tx.QueryRowContext(ctx, `PRAGMA `+q.pragma).Scan(q.into); err != nil {
				return fmt.Errorf("pragma %s: %w", q.pragma, err)
			}
		}
		st.Bytes, st.FreeBytes = pages*size, free*size
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("store: stats: %w", err)
	}
	return st, nil
}

// statsTables lists the tables Stats counts, read from the schema so that
// a table a migration adds is counted without another list to keep:
// every table but schema_migrations and SQLite's own (sqlite_sequence).
func statsTables(ctx context.Context, tx *sql.Tx) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM sqlite_schema
		WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' AND name <> 'schema_migrations'
		ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("list tables: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	return out, nil
}
