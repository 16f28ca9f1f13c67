package daemon

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/slurm"
)

// A group limit set to 0 (sacctmgr modify account physics set GrpJobs=0,
// or GrpTRES=gres/gpu=0), or a per-job one that Slurm applies
// (MaxTRESPerJob=gres/gpu=0), stops every job it applies to in Slurm: rubickd
// keeps such a job held and says why, rather than read the 0 as no limit
// and release the job sized for GPUs Slurm never lets it have.
func TestCycleHoldsJobUnderZeroLimit(t *testing.T) {
	type result struct {
		Started bool
		Ignored string
	}
	tests := map[string]struct {
		qos   slurm.QOS
		assoc []slurm.Association
		// budget is QOS normal's as slurmctld lists it (scontrol show
		// assoc_mgr), for the cycle's budgets reading.
		budget *slurm.Budget
		want   result
	}{
		"none": {want: result{Started: true}},
		"QOS GrpJobs=0": {qos: slurm.QOS{Zero: []slurm.ZeroLimit{{Name: "GrpJobs=0"}}},
			want: result{Ignored: "waits for QOS normal GrpJobs=0 to be raised: Slurm starts no job it applies to"}},
		"account GrpTRES=gres/gpu=0": {assoc: []slurm.Association{{Cluster: "lab", Account: "physics", Zero: []slurm.ZeroLimit{{Name: "GrpTRES=gres/gpu=0"}}}},
			want: result{Ignored: "waits for association physics GrpTRES=gres/gpu=0 to be raised: Slurm starts no job it applies to"}},
		// A limit on a type the job does not ask for holds it to nothing.
		"other type": {qos: slurm.QOS{Zero: []slurm.ZeroLimit{{Name: "GrpTRES=gres/gpu:h100=0", GPUType: "h100"}}}, want: result{Started: true}},
		"QOS MaxTRESPerJob=gres/gpu=0": {qos: slurm.QOS{Zero: []slurm.ZeroLimit{{Name: "MaxTRESPerJob=gres/gpu=0", PerJob: slurm.JobLimits{GPUs: 1}}}},
			want: result{Ignored: "waits for QOS normal MaxTRESPerJob=gres/gpu=0 to be raised: Slurm starts no job it applies to"}},
		// The QOS's bound applies in Slurm, not the association's 0.
		"account MaxTRESPerJob=gres/gpu=0 behind the QOS's": {qos: slurm.QOS{PerJob: slurm.JobLimits{GPUs: 4}},
			assoc: []slurm.Association{{Cluster: "lab", Account: "physics", Zero: []slurm.ZeroLimit{{Name: "MaxTRESPerJob=gres/gpu=0", PerJob: slurm.JobLimits{GPUs: 1}}}}},
			want:  result{Started: true}},
		// slurmdbd does not list a QOS's GrpTRESMins; slurmctld does.
		"QOS GrpTRESMins=gres/gpu=0": {budget: &slurm.Budget{Spent: slurm.GroupLimits{GPURunMins: 30}, Zero: []slurm.ZeroLimit{{Name: "GrpTRESMins=gres/gpu=0"}}},
			want: result{Ignored: "waits for QOS normal GrpTRESMins=gres/gpu=0 to be raised: Slurm starts no job it applies to"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := heldJob(21, "bert", 1, 2)
			j.Cluster, j.QOS, j.Account, j.User = "lab", "normal", "physics", "bob"
			q := tc.qos
			q.Name = "normal"
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"normal": q}, Associations: tc.assoc,
				Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu"}}}
			c := &limitsCluster{fakeCluster: &fakeCluster{nodes: labNodes(4), jobs: []slurm.Job{j}}, limits: limits}
			a := &fakeApplier{}
			d, _ := newTestDaemonWith(t, c, a, func(*Config) {})
			if tc.budget != nil {
				d.deps.Budgets = &fakeBudgets{b: slurm.Budgets{QOS: map[string]slurm.Budget{"normal": *tc.budget}}}
			}
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			var got result
			for _, act := range a.got {
				if act.JobID == 21 && act.Kind == slurm.ActionStart {
					got.Started = true
				}
			}
			got.Ignored = rep.Ignored[21]
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
