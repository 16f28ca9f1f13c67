package report

import (
	"encoding/json"
	"slices"

	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// DecodeReason reads a stored reason as the policy.Action rubickd records;
// false for any other JSON (another writer's free-form reason), which a
// decision without a kind is too. explain, queue and the report read
// reasons with it, so they never disagree on whether a job has a decision.
func DecodeReason(raw json.RawMessage) (policy.Action, bool) {
	var a policy.Action
	if err := json.Unmarshal(raw, &a); err != nil || a.Kind == "" {
		return policy.Action{}, false
	}
	return a, true
}

// RanPlan is the plan the job's current run trains on when it is not the
// one rubickd applied last (applied, on appliedRes: AppliedPlan), and what
// it holds: those of its newest decision (reasons, newest first), a keep
// later than every action of hist (oldest first) on another plan. rubickd
// keeps a running job at the plan its rubick-srun reports, which is
// another when rubickd started the job without one (another job of its
// type profiled it) or when rubick-srun stopped waiting for the plan
// rubickd set after its profiling phase: it trains on its launch line as
// it is. false when the run trains on applied, as far as the store says.
func RanPlan(applied model.Plan, appliedRes model.Resources, reasons []store.Reason, hist []store.Action) (model.Plan, model.Resources, bool) {
	if len(reasons) == 0 || len(hist) > 0 && !reasons[0].At.After(hist[len(hist)-1].DecidedAt) {
		return model.Plan{}, model.Resources{}, false
	}
	a, ok := DecodeReason(reasons[0].Reason)
	if !ok || a.Kind != policy.Keep || a.Plan == (model.Plan{}) || a.Plan == applied {
		return model.Plan{}, model.Resources{}, false
	}
	if applied != (model.Plan{}) {
		return a.Plan, appliedRes, true
	}
	res := model.Resources{Placement: a.Placement()}
	for _, n := range a.Alloc {
		res.CPUs += n.CPUs
		res.HostMemGB += n.MemGB
	}
	return a.Plan, res, true
}

// AppliedPlan is the plan rubickd last applied to the job's current run,
// and its resources: that of the newest action of hist (oldest first) with
// result ok that records one (ranWith), unless a preemption or a start or
// release without a plan followed it (the run since has none of rubickd's,
// or was started by an action not confirmed yet). Zero for none.
func AppliedPlan(hist []store.Action) (model.Plan, model.Resources) {
	if i := appliedAction(hist); i >= 0 {
		return hist[i].Plan, hist[i].Resources
	}
	return model.Plan{}, model.Resources{}
}

// appliedAction is the index in hist of the action whose plan AppliedPlan
// gives, -1 for none.
func appliedAction(hist []store.Action) int {
	for i, a := range slices.Backward(hist) {
		switch {
		case a.Result != store.ResultOK:
		case ranWith(a):
			return i
		case a.Kind == string(slurm.ActionPreempt), a.Kind == string(slurm.ActionStart), a.Kind == string(slurm.ActionRelease):
			return -1
		}
	}
	return -1
}
