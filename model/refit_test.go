package model

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCollapse(t *testing.T) {
	a := Sample{Plan: Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 1}, Resources: Resources{Placement: Placement{2}, CPUs: 2}}
	b := a
	b.Resources.Placement = Placement{1, 1}
	c := a
	c.Resources.CPUs = 8 // same plan and placement, other CPUs: another configuration
	at := func(s Sample, iter float64) Sample { s.IterS = iter; return s }
	tests := map[string]struct {
		in, want []Sample
	}{
		"empty":            {nil, nil},
		"distinct kept":    {[]Sample{at(a, 1), at(b, 2), at(c, 3)}, []Sample{at(a, 1), at(b, 2), at(c, 3)}},
		"odd count median": {[]Sample{at(a, 5), at(b, 2), at(a, 1), at(a, 3)}, []Sample{at(a, 3), at(b, 2)}},
		"even count mean of the middle two": {[]Sample{at(a, 4), at(a, 1), at(a, 2), at(a, 100)},
			[]Sample{at(a, 3)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, Collapse(tc.in)); d != "" {
				t.Errorf("Collapse (-want +got):\n%s", d)
			}
		})
	}
}

// refitCase is a model fitted on single-node samples of truth, and truth's
// multi-node samples. truth overlaps its gradient all-reduce with the
// backward pass (k_sync 3), which single-node samples cannot show (their
// NVLink all-reduce is too short), so the fit keeps the prior k_sync = 1
// and overprices every cross-node run in a way a refit can learn without
// losing the single-node runs.
func refitCase(t *testing.T) (spec Spec, env Env, cur Params, old, multi []Sample) {
	t.Helper()
	spec, env = testSpec(), testEnv()
	// NVLink so fast that single-node all-reduces hide nothing, a network
	// so slow that the overlap matters.
	env.IntraGBps, env.InterGBps = 5000, 2
	truth := Params{KBwd: 2.2, KSync: 3, KOpt: 0.1, KOptOff: 2, KOff: 1, KSwap: 2, KConst: 0.05}
	for _, s := range syntheticSamples(t, Predictor{Spec: spec, Params: truth, Env: env}) {
		switch {
		case s.Plan.TP > 1 || s.Plan.PP > 1:
			// Left to TestRefitNewTerm.
		case s.Resources.Placement.Nodes() == 1:
			old = append(old, s)
		default:
			multi = append(multi, s)
		}
	}
	res, err := Fit(context.Background(), spec, env, old, FitOptions{AllowPartial: true})
	if err != nil {
		t.Fatal(err)
	}
	return spec, env, res.Params, old, multi
}

// slowerNetwork is truth's multi-node samples on a network 4x slower than
// the model's environment says: no parameter expresses it, so a refit that
// follows them must distort the single-node terms.
func slowerNetwork(t *testing.T, spec Spec, env Env) []Sample {
	t.Helper()
	truth := Params{KBwd: 2.2, KSync: 3, KOpt: 0.1, KOptOff: 2, KOff: 1, KSwap: 2, KConst: 0.05}
	env.InterGBps /= 4
	var out []Sample
	for _, s := range syntheticSamples(t, Predictor{Spec: spec, Params: truth, Env: env}) {
		if s.Resources.Placement.Nodes() > 1 && s.Plan.TP == 1 && s.Plan.PP == 1 {
			out = append(out, s)
		}
	}
	return out
}

func TestRefit(t *testing.T) {
	ctx := context.Background()
	spec, env, cur, old, multi := refitCase(t)
	if len(multi) < 3 {
		t.Fatalf("only %d multi-node samples", len(multi))
	}
	contradict := []Sample{multi[0], multi[1]}
	contradict[0].IterS *= 3
	contradict[1].IterS /= 3
	tests := map[string]struct {
		recent     []Sample
		wantBetter bool
		wantInf    bool // no held-out estimate
		// wantOldWorse: the refit predicts the held-out runs better but
		// the old ones worse than oldTolerance allows.
		wantOldWorse bool
	}{
		"missing term": {recent: slowerNetwork(t, spec, env), wantOldWorse: true},
		// Every cross-node run is faster than predicted in the same way
		// (the overlap), which a refit learns.
		"systematic error": {recent: multi, wantBetter: true},
		// One configuration reported many times: nothing to hold out.
		"one configuration": {recent: []Sample{multi[0], multi[0], multi[0]}, wantInf: true},
		// Two runs that disagree: no fit made from one predicts the other.
		"contradiction": {recent: contradict, wantBetter: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rr, err := Refit(ctx, spec, env, cur, old, tc.recent)
			if err != nil {
				t.Fatal(err)
			}
			if rr.Better != tc.wantBetter || math.IsInf(rr.HeldOutErr, 1) != tc.wantInf {
				t.Errorf("Better=%v held-out=%.3f current=%.3f; want Better=%v, held-out infinite=%v",
					rr.Better, rr.HeldOutErr, rr.CurrentErr, tc.wantBetter, tc.wantInf)
			}
			if oldWorse := rr.HeldOutErr < rr.CurrentErr && rr.OldRefitErr > rr.OldCurrentErr+oldTolerance; oldWorse != tc.wantOldWorse {
				t.Errorf("held-out %.3f vs current %.3f, old %.3f vs %.3f: refit worse on the old runs = %v, want %v",
					rr.HeldOutErr, rr.CurrentErr, rr.OldRefitErr, rr.OldCurrentErr, oldWorse, tc.wantOldWorse)
			}
			if want := len(Collapse(tc.recent)); rr.Configs != want {
				t.Errorf("Configs = %d, want %d", rr.Configs, want)
			}
			if want := len(old) + rr.Configs; rr.Fit.Samples != want {
				t.Errorf("fit on %d samples, want %d (old plus one per recent configuration)", rr.Fit.Samples, want)
			}
		})
	}
}

// A configuration measured again supersedes its old measurement: the refit
// follows the job's new speed.
func TestRefitPrefersNewMeasurements(t *testing.T) {
	spec, env, cur, old, _ := refitCase(t)
	var recent []Sample
	for _, s := range old {
		s.IterS *= 1.3
		recent = append(recent, s)
	}
	rr, err := Refit(context.Background(), spec, env, cur, old, recent)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Fit.Samples != len(old) {
		t.Errorf("fit on %d samples, want %d: old measurements of re-measured configurations must go", rr.Fit.Samples, len(old))
	}
	if !rr.Better || rr.Fit.MAPE > 0.5*100*rr.CurrentErr {
		t.Errorf("Better=%v, refit MAPE %.1f %% against the current fit's %.1f %%", rr.Better, rr.Fit.MAPE, 100*rr.CurrentErr)
	}
}

// threeD is truth's TP and PP samples with their compute k3d times what the
// data-parallel samples imply.
func threeD(t *testing.T, spec Spec, env Env, k3d float64) []Sample {
	t.Helper()
	truth := Params{KBwd: 2.2, KSync: 3, KOpt: 0.1, KOptOff: 2, KOff: 1, KSwap: 2, KConst: 0.05, K3D: k3d}
	var out []Sample
	for _, s := range syntheticSamples(t, Predictor{Spec: spec, Params: truth, Env: env}) {
		if s.Plan.TP > 1 || s.Plan.PP > 1 {
			out = append(out, s)
		}
	}
	return out
}

// TestRefitNewTerm: 3D runs slower than the data-parallel profile implies
// identify k_3d, which the profile could not. When the recent samples
// also carry an error no parameter explains (a slower network), the full
// refit bends the profile's parameters to it and fails the old-sample
// check; the refit that moves k_3d alone is kept.
func TestRefitNewTerm(t *testing.T) {
	spec, env, cur, old, _ := refitCase(t)
	if cur.k3d() != 1 {
		t.Fatalf("profile fit moved k_3d to %v without 3D samples", cur.K3D)
	}
	tests := map[string]struct {
		recent   []Sample
		wantOnly []string
		maxErr   float64 // relative error of the fitted k_3d
	}{
		"3D runs only": {threeD(t, spec, env, 2.5), []string{"k_3d"}, 0.01},
		// The cross-node runs also identify k_sync and k_off, new terms
		// too; k_3d absorbs some of the network's slowness.
		"3D runs and a slow net": {append(threeD(t, spec, env, 2.5), slowerNetwork(t, spec, env)...),
			[]string{"k_sync", "k_off", "k_3d"}, 0.2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rr, err := Refit(context.Background(), spec, env, cur, old, tc.recent)
			if err != nil {
				t.Fatal(err)
			}
			if !rr.Better {
				t.Fatalf("Better = false (held-out %.3f, current %.3f, old %.3f vs %.3f)", rr.HeldOutErr, rr.CurrentErr, rr.OldRefitErr, rr.OldCurrentErr)
			}
			if d := cmp.Diff(tc.wantOnly, rr.Only); d != "" {
				t.Errorf("Only (-want +got):\n%s", d)
			}
			if k := rr.Fit.Params.K3D; math.Abs(k-2.5) > tc.maxErr*2.5 {
				t.Errorf("k_3d = %v, want 2.5 within %.0f %%", k, 100*tc.maxErr)
			}
			c, r := cur.vec(), rr.Fit.Params.vec()
			for j, name := range paramNames {
				if !slices.Contains(rr.Only, name) && r[j] != c[j] {
					t.Errorf("%s moved from %v to %v; only %v may", name, c[j], r[j], rr.Only)
				}
			}
		})
	}
}

func TestFitOnlyUnknown(t *testing.T) {
	_, err := Fit(context.Background(), testSpec(), testEnv(), syntheticSamples(t, testPredictor()), FitOptions{Only: []string{"k_bwd", "k_fwd"}})
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), `only="k_fwd"`) {
		t.Errorf("Fit with an unknown parameter in Only = %v, want ErrBadInput naming it", err)
	}
}

func TestRefitCancelled(t *testing.T) {
	spec, env, cur, old, multi := refitCase(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Refit(ctx, spec, env, cur, old, multi); !errors.Is(err, context.Canceled) {
		t.Errorf("Refit on a cancelled context = %v, want context.Canceled", err)
	}
}
