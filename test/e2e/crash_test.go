//go:build e2e

package e2e

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// TestUserRequeueHoldWhileRubickdDown: rubickd preempts a best-effort job
// for a guaranteed one and is killed during the checkpoint wait (the job's
// script ignores the signal), before its own requeue. While it is down the
// job's user requeues the job held. The restarted rubickd leaves it held
// for its user: the requeue is not at the restart count rubickd records
// before its own (before, Reconcile acknowledged it as rubick's and the
// job would have been started again), and the preemption is recorded
// abandoned.
func TestUserRequeueHoldWhileRubickdDown(t *testing.T) {
	lt := newLabTest(t, "userhold", 3*time.Minute, `tenant_from: qos
tenants:
  - name: lab-guaranteed
    match: [guaranteed]
    quota_gpus: 8
checkpoint:
  signal: USR1
  grace: 60s
restart_cost: 1s
policy:
  reclaim_keep: 1
listen: ""
`)
	lt.ids = append(lt.ids, holdGPUs(lt.ctx, t, lt.lab, lt.cluster, filler{"3", "8"})...)
	d := runDaemon(t, lt.lab, lt.bin, lt.dir, lt.cfgPath)
	submit := func(args ...string) int {
		id := parsableID(t, lt.lab.run(t, append([]string{"sbatch", "--parsable", "-p", "gpu", "-N1", "--gres=gpu:8", "--mem=8G", "-o", "/dev/null"}, args...)...))
		lt.ids = append(lt.ids, strconv.Itoa(id))
		return id
	}
	bert := submit("--model-type=bert", "--requeue", "--time=30", "--wrap", "trap '' USR1; sleep 600")
	waitRunning(lt.ctx, lt.cluster, strconv.Itoa(bert))
	submit("--model-type=roberta", "--qos=guaranteed", "--wrap", "sleep 600")

	st, err := store.Open(lt.ctx, lt.dbPath, store.ReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	preempt := func() (store.Action, bool) {
		hist, err := st.PlanHistory(lt.ctx, int64(bert))
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(hist, func(a store.Action) bool { return a.Kind == string(slurm.ActionPreempt) })
		if i < 0 {
			return store.Action{}, false
		}
		return hist[i], true
	}
	for _, ok := preempt(); !ok; _, ok = preempt() {
		if lt.ctx.Err() != nil {
			t.Fatalf("no preemption of job %d recorded; rubickd log: %s", bert, d.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // the signal sent, the checkpoint awaited
	d.kill()
	if a, _ := preempt(); a.Result != "" {
		t.Fatalf("the preemption was settled (%s) before rubickd was killed; rubickd log: %s", a.Result, d.log)
	}
	lt.lab.run(t, "scontrol", "requeuehold", strconv.Itoa(bert))
	d.start()
	lt.waitCycles(t, d, 3)

	j, err := lt.cluster.Job(lt.ctx, bert)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != slurm.StatePending || !j.Held || !slurm.HeldByUser(j) {
		b, _ := os.ReadFile(d.log)
		t.Errorf("job %d %s held=%t comment %q tag %v; want it held for its user; rubickd log:\n%s", bert, j.State, j.Held, j.Comment, j.Tag, b)
	}
	if a, _ := preempt(); a.Result != store.ResultAbandoned || !strings.Contains(a.Error, "requeued by its user") {
		t.Errorf("preemption %+v; want it abandoned, requeued by its user", a)
	}
}
