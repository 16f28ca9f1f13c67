//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// TestDeadlineFirst: one GPU free and two jobs held for it. By slope the
// bert job, submitted first, gets it (rubickd --dry-run --once on the lab,
// with policy.deadline_lead: 0s); the gpt2 job's --deadline lets it start
// only within 20 minutes, so it runs first, with reason deadline, and the
// bert job waits.
func TestDeadlineFirst(t *testing.T) {
	lt := newLabTest(t, "deadline", 2*time.Minute, "")
	l, ctx, dir, bin, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cluster
	lt.ids = append(lt.ids, holdGPUs(ctx, t, l, cluster, filler{"3", "8"}, filler{"1", "7"})...)
	submit := func(model string, globalBatch int, extra ...string) int {
		args := append([]string{"--model-type=" + model, "-p", "gpu", "-J", "e2e-deadline", "-N", "1", "--ntasks-per-node=1",
			"--gres=gpu:2", "--cpus-per-task=4", "--mem=16G", "--time=20", "--requeue"}, extra...)
		return l.submitScript(t, dir, shortTraining(bin, dir, model, globalBatch), &lt.ids, args...)
	}
	bert := submit("bert", 32)
	gpt2 := submit("gpt2", 16, "--deadline=now+40minutes")
	d := runDaemon(t, l, bin, dir, lt.cfgPath)

	jg := waitLeftPending(ctx, cluster, gpt2)
	jb, _ := cluster.Job(ctx, bert)
	// The gpt2 job is short: the bert job may have started after it.
	bertFirst := startedBy(jb, jg.StartTime)
	if jg.State != slurm.StateRunning && jg.State != slurm.StateCompleted || bertFirst {
		t.Fatalf("gpt2 job %d %s (started %v), bert job %d %s (started %v); want the gpt2 job started first; rubickd log %s",
			gpt2, jg.State, jg.StartTime, bert, jb.State, jb.StartTime, d.log)
	}
	st, err := store.Open(ctx, lt.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The daemon goes on after the start: later cycles record keep reasons
	// for the running job, so the start's own reason is the one to check.
	rs, err := st.Reasons(ctx, int64(gpt2), 0)
	start := startReason(rs)
	if err != nil || !strings.Contains(start, `"reason":"deadline"`) {
		t.Errorf("gpt2 job %d: reason of its start %s (%v), want deadline; newest %s", gpt2, start, err, reasonOf(rs))
	}
}

// waitLeftPending polls job id until Slurm reports it other than pending
// (or ctx ends) and returns it as last read.
func waitLeftPending(ctx context.Context, cluster slurm.Cluster, id int) slurm.Job {
	var j slurm.Job
	for ctx.Err() == nil {
		var err error
		if j, err = cluster.Job(ctx, id); err == nil && j.State != slurm.StatePending {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return j
}

// startedBy reports whether j has started, at t or before.
func startedBy(j slurm.Job, t time.Time) bool {
	return j.State != slurm.StatePending && !j.StartTime.After(t)
}

// startReason is the newest reason of kind start in rs (newest first), or
// "none".
func startReason(rs []store.Reason) string {
	for _, r := range rs {
		if strings.Contains(string(r.Reason), `"kind":"start"`) {
			return string(r.Reason)
		}
	}
	return "none"
}

func reasonOf(rs []store.Reason) string {
	if len(rs) == 0 {
		return "none"
	}
	return fmt.Sprint(string(rs[0].Reason))
}
