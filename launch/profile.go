package launch

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/model"
)

// Profiling phase bounds (docs/rubick-srun.md, Profiling phase): a fit of
// the seven model parameters needs at least MinProfileRuns sampled
// configurations, one per parameter, at least MinProfileOffloadRuns of them
// with ZeRO-Offload, one per parameter only offload runs see (k_opt_off,
// k_off, k_swap).
const (
	MinProfileRuns        = 7
	MinProfileOffloadRuns = 3
	// MinPartialProfileRuns is the fewest configurations a phase must
	// measure for rubickd to fit the model type on them, the parameters
	// they cannot identify held at their priors: a large model fails the
	// plain data-parallel runs for memory. A fit on one puts all the
	// priors miss into k_const, and on two some models' fits are far off
	// (docs/model.md, Fit); three are what the shipped llama fits rest
	// on, and the phase's first five runs hold three such a model runs
	// (the ZeRO-Offload ones), should its time bound cut it short.
	MinPartialProfileRuns = 3
	// DefaultProfileIters is the iterations of one profiling run, the
	// first of which is warm-up.
	DefaultProfileIters = 6
	// ProfilingBound is how long after its start rubickd counts a job
	// tagged profile=1 as profiling its model type while its rubick-srun
	// has not reported the phase over; past it, another job of the type
	// may profile. ProfilingSetup is the room in it for the batch script
	// before the phase: a phase bound above ProfilingBound-ProfilingSetup
	// may outlast it.
	ProfilingBound = 20 * time.Minute
	ProfilingSetup = 5 * time.Minute
	// ProfileMemoryHeadroom is the share of a GPU's memory a profiling run
	// may be predicted to need (model.Predictor.Memory) and still be run
	// (MemoryFits). The artifact's memory verdicts the model gets right
	// put what fits at 0.90 of the memory at most and what does not at
	// 1.28 at least (docs/model.md, Memory). The bound sits near the low
	// end of that gap: a run that fails costs the phase part of its time
	// bound, one left out only gives its place to a lighter variant, and
	// the model leaves out what trainers may add (fp32 main gradients,
	// attention scores without fused kernels).
	ProfileMemoryHeadroom = 0.95
	// ProfileHostMemoryHeadroom is the share of the job's memory on the
	// node a ZeRO-Offload profiling run may be predicted to need there
	// (model.MemoryEstimate.HostGBNode) and still be run
	// (HostMemoryFits). Slurm's cgroup kills the job's processes past
	// that memory, after the run's start-up. It sits below the GPU's
	// bound: the estimate counts 14 bytes per offloaded parameter, where
	// the trainers' CPU optimizers hold 16 or more (fp32 gradients,
	// DeepSpeed's pinned accumulation copies), and the same cgroup holds
	// rubick-srun, data loader workers and their shared memory. Nothing
	// calibrates it against measured runs as the GPU's is.
	ProfileHostMemoryHeadroom = 0.8
)

// TagArch is the rubick tag key (slurm.Tag.Extra) in which rubickd gives
// a job it asks to profile (profile=1) the memory inputs of its model
// type, ArchValue's form, so that rubick-srun can leave out the runs that
// cannot fit in its GPUs (MemoryFits). A tag without it (an older
// rubickd's) has every run tried.
const TagArch = "arch"

// maxArchInt bounds the whole numbers of an arch value: far above any
// model, low enough that no product of them overflows.
const maxArchInt = 1 << 24

// ArchValue writes the fields of spec the memory model reads as a tag
// value: "<parameters>,<layers>,<hidden>,<seq_len>", e.g.
// "1.3e+10,40,5120,2048", of characters a tag value may hold and well
// within its 256 bytes.
func ArchValue(spec model.Spec) string {
	return strings.Join([]string{strconv.FormatFloat(spec.Params, 'g', -1, 64), strconv.Itoa(spec.Layers),
		strconv.Itoa(spec.Hidden), strconv.Itoa(spec.SeqLen)}, ",")
}

// ParseArch reads an ArchValue back into a spec with only Params, Layers,
// Hidden and SeqLen set. Errors wrap ErrBadInput and name the field.
func ParseArch(v string) (model.Spec, error) {
	f := strings.Split(v, ",")
	if len(f) != 4 {
		return model.Spec{}, fmt.Errorf("%w: tag %s=%q: want <parameters>,<layers>,<hidden>,<seq_len>", ErrBadInput, TagArch, v)
	}
	var s model.Spec
	p, err := strconv.ParseFloat(f[0], 64)
	if err != nil || !(p > 0) || math.IsInf(p, 0) {
		return model.Spec{}, fmt.Errorf("%w: tag %s=%q: parameters=%q must be a finite number > 0", ErrBadInput, TagArch, v, f[0])
	}
	s.Params = p
	for i, w := range []struct {
		name string
		dst  *int
	}{{"layers", &s.Layers}, {"hidden", &s.Hidden}, {"seq_len", &s.SeqLen}} {
		n, err := strconv.Atoi(f[i+1])
		if err != nil || n < 1 || n > maxArchInt {
			return model.Spec{}, fmt.Errorf("%w: tag %s=%q: %s=%q is not a whole number in 1..%d", ErrBadInput, TagArch, v, w.name, f[i+1], maxArchInt)
		}
		*w.dst = n
	}
	return s, nil
}

// ProfileOptions tune ProfilePlans.
type ProfileOptions struct {
	// MaxMicroBatch caps the micro-batch of every run, so that no run holds
	// more activations per GPU than the job's own plan does; fewer GPUs
	// then accumulate more. 0 means no cap.
	MaxMicroBatch int
	// Iters is the iterations each run trains, warm-up included;
	// 0 means DefaultProfileIters. It must be at least 2.
	Iters int
	// TP is a tensor-parallel degree the model admits (it divides the
	// attention heads). When it is above 1, the dialect expresses TP and
	// the node has TP GPUs, a run with TP on that many GPUs follows the
	// ZeRO-DP run: the profile's only run on the 3D code path, which
	// identifies k_3d. 0 means none.
	TP int
	// Fits reports whether a run of plan on placement pl (one node) fits
	// in memory (MemoryFits, HostMemoryFits). A run it rejects is left
	// out, and more variants that fit fill the phase up to its minimum; it
	// is asked once per distinct plan. nil means every run fits.
	Fits func(plan model.Plan, pl model.Placement) bool
}

// MemoryFits is a ProfileOptions.Fits for a model type of spec on GPUs of
// gpuMemGB each (model.Env's unit): a run fits when the memory model
// predicts it needs at most ProfileMemoryHeadroom of the GPU. Only the
// spec's Params, Layers, Hidden and SeqLen are read. A gpuMemGB <= 0
// (unknown) gives nil: every run fits.
func MemoryFits(spec model.Spec, gpuMemGB float64) func(model.Plan, model.Placement) bool {
	if !(gpuMemGB > 0) {
		return nil
	}
	p := model.Predictor{Spec: spec}
	return func(plan model.Plan, pl model.Placement) bool {
		return p.Memory(plan, pl).GPUGB <= ProfileMemoryHeadroom*gpuMemGB
	}
}

// HostMemoryFits is a ProfileOptions.Fits for a model type of spec in a
// job with hostMemGB of memory on the node (Slurm's --mem, GB of 1024 MB):
// a ZeRO-Offload run fits when the memory model predicts the node's ranks
// need at most ProfileHostMemoryHeadroom of it; other runs keep no
// optimizer states on the host and always fit, as model.Predictor.Feasible
// has it. Only the spec's Params is read. A hostMemGB <= 0 (unknown, or
// --mem=0: the whole node) gives nil: every run fits.
func HostMemoryFits(spec model.Spec, hostMemGB float64) func(model.Plan, model.Placement) bool {
	if !(hostMemGB > 0) {
		return nil
	}
	p := model.Predictor{Spec: spec}
	return func(plan model.Plan, pl model.Placement) bool {
		return !plan.Offload || p.Memory(plan, pl).HostGBNode <= ProfileHostMemoryHeadroom*hostMemGB
	}
}

// ProfileRun is one short configuration of the profiling phase. It runs on
// the first node of the job only.
type ProfileRun struct {
	// Plan is what the run trains with, as the dialect expresses it
	// (Expressible), with the job's global batch: data parallel, except
	// for the one tensor-parallel run of ProfileOptions.TP.
	Plan model.Plan `json:"-"`
	// GPUs is the number of GPUs used: the first GPUs of the node
	// (VisibleDevices). It equals Plan.GPUs().
	GPUs int `json:"gpus"`
	// CPUs is the CPU cores the run gets on the node; 0 when the node's
	// CPUs are unknown (srun's default then applies).
	CPUs int `json:"cpus"`
	// Iters is the iterations to train, the first being warm-up.
	Iters int `json:"iters"`
	// Purpose says which terms of the model the run isolates.
	Purpose string `json:"purpose"`
}

// ProfilePlans chooses the configurations of a profiling phase for a job
// whose global batch is globalBatch, on one node with gpusOnNode GPUs and
// cpusOnNode CPUs (0 when unknown), for a launch line of dialect d. The
// choice is deterministic and ordered by how much each run adds to the fit,
// so a phase cut short by its time bound keeps the most useful runs:
//
//  1. plain DP on all GPUs (compute plus the DP all-reduce),
//  2. plain DP on 1 GPU (compute alone: no communication),
//  3. ZeRO-Offload on 1 GPU with all CPUs (CPU Adam and PCIe, no communication),
//  4. ZeRO-Offload on all GPUs with all CPUs (offload overlapped with communication),
//  5. ZeRO-Offload on 1 GPU with half the CPUs (CPU Adam time doubles, PCIe does not),
//  6. plain DP on 2 GPUs, 7. ZeRO-DP on all GPUs,
//  8. tensor parallel on opts.TP GPUs (lines that express TP; the 3D code path),
//  9. plain DP on 4 GPUs, 10. ZeRO-Offload on 2 GPUs,
//  11. activation checkpointing on all GPUs,
//
// leaving out those the node or the batch cannot take (GPU counts must
// divide the global batch; "all GPUs" is the largest count that does) and
// those opts.Fits rejects, then adding variants until there are at least
// MinProfileRuns runs, at least MinProfileOffloadRuns with offload. Every
// run keeps the global batch: DP x MicroBatch x Accum = globalBatch, with
// the largest micro-batch up to opts.MaxMicroBatch and accumulation for
// the rest. When opts.Fits rejects every run, the error wraps
// model.ErrInfeasible.
func ProfilePlans(globalBatch, gpusOnNode, cpusOnNode int, d Dialect, opts ProfileOptions) ([]ProfileRun, error) {
	switch {
	case globalBatch < 1:
		return nil, fmt.Errorf("%w: profile: global batch=%d must be >= 1", ErrBadInput, globalBatch)
	case gpusOnNode < 1:
		return nil, fmt.Errorf("%w: profile: GPUs on node=%d must be >= 1", ErrBadInput, gpusOnNode)
	case cpusOnNode < 0:
		return nil, fmt.Errorf("%w: profile: CPUs on node=%d must be >= 0", ErrBadInput, cpusOnNode)
	case opts.MaxMicroBatch < 0:
		return nil, fmt.Errorf("%w: profile: max micro-batch=%d must be >= 0", ErrBadInput, opts.MaxMicroBatch)
	case d == DialectAuto:
		return nil, fmt.Errorf("%w: profile: the dialect must be known", ErrBadInput)
	}
	if _, err := ParseDialect(string(d)); err != nil {
		return nil, err
	}
	iters := opts.Iters
	if iters == 0 {
		iters = DefaultProfileIters
	}
	if iters < 2 {
		return nil, fmt.Errorf("%w: profile: iterations=%d must be >= 2 (the first is warm-up)", ErrBadInput, iters)
	}

	b := profileBuilder{gb: globalBatch, cpus: cpusOnNode, d: d, cap: opts.MaxMicroBatch, iters: iters, fits: opts.Fits}
	all := 1 // the largest GPU count that divides the global batch
	for g := min(gpusOnNode, globalBatch); g >= 1; g-- {
		if globalBatch%g == 0 {
			all = g
			break
		}
	}
	usable := func(g int) bool { return g <= all && globalBatch%g == 0 }
	half := b.cpuShare(2)

	b.add(all, 0, false, false, b.cpus, "plain DP on all GPUs: compute and the DP all-reduce (k_bwd, k_sync)")
	b.add(1, 0, false, false, b.cpus, "plain DP on 1 GPU: compute alone, no communication (k_bwd, k_opt + k_const)")
	b.add(1, 2, true, false, b.cpus, "ZeRO-Offload on 1 GPU, all CPUs: CPU Adam and PCIe, no communication (k_opt_off, k_swap)")
	b.add(all, 2, true, false, b.cpus, "ZeRO-Offload on all GPUs, all CPUs: offload overlapped with the DP all-reduce (k_off)")
	b.add(1, 2, true, false, half, "ZeRO-Offload on 1 GPU, half the CPUs: CPU Adam time doubles, PCIe does not (k_opt_off vs k_swap)")
	if usable(2) {
		b.add(2, 0, false, false, b.cpus, "plain DP on 2 GPUs: DP volume 2(d-1)/d against compute (k_sync)")
	}
	if all > 1 {
		b.add(all, 2, false, false, b.cpus, "ZeRO-DP on all GPUs: optimizer step sharded over DP (k_opt apart from k_const)")
	}
	if t := opts.TP; t > 1 && t <= gpusOnNode && cannotOf(d, true)&model.FeatureTP == 0 {
		mb := b.microBatch(globalBatch)
		b.try(ProfileRun{Plan: Expressible(d, model.Plan{DP: 1, TP: t, PP: 1, MicroBatch: mb, Accum: globalBatch / mb}),
			GPUs: t, CPUs: b.cpus - b.cpus%t, Iters: iters,
			Purpose: fmt.Sprintf("tensor parallel on %d GPUs: the 3D code path's compute against data parallelism's (k_3d)", t)})
	}
	if usable(4) {
		b.add(4, 0, false, false, b.cpus, "plain DP on 4 GPUs: DP volume against compute (k_sync)")
	}
	if usable(2) {
		b.add(2, 2, true, false, b.cpus, "ZeRO-Offload on 2 GPUs, all CPUs: offload transfer per GPU halves (k_off, k_swap)")
	}
	b.add(all, 0, false, true, b.cpus, "activation checkpointing on all GPUs: one more forward per iteration (k_bwd)")

	// Variants for small nodes and batches, until the fit's minimum is met.
	pads := []func(){
		func() { b.add(all, 2, true, false, half, "ZeRO-Offload on all GPUs, half the CPUs (k_opt_off)") },
		func() {
			b.add(1, 2, true, false, b.cpuShare(4), "ZeRO-Offload on 1 GPU, a quarter of the CPUs (k_opt_off)")
		},
		func() { b.add(1, 2, true, true, b.cpus, "ZeRO-Offload with checkpointing on 1 GPU (k_bwd, k_opt_off)") },
		func() { b.add(1, 3, true, false, b.cpus, "ZeRO-Offload stage 3 on 1 GPU (k_opt_off, k_swap)") },
		func() {
			b.addHalfMB(1, 2, true, b.cpus, "ZeRO-Offload on 1 GPU with half the micro-batch (k_opt_off against compute)")
		},
	}
	for _, pad := range pads {
		if b.offload >= MinProfileOffloadRuns {
			break
		}
		pad()
	}
	for _, pad := range []func(){
		func() { b.add(1, 0, false, true, b.cpus, "activation checkpointing on 1 GPU (k_bwd)") },
		func() {
			b.addHalfMB(1, 0, false, b.cpus, "plain DP on 1 GPU with half the micro-batch (k_bwd against k_const)")
		},
		func() { b.add(1, 2, false, false, b.cpus, "ZeRO-DP on 1 GPU (k_opt)") },
		func() { b.addHalfMB(all, 0, false, b.cpus, "plain DP on all GPUs with half the micro-batch (k_sync)") },
	} {
		if len(b.runs) >= MinProfileRuns {
			break
		}
		pad()
	}
	if b.left() > 0 {
		// The places of the runs left out for memory go to lighter
		// variants: sharded states, offload, checkpointing and smaller
		// micro-batches, which a large model's GPUs can hold.
		fill := []func(){
			func() {
				b.add(all, 2, false, true, b.cpus, "ZeRO-DP with checkpointing on all GPUs: the optimizer step on the GPU (k_opt, k_bwd)")
			},
			pads[0], pads[2],
			func() {
				b.addSmallerMB(1, 2, true, false, b.cpus, "ZeRO-Offload on 1 GPU with a smaller micro-batch (k_opt_off against compute)")
			},
			func() {
				b.add(all, 2, true, true, b.cpus, "ZeRO-Offload with checkpointing on all GPUs: offload against one more forward (k_off, k_bwd)")
			},
			func() {
				b.addSmallerMB(all, 2, true, false, b.cpus, "ZeRO-Offload on all GPUs with a smaller micro-batch (k_off against compute)")
			},
			pads[1],
			func() {
				if usable(2) {
					b.add(2, 2, true, true, b.cpus, "ZeRO-Offload with checkpointing on 2 GPUs (k_off, k_swap)")
				}
			},
			func() {
				if usable(2) {
					b.addSmallerMB(2, 2, true, false, b.cpus, "ZeRO-Offload on 2 GPUs with a smaller micro-batch (k_off, k_swap)")
				}
			},
			func() {
				b.add(1, 2, true, true, half, "ZeRO-Offload with checkpointing on 1 GPU, half the CPUs (k_opt_off vs k_swap)")
			},
			func() {
				b.addSmallerMB(1, 2, true, false, half, "ZeRO-Offload on 1 GPU with a smaller micro-batch, half the CPUs (k_opt_off vs k_swap)")
			},
			pads[3],
			func() { b.add(all, 3, true, false, b.cpus, "ZeRO-Offload stage 3 on all GPUs (k_off, k_swap)") },
			func() { b.add(all, 3, false, true, b.cpus, "ZeRO-DP stage 3 with checkpointing on all GPUs (k_opt)") },
		}
		for _, f := range fill {
			if len(b.runs) >= MinProfileRuns && b.offload >= MinProfileOffloadRuns {
				break
			}
			f()
		}
	}
	if len(b.runs) == 0 {
		return nil, fmt.Errorf("%w: profile: none of the %d configurations considered fits in memory", model.ErrInfeasible, b.left())
	}
	// A node and batch too small for that many distinct configurations
	// measure some twice: repeated samples still fit, only no better.
	// Without an offload run that fits, none can be repeated.
	distinct, wantOffload := len(b.runs), MinProfileOffloadRuns
	if b.offload == 0 {
		wantOffload = 0
	}
	for i := 0; b.offload < wantOffload || len(b.runs) < MinProfileRuns; i++ {
		r := b.runs[i%distinct]
		if b.offload < wantOffload && !r.Plan.Offload {
			continue
		}
		r.Purpose = "repeat: " + r.Purpose
		b.push(r)
	}
	return b.runs, nil
}

// profileBuilder collects distinct profiling runs in order.
type profileBuilder struct {
	gb, cpus, cap, iters int
	d                    Dialect
	runs                 []ProfileRun
	offload              int
	fits                 func(model.Plan, model.Placement) bool
	// verdicts holds fits's answer for each plan it was asked about.
	verdicts map[model.Plan]bool
}

// fit reports whether plan p fits in memory, asking b.fits once per plan.
func (b *profileBuilder) fit(p model.Plan) bool {
	if b.fits == nil {
		return true
	}
	ok, asked := b.verdicts[p]
	if !asked {
		if b.verdicts == nil {
			b.verdicts = map[model.Plan]bool{}
		}
		ok = b.fits(p, model.Placement{p.GPUs()})
		b.verdicts[p] = ok
	}
	return ok
}

// left is the number of distinct plans left out for memory.
func (b *profileBuilder) left() int {
	n := 0
	for _, ok := range b.verdicts {
		if !ok {
			n++
		}
	}
	return n
}

// cpuShare is 1/div of the node's CPUs, at least one when any are known.
func (b *profileBuilder) cpuShare(div int) int {
	if b.cpus == 0 {
		return 0
	}
	return max(b.cpus/div, 1)
}

// microBatch is the largest divisor of perRank within the cap.
func (b *profileBuilder) microBatch(perRank int) int {
	limit := perRank
	if b.cap > 0 {
		limit = min(limit, b.cap)
	}
	for m := limit; m > 1; m-- {
		if perRank%m == 0 {
			return m
		}
	}
	return 1
}

func (b *profileBuilder) add(gpus, zero int, off, gc bool, cpus int, purpose string) {
	b.addMB(gpus, zero, off, gc, cpus, b.microBatch(b.gb/gpus), purpose)
}

// addHalfMB adds the run with the next smaller micro-batch, if any.
func (b *profileBuilder) addHalfMB(gpus, zero int, off bool, cpus int, purpose string) {
	perRank := b.gb / gpus
	m := b.microBatch(perRank)
	for s := m - 1; s >= 1; s-- {
		if perRank%s == 0 {
			b.addMB(gpus, zero, off, false, cpus, s, purpose)
			return
		}
	}
}

// addSmallerMB adds the run with the largest micro-batch below add's
// that fits in memory, if any.
func (b *profileBuilder) addSmallerMB(gpus, zero int, off, gc bool, cpus int, purpose string) {
	perRank := b.gb / gpus
	for s := b.microBatch(perRank) - 1; s >= 1; s-- {
		if perRank%s != 0 {
			continue
		}
		if b.fit(b.plan(gpus, zero, off, gc, s)) {
			b.addMB(gpus, zero, off, gc, cpus, s, purpose)
			return
		}
	}
}

// plan is the data-parallel plan of a run on gpus GPUs with micro-batch
// mb, as the dialect expresses it.
func (b *profileBuilder) plan(gpus, zero int, off, gc bool, mb int) model.Plan {
	return Expressible(b.d, model.Plan{DP: gpus, TP: 1, PP: 1, MicroBatch: mb, Accum: b.gb / gpus / mb,
		ZeRO: zero, Offload: off, Checkpoint: gc})
}

func (b *profileBuilder) addMB(gpus, zero int, off, gc bool, cpus, mb int, purpose string) {
	p := b.plan(gpus, zero, off, gc, mb)
	if cpus > 0 && gpus > 1 && cpus >= gpus {
		// Whole cores per rank, so srun's per-task split gives exactly cpus.
		cpus -= cpus % gpus
	}
	r := ProfileRun{Plan: p, GPUs: gpus, CPUs: cpus, Iters: b.iters, Purpose: purpose}
	if slices.ContainsFunc(b.runs, func(o ProfileRun) bool { return o.Plan == r.Plan && o.CPUs == r.CPUs }) {
		return
	}
	b.try(r)
}

// try adds r if it fits in memory.
func (b *profileBuilder) try(r ProfileRun) {
	if b.fit(r.Plan) {
		b.push(r)
	}
}

func (b *profileBuilder) push(r ProfileRun) {
	b.runs = append(b.runs, r)
	if r.Plan.Offload {
		b.offload++
	}
}

// VisibleDevices is the CUDA_VISIBLE_DEVICES value that exposes the first n
// GPUs of visible, the job's own CUDA_VISIBLE_DEVICES (all of them when it
// lists fewer); an empty visible means devices 0 to n-1.
func VisibleDevices(visible string, n int) string {
	var ids []string
	for _, f := range strings.Split(visible, ",") {
		if f = strings.TrimSpace(f); f != "" {
			ids = append(ids, f)
		}
	}
	if len(ids) == 0 {
		for i := range n {
			ids = append(ids, strconv.Itoa(i))
		}
	}
	return strings.Join(ids[:min(n, len(ids))], ",")
}

// Flags a profiling run sets on Megatron lines.
var (
	fExitInterval = valued("--exit-interval")
	fLogInterval  = valued("--log-interval")
	fSaveInterval = valued("--save-interval")
	// The job's experiment trackers. Either W&B name starts a run in
	// Megatron-DeepSpeed, only the project in Megatron-LM.
	fTensorBoardDir = valued("--tensorboard-dir")
	fWandbProject   = valued("--wandb-project")
	fWandbExpName   = valued("--wandb-exp-name")
)

// RewriteProfile rewrites argv for one profiling run: Rewrite with the
// run's plan (opts.Nodes and opts.GPUsPerNode size a per-node launcher, as
// for Rewrite), then bounded and kept away from the job's checkpoints:
//
//   - Megatron and Megatron-DeepSpeed: --save, --load and --save-interval
//     are removed, so the run starts from scratch and writes no checkpoint
//     (Megatron saves at --exit-interval only when --save is set);
//     --exit-interval run.Iters makes it exit after that many iterations;
//     --log-interval 1 logs every iteration. The run logs to none of the
//     job's trackers: a --tensorboard-dir becomes opts.ConfigDir/tensorboard,
//     and --wandb-project and --wandb-exp-name are removed (without --save
//     Megatron would put the W&B run's files under os.path.join(None,
//     "wandb"), which raises, unless --wandb-save-dir is set).
//   - DeepSpeed: the config copy gets steps_per_print 1 so every step is
//     logged. A plain DeepSpeed script has no exit bound, and its own
//     checkpoint flags are unknown: the caller stops it after run.Iters
//     measured iterations. A line accelerate launch starts with its
//     DeepSpeed plugin and no Hugging Face Trainer --deepspeed is refused
//     (ErrUnsupported): accelerate stops DeepSpeed's step logging, so the
//     run would measure nothing (CheckSamples warns about the same lines).
//     A Trainer line is timed by its progress bar, whoever launches it.
//   - A config copy (DeepSpeed, Megatron-DeepSpeed) has its trackers
//     (tensorboard, wandb, csv_monitor, comet) disabled.
//   - A Hugging Face Trainer line also writes into opts.ConfigDir/output
//     (--output_dir; its own --logging_dir is removed, so logs go there
//     too), saves no checkpoint (--save_strategy no) and starts from
//     scratch (--resume_from_checkpoint removed), and reports to no
//     tracker (--report_to none, whatever values it had) nor the Hub
//     (--push_to_hub removed). It shows its
//     progress bar (--disable_tqdm False), which the run is timed by,
//     and logs at --log_level info.
//
// opts.EnsureLoad, opts.CheckpointDir and opts.Saved are ignored.
func RewriteProfile(argv []string, run ProfileRun, opts Options) (Result, error) {
	if run.Iters < 1 {
		return Result{}, fmt.Errorf("%w: profile run %s: iterations=%d must be >= 1", ErrBadInput, run.Plan, run.Iters)
	}
	opts.EnsureLoad, opts.CheckpointDir, opts.Saved = false, "", nil
	res, err := Rewrite(argv, run.Plan, opts)
	if err != nil {
		return Result{}, err
	}
	switch res.Dialect {
	case Megatron, MegatronDeepSpeed:
		c := &cmdline{toks: res.Argv}
		lo, hi := parseLayout(c.toks).trainLo(), len(c.toks)
		hi = c.remove(fSave, lo, hi)
		hi = c.remove(fLoad, lo, hi)
		hi = c.remove(fSaveInterval, lo, hi)
		hi = c.set(fExitInterval, strconv.Itoa(run.Iters), lo, hi)
		hi = c.set(fLogInterval, "1", lo, hi)
		// Steps 1 to run.Iters of a configuration not the job's, in the
		// job's TensorBoard curves or as a W&B run of its project.
		if c.has(fTensorBoardDir, lo, hi) {
			hi = c.set(fTensorBoardDir, filepath.Join(opts.ConfigDir, "tensorboard"), lo, hi)
		}
		hi = c.remove(fWandbProject, lo, hi)
		c.remove(fWandbExpName, lo, hi)
		res.Argv = c.toks
	case DeepSpeed:
		// A Trainer given its own --deepspeed is timed by its progress bar
		// (below), launched by accelerate's plugin or not: its
		// TrainingArguments build the plugin from that config.
		if l := parseLayout(argv); !res.hf && l.accDeepSpeed(&cmdline{toks: argv}) {
			// Its Accelerator sets the config's steps_per_print to
			// infinity, whatever the line's copy says.
			return Result{}, fmt.Errorf("%w: profile run %s: accelerate launch --use_deepspeed without a Hugging Face Trainer's --deepspeed "+
				"has DeepSpeed print no iteration times to measure", ErrUnsupported, run.Plan)
		}
		if res.hf {
			c := &cmdline{toks: res.Argv}
			lo, hi := parseLayout(c.toks).trainLo(), len(c.toks)
			// The Trainer's progress bar is the run's only measure: the
			// Trainer builds its DeepSpeed engine through accelerate,
			// which turns DeepSpeed's step lines off. The bar is off where
			// transformers' log level is above warning, or by the line.
			hi = c.set(fHFDisableTqdm, "False", lo, hi)
			// The Trainer gives DeepSpeed's logger its own level.
			hi = c.set(fHFLogLevel, "info", lo, hi)
			res.Argv = hfProfile(c, filepath.Join(opts.ConfigDir, "output"), lo, hi)
		}
	}
	if res.Config != nil {
		obj, err := parseObject(res.Config.Data)
		if err != nil {
			return Result{}, fmt.Errorf("DeepSpeed config %s: %w", res.Config.Source, err)
		}
		if res.Dialect == DeepSpeed {
			obj.setInt("steps_per_print", 1)
		}
		if err := muteMonitors(obj); err != nil {
			return Result{}, fmt.Errorf("DeepSpeed config %s: %w", res.Config.Source, err)
		}
		if res.Config.Data, err = obj.indented(); err != nil {
			return Result{}, fmt.Errorf("DeepSpeed config %s: %w", res.Config.Source, err)
		}
	}
	return res, nil
}

// dsMonitors are the DeepSpeed config's experiment trackers.
var dsMonitors = []string{"tensorboard", "wandb", "csv_monitor", "comet"}

// muteMonitors turns off the trackers cfg enables: a profiling run's steps,
// of a configuration not the job's, would go into the job's TensorBoard
// curves and CSV logs, and make a run in its W&B or Comet project. A
// section that is not an object is left for DeepSpeed to refuse.
func muteMonitors(cfg *jsonObject) error {
	for _, k := range dsMonitors {
		m, err := cfg.object(k)
		if err != nil || m == nil {
			continue
		}
		m.setBool("enabled", false)
		if err := cfg.setObject(k, m); err != nil {
			return err
		}
	}
	return nil
}

// SelfExiting reports whether a line of dialect d, rewritten by
// RewriteProfile, stops on its own after its iterations.
func SelfExiting(d Dialect) bool { return d == Megatron || d == MegatronDeepSpeed }

// hfProfile keeps a Hugging Face Trainer line's profiling run out of the
// job's output directory, where a script that resumes from its last
// checkpoint (get_last_checkpoint) would take the run's, and one that
// refuses a non-empty directory without a checkpoint would stop at the
// run's logs, and away from the job's trackers and Hub repository. It
// returns the line's tokens.
func hfProfile(c *cmdline, out string, lo, hi int) []string {
	hi = c.set(fHFOutputDir, out, lo, hi)
	hi = c.remove(fHFLoggingDir, lo, hi)
	hi = c.remove(fHFResume, lo, hi)
	hi = c.set(fHFSaveStrategy, "no", lo, hi)
	// A run of a configuration not the job's would make a run in the
	// job's W&B (or other tracker's) project, and the Trainer reports to
	// every tracker installed unless told otherwise.
	hi = c.dropListValues(fHFReportTo, lo, hi)
	hi = c.set(fHFReportTo, "none", lo, hi)
	// The Trainer refuses it unless saving and evaluation share a strategy.
	hi = c.remove(fHFBestAtEnd, lo, hi)
	// A run of a configuration not the job's would create or update the
	// job's Hub repository with the run's output at its end.
	c.remove(fHFPushToHub, lo, hi)
	return c.toks
}
