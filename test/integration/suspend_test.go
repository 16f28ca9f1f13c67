//go:build integration

package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// An administrator's suspend (scontrol suspend) keeps a job's GPUs, and
// rubickd's client reads it: SUSPENDED with the run time before it, and
// after the resume a run time without the time it stood suspended.
func TestSuspendedJobRunTime(t *testing.T) {
	l := needLab(t)
	needScheduler(t) // only an operator may suspend
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := l.cluster(ctx, t)
	node := l.idleNodes(t, 1)[0]
	id := l.sbatch(t, "-p", l.partition, "--gres=gpu:2", "--nodelist="+node, "--wrap", "sleep 120")
	waitState(t, id, "RUNNING", 20*time.Second)
	jid, _ := strconv.Atoi(id)
	time.Sleep(2 * time.Second)
	run(t, "scontrol", "suspend", id)
	t.Cleanup(func() { command("", "scontrol", "resume", id) })

	j, err := c.Job(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != slurm.StateSuspended || !j.Allocated() || j.SuspendTime.IsZero() || j.PreSuspend < time.Second {
		t.Fatalf("suspended job: state %s, allocated %v, suspended at %v after %v; want SUSPENDED, allocated, a time, >= 1s",
			j.State, j.Allocated(), j.SuspendTime, j.PreSuspend)
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Name == node && n.GPUsUsed != 2 {
			t.Errorf("%s: %d GPUs in use while the job stands suspended, want its 2", node, n.GPUsUsed)
		}
	}

	time.Sleep(4 * time.Second)
	run(t, "scontrol", "resume", id)
	if j, err = c.Job(ctx, jid); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if j.State != slurm.StateRunning {
		t.Fatalf("resumed job: state %s, want RUNNING", j.State)
	}
	// Slurm's times are whole seconds: allow one either way.
	if wall, ran := now.Sub(j.StartTime), j.RunTime(now); ran > wall-3*time.Second || ran < j.PreSuspend {
		t.Errorf("resumed job: run time %v of %v since its start (suspended about 4s, %v before it); want the suspension left out",
			ran, wall, j.PreSuspend)
	}
}
