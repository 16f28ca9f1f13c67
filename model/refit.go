package model

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
)

// maxRefitFolds bounds the fits Refit's cross-validation runs: with more
// new configurations than this, they are dealt round-robin into this many
// folds.
const maxRefitFolds = 10

// oldTolerance is how much worse, in mean relative error, a refit may
// predict the configurations the current fit was made from (and that were
// not measured again) than the current fit does: fitting new evidence may
// cost the old a little, not more than half of rubickd's default 10 %
// refit threshold.
const oldTolerance = 0.05

// RefitResult is a refit of a model type on new evidence, with the
// evidence for replacing the current parameters by it.
type RefitResult struct {
	// Fit is fitted on every sample, old and recent.
	Fit FitResult
	// Configs is the number of distinct configurations (plan, placement,
	// CPUs) among the recent samples.
	Configs int
	// CurrentErr is the mean relative error of the current parameters on
	// the recent configurations (each at the median of its samples).
	CurrentErr float64
	// HeldOutErr is the same error for fits made without the configuration
	// they predict (leave-one-configuration-out over the recent ones): what
	// the refit is expected to make of a configuration it has not seen.
	// It is +Inf with fewer than two recent configurations.
	HeldOutErr float64
	// OldCurrentErr and OldRefitErr are the mean relative errors of the
	// current parameters and of the refit on the old configurations that
	// were not measured again (0 when there are none).
	OldCurrentErr, OldRefitErr float64
	// Better says the refit should replace the current parameters:
	// HeldOutErr < CurrentErr, and OldRefitErr is at most oldTolerance
	// above OldCurrentErr.
	Better bool
	// Only lists the parameters the refit moved when it moved only those
	// the old samples could not identify; nil when it could move all.
	Only []string
}

// Refit fits spec on old and recent samples, starting from and pinning at
// cur what they do not identify, and decides whether the result should
// replace cur.
//
// A fit on more samples always explains them at least as well as cur, and
// its RMSLE over them cannot be compared with cur's over fewer, so neither
// says whether the refit predicts the next placement better. Refit asks
// that question directly: each recent configuration is predicted by a fit
// made without it, and the refit wins when those predictions beat cur's,
// provided it still predicts the old configurations about as well as cur.
// On the artifact's data this promotes the refits that fix llama30 (whose
// profile is a copy of llama7's) and rejects those that chase vit's
// bimodal rows (docs/model.md, "Online refits").
//
// When the recent samples identify parameters the old ones could not (k_3d
// once 3D plans have run, k_sync once runs crossed nodes), Refit also tries
// a fit that moves only those, leaving what the old samples pinned down as
// it is, and keeps whichever of the two passes both checks with the lower
// held-out error. New evidence about a new term then need not bend the
// others, which is what the old-sample check would reject.
//
// Samples of one configuration are collapsed to their median iteration
// time first, so a job that reports often weighs no more than one that
// reports once.
func Refit(ctx context.Context, spec Spec, env Env, cur Params, old, recent []Sample) (RefitResult, error) {
	recentC := Collapse(recent)
	// A configuration measured again since the current fit is represented
	// by its new measurements only: the job may run differently now.
	recentKeys := map[string]bool{}
	for _, s := range recentC {
		recentKeys[ConfigKey(s)] = true
	}
	var base []Sample
	for _, s := range Collapse(old) {
		if !recentKeys[ConfigKey(s)] {
			base = append(base, s)
		}
	}
	curP := Predictor{Spec: spec, Params: cur, Env: env}
	r := refit{ctx: ctx, cur: curP, base: base, recent: recentC}
	var err error
	if r.curErr, err = MeanRelErr(curP, recentC); err != nil {
		return RefitResult{}, err
	}
	if r.oldCurErr, err = MeanRelErr(curP, base); err != nil {
		return RefitResult{}, err
	}
	out, err := r.candidate(nil)
	if err != nil {
		return RefitResult{}, err
	}
	only, err := newTerms(curP, base, append(slices.Clone(base), recentC...))
	if err != nil || only == nil {
		return out, err
	}
	narrow, err := r.candidate(only)
	if err != nil {
		return RefitResult{}, err
	}
	if narrow.Better && (!out.Better || narrow.HeldOutErr < out.HeldOutErr) {
		return narrow, nil
	}
	return out, nil
}

// refit is one Refit call's data: the current predictor, the old
// configurations not measured again, the recent ones, and the current
// predictor's errors on both.
type refit struct {
	ctx               context.Context
	cur               Predictor
	base, recent      []Sample
	curErr, oldCurErr float64
}

// candidate fits every sample, moving only the parameters only names (all
// when nil), and judges the result.
func (r refit) candidate(only []string) (RefitResult, error) {
	spec, env := r.cur.Spec, r.cur.Env
	opts := FitOptions{AllowPartial: true, Prior: &r.cur.Params, Only: only}
	all := append(slices.Clone(r.base), r.recent...)
	fit, err := Fit(r.ctx, spec, env, all, opts)
	if err != nil {
		return RefitResult{}, fmt.Errorf("refit %s: %w", spec.Name, err)
	}
	out := RefitResult{Fit: fit, Only: only, Configs: len(r.recent), HeldOutErr: math.Inf(1),
		CurrentErr: r.curErr, OldCurrentErr: r.oldCurErr}
	if len(r.recent) < 2 {
		return out, nil
	}
	folds := min(len(r.recent), maxRefitFolds)
	held := 0.0
	for f := range folds {
		train := slices.Clone(r.base)
		var test []Sample
		for i, s := range r.recent {
			if i%folds == f {
				test = append(test, s)
			} else {
				train = append(train, s)
			}
		}
		fr, err := Fit(r.ctx, spec, env, train, opts)
		if err != nil {
			return RefitResult{}, fmt.Errorf("refit %s: fold %d: %w", spec.Name, f, err)
		}
		p := Predictor{Spec: spec, Params: fr.Params, Env: env}
		for _, s := range test {
			e, err := relErr(p, s)
			if err != nil {
				return RefitResult{}, err
			}
			held += e
		}
	}
	out.HeldOutErr = held / float64(len(r.recent))
	if out.OldRefitErr, err = MeanRelErr(Predictor{Spec: spec, Params: fit.Params, Env: env}, r.base); err != nil {
		return RefitResult{}, err
	}
	out.Better = out.HeldOutErr < out.CurrentErr && out.OldRefitErr <= out.OldCurrentErr+oldTolerance
	return out, nil
}

// newTerms names the parameters the samples of all identify and those of
// old alone do not, or returns nil when there are none, or when old is
// empty or identifies nothing (the narrow fit would then be the full one).
func newTerms(p Predictor, old, all []Sample) ([]string, error) {
	if len(old) == 0 {
		return nil, nil
	}
	fo, err := p.fitSamples(old)
	if err != nil {
		return nil, err
	}
	fa, err := p.fitSamples(all)
	if err != nil {
		return nil, err
	}
	was, is := identifiable(p, fo), identifiable(p, fa)
	var names []string
	kept := false
	for _, j := range identOrder {
		switch {
		case is[j] && !was[j]:
			names = append(names, paramNames[j])
		case is[j]:
			kept = true
		}
	}
	if !kept {
		return nil, nil
	}
	return names, nil
}

// Drift is what recent samples say about a predictor: how many
// configurations they cover and how far off the predictor is on them.
type Drift struct {
	Configs int     // recent configurations
	Total   int     // configurations of old and recent samples together
	MeanErr float64 // mean relative error over the recent configurations
}

// Refittable reports whether the drift warrants a refit: the error exceeds
// threshold, there are at least two recent configurations (so Refit can
// hold one out), and old and recent samples cover at least the seven
// configurations a first fit needs (minSamples). Fewer let a refit match two
// or three runs exactly with a degenerate tuple: a llama30 refit from two
// of its 3D runs traded k_bwd for a large k_const, which misprices every
// llama30 configuration with a short iteration.
func (d Drift) Refittable(threshold float64) bool {
	return d.Configs >= 2 && d.Total >= minSamples && d.MeanErr > threshold
}

// DriftOf measures p on recent samples, each configuration at the median of
// its samples, and counts the configurations of old and recent together.
// old must be samples p can price (see Priceable), as Refit needs them.
// Recent samples p cannot price (a plan the spec rejects) are left out; the
// ones that remain are returned, so the caller can refit on them.
func DriftOf(p Predictor, old, recent []Sample) (Drift, []Sample) {
	usable := Priceable(p, recent)
	c := Collapse(usable)
	e, _ := MeanRelErr(p, c) // every sample of c was priced above
	total := len(Collapse(append(slices.Clone(old), c...)))
	return Drift{Configs: len(c), Total: total, MeanErr: e}, usable
}

// Priceable returns the samples p can price, each at its own global batch
// (Predictor.ForPlan): a sample stored under an older spec of its model
// type (other heads, say) may not be.
func Priceable(p Predictor, samples []Sample) []Sample {
	out := make([]Sample, 0, len(samples))
	for _, s := range samples {
		if _, err := p.ForPlan(s.Plan).Predict(s.Plan, s.Resources); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// MeanRelErr is the mean of |predicted - measured| / measured over samples
// (0 for none).
func MeanRelErr(p Predictor, samples []Sample) (float64, error) {
	sum := 0.0
	for _, s := range samples {
		e, err := relErr(p, s)
		if err != nil {
			return 0, err
		}
		sum += e
	}
	return sum / float64(max(len(samples), 1)), nil
}

func relErr(p Predictor, s Sample) (float64, error) {
	b, err := p.ForPlan(s.Plan).Predict(s.Plan, s.Resources)
	if err != nil {
		return 0, err
	}
	return math.Abs(b.Iter-s.IterS) / s.IterS, nil
}

// ConfigKey identifies what a sample measured: the plan on a placement
// with a CPU count. Samples with one key are one configuration.
func ConfigKey(s Sample) string {
	return fmt.Sprintf("%s@%s/%d", s.Plan, s.Resources.Placement, s.Resources.CPUs)
}

// Collapse returns one sample per configuration (plan, placement, CPUs), in
// order of first appearance, with the median iteration time of that
// configuration's samples; measured phases are kept from the first.
func Collapse(samples []Sample) []Sample {
	idx := map[string]int{}
	var out []Sample
	var times [][]float64
	for _, s := range samples {
		k := ConfigKey(s)
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, s)
			times = append(times, nil)
		}
		times[i] = append(times[i], s.IterS)
	}
	for i, ts := range times {
		if len(ts) > 1 {
			sort.Float64s(ts)
			n := len(ts)
			out[i].IterS = (ts[(n-1)/2] + ts[n/2]) / 2
		}
	}
	return out
}
