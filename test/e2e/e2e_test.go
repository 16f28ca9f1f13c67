//go:build e2e

// Package e2e runs rubick end to end on the local Slurm lab (scripts/lab):
// real sbatch submissions through the SPANK option and job_submit.lua,
// rubickd deciding and applying with scontrol, rubick-srun rewriting the
// emulated trainer's flags, checkpoint-restarts, and rubickd killed with
// SIGKILL at random points. It ends by writing one JSON line of results.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// jobSpec is one submission of the scenario.
type jobSpec struct {
	model       string
	nodes, gpus int
	iters       int
	batch       int    // the model's global batch
	guaranteed  bool   // submitted with --qos=guaranteed (a tenant with a GPU quota)
	time        string // --time; "" for none
	mail        string // --mail-type (to root); "" for none
	saveMs      int    // how long each checkpoint write takes (the trainer's --save-ms)
}

// The scenario: best-effort jobs asking for more GPUs than the lab has
// (44 of 32) saturate it. The guaranteed job is submitted only once every
// GPU is allocated to them (and the kills are over; waitFull adds a
// best-effort job where rubick leaves some GPUs free), so its minimum
// resources must be reclaimed from running best-effort jobs: shrunk or
// replanned through checkpoint-restart, or preempted and resumed later.
// The best-effort jobs last 60-90 s on their first allocation, so none
// ends on its own before the reclaim.
var scenario = []jobSpec{
	{model: "t5", nodes: 2, gpus: 8, iters: 1300, batch: 16},
	{model: "gpt2", nodes: 1, gpus: 8, iters: 600, batch: 16},
	{model: "bert", nodes: 1, gpus: 8, iters: 2000, batch: 32},
	{model: "vit", nodes: 1, gpus: 8, iters: 4000, batch: 64},
	{model: "bert", nodes: 1, gpus: 4, iters: 1000, batch: 32},
	{model: "roberta", nodes: 1, gpus: 8, iters: 300, batch: 64, guaranteed: true},
}

// Result is the JSON line the test writes (docs/benchmarks.md, End to end,
// shows one).
type Result struct {
	Jobs                     int     `json:"jobs"`
	Completed                int     `json:"completed"`
	Reconfigurations         int     `json:"reconfigurations"`
	Shrinks                  int     `json:"shrinks"`
	Preemptions              int     `json:"preemptions"`
	Lost                     int     `json:"lost"`
	StuckHeld                int     `json:"stuck_held"`
	MedianDecisionToRunningS float64 `json:"median_decision_to_running_s"`
	DecisionToRunningSamples int     `json:"decision_to_running_samples"`
	RubickdKills             int     `json:"rubickd_kills"`
	IterationsShort          int     `json:"iterations_short"`
	ReplannedJobs            int     `json:"replanned_jobs"`
	WallS                    float64 `json:"wall_s"`
}

type lab struct {
	env       []string // the process environment plus the lab's Slurm variables
	url, user string
	tokenFile string
}

func labFromEnv(t *testing.T) lab {
	l := lab{url: os.Getenv("SLURMRESTD_URL"), user: os.Getenv("SLURMRESTD_USER"), tokenFile: os.Getenv("SLURMRESTD_TOKEN_FILE")}
	if l.url == "" || l.tokenFile == "" || os.Getenv("SLURM_CONF") == "" {
		t.Skip("SKIP: no Slurm lab in the environment (source $LAB/env.sh; as root: make lab-up)")
	}
	if l.user == "" {
		l.user = "root"
	}
	l.env = os.Environ()
	return l
}

func (l lab) run(t *testing.T, argv ...string) string {
	t.Helper()
	return l.runIn(t, "", argv...)
}

// runIn is run in directory dir ("": the test's).
func (l lab) runIn(t *testing.T, dir string, argv ...string) string {
	t.Helper()
	out, err := l.output(dir, argv...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// output runs argv in the lab's environment, in directory dir ("": the
// test's), and returns its output and error.
func (l lab) output(dir string, argv ...string) ([]byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = l.env, dir
	return cmd.CombinedOutput()
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// writeConfig writes dir/rubickd.yaml for the lab: slurmrestd, the gpu
// partition, a 2 s interval and the store dir/rubick.db, then the lines of
// extra. It returns the file's path and content and the store's path.
func writeConfig(t *testing.T, l lab, dir, extra string) (path, content, db string) {
	t.Helper()
	path, db = filepath.Join(dir, "rubickd.yaml"), filepath.Join(dir, "rubick.db")
	content = fmt.Sprintf(`slurmrestd:
  url: %s
  user: %s
  token_file: %s
  rate_limit: 100
partitions: [gpu]
interval: 2s
store: %s
`, l.url, l.user, l.tokenFile, db) + extra
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, content, db
}

// cluster is a slurmrestd client of the lab.
func (l lab) cluster(ctx context.Context, t *testing.T) *slurm.RESTCluster {
	t.Helper()
	c, err := slurm.NewCluster(ctx, slurm.Config{URL: l.url, User: l.user, TokenFile: l.tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// samples is rubickd's samples endpoint on a free local port, its reports
// signed with the lab's munged.
type samples struct {
	port   int
	socket string
}

func newSamples(t *testing.T) samples {
	return samples{port: freePort(t), socket: filepath.Join(os.Getenv("LAB"), "munge", "munge.socket.2")}
}

// config is the rubickd.yaml lines that serve the endpoint.
func (s samples) config() string {
	return fmt.Sprintf("samples:\n  munge_socket: %s\nlisten: 127.0.0.1:%d\n", s.socket, s.port)
}

// filler is a rigid job's size: nodes of gpus GPUs each.
type filler struct{ nodes, gpus string }

// holdGPUs submits rigid jobs that sleep on the given sizes, waits until
// they run (or ctx ends) and returns their ids, for the caller to cancel.
func holdGPUs(ctx context.Context, t *testing.T, l lab, cluster *slurm.RESTCluster, sizes ...filler) []string {
	t.Helper()
	var ids []string
	for _, f := range sizes {
		out := l.run(t, "sbatch", "--parsable", "-p", "gpu", "-J", "e2e-filler", "-N", f.nodes, "--ntasks-per-node=1",
			"--gres=gpu:"+f.gpus, "--cpus-per-task=8", "--mem=8G", "-o", "/dev/null", "--wrap", "sleep 600")
		ids = append(ids, strings.Split(out, ";")[0])
	}
	waitRunning(ctx, cluster, ids...)
	return ids
}

// waitRunning waits until every job of ids runs, or ctx ends.
func waitRunning(ctx context.Context, cluster slurm.Cluster, ids ...string) {
	for _, f := range ids {
		id, _ := strconv.Atoi(f)
		for ctx.Err() == nil {
			if j, err := cluster.Job(ctx, id); err == nil && j.State == slurm.StateRunning {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// submitScript writes body as dir/train.sh and submits it with sbatch and
// args, to run in dir, its output appended to dir/job-<id>.out; the id is
// added to ids.
func (l lab) submitScript(t *testing.T, dir, body string, ids *[]string, args ...string) int {
	t.Helper()
	script := filepath.Join(dir, "train.sh")
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	// Submitted from dir, and run there (-D): rubick-srun keeps its state
	// in .rubick/ of the directory sbatch ran in ($SLURM_SUBMIT_DIR), which
	// must be the test's, not the source tree.
	argv := append([]string{"sbatch", "--parsable", "-D", dir}, args...)
	out := l.runIn(t, dir, append(argv, "--open-mode=append", "-o", filepath.Join(dir, "job-%j.out"), script)...)
	id := parsableID(t, out)
	*ids = append(*ids, strconv.Itoa(id))
	return id
}

// parsableID is the job id in what sbatch --parsable printed, out: its
// last line (job_submit.lua's notice for a script without rubick-srun
// comes before it, on stderr), before any ";cluster".
func parsableID(t *testing.T, out string) int {
	t.Helper()
	line := strings.Split(out[strings.LastIndexByte(out, '\n')+1:], ";")[0]
	id, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("sbatch printed %q", out)
	}
	return id
}

// labTest is where most lab tests start: the lab, idle; a deadline; rubick's
// commands built into dir/bin; a rubickd configuration (with extra) in dir;
// a slurmrestd client; and the jobs the test submits, cancelled when it ends.
type labTest struct {
	lab
	ctx             context.Context
	dir, bin        string
	cfgPath, dbPath string
	cluster         *slurm.RESTCluster
	ids             []string
}

func newLabTest(t *testing.T, name string, timeout time.Duration, extra string) *labTest {
	t.Helper()
	l := labFromEnv(t)
	l.waitIdle(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	lt := &labTest{lab: l, ctx: ctx}
	lt.dir, lt.bin = buildInto(t, name)
	lt.cfgPath, _, lt.dbPath = writeConfig(t, l, lt.dir, extra)
	lt.cluster = l.cluster(ctx, t)
	t.Cleanup(func() { scancelAll(l, &lt.ids) })
	return lt
}

// waitCycles waits until rubickd has recorded n more decision cycles in
// the store than when called. The first may have read the cluster before
// the call, so n cycles give n-1 that saw what the test just did, however
// slow a cycle runs; a fixed sleep could end before any.
func (lt *labTest) waitCycles(t *testing.T, d *daemonProc, n int64) {
	t.Helper()
	st, err := store.Open(lt.ctx, lt.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	last := func() int64 {
		id, err := st.LastCycle(lt.ctx)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		return id
	}
	for at := last(); last() < at+n; time.Sleep(250 * time.Millisecond) {
		if lt.ctx.Err() != nil {
			t.Fatalf("rubickd recorded fewer than %d cycles after %d; log %s", n, at, d.log)
		}
	}
}

// waitIdle waits (30 s at most) until the lab's partition has no jobs
// left, as the tests before may leave some ending: a test that needs free
// nodes starts from an idle lab.
func (l lab) waitIdle(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if strings.TrimSpace(l.run(t, "squeue", "-h", "-p", "gpu", "-o", "%i")) == "" {
			return
		}
	}
	t.Logf("the lab still has jobs after 30 s: %s", l.run(t, "squeue", "-h", "-p", "gpu"))
}

// runDaemon starts rubickd with cfgPath, its log in dir; it stops when the
// test ends.
func runDaemon(t *testing.T, l lab, bin, dir, cfgPath string) *daemonProc {
	d := newDaemon(t, l, bin, dir, cfgPath)
	d.start()
	t.Cleanup(d.stop)
	return d
}

// newDaemon is rubickd of bin with cfgPath, its log and store in dir, not
// started. A test that fails prints evidence (lab.evidence) of its run
// when its cleanups run: a CI machine keeps no lab files.
func newDaemon(t *testing.T, l lab, bin, dir, cfgPath string) *daemonProc {
	d := &daemonProc{t: t, bin: filepath.Join(bin, "rubickd"), cfg: cfgPath, env: l.env, log: filepath.Join(dir, "rubickd.log")}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(l.evidence(bin, d.log, filepath.Join(dir, "rubick.db")))
		}
	})
	return d
}

// evidence is what a failed test leaves in its output: the cluster as
// Slurm shows it, why rubickd's newest cycle left each job as it did, and
// the end of rubickd's log.
func (l lab) evidence(bin, logPath, db string) string {
	var b strings.Builder
	show := func(argv ...string) {
		out, err := l.output("", argv...)
		fmt.Fprintf(&b, "\n$ %s\n%s", strings.Join(argv, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	show("sinfo", "-N", "-p", "gpu", "-o", "%N %T %G %E")
	show("squeue", "-a", "-o", "%i %P %j %T %r %N %b")
	if _, err := os.Stat(db); err == nil {
		show(filepath.Join(bin, "rubick"), "queue", "--store", db, "--all")
	}
	if log, err := os.ReadFile(logPath); err == nil {
		lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
		fmt.Fprintf(&b, "\nlast lines of %s:\n%s\n", logPath, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
	return b.String()
}

// shortTraining is a batch script in which rubick-srun runs the emulated
// trainer of model for 20 quick iterations, checkpointing under dir.
func shortTraining(bin, dir, model string, globalBatch int) string {
	return fmt.Sprintf(`#!/bin/bash
exec %[1]s/rubick-srun --launcher gpu -- \
  %[1]s/rubick-emu-trainer --model-type %[3]s --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
  --micro-batch-size 1 --global-batch-size %[4]d --train-iters 20 --time-scale 0.01 --log-interval 5 \
  --save %[2]s/ckpt-"$SLURM_JOB_ID"
`, bin, dir, model, globalBatch)
}

// longTraining is a batch script in which rubick-srun runs bert's
// emulated trainer at measured speed for longer than any test: a job that
// stays running until the test cancels it.
func longTraining(bin, dir string) string {
	return fmt.Sprintf(`#!/bin/bash
exec %[1]s/rubick-srun --launcher gpu -- \
  %[1]s/rubick-emu-trainer --model-type bert --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
  --micro-batch-size 1 --global-batch-size 32 --train-iters 100000 --time-scale 1 --log-interval 50 \
  --save %[2]s/ckpt-"$SLURM_JOB_ID"
`, bin, dir)
}

// waitEnded polls job id until it ends or ctx does; it returns the job as
// last read and the nodes it was last seen running on.
func waitEnded(ctx context.Context, cluster slurm.Cluster, id int) (slurm.Job, []string) {
	var j slurm.Job
	var ran []string
	for ctx.Err() == nil {
		var err error
		if j, err = cluster.Job(ctx, id); err == nil {
			if len(j.NodeList) > 0 {
				ran = j.NodeList
			}
			if j.Ended() {
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return j, ran
}

// scancelAll cancels the jobs in *ids, ignoring errors: a test's cleanup.
func scancelAll(l lab, ids *[]string) {
	if len(*ids) == 0 {
		return
	}
	cmd := exec.Command("scancel", *ids...)
	cmd.Env = l.env
	_ = cmd.Run()
}

// buildInto makes $LAB/e2e/<name>-<time> and returns it with the bin/
// that rubick's commands are built into once per test run (linking the
// four took 7 s, 40 times a run): $RUBICK_E2E_BIN, set by the first call.
func buildInto(t *testing.T, name string) (dir, bin string) {
	t.Helper()
	dir = filepath.Join(os.Getenv("LAB"), "e2e", name+"-"+time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if bin = os.Getenv("RUBICK_E2E_BIN"); bin != "" {
		return dir, bin
	}
	bin = filepath.Join(os.Getenv("LAB"), "e2e", fmt.Sprintf("bin-%s-%d", time.Now().Format("20060102-150405"), os.Getpid()))
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/rubickd", "./cmd/rubick-srun", "./cmd/rubick-emu-trainer", "./cmd/rubick")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// The process's environment, for the tests after this one; each
	// test run builds afresh.
	if err := os.Setenv("RUBICK_E2E_BIN", bin); err != nil {
		t.Fatal(err)
	}
	return dir, bin
}

func TestEndToEnd(t *testing.T) {
	l := labFromEnv(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()

	dir, bin := buildInto(t, "run")
	cfgPath, _, dbPath := writeConfig(t, l, dir, `tenant_from: qos
tenants:
  - name: lab-guaranteed
    match: [guaranteed]
    quota_gpus: 16
checkpoint:
  signal: USR1
  grace: 30s
restart_cost: 1s
policy:
  name: rubick
  starvation_age: 1m
  # A best-effort job gives a guaranteed one part of its GPUs whatever
  # share of its speed it keeps (the default, 0.5, preempts it whole below
  # that): where the kills land decides the first allocations, and with
  # them whether a shrink or a preemption reclaims the GPUs. This way the
  # reclaim is a checkpoint-restart onto a new plan in every run but one
  # whose victims cannot shrink.
  reclaim_keep: 0
listen: ""
log_level: info
`)

	cluster, err := slurm.NewCluster(ctx, slurm.Config{URL: l.url, User: l.user, TokenFile: l.tokenFile, RateLimit: 50})
	if err != nil {
		t.Fatal(err)
	}

	// rubickd, restarted after every SIGKILL.
	d := newDaemon(t, l, bin, dir, cfgPath)
	d.start()
	defer d.stop()

	// Watch: the first time each (job, plan) is seen running.
	w := &watcher{seen: map[int][]sighting{}}
	wctx, wstop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.loop(wctx, cluster) }()

	// Kill rubickd at random points of its cycles, 20 times, from the first
	// submission on (every 0.6-1.6 s), restarting it each time; the
	// guaranteed job waits for the 20, so the reclaim that follows runs
	// on a daemon that has just recovered from them.
	kctx, kstop := context.WithCancel(ctx)
	killed := make(chan int, 1)
	killsOver := make(chan struct{})
	go func() {
		defer close(killsOver)
		rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 7))
		n := 0
		for n < 20 {
			select {
			case <-kctx.Done():
				killed <- n
				return
			case <-time.After(time.Duration(600+rng.IntN(1000)) * time.Millisecond):
			}
			d.kill()
			n++
			d.start()
		}
		killed <- n
	}()

	// Submit the scenario.
	script := filepath.Join(dir, "train.sh")
	if err := os.WriteFile(script, []byte(trainScript(bin, dir)), 0o755); err != nil {
		t.Fatal(err)
	}
	var ids []int
	want := map[int]jobSpec{}
	// A failed run leaves no job behind for the tests after it.
	t.Cleanup(func() {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = strconv.Itoa(id)
		}
		scancelAll(l, &s)
	})
	submit := func(js jobSpec) {
		id := l.submitTraining(t, dir, script, js)
		ids = append(ids, id)
		want[id] = js
	}
	var guaranteedAt time.Time
	for _, js := range scenario {
		if js.guaranteed {
			<-killsOver
			waitFull(ctx, t, cluster, &ids, func(free []int) {
				for _, g := range free {
					submit(jobSpec{model: "bert", nodes: 1, gpus: g, iters: 1000, batch: 32})
				}
			})
			guaranteedAt = time.Now()
		}
		submit(js)
	}
	t.Logf("submitted %v", ids)

	// Wait for every job; the killer below SIGKILLs rubickd meanwhile.
	for {
		finished, err := allFinished(ctx, cluster, ids)
		if err != nil {
			t.Logf("poll: %v", err)
		}
		if finished {
			break
		}
		if ctx.Err() != nil {
			t.Errorf("jobs not finished after %v; rubickd log: %s", time.Since(start), d.log)
			break
		}
		time.Sleep(time.Second)
	}
	kstop()
	kills := <-killed
	wstop()
	wg.Wait()
	d.stop()

	res := Result{Jobs: len(ids), RubickdKills: kills}
	st, err := store.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var delays []float64
	for _, id := range ids {
		j, err := cluster.Job(context.Background(), id)
		if err != nil {
			t.Errorf("job %d: %v", id, err)
			res.Lost++
			continue
		}
		if j.State == slurm.StateCompleted {
			res.Completed++
		} else {
			res.Lost++
			t.Errorf("job %d ended %s (%s)", id, j.State, j.Reason)
		}
		if j.State == slurm.StatePending && j.Held {
			res.StuckHeld++
		}
		done, err := iterationsDone(filepath.Join(dir, fmt.Sprintf("ckpt-%d", id)))
		if err != nil || done != want[id].iters {
			res.IterationsShort++
			t.Errorf("job %d: %d iterations done (err %v), want %d", id, done, err, want[id].iters)
		}
		hist, err := st.PlanHistory(context.Background(), int64(id))
		if err != nil {
			t.Errorf("history of %d: %v", id, err)
			continue
		}
		// A restarted job's trainer must have received a new plan and
		// resumed from its checkpoint, if one was saved before a restart:
		// a job requeued before its first iteration has none, and starts
		// afresh (its iterations are counted above).
		if j.RestartCount > 0 {
			plans, resumed, owed := trainerLog(t, filepath.Join(dir, fmt.Sprintf("job-%d.out", id)))
			if len(plans) >= 2 && resumed > 0 {
				res.ReplannedJobs++
			}
			if owed && resumed == 0 {
				t.Errorf("job %d restarted %d times and never resumed from its checkpoint (rank-0 plans %v)", id, j.RestartCount, plans)
			}
			t.Logf("job %d: rank-0 plans %v, %d resumes, a checkpoint saved before a restart: %v", id, plans, resumed, owed)
		}
		// Slurm counts the job's restarts; the store says which of them
		// gave the job fewer GPUs.
		res.Reconfigurations += j.RestartCount
		gpus := 0
		for _, a := range hist {
			if a.Result == store.ResultOK && a.Kind == string(slurm.ActionPreempt) && a.DecidedAt.After(guaranteedAt) {
				res.Preemptions++
			}
			if a.Result != store.ResultOK || (a.Kind != string(slurm.ActionStart) && a.Kind != string(slurm.ActionRestart)) {
				continue
			}
			if g := a.Resources.Placement.GPUs(); gpus > 0 && g < gpus {
				res.Shrinks++
			}
			gpus = a.Resources.Placement.GPUs()
			if at, ok := w.firstRunning(id, a.Plan.String(), a.DecidedAt); ok {
				delays = append(delays, at.Sub(a.DecidedAt).Seconds())
			}
		}
		t.Logf("job %d %s: %s, %d restarts, %d actions", id, want[id].model, j.State, j.RestartCount, len(hist))
	}
	res.DecisionToRunningSamples = len(delays)
	if len(delays) > 0 {
		slices.Sort(delays)
		res.MedianDecisionToRunningS = delays[len(delays)/2]
	}
	checkAccounting(t, l, filepath.Join(bin, "rubick"), dbPath, ids, res.Reconfigurations, start)
	res.WallS = time.Since(start).Seconds()
	line, _ := json.Marshal(res)
	t.Logf("%s", line)
	if p := os.Getenv("E2E_RESULT"); p != "" {
		if err := os.WriteFile(p, append(line, '\n'), 0o644); err != nil {
			t.Error(err)
		}
	}
	if res.RubickdKills < 20 {
		t.Errorf("rubickd was killed %d times before the jobs finished, want 20", res.RubickdKills)
	}
	if res.Lost != 0 || res.StuckHeld != 0 || res.IterationsShort != 0 {
		t.Errorf("lost %d, stuck held %d, short of iterations %d: all must be 0", res.Lost, res.StuckHeld, res.IterationsShort)
	}
	// The reclaim is a shrink unless no victim could give part of its
	// GPUs (reclaim_keep: 0 above); either way the victims resumed from
	// their checkpoints (checked per job above), and a shrunk one on a
	// new plan.
	if res.Shrinks+res.Preemptions == 0 || res.Reconfigurations == 0 {
		t.Errorf("no GPUs were reclaimed for the guaranteed job: %d shrinks, %d preemptions, %d restarts",
			res.Shrinks, res.Preemptions, res.Reconfigurations)
	}
	if res.Shrinks > 0 && res.ReplannedJobs == 0 {
		t.Errorf("%d running jobs restarted on fewer GPUs, none with a new plan resumed from its checkpoint", res.Shrinks)
	}
	if res.Shrinks == 0 {
		t.Logf("the reclaim preempted %d jobs whole; no running job was restarted on fewer GPUs", res.Preemptions)
	}
}

// waitFull returns once every GPU of the lab is allocated; it fails the
// test if that does not happen within 150 s, since the reclaim the scenario
// checks needs a full cluster. rubick may leave GPUs free for good: where
// the kills landed decides the first allocations, and the restart penalty
// may then keep each job as it is, or a job whose request spans two nodes
// waits for them while the others run beside a node's worth of free GPUs
// (a clean-lab run on 2026-11-27: t5 waited 85 s at 24 of 32 until the
// others ended). So once the allocation has stood still for 20 s with GPUs
// free, waitFull calls topUp (twice at most) with them as jobs of one node
// each that bert's batch splits over (powersOfTwo), for the caller to
// submit as best-effort jobs, which rubick starts on them. One job for
// all the free GPUs did not fill the lab when they were spread over nodes
// (a CI run on 2026-11-29: at 24 of 32, topped up twice with one job of
// 8 and one of 4 GPUs, it was still not full when the first jobs ended).
// A job still waiting then is a
// queued best-effort job beside the reclaim.
func waitFull(ctx context.Context, t *testing.T, c slurm.Cluster, ids *[]int, topUp func(free []int)) {
	t.Helper()
	deadline := time.Now().Add(150 * time.Second)
	var state string
	lastUsed, since, topUps := -1, time.Now(), 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		running := 0
		for _, id := range *ids {
			if j, err := c.Job(ctx, id); err == nil && j.State == slurm.StateRunning {
				running++
			}
		}
		used, total := 0, 0
		var free []int // one job's GPUs each, on one node
		if nodes, err := c.Nodes(ctx); err == nil {
			for _, n := range nodes {
				used, total = used+n.GPUsUsed, total+n.GPUs
				free = append(free, powersOfTwo(n.GPUs-n.GPUsUsed)...)
			}
		}
		state = fmt.Sprintf("%d of %d jobs running, %d of %d GPUs allocated", running, len(*ids), used, total)
		if running > 0 && total > 0 && used == total {
			t.Logf("cluster full: %s", state)
			return
		}
		if used != lastUsed {
			lastUsed, since = used, time.Now()
		} else if time.Since(since) >= 20*time.Second && topUps < 2 && running > 0 && total > used {
			t.Logf("the allocation stood still for 20 s (%s): best-effort jobs of %v GPUs for the free ones", state, free)
			topUp(free)
			topUps++
			since = time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("the best-effort jobs never filled the lab (%s): no reclaim to check", state)
}

// powersOfTwo splits n free GPUs of a node into jobs that take them all:
// bert's global batch of 32 splits over 1, 2, 4 or 8 GPUs, not 3 or 6, so
// a job asking for 3 would run on 2 and leave the lab short of full.
func powersOfTwo(n int) []int {
	var out []int
	for g := 8; g >= 1; g /= 2 {
		for ; n >= g; n -= g {
			out = append(out, g)
		}
	}
	return out
}

// trainScript is the user's batch script: rubick-srun in place of srun,
// exec'd so it receives the checkpoint signal of `scancel --batch`.
func trainScript(bin, dir string) string {
	return fmt.Sprintf(`#!/bin/bash
exec %[1]s/rubick-srun --launcher gpu -- %[1]s/rubick-emu-trainer --model-type "$E2E_MODEL" \
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 1 \
  --global-batch-size "$E2E_BATCH" --train-iters "$E2E_ITERS" --time-scale 0.25 --log-interval 10 \
  --save %[2]s/ckpt-"$SLURM_JOB_ID" --save-ms "${E2E_SAVE_MS:-0}"
`, bin, dir)
}

// submitTraining submits script (trainScript) with sbatch for js: its
// model type, QOS (guaranteed or normal), nodes and GPUs, iterations and
// global batch, its output appended to dir/job-<id>.out; it returns the id.
func (l lab) submitTraining(t *testing.T, dir, script string, js jobSpec) int {
	t.Helper()
	qos := "--qos=normal"
	if js.guaranteed {
		qos = "--qos=guaranteed"
	}
	args := []string{"sbatch", "--parsable", "--model-type=" + js.model, qos, "-p", "gpu", "-J", "e2e-" + js.model,
		"-N", strconv.Itoa(js.nodes), "--ntasks-per-node=1", "--gres=gpu:" + strconv.Itoa(js.gpus), "--cpus-per-task=8",
		"--mem=32G", "--requeue", "--open-mode=append", "-o", filepath.Join(dir, "job-%j.out"),
		"--export=ALL,E2E_MODEL=" + js.model + ",E2E_ITERS=" + strconv.Itoa(js.iters) + ",E2E_BATCH=" + strconv.Itoa(js.batch) + ",E2E_SAVE_MS=" + strconv.Itoa(js.saveMs)}
	if js.time != "" {
		args = append(args, "--time="+js.time)
	}
	if js.mail != "" {
		args = append(args, "--mail-type="+js.mail, "--mail-user=root")
	}
	out := l.runIn(t, dir, append(args, script)...) // rubick-srun's state in dir/.rubick
	id, err := strconv.Atoi(strings.Split(out, ";")[0])
	if err != nil {
		t.Fatalf("sbatch printed %q", out)
	}
	return id
}

// checkAccounting reads the finished jobs back from Slurm accounting: sacct
// shows each job's plan in its AdminComment, and `rubick report` over the
// lab's sacct and rubickd's store counts every job and reconfiguration.
func checkAccounting(t *testing.T, l lab, rubick, db string, ids []int, reconfigs int, since time.Time) {
	t.Helper()
	var list []string
	for _, id := range ids {
		list = append(list, strconv.Itoa(id))
	}
	// slurmdbd receives the final records a moment after the jobs end.
	var out string
	for try := 0; try < 20; try++ {
		out = l.run(t, "sacct", "-P", "-X", "-n", "-j", strings.Join(list, ","), "-o", "JobID,State,AdminComment")
		if strings.Count(out, "plan=") >= len(ids) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) == 3 && !strings.Contains(f[2], "plan=") {
			t.Errorf("sacct shows no plan for job %s: %q", f[0], line)
		}
	}
	if strings.Count(out, "plan=") < len(ids) {
		t.Errorf("sacct shows %d plans for %d jobs:\n%s", strings.Count(out, "plan="), len(ids), out)
	}
	// The lab keeps other tests' jobs, some with malformed tags on purpose;
	// the report lists those as problems and exits 1, which is right. This
	// run's own jobs must have none.
	cmd := exec.Command(rubick, "report", "--json", "--since", since.Add(-time.Minute).UTC().Format(time.RFC3339),
		"--store", db, "--tz", "UTC", "--by", "model")
	cmd.Env = l.env
	rep, err := cmd.Output()
	if err != nil && len(rep) == 0 {
		t.Fatalf("rubick report: %v", err)
	}
	var r struct {
		Jobs []struct {
			JobID            string   `json:"job_id"`
			Reconfigurations int      `json:"reconfigurations"`
			Interruptions    int      `json:"interruptions"`
			Plans            []string `json:"plans"`
			BillingHours     float64  `json:"billing_hours"`
		} `json:"jobs"`
		Errors []struct {
			JobID string `json:"job_id"`
			Error string `json:"error"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(rep, &r); err != nil {
		t.Fatalf("rubick report --json: %v\n%s", err, rep)
	}
	for _, e := range r.Errors {
		if slices.Contains(list, e.JobID) {
			t.Errorf("rubick report: job %s: %s", e.JobID, e.Error)
		}
	}
	found, total := 0, 0
	for _, j := range r.Jobs {
		if slices.Contains(list, j.JobID) {
			found++
			// Slurm counts its own requeues (a node failure) among the
			// job's restarts; the report keeps them apart.
			total += j.Reconfigurations + j.Interruptions
			if len(j.Plans) == 0 {
				t.Errorf("rubick report: job %s has no plan history", j.JobID)
			}
			// sacct's AllocTRES bills every run (its CPUs, on the lab).
			if !(j.BillingHours > 0) {
				t.Errorf("rubick report: job %s billed %v hours, want some", j.JobID, j.BillingHours)
			}
		}
	}
	if found != len(ids) || total < reconfigs {
		t.Errorf("rubick report found %d of %d jobs and %d reconfigurations (Slurm counted %d)", found, len(ids), total, reconfigs)
	}
}

// trainerLog returns the distinct plans rank 0 of the emulated trainer
// received, in order, how many times a rank loaded a checkpoint, and
// whether one was there to load: a run began after a checkpoint was saved.
// A run requeued before its first iteration saves nothing (the trainer has
// nothing to save then), so the run after it starts afresh.
func trainerLog(t *testing.T, path string) (plans []string, resumed int, owed bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("job log: %v", err)
		return nil, 0, false
	}
	saved := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "received rank=0 ") {
			if _, plan, ok := strings.Cut(line, " plan="); ok && !slices.Contains(plans, plan) {
				plans = append(plans, plan)
			}
			owed = owed || saved
		}
		if strings.HasPrefix(line, " saved checkpoint at iteration ") {
			saved = true
		}
		if strings.HasPrefix(line, " loading checkpoint from ") {
			resumed++
		}
	}
	return plans, resumed, owed
}

// iterationsDone reads the trainer's Megatron-style checkpoint tracker.
func iterationsDone(ckpt string) (int, error) {
	b, err := os.ReadFile(filepath.Join(ckpt, "latest_checkpointed_iteration.txt"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func allFinished(ctx context.Context, c slurm.Cluster, ids []int) (bool, error) {
	for _, id := range ids {
		j, err := c.Job(ctx, id)
		if err != nil {
			return false, err
		}
		if !j.Ended() {
			return false, nil
		}
	}
	return true, nil
}

// watcher records when each job was seen running which plan.
type watcher struct {
	mu   sync.Mutex
	seen map[int][]sighting
}

type sighting struct {
	plan string
	at   time.Time
}

func (w *watcher) loop(ctx context.Context, c slurm.Cluster) {
	for ctx.Err() == nil {
		jobs, _, err := c.Jobs(ctx, time.Time{})
		now := time.Now()
		if err == nil {
			w.mu.Lock()
			for _, j := range jobs {
				if j.State == slurm.StateRunning && j.Tag != nil && j.Tag.Plan != "" {
					w.seen[j.ID] = append(w.seen[j.ID], sighting{j.Tag.Plan, now})
				}
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// firstRunning returns the first time after decided the job was seen
// running plan.
func (w *watcher) firstRunning(id int, plan string, decided time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.seen[id] {
		if s.plan == plan && s.at.After(decided) {
			return s.at, true
		}
	}
	return time.Time{}, false
}

type daemonProc struct {
	t        *testing.T
	bin, cfg string
	env      []string
	log      string
	cmd      *exec.Cmd
}

func (d *daemonProc) start() {
	// Errorf, not Fatal: the killer goroutine restarts rubickd too.
	f, err := os.OpenFile(d.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		d.t.Errorf("rubickd log: %v", err)
		return
	}
	d.cmd = exec.Command(d.bin, "--config", d.cfg)
	d.cmd.Env = d.env
	d.cmd.Stdout, d.cmd.Stderr = f, f
	if err := d.cmd.Start(); err != nil {
		d.t.Errorf("start rubickd: %v", err)
		d.cmd = nil
	}
	f.Close()
}

func (d *daemonProc) kill() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	_ = d.cmd.Wait()
	d.exitedEarly()
	d.cmd = nil
}

// exitedEarly fails the test if rubickd, now waited for, had ended by
// itself (a bad configuration, a crash) rather than by the test's signal:
// the jobs would otherwise wait for a daemon that is not there.
func (d *daemonProc) exitedEarly() {
	if st := d.cmd.ProcessState; st != nil && st.Exited() && st.ExitCode() != 0 {
		d.t.Errorf("rubickd exited by itself with status %d; log: %s", st.ExitCode(), d.log)
	}
}

// waitLog reports whether rubickd's log says want, looking until within
// has passed.
func (d *daemonProc) waitLog(want string, within time.Duration) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if b, _ := os.ReadFile(d.log); strings.Contains(string(b), want) {
			return true
		}
	}
	return false
}

// hup asks rubickd to reload its configuration, as systemctl reload does.
func (d *daemonProc) hup() {
	if d.cmd != nil && d.cmd.Process != nil {
		_ = d.cmd.Process.Signal(syscall.SIGHUP)
	}
}

// stop ends rubickd the way an admin does: SIGTERM, which lets the cycle
// in progress finish.
func (d *daemonProc) stop() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
	d.exitedEarly()
	d.cmd = nil
}

// jobMailType is job id's MailType, as scontrol shows it.
func jobMailType(t *testing.T, l lab, id int) string {
	t.Helper()
	var mailType string
	for _, f := range strings.Fields(l.run(t, "scontrol", "show", "job", "-o", strconv.Itoa(id))) {
		if v, ok := strings.CutPrefix(f, "MailType="); ok {
			mailType = v
		}
	}
	return mailType
}
