//go:build e2e

package e2e

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// TestSlurmPreemption: Slurm preempts a rubick job for a job of a higher
// QOS (PreemptType=preempt/qos, PreemptMode=REQUEUE). The run ends
// PREEMPTED and Slurm requeues the job unheld, bound to its node, which the
// preemptor now holds. Once its begin time has come, rubickd plans it again
// and starts it on another node while the preemptor still runs: before,
// rubickd kept it as waiting for its begin time (Slurm's update_time does
// not count that change) until another job changed. rubick report counts an
// interruption by Slurm's preemption.
func TestSlurmPreemption(t *testing.T) {
	smp := newSamples(t)
	lt := newLabTest(t, "slurmpreempt", 2*time.Minute, smp.config())
	l, ctx, bin, cluster := lt.lab, lt.ctx, lt.bin, lt.cluster
	const qos = "e2eurgent"
	l.run(t, "sacctmgr", "-i", "add", "qos", qos, "Priority=1000", "Preempt=normal", "PreemptMode=requeue")
	t.Cleanup(func() { l.run(t, "sacctmgr", "-i", "delete", "qos", qos) })
	l.run(t, "sacctmgr", "-i", "modify", "user", "root", "set", "qos+="+qos)
	t.Cleanup(func() { l.run(t, "sacctmgr", "-i", "modify", "user", "root", "set", "qos-="+qos) })
	d := runDaemon(t, l, bin, lt.dir, lt.cfgPath)

	id, runningOff := nodeJob(t, lt, d, "e2e-slurmpreempt")
	node := runningOff("").NodeList[0]
	// A job of the QOS that preempts, on that node only: Slurm requeues
	// the rubick job to start it.
	urgent := l.run(t, "sbatch", "--parsable", "--qos="+qos, "-p", "gpu", "-w", node, "-N", "1", "--gres=gpu:8", "--cpus-per-task=8",
		"--mem=32G", "-J", "e2e-urgent", "--wrap", "sleep 300")
	lt.ids = append(lt.ids, urgent)
	urgentID, err := strconv.Atoi(strings.TrimSpace(urgent))
	if err != nil {
		t.Fatalf("sbatch --parsable: %q", urgent)
	}

	again := runningOff(node)
	if j, err := cluster.Job(ctx, urgentID); err != nil || j.State != slurm.StateRunning || !slices.Contains(j.NodeList, node) {
		t.Errorf("preemptor %d: %s on %v (%v), want running on %s", urgentID, j.State, j.NodeList, err, node)
	}
	if again.RestartCount != 1 {
		t.Errorf("job %d runs again with restart count %d, want 1 (Slurm's requeue)", id, again.RestartCount)
	}
	l.run(t, "scancel", strconv.Itoa(id))
	if got := reportedRequeues(ctx, t, l, bin, lt.dbPath, id, 2); got != (requeues{Interruptions: 1, Preempted: 1}) {
		t.Errorf("rubick report counts job %d's preemption by Slurm as %+v, want an interruption by Slurm's preemption", id, got)
	}
}
