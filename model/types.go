// Package model is rubick's performance and memory model: it predicts the
// iteration time of a deep-learning training job for any execution plan on
// any placement (the Rubick paper (MLSys'25), Appendix A, with the
// deviations docs/model.md lists), decides which plans fit in GPU and host
// memory, fits the seven model parameters to measured samples, and derives
// resource-sensitivity curves.
//
// The package is pure: it imports neither the Slurm bridge nor the store, so
// the daemon, the simulator and the tests all drive the same code.
package model

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Sentinel errors callers branch on.
var (
	// ErrInvalidPlan reports a plan that is not valid for its placement or model.
	ErrInvalidPlan = errors.New("invalid plan")
	// ErrInfeasible reports a plan that does not fit in GPU or host memory.
	ErrInfeasible = errors.New("plan does not fit in memory")
	// ErrNoPlan reports that no valid, memory-feasible plan exists.
	ErrNoPlan = errors.New("no feasible plan")
	// ErrTooFewSamples reports that a fit lacks the samples to identify its parameters.
	ErrTooFewSamples = errors.New("too few samples to fit")
	// ErrBadInput reports malformed input (NaN, non-positive sizes, unknown names).
	ErrBadInput = errors.New("bad input")
)

// Spec holds the constants of one model type.
type Spec struct {
	Name        string  `json:"name"`
	Params      float64 `json:"parameters"`   // parameter count
	Layers      int     `json:"layers"`       // transformer layers
	Hidden      int     `json:"hidden"`       // hidden size
	Heads       int     `json:"heads"`        // attention heads
	SeqLen      int     `json:"seq_len"`      // sequence length
	GlobalBatch int     `json:"global_batch"` // samples per iteration; never changes for a job
	// ForwardMs is the profiled forward time of the whole global batch on one GPU, in ms.
	ForwardMs float64 `json:"forward_ms_1gpu"`
}

// WithGlobalBatch is s for a job that trains with global batch b, its
// launch line's: the forward time scales with the samples of a batch, the
// rest of the model type stays. b <= 0 leaves s as it is.
func (s Spec) WithGlobalBatch(b int) Spec {
	if b <= 0 || b == s.GlobalBatch || s.GlobalBatch <= 0 {
		return s
	}
	s.ForwardMs *= float64(b) / float64(s.GlobalBatch)
	s.GlobalBatch = b
	return s
}

// Validate reports the first field of s that cannot be used by the model.
func (s Spec) Validate() error {
	if s.Name == "" {
		return fmt.Errorf("%w: spec.name is empty", ErrBadInput)
	}
	for _, f := range s.fields() {
		if !(f.v > 0) || f.v > f.max {
			return fmt.Errorf("%w: spec %s: %s=%s must be > 0 and at most %s", ErrBadInput, s.Name, f.key, specNum(f.v), specNum(f.max))
		}
	}
	return nil
}

// Bounds of a spec's values: far above any model trained, they keep a typo
// (a few zeros too many) from being planned. Planning time grows with the
// global batch (its divisors are the micro-batches tried): 2e9 took seconds
// per placement, which every cycle of rubickd would spend.
const (
	MaxSpecParams    = 1e15
	MaxSpecLayers    = 1 << 16
	MaxSpecHidden    = 1 << 20
	MaxSpecHeads     = 1 << 16
	MaxSpecSeqLen    = 1 << 24
	MaxGlobalBatch   = 1 << 20
	MaxSpecForwardMs = 1e10
)

// specField is one of a spec's values with its models.json key and bound.
type specField struct {
	key    string
	v, max float64
}

// fields are the spec's values in models.json's order.
func (s Spec) fields() [7]specField {
	return [...]specField{
		{"parameters", s.Params, MaxSpecParams}, {"layers", float64(s.Layers), MaxSpecLayers},
		{"hidden", float64(s.Hidden), MaxSpecHidden}, {"heads", float64(s.Heads), MaxSpecHeads},
		{"seq_len", float64(s.SeqLen), MaxSpecSeqLen}, {"global_batch", float64(s.GlobalBatch), MaxGlobalBatch},
		{"forward_ms_1gpu", s.ForwardMs, MaxSpecForwardMs},
	}
}

// KeyValues lists the spec key by key as models.json names them,
// "key=value".
func (s Spec) KeyValues() []string {
	var out []string
	for _, f := range s.fields() {
		out = append(out, f.key+"="+specNum(f.v))
	}
	return out
}

// Changes says what differs from s in n, key by key as models.json names
// them, e.g. "forward_ms_1gpu: 2300 -> 23000"; the name is not compared.
func (s Spec) Changes(n Spec) []string {
	var out []string
	o, w := s.fields(), n.fields()
	for i := range o {
		if o[i].v != w[i].v {
			out = append(out, fmt.Sprintf("%s: %s -> %s", o[i].key, specNum(o[i].v), specNum(w[i].v)))
		}
	}
	return out
}

// specNum writes a spec value as models.json would: a whole number as
// one, up to the counts' bounds, anything else in %g.
func specNum(v float64) string {
	if v == float64(int64(v)) && v > -1e16 && v < 1e16 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Family is the plan family used by the artifact's traces and by reports.
type Family string

// Plan families.
const (
	FamilyGA          Family = "ga"           // data parallel + gradient accumulation
	FamilyGC          Family = "gc"           // data parallel + activation checkpointing
	FamilyZeroDP      Family = "zero-dp"      // ZeRO-DP (stage >= 1), no offload
	FamilyZeroOffload Family = "zero-offload" // ZeRO-Offload
	Family3D          Family = "3d"           // tensor and/or pipeline parallel
)

// Families lists every family in report order.
var Families = []Family{FamilyGA, FamilyGC, FamilyZeroDP, FamilyZeroOffload, Family3D}

// Plan is an execution plan. DP*TP*PP equals the GPUs of the placement and
// DP*MicroBatch*Accum equals the model's global batch.
type Plan struct {
	DP         int  `json:"dp"`
	TP         int  `json:"tp"`
	PP         int  `json:"pp"`
	MicroBatch int  `json:"micro_batch"` // per-GPU micro-batch size
	Accum      int  `json:"accum"`       // micro-batches per iteration per DP rank (pipeline m when PP > 1)
	ZeRO       int  `json:"zero"`        // ZeRO stage 0-3
	Offload    bool `json:"offload"`     // ZeRO-Offload: optimizer states and step on the CPU
	Checkpoint bool `json:"checkpoint"`  // activation checkpointing (recompute)
}

// GPUs is the number of GPUs the plan runs on.
func (p Plan) GPUs() int { return p.DP * p.TP * p.PP }

// Family classifies the plan.
func (p Plan) Family() Family {
	switch {
	case p.TP > 1 || p.PP > 1:
		return Family3D
	case p.Offload:
		return FamilyZeroOffload
	case p.ZeRO > 0:
		return FamilyZeroDP
	case p.Checkpoint:
		return FamilyGC
	default:
		return FamilyGA
	}
}

// String renders the plan compactly, e.g. "dp4.tp2.pp1.mb2.a1.z0" with
// "+off" and "+gc" suffixes.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dp%d.tp%d.pp%d.mb%d.a%d.z%d", p.DP, p.TP, p.PP, p.MicroBatch, p.Accum, p.ZeRO)
	if p.Offload {
		b.WriteString("+off")
	}
	if p.Checkpoint {
		b.WriteString("+gc")
	}
	return b.String()
}

// Placement lists the GPUs a job uses on each node it spans.
type Placement []int

// Bounds on a parsed placement: far above any cluster, low enough that a
// typo or a hostile report cannot make the parser allocate gigabytes.
const (
	maxPlacementNodes = 100000
	maxGPUsPerNode    = 1024
)

// ParsePlacement parses the forms Placement.String writes: digits, one per
// node, when every node holds at most 9 GPUs ("2222", "88888888"); "NxG" for
// N nodes of G GPUs each ("1x16", "2x16"); or dash-separated counts, at least
// two ("16-8", "16-16").
func ParsePlacement(s string) (Placement, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: placement is empty", ErrBadInput)
	}
	if ns, gs, ok := strings.Cut(s, "x"); ok {
		n, err := placementCount(s, "node count", ns, maxPlacementNodes)
		if err != nil {
			return nil, err
		}
		g, err := placementCount(s, "GPU count", gs, maxGPUsPerNode)
		if err != nil {
			return nil, err
		}
		p := make(Placement, n)
		for i := range p {
			p[i] = g
		}
		return p, nil
	}
	if strings.Contains(s, "-") {
		// Count before splitting so that a huge input is refused unallocated.
		if n := strings.Count(s, "-") + 1; n > maxPlacementNodes {
			return nil, fmt.Errorf("%w: placement %q: %d nodes exceeds the limit of %d", ErrBadInput, clipPlacement(s), n, maxPlacementNodes)
		}
		parts := strings.Split(s, "-")
		p := make(Placement, len(parts))
		for i, part := range parts {
			g, err := placementCount(s, "GPU count", part, maxGPUsPerNode)
			if err != nil {
				return nil, err
			}
			p[i] = g
		}
		return p, nil
	}
	// One node a byte: as many as the other forms may have.
	if len(s) > maxPlacementNodes {
		return nil, fmt.Errorf("%w: placement %q: %d nodes exceeds the limit of %d", ErrBadInput, clipPlacement(s), len(s), maxPlacementNodes)
	}
	p := make(Placement, 0, len(s))
	for _, r := range s {
		if r < '1' || r > '9' {
			return nil, fmt.Errorf("%w: placement %q: %q is not a GPU count 1-9", ErrBadInput, clipPlacement(s), r)
		}
		p = append(p, int(r-'0'))
	}
	return p, nil
}

// clipPlacement bounds a placement quoted in an error: one of 100000
// nodes would fill the message.
func clipPlacement(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// placementCount reads part of placement s, a count of what, as a decimal
// in [1, limit]. Only digits pass: strconv.Atoi would also take a sign.
func placementCount(s, what, part string, limit int) (int, error) {
	if part == "" || strings.TrimLeft(part, "0123456789") != "" {
		return 0, fmt.Errorf("%w: placement %q: %s %q is not a number", ErrBadInput, clipPlacement(s), what, clipPlacement(part))
	}
	n, err := strconv.Atoi(part)
	if err != nil || n > limit { // Atoi fails here only on overflow
		return 0, fmt.Errorf("%w: placement %q: %s %s exceeds the limit of %d", ErrBadInput, clipPlacement(s), what, clipPlacement(part), limit)
	}
	if n < 1 {
		return 0, fmt.Errorf("%w: placement %q: %s %s must be >= 1", ErrBadInput, clipPlacement(s), what, clipPlacement(part))
	}
	return n, nil
}

// GPUs is the total GPU count.
func (p Placement) GPUs() int {
	n := 0
	for _, g := range p {
		n += g
	}
	return n
}

// Nodes is the number of nodes spanned.
func (p Placement) Nodes() int { return len(p) }

// MaxPerNode is the largest per-node GPU count.
func (p Placement) MaxPerNode() int {
	m := 0
	for _, g := range p {
		m = max(m, g)
	}
	return m
}

// Canonical returns the placement with nodes sorted by descending GPU count;
// two placements with the same canonical form perform the same.
func (p Placement) Canonical() Placement {
	c := slices.Clone(p)
	slices.SortFunc(c, func(a, b int) int { return b - a })
	return c
}

// String renders the placement as digits when every node holds at most 9
// GPUs (the artifact's form), else as "NxG" when all N nodes hold the same G,
// else as dash-separated counts. The last two keep a node of 10 or more GPUs
// from reading back as several nodes; ParsePlacement reads all three.
func (p Placement) String() string {
	if p.MaxPerNode() <= 9 {
		var b strings.Builder
		for _, g := range p {
			b.WriteString(strconv.Itoa(g))
		}
		return b.String()
	}
	if slices.Min(p) == slices.Max(p) {
		return fmt.Sprintf("%dx%d", len(p), p[0])
	}
	parts := make([]string, len(p))
	for i, g := range p {
		parts[i] = strconv.Itoa(g)
	}
	return strings.Join(parts, "-")
}

// Resources are what a job holds: GPUs per node, CPUs and host memory in total.
type Resources struct {
	Placement Placement `json:"placement"`
	CPUs      int       `json:"cpus"`        // CPU cores over all nodes
	HostMemGB float64   `json:"host_mem_gb"` // host memory over all nodes
}

// Env holds the facts of the cluster the model prices: link bandwidths and
// memory sizes. One value per link type for the whole cluster.
type Env struct {
	IntraGBps float64 `json:"intra_gbps"`  // GPU-GPU inside a node (NVLink)
	InterGBps float64 `json:"inter_gbps"`  // between nodes (RDMA)
	PCIeGBps  float64 `json:"pcie_gbps"`   // CPU-GPU
	GPUMemGB  float64 `json:"gpu_mem_gb"`  // memory of one GPU
	NodeMemGB float64 `json:"node_mem_gb"` // host memory of one node
	NodeCPUs  int     `json:"node_cpus"`   // CPU cores of one node
	NodeGPUs  int     `json:"node_gpus"`   // GPUs of one node
	// GPUsPerNIC is how many GPUs of a node share one inter-node NIC of
	// InterGBps; a node reaches the network through ceil(GPUs used /
	// GPUsPerNIC) NICs. 0 means one NIC for the whole node.
	GPUsPerNIC int `json:"gpus_per_nic"`
	// HostMemGBps is the effective host memory bandwidth of a node, which
	// the CPU Adam step of ZeRO-Offload streams its state through; 0 means
	// the DefaultEnv value.
	HostMemGBps float64 `json:"host_mem_gbps"`
	// Pipeline1F1B is set when the training framework overlaps pipeline
	// micro-batches across stages (1F1B); the jobs the artifact measured ran
	// them one at a time, which DefaultEnv models.
	Pipeline1F1B bool `json:"pipeline_1f1b"`
	// RidgeFlopPerByte is the GPU's roofline ridge point: peak matrix
	// FLOP/s over memory bytes/s. Tensor parallelism divides a layer's
	// GEMM FLOPs by t but not the traffic of its replicated activations,
	// so a shard runs slower than 1/t of the layer (see tpSlowdown); 0
	// prices TP shards at exactly 1/t.
	RidgeFlopPerByte float64 `json:"ridge_flop_per_byte"`
}

// Params are the fitted parameters of a model type: the seven of the
// equations (docs/model.md, Equations) and K3D.
type Params struct {
	KBwd    float64 `json:"k_bwd"`     // backward / forward time ratio
	KSync   float64 `json:"k_sync"`    // overlap of backward and DP communication
	KOpt    float64 `json:"k_opt"`     // optimizer time per parameter on GPU
	KOptOff float64 `json:"k_opt_off"` // CPU Adam time per parameter per core
	KOff    float64 `json:"k_off"`     // overlap of DP communication and offload transfer
	KSwap   float64 `json:"k_swap"`    // overlap of CPU optimizer and offload transfer
	KConst  float64 `json:"k_const"`   // constant per-iteration overhead
	// K3D scales the compute of plans with TP or PP > 1, which run on
	// another code path (Megatron) than the data-parallel plans a profile
	// measures (DeepSpeed). Only 3D samples identify it; 0 means 1.
	K3D float64 `json:"k_3d"`
}

// Breakdown is a predicted iteration, in seconds.
type Breakdown struct {
	Fwd    float64 `json:"fwd_s"`
	Bwd    float64 `json:"bwd_s"`
	CommDP float64 `json:"comm_dp_s"`
	CommTP float64 `json:"comm_tp_s"`
	CommPP float64 `json:"comm_pp_s"`
	CC     float64 `json:"cc_s"`  // compute + communication
	Opt    float64 `json:"opt_s"` // optimizer step
	Off    float64 `json:"off_s"` // offload transfer
	OO     float64 `json:"oo_s"`  // optimizer + offload after overlap
	Iter   float64 `json:"iter_s"`
}

// Sample is one measured iteration of a plan on some resources.
type Sample struct {
	Plan      Plan      `json:"plan"`
	Resources Resources `json:"resources"`
	IterS     float64   `json:"iter_s"` // measured iteration time, seconds
	// Optional measured phases (seconds, 0 when unknown) that a fit may also use.
	FwdS, CCS, OptS float64
}
