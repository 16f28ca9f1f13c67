package launch

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files")

func mustPlan(t testing.TB, s string) model.Plan {
	t.Helper()
	p, err := model.ParsePlan(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Launch lines of each dialect, all with a global batch of 32.
var (
	megatronLine = strings.Fields(`python pretrain_gpt.py --num-layers 24 --hidden-size 1024 --num-attention-heads 16
		--seq-length 1024 --tensor-model-parallel-size 1 --pipeline-model-parallel-size=1 --micro-batch-size 4
		--global-batch-size 32 --recompute-activations --train-iters 500 --save /ckpt/gpt2 --lr 1.5e-4 --fp16`)
	megatronDSLine = strings.Fields(`deepspeed pretrain_gpt.py --num-layers 24 --tensor-model-parallel-size 1
		--micro-batch-size 4 --global-batch-size 32 --deepspeed --deepspeed_config testdata/ds_zero2.json
		--zero-stage 2 --checkpoint-activations --deepspeed-activation-checkpointing --save /ckpt --lr 1e-4`)
	deepspeedLine = strings.Fields(`deepspeed --num_gpus 8 train.py --epochs 3 --deepspeed
		--deepspeed_config=testdata/ds_zero2.json --log-dir logs`)
	torchrunLine = strings.Fields(`torchrun --nproc_per_node=8 --nnodes 1 --rdzv-backend c10d pretrain_gpt.py
		--tensor-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 32 --use-distributed-optimizer
		--recompute-granularity=selective --save /ckpt --load /ckpt/other`)
	hfLine = strings.Fields(`python train.py --deepspeed testdata/ds_offload.json --output_dir out`)
)

// Plans of every family with a global batch of 32.
var familyPlans = map[model.Family]string{
	model.FamilyGA:          "dp8.tp1.pp1.mb2.a2.z0",
	model.FamilyGC:          "dp8.tp1.pp1.mb4.a1.z0+gc",
	model.FamilyZeroDP:      "dp8.tp1.pp1.mb4.a1.z2",
	model.FamilyZeroOffload: "dp4.tp1.pp1.mb4.a2.z2+off",
	model.Family3D:          "dp2.tp2.pp2.mb2.a8.z1+gc",
}

func renderGolden(argv []string, plan model.Plan, res Result) string {
	var b strings.Builder
	b.WriteString("input:  " + strings.Join(argv, " ") + "\n")
	b.WriteString("plan:   " + plan.String() + "\n")
	b.WriteString("dialect: " + string(res.Dialect) + "\n")
	b.WriteString("argv:\n")
	for _, a := range res.Argv {
		b.WriteString("  " + a + "\n")
	}
	if res.Config != nil {
		b.WriteString("config " + res.Config.Source + " -> " + res.Config.Path + ":\n")
		b.Write(res.Config.Data)
	}
	return b.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./launch/ -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-golden +got):\n%s", path, diff)
	}
}

func TestRewriteGolden(t *testing.T) {
	lines := map[string][]string{
		"megatron":           megatronLine,
		"megatron-deepspeed": megatronDSLine,
		"deepspeed":          deepspeedLine,
	}
	type tc struct {
		argv []string
		plan string
	}
	cases := map[string]tc{
		"torchrun-3d":  {torchrunLine, "dp4.tp2.pp1.mb1.a8.z0+gc"},
		"hf-offload":   {hfLine, "dp8.tp1.pp1.mb2.a2.z1+off"},
		"hf-stage3-gc": {hfLine, "dp8.tp1.pp1.mb4.a1.z3+off+gc"},
	}
	for dialect, argv := range lines {
		for fam, plan := range familyPlans {
			if dialect == "deepspeed" && fam == model.Family3D {
				continue // not expressible; see TestRewriteErrors
			}
			cases[dialect+"-"+string(fam)] = tc{argv, plan}
		}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			plan := mustPlan(t, c.plan)
			res, err := Rewrite(c.argv, plan, Options{ConfigDir: "/job/rubick", EnsureLoad: true, Nodes: 1, GPUsPerNode: plan.GPUs()})
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, name, renderGolden(c.argv, plan, res))
			// The rewritten line reads back as the plan.
			files := map[string][]byte{}
			if res.Config != nil {
				files[res.Config.Path] = res.Config.Data
			}
			got, gb, err := Inspect(res.Argv, plan.GPUs(), Options{ReadFile: mapReader(files)})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(Expressible(res.Dialect, plan), got); diff != "" || gb != 32 {
				t.Errorf("Inspect gb=%d (want 32), plan diff (-want +got):\n%s", gb, diff)
			}
		})
	}
}

// savedIn is an Options.Saved for which dir alone holds a checkpoint.
func savedIn(dir string) func(string) bool {
	return func(d string) bool { return d == dir }
}

// mapReader serves files from m and falls back to the disk.
func mapReader(m map[string][]byte) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if b, ok := m[name]; ok {
			return b, nil
		}
		return os.ReadFile(name)
	}
}

func TestRewriteErrors(t *testing.T) {
	cases := map[string]struct {
		argv    []string
		plan    string
		opts    Options
		want    error
		message string // a substring the message must contain
	}{
		"plan changes the flag's global batch": {
			argv: megatronLine, plan: "dp8.tp1.pp1.mb2.a1.z0", want: ErrGlobalBatch,
			message: "--global-batch-size=32 but plan dp8.tp1.pp1.mb2.a1.z0 gives DP*MicroBatch*Accum = 8*2*1 = 16",
		},
		"plan changes the config's global batch": {
			argv: deepspeedLine, plan: "dp8.tp1.pp1.mb8.a1.z0", want: ErrGlobalBatch,
			message: "train_batch_size in testdata/ds_zero2.json=32 but plan dp8.tp1.pp1.mb8.a1.z0 gives DP*MicroBatch*Accum = 8*8*1 = 64",
		},
		"plan changes the job's global batch": {
			argv: []string{"python", "pretrain_gpt.py", "--micro-batch-size", "2"}, plan: "dp8.tp1.pp1.mb2.a1.z0",
			opts: Options{GlobalBatch: 32}, want: ErrGlobalBatch, message: "the job's global batch=32",
		},
		"flag and config disagree": {
			argv: append(append([]string{}, megatronDSLine...), "--global-batch-size", "64"), plan: "dp8.tp1.pp1.mb4.a2.z0",
			want: ErrBadInput, message: "--global-batch-size=64 but train_batch_size in testdata/ds_zero2.json=32",
		},
		"deepspeed cannot do 3d": {
			argv: deepspeedLine, plan: familyPlans[model.Family3D], want: ErrUnsupported,
		},
		"megatron-deepspeed offload needs a config": {
			argv: []string{"python", "pretrain_gpt.py", "--deepspeed", "--global-batch-size", "32"}, plan: "dp8.tp1.pp1.mb4.a1.z2+off",
			want: ErrUnsupported, message: "--deepspeed_config",
		},
		"unknown dialect": {
			argv: []string{"bash", "train.sh", "--epochs", "3"}, plan: "dp1.tp1.pp1.mb1.a1.z0", want: ErrUnknownDialect,
		},
		"offload without zero": {
			argv: megatronLine, plan: "dp8.tp1.pp1.mb4.a1.z0+off", want: ErrBadInput, message: "zero=0",
		},
		"bad global batch flag": {
			argv: []string{"python", "pretrain_gpt.py", "--global-batch-size=abc"}, plan: "dp1.tp1.pp1.mb1.a1.z0",
			want: ErrBadInput, message: `--global-batch-size="abc"`,
		},
		"batch in config not an integer": {
			argv: []string{"deepspeed", "train.py", "--deepspeed_config", "bad.json"}, plan: "dp1.tp1.pp1.mb1.a1.z0",
			opts: Options{ConfigDir: "/job", ReadFile: mapReader(map[string][]byte{"bad.json": []byte(`{"train_batch_size": "32"}`)})},
			want: ErrBadInput, message: `train_batch_size="32" is not an integer`,
		},
		"config is not an object": {
			argv: []string{"deepspeed", "train.py", "--deepspeed_config", "bad.json"}, plan: "dp1.tp1.pp1.mb1.a1.z0",
			opts: Options{ConfigDir: "/job", ReadFile: mapReader(map[string][]byte{"bad.json": []byte(`[1]`)})},
			want: ErrBadInput, message: "bad.json",
		},
		"no config dir": {
			argv: deepspeedLine, plan: "dp8.tp1.pp1.mb4.a1.z0", want: ErrBadInput, message: "job-private directory",
		},
		"deepspeed without config": {
			argv: []string{"deepspeed", "train.py", "--epochs", "1"}, plan: "dp1.tp1.pp1.mb1.a1.z0", want: ErrBadInput,
		},
		"missing config file": {
			argv: deepspeedLine, plan: "dp8.tp1.pp1.mb4.a1.z0", opts: Options{ConfigDir: "/job",
				ReadFile: func(string) ([]byte, error) { return nil, os.ErrNotExist }}, want: os.ErrNotExist,
		},
		"context parallelism": {
			argv: []string{"python", "pretrain_gpt.py", "--context-parallel-size", "2", "--global-batch-size", "32"},
			plan: "dp8.tp1.pp1.mb4.a1.z0", want: ErrBadInput, message: "--context-parallel-size=2",
		},
		"context parallelism inline": {
			argv: []string{"deepspeed", "pretrain_gpt.py", "--deepspeed", "--context-parallel-size=4", "--global-batch-size", "32"},
			plan: "dp8.tp1.pp1.mb4.a1.z0", want: ErrBadInput, message: "--context-parallel-size=4",
		},
		"context parallelism not a number": {
			argv: []string{"python", "pretrain_gpt.py", "--context-parallel-size=x", "--global-batch-size", "32"},
			plan: "dp8.tp1.pp1.mb4.a1.z0", want: ErrBadInput, message: `--context-parallel-size="x"`,
		},
		"ulysses sequence parallelism": {
			argv: []string{"deepspeed", "pretrain_gpt.py", "--deepspeed", "--ds-sequence-parallel-size", "2", "--context-parallel-size", "1", "--global-batch-size", "32"},
			plan: "dp8.tp1.pp1.mb4.a1.z0", want: ErrBadInput, message: "--ds-sequence-parallel-size=2",
		},
		"forced bad dialect": {
			argv: megatronLine, plan: "dp8.tp1.pp1.mb4.a1.z0", opts: Options{Dialect: "pytorch"}, want: ErrBadInput, message: `dialect="pytorch"`,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Rewrite(c.argv, mustPlan(t, c.plan), c.opts)
			if !errors.Is(err, c.want) {
				t.Fatalf("Rewrite error = %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.message) {
				t.Errorf("error %q does not contain %q", err, c.message)
			}
		})
	}
}

func TestRewriteFlagForms(t *testing.T) {
	cases := map[string]struct {
		argv []string
		plan string
		opts Options
		want []string
	}{
		"inline form kept, duplicates dropped, unknown flags in order": {
			argv: []string{"python", "pretrain_gpt.py", "--foo", "x", "--tensor-model-parallel-size=1", "--bar=y",
				"--tensor-model-parallel-size", "4", "--micro-batch-size", "2", "--global-batch-size=16", "--baz"},
			plan: "dp4.tp2.pp1.mb2.a2.z0",
			want: []string{"python", "pretrain_gpt.py", "--foo", "x", "--tensor-model-parallel-size=2", "--bar=y",
				"--micro-batch-size", "2", "--global-batch-size=16", "--baz", "--pipeline-model-parallel-size", "1"},
		},
		"absent flags added, recompute removed": {
			argv: []string{"python", "pretrain_gpt.py", "--recompute-granularity", "full", "--recompute-method=block",
				"--recompute-num-layers", "2", "--use-distributed-optimizer", "--seed", "7"},
			plan: "dp2.tp1.pp1.mb4.a1.z0",
			want: []string{"python", "pretrain_gpt.py", "--seed", "7", "--tensor-model-parallel-size", "1",
				"--pipeline-model-parallel-size", "1", "--micro-batch-size", "4", "--global-batch-size", "8"},
		},
		"recompute kept layers": {
			argv: []string{"python", "pretrain_gpt.py", "--recompute-num-layers=2", "--global-batch-size", "8"},
			plan: "dp2.tp1.pp1.mb4.a1.z0+gc",
			want: []string{"python", "pretrain_gpt.py", "--recompute-num-layers=2", "--global-batch-size", "8",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "4",
				"--recompute-granularity", "full", "--recompute-method", "uniform"},
		},
		"checkpoint dir gives save and load": {
			argv: []string{"python", "pretrain_gpt.py", "--micro-batch-size", "4"},
			plan: "dp1.tp1.pp1.mb4.a1.z0", opts: Options{CheckpointDir: "/scratch/j1"},
			want: []string{"python", "pretrain_gpt.py", "--micro-batch-size", "4", "--tensor-model-parallel-size", "1",
				"--pipeline-model-parallel-size", "1", "--global-batch-size", "4", "--save", "/scratch/j1", "--load", "/scratch/j1"},
		},
		"checkpoint dir without a checkpoint: the line's load kept for the first start": {
			argv: []string{"python", "pretrain_gpt.py", "--load", "/models/base", "--finetune", "--global-batch-size", "4"},
			plan: "dp1.tp1.pp1.mb4.a1.z0", opts: Options{CheckpointDir: "/scratch/j1", EnsureLoad: true},
			want: []string{"python", "pretrain_gpt.py", "--load", "/models/base", "--finetune", "--global-batch-size", "4",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "4", "--save", "/scratch/j1"},
		},
		"checkpoint dir holding the job's checkpoint: a restart loads it, all of it": {
			argv: []string{"python", "pretrain_gpt.py", "--load=/models/base", "--finetune", "--no-load-optim", "--no-load-rng",
				"--global-batch-size", "4"},
			plan: "dp1.tp1.pp1.mb4.a1.z0", opts: Options{CheckpointDir: "/scratch/j1", Saved: savedIn("/scratch/j1")},
			want: []string{"python", "pretrain_gpt.py", "--load=/scratch/j1", "--global-batch-size", "4",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "4", "--save", "/scratch/j1"},
		},
		"checkpoint dir holding a checkpoint, the line's own save: the line's load stays": {
			argv: []string{"python", "pretrain_gpt.py", "--save", "/c", "--load", "/models/base", "--finetune", "--global-batch-size", "4"},
			plan: "dp1.tp1.pp1.mb4.a1.z0", opts: Options{CheckpointDir: "/scratch/j1", Saved: savedIn("/scratch/j1")},
			want: []string{"python", "pretrain_gpt.py", "--save", "/c", "--load", "/models/base", "--finetune", "--global-batch-size", "4",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "4"},
		},
		"own save without a checkpoint: the line's load kept for the first start": {
			argv: []string{"python", "pretrain_gpt.py", "--save", "/c", "--load", "/models/base", "--finetune", "--global-batch-size", "4"},
			plan: "dp1.tp1.pp1.mb4.a1.z0", opts: Options{EnsureLoad: true, Saved: savedIn("/other")},
			want: []string{"python", "pretrain_gpt.py", "--save", "/c", "--load", "/models/base", "--finetune", "--global-batch-size", "4",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "4"},
		},
		"own save holding the job's checkpoint: a restart loads it, all of it": {
			argv: []string{"python", "pretrain_gpt.py", "--save=/c", "--load", "/models/base", "--finetune", "--no-load-optim",
				"--load", "/models/other", "--global-batch-size", "4"},
			plan: "dp1.tp1.pp1.mb4.a1.z0", opts: Options{EnsureLoad: true, Saved: savedIn("/c")},
			want: []string{"python", "pretrain_gpt.py", "--save=/c", "--load", "/c", "--global-batch-size", "4",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "4"},
		},
		"megatron-deepspeed: own save holding the job's checkpoint": {
			argv: []string{"python", "pretrain_gpt.py", "--deepspeed", "--zero-stage", "1", "--load=/models/base", "--save", "/c",
				"--global-batch-size", "4"},
			plan: "dp1.tp1.pp1.mb4.a1.z1", opts: Options{EnsureLoad: true, Saved: savedIn("/c")},
			want: []string{"python", "pretrain_gpt.py", "--deepspeed", "--zero-stage", "1", "--load=/c", "--save", "/c",
				"--global-batch-size", "4", "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "4"},
		},
		"own save holding a checkpoint, loads left alone when asked": {
			argv: []string{"python", "pretrain_gpt.py", "--save", "/c", "--load", "/models/base", "--global-batch-size", "4"},
			plan: "dp1.tp1.pp1.mb4.a1.z0", opts: Options{Saved: savedIn("/c")},
			want: []string{"python", "pretrain_gpt.py", "--save", "/c", "--load", "/models/base", "--global-batch-size", "4",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "4"},
		},
		"loading where it saves: the line's own flags stay": {
			argv: []string{"python", "pretrain_gpt.py", "--save", "/c", "--load", "/c", "--finetune", "--global-batch-size", "4"},
			plan: "dp1.tp1.pp1.mb4.a1.z0", opts: Options{EnsureLoad: true, Saved: savedIn("/c")},
			want: []string{"python", "pretrain_gpt.py", "--save", "/c", "--load", "/c", "--finetune", "--global-batch-size", "4",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "4"},
		},
		"load not added unless asked": {
			argv: []string{"python", "pretrain_gpt.py", "--save=/c", "--global-batch-size", "4", "--micro-batch-size", "4",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1"},
			plan: "dp1.tp1.pp1.mb4.a1.z0",
			want: []string{"python", "pretrain_gpt.py", "--save=/c", "--global-batch-size", "4", "--micro-batch-size", "4",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1"},
		},
		"emulated trainer without script": {
			argv: []string{"/usr/bin/rubick-emu-trainer", "--train-iters", "5", "--global-batch-size", "8", "--save", "/c"},
			plan: "dp2.tp1.pp1.mb2.a2.z1", opts: Options{EnsureLoad: true},
			want: []string{"/usr/bin/rubick-emu-trainer", "--train-iters", "5", "--global-batch-size", "8", "--save", "/c",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "2",
				"--use-distributed-optimizer", "--load", "/c"},
		},
		"python -m torch.distributed.run": {
			argv: []string{"python3", "-m", "torch.distributed.run", "--nproc-per-node=2", "pretrain_gpt.py", "--global-batch-size", "8"},
			plan: "dp4.tp1.pp1.mb2.a1.z0", opts: Options{Nodes: 1, GPUsPerNode: 4},
			want: []string{"python3", "-m", "torch.distributed.run", "--nproc-per-node=4", "--nnodes", "1", "pretrain_gpt.py",
				"--global-batch-size", "8", "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "2"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			res, err := Rewrite(c.argv, mustPlan(t, c.plan), c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, res.Argv); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
}

// A plain DeepSpeed line's config copy sets steps_per_print where the
// user's sets none, since DeepSpeed 0.15.3 prints no step lines by
// default and the job would report no sample; a value of the user's, null
// (off) included, stays, and lines timed otherwise get none.
func TestRewriteStepsPerPrint(t *testing.T) {
	files := map[string][]byte{
		"none.json": []byte(`{"train_batch_size": 8}`),
		"own.json":  []byte(`{"train_batch_size": 8, "steps_per_print": 100}`),
		"off.json":  []byte(`{"train_batch_size": 8, "steps_per_print": null}`),
		"hf.json":   []byte(`{"train_batch_size": "auto"}`),
	}
	cases := map[string]struct {
		line string
		plan string
		want string // steps_per_print in the copy, "-" for none
	}{
		"plain DeepSpeed, none set":   {line: "deepspeed train.py --deepspeed_config none.json", plan: "dp2.tp1.pp1.mb4.a1.z0", want: "10"},
		"plain DeepSpeed, inline":     {line: "python train.py --deepspeed --deepspeed-config=none.json", plan: "dp2.tp1.pp1.mb2.a2.z1", want: "10"},
		"plain DeepSpeed, the user's": {line: "deepspeed train.py --deepspeed_config own.json", plan: "dp2.tp1.pp1.mb4.a1.z0", want: "100"},
		"plain DeepSpeed, off":        {line: "deepspeed train.py --deepspeed_config off.json", plan: "dp2.tp1.pp1.mb4.a1.z0", want: "null"},
		// Its Accelerator sets steps_per_print itself.
		"Hugging Face Trainer": {line: "python train.py --deepspeed hf.json", plan: "dp2.tp1.pp1.mb4.a1.z0", want: "-"},
		"accelerate's config file": {line: "accelerate launch --use_deepspeed --deepspeed_config_file none.json train.py",
			plan: "dp2.tp1.pp1.mb4.a1.z0", want: "-"},
		// Timed by Megatron's lines.
		"Megatron-DeepSpeed": {line: "python pretrain_gpt.py --micro-batch-size 4 --deepspeed --deepspeed_config none.json",
			plan: "dp2.tp1.pp1.mb4.a1.z0", want: "-"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			res, err := Rewrite(strings.Fields(c.line), mustPlan(t, c.plan), Options{ConfigDir: "/job", ReadFile: mapReader(files)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Config == nil {
				t.Fatal("no config copy")
			}
			got := configValues(t, res.Config.Data, "steps_per_print")["steps_per_print"]
			if got != c.want {
				t.Errorf("steps_per_print = %s, want %s\n%s", got, c.want, res.Config.Data)
			}
		})
	}
}

func TestRewriteLeavesInputAlone(t *testing.T) {
	argv := append([]string(nil), megatronLine...)
	if _, err := Rewrite(argv, mustPlan(t, familyPlans[model.Family3D]), Options{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(megatronLine, argv); diff != "" {
		t.Errorf("Rewrite changed its input (-want +got):\n%s", diff)
	}
}

func TestDetect(t *testing.T) {
	cases := map[string]struct {
		argv     []string
		want     Dialect
		launcher string
	}{
		"megatron by script":       {[]string{"python", "pretrain_bert.py"}, Megatron, LauncherNone},
		"megatron by flag":         {[]string{"python", "main.py", "--tensor-model-parallel-size", "2"}, Megatron, LauncherNone},
		"megatron-deepspeed":       {megatronDSLine, MegatronDeepSpeed, LauncherDeepSpeed},
		"megatron + zero-stage":    {[]string{"python", "pretrain_gpt.py", "--zero-stage=1"}, MegatronDeepSpeed, LauncherNone},
		"deepspeed launcher":       {[]string{"deepspeed", "train.py"}, DeepSpeed, LauncherDeepSpeed},
		"deepspeed config":         {[]string{"python", "train.py", "--deepspeed_config", "ds.json"}, DeepSpeed, LauncherNone},
		"torchrun megatron":        {torchrunLine, Megatron, LauncherTorchrun},
		"launcher flag not signal": {[]string{"torchrun", "--micro-batch-size", "2", "train.py"}, "", LauncherTorchrun},
		"module program":           {[]string{"python", "-m", "megatron.train", "--micro-batch-size", "2"}, Megatron, LauncherNone},
		"megatron module by name":  {[]string{"python", "-m", "megatron.pretrain_gpt"}, Megatron, LauncherNone},
		"megatron by its model": {[]string{"deepspeed", "gpt.py", "--deepspeed", "--num-layers", "24", "--hidden-size", "1024", "--num-attention-heads", "16"},
			MegatronDeepSpeed, LauncherDeepSpeed},
		// Before, a flag name Megatron shares made these Megatron-DeepSpeed,
		// and they got Megatron's flags.
		"deepspeed with --train-iters": {[]string{"deepspeed", "train.py", "--deepspeed", "--deepspeed_config", "ds.json", "--train-iters", "1000"},
			DeepSpeed, LauncherDeepSpeed},
		"trainer with --seq-length": {[]string{"python", "train.py", "--deepspeed", "ds.json", "--seq-length", "1024", "--num-layers", "12"},
			DeepSpeed, LauncherNone},
		"torchrun megatron module":  {[]string{"torchrun", "--nproc_per_node", "8", "-m", "megatron.pretrain_gpt", "--lr", "1"}, Megatron, LauncherTorchrun},
		"deepspeed launcher module": {[]string{"deepspeed", "--num_gpus", "8", "--module", "pkg.train", "--lr", "1"}, DeepSpeed, LauncherDeepSpeed},
		"accelerate deepspeed plugin": {[]string{"accelerate", "launch", "--use_deepspeed", "--zero_stage", "2", "train.py", "--lr", "1"},
			DeepSpeed, LauncherAccelerate},
		"accelerate without the plugin": {[]string{"accelerate", "launch", "--zero_stage", "2", "train.py"}, "", LauncherAccelerate},
		"accelerate plugin, megatron":   {[]string{"accelerate", "launch", "--use_deepspeed", "pretrain_gpt.py"}, Megatron, LauncherAccelerate},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Detect(c.argv)
			if c.want == "" {
				if !errors.Is(err, ErrUnknownDialect) {
					t.Fatalf("Detect = %q, %v; want ErrUnknownDialect", got, err)
				}
			} else if err != nil || got != c.want {
				t.Fatalf("Detect = %q, %v; want %q", got, err, c.want)
			}
			if l := DetectLauncher(c.argv); l != c.launcher {
				t.Errorf("DetectLauncher = %q, want %q", l, c.launcher)
			}
		})
	}
}

// Cannot names exactly what Rewrite refuses with ErrUnsupported.
func TestCannot(t *testing.T) {
	noConfig := []string{"python", "pretrain_gpt.py", "--deepspeed", "--global-batch-size", "32"}
	tests := map[string]struct {
		argv    []string
		cannot  model.Features
		dialect Dialect
		err     error
	}{
		"megatron":                 {argv: megatronLine, dialect: Megatron},
		"megatron-deepspeed":       {argv: megatronDSLine, dialect: MegatronDeepSpeed},
		"megatron-deepspeed plain": {argv: noConfig, cannot: model.FeatureOffload, dialect: MegatronDeepSpeed},
		"deepspeed":                {argv: deepspeedLine, cannot: model.FeatureTP | model.FeaturePP, dialect: DeepSpeed},
		"hugging face":             {argv: hfLine, cannot: model.FeatureTP | model.FeaturePP, dialect: DeepSpeed},
		"context parallel 1":       {argv: append(slices.Clone(megatronLine), "--context-parallel-size", "1"), dialect: Megatron},
		"context parallel 2":       {argv: append(slices.Clone(megatronLine), "--context-parallel-size=2"), dialect: Megatron, err: ErrBadInput},
		"ulysses 4":                {argv: append(slices.Clone(megatronDSLine), "--ds-sequence-parallel-size=4"), dialect: MegatronDeepSpeed, err: ErrBadInput},
		"context parallel bad":     {argv: append(slices.Clone(megatronDSLine), "--context-parallel-size", "x"), dialect: MegatronDeepSpeed, err: ErrBadInput},
		"unknown":                  {argv: []string{"bash", "train.sh"}, err: ErrUnknownDialect},
		"empty":                    {argv: nil, err: ErrBadInput},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cannot, d, err := Cannot(tc.argv, Options{})
			if !errors.Is(err, tc.err) || cannot != tc.cannot || d != tc.dialect {
				t.Fatalf("Cannot = %v, %q, %v; want %v, %q, %v", cannot, d, err, tc.cannot, tc.dialect, tc.err)
			}
			if err != nil {
				return
			}
			for _, fam := range model.Families {
				plan, err := model.ParsePlan(familyPlans[fam])
				if err != nil {
					t.Fatal(err)
				}
				_, err = Rewrite(tc.argv, plan, Options{ConfigDir: t.TempDir()})
				if refused := errors.Is(err, ErrUnsupported); refused == cannot.Allows(plan) {
					t.Errorf("%s: Rewrite = %v, but Cannot says %q", plan, err, cannot)
				}
			}
		})
	}
}

// GlobalBatch reads the batch a line states, whatever the plan: rubick-srun
// tells rubickd when it is not the model type's.
func TestGlobalBatch(t *testing.T) {
	files := mapReader(map[string][]byte{"ds.json": []byte(`{"train_batch_size": 48}`), "none.json": []byte(`{}`)})
	for name, tc := range map[string]struct {
		argv    []string
		opts    Options
		want    int
		wantErr error
	}{
		"megatron":         {argv: []string{"python", "pretrain_gpt.py", "--global-batch-size", "64"}, want: 64},
		"megatron =":       {argv: []string{"torchrun", "pretrain_gpt.py", "--global-batch-size=96"}, want: 96},
		"none stated":      {argv: []string{"python", "pretrain_gpt.py", "--micro-batch-size", "4"}},
		"deepspeed config": {argv: []string{"deepspeed", "train.py", "--deepspeed_config", "ds.json"}, want: 48},
		"config without":   {argv: []string{"deepspeed", "train.py", "--deepspeed_config", "none.json"}},
		"the job's":        {argv: []string{"python", "pretrain_gpt.py"}, opts: Options{GlobalBatch: 8}, want: 8},
		"disagree":         {argv: []string{"python", "pretrain_gpt.py", "--global-batch-size", "64"}, opts: Options{GlobalBatch: 8}, wantErr: ErrBadInput},
		"not a number":     {argv: []string{"python", "pretrain_gpt.py", "--global-batch-size", "x"}, wantErr: ErrBadInput},
		"empty":            {wantErr: ErrBadInput},
	} {
		t.Run(name, func(t *testing.T) {
			tc.opts.ReadFile = files
			got, err := GlobalBatch(tc.argv, tc.opts)
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Errorf("GlobalBatch = %d, %v; want %d, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// Flags whose validity depends on what the plan rewrites: Megatron asserts
// on them when the sizes or switches they need are gone, or DeepSpeed
// refuses the optimizer they pick.
func TestRewriteDependentFlags(t *testing.T) {
	ds := Options{ConfigDir: "/job"}
	cases := map[string]struct {
		line string
		plan string
		opts Options
		want string
	}{
		"megatron offload adds the precision-aware optimizer": {
			line: "python pretrain_gpt.py --global-batch-size 8",
			plan: "dp2.tp1.pp1.mb4.a1.z1+off",
			want: "python pretrain_gpt.py --global-batch-size 8 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 " +
				"--micro-batch-size 4 --use-distributed-optimizer --optimizer-cpu-offload --use-precision-aware-optimizer",
		},
		"megatron offload keeps the line's precision-aware optimizer": {
			line: "python pretrain_gpt.py --use-precision-aware-optimizer --global-batch-size 8",
			plan: "dp2.tp1.pp1.mb4.a1.z1+off",
			want: "python pretrain_gpt.py --use-precision-aware-optimizer --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 1 --micro-batch-size 4 --use-distributed-optimizer --optimizer-cpu-offload",
		},
		"megatron without offload drops the precision-aware optimizer that served it": {
			line: "python pretrain_gpt.py --use-distributed-optimizer --optimizer-cpu-offload --use-precision-aware-optimizer " +
				"--global-batch-size 8",
			plan: "dp2.tp1.pp1.mb4.a1.z1",
			want: "python pretrain_gpt.py --use-distributed-optimizer --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 1 --micro-batch-size 4",
		},
		"megatron without offload keeps a precision-aware optimizer with its dtypes": {
			line: "python pretrain_gpt.py --use-distributed-optimizer --optimizer-cpu-offload --use-precision-aware-optimizer " +
				"--exp-avg-dtype=bf16 --global-batch-size 8",
			plan: "dp2.tp1.pp1.mb4.a1.z2",
			want: "python pretrain_gpt.py --use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype=bf16 " +
				"--global-batch-size 8 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 4",
		},
		"megatron without offload keeps the user's own precision-aware optimizer": {
			line: "python pretrain_gpt.py --use-distributed-optimizer --use-precision-aware-optimizer --global-batch-size 8",
			plan: "dp2.tp1.pp1.mb4.a1.z1",
			want: "python pretrain_gpt.py --use-distributed-optimizer --use-precision-aware-optimizer --global-batch-size 8 " +
				"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 4",
		},
		"megatron zero 0 drops what needs the distributed optimizer": {
			line: "python pretrain_gpt.py --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather " +
				"--overlap-param-gather-with-optimizer-step --use-precision-aware-optimizer --main-grads-dtype bf16 " +
				"--main-params-dtype=fp16 --exp-avg-dtype fp8 --exp-avg-sq-dtype=fp8 --global-batch-size 8",
			plan: "dp2.tp1.pp1.mb4.a1.z0",
			want: "python pretrain_gpt.py --overlap-grad-reduce --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 1 --micro-batch-size 4",
		},
		"megatron zero 1 keeps param gather overlap": {
			line: "python pretrain_gpt.py --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --global-batch-size 8",
			plan: "dp2.tp1.pp1.mb4.a1.z1",
			want: "python pretrain_gpt.py --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --global-batch-size 8 " +
				"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 4",
		},
		"megatron-deepspeed offload picks DeepSpeed's CPU Adam": {
			line: "python pretrain_gpt.py --deepspeed --deepspeed_config testdata/ds_zero2.json --zero-stage 2",
			plan: "dp4.tp1.pp1.mb4.a2.z2+off", opts: ds,
			want: "python pretrain_gpt.py --deepspeed --deepspeed_config /job/rubick-ds_zero2.json --zero-stage 2 " +
				"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 4 --global-batch-size 32 --cpu-optimizer " +
				"--no-pipeline-parallel",
		},
		"megatron-deepspeed without offload drops CPU Adam": {
			line: "python pretrain_gpt.py --deepspeed --deepspeed_config testdata/ds_zero2.json --cpu-optimizer --zero-stage 2",
			plan: "dp8.tp1.pp1.mb4.a1.z2", opts: ds,
			want: "python pretrain_gpt.py --deepspeed --deepspeed_config /job/rubick-ds_zero2.json --zero-stage 2 " +
				"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 4 --global-batch-size 32 " +
				"--no-pipeline-parallel",
		},
		"interleaving dropped without pipeline parallelism": {
			line: "python pretrain_gpt.py --num-layers 24 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2 " +
				"--num-virtual-stages-per-pipeline-rank=3 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather " +
				"--overlap-param-gather-with-optimizer-step --global-batch-size 8",
			plan: "dp2.tp1.pp1.mb4.a1.z1",
			want: "python pretrain_gpt.py --num-layers 24 --pipeline-model-parallel-size 1 --use-distributed-optimizer " +
				"--overlap-grad-reduce --overlap-param-gather --global-batch-size 8 --tensor-model-parallel-size 1 --micro-batch-size 4",
		},
		"interleaving kept when the stage's layers divide": {
			line: "python pretrain_gpt.py --num-layers=24 --num-layers-per-virtual-pipeline-stage=3 --global-batch-size 8",
			plan: "dp1.tp1.pp4.mb2.a4.z0",
			want: "python pretrain_gpt.py --num-layers=24 --num-layers-per-virtual-pipeline-stage=3 --global-batch-size 8 " +
				"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 --micro-batch-size 2",
		},
		"interleaving dropped when the stage's layers do not divide": {
			line: "python pretrain_gpt.py --num-layers 24 --num-layers-per-virtual-pipeline-stage=4 --global-batch-size 8",
			plan: "dp1.tp1.pp4.mb2.a4.z0",
			want: "python pretrain_gpt.py --num-layers 24 --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 4 --micro-batch-size 2",
		},
		"interleaving dropped when the layers do not split over the stages": {
			line: "python pretrain_gpt.py --num-layers 30 --num-layers-per-virtual-pipeline-stage 3 --global-batch-size 8",
			plan: "dp1.tp1.pp4.mb2.a4.z0",
			want: "python pretrain_gpt.py --num-layers 30 --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 4 --micro-batch-size 2",
		},
		"interleaving counts the embedding and loss stages": {
			line: "python pretrain_gpt.py --num-layers 22 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split " +
				"--num-layers-per-virtual-pipeline-stage 3 --global-batch-size 8",
			plan: "dp1.tp1.pp4.mb2.a4.z0",
			want: "python pretrain_gpt.py --num-layers 22 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split " +
				"--num-layers-per-virtual-pipeline-stage 3 --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 4 --micro-batch-size 2",
		},
		"interleaving on two stages kept": {
			line: "python pretrain_gpt.py --num-virtual-stages-per-pipeline-rank 2 --global-batch-size 8",
			plan: "dp2.tp1.pp2.mb2.a2.z0",
			want: "python pretrain_gpt.py --num-virtual-stages-per-pipeline-rank 2 --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 2 --micro-batch-size 2",
		},
		"interleaving dropped when the micro-batches do not fill the stages": {
			line: "python pretrain_gpt.py --num-virtual-stages-per-pipeline-rank 2 --global-batch-size 8",
			plan: "dp2.tp1.pp2.mb4.a1.z0",
			want: "python pretrain_gpt.py --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 2 --micro-batch-size 4",
		},
		"interleaving dropped when the micro-batches are no multiple of the stages": {
			line: "python pretrain_gpt.py --num-virtual-stages-per-pipeline-rank 2 --global-batch-size 6",
			plan: "dp1.tp1.pp2.mb2.a3.z0",
			want: "python pretrain_gpt.py --global-batch-size 6 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 2 --micro-batch-size 2",
		},
		"interleaving on two stages dropped without p2p overlap": {
			line: "python pretrain_gpt.py --num-virtual-stages-per-pipeline-rank 2 --no-overlap-p2p-communication --global-batch-size 8",
			plan: "dp2.tp1.pp2.mb2.a2.z0",
			want: "python pretrain_gpt.py --no-overlap-p2p-communication --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 2 --micro-batch-size 2",
		},
		"megatron-deepspeed interleaving dropped on two stages": {
			line: "python pretrain_gpt.py --deepspeed --num-layers 24 --num-layers-per-virtual-pipeline-stage 2 --global-batch-size 8",
			plan: "dp2.tp1.pp2.mb2.a2.z0",
			want: "python pretrain_gpt.py --deepspeed --num-layers 24 --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 2 --micro-batch-size 2 --zero-stage 0",
		},
		"megatron-deepspeed interleaving kept on three stages": {
			line: "python pretrain_gpt.py --deepspeed --num-layers 24 --num-layers-per-virtual-pipeline-stage 2 --global-batch-size 6",
			plan: "dp2.tp1.pp3.mb1.a3.z0",
			want: "python pretrain_gpt.py --deepspeed --num-layers 24 --num-layers-per-virtual-pipeline-stage 2 --global-batch-size 6 " +
				"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 3 --micro-batch-size 1 --zero-stage 0",
		},
		"no-pipeline-parallel dropped with pipeline parallelism": {
			line: "python pretrain_gpt.py --deepspeed --no-pipeline-parallel --global-batch-size 8",
			plan: "dp2.tp1.pp2.mb4.a1.z0",
			want: "python pretrain_gpt.py --deepspeed --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 2 --micro-batch-size 4 --zero-stage 0",
		},
		"no-pipeline-parallel kept without": {
			line: "python pretrain_gpt.py --deepspeed --no-pipeline-parallel --global-batch-size 8",
			plan: "dp2.tp2.pp1.mb4.a1.z0",
			want: "python pretrain_gpt.py --deepspeed --no-pipeline-parallel --global-batch-size 8 --tensor-model-parallel-size 2 " +
				"--pipeline-model-parallel-size 1 --micro-batch-size 4 --zero-stage 0",
		},
		"megatron-deepspeed ZeRO-2 leaves the pipeline engine": {
			line: "python pretrain_gpt.py --deepspeed --zero-stage=1 --pipeline-model-parallel-size 2 --global-batch-size 8",
			plan: "dp4.tp1.pp1.mb2.a1.z2",
			want: "python pretrain_gpt.py --deepspeed --zero-stage=2 --pipeline-model-parallel-size 1 --global-batch-size 8 " +
				"--tensor-model-parallel-size 1 --micro-batch-size 2 --no-pipeline-parallel",
		},
		"megatron-deepspeed ZeRO-3 keeps its one --no-pipeline-parallel": {
			line: "python pretrain_gpt.py --deepspeed --no-pipeline-parallel --global-batch-size 8",
			plan: "dp4.tp1.pp1.mb2.a1.z3",
			want: "python pretrain_gpt.py --deepspeed --no-pipeline-parallel --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 1 --micro-batch-size 2 --zero-stage 3",
		},
		"megatron-deepspeed ZeRO-1 keeps the pipeline engine": {
			line: "python pretrain_gpt.py --deepspeed --zero-stage 2 --global-batch-size 8",
			plan: "dp4.tp1.pp1.mb2.a1.z1",
			want: "python pretrain_gpt.py --deepspeed --zero-stage 1 --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 1 --micro-batch-size 2",
		},
		"TP communication overlap needs tensor parallelism": {
			line: "python pretrain_gpt.py --tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap --global-batch-size 8",
			plan: "dp2.tp1.pp1.mb4.a1.z0",
			want: "python pretrain_gpt.py --tensor-model-parallel-size 1 --sequence-parallel --global-batch-size 8 " +
				"--pipeline-model-parallel-size 1 --micro-batch-size 4",
		},
		"TP communication overlap kept with tensor parallelism": {
			line: "python pretrain_gpt.py --sequence-parallel --tp-comm-overlap --global-batch-size 8",
			plan: "dp1.tp2.pp1.mb4.a2.z0",
			want: "python pretrain_gpt.py --sequence-parallel --tp-comm-overlap --global-batch-size 8 --tensor-model-parallel-size 2 " +
				"--pipeline-model-parallel-size 1 --micro-batch-size 4",
		},
		"distributed saved activations need tensor parallelism": {
			line: "python pretrain_gpt.py --tensor-model-parallel-size 2 --distribute-saved-activations --global-batch-size 8",
			plan: "dp2.tp1.pp1.mb4.a1.z0+gc",
			want: "python pretrain_gpt.py --tensor-model-parallel-size 1 --global-batch-size 8 --pipeline-model-parallel-size 1 " +
				"--micro-batch-size 4 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
		},
		"distributed saved activations need recompute": {
			line: "python pretrain_gpt.py --recompute-granularity full --recompute-method uniform --distribute-saved-activations " +
				"--global-batch-size 8",
			plan: "dp1.tp2.pp1.mb4.a2.z0",
			want: "python pretrain_gpt.py --global-batch-size 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 " +
				"--micro-batch-size 4",
		},
		"distributed saved activations kept with both": {
			line: "python pretrain_gpt.py --distribute-saved-activations --global-batch-size 8",
			plan: "dp1.tp2.pp1.mb4.a2.z0+gc",
			want: "python pretrain_gpt.py --distribute-saved-activations --global-batch-size 8 --tensor-model-parallel-size 2 " +
				"--pipeline-model-parallel-size 1 --micro-batch-size 4 --recompute-granularity full --recompute-method uniform " +
				"--recompute-num-layers 1",
		},
		"megatron-deepspeed distributed activations need checkpointing": {
			line: "python pretrain_gpt.py --deepspeed --checkpoint-activations --distribute-checkpointed-activations " +
				"--distribute-saved-activations --global-batch-size 8",
			plan: "dp1.tp2.pp1.mb4.a2.z0",
			want: "python pretrain_gpt.py --deepspeed --global-batch-size 8 --tensor-model-parallel-size 2 " +
				"--pipeline-model-parallel-size 1 --micro-batch-size 4 --zero-stage 0",
		},
		"context parallelism of 1 passes": {
			line: "python pretrain_gpt.py --context-parallel-size=1 --global-batch-size 8",
			plan: "dp2.tp1.pp1.mb4.a1.z0",
			want: "python pretrain_gpt.py --context-parallel-size=1 --global-batch-size 8 --tensor-model-parallel-size 1 " +
				"--pipeline-model-parallel-size 1 --micro-batch-size 4",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			res, err := Rewrite(strings.Fields(c.line), mustPlan(t, c.plan), c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(strings.Fields(c.want), res.Argv); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
}
