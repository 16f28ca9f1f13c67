package model

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/gonum/optimize"
)

// Fit tuning constants.
const (
	// minSamples and minOffloadSamples are the samples a fit of all seven
	// parameters needs: one per parameter, and one ZeRO-Offload run per
	// parameter only offload runs see (k_opt_off, k_off, k_swap).
	minSamples        = 7
	minOffloadSamples = 3
	// defaultStarts is the number of optimizer starts when FitOptions.Starts is 0.
	defaultStarts = 4
	// ridge pulls the fit gently towards the priors so that a flat direction
	// of the objective (a parameter the samples barely see) stays at its
	// prior instead of wandering to a bound; it is small enough that it
	// moves the RMSLE of the shipped fits by less than 0.1 %.
	ridge = 1e-8
	// identRel and identAbs decide whether the samples identify a parameter:
	// its sensitivity column (see identifiable), after removing the
	// directions of the parameters already chosen, must keep identRel of its
	// norm and still move the predictions by identAbs (0.5 %) RMS.
	identRel = 0.1
	identAbs = 0.005
)

// identOrder is the order in which parameters are offered to the
// identifiability check. The weakest priors come first: the constant and
// the CPU Adam speed vary most between setups, while a backward pass of
// about twice the forward is a good default when the samples cannot tell
// it from the CPU optimizer (ZeRO-Offload-only profiles scale both as 1/d).
// k_3d comes last: only 3D samples see it, and on those it competes with
// k_bwd, which DP samples also pin down.
var identOrder = [nParams]int{6, 3, 0, 2, 1, 5, 4, 7} // const, opt_off, bwd, opt, sync, swap, off, 3d

// fitSample is a sample with its layout resolved once.
type fitSample struct {
	plan Plan
	res  Resources
	lo   layout
	logT float64
	// spec is the model type's at the sample's own global batch (its
	// plan's dp*micro_batch*accum): a job trains with its launch line's.
	spec Spec
}

// at is p pricing f: p's parameters on f's spec.
func (p Predictor) at(f fitSample) Predictor {
	p.Spec = f.spec
	return p
}

// Fit fits the seven parameters of spec in env to samples by minimising the
// RMSLE of predicted iteration times, bounded, from several deterministic
// starts. It wraps ErrTooFewSamples naming what is missing.
//
// Only iteration times enter the objective: the artifact's measured phases
// do not split the iteration the way the equations do (its ZeRO-Offload
// Tcc includes the gradient offload and its llama Topt is 1 ms), and
// fitting them made the iteration fit worse (docs/model.md).
//
// With FitOptions.AllowPartial, fewer samples than minSamples (and, with
// NeedOffload, minOffloadSamples) are accepted: parameters the samples
// cannot identify (see docs/model.md) stay at Priors and are listed in
// FitResult.Pinned. The check runs on every fit, so a large but one-sided
// sample set also pins what it cannot see.
func Fit(ctx context.Context, spec Spec, env Env, samples []Sample, opts FitOptions) (FitResult, error) {
	if err := spec.Validate(); err != nil {
		return FitResult{}, err
	}
	prior := Priors()
	if opts.Prior != nil {
		prior = *opts.Prior
	}
	base := Predictor{Spec: spec, Params: prior, Env: env}
	if err := base.checkModel(); err != nil {
		return FitResult{}, err
	}
	fs, err := base.fitSamples(samples)
	if err != nil {
		return FitResult{}, err
	}
	offload := 0
	for _, s := range samples {
		if s.Plan.Offload {
			offload++
		}
	}
	var missing []string
	if len(fs) < minSamples {
		missing = append(missing, fmt.Sprintf("%d samples (need >= %d)", len(fs), minSamples))
	}
	if opts.NeedOffload && offload < minOffloadSamples {
		missing = append(missing, fmt.Sprintf("%d ZeRO-Offload samples (need >= %d)", offload, minOffloadSamples))
	}
	if len(fs) == 0 || (len(missing) > 0 && !opts.AllowPartial) {
		if len(missing) == 0 {
			missing = append(missing, "0 samples")
		}
		return FitResult{}, fmt.Errorf("%w: %s: have %v", ErrTooFewSamples, spec.Name, missing)
	}
	free := identifiable(base, fs)
	if opts.Only != nil {
		only, err := paramMask(opts.Only)
		if err != nil {
			return FitResult{}, err
		}
		for j := range free {
			free[j] = free[j] && only[j]
		}
	}
	obj := objective{base: base, samples: fs, free: free, prior: prior.vec()}
	starts := opts.Starts
	if starts <= 0 {
		starts = defaultStarts
	}
	if !slices.Contains(free[:], true) {
		// Nothing to move (the samples identify none of the parameters Only
		// allows): the prior is the fit, and the optimizer has no dimension.
		starts = 0
	}
	bestF := math.Inf(1)
	var bestU []float64
	for s := 0; s < starts; s++ {
		if err := ctx.Err(); err != nil {
			return FitResult{}, fmt.Errorf("fit %s: %w", spec.Name, err)
		}
		u0 := obj.start(s)
		res, err := optimize.Minimize(optimize.Problem{Func: obj.value, Grad: obj.grad}, u0,
			&optimize.Settings{MajorIterations: 200, Converger: &optimize.FunctionConverge{Absolute: 1e-12, Relative: 1e-10, Iterations: 20}},
			&optimize.BFGS{})
		if res == nil {
			return FitResult{}, fmt.Errorf("fit %s: start %d: %w", spec.Name, s, err)
		}
		// A failed line search still leaves the best point found; keep it.
		if res.F < bestF {
			bestF, bestU = res.F, append([]float64(nil), res.X...)
		}
	}
	if bestU == nil && len(obj.start(0)) > 0 {
		// Every start priced the samples at an infinite or NaN loss (a
		// parameter free to fit, and no point to read it from).
		return FitResult{}, fmt.Errorf("fit %s: %w: no start reached a finite error (env %v)", spec.Name, ErrBadInput, env)
	}
	params := paramsFromVec(obj.params(bestU))
	out := FitResult{Params: params, Samples: len(fs)}
	for _, j := range identOrder {
		if !free[j] {
			out.Pinned = append(out.Pinned, paramNames[j])
		}
	}
	pred := Predictor{Spec: spec, Params: params, Env: env}
	var sq, ape float64
	for _, f := range fs {
		it := pred.at(f).price(f.plan, f.res, f.lo).Iter
		r := math.Log(it) - f.logT
		sq += r * r
		m := math.Exp(f.logT)
		ape += math.Abs(it-m) / m
	}
	out.RMSLE = math.Sqrt(sq / float64(len(fs)))
	out.MAPE = 100 * ape / float64(len(fs))
	return out, nil
}

// paramMask marks the parameters names lists.
func paramMask(names []string) ([nParams]bool, error) {
	var m [nParams]bool
	for _, n := range names {
		j := slices.Index(paramNames[:], n)
		if j < 0 {
			return m, fmt.Errorf("%w: fit only=%q: unknown parameter (known: %s)", ErrBadInput, n, strings.Join(paramNames[:], ", "))
		}
		m[j] = true
	}
	return m, nil
}

// fitSamples checks samples and resolves their layouts.
func (p Predictor) fitSamples(samples []Sample) ([]fitSample, error) {
	fs := make([]fitSample, 0, len(samples))
	for i, s := range samples {
		if math.IsNaN(s.IterS) || math.IsInf(s.IterS, 0) || s.IterS <= 0 {
			return nil, fmt.Errorf("%w: sample %d: iter_s=%v must be a finite number > 0", ErrBadInput, i, s.IterS)
		}
		q := p.ForPlan(s.Plan)
		if err := q.checkPlan(s.Plan, s.Resources); err != nil {
			return nil, fmt.Errorf("sample %d: %w", i, err)
		}
		lo := q.analyze(s.Plan, s.Resources.Placement)
		fs = append(fs, fitSample{plan: s.Plan, res: s.Resources, lo: lo, logT: math.Log(s.IterS), spec: q.Spec})
	}
	return fs, nil
}

// objective is the fit's loss over unconstrained variables u: parameter j
// is lo + exp(u_j), projected onto its upper bound.
type objective struct {
	base    Predictor
	samples []fitSample
	free    [nParams]bool
	prior   [nParams]float64
}

// The fit works on u = log(k - lo) so that every parameter is positive
// relative to its lower bound and the objective is well scaled; values
// above the upper bound are projected onto it.
func fromU(j int, u float64) float64 {
	lo, hi := paramBounds[j][0], paramBounds[j][1]
	return min(lo+math.Exp(u), hi)
}

// toU maps a parameter value to the unconstrained variable.
func toU(j int, v float64) float64 {
	lo, hi := paramBounds[j][0], paramBounds[j][1]
	// Keep starts off the lower bound, where log(k - lo) is -inf.
	off := max(v-lo, 1e-3*(hi-lo))
	return math.Log(off)
}

// params expands u (one entry per free parameter) to the full tuple.
func (o *objective) params(u []float64) [nParams]float64 {
	v := o.prior
	i := 0
	for j := 0; j < nParams; j++ {
		if !o.free[j] {
			continue
		}
		v[j] = fromU(j, u[i])
		i++
	}
	return v
}

// start returns the s-th deterministic starting point: the priors, then the
// priors shifted by +-1.5 in u along a fixed sign pattern.
func (o *objective) start(s int) []float64 {
	var u []float64
	i := 0
	for j := 0; j < nParams; j++ {
		if !o.free[j] {
			continue
		}
		x := toU(j, o.prior[j])
		if s > 0 {
			sign := 1.0
			if ((s*7+i*3)>>((s+i)%3))&1 == 1 {
				sign = -1
			}
			x += sign * 1.5 * float64((s+1)/2)
		}
		u = append(u, x)
		i++
	}
	return u
}

func (o *objective) value(u []float64) float64 {
	v := o.params(u)
	pred := o.base
	pred.Params = paramsFromVec(v)
	var it float64
	for _, f := range o.samples {
		r := math.Log(pred.at(f).price(f.plan, f.res, f.lo).Iter) - f.logT
		it += r * r
	}
	loss := it / float64(len(o.samples))
	i := 0
	for j := 0; j < nParams; j++ {
		if !o.free[j] {
			continue
		}
		du := u[i] - toU(j, o.prior[j])
		loss += ridge * du * du
		i++
	}
	return loss
}

// grad is a central finite difference of value; the model has kinks (max,
// min) only where phases cross, which BFGS tolerates.
func (o *objective) grad(g, u []float64) {
	const h = 1e-6
	x := append([]float64(nil), u...)
	for i := range x {
		orig := x[i]
		x[i] = orig + h
		fp := o.value(x)
		x[i] = orig - h
		fm := o.value(x)
		x[i] = orig
		g[i] = (fp - fm) / (2 * h)
	}
}

// identifiable decides which parameters the samples can pin down: a
// greedy Gram-Schmidt over sensitivity columns, in identOrder, keeping a
// column when what is left of it after projecting out the kept columns is
// still large, and never keeping more parameters than there are samples.
// Column j is the change of log T_i when parameter j moves by a typical
// amount from its prior: x1.5 for the rate parameters, +1 for the overlap
// exponents, and a quarter of the median sample time for k_const (which
// may be 0 and adds rather than multiplies).
func identifiable(base Predictor, fs []fitSample) [nParams]bool {
	n := len(fs)
	times := make([]float64, n)
	for i, f := range fs {
		times[i] = math.Exp(f.logT)
	}
	slices.Sort(times)
	medianT := times[n/2]
	cols := make([][]float64, nParams)
	v0 := base.Params.vec()
	for j := 0; j < nParams; j++ {
		up := v0
		switch j {
		case 1, 4, 5: // overlap exponents
			up[j] = v0[j] + 1
		case 6: // k_const
			up[j] = v0[j] + 0.25*medianT
		default:
			up[j] = max(v0[j], 1e-6) * 1.5
		}
		pu := base
		pu.Params = paramsFromVec(up)
		col := make([]float64, n)
		for i, f := range fs {
			col[i] = math.Log(pu.at(f).price(f.plan, f.res, f.lo).Iter) - math.Log(base.at(f).price(f.plan, f.res, f.lo).Iter)
		}
		cols[j] = col
	}
	var free [nParams]bool
	var basis [][]float64
	for _, j := range identOrder {
		if len(basis) >= n {
			break
		}
		r := append([]float64(nil), cols[j]...)
		norm0 := vnorm(r)
		for _, q := range basis {
			dot := 0.0
			for i := range r {
				dot += r[i] * q[i]
			}
			for i := range r {
				r[i] -= dot * q[i]
			}
		}
		norm := vnorm(r)
		if norm0 == 0 || norm < identRel*norm0 || norm/math.Sqrt(float64(n)) < identAbs {
			continue
		}
		for i := range r {
			r[i] /= norm
		}
		basis = append(basis, r)
		free[j] = true
	}
	return free
}

func vnorm(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}
