package report

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// Store is what Enrich reads from rubick's store; *store.Store has it.
type Store interface {
	Job(ctx context.Context, id int64) (store.Job, error)
	ArrayTask(ctx context.Context, array, task int64) (store.Job, error)
	PlanHistory(ctx context.Context, jobID int64) ([]store.Action, error)
	ModelType(ctx context.Context, name string) (store.ModelType, error)
	CurrentFit(ctx context.Context, modelType string) (store.Fit, error)
	JobRestartCosts(ctx context.Context, jobID int64) ([]store.RestartCost, error)
	Reasons(ctx context.Context, jobID int64, limit int) ([]store.Reason, error)
	NewestReasons(ctx context.Context, jobID int64, spans []store.Span) ([]store.Reason, error)
}

// sloTolerance absorbs floating-point noise between two predictions of the
// same plan; anything lower is a violation.
const sloTolerance = 1e-6

// Enrich adds rubickd's plan history to every job the store knows, gives
// a running run without a tag plan the plan rubickd last applied to its
// job (runningPlan) and a run that ended the plan it trained on where the
// store shows it was not its tag's (endedPlans), and checks the SLO of
// guaranteed jobs: a guaranteed job violates its SLO when a plan it ran
// with (an applied store action, unless its runs all trained on another
// plan, and those plans; else the plan= of a run's tag on that run's
// allocation) has a predicted throughput below that of the best plan on
// its requested resources (req=), the baseline rubickd itself guarantees.
// Predictions use the model type's current fit in env. A requeue (or
// interruption) whose restart rubickd measured is priced at that cost
// instead of the gap plus the configured overhead. A job whose sacct rows
// have no req= (a first run still running) takes its request from the tag
// rubickd stored with its newest action (storeRequest). name is the store
// path, for the report header.
func (r *Report) Enrich(ctx context.Context, st Store, name string, env model.Env) error {
	r.Store, r.storeSet = name, true
	tresNote := tresMissingNote(r.Jobs)
	measured, requeues, intrMeasured, waited := 0, 0, 0, 0
	preds := map[string]*model.Predictor{}
	predErr := map[string]error{}
	predictor := func(mt string) (*model.Predictor, error) {
		if p, ok := preds[mt]; ok {
			return p, predErr[mt]
		}
		spec, err := st.ModelType(ctx, mt)
		if err == nil {
			var fit store.Fit
			if fit, err = st.CurrentFit(ctx, mt); err == nil {
				preds[mt] = &model.Predictor{Spec: spec.Spec, Params: fit.Params, Env: env}
				return preds[mt], nil
			}
		}
		preds[mt], predErr[mt] = nil, err
		return nil, err
	}
	for i := range r.Jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		j := &r.Jobs[i]
		sj, found, ok, err := storeJob(ctx, st, j.ID)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		if !ok {
			continue
		}
		later := false
		if found && j.next == nil && j.Submit != nil && store.Predates(*j.Submit, sj.Submitted) {
			// The store's record is of a later job of the id, which the
			// rows lack (still held, or submitted after --until): what
			// it holds from that job's submission on is not this one's.
			next := sj.Submitted
			j.next, later = &next, true
		}
		id := sj.ID
		hist, err := st.PlanHistory(ctx, id)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		hist = j.own(hist)
		var fallback *request
		if j.req == nil {
			if req, ok := storeRequest(hist); ok {
				fallback = &req
			}
		}
		var owner requeueOwner
		if found && slices.ContainsFunc(j.requeues, func(rq requeue) bool { return !rq.interrupted }) {
			// The plan history of a job rubickd knows tells whose each
			// requeue was; a job it does not know has none.
			owner = historyOwner(hist)
		}
		if fallback != nil || owner != nil {
			// Rebuilt from its rows so that the request also gives the
			// GPUs of runs whose AllocTRES lacks gres/gpu, and with the
			// owner. Build has reported the rows' problems.
			next := j.next
			*j, _ = buildJob(j.rows, r.overhead, r.tres, fallback, owner)
			j.next = next
		}
		costs, err := st.JobRestartCosts(ctx, id)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		if len(j.requeues) > 0 {
			j.priceRequeues(costs)
			measured += j.ReconfigMeasured
			requeues += j.Requeues
			intrMeasured += j.InterruptionMeasured
		}
		j.StorePlans = PlanChanges(hist, costs)
		if ended := j.endedRuns(hist); len(ended) > 0 {
			spans := make([]store.Span, len(ended))
			for k, e := range ended {
				spans[k] = e.span
			}
			reasons, err := st.NewestReasons(ctx, id, spans)
			if err != nil {
				return fmt.Errorf("report: %w", err)
			}
			j.endedPlans(ended, reasons)
		}
		var newest []store.Reason
		if j.runsUnplanned() {
			// The newest decision may keep it on the plan its rubick-srun
			// reports (RanPlan).
			if newest, err = st.Reasons(ctx, id, 1); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			newest = slices.DeleteFunc(newest, func(r store.Reason) bool { return j.predated(r.At) })
		}
		j.runningPlan(hist, newest)
		// The store keeps one record per id: with a later job of the id,
		// it is that job's.
		if found && j.Class == "" && j.next == nil {
			j.Class = string(sj.Class)
			if j.ModelType == NoModel && sj.ModelType != "" {
				j.ModelType = sj.ModelType
			}
		}
		// The class or the request may have come from the store.
		j.BelowRequest = j.belowRequest()
		var w time.Time
		if !later {
			if w, err = LastWait(ctx, st, sj); err != nil {
				return fmt.Errorf("report: %w", err)
			}
		}
		if j.queueFrom(w) {
			waited++
		}
		if j.Class != slurm.ClassGuaranteed {
			continue
		}
		if j.ModelType == NoModel {
			j.SLODetail = "no model type"
			continue
		}
		p, err := predictor(j.ModelType)
		if err != nil {
			j.SLODetail = fmt.Sprintf("no fitted model: %v", err)
			continue
		}
		j.checkSLO(*p, hist)
	}
	if measured > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d of %d requeues priced at the restart cost rubickd measured; the others at the gap plus the restart overhead", measured, requeues))
	}
	if intrMeasured > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d interruption(s) priced at the restart cost rubickd measured: it had decided to restart the run Slurm ended", intrMeasured))
	}
	if waited > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d job(s) queued from the end of a hold or of a wait for --begin or dependencies that rubickd saw, not from their submission", waited))
	}
	// The store may have given a job its request or its model type.
	if n := tresMissingNote(r.Jobs); n != tresNote {
		if k := slices.Index(r.Notes, tresNote); tresNote != "" && k >= 0 {
			r.Notes = slices.Delete(r.Notes, k, k+1)
		}
		if n != "" {
			r.Notes = append(r.Notes, n)
		}
	}
	r.summarize()
	return nil
}

// own leaves out of hist the actions decided before the job was
// submitted, or once a later job of the same id was (j.next): they are
// another job's of the id (Slurm reuses ids after its state is reset, or
// past MaxJobId), which the store keeps under that id. hist is left as it
// is: each job of the id reads it.
func (j *Job) own(hist []store.Action) []store.Action {
	return slices.DeleteFunc(slices.Clone(hist), func(a store.Action) bool {
		return j.predated(a.DecidedAt) || j.next != nil && !store.Predates(a.DecidedAt, *j.next)
	})
}

// predated reports whether a store record dated at is an earlier job's of
// j's id (store.Predates); false when j's submission is unknown.
func (j *Job) predated(at time.Time) bool { return j.Submit != nil && store.Predates(at, *j.Submit) }

// storeRequest is the req= of the tag rubickd stored with the newest of
// the job's actions that has one. rubickd writes req= from its first
// action on, so this is the request of a job whose only run is still
// running, whose tag sacct shows only once the run ends.
func storeRequest(hist []store.Action) (request, bool) {
	for _, a := range slices.Backward(hist) {
		t, err := slurm.TagFromAdminComment(a.Tag)
		if err != nil || t == nil {
			continue
		}
		s, ok := t.Extra["req"]
		if !ok {
			continue
		}
		if req, err := parseRequest(s); err == nil {
			return req, true
		}
	}
	return request{}, false
}

// runsUnplanned reports whether the job's running run has no plan: sacct
// shows a run's tag only once the run ends.
func (j *Job) runsUnplanned() bool {
	k := len(j.Runs) - 1
	return k >= 0 && j.State == "RUNNING" && j.Runs[k].Plan == ""
}

// runningPlan gives the job's running run without a plan (runsUnplanned)
// the plan rubickd last applied to it (AppliedPlan). Its newest decision
// (newest), a keep later than every action on another plan, names the
// plan it trains on instead (RanPlan). A running run with a tag plan
// keeps it; the runs that ended are endedPlans'.
func (j *Job) runningPlan(hist []store.Action, newest []store.Reason) {
	k := len(j.Runs) - 1
	if k < 0 || j.State != "RUNNING" {
		return
	}
	i := appliedAction(hist)
	if !j.runsUnplanned() {
		j.ranOn(i)
		return
	}
	applied, appliedRes := AppliedPlan(hist)
	plan := applied
	if ran, res, ok := RanPlan(applied, appliedRes, newest, hist); ok {
		plan = ran
		j.trained = append(j.trained, ranInstead{planOn{ran, res}, i})
	} else {
		j.ranOn(i)
	}
	if plan == (model.Plan{}) {
		return
	}
	j.Runs[k].Plan = plan.String()
	j.Plans = plansOf(j.Runs)
}

// ranOn marks the action of index i in the job's own plan history as one
// whose plan a run trained on; nothing for -1.
func (j *Job) ranOn(i int) {
	if i < 0 {
		return
	}
	if j.ranApplied == nil {
		j.ranApplied = map[int]bool{}
	}
	j.ranApplied[i] = true
}

// endedRun is a run that ended on a plan of rubickd's, its tag's, which
// endedPlans checks against the store.
type endedRun struct {
	run  int
	plan model.Plan
	// res is what plan was applied on: that of the action that applied it
	// (applied, its index in the job's own plan history, -1 for none),
	// else the run's allocation.
	res     model.Resources
	applied int
	// span is where the run's decisions are read: from its start to its
	// end, or to the restart, preemption or shrink that ended it.
	span store.Span
	// hist is the job's own plan history decided before span.To.
	hist []store.Action
}

// endsRun reports whether an action of kind ends a running job's run: its
// row ends once the job is checkpointed and requeued, or resized.
func endsRun(kind string) bool {
	switch slurm.ActionKind(kind) {
	case slurm.ActionRestart, slurm.ActionPreempt, slurm.ActionShrink:
		return true
	}
	return false
}

// endedRuns lists the job's runs with a start and an end whose tag names a
// plan, for endedPlans; hist is the job's own plan history, oldest first.
// Not a profiling run's (profile=1): it trains on its phase's plans on
// purpose, and rubickd takes its reports for none. A run without a tag
// plan is not one rubickd applied a plan to: rubickd names the best plan
// for what such a job holds until it reports one, which is no sign of what
// it trained on.
func (j *Job) endedRuns(hist []store.Action) []endedRun {
	var out []endedRun
	for k, run := range j.Runs {
		if run.Start == nil || run.End == nil || run.Plan == "" {
			continue
		}
		row := j.rows[k]
		t, err := slurm.TagFromAdminComment(row.AdminComment)
		if err != nil || t == nil || t.Extra[slurm.TagProfile] == "1" {
			continue
		}
		plan, err := model.ParsePlan(run.Plan)
		if err != nil {
			continue
		}
		// rubickd decides a restart, preemption or shrink while the run
		// runs, which then ends it: its cycle's decision, and any later,
		// say what the job is to become; those before, what the run
		// trained on.
		to := *run.End
		for _, a := range hist {
			if !a.DecidedAt.Before(*run.Start) && a.DecidedAt.Before(to) && endsRun(a.Kind) {
				to = a.DecidedAt
				break
			}
		}
		n := slices.IndexFunc(hist, func(a store.Action) bool { return !a.DecidedAt.Before(to) })
		if n < 0 {
			n = len(hist)
		}
		e := endedRun{run: k, plan: plan, applied: appliedAction(hist[:n]), span: store.Span{From: *run.Start, To: to}, hist: hist[:n]}
		if e.applied >= 0 && hist[e.applied].Plan == plan {
			e.res = hist[e.applied].Resources
		} else {
			e.applied = -1
			e.res = run.resources()
		}
		out = append(out, e)
	}
	return out
}

// endedPlans gives each run of ended the plan it trained on where the
// store shows it was not its tag's, as runningPlan does a running run:
// newest holds, per run, its newest decision within its span (zero for
// none), and a keep on another plan later than every action before names
// it (RanPlan's rule, on the run's span). Decisions rather than the job's
// samples: rubickd records one every cycle, on the plan the job's
// rubick-srun reports where that is not its tag's, while samples would
// have to be told from a run's profiling phase, which the store dates for
// a job's newest phase only. Without such a decision (pruned) the run
// keeps its tag's.
func (j *Job) endedPlans(ended []endedRun, newest []store.Reason) {
	for k, e := range ended {
		var reasons []store.Reason
		if newest[k].CycleID != 0 {
			reasons = newest[k : k+1]
		}
		ran, res, ok := RanPlan(e.plan, e.res, reasons, e.hist)
		if !ok {
			j.ranOn(e.applied)
			continue
		}
		j.Runs[e.run].Plan = ran.String()
		if res.Placement.GPUs() > 0 {
			j.trained = append(j.trained, ranInstead{planOn{ran, res}, e.applied})
		}
	}
	j.Plans = plansOf(j.Runs)
}

// ParseJobID reads a job id as sacct and squeue print it: a job id (id >
// 0), or ARRAY_TASK for a task of a job array (array > 0, id 0). false for
// anything else, such as a heterogeneous job's component ("12+0") or an
// array's tasks not split off yet ("12_[3-9]").
func ParseJobID(s string) (id, array, task int64, ok bool) {
	if a, t, found := strings.Cut(s, "_"); found {
		array, aerr := strconv.ParseInt(a, 10, 64)
		task, terr := strconv.ParseInt(t, 10, 64)
		if aerr != nil || terr != nil || array <= 0 || task < 0 {
			return 0, 0, 0, false
		}
		return 0, array, task, true
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, 0, 0, false
	}
	return id, 0, 0, true
}

// storeJob reads the store's record of sacct's job id: a job id's, or for a
// task of a job array (ARRAY_TASK) that of the job it was split off as,
// which the store finds by the task, so that one read serves both. sj.ID is
// the id the store knows the job by; found says whether the store has its
// record (a job id's plan history may outlive it). ok is false for an id
// the store does not know: one ParseJobID refuses, a task rubickd never
// saw.
func storeJob(ctx context.Context, st Store, jobID string) (sj store.Job, found, ok bool, err error) {
	id, array, task, ok := ParseJobID(jobID)
	switch {
	case !ok:
		return store.Job{}, false, false, nil
	case array == 0:
		sj, err = st.Job(ctx, id)
	default:
		sj, err = st.ArrayTask(ctx, array, task)
	}
	switch {
	case errors.Is(err, store.ErrNotFound) && array == 0:
		return store.Job{ID: id}, false, true, nil
	case errors.Is(err, store.ErrNotFound):
		return store.Job{}, false, false, nil
	case err != nil:
		return store.Job{}, false, false, err
	}
	return sj, true, true, nil
}

// LastWait is when rubickd last saw job j held or waiting for its --begin
// or dependencies (store.Job.Deferred), or, for a task split off a job
// array, the array while the task was part of it (a hold of the whole
// array, its dependencies), whichever is later: rubickd ages the task from
// that. Zero when it never waited.
func LastWait(ctx context.Context, st interface {
	Job(ctx context.Context, id int64) (store.Job, error)
}, j store.Job) (time.Time, error) {
	w := j.Deferred
	if j.ArrayJobID <= 0 || j.ArrayJobID == j.ID {
		return w, nil
	}
	a, err := st.Job(ctx, j.ArrayJobID)
	if errors.Is(err, store.ErrNotFound) {
		return w, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("the wait of job array %d: %w", j.ArrayJobID, err)
	}
	if a.Deferred.After(w) {
		w = a.Deferred
	}
	return w, nil
}

// queueFrom counts the job's queueing delay from waited, when rubickd last
// saw it held by its user or an administrator or wait for its --begin or
// dependencies (store.Job.Deferred), where that falls between its
// submission and its first start: the time before it was not spent
// waiting for GPUs, and rubickd ages queued jobs the same way. It
// reports whether it did.
func (j *Job) queueFrom(waited time.Time) bool {
	if waited.IsZero() || j.Submit == nil || j.FirstStart == nil || !waited.After(*j.Submit) || !waited.Before(*j.FirstStart) {
		return false
	}
	j.QueuedFrom = &waited
	j.QueueS = floatPtr(j.FirstStart.Sub(waited).Seconds())
	return true
}

// historyOwner says from a job's plan history whether rubick requeued
// the run end: rubickd restarted or preempted the job while it ran
// (endsRun), or its launch line refused the plan rubickd gave it
// (store.KindRefused), after which its rubick-srun requeues it. Anything
// else that requeued a run (someone's scontrol requeue, a checkpoint
// signal of the user's own) was not rubick's, even where rubickd then
// started the job again. A run with no start or end in sacct stays
// rubick's, as before the history was read.
func historyOwner(hist []store.Action) requeueOwner {
	return func(end Row) bool {
		if end.Start.IsZero() || end.End.IsZero() {
			return true
		}
		return slices.ContainsFunc(hist, func(a store.Action) bool {
			return (endsRun(a.Kind) || a.Kind == store.KindRefused) && end.during(a.DecidedAt)
		})
	}
}

// clockSlack absorbs sacct's one-second times when something rubickd
// decided is matched to the run it happened in.
const clockSlack = time.Second

// during reports whether t falls within run r, its Start to its End, give
// or take clockSlack; both must be known.
func (r Row) during(t time.Time) bool {
	return !t.Before(r.Start.Add(-clockSlack)) && !t.After(r.End.Add(clockSlack))
}

// priceRequeues replaces the sacct price of each requeue whose restart
// rubickd measured (decided while the run it ended was running) with the
// measured cost. The GPUs are taken to be held for the cost less the gap
// between the runs, as the overhead was. An interruption is priced the
// same, where rubickd had decided to restart the run Slurm ended, into its
// own figures.
func (j *Job) priceRequeues(costs []store.RestartCost) {
	used := make([]bool, len(costs))
	for _, rq := range j.requeues {
		row := j.rows[rq.run]
		if row.Start.IsZero() || row.End.IsZero() {
			continue
		}
		lostS, lostGPUH, measured := &j.ReconfigLostS, &j.ReconfigLostGPUHours, &j.ReconfigMeasured
		if rq.interrupted {
			lostS, lostGPUH, measured = &j.InterruptionLostS, &j.InterruptionLostGPUHours, &j.InterruptionMeasured
		}
		for k, c := range costs {
			if used[k] || !row.during(c.Signaled) {
				continue
			}
			used[k] = true
			cost := c.Cost.Seconds()
			held := max(cost-rq.gapS, 0)
			*lostS += cost - rq.gapS - rq.ohS
			// Without AllocTRES the GPUs held are unknown: the GPU-hours
			// stay nil.
			if *lostGPUH != nil && j.UsefulGPUHours != nil {
				lost := (held - rq.ohS) * float64(rq.nextGPUs) / 3600
				*lostGPUH = floatPtr(**lostGPUH + lost)
				j.UsefulGPUHours = floatPtr(*j.UsefulGPUHours - lost)
			}
			*measured++
			break
		}
	}
}

// ranWith says whether a is a plan the job ran with, as rubickd applied
// it: an action with result ok that records a plan and the GPUs it runs on.
func ranWith(a store.Action) bool {
	return a.Result == store.ResultOK && a.Plan != (model.Plan{}) && a.Resources.Placement.GPUs() > 0
}

// checkSLO sets SLOViolated, or leaves it nil with the reason in SLODetail.
func (j *Job) checkSLO(p model.Predictor, hist []store.Action) {
	if j.req == nil {
		j.SLODetail = "no req= in the tag: the requested resources are unknown"
		return
	}
	reqRes := model.Resources{
		Placement: uniform(j.req.Nodes, j.req.gpus()),
		CPUs:      j.req.CPUs,
		HostMemGB: float64(j.req.MemMB) * float64(j.req.Nodes) / 1024,
	}
	var runs []planOn
	for i, a := range hist {
		// An action whose runs all trained on another plan applied one
		// the job never ran.
		never := !j.ranApplied[i] && slices.ContainsFunc(j.trained, func(t ranInstead) bool { return t.applied == i })
		if ranWith(a) && !never {
			runs = append(runs, planOn{a.Plan, a.Resources})
		}
	}
	for _, t := range j.trained {
		runs = append(runs, t.planOn)
	}
	if len(runs) == 0 {
		for _, run := range j.Runs {
			if run.Plan == "" || run.GPUs == 0 || run.ElapsedS == 0 {
				continue
			}
			plan, err := model.ParsePlan(run.Plan)
			if err != nil {
				continue
			}
			runs = append(runs, planOn{plan, run.resources()})
		}
	}
	if len(runs) == 0 {
		j.SLODetail = "no plan with resources recorded"
		return
	}
	// The job trains with its launch line's global batch, which need not
	// be its model type's and which every plan it ran keeps: its request
	// is priced at that batch too, as rubickd plans it.
	p = p.ForPlan(runs[0].plan)
	reqPlan, _, err := p.BestPlan(reqRes, nil)
	if err != nil {
		j.SLODetail = fmt.Sprintf("no feasible plan on the request %s: %v", reqRes.Placement, err)
		return
	}
	want, err := p.Throughput(reqPlan, reqRes)
	if err != nil {
		j.SLODetail = fmt.Sprintf("request %s: %v", reqRes.Placement, err)
		return
	}
	worst, worstTput := -1, 0.0
	for k, rn := range runs {
		got, err := p.Throughput(rn.plan, rn.res)
		if err != nil {
			j.SLODetail = fmt.Sprintf("plan %s on %s: %v", rn.plan, rn.res.Placement, err)
			return
		}
		if worst < 0 || got < worstTput {
			worst, worstTput = k, got
		}
	}
	v := worstTput < want*(1-sloTolerance)
	j.SLOViolated = &v
	w := runs[worst]
	j.SLODetail = fmt.Sprintf("lowest %.4g samples/s (%s on %s) vs %.4g requested (%s on %s)",
		worstTput, w.plan, w.res.Placement, want, reqPlan, reqRes.Placement)
}

// uniform spreads gpus evenly over nodes (Slurm's Gres=gpu:N is per node);
// an uneven total puts the remainder on the first nodes.
func uniform(nodes, gpus int) model.Placement {
	nodes = max(nodes, 1)
	pl := make(model.Placement, nodes)
	for i := range pl {
		pl[i] = gpus / nodes
		if i < gpus%nodes {
			pl[i]++
		}
	}
	return pl
}
