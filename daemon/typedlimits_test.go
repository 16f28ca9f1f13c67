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

// typedNodes are node1-2 with a100 GPUs and node3-4 with h100.
func typedNodes() []slurm.Node {
	nodes := labNodes(4)
	for i := range nodes {
		nodes[i].GPUTypes = []string{"a100"}
		if i >= 2 {
			nodes[i].GPUTypes = []string{"h100"}
		}
	}
	return nodes
}

// A limit on one GPU type (GrpTRES=gres/gpu:h100=6, MaxTRESPerJob and
// MaxTRESPerNode of the type) bounds the jobs that ask for the type, and
// counts every running job's GPUs of the type, whatever it asked for; a
// job that asks for another type, or any, is not bounded by it.
func TestViewTypedGPULimits(t *testing.T) {
	type want struct {
		maxGPUs, perNode int
		waits            string
		groups           []string // the groups the policy keeps it in
	}
	tests := map[string]struct {
		typed   slurm.TypedGPUs // QOS shared's
		budget  slurm.Budget    // QOS shared's GrpTRESMins
		tick    time.Duration   // PriorityCalcPeriod, with a budget
		other   string          // the node where a job of any type runs on 4 GPUs; "": none
		jobType string          // what job 21 asks for; "": any
		want    want
	}{
		"room": {typed: slurm.TypedGPUs{Grp: map[string]int{"h100": 6}}, other: "node3", jobType: "h100",
			want: want{maxGPUs: 2, groups: []string{"QOS shared GrpTRES gres/gpu:h100"}}},
		"other type": {typed: slurm.TypedGPUs{Grp: map[string]int{"h100": 6}}, other: "node1", jobType: "h100",
			want: want{maxGPUs: 6, groups: []string{"QOS shared GrpTRES gres/gpu:h100"}}},
		"any type":      {typed: slurm.TypedGPUs{Grp: map[string]int{"h100": 6}}, other: "node3", want: want{}},
		"asks for a100": {typed: slurm.TypedGPUs{Grp: map[string]int{"h100": 6}}, other: "node3", jobType: "a100", want: want{}},
		"full":          {typed: slurm.TypedGPUs{Grp: map[string]int{"h100": 4}}, other: "node3", jobType: "h100", want: want{waits: "waits for room in QOS shared GrpTRES gres/gpu:h100: GPUs in use 4, allowed 4"}},
		"per user": {typed: slurm.TypedGPUs{PerUser: map[string]int{"h100": 5}}, other: "node4", jobType: "h100",
			want: want{maxGPUs: 1, groups: []string{"QOS shared MaxTRESPerUser (user alice) gres/gpu:h100"}}},
		"per job":        {typed: slurm.TypedGPUs{PerJob: map[string]int{"h100": 3}}, jobType: "h100", want: want{maxGPUs: 3}},
		"per job, any":   {typed: slurm.TypedGPUs{PerJob: map[string]int{"h100": 3}}, want: want{}},
		"per node":       {typed: slurm.TypedGPUs{PerNode: map[string]int{"h100": 2}}, jobType: "h100", want: want{perNode: 2}},
		"per node, a100": {typed: slurm.TypedGPUs{PerNode: map[string]int{"h100": 2}}, jobType: "a100", want: want{}},
		// The other job's 4 GPUs hold 236 GPU-minutes of its hour: 124 are
		// left, 2 GPUs for the job's hour.
		"run minutes": {typed: slurm.TypedGPUs{GrpRunMins: map[string]int{"h100": 360}}, other: "node3", jobType: "h100",
			want: want{maxGPUs: 2}},
		"run minutes, any type": {typed: slurm.TypedGPUs{GrpRunMins: map[string]int{"h100": 360}}, other: "node3", want: want{}},
		// 20 used and 236 to run of 500: 244 left, 4 GPUs for its hour.
		"budget": {budget: slurm.Budget{Typed: map[string]slurm.Budget{"h100": {Limit: slurm.GroupLimits{GPURunMins: 500},
			Spent: slurm.GroupLimits{GPURunMins: 20}}}}, other: "node3", jobType: "h100", want: want{maxGPUs: 4}},
		// A job on a100 GPUs uses none of an h100 budget, between ticks
		// either: 240 left.
		"budget, other type": {budget: slurm.Budget{Typed: map[string]slurm.Budget{"h100": {Limit: slurm.GroupLimits{GPURunMins: 260},
			Spent: slurm.GroupLimits{GPURunMins: 20}}}}, tick: 5 * time.Minute, other: "node1", jobType: "h100", want: want{maxGPUs: 4}},
		"budget, any type": {budget: slurm.Budget{Typed: map[string]slurm.Budget{"h100": {Limit: slurm.GroupLimits{GPURunMins: 500},
			Spent: slurm.GroupLimits{GPURunMins: 20}}}}, other: "node3", want: want{}},
		"minutes per job": {typed: slurm.TypedGPUs{PerJobMins: map[string]int{"h100": 180}}, jobType: "h100", want: want{maxGPUs: 3}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var jobs []slurm.Job
			if tc.other != "" {
				jobs = append(jobs, slurm.Job{ID: 30, Name: "other", Account: "root", Partition: "gpu", QOS: "shared", Cluster: "lab", User: "alice",
					State: slurm.StateRunning, NodeCount: 1, NodeList: []string{tc.other}, GPUsPerNode: 4, GPUs: 4, CPUs: 8, MemMB: 8000,
					TimeLimit: time.Hour, StartTime: t0.Add(-time.Minute)})
			}
			j := heldJob(21, "bert", 1, 2)
			j.Cluster, j.QOS, j.User, j.TimeLimit = "lab", "shared", "alice", time.Hour
			if tc.jobType != "" {
				j.GPUTypes = []string{tc.jobType}
			}
			jobs = append(jobs, j)
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Typed: tc.typed, Budget: tc.budget}}, BudgetTick: tc.tick}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: typedNodes(), Jobs: jobs, Estimators: shippedEstimators(t), Limits: limits},
				slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			pj := snapshotJob(v, "21")
			got := want{maxGPUs: pj.Max.GPUs, perNode: pj.Max.GPUsPerNode, waits: v.Unmanaged[21], groups: pj.Groups}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); d != "" {
				t.Errorf("job 21 (-want +got):\n%s", d)
			}
		})
	}
}

// The check of a plan's starts together holds the starts of jobs that ask
// for a type to the group's limit on it, and counts the GPUs of the type
// that the others take without holding them back: under
// GrpTRES=gres/gpu:h100=8, an h100 job's start on node4 after a start of
// any type on node3 waits; with the order the other way round both start,
// as Slurm would.
func TestSlurmActionsTypedGroup(t *testing.T) {
	est := shippedEstimators(t)
	anyType, h100 := heldJob(6, "bert", 1, 4), heldJob(7, "bert", 1, 4)
	h100.GPUTypes = []string{"h100"}
	jobs := []slurm.Job{anyType, h100}
	for i := range jobs {
		jobs[i].Cluster, jobs[i].QOS, jobs[i].MemPerNodeMB = "lab", "shared", 32768
	}
	start := func(id, node string) policy.Action {
		return policy.Action{Kind: policy.Start, JobID: id, Alloc: []policy.NodeAlloc{{Node: node, GPUs: 8, CPUs: 8, MemGB: 32}},
			Plan: model.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, Accum: 1}}
	}
	limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Typed: slurm.TypedGPUs{Grp: map[string]int{"h100": 8}}}}}
	v, err := BuildView(Defaults(), t0, Inputs{Nodes: typedNodes(), Jobs: jobs, Estimators: est, Limits: limits}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		plan    []policy.Action
		kept    []int
		skipped map[int]string
	}{
		"any type first": {[]policy.Action{start("6", "node3"), start("7", "node4")}, []int{6},
			map[int]string{7: "QOS shared GrpTRES gres/gpu:h100 allows 8 GPUs, 8 in use or planned before it, and its plan adds 8"}},
		"h100 first":  {[]policy.Action{start("7", "node4"), start("6", "node3")}, []int{7, 6}, map[int]string{}},
		"any on a100": {[]policy.Action{start("6", "node1"), start("7", "node4")}, []int{6, 7}, map[int]string{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			actions, skipped := v.SlurmActions(policy.Plan{Actions: tc.plan}, t0)
			kept, why := groupVerdicts(t, actions, skipped)
			if d := cmp.Diff(tc.kept, kept); d != "" {
				t.Errorf("kept (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.skipped, why); d != "" {
				t.Errorf("skipped (-want +got):\n%s", d)
			}
		})
	}
}

// A running rubick job of any type on h100 nodes is no member of the
// policy's group for an h100 limit: its GPUs there stay in the group's use,
// and the group's room is what is left of the limit beside them.
func TestSnapshotTypedGroup(t *testing.T) {
	running := runningJob(5, "bert")
	running.NodeList, running.GPUs, running.Tag.Plan = []string{"node3"}, 4, "dp4.tp1.pp1.mb8.a1.z0"
	h100 := heldJob(21, "bert", 1, 2)
	h100.GPUTypes = []string{"h100"}
	jobs := []slurm.Job{running, h100}
	for i := range jobs {
		jobs[i].Cluster, jobs[i].QOS = "lab", "shared"
	}
	limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Typed: slurm.TypedGPUs{Grp: map[string]int{"h100": 6}}}}}
	v, err := BuildView(Defaults(), t0, Inputs{Nodes: typedNodes(), Jobs: jobs, Estimators: shippedEstimators(t), Limits: limits},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	want := []policy.Group{{Name: "QOS shared GrpTRES gres/gpu:h100", GPUs: 2, CPUs: -1, Jobs: -1}}
	if d := cmp.Diff(want, v.Snapshot.Groups); d != "" {
		t.Errorf("groups (-want +got):\n%s", d)
	}
	members := map[string][]string{}
	for _, pj := range v.Snapshot.Jobs {
		members[pj.ID] = pj.Groups
	}
	if d := cmp.Diff(map[string][]string{"5": nil, "21": {"QOS shared GrpTRES gres/gpu:h100"}}, members); d != "" {
		t.Errorf("members (-want +got):\n%s", d)
	}
}

// A partition's weights on GPU types bill a job's GPUs at its type's
// weight: under MaxTRESPerJob=billing=30 and
// CPU=1,GRES/gpu=1,GRES/gpu:h100=3,GRES/gpu:a100=10, a request of 2 GPUs
// and 8 CPUs bills 16 on h100 (room for 1.875 times it: 3 GPUs, 15 CPUs),
// 30 on a100; a job of any type is priced at the highest type among the
// partition's nodes, or at none on a partition of untyped GPUs (10: room
// for 3 times it).
func TestViewTypedBillingWeights(t *testing.T) {
	w, err := slurm.ParseBillingWeights("CPU=1,GRES/gpu=1,GRES/gpu:h100=3,GRES/gpu:a100=10")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		jobType    string
		untyped    bool // the nodes' GPUs have no type
		gpus, cpus int  // its bounds
	}{
		"h100":         {jobType: "h100", gpus: 3, cpus: 15},
		"a100":         {jobType: "a100", gpus: 2, cpus: 8},
		"any type":     {gpus: 2, cpus: 8},
		"untyped GPUs": {untyped: true, gpus: 6, cpus: 24}, // bills 10: 3 times it
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := heldJob(21, "bert", 1, 2)
			j.Cluster, j.QOS, j.User = "lab", "shared", "alice"
			if tc.jobType != "" {
				j.GPUTypes = []string{tc.jobType}
			}
			nodes := typedNodes()
			if tc.untyped {
				nodes = labNodes(4)
			}
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", PerJob: slurm.JobLimits{Billing: 30}}},
				Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu", Billing: w}}}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: []slurm.Job{j}, Estimators: shippedEstimators(t), Limits: limits},
				slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Snapshot.Jobs) != 1 {
				t.Fatalf("job not planned: %s", v.Unmanaged[21])
			}
			if pj := snapshotJob(v, "21"); pj.Max.GPUs != tc.gpus || pj.Max.CPUs != tc.cpus {
				t.Errorf("bounds %d GPUs, %d CPUs; want %d and %d (%s)", pj.Max.GPUs, pj.Max.CPUs, tc.gpus, tc.cpus, v.Unmanaged[21])
			}
		})
	}
}
