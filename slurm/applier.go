package slurm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ActionKind is what the Applier does to a job.
type ActionKind string

// Action kinds; each maps to a command sequence tested on a real cluster
// (docs/slurm.md).
const (
	// ActionStart sizes and places a held pending job, then releases it.
	ActionStart ActionKind = "start"
	// ActionShrink removes nodes from a running job (never its batch host).
	ActionShrink ActionKind = "shrink"
	// ActionRestart checkpoints a running job, requeues it held, resizes it
	// and releases it: the only way to change GPUs, CPUs or the plan.
	ActionRestart ActionKind = "restart"
	// ActionAnnotate writes the rubick tag into the AdminComment.
	ActionAnnotate ActionKind = "annotate"
	// ActionPreempt checkpoints a running job and puts it back in the queue,
	// held, then writes its tag (when it has one).
	ActionPreempt ActionKind = "preempt"
	// ActionRelease releases a held pending job as it is, after merging
	// its tag: for jobs Slurm does not let rubick resize (heterogeneous
	// jobs; the leader's release starts every component).
	ActionRelease ActionKind = "release"
	// ActionTimeLimit sets the time limit of a running or pending job
	// (TimeLimit), and its tag when it has one (in the same update), and
	// nothing else.
	ActionTimeLimit ActionKind = "timelimit"
	// ActionSplit splits tasks off a pending job array's single record, each
	// into a job of its own that keeps the hold and the tag, so that every
	// task can be sized and released alone.
	ActionSplit ActionKind = "split"
)

// Action is one change to one job, in Slurm's terms.
type Action struct {
	Kind  ActionKind
	JobID int
	// Nodes is the node list to run on (start, restart) or to keep
	// (shrink). For start and restart it may be empty to let Slurm place
	// NumNodes nodes, or, for start, shorter than NumNodes: nodes the job
	// must include (a user's --nodelist).
	Nodes []string
	// Tasks are the array task IDs a split takes off the array's record.
	Tasks []int
	// ClearNodes, with Nodes empty, also clears the node list an earlier
	// start set, so that Slurm places the job anywhere.
	ClearNodes bool
	// NumNodes defaults to len(Nodes).
	NumNodes     int
	GPUsPerNode  int
	CPUsPerTask  int
	MemPerNodeMB int64
	// MemPerGPUFloorMB is the memory per GPU (MiB) a --mem-per-gpu job was
	// submitted with, which its steps still ask for: a start or restart
	// sets no less. 0: the job's memory per GPU now (Job.MemPerGPUMB),
	// which an earlier resize may have raised.
	MemPerGPUFloorMB int64
	// Partition, when set, narrows a pending job submitted to several
	// partitions to the one its Nodes are in (start only).
	Partition string
	// TimeLimit, when set, is the job's time limit from this start (start
	// and restart), or its new one (timelimit), in whole minutes rounded
	// up.
	TimeLimit time.Duration
	// Tag, when set, is merged into the AdminComment (before the release
	// for start and restart, so the job reads its new plan when it starts),
	// with TagRestarts set to the job's restart count then.
	Tag *Tag
	// Hold, with annotate, also marks the job held by its user
	// (UserHoldWord in its Comment), in an update before the tag's.
	Hold bool
	// MailType, with annotate, gives a running job back the mail types
	// rubick quieted at its requeue (its tag's TagMail), in an update
	// before the tag's, which no longer has them. If the job's mail types
	// are not the quieted ones any more (its user changed them, or an
	// earlier give-back whose tag was not written gave them back), they
	// stay as they are.
	MailType string
	// Acknowledge, with annotate, says the tag acknowledges a requeue of
	// rubick's own whose tag was not written (a failure or a crash after
	// the requeue): the job then reads as requeued by someone else
	// (RequeuedByOther), which refuses any other annotate.
	Acknowledge bool
	// BeforeRequeue, when set, is called with the restart count a
	// preemption's or restart's requeue gives the job, and the action's tag
	// as the requeue leaves it (its run counted to now, RanAt; nil without
	// one), just before the requeue is issued; an error stops the action
	// there, the job running on. The caller records both (the store's
	// WillRequeue): after a crash, a job requeued and held at another count
	// was requeued by someone else, whose hold is theirs, and one at that
	// count is acknowledged in that tag.
	BeforeRequeue func(ctx context.Context, restarts int, tag *Tag) error `json:"-"`
	// RanAt, for a preemption or restart, is when Tag's run time (TagRan)
	// was counted, the job running: the requeue adds the run from then to
	// itself, the checkpoint wait included, which nothing else counts (the
	// job's next run starts over). Zero adds none, as does a requeue an
	// earlier attempt issued, whose time is not known.
	RanAt time.Time
}

// StepResult is one executed (or skipped) step of an action.
type StepResult struct {
	Name string
	// Argv is the command run; empty for waits and reads.
	Argv     []string
	Err      error
	Note     string
	Duration time.Duration
}

// ActionResult is the outcome of one action. Partial failure is normal:
// Err says what failed and, after any failure, After holds the job as
// Slurm now reports it (a multi-field update can be half-applied).
type ActionResult struct {
	Action Action
	Err    error
	Steps  []StepResult
	// After is the job re-read after a failure; nil on success or when the
	// re-read failed too (AfterErr).
	After    *Job
	AfterErr error
	// MailWas is what the action took BEGIN and REQUEUE out of the job's
	// mail types (a TagMail value; empty when it did not): a tag that
	// acknowledges its requeue after a failure keeps it, or the job never
	// gets them back.
	MailWas string
	// RequeueCount is the restart count the action's requeue gives the job
	// (Action.BeforeRequeue's); 0 when it issued none.
	RequeueCount int
}

// MayHaveRequeued reports whether the action may have requeued its job
// itself: its scontrol requeuehold succeeded, or was killed at its timeout
// (exit code -1), after which slurmctld may still have done it. After a
// failure, the job may then wait held with a restart count its tag does not
// acknowledge yet (RequeuedByOther).
func (r ActionResult) MayHaveRequeued() bool {
	return slices.ContainsFunc(r.Steps, func(s StepResult) bool {
		var ce *CommandError
		return s.Name == "requeuehold" && len(s.Argv) > 0 && (s.Err == nil || errors.As(s.Err, &ce) && ce.ExitCode == -1)
	})
}

// ErrJobState means the job is not in a state the action applies to.
var ErrJobState = errors.New("job is not in the required state")

// ErrBadAction means the action is invalid on its face (e.g. it would drop
// the batch host); nothing was run.
var ErrBadAction = errors.New("invalid action")

// ApplierConfig configures an Applier. Zero values take the defaults.
type ApplierConfig struct {
	// Scontrol and Scancel are the binaries (default "scontrol", "scancel"
	// from PATH).
	Scontrol, Scancel string
	// Runner defaults to ExecRunner.
	Runner Runner
	// Cluster reads the job state (required).
	Cluster Cluster
	Clock   Clock
	Logger  *slog.Logger
	// CommandTimeout bounds each command (default 30 s).
	CommandTimeout time.Duration
	// Signal is the checkpoint signal (default "USR1"), sent to the batch
	// shell with `scancel --signal=SIG --batch`.
	Signal string
	// WaitCheckpoint waits until the job has written its checkpoint after
	// the signal. Default: sleep CheckpointTimeout. It is bounded by
	// CheckpointTimeout (default 60 s); when the bound passes the restart
	// goes on, losing the progress since the last checkpoint.
	WaitCheckpoint    func(ctx context.Context, job Job) error
	CheckpointTimeout time.Duration
	// PendingTimeout bounds the wait for PENDING after a requeue (default
	// 60 s); PollInterval is the poll period (default 1 s).
	PendingTimeout time.Duration
	PollInterval   time.Duration
	// RequeueMail keeps a job's BEGIN and REQUEUE mails at rubick's
	// requeues and restarts. Slurm sends both at every one (22.05 lab: a
	// --mail-type=ALL job mailed "Requeued" and "Began" again at its
	// preemption and restart), so by default the first requeue takes those
	// two types out of the job's MailType; END, FAIL and the rest stay.
	RequeueMail bool
	// ReleaseDelay is the wait between the requeue and StartTime=now plus
	// release (default 2 s, at least 1 s): a release in the same second as
	// the credential revoke kills the job for good ("Job credential
	// revoked").
	ReleaseDelay time.Duration
	// Instance names this rubickd in every tag it writes (TagBy), so that
	// another rubickd on the cluster can tell the writes are not its own.
	// Empty writes none.
	Instance string
}

// Applier runs actions against Slurm with scontrol and scancel.
type Applier struct {
	cfg ApplierConfig
}

// NewApplier returns an Applier; cfg.Cluster is required.
func NewApplier(cfg ApplierConfig) (*Applier, error) {
	if cfg.Cluster == nil {
		return nil, errors.New("slurm: ApplierConfig.Cluster is nil")
	}
	if cfg.Scontrol == "" {
		cfg.Scontrol = "scontrol"
	}
	if cfg.Scancel == "" {
		cfg.Scancel = "scancel"
	}
	if cfg.Runner == nil {
		cfg.Runner = ExecRunner{}
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CommandTimeout <= 0 {
		cfg.CommandTimeout = 30 * time.Second
	}
	if cfg.Signal == "" {
		cfg.Signal = "USR1"
	}
	if cfg.CheckpointTimeout <= 0 {
		cfg.CheckpointTimeout = 60 * time.Second
	}
	if cfg.PendingTimeout <= 0 {
		cfg.PendingTimeout = 60 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.ReleaseDelay < time.Second {
		cfg.ReleaseDelay = 2 * time.Second
	}
	if !validToken(cfg.Signal) {
		return nil, fmt.Errorf("slurm: bad signal name %q", cfg.Signal)
	}
	return &Applier{cfg: cfg}, nil
}

// Apply runs the actions in order and returns one result per action. A
// failed action does not stop the others; a done ctx does.
func (a *Applier) Apply(ctx context.Context, actions []Action) []ActionResult {
	out := make([]ActionResult, 0, len(actions))
	for _, act := range actions {
		if err := ctx.Err(); err != nil {
			out = append(out, ActionResult{Action: act, Err: err})
			continue
		}
		out = append(out, a.ApplyOne(ctx, act))
	}
	return out
}

// ApplyOne runs one action.
func (a *Applier) ApplyOne(ctx context.Context, act Action) ActionResult {
	r := &run{a: a, res: ActionResult{Action: act}, log: a.cfg.Logger.With("job_id", act.JobID, "action", string(act.Kind))}
	err := r.do(ctx)
	r.res.Err = err
	if err != nil {
		r.log.Warn("slurm action failed", "err", err)
		if !errors.Is(err, ErrBadAction) {
			// re-read with a fresh context: ctx may be the reason we failed
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.CommandTimeout)
			j, rerr := a.cfg.Cluster.Job(rctx, act.JobID)
			cancel()
			if rerr != nil {
				r.res.AfterErr = rerr
			} else {
				r.res.After = &j
				r.log.Info("job after failed action", "state", j.State, "reason", j.Reason,
					"nodes", strings.Join(j.NodeList, ","), "gpus_per_node", j.GPUsPerNode)
			}
		}
	} else {
		r.log.Info("slurm action applied", "steps", len(r.res.Steps))
	}
	r.res.MailWas = r.mailWas
	return r.res
}

type run struct {
	a   *Applier
	res ActionResult
	log *slog.Logger
	// ref names the job to scontrol and scancel (Job.Ref), once read.
	ref string
	// mailWas is the MailType quietMail took BEGIN and REQUEUE out of, as
	// a tag value; every tag this run writes keeps it (TagMail).
	mailWas string
}

func (r *run) do(ctx context.Context) error {
	act := r.res.Action
	if act.JobID <= 0 {
		return fmt.Errorf("%w: job id %d", ErrBadAction, act.JobID)
	}
	if err := validateAction(act); err != nil {
		return err
	}
	job, err := r.read(ctx, "read job")
	if err != nil {
		return err
	}
	r.ref = job.Ref()
	if act.Tag != nil {
		// A newer rubick's tag is not this one's to write over: refused
		// before any step, so that the job is not left half changed.
		if err := CheckTagVersion(job.AdminComment); err != nil {
			return fmt.Errorf("%s job %d: %w", act.Kind, act.JobID, err)
		}
	}
	switch act.Kind {
	case ActionSplit:
		if job.State != StatePending || job.ArrayTasks == "" {
			return fmt.Errorf("split job %d: %w: %s, not a pending array record", act.JobID, ErrJobState, job.State)
		}
		for _, k := range act.Tasks {
			// Any update of one task splits it off; the AdminComment it
			// already has is one that cannot change anything else.
			task := fmt.Sprintf("JobId=%d_%d", act.JobID, k)
			if err := r.cmd(ctx, "split", r.a.cfg.Scontrol, "update", task, "AdminComment="+job.AdminComment); err != nil {
				return err
			}
		}
		return nil
	case ActionAnnotate:
		if act.Tag == nil {
			return fmt.Errorf("%w: annotate without a tag", ErrBadAction)
		}
		if !act.Hold && !act.Acknowledge && RequeuedByOther(job) {
			// The tag's restart count would claim their requeue for
			// rubick. Marking it held by them (Hold) is what counts it.
			return fmt.Errorf("annotate job %d: %w", act.JobID, errRequeuedByOther)
		}
		if act.Hold && !RequeuedByOther(job) {
			// Released (or started) since the cycle read it: the mark
			// would stay on a job no one holds, and read as its user's
			// hold at its next requeue.
			return fmt.Errorf("annotate job %d: %w: no longer requeued and held by someone else", act.JobID, ErrJobState)
		}
		return r.annotate(ctx, job)
	case ActionStart:
		if job.State != StatePending {
			return fmt.Errorf("start job %d: %w: %s, want PENDING", act.JobID, ErrJobState, job.State)
		}
		if err := heldByOthers(job); err != nil {
			return fmt.Errorf("start job %d: %w", act.JobID, err)
		}
		return r.sizeAndRelease(ctx, job, false, time.Time{})
	case ActionRelease:
		if job.State != StatePending {
			return fmt.Errorf("release job %d: %w: %s, want PENDING", act.JobID, ErrJobState, job.State)
		}
		if err := heldByOthers(job); err != nil {
			return fmt.Errorf("release job %d: %w", act.JobID, err)
		}
		if act.Tag != nil {
			if err := r.annotate(ctx, job); err != nil {
				return err
			}
		}
		return r.cmd(ctx, "release", r.a.cfg.Scontrol, "release", r.id())
	case ActionShrink:
		return r.shrink(ctx, job)
	case ActionTimeLimit:
		if job.State != StateRunning && job.State != StatePending {
			return fmt.Errorf("time limit of job %d: %w: %s, want RUNNING or PENDING", act.JobID, ErrJobState, job.State)
		}
		if RequeuedByOther(job) {
			// Theirs now, and the tag would count their requeue as rubick's.
			return fmt.Errorf("time limit of job %d: %w", act.JobID, errRequeuedByOther)
		}
		args := limitArgs(job, act.TimeLimit)
		if act.Tag != nil {
			// In the same update: a tag that says what limit rubick set
			// must never lag behind it.
			tag, err := tagArgs(job, *act.Tag, false, r.a.cfg.Instance, r.mailWas)
			if err != nil {
				return err
			}
			args = append(args, tag...)
		}
		return r.updateTag(ctx, "time limit", args)
	case ActionRestart:
		seen := r.a.cfg.Clock.Now()
		requeued, err := r.checkpointRequeue(ctx, job)
		if err != nil {
			return err
		}
		if err := r.ackRequeue(ctx, nil, job, requeued); err != nil {
			return err
		}
		job, err = r.waitPending(ctx)
		if err != nil {
			return err
		}
		if requeued.IsZero() {
			// Found requeued (by rubick-srun since the cycle read it):
			// perhaps within the second, which a release must not share.
			requeued = seen
		}
		return r.sizeAndRelease(ctx, job, true, requeued)
	case ActionPreempt:
		requeued, err := r.checkpointRequeue(ctx, job)
		if err != nil {
			return err
		}
		// After the requeue, not before: a tag saying the job has run so
		// far on a job still running would count that run twice.
		return r.ackRequeue(ctx, r.res.Action.Tag, job, requeued)
	}
	return fmt.Errorf("%w: unknown kind %q", ErrBadAction, act.Kind)
}

// validateAction rejects what must never reach scontrol.
func validateAction(act Action) error {
	bad := func(f string, args ...any) error {
		return fmt.Errorf("%w: job %d %s: %s", ErrBadAction, act.JobID, act.Kind, fmt.Sprintf(f, args...))
	}
	for _, n := range act.Nodes {
		if !validToken(n) {
			return bad("node name %q", n)
		}
	}
	if len(act.Nodes) != len(slices.Compact(slices.Sorted(slices.Values(act.Nodes)))) {
		return bad("duplicate nodes in %v", act.Nodes)
	}
	// More nodes than listed, for a start, is a user's --nodelist given
	// back: the listed nodes and others.
	if act.NumNodes != 0 && len(act.Nodes) != 0 && act.NumNodes != len(act.Nodes) &&
		(act.Kind != ActionStart || act.NumNodes < len(act.Nodes)) {
		return bad("NumNodes %d but %d nodes listed", act.NumNodes, len(act.Nodes))
	}
	if act.Tag != nil {
		if err := act.Tag.Validate(); err != nil {
			// Both sentinels: a bad action, because of a bad tag.
			return fmt.Errorf("%w: job %d %s: %w", ErrBadAction, act.JobID, act.Kind, err)
		}
	}
	if act.Hold && act.Kind != ActionAnnotate {
		return bad("a hold is marked by annotate only")
	}
	if !act.RanAt.IsZero() {
		if act.Kind != ActionPreempt && act.Kind != ActionRestart || act.Tag == nil {
			return bad("RanAt counts the run to a requeue: preempt and restart only, with a tag")
		}
		if _, err := act.Tag.RanTime(); err != nil {
			return bad("%v", err)
		}
	}
	if act.MailType != "" && (act.Kind != ActionAnnotate || act.Tag == nil || strings.Trim(act.MailType, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_,") != "") {
		return bad("MailType %q: mail types are given back by annotate only, with a tag", act.MailType)
	}
	switch act.Kind {
	case ActionStart, ActionRestart:
		if act.NodeCount() < 1 {
			return bad("no node count")
		}
		if act.CPUsPerTask < 1 {
			// NumCPUs is never lowered by Slurm: always send the full size
			return bad("CPUsPerTask %d, want >= 1", act.CPUsPerTask)
		}
		if act.GPUsPerNode < 0 || act.MemPerNodeMB < 0 || act.MemPerGPUFloorMB < 0 || act.TimeLimit < 0 {
			return bad("negative GPUs, memory or time limit")
		}
	case ActionShrink:
		if act.NodeCount() < 1 {
			return bad("shrinking to %d nodes", act.NodeCount())
		}
	case ActionTimeLimit:
		if act.TimeLimit <= 0 {
			return bad("TimeLimit %v, want > 0", act.TimeLimit)
		}
	case ActionSplit:
		if len(act.Tasks) == 0 {
			return bad("no tasks")
		}
		for _, k := range act.Tasks {
			if k < 0 {
				return bad("task %d", k)
			}
		}
	}
	return nil
}

// NodeCount is the number of nodes a start, restart or shrink puts the
// job on: NumNodes, or the nodes listed when it is 0.
func (act Action) NodeCount() int {
	if act.NumNodes > 0 {
		return act.NumNodes
	}
	return len(act.Nodes)
}

// memPerGPUOf is the memory per GPU (MiB) a start or restart sets for a
// --mem-per-gpu job: the action's memory per node spread over its GPUs,
// never below the job's submitted value (MemPerGPUFloorMB); the job's
// value now for an action that sets no memory; 0 for any other job.
func memPerGPUOf(job Job, act Action) int64 {
	if job.MemPerGPUMB <= 0 || act.GPUsPerNode <= 0 {
		return 0
	}
	if act.MemPerNodeMB <= 0 {
		return job.MemPerGPUMB
	}
	floor := cmp.Or(act.MemPerGPUFloorMB, job.MemPerGPUMB)
	return max(floor, (act.MemPerNodeMB+int64(act.GPUsPerNode)-1)/int64(act.GPUsPerNode))
}

// MemMB is the memory (MiB) job holds over all its nodes once the start or
// restart act has run, as Slurm counts it against memory limits; 0 when
// act sets none.
func (act Action) MemMB(job Job) int64 {
	n := int64(act.NodeCount())
	if m := memPerGPUOf(job, act); m > 0 {
		return m * int64(act.GPUsPerNode) * n
	}
	return act.MemPerNodeMB * n
}

// validToken accepts node names and signal names, nothing with spaces,
// '=', ',' or shell characters.
func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func (r *run) jobArg() string { return "JobId=" + r.id() }
func (r *run) id() string {
	if r.ref != "" {
		return r.ref
	}
	return strconv.Itoa(r.res.Action.JobID)
}

// annotate writes the action's tag (and hold) to job as it is now.
func (r *run) annotate(ctx context.Context, job Job) error {
	act := r.res.Action
	if act.MailType == "" {
		return r.writeTag(ctx, job, *act.Tag, act.Hold)
	}
	if HasWord(job.Comment, RequeueWord) {
		// rubick-srun is requeueing the job (a plan its line cannot
		// run): the tag write would take its mark out, and the requeue
		// would look like someone else's. The next run gets the mails.
		r.step(StepResult{Name: "restore mail", Note: "the job is requeueing itself; its mail types wait for its next run"})
		return nil
	}
	out, err := r.output(ctx, "read mail type", r.a.cfg.Scontrol, "show", "job", "-o", r.id())
	if err != nil {
		return err
	}
	if !sameMailTypes(mailTypes(MailTypeOf(string(out))), quietTypes(mailTypes(act.MailType))) {
		r.step(StepResult{Name: "restore mail", Note: "its mail types changed since rubick quieted them; left as they are"})
		return r.writeTag(ctx, job, *act.Tag, act.Hold)
	}
	// MailType= first, in an update of its own, as a hold's mark: Slurm
	// may take part of a multi-field update (docs/slurm.md), and a tag
	// without mail= but the mail types still quieted would leave no record
	// of what is owed. The tag keeps mail= until they are back; a retry
	// finds them back, not quieted, and writes the tag alone.
	if err := r.cmd(ctx, "restore mail", r.a.cfg.Scontrol, "update", r.jobArg(), "MailType="+act.MailType); err != nil {
		return err
	}
	return r.writeTag(ctx, job, *act.Tag, act.Hold)
}

// sameMailTypes compares two lists of mail types as sets.
func sameMailTypes(a, b []string) bool {
	return slices.Equal(slices.Compact(slices.Sorted(slices.Values(a))), slices.Compact(slices.Sorted(slices.Values(b))))
}

// writeTag writes tag (and hold) to job as it is now, in one update
// (tagArgs) with the arguments of extra, after one that marks the hold
// where the job lacks the mark; nothing runs when no field changes.
func (r *run) writeTag(ctx context.Context, job Job, tag Tag, hold bool, extra ...string) error {
	if _, err := tagArgs(job, tag, hold, r.a.cfg.Instance, r.mailWas); err != nil {
		return err // before the hold's mark, which would stay without its count
	}
	if hold && !HasWord(job.Comment, UserHoldWord) {
		// The mark first, in an update of its own: Slurm may take part of
		// a multi-field update (docs/slurm.md), and a restart count in the tag
		// without the mark would read as rubick's own hold, which rubickd
		// releases. A mark without its count is marked again.
		marked := WithWord(job.Comment, UserHoldWord)
		if err := r.cmd(ctx, "hold", r.a.cfg.Scontrol, "update", r.jobArg(), "Comment="+marked); err != nil {
			return err
		}
		job.Comment = marked
	}
	args, err := tagArgs(job, tag, hold, r.a.cfg.Instance, r.mailWas)
	if err != nil {
		return err
	}
	if args = slices.Concat(extra, args); len(args) == 0 {
		r.step(StepResult{Name: "annotate", Note: "AdminComment already up to date"})
		return nil
	}
	return r.updateTag(ctx, "annotate", args)
}

// updateTag sends args, an update that writes a tag (tagArgs, after any
// fields that must go with it), with the Comment in an update of its own
// after the rest. Slurm may take part of a multi-field update
// (docs/slurm.md), and the Comment only ever loses rubick-srun's requeue
// mark or its mail word there: taken alone, it would leave a job whose
// tag does not count that requeue yet (RequeuedByOther, held for its
// user) or does not keep the mail types yet.
func (r *run) updateTag(ctx context.Context, name string, args []string) error {
	update := []string{r.a.cfg.Scontrol, "update", r.jobArg()}
	c := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "Comment=") })
	if c < 0 || len(args) == 1 {
		return r.cmd(ctx, name, append(update, args...)...)
	}
	if err := r.cmd(ctx, name, slices.Concat(update, args[:c], args[c+1:])...); err != nil {
		return err
	}
	return r.cmd(ctx, name+" comment", append(update, args[c])...)
}

// tagArgs are the scontrol update arguments that write tag, with the
// job's restart count (TagRestarts), into the AdminComment job has now,
// and its Comment: without RequeueWord unless the job runs (that requeue
// is rubick's, and this is its answer), and with UserHoldWord for hold.
// by, when set, names the writer (TagBy); quieted, when set, is the
// MailType the writer's run took BEGIN and REQUEUE out of (TagMail), which
// the tag keeps. Only the fields that change; none when neither does.
func tagArgs(job Job, tag Tag, hold bool, by, quieted string) ([]string, error) {
	if job.Tag != nil && job.Tag.Class != "" {
		// The class is job_submit.lua's to write: a new QOS or account
		// since the cycle read the job has changed it.
		tag.Class = job.Tag.Class
	}
	tag.Extra = maps.Clone(tag.Extra)
	if tag.Extra == nil {
		tag.Extra = map[string]string{}
	}
	tag.Extra[TagRestarts] = strconv.Itoa(job.RestartCount)
	if by != "" {
		tag.Extra[TagBy] = by
	}
	comment := job.Comment
	if job.State != StateRunning {
		// A running job's mark is rubick-srun's requeue to come, which
		// this tag does not answer: taken out, that requeue would read
		// as someone else's (RequeuedByOther).
		comment = WithoutWord(comment, RequeueWord)
	}
	// The mail types rubick-srun quieted for its own requeue move into the
	// tag, to be given back once the job runs (Action.MailType). Each
	// quieting records what it found over an older record: that one's
	// mail types were quieted, so the job's are another choice of its
	// user's since, and the give-back, which leaves mail types that are
	// not the record's quieted ones as they are, would drop both.
	mail, comment := mailOfComment(comment)
	switch {
	case quieted != "":
		tag.Extra[TagMail] = quieted
	case mail != "":
		tag.Extra[TagMail] = mail
	}
	merged, err := MergeAdminComment(job.AdminComment, tag)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadAction, err)
	}
	if hold {
		comment = WithWord(comment, UserHoldWord)
	}
	var args []string
	if merged != job.AdminComment {
		args = append(args, "AdminComment="+merged)
	}
	if comment != job.Comment {
		args = append(args, "Comment="+comment)
	}
	return args, nil
}

// countRun adds to the action's tag the run from RanAt to requeued, as
// checkpointRequeue requeues the job or finds it requeued itself: the
// tags written from then on (BeforeRequeue's record, ackRequeue's, the
// restart's) count it, so
// that the checkpoint wait is neither lost from the job's time limit nor
// from its restart cost. A tag without ran= counts no run to add to
// (validateAction rejects one that does not read).
func (r *run) countRun(requeued time.Time) {
	act := &r.res.Action
	if act.Tag == nil || act.RanAt.IsZero() {
		return
	}
	d := requeued.Sub(act.RanAt)
	ran, err := act.Tag.RanTime()
	if _, ok := act.Tag.Extra[TagRan]; !ok || err != nil || d < time.Second {
		return
	}
	tag := *act.Tag
	tag.Extra = maps.Clone(tag.Extra)
	tag.Extra[TagRan] = RanSeconds(ran + d.Truncate(time.Second))
	act.Tag = &tag
}

// ackRequeue writes the tag (the job's own when tag is nil; a restart's
// with the run time its tag counts, TagRan) once the job is requeued, so that its restart count says the requeue was rubick's: a
// failure or a crash before the next step must not leave it looking like
// someone else's (RequeuedByOther), held for them. Slurm takes the
// AdminComment of a job still COMPLETING (both labs). before is the job
// as read before; requeued is when this run requeued it (zero when an
// earlier attempt had): then the count is one past before's at least,
// should Slurm not show it yet.
func (r *run) ackRequeue(ctx context.Context, tag *Tag, before Job, requeued time.Time) error {
	job, err := r.read(ctx, "read job after requeue")
	if err != nil {
		return err
	}
	if m, _ := mailOfComment(job.Comment); m != "" && r.mailWas == "" {
		// rubick-srun quieted the mail for its own requeue: this tag takes
		// its word out of the Comment, so every later one of the run (a
		// restart's) must keep what it recorded.
		r.mailWas = m
	}
	if !requeued.IsZero() {
		job.RestartCount = max(job.RestartCount, before.RestartCount+1)
	}
	if tag == nil {
		tag, err = TagFromAdminComment(job.AdminComment)
		if act := r.res.Action; act.Kind == ActionRestart && act.Tag != nil && tag != nil && act.Tag.Extra[TagRan] != "" {
			// The restart's run time, with the run this requeue ended:
			// once the tag counts the requeue (rc=), nothing else would
			// count that run should the restart stop before its own tag
			// (rubickd killed, the resize refused).
			if tag.Extra == nil { // a tag parsed afresh: its map is its own
				tag.Extra = map[string]string{}
			}
			tag.Extra[TagRan] = act.Tag.Extra[TagRan]
		}
	}
	if tag == nil {
		note := "no rubick tag to acknowledge the requeue in"
		if err != nil {
			note += ": " + err.Error()
		}
		r.step(StepResult{Name: "annotate", Note: note})
		return nil
	}
	return r.writeTag(ctx, job, *tag, false)
}

// sizeAndRelease sends the complete size in one update (Slurm raises
// NumCPUs but never lowers it, so partial sizes leave BadConstraints),
// writes the tag with the time limit, and releases. MinCPUsNode goes with
// it: Slurm keeps the submission's per-node minimum (--cpus-per-task
// times --ntasks-per-node), and a job of 2 nodes of 8 CPUs sized to one
// node of 4 kept NumCPUs=8 and stayed pending in BadConstraints (22.05
// lab). For a restart,
// requeued is when the requeue was issued, or when the job was found
// requeued.
func (r *run) sizeAndRelease(ctx context.Context, job Job, restart bool, requeued time.Time) error {
	act := r.res.Action
	n := act.NodeCount()
	// NumNodes=n-n, not n: 22.05 rejects growing past the old maximum.
	argv := []string{r.a.cfg.Scontrol, "update", r.jobArg(),
		fmt.Sprintf("NumNodes=%d-%d", n, n),
		"NumTasks=" + strconv.Itoa(n),
		"CPUsPerTask=" + strconv.Itoa(act.CPUsPerTask),
		"MinCPUsNode=" + strconv.Itoa(act.CPUsPerTask),
		"NumCPUs=" + strconv.Itoa(n*act.CPUsPerTask)}
	// A --mem-per-gpu job keeps its memory per GPU: beside it MinMemoryNode
	// puts SLURM_MEM_PER_NODE in the job's environment next to the
	// SLURM_MEM_PER_GPU of its submission, and srun refuses both. Its steps
	// ask that submitted value per GPU, so the job's never goes below it.
	perGPU := job.MemPerGPUMB > 0 && act.GPUsPerNode > 0
	if act.MemPerNodeMB > 0 && !perGPU {
		argv = append(argv, "MinMemoryNode="+strconv.FormatInt(act.MemPerNodeMB, 10))
	}
	if act.GPUsPerNode > 0 {
		if job.GPUsNotPerNode {
			// A --gpus or --gpus-per-task request beside Gres=gpu:N is an
			// invalid gres specification; both must be cleared, together.
			argv = append(argv, "TresPerJob=", "TresPerTask=")
		}
		// Gres=gpu:N works in 22.05 and 24.11; TresPerNode=gres/gpu:N is
		// silently ignored by 22.05. A typed request keeps its type: an
		// untyped Gres beside it is refused ("Invalid GRES specification
		// (with and without type identification)").
		gres := "gpu:"
		switch len(job.GPUTypes) {
		case 0:
		case 1:
			gres += job.GPUTypes[0] + ":"
		default:
			return fmt.Errorf("%w: job %d asks for GPUs of %d types, which one per-node count cannot keep", ErrBadAction, job.ID, len(job.GPUTypes))
		}
		// Gres= replaces the job's whole list: its other GRES go with it
		// (22.05 lab: Gres=gpu:4 dropped lscratch:100).
		argv = append(argv, "Gres="+strings.Join(append([]string{gres + strconv.Itoa(act.GPUsPerNode)}, job.OtherGres...), ","))
		if perGPU {
			// Accepted only beside Gres=, in both versions.
			argv = append(argv, "MemPerTres=gres:gpu:"+strconv.FormatInt(memPerGPUOf(job, act), 10))
		}
	}
	if act.Partition != "" {
		argv = append(argv, "Partition="+act.Partition)
	}
	limit := limitArgs(job, act.TimeLimit)
	if act.Tag == nil {
		argv = append(argv, limit...)
	}
	if len(act.Nodes) > 0 {
		argv = append(argv, "NodeList="+strings.Join(act.Nodes, ","))
	} else if act.ClearNodes {
		argv = append(argv, "NodeList=")
	}
	if err := r.cmd(ctx, "resize", argv...); err != nil {
		return err
	}
	if act.Tag != nil {
		// The limit goes with the tag that records it (ts=): a failure or
		// a crash between the two would leave a limit rubick set that its
		// tag reads as set by hand, or, untagged, as the user's own.
		if err := r.writeTag(ctx, job, *act.Tag, act.Hold, limit...); err != nil {
			return err
		}
	}
	if restart {
		if d := r.a.cfg.ReleaseDelay - r.a.cfg.Clock.Now().Sub(requeued); !requeued.IsZero() && d > 0 {
			if err := r.sleep(ctx, "wait after requeue", d); err != nil {
				return err
			}
		}
		// clears the BeginTime the requeue set (cred_expire + 1 s)
		if err := r.cmd(ctx, "start now", r.a.cfg.Scontrol, "update", r.jobArg(), "StartTime=now"); err != nil {
			return err
		}
	}
	// A user's or an administrator's scontrol hold since the action read
	// the job (seconds after a requeue; the resize and the tag's update
	// otherwise) is theirs: this release, root's, would take their mark
	// out (job_submit.lua) and start the job.
	if now, err := r.read(ctx, "read job before release"); err == nil && (HeldByUser(now) || HeldByAdmin(now)) {
		r.step(StepResult{Name: "release", Note: "held by its user or an administrator since the action read it; left held"})
		return nil
	}
	return r.cmd(ctx, "release", r.a.cfg.Scontrol, "release", r.id())
}

// errRequeuedByOther refuses an action on a job someone else requeued held
// since the cycle read it (RequeuedByOther).
var errRequeuedByOther = fmt.Errorf("%w: requeued and held by its user or an administrator since the cycle read it", ErrJobState)

// heldByOthers is an ErrJobState error when pending job j is held by its
// user or an administrator, or was requeued held by them: rubickd's
// release, root's, would end their hold (job_submit.lua takes their mark
// out), and the cycle that chose to start the job read it before they held
// it.
func heldByOthers(j Job) error {
	switch {
	case RequeuedByOther(j):
		return errRequeuedByOther
	case HeldByUser(j):
		return fmt.Errorf("%w: held by its user since the cycle read it", ErrJobState)
	case HeldByAdmin(j):
		return fmt.Errorf("%w: held by an administrator since the cycle read it", ErrJobState)
	}
	return nil
}

// limitArgs are the scontrol update arguments that give job the time
// limit d (none for 0). A --time-min above it comes down to it in the
// same update: Slurm refuses a limit below the job's minimum ("Invalid
// time-min specification", 22.05 lab), and a refusal each cycle would
// leave the job pending for good. Only a deadline brings rubick's limits
// that low, and the job then cannot use more anyway.
func limitArgs(job Job, d time.Duration) []string {
	if d <= 0 {
		return nil
	}
	m := ceilMinutes(d)
	args := []string{"TimeLimit=" + strconv.FormatInt(m, 10)}
	if ceilMinutes(job.TimeMin) > m {
		args = append(args, "TimeMin="+strconv.FormatInt(m, 10))
	}
	return args
}

// ceilMinutes is d in whole minutes, rounded up: what TimeLimit= takes.
func ceilMinutes(d time.Duration) int64 { return int64((d + time.Minute - 1) / time.Minute) }

// shrink drops nodes from a running job, keeping the batch host.
func (r *run) shrink(ctx context.Context, job Job) error {
	act := r.res.Action
	if job.State != StateRunning {
		return fmt.Errorf("shrink job %d: %w: %s, want RUNNING", act.JobID, ErrJobState, job.State)
	}
	n := act.NodeCount()
	if n >= len(job.NodeList) {
		return fmt.Errorf("%w: job %d shrink to %d nodes, it has %d", ErrBadAction, act.JobID, n, len(job.NodeList))
	}
	if len(act.Nodes) == 0 {
		// Slurm keeps the batch host itself when only the count is given.
		return r.cmd(ctx, "shrink", r.a.cfg.Scontrol, "update", r.jobArg(), "NumNodes="+strconv.Itoa(n))
	}
	for _, nd := range act.Nodes {
		if !slices.Contains(job.NodeList, nd) {
			return fmt.Errorf("%w: job %d shrink: node %s is not in %v", ErrBadAction, act.JobID, nd, job.NodeList)
		}
	}
	if job.BatchHost != "" && !slices.Contains(act.Nodes, job.BatchHost) {
		return fmt.Errorf("%w: job %d shrink: keeps %v, drops batch host %s", ErrBadAction, act.JobID, act.Nodes, job.BatchHost)
	}
	return r.cmd(ctx, "shrink", r.a.cfg.Scontrol, "update", r.jobArg(), "NodeList="+strings.Join(act.Nodes, ","))
}

// checkpointRequeue signals the batch shell, waits for the checkpoint and
// requeues the job held. It returns when the requeue was issued. A job that
// is already pending and held (e.g. a previous attempt stopped half-way)
// is left as it is.
func (r *run) checkpointRequeue(ctx context.Context, job Job) (time.Time, error) {
	act := r.res.Action
	if RequeuedByOther(job) {
		// Since the cycle read it running: their hold, which a tag with
		// the new restart count would pass off as rubick's.
		return time.Time{}, fmt.Errorf("%s job %d: %w", act.Kind, act.JobID, errRequeuedByOther)
	}
	if job.State == StatePending && job.Held {
		r.step(StepResult{Name: "requeue", Note: "job already pending and held"})
		return time.Time{}, nil
	}
	if job.State != StateRunning {
		return time.Time{}, fmt.Errorf("%s job %d: %w: %s, want RUNNING", act.Kind, act.JobID, ErrJobState, job.State)
	}
	if !job.Requeue {
		// requeuehold fails for --no-requeue jobs; do not kill one with the
		// signal first
		return time.Time{}, fmt.Errorf("%s job %d: %w: submitted with --no-requeue", act.Kind, act.JobID, ErrJobState)
	}
	if !r.a.cfg.RequeueMail {
		r.quietMail(ctx, job)
	}
	// --batch: without it (or --full) only srun steps get the signal.
	if err := r.cmd(ctx, "signal", r.a.cfg.Scancel, "--signal="+r.a.cfg.Signal, "--batch", r.id()); err != nil {
		return time.Time{}, err
	}
	start := r.a.cfg.Clock.Now()
	wctx, cancel := context.WithTimeout(ctx, r.a.cfg.CheckpointTimeout)
	var err error
	if r.a.cfg.WaitCheckpoint != nil {
		err = r.a.cfg.WaitCheckpoint(wctx, job)
	} else {
		err = r.a.cfg.Clock.Sleep(wctx, r.a.cfg.CheckpointTimeout)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = nil // the sleep is the wait
		}
	}
	cancel()
	st := StepResult{Name: "wait checkpoint", Duration: r.a.cfg.Clock.Now().Sub(start)}
	switch {
	case ctx.Err() != nil:
		st.Err = ctx.Err()
		r.step(st)
		return time.Time{}, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		st.Note = "no checkpoint within " + r.a.cfg.CheckpointTimeout.String() + "; requeueing anyway"
		r.log.Warn("checkpoint wait timed out", "timeout", r.a.cfg.CheckpointTimeout)
	case err != nil:
		st.Err = err
		r.step(st)
		return time.Time{}, fmt.Errorf("waiting for the checkpoint of job %d: %w", act.JobID, err)
	}
	r.step(st)
	now, err := r.a.cfg.Cluster.Job(ctx, act.JobID)
	switch {
	case err != nil:
		// Its state unknown, it may have ended (a requeuehold would bring
		// back a cancelled job) or been requeued by someone else: the next
		// cycle decides on what it reads then.
		r.step(StepResult{Name: "requeuehold", Err: err, Note: "job not read after the checkpoint wait; not requeued"})
		return time.Time{}, fmt.Errorf("%s job %d: reading it after the checkpoint wait: %w", act.Kind, act.JobID, err)
	case RequeuedByOther(now):
		// Not rubick-srun's requeue, which says so (RequeueWord).
		r.step(StepResult{Name: "requeuehold", Note: "requeued by someone else during the checkpoint wait; left to them"})
		return time.Time{}, fmt.Errorf("%s job %d: %w: requeued and held by its user or an administrator during the checkpoint wait", act.Kind, act.JobID, ErrJobState)
	case now.State == StatePending && now.Held:
		// rubick-srun requeues its own job held once the trainer
		// checkpointed; a second requeuehold would fail on the now
		// pending job.
		r.step(StepResult{Name: "requeuehold", Note: "the job requeued itself after its checkpoint"})
		at := r.a.cfg.Clock.Now()
		r.countRun(at)
		return at, nil
	case endedByOther(now):
		// scancel, the time limit or Slurm's own preemption ended it while
		// it checkpointed: a requeuehold would bring back, held, a job its
		// owner or the cluster meant to end. A job that failed because its
		// batch shell did not survive the signal is requeued as planned.
		r.step(StepResult{Name: "requeuehold", Note: "job ended (" + now.State + ") during the checkpoint wait; not requeued"})
		return time.Time{}, fmt.Errorf("%s job %d: %w: %s during the checkpoint wait", act.Kind, act.JobID, ErrJobState, now.State)
	case now.State == StateSuspended:
		// Stopped before it could checkpoint: a requeue would lose its work
		// since the last checkpoint and end the suspension. Resumed,
		// rubick-srun finishes the checkpoint it was signalled for and
		// requeues the job itself. (Slurm refuses to signal a job already
		// suspended: "Job can not be altered now".)
		r.step(StepResult{Name: "requeuehold", Note: "suspended during the checkpoint wait; not requeued"})
		return time.Time{}, fmt.Errorf("%s job %d: %w: suspended during the checkpoint wait", act.Kind, act.JobID, ErrJobState)
	}
	r.countRun(r.a.cfg.Clock.Now())
	if act.BeforeRequeue != nil {
		if err := act.BeforeRequeue(ctx, now.RestartCount+1, r.res.Action.Tag); err != nil {
			r.step(StepResult{Name: "requeuehold", Err: err, Note: "the requeue could not be recorded; not requeued"})
			return time.Time{}, fmt.Errorf("%s job %d: recording its requeue: %w", act.Kind, act.JobID, err)
		}
	}
	r.res.RequeueCount = now.RestartCount + 1
	if err := r.cmd(ctx, "requeuehold", r.a.cfg.Scontrol, "requeuehold", r.id()); err != nil {
		return time.Time{}, err
	}
	return r.a.cfg.Clock.Now(), nil
}

// endedByOther reports whether j ended in a state that only a cancel, a
// limit or Slurm's preemption gives: the signal rubick sends ends a job
// that does not catch it as FAILED, never as one of these.
func endedByOther(j Job) bool {
	switch j.State {
	case StateCancelled, StateTimeout, StateDeadline, StatePreempted:
		return true
	}
	return false
}

// quietMail takes BEGIN and REQUEUE out of the mail types of job, as read
// at the action's start, before rubick requeues it
// (ApplierConfig.RequeueMail). The REST API of 22.05 does not list them,
// so scontrol does. The job's own tag keeps the mail types it had
// (TagMail), written first, in an update of its own: a failure or a crash
// before the next tag write would leave them quieted with no record of
// what to give back, and the retried action finds nothing to quiet; Slurm
// may take part of a multi-field update, so the two cannot go in one. A
// failure leaves the mail as it is, or quieted and recorded, and the
// restart goes on: a mail too many is no reason to keep a plan.
func (r *run) quietMail(ctx context.Context, job Job) {
	out, err := r.output(ctx, "read mail type", r.a.cfg.Scontrol, "show", "job", "-o", r.id())
	if err != nil {
		r.log.Warn("mail types not read; Slurm mails this requeue and restart as the job asks", "job", r.id(), "err", err)
		return
	}
	v, ok := QuietMailType(string(out))
	if !ok {
		return
	}
	was := mailTagValue(MailTypeOf(string(out)))
	if tag, err := TagFromAdminComment(job.AdminComment); err == nil && tag != nil {
		// Over a mail= the tag keeps from an earlier requeue: the job has
		// BEGIN or REQUEUE again, which that one took out.
		args, err := tagArgs(job, *tag, false, r.a.cfg.Instance, was)
		if err != nil {
			r.log.Warn("mail types not quieted: the tag that would keep them cannot be written", "job", r.id(), "err", err)
			return
		}
		// The AdminComment only: the Comment is the next tag write's, after
		// the requeue (a rubick-srun requeue's mark stays until then).
		args = slices.DeleteFunc(args, func(a string) bool { return !strings.HasPrefix(a, "AdminComment=") })
		if len(args) > 0 {
			if err := r.cmd(ctx, "keep mail", append([]string{r.a.cfg.Scontrol, "update", r.jobArg()}, args...)...); err != nil {
				r.log.Warn("mail types not quieted: the tag that would keep them was not written", "job", r.id(), "err", err)
				return
			}
		}
	}
	// Every later tag of this run keeps them, even after a failure: Slurm
	// may have taken MailType= all the same (a timeout). Kept for mail
	// types Slurm did not change, they are left as they are once the job
	// runs again (annotate).
	r.mailWas = was
	if err := r.cmd(ctx, "quiet mail", r.a.cfg.Scontrol, "update", r.jobArg(), "MailType="+v); err != nil {
		r.log.Warn("mail types perhaps unchanged; Slurm may mail this requeue and restart", "job", r.id(), "err", err)
	}
}

// QuietMailType is the MailType to set, read from `scontrol show job -o`
// output, so that Slurm mails no more BEGIN or REQUEUE for the job (the
// rest stay); false when the job asks for neither. rubick-srun uses it
// too, before it requeues a job itself.
func QuietMailType(show string) (string, bool) {
	types := mailTypes(MailTypeOf(show))
	keep := quietTypes(types)
	if len(keep) == len(types) {
		return "", false
	}
	if len(keep) == 0 {
		return "NONE", true
	}
	return strings.Join(keep, ","), true
}

// MailTypeOf is the MailType of `scontrol show job -o` output as Slurm
// writes it; "" when the job has no mail (scontrol then omits the field).
// The last one is Slurm's: it comes after the comments, whose text a user
// may fill with anything.
func MailTypeOf(show string) string {
	var v string
	for _, f := range strings.Fields(show) {
		if t, ok := strings.CutPrefix(f, "MailType="); ok {
			v = t
		}
	}
	return v
}

// quietTypes is types without BEGIN and REQUEUE.
func quietTypes(types []string) []string {
	return slices.DeleteFunc(slices.Clone(types), func(t string) bool { return t == "BEGIN" || t == "REQUEUE" })
}

// mailTypes is a MailType value as a list, with ALL spelled out as Slurm
// documents it; none for no mail.
func mailTypes(v string) []string {
	var out []string
	for _, t := range strings.Split(v, ",") {
		switch t {
		case "", "NONE", "(null)":
		case "ALL":
			out = append(out, "BEGIN", "END", "FAIL", "INVALID_DEPEND", "REQUEUE", "STAGE_OUT")
		default:
			out = append(out, t)
		}
	}
	return out
}

// waitPending polls until the requeued job is PENDING and no longer
// completing (only then does Slurm accept GPU/CPU changes).
func (r *run) waitPending(ctx context.Context) (Job, error) {
	start := r.a.cfg.Clock.Now()
	deadline := start.Add(r.a.cfg.PendingTimeout)
	for {
		job, err := r.a.cfg.Cluster.Job(ctx, r.res.Action.JobID)
		if err == nil && job.State == StatePending && !slices.Contains(job.StateFlags, StateCompleting) {
			r.step(StepResult{Name: "wait pending", Duration: r.a.cfg.Clock.Now().Sub(start)})
			return job, nil
		}
		if !r.a.cfg.Clock.Now().Before(deadline) {
			if err == nil {
				err = fmt.Errorf("%w: still %s after %s", ErrJobState, job.State, r.a.cfg.PendingTimeout)
			}
			err = fmt.Errorf("waiting for job %d to be pending: %w", r.res.Action.JobID, err)
			r.step(StepResult{Name: "wait pending", Err: err, Duration: r.a.cfg.Clock.Now().Sub(start)})
			return Job{}, err
		}
		if err := r.a.cfg.Clock.Sleep(ctx, r.a.cfg.PollInterval); err != nil {
			r.step(StepResult{Name: "wait pending", Err: err})
			return Job{}, err
		}
	}
}

func (r *run) read(ctx context.Context, name string) (Job, error) {
	job, err := r.a.cfg.Cluster.Job(ctx, r.res.Action.JobID)
	r.step(StepResult{Name: name, Err: err})
	if err != nil {
		return Job{}, fmt.Errorf("reading job %d: %w", r.res.Action.JobID, err)
	}
	return job, nil
}

func (r *run) sleep(ctx context.Context, name string, d time.Duration) error {
	err := r.a.cfg.Clock.Sleep(ctx, d)
	r.step(StepResult{Name: name, Err: err, Duration: d})
	return err
}

// cmd runs one command with the per-command timeout and records the step.
func (r *run) cmd(ctx context.Context, name string, argv ...string) error {
	_, err := r.output(ctx, name, argv...)
	return err
}

// output is cmd that returns the command's standard output.
func (r *run) output(ctx context.Context, name string, argv ...string) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, r.a.cfg.CommandTimeout)
	defer cancel()
	start := r.a.cfg.Clock.Now()
	out, err := r.a.cfg.Runner.Run(cctx, argv)
	var ce *CommandError
	if err != nil && !errors.As(err, &ce) {
		// keep argv in every command error, whatever the Runner returned
		err = &CommandError{Argv: argv, ExitCode: -1, Err: err}
	}
	r.step(StepResult{Name: name, Argv: argv, Err: err, Duration: r.a.cfg.Clock.Now().Sub(start)})
	r.log.Debug("slurm command", "argv", argv, "err", err)
	return out, err
}

func (r *run) step(s StepResult) { r.res.Steps = append(r.res.Steps, s) }
