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
	// names its run-minute part ("QOS normal GrpTRESRunMins").
	Limit   string      `json:"limit"`
	RunMins string      `json:"run_mins"`
	InUse   TRESAmounts `json:"in_use"`
	Allowed TRESAmounts `json:"allowed"`
	// Spent is, for a budget (GrpTRESMins; RunMins is its name), the
	// minutes its jobs have used, which InUse counts beside those its
	// running jobs may still use; nil for other limits.
	Spent *TRESAmounts `json:"spent,omitempty"`
}

// TRESAmounts are GPUs, CPUs, memory and billing, and the GPU-, CPU- and
// billing-minutes to run: slurm.GroupLimits with JSON names, converted to
// and from it (so a field added there must be added here).
type TRESAmounts struct {
	GPUs           int   `json:"gpus"`
	CPUs           int   `json:"cpus"`
	MemMB          int64 `json:"mem_mb"`
	GPURunMins     int64 `json:"gpu_run_mins"`
	CPURunMins     int64 `json:"cpu_run_mins"`
	Billing        int64 `json:"billing"`
	BillingRunMins int64 `json:"billing_run_mins"`
}

// Amounts lists a's amounts as slurm.GroupLimits.Amounts does.
func (a TRESAmounts) Amounts() [7]slurm.GroupAmount { return slurm.GroupLimits(a).Amounts() }

// GroupUse lists the group limits running jobs count against, by name.
func (v *View) GroupUse() []GroupUse {
	out := make([]GroupUse, 0, len(v.usage))
	for g, u := range v.usage {
		gu := GroupUse{Limit: g.Limit, RunMins: g.RunMinsName(), InUse: TRESAmounts(u), Allowed: TRESAmounts(g.GroupLimits)}
		if g.Budget {
			spent := TRESAmounts(g.Spent)
			gu.Spent = &spent
		}
		out = append(out, gu)
	}
	slices.SortFunc(out, func(a, b GroupUse) int { return strings.Compare(a.Limit, b.Limit) })
	return out
}
