package model

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func drawPlacement(t *rapid.T) Placement {
	nodes := rapid.IntRange(1, 8).Draw(t, "nodes")
	pl := make(Placement, nodes)
	for i := range pl {
		pl[i] = rapid.IntRange(1, 8).Draw(t, "gpus")
	}
	return pl
}

func drawSpec(t *rapid.T) Spec {
	return Spec{
		Name: "r", Params: 1e9, Hidden: 1024, SeqLen: 512, ForwardMs: 100,
		Layers:      rapid.SampledFrom([]int{1, 12, 16, 24, 32, 60}).Draw(t, "layers"),
		Heads:       rapid.SampledFrom([]int{1, 12, 16, 20, 32, 52}).Draw(t, "heads"),
		GlobalBatch: rapid.SampledFrom([]int{1, 4, 8, 16, 32, 64, 96}).Draw(t, "batch"),
	}
}

// TestEnumerateProperties: every enumerated plan uses exactly the GPUs of
// the placement, keeps the global batch, keeps TP inside a node, splits
// heads and layers evenly, prices without error, and the order is stable.
func TestEnumerateProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec, pl := drawSpec(t), drawPlacement(t)
		plans := Enumerate(spec, pl)
		seen := map[Plan]bool{}
		p := Predictor{Spec: spec, Params: Priors(), Env: DefaultEnv()}
		for _, plan := range plans {
			if plan.DP*plan.TP*plan.PP != pl.GPUs() {
				t.Fatalf("%s: d*t*p=%d, placement %s has %d GPUs", plan, plan.GPUs(), pl, pl.GPUs())
			}
			if plan.DP*plan.MicroBatch*plan.Accum != spec.GlobalBatch {
				t.Fatalf("%s: DP*MicroBatch*Accum=%d, global batch %d", plan, plan.DP*plan.MicroBatch*plan.Accum, spec.GlobalBatch)
			}
			for i, k := range pl {
				if k%plan.TP != 0 {
					t.Fatalf("%s: TP=%d does not fit node %d with %d GPUs", plan, plan.TP, i, k)
				}
			}
			if spec.Heads%plan.TP != 0 || spec.Layers%plan.PP != 0 {
				t.Fatalf("%s: TP must divide heads %d and PP layers %d", plan, spec.Heads, spec.Layers)
			}
			if plan.Offload && plan.ZeRO == 0 || (plan.TP > 1 || plan.PP > 1) && plan.ZeRO > 0 {
				t.Fatalf("%s: invalid ZeRO/offload combination", plan)
			}
			if seen[plan] {
				t.Fatalf("%s listed twice", plan)
			}
			seen[plan] = true
			if _, err := p.Predict(plan, Resources{Placement: pl, CPUs: 4 * pl.GPUs()}); err != nil {
				t.Fatalf("Predict(%s): %v", plan, err)
			}
		}
		if diff := cmp.Diff(plans, Enumerate(spec, pl)); diff != "" {
			t.Fatalf("order not deterministic:\n%s", diff)
		}
	})
}

func TestEnumerateCounts(t *testing.T) {
	spec := testSpec() // batch 8, 4 heads, 4 layers
	tests := map[string]struct {
		pl   Placement
		want int
	}{
		// 1 GPU: mb 8/4/2/1 x {z0, z2+off, z3+off} x gc (sharding over one rank is skipped).
		"one gpu": {pl: Placement{1}, want: 4 * 3 * 2},
		// 2 on one node: DP2 (mb 4,2,1: 3 x 5 x 2 = 30), TP2 (mb 8,4,2,1: 4 x 2 = 8),
		// PP2 (mb 8,4,2,1: 8).
		"two gpus": {pl: Placement{2}, want: 30 + 8 + 8},
		// Over 1-GPU nodes TP cannot be used.
		"two nodes": {pl: Placement{1, 1}, want: 30 + 8},
		"empty":     {pl: Placement{}, want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := len(Enumerate(spec, tc.pl)); got != tc.want {
				t.Errorf("len(Enumerate(%v)) = %d, want %d", tc.pl, got, tc.want)
			}
		})
	}
}

func TestParseExecPlan(t *testing.T) {
	llama := Spec{Name: "llama7", Params: 6.74e9, Layers: 32, Hidden: 4096, Heads: 32, SeqLen: 2048, GlobalBatch: 8, ForwardMs: 3000}
	bert := Spec{Name: "bert", Params: 3.36e8, Layers: 24, Hidden: 1536, Heads: 16, SeqLen: 1024, GlobalBatch: 32, ForwardMs: 225}
	tests := map[string]struct {
		spec    Spec
		code    string
		pl      string
		want    Plan
		wantErr error
		errText string
	}{
		"ga":           {spec: bert, code: "ga", pl: "44", want: Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, Accum: 1}},
		"gc":           {spec: bert, code: "gc", pl: "2", want: Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1, Checkpoint: true}},
		"zero-dp":      {spec: bert, code: "zero-dp", pl: "1111", want: Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1, ZeRO: 2}},
		"zero-offload": {spec: bert, code: "zero-offload", pl: "1", want: Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 32, Accum: 1, ZeRO: 2, Offload: true}},
		// 8 samples of LLaMA-7B do not fit one GPU next to the offloaded
		// model's weights: accumulate.
		"ga accumulates": {spec: llama, code: "zero-offload", pl: "1", want: Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 4, Accum: 2, ZeRO: 2, Offload: true}},
		// PTD 248: PP2 TP4 DP8 on 64 GPUs, one sample per DP rank: m = 1 < p.
		"ptd pipeline": {spec: llama, code: "248", pl: "88888888", want: Plan{DP: 8, TP: 4, PP: 2, MicroBatch: 1, Accum: 1}},
		"ptd m=8":      {spec: llama, code: "881", pl: "88888888", want: Plan{DP: 1, TP: 8, PP: 8, MicroBatch: 1, Accum: 8}},
		"ptd no pp":    {spec: llama, code: "144", pl: "88", want: Plan{DP: 4, TP: 4, PP: 1, MicroBatch: 2, Accum: 1}},
		"unknown":      {spec: bert, code: "fsdp", pl: "8", wantErr: ErrBadInput, errText: `"fsdp"`},
		"digit zero":   {spec: bert, code: "108", pl: "8", wantErr: ErrBadInput, errText: `"108"`},
		"empty code":   {spec: bert, code: "", pl: "8", wantErr: ErrBadInput, errText: `""`},
		"gpu count":    {spec: llama, code: "248", pl: "8888", wantErr: ErrInvalidPlan, errText: `"248" uses 64 GPUs`},
		"batch split":  {spec: bert, code: "ga", pl: "333", wantErr: ErrInvalidPlan, errText: "does not split over 9 GPUs"},
		"ptd batch":    {spec: llama, code: "116", pl: "6", wantErr: ErrInvalidPlan, errText: "DP=6"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pl, err := ParsePlacement(tc.pl)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseExecPlan(tc.spec, tc.code, pl)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("ParseExecPlan(%q, %s) error = %v, want %v naming %s", tc.code, tc.pl, err, tc.wantErr, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseExecPlan(%q, %s) mismatch (-want +got):\n%s", tc.code, tc.pl, diff)
			}
		})
	}
}

// TestBestPlanIsArgmin compares BestPlan with a brute-force search over
// Enumerate, Feasible and Predict.
func TestBestPlanIsArgmin(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec, pl := drawSpec(t), drawPlacement(t)
		spec.Params = rapid.SampledFrom([]float64{1e8, 1e9, 7e9, 3e10}).Draw(t, "params")
		p := Predictor{Spec: spec, Params: Priors(), Env: DefaultEnv()}
		r := Resources{Placement: pl, CPUs: rapid.IntRange(0, 96).Draw(t, "cpus")}
		var want *Plan
		var wantIter float64
		for _, plan := range Enumerate(spec, pl) {
			if p.Feasible(plan, r) != nil {
				continue
			}
			bd, err := p.Predict(plan, r)
			if err != nil {
				continue // offload without CPUs
			}
			if want == nil || bd.Iter < wantIter*(1-1e-9) {
				plan := plan
				want, wantIter = &plan, bd.Iter
			}
		}
		got, bd, err := p.BestPlan(r, nil)
		if want == nil {
			if !errors.Is(err, ErrNoPlan) {
				t.Fatalf("BestPlan error = %v, want ErrNoPlan", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if got != *want || bd.Iter != wantIter {
			t.Fatalf("BestPlan = %s (%v s), brute force %s (%v s)", got, bd.Iter, *want, wantIter)
		}
	})
}

func TestBestPlanAllow(t *testing.T) {
	p := Predictor{Spec: testSpec(), Params: testParams(), Env: testEnv()}
	r := res(Placement{4}, 16)
	onlyOffload := func(pl Plan) bool { return pl.Offload }
	got, _, err := p.BestPlan(r, onlyOffload)
	if err != nil || !got.Offload {
		t.Fatalf("BestPlan(offload only) = %s, %v", got, err)
	}
	_, _, err = p.BestPlan(r, func(Plan) bool { return false })
	if !errors.Is(err, ErrNoPlan) {
		t.Fatalf("BestPlan(nothing allowed) error = %v, want ErrNoPlan", err)
	}
	_, _, err = p.BestPlan(res(Placement{}, 0), nil)
	if !errors.Is(err, ErrBadInput) {
		t.Fatalf("BestPlan(zero GPUs) error = %v, want ErrBadInput", err)
	}
}

// llama7Predictor is a LLaMA-7B with the default priors, the largest model
// the simulator schedules on 64 GPUs.
func llama7Predictor() Predictor {
	return Predictor{
		Spec:   Spec{Name: "llama7", Params: 6.74e9, Layers: 32, Hidden: 4096, Heads: 32, SeqLen: 2048, GlobalBatch: 8, ForwardMs: 3000},
		Params: Priors(), Env: DefaultEnv(),
	}
}

func BenchmarkBestPlan64(b *testing.B) {
	for _, tc := range []struct {
		name string
		p    Predictor
	}{
		{"llama7", llama7Predictor()},
		{"bert", Predictor{Spec: Spec{Name: "bert", Params: 3.36e8, Layers: 24, Hidden: 1536, Heads: 16, SeqLen: 1024, GlobalBatch: 32, ForwardMs: 225}, Params: Priors(), Env: DefaultEnv()}},
		{"roberta", Predictor{Spec: Spec{Name: "roberta", Params: 3.55e8, Layers: 24, Hidden: 1024, Heads: 16, SeqLen: 1024, GlobalBatch: 64, ForwardMs: 480}, Params: Priors(), Env: DefaultEnv()}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := res(Placement{8, 8, 8, 8, 8, 8, 8, 8}, 768)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := tc.p.BestPlan(r, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBestPlanErrorClipped: the error for a placement of many nodes names
// it clipped (before, 100,000 nodes made it 100 KB long).
func TestBestPlanErrorClipped(t *testing.T) {
	p := Predictor{Spec: testSpec(), Params: testParams(), Env: testEnv()}
	pl, err := ParsePlacement("100000x8")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = p.BestPlan(res(pl, 16), func(Plan) bool { return false })
	if !errors.Is(err, ErrNoPlan) || len(err.Error()) > 200 || !strings.Contains(err.Error(), "88...") {
		t.Errorf("BestPlan error (%d bytes) = %.300v, want ErrNoPlan naming the placement clipped", len(err.Error()), err)
	}
}
