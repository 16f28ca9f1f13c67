// Command rubick-emu-trainer behaves like a Megatron training job without
// GPUs, for testing rubick on a Slurm cluster: it takes Megatron flags,
// sleeps per iteration as long as the measured ground truth says its plan
// takes on its placement, logs Megatron iteration lines, checkpoints on
// SIGUSR1/SIGTERM and resumes from --load.
//
// Exit status: 0 when --train-iters or --exit-interval is reached, 75 (EX_TEMPFAIL, "try
// again") after a checkpoint on a signal, 2 on bad flags, 1 otherwise.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/sim"
	"github.com/rubick-sched/rubick/trainer"
)

// Exit statuses.
const (
	exitOK           = 0
	exitFailed       = 1
	exitUsage        = 2
	exitCheckpointed = 75 // EX_TEMPFAIL: the job is meant to be requeued
)

const usage = `usage: rubick-emu-trainer [Megatron flags]

Megatron flags read (others are accepted and ignored):
  --tensor-model-parallel-size N   (default 1)
  --pipeline-model-parallel-size N (default 1)
  --micro-batch-size N             (required)
  --global-batch-size N            (required)
  --train-iters N                  total iterations over all restarts (required)
  --save DIR, --load DIR           checkpoint tracker directory (default none)
  --save-interval N                also save every N iterations (default 0: at the end only)
  --exit-interval N                stop at the first iteration that is a multiple of N, saving
                                   only when --save is given (default 0: never)
  --log-interval N                 iterations per log line (default 1)
  --recompute-granularity full, --use-distributed-optimizer, --optimizer-cpu-offload,
  --zero-stage N, --deepspeed_config FILE   the rest of the plan
Emulator flags:
  --model-type NAME                model type; with no --iter-ms, iteration times come
                                   from the measured ground truth of this model
  --iter-ms MS                     iteration time in ms (default 100, or the ground truth)
  --time-scale F                   multiply the sleeps, not the logged times (default 1)
  --save-ms MS                     time one checkpoint write takes, not scaled (default 0)
  --elapsed plan|wall              log the plan's iteration time, or each log interval's wall
                                   time per iteration divided by --time-scale, as Megatron's
                                   timers measure it (default plan)
  --world-size N                   GPUs in all (default: nodes x GPUs on the node)
  --checkpoint-exit-code N         exit status after a checkpoint (default 75)
Environment: SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NUM_NODES, SLURM_GPUS_ON_NODE
(or CUDA_VISIBLE_DEVICES), SLURM_CPUS_ON_NODE; RUBICK_PLACEMENT (GPUs per node, e.g. 2,
44, 2x16 or 16-8) and RUBICK_CPUS, set by rubick-srun on every step, take precedence.
`

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("prog", trainer.Name, "job", getenv("SLURM_JOB_ID"), "rank", getenv("SLURM_PROCID"))
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fmt.Fprint(stdout, usage)
			return exitOK
		}
	}
	exitCode := exitCheckpointed
	if v, ok := launch.LookupFlag(args, "--checkpoint-exit-code"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 255 {
			log.Error("bad flag", "err", fmt.Sprintf("--checkpoint-exit-code=%q is not an exit status 0-255", v))
			return exitUsage
		}
		exitCode = n
	}
	opts, err := trainer.ParseArgs(args, getenv)
	if err != nil {
		log.Error("bad flags", "err", err)
		fmt.Fprint(stderr, usage)
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ckpt := make(chan struct{}, 1)
	go func() {
		for s := range sigs {
			log.Info("checkpoint signal", "signal", s)
			select {
			case ckpt <- struct{}{}:
			default: // one request pending is enough
			}
		}
	}()

	cfg := trainer.Config{Options: opts, Out: stdout, Checkpoint: ckpt, Logger: log}
	if _, set := launch.LookupFlag(args, "--iter-ms"); !set && opts.ModelType != "" {
		if cfg.Timer, err = groundTruth(ctx); err != nil {
			log.Warn("no ground truth; using --iter-ms", "err", err)
		}
	}
	res, err := trainer.Run(ctx, cfg)
	switch {
	case err == nil:
		log.Info("training done", "from", res.Start, "to", res.End)
		return exitOK
	case errors.Is(err, trainer.ErrCheckpointed):
		log.Info("checkpointed; exiting for requeue", "iteration", res.Saved, "status", exitCode)
		return exitCode
	default:
		log.Error("training failed", "iteration", res.End, "err", err)
		return exitFailed
	}
}

// oracleTimer prices iterations with the simulator's ground truth: measured
// times where the artifact has them, its fitted model elsewhere.
type oracleTimer struct{ o *sim.Oracle }

func (t oracleTimer) IterTime(name string, plan model.Plan, pl model.Placement, cpus int) (time.Duration, bool) {
	tr, err := t.o.IterTime(name, plan, pl, cpus)
	if err != nil || !(tr.IterS > 0) {
		return 0, false
	}
	return time.Duration(tr.IterS * float64(time.Second)), true
}

func groundTruth(ctx context.Context) (trainer.IterTimer, error) {
	d, err := sim.Prepare(ctx, artifact.Default(), sim.DefaultConfig())
	if err != nil {
		return nil, err
	}
	return oracleTimer{d.Oracle}, nil
}
