package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/model"
)

// Class is a job's service class (docs/admin-guide.md, Tenants and quotas;
// docs/policy.md, rubick (Algorithm 1)).
type Class string

// Job classes.
const (
	// Guaranteed jobs consume their tenant's quota and have a throughput SLO.
	Guaranteed Class = "guaranteed"
	// BestEffort jobs use no quota and may be preempted.
	BestEffort Class = "best-effort"
)

// Job is a Slurm job as rubick last saw it.
type Job struct {
	ID        int64  // Slurm job id
	ModelType string // "" for a rigid job without a model type
	Class     Class
	Tenant    string // Slurm account or QOS the quota is charged to
	// User is the Slurm user who owns the job; "" for unknown, which
	// UpsertJob does not store over a known one.
	User  string
	State string // Slurm job state, e.g. PENDING or RUNNING
	// Submitted is when the job was submitted, the same across its
	// requeues; a later one is another job of the same id (UpsertJob).
	Submitted time.Time
	FirstSeen time.Time // set by the store on the first UpsertJob, then kept
	Updated   time.Time // set by the store on every UpsertJob
	// LastPlan and LastResources are the last plan the job ran with or was
	// successfully given; zero when it has none yet.
	LastPlan      model.Plan
	LastResources model.Resources
	// Cannot is what the job's launch line cannot express, and GlobalBatch
	// the global batch it trains with (0: not reported), as rubick-srun
	// reported them (SetJobLaunch); UpsertJob leaves both alone, but for
	// another job of the id.
	Cannot      model.Features
	GlobalBatch int
	// ArrayJobID and ArrayTaskID name the task of a job array the job is
	// (squeue's A_T), once split off the array; ArrayJobID is 0 for other
	// jobs.
	ArrayJobID, ArrayTaskID int64
	// Deferred is when rubickd last saw the job held by its user or an
	// administrator, or, before its first start, wait for its --begin or
	// its dependencies: it has queued for GPUs since. Zero when never;
	// UpsertJob then keeps the stored one.
	Deferred time.Time
	// LastRun is the job's run as rubickd last saw it running; zero when
	// never. A zero LastRun.Time keeps the stored one (UpsertJob).
	LastRun Run
}

// Run is a job's run as seen at one moment: Slurm's restart count of the
// job then, which each requeue raises, and its run time so far.
type Run struct {
	Restarts int
	Time     time.Duration
}

// Predates reports whether a record dated at (an action's decision, a
// reason's cycle, a restart's signal) is older than the submission of the
// job it is stored under, submitted, by more than a second (submissions
// are whole seconds, and rubickd's clock may trail slurmctld's a little):
// it is an earlier job's that had the id. Slurm gives old ids to new jobs
// after its state is reset (StateSaveLocation wiped, FirstJobId) or past
// MaxJobId, and the store keys what it keeps of a job by its id; only its
// readers know which job they read for. A zero time of either predates
// nothing.
func Predates(at, submitted time.Time) bool {
	return !at.IsZero() && !submitted.IsZero() && at.Before(submitted.Add(-time.Second))
}

// UpsertJob stores j, replacing the stored fields of a known job except
// FirstSeen, which the store sets once. A zero LastPlan keeps the stored
// last plan: a job that is queued again still remembers how it last ran;
// a zero Deferred keeps the stored one, an empty User the stored one, a
// zero Submitted the stored one. A Submitted later than the stored one is
// another job that Slurm gave the same id (ids start again after
// slurmctld's state is reset): the row then starts afresh, FirstSeen,
// Deferred, User, the last plan and the launch facts (Cannot, GlobalBatch)
// set as for a job not seen before. The submission must stay the job's
// first across its requeues for that (the daemon's is).
func (s *Store) UpsertJob(ctx context.Context, j Job) error {
	return s.UpsertJobs(ctx, []Job{j})
}

// UpsertJobs stores jobs as UpsertJob does, in order, in one transaction:
// all or none. One commit, not one per job, is what keeps a cycle of
// thousands of jobs cheap (each commit syncs the log).
func (s *Store) UpsertJobs(ctx context.Context, jobs []Job) error {
	if len(jobs) == 0 {
		return nil
	}
	for _, j := range jobs {
		if err := checkJob(j); err != nil {
			return fmt.Errorf("store: upsert jobs: job %d: %w", j.ID, err)
		}
	}
	now := s.now().UnixNano()
	err := s.write(ctx, func(tx *sql.Tx) error {
		// One statement for all: preparing it per job cost about a
		// third of the batch.
		stmt, err := tx.PrepareContext(ctx, upsertJobSQL)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, j := range jobs {
			if err := upsertJob(ctx, stmt, j, now); err != nil {
				return fmt.Errorf("job %d: %w", j.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: upsert jobs: %w", err)
	}
	return nil
}

// upsertJobSQL stores one job; UpsertJobs prepares it once per batch.
const upsertJobSQL = `
		INSERT INTO jobs(job_id, model_type, class, tenant, state, submitted_ns, first_seen_ns, updated_ns,
			last_plan, last_placement, last_cpus, last_host_mem_gb, array_job_id, array_task_id, deferred_ns, user_name,
			run_restarts, run_ns)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9,
			CASE WHEN ?12 THEN ?10 END, CASE WHEN ?12 THEN ?11 END, ?13, CASE WHEN ?13 IS NOT NULL THEN ?14 END, ?15, ?16,
			CASE WHEN ?18 IS NOT NULL THEN ?17 END, ?18)
		ON CONFLICT(job_id) DO UPDATE SET
			model_type = excluded.model_type, class = excluded.class, tenant = excluded.tenant,
			state = excluded.state, updated_ns = excluded.updated_ns,
			array_job_id = excluded.array_job_id, array_task_id = excluded.array_task_id,
			submitted_ns = COALESCE(excluded.submitted_ns, submitted_ns),
			-- A later submission is another job that Slurm gave this id
			-- (Job.Submitted): nothing of the earlier one is its. NULL on
			-- either side compares as unknown, which resets nothing.
			first_seen_ns = CASE WHEN excluded.submitted_ns > submitted_ns THEN excluded.first_seen_ns ELSE first_seen_ns END,
			deferred_ns = CASE WHEN excluded.submitted_ns > submitted_ns THEN excluded.deferred_ns
				ELSE COALESCE(excluded.deferred_ns, deferred_ns) END,
			user_name = CASE WHEN excluded.submitted_ns > submitted_ns THEN excluded.user_name
				ELSE COALESCE(excluded.user_name, user_name) END,
			cannot       = CASE WHEN excluded.submitted_ns > submitted_ns THEN NULL ELSE cannot END,
			global_batch = CASE WHEN excluded.submitted_ns > submitted_ns THEN 0 ELSE global_batch END,
			run_restarts = CASE WHEN excluded.run_ns IS NOT NULL OR excluded.submitted_ns > submitted_ns
				THEN excluded.run_restarts ELSE run_restarts END,
			run_ns = CASE WHEN excluded.run_ns IS NOT NULL OR excluded.submitted_ns > submitted_ns
				THEN excluded.run_ns ELSE run_ns END,
			last_plan        = CASE WHEN ?12 OR excluded.submitted_ns > submitted_ns THEN excluded.last_plan ELSE last_plan END,
			last_placement   = CASE WHEN ?12 OR excluded.submitted_ns > submitted_ns THEN excluded.last_placement ELSE last_placement END,
			last_cpus        = CASE WHEN ?12 OR excluded.submitted_ns > submitted_ns THEN excluded.last_cpus ELSE last_cpus END,
			last_host_mem_gb = CASE WHEN ?12 OR excluded.submitted_ns > submitted_ns THEN excluded.last_host_mem_gb ELSE last_host_mem_gb END`

func upsertJob(ctx context.Context, stmt *sql.Stmt, j Job, now int64) error {
	plan, placement := planColumns(j.LastPlan, j.LastResources)
	hasPlan := plan.Valid
	if !hasPlan {
		placement = sql.NullString{}
	}
	mt := sql.NullString{String: j.ModelType, Valid: j.ModelType != ""}
	_, err := stmt.ExecContext(ctx,
		j.ID, mt, string(j.Class), j.Tenant, j.State, timestamp(j.Submitted), now,
		plan, placement, j.LastResources.CPUs, j.LastResources.HostMemGB, hasPlan,
		sql.NullInt64{Int64: j.ArrayJobID, Valid: j.ArrayJobID > 0}, j.ArrayTaskID,
		sql.NullInt64{Int64: j.Deferred.UnixNano(), Valid: !j.Deferred.IsZero()},
		sql.NullString{String: j.User, Valid: j.User != ""},
		j.LastRun.Restarts, sql.NullInt64{Int64: int64(j.LastRun.Time), Valid: j.LastRun.Time > 0})
	return err
}

func checkJob(j Job) error {
	if j.ID <= 0 {
		return fmt.Errorf("%w: job_id=%d must be > 0", ErrInvalid, j.ID)
	}
	if j.ModelType != "" {
		if err := checkName("model_type", j.ModelType); err != nil {
			return err
		}
	}
	if j.ArrayJobID < 0 || j.ArrayJobID > 0 && j.ArrayTaskID < 0 {
		return fmt.Errorf("%w: array task %d_%d must be > 0 and >= 0", ErrInvalid, j.ArrayJobID, j.ArrayTaskID)
	}
	if j.LastRun.Restarts < 0 || j.LastRun.Time < 0 {
		return fmt.Errorf("%w: last run restarts=%d run time=%v must be >= 0", ErrInvalid, j.LastRun.Restarts, j.LastRun.Time)
	}
	if j.Class != Guaranteed && j.Class != BestEffort {
		return fmt.Errorf("%w: class=%q must be %q or %q", ErrInvalid, j.Class, Guaranteed, BestEffort)
	}
	if err := checkName("state", j.State); err != nil {
		return err
	}
	if j.LastPlan != (model.Plan{}) {
		return checkPlan(j.LastPlan, j.LastResources)
	}
	return nil
}

// JobFilter selects jobs; its zero value selects every job.
type JobFilter struct {
	States    []string // any of these Slurm states; empty for any state
	ModelType string   // only this model type; empty for any
}

// Job returns the job with Slurm id id, or an error wrapping ErrNotFound.
func (s *Store) Job(ctx context.Context, id int64) (Job, error) {
	j, err := scanJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE job_id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, fmt.Errorf("store: job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Job{}, fmt.Errorf("store: job %d: %w", id, err)
	}
	return j, nil
}

// ArrayTask returns the job that is task task of job array array, or an
// error wrapping ErrNotFound. A requeued task keeps its job id.
func (s *Store) ArrayTask(ctx context.Context, array, task int64) (Job, error) {
	j, err := scanJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE array_job_id = ? AND array_task_id = ?
		ORDER BY job_id DESC LIMIT 1`, array, task))
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, fmt.Errorf("store: job %d_%d: %w", array, task, ErrNotFound)
	}
	if err != nil {
		return Job{}, fmt.Errorf("store: job %d_%d: %w", array, task, err)
	}
	return j, nil
}

// Jobs returns the jobs f selects, ordered by Slurm id.
func (s *Store) Jobs(ctx context.Context, f JobFilter) ([]Job, error) {
	var where []string
	var args []any
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if f.ModelType != "" {
		where = append(where, "model_type = ?")
		args = append(args, f.ModelType)
	}
	q := `SELECT ` + jobColumns + ` FROM jobs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY job_id", args...)
	if err != nil {
		return nil, fmt.Errorf("store: jobs: %w", err)
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("store: jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: jobs: %w", err)
	}
	return out, nil
}

const jobColumns = `job_id, model_type, class, tenant, state, submitted_ns, first_seen_ns, updated_ns,
	last_plan, last_placement, last_cpus, last_host_mem_gb, cannot, global_batch, array_job_id, array_task_id, deferred_ns, user_name,
	run_restarts, run_ns`

func scanJob(sc scanner) (Job, error) {
	var j Job
	var mt, class, plan, placement sql.NullString
	var submitted, first, updated, cpus sql.NullInt64
	var mem sql.NullFloat64
	var cannot sql.NullString
	var array, task, deferred sql.NullInt64
	var user sql.NullString
	var restarts, ran sql.NullInt64
	if err := sc.Scan(&j.ID, &mt, &class, &j.Tenant, &j.State, &submitted, &first, &updated,
		&plan, &placement, &cpus, &mem, &cannot, &j.GlobalBatch, &array, &task, &deferred, &user,
		&restarts, &ran); err != nil {
		return Job{}, err
	}
	j.LastRun = Run{Restarts: int(restarts.Int64), Time: time.Duration(ran.Int64)}
	j.User = user.String
	j.Deferred = fromTimestamp(deferred)
	j.ArrayJobID, j.ArrayTaskID = array.Int64, task.Int64
	var err error
	if j.Cannot, err = model.ParseFeatures(cannot.String); err != nil {
		return Job{}, fmt.Errorf("job %d: %w", j.ID, err)
	}
	j.ModelType, j.Class = mt.String, Class(class.String)
	j.Submitted, j.FirstSeen, j.Updated = fromTimestamp(submitted), fromTimestamp(first), fromTimestamp(updated)
	if j.LastPlan, j.LastResources.Placement, err = fromPlanColumns(plan, placement); err != nil {
		return Job{}, fmt.Errorf("job %d: %w", j.ID, err)
	}
	j.LastResources.CPUs, j.LastResources.HostMemGB = int(cpus.Int64), mem.Float64
	return j, nil
}

// Deferred returns, for those of the jobs ids the store has seen wait
// outside the queue (Job.Deferred), when it last saw them wait.
func (s *Store) Deferred(ctx context.Context, ids []int64) (map[int64]time.Time, error) {
	out, err := s.jobTimes(ctx, `SELECT job_id, deferred_ns FROM jobs WHERE deferred_ns IS NOT NULL AND job_id IN `, ids)
	if err != nil {
		return nil, fmt.Errorf("store: deferred jobs: %w", err)
	}
	return out, nil
}

// SeenRun is a job's run as last seen (Job.LastRun), with the job's
// submission (Job.Submitted), which tells whether it is the job of that id
// a reader has.
type SeenRun struct {
	Submitted time.Time
	Run
}

// LastRuns returns, for those of the jobs ids the store has seen running,
// their runs as last seen (Job.LastRun).
func (s *Store) LastRuns(ctx context.Context, ids []int64) (map[int64]SeenRun, error) {
	out := map[int64]SeenRun{}
	err := s.inChunks(ctx, `SELECT job_id, submitted_ns, run_restarts, run_ns FROM jobs WHERE run_ns IS NOT NULL AND job_id IN `, idArgs(ids),
		func(rows *sql.Rows) error {
			var id, restarts, ran int64
			var submitted sql.NullInt64
			if err := rows.Scan(&id, &submitted, &restarts, &ran); err != nil {
				return err
			}
			out[id] = SeenRun{Submitted: fromTimestamp(submitted), Run: Run{Restarts: int(restarts), Time: time.Duration(ran)}}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("store: last runs: %w", err)
	}
	return out, nil
}

// jobTimes runs query, which selects a job ID and a timestamp and ends in
// "IN ", for the jobs ids (inChunks), and returns each row's time by job.
func (s *Store) jobTimes(ctx context.Context, query string, ids []int64) (map[int64]time.Time, error) {
	out := map[int64]time.Time{}
	err := s.inChunks(ctx, query, idArgs(ids), func(rows *sql.Rows) error {
		var id int64
		var ns sql.NullInt64
		if err := rows.Scan(&id, &ns); err != nil {
			return err
		}
		out[id] = fromTimestamp(ns)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Launch is what a job's launch line says, as its rubick-srun reported
// it: the plan features it cannot express, and the global batch it trains
// with (0: not reported, as by a rubick-srun older than schema 4).
type Launch struct {
	Cannot      model.Features
	GlobalBatch int
	// Own: the job's own report, not its user's earlier job's.
	Own bool
	// Profiled, when set, is the model type whose profiling phase the
	// report says is over: SetJobLaunch keeps it, in the same transaction,
	// for that type's next first-fit attempt (PendingPhases). LaunchLimits
	// leaves it empty.
	Profiled string
}

// SetJobLaunch records what the launch line of job id says, as its
// rubick-srun reported it, and, when user is set, as the guess for user's
// next jobs of the same model type until they report. It wraps ErrNotFound
// when the store has never seen the job.
func (s *Store) SetJobLaunch(ctx context.Context, id int64, user string, l Launch) error {
	if l.GlobalBatch < 0 {
		return fmt.Errorf("store: job %d: %w: global_batch=%d is negative", id, ErrInvalid, l.GlobalBatch)
	}
	if l.Profiled != "" {
		if err := checkName("profiled model_type", l.Profiled); err != nil {
			return fmt.Errorf("store: job %d: %w", id, err)
		}
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var mt sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT model_type FROM jobs WHERE job_id = ?`, id).Scan(&mt); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return ErrNotFound
			}
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET cannot = ?, global_batch = ? WHERE job_id = ?`, l.Cannot.String(), l.GlobalBatch, id); err != nil {
			return err
		}
		if l.Profiled != "" {
			// A later notice of the same job (a requeued job whose phase
			// was over sends one at each start) is a phase over again.
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO profiling_phases(job_id, model_type, over_ns) VALUES (?, ?, ?)
				ON CONFLICT(job_id) DO UPDATE SET model_type = excluded.model_type, over_ns = excluded.over_ns, used_ns = NULL`,
				id, l.Profiled, s.now().UnixNano()); err != nil {
				return err
			}
		}
		if user == "" || !mt.Valid {
			return nil
		}
		_, err := tx.ExecContext(ctx, `
			INSERT INTO launch_limits(user_name, model_type, cannot, global_batch, job_id, updated_ns) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT(user_name, model_type) DO UPDATE SET
				cannot = excluded.cannot, global_batch = excluded.global_batch, job_id = excluded.job_id, updated_ns = excluded.updated_ns`,
			user, mt.String, l.Cannot.String(), l.GlobalBatch, id, s.now().UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("store: job %d: set cannot=%q global_batch=%d profiled=%q: %w", id, l.Cannot, l.GlobalBatch, l.Profiled, err)
	}
	return nil
}

// Phase is a job's profiling phase reported over (Launch.Profiled): Over
// is when its last notice came, which PhasesUsed matches.
type Phase struct {
	JobID int64
	Over  time.Time
}

// PendingPhases returns, per model type, the profiling phases reported
// over that no first-fit attempt of the type has used yet (PhasesUsed), in
// ascending order of job.
func (s *Store) PendingPhases(ctx context.Context) (map[string][]Phase, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT model_type, job_id, over_ns FROM profiling_phases WHERE used_ns IS NULL ORDER BY model_type, job_id`)
	if err != nil {
		return nil, fmt.Errorf("store: pending profiling phases: %w", err)
	}
	defer rows.Close()
	out := map[string][]Phase{}
	for rows.Next() {
		var mt string
		var id, over int64
		if err := rows.Scan(&mt, &id, &over); err != nil {
			return nil, fmt.Errorf("store: pending profiling phases: %w", err)
		}
		out[mt] = append(out[mt], Phase{JobID: id, Over: time.Unix(0, over).UTC()})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: pending profiling phases: %w", err)
	}
	return out, nil
}

// PhasesOver returns, for those of jobs ids whose rubick-srun reported
// their profiling phase over (Launch.Profiled), when its last notice came,
// used by a fit or not: rubickd profiles one job of a type at a time, and
// a running job's phase is over once a notice came since its start.
func (s *Store) PhasesOver(ctx context.Context, ids []int64) (map[int64]time.Time, error) {
	out, err := s.jobTimes(ctx, `SELECT job_id, over_ns FROM profiling_phases WHERE job_id IN `, ids)
	if err != nil {
		return nil, fmt.Errorf("store: profiling phases of jobs %v: %w", ids, err)
	}
	return out, nil
}

// PhasesUsed records that the Learner dealt with phases, as PendingPhases
// returned them (a first-fit attempt used them, or their type had a fit
// already): PendingPhases no longer returns them. A job whose phase was
// reported over again since, with samples that attempt did not see, stays
// pending, as does one that reports it over later.
func (s *Store) PhasesUsed(ctx context.Context, phases []Phase) error {
	if len(phases) == 0 {
		return nil
	}
	now := s.now().UnixNano()
	err := s.write(ctx, func(tx *sql.Tx) error {
		for _, p := range phases {
			if _, err := tx.ExecContext(ctx, `UPDATE profiling_phases SET used_ns = ? WHERE job_id = ? AND over_ns = ? AND used_ns IS NULL`,
				now, p.JobID, p.Over.UnixNano()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: profiling phases of jobs %v used: %w", PhaseJobs(phases), err)
	}
	return nil
}

// PhaseJobs are the jobs of phases, in their order.
func PhaseJobs(phases []Phase) []int64 {
	ids := make([]int64, len(phases))
	for i, p := range phases {
		ids[i] = p.JobID
	}
	return ids
}

// LaunchKey names a job for LaunchLimits.
type LaunchKey struct {
	ID        int64
	User      string // the Slurm user who owns it
	ModelType string
	// Submitted is when the job was submitted (Job.Submitted); zero for
	// unknown. A stored job of the id submitted earlier is another job,
	// whose report is not this one's.
	Submitted time.Time
}

// LaunchLimits returns what the launch line of each job says: its own
// report (Own), or, for a job that has not reported yet, the newest report
// of a job of the same user and model type (users resubmit the same
// script). Jobs with no report of their own, and nothing to avoid nor a
// global batch from their user's, are absent.
func (s *Store) LaunchLimits(ctx context.Context, jobs []LaunchKey) (map[int64]Launch, error) {
	own := map[int64]Launch{}
	ids := make([]any, 0, len(jobs))
	submitted := make(map[int64]time.Time, len(jobs))
	for _, j := range jobs {
		ids = append(ids, j.ID)
		submitted[j.ID] = j.Submitted
	}
	err := s.inChunks(ctx, `SELECT job_id, cannot, global_batch, submitted_ns FROM jobs WHERE cannot IS NOT NULL AND job_id IN `, ids, func(rows *sql.Rows) error {
		var id int64
		var c string
		var gb int
		var sub sql.NullInt64
		if err := rows.Scan(&id, &c, &gb, &sub); err != nil {
			return err
		}
		// The row is an earlier job's until UpsertJob stores this one.
		if at := fromTimestamp(sub); !at.IsZero() && submitted[id].After(at) {
			return nil
		}
		f, err := model.ParseFeatures(c)
		if err != nil {
			return fmt.Errorf("job %d: %w", id, err)
		}
		own[id] = Launch{Cannot: f, GlobalBatch: gb, Own: true}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: launch limits: %w", err)
	}
	users := map[string]bool{}
	var names []any
	for _, j := range jobs {
		if _, ok := own[j.ID]; !ok && j.User != "" && !users[j.User] {
			users[j.User] = true
			names = append(names, j.User)
		}
	}
	prior := map[[2]string]Launch{}
	err = s.inChunks(ctx, `SELECT user_name, model_type, cannot, global_batch FROM launch_limits WHERE user_name IN `, names, func(rows *sql.Rows) error {
		var user, mt, c string
		var gb int
		if err := rows.Scan(&user, &mt, &c, &gb); err != nil {
			return err
		}
		f, err := model.ParseFeatures(c)
		if err != nil {
			return fmt.Errorf("user %s, model type %s: %w", user, mt, err)
		}
		prior[[2]string{user, mt}] = Launch{Cannot: f, GlobalBatch: gb}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: launch limits: %w", err)
	}
	out := map[int64]Launch{}
	for _, j := range jobs {
		l, ok := own[j.ID]
		if !ok {
			l = prior[[2]string{j.User, j.ModelType}]
		}
		if l != (Launch{}) {
			out[j.ID] = l
		}
	}
	return out, nil
}

// inChunks runs query, which ends in "IN ", with args as its list, in
// chunks (SQLite binds at most 32,766 parameters), calling row per row.
// idArgs is ids as query arguments, for inChunks.
func idArgs(ids []int64) []any {
	args := make([]any, 0, len(ids))
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}

// fixed bind the query's placeholders before the list, in every chunk.
func (s *Store) inChunks(ctx context.Context, query string, args []any, row func(*sql.Rows) error, fixed ...any) error {
	const chunk = 1000
	for len(args) > 0 {
		n := min(len(args), chunk)
		rows, err := s.r.QueryContext(ctx, query+"(?"+strings.Repeat(", ?", n-1)+")", append(slices.Clip(fixed), args[:n]...)...)
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := row(rows); err != nil {
				rows.Close()
				return err
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return err
		}
		args = args[n:]
	}
	return nil
}
