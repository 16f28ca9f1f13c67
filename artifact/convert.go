package artifact

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/rubick-sched/rubick/model"
)

// MeasuredThreadsPerGPU is the CPU Adam thread count per training process
// the artifact's measurements ran with: every ZeRO-Offload profile row uses
// 4, and placements.csv repeats the profile's times for the same
// configuration (bert zero-offload on 1 GPU: 975 ms in both).
const MeasuredThreadsPerGPU = 4

// ProfileSamples converts the profiling runs of one model to fit samples.
//
// strategy digits: the first is the forward multiplier (2 = activation
// checkpointing), the second the accumulation steps, the last the ZeRO type
// (0 none, 1 ZeRO-Offload with ZeRO stage 2, 2 ZeRO-DP stage 2). CPU threads
// are per training process, so the sample holds num_cpu_threads x gpus CPUs.
// Times are converted from ms to seconds, and the measured compute and
// optimizer phases ride along.
func ProfileSamples(spec model.Spec, rows []ProfileRow) ([]model.Sample, error) {
	out := make([]model.Sample, 0, len(rows))
	for i, r := range rows {
		s, err := profileSample(spec, r)
		if err != nil {
			return nil, fmt.Errorf("%s profile row %d: %w", spec.Name, i+1, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func profileSample(spec model.Spec, r ProfileRow) (model.Sample, error) {
	st := r.Strategy
	if len(st) < 3 {
		return model.Sample{}, fmt.Errorf("%w: strategy=%q needs at least 3 digits", ErrFormat, st)
	}
	digit := func(i int) (int, error) {
		c := st[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: strategy=%q: %q is not a digit", ErrFormat, st, c)
		}
		return int(c - '0'), nil
	}
	fwdMul, err := digit(0)
	if err != nil {
		return model.Sample{}, err
	}
	accum, err := digit(1)
	if err != nil {
		return model.Sample{}, err
	}
	zt, err := digit(len(st) - 1)
	if err != nil {
		return model.Sample{}, err
	}
	if fwdMul != 1 && fwdMul != 2 {
		return model.Sample{}, fmt.Errorf("%w: strategy=%q: forward multiplier %d is not 1 or 2", ErrFormat, st, fwdMul)
	}
	if accum < 1 {
		return model.Sample{}, fmt.Errorf("%w: strategy=%q: accumulation steps %d must be >= 1", ErrFormat, st, accum)
	}
	if r.IsTP || r.IsPP {
		return model.Sample{}, fmt.Errorf("%w: is_tp/is_pp profile rows carry no TP/PP degree", ErrFormat)
	}
	if r.Nodes < 1 || r.GPUs < r.Nodes || r.GPUs%r.Nodes != 0 {
		return model.Sample{}, fmt.Errorf("%w: gpus=%d nodes=%d do not split evenly", ErrFormat, r.GPUs, r.Nodes)
	}
	plan := model.Plan{DP: r.GPUs, TP: 1, PP: 1, Accum: accum, Checkpoint: fwdMul == 2}
	switch zt {
	case 0:
	case 1:
		plan.ZeRO, plan.Offload = 2, true
	case 2:
		plan.ZeRO = 2
	default:
		return model.Sample{}, fmt.Errorf("%w: strategy=%q: zero type %d is not 0, 1 or 2", ErrFormat, st, zt)
	}
	if spec.GlobalBatch%(plan.DP*accum) != 0 {
		return model.Sample{}, fmt.Errorf("%w: global batch %d does not split over gpus=%d x accumulation %d", ErrFormat, spec.GlobalBatch, plan.DP, accum)
	}
	plan.MicroBatch = spec.GlobalBatch / (plan.DP * accum)
	pl := make(model.Placement, r.Nodes)
	for i := range pl {
		pl[i] = r.GPUs / r.Nodes
	}
	if !(r.IterMs > 0) {
		return model.Sample{}, fmt.Errorf("%w: iter_time=%v must be > 0", ErrFormat, r.IterMs)
	}
	return model.Sample{
		Plan:      plan,
		Resources: model.Resources{Placement: pl, CPUs: r.CPUThreads * r.GPUs},
		IterS:     r.IterMs / 1000,
		FwdS:      r.FwdMs / 1000,
		CCS:       r.TccMs / 1000,
		OptS:      r.OptMs / 1000,
	}, nil
}

// FitAll fits every model of set on its own profile/ samples only, with a
// partial fit where the profile cannot identify every parameter (the
// unidentified ones stay at model.Priors and are listed in Pinned). Models
// without profile rows are left out of the result.
//
// A profile whose rows were measured on a different model size (their
// parameter_size is more than 5 % off the spec) cannot be priced with the
// spec; when another model has the identical profile and matches its size,
// as llama30's copy of llama7's does, the result is that model's fit with
// Source naming it. Any other mismatch is an error.
func FitAll(ctx context.Context, set *Set, env model.Env) (map[string]model.FitResult, error) {
	out := make(map[string]model.FitResult, len(set.Models))
	borrowed := map[string]string{}
	for _, name := range set.ModelNames() {
		rows := set.Profiles[name]
		if len(rows) == 0 {
			continue
		}
		spec := set.Models[name].Spec
		if !profileMatches(spec, rows) {
			src, err := profileSource(set, name)
			if err != nil {
				return nil, err
			}
			borrowed[name] = src
			continue
		}
		samples, err := ProfileSamples(spec, rows)
		if err != nil {
			return nil, err
		}
		res, err := model.Fit(ctx, spec, env, samples, model.FitOptions{AllowPartial: true})
		if err != nil {
			return nil, fmt.Errorf("fit %s: %w", name, err)
		}
		out[name] = res
	}
	for name, src := range borrowed {
		out[name] = borrowedFit(out[src], src, name)
	}
	return out, nil
}

// FitOne is FitAll's fit of one model of set, which may need another
// model's profile (llama30's is a copy of llama7's). It wraps ErrNoProfile
// when name has no profile rows.
func FitOne(ctx context.Context, set *Set, env model.Env, name string) (model.FitResult, error) {
	rows := set.Profiles[name]
	if len(rows) == 0 {
		return model.FitResult{}, fmt.Errorf("%w: %s has none in %s/ to fit it on; rubickd fits it on the profiling runs of its first job",
			ErrNoProfile, name, profilePath(name))
	}
	src := name
	if !profileMatches(set.Models[name].Spec, rows) {
		var err error
		if src, err = profileSource(set, name); err != nil {
			return model.FitResult{}, err
		}
	}
	samples, err := ProfileSamples(set.Models[src].Spec, set.Profiles[src])
	if err != nil {
		return model.FitResult{}, err
	}
	res, err := model.Fit(ctx, set.Models[src].Spec, env, samples, model.FitOptions{AllowPartial: true})
	if err != nil {
		return model.FitResult{}, fmt.Errorf("fit %s: %w", src, err)
	}
	if src != name {
		res = borrowedFit(res, src, name)
	}
	return res, nil
}

// profileSource finds the model whose identical profile name's rows copy,
// for a profile measured on another model size than name's spec.
func profileSource(set *Set, name string) (string, error) {
	rows := set.Profiles[name]
	for _, other := range set.ModelNames() {
		if other != name && profileMatches(set.Models[other].Spec, set.Profiles[other]) && slices.Equal(rows, set.Profiles[other]) {
			return other, nil
		}
	}
	return "", fmt.Errorf("%w: %s profile: parameter_size=%.0fM does not match the spec's %.0f parameters",
		ErrFormat, name, rows[0].ParamsM, set.Models[name].Spec.Params)
}

// borrowedFit is src's fit as name's, saying where it comes from.
func borrowedFit(res model.FitResult, src, name string) model.FitResult {
	res.Pinned = slices.Clone(res.Pinned)
	res.Source = fmt.Sprintf("profile of %s (the %s profile is a copy of it)", src, name)
	return res
}

// OwnProfileSamples returns the profiling runs FitAll fits name on, or nil
// when name has none or its profile is a copy of another model's (FitAll
// then borrows that model's fit, and the runs do not fit name's spec).
func OwnProfileSamples(set *Set, name string) ([]model.Sample, error) {
	rows := set.Profiles[name]
	m, ok := set.Models[name]
	if len(rows) == 0 || !ok || !profileMatches(m.Spec, rows) {
		return nil, nil
	}
	return ProfileSamples(m.Spec, rows)
}

// profileMatches reports whether profile rows were measured on a model of
// spec's size: parameter_size is in units of 2^20 parameters.
func profileMatches(spec model.Spec, rows []ProfileRow) bool {
	for _, r := range rows {
		if math.Abs(r.ParamsM*(1<<20)-spec.Params) > 0.05*spec.Params {
			return false
		}
	}
	return true
}
