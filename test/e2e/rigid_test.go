//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// TestRigidJobReservation: a rigid job (no model type) waits for three
// whole nodes while a rigid filler holds two of the four. A rubick job
// submitted meanwhile must not take the two free nodes (rigid_jobs:
// schedule holds them back): the rigid job starts first, when the filler
// ends, and the rubick job after it.
func TestRigidJobReservation(t *testing.T) {
	l := labFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, bin := buildInto(t, "rigid")
	cfgPath, cfg, dbPath := writeConfig(t, l, dir, `rigid_jobs: schedule
listen: ""
log_level: debug
`)
	cluster := l.cluster(ctx, t)
	var ids []string
	defer scancelAll(l, &ids)
	sbatch := func(args ...string) int {
		out := l.run(t, append([]string{"sbatch", "--parsable", "-p", "gpu", "--ntasks-per-node=1", "--cpus-per-task=8",
			"--mem=8G", "-o", "/dev/null"}, args...)...)
		id := strings.Split(out, ";")[0]
		ids = append(ids, id)
		n, err := strconv.Atoi(id)
		if err != nil {
			t.Fatalf("sbatch printed %q", out)
		}
		return n
	}
	started := map[int]time.Time{}
	poll := func(id int) slurm.Job {
		j, err := cluster.Job(ctx, id)
		if err != nil {
			t.Fatalf("job %d: %v", id, err)
		}
		if j.State != slurm.StatePending && started[id].IsZero() {
			started[id] = time.Now()
		}
		return j
	}

	filler := sbatch("-J", "e2e-filler", "-N", "2", "--gres=gpu:8", "--wrap", "sleep 30")
	for ctx.Err() == nil && poll(filler).State != slurm.StateRunning {
		time.Sleep(500 * time.Millisecond)
	}
	rigid := sbatch("-J", "e2e-rigid", "-N", "3", "--gres=gpu:8", "--wrap", "sleep 5")
	for ctx.Err() == nil {
		if j := poll(rigid); j.State == slurm.StatePending && j.Reason != "" {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}

	d := newDaemon(t, l, bin, dir, cfgPath)
	d.start()
	defer d.stop()
	script := filepath.Join(dir, "train.sh")
	body := fmt.Sprintf(`#!/bin/bash
exec %[1]s/rubick-srun --launcher gpu -- %[1]s/rubick-emu-trainer --model-type bert \
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 1 \
  --global-batch-size 32 --train-iters 100 --time-scale 0.25 --log-interval 10 \
  --save %[2]s/ckpt-"$SLURM_JOB_ID"
`, bin, dir)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	elastic := sbatch("-J", "e2e-elastic", "--model-type=bert", "-N", "1", "--gres=gpu:8", "--requeue", script)

	// Until the filler ends, the rigid job waits and so must the rubick job.
	for ctx.Err() == nil {
		f, r, e := poll(filler), poll(rigid), poll(elastic)
		if e.State == slurm.StateRunning && r.State == slurm.StatePending {
			t.Fatalf("rubick job %d started on %v while rigid job %d waited (%s) for the nodes; rubickd log %s",
				elastic, e.NodeList, rigid, r.Reason, d.log)
		}
		if f.Ended() && !started[rigid].IsZero() && !started[elastic].IsZero() {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if started[rigid].IsZero() || started[elastic].IsZero() {
		t.Fatalf("rigid job started %v, rubick job %v; rubickd log %s", started[rigid], started[elastic], d.log)
	}
	if started[elastic].Before(started[rigid]) {
		t.Errorf("rubick job %d started at %v, before rigid job %d at %v", elastic, started[elastic], rigid, started[rigid])
	}
	log, _ := os.ReadFile(d.log)
	if !strings.Contains(string(log), "resources held for a rigid job") {
		t.Errorf("rubickd never held resources for the rigid job (%s)", d.log)
	}

	// systemctl reload: a changed policy knob applies at the next cycle; a
	// changed store is refused and the daemon keeps running as it was.
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(cfg, "interval: 2s", "interval: 3s", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	d.hup()
	if !d.waitLog(`"msg":"configuration reloaded"`, 10*time.Second) {
		t.Errorf("rubickd did not apply the reloaded configuration (%s)", d.log)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(cfg, dbPath, dbPath+".other", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	d.hup()
	if !d.waitLog("needs a restart of rubickd: store changed", 10*time.Second) {
		t.Errorf("rubickd did not refuse a reload that moves its store (%s)", d.log)
	}

	line, _ := json.Marshal(map[string]any{"rigid_start_s": started[rigid].Sub(started[filler]).Seconds(),
		"rubick_start_s": started[elastic].Sub(started[filler]).Seconds()})
	t.Logf("%s", line)
}
