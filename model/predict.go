package model

import (
	"fmt"
	"math"
)

// bytesPerElem is the size of one communicated value: gradients and
// activations travel in fp16/bf16.
const bytesPerElem = 2

// offloadBytesPerParam is what ZeRO-Offload moves over PCIe per parameter
// and iteration: fp16 gradients to the host and fp16 parameters back.
const offloadBytesPerParam = 4

// zeroCommFactor is ZeRO's DP traffic relative to an fp16 all-reduce.
const zeroCommFactor = 1.5

// adamHostBytesPerParam is the host-memory traffic of one CPU Adam step per
// parameter: fp32 master weight, momentum and variance read and written
// (24) and the fp16 gradient read and fp16 weight written (4).
const adamHostBytesPerParam = 28

// gb converts bytes to GB (1e9), the unit of the Env bandwidths.
const gb = 1e9

// overlap is f_k(x, y) = (x^k + y^k)^(1/k): k = 1 adds the two phases, a
// large k takes the longer one (perfect overlap). It is written around the
// larger argument so large k neither overflows nor loses precision.
func overlap(k, x, y float64) float64 {
	hi, lo := x, y
	if lo > hi {
		hi, lo = lo, hi
	}
	if lo <= 0 || hi <= 0 {
		return hi + max(lo, 0)
	}
	if k == 1 {
		return hi + lo
	}
	return hi * math.Pow(1+math.Pow(lo/hi, k), 1/k)
}

// layout is what the placement means for one plan's communication groups.
type layout struct {
	dpCross bool    // some DP group spans nodes
	ppCross bool    // some pipeline stage boundary spans nodes
	tpCross bool    // some TP group spans nodes (only measured plans do this)
	dpGBps  float64 // bandwidth one DP group's ring gets on its slowest link
	tpGBps  float64 // bandwidth one TP group's ring gets on its slowest link
}

// analyze maps ranks onto the placement in Megatron order (TP fastest, then
// DP, then PP; node after node) and finds the slowest link of each group:
// NVLink inside a node, else the node's NICs shared by every group that
// leaves the node.
func (p Predictor) analyze(plan Plan, pl Placement) layout {
	t, d := plan.TP, plan.DP
	td := t * d
	lo := layout{dpGBps: p.Env.IntraGBps, tpGBps: p.Env.IntraGBps}
	lo.ppCross = plan.PP > 1 && len(pl) > 1
	start := 0
	for _, k := range pl {
		end := start + k
		dpGroups, tpGroups := 0, 0
		for r := start; r < end; r++ {
			tpRank := r % t
			// TP group [r-tpRank, r-tpRank+t); count it once, at its first
			// rank on this node.
			if first := r - tpRank; (first < start || first+t > end) && (tpRank == 0 || r == start) {
				tpGroups++
			}
			if d > 1 {
				blk := r - r%td // first rank of this pipeline stage's DP block
				first := blk + tpRank
				last := first + (d-1)*t
				if (first < start || last >= end) && (r-t < start || r-t < blk) {
					dpGroups++
				}
			}
		}
		if tpGroups > 0 {
			lo.tpCross = true
			lo.tpGBps = min(lo.tpGBps, p.nodeNetGBps(k)/float64(tpGroups))
		}
		if dpGroups > 0 {
			lo.dpCross = true
			lo.dpGBps = min(lo.dpGBps, p.nodeNetGBps(k)/float64(dpGroups))
		}
		start = end
	}
	return lo
}

// hostGBps is the host memory bandwidth of a node, defaulting when unset.
func (p Predictor) hostGBps() float64 {
	if p.Env.HostMemGBps > 0 {
		return p.Env.HostMemGBps
	}
	return defaultHostMemGBps
}

// nodeNetGBps is the inter-node bandwidth of a node that uses k GPUs.
func (p Predictor) nodeNetGBps(k int) float64 {
	nics := 1
	if p.Env.GPUsPerNIC > 0 {
		nics = (k + p.Env.GPUsPerNIC - 1) / p.Env.GPUsPerNIC
	}
	return float64(nics) * p.Env.InterGBps
}

// checkPlan reports the first structural problem of plan on r.
func (p Predictor) checkPlan(plan Plan, r Resources) error {
	switch {
	case plan.DP < 1 || plan.TP < 1 || plan.PP < 1:
		return fmt.Errorf("%w: plan %s: dp, tp and pp must be >= 1", ErrInvalidPlan, plan)
	case plan.MicroBatch < 1 || plan.Accum < 1:
		return fmt.Errorf("%w: plan %s: micro_batch=%d and accum=%d must be >= 1", ErrInvalidPlan, plan, plan.MicroBatch, plan.Accum)
	case plan.ZeRO < 0 || plan.ZeRO > 3:
		return fmt.Errorf("%w: plan %s: zero=%d is not a ZeRO stage 0-3", ErrInvalidPlan, plan, plan.ZeRO)
	case plan.Offload && plan.ZeRO == 0:
		return fmt.Errorf("%w: plan %s: offload needs a ZeRO stage >= 1", ErrInvalidPlan, plan)
	}
	g := 0
	for i, k := range r.Placement {
		if k < 1 {
			return fmt.Errorf("%w: placement %v: node %d has %d GPUs", ErrBadInput, []int(r.Placement), i, k)
		}
		g += k
	}
	if g == 0 {
		return fmt.Errorf("%w: placement is empty (zero GPUs)", ErrBadInput)
	}
	if plan.GPUs() != g {
		return fmt.Errorf("%w: plan %s uses dp*tp*pp=%d GPUs, placement %s has %d", ErrInvalidPlan, plan, plan.GPUs(), r.Placement, g)
	}
	if b := plan.DP * plan.MicroBatch * plan.Accum; b != p.Spec.GlobalBatch {
		return fmt.Errorf("%w: plan %s: dp*micro_batch*accum=%d, global batch of %s is %d", ErrInvalidPlan, plan, b, p.Spec.Name, p.Spec.GlobalBatch)
	}
	if plan.Offload && r.CPUs < 1 {
		return fmt.Errorf("%w: plan %s offloads to the CPU but cpus=%d", ErrInvalidPlan, plan, r.CPUs)
	}
	return nil
}

// checkModel reports a spec, parameter tuple or environment that cannot be
// priced.
func (p Predictor) checkModel() error {
	if err := p.Spec.Validate(); err != nil {
		return err
	}
	v := p.Params.vec()
	for i, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return fmt.Errorf("%w: params.%s=%v must be a finite number >= 0", ErrBadInput, paramNames[i], x)
		}
	}
	if p.Params.KSync < 1 || p.Params.KOff < 1 || p.Params.KSwap < 1 {
		return fmt.Errorf("%w: overlap exponents k_sync=%v k_off=%v k_swap=%v must be >= 1", ErrBadInput, p.Params.KSync, p.Params.KOff, p.Params.KSwap)
	}
	return p.Env.checkBandwidths()
}

// checkBandwidths reports a link bandwidth the model cannot price: every
// transfer over it would take forever.
func (e Env) checkBandwidths() error {
	for _, f := range [...]struct {
		name string
		v    float64
	}{{"intra_gbps", e.IntraGBps}, {"inter_gbps", e.InterGBps}, {"pcie_gbps", e.PCIeGBps}, {"host_mem_gbps", e.HostMemGBps}} {
		// host_mem_gbps 0 is the default's; a bandwidth below minGBps
		// priced every plan at an infinite time (1e-310 made the fit panic).
		if f.name == "host_mem_gbps" && f.v == 0 {
			continue
		}
		if !(f.v >= minGBps) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%w: env.%s=%v must be >= %v GB/s", ErrBadInput, f.name, f.v, minGBps)
		}
	}
	return nil
}

// minGBps bounds the bandwidths an Env may state from below: 1 MB/s, far
// below any link a training job runs over.
const minGBps = 1e-3

// ForPlan is p at plan's own global batch, dp*micro_batch*accum (the
// model type's when plan is the zero Plan): a job trains with its launch
// line's global batch, which need not be its model type's.
func (p Predictor) ForPlan(plan Plan) Predictor {
	p.Spec = p.Spec.WithGlobalBatch(plan.DP * plan.MicroBatch * plan.Accum)
	return p
}

// Predict returns the predicted iteration breakdown of plan on r. It fails
// with ErrInvalidPlan when the plan does not match the placement.
//
// The equations are those of the Rubick paper (MLSys'25), Appendix A, with
// the deviations listed in docs/model.md (Equations states them whole):
// pipelines run each micro-batch through all stages alone (1F1B overlap
// with Env.Pipeline1F1B) and stretch the TP traffic alike, cross-node DP
// rings share the NICs of a node, ZeRO-Offload moves the DP reduction out
// of the backward pass into the offload phase, and a TP shard runs slower
// than 1/t of the layer (tpSlowdown).
func (p Predictor) Predict(plan Plan, r Resources) (Breakdown, error) {
	if err := p.checkModel(); err != nil {
		return Breakdown{}, err
	}
	if err := p.checkPlan(plan, r); err != nil {
		return Breakdown{}, err
	}
	return p.price(plan, r, p.analyze(plan, r.Placement)), nil
}

// price evaluates the equations for a checked plan.
func (p Predictor) price(plan Plan, r Resources, lo layout) Breakdown {
	s, k := p.Spec, p.Params
	d, t, pp := float64(plan.DP), float64(plan.TP), float64(plan.PP)
	b := float64(s.GlobalBatch)
	P := s.Params
	fwd1 := s.ForwardMs / 1000 // whole global batch, one GPU, seconds
	// One micro-batch through this GPU's shard of every layer.
	tMB := fwd1 * float64(plan.MicroBatch) / b / t * p.tpSlowdown(plan.TP)
	if plan.TP > 1 || plan.PP > 1 {
		// 3D plans run Megatron's kernels, not those the profile timed.
		tMB *= k.k3d()
	}
	var out Breakdown

	// Communication volumes, in bytes per GPU.
	seqHid := float64(s.SeqLen) * float64(s.Hidden)
	vdp := P * 2 * (d - 1) / (d * t * pp) * bytesPerElem
	if plan.ZeRO >= 1 {
		// ZeRO reduce-scatters fp32 gradient partitions and all-gathers fp16
		// parameters: 4 + 2 bytes per element against the 2 + 2 of an fp16
		// all-reduce.
		vdp *= zeroCommFactor
	}
	if plan.ZeRO == 3 {
		vdp *= 1.5 // stage 3 gathers parameters once more in the backward
	}
	vtp := 8 * (t - 1) * b * seqHid * float64(s.Layers) / (d * t) * bytesPerElem
	vpp := 2 * pp * b * seqHid / (d * t) * bytesPerElem
	if plan.PP == 1 {
		vpp = 0
	}
	out.CommDP = vdp / (lo.dpGBps * gb)
	out.CommTP = vtp / (lo.tpGBps * gb)
	ppGBps := p.Env.IntraGBps
	if lo.ppCross {
		ppGBps = p.Env.InterGBps
	}
	out.CommPP = vpp / (ppGBps * gb)

	recompute := 0.0
	if plan.Checkpoint {
		recompute = 1
	}
	m := float64(plan.Accum)
	if plan.PP > 1 {
		// A pipeline pass of m micro-batches over p stages of l/p layers.
		// With 1F1B the stages overlap and it takes (m + p - 1) stage slots;
		// the schedule the artifact's jobs ran does not overlap micro-batches
		// (docs/model.md), so each micro-batch crosses all p stages alone
		// and the pass takes m * p slots. The TP all-reduces sit inside each
		// slot and stretch by the same factor.
		slots := m // m*p slots of t_mb/p each
		if p.Env.Pipeline1F1B {
			slots = (m + pp - 1) / pp
		}
		out.Fwd = tMB * slots
		out.Bwd = (k.KBwd + recompute) * out.Fwd
		out.CommTP *= slots / m
		out.CC = out.Fwd + overlap(k.KSync, out.Bwd, out.CommDP) + out.CommTP + out.CommPP
	} else {
		fwdMB := tMB
		bwdMB := (k.KBwd + recompute) * fwdMB
		out.Fwd = m * fwdMB
		out.Bwd = m * bwdMB
		if plan.Offload {
			// The reduce-scatter of ZeRO-Offload feeds the host copy; it is
			// priced with the offload phase below.
			out.CC = out.Fwd + out.Bwd + out.CommTP
		} else {
			out.CC = m*fwdMB + (m-1)*bwdMB + overlap(k.KSync, bwdMB, out.CommDP) + out.CommTP
		}
	}

	// Optimizer step.
	pg := P / 1e9
	switch {
	case plan.Offload:
		c := float64(r.CPUs) / float64(plan.GPUs()) // CPU Adam threads per rank
		// CPU Adam: compute on the rank's threads, plus streaming the
		// optimizer state of every rank on the busiest node through that
		// node's memory (shared by its ranks).
		onNode := float64(r.Placement.MaxPerNode())
		out.Opt = k.KOptOff*pg/(d*c) + adamHostBytesPerParam*P*onNode/(d*p.hostGBps()*gb)
		out.Off = offloadBytesPerParam * P / (d * p.Env.PCIeGBps * gb)
		out.OO = overlap(k.KOff, out.CommDP, out.Off) + overlap(k.KSwap, out.Opt, out.Off)
	case plan.TP > 1 || plan.PP > 1:
		out.Opt = k.KOpt * pg / (t * pp)
		out.OO = out.Opt
	case plan.ZeRO > 0:
		out.Opt = k.KOpt * pg / d
		out.OO = out.Opt
	default:
		out.Opt = k.KOpt * pg
		out.OO = out.Opt
	}
	out.Iter = out.CC + out.OO + k.KConst
	return out
}

// tpSlowdown is how much longer one GPU's TP shard of a layer takes than
// 1/t of the profiled (t = 1) layer.
//
// Per token, a layer's GEMMs do about 24 h^2 FLOPs, which TP divides by t,
// while every rank still reads and writes the full h-wide activations
// around them (the inputs of the column-parallel GEMMs, the outputs of the
// row-parallel ones before their all-reduce, layer norms, dropout and
// residuals), which TP does not divide. On a roofline the replicated part
// costs about ridge/h of the FLOP part at t = 1, so a shard takes
// (1/t + ridge/h) / (1 + ridge/h) of the profiled layer: the narrower the
// shard (h/t), the larger the memory-bound share. The profiled forward
// already contains the t = 1 share, hence the normalisation.
func (p Predictor) tpSlowdown(t int) float64 {
	if t <= 1 || p.Env.RidgeFlopPerByte <= 0 {
		return 1
	}
	w0 := p.Env.RidgeFlopPerByte / float64(p.Spec.Hidden)
	return (1 + w0*float64(t)) / (1 + w0)
}
