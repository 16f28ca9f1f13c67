package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestScriptCmd(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ds.json"), []byte(`{"train_batch_size": 64}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		script string
		args   []string
		want   scriptView
		err    error
	}{
		{
			name:   "megatron, batch from a variable",
			script: "GBS=32\nexec rubick-srun python pretrain_gpt.py --global-batch-size $GBS --save $SLURM_SUBMIT_DIR/ckpt\n",
			want: scriptView{Line: []string{"python", "pretrain_gpt.py", "--global-batch-size", "32", "--save", "$SLURM_SUBMIT_DIR/ckpt"},
				Dialect: "megatron", GlobalBatch: 32},
		},
		{
			name:   "deepspeed config in the working directory",
			script: "exec rubick-srun deepspeed train.py --deepspeed_config ds.json\n",
			args:   []string{"--workdir", dir},
			want:   scriptView{Line: []string{"deepspeed", "train.py", "--deepspeed_config", "ds.json"}, Dialect: "deepspeed", Cannot: "tp,pp", GlobalBatch: 64},
		},
		{
			name:   "a config that is not there",
			script: "exec rubick-srun deepspeed train.py --deepspeed_config ds.json\n",
			args:   []string{"--workdir", t.TempDir()},
			want: scriptView{Line: []string{"deepspeed", "train.py", "--deepspeed_config", "ds.json"}, Dialect: "deepspeed", Cannot: "tp,pp",
				GlobalBatchError: "no such file or directory"},
		},
		{
			name:   "a batch set at run time",
			script: "exec rubick-srun python pretrain_gpt.py --global-batch-size \"$GBS\"\n",
			want: scriptView{Line: []string{"python", "pretrain_gpt.py", "--global-batch-size", "$GBS"}, Dialect: "megatron",
				GlobalBatchError: `--global-batch-size="$GBS" is not a positive integer`},
		},
		{
			// The Trainer's progress bar is its only source of samples.
			name:   "a Hugging Face Trainer line without its progress bar",
			script: "exec rubick-srun python train.py --deepspeed ds.json --per_device_train_batch_size 4 --disable_tqdm\n",
			args:   []string{"--workdir", dir},
			want: scriptView{Line: []string{"python", "train.py", "--deepspeed", "ds.json", "--per_device_train_batch_size", "4", "--disable_tqdm"},
				Dialect: "deepspeed", Cannot: "tp,pp", GlobalBatch: 64,
				SampleWarnings: []string{"no iteration times: --disable_tqdm turns off the Hugging Face Trainer's progress bar, the only source of " +
					"its iteration times, so rubickd learns nothing from the job's training: drop it"}},
		},
		{
			// accelerate turns DeepSpeed's step lines off, and there is no
			// progress bar of a Trainer's to read instead.
			name:   "a line accelerate launches with its DeepSpeed plugin",
			script: "exec rubick-srun accelerate launch --use_deepspeed --deepspeed_config_file ds.json train.py\n",
			args:   []string{"--workdir", dir},
			want: scriptView{Line: []string{"accelerate", "launch", "--use_deepspeed", "--deepspeed_config_file", "ds.json", "train.py"},
				Dialect: "deepspeed", Cannot: "tp,pp", GlobalBatch: 64,
				SampleWarnings: []string{"no iteration times: accelerate launch --use_deepspeed has DeepSpeed print no iteration times " +
					"(accelerate sets steps_per_print to infinity whatever the config says), so rubickd learns nothing from the job, " +
					"nor profiles it: a plain DeepSpeed script (deepspeed.initialize with --deepspeed_config) or a Hugging Face Trainer " +
					"given --deepspeed X.json reports them"}},
		},
		{name: "flags from the environment", script: "exec rubick-srun python pretrain_gpt.py $ARGS\n", err: errNothingRead},
		{name: "no rubick-srun", script: "srun python train.py\n", err: errNothingRead},
		{name: "context parallel", script: "exec rubick-srun python pretrain_gpt.py --context-parallel-size 2 --global-batch-size 32\n", err: errNoPlan},
		{
			name:   "a signal to the batch shell that rubick-srun does not pass on",
			script: "#!/bin/bash\n#SBATCH --signal=B:USR2@300\nexec rubick-srun --signal TERM python pretrain_gpt.py --global-batch-size 32\n",
			args:   []string{"--checkpoint-signal", "USR1"},
			want: scriptView{Line: []string{"python", "pretrain_gpt.py", "--global-batch-size", "32"}, Dialect: "megatron", GlobalBatch: 32,
				SignalWarnings: []string{
					"checkpoint signal mismatch: rubick-srun takes TERM as the checkpoint signal (its --signal), but the site's rubickd sends USR1 " +
						"before a restart: give rubick-srun --signal USR1",
					"checkpoint signal mismatch: --signal=B:USR2@300 sends USR2 to the batch shell alone, rubick-srun, which passes on only its " +
						"checkpoint signal (TERM), TERM and INT: the trainer would not get it. Ask for --signal=B:TERM@SECONDS to have the job " +
						"checkpoint and requeue itself before its time limit, or leave out B: for the trainer's step to get USR2"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"-", "--json", "--user", me.Username}, tt.args...)
			err := scriptCmd(context.Background(), args, &out, &errb, strings.NewReader(tt.script), noEnv)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got scriptView
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if !strings.Contains(got.GlobalBatchError, tt.want.GlobalBatchError) || (got.GlobalBatchError == "") != (tt.want.GlobalBatchError == "") {
				t.Errorf("global_batch_error %q, want it to say %q", got.GlobalBatchError, tt.want.GlobalBatchError)
			}
			got.GlobalBatchError, tt.want.GlobalBatchError, tt.want.Script = "", "", "-"
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rubick script (-want +got):\n%s", diff)
			}
		})
	}
}

// noEnv is an environment without variables.
func noEnv(string) string { return "" }

func TestScriptCmdText(t *testing.T) {
	var out, errb bytes.Buffer
	script := "exec rubick-srun python pretrain_gpt.py --micro-batch-size 2\n"
	if err := scriptCmd(context.Background(), []string{"-"}, &out, &errb, strings.NewReader(script), noEnv); err != nil {
		t.Fatal(err)
	}
	want := "rubick-srun runs: python pretrain_gpt.py --micro-batch-size 2\n  dialect:        megatron\n" +
		"  cannot express: nothing: any plan\n  global batch:   none stated: the plan's, which rubick-srun writes into the line\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	// The site's checkpoint signal from the environment.
	out.Reset()
	script = "#SBATCH --signal=B:USR1@60\n" + script
	env := func(k string) string { return map[string]string{"RUBICK_CHECKPOINT_SIGNAL": "TERM"}[k] }
	if err := scriptCmd(context.Background(), []string{"-"}, &out, &errb, strings.NewReader(script), env); err != nil {
		t.Fatal(err)
	}
	want += "  warning:        checkpoint signal mismatch: --signal=B:USR1@60 sends USR1 to the batch shell alone, rubick-srun, " +
		"which passes on only its checkpoint signal (TERM), TERM and INT: the trainer would not get it. Ask for --signal=B:TERM@SECONDS " +
		"to have the job checkpoint and requeue itself before its time limit, or leave out B: for the trainer's step to get USR1\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if err := scriptCmd(context.Background(), nil, &out, &errb, strings.NewReader(script), noEnv); !errors.Is(err, errUsage) {
		t.Errorf("no FILE: %v, want a usage error", err)
	}
}

// A bad flag is a usage error (exit status 2) whatever the script: one
// rubickd reads nothing off, or one that is not there, exits 1 otherwise.
func TestScriptCmdUsageErrors(t *testing.T) {
	tests := map[string]struct {
		args   []string
		script string
	}{
		"negative gpus, no rubick-srun line": {args: []string{"-", "--gpus", "-1"}, script: "srun python train.py\n"},
		"negative gpus, no such file":        {args: []string{filepath.Join(t.TempDir(), "missing.sh"), "--gpus", "-1"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := scriptCmd(context.Background(), tc.args, &out, &errb, strings.NewReader(tc.script), noEnv)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--gpus=-1") {
				t.Errorf("error %v, want a usage error naming --gpus=-1", err)
			}
		})
	}
}
