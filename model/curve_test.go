package model

import (
	"math"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPackedPlacement(t *testing.T) {
	tests := map[string]struct {
		g, node int
		want    Placement
	}{
		"one":       {g: 1, node: 8, want: Placement{1}},
		"full node": {g: 8, node: 8, want: Placement{8}},
		"spill":     {g: 20, node: 8, want: Placement{8, 8, 4}},
		"no nodes":  {g: 5, node: 0, want: Placement{5}},
		"zero":      {g: 0, node: 8, want: nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, PackedPlacement(tc.g, tc.node)); diff != "" {
				t.Errorf("PackedPlacement(%d, %d) (-want +got):\n%s", tc.g, tc.node, diff)
			}
		})
	}
}

func TestCurveSlope(t *testing.T) {
	c := Curve{Ref: 10, Points: []CurvePoint{
		{Amount: 1, Throughput: 2, Feasible: true},
		{Amount: 2, Throughput: 5, Feasible: true},
		{Amount: 3, Throughput: 5},
		{Amount: 4, Throughput: 9, Feasible: true},
	}}
	tests := map[string]struct {
		amount int
		want   float64
	}{
		"first unit": {amount: 0, want: 0.2},
		"gain":       {amount: 1, want: 0.3},
		"flat":       {amount: 2, want: 0},
		"jump":       {amount: 3, want: 0.4},
		"past end":   {amount: 4, want: 0},
		"negative":   {amount: -1, want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := c.Slope(tc.amount); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Slope(%d) = %v, want %v", tc.amount, got, tc.want)
			}
		})
	}
	if got := (Curve{}).Slope(1); got != 0 {
		t.Errorf("empty curve slope = %v, want 0", got)
	}
}

// TestGPUCurveFlatWhereInfeasible: a 30B-parameter model fits no GPU count
// below some threshold; those points carry the previous throughput (0 at
// the start) and are marked infeasible.
func TestGPUCurveFlatWhereInfeasible(t *testing.T) {
	p := Predictor{
		Spec:   Spec{Name: "big", Params: 3e10, Layers: 60, Hidden: 6656, Heads: 52, SeqLen: 2048, GlobalBatch: 4, ForwardMs: 7000},
		Params: Priors(), Env: DefaultEnv(),
	}
	c := p.GPUCurve(16, 12)
	if len(c.Points) != 16 {
		t.Fatalf("%d points, want 16", len(c.Points))
	}
	firstFeasible := -1
	for i, pt := range c.Points {
		if pt.Amount != i+1 {
			t.Fatalf("point %d has amount %d", i, pt.Amount)
		}
		if pt.Feasible && firstFeasible < 0 {
			firstFeasible = i
		}
		if !pt.Feasible {
			want := 0.0
			if i > 0 {
				want = c.Points[i-1].Throughput
			}
			if pt.Throughput != want {
				t.Errorf("infeasible point %d: throughput %v, want the previous %v", pt.Amount, pt.Throughput, want)
			}
			continue
		}
		if err := p.Feasible(pt.Plan, Resources{Placement: PackedPlacement(pt.Amount, 8), CPUs: 12 * pt.Amount}); err != nil {
			t.Errorf("point %d: plan %s infeasible: %v", pt.Amount, pt.Plan, err)
		}
	}
	if firstFeasible <= 0 {
		t.Fatalf("first feasible point at index %d, want some infeasible points before it", firstFeasible)
	}
	if c.Ref <= 0 || c.Slope(0) != 0 {
		t.Errorf("Ref = %v, Slope(0) = %v; want Ref > 0 and no gain for the first (infeasible) GPU", c.Ref, c.Slope(0))
	}
}

// TestCPUCurveOffload: a model that only fits with ZeRO-Offload speeds up
// with more CPU cores for CPU Adam.
func TestCPUCurveOffload(t *testing.T) {
	p := llama7Predictor()
	c := p.CPUCurve(Placement{1}, 32)
	if !c.Points[31].Feasible || !c.Points[31].Plan.Offload {
		t.Fatalf("32 CPUs on 1 GPU: %+v, want a feasible offload plan", c.Points[31])
	}
	if !(c.Points[31].Throughput > c.Points[0].Throughput) || c.Slope(1) <= 0 {
		t.Errorf("throughput with 32 CPUs %v not above 1 CPU %v (slope %v)", c.Points[31].Throughput, c.Points[0].Throughput, c.Slope(1))
	}
}

func TestCurveCacheConcurrent(t *testing.T) {
	var cc CurveCache
	p := llama7Predictor()
	want := p.GPUCurve(16, 12)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := cc.GPUCurve(p, 16, 12)
			got.Points[0].Throughput = -1 // callers own their copy
			_ = cc.CPUCurve(p, Placement{4, 8}, 8)
		}()
	}
	wg.Wait()
	if diff := cmp.Diff(want, cc.GPUCurve(p, 16, 12)); diff != "" {
		t.Errorf("cached curve differs (-want +got):\n%s", diff)
	}
	_ = cc.CPUCurve(p, Placement{8, 4}, 8) // same shape as {4, 8}
	if n := cc.Len(); n != 2 {
		t.Errorf("cache holds %d curves, want 2", n)
	}
	other := p
	other.Params.KBwd = 3
	_ = cc.GPUCurve(other, 16, 12)
	if n := cc.Len(); n != 3 {
		t.Errorf("different parameters share an entry: %d curves, want 3", n)
	}
}

func BenchmarkGPUCurve64(b *testing.B) {
	p := llama7Predictor()
	b.ReportAllocs()
	for b.Loop() {
		_ = p.GPUCurve(64, 12)
	}
}

func BenchmarkGPUCurve64Bert(b *testing.B) {
	p := Predictor{Spec: Spec{Name: "bert", Params: 3.36e8, Layers: 24, Hidden: 1536, Heads: 16, SeqLen: 1024, GlobalBatch: 32, ForwardMs: 225}, Params: Priors(), Env: DefaultEnv()}
	b.ReportAllocs()
	for b.Loop() {
		_ = p.GPUCurve(64, 12)
	}
}
