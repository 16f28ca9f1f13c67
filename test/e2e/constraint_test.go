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

// TestConstraintAndExclude: the lab's nodes 1-2 have feature a100, 3-4
// h100. rubick places a job with --constraint=h100 on an h100 node, one
// with --exclude on a node it did not exclude and one with --nodelist on
// its node, though every node is free (a node a job cannot use left it
// pending with BadConstraints; the node list was overridden). A job
// submitted to the unmanaged partition debug and to gpu runs in gpu (it
// used to stay held: its partition was "debug,gpu"), and one asking for
// h100 GPUs (the lab's GRES types follow the features) on an h100 node
// (its resize used to be refused: an untyped Gres beside a typed request).
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
		{"--nodelist=node2", []string{"node2"}},
		{"--partition=debug,gpu", []string{"node1", "node2", "node3", "node4"}},
		{"--gres=gpu:h100:2", []string{"node3", "node4"}},
	} {
		id := l.submitScript(t, dir, body, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-constraint", "-N", "1",
			"--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue", tc.arg)
		j, ran := waitEnded(ctx, cluster, id)
		if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" || j.Partition != "gpu" {
			t.Errorf("job %d (%s) ended %s (%s) in partition %s, tag %v; want COMPLETED in gpu on a plan rubickd chose; rubickd log %s",
				id, tc.arg, j.State, j.Reason, j.Partition, j.Tag, d.log)
		}
		if strings.HasPrefix(tc.arg, "--gres=") && !slices.Equal(j.GPUTypes, []string{"h100"}) {
			t.Errorf("job %d (%s) ran on GPUs of types %v, want h100", id, tc.arg, j.GPUTypes)
		}
		if len(ran) == 0 || slices.ContainsFunc(ran, func(n string) bool { return !slices.Contains(tc.nodes, n) }) {
			t.Errorf("job %d (%s) ran on %v, want nodes of %s", id, tc.arg, ran, strings.Join(tc.nodes, ","))
		}
	}
}

// TestExclusive: an --exclusive job is released on its own request (its
// --mem-per-gpu memory included) for Slurm to place, and a rubick job
// submitted while it runs is planned onto another node (Slurm would hold it
// pending on the exclusive job's).
func TestExclusive(t *testing.T) {
	lt := newLabTest(t, "exclusive", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	d := runDaemon(t, l, bin, dir, cfgPath)

	body := shortTraining(bin, dir, "bert", 32)
	args := []string{"--model-type=bert", "-p", "gpu", "-N", "1", "--ntasks-per-node=1", "--gres=gpu:2",
		"--cpus-per-task=8", "--mem=32G", "--requeue"}
	// With --mem-per-gpu: 22.05 reports a default per-CPU memory beside it,
	// which the release on its request used to send as its memory (2 CPUs x
	// 4000M), and any MinMemoryNode beside --mem-per-gpu fails srun.
	excl := l.submitScript(t, dir, strings.Replace(body, "exec ", "sleep 20\nexec ", 1), &lt.ids,
		"-J", "e2e-exclusive", "--exclusive", "--model-type=bert", "-p", "gpu", "-N", "1", "--ntasks-per-node=1", "--gres=gpu:2",
		"--cpus-per-task=2", "--mem-per-gpu=16G", "--requeue")
	var node string
	for ctx.Err() == nil && node == "" {
		if j, err := cluster.Job(ctx, excl); err == nil && j.State == slurm.StateRunning && len(j.NodeList) > 0 {
			node = j.NodeList[0]
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Released with MinMemoryNode its srun steps failed: "SLURM_MEM_PER_CPU,
	// SLURM_MEM_PER_GPU, and SLURM_MEM_PER_NODE are mutually exclusive".
	if show := l.run(t, "scontrol", "show", "job", strconv.Itoa(excl)); !strings.Contains(show, "MemPerTres=gres:gpu:16384") ||
		!strings.Contains(show, "MinMemoryNode=0 ") {
		t.Errorf("exclusive job %d runs without its memory per GPU:\n%s", excl, show)
	}
	id := l.submitScript(t, dir, body, &lt.ids, append([]string{"-J", "e2e-shared"}, args...)...)
	j, ran := waitEnded(ctx, cluster, id)
	if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" || slices.Contains(ran, node) {
		t.Errorf("job %d ended %s (%s) on %v, tag %v; want COMPLETED on a plan rubickd chose, off node %s of exclusive job %d; rubickd log %s",
			id, j.State, j.Reason, ran, j.Tag, node, excl, d.log)
	}
	j, _ = waitEnded(ctx, cluster, excl)
	if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan != "" || j.GPUsPerNode != 2 {
		t.Errorf("exclusive job %d ended %s (%s), %d GPUs, tag %v; want COMPLETED on its 2 GPUs without a plan; rubickd log %s",
			excl, j.State, j.Reason, j.GPUsPerNode, j.Tag, d.log)
	}
}

// TestReservation: a job submitted to an active reservation is planned on
// its nodes (rubick used to plan it onto nodes outside, where it sat with
// BadConstraints), and a job outside it is planned off them, though the
// reserved node is the one left free (it used to sit pending there).
func TestReservation(t *testing.T) {
	lt := newLabTest(t, "reservation", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	l.run(t, "scontrol", "create", "reservation", "ReservationName=e2e-resv", "Users=root", "Nodes=node4",
		"StartTime=now", "Duration=10")
	defer l.run(t, "scontrol", "delete", "ReservationName=e2e-resv")
	// Nodes 1-3 busy for the test's length, without rubick.
	filler := l.submitScript(t, dir, "#!/bin/bash\nsleep 300\n", &lt.ids, "-p", "gpu", "-J", "e2e-filler", "-N", "3", "--gres=gpu:8", "--exclusive")
	for ctx.Err() == nil {
		if j, err := cluster.Job(ctx, filler); err == nil && j.State == slurm.StateRunning {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	d := runDaemon(t, l, bin, dir, cfgPath)

	args := []string{"--model-type=bert", "-p", "gpu", "-N", "1", "--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue"}
	outside := l.submitScript(t, dir, shortTraining(bin, dir, "bert", 32), &lt.ids, append([]string{"-J", "e2e-outside"}, args...)...)
	inside := l.submitScript(t, dir, shortTraining(bin, dir, "bert", 32), &lt.ids, append([]string{"-J", "e2e-resv", "--reservation=e2e-resv"}, args...)...)
	j, ran := waitEnded(ctx, cluster, inside)
	if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" || !slices.Equal(ran, []string{"node4"}) {
		t.Errorf("job %d ended %s (%s) on %v, tag %v; want COMPLETED on node4 on a plan rubickd chose; rubickd log %s",
			inside, j.State, j.Reason, ran, j.Tag, d.log)
	}
	if j, err := cluster.Job(ctx, outside); err != nil || j.State != slurm.StatePending || !j.Held {
		t.Errorf("job %d outside the reservation: %s (%s), held %v, %v; want held while nodes 1-3 are busy; rubickd log %s",
			outside, j.State, j.Reason, j.Held, err, d.log)
	}
}

// TestExclusivePartition: in a partition with OverSubscribe=EXCLUSIVE (and
// likewise ExclusiveUser=YES) Slurm gives every job whole nodes, and both
// versions report its jobs as --exclusive ones (shared "none", "user";
// checked on both labs). So rubick releases them on their requests, for
// Slurm to place one per node, rather than plan two onto one node, where
// the second would wait for the first.
func TestExclusivePartition(t *testing.T) {
	lt := newLabTest(t, "exclusive-partition", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	l.run(t, "scontrol", "update", "PartitionName=gpu", "OverSubscribe=EXCLUSIVE")
	defer l.run(t, "scontrol", "update", "PartitionName=gpu", "OverSubscribe=NO")
	d := runDaemon(t, l, bin, dir, cfgPath)

	body := strings.Replace(shortTraining(bin, dir, "bert", 32), "exec ", "sleep 5\nexec ", 1)
	var ids []int
	for range 2 {
		ids = append(ids, l.submitScript(t, dir, body, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-exclusive-partition",
			"-N", "1", "--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue"))
	}
	seen := map[int][]string{} // the nodes each was seen running on
	for ctx.Err() == nil {
		ended := 0
		for _, id := range ids {
			if j, err := cluster.Job(ctx, id); err == nil {
				if j.State == slurm.StateRunning {
					seen[id] = j.NodeList
				}
				if j.Ended() {
					ended++
				}
			}
		}
		if ended == len(ids) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, id := range ids {
		j, err := cluster.Job(ctx, id)
		if err != nil || j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan != "" {
			t.Errorf("job %d ended %s (%s), tag %v, %v; want COMPLETED as submitted, without a plan; rubickd log %s",
				id, j.State, j.Reason, j.Tag, err, d.log)
		}
	}
	if a, b := seen[ids[0]], seen[ids[1]]; len(a) == 0 || len(b) == 0 || slices.ContainsFunc(a, func(n string) bool { return slices.Contains(b, n) }) {
		t.Errorf("jobs ran on %v and %v, want both seen running, on different nodes", a, b)
	}
}
