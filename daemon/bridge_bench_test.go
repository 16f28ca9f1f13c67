package daemon

import (
	"context"
	"testing"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
)

// BenchmarkNearestRequestNone is the worst case of planning a job from
// another GPU count than its request: llama30 on a line that can run no
// TP, PP or offload, which no count of a 64 x 8 cluster runs, so every count
// is tried. BuildView pays it for each such job, every cycle.
func BenchmarkNearestRequestNone(b *testing.B) {
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		b.Fatal(err)
	}
	fit, err := artifact.FitOne(context.Background(), set, model.DefaultEnv(), "llama30")
	if err != nil {
		b.Fatal(err)
	}
	e := policy.FromPredictor(model.Predictor{Spec: set.Models["llama30"].Spec, Params: fit.Params, Env: model.DefaultEnv()})
	allow := (model.FeatureTP | model.FeaturePP | model.FeatureOffload).Allows
	req := model.Resources{Placement: model.Placement{1}, CPUs: 8, HostMemGB: 200}
	shape := clusterShape{nodeGPUs: 8, gpus: 512}
	for b.Loop() {
		if _, _, ok := nearestRequest(e, allow, req, 1, shape); ok {
			b.Fatal("llama30 planned without TP, PP or offload")
		}
	}
}
