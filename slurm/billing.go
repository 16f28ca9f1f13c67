package slurm

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// BillingWeights are a partition's TRESBillingWeights: what Slurm bills a
// job for each CPU, GPU, node and MiB of memory it holds, the number its
// billing limits (GrpTRES=billing=..., MaxTRESPerJob=billing=...) count.
// The zero value is a partition that sets none, where Slurm bills CPUs
// alone.
type BillingWeights struct {
	CPU, GPU, Node, MemMB float64
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
// GPU's weight ("GRES/gpu:a100=3") adds to the GPU weight, the most such a
// GPU can bill.
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
		case k == "gres/gpu" || strings.HasPrefix(k, "gres/gpu:"):
			w.GPU += f
		}
	}
	return w, nil
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
	return int64(math.Floor(w.CPU*float64(cpus) + w.GPU*float64(gpus) + w.Node*float64(nodes) + w.MemMB*float64(memMB) + 1e-9))
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
	}{{"CPU", "", w.CPU}, {"GRES/gpu", "", w.GPU}, {"Node", "", w.Node}, {"Mem", "G", w.MemMB * 1024}} {
		if t.v > 0 {
			parts = append(parts, t.name+"="+strconv.FormatFloat(t.v, 'g', 6, 64)+t.unit)
		}
	}
	return "TRESBillingWeights=" + strings.Join(parts, ",")
}
