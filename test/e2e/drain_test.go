//go:build e2e

package e2e

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/daemon"
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

	_, runningOff := nodeJob(t, lt, d, "e2e-drain")
	first := runningOff("")
	node := first.NodeList[0]
	l.run(t, "scontrol", "update", "NodeName="+node, "State=DRAIN", "Reason=e2e-drain")
	defer l.run(t, "scontrol", "update", "NodeName="+node, "State=RESUME")

	_, runningOff = nodeJob(t, lt, d, "e2e-drain")
	second := runningOff("")
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

// TestNodeFailure: the node a rubick job runs on fails (an administrator
// drains it and sets it DOWN; with the drain it stays out once slurmd
// answers again). Slurm ends the run NODE_FAIL and requeues the job
// unheld, still bound to that node. rubickd plans it again as a queued
// job and starts it on another node, within StartGrace of its first
// start: before, it took the requeued job for one it had just released
// and decided nothing until then. rubick report counts the requeue as an
// interruption by a node failure. rubickd is stopped across the failure,
// as during a maintenance: the one started after it still counts the run
// the failure ended, from the store.
func TestNodeFailure(t *testing.T) {
	smp := newSamples(t)
	lt := newLabTest(t, "nodefail", 2*time.Minute, smp.config())
	l, ctx, bin := lt.lab, lt.ctx, lt.bin
	d := runDaemon(t, l, bin, lt.dir, lt.cfgPath)

	id, runningOff := nodeJob(t, lt, d, "e2e-nodefail")
	first := runningOff("")
	node := first.NodeList[0]
	// rubickd's cycles see it run: the run counts at its next start.
	lt.waitCycles(t, d, 3)
	d.stop()
	l.run(t, "scontrol", "update", "NodeName="+node, "State=DRAIN", "Reason=e2e-nodefail")
	defer l.run(t, "scontrol", "update", "NodeName="+node, "State=RESUME")
	l.run(t, "scontrol", "update", "NodeName="+node, "State=DOWN", "Reason=e2e-nodefail")
	for j, err := lt.cluster.Job(ctx, id); err != nil || j.RestartCount == 0; j, err = lt.cluster.Job(ctx, id) {
		if ctx.Err() != nil {
			t.Fatalf("job %d was not requeued after its node failed: %v", id, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	d.start()

	again := runningOff(node)
	startedAt := func(j slurm.Job) time.Time {
		sec, err := strconv.ParseInt(j.Tag.Extra["at"], 10, 64)
		if err != nil {
			t.Fatalf("job %d: tag %v has no start time", j.ID, j.Tag)
		}
		return time.Unix(sec, 0)
	}
	if j := again; j.RestartCount != 1 || j.Tag == nil || j.Tag.Generation != first.Tag.Generation+1 {
		t.Errorf("job %d after the failure: restart count %d, tag %v; want 1, started by rubickd (gen=%d)", id, j.RestartCount, j.Tag, first.Tag.Generation+1)
	} else if gap := startedAt(j).Sub(startedAt(first)); gap >= daemon.StartGrace {
		t.Errorf("job %d started again %v after its first start, want within %v: rubickd awaited the requeued job as released; log %s",
			id, gap, daemon.StartGrace, d.log)
	}
	// Slurm's record of the job starts over at the requeue: the tag
	// rubickd started it again with keeps the run the failure ended.
	if ran, err := strconv.Atoi(again.Tag.Extra["ran"]); err != nil || ran < 3 {
		t.Errorf("job %d started again with tag %v: ran=%q, want the seconds it ran before rubickd stopped (about 8)", id, again.Tag, again.Tag.Extra["ran"])
	}
	l.run(t, "scancel", strconv.Itoa(id))
	if got := reportedRequeues(ctx, t, l, bin, lt.dbPath, id, 2); got != (requeues{Interruptions: 1, NodeFail: 1}) {
		t.Errorf("rubick report counts job %d's node failure as %+v, want an interruption by a node failure", id, got)
	}
}

// nodeJob submits a bert job of a whole node that trains until it is
// cancelled, and returns its id and a wait until it runs on a node other
// than off ("": any), which returns the job.
func nodeJob(t *testing.T, lt *labTest, d *daemonProc, name string) (int, func(off string) slurm.Job) {
	t.Helper()
	id := lt.submitScript(t, lt.dir, longTraining(lt.bin, lt.dir), &lt.ids, "--model-type=bert", "-p", "gpu", "-J", name, "-N", "1",
		"--ntasks-per-node=1", "--gres=gpu:8", "--cpus-per-task=8", "--mem=32G", "--requeue")
	return id, func(off string) slurm.Job {
		t.Helper()
		var j slurm.Job
		var err error
		for lt.ctx.Err() == nil {
			j, err = lt.cluster.Job(lt.ctx, id)
			if err == nil && j.State == slurm.StateRunning && len(j.NodeList) > 0 && !slices.Contains(j.NodeList, off) {
				return j
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Fatalf("job %d did not run off %q: last seen %s (%s) on %v, held %v, tag %v (%v); rubickd log %s",
			id, off, j.State, j.Reason, j.NodeList, j.Held, j.Tag, err, d.log)
		return slurm.Job{}
	}
}
