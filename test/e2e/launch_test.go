//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// TestLaunchLineRefusal: on one free GPU llama7 fits only with ZeRO-Offload,
// which a Megatron-DeepSpeed line without a DeepSpeed config cannot
// express. rubick-srun refuses the plan instead of failing the job: it tells
// rubickd (over munge) what the line cannot run and requeues the job held;
// rubickd, finding no plan the line can run on the job's request, releases
// it unplanned, and the line runs unchanged to completion.
func TestLaunchLineRefusal(t *testing.T) {
	l := labFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, bin := buildInto(t, "launch")
	smp := newSamples(t)
	cfgPath, _, dbPath := writeConfig(t, l, dir, smp.config()+"log_level: debug\n")
	cluster := l.cluster(ctx, t)
	var ids []string
	defer scancelAll(l, &ids)

	// Rigid jobs hold all but one GPU of the lab. The job asks for host memory
	// enough for ZeRO-Offload of 7B parameters.
	ids = append(ids, holdGPUs(ctx, t, l, cluster, filler{"3", "8"}, filler{"1", "7"})...)

	d := &daemonProc{t: t, bin: filepath.Join(bin, "rubickd"), cfg: cfgPath, env: l.env, log: filepath.Join(dir, "rubickd.log")}
	d.start()
	defer d.stop()

	script := filepath.Join(dir, "train.sh")
	body := fmt.Sprintf(`#!/bin/bash
exec %[1]s/rubick-srun --launcher gpu --dialect megatron-deepspeed --munge-socket %[3]s \
  --report-url http://127.0.0.1:%[4]d/samples -- \
  %[1]s/rubick-emu-trainer --model-type llama7 --deepspeed --tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 8 --train-iters 20 \
  --time-scale 0.01 --log-interval 5 --save %[2]s/ckpt-"$SLURM_JOB_ID"
`, bin, dir, smp.socket, smp.port)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	out := l.run(t, "sbatch", "--parsable", "--model-type=llama7", "-p", "gpu", "-J", "e2e-launch", "-N", "1",
		"--ntasks-per-node=1", "--gres=gpu:1", "--cpus-per-task=8", "--mem=200G", "--requeue", "--open-mode=append",
		"-o", filepath.Join(dir, "job-%j.out"), script)
	out = strings.Split(out, ";")[0]
	ids = append(ids, out)
	id, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("sbatch printed %q", out)
	}

	var j slurm.Job
	for ctx.Err() == nil {
		if j, err = cluster.Job(ctx, id); err == nil && ended(j) {
			break
		}
		time.Sleep(time.Second)
	}
	jobOut, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("job-%d.out", id)))
	if j.State != slurm.StateCompleted {
		t.Fatalf("job %d ended %s, want COMPLETED; rubickd log %s; job output:\n%s", id, j.State, d.log, jobOut)
	}
	for _, want := range []string{"the launch line cannot run this plan", "+off", "running the command unchanged"} {
		if !strings.Contains(string(jobOut), want) {
			t.Errorf("job output lacks %q:\n%s", want, jobOut)
		}
	}
	log, _ := os.ReadFile(d.log)
	if !strings.Contains(string(log), "launch line cannot run the job's plan") {
		t.Errorf("rubickd did not log the refusal (%s)", d.log)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", smp.port))
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `rubick_launch_notices_total{result="refused"} 1`) {
		t.Errorf("metrics lack one refused launch notice:\n%s", metrics)
	}
	st, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.LaunchLimits(ctx, []store.LaunchKey{{ID: int64(id)}})
	if err != nil || got[int64(id)] != model.FeatureOffload {
		t.Errorf("stored launch limits %v (%v), want offload for job %d", got, err, id)
	}
}
