package slurm

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGPUsFromGres(t *testing.T) {
	tests := map[string]int{
		"":                        0,
		"gres:gpu:4":              4, // 22.05 tres_per_node
		"gres/gpu:4":              4, // 24.11 tres_per_node
		"gpu:8":                   8, // node gres
		"gpu:0":                   0,
		"gpu:4(IDX:0-3)":          4, // gres_detail
		"gpu:a100:2(IDX:0-1)":     2,
		"gpu:(null):4(IDX:0-3)":   4,
		"gpu:8(S:0-1)":            8,
		"gres/gpu":                1,
		"gpu:a100":                1,
		"gres/gpu:2,gres/shard:1": 2,
		"gpu:a100:2,gpu:v100:1":   3,
		"shard:4":                 0,
		"gres:gpu:x:y":            0,
		"gpu:a100:4(S:0,2)":       4, // node gres on sockets 0 and 2
		"gpu:4(IDX:0,2-3,5)":      4, // gres_detail, gres_used
		"gpu:2(IDX:0,3),gpu:1":    3,
		// Counts no node has must not sum to a negative.
		"gpu:9223372036854775807,gpu:1": 1<<40 + 1,
	}
	for in, want := range tests {
		if got := gpusFromGres(in); got != want {
			t.Errorf("gpusFromGres(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestTRES(t *testing.T) {
	tests := map[string]int{
		"cpu=8,mem=64G,node=1,billing=8,gres/gpu=4":        4,
		"cpu=1,mem=4000M,node=1,billing=1":                 0,
		"cpu=2,gres/gpu:a100=2,gres/gpu:v100=1":            3,
		"cpu=2,gres/gpu=3,gres/gpu:a100=2,gres/gpu:v100=1": 3,
		"gres/gpu=-1": 0,
		"gres/gpu:a100=9223372036854775807,gres/gpu:v100=9223372036854775807": 2 << 40,
	}
	for in, want := range tests {
		if got := tresGPUs(in); got != want {
			t.Errorf("tresGPUs(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestTRESMem(t *testing.T) {
	tests := map[string]int64{
		"cpu=8,mem=64G,node=1,billing=8,gres/gpu=4": 64 << 10,
		"cpu=1,mem=4000M,node=1,billing=1":          4000,
		"cpu=1,mem=1.50T,node=1":                    3 << 19,
		"cpu=1,mem=512,node=1":                      512,
		"cpu=1,mem=2048K":                           2,
		"cpu=1,node=1":                              0,
		"cpu=1,mem=lots":                            0,
		"cpu=1,mem=-1G":                             0,
		"cpu=1,mem=G":                               0,
		// More than int64 holds.
		"cpu=1,mem=1e300G": 0,
		"cpu=1,mem=1e30":   0,
	}
	for in, want := range tests {
		if got := tresMemMB(in); got != want {
			t.Errorf("tresMemMB(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestGPUTypes(t *testing.T) {
	tests := map[string][]string{
		"":                                nil,
		"gres:gpu:h100:2":                 {"h100"}, // 22.05 tres_per_node, read off the lab
		"gres/gpu:h100:2":                 {"h100"}, // 24.11
		"gpu:a100:8(S:0-1)":               {"a100"}, // node gres
		"gpu:a100:2(IDX:0-1)":             {"a100"},
		"gres:gpu:2":                      nil,
		"gpu:(null):4(IDX:0-3)":           nil,
		"gpu:a100":                        {"a100"},
		"gpu:a100:2,gpu:v100:1":           {"a100", "v100"},
		"gres:gpu:a100:2,gres:gpu:a100:1": {"a100"},
		"gres/shard:h100:2":               nil,
		",gres:gpu:h100:2,":               {"h100"},
		"gpu:a100:4(S:0,2),gpu:v100:1":    {"a100", "v100"},
	}
	for in, want := range tests {
		if diff := cmp.Diff(want, gpuTypes(in)); diff != "" {
			t.Errorf("gpuTypes(%q) (-want +got):\n%s", in, diff)
		}
	}
}

func TestMemPerGPU(t *testing.T) {
	for in, want := range map[string]int64{
		"":                          0,
		"gres:gpu:16384":            16384, // 22.05, read off the lab
		"gres/gpu:16384":            16384, // 24.11
		"gres/gpu:h100:8192":        8192,
		"gres/shard:10;gres/gpu:99": 99,
		"gres/gpu:x":                0,
	} {
		if got := memPerGPU(in); got != want {
			t.Errorf("memPerGPU(%q) = %d, want %d", in, got, want)
		}
	}
	// rubick-srun reads scontrol's MemPerTres with the error: a malformed
	// GPU entry is no memory bound it may skip silently.
	for in, bad := range map[string]bool{"gres/gpu:x": true, "gres:gpu:64G": true, "gres/gpu:-1": true, "gres:gpu:0": false,
		"gres/gpu:x,gres/gpu:99": false, "gres:nic:x": false} {
		if _, err := MemPerGPU(in); (err != nil) != bad {
			t.Errorf("MemPerGPU(%q) error %v, want one: %v", in, err, bad)
		}
	}
}

// A job with --mem=0 (or none and no default) reports no memory per node,
// CPU or GPU: it gets each node's whole memory, which its TRES line shows
// (as both labs report it). One that asked for memory keeps its own.
func TestWholeNodeMemory(t *testing.T) {
	tests := map[string]struct {
		job  Job
		tres jobTRES
		want int64
	}{
		"pending --mem=0":     {Job{State: StatePending, NodeCount: 2}, jobTRES{req: "cpu=2,mem=1000G,node=2,billing=2"}, 512000},
		"running --mem=0":     {Job{State: StateRunning, NodeCount: 1}, jobTRES{nodes: "node1", alloc: "cpu=1,mem=500G,node=1"}, 512000},
		"per node":            {Job{State: StatePending, NodeCount: 1, MemPerNodeMB: 32768}, jobTRES{req: "cpu=1,mem=32G,node=1"}, 32768},
		"per CPU":             {Job{State: StatePending, NodeCount: 1, MemPerCPUMB: 4000}, jobTRES{req: "cpu=1,mem=4000M,node=1"}, 0},
		"no memory accounted": {Job{State: StatePending, NodeCount: 1}, jobTRES{req: "cpu=1,node=1"}, 0},
	}
	for name, tc := range tests {
		j := tc.job
		setJobResources(&j, tc.tres)
		if j.MemPerNodeMB != tc.want {
			t.Errorf("%s: MemPerNodeMB = %d, want %d", name, j.MemPerNodeMB, tc.want)
		}
	}
}

func TestOtherGres(t *testing.T) {
	for in, want := range map[string][]string{
		"":                                    nil,
		"gres:gpu:2":                          nil,
		"gres:gpu:2,gres:lscratch:100":        {"lscratch:100"},
		"gres/gpu:h100:2,gres/lscratch:100":   {"lscratch:100"},
		"gres:nvme:fast:1,gres:gpu:4":         {"nvme:fast:1"},
		"license/matlab:1":                    nil,
		"gres:lscratch:100(S:0,1),gres:gpu:2": {"lscratch:100"},
	} {
		if diff := cmp.Diff(want, otherGres(in)); diff != "" {
			t.Errorf("%q (-want +got):\n%s", in, diff)
		}
	}
}

func TestGresCounts(t *testing.T) {
	for in, want := range map[string]map[string]int{
		"":                                     nil,
		"gpu:a100:8":                           nil,
		"gpu:a100:8,lscratch:1000":             {"lscratch": 1000},
		"gpu:8,lscratch:1000,nvme:fast:2(S:0)": {"lscratch": 1000, "nvme:fast": 2},
		"gpu:a100:1(IDX:0),lscratch:950":       {"lscratch": 950},
		"gres/gpu:2,gres/lscratch:100":         {"lscratch": 100},
		"lscratch:100,nvme:fast:1":             {"lscratch": 100, "nvme:fast": 1},
		"bandwidth":                            {"bandwidth": 1},
		// Commas inside a suffix separate sockets or indices, not entries.
		"gpu:a100:4(S:0,2),lscratch:100":           {"lscratch": 100},
		"gpu:4(IDX:0,2-3,5),nvme:fast:2(S:0,1)":    {"nvme:fast": 2},
		"gpu:(null):2(IDX:0,3),lscratch:90(S:0,1)": {"lscratch": 90},
	} {
		if diff := cmp.Diff(want, GresCounts(in)); diff != "" {
			t.Errorf("%q (-want +got):\n%s", in, diff)
		}
	}
	// As both labs list node1 with a job holding lscratch:950.
	if diff := cmp.Diff(map[string]int{"lscratch": 50}, gresFree("gpu:a100:8,lscratch:1000", "gpu:a100:1(IDX:0),lscratch:950")); diff != "" {
		t.Errorf("gresFree (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"lscratch": 50}, gresFree("gpu:a100:4(S:0,2),lscratch:1000", "gpu:a100:2(IDX:0,2),lscratch:950")); diff != "" {
		t.Errorf("gresFree with sockets and indices (-want +got):\n%s", diff)
	}
}

// FuzzGres checks the readers of GRES and TRES strings on any text: the
// counts, memory sizes and weights they give are finite and not negative,
// the GPU types they list are named once each, and the GRES they list
// apart from GPUs are not GPUs.
func FuzzGres(f *testing.F) {
	for _, s := range []string{
		"", "gres:gpu:4", "gres/gpu:4", "gpu:8", "gpu:0", "gpu:4(IDX:0-3)", "gpu:a100:2(IDX:0-1)", "gpu:(null):4(IDX:0-3)",
		"gpu:8(S:0-1)", "gres/gpu", "gpu:a100", "gres/gpu:2,gres/shard:1", "gpu:a100:2,gpu:v100:1", "shard:4", "gres:gpu:x:y",
		"gpu:a100:4(S:0,2)", "gpu:4(IDX:0,2-3,5)", "gpu:2(IDX:0,3),gpu:1",
		"cpu=8,mem=64G,node=1,billing=8,gres/gpu=4", "cpu=2,gres/gpu:a100=2,gres/gpu:v100=1", "cpu=1,mem=1.50T,node=1",
		"cpu=1,mem=2048K", "cpu=1,mem=-1G", "cpu=1,mem=G", "gres:gpu:16384", "gres/shard:10;gres/gpu:99",
		"gres:gpu:2,gres:lscratch:100", "gres:lscratch:100(S:0,1),gres:gpu:2", "gpu:8,lscratch:1000,nvme:fast:2(S:0)",
		"CPU=0.5,Mem=0.25G,GRES/gpu=2.0", "CPU=1,GRES/gpu=2,GRES/gpu:a100=5", "license/matlab=4", "Mem=2K,Node=3",
		"gpu:9223372036854775807,gpu:1", "gres/gpu=-1", "mem=1e300G", "cpu=inf", "gres/gres/gpu",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n := gpusFromGres(s); n < 0 {
			t.Errorf("gpusFromGres(%q) = %d", s, n)
		}
		if n := tresGPUs(s); n < 0 {
			t.Errorf("tresGPUs(%q) = %d", s, n)
		}
		if n := tresMemMB(s); n < 0 {
			t.Errorf("tresMemMB(%q) = %d", s, n)
		}
		if n := memPerGPU(s); n < 0 {
			t.Errorf("memPerGPU(%q) = %d", s, n)
		}
		types := gpuTypes(s)
		for i, ty := range types {
			if ty == "" || ty == "(null)" || slices.Contains(types[:i], ty) {
				t.Errorf("gpuTypes(%q) = %q", s, types)
			}
		}
		for k, n := range GresCounts(s) {
			if n < 0 || k == "gpu" || strings.HasPrefix(k, "gpu:") {
				t.Errorf("GresCounts(%q) has %q: %d", s, k, n)
			}
		}
		for _, e := range otherGres(s) {
			// Read as the entry it came from: "gres/gres/gpu" names a GRES
			// "gres/gpu", which gpusFromGres counts no GPU of either.
			if _, gpu := gpuEntry("gres/" + e); gpu {
				t.Errorf("otherGres(%q) lists GPUs %q", s, e)
			}
		}
		for k, v := range tresCounts(s) {
			if !(v >= 0) || math.IsInf(v, 0) {
				t.Errorf("tresCounts(%q) has %s=%v", s, k, v)
			}
		}
		w, err := ParseBillingWeights(s)
		if err != nil {
			return
		}
		for _, v := range append([]float64{w.CPU, w.MemMB, w.Node, w.GPU}, slices.Collect(maps.Values(w.Typed))...) {
			if !(v >= 0) || math.IsInf(v, 0) {
				t.Errorf("ParseBillingWeights(%q) = %+v", s, w)
			}
		}
	})
}

func TestTRESCounts(t *testing.T) {
	for in, want := range map[string]map[string]float64{
		"cpu=6,mem=20G,node=2,gres/gpu=6": {"cpu": 6, "mem": 20 << 10, "node": 2, "gres/gpu": 6},
		"CPU=2,billing=x,node":            {"cpu": 2},
		// Not a count.
		"cpu=inf,node=+Inf,gres/gpu=NaN,mem=1e300G": {},
	} {
		if diff := cmp.Diff(want, tresCounts(in)); diff != "" {
			t.Errorf("tresCounts(%q) (-want +got):\n%s", in, diff)
		}
	}
}
