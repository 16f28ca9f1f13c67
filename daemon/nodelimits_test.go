package daemon

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// A group limit on nodes counts each node its running jobs hold once. A
// job gets at most the nodes left beside those the group holds already,
// which cost it nothing (its NodeQuota); where none is left, only the
// nodes the group holds already, and a pending job none of those is usable
// for waits.
func TestViewNodeLimits(t *testing.T) {
	other := func(id int, node string) slurm.Job {
		return slurm.Job{ID: id, Name: "other", Account: "root", Partition: "gpu", QOS: "shared", Cluster: "lab", State: slurm.StateRunning,
			NodeCount: 1, NodeList: []string{node}, GPUsPerNode: 1, GPUs: 1, CPUs: 4, MemMB: 8000, StartTime: t0.Add(-time.Minute)}
	}
	type want struct {
		maxNodes int
		quota    *policy.NodeQuota
		nodes    []string
		waits    string
		bound    string // what rubick explain says bounds its nodes
	}
	tests := map[string]struct {
		limit   int      // the QOS's GrpTRES node=
		others  []string // the nodes of the QOS's other running jobs, one job each
		drained string   // a node not usable
		running string   // where job 21 runs; "": it is pending
		want    want
	}{
		"no limit": {others: []string{"node2"}, want: want{}},
		"room": {limit: 3, others: []string{"node2"}, want: want{maxNodes: 3, quota: &policy.NodeQuota{Shared: []string{"node2"}, New: 2},
			bound: "QOS shared GrpTRES, 2 nodes left beside the 1 node its jobs hold"}},
		"shared node": {limit: 2, others: []string{"node2", "node2"}, want: want{maxNodes: 2, quota: &policy.NodeQuota{Shared: []string{"node2"}, New: 1},
			bound: "QOS shared GrpTRES, 1 node left beside the 1 node its jobs hold"}},
		"room, none held": {limit: 2, want: want{maxNodes: 2, quota: &policy.NodeQuota{New: 2}, bound: "QOS shared GrpTRES, 2 nodes left"}},
		"full":            {limit: 2, others: []string{"node2", "node3"}, want: want{nodes: []string{"node2", "node3"}}},
		"full, one usable": {limit: 2, others: []string{"node2", "node3"}, drained: "node3",
			want: want{nodes: []string{"node2"}}},
		"full, none usable": {limit: 1, others: []string{"node3"}, drained: "node3",
			want: want{waits: "waits for room in QOS shared GrpTRES: nodes in use 1, allowed 1, none of them usable by it"}},
		// Its own node is given back first: node2 is the others', node1
		// its own, and it may take one node.
		"running": {limit: 2, others: []string{"node2"}, running: "node1", want: want{maxNodes: 2, quota: &policy.NodeQuota{Shared: []string{"node2"}, New: 1},
			bound: "QOS shared GrpTRES, 1 node left beside the 1 node its jobs hold"}},
		// Over a lowered limit it stays where it is or moves to the
		// group's nodes (SlurmActions keeps it off both together).
		"running, over": {limit: 1, others: []string{"node2"}, running: "node1", want: want{nodes: []string{"node1", "node2"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			nodes := labNodes(4)
			jobs := []slurm.Job{}
			for i, n := range tc.others {
				jobs = append(jobs, other(30+i, n))
			}
			for i := range nodes {
				if nodes[i].Name == tc.drained {
					nodes[i].State = "DRAIN"
				}
			}
			j := heldJob(21, "bert", 1, 2)
			j.Cluster, j.QOS, j.User = "lab", "shared", "alice"
			if tc.running != "" {
				j.State, j.Held, j.NodeList, j.GPUs, j.CPUs, j.StartTime = slurm.StateRunning, false, []string{tc.running}, 2, 8, t0.Add(-time.Minute)
				j.Tag.Plan = "dp2.tp1.pp1.mb16.a1.z0"
			}
			jobs = append(jobs, j)
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Grp: slurm.GroupLimits{Nodes: tc.limit}}}}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: jobs, Estimators: shippedEstimators(t), Limits: limits}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			pj := snapshotJob(v, "21")
			got := want{maxNodes: pj.Max.Nodes, quota: pj.NodeQuota, nodes: pj.Nodes, waits: v.Unmanaged[21], bound: v.NodeBounds[21].By}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); d != "" {
				t.Errorf("job 21 (-want +got):\n%s", d)
			}
		})
	}
}

// groupNodes counts a node once per group however many jobs share it, and
// forgets it when the last leaves.
func TestGroupNodes(t *testing.T) {
	limited := slurm.Group{Limit: "QOS q GrpTRES", GroupLimits: slurm.GroupLimits{Nodes: 2}}
	free := slurm.Group{Limit: "QOS q GrpTRES", GroupLimits: slurm.GroupLimits{GPUs: 4}}
	gn := groupNodes{}
	gn.add([]slurm.Group{limited, free}, []string{"a", "b"}, 1)
	gn.add([]slurm.Group{limited}, []string{"b"}, 1)
	if len(gn[limited]) != 2 || gn[free] != nil {
		t.Fatalf("nodes %v, want a and b in the node limit alone", gn)
	}
	if got := gn.adds(limited, []string{"b", "c", "c"}); got != 1 {
		t.Errorf("adds(b, c, c) = %d, want 1", got)
	}
	before := gn.clone()
	gn.add([]slurm.Group{limited}, []string{"b"}, -1)
	if len(gn[limited]) != 2 {
		t.Errorf("after one of b's two jobs left: %v, want a and b", gn[limited])
	}
	gn.add([]slurm.Group{limited}, []string{"a", "b"}, -1)
	if d := cmp.Diff(map[string]int{}, gn[limited]); d != "" {
		t.Errorf("after all left (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]int{"a": 1, "b": 2}, before[limited]); d != "" {
		t.Errorf("the clone changed (-want +got):\n%s", d)
	}
}

// Node-minutes (GrpTRESRunMins=node=, MaxTRESMinsPerJob=node=, a
// GrpTRESMins budget) bound how many nodes a job may span over its time
// limit. Unlike a node count, they sum each job's nodes, shared or not.
// Every other job runs on one node with 30 minutes of its hour left (30
// node-minutes); job 21 asks for an hour.
func TestViewNodeMinutes(t *testing.T) {
	other := func(id int, node string) slurm.Job {
		return slurm.Job{ID: id, Name: "other", Account: "root", Partition: "gpu", QOS: "shared", Cluster: "lab", State: slurm.StateRunning,
			NodeCount: 1, NodeList: []string{node}, GPUsPerNode: 1, GPUs: 1, CPUs: 4, MemMB: 8000, TimeLimit: time.Hour,
			StartTime: t0.Add(-30 * time.Minute)}
	}
	type want struct {
		maxNodes int
		waits    string
		bound    string // what rubick explain says bounds its nodes
	}
	tests := map[string]struct {
		grp     int64 // the QOS's GrpTRESRunMins node=
		perJob  int64 // its MaxTRESMinsPerJob node=
		budget  slurm.Budget
		others  []string // the nodes of the QOS's other running jobs, one job each
		running bool     // job 21 runs on node1, a minute into its hour
		want    want
	}{
		"no limit": {others: []string{"node2"}},
		"room": {grp: 150, others: []string{"node2"},
			want: want{maxNodes: 2, bound: "QOS shared GrpTRESRunMins, 120 node-minutes left for its 60-minute time limit"}},
		// Two jobs on one node hold 60 node-minutes, not 30.
		"shared node": {grp: 150, others: []string{"node2", "node2"},
			want: want{maxNodes: 1, bound: "QOS shared GrpTRESRunMins, 90 node-minutes left for its 60-minute time limit"}},
		"full": {grp: 80, others: []string{"node2"}, want: want{
			waits: "waits for room in QOS shared GrpTRESRunMins: node-minutes to run in use 30, allowed 80, and one node for its 60-minute time limit takes 60"}},
		"per job": {perJob: 180, want: want{maxNodes: 3,
			bound: "MaxTRESMinsPerJob of its QOS, its partition's QOS or its association, 180 node-minutes for its 60-minute time limit"}},
		// Slurm holds it back at any size: released to Slurm as submitted.
		"per job short": {perJob: 30, want: want{waits: "its 60-minute time limit on one node is over its node-minutes per job (30)"}},
		// 20 used and 30 to run of 200: 150 left.
		"budget": {budget: slurm.Budget{Limit: slurm.GroupLimits{NodeRunMins: 200}, Spent: slurm.GroupLimits{NodeRunMins: 20}},
			others: []string{"node2"}, want: want{maxNodes: 2, bound: "QOS shared GrpTRESMins, 150 node-minutes left for its 60-minute time limit"}},
		"budget spent": {budget: slurm.Budget{Limit: slurm.GroupLimits{NodeRunMins: 100}, Spent: slurm.GroupLimits{NodeRunMins: 20}},
			others: []string{"node2"}, want: want{
				waits: "waits for room in QOS shared GrpTRESMins: node-minutes used or to run in use 50, allowed 100, and one node for its 60-minute time limit takes 60"}},
		// Its own 59 node-minutes are given back first: 100-30 leave 70.
		"running": {grp: 100, others: []string{"node2"}, running: true,
			want: want{maxNodes: 1, bound: "QOS shared GrpTRESRunMins, 70 node-minutes left for its 60-minute time limit"}},
		// Over a lowered limit it keeps the node it holds.
		"running, over": {grp: 40, others: []string{"node2"}, running: true,
			want: want{maxNodes: 1, bound: "QOS shared GrpTRESRunMins, 10 node-minutes left for its 60-minute time limit"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			jobs := []slurm.Job{}
			for i, n := range tc.others {
				jobs = append(jobs, other(30+i, n))
			}
			j := heldJob(21, "bert", 1, 2)
			j.Cluster, j.QOS, j.User, j.TimeLimit = "lab", "shared", "alice", time.Hour
			if tc.running {
				j.State, j.Held, j.NodeList, j.GPUs, j.CPUs, j.StartTime = slurm.StateRunning, false, []string{"node1"}, 2, 8, t0.Add(-time.Minute)
				j.Tag.Plan = "dp2.tp1.pp1.mb16.a1.z0"
			}
			jobs = append(jobs, j)
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Grp: slurm.GroupLimits{NodeRunMins: tc.grp},
				PerJob: slurm.JobLimits{NodeMins: tc.perJob}, Budget: tc.budget}}}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: labNodes(4), Jobs: jobs, Estimators: shippedEstimators(t), Limits: limits},
				slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			got := want{maxNodes: snapshotJob(v, "21").Max.Nodes, waits: v.Unmanaged[21]}
			if b, ok := v.NodeBounds[21]; ok {
				if b.Nodes != got.maxNodes {
					t.Errorf("node bound %+v, want %d nodes as in the snapshot", b, got.maxNodes)
				}
				got.bound = b.By
			}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); d != "" {
				t.Errorf("job 21 (-want +got):\n%s", d)
			}
		})
	}
}
