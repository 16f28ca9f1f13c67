//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// TestGPUsPerJobAndTask: jobs that ask for GPUs with --gpus or
// --gpus-per-task, not per node. rubickd plans them like any other (a
// resize to Gres=gpu:N beside those requests is invalid, so it clears them)
// and they run to completion on rubick's plans.
func TestGPUsPerJobAndTask(t *testing.T) {
	lt := newLabTest(t, "gpus", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	d := runDaemon(t, l, bin, dir, cfgPath)

	body := shortTraining(bin, dir, "bert", 32)
	// The last asks for its memory per GPU: resized with MinMemoryNode, its
	// srun steps failed (SLURM_MEM_PER_NODE beside SLURM_MEM_PER_GPU).
	for _, gpus := range [][]string{{"--gpus=2", "--mem=32G"}, {"--ntasks=2", "--gpus-per-task=1", "--mem=32G"},
		{"--gres=gpu:2", "--mem-per-gpu=16G"}} {
		args := append([]string{"--model-type=bert", "-p", "gpu", "-J", "e2e-gpus", "-N", "1", "--cpus-per-task=4", "--requeue"}, gpus...)
		id := l.submitScript(t, dir, body, &lt.ids, args...)
		j, _ := waitEnded(ctx, cluster, id)
		if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" || j.Tag.Generation < 1 {
			t.Errorf("job %d (%v) ended %s (%s), tag %v; want COMPLETED on a plan rubickd chose; rubickd log %s", id, gpus, j.State, j.Reason, j.Tag, d.log)
		}
	}
}
