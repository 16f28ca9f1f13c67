//go:build e2e

package e2e

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// TestDependency: a rubick job submitted with --dependency on a running
// job is not planned while it waits (GPUs given to it would stay idle);
// once its dependency ends, rubickd plans and starts it. So with one
// submitted with --begin: rubickd sizes it once its begin time has come
// (before it read the begin time, it released the job at once). A job an
// admin held (scontrol hold) is not rubick's to release; their release
// hands it to rubickd. One moved out of rubick's partitions is released,
// and so is one held for rubick by rubickd --release-all. One submitted
// outside them and moved in by root is tagged and held for rubickd.
func TestDependency(t *testing.T) {
	lt := newLabTest(t, "dependency", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, dbPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.dbPath, lt.cluster

	first := holdGPUs(ctx, t, l, cluster, filler{"1", "1"})
	lt.ids = append(lt.ids, first...)
	body := shortTraining(bin, dir, "bert", 32)
	held := l.submitScript(t, dir, body, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-held", "-N", "1", "--gres=gpu:1", "--requeue")
	l.run(t, "scontrol", "hold", strconv.Itoa(held))
	// A job held for rubickd and moved out of its partitions is released
	// with the move (job_submit.lua): nothing would release it otherwise,
	// not even its user.
	moved := l.submitScript(t, dir, "#!/bin/bash\ntrue\n", &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-moved", "-N", "1", "--gres=gpu:1")
	l.run(t, "scontrol", "update", "JobId="+strconv.Itoa(moved), "Partition=debug")
	if j, err := cluster.Job(ctx, moved); err != nil || j.Held || j.Partition != "debug" {
		t.Errorf("job %d moved to partition debug: %s in %s, held %v (%v); want released", moved, j.State, j.Partition, j.Held, err)
	}
	// rubickd --release-all hands the jobs held for rubick back to Slurm,
	// each on its own request; the administrator's hold stays.
	rel := l.submitScript(t, dir, "#!/bin/bash\ntrue\n", &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-release-all", "-N", "1", "--gres=gpu:1")
	l.run(t, filepath.Join(bin, "rubickd"), "--config", cfgPath, "--release-all")
	if j, err := cluster.Job(ctx, rel); err != nil || j.Held || j.Tag == nil || j.Tag.Plan != "" || j.Tag.Generation != 1 {
		t.Errorf("job %d after rubickd --release-all: %s, held %v, tag %v (%v); want released unplanned", rel, j.State, j.Held, j.Tag, err)
	}
	if j, err := cluster.Job(ctx, held); err != nil || !slurm.HeldByAdmin(j) {
		t.Errorf("admin-held job %d after rubickd --release-all: %s (%s, %v), want still held by the administrator", held, j.State, j.Reason, err)
	}
	// Moved in by root (with its --begin brought forward): tagged and held
	// for rubickd, in Slurm's hold marked rubick's (root's update places
	// an administrator's). Before, it was untouched and ran as submitted.
	movedIn := l.submitScript(t, dir, "#!/bin/bash\ntrue\n", &lt.ids, "--model-type=bert", "-p", "debug", "-J", "e2e-moved-in", "-N", "1", "--gres=gpu:1",
		"--begin=now+1hour")
	l.run(t, "scontrol", "update", "JobId="+strconv.Itoa(movedIn), "Partition=gpu", "StartTime=now")
	if j, err := cluster.Job(ctx, movedIn); err != nil || !j.Held || j.Tag == nil || j.Tag.ModelType != "bert" || !j.Requeue ||
		!strings.Contains(j.AdminComment, slurm.RubickHeldField) || slurm.HeldByAdmin(j) {
		t.Errorf("job %d moved into partition gpu: %s (%s), held %v, requeue %v, admin comment %q (%v); want held for rubick, tagged bert",
			movedIn, j.State, j.Reason, j.Held, j.Requeue, j.AdminComment, err)
	}
	d := runDaemon(t, l, bin, dir, cfgPath)

	id := l.submitScript(t, dir, body, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-dependency", "-N", "1",
		"--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue", "--dependency=afterany:"+first[0])

	later := l.submitScript(t, dir, body, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-begin", "-N", "1",
		"--ntasks-per-node=1", "--gres=gpu:1", "--requeue", "--begin=now+20")

	// A few cycles: still held, nothing planned.
	lt.waitCycles(t, d, 3)
	j, err := cluster.Job(ctx, id)
	if err != nil || j.State != slurm.StatePending || !j.Held || j.Dependency == "" {
		t.Fatalf("job %d while its dependency runs: %s, held %v, dependency %q (%v); want pending, held, waiting", id, j.State, j.Held, j.Dependency, err)
	}
	if j, err := cluster.Job(ctx, later); err != nil || j.State != slurm.StatePending || !j.Held || !j.EligibleTime.After(time.Now()) {
		t.Fatalf("job %d before its begin time: %s, held %v, eligible %v (%v); want pending and held", later, j.State, j.Held, j.EligibleTime, err)
	}
	// Their reasons are stored once; rubick queue --all still lists both
	// in the newest cycle, with the cycle that stored the reason.
	lt.wantLeftAlone(t, id, "waits for dependency afterany:"+first[0])
	lt.wantLeftAlone(t, later, "waits for its begin time")
	cancelled := time.Now()
	l.run(t, "scancel", first[0])
	j, _ = waitEnded(ctx, cluster, id)
	if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" {
		t.Fatalf("job %d ended %s, tag %v; want COMPLETED on a plan rubickd chose; rubickd log %s", id, j.State, j.Tag, d.log)
	}
	j, _ = waitEnded(ctx, cluster, later)
	if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" || j.StartTime.Before(j.EligibleTime) {
		t.Fatalf("job %d ended %s, tag %v, started %v, eligible %v; want COMPLETED on a plan rubickd chose, after its begin time; rubickd log %s",
			later, j.State, j.Tag, j.StartTime, j.EligibleTime, d.log)
	}
	st, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	j = completedOnPlan(t, lt, d, movedIn)
	if strings.Contains(j.AdminComment, slurm.RubickHeldField) {
		t.Errorf("job %d ended with admin comment %q; want %s gone with rubickd's release", movedIn, j.AdminComment, slurm.RubickHeldField)
	}
	for _, id := range []int{id, later, movedIn} {
		hist, err := st.PlanHistory(ctx, int64(id))
		if err != nil || len(hist) != 1 {
			t.Errorf("plan history of job %d: %+v (%v), want one start, after its dependency ended or its begin time came", id, hist, err)
		}
	}
	// Each queued from the end of its wait (its age for the starvation
	// rule), which the store keeps: the last cycle rubickd saw it wait.
	checkLastWait(t, lt, id, cancelled)
	if j, err := cluster.Job(ctx, later); err != nil {
		t.Fatal(err)
	} else {
		checkLastWait(t, lt, later, j.EligibleTime)
	}
	// The administrator's hold stays rubick's hold, marked
	// (job_submit.lua), and its release hands the job to rubickd. Before,
	// it was Slurm's (JobHeldAdmin), whose release started the job as
	// submitted, unplanned.
	if j, err := cluster.Job(ctx, held); err != nil || !slurm.HeldByAdmin(j) || j.Reason == "JobHeldAdmin" || (j.Tag != nil && j.Tag.Plan != "") {
		t.Fatalf("admin-held job %d: %s (%s, admin comment %q, %v), want still pending, held by rubick with %s, unplanned",
			held, j.State, j.Reason, j.AdminComment, err, slurm.AdminHoldField)
	}
	l.run(t, "scontrol", "release", strconv.Itoa(held))
	j, _ = waitEnded(ctx, cluster, held)
	if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" || strings.Contains(j.AdminComment, slurm.AdminHoldField) {
		t.Fatalf("job %d after the administrator's release: ended %s, admin comment %q; want COMPLETED on a plan rubickd chose; rubickd log %s",
			held, j.State, j.AdminComment, d.log)
	}
}

// TestUserHold: a job submitted with --hold (job_submit.lua writes
// rubick:hold in its comment) is its user's to release: rubickd leaves it
// held, and starts it on a plan of its own once the release (which takes
// the word out and leaves the job held for rubickd) comes. Before rubickd
// read the word, it started the job at once. So is a running job
// requeued held by hand.
func TestUserHold(t *testing.T) {
	lt := newLabTest(t, "userhold", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster
	d := runDaemon(t, l, bin, dir, cfgPath)
	// --export=NONE as well, with the trainer found on the PATH the
	// script sets, as python is: srun then exported nothing to the
	// trainer's step, not even PATH, until rubick-srun passed
	// --export=ALL.
	body := strings.Replace(shortTraining(bin, dir, "bert", 32), bin+"/rubick-emu-trainer", "rubick-emu-trainer", 1)
	body = strings.Replace(body, "\n", "\nexport PATH="+bin+":$PATH\n", 1)
	id := l.submitScript(t, dir, body, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-userhold",
		"-N", "1", "--gres=gpu:1", "--requeue", "--hold", "--comment=my note", "--export=NONE")

	// A few cycles: still held, nothing planned.
	lt.waitCycles(t, d, 3)
	j, err := cluster.Job(ctx, id)
	if err != nil || !slurm.HeldByUser(j) || j.Tag == nil || j.Tag.Plan != "" {
		t.Fatalf("job %d before its release: %s, held %v, comment %q, tag %v (%v); want held by its user, unplanned; rubickd log %s",
			id, j.State, j.Held, j.Comment, j.Tag, err, d.log)
	}
	if out := l.run(t, filepath.Join(bin, "rubick"), "explain", "--store", lt.dbPath, strconv.Itoa(id)); !strings.Contains(out, "(ignored)") ||
		!strings.Contains(out, "held by its user") {
		t.Errorf("rubick explain %d does not say the job is held by its user:\n%s", id, out)
	}
	released := time.Now()
	l.run(t, "scontrol", "release", strconv.Itoa(id))
	j, _ = waitEnded(ctx, cluster, id)
	if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" || j.Comment != "my note" {
		t.Fatalf("job %d ended %s, tag %v, comment %q; want COMPLETED on a plan rubickd chose, the comment without the word; rubickd log %s",
			id, j.State, j.Tag, j.Comment, d.log)
	}
	checkLastWait(t, lt, id, released)

	// A running job requeued held by hand (scontrol requeuehold, which
	// Slurm reports as the user's hold) waits for the release as well:
	// rubickd marks it held by its user. Before rubickd read the restart
	// count in its tag, it started the job again at its next cycle.
	id = l.submitScript(t, dir, "#!/bin/bash\nsleep 120\n", &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-requeuehold",
		"-N", "1", "--gres=gpu:1", "--requeue")
	ref := strconv.Itoa(id)
	waitRunning(ctx, cluster, ref)
	l.run(t, "scontrol", "requeuehold", ref)
	lt.waitCycles(t, d, 3)
	j, err = cluster.Job(ctx, id)
	if err != nil || !slurm.HeldByUser(j) || j.RestartCount != 1 {
		t.Fatalf("job %d after scontrol requeuehold: %s, held %v, comment %q, %d restarts, tag %v (%v); want held by its user; rubickd log %s",
			id, j.State, j.Held, j.Comment, j.RestartCount, j.Tag, err, d.log)
	}
	released = time.Now()
	l.run(t, "scontrol", "release", ref)
	waitRunning(ctx, cluster, ref)
	checkLastWait(t, lt, id, released)
	// The word was its whole comment: job_submit.lua leaves a blank, as
	// Slurm would not clear it (before, the word stayed and the job with
	// it, held for good).
	if j, err = cluster.Job(ctx, id); err != nil || j.State != slurm.StateRunning || strings.TrimSpace(j.Comment) != "" || j.Tag == nil || j.Tag.Extra[slurm.TagRestarts] != "1" {
		t.Errorf("job %d after its release: %s, comment %q, tag %v (%v); want running again, no word in its comment, started by rubickd (rc=1); rubickd log %s",
			id, j.State, j.Comment, j.Tag, err, d.log)
	}
	l.run(t, "scancel", ref)
	// rubickd started it again (gen= one more), but the requeue was not
	// rubick's: its plan history has no restart while the first run ran.
	if got := reportedRequeues(lt.ctx, t, l, bin, lt.dbPath, id, 2); got != (requeues{Interruptions: 1, Other: 1}) {
		t.Errorf("rubick report counts job %d's requeue by hand as %+v, want an interruption", id, got)
	}
}

// checkLastWait checks that the store's last sighting of job id held or
// waiting for its --begin or dependencies (its age in the queue counts
// from then) came within 5 s of ended, when the wait ended: cycles come
// every 2 s, Slurm's times are whole seconds, and a cancelled job the
// wait is for takes a moment to end.
func checkLastWait(t *testing.T, lt *labTest, id int, ended time.Time) {
	t.Helper()
	st, err := store.Open(lt.ctx, lt.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	waits, err := st.Deferred(lt.ctx, []int64{int64(id)})
	if err != nil {
		t.Fatal(err)
	}
	if w := waits[int64(id)]; w.Before(ended.Add(-5*time.Second)) || w.After(ended.Add(5*time.Second)) {
		t.Errorf("job %d: last seen held or waiting %v; want within 5 s of its wait's end (%v)", id, w, ended)
	}
}

// TestPartitionDown: Slurm starts no job in a DOWN partition, so rubickd
// leaves a job queued there held rather than size it for nothing (before
// it read the partition's state, it released the job at once, and the job
// waited with PartitionDown on the size chosen then).
func TestPartitionDown(t *testing.T) {
	lt := newLabTest(t, "partition-down", 2*time.Minute, "")
	l, dir, bin, cfgPath := lt.lab, lt.dir, lt.bin, lt.cfgPath
	l.run(t, "scontrol", "update", "PartitionName=gpu", "State=DOWN")
	t.Cleanup(func() { l.run(t, "scontrol", "update", "PartitionName=gpu", "State=UP") })
	d := runDaemon(t, l, bin, dir, cfgPath)
	id := l.submitScript(t, dir, shortTraining(bin, dir, "bert", 32), &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-partition-down",
		"-N", "1", "--gres=gpu:1", "--requeue")
	heldUnplanned(t, lt, d, id, "in a DOWN partition")
}

// TestWaitsBehindRigidJob: a job without a model type holds something a
// rubick job needs, and the rubick job stays held meanwhile, then runs on
// a plan rubickd chose. Before rubickd read these, it sized and released
// the job at once, for a cluster it started on later:
//   - "license": the lab's one matlab license (Licenses=matlab:1), which
//     the rubick job asks for (-L matlab:1);
//   - "singleton": --dependency=singleton behind the running job of its
//     name and user.
func TestWaitsBehindRigidJob(t *testing.T) {
	for _, tc := range []struct {
		name, while string
		holder, job []string // their sbatch arguments beside the usual
	}{
		{"license", "while its license is taken", []string{"-L", "matlab:1"}, []string{"-L", "matlab:1"}},
		{"singleton", "while an earlier job of its name runs", []string{"-J", "e2e-chain"}, []string{"-J", "e2e-chain", "--dependency=singleton"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := newLabTest(t, tc.name, 2*time.Minute, "")
			l, dir, bin, cfgPath := lt.lab, lt.dir, lt.bin, lt.cfgPath
			args := append([]string{"sbatch", "--parsable", "-p", "debug", "-N", "1", "-o", "/dev/null"}, tc.holder...)
			holder := strings.Split(l.run(t, append(args, "--wrap", "sleep 14")...), ";")[0]
			lt.ids = append(lt.ids, holder)
			// Running before rubickd's first cycle: a holder Slurm has not
			// started yet holds nothing (a CI run saw the license free).
			waitRunning(lt.ctx, lt.cluster, holder)
			d := runDaemon(t, l, bin, dir, cfgPath)
			args = append([]string{"--model-type=bert", "-p", "gpu", "-N", "1", "--gres=gpu:1", "--requeue"}, tc.job...)
			id := l.submitScript(t, dir, shortTraining(bin, dir, "bert", 32), &lt.ids, args...)
			heldUnplanned(t, lt, d, id, tc.while)
			completedOnPlan(t, lt, d, id)
		})
	}
}

// heldUnplanned fails the test unless job id, after a few of rubickd's
// cycles, is still pending and held, without a plan: rubickd left it alone
// while what says.
func heldUnplanned(t *testing.T, lt *labTest, d *daemonProc, id int, while string) {
	t.Helper()
	lt.waitCycles(t, d, 3)
	j, err := lt.cluster.Job(lt.ctx, id)
	if err != nil || j.State != slurm.StatePending || !j.Held || j.Tag == nil || j.Tag.Plan != "" {
		t.Fatalf("job %d %s: %s (%s), held %v, tag %v (%v); want pending, held, unplanned; rubickd log %s",
			id, while, j.State, j.Reason, j.Held, j.Tag, err, d.log)
	}
}

// completedOnPlan waits for job id to end and fails the test unless it
// completed on a plan rubickd chose.
func completedOnPlan(t *testing.T, lt *labTest, d *daemonProc, id int) slurm.Job {
	t.Helper()
	j, _ := waitEnded(lt.ctx, lt.cluster, id)
	if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" {
		t.Fatalf("job %d ended %s (%s), tag %v; want COMPLETED on a plan rubickd chose; rubickd log %s", id, j.State, j.Reason, j.Tag, d.log)
	}
	return j
}

// wantLeftAlone fails the test unless rubick queue --all lists job id
// among the other jobs of rubickd's newest cycle, queued, left alone for
// a reason that starts with why and was stored in an earlier cycle. It
// asks again for up to 10 s: the newest cycle may still be the one that
// stored the reason.
func (lt *labTest) wantLeftAlone(t *testing.T, id int, why string) {
	t.Helper()
	var out string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Second) {
		out = lt.lab.run(t, filepath.Join(lt.bin, "rubick"), "queue", "--store", lt.dbPath, "--json", "--all")
		var q struct {
			CycleID int64 `json:"cycle_id"`
			Others  []struct {
				JobID      int    `json:"job_id"`
				Queued     bool   `json:"queued"`
				Reason     string `json:"reason"`
				Detail     string `json:"detail"`
				SinceCycle int64  `json:"since_cycle"`
			} `json:"others"`
		}
		if err := json.Unmarshal([]byte(out), &q); err != nil {
			t.Fatalf("rubick queue --all: %v\n%s", err, out)
		}
		for _, e := range q.Others {
			if e.JobID == id && e.Queued && e.Reason == "ignored" && strings.HasPrefix(e.Detail, why) && e.SinceCycle > 0 && e.SinceCycle < q.CycleID {
				return
			}
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Errorf("rubick queue --all does not list job %d left alone (%q) since an earlier cycle:\n%s", id, why, out)
}
