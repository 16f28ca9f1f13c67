// Command rubick-srun runs a training job step with the plan rubickd chose.
// It stands in for srun in the batch script:
//
//	rubick-srun [flags] [--] python pretrain_gpt.py --tensor-model-parallel-size 2 ...
//
// It reads the job's plan (--plan, else the rubick tag in the job's
// AdminComment via scontrol), rewrites the launch line to it (package
// launch), starts srun with the task geometry the plan needs, forwards the
// checkpoint signal to the step, passes the trainer's output through while
// reading iteration times from it, reports them to rubickd as profiling
// samples (package launch/report), and exits with the step's exit status.
// A job tagged profile=1 (its model type has no fitted model yet) first
// runs a bounded profiling phase of short sampled configurations on its
// first node (profile.go, launch.ProfilePlans), leaving out those its
// GPUs or its memory on the node cannot hold, then re-reads its plan,
// waiting a while (--plan-wait) for the one rubickd sets once it has
// fitted the model type.
// See docs/rubick-srun.md.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rubick-sched/rubick/gpuinfo"
	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/slurm"
)

// Exit statuses of rubick-srun itself; otherwise it exits with the step's.
const (
	exitUsage  = 2   // bad flags or a plan the launch line cannot take
	exitLaunch = 127 // srun could not be started
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is rubick-srun on this node: its GPUs' memory comes from NVML.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return runWith(ctx, args, getenv, gpuinfo.DetectMem, stdout, stderr)
}

// config is the parsed command line.
type config struct {
	// jobRef names the job to scontrol: $SLURM_JOB_ID, or ARRAY_TASK for a
	// task of a job array (whose own ID, for the array's last record, would
	// name every task of the array).
	jobRef                               string
	plan, dialect, mode, gpuBind, signal string
	scontrol, squeue, srun, scancel      string
	stateDir, checkpointDir, modelType   string
	reportURL, munge, mungeSock          string
	cpusPerTask, globalBatch, reportSkip int
	profileIters                         int
	profileTimeout, profileRunTimeout    time.Duration
	// planWait bounds the wait for rubickd's plan after a profiling
	// phase (awaitPlan); 0: no wait.
	planWait time.Duration
	// markWait is the pause before the first retry of the requeue's mark
	// (markRequeue), doubled before each next one.
	markWait                    time.Duration
	ensureLoad, dryRun, requeue bool
	requeueMail                 bool
	// asTask: run as one task of a per-GPU step (runTask); localRankAt
	// is where its "--local_rank=N" goes in the command, -1 for none.
	asTask      bool
	localRankAt int
	// self is this program, as a per-GPU step's tasks run it.
	self     string
	logLevel string
	// srunArgs are the job's own options for every srun step.
	srunArgs      []string
	train         []string
	checkpointSig syscall.Signal
	parsedDialect launch.Dialect
	parsedMode    launch.Mode
	parsedBind    launch.GPUBind
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	c := config{markWait: time.Second}
	fs := newFlagSet(&c, getenv, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, printedError{err} // the flag set printed it, with the usage
	}
	c.train = fs.Args()
	if len(c.train) == 0 {
		return c, fmt.Errorf("no training command given after the flags")
	}
	var err error
	if c.parsedDialect, err = launch.ParseDialect(c.dialect); err != nil {
		return c, fmt.Errorf("--dialect: %w", err)
	}
	if c.parsedMode, err = launch.ParseMode(c.mode); err != nil {
		return c, fmt.Errorf("--launcher: %w", err)
	}
	if c.parsedBind, err = launch.ParseGPUBind(c.gpuBind); err != nil {
		return c, fmt.Errorf("--gpu-bind: %w", err)
	}
	if err := launch.CheckSrunExtra(c.srunArgs); err != nil {
		return c, err
	}
	if err := launch.CheckWrappers(c.train); err != nil {
		return c, err
	}
	if len(c.srunArgs) > 0 && c.parsedMode == launch.ModeDirect {
		return c, fmt.Errorf("--srun-arg=%q with --launcher direct, which runs no srun step", c.srunArgs[0])
	}
	if c.checkpointSig, err = parseSignal(c.signal); err != nil {
		return c, err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--cpus-per-task", c.cpusPerTask}, {"--global-batch", c.globalBatch}, {"--report-skip", c.reportSkip}} {
		if f.v < 0 {
			return c, fmt.Errorf("%s=%d must be >= 0", f.name, f.v)
		}
	}
	if c.profileIters != 0 && c.profileIters <= c.reportSkip {
		return c, fmt.Errorf("--profile-iters=%d must be 0 or above --report-skip=%d (the warm-up)", c.profileIters, c.reportSkip)
	}
	if c.profileTimeout <= 0 || c.profileRunTimeout <= 0 {
		return c, fmt.Errorf("--profile-timeout=%s and --profile-run-timeout=%s must be positive", c.profileTimeout, c.profileRunTimeout)
	}
	if c.planWait < 0 {
		return c, fmt.Errorf("--plan-wait=%s must be >= 0", c.planWait)
	}
	return c, nil
}

// newFlagSet defines rubick-srun's flags on c. launch.FromScript reads
// them off a batch script too: launch.SrunBoolFlag must name its flags
// that take no value.
func newFlagSet(c *config, getenv func(string) string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("rubick-srun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.plan, "plan", "", "compact plan to run, e.g. dp4.tp2.pp1.mb2.a1.z0+gc (default: the job's rubick tag)")
	fs.StringVar(&c.dialect, "dialect", "auto", "launch line dialect: auto, megatron, megatron-deepspeed or deepspeed")
	fs.StringVar(&c.mode, "launcher", "auto", "how srun starts the trainer: gpu (one task per GPU), node (one torchrun/deepspeed/accelerate launcher per node), direct (no srun), auto (node when the line starts with torchrun, deepspeed or accelerate launch, else gpu)")
	fs.StringVar(&c.gpuBind, "gpu-bind", string(launch.BindShared), "GPUs per task: shared (--gres=gpu:N, every task sees its node's GPUs) or per-task (--gpus-per-task=1)")
	fs.IntVar(&c.cpusPerTask, "cpus-per-task", 0, "CPUs per task (default: the CPUs of the job's node with the fewest, SLURM_JOB_CPUS_PER_NODE, divided among its tasks)")
	fs.IntVar(&c.globalBatch, "global-batch", 0, "global batch the job must keep (default: from the launch line or its DeepSpeed config)")
	fs.StringVar(&c.signal, "signal", checkpointSignal(getenv), "checkpoint signal forwarded to the step (SIGTERM and SIGINT are forwarded too); it must be the site's checkpoint.signal (default $"+launch.CheckpointSignalEnv+", else "+launch.DefaultCheckpointSignal+")")
	fs.StringVar(&c.scontrol, "scontrol", "scontrol", "scontrol program used to read the job's plan")
	fs.StringVar(&c.squeue, "squeue", "squeue", "squeue program used to read the job's comment before it requeues itself")
	fs.StringVar(&c.srun, "srun", "srun", "srun program")
	fs.StringVar(&c.scancel, "scancel", "scancel", "scancel program used to pass SIGTERM, SIGINT, SIGHUP and SIGQUIT on to the step's tasks (srun kills the tasks at SIGTERM, SIGHUP and SIGQUIT, and only prints their state at a first SIGINT)")
	fs.StringVar(&c.stateDir, "state-dir", "", "job-private directory for the rewritten DeepSpeed config, the profiling record and the last refused plan, visible on every node of the job; the records an earlier job of the same ID left there are moved aside into earlier-sub-N (default: $SLURM_SUBMIT_DIR/.rubick/$SLURM_JOB_ID)")
	fs.StringVar(&c.checkpointDir, "checkpoint-dir", "", "pass --save DIR to a Megatron line that has no --save, and --load DIR unless the line loads from elsewhere and the job is a new one ($SLURM_RESTART_COUNT unset or 0) or DIR holds no checkpoint yet (default: leave the line alone)")
	fs.BoolVar(&c.ensureLoad, "ensure-load", true, "add --load X to a Megatron line that has --save X and no --load, and load X instead of the line's --load in a restarted job ($SLURM_RESTART_COUNT above 0) once X holds a checkpoint, so a requeued job resumes")
	fs.StringVar(&c.modelType, "model-type", "", "model type reported with samples (default: the job's rubick tag)")
	fs.StringVar(&c.reportURL, "report-url", getenv("RUBICK_REPORT_URL"), "rubickd samples endpoint (default $RUBICK_REPORT_URL; empty: no reporting)")
	fs.StringVar(&c.munge, "munge", "munge", "munge program used to sign samples")
	fs.StringVar(&c.mungeSock, "munge-socket", "", "munged socket (default: munge's own default)")
	fs.IntVar(&c.reportSkip, "report-skip", 1, "iteration-time lines skipped per run before reporting (warm-up)")
	fs.BoolVar(&c.requeue, "requeue-on-checkpoint", true, "after the checkpoint signal, requeue the job held (scontrol requeuehold $SLURM_JOB_ID) so rubickd restarts it with its new plan")
	fs.BoolVar(&c.requeueMail, "requeue-mail", false, "keep the job's BEGIN and REQUEUE mails when rubick-srun requeues a job whose launch line cannot run its plan (rubickd's checkpoint.requeue_mail is the same choice for its own restarts)")
	fs.IntVar(&c.profileIters, "profile-iters", launch.DefaultProfileIters, "iterations of each profiling run, the first --report-skip of them warm-up (0: never profile)")
	fs.DurationVar(&c.profileTimeout, "profile-timeout", 5*time.Minute, "time bound of the whole profiling phase")
	fs.DurationVar(&c.profileRunTimeout, "profile-run-timeout", 2*time.Minute, "time bound of one profiling run")
	fs.DurationVar(&c.planWait, "plan-wait", defaultPlanWait, "after a profiling phase whose end rubickd was told of, the longest wait for the plan rubickd sets once it has fitted the model type; without one by then, the training run starts on the plan the job has (0: no wait)")
	fs.BoolVar(&c.dryRun, "dry-run", false, "print the rewritten command and DeepSpeed config, run nothing")
	fs.BoolVar(&c.asTask, asTaskFlag, false, "run as one task of a per-GPU step, as rubick-srun starts them: set RANK, LOCAL_RANK and GROUP_RANK from SLURM_PROCID, SLURM_LOCALID and SLURM_NODEID, then exec the command")
	fs.IntVar(&c.localRankAt, localRankAtFlag, -1, "with --as-task, insert --local_rank=SLURM_LOCALID at this index of the command, as the deepspeed launcher passes it (-1: none)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Func("srun-arg", "an srun option of the job's own for every step, e.g. a container's --srun-arg=--container-image=IMAGE; repeat it for several (not those rubick-srun sets from the plan: nodes, tasks, GPUs, CPUs, binding, --export)", func(v string) error {
		c.srunArgs = append(c.srunArgs, v)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: rubick-srun [flags] [--] <training command...>\n\nflags:")
		fs.PrintDefaults()
	}
	return fs
}

// checkpointSignal is --signal's default: the site's checkpoint.signal
// where the site exports it, else rubickd's default.
func checkpointSignal(getenv func(string) string) string {
	if s := getenv(launch.CheckpointSignalEnv); s != "" {
		return s
	}
	return launch.DefaultCheckpointSignal
}

// checkSiteSignal warns when the site's checkpoint signal, where it
// exports it, is not ckpt: rubickd's signal before a restart would not
// have this job checkpoint and requeue itself.
func checkSiteSignal(ckpt syscall.Signal, getenv func(string) string, log *slog.Logger) {
	site := getenv(launch.CheckpointSignalEnv)
	if site == "" {
		return
	}
	s, err := parseSignal(site)
	switch {
	case err != nil:
		log.Warn("the site's checkpoint signal is unreadable; not checked against --signal", "env", launch.CheckpointSignalEnv, "err", err)
	case s != ckpt:
		log.Warn("--signal is not the site's checkpoint signal: at a restart, rubickd sends the site's, which this job does not "+
			"checkpoint and requeue itself on; pass the site's to --signal", "signal", ckpt, "site", s, "env", launch.CheckpointSignalEnv)
	}
}

// printedError is a flag error the flag set has already written out.
type printedError struct{ error }

func (e printedError) Unwrap() error { return e.error }

func parseSignal(s string) (syscall.Signal, error) {
	n, err := launch.SignalNumber(s)
	if err != nil {
		return 0, fmt.Errorf("--signal=%q: %w", s, err)
	}
	return syscall.Signal(n), nil
}

func newLogger(level string, w io.Writer, jobID string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level=%q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})).With("prog", "rubick-srun", "job", jobID), nil
}

// runWith runs rubick-srun; gpuMem reads the memory of the node's GPUs
// (GiB), which the profiling phase checks its runs against.
func runWith(ctx context.Context, args []string, getenv func(string) string, gpuMem func(context.Context) (float64, error),
	stdout, stderr io.Writer) int {
	// The step's stderr is copied by a goroutine while rubick-srun logs to
	// the same writer.
	stderr = &lockedWriter{w: stderr}
	cfg, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		if !errors.As(err, new(printedError)) {
			fmt.Fprintln(stderr, "rubick-srun:", err)
		}
		return exitUsage
	}
	if cfg.asTask {
		return runTask(cfg.train, cfg.localRankAt, cfg.parsedBind, getenv, stderr)
	}
	cfg.self = "rubick-srun" // found on PATH, as on every node
	if self, err := os.Executable(); err == nil {
		cfg.self = self
	}
	jobID := getenv("SLURM_JOB_ID")
	cfg.jobRef = jobID
	a, aerr := strconv.ParseUint(getenv("SLURM_ARRAY_JOB_ID"), 10, 64)
	k, kerr := strconv.ParseUint(getenv("SLURM_ARRAY_TASK_ID"), 10, 64)
	if jobID != "" && aerr == nil && kerr == nil {
		cfg.jobRef = fmt.Sprintf("%d_%d", a, k)
	}
	log, err := newLogger(cfg.logLevel, stderr, jobID)
	if err != nil {
		fmt.Fprintln(stderr, "rubick-srun:", err)
		return exitUsage
	}
	alloc, err := allocFromEnv(getenv)
	if err != nil {
		log.Error("bad Slurm environment", "err", err)
		return exitUsage
	}
	checkSiteSignal(cfg.checkpointSig, getenv, log)
	// Go ignores a signal no one subscribed to: a checkpoint signal that
	// came before the step starts (rubickd restarting the job while this
	// reads its plan or profiles) would be lost. Nothing has trained yet,
	// so launchStep requeues the job as after a checkpoint.
	early := make(chan os.Signal, 1)
	signal.Notify(early, cfg.checkpointSig)
	defer signal.Stop(early)

	plan, shown, err := jobPlan(ctx, cfg, jobID, log)
	tag := shown.tag
	if err != nil {
		log.Error("bad plan", "err", err)
		return exitUsage
	}
	modelType := cfg.modelType
	if modelType == "" && tag != nil {
		modelType = tag.ModelType
	}
	stateDir := stateDirFor(cfg, jobID, getenv)
	// Before anything reads the directory: it may be an earlier job's of
	// the same ID.
	ident := jobIdentity(tag, log)
	if err := ownStateDir(stateDir, ident, cfg.dryRun, log); err != nil {
		log.Error("the state directory holds an earlier job's records of the same ID, which cannot be moved aside; this job would take them for its own",
			"err", err)
		return exitLaunch
	}

	// lined: for a job rubickd started without a plan, the plan its
	// unchanged launch line expresses on the allocation, which its samples
	// and launch notice name; nil when there is none. A profiling job's
	// phase reports its own runs.
	var lined *model.Plan
	var linedStep step
	readLine := func() {
		p, st, err := lineStep(cfg, alloc, stateDir)
		if err != nil {
			log.Info("no samples reported: the plan the launch line expresses on the allocation is unknown", "err", err)
			return
		}
		lined, linedStep = &p, st
	}
	if plan == nil && startedUnplanned(tag) && !profileTag(tag) && !cfg.dryRun {
		readLine()
	}

	var rep *report.Reporter
	var res *resumes
	if !cfg.dryRun && (plan != nil || lined != nil || wantProfile(cfg, tag)) {
		res = watchResumes(ctx, log)
		rep = report.NewReporter(ctx, report.ReporterConfig{URL: cfg.reportURL, Logger: log,
			Encoder: report.Munge{MungePath: cfg.munge, Socket: cfg.mungeSock}})
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			log.Debug("samples reported", "count", rep.Close(cctx))
		}()
	}
	// profiled: the job's profiling phase is over, now or at an earlier
	// start; the launch notice tells rubickd.
	profiled := false
	if wantProfile(cfg, tag) {
		// A phase an earlier start completed is not repeated: its runs
		// need no check of the GPUs' memory, which starts NVML.
		done := !cfg.dryRun && phaseDone(stateDir)
		var memOf func() profileMemory
		if !done {
			memOf = func() profileMemory { return profileMemoryOf(ctx, shown, gpuMem, getenv, alloc, log) }
		}
		ph, err := newProfilePhase(cfg, plan, alloc, stateDir, memOf)
		if err == nil && len(ph.leftOut) > 0 {
			log.Info("profiling runs left out: predicted not to fit in GPU memory", "gpu_mem_gb", ph.mem.gpuGB,
				"headroom", launch.ProfileMemoryHeadroom, "runs", strings.Join(ph.leftOut, ", "))
		}
		if err == nil && len(ph.leftOutHost) > 0 {
			log.Info("profiling runs left out: predicted not to fit in the job's memory on the node", "host_mem_gb", ph.mem.hostGB,
				"headroom", launch.ProfileHostMemoryHeadroom, "runs", strings.Join(ph.leftOutHost, ", "))
		}
		if err == nil && len(ph.leftOutCPUs) > 0 {
			// The user's to mend: too few runs leave the type unfitted.
			log.Warn("profiling runs left out: their steps start more tasks (one per GPU) than the job has CPUs on the node; submit with at least one CPU per GPU (--cpus-per-task)",
				"cpus", alloc.CPUsOnNode, "runs", strings.Join(ph.leftOutCPUs, ", "))
		}
		switch {
		case err != nil:
			log.Warn("profiling phase skipped: no configurations to run", "err", err)
		case cfg.dryRun:
			ph.getenv = getenv
			ph.printDry(stdout)
		default:
			ph.jobID, ph.modelType, ph.getenv, ph.rep, ph.stdout, ph.stderr, ph.log = jobID, modelType, getenv, rep, stdout, stderr, log
			ph.resumes, ph.early = res, early
			if done {
				log.Info("profiling phase already done for this job; not repeated", "record", filepath.Join(stateDir, profileFile))
				profiled = true
				break
			}
			claimStateDir(stateDir, ident, log)
			if cfg.profileTimeout > launch.ProfilingBound-launch.ProfilingSetup {
				log.Warn("the profiling phase may outlast the time rubickd waits on it; another job of the model type may then profile it too",
					"profile_timeout", cfg.profileTimeout, "rubickd_waits", launch.ProfilingBound.String()+" from the job's start")
			}
			if sig := ph.run(ctx); sig != 0 {
				return untrained(ctx, cfg, jobID, sig, log)
			}
			profiled = true
			if cfg.plan == "" && jobID != "" {
				plan = rereadPlan(ctx, cfg, jobID, plan, log)
			}
		}
	}

	// noticed: the launch notice went out, naming the plan the job trains
	// on.
	noticed := false
	if profiled && jobID != "" && cfg.reportURL != "" {
		// rubickd fits the model type once it hears the phase is over, and
		// then sets the job's plan: the training run waits for it a while
		// rather than run the line as it is while the tag says otherwise.
		noticed = true
		if phaseOver(ctx, cfg, jobID, modelType, plan, rep, log) && cfg.planWait > 0 {
			p, sig := awaitPlan(ctx, cfg, early, log)
			if sig != 0 {
				return untrained(ctx, cfg, jobID, sig, log)
			}
			if p != nil && (plan == nil || *p != *plan) {
				plan, noticed = p, false // its own notice names it
			}
		}
	}

	if plan == nil && profiled && lined == nil && !cfg.dryRun {
		// No plan came after the phase: the line runs as it is, and its
		// samples say what it runs, which rubickd prices the job by once
		// it has fitted the type and until the job's next start.
		readLine()
	}

	var st step
	if plan == nil {
		switch {
		case profileTag(tag) && lined != nil:
			log.Info("no plan for this job yet; running the command unchanged, its samples reported under the plan it expresses",
				"plan", lined.String())
		case profileTag(tag):
			log.Info("no plan for this job yet; running the command unchanged")
		case lined != nil:
			log.Info("rubickd started the job without a plan; running the command unchanged, its samples reported under the plan it expresses",
				"plan", lined.String())
		case startedUnplanned(tag):
			log.Info("rubickd started the job without a plan; running the command unchanged")
		default:
			log.Warn("no plan for this job; running the command unchanged")
		}
		st = unchangedStep(cfg)
		if lined != nil {
			st = linedStep
		}
	} else if st, err = planStep(cfg, *plan, alloc, stateDir, getenv); errors.Is(err, launch.ErrUnknownDialect) && cfg.parsedDialect == launch.DialectAuto {
		log.Warn("launch line not recognised; running it unchanged (pass --dialect to rewrite it)", "err", err)
		st = unchangedStep(cfg)
	} else if (errors.Is(err, launch.ErrUnsupported) || errors.Is(err, launch.ErrGlobalBatch)) && !cfg.dryRun && jobID != "" && cfg.plan == "" {
		// rubickd chose the plan (a --plan is the user's own mistake, below):
		// one the line cannot express, or one of another global batch than
		// the line trains with (rubickd planned with its model type's).
		claimStateDir(stateDir, ident, log)
		return refuse(ctx, cfg, jobID, modelType, *plan, err, stateDir, early, log)
	} else if err != nil {
		log.Error("cannot run the plan", "plan", plan.String(), "err", err)
		return exitUsage
	}

	if cfg.dryRun {
		fmt.Fprintln(stdout, shellQuote(st.argv))
		if st.config != nil {
			fmt.Fprintf(stdout, "# %s (rewritten from %s):\n%s", st.config.Path, st.config.Source, st.config.Data)
		}
		return 0
	}
	if st.config != nil {
		claimStateDir(stateDir, ident, log)
		if err := writeFileAtomic(st.config.Path, st.config.Data); err != nil {
			log.Error("cannot write the rewritten DeepSpeed config", "err", err)
			return exitLaunch
		}
	}
	// reported: the plan the samples and the launch notice name.
	reported := plan
	if plan == nil {
		reported = lined
	}
	var samples *sampler
	if reported != nil {
		if err := launch.CheckSamples(cfg.train, launch.Options{Dialect: cfg.parsedDialect}); err != nil {
			log.Warn("this job reports no iteration times", "err", err)
		}
		samples = &sampler{rep: rep, skip: cfg.reportSkip, parser: st.parser, resumes: res.lines(),
			base: report.Sample{Version: report.SampleVersion, JobID: jobID, ModelType: modelType, Plan: reported.String(),
				Placement: st.placement.String(), CPUs: st.cpus}}
	}
	if reported != nil && jobID != "" && cfg.reportURL != "" && !noticed {
		// Tell rubickd what this line cannot run before it plans the job
		// again; a slow rubickd delays the trainer by launchNoticeWait at
		// most.
		lctx, cancel := context.WithTimeout(ctx, launchNoticeWait)
		_ = sendLaunch(lctx, cfg, jobID, modelType, reported, false, false, log)
		cancel()
	}
	// The plan in so many words: the argv shows it only as flags.
	attrs := []any{}
	if reported != nil {
		attrs = append(attrs, "plan", reported.String())
	}
	if st.placement.GPUs() > 0 {
		attrs = append(attrs, "placement", st.placement.String())
	}
	if st.cpus > 0 {
		attrs = append(attrs, "cpus", st.cpus)
	}
	log.Info("launching", append(attrs, "argv", shellQuote(st.argv))...)
	status, checkpointed := launchStep(ctx, st, cfg.checkpointSig, early, samples, stdout, stderr, log)
	if checkpointed && cfg.requeue && jobID != "" {
		_ = requeueCheckpointed(ctx, cfg, tag, log)
	}
	return status
}

// allocFromEnv reads the job's allocation from the Slurm environment; out
// of a job it is one node with unknown GPUs and CPUs.
func allocFromEnv(getenv func(string) string) (launch.Alloc, error) {
	a := launch.Alloc{Nodes: 1}
	for _, f := range []struct {
		key string
		dst *int
	}{{"SLURM_JOB_NUM_NODES", &a.Nodes}, {"SLURM_GPUS_ON_NODE", &a.GPUsOnNode}, {"SLURM_CPUS_ON_NODE", &a.CPUsOnNode}} {
		v := getenv(f.key)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return a, fmt.Errorf("%s=%q is not a non-negative integer", f.key, v)
		}
		*f.dst = n
	}
	if v := getenv("SLURM_JOB_CPUS_PER_NODE"); v != "" {
		n, err := minCPUsPerNode(v, a.Nodes)
		if err != nil {
			return a, err
		}
		a.MinCPUsOnNode = n
	}
	return a, nil
}

// minCPUsPerNode reads SLURM_JOB_CPUS_PER_NODE, the CPUs of each of the
// job's nodes ("72(x2),36": two nodes of 72, then one of 36), and returns
// the fewest. On nodes of different sizes (whole nodes of two kinds, say)
// the batch host's SLURM_CPUS_ON_NODE is not the others'.
func minCPUsPerNode(v string, nodes int) (int, error) {
	least, count := 0, 0
	for _, f := range strings.Split(v, ",") {
		c, times := f, "1"
		if head, rest, ok := strings.Cut(f, "(x"); ok {
			c, times = head, strings.TrimSuffix(rest, ")")
			if times == rest {
				return 0, fmt.Errorf("SLURM_JOB_CPUS_PER_NODE=%q: %q is not CPUs(xNODES)", v, f)
			}
		}
		n, err1 := strconv.Atoi(c)
		k, err2 := strconv.Atoi(times)
		if err1 != nil || err2 != nil || n < 0 || k < 1 {
			return 0, fmt.Errorf("SLURM_JOB_CPUS_PER_NODE=%q: %q is not CPUs or CPUs(xNODES)", v, f)
		}
		if count == 0 || n < least {
			least = n
		}
		count += k
	}
	if count != nodes {
		return 0, fmt.Errorf("SLURM_JOB_CPUS_PER_NODE=%q lists %d nodes but SLURM_JOB_NUM_NODES=%d", v, count, nodes)
	}
	return least, nil
}

// jobPlan returns the plan to run: --plan, else the job's rubick tag; nil
// when there is none (out of a job, no tag, or scontrol failing). shown is
// what scontrol says of the job, empty with --plan.
func jobPlan(ctx context.Context, cfg config, jobID string, log *slog.Logger) (*model.Plan, shownJob, error) {
	if cfg.plan != "" {
		p, err := model.ParsePlan(cfg.plan)
		if err != nil {
			return nil, shownJob{}, fmt.Errorf("--plan: %w", err)
		}
		return &p, shownJob{}, nil
	}
	if jobID == "" {
		log.Warn("not in a Slurm job (SLURM_JOB_ID unset) and no --plan")
		return nil, shownJob{}, nil
	}
	shown, err := showJob(ctx, cfg.scontrol, cfg.jobRef)
	if err != nil {
		log.Warn("cannot read the job's rubick tag", "err", err)
		return nil, shownJob{}, nil
	}
	tag := shown.tag
	if tag == nil || tag.Plan == "" {
		switch {
		case profileTag(tag):
			// Started to profile its model type, which has no fit yet.
			log.Info("no plan yet: the job profiles its model type first")
		case startedUnplanned(tag):
			// rubickd's own choice (another job profiles its model type,
			// say): runWith says what runs.
		default:
			log.Warn("the job's AdminComment has no rubick plan")
		}
		return nil, shown, nil
	}
	p, err := model.ParsePlan(tag.Plan)
	if err != nil {
		return nil, shown, fmt.Errorf("AdminComment of job %s: %w", jobID, err)
	}
	return &p, shown, nil
}

// startedUnplanned reports whether tag, a job's rubick tag without a plan,
// is rubickd's: it names the job's model type, and rubickd started the job
// without a plan on purpose (another job profiles its unfitted model type,
// or no plan fits the job).
func startedUnplanned(tag *slurm.Tag) bool { return tag != nil && tag.ModelType != "" }

// lineStep is the unchanged step of a job without a plan, set up to report
// its samples: it returns the plan the launch line expresses on the job's
// allocation (launch.Inspect), and the step with the parser of the line's
// dialect, the placement (the processes its launcher starts, else the
// allocation's GPUs) and the allocation's CPUs. An error says why the
// line's plan is unknown.
func lineStep(cfg config, alloc launch.Alloc, stateDir string) (model.Plan, step, error) {
	if alloc.GPUsOnNode == 0 {
		return model.Plan{}, step{}, errors.New("SLURM_GPUS_ON_NODE is unset: the GPUs the line runs on are unknown")
	}
	// A per-node launcher may start fewer processes than the allocation
	// has GPUs ("torchrun --nproc_per_node 4" on 8): the line trains on
	// those.
	nodes, perNode := alloc.Nodes, alloc.GPUsOnNode
	if n, g, ok := launch.LauncherWorld(cfg.train); ok && n <= nodes && g <= perNode {
		nodes, perNode = n, g
	}
	opts := launch.Options{Dialect: cfg.parsedDialect, GlobalBatch: cfg.globalBatch}
	p, _, err := launch.Inspect(cfg.train, nodes*perNode, opts)
	if err != nil {
		return model.Plan{}, step{}, err
	}
	// The line read as if rewritten to the plan it expresses gives the
	// parser a planned run's would have; nothing rewritten runs.
	opts.ConfigDir = stateDir
	res, err := launch.Rewrite(cfg.train, p, opts)
	if err != nil {
		return model.Plan{}, step{}, fmt.Errorf("plan %s read from the line: %w", p, err)
	}
	st := unchangedStep(cfg)
	st.parser = stepParser(res)
	st.placement = make(model.Placement, nodes)
	for i := range st.placement {
		st.placement[i] = perNode
	}
	// As planStep counts a step without --cpus-per-task of its own.
	st.cpus = alloc.CPUsOnNode * alloc.Nodes
	return p, st, nil
}

// shownJob is what rubick-srun reads of its job in "scontrol show job".
type shownJob struct {
	tag *slurm.Tag
	// memPerTres is the job's MemPerTres ("gres:gpu:MB"; "" when it asks
	// for memory per node or per CPU): its memory per GPU now, which
	// rubickd may have raised since the submission.
	memPerTres string
}

// readTag reads the job's rubick tag (showJob).
func readTag(ctx context.Context, scontrol, jobID string) (*slurm.Tag, error) {
	s, err := showJob(ctx, scontrol, jobID)
	return s.tag, err
}

// showJob runs "scontrol show job -o ID" (argv, no shell) and parses the
// rubick tag out of its AdminComment, and the job's MemPerTres.
func showJob(ctx context.Context, scontrol, jobID string) (shownJob, error) {
	if _, err := strconv.ParseUint(strings.Split(jobID, "_")[0], 10, 64); err != nil {
		return shownJob{}, fmt.Errorf("SLURM_JOB_ID=%q is not a job id", jobID)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, scontrol, "show", "job", "-o", jobID)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return shownJob{}, fmt.Errorf("%s show job -o %s: %w: %s", scontrol, jobID, err, strings.TrimSpace(errOut.String()))
	}
	tag, err := slurm.TagFromAdminComment(adminComment(out.String()))
	if err != nil {
		return shownJob{}, err
	}
	s := shownJob{tag: tag}
	// The last one: the user's Comment, printed before it (22.05 and
	// 24.11), may hold anything.
	for _, f := range strings.Fields(out.String()) {
		if v, ok := strings.CutPrefix(f, "MemPerTres="); ok {
			s.memPerTres = v
		}
	}
	return s, nil
}

// adminComment extracts the AdminComment value from one-line scontrol
// output. The value may hold spaces ("rubick:v1 model=gpt2 ..."); it ends
// where the next scontrol field ("Key=", capitalised) begins.
func adminComment(line string) string {
	fields := strings.Fields(line)
	for i, f := range fields {
		v, ok := strings.CutPrefix(f, "AdminComment=")
		if !ok {
			continue
		}
		parts := []string{v}
		for _, g := range fields[i+1:] {
			if k, _, ok := strings.Cut(g, "="); ok && k != "" && k[0] >= 'A' && k[0] <= 'Z' {
				break
			}
			parts = append(parts, g)
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// step is what rubick-srun runs.
type step struct {
	argv []string
	env  []string // added to the environment
	// scancel and job signal the tasks of an srun step (scancel
	// --signal=SIG job) with the signals srun does not pass on as they
	// are (srunKept); "" for a step without srun.
	scancel, job string
	config       *launch.Config
	// parser reads the step's iteration times (stepParser).
	parser    report.Parser
	placement model.Placement
	// cpus is the CPUs the step runs with over all its nodes, as its
	// samples report them; 0 when unknown.
	cpus int
}

func unchangedStep(cfg config) step {
	if cfg.parsedMode == launch.ModeDirect {
		return step{argv: cfg.train}
	}
	st := step{argv: slices.Concat([]string{cfg.srun, launch.ExportAll}, cfg.srunArgs, cfg.train)}
	st.signalsThroughScancel(cfg)
	return st
}

// signalsThroughScancel has the signals srun does not pass on reach the
// tasks of st, an srun step of cfg's job, through scancel.
func (st *step) signalsThroughScancel(cfg config) {
	if cfg.jobRef != "" {
		st.scancel, st.job = cfg.scancel, cfg.jobRef
	}
}

// stateDirFor is the job-private directory for rewritten configs and the
// profiling record.
func stateDirFor(cfg config, jobID string, getenv func(string) string) string {
	if cfg.stateDir != "" {
		return cfg.stateDir
	}
	base := getenv("SLURM_SUBMIT_DIR")
	if base == "" {
		base = "."
	}
	id := jobID
	if id == "" {
		id = "nojob"
	}
	return filepath.Join(base, ".rubick", id)
}

func planStep(cfg config, plan model.Plan, alloc launch.Alloc, stateDir string, getenv func(string) string) (step, error) {
	train, mode, dialect := cfg.train, cfg.parsedMode, cfg.parsedDialect
	var taskArgs []string
	if launch.DetectLauncher(train) == launch.LauncherDeepSpeed && mode == launch.ModeAuto && alloc.Nodes > 1 {
		// The deepspeed launcher reaches other nodes over ssh, not srun:
		// srun starts its workers once per GPU instead.
		u, err := launch.WithoutLauncher(train, workerPython(train))
		if err != nil {
			return step{}, err
		}
		if dialect == launch.DialectAuto {
			// As the whole line reads: the launcher says DeepSpeed.
			if dialect, err = launch.Detect(train); err != nil {
				return step{}, err
			}
		}
		train, mode = u.Argv, launch.ModePerGPU
		if u.LocalRankAt >= 0 {
			taskArgs = []string{"--" + localRankAtFlag, strconv.Itoa(u.LocalRankAt)}
		}
	}
	geo, err := launch.PlanGeometry(plan, alloc, launch.GeometryOptions{Mode: mode, Bind: cfg.parsedBind,
		CPUsPerTask: cfg.cpusPerTask, Launcher: launch.DetectLauncher(train), SrunExtra: cfg.srunArgs})
	if err != nil {
		return step{}, err
	}
	opts := launch.Options{Dialect: dialect, GlobalBatch: cfg.globalBatch, ConfigDir: stateDir,
		EnsureLoad: cfg.ensureLoad, CheckpointDir: cfg.checkpointDir,
		Saved: func(dir string) bool { return restarted(getenv) && checkpointSaved(dir) }}
	dist := distributedFor(getenv, getenv("SLURM_JOB_ID"), firstNode(getenv))
	if geo.Mode == launch.ModePerNode || geo.Mode == launch.ModeDirect {
		// Direct, a launcher runs on the batch host alone (geo.Nodes is 1).
		opts.Nodes, opts.GPUsPerNode = geo.Nodes, geo.GPUsPerNode
		opts.Rendezvous, opts.RendezvousID = dist.rendezvous(), getenv("SLURM_JOB_ID")
	}
	res, err := launch.Rewrite(train, plan, opts)
	if err != nil {
		return step{}, err
	}
	st := step{argv: res.Argv, config: res.Config, parser: stepParser(res), placement: geo.Placement(),
		env: []string{"RUBICK_PLAN=" + plan.String(), "RUBICK_PLACEMENT=" + geo.Placement().String()}}
	dist.wrap(&st, geo, plan, cfg.self, getenv, taskArgs...)
	if geo.Mode != launch.ModeDirect {
		st.argv = geo.Command(cfg.srun, st.argv)
		st.signalsThroughScancel(cfg)
	}
	// srun gives each task its --cpus-per-task, which need not divide the
	// node's CPUs evenly or take them all: a sample priced with CPUs the
	// tasks never had would teach the fit a wrong CPU Adam time. Without
	// srun the trainer has the batch step's CPUs.
	st.cpus = alloc.CPUsOnNode * alloc.Nodes
	if geo.Mode != launch.ModeDirect && geo.CPUsPerTask > 0 {
		st.cpus = geo.CPUsPerTask * geo.Tasks()
	}
	if st.cpus > 0 {
		st.env = append(st.env, "RUBICK_CPUS="+strconv.Itoa(st.cpus))
	}
	// DeepSpeed's CPU Adam sizes its thread pool from OMP_NUM_THREADS.
	if plan.Offload && geo.CPUsPerTask > 0 && getenv("OMP_NUM_THREADS") == "" {
		st.env = append(st.env, "OMP_NUM_THREADS="+strconv.Itoa(geo.CPUsPerTask))
	}
	return st, nil
}

// checkpointTrackers name the files a Megatron checkpoint directory holds
// once a checkpoint is saved in it: Megatron's tracker, which
// Megatron-DeepSpeed writes too, and DeepSpeed's own, from which
// Megatron-DeepSpeed loads.
var checkpointTrackers = []string{"latest_checkpointed_iteration.txt", "latest"}

// restarted reports whether Slurm restarted the job (requeued it, as
// rubickd does for a new plan): only then is a checkpoint in the directory
// the line saves to this job's. A new submission whose directory holds an
// older job's checkpoint starts where its line says, as Megatron would.
func restarted(getenv func(string) string) bool {
	n, err := strconv.Atoi(getenv("SLURM_RESTART_COUNT"))
	return err == nil && n > 0
}

// checkpointSaved reports whether dir, where the line saves (its --save or
// --checkpoint-dir; "" for none), holds a saved checkpoint: a restarted
// job resumes from it.
func checkpointSaved(dir string) bool {
	if dir == "" {
		return false
	}
	for _, name := range checkpointTrackers {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// stepParser reads the iteration times of a line rewritten to res. A
// Megatron-DeepSpeed trainer also prints DeepSpeed's steps_per_print line,
// before Megatron's in the same iteration: read too, it would count the
// iteration twice and take the warm-up skip from the first Megatron line,
// whose interval averages in the startup. Megatron's line alone is read.
// A Hugging Face Trainer prints no DeepSpeed lines (accelerate turns them
// off): its progress bar is read.
func stepParser(res launch.Result) report.Parser {
	if res.Dialect == launch.Megatron || res.Dialect == launch.MegatronDeepSpeed {
		return report.Parser{}
	}
	if res.HFTrainer() {
		return report.TrainerBarParser()
	}
	return report.Parser{GlobalBatch: res.GlobalBatch}
}

// launchStep runs the step in its own process group, forwards signals to
// the group, taps its output for iteration times and returns its exit
// status (128+N when a signal N ended it).
func launchStep(ctx context.Context, st step, ckptSig syscall.Signal, early <-chan os.Signal, s *sampler, stdout, stderr io.Writer, log *slog.Logger) (status int, checkpointed bool) {
	cmd := exec.Command(st.argv[0], st.argv[1:]...)
	cmd.Env = append(os.Environ(), st.env...)
	cmd.Stdin = os.Stdin
	outW, errW := stdout, stderr
	if s != nil {
		outTap, errTap := &lineTap{line: s.line}, &lineTap{line: s.line}
		defer outTap.flush()
		defer errTap.flush()
		outW, errW = io.MultiWriter(stdout, outTap), io.MultiWriter(stderr, errTap)
	}
	out, err := connectOutput(cmd, outW, errW)
	if err != nil {
		log.Error("cannot start the step", "argv0", st.argv[0], "err", err)
		return exitLaunch, false
	}
	// Its own group, so a forwarded signal reaches srun and whatever it
	// started locally, and a signal meant for rubick-srun is not delivered
	// twice by the terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, ckptSig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	// Subscribed above, so none is missed between this check and the start.
	select {
	case sig := <-early:
		out.discard()
		log.Info("checkpoint signal before the step started; nothing to checkpoint, not started", "signal", sig)
		return exitCheckpointed, true
	default:
	}
	if err := out.start(cmd); err != nil {
		log.Error("cannot start the step", "argv0", st.argv[0], "err", err)
		return exitLaunch, false
	}
	var gotCkpt atomic.Bool
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case sig := <-sigs:
				if sig == ckptSig {
					gotCkpt.Store(true)
				}
				if name, ok := srunKept[sig.(syscall.Signal)]; ok && st.scancel != "" {
					err := signalTasks(ctx, st.scancel, st.job, name)
					if err == nil {
						log.Info("signalled the step's tasks", "signal", sig)
						continue
					}
					log.Warn("signalling the step's tasks failed; forwarding the signal to srun, which does not pass it on as it is", "signal", sig, "err", err)
				}
				log.Info("forwarding signal to the step", "signal", sig)
				if err := syscall.Kill(-cmd.Process.Pid, sig.(syscall.Signal)); err != nil {
					log.Warn("forwarding signal failed", "signal", sig, "err", err)
				}
			case <-ctx.Done():
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
				return
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	wg.Wait()
	out.finish(cmd, outputDrain, log)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, gotCkpt.Load()
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			log.Info("step ended by a signal", "signal", ws.Signal())
			return 128 + int(ws.Signal()), gotCkpt.Load()
		}
		log.Info("step exited", "status", ee.ExitCode())
		return ee.ExitCode(), gotCkpt.Load()
	}
	log.Error("waiting for the step failed", "err", err)
	return exitLaunch, gotCkpt.Load()
}

// srunKept are the signals srun does not pass on to a step's tasks as
// they are (src/srun/libsrun/srun_job.c, _srun_signal_mgr): at SIGTERM,
// SIGHUP or SIGQUIT it kills them with SIGKILL ("forcing job
// termination"), so a trainer never saves on them; at a first SIGINT it
// only prints their state. It passes the others (USR1, USR2) on.
// Values: scancel's names.
var srunKept = map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGINT: "INT", syscall.SIGHUP: "HUP", syscall.SIGQUIT: "QUIT"}

// signalTasks sends signal name to the tasks of job's steps: scancel
// without --batch or --full signals the steps, not the batch script.
func signalTasks(ctx context.Context, scancel, job, name string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(cctx, scancel, "--signal="+name, job).CombinedOutput(); err != nil {
		return fmt.Errorf("%s --signal=%s %s: %w: %s", scancel, name, job, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// outputDrain bounds the wait for a step's last output once its process
// group is gone: a process that left the group (setsid) may hold it open.
const outputDrain = 10 * time.Second

// stepOutput connects a step's stdout and stderr: an *os.File directly,
// any other writer through a pipe of its own that a goroutine copies.
// exec.Cmd would copy such a writer itself, but its Wait then waits for
// every process that inherited the pipe, a child the step left running
// included, long after the step itself exited.
type stepOutput struct {
	writers []*os.File // the pipes' write ends, this process's copies
	readers []*os.File
	copies  sync.WaitGroup
}

// connectOutput sets cmd's stdout and stderr to stdout and stderr. Start
// cmd with start (or drop it with discard), and call finish after
// cmd.Wait.
func connectOutput(cmd *exec.Cmd, stdout, stderr io.Writer) (*stepOutput, error) {
	o := &stepOutput{}
	var err error
	if cmd.Stdout, err = o.file(stdout); err == nil {
		cmd.Stderr, err = o.file(stderr)
	}
	if err != nil {
		o.discard()
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	return o, nil
}

// start starts cmd, whose output o connects.
func (o *stepOutput) start(cmd *exec.Cmd) error {
	err := cmd.Start()
	o.started()
	if err != nil {
		o.wait(0)
	}
	return err
}

// discard ends the copies of a step that does not start.
func (o *stepOutput) discard() {
	o.started()
	o.wait(0)
}

// finish ends what cmd, exited, left running in its process group
// (killStrays), and waits for its output to be copied, at most d.
func (o *stepOutput) finish(cmd *exec.Cmd, d time.Duration, log *slog.Logger) {
	killStrays(cmd.Process.Pid, log)
	o.wait(d)
}

func (o *stepOutput) file(w io.Writer) (*os.File, error) {
	if f, ok := w.(*os.File); ok {
		return f, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	o.readers, o.writers = append(o.readers, r), append(o.writers, pw)
	o.copies.Add(1)
	go func() {
		defer o.copies.Done()
		_, _ = io.Copy(w, r)
	}()
	return pw, nil
}

// started closes this process's copies of the write ends, so that the
// copies end once the step's processes have all closed theirs.
func (o *stepOutput) started() {
	for _, f := range o.writers {
		f.Close()
	}
	o.writers = nil
}

// wait waits for the output to be copied, at most d; then it stops
// copying.
func (o *stepOutput) wait(d time.Duration) {
	done := make(chan struct{})
	go func() {
		o.copies.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
	for _, r := range o.readers {
		r.Close()
	}
	<-done
}

// strayGrace is how long what a step's leader leaves in its process group
// gets to end by itself. srun leaves a process in every step: the shepherd
// it forks, which exits once it reads srun's last word; killing that at
// once warned of strays after every step.
const strayGrace = time.Second

// killStrays ends what is left of a step's process group (pgid) once its
// leader has exited: processes it started and left running, which would
// outlive rubick-srun and hold the step's GPUs. (Slurm kills those of an
// srun step itself when the step ends.) Those that end within strayGrace
// are not strays.
func killStrays(pgid int, log *slog.Logger) {
	for deadline := time.Now().Add(strayGrace); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !groupRuns(pgid) {
			return
		}
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err == nil {
		log.Warn("the step exited and left processes running; killed them", "pgid", pgid)
	}
}

// groupRuns reports whether process group pgid has a member that has not
// exited. An exited one stays in the group until its parent, init once its
// own has gone, reaps it, which some inits do only now and then; so the
// group's existence (kill 0) is not the answer. Without /proc it is.
func groupRuns(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, e := range entries {
		if e.Name()[0] < '1' || e.Name()[0] > '9' {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // ended since the listing
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) >= 3 && f[0] != "Z" && f[0] != "X" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

// requeueHold puts the job back in the queue, held, after the trainer
// checkpointed on rubickd's signal. Doing it from inside the job (users may
// requeue their own jobs) means a restart survives a rubickd that dies
// between its signal and its own requeuehold: the job waits, held, for the
// next rubickd cycle instead of ending. The job's comment first gets
// slurm.RequeueWord, which tells rubickd the requeue is rubick's to start
// again: one without it waits for its user's release; and the words of
// words (the mail types afterMark quiets, slurm.MailWord). afterMark, if
// any, runs once the mark is written, and not when it fails.
func requeueHold(ctx context.Context, cfg config, why string, log *slog.Logger, afterMark func(), words ...string) error {
	// A busy slurmctld times an update out now and then, and an unmarked
	// requeue waits for a release by hand: the mark is worth a few tries.
	_, err := tries(ctx, cfg.markWait, "marking the requeue as rubick's", log, func() error {
		return markRequeue(ctx, cfg.squeue, cfg.scontrol, cfg.jobRef, words...)
	})
	if err != nil {
		// Requeued all the same: unmarked, the job waits held for its
		// user's scontrol release rather than ends.
		log.Warn("could not mark the requeue as rubick's; the job will wait for scontrol release", "err", err)
	} else if afterMark != nil {
		afterMark()
	}
	if err := scontrolRequeue(ctx, cfg, "requeuehold", why, log); err != nil {
		return err
	}
	log.Info("job requeued held for rubickd to restart it", "after", why)
	return nil
}

// scontrolRequeue runs scontrol verb (requeue or requeuehold) on the job,
// up to markTries times: a job that requeues itself on its own signal
// (--signal=B:USR1@N) has no rubickd to requeue it instead.
func scontrolRequeue(ctx context.Context, cfg config, verb, why string, log *slog.Logger) error {
	n, err := tries(ctx, cfg.markWait, verb, log, func() error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(cctx, cfg.scontrol, verb, cfg.jobRef).CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s %s: %w: %s", cfg.scontrol, verb, cfg.jobRef, err, strings.TrimSpace(string(out)))
		}
		return nil
	})
	if err != nil {
		// rubickd requeues the job itself once its checkpoint wait ends,
		// when it sent the signal.
		log.Warn(verb+" failed", "after", why, "err", err, "tries", n)
	}
	return err
}

// tries runs f up to markTries times, wait and then twice that apart, until
// it succeeds or ctx ends; what names f in the log of each retry. It
// returns how many times f ran and its last error.
func tries(ctx context.Context, wait time.Duration, what string, log *slog.Logger, f func() error) (int, error) {
	n, err := 1, f()
	for ; err != nil && n < markTries && ctx.Err() == nil; n, wait = n+1, 2*wait {
		log.Info(what+" failed; retrying", "err", err, "in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		err = f()
	}
	return n, err
}

// requeueCheckpointed requeues the job after its trainer checkpointed:
// held, for rubickd to restart it, unless Slurm says the job has no rubick
// tag (tag, the one read at the start, is nil). No rubickd releases such a
// job (one outside rubick's partitions that checkpoints on its own
// --signal=B:USR1@N), so held it would wait for its user; it is requeued
// for Slurm to start again.
func requeueCheckpointed(ctx context.Context, cfg config, tag *slurm.Tag, log *slog.Logger) error {
	if slurmEnding(ctx, cfg, whyCheckpoint, log) {
		return nil
	}
	if tag == nil {
		if t, err := readTag(ctx, cfg.scontrol, cfg.jobRef); err == nil && t == nil {
			if err := scontrolRequeue(ctx, cfg, "requeue", whyCheckpoint, log); err != nil {
				return err
			}
			log.Info("job requeued for Slurm to start again: it has no rubick tag", "after", whyCheckpoint)
			return nil
		}
	}
	return requeueHold(ctx, cfg, whyCheckpoint, log, nil)
}

// slurmEnding reports, and logs, that Slurm is ending the job, which is
// then not to be requeued after the checkpoint signal. Where that signal
// is TERM, the one Slurm sends as it ends the job (scancel, its time
// limit, Slurm's own preemption, which requeues the job itself) is taken
// for it too, and a requeue would bring back a job its user cancelled
// (22.05 lab: held, waiting for a release). rubickd signals a running
// job. A state that cannot be read leaves the requeue as it was.
func slurmEnding(ctx context.Context, cfg config, why string, log *slog.Logger) bool {
	state, err := jobState(ctx, cfg.squeue, cfg.jobRef)
	if err != nil || state == "RUNNING" {
		return false
	}
	log.Info("not requeued: Slurm is ending the job, so the signal was not rubickd's", "state", state, "after", why)
	return true
}

// jobState is the job's state as squeue prints it (%T): RUNNING, or
// COMPLETING once Slurm ends it, whatever ends it.
func jobState(ctx context.Context, squeue, jobID string) (string, error) {
	state, err := squeueLine(ctx, squeue, jobID, "%T")
	if err != nil {
		return "", err
	}
	if state = strings.TrimSpace(state); state == "" {
		return "", fmt.Errorf("%s --jobs %s: no state", squeue, jobID)
	}
	return state, nil
}

// squeueLine is the first line squeue prints of the job in format.
func squeueLine(ctx context.Context, squeue, jobID, format string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(cctx, squeue, "--noheader", "--jobs", jobID, "--format", format)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s --jobs %s: %w: %s", squeue, jobID, err, strings.TrimSpace(errOut.String()))
	}
	line, _, _ := strings.Cut(out.String(), "\n")
	return line, nil
}

// markTries bounds the attempts at the requeue's mark, and at the
// requeue (1 s, then 2 s, apart).
const markTries = 3

// markRequeue adds slurm.RequeueWord and the words of words to the job's
// comment, read with squeue (%k prints it as it is; "(null)" for none),
// unless it has them.
func markRequeue(ctx context.Context, squeue, scontrol, jobID string, words ...string) error {
	comment, err := squeueLine(ctx, squeue, jobID, "%k")
	if err != nil {
		return err
	}
	if comment == "(null)" {
		comment = ""
	}
	marked := comment
	for _, w := range append([]string{slurm.RequeueWord}, words...) {
		marked = slurm.WithWord(marked, w)
	}
	if marked == comment {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := exec.CommandContext(cctx, scontrol, "update", "JobId="+jobID, "Comment="+marked).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s update JobId=%s Comment=: %w: %s", scontrol, jobID, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// refusedFile, in the job's state directory, holds the last plan
// rubick-srun refused for the job.
const refusedFile = "refused-plan"

// Why a job requeues itself, for requeueHold's log lines.
const (
	whyCheckpoint = "checkpoint"
	whyRefused    = "plan refused"
)

// launchNoticeWait bounds the launch notice sent before training starts.
const launchNoticeWait = 3 * time.Second

// refuseWait bounds how long a job whose plan its line cannot run waits
// for rubickd's restart signal when it could not requeue itself.
const refuseWait = 10 * time.Minute

// refuse handles a plan the launch line cannot express (a TP plan for a
// plain DeepSpeed script, say): rubick-srun tells rubickd what the line
// cannot run, so every later plan avoids it, and requeues the job held so
// that rubickd starts it again with such a plan. Nothing has run, so
// nothing is lost. When the requeue fails it waits for rubickd, which
// restarts a running job whose plan its line cannot run, as for a
// checkpoint.
func refuse(ctx context.Context, cfg config, jobID, modelType string, plan model.Plan, why error, stateDir string, early <-chan os.Signal, log *slog.Logger) int {
	// The same plan after a refusal means rubickd did not take the notice
	// (an older rubickd, say): going round again would not change it.
	record := filepath.Join(stateDir, refusedFile)
	if prev, err := os.ReadFile(record); err == nil && strings.TrimSpace(string(prev)) == plan.String() {
		log.Error("rubickd gave the job the plan its launch line refused before; the job ends here rather than go round",
			"plan", plan.String(), "why", why)
		return exitUsage
	}
	if err := writeFileAtomic(record, []byte(plan.String()+"\n")); err != nil {
		log.Warn("refusal not recorded; a second one of the same plan would go round again", "record", record, "err", err)
	}
	log.Warn("the launch line cannot run this plan; asking rubickd for another", "plan", plan.String(), "err", why)
	if err := sendLaunch(ctx, cfg, jobID, modelType, &plan, true, false, log); err != nil {
		// Back in the queue, the job would get the same plan again, and
		// again: without the notice nothing tells rubickd otherwise.
		log.Error("could not tell rubickd what the launch line cannot run; the job ends here rather than get the same plan again",
			"plan", plan.String(), "err", err, "why", why)
		return exitUsage
	}
	var words []string
	var afterMark func()
	if cfg.requeue && !cfg.requeueMail {
		if was, quiet := mailQuieting(ctx, cfg, log); quiet != "" {
			// The mark keeps what they were before they change: changed
			// first, a failed mark or a crash before it would lose them.
			words = append(words, slurm.MailWord(was))
			afterMark = func() { quietMail(ctx, cfg, quiet, log) }
		}
	}
	if cfg.requeue && requeueHold(ctx, cfg, whyRefused, log, afterMark, words...) == nil {
		return exitCheckpointed
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, cfg.checkpointSig)
	defer signal.Stop(sigs)
	select {
	case <-sigs:
	case <-early: // signalled before this wait began
	case <-time.After(refuseWait):
		log.Error("no restart came; the job cannot run its plan", "plan", plan.String(), "waited", refuseWait)
		return exitUsage
	case <-ctx.Done():
		log.Error("no restart came; the job cannot run its plan", "plan", plan.String(), "waited", refuseWait)
		return exitUsage
	}
	log.Info("rubickd signalled the restart")
	if cfg.requeue && !slurmEnding(ctx, cfg, whyRefused, log) {
		_ = requeueHold(ctx, cfg, whyRefused, log, afterMark, words...) // rubickd requeues it otherwise
	}
	return exitCheckpointed
}

// mailQuieting reads the job's mail types for rubick-srun's requeue: it
// returns them (was) and what they are without BEGIN and REQUEUE (quiet),
// "" for quiet when there is nothing to take out or they cannot be read.
// The job has not run a step, and Slurm would mail "Requeued" and a second
// "Began" for it; rubickd takes them out before its own restarts too.
func mailQuieting(ctx context.Context, cfg config, log *slog.Logger) (was, quiet string) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, cfg.scontrol, "show", "job", "-o", cfg.jobRef).Output()
	if err != nil {
		log.Warn("mail types not read; Slurm mails this requeue as the job asks", "err", err)
		return "", ""
	}
	quiet, ok := slurm.QuietMailType(string(out))
	if !ok {
		return "", ""
	}
	return slurm.MailTypeOf(string(out)), quiet
}

// quietMail sets the job's mail types to quiet, once the requeue's mark
// keeps what they were (slurm.MailWord) for rubickd to give back once the
// job runs. Users may change their own job's mail types. A failure leaves
// the mails as they are.
func quietMail(ctx context.Context, cfg config, quiet string, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if b, err := exec.CommandContext(cctx, cfg.scontrol, "update", "JobId="+cfg.jobRef, "MailType="+quiet).CombinedOutput(); err != nil {
		log.Warn("mail types unchanged; Slurm mails this requeue", "err", err, "output", strings.TrimSpace(string(b)))
	}
}

// sendLaunch reports what the job's launch line cannot express (and, with
// refused, that it cannot run plan; with profiled, that the job's profiling
// phase is over). plan is the one the job trains on, nil for none. A
// refusal is retried: rubickd must hear it before it plans the job again.
func sendLaunch(ctx context.Context, cfg config, jobID, modelType string, plan *model.Plan, refused, profiled bool, log *slog.Logger) error {
	if cfg.reportURL == "" {
		return errors.New("no samples endpoint configured (--report-url)")
	}
	cannot, d, err := launch.Cannot(cfg.train, launch.Options{Dialect: cfg.parsedDialect})
	if err != nil {
		return err
	}
	gb, err := launch.GlobalBatch(cfg.train, launch.Options{Dialect: cfg.parsedDialect, GlobalBatch: cfg.globalBatch})
	if err != nil {
		return err
	}
	n := report.Launch{JobID: jobID, ModelType: modelType, Dialect: string(d), Cannot: cannot.String(), GlobalBatch: gb,
		Refused: refused, Profiled: profiled, Time: time.Now()}
	if plan != nil {
		n.Plan = plan.String()
		if gb == 0 {
			// A line that states none trains with the plan's, which
			// rubick-srun writes into it; the job keeps it from then on.
			n.GlobalBatch = plan.DP * plan.MicroBatch * plan.Accum
		}
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	enc := report.Munge{MungePath: cfg.munge, Socket: cfg.mungeSock}
	tries := 1
	if refused {
		tries = 3
	}
	for i := range tries {
		if i > 0 {
			select {
			case <-time.After(5 * time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err = report.SendLaunch(ctx, hc, cfg.reportURL, enc, n); err == nil || errors.Is(err, report.ErrUnavailable) {
			break
		}
	}
	if err != nil && !refused {
		// The first sign that reporting is broken (munge, the endpoint):
		// rubickd goes on planning the job from its batch script.
		msg := "launch notice not delivered; the job runs on, planned from its batch script"
		if profiled {
			msg = "launch notice not delivered; the job runs on, and rubickd does not hear that its profiling phase is over"
		}
		log.Warn(msg, "err", err)
	}
	return err
}

// sampler turns iteration-time lines into samples for the reporter: not
// the warm-up's (skip), nor one whose interval spans a suspension.
type sampler struct {
	mu      sync.Mutex
	rep     *report.Reporter
	parser  report.Parser
	skip    int
	base    report.Sample
	resumes resumeMark
}

func (s *sampler) line(line string) {
	m, ok := s.parser.Parse(line)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resumed := s.resumes.spans()
	if s.skip > 0 {
		s.skip--
		return
	}
	if resumed {
		return
	}
	s.rep.Submit(s.base.With(m, time.Now().UTC()))
}

// maxLine bounds the bytes kept for one unfinished line; output is passed
// through whole regardless, only parsing gives up on longer lines.
const maxLine = 64 << 10

// lineTap splits a stream into lines for a line handler (a sampler's). A
// carriage return ends a line as a newline does: a progress bar (tqdm's,
// the Hugging Face Trainer's) redraws itself with carriage returns and no
// newline, so a trainer's log line printed after it would otherwise share
// one line with every redraw before it. A line longer than maxLine is
// dropped whole.
type lineTap struct {
	line func(string)
	buf  []byte
	// long: the line at hand passed maxLine; the rest of it is skipped.
	long bool
}

func (t *lineTap) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			t.add(p)
			break
		}
		t.add(p[:i])
		t.flush()
		p = p[i+1:]
	}
	return n, nil
}

// add appends p to the line at hand, unless that makes it too long to
// parse: then the line is dropped, not cut, since its head and tail
// joined could read as a line the trainer never printed.
func (t *lineTap) add(p []byte) {
	switch {
	case t.long:
	case len(t.buf)+len(p) > maxLine:
		t.buf, t.long = t.buf[:0], true
	default:
		t.buf = append(t.buf, p...)
	}
}

// flush hands the line at hand, if any, to the handler and starts the
// next.
func (t *lineTap) flush() {
	if len(t.buf) > 0 && !t.long {
		t.line(string(t.buf))
	}
	t.buf, t.long = t.buf[:0], false
}

// writeFileAtomic writes data to path (mode 0600, its directory 0700) so
// that no task ever reads a half-written config.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// shellQuote renders argv for humans (logs, --dry-run); it is never run.
func shellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=+./:,@%") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
