package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/rubick-sched/rubick/slurm"
)

// A QOS's MinTRESPerJob, and a partition's MinNodes, are a floor under
// what rubickd gives a job: it is
// never started below it (Slurm would hold it, root's resize included:
// QOSMinGRES on the 22.05 lab), `rubick explain` names the limit, and a job
// that can meet a typed minimum at no size is left to Slurm. The row
// without a minimum shows the job started on one node with 8 GPUs, below
// the minimums of the others.
func TestCycleKeepsToQOSMinimum(t *testing.T) {
	tests := map[string]struct {
		min     slurm.JobMins
		partMin int    // the partition's MinNodes
		start   bool   // rubickd starts it with its plan
		nodes   int    // at least, when started
		gpus    int    // at least, when started
		cpus    int    // at least, when started
		memMB   int64  // at least, when started
		says    string // in its stored reason
		ignored string
	}{
		"none":      {start: true, nodes: 1, gpus: 1},
		"nodes":     {min: slurm.JobMins{Nodes: 2}, start: true, nodes: 2, gpus: 2, says: "at least 2 nodes: QOS normal MinTRESPerJob"},
		"gpus":      {min: slurm.JobMins{GPUs: 12}, start: true, nodes: 2, gpus: 12},
		"partition": {partMin: 2, start: true, nodes: 2, gpus: 2, says: "at least 2 nodes: partition gpu MinNodes"},
		// 4 CPUs per GPU, as it asked: 12 GPUs.
		"cpus": {min: slurm.JobMins{CPUs: 48}, start: true, nodes: 2, gpus: 12, cpus: 48},
		// 16 GB per GPU and 16 per node: a node books 144 GB at most, and
		// 22 GPUs packed book 400 on 3 nodes, past the 2 its request
		// would let it span (MaxSpread).
		"memory":   {min: slurm.JobMins{MemMB: 400000}, start: true, nodes: 3, gpus: 22, memMB: 400000},
		"too many": {min: slurm.JobMins{GPUs: 40}, says: "needs at least 40 GPUs, above the 32 GPUs it may have: QOS normal MinTRESPerJob"},
		"other type": {min: slurm.JobMins{Typed: map[string]int{"h100": 4}},
			ignored: "Slurm holds it at any size for QOS normal MinTRESPerJob=gres/gpu:h100=4, and it asks for no h100 GPUs alone"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := heldJob(21, "bert", 1, 2)
			j.Cluster, j.QOS, j.Account, j.User = "lab", "normal", "root", "bob"
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"normal": {Name: "normal", Min: tc.min}},
				Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu", MinNodesPerJob: tc.partMin}}}
			c := &limitsCluster{fakeCluster: &fakeCluster{nodes: labNodes(4), jobs: []slurm.Job{j}}, limits: limits}
			a := &fakeApplier{}
			d, st := newTestDaemonWith(t, c, a, func(*Config) {})
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			var got *slurm.Action
			for i := range a.got {
				if a.got[i].JobID == 21 && a.got[i].Kind == slurm.ActionStart {
					got = &a.got[i]
				}
			}
			planned := got != nil && got.Tag != nil && got.Tag.Plan != ""
			switch {
			case planned != tc.start:
				t.Fatalf("actions %+v: started with a plan %v, want %v", a.got, planned, tc.start)
			case tc.start && (got.NumNodes < tc.nodes || got.NumNodes*got.GPUsPerNode < tc.gpus || got.NumNodes*got.CPUsPerTask < tc.cpus ||
				got.MemMB(j) < tc.memMB):
				t.Errorf("started on %d nodes with %d GPUs, %d CPUs and %d MB each, want at least %d nodes, %d GPUs, %d CPUs, %d MB",
					got.NumNodes, got.GPUsPerNode, got.CPUsPerTask, got.MemPerNodeMB, tc.nodes, tc.gpus, tc.cpus, tc.memMB)
			case name == "none" && (got.NumNodes > 1 || got.GPUsPerNode*got.NumNodes > 8 || got.CPUsPerTask*got.NumNodes >= 48 || got.MemMB(j) >= 400000):
				t.Errorf("without a minimum started on %d nodes with %d GPUs, %d CPUs and %d MB each; the test needs one node, below every minimum",
					got.NumNodes, got.GPUsPerNode, got.CPUsPerTask, got.MemPerNodeMB)
			}
			if why := rep.Ignored[21]; why != tc.ignored {
				t.Errorf("ignored: %q, want %q", why, tc.ignored)
			}
			if tc.ignored != "" && (got == nil || got.NumNodes != 1 || got.GPUsPerNode != 2) {
				t.Errorf("left to Slurm: %+v, want released on its request of 2 GPUs", got)
			}
			if tc.says != "" {
				rs, err := st.Reasons(context.Background(), 21, 1)
				if err != nil || len(rs) != 1 || !strings.Contains(string(rs[0].Reason), tc.says) {
					t.Errorf("stored reasons %d (%v), want one saying %q", len(rs), err, tc.says)
					for _, r := range rs {
						t.Logf("reason: %s", r.Reason)
					}
				}
			}
		})
	}
}
