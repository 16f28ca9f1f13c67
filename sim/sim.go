package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// Sentinel errors callers branch on.
var (
	// ErrBadConfig reports an invalid Config; the message names the field.
	ErrBadConfig = errors.New("bad simulator config")
	// ErrBadAction reports a plan the simulator cannot apply: a node over
	// capacity, a plan that does not match its placement, an action on an
	// unknown job. It is a policy bug.
	ErrBadAction = errors.New("policy returned an invalid action")
	// ErrBadTrace reports a trace row the replay cannot run whatever the
	// policy; the message names the file, line, job, column and value.
	ErrBadTrace = errors.New("bad trace")
)

// Config describes the simulated cluster and the replay.
type Config struct {
	Nodes        int
	GPUsPerNode  int
	CPUsPerNode  int
	MemPerNodeGB float64
	// Interval is the scheduling period in simulated time.
	Interval time.Duration
	// RestartPenalty is the time without progress after every start and
	// placement or plan change.
	RestartPenalty time.Duration
	// AssumedRestartCost is what the policy is told a restart costs, to
	// see what a wrong restart_cost does; 0 means RestartPenalty (the
	// policy knows the cost, as rubickd does once it has measured it).
	AssumedRestartCost time.Duration
	// LoadScale divides submission times: above 1 the trace arrives faster.
	LoadScale float64
	// GuaranteedQuota is the GPU quota of the single tenant (0: every GPU).
	GuaranteedQuota int
	// TimeLimitOver makes the jobs' time limits user-like: each job's limit
	// is its trace duration (plus one restart) times a factor in
	// [1, 1+TimeLimitOver], fixed per job name (0: exact limits).
	TimeLimitOver float64
	// MaxTime stops a replay that has not finished this long after its
	// last arrival (a policy that starves a job).
	MaxTime time.Duration
	// MeasuredCPUsPerGPU is the CPU count per GPU the measured iteration
	// times ran with (DeepSpeed's CPU Adam threads per process).
	MeasuredCPUsPerGPU int
	// ExcludeSuspect leaves the measured rows the data README calls suspect
	// (artifact.SuspectReason) out of the ground truth: the model prices
	// those configurations. It applies when the Data is prepared.
	ExcludeSuspect bool
	// FixedFrameworks keeps each job to the framework of the plan it asked
	// for, as the artifact's jobs ran: a data-parallel request is a plain
	// DeepSpeed script, which cannot take TP or PP (policy.Job.Cannot); a
	// 3D request is a Megatron line, which can take every plan.
	FixedFrameworks bool
	// FixedFrameworkModels, when set, limits FixedFrameworks to the jobs of
	// these model types.
	FixedFrameworkModels []string
	// RefitThreshold, when > 0, replays rubickd's online refits: running
	// jobs report their ground-truth times and a model type the policy
	// misprices by more than this (mean relative error) is refitted
	// (rubickd's samples.refit_threshold). 0 keeps the profile fits.
	RefitThreshold float64
	// FairShareAccounts says whose account a job is, for its fair-share
	// factor (policy.Job.FairShare): AccountsByModel (every model type one
	// account) or AccountsFromTrace (the trace's account column). Every
	// account has an equal share, and each round every job gets its
	// account's factor as priority/multifactor's Fair Tree computes it
	// from the accounts' decayed GPU usage: what BestEffortOrder=fairshare
	// orders by. Empty: every factor is 0.
	FairShareAccounts string
	// FairShareHalfLife is the usage's half-life (Slurm's
	// PriorityDecayHalfLife).
	FairShareHalfLife time.Duration
	// PriorityWeights, when any is set, give each job the priority
	// Slurm's priority/multifactor would (policy.Job.Priority): its age
	// since submission (1 at PriorityMaxAge), its account's fair-share
	// factor (FairShareAccounts) and its request's share of the cluster's
	// nodes and CPUs, weighted: what BestEffortOrder=priority orders by.
	// A replay has no QOS, partitions, associations' priorities or nice.
	PriorityWeights PriorityWeights
	// PriorityMaxAge is Slurm's PriorityMaxAge.
	PriorityMaxAge time.Duration
}

// PriorityWeights are the PriorityWeight* a replay applies.
type PriorityWeights struct {
	Age, FairShare, JobSize int64
}

// set reports whether any weight is.
func (w PriorityWeights) set() bool { return w.Age+w.FairShare+w.JobSize > 0 }

// DefaultConfig is the artifact's cluster: 8 nodes x 8 GPUs, 96 CPUs,
// 1,600 GB, a 60 s interval and a 260 s restart penalty.
func DefaultConfig() Config {
	return Config{
		Nodes: 8, GPUsPerNode: 8, CPUsPerNode: 96, MemPerNodeGB: 1600,
		Interval: time.Minute, RestartPenalty: 260 * time.Second, LoadScale: 1,
		MaxTime: 3 * 24 * time.Hour, MeasuredCPUsPerGPU: artifact.MeasuredThreadsPerGPU,
		FairShareHalfLife: 7 * 24 * time.Hour, // Slurm's default
		PriorityMaxAge:    7 * 24 * time.Hour, // Slurm's default
	}
}

// MaxNodes bounds a simulated cluster: above the largest GPU clusters, and
// low enough that a typo cannot take the machine's memory (the policy
// walks every node each cycle).
const MaxNodes = 20000

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Nodes <= 0 || c.Nodes > MaxNodes:
		return fmt.Errorf("%w: Nodes=%d must be in 1..%d", ErrBadConfig, c.Nodes, MaxNodes)
	case c.GPUsPerNode <= 0 || c.GPUsPerNode > 64:
		return fmt.Errorf("%w: GPUsPerNode=%d must be in 1..64", ErrBadConfig, c.GPUsPerNode)
	case c.CPUsPerNode <= 0:
		return fmt.Errorf("%w: CPUsPerNode=%d must be > 0", ErrBadConfig, c.CPUsPerNode)
	case !(c.MemPerNodeGB > 0):
		return fmt.Errorf("%w: MemPerNodeGB=%v must be > 0", ErrBadConfig, c.MemPerNodeGB)
	case c.Interval < time.Second:
		return fmt.Errorf("%w: Interval=%v must be >= 1s", ErrBadConfig, c.Interval)
	case c.Interval > c.MaxTime:
		// Past MaxTime the replay stops, before a later arrival's round.
		return fmt.Errorf("%w: Interval=%v must be <= MaxTime=%v", ErrBadConfig, c.Interval, c.MaxTime)
	case c.RestartPenalty < 0:
		return fmt.Errorf("%w: RestartPenalty=%v must be >= 0", ErrBadConfig, c.RestartPenalty)
	case c.AssumedRestartCost < 0:
		return fmt.Errorf("%w: AssumedRestartCost=%v must be >= 0", ErrBadConfig, c.AssumedRestartCost)
	case !(c.LoadScale > 0) || math.IsInf(c.LoadScale, 0):
		return fmt.Errorf("%w: LoadScale=%v must be a positive number", ErrBadConfig, c.LoadScale)
	case c.GuaranteedQuota < 0:
		return fmt.Errorf("%w: GuaranteedQuota=%d must be >= 0", ErrBadConfig, c.GuaranteedQuota)
	case !(c.TimeLimitOver >= 0) || math.IsInf(c.TimeLimitOver, 0):
		return fmt.Errorf("%w: TimeLimitOver=%v must be a number >= 0", ErrBadConfig, c.TimeLimitOver)
	case c.MaxTime <= 0:
		return fmt.Errorf("%w: MaxTime=%v must be > 0", ErrBadConfig, c.MaxTime)
	case c.MeasuredCPUsPerGPU <= 0:
		return fmt.Errorf("%w: MeasuredCPUsPerGPU=%d must be > 0", ErrBadConfig, c.MeasuredCPUsPerGPU)
	case !(c.RefitThreshold >= 0) || math.IsInf(c.RefitThreshold, 0):
		return fmt.Errorf("%w: RefitThreshold=%v must be a number >= 0", ErrBadConfig, c.RefitThreshold)
	case c.FairShareAccounts != "" && c.FairShareAccounts != AccountsByModel && c.FairShareAccounts != AccountsFromTrace:
		return fmt.Errorf("%w: FairShareAccounts=%q must be %q, %q or empty", ErrBadConfig, c.FairShareAccounts, AccountsByModel, AccountsFromTrace)
	case c.FairShareAccounts != "" && c.FairShareHalfLife <= 0:
		return fmt.Errorf("%w: FairShareHalfLife=%v must be > 0", ErrBadConfig, c.FairShareHalfLife)
	case c.PriorityWeights.Age < 0 || c.PriorityWeights.FairShare < 0 || c.PriorityWeights.JobSize < 0:
		return fmt.Errorf("%w: PriorityWeights=%+v must be >= 0", ErrBadConfig, c.PriorityWeights)
	case c.PriorityWeights.Age > 0 && c.PriorityMaxAge <= 0:
		return fmt.Errorf("%w: PriorityMaxAge=%v must be > 0", ErrBadConfig, c.PriorityMaxAge)
	case c.PriorityWeights.FairShare > 0 && c.FairShareAccounts == "":
		return fmt.Errorf("%w: PriorityWeights.FairShare=%d needs FairShareAccounts", ErrBadConfig, c.PriorityWeights.FairShare)
	}
	return nil
}

// Env is the model environment of the simulated cluster: the artifact's
// A800 links with this cluster's node sizes.
func (c Config) Env() model.Env {
	e := model.DefaultEnv()
	e.NodeGPUs, e.NodeCPUs, e.NodeMemGB = c.GPUsPerNode, c.CPUsPerNode, c.MemPerNodeGB
	return e
}

// Data is what every replay of one data tree shares: the measurements,
// the models fitted on the profile data, and the oracle built from both.
type Data struct {
	Set        *artifact.Set
	Predictors map[string]model.Predictor
	Fits       map[string]model.FitResult
	Oracle     *Oracle
}

// Prepare loads a data tree and fits every model on its profile samples.
func Prepare(ctx context.Context, fsys fs.FS, cfg Config) (*Data, error) {
	set, err := artifact.Load(fsys)
	if err != nil {
		return nil, fmt.Errorf("load data: %w", err)
	}
	for _, m := range cfg.FixedFrameworkModels {
		if _, ok := set.Models[m]; !ok {
			return nil, fmt.Errorf("%w: FixedFrameworkModels: model type %q is not in the data (have %s)",
				ErrBadConfig, m, strings.Join(set.ModelNames(), ", "))
		}
	}
	env := cfg.Env()
	fits, err := artifact.FitAll(ctx, set, env)
	if err != nil {
		return nil, fmt.Errorf("fit models: %w", err)
	}
	preds := make(map[string]model.Predictor, len(set.Models))
	for _, name := range set.ModelNames() {
		p := model.Predictor{Spec: set.Models[name].Spec, Env: env, Params: set.Models[name].Fitted}
		if f, ok := fits[name]; ok {
			p.Params = f.Params
		}
		preds[name] = p
	}
	return &Data{Set: set, Predictors: preds, Fits: fits, Oracle: NewOracle(set, preds, cfg.MeasuredCPUsPerGPU, cfg.ExcludeSuspect)}, nil
}

// simJob is one trace job during a replay.
type simJob struct {
	artifact.Job
	Submit  float64 // seconds, after load scaling
	Request policy.Request
	steps   float64
	// timeLimit is what the user would give sbatch --time (Config.TimeLimitOver).
	timeLimit time.Duration

	// replay state
	done      float64 // iterations completed
	alloc     []policy.NodeAlloc
	plan      model.Plan
	penalty   float64 // seconds of restart left
	runTime   float64 // seconds holding resources
	reconfigs int
	started   bool
	firstRun  float64
	finish    float64
	finished  bool
	violated  bool
	reqIter   float64 // ground-truth iteration time of the request
}

// unfinished is the error of a replay stopped MaxTime after its last
// arrival: the jobs still queued or running, those whose request no node
// layout of the cluster holds (a policy that runs jobs as requested never
// starts them), and whether the interval is the likely cause: a job that
// ends inside a round holds its GPUs to the next one, so rounds longer
// than most jobs' runs leave the cluster idle most of the time.
func unfinished(policyName string, active []*simJob, left, total int, cfg Config) error {
	var names []string
	tooBig, cpus, split, short := 0, 0, 0, 0
	for _, j := range active {
		names = append(names, j.Name)
		switch {
		case j.Request.GPUs > cfg.Nodes*cfg.GPUsPerNode || j.Request.Placement.MaxPerNode() > cfg.GPUsPerNode:
			tooBig++
		case tpSplit(j.Request, cfg.GPUsPerNode):
			split++
		case j.Request.CPUs*j.Request.Placement.MaxPerNode() > cfg.CPUsPerNode*j.Request.GPUs:
			// As requested, a node holding g of its GPUs holds CPUs*g/GPUs
			// of its CPUs: more than a node has on --gpus-per-node 16 for
			// the traces' 8 CPUs per GPU.
			cpus++
		case j.DurationS+cfg.RestartPenalty.Seconds() < cfg.Interval.Seconds():
			short++
		}
	}
	msg := fmt.Sprintf("sim %s: %d of %d jobs unfinished %v after the last arrival (MaxTime)", policyName, left, total, cfg.MaxTime)
	if len(names) > 0 {
		more := ""
		if len(names) > 5 {
			more = fmt.Sprintf(" and %d more", len(names)-5)
		}
		msg += fmt.Sprintf(": %s%s", strings.Join(names[:min(len(names), 5)], ", "), more)
	}
	if tooBig > 0 {
		msg += fmt.Sprintf("; %d of them ask for more GPUs than the cluster's %d nodes of %d hold", tooBig, cfg.Nodes, cfg.GPUsPerNode)
	}
	if cpus > 0 {
		msg += fmt.Sprintf("; %d of them ask for more CPUs on a node than the %d it has (their CPUs per GPU times the GPUs packed on a node)", cpus, cfg.CPUsPerNode)
	}
	if split > 0 {
		msg += fmt.Sprintf("; %d of them ask for a tensor-parallel group split over nodes of %d GPUs, which a policy that keeps tensor parallelism inside a node (sia, rubick-r) does not start",
			split, cfg.GPUsPerNode)
	}
	if 2*short > len(active)-tooBig-cpus-split {
		msg += fmt.Sprintf("; the interval (%v) is the likely cause: %d of them run, restart included, shorter than one round and hold their GPUs to the next",
			cfg.Interval, short)
	}
	return errors.New(msg)
}

// tpSplit reports a request whose tensor-parallel groups cannot each sit
// on one node of its placement (packed on nodes of perNode GPUs when it
// names none): gpt2 "151", TP 5, on 4-GPU nodes.
func tpSplit(r policy.Request, perNode int) bool {
	pl := r.Placement
	if pl == nil && perNode > 0 {
		pl = model.PackedPlacement(r.GPUs, perNode)
	}
	tp := max(r.Plan.TP, 1)
	return slices.ContainsFunc(pl, func(g int) bool { return g%tp != 0 })
}

// loadJobs turns trace rows into replay jobs with parsed requests.
func loadJobs(rows []artifact.Job, d *Data, cfg Config) ([]*simJob, error) {
	jobs := make([]*simJob, 0, len(rows))
	// A name is the job's ID in every snapshot and plan: two jobs of one
	// name made the replay apply one's action to the other and blame the
	// policy.
	lineOf := make(map[string]int, len(rows))
	for _, r := range rows {
		if r.Name == "" {
			return nil, fmt.Errorf("%w: %s: name is empty", ErrBadTrace, r.Where())
		}
		if first, ok := lineOf[r.Name]; ok {
			return nil, fmt.Errorf("%w: %s: name=%q repeats line %d", ErrBadTrace, r.Where(), r.Name, first)
		}
		lineOf[r.Name] = r.Line
		info, ok := d.Set.Models[r.App]
		if !ok {
			return nil, fmt.Errorf("%w: %s: application=%q is not a model type of the data (have %s)",
				ErrBadTrace, r.Where(), r.App, strings.Join(d.Set.ModelNames(), ", "))
		}
		pl := policy.PackedPlacement(r.GPUs, cfg.GPUsPerNode)
		plan, err := model.ParseExecPlan(info.Spec, r.ExecPlan, pl)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: exec_plan=%q with num_gpus=%d: %w", ErrBadTrace, r.Where(), r.ExecPlan, r.GPUs, err)
		}
		if r.Steps <= 0 {
			return nil, fmt.Errorf("%w: %s: steps=%d must be > 0", ErrBadTrace, r.Where(), r.Steps)
		}
		if at := r.SubmitS / cfg.LoadScale; at > artifact.MaxTraceSeconds {
			// The snapshots' times are time.Durations from the replay's
			// start, and its clock float64 seconds: neither goes much further.
			return nil, fmt.Errorf("%w: %s: submission_time=%v at load scale %g arrives %.3g s into the replay, past the %g s it times",
				ErrBadTrace, r.Where(), r.SubmitS, cfg.LoadScale, at, float64(artifact.MaxTraceSeconds))
		}
		j := &simJob{Job: r, Submit: r.SubmitS / cfg.LoadScale, steps: float64(r.Steps),
			Request:   policy.Request{GPUs: r.GPUs, CPUs: r.CPUs, Placement: pl, Plan: plan},
			timeLimit: secs((r.DurationS + cfg.RestartPenalty.Seconds()) * overestimate(r.Name, cfg.TimeLimitOver))}
		if j.Request.CPUs <= 0 {
			j.Request.CPUs = r.GPUs * 8 // the traces' own ratio
		}
		t, err := d.Oracle.IterTime(r.App, plan, pl, j.Request.CPUs)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: request: %w", ErrBadTrace, r.Where(), err)
		}
		if t.Source == Fallback {
			// Nothing measured it, so the model prices it, and it would
			// run in a replay though no GPU of the cluster could hold it
			// (ParseExecPlan only accumulates as far as memory allows).
			p := d.Predictors[r.App]
			if err := p.Feasible(plan, wholeNodes(p.Env, pl, j.Request.CPUs)); err != nil {
				return nil, fmt.Errorf("%w: %s: exec_plan=%q with num_gpus=%d: %w", ErrBadTrace, r.Where(), r.ExecPlan, r.GPUs, err)
			}
		}
		j.reqIter = t.IterS
		jobs = append(jobs, j)
	}
	slices.SortStableFunc(jobs, func(a, b *simJob) int {
		if a.Submit != b.Submit {
			if a.Submit < b.Submit {
				return -1
			}
			return 1
		}
		return a.Line - b.Line
	})
	return jobs, nil
}

// CheckTrace reports what Run would refuse in the trace rows whatever the
// policy: an unknown model, a bad request or account. Check once before
// replaying one trace under several policies.
func CheckTrace(cfg Config, d *Data, rows []artifact.Job) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	jobs, err := loadJobs(rows, d, cfg)
	if err != nil {
		return err
	}
	return checkAccounts(jobs, cfg)
}

// Run replays rows with policy pol on the cluster of cfg.
func Run(ctx context.Context, cfg Config, d *Data, rows []artifact.Job, pol policy.Policy, log *slog.Logger) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	jobs, err := loadJobs(rows, d, cfg)
	if err != nil {
		return nil, err
	}
	if err := checkAccounts(jobs, cfg); err != nil {
		return nil, err
	}
	return replay(ctx, cfg, d, jobs, pol, log)
}

// replay runs the loaded jobs to completion.
func replay(ctx context.Context, cfg Config, d *Data, jobs []*simJob, pol policy.Policy, log *slog.Logger) (*Result, error) {
	nodes := make([]policy.Node, cfg.Nodes)
	for i := range nodes {
		nodes[i] = policy.Node{Name: "n" + strconv.Itoa(i), GPUs: cfg.GPUsPerNode, CPUs: cfg.CPUsPerNode, MemGB: cfg.MemPerNodeGB}
	}
	quota := cfg.GuaranteedQuota
	if quota == 0 {
		quota = cfg.Nodes * cfg.GPUsPerNode
	}
	tenants := []policy.Tenant{{Name: "default", GPUQuota: quota}}
	models := make(map[string]policy.Estimator, len(d.Predictors))
	// believed is what the policy prices with: the profile fits, or the
	// learner's refits of them.
	believed := make(map[string]model.Predictor, len(d.Predictors))
	for name, p := range d.Predictors {
		models[name] = policy.FromPredictor(p)
		believed[name] = p
	}
	var lrn *learner
	if cfg.RefitThreshold > 0 {
		var err error
		if lrn, err = newLearner(d, cfg.Env(), cfg.RefitThreshold); err != nil {
			return nil, err
		}
	}
	byID := make(map[string]*simJob, len(jobs))
	for _, j := range jobs {
		byID[j.Name] = j
	}
	var fair *fairShare
	var factors map[string]float64
	if cfg.FairShareAccounts != "" {
		accounts := make([]string, len(jobs))
		for i, j := range jobs {
			accounts[i] = j.account(cfg)
		}
		fair = newFairShare(accounts, cfg.FairShareHalfLife.Seconds())
	}
	res := &Result{Policy: pol.Name(), Jobs: len(jobs)}
	epoch := time.Unix(0, 0).UTC()
	step := cfg.Interval.Seconds()
	penalty := cfg.RestartPenalty.Seconds()
	totalGPUs := float64(cfg.Nodes * cfg.GPUsPerNode)
	next := 0 // next arrival
	lastSubmit := 0.0
	if len(jobs) > 0 {
		lastSubmit = jobs[len(jobs)-1].Submit // sorted by submission
	}
	var active []*simJob
	finished := 0
	for t := 0.0; finished < len(jobs); t += step {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if t > lastSubmit+cfg.MaxTime.Seconds() {
			return nil, unfinished(pol.Name(), active, len(jobs)-finished, len(jobs), cfg)
		}
		if len(active) == 0 && next < len(jobs) && jobs[next].Submit > t {
			// Idle cluster: jump to the round at or after the next arrival.
			t = math.Ceil(jobs[next].Submit/step) * step
		}
		for next < len(jobs) && jobs[next].Submit <= t {
			active = append(active, jobs[next])
			next++
		}
		if lrn != nil {
			tried, changed, err := lrn.refit(ctx)
			if err != nil {
				return nil, fmt.Errorf("sim %s at t=%.0f: %w", pol.Name(), t, err)
			}
			for _, name := range tried {
				res.countRefit(name, false)
			}
			for _, name := range changed {
				res.countRefit(name, true)
				believed[name] = lrn.types[name].pred
				models[name] = policy.FromPredictor(believed[name])
			}
		}
		if fair != nil {
			factors = fair.factors()
		}
		snap, err := snapshot(epoch, t, nodes, tenants, models, active, factors, cfg)
		if err != nil {
			return nil, fmt.Errorf("sim %s at t=%.0f: %w", pol.Name(), t, err)
		}
		start := time.Now()
		plan, err := pol.Decide(ctx, snap)
		elapsed := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("sim %s at t=%.0f: %w", pol.Name(), t, err)
		}
		res.addRound(elapsed)
		if err := apply(snap, plan, byID, d, t, penalty, res, log); err != nil {
			return nil, fmt.Errorf("sim %s at t=%.0f: %w", pol.Name(), t, err)
		}
		// Advance one interval.
		used := 0
		keep := active[:0]
		for _, j := range active {
			if len(j.alloc) == 0 {
				keep = append(keep, j)
				continue
			}
			g := 0
			for _, a := range j.alloc {
				g += a.GPUs
			}
			used += g
			avail := step
			wait := min(j.penalty, avail)
			j.penalty -= wait
			avail -= wait
			j.runTime += step
			if avail > 0 {
				r := model.Resources{Placement: policy.PlacementOf(j.alloc), CPUs: cpusOf(j.alloc)}
				tr, err := d.Oracle.IterTime(j.App, j.plan, r.Placement, r.CPUs)
				if err != nil {
					return nil, fmt.Errorf("sim %s at t=%.0f: job %s: %w", pol.Name(), t, j.Name, err)
				}
				// What the policy believed this configuration runs at.
				thought, err := believed[j.App].Predict(j.plan, r)
				if err != nil {
					return nil, fmt.Errorf("sim %s at t=%.0f: job %s: %w", pol.Name(), t, j.Name, err)
				}
				// Only measured times are reported: a fallback time is the
				// profile fit's own prediction, and learning from it would
				// be circular.
				if lrn != nil && tr.Source != Fallback {
					lrn.report(j.App, model.Sample{Plan: j.plan, Resources: r, IterS: tr.IterS})
				}
				need := (j.steps - j.done) * tr.IterS
				run := min(avail, need)
				j.done += run / tr.IterS
				res.account(tr, thought.Iter, run)
				if j.Guaranteed && tr.IterS > j.reqIter*(1+1e-9) {
					j.violated = true
				}
				if need <= avail {
					j.finished = true
					j.finish = t + wait + need
					res.gpuSeconds += float64(g) * (wait + need)
					fair.use(j.account(cfg), float64(g)*(wait+need))
					finished++
					continue
				}
			}
			res.gpuSeconds += float64(g) * step
			fair.use(j.account(cfg), float64(g)*step)
			keep = append(keep, j)
		}
		queued := 0
		for _, j := range active {
			if len(j.alloc) == 0 {
				queued++
			}
		}
		if queued > 0 {
			res.IdleQueuedGPUS += (totalGPUs - float64(used)) * step
		}
		active = keep
		fair.tick(step)
		res.util = append(res.util, UtilPoint{T: t, Util: float64(used) / totalGPUs})
	}
	res.finish(jobs, totalGPUs, cfg, d)
	return res, nil
}

func cpusOf(alloc []policy.NodeAlloc) int {
	c := 0
	for _, a := range alloc {
		c += a.CPUs
	}
	return c
}

// snapshot builds the policy's view of the active jobs at time t.
// factors are the fair-share factors per account (nil: none).
func snapshot(epoch time.Time, t float64, nodes []policy.Node, tenants []policy.Tenant, models map[string]policy.Estimator, active []*simJob, factors map[string]float64, cfg Config) (*policy.Snapshot, error) {
	jobs := make([]policy.Job, len(active))
	var prio slurm.Priorities
	if cfg.PriorityWeights.set() {
		prio = cfg.priorities(factors)
	}
	for i, j := range active {
		jobs[i] = policy.Job{
			ID: j.Name, Model: j.App, Tenant: "default", Guaranteed: j.Guaranteed,
			Submit:    epoch.Add(secs(j.Submit)),
			Request:   j.Request,
			Alloc:     j.alloc,
			Plan:      j.plan,
			RunTime:   secs(j.runTime),
			Reconfigs: j.reconfigs,
			TimeLimit: j.timeLimit,
			FairShare: factors[j.account(cfg)],
		}
		if cfg.PriorityWeights.set() {
			f := prio.Factors(slurm.Job{Account: j.account(cfg), SubmitTime: jobs[i].Submit,
				NodeCount: (j.Request.GPUs + cfg.GPUsPerNode - 1) / cfg.GPUsPerNode, CPUs: j.Request.CPUs}, "", epoch.Add(secs(t)))
			jobs[i].Priority, jobs[i].PriorityFactors = f.Priority(), f.String()
		}
		if cfg.FixedFrameworks && j.Request.Plan.TP == 1 && j.Request.Plan.PP == 1 &&
			(len(cfg.FixedFrameworkModels) == 0 || slices.Contains(cfg.FixedFrameworkModels, j.App)) {
			jobs[i].Cannot = model.FeatureTP | model.FeaturePP
		}
	}
	assumed := cfg.RestartPenalty
	if cfg.AssumedRestartCost > 0 {
		assumed = cfg.AssumedRestartCost
	}
	return policy.NewSnapshot(epoch.Add(secs(t)), nodes, jobs, tenants, models, assumed)
}

// priorities is what computes a job's priority given the accounts'
// fair-share factors.
func (c Config) priorities(factors map[string]float64) slurm.Priorities {
	fs := make(slurm.FairShares, len(factors))
	for a, f := range factors {
		fs[slurm.AssocKey{Account: a}] = f
	}
	return slurm.Priorities{
		Config: slurm.PriorityConfig{Multifactor: true, Age: c.PriorityWeights.Age, FairShare: c.PriorityWeights.FairShare,
			JobSize: c.PriorityWeights.JobSize, MaxAge: c.PriorityMaxAge},
		FairShare: fs, Nodes: c.Nodes, CPUs: c.Nodes * c.CPUsPerNode,
	}
}

func secs(s float64) time.Duration {
	// Saturated: Go converts a float past time.Duration's 292 years to an
	// undefined value (on amd64 the most negative), which made a time
	// limit --time-limit-over stretched that far no limit at all.
	switch d := math.Round(s * float64(time.Second)); {
	case d >= math.MaxInt64:
		return math.MaxInt64
	case d <= math.MinInt64:
		return math.MinInt64
	default:
		return time.Duration(d)
	}
}

// apply checks a plan against the snapshot and carries it out.
func apply(s *policy.Snapshot, p policy.Plan, byID map[string]*simJob, d *Data, t, penalty float64, res *Result, log *slog.Logger) error {
	if len(p.Actions) != len(s.Jobs) {
		return fmt.Errorf("%w: %d actions for %d jobs", ErrBadAction, len(p.Actions), len(s.Jobs))
	}
	gpus := map[string]int{}
	cpus := map[string]int{}
	mem := map[string]float64{}
	for _, a := range p.Actions {
		j, ok := byID[a.JobID]
		if !ok {
			return fmt.Errorf("%w: unknown job %q", ErrBadAction, a.JobID)
		}
		sj, ok := s.Job(a.JobID)
		if !ok {
			return fmt.Errorf("%w: job %q is not active", ErrBadAction, a.JobID)
		}
		switch a.Kind {
		case policy.Keep:
			if !slices.Equal(a.Alloc, sj.Alloc) && !(len(a.Alloc) == 0 && len(sj.Alloc) == 0) {
				return fmt.Errorf("%w: keep of %s changes its allocation", ErrBadAction, a.JobID)
			}
		case policy.Preempt:
			if !sj.Running() {
				return fmt.Errorf("%w: preempt of queued job %s", ErrBadAction, a.JobID)
			}
		case policy.Start, policy.Shrink, policy.Restart:
			if (a.Kind == policy.Start) == sj.Running() {
				return fmt.Errorf("%w: %s of %s, which is running=%v", ErrBadAction, a.Kind, a.JobID, sj.Running())
			}
			if err := checkPlan(d, j, a); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: unknown kind %q for %s", ErrBadAction, a.Kind, a.JobID)
		}
		if a.Kind != policy.Preempt {
			for _, na := range a.Alloc {
				gpus[na.Node] += na.GPUs
				cpus[na.Node] += na.CPUs
				mem[na.Node] += na.MemGB
			}
		}
	}
	for _, n := range s.Nodes {
		if gpus[n.Name] > n.GPUs || cpus[n.Name] > n.CPUs || mem[n.Name] > n.MemGB+1e-6 {
			return fmt.Errorf("%w: node %s over capacity: %d/%d GPUs, %d/%d CPUs, %.0f/%.0f GB",
				ErrBadAction, n.Name, gpus[n.Name], n.GPUs, cpus[n.Name], n.CPUs, mem[n.Name], n.MemGB)
		}
	}
	for _, a := range p.Actions {
		j := byID[a.JobID]
		switch a.Kind {
		case policy.Start:
			j.alloc, j.plan, j.penalty = slices.Clone(a.Alloc), a.Plan, penalty
			if !j.started {
				j.started, j.firstRun = true, t
				res.Starts++
			} else {
				res.Restarts++ // resumed after a preemption
			}
			log.Debug("start", "job", j.Name, "plan", a.Plan.String(), "placement", policy.PlacementOf(a.Alloc).String(), "t", t)
		case policy.Shrink, policy.Restart:
			j.alloc, j.plan, j.penalty = slices.Clone(a.Alloc), a.Plan, penalty
			j.reconfigs++
			res.Restarts++
			log.Debug(string(a.Kind), "job", j.Name, "plan", a.Plan.String(), "placement", policy.PlacementOf(a.Alloc).String(), "t", t)
		case policy.Preempt:
			j.alloc, j.penalty = nil, 0
			j.reconfigs++
			res.Preemptions++
			log.Debug("preempt", "job", j.Name, "t", t)
		}
	}
	return nil
}

// checkPlan verifies that a started or changed job's plan is valid for its
// placement and keeps the model's global batch.
func checkPlan(d *Data, j *simJob, a policy.Action) error {
	pl := policy.PlacementOf(a.Alloc)
	spec := d.Set.Models[j.App].Spec
	p := a.Plan
	if p.GPUs() != pl.GPUs() || pl.GPUs() == 0 {
		return fmt.Errorf("%w: %s: plan %s uses %d GPUs on placement %s", ErrBadAction, j.Name, p, p.GPUs(), pl)
	}
	if p.DP*p.MicroBatch*p.Accum != spec.GlobalBatch {
		return fmt.Errorf("%w: %s: plan %s changes the global batch %d", ErrBadAction, j.Name, p, spec.GlobalBatch)
	}
	return nil
}

// overestimate is the factor in [1, 1+over] by which the user of job name
// overestimates its run time: a hash of the name, so every policy and every
// replay sees the same limits.
func overestimate(name string, over float64) float64 {
	if over == 0 {
		return 1
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return 1 + over*float64(h.Sum32()%10001)/10000
}
