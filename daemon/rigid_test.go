package daemon

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

func rigidJob(id int, nodes, gpus int, prio int64, submitted time.Duration) slurm.Job {
	return slurm.Job{ID: id, Partition: "gpu", State: slurm.StatePending, Reason: "Resources", Priority: prio,
		NodeCount: nodes, GPUsPerNode: gpus, CPUs: 16 * nodes, MemPerNodeMB: 64 * 1024, SubmitTime: t0.Add(submitted)}
}

func TestReserveRigid(t *testing.T) {
	// Two 8-GPU nodes; rubick's jobs hold 6 GPUs, 12 CPUs and 100 GB of
	// node1, so 2 GPUs there are free.
	pnodes := func() []policy.Node {
		return []policy.Node{{Name: "node1", GPUs: 8, CPUs: 64, MemGB: 500}, {Name: "node2", GPUs: 8, CPUs: 64, MemGB: 500}}
	}
	usage := map[string]policy.NodeAlloc{"node1": {GPUs: 6, CPUs: 12, MemGB: 100}}
	held := rigidJob(1, 1, 8, 100, 0)
	held.Held = true
	dep := rigidJob(2, 1, 8, 100, 0)
	dep.Reason = "Dependency"
	tagged := rigidJob(3, 1, 8, 100, 0)
	tagged.Tag = &slurm.Tag{ModelType: "bert"}
	huge := rigidJob(4, 1, 16, 100, 0) // no node has 16 GPUs
	other := rigidJob(5, 1, 8, 100, 0)
	other.Partition = "cpu"
	// --mem-per-gpu=16G on 4 GPUs: 64 GB. 22.05 reports a default per-CPU
	// memory beside it, 24.11 the per-GPU value as per-node memory.
	perGPU2205, perGPU2411 := rigidJob(13, 1, 4, 1, 0), rigidJob(13, 1, 4, 1, 0)
	perGPU2205.MemPerNodeMB, perGPU2205.MemPerCPUMB, perGPU2205.MemPerGPUMB = 0, 1000, 16*1024
	perGPU2411.MemPerNodeMB, perGPU2411.MemPerGPUMB = 16*1024, 16*1024
	for name, tc := range map[string]struct {
		jobs      []slurm.Job
		want      *Reservation
		wantNodes []policy.Node
	}{
		"none waiting": {jobs: nil, wantNodes: pnodes()},
		"one node, the freest": {jobs: []slurm.Job{rigidJob(7, 1, 8, 1, 0)},
			want:      &Reservation{JobID: 7, Nodes: []string{"node2"}, GPUs: 8},
			wantNodes: []policy.Node{{Name: "node1", GPUs: 8, CPUs: 64, MemGB: 500}, {Name: "node2", GPUs: 0, CPUs: 48, MemGB: 436}}},
		// Two nodes: node1 gives what is free (2 GPUs), never rubick's 6.
		"two nodes, never below rubick's usage": {jobs: []slurm.Job{rigidJob(8, 2, 8, 1, 0)},
			want:      &Reservation{JobID: 8, Nodes: []string{"node1", "node2"}, GPUs: 10},
			wantNodes: []policy.Node{{Name: "node1", GPUs: 6, CPUs: 48, MemGB: 436}, {Name: "node2", GPUs: 0, CPUs: 48, MemGB: 436}}},
		"highest priority, then oldest": {jobs: []slurm.Job{rigidJob(9, 1, 4, 1, 0), rigidJob(10, 1, 2, 5, time.Hour), rigidJob(11, 1, 1, 5, time.Minute)},
			want:      &Reservation{JobID: 11, Nodes: []string{"node2"}, GPUs: 1},
			wantNodes: []policy.Node{{Name: "node1", GPUs: 8, CPUs: 64, MemGB: 500}, {Name: "node2", GPUs: 7, CPUs: 48, MemGB: 436}}},
		"--mem-per-gpu, as 22.05 reports it": {jobs: []slurm.Job{perGPU2205},
			want:      &Reservation{JobID: 13, Nodes: []string{"node2"}, GPUs: 4},
			wantNodes: []policy.Node{{Name: "node1", GPUs: 8, CPUs: 64, MemGB: 500}, {Name: "node2", GPUs: 4, CPUs: 48, MemGB: 436}}},
		"--mem-per-gpu, as 24.11 reports it": {jobs: []slurm.Job{perGPU2411},
			want:      &Reservation{JobID: 13, Nodes: []string{"node2"}, GPUs: 4},
			wantNodes: []policy.Node{{Name: "node1", GPUs: 8, CPUs: 64, MemGB: 500}, {Name: "node2", GPUs: 4, CPUs: 48, MemGB: 436}}},
		"held, waiting on something else, tagged, impossible or elsewhere: skipped": {
			jobs:      []slurm.Job{held, dep, tagged, huge, other, rigidJob(12, 1, 2, 1, time.Hour)},
			want:      &Reservation{JobID: 12, Nodes: []string{"node2"}, GPUs: 2},
			wantNodes: []policy.Node{{Name: "node1", GPUs: 8, CPUs: 64, MemGB: 500}, {Name: "node2", GPUs: 6, CPUs: 48, MemGB: 436}}},
	} {
		t.Run(name, func(t *testing.T) {
			pn := pnodes()
			got := reserveRigid(Defaults(), tc.jobs, labNodes(2), pn, usage)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("reservation (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantNodes, pn); d != "" {
				t.Errorf("capacity left to the policy (-want +got):\n%s", d)
			}
		})
	}
}

// With rigid_jobs: schedule the snapshot holds back what the first
// pending rigid job needs; with ignore it does not.
func TestBuildViewRigidJobs(t *testing.T) {
	none := func(string) (policy.Estimator, bool) { return nil, false }
	jobs := []slurm.Job{rigidJob(7, 1, 8, 1, 0)}
	for mode, wantGPUs := range map[string]int{RigidSchedule: 8, RigidIgnore: 16} {
		cfg := Defaults()
		cfg.RigidJobs = mode
		v, err := BuildView(cfg, t0, Inputs{Nodes: labNodes(2), Jobs: jobs, Estimators: none}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, n := range v.Snapshot.Nodes {
			got += n.GPUs
		}
		if got != wantGPUs || (v.Reserved != nil) != (mode == RigidSchedule) {
			t.Errorf("%s: %d GPUs left to the policy, reservation %+v; want %d", mode, got, v.Reserved, wantGPUs)
		}
	}
}

// A cycle reports the reservation and exports the held GPUs.
func TestCycleReportsRigidReservation(t *testing.T) {
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{rigidJob(7, 1, 8, 1, 0)}}
	d, _ := newTestDaemon(t, c, &fakeApplier{})
	rep, err := d.Cycle(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Reserved == nil || rep.Reserved.JobID != 7 || rep.Reserved.GPUs != 8 {
		t.Errorf("reserved = %+v, want 8 GPUs for job 7", rep.Reserved)
	}
	if got := gauge(t, d, "rubick_rigid_reserved_gpus"); got != 8 {
		t.Errorf("rubick_rigid_reserved_gpus = %v, want 8", got)
	}
}

// A rigid job is released on its own request, memory per node included: a
// pending multi-node --mem-per-cpu job has no node list yet, and its memory
// is shared over the nodes it asks for, not asked of each; a --mem-per-gpu
// job's memory is per GPU. A --nodelist shorter than the node count comes
// back as it was.
func TestRigidActionsOwnRequest(t *testing.T) {
	perCPU := heldJob(7, "bert", 2, 4)
	perCPU.CPUs, perCPU.MemPerNodeMB, perCPU.MemPerCPUMB = 16, 0, 4000
	perNode := heldJob(8, "bert", 2, 4)
	resized := heldJob(9, "bert", 1, 8)
	resized.Tag.Generation, resized.Tag.Extra = 1, map[string]string{tagReq: "n2.g2.c8.m16000"}
	// -w node3 -N2: node3 and another.
	listed := heldJob(10, "bert", 2, 4)
	listed.Tag.Generation, listed.Tag.Extra = 1, map[string]string{tagNodes: "node3"}
	// --mem-per-gpu=16G: 22.05 reports a default per-CPU memory beside it.
	perGPU := heldJob(11, "bert", 1, 2)
	perGPU.MemPerNodeMB, perGPU.MemPerCPUMB, perGPU.MemPerGPUMB = 0, 4000, 16384
	v := &View{Rigid: []slurm.Job{perCPU, perNode, resized, listed, perGPU}}
	var got []slurm.Action
	for _, a := range v.RigidActions(t0, func(string) (model.Spec, bool) { return model.Spec{}, false }, nil) {
		a.Tag = nil
		got = append(got, a)
	}
	want := []slurm.Action{
		{Kind: slurm.ActionStart, JobID: 7, NumNodes: 2, GPUsPerNode: 4, CPUsPerTask: 8, MemPerNodeMB: 32000},
		{Kind: slurm.ActionStart, JobID: 8, NumNodes: 2, GPUsPerNode: 4, CPUsPerTask: 8, MemPerNodeMB: 64000},
		{Kind: slurm.ActionStart, JobID: 9, NumNodes: 2, GPUsPerNode: 2, CPUsPerTask: 4, MemPerNodeMB: 16000, ClearNodes: true},
		{Kind: slurm.ActionStart, JobID: 10, Nodes: []string{"node3"}, NumNodes: 2, GPUsPerNode: 4, CPUsPerTask: 8, MemPerNodeMB: 64000},
		{Kind: slurm.ActionStart, JobID: 11, NumNodes: 1, GPUsPerNode: 2, CPUsPerTask: 8, MemPerNodeMB: 32768, MemPerGPUFloorMB: 16384},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
}

// gauge is the value of the daemon's gauge name; -1 when it has none.
func gauge(t *testing.T, d *Daemon, name string) float64 {
	t.Helper()
	fams, err := d.deps.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// A running --mem-per-gpu job holds its memory per GPU times its GPUs on
// each node, also once rubick resized it (req= in its tag): the resize
// keeps the memory per GPU (MemPerTres), and the per-node value Slurm
// reports beside it is not the job's (0 on 22.05, the per-GPU value on
// 24.11). Before, a resized job held no memory in the snapshot, and the
// policy counted its node's memory as free (22.05 lab: 8 GPUs with 18 GB
// each, mem_gb 0 in its keep).
func TestBuildViewMemPerGPURunning(t *testing.T) {
	for _, tc := range []struct {
		name    string
		resized bool
		perNode int64 // what Slurm reports as memory per node
	}{
		{"as submitted", false, 0},
		{"resized, 22.05", true, 0},
		{"resized, 24.11", true, 18432},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := runningJob(31, "bert")
			j.NodeList, j.GPUsPerNode, j.GPUs, j.CPUs, j.Tag.Plan = []string{"node1"}, 8, 8, 32, "dp8.tp1.pp1.mb4.a1.z2"
			j.MemPerNodeMB, j.MemPerCPUMB, j.MemPerGPUMB = tc.perNode, 0, 18432
			if tc.resized {
				j.Tag.Extra = map[string]string{tagReq: "n1.g2.c8.m16384"}
			}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: labNodes(2), Jobs: []slurm.Job{j}, Estimators: shippedEstimators(t)}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			var got []policy.NodeAlloc
			var asked []float64
			for _, pj := range v.Snapshot.Jobs {
				got, asked = append(got, pj.Alloc...), append(asked, pj.Request.MemPerGPUGB)
			}
			want := []policy.NodeAlloc{{Node: "node1", GPUs: 8, CPUs: 32, MemGB: 144}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("job 31's allocation (-want +got):\n%s", diff)
			}
			// What it asked for per GPU is its submission's (req=: 16 GB
			// on 2 GPUs), not the 18 GB rubick raised it to: that would be
			// the floor of the next plan, and each resize would raise it.
			wantAsked := []float64{18}
			if tc.resized {
				wantAsked = []float64{8}
			}
			if diff := cmp.Diff(wantAsked, asked); diff != "" {
				t.Errorf("job 31's request per GPU, GB (-want +got):\n%s", diff)
			}
			// A restart onto 4 GPUs with 80 GB: the Applier sets 20 GB
			// per GPU, never below the submission's.
			restart := policy.Action{Kind: policy.Restart, JobID: "31", Alloc: []policy.NodeAlloc{{Node: "node1", GPUs: 4, CPUs: 16, MemGB: 80}},
				Plan: model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}, Throughput: 1e6}
			actions, skipped := v.SlurmActions(policy.Plan{Actions: []policy.Action{restart}}, t0)
			if len(actions) != 1 || len(skipped) != 0 {
				t.Fatalf("actions %+v, skipped %v; want the restart", actions, skipped)
			}
			type mem struct{ PerNodeMB, FloorMB int64 }
			wantMem := mem{80 * 1024, 18432}
			if tc.resized {
				wantMem.FloorMB = 8192
			}
			if diff := cmp.Diff(wantMem, mem{actions[0].MemPerNodeMB, actions[0].MemPerGPUFloorMB}); diff != "" {
				t.Errorf("restart's memory (-want +got):\n%s", diff)
			}
		})
	}
}
