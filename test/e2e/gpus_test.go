//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// TestGPUsPerJobAndTask: jobs that ask for GPUs with --gpus or
// --gpus-per-task, not per node. rubickd plans them like any other (a
// resize to Gres=gpu:N beside those requests is invalid, so it clears them)
// and they run to completion on rubick's plans.
func TestGPUsPerJobAndTask(t *testing.T) {
	l := labFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, bin := buildInto(t, "gpus")
	cfgPath, _, _ := writeConfig(t, l, dir, "")
	cluster := l.cluster(ctx, t)
	var ids []string
	defer scancelAll(l, &ids)

	d := &daemonProc{t: t, bin: filepath.Join(bin, "rubickd"), cfg: cfgPath, env: l.env, log: filepath.Join(dir, "rubickd.log")}
	d.start()
	defer d.stop()

	body := fmt.Sprintf(`#!/bin/bash
exec %[1]s/rubick-srun --launcher gpu -- \
  %[1]s/rubick-emu-trainer --model-type bert --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
  --micro-batch-size 1 --global-batch-size 32 --train-iters 20 --time-scale 0.01 --log-interval 5 \
  --save %[2]s/ckpt-"$SLURM_JOB_ID"
`, bin, dir)
	for _, gpus := range [][]string{{"--gpus=2"}, {"--ntasks=2", "--gpus-per-task=1"}} {
		args := append([]string{"--model-type=bert", "-p", "gpu", "-J", "e2e-gpus", "-N", "1", "--cpus-per-task=4", "--mem=32G", "--requeue"}, gpus...)
		id := l.submitScript(t, dir, body, &ids, args...)
		var j slurm.Job
		for ctx.Err() == nil {
			var err error
			if j, err = cluster.Job(ctx, id); err == nil && ended(j) {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" || j.Tag.Generation < 1 {
			t.Errorf("job %d (%v) ended %s (%s), tag %v; want COMPLETED on a plan rubickd chose; rubickd log %s", id, gpus, j.State, j.Reason, j.Tag, d.log)
		}
	}
}
