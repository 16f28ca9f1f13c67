package sim

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
)

// reportRows reports the first n measured rows of a model as running jobs
// would.
func reportRows(t *testing.T, d *Data, l *learner, name string, n int) {
	t.Helper()
	spec := d.Predictors[name].Spec
	for _, m := range d.Set.Placements[name][:n] {
		s, err := m.Sample(spec)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 { // a job reports every round; one configuration counts once
			l.report(name, s)
		}
	}
}

// llama30's profile fit over-predicts its measured 3D rows; the learner
// refits it once and the policy's predictor changes; nothing new, no refit.
func TestLearnerRefitsLlama30(t *testing.T) {
	d := data(t)
	cfg := DefaultConfig()
	l, err := newLearner(d, cfg.Env(), 0.1)
	if err != nil {
		t.Fatal(err)
	}
	reportRows(t, d, l, "llama30", 7) // no runs of its own: 7 configurations, as for a first fit
	reportRows(t, d, l, "llama7", 1)  // one configuration: no refit
	tried, changed, err := l.refit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([][]string{{"llama30"}, {"llama30"}}, [][]string{tried, changed}); d != "" {
		t.Fatalf("refits tried and promoted (-want +got):\n%s", d)
	}
	before, _ := model.MeanRelErr(d.Predictors["llama30"], l.types["llama30"].old[len(l.types["llama30"].old)-7:])
	after, _ := model.MeanRelErr(l.types["llama30"].pred, l.types["llama30"].old[len(l.types["llama30"].old)-7:])
	if !(after < before/2) {
		t.Errorf("llama30 error on its reported rows %.1f %% -> %.1f %%, want at least halved", 100*before, 100*after)
	}
	if tried, changed, err := l.refit(context.Background()); err != nil || len(tried)+len(changed) != 0 {
		t.Errorf("second refit without new configurations = %v, %v, %v; want nothing", tried, changed, err)
	}
}

// With learning on, a replay is still deterministic and the oracle's
// ground truth is unchanged: only what the policy believes moves.
func TestRunWithRefits(t *testing.T) {
	d := data(t)
	rows, err := artifact.LoadWorkload(artifact.Default(), "naive")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.RefitThreshold = 0.1
	run := func() *Result {
		p, err := policy.New("rubick", policy.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		r, err := Run(context.Background(), cfg, d, rows, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := run(), run()
	if a.Completed != len(rows) {
		t.Fatalf("completed %d of %d", a.Completed, len(rows))
	}
	for name, c := range a.Refits {
		if c.Promoted > c.Tried {
			t.Errorf("%s: %d of %d refits promoted", name, c.Promoted, c.Tried)
		}
	}
	if a.AvgJCT != b.AvgJCT || !cmp.Equal(a.Refits, b.Refits) {
		t.Errorf("two replays differ: avg %v/%v, refits %v/%v", a.AvgJCT, b.AvgJCT, a.Refits, b.Refits)
	}
	if d.Predictors["llama30"] != (model.Predictor{Spec: d.Predictors["llama30"].Spec, Params: d.Fits["llama30"].Params, Env: d.Predictors["llama30"].Env}) {
		t.Error("a replay with refits changed the shared profile predictors")
	}
}
