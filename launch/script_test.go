package launch

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/launch/report"
)

func TestFromScript(t *testing.T) {
	u := Unresolved
	tests := []struct {
		name   string
		script string
		want   ScriptLine
		err    error
	}{
		{
			name: "literal megatron line",
			script: `#!/bin/bash
#SBATCH -p gpu
exec rubick-srun --dialect megatron -- python pretrain_gpt.py --global-batch-size 32 --micro-batch-size 2
`,
			want: ScriptLine{Dialect: Megatron, Train: []string{"python", "pretrain_gpt.py", "--global-batch-size", "32", "--micro-batch-size", "2"}},
		},
		{
			name: "variables, quotes, continuations and rubick-srun flags",
			script: `#!/bin/bash
set -euo pipefail
GBS=32
export DS="$SLURM_SUBMIT_DIR/ds.json"
GPT_ARGS="--num-layers 24 \
  --global-batch-size $GBS"
echo starting
/opt/rubick/bin/rubick-srun --global-batch=32 --requeue-mail --launcher node \
  torchrun --nproc_per_node 8 pretrain_gpt.py $GPT_ARGS --save "$SCRATCH/ckpt dir" --data 'a b' --deepspeed_config $DS
`,
			want: ScriptLine{GlobalBatch: 32, Train: []string{
				"torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", "--num-layers", "24", "--global-batch-size", "32",
				"--save", u + "SCRATCH/ckpt dir", "--data", "a b", "--deepspeed_config", u + "SLURM_SUBMIT_DIR/ds.json"}},
		},
		{
			name: "an unset variable in a path keeps the rest of the word",
			script: `cd $WORK
exec rubick-srun deepspeed $HOME/train.py --deepspeed_config=$(pwd)/ds.json`,
			want: ScriptLine{Train: []string{"deepspeed", u + "HOME/train.py", "--deepspeed_config=" + u + "$(...)/ds.json"}},
		},
		{
			name:   "a flag's value that only the run sets",
			script: `exec rubick-srun python pretrain_gpt.py --global-batch-size $GBS`,
			want:   ScriptLine{Train: []string{"python", "pretrain_gpt.py", "--global-batch-size", u + "GBS"}},
		},
		{
			name: "a variable set inside an if is not followed",
			script: `GBS=16
if [ -n "$BIG" ]; then GBS=64; fi
exec rubick-srun python pretrain_gpt.py --global-batch-size $GBS`,
			want: ScriptLine{Train: []string{"python", "pretrain_gpt.py", "--global-batch-size", u + "GBS"}},
		},
		{
			name: "a source forgets what was set",
			script: `GBS=16
. ./settings.sh
exec rubick-srun python pretrain_gpt.py --global-batch-size $GBS`,
			want: ScriptLine{Train: []string{"python", "pretrain_gpt.py", "--global-batch-size", u + "GBS"}},
		},
		{
			name: "a function definition keeps what was set; its rubick-srun is found",
			script: `GBS=16
run() { rubick-srun python pretrain_gpt.py --global-batch-size $GBS; }
run`,
			want: ScriptLine{Train: []string{"python", "pretrain_gpt.py", "--global-batch-size", "16"}},
		},
		{
			name:   "an unset variable among the flags may hold any flag",
			script: `exec rubick-srun python pretrain_gpt.py $EXTRA_ARGS --micro-batch-size 2`,
			err:    ErrUnresolvable,
		},
		{
			name:   "a command's output among the flags",
			script: "ARGS=$(cat args)\nexec rubick-srun python pretrain_gpt.py $ARGS",
			err:    ErrUnresolvable,
		},
		{
			name:   "a quoted unset variable is one word",
			script: `exec rubick-srun python pretrain_gpt.py "$EXTRA" --micro-batch-size 2`,
			want:   ScriptLine{Train: []string{"python", "pretrain_gpt.py", u + "EXTRA", "--micro-batch-size", "2"}},
		},
		{
			name:   "the script's own arguments",
			script: `exec rubick-srun "$@"`,
			err:    ErrUnresolvable,
		},
		{
			name:   "an array",
			script: `ARGS=(--global-batch-size 32); exec rubick-srun python pretrain_gpt.py "${ARGS[@]}"`,
			err:    ErrUnresolvable,
		},
		{
			name:   "no rubick-srun",
			script: "#!/bin/bash\nsrun python train.py\necho rubick-srun\n",
			err:    ErrNoLaunch,
		},
		{
			name:   "rubick-srun without a command",
			script: "exec rubick-srun --dialect megatron --",
			err:    ErrBadInput,
		},
		{
			name:   "a bad dialect",
			script: "exec rubick-srun --dialect=torch python train.py",
			err:    ErrBadInput,
		},
		{
			name:   "a flag rubick-srun does not have",
			script: "exec rubick-srun --bogus -- python train.py",
			err:    ErrBadInput,
		},
		{
			// rubick-srun exits 2 on these before it runs anything.
			name:   "an srun option the plan owns",
			script: "exec rubick-srun --srun-arg=-lN2 -- torchrun train.py",
			err:    ErrBadInput,
		},
		{
			name:   "a wrapper that clears the ranks' environment",
			script: "exec rubick-srun -- env -i PATH=/usr/bin torchrun train.py",
			err:    ErrBadInput,
		},
		{
			name:   "an srun option the script sets when it runs",
			script: "exec rubick-srun --srun-arg=\"$OPT\" -- torchrun train.py",
			want:   ScriptLine{Train: []string{"torchrun", "train.py"}},
		},
		{
			name:   "not a shell script",
			script: "exec rubick-srun python train.py 'unterminated",
			err:    ErrBadInput,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromScript(tt.script)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("FromScript() error = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromScript(): %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FromScript() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFromScriptFacts reads what rubick-srun would report from a line read
// off a script: an unresolved batch is no batch, never a guess.
func TestFromScriptFacts(t *testing.T) {
	sl, err := FromScript("GBS=32\nexec rubick-srun python pretrain_gpt.py --global-batch-size $GBS --micro-batch-size 2\n")
	if err != nil {
		t.Fatal(err)
	}
	gb, err := GlobalBatch(sl.Train, Options{Dialect: sl.Dialect, GlobalBatch: sl.GlobalBatch})
	if err != nil || gb != 32 {
		t.Fatalf("GlobalBatch() = %d, %v; want 32", gb, err)
	}
	sl, err = FromScript("exec rubick-srun python pretrain_gpt.py --global-batch-size $GBS\n")
	if err != nil {
		t.Fatal(err)
	}
	if gb, err := GlobalBatch(sl.Train, Options{}); !errors.Is(err, ErrBadInput) {
		t.Fatalf("GlobalBatch() of an unresolved batch = %d, %v; want ErrBadInput", gb, err)
	}
}

// TestFromScriptHostile reads scripts any user may submit: rubickd reads
// them all, so none may panic it. Each is a line rubick cannot read.
func TestFromScriptHostile(t *testing.T) {
	u := Unresolved
	tests := []struct {
		name   string
		script string
		want   ScriptLine
		err    error
	}{
		// A value that grows past 64 KiB is left to the run: 40 lines of
		// A=$A$A asked for terabytes.
		{name: "a variable doubled", script: "A=xxxxxxxxxx\n" + strings.Repeat("A=$A$A\n", 13) + "rubick-srun python x.py --save $A\n",
			want: ScriptLine{Train: []string{"python", "x.py", "--save", u + "A"}}},
		{name: "a variable replaced into itself", script: "A=" + strings.Repeat("x", 1000) + "\nB=${A//x/$A}\nrubick-srun python x.py --save $B\n",
			want: ScriptLine{Train: []string{"python", "x.py", "--save", u + "B"}}},
		{name: "a word of the line past the bound", script: "A=" + strings.Repeat("x", 40<<10) + "\nrubick-srun python x.py --save $A$A\n", err: ErrBadInput},
		{name: "braces on many words", script: "rubick-srun python x.py" + strings.Repeat(` ""{1..9999}`, 120) + "\n", err: ErrBadInput},
		{name: "quoting a variable left to the run, in an assignment", script: "A=${B@Q}\nrubick-srun python x.py $A\n", err: ErrUnresolvable},
		{name: "quoting a variable left to the run, on the line", script: "rubick-srun python x.py --save ${B@Q}\n", err: ErrUnresolvable},
		// The parser and the walks over its tree recurse a level at a time,
		// a few KiB of stack each: a megabyte of "a|" overflowed the stack.
		{name: "a long script", script: strings.Repeat("true && true\n", 6000) + "rubick-srun python x.py\n", err: ErrBadInput},
		{name: "a long pipeline", script: "true" + strings.Repeat(" | true", 5000) + "\nrubick-srun python x.py\n", err: ErrBadInput},
		{name: "deep subshells", script: strings.Repeat("( ", 4100) + "rubick-srun python x.py" + strings.Repeat(" )", 4100) + "\n", err: ErrBadInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromScript(tt.script)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FromScript() mismatch (-want +got):\n%s", diff)
			}
			if tt.err == nil && err != nil || !errors.Is(err, tt.err) {
				t.Errorf("FromScript() error = %v, want %v", err, tt.err)
			}
		})
	}
}

// FuzzFromScript: rubickd reads every user's batch script, and the
// DeepSpeed config its line names, before the job starts. No script or
// config may panic it or take a line it reads for one it cannot run.
func FuzzFromScript(f *testing.F) {
	f.Add("GBS=32\nexec rubick-srun --dialect megatron -- python pretrain_gpt.py --global-batch-size $GBS --micro-batch-size 2\n", `{}`, 8)
	f.Add("#!/bin/bash\n#SBATCH --signal=B:USR1@60\nsrun rubick-srun deepspeed train.py --deepspeed_config ds.json\n",
		`{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}}`, 4)
	f.Add("A=${B@Q}\nrubick-srun --launcher node torchrun --nproc_per_node 8 run_clm.py --per_device_train_batch_size 4 --gradient_accumulation_steps 2 $A\n", `[`, 0)
	f.Fuzz(func(t *testing.T, script, config string, gpus int) {
		sl, err := FromScript(script)
		if err != nil {
			return
		}
		facts, err := sl.Facts(func(string) ([]byte, error) { return []byte(config), nil }, gpus)
		if err != nil {
			return
		}
		if facts.GlobalBatch < 0 || facts.GlobalBatch > report.MaxGlobalBatch {
			t.Fatalf("global batch %d read off %q", facts.GlobalBatch, sl.Train)
		}
		if gpus > 0 && gpus <= 1024 {
			_, _, _ = Inspect(sl.Train, gpus, Options{Dialect: sl.Dialect, GlobalBatch: sl.GlobalBatch,
				ReadFile: func(string) ([]byte, error) { return []byte(config), nil }})
		}
	})
}
