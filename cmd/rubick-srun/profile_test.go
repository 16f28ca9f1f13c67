package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rubick-sched/rubick/gpuinfo"
	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/trainer"
)

// invocation is one start of the fake srun.
type invocation struct {
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env"`
}

// logInvocation appends the fake srun's argv and the environment rubick-srun
// sets to dir/calls.jsonl.
func logInvocation(dir string, args []string) {
	inv := invocation{Argv: append([]string{"srun"}, args...), Env: map[string]string{}}
	for _, k := range []string{"CUDA_VISIBLE_DEVICES", "RUBICK_PLAN", "RUBICK_PLACEMENT", "RUBICK_CPUS", "RUBICK_PROFILE_RUN", "OMP_NUM_THREADS",
		"WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_DEVICE_MAX_CONNECTIONS"} {
		if v, ok := os.LookupEnv(k); ok {
			inv.Env[k] = v
		}
	}
	data, _ := json.Marshal(inv)
	f, err := os.OpenFile(filepath.Join(dir, "calls.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	f.Write(append(data, '\n'))
}

func readInvocations(t *testing.T, dir string) []invocation {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "calls.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []invocation
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var inv invocation
		if err := json.Unmarshal(sc.Bytes(), &inv); err != nil {
			t.Fatal(err)
		}
		out = append(out, inv)
	}
	return out
}

// fakeTimer prices iterations so that the profiling runs differ: compute
// shrinks with the GPUs, communication grows with them, CPU Adam shrinks
// with the CPUs.
type fakeTimer struct{}

func (fakeTimer) IterTime(_ string, p model.Plan, pl model.Placement, cpus int) (time.Duration, bool) {
	g := float64(pl.GPUs())
	s := 0.05 + 0.8/g + 0.1*(g-1)/g
	if p.Offload {
		s += 1.6 / float64(max(cpus, 1))
	}
	if p.Checkpoint {
		s += 0.2 / g
	}
	return time.Duration(s * float64(time.Second)), true
}

// fakeTrainer plays the step srun starts: the emulated Megatron trainer
// (package trainer) on the line after the srun options, as the last rank,
// or a DeepSpeed script that logs until it is stopped. FAKE_SRUN_FAIL_RUN
// and FAKE_SRUN_HANG_RUN make one profiling run fail or hang.
func fakeTrainer(args []string) int {
	i := slices.IndexFunc(args, func(a string) bool { return !strings.HasPrefix(a, "--") })
	line := args[i:]
	run, _, _ := strings.Cut(os.Getenv("RUBICK_PROFILE_RUN"), "/")
	switch run {
	case "":
	case os.Getenv("FAKE_SRUN_FAIL_RUN"):
		fmt.Fprintln(os.Stderr, "torch.OutOfMemoryError: CUDA out of memory")
		return 1
	case os.Getenv("FAKE_SRUN_HANG_RUN"):
		fmt.Println("hanging")
		select {} // until a signal ends it
	}
	if p := os.Getenv("FAKE_PLAN_FILE"); p != "" && os.Getenv("RUBICK_PROFILE_RUN") != "" &&
		strings.HasPrefix(os.Getenv("RUBICK_PROFILE_RUN"), os.Getenv("FAKE_LAST_RUN")+"/") {
		// rubickd fitted the model type, chose another plan and took
		// profile=1 out.
		_ = os.WriteFile(p, []byte(os.Getenv("FAKE_PLAN_AFTER")), 0o644)
		if e := os.Getenv("FAKE_TAG_EXTRA_FILE"); e != "" {
			_ = os.WriteFile(e, nil, 0o644)
		}
	}
	script := slices.IndexFunc(line, func(a string) bool { return strings.HasSuffix(a, ".py") })
	if filepath.Base(line[script]) == "train.py" {
		// A DeepSpeed script: no exit bound; logs until stopped.
		for step := 1; ; step++ {
			fmt.Printf("epoch=0/micro_step=%d/global_step=%d, RunningAvgSamplesPerSec=40.0, CurrSamplesPerSec=%d.0, MemAllocated=1GB\n", step, step, 30+step)
			time.Sleep(5 * time.Millisecond)
		}
	}
	getenv := func(k string) string {
		switch k {
		case "SLURM_PROCID":
			return "0"
		case "SLURM_NTASKS":
			return "1"
		case "RANK", "WORLD_SIZE": // the step's, for its many tasks
			return ""
		}
		return os.Getenv(k)
	}
	opts, err := trainer.ParseArgs(line[script+1:], getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if _, err := trainer.Run(context.Background(), trainer.Config{Options: opts, Timer: fakeTimer{}, Out: os.Stdout}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// profileEnv is a 4-GPU, 16-CPU single-node job.
func profileEnv() func(string) string {
	return envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "node1", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "4",
		"SLURM_CPUS_ON_NODE": "16", "CUDA_VISIBLE_DEVICES": "4,5,6,7"})
}

var profileLine = strings.Fields("python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 16 --train-iters 20 --log-interval 10 --time-scale 0.001")

// profileSetup makes the fakes and a job tagged profile=1 with plan
// dp4.tp1.pp1.mb4.a1.z0; it returns rubick-srun's leading flags, the
// fake srun's log directory and the state directory.
func profileSetup(t *testing.T, reportURL string) (flags []string, logDir, stateDir string) {
	bin := fakes(t)
	logDir, stateDir = t.TempDir(), filepath.Join(t.TempDir(), "state")
	planFile := filepath.Join(t.TempDir(), "plan")
	if err := os.WriteFile(planFile, []byte("dp4.tp1.pp1.mb4.a1.z0"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_SRUN_LOGDIR", logDir)
	t.Setenv("FAKE_PLAN_FILE", planFile)
	t.Setenv("FAKE_TAG_EXTRA", "profile=1")
	t.Setenv("FAKE_SRUN_MODE", "emu")
	flags = []string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "--srun", filepath.Join(bin, "srun"),
		"--munge", filepath.Join(bin, "munge"), "--state-dir", stateDir, "--profile-iters", "4"}
	if reportURL != "" {
		flags = append(flags, "--report-url", reportURL)
	}
	return flags, logDir, stateDir
}

func readProfile(t *testing.T, stateDir string) profileReport {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(stateDir, profileFile))
	if err != nil {
		t.Fatal(err)
	}
	var r profileReport
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

var summaryRe = regexp.MustCompile(`(?m)^rubick-srun: profile run (\d+)/(\d+) (\S+) gpus=(\d+) cpus=(\d+) (.*)$`)

// TestProfilePhase: a job tagged profile=1 runs every profiling
// configuration on its first node (argv and environment checked), reports
// their iteration times after the warm-up, skips a run that fails, writes
// profile.json, prints one summary line per run, re-reads its plan and
// then trains with the plan rubickd chose meanwhile.
func TestProfilePhase(t *testing.T) {
	var col collector
	srv := col.server(t)
	flags, logDir, stateDir := profileSetup(t, srv.URL)
	save := filepath.Join(t.TempDir(), "ckpt")
	want, err := launch.ProfilePlans(16, 4, 16, launch.Megatron, launch.ProfileOptions{MaxMicroBatch: 4, Iters: 4})
	if err != nil {
		t.Fatal(err)
	}
	n := len(want)
	t.Setenv("FAKE_SRUN_FAIL_RUN", "2")
	t.Setenv("FAKE_LAST_RUN", strconv.Itoa(n))
	t.Setenv("FAKE_PLAN_AFTER", "dp2.tp1.pp1.mb4.a2.z0+gc")
	t.Setenv("FAKE_TAG_EXTRA_FILE", filepath.Join(t.TempDir(), "extra"))

	var out, errOut bytes.Buffer
	code := run(t.Context(), append(append(flags, "--"), append(slices.Clone(profileLine), "--save", save)...), profileEnv(), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
	calls := readInvocations(t, logDir)
	if len(calls) != n+1 {
		t.Fatalf("%d srun calls, want %d profiling runs and the training run:\n%s", len(calls), n, errOut.String())
	}
	if n < launch.MinProfileRuns {
		t.Fatalf("%d profiling runs, want >= %d", n, launch.MinProfileRuns)
	}

	// Runs 1 (plain DP, all GPUs) and 3 (ZeRO-Offload, 1 GPU) in full.
	asTask := []string{testSelf(t), "--as-task", "--"}
	common := strings.Fields("python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 16 --train-iters 20 --log-interval 1 " +
		"--time-scale 0.001 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1")
	full := map[int]invocation{
		0: {Argv: slices.Concat(strings.Fields("srun --nodes=1 --ntasks=4 --ntasks-per-node=4 --gres=gpu:4 --cpus-per-task=4 --kill-on-bad-exit=1 --export=ALL"),
			asTask, common, []string{"--exit-interval", "4"}),
			Env: map[string]string{"CUDA_VISIBLE_DEVICES": "4,5,6,7", "RUBICK_PLAN": "dp4.tp1.pp1.mb4.a1.z0", "RUBICK_PLACEMENT": "4",
				"RUBICK_CPUS": "16", "RUBICK_PROFILE_RUN": fmt.Sprintf("1/%d", n),
				"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "node1", "MASTER_PORT": "20042"}},
		2: {Argv: slices.Concat(strings.Fields("srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --gres=gpu:1 --cpus-per-task=16 --cpu-bind=cores --kill-on-bad-exit=1 --export=ALL"),
			asTask, common, strings.Fields("--use-distributed-optimizer --optimizer-cpu-offload --use-precision-aware-optimizer --exit-interval 4")),
			Env: map[string]string{"CUDA_VISIBLE_DEVICES": "4", "RUBICK_PLAN": "dp1.tp1.pp1.mb4.a4.z1+off", "RUBICK_PLACEMENT": "1",
				"RUBICK_CPUS": "16", "RUBICK_PROFILE_RUN": fmt.Sprintf("3/%d", n), "OMP_NUM_THREADS": "16",
				"WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "node1", "MASTER_PORT": "20042"}},
	}
	for i, w := range full {
		if diff := cmp.Diff(w, calls[i]); diff != "" {
			t.Errorf("profiling run %d (-want +got):\n%s", i+1, diff)
		}
	}
	// Every run: its plan on its GPUs and CPUs of the first node, bounded,
	// no checkpoints.
	for i, r := range want {
		c := calls[i]
		g, cpt := strconv.Itoa(r.GPUs), strconv.Itoa(r.CPUs/r.GPUs)
		for _, a := range []string{"--ntasks=" + g, "--gres=gpu:" + g, "--cpus-per-task=" + cpt, "--exit-interval"} {
			if !slices.Contains(c.Argv, a) {
				t.Errorf("run %d (%s): argv lacks %s: %q", i+1, r.Plan, a, c.Argv)
			}
		}
		if slices.Contains(c.Argv, "--save") || slices.Contains(c.Argv, "--load") || slices.Contains(c.Argv, save) {
			t.Errorf("run %d (%s) would touch the job's checkpoints: %q", i+1, r.Plan, c.Argv)
		}
		if mb, _ := launch.LookupFlag(c.Argv, "--micro-batch-size"); mb != strconv.Itoa(r.Plan.MicroBatch) {
			t.Errorf("run %d: micro-batch %s, want %d", i+1, mb, r.Plan.MicroBatch)
		}
		if c.Env["RUBICK_PLAN"] != r.Plan.String() || c.Env["CUDA_VISIBLE_DEVICES"] != launch.VisibleDevices("4,5,6,7", r.GPUs) ||
			c.Env["RUBICK_CPUS"] != strconv.Itoa(r.CPUs) {
			t.Errorf("run %d (%s, %d GPUs, %d CPUs): env %v", i+1, r.Plan, r.GPUs, r.CPUs, c.Env)
		}
	}
	// The training run: the plan rubickd set during the phase, resuming.
	train := calls[n]
	wantTrain := slices.Concat(strings.Fields("srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --gres=gpu:2 --cpus-per-task=8 --kill-on-bad-exit=1 --export=ALL"),
		asTask, strings.Fields("python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 16 --train-iters 20 --log-interval 10 --time-scale 0.001"),
		[]string{"--save", save}, strings.Fields("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "+
			"--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"), []string{"--load", save})
	if diff := cmp.Diff(wantTrain, train.Argv); diff != "" {
		t.Errorf("training run (-want +got):\n%s", diff)
	}
	if _, ok := train.Env["RUBICK_PROFILE_RUN"]; ok {
		t.Errorf("training run marked as a profiling run: %v", train.Env)
	}
	if it, err := trainer.ReadTracker(save); it != 20 || err != nil {
		t.Errorf("checkpoint = %d, %v; want 20 from the training run alone", it, err)
	}

	// Summary lines, one per run; run 2 failed and was skipped.
	lines := summaryRe.FindAllStringSubmatch(errOut.String(), -1)
	if len(lines) != n {
		t.Fatalf("%d summary lines, want %d:\n%s", len(lines), n, errOut.String())
	}
	for i, l := range lines {
		r := want[i]
		if l[1] != strconv.Itoa(i+1) || l[2] != strconv.Itoa(n) || l[3] != r.Plan.String() || l[4] != strconv.Itoa(r.GPUs) || l[5] != strconv.Itoa(r.CPUs) {
			t.Errorf("summary %q does not describe run %d (%s)", l[0], i+1, r.Plan)
		}
		if ok := regexp.MustCompile(`^iter=[0-9]+\.[0-9]{3}s$`).MatchString(l[6]); ok != (i != 1) {
			t.Errorf("summary %q", l[0])
		}
	}
	if !strings.Contains(lines[1][6], "failed: exit status 1") {
		t.Errorf("failing run's summary %q", lines[1][0])
	}

	// profile.json.
	rec := readProfile(t, stateDir)
	if !rec.Complete || rec.JobID != "42" || rec.ModelType != "gpt2" || rec.GlobalBatch != 16 || len(rec.Runs) != n ||
		rec.Samples != 3*(n-1) || rec.OffloadRuns < launch.MinProfileOffloadRuns {
		t.Errorf("profile.json: %+v", rec)
	}
	for i, r := range rec.Runs {
		wantStatus := runOK
		if i == 1 {
			wantStatus = runFailed
		}
		if r.Status != wantStatus || r.Plan != want[i].Plan.String() || r.GPUs != want[i].GPUs || r.CPUs != want[i].CPUs {
			t.Errorf("profile.json run %d: %+v", i+1, r)
		}
	}

	// Samples: three per successful run (four iterations, one warm-up),
	// with the run's plan, placement and CPUs; then the training run's.
	col.mu.Lock()
	defer col.mu.Unlock()
	per := map[string][]float64{}
	for _, s := range col.got {
		if s.JobID != "42" || s.ModelType != "gpt2" {
			t.Errorf("sample %+v", s)
		}
		k := fmt.Sprintf("%s %s %d", s.Plan, s.Placement, s.CPUs)
		per[k] = append(per[k], s.IterS)
	}
	for i, r := range want {
		k := fmt.Sprintf("%s %d %d", r.Plan, r.GPUs, r.CPUs)
		if wantN := map[bool]int{true: 0, false: 3}[i == 1]; len(per[k]) != wantN {
			t.Errorf("run %d (%s): %d samples, want %d", i+1, k, len(per[k]), wantN)
		}
	}
	if got := per["dp2.tp1.pp1.mb4.a2.z0+gc 2 16"]; len(got) != 1 {
		t.Errorf("training run samples %v, want 1 (20 iterations logged every 10, one warm-up)", got)
	}
	// Halving the CPUs of the 1-GPU offload run shows in its time.
	if all, half := per["dp1.tp1.pp1.mb4.a4.z1+off 1 16"], per["dp1.tp1.pp1.mb4.a4.z1+off 1 8"]; len(all) == 0 || len(half) == 0 || !(half[0] > all[0]) {
		t.Errorf("offload on 16 CPUs %v, on 8 CPUs %v: want slower on 8", all, half)
	}
}

// TestProfileTimeouts: a hanging run is stopped by its own bound and the
// next runs go on; a hanging run under the phase's bound ends the phase,
// the rest is skipped, and the training run starts.
func TestProfileTimeouts(t *testing.T) {
	cases := map[string]struct {
		flags      []string
		hang       string
		wantStatus func(i int) string
		reason     string
	}{
		// 3 s, not less: each run is a new process, and on a loaded
		// machine one that does not hang took past 300 ms to end.
		"run bound": {flags: []string{"--profile-run-timeout", "3s"}, hang: "2",
			wantStatus: func(i int) string { return map[bool]string{true: runTimeout, false: runOK}[i == 1] }},
		"phase bound": {flags: []string{"--profile-timeout", "1s"}, hang: "1", reason: "time bound reached",
			wantStatus: func(i int) string { return map[bool]string{true: runTimeout, false: runSkipped}[i == 0] }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			flags, logDir, stateDir := profileSetup(t, "")
			t.Setenv("FAKE_SRUN_HANG_RUN", c.hang)
			start := time.Now()
			var out, errOut bytes.Buffer
			code := run(t.Context(), slices.Concat(flags, c.flags, []string{"--"}, profileLine), profileEnv(), &out, &errOut)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, errOut.String())
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("took %v: the bound did not hold", d)
			}
			rec := readProfile(t, stateDir)
			if !rec.Complete || rec.Reason != c.reason {
				t.Errorf("profile.json complete=%v reason=%q", rec.Complete, rec.Reason)
			}
			for i, r := range rec.Runs {
				if r.Status != c.wantStatus(i) {
					t.Errorf("run %d: status %s, want %s (%s)", i+1, r.Status, c.wantStatus(i), r.Error)
				}
			}
			calls := readInvocations(t, logDir)
			if last := calls[len(calls)-1]; last.Env["RUBICK_PROFILE_RUN"] != "" || last.Env["RUBICK_PLAN"] != "dp4.tp1.pp1.mb4.a1.z0" {
				t.Errorf("the training run did not follow the phase: %+v", last)
			}
			if !strings.Contains(errOut.String(), "timeout: profiling") {
				t.Errorf("no timeout in the summary lines:\n%s", errOut.String())
			}
		})
	}
}

// TestProfileTimeoutOutlastsWait: a phase bound that may outlast the time
// rubickd waits on the phase (launch.ProfilingBound less its setup room)
// is warned about when the phase starts.
func TestProfileTimeoutOutlastsWait(t *testing.T) {
	const warning = "the profiling phase may outlast the time rubickd waits on it"
	for timeout, want := range map[string]bool{"15m": false, "16m": true, "5m": false} {
		t.Run(timeout, func(t *testing.T) {
			flags, _, _ := profileSetup(t, "")
			var out, errOut bytes.Buffer
			if code := run(t.Context(), slices.Concat(flags, []string{"--profile-timeout", timeout, "--"}, profileLine), profileEnv(), &out, &errOut); code != 0 {
				t.Fatalf("exit %d:\n%s", code, errOut.String())
			}
			if got := strings.Contains(errOut.String(), warning); got != want {
				t.Errorf("warned %v, want %v:\n%s", got, want, errOut.String())
			}
		})
	}
}

// TestProfileDeepSpeedStopped: a DeepSpeed script has no exit bound; each
// run is stopped once it logged its iterations, and counts as measured.
func TestProfileDeepSpeedStopped(t *testing.T) {
	flags, logDir, stateDir := profileSetup(t, "")
	cfgPath := filepath.Join(t.TempDir(), "ds.json")
	if err := os.WriteFile(cfgPath, []byte(`{"train_batch_size": 16, "steps_per_print": 100}`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_SRUN_MODE", "")
	var out, errOut bytes.Buffer
	code := run(t.Context(), slices.Concat(flags, []string{"--", "deepspeed", "train.py", "--deepspeed_config", cfgPath}), profileEnv(), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
	rec := readProfile(t, stateDir)
	if len(rec.Runs) < launch.MinProfileRuns || rec.OffloadRuns < launch.MinProfileOffloadRuns {
		t.Fatalf("profile.json: %+v", rec)
	}
	for i, r := range rec.Runs {
		// The trainer may log another line before the SIGTERM lands: it is
		// counted, not kept.
		if r.Status != runOK || r.Measured < 4 || len(r.IterS) != 3 || r.ExitStatus == nil || *r.ExitStatus != 128+int(syscall.SIGTERM) {
			t.Errorf("run %d: %+v", i+1, r)
		}
	}
	calls := readInvocations(t, logDir)
	wantFirst := strings.Fields("srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --gres=gpu:4 --cpus-per-task=16 --kill-on-bad-exit=1 --export=ALL " +
		"deepspeed --num_nodes 1 --num_gpus 4 --master_port 20042 train.py --deepspeed_config " + filepath.Join(stateDir, "profile", "run-01", "rubick-ds.json"))
	if diff := cmp.Diff(wantFirst, calls[0].Argv); diff != "" {
		t.Errorf("first run (-want +got):\n%s", diff)
	}
	data, err := os.ReadFile(filepath.Join(stateDir, "profile", "run-01", "rubick-ds.json"))
	if err != nil || !strings.Contains(string(data), `"steps_per_print": 1,`) {
		t.Errorf("run 1 config: %v\n%s", err, data)
	}
}

func TestProfileDryRunAndDone(t *testing.T) {
	flags, logDir, stateDir := profileSetup(t, "")
	var out, errOut bytes.Buffer
	if code := run(t.Context(), slices.Concat(flags, []string{"--dry-run", "--"}, profileLine), profileEnv(), &out, &errOut); code != 0 {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
	for _, w := range []string{
		"# profile run 3/9 dp1.tp1.pp1.mb4.a4.z1+off gpus=1 cpus=16: ZeRO-Offload on 1 GPU, all CPUs",
		"RUBICK_PROFILE_RUN=3/9 CUDA_VISIBLE_DEVICES=4 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_PORT=20042 MASTER_ADDR=node1 OMP_NUM_THREADS=16 /",
		"/srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --gres=gpu:1 --cpus-per-task=16 --cpu-bind=cores --kill-on-bad-exit=1 --export=ALL " + testSelf(t) + " --as-task -- python pretrain_gpt.py",
		// The training run follows, unbounded.
		"/srun --nodes=1 --ntasks=4 --ntasks-per-node=4 --gres=gpu:4 --cpus-per-task=4 --kill-on-bad-exit=1 --export=ALL " + testSelf(t) + " --as-task -- python pretrain_gpt.py " +
			"--micro-batch-size 4 --global-batch-size 16 --train-iters 20 --log-interval 10 --time-scale 0.001 " +
			"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1\n",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("dry run lacks %q:\n%s", w, out.String())
		}
	}
	if _, err := os.Stat(filepath.Join(logDir, "calls.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dry run ran something: %v", err)
	}

	// A requeued job whose phase completed does not profile again.
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, profileFile), []byte(`{"complete": true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	if code := run(t.Context(), slices.Concat(flags, []string{"--"}, profileLine), profileEnv(), &out, &errOut); code != 0 {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
	if calls := readInvocations(t, logDir); len(calls) != 1 || calls[0].Env["RUBICK_PROFILE_RUN"] != "" {
		t.Errorf("calls %+v, want the training run only", calls)
	}
	if !strings.Contains(errOut.String(), "profiling phase already done") {
		t.Errorf("stderr:\n%s", errOut.String())
	}
}

// TestProfileCheckpointSignal: the checkpoint signal during the phase stops
// it (nothing was trained, so nothing to save), requeues the job held and
// exits 75 without training.
func TestProfileCheckpointSignal(t *testing.T) {
	flags, logDir, stateDir := profileSetup(t, "")
	scontrolLog := filepath.Join(t.TempDir(), "scontrol.log")
	self, _ := os.Executable()
	cmd := exec.Command(self, slices.Concat(flags, []string{"--"}, profileLine)...)
	cmd.Env = append(os.Environ(), "RUBICK_SRUN_MAIN=1", "FAKE_SRUN_HANG_RUN=1", "FAKE_SCONTROL_LOG="+scontrolLog,
		"SLURM_JOB_ID=42", "SLURM_JOB_NUM_NODES=1", "SLURM_GPUS_ON_NODE=4", "SLURM_CPUS_ON_NODE=16")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer kill.Stop()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "hanging" {
	}
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitCheckpointed {
		t.Fatalf("exit %v, want %d\n%s", err, exitCheckpointed, errOut.String())
	}
	calls, _ := os.ReadFile(scontrolLog)
	if !strings.HasSuffix(strings.TrimSpace(string(calls)), "requeuehold 42") {
		t.Errorf("scontrol calls %q, want a requeuehold last", calls)
	}
	if n := len(readInvocations(t, logDir)); n != 1 {
		t.Errorf("%d srun calls, want the interrupted profiling run only", n)
	}
	rec := readProfile(t, stateDir)
	if rec.Complete || !strings.Contains(rec.Reason, "interrupted") || rec.Runs[0].Status != runInterrupted || rec.Runs[1].Status != runInterrupted {
		t.Errorf("profile.json complete=%v reason=%q runs %s, %s", rec.Complete, rec.Reason, rec.Runs[0].Status, rec.Runs[1].Status)
	}
}

// A Megatron line with an even head count gets the phase's TP-2 run, on
// two GPUs after ZeRO-DP; an odd head count cannot take TP 2.
func TestProfileTPRun(t *testing.T) {
	for _, tc := range []struct {
		heads string
		want  bool
	}{{"16", true}, {"25", false}} {
		t.Run(tc.heads+" heads", func(t *testing.T) {
			flags, _, _ := profileSetup(t, "")
			line := slices.Concat(profileLine, []string{"--num-attention-heads", tc.heads})
			var out, errOut bytes.Buffer
			if code := run(t.Context(), slices.Concat(flags, []string{"--dry-run", "--"}, line), profileEnv(), &out, &errOut); code != 0 {
				t.Fatalf("exit %d:\n%s", code, errOut.String())
			}
			for _, w := range []string{
				"# profile run 8/10 dp1.tp2.pp1.mb4.a4.z0 gpus=2 cpus=16: tensor parallel on 2 GPUs",
				"--tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --exit-interval 4",
			} {
				if got := strings.Contains(out.String(), w); got != tc.want {
					t.Errorf("dry run has %q: %v, want %v:\n%s", w, got, tc.want, out.String())
				}
			}
		})
	}
}

// The profiling runs keep the line's global batch (16) when the plan
// rubickd set has its model type's (8).
func TestProfilePhaseLineBatch(t *testing.T) {
	cfg, err := parseFlags([]string{"--", "python", "pretrain_gpt.py", "--micro-batch-size", "4", "--global-batch-size", "16"}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	plan := model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 1}
	ph, err := newProfilePhase(cfg, &plan, launch.Alloc{Nodes: 1, GPUsOnNode: 2, CPUsOnNode: 8}, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ph.gb != 16 || len(ph.runs) == 0 {
		t.Fatalf("global batch %d, %d runs; want 16 and some runs", ph.gb, len(ph.runs))
	}
	for _, r := range ph.runs {
		if b := r.Plan.DP * r.Plan.MicroBatch * r.Plan.Accum; b != 16 {
			t.Errorf("run %s has global batch %d, want 16", r.Plan, b)
		}
	}
}

// A job submitted with --gres=gpu:8 and Slurm's one CPU: srun refuses a
// step of more tasks than that, so with one task per GPU only the 1-GPU
// runs are left, and the others are listed; a launcher that starts one
// task per node (torchrun) keeps them all.
func TestProfilePhaseTooFewCPUs(t *testing.T) {
	line := []string{"python", "pretrain_gpt.py", "--micro-batch-size", "2", "--global-batch-size", "16"}
	cfgOf := func(argv []string) config {
		cfg, err := parseFlags(append([]string{"--"}, argv...), envMap(nil), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	for name, tc := range map[string]struct {
		argv     []string
		leftOut  bool
		maxTasks int
	}{
		"one task per GPU":  {argv: line, leftOut: true, maxTasks: 1},
		"one task per node": {argv: append([]string{"torchrun", "--nproc_per_node", "8"}, line[1:]...), maxTasks: 1},
	} {
		t.Run(name, func(t *testing.T) {
			ph, err := newProfilePhase(cfgOf(tc.argv), nil, launch.Alloc{Nodes: 1, GPUsOnNode: 8, CPUsOnNode: 1}, t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			multi := false
			for _, r := range ph.runs {
				geo, err := ph.geometry(r)
				if err != nil || geo.Tasks() > tc.maxTasks {
					t.Errorf("run %s starts %d tasks (%v) on 1 CPU", r.Plan, geo.Tasks(), err)
				}
				multi = multi || r.Plan.GPUs() > 1
			}
			if (len(ph.leftOutCPUs) > 0) != tc.leftOut || multi == tc.leftOut || len(ph.runs) == 0 {
				t.Errorf("runs %v, left out %v; want runs on more than one GPU left out: %v", ph.runs, ph.leftOutCPUs, tc.leftOut)
			}
			for _, l := range ph.leftOutCPUs {
				if !strings.HasSuffix(l, " tasks)") {
					t.Errorf("left out %q, want it with its tasks", l)
				}
			}
		})
	}
	// 12 CPUs for 8 GPUs: a task per GPU fits, so nothing is left out.
	ph, err := newProfilePhase(cfgOf(line), nil, launch.Alloc{Nodes: 1, GPUsOnNode: 8, CPUsOnNode: 12}, t.TempDir(), nil)
	if err != nil || len(ph.leftOutCPUs) > 0 {
		t.Errorf("on 12 CPUs: left out %v (%v), want none", ph.leftOutCPUs, err)
	}
}

// TestProfilePhaseOverNotice: the job of a model type without a fit has
// no plan. After its profiling phase it sends a launch notice saying the
// phase is over, which rubickd fits the type on, only once every sample of
// the phase has reached rubickd, and, not waiting for rubickd's plan
// (--plan-wait 0; TestProfilePlanWait waits), trains its line unchanged,
// reporting under the plan the line expresses; a requeued job whose phase
// is done says so again.
func TestProfilePhaseOverNotice(t *testing.T) {
	col := collector{delay: 20 * time.Millisecond}
	srv := col.server(t)
	flags, logDir, _ := profileSetup(t, srv.URL)
	noPlan := filepath.Join(t.TempDir(), "plan")
	if err := os.WriteFile(noPlan, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_PLAN_FILE", noPlan)
	var out, errOut bytes.Buffer
	for start := range 2 {
		if code := run(t.Context(), slices.Concat(flags, []string{"--plan-wait", "0", "--"}, profileLine), profileEnv(), &out, &errOut); code != 0 {
			t.Fatalf("start %d: exit %d:\n%s", start+1, code, errOut.String())
		}
	}
	// No plan yet is what a job started to profile has: not a warning.
	if strings.Contains(errOut.String(), "level=WARN") || strings.Count(errOut.String(), "no plan after profiling yet") != 1 {
		t.Errorf("stderr warns of the plan it has not got, or does not say once after the phase that it has none:\n%s", errOut.String())
	}
	calls := readInvocations(t, logDir)
	for _, i := range []int{len(calls) - 2, len(calls) - 1} {
		if _, planned := calls[i].Env["RUBICK_PLAN"]; planned || calls[i].Env["RUBICK_PROFILE_RUN"] != "" {
			t.Errorf("call %d %+v, want the line unchanged", i+1, calls[i])
		}
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	want := report.Launch{Kind: report.KindLaunch, Version: report.LaunchVersion, JobID: "42", ModelType: "gpt2", Dialect: "megatron",
		GlobalBatch: 16, Profiled: true}
	if d := cmp.Diff([]report.Launch{want, want}, col.launches, cmpopts.IgnoreFields(report.Launch{}, "Time")); d != "" {
		t.Errorf("launch notices (-want +got):\n%s", d)
	}
	// The phase's samples all come before its notice; the training runs
	// after it report under the plan the line expresses on the job's 4
	// GPUs.
	if n := len(calls) - 2; len(col.before) != 2 || col.before[0] != 3*n || len(col.got) <= col.before[0] {
		t.Errorf("%d samples of %d runs, %v of them before each notice; want 3 a run before the first, then the training runs'", len(col.got), n, col.before)
		return
	}
	for _, s := range col.got[col.before[0]:] {
		if s.Plan != "dp4.tp1.pp1.mb4.a1.z0" {
			t.Errorf("a training run reported plan %q, want the line's dp4.tp1.pp1.mb4.a1.z0", s.Plan)
		}
	}
}

// TestProfilePlanWait: the job of a model type without a fit has no plan.
// After the launch notice that says its profiling phase is over, it waits
// for the plan rubickd sets once it has fitted the type (a plan in the
// tag, profile=1 taken out), and trains on it as on any plan, with a
// notice that names it; with none within --plan-wait it trains its line
// unchanged. A notice rubickd did not take cannot lead to a fit: the job
// does not wait. A requeued job whose phase is done (done: its record, and
// no runs) waits as after its phase.
func TestProfilePlanWait(t *testing.T) {
	const planAfter = "dp2.tp1.pp1.mb4.a2.z0+gc"
	over := report.Launch{Kind: report.KindLaunch, Version: report.LaunchVersion, JobID: "42", ModelType: "gpt2", Dialect: "megatron",
		GlobalBatch: 16, Profiled: true}
	planned := over
	planned.Plan, planned.Profiled = planAfter, false
	tests := map[string]struct {
		wait string
		// annotate: rubickd sets the plan 100 ms after the notice; down:
		// the samples endpoint does not answer.
		annotate, down, done bool
		wantPlan             string // the training run's; "" for the line unchanged
		samplesPlan          string // the plan the newest sample, the training run's, names; "" for none
		notices              []report.Launch
		waits, noPlan        int // log lines: the wait began, it ended without a plan
	}{
		"plan after the notice": {wait: "10s", annotate: true, wantPlan: planAfter, samplesPlan: planAfter, notices: []report.Launch{over, planned}, waits: 1},
		// The line's own plan on the job's 4 GPUs.
		"no plan in time":      {wait: "500ms", done: true, samplesPlan: "dp4.tp1.pp1.mb4.a1.z0", notices: []report.Launch{over}, waits: 1, noPlan: 1},
		"notice not delivered": {wait: "20s", done: true, annotate: true, down: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var noticed time.Time
			col := collector{}
			srv := col.server(t)
			flags, logDir, stateDir := profileSetup(t, srv.URL)
			if tc.done {
				if err := os.MkdirAll(stateDir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(stateDir, profileFile), []byte(`{"complete": true}`), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			planFile, extraFile := filepath.Join(t.TempDir(), "plan"), filepath.Join(t.TempDir(), "extra")
			if err := os.WriteFile(planFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv("FAKE_PLAN_FILE", planFile)
			t.Setenv("FAKE_TAG_EXTRA_FILE", extraFile)
			col.onLaunch = func(l report.Launch) {
				mu.Lock()
				defer mu.Unlock()
				if !l.Profiled || !noticed.IsZero() {
					return
				}
				noticed = time.Now()
				if tc.annotate {
					// rubickd's next cycle fits the type and sets the plan.
					time.AfterFunc(100*time.Millisecond, func() {
						_ = os.WriteFile(planFile, []byte(planAfter), 0o644)
						_ = os.WriteFile(extraFile, nil, 0o644)
					})
				}
			}
			if tc.down {
				srv.Close()
			}
			var out, errOut bytes.Buffer
			if code := run(t.Context(), slices.Concat(flags, []string{"--plan-wait", tc.wait, "--"}, profileLine), profileEnv(), &out, &errOut); code != 0 {
				t.Fatalf("exit %d:\n%s", code, errOut.String())
			}
			ended := time.Now()
			calls := readInvocations(t, logDir)
			train := calls[len(calls)-1]
			want := invocation{Argv: append([]string{"srun", "--export=ALL"}, profileLine...), Env: map[string]string{}}
			if tc.wantPlan != "" {
				// As at any start with the plan.
				want.Argv = slices.Concat(strings.Fields("srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --gres=gpu:2 --cpus-per-task=8 --kill-on-bad-exit=1 --export=ALL"),
					[]string{testSelf(t), "--as-task", "--"}, profileLine, strings.Fields("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "+
						"--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"))
				want.Env = map[string]string{"RUBICK_PLAN": tc.wantPlan, "RUBICK_PLACEMENT": "2", "RUBICK_CPUS": "16",
					"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "node1", "MASTER_PORT": "20042"}
			}
			if d := cmp.Diff(want, train); d != "" {
				t.Errorf("training run (-want +got):\n%s", d)
			}
			col.mu.Lock()
			if d := cmp.Diff(tc.notices, col.launches, cmpopts.IgnoreFields(report.Launch{}, "Time"), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("launch notices (-want +got):\n%s", d)
			}
			newest := ""
			if len(col.got) > 0 {
				newest = col.got[len(col.got)-1].Plan
			}
			col.mu.Unlock()
			if newest != tc.samplesPlan {
				t.Errorf("the newest sample names plan %q, want %q", newest, tc.samplesPlan)
			}
			log := errOut.String()
			if n, m := strings.Count(log, "waiting for rubickd's plan"), strings.Count(log, "no plan from rubickd within --plan-wait"); n != tc.waits || m != tc.noPlan {
				t.Errorf("log says the wait began %d times and ended without a plan %d times, want %d and %d:\n%s", n, m, tc.waits, tc.noPlan, log)
			}
			mu.Lock()
			defer mu.Unlock()
			if bound, _ := time.ParseDuration(tc.wait); tc.noPlan > 0 && (noticed.IsZero() || ended.Sub(noticed) < bound) {
				t.Errorf("trained %v after the notice, want the whole --plan-wait %v", ended.Sub(noticed), bound)
			}
		})
	}
}

// TestProfilePlanWaitSignal: a signal while the job waits for rubickd's
// plan after its phase ends the wait as it ends the phase: the checkpoint
// signal (rubickd restarting the job on its fit) requeues the job held and
// exits 75, SIGTERM exits 143; neither trains. The checkpoint signal of a
// job Slurm is ending (a scancel's SIGTERM where that is the checkpoint
// signal) requeues nothing.
func TestProfilePlanWaitSignal(t *testing.T) {
	for _, tc := range []struct {
		sig     syscall.Signal
		code    int
		requeue bool
		state   string // squeue's; "": RUNNING
	}{
		{syscall.SIGUSR1, exitCheckpointed, true, ""},
		{syscall.SIGTERM, 128 + int(syscall.SIGTERM), false, ""},
		{syscall.SIGUSR1, exitCheckpointed, false, "COMPLETING"},
	} {
		t.Run(tc.sig.String()+tc.state, func(t *testing.T) {
			t.Setenv("FAKE_STATE", tc.state)
			var col collector
			srv := col.server(t)
			flags, logDir, stateDir := profileSetup(t, srv.URL)
			// The phase is done (a requeued job's): it waits at once.
			if err := os.MkdirAll(stateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(stateDir, profileFile), []byte(`{"complete": true}`), 0o600); err != nil {
				t.Fatal(err)
			}
			scontrolLog := filepath.Join(t.TempDir(), "scontrol.log")
			cmd := exec.Command(testSelf(t), slices.Concat(flags, []string{"--plan-wait", "1m", "--"}, profileLine)...)
			cmd.Env = append(os.Environ(), "RUBICK_SRUN_MAIN=1", "FAKE_SCONTROL_LOG="+scontrolLog,
				"SLURM_JOB_ID=42", "SLURM_JOB_NUM_NODES=1", "SLURM_GPUS_ON_NODE=4", "SLURM_CPUS_ON_NODE=16")
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			kill := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
			defer kill.Stop()
			var log strings.Builder
			sc := bufio.NewScanner(stderr)
			for sc.Scan() && !strings.Contains(sc.Text(), "waiting for rubickd's plan") {
				log.WriteString(sc.Text() + "\n")
			}
			if sc.Err() != nil || !strings.Contains(sc.Text(), "waiting for rubickd's plan") {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("no wait for rubickd's plan:\n%s", log.String())
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
				t.Fatalf("exit %v, want %d\n%s", err, tc.code, log.String())
			}
			calls, _ := os.ReadFile(scontrolLog)
			if got := strings.HasSuffix(strings.TrimSpace(string(calls)), "requeuehold 42"); got != tc.requeue {
				t.Errorf("scontrol calls %q: requeued %v, want %v", calls, got, tc.requeue)
			}
			if _, err := os.Stat(filepath.Join(logDir, "calls.jsonl")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("srun ran: %v", err)
			}
		})
	}
}

// TestProfilePhaseMemory: a job whose tag gives its model type's memory
// inputs (arch, a 13B GPT) has the profiling runs that cannot fit in its
// node's GPUs left out and lighter ones in their place, logged on one line
// and recorded in profile.json. Without the GPUs' memory (no NVML, as on
// the lab's fake GPUs) or the inputs (an older rubickd's tag) every run is
// tried, as before.
func TestProfilePhaseMemory(t *testing.T) {
	gpt13 := model.Spec{Params: 13e9, Layers: 40, Hidden: 5120, SeqLen: 2048}
	opts := launch.ProfileOptions{MaxMicroBatch: 4, Iters: 4}
	every, err := launch.ProfilePlans(16, 4, 16, launch.Megatron, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Fits = launch.MemoryFits(gpt13, 80)
	fitting, err := launch.ProfilePlans(16, 4, 16, launch.Megatron, opts)
	if err != nil {
		t.Fatal(err)
	}
	key := func(plan, gpus, cpus string) string { return plan + " gpus=" + gpus + " cpus=" + cpus }
	keys := func(runs []launch.ProfileRun) []string {
		var out []string
		for _, r := range runs {
			out = append(out, key(r.Plan.String(), strconv.Itoa(r.GPUs), strconv.Itoa(r.CPUs)))
		}
		return out
	}
	if cmp.Equal(keys(every), keys(fitting)) {
		t.Fatalf("a 13B GPT on 80 GB GPUs leaves no run out: %v", keys(every))
	}
	noNVML := func(context.Context) (float64, error) {
		return 0, fmt.Errorf("gpuinfo: %w: nvml init: ERROR_LIBRARY_NOT_FOUND", gpuinfo.ErrNoDriver)
	}
	cases := map[string]struct {
		tag    string
		gpuMem func(context.Context) (float64, error)
		want   []launch.ProfileRun
		log    []string
	}{
		"80 GB GPUs": {tag: "profile=1 arch=1.3e+10,40,5120,2048", gpuMem: func(context.Context) (float64, error) { return 80, nil },
			want: fitting, log: []string{`level=INFO msg="profiling runs left out: predicted not to fit in GPU memory"`,
				`gpu_mem_gb=80 headroom=0.95 runs="dp4.tp1.pp1.mb4.a1.z0 (269 GB), dp1.tp1.pp1.mb4.a4.z0 (269 GB), `}},
		"no NVML": {tag: "profile=1 arch=1.3e+10,40,5120,2048", gpuMem: noNVML, want: every,
			log: []string{`level=INFO msg="GPU memory unknown; profiling runs are not checked against it"`, "no NVIDIA driver"}},
		"older rubickd": {tag: "profile=1", want: every, gpuMem: func(context.Context) (float64, error) {
			t.Error("GPU memory read for a tag without arch")
			return 80, nil
		}},
		"malformed arch": {tag: "profile=1 arch=13e9,40", gpuMem: noNVML, want: every,
			log: []string{`level=WARN msg="the job's model type's memory inputs are malformed; every profiling run is tried"`, `arch=\"13e9,40\"`}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			flags, _, _ := profileSetup(t, "")
			t.Setenv("FAKE_TAG_EXTRA", c.tag)
			var out, errOut bytes.Buffer
			if code := runWith(t.Context(), slices.Concat(flags, []string{"--dry-run", "--"}, profileLine), profileEnv(), c.gpuMem, &out, &errOut); code != 0 {
				t.Fatalf("exit %d:\n%s", code, errOut.String())
			}
			var got []string
			for _, m := range regexp.MustCompile(`(?m)^# profile run \d+/\d+ (\S+) gpus=(\d+) cpus=(\d+): `).FindAllStringSubmatch(out.String(), -1) {
				got = append(got, key(m[1], m[2], m[3]))
			}
			if diff := cmp.Diff(keys(c.want), got); diff != "" {
				t.Errorf("profiling runs (-want +got):\n%s", diff)
			}
			for _, l := range c.log {
				if !strings.Contains(errOut.String(), l) {
					t.Errorf("log lacks %q:\n%s", l, errOut.String())
				}
			}
			if n := strings.Count(errOut.String(), "left out"); n != map[bool]int{true: 1}[name == "80 GB GPUs"] {
				t.Errorf("%d lines about runs left out:\n%s", n, errOut.String())
			}
		})
	}

	// The phase run: only runs that fit start, and profile.json says what
	// was left out and for which GPU memory.
	flags, logDir, stateDir := profileSetup(t, "")
	t.Setenv("FAKE_TAG_EXTRA", "profile=1 arch=1.3e+10,40,5120,2048")
	var out, errOut bytes.Buffer
	if code := runWith(t.Context(), slices.Concat(flags, []string{"--"}, profileLine), profileEnv(),
		func(context.Context) (float64, error) { return 80, nil }, &out, &errOut); code != 0 {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
	var started []string
	for _, c := range readInvocations(t, logDir) {
		if c.Env["RUBICK_PROFILE_RUN"] != "" {
			started = append(started, key(c.Env["RUBICK_PLAN"], strconv.Itoa(strings.Count(c.Env["CUDA_VISIBLE_DEVICES"], ",")+1), c.Env["RUBICK_CPUS"]))
		}
	}
	if diff := cmp.Diff(keys(fitting), started); diff != "" {
		t.Errorf("runs started (-want +got):\n%s", diff)
	}
	rec := readProfile(t, stateDir)
	if rec.GPUMemGB != 80 || len(rec.LeftOut) == 0 || rec.LeftOut[0] != "dp4.tp1.pp1.mb4.a1.z0 (269 GB)" || len(rec.Runs) != len(fitting) {
		t.Errorf("profile.json: gpu_mem_gb %v, left_out %q, %d runs", rec.GPUMemGB, rec.LeftOut, len(rec.Runs))
	}

	// Requeued with its phase complete, it profiles nothing: the GPUs'
	// memory is not read, nor runs said to be left out.
	errOut.Reset()
	if code := runWith(t.Context(), slices.Concat(flags, []string{"--"}, profileLine), profileEnv(),
		func(context.Context) (float64, error) {
			t.Error("GPU memory read for a phase already done")
			return 80, nil
		}, &out, &errOut); code != 0 {
		t.Fatalf("requeued: exit %d:\n%s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "profiling phase already done") || strings.Contains(errOut.String(), "left out") {
		t.Errorf("requeued: stderr, want the phase done and no runs left out:\n%s", errOut.String())
	}
}

// TestProfilePhaseHostMemory: a ZeRO-Offload run that the memory model
// predicts needs more than the job's memory on the node allows (Slurm's
// --mem, or --mem-per-cpu times its CPUs there) is left out, as one its
// GPUs cannot hold is, logged on a line of its own and recorded in
// profile.json. Before, it started, and Slurm's cgroup killed it after
// its start-up. Without a memory bound every run that fits the GPUs is
// tried.
func TestProfilePhaseHostMemory(t *testing.T) {
	gpt13 := model.Spec{Params: 13e9, Layers: 40, Hidden: 5120, SeqLen: 2048}
	opts := launch.ProfileOptions{MaxMicroBatch: 4, Iters: 4}
	plans := func(fits ...func(model.Plan, model.Placement) bool) []launch.ProfileRun {
		t.Helper()
		o := opts
		o.Fits = func(p model.Plan, pl model.Placement) bool {
			for _, f := range fits {
				if !f(p, pl) {
					return false
				}
			}
			return true
		}
		runs, err := launch.ProfilePlans(16, 4, 16, launch.Megatron, o)
		if err != nil {
			t.Fatal(err)
		}
		return runs
	}
	// 256 GB on the node: a Megatron offload run on 1 GPU is predicted to
	// need 198 GB there, on 2 GPUs 224 GB, more than 80 % of it.
	gpuFits, hostFits := launch.MemoryFits(gpt13, 80), launch.HostMemoryFits(gpt13, 256)
	fitting, both, hostOnly := plans(gpuFits), plans(gpuFits, hostFits), plans(hostFits)
	key := func(r launch.ProfileRun) string { return fmt.Sprintf("%s gpus=%d cpus=%d", r.Plan, r.GPUs, r.CPUs) }
	keys := func(runs []launch.ProfileRun) []string {
		var out []string
		for _, r := range runs {
			out = append(out, key(r))
		}
		return out
	}
	offloadOn := func(runs []launch.ProfileRun) map[int]int {
		n := map[int]int{}
		for _, r := range runs {
			if r.Plan.Offload {
				n[r.GPUs]++
			}
		}
		return n
	}
	if n := offloadOn(fitting); n[2] == 0 || n[4] == 0 {
		t.Fatalf("the GPUs alone leave no offload run on 2 and 4 GPUs to leave out: %v", keys(fitting))
	}
	if n := offloadOn(both); n[1] == 0 || n[2] != 0 || n[4] != 0 {
		t.Fatalf("256 GB: want offload runs on 1 GPU alone: %v", keys(both))
	}
	noNVML := func(context.Context) (float64, error) {
		return 0, fmt.Errorf("gpuinfo: %w: nvml init: ERROR_LIBRARY_NOT_FOUND", gpuinfo.ErrNoDriver)
	}
	gpu80 := func(context.Context) (float64, error) { return 80, nil }
	hostLine := []string{`level=INFO msg="profiling runs left out: predicted not to fit in the job's memory on the node"`,
		`host_mem_gb=256 headroom=0.8 runs="dp4.tp1.pp1.mb4.a1.z1+off+gc (276 GB), dp4.tp1.pp1.mb1.a4.z1+off (276 GB), ` +
			`dp2.tp1.pp1.mb4.a2.z1+off+gc (224 GB), dp2.tp1.pp1.mb1.a8.z1+off (224 GB)"`}
	cases := map[string]struct {
		env    map[string]string
		show   string // FAKE_SHOW_EXTRA
		gpuMem func(context.Context) (float64, error)
		want   []launch.ProfileRun
		log    []string
		noLog  string
	}{
		"--mem":         {env: map[string]string{"SLURM_MEM_PER_NODE": "262144"}, gpuMem: gpu80, want: both, log: hostLine},
		"--mem-per-cpu": {env: map[string]string{"SLURM_MEM_PER_CPU": "16384"}, gpuMem: gpu80, want: both, log: hostLine},
		// rubickd raised the job's 16 GB per GPU to 64 GB: scontrol shows
		// it, the environment does not.
		"--mem-per-gpu": {env: map[string]string{"SLURM_MEM_PER_GPU": "16384"}, show: "MemPerTres=gres:gpu:65536", gpuMem: gpu80, want: both,
			log: hostLine},
		// A user's comment cannot stand for the job's memory.
		"MemPerTres in the comment": {show: "Comment=x MemPerTres=gres:gpu:1 MemPerTres=gres:gpu:65536", gpuMem: gpu80, want: both, log: hostLine},
		// rubickd sized a --mem-per-cpu job per node: slurmd wrote the
		// node's memory at the start, beside the submission's per CPU.
		"sized per node": {env: map[string]string{"SLURM_MEM_PER_NODE": "262144", "SLURM_MEM_PER_CPU": "1024"}, gpuMem: gpu80, want: both,
			log: hostLine},
		// Without the GPUs' memory the plain runs stay and offload ones
		// are checked all the same.
		"GPU memory unknown": {env: map[string]string{"SLURM_MEM_PER_NODE": "262144"}, gpuMem: noNVML, want: hostOnly,
			log: []string{`msg="GPU memory unknown; profiling runs are not checked against it"`,
				`host_mem_gb=256 headroom=0.8 runs="dp4.tp1.pp1.mb4.a1.z1+off (276 GB), dp2.tp1.pp1.mb4.a2.z1+off (224 GB)"`},
			noLog: "fit in GPU memory"},
		"no --mem": {gpuMem: gpu80, want: fitting, noLog: "job's memory"},
		"--mem=0":  {env: map[string]string{"SLURM_MEM_PER_NODE": "0"}, gpuMem: gpu80, want: fitting, noLog: "job's memory"},
		"malformed": {env: map[string]string{"SLURM_MEM_PER_NODE": "256G"}, gpuMem: gpu80, want: fitting,
			log: []string{`level=WARN msg="the job's memory on the node is unknown; offload profiling runs are not checked against it"`,
				`err="SLURM_MEM_PER_NODE=\"256G\" is not a whole number of MB"`},
			noLog: "not to fit in the job's memory"},
	}
	env := func(extra map[string]string) func(string) string {
		m := map[string]string{"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "node1", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "4",
			"SLURM_CPUS_ON_NODE": "16", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
		maps.Copy(m, extra)
		return envMap(m)
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			flags, _, _ := profileSetup(t, "")
			t.Setenv("FAKE_TAG_EXTRA", "profile=1 arch=1.3e+10,40,5120,2048")
			t.Setenv("FAKE_SHOW_EXTRA", c.show)
			var out, errOut bytes.Buffer
			if code := runWith(t.Context(), slices.Concat(flags, []string{"--dry-run", "--"}, profileLine), env(c.env), c.gpuMem, &out, &errOut); code != 0 {
				t.Fatalf("exit %d:\n%s", code, errOut.String())
			}
			var got []string
			for _, m := range regexp.MustCompile(`(?m)^# profile run \d+/\d+ (\S+) gpus=(\d+) cpus=(\d+): `).FindAllStringSubmatch(out.String(), -1) {
				got = append(got, m[1]+" gpus="+m[2]+" cpus="+m[3])
			}
			if diff := cmp.Diff(keys(c.want), got); diff != "" {
				t.Errorf("profiling runs (-want +got):\n%s", diff)
			}
			for _, l := range c.log {
				if !strings.Contains(errOut.String(), l) {
					t.Errorf("log lacks %q:\n%s", l, errOut.String())
				}
			}
			if c.noLog != "" && strings.Contains(errOut.String(), c.noLog) {
				t.Errorf("log has %q:\n%s", c.noLog, errOut.String())
			}
		})
	}

	// The phase run: no offload run beyond the job's memory starts, and
	// profile.json says what was left out and for which memory.
	flags, logDir, stateDir := profileSetup(t, "")
	t.Setenv("FAKE_TAG_EXTRA", "profile=1 arch=1.3e+10,40,5120,2048")
	var out, errOut bytes.Buffer
	if code := runWith(t.Context(), slices.Concat(flags, []string{"--"}, profileLine), env(map[string]string{"SLURM_MEM_PER_NODE": "262144"}),
		gpu80, &out, &errOut); code != 0 {
		t.Fatalf("exit %d:\n%s", code, errOut.String())
	}
	var started []string
	for _, c := range readInvocations(t, logDir) {
		if c.Env["RUBICK_PROFILE_RUN"] != "" {
			started = append(started, fmt.Sprintf("%s gpus=%d cpus=%s", c.Env["RUBICK_PLAN"], strings.Count(c.Env["CUDA_VISIBLE_DEVICES"], ",")+1, c.Env["RUBICK_CPUS"]))
		}
	}
	if diff := cmp.Diff(keys(both), started); diff != "" {
		t.Errorf("runs started (-want +got):\n%s", diff)
	}
	rec := readProfile(t, stateDir)
	if rec.GPUMemGB != 80 || rec.HostMemGB != 256 || len(rec.LeftOut) == 0 || len(rec.LeftOutHost) == 0 ||
		rec.LeftOutHost[0] != "dp4.tp1.pp1.mb4.a1.z1+off+gc (276 GB)" || len(rec.Runs) != len(both) {
		t.Errorf("profile.json: gpu_mem_gb %v, host_mem_gb %v, left_out %q, left_out_host %q, %d runs",
			rec.GPUMemGB, rec.HostMemGB, rec.LeftOut, rec.LeftOutHost, len(rec.Runs))
	}
}

func TestJobMemGB(t *testing.T) {
	cases := map[string]struct {
		env        map[string]string
		memPerTres string
		cpus, gpus int
		want       float64
		wantErr    string
	}{
		"--mem":          {env: map[string]string{"SLURM_MEM_PER_NODE": "262144"}, cpus: 16, want: 256},
		"--mem-per-cpu":  {env: map[string]string{"SLURM_MEM_PER_CPU": "4096"}, cpus: 16, want: 64},
		"sized per node": {env: map[string]string{"SLURM_MEM_PER_NODE": "262144", "SLURM_MEM_PER_CPU": "1024"}, cpus: 16, want: 256},
		"--mem=0":        {env: map[string]string{"SLURM_MEM_PER_NODE": "0", "SLURM_MEM_PER_CPU": "1024"}, cpus: 16},
		"CPUs unknown":   {env: map[string]string{"SLURM_MEM_PER_CPU": "4096"}},
		// The environment keeps the submission's 16 GB per GPU; rubickd
		// raised it to 64 GB.
		"--mem-per-gpu":                    {env: map[string]string{"SLURM_MEM_PER_GPU": "16384"}, memPerTres: "gres:gpu:65536", cpus: 16, gpus: 4, want: 256},
		"--mem-per-gpu, MemPerTres unread": {env: map[string]string{"SLURM_MEM_PER_GPU": "16384"}, cpus: 16, gpus: 4},
		"gres/gpu":                         {memPerTres: "gres/gpu:65536", gpus: 2, want: 128},
		"typed":                            {memPerTres: "gres/gpu:a100:65536", gpus: 2, want: 128},
		"GPUs unknown":                     {memPerTres: "gres:gpu:65536", cpus: 16},
		"no GPU entry":                     {memPerTres: "gres:nic:1", env: map[string]string{"SLURM_MEM_PER_NODE": "262144"}, gpus: 2, want: 256},
		"none":                             {cpus: 16},
		"suffix":                           {env: map[string]string{"SLURM_MEM_PER_NODE": "256G"}, cpus: 16, wantErr: `SLURM_MEM_PER_NODE="256G" is not a whole number of MB`},
		"negative":                         {env: map[string]string{"SLURM_MEM_PER_CPU": "-1"}, cpus: 16, wantErr: `SLURM_MEM_PER_CPU="-1" is not a whole number of MB`},
		"MemPerTres suffix":                {memPerTres: "gres:gpu:64G", gpus: 2, wantErr: `MemPerTres="gres:gpu:64G" is not a whole number of MB per GPU`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := jobMemGB(c.memPerTres, envMap(c.env), launch.Alloc{CPUsOnNode: c.cpus, GPUsOnNode: c.gpus})
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Errorf("jobMemGB = %v, %v; want error %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("jobMemGB = %v, %v; want %v GB", got, err, c.want)
			}
		})
	}
}
