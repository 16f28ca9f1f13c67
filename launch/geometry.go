package launch

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/rubick-sched/rubick/model"
)

// Mode is how srun starts the training processes.
type Mode string

// Modes.
const (
	// ModeAuto picks ModePerNode for lines that start with a per-node
	// launcher (torchrun, deepspeed) and ModePerGPU otherwise.
	ModeAuto Mode = ""
	// ModePerGPU: srun starts one task per GPU, as Megatron expects when it
	// takes its rank from SLURM_PROCID and its device from SLURM_LOCALID.
	ModePerGPU Mode = "gpu"
	// ModePerNode: srun starts one task per node; the launcher in it
	// (torchrun, deepspeed) starts one process per GPU.
	ModePerNode Mode = "node"
	// ModeDirect runs the command without srun, on the batch host only.
	ModeDirect Mode = "direct"
)

// ParseMode parses a mode name; "" and "auto" mean ModeAuto.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "auto":
		return ModeAuto, nil
	case ModeAuto, ModePerGPU, ModePerNode, ModeDirect:
		return m, nil
	}
	return "", fmt.Errorf("%w: launcher mode=%q, want auto, %s, %s or %s", ErrBadInput, s, ModePerGPU, ModePerNode, ModeDirect)
}

// GPUBind is how the GPUs of a node are handed to its tasks.
type GPUBind string

// GPU bindings.
const (
	// BindShared gives every task of a node all the node's GPUs
	// (--gres=gpu:N); each rank picks its own by local rank. NCCL's
	// intra-node peer-to-peer paths need the GPUs visible to each other.
	BindShared GPUBind = "shared"
	// BindPerTask gives each task exactly one GPU (--gpus-per-task=1).
	BindPerTask GPUBind = "per-task"
)

// ParseGPUBind parses a binding name.
func ParseGPUBind(s string) (GPUBind, error) {
	switch b := GPUBind(s); b {
	case BindShared, BindPerTask:
		return b, nil
	}
	return "", fmt.Errorf("%w: gpu binding=%q, want %s or %s", ErrBadInput, s, BindShared, BindPerTask)
}

// Alloc is what Slurm gave the job, as its environment says.
type Alloc struct {
	// Nodes is SLURM_JOB_NUM_NODES.
	Nodes int
	// GPUsOnNode is SLURM_GPUS_ON_NODE (0 when unknown).
	GPUsOnNode int
	// CPUsOnNode is SLURM_CPUS_ON_NODE (0 when unknown): the batch host's.
	CPUsOnNode int
	// MinCPUsOnNode is the fewest CPUs any node of the job has, from
	// SLURM_JOB_CPUS_PER_NODE; 0 when unknown, as if every node had
	// CPUsOnNode.
	MinCPUsOnNode int
}

// cpusPerNode is the CPUs a step may take on each node of the job: srun
// gives every task the same --cpus-per-task, so the node with the fewest
// bounds them all (a share of the batch host's more would not fit there,
// and srun would refuse the step).
func (a Alloc) cpusPerNode() int {
	if a.MinCPUsOnNode > 0 && (a.CPUsOnNode == 0 || a.MinCPUsOnNode < a.CPUsOnNode) {
		return a.MinCPUsOnNode
	}
	return a.CPUsOnNode
}

// GeometryOptions tune PlanGeometry.
type GeometryOptions struct {
	Mode Mode
	Bind GPUBind
	// CPUsPerTask overrides the CPUs per task; 0 divides the node's CPUs
	// among its tasks.
	CPUsPerTask int
	// Launcher is the per-node launcher of the line (DetectLauncher).
	Launcher string
	// SrunExtra are the job's own srun options for every step
	// (CheckSrunExtra).
	SrunExtra []string
}

// Geometry is the srun task layout a plan needs.
type Geometry struct {
	Mode         Mode
	Bind         GPUBind
	Nodes        int
	GPUsPerNode  int
	TasksPerNode int
	// CPUsPerTask is 0 when unknown (srun's default then applies).
	CPUsPerTask int
	// BindCores pins each task to its cores: ZeRO-Offload runs the optimizer
	// step on the CPU, where migrating threads cost throughput.
	BindCores bool
	// Extra are the job's own srun options, after the geometry's.
	Extra []string
}

// PlanGeometry computes the task layout of plan on alloc. The plan's GPUs
// must spread evenly over the allocated nodes and fit on each.
func PlanGeometry(plan model.Plan, alloc Alloc, opts GeometryOptions) (Geometry, error) {
	if alloc.Nodes < 1 {
		return Geometry{}, fmt.Errorf("%w: SLURM_JOB_NUM_NODES=%d must be >= 1", ErrBadInput, alloc.Nodes)
	}
	g := plan.GPUs()
	if g < 1 || g%alloc.Nodes != 0 {
		return Geometry{}, fmt.Errorf("%w: plan %s needs %d GPUs, which do not spread evenly over SLURM_JOB_NUM_NODES=%d nodes", ErrBadInput, plan, g, alloc.Nodes)
	}
	geo := Geometry{Mode: opts.Mode, Bind: opts.Bind, Nodes: alloc.Nodes, GPUsPerNode: g / alloc.Nodes, BindCores: plan.Offload,
		Extra: opts.SrunExtra}
	if alloc.GPUsOnNode > 0 && geo.GPUsPerNode > alloc.GPUsOnNode {
		return Geometry{}, fmt.Errorf("%w: plan %s needs %d GPUs per node but SLURM_GPUS_ON_NODE=%d", ErrBadInput, plan, geo.GPUsPerNode, alloc.GPUsOnNode)
	}
	if geo.Mode == ModeAuto {
		geo.Mode = ModePerGPU
		if opts.Launcher != LauncherNone {
			geo.Mode = ModePerNode
		}
	}
	if geo.Bind == "" {
		geo.Bind = BindShared
	}
	if geo.Mode == ModePerNode && geo.Bind == BindPerTask {
		return Geometry{}, fmt.Errorf("%w: gpu binding=%s needs launcher mode %s, got %s", ErrBadInput, BindPerTask, ModePerGPU, geo.Mode)
	}
	switch geo.Mode {
	case ModePerGPU:
		geo.TasksPerNode = geo.GPUsPerNode
	case ModePerNode, ModeDirect:
		geo.TasksPerNode = 1
	}
	if geo.Mode == ModeDirect && geo.Nodes > 1 {
		return Geometry{}, fmt.Errorf("%w: launcher mode %s runs on the batch host only, but the job has %d nodes", ErrBadInput, ModeDirect, geo.Nodes)
	}
	geo.CPUsPerTask = opts.CPUsPerTask
	if cpn := alloc.cpusPerNode(); geo.CPUsPerTask == 0 && cpn > 0 {
		geo.CPUsPerTask = max(cpn/geo.TasksPerNode, 1)
	}
	return geo, nil
}

// Tasks is the total number of tasks.
func (g Geometry) Tasks() int { return g.Nodes * g.TasksPerNode }

// Placement is the GPUs per node the plan runs on.
func (g Geometry) Placement() model.Placement {
	p := make(model.Placement, g.Nodes)
	for i := range p {
		p[i] = g.GPUsPerNode
	}
	return p
}

// SrunArgs is the srun command (without the training command) for g, or
// nil in ModeDirect. --kill-on-bad-exit ends the step when one rank dies,
// rather than leaving the others blocked in a collective.
func (g Geometry) SrunArgs(srun string) []string {
	if g.Mode == ModeDirect {
		return nil
	}
	args := []string{srun,
		"--nodes=" + strconv.Itoa(g.Nodes),
		"--ntasks=" + strconv.Itoa(g.Tasks()),
		"--ntasks-per-node=" + strconv.Itoa(g.TasksPerNode),
	}
	if g.Bind == BindPerTask {
		args = append(args, "--gpus-per-task=1")
	} else {
		args = append(args, "--gres=gpu:"+strconv.Itoa(g.GPUsPerNode))
	}
	if g.CPUsPerTask > 0 {
		args = append(args, "--cpus-per-task="+strconv.Itoa(g.CPUsPerTask))
	}
	if g.BindCores {
		args = append(args, "--cpu-bind=cores")
	}
	return append(append(args, "--kill-on-bad-exit=1", ExportAll), g.Extra...)
}

// ExportAll passes the batch step's environment to every srun step: a job
// submitted with --export=NONE has srun export nothing by default
// (SLURM_EXPORT_ENV), not even PATH or the ranks and rendezvous rubick-srun
// sets (22.05 lab: the step found no program to run).
const ExportAll = "--export=ALL"

// Command is the full argv to run: srun with g's geometry, then the
// training command.
func (g Geometry) Command(srun string, train []string) []string {
	return append(slices.Clone(g.SrunArgs(srun)), train...)
}
