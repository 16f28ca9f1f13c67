package model

import (
	"fmt"
	"strings"
)

// divisors returns the divisors of n in ascending order.
func divisors(n int) []int {
	var out []int
	for i := 1; i <= n; i++ {
		if n%i == 0 {
			out = append(out, i)
		}
	}
	return out
}

// tpFits reports whether TP groups of size t can stay inside every node.
func tpFits(pl Placement, t int) bool {
	for _, k := range pl {
		if k%t != 0 {
			return false
		}
	}
	return true
}

// Enumerate lists every valid plan of spec on placement pl (docs/model.md,
// Plans: d*t*p = g, TP inside a node and dividing heads, PP dividing
// layers, integer micro-batch, global batch unchanged), in a deterministic
// order. It does not check memory.
//
// Order: PP, then TP ascending; micro-batch descending (fewest accumulation
// steps first); ZeRO stage ascending, offload last; checkpointing last.
// Pure data-parallel plans (TP = PP = 1) come with ZeRO stages 0, 2 and 3
// and ZeRO-Offload (stages 2 and 3); stage 1 is left out because stage 2
// needs no more communication and less memory, and sharding over a single
// rank is left out because it changes nothing. Plans with TP or PP > 1 use
// no ZeRO, as Megatron-style 3D parallelism does. Pipelines with fewer
// micro-batches than stages (m < p) are kept: the measured llama plans use
// them (PTD 248 runs one sample per DP rank through 2 stages), and the
// pipeline term prices them.
func Enumerate(spec Spec, pl Placement) []Plan {
	var out []Plan
	enumerate(spec, pl, func(p Plan) { out = append(out, p) })
	return out
}

// zeroVariants are the ZeRO settings of pure data-parallel plans, in order.
var zeroVariants = [...]struct {
	stage int
	off   bool
}{{0, false}, {2, false}, {3, false}, {2, true}, {3, true}}

// enumerate calls visit with every plan Enumerate lists, in the same order,
// without allocating.
func enumerate(spec Spec, pl Placement, visit func(Plan)) {
	g := 0
	for _, k := range pl {
		if k < 1 {
			return
		}
		g += k
	}
	if g == 0 || spec.GlobalBatch <= 0 || spec.Layers <= 0 || spec.Heads <= 0 {
		return
	}
	for pp := 1; pp <= g; pp++ {
		if g%pp != 0 || spec.Layers%pp != 0 {
			continue
		}
		for t := 1; t <= g/pp; t++ {
			if (g/pp)%t != 0 || spec.Heads%t != 0 || !tpFits(pl, t) {
				continue
			}
			d := g / (pp * t)
			if spec.GlobalBatch%d != 0 {
				continue
			}
			perRank := spec.GlobalBatch / d
			for mb := perRank; mb >= 1; mb-- {
				if perRank%mb != 0 {
					continue
				}
				base := Plan{DP: d, TP: t, PP: pp, MicroBatch: mb, Accum: perRank / mb}
				if t == 1 && pp == 1 {
					for _, z := range zeroVariants {
						if z.stage > 0 && d == 1 && !z.off {
							continue
						}
						for _, gc := range [...]bool{false, true} {
							p := base
							p.ZeRO, p.Offload, p.Checkpoint = z.stage, z.off, gc
							visit(p)
						}
					}
					continue
				}
				for _, gc := range [...]bool{false, true} {
					p := base
					p.Checkpoint = gc
					visit(p)
				}
			}
		}
	}
}

// ParseExecPlan maps an execution-plan code of the artifact's traces to a
// Plan on placement pl:
//   - "ga": data parallel over every GPU; gradient accumulation only when
//     the per-GPU batch does not fit in GPU memory (DefaultEnv), with the
//     fewest accumulation steps that fit;
//   - "gc": as "ga" with activation checkpointing;
//   - "zero-dp": as "ga" with ZeRO stage 2;
//   - "zero-offload": as "ga" with ZeRO stage 2 and ZeRO-Offload;
//   - three digits "PTD": pipeline, tensor and data parallel degrees; with
//     PP > 1 micro-batch 1 and m = b/DP micro-batches, else micro-batch b/DP.
//
// It checks the structure (GPU count, integer batch split) but neither head
// and layer divisibility nor TP inside a node: the codes name plans that
// ran, and llama30's "344" on 66666666 ran with TP groups across nodes
// (Predict prices them on the network).
// Anything else fails with ErrBadInput naming the code.
func ParseExecPlan(spec Spec, code string, pl Placement) (Plan, error) {
	if err := spec.Validate(); err != nil {
		return Plan{}, err
	}
	g := pl.GPUs()
	for i, k := range pl {
		if k < 1 {
			return Plan{}, fmt.Errorf("%w: exec plan %q: placement node %d has %d GPUs", ErrBadInput, code, i, k)
		}
	}
	if g == 0 {
		return Plan{}, fmt.Errorf("%w: exec plan %q: placement has zero GPUs", ErrBadInput, code)
	}
	b := spec.GlobalBatch
	var plan Plan
	switch code {
	case "ga", "gc", "zero-dp", "zero-offload":
		if b%g != 0 {
			return Plan{}, fmt.Errorf("%w: exec plan %q: global batch %d does not split over %d GPUs", ErrInvalidPlan, code, b, g)
		}
		plan = Plan{DP: g, TP: 1, PP: 1, Checkpoint: code == "gc"}
		if code == "zero-dp" || code == "zero-offload" {
			plan.ZeRO = 2
		}
		plan.Offload = code == "zero-offload"
		// Accumulate only as much as memory demands.
		pred := Predictor{Spec: spec, Env: DefaultEnv()}
		perRank := b / g
		plan.MicroBatch, plan.Accum = 1, perRank
		for _, a := range divisors(perRank) {
			cand := plan
			cand.MicroBatch, cand.Accum = perRank/a, a
			if pred.Memory(cand, pl).GPUGB <= pred.Env.GPUMemGB {
				plan = cand
				break
			}
		}
	default:
		if len(code) != 3 || strings.Trim(code, "123456789") != "" {
			return Plan{}, fmt.Errorf("%w: exec plan %q is not ga, gc, zero-dp, zero-offload or a PTD code of three digits 1-9", ErrBadInput, code)
		}
		pp, t, d := int(code[0]-'0'), int(code[1]-'0'), int(code[2]-'0')
		if pp*t*d != g {
			return Plan{}, fmt.Errorf("%w: exec plan %q uses %d GPUs, placement %s has %d", ErrInvalidPlan, code, pp*t*d, pl, g)
		}
		if b%d != 0 {
			return Plan{}, fmt.Errorf("%w: exec plan %q: global batch %d does not split over DP=%d", ErrInvalidPlan, code, b, d)
		}
		plan = Plan{DP: d, TP: t, PP: pp, MicroBatch: b / d, Accum: 1}
		if pp > 1 {
			plan.MicroBatch, plan.Accum = 1, b/d
		}
	}
	return plan, nil
}

// BestPlan returns the valid, memory-feasible plan with the shortest
// predicted iteration on r among those allow accepts (nil accepts all).
// Ties break deterministically. It wraps ErrNoPlan when none qualifies.
func (p Predictor) BestPlan(r Resources, allow func(Plan) bool) (Plan, Breakdown, error) {
	if err := p.checkModel(); err != nil {
		return Plan{}, Breakdown{}, err
	}
	if r.Placement.GPUs() == 0 {
		return Plan{}, Breakdown{}, fmt.Errorf("%w: placement has zero GPUs", ErrBadInput)
	}
	var (
		best   Plan
		bestBD Breakdown
		found  bool
		lo     layout
		loKey  [3]int
	)
	enumerate(p.Spec, r.Placement, func(plan Plan) {
		if allow != nil && !allow(plan) {
			return
		}
		if plan.Offload && r.CPUs < 1 {
			return
		}
		// Plans come grouped by (d, t, p), which alone decide the links.
		if k := [3]int{plan.DP, plan.TP, plan.PP}; k != loKey {
			lo, loKey = p.analyze(plan, r.Placement), k
		}
		// Price first: memory is only worth checking for a plan that would win.
		bd := p.price(plan, r, lo)
		// Earlier plans win ties (fewer accumulation steps, no ZeRO, no
		// checkpointing): rounding must not pick a plan that is no faster.
		if found && bd.Iter >= bestBD.Iter*(1-1e-9) {
			return
		}
		if _, gpuOK, hostOK, _ := p.fits(plan, r); !gpuOK || !hostOK {
			return
		}
		best, bestBD, found = plan, bd, true
	})
	if !found {
		return Plan{}, Breakdown{}, fmt.Errorf("%w: %s on placement %s with %d CPUs", ErrNoPlan, p.Spec.Name, clipPlacement(r.Placement.String()), r.CPUs)
	}
	return best, bestBD, nil
}
