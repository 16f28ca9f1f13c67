//go:build e2e

package e2e

import (
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
	lt := newLabTest(t, "constraint", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	d := runDaemon(t, l, bin, dir, cfgPath)

	body := shortTraining(bin, dir, "bert", 32)
	for _, tc := range []struct {
		arg   string
		nodes []string
	}{
		{"--constraint=h100", []string{"node3", "node4"}},
		{"--exclude=node1,node2,node3", []string{"node4"}},
	} {
		id := l.submitScript(t, dir, body, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-constraint", "-N", "1",
			"--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue", tc.arg)
		j, ran := waitEnded(ctx, cluster, id)
		if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" {
			t.Errorf("job %d (%s) ended %s (%s), tag %v; want COMPLETED on a plan rubickd chose; rubickd log %s", id, tc.arg, j.State, j.Reason, j.Tag, d.log)
		}
		if len(ran) == 0 || slices.ContainsFunc(ran, func(n string) bool { return !slices.Contains(tc.nodes, n) }) {
			t.Errorf("job %d (%s) ran on %v, want nodes of %s", id, tc.arg, ran, strings.Join(tc.nodes, ","))
		}
	}
}
