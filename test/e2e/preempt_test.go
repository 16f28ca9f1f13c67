//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// TestPreemptionResumes: rigid fillers hold three of the lab's four nodes,
// a best-effort bert job runs on the fourth, and then a guaranteed roberta
// job asks for that node. With policy.reclaim_keep: 1 no best-effort job
// may be shrunk, so rubickd preempts bert whole: rubick-srun checkpoints it
// on the signal and it is requeued held. The guaranteed job runs, and bert
// is started again and resumes from its checkpoint. TestEndToEnd reclaims
// by a shrink or a preemption, whichever its run falls on; this test takes
// the preemption path every time. Both jobs complete every iteration.
//
// bert asks for 30 minutes, and an administrator raises that to 200 while
// it runs: the start after the preemption keeps the 200 (before rubick
// read a limit set by hand, it set the user's 30 again). The preemption
// writes what bert has run into its tag (ran=, before: never written).
//
// bert asks for every mail (--mail-type=ALL): it gets one when it begins
// and one when it ends, none at the preemption or the restart (before:
// "Requeued" and a second "Began"); once it runs again its mail types are
// all back (before: BEGIN and REQUEUE stayed out for good).
func TestPreemptionResumes(t *testing.T) {
	lt := newLabTest(t, "preempt", 4*time.Minute, `tenant_from: qos
tenants:
  - name: lab-guaranteed
    match: [guaranteed]
    quota_gpus: 8
checkpoint:
  signal: USR1
  grace: 30s
restart_cost: 1s
policy:
  reclaim_keep: 1
listen: ""
log_level: debug
`)
	lt.ids = append(lt.ids, holdGPUs(lt.ctx, t, lt.lab, lt.cluster, filler{"3", "8"})...)
	d := runDaemon(t, lt.lab, lt.bin, lt.dir, lt.cfgPath)

	script := filepath.Join(lt.dir, "train.sh")
	if err := os.WriteFile(script, []byte(trainScript(lt.bin, lt.dir)), 0o755); err != nil {
		t.Fatal(err)
	}
	submit := func(js jobSpec) int {
		id := lt.submitTraining(t, lt.dir, script, js)
		lt.ids = append(lt.ids, strconv.Itoa(id))
		return id
	}
	const bertIters, robertaIters = 600, 150
	submitted := time.Now()
	// Its checkpoint takes 4 s to write: the preemption's ran= counts its
	// run to the requeue, that wait included.
	bert := submit(jobSpec{model: "bert", nodes: 1, gpus: 8, iters: bertIters, batch: 32, time: "30", mail: "ALL", saveMs: 4000})
	// Let bert run a few seconds (of its 25 or so) before the guaranteed
	// job comes: the trainer checkpoints on the signal.
	for lt.ctx.Err() == nil {
		if j, err := lt.cluster.Job(lt.ctx, bert); err == nil && j.State == slurm.StateRunning {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	lt.lab.run(t, "scontrol", "update", "JobId="+strconv.Itoa(bert), "TimeLimit=200")
	time.Sleep(8 * time.Second)
	roberta := submit(jobSpec{model: "roberta", nodes: 1, gpus: 8, iters: robertaIters, batch: 64, guaranteed: true})
	// Preempted, bert waits held for the node roberta runs on.
	var preemptedTag *slurm.Tag
	var ranTo time.Duration // bert's first run, as long as it was last seen
	for lt.ctx.Err() == nil && preemptedTag == nil {
		j, err := lt.cluster.Job(lt.ctx, bert)
		if err == nil && j.State == slurm.StatePending && j.RestartCount > 0 && j.Tag != nil && j.Tag.Extra["ran"] != "" {
			preemptedTag = j.Tag
		}
		if err == nil && j.State == slurm.StateRunning && j.RestartCount == 0 {
			ranTo = time.Since(j.StartTime)
		}
		if err == nil && (j.State == slurm.StateRunning && j.RestartCount > 0 || j.Ended()) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if preemptedTag == nil {
		t.Errorf("bert never seen pending after a requeue with ran= in its tag; rubickd log: %s", d.log)
	} else if ran, err := strconv.Atoi(preemptedTag.Extra["ran"]); err != nil || ran < 8 || float64(ran) < ranTo.Seconds()-2 || preemptedTag.Generation != 1 {
		t.Errorf("bert's tag while preempted: %v; want ran= its run to the requeue (8 s or more, %.1f s as last seen running) and gen=1; rubickd log: %s",
			preemptedTag, ranTo.Seconds(), d.log)
	} else {
		t.Logf("bert ran %s s to its preemption's requeue, last seen running %.1f s after its start", preemptedTag.Extra["ran"], ranTo.Seconds())
	}

	for _, id := range []int{roberta, bert} {
		if j, _ := waitEnded(lt.ctx, lt.cluster, id); j.State != slurm.StateCompleted {
			t.Fatalf("job %d ended %s (%s), want COMPLETED; rubickd log: %s", id, j.State, j.Reason, d.log)
		}
	}
	for id, want := range map[int]int{bert: bertIters, roberta: robertaIters} {
		if done, err := iterationsDone(filepath.Join(lt.dir, fmt.Sprintf("ckpt-%d", id))); err != nil || done != want {
			t.Errorf("job %d: %d iterations done (err %v), want %d", id, done, err, want)
		}
	}

	st, err := store.Open(lt.ctx, lt.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hist, err := st.PlanHistory(lt.ctx, int64(bert))
	if err != nil {
		t.Fatal(err)
	}
	preempted := false
	for _, a := range hist {
		preempted = preempted || a.Kind == string(slurm.ActionPreempt) && a.Result == store.ResultOK
	}
	j, err := lt.cluster.Job(lt.ctx, bert)
	if err != nil {
		t.Fatal(err)
	}
	_, resumed, _ := trainerLog(t, filepath.Join(lt.dir, fmt.Sprintf("job-%d.out", bert)))
	if !preempted || j.RestartCount == 0 || resumed == 0 {
		t.Errorf("bert: preempted %v, %d restarts, %d resumes from its checkpoint; want a preemption, a restart and a resume; actions %s; rubickd log: %s",
			preempted, j.RestartCount, resumed, actions(hist), d.log)
	}
	t.Logf("bert: %d restarts, %d resumes; actions %s; tag %v, time limit %v", j.RestartCount, resumed, actions(hist), j.Tag, j.TimeLimit)
	// The guaranteed job's start records its place in the admission order
	// (the only one queued) and its minimum GPUs, for rubick explain.
	rs, err := st.Reasons(lt.ctx, int64(roberta), 0)
	var start policy.Action
	if err != nil || json.Unmarshal([]byte(startReason(rs)), &start) != nil || start.Admission == nil ||
		*start.Admission != (policy.Admission{Position: 1, Of: 1, By: policy.OrderShortest}) || start.MinRes == nil || start.MinRes.GPUs < 1 || start.MinRes.GPUs > 8 {
		t.Errorf("roberta's start reason %s (%v); want admission 1 of 1 by shortest and min_res of 1 to 8 GPUs", startReason(rs), err)
	}
	if j.TimeLimit != 200*time.Minute || j.Tag == nil || j.Tag.Extra["tf"] != "1" || j.Tag.Extra["tl"] != "200" {
		t.Errorf("bert ended with a %v time limit, tag %v; want the 200 minutes set by hand, tf=1 tl=200", j.TimeLimit, j.Tag)
	}
	// Slurm moved bert's submit time to its requeue; rubick keeps the
	// first, for its age in the policy and for rubick explain.
	sj, err := st.Job(lt.ctx, int64(bert))
	if err != nil {
		t.Fatal(err)
	}
	if first := sj.Submitted; first.Before(submitted.Truncate(time.Second)) || first.After(submitted.Add(5*time.Second)) ||
		!j.SubmitTime.After(first) || j.Tag.Extra["sub"] != strconv.FormatInt(first.Unix(), 10) {
		t.Errorf("bert: stored submit time %v, Slurm's %v, tag %v; want the stored one at its submission (%v), Slurm's at its requeue, after it, and sub= the first",
			first, j.SubmitTime, j.Tag, submitted)
	}
	checkMails(lt.ctx, t, bert, submitted, map[string]int{"Began": 1, "Ended": 1})
	// Running again, bert got back the mail types rubick quieted for its
	// preemption: a requeue that is not rubick's would be mailed.
	mailType := jobMailType(t, lt.lab, bert)
	if !strings.Contains(mailType, "BEGIN") || !strings.Contains(mailType, "REQUEUE") || j.Tag.Extra[slurm.TagMail] != "" {
		t.Errorf("bert ended with MailType=%s, tag %v; want BEGIN and REQUEUE back, no %s= in the tag; rubickd log: %s", mailType, j.Tag, slurm.TagMail, d.log)
	}
}

// checkMails compares the mails Slurm sent about job id since (the lab's
// MailProg logs each to $LAB/log/mail.log, after the local time to the
// second; an earlier lab may have had a job of the same id) with want, by
// event, waiting a few seconds for the last: slurmctld mails from a queue.
func checkMails(ctx context.Context, t *testing.T, id int, since time.Time, want map[string]int) {
	t.Helper()
	path := filepath.Join(os.Getenv("LAB"), "log", "mail.log")
	var got map[string]int
	for try := 0; try < 20 && ctx.Err() == nil; try++ {
		b, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		got = map[string]int{}
		for _, line := range strings.Split(string(b), "\n") {
			// "2026-11-29T00:05:32 -s Slurm Job_id=7 Name=x Began, Queued time 00:00:01 root"
			at, rest, ok := strings.Cut(line, fmt.Sprintf(" -s Slurm Job_id=%d ", id))
			if !ok {
				continue
			}
			if when, err := time.ParseInLocation("2006-01-02T15:04:05", at, time.Local); err != nil || when.Before(since.Truncate(time.Second)) {
				continue
			}
			if f := strings.Fields(rest); len(f) > 1 {
				got[strings.TrimSuffix(f[1], ",")]++
			}
		}
		if maps.Equal(got, want) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("job %d: mails %v, want %v (%s)", id, got, want, path)
}

// actions lists a job's recorded actions as kind/result, oldest first.
func actions(h []store.Action) string {
	var out []string
	for _, a := range h {
		out = append(out, a.Kind+"/"+string(a.Result))
	}
	return strings.Join(out, " ")
}
