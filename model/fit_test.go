package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// syntheticSamples prices a rich set of plans with known parameters: single-
// and multi-node data parallelism (k_sync), ZeRO-2 and plain DP (k_opt vs
// k_const), and ZeRO-Offload over several GPU and CPU counts and across
// nodes (k_opt_off, k_off, k_swap), and TP and PP plans (k_3d).
func syntheticSamples(t testing.TB, p Predictor) []Sample {
	t.Helper()
	type c struct {
		plan Plan
		pl   Placement
		cpus int
	}
	cases := []c{
		{Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}, Placement{1}, 1},
		{Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 1}, Placement{2}, 2},
		{Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1}, Placement{8}, 8},
		{Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1}, Placement{1, 1, 1, 1}, 4},
		{Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1}, Placement{2, 2, 2, 2}, 8},
		{Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1, ZeRO: 2}, Placement{8}, 8},
		{Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, ZeRO: 2}, Placement{1, 1, 1, 1}, 4},
		{Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 8, Accum: 1, ZeRO: 2, Offload: true}, Placement{1}, 1},
		{Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 8, Accum: 1, ZeRO: 2, Offload: true}, Placement{1}, 16},
		{Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 1, ZeRO: 2, Offload: true}, Placement{2}, 4},
		{Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1, ZeRO: 2, Offload: true}, Placement{8}, 64},
		{Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, ZeRO: 2, Offload: true}, Placement{1, 1, 1, 1}, 8},
		{Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1, ZeRO: 2, Offload: true}, Placement{1, 1, 1, 1, 1, 1, 1, 1}, 16},
		{Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1, ZeRO: 2, Offload: true}, Placement{1, 1, 1, 1, 1, 1, 1, 1}, 256},
		{Plan{DP: 1, TP: 4, PP: 1, MicroBatch: 8, Accum: 1}, Placement{4}, 4},
		{Plan{DP: 2, TP: 2, PP: 2, MicroBatch: 1, Accum: 4}, Placement{4, 4}, 8},
	}
	out := make([]Sample, 0, len(cases))
	for _, c := range cases {
		r := Resources{Placement: c.pl, CPUs: c.cpus}
		bd, err := p.Predict(c.plan, r)
		if err != nil {
			t.Fatalf("Predict(%s): %v", c.plan, err)
		}
		out = append(out, Sample{Plan: c.plan, Resources: r, IterS: bd.Iter})
	}
	return out
}

// TestFitRecovers fits noise-free samples generated from known parameters
// and expects every parameter back within 1 %.
func TestFitRecovers(t *testing.T) {
	truth := Params{KBwd: 2.4, KSync: 1.8, KOpt: 0.2, KOptOff: 6, KOff: 2.5, KSwap: 1.6, KConst: 0.05, K3D: 1.7}
	// A slow network and PCIe make the overlap exponents visible.
	env := testEnv()
	env.InterGBps, env.PCIeGBps = 2, 2
	spec := testSpec()
	samples := syntheticSamples(t, Predictor{Spec: spec, Params: truth, Env: env})
	got, err := Fit(context.Background(), spec, env, samples, FitOptions{NeedOffload: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pinned) != 0 {
		t.Fatalf("pinned %v, want every parameter identified", got.Pinned)
	}
	w, g := truth.vec(), got.Params.vec()
	for j := range w {
		if math.Abs(g[j]-w[j]) > 0.01*w[j] {
			t.Errorf("%s = %v, want %v within 1%%", paramNames[j], g[j], w[j])
		}
	}
	if got.RMSLE > 1e-3 || got.Samples != len(samples) {
		t.Errorf("RMSLE = %v over %d samples, want ~0 over %d", got.RMSLE, got.Samples, len(samples))
	}
	again, err := Fit(context.Background(), spec, env, samples, FitOptions{NeedOffload: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("fit not deterministic (-first +second):\n%s", diff)
	}
}

// TestFitPartial: three ZeRO-Offload samples on one node, like the llama
// profiles, identify only what scales differently; the rest stay at the
// priors and are listed.
func TestFitPartial(t *testing.T) {
	truth := Params{KBwd: 2, KSync: 1, KOpt: 0.075, KOptOff: 20, KOff: 1, KSwap: 1, KConst: 0.3}
	spec, env := testSpec(), testEnv()
	p := Predictor{Spec: spec, Params: truth, Env: env}
	var samples []Sample
	for _, d := range []int{2, 4, 8} {
		plan := Plan{DP: d, TP: 1, PP: 1, MicroBatch: 8 / d, Accum: 1, ZeRO: 2, Offload: true}
		r := Resources{Placement: Placement{d}, CPUs: 4 * d}
		bd, err := p.Predict(plan, r)
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, Sample{Plan: plan, Resources: r, IterS: bd.Iter})
	}
	_, err := Fit(context.Background(), spec, env, samples, FitOptions{NeedOffload: true})
	if !errors.Is(err, ErrTooFewSamples) || !strings.Contains(err.Error(), "3 samples (need >= 7)") {
		t.Fatalf("strict fit error = %v, want ErrTooFewSamples naming the sample count", err)
	}
	got, err := Fit(context.Background(), spec, env, samples, FitOptions{NeedOffload: true, AllowPartial: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"k_bwd", "k_opt", "k_sync", "k_swap", "k_off", "k_3d"}, got.Pinned); diff != "" {
		t.Errorf("pinned (-want +got):\n%s", diff)
	}
	if got.Params.KBwd != Priors().KBwd || got.Params.KOpt != Priors().KOpt {
		t.Errorf("pinned parameters moved: %+v", got.Params)
	}
	if got.RMSLE > 0.01 {
		t.Errorf("RMSLE = %v, want the identified parameters to explain the samples", got.RMSLE)
	}
}

func TestFitErrors(t *testing.T) {
	spec, env := testSpec(), testEnv()
	good := syntheticSamples(t, Predictor{Spec: spec, Params: testParams(), Env: env})
	noOffload := good[:7]
	nan := append([]Sample(nil), good...)
	nan[3].IterS = math.NaN()
	badPlan := append([]Sample(nil), good...)
	badPlan[0].Plan.DP = 3
	tests := map[string]struct {
		samples []Sample
		opts    FitOptions
		is      error
		want    string
	}{
		"none":           {samples: nil, is: ErrTooFewSamples, want: "0 samples"},
		"few":            {samples: good[:5], is: ErrTooFewSamples, want: "5 samples (need >= 7)"},
		"no offload":     {samples: noOffload, opts: FitOptions{NeedOffload: true}, is: ErrTooFewSamples, want: "0 ZeRO-Offload samples (need >= 3)"},
		"nan iteration":  {samples: nan, is: ErrBadInput, want: "sample 3: iter_s=NaN"},
		"plan mismatch":  {samples: badPlan, is: ErrInvalidPlan, want: "sample 0"},
		"partial, empty": {samples: nil, opts: FitOptions{AllowPartial: true}, is: ErrTooFewSamples, want: "0 samples"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Fit(context.Background(), spec, env, tc.samples, tc.opts)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Fit error = %v, want %v naming %q", err, tc.is, tc.want)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Fit(ctx, spec, env, good, FitOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Fit with a cancelled context = %v, want context.Canceled", err)
	}
}

func BenchmarkFit7(b *testing.B) {
	spec, env := testSpec(), testEnv()
	samples := syntheticSamples(b, Predictor{Spec: spec, Params: testParams(), Env: env})[:7]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Fit(context.Background(), spec, env, samples, FitOptions{AllowPartial: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// A fit allowed to move only parameters the samples cannot identify is the
// prior, not an optimizer error.
func TestFitOnlyUnidentified(t *testing.T) {
	var dp []Sample
	for _, s := range syntheticSamples(t, testPredictor()) {
		if s.Plan.TP == 1 && s.Plan.PP == 1 {
			dp = append(dp, s)
		}
	}
	got, err := Fit(context.Background(), testSpec(), testEnv(), dp, FitOptions{Only: []string{"k_3d"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(Priors(), got.Params); d != "" {
		t.Errorf("params (-prior +got):\n%s", d)
	}
	if len(got.Pinned) != nParams {
		t.Errorf("pinned %v, want all %d", got.Pinned, nParams)
	}
}

// TestFitMixedGlobalBatches: jobs of one model type train with their own
// global batches. Samples at twice the type's batch (each plan with twice
// the micro-batch, priced at Spec.WithGlobalBatch) and the rest at the
// type's recover the parameters as well as samples at one batch do; and a
// sample is priced at its own batch, never at the type's.
func TestFitMixedGlobalBatches(t *testing.T) {
	truth := Params{KBwd: 2.4, KSync: 1.8, KOpt: 0.2, KOptOff: 6, KOff: 2.5, KSwap: 1.6, KConst: 0.05, K3D: 1.7}
	env := testEnv()
	env.InterGBps, env.PCIeGBps = 2, 2
	spec := testSpec()
	samples := syntheticSamples(t, Predictor{Spec: spec, Params: truth, Env: env})
	double := Predictor{Spec: spec.WithGlobalBatch(2 * spec.GlobalBatch), Params: truth, Env: env}
	for i := 0; i < len(samples); i += 2 {
		s := &samples[i]
		s.Plan.MicroBatch *= 2
		bd, err := double.Predict(s.Plan, s.Resources)
		if err != nil {
			t.Fatalf("Predict(%s) at global batch %d: %v", s.Plan, double.Spec.GlobalBatch, err)
		}
		s.IterS = bd.Iter
	}
	got, err := Fit(context.Background(), spec, env, samples, FitOptions{NeedOffload: true})
	if err != nil {
		t.Fatal(err)
	}
	w, g := truth.vec(), got.Params.vec()
	for j := range w {
		if math.Abs(g[j]-w[j]) > 0.01*w[j] {
			t.Errorf("%s = %v, want %v within 1%%", paramNames[j], g[j], w[j])
		}
	}
	if got.RMSLE > 1e-3 {
		t.Errorf("RMSLE = %v, want ~0", got.RMSLE)
	}
}

func TestSpecWithGlobalBatch(t *testing.T) {
	spec := testSpec()
	got := spec.WithGlobalBatch(4 * spec.GlobalBatch)
	want := spec
	want.GlobalBatch, want.ForwardMs = 4*spec.GlobalBatch, 4*spec.ForwardMs
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("WithGlobalBatch(4x) (-want +got):\n%s", d)
	}
	for _, b := range []int{0, -1, spec.GlobalBatch} {
		if d := cmp.Diff(spec, spec.WithGlobalBatch(b)); d != "" {
			t.Errorf("WithGlobalBatch(%d) changed the spec:\n%s", b, d)
		}
	}
	// A plan's own batch: one GPU's forward time per sample is the same.
	p := Predictor{Spec: spec, Params: Priors(), Env: testEnv()}
	plan := Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 2 * spec.GlobalBatch, Accum: 1}
	if _, err := p.Predict(plan, Resources{Placement: Placement{1}, CPUs: 1}); !errors.Is(err, ErrInvalidPlan) {
		t.Errorf("Predict of a plan at twice the batch: %v, want ErrInvalidPlan", err)
	}
	bd, err := p.ForPlan(plan).Predict(plan, Resources{Placement: Placement{1}, CPUs: 1})
	if err != nil || math.Abs(bd.Fwd-2*spec.ForwardMs/1000) > 1e-12 {
		t.Errorf("ForPlan(%s).Predict: fwd %v (%v), want %v", plan, bd.Fwd, err, 2*spec.ForwardMs/1000)
	}
}

// TestFitDoubts: samples priced with one forward time, fitted with a spec
// whose forward_ms_1gpu is 4x too long or too short, leave k_bwd at a
// bound, and Doubts names the spec's figure; the right spec leaves no
// doubt. A pinned k_bwd is no evidence, and a fit that misses its samples
// by more than PoorFitMAPE is doubted whatever its parameters.
func TestFitDoubts(t *testing.T) {
	truth := Params{KBwd: 2, KSync: 1.8, KOpt: 0.2, KOptOff: 6, KOff: 2.5, KSwap: 1.6, KConst: 0.05, K3D: 1.7}
	spec := testSpec()
	samples := syntheticSamples(t, Predictor{Spec: spec, Params: truth, Env: testEnv()})
	for _, tc := range []struct {
		name  string
		scale float64
		want  string
	}{
		{"right", 1, ""},
		{"too long", 4, "is the least backward/forward ratio a fit allows: forward_ms_1gpu=%g is likely too long"},
		{"too short", 0.25, "is the largest backward/forward ratio a fit allows: forward_ms_1gpu=%g is likely too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec
			s.ForwardMs *= tc.scale
			got, err := Fit(context.Background(), s, testEnv(), samples, FitOptions{NeedOffload: true})
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			if tc.want != "" {
				want = []string{fmt.Sprintf("k_bwd=%.4g ", got.Params.KBwd) + fmt.Sprintf(tc.want, s.ForwardMs)}
			}
			if d := cmp.Diff(want, got.Doubts(s)); d != "" {
				t.Errorf("Doubts (-want +got):\n%s", d)
			}
		})
	}
	for _, tc := range []struct {
		name string
		r    FitResult
		want []string
	}{
		{"pinned at its prior bound", FitResult{Params: Params{KBwd: 0.5}, Pinned: []string{"k_bwd"}}, nil},
		{"poor", FitResult{Params: Params{KBwd: 2}, MAPE: 534.4}, []string{"it misses its own samples by 534 % on average"}},
		{"just within", FitResult{Params: Params{KBwd: 2}, MAPE: PoorFitMAPE}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, tc.r.Doubts(spec)); d != "" {
				t.Errorf("Doubts (-want +got):\n%s", d)
			}
		})
	}
}

// TestFitTinyBandwidth: an environment whose links would price every
// sample at an infinite time is refused, naming the link (before, the fit
// panicked reading a best point no start had found).
func TestFitTinyBandwidth(t *testing.T) {
	env := testEnv()
	env.IntraGBps = 1e-310
	_, err := Fit(context.Background(), testSpec(), env, syntheticSamples(t, testPredictor()), FitOptions{})
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "env.intra_gbps=1e-310") {
		t.Errorf("Fit = %v, want ErrBadInput naming env.intra_gbps", err)
	}
}
