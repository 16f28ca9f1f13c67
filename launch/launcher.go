package launch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Flags of the per-node launchers that rubick-srun replaces: the nodes and
// GPUs they were written for are not the ones the plan runs on.
var (
	fStandalone   = switchFlag("--standalone")
	fRdzvBackend  = valued("--rdzv_backend", "--rdzv-backend")
	fRdzvEndpoint = valued("--rdzv_endpoint", "--rdzv-endpoint")
	fRdzvID       = valued("--rdzv_id", "--rdzv-id")
	fMasterAddr   = valued("--master_addr", "--master-addr")
	fMasterPort   = valued("--master_port", "--master-port")
	fNodeRank     = valued("--node_rank", "--node-rank")
	fInclude      = valued("--include", "-i")
	fExclude      = valued("--exclude", "-e")

	// accelerate launch's: --num_processes counts the GPUs of every node.
	fAccProcs    = valued("--num_processes", "--num-processes")
	fAccMachines = valued("--num_machines", "--num-machines")
	fAccRank     = valued("--machine_rank", "--machine-rank")
	fAccMainIP   = valued("--main_process_ip", "--main-process-ip")
	fAccMainPort = valued("--main_process_port", "--main-process-port")
	fAccRdzv     = valued("--rdzv_backend", "--rdzv-backend")
	fAccGPUIDs   = valued("--gpu_ids", "--gpu-ids")
	fAccSameNet  = switchFlag("--same_network", "--same-network")

	// accelerate launch's DeepSpeed plugin: --use_deepspeed, with a
	// DeepSpeed config file or the settings accelerate builds one from.
	// Given a file, accelerate fills only its "auto" values from them.
	fAccUseDS      = switchFlag("--use_deepspeed", "--use-deepspeed")
	fAccDSConfig   = valued("--deepspeed_config_file", "--deepspeed-config-file")
	fAccZeroStage  = valued("--zero_stage", "--zero-stage")
	fAccOffloadOpt = valued("--offload_optimizer_device", "--offload-optimizer-device")
	fAccOffloadPar = valued("--offload_param_device", "--offload-param-device")
	fAccAccum      = valued("--gradient_accumulation_steps", "--gradient-accumulation-steps")
	// On several machines the plugin starts the other nodes' workers
	// itself, over pdsh by default; "standard" has torchrun do it, one
	// launcher per node, as srun starts them.
	fAccMultinode = valued("--deepspeed_multinode_launcher", "--deepspeed-multinode-launcher")
)

// accelerate's defaults for the plugin's settings the line leaves out.
const accDefaultZeroStage = 2

// sizeLauncher gives the line's per-node launcher the plan's nodes and GPUs
// per node. Its flags precede the script, so the indices of the training
// flags after it shift; it runs last.
func (c *cmdline) sizeLauncher(l layout, opts Options) error {
	if l.launcherFlags < 0 || opts.Nodes <= 0 || opts.GPUsPerNode <= 0 {
		return nil
	}
	nodes, gpn := strconv.Itoa(opts.Nodes), strconv.Itoa(opts.GPUsPerNode)
	lo, hi := l.launcherFlags, l.flagsEnd
	host, port, _ := strings.Cut(opts.Rendezvous, ":")
	switch l.launcher {
	case LauncherTorchrun:
		hi = c.set(fNnodes, nodes, lo, hi)
		hi = c.set(fNprocPerNode, gpn, lo, hi)
		if opts.Nodes == 1 {
			c.torchrunPort(port, lo, hi)
			return nil
		}
		// srun starts one torchrun per node, every one with the same
		// flags: they meet at a c10d rendezvous on the first node. A
		// standalone or fixed-rank launch (--node_rank differs per node)
		// would not.
		if opts.Rendezvous == "" {
			return fmt.Errorf("%w: torchrun on %d nodes needs a rendezvous host (the job's first node, from SLURM_JOB_NODELIST)", ErrBadInput, opts.Nodes)
		}
		for _, f := range []flagSpec{fStandalone, fMasterAddr, fMasterPort, fNodeRank} {
			hi = c.remove(f, lo, hi)
		}
		hi = c.set(fRdzvBackend, "c10d", lo, hi)
		hi = c.set(fRdzvEndpoint, opts.Rendezvous, lo, hi)
		if opts.RendezvousID != "" {
			c.set(fRdzvID, opts.RendezvousID, lo, hi)
		}
	case LauncherAccelerate:
		// The step's GPUs are the ones Slurm gave it, numbered from 0.
		hi = c.remove(fAccGPUIDs, lo, hi)
		hi = c.set(fAccMachines, nodes, lo, hi)
		hi = c.set(fAccProcs, strconv.Itoa(opts.Nodes*opts.GPUsPerNode), lo, hi)
		ok := host != "" && port != ""
		if opts.Nodes == 1 {
			if ok && !c.has(fAccMainPort, lo, hi) {
				// Its default, 29500, is every job's: two on one node
				// would collide.
				c.set(fAccMainPort, port, lo, hi)
			}
			return nil
		}
		// One accelerate launch per node, all with the same flags, meeting
		// at a c10d rendezvous on the first node, as torchrun's do; a
		// fixed --machine_rank would differ per node, --same_network
		// would make it a static rendezvous that needs one, and the
		// DeepSpeed plugin would reach the other nodes over pdsh.
		if !ok {
			return fmt.Errorf("%w: accelerate launch on %d nodes needs a rendezvous host:port (the job's first node, from SLURM_JOB_NODELIST), got %q", ErrBadInput, opts.Nodes, opts.Rendezvous)
		}
		hi = c.remove(fAccRank, lo, hi)
		hi = c.remove(fAccSameNet, lo, hi)
		if c.has(fAccUseDS, lo, hi) {
			hi = c.set(fAccMultinode, "standard", lo, hi)
		}
		hi = c.set(fAccRdzv, "c10d", lo, hi)
		hi = c.set(fAccMainIP, host, lo, hi)
		c.set(fAccMainPort, port, lo, hi)
	case LauncherDeepSpeed:
		if opts.Nodes > 1 {
			// It starts every node's workers itself, over ssh from a
			// hostfile; srun's one launcher per node would start them all
			// once per node.
			return fmt.Errorf("%w: the deepspeed launcher cannot run a plan on %d nodes as one launcher per node; leave --launcher at auto, and rubick-srun starts its workers through srun, one per GPU",
				ErrBadInput, opts.Nodes)
		}
		// The step's GPUs are the ones Slurm gave it, numbered from 0;
		// DeepSpeed refuses --include/--exclude beside --num_gpus.
		hi = c.remove(fInclude, lo, hi)
		hi = c.remove(fExclude, lo, hi)
		hi = c.set(fNumNodes, nodes, lo, hi)
		hi = c.set(fNumGPUs, gpn, lo, hi)
		if port != "" && !c.has(fMasterPort, lo, hi) {
			// Its default, 29500, is every job's: two on one node would
			// collide.
			c.set(fMasterPort, port, lo, hi)
		}
	}
	return nil
}

// LauncherWorld is the processes a line's per-node launcher starts as
// written: nodes, its --nnodes, --num_nodes or --num_machines (1 when
// absent), and perNode processes on each (--nproc_per_node, --num_gpus,
// or --num_processes over the machines). ok is false for a line without a
// launcher, or one that leaves the count to the node ("--nproc_per_node
// gpu", no --num_gpus) or states a value rubick cannot read.
func LauncherWorld(argv []string) (nodes, perNode int, ok bool) {
	l := parseLayout(argv)
	if l.launcherFlags < 0 {
		return 0, 0, false
	}
	c := cmdline{toks: argv}
	lo, hi := l.launcherFlags, l.flagsEnd
	var fNodes, fProcs flagSpec
	switch l.launcher {
	case LauncherTorchrun:
		fNodes, fProcs = fNnodes, fNprocPerNode
	case LauncherDeepSpeed:
		fNodes, fProcs = fNumNodes, fNumGPUs
	case LauncherAccelerate:
		fNodes, fProcs = fAccMachines, fAccProcs
	default:
		return 0, 0, false
	}
	count := func(f flagSpec, def string) int {
		v, ok := c.get(f, lo, hi)
		if !ok {
			v = def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0
		}
		return n
	}
	// An elastic range ("--nnodes 1:4") is not read.
	nodes, perNode = count(fNodes, "1"), count(fProcs, "")
	if l.launcher == LauncherAccelerate {
		// Its --num_processes counts every machine's.
		if nodes == 0 || perNode%nodes != 0 {
			return 0, 0, false
		}
		perNode /= nodes
	}
	return nodes, perNode, nodes > 0 && perNode > 0
}

// torchrunPort gives a one-node torchrun in toks[lo:hi] the rendezvous
// port ("" for none), where it would otherwise meet at a port every
// job's torchrun takes: 29500 (static rendezvous, master_port) or 29400
// (c10d without an endpoint), so two jobs on one node would collide.
// --standalone picks a free port itself, and an endpoint or port of the
// line's own is kept.
func (c *cmdline) torchrunPort(port string, lo, hi int) {
	if port == "" || c.has(fStandalone, lo, hi) || c.has(fRdzvEndpoint, lo, hi) {
		return
	}
	if b, _ := c.get(fRdzvBackend, lo, hi); b != "" && b != "static" {
		c.set(fRdzvEndpoint, "localhost:"+port, lo, hi)
		return
	}
	if !c.has(fMasterPort, lo, hi) {
		c.set(fMasterPort, port, lo, hi)
	}
}

// The deepspeed launcher's own flags that say how it starts the script.
var (
	fDSNoPython   = switchFlag("--no_python", "--no-python")
	fDSNoLocalRnk = switchFlag("--no_local_rank", "--no-local-rank")
)

// Unlaunched is a deepspeed launcher line turned into the command one of
// its workers runs, for srun to start once per GPU.
type Unlaunched struct {
	Argv []string
	// LocalRankAt is where the worker's "--local_rank=N" goes in Argv, as
	// the launcher passes it (right after the script); -1 for none
	// (--no_local_rank).
	LocalRankAt int
}

// WithoutLauncher turns a line that starts with the deepspeed launcher
// ("deepspeed [flags] train.py ..." or "python -m deepspeed.launcher.runner
// ...") into what the launcher runs on each GPU: python -u train.py ...
// (python -u -m pkg.train ... for a --module line), with python the
// interpreter the launcher runs under. The launcher starts
// the workers of other nodes over ssh from a hostfile; under srun, which
// starts every task itself, a plan on several nodes runs this way.
func WithoutLauncher(argv []string, python string) (Unlaunched, error) {
	l := parseLayout(argv)
	if l.launcher != LauncherDeepSpeed || l.launcherFlags < 0 {
		return Unlaunched{}, fmt.Errorf("%w: %q does not start a .py script or module with the deepspeed launcher", ErrBadInput, clip(strings.Join(argv, " ")))
	}
	c := cmdline{toks: argv}
	lo, hi := l.launcherFlags, l.flagsEnd
	if l.launcherFlags > l.wrap+1 {
		python = argv[l.wrap] // "python -m deepspeed.launcher.runner": its own
	}
	// The wrappers stay: the workers run inside them as the launcher did.
	out := slices.Clone(argv[:l.wrap])
	switch module := l.script > l.flagsEnd; {
	case module && c.has(fDSNoPython, lo, hi):
		return Unlaunched{}, fmt.Errorf("%w: the deepspeed launcher refuses --no_python with --module", ErrBadInput)
	case module:
		out = append(out, python, "-u", "-m", argv[l.script])
	case c.has(fDSNoPython, lo, hi):
		out = append(out, argv[l.script])
	default:
		out = append(out, python, "-u", argv[l.script])
	}
	u := Unlaunched{LocalRankAt: len(out)}
	if c.has(fDSNoLocalRnk, lo, hi) {
		u.LocalRankAt = -1
	}
	u.Argv = append(out, argv[l.script+1:]...)
	return u, nil
}
