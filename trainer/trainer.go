// Package trainer is an emulated Megatron training job for testing rubick on
// a Slurm cluster without GPUs.
//
// It takes Megatron-style flags, prints what it received, sleeps per
// iteration as long as the plan would take on its placement (from an
// IterTimer such as the simulator's measured times, or a fixed time), logs
// Megatron-format iteration lines that rubick-srun parses, writes Megatron's
// checkpoint tracker file on a checkpoint signal, and resumes from --load.
package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/model"
)

// Sentinel errors callers branch on.
var (
	// ErrCheckpointed reports that the run stopped early on a checkpoint
	// request, after saving; the job should be requeued.
	ErrCheckpointed = errors.New("checkpointed on request")
	// ErrBadInput reports a malformed flag or environment value.
	ErrBadInput = errors.New("bad input")
)

// TrackerFile is the name of Megatron's checkpoint tracker, holding the
// last saved iteration; the emulator's whole checkpoint.
const TrackerFile = "latest_checkpointed_iteration.txt"

// Name is the program name printed in front of the received line.
const Name = "rubick-emu-trainer"

// Options are the parsed flags and environment of one task.
type Options struct {
	Plan        model.Plan
	GlobalBatch int
	ModelType   string
	TrainIters  int
	Save, Load  string
	// LogInterval is Megatron's --log-interval (default 1 here).
	LogInterval int
	// SaveInterval is Megatron's --save-interval; 0 saves only at the end.
	SaveInterval int
	// ExitInterval is Megatron's --exit-interval: the run saves (when
	// Save is set) and exits at the first iteration that is a multiple of
	// it; 0 never. Profiling runs pass it without --save.
	ExitInterval int
	// IterMs is the iteration time, in ms, when no IterTimer knows the plan.
	IterMs float64
	// SaveMs is how long writing one checkpoint takes, in ms, not scaled
	// by TimeScale: a large model's checkpoint takes seconds, which a
	// checkpoint-restart waits for.
	SaveMs float64
	// TimeScale multiplies the sleeps (not the logged times), so tests run
	// fast while logging realistic iteration times.
	TimeScale float64
	// WallTimes (--elapsed wall) logs the wall time each log interval took,
	// divided by TimeScale, as Megatron's timers do, in place of the plan's
	// iteration time: a stop of the process (scontrol suspend) then shows
	// in the line after it, as it does in a real job's.
	WallTimes bool

	Rank, Tasks int // RANK and WORLD_SIZE, else SLURM_PROCID and SLURM_NTASKS
	// Placement is RUBICK_PLACEMENT when set, else SLURM_JOB_NUM_NODES
	// nodes of SLURM_GPUS_ON_NODE (or CUDA_VISIBLE_DEVICES) GPUs.
	Placement model.Placement
	// CPUs is RUBICK_CPUS when set, else SLURM_CPUS_ON_NODE x nodes; 0
	// when unknown.
	CPUs int
}

// ParseArgs reads the flags (without the program name) and the SLURM
// environment through getenv. Unknown flags are ignored, as a Megatron
// script would pass its many other flags through.
//
// rubick-srun states the GPUs per node and the CPUs a step was given in
// RUBICK_PLACEMENT and RUBICK_CPUS; they take precedence over the Slurm
// variables, which describe the whole job even when a profiling run uses
// only some of its GPUs (CUDA_VISIBLE_DEVICES) and CPUs.
func ParseArgs(args []string, getenv func(string) string) (Options, error) {
	o := Options{LogInterval: 1, IterMs: 100, TimeScale: 1, Rank: 0, Tasks: 1}
	intEnv := func(key string, def int) (int, error) {
		v := getenv(key)
		if v == "" {
			return def, nil
		}
		// SLURM_JOB_CPUS_PER_NODE-style "16(x2)" values are not used here.
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%w: %s=%q is not a non-negative integer", ErrBadInput, key, v)
		}
		return n, nil
	}
	var errs []error
	grab := func(n int, err error) int { errs = append(errs, err); return n }
	o.Rank = grab(intEnv("SLURM_PROCID", 0))
	o.Tasks = grab(intEnv("SLURM_NTASKS", 1))
	// A real trainer takes its rank and world from PyTorch's env://
	// variables, which rubick-srun --as-task sets from Slurm's: under srun
	// both must agree.
	for _, v := range []struct {
		torch, slurm string
		dst          *int
	}{{"RANK", "SLURM_PROCID", &o.Rank}, {"WORLD_SIZE", "SLURM_NTASKS", &o.Tasks}} {
		if getenv(v.torch) == "" {
			continue
		}
		n := grab(intEnv(v.torch, 0))
		if getenv(v.slurm) != "" && n != *v.dst {
			errs = append(errs, fmt.Errorf("%w: %s=%d but %s=%d", ErrBadInput, v.torch, n, v.slurm, *v.dst))
		}
		*v.dst = n
	}
	nodes := grab(intEnv("SLURM_JOB_NUM_NODES", 0))
	if nodes == 0 {
		nodes = grab(intEnv("SLURM_NNODES", 1))
	}
	gpn := grab(intEnv("SLURM_GPUS_ON_NODE", 0))
	if gpn == 0 {
		if cvd := getenv("CUDA_VISIBLE_DEVICES"); cvd != "" {
			gpn = len(strings.Split(cvd, ","))
		} else {
			gpn = 1
		}
	}
	cpn := grab(intEnv("SLURM_CPUS_ON_NODE", 0))
	cpus := grab(intEnv("RUBICK_CPUS", -1))
	if err := errors.Join(errs...); err != nil {
		return Options{}, err
	}
	if v := getenv("RUBICK_PLACEMENT"); v != "" {
		pl, err := model.ParsePlacement(v)
		if err != nil {
			return Options{}, fmt.Errorf("%w: RUBICK_PLACEMENT: %w", ErrBadInput, err)
		}
		o.Placement = pl
	} else {
		if nodes < 1 {
			return Options{}, fmt.Errorf("%w: SLURM_JOB_NUM_NODES=%d must be >= 1", ErrBadInput, nodes)
		}
		o.Placement = make(model.Placement, nodes)
		for i := range o.Placement {
			o.Placement[i] = gpn
		}
	}
	o.CPUs = cpn * o.Placement.Nodes()
	if cpus >= 0 {
		o.CPUs = cpus
	}
	if o.Rank >= max(o.Tasks, 1) {
		return Options{}, fmt.Errorf("%w: SLURM_PROCID=%d is not below SLURM_NTASKS=%d", ErrBadInput, o.Rank, o.Tasks)
	}

	// The world size is the GPUs of the placement, as one rank runs per GPU;
	// --world-size overrides it where the GPUs are not visible per node.
	gpus := o.Placement.GPUs()
	if v, ok := launch.LookupFlag(args, "--world-size"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return Options{}, fmt.Errorf("%w: --world-size=%q is not a positive integer", ErrBadInput, v)
		}
		gpus = n
	}
	var err error
	o.Plan, o.GlobalBatch, err = launch.Inspect(append([]string{Name}, args...), gpus, launch.Options{})
	if err != nil {
		return Options{}, err
	}
	intFlag := func(name string, dst *int, min int) {
		if v, ok := launch.LookupFlag(args, name); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < min {
				errs = append(errs, fmt.Errorf("%w: %s=%q is not an integer >= %d", ErrBadInput, name, v, min))
			}
			*dst = n
		}
	}
	floatFlag := func(name string, dst *float64) {
		if v, ok := launch.LookupFlag(args, name); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0) || math.IsInf(f, 0) {
				errs = append(errs, fmt.Errorf("%w: %s=%q is not a positive number", ErrBadInput, name, v))
			}
			*dst = f
		}
	}
	errs = nil // the environment's errors were reported above
	intFlag("--train-iters", &o.TrainIters, 1)
	intFlag("--log-interval", &o.LogInterval, 1)
	intFlag("--save-interval", &o.SaveInterval, 0)
	intFlag("--exit-interval", &o.ExitInterval, 0)
	floatFlag("--iter-ms", &o.IterMs)
	floatFlag("--time-scale", &o.TimeScale)
	if v, ok := launch.LookupFlag(args, "--save-ms"); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0) || math.IsInf(f, 0) {
			errs = append(errs, fmt.Errorf("%w: --save-ms=%q is not a number >= 0", ErrBadInput, v))
		}
		o.SaveMs = f
	}
	o.Save, _ = launch.LookupFlag(args, "--save")
	o.Load, _ = launch.LookupFlag(args, "--load")
	o.ModelType, _ = launch.LookupFlag(args, "--model-type")
	if v, ok := launch.LookupFlag(args, "--elapsed"); ok {
		switch v {
		case "plan":
		case "wall":
			o.WallTimes = true
		default:
			errs = append(errs, fmt.Errorf("%w: --elapsed=%q: want plan or wall", ErrBadInput, v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Options{}, err
	}
	if o.TrainIters == 0 {
		return Options{}, fmt.Errorf("%w: --train-iters is required", ErrBadInput)
	}
	return o, nil
}

// IterTimer gives the time of one iteration of a plan on a placement, such
// as the simulator's measured ground truth. ok is false when it has no
// value for them.
type IterTimer interface {
	IterTime(modelType string, plan model.Plan, pl model.Placement, cpus int) (d time.Duration, ok bool)
}

// Clock is the time source; tests pass a fake one.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Config is one run of the emulator.
type Config struct {
	Options Options
	// Timer prices iterations; nil or unknown plans fall back to IterMs.
	Timer IterTimer
	Clock Clock
	// Out receives the Megatron-format log.
	Out io.Writer
	// Checkpoint delivers checkpoint requests (the forwarded SIGUSR1 or
	// SIGTERM): the run saves and returns ErrCheckpointed.
	Checkpoint <-chan struct{}
	Logger     *slog.Logger
}

// Result says how far a run got.
type Result struct {
	// Start is the iteration resumed from, End the last one completed.
	Start, End int
	// Saved is the iteration last written to the tracker, -1 if none.
	Saved int
}

// Run trains: resumes from Options.Load, runs iterations until TrainIters
// in total, and saves at the end. With ExitInterval it stops earlier, at
// the first iteration that is a multiple of it, saving only when Save is
// set, as Megatron's --exit-interval does. On a checkpoint request it
// saves the iterations completed and returns ErrCheckpointed. Only rank 0
// writes checkpoints; only the last rank prints iteration lines, as
// Megatron does.
func Run(ctx context.Context, cfg Config) (Result, error) {
	o := cfg.Options
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	res := Result{Saved: -1}
	var err error
	if o.Load != "" {
		if res.Start, err = ReadTracker(o.Load); err != nil {
			return res, err
		}
	}
	res.End = res.Start
	p := o.Plan
	fmt.Fprintf(cfg.Out, "%s: received rank=%d tasks=%d tp=%d pp=%d dp=%d mb=%d gbs=%d accum=%d zero=%d offload=%t gc=%t train_iters=%d load=%s save=%s model=%s placement=%s cpus=%d plan=%s\n",
		Name, o.Rank, o.Tasks, p.TP, p.PP, p.DP, p.MicroBatch, o.GlobalBatch, p.Accum, p.ZeRO, p.Offload, p.Checkpoint,
		o.TrainIters, o.Load, o.Save, o.ModelType, o.Placement, o.CPUs, p)
	if res.Start > 0 {
		fmt.Fprintf(cfg.Out, " loading checkpoint from %s at iteration %d\n", o.Load, res.Start)
	}

	iter, source := time.Duration(o.IterMs*float64(time.Millisecond)), "--iter-ms"
	if cfg.Timer != nil {
		if d, ok := cfg.Timer.IterTime(o.ModelType, p, o.Placement, o.CPUs); ok {
			iter, source = d, "timer"
		} else {
			source = fmt.Sprintf("--iter-ms (no ground truth for model %q, plan %s on %s)", o.ModelType, p, o.Placement)
		}
	}
	fmt.Fprintf(cfg.Out, "%s: iteration time %.1f ms from %s, sleeping %.3g of it\n", Name, float64(iter)/float64(time.Millisecond), source, o.TimeScale)
	sleep := time.Duration(float64(iter) * o.TimeScale)
	logLast := o.Rank == max(o.Tasks, 1)-1
	save := func(it int) error {
		// Nothing new to save before the first iteration of this run.
		if o.Rank != 0 || o.Save == "" || it == res.Start || it == res.Saved {
			return nil
		}
		if o.SaveMs > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-cfg.Clock.After(time.Duration(o.SaveMs * float64(time.Millisecond))):
			}
		}
		if err := WriteTracker(o.Save, it); err != nil {
			return err
		}
		res.Saved = it
		fmt.Fprintf(cfg.Out, " saved checkpoint at iteration %d to %s\n", it, o.Save)
		return nil
	}

	lastAt, lastIt := cfg.Clock.Now(), res.Start // the previous iteration line's
	for it := res.Start + 1; it <= o.TrainIters; it++ {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-cfg.Checkpoint:
			if err := save(res.End); err != nil {
				return res, err
			}
			cfg.Logger.Info("checkpoint requested", "iteration", res.End)
			return res, ErrCheckpointed
		case <-cfg.Clock.After(sleep):
		}
		res.End = it
		if logLast && (it%o.LogInterval == 0 || it == o.TrainIters) {
			now, per := cfg.Clock.Now(), iter
			if o.WallTimes {
				per = time.Duration(float64(now.Sub(lastAt)) / float64(it-lastIt) / o.TimeScale)
			}
			lastAt, lastIt = now, it
			fmt.Fprintf(cfg.Out, " [%s] iteration %8d/%8d | consumed samples: %12d | elapsed time per iteration (ms): %.1f | global batch size: %5d | lm loss: %.6E |\n",
				now.Format("2006-01-02 15:04:05"), it, o.TrainIters, it*o.GlobalBatch,
				float64(per)/float64(time.Millisecond), o.GlobalBatch, 10/math.Sqrt(float64(it)))
		}
		if o.SaveInterval > 0 && it%o.SaveInterval == 0 {
			if err := save(it); err != nil {
				return res, err
			}
		}
		if o.ExitInterval > 0 && it%o.ExitInterval == 0 && it < o.TrainIters {
			fmt.Fprintf(cfg.Out, " exiting program at iteration %d (--exit-interval %d)\n", it, o.ExitInterval)
			break
		}
	}
	if err := save(res.End); err != nil {
		return res, err
	}
	return res, nil
}

// ReadTracker returns the iteration saved in dir, 0 when dir has no
// checkpoint yet.
func ReadTracker(dir string) (int, error) {
	data, err := os.ReadFile(filepath.Join(dir, TrackerFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read checkpoint: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s holds %q, not an iteration", ErrBadInput, filepath.Join(dir, TrackerFile), clip(string(data)))
	}
	return n, nil
}

// WriteTracker saves iteration it in dir atomically: a reader, or a
// restart after a crash, sees the old or the new value, never a torn one.
func WriteTracker(dir string, it int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+TrackerFile+".*")
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = fmt.Fprintf(tmp, "%d\n", it)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, TrackerFile))
	}
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	// Make the rename itself durable.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
