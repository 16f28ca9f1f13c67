package artifact

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/model"
)

// subset is the embedded data of a few models only, to keep tests fast.
func subset(t testing.TB, names ...string) *Set {
	t.Helper()
	all, err := Load(Default())
	if err != nil {
		t.Fatal(err)
	}
	s := &Set{Models: map[string]ModelInfo{}, Profiles: map[string][]ProfileRow{}, Placements: map[string][]Measurement{}}
	for _, n := range names {
		s.Models[n], s.Profiles[n], s.Placements[n] = all.Models[n], all.Profiles[n], all.Placements[n]
	}
	return s
}

func TestLearn(t *testing.T) {
	set := subset(t, "bert", "llama7", "llama30")
	const rows, seeds = 7, 4 // llama30 has no runs of its own: a refit needs 7 rows
	scores, err := Learn(context.Background(), set, model.DefaultEnv(), LearnOptions{Rows: rows, Seeds: seeds, Threshold: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]LearnScore{}
	sum := 0
	for _, s := range scores {
		by[s.Model] = s
		if s.Model != "all" {
			sum += s.Scored
			if want := (len(set.Placements[s.Model]) - rows) * seeds; s.Scored != want {
				t.Errorf("%s: scored %d predictions, want %d (every row not drawn, every seed)", s.Model, s.Scored, want)
			}
		}
		if s.Promoted == 0 && s.LearnedMAPEPct != s.StaticMAPEPct {
			t.Errorf("%s: no refit promoted, yet learned MAPE %.2f != static %.2f", s.Model, s.LearnedMAPEPct, s.StaticMAPEPct)
		}
		if s.Promoted > s.Refits {
			t.Errorf("%s: %d promotions out of %d refits", s.Model, s.Promoted, s.Refits)
		}
		if s.Promoted == 0 && (s.LearnedBestPickPct != s.StaticBestPickPct || s.LearnedRegretPct != s.StaticRegretPct) {
			t.Errorf("%s: no refit promoted, yet plan choice %.1f %% / %.2f %% != static %.1f %% / %.2f %%",
				s.Model, s.LearnedBestPickPct, s.LearnedRegretPct, s.StaticBestPickPct, s.StaticRegretPct)
		}
	}
	// bert has 18 placements with several measured plans; a draw of 7 rows
	// leaves most of them unseen.
	if p := by["bert"].Placements; p < 10*seeds || p > 18*seeds {
		t.Errorf("bert: %d plan-choice placements scored over %d seeds, want 10-18 per seed", p, seeds)
	}
	if by["all"].Scored != sum {
		t.Errorf("all: scored %d, want the sum %d", by["all"].Scored, sum)
	}
	// llama30's profile is llama7's, so its fit is off on every row: each
	// draw warrants a refit, and the refits must fix most of the error.
	l := by["llama30"]
	if l.Refits != seeds || l.Promoted < seeds-1 || !(l.LearnedMAPEPct < 0.6*l.StaticMAPEPct) {
		t.Errorf("llama30: %d refits, %d promoted, MAPE %.1f -> %.1f %%; want %d refits, >= %d promoted, under 60 %% of static",
			l.Refits, l.Promoted, l.StaticMAPEPct, l.LearnedMAPEPct, seeds, seeds-1)
	}
}

// Learning t5's k_3d also mends its plan choice: at placements the learner
// never saw, the learned fit stops preferring the slow 3D plans.
func TestLearnPlanChoiceT5(t *testing.T) {
	scores, err := Learn(context.Background(), subset(t, "t5"), model.DefaultEnv(), LearnOptions{Rows: 10, Seeds: 4, Threshold: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	s := scores[0]
	t.Logf("t5: %d promoted of %d, %d placements, best pick %.1f -> %.1f %%, regret %.2f -> %.2f %%",
		s.Promoted, s.Refits, s.Placements, s.StaticBestPickPct, s.LearnedBestPickPct, s.StaticRegretPct, s.LearnedRegretPct)
	if s.Model != "t5" || s.Promoted == 0 || !(s.LearnedRegretPct < 0.75*s.StaticRegretPct) || s.LearnedBestPickPct < s.StaticBestPickPct {
		t.Errorf("t5 plan choice after learning: %+v; want a promoted refit, regret below 75 %% of static, best pick no worse", s)
	}
}

func TestLearnRejects(t *testing.T) {
	set := subset(t, "bert")
	for name, tc := range map[string]struct {
		opts LearnOptions
		want string
	}{
		"no rows":       {LearnOptions{Rows: 0, Seeds: 1, Threshold: 0.1}, "rows=0"},
		"no seeds":      {LearnOptions{Rows: 3, Seeds: 0, Threshold: 0.1}, "seeds=0"},
		"nan threshold": {LearnOptions{Rows: 3, Seeds: 1, Threshold: math.NaN()}, "threshold=NaN"},
		"inf threshold": {LearnOptions{Rows: 3, Seeds: 1, Threshold: math.Inf(1)}, "threshold=+Inf"},
		"rows of none":  {LearnOptions{Rows: 1000, Seeds: 1, Threshold: 0.1}, "rows=1000: no model"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Learn(context.Background(), set, model.DefaultEnv(), tc.opts)
			if !errors.Is(err, model.ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Learn(%+v) = %v, want ErrBadInput naming %s", tc.opts, err, tc.want)
			}
		})
	}
}

// BenchmarkRefitVit20 is one online refit decision of the daemon: vit's 7
// profile runs and 20 measured multi-node configurations, 10 folds.
func BenchmarkRefitVit20(b *testing.B) {
	set := subset(b, "vit")
	spec := set.Models["vit"].Spec
	fits, err := FitAll(context.Background(), set, model.DefaultEnv())
	if err != nil {
		b.Fatal(err)
	}
	old, err := OwnProfileSamples(set, "vit")
	if err != nil {
		b.Fatal(err)
	}
	var recent []model.Sample
	for _, m := range set.Placements["vit"] {
		if m.Placement.Nodes() < 2 || len(recent) == 20 {
			continue
		}
		s, err := m.Sample(spec)
		if err != nil {
			b.Fatal(err)
		}
		recent = append(recent, s)
	}
	for b.Loop() {
		if _, err := model.Refit(context.Background(), spec, model.DefaultEnv(), fits["vit"].Params, old, recent); err != nil {
			b.Fatal(err)
		}
	}
}

// t5's Megatron (3D) runs are 2-3.4x slower than its DeepSpeed profile
// implies, which no profile parameter can express (docs/benchmarks.md, "Why
// the misses"). Three 3D runs among the reports identify k_3d; the refit
// that moves it (with whatever else only the new runs identify) is
// promoted and predicts the 3D runs it has not seen far better, while the
// data-parallel predictions stay within a point of what they were.
func TestLearnT5ThreeD(t *testing.T) {
	ctx := context.Background()
	set := subset(t, "t5")
	env := model.DefaultEnv()
	spec := set.Models["t5"].Spec
	fits, err := FitAll(ctx, set, env)
	if err != nil {
		t.Fatal(err)
	}
	old, err := OwnProfileSamples(set, "t5")
	if err != nil {
		t.Fatal(err)
	}
	var recent, unseen3D, dp []model.Sample
	for _, m := range set.Placements["t5"] {
		s, err := m.Sample(spec)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case s.Plan.TP == 1 && s.Plan.PP == 1:
			dp = append(dp, s)
		case m.ExecPlan == "221" || m.ExecPlan == "441" || m.ExecPlan == "881":
			recent = append(recent, s)
		default:
			unseen3D = append(unseen3D, s)
		}
	}
	recent = append(recent, dp[:3]...)
	rr, err := model.Refit(ctx, spec, env, fits["t5"].Params, old, recent)
	if err != nil {
		t.Fatal(err)
	}
	if !rr.Better || !slices.Contains(rr.Only, "k_3d") {
		t.Fatalf("refit Better=%v moving %v (held-out %.3f, current %.3f, old %.3f vs %.3f); want k_3d learned",
			rr.Better, rr.Only, rr.HeldOutErr, rr.CurrentErr, rr.OldRefitErr, rr.OldCurrentErr)
	}
	static := model.Predictor{Spec: spec, Params: fits["t5"].Params, Env: env}
	learned := model.Predictor{Spec: spec, Params: rr.Fit.Params, Env: env}
	for _, c := range []struct {
		name       string
		samples    []model.Sample
		ratio, add float64 // learned error at most ratio*static+add
	}{{"unseen 3D", unseen3D, 0.5, 0}, {"data parallel", dp, 1, 0.01}} {
		s, err := model.MeanRelErr(static, c.samples)
		if err != nil {
			t.Fatal(err)
		}
		l, err := model.MeanRelErr(learned, c.samples)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d rows, MAPE %.1f %% -> %.1f %%, k_3d %.2f", c.name, len(c.samples), 100*s, 100*l, rr.Fit.Params.K3D)
		if l > c.ratio*s+c.add {
			t.Errorf("%s: MAPE %.1f %% -> %.1f %%, want at most %.2fx + %.0f points", c.name, 100*s, 100*l, c.ratio, 100*c.add)
		}
	}
}

// One single-node TP run in the profile, as rubick-srun's profiling phase
// adds for Megatron lines, identifies t5's k_3d from the start: with t5's
// `141` row (TP 4 on one node) beside its 7 profile runs, the fit predicts
// the other 19 3D rows far better and the profile runs as well as before.
func TestProfileWithOneTPRun(t *testing.T) {
	ctx := context.Background()
	set := subset(t, "t5")
	env := model.DefaultEnv()
	spec := set.Models["t5"].Spec
	old, err := OwnProfileSamples(set, "t5")
	if err != nil {
		t.Fatal(err)
	}
	var tp, rest []model.Sample
	for _, m := range set.Placements["t5"] {
		s, err := m.Sample(spec)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case m.ExecPlan == "141":
			tp = append(tp, s)
		case s.Plan.TP > 1 || s.Plan.PP > 1:
			rest = append(rest, s)
		}
	}
	if len(tp) != 1 || len(rest) != 19 {
		t.Fatalf("%d TP-4 rows and %d other 3D rows, want 1 and 19", len(tp), len(rest))
	}
	profile, err := model.Fit(ctx, spec, env, old, model.FitOptions{AllowPartial: true})
	if err != nil {
		t.Fatal(err)
	}
	withTP, err := model.Fit(ctx, spec, env, append(slices.Clone(old), tp...), model.FitOptions{AllowPartial: true})
	if err != nil {
		t.Fatal(err)
	}
	mape := func(p model.Params, s []model.Sample) float64 {
		e, err := model.MeanRelErr(model.Predictor{Spec: spec, Params: p, Env: env}, s)
		if err != nil {
			t.Fatal(err)
		}
		return 100 * e
	}
	t.Logf("t5 3D rows: MAPE %.1f %% -> %.1f %%; profile runs %.1f %% -> %.1f %%; k_3d %.2f",
		mape(profile.Params, rest), mape(withTP.Params, rest), mape(profile.Params, old), mape(withTP.Params, old), withTP.Params.K3D)
	if slices.Contains(withTP.Pinned, "k_3d") || mape(withTP.Params, rest) > 0.4*mape(profile.Params, rest) ||
		mape(withTP.Params, old) > mape(profile.Params, old)+1 {
		t.Errorf("a TP run in the profile should identify k_3d and cut the 3D error by more than half, keeping the profile runs")
	}
}

// A model too large for a profiling phase's plain data-parallel runs
// measures its ZeRO ones only, and rubickd fits on them once the phase is
// over if there are launch.MinPartialProfileRuns of them. Replayed on the
// single-node rows of those runs (ZeRO-Offload on 1, 2 and 8 GPUs, ZeRO-DP
// on 8) and scored on every other row: a fit on any three predicts each
// model as well as its shipped fit, within 2 points; on one, all the
// priors miss goes into k_const (llama7's other rows 149 % off); on two,
// vit's worst pair is 8 points worse.
func TestPartialFitFromPhaseRuns(t *testing.T) {
	ctx := context.Background()
	names := []string{"bert", "gpt2", "llama7", "roberta", "t5", "vit"}
	set := subset(t, names...)
	env := model.DefaultEnv()
	fits, err := FitAll(ctx, set, env)
	if err != nil {
		t.Fatal(err)
	}
	phaseRun := func(m Measurement) bool {
		if len(m.Placement) != 1 {
			return false
		}
		g := m.Placement[0]
		return m.ExecPlan == "zero-offload" && (g == 1 || g == 2 || g == 8) || m.ExecPlan == "zero-dp" && g == 8
	}
	for _, name := range names {
		spec := set.Models[name].Spec
		var phase, rest []model.Sample
		for _, m := range set.Placements[name] {
			s, err := m.Sample(spec)
			if err != nil {
				t.Fatal(err)
			}
			if phaseRun(m) {
				phase = append(phase, s)
			} else {
				rest = append(rest, s)
			}
		}
		mape := func(p model.Params) float64 {
			e, err := model.MeanRelErr(model.Predictor{Spec: spec, Params: p, Env: env}, rest)
			if err != nil {
				t.Fatal(err)
			}
			return 100 * e
		}
		shipped := mape(fits[name].Params)
		worst := map[int]float64{}
		for mask := 1; mask < 1<<len(phase); mask++ {
			var runs []model.Sample
			for i, s := range phase {
				if mask&(1<<i) != 0 {
					runs = append(runs, s)
				}
			}
			res, err := model.Fit(ctx, spec, env, runs, model.FitOptions{AllowPartial: true})
			if err != nil {
				t.Fatal(err)
			}
			worst[len(runs)] = max(worst[len(runs)], mape(res.Params))
		}
		t.Logf("%s: %d phase runs, %d other rows: shipped fit %.1f %%, worst fit on 1 run %.1f %%, 2: %.1f %%, 3: %.1f %%",
			name, len(phase), len(rest), shipped, worst[1], worst[2], worst[3])
		if w := worst[launch.MinPartialProfileRuns]; w > shipped+2 {
			t.Errorf("%s: a fit on %d phase runs is %.1f %% off the other rows, the shipped fit %.1f %%", name, launch.MinPartialProfileRuns, w, shipped)
		}
		if name == "llama7" && worst[1] < 10*shipped {
			t.Errorf("llama7: a fit on one run is %.1f %% off the other rows, want far more: the run cannot tell k_const from the rest", worst[1])
		}
	}
}
