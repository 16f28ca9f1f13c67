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
		{name: "flags from the environment", script: "exec rubick-srun python pretrain_gpt.py $ARGS\n", err: errNothingRead},
		{name: "no rubick-srun", script: "srun python train.py\n", err: errNothingRead},
		{name: "context parallel", script: "exec rubick-srun python pretrain_gpt.py --context-parallel-size 2 --global-batch-size 32\n", err: errNoPlan},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"-", "--json", "--user", me.Username}, tt.args...)
			err := scriptCmd(context.Background(), args, &out, &errb, strings.NewReader(tt.script))
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

func TestScriptCmdText(t *testing.T) {
	var out, errb bytes.Buffer
	script := "exec rubick-srun python pretrain_gpt.py --micro-batch-size 2\n"
	if err := scriptCmd(context.Background(), []string{"-"}, &out, &errb, strings.NewReader(script)); err != nil {
		t.Fatal(err)
	}
	want := "rubick-srun runs: python pretrain_gpt.py --micro-batch-size 2\n  dialect:        megatron\n" +
		"  cannot express: nothing: any plan\n  global batch:   none stated: the plan's, which rubick-srun writes into the line\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if err := scriptCmd(context.Background(), nil, &out, &errb, strings.NewReader(script)); !errors.Is(err, errUsage) {
		t.Errorf("no FILE: %v, want a usage error", err)
	}
}
