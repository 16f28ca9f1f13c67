//go:build e2e

package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// TestJobArray: a job array submitted with --model-type is one pending
// record until its tasks are split off. rubickd splits them and plans each
// task on its own (each has its own start in the plan history); releasing
// the record would have started every task alike, unplanned. Its limit of
// 2 running tasks (%2) holds: rubickd never releases a third while two
// run, which Slurm would keep pending (JobArrayTaskLimit) on GPUs planned
// for it.
func TestJobArray(t *testing.T) {
	lt := newLabTest(t, "array", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, dbPath := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.dbPath

	d := runDaemon(t, l, bin, dir, cfgPath)

	body := shortTraining(bin, dir, "bert", 32)
	id := l.submitScript(t, dir, body, &lt.ids, "--array=0-2%2", "--model-type=bert", "-p", "gpu", "-J", "e2e-array", "-N", "1",
		"--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue")

	// sacct lists each task with its own job id (JobIDRaw) once it ran.
	var tasks map[string]string // task (e.g. 12_0) -> job id
	most, waited := 0, ""       // the most tasks released or running at once; one Slurm kept for the limit
	for ctx.Err() == nil {
		n := 0
		for _, line := range strings.Split(strings.TrimSpace(l.run(t, "squeue", "-h", "-j", strconv.Itoa(id), "-o", "%i|%T|%r")), "\n") {
			f := strings.Split(line, "|")
			if len(f) != 3 {
				continue
			}
			if f[1] == "RUNNING" || f[1] == "PENDING" && f[2] != "JobHeldUser" {
				n++
			}
			if f[2] == "JobArrayTaskLimit" {
				waited = f[0]
			}
		}
		most = max(most, n)
		out := l.run(t, "sacct", "-P", "-X", "-n", "-j", strconv.Itoa(id), "-o", "JobID,JobIDRaw,State")
		tasks = map[string]string{}
		done := 0
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Split(line, "|")
			if len(f) != 3 || strings.Contains(f[0], "[") {
				continue
			}
			tasks[f[0]] = f[1]
			if f[2] == "COMPLETED" {
				done++
			} else if f[2] != "PENDING" && f[2] != "RUNNING" && !strings.HasPrefix(f[2], "REQUEUE") {
				t.Fatalf("task %s ended %s; rubickd log %s", f[0], f[2], d.log)
			}
		}
		if done == 3 {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if len(tasks) != 3 {
		t.Fatalf("array %d: tasks %v, want 3 completed; rubickd log %s", id, tasks, d.log)
	}
	// A task released as another completes may show JobArrayTaskLimit
	// until Slurm's next scheduling pass: logged, not failed.
	if most > 2 {
		t.Errorf("array %d: up to %d tasks released or running at once (task %q seen pending for JobArrayTaskLimit); want at most 2; rubickd log %s",
			id, most, waited, d.log)
	}
	t.Logf("array %d: up to %d tasks released or running at once; task seen pending for JobArrayTaskLimit: %q", id, most, waited)
	st, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for task, raw := range tasks {
		jid, _ := strconv.ParseInt(raw, 10, 64)
		hist, err := st.PlanHistory(ctx, jid)
		starts := 0
		for _, a := range hist {
			if a.Kind == "start" && a.Plan.GPUs() > 0 {
				starts++
			}
		}
		if err != nil || starts != 1 {
			t.Errorf("task %s (job %d): %d planned starts in the history (%v), want 1; rubickd log %s", task, jid, starts, err, d.log)
		}
		// rubick explain knows the task by the name squeue gives it.
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "rubick"), "explain", task, "--store", dbPath, "--json").Output()
		var ex struct {
			JobID     int64  `json:"job_id"`
			ArrayTask string `json:"array_task"`
		}
		if err != nil || json.Unmarshal(out, &ex) != nil || ex.JobID != jid || ex.ArrayTask != task {
			t.Errorf("rubick explain %s: job %d, task %q (%v); want job %d", task, ex.JobID, ex.ArrayTask, err, jid)
		}
	}
}

// TestHeterogeneousJob: a job of two components (sbatch with a hetjob
// line) submitted with --model-type is two held records that Slurm starts
// together and resizes neither of. rubickd releases the leader as it is,
// and both components run to completion (rubick used to plan each
// component alone: the leader's resize failed every cycle and it stayed
// held).
func TestHeterogeneousJob(t *testing.T) {
	lt := newLabTest(t, "hetjob", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	d := runDaemon(t, l, bin, dir, cfgPath)

	body := "#!/bin/bash\n#SBATCH -N 1 --gres=gpu:2\n#SBATCH hetjob\n#SBATCH -N 1 --gres=gpu:1\nsleep 2\n"
	id := l.submitScript(t, dir, body, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-hetjob", "--requeue")
	for _, c := range []int{id, id + 1} { // the components' records
		j, _ := waitEnded(ctx, cluster, c)
		if j.State != slurm.StateCompleted || j.HetJobID != id {
			t.Errorf("job %d (heterogeneous job %d) ended %s (%s); want COMPLETED; rubickd log %s", c, j.HetJobID, j.State, j.Reason, d.log)
		}
	}
	// sacct lists the components as id+0 and id+1; rubick report counts
	// one job holding both's GPUs (before, two jobs).
	ref, gpus := strconv.Itoa(id), map[string]int{}
	for ctx.Err() == nil && gpus[ref] != 3 {
		time.Sleep(time.Second)
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "rubick"), "report", "--json", "--jobs", "--since", "-1h")
		cmd.Env = l.env
		out, _ := cmd.Output()
		var r struct {
			Jobs []struct {
				JobID string `json:"job_id"`
				Runs  []struct {
					GPUs int `json:"gpus"`
				} `json:"runs"`
			} `json:"jobs"`
		}
		if json.Unmarshal(out, &r) != nil {
			continue
		}
		clear(gpus)
		for _, j := range r.Jobs {
			for _, run := range j.Runs {
				gpus[j.JobID] += run.GPUs
			}
		}
	}
	if _, split := gpus[ref+"+0"]; gpus[ref] != 3 || split {
		t.Errorf("rubick report's GPUs per job %v; want job %d with 3, no component of its own", gpus, id)
	}
}
