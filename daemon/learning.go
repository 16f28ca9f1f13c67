package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// LearnStore is the part of the store the learning loop uses.
type LearnStore interface {
	ModelType(ctx context.Context, name string) (store.ModelType, error)
	CurrentFit(ctx context.Context, modelType string) (store.Fit, error)
	AddSamples(ctx context.Context, modelType string, samples []model.Sample, sourceJob int64, src store.Source) error
	AddOnline(ctx context.Context, modelType string, smp model.Sample, sourceJob int64, iteration, maxConfigs int) error
	Samples(ctx context.Context, modelType string) ([]store.StoredSample, error)
	AddFitAs(ctx context.Context, modelType string, r model.FitResult, src store.Source, how store.Promotion) (store.Fit, error)
	SetJobLaunch(ctx context.Context, id int64, user string, l store.Launch) error
	RecordRefusal(ctx context.Context, jobID int64, plan model.Plan, why string) (store.Action, error)
	PendingPhases(ctx context.Context) (map[string][]store.Phase, error)
	PhasesUsed(ctx context.Context, phases []store.Phase) error
}

// Learner turns the iteration times rubick-srun reports into stored
// samples, and fits a model type without a fit once its samples suffice:
// seven configurations, or, once a job reports its profiling phase over,
// the launch.MinPartialProfileRuns configurations that phase measured. The
// store keeps the phases reported over until a first-fit attempt uses them,
// so a restarted rubickd fits their types as the process that took the
// notices would have.
// When the current fit mispredicts the configurations measured since it was
// made by more than Threshold, the Learner refits on every sample and lets
// the refit replace the current fit only if, configuration by
// configuration, fits made without a configuration predict it better than
// the current fit does (model.Refit). Every fit is kept.
type Learner struct {
	Store   LearnStore
	Cluster Cluster
	Env     model.Env
	// Threshold is the mean relative error of new samples above which the
	// model type is refitted (samples.refit_threshold, 10 % by default).
	Threshold float64
	// MaxConfigsPerJob bounds the configurations (plan, placement, CPUs)
	// one job may report samples of; 0 leaves them unbounded. Set it before
	// the first Accept; later, through SetMaxConfigsPerJob.
	MaxConfigsPerJob int
	Logger           *slog.Logger
	// LookupUID maps a Slurm user name to its UID; nil uses the system's
	// user database.
	LookupUID func(name string) (uint32, error)

	mu    sync.Mutex
	dirty map[string]bool
	// tried is, per model type, the current fit and the number of recent
	// configurations at the last refit attempt: a refit is retried only
	// when a new configuration has been measured since.
	tried map[string]attempt
}

type attempt struct {
	fitID   int64
	configs int
}

// Accept is the samples endpoint's check-and-store step: the sender (uid,
// from munge) must own the job or be root, the job must run the sample's
// model type, and the sample must be well formed.
func (l *Learner) Accept(ctx context.Context, uid uint32, s report.Sample) error {
	j, err := l.sender(ctx, uid, s.JobID, s.ModelType, report.ErrBadSample)
	if err != nil {
		return err
	}
	id := j.ID
	ms, err := s.ModelSample()
	if err != nil {
		return err
	}
	if err := ranOn(j, ms.Resources); err != nil {
		return fmt.Errorf("%w: job %d: %v", report.ErrBadSample, id, err)
	}
	if err := l.plausible(ctx, s.ModelType, ms); err != nil {
		return err
	}
	iteration := -1
	if s.Iteration != nil {
		iteration = *s.Iteration
	}
	l.mu.Lock()
	maxConfigs := l.MaxConfigsPerJob
	l.mu.Unlock()
	err = l.Store.AddOnline(ctx, s.ModelType, ms, int64(id), iteration, maxConfigs)
	if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrTooManyConfigs) {
		return fmt.Errorf("%w: %v", report.ErrBadSample, err)
	}
	if err != nil {
		// Not the sample's fault (a locked store): the endpoint answers 503.
		return fmt.Errorf("store the sample: %w", err)
	}
	l.markDirty(s.ModelType)
	return nil
}

// markDirty has the next Refit look at model type mt.
func (l *Learner) markDirty(mt string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dirty == nil {
		l.dirty = map[string]bool{}
	}
	l.dirty[mt] = true
}

// MarkForRefit has the next Refit look at the model types named, which
// need not have new samples: rubickd marks those whose spec it replaced at
// its start, which are fitted on their stored samples once these suffice.
func (l *Learner) MarkForRefit(modelTypes ...string) {
	for _, mt := range modelTypes {
		l.markDirty(mt)
	}
}

// SetMaxConfigsPerJob changes MaxConfigsPerJob while samples arrive (a
// configuration reload).
func (l *Learner) SetMaxConfigsPerJob(n int) {
	l.mu.Lock()
	l.MaxConfigsPerJob = n
	l.mu.Unlock()
}

// ranOn checks that a sample's resources are ones job j could have
// measured them on: only a job that holds an allocation, or that ran and
// was requeued since (the last samples of a run may come after its
// requeue), measures anything; while it holds its allocation, only within
// it: its nodes, its GPUs on each, its CPUs. A profiling run uses part of
// them. A
// job's owner can still report false times within that; only not for
// configurations it never had, nor from a job that never ran.
func ranOn(j slurm.Job, r model.Resources) error {
	if !j.Allocated() {
		if j.RestartCount == 0 {
			return fmt.Errorf("it is %s and has not run, so it measured nothing", j.State)
		}
		// Requeued: its sizes are its next request's (rubickd may have
		// resized it already; 22.05 lists a pending --cpus-per-gpu job's
		// CPUs as 1), not those it ran on.
		return nil
	}
	if j.NodeCount > 0 && r.Placement.Nodes() > j.NodeCount {
		return fmt.Errorf("placement %s spans %d nodes, the job has %d", r.Placement, r.Placement.Nodes(), j.NodeCount)
	}
	if j.GPUsPerNode > 0 && r.Placement.MaxPerNode() > j.GPUsPerNode {
		return fmt.Errorf("placement %s uses %d GPUs on a node, the job has %d", r.Placement, r.Placement.MaxPerNode(), j.GPUsPerNode)
	}
	if j.CPUs > 0 && r.CPUs > j.CPUs {
		return fmt.Errorf("cpus=%d, the job has %d", r.CPUs, j.CPUs)
	}
	return nil
}

// sender checks that uid may report for job jobID (its owner, or root)
// and that the job runs modelType, and returns the job as Slurm has it;
// bad wraps a malformed or mismatched report.
func (l *Learner) sender(ctx context.Context, uid uint32, jobID, modelType string, bad error) (slurm.Job, error) {
	id, err := strconv.Atoi(jobID)
	if err != nil || id <= 0 {
		return slurm.Job{}, fmt.Errorf("%w: job_id=%q is not a Slurm job id", bad, jobID)
	}
	j, err := l.Cluster.Job(ctx, id)
	if errors.Is(err, slurm.ErrNotFound) {
		return slurm.Job{}, fmt.Errorf("%w: job_id=%d is not known to Slurm", bad, id)
	}
	if err != nil {
		return slurm.Job{}, fmt.Errorf("read job %d: %w", id, err)
	}
	if uid != 0 {
		owner, err := l.uidOf(j.User)
		if err != nil {
			return slurm.Job{}, fmt.Errorf("owner of job %d: %w", id, err)
		}
		if owner != uid {
			return slurm.Job{}, fmt.Errorf("%w: uid %d reported for job %d of user %s", report.ErrNotOwner, uid, id, j.User)
		}
	}
	if j.Tag == nil || j.Tag.ModelType != modelType {
		return slurm.Job{}, fmt.Errorf("%w: model_type=%q but job %d runs %q", bad, modelType, id, tagModel(j.Tag))
	}
	return j, nil
}

// AcceptLaunch is the samples endpoint's step for launch notices: after the
// same checks as Accept, it records what the job's launch line cannot
// express, which every later plan for the job avoids, and, for a notice
// that says the job's profiling phase is over, that phase, for the next
// Refit to fit its model type on what the phase measured. Both are in the
// store once it returns nil, which the endpoint acknowledges.
func (l *Learner) AcceptLaunch(ctx context.Context, uid uint32, n report.Launch) error {
	j, err := l.sender(ctx, uid, n.JobID, n.ModelType, report.ErrBadLaunch)
	if err != nil {
		return err
	}
	id := j.ID
	sl := store.Launch{Cannot: n.Features(), GlobalBatch: n.GlobalBatch}
	if n.Profiled {
		sl.Profiled = n.ModelType
	}
	if err := l.Store.SetJobLaunch(ctx, int64(id), j.User, sl); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: job %d has not been scheduled by rubickd", report.ErrBadLaunch, id)
		}
		return err
	}
	if n.Refused {
		p, why, ok := refusal(n)
		// In the plan history, the refusal tells rubick report that the
		// requeue which follows is rubick's (a reconfiguration), not
		// someone's scontrol requeue. Recorded after the launch facts,
		// which a retried notice sets again.
		if ok {
			if _, err := l.Store.RecordRefusal(ctx, int64(id), p, cmp.Or(why, "the launch line cannot run it")); err != nil {
				return err
			}
		}
		l.log().Warn("launch line cannot run the job's plan; the job requeued itself held and gets a plan it can run",
			"job", id, "plan", n.Plan, "why", why, "dialect", n.Dialect, "cannot", n.Cannot, "global_batch", n.GlobalBatch)
	} else {
		l.log().Debug("launch line reported", "job", id, "dialect", n.Dialect, "cannot", n.Cannot, "global_batch", n.GlobalBatch)
	}
	if n.Profiled {
		l.log().Info("profiling phase over", "job", id, "model", n.ModelType)
	}
	return nil
}

// refusal says why a launch line refused the plan its notice names: the
// features of the plan it cannot express, and the plan's global batch
// where it is not the line's (a plan chosen before rubickd knew the line,
// on its model type's batch). why is "" when the notice tells neither;
// ok is false when the notice names no plan that parses, p that plan.
func refusal(n report.Launch) (p model.Plan, why string, ok bool) {
	p, err := model.ParsePlan(n.Plan)
	if err != nil {
		return model.Plan{}, "", false
	}
	var reasons []string
	if f := model.Of(p) & n.Features(); f != 0 {
		reasons = append(reasons, "it uses "+f.String()+", which the line cannot express")
	}
	if gb := p.DP * p.MicroBatch * p.Accum; n.GlobalBatch > 0 && gb != n.GlobalBatch {
		reasons = append(reasons, fmt.Sprintf("its global batch is %d, the line's %d", gb, n.GlobalBatch))
	}
	return p, strings.Join(reasons, "; "), true
}

// maxSampleRatio bounds how far a reported iteration time may be from the
// current fit's prediction: a time off by more than this factor is a unit
// mix-up or a broken node, not something a shared model should learn.
const maxSampleRatio = 10

// plausible rejects a sample the model type's spec cannot price (a TP
// size that does not divide its heads, say: no fit could use it), and one
// whose iteration time is more than maxSampleRatio times away from what the
// current fit predicts. A type without a fit takes any priceable time.
func (l *Learner) plausible(ctx context.Context, mt string, ms model.Sample) error {
	spec, err := l.Store.ModelType(ctx, mt)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: model_type=%q is not registered", report.ErrBadSample, mt)
	}
	if err != nil {
		return fmt.Errorf("model type %s: %w", mt, err)
	}
	p := model.Predictor{Spec: spec.Spec, Params: model.Priors(), Env: l.Env}
	cur, err := l.Store.CurrentFit(ctx, mt)
	hasFit := err == nil
	switch {
	case hasFit:
		p.Params = cur.Params
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("current fit of %s: %w", mt, err)
	}
	// A job trains with its launch line's global batch, the plan's.
	b, err := p.ForPlan(ms.Plan).Predict(ms.Plan, ms.Resources)
	if err != nil {
		return fmt.Errorf("%w: plan %s on placement %s: %v", report.ErrBadSample, ms.Plan, ms.Resources.Placement, err)
	}
	if !hasFit {
		return nil
	}
	if r := ms.IterS / b.Iter; r > maxSampleRatio || r < 1.0/maxSampleRatio {
		return fmt.Errorf("%w: iter_s=%g is %.3gx the %.3g s the current fit of %s predicts for %s on placement %s",
			report.ErrBadSample, ms.IterS, r, b.Iter, mt, ms.Plan, ms.Resources.Placement)
	}
	return nil
}

func tagModel(t *slurm.Tag) string {
	if t == nil {
		return ""
	}
	return t.ModelType
}

func (l *Learner) uidOf(name string) (uint32, error) {
	if l.LookupUID != nil {
		return l.LookupUID(name)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(n), err
}

// Refit fits every model type that received samples since the last call,
// or has a profiling phase reported over that no first-fit attempt has used
// yet, and needs it; it returns the model types whose current fit it
// replaced (or created).
func (l *Learner) Refit(ctx context.Context) ([]string, error) {
	phases, err := l.Store.PendingPhases(ctx)
	if err != nil {
		// dirty is kept: the next Refit looks at those types, phases and all.
		return nil, err
	}
	l.mu.Lock()
	todo := slices.Collect(maps.Keys(l.dirty))
	l.dirty = nil
	l.mu.Unlock()
	for mt := range phases {
		if !slices.Contains(todo, mt) {
			todo = append(todo, mt)
		}
	}
	slices.Sort(todo)
	var refitted []string
	var errs []error
	for _, mt := range todo {
		ok, err := l.refit(ctx, mt, phases[mt])
		if ok {
			refitted = append(refitted, mt)
		}
		if err != nil {
			// The others are still refitted; this one is tried again at
			// the next Refit, not only once new samples come.
			errs = append(errs, fmt.Errorf("refit %s: %w", mt, err))
			l.markDirty(mt)
		}
	}
	return refitted, errors.Join(errs...)
}

// refit fits or refits model type mt; phases are the jobs whose profiling
// phase of mt is over and unused. It may report a fit made together with
// an error in recording the phases used, which the next Refit records.
func (l *Learner) refit(ctx context.Context, mt string, phases []store.Phase) (bool, error) {
	spec, err := l.Store.ModelType(ctx, mt)
	if errors.Is(err, store.ErrNotFound) && len(phases) > 0 {
		// A job's own report of a phase for a type without a spec
		// (rubickd profiles only types with one): nothing to fit.
		return false, l.phasesUsed(ctx, phases)
	}
	if err != nil {
		return false, err
	}
	stored, err := l.Store.Samples(ctx, mt)
	if err != nil {
		return false, err
	}
	cur, err := l.Store.CurrentFit(ctx, mt)
	switch {
	case errors.Is(err, store.ErrNotFound):
		ok, err := l.fitNew(ctx, spec.Spec, stored, phases)
		if err == nil {
			// This attempt used them: a later one waits for a new phase or
			// new samples.
			err = l.phasesUsed(ctx, phases)
		}
		return ok, err
	case err != nil:
		return false, err
	}
	if err := l.phasesUsed(ctx, phases); err != nil { // fitted already
		return false, err
	}
	// Samples reported since the current fit was made are the evidence
	// against it; the rest (older reports, the shipped profile) it has seen.
	var old, recent []model.Sample
	for _, s := range stored {
		if s.Source == store.SourceOnline && s.Created.After(cur.Created) {
			recent = append(recent, s.Sample)
		} else {
			old = append(old, s.Sample)
		}
	}
	p := model.Predictor{Spec: spec.Spec, Params: cur.Params, Env: l.Env}
	old = model.Priceable(p, old)
	d, usable := model.DriftOf(p, old, recent)
	if d.MeanErr <= l.Threshold {
		return false, nil
	}
	l.mu.Lock()
	last, seen := l.tried[mt]
	if seen && last.fitID == cur.ID && d.Configs <= last.configs {
		l.mu.Unlock()
		return false, nil // nothing new since the last attempt
	}
	if l.tried == nil {
		l.tried = map[string]attempt{}
	}
	l.tried[mt] = attempt{fitID: cur.ID, configs: d.Configs}
	l.mu.Unlock()
	if !d.Refittable(l.Threshold) {
		l.log().Info("fit mispredicts new configurations; waiting for more before refitting", "model", mt,
			"mean_rel_err", d.MeanErr, "new_configs", d.Configs, "all_configs", d.Total)
		return false, nil
	}
	// A refit that fails (a locked store, say) is not an attempt: the
	// next Refit makes it again.
	forget := func() {
		l.mu.Lock()
		if seen {
			l.tried[mt] = last
		} else {
			delete(l.tried, mt)
		}
		l.mu.Unlock()
	}
	rr, err := model.Refit(ctx, spec.Spec, l.Env, cur.Params, old, usable)
	if err != nil {
		forget()
		return false, err
	}
	how := store.PromoteNever
	if rr.Better {
		how = store.PromoteAlways
	}
	fit, err := l.Store.AddFitAs(ctx, mt, rr.Fit, store.SourceOnline, how)
	if err != nil {
		forget()
		return false, err
	}
	l.log().Info("refit on new samples", "model", mt, "configs", rr.Configs, "current_err", rr.CurrentErr,
		"held_out_err", rr.HeldOutErr, "samples", rr.Fit.Samples, "moved", movedParams(rr.Only), "current", fit.Current)
	l.warnDoubts(fit, spec.Spec)
	return fit.Current, nil
}

// warnDoubts warns of fit when it is current and its parameters or errors
// put the model type's spec in doubt (model.FitResult.Doubts).
func (l *Learner) warnDoubts(fit store.Fit, spec model.Spec) {
	if fit.Current {
		warnDoubts(l.log(), fit, spec)
	}
}

// warnDoubts warns of fit, of a model type of spec, if it puts the spec in
// doubt: the spec is the administrator's, and the type's jobs are planned
// with the fit.
func warnDoubts(log *slog.Logger, fit store.Fit, spec model.Spec) {
	if d := fit.Doubts(spec); d != nil {
		log.Warn("the current fit of a model type explains its samples poorly; check the type's spec and correct it with rubickd --data DIR --update-specs",
			"model", spec.Name, "fit", fit.ID, "doubts", d, "spec", spec)
	}
}

// FitReader reads the model types and their current fits.
type FitReader interface {
	ModelTypes(ctx context.Context) ([]store.ModelType, error)
	CurrentFit(ctx context.Context, modelType string) (store.Fit, error)
}

// WarnDoubtedFits warns, at rubickd's start, of each current fit that puts
// its model type's spec in doubt, as the Learner does when it makes one
// current: a fit seeded from --data, or one an earlier rubickd warned of
// once, which stays until the spec is corrected.
func WarnDoubtedFits(ctx context.Context, st FitReader, log *slog.Logger) error {
	types, err := st.ModelTypes(ctx)
	if err != nil {
		return fmt.Errorf("read model types: %w", err)
	}
	for _, t := range types {
		fit, err := st.CurrentFit(ctx, t.Spec.Name)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("current fit of %s: %w", t.Spec.Name, err)
		}
		warnDoubts(log, fit, t.Spec)
	}
	return nil
}

// movedParams says which parameters a refit was free to move.
func movedParams(only []string) string {
	if only == nil {
		return "all"
	}
	return strings.Join(only, ",")
}

// phasesUsed records that a Refit has dealt with phases; phases reported
// since stay for the next.
func (l *Learner) phasesUsed(ctx context.Context, phases []store.Phase) error {
	if len(phases) == 0 {
		return nil
	}
	if err := l.Store.PhasesUsed(ctx, phases); err != nil {
		return fmt.Errorf("profiling phases of jobs %v: %w", store.PhaseJobs(phases), err)
	}
	return nil
}

// fitNew fits a model type that has no fit yet, once its samples identify
// the parameters: seven configurations, or, once a profiling phase of one
// of the jobs in phases is over, the launch.MinPartialProfileRuns that
// phase measured, with what they cannot identify held at its prior.
func (l *Learner) fitNew(ctx context.Context, spec model.Spec, stored []store.StoredSample, phases []store.Phase) (bool, error) {
	jobs := store.PhaseJobs(phases)
	samples := make([]model.Sample, len(stored))
	var profiled []model.Sample
	for i, s := range stored {
		samples[i] = s.Sample
		if slices.Contains(jobs, s.SourceJob) {
			profiled = append(profiled, s.Sample)
		}
	}
	// The seven samples a first fit needs are seven measured
	// configurations: a run that reports every iteration would otherwise
	// make two runs of a profiling phase a "fit", pinning what the other
	// runs are there to show.
	samples = model.Collapse(samples)
	var opts model.FitOptions
	// A large model fails a phase's plain data-parallel runs for memory,
	// and its next jobs' phases fail them again: what a phase measured is
	// all its type gets. Samples reported any other way (a running job's)
	// still wait for seven configurations, as refits do (docs/model.md,
	// Online refits).
	measured := len(model.Collapse(profiled))
	switch {
	case measured >= launch.MinPartialProfileRuns:
		opts.AllowPartial = true
	case len(phases) > 0:
		l.log().Info("profiling phase measured too few configurations for a first fit of what they identify",
			"model", spec.Name, "configurations", measured, "want", launch.MinPartialProfileRuns, "jobs", jobs)
	}
	res, err := model.Fit(ctx, spec, l.Env, samples, opts)
	if errors.Is(err, model.ErrTooFewSamples) {
		l.log().Info("waiting for more samples", "model", spec.Name, "configurations", len(samples), "err", err)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	fit, err := l.Store.AddFitAs(ctx, spec.Name, res, store.SourceOnline, store.PromoteIfBetter)
	if err != nil {
		return false, err
	}
	l.log().Info("stored fit", "model", spec.Name, "rmsle", res.RMSLE, "samples", res.Samples, "pinned", strings.Join(res.Pinned, ","),
		"current", fit.Current)
	l.warnDoubts(fit, spec)
	return fit.Current, nil
}

func (l *Learner) log() *slog.Logger {
	if l.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.Logger
}
