//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// TestRestartCostMeasured: a job that reports its iteration times is
// restarted by rubickd on more GPUs; rubickd measures what the restart cost
// from the reports before and after it, stores it, and the cost agrees with
// what Slurm saw: no less than the time the job was not running, no more
// than the time to its first report after the restart.
func TestRestartCostMeasured(t *testing.T) {
	l := labFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, bin := buildInto(t, "restart")
	smp := newSamples(t)
	// restart_cost 1s: the reconfiguration rule, (T - δ)/T >= threshold
	// (docs/policy.md), lets the job be restarted once it has run 10 s at
	// rubickd's default policy.reconfig_threshold of 0.9, 34 s at the
	// paper's 0.97.
	cfgPath, _, dbPath := writeConfig(t, l, dir, "restart_cost: 1s\nmeasure_restart_cost: true\n"+smp.config()+"log_level: debug\n")
	cluster := l.cluster(ctx, t)
	var ids []string
	defer scancelAll(l, &ids)

	// Rigid jobs hold all but 2 GPUs of the lab, so the rubick job starts
	// on those 2; when they end, rubick grows it (about 3x faster on 8
	// GPUs than on 2).
	fillers := holdGPUs(ctx, t, l, cluster, filler{"3", "8"}, filler{"1", "6"})
	ids = append(ids, fillers...)

	d := newDaemon(t, l, bin, dir, cfgPath)
	d.start()
	defer d.stop()

	// Real time (--time-scale 1): the measurement compares wall time with
	// the reported iteration times.
	body := fmt.Sprintf(`#!/bin/bash
exec %[1]s/rubick-srun --launcher gpu --munge-socket %[3]s --report-url http://127.0.0.1:%[4]d/samples -- \
  %[1]s/rubick-emu-trainer --model-type roberta --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
  --micro-batch-size 1 --global-batch-size 64 --train-iters 3000 --time-scale 1 --log-interval 5 \
  --save %[2]s/ckpt-"$SLURM_JOB_ID"
`, bin, dir, smp.socket, smp.port)
	id := l.submitScript(t, dir, body, &ids, "--model-type=roberta", "-p", "gpu", "-J", "e2e-restart", "-N", "1",
		"--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue")

	// Let it run past the 34 s the restart rule wants even at 0.97, then
	// free the nodes.
	var started time.Time
	for ctx.Err() == nil {
		j, err := cluster.Job(ctx, id)
		if err == nil && j.State == slurm.StateRunning && started.IsZero() {
			started = time.Now()
		}
		if !started.IsZero() && time.Since(started) > 40*time.Second {
			break
		}
		time.Sleep(time.Second)
	}
	l.run(t, append([]string{"scancel"}, fillers...)...)

	// Wait for rubickd to restart the job and measure the restart.
	st, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var costs []store.RestartCost
	for ctx.Err() == nil {
		costs, err = st.RestartCosts(ctx, "roberta", 0)
		if err == nil && len(costs) > 0 {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if len(costs) == 0 {
		hist, _ := st.PlanHistory(context.Background(), int64(id))
		t.Fatalf("no restart cost measured for job %d; its actions %+v; rubickd log %s", id, hist, d.log)
	}
	c := costs[0]
	j, err := cluster.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The old run trains until the signal, a moment after the decision,
	// and Slurm's StartTime has one-second resolution: 2 s of slack.
	notRunning := j.StartTime.Sub(c.Signaled) - 2*time.Second
	toReport := c.Resumed.Sub(c.Signaled)
	if c.JobID != int64(id) || c.Cost < notRunning || c.Cost > toReport {
		t.Errorf("restart cost %+v: want job %d and a cost in [%v, %v] (Slurm restarted it at %v)",
			c, id, notRunning, toReport, j.StartTime)
	}
	log, _ := os.ReadFile(d.log)
	if !strings.Contains(string(log), "restart cost measured") {
		t.Errorf("rubickd did not log the measurement (%s)", d.log)
	}

	// rubick report prices the requeue at the measured cost once sacct has
	// the job's runs.
	l.run(t, "scancel", strconv.Itoa(id))
	type reportJob struct {
		JobID            string  `json:"job_id"`
		Requeues         int     `json:"requeues"`
		ReconfigMeasured int     `json:"reconfig_measured"`
		ReconfigLostS    float64 `json:"reconfig_lost_s"`
	}
	var rj reportJob
	for try := 0; try < 30 && rj.ReconfigMeasured == 0; try++ {
		time.Sleep(time.Second)
		cmd := exec.Command(filepath.Join(bin, "rubick"), "report", "--json", "--store", dbPath, "--since", "-1h")
		cmd.Env = l.env
		raw, _ := cmd.Output() // exits 1 when other tests' jobs have malformed tags
		var r struct {
			Jobs []reportJob `json:"jobs"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			continue
		}
		for _, j := range r.Jobs {
			if j.JobID == strconv.Itoa(id) {
				rj = j
			}
		}
	}
	if rj.ReconfigMeasured != 1 || rj.Requeues < 1 {
		t.Errorf("rubick report: job %d %+v, want one requeue priced at the measured cost", id, rj)
	} else if rj.Requeues == 1 && math.Abs(rj.ReconfigLostS-c.Cost.Seconds()) > 1e-6 {
		t.Errorf("rubick report: job %d lost %.3f s to reconfiguration, want the measured %.3f s", id, rj.ReconfigLostS, c.Cost.Seconds())
	}

	line, _ := json.Marshal(map[string]any{
		"job": id, "restart_cost_s": c.Cost.Seconds(), "not_running_s": (notRunning + 2*time.Second).Seconds(),
		"to_first_report_s": toReport.Seconds(), "iterations": []int{c.BeforeIter, c.AfterIter},
	})
	t.Logf("%s", line)
}
