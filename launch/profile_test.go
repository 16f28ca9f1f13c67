package launch

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/slurm"
)

// runKey renders a profiling run for table comparisons.
func runKey(r ProfileRun) string {
	return r.Plan.String() + " gpus=" + strconv.Itoa(r.GPUs) + " cpus=" + strconv.Itoa(r.CPUs) + " iters=" + strconv.Itoa(r.Iters)
}

func TestProfilePlans(t *testing.T) {
	cases := map[string]struct {
		gb, gpus, cpus int
		d              Dialect
		opts           ProfileOptions
		want           []string
	}{
		"8-GPU node, Megatron, micro-batch capped at the job's 4": {gb: 32, gpus: 8, cpus: 64, d: Megatron,
			opts: ProfileOptions{MaxMicroBatch: 4}, want: []string{
				"dp8.tp1.pp1.mb4.a1.z0 gpus=8 cpus=64 iters=6",
				"dp1.tp1.pp1.mb4.a8.z0 gpus=1 cpus=64 iters=6",
				"dp1.tp1.pp1.mb4.a8.z1+off gpus=1 cpus=64 iters=6", // Megatron: one sharded optimizer
				"dp8.tp1.pp1.mb4.a1.z1+off gpus=8 cpus=64 iters=6",
				"dp1.tp1.pp1.mb4.a8.z1+off gpus=1 cpus=32 iters=6",
				"dp2.tp1.pp1.mb4.a4.z0 gpus=2 cpus=64 iters=6",
				"dp8.tp1.pp1.mb4.a1.z1 gpus=8 cpus=64 iters=6",
				"dp4.tp1.pp1.mb4.a2.z0 gpus=4 cpus=64 iters=6",
				"dp2.tp1.pp1.mb4.a4.z1+off gpus=2 cpus=64 iters=6",
				"dp8.tp1.pp1.mb4.a1.z0+gc gpus=8 cpus=64 iters=6",
			}},
		"Megatron with TP 2: one run on the 3D code path after ZeRO-DP": {gb: 32, gpus: 8, cpus: 63, d: Megatron,
			opts: ProfileOptions{MaxMicroBatch: 4, TP: 2}, want: []string{
				"dp8.tp1.pp1.mb4.a1.z0 gpus=8 cpus=56 iters=6",
				"dp1.tp1.pp1.mb4.a8.z0 gpus=1 cpus=63 iters=6",
				"dp1.tp1.pp1.mb4.a8.z1+off gpus=1 cpus=63 iters=6",
				"dp8.tp1.pp1.mb4.a1.z1+off gpus=8 cpus=56 iters=6",
				"dp1.tp1.pp1.mb4.a8.z1+off gpus=1 cpus=31 iters=6",
				"dp2.tp1.pp1.mb4.a4.z0 gpus=2 cpus=62 iters=6",
				"dp8.tp1.pp1.mb4.a1.z1 gpus=8 cpus=56 iters=6",
				"dp1.tp2.pp1.mb4.a8.z0 gpus=2 cpus=62 iters=6",
				"dp4.tp1.pp1.mb4.a2.z0 gpus=4 cpus=60 iters=6",
				"dp2.tp1.pp1.mb4.a4.z1+off gpus=2 cpus=62 iters=6",
				"dp8.tp1.pp1.mb4.a1.z0+gc gpus=8 cpus=56 iters=6",
			}},
		"DeepSpeed cannot take TP: no TP run": {gb: 16, gpus: 2, cpus: 8, d: DeepSpeed,
			opts: ProfileOptions{TP: 2}, want: []string{
				"dp2.tp1.pp1.mb8.a1.z0 gpus=2 cpus=8 iters=6",
				"dp1.tp1.pp1.mb16.a1.z0 gpus=1 cpus=8 iters=6",
				"dp1.tp1.pp1.mb16.a1.z2+off gpus=1 cpus=8 iters=6",
				"dp2.tp1.pp1.mb8.a1.z2+off gpus=2 cpus=8 iters=6",
				"dp1.tp1.pp1.mb16.a1.z2+off gpus=1 cpus=4 iters=6",
				"dp2.tp1.pp1.mb8.a1.z2 gpus=2 cpus=8 iters=6",
				"dp2.tp1.pp1.mb8.a1.z0+gc gpus=2 cpus=8 iters=6",
			}},
		"DeepSpeed keeps ZeRO stage 2, 4 iterations": {gb: 16, gpus: 4, cpus: 20, d: DeepSpeed,
			opts: ProfileOptions{MaxMicroBatch: 8, Iters: 4}, want: []string{
				"dp4.tp1.pp1.mb4.a1.z0 gpus=4 cpus=20 iters=4",
				"dp1.tp1.pp1.mb8.a2.z0 gpus=1 cpus=20 iters=4",
				"dp1.tp1.pp1.mb8.a2.z2+off gpus=1 cpus=20 iters=4",
				"dp4.tp1.pp1.mb4.a1.z2+off gpus=4 cpus=20 iters=4",
				"dp1.tp1.pp1.mb8.a2.z2+off gpus=1 cpus=10 iters=4",
				"dp2.tp1.pp1.mb8.a1.z0 gpus=2 cpus=20 iters=4",
				"dp4.tp1.pp1.mb4.a1.z2 gpus=4 cpus=20 iters=4",
				"dp2.tp1.pp1.mb8.a1.z2+off gpus=2 cpus=20 iters=4",
				"dp4.tp1.pp1.mb4.a1.z0+gc gpus=4 cpus=20 iters=4",
			}},
		"batch of 6 on 4 GPUs: all = 3 GPUs, whole cores per rank": {gb: 6, gpus: 4, cpus: 16, d: Megatron, want: []string{
			"dp3.tp1.pp1.mb2.a1.z0 gpus=3 cpus=15 iters=6",
			"dp1.tp1.pp1.mb6.a1.z0 gpus=1 cpus=16 iters=6",
			"dp1.tp1.pp1.mb6.a1.z1+off gpus=1 cpus=16 iters=6",
			"dp3.tp1.pp1.mb2.a1.z1+off gpus=3 cpus=15 iters=6",
			"dp1.tp1.pp1.mb6.a1.z1+off gpus=1 cpus=8 iters=6",
			"dp2.tp1.pp1.mb3.a1.z0 gpus=2 cpus=16 iters=6",
			"dp3.tp1.pp1.mb2.a1.z1 gpus=3 cpus=15 iters=6",
			"dp2.tp1.pp1.mb3.a1.z1+off gpus=2 cpus=16 iters=6",
			"dp3.tp1.pp1.mb2.a1.z0+gc gpus=3 cpus=15 iters=6",
		}},
		"2 GPUs, CPUs unknown: padded with offload variants": {gb: 16, gpus: 2, cpus: 0, d: MegatronDeepSpeed,
			opts: ProfileOptions{MaxMicroBatch: 2}, want: []string{
				"dp2.tp1.pp1.mb2.a4.z0 gpus=2 cpus=0 iters=6",
				"dp1.tp1.pp1.mb2.a8.z0 gpus=1 cpus=0 iters=6",
				"dp1.tp1.pp1.mb2.a8.z2+off gpus=1 cpus=0 iters=6",
				"dp2.tp1.pp1.mb2.a4.z2+off gpus=2 cpus=0 iters=6",
				"dp2.tp1.pp1.mb2.a4.z2 gpus=2 cpus=0 iters=6",
				"dp2.tp1.pp1.mb2.a4.z0+gc gpus=2 cpus=0 iters=6",
				"dp1.tp1.pp1.mb2.a8.z2+off+gc gpus=1 cpus=0 iters=6",
			}},
		"1 GPU, batch 1, 1 CPU: too few distinct runs, some repeated": {gb: 1, gpus: 1, cpus: 1, d: Megatron, want: []string{
			"dp1.tp1.pp1.mb1.a1.z0 gpus=1 cpus=1 iters=6",
			"dp1.tp1.pp1.mb1.a1.z1+off gpus=1 cpus=1 iters=6",
			"dp1.tp1.pp1.mb1.a1.z0+gc gpus=1 cpus=1 iters=6",
			"dp1.tp1.pp1.mb1.a1.z1+off+gc gpus=1 cpus=1 iters=6",
			"dp1.tp1.pp1.mb1.a1.z1 gpus=1 cpus=1 iters=6",
			"dp1.tp1.pp1.mb1.a1.z1+off gpus=1 cpus=1 iters=6",
			"dp1.tp1.pp1.mb1.a1.z0+gc gpus=1 cpus=1 iters=6",
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			runs, err := ProfilePlans(c.gb, c.gpus, c.cpus, c.d, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range runs {
				got = append(got, runKey(r))
				if r.Purpose == "" {
					t.Errorf("run %s has no purpose", r.Plan)
				}
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("runs (-want +got):\n%s", diff)
			}
		})
	}
}

// Large models on 80 GB GPUs: gpt13 (a 13B GPT, sequence 2048) and
// llama7 (LLaMA-7B, sequence 4096, as the artifact's spec).
var (
	gpt13  = model.Spec{Name: "gpt13", Params: 13e9, Layers: 40, Hidden: 5120, Heads: 40, SeqLen: 2048}
	llama7 = model.Spec{Name: "llama7", Params: 6.738423808e9, Layers: 32, Hidden: 4096, Heads: 32, SeqLen: 4096}
)

// TestProfilePlansMemory: runs that do not fit in GPU memory are left out
// and lighter variants fill the phase to seven that do, three of them
// with offload. Before, a 13B GPT's phase on 80 GB GPUs started its plain
// data-parallel, checkpointing and, at micro-batch 2, most offload runs,
// each failing for memory: it measured two configurations at most.
func TestProfilePlansMemory(t *testing.T) {
	// The plain data-parallel and checkpointing runs of a large model.
	noPlainNoGC := func(p model.Plan, _ model.Placement) bool { return (p.ZeRO > 0 || p.Offload) && !p.Checkpoint }
	cases := map[string]struct {
		gb, gpus, cpus int
		d              Dialect
		opts           ProfileOptions
		want           []string
	}{
		"13B GPT, Megatron, micro-batch 2: offload with checkpointing or micro-batch 1": {gb: 16, gpus: 8, cpus: 96, d: Megatron,
			opts: ProfileOptions{MaxMicroBatch: 2, TP: 2, Fits: MemoryFits(gpt13, 80)}, want: []string{
				"dp1.tp1.pp1.mb2.a8.z1+off+gc gpus=1 cpus=96 iters=6",
				"dp1.tp1.pp1.mb1.a16.z1+off gpus=1 cpus=96 iters=6",
				"dp8.tp1.pp1.mb2.a1.z1+off+gc gpus=8 cpus=96 iters=6",
				"dp8.tp1.pp1.mb1.a2.z1+off gpus=8 cpus=96 iters=6",
				"dp2.tp1.pp1.mb2.a4.z1+off+gc gpus=2 cpus=96 iters=6",
				"dp2.tp1.pp1.mb1.a8.z1+off gpus=2 cpus=96 iters=6",
				"dp1.tp1.pp1.mb2.a8.z1+off+gc gpus=1 cpus=48 iters=6",
			}},
		"13B GPT, DeepSpeed, micro-batch 2: ZeRO-2 shards what Megatron's optimizer keeps": {gb: 16, gpus: 8, cpus: 96, d: DeepSpeed,
			opts: ProfileOptions{MaxMicroBatch: 2, Fits: MemoryFits(gpt13, 80)}, want: []string{
				"dp8.tp1.pp1.mb2.a1.z2+off gpus=8 cpus=96 iters=6",
				"dp2.tp1.pp1.mb2.a4.z2+off gpus=2 cpus=96 iters=6",
				"dp8.tp1.pp1.mb2.a1.z2+off gpus=8 cpus=48 iters=6",
				"dp8.tp1.pp1.mb2.a1.z2+gc gpus=8 cpus=96 iters=6",
				"dp1.tp1.pp1.mb2.a8.z2+off+gc gpus=1 cpus=96 iters=6",
				"dp1.tp1.pp1.mb1.a16.z2+off gpus=1 cpus=96 iters=6",
				"dp8.tp1.pp1.mb2.a1.z2+off+gc gpus=8 cpus=96 iters=6",
			}},
		"13B GPT, Megatron-DeepSpeed, micro-batch 4 on a 4-GPU node: only offload runs fit": {gb: 64, gpus: 4, cpus: 32, d: MegatronDeepSpeed,
			opts: ProfileOptions{MaxMicroBatch: 4, Fits: MemoryFits(gpt13, 80)}, want: []string{
				"dp1.tp1.pp1.mb4.a16.z2+off+gc gpus=1 cpus=32 iters=6",
				"dp1.tp1.pp1.mb1.a64.z2+off gpus=1 cpus=32 iters=6",
				"dp4.tp1.pp1.mb4.a4.z2+off+gc gpus=4 cpus=32 iters=6",
				"dp4.tp1.pp1.mb2.a8.z2+off gpus=4 cpus=32 iters=6",
				"dp2.tp1.pp1.mb4.a8.z2+off+gc gpus=2 cpus=32 iters=6",
				"dp2.tp1.pp1.mb2.a16.z2+off gpus=2 cpus=32 iters=6",
				"dp1.tp1.pp1.mb4.a16.z2+off+gc gpus=1 cpus=16 iters=6",
			}},
		"LLaMA-7B, Megatron, micro-batch 1: only plain data parallelism left out": {gb: 16, gpus: 8, cpus: 96, d: Megatron,
			opts: ProfileOptions{MaxMicroBatch: 1, TP: 2, Fits: MemoryFits(llama7, 80)}, want: []string{
				"dp1.tp1.pp1.mb1.a16.z1+off gpus=1 cpus=96 iters=6",
				"dp8.tp1.pp1.mb1.a2.z1+off gpus=8 cpus=96 iters=6",
				"dp1.tp1.pp1.mb1.a16.z1+off gpus=1 cpus=48 iters=6",
				"dp8.tp1.pp1.mb1.a2.z1 gpus=8 cpus=96 iters=6",
				"dp1.tp2.pp1.mb1.a16.z0 gpus=2 cpus=96 iters=6",
				"dp2.tp1.pp1.mb1.a8.z1+off gpus=2 cpus=96 iters=6",
				"dp8.tp1.pp1.mb1.a2.z1+gc gpus=8 cpus=96 iters=6",
			}},
		"no plain data parallelism, no checkpointing": {gb: 32, gpus: 8, cpus: 64, d: DeepSpeed,
			opts: ProfileOptions{MaxMicroBatch: 4, Fits: noPlainNoGC}, want: []string{
				"dp1.tp1.pp1.mb4.a8.z2+off gpus=1 cpus=64 iters=6",
				"dp8.tp1.pp1.mb4.a1.z2+off gpus=8 cpus=64 iters=6",
				"dp1.tp1.pp1.mb4.a8.z2+off gpus=1 cpus=32 iters=6",
				"dp8.tp1.pp1.mb4.a1.z2 gpus=8 cpus=64 iters=6",
				"dp2.tp1.pp1.mb4.a4.z2+off gpus=2 cpus=64 iters=6",
				"dp1.tp1.pp1.mb4.a8.z2 gpus=1 cpus=64 iters=6",
				"dp8.tp1.pp1.mb4.a1.z2+off gpus=8 cpus=32 iters=6",
			}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			asked := map[model.Plan]int{}
			fits := c.opts.Fits
			c.opts.Fits = func(p model.Plan, pl model.Placement) bool {
				asked[p]++
				if pl.Nodes() != 1 || pl.GPUs() != p.GPUs() {
					t.Errorf("plan %s asked about on placement %v", p, pl)
				}
				return fits(p, pl)
			}
			runs, err := ProfilePlans(c.gb, c.gpus, c.cpus, c.d, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			off := 0
			for _, r := range runs {
				got = append(got, runKey(r))
				if !fits(r.Plan, model.Placement{r.GPUs}) {
					t.Errorf("run %s does not fit", r.Plan)
				}
				if r.Plan.Offload {
					off++
				}
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("runs (-want +got):\n%s", diff)
			}
			if len(runs) < MinProfileRuns || off < MinProfileOffloadRuns {
				t.Errorf("%d runs, %d with offload; want >= %d and >= %d", len(runs), off, MinProfileRuns, MinProfileOffloadRuns)
			}
			for p, n := range asked {
				if n > 1 {
					t.Errorf("Fits asked %d times about %s", n, p)
				}
			}
		})
	}

	// Where every run fits the phase is the one without a check, and where
	// none does there is no phase.
	want, _ := ProfilePlans(32, 8, 64, Megatron, ProfileOptions{MaxMicroBatch: 4, TP: 2})
	got, err := ProfilePlans(32, 8, 64, Megatron, ProfileOptions{MaxMicroBatch: 4, TP: 2, Fits: MemoryFits(gpt13, 1000)})
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("every run fits: %v, runs (-without check +with):\n%s", err, diff)
	}
	if got, err := ProfilePlans(32, 8, 64, Megatron, ProfileOptions{Fits: MemoryFits(gpt13, 16)}); !errors.Is(err, model.ErrInfeasible) ||
		!strings.Contains(err.Error(), "fits in memory") {
		t.Errorf("nothing fits: %d runs, err %v; want an error wrapping model.ErrInfeasible", len(got), err)
	}
	if MemoryFits(gpt13, 0) != nil {
		t.Error("MemoryFits with the GPU memory unknown is not nil")
	}
}

// TestMemoryFitsHeadroom: a run fits when predicted to need at most
// ProfileMemoryHeadroom of the GPU's memory, not all of it.
func TestMemoryFitsHeadroom(t *testing.T) {
	plan := model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 2, Accum: 4, ZeRO: 2, Offload: true}
	need := model.Predictor{Spec: gpt13}.Memory(plan, model.Placement{2}).GPUGB // 71.5
	for _, tc := range []struct {
		gpuGB float64
		want  bool
	}{{need / ProfileMemoryHeadroom, true}, {need/ProfileMemoryHeadroom - 0.1, false}, {need, false}, {80, true}} {
		if got := MemoryFits(gpt13, tc.gpuGB)(plan, model.Placement{2}); got != tc.want {
			t.Errorf("%s needs %.1f GB: fits %.1f GB GPUs = %v, want %v", plan, need, tc.gpuGB, got, tc.want)
		}
	}
}

// TestHostMemoryFits: a ZeRO-Offload run fits when its node's ranks are
// predicted to need at most ProfileHostMemoryHeadroom of the job's memory
// there; a run without offload keeps no optimizer states on the host and
// always fits, and an unknown memory checks nothing.
func TestHostMemoryFits(t *testing.T) {
	off := model.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 2, Accum: 8, ZeRO: 2, Offload: true}
	need := model.Predictor{Spec: gpt13}.Memory(off, model.Placement{1}).HostGBNode // 198
	plain := model.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 2, Accum: 8, ZeRO: 2}
	for _, tc := range []struct {
		plan   model.Plan
		hostGB float64
		want   bool
	}{
		{off, need / ProfileHostMemoryHeadroom, true},
		{off, need/ProfileHostMemoryHeadroom - 0.1, false},
		{off, need, false},
		{off, 1024, true},
		{plain, 1, true},
	} {
		if got := HostMemoryFits(gpt13, tc.hostGB)(tc.plan, model.Placement{1}); got != tc.want {
			t.Errorf("%s needs %.1f GB of host memory: fits %.1f GB = %v, want %v", tc.plan, need, tc.hostGB, got, tc.want)
		}
	}
	if HostMemoryFits(gpt13, 0) != nil {
		t.Error("HostMemoryFits with the job's memory unknown is not nil")
	}
}

// TestArchTagRoundTrip: the arch value rubickd writes goes through the
// AdminComment and back, beside the other keys and segments, as the
// memory inputs it was written from.
func TestArchTagRoundTrip(t *testing.T) {
	for _, spec := range []model.Spec{gpt13, llama7,
		{Params: 3.36297858e+08, Layers: 24, Hidden: 1024, SeqLen: 512},
		{Params: 1.7976931348623157e+308, Layers: maxArchInt, Hidden: maxArchInt, SeqLen: maxArchInt}} {
		v := ArchValue(spec)
		tag := slurm.Tag{ModelType: "gpt13", Class: slurm.ClassBestEffort, Generation: 1,
			Extra: map[string]string{"profile": "1", TagArch: v, "at": "1700000000"}}
		ac, err := slurm.MergeAdminComment("model_type=gpt13;other=tool", tag)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		back, err := slurm.TagFromAdminComment(ac)
		if err != nil || back == nil {
			t.Fatalf("%s: %v", ac, err)
		}
		if diff := cmp.Diff(tag, *back); diff != "" {
			t.Errorf("tag (-written +read):\n%s", diff)
		}
		got, err := ParseArch(back.Extra[TagArch])
		if err != nil {
			t.Fatal(err)
		}
		want := model.Spec{Params: spec.Params, Layers: spec.Layers, Hidden: spec.Hidden, SeqLen: spec.SeqLen}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: spec (-want +got):\n%s", v, diff)
		}
	}
	if v := ArchValue(gpt13); v != "1.3e+10,40,5120,2048" {
		t.Errorf("ArchValue(gpt13) = %q", v)
	}
}

func TestParseArchErrors(t *testing.T) {
	for v, field := range map[string]string{
		"":                       "want <parameters>,<layers>,<hidden>,<seq_len>",
		"1.3e+10,40,5120":        "want <parameters>,<layers>,<hidden>,<seq_len>",
		"1.3e+10,40,5120,2048,1": "want <parameters>,<layers>,<hidden>,<seq_len>",
		"x,40,5120,2048":         `parameters="x"`,
		"0,40,5120,2048":         `parameters="0"`,
		"-1e9,40,5120,2048":      `parameters="-1e9"`,
		"NaN,40,5120,2048":       `parameters="NaN"`,
		"Inf,40,5120,2048":       `parameters="Inf"`,
		"1e9,0,5120,2048":        `layers="0"`,
		"1e9,40,5120.5,2048":     `hidden="5120.5"`,
		"1e9,40,5120,16777217":   `seq_len="16777217"`,
		"1e9,40,5120,":           `seq_len=""`,
	} {
		_, err := ParseArch(v)
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "arch=") {
			t.Errorf("ParseArch(%q) = %v, want ErrBadInput naming %q", v, err, field)
		}
	}
}

func TestProfilePlansErrors(t *testing.T) {
	cases := map[string]struct {
		gb, gpus, cpus int
		d              Dialect
		opts           ProfileOptions
		field          string
	}{
		"batch":       {gb: 0, gpus: 8, d: Megatron, field: "global batch=0"},
		"gpus":        {gb: 8, gpus: 0, d: Megatron, field: "GPUs on node=0"},
		"cpus":        {gb: 8, gpus: 1, cpus: -1, d: Megatron, field: "CPUs on node=-1"},
		"iters":       {gb: 8, gpus: 1, d: Megatron, opts: ProfileOptions{Iters: 1}, field: "iterations=1"},
		"cap":         {gb: 8, gpus: 1, d: Megatron, opts: ProfileOptions{MaxMicroBatch: -2}, field: "micro-batch=-2"},
		"auto":        {gb: 8, gpus: 1, d: DialectAuto, field: "dialect must be known"},
		"bad dialect": {gb: 8, gpus: 1, d: "jax", field: `dialect="jax"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ProfilePlans(c.gb, c.gpus, c.cpus, c.d, c.opts)
			if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), c.field) {
				t.Errorf("err = %v, want ErrBadInput naming %q", err, c.field)
			}
		})
	}
}

// TestPropertyProfilePlans: for any batch, node and dialect, the phase has
// at least MinProfileRuns runs, MinProfileOffloadRuns with offload, each
// keeping the global batch on GPUs the node has, expressible in the
// dialect and accepted by RewriteProfile; the offload runs vary the GPUs
// and the CPUs wherever the node allows; the choice is deterministic.
func TestPropertyProfilePlans(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		gb := rapid.IntRange(1, 1024).Draw(t, "global batch")
		gpus := rapid.IntRange(1, 16).Draw(t, "gpus")
		cpus := rapid.IntRange(0, 256).Draw(t, "cpus")
		d := rapid.SampledFrom([]Dialect{Megatron, MegatronDeepSpeed, DeepSpeed}).Draw(t, "dialect")
		opts := ProfileOptions{MaxMicroBatch: rapid.IntRange(0, 64).Draw(t, "cap"), Iters: rapid.IntRange(0, 20).Draw(t, "iters")}
		if opts.Iters == 1 {
			opts.Iters = 2
		}
		runs, err := ProfilePlans(gb, gpus, cpus, d, opts)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := ProfilePlans(gb, gpus, cpus, d, opts)
		if diff := cmp.Diff(runs, again); diff != "" {
			t.Fatalf("not deterministic:\n%s", diff)
		}
		if len(runs) < MinProfileRuns {
			t.Fatalf("%d runs, want >= %d", len(runs), MinProfileRuns)
		}
		wantIters := opts.Iters
		if wantIters == 0 {
			wantIters = DefaultProfileIters
		}
		offGPUs, offCPUs := map[int]bool{}, map[int]bool{}
		usableGPUs := 0
		for g := 1; g <= gpus; g++ {
			if gb%g == 0 {
				usableGPUs++
			}
		}
		files := map[string][]byte{"ds.json": []byte(`{"train_batch_size": ` + strconv.Itoa(gb) + `, "steps_per_print": 10}`)}
		line := []string{"python", "pretrain_gpt.py", "--global-batch-size", strconv.Itoa(gb), "--save", "/ck", "--train-iters", "100"}
		if d != Megatron {
			line = append(line, "--deepspeed", "--deepspeed_config", "ds.json")
		}
		if d == DeepSpeed {
			line = []string{"deepspeed", "train.py", "--deepspeed_config", "ds.json"}
		}
		for _, r := range runs {
			p := r.Plan
			if p.DP*p.MicroBatch*p.Accum != gb {
				t.Fatalf("run %s: DP*MicroBatch*Accum = %d, want the global batch %d", p, p.DP*p.MicroBatch*p.Accum, gb)
			}
			if p.TP != 1 || p.PP != 1 || r.GPUs != p.GPUs() || r.GPUs > gpus || r.GPUs < 1 {
				t.Fatalf("run %s on %d GPUs of %d", p, r.GPUs, gpus)
			}
			if opts.MaxMicroBatch > 0 && p.MicroBatch > opts.MaxMicroBatch {
				t.Fatalf("run %s: micro-batch above the cap %d", p, opts.MaxMicroBatch)
			}
			if r.CPUs < 0 || r.CPUs > cpus || (cpus > 0) != (r.CPUs > 0) {
				t.Fatalf("run %s: %d CPUs of %d", p, r.CPUs, cpus)
			}
			if r.Iters != wantIters {
				t.Fatalf("run %s: %d iterations, want %d", p, r.Iters, wantIters)
			}
			if err := ValidatePlan(p); err != nil || Expressible(d, p) != p {
				t.Fatalf("run %s: not a plan %s expresses (%v)", p, d, err)
			}
			if p.Offload {
				offGPUs[r.GPUs], offCPUs[r.CPUs] = true, true
			}
			if _, err := RewriteProfile(line, r, Options{Dialect: d, ConfigDir: "/job", ReadFile: mapReader(files)}); err != nil {
				t.Fatalf("RewriteProfile(%s): %v", p, err)
			}
		}
		off := slices.DeleteFunc(slices.Clone(runs), func(r ProfileRun) bool { return !r.Plan.Offload })
		if len(off) < MinProfileOffloadRuns {
			t.Fatalf("%d offload runs, want >= %d", len(off), MinProfileOffloadRuns)
		}
		if usableGPUs > 1 && len(offGPUs) < 2 {
			t.Fatalf("offload runs all on the same GPU count: %v", offGPUs)
		}
		if cpus >= 2 && len(offCPUs) < 2 {
			t.Fatalf("offload runs all with the same CPU count: %v", offCPUs)
		}
	})
}

// TestPropertyProfilePlansMemory: for any model and GPU memory, a phase
// with the memory check holds only runs that fit, at least MinProfileRuns
// of them and MinProfileOffloadRuns with offload where any offload run
// fits, each keeping the global batch; where every run fits it is the
// phase without the check, and where none does ProfilePlans says so.
func TestPropertyProfilePlansMemory(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec := model.Spec{Params: rapid.Float64Range(1e8, 1e11).Draw(t, "params"), Layers: rapid.IntRange(1, 96).Draw(t, "layers"),
			Hidden: rapid.IntRange(256, 12288).Draw(t, "hidden"), SeqLen: rapid.IntRange(128, 8192).Draw(t, "seq")}
		gpuGB := rapid.SampledFrom([]float64{16, 24, 40, 80, 141}).Draw(t, "gpu GB")
		gb := rapid.IntRange(1, 256).Draw(t, "global batch")
		gpus := rapid.IntRange(1, 8).Draw(t, "gpus")
		cpus := rapid.IntRange(0, 128).Draw(t, "cpus")
		d := rapid.SampledFrom([]Dialect{Megatron, MegatronDeepSpeed, DeepSpeed}).Draw(t, "dialect")
		opts := ProfileOptions{MaxMicroBatch: rapid.IntRange(0, 16).Draw(t, "cap"), TP: rapid.SampledFrom([]int{0, 2}).Draw(t, "tp")}
		fits := MemoryFits(spec, gpuGB)
		rejected := 0
		opts.Fits = func(p model.Plan, pl model.Placement) bool {
			ok := fits(p, pl)
			if !ok {
				rejected++
			}
			return ok
		}
		runs, err := ProfilePlans(gb, gpus, cpus, d, opts)
		if err != nil {
			if !errors.Is(err, model.ErrInfeasible) {
				t.Fatal(err)
			}
			return
		}
		again, _ := ProfilePlans(gb, gpus, cpus, d, opts)
		if diff := cmp.Diff(runs, again); diff != "" {
			t.Fatalf("not deterministic:\n%s", diff)
		}
		if rejected == 0 {
			opts.Fits = nil
			want, _ := ProfilePlans(gb, gpus, cpus, d, opts)
			if diff := cmp.Diff(want, runs); diff != "" {
				t.Fatalf("every run fits, yet the phase differs (-without check +with):\n%s", diff)
			}
		}
		if len(runs) < MinProfileRuns {
			t.Fatalf("%d runs, want >= %d", len(runs), MinProfileRuns)
		}
		off := 0
		for _, r := range runs {
			p := r.Plan
			if !fits(p, model.Placement{r.GPUs}) {
				t.Fatalf("run %s does not fit in %v GB", p, gpuGB)
			}
			if p.DP*p.TP*p.MicroBatch*p.Accum != gb*p.TP || r.GPUs != p.GPUs() || r.GPUs > gpus {
				t.Fatalf("run %s on %d GPUs of %d, global batch %d", p, r.GPUs, gpus, gb)
			}
			if err := ValidatePlan(p); err != nil || Expressible(d, p) != p {
				t.Fatalf("run %s: not a plan %s expresses (%v)", p, d, err)
			}
			if p.Offload {
				off++
			}
		}
		if off > 0 && off < MinProfileOffloadRuns {
			t.Fatalf("%d offload runs, want >= %d", off, MinProfileOffloadRuns)
		}
	})
}

func TestRewriteProfile(t *testing.T) {
	files := map[string][]byte{"ds.json": []byte(`{"train_batch_size": 32, "steps_per_print": 10, "zero_optimization": {"stage": 0}}`),
		"tracked.json": []byte(`{"train_batch_size": 32, "tensorboard": {"enabled": true, "output_path": "/ckpt/tb", "job_name": "gpt"},
			"wandb": {"enabled": true, "project": "gpt"}, "csv_monitor": {"enabled": true, "output_path": "/ckpt/csv"},
			"comet": {"project": "gpt"}}`)}
	run := func(plan string) ProfileRun {
		p := mustPlan(t, plan)
		return ProfileRun{Plan: p, GPUs: p.GPUs(), CPUs: 16, Iters: 6}
	}
	cases := map[string]struct {
		argv     []string
		run      ProfileRun
		opts     Options
		want     []string
		wantConf map[string]any
	}{
		"megatron: no checkpoints, exits after 6 iterations, logs each": {
			argv: strings.Fields("python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 32 --train-iters 500 " +
				"--save /ckpt --load /ckpt --save-interval 100 --log-interval=100 --exit-interval 1000 --lr 1e-4"),
			run:  run("dp2.tp1.pp1.mb4.a4.z1+off"),
			opts: Options{EnsureLoad: true, CheckpointDir: "/other"},
			want: strings.Fields("python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 32 --train-iters 500 " +
				"--log-interval=1 --exit-interval 6 --lr 1e-4 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 " +
				"--use-distributed-optimizer --optimizer-cpu-offload --use-precision-aware-optimizer"),
		},
		"torchrun megatron-deepspeed on one node": {
			argv: strings.Fields("torchrun --nnodes 2 --nproc_per_node 8 pretrain_gpt.py --micro-batch-size 4 " +
				"--global-batch-size 32 --deepspeed --deepspeed_config ds.json --zero-stage 0 --save=/ckpt"),
			run:  run("dp1.tp1.pp1.mb4.a8.z2+off"),
			opts: Options{Nodes: 1, GPUsPerNode: 1},
			want: strings.Fields("torchrun --nnodes 1 --nproc_per_node 1 pretrain_gpt.py --micro-batch-size 4 " +
				"--global-batch-size 32 --deepspeed --deepspeed_config /job/rubick-ds.json --zero-stage 2 " +
				"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --cpu-optimizer --no-pipeline-parallel --exit-interval 6 --log-interval 1"),
			wantConf: map[string]any{"train_batch_size": 32.0, "steps_per_print": 10.0, "train_micro_batch_size_per_gpu": 4.0,
				"gradient_accumulation_steps": 8.0, "zero_optimization": map[string]any{"stage": 2.0,
					"offload_optimizer": map[string]any{"device": "cpu", "pin_memory": true}}},
		},
		"megatron: no TensorBoard logs or W&B run of the job's": {
			argv: strings.Fields("python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 32 --save /ckpt " +
				"--tensorboard-dir /ckpt/tb --log-timers-to-tensorboard --wandb-project gpt --wandb-exp-name=run1 --wandb-save-dir /ckpt/wandb"),
			run: run("dp8.tp1.pp1.mb4.a1.z0"),
			want: strings.Fields("python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 32 " +
				"--tensorboard-dir /job/tensorboard --log-timers-to-tensorboard --wandb-save-dir /ckpt/wandb " +
				"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --exit-interval 6 --log-interval 1"),
		},
		"megatron-deepspeed: a W&B experiment name alone starts a run": {
			argv: strings.Fields("python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 32 --deepspeed --zero-stage 0 " +
				"--tensorboard-dir=/ckpt/tb --wandb-exp-name run1"),
			run: run("dp8.tp1.pp1.mb4.a1.z0"),
			want: strings.Fields("python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 32 --deepspeed --zero-stage 0 " +
				"--tensorboard-dir=/job/tensorboard --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 " +
				"--exit-interval 6 --log-interval 1"),
		},
		"deepspeed: every step printed, stopped by the caller": {
			argv: strings.Fields("deepspeed train.py --deepspeed_config ds.json --output_dir /ckpt"),
			run:  run("dp4.tp1.pp1.mb8.a1.z0"),
			opts: Options{Nodes: 1, GPUsPerNode: 4},
			want: strings.Fields("deepspeed --num_nodes 1 --num_gpus 4 train.py --deepspeed_config /job/rubick-ds.json --output_dir /ckpt"),
			wantConf: map[string]any{"train_batch_size": 32.0, "steps_per_print": 1.0, "train_micro_batch_size_per_gpu": 8.0,
				"gradient_accumulation_steps": 1.0, "zero_optimization": map[string]any{"stage": 0.0}},
		},
		"deepspeed: the config's trackers off": {
			argv: strings.Fields("deepspeed train.py --deepspeed_config tracked.json"),
			run:  run("dp4.tp1.pp1.mb8.a1.z0"),
			opts: Options{Nodes: 1, GPUsPerNode: 4},
			want: strings.Fields("deepspeed --num_nodes 1 --num_gpus 4 train.py --deepspeed_config /job/rubick-tracked.json"),
			wantConf: map[string]any{"train_batch_size": 32.0, "steps_per_print": 1.0, "train_micro_batch_size_per_gpu": 8.0,
				"gradient_accumulation_steps": 1.0,
				"tensorboard":                 map[string]any{"enabled": false, "output_path": "/ckpt/tb", "job_name": "gpt"},
				"wandb":                       map[string]any{"enabled": false, "project": "gpt"},
				"csv_monitor":                 map[string]any{"enabled": false, "output_path": "/ckpt/csv"},
				"comet":                       map[string]any{"enabled": false, "project": "gpt"}},
		},
		"megatron-deepspeed: the config's trackers off": {
			argv: strings.Fields("python pretrain_gpt.py --micro-batch-size 8 --global-batch-size 32 --deepspeed --deepspeed_config tracked.json"),
			run:  run("dp4.tp1.pp1.mb8.a1.z0"),
			want: strings.Fields("python pretrain_gpt.py --micro-batch-size 8 --global-batch-size 32 --deepspeed --deepspeed_config /job/rubick-tracked.json " +
				"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --zero-stage 0 --exit-interval 6 --log-interval 1"),
			wantConf: map[string]any{"train_batch_size": 32.0, "train_micro_batch_size_per_gpu": 8.0, "gradient_accumulation_steps": 1.0,
				"tensorboard": map[string]any{"enabled": false, "output_path": "/ckpt/tb", "job_name": "gpt"},
				"wandb":       map[string]any{"enabled": false, "project": "gpt"},
				"csv_monitor": map[string]any{"enabled": false, "output_path": "/ckpt/csv"},
				"comet":       map[string]any{"enabled": false, "project": "gpt"}},
		},
		"hugging face: its own output directory, no checkpoint, from scratch, its progress bar on": {
			argv: strings.Fields("python train.py --deepspeed ds.json --output_dir /ckpt --logging-dir=/ckpt/tb --save_steps 2 " +
				"--resume_from_checkpoint /ckpt/checkpoint-400 --load_best_model_at_end --eval_strategy steps --save-strategy=steps --log-level=warning"),
			run: run("dp4.tp1.pp1.mb8.a1.z0"),
			want: strings.Fields("python train.py --deepspeed /job/rubick-ds.json --output_dir /job/output --save_steps 2 " +
				"--eval_strategy steps --save-strategy=no --log-level=info --per_device_train_batch_size 8 --gradient_accumulation_steps 1 " +
				"--disable_tqdm False --report_to none"),
			wantConf: map[string]any{"train_batch_size": 32.0, "steps_per_print": 1.0, "train_micro_batch_size_per_gpu": 8.0,
				"gradient_accumulation_steps": 1.0, "zero_optimization": map[string]any{"stage": 0.0}},
		},
		"hugging face: the output directory and strategy added": {
			argv: strings.Fields("python train.py --deepspeed=ds.json --per_device_train_batch_size 4"),
			run:  run("dp4.tp1.pp1.mb8.a1.z0"),
			want: strings.Fields("python train.py --deepspeed=/job/rubick-ds.json --per_device_train_batch_size 8 " +
				"--gradient_accumulation_steps 1 --disable_tqdm False --log_level info --output_dir /job/output --save_strategy no --report_to none"),
			wantConf: map[string]any{"train_batch_size": 32.0, "steps_per_print": 1.0, "train_micro_batch_size_per_gpu": 8.0,
				"gradient_accumulation_steps": 1.0, "zero_optimization": map[string]any{"stage": 0.0}},
		},
		"hugging face: its trackers, several after one flag, are none, and nothing goes to the Hub": {
			argv: strings.Fields("python train.py --deepspeed ds.json --report_to wandb tensorboard --push_to_hub --run_name r1 " +
				"--output_dir /ckpt --report_to=comet_ml --push-to-hub=True --hub_model_id me/gpt --push_to_hub true"),
			run: run("dp4.tp1.pp1.mb8.a1.z0"),
			want: strings.Fields("python train.py --deepspeed /job/rubick-ds.json --report_to none --run_name r1 " +
				"--output_dir /job/output --hub_model_id me/gpt --per_device_train_batch_size 8 --gradient_accumulation_steps 1 --disable_tqdm False --log_level info --save_strategy no"),
			wantConf: map[string]any{"train_batch_size": 32.0, "steps_per_print": 1.0, "train_micro_batch_size_per_gpu": 8.0,
				"gradient_accumulation_steps": 1.0, "zero_optimization": map[string]any{"stage": 0.0}},
		},
		// The progress bar is the run's only measure: a line that turns
		// it off, alone or with a value, has it on in its runs.
		"hugging face: the progress bar on": {
			argv: strings.Fields("python train.py --deepspeed ds.json --disable_tqdm --output_dir /ckpt --disable-tqdm=true --log_level error"),
			run:  run("dp4.tp1.pp1.mb8.a1.z0"),
			want: strings.Fields("python train.py --deepspeed /job/rubick-ds.json --disable_tqdm False --output_dir /job/output --log_level info " +
				"--per_device_train_batch_size 8 --gradient_accumulation_steps 1 --save_strategy no --report_to none"),
			wantConf: map[string]any{"train_batch_size": 32.0, "steps_per_print": 1.0, "train_micro_batch_size_per_gpu": 8.0,
				"gradient_accumulation_steps": 1.0, "zero_optimization": map[string]any{"stage": 0.0}},
		},
		// The Trainer's own config wins over accelerate's plugin (its
		// TrainingArguments build the plugin from it), and its bar is
		// shown: run as any Trainer line. Before, it was refused.
		"hugging face launched by accelerate with its DeepSpeed plugin": {
			argv: strings.Fields("accelerate launch --use_deepspeed --gradient_accumulation_steps 2 --num_processes 8 train.py " +
				"--deepspeed ds.json --output_dir /ckpt --disable_tqdm --per_device_train_batch_size 2"),
			run:  run("dp4.tp1.pp1.mb8.a1.z0"),
			opts: Options{Nodes: 1, GPUsPerNode: 4, Rendezvous: "127.0.0.1:20042"},
			want: strings.Fields("accelerate launch --use_deepspeed --gradient_accumulation_steps 1 --num_processes 4 " +
				"--num_machines 1 --main_process_port 20042 train.py --deepspeed /job/rubick-ds.json --output_dir /job/output " +
				"--disable_tqdm False --per_device_train_batch_size 8 --gradient_accumulation_steps 1 --log_level info " +
				"--save_strategy no --report_to none"),
			wantConf: map[string]any{"train_batch_size": 32.0, "steps_per_print": 1.0, "train_micro_batch_size_per_gpu": 8.0,
				"gradient_accumulation_steps": 1.0, "zero_optimization": map[string]any{"stage": 0.0}},
		},
		"hugging face: dash spelling, inline": {
			argv: strings.Fields("python train.py --deepspeed ds.json --report-to=wandb --output_dir /ckpt"),
			run:  run("dp4.tp1.pp1.mb8.a1.z0"),
			want: strings.Fields("python train.py --deepspeed /job/rubick-ds.json --report-to=none --output_dir /job/output " +
				"--per_device_train_batch_size 8 --gradient_accumulation_steps 1 --disable_tqdm False --log_level info --save_strategy no"),
			wantConf: map[string]any{"train_batch_size": 32.0, "steps_per_print": 1.0, "train_micro_batch_size_per_gpu": 8.0,
				"gradient_accumulation_steps": 1.0, "zero_optimization": map[string]any{"stage": 0.0}},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			c.opts.ConfigDir, c.opts.ReadFile = "/job", mapReader(files)
			res, err := RewriteProfile(c.argv, c.run, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, res.Argv); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
			if c.wantConf == nil {
				if res.Config != nil {
					t.Errorf("unexpected config %s", res.Config.Data)
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal(res.Config.Data, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.wantConf, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := RewriteProfile([]string{"python", "pretrain_gpt.py"}, ProfileRun{Plan: mustPlan(t, "dp1.tp1.pp1.mb1.a1.z0")}, Options{}); !errors.Is(err, ErrBadInput) {
		t.Errorf("zero iterations: err = %v, want ErrBadInput", err)
	}
	if _, err := RewriteProfile([]string{"python", "pretrain_gpt.py", "--global-batch-size", "8"}, run("dp2.tp1.pp1.mb2.a1.z0"), Options{}); !errors.Is(err, ErrGlobalBatch) {
		t.Errorf("batch change: err = %v, want ErrGlobalBatch", err)
	}
	if !SelfExiting(Megatron) || !SelfExiting(MegatronDeepSpeed) || SelfExiting(DeepSpeed) {
		t.Error("SelfExiting: only Megatron dialects take --exit-interval")
	}
}

// TestRewriteProfileSampleSource: profiling refuses exactly the lines
// CheckSamples says report no iteration times whatever their flags (an
// accelerate DeepSpeed-plugin line without a Trainer --deepspeed), and
// times the rest as their training runs are: a Trainer line by its bar,
// whoever launches it, a plain DeepSpeed line by DeepSpeed's step lines.
// Before, a Trainer line that accelerate launched with the plugin was
// refused although its training runs read its bar.
func TestRewriteProfileSampleSource(t *testing.T) {
	files := map[string][]byte{"ds.json": []byte(`{"train_batch_size": 16, "zero_optimization": {"stage": 2}}`),
		"acc.json": accConfigs["acc.json"]}
	run := ProfileRun{Plan: mustPlan(t, "dp2.tp1.pp1.mb8.a1.z2"), GPUs: 2, Iters: 3}
	for _, tc := range []struct {
		line string
		want string // what the run is timed by: "bar", "deepspeed", or "none" (refused)
	}{
		{"accelerate launch --use_deepspeed --deepspeed_config_file acc.json train.py --lr 1e-4", "none"},
		{"accelerate launch --use_deepspeed --zero_stage 2 train.py --per_device_train_batch_size 4", "none"},
		{"python -m accelerate.commands.launch --use-deepspeed train.py --per_device_train_batch_size 4", "none"},
		{"accelerate launch --use_deepspeed train.py --deepspeed ds.json", "bar"},
		{"accelerate launch --use-deepspeed --zero_stage 3 train.py --deepspeed=ds.json --disable_tqdm", "bar"},
		{"accelerate launch --use_deepspeed --deepspeed_config_file acc.json train.py --deepspeed ds.json", "bar"},
		{"accelerate launch train.py --deepspeed ds.json", "bar"},
		{"torchrun --nproc_per_node 2 train.py --deepspeed ds.json", "bar"},
		{"accelerate launch train.py --deepspeed_config ds.json", "deepspeed"},
		{"deepspeed train.py --deepspeed_config ds.json", "deepspeed"},
	} {
		t.Run(tc.line, func(t *testing.T) {
			argv := strings.Fields(tc.line)
			got := "deepspeed"
			res, err := RewriteProfile(argv, run, Options{ConfigDir: "/job", ReadFile: mapReader(files)})
			switch {
			case errors.Is(err, ErrUnsupported):
				got = "none"
			case err != nil:
				t.Fatal(err)
			case res.HFTrainer():
				got = "bar"
				if i := slices.Index(res.Argv, "--disable_tqdm"); i < 0 || i+1 == len(res.Argv) || res.Argv[i+1] != "False" {
					t.Errorf("argv %q: the bar is not turned on", res.Argv)
				}
			}
			if got != tc.want {
				t.Errorf("RewriteProfile: timed by %q (err %v), want %q", got, err, tc.want)
			}
			warn := CheckSamples(argv, Options{})
			if named := errors.Is(warn, ErrNoSamples) && strings.Contains(warn.Error(), fAccUseDS.names[0]); named != (tc.want == "none") {
				t.Errorf("CheckSamples = %v: says no source at all %v, want %v", warn, named, tc.want == "none")
			}
		})
	}
}

func TestVisibleDevices(t *testing.T) {
	cases := []struct {
		visible string
		n       int
		want    string
	}{
		{"", 2, "0,1"},
		{"4,5,6,7", 2, "4,5"},
		{"GPU-aa, GPU-bb", 1, "GPU-aa"},
		{"3", 1, "3"},
		{"3", 2, "3"}, // no more than the job sees
	}
	for _, c := range cases {
		if got := VisibleDevices(c.visible, c.n); got != c.want {
			t.Errorf("VisibleDevices(%q, %d) = %q, want %q", c.visible, c.n, got, c.want)
		}
	}
}
