//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// TestConstraintAndExclude: the lab's nodes 1-2 have feature a100, 3-4
// h100. rubick places a job with --constraint=h100 on an h100 node and one
// with --exclude on a node it did not exclude, though every node is free
// (a node a job cannot use left it pending with BadConstraints).
func TestConstraintAndExclude(t *testing.T) {
	l := labFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, bin := buildInto(t, "constraint")
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
	for _, tc := range []struct {
		arg   string
		nodes []string
	}{
		{"--constraint=h100", []string{"node3", "node4"}},
		{"--exclude=node1,node2,node3", []string{"node4"}},
	} {
		id := l.submitScript(t, dir, body, &ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-constraint", "-N", "1",
			"--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue", tc.arg)
		var j slurm.Job
		var ran []string
		for ctx.Err() == nil {
			var err error
			if j, err = cluster.Job(ctx, id); err == nil {
				if len(j.NodeList) > 0 {
					ran = j.NodeList
				}
				if ended(j) {
					break
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
		if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" {
			t.Errorf("job %d (%s) ended %s (%s), tag %v; want COMPLETED on a plan rubickd chose; rubickd log %s", id, tc.arg, j.State, j.Reason, j.Tag, d.log)
		}
		if len(ran) == 0 || slices.ContainsFunc(ran, func(n string) bool { return !slices.Contains(tc.nodes, n) }) {
			t.Errorf("job %d (%s) ran on %v, want nodes of %s", id, tc.arg, ran, strings.Join(tc.nodes, ","))
		}
	}
}
