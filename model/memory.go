package model

import "fmt"

// Memory model constants (bytes unless noted). docs/model.md gives their
// sources and the calibration against the artifact's feasibility table.
const (
	// Mixed-precision Adam keeps fp16 weights (2) and gradients (2) on the
	// GPU and fp32 master weights, momentum and variance (12) for the
	// optimizer (Rajbhandari et al., ZeRO).
	weightBytes = 2
	gradBytes   = 2
	optBytes    = 12
	// actBytes is the activation memory of one transformer layer per token
	// and hidden unit (Korthikanti et al. 2022: 34 s b h per layer without
	// the attention-score term, which fused attention kernels no longer
	// store); actTPBytes of it is sharded by tensor parallelism.
	actBytes   = 34
	actTPBytes = 24
	// ckptBytes is what activation checkpointing keeps per layer and token
	// and hidden unit: the fp16 layer input.
	ckptBytes = 2
	// frameworkGB is the fixed per-GPU overhead: CUDA context, NCCL buffers,
	// allocator fragmentation and the embedding/logit buffers.
	frameworkGB = 4
	// hostBaseGB is the host memory per node used by the training processes
	// apart from offloaded state (data loaders, pinned staging buffers).
	hostBaseGB = 16
)

// Memory estimates the memory plan needs on placement pl.
//
// GPU: weights, gradients and optimizer states divided by TP*PP and, per
// ZeRO stage, by DP (stage 1: optimizer states, 2: + gradients, 3: +
// weights); ZeRO-Offload keeps the optimizer states on the host. Activations
// of one micro-batch on this GPU's l/p layers, times the micro-batches a 1F1B
// first stage keeps in flight (min(m, p)); with checkpointing only the layer
// inputs plus one layer's full activations. Plus a fixed framework overhead.
//
// Host, per node: offloaded fp32 optimizer states and fp16 gradients of the
// ranks on the node, plus a fixed base.
func (p Predictor) Memory(plan Plan, pl Placement) MemoryEstimate {
	s := p.Spec
	if plan.DP < 1 || plan.TP < 1 || plan.PP < 1 || plan.MicroBatch < 1 {
		return MemoryEstimate{}
	}
	d, tp := float64(plan.DP), float64(plan.TP*plan.PP)
	shard := s.Params / tp
	w, gr, opt := weightBytes*shard, gradBytes*shard, optBytes*shard
	if plan.ZeRO >= 1 {
		opt /= d
	}
	if plan.ZeRO >= 2 {
		gr /= d
	}
	if plan.ZeRO >= 3 {
		w /= d
	}
	host := 0.0
	if plan.Offload {
		host = opt + gr // per rank: fp32 states plus the fp16 gradient copy
		opt = 0
	}
	t := float64(plan.TP)
	tokens := float64(plan.MicroBatch) * float64(s.SeqLen) * float64(s.Hidden)
	layers := float64(s.Layers) / float64(plan.PP)
	full := tokens * (actBytes - actTPBytes + actTPBytes/t)
	var act float64
	if plan.Checkpoint {
		// A one-layer stage gains nothing from checkpointing, and loses
		// nothing either.
		act = min(tokens*ckptBytes*layers+full, full*layers)
	} else {
		act = full * layers
	}
	if plan.PP > 1 {
		act *= float64(min(plan.Accum, plan.PP))
	}
	est := MemoryEstimate{GPUGB: (w+gr+opt+act)/gb + frameworkGB}
	maxRanks := pl.MaxPerNode()
	est.HostGBNode = hostBaseGB + host*float64(maxRanks)/gb
	return est
}

// Feasible reports whether plan fits in GPU memory and in the host memory of
// r; the error wraps ErrInfeasible and names the limit exceeded.
//
// Host memory is checked against r.HostMemGB spread over the nodes of the
// placement when it is set, else against Env.NodeMemGB per node.
func (p Predictor) Feasible(plan Plan, r Resources) error {
	est, gpuOK, hostOK, hostCap := p.fits(plan, r)
	if !gpuOK {
		return fmt.Errorf("%w: %s plan %s needs %.1f GB per GPU, gpu_mem_gb=%.0f", ErrInfeasible, p.Spec.Name, plan, est.GPUGB, p.Env.GPUMemGB)
	}
	if !hostOK {
		return fmt.Errorf("%w: %s plan %s needs %.1f GB of host memory per node, has %.0f", ErrInfeasible, p.Spec.Name, plan, est.HostGBNode, hostCap)
	}
	return nil
}

// fits is Feasible without building an error, for the hot path of BestPlan.
func (p Predictor) fits(plan Plan, r Resources) (est MemoryEstimate, gpuOK, hostOK bool, hostCap float64) {
	est = p.Memory(plan, r.Placement)
	gpuOK = !(p.Env.GPUMemGB > 0 && est.GPUGB > p.Env.GPUMemGB)
	hostCap = p.Env.NodeMemGB
	if r.HostMemGB > 0 && r.Placement.Nodes() > 0 {
		hostCap = r.HostMemGB / float64(r.Placement.Nodes())
	}
	hostOK = !(plan.Offload && hostCap > 0 && est.HostGBNode > hostCap)
	return est, gpuOK, hostOK, hostCap
}
