package launch

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

// accConfigs are DeepSpeed config files given to accelerate launch with
// --deepspeed_config_file.
var accConfigs = map[string][]byte{
	"acc.json": []byte(`{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}`),
}

// A line that accelerate launch starts with its DeepSpeed plugin, and no
// Hugging Face --deepspeed, takes the plan through accelerate's own flags
// (ZeRO stage, offload, accumulation) and the script's
// --per_device_train_batch_size, or through a rewritten copy of the
// plugin's --deepspeed_config_file; it reads back as the plan.
func TestRewriteAccelerateDeepSpeed(t *testing.T) {
	cases := map[string]struct {
		line   string
		plan   string
		opts   Options
		want   string
		config map[string]string // of the copy; nil: the line has none
	}{
		"plugin flags: stage, offload and accumulation set, micro-batch through the script": {
			line: "accelerate launch --use_deepspeed --zero_stage 2 --gradient_accumulation_steps 1 --num_processes 8 " +
				"train.py --per_device_train_batch_size 4 --output_dir out",
			plan: "dp4.tp1.pp1.mb2.a4.z3+off", opts: Options{GlobalBatch: 32, Nodes: 1, GPUsPerNode: 4, Rendezvous: "127.0.0.1:20042"},
			want: "accelerate launch --use_deepspeed --zero_stage 3 --gradient_accumulation_steps 4 --num_processes 4 " +
				"--offload_optimizer_device cpu --num_machines 1 --main_process_port 20042 " +
				"train.py --per_device_train_batch_size 2 --output_dir out --gradient_accumulation_steps 4",
		},
		"plugin flags in dash and inline spellings; parameter offload off below stage 3": {
			line: "python -m accelerate.commands.launch --use-deepspeed --zero-stage=3 --offload-optimizer-device=cpu " +
				"--offload_param_device cpu train.py --per-device-train-batch-size=8 --gradient-accumulation-steps 2 " +
				"--per_gpu_train_batch_size 8 --auto_find_batch_size --gradient_checkpointing",
			plan: "dp2.tp1.pp1.mb4.a4.z2",
			want: "python -m accelerate.commands.launch --use-deepspeed --zero-stage=2 --offload-optimizer-device=none " +
				"--offload_param_device none --gradient_accumulation_steps 4 train.py --per-device-train-batch-size=4 " +
				"--gradient-accumulation-steps 4",
		},
		"plugin flags: checkpointing only where the line has the flag": {
			line: "accelerate launch --use_deepspeed train.py --per_device_train_batch_size 4 --gradient_checkpointing False",
			plan: "dp2.tp1.pp1.mb4.a1.z1+gc",
			want: "accelerate launch --use_deepspeed --zero_stage 1 --offload_optimizer_device none --gradient_accumulation_steps 1 " +
				"train.py --per_device_train_batch_size 4 --gradient_checkpointing true --gradient_accumulation_steps 1",
		},
		"config file: the copy takes the plan, accelerate's accumulation agrees": {
			line: "accelerate launch --use_deepspeed --deepspeed_config_file acc.json --gradient_accumulation_steps 1 " +
				"train.py --batch-size 8 --lr 1e-4",
			plan: "dp4.tp1.pp1.mb8.a2.z1",
			want: "accelerate launch --use_deepspeed --deepspeed_config_file /job/rubick-acc.json --gradient_accumulation_steps 2 " +
				"train.py --batch-size 8 --lr 1e-4",
			// DeepSpeed's config: accelerate fills "auto" from the
			// DataLoader, not from the plan.
			config: map[string]string{"train_batch_size": "64", "train_micro_batch_size_per_gpu": "8", "gradient_accumulation_steps": "2",
				"zero_optimization.stage": "1", "zero_optimization.offload_optimizer": "-", "zero_optimization.offload_param": "-"},
		},
		"plugin on two nodes: torchrun starts every node's workers, not pdsh": {
			line: "accelerate launch --use_deepspeed --deepspeed_multinode_launcher pdsh --num_machines 2 " +
				"train.py --per_device_train_batch_size 2",
			plan: "dp8.tp1.pp1.mb2.a1.z2", opts: Options{Nodes: 2, GPUsPerNode: 4, Rendezvous: "node1:20042"},
			want: "accelerate launch --use_deepspeed --deepspeed_multinode_launcher standard --num_machines 2 --zero_stage 2 " +
				"--offload_optimizer_device none --gradient_accumulation_steps 1 --num_processes 8 --rdzv_backend c10d " +
				"--main_process_ip node1 --main_process_port 20042 train.py --per_device_train_batch_size 2 --gradient_accumulation_steps 1",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan := mustPlan(t, tc.plan)
			opts := tc.opts
			opts.ConfigDir, opts.ReadFile = "/job", mapReader(accConfigs)
			res, err := Rewrite(strings.Fields(tc.line), plan, opts)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(strings.Fields(tc.want), res.Argv); d != "" {
				t.Errorf("argv (-want +got):\n%s", d)
			}
			if res.Dialect != DeepSpeed || res.Launcher != LauncherAccelerate || res.GlobalBatch != plan.GPUs()*plan.MicroBatch*plan.Accum {
				t.Errorf("dialect %q, launcher %q, global batch %d", res.Dialect, res.Launcher, res.GlobalBatch)
			}
			files := map[string][]byte{}
			switch {
			case tc.config == nil && res.Config != nil:
				t.Fatalf("config %s written; the line has none", res.Config.Path)
			case tc.config != nil && res.Config == nil:
				t.Fatal("no config written")
			case tc.config != nil:
				keys := make([]string, 0, len(tc.config))
				for k := range tc.config {
					keys = append(keys, k)
				}
				if d := cmp.Diff(tc.config, configValues(t, res.Config.Data, keys...)); d != "" {
					t.Errorf("config (-want +got):\n%s", d)
				}
				files[res.Config.Path] = res.Config.Data
			}
			got, gb, err := Inspect(res.Argv, plan.GPUs(), Options{ReadFile: mapReader(files)})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(plan, got); d != "" || gb != res.GlobalBatch {
				t.Errorf("Inspect gb=%d (want %d), plan (-want +got):\n%s", gb, res.GlobalBatch, d)
			}
		})
	}
}

// A plugin line without a config file whose script takes no
// --per_device_train_batch_size has its micro-batch in the script's
// DataLoader: rubick runs no plan of it and says so before the job runs;
// like any DeepSpeed line it cannot take TP or PP.
func TestAccelerateDeepSpeedRefused(t *testing.T) {
	unsized := strings.Fields("accelerate launch --use_deepspeed --zero_stage 2 train.py --batch-size 8")
	sized := strings.Fields("accelerate launch --use_deepspeed train.py --per_device_train_batch_size 8")
	const why = "takes the micro-batch from the script's DataLoader"
	if _, err := Rewrite(unsized, mustPlan(t, "dp2.tp1.pp1.mb8.a1.z2"), Options{ConfigDir: "/job"}); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), why) {
		t.Errorf("Rewrite = %v, want ErrBadInput saying %q", err, why)
	}
	if _, d, err := Cannot(unsized, Options{}); !errors.Is(err, ErrBadInput) || d != DeepSpeed || !strings.Contains(err.Error(), why) {
		t.Errorf("Cannot = %q, %v; want %q, ErrBadInput saying %q", d, err, DeepSpeed, why)
	}
	cannot, d, err := Cannot(sized, Options{})
	if err != nil || d != DeepSpeed || cannot != model.FeatureTP|model.FeaturePP {
		t.Errorf("Cannot = %v, %q, %v; want tp,pp, %q", cannot, d, err, DeepSpeed)
	}
	if _, err := Rewrite(sized, mustPlan(t, "dp2.tp2.pp1.mb8.a1.z1"), Options{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Rewrite of a TP plan = %v, want ErrUnsupported", err)
	}
	// The batch its user meant: the script's sizes on the GPUs asked for.
	if gb, err := GlobalBatch(append(sized, "--gradient_accumulation_steps", "2"), Options{GPUs: 4}); err != nil || gb != 64 {
		t.Errorf("GlobalBatch = %d, %v; want 64", gb, err)
	}
	// accelerate has DeepSpeed print no iteration times: nothing to profile.
	run := ProfileRun{Plan: mustPlan(t, "dp2.tp1.pp1.mb8.a1.z2"), GPUs: 2, Iters: 3}
	if _, err := RewriteProfile(sized, run, Options{ConfigDir: "/job"}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("RewriteProfile = %v, want ErrUnsupported", err)
	}
}
