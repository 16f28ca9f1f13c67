package slurm

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// clusterRead is everything rubickd reads through one API version.
type clusterRead struct {
	Jobs         []Job
	Job2         Job
	Nodes        []Node
	Limits       Limits
	Reservations []Reservation
	Submitted    int
}

// readAll reads testdata/24.11-v42, recorded on the 24.11 chroot lab with
// both versions at the same moment, through version.
func readAll(t *testing.T, version string) clusterRead {
	t.Helper()
	const dir = "testdata/24.11-v42"
	f, srv := newFakeRestdDir(t, version, dir)
	for _, list := range []string{"qos", "associations"} {
		b, err := os.ReadFile(filepath.Join(dir, "db"+version+"-"+list+".json"))
		if err != nil {
			t.Fatal(err)
		}
		f.overrides["/slurmdb/"+version+"/"+list] = string(b)
	}
	c := newTestCluster(t, srv.URL, nil)
	if c.Version() != version {
		t.Fatalf("detected %s, want %s", c.Version(), version)
	}
	ctx := context.Background()
	var r clusterRead
	var err error
	if err = c.Ping(ctx); err != nil {
		t.Fatalf("%s Ping: %v", version, err)
	}
	if r.Jobs, _, err = c.Jobs(ctx, time.Time{}); err != nil {
		t.Fatalf("%s Jobs: %v", version, err)
	}
	if r.Job2, err = c.Job(ctx, 2); err != nil {
		t.Fatalf("%s Job(2): %v", version, err)
	}
	if r.Nodes, err = c.Nodes(ctx); err != nil {
		t.Fatalf("%s Nodes: %v", version, err)
	}
	if r.Limits, err = c.Limits(ctx); err != nil {
		t.Fatalf("%s Limits: %v", version, err)
	}
	if r.Reservations, err = c.Reservations(ctx); err != nil {
		t.Fatalf("%s Reservations: %v", version, err)
	}
	if r.Submitted, err = c.Submit(ctx, SubmitRequest{Name: "rest", Partition: "gpu", Script: "#!/bin/bash\nsleep 60\n", Comment: "rubick:model=bert"}); err != nil {
		t.Fatalf("%s Submit: %v", version, err)
	}
	return r
}

// v0.0.42 answers are read into the v0.0.41 types: the same cluster,
// answered by both at one moment, must read the same.
func TestV42ReadsAsV41(t *testing.T) {
	v41, v42 := readAll(t, Version41), readAll(t, Version42)
	// The two submissions were two jobs (7 and 8); everything else is
	// one state of the cluster.
	if v41.Submitted != 7 || v42.Submitted != 8 {
		t.Errorf("submitted %d and %d, want the recorded 7 and 8", v41.Submitted, v42.Submitted)
	}
	v41.Submitted, v42.Submitted = 0, 0
	if d := cmp.Diff(v41, v42, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("v0.0.41 -> v0.0.42:\n%s", d)
	}

	// And what they read is the recorded cluster (scontrol and sacctmgr
	// on the lab when it was recorded).
	byID := map[int]Job{}
	for _, j := range v42.Jobs {
		byID[j.ID] = j
	}
	type jobFacts struct {
		State           string
		Held            bool
		GPUs, NodeCount int
		Billing         int64
		MemPerGPUMB     int64
		ArrayTasks      string
		Model           string
	}
	facts := func(j Job) jobFacts {
		f := jobFacts{State: j.State, Held: j.Held, GPUs: j.GPUs, NodeCount: j.NodeCount, Billing: j.Billing,
			MemPerGPUMB: j.MemPerGPUMB, ArrayTasks: j.ArrayTasks}
		if j.Tag != nil {
			f.Model = j.Tag.ModelType
		}
		return f
	}
	want := map[int]jobFacts{
		1: {State: StateCompleted, GPUs: 1, NodeCount: 1, Billing: 3},
		2: {State: StateRunning, GPUs: 16, NodeCount: 2, Billing: 56},
		3: {State: StatePending, Held: true, NodeCount: 1},
		4: {State: StatePending, Held: true, NodeCount: 1, Model: "bert"},
		5: {State: StateRunning, GPUs: 3, NodeCount: 1, Billing: 12, MemPerGPUMB: 8192},
		6: {State: StatePending, Held: true, NodeCount: 1, ArrayTasks: "0-3"},
	}
	got := map[int]jobFacts{}
	for id, j := range byID {
		got[id] = facts(j)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("v0.0.42 jobs (-want +got):\n%s", d)
	}
	if len(v42.Nodes) != 4 || v42.Nodes[1].GPUsUsed != 8 {
		t.Errorf("nodes %+v, want node1-4 with node2's 8 GPUs in use", v42.Nodes)
	}
	gpu := v42.Limits.Partitions["gpu"]
	if gpu.MaxTime != 2*time.Hour || !cmp.Equal(gpu.Billing, BillingWeights{CPU: 0.5, GPU: 2, MemMB: 0.25 / 1024, Set: true}) {
		t.Errorf("partition gpu %+v, want MaxTime 120 and the billing weights", gpu)
	}
	q := v42.Limits.QOS["normal"]
	if q.Grp.GPUs != 24 || q.Grp.Billing != 200 || q.PerJob.GPUs != 16 {
		t.Errorf("QOS normal %+v, want GrpTRES gres/gpu=24,billing=200 and MaxTRESPerJob gres/gpu=16", q)
	}
	rootCPUs := 0
	for _, a := range v42.Limits.Associations {
		if a.User == "root" {
			rootCPUs = a.PerJob.CPUs
		}
	}
	if rootCPUs != 48 {
		t.Errorf("associations %+v, want root's MaxTRESPerJob cpu=48", v42.Limits.Associations)
	}
	if len(v42.Reservations) != 1 || v42.Reservations[0].Name != "maint" || !strings.Contains(strings.Join(v42.Reservations[0].Flags, ","), "MAINT") {
		t.Errorf("reservations %+v, want maint", v42.Reservations)
	}
}

// The answers differ in fields this package does not read; the
// specifications say the same of every answer it reads (apart from the
// fields listed here, which it neither reads nor sends).
func TestV42SpecMatchesV41(t *testing.T) {
	ignore := map[string]bool{
		"exclusive": true, "oversubscribe": true, "minimum_switches": true, "show_flags": true, // job: removed in v0.0.42
		"priority_by_partition": true, "required_switches": true, // job: added
		"primary": true, "responding": true, // ping: added
		"result":        true,                         // submit answer: removed
		"oom_kill_step": true, "resv_mpi_ports": true, // job description
	}
	load := func(v, dir string) (map[string]any, func(any) any) {
		raw, err := os.ReadFile(filepath.Join("gen", dir, "spec.json"))
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
		var resolve func(x any, depth int) any
		resolve = func(x any, depth int) any {
			switch x := x.(type) {
			case map[string]any:
				if ref, ok := x["$ref"].(string); ok {
					if depth > 16 {
						return "recursive"
					}
					return resolve(schemas[ref[strings.LastIndex(ref, "/")+1:]], depth+1)
				}
				out := map[string]any{}
				for k, v := range x {
					if k == "description" || k == "deprecated" || k == "required" || ignore[k] {
						continue
					}
					out[k] = resolve(v, depth)
				}
				return out
			case []any:
				out := make([]any, len(x))
				for i, v := range x {
					out[i] = resolve(v, depth)
				}
				return out
			case string:
				return strings.ReplaceAll(x, v, "vX")
			}
			return x
		}
		return doc["paths"].(map[string]any), func(x any) any { return resolve(x, 0) }
	}
	p41, r41 := load("v0.0.41", "v0041")
	p42, r42 := load("v0.0.42", "v0042")
	for _, ep := range []struct{ method, path, part string }{
		{"get", "ping/", "responses"}, {"get", "jobs/", "responses"}, {"get", "job/{job_id}", "responses"},
		{"get", "nodes/", "responses"}, {"get", "partitions/", "responses"}, {"get", "reservations/", "responses"},
		{"post", "job/submit", "responses"}, {"post", "job/submit", "requestBody"},
	} {
		op := func(p map[string]any, v string) any {
			path, ok := p["/slurm/"+v+"/"+ep.path].(map[string]any)
			if !ok {
				t.Fatalf("%s has no %s", v, ep.path)
			}
			return path[ep.method].(map[string]any)[ep.part]
		}
		if d := cmp.Diff(r41(op(p41, "v0.0.41")), r42(op(p42, "v0.0.42"))); d != "" {
			t.Errorf("%s %s %s differs beyond the ignored fields (-v0.0.41 +v0.0.42):\n%s", ep.method, ep.path, ep.part, d)
		}
	}
}
