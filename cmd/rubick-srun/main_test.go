package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
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
	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/slurm"
)

// The test binary plays srun, scontrol and squeue when it runs under those names
// (symbolic links in fakes; munge is a shell script), and rubick-srun itself when
// RUBICK_SRUN_MAIN is set, so the tests need no Slurm and no munged.
func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "srun":
		os.Exit(fakeSrun(os.Args[1:]))
	case "scancel":
		os.Exit(fakeScancel(os.Args[1:]))
	case "squeue":
		// Asked for the job's state (%T) or its comment (%k).
		if os.Args[len(os.Args)-1] == "%T" {
			if st := os.Getenv("FAKE_STATE"); st != "" {
				fmt.Println(st)
			} else {
				fmt.Println("RUNNING")
			}
			os.Exit(0)
		}
		if c, ok := os.LookupEnv("FAKE_COMMENT"); ok {
			fmt.Println(c)
		} else {
			fmt.Println("(null)")
		}
		os.Exit(0)
	case "scontrol":
		if p := os.Getenv("FAKE_SCONTROL_LOG"); p != "" {
			f, _ := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			fmt.Fprintln(f, strings.Join(os.Args[1:], " "))
			f.Close()
		}
		// A slow read of the job: it says it has begun, then takes a while.
		if p := os.Getenv("FAKE_SCONTROL_SLOW"); p != "" && len(os.Args) > 1 && os.Args[1] == "show" {
			_ = os.WriteFile(p, nil, 0o644)
			time.Sleep(time.Second)
		}
		if os.Getenv("FAKE_SCONTROL_FAIL") != "" {
			fmt.Fprintln(os.Stderr, "slurm_load_jobs error: Invalid job id specified")
			os.Exit(1)
		}
		// The first n calls (as the log counts them) time out.
		if n, err := strconv.Atoi(os.Getenv("FAKE_SCONTROL_FAIL_FIRST")); err == nil {
			calls, _ := os.ReadFile(os.Getenv("FAKE_SCONTROL_LOG"))
			if strings.Count(string(calls), "\n") <= n {
				fmt.Fprintln(os.Stderr, "slurm_update error: Socket timed out on send/recv operation")
				os.Exit(1)
			}
		}
		// The first n requeueholds (as the log counts them) time out.
		if n, err := strconv.Atoi(os.Getenv("FAKE_REQUEUEHOLD_FAIL_FIRST")); err == nil && os.Args[1] == "requeuehold" {
			calls, _ := os.ReadFile(os.Getenv("FAKE_SCONTROL_LOG"))
			if strings.Count(string(calls), "requeuehold ") <= n {
				fmt.Fprintln(os.Stderr, "slurm_requeue error: Socket timed out on send/recv operation")
				os.Exit(1)
			}
		}
		plan := os.Getenv("FAKE_PLAN")
		if p := os.Getenv("FAKE_PLAN_FILE"); p != "" {
			if data, err := os.ReadFile(p); err == nil {
				plan = strings.TrimSpace(string(data))
			}
		}
		extra := ""
		if e := os.Getenv("FAKE_TAG_EXTRA"); e != "" {
			extra = " " + e
		}
		// Once there, FAKE_TAG_EXTRA_FILE holds the keys rubickd's later
		// annotation leaves.
		if p := os.Getenv("FAKE_TAG_EXTRA_FILE"); p != "" {
			if data, err := os.ReadFile(p); err == nil {
				extra = ""
				if e := strings.TrimSpace(string(data)); e != "" {
					extra = " " + e
				}
			}
		}
		mail := ""
		if m := os.Getenv("FAKE_MAIL_TYPE"); m != "" {
			mail = " MailUser=alice MailType=" + m
		}
		if os.Getenv("FAKE_NO_TAG") != "" {
			fmt.Printf("JobId=%s JobName=train UserId=alice(1000) Priority=1 AdminComment=(null) Comment=hello NumNodes=1\n", os.Args[len(os.Args)-1])
			os.Exit(0)
		}
		// FAKE_SHOW_EXTRA: fields after the comments (MemPerTres=...).
		fmt.Printf("JobId=%s JobName=train UserId=alice(1000) Priority=1 AdminComment=other=1;rubick:v1 model=gpt2 class=guaranteed plan=%s gen=2%s SystemComment=x Comment=hello world NumNodes=1%s %s\n",
			os.Args[len(os.Args)-1], plan, extra, mail, os.Getenv("FAKE_SHOW_EXTRA"))
		os.Exit(0)
	}
	if os.Getenv("FAKE_TASK") == "1" {
		os.Exit(fakeTask())
	}
	if os.Getenv("RUBICK_SRUN_MAIN") == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// fakeSrun records its argv and plays a trainer.
func fakeSrun(args []string) int {
	if p := os.Getenv("FAKE_SRUN_LOG"); p != "" {
		data, _ := json.Marshal(append([]string{"srun"}, args...))
		_ = os.WriteFile(p, data, 0o644)
	}
	if d := os.Getenv("FAKE_SRUN_LOGDIR"); d != "" {
		logInvocation(d, args)
	}
	if os.Getenv("RUBICK_PROFILE_RUN") != "" || os.Getenv("FAKE_SRUN_MODE") == "emu" {
		return fakeTrainer(args)
	}
	switch os.Getenv("FAKE_SRUN_MODE") {
	case "srun":
		return fakeSrunStep()
	case "wait-signal":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
		fmt.Println("ready")
		s := <-sigs
		fmt.Println("got", s)
		return 75
	default:
		os.Stdout.WriteString(trainerOutput)
		fmt.Fprint(os.Stderr, "[INFO] epoch=0/micro_step=8/global_step=4, RunningAvgSamplesPerSec=30.0, CurrSamplesPerSec=32.0, MemAllocated=1GB\n"+
			" iteration        4/      10 | consumed samples: 64 | elapsed time per iteration (ms): 400.0 |\n")
		n, _ := strconv.Atoi(os.Getenv("FAKE_SRUN_EXIT"))
		return n
	}
}

// srunSignalsAsSrun are the signals srun (src/srun/libsrun/srun_job.c,
// _srun_signal_mgr) does not pass on: SIGTERM, SIGHUP and SIGQUIT make it
// SIGKILL the tasks ("forcing job termination"), a first SIGINT makes it
// print the tasks' state. It forwards the others, USR1 and USR2 among
// them, to the tasks.
var srunSignalsAsSrun = []os.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2}

// fakeSrunStep plays srun with one task: the task (this binary as
// FAKE_TASK) runs in a process group of its own, as tasks run under
// slurmstepd, not under srun, and writes its pid to FAKE_TASK_PIDFILE,
// where the fake scancel finds it to signal it as slurmstepd would.
func fakeSrunStep() int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, srunSignalsAsSrun...)
	self, _ := os.Executable()
	task := exec.Command(self)
	task.Env = append(os.Environ(), "FAKE_TASK=1")
	task.Stdout, task.Stderr = os.Stdout, os.Stderr
	task.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := task.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "srun: error:", err)
		return 1
	}
	exited := make(chan int, 1)
	go func() {
		err := task.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			exited <- 0
		case errors.As(err, &ee) && ee.ExitCode() < 0:
			exited <- 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		case errors.As(err, &ee):
			exited <- ee.ExitCode()
		default:
			exited <- 1
		}
	}()
	for {
		select {
		case code := <-exited:
			return code
		case s := <-sigs:
			switch s {
			case syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
				fmt.Fprintln(os.Stderr, "srun: forcing job termination")
				_ = task.Process.Signal(syscall.SIGKILL)
			case syscall.SIGINT:
				fmt.Fprintln(os.Stderr, "srun: interrupt (one more within 1 sec to abort)")
			default:
				_ = task.Process.Signal(s)
			}
		}
	}
}

// fakeTask is srun's task in fakeSrunStep: it says which signal reached
// it and exits 75, as a trainer exits after its checkpoint.
func fakeTask() int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, srunSignalsAsSrun...)
	if err := os.WriteFile(os.Getenv("FAKE_TASK_PIDFILE"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return 1
	}
	fmt.Println("ready")
	fmt.Println("task got", <-sigs)
	return 75
}

// fakeScancel logs its argv to FAKE_SCANCEL_LOG and, for "--signal=SIG
// JOB" (no --batch or --full: the job's steps), signals the fake task.
func fakeScancel(args []string) int {
	if p := os.Getenv("FAKE_SCANCEL_LOG"); p != "" {
		f, _ := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		fmt.Fprintln(f, strings.Join(args, " "))
		f.Close()
	}
	if len(args) != 2 || !strings.HasPrefix(args[0], "--signal=") {
		fmt.Fprintln(os.Stderr, "scancel: fake: want --signal=SIG JOB")
		return 1
	}
	sig, ok := map[string]syscall.Signal{"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP,
		"QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2}[strings.TrimPrefix(args[0], "--signal=")]
	data, err := os.ReadFile(os.Getenv("FAKE_TASK_PIDFILE"))
	pid, perr := strconv.Atoi(string(data))
	if !ok || err != nil || perr != nil {
		fmt.Fprintln(os.Stderr, "scancel: error: Kill job error on job id", args[1])
		return 1
	}
	_ = syscall.Kill(pid, sig)
	return 0
}

const trainerOutput = "building GPT model ...\n" +
	" iteration        1/      10 | consumed samples: 16 | elapsed time per iteration (ms): 900.0 |\n" +
	" iteration        2/      10 | consumed samples: 32 | elapsed time per iteration (ms): 500.0 |\n" +
	" iteration        3/      10 | consumed samples: 48 | elapsed time per iteration (ms): 250.0 |\n" +
	"no newline at the end"

// fakes makes the fake programs and returns their directory.
func fakes(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"srun", "scontrol", "squeue", "scancel"} {
		if err := os.Symlink(self, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// munge runs once per sample: a shell script is much faster to start
	// than the test binary, more so under the race detector.
	if err := os.WriteFile(filepath.Join(dir, "munge"), []byte("#!/bin/sh\nprintf 'MUNGE:%s:\\n' \"$(base64 -w0)\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func envMap(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"--help"}, envMap(nil), &out, &errOut); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, f := range []string{"-plan", "-dialect", "-launcher", "-gpu-bind", "-cpus-per-task", "-global-batch", "-signal",
		"-scontrol", "-srun", "-state-dir", "-checkpoint-dir", "-ensure-load", "-model-type", "-report-url", "-munge",
		"-munge-socket", "-report-skip", "-dry-run", "-log-level", "-profile-iters", "-profile-timeout", "-profile-run-timeout", "(default 5m0s)", `(default "USR1")`, "(default true)"} {
		if !strings.Contains(errOut.String(), f) {
			t.Errorf("help lacks %q", f)
		}
	}
}

func TestBadInput(t *testing.T) {
	line := []string{"python", "pretrain_gpt.py", "--global-batch-size", "32"}
	cases := map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"plan":            {args: append([]string{"--plan", "dp4"}, line...), want: `--plan: bad input: plan`},
		"dialect":         {args: append([]string{"--dialect", "jax"}, line...), want: `--dialect: bad input: dialect="jax"`},
		"launcher":        {args: append([]string{"--launcher", "mpi"}, line...), want: `mode="mpi"`},
		"signal":          {args: append([]string{"--signal", "FOO"}, line...), want: `--signal="FOO"`},
		"cpus":            {args: append([]string{"--cpus-per-task=-1"}, line...), want: "--cpus-per-task=-1"},
		"no command":      {args: []string{"--plan", "dp1.tp1.pp1.mb1.a1.z0"}, want: "no training command"},
		"nodes":           {args: append([]string{"--plan", "dp1.tp1.pp1.mb1.a1.z0"}, line...), env: map[string]string{"SLURM_JOB_NUM_NODES": "two"}, want: `SLURM_JOB_NUM_NODES=\"two\"`},
		"global batch":    {args: append([]string{"--plan", "dp4.tp1.pp1.mb2.a1.z0"}, line...), want: "--global-batch-size=32 but plan dp4.tp1.pp1.mb2.a1.z0 gives DP*MicroBatch*Accum = 4*2*1 = 8"},
		"log level":       {args: append([]string{"--log-level", "loud"}, line...), want: `--log-level="loud"`},
		"profile iters":   {args: append([]string{"--profile-iters", "1"}, line...), want: "--profile-iters=1 must be 0 or above --report-skip=1"},
		"profile timeout": {args: append([]string{"--profile-timeout", "0s"}, line...), want: "--profile-timeout=0s"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(t.Context(), c.args, envMap(c.env), &out, &errOut)
			if code != exitUsage || !strings.Contains(errOut.String(), c.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant %d and %q", code, errOut.String(), exitUsage, c.want)
			}
		})
	}
}

func TestDryRunDeepSpeed(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "ds.json")
	if err := os.WriteFile(cfgPath, []byte(`{"train_batch_size": 16, "zero_optimization": {"stage": 0}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--plan", "dp2.tp1.pp1.mb4.a2.z2+off", "--state-dir", state, "--dry-run",
		"deepspeed", "train.py", "--deepspeed_config", cfgPath},
		envMap(map[string]string{"SLURM_JOB_NUM_NODES": "1", "SLURM_CPUS_ON_NODE": "16"}), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	want := "srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --gres=gpu:2 --cpus-per-task=16 --cpu-bind=cores --kill-on-bad-exit=1 --export=ALL " +
		"deepspeed --num_nodes 1 --num_gpus 2 train.py --deepspeed_config " + filepath.Join(state, "rubick-ds.json") + "\n"
	if !strings.HasPrefix(out.String(), want) {
		t.Errorf("dry run printed\n%s\nwant it to start with\n%s", out.String(), want)
	}
	for _, s := range []string{`"stage": 2`, `"device": "cpu"`, `"gradient_accumulation_steps": 2`} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("dry run config lacks %s:\n%s", s, out.String())
		}
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dry run wrote %s: %v", state, err)
	}
}

// A Hugging Face Trainer line, its config given inline, takes the plan as
// TrainingArguments and keeps its config's "auto" values for the Trainer.
func TestDryRunHuggingFace(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "ds.json")
	cfg := `{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
		"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}, "zero_optimization": {"stage": 2}}`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--plan", "dp2.tp1.pp1.mb4.a2.z3+off", "--state-dir", state, "--dry-run",
		"python", "train.py", "--deepspeed=" + cfgPath, "--per-device-train-batch-size", "8", "--output_dir", "out"},
		envMap(map[string]string{"SLURM_JOB_NUM_NODES": "1", "SLURM_CPUS_ON_NODE": "16"}), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	want := " python train.py --deepspeed=" + filepath.Join(state, "rubick-ds.json") +
		" --per-device-train-batch-size 4 --output_dir out --gradient_accumulation_steps 2\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("dry run printed\n%s\nwant it to contain\n%s", out.String(), want)
	}
	for _, s := range []string{`"train_batch_size": "auto"`, `"lr": "auto"`, `"stage": 3`, `"device": "cpu"`} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("dry run config lacks %s:\n%s", s, out.String())
		}
	}
}

func TestAdminComment(t *testing.T) {
	cases := map[string]string{
		"JobId=1 AdminComment=rubick:v1 model=gpt2 plan=dp1.tp1.pp1.mb1.a1.z0 Comment=a b": "rubick:v1 model=gpt2 plan=dp1.tp1.pp1.mb1.a1.z0",
		"JobId=1 AdminComment=x;rubick:v1 gen=3 SystemComment=y":                           "x;rubick:v1 gen=3",
		"JobId=1 AdminComment=rubick:v1 model=bert":                                        "rubick:v1 model=bert",
		"JobId=1 Comment=AdminComment=fake":                                                "",
		"JobId=1 Priority=0":                                                               "",
	}
	for in, want := range cases {
		if got := adminComment(in); got != want {
			t.Errorf("adminComment(%q) = %q, want %q", in, got, want)
		}
	}
}

// collector is a samples endpoint that records what it accepts.
type collector struct {
	mu       sync.Mutex
	got      []report.Sample
	launches []report.Launch
	// before is, per launch notice, the samples received before it.
	before []int
	// delay slows the taking of each sample, as a busy rubickd does.
	delay time.Duration
	// onLaunch, when set, sees each launch notice taken, as rubickd acts
	// on it.
	onLaunch func(report.Launch)
}

func (c *collector) server(t *testing.T) *httptest.Server {
	// The fake munge only base64-encodes; decode it the same way.
	verify := verifierFunc(func(_ context.Context, cred string) (report.Credential, error) {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(strings.TrimPrefix(cred, "MUNGE:"), ":"))
		return report.Credential{UID: 1000, Payload: raw}, err
	})
	srv := httptest.NewServer(report.Handler(verify, report.Acceptors{
		Sample: func(_ context.Context, _ uint32, s report.Sample) error {
			time.Sleep(c.delay)
			c.mu.Lock()
			defer c.mu.Unlock()
			c.got = append(c.got, s)
			return nil
		},
		Launch: func(_ context.Context, _ uint32, l report.Launch) error {
			c.mu.Lock()
			c.launches = append(c.launches, l)
			c.before = append(c.before, len(c.got))
			c.mu.Unlock()
			if c.onLaunch != nil {
				c.onLaunch(l)
			}
			return nil
		},
	}))
	t.Cleanup(srv.Close)
	return srv
}

type verifierFunc func(context.Context, string) (report.Credential, error)

func (f verifierFunc) Decode(ctx context.Context, cred string) (report.Credential, error) {
	return f(ctx, cred)
}

func readArgv(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var argv []string
	if err := json.Unmarshal(data, &argv); err != nil {
		t.Fatal(err)
	}
	return argv
}

// TestRunFromAdminComment runs the whole path: plan from scontrol, srun with
// the plan's geometry, output passed through unchanged, samples reported
// (with the 8 of the node's 9 CPUs srun gives the two tasks), the step's
// exit status returned.
func TestRunFromAdminComment(t *testing.T) {
	bin := fakes(t)
	logPath := filepath.Join(t.TempDir(), "argv.json")
	t.Setenv("FAKE_SRUN_LOG", logPath)
	t.Setenv("FAKE_SRUN_EXIT", "3")
	t.Setenv("FAKE_PLAN", "dp2.tp1.pp1.mb4.a2.z0+gc")
	var col collector
	srv := col.server(t)
	env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "2",
		"SLURM_CPUS_ON_NODE": "9"})
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "--srun", filepath.Join(bin, "srun"),
		"--munge", filepath.Join(bin, "munge"), "--report-url", srv.URL, "--report-skip", "0", "--",
		"python", "pretrain_gpt.py", "--global-batch-size", "16", "--micro-batch-size", "8", "--save", "/ck"}, env, &out, &errOut)
	if code != 3 {
		t.Fatalf("exit %d, want the step's 3; stderr:\n%s", code, errOut.String())
	}
	wantArgv := []string{"srun", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2", "--gres=gpu:2", "--cpus-per-task=4", "--kill-on-bad-exit=1", "--export=ALL",
		testSelf(t), "--as-task", "--", "python", "pretrain_gpt.py", "--global-batch-size", "16", "--micro-batch-size", "4", "--save", "/ck",
		"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1",
		"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1", "--load", "/ck"}
	if diff := cmp.Diff(wantArgv, readArgv(t, logPath)); diff != "" {
		t.Errorf("srun argv (-want +got):\n%s", diff)
	}
	if out.String() != trainerOutput {
		t.Errorf("stdout changed:\n%q\nwant\n%q", out.String(), trainerOutput)
	}
	// The job's log names the plan and what it runs on, not as flags only.
	if want := `msg=launching prog=rubick-srun job=42 plan=dp2.tp1.pp1.mb4.a2.z0+gc placement=2 cpus=8 argv=`; !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
	}
	// The Megatron line on stderr counts too; the DeepSpeed one before it
	// does not, on a Megatron line.
	col.mu.Lock()
	defer col.mu.Unlock()
	var got []string
	for _, s := range col.got {
		if s.JobID != "42" || s.ModelType != "gpt2" || s.Plan != "dp2.tp1.pp1.mb4.a2.z0+gc" || s.Placement != "2" || s.CPUs != 8 {
			t.Errorf("sample %+v", s)
		}
		it := "-"
		if s.Iteration != nil {
			it = fmt.Sprint(*s.Iteration)
		}
		got = append(got, fmt.Sprintf("%s %s %.3f", s.Source, it, s.IterS))
	}
	want := []string{"megatron 1 0.900", "megatron 2 0.500", "megatron 3 0.250", "megatron 4 0.400"}
	// stdout and stderr are read concurrently: order across them is free.
	if !sameSet(want, got) {
		t.Errorf("samples %q, want %q", got, want)
	}
	// Before training, the line said it can run every plan.
	if len(col.launches) != 1 || col.launches[0].Refused || col.launches[0].Cannot != "" || col.launches[0].Dialect != "megatron" || col.launches[0].GlobalBatch != 16 {
		t.Errorf("launch notices %+v, want one from a megatron line of global batch 16 that can run anything", col.launches)
	}
}

// A --plan the line cannot take is the user's own: an error naming it, no
// requeue (nobody would release the job).
func TestRunUnsupportedOwnPlan(t *testing.T) {
	bin := fakes(t)
	dir := t.TempDir()
	scontrolLog := filepath.Join(dir, "scontrol.log")
	t.Setenv("FAKE_SCONTROL_LOG", scontrolLog)
	ds := filepath.Join(dir, "ds.json")
	if err := os.WriteFile(ds, []byte(`{"train_batch_size": 16}`), 0o644); err != nil {
		t.Fatal(err)
	}
	env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "2", "SLURM_SUBMIT_DIR": dir})
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "--srun", filepath.Join(bin, "srun"),
		"--plan", "dp1.tp2.pp1.mb16.a1.z0", "--", "deepspeed", "train.py", "--deepspeed_config", ds}, env, &out, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), "tensor or pipeline parallelism") {
		t.Errorf("exit %d, stderr:\n%s\nwant %d naming the TP plan", code, errOut.String(), exitUsage)
	}
	if calls, _ := os.ReadFile(scontrolLog); strings.Contains(string(calls), "requeuehold") {
		t.Errorf("scontrol calls %q: a --plan the line cannot run must not requeue the job", calls)
	}
}

// A line with context parallelism can run no plan rubickd could choose
// (plans have no such dimension): rubick-srun runs nothing and exits 2
// naming the flag, rather than requeue the job for another plan that it
// would refuse as well.
func TestRunContextParallel(t *testing.T) {
	bin := fakes(t)
	dir := t.TempDir()
	srunLog, scontrolLog := filepath.Join(dir, "argv.json"), filepath.Join(dir, "scontrol.log")
	t.Setenv("FAKE_SRUN_LOG", srunLog)
	t.Setenv("FAKE_SCONTROL_LOG", scontrolLog)
	t.Setenv("FAKE_PLAN", "dp2.tp1.pp1.mb8.a1.z0")
	var col collector
	srv := col.server(t)
	env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "2",
		"SLURM_CPUS_ON_NODE": "8", "SLURM_SUBMIT_DIR": dir})
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"),
		"--srun", filepath.Join(bin, "srun"), "--munge", filepath.Join(bin, "munge"), "--report-url", srv.URL, "--",
		"python", "pretrain_gpt.py", "--global-batch-size", "16", "--context-parallel-size", "2"}, env, &out, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), "--context-parallel-size=2") {
		t.Errorf("exit %d, stderr:\n%s\nwant %d naming --context-parallel-size=2", code, errOut.String(), exitUsage)
	}
	if _, err := os.Stat(srunLog); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("srun ran (%v): the line's DP is not the plan's", err)
	}
	if calls, _ := os.ReadFile(scontrolLog); strings.Contains(string(calls), "requeuehold") {
		t.Errorf("scontrol calls %q: no plan avoids the flag, so the job must not requeue for another", calls)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.launches) != 0 {
		t.Errorf("launch notices %+v, want none", col.launches)
	}
}

// A plain DeepSpeed script cannot take a TP plan: rubick-srun runs
// nothing, tells rubickd what the line cannot run, and requeues the job
// held for rubickd to start it again with another plan. A task of a job
// array is named ARRAY_TASK to scontrol: its own ID may be the array's,
// which names every task. Before the requeue the job's BEGIN and REQUEUE
// mails are taken out, unless --requeue-mail keeps them; the requeue's
// mark keeps what they were (slurm.MailWord), for rubickd to give back.
func TestRunRefusedPlan(t *testing.T) {
	for name, tc := range map[string]struct {
		env     map[string]string
		ref     string // what scontrol is given
		mail    string // the job's MailType
		args    []string
		want    string // the mail update, if any
		comment string // the requeue's mark
	}{
		"job":        {env: map[string]string{}, ref: "42"},
		"array task": {env: map[string]string{"SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "3"}, ref: "40_3"},
		"mail all": {env: map[string]string{}, ref: "42", mail: "INVALID_DEPEND,BEGIN,END,FAIL,REQUEUE,STAGE_OUT", want: "update JobId=42 MailType=INVALID_DEPEND,END,FAIL,STAGE_OUT",
			comment: "rubick:requeue rubick:mail=invalid-depend,begin,end,fail,requeue,stage-out"},
		"mail begin": {env: map[string]string{"SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "3"}, ref: "40_3", mail: "BEGIN", want: "update JobId=40_3 MailType=NONE",
			comment: "rubick:requeue rubick:mail=begin"},
		"mail end":  {env: map[string]string{}, ref: "42", mail: "END"},
		"mail kept": {env: map[string]string{}, ref: "42", mail: "BEGIN,END", args: []string{"--requeue-mail"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("FAKE_MAIL_TYPE", tc.mail)
			if tc.comment == "" {
				tc.comment = slurm.RequeueWord
			}
			calls := testRunRefusedPlan(t, tc.env, tc.ref, tc.comment, tc.args)
			var mail []string
			for _, c := range calls {
				if strings.Contains(c, "MailType=") {
					mail = append(mail, c)
				}
			}
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
				if i := slices.Index(calls, tc.want); i < 0 || i > slices.Index(calls, "requeuehold "+tc.ref) ||
					i < slices.Index(calls, "update JobId="+tc.ref+" Comment="+tc.comment) {
					t.Errorf("scontrol calls %q: want the mail changed after the requeue's mark keeps it and before the requeue", calls)
				}
			}
			if d := cmp.Diff(want, mail); d != "" {
				t.Errorf("mail updates (-want +got):\n%s", d)
			}
		})
	}
}

// testRunRefusedPlan runs the refusal and returns scontrol's calls.
func testRunRefusedPlan(t *testing.T, extraEnv map[string]string, ref, comment string, args []string) []string {
	bin := fakes(t)
	dir := t.TempDir()
	srunLog, scontrolLog := filepath.Join(dir, "argv.json"), filepath.Join(dir, "scontrol.log")
	t.Setenv("FAKE_SRUN_LOG", srunLog)
	t.Setenv("FAKE_SCONTROL_LOG", scontrolLog)
	t.Setenv("FAKE_PLAN", "dp1.tp2.pp1.mb16.a1.z0")
	ds := filepath.Join(dir, "ds.json")
	if err := os.WriteFile(ds, []byte(`{"train_batch_size": 16, "zero_optimization": {"stage": 1}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var col collector
	srv := col.server(t)
	vars := map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "2",
		"SLURM_CPUS_ON_NODE": "8", "SLURM_SUBMIT_DIR": dir}
	maps.Copy(vars, extraEnv)
	env := envMap(vars)
	var out, errOut bytes.Buffer
	argv := append([]string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "--srun", filepath.Join(bin, "srun"),
		"--munge", filepath.Join(bin, "munge"), "--report-url", srv.URL}, args...)
	code := run(t.Context(), append(argv, "--", "deepspeed", "train.py", "--deepspeed_config", ds), env, &out, &errOut)
	if code != exitCheckpointed {
		t.Fatalf("exit %d, want %d (requeued); stderr:\n%s", code, exitCheckpointed, errOut.String())
	}
	if _, err := os.Stat(srunLog); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("srun ran (%v): a plan the line cannot take must not start", err)
	}
	calls, err := os.ReadFile(scontrolLog)
	if err != nil || !strings.Contains(string(calls), "show job -o "+ref+"\n") ||
		!regexp.MustCompile(`update JobId=`+regexp.QuoteMeta(ref+" Comment="+comment)+`\n(update JobId=\S+ MailType=\S+\n)?requeuehold `+regexp.QuoteMeta(ref)+`\n`).Match(calls) {
		t.Errorf("scontrol calls %q (%v), want the tag read, the requeue marked (%s) and a requeuehold of %s", calls, err, comment, ref)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	want := []report.Launch{{Kind: report.KindLaunch, Version: report.LaunchVersion, JobID: "42", ModelType: "gpt2",
		Dialect: "deepspeed", Cannot: "tp,pp", GlobalBatch: 16, Plan: "dp1.tp2.pp1.mb16.a1.z0", Refused: true}}
	if d := cmp.Diff(want, col.launches, cmpopts.IgnoreFields(report.Launch{}, "Time")); d != "" {
		t.Errorf("launch notices (-want +got):\n%s", d)
	}
	return strings.Split(strings.TrimSpace(string(calls)), "\n")
}

// A launch notice rubickd does not take (its endpoint down) is said at
// once, and the job runs.
func TestRunLaunchNoticeNotDelivered(t *testing.T) {
	bin := fakes(t)
	t.Setenv("FAKE_SRUN_LOG", filepath.Join(t.TempDir(), "argv.json"))
	t.Setenv("FAKE_PLAN", "dp2.tp1.pp1.mb4.a2.z0")
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "2",
		"SLURM_CPUS_ON_NODE": "8"})
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "--srun", filepath.Join(bin, "srun"),
		"--munge", filepath.Join(bin, "munge"), "--report-url", down.URL + "/samples", "--",
		"python", "pretrain_gpt.py", "--global-batch-size", "16", "--micro-batch-size", "8"}, env, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "level=WARN msg=\"launch notice not delivered") || !strings.Contains(errOut.String(), "connection refused") {
		t.Errorf("stderr lacks the warning with its cause:\n%s", errOut.String())
	}
}

// A line that trains with a global batch of its own (64) cannot run the
// plan rubickd chose at its model type's (16): rubick-srun runs nothing,
// tells rubickd the line's batch and requeues the job held, as for a plan
// the line cannot express. A --plan of another batch is the user's own
// mistake (TestBadInput).
func TestRunRefusedGlobalBatch(t *testing.T) {
	bin := fakes(t)
	dir := t.TempDir()
	srunLog, scontrolLog := filepath.Join(dir, "argv.json"), filepath.Join(dir, "scontrol.log")
	t.Setenv("FAKE_SRUN_LOG", srunLog)
	t.Setenv("FAKE_SCONTROL_LOG", scontrolLog)
	t.Setenv("FAKE_PLAN", "dp2.tp1.pp1.mb8.a1.z0")
	var col collector
	srv := col.server(t)
	env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "2",
		"SLURM_CPUS_ON_NODE": "8", "SLURM_SUBMIT_DIR": dir})
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "--srun", filepath.Join(bin, "srun"),
		"--munge", filepath.Join(bin, "munge"), "--report-url", srv.URL, "--",
		"python", "pretrain_gpt.py", "--global-batch-size", "64", "--micro-batch-size", "4"}, env, &out, &errOut)
	if code != exitCheckpointed {
		t.Fatalf("exit %d, want %d (requeued); stderr:\n%s", code, exitCheckpointed, errOut.String())
	}
	if _, err := os.Stat(srunLog); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("srun ran (%v): a plan of another global batch must not start", err)
	}
	if calls, _ := os.ReadFile(scontrolLog); !strings.Contains(string(calls), "requeuehold 42\n") {
		t.Errorf("scontrol calls %q, want a requeuehold", calls)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	want := []report.Launch{{Kind: report.KindLaunch, Version: report.LaunchVersion, JobID: "42", ModelType: "gpt2",
		Dialect: "megatron", GlobalBatch: 64, Plan: "dp2.tp1.pp1.mb8.a1.z0", Refused: true}}
	if d := cmp.Diff(want, col.launches, cmpopts.IgnoreFields(report.Launch{}, "Time")); d != "" {
		t.Errorf("launch notices (-want +got):\n%s", d)
	}
	col.mu.Unlock()

	// Started again with the same plan, rubickd took no notice: the job
	// ends rather than go round. Another plan it cannot run is refused as
	// the first was.
	again := func(plan string) int {
		t.Helper()
		t.Setenv("FAKE_PLAN", plan)
		var out, errOut bytes.Buffer
		return run(t.Context(), []string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "--srun", filepath.Join(bin, "srun"),
			"--munge", filepath.Join(bin, "munge"), "--report-url", srv.URL, "--",
			"python", "pretrain_gpt.py", "--global-batch-size", "64", "--micro-batch-size", "4"}, env, &out, &errOut)
	}
	if code := again("dp2.tp1.pp1.mb8.a1.z0"); code != exitUsage {
		t.Errorf("the same plan again: exit %d, want %d", code, exitUsage)
	}
	if calls, _ := os.ReadFile(scontrolLog); strings.Count(string(calls), "requeuehold 42") != 1 {
		t.Errorf("scontrol calls %q, want one requeuehold", calls)
	}
	if code := again("dp2.tp1.pp1.mb4.a1.z0"); code != exitCheckpointed {
		t.Errorf("another plan of the wrong batch: exit %d, want %d (requeued)", code, exitCheckpointed)
	}
	col.mu.Lock()
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		seen[s]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

func TestRunUnchanged(t *testing.T) {
	bin := fakes(t)
	train := []string{"python", "pretrain_gpt.py", "--micro-batch-size", "2"}
	cases := map[string]struct {
		env   map[string]string
		args  []string
		extra map[string]string
		warn  string
	}{
		"not in a job":   {env: map[string]string{}, warn: "SLURM_JOB_ID unset"},
		"scontrol fails": {env: map[string]string{"SLURM_JOB_ID": "7"}, extra: map[string]string{"FAKE_SCONTROL_FAIL": "1"}, warn: "Invalid job id"},
		// rubickd started it without a plan on purpose: no warning.
		"no plan in tag": {env: map[string]string{"SLURM_JOB_ID": "7"}, extra: map[string]string{"FAKE_PLAN": ""},
			warn: `level=INFO msg="rubickd started the job without a plan; running the command unchanged"`},
		"no tag": {env: map[string]string{"SLURM_JOB_ID": "7"}, extra: map[string]string{"FAKE_NO_TAG": "1"},
			warn: `level=WARN msg="the job's AdminComment has no rubick plan"`},
		"unknown line": {env: map[string]string{}, args: []string{"--plan", "dp1.tp1.pp1.mb1.a1.z0"},
			warn: "launch line not recognised"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "argv.json")
			t.Setenv("FAKE_SRUN_LOG", logPath)
			t.Setenv("FAKE_SRUN_EXIT", "0")
			for k, v := range c.extra {
				t.Setenv(k, v)
			}
			cmdline := train
			if name == "unknown line" {
				cmdline = []string{"bash", "train.sh"}
			}
			args := append(append([]string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "--srun", filepath.Join(bin, "srun")}, c.args...), cmdline...)
			var out, errOut bytes.Buffer
			if code := run(t.Context(), args, envMap(c.env), &out, &errOut); code != 0 {
				t.Fatalf("exit %d:\n%s", code, errOut.String())
			}
			if diff := cmp.Diff(append([]string{"srun", "--export=ALL"}, cmdline...), readArgv(t, logPath)); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
			if !strings.Contains(errOut.String(), c.warn) {
				t.Errorf("stderr lacks %q:\n%s", c.warn, errOut.String())
			}
			if !strings.Contains(c.warn, "level=") && !strings.Contains(errOut.String(), "level=WARN") ||
				strings.Contains(c.warn, "level=INFO") && strings.Contains(errOut.String(), "level=WARN") {
				t.Errorf("stderr's warnings are not as expected (%q):\n%s", c.warn, errOut.String())
			}
		})
	}
}

// TestRunUnplanned runs jobs rubickd started without a plan in their tag:
// the launch line runs unchanged, and where the plan it expresses on the
// allocation can be read, its samples are reported under that plan and a
// launch notice tells rubickd the line's limits and batch. A profiling job
// reports only its phase's runs.
func TestRunUnplanned(t *testing.T) {
	bin := fakes(t)
	megatron := []string{"python", "pretrain_gpt.py", "--micro-batch-size", "2", "--global-batch-size", "16"}
	cases := map[string]struct {
		train []string
		tag   string
		args  []string
		// plan is the plan the samples and the launch notice name; ""
		// for neither. placement is the samples' ("" for the allocation's 4).
		plan, placement string
		log             string
	}{
		"megatron line": {train: megatron, plan: "dp4.tp1.pp1.mb2.a2.z0",
			log: `level=INFO msg="rubickd started the job without a plan; running the command unchanged, its samples reported under the plan it expresses" prog=rubick-srun job=42 plan=dp4.tp1.pp1.mb2.a2.z0`},
		// Before, the samples were reported as dp4 on 4 GPUs.
		"torchrun on part of the node": {train: append([]string{"torchrun", "--nproc_per_node", "2"}, megatron[1:]...),
			plan: "dp2.tp1.pp1.mb2.a4.z0", placement: "2",
			log: `level=INFO msg="rubickd started the job without a plan; running the command unchanged, its samples reported under the plan it expresses" prog=rubick-srun job=42 plan=dp2.tp1.pp1.mb2.a4.z0`},
		"line not read": {train: []string{"bash", "train.sh"},
			log: `level=INFO msg="no samples reported: the plan the launch line expresses on the allocation is unknown"`},
		"profiling job": {train: megatron, tag: "profile=1", args: []string{"--profile-iters", "0"},
			log: `level=INFO msg="no plan for this job yet; running the command unchanged"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "argv.json")
			t.Setenv("FAKE_SRUN_LOG", logPath)
			t.Setenv("FAKE_SRUN_EXIT", "0")
			t.Setenv("FAKE_PLAN", "")
			t.Setenv("FAKE_TAG_EXTRA", c.tag)
			var col collector
			srv := col.server(t)
			env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "4",
				"SLURM_CPUS_ON_NODE": "8"})
			args := append([]string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"),
				"--srun", filepath.Join(bin, "srun"), "--munge", filepath.Join(bin, "munge"), "--report-url", srv.URL,
				"--report-skip", "0", "--state-dir", t.TempDir()}, c.args...)
			var out, errOut bytes.Buffer
			if code := run(t.Context(), append(append(args, "--"), c.train...), env, &out, &errOut); code != 0 {
				t.Fatalf("exit %d:\n%s", code, errOut.String())
			}
			if diff := cmp.Diff(append([]string{"srun", "--export=ALL"}, c.train...), readArgv(t, logPath)); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
			if !strings.Contains(errOut.String(), c.log) || strings.Contains(errOut.String(), "level=WARN") {
				t.Errorf("stderr lacks %q or warns:\n%s", c.log, errOut.String())
			}
			col.mu.Lock()
			defer col.mu.Unlock()
			var got []string
			for _, s := range col.got {
				got = append(got, fmt.Sprintf("%s %s %s %d %s %.3f", s.JobID, s.ModelType, s.Plan, s.CPUs, s.Placement, s.IterS))
			}
			var want []string
			var wantLaunches []report.Launch
			if c.plan != "" {
				placement := c.placement
				if placement == "" {
					placement = "4"
				}
				for _, it := range []string{"0.900", "0.500", "0.250", "0.400"} {
					want = append(want, "42 gpt2 "+c.plan+" 8 "+placement+" "+it)
				}
				wantLaunches = []report.Launch{{Kind: report.KindLaunch, Version: report.LaunchVersion, JobID: "42", ModelType: "gpt2", Dialect: "megatron", GlobalBatch: 16, Plan: c.plan}}
			}
			if !sameSet(want, got) {
				t.Errorf("samples %q, want %q", got, want)
			}
			if diff := cmp.Diff(wantLaunches, col.launches, cmpopts.IgnoreFields(report.Launch{}, "Time")); diff != "" {
				t.Errorf("launch notices (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSignalForwarded runs rubick-srun as a process, signals it with the
// checkpoint signal, and checks that the step got it and its exit status
// came back.
func TestSignalForwarded(t *testing.T) {
	bin := fakes(t)
	for _, c := range []struct {
		flag string
		sig  syscall.Signal
	}{{"USR1", syscall.SIGUSR1}, {"SIGUSR2", syscall.SIGUSR2}} {
		t.Run(c.flag, func(t *testing.T) {
			scontrolLog := filepath.Join(t.TempDir(), "scontrol.log")
			rest, errOut, err := signalMain(t, c.sig, []string{"--plan", "dp1.tp1.pp1.mb1.a1.z0", "--signal", c.flag, "--srun", filepath.Join(bin, "srun"),
				"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "python", "pretrain_gpt.py", "--global-batch-size", "1"},
				"FAKE_SRUN_MODE=wait-signal", "SLURM_JOB_NUM_NODES=1", "SLURM_JOB_ID=42", "FAKE_SCONTROL_LOG="+scontrolLog, "FAKE_COMMENT=my note")
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 75 {
				t.Fatalf("exit %v, want 75\n%s", err, errOut)
			}
			if !strings.Contains(rest, "got "+c.sig.String()) {
				t.Errorf("step output %q lacks the forwarded signal", rest)
			}
			// After the checkpoint the job requeues itself held, so a restart
			// survives rubickd dying between its signal and its requeue; its
			// comment says the requeue is rubick's. With --plan the tag was
			// not read at the start: it is read to know the job is rubick's.
			calls, _ := os.ReadFile(scontrolLog)
			if got, want := strings.TrimSpace(string(calls)), "show job -o 42\nupdate JobId=42 Comment=my note rubick:requeue\nrequeuehold 42"; got != want {
				t.Errorf("scontrol calls = %q, want %q", got, want)
			}
		})
	}
}

// TestSignalsReachSrunTasks: srun kills its tasks at SIGTERM (SIGHUP,
// SIGQUIT) and only prints their state at a first SIGINT, so rubick-srun
// passes those on to the tasks with scancel (the job's steps), not to
// srun; USR1 and USR2 go through srun, which forwards them. With the
// checkpoint signal TERM (sites running Megatron's --exit-signal-handler)
// the trainer gets it, checkpoints, and the job requeues itself. Before,
// srun got the SIGTERM and SIGKILLed the trainer: no checkpoint (exit 137).
func TestSignalsReachSrunTasks(t *testing.T) {
	bin := fakes(t)
	for name, tc := range map[string]struct {
		flag        string
		sig         syscall.Signal
		wantScancel string // its call
		wantRequeue bool
	}{
		"checkpoint signal TERM":             {flag: "TERM", sig: syscall.SIGTERM, wantScancel: "--signal=TERM 42", wantRequeue: true},
		"checkpoint signal HUP":              {flag: "HUP", sig: syscall.SIGHUP, wantScancel: "--signal=HUP 42", wantRequeue: true},
		"SIGINT":                             {flag: "USR1", sig: syscall.SIGINT, wantScancel: "--signal=INT 42"},
		"SIGTERM, not the checkpoint signal": {flag: "USR1", sig: syscall.SIGTERM, wantScancel: "--signal=TERM 42"},
		"USR1 through srun":                  {flag: "USR1", sig: syscall.SIGUSR1, wantRequeue: true},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			scontrolLog, scancelLog := filepath.Join(dir, "scontrol.log"), filepath.Join(dir, "scancel.log")
			rest, errOut, err := signalMain(t, tc.sig, []string{"--plan", "dp1.tp1.pp1.mb1.a1.z0", "--signal", tc.flag, "--srun", filepath.Join(bin, "srun"),
				"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "--scancel", filepath.Join(bin, "scancel"),
				"python", "pretrain_gpt.py", "--global-batch-size", "1"},
				"FAKE_SRUN_MODE=srun", "SLURM_JOB_NUM_NODES=1", "SLURM_JOB_ID=42",
				"FAKE_SCONTROL_LOG="+scontrolLog, "FAKE_SCANCEL_LOG="+scancelLog, "FAKE_TASK_PIDFILE="+filepath.Join(dir, "task.pid"))
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 75 {
				t.Errorf("exit %v, want 75 (the task's, after its checkpoint)\n%s", err, errOut)
			}
			if diff := cmp.Diff("task got "+tc.sig.String()+"\n", rest); diff != "" {
				t.Errorf("the task's output (-want +got):\n%s", diff)
			}
			calls, _ := os.ReadFile(scancelLog)
			if diff := cmp.Diff(tc.wantScancel, strings.TrimSpace(string(calls))); diff != "" {
				t.Errorf("scancel calls (-want +got):\n%s", diff)
			}
			calls, _ = os.ReadFile(scontrolLog)
			if got := strings.Contains(string(calls), "requeuehold 42"); got != tc.wantRequeue {
				t.Errorf("scontrol calls %q: requeued %v, want %v", calls, got, tc.wantRequeue)
			}
		})
	}
}

// signalMain runs rubick-srun (this test binary as its main) with args
// and env added to this environment, waits for its step's first line,
// "ready", sends it sig, and returns what the step wrote after that,
// rubick-srun's stderr and how it exited.
func signalMain(t *testing.T, sig syscall.Signal, args []string, env ...string) (rest, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(testSelf(t), args...)
	cmd.Env = append(append(os.Environ(), "RUBICK_SRUN_MAIN=1"), env...)
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
	if !sc.Scan() || sc.Text() != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("step did not start: %q %v\n%s", sc.Text(), sc.Err(), errOut.String())
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	return out.String(), errOut.String(), err
}

func TestShellQuote(t *testing.T) {
	got := shellQuote([]string{"python", "a b", "it's", "", "--x=1"})
	if want := `python 'a b' 'it'\''s' '' --x=1`; got != want {
		t.Errorf("shellQuote = %s, want %s", got, want)
	}
}

func TestSamplerSkipsWarmUp(t *testing.T) {
	var col collector
	srv := col.server(t)
	rep := report.NewReporter(t.Context(), report.ReporterConfig{URL: srv.URL, Encoder: base64Encoder{}})
	s := &sampler{rep: rep, skip: 1, base: report.Sample{Version: 1, JobID: "1", Plan: "dp1.tp1.pp1.mb1.a1.z0", Placement: "1"}}
	tap := &lineTap{line: s.line}
	for _, chunk := range []string{" iteration 1/ 9 | elapsed time per iteration (ms): 9", "00.0 |\n iteration 2/ 9 | elapsed",
		" time per iteration (ms): 100.0 |\nnoise\n iteration 3/ 9 | elapsed time per iteration (ms): 200.0 |"} {
		if _, err := tap.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	tap.flush()
	if n := rep.Close(t.Context()); n != 2 {
		t.Fatalf("sent %d samples, want 2", n)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.got) != 2 || col.got[0].Iteration == nil || *col.got[0].Iteration != 2 || col.got[0].IterS != 0.1 || col.got[1].IterS != 0.2 {
		t.Errorf("samples %+v", col.got)
	}
}

// TestLineTap: lines end at a newline or a carriage return (a progress
// bar's redraw), and one too long to parse is dropped whole, not cut.
func TestLineTap(t *testing.T) {
	const iter = " iteration 2/ 9 | elapsed time per iteration (ms): 100.0 |"
	// A tqdm bar on the stream: 100 KiB of redraws without a newline.
	var redraws, bars []string
	for i := range 2000 {
		bar := fmt.Sprintf("  %3d%%|%-40s| %d/2000 [00:%02d<00:00, 9.99it/s]", i/20, strings.Repeat("#", i/50), i, i%60)
		redraws, bars = append(redraws, "\r"+bar), append(bars, bar)
	}
	cases := map[string]struct {
		writes []string
		want   []string
	}{
		"split across writes": {writes: []string{"ab", "c\nd", "e\n\nf"}, want: []string{"abc", "de", "f"}},
		"crlf":                {writes: []string{"a\r\nb\r", "\nc"}, want: []string{"a", "b", "c"}},
		"progress bar, then a log line": {
			writes: append(slices.Clone(redraws), "\r"+iter+"\n"),
			want:   append(bars, iter),
		},
		"over-long line dropped whole": {
			writes: []string{" iteration 2/ 9 | consumed samples: 32 |", strings.Repeat("x", maxLine), " elapsed time per iteration (ms): 100.0 |\n", "next\n"},
			want:   []string{"next"},
		},
		"over-long line in one write": {writes: []string{strings.Repeat("x", maxLine+1), "tail\nnext"}, want: []string{"next"}},
		"line of maxLine bytes kept":  {writes: []string{strings.Repeat("x", maxLine-1), "y\n"}, want: []string{strings.Repeat("x", maxLine-1) + "y"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var got []string
			tap := &lineTap{line: func(l string) { got = append(got, l) }}
			for _, w := range c.writes {
				if n, err := tap.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(w))
				}
			}
			tap.flush()
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		})
	}
}

// base64Encoder is the fake munge's encoding, in process.
type base64Encoder struct{}

func (base64Encoder) Encode(_ context.Context, payload []byte) (string, error) {
	return "MUNGE:" + base64.StdEncoding.EncodeToString(payload) + ":", nil
}

// markRequeue appends rubick:requeue to the comment squeue reports (none
// for "(null)"), once; a squeue that fails is an error and changes nothing.
// The mark is tried again when scontrol times out, and the job is
// requeued whether or not it took. A requeuehold that fails (a busy
// slurmctld times it out now and then) is tried twice more, 1 s and 2 s
// later, as the mark is. Before, one failure ended a job that requeues
// itself (a --signal=B:USR1@N job, which nothing else requeues) with its
// trainer's status, FAILED.
func TestRequeueHoldRetries(t *testing.T) {
	bin := fakes(t)
	cfg := config{squeue: filepath.Join(bin, "squeue"), scontrol: filepath.Join(bin, "scontrol"), jobRef: "42", markWait: time.Millisecond}
	const mark, requeue, quiet = "update JobId=42 Comment=rubick:requeue", "requeuehold 42", "update JobId=42 MailType=END"
	// anyCall fails the first scontrol calls, whichever they are;
	// holdOnly the first requeuehold calls only.
	const anyCall, holdOnly = "FAKE_SCONTROL_FAIL_FIRST", "FAKE_REQUEUEHOLD_FAIL_FIRST"
	for _, tc := range []struct {
		fail    string
		failing int
		quiet   bool // quiet the mail types once the mark took
		want    []string
		wantErr bool
	}{
		{fail: anyCall, failing: 0, want: []string{mark, requeue}},
		{fail: anyCall, failing: 1, want: []string{mark, mark, requeue}},
		// The mail types change only once the mark keeps what they were.
		{fail: anyCall, failing: 1, quiet: true, want: []string{mark, mark, quiet, requeue}},
		{fail: anyCall, failing: 3, quiet: true, want: []string{mark, mark, mark, requeue}},
		// Calls 4 and 5 are the requeue's first two: it is tried again too.
		{fail: anyCall, failing: 5, want: []string{mark, mark, mark, requeue, requeue, requeue}},
		{fail: holdOnly, failing: 1, want: []string{mark, requeue, requeue}},
		{fail: holdOnly, failing: 2, want: []string{mark, requeue, requeue, requeue}},
		{fail: holdOnly, failing: 5, want: []string{mark, requeue, requeue, requeue}, wantErr: true},
	} {
		t.Run(fmt.Sprintf("%s=%d,quiet=%v", tc.fail, tc.failing, tc.quiet), func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "scontrol.log")
			t.Setenv("FAKE_SCONTROL_LOG", log)
			t.Setenv(tc.fail, strconv.Itoa(tc.failing))
			var afterMark func()
			if tc.quiet {
				afterMark = func() { quietMail(t.Context(), cfg, "END", slog.New(slog.DiscardHandler)) }
			}
			err := requeueHold(t.Context(), cfg, whyCheckpoint, slog.New(slog.DiscardHandler), afterMark)
			if (err != nil) != tc.wantErr {
				t.Errorf("requeueHold: %v, want an error: %v", err, tc.wantErr)
			}
			calls, _ := os.ReadFile(log)
			if diff := cmp.Diff(tc.want, strings.Split(strings.TrimSpace(string(calls)), "\n")); diff != "" {
				t.Errorf("scontrol calls (-want +got):\n%s", diff)
			}
		})
	}
}

// A job that checkpointed is requeued held for rubickd when it has a rubick
// tag, and for Slurm to start again when Slurm says it has none: no rubickd
// would release it.
func TestRequeueCheckpointed(t *testing.T) {
	bin := fakes(t)
	cfg := config{squeue: filepath.Join(bin, "squeue"), scontrol: filepath.Join(bin, "scontrol"), jobRef: "42", markWait: time.Millisecond}
	const mark, hold, read = "update JobId=42 Comment=hello world rubick:requeue", "requeuehold 42", "show job -o 42"
	for _, tc := range []struct {
		name  string
		tag   *slurm.Tag // read at the start
		noTag bool       // what Slurm says now
		state string     // squeue's; "": RUNNING
		want  []string
	}{
		{name: "tagged", tag: &slurm.Tag{ModelType: "gpt2"}, want: []string{mark, hold}},
		{name: "--plan in a tagged job", want: []string{read, mark, hold}},
		{name: "no tag", noTag: true, want: []string{read, "requeue 42"}},
		// scancel, the time limit or Slurm's preemption sent the signal
		// (TERM, the site's checkpoint signal): Slurm ends the job.
		{name: "tagged, Slurm ending it", tag: &slurm.Tag{ModelType: "gpt2"}, state: "COMPLETING"},
		{name: "no tag, Slurm ending it", noTag: true, state: "COMPLETING"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "scontrol.log")
			t.Setenv("FAKE_SCONTROL_LOG", log)
			t.Setenv("FAKE_COMMENT", "hello world")
			t.Setenv("FAKE_STATE", tc.state)
			if tc.noTag {
				t.Setenv("FAKE_NO_TAG", "1")
			}
			if err := requeueCheckpointed(t.Context(), cfg, tc.tag, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			calls, _ := os.ReadFile(log)
			got := strings.Split(strings.TrimSpace(string(calls)), "\n")
			if len(calls) == 0 {
				got = nil
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scontrol calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMarkRequeue(t *testing.T) {
	bin := fakes(t)
	for _, tc := range []struct {
		name, comment string
		set           bool // FAKE_COMMENT set
		squeue        string
		words         []string
		want          string // scontrol calls
		wantErr       bool
	}{
		{name: "no comment", squeue: "squeue", want: "update JobId=42 Comment=rubick:requeue"},
		{name: "a note", comment: "my note; x=1", set: true, squeue: "squeue", want: "update JobId=42 Comment=my note; x=1 rubick:requeue"},
		{name: "marked already", comment: "my note rubick:requeue", set: true, squeue: "squeue"},
		{name: "mail word", comment: "my note", set: true, squeue: "squeue", words: []string{"rubick:mail=begin,end"},
			want: "update JobId=42 Comment=my note rubick:requeue rubick:mail=begin,end"},
		{name: "marked, without the mail word", comment: "rubick:requeue", set: true, squeue: "squeue", words: []string{"rubick:mail=begin"},
			want: "update JobId=42 Comment=rubick:requeue rubick:mail=begin"},
		{name: "squeue fails", squeue: "no-such-squeue", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "scontrol.log")
			t.Setenv("FAKE_SCONTROL_LOG", log)
			if tc.set {
				t.Setenv("FAKE_COMMENT", tc.comment)
			}
			err := markRequeue(t.Context(), filepath.Join(bin, tc.squeue), filepath.Join(bin, "scontrol"), "42", tc.words...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want an error: %v", err, tc.wantErr)
			}
			calls, _ := os.ReadFile(log)
			if got := strings.TrimSpace(string(calls)); got != tc.want {
				t.Errorf("scontrol calls %q, want %q", got, tc.want)
			}
		})
	}
}

// Without a samples endpoint the refusal cannot reach rubickd, which would
// give the requeued job the same plan again: the job ends with the reason
// instead of going round.
func TestRunRefusedUnheard(t *testing.T) {
	bin := fakes(t)
	dir := t.TempDir()
	scontrolLog := filepath.Join(dir, "scontrol.log")
	t.Setenv("FAKE_SCONTROL_LOG", scontrolLog)
	t.Setenv("FAKE_PLAN", "dp2.tp1.pp1.mb8.a1.z0")
	env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "2",
		"SLURM_CPUS_ON_NODE": "8", "SLURM_SUBMIT_DIR": dir})
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "--srun", filepath.Join(bin, "srun"),
		"--", "python", "pretrain_gpt.py", "--global-batch-size", "64"}, env, &out, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), "--global-batch-size=64 but plan dp2.tp1.pp1.mb8.a1.z0") {
		t.Errorf("exit %d, stderr:\n%s\nwant %d naming both batches", code, errOut.String(), exitUsage)
	}
	if calls, _ := os.ReadFile(scontrolLog); strings.Contains(string(calls), "requeuehold") {
		t.Errorf("scontrol calls %q: an unheard refusal must not requeue the job", calls)
	}
}

// A line that states no global batch trains with the plan's, which
// rubick-srun writes into it: the launch notice says so, and rubickd keeps
// the job at it.
func TestLaunchNoticeGlobalBatchOfPlan(t *testing.T) {
	bin := fakes(t)
	t.Setenv("FAKE_SRUN_LOG", filepath.Join(t.TempDir(), "argv.json"))
	t.Setenv("FAKE_PLAN", "dp2.tp1.pp1.mb4.a3.z0")
	var col collector
	srv := col.server(t)
	env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "2", "SLURM_CPUS_ON_NODE": "8"})
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"), "--srun", filepath.Join(bin, "srun"),
		"--munge", filepath.Join(bin, "munge"), "--report-url", srv.URL, "--", "python", "pretrain_gpt.py", "--micro-batch-size", "8"}, env, &out, &errOut); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut.String())
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.launches) != 1 || col.launches[0].GlobalBatch != 24 {
		t.Errorf("launch notices %+v, want one of global batch 24 (dp2 x mb4 x a3)", col.launches)
	}
}

// TestScriptReadsSrunFlags keeps launch.FromScript's reading of
// rubick-srun's flags (which take a value) in step with the flags.
func TestScriptReadsSrunFlags(t *testing.T) {
	var c config
	fs := newFlagSet(&c, func(string) string { return "" }, io.Discard)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		if !launch.SrunFlag(f.Name) {
			t.Errorf("flag --%s: not among launch's rubick-srun flags", f.Name)
		}
		if isBool := ok && b.IsBoolFlag(); isBool != launch.SrunBoolFlag(f.Name) {
			t.Errorf("flag --%s: takes no value = %v, launch.SrunBoolFlag = %v", f.Name, isBool, !isBool)
		}
	})
	if n < 20 {
		t.Fatalf("visited %d flags", n)
	}
	// And no name launch knows that rubick-srun does not ("h" and "help"
	// are the flag package's own).
	for _, name := range launch.SrunFlags() {
		if fs.Lookup(name) == nil && name != "h" && name != "help" {
			t.Errorf("launch knows --%s, rubick-srun does not", name)
		}
	}
	if launch.SrunFlag("bogus") {
		t.Error("launch takes --bogus for a rubick-srun flag")
	}
}

// testSelf is this test binary, as rubick-srun names itself to the tasks
// of a per-GPU step.
func testSelf(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// TestSiteCheckpointSignal: --signal defaults to the checkpoint signal the
// site exports, and one that is not it is warned about in the job's log.
func TestSiteCheckpointSignal(t *testing.T) {
	line := []string{"python", "pretrain_gpt.py"}
	for _, tc := range []struct {
		name string
		args []string
		site string
		sig  syscall.Signal
		warn bool
	}{
		{name: "nothing exported", sig: syscall.SIGUSR1},
		{name: "the site's by default", site: "TERM", sig: syscall.SIGTERM},
		// Every checkpoint.signal rubickd takes: a site exporting one must
		// not make every job's flags fail.
		{name: "the site's URG", site: "URG", sig: syscall.SIGURG},
		{name: "the site's CONT", site: "SIGCONT", sig: syscall.SIGCONT},
		{name: "the site's given", args: []string{"--signal", "SIGTERM"}, site: "15", sig: syscall.SIGTERM},
		{name: "another given", args: []string{"--signal", "USR1"}, site: "TERM", sig: syscall.SIGUSR1, warn: true},
		{name: "the site's unreadable", site: "TERMINATE", args: []string{"--signal", "USR1"}, sig: syscall.SIGUSR1, warn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := envMap(map[string]string{launch.CheckpointSignalEnv: tc.site})
			cfg, err := parseFlags(append(append(tc.args, "--"), line...), env, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.checkpointSig != tc.sig {
				t.Errorf("checkpoint signal %v, want %v", cfg.checkpointSig, tc.sig)
			}
			var logged bytes.Buffer
			checkSiteSignal(cfg.checkpointSig, env, slog.New(slog.NewTextHandler(&logged, nil)))
			if warned := strings.Contains(logged.String(), "level=WARN"); warned != tc.warn {
				t.Errorf("warned %v, want %v: %s", warned, tc.warn, logged.String())
			}
		})
	}
}
