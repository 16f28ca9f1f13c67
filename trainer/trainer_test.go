package trainer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseArgs(t *testing.T) {
	args := strings.Fields("--tensor-model-parallel-size 2 --pipeline-model-parallel-size=1 --micro-batch-size 2 " +
		"--global-batch-size 16 --train-iters 20 --save /c --load /c --use-distributed-optimizer " +
		"--recompute-granularity full --recompute-method uniform --model-type gpt2 --iter-ms 250 --time-scale 0.01 --lr 1e-4")
	got, err := ParseArgs(args, env(map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "8",
		"SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "4", "SLURM_CPUS_ON_NODE": "16"}))
	if err != nil {
		t.Fatal(err)
	}
	want := Options{
		Plan:        model.Plan{DP: 4, TP: 2, PP: 1, MicroBatch: 2, Accum: 2, ZeRO: 1, Checkpoint: true},
		GlobalBatch: 16, ModelType: "gpt2", TrainIters: 20, Save: "/c", Load: "/c", LogInterval: 1,
		IterMs: 250, TimeScale: 0.01, Rank: 3, Tasks: 8, Placement: model.Placement{4, 4}, CPUs: 32,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// PyTorch's variables, as rubick-srun --as-task sets them, without srun's.
	got, err = ParseArgs(args, env(map[string]string{"RANK": "5", "WORLD_SIZE": "8", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "4"}))
	if err != nil || got.Rank != 5 || got.Tasks != 8 {
		t.Errorf("from RANK and WORLD_SIZE: rank %d of %d, %v; want 5 of 8", got.Rank, got.Tasks, err)
	}

	got, err = ParseArgs(strings.Fields("--micro-batch-size 1 --global-batch-size 6 --train-iters 1"),
		env(map[string]string{"CUDA_VISIBLE_DEVICES": "0,1,2", "SLURM_NNODES": "2"}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Plan.DP != 6 || got.Plan.Accum != 1 || got.Placement.String() != "33" {
		t.Errorf("from CUDA_VISIBLE_DEVICES and SLURM_NNODES: plan %s placement %s", got.Plan, got.Placement)
	}
}

func TestParseArgsErrors(t *testing.T) {
	base := "--micro-batch-size 1 --global-batch-size 4 "
	cases := map[string]struct {
		args, field string
		env         map[string]string
	}{
		"no train iters":  {args: base, field: "--train-iters"},
		"bad train iters": {args: base + "--train-iters x", field: "--train-iters"},
		"bad time scale":  {args: base + "--train-iters 1 --time-scale -1", field: "--time-scale"},
		"bad iter ms":     {args: base + "--train-iters 1 --iter-ms 0", field: "--iter-ms"},
		"bad save ms":     {args: base + "--train-iters 1 --save-ms -5", field: `--save-ms="-5"`},
		"bad procid":      {args: base + "--train-iters 1", field: "SLURM_PROCID", env: map[string]string{"SLURM_PROCID": "a"}},
		"rank too big":    {args: base + "--train-iters 1", field: "SLURM_PROCID=2", env: map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "2"}},
		"rank not srun's": {args: base + "--train-iters 1", field: "RANK=1 but SLURM_PROCID=0",
			env: map[string]string{"RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}},
		"world not srun's": {args: base + "--train-iters 1", field: "WORLD_SIZE=4 but SLURM_NTASKS=2",
			env: map[string]string{"WORLD_SIZE": "4", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}},
		"rank too big for its world": {args: base + "--train-iters 1", field: "SLURM_PROCID=2",
			env: map[string]string{"RANK": "2", "WORLD_SIZE": "2"}},
		"bad world size": {args: base + "--train-iters 1 --world-size 0", field: "--world-size"},
		"batch mismatch": {args: "--micro-batch-size 3 --global-batch-size 4 --train-iters 1", field: "global batch 4"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseArgs(strings.Fields(c.args), env(c.env))
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("err = %v, want one naming %s", err, c.field)
			}
		})
	}
}

// fakeClock fires every sleep at once; at sleep number stopAt it sends a
// checkpoint request instead and never fires.
type fakeClock struct {
	now    time.Time
	sleeps []time.Duration
	stopAt int
	ckpt   chan struct{}
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.sleeps = append(c.sleeps, d)
	if c.stopAt > 0 && len(c.sleeps) == c.stopAt {
		c.ckpt <- struct{}{}
		return nil
	}
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func newClock(stopAt int) *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), stopAt: stopAt, ckpt: make(chan struct{}, 1)}
}

func opts(t *testing.T, dir string, iters int) Options {
	t.Helper()
	o, err := ParseArgs([]string{"--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", strconv.Itoa(iters),
		"--save", dir, "--load", dir, "--iter-ms", "200", "--time-scale", "0.5"}, env(map[string]string{"SLURM_GPUS_ON_NODE": "4"}))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestRunCheckpointAndResume(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	clk := newClock(4) // three iterations complete, then the signal
	res, err := Run(t.Context(), Config{Options: opts(t, dir, 6), Clock: clk, Out: &out, Checkpoint: clk.ckpt})
	if !errors.Is(err, ErrCheckpointed) {
		t.Fatalf("Run = %v, want ErrCheckpointed", err)
	}
	if diff := cmp.Diff(Result{Start: 0, End: 3, Saved: 3}, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	if n, err := ReadTracker(dir); n != 3 || err != nil {
		t.Errorf("tracker = %d, %v; want 3", n, err)
	}
	// Sleeps are the iteration time scaled; the log shows the unscaled time.
	if clk.sleeps[0] != 100*time.Millisecond {
		t.Errorf("slept %v, want 100ms", clk.sleeps[0])
	}
	for _, want := range []string{
		"rubick-emu-trainer: received rank=0 tasks=1 tp=1 pp=1 dp=4 mb=2 gbs=8 accum=1 zero=0 offload=false gc=false train_iters=6",
		" [2025-01-02 03:04:05] iteration        3/       6 | consumed samples:           24 | elapsed time per iteration (ms): 200.0 |",
		" saved checkpoint at iteration 3 to " + dir,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	clk = newClock(0)
	res, err = Run(t.Context(), Config{Options: opts(t, dir, 6), Clock: clk, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Result{Start: 3, End: 6, Saved: 6}, res); diff != "" {
		t.Errorf("resumed result (-want +got):\n%s", diff)
	}
	if len(clk.sleeps) != 3 || !strings.Contains(out.String(), "loading checkpoint from "+dir+" at iteration 3") {
		t.Errorf("resumed run slept %d times (want 3):\n%s", len(clk.sleeps), out.String())
	}

	// A finished job restarted does nothing more.
	res, err = Run(t.Context(), Config{Options: opts(t, dir, 6), Clock: newClock(0), Out: &out})
	if err != nil || res.End != 6 || res.Saved != -1 {
		t.Errorf("finished run: %+v, %v", res, err)
	}
}

// --save-ms makes each checkpoint write take that long, unscaled, before
// the tracker says it is done: the signalled checkpoint a restart waits
// for, and the one at the end.
func TestRunSaveTime(t *testing.T) {
	dir := t.TempDir()
	o := opts(t, dir, 6)
	o.SaveMs = 3000
	clk := newClock(4) // three iterations complete, then the signal
	res, err := Run(t.Context(), Config{Options: o, Clock: clk, Out: io.Discard, Checkpoint: clk.ckpt})
	if !errors.Is(err, ErrCheckpointed) || res.Saved != 3 {
		t.Fatalf("Run = %+v, %v; want saved at 3, ErrCheckpointed", res, err)
	}
	want := []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, 3 * time.Second}
	if diff := cmp.Diff(want, clk.sleeps); diff != "" {
		t.Errorf("sleeps (-want +got):\n%s", diff)
	}

	// Cancelled while it saves: it stops, the tracker not written.
	ctx, cancel := context.WithCancel(t.Context())
	dir = t.TempDir()
	o = opts(t, dir, 6)
	o.SaveMs = 3000
	ckpt := make(chan struct{}, 1)
	clock := &funcClock{after: func(n int) bool {
		switch n {
		case 1: // the first iteration
			return true
		case 2: // the second: the signal
			ckpt <- struct{}{}
		default: // the save's wait
			cancel()
		}
		return false
	}}
	if _, err := Run(ctx, Config{Options: o, Clock: clock, Out: io.Discard, Checkpoint: ckpt}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled during its save: %v, want context.Canceled", err)
	}
	if n, err := ReadTracker(dir); n != 0 || err != nil {
		t.Errorf("tracker = %d, %v after a save that was cancelled; want 0 (none)", n, err)
	}
}

// funcClock's waits fire at once where after, told the number of each,
// says so, else never.
type funcClock struct {
	n     int
	after func(n int) bool
}

func (c *funcClock) Now() time.Time { return time.Time{} }

func (c *funcClock) After(time.Duration) <-chan time.Time {
	c.n++
	if !c.after(c.n) {
		return nil
	}
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

func TestRunRanks(t *testing.T) {
	for rank, wantIterLines := range map[int]bool{0: false, 1: true} {
		dir := t.TempDir()
		o := opts(t, dir, 2)
		o.Rank, o.Tasks = rank, 2
		var out bytes.Buffer
		if _, err := Run(t.Context(), Config{Options: o, Clock: newClock(0), Out: &out}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "iteration        2/"); got != wantIterLines {
			t.Errorf("rank %d printed iteration lines: %v, want %v", rank, got, wantIterLines)
		}
		_, err := os.Stat(filepath.Join(dir, TrackerFile))
		if saved := err == nil; saved != (rank == 0) {
			t.Errorf("rank %d wrote a checkpoint: %v", rank, saved)
		}
	}
}

type fixedTimer time.Duration

func (f fixedTimer) IterTime(string, model.Plan, model.Placement, int) (time.Duration, bool) {
	return time.Duration(f), f > 0
}

func TestRunTimer(t *testing.T) {
	o := opts(t, t.TempDir(), 1)
	o.TimeScale = 1
	clk := newClock(0)
	var out bytes.Buffer
	if _, err := Run(t.Context(), Config{Options: o, Clock: clk, Out: &out, Timer: fixedTimer(1234 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if clk.sleeps[0] != 1234*time.Millisecond || !strings.Contains(out.String(), "(ms): 1234.0 |") {
		t.Errorf("slept %v:\n%s", clk.sleeps, out.String())
	}
}

func TestTracker(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	if n, err := ReadTracker(dir); n != 0 || err != nil {
		t.Fatalf("empty dir: %d, %v", n, err)
	}
	for _, it := range []int{5, 12} {
		if err := WriteTracker(dir, it); err != nil {
			t.Fatal(err)
		}
		if n, err := ReadTracker(dir); n != it || err != nil {
			t.Fatalf("ReadTracker = %d, %v; want %d", n, err, it)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
	if err := os.WriteFile(filepath.Join(dir, TrackerFile), []byte("release\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTracker(dir); !errors.Is(err, ErrBadInput) {
		t.Errorf("ReadTracker(release) = %v, want ErrBadInput", err)
	}
}

// TestRunExitInterval: --exit-interval stops the run at the first multiple
// of it, as Megatron's does, and saves only when --save is set.
func TestRunExitInterval(t *testing.T) {
	cases := map[string]struct {
		save      bool
		start     int // iteration already checkpointed
		wantEnd   int
		wantSaved int
	}{
		"profiling run, no save": {wantEnd: 3, wantSaved: -1},
		"with save":              {save: true, wantEnd: 3, wantSaved: 3},
		"resumed, absolute":      {save: true, start: 4, wantEnd: 6, wantSaved: 6},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if c.start > 0 {
				if err := WriteTracker(dir, c.start); err != nil {
					t.Fatal(err)
				}
			}
			args := []string{"--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "10", "--exit-interval", "3", "--iter-ms", "10"}
			if c.save {
				args = append(args, "--save", dir, "--load", dir)
			}
			o, err := ParseArgs(args, env(map[string]string{"SLURM_GPUS_ON_NODE": "4"}))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			res, err := Run(t.Context(), Config{Options: o, Clock: newClock(0), Out: &out})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(Result{Start: c.start, End: c.wantEnd, Saved: c.wantSaved}, res); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if !strings.Contains(out.String(), "exiting program at iteration "+strconv.Itoa(c.wantEnd)) {
				t.Errorf("output lacks the exit line:\n%s", out.String())
			}
			if n, _ := ReadTracker(dir); !c.save && n != 0 {
				t.Errorf("a run without --save wrote iteration %d", n)
			}
		})
	}
}

// TestParseArgsRubickEnv: the placement and CPUs rubick-srun gives a step
// override the job-wide Slurm variables.
func TestParseArgsRubickEnv(t *testing.T) {
	args := strings.Fields("--micro-batch-size 4 --global-batch-size 32 --train-iters 5 --optimizer-cpu-offload --use-distributed-optimizer")
	cases := map[string]struct {
		env      map[string]string
		wantPl   string
		wantCPUs int
		wantDP   int
	}{
		"slurm only": {env: map[string]string{"SLURM_GPUS_ON_NODE": "8", "SLURM_CPUS_ON_NODE": "64"}, wantPl: "8", wantCPUs: 64, wantDP: 8},
		"profiling run on 2 of 8 GPUs": {env: map[string]string{"SLURM_GPUS_ON_NODE": "8", "SLURM_CPUS_ON_NODE": "64",
			"CUDA_VISIBLE_DEVICES": "0,1", "RUBICK_PLACEMENT": "2", "RUBICK_CPUS": "32"}, wantPl: "2", wantCPUs: 32, wantDP: 2},
		"two nodes": {env: map[string]string{"SLURM_JOB_NUM_NODES": "1", "RUBICK_PLACEMENT": "44", "SLURM_CPUS_ON_NODE": "8"},
			wantPl: "44", wantCPUs: 16, wantDP: 8},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := ParseArgs(args, env(c.env))
			if err != nil {
				t.Fatal(err)
			}
			if o.Placement.String() != c.wantPl || o.CPUs != c.wantCPUs || o.Plan.DP != c.wantDP || !o.Plan.Offload {
				t.Errorf("placement %s cpus %d plan %s; want %s, %d, dp%d with offload", o.Placement, o.CPUs, o.Plan, c.wantPl, c.wantCPUs, c.wantDP)
			}
		})
	}
	// One node of 16 GPUs, not a node of 1 and one of 6.
	wide := strings.Fields("--micro-batch-size 2 --global-batch-size 32 --train-iters 5")
	if o, err := ParseArgs(wide, env(map[string]string{"RUBICK_PLACEMENT": "1x16"})); err != nil {
		t.Errorf("RUBICK_PLACEMENT=1x16: %v", err)
	} else if d := cmp.Diff(model.Placement{16}, o.Placement); d != "" || o.Plan.DP != 16 {
		t.Errorf("RUBICK_PLACEMENT=1x16: plan %s, want dp16; placement (-want +got):\n%s", o.Plan, d)
	}
	for _, bad := range []map[string]string{{"RUBICK_PLACEMENT": "0"}, {"RUBICK_PLACEMENT": "16-0"}, {"RUBICK_CPUS": "x"}} {
		if _, err := ParseArgs(args, env(bad)); !errors.Is(err, ErrBadInput) {
			t.Errorf("env %v: err = %v, want ErrBadInput", bad, err)
		}
	}
}

// walkClock moves its time on by each sleep, and by stop[n] more at the
// n-th (1-based): the process stood still there, as under scontrol
// suspend.
type walkClock struct {
	now   time.Time
	n     int
	stops map[int]time.Duration
}

func (c *walkClock) Now() time.Time { return c.now }

func (c *walkClock) After(d time.Duration) <-chan time.Time {
	c.n++
	c.now = c.now.Add(d + c.stops[c.n])
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// With --elapsed wall the line gives the interval's wall time per
// iteration, unscaled, as Megatron's timers do: a stop inflates the line
// whose interval it falls in, and only that one.
func TestRunWallTimes(t *testing.T) {
	o, err := ParseArgs([]string{"--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "6", "--log-interval", "2",
		"--iter-ms", "200", "--time-scale", "0.5", "--elapsed", "wall"}, env(map[string]string{"SLURM_GPUS_ON_NODE": "4"}))
	if err != nil || !o.WallTimes {
		t.Fatalf("ParseArgs: %+v, %v; want WallTimes", o, err)
	}
	// 100 ms sleeps (200 ms at half scale); 3 s stopped during the 4th.
	clk := &walkClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), stops: map[int]time.Duration{4: 3 * time.Second}}
	var out bytes.Buffer
	if _, err := Run(t.Context(), Config{Options: o, Clock: clk, Out: &out}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(out.String(), "\n") {
		if _, ms, ok := strings.Cut(line, "elapsed time per iteration (ms): "); ok {
			got = append(got, strings.Fields(ms)[0])
		}
	}
	// (2 x 100 ms + 3 s) / 2 / 0.5 = 3200 ms
	if diff := cmp.Diff([]string{"200.0", "3200.0", "200.0"}, got); diff != "" {
		t.Errorf("logged times (-want +got):\n%s", diff)
	}
	_, err = ParseArgs([]string{"--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "6", "--elapsed", "cpu"}, env(nil))
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), `--elapsed="cpu"`) {
		t.Errorf("--elapsed cpu: %v, want ErrBadInput naming it", err)
	}
}
