//go:build e2e

package e2e

import (
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

	lt.startsFirst(t, d, job{gpt2, "gpt2 job"}, job{bert, "bert job"})
	lt.wantStartReason(t, gpt2, "deadline")
}

// job names a lab job in a failure message.
type job struct {
	id   int
	name string
}

// startsFirst waits until first leaves pending and fails the test unless
// it then runs or has run, and second had not started before it (second
// may start after it: both may be short). d's log is named on failure.
func (lt *labTest) startsFirst(t *testing.T, d *daemonProc, first, second job) {
	t.Helper()
	var jf slurm.Job
	for lt.ctx.Err() == nil {
		var err error
		if jf, err = lt.cluster.Job(lt.ctx, first.id); err == nil && jf.State != slurm.StatePending {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	js, _ := lt.cluster.Job(lt.ctx, second.id)
	secondFirst := js.State != slurm.StatePending && !js.StartTime.After(jf.StartTime)
	if jf.State != slurm.StateRunning && jf.State != slurm.StateCompleted || secondFirst {
		t.Fatalf("%s %d %s (started %v), %s %d %s (started %v); want the %s started first; rubickd log %s",
			first.name, first.id, jf.State, jf.StartTime, second.name, second.id, js.State, js.StartTime, first.name, d.log)
	}
}

// wantStartReason fails the test unless the reason the store keeps for
// job id's start has code reason. The daemon goes on after the start:
// later cycles record keep reasons for the running job, so the start's own
// reason is the one to check.
func (lt *labTest) wantStartReason(t *testing.T, id int, reason string) {
	t.Helper()
	st, err := store.Open(lt.ctx, lt.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs, err := st.Reasons(lt.ctx, int64(id), 0)
	if start := startReason(rs); err != nil || !strings.Contains(start, `"reason":"`+reason+`"`) {
		t.Errorf("job %d: reason of its start %s (%v), want %s; newest %s", id, start, err, reason, reasonOf(rs))
	}
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
