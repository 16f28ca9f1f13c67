package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// migration is one schema change. Versions start at 1 and are contiguous;
// a released migration is never edited, only followed by a new one.
type migration struct {
	version int
	name    string
	up      string
}

// migrations lists every schema change this binary knows, oldest first.
func migrations() []migration {
	return []migration{
		{version: 1, name: "initial schema", up: schemaV1},
		{version: 2, name: "restart costs", up: schemaV2},
		{version: 3, name: "3D compute factor, launch limits", up: schemaV3},
		{version: 4, name: "launch lines' global batch", up: schemaV4},
		{version: 5, name: "job array tasks", up: schemaV5},
		{version: 6, name: "jobs' model type without their global batch", up: schemaV6},
		{version: 7, name: "jobs' waits outside the queue (holds, begin times, dependencies)", up: schemaV7},
		{version: 8, name: "jobs' users", up: schemaV8},
		{version: 9, name: "jobs a cycle left alone for an earlier reason", up: schemaV9},
		{version: 10, name: "actions' tags, requeues awaiting their tag", up: schemaV10},
		{version: 11, name: "actions' node lists", up: schemaV11},
		{version: 12, name: "profiling phases reported over", up: schemaV12},
		{version: 13, name: "model types' replaced specs", up: schemaV13},
		{version: 14, name: "jobs' runs as last seen", up: schemaV14},
		{version: 15, name: "launch limits' model type without their global batch", up: schemaV15},
		{version: 16, name: "restart counts rubick's requeues give their jobs", up: schemaV16},
	}
}

// SchemaVersion is the schema version this binary migrates databases to.
func SchemaVersion() int { return len(migrations()) }

const bootstrap = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_ns INTEGER NOT NULL
) STRICT`

// schemaV1 holds times as Unix nanoseconds (UTC), plans in the compact form
// of model.Plan.String and placements in the form of model.Placement.String.
const schemaV1 = `
CREATE TABLE model_types (
	name       TEXT    PRIMARY KEY CHECK (name <> ''),
	spec       TEXT    NOT NULL CHECK (json_valid(spec)),
	created_ns INTEGER NOT NULL,
	updated_ns INTEGER NOT NULL
) STRICT;

CREATE TABLE fits (
	id         INTEGER PRIMARY KEY,
	model_type TEXT    NOT NULL REFERENCES model_types(name),
	k_bwd      REAL    NOT NULL,
	k_sync     REAL    NOT NULL,
	k_opt      REAL    NOT NULL,
	k_opt_off  REAL    NOT NULL,
	k_off      REAL    NOT NULL,
	k_swap     REAL    NOT NULL,
	k_const    REAL    NOT NULL,
	rmsle      REAL    NOT NULL CHECK (rmsle >= 0),
	mape_pct   REAL    NOT NULL CHECK (mape_pct >= 0),
	samples    INTEGER NOT NULL CHECK (samples >= 0),
	pinned        TEXT    NOT NULL CHECK (json_valid(pinned)),
	params_source TEXT    NOT NULL,
	origin        TEXT    NOT NULL CHECK (origin <> ''),
	created_ns INTEGER NOT NULL,
	current    INTEGER NOT NULL CHECK (current IN (0, 1))
) STRICT;
CREATE INDEX fits_by_model ON fits(model_type, id);
-- At most one current fit per model type, whatever the code does.
CREATE UNIQUE INDEX fits_current ON fits(model_type) WHERE current = 1;

CREATE TABLE samples (
	id          INTEGER PRIMARY KEY,
	model_type  TEXT    NOT NULL REFERENCES model_types(name),
	dp          INTEGER NOT NULL CHECK (dp >= 1),
	tp          INTEGER NOT NULL CHECK (tp >= 1),
	pp          INTEGER NOT NULL CHECK (pp >= 1),
	micro_batch INTEGER NOT NULL CHECK (micro_batch >= 1),
	accum       INTEGER NOT NULL CHECK (accum >= 1),
	zero        INTEGER NOT NULL CHECK (zero BETWEEN 0 AND 3),
	offload     INTEGER NOT NULL CHECK (offload IN (0, 1)),
	checkpoint  INTEGER NOT NULL CHECK (checkpoint IN (0, 1)),
	placement   TEXT    NOT NULL,
	gpus        INTEGER NOT NULL CHECK (gpus >= 1),
	cpus        INTEGER NOT NULL CHECK (cpus >= 0),
	host_mem_gb REAL    NOT NULL CHECK (host_mem_gb >= 0),
	iter_s      REAL    NOT NULL CHECK (iter_s > 0),
	fwd_s       REAL    NOT NULL,
	cc_s        REAL    NOT NULL,
	opt_s       REAL    NOT NULL,
	source_job  INTEGER,
	source      TEXT    NOT NULL CHECK (source <> ''),
	created_ns  INTEGER NOT NULL
) STRICT;
CREATE INDEX samples_by_model ON samples(model_type, id);
CREATE INDEX samples_by_job ON samples(source_job) WHERE source_job IS NOT NULL;

CREATE TABLE jobs (
	job_id           INTEGER PRIMARY KEY CHECK (job_id > 0),
	model_type       TEXT,
	class            TEXT    NOT NULL CHECK (class IN ('guaranteed', 'best-effort')),
	tenant           TEXT    NOT NULL,
	state            TEXT    NOT NULL CHECK (state <> ''),
	submitted_ns     INTEGER,
	first_seen_ns    INTEGER NOT NULL,
	updated_ns       INTEGER NOT NULL,
	last_plan        TEXT,
	last_placement   TEXT,
	last_cpus        INTEGER,
	last_host_mem_gb REAL
) STRICT;
CREATE INDEX jobs_by_state ON jobs(state);

CREATE TABLE decisions (
	cycle_id    INTEGER PRIMARY KEY AUTOINCREMENT,
	decided_ns  INTEGER NOT NULL,
	policy      TEXT    NOT NULL CHECK (policy <> ''),
	duration_ns INTEGER NOT NULL CHECK (duration_ns >= 0)
) STRICT;

CREATE TABLE decision_reasons (
	cycle_id INTEGER NOT NULL REFERENCES decisions(cycle_id),
	job_id   INTEGER NOT NULL,
	reason   TEXT    NOT NULL CHECK (json_valid(reason)),
	PRIMARY KEY (cycle_id, job_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX decision_reasons_by_job ON decision_reasons(job_id, cycle_id);

CREATE TABLE plan_history (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	cycle_id    INTEGER REFERENCES decisions(cycle_id),
	job_id      INTEGER NOT NULL REFERENCES jobs(job_id),
	kind        TEXT    NOT NULL CHECK (kind <> ''),
	plan        TEXT,
	placement   TEXT,
	cpus        INTEGER NOT NULL CHECK (cpus >= 0),
	host_mem_gb REAL    NOT NULL CHECK (host_mem_gb >= 0),
	decided_ns  INTEGER NOT NULL,
	applied_ns  INTEGER,
	result      TEXT    CHECK (result IN ('ok', 'failed', 'abandoned')),
	error       TEXT    NOT NULL,
	CHECK ((result IS NULL) = (applied_ns IS NULL))
) STRICT;
CREATE INDEX plan_history_by_job ON plan_history(job_id, id);
CREATE INDEX plan_history_by_cycle ON plan_history(cycle_id) WHERE cycle_id IS NOT NULL;
CREATE INDEX plan_history_pending ON plan_history(id) WHERE result IS NULL;
`

// schemaV2 keeps the trainer's iteration counter of online samples (NULL
// for profile and artifact samples), so that progress across a
// checkpoint-restart can be counted, and the restart costs measured from it.
const schemaV2 = `
ALTER TABLE samples ADD COLUMN iteration INTEGER CHECK (iteration IS NULL OR iteration >= 0);

CREATE TABLE restart_costs (
	action_id   INTEGER PRIMARY KEY REFERENCES plan_history(id),
	job_id      INTEGER NOT NULL REFERENCES jobs(job_id),
	model_type  TEXT    NOT NULL REFERENCES model_types(name),
	cost_s      REAL    NOT NULL CHECK (cost_s >= 0),
	signaled_ns INTEGER NOT NULL,
	resumed_ns  INTEGER NOT NULL CHECK (resumed_ns >= signaled_ns),
	before_iter INTEGER NOT NULL CHECK (before_iter >= 0),
	after_iter  INTEGER NOT NULL CHECK (after_iter >= before_iter),
	measured_ns INTEGER NOT NULL
) STRICT;
CREATE INDEX restart_costs_by_model ON restart_costs(model_type, action_id);
CREATE INDEX restart_costs_by_job ON restart_costs(job_id, action_id);
-- rubickd looks up the recent restarts every cycle; plan history is never pruned.
CREATE INDEX plan_history_by_kind ON plan_history(kind, decided_ns);
`

// schemaV3 adds the fitted factor on the compute of TP and PP plans (the
// fits made before it priced them at 1, which they keep), and the plan
// features a job's launch line cannot express, as rubick-srun reports them
// (model.Features' form, empty for none; NULL until the job reports),
// with each user's newest report per model type, which stands for a job of
// theirs that has not reported yet.
const schemaV3 = `
ALTER TABLE fits ADD COLUMN k_3d REAL NOT NULL DEFAULT 1 CHECK (k_3d > 0);
ALTER TABLE jobs ADD COLUMN cannot TEXT;

CREATE TABLE launch_limits (
	user_name  TEXT    NOT NULL CHECK (user_name <> ''),
	model_type TEXT    NOT NULL CHECK (model_type <> ''),
	cannot     TEXT    NOT NULL,
	job_id     INTEGER NOT NULL REFERENCES jobs(job_id),
	updated_ns INTEGER NOT NULL,
	PRIMARY KEY (user_name, model_type)
) STRICT, WITHOUT ROWID;
`

// schemaV4 keeps the global batch a job trains with (0: not reported), as
// rubick-srun reports it, beside what its launch line cannot run.
const schemaV4 = `
ALTER TABLE jobs ADD COLUMN global_batch INTEGER NOT NULL DEFAULT 0 CHECK (global_batch >= 0);
ALTER TABLE launch_limits ADD COLUMN global_batch INTEGER NOT NULL DEFAULT 0 CHECK (global_batch >= 0);
`

// schemaV5 keeps which task of which job array a job is, so that users can
// name it as squeue shows it (A_T).
const schemaV5 = `
ALTER TABLE jobs ADD COLUMN array_job_id INTEGER CHECK (array_job_id IS NULL OR array_job_id > 0);
ALTER TABLE jobs ADD COLUMN array_task_id INTEGER CHECK (array_task_id IS NULL OR array_task_id >= 0);
CREATE INDEX jobs_array_task ON jobs(array_job_id, array_task_id) WHERE array_job_id IS NOT NULL;
`

// schemaV6 gives the jobs stored as "TYPE@gbN" their model type back.
// rubickd named a job that trains with a global batch of its own by its
// estimator ("gpt2@gb64"), a name no model type has, so rubick explain
// found no fit for it. The batch itself is in global_batch, as reported,
// or in the last plan.
const schemaV6 = `
UPDATE jobs SET model_type = substr(model_type, 1, instr(model_type, '@gb') - 1)
WHERE instr(model_type, '@gb') > 1
	AND substr(model_type, instr(model_type, '@gb') + 3) GLOB '[1-9]*'
	AND substr(model_type, instr(model_type, '@gb') + 3) NOT GLOB '*[^0-9]*';
`

// schemaV7 keeps when a job last waited outside the queue: held by its
// user or an administrator, or, before its first start, for its --begin or
// its dependencies. Its age in the queue counts from then, not from its
// submission.
const schemaV7 = `
ALTER TABLE jobs ADD COLUMN deferred_ns INTEGER;
`

// schemaV8 keeps the Slurm user who owns each job, so that rubick queue
// can show a user their own jobs as squeue -u does.
const schemaV8 = `
ALTER TABLE jobs ADD COLUMN user_name TEXT CHECK (user_name IS NULL OR user_name <> '');
`

// schemaV9 lists, per cycle, the jobs rubickd left alone for the reason
// stored with them in an earlier cycle (a JSON array of job ids): each
// reason is stored once, when it first appears or changes, so without the
// list a cycle would not say which such jobs it still saw.
const schemaV9 = `
ALTER TABLE decisions ADD COLUMN unchanged TEXT CHECK (unchanged IS NULL OR json_valid(unchanged));
`

// schemaV10 keeps the rubick tag each action writes (NULL: none, or
// recorded before v10), and marks the actions that may have requeued their
// job without its tag saying so yet (a failed preemption or restart): the
// job then reads as requeued by someone else until rubickd writes that
// tag, and a rubickd that restarts in between must still know the requeue
// is its own; ack_mail is the mail types the action took out of the job's
// (a tag's mail= value), which that tag keeps for the job's next start.
const schemaV10 = `
ALTER TABLE plan_history ADD COLUMN tag TEXT CHECK (tag IS NULL OR tag <> '');
ALTER TABLE plan_history ADD COLUMN awaits_ack INTEGER NOT NULL DEFAULT 0 CHECK (awaits_ack IN (0, 1));
ALTER TABLE plan_history ADD COLUMN ack_mail TEXT CHECK (ack_mail IS NULL OR ack_mail <> '');
CREATE INDEX plan_history_awaiting_ack ON plan_history(id) WHERE awaits_ack = 1;
`

// schemaV11 keeps the node list each action sends Slurm (a hostlist; NULL
// for none, and for the actions recorded before v11): a start that stopped
// after its resize left the job on those nodes, and rubickd tells them from
// a --nodelist its user set since.
const schemaV11 = `
ALTER TABLE plan_history ADD COLUMN nodes TEXT CHECK (nodes IS NULL OR nodes <> '');
`

// schemaV12 keeps the profiling phases jobs reported over (their launch
// notice's profiled), per job: the model type, when the notice came, and
// when a first-fit attempt of that type used it (NULL: none has yet). A
// rubickd restarted after taking a notice still fits the type on what the
// phase measured; a phase some attempt used triggers no other. The model
// type is the notice's: rubickd takes one for a type without a spec too,
// so it references no model_types row.
const schemaV12 = `
CREATE TABLE profiling_phases (
	job_id     INTEGER PRIMARY KEY REFERENCES jobs(job_id),
	model_type TEXT    NOT NULL CHECK (model_type <> ''),
	over_ns    INTEGER NOT NULL,
	used_ns    INTEGER
) STRICT;
CREATE INDEX profiling_phases_pending ON profiling_phases(model_type, job_id) WHERE used_ns IS NULL;
`

// schemaV13 keeps each spec ReplaceSpec replaced, with the fit that was
// current under it (NULL: none): the fits stay, and a fit means nothing
// without the spec it was made against.
const schemaV13 = `
CREATE TABLE replaced_specs (
	id          INTEGER PRIMARY KEY,
	model_type  TEXT    NOT NULL REFERENCES model_types(name),
	spec        TEXT    NOT NULL CHECK (json_valid(spec)),
	fit_id      INTEGER REFERENCES fits(id),
	replaced_ns INTEGER NOT NULL
) STRICT;
CREATE INDEX replaced_specs_by_model ON replaced_specs(model_type, id);
`

// schemaV14 keeps each job's run as rubickd last saw it running: Slurm's
// restart count then, and its run time (NULL: never seen running). A
// rubickd restarted after Slurm requeued the job by itself (a node
// failure) still counts that run in the job's run time.
const schemaV14 = `
ALTER TABLE jobs ADD COLUMN run_restarts INTEGER CHECK (run_restarts IS NULL OR run_restarts >= 0);
ALTER TABLE jobs ADD COLUMN run_ns INTEGER CHECK (run_ns IS NULL OR run_ns > 0);
`

// schemaV15 does for the launch limits what schemaV6 did for the jobs:
// a user's report stored under "TYPE@gbN" is under TYPE, where a new job
// of theirs looks for it (LaunchLimits). Of the reports that then share a
// name, the newest stays, as SetJobLaunch keeps it (ties go to the plain
// name, then the lower N's). The temporary table names each @gb row's type.
const schemaV15 = `
CREATE TEMP TABLE gb_limits AS
SELECT user_name, model_type, substr(model_type, 1, instr(model_type, '@gb') - 1) AS base, updated_ns
FROM launch_limits
WHERE instr(model_type, '@gb') > 1
	AND substr(model_type, instr(model_type, '@gb') + 3) GLOB '[1-9]*'
	AND substr(model_type, instr(model_type, '@gb') + 3) NOT GLOB '*[^0-9]*';

DELETE FROM launch_limits WHERE EXISTS (
	SELECT 1 FROM gb_limits g WHERE g.user_name = launch_limits.user_name AND g.model_type = launch_limits.model_type
	AND (EXISTS (SELECT 1 FROM launch_limits p WHERE p.user_name = g.user_name AND p.model_type = g.base AND p.updated_ns >= g.updated_ns)
		OR EXISTS (SELECT 1 FROM gb_limits o WHERE o.user_name = g.user_name AND o.base = g.base AND o.model_type <> g.model_type
			AND (o.updated_ns > g.updated_ns OR o.updated_ns = g.updated_ns AND length(o.model_type) < length(g.model_type)
				OR o.updated_ns = g.updated_ns AND length(o.model_type) = length(g.model_type) AND o.model_type < g.model_type))));

DELETE FROM launch_limits WHERE EXISTS (
	SELECT 1 FROM gb_limits g JOIN launch_limits k ON k.user_name = g.user_name AND k.model_type = g.model_type
	WHERE g.user_name = launch_limits.user_name AND g.base = launch_limits.model_type);

UPDATE launch_limits SET model_type = (
	SELECT g.base FROM gb_limits g WHERE g.user_name = launch_limits.user_name AND g.model_type = launch_limits.model_type)
WHERE EXISTS (SELECT 1 FROM gb_limits g WHERE g.user_name = launch_limits.user_name AND g.model_type = launch_limits.model_type);

DROP TABLE gb_limits;
`

// schemaV16 keeps the restart count a preemption's or restart's requeue
// gives its job, recorded just before rubick issues the requeue
// (WillRequeue; NULL: none issued): a restarted rubickd finding the job
// requeued and held takes the requeue for its own only if the job's count
// is that one, and leaves a hold its user or an administrator made while
// it was down, or after its own requeue, to them. An action left
// unresolved by an older rubickd gets -1 (RequeueUnknown): its requeue
// went unrecorded, and is taken for rubick's as that rubickd took it.
const schemaV16 = `
ALTER TABLE plan_history ADD COLUMN requeue_count INTEGER CHECK (requeue_count IS NULL OR requeue_count = -1 OR requeue_count > 0);
UPDATE plan_history SET requeue_count = -1 WHERE kind IN ('preempt', 'restart') AND (result IS NULL OR awaits_ack = 1);
`

// migrate brings db to the newest version in migs. Each migration runs in
// its own transaction together with its schema_migrations row, so a crash
// leaves the database at the previous version, never between two. The
// version is re-read inside each transaction, so two processes opening the
// same file at once apply every migration exactly once.
func migrate(ctx context.Context, db *sql.DB, migs []migration, now func() time.Time, log *slog.Logger) error {
	for i, m := range migs {
		if m.version != i+1 {
			return fmt.Errorf("migration %d (%s) has version %d, want %d", i, m.name, m.version, i+1)
		}
	}
	if _, err := db.ExecContext(ctx, bootstrap); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	for _, m := range migs {
		err := func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return fmt.Errorf("begin: %w", err)
			}
			defer tx.Rollback()
			cur, err := schemaVersion(ctx, tx)
			if err != nil {
				return err
			}
			if cur > len(migs) {
				return fmt.Errorf("%w: database is at version %d, this binary knows up to %d", ErrSchemaTooNew, cur, len(migs))
			}
			if cur >= m.version {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.up); err != nil {
				return fmt.Errorf("apply: %w", err)
			}
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO schema_migrations(version, name, applied_ns) VALUES (?, ?, ?)`,
				m.version, m.name, now().UnixNano()); err != nil {
				return fmt.Errorf("record: %w", err)
			}
			if err := tx.Commit(); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
			log.Info("store: applied migration", "version", m.version, "name", m.name)
			return nil
		}()
		if err != nil {
			if errors.Is(err, ErrSchemaTooNew) {
				return err
			}
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
	}
	// A database with no migrations to run still has to be checked.
	cur, err := schemaVersion(ctx, db)
	if err != nil {
		return err
	}
	if cur > len(migs) {
		return fmt.Errorf("%w: database is at version %d, this binary knows up to %d", ErrSchemaTooNew, cur, len(migs))
	}
	return nil
}

func schemaVersion(ctx context.Context, q querier) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}
