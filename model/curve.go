package model

import (
	"slices"
	"sync"
)

// PackedPlacement spreads g GPUs over nodes of nodeGPUs GPUs, filling each
// node before the next: 20 GPUs on 8-GPU nodes is 8,8,4. nodeGPUs <= 0
// puts everything on one node.
func PackedPlacement(g, nodeGPUs int) Placement {
	if g <= 0 {
		return nil
	}
	if nodeGPUs <= 0 {
		return Placement{g}
	}
	pl := make(Placement, 0, (g+nodeGPUs-1)/nodeGPUs)
	for g > 0 {
		k := min(g, nodeGPUs)
		pl = append(pl, k)
		g -= k
	}
	return pl
}

// GPUCurve is the GPU sensitivity curve: for g = 1..maxGPUs GPUs packed onto
// nodes of Env.NodeGPUs (PackedPlacement) with cpusPerGPU CPUs each, the
// best feasible plan and its throughput. Where no plan is feasible the
// point repeats the previous throughput with Feasible false. Ref is the
// highest throughput on the curve (callers may replace it with their job's
// reference throughput before taking slopes).
func (p Predictor) GPUCurve(maxGPUs, cpusPerGPU int) Curve {
	c := Curve{Points: make([]CurvePoint, 0, max(maxGPUs, 0))}
	prev := 0.0
	for g := 1; g <= maxGPUs; g++ {
		r := Resources{Placement: PackedPlacement(g, p.Env.NodeGPUs), CPUs: cpusPerGPU * g}
		c.Points = append(c.Points, p.curvePoint(g, r, &prev))
	}
	c.Ref = curveRef(c.Points)
	return c
}

// CPUCurve is the CPU sensitivity curve on placement pl: for 1..maxCPUs
// CPU cores in total, the best feasible plan and its throughput, flat where
// nothing is feasible. Only ZeRO-Offload plans use the CPUs, so the curve
// rises where offloading wins or is the only plan that fits.
func (p Predictor) CPUCurve(pl Placement, maxCPUs int) Curve {
	c := Curve{Points: make([]CurvePoint, 0, max(maxCPUs, 0))}
	prev := 0.0
	for n := 1; n <= maxCPUs; n++ {
		c.Points = append(c.Points, p.curvePoint(n, Resources{Placement: pl, CPUs: n}, &prev))
	}
	c.Ref = curveRef(c.Points)
	return c
}

func (p Predictor) curvePoint(amount int, r Resources, prev *float64) CurvePoint {
	plan, bd, err := p.BestPlan(r, nil)
	if err != nil || !(bd.Iter > 0) {
		return CurvePoint{Amount: amount, Throughput: *prev}
	}
	thr := float64(p.Spec.GlobalBatch) / bd.Iter
	*prev = thr
	return CurvePoint{Amount: amount, Plan: plan, Throughput: thr, Feasible: true}
}

func curveRef(pts []CurvePoint) float64 {
	ref := 0.0
	for _, pt := range pts {
		ref = max(ref, pt.Throughput)
	}
	return ref
}

// Slope is the throughput gained by one more unit of the resource at
// amount, normalised by Ref so that curves of different models compare.
// Amounts outside the curve, and curves with no throughput, have slope 0;
// amount 0 is the gain of the first unit.
func (c Curve) Slope(amount int) float64 {
	if c.Ref <= 0 || len(c.Points) == 0 {
		return 0
	}
	at := func(a int) (float64, bool) {
		if a == 0 {
			return 0, true
		}
		i := a - c.Points[0].Amount
		if i < 0 || i >= len(c.Points) || c.Points[i].Amount != a {
			// Amounts are consecutive from the first point; anything else
			// is outside the curve.
			return 0, false
		}
		return c.Points[i].Throughput, true
	}
	lo, ok1 := at(amount)
	hi, ok2 := at(amount + 1)
	if !ok1 || !ok2 {
		return 0
	}
	return (hi - lo) / c.Ref
}

// curveKey identifies a cached curve: the model (spec, fitted parameters,
// environment) and the curve's shape.
type curveKey struct {
	spec   Spec
	params Params
	env    Env
	kind   byte   // 'g' GPU curve, 'c' CPU curve
	shape  string // placement for CPU curves
	n, c   int    // max amount; CPUs per GPU for GPU curves
}

// CurveCache memoises sensitivity curves per (model, parameters, shape).
// It is safe for concurrent use; the zero value is ready. Curves are
// returned as copies, so callers may change them.
type CurveCache struct {
	mu     sync.Mutex
	curves map[curveKey]Curve
}

// GPUCurve returns p.GPUCurve(maxGPUs, cpusPerGPU), computing it once.
func (cc *CurveCache) GPUCurve(p Predictor, maxGPUs, cpusPerGPU int) Curve {
	k := curveKey{spec: p.Spec, params: p.Params, env: p.Env, kind: 'g', n: maxGPUs, c: cpusPerGPU}
	return cc.get(k, func() Curve { return p.GPUCurve(maxGPUs, cpusPerGPU) })
}

// CPUCurve returns p.CPUCurve(pl, maxCPUs), computing it once per
// placement shape (rotations and orderings of pl share an entry, as they
// perform the same).
func (cc *CurveCache) CPUCurve(p Predictor, pl Placement, maxCPUs int) Curve {
	canon := pl.Canonical()
	k := curveKey{spec: p.Spec, params: p.Params, env: p.Env, kind: 'c', shape: canon.String(), n: maxCPUs}
	return cc.get(k, func() Curve { return p.CPUCurve(canon, maxCPUs) })
}

// Len is the number of cached curves.
func (cc *CurveCache) Len() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return len(cc.curves)
}

func (cc *CurveCache) get(k curveKey, build func() Curve) Curve {
	cc.mu.Lock()
	c, ok := cc.curves[k]
	cc.mu.Unlock()
	if !ok {
		// Build outside the lock: curves take milliseconds and concurrent
		// builders of the same key produce equal curves.
		c = build()
		cc.mu.Lock()
		if cc.curves == nil {
			cc.curves = map[curveKey]Curve{}
		}
		if old, ok := cc.curves[k]; ok {
			c = old
		} else {
			cc.curves[k] = c
		}
		cc.mu.Unlock()
	}
	return Curve{Points: slices.Clone(c.Points), Ref: c.Ref}
}
