package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/slurm"
)

// tagProfile is the rubick tag key by which rubickd asks for a profiling
// phase: the job's model type has no fitted model yet.
const tagProfile = slurm.TagProfile

// profileFile is the phase's record in the state directory.
const profileFile = "profile.json"

// profileRunsDir, in the job's state directory, holds each profiling run's
// rewritten configs.
const profileRunsDir = "profile"

// exitCheckpointed is rubick-srun's status when the checkpoint signal
// arrived during the profiling phase: nothing was trained, so the job's
// checkpoint is as it was (EX_TEMPFAIL, as a checkpointed trainer exits).
const exitCheckpointed = 75

// Outcomes of a profiling run.
const (
	runOK          = "ok"          // measured its iterations (or exited 0 with some)
	runFailed      = "failed"      // could not be built or started, or exited early
	runTimeout     = "timeout"     // hit its own or the phase's time bound
	runSkipped     = "skipped"     // the phase's time ran out before it started
	runInterrupted = "interrupted" // a signal ended the phase
)

// profileRecord is one run in profile.json.
type profileRecord struct {
	Run  int    `json:"run"`
	Of   int    `json:"of"`
	Plan string `json:"plan"`
	launch.ProfileRun
	VisibleDevices string    `json:"visible_devices"`
	Argv           []string  `json:"argv,omitempty"`
	Status         string    `json:"status"`
	ExitStatus     *int      `json:"exit_status,omitempty"`
	Measured       int       `json:"measured"` // iteration times read, warm-up included
	IterS          []float64 `json:"iter_s"`   // reported iteration times
	MedianIterS    float64   `json:"median_iter_s,omitempty"`
	Seconds        float64   `json:"seconds"`
	Error          string    `json:"error,omitempty"`
}

// profileReport is profile.json.
type profileReport struct {
	Version     int    `json:"version"`
	JobID       string `json:"job_id"`
	ModelType   string `json:"model_type"`
	Dialect     string `json:"dialect"`
	GlobalBatch int    `json:"global_batch"`
	GPUsOnNode  int    `json:"gpus_on_node"`
	CPUsOnNode  int    `json:"cpus_on_node"`
	// GPUMemGB is the GPU memory the runs were checked against, 0 when
	// unchecked; LeftOut the plans left out for it, with the memory each
	// is predicted to need. HostMemGB and LeftOutHost are the same for
	// the job's memory on the node, which offload runs were checked
	// against. LeftOutCPUs are the plans left out for the job's CPUs on
	// the node, with the tasks each would start.
	GPUMemGB    float64         `json:"gpu_mem_gb,omitempty"`
	LeftOut     []string        `json:"left_out,omitempty"`
	HostMemGB   float64         `json:"host_mem_gb,omitempty"`
	LeftOutHost []string        `json:"left_out_host,omitempty"`
	LeftOutCPUs []string        `json:"left_out_cpus,omitempty"`
	Started     time.Time       `json:"started"`
	Finished    time.Time       `json:"finished,omitzero"`
	Complete    bool            `json:"complete"` // the phase ran to its end (runs may still have failed)
	Reason      string          `json:"reason,omitempty"`
	Samples     int             `json:"samples"`         // iteration times reported
	OffloadRuns int             `json:"offload_runs_ok"` // ZeRO-Offload runs with a sample
	Runs        []profileRecord `json:"runs"`
}

// profilePhase runs the short sampled configurations of a job whose model
// type rubickd has no fit for, on the job's first node, before training.
type profilePhase struct {
	cfg        config
	jobID      string
	modelType  string
	stateDir   string
	getenv     func(string) string
	alloc      launch.Alloc
	gpusOnNode int
	dialect    launch.Dialect
	gb         int
	runs       []launch.ProfileRun
	mem        profileMemory
	// leftOut lists the plans left out for GPU memory, with what each is
	// predicted to need per GPU ("dp8.tp1.pp1.mb2.a1.z0 (241 GB)");
	// leftOutHost those left out for the job's memory on the node, with
	// what each is predicted to need there.
	leftOut     []string
	leftOutHost []string
	// leftOutCPUs lists the plans left out because their step would
	// start more tasks on the node than the job has CPUs there, with the
	// tasks each starts ("dp8.tp1.pp1.mb2.a1.z0 (8 tasks)").
	leftOutCPUs []string
	rep         *report.Reporter // nil in a dry run
	resumes     *resumes
	// early has a checkpoint signal that came before the phase began
	// (run's subscription): the phase then runs nothing.
	early  <-chan os.Signal
	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
	// grace is how long a trainer may take to exit on its own after its
	// last iteration, and to exit after SIGTERM before SIGKILL.
	grace time.Duration
}

// wantProfile reports whether the job asks for a profiling phase.
func wantProfile(cfg config, tag *slurm.Tag) bool {
	return cfg.profileIters > 0 && profileTag(tag)
}

// profileTag reports whether rubickd started the job to profile its model
// type (profile=1): it has no plan until the type is fitted.
func profileTag(tag *slurm.Tag) bool { return tag != nil && tag.Extra[tagProfile] == "1" }

// profileMemory is what the phase checks its runs' memory with: the model
// type's memory inputs (the tag's launch.TagArch), the memory of the
// node's GPUs and the job's memory on the node. Without the inputs nothing
// is checked, and without one of the two memories nothing against it:
// those runs are tried.
type profileMemory struct {
	spec   model.Spec
	gpuGB  float64
	hostGB float64
}

// gpuKnown reports whether runs can be checked against the GPUs' memory.
func (m profileMemory) gpuKnown() bool { return m.spec.Params > 0 && m.gpuGB > 0 }

// hostKnown reports whether offload runs can be checked against the job's
// memory on the node.
func (m profileMemory) hostKnown() bool { return m.spec.Params > 0 && m.hostGB > 0 }

// profileMemoryOf reads the memory inputs of a job's tag and, when it has
// them, the memory of this node's GPUs with gpuMem and the job's memory on
// the node (jobMemGB) from shown's MemPerTres and getenv. A tag without
// them (an older rubickd's), a malformed one, a node without NVML (the
// lab's fake GPUs) or a job without a memory bound leaves those runs to be
// tried, as before the check.
func profileMemoryOf(ctx context.Context, shown shownJob, gpuMem func(context.Context) (float64, error),
	getenv func(string) string, alloc launch.Alloc, log *slog.Logger) profileMemory {
	tag := shown.tag
	if tag == nil {
		return profileMemory{}
	}
	v, ok := tag.Extra[launch.TagArch]
	if !ok {
		return profileMemory{}
	}
	spec, err := launch.ParseArch(v)
	if err != nil {
		log.Warn("the job's model type's memory inputs are malformed; every profiling run is tried", "err", err)
		return profileMemory{}
	}
	spec.Name = tag.ModelType
	m := profileMemory{spec: spec}
	if m.gpuGB, err = gpuMem(ctx); err != nil {
		m.gpuGB = 0
		log.Info("GPU memory unknown; profiling runs are not checked against it", "err", err)
	}
	switch gb, err := jobMemGB(shown.memPerTres, getenv, alloc); {
	case err != nil:
		log.Warn("the job's memory on the node is unknown; offload profiling runs are not checked against it", "err", err)
	case gb == 0:
		log.Debug("the job has no memory bound on the node; offload profiling runs are not checked against it")
	default:
		m.hostGB = gb
	}
	return m
}

// jobMemGB is the job's memory on this node, in GB of 1024 MB as rubickd
// counts Slurm's MB: its memory per GPU (memPerTres, the job's MemPerTres
// in scontrol: --mem-per-gpu) times the GPUs on the node, else from the
// environment of its batch step: SLURM_MEM_PER_NODE (--mem), else
// SLURM_MEM_PER_CPU (--mem-per-cpu) times the job's CPUs on the node. It
// is 0, no bound, when none is set, for --mem=0 (the whole node) and when
// the GPUs or CPUs are unknown.
//
// SLURM_MEM_PER_NODE comes before SLURM_MEM_PER_CPU: slurmd writes the
// one of the two the job has when it starts over the submission's, so a
// job submitted with --mem-per-cpu that rubickd sized per node
// (MinMemoryNode) holds both, and the per-node one is current.
// SLURM_MEM_PER_GPU is not read: it is the submission's, and rubickd may
// since have raised the job's memory per GPU, which MemPerTres shows.
func jobMemGB(memPerTres string, getenv func(string) string, alloc launch.Alloc) (float64, error) {
	switch n, err := slurm.MemPerGPU(memPerTres); {
	case err != nil:
		return 0, fmt.Errorf("MemPerTres=%q is not a whole number of MB per GPU", memPerTres)
	case n > 0:
		return float64(n) * float64(alloc.GPUsOnNode) / 1024, nil
	}
	mb := func(key string) (int64, bool, error) {
		v := getenv(key)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, true, fmt.Errorf("%s=%q is not a whole number of MB", key, v)
		}
		return n, true, nil
	}
	if n, ok, err := mb("SLURM_MEM_PER_NODE"); ok || err != nil {
		return float64(n) / 1024, err
	}
	n, _, err := mb("SLURM_MEM_PER_CPU")
	return float64(n) * float64(alloc.CPUsOnNode) / 1024, err
}

// newProfilePhase chooses the runs for the job. plan is the job's plan, or
// nil when its tag has none; the launch line then says the global batch.
// mem, read only once the runs are about to be chosen (it may start NVML;
// nil: nothing is checked), says what runs are left out for not fitting
// in GPU memory (launch.MemoryFits) or, offload runs, in the job's memory
// on the node (launch.HostMemoryFits), where each is known.
func newProfilePhase(cfg config, plan *model.Plan, alloc launch.Alloc, stateDir string, memOf func() profileMemory) (*profilePhase, error) {
	d := cfg.parsedDialect
	if d == launch.DialectAuto {
		var err error
		if d, err = launch.Detect(cfg.train); err != nil {
			return nil, err
		}
	}
	gpusOnNode := alloc.GPUsOnNode
	var base model.Plan
	gb := cfg.globalBatch
	if plan != nil {
		base = *plan
		if gpusOnNode == 0 {
			gpusOnNode = max(plan.GPUs()/max(alloc.Nodes, 1), 1)
		}
		if gb == 0 {
			// The line's own batch, which the plan rubickd chose may lack
			// (a model type's): every run keeps the line's.
			if n, err := launch.GlobalBatch(cfg.train, launch.Options{Dialect: d}); err == nil && n > 0 {
				gb = n
			} else {
				gb = plan.DP * plan.MicroBatch * plan.Accum
			}
		}
	} else {
		if gpusOnNode == 0 {
			return nil, fmt.Errorf("the job has no plan and SLURM_GPUS_ON_NODE is unset: the GPUs to profile on are unknown")
		}
		p, lineGB, err := launch.Inspect(cfg.train, gpusOnNode*alloc.Nodes, launch.Options{Dialect: d})
		if err != nil {
			return nil, fmt.Errorf("the job has no plan and its launch line states none: %w", err)
		}
		base = p
		if gb == 0 {
			gb = lineGB
		}
	}
	opts := launch.ProfileOptions{MaxMicroBatch: base.MicroBatch, Iters: cfg.profileIters, TP: profileTP(cfg.train)}
	var mem profileMemory
	if memOf != nil {
		mem = memOf()
	}
	var gpuFits, hostFits func(model.Plan, model.Placement) bool
	if mem.gpuKnown() {
		gpuFits = launch.MemoryFits(mem.spec, mem.gpuGB)
	}
	if mem.hostKnown() {
		hostFits = launch.HostMemoryFits(mem.spec, mem.hostGB)
	}
	var leftOut, leftOutHost []string
	if gpuFits != nil || hostFits != nil {
		pred := model.Predictor{Spec: mem.spec}
		opts.Fits = func(p model.Plan, pl model.Placement) bool {
			switch {
			case gpuFits != nil && !gpuFits(p, pl):
				leftOut = append(leftOut, fmt.Sprintf("%s (%.0f GB)", p, pred.Memory(p, pl).GPUGB))
				return false
			case hostFits != nil && !hostFits(p, pl):
				leftOutHost = append(leftOutHost, fmt.Sprintf("%s (%.0f GB)", p, pred.Memory(p, pl).HostGBNode))
				return false
			}
			return true
		}
	}
	runs, err := launch.ProfilePlans(gb, gpusOnNode, alloc.CPUsOnNode, d, opts)
	if err != nil {
		return nil, err
	}
	ph := &profilePhase{cfg: cfg, alloc: alloc, gpusOnNode: gpusOnNode, dialect: d, gb: gb,
		mem: mem, leftOut: leftOut, leftOutHost: leftOutHost, stateDir: stateDir, grace: 10 * time.Second}
	// srun refuses a step that asks for more CPUs than the job has on the
	// node ("More processors requested than permitted", 22.05 lab), and
	// a task gets one at least: with one task per GPU, a job submitted
	// with --gres=gpu:8 and Slurm's one CPU can run its 1-GPU runs only.
	for _, r := range runs {
		geo, err := ph.geometry(r)
		if err == nil && alloc.CPUsOnNode > 0 && geo.Tasks()*max(geo.CPUsPerTask, 1) > alloc.CPUsOnNode {
			ph.leftOutCPUs = append(ph.leftOutCPUs, fmt.Sprintf("%s (%d tasks)", r.Plan, geo.Tasks()))
			continue
		}
		ph.runs = append(ph.runs, r)
	}
	if len(ph.runs) == 0 {
		return nil, fmt.Errorf("every profiling run starts more tasks (one per GPU) than the job's %d CPUs on the node: %s",
			alloc.CPUsOnNode, strings.Join(ph.leftOutCPUs, ", "))
	}
	return ph, nil
}

// geometry is the task layout of run's step on the first node.
func (ph *profilePhase) geometry(run launch.ProfileRun) (launch.Geometry, error) {
	return launch.PlanGeometry(run.Plan, launch.Alloc{Nodes: 1, GPUsOnNode: ph.gpusOnNode, CPUsOnNode: run.CPUs},
		launch.GeometryOptions{Mode: ph.cfg.parsedMode, Bind: ph.cfg.parsedBind, Launcher: launch.DetectLauncher(ph.cfg.train),
			SrunExtra: ph.cfg.srunArgs})
}

// profileTP is the TP degree of the profiling phase's one tensor-parallel
// run: 2 when the line's --num-attention-heads is even (TP must divide
// the heads), else 0 (no such run).
func profileTP(argv []string) int {
	v, ok := launch.LookupFlag(argv, "--num-attention-heads")
	if h, err := strconv.Atoi(v); ok && err == nil && h > 0 && h%2 == 0 {
		return 2
	}
	return 0
}

// phaseDone reports whether an earlier start of the job whose state
// directory is stateDir (before a requeue) completed the phase already.
func phaseDone(stateDir string) bool {
	data, err := os.ReadFile(filepath.Join(stateDir, profileFile))
	if err != nil {
		return false
	}
	var r profileReport
	return json.Unmarshal(data, &r) == nil && r.Complete
}

// build is the step of run i: its rewritten launch line on the first node.
func (ph *profilePhase) build(i int) (step, error) {
	run := ph.runs[i]
	geo, err := ph.geometry(run)
	if err != nil {
		return step{}, err
	}
	opts := launch.Options{Dialect: ph.dialect, GlobalBatch: ph.cfg.globalBatch,
		ConfigDir: filepath.Join(ph.stateDir, profileRunsDir, fmt.Sprintf("run-%02d", i+1))}
	// Every run is on the batch host.
	dist := distributedFor(ph.getenv, ph.getenv("SLURM_JOB_ID"), ph.getenv("SLURMD_NODENAME"))
	if geo.Mode == launch.ModePerNode || geo.Mode == launch.ModeDirect {
		opts.Nodes, opts.GPUsPerNode = 1, geo.GPUsPerNode
		opts.Rendezvous = dist.rendezvous()
	}
	res, err := launch.RewriteProfile(ph.cfg.train, run, opts)
	if err != nil {
		return step{}, err
	}
	st := step{argv: res.Argv, config: res.Config, parser: stepParser(res), placement: geo.Placement(),
		env: []string{"RUBICK_PLAN=" + run.Plan.String(), "RUBICK_PLACEMENT=" + geo.Placement().String(),
			"RUBICK_CPUS=" + strconv.Itoa(run.CPUs), fmt.Sprintf("RUBICK_PROFILE_RUN=%d/%d", i+1, len(ph.runs)),
			"CUDA_VISIBLE_DEVICES=" + launch.VisibleDevices(ph.getenv("CUDA_VISIBLE_DEVICES"), run.GPUs)}}
	dist.wrap(&st, geo, run.Plan, ph.cfg.self, ph.getenv)
	if geo.Mode != launch.ModeDirect {
		st.argv = geo.Command(ph.cfg.srun, st.argv)
		// The batch host is the job's first node.
		if node := ph.getenv("SLURMD_NODENAME"); ph.alloc.Nodes > 1 && node != "" {
			st.argv = slices.Insert(st.argv, 1, "--nodelist="+node)
		}
	}
	if run.Plan.Offload && geo.CPUsPerTask > 0 && ph.getenv("OMP_NUM_THREADS") == "" {
		st.env = append(st.env, "OMP_NUM_THREADS="+strconv.Itoa(geo.CPUsPerTask))
	}
	return st, nil
}

// printDry writes the runs' commands for --dry-run.
func (ph *profilePhase) printDry(w io.Writer) {
	for i, run := range ph.runs {
		fmt.Fprintf(w, "# profile run %d/%d %s gpus=%d cpus=%d: %s\n", i+1, len(ph.runs), run.Plan, run.GPUs, run.CPUs, run.Purpose)
		st, err := ph.build(i)
		if err != nil {
			fmt.Fprintf(w, "#   not runnable: %v\n", err)
			continue
		}
		fmt.Fprintln(w, shellQuote(append(slices.Clone(st.env), st.argv...)))
	}
}

// run runs the phase within --profile-timeout. It never fails the job: a
// run that cannot start, fails or times out is logged and skipped. It
// returns the signal that ended it early, if one did.
func (ph *profilePhase) run(ctx context.Context) syscall.Signal {
	ctx, cancel := context.WithTimeoutCause(ctx, ph.cfg.profileTimeout, errPhaseTimeout)
	defer cancel()
	// One that already came stops the phase before its first run.
	sigCtx, got, stop := stopOnSignal(ctx, ph.cfg.checkpointSig, ph.early, func(s syscall.Signal, before bool) {
		if before {
			ph.log.Info("checkpoint signal before the profiling phase; not starting it", "signal", s)
		} else {
			ph.log.Info("signal during the profiling phase; stopping it", "signal", s)
		}
	})
	defer stop()

	rep := profileReport{Version: 1, JobID: ph.jobID, ModelType: ph.modelType, Dialect: string(ph.dialect), GlobalBatch: ph.gb,
		GPUsOnNode: ph.gpusOnNode, CPUsOnNode: ph.alloc.CPUsOnNode, LeftOut: ph.leftOut, LeftOutHost: ph.leftOutHost, LeftOutCPUs: ph.leftOutCPUs,
		Started: time.Now().UTC()}
	if ph.mem.gpuKnown() {
		rep.GPUMemGB = ph.mem.gpuGB
	}
	if ph.mem.hostKnown() {
		rep.HostMemGB = ph.mem.hostGB
	}
	ph.log.Info("profiling phase: the model type has no fitted model yet", "runs", len(ph.runs), "iters", ph.cfg.profileIters,
		"timeout", ph.cfg.profileTimeout, "record", filepath.Join(ph.stateDir, profileFile))
	for i, run := range ph.runs {
		rec := profileRecord{Run: i + 1, Of: len(ph.runs), Plan: run.Plan.String(), ProfileRun: run, Status: runSkipped,
			VisibleDevices: launch.VisibleDevices(ph.getenv("CUDA_VISIBLE_DEVICES"), run.GPUs), IterS: []float64{}}
		switch {
		case context.Cause(sigCtx) == errInterrupted:
			rec.Status = runInterrupted
		case sigCtx.Err() != nil:
			rec.Error = "the profiling phase's time bound was reached"
		default:
			ph.runOne(sigCtx, i, &rec)
		}
		rep.Runs = append(rep.Runs, rec)
		ph.summary(rec)
		ph.write(&rep)
	}
	rep.Finished = time.Now().UTC()
	switch {
	case context.Cause(sigCtx) == errInterrupted:
		rep.Reason = "interrupted by " + got.get().String()
	case ctx.Err() != nil:
		rep.Reason = "time bound reached"
		rep.Complete = true
	default:
		rep.Complete = true
	}
	ph.write(&rep)
	ph.log.Info("profiling phase over", "samples", rep.Samples, "offload_runs_ok", rep.OffloadRuns,
		"seconds", rep.Finished.Sub(rep.Started).Round(time.Millisecond).Seconds(), "reason", rep.Reason)
	switch ok := okRuns(rep.Runs); {
	case ok < launch.MinPartialProfileRuns:
		ph.log.Warn("the profiling phase measured too few configurations for rubickd to fit the model type on", "ok_runs", ok,
			"want", launch.MinPartialProfileRuns)
	case rep.OffloadRuns < launch.MinProfileOffloadRuns || ok < launch.MinProfileRuns:
		// A large model fails the plain data-parallel runs for memory.
		ph.log.Info("the profiling phase measured fewer configurations than a fit of every parameter needs; rubickd holds those they cannot identify at their priors",
			"ok_runs", ok, "want", launch.MinProfileRuns, "offload_runs_ok", rep.OffloadRuns, "want_offload", launch.MinProfileOffloadRuns)
	}
	return got.get()
}

var (
	errPhaseTimeout = errors.New("profiling phase time bound reached")
	errRunTimeout   = errors.New("profiling run time bound reached")
	errInterrupted  = errors.New("profiling phase interrupted by a signal")
)

func okRuns(rs []profileRecord) int {
	n := 0
	for _, r := range rs {
		if len(r.IterS) > 0 {
			n++
		}
	}
	return n
}

// runOne runs profiling run i and fills rec.
func (ph *profilePhase) runOne(ctx context.Context, i int, rec *profileRecord) {
	start := time.Now()
	defer func() { rec.Seconds = time.Since(start).Round(time.Millisecond).Seconds() }()
	st, err := ph.build(i)
	if err != nil {
		rec.Status, rec.Error = runFailed, err.Error()
		return
	}
	rec.Argv = st.argv
	if st.config != nil {
		if err := writeFileAtomic(st.config.Path, st.config.Data); err != nil {
			rec.Status, rec.Error = runFailed, fmt.Sprintf("write the DeepSpeed config: %v", err)
			return
		}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, ph.cfg.profileRunTimeout, errRunTimeout)
	defer cancel()

	run := ph.runs[i]
	enough := make(chan struct{})
	m := &profileMeter{skip: ph.cfg.reportSkip, want: run.Iters, enough: enough, rep: ph.rep, resumes: ph.resumes.lines(),
		parser: st.parser,
		base: report.Sample{Version: report.SampleVersion, JobID: ph.jobID, ModelType: ph.modelType, Plan: run.Plan.String(),
			Placement: st.placement.String(), CPUs: run.CPUs}}
	outTap, errTap := &lineTap{line: m.line}, &lineTap{line: m.line}
	cmd := exec.Command(st.argv[0], st.argv[1:]...)
	cmd.Env = append(os.Environ(), st.env...)
	out, err := connectOutput(cmd, io.MultiWriter(ph.stdout, outTap), io.MultiWriter(ph.stderr, errTap))
	if err != nil {
		rec.Status, rec.Error = runFailed, fmt.Sprintf("start: %v", err)
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	ph.log.Info("profile run starting", "run", fmt.Sprintf("%d/%d", i+1, len(ph.runs)), "argv", shellQuote(st.argv))
	if err := out.start(cmd); err != nil {
		rec.Status, rec.Error = runFailed, fmt.Sprintf("start: %v", err)
		return
	}

	done := make(chan struct{})
	var stopped sync.WaitGroup
	var stopCause error
	stopped.Add(1)
	go func() {
		defer stopped.Done()
		pgid := cmd.Process.Pid
		stop := func() {
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(ph.grace):
				ph.log.Warn("profile run ignored SIGTERM; killing it", "run", i+1)
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}
		select {
		case <-done:
		case <-ctx.Done():
			stopCause = context.Cause(ctx)
			stop()
		case <-enough:
			if launch.SelfExiting(ph.dialect) {
				// --exit-interval ends it; stop it only if it lingers.
				select {
				case <-done:
					return
				case <-ctx.Done():
				case <-time.After(ph.grace):
				}
			}
			stop()
		}
	}()
	err = cmd.Wait()
	// What the run left running would hold its GPUs, and the output, into
	// the next run.
	out.finish(cmd, ph.grace, ph.log)
	outTap.flush()
	errTap.flush()
	close(done)
	stopped.Wait()

	status := 0
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		status = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			status = 128 + int(ws.Signal())
		}
	default:
		rec.Error = err.Error()
		status = exitLaunch
	}
	rec.ExitStatus = &status
	rec.Measured, rec.IterS = m.result()
	if len(rec.IterS) > 0 {
		rec.MedianIterS = median(rec.IterS)
	}
	switch {
	case rec.Measured >= run.Iters:
		rec.Status = runOK
	case errors.Is(stopCause, errInterrupted):
		rec.Status = runInterrupted
	case stopCause != nil:
		rec.Status, rec.Error = runTimeout, stopCause.Error()
	case status == 0 && len(rec.IterS) > 0:
		rec.Status = runOK
	default:
		rec.Status = runFailed
		if rec.Error == "" {
			rec.Error = fmt.Sprintf("exit status %d after %d of %d iteration times", status, rec.Measured, run.Iters)
		}
	}
}

// summary prints the run's line in the job's log.
func (ph *profilePhase) summary(r profileRecord) {
	head := fmt.Sprintf("rubick-srun: profile run %d/%d %s gpus=%d cpus=%d", r.Run, r.Of, r.Plan, r.GPUs, r.CPUs)
	switch {
	case r.MedianIterS > 0 && r.Status == runOK:
		fmt.Fprintf(ph.stderr, "%s iter=%.3fs\n", head, r.MedianIterS)
	case r.MedianIterS > 0:
		fmt.Fprintf(ph.stderr, "%s iter=%.3fs %s: %s\n", head, r.MedianIterS, r.Status, r.Error)
	case r.Error != "":
		fmt.Fprintf(ph.stderr, "%s %s: %s\n", head, r.Status, r.Error)
	default:
		fmt.Fprintf(ph.stderr, "%s %s\n", head, r.Status)
	}
}

// write stores the phase's record; failures are logged only.
func (ph *profilePhase) write(rep *profileReport) {
	rep.Samples, rep.OffloadRuns = 0, 0
	for _, r := range rep.Runs {
		rep.Samples += len(r.IterS)
		if r.Plan != "" && len(r.IterS) > 0 && r.ProfileRun.Plan.Offload {
			rep.OffloadRuns++
		}
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err == nil {
		err = writeFileAtomic(filepath.Join(ph.stateDir, profileFile), append(data, '\n'))
	}
	if err != nil {
		ph.log.Warn("cannot write the profiling record", "err", err)
	}
}

// profileMeter reads a profiling run's iteration times: it reports those
// after the warm-up and says when the run has measured enough.
type profileMeter struct {
	mu       sync.Mutex
	parser   report.Parser
	rep      *report.Reporter
	base     report.Sample
	skip     int
	want     int
	measured int
	iterS    []float64
	enough   chan struct{}
	resumes  resumeMark
}

func (m *profileMeter) line(line string) {
	meas, ok := m.parser.Parse(line)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.measured++
	if m.measured == m.want {
		close(m.enough)
	}
	// A line spanning a suspension counts as measured (the run moved on)
	// but its time is not the plan's.
	if m.resumes.spans() || m.measured <= m.skip || m.measured > m.want {
		return
	}
	m.iterS = append(m.iterS, meas.IterS)
	if m.rep != nil {
		m.rep.Submit(m.base.With(meas, time.Now().UTC()))
	}
}

func (m *profileMeter) result() (int, []float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.measured, slices.Clone(m.iterS)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// signalBox holds the first signal received.
type signalBox struct {
	mu  sync.Mutex
	sig syscall.Signal
}

func (b *signalBox) set(s syscall.Signal) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sig == 0 {
		b.sig = s
	}
}

func (b *signalBox) get() syscall.Signal {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sig
}

// stopOnSignal returns ctx cancelled, with errInterrupted as its cause, by
// the first checkpoint signal, SIGTERM or SIGINT to come, or at once by a
// checkpoint signal already in early; got holds that signal, and onSig,
// when set, sees it (before: it was in early). early is read only then: a
// checkpoint signal that comes later stays there for the step. stop ends
// the watch.
func stopOnSignal(ctx context.Context, ckptSig syscall.Signal, early <-chan os.Signal,
	onSig func(s syscall.Signal, before bool)) (sigCtx context.Context, got *signalBox, stop func()) {
	sigCtx, cancel := context.WithCancelCause(ctx)
	got = new(signalBox)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, ckptSig, syscall.SIGTERM, syscall.SIGINT)
	stopped := func(s os.Signal, before bool) {
		got.set(s.(syscall.Signal))
		if onSig != nil {
			onSig(s.(syscall.Signal), before)
		}
		cancel(errInterrupted)
	}
	// Subscribed above: one that comes after this check reaches sigs too.
	select {
	case s := <-early:
		stopped(s, true)
	default:
	}
	go func() {
		select {
		case s := <-sigs:
			stopped(s, false)
		case <-sigCtx.Done():
		}
	}()
	return sigCtx, got, func() {
		signal.Stop(sigs)
		cancel(nil)
	}
}

// rereadPlan reads the job's plan again after the profiling phase: rubickd
// may have fitted the model type and chosen another. It keeps old when the
// tag cannot be read or holds no valid plan.
func rereadPlan(ctx context.Context, cfg config, jobID string, old *model.Plan, log *slog.Logger) *model.Plan {
	tag, err := readTag(ctx, cfg.scontrol, cfg.jobRef)
	if err == nil && (tag == nil || tag.Plan == "") {
		if old == nil {
			// The usual case: a job started for profiling has no plan
			// until rubickd fits its type.
			log.Info("no plan after profiling yet: rubickd has not fitted the model type")
			return nil
		}
		err = errors.New("the job's AdminComment has no rubick plan")
	}
	if err != nil {
		log.Warn("cannot re-read the job's plan after profiling; keeping the one it started with", "err", err)
		return old
	}
	p, err := model.ParsePlan(tag.Plan)
	if err != nil {
		log.Warn("the job's plan after profiling is malformed; keeping the one it started with", "err", err)
		return old
	}
	if old == nil || p != *old {
		log.Info("plan after profiling", "plan", p.String())
	}
	return &p
}

// untrained ends rubick-srun when sig stopped it before it trained: in
// the profiling phase or in the wait for rubickd's plan after it. Nothing
// was trained, so the user's checkpoint is current: the checkpoint signal
// requeues the job held, as after a checkpoint, and exits 75; SIGTERM or
// SIGINT exit 128+N.
func untrained(ctx context.Context, cfg config, jobID string, sig syscall.Signal, log *slog.Logger) int {
	if sig != cfg.checkpointSig {
		return 128 + int(sig)
	}
	if cfg.requeue && jobID != "" && !slurmEnding(ctx, cfg, whyCheckpoint, log) {
		_ = requeueHold(ctx, cfg, whyCheckpoint, log, nil)
	}
	return exitCheckpointed
}

// phaseOver tells rubickd that the job's profiling phase is over, once the
// phase's samples have all been sent: rubickd fits the model type on what
// the phase measured when it hears this, so they must be there first. plan
// is the job's plan, nil for none. It reports whether rubickd took the
// notice.
func phaseOver(ctx context.Context, cfg config, jobID, modelType string, plan *model.Plan, rep *report.Reporter, log *slog.Logger) bool {
	if rep != nil {
		fctx, cancel := context.WithTimeout(ctx, launchNoticeWait)
		if err := rep.Flush(fctx); err != nil {
			log.Warn("profiling samples still unsent at the launch notice", "err", err)
		}
		cancel()
	}
	lctx, cancel := context.WithTimeout(ctx, launchNoticeWait)
	defer cancel()
	return sendLaunch(lctx, cfg, jobID, modelType, plan, false, true, log) == nil
}

// defaultPlanWait is --plan-wait's default: two of rubickd's default
// intervals (30 s). rubickd fits the model type at its first cycle after
// the phase's notice, which may come just after a cycle's fits, and sets
// the plan in that cycle, or at the next where that cycle waits for jobs
// it released to start.
const defaultPlanWait = time.Minute

// maxPlanPoll bounds the time between two reads of the job's tag while
// awaitPlan waits; a shorter --plan-wait reads it ten times.
const maxPlanPoll = 5 * time.Second

// awaitPlan waits, at most cfg.planWait, for the plan rubickd sets once it
// has fitted the model type on what the phase measured: the job's tag then
// has a plan and no longer profile=1. It reads the tag at once (rubickd
// may have fitted the type during the phase), then a tenth of the bound
// apart, maxPlanPoll at most. It returns the plan, nil when none came
// within the bound, and the signal that ended the wait, if one did: the
// checkpoint signal (rubickd restarting the job on its fit), SIGTERM or
// SIGINT, as in the phase.
func awaitPlan(ctx context.Context, cfg config, early <-chan os.Signal, log *slog.Logger) (*model.Plan, syscall.Signal) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.planWait)
	defer cancel()
	// One that already came ends the wait before it reads anything.
	sigCtx, got, stop := stopOnSignal(ctx, cfg.checkpointSig, early, nil)
	defer stop()
	log.Info("waiting for rubickd's plan: it fits the model type on what the profiling phase measured", "bound", cfg.planWait)
	poll := min(cfg.planWait/10, maxPlanPoll)
	var last error
	for sigCtx.Err() == nil {
		p, err := annotatedPlan(sigCtx, cfg)
		if p != nil {
			log.Info("plan from rubickd after profiling", "plan", p.String(), "waited", time.Since(start).Round(time.Millisecond).Seconds())
			return p, 0
		}
		if err != nil && sigCtx.Err() == nil {
			last = err
		}
		select {
		case <-sigCtx.Done():
		case <-time.After(poll):
		}
	}
	if s := got.get(); s != 0 {
		log.Info("signal while waiting for rubickd's plan; not training", "signal", s)
		return nil, s
	}
	args := []any{"plan_wait", cfg.planWait}
	if last != nil {
		args = append(args, "last_err", last)
	}
	log.Info("no plan from rubickd within --plan-wait; training on the plan the job has", args...)
	return nil, 0
}

// annotatedPlan reads the job's tag and returns its plan once rubickd has
// set it after the phase (a plan, and profile=1 taken out); nil, with the
// reason where there is one, until then.
func annotatedPlan(ctx context.Context, cfg config) (*model.Plan, error) {
	tag, err := readTag(ctx, cfg.scontrol, cfg.jobRef)
	if err != nil || tag == nil || tag.Plan == "" || profileTag(tag) {
		return nil, err
	}
	p, err := model.ParsePlan(tag.Plan)
	if err != nil {
		return nil, fmt.Errorf("the job's AdminComment: %w", err)
	}
	return &p, nil
}
