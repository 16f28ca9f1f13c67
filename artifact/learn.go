package artifact

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/rubick-sched/rubick/model"
)

// LearnOptions tune Learn.
type LearnOptions struct {
	// Rows is how many measured rows of each model reach the learner, drawn
	// at random without replacement.
	Rows int
	// Seeds is how many independent draws are replayed.
	Seeds int
	// Threshold is the learner's refit threshold, rubickd's
	// samples.refit_threshold.
	Threshold float64
	// ExcludeSuspect leaves the rows SuspectReason flags out of the scores
	// (they can still be drawn, as a cluster would measure them).
	ExcludeSuspect bool
}

// LearnScore is one model's (or "all") accuracy on the rows the learner
// did not see, with the fit from the profile alone and with the fit the
// learner ended with, summed over every seed.
type LearnScore struct {
	Model string `json:"model"`
	// Scored is the number of held-out row predictions scored (rows x seeds).
	Scored int `json:"scored"`
	// StaticMAPEPct uses the profile fit, LearnedMAPEPct the learner's.
	StaticMAPEPct  float64 `json:"static_mape_pct"`
	LearnedMAPEPct float64 `json:"learned_mape_pct"`
	// Refits counts the seeds whose draw warranted a refit, Promoted those
	// where the refit replaced the profile fit.
	Refits   int `json:"refits"`
	Promoted int `json:"promoted"`
	// Placements counts the plan-choice placements scored (placements x
	// seeds): those with several measured plans and no drawn row, so the
	// learner never saw how fast any plan there ran.
	Placements int `json:"placements"`
	// Static/Learned BestPickPct and RegretPct score the plan each fit
	// ranks first there, as rubick model validate does.
	StaticBestPickPct  float64 `json:"static_best_pick_pct"`
	LearnedBestPickPct float64 `json:"learned_best_pick_pct"`
	StaticRegretPct    float64 `json:"static_regret_pct_avg"`
	LearnedRegretPct   float64 `json:"learned_regret_pct_avg"`
}

// Learn replays rubickd's online learning on the measured rows: for each
// model and seed, Rows measured rows reach the learner as if jobs had
// reported them after the profile fit; when they warrant a refit
// (model.Drift.Refittable), the refit replaces the fit if model.Refit finds
// it better. Every other row is then predicted by the profile fit and by
// the learner's fit. It answers how much the learning loop recovers of
// what single-node profiles cannot see.
func Learn(ctx context.Context, set *Set, env model.Env, opts LearnOptions) ([]LearnScore, error) {
	if opts.Rows < 1 || opts.Seeds < 1 || !(opts.Threshold >= 0) || math.IsInf(opts.Threshold, 1) {
		return nil, fmt.Errorf("%w: learn rows=%d seeds=%d threshold=%v: want rows >= 1, seeds >= 1, a finite threshold >= 0",
			model.ErrBadInput, opts.Rows, opts.Seeds, opts.Threshold)
	}
	fits, err := FitAll(ctx, set, env)
	if err != nil {
		return nil, err
	}
	type agg struct {
		n                int
		static, learned  float64
		refits, promoted int
		// plan choice, static then learned
		places int
		hits   [2]int
		regret [2]float64
	}
	per := map[string]*agg{"all": {}}
	var names []string
	for _, name := range set.ModelNames() {
		fit, ok := fits[name]
		rows := set.Placements[name]
		if !ok || len(rows) <= opts.Rows {
			continue
		}
		names = append(names, name)
		a := &agg{}
		per[name] = a
		spec := set.Models[name].Spec
		old, err := OwnProfileSamples(set, name)
		if err != nil {
			return nil, err
		}
		samples := make([]model.Sample, len(rows))
		for i, m := range rows {
			if samples[i], err = m.Sample(spec); err != nil {
				return nil, fmt.Errorf("%s placements.csv line %d: %w", name, m.Line, err)
			}
		}
		static := model.Predictor{Spec: spec, Params: fit.Params, Env: env}
		for seed := range opts.Seeds {
			draw := rand.New(rand.NewPCG(uint64(seed), nameSeed(name))).Perm(len(rows))[:opts.Rows]
			recent := make([]model.Sample, len(draw))
			for i, j := range draw {
				recent[i] = samples[j]
			}
			learned := static
			if d, usable := model.DriftOf(static, old, recent); d.Refittable(opts.Threshold) {
				a.refits++
				rr, err := model.Refit(ctx, spec, env, fit.Params, old, usable)
				if err != nil {
					return nil, fmt.Errorf("learn %s seed %d: %w", name, seed, err)
				}
				if rr.Better {
					a.promoted++
					learned.Params = rr.Fit.Params
				}
			}
			seen := map[string]bool{} // placements of drawn rows
			for _, j := range draw {
				seen[rotationKey(rows[j].Placement)] = true
			}
			var choice [2][]RowPrediction
			for j, m := range rows {
				if slices.Contains(draw, j) || (opts.ExcludeSuspect && SuspectReason(name, m) != "") {
					continue
				}
				if !seen[rotationKey(m.Placement)] {
					for i, p := range []model.Predictor{static, learned} {
						bd, err := p.Predict(samples[j].Plan, samples[j].Resources)
						if err != nil {
							return nil, fmt.Errorf("%s placements.csv line %d: %w", name, m.Line, err)
						}
						choice[i] = append(choice[i], RowPrediction{Model: name, ExecPlan: m.ExecPlan,
							Placement: m.Placement, MeasuredS: m.IterS, PredictedS: bd.Iter})
					}
				}
				one := samples[j : j+1]
				s, err := model.MeanRelErr(static, one)
				if err != nil {
					return nil, fmt.Errorf("%s placements.csv line %d: %w", name, m.Line, err)
				}
				l, err := model.MeanRelErr(learned, one)
				if err != nil {
					return nil, fmt.Errorf("%s placements.csv line %d: %w", name, m.Line, err)
				}
				for _, x := range []*agg{a, per["all"]} {
					x.n++
					x.static += s
					x.learned += l
				}
			}
			for i, rs := range choice {
				for _, pc := range planChoice(rs, []string{name}) {
					if pc.Model != name {
						continue
					}
					for _, x := range []*agg{a, per["all"]} {
						if i == 0 {
							x.places += pc.Placements
						}
						x.hits[i] += int(math.Round(pc.BestPickPct * float64(pc.Placements) / 100))
						x.regret[i] += pc.RegretPctAvg * float64(pc.Placements)
					}
				}
			}
		}
		per["all"].refits += a.refits
		per["all"].promoted += a.promoted
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: learn rows=%d: no model has more measured rows than that", model.ErrBadInput, opts.Rows)
	}
	var out []LearnScore
	for _, name := range append(names, "all") {
		a := per[name]
		if a.n == 0 {
			continue
		}
		ls := LearnScore{Model: name, Scored: a.n, StaticMAPEPct: 100 * a.static / float64(a.n),
			LearnedMAPEPct: 100 * a.learned / float64(a.n), Refits: a.refits, Promoted: a.promoted, Placements: a.places}
		if a.places > 0 {
			n := float64(a.places)
			ls.StaticBestPickPct, ls.LearnedBestPickPct = 100*float64(a.hits[0])/n, 100*float64(a.hits[1])/n
			ls.StaticRegretPct, ls.LearnedRegretPct = a.regret[0]/n, a.regret[1]/n
		}
		out = append(out, ls)
	}
	return out, nil
}

// nameSeed makes each model's draws independent of the others'.
func nameSeed(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}
