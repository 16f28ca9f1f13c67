//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// TestSuspendedJob: an administrator suspends a running rubick job
// (scontrol suspend) for six seconds under a QOS allowing 8 GPUs, all of
// them the job's. rubickd leaves the job alone and says why; its GPUs stay
// taken and count against the QOS, so a second job waits, held by rubick,
// instead of being released into Slurm's QOSGrpGRES (before: released at
// once). After the resume both complete every iteration. The trainer logs
// wall times, as Megatron does, so the line after the resume averages in
// the stop: rubick-srun does not report it (before: a sample about 8x the
// others, which rubickd's 10x bound let through).
func TestSuspendedJob(t *testing.T) {
	smp := newSamples(t)
	lt := newLabTest(t, "suspend", 3*time.Minute, smp.config()+"log_level: debug\n")
	l, ctx, dir, bin := lt.lab, lt.ctx, lt.dir, lt.bin
	l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "GrpTRES=gres/gpu=8")
	defer l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "GrpTRES=gres/gpu=-1")
	d := runDaemon(t, l, bin, dir, lt.cfgPath)
	st, err := store.Open(ctx, lt.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// Real time (--time-scale 1): bert on 8 GPUs takes about 0.14 s an
	// iteration, a line every 5.
	script := fmt.Sprintf(`#!/bin/bash
exec %[1]s/rubick-srun --launcher gpu --munge-socket %[3]s --report-url http://127.0.0.1:%[4]d/samples -- \
  %[1]s/rubick-emu-trainer --model-type bert --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
  --micro-batch-size 1 --global-batch-size 32 --train-iters "$E2E_ITERS" --time-scale 1 --elapsed wall --log-interval 5 \
  --save %[2]s/ckpt-"$SLURM_JOB_ID"
`, bin, dir, smp.socket, smp.port)
	submit := func(iters int) int {
		return l.submitScript(t, dir, script, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-suspend", "--qos=normal",
			"-N", "1", "--ntasks-per-node=1", "--gres=gpu:8", "--cpus-per-task=8", "--mem=32G", "--requeue",
			"--export=ALL,E2E_ITERS="+strconv.Itoa(iters))
	}
	const itersA, itersB = 60, 10
	a := submit(itersA)
	reported := func(id int) []store.StoredSample {
		got, err := st.RecentJobSamples(ctx, []int64{int64(id)}, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return got[int64(id)]
	}
	for ctx.Err() == nil && len(reported(a)) < 3 {
		time.Sleep(200 * time.Millisecond)
	}

	l.run(t, "scontrol", "suspend", strconv.Itoa(a))
	suspended := time.Now()
	b := submit(itersB)
	var bReasons []string // Slurm's reasons for b while a stood suspended
	for ctx.Err() == nil && time.Since(suspended) < 6*time.Second {
		if j, err := lt.cluster.Job(ctx, b); err == nil && !slices.Contains(bReasons, j.Reason) {
			bReasons = append(bReasons, j.Reason)
		}
		time.Sleep(300 * time.Millisecond)
	}
	newest := func(id int) string {
		rs, err := st.Reasons(ctx, int64(id), 1)
		if err != nil || len(rs) == 0 {
			return fmt.Sprintf("none (%v)", err)
		}
		return string(rs[0].Reason)
	}
	whyA, whyB := newest(a), newest(b)
	l.run(t, "scontrol", "resume", strconv.Itoa(a))

	if !strings.Contains(whyA, "suspended (scontrol suspend") {
		t.Errorf("job %d's reason while suspended: %s; want it to say it is suspended; rubickd log %s", a, whyA, d.log)
	}
	if !strings.Contains(whyB, "QOS normal GrpTRES") || !slices.Equal(bReasons, []string{"JobHeldUser"}) {
		t.Errorf("job %d beside the suspended one: reasons %v, rubick's %s; want held by rubick (JobHeldUser) for QOS normal GrpTRES; rubickd log %s",
			b, bReasons, whyB, d.log)
	}
	for id, want := range map[int]int{a: itersA, b: itersB} {
		if j, _ := waitEnded(ctx, lt.cluster, id); j.State != slurm.StateCompleted {
			t.Fatalf("job %d ended %s (%s), want COMPLETED; rubickd log %s", id, j.State, j.Reason, d.log)
		}
		if done, err := iterationsDone(fmt.Sprintf("%s/ckpt-%d", dir, id)); err != nil || done != want {
			t.Errorf("job %d: %d iterations done (%v), want %d", id, done, err, want)
		}
	}

	// Every reported time within twice the median: the stop is in none.
	got := reported(a)
	var times []float64
	for _, s := range got {
		times = append(times, s.IterS)
	}
	slices.Sort(times)
	// 12 lines, less the warm-up and the one dropped.
	if len(times) < 6 || times[len(times)-1] > 2*times[len(times)/2] {
		t.Errorf("job %d reported %d iteration times, sorted %v; want 6 or more, none above twice the median", a, len(times), times)
	}
	t.Logf("job %d: %d iteration times, median %.3fs, max %.3fs; job %d held for %v while %d stood suspended",
		a, len(times), times[len(times)/2], times[len(times)-1], b, bReasons, a)
}
