package launch

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

// DeepSpeed configs of Hugging Face Trainer lines: HF's recommended one,
// whose batch and optimizer keys are "auto" for the Trainer to fill from
// its TrainingArguments, and one with concrete values, which HF checks
// against them.
var hfConfigs = map[string][]byte{
	"auto.json": []byte(`{
  "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
  "bf16": {"enabled": "auto"},
  "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"}},
  "zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": "auto", "contiguous_gradients": true},
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": "auto",
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto"
}`),
	"fixed.json": []byte(`{
  "train_batch_size": 32,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 1,
  "zero_optimization": {"stage": 2},
  "activation_checkpointing": {"partition_activations": true}
}`),
	"stage-auto.json": []byte(`{"train_batch_size": "auto", "zero_optimization": {"stage": "auto", "offload_optimizer": "auto"}}`),
	"offload.json": []byte(`{"train_batch_size": "auto", "zero_optimization": {"stage": 3, ` +
		`"offload_optimizer": {"device": "cpu", "pin_memory": true}, "offload_param": {"device": "cpu"}}}`),
}

// configValues reads the dotted keys of a JSON config: each value compact,
// "-" when absent.
func configValues(t *testing.T, data []byte, keys ...string) map[string]string {
	t.Helper()
	var root map[string]json.RawMessage
	if err := json.Unmarshal(data, &root); err != nil {
		t.Fatalf("config is not a JSON object: %v\n%s", err, data)
	}
	out := map[string]string{}
	for _, k := range keys {
		obj, v := root, "-"
		parts := strings.Split(k, ".")
		for i, p := range parts {
			raw, ok := obj[p]
			if !ok {
				break
			}
			if i == len(parts)-1 {
				var b bytes.Buffer
				if err := json.Compact(&b, raw); err != nil {
					t.Fatal(err)
				}
				v = b.String()
				break
			}
			obj = nil
			if json.Unmarshal(raw, &obj) != nil {
				break
			}
		}
		out[k] = v
	}
	return out
}

var hfKeys = []string{"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
	"zero_optimization.stage", "zero_optimization.offload_optimizer", "zero_optimization.offload_param",
	"zero_optimization.reduce_bucket_size", "optimizer.params.lr", "activation_checkpointing"}

// A Hugging Face Trainer line takes the plan's micro-batch, accumulation
// and checkpointing as TrainingArguments flags; its DeepSpeed config keeps
// its "auto" keys for the Trainer to fill and gets the plan where it
// states values, so that the two agree as HF requires.
func TestRewriteHF(t *testing.T) {
	cases := map[string]struct {
		line   string
		plan   string
		opts   Options
		want   string
		config map[string]string // hfKeys that are not "-"
	}{
		// The training run reports to the job's trackers, unlike a
		// profiling run.
		"auto config: flags rewritten, auto kept": {
			line: "python train.py --model_name_or_path gpt2 --per_device_train_batch_size 4 --gradient_accumulation_steps 1 " +
				"--deepspeed auto.json --output_dir out --bf16 --report_to wandb tensorboard",
			plan: "dp8.tp1.pp1.mb2.a2.z2",
			want: "python train.py --model_name_or_path gpt2 --per_device_train_batch_size 2 --gradient_accumulation_steps 2 " +
				"--deepspeed /job/rubick-auto.json --output_dir out --bf16 --report_to wandb tensorboard",
			config: map[string]string{"train_batch_size": `"auto"`, "train_micro_batch_size_per_gpu": `"auto"`,
				"gradient_accumulation_steps": `"auto"`, "zero_optimization.stage": "2",
				"zero_optimization.reduce_bucket_size": `"auto"`, "optimizer.params.lr": `"auto"`},
		},
		"auto config: absent flags added, offload and checkpointing": {
			line: "torchrun --nproc_per_node 8 train.py --deepspeed auto.json --output_dir out",
			plan: "dp8.tp1.pp1.mb4.a1.z3+off+gc", opts: Options{Nodes: 1, GPUsPerNode: 8},
			want: "torchrun --nproc_per_node 8 --nnodes 1 train.py --deepspeed /job/rubick-auto.json --output_dir out " +
				"--per_device_train_batch_size 4 --gradient_accumulation_steps 1 --gradient_checkpointing",
			config: map[string]string{"train_batch_size": `"auto"`, "train_micro_batch_size_per_gpu": `"auto"`,
				"gradient_accumulation_steps": `"auto"`, "zero_optimization.stage": "3",
				"zero_optimization.offload_optimizer":  `{"device":"cpu","pin_memory":true}`,
				"zero_optimization.reduce_bucket_size": `"auto"`, "optimizer.params.lr": `"auto"`},
		},
		"concrete config: values and flags both take the plan": {
			line: "python train.py --deepspeed fixed.json --per_device_train_batch_size 4 --gradient_accumulation_steps 1 --output_dir out",
			plan: "dp4.tp1.pp1.mb4.a2.z1+off",
			want: "python train.py --deepspeed /job/rubick-fixed.json --per_device_train_batch_size 4 --gradient_accumulation_steps 2 --output_dir out",
			// HF checks gradient checkpointing by its flag, not by this
			// section, which stays the user's.
			config: map[string]string{"train_batch_size": "32", "train_micro_batch_size_per_gpu": "4",
				"gradient_accumulation_steps": "2", "zero_optimization.stage": "1",
				"zero_optimization.offload_optimizer": `{"device":"cpu","pin_memory":true}`,
				"activation_checkpointing":            `{"partition_activations":true}`},
		},
		"inline --deepspeed= and dash spellings keep their form": {
			line: "python train.py --deepspeed=auto.json --per-device-train-batch-size=8 --gradient-accumulation-steps 1 " +
				"--gradient-checkpointing --output-dir out",
			plan: "dp8.tp1.pp1.mb1.a4.z2",
			want: "python train.py --deepspeed=/job/rubick-auto.json --per-device-train-batch-size=1 --gradient-accumulation-steps 4 " +
				"--output-dir out",
			config: map[string]string{"train_batch_size": `"auto"`, "train_micro_batch_size_per_gpu": `"auto"`,
				"gradient_accumulation_steps": `"auto"`, "zero_optimization.stage": "2",
				"zero_optimization.reduce_bucket_size": `"auto"`, "optimizer.params.lr": `"auto"`},
		},
		"the Trainer's batch search dropped": {
			line: "python train.py --auto_find_batch_size --deepspeed auto.json --auto-find-batch-size True --output_dir out --auto_find_batch_size=yes",
			plan: "dp8.tp1.pp1.mb2.a2.z2",
			want: "python train.py --deepspeed /job/rubick-auto.json --output_dir out --per_device_train_batch_size 2 --gradient_accumulation_steps 2",
			config: map[string]string{"train_batch_size": `"auto"`, "train_micro_batch_size_per_gpu": `"auto"`,
				"gradient_accumulation_steps": `"auto"`, "zero_optimization.stage": "2",
				"zero_optimization.reduce_bucket_size": `"auto"`, "optimizer.params.lr": `"auto"`},
		},
		"both spellings: the first kept, later ones dropped": {
			line: "python train.py --per_device_train_batch_size 4 --deepspeed auto.json --per-device-train-batch-size 8 " +
				"--gradient_accumulation_steps=2 --gradient-accumulation-steps=3",
			plan: "dp2.tp1.pp1.mb2.a8.z0",
			want: "python train.py --per_device_train_batch_size 2 --deepspeed /job/rubick-auto.json --gradient_accumulation_steps=8",
			config: map[string]string{"train_batch_size": `"auto"`, "train_micro_batch_size_per_gpu": `"auto"`,
				"gradient_accumulation_steps": `"auto"`, "zero_optimization.stage": "0",
				"zero_optimization.reduce_bucket_size": `"auto"`, "optimizer.params.lr": `"auto"`},
		},
		// HF lets the deprecated flag override the dataloader's batch, but
		// fills the config from --per_device_train_batch_size.
		"deprecated per-GPU batch removed": {
			line: "python train.py --deepspeed auto.json --per_gpu_train_batch_size 4 --per-gpu-train-batch-size=2",
			plan: "dp2.tp1.pp1.mb8.a1.z2",
			want: "python train.py --deepspeed /job/rubick-auto.json --per_device_train_batch_size 8 --gradient_accumulation_steps 1",
			config: map[string]string{"train_batch_size": `"auto"`, "train_micro_batch_size_per_gpu": `"auto"`,
				"gradient_accumulation_steps": `"auto"`, "zero_optimization.stage": "2",
				"zero_optimization.reduce_bucket_size": `"auto"`, "optimizer.params.lr": `"auto"`},
		},
		"checkpointing given a value keeps the value form": {
			line: "python train.py --deepspeed auto.json --gradient_checkpointing False --gradient_checkpointing_kwargs {} --bf16 true",
			plan: "dp1.tp1.pp1.mb4.a8.z2+gc",
			want: "python train.py --deepspeed /job/rubick-auto.json --gradient_checkpointing true --gradient_checkpointing_kwargs {} " +
				"--bf16 true --per_device_train_batch_size 4 --gradient_accumulation_steps 8",
			config: map[string]string{"train_batch_size": `"auto"`, "train_micro_batch_size_per_gpu": `"auto"`,
				"gradient_accumulation_steps": `"auto"`, "zero_optimization.stage": "2",
				"zero_optimization.reduce_bucket_size": `"auto"`, "optimizer.params.lr": `"auto"`},
		},
		"checkpointing off removes every spelling": {
			line: "python train.py --deepspeed auto.json --gradient_checkpointing=True --gradient-checkpointing",
			plan: "dp1.tp1.pp1.mb4.a8.z2",
			want: "python train.py --deepspeed /job/rubick-auto.json --per_device_train_batch_size 4 --gradient_accumulation_steps 8",
			config: map[string]string{"train_batch_size": `"auto"`, "train_micro_batch_size_per_gpu": `"auto"`,
				"gradient_accumulation_steps": `"auto"`, "zero_optimization.stage": "2",
				"zero_optimization.reduce_bucket_size": `"auto"`, "optimizer.params.lr": `"auto"`},
		},
		"stage and offload set even when auto": {
			line: "python train.py --deepspeed stage-auto.json",
			plan: "dp2.tp1.pp1.mb4.a1.z2+off",
			want: "python train.py --deepspeed /job/rubick-stage-auto.json --per_device_train_batch_size 4 --gradient_accumulation_steps 1",
			// Absent sizes are written: the Trainer fills only keys that
			// are present, and DeepSpeed needs a micro-batch or a batch.
			config: map[string]string{"train_batch_size": `"auto"`, "train_micro_batch_size_per_gpu": "4",
				"gradient_accumulation_steps": "1", "zero_optimization.stage": "2",
				"zero_optimization.offload_optimizer": `{"device":"cpu","pin_memory":true}`},
		},
		"offload removed, parameter offload only at stage 3": {
			line: "python train.py --deepspeed offload.json",
			plan: "dp2.tp1.pp1.mb4.a1.z2",
			want: "python train.py --deepspeed /job/rubick-offload.json --per_device_train_batch_size 4 --gradient_accumulation_steps 1",
			config: map[string]string{"train_batch_size": `"auto"`, "train_micro_batch_size_per_gpu": "4",
				"gradient_accumulation_steps": "1", "zero_optimization.stage": "2"},
		},
		// A plain DeepSpeed script has no Trainer to fill "auto": it gets
		// the plan's values, and no HF flags.
		"plain DeepSpeed line: auto replaced": {
			line: "deepspeed train.py --deepspeed_config auto.json",
			plan: "dp2.tp1.pp1.mb4.a1.z2",
			want: "deepspeed train.py --deepspeed_config /job/rubick-auto.json",
			config: map[string]string{"train_batch_size": "8", "train_micro_batch_size_per_gpu": "4",
				"gradient_accumulation_steps": "1", "zero_optimization.stage": "2",
				"zero_optimization.reduce_bucket_size": `"auto"`, "optimizer.params.lr": `"auto"`},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			plan := mustPlan(t, c.plan)
			opts := c.opts
			opts.ConfigDir, opts.ReadFile = "/job", mapReader(hfConfigs)
			res, err := Rewrite(strings.Fields(c.line), plan, opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(strings.Fields(c.want), res.Argv); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
			if res.Dialect != DeepSpeed || res.Config == nil || res.GlobalBatch != plan.GPUs()*plan.MicroBatch*plan.Accum {
				t.Fatalf("dialect %q, config %v, global batch %d", res.Dialect, res.Config != nil, res.GlobalBatch)
			}
			want := map[string]string{}
			for _, k := range hfKeys {
				want[k] = "-"
				if v, ok := c.config[k]; ok {
					want[k] = v
				}
			}
			if diff := cmp.Diff(want, configValues(t, res.Config.Data, hfKeys...)); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			// The rewritten line reads back as the plan.
			got, gb, err := Inspect(res.Argv, plan.GPUs(), Options{ReadFile: mapReader(map[string][]byte{res.Config.Path: res.Config.Data})})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(plan, got); diff != "" || gb != res.GlobalBatch {
				t.Errorf("Inspect gb=%d (want %d), plan (-want +got):\n%s", gb, res.GlobalBatch, diff)
			}
		})
	}
}

func TestRewriteHFErrors(t *testing.T) {
	cases := map[string]struct {
		line    string
		plan    string
		opts    Options
		want    error
		message string
	}{
		"tensor parallelism": {
			line: "python train.py --deepspeed auto.json --per_device_train_batch_size 4", plan: "dp2.tp2.pp1.mb4.a1.z1",
			want: ErrUnsupported, message: "tensor or pipeline",
		},
		"pipeline parallelism, inline": {
			line: "python train.py --deepspeed=auto.json", plan: "dp2.tp1.pp2.mb4.a1.z0",
			want: ErrUnsupported, message: "tensor or pipeline",
		},
		"plan changes the config's global batch": {
			line: "python train.py --deepspeed=fixed.json --per_device_train_batch_size 4", plan: "dp4.tp1.pp1.mb4.a1.z2",
			want: ErrGlobalBatch, message: "train_batch_size in fixed.json=32 but plan dp4.tp1.pp1.mb4.a1.z2 gives DP*MicroBatch*Accum = 4*4*1 = 16",
		},
		"plan changes the job's global batch": {
			line: "python train.py --deepspeed auto.json", plan: "dp4.tp1.pp1.mb4.a1.z2", opts: Options{GlobalBatch: 32},
			want: ErrGlobalBatch, message: "the job's global batch=32",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			c.opts.ConfigDir, c.opts.ReadFile = "/job", mapReader(hfConfigs)
			_, err := Rewrite(strings.Fields(c.line), mustPlan(t, c.plan), c.opts)
			if !errors.Is(err, c.want) {
				t.Fatalf("Rewrite error = %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.message) {
				t.Errorf("error %q does not contain %q", err, c.message)
			}
		})
	}
}

// Inspect reads a Hugging Face line as the Trainer runs it: its flags,
// HF's defaults for those absent (8 per device, no accumulation), the
// config's ZeRO stage and offload, and the global batch the world size
// gives unless the config fixes one.
func TestInspectHF(t *testing.T) {
	cases := map[string]struct {
		line    string
		gpus    int
		want    string
		gb      int
		wantErr error
		message string
	}{
		"flags": {
			line: "python train.py --deepspeed auto.json --per_device_train_batch_size 4 --gradient_accumulation_steps 2 --gradient_checkpointing",
			gpus: 8, want: "dp8.tp1.pp1.mb4.a2.z2+gc", gb: 64,
		},
		"dash spellings, inline config, last value wins": {
			line: "python train.py --deepspeed=offload.json --per-device-train-batch-size=2 --per_device_train_batch_size 3 " +
				"--gradient-accumulation-steps 4 --gradient-checkpointing=yes --gradient_checkpointing no",
			gpus: 2, want: "dp2.tp1.pp1.mb3.a4.z3+off", gb: 24,
		},
		"HF's defaults": {
			line: "python train.py --deepspeed auto.json --output_dir out", gpus: 4, want: "dp4.tp1.pp1.mb8.a1.z2", gb: 32,
		},
		"concrete config agrees": {
			line: "python train.py --deepspeed fixed.json --per_device_train_batch_size 4 --gradient_accumulation_steps 1",
			gpus: 8, want: "dp8.tp1.pp1.mb4.a1.z2", gb: 32,
		},
		"concrete config against HF's default": {
			line: "python train.py --deepspeed fixed.json", gpus: 8, wantErr: ErrBadInput,
			message: "train_micro_batch_size_per_gpu=4 but --per_device_train_batch_size=8",
		},
		"concrete global batch against the world size": {
			line: "python train.py --deepspeed fixed.json --per_device_train_batch_size 4 --gradient_accumulation_steps 1",
			gpus: 4, wantErr: ErrBadInput, message: "train_batch_size=32 but 4 GPUs x --per_device_train_batch_size=4 x --gradient_accumulation_steps=1 = 16",
		},
		"micro-batch not a number": {
			line: "python train.py --deepspeed auto.json --per_device_train_batch_size=x", gpus: 1, wantErr: ErrBadInput,
			message: `--per_device_train_batch_size="x"`,
		},
		"checkpointing not a boolean": {
			line: "python train.py --deepspeed auto.json --gradient_checkpointing maybe", gpus: 1, wantErr: ErrBadInput,
			message: `--gradient_checkpointing="maybe"`,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, gb, err := Inspect(strings.Fields(c.line), c.gpus, Options{ReadFile: mapReader(hfConfigs)})
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("Inspect error = %v, want %v", err, c.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), c.message) {
					t.Errorf("error %q does not contain %q", err, c.message)
				}
				return
			}
			if diff := cmp.Diff(mustPlan(t, c.want), got); diff != "" || gb != c.gb {
				t.Errorf("Inspect gb=%d (want %d), plan (-want +got):\n%s", gb, c.gb, diff)
			}
		})
	}
}

// The dialect and what a Hugging Face line cannot run do not depend on how
// it spells --deepspeed.
func TestDetectHF(t *testing.T) {
	for _, line := range []string{
		"python train.py --deepspeed ds.json --output_dir out",
		"python train.py --deepspeed=ds.json --output_dir out",
		"torchrun --nproc_per_node 4 train.py --deepspeed=configs/zero3.json",
	} {
		cannot, d, err := Cannot(strings.Fields(line), Options{})
		if err != nil || d != DeepSpeed || cannot != model.FeatureTP|model.FeaturePP {
			t.Errorf("Cannot(%s) = %v, %q, %v; want tp,pp, %q", line, cannot, d, err, DeepSpeed)
		}
	}
}

func TestGlobalBatchHF(t *testing.T) {
	for name, tc := range map[string]struct {
		line string
		opts Options
		want int
	}{
		// The world size, not the line, fixes the batch "auto" stands for.
		"auto":         {line: "python train.py --deepspeed auto.json --per_device_train_batch_size 4"},
		"auto, job's":  {line: "python train.py --deepspeed auto.json", opts: Options{GlobalBatch: 16}, want: 16},
		"fixed inline": {line: "python train.py --deepspeed=fixed.json", want: 32},
		// On the GPUs the job asks for: the batch its user meant.
		"auto, 8 GPUs": {line: "python train.py --deepspeed auto.json --per_device_train_batch_size 4 --gradient_accumulation_steps 2",
			opts: Options{GPUs: 8}, want: 64},
		"HF's defaults, 2 GPUs":    {line: "python train.py --deepspeed auto.json", opts: Options{GPUs: 2}, want: 16},
		"stated wins over GPUs":    {line: "python train.py --deepspeed=fixed.json", opts: Options{GPUs: 8}, want: 32},
		"not HF: GPUs say nothing": {line: "deepspeed train.py --deepspeed_config auto.json", opts: Options{GPUs: 8}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.opts.ReadFile = mapReader(hfConfigs)
			got, err := GlobalBatch(strings.Fields(tc.line), tc.opts)
			if err != nil || got != tc.want {
				t.Errorf("GlobalBatch = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestCheckSamples: a Hugging Face Trainer line that turns its progress
// bar off reports no iteration times, and says so; so does a line that
// accelerate launches with its DeepSpeed plugin and no Trainer config of
// its own, whose DeepSpeed accelerate keeps from printing step lines
// (before, it was not warned about: its job reported nothing, silently).
// Other lines, and one that turns the bar on, are not warned about.
func TestCheckSamples(t *testing.T) {
	for _, tc := range []struct {
		line string
		flag string // the flag the warning names ("": none)
	}{
		{"python train.py --deepspeed ds.json --disable_tqdm", "--disable_tqdm"},
		{"python train.py --deepspeed=ds.json --disable-tqdm=True --output_dir /o", "--disable_tqdm"},
		{"torchrun --nproc_per_node 8 train.py --deepspeed ds.json --disable_tqdm yes", "--disable_tqdm"},
		{"python train.py --deepspeed ds.json --disable_tqdm true --disable_tqdm false", ""},
		{"python train.py --deepspeed ds.json --disable_tqdm False", ""},
		{"python train.py --deepspeed ds.json", ""},
		{"python train.py --deepspeed ds.json --disable_tqdm $OFF", ""},   // left to the run
		{"python train.py --deepspeed_config ds.json --disable_tqdm", ""}, // not the Trainer's: its own flags
		{"python pretrain_gpt.py --micro-batch-size 4 --disable_tqdm", ""},
		{"accelerate launch --use_deepspeed --deepspeed_config_file acc.json train.py --lr 1e-4", "--use_deepspeed"},
		{"accelerate launch --use_deepspeed --zero_stage 2 train.py --per_device_train_batch_size 4", "--use_deepspeed"},
		{"python -m accelerate.commands.launch --use-deepspeed train.py --per_device_train_batch_size 4", "--use_deepspeed"},
		// The Trainer's own config: its progress bar is read.
		{"accelerate launch --use_deepspeed train.py --deepspeed ds.json", ""},
		{"accelerate launch --use_deepspeed train.py --deepspeed ds.json --disable_tqdm", "--disable_tqdm"},
		// Without the plugin, DeepSpeed's steps_per_print is the config's.
		{"accelerate launch train.py --deepspeed_config ds.json", ""},
		{"accelerate launch --num_processes 8 train.py --per_device_train_batch_size 4", ""},
	} {
		err := CheckSamples(strings.Fields(tc.line), Options{})
		if got := errors.Is(err, ErrNoSamples); got != (tc.flag != "") {
			t.Errorf("%s: CheckSamples = %v, want a warning: %v", tc.line, err, tc.flag != "")
		}
		if err != nil && !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: %v does not name %s", tc.line, err, tc.flag)
		}
	}
}
