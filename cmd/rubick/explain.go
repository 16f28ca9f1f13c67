package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/report"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// explanation is what `rubick explain` prints; its JSON keys are stable
// (docs/report.md).
type explanation struct {
	JobID int64 `json:"job_id"`
	// ArrayTask is the job as squeue names a task of a job array (A_T);
	// "" for other jobs.
	ArrayTask string `json:"array_task,omitempty"`
	// User owns the job; "" where the store does not know.
	User      string    `json:"user"`
	Store     string    `json:"store"`
	ModelType string    `json:"model_type"`
	Class     string    `json:"class"`
	Tenant    string    `json:"tenant"`
	State     string    `json:"state"`
	Submitted time.Time `json:"submitted"`
	// Waited is when rubickd last saw the job held by its user or an
	// administrator, or wait for its --begin or dependencies, as stored (the first cycle
	// that saw a wait, then the last one before it ended), or, for a task
	// of a job array, the array while the task was part of it, whichever
	// is later (report.LastWait): its age in the queue counts from then.
	// Omitted when it never waited.
	Waited *time.Time `json:"last_seen_waiting,omitempty"`
	// LastSeen is when the newest cycle that saw the job was recorded,
	// or its record was, whichever is later: a cycle that leaves a job
	// alone for a reason stored before (a hold that lasts) does not write
	// the job again, so Updated, its last record, can be hours older.
	LastSeen time.Time `json:"last_seen"`
	Updated  time.Time `json:"updated"`
	// Cannot is what the job's launch line cannot express, as rubick-srun
	// reported it ("" for nothing, or no report yet).
	Cannot string `json:"cannot"`
	// GlobalBatch is the global batch the job's launch line trains with,
	// when it is not its model type's (0): as rubick-srun reported it
	// (GlobalBatchReported), else the one rubickd planned it at, from its
	// batch script or its user's last job of the model type.
	GlobalBatch         int      `json:"global_batch,omitempty"`
	GlobalBatchReported bool     `json:"global_batch_reported,omitempty"`
	Fit                 *fitView `json:"fit"`
	Plan                string   `json:"plan"`
	Placement           string   `json:"placement"`
	CPUs                int      `json:"cpus"`
	HostMemGB           float64  `json:"host_mem_gb"`
	// Throughput is the predicted samples/s of the current plan.
	Throughput   *float64      `json:"throughput"`
	Alternatives []alternative `json:"alternatives"`
	// MinRes and Order come from the newest stored reason shown that has
	// them: the policy's minimum resources for a guaranteed job, and the
	// job's place in that cycle's best-effort order, from none older than
	// a decision that left the job out of the policy's hands
	// (daemon.Unplanned). Slope is Order's.
	MinRes *policy.Size `json:"min_res"`
	Slope  *float64     `json:"slope"`
	Order  *orderView   `json:"order"`
	// Admission is the guaranteed job's place in the admission order of
	// the newest cycle that held it queued, as for Order.
	Admission *admissionView      `json:"admission,omitempty"`
	Reasons   []reasonView        `json:"reasons"`
	History   []report.PlanChange `json:"plan_history"`
	Notes     []string            `json:"notes"`
}

// fitView is a stored fit as explain and status show it.
type fitView struct {
	ID     int64        `json:"id"`
	Params model.Params `json:"params"`
	RMSLE  float64      `json:"rmsle"`
	MAPE   float64      `json:"mape_pct"`
	// Samples is the number of samples the fit saw.
	Samples int `json:"samples"`
	// Origin is how the fit was made (profile, online, artifact);
	// ParamSource names another model's samples its parameters come from.
	Origin      string    `json:"origin"`
	ParamSource string    `json:"param_source"`
	Pinned      []string  `json:"pinned"`
	Created     time.Time `json:"created"`
	AgeS        float64   `json:"age_s"`
	// Doubts says why the fit may put its model type's spec in doubt
	// (model.FitResult.Doubts); empty when nothing does.
	Doubts []string `json:"doubts"`
}

// newFitView shows fit f of a model type of spec.
func newFitView(f store.Fit, spec model.Spec, now time.Time) *fitView {
	return &fitView{
		ID: f.ID, Params: f.Params, RMSLE: f.RMSLE, MAPE: f.MAPE, Samples: f.Samples, Origin: string(f.Origin),
		ParamSource: f.Source, Pinned: append([]string{}, f.Pinned...), Created: f.Created,
		AgeS: now.Sub(f.Created).Seconds(), Doubts: append([]string{}, f.Doubts(spec)...),
	}
}

// alternative is one plan on the job's current resources.
type alternative struct {
	Plan       string  `json:"plan"`
	Family     string  `json:"family"`
	Throughput float64 `json:"throughput"`
	IterS      float64 `json:"iter_s"`
	// VsCurrent is Throughput divided by the current plan's; 0 when the
	// current plan cannot be priced.
	VsCurrent float64 `json:"vs_current"`
	Current   bool    `json:"current"`
}

// orderView is the job's place in one cycle's best-effort order.
type orderView struct {
	CycleID int64     `json:"cycle_id"`
	At      time.Time `json:"at"`
	policy.Order
}

// admissionView is a queued guaranteed job's place in one cycle's
// admission order.
type admissionView struct {
	CycleID int64     `json:"cycle_id"`
	At      time.Time `json:"at"`
	policy.Admission
}

// reasonView is one cycle's stored reason for the job: the policy.Action
// rubickd recorded, or the raw JSON when it is not one.
type reasonView struct {
	CycleID    int64             `json:"cycle_id"`
	At         time.Time         `json:"at"`
	Policy     string            `json:"policy"`
	Kind       string            `json:"kind"`
	Reason     string            `json:"reason"`
	Detail     string            `json:"detail"`
	Plan       string            `json:"plan"`
	Placement  string            `json:"placement"`
	Throughput float64           `json:"throughput"`
	MinRes     *policy.Size      `json:"min_res,omitempty"`
	Order      *policy.Order     `json:"order,omitempty"`
	Admission  *policy.Admission `json:"admission,omitempty"`
	Raw        json.RawMessage   `json:"raw"`
}

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return explainCmd(ctx, args, stdout, stderr, processEnv())
}

func explainCmd(ctx context.Context, args []string, stdout, stderr io.Writer, env cliEnv) error {
	fset := newFlags("explain JOBID", "Explain a job from rubick's store: its model type and fit, current plan and\n"+
		"placement, the predicted throughput of the best plans on that placement, and the\n"+
		"reasons rubickd recorded in its last decision cycles. JOBID is a job id, or a\n"+
		"task of a job array as squeue shows it (ARRAY_TASK, e.g. 1234_5).", stderr)
	storePath := storePathFlag(fset, env, configFlag(fset, env, stderr))
	asJSON := fset.Bool("json", false, "write JSON")
	top := fset.Int("top", 5, "plans to list on the current placement")
	nReasons := fset.Int("reasons", 5, "stored decision reasons to show, newest first")
	arg, help, err := parseOneArg(fset, args, "JOBID")
	if help || err != nil {
		return err
	}
	id, array, task, err := parseJobRef(arg)
	if err != nil {
		return err
	}
	if *top < 0 {
		return fmt.Errorf("%w: --top=%d must be >= 0", errUsage, *top)
	}
	if *nReasons < 0 {
		return fmt.Errorf("%w: --reasons=%d must be >= 0", errUsage, *nReasons)
	}
	st, path, err := openStoreFlag(ctx, "explain", storePath)
	if err != nil {
		return err
	}
	defer st.Close()
	if array > 0 {
		j, err := st.ArrayTask(ctx, array, task)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("explain: job %s is not in the store %s (rubickd records a task of an array once it is split off): %w", arg, path, err)
		}
		if err != nil {
			return fmt.Errorf("explain: %w", err)
		}
		id = j.ID
	}
	ex, err := explain(ctx, st, path, id, *top, *nReasons, env.now())
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, ex)
	}
	return ex.write(stdout)
}

// parseJobRef reads a JOBID argument: a job id, or ARRAY_TASK for a task
// of a job array as squeue names it (array > 0 then, and id 0).
func parseJobRef(arg string) (id, array, task int64, err error) {
	id, array, task, ok := report.ParseJobID(arg)
	switch {
	case ok:
		return id, array, task, nil
	case strings.Contains(arg, "_"):
		return 0, 0, 0, fmt.Errorf("%w: JOBID %q is neither a job id nor ARRAY_TASK (1234_5)", errUsage, arg)
	}
	return 0, 0, 0, fmt.Errorf("%w: JOBID %q is not a Slurm job id (a positive integer up to 2^63-1)", errUsage, arg)
}

// explainStore is what explain reads; *store.Store has it.
type explainStore interface {
	Job(ctx context.Context, id int64) (store.Job, error)
	ModelType(ctx context.Context, name string) (store.ModelType, error)
	CurrentFit(ctx context.Context, modelType string) (store.Fit, error)
	Reasons(ctx context.Context, jobID int64, limit int) ([]store.Reason, error)
	PlanHistory(ctx context.Context, jobID int64) ([]store.Action, error)
	LastSeen(ctx context.Context, jobID int64) (time.Time, error)
	JobRestartCosts(ctx context.Context, jobID int64) ([]store.RestartCost, error)
}

func explain(ctx context.Context, st explainStore, path string, id int64, top, nReasons int, now time.Time) (*explanation, error) {
	j, err := st.Job(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("explain: job %d is not in the store %s (rubickd records a job once it polls it): %w", id, path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("explain: %w", err)
	}
	ex := &explanation{
		JobID: id, ArrayTask: arrayTaskName(j), User: j.User, Store: path, ModelType: j.ModelType, Class: string(j.Class), Tenant: j.Tenant, State: j.State,
		Submitted: j.Submitted, Updated: j.Updated, Cannot: j.Cannot.String(), Alternatives: []alternative{}, Reasons: []reasonView{},
		History: []report.PlanChange{}, Notes: []string{},
	}
	if j.State == daemon.StateGone {
		ex.Notes = append(ex.Notes, fmt.Sprintf("Slurm no longer listed the job when rubickd started: it ended while rubickd was stopped (for longer than MinJobAge); sacct -j %d says how", id))
	}
	seen, err := st.LastSeen(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("explain: %w", err)
	}
	ex.LastSeen = j.Updated
	if seen.After(ex.LastSeen) {
		ex.LastSeen = seen
	}
	waited, err := report.LastWait(ctx, st, j)
	if err != nil {
		return nil, fmt.Errorf("explain: %w", err)
	}
	if !waited.IsZero() {
		ex.Waited = &waited
	}
	// What the store holds of the id from before the job's submission is
	// an earlier job's (store.Predates).
	earlier := func(t time.Time) bool { return store.Predates(t, j.Submitted) }
	var reasons []store.Reason
	// The newest is read even with --reasons 0: it may say what the job
	// runs (report.RanPlan).
	if reasons, err = st.Reasons(ctx, id, max(nReasons, 1)); err != nil {
		return nil, fmt.Errorf("explain: %w", err)
	}
	reasons = slices.DeleteFunc(reasons, func(r store.Reason) bool { return earlier(r.At) })
	hist, err := st.PlanHistory(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("explain: %w", err)
	}
	hist = slices.DeleteFunc(hist, func(a store.Action) bool { return earlier(a.DecidedAt) })
	// As rubick report reads it: the store's last plan may be an earlier
	// run's, where rubickd released the job without one since.
	applied, appliedRes := report.AppliedPlan(hist)
	if ran, res, ok := report.RanPlan(applied, appliedRes, reasons, hist); ok {
		why := fmt.Sprintf("not on %s, which rubickd set last (it stopped waiting for that plan, --plan-wait)", applied)
		if applied == (model.Plan{}) {
			why = "rubickd started it without a plan"
		}
		ex.Notes = append(ex.Notes, fmt.Sprintf("its rubick-srun reports it training on %s, its launch line as it is (%s); rubickd prices it at that plan", ran, why))
		j.LastPlan, j.LastResources = ran, res
	}
	if j.LastPlan != (model.Plan{}) {
		ex.Plan, ex.Placement = j.LastPlan.String(), j.LastResources.Placement.String()
		ex.CPUs, ex.HostMemGB = j.LastResources.CPUs, j.LastResources.HostMemGB
	}
	if err := ex.addModel(ctx, st, j, top, now); err != nil {
		return nil, err
	}
	placed := true // the places older decisions gave it may still stand
	for _, r := range reasons[:min(nReasons, len(reasons))] {
		v := newReasonView(r)
		ex.Reasons = append(ex.Reasons, v)
		if ex.MinRes == nil {
			ex.MinRes = v.MinRes
		}
		if placed && ex.Order == nil && v.Order != nil {
			ex.Order = &orderView{CycleID: r.CycleID, At: r.At, Order: *v.Order}
			ex.Slope = &v.Order.Slope
		}
		if placed && ex.Admission == nil && v.Admission != nil {
			ex.Admission = &admissionView{CycleID: r.CycleID, At: r.At, Admission: *v.Admission}
		}
		// A job held or left alone since is in no order: the place it had
		// before would read as where it waits now.
		placed = placed && (v.Raw != nil || !daemon.Unplanned(policy.Reason(v.Reason)))
	}
	costs, err := st.JobRestartCosts(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("explain: %w", err)
	}
	ex.History = report.PlanChanges(hist, costs)
	return ex, nil
}

// addModel fills the fit, the current plan's throughput and the
// alternatives on the current placement.
func (ex *explanation) addModel(ctx context.Context, st explainStore, j store.Job, top int, now time.Time) error {
	if j.ModelType == "" {
		// The store keeps only types it has a spec for: a job of another
		// type (as the SPANK list allows) is stored without one.
		ex.Notes = append(ex.Notes, "no model type the store has a spec for (none given, or an unknown one: the decisions say which): run with its own request and plan")
		return nil
	}
	mt, err := st.ModelType(ctx, j.ModelType)
	if errors.Is(err, store.ErrNotFound) {
		// rubickd profiles only the types it has a spec for.
		ex.Notes = append(ex.Notes, fmt.Sprintf("model type %q is not in the store (no spec): the job runs on its own request, unprofiled and unplanned, until an administrator adds the type (docs/admin-guide.md, Adding a model type)", j.ModelType))
		return nil
	}
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	fit, err := st.CurrentFit(ctx, j.ModelType)
	if errors.Is(err, store.ErrNotFound) {
		ex.Notes = append(ex.Notes, fmt.Sprintf("model type %q has no fit yet: the job runs on its own request, and one job of the type at a time profiles it (its rubick-srun, before training); "+
			"rubickd fits the type once seven configurations, or three of a finished profiling phase, are measured (docs/rubick-srun.md, Profiling phase)", j.ModelType))
		return nil
	}
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	ex.Fit = newFitView(fit, mt.Spec, now)
	if j.LastPlan == (model.Plan{}) {
		ex.Notes = append(ex.Notes, "no plan yet: the job has not been placed")
		return nil
	}
	spec := mt.Spec
	gb := j.GlobalBatch
	if gb == 0 {
		// Not reported yet: the batch it was planned at (its user's last
		// job's, say).
		gb = j.LastPlan.DP * j.LastPlan.MicroBatch * j.LastPlan.Accum
	}
	if gb > 0 && gb != spec.GlobalBatch {
		// Planned, and so shown, at the batch its launch line trains with.
		ex.GlobalBatch, ex.GlobalBatchReported, spec = gb, j.GlobalBatch > 0, spec.WithGlobalBatch(gb)
	}
	p := model.Predictor{Spec: spec, Params: fit.Params, Env: model.DefaultEnv()}
	res := j.LastResources
	cur, err := p.Throughput(j.LastPlan, res)
	if err != nil {
		ex.Notes = append(ex.Notes, fmt.Sprintf("current plan %s on %s cannot be priced: %v", j.LastPlan, res.Placement, err))
	} else {
		ex.Throughput = &cur
	}
	var alts []alternative
	for _, plan := range model.Enumerate(spec, res.Placement) {
		if p.Feasible(plan, res) != nil || !j.Cannot.Allows(plan) {
			continue
		}
		b, err := p.Predict(plan, res)
		if err != nil || !(b.Iter > 0) {
			continue
		}
		a := alternative{Plan: plan.String(), Family: string(plan.Family()), IterS: b.Iter,
			Throughput: float64(spec.GlobalBatch) / b.Iter, Current: plan == j.LastPlan}
		if ex.Throughput != nil && cur > 0 {
			a.VsCurrent = a.Throughput / cur
		}
		alts = append(alts, a)
	}
	slices.SortStableFunc(alts, func(a, b alternative) int {
		return cmp.Or(cmp.Compare(b.Throughput, a.Throughput), strings.Compare(a.Plan, b.Plan))
	})
	for i, a := range alts {
		if i < top || a.Current {
			ex.Alternatives = append(ex.Alternatives, a)
		}
	}
	if len(alts) == 0 {
		ex.Notes = append(ex.Notes, fmt.Sprintf("no memory-feasible plan on %s with %d CPUs", res.Placement, res.CPUs))
	}
	if j.LastPlan.GPUs() > 0 && !slices.ContainsFunc(alts, func(a alternative) bool { return a.Current }) {
		// Not left out unsaid: a job may run a plan the model would not
		// choose (its launch line's own, kept as it is).
		switch err := p.Feasible(j.LastPlan, res); {
		case err != nil:
			ex.Notes = append(ex.Notes, fmt.Sprintf("current plan %s is not among the plans listed: the memory model finds it does not fit on %s (%v)", j.LastPlan, res.Placement, err))
		case !j.Cannot.Allows(j.LastPlan):
			ex.Notes = append(ex.Notes, fmt.Sprintf("current plan %s is not among the plans listed: its launch line cannot express it (%s)", j.LastPlan, j.Cannot))
		}
	}
	return nil
}

// restartCost is a history line's measured restart cost, if any.
func restartCost(s *float64) string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf(" (restart cost %.1fs, measured)", *s)
}

func newReasonView(r store.Reason) reasonView {
	v := reasonView{CycleID: r.CycleID, At: r.At, Policy: r.Policy}
	a, ok := report.DecodeReason(r.Reason)
	if !ok {
		v.Raw = r.Reason
		return v
	}
	v.Kind, v.Reason, v.Detail, v.Throughput = string(a.Kind), string(a.Reason), a.Detail, a.Throughput
	v.MinRes, v.Order, v.Admission = a.MinRes, a.Order, a.Admission
	if a.Plan != (model.Plan{}) {
		v.Plan = a.Plan.String()
	}
	v.Placement = a.Placement().String()
	return v
}

func (ex *explanation) write(w io.Writer) error {
	ew := &stickyWriter{w: w}
	mt := ex.ModelType
	if mt == "" {
		mt = report.NoModel
	}
	fmt.Fprintf(ew, "job %s: user %s, model %s, class %s, tenant %s, state %s\n", jobLabel(ex.JobID, ex.ArrayTask), orDash(ex.User), mt, orDash(ex.Class), orDash(ex.Tenant), ex.State)
	fmt.Fprintf(ew, "  submitted %s, last seen %s, store %s\n", utcTime(ex.Submitted), utcTime(ex.LastSeen), ex.Store)
	if ex.Waited != nil {
		fmt.Fprintf(ew, "  last seen held or waiting for its --begin or dependencies at %s; its age in the queue counts from then\n", utcTime(*ex.Waited))
	}
	if ex.Cannot != "" {
		fmt.Fprintf(ew, "  its launch line cannot run plans with %s (reported by rubick-srun); no plan shown or chosen uses them\n", ex.Cannot)
	}
	if ex.GlobalBatch > 0 {
		from := "reported by rubick-srun"
		if !ex.GlobalBatchReported {
			from = "planned from its batch script or its user's last job, until rubick-srun reports"
		}
		fmt.Fprintf(ew, "  its launch line trains with a global batch of %d, not its model type's (%s); every plan shown or chosen keeps it\n", ex.GlobalBatch, from)
	}
	if f := ex.Fit; f != nil {
		src := f.Origin
		if f.ParamSource != "" {
			src += ", parameters from " + f.ParamSource
		}
		fmt.Fprintf(ew, "fit #%d: RMSLE %.4f, MAPE %.2f %%, %d samples, %s, %s old", f.ID, f.RMSLE, f.MAPE, f.Samples, src, ageString(f.AgeS))
		if len(f.Pinned) > 0 {
			fmt.Fprintf(ew, ", pinned %s", strings.Join(f.Pinned, ","))
		}
		p := f.Params
		fmt.Fprintf(ew, "\n  k_bwd=%.4g k_sync=%.4g k_opt=%.4g k_opt_off=%.4g k_off=%.4g k_swap=%.4g k_const=%.4g k_3d=%.4g\n",
			p.KBwd, p.KSync, p.KOpt, p.KOptOff, p.KOff, p.KSwap, p.KConst, p.Normalized().K3D)
		for _, d := range f.Doubts {
			fmt.Fprintf(ew, "  doubt: %s (the model type's spec is the administrator's: docs/admin-guide.md, Correcting a model type's spec)\n", d)
		}
	}
	// A job queued again (preempted, requeued held) runs no plan: the one
	// it ran with or was given last is not its current one.
	plan, now := "current", ""
	if ex.State != slurm.StateRunning && ex.State != slurm.StateSuspended {
		plan, now = "last", fmt.Sprintf("; the job holds no GPUs now (%s)", ex.State)
	}
	if ex.Plan != "" {
		tput := "not priced"
		if ex.Throughput != nil {
			tput = fmt.Sprintf("%.4g samples/s predicted", *ex.Throughput)
		}
		fmt.Fprintf(ew, "%s plan %s on %s, %d CPUs, %.0f GB host memory: %s%s\n", plan, ex.Plan, ex.Placement, ex.CPUs, ex.HostMemGB, tput, now)
	}
	if len(ex.Alternatives) > 0 {
		fmt.Fprintf(ew, "best plans on %s:\n", ex.Placement)
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  plan\tfamily\tsamples/s\titer\tvs %s\n", plan)
		for _, a := range ex.Alternatives {
			mark := ""
			if a.Current {
				mark = "(" + plan + ")"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%.4g\t%.3fs\t%.2fx\t%s\n", a.Plan, a.Family, a.Throughput, a.IterS, a.VsCurrent, mark)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if ex.MinRes != nil {
		fmt.Fprintf(ew, "minimum resources: %s, the fewest with which a plan reaches its request's throughput\n", ex.MinRes)
	}
	if a := ex.Admission; a != nil {
		fmt.Fprintf(ew, "admission order at cycle %d: %s\n", a.CycleID, admissionString(a.Admission))
	}
	if o := ex.Order; o != nil {
		fmt.Fprintf(ew, "best-effort order at cycle %d: %s\n", o.CycleID, orderString(o.Order))
	}
	if len(ex.Reasons) > 0 {
		fmt.Fprintln(ew, "recent decisions, newest first:")
		for _, r := range ex.Reasons {
			if r.Raw != nil {
				fmt.Fprintf(ew, "  %s cycle %d %s: %s\n", utcTime(r.At), r.CycleID, r.Policy, r.Raw)
				continue
			}
			run := ""
			if r.Plan != "" || r.Placement != "" {
				run = fmt.Sprintf(" %s on %s, %.4g samples/s", orDash(r.Plan), orDash(r.Placement), r.Throughput)
			}
			if r.Order != nil {
				run += fmt.Sprintf(", %s of %d in order", ordinal(r.Order.Position), r.Order.Of)
			}
			if r.Admission != nil {
				run += fmt.Sprintf(", %s of %d to admit", ordinal(r.Admission.Position), r.Admission.Of)
			}
			fmt.Fprintf(ew, "  %s cycle %d %s: %s (%s)%s%s\n", utcTime(r.At), r.CycleID, r.Policy, r.Kind, r.Reason, run, colonDetail(r.Detail))
		}
	} else {
		fmt.Fprintln(ew, "no decision recorded for this job yet")
	}
	if len(ex.History) > 0 {
		fmt.Fprintln(ew, "plan history:")
		for _, h := range ex.History {
			res := h.Result
			if res == "" {
				res = "pending"
			}
			fmt.Fprintf(ew, "  %s %s: %s%s%s\n", utcTime(h.At), strings.TrimSpace(h.Kind+" "+h.Subject()), res,
				colonDetail(h.Error), restartCost(h.RestartCostS))
		}
	}
	for _, n := range ex.Notes {
		fmt.Fprintf(ew, "note: %s\n", n)
	}
	return ew.err
}

func colonDetail(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func utcTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// ageString formats an age in seconds compactly.
func ageString(s float64) string {
	// Whole seconds and minutes, rounded down below the next unit (59.6 s
	// printed as "60s", 59m40s as "60m").
	d := time.Duration(s) * time.Second
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", d/time.Second)
	case d < time.Hour:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d < 48*time.Hour:
		return fmt.Sprintf("%.1fh", d.Hours())
	}
	return fmt.Sprintf("%.1fd", d.Hours()/24)
}

// stickyWriter keeps the first write error so printing code checks once.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (e *stickyWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// jobLabel is job id as the CLI prints it: with its array task (A_T) in
// parentheses when it is one.
func jobLabel(id int64, arrayTask string) string {
	if arrayTask == "" {
		return strconv.FormatInt(id, 10)
	}
	return fmt.Sprintf("%d (%s)", id, arrayTask)
}

// arrayTaskName is job j as squeue names a task of a job array (A_T); ""
// for other jobs.
func arrayTaskName(j store.Job) string {
	if j.ArrayJobID <= 0 {
		return ""
	}
	return fmt.Sprintf("%d_%d", j.ArrayJobID, j.ArrayTaskID)
}

// orderString says where a job stood in a round's best-effort order and
// what put it there.
func orderString(o policy.Order) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s of %d jobs (%d queued ahead of it), ", ordinal(o.Position), o.Of, o.QueuedAhead)
	switch o.By {
	case policy.OrderStarvation:
		b.WriteString("ahead of younger jobs: past the starvation age or near its deadline; ")
	case policy.OrderFairShare:
		b.WriteString("by fair-share factor, then ")
	case policy.OrderPriority:
		b.WriteString("by Slurm priority, then ")
	}
	fmt.Fprintf(&b, "slope %.3g per GPU", o.Slope)
	switch {
	case o.NoTimeLimit:
		fmt.Fprintf(&b, ", no time limit (counted as the longest, %.2f h left), weighed %.3g", o.TimeLeftH, o.WeighedSlope)
	case o.TimeLeftH > 0:
		fmt.Fprintf(&b, ", %.2f h left by its time limit, weighed %.3g", o.TimeLeftH, o.WeighedSlope)
	}
	return b.String()
}

// admissionString says where a queued guaranteed job stood in a round's
// admission order and what put it there.
func admissionString(a policy.Admission) string {
	by := "by " + a.By
	switch a.By {
	case policy.AdmitDeadline:
		by = "ahead of the rest: near the latest start its --deadline allows"
	case policy.AdmitAge:
		by = "ahead of shorter jobs: queued past policy.guaranteed_age"
	case policy.OrderShortest:
		by = "shortest time limit first"
	case policy.OrderSubmit:
		by = "in submission order"
	case policy.OrderPriority:
		by = "by Slurm priority"
	}
	return fmt.Sprintf("%s of %d queued guaranteed jobs, %s; each is admitted within its tenant's quota", ordinal(a.Position), a.Of, by)
}

// ordinal writes n as 1st, 2nd, 3rd, 4th, 11th, 21st.
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}
