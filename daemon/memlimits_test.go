package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/slurm"
)

// A job in a partition with MaxMemPerCPU is started with no more memory
// on a node than its CPUs there times MaxMemPerCPU: with more, Slurm would
// raise its CPUs past what the policy counted free on its nodes. rubick's
// default per GPU (policy.host_mem_per_gpu_gb) is cut to fit, never below
// the job's own --mem (64000 MB). Without the limit the same job starts
// with 16 GB per GPU on 4 CPUs per GPU, over 2 GB per CPU.
func TestCycleMaxMemPerCPU(t *testing.T) {
	for _, perCPU := range []int64{0, 2048} {
		j := heldJob(21, "bert", 1, 2)
		j.Cluster = "lab"
		limits := slurm.Limits{QOS: map[string]slurm.QOS{}, Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu", MaxMemPerCPUMB: perCPU}}}
		c := &limitsCluster{fakeCluster: &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{j}}, limits: limits}
		a := &fakeApplier{}
		d, _ := newTestDaemonWith(t, c, a, func(*Config) {})
		if _, err := d.Cycle(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		act := oneStart(t, a)
		allowed := int64(act.CPUsPerTask) * 2048
		switch {
		case act.MemPerNodeMB < j.MemPerNodeMB:
			t.Errorf("MaxMemPerCPU=%d: started with %d MB a node, below the job's --mem of %d MB", perCPU, act.MemPerNodeMB, j.MemPerNodeMB)
		case perCPU > 0 && act.MemPerNodeMB > allowed:
			t.Errorf("MaxMemPerCPU=%d: started with %d MB and %d CPUs a node, over %d MB", perCPU, act.MemPerNodeMB, act.CPUsPerTask, allowed)
		case perCPU == 0 && act.MemPerNodeMB <= allowed:
			t.Errorf("no MaxMemPerCPU: started with %d MB and %d CPUs a node; the test needs over 2048 MB per CPU", act.MemPerNodeMB, act.CPUsPerTask)
		}
	}
}

// A job that asked for no memory is checked against its group's memory
// room by what one GPU of it books as Slurm allocates it: under
// MaxMemPerCPU, rubick's default per GPU (16 GB, beside the model's 16 GB
// a node) cut to its 4 CPUs a GPU, never below the model's 16 GB. With
// 20000 MB left under GrpTRES=mem (another job holds 32000) it starts
// within them under 2048 MB per CPU; without the limit one GPU books
// 32768 MB and it waits, and so it does where 12000 MB are left. So with
// GrpTRESRunMins=mem and its 60-minute time limit (the other job holds
// 960,000 MB-minutes): 1,500,000 left are 25000 MB for its hour.
func TestCycleGroupMemRoomMaxMemPerCPU(t *testing.T) {
	for _, tc := range []struct {
		name    string
		perCPU  int64             // MaxMemPerCPU, MB
		grp     slurm.GroupLimits // the QOS's GrpTRES
		maxMem  int64             // the most memory (MB) it may start with
		ignored string
	}{
		{"2048 MB per CPU", 2048, slurm.GroupLimits{MemMB: 52000}, 20000, ""},
		{"no MaxMemPerCPU", 0, slurm.GroupLimits{MemMB: 52000}, 0,
			"waits for room in QOS shared GrpTRES: memory in use 32000 MB, allowed 52000 MB, and one GPU needs 32768 MB"},
		{"2048 MB per CPU, 12000 MB left", 2048, slurm.GroupLimits{MemMB: 44000}, 0,
			"waits for room in QOS shared GrpTRES: memory in use 32000 MB, allowed 44000 MB, and one GPU needs 16384 MB"},
		{"2048 MB per CPU, memory-minutes", 2048, slurm.GroupLimits{MemRunMins: 2460000}, 25000, ""},
		{"no MaxMemPerCPU, memory-minutes", 0, slurm.GroupLimits{MemRunMins: 2460000}, 0,
			"waits for room in QOS shared GrpTRESRunMins: MB-minutes of memory to run in use 960000, allowed 2460000, and one GPU's 32768 MB for its 60-minute time limit takes 1966080"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := labNodes(2)
			other := slurm.Job{ID: 9, Name: "other", Account: "root", Partition: "gpu", QOS: "shared", Cluster: "lab",
				State: slurm.StateRunning, NodeCount: 1, NodeList: []string{"node2"}, GPUsPerNode: 2, GPUs: 2, CPUs: 8, MemMB: 32000,
				TimeLimit: time.Hour, StartTime: t0.Add(-30 * time.Minute)}
			nodes[1].GPUsUsed, nodes[1].CPUsAlloc = 2, 8
			j := heldJob(21, "bert", 1, 2)
			j.Cluster, j.QOS, j.TimeLimit, j.MemPerNodeMB = "lab", "shared", time.Hour, 0
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Grp: tc.grp}},
				Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu", MaxMemPerCPUMB: tc.perCPU}}}
			c := &limitsCluster{fakeCluster: &fakeCluster{nodes: nodes, jobs: []slurm.Job{j, other}}, limits: limits}
			a := &fakeApplier{}
			d, _ := newTestDaemonWith(t, c, a, func(*Config) {})
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.ignored, rep.Ignored[21]); d != "" {
				t.Errorf("ignored (-want +got):\n%s", d)
			}
			if tc.ignored != "" {
				if len(a.got) != 0 {
					t.Errorf("actions %+v, want none", a.got)
				}
				return
			}
			got := oneStart(t, a)
			if mem := got.MemMB(j); mem > tc.maxMem || mem <= 0 {
				t.Errorf("started with %d MB, want %d at most", mem, tc.maxMem)
			}
		})
	}
}
