//go:build integration

package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// rubick's start may give a job fewer CPUs per node than it was submitted
// with: a job of 2 nodes with 8 CPUs each, started by the Applier on one
// node with 4 GPUs and 4 CPUs, runs there. Slurm keeps the submission's
// per-node minimum unless the resize sets it too; before it did, the job
// kept NumCPUs=8 and stayed pending in BadConstraints.
func TestApplierStartBelowSubmittedCPUs(t *testing.T) {
	l := needLab(t)
	needScheduler(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := l.cluster(ctx, t)
	app, err := slurm.NewApplier(slurm.ApplierConfig{Scontrol: "scontrol", Scancel: "scancel", Cluster: c})
	if err != nil {
		t.Fatal(err)
	}
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
