//go:build integration

package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/slurm"
)

// rubickd reads a pending job's batch script with scontrol, as a user
// submitted it, and the working directory it runs in from slurmrestd;
// scontrol's "no script" (exit 0, stderr only) is ErrNoScript.
func TestBatchScriptOfPendingJob(t *testing.T) {
	l := needLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	script := "#!/bin/bash\nGBS=32\nexec rubick-srun --dialect megatron -- python pretrain_gpt.py --global-batch-size $GBS --save \"$SLURM_SUBMIT_DIR/ckpt\"\n"
	path := filepath.Join(t.TempDir(), "train.sh")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	id := l.sbatch(t, "--model-type=gpt2", "-p", l.partition, "--gres=gpu:2", path)
	jid, _ := strconv.Atoi(id)
	scripts := slurm.BatchScripts{Runner: slurm.ExecRunner{}, Scontrol: "scontrol"}
	got, err := scripts.BatchScript(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if got != script {
		t.Fatalf("batch script of job %d:\n%q\nwant\n%q", jid, got, script)
	}
	sl, err := launch.FromScript(got)
	if err != nil {
		t.Fatal(err)
	}
	want := launch.ScriptLine{Dialect: launch.Megatron,
		Train: []string{"python", "pretrain_gpt.py", "--global-batch-size", "32", "--save", launch.Unresolved + "SLURM_SUBMIT_DIR/ckpt"}}
	if diff := cmp.Diff(want, sl); diff != "" {
		t.Errorf("rubick-srun line (-want +got):\n%s", diff)
	}

	c := l.cluster(ctx, t)
	j, err := c.Job(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if j.WorkDir != l.out {
		t.Errorf("job %d: working directory %q, want %q (sbatch -D)", jid, j.WorkDir, l.out)
	}

	if _, err := scripts.BatchScript(ctx, 99999999); !errors.Is(err, slurm.ErrNoScript) {
		t.Errorf("script of a job that does not exist: %v, want ErrNoScript", err)
	}
}
