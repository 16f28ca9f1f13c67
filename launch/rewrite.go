package launch

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/rubick-sched/rubick/model"
)

// Options tune Rewrite and Inspect.
type Options struct {
	// Dialect forces the dialect; DialectAuto detects it.
	Dialect Dialect
	// GlobalBatch is the global batch the job must keep (for instance the
	// model type's); 0 takes it from the launch line or its config.
	GlobalBatch int
	// ConfigDir is the job-private directory the rewritten DeepSpeed config
	// is destined for. Required when the line has a DeepSpeed config.
	ConfigDir string
	// ReadFile reads the user's DeepSpeed config; nil means os.ReadFile.
	ReadFile func(name string) ([]byte, error)
	// EnsureLoad adds "--load X" to a Megatron line that saves to X and
	// loads from nowhere, and makes one that loads from elsewhere load X
	// once X holds a checkpoint (Saved), so that a requeued job resumes.
	EnsureLoad bool
	// CheckpointDir, when set, is given as --save to a Megatron line that
	// has no --save, and as --load once it holds a checkpoint (Saved).
	// Until then a --load of the line's own stays, so that the first
	// start begins where the user meant; a line without one gets --load
	// CheckpointDir at once.
	CheckpointDir string
	// Saved reports whether dir, where the line saves (its --save, else
	// CheckpointDir), holds a checkpoint the job saved before it was
	// restarted: the line then resumes from it, not from a --load of
	// another directory. nil: none does.
	Saved func(dir string) bool
	// Nodes and GPUsPerNode, when both positive, size a per-node launcher:
	// torchrun --nnodes/--nproc_per_node, deepspeed --num_nodes/--num_gpus.
	Nodes, GPUsPerNode int
	// Rendezvous ("host:port") and RendezvousID are where and under which
	// name the torchrun launchers of a multi-node step meet (c10d).
	Rendezvous, RendezvousID string
	// GPUs is what the job asked for, for GlobalBatch: a Hugging Face
	// Trainer line states no global batch, which is its per-device batch
	// x its accumulation x the GPUs it was submitted to run on.
	GPUs int
}

func (o Options) readFile(name string) ([]byte, error) {
	if o.ReadFile != nil {
		return o.ReadFile(name)
	}
	return os.ReadFile(name)
}

// Config is a rewritten DeepSpeed config, to be written at Path.
type Config struct {
	// Source is the user's config, as the launch line names it.
	Source string
	// Path is where the rewritten copy goes: inside Options.ConfigDir.
	Path string
	// Data is the rewritten JSON.
	Data []byte
}

// Result is a rewritten launch line.
type Result struct {
	Dialect Dialect
	// Launcher is the per-node launcher the line starts with, if any.
	Launcher string
	// Argv is the rewritten command.
	Argv []string
	// GlobalBatch is the global batch the rewritten line trains with; it
	// equals the one the input fixed, when it fixed one.
	GlobalBatch int
	// Config is the rewritten DeepSpeed config, nil when the line has none.
	Config *Config
	// hf marks a Hugging Face Trainer line (userConfig.hf).
	hf bool
}

// HFTrainer reports whether the line is a Hugging Face Trainer script's
// (a DeepSpeed config given with --deepspeed FILE), whose iteration times
// are on its progress bar.
func (r Result) HFTrainer() bool { return r.hf }

// ValidatePlan reports the first field of p that no dialect can run.
func ValidatePlan(p model.Plan) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"dp", p.DP}, {"tp", p.TP}, {"pp", p.PP}, {"micro_batch", p.MicroBatch}, {"accum", p.Accum}} {
		if f.v < 1 {
			return fmt.Errorf("%w: plan %s: %s=%d must be >= 1", ErrBadInput, p, f.name, f.v)
		}
	}
	if p.ZeRO < 0 || p.ZeRO > 3 {
		return fmt.Errorf("%w: plan %s: zero=%d is not a ZeRO stage 0-3", ErrBadInput, p, p.ZeRO)
	}
	if p.Offload && p.ZeRO < 1 {
		return fmt.Errorf("%w: plan %s: ZeRO-Offload needs ZeRO stage >= 1, got zero=%d", ErrBadInput, p, p.ZeRO)
	}
	return nil
}

// Rewrite rewrites the training command argv to run plan. Flags the plan
// fixes are replaced where they are, in the form they were written
// ("--flag value" or "--flag=value"), or appended when absent; every other
// token passes through unchanged and in order. The global batch never
// changes: when the line, its config or opts fix one that differs from
// plan.DP*plan.MicroBatch*plan.Accum, Rewrite fails with ErrGlobalBatch.
func Rewrite(argv []string, plan model.Plan, opts Options) (Result, error) {
	if len(argv) == 0 {
		return Result{}, fmt.Errorf("%w: the training command is empty", ErrBadInput)
	}
	if err := ValidatePlan(plan); err != nil {
		return Result{}, err
	}
	d, err := dialectOf(argv, opts)
	if err != nil {
		return Result{}, err
	}
	if cannotOf(d, true)&(model.FeatureTP|model.FeaturePP)&model.Of(plan) != 0 {
		return Result{}, fmt.Errorf("%w: plan %s uses tensor or pipeline parallelism, which a plain DeepSpeed script does not take from its config", ErrUnsupported, plan)
	}
	l := parseLayout(argv)
	c := &cmdline{toks: slices.Clone(argv)}
	lo, hi := l.trainLo(), len(c.toks)
	if d != DeepSpeed {
		if err := checkSeqSplit(c, &plan, lo, hi); err != nil {
			return Result{}, err
		}
	}

	cf, err := loadConfig(c, d, l, opts)
	if err != nil {
		return Result{}, err
	}
	gb, err := checkGlobalBatch(c, lo, hi, cf, plan, opts)
	if err != nil {
		return Result{}, err
	}
	if !cannotOf(d, cf != nil).Allows(plan) {
		return Result{}, fmt.Errorf("%w: plan %s offloads the optimizer, which Megatron-DeepSpeed takes from a DeepSpeed config; the line has no --deepspeed_config", ErrUnsupported, plan)
	}

	res := Result{Dialect: d, Launcher: l.launcher, GlobalBatch: gb, hf: cf != nil && cf.hf}
	switch d {
	case Megatron:
		hi = rewriteMegatron(c, plan, gb, lo, hi)
	case MegatronDeepSpeed:
		hi = rewriteMegatronDeepSpeed(c, plan, gb, lo, hi)
	case DeepSpeed:
		switch {
		case cf == nil: // accelerate's DeepSpeed plugin, set by its flags
			hi = rewriteAccScript(c, plan, lo, hi)
		case cf.hf:
			hi = rewriteHF(c, plan, lo, hi)
		}
	}
	if cf != nil {
		if opts.ConfigDir == "" {
			return Result{}, fmt.Errorf("%w: the line has a DeepSpeed config (%s) but no job-private directory was given for its rewritten copy", ErrBadInput, cf.path)
		}
		if err := rewriteConfig(cf.obj, plan, gb, cf.hf); err != nil {
			return Result{}, fmt.Errorf("DeepSpeed config %s: %w", cf.path, err)
		}
		if d == DeepSpeed && !cf.hf && !cf.launcher && !cf.obj.has("steps_per_print") {
			// A plain DeepSpeed job is timed by DeepSpeed's step lines,
			// which it prints every steps_per_print steps: since 0.15.3
			// never, unless the config sets it. (accelerate, through
			// which the Trainer and the plugin build their engine, sets
			// it to infinity whatever the copy says; Megatron-DeepSpeed
			// is timed by Megatron's lines.)
			cf.obj.setInt("steps_per_print", defaultStepsPerPrint)
		}
		data, err := cf.obj.indented()
		if err != nil {
			return Result{}, fmt.Errorf("DeepSpeed config %s: %w", cf.path, err)
		}
		res.Config = &Config{Source: cf.path, Path: filepath.Join(opts.ConfigDir, "rubick-"+filepath.Base(cf.path)), Data: data}
		if !cf.launcher {
			hi = c.set(cf.flag, res.Config.Path, lo, hi)
		}
	}
	if d != DeepSpeed {
		if opts.CheckpointDir != "" && !c.has(fSave, lo, hi) {
			hi = c.set(fSave, opts.CheckpointDir, lo, hi)
		}
		save, _ := c.get(fSave, lo, hi)
		if save != "" && (opts.EnsureLoad || opts.CheckpointDir != "") {
			load, ok := c.get(fLoad, lo, hi)
			switch {
			case !ok:
				c.set(fLoad, save, lo, hi)
			case load != save && opts.Saved != nil && opts.Saved(save):
				// A restart: loading the line's --load again would start
				// the job over from there, not from what it saved since.
				hi = c.set(fLoad, save, lo, hi)
				for _, f := range loadPartly {
					hi = c.remove(f, lo, hi)
				}
			}
		}
	}
	// Launcher flags precede the script, so editing them last leaves the
	// indices used above valid.
	if d == DeepSpeed && l.accDeepSpeed(c) {
		end := c.setAccDeepSpeed(l, plan, cf, res.Config)
		l.script += end - l.flagsEnd
		l.flagsEnd = end
	}
	if err := c.sizeLauncher(l, opts); err != nil {
		return Result{}, err
	}
	res.Argv = c.toks
	return res, nil
}

func dialectOf(argv []string, opts Options) (Dialect, error) {
	if opts.Dialect != DialectAuto {
		_, err := ParseDialect(string(opts.Dialect))
		return opts.Dialect, err
	}
	return Detect(argv)
}

func rewriteMegatron(c *cmdline, plan model.Plan, gb, lo, hi int) int {
	hi = setSizes(c, plan, gb, lo, hi)
	// --recompute-activations means selective recompute and would override
	// the full recompute the plan was priced with.
	hi = c.remove(fRecAct, lo, hi)
	hi = setFullRecompute(c, plan.Checkpoint, lo, hi)
	// Megatron's distributed optimizer shards optimizer states over DP:
	// ZeRO stage 1; stages 2 and 3 map to it too.
	hi = c.setSwitch(fDistOpt, plan.ZeRO >= 1, lo, hi)
	if plan.ZeRO == 0 {
		// Megatron asserts that these run only with the distributed
		// optimizer; the optimizer dtypes are the precision-aware
		// optimizer's, which asserts they are fp32 without it.
		for _, f := range append([]flagSpec{fOverlapPG, fOverlapPGOpt, fPrecAware}, fOptDtypes...) {
			hi = c.remove(f, lo, hi)
		}
	}
	// Megatron-Core's CPU offload reuses the precision-aware optimizer's
	// code path and asserts --use-precision-aware-optimizer with it. A plan
	// without offload drops that switch only where it served the line's
	// offload alone: the line offloads and sets none of the optimizer
	// dtypes it exists for. Otherwise it is the user's own choice, valid
	// with the distributed optimizer, and stays.
	servedOffload := c.has(fCPUOffload, lo, hi) && !hasAny(c, fOptDtypes, lo, hi)
	hi = c.setSwitch(fCPUOffload, plan.Offload, lo, hi)
	switch {
	case plan.Offload:
		hi = c.setSwitch(fPrecAware, true, lo, hi)
	case servedOffload:
		hi = c.remove(fPrecAware, lo, hi)
	}
	return dropStale(c, Megatron, plan, lo, hi)
}

func rewriteMegatronDeepSpeed(c *cmdline, plan model.Plan, gb, lo, hi int) int {
	hi = setSizes(c, plan, gb, lo, hi)
	hi = c.remove(fRecAct, lo, hi)
	hi = c.setSwitch(fCkptAct, plan.Checkpoint, lo, hi)
	if !plan.Checkpoint {
		hi = c.remove(fDSActCkpt, lo, hi)
	}
	// Only versions that know --recompute-granularity get it: older
	// Megatron-DeepSpeed forks reject it.
	if !plan.Checkpoint || c.has(fRecGran, lo, hi) {
		hi = setFullRecompute(c, plan.Checkpoint, lo, hi)
	}
	hi = c.set(fZeroStage, strconv.Itoa(plan.ZeRO), lo, hi)
	// DeepSpeed's ZeRO-Offload takes a client optimizer only if it is its
	// CPU Adam ("ZeRO-Offload with a client provided optimizer" otherwise),
	// which Megatron-DeepSpeed builds with --cpu-optimizer; CPU Adam in turn
	// asserts that its parameters are on the CPU, as only offload puts them.
	hi = c.setSwitch(fCPUOptimizer, plan.Offload, lo, hi)
	if plan.PP == 1 && plan.ZeRO >= 2 {
		// Without it Megatron-DeepSpeed builds a pipeline model even for
		// one stage, and DeepSpeed's pipeline engine asserts ZeRO < 2
		// ("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism").
		hi = c.setSwitch(fNoPP, true, lo, hi)
	}
	return dropStale(c, MegatronDeepSpeed, plan, lo, hi)
}

// rewriteHF gives a Hugging Face Trainer line the plan's sizes as
// TrainingArguments. The Trainer fills the DeepSpeed config's "auto" keys
// from them and refuses concrete ones that differ; absent flags would leave
// its defaults (8 per device, no accumulation), so they are added. It
// computes the global batch itself: flags x world size.
func rewriteHF(c *cmdline, plan model.Plan, lo, hi int) int {
	hi = c.remove(fHFPerGPU, lo, hi)
	// The plan's micro-batch fits by rubick's memory model; the Trainer's
	// search would change the global batch the job keeps.
	hi = c.remove(fHFAutoBatch, lo, hi)
	hi = c.set(fHFMicroBatch, strconv.Itoa(plan.MicroBatch), lo, hi)
	hi = c.set(fHFAccum, strconv.Itoa(plan.Accum), lo, hi)
	// The Trainer checkpoints through the model (gradient_checkpointing_enable),
	// not through the config's activation_checkpointing section.
	return c.setOptional(fHFCheckpoint, plan.Checkpoint, "true", lo, hi)
}

// rewriteAccScript gives the plan's micro-batch and accumulation to the
// script of a line that accelerate launch starts with its DeepSpeed plugin
// set by flags (accPluginErr: it has --per_device_train_batch_size).
// accelerate takes the micro-batch from the script's DataLoader, which
// such a script (the Trainer, Hugging Face's example scripts) sizes by
// that flag; the Trainer refuses an accumulation other than the plugin's,
// which setAccDeepSpeed sets. Checkpointing is set only where the line
// has the Trainer's flag: a script without it would refuse it.
func rewriteAccScript(c *cmdline, plan model.Plan, lo, hi int) int {
	hi = c.remove(fHFPerGPU, lo, hi)
	hi = c.remove(fHFAutoBatch, lo, hi)
	hi = c.set(fHFMicroBatch, strconv.Itoa(plan.MicroBatch), lo, hi)
	hi = c.set(fHFAccum, strconv.Itoa(plan.Accum), lo, hi)
	if c.has(fHFCheckpoint, lo, hi) {
		hi = c.setOptional(fHFCheckpoint, plan.Checkpoint, "true", lo, hi)
	}
	return hi
}

// setAccDeepSpeed gives accelerate's DeepSpeed plugin the plan and returns
// where its flags now end. Set by flags (cf nil), it gets the ZeRO stage,
// the optimizer's offload and the accumulation; parameter offload, which
// DeepSpeed accepts only at stage 3, is turned off below it. With a
// config (cf), whose rewritten copy is cp, accelerate fills only the
// config's "auto" values from its flags: a --deepspeed_config_file of its
// own names the copy, and a --gradient_accumulation_steps, which is also
// the Accelerator's, gets the config's.
func (c *cmdline) setAccDeepSpeed(l layout, plan model.Plan, cf *userConfig, cp *Config) int {
	lo, hi := l.launcherFlags, l.flagsEnd
	accum := strconv.Itoa(plan.Accum)
	if cf != nil {
		if cf.launcher {
			hi = c.set(fAccDSConfig, cp.Path, lo, hi)
		}
		if c.has(fAccAccum, lo, hi) {
			hi = c.set(fAccAccum, accum, lo, hi)
		}
		return hi
	}
	hi = c.set(fAccZeroStage, strconv.Itoa(plan.ZeRO), lo, hi)
	off := "none"
	if plan.Offload {
		off = "cpu"
	}
	hi = c.set(fAccOffloadOpt, off, lo, hi)
	if plan.ZeRO != 3 && c.has(fAccOffloadPar, lo, hi) {
		hi = c.set(fAccOffloadPar, "none", lo, hi)
	}
	return c.set(fAccAccum, accum, lo, hi)
}

// accPluginErr refuses a line that accelerate launch starts with its
// DeepSpeed plugin set by flags alone when rubick cannot set its
// micro-batch: accelerate has no flag for it and takes it from the
// script's DataLoader, so no plan would keep the global batch. nil for any
// other line.
func accPluginErr(c *cmdline, l layout) error {
	if !l.accDeepSpeed(c) || c.has(fAccDSConfig, l.launcherFlags, l.flagsEnd) || c.has(fHFMicroBatch, l.trainLo(), len(c.toks)) {
		return nil
	}
	return fmt.Errorf("%w: accelerate launch --use_deepspeed without --deepspeed_config_file takes the micro-batch from the script's DataLoader, "+
		"which rubick cannot size: give the script %s (as the Hugging Face Trainer and example scripts take it), "+
		"or accelerate a %s whose train_micro_batch_size_per_gpu the script sizes its DataLoader by", ErrBadInput, fHFMicroBatch.names[0], fAccDSConfig.names[0])
}

// dropStale removes the flags of a Megatron or Megatron-DeepSpeed line
// that its trainer rejects with the plan's sizes: the line was written
// for others.
func dropStale(c *cmdline, d Dialect, plan model.Plan, lo, hi int) int {
	if (c.has(fVPPLayers, lo, hi) || c.has(fVPPStages, lo, hi)) && !interleaves(c, d, plan, lo, hi) {
		// Without the interleaved schedule the optimizer step cannot
		// overlap the parameter gather: Megatron asserts it needs it.
		for _, f := range []flagSpec{fVPPLayers, fVPPStages, fOverlapPGOpt} {
			hi = c.remove(f, lo, hi)
		}
	}
	if d == MegatronDeepSpeed && plan.PP > 1 {
		// Megatron-DeepSpeed asserts PP = 1 with it.
		hi = c.remove(fNoPP, lo, hi)
	}
	if plan.TP == 1 || !plan.Checkpoint {
		// Megatron splits the recomputed layers' inputs over the TP group,
		// and asserts TP > 1 and full recompute.
		hi = c.remove(fDistSaved, lo, hi)
	}
	if plan.TP == 1 {
		// Megatron turns sequence parallelism off at TP 1, then asserts it
		// for the TP communication overlap.
		hi = c.remove(fTPCommOverlap, lo, hi)
	}
	if d == MegatronDeepSpeed && !plan.Checkpoint {
		// Older Megatron-DeepSpeed asserts --checkpoint-activations with it.
		hi = c.remove(fDistCkpt, lo, hi)
	}
	return hi
}

// interleaves reports whether the line's interleaved pipeline schedule
// (--num-layers-per-virtual-pipeline-stage or
// --num-virtual-stages-per-pipeline-rank) still runs with the plan's PP.
// Megatron-Core asserts PP > 1, or PP > 2 with
// --no-overlap-p2p-communication; Megatron-DeepSpeed asserts PP > 2 (its
// newer forks only without p2p overlap, which rubick cannot tell). With
// layers per virtual stage, the layers per pipeline stage must divide
// into them; a value rubick cannot read is left to the trainer. The
// micro-batches of a step (Accum) must be a multiple of PP: Megatron-
// DeepSpeed and Megatron-LM before its microbatch groups refuse others,
// and later ones refuse fewer than PP.
func interleaves(c *cmdline, d Dialect, plan model.Plan, lo, hi int) bool {
	minPP := 2
	if d == MegatronDeepSpeed || c.has(fNoOverlapP2P, lo, hi) {
		minPP = 3
	}
	if plan.PP < minPP || plan.Accum%plan.PP != 0 {
		return false
	}
	v, ok := c.get(fVPPLayers, lo, hi)
	if !ok {
		return true
	}
	per, err := strconv.Atoi(v)
	if err != nil || per < 1 {
		return true
	}
	v, _ = c.get(fNumLayers, lo, hi)
	layers, err := strconv.Atoi(v)
	if err != nil || layers < 1 {
		return true
	}
	// Megatron counts the embedding and the loss as layers when told to.
	for _, f := range []flagSpec{fEmbedSplit, fLossSplit} {
		if c.has(f, lo, hi) {
			layers++
		}
	}
	return layers%plan.PP == 0 && layers/plan.PP%per == 0
}

func hasAny(c *cmdline, fs []flagSpec, lo, hi int) bool {
	return slices.ContainsFunc(fs, func(f flagSpec) bool { return c.has(f, lo, hi) })
}

// checkSeqSplit refuses a line that splits sequences over a group of GPUs
// (context parallelism, DeepSpeed-Ulysses): rubick's plans have no such
// dimension, and Megatron would train with DP / N replicas, not the plan's
// DP. No plan avoids it (model.Features names what some plans avoid), so
// the line is at fault, as with a malformed flag. plan is the one to run;
// nil says what any plan would get.
func checkSeqSplit(c *cmdline, plan *model.Plan, lo, hi int) error {
	f, n, err := seqSplit(c, lo, hi)
	if err != nil || n == 1 {
		return err
	}
	trains := fmt.Sprintf("with 1/%d of each plan's data-parallel replicas", n)
	if plan != nil {
		trains = fmt.Sprintf("plan %s with dp=%d / %d", *plan, plan.DP, n)
	}
	return fmt.Errorf("%w: %s=%d: rubick's plans do not split sequences, and with it Megatron would train %s; remove the flag or set it to 1",
		ErrBadInput, f.names[0], n, trains)
}

// seqSplits are the flags that split each sequence over a group of GPUs,
// which Megatron takes out of the data-parallel replicas.
var seqSplits = []flagSpec{fCP, fDSSP}

// seqSplit returns the first of seqSplits the line sets above 1, with its
// value; n is 1 when there is none.
func seqSplit(c *cmdline, lo, hi int) (f flagSpec, n int, err error) {
	for _, f := range seqSplits {
		v, ok := c.get(f, lo, hi)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return f, 0, fmt.Errorf("%w: %s=%q is not a positive integer", ErrBadInput, f.names[0], clip(v))
		}
		if n > 1 {
			return f, n, nil
		}
	}
	return flagSpec{}, 1, nil
}

func setSizes(c *cmdline, plan model.Plan, gb, lo, hi int) int {
	hi = c.set(fTP, strconv.Itoa(plan.TP), lo, hi)
	hi = c.set(fPP, strconv.Itoa(plan.PP), lo, hi)
	hi = c.set(fMB, strconv.Itoa(plan.MicroBatch), lo, hi)
	// Written even when absent, so Megatron's default (micro-batch x DP)
	// cannot change the global batch when DP changes.
	return c.set(fGB, strconv.Itoa(gb), lo, hi)
}

func setFullRecompute(c *cmdline, on bool, lo, hi int) int {
	if !on {
		hi = c.remove(fRecGran, lo, hi)
		hi = c.remove(fRecMethod, lo, hi)
		return c.remove(fRecLayers, lo, hi)
	}
	hi = c.set(fRecGran, "full", lo, hi)
	hi = c.set(fRecMethod, "uniform", lo, hi)
	if !c.has(fRecLayers, lo, hi) {
		hi = c.set(fRecLayers, "1", lo, hi)
	}
	return hi
}

// userConfig is the DeepSpeed config a launch line names.
type userConfig struct {
	path string
	flag flagSpec
	obj  *jsonObject
	// hf marks a Hugging Face Trainer line: a DeepSpeed line whose config
	// is named by --deepspeed.
	hf bool
	// launcher marks a config named by accelerate launch's own
	// --deepspeed_config_file, among the launcher's flags.
	launcher bool
}

func configFlag(c *cmdline, lo, hi int) (string, flagSpec, bool) {
	if v, ok := c.get(fDSConfig, lo, hi); ok {
		return v, fDSConfig, true
	}
	// "--deepspeed=X" always has a value; "--deepspeed X" may be the switch
	// followed by an argument of another kind, unless X is a JSON file.
	for _, o := range c.find(fDeepSpeedHF, lo, hi) {
		if (o.inline && o.value != "") || strings.HasSuffix(o.value, ".json") {
			return o.value, fDeepSpeedHF, true
		}
	}
	return "", flagSpec{}, false
}

// cannotOf is what a line of dialect d, with or without a DeepSpeed config,
// cannot express: a plain DeepSpeed script builds its model itself and
// takes no TP or PP degree from its config, and Megatron-DeepSpeed offloads
// the optimizer only through a DeepSpeed config.
func cannotOf(d Dialect, hasConfig bool) model.Features {
	switch {
	case d == DeepSpeed:
		return model.FeatureTP | model.FeaturePP
	case d == MegatronDeepSpeed && !hasConfig:
		return model.FeatureOffload
	}
	return 0
}

// Cannot reports the dialect of a launch line and the plan features it
// cannot express, so the scheduler can keep to the plans it can: what
// Rewrite would refuse with ErrUnsupported. A line Rewrite refuses for
// every plan (one that splits sequences) is ErrBadInput.
func Cannot(argv []string, opts Options) (model.Features, Dialect, error) {
	if len(argv) == 0 {
		return 0, DialectAuto, fmt.Errorf("%w: the training command is empty", ErrBadInput)
	}
	d, err := dialectOf(argv, opts)
	if err != nil {
		return 0, DialectAuto, err
	}
	l := parseLayout(argv)
	c := &cmdline{toks: argv}
	if d != DeepSpeed {
		// Rewrite refuses such a line for every plan: say so before the
		// job starts, not at its start.
		if err := checkSeqSplit(c, nil, l.trainLo(), len(argv)); err != nil {
			return 0, d, err
		}
	}
	_, _, hasConfig := configFlag(c, l.trainLo(), len(argv))
	if d == DeepSpeed && !hasConfig {
		if err := accPluginErr(c, l); err != nil {
			return 0, d, err
		}
	}
	return cannotOf(d, hasConfig), d, nil
}

// loadConfig reads the DeepSpeed config the line l of c names; nil for a
// Megatron line, a Megatron-DeepSpeed line without one, and a line that
// accelerate launch starts with its DeepSpeed plugin set by flags.
func loadConfig(c *cmdline, d Dialect, l layout, opts Options) (*userConfig, error) {
	if d == Megatron {
		return nil, nil
	}
	path, flag, ok := configFlag(c, l.trainLo(), len(c.toks))
	onLauncher := false
	if !ok && d == DeepSpeed && l.accDeepSpeed(c) {
		if path, ok = c.get(fAccDSConfig, l.launcherFlags, l.flagsEnd); !ok {
			return nil, accPluginErr(c, l)
		}
		flag, onLauncher = fAccDSConfig, true
	}
	if !ok {
		if d == DeepSpeed {
			return nil, fmt.Errorf("%w: a DeepSpeed line needs --deepspeed_config FILE.json "+
				"(a Hugging Face Trainer line --deepspeed FILE.json), found none", ErrBadInput)
		}
		return nil, nil
	}
	if path == "" {
		return nil, fmt.Errorf("%w: %s is empty", ErrBadInput, flag.names[0])
	}
	data, err := opts.readFile(path)
	if err != nil {
		return nil, fmt.Errorf("read DeepSpeed config: %w", err)
	}
	obj, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%w: DeepSpeed config %s: %w", ErrBadInput, path, err)
	}
	hf := d == DeepSpeed && slices.Equal(flag.names, fDeepSpeedHF.names)
	return &userConfig{path: path, flag: flag, obj: obj, hf: hf, launcher: onLauncher}, nil
}

// checkGlobalBatch returns the global batch the line keeps, failing when its
// sources disagree with each other or with the plan.
func checkGlobalBatch(c *cmdline, lo, hi int, cf *userConfig, plan model.Plan, opts Options) (int, error) {
	src, n, err := statedGlobalBatch(c, lo, hi, cf, opts)
	if err != nil {
		return 0, err
	}
	want := plan.DP * plan.MicroBatch * plan.Accum
	if n > 0 && n != want {
		return 0, fmt.Errorf("%w: %s=%d but plan %s gives DP*MicroBatch*Accum = %d*%d*%d = %d",
			ErrGlobalBatch, src, n, plan, plan.DP, plan.MicroBatch, plan.Accum, want)
	}
	return want, nil
}

// statedGlobalBatch is the global batch the line, its DeepSpeed config or
// opts state, and where it was read (0 when none does); it fails when they
// disagree.
func statedGlobalBatch(c *cmdline, lo, hi int, cf *userConfig, opts Options) (string, int, error) {
	type source struct {
		name string
		v    int
	}
	var srcs []source
	if v, ok := c.get(fGB, lo, hi); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return "", 0, fmt.Errorf("%w: --global-batch-size=%q is not a positive integer", ErrBadInput, clip(v))
		}
		srcs = append(srcs, source{"--global-batch-size", n})
	}
	if cf != nil {
		n, ok, err := cf.obj.intVal("train_batch_size")
		if err != nil {
			return "", 0, fmt.Errorf("DeepSpeed config %s: %w", cf.path, err)
		}
		if ok {
			if n < 1 {
				return "", 0, fmt.Errorf("%w: DeepSpeed config %s: train_batch_size=%d must be >= 1", ErrBadInput, cf.path, n)
			}
			srcs = append(srcs, source{"train_batch_size in " + cf.path, n})
		}
	}
	if opts.GlobalBatch > 0 {
		srcs = append(srcs, source{"the job's global batch", opts.GlobalBatch})
	}
	if len(srcs) == 0 {
		return "", 0, nil
	}
	for _, s := range srcs[1:] {
		if s.v != srcs[0].v {
			return "", 0, fmt.Errorf("%w: %s=%d but %s=%d", ErrBadInput, srcs[0].name, srcs[0].v, s.name, s.v)
		}
	}
	return srcs[0].name, srcs[0].v, nil
}

// GlobalBatch is the global batch the training command argv trains with,
// as its flags, its DeepSpeed config or opts state it; 0 when none does
// (the plan's is then written into the line). With opts.GPUs, a line
// whose framework derives the batch from the world size (a Hugging Face
// Trainer, accelerate's DeepSpeed plugin, a DeepSpeed config with a
// micro-batch but no train_batch_size) gives the batch it trains with on
// that many GPUs.
func GlobalBatch(argv []string, opts Options) (int, error) {
	if len(argv) == 0 {
		return 0, fmt.Errorf("%w: the training command is empty", ErrBadInput)
	}
	ln, err := readLine(argv, opts)
	if err != nil {
		return 0, err
	}
	_, n, err := statedGlobalBatch(ln.c, ln.lo, ln.hi, ln.cf, opts)
	if err != nil || n > 0 || opts.GPUs < 1 {
		return n, err
	}
	// The batch the user meant: the script's sizes on the GPUs they asked
	// for, before any plan changes them.
	switch {
	case ln.accPlugin():
		_, n, err = inspectAccSizes(ln, opts.GPUs)
	case ln.cf != nil && ln.cf.hf:
		_, n, err = inspectHFSizes(ln, opts.GPUs)
	case ln.cf != nil && ln.d == DeepSpeed:
		n, err = dsConfigBatch(ln.cf, opts.GPUs)
	}
	return n, err
}

// dsConfigBatch is the global batch DeepSpeed trains a config without
// train_batch_size with on gpus GPUs (all data parallel in a plain
// DeepSpeed line): its micro-batch x its accumulation (default 1) x gpus;
// 0 when the config states no micro-batch either ("auto" states none).
func dsConfigBatch(cf *userConfig, gpus int) (int, error) {
	mb, ok, err := cf.obj.intVal("train_micro_batch_size_per_gpu")
	if err != nil || !ok {
		return 0, wrapConfigErr(cf, err)
	}
	accum, ok, err := cf.obj.intVal("gradient_accumulation_steps")
	if err != nil {
		return 0, wrapConfigErr(cf, err)
	}
	if !ok {
		accum = 1
	}
	if mb < 1 || accum < 1 {
		return 0, fmt.Errorf("%w: DeepSpeed config %s: train_micro_batch_size_per_gpu=%d and gradient_accumulation_steps=%d must be >= 1",
			ErrBadInput, cf.path, mb, accum)
	}
	return mb * accum * gpus, nil
}

// wrapConfigErr names the DeepSpeed config err, if any, was read from.
func wrapConfigErr(cf *userConfig, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("DeepSpeed config %s: %w", cf.path, err)
}

// line is a launch line as Inspect and GlobalBatch read it: its dialect,
// its tokens with the trainer's between lo and hi, its layout, and the
// DeepSpeed config it names (nil for none).
type line struct {
	d      Dialect
	c      *cmdline
	lo, hi int
	l      layout
	cf     *userConfig
}

// accPlugin reports a line that accelerate launch starts with its
// DeepSpeed plugin set by flags: a DeepSpeed line without a config.
func (ln line) accPlugin() bool { return ln.d == DeepSpeed && ln.cf == nil }

func readLine(argv []string, opts Options) (line, error) {
	d, err := dialectOf(argv, opts)
	if err != nil {
		return line{}, err
	}
	c := &cmdline{toks: argv}
	l := parseLayout(argv)
	cf, err := loadConfig(c, d, l, opts)
	if err != nil {
		return line{}, err
	}
	return line{d: d, c: c, lo: l.trainLo(), hi: len(argv), l: l, cf: cf}, nil
}

// defaultStepsPerPrint is the steps_per_print a plain DeepSpeed line's
// config copy gets where the user's config sets none: DeepSpeed's own
// default before 0.15.3, so the job logs as it did then, and each line,
// the time of one step, is a sample every 10 steps, enough for rubickd's
// fit (it takes a configuration's median) without a line per step in the
// job's log.
const defaultStepsPerPrint = 10

// defaultActivationCheckpointing is DeepSpeed's activation checkpointing
// section with its documented defaults, added when the plan checkpoints
// and the user's config has none.
const defaultActivationCheckpointing = `{"partition_activations":false,"cpu_checkpointing":false,"contiguous_memory_optimization":false,"synchronize_checkpoint_boundary":false,"profile":false}`

// rewriteConfig writes plan into the DeepSpeed config of a line; hf marks
// a Hugging Face Trainer line's, whose "auto" sizes the Trainer fills from
// the flags rewriteHF sets.
func rewriteConfig(cfg *jsonObject, plan model.Plan, gb int, hf bool) error {
	for _, kv := range []struct {
		k string
		v int
	}{{"train_batch_size", gb}, {"train_micro_batch_size_per_gpu", plan.MicroBatch}, {"gradient_accumulation_steps", plan.Accum}} {
		// DeepSpeed alone cannot read "auto": elsewhere the plan replaces it.
		if !hf || !cfg.isAuto(kv.k) {
			cfg.setInt(kv.k, kv.v)
		}
	}

	zo, err := cfg.object("zero_optimization")
	if err != nil {
		// Legacy configs write "zero_optimization": true; the plan replaces
		// it, and an "auto" the Trainer would not fill.
		if raw := string(cfg.vals["zero_optimization"]); raw != "true" && raw != "false" && !cfg.isAuto("zero_optimization") {
			return fmt.Errorf("%w: %w", ErrBadInput, err)
		}
		zo = nil
	}
	if zo == nil && (plan.ZeRO > 0 || cfg.has("zero_optimization")) {
		zo = newObject()
	}
	if zo != nil {
		zo.setInt("stage", plan.ZeRO)
		// The deprecated "cpu_offload" switch would offload behind the plan's back.
		zo.del("cpu_offload")
		if plan.Offload {
			off, err := zo.object("offload_optimizer")
			if err != nil && !zo.isAuto("offload_optimizer") {
				return fmt.Errorf("%w: zero_optimization.%w", ErrBadInput, err)
			}
			if off == nil {
				off = newObject()
			}
			off.setString("device", "cpu")
			if !off.has("pin_memory") {
				off.setBool("pin_memory", true)
			}
			if err := zo.setObject("offload_optimizer", off); err != nil {
				return err
			}
		} else {
			zo.del("offload_optimizer")
		}
		// DeepSpeed accepts parameter offload only at stage 3.
		if plan.ZeRO != 3 {
			zo.del("offload_param")
		}
		if err := cfg.setObject("zero_optimization", zo); err != nil {
			return err
		}
	}
	switch {
	case hf:
		// The Trainer checkpoints by its flag and ignores the section.
	case !plan.Checkpoint:
		cfg.del("activation_checkpointing")
	case !cfg.has("activation_checkpointing") || string(cfg.vals["activation_checkpointing"]) == "null":
		cfg.set("activation_checkpointing", json.RawMessage(defaultActivationCheckpointing))
	}
	return nil
}

// Expressible is the plan a dialect can express: Rewrite then Inspect give
// back Expressible(d, plan). Megatron-LM has one sharded optimizer, so ZeRO
// stages 2 and 3 read back as 1.
func Expressible(d Dialect, p model.Plan) model.Plan {
	if d == Megatron && p.ZeRO > 1 {
		p.ZeRO = 1
	}
	return p
}

// Inspect reads back the plan and global batch a launch line expresses when
// it runs on gpus GPUs: the inverse of Rewrite (see Expressible). A
// DeepSpeed config the line names is read with opts.ReadFile.
func Inspect(argv []string, gpus int, opts Options) (model.Plan, int, error) {
	ln, err := readLine(argv, opts)
	if err != nil {
		return model.Plan{}, 0, err
	}
	d, c, lo, hi, cf := ln.d, ln.c, ln.lo, ln.hi, ln.cf
	var p model.Plan
	var gb int
	switch {
	case ln.accPlugin():
		p, gb, err = inspectAccSizes(ln, gpus)
	case cf != nil && cf.hf:
		p, gb, err = inspectHFSizes(ln, gpus)
	default:
		p, gb, err = inspectSizes(ln, gpus)
	}
	if err != nil {
		return model.Plan{}, 0, err
	}

	recomputeFull := func() bool { v, _ := c.get(fRecGran, lo, hi); return v == "full" }
	var zo *jsonObject
	if cf != nil {
		if zo, err = cf.obj.object("zero_optimization"); err != nil {
			return model.Plan{}, 0, fmt.Errorf("%w: %w", ErrBadInput, err)
		}
	}
	switch d {
	case Megatron:
		if c.has(fDistOpt, lo, hi) {
			p.ZeRO = 1
		}
		p.Offload = c.has(fCPUOffload, lo, hi)
		p.Checkpoint = recomputeFull()
	case MegatronDeepSpeed:
		p.Checkpoint = c.has(fCkptAct, lo, hi) || recomputeFull()
		if p.ZeRO, err = intFlagOf(c, fZeroStage, 0, lo, hi); err != nil {
			return model.Plan{}, 0, err
		}
	case DeepSpeed:
		switch {
		case cf == nil:
			if p.Checkpoint, err = hfCheckpoint(c, lo, hi); err != nil {
				return model.Plan{}, 0, err
			}
			if p.ZeRO, err = intFlagOf(c, fAccZeroStage, accDefaultZeroStage, ln.l.launcherFlags, ln.l.flagsEnd); err != nil {
				return model.Plan{}, 0, err
			}
			off, _ := c.get(fAccOffloadOpt, ln.l.launcherFlags, ln.l.flagsEnd)
			p.Offload = off == "cpu"
		case cf.hf:
			if p.Checkpoint, err = hfCheckpoint(c, lo, hi); err != nil {
				return model.Plan{}, 0, err
			}
		default:
			p.Checkpoint = cf.obj.has("activation_checkpointing")
		}
	}
	if zo != nil {
		n, ok, err := zo.intVal("stage")
		if err != nil {
			return model.Plan{}, 0, err
		}
		if ok {
			p.ZeRO = n
		}
		off, err := zo.object("offload_optimizer")
		if err != nil {
			return model.Plan{}, 0, fmt.Errorf("%w: %w", ErrBadInput, err)
		}
		p.Offload = off != nil && off.str("device") == "cpu"
	}
	return p, gb, nil
}

// intFlagOf reads the last f in c.toks[lo:hi] as a non-negative integer;
// def when f is absent.
func intFlagOf(c *cmdline, f flagSpec, def, lo, hi int) (int, error) {
	v, ok := c.get(f, lo, hi)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s=%q is not a non-negative integer", ErrBadInput, f.names[0], clip(v))
	}
	return n, nil
}

// inspectSizes reads the parallel degrees, micro-batch, accumulation and
// global batch of a Megatron or DeepSpeed line on gpus GPUs.
func inspectSizes(ln line, gpus int) (model.Plan, int, error) {
	c, lo, hi, cf := ln.c, ln.lo, ln.hi, ln.cf
	cfgInt := func(k string) (int, bool, error) {
		if cf == nil {
			return 0, false, nil
		}
		return cf.obj.intVal(k)
	}
	p := model.Plan{}
	var gb int
	var errs []error
	collect := func(n int, err error) int { errs = append(errs, err); return n }
	p.TP = collect(intFlagOf(c, fTP, 1, lo, hi))
	p.PP = collect(intFlagOf(c, fPP, 1, lo, hi))
	p.MicroBatch = collect(intFlagOf(c, fMB, 0, lo, hi))
	gb = collect(intFlagOf(c, fGB, 0, lo, hi))
	if n, ok, err := cfgInt("train_micro_batch_size_per_gpu"); ok || err != nil {
		errs = append(errs, err)
		p.MicroBatch = n
	}
	if n, ok, err := cfgInt("train_batch_size"); (ok && gb == 0) || err != nil {
		errs = append(errs, err)
		gb = n
	}
	if err := errors.Join(errs...); err != nil {
		return model.Plan{}, 0, err
	}
	if p.TP < 1 || p.PP < 1 || gpus%(p.TP*p.PP) != 0 {
		return model.Plan{}, 0, fmt.Errorf("%w: %d GPUs are not a multiple of tp=%d x pp=%d", ErrBadInput, gpus, p.TP, p.PP)
	}
	p.DP = gpus / (p.TP * p.PP)
	if p.MicroBatch < 1 || gb < 1 {
		return model.Plan{}, 0, fmt.Errorf("%w: the line fixes no micro-batch (%d) or global batch (%d)", ErrBadInput, p.MicroBatch, gb)
	}
	if n, ok, err := cfgInt("gradient_accumulation_steps"); err != nil {
		return model.Plan{}, 0, err
	} else if ok {
		p.Accum = n
	} else if gb%(p.DP*p.MicroBatch) == 0 {
		p.Accum = gb / (p.DP * p.MicroBatch)
	} else {
		return model.Plan{}, 0, fmt.Errorf("%w: global batch %d is not a multiple of dp=%d x micro-batch=%d", ErrBadInput, gb, p.DP, p.MicroBatch)
	}
	return p, gb, nil
}

// TrainingArguments' defaults for the sizes a Hugging Face line may omit.
const (
	hfDefaultMicroBatch = 8
	hfDefaultAccum      = 1
)

// inspectHFSizes reads the sizes of a Hugging Face Trainer line on gpus
// GPUs as the Trainer sets them: its flags, else TrainingArguments'
// defaults, with the global batch flags x world size. The Trainer refuses
// a config whose concrete values differ from those, and so does this.
func inspectHFSizes(ln line, gpus int) (model.Plan, int, error) {
	c, lo, hi, cfg, path := ln.c, ln.lo, ln.hi, ln.cf.obj, ln.cf.path
	if gpus < 1 {
		return model.Plan{}, 0, fmt.Errorf("%w: %d GPUs: a Hugging Face line needs at least one", ErrBadInput, gpus)
	}
	// A Trainer line takes no tensor or pipeline degree: all GPUs are DP.
	p := model.Plan{DP: gpus, TP: 1, PP: 1}
	for _, s := range []struct {
		flag flagSpec
		def  int
		key  string
		dst  *int
	}{
		{fHFMicroBatch, hfDefaultMicroBatch, "train_micro_batch_size_per_gpu", &p.MicroBatch},
		{fHFAccum, hfDefaultAccum, "gradient_accumulation_steps", &p.Accum},
	} {
		n, from := s.def, " (HF's default)"
		if v, ok := c.get(s.flag, lo, hi); ok {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 {
				return model.Plan{}, 0, fmt.Errorf("%w: %s=%q is not a positive integer", ErrBadInput, s.flag.names[0], clip(v))
			}
			from = ""
		}
		cn, ok, err := cfg.intVal(s.key)
		if err != nil {
			return model.Plan{}, 0, fmt.Errorf("DeepSpeed config %s: %w", path, err)
		}
		if ok && cn != n {
			return model.Plan{}, 0, fmt.Errorf("%w: DeepSpeed config %s: %s=%d but %s=%d%s, which the Trainer refuses",
				ErrBadInput, path, s.key, cn, s.flag.names[0], n, from)
		}
		*s.dst = n
	}
	gb := p.DP * p.MicroBatch * p.Accum
	n, ok, err := cfg.intVal("train_batch_size")
	if err != nil {
		return model.Plan{}, 0, fmt.Errorf("DeepSpeed config %s: %w", path, err)
	}
	if ok && n != gb {
		return model.Plan{}, 0, fmt.Errorf("%w: DeepSpeed config %s: train_batch_size=%d but %d GPUs x %s=%d x %s=%d = %d, which the Trainer refuses",
			ErrBadInput, path, n, gpus, fHFMicroBatch.names[0], p.MicroBatch, fHFAccum.names[0], p.Accum, gb)
	}
	return p, gb, nil
}

// inspectAccSizes reads the sizes of a line that accelerate launch starts
// with its DeepSpeed plugin set by flags, on gpus GPUs, as accelerate runs
// it: the script's --per_device_train_batch_size; the accumulation of
// accelerate's flag, else of the script's, else none; every GPU data
// parallel.
func inspectAccSizes(ln line, gpus int) (model.Plan, int, error) {
	c, lo, hi := ln.c, ln.lo, ln.hi
	if gpus < 1 {
		return model.Plan{}, 0, fmt.Errorf("%w: %d GPUs: an accelerate line needs at least one", ErrBadInput, gpus)
	}
	p := model.Plan{DP: gpus, TP: 1, PP: 1}
	var err error
	if p.MicroBatch, err = intFlagOf(c, fHFMicroBatch, 0, lo, hi); err != nil {
		return model.Plan{}, 0, err
	}
	accum, alo, ahi := fAccAccum, ln.l.launcherFlags, ln.l.flagsEnd
	if !c.has(accum, alo, ahi) {
		accum, alo, ahi = fHFAccum, lo, hi
	}
	if p.Accum, err = intFlagOf(c, accum, 1, alo, ahi); err != nil {
		return model.Plan{}, 0, err
	}
	if p.MicroBatch < 1 || p.Accum < 1 {
		return model.Plan{}, 0, fmt.Errorf("%w: %s=%d and %s=%d must be >= 1", ErrBadInput, fHFMicroBatch.names[0], p.MicroBatch, accum.names[0], p.Accum)
	}
	return p, p.DP * p.MicroBatch * p.Accum, nil
}

// hfCheckpoint reads a Hugging Face line's --gradient_checkpointing.
func hfCheckpoint(c *cmdline, lo, hi int) (bool, error) { return hfBool(c, fHFCheckpoint, lo, hi) }

// ErrNoSamples marks a launch line whose job reports no iteration times.
var ErrNoSamples = errors.New("no iteration times")

// CheckSamples reports, wrapping ErrNoSamples, why the line's job would
// report no iteration times to rubickd, nil when no reason is known: a
// Hugging Face Trainer line with --disable_tqdm on has no progress bar,
// the only source of its times (accelerate, through which the Trainer
// builds its DeepSpeed engine, turns DeepSpeed's step lines off). rubickd
// then learns nothing from the job beyond its profiling runs, which show
// the bar. A line accelerate launches with its DeepSpeed plugin and no
// Trainer --deepspeed of its own has neither: accelerate sets
// steps_per_print to infinity in every config it builds or reads, and
// neither a config key nor an environment variable undoes that. Its
// profiling runs are refused (RewriteProfile), so rubickd learns nothing
// from it at all.
func CheckSamples(argv []string, opts Options) error {
	if len(argv) == 0 {
		return nil
	}
	d, err := dialectOf(argv, opts)
	if err != nil || d != DeepSpeed {
		return nil
	}
	c := &cmdline{toks: argv}
	l := parseLayout(argv)
	lo, hi := l.trainLo(), len(argv)
	if _, flag, ok := configFlag(c, lo, hi); !ok || !slices.Equal(flag.names, fDeepSpeedHF.names) {
		if l.accDeepSpeed(c) {
			return fmt.Errorf("%w: accelerate launch %s has DeepSpeed print no iteration times (accelerate sets steps_per_print "+
				"to infinity whatever the config says), so rubickd learns nothing from the job, nor profiles it: "+
				"a plain DeepSpeed script (deepspeed.initialize with --deepspeed_config) or a Hugging Face Trainer "+
				"given --deepspeed X.json reports them", ErrNoSamples, fAccUseDS.names[0])
		}
		return nil
	}
	if off, err := hfBool(c, fHFDisableTqdm, lo, hi); err == nil && off {
		return fmt.Errorf("%w: %s turns off the Hugging Face Trainer's progress bar, the only source of its iteration times, "+
			"so rubickd learns nothing from the job's training: drop it", ErrNoSamples, fHFDisableTqdm.names[0])
	}
	return nil
}

// hfBool reads a bool TrainingArguments field f of a Hugging Face line: on
// alone, else the value as HfArgumentParser's string_to_bool reads it; the
// last occurrence counts. Absent, it is false.
func hfBool(c *cmdline, f flagSpec, lo, hi int) (bool, error) {
	occ := c.find(f, lo, hi)
	if len(occ) == 0 {
		return false, nil
	}
	o := occ[len(occ)-1]
	if !o.inline && o.n == 1 {
		return true, nil
	}
	switch strings.ToLower(o.value) {
	case "yes", "true", "t", "y", "1":
		return true, nil
	case "no", "false", "f", "n", "0":
		return false, nil
	}
	return false, fmt.Errorf("%w: %s=%q is not a boolean (yes/no, true/false, t/f, y/n, 1/0)", ErrBadInput, f.names[0], clip(o.value))
}
