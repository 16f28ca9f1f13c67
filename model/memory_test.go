package model

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"
)

// TestMemoryByHand: testSpec has 1e9 parameters, 4 layers and 1e6 tokens x
// hidden units per sample (docs/model.md gives the byte counts).
func TestMemoryByHand(t *testing.T) {
	p := testPredictor()
	const act = 34e6 // bytes per layer per sample
	tests := map[string]struct {
		plan Plan
		pl   Placement
		want MemoryEstimate
	}{
		// 16 B/param + 4 layers x 2 samples of activations + 4 GB.
		"plain dp": {plan: Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1}, pl: Placement{4},
			want: MemoryEstimate{GPUGB: 16 + 4*2*act/1e9 + 4, HostGBNode: 16}},
		// ZeRO-2 over 4: weights 2 + (2 + 12)/4.
		"zero2": {plan: Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, ZeRO: 2}, pl: Placement{4},
			want: MemoryEstimate{GPUGB: 2 + 14.0/4 + 4*2*act/1e9 + 4, HostGBNode: 16}},
		// Offload keeps 12/4 + 2/4 GB per rank on the host, 4 ranks per node.
		"offload": {plan: Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, ZeRO: 2, Offload: true}, pl: Placement{4},
			want: MemoryEstimate{GPUGB: 2 + 0.5 + 4*2*act/1e9 + 4, HostGBNode: 16 + 4*3.5}},
		// Checkpointing keeps 2 B per token-hidden per layer plus one full layer.
		"checkpoint": {plan: Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, Checkpoint: true}, pl: Placement{4},
			want: MemoryEstimate{GPUGB: 16 + (4*2*2e6+2*act)/1e9 + 4, HostGBNode: 16}},
		// TP 2 x PP 2: 16/4 B/param; activations of 2 layers, 24/2 + 10 B per
		// token-hidden, 2 micro-batches in flight.
		"3d": {plan: Plan{DP: 1, TP: 2, PP: 2, MicroBatch: 1, Accum: 8}, pl: Placement{4},
			want: MemoryEstimate{GPUGB: 4 + 2*2*22e6/1e9 + 4, HostGBNode: 16}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := p.Memory(tc.plan, tc.pl)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(1e-12, 0)); diff != "" {
				t.Errorf("Memory(%s) (-want +got):\n%s", tc.plan, diff)
			}
		})
	}
}

func TestFeasibleNamesLimit(t *testing.T) {
	p := testPredictor()
	p.Spec.Params = 1e10 // 160 GB of weights and states unsharded
	plain := Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}
	err := p.Feasible(plain, res(Placement{1}, 1))
	if !errors.Is(err, ErrInfeasible) || !strings.Contains(err.Error(), "gpu_mem_gb=80") {
		t.Fatalf("Feasible = %v, want ErrInfeasible naming gpu_mem_gb", err)
	}
	off := Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 1, Accum: 8, ZeRO: 2, Offload: true}
	if err := p.Feasible(off, Resources{Placement: Placement{1}, CPUs: 4}); err != nil {
		t.Fatalf("offload on a 1,600 GB node: %v", err)
	}
	err = p.Feasible(off, Resources{Placement: Placement{1}, CPUs: 4, HostMemGB: 100})
	if !errors.Is(err, ErrInfeasible) || !strings.Contains(err.Error(), "host memory") {
		t.Fatalf("Feasible with 100 GB host = %v, want ErrInfeasible naming host memory", err)
	}
}

// TestMemoryMonotone: sharding, offloading and checkpointing never need
// more GPU memory.
func TestMemoryMonotone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec, pl := drawSpec(t), drawPlacement(t)
		p := Predictor{Spec: spec, Params: Priors(), Env: DefaultEnv()}
		for _, plan := range Enumerate(spec, pl) {
			m := p.Memory(plan, pl).GPUGB
			if math.IsNaN(m) || m <= 0 {
				t.Fatalf("%s: memory %v", plan, m)
			}
			less := plan
			switch {
			case plan.Checkpoint:
				less.Checkpoint = false
			case plan.Offload:
				less.Offload = false
			case plan.ZeRO > 0:
				less.ZeRO--
			default:
				continue
			}
			if more := p.Memory(less, pl).GPUGB; m > more+1e-9 {
				t.Fatalf("%s needs %v GB, more than %s with %v GB", plan, m, less, more)
			}
		}
	})
}
