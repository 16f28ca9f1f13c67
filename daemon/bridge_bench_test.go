package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// BenchmarkNearestRequestNone is the worst case of planning a job from
// another GPU count than its request: llama30 on a line that can run no
// TP, PP or offload, which no count of a 64 x 8 cluster runs, so every count
// is tried. BuildView pays it for each such job, every cycle.
func BenchmarkNearestRequestNone(b *testing.B) {
	e := benchEstimator(b, "llama30")
	allow := (model.FeatureTP | model.FeaturePP | model.FeatureOffload).Allows
	req := model.Resources{Placement: model.Placement{1}, CPUs: 8, HostMemGB: 200}
	shape := clusterShape{nodeGPUs: 8, gpus: 512}
	for b.Loop() {
		if _, _, ok := nearestRequest(e, allow, req, 1, shape); ok {
			b.Fatal("llama30 planned without TP, PP or offload")
		}
	}
}

// BenchmarkBuildView is one cycle's conversion on a large cluster: 512
// nodes of 8 GPUs in two managed partitions, one active reservation of 16
// nodes, and 2,000 bert jobs (half running on 2 GPUs, half held asking
// for 4) of which a tenth have a --constraint and a tenth are in the
// reservation, under per-job and group limits of a QOS and 61
// associations. Every job's allowed nodes are worked out (partition,
// reservation, constraint), and its limits and its groups' usage.
func BenchmarkBuildView(b *testing.B) {
	e := benchEstimator(b, "bert")
	est := func(mt string) (policy.Estimator, bool) { return e, mt == "bert" }
	var nodes []slurm.Node
	for i := range 512 {
		part, feature := "gpu", "a100"
		if i%2 == 1 {
			part, feature = "gpu2", "h100"
		}
		nodes = append(nodes, slurm.Node{Name: fmt.Sprintf("n%03d", i), State: "MIXED", GPUs: 8, CPUs: 64, MemMB: 512000,
			GPUsUsed: 6, CPUsAlloc: 48, MemAllocMB: 192000, Partitions: []string{part}, Features: []string{feature}})
	}
	var resvNodes []string
	for i := range 16 {
		resvNodes = append(resvNodes, nodes[i].Name)
	}
	var jobs []slurm.Job
	for i := range 2000 {
		j := slurm.Job{ID: 1000 + i, Name: "train", Account: fmt.Sprintf("a%d", i%10), User: fmt.Sprintf("u%d", i%50),
			QOS: "normal", Cluster: "lab", Partition: "gpu", State: slurm.StatePending, Held: true,
			NodeCount: 1, GPUsPerNode: 4, CPUs: 32, MemPerNodeMB: 64000, SubmitTime: t0.Add(-time.Duration(i) * time.Second),
			Requeue: true, Tag: &slurm.Tag{ModelType: "bert", Class: slurm.ClassBestEffort}}
		if i%2 == 1 {
			n := nodes[16+(i/2)%496]
			j.Partition, j.State, j.Held, j.NodeList = n.Partitions[0], slurm.StateRunning, false, []string{n.Name}
			j.GPUsPerNode, j.CPUs, j.StartTime, j.Tag.Generation = 2, 16, t0.Add(-time.Hour), 1
		}
		switch {
		case i%10 == 2:
			j.Constraint = "a100"
		case i%10 == 4:
			j.Reservation = "r1"
		}
		jobs = append(jobs, j)
	}
	// Per-job and group limits on the QOS and on 10 accounts with 50
	// users under root.
	limits := slurm.Limits{QOS: map[string]slurm.QOS{"normal": {Name: "normal",
		PerJob: slurm.JobLimits{GPUs: 16}, Grp: slurm.GroupLimits{GPUs: 4000}, PerUser: slurm.GroupLimits{GPUs: 200}}}}
	limits.Associations = append(limits.Associations, slurm.Association{Cluster: "lab", Account: "root", Grp: slurm.GroupLimits{CPUs: 1 << 20}})
	for a := range 10 {
		limits.Associations = append(limits.Associations, slurm.Association{Cluster: "lab", Account: fmt.Sprintf("a%d", a), Parent: "root",
			Grp: slurm.GroupLimits{GPUs: 800}})
	}
	for u := range 50 {
		limits.Associations = append(limits.Associations, slurm.Association{Cluster: "lab", Account: fmt.Sprintf("a%d", u%10),
			User: fmt.Sprintf("u%d", u), PerJob: slurm.JobLimits{Nodes: 4}})
	}
	cfg := Defaults()
	cfg.Partitions = []string{"gpu", "gpu2"}
	in := Inputs{Nodes: nodes, Jobs: jobs, Estimators: est, Limits: limits,
		Reservations: []slurm.Reservation{{Name: "r1", Nodes: resvNodes, Start: t0.Add(-time.Hour), End: t0.Add(time.Hour)}}}
	log := slog.New(slog.DiscardHandler)
	for b.Loop() {
		v, err := BuildView(cfg, t0, in, log)
		if err != nil {
			b.Fatal(err)
		}
		if len(v.Snapshot.Jobs) < 1500 {
			b.Fatalf("view of %d jobs (ignored: %d), want most of 2,000", len(v.Snapshot.Jobs), len(v.Unmanaged))
		}
	}
}

// benchEstimator is modelType's estimator, fitted on its shipped profile.
func benchEstimator(b *testing.B, modelType string) policy.Estimator {
	b.Helper()
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		b.Fatal(err)
	}
	fit, err := artifact.FitOne(context.Background(), set, model.DefaultEnv(), modelType)
	if err != nil {
		b.Fatal(err)
	}
	return policy.FromPredictor(model.Predictor{Spec: set.Models[modelType].Spec, Params: fit.Params, Env: model.DefaultEnv()})
}
