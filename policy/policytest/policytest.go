// Package policytest holds fixtures for policy tests: fluent builders for
// jobs and clusters, and a small deterministic Estimator that behaves like a
// performance model (data and tensor parallelism, ZeRO, offload, a slower
// network between nodes, GPU and host memory limits) without fitting.
package policytest

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
)

// Epoch is the time fixtures count from.
var Epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// JobBuilder builds a policy.Job.
type JobBuilder struct{ j policy.Job }

// NewJob starts a best-effort job of model type m asking for one GPU with
// the default plan, submitted at Epoch.
func NewJob(id, m string) *JobBuilder {
	return &JobBuilder{j: policy.Job{ID: id, Model: m, Tenant: "default", Submit: Epoch,
		Request: policy.Request{GPUs: 1, CPUs: 8}}}
}

// GPUs sets the requested GPUs (and 8 CPUs per GPU).
func (b *JobBuilder) GPUs(n int) *JobBuilder {
	b.j.Request.GPUs, b.j.Request.CPUs = n, 8*n
	return b
}

// CPUs sets the requested CPUs.
func (b *JobBuilder) CPUs(n int) *JobBuilder { b.j.Request.CPUs = n; return b }

// Plan sets the requested plan.
func (b *JobBuilder) Plan(p model.Plan) *JobBuilder { b.j.Request.Plan = p; return b }

// Guaranteed marks the job as guaranteed (SLO, quota).
func (b *JobBuilder) Guaranteed() *JobBuilder { b.j.Guaranteed = true; return b }

// Tenant sets the tenant.
func (b *JobBuilder) Tenant(t string) *JobBuilder { b.j.Tenant = t; return b }

// SubmittedAt sets the submission time as an offset from Epoch.
func (b *JobBuilder) SubmittedAt(d time.Duration) *JobBuilder { b.j.Submit = Epoch.Add(d); return b }

// Running makes the job hold alloc (see On) and run plan p, having run for rt.
func (b *JobBuilder) Running(p model.Plan, rt time.Duration, alloc ...policy.NodeAlloc) *JobBuilder {
	b.j.Alloc, b.j.Plan, b.j.RunTime = alloc, p, rt
	return b
}

// Reconfigs sets the number of reconfigurations so far.
func (b *JobBuilder) Reconfigs(n int) *JobBuilder { b.j.Reconfigs = n; return b }

// Cannot sets the plan features the job's launch line cannot express.
func (b *JobBuilder) Cannot(f model.Features) *JobBuilder { b.j.Cannot = f; return b }

// StartBy sets the latest start its --deadline allows, as an offset from
// Epoch.
func (b *JobBuilder) StartBy(d time.Duration) *JobBuilder { b.j.StartBy = Epoch.Add(d); return b }

// GlobalBatch sets the global batch the job's launch line trains with.
func (b *JobBuilder) GlobalBatch(n int) *JobBuilder { b.j.GlobalBatch = n; return b }

// WithinRequest holds the job to its request (Slurm limits).
func (b *JobBuilder) WithinRequest() *JobBuilder { b.j.WithinRequest = true; return b }

// FairShare sets the Slurm fair-share factor of the job's association.
func (b *JobBuilder) FairShare(f float64) *JobBuilder { b.j.FairShare = f; return b }

// Priority sets the job's Slurm multifactor priority and partition tier.
func (b *JobBuilder) Priority(p float64, tier int) *JobBuilder {
	b.j.Priority, b.j.PriorityTier = p, tier
	return b
}

// TimeLimit sets the user's run-time estimate.
func (b *JobBuilder) TimeLimit(d time.Duration) *JobBuilder { b.j.TimeLimit = d; return b }

// Obj returns the job; when no plan was set it requests plain data
// parallelism over its GPUs for the model's global batch.
func (b *JobBuilder) Obj() policy.Job {
	j := b.j
	if j.Request.Plan == (model.Plan{}) {
		spec := Specs()[j.Model]
		g := j.Request.GPUs
		j.Request.Plan = model.Plan{DP: g, TP: 1, PP: 1, MicroBatch: max(1, spec.GlobalBatch/g), Accum: 1}
	}
	return j
}

// On is a NodeAlloc of g GPUs with 8 CPUs and 16 GB per GPU.
func On(node string, g int) policy.NodeAlloc {
	return policy.NodeAlloc{Node: node, GPUs: g, CPUs: 8 * g, MemGB: 16 * float64(g)}
}

// Cluster returns n nodes named n0, n1, ... of gpus GPUs, 12 CPUs per GPU
// and 1,600 GB.
func Cluster(n, gpus int) []policy.Node {
	nodes := make([]policy.Node, n)
	for i := range nodes {
		nodes[i] = policy.Node{Name: "n" + strconv.Itoa(i), GPUs: gpus, CPUs: 12 * gpus, MemGB: 1600}
	}
	return nodes
}

// Specs are the model types the fake estimator knows: "small" (fits one
// GPU, scales well), "wide" (communication-heavy, scales poorly across
// nodes) and "big" (needs at least four GPUs or ZeRO-Offload).
func Specs() map[string]model.Spec {
	return map[string]model.Spec{
		"small": {Name: "small", Params: 3e8, Layers: 24, Hidden: 1024, Heads: 16, SeqLen: 1024, GlobalBatch: 32, ForwardMs: 200},
		"wide":  {Name: "wide", Params: 1.5e9, Layers: 24, Hidden: 1920, Heads: 16, SeqLen: 1024, GlobalBatch: 16, ForwardMs: 1000},
		"big":   {Name: "big", Params: 7e9, Layers: 32, Hidden: 4096, Heads: 32, SeqLen: 2048, GlobalBatch: 8, ForwardMs: 1500},
	}
}

// Models returns a fake Estimator per model type of Specs.
func Models() map[string]policy.Estimator {
	out := map[string]policy.Estimator{}
	for name, s := range Specs() {
		out[name] = &Fake{S: s}
	}
	return out
}

// Fake is a deterministic Estimator with the shape of the real model.
type Fake struct {
	S model.Spec
	// HostBaseGB is the host memory every node of a job needs whatever
	// its plan (the real model books 16 GB); 0 by default.
	HostBaseGB float64
}

var errFake = errors.New("fake estimator")

// Spec implements policy.Estimator.
func (f *Fake) Spec() model.Spec { return f.S }

// plans lists the fake's valid plans on pl: DP x TP with TP inside every
// node and dividing the heads, an integer micro-batch, ZeRO 0 or 2, offload.
func (f *Fake) plans(pl model.Placement) []model.Plan {
	g := pl.GPUs()
	var out []model.Plan
	for _, t := range []int{1, 2, 4, 8} {
		if g%t != 0 || f.S.Heads%t != 0 {
			continue
		}
		fits := true
		for _, n := range pl {
			if n%t != 0 {
				fits = false
			}
		}
		d := g / t
		if !fits || f.S.GlobalBatch%d != 0 {
			continue
		}
		for _, z := range []struct {
			zero int
			off  bool
		}{{0, false}, {2, false}, {2, true}} {
			out = append(out, model.Plan{DP: d, TP: t, PP: 1, MicroBatch: f.S.GlobalBatch / d, Accum: 1, ZeRO: z.zero, Offload: z.off})
		}
	}
	return out
}

func (f *Fake) valid(p model.Plan, pl model.Placement) bool {
	for _, q := range f.plans(pl) {
		if q == p {
			return true
		}
	}
	return false
}

// Predict implements policy.Estimator.
func (f *Fake) Predict(p model.Plan, r model.Resources) (model.Breakdown, error) {
	if p.GPUs() != r.Placement.GPUs() || p.GPUs() == 0 || p.DP*p.MicroBatch*p.Accum != f.S.GlobalBatch {
		return model.Breakdown{}, fmt.Errorf("%w: %w: %s on %s", errFake, model.ErrInvalidPlan, p, r.Placement)
	}
	fwd := f.S.ForwardMs / 1000 / float64(p.DP*p.TP)
	bw := 150.0
	if len(r.Placement) > 1 {
		bw = 12.5
	}
	gb := f.S.Params * 2 / 1e9
	comm := gb * 2 * float64(p.DP-1) / float64(p.DP*p.TP) / bw
	tp := 0.02 * float64(p.TP-1) * f.S.ForwardMs / 1000
	opt := 0.075 * f.S.Params / 1e9 / float64(p.TP)
	if p.ZeRO > 0 {
		opt /= float64(p.DP)
	}
	if p.Offload {
		opt = 4 * f.S.Params / 1e9 / float64(max(1, r.CPUs)) * 2
	}
	it := 3*fwd + comm + tp + opt + 0.01
	return model.Breakdown{Fwd: fwd, Bwd: 2 * fwd, CommDP: comm, CommTP: tp, Opt: opt, Iter: it}, nil
}

// Memory implements policy.Estimator.
func (f *Fake) Memory(p model.Plan, pl model.Placement) model.MemoryEstimate {
	states := 16 * f.S.Params / 1e9 / float64(max(1, p.TP))
	if p.ZeRO > 0 {
		states = (4 + 12/float64(max(1, p.DP))) * f.S.Params / 1e9 / float64(max(1, p.TP))
	}
	host := 0.0
	if p.Offload {
		host = 12 * f.S.Params / 1e9
		states = 4 * f.S.Params / 1e9 / float64(max(1, p.TP))
	}
	act := 0.5 * float64(p.MicroBatch) * float64(f.S.SeqLen) / 1024
	return model.MemoryEstimate{GPUGB: states + act, HostGBNode: f.HostBaseGB + host}
}

// Feasible implements policy.Estimator.
func (f *Fake) Feasible(p model.Plan, r model.Resources) error {
	m := f.Memory(p, r.Placement)
	if m.GPUGB > 80 {
		return fmt.Errorf("%w: %w: %.0f GB per GPU", errFake, model.ErrInfeasible, m.GPUGB)
	}
	if m.HostGBNode*float64(len(r.Placement)) > r.HostMemGB {
		return fmt.Errorf("%w: %w: %.0f GB host", errFake, model.ErrInfeasible, m.HostGBNode)
	}
	return nil
}

// BestPlan implements policy.Estimator.
func (f *Fake) BestPlan(r model.Resources, allow func(model.Plan) bool) (model.Plan, model.Breakdown, error) {
	var best model.Plan
	bestB := model.Breakdown{Iter: math.Inf(1)}
	for _, p := range f.plans(r.Placement) {
		if allow != nil && !allow(p) {
			continue
		}
		if f.Feasible(p, r) != nil {
			continue
		}
		b, err := f.Predict(p, r)
		if err != nil || b.Iter >= bestB.Iter {
			continue
		}
		best, bestB = p, b
	}
	if math.IsInf(bestB.Iter, 1) {
		return model.Plan{}, model.Breakdown{}, fmt.Errorf("%w: %w on %s", errFake, model.ErrNoPlan, r.Placement)
	}
	return best, bestB, nil
}

// Valid reports whether p is one of the fake's plans for pl.
func (f *Fake) Valid(p model.Plan, pl model.Placement) bool { return f.valid(p, pl) }
