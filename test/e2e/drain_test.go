//go:build e2e

package e2e

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// TestDrainedNode: an admin drains the node a rubick job runs on. rubickd's
// cycles go on (the job keeps what it holds there), and a job submitted
// afterwards starts on another node.
func TestDrainedNode(t *testing.T) {
	smp := newSamples(t)
	lt := newLabTest(t, "drain", 2*time.Minute, smp.config())
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	d := runDaemon(t, l, bin, dir, cfgPath)

	body := longTraining(bin, dir)
	submit := func() int {
		return l.submitScript(t, dir, body, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-drain", "-N", "1",
			"--ntasks-per-node=1", "--gres=gpu:8", "--cpus-per-task=8", "--mem=32G", "--requeue")
	}
	running := func(id int) slurm.Job {
		for ctx.Err() == nil {
			if j, err := cluster.Job(ctx, id); err == nil && j.State == slurm.StateRunning && len(j.NodeList) > 0 {
				return j
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Fatalf("job %d did not start; rubickd log %s", id, d.log)
		return slurm.Job{}
	}
	first := running(submit())
	node := first.NodeList[0]
	l.run(t, "scontrol", "update", "NodeName="+node, "State=DRAIN", "Reason=e2e-drain")
	defer l.run(t, "scontrol", "update", "NodeName="+node, "State=RESUME")

	second := running(submit())
	if slices.Contains(second.NodeList, node) {
		t.Errorf("job %d started on the drained node %s", second.ID, node)
	}
	// Cycles after the drain saw a job on a node the snapshot would lack.
	at := cycleReport(t, smp.port).CycleID
	for ctx.Err() == nil && cycleReport(t, smp.port).CycleID < at+2 {
		time.Sleep(time.Second)
	}
	log, _ := os.ReadFile(d.log)
	if strings.Contains(string(log), "cycle failed") {
		t.Errorf("rubickd failed cycles with a job on the drained node; log %s", d.log)
	}
	if j, err := cluster.Job(ctx, first.ID); err != nil || j.State != slurm.StateRunning {
		t.Errorf("job %d on the drained node: %s (%v), want it still running", first.ID, j.State, err)
	}
}
