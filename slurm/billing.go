package slurm

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// BillingWeights are a partition's TRESBillingWeights: what Slurm bills a
// job for each CPU, GPU, node and MiB of memory it holds, the number its
// billing limits (GrpTRES=billing=..., MaxTRESPerJob=billing=...) count.
// The zero value is a partition that sets none, where Slurm bills CPUs
// alone.
type BillingWeights struct {
	// GPU is the weight of any GPU (GRES/gpu).
	CPU, GPU, Node, MemMB float64
	// Typed are the weights of GPUs of one type (GRES/gpu:h100=3), by
	// type: Slurm bills a GPU its type's weight on top of GPU's, whatever
	// the job asked for (22.05 lab, CPU=1,GRES/gpu=1,GRES/gpu:h100=3,
	// GRES/gpu:a100=10: 4 CPUs and 2 GPUs billed 12 on an h100 node, with
	// or without asking for h100, and 26 on an a100 node). Nil once
	// resolved for the types a job may run on (ForTypes).
	Typed map[string]float64
	// TypedGPU is, once resolved, the most a GPU's type adds to GPU's
	// weight, and TypedName that type.
	TypedGPU  float64
	TypedName string
	// Set is true when the partition names any weight: the others are 0.
	Set bool
	// Unread says why the partition's weights could not be read; "" when
	// they were. Its bills are then unknown.
	Unread string
}

// unreadBilling is the weights of a partition whose TRESBillingWeights
// did not parse: one odd string costs the billing limits there, not the
// listing.
func unreadBilling(err error) BillingWeights { return BillingWeights{Unread: err.Error()} }

// ParseBillingWeights reads a TRESBillingWeights string as slurmrestd
// reports it ("CPU=0.5,Mem=0.25G,GRES/gpu=2.0"; names in any case). A
// memory weight is per MiB, or per unit of its suffix (G: per GiB, T: per
// TiB); the 22.05 lab billed "Mem=2K" at 2 per MiB, which is what a K
// gives here too. Weights of TRES rubick does not allocate (licenses,
// burst buffers, other GRES) are left out: its jobs hold none. A typed
// GPU's weight ("GRES/gpu:a100=3") goes in Typed.
func ParseBillingWeights(s string) (BillingWeights, error) {
	m, err := parseTRESWeights(s)
	if err != nil {
		return BillingWeights{}, fmt.Errorf("TRESBillingWeights %q: %w", s, err)
	}
	w := BillingWeights{Set: len(m) > 0}
	for k, f := range m {
		switch {
		case k == "cpu":
			w.CPU = f
		case k == "mem":
			w.MemMB = f
		case k == "node":
			w.Node = f
		case k == "gres/gpu":
			w.GPU = f
		case strings.HasPrefix(k, "gres/gpu:"):
			if w.Typed == nil {
				w.Typed = map[string]float64{}
			}
			w.Typed[strings.TrimPrefix(k, "gres/gpu:")] = f
		}
	}
	return w, nil
}

// ForTypes resolves w for a job that may run on GPUs of types (the one
// it asks for, or those of the nodes it may use; nil: any): each GPU
// bills GPU's weight and the highest of those types' (case aside, as the
// weights are read), the most Slurm can bill it.
func (w BillingWeights) ForTypes(types []string) BillingWeights {
	if w.Typed == nil {
		return w
	}
	out := w
	out.Typed = nil
	for t, f := range w.Typed {
		if f > out.TypedGPU && (types == nil || slices.ContainsFunc(types, func(s string) bool { return strings.EqualFold(s, t) })) {
			out.TypedGPU, out.TypedName = f, t
		}
	}
	return out
}

// GPUWeight is what one GPU bills: GPU's weight and its type's, or, not
// yet resolved (ForTypes), the highest type's.
func (w BillingWeights) GPUWeight() float64 {
	if w.Typed != nil {
		w = w.ForTypes(nil)
	}
	return w.GPU + w.TypedGPU
}

// Of is what Slurm bills an allocation of gpus GPUs, cpus CPUs, memMB MiB
// and nodes nodes: the weighted sum, rounded down as Slurm does (CPU=0.5
// and 3 CPUs, Mem=0.25G and 1 GiB, GRES/gpu=2 and 2 GPUs bill 5 on the
// 22.05 lab); its CPUs when no weight is set. With PriorityFlags=MAX_TRES
// Slurm bills the largest per-node term instead of their sum, never more,
// so a bound worked out from Of holds there too.
func (w BillingWeights) Of(gpus, cpus, nodes int, memMB int64) int64 {
	if !w.Set {
		return int64(cpus)
	}
	return int64(math.Floor(w.CPU*float64(cpus) + w.GPUWeight()*float64(gpus) + w.Node*float64(nodes) + w.MemMB*float64(memMB) + 1e-9))
}

// String names the weights as an admin sets them (memory per GiB).
func (w BillingWeights) String() string {
	if !w.Set {
		return "TRESBillingWeights unset: CPUs alone"
	}
	var parts []string
	for _, t := range []struct {
		name, unit string
		v          float64
	}{{"CPU", "", w.CPU}, {"GRES/gpu", "", w.GPU}, {"GRES/gpu:" + w.TypedName, "", w.TypedGPU}, {"Node", "", w.Node}, {"Mem", "G", w.MemMB * 1024}} {
		if t.v > 0 {
			parts = append(parts, t.name+"="+strconv.FormatFloat(t.v, 'g', 6, 64)+t.unit)
		}
	}
	for _, t := range slices.Sorted(maps.Keys(w.Typed)) {
		if w.Typed[t] > 0 {
			parts = append(parts, "GRES/gpu:"+t+"="+strconv.FormatFloat(w.Typed[t], 'g', 6, 64))
		}
	}
	return "TRESBillingWeights=" + strings.Join(parts, ",")
}
