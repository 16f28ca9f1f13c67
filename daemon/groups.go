package daemon

import (
	"slices"
	"strings"

	"github.com/rubick-sched/rubick/slurm"
)

// GroupUse is what the running jobs hold against one group limit, beside
// what it allows (0: no bound), for rubick status.
type GroupUse struct {
	// Limit names it as an admin sets it ("QOS normal GrpTRES"); RunMins
	// names its run-minute part ("QOS normal GrpTRESRunMins"), Jobs its
	// running jobs' ("QOS normal GrpJobs").
	Limit   string      `json:"limit"`
	RunMins string      `json:"run_mins"`
	Jobs    string      `json:"jobs_limit,omitempty"`
	InUse   TRESAmounts `json:"in_use"`
	Allowed TRESAmounts `json:"allowed"`
	// Spent is, for a budget (GrpTRESMins; RunMins is its name), the
	// minutes its jobs have used, which InUse counts beside those its
	// running jobs may still use; nil for other limits.
	Spent *TRESAmounts `json:"spent,omitempty"`
}

// TRESAmounts are GPUs, CPUs, memory, billing and nodes, and the GPU-, CPU-,
// billing-, memory- and node-minutes to run: slurm.GroupLimits with JSON names, converted to
// and from it (so a field added there must be added here).
type TRESAmounts struct {
	GPUs           int   `json:"gpus"`
	CPUs           int   `json:"cpus"`
	MemMB          int64 `json:"mem_mb"`
	GPURunMins     int64 `json:"gpu_run_mins"`
	CPURunMins     int64 `json:"cpu_run_mins"`
	Billing        int64 `json:"billing"`
	BillingRunMins int64 `json:"billing_run_mins"`
	MemRunMins     int64 `json:"mem_run_mins"`
	NodeRunMins    int64 `json:"node_run_mins"`
	Nodes          int   `json:"nodes"`
	Jobs           int   `json:"jobs"`
}

// Amounts lists a's amounts as slurm.GroupLimits.Amounts does.
func (a TRESAmounts) Amounts() [11]slurm.GroupAmount { return slurm.GroupLimits(a).Amounts() }

// GroupBound is one amount a group limit bounds, with what is held of it.
type GroupBound struct {
	// Limit names the limit that sets it: GroupUse.Limit, or RunMins for
	// the run-minute amounts.
	Limit   string
	What    string // the unit, as slurm.GroupAmount says it
	RunMins bool
	Allowed int64
	InUse   int64
	// Spent is what a budget's jobs used of it (counted in InUse); 0 for
	// other limits.
	Spent int64
}

// Bounds lists the amounts g bounds (those it allows more than 0 of), in
// slurm.GroupLimits.Amounts' order: what rubick status and the metrics
// show of it.
func (g GroupUse) Bounds() []GroupBound {
	var out []GroupBound
	used := g.InUse.Amounts()
	var spent [11]slurm.GroupAmount
	if g.Spent != nil {
		spent = g.Spent.Amounts()
	}
	for i, a := range g.Allowed.Amounts() {
		if a.Value <= 0 {
			continue
		}
		b := GroupBound{Limit: g.Limit, What: a.What, RunMins: a.RunMins, Allowed: a.Value, InUse: used[i].Value, Spent: spent[i].Value}
		switch {
		case a.RunMins:
			b.Limit = g.RunMins
		case a.Jobs:
			b.Limit = g.Jobs
		}
		out = append(out, b)
	}
	return out
}

// GroupUse lists the group limits running jobs count against, by name.
func (v *View) GroupUse() []GroupUse {
	out := make([]GroupUse, 0, len(v.usage))
	for g, u := range v.usage {
		gu := GroupUse{Limit: g.Limit, RunMins: g.RunMinsName(), InUse: TRESAmounts(u), Allowed: TRESAmounts(g.GroupLimits)}
		if g.Jobs > 0 {
			gu.Jobs = g.JobsName()
		}
		if g.Budget {
			spent := TRESAmounts(g.Spent)
			gu.Spent = &spent
		}
		out = append(out, gu)
	}
	slices.SortFunc(out, func(a, b GroupUse) int { return strings.Compare(a.Limit, b.Limit) })
	return out
}
