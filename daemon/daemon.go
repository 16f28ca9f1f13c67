package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// Cluster is what the daemon reads from Slurm.
type Cluster interface {
	Jobs(ctx context.Context, since time.Time) ([]slurm.Job, bool, error)
	Job(ctx context.Context, id int) (slurm.Job, error)
	Nodes(ctx context.Context) ([]slurm.Node, error)
}

// LimitLister is a Cluster that lists partition, QOS and association
// limits (slurm.RESTCluster does). Without it, or when the listing fails, rubickd
// learns limits from the reasons Slurm holds jobs back for.
type LimitLister interface {
	Limits(ctx context.Context) (slurm.Limits, error)
}

// PartitionLister is a Cluster that lists the partitions alone
// (slurm.RESTCluster does): between limits listings rubickd reads them
// each cycle, so that a partition set DOWN or UP, or a new MaxTime,
// counts from the next cycle rather than within a minute.
type PartitionLister interface {
	Partitions(ctx context.Context) ([]slurm.Partition, error)
}

// ReservationLister is a Cluster that lists advance reservations
// (slurm.RESTCluster does). Without it, nodes Slurm flags RESERVED are
// left alone and jobs submitted to a reservation are released as they are.
type ReservationLister interface {
	Reservations(ctx context.Context) ([]slurm.Reservation, error)
}

// LicenseLister is a Cluster that lists the cluster's licenses
// (slurm.RESTCluster does). Without it, jobs asking for licenses are
// planned as if they were free, and one that then waits for them is left
// to Slurm (reason Licenses).
type LicenseLister interface {
	Licenses(ctx context.Context) ([]slurm.License, error)
}

// BudgetLister lists the GrpTRESMins budgets and their usage
// (slurm.AssocMgr does). Without it, or when the listing fails, budgets
// bound nothing rubickd plans; Slurm's pending reasons still hold a job
// back.
type BudgetLister interface {
	Budgets(ctx context.Context, scope slurm.BudgetScope) (slurm.Budgets, error)
}

// limitsRefresh is how long a limits listing is reused: limits change
// rarely, and each listing is a partitions query and two slurmdbd ones.
// The budgets' usage is read as often.
const limitsRefresh = time.Minute

// limitsSlowdown stretches limitsRefresh for a slow listing: one that took
// T is reused for limitsSlowdown x T, so that a site listing tens of
// thousands of associations spends at most a twentieth of rubickd's time,
// and slurmdbd's work for it, on them.
const limitsSlowdown = 20

// Applier applies Slurm actions and reports a result per action.
type Applier interface {
	Apply(ctx context.Context, actions []slurm.Action) []slurm.ActionResult
}

// Store is the part of the store the daemon writes and reads.
type Store interface {
	ModelTypes(ctx context.Context) ([]store.ModelType, error)
	CurrentFit(ctx context.Context, modelType string) (store.Fit, error)
	UpsertJobs(ctx context.Context, jobs []store.Job) error
	RecordDecision(ctx context.Context, d store.Decision) (store.Decision, error)
	MarkApplied(ctx context.Context, id int64, res store.Result, applyErr error) error
	Pending(ctx context.Context) ([]store.Action, error)
	Prune(ctx context.Context, r store.Retention) (store.Pruned, error)
	LaunchLimits(ctx context.Context, jobs []store.LaunchKey) (map[int64]store.Launch, error)
	Deferred(ctx context.Context, ids []int64) (map[int64]time.Time, error)
	PhasesOver(ctx context.Context, ids []int64) (map[int64]time.Time, error)
	RecentJobSamples(ctx context.Context, jobIDs []int64, n int) (map[int64][]store.StoredSample, error)
	AwaitAck(ctx context.Context, id int64, mail string) error
	WillRequeue(ctx context.Context, id int64, restarts int, tag string) error
	Acked(ctx context.Context, jobID int64) error
	LastRuns(ctx context.Context, ids []int64) (map[int64]store.SeenRun, error)
	Unacked(ctx context.Context) ([]store.Action, error)
	Starts(ctx context.Context, ids []int64) (map[int64][]store.Action, error)
	Tagged(ctx context.Context, kinds []string, ids []int64) (map[int64][]store.Action, error)
	Jobs(ctx context.Context, f store.JobFilter) ([]store.Job, error)
	RestartStore
}

// Deps are the daemon's collaborators.
type Deps struct {
	Cluster Cluster
	Applier Applier
	Store   Store
	Policy  policy.Policy
	// Env holds the cluster facts the model prices (bandwidths, GPU memory).
	Env     model.Env
	Metrics *Metrics
	Logger  *slog.Logger
	Now     func() time.Time
	// Learner, when set, refits model types from reported samples at the
	// start of each cycle.
	Learner *Learner
	// Budgets, when set, lists the GrpTRESMins budgets with the limits.
	Budgets BudgetLister
	// Scripts, when set (and Config.ReadBatchScripts), gives the batch
	// scripts whose rubick-srun lines tell what a job that has not
	// started yet trains with.
	Scripts ScriptReader
	// ReadUserFile reads a file a job's launch line names; nil means
	// ReadUserFile.
	ReadUserFile func(ctx context.Context, user, workDir, name string) ([]byte, error)
	// Instance names this rubickd in the tags its Applier writes
	// (ApplierConfig.Instance). Zero: rubickd does not watch for another
	// one writing tags (checkWriters).
	Instance Instance
	// Setup is what the checks rubickd ran at its start found
	// (NewSetupChecks); Status serves it. Nil: all passed. Nothing
	// changes it after New.
	Setup *SetupChecks
}

// Daemon runs rubickd's control loop.
type Daemon struct {
	cfg  Config
	deps Deps
	// boot is the configuration rubickd started with; Reload compares the
	// settings only a restart changes against it.
	boot Config

	// scripts is what the batch scripts of the pending jobs that have not
	// started told (scriptFacts), by the job whose script it is
	// (scriptID); only the cycle uses it.
	scripts map[int]*scriptRead // nil: the script told nothing
	// scriptWaits counts the cycles a pending job's script was left
	// unread, by scriptID (maxScriptWaits). Only Run's cycles, which
	// inRun marks, wait for a read: a cycle of --once has no next one.
	scriptWaits map[int]int
	inRun       bool
	// scriptMiss counts the script reads in a row Slurm gave none for.
	scriptMiss int
	// files bounds the reads of users' files still outstanding (a hung
	// network file system keeps them), and filesBusy says rubickd warned
	// that they were all taken.
	files     userFiles
	filesBusy bool
	// unmeasurable holds the restarts MeasureRestart gave up on; only the
	// cycle reads and writes it.
	unmeasurable map[int64]time.Time
	// writers watches the tags for another rubickd's writes;
	// writersSaid holds the writers logged already and writersClaimed
	// those a tag was written for (claim). Only the cycle uses them.
	writers                     tagWriters
	writersSaid, writersClaimed map[string]bool

	// listing is the last limits listing, limitsAt when it was read and
	// limitsTook how long that took; limits is listing with budgets on it.
	// limitsErr is the last listing error (logged once). Only the cycle
	// uses them.
	listing, limits slurm.Limits
	limitsAt        time.Time
	limitsTook      time.Duration
	limitsErr       error
	// partsErr is the last error reading the partitions between
	// listings (logged once).
	partsErr error
	// budgets are the last GrpTRESMins budgets and fair-share factors
	// read, budgetsAt when and budgetScope for which associations they
	// were read, budgetsErr the last error reading them.
	budgets     slurm.Budgets
	budgetsAt   time.Time
	budgetScope slurm.BudgetScope
	budgetsErr  error
	// fairErr names a fair-share factor the last reading could not read.
	fairErr error
	// sshareErr is the last error reading the factors with sshare.
	sshareErr error
	// priorityConf is the last priority configuration read with the
	// budgets, priorityErr the last error reading it.
	priorityConf slurm.PriorityConfig
	priorityErr  error
	// resvErr is the last reservation listing error, logged once; licErr
	// the license listing's.
	resvErr, licErr error
	// ignoredSaid is why each job the last recorded cycle left alone was
	// left (View.Unmanaged) as stored for rubick explain: a reason goes to
	// the store when it changes, not every cycle. Only the cycle uses it.
	ignoredSaid map[int]string
	// deferredSeen is when the last recorded cycle saw each job of its
	// View.Deferred wait, and deferredWritten when the store last got
	// that wait of each. Only the cycle uses them.
	deferredSeen, deferredWritten map[int]time.Time
	// endWritten lists the ended jobs of the last recorded cycle's listing
	// whose end the store has, written once. Only the cycle uses it.
	endWritten map[int]bool
	// unreadErr lists the limits the last listing sets that rubick does
	// not plan with, for one warning while they last.
	unreadErr error
	// billingErr names the partitions whose billing weights the last
	// listing could not read, logged once.
	billingErr error
	// tokenWarned is when the last warning of an expiring JWT was logged.
	tokenWarned time.Time
	// strandedErr lists the jobs held for rubick outside its partitions,
	// for one warning while the list stays the same.
	strandedErr error
	// releaseAll makes the cycle hand the queue back to Slurm (ReleaseAll).
	releaseAll bool
	// unschedulable is the error of each job the last cycle could not
	// schedule (View.Unschedulable), logged when it appears or changes;
	// skippedSaid the same for the actions it deferred or could not
	// express in Slurm.
	unschedulable, skippedSaid map[int]string
	// runs and unrecorded are what noteRuns keeps: the running jobs' run
	// time as last seen (nil until loadRuns read the store's), and run
	// time Slurm's own requeues took from jobs' tags. Only the cycle uses
	// them.
	runs       map[int]runSeen
	unrecorded map[int]unrecorded
	// unacked holds the jobs a failed preemption or restart requeued, or
	// may have (a timed-out requeuehold), before its tag could say so,
	// with the tag it was to write (nil: the job's own): acknowledged the
	// next cycle, or the job would read as requeued by someone else and
	// wait for its user's release. The store keeps it too (AwaitAck), for
	// Reconcile to read back after a restart. Only the cycle uses it.
	unacked map[int]ackWait
	// retryWait is the wait before Reconcile's second try
	// (reconcileWait; tests shorten it).
	retryWait time.Duration
	// unmarked holds the results of applied actions the store failed to
	// record (MarkApplied), by action: each cycle records them again
	// first, or they would stay pending until a restarted rubickd's
	// Reconcile settled them from what Slurm then says.
	unmarked map[int64]mark

	mu       sync.Mutex // guards the fields below, read by the status endpoint
	lastJobs []slurm.Job
	polled   time.Time
	last     CycleReport
	pending  *pendingReload
	// started is when Run began, lastErr why Run's last cycle failed (nil
	// once one succeeds), window how long Health waits for a cycle: what
	// Health reads. failedCycles counts the cycles that failed in a row
	// up to lastErr, the first of which began at failedSince: what Status
	// adds. Run sets them; d.cfg, which a reload replaces, is Run's
	// goroutine's alone.
	started      time.Time
	lastErr      error
	failedSince  time.Time
	failedCycles int
	window       time.Duration
	// waiting is what Status adds while Run's cycles since the last
	// completed one waited for released jobs to start; nil otherwise.
	waiting *Waiting
}

// New checks deps and returns a Daemon.
func New(cfg Config, deps Deps) (*Daemon, error) {
	if deps.Cluster == nil || deps.Applier == nil || deps.Store == nil || deps.Policy == nil {
		return nil, errors.New("daemon: cluster, applier, store and policy are required")
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics()
	}
	deps.Metrics.SetupFailed.Set(float64(deps.Setup.Failed()))
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	return &Daemon{cfg: cfg, deps: deps, boot: cfg, scripts: map[int]*scriptRead{}, scriptWaits: map[int]int{}, files: newUserFiles(maxUserFileReads),
		writersSaid: map[string]bool{}, writersClaimed: map[string]bool{}, retryWait: reconcileWait}, nil
}

// CycleReport summarises one cycle.
type CycleReport struct {
	At       time.Time             `json:"at"`
	Instance string                `json:"instance,omitempty"` // this rubickd as its tags name it (by=)
	Jobs     int                   `json:"jobs"`
	Plan     policy.Plan           `json:"plan"`
	Actions  []slurm.Action        `json:"actions"`
	Skipped  map[int]string        `json:"skipped,omitempty"`
	Failed   map[int]string        `json:"failed,omitempty"`
	Ignored  map[int]string        `json:"ignored,omitempty"`  // tagged jobs rubick cannot schedule
	Adjusted map[int]string        `json:"adjusted,omitempty"` // managed jobs planned from another GPU count than their request, which no plan fits
	Starting []int                 `json:"starting,omitempty"` // released jobs Slurm has yet to start; nothing decided
	Reserved *Reservation          `json:"reserved,omitempty"` // free resources held back for a pending rigid job
	Refitted []string              `json:"refitted,omitempty"` // model types whose current fit changed: a first fit, or a refit on reported samples
	Groups   []GroupUse            `json:"groups,omitempty"`   // group limits running jobs count against, with their use
	Queued   map[string]Queue      `json:"queued,omitempty"`   // queued jobs the policy plans, per class
	CycleID  int64                 `json:"cycle_id,omitempty"`
	Duration time.Duration         `json:"duration_ns"`
	Policy   time.Duration         `json:"policy_ns"`
	Results  []slurm.ActionResult  `json:"-"`
	Models   map[string]model.Spec `json:"-"`
}

// estimators loads the current fit of every model type from the store, and
// gives the spec of each registered model type.
func (d *Daemon) estimators(ctx context.Context) (Estimators, func(string) (model.Spec, bool), error) {
	types, err := d.deps.Store.ModelTypes(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read model types: %w", err)
	}
	est := map[string]policy.Estimator{}
	known := map[string]model.Spec{}
	for _, t := range types {
		known[t.Spec.Name] = t.Spec
		fit, err := d.deps.Store.CurrentFit(ctx, t.Spec.Name)
		if errors.Is(err, store.ErrNotFound) {
			continue // no fit yet: its jobs wait for profiling
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read fit of %s: %w", t.Spec.Name, err)
		}
		est[t.Spec.Name] = policy.FromPredictor(model.Predictor{Spec: t.Spec, Params: fit.Params, Env: d.deps.Env})
	}
	lookup := func(name string) (policy.Estimator, bool) { e, ok := est[name]; return e, ok }
	return lookup, func(name string) (model.Spec, bool) { s, ok := known[name]; return s, ok }, nil
}

// restartCosts measures the restarts whose jobs have reported since (not
// in a dry run) and returns the measured restart cost of each model type;
// the configured cost covers the rest. A store failure here is logged: it
// leaves the configured cost in place rather than stopping scheduling.
func (d *Daemon) restartCosts(ctx context.Context, now time.Time, dryRun bool) map[string]time.Duration {
	if !d.cfg.MeasureRestartCost {
		// A reload may have turned measuring off: restart_cost prices
		// every type now.
		d.deps.Metrics.RestartCost.Reset()
		return nil
	}
	if !dryRun {
		if d.unmeasurable == nil {
			d.unmeasurable = map[int64]time.Time{}
		}
		if err := measureRestarts(ctx, d.deps.Store, now, d.unmeasurable, d.deps.Logger); err != nil {
			d.deps.Logger.Warn("measuring restart costs failed", "err", err)
		}
	}
	costs, err := medianRestartCosts(ctx, d.deps.Store)
	if err != nil {
		d.deps.Logger.Warn("reading restart costs failed; using restart_cost", "err", err)
		return nil
	}
	for mt, c := range costs {
		d.deps.Metrics.RestartCost.WithLabelValues(mt).Set(c.Seconds())
	}
	return costs
}

// reconcileTries bounds Reconcile's tries, reconcileWait apart, then
// twice as long each time (1, 2, 4, 8 s): a slurmrestd or slurmctld that
// restarts, or a store an admin command holds locked, is back within
// seconds, and rubickd would otherwise exit at start-up for it, to be
// started again by systemd.
const (
	reconcileTries = 5
	reconcileWait  = time.Second
)

// Reconcile settles the actions a previous run recorded but did not
// confirm: an action whose plan Slurm now shows running, or released and
// about to start, is marked applied, any other is abandoned. Nothing is
// re-applied; the next cycle decides afresh from what Slurm reports. A
// preemption or restart stopped between its requeue and the tag that
// acknowledges it gets that tag, so the job is not read as requeued by
// someone else (slurm.RequeuedByOther); so does, at the first cycle, one
// that failed after its requeue with its tag still unwritten when the
// previous run stopped (the store's Unacked). A job the store has as live
// and Slurm no longer lists, one that ended while rubickd was stopped, is
// recorded as StateGone. A failure (slurmrestd or
// the store) is retried up to reconcileTries times in all while ctx lasts;
// what was settled before it stays settled.
func (d *Daemon) Reconcile(ctx context.Context) error {
	wait := d.retryWait
	err := d.reconcile(ctx)
	for n := 1; err != nil && n < reconcileTries && ctx.Err() == nil; n, wait = n+1, 2*wait {
		d.deps.Logger.Warn("reconciling failed; retrying", "err", err, "in", wait, "tries", n)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
		err = d.reconcile(ctx)
	}
	return err
}

// StateGone is the state rubickd records for a job its store has as live
// (pending, running, suspended, completing) that Slurm no longer lists when
// rubickd starts: the job ended while rubickd was stopped for longer than
// Slurm's MinJobAge, and how it ended is in Slurm's accounting (sacct).
const StateGone = "GONE"

// settleGone records as StateGone each job the store has as live and
// Slurm no longer lists: without it, rubick explain, queue and status
// would show such a job in its last state, running say, for ever.
func (d *Daemon) settleGone(ctx context.Context) error {
	// The states of a job that has not ended (slurm.Job.Ended).
	live, err := d.deps.Store.Jobs(ctx, store.JobFilter{States: []string{
		slurm.StatePending, slurm.StateRunning, slurm.StateSuspended, slurm.StateCompleting}})
	if err != nil || len(live) == 0 {
		return err
	}
	jobs, err := d.jobs(ctx)
	if err != nil {
		return err
	}
	listed := make(map[int64]bool, len(jobs))
	for _, j := range jobs {
		listed[int64(j.ID)] = true
	}
	var gone []store.Job
	var ids []int64
	for _, j := range live {
		if !listed[j.ID] {
			j.State = StateGone
			gone = append(gone, j)
			ids = append(ids, j.ID)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	if err := d.deps.Store.UpsertJobs(ctx, gone); err != nil {
		return err
	}
	d.deps.Logger.Info("jobs Slurm no longer lists recorded as gone: they ended while rubickd was stopped; sacct -j has how", "jobs", ids)
	return nil
}

// reconcile is one try of Reconcile.
func (d *Daemon) reconcile(ctx context.Context) error {
	if err := d.settleGone(ctx); err != nil {
		return fmt.Errorf("reconcile: jobs Slurm no longer lists: %w", err)
	}
	unacked, err := d.deps.Store.Unacked(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	for _, a := range unacked {
		// Oldest first: a job's newest requeue names the tag.
		d.awaitAck(ctx, int(a.JobID), d.ackOf(a), 0)
	}
	pending, err := d.deps.Store.Pending(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	for _, a := range pending {
		j, err := d.deps.Cluster.Job(ctx, int(a.JobID))
		res, why := store.ResultAbandoned, errors.New("rubickd stopped before confirming; Slurm state differs")
		// The requeue was this action's, stopped before the tag said so:
		// say it now, or the job waits for its user's release, with what
		// the job ran so far as the action stored it. A requeue at another
		// count than the one the action recorded, or with none recorded
		// (rubickd stopped before it issued its own), is someone else's
		// (theirs): a user's requeuehold while rubickd was down stays
		// theirs, and the action did not happen.
		requeue := err == nil && (a.Kind == string(slurm.ActionPreempt) || a.Kind == string(slurm.ActionRestart)) &&
			slurm.RequeuedByOther(j) && !predates(j, a.DecidedAt)
		owed := requeue && requeuedBy(j, a.RequeueCount)
		theirs := requeue && !owed
		switch {
		case errors.Is(err, slurm.ErrNotFound):
			why = errors.New("job no longer known to Slurm")
		case err != nil:
			return fmt.Errorf("reconcile job %d: %w", a.JobID, err)
		case wroteTag(j, a) && (a.Kind == string(slurm.ActionPreempt) || j.State == slurm.StateRunning):
			res, why = store.ResultOK, nil
		case wroteTag(j, a) && j.State == slurm.StatePending && !j.Held &&
			(a.Kind == string(slurm.ActionStart) || a.Kind == string(slurm.ActionRestart)):
			// Resized and released, waiting for Slurm's next pass: the
			// release is the last step of a start.
			res, why = store.ResultOK, nil
		case a.Kind == string(slurm.ActionPreempt) && j.State == slurm.StatePending && !theirs:
			res, why = store.ResultOK, nil
		case theirs:
			why = errors.New("requeued by its user or an administrator while rubickd was stopped")
		}
		var w ackWait
		if owed {
			// Stored before the action is resolved: a crash between the
			// two would leave no record that the tag is still owed.
			w = d.ackOf(a)
			d.awaitAck(ctx, j.ID, w, a.ID)
		}
		if err := d.deps.Store.MarkApplied(ctx, a.ID, res, why); err != nil && !errors.Is(err, store.ErrResolved) {
			return fmt.Errorf("reconcile action %d: %w", a.ID, err)
		}
		d.deps.Logger.Info("reconciled action", "job", a.JobID, "action", a.Kind, "result", res)
		if !owed {
			continue
		}
		if err := d.ackTag(ctx, j.ID, *w.of(j)); err != nil {
			d.deps.Logger.Warn("acknowledging the requeue of an unfinished action failed; the next cycle tries again", "job", j.ID, "err", err)
			continue
		}
		d.acked(ctx, j.ID)
	}
	return nil
}

// wroteTag reports whether job j has the tag action a writes: its plan and,
// where the store has the action's tag (schema 10), its generation, which
// each start and restart advances. A restart that changes only the job's
// CPUs, memory or nodes keeps its plan: by the plan alone, the job running
// on as it was would read as restarted.
func wroteTag(j slurm.Job, a store.Action) bool {
	if j.Tag == nil || j.Tag.Plan != a.Plan.String() {
		return false
	}
	if a.Tag == "" {
		return true
	}
	t, err := slurm.ParseTag(a.Tag)
	return err == nil && j.Tag.Generation == t.Generation
}

// writeTag writes tag (a copy) as job id's, changing nothing else of it.
func (d *Daemon) writeTag(ctx context.Context, id int, tag slurm.Tag) error {
	return d.annotate(ctx, slurm.Action{JobID: id}, tag)
}

// ackTag writes tag to job id to acknowledge rubick's own requeue of it
// (slurm.Action.Acknowledge).
func (d *Daemon) ackTag(ctx context.Context, id int, tag slurm.Tag) error {
	return d.annotate(ctx, slurm.Action{JobID: id, Acknowledge: true}, tag)
}

// annotate applies a, an annotate writing tag (a copy).
func (d *Daemon) annotate(ctx context.Context, a slurm.Action, tag slurm.Tag) error {
	t := cloneTag(tag)
	a.Kind, a.Tag = slurm.ActionAnnotate, &t
	return d.deps.Applier.Apply(ctx, []slurm.Action{a})[0].Err
}

// ackWait is the tag that acknowledges a job's requeue: tag, nil for the
// job's own; with ran as its run time where set, and mail as its TagMail
// where the requeue's action quieted the job's mail
// (slurm.ActionResult.MailWas). at is when that action was decided, where
// it comes from the store (zero: the running rubickd's own): a requeue
// older than the job's submission is an earlier job's (predates).
// restarts is the restart count the requeue gave the job (its action's
// RequeueCount; requeuedBy): at another, the job was requeued by someone
// else since.
type ackWait struct {
	tag       *slurm.Tag
	ran, mail string
	at        time.Time
	restarts  int
}

// requeuedBy reports whether job j, requeued and held, is at the restart
// count restarts, an action's RequeueCount: that action's requeue is the
// job's last. An action an older rubickd left unresolved
// (store.RequeueUnknown) is taken at any count, as that rubickd took it;
// one that recorded no requeue (0) issued none.
func requeuedBy(j slurm.Job, restarts int) bool {
	return restarts == store.RequeueUnknown || restarts > 0 && j.RestartCount == restarts
}

// of is the tag to write for job j.
func (w ackWait) of(j slurm.Job) *slurm.Tag {
	t := cmp.Or(w.tag, j.Tag)
	if t == nil {
		return nil
	}
	c := cloneTag(*t)
	if c.Extra == nil {
		c.Extra = map[string]string{}
	}
	if w.ran != "" {
		c.Extra[tagRan] = w.ran
	}
	// The newest record of the mail types quieted: the requeue's own, else
	// the job's own tag's, which the action that requeued it wrote before
	// it quieted them, after the stored tag was recorded. A stored tag's
	// may be an earlier requeue's, of mail types its user changed since.
	var own string
	if j.Tag != nil {
		own = j.Tag.Extra[slurm.TagMail]
	}
	if m := cmp.Or(w.mail, own); m != "" {
		c.Extra[slurm.TagMail] = m
	}
	return &c
}

// awaitAck has the next cycle acknowledge the requeue of job id in w,
// should the job still wait for it (ackRequeues), and has the store mark
// action (0: none), the one that requeued it, as awaiting that tag: a
// rubickd that restarts before then acknowledges it too (Reconcile),
// instead of holding the job for its user.
func (d *Daemon) awaitAck(ctx context.Context, id int, w ackWait, action int64) {
	if d.unacked == nil {
		d.unacked = map[int]ackWait{}
	}
	d.unacked[id] = w
	if action == 0 {
		return
	}
	if err := d.deps.Store.AwaitAck(ctx, action, w.mail); err != nil {
		d.deps.Logger.Warn("recording a requeue that awaits its tag failed; should rubickd restart before the tag is written, the job waits for its user's release",
			"job", id, "err", err)
	}
}

// acked forgets job id's requeue awaiting its tag, in the store too. One
// the store could not forget stays for the next cycle (ackRequeues),
// which finds the job acknowledged and forgets it again: kept awaiting in
// the store, it would be acknowledged anew by every restarted rubickd.
func (d *Daemon) acked(ctx context.Context, id int) {
	if err := d.deps.Store.Acked(ctx, int64(id)); err != nil {
		d.deps.Logger.Warn("recording a requeue's acknowledgement failed; the next cycle records it again", "job", id, "err", err)
		return
	}
	delete(d.unacked, id)
}

// ackOf is what acknowledges the requeue of action a, from its tag as
// stored (ackFor); the job's own tag when none was stored (rubickd before
// schema 10) or it does not read.
func (d *Daemon) ackOf(a store.Action) ackWait {
	if a.Tag == "" {
		return ackWait{mail: a.AckMail, at: a.DecidedAt, restarts: a.RequeueCount}
	}
	t, err := slurm.ParseTag(a.Tag)
	if err != nil {
		d.deps.Logger.Warn("stored tag of a preemption or restart does not read; its requeue is acknowledged in the job's own", "job", a.JobID, "err", err)
		return ackWait{mail: a.AckMail, at: a.DecidedAt, restarts: a.RequeueCount}
	}
	w := ackFor(slurm.ActionKind(a.Kind), &t, a.AckMail)
	w.at, w.restarts = a.DecidedAt, a.RequeueCount
	return w
}

// ackFor is what acknowledges the requeue of a preemption or restart with
// tag, which quieted mail: a preemption's own tag; for a restart, whose
// tag names a plan the job never got, the job's own with the run time the
// restart's tag counts (ran=: the run its requeue ended included).
func ackFor(kind slurm.ActionKind, tag *slurm.Tag, mail string) ackWait {
	w := ackWait{mail: mail}
	switch {
	case tag == nil:
	case kind == slurm.ActionPreempt:
		w.tag = tag
	default:
		w.ran = tag.Extra[tagRan]
	}
	return w
}

// ackRequeues writes the tags of the jobs in d.unacked that still wait,
// requeued, for them, and returns jobs as Slurm has them then. A job whose
// tag cannot be written yet is left out of this cycle, rather than planned
// as requeued by someone else.
func (d *Daemon) ackRequeues(ctx context.Context, jobs []slurm.Job) []slurm.Job {
	if len(d.unacked) == 0 {
		return jobs
	}
	jobs = slices.Clone(jobs) // d.lastJobs is the cached list
	for id, w := range d.unacked {
		i := slices.IndexFunc(jobs, func(j slurm.Job) bool { return j.ID == id })
		// A requeue before the job's submission was an earlier job's of
		// that id: its tag would make the job that one. One at another
		// restart count than rubick's gave is someone else's since.
		if i < 0 || !slurm.RequeuedByOther(jobs[i]) || predates(jobs[i], w.at) || w.restarts != 0 && !requeuedBy(jobs[i], w.restarts) {
			d.acked(ctx, id) // acknowledged, started or gone since
			continue
		}
		werr := d.ackTag(ctx, id, *w.of(jobs[i]))
		j, err := d.deps.Cluster.Job(ctx, id)
		if werr == nil && err == nil {
			d.acked(ctx, id)
			jobs[i] = j
			continue
		}
		d.deps.Logger.Warn("acknowledging rubick's requeue failed; the job waits for the next cycle", "job", id, "err", cmp.Or(werr, err))
		jobs = slices.Delete(jobs, i, i+1)
	}
	return jobs
}

// userRequests gives each job whose tag lacks its user's request (req=)
// but whose size or node list Slurm reports is, in part at least, one
// that a start of rubick's resized it to, the request and --nodelist that
// start's tag recorded (Store.Starts), and returns jobs as they are then.
// That start's tag write failed, or rubickd stopped before it, after its
// resize: Slurm's size and node list are rubick's now, which read as the
// user's would pin the job on rubick's nodes and make its GPUs the user's
// request. The next tag written records them. A job no start resized has
// its user's request as Slurm reports it: a resize refused, then a user's
// own change (scontrol update NumNodes=, Gres=, NodeList=) since, stands.
func (d *Daemon) userRequests(ctx context.Context, jobs []slurm.Job) ([]slurm.Job, error) {
	var ids []int64
	for _, j := range jobs {
		if j.Tag != nil && j.TagErr == nil && !j.Ended() && j.Tag.Extra[tagReq] == "" {
			ids = append(ids, int64(j.ID))
		}
	}
	if len(ids) == 0 {
		return jobs, nil
	}
	starts, err := d.deps.Store.Starts(ctx, ids)
	if err != nil || len(starts) == 0 {
		return jobs, err
	}
	jobs = slices.Clone(jobs) // d.lastJobs is the cached list
	for i, j := range jobs {
		if j.Tag == nil || j.Tag.Extra[tagReq] != "" {
			continue
		}
		// The newest start that resized the job: an earlier one's
		// resize, if any took, is behind it.
		for _, s := range starts[int64(j.ID)] {
			if predates(j, s.DecidedAt) {
				continue
			}
			rec, ok := resizedBy(j, s)
			if !ok {
				continue
			}
			t := cloneTag(*j.Tag)
			if t.Extra == nil {
				t.Extra = map[string]string{}
			}
			t.Extra[tagReq] = rec.Extra[tagReq]
			if nl := rec.Extra[tagNodes]; nl != "" {
				t.Extra[tagNodes] = nl
			}
			jobs[i].Tag = &t
			d.deps.Logger.Debug("job's request read from a start's tag: its tag was not written after its resize", "job", j.ID, "req", t.Extra[tagReq], "nodes", t.Extra[tagNodes])
			break
		}
	}
	return jobs, nil
}

// refusedLimits gives each job whose tag records a time limit (tagSet)
// the job does not have, written by an action of rubick's that failed or
// was abandoned (Reconcile abandons one rubickd stopped in: its job is
// still held, and a time limit action stores no plan to find), that tag
// with the limit the job has, and returns jobs as they are then.
// slurmctld takes an update's AdminComment before its TimeLimit and stops
// at a field it refuses (job_mgr.c, _update_job; 22.05 to 24.11): such an
// action's tag may stand without its limit, and read as is it would take
// the job's limit, rubick's or its user's, as one set by hand, fixed for
// good (tagFixed), and a raise refused once would never be tried again.
// The next tag written records the limit the job has. A limit other than
// the tag's under a tag whose action Slurm took whole is one set by hand
// since.
func (d *Daemon) refusedLimits(ctx context.Context, jobs []slurm.Job) ([]slurm.Job, error) {
	// The actions that send a time limit with the tag that records it,
	// in one update.
	limitKinds := []string{string(slurm.ActionStart), string(slurm.ActionRestart), string(slurm.ActionTimeLimit)}
	var ids []int64
	for _, j := range jobs {
		if limitDiffers(j) {
			ids = append(ids, int64(j.ID))
		}
	}
	if len(ids) == 0 {
		return jobs, nil
	}
	tagged, err := d.deps.Store.Tagged(ctx, limitKinds, ids)
	if err != nil || len(tagged) == 0 {
		return jobs, err
	}
	jobs = slices.Clone(jobs) // d.lastJobs is the cached list
	for i, j := range jobs {
		if !limitDiffers(j) {
			continue
		}
		// The newest action whose tag the job has: an older one's
		// limit, whatever became of it, is behind it.
		k := slices.IndexFunc(tagged[int64(j.ID)], func(a store.Action) bool {
			return !predates(j, a.DecidedAt) && sameLimitTag(j.Tag, a.Tag)
		})
		if k < 0 {
			continue
		}
		if a := tagged[int64(j.ID)][k]; a.Result != store.ResultFailed && a.Result != store.ResultAbandoned {
			continue
		}
		t := cloneTag(*j.Tag)
		recordTime(&t, 0, false, j.TimeLimit)
		jobs[i].Tag = &t
		d.deps.Logger.Debug("job's tag records a time limit Slurm refused; read with the one it has", "job", j.ID,
			"tag_limit_min", j.Tag.Extra[tagSet], "limit_min", wholeMinutes(j.TimeLimit))
	}
	return jobs, nil
}

// limitDiffers reports whether job j's tag records a time limit (tagSet)
// other than the one the job has.
func limitDiffers(j slurm.Job) bool {
	if j.Tag == nil || j.TagErr != nil || j.Ended() {
		return false
	}
	s, ok := j.Tag.Extra[tagSet]
	return ok && s != strconv.FormatInt(wholeMinutes(j.TimeLimit), 10)
}

// sameLimitTag reports whether tag t says what the stored tag s says of
// the plan and the time limit: what an action writing s left, where the
// Applier's own keys (the restart count, the writer, the mail types) and
// the class job_submit.lua writes may differ.
func sameLimitTag(t *slurm.Tag, s string) bool {
	st, err := slurm.ParseTag(s)
	if err != nil {
		return false
	}
	return t.Plan == st.Plan && t.Generation == st.Generation &&
		t.Extra[tagSet] == st.Extra[tagSet] && t.Extra[tagTime] == st.Extra[tagTime] && t.Extra[tagFixed] == st.Extra[tagFixed]
}

// resizedBy reports whether start s resized job j, wholly or in
// part (Slurm may apply an update field by field), and returns the tag s
// recorded, which holds the user's request and --nodelist of then: j has
// a field (node count, GPUs per node, CPUs, memory per node, node list)
// at the value s set, which is not the user's one s recorded. Where the
// two agree, the field says nothing; where neither does, it is the user's
// own change since.
func resizedBy(j slurm.Job, s store.Action) (slurm.Tag, bool) {
	tag, err := slurm.ParseTag(s.Tag)
	if err != nil || tag.Extra[tagReq] == "" {
		return slurm.Tag{}, false
	}
	was, err := parseRequest(tag.Extra[tagReq])
	if err != nil {
		return slurm.Tag{}, false
	}
	wasNodes, err := slurm.ExpandHostlist(tag.Extra[tagNodes])
	if err != nil {
		return slurm.Tag{}, false
	}
	set, err := slurm.ExpandHostlist(s.Nodes)
	if err != nil {
		return slurm.Tag{}, false
	}
	rubicks := func(now, set, was int64) bool { return set > 0 && now == set && set != was }
	sameNodes := func(a, b []string) bool {
		return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
	}
	n := int64(len(s.Resources.Placement))
	var gpus, mem int64
	if n > 0 {
		gpus = int64(s.Resources.Placement[0])
		mem = int64(math.Round(s.Resources.HostMemGB * 1024 / float64(n)))
	}
	now := ownRequest(j)
	switch {
	case rubicks(int64(now.Nodes), n, int64(was.Nodes)),
		rubicks(int64(now.GPUsPerNode), gpus, int64(was.GPUsPerNode)),
		rubicks(int64(now.CPUs), int64(s.Resources.CPUs), int64(was.CPUs)),
		rubicks(now.MemMB, mem, was.MemMB),
		len(set) > 0 && sameNodes(j.RequiredNodes, set) && !sameNodes(set, wasNodes):
		return tag, true
	}
	return slurm.Tag{}, false
}

// predates reports whether a record rubick dated at (an action's decision,
// a restart's checkpoint signal) is an earlier job's that had job j's id
// (store.Predates, against j's submitTime). The store cannot tell the two
// apart, only the daemon knows each job's submission, so each per-job read
// is filtered here, by this one test, where its result is used.
func predates(j slurm.Job, at time.Time) bool { return store.Predates(at, submitTime(j)) }

// minOwnRestarts is how many of its own measured restarts a job needs
// before it is priced at their median instead of its model type's: one
// restart slowed by a busy file system should not decide alone.
const minOwnRestarts = 2

// profiling names the model types a job of which is profiling at now
// (profilingTypes), reading in one query which of the jobs that may be
// reported their phases over.
func (d *Daemon) profiling(ctx context.Context, jobs []slurm.Job, now time.Time) map[string]bool {
	var ids []int64
	for _, j := range jobs {
		if profilingCandidate(j, now) {
			ids = append(ids, int64(j.ID))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	over, err := d.deps.Store.PhasesOver(ctx, ids)
	if err != nil {
		// Their phases count as under way: a second phase at once is
		// what this avoids, and the next cycle reads again.
		d.deps.Logger.Warn("reading whether running jobs' profiling phases are over failed; no other job of their model types profiles this cycle", "jobs", ids, "err", err)
	}
	return profilingTypes(jobs, over, now)
}

// jobFacts reads what the store knows of the jobs with a model type: what
// their launch lines cannot express and the global batch they train with,
// as their rubick-srun reported it (or, until a job reports its own, as
// its batch script's rubick-srun line says, else as its user's last job of
// that model type reported; the batch of one that ran, as the plan it ran
// says), and, with measure_restart_cost, what their own restarts cost.
func (d *Daemon) jobFacts(ctx context.Context, jobs []slurm.Job) (map[int]JobFacts, error) {
	var keys []store.LaunchKey
	var ids []int64
	for _, j := range jobs {
		if j.Tag != nil && j.Tag.ModelType != "" && (j.State == slurm.StatePending || j.State == slurm.StateRunning) {
			keys = append(keys, store.LaunchKey{ID: int64(j.ID), User: j.User, ModelType: j.Tag.ModelType, Submitted: submitTime(j)})
			ids = append(ids, int64(j.ID))
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	limits, err := d.deps.Store.LaunchLimits(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("read launch limits: %w", err)
	}
	out := make(map[int]JobFacts, len(limits))
	reported := map[int]bool{}
	for id, l := range limits {
		out[int(id)] = JobFacts{Cannot: l.Cannot, GlobalBatch: l.GlobalBatch}
		reported[int(id)] = l.Own
	}
	read, unread := d.scriptFacts(ctx, jobs, reported)
	for id, r := range read {
		f := out[id]
		f.Cannot = r.cannot
		if r.batch {
			f.GlobalBatch = r.gb
		}
		out[id] = f
	}
	for id := range unread {
		f := out[id]
		f.ScriptUnread = true
		out[id] = f
	}
	for _, j := range jobs {
		// A job that ran without reporting (no samples endpoint, or not
		// yet) trains with the batch of the plan it ran: rubick-srun keeps
		// a line's batch and refuses a plan of another, and writes the
		// plan's into a line that states none. Its user's earlier job, or
		// its model type's, would have it restarted on a plan its line
		// refuses.
		if reported[j.ID] || j.Tag == nil || j.Tag.Plan == "" || !started(j) {
			continue
		}
		if p, err := model.ParsePlan(j.Tag.Plan); err == nil {
			f := out[j.ID]
			f.GlobalBatch = p.DP * p.MicroBatch * p.Accum
			out[j.ID] = f
		}
	}
	// The running jobs whose reports say what they run: a job trains on
	// its launch line as it is where its tag names no plan (started on its
	// request while its model type had no fit, or outside rubick) or where
	// its plan came after its rubick-srun stopped waiting for one (its
	// profiling phase ended before the fit), and is priced at the plan it
	// reports; its time limit follows the speed it reports. Not a
	// profiling job: its reports on its current run are its phase's short
	// runs of other plans, and rubickd plans it once its model type is
	// fitted.
	var reporting []slurm.Job
	var recentIDs []int64
	for _, j := range jobs {
		if j.State == slurm.StateRunning && len(j.NodeList) > 0 && j.Tag != nil && j.Tag.ModelType != "" && j.Tag.Extra[tagProfile] != "1" {
			reporting = append(reporting, j)
			recentIDs = append(recentIDs, int64(j.ID))
		}
	}
	// One query for all of them, not one per job every cycle.
	recent, err := d.deps.Store.RecentJobSamples(ctx, recentIDs, recentRunSamples)
	if err != nil {
		d.deps.Logger.Warn("reading running jobs' samples failed; their time limits follow the predictions, and they are priced at their tag's plan, else the best plan for what they hold", "err", err)
	}
	// A job that profiled on its current run reported its phase's runs
	// since its start: only its reports after the phase's notice are of
	// its training run (rubick-srun sends the phase's samples before it).
	// One query for all, as for the samples.
	var over map[int64]time.Time
	phasesRead := true
	if len(recent) > 0 {
		if over, err = d.deps.Store.PhasesOver(ctx, recentIDs); err != nil {
			phasesRead = false
			d.deps.Logger.Warn("reading running jobs' profiling phases failed; jobs with a plan in their tag are priced at it this cycle", "err", err)
		}
	}
	stretch := d.cfg.TimeLimits.Stretch
	for _, j := range reporting {
		since := j.StartTime
		if t := over[int64(j.ID)]; t.After(since) {
			since = t
		}
		only := ""
		if !phasesRead {
			// A phase's runs cannot be told from the training run's: only
			// the tag's plan is sure to be the latter's.
			only = j.Tag.Plan
		}
		plan, iterS, ok := reportedRun(recent[int64(j.ID)], since, only)
		if !ok {
			continue
		}
		f := out[j.ID]
		f.RanPlan = plan
		if stretch && j.TimeLimit > 0 {
			f.IterS = iterS
		}
		out[j.ID] = f
	}
	// A task split off a job array after the array waited (a hold of the
	// whole array, its dependencies) waited with it: its wait is stored
	// under the array's record.
	tasks := map[int][]int{}
	lookup := slices.Clone(ids)
	for _, j := range jobs {
		if j.ArrayJobID > 0 && j.ArrayJobID != j.ID && j.ArrayTasks == "" {
			tasks[j.ArrayJobID] = append(tasks[j.ArrayJobID], j.ID)
			lookup = append(lookup, int64(j.ArrayJobID))
		}
	}
	waited := func(id int, t time.Time) {
		for _, id := range append([]int{id}, tasks[id]...) {
			if f := out[id]; t.After(f.Deferred) {
				f.Deferred = t
				out[id] = f
			}
		}
	}
	// A wait stored under the id before the job's submission, an earlier
	// job's of that id, counts for nothing: queuedSince takes the later.
	deferred, err := d.deps.Store.Deferred(ctx, lookup)
	if err != nil {
		// Their age then counts from their submission, as before they waited.
		d.deps.Logger.Warn("reading when jobs last waited for a release, their begin time or dependencies failed", "err", err)
	}
	for id, t := range deferred {
		waited(int(id), t)
	}
	for id, t := range d.deferredSeen {
		// The last cycle's wait, stored only with this cycle's record.
		waited(id, t)
	}
	if !d.cfg.MeasureRestartCost {
		return out, nil
	}
	costs, err := d.deps.Store.JobsRestartCosts(ctx, ids)
	if err != nil {
		// As for the model types' costs: priced at their type's instead.
		d.deps.Logger.Warn("reading jobs' restart costs failed", "err", err)
		return out, nil
	}
	byID := make(map[int64]slurm.Job, len(ids))
	for _, j := range jobs {
		byID[int64(j.ID)] = j
	}
	for id, cs := range costs {
		cs = slices.DeleteFunc(cs, func(c store.RestartCost) bool { return predates(byID[id], c.Signaled) })
		if len(cs) >= minOwnRestarts {
			f := out[int(id)]
			f.RestartCost = RestartCostOf(cs)
			out[int(id)] = f
		}
	}
	return out, nil
}

// minRunSamples is how many reported iteration times of its current run a
// job needs before its time limit follows its measured speed; the median
// of the newest recentRunSamples is that speed.
const (
	minRunSamples    = 3
	recentRunSamples = 5
)

// reportedRun reads a running job's training run from recent (its newest
// reports, oldest first): the plan the newest of its online reports since
// since names (naming only, when set), and the median of the iteration
// times of that plan among them, 0 with fewer than minRunSamples; false
// when it reported none.
func reportedRun(recent []store.StoredSample, since time.Time, only string) (model.Plan, float64, bool) {
	var run []store.StoredSample
	for _, s := range recent {
		if s.Source == store.SourceOnline && !s.Created.Before(since) && (only == "" || s.Plan.String() == only) {
			run = append(run, s)
		}
	}
	if len(run) == 0 {
		return model.Plan{}, 0, false
	}
	plan := run[len(run)-1].Plan
	var times []float64
	for _, s := range run {
		if s.Plan == plan {
			times = append(times, s.IterS)
		}
	}
	if len(times) < minRunSamples {
		return plan, 0, true
	}
	slices.Sort(times)
	return plan, times[len(times)/2], true
}

// slurmLimits is the limits listing with the budgets on it. The listing is
// read again once limitsRefresh has passed, or limitsSlowdown times what
// the last one took if that is longer, and its partitions alone in every
// cycle between (PartitionLister); the budgets each limitsRefresh, and
// with every new listing. With them come the fair-share factors of the
// accounts in fairAccounts, at once when one was not read before, and the
// QOS and association priorities and the priority weights (with an
// association weight in priority order, every association's). A failed
// listing or budget reading keeps the last one; a version without the
// endpoints is not asked again.
func (d *Daemon) slurmLimits(ctx context.Context, now time.Time, fairAccounts []string) slurm.Limits {
	changed := false
	if l, ok := d.deps.Cluster.(LimitLister); ok && !errors.Is(d.limitsErr, slurm.ErrUnsupported) &&
		(d.limitsAt.IsZero() || now.Sub(d.limitsAt) >= max(limitsRefresh, limitsSlowdown*d.limitsTook)) {
		d.limitsAt = now
		start := d.deps.Now()
		list, err := l.Limits(ctx)
		d.limitsTook = d.deps.Now().Sub(start)
		d.warnNew(&d.limitsErr, err, "QOS and association limits not read; Slurm's pending reasons will show them")
		if err == nil {
			d.listing, d.budgetsAt, changed = list, time.Time{}, true
			d.warnUnreadBilling(list)
			var unread error
			if u := list.Unread(); len(u) > 0 {
				unread = errors.New(strings.Join(u, "; "))
			}
			d.warnNew(&d.unreadErr, unread, "limits rubick does not plan with; Slurm holds back a job sized past one, and rubick then runs it on its request")
		}
	} else if p, ok := d.deps.Cluster.(PartitionLister); ok && d.listing.Partitions != nil {
		// Between listings, the partitions alone: a state an administrator
		// set (DOWN, UP) counts from this cycle, not from the next
		// listing. The rest of the listing stays.
		parts, err := p.Partitions(ctx)
		d.warnNew(&d.partsErr, err, "partitions not read; their state and limits as last read stay in force")
		if err == nil {
			// Unchanged, the limits with budgets on them are not rebuilt.
			if byName := slurm.PartitionsByName(parts); !maps.EqualFunc(byName, d.listing.Partitions, func(a, b slurm.Partition) bool { return reflect.DeepEqual(a, b) }) {
				d.listing.Partitions, changed = byName, true
			}
		}
	}
	// Budgets go on what slurmdbd listed; without a listing there is
	// nothing to put them on.
	budgeted := d.deps.Budgets != nil && d.listing.QOS != nil
	var scope slurm.BudgetScope
	if budgeted {
		scope = d.listing.BudgetScope()
	}
	scope = scope.With(fairAccounts...)
	if d.everyAssoc(d.priorityConf, fairAccounts) {
		scope = slurm.BudgetScope{All: true}
	}
	read := d.deps.Budgets != nil && (budgeted || len(fairAccounts) > 0)
	if read && (d.budgetsAt.IsZero() || now.Sub(d.budgetsAt) >= limitsRefresh || !d.budgetScope.Covers(scope)) {
		d.budgetsAt, d.budgetScope = now, scope
		b, err := d.deps.Budgets.Budgets(ctx, scope)
		if err == nil && b.PriorityErr == nil && !scope.All && d.everyAssoc(b.Priority, fairAccounts) {
			// The weights just read call for every association's
			// priority, which the factor divides by the largest of.
			d.budgetScope = slurm.BudgetScope{All: true}
			b, err = d.deps.Budgets.Budgets(ctx, d.budgetScope)
		}
		d.warnNew(&d.budgetsErr, err, "scontrol show assoc_mgr failed; the GrpTRESMins budgets and fair-share factors last read stay in force")
		if err == nil {
			d.budgets, changed = b, true
			var unread error
			if b.FairShareUnread != "" && len(fairAccounts) > 0 {
				unread = errors.New(b.FairShareUnread)
			}
			d.warnNew(&d.fairErr, unread, "fair-share factor not read; its association's jobs go as factor 0")
			var coarse error
			if len(fairAccounts) > 0 {
				coarse = b.SShareErr
			}
			d.warnNew(&d.sshareErr, coarse, "sshare failed; the fair-share factors are scontrol's, to two decimals")
			if d.cfg.Policy.prioritised() {
				d.warnNew(&d.priorityErr, b.PriorityErr, "priority weights not read; the last ones read stay in force")
			}
			if b.PriorityErr == nil {
				d.priorityConf = b.Priority
			}
		}
	}
	switch {
	case changed && budgeted:
		d.limits = d.listing.WithBudgets(d.budgets)
	case changed:
		d.limits = d.listing
	}
	return d.limits
}

// everyAssoc reports whether the budgets reading must list every
// association: in priority order with an association weight (in c),
// whose factor is an association's priority over the largest any has.
func (d *Daemon) everyAssoc(c slurm.PriorityConfig, fairAccounts []string) bool {
	return d.cfg.Policy.prioritised() && c.Assoc > 0 && len(fairAccounts) > 0
}

// fairAccounts are the accounts of the jobs rubick manages when it reads
// their fair-share factors (PolicyConfig.readsFactors); nil otherwise.
func (d *Daemon) fairAccounts(jobs []slurm.Job) []string {
	if !d.cfg.Policy.readsFactors() {
		return nil
	}
	var out []string
	for _, j := range jobs {
		if j.Tag != nil && j.Account != "" {
			out = append(out, j.Account)
		}
	}
	return out
}

// warnUnreadBilling logs the partitions of list whose billing weights
// did not parse, once.
func (d *Daemon) warnUnreadBilling(list slurm.Limits) {
	var unread []error
	for _, name := range slices.Sorted(maps.Keys(list.Partitions)) {
		if why := list.Partitions[name].Billing.Unread; why != "" {
			unread = append(unread, fmt.Errorf("partition %s: %s", name, why))
		}
	}
	d.warnNew(&d.billingErr, errors.Join(unread...), "billing weights not read; billing limits in these partitions are learned from Slurm's pending reasons")
}

// reservations lists the reservations each cycle (they start and end at
// any time); nil when that fails.
func (d *Daemon) reservations(ctx context.Context) []slurm.Reservation {
	l, ok := d.deps.Cluster.(ReservationLister)
	if !ok {
		return nil
	}
	list, err := l.Reservations(ctx)
	d.warnNew(&d.resvErr, err, "reservations not read; reserved nodes are left alone this cycle")
	if err != nil {
		return nil
	}
	return list
}

// licenses lists the cluster's licenses when a pending job with a rubick
// tag asks for some (each cycle: jobs take and return them at any time);
// nil otherwise, or when that fails.
func (d *Daemon) licenses(ctx context.Context, jobs []slurm.Job) []slurm.License {
	l, ok := d.deps.Cluster.(LicenseLister)
	if !ok || !slices.ContainsFunc(jobs, func(j slurm.Job) bool { return j.State == slurm.StatePending && j.Tag != nil && j.Licenses != "" }) {
		return nil
	}
	list, err := l.Licenses(ctx)
	d.warnNew(&d.licErr, err, "licenses not read; jobs asking for some are planned as if they were free")
	if err != nil {
		return nil
	}
	return list
}

// warnUnschedulable logs each job the policy could not take, once while
// its error stays the same: a running job's lasts as long as it runs, and
// was logged at every cycle.
func (d *Daemon) warnUnschedulable(now map[int]string) {
	for id, err := range now {
		if d.unschedulable[id] != err {
			d.deps.Logger.Warn("job not schedulable", "job", id, "err", err)
		}
	}
	d.unschedulable = now
}

// warnNew logs a listing's error unless it repeats the last one (*last),
// so that a lasting failure is logged once, and records err (nil when the
// listing worked) as the last.
func (d *Daemon) warnNew(last *error, err error, msg string) {
	if err != nil && (*last == nil || err.Error() != (*last).Error()) {
		d.deps.Logger.Warn(msg, "err", err)
	}
	*last = err
}

// Cycle runs one snapshot, decide, apply, record cycle, with the
// configuration a Reload queued, if any. With dryRun it decides and reports
// but touches neither Slurm nor the store.
func (d *Daemon) Cycle(ctx context.Context, dryRun bool) (CycleReport, error) {
	d.applyReload()
	start := d.deps.Now()
	d.watchToken(start)
	rep := CycleReport{At: start, Skipped: map[int]string{}, Failed: map[int]string{}}
	if !d.deps.Instance.IsZero() {
		rep.Instance = d.deps.Instance.String()
	}
	jobs, err := d.jobs(ctx)
	if err != nil {
		d.deps.Metrics.SlurmErrors.WithLabelValues("slurmrestd").Inc()
		return rep, err
	}
	if !dryRun {
		if err := d.checkWriters(ctx, jobs); err != nil {
			return rep, err
		}
	}
	if !dryRun {
		jobs = d.ackRequeues(ctx, jobs)
		d.markAgain(ctx)
	}
	if jobs, err = d.userRequests(ctx, jobs); err != nil {
		return rep, err
	}
	if jobs, err = d.refusedLimits(ctx, jobs); err != nil {
		return rep, err
	}
	nodes, err := d.deps.Cluster.Nodes(ctx)
	if err != nil {
		d.deps.Metrics.SlurmErrors.WithLabelValues("slurmrestd").Inc()
		return rep, fmt.Errorf("read nodes: %w", err)
	}
	if d.deps.Learner != nil && !dryRun {
		if refitted, err := d.deps.Learner.Refit(ctx); err != nil {
			d.deps.Logger.Warn("refit failed", "err", err)
		} else if len(refitted) > 0 {
			rep.Refitted = refitted
		}
	}
	d.warnNew(&d.strandedErr, stranded(jobs, d.cfg.Partitions),
		"jobs held for rubick in partitions rubickd does not manage wait until released by hand: make MANAGED_PARTITIONS in job_submit.lua and partitions in rubickd.yaml name the same partitions")
	est, registered, err := d.estimators(ctx)
	if err != nil {
		return rep, err
	}
	costs := d.restartCosts(ctx, start, dryRun) // measures new restarts first
	facts, err := d.jobFacts(ctx, jobs)
	if err != nil {
		return rep, err
	}
	if d.runs == nil {
		if err := d.loadRuns(ctx, jobs); err != nil {
			return rep, err
		}
	}
	d.noteRuns(jobs, start)
	if !dryRun {
		jobs = d.recordRuns(ctx, jobs)
	}
	if facts == nil && len(d.unrecorded) > 0 {
		facts = map[int]JobFacts{}
	}
	for id, u := range d.unrecorded {
		f := facts[id]
		f.Unrecorded = u.ran
		facts[id] = f
	}
	fair := d.fairAccounts(jobs)
	in := Inputs{Nodes: nodes, Jobs: jobs, Estimators: est, RestartCosts: costs, ReleaseAll: d.releaseAll,
		Facts: facts, Limits: d.slurmLimits(ctx, start, fair), Reservations: d.reservations(ctx), Licenses: d.licenses(ctx, jobs)}
	if fair != nil {
		in.FairShare = d.budgets.FairShare
	}
	if fair != nil && d.cfg.Policy.prioritised() {
		p := slurm.Priorities{Config: d.priorityConf, QOS: d.budgets.QOSPriority, Assoc: d.budgets.AssocPriority,
			Partitions: in.Limits.Partitions, FairShare: d.budgets.FairShare, Nodes: len(nodes)}
		for _, n := range nodes {
			p.CPUs += n.CPUs
		}
		p = p.Prepared()
		in.Priority = &p
	}
	view, err := BuildView(d.cfg, start, in, d.deps.Logger)
	if err != nil {
		return rep, fmt.Errorf("build snapshot: %w", err)
	}
	rep.Ignored, rep.Adjusted, rep.Groups = view.Unmanaged, view.Adjusted, view.GroupUse()
	d.warnUnschedulable(view.Unschedulable)
	d.deps.Metrics.RigidReserved.Set(0)
	if rep.Reserved = view.Reserved; rep.Reserved != nil {
		d.deps.Metrics.RigidReserved.Set(float64(rep.Reserved.GPUs))
		d.deps.Logger.Debug("resources held for a rigid job", "job", rep.Reserved.JobID, "nodes", rep.Reserved.Nodes, "gpus", rep.Reserved.GPUs)
	}
	rep.Jobs = len(view.Snapshot.Jobs)
	d.countJobs(jobs)
	rep.Queued = queues(view.Snapshot)
	d.deps.Metrics.setQueuedAge(rep.Queued)
	if len(view.Starting) > 0 {
		// Deciding now would see released jobs as queued and their nodes
		// as free; wait for Slurm to start them.
		rep.Starting = view.Starting
		d.deps.Logger.Debug("waiting for released jobs to start", "jobs", view.Starting)
		rep.Duration = d.deps.Now().Sub(start)
		return rep, nil
	}
	t0 := d.deps.Now()
	plan, err := d.deps.Policy.Decide(ctx, view.Snapshot)
	rep.Policy = d.deps.Now().Sub(t0)
	d.deps.Metrics.PolicyDuration.Observe(rep.Policy.Seconds())
	if err != nil {
		return rep, fmt.Errorf("policy %s: %w", d.deps.Policy.Name(), err)
	}
	rep.Plan = plan
	actions, skipped := view.SlurmActions(plan, start)
	unfitted := func(mt string) (model.Spec, bool) {
		_, fitted := est(mt)
		spec, ok := registered(mt)
		return spec, ok && !fitted
	}
	var profiling map[string]bool
	if len(view.Rigid) > 0 {
		profiling = d.profiling(ctx, jobs, start)
	}
	actions = append(actions, view.RigidActions(start, unfitted, profiling)...)
	actions = append(actions, view.SplitActions()...)
	for _, a := range view.HoldActions() {
		// The hold's tag counts the requeue by hand: the run it ended
		// goes in with it.
		d.countUnrecorded(a.JobID, a.Tag)
		actions = append(actions, a)
	}
	rep.Actions = actions
	limited := 0
	for _, j := range view.Waiting {
		if view.waitReason(j) == policy.ReasonGroup {
			limited++
		}
	}
	for _, a := range plan.Actions {
		if a.Reason == policy.ReasonGroup {
			limited++
		}
	}
	// A deferral lasts cycles (a group limit, hours): each is logged when it
	// first comes or changes.
	said := make(map[int]string, len(skipped))
	quiet := slog.New(slog.DiscardHandler)
	for id, e := range skipped {
		rep.Skipped[id] = e.Error()
		said[id] = e.Error()
		logger := d.deps.Logger
		if d.skippedSaid[id] == e.Error() {
			logger = quiet
		}
		if errors.Is(e, ErrLicense) || errors.Is(e, ErrGres) {
			// Another start of the plan takes them; planned again next
			// cycle.
			logger.Info("start deferred for its licenses or GRES", "job", id, "err", e)
			if i, ok := slices.BinarySearchFunc(plan.Actions, strconv.Itoa(id), func(a policy.Action, id string) int { return strings.Compare(a.JobID, id) }); ok {
				plan.Actions[i] = deferredKeep(view, plan.Actions[i], policy.ReasonNoResources, e.Error())
			}
			continue
		}
		if errors.Is(e, ErrGroupLimit) {
			// Planned again next cycle within the room left; rubick
			// explain says why it did not start now. A preemption or
			// shrink dropped with the start it was for leaves its job
			// running as it is.
			i, ok := slices.BinarySearchFunc(plan.Actions, strconv.Itoa(id), func(a policy.Action, id string) int { return strings.Compare(a.JobID, id) })
			if errors.Is(e, ErrServedDeferred) {
				logger.Info("preemption or shrink dropped with a start deferred for a group limit", "job", id, "err", e)
			} else {
				limited++
				logger.Info("action deferred for a group limit", "job", id, "err", e)
			}
			if ok {
				plan.Actions[i] = deferredKeep(view, plan.Actions[i], policy.ReasonGroup, e.Error())
			}
			continue
		}
		logger.Warn("action not expressible in Slurm", "job", id, "err", e)
	}
	d.skippedSaid = said
	d.deps.Metrics.GroupLimited.Set(float64(limited))
	d.deps.Metrics.setGroups(rep.Groups)
	if dryRun {
		rep.Duration = d.deps.Now().Sub(start)
		return rep, nil
	}
	recorded, err := d.record(ctx, view, plan, actions, rep.Policy, registered)
	if err != nil {
		return rep, err
	}
	rep.CycleID = recorded.CycleID
	// Apply only what was recorded first, so a crash in between leaves a
	// pending record to reconcile rather than an unrecorded change; so
	// too the restart count each requeue gives its job, which tells it
	// from its user's after a crash (Reconcile).
	for i := range min(len(actions), len(recorded.Actions)) {
		if k := actions[i].Kind; k == slurm.ActionPreempt || k == slurm.ActionRestart {
			id := recorded.Actions[i].ID
			actions[i].BeforeRequeue = func(ctx context.Context, restarts int, tag *slurm.Tag) error {
				var s string
				if tag != nil {
					s = tag.String()
				}
				return d.deps.Store.WillRequeue(ctx, id, restarts, s)
			}
		}
	}
	results := d.apply(ctx, actions)
	rep.Results = results
	// What Slurm took is recorded even when the cycle's deadline passed
	// while the actions ran (checkpoint waits): left pending, the next
	// start would settle it from a Slurm that has moved on.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.Commands.Timeout)
	defer cancel()
	// A result the store refuses fails the cycle, but after the others:
	// each is recorded, and a requeue acknowledged, on its own.
	var unrecorded []error
	for i, r := range results {
		res, kind := store.ResultOK, string(r.Action.Kind)
		if r.Err != nil {
			res = store.ResultFailed
			rep.Failed[r.Action.JobID] = r.Err.Error()
			d.deps.Logger.Warn("action failed", "job", r.Action.JobID, "action", kind, "err", r.Err)
			if r.MayHaveRequeued() {
				var id int64
				if i < len(recorded.Actions) {
					id = recorded.Actions[i].ID
				}
				w := ackFor(r.Action.Kind, r.Action.Tag, r.MailWas)
				w.restarts = r.RequeueCount
				d.awaitAck(rctx, r.Action.JobID, w, id)
			}
		} else {
			d.deps.Logger.Info("action applied", "job", r.Action.JobID, "action", kind, "plan", planOf(r.Action))
		}
		d.deps.Metrics.Actions.WithLabelValues(kind, string(res)).Inc()
		if i < len(recorded.Actions) {
			if _, err := d.recordResult(rctx, recorded.Actions[i].ID, mark{res: res, err: r.Err}); err != nil {
				unrecorded = append(unrecorded, fmt.Errorf("record result of job %d: %w", r.Action.JobID, err))
			}
		}
	}
	if err := errors.Join(unrecorded...); err != nil {
		return rep, err
	}
	rep.Duration = d.deps.Now().Sub(start)
	d.deps.Metrics.CycleDuration.Observe(rep.Duration.Seconds())
	d.deps.Metrics.LastCycle.Set(float64(d.deps.Now().Unix()))
	d.mu.Lock()
	d.last = rep
	d.mu.Unlock()
	return rep, nil
}

// mark is an action's result for the store (Store.MarkApplied).
type mark struct {
	res store.Result
	err error
}

// recordResult records action id's result m (Store.MarkApplied) and
// returns the store's error. A result the store refused is kept in
// unmarked for the next cycle (markAgain, kept); one it took, or found
// resolved or gone (pruned), is forgotten.
func (d *Daemon) recordResult(ctx context.Context, id int64, m mark) (kept bool, err error) {
	err = d.deps.Store.MarkApplied(ctx, id, m.res, m.err)
	if err == nil || errors.Is(err, store.ErrResolved) || errors.Is(err, store.ErrNotFound) {
		delete(d.unmarked, id)
		return false, err
	}
	if d.unmarked == nil {
		d.unmarked = map[int64]mark{}
	}
	d.unmarked[id] = m
	return true, err
}

// markAgain records the results the store refused before (unmarked).
func (d *Daemon) markAgain(ctx context.Context) {
	for id, m := range d.unmarked {
		if kept, err := d.recordResult(ctx, id, m); kept {
			d.deps.Logger.Warn("recording an action's result failed again; the next cycle tries again", "action", id, "err", err)
		}
	}
}

// deferredKeep is the keep a deferred action a becomes: the job as it is
// (running on its allocation and plan, or queued), where the policy
// placed it in its orders: rubick queue shows it in its place, with why
// it waits, rather than a gap in the positions.
func deferredKeep(v *View, a policy.Action, reason policy.Reason, detail string) policy.Action {
	k := policy.Action{Kind: policy.Keep, JobID: a.JobID, Reason: reason, Detail: detail, MinRes: a.MinRes, Order: a.Order, Admission: a.Admission}
	if j, ok := v.Snapshot.Job(a.JobID); ok && j.Running() {
		k.Alloc, k.Plan = slices.Clone(j.Alloc), j.Plan
	}
	return k
}

// ReleaseAll runs one cycle that hands the queue back to Slurm: it
// releases every job held for rubick in the managed partitions on its own
// request (its size, --nodelist and time limit as submitted), as it
// releases a job it cannot plan, and plans nothing. Jobs their users or
// administrators hold stay held; running jobs run on. For a maintenance
// of rubickd or its removal, after job_submit.lua stops holding new jobs.
func (d *Daemon) ReleaseAll(ctx context.Context, dryRun bool) (CycleReport, error) {
	d.releaseAll = true
	defer func() { d.releaseAll = false }()
	return d.Cycle(ctx, dryRun)
}

// tokenWarnBefore is how long before its JWT expires rubickd warns: an
// expired token stops every cycle (slurmrestd refuses it). Three days
// leave a weekend to rotate it, and stay quiet for tokens a daily job
// renews with a longer lifespan.
const tokenWarnBefore = 72 * time.Hour

// tokenClaimer is a Cluster that reads its JWT's claims (RESTCluster).
type tokenClaimer interface {
	TokenClaims() (slurm.TokenClaims, error)
}

// watchToken exports when the JWT expires and, from tokenWarnBefore
// before, warns at most once an hour.
func (d *Daemon) watchToken(now time.Time) {
	tc, ok := d.deps.Cluster.(tokenClaimer)
	if !ok {
		return
	}
	c, err := tc.TokenClaims()
	if err != nil || c.Expires.IsZero() {
		d.deps.Metrics.TokenExpiry.Set(0)
		return
	}
	d.deps.Metrics.TokenExpiry.Set(float64(c.Expires.Unix()))
	if left := c.Expires.Sub(now); left < tokenWarnBefore && now.Sub(d.tokenWarned) >= time.Hour {
		d.tokenWarned = now
		d.deps.Logger.Warn("slurmrestd token expires soon: write a new one to the token file (scontrol token)",
			"expires", c.Expires.UTC().Format(time.RFC3339), "left", left.Round(time.Minute).String(), "user", c.User)
	}
}

// applyWorkers bounds the actions applied at once: each is a few scontrol
// calls of about 0.1 s, so a burst of starts would otherwise take seconds.
const applyWorkers = 16

// apply runs the releases (preempt, shrink) first, since they free what the
// others take, then the rest; results keep the order of actions. Each group
// runs concurrently: a preemption waits up to the checkpoint grace for its
// job's checkpoint, and one after another several of them would outlast
// the cycle's deadline, leaving the later jobs signalled (their
// checkpoints written) but not requeued.
func (d *Daemon) apply(ctx context.Context, actions []slurm.Action) []slurm.ActionResult {
	results := make([]slurm.ActionResult, len(actions))
	first := 0
	for first < len(actions) && (actions[first].Kind == slurm.ActionPreempt || actions[first].Kind == slurm.ActionShrink) {
		first++
	}
	d.applyAll(ctx, actions, results, 0, first)
	d.applyAll(ctx, actions, results, first, len(actions))
	return results
}

// applyAll applies actions[from:to] concurrently, at most applyWorkers at
// once, into results[from:to].
func (d *Daemon) applyAll(ctx context.Context, actions []slurm.Action, results []slurm.ActionResult, from, to int) {
	sem := make(chan struct{}, applyWorkers)
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			results[i] = d.deps.Applier.Apply(ctx, actions[i:i+1])[0]
		}(i)
	}
	wg.Wait()
}

func planOf(a slurm.Action) string {
	if a.Tag == nil {
		return ""
	}
	return a.Tag.Plan
}

// jobs polls slurmrestd with update_time and reuses the last list on 304.
// The list is read in full once the begin time of a job it holds as
// waiting for it has come: Slurm does not count that as a change (22.05
// lab: a requeued job's reason went from BeginTime to Resources, and
// update_time from before answered "no change"), and the job would be
// left waiting for its begin time until some other job changed.
func (d *Daemon) jobs(ctx context.Context) ([]slurm.Job, error) {
	d.mu.Lock()
	since, last := d.polled, d.lastJobs
	d.mu.Unlock()
	now := d.deps.Now()
	if beginCame(last, now) {
		since = time.Time{}
	}
	jobs, changed, err := d.deps.Cluster.Jobs(ctx, since)
	if err != nil {
		return nil, fmt.Errorf("read jobs: %w", err)
	}
	if !changed && since.IsZero() {
		return nil, errors.New("read jobs: unchanged answer to a full poll")
	}
	if !changed {
		return last, nil
	}
	d.mu.Lock()
	// One second back: update_time has one-second resolution.
	d.polled, d.lastJobs = now.Add(-time.Second), jobs
	d.mu.Unlock()
	return jobs, nil
}

// beginCame reports whether a pending job of jobs waits, as Slurm last
// said, for a begin time that has come.
func beginCame(jobs []slurm.Job, now time.Time) bool {
	for _, j := range jobs {
		if j.State == slurm.StatePending && j.Reason == "BeginTime" && !j.EligibleTime.IsZero() && !j.EligibleTime.After(now) {
			return true
		}
	}
	return false
}

// Invalidate forgets the cached job list, so the next cycle reads it in
// full; call it after applying actions, which change jobs.
func (d *Daemon) Invalidate() {
	d.mu.Lock()
	d.polled, d.lastJobs = time.Time{}, nil
	d.mu.Unlock()
}

// countJobs sets rubick_jobs: every job of a managed partition by state
// and class, a job with a model type by its tag's class whether or not
// this cycle plans it (one held by an administrator or suspended is still
// rubick's), the others "rigid". Jobs of other partitions are not counted.
func (d *Daemon) countJobs(jobs []slurm.Job) {
	d.deps.Metrics.Jobs.Reset()
	for _, j := range jobs {
		if !inPartitions(j, d.cfg.Partitions) {
			continue
		}
		class := "rigid"
		switch {
		case j.Tag == nil || j.Tag.ModelType == "":
		case j.Tag.Class == slurm.ClassGuaranteed:
			class = slurm.ClassGuaranteed
		default:
			class = slurm.ClassBestEffort
		}
		d.deps.Metrics.Jobs.WithLabelValues(j.State, class).Inc()
	}
}

// arrayTask is the array and task job j is, as the store keeps them: none
// for the array's record of tasks not split off yet.
func arrayTask(j slurm.Job) (array, task int64) {
	if j.ArrayJobID <= 0 || j.ArrayTasks != "" {
		return 0, 0
	}
	return int64(j.ArrayJobID), int64(j.ArrayTaskID)
}

// deferredRefresh is how often the store gets the wait of a job that keeps
// waiting for a release, its --begin or dependencies: a wait that ends
// while rubickd is stopped counts from the last one stored.
const deferredRefresh = 10 * time.Minute

// record stores the jobs, the decision with its reasons, and the actions
// as pending, in that order.
func (d *Daemon) record(ctx context.Context, v *View, plan policy.Plan, actions []slurm.Action, took time.Duration,
	registered func(string) (model.Spec, bool)) (store.Decision, error) {
	// A job's wait for a release, its --begin or dependencies goes to the
	// store when rubick explain is told of it, every deferredRefresh while
	// it lasts, and, the cycle after its last, with the job's first record
	// after it (the time of that last wait); not every cycle.
	deferred := make(map[int]time.Time, len(v.Deferred))
	for _, j := range v.Deferred {
		deferred[j.ID] = v.Snapshot.Now
	}
	written := map[int]time.Time{}
	// The jobs go to the store in one transaction, before the decision
	// that names them: one commit per job cost 0.7 ms each here.
	var jobs []store.Job
	// upsert records a job outside the snapshot.
	upsert := func(j slurm.Job) {
		sj := store.Job{ID: int64(j.ID), Class: store.BestEffort, State: j.State, Submitted: submitTime(j),
			Deferred: cmp.Or(deferred[j.ID], d.deferredSeen[j.ID]), User: j.User, LastRun: d.lastRun(j.ID)}
		if _, ok := deferred[j.ID]; ok {
			written[j.ID] = sj.Deferred
		}
		sj.ArrayJobID, sj.ArrayTaskID = arrayTask(j)
		if j.Tag != nil {
			if _, ok := registered(j.Tag.ModelType); ok {
				sj.ModelType = j.Tag.ModelType
			}
		}
		if j.Tag != nil && j.Tag.Class == slurm.ClassGuaranteed && d.cfg.TenantOf(j.Account, j.QOS) != "" {
			sj.Class = store.Guaranteed // as convertJob reads it
		}
		jobs = append(jobs, sj)
	}
	others := slices.Concat(v.Rigid, v.Waiting, v.Marked)
	for _, a := range v.Arrays {
		others = append(others, a.job)
	}
	for _, j := range others {
		upsert(j)
	}
	for _, pj := range v.Snapshot.Jobs {
		mj := v.managed[pj.ID]
		class := store.BestEffort
		if pj.Guaranteed {
			class = store.Guaranteed
		}
		// The job's model type, not pj.Model, which names the estimator
		// of a job training with a global batch of its own ("gpt2@gb64"):
		// rubick explain and rubick report look the type up by it.
		sj := store.Job{
			ID: int64(mj.slurm.ID), ModelType: mj.tag.ModelType, Class: class, Tenant: pj.Tenant,
			State: mj.slurm.State, Submitted: submitTime(mj.slurm), Deferred: d.deferredSeen[mj.slurm.ID], User: mj.slurm.User,
			LastRun: d.lastRun(mj.slurm.ID),
		}
		sj.ArrayJobID, sj.ArrayTaskID = arrayTask(mj.slurm)
		jobs = append(jobs, sj)
	}
	dec := store.Decision{Policy: d.deps.Policy.Name(), Duration: took, Reasons: map[int64]json.RawMessage{}}
	limits := map[int]time.Duration{}
	raised := map[int]bool{} // by a timelimit action: the run measured slower
	for _, a := range actions {
		if a.TimeLimit > 0 {
			limits[a.JobID] = a.TimeLimit
			raised[a.JobID] = a.Kind == slurm.ActionTimeLimit
		}
	}
	queued := map[string]time.Time{} // when each queued job began to queue
	for _, pj := range v.Snapshot.Jobs {
		if !pj.Running() {
			queued[pj.ID] = pj.Submit
		}
	}
	for _, a := range plan.Actions {
		id, err := strconv.ParseInt(a.JobID, 10, 64)
		if err != nil {
			continue
		}
		if why := v.Adjusted[int(id)]; why != "" {
			// rubick explain shows why the job is not planned from its request.
			a.Detail = strings.TrimPrefix(a.Detail+"; ", "; ") + why
		}
		if b, ok := v.Bounds[int(id)]; ok && a.Placement().GPUs() >= b.GPUs {
			// and which limit it stopped at.
			a.Detail = strings.TrimPrefix(a.Detail+"; ", "; ") + fmt.Sprintf("%d GPUs at most: %s", b.GPUs, b.By)
		}
		if b, ok := v.NodeBounds[int(id)]; ok && len(a.Placement()) >= b.Nodes && a.Placement().GPUs() > 0 {
			a.Detail = strings.TrimPrefix(a.Detail+"; ", "; ") + fmt.Sprintf("%s at most: %s", nodeCount(b.Nodes), b.By)
		}
		if b, ok := v.Mins[int(id)]; ok {
			pl := a.Placement()
			switch {
			case a.Kind == policy.Keep && strings.HasPrefix(a.Detail, "needs at least"):
				a.Detail += ": " + b.By
			case pl.GPUs() > 0 && (pl.GPUs() == b.Min.GPUs || len(pl) == b.Min.Nodes):
				// It stands at its minimum.
				a.Detail = strings.TrimPrefix(a.Detail+"; ", "; ") + fmt.Sprintf("at least %s: %s", b.Min, b.By)
			}
		}
		if tl, ok := limits[int(id)]; ok && v.managed[a.JobID] != nil {
			// and why its time limit is not the one it was submitted with.
			note := timeLimitNote(tl, v.managed[a.JobID].time.user)
			if raised[int(id)] {
				note = fmt.Sprintf("time limit raised to %d min: the run reports a lower speed than its limit was set for", int(tl/time.Minute))
			}
			a.Detail = strings.TrimPrefix(a.Detail+"; ", "; ") + note
		} else if mj := v.managed[a.JobID]; mj != nil && mj.time.fixed && (a.Kind == policy.Start || a.Kind == policy.Restart) {
			a.Detail = strings.TrimPrefix(a.Detail+"; ", "; ") + "time limit kept as set by hand (scontrol update TimeLimit=)"
		}
		if at, ok := queued[a.JobID]; ok && (a.Reason == policy.ReasonNoResources || a.Reason == policy.ReasonStarving) {
			// How long it has queued, as the policy ages it: first for a
			// job left waiting, after its plan for one that starts.
			q := "queued " + v.Snapshot.Now.Sub(at).Round(time.Second).String()
			if a.Kind == policy.Keep {
				a.Detail = strings.TrimSuffix(q+"; "+a.Detail, "; ")
			} else {
				a.Detail = strings.TrimPrefix(a.Detail+"; ", "; ") + q
			}
		}
		raw, err := json.Marshal(a)
		if err != nil {
			return store.Decision{}, fmt.Errorf("encode reason of job %d: %w", id, err)
		}
		dec.Reasons[id] = raw
	}
	for _, j := range v.Waiting {
		// rubick explain says why the job is still held.
		raw, err := json.Marshal(policy.Action{JobID: strconv.Itoa(j.ID), Kind: policy.Keep, Reason: v.waitReason(j), Detail: v.Unmanaged[j.ID]})
		if err != nil {
			return store.Decision{}, fmt.Errorf("encode reason of job %d: %w", j.ID, err)
		}
		dec.Reasons[int64(j.ID)] = raw
	}
	for _, j := range v.Marked {
		// rubick explain says why the job stays held.
		raw, err := json.Marshal(policy.Action{JobID: strconv.Itoa(j.ID), Kind: policy.Keep, Reason: reasonHeld, Detail: v.Unmanaged[j.ID]})
		if err != nil {
			return store.Decision{}, fmt.Errorf("encode reason of job %d: %w", j.ID, err)
		}
		dec.Reasons[int64(j.ID)] = raw
	}
	for _, j := range v.Rigid {
		// rubick explain says why the job was released as submitted.
		why := v.Unmanaged[j.ID]
		if tl, ok := limits[j.ID]; ok {
			why += "; " + timeLimitNote(tl, tl) // only ever the user's back
		}
		raw, err := json.Marshal(policy.Action{JobID: strconv.Itoa(j.ID), Kind: policy.Start, Reason: reasonAsSubmitted, Detail: why})
		if err != nil {
			return store.Decision{}, fmt.Errorf("encode reason of job %d: %w", j.ID, err)
		}
		dec.Reasons[int64(j.ID)] = raw
	}
	// rubick explain says why rubickd leaves alone any other job (a hold,
	// a dependency, a begin time, a license...): stored, with the job, in
	// the cycle the reason first appears or changes, not every cycle; the
	// later cycles list the job as unchanged (rubick queue --all).
	said := map[int]string{}
	for id, why := range v.Unmanaged {
		j, known := v.jobs[id]
		if _, has := dec.Reasons[int64(id)]; has || !known {
			continue
		}
		said[id] = why
		if d.ignoredSaid[id] == why {
			dec.Unchanged = append(dec.Unchanged, int64(id))
			continue
		}
		upsert(j)
		raw, err := json.Marshal(policy.Action{JobID: strconv.Itoa(id), Kind: policy.Keep, Reason: ReasonIgnored, Detail: why})
		if err != nil {
			return store.Decision{}, fmt.Errorf("encode reason of job %d: %w", id, err)
		}
		dec.Reasons[int64(id)] = raw
	}
	for _, j := range v.Deferred {
		if _, now := written[j.ID]; now {
			continue
		}
		if last, ok := d.deferredWritten[j.ID]; ok && v.Snapshot.Now.Sub(last) < deferredRefresh {
			written[j.ID] = last
			continue
		}
		upsert(j)
	}
	// A tagged job's end, while Slurm still lists it (MinJobAge): rubick
	// explain would show the last state the cycle saw, a finished job
	// as running on its plan.
	ended := map[int]bool{}
	for _, id := range slices.Sorted(maps.Keys(v.jobs)) {
		if j := v.jobs[id]; !j.Ended() || j.Tag == nil {
			continue
		}
		ended[id] = true
		if !d.endWritten[id] {
			upsert(v.jobs[id])
		}
	}
	for _, a := range actions {
		n := a.NodeCount()
		if a.GPUsPerNode <= 0 {
			n = 0 // a GPU-less rigid job, or a preempt: no placement to record
		}
		var plan model.Plan
		if n > 0 {
			// A preempt's tag still names the plan the job ran with; the
			// history records a plan only with the placement it runs on.
			plan, _ = model.ParsePlan(planOf(a))
		}
		pl := make(model.Placement, n)
		for i := range pl {
			pl[i] = a.GPUsPerNode
		}
		sa := store.Action{
			JobID: int64(a.JobID), Kind: string(a.Kind), Plan: plan,
			Resources: model.Resources{Placement: pl, CPUs: a.CPUsPerTask * n, HostMemGB: float64(a.MemPerNodeMB) * float64(n) / 1024},
		}
		if a.Tag != nil {
			// For Reconcile: the generation a start or restart writes,
			// and the tag a preemption's requeue is acknowledged in.
			sa.Tag = a.Tag.String()
		}
		if a.Kind == slurm.ActionStart {
			// For userRequests: where a start that stopped after its
			// resize left its job.
			sa.Nodes = slurm.CompressHostlist(a.Nodes)
		}
		dec.Actions = append(dec.Actions, sa)
	}
	if err := d.deps.Store.UpsertJobs(ctx, jobs); err != nil {
		return store.Decision{}, fmt.Errorf("record jobs: %w", err)
	}
	rec, err := d.deps.Store.RecordDecision(ctx, dec)
	if err != nil {
		return store.Decision{}, fmt.Errorf("record decision: %w", err)
	}
	d.ignoredSaid, d.deferredSeen, d.deferredWritten, d.endWritten = said, deferred, written, ended
	return rec, nil
}

// timeLimitNote says what a start set the job's time limit to, and why;
// user is the user's own limit.
func timeLimitNote(tl, user time.Duration) string {
	if tl == user {
		return fmt.Sprintf("time limit back to the user's %d min", int(tl/time.Minute))
	}
	if tl < user {
		// Only a deadline ever cuts below the user's.
		return fmt.Sprintf("time limit %d min: the user's %d min, cut at the job's --deadline", int(tl/time.Minute), int(user/time.Minute))
	}
	return fmt.Sprintf("time limit %d min: the user's %d min, for a plan predicted slower than its request",
		int(tl/time.Minute), int(user/time.Minute))
}

// reasonAsSubmitted is the stored reason of a job released on its own
// request, unplanned; the detail says why.
const reasonAsSubmitted policy.Reason = "as-submitted"

// reasonHeld is the stored reason of a job left held for its user or an
// administrator to release; the detail says why.
const reasonHeld policy.Reason = "held"

// reasonJobLimit is the stored reason of a job kept held while a limit on
// each job (MaxTRESPerJob, MaxWall, a partition's MaxNodes or MaxTime)
// stands at 0, which Slurm starts no job under; the detail names it.
// Before, such a job was stored with policy.ReasonGroup, which old
// decisions keep.
const reasonJobLimit policy.Reason = "job-limit"

// ReasonIgnored is the stored reason of any other job rubickd leaves as it
// is (it lists them under ignored); the detail says why. Stored once per
// change of detail: the later cycles list the job in Decision.Unchanged.
const ReasonIgnored policy.Reason = "ignored"

// Unplanned reports whether r is the stored reason of a job rubickd does
// not hand to the policy (one it leaves held or alone, held for a per-job
// limit of 0, or released as submitted): the job stands in none of the policy's orders, whatever an
// earlier cycle placed it at.
func Unplanned(r policy.Reason) bool {
	return r == reasonHeld || r == ReasonIgnored || r == reasonAsSubmitted || r == reasonJobLimit
}

// Status is what rubickd's /status serves: the last completed cycle's
// report, with Failing while the cycles Run ran since have failed, and
// Setup when a check at rubickd's start failed or warned.
type Status struct {
	CycleReport
	// Failing is nil unless Run's last cycle failed, Waiting unless it
	// waited for released jobs to start, and Setup unless a start-up
	// check did not pass, which keeps the JSON of a healthy rubickd its
	// last report's.
	Failing *Failing     `json:"failing,omitempty"`
	Waiting *Waiting     `json:"waiting,omitempty"`
	Setup   *SetupChecks `json:"setup,omitempty"`
}

// Waiting says that Run's cycles since the last completed one decided
// nothing: each waited for Slurm to start jobs rubickd had released
// (StartGrace at most from each release). The last completed cycle, the
// one status shows, is older meanwhile, and nothing else would say why.
type Waiting struct {
	// Since is when the first of those cycles began.
	Since time.Time `json:"since"`
	// Jobs are the released jobs the last one waited for.
	Jobs []int `json:"jobs"`
}

// Failing says that Run's cycles fail: /healthz answers 200 for a while
// after the last completed one, and only the log would tell.
type Failing struct {
	// Since is when the first failed cycle began.
	Since  time.Time `json:"since"`
	Cycles int       `json:"cycles"`
	// Error is why the last failed.
	Error string `json:"error"`
}

// Status returns the report of the last applied cycle, how Run's cycles
// fail since, if they do, and the start-up checks that did not pass.
func (d *Daemon) Status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Status{CycleReport: d.last, Setup: d.deps.Setup, Waiting: d.waiting}
	if d.lastErr != nil {
		s.Failing = &Failing{Since: d.failedSince, Cycles: d.failedCycles, Error: d.lastErr.Error()}
	}
	return s
}

// Health is nil while Run completes cycles: one within three of the
// longest a cycle may take (the interval, the checkpoint grace and two
// command timeouts) of now, or Run started that recently. Otherwise it
// says since when none completed and why the last failed; /healthz
// answers 503 with it.
func (d *Daemon) Health() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	window := d.window
	now := d.deps.Now()
	ref, what := d.last.At, "no cycle completed since "
	if ref.IsZero() {
		ref, what = d.started, "no cycle completed since rubickd started at "
	}
	if ref.IsZero() || now.Sub(ref) <= window {
		return nil
	}
	msg := fmt.Sprintf("%s%s (%s ago, more than %s)", what, ref.UTC().Format(time.RFC3339), now.Sub(ref).Round(time.Second), window)
	if d.lastErr != nil {
		msg += ": last cycle failed: " + d.lastErr.Error()
	}
	return errors.New(msg)
}

// cycleLimit is the longest a cycle may take: its reads within an
// interval, then the two groups apply runs one after the other (releases,
// then the rest), each of which may wait the checkpoint grace and a few
// commands (a preemption and a restart both checkpoint their jobs).
func (d *Daemon) cycleLimit() time.Duration {
	return d.cfg.Interval + 2*(d.cfg.Checkpoint.Grace+2*d.cfg.Commands.Timeout)
}

// healthWindow is three of the longest cycles the configuration allows.
func (d *Daemon) healthWindow() time.Duration {
	return 3 * d.cycleLimit()
}

// pruneEvery is how often Run applies the retention settings.
const pruneEvery = time.Hour

// Prune deletes what the retention settings do not keep.
func (d *Daemon) Prune(ctx context.Context) (store.Pruned, error) {
	r := store.Retention{SamplesPerConfig: d.cfg.Retention.SamplesPerConfig}
	if d.cfg.Retention.Reasons > 0 {
		r.ReasonsBefore = d.deps.Now().Add(-d.cfg.Retention.Reasons)
	}
	p, err := d.deps.Store.Prune(ctx, r)
	if err != nil {
		return p, err
	}
	if p != (store.Pruned{}) {
		d.deps.Logger.Info("store pruned", "reasons", p.Reasons, "decisions", p.Decisions, "samples", p.Samples)
	}
	return p, nil
}

// Run reconciles, then runs a cycle every interval until ctx ends or
// another rubickd that started first is seen managing the cluster
// (ErrOtherWriter), and prunes the store once an hour. A cycle in progress when ctx ends
// finishes with a fresh context bounded by the command timeout, so SIGTERM
// never leaves a half-applied action behind.
func (d *Daemon) Run(ctx context.Context) error {
	d.mu.Lock()
	d.started, d.window = d.deps.Now(), d.healthWindow()
	d.mu.Unlock()
	d.inRun = true
	if err := d.Reconcile(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped, not failed: the next start reconciles anew.
			d.stopping(ctx, "reconciling stopped")
			return nil
		}
		return err
	}
	interval := d.cfg.Interval
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var pruned time.Time
	for {
		if now := d.deps.Now(); now.Sub(pruned) >= pruneEvery {
			pruned = now
			if _, err := d.Prune(ctx); err != nil {
				d.deps.Logger.Warn("pruning the store failed", "err", err)
			}
		}
		rep, err := d.runCycle(ctx)
		if errors.Is(err, ErrLocked) {
			return err
		}
		if err != nil {
			d.deps.Logger.Error("cycle failed", "err", err)
		} else if len(rep.Actions) > 0 {
			d.Invalidate()
		}
		if d.cfg.Interval != interval { // a reload changed it
			interval = d.cfg.Interval
			tick.Reset(interval)
		}
		select {
		case <-ctx.Done():
			d.stopping(ctx, "the cycle in progress finished")
			return nil
		case <-tick.C:
		}
	}
}

// stopping says that Run ends because ctx did, for the journal: the next
// rubickd may start only once this one is gone (the instance lock).
func (d *Daemon) stopping(ctx context.Context, what string) {
	d.deps.Logger.Info("rubickd stopping; "+what, "cause", context.Cause(ctx))
}

// runCycle runs one of Run's cycles, bounded by the longest a cycle may
// take, and notes how it ended for Health and Status; ErrLocked, which
// ends Run, is not noted.
func (d *Daemon) runCycle(ctx context.Context) (CycleReport, error) {
	start := d.deps.Now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cycleLimit())
	rep, err := d.Cycle(cctx, false)
	cancel()
	if errors.Is(err, ErrLocked) {
		return rep, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastErr, d.window = err, d.healthWindow() // a reload may have changed it
	switch {
	case err == nil && d.failedCycles > 0:
		// The journal shows each failure; without this line it would not
		// show that they ended.
		d.deps.Logger.Info("cycles complete again", "failed_cycles", d.failedCycles, "failing_since", d.failedSince)
		d.failedSince, d.failedCycles = time.Time{}, 0
	case err == nil:
	case d.failedCycles == 0:
		d.failedSince, d.failedCycles = start, 1
	default:
		d.failedCycles++
	}
	switch {
	case err != nil || len(rep.Starting) == 0:
		d.waiting = nil
	case d.waiting == nil:
		d.waiting = &Waiting{Since: start, Jobs: rep.Starting}
	default:
		d.waiting = &Waiting{Since: d.waiting.Since, Jobs: rep.Starting}
	}
	return rep, err
}

// WaitCheckpoint returns the Applier's checkpoint wait: it polls the job
// until it stops running, which is what a job under rubick-srun does once
// its trainer has checkpointed (it requeues itself held). A job still
// completing is waited for: its final state (requeued, failed, cancelled)
// is what tells the Applier whether to requeue it. The Applier bounds the
// wait and requeues the job itself when the bound passes.
func WaitCheckpoint(c Cluster, every time.Duration) func(ctx context.Context, j slurm.Job) error {
	return func(ctx context.Context, j slurm.Job) error {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
			now, err := c.Job(ctx, j.ID)
			if err == nil && !stillRunning(now) {
				return nil
			}
		}
	}
}

// stillRunning reports whether j runs or is on its way out of running:
// COMPLETING is a base state in 22.05 and a flag in 24.11.
func stillRunning(j slurm.Job) bool {
	return j.State == slurm.StateRunning || j.State == slurm.StateCompleting ||
		slices.Contains(j.StateFlags, slurm.StateCompleting)
}
