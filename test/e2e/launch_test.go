//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// TestLaunchLineRefusal: on one free GPU llama7 fits only with ZeRO-Offload,
// which a Megatron-DeepSpeed line without a DeepSpeed config cannot
// express. With read_batch_scripts off, rubickd first plans the job with
// offload, and rubick-srun refuses the plan instead of failing the job: it
// tells rubickd (over munge) what the line cannot run and requeues the job
// held. With it on (the default), rubickd reads that off the job's batch
// script and never gives it such a plan. Either way rubickd, finding no
// plan the line can run on the job's one GPU, plans it from two (the cycle
// report says so) and starts it when GPUs free up, with a plan without
// offload; the job completes, and its user is mailed once when it begins
// and once when it ends.
func TestLaunchLineRefusal(t *testing.T) {
	for _, read := range []bool{false, true} {
		t.Run(fmt.Sprintf("read_batch_scripts=%v", read), func(t *testing.T) { launchLineRefusal(t, read) })
	}
}

func launchLineRefusal(t *testing.T, readScripts bool) {
	l := labFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, bin := buildInto(t, "launch")
	smp := newSamples(t)
	cfgPath, _, dbPath := writeConfig(t, l, dir, smp.config()+fmt.Sprintf("log_level: debug\nread_batch_scripts: %v\n", readScripts))
	cluster := l.cluster(ctx, t)
	var ids []string
	defer scancelAll(l, &ids)

	// Rigid jobs hold all but one GPU of the lab. The job asks for host memory
	// enough for ZeRO-Offload of 7B parameters.
	ids = append(ids, holdGPUs(ctx, t, l, cluster, filler{"3", "8"}, filler{"1", "7"})...)
	seven := ids[len(ids)-1]

	d := newDaemon(t, l, bin, dir, cfgPath)
	d.start()
	defer d.stop()

	// Refused, the job runs long enough after its restart for rubickd to
	// give back its mails (a few cycles).
	iters := 20
	if !readScripts {
		iters = 400
	}
	body := fmt.Sprintf(`#!/bin/bash
exec %[1]s/rubick-srun --launcher gpu --dialect megatron-deepspeed --munge-socket %[3]s \
  --report-url http://127.0.0.1:%[4]d/samples -- \
  %[1]s/rubick-emu-trainer --model-type llama7 --deepspeed --tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 8 --train-iters %[5]d \
  --time-scale 0.01 --log-interval 5 --save %[2]s/ckpt-"$SLURM_JOB_ID"
`, bin, dir, smp.socket, smp.port, iters)
	submitted := time.Now()
	id := l.submitScript(t, dir, body, &ids, "--model-type=llama7", "-p", "gpu", "-J", "e2e-launch", "-N", "1",
		"--ntasks-per-node=1", "--gres=gpu:1", "--cpus-per-task=8", "--mem=200G", "--requeue", "--mail-type=ALL")

	// After the refusal, or at once with the script read, rubickd plans
	// the job from two GPUs, which are not free yet.
	var rep daemon.CycleReport
	for ctx.Err() == nil {
		if rep = cycleReport(t, smp.port); rep.Adjusted[id] != "" {
			break
		}
		time.Sleep(time.Second)
	}
	if why := rep.Adjusted[id]; !strings.Contains(why, "without offload") || !strings.HasSuffix(why, "planned from 2 GPUs on 1 node") {
		t.Fatalf("cycle report says the request was adjusted: %q, want without offload, from 2 GPUs; rubickd log %s", why, d.log)
	}
	if j, err := cluster.Job(ctx, id); err != nil || j.State != slurm.StatePending {
		t.Fatalf("job %d: %s (%v), want it pending until GPUs free up", id, j.State, err)
	}
	l.run(t, "scancel", seven)

	var (
		j   slurm.Job
		err error
	)
	for ctx.Err() == nil {
		if j, err = cluster.Job(ctx, id); err == nil && j.Ended() {
			break
		}
		time.Sleep(time.Second)
	}
	ended := time.Now()
	jobOut, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("job-%d.out", id)))
	if j.State != slurm.StateCompleted {
		t.Fatalf("job %d ended %s, want COMPLETED; rubickd log %s; job output:\n%s", id, j.State, d.log, jobOut)
	}
	for _, want := range []string{"the launch line cannot run this plan", "+off", "job requeued held for rubickd to restart it", "launching"} {
		wantHas := want == "launching" || !readScripts // the refusal's lines only without the script's read
		if has := strings.Contains(string(jobOut), want); has != wantHas {
			t.Errorf("job output has %q: %v, want %v:\n%s", want, has, wantHas, jobOut)
		}
	}
	if readScripts && j.RestartCount != 0 {
		t.Errorf("job %d restarted %d times, want none", id, j.RestartCount)
	}
	if j.Tag == nil || strings.Contains(j.Tag.Plan, "+off") || j.GPUs < 2 {
		t.Errorf("job %d ran on %d GPUs with tag %+v, want a plan without offload on 2 or more", id, j.GPUs, j.Tag)
	}
	// rubick-srun took BEGIN and REQUEUE out of the job's mail types before
	// it requeued the job: one start mailed, not two, and no requeue.
	checkMails(ctx, t, id, submitted, map[string]int{"Began": 1, "Ended": 1})
	// Running again (for several cycles), the job got back the mail types
	// rubick-srun took out: its requeue's mark kept them, and rubickd moved
	// them into the tag.
	t.Logf("job %d ended within %v of its last start", id, ended.Sub(j.StartTime).Round(time.Second))
	if mt := jobMailType(t, l, id); !strings.Contains(mt, "BEGIN") || !strings.Contains(mt, "REQUEUE") ||
		j.Tag == nil || j.Tag.Extra[slurm.TagMail] != "" || strings.Contains(j.Comment, slurm.MailWordPrefix) {
		t.Errorf("job %d ended with MailType=%s, tag %v, comment %q; want BEGIN and REQUEUE back, no mail word or %s= left; rubickd log %s",
			id, mt, j.Tag, j.Comment, slurm.TagMail, d.log)
	}
	log, _ := os.ReadFile(d.log)
	if has := strings.Contains(string(log), "launch line cannot run the job's plan"); has == readScripts {
		t.Errorf("rubickd logged a refusal: %v, want %v (%s)", has, !readScripts, d.log)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", smp.port))
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if has := strings.Contains(string(metrics), `rubick_launch_notices_total{result="refused"} 1`); has == readScripts {
		t.Errorf("metrics show one refused launch notice: %v, want %v:\n%s", has, !readScripts, metrics)
	}
	st, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.LaunchLimits(ctx, []store.LaunchKey{{ID: int64(id)}})
	if err != nil || got[int64(id)].Cannot != model.FeatureOffload {
		t.Errorf("stored launch limits %v (%v), want offload for job %d", got, err, id)
	}
	// The refusal is in the job's plan history, so the report counts the
	// requeue after it as rubick's reconfiguration.
	hist, err := st.PlanHistory(ctx, int64(id))
	if err != nil {
		t.Fatal(err)
	}
	refused := slices.ContainsFunc(hist, func(a store.Action) bool { return a.Kind == store.KindRefused && a.Plan.Offload })
	if refused == readScripts {
		t.Errorf("plan history %+v has the refusal of an offload plan: %v, want %v", hist, refused, !readScripts)
	}
	if got := reportedRequeues(ctx, t, l, bin, dbPath, id, j.RestartCount+1); got != (requeues{Reconfigs: j.RestartCount}) {
		t.Errorf("rubick report counts job %d's %d requeues as %+v, want all rubick's", id, j.RestartCount, got)
	}
}

// requeues is how rubick report counts a job's requeues.
// requeues is what rubick report says of a job's requeues: rubick's
// reconfigurations, and interruptions with those by cause.
type requeues struct{ Reconfigs, Interruptions, NodeFail, Preempted, Other int }

// reportedRequeues runs rubick report with the store at db on job id,
// once sacct has its runs (slurmdbd may lag behind slurmctld).
func reportedRequeues(ctx context.Context, t *testing.T, l lab, bin, db string, id, runs int) requeues {
	t.Helper()
	var got requeues
	for ctx.Err() == nil {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "rubick"), "report", "--json", "--jobs", "--store", db, "--since", "-1h")
		cmd.Env = l.env
		out, _ := cmd.Output()
		var r struct {
			Jobs []struct {
				JobID            string `json:"job_id"`
				Finished         bool   `json:"finished"`
				Runs             []any  `json:"runs"`
				Reconfigurations int    `json:"reconfigurations"`
				Interruptions    int    `json:"interruptions"`
				NodeFail         int    `json:"interruptions_node_fail"`
				Preempted        int    `json:"interruptions_preempted"`
				Other            int    `json:"interruptions_other"`
			} `json:"jobs"`
		}
		if json.Unmarshal(out, &r) == nil {
			for _, j := range r.Jobs {
				if j.JobID == strconv.Itoa(id) && j.Finished && len(j.Runs) == runs {
					return requeues{j.Reconfigurations, j.Interruptions, j.NodeFail, j.Preempted, j.Other}
				}
			}
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("rubick report never showed job %d ended after %d runs", id, runs)
	return got
}

// cycleReport reads rubickd's last cycle report; the zero report while
// rubickd is not serving yet.
func cycleReport(t *testing.T, port int) daemon.CycleReport {
	t.Helper()
	var rep daemon.CycleReport
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/status", port))
	if err != nil {
		return rep
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
			t.Errorf("/status: %v", err)
		}
	}
	return rep
}

// TestOwnGlobalBatch: a gpt2 job (the model type's global batch is 16)
// whose Megatron line trains with --global-batch-size 32. rubickd reads
// the line off the job's batch script and plans it at 32 from its first
// start. With read_batch_scripts off it first plans it at 16; rubick-srun
// then runs nothing, reports the line's 32 and requeues the job held, and
// rubickd plans it again at 32. Either way it completes.
func TestOwnGlobalBatch(t *testing.T) {
	for _, read := range []bool{true, false} {
		t.Run(fmt.Sprintf("read_batch_scripts=%v", read), func(t *testing.T) { ownGlobalBatch(t, read) })
	}
}

func ownGlobalBatch(t *testing.T, readScripts bool) {
	smp := newSamples(t)
	lt := newLabTest(t, "batch", 2*time.Minute, smp.config()+fmt.Sprintf("log_level: debug\nread_batch_scripts: %v\n", readScripts))
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster
	d := runDaemon(t, l, bin, dir, cfgPath)

	body := fmt.Sprintf(`#!/bin/bash
GBS=32
exec %[1]s/rubick-srun --launcher gpu --munge-socket %[3]s --report-url http://127.0.0.1:%[4]d/samples -- \
  %[1]s/rubick-emu-trainer --model-type gpt2 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
  --micro-batch-size 1 --global-batch-size $GBS --train-iters 20 --time-scale 0.01 --log-interval 5 \
  --save %[2]s/ckpt-"$SLURM_JOB_ID"
`, bin, dir, smp.socket, smp.port)
	id := l.submitScript(t, dir, body, &lt.ids, "--model-type=gpt2", "-p", "gpu", "-J", "e2e-batch", "-N", "1",
		"--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue")
	j, _ := waitEnded(ctx, cluster, id)
	jobOut, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("job-%d.out", id)))
	if j.State != slurm.StateCompleted {
		t.Fatalf("job %d ended %s, want COMPLETED; rubickd log %s; job output:\n%s", id, j.State, d.log, jobOut)
	}
	for _, want := range []string{"--global-batch-size=32 but plan", "job requeued held for rubickd to restart it", "launching"} {
		wantHas := want == "launching" || !readScripts // the refusal's lines only without the script's read
		if has := strings.Contains(string(jobOut), want); has != wantHas {
			t.Errorf("job output has %q: %v, want %v:\n%s", want, has, wantHas, jobOut)
		}
	}
	if readScripts && j.RestartCount != 0 {
		t.Errorf("job %d restarted %d times, want none", id, j.RestartCount)
	}
	plan, err := model.ParsePlan(tagPlan(j))
	if err != nil || plan.DP*plan.MicroBatch*plan.Accum != 32 {
		t.Errorf("job %d ran plan %q (%v), want one of global batch 32", id, tagPlan(j), err)
	}
	st, err := store.Open(ctx, lt.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Under its model type, not its estimator's name (gpt2@gb32): rubick
	// explain finds its fit and prices its plans at its batch.
	if sj, err := st.Job(ctx, int64(id)); err != nil || sj.GlobalBatch != 32 || sj.ModelType != "gpt2" {
		t.Errorf("stored job %d: model type %q, global batch %d (%v), want gpt2 at 32", id, sj.ModelType, sj.GlobalBatch, err)
	}
	out := lt.run(t, filepath.Join(lt.bin, "rubick"), "explain", "--store", lt.dbPath, strconv.Itoa(id))
	for _, want := range []string{"model gpt2,", "global batch of 32", "\nfit #"} {
		if !strings.Contains(out, want) {
			t.Errorf("rubick explain %d lacks %q:\n%s", id, want, out)
		}
	}
}

func tagPlan(j slurm.Job) string {
	if j.Tag == nil {
		return ""
	}
	return j.Tag.Plan
}

// TestCancelAtTermSite: where the checkpoint signal is TERM (Megatron's
// --exit-signal-handler), the SIGTERM of a user's scancel reaches the
// trainer as a checkpoint signal: it saves and exits 75. rubick-srun then
// leaves the job to end CANCELLED. Before, it requeued the job held, and
// the cancelled job came back pending, waiting for its user's release.
func TestCancelAtTermSite(t *testing.T) {
	lt := newLabTest(t, "termcancel", 2*time.Minute, "checkpoint:\n  signal: TERM\n")
	l, ctx, cluster := lt.lab, lt.ctx, lt.cluster
	d := runDaemon(t, l, lt.bin, lt.dir, lt.cfgPath)
	script := strings.Replace(longTraining(lt.bin, lt.dir), "rubick-srun --launcher gpu", "rubick-srun --launcher gpu --signal TERM", 1)
	id := l.submitScript(t, lt.dir, script, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-termcancel", "-N", "1",
		"--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G")
	// Running, and training: the trainer has written its first progress
	// line, so it has its signal handler.
	out := filepath.Join(lt.dir, "job-"+strconv.Itoa(id)+".out")
	for ctx.Err() == nil {
		b, _ := os.ReadFile(out)
		if j, err := cluster.Job(ctx, id); err == nil && j.State == slurm.StateRunning && strings.Contains(string(b), " iteration ") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	l.run(t, "scancel", strconv.Itoa(id))
	// Either it ends, or it is requeued (pending again, restarted once).
	var j slurm.Job
	for ctx.Err() == nil {
		var err error
		if j, err = cluster.Job(ctx, id); err == nil && (j.Ended() || j.State == slurm.StatePending && j.RestartCount > 0) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	b, _ := os.ReadFile(out)
	if j.State != slurm.StateCancelled || j.RestartCount != 0 {
		t.Errorf("job %d after scancel: %s, %d restarts; want CANCELLED, never requeued; its output:\n%s\nrubickd log %s", id, j.State, j.RestartCount, b, d.log)
	}
	if !strings.Contains(string(b), "not requeued: Slurm is ending the job") {
		t.Errorf("job %d: rubick-srun does not say it left the cancelled job alone:\n%s", id, b)
	}
}
