package daemon

import (
	"context"
	"testing"

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
