//go:build integration

package integration

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/slurm"
)

// applierTest is the lab, a context bounded to a minute, its cluster and
// an Applier on it with the lab's scontrol and scancel.
func applierTest(t *testing.T) (*lab, context.Context, *slurm.RESTCluster, *slurm.Applier) {
	t.Helper()
	l := needLab(t)
	needScheduler(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c := l.cluster(ctx, t)
	app, err := slurm.NewApplier(slurm.ApplierConfig{Scontrol: "scontrol", Scancel: "scancel", Cluster: c})
	if err != nil {
		t.Fatal(err)
	}
	return l, ctx, c, app
}

// rubick's start may give a job fewer CPUs per node than it was submitted
// with: a job of 2 nodes with 8 CPUs each, started by the Applier on one
// node with 4 GPUs and 4 CPUs, runs there. Slurm keeps the submission's
// per-node minimum unless the resize sets it too; before it did, the job
// kept NumCPUs=8 and stayed pending in BadConstraints.
func TestApplierStartBelowSubmittedCPUs(t *testing.T) {
	l, ctx, c, app := applierTest(t)
	node := l.idleNodes(t, 1)[0]
	id := l.sbatch(t, "--model-type=bert", "-p", l.partition, "-N2", "--ntasks-per-node=1", "--cpus-per-task=8",
		"--gres=gpu:8", "--mem=4G", "--wrap", "sleep 30")
	jid, _ := strconv.Atoi(id)
	j, err := c.Job(ctx, jid)
	if err != nil || j.Tag == nil || !j.Held {
		t.Fatalf("job %s: tag %v, held %v (%v); want tagged and held by job_submit.lua", id, j.Tag, j.Held, err)
	}
	tag := *j.Tag
	tag.Plan, tag.Generation = "dp4.tp1.pp1.mb8.a1.z2", 1
	res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionStart, JobID: jid, Nodes: []string{node}, GPUsPerNode: 4,
		CPUsPerTask: 4, MemPerNodeMB: 8000, Tag: &tag})
	if res.Err != nil {
		t.Fatalf("start: %v (steps %+v)", res.Err, res.Steps)
	}
	waitForOr(t, 20*time.Second, "job "+id+" running", func() bool { return jobState(id) == "RUNNING" },
		func() string { return showJob(t, id) })
	if j, err := c.Job(ctx, jid); err != nil || j.CPUs != 4 || j.NodeCount != 1 || j.GPUsPerNode != 4 {
		t.Errorf("job %s running with %d CPUs on %d nodes, %d GPUs each (%v); want 4 on 1, 4", id, j.CPUs, j.NodeCount, j.GPUsPerNode, err)
	}
}

// A job its user cancels while rubickd waits for its checkpoint stays
// cancelled: scontrol requeuehold takes a CANCELLED job and brings it back
// pending and held, so the preemption stops at the job's end state.
func TestApplierLeavesJobCancelledDuringCheckpoint(t *testing.T) {
	l, ctx, c, start := applierTest(t)
	node := l.idleNodes(t, 1)[0]
	// The trainer ignores the signal, as one still writing its checkpoint.
	id := l.sbatch(t, "--model-type=bert", "-p", l.partition, "-N1", "--gres=gpu:2", "--mem=1G", "--requeue",
		"--wrap", "trap '' USR1; sleep 60")
	jid, _ := strconv.Atoi(id)
	t.Cleanup(func() { command("", "scancel", id) })
	startOn(ctx, t, c, start, id, node, 1)
	wait := daemon.WaitCheckpoint(c, 200*time.Millisecond)
	app, err := slurm.NewApplier(slurm.ApplierConfig{Scontrol: "scontrol", Scancel: "scancel", Cluster: c,
		CheckpointTimeout: 20 * time.Second,
		WaitCheckpoint: func(ctx context.Context, j slurm.Job) error {
			run(t, "scancel", id) // its user, mid-checkpoint
			return wait(ctx, j)
		}})
	if err != nil {
		t.Fatal(err)
	}
	res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionPreempt, JobID: jid})
	if !errors.Is(res.Err, slurm.ErrJobState) {
		t.Errorf("preempt of a job cancelled during its checkpoint: %v (steps %+v); want ErrJobState", res.Err, res.Steps)
	}
	time.Sleep(2 * time.Second)
	if got := field(showJob(t, id), "JobState"); got != "CANCELLED" {
		t.Errorf("job %s is %s; want it left CANCELLED\n%s", id, got, showJob(t, id))
	}
}

// The release of an array's record of tasks not split off yet releases
// those alone: a task split off before, held for a plan of its own, stays
// held. (The bare array ID names every task.)
func TestApplierReleasesArrayRecordAlone(t *testing.T) {
	l, ctx, _, app := applierTest(t)
	id := l.sbatch(t, "--model-type=bert", "-p", l.partition, "-N1", "--gres=gpu:1", "--mem=1G", "--array=0-3",
		"--wrap", "sleep 20")
	jid, _ := strconv.Atoi(id)
	t.Cleanup(func() { command("", "scancel", id) })
	if res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionSplit, JobID: jid, Tasks: []int{1}}); res.Err != nil {
		t.Fatalf("split: %v (steps %+v)", res.Err, res.Steps)
	}
	if res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionRelease, JobID: jid}); res.Err != nil {
		t.Fatalf("release: %v (steps %+v)", res.Err, res.Steps)
	}
	task := id + "_1"
	for _, k := range []string{"0", "2", "3"} {
		waitForOr(t, 20*time.Second, "task "+id+"_"+k+" released", func() bool {
			s := field(showJob(t, id+"_"+k), "JobState")
			return s == "RUNNING" || s == "COMPLETED"
		}, func() string { return showJob(t, id+"_"+k) })
	}
	if out := showJob(t, task); field(out, "JobState") != "PENDING" || field(out, "Reason") != "JobHeldUser" {
		t.Errorf("task %s split off before the release: %s %s; want it still held\n%s", task, field(out, "JobState"), field(out, "Reason"), out)
	}
}

// The restart count a preemption hands Action.BeforeRequeue before its
// requeue is the one slurmrestd reports once the job is requeued, at its
// first requeue and its second: rubickd, restarted, takes a requeued job
// for its own only at that count.
func TestApplierRequeueCount(t *testing.T) {
	l, ctx, c, start := applierTest(t)
	node := l.idleNodes(t, 1)[0]
	id := l.sbatch(t, "--model-type=bert", "-p", l.partition, "-N1", "--gres=gpu:2", "--mem=1G", "--requeue",
		"--wrap", "trap '' USR1; sleep 120")
	jid, _ := strconv.Atoi(id)
	t.Cleanup(func() { command("", "scancel", id) })
	app, err := slurm.NewApplier(slurm.ApplierConfig{Scontrol: "scontrol", Scancel: "scancel", Cluster: c,
		CheckpointTimeout: 5 * time.Second, WaitCheckpoint: func(context.Context, slurm.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	for gen := 1; gen <= 2; gen++ {
		// A start needs the requeued job out of COMPLETING.
		waitForOr(t, 30*time.Second, "job "+id+" pending", func() bool {
			j, err := c.Job(ctx, jid)
			return err == nil && j.State == slurm.StatePending && !slices.Contains(j.StateFlags, slurm.StateCompleting)
		}, func() string { return showJob(t, id) })
		startOn(ctx, t, c, start, id, node, gen)
		var recorded int
		res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionPreempt, JobID: jid,
			BeforeRequeue: func(_ context.Context, n int, _ *slurm.Tag) error { recorded = n; return nil }})
		if res.Err != nil {
			t.Fatalf("preempt %d: %v (steps %+v)", gen, res.Err, res.Steps)
		}
		j, err := c.Job(ctx, jid)
		if err != nil {
			t.Fatal(err)
		}
		if recorded != gen || res.RequeueCount != gen || j.RestartCount != gen {
			t.Errorf("preempt %d: recorded count %d, result's %d, slurmrestd's %d; want %d each", gen, recorded, res.RequeueCount, j.RestartCount, gen)
		}
	}
}

// startOn starts job id, tagged by job_submit.lua, with 2 GPUs on node
// and a tag of generation gen, and waits until it runs.
func startOn(ctx context.Context, t *testing.T, c *slurm.RESTCluster, start *slurm.Applier, id, node string, gen int) {
	t.Helper()
	jid, _ := strconv.Atoi(id)
	j, err := c.Job(ctx, jid)
	if err != nil || j.Tag == nil {
		t.Fatalf("job %s: tag %v (%v); want tagged by job_submit.lua", id, j.Tag, err)
	}
	tag := *j.Tag
	tag.Plan, tag.Generation = "dp2.tp1.pp1.mb8.a1.z0", gen
	if res := start.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionStart, JobID: jid, Nodes: []string{node}, GPUsPerNode: 2,
		CPUsPerTask: 1, MemPerNodeMB: 1000, Tag: &tag}); res.Err != nil {
		t.Fatalf("start %d of job %s: %v (steps %+v)", gen, id, res.Err, res.Steps)
	}
	waitState(t, id, "RUNNING", 30*time.Second)
}
