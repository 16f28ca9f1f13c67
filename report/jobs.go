package report

import (
	"cmp"
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

// NoModel is the model type of jobs without a rubick tag, and the key of
// any grouping value a job lacks.
const NoModel = "(none)"

// GPU sources of a run's GPU count.
const (
	// GPUsFromTRES: the gres/gpu entry of AllocTRES.
	GPUsFromTRES = "alloc_tres"
	// GPUsFromRequest: AllocTRES lacks gres/gpu (AccountingStorageTRES
	// without gres/gpu), so the tag's req= GPUs per node times the run's
	// nodes stand in.
	GPUsFromRequest = "request"
	// GPUsNone: the run holds nothing (empty AllocTRES, never started).
	GPUsNone = "none"
	// GPUsMissing: AllocTRES lacks gres/gpu and there is no request to fall
	// back on; the run counts 0 GPUs.
	GPUsMissing = "missing"
)

// terminal lists the sacct states in which a job is over: those it never
// runs again from (ended), and NODE_FAIL, PREEMPTED and REVOKED, after
// which only Slurm's requeue of it, a run of its own, runs it again.
// Everything else (PENDING, RUNNING, REQUEUED, RESIZING, SUSPENDED, ...)
// is not.
var terminal = append(slices.Clone(ended), "NODE_FAIL", "PREEMPTED", "REVOKED")

// Run is one run of a job: one sacct row.
type Run struct {
	State string     `json:"state"`
	Start *time.Time `json:"start"`
	End   *time.Time `json:"end"`
	// ElapsedS is sacct's Elapsed, or End - Start without that column.
	ElapsedS  float64 `json:"elapsed_s"`
	GPUs      int     `json:"gpus"`
	GPUSource string  `json:"gpu_source"`
	Nodes     int     `json:"nodes"`
	CPUs      int     `json:"cpus"`
	// Billing is AllocTRES billing=: what the run was billed per second
	// of it, by its partition's TRESBillingWeights.
	Billing int `json:"billing"`
	// Plan is the plan= of the run's rubick tag; empty when it has none.
	// A running run's tag is not in sacct yet: with a store, it is the
	// plan rubickd last applied to the job (Enrich). With a store, a run
	// that trained on another plan than rubickd applied has that one.
	Plan string `json:"plan"`
}

// PlanChange is one plan action rubickd recorded for a job (store only).
type PlanChange struct {
	At        time.Time `json:"at"`
	Kind      string    `json:"kind"`
	Plan      string    `json:"plan"`
	Placement string    `json:"placement"`
	CPUs      int       `json:"cpus"`
	Result    string    `json:"result"`
	Error     string    `json:"error"`
	// RestartCostS is what rubickd measured the restart to cost; null
	// when it was not measured (or the action is not a restart).
	RestartCostS *float64 `json:"restart_cost_s"`
}

// Subject is what the change acted on, as report and explain print it
// after its kind: its plan on its placement and CPUs; the plan alone for
// a refusal (store.KindRefused), which ran on the job's allocation; ""
// for a change of neither (a time limit).
func (pc PlanChange) Subject() string {
	switch {
	case pc.Placement != "":
		return fmt.Sprintf("%s on %s, %d CPUs", dash(pc.Plan), pc.Placement, pc.CPUs)
	case pc.Plan != "":
		return pc.Plan
	}
	return ""
}

// PlanChanges turns a job's plan history and its measured restart costs
// into the rows report and explain show.
func PlanChanges(hist []store.Action, costs []store.RestartCost) []PlanChange {
	byAction := make(map[int64]float64, len(costs))
	for _, c := range costs {
		byAction[c.ActionID] = c.Cost.Seconds()
	}
	out := make([]PlanChange, 0, len(hist))
	for _, a := range hist {
		pc := PlanChange{At: a.DecidedAt, Kind: a.Kind, Placement: a.Resources.Placement.String(),
			CPUs: a.Resources.CPUs, Result: string(a.Result), Error: a.Error}
		if a.Plan != (model.Plan{}) {
			pc.Plan = a.Plan.String()
		}
		if c, ok := byAction[a.ID]; ok {
			pc.RestartCostS = &c
		}
		out = append(out, pc)
	}
	return out
}

// Job is one Slurm job with all its runs and its metrics. Pointer fields
// are null in JSON when the input cannot tell (see docs/report.md).
type Job struct {
	ID        string `json:"job_id"`
	Name      string `json:"name"`
	User      string `json:"user"`
	Account   string `json:"account"`
	QOS       string `json:"qos"`
	Partition string `json:"partition"`
	// ModelType, Class, Tenant and Request come from the newest run's
	// rubick tag; ModelType is NoModel without one. With a store, a job
	// whose rows have no req= takes its Request from the tag rubickd
	// stored with its newest action (Enrich).
	ModelType string `json:"model_type"`
	Class     string `json:"class"`
	Tenant    string `json:"tenant"`
	Request   string `json:"request"`
	// Tasks is how many jobs the row stands for: an array's tasks not
	// split off yet, one sacct row ("12_[3-9]", 7 tasks; ArrayTasks), count
	// one each; 1 for any other.
	Tasks int `json:"tasks"`
	// State is the last run's state; Finished whether it is terminal.
	State      string     `json:"state"`
	Finished   bool       `json:"finished"`
	Submit     *time.Time `json:"submit"`
	FirstStart *time.Time `json:"first_start"`
	End        *time.Time `json:"end"`
	JCTS       *float64   `json:"jct_s"`
	QueueS     *float64   `json:"queue_s"`
	// QueuedFrom is when the job began to queue for GPUs, where that is
	// later than its submission: the end of a hold or of a wait for its
	// --begin or dependencies, from rubick's store (Enrich). QueueS then
	// counts from it.
	QueuedFrom *time.Time `json:"queued_from"`
	Runs       []Run      `json:"runs"`
	Requeues   int        `json:"requeues"`
	Resizes    int        `json:"resizes"`
	// Reconfigurations is Requeues + Resizes: every row but the last,
	// less the interruptions.
	Reconfigurations int     `json:"reconfigurations"`
	ReconfigLostS    float64 `json:"reconfig_lost_s"`
	// ReconfigLostGPUHours, InterruptionLostGPUHours, GPUHours,
	// UsefulGPUHours and BillingHours need AllocTRES: null without that
	// column.
	ReconfigLostGPUHours *float64 `json:"reconfig_lost_gpu_hours"`
	// ReconfigMeasured counts the requeues priced at the restart cost
	// rubickd measured (with a store) instead of gap + overhead.
	ReconfigMeasured int `json:"reconfig_measured"`
	// Interruptions counts the runs Slurm ended and requeued the job
	// after (interrupted), and those someone else requeued
	// (rubicksRequeue): no reconfiguration of rubick's, priced as a
	// requeue is but on their own.
	Interruptions int `json:"interruptions"`
	// IntrNodeFail, IntrPreempted and IntrOther split Interruptions by
	// cause: the run's node failed (NODE_FAIL), Slurm preempted the run
	// (PREEMPTED), or someone else requeued it (any other state).
	IntrNodeFail             int      `json:"interruptions_node_fail"`
	IntrPreempted            int      `json:"interruptions_preempted"`
	IntrOther                int      `json:"interruptions_other"`
	InterruptionLostS        float64  `json:"interruption_lost_s"`
	InterruptionLostGPUHours *float64 `json:"interruption_lost_gpu_hours"`
	// InterruptionMeasured counts the interruptions priced at the restart
	// cost rubickd measured: it had decided to restart the run that Slurm
	// ended.
	InterruptionMeasured int      `json:"interruption_measured"`
	GPUHours             *float64 `json:"gpu_hours"`
	// UsefulGPUHours is GPUHours less the GPU-hours lost to both
	// reconfigurations and interruptions.
	UsefulGPUHours *float64 `json:"useful_gpu_hours"`
	// BillingHours is the sum over runs of run length x billing, what the
	// site charges the job's account.
	BillingHours   *float64 `json:"billing_hours"`
	GPUTRESMissing bool     `json:"gpu_tres_missing"`
	// Plans is Run.Plan per run with repeats collapsed.
	Plans []string `json:"plans"`
	// StorePlans is rubickd's plan history; null without a store.
	StorePlans []PlanChange `json:"store_plans"`
	// BelowRequest: a guaranteed job ran on fewer GPUs (per AllocTRES)
	// than its req= asked for. Computable from sacct alone; not by itself
	// an SLO violation, since a better plan may make up for fewer GPUs.
	BelowRequest bool `json:"below_request"`
	// SLOViolated is set only with a store (see Enrich).
	SLOViolated *bool  `json:"slo_violated"`
	SLODetail   string `json:"slo_detail"`

	req  *request
	rows []Row // the sacct rows behind Runs, for the store check
	// next is the submission of the later job Slurm gave the same id
	// (splitReused); nil for none. The store's record of the id and its
	// actions from then on are that job's.
	next *time.Time
	// requeues are the job's requeues as priced from sacct, for Enrich to
	// replace with measured costs.
	requeues []requeue
	// trained is what the runs trained on where the store says it was
	// not the plan rubickd applied to them (RanPlan: runningPlan,
	// endedPlans), and ranApplied marks the actions, by index in the
	// job's own plan history, whose plan a run trained on: for the SLO
	// check, an action whose runs all trained on another plan is none the
	// job ran with.
	trained    []ranInstead
	ranApplied map[int]bool
}

// plansOf is the plans of runs, in order, a plan that consecutive runs
// share named once: what Job.Plans lists.
func plansOf(runs []Run) []string {
	out := []string{} // JSON's plans is [], not null, without one
	for _, r := range runs {
		if r.Plan != "" && (len(out) == 0 || out[len(out)-1] != r.Plan) {
			out = append(out, r.Plan)
		}
	}
	return out
}

// resources is what the run held as the model prices it: its GPUs spread
// evenly over its nodes, and its CPUs.
func (r Run) resources() model.Resources {
	return model.Resources{Placement: uniform(max(r.Nodes, 1), r.GPUs), CPUs: r.CPUs}
}

// ranInstead is the plan a run trained on and its resources, and the
// index in the job's own plan history of the action that applied the plan
// it never trained on (-1 for none).
type ranInstead struct {
	planOn
	applied int
}

// planOn is a plan and the resources it runs on.
type planOn struct {
	plan model.Plan
	res  model.Resources
}

// requeue is one requeue of a job: run ended, next started, and what it
// was priced at from sacct alone. interrupted marks one that was not
// rubick's (Slurm's, interrupted, or someone's scontrol requeue,
// rubicksRequeue), an interruption rather than a reconfiguration.
type requeue struct {
	run         int // index of the run it ended
	gapS, ohS   float64
	nextGPUs    int
	interrupted bool
}

// interrupted reports whether a run that ended in state, and that another
// run of its job followed, was Slurm's requeue of the job, not rubick's:
// its node failed (NODE_FAIL, with JobRequeue=1) or Slurm preempted it
// (PREEMPTED, PreemptMode=REQUEUE). rubickd's own restarts and preemptions
// requeue the job held, which ends the run REQUEUED.
func interrupted(state string) bool {
	switch state {
	case slurm.StateNodeFail, slurm.StatePreempted:
		return true
	}
	return false
}

// rubicksRequeue says whether the run whose tag is end (REQUEUED, or
// ended and requeued by hand) was requeued by rubick, where the tag of
// the run after it (next) tells. rubick's own requeues (a restart, a
// preemption, rubick-srun's after a refused plan) end held, and only
// rubickd's start of the job (gen= one more) runs it again. A run Slurm
// started again by itself after someone's scontrol requeue keeps its
// gen= (22.05 and 24.11 labs). known is false where a tag is missing
// (the next run is still running: sacct shows its tag once it ends) or
// end's has no gen= (rubickd never started it).
func rubicksRequeue(end, next *slurm.Tag) (mine, known bool) {
	if end == nil || next == nil || end.Generation == 0 {
		return false, false
	}
	return next.Generation > end.Generation, true
}

// requeueOwner decides whether rubick requeued the run end, in place of
// the tags (rubicksRequeue); Enrich's reads rubickd's plan history, which
// knows more.
type requeueOwner func(end Row) bool

// JobError is a problem with one job; the job is still reported with what
// could be read.
type JobError struct {
	JobID string
	// Submit tells the job apart from the others of its id (Slurm reused
	// it); nil for an id of one job.
	Submit *time.Time
	Field  string
	Value  string
	Err    error
}

// Error names the job, the field and the value.
func (e *JobError) Error() string {
	job := e.JobID
	if e.Submit != nil {
		job += " (submitted " + e.Submit.Format(time.RFC3339) + ")"
	}
	return fmt.Sprintf("job %s: %s=%q: %v", job, e.Field, clip(e.Value), e.Err)
}

// Unwrap returns ErrJob and the cause, so errors.Is finds both.
func (e *JobError) Unwrap() []error { return []error{ErrJob, e.Err} }

// MarshalJSON writes {"job_id","submit","field","value","error"}.
func (e *JobError) MarshalJSON() ([]byte, error) {
	return marshalJSON(struct {
		JobID  string     `json:"job_id"`
		Submit *time.Time `json:"submit,omitempty"`
		Field  string     `json:"field"`
		Value  string     `json:"value"`
		Error  string     `json:"error"`
	}{e.JobID, e.Submit, e.Field, e.Value, e.Err.Error()})
}

// request is the tag's req= (n<nodes>.g<GPUs per node>.c<CPUs>.m<MiB>).
type request struct {
	Nodes, GPUsPerNode, CPUs int
	MemMB                    int64
	text                     string // as the tag wrote it
}

func (r request) gpus() int { return r.Nodes * r.GPUsPerNode }

func parseRequest(s string) (request, error) {
	r := request{text: s}
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return r, errors.New("want n<nodes>.g<GPUs per node>.c<CPUs>.m<MiB>")
	}
	dst := []*int{&r.Nodes, &r.GPUsPerNode, &r.CPUs}
	for i, p := range []string{"n", "g", "c", "m"} {
		v, ok := strings.CutPrefix(parts[i], p)
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n < 0 || n > 1<<40 {
			return r, fmt.Errorf("field %q is not %s<integer>", parts[i], p)
		}
		if i < 3 {
			*dst[i] = int(n)
		} else {
			r.MemMB = n
		}
	}
	if r.Nodes == 0 || r.GPUsPerNode == 0 {
		return r, errors.New("nodes and GPUs per node must be > 0")
	}
	return r, nil
}

// ended lists the states Slurm never runs a job again from. After any
// other a job may run again under its id: REQUEUED, RESIZING, and
// NODE_FAIL or PREEMPTED of a job Slurm requeues.
var ended = []string{"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE", "BOOT_FAIL"}

// mergeHet makes the components of a heterogeneous job (sacct's 200+0,
// 200+1, ...) one job, 200, as Slurm schedules them (and rubickd reads
// them): the i-th run of each component is one run, holding what they
// hold together, from the first start to the last end; names, tags and
// state are component 0's. A job whose components list different numbers
// of runs is left as they are, since which runs belong together is
// unknown. Other rows keep their order; a merged job stands where its
// first row stood.
func mergeHet(rows []Row) []Row {
	comps := map[string][][]Row{} // leader id -> component -> its rows
	for _, r := range rows {
		leader, k, ok := hetComponent(r.JobID)
		if !ok {
			continue
		}
		cs := comps[leader]
		for len(cs) <= k {
			cs = append(cs, nil)
		}
		cs[k] = append(cs[k], r)
		comps[leader] = cs
	}
	merged := map[string][]Row{}
	for leader, cs := range comps {
		if len(cs[0]) == 0 || slices.ContainsFunc(cs, func(c []Row) bool { return len(c) != len(cs[0]) }) {
			continue
		}
		runs := make([]Row, len(cs[0]))
		for i := range runs {
			m := cs[0][i]
			m.JobID = leader
			for _, c := range cs[1:] {
				r := c[i]
				m.Submit, m.Start = earliest(m.Submit, r.Submit), earliest(m.Start, r.Start)
				if r.End.After(m.End) {
					m.End = r.End
				}
				m.Elapsed, m.HasElapsed = max(m.Elapsed, r.Elapsed), m.HasElapsed && r.HasElapsed
				m.AllocTRES = strings.Trim(m.AllocTRES+";"+r.AllocTRES, ";")
				m.GPUs, m.HasGPUTRES = m.GPUs+r.GPUs, m.HasGPUTRES || r.HasGPUTRES
				m.Nodes, m.CPUs, m.Billing = m.Nodes+r.Nodes, m.CPUs+r.CPUs, m.Billing+r.Billing
			}
			runs[i] = m
		}
		merged[leader] = runs
	}
	if len(merged) == 0 {
		return rows
	}
	out := make([]Row, 0, len(rows))
	for _, r := range rows {
		leader, _, ok := hetComponent(r.JobID)
		if runs, done := merged[leader]; ok && done {
			if runs != nil {
				out = append(out, runs...)
				merged[leader] = nil // placed
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// hetComponent reads a heterogeneous job's component id, "200+1", as its
// leader "200" and component 1.
func hetComponent(id string) (leader string, k int, ok bool) {
	leader, c, ok := strings.Cut(id, "+")
	if !ok {
		return "", 0, false
	}
	if _, err := strconv.ParseUint(leader, 10, 64); err != nil {
		return "", 0, false
	}
	n, err := strconv.Atoi(c)
	if err != nil || n < 0 || n > 1<<10 {
		return "", 0, false
	}
	return leader, n, true
}

// earliest is the earlier of two times, a zero one (unknown) ignored.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// groupRows groups rows by job id, in order of first appearance, and
// splits an id's rows where Slurm reused it (splitReused).
func groupRows(rows []Row) [][]Row {
	var order []string
	by := map[string][]Row{}
	for _, r := range rows {
		if _, ok := by[r.JobID]; !ok {
			order = append(order, r.JobID)
		}
		by[r.JobID] = append(by[r.JobID], r)
	}
	out := make([][]Row, 0, len(order))
	for _, id := range order {
		rs := by[id]
		// sacct -D lists runs in database order; sort by start when every
		// run has one, so the cost of each restart is measured between
		// the right neighbours.
		if !slices.ContainsFunc(rs, func(r Row) bool { return r.Start.IsZero() }) {
			slices.SortStableFunc(rs, func(a, b Row) int { return a.Start.Compare(b.Start) })
		}
		out = append(out, splitReused(rs)...)
	}
	return out
}

// splitReused splits the runs of one job id into the jobs Slurm gave it:
// Slurm reuses ids after its state is reset (StateSaveLocation wiped,
// FirstJobId) or past MaxJobId, and slurmdbd keeps the rows of each. A run
// starts a new job where its tag's sub= differs from the job's so far
// (rubickd writes the job's first submission into every tag, so an equal
// sub= is the same job, one requeued once it had ended); without sub= on
// both, where it was submitted after the run before it ended in a state
// the job never runs again from.
func splitReused(rs []Row) [][]Row {
	var out [][]Row
	first, sub := 0, int64(0)
	for i, r := range rs {
		s := rowSubmit(r)
		if i > 0 {
			prev := rs[i-1]
			reused := s != 0 && sub != 0 && s != sub
			if s == 0 || sub == 0 {
				reused = slices.Contains(ended, prev.State) && !prev.End.IsZero() && r.Submit.After(prev.End)
			}
			if reused {
				out = append(out, rs[first:i])
				first, sub = i, 0
			}
		}
		if s != 0 {
			sub = s
		}
	}
	return append(out, rs[first:])
}

// rowSubmit is the sub= of r's rubick tag, 0 without a valid one (buildJob
// reports a malformed one).
func rowSubmit(r Row) int64 {
	t, err := slurm.TagFromAdminComment(r.AdminComment)
	if err != nil || t == nil {
		return 0
	}
	sec, err := strconv.ParseInt(t.Extra[slurm.TagSubmit], 10, 64)
	if err != nil || sec <= 0 {
		return 0
	}
	return sec
}

// buildJob computes one job's metrics from its runs. Without the AllocTRES
// column (tres false) its GPU-hours and billing-hours stay nil: every run
// would count 0 GPUs and 0 billing. fallback, when not nil, is the job's
// request where no row's tag has one (a running first run's tag is not in
// sacct yet; Enrich finds it in the store).
func buildJob(rows []Row, overhead time.Duration, tres bool, fallback *request, owner requeueOwner) (Job, []*JobError) {
	last := rows[len(rows)-1]
	j := Job{
		ID: last.JobID, Name: last.JobName, User: last.User, Account: last.Account, QOS: last.QOS, Partition: last.Partition,
		ModelType: NoModel, State: last.State, Finished: slices.Contains(terminal, last.State),
		Tasks: ArrayTasks(last.JobID), Runs: []Run{},
	}
	var errs []*JobError
	seen := map[string]bool{}
	addErr := func(field, value string, err error) {
		e := &JobError{JobID: j.ID, Field: field, Value: value, Err: err}
		if !seen[e.Error()] {
			seen[e.Error()] = true
			errs = append(errs, e)
		}
	}
	// The newest tag describes the job; each run keeps its own plan.
	tags := make([]*slurm.Tag, len(rows))
	var tagSub time.Time // the earliest sub= of the rows' tags
	for i, r := range rows {
		t, err := slurm.TagFromAdminComment(r.AdminComment)
		if err != nil {
			addErr("AdminComment", r.AdminComment, err)
			continue
		}
		tags[i] = t
		if t == nil {
			continue
		}
		if t.ModelType != "" {
			j.ModelType = t.ModelType
		}
		j.Class = cmp.Or(t.Class, j.Class)
		j.Tenant = cmp.Or(t.Tenant, j.Tenant)
		if s, ok := t.Extra["req"]; ok {
			req, err := parseRequest(s)
			if err != nil {
				addErr("AdminComment req", s, err)
			} else {
				j.Request, j.req = s, &req
			}
		}
		if s, ok := t.Extra[slurm.TagSubmit]; ok {
			sec, err := strconv.ParseInt(s, 10, 64)
			switch {
			case err != nil || sec <= 0:
				addErr("AdminComment "+slurm.TagSubmit, s, errors.New("want seconds since 1970, > 0"))
			case tagSub.IsZero() || time.Unix(sec, 0).Before(tagSub):
				tagSub = time.Unix(sec, 0)
			}
		}
	}
	if j.req == nil && fallback != nil {
		j.Request, j.req = fallback.text, fallback
	}
	var gpuH, billingH, lostGPUs float64
	for i, r := range rows {
		run := Run{State: r.State, Start: timePtr(r.Start), End: timePtr(r.End), Nodes: r.Nodes, CPUs: r.CPUs, Billing: r.Billing}
		switch {
		case r.HasElapsed:
			run.ElapsedS = r.Elapsed.Seconds()
		case !r.Start.IsZero() && r.End.After(r.Start):
			run.ElapsedS = r.End.Sub(r.Start).Seconds()
		}
		switch {
		case r.HasGPUTRES:
			run.GPUs, run.GPUSource = r.GPUs, GPUsFromTRES
		case r.AllocTRES == "":
			run.GPUSource = GPUsNone
		case j.req != nil:
			run.GPUs, run.GPUSource = j.req.GPUsPerNode*max(r.Nodes, 1), GPUsFromRequest
			if r.Nodes == 0 {
				run.GPUs = j.req.gpus()
			}
		default:
			run.GPUSource = GPUsMissing
			j.GPUTRESMissing = true
		}
		if t := tags[i]; t != nil && t.Plan != "" {
			if _, err := model.ParsePlan(t.Plan); err != nil {
				addErr("AdminComment plan", t.Plan, err)
			} else {
				run.Plan = t.Plan
			}
		}
		gpuH += run.ElapsedS * float64(run.GPUs) / 3600
		billingH += run.ElapsedS * float64(run.Billing) / 3600
		j.Runs = append(j.Runs, run)
	}
	j.Plans = plansOf(j.Runs)
	j.BelowRequest = j.belowRequest()
	// Every row but the last ends in a reconfiguration or an interruption:
	// RESIZING rows are shrinks in place, NODE_FAIL and PREEMPTED rows
	// Slurm's requeues (interrupted), any other state a requeue (restart
	// elsewhere), rubick's unless owner, else the tags (rubicksRequeue),
	// say otherwise. An interruption costs as a requeue does, on its own.
	var intrGPUs float64
	for i := 0; i+1 < len(rows); i++ {
		next := j.Runs[i+1]
		oh := min(overhead.Seconds(), next.ElapsedS)
		lost := oh * float64(next.GPUs) / 3600
		if rows[i].State == "RESIZING" {
			j.Resizes++
			j.ReconfigLostS += oh
			lostGPUs += lost
			continue
		}
		rq := requeue{run: i, ohS: oh, nextGPUs: next.GPUs, interrupted: interrupted(rows[i].State)}
		switch {
		case rq.interrupted:
		case owner != nil:
			rq.interrupted = !owner(rows[i])
		default:
			mine, known := rubicksRequeue(tags[i], tags[i+1])
			rq.interrupted = known && !mine
		}
		// A next run that never started (cancelled while it waited to
		// start again) has its cancel time as Start: the time until then
		// was a wait that ended the job, not a restart's cost.
		if !rows[i].End.IsZero() && rows[i+1].Start.After(rows[i].End) && !neverStarted(rows[i+1], tres) {
			rq.gapS = rows[i+1].Start.Sub(rows[i].End).Seconds()
		}
		j.requeues = append(j.requeues, rq)
		if rq.interrupted {
			j.Interruptions++
			switch rows[i].State {
			case slurm.StateNodeFail:
				j.IntrNodeFail++
			case slurm.StatePreempted:
				j.IntrPreempted++
			default:
				j.IntrOther++
			}
			j.InterruptionLostS += rq.gapS + oh
			intrGPUs += lost
		} else {
			j.Requeues++
			j.ReconfigLostS += rq.gapS + oh
			lostGPUs += lost
		}
	}
	j.Reconfigurations = j.Requeues + j.Resizes
	if tres {
		j.GPUHours, j.BillingHours = floatPtr(gpuH), floatPtr(billingH)
		j.ReconfigLostGPUHours, j.InterruptionLostGPUHours = floatPtr(lostGPUs), floatPtr(intrGPUs)
		j.UsefulGPUHours = floatPtr(gpuH - lostGPUs - intrGPUs)
	}

	var submit, start time.Time
	var submitLine, startLine int
	for _, r := range rows {
		if !r.Submit.IsZero() && (submit.IsZero() || r.Submit.Before(submit)) {
			submit, submitLine = r.Submit, r.Line
		}
		if neverStarted(r, tres) {
			continue
		}
		if !r.Start.IsZero() && (start.IsZero() || r.Start.Before(start)) {
			start, startLine = r.Start, r.Line
		}
	}
	// Slurm moves a requeued job's Submit to the requeue; rubickd keeps the
	// first one in the tag. A sub= before every row's Submit means the rows
	// lack the job's first run (sacct's --starttime leaves out the runs
	// that ended before it): the job was submitted then, and its first
	// start is not among the rows.
	first := submit
	if !submit.IsZero() && !tagSub.IsZero() && tagSub.Before(submit) {
		first, start = tagSub.In(submit.Location()), time.Time{}
	}
	j.Submit, j.FirstStart = timePtr(first), timePtr(start)
	// A time before the job's submission is a malformed row (a clock
	// step, an edited database): its negative JCT or queueing delay would
	// skew the averages, so it is reported as a problem and left unknown.
	// The rows' own Submit is the bound: sub= is earlier, when used.
	beforeSubmit := func(field string, t time.Time, line int, metric string) {
		addErr(field, sacctTime(t), fmt.Errorf("line %d: before Submit=%q (line %d): the %s would be %v",
			line, sacctTime(submit), submitLine, metric, t.Sub(submit)))
	}
	if j.Finished && !last.End.IsZero() {
		j.End = timePtr(last.End)
		switch {
		case submit.IsZero():
		case last.End.Before(submit):
			beforeSubmit("End", last.End, last.Line, "JCT")
		default:
			j.JCTS = floatPtr(last.End.Sub(first).Seconds())
		}
	}
	if !submit.IsZero() && !start.IsZero() {
		if start.Before(submit) {
			beforeSubmit("Start", start, startLine, "queueing delay")
		} else {
			j.QueueS = floatPtr(start.Sub(submit).Seconds())
		}
	}
	j.rows = rows
	return j, errs
}

// belowRequest reports whether j is guaranteed and ran on fewer GPUs (per
// AllocTRES) than its request asked for.
func (j *Job) belowRequest() bool {
	if j.Class != slurm.ClassGuaranteed || j.req == nil {
		return false
	}
	return slices.ContainsFunc(j.Runs, func(run Run) bool {
		return run.GPUSource == GPUsFromTRES && run.ElapsedS > 0 && run.GPUs < j.req.gpus()
	})
}

// neverStarted reports whether run r never started: its AllocTRES is empty
// (tres says the input has that column). Slurm gives a job cancelled while
// it waited its cancel time as Start, with Elapsed 0.
func neverStarted(r Row, tres bool) bool { return tres && r.AllocTRES == "" }

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func floatPtr(v float64) *float64 { return &v }

// sacctTime writes t as sacct prints it, for error messages.
func sacctTime(t time.Time) string { return t.Format(timeLayouts[0]) }

// orZero is *v, or 0 for nil.
func orZero(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}

// jobIDCompare orders job ids by their numbers: the job's, then an array
// task's or a heterogeneous component's ("99_9" before "99_10" before
// "100"; "99" before its "99_1"); what is not such an id sorts after, by
// text.
func jobIDCompare(a, b string) int {
	na, oka := idNumbers(a)
	nb, okb := idNumbers(b)
	switch {
	case oka && okb:
		return slices.Compare(na, nb)
	case oka:
		return -1
	case okb:
		return 1
	}
	return strings.Compare(a, b)
}

// ArrayTasks is how many jobs the job id id stands for: the tasks of an
// array's record not split off yet, as sacct prints it ("12_[3-9]",
// "12_[0,4-8:2]", "12_[0-99%5]": the throttle after % is no task;
// slurm.ArrayTaskCount), one each; 1 for any other id, and for a record
// whose tasks do not read.
func ArrayTasks(id string) int {
	_, rest, ok := strings.Cut(id, "_[")
	spec, closed := strings.CutSuffix(rest, "]")
	if !ok || !closed {
		return 1
	}
	n, err := slurm.ArrayTaskCount(spec)
	if err != nil {
		return 1
	}
	return max(n, 1)
}

// idNumbers reads a job id ("12"), array task ("12_3", or a pending
// range "12_[3-9]", whose task sorts as -1) or heterogeneous component
// ("12+1") as its numbers.
func idNumbers(id string) ([]int64, bool) {
	job, rest, sep := strings.Cut(id, "_")
	if !sep {
		job, rest, sep = strings.Cut(id, "+")
	}
	n, err := strconv.ParseInt(job, 10, 64)
	if err != nil {
		return nil, false
	}
	if !sep {
		return []int64{n}, true
	}
	k, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		if !strings.HasPrefix(rest, "[") {
			return nil, false
		}
		k = -1
	}
	return []int64{n, k}, true
}
