package daemon

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// groupVerdicts are the IDs of the actions SlurmActions kept, in order,
// and why it deferred each other for a group limit (the text after
// ErrGroupLimit); any other error fails the test.
func groupVerdicts(t *testing.T, actions []slurm.Action, skipped map[int]error) (kept []int, why map[int]string) {
	t.Helper()
	for _, a := range actions {
		kept = append(kept, a.JobID)
	}
	why = map[int]string{}
	for id, err := range skipped {
		if !errors.Is(err, ErrGroupLimit) {
			t.Errorf("job %d skipped for %v, want ErrGroupLimit", id, err)
		}
		_, why[id], _ = strings.Cut(err.Error(), ErrGroupLimit.Error()+": ")
	}
	return kept, why
}

// snapshotJob is job id as v's snapshot plans it; the zero Job where v
// does not plan it.
func snapshotJob(v *View, id string) policy.Job {
	for _, pj := range v.Snapshot.Jobs {
		if pj.ID == id {
			return pj
		}
	}
	return policy.Job{}
}

// A shrink (a restart on fewer of the GPUs a job holds) that made room only
// for a start then deferred for a group limit is dropped like such a
// preemption: the job keeps running on its 8 GPUs. A restart that moves
// the job, or whose room a kept start takes, stays.
func TestSlurmActionsDropIdleShrink(t *testing.T) {
	running := runningJob(5, "bert")
	running.NodeList, running.GPUs, running.Tag.Plan = []string{"node1"}, 8, "dp8.tp1.pp1.mb4.a1.z0"
	running.MemMB, running.Cluster, running.QOS = 32768, "lab", "other"
	jobs := []slurm.Job{running, heldJob(6, "bert", 1, 4), heldJob(7, "bert", 1, 4), heldJob(8, "bert", 1, 4)}
	for i := 1; i < len(jobs); i++ {
		jobs[i].Cluster, jobs[i].QOS, jobs[i].MemPerNodeMB, jobs[i].TimeLimit = "lab", "shared", 32768, time.Hour
	}
	nodes := labNodes(3)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 8, 8
	on := func(kind policy.Kind, id, node string) policy.Action {
		return policy.Action{Kind: kind, JobID: id, Alloc: []policy.NodeAlloc{{Node: node, GPUs: 4, CPUs: 8, MemGB: 32}},
			Plan: model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}}
	}
	tests := map[string]struct {
		restartOn string // where job 5 restarts on 4 GPUs
		limit     int64  // QOS shared's GrpTRES mem
		kept      []int
		why       map[int]string
	}{
		"shrink for the deferred start": {"node1", 65536, []int{6, 7},
			map[int]string{5: "made room only for a deferred start: its restart on fewer GPUs was for a start deferred for a group limit; it keeps running as it is",
				8: "QOS shared GrpTRES allows 65536 MB of memory, 65536 in use or planned before it, and its plan adds 32768"}},
		"room for all": {"node1", 98304, []int{5, 6, 7, 8}, map[int]string{}},
		"a move": {"node2", 65536, []int{5, 6, 7},
			map[int]string{8: "QOS shared GrpTRES allows 65536 MB of memory, 65536 in use or planned before it, and its plan adds 32768"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Grp: slurm.GroupLimits{MemMB: tc.limit}}}}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: jobs, Estimators: shippedEstimators(t), Limits: limits},
				slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			plan := policy.Plan{Actions: []policy.Action{on(policy.Restart, "5", tc.restartOn), on(policy.Start, "6", "node2"),
				on(policy.Start, "7", "node3"), on(policy.Start, "8", "node1")}}
			actions, skipped := v.SlurmActions(plan, t0)
			kept, why := groupVerdicts(t, actions, skipped)
			if d := cmp.Diff(tc.kept, kept); d != "" {
				t.Errorf("kept (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.why, why); d != "" {
				t.Errorf("deferred (-want +got):\n%s", d)
			}
			if err := skipped[5]; (err != nil) != errors.Is(err, ErrServedDeferred) {
				t.Errorf("job 5: %v, want ErrServedDeferred where it is dropped", err)
			}
		})
	}
}

// A deferred action becomes a keep of the job as it is, in its place in
// the orders: a running job's keep carries its allocation and plan (rubick
// queue shows it running, not queued), a queued job's none.
func TestDeferredKeep(t *testing.T) {
	running := runningJob(5, "bert")
	running.NodeList = []string{"node1"}
	nodes := labNodes(2)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
	v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: []slurm.Job{running, heldJob(6, "bert", 1, 4)},
		Estimators: shippedEstimators(t)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	order := &policy.Order{Position: 2, Of: 3, By: "slope"}
	shrink := policy.Action{Kind: policy.Restart, JobID: "5", Order: order,
		Alloc: []policy.NodeAlloc{{Node: "node1", GPUs: 2, CPUs: 4, MemGB: 32}}, Plan: model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1}}
	start := policy.Action{Kind: policy.Start, JobID: "6", Order: order,
		Alloc: []policy.NodeAlloc{{Node: "node2", GPUs: 4, CPUs: 8, MemGB: 32}}, Plan: model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}}
	pj := snapshotJob(v, "5")
	if len(pj.Alloc) == 0 || pj.Plan.DP == 0 {
		t.Fatalf("job 5 in the snapshot: %+v, want it running", pj)
	}
	for _, tc := range []struct {
		a    policy.Action
		want policy.Action
	}{
		{shrink, policy.Action{Kind: policy.Keep, JobID: "5", Alloc: pj.Alloc, Plan: pj.Plan, Reason: policy.ReasonGroup, Detail: "why", Order: order}},
		{start, policy.Action{Kind: policy.Keep, JobID: "6", Reason: policy.ReasonGroup, Detail: "why", Order: order}},
	} {
		if d := cmp.Diff(tc.want, deferredKeep(v, tc.a, policy.ReasonGroup, "why")); d != "" {
			t.Errorf("job %s (-want +got):\n%s", tc.a.JobID, d)
		}
	}
}
