package model

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// testSpec has round numbers so the equations can be checked by hand.
func testSpec() Spec {
	return Spec{Name: "toy", Params: 1e9, Layers: 4, Hidden: 1000, Heads: 4, SeqLen: 1000, GlobalBatch: 8, ForwardMs: 800}
}

func testEnv() Env {
	return Env{IntraGBps: 100, InterGBps: 10, PCIeGBps: 10, GPUMemGB: 80, NodeMemGB: 1600, NodeCPUs: 96, NodeGPUs: 8, GPUsPerNIC: 2, HostMemGBps: 100}
}

func testParams() Params {
	return Params{KBwd: 2, KSync: 1, KOpt: 0.1, KOptOff: 4, KOff: 1, KSwap: 1, KConst: 0.01}
}

func testPredictor() Predictor {
	return Predictor{Spec: testSpec(), Params: testParams(), Env: testEnv()}
}

func res(pl Placement, cpus int) Resources { return Resources{Placement: pl, CPUs: cpus} }

// TestPredictByHand checks Predict against breakdowns computed by hand from
// the equations in docs/model.md (units: s, GB/s, 2-byte elements).
func TestPredictByHand(t *testing.T) {
	tests := map[string]struct {
		plan   Plan
		r      Resources
		f1f1b  bool
		want   Breakdown
		params *Params
	}{
		// fwd = 0.8; bwd = 2*0.8; opt = k_opt * 1 Gparam.
		"one gpu": {
			plan: Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}, r: res(Placement{1}, 1),
			want: Breakdown{Fwd: 0.8, Bwd: 1.6, CC: 2.4, Opt: 0.1, OO: 0.1, Iter: 2.51},
		},
		// V_dp = 1e9*2*3/4 elements * 2 B = 3 GB over NVLink 100 GB/s.
		"dp4 one node": {
			plan: Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1}, r: res(Placement{4}, 4),
			want: Breakdown{Fwd: 0.2, Bwd: 0.4, CommDP: 0.03, CC: 0.63, Opt: 0.1, OO: 0.1, Iter: 0.74},
		},
		// Same volume over one NIC of 10 GB/s per node.
		"dp4 four nodes": {
			plan: Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1}, r: res(Placement{1, 1, 1, 1}, 4),
			want: Breakdown{Fwd: 0.2, Bwd: 0.4, CommDP: 0.3, CC: 0.9, Opt: 0.1, OO: 0.1, Iter: 1.01},
		},
		// Two micro-batches of 0.2 s forward: a*T_fwd + (a-1)*T_bwd + f(T_bwd, T_dp).
		"accumulation": {
			plan: Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 2, Accum: 2}, r: res(Placement{2}, 2),
			want: Breakdown{Fwd: 0.4, Bwd: 0.8, CommDP: 0.02, CC: 1.22, Opt: 0.1, OO: 0.1, Iter: 1.33},
		},
		// Recompute adds one forward to the backward.
		"checkpoint": {
			plan: Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 8, Accum: 1, Checkpoint: true}, r: res(Placement{1}, 1),
			want: Breakdown{Fwd: 0.8, Bwd: 2.4, CC: 3.2, Opt: 0.1, OO: 0.1, Iter: 3.31},
		},
		// V_tp = 8*(2-1)*8*1000*1000*4/(1*2) elements * 2 B = 0.256 GB.
		"tp2": {
			plan: Plan{DP: 1, TP: 2, PP: 1, MicroBatch: 8, Accum: 1}, r: res(Placement{2}, 2),
			want: Breakdown{Fwd: 0.4, Bwd: 0.8, CommTP: 0.00256, CC: 1.20256, Opt: 0.05, OO: 0.05, Iter: 1.26256},
		},
		// Micro-batches one at a time: m * t_mb; V_pp = 2*2*8*1e6 elements *
		// 2 B over the 10 GB/s network.
		"pp2 serial": {
			plan: Plan{DP: 1, TP: 1, PP: 2, MicroBatch: 1, Accum: 8}, r: res(Placement{1, 1}, 2),
			want: Breakdown{Fwd: 0.8, Bwd: 1.6, CommPP: 0.0064, CC: 2.4064, Opt: 0.05, OO: 0.05, Iter: 2.4664},
		},
		// 1F1B: t_mb/p * (m + p - 1) = 0.05 * 9.
		"pp2 1f1b": {
			plan: Plan{DP: 1, TP: 1, PP: 2, MicroBatch: 1, Accum: 8}, r: res(Placement{1, 1}, 2), f1f1b: true,
			want: Breakdown{Fwd: 0.45, Bwd: 0.9, CommPP: 0.0064, CC: 1.3564, Opt: 0.05, OO: 0.05, Iter: 1.4164},
		},
		// ZeRO-2 moves 1.5x the all-reduce bytes; the step is sharded by d.
		"zero2": {
			plan: Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 1, ZeRO: 2}, r: res(Placement{2}, 2),
			want: Breakdown{Fwd: 0.4, Bwd: 0.8, CommDP: 0.03, CC: 1.23, Opt: 0.05, OO: 0.05, Iter: 1.29},
		},
		// CPU Adam: 4 core-s/Gparam / (2 ranks * 4 cores) + 28 B/param * 1e9 *
		// 2 ranks on the node / (2 * 100 GB/s); T_off = 4 GB / (2 * 10 GB/s).
		"zero offload": {
			plan: Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 1, ZeRO: 2, Offload: true}, r: res(Placement{2}, 8),
			want: Breakdown{Fwd: 0.4, Bwd: 0.8, CommDP: 0.03, CC: 1.2, Opt: 0.78, Off: 0.2, OO: 1.21, Iter: 2.42},
		},
		// k = 2: f(0.4, 0.3) = 0.5.
		"overlap k2": {
			plan: Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1}, r: res(Placement{1, 1, 1, 1}, 4),
			params: &Params{KBwd: 2, KSync: 2, KOpt: 0.1, KOptOff: 4, KOff: 1, KSwap: 1, KConst: 0.01},
			want:   Breakdown{Fwd: 0.2, Bwd: 0.4, CommDP: 0.3, CC: 0.7, Opt: 0.1, OO: 0.1, Iter: 0.81},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := testPredictor()
			p.Env.Pipeline1F1B = tc.f1f1b
			if tc.params != nil {
				p.Params = *tc.params
			}
			got, err := p.Predict(tc.plan, tc.r)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("Predict(%s, %v) mismatch (-want +got):\n%s", tc.plan, tc.r.Placement, diff)
			}
			thr, err := p.Throughput(tc.plan, tc.r)
			if err != nil || math.Abs(thr-8/tc.want.Iter) > 1e-9 {
				t.Errorf("Throughput = %v, %v; want %v", thr, err, 8/tc.want.Iter)
			}
		})
	}
}

func TestOverlap(t *testing.T) {
	tests := map[string]struct {
		k, x, y, want float64
	}{
		"sum":          {k: 1, x: 3, y: 4, want: 7},
		"pythagoras":   {k: 2, x: 3, y: 4, want: 5},
		"max limit":    {k: 1e6, x: 3, y: 4, want: 4},
		"zero phase":   {k: 3, x: 0, y: 4, want: 4},
		"both zero":    {k: 3, x: 0, y: 0, want: 0},
		"symmetric":    {k: 2, x: 4, y: 3, want: 5},
		"huge k small": {k: 500, x: 1e-3, y: 2e-3, want: 2e-3},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := overlap(tc.k, tc.x, tc.y); math.Abs(got-tc.want) > 1e-9*max(1, tc.want) {
				t.Errorf("overlap(%v, %v, %v) = %v, want %v", tc.k, tc.x, tc.y, got, tc.want)
			}
		})
	}
}

// TestAnalyzeLinks checks which links the groups of a plan use.
func TestAnalyzeLinks(t *testing.T) {
	p := testPredictor()
	tests := map[string]struct {
		plan Plan
		pl   Placement
		want layout
	}{
		"dp inside a node": {plan: Plan{DP: 8, TP: 1, PP: 1}, pl: Placement{8},
			want: layout{dpGBps: 100, tpGBps: 100}},
		// One ring leaves each node; a 1-GPU node has one NIC.
		"dp over 1-GPU nodes": {plan: Plan{DP: 4, TP: 1, PP: 1}, pl: Placement{1, 1, 1, 1},
			want: layout{dpCross: true, dpGBps: 10, tpGBps: 100}},
		// 4-GPU nodes reach the network through 2 NICs.
		"dp over 4-GPU nodes": {plan: Plan{DP: 8, TP: 1, PP: 1}, pl: Placement{4, 4},
			want: layout{dpCross: true, dpGBps: 20, tpGBps: 100}},
		// TP 2 inside each node; both DP rings leave both nodes and share
		// the one NIC of a 2-GPU node.
		"tp2 dp2": {plan: Plan{DP: 2, TP: 2, PP: 1}, pl: Placement{2, 2},
			want: layout{dpCross: true, dpGBps: 5, tpGBps: 100}},
		// Stage 0 fills node 0, stage 1 node 1: only the pipeline crosses.
		"pp across nodes": {plan: Plan{DP: 4, TP: 1, PP: 2}, pl: Placement{4, 4},
			want: layout{ppCross: true, dpGBps: 100, tpGBps: 100}},
		// 6-GPU nodes cannot hold whole TP-4 groups: group 1 spans nodes.
		"tp across nodes": {plan: Plan{DP: 3, TP: 4, PP: 1}, pl: Placement{6, 6},
			want: layout{tpCross: true, dpCross: true, dpGBps: 30.0 / 4, tpGBps: 30}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := p.analyze(tc.plan, tc.pl)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(layout{}), cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("analyze(%s, %v) mismatch (-want +got):\n%s", tc.plan, tc.pl, diff)
			}
		})
	}
}

func TestPredictErrors(t *testing.T) {
	ok := Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 1}
	tests := map[string]struct {
		mutate func(*Predictor)
		plan   Plan
		r      Resources
		is     error
		want   string
	}{
		"nan param":       {mutate: func(p *Predictor) { p.Params.KBwd = math.NaN() }, plan: ok, r: res(Placement{2}, 2), is: ErrBadInput, want: "k_bwd=NaN"},
		"negative const":  {mutate: func(p *Predictor) { p.Params.KConst = -1 }, plan: ok, r: res(Placement{2}, 2), is: ErrBadInput, want: "k_const=-1"},
		"zero bandwidth":  {mutate: func(p *Predictor) { p.Env.InterGBps = 0 }, plan: ok, r: res(Placement{2}, 2), is: ErrBadInput, want: "inter_gbps=0"},
		"bad spec":        {mutate: func(p *Predictor) { p.Spec.GlobalBatch = 0 }, plan: ok, r: res(Placement{2}, 2), is: ErrBadInput, want: "global_batch=0"},
		"zero gpus":       {plan: ok, r: res(Placement{}, 2), is: ErrBadInput, want: "zero GPUs"},
		"empty node":      {plan: ok, r: res(Placement{2, 0}, 2), is: ErrBadInput, want: "node 1 has 0 GPUs"},
		"gpu mismatch":    {plan: ok, r: res(Placement{4}, 4), is: ErrInvalidPlan, want: "dp*tp*pp=2"},
		"batch mismatch":  {plan: Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 3, Accum: 1}, r: res(Placement{2}, 2), is: ErrInvalidPlan, want: "dp*micro_batch*accum=6"},
		"offload no cpus": {plan: Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 1, ZeRO: 2, Offload: true}, r: res(Placement{2}, 0), is: ErrInvalidPlan, want: "cpus=0"},
		"offload no zero": {plan: Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 1, Offload: true}, r: res(Placement{2}, 2), is: ErrInvalidPlan, want: "needs a ZeRO stage"},
		"zero dp":         {plan: Plan{DP: 0, TP: 1, PP: 1, MicroBatch: 4, Accum: 1}, r: res(Placement{2}, 2), is: ErrInvalidPlan, want: "must be >= 1"},
		"zero stage 4":    {plan: Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 1, ZeRO: 4}, r: res(Placement{2}, 2), is: ErrInvalidPlan, want: "zero=4"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := testPredictor()
			if tc.mutate != nil {
				tc.mutate(&p)
			}
			_, err := p.Predict(tc.plan, tc.r)
			if !errors.Is(err, tc.is) {
				t.Fatalf("Predict error = %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

// TestPredictNoAlloc guards the hot path: the simulator and the policy call
// Predict millions of times.
func TestPredictNoAlloc(t *testing.T) {
	p := testPredictor()
	plan := Plan{DP: 2, TP: 2, PP: 2, MicroBatch: 1, Accum: 4}
	r := res(Placement{4, 4}, 8)
	if n := testing.AllocsPerRun(100, func() { _, _ = p.Predict(plan, r) }); n != 0 {
		t.Errorf("Predict allocates %v times per call, want 0", n)
	}
}

func BenchmarkPredict(b *testing.B) {
	p := testPredictor()
	plan := Plan{DP: 2, TP: 2, PP: 2, MicroBatch: 1, Accum: 4}
	r := res(Placement{4, 4}, 8)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Predict(plan, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPredict64 prices a data-parallel plan over 8 full nodes, the
// largest placement of the artifact.
func BenchmarkPredict64(b *testing.B) {
	p := testPredictor()
	p.Spec.GlobalBatch = 64
	plan := Plan{DP: 64, TP: 1, PP: 1, MicroBatch: 1, Accum: 1}
	r := res(Placement{8, 8, 8, 8, 8, 8, 8, 8}, 64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Predict(plan, r); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTPSlowdown(t *testing.T) {
	spec := Spec{Name: "m", Params: 1e9, Layers: 8, Hidden: 1600, Heads: 16, SeqLen: 1024, GlobalBatch: 16, ForwardMs: 1000}
	tests := []struct {
		name  string
		ridge float64
		tp    int
		want  float64
	}{
		{"no TP", 153, 1, 1},
		{"unset ridge", 0, 8, 1},
		// (1 + 153*t/1600) / (1 + 153/1600)
		{"tp2", 153, 2, (1 + 0.19125) / (1 + 0.095625)},
		{"tp5", 153, 5, (1 + 0.478125) / (1 + 0.095625)},
	}
	got := map[string]float64{}
	want := map[string]float64{}
	for _, tc := range tests {
		p := Predictor{Spec: spec, Env: Env{RidgeFlopPerByte: tc.ridge}}
		got[tc.name], want[tc.name] = p.tpSlowdown(tc.tp), tc.want
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("tpSlowdown (-want +got):\n%s", diff)
	}
	// The slowdown stretches the TP shard's compute and nothing else: a
	// TP-2 plan's forward is 1/2 of the one-GPU forward times the factor.
	env := DefaultEnv()
	p := Predictor{Spec: spec, Params: Priors(), Env: env}
	bd, err := p.Predict(Plan{DP: 1, TP: 2, PP: 1, MicroBatch: 16, Accum: 1}, Resources{Placement: Placement{2}, CPUs: 8})
	if err != nil {
		t.Fatal(err)
	}
	if wantFwd := 0.5 * p.tpSlowdown(2); math.Abs(bd.Fwd-wantFwd) > 1e-12 {
		t.Errorf("TP-2 forward = %v s, want %v", bd.Fwd, wantFwd)
	}
}
