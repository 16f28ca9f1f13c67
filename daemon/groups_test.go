package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/slurm"
)

// A cycle reports what the running jobs hold against each group limit,
// every job in Slurm counted, beside what the limit allows.
func TestCycleReportsGroupUse(t *testing.T) {
	nodes := labNodes(2)
	other := slurm.Job{ID: 9, Name: "other", Account: "root", Partition: "gpu", QOS: "shared", Cluster: "lab", User: "alice",
		State: slurm.StateRunning, NodeCount: 1, NodeList: []string{"node2"}, GPUsPerNode: 2, GPUs: 2, CPUs: 8, MemMB: 32000, Billing: 8,
		TimeLimit: time.Hour, StartTime: t0.Add(-30 * time.Minute)}
	nodes[1].GPUsUsed, nodes[1].CPUsAlloc = 2, 8
	limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared",
		Grp:     slurm.GroupLimits{GPUs: 4, Billing: 40, GPURunMins: 600},
		PerUser: slurm.GroupLimits{CPUs: 16}}}}
	c := &limitsCluster{fakeCluster: &fakeCluster{nodes: nodes, jobs: []slurm.Job{other}}, limits: limits}
	d, _ := newTestDaemonWith(t, c, &fakeApplier{}, func(*Config) {})
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	// 30 minutes left of its hour: 60 GPU-, 240 CPU- and 240 billing-minutes.
	held := TRESAmounts{GPUs: 2, CPUs: 8, MemMB: 32000, Billing: 8, GPURunMins: 60, CPURunMins: 240, BillingRunMins: 240}
	want := []GroupUse{
		{Limit: "QOS shared GrpTRES", RunMins: "QOS shared GrpTRESRunMins", InUse: held, Allowed: TRESAmounts{GPUs: 4, Billing: 40, GPURunMins: 600}},
		{Limit: "QOS shared MaxTRESPerUser (user alice)", RunMins: "QOS shared MaxTRESRunMinsPU (user alice)", InUse: held,
			Allowed: TRESAmounts{CPUs: 16}},
	}
	if d := cmp.Diff(want, rep.Groups); d != "" {
		t.Errorf("groups (-want +got):\n%s", d)
	}
}
