package launch

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Sentinel errors callers branch on.
var (
	// ErrUnknownDialect reports a launch line in none of the known dialects.
	ErrUnknownDialect = errors.New("unknown launch dialect")
	// ErrGlobalBatch reports a plan whose DP*MicroBatch*Accum differs from
	// the global batch the launch line or its config fixes.
	ErrGlobalBatch = errors.New("plan changes the global batch")
	// ErrUnsupported reports a plan the dialect cannot express.
	ErrUnsupported = errors.New("plan not expressible in this dialect")
	// ErrBadInput reports a malformed launch line, config, plan or option;
	// the message names the field and its value.
	ErrBadInput = errors.New("bad input")
)

// Dialect is the framework whose flags a launch line uses.
type Dialect string

// Dialects. DialectAuto asks Rewrite to detect it.
const (
	DialectAuto Dialect = ""
	// Megatron is Megatron-LM (core): pretrain_gpt.py and its flags.
	Megatron Dialect = "megatron"
	// MegatronDeepSpeed is Megatron-DeepSpeed: Megatron flags plus
	// --deepspeed / --deepspeed_config / --zero-stage.
	MegatronDeepSpeed Dialect = "megatron-deepspeed"
	// DeepSpeed is a plain DeepSpeed script configured by a JSON file
	// (--deepspeed_config), or a Hugging Face Trainer script given one with
	// --deepspeed, which also takes the plan's sizes as TrainingArguments.
	DeepSpeed Dialect = "deepspeed"
)

// ParseDialect parses a dialect name; "" and "auto" mean DialectAuto.
func ParseDialect(s string) (Dialect, error) {
	switch d := Dialect(s); d {
	case "auto":
		return DialectAuto, nil
	case DialectAuto, Megatron, MegatronDeepSpeed, DeepSpeed:
		return d, nil
	}
	return "", fmt.Errorf("%w: dialect=%q, want auto, %s, %s or %s", ErrBadInput, s, Megatron, MegatronDeepSpeed, DeepSpeed)
}

// Launchers that start one process per GPU themselves.
const (
	LauncherNone       = ""
	LauncherTorchrun   = "torchrun"
	LauncherDeepSpeed  = "deepspeed"
	LauncherAccelerate = "accelerate" // accelerate launch, torchrun underneath
)

// layout locates the parts of a launch line: the commands it runs inside
// (env, a container's exec), an optional per-node launcher with its own
// flags, then the training program and its flags.
type layout struct {
	// wrap is where the command inside the line's wrappers starts; 0 for
	// a line without one.
	wrap int
	// container is whether a wrapper runs the command in a container,
	// whose files are not the host's.
	container bool
	launcher  string
	// launcherFlags is where the launcher's flags start (after "torchrun"
	// or "python -m torch.distributed.run"); -1 when they cannot be edited.
	launcherFlags int
	// flagsEnd is where they end: the script, or the launcher's module
	// switch before it ("torchrun ... -m package.module").
	flagsEnd int
	// script is the index of the training script or program; its flags
	// follow it.
	script int
}

// trainLo is the first index of the training program's flags.
func (l layout) trainLo() int { return l.script + 1 }

// accDeepSpeed reports whether the line is accelerate launch with its
// DeepSpeed plugin (--use_deepspeed among accelerate's own flags).
func (l layout) accDeepSpeed(c *cmdline) bool {
	return l.launcher == LauncherAccelerate && l.launcherFlags >= 0 && c.has(fAccUseDS, l.launcherFlags, l.flagsEnd)
}

func parseLayout(argv []string) layout {
	l := layout{}
	if len(argv) == 0 {
		return l
	}
	w, container := wrapperEnd(argv)
	l.wrap, l.container = w, container
	i := w
	switch base := filepath.Base(argv[w]); {
	case base == "torchrun":
		l.launcher, i = LauncherTorchrun, w+1
	case base == "deepspeed":
		l.launcher, i = LauncherDeepSpeed, w+1
	case base == "accelerate" && len(argv) > w+1 && argv[w+1] == "launch":
		l.launcher, i = LauncherAccelerate, w+2
	case strings.HasPrefix(base, "python"):
		for j := w + 1; j+1 < len(argv); j++ {
			if argv[j] != "-m" {
				continue
			}
			switch argv[j+1] {
			case "torch.distributed.run", "torch.distributed.launch":
				l.launcher, i = LauncherTorchrun, j+2
			case "deepspeed.launcher.runner":
				l.launcher, i = LauncherDeepSpeed, j+2
			case "accelerate.commands.launch":
				l.launcher, i = LauncherAccelerate, j+2
			default:
				// "python -m package.module": the module is the program.
				l.launcherFlags, l.flagsEnd, l.script = w, j, j+1
				return l
			}
			break
		}
	}
	l.launcherFlags = i
	for j := i; j < len(argv); j++ {
		if strings.HasSuffix(argv[j], ".py") {
			l.flagsEnd, l.script = j, j
			return l
		}
		if l.launcher != LauncherNone && isModuleSwitch(argv[j]) && j+1 < len(argv) {
			// "torchrun ... -m package.module": the launcher's switch
			// makes the module its program, ending the launcher's flags.
			l.flagsEnd, l.script = j, j+1
			return l
		}
	}
	// No script file: the program is the first inside the wrappers, or,
	// after a launcher, an argument we cannot tell from the launcher's own
	// flags, which are then left alone.
	l.script = max(i-1, w)
	l.launcherFlags, l.flagsEnd = -1, l.script
	return l
}

// isModuleSwitch reports the switch of torchrun, the deepspeed launcher
// and accelerate launch that runs a module instead of a script.
func isModuleSwitch(tok string) bool { return tok == "-m" || tok == "--module" }

// Flags rubick reads or writes. Megatron spells them with dashes,
// DeepSpeed's launchers accept both spellings of theirs.
var (
	fTP          = valued("--tensor-model-parallel-size")
	fPP          = valued("--pipeline-model-parallel-size")
	fMB          = valued("--micro-batch-size")
	fGB          = valued("--global-batch-size")
	fRecGran     = valued("--recompute-granularity")
	fRecMethod   = valued("--recompute-method")
	fRecLayers   = valued("--recompute-num-layers")
	fRecAct      = switchFlag("--recompute-activations")
	fCkptAct     = switchFlag("--checkpoint-activations")
	fDSActCkpt   = switchFlag("--deepspeed-activation-checkpointing")
	fDistOpt     = switchFlag("--use-distributed-optimizer")
	fCPUOffload  = switchFlag("--optimizer-cpu-offload")
	fZeroStage   = valued("--zero-stage")
	fDSConfig    = valued("--deepspeed_config", "--deepspeed-config")
	fDeepSpeed   = switchFlag("--deepspeed")
	fDeepSpeedHF = valued("--deepspeed") // "--deepspeed ds.json" or "--deepspeed=ds.json" (Hugging Face Trainer)
	fLoad        = valued("--load")
	fSave        = valued("--save")
	fNumLayers   = valued("--num-layers")
	fCP          = valued("--context-parallel-size")
	fDSSP        = valued("--ds-sequence-parallel-size") // Megatron-DeepSpeed's Ulysses

	// Megatron's flags that load only part of --load's checkpoint: the
	// weights, without the iteration, optimizer or RNG state a resumed
	// job needs from its own.
	loadPartly = []flagSpec{switchFlag("--finetune"), switchFlag("--no-load-optim"), switchFlag("--no-load-rng")}

	// Flags that are valid only with some of the sizes and switches the
	// plan rewrites.
	fPrecAware     = switchFlag("--use-precision-aware-optimizer")
	fOverlapPG     = switchFlag("--overlap-param-gather")
	fOverlapPGOpt  = switchFlag("--overlap-param-gather-with-optimizer-step")
	fCPUOptimizer  = switchFlag("--cpu-optimizer")
	fVPPLayers     = valued("--num-layers-per-virtual-pipeline-stage")
	fVPPStages     = valued("--num-virtual-stages-per-pipeline-rank")
	fNoOverlapP2P  = switchFlag("--no-overlap-p2p-communication")
	fTPCommOverlap = switchFlag("--tp-comm-overlap")
	fEmbedSplit    = switchFlag("--account-for-embedding-in-pipeline-split")
	fLossSplit     = switchFlag("--account-for-loss-in-pipeline-split")
	fNoPP          = switchFlag("--no-pipeline-parallel")
	fDistSaved     = switchFlag("--distribute-saved-activations")
	fDistCkpt      = switchFlag("--distribute-checkpointed-activations")
	// The precision-aware optimizer's state and gradient types.
	fOptDtypes = []flagSpec{valued("--main-grads-dtype"), valued("--main-params-dtype"),
		valued("--exp-avg-dtype"), valued("--exp-avg-sq-dtype")}

	// Hugging Face TrainingArguments the plan sets. HfArgumentParser takes
	// each field's name with underscores and with dashes.
	fHFMicroBatch = valued("--per_device_train_batch_size", "--per-device-train-batch-size")
	fHFAccum      = valued("--gradient_accumulation_steps", "--gradient-accumulation-steps")
	// Deprecated; where TrainingArguments still has it, it overrides the
	// per-device batch of the dataloader but not of the DeepSpeed config.
	fHFPerGPU = valued("--per_gpu_train_batch_size", "--per-gpu-train-batch-size")
	// A bool field: on alone, or given a value ("--gradient_checkpointing
	// True"), since HfArgumentParser makes bools optional-valued.
	fHFCheckpoint = valued("--gradient_checkpointing", "--gradient-checkpointing")
	// A bool field too: the Trainer halves the per-device batch at an
	// out-of-memory error and trains on at the smaller global batch.
	fHFAutoBatch = valued("--auto_find_batch_size", "--auto-find-batch-size")
	// Where the Trainer writes: checkpoints, logs and the saved model.
	fHFOutputDir    = valued("--output_dir", "--output-dir")
	fHFLoggingDir   = valued("--logging_dir", "--logging-dir")
	fHFSaveStrategy = valued("--save_strategy", "--save-strategy")
	fHFResume       = valued("--resume_from_checkpoint", "--resume-from-checkpoint")
	fHFBestAtEnd    = valued("--load_best_model_at_end", "--load-best-model-at-end")
	// The main process's log level, which the Trainer gives DeepSpeed's
	// logger too.
	fHFLogLevel = valued("--log_level", "--log-level")
	// The trackers the Trainer logs to: one name ("wandb", "all",
	// "none"), or several after one flag where the field is a list
	// (nargs="+"). Unset, it is "all" before transformers 5: every
	// tracker installed.
	fHFReportTo = valued("--report_to", "--report-to")
	// A bool field: the Trainer's progress bar, rubick-srun's only source
	// of its iteration times, is off when true (on alone).
	fHFDisableTqdm = valued("--disable_tqdm", "--disable-tqdm")
	// A bool field: the Trainer uploads the output directory to the
	// Hugging Face Hub at each save and at the end of training.
	fHFPushToHub = valued("--push_to_hub", "--push-to-hub")

	fNprocPerNode = valued("--nproc_per_node", "--nproc-per-node")
	fNnodes       = valued("--nnodes")
	fNumGPUs      = valued("--num_gpus", "--num-gpus")
	fNumNodes     = valued("--num_nodes", "--num-nodes")

	megatronSignals = []flagSpec{fTP, fPP, fMB, fGB, fRecGran, fRecAct, fCkptAct, fDistOpt}
	// Megatron requires all three to define its model; any script may
	// take one of them (or --train-iters, --seq-length) for its own.
	megatronModel = []flagSpec{fNumLayers, valued("--hidden-size"), valued("--num-attention-heads")}
	// fDeepSpeedHF also finds "--deepspeed=ds.json", which the switch does not.
	deepspeedSignals = []flagSpec{fDeepSpeed, fDeepSpeedHF, fDSConfig, fZeroStage}
)

// Detect tells the dialect of a launch line: Megatron flags (its parallel
// sizes, batch or recompute flags, or the three that define its model) or
// a pretrain_*.py script make it Megatron; DeepSpeed flags or the deepspeed
// launcher make it DeepSpeed; both make it Megatron-DeepSpeed. A Hugging
// Face Trainer line (--deepspeed FILE) is DeepSpeed, and so is a line
// without Megatron flags that accelerate launch starts with its DeepSpeed
// plugin (--use_deepspeed).
func Detect(argv []string) (Dialect, error) {
	l := parseLayout(argv)
	c := cmdline{toks: argv}
	lo, hi := l.trainLo(), len(argv)
	megatron := l.script < len(argv) && strings.HasPrefix(programName(argv[l.script]), "pretrain_")
	defines := true
	for _, f := range megatronModel {
		defines = defines && c.has(f, lo, hi)
	}
	megatron = megatron || defines || hasAny(&c, megatronSignals, lo, hi)
	// accelerate's DeepSpeed plugin serves a script that trains through
	// its Accelerator; a Megatron script builds its own engine.
	ds := l.launcher == LauncherDeepSpeed || (!megatron && l.accDeepSpeed(&c))
	for _, f := range deepspeedSignals {
		ds = ds || c.has(f, lo, hi)
	}
	switch {
	case megatron && ds:
		return MegatronDeepSpeed, nil
	case megatron:
		return Megatron, nil
	case ds:
		return DeepSpeed, nil
	}
	return "", fmt.Errorf("%w: %q has neither Megatron nor DeepSpeed flags; pass the dialect explicitly", ErrUnknownDialect, clip(strings.Join(argv, " ")))
}

// programName is the name of a launch line's program: a script's file
// name, or the last part of a module's dotted path (megatron.pretrain_gpt).
func programName(prog string) string {
	base := filepath.Base(prog)
	if strings.HasSuffix(base, ".py") {
		return base
	}
	return base[strings.LastIndex(base, ".")+1:]
}

// DetectLauncher names the per-node launcher the line starts with
// (LauncherTorchrun, LauncherDeepSpeed, LauncherAccelerate) or LauncherNone.
func DetectLauncher(argv []string) string { return parseLayout(argv).launcher }

// clip bounds user-controlled text quoted in error messages.
func clip(s string) string {
	s = ShowUnresolved(s)
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}
