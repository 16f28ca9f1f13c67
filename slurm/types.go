package slurm

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// API versions of slurmrestd that this package speaks.
const (
	// Version38 is the slurmrestd API of Slurm 22.05 (v0.0.38).
	Version38 = "v0.0.38"
	// Version41 is the slurmrestd API of Slurm 24.05 to 24.11 (v0.0.41).
	Version41 = "v0.0.41"
	// Version42 is the slurmrestd API of Slurm 24.11 and later (v0.0.42).
	Version42 = "v0.0.42"
)

// Job states as rubick sees them. Slurm's base states are passed through
// upper-case; these are the ones callers usually branch on.
const (
	StatePending    = "PENDING"
	StateRunning    = "RUNNING"
	StateSuspended  = "SUSPENDED"
	StateCompleting = "COMPLETING"
	StateCompleted  = "COMPLETED"
	StateCancelled  = "CANCELLED"
	StateFailed     = "FAILED"
	StateTimeout    = "TIMEOUT"
	StateNodeFail   = "NODE_FAIL"
	StatePreempted  = "PREEMPTED"
	StateOutOfMem   = "OUT_OF_MEMORY"
	StateBootFail   = "BOOT_FAIL"
	StateDeadline   = "DEADLINE"
)

// Job is a Slurm job as rubick needs it, independent of the API version.
type Job struct {
	ID      int
	Name    string
	User    string
	Account string
	// Cluster is the name of the cluster the job is on.
	Cluster string
	// Partition is the job's partition; a pending job submitted to several
	// lists them all, comma-separated (Partitions splits them).
	Partition string
	QOS       string

	// State is the normalised base state, e.g. "PENDING" or "RUNNING".
	// Flags that 24.11 lists next to the base state (e.g. "COMPLETING",
	// "REQUEUED"), and that 22.05 writes in its place (e.g. "CONFIGURING"
	// for a running job), are in StateFlags.
	State      string
	StateFlags []string
	// Reason is Slurm's state reason, e.g. "JobHeldUser", "Resources";
	// empty for Slurm's "None".
	Reason   string
	Priority int64
	// Held is true when the job is held: priority 0 (what job_submit.lua
	// and requeuehold set) or an explicit hold.
	Held bool

	// NodeList is the expanded list of allocated nodes (empty while pending).
	NodeList  []string
	BatchHost string
	NodeCount int
	// GPUsPerNode is the GPU count per node, from the request (tres_per_node
	// "gres:gpu:4" in 22.05, "gres/gpu:4" in 24.11), else the allocation.
	GPUsPerNode int
	// GPUsNotPerNode is true for a pending job that asked for its GPUs per
	// job or per task (--gpus, --gpus-per-task): GPUsPerNode is then its
	// total divided over its nodes (a node's share, as for other jobs),
	// and a resize must clear those requests.
	GPUsNotPerNode bool
	// OtherGres are the GRES other than GPUs it asks for on each node
	// ("lscratch:100"), as scontrol's Gres= takes them: a resize's Gres=
	// replaces the whole list, so it carries them.
	OtherGres []string
	// GPUTypes are the GPU types the job asks for (--gres=gpu:h100:2,
	// --gpus=h100:2); nil for any GPU.
	GPUTypes []string
	// GPUs is the total allocated GPU count (tres_alloc_str), 0 when pending.
	GPUs int
	// MemMB is the total allocated memory in MiB over the job's nodes
	// (tres_alloc_str), 0 when pending: what Slurm counts against the
	// job's memory limits.
	MemMB int64
	// Billing is what Slurm bills the job (tres_alloc_str), 0 when
	// pending: what counts against billing limits.
	Billing int64
	// CPUs is what the job holds, or asks for while pending: at least
	// CPUsPerGPU per GPU, which Slurm allocates whatever else it asks
	// for (22.05 lists such a pending job's cpus as 1, 24.11 counts them).
	CPUs        int
	CPUsPerTask int
	// CPUsPerGPU is its --cpus-per-gpu (cpus_per_tres "gres:gpu:4");
	// 0 when none. Slurm gives the job that many per GPU at any size (22.05
	// lab: a --cpus-per-gpu=4 job resized to 2 GPUs and 1 CPU ran on 8).
	CPUsPerGPU int
	Tasks      int
	// MemPerNodeMB is the memory per node in MiB when the job asked for
	// memory per node; MemPerCPUMB when it asked per CPU. One of them is 0.
	MemPerNodeMB int64
	MemPerCPUMB  int64
	// MemPerGPUMB is the job's --mem-per-gpu (memory_per_tres), 0 when it
	// has none. Beside it 22.05 reports a default per-CPU memory and 24.11
	// the per-GPU value as per-node memory, neither of them the job's.
	MemPerGPUMB int64

	Requeue      bool
	RestartCount int
	SubmitTime   time.Time
	// EligibleTime is when the job may start by its begin time
	// (--begin); zero for a held job without one, which Slurm does not
	// count as eligible.
	EligibleTime time.Time
	StartTime    time.Time
	// SuspendTime is when an administrator last suspended or resumed the
	// job (scontrol suspend, resume); zero when never since its start.
	// PreSuspend is how long it ran before its last suspension. Slurm
	// counts neither the time a job stands suspended against its time
	// limit, nor (RunTime) as run time.
	SuspendTime time.Time
	PreSuspend  time.Duration
	// Deadline is the job's --deadline: Slurm ends it (state DEADLINE)
	// rather than start it where its time limit would run past it; zero
	// when none.
	Deadline time.Time
	// Nice is the job's --nice adjustment, which Slurm subtracts from its
	// priority.
	Nice int
	// TRESReq is what the job asks for as a TRES string (tres_req_str,
	// "cpu=6,mem=20G,node=2,billing=6,gres/gpu=6"): what the TRES factor
	// of its priority weighs.
	TRESReq string
	// TimeLimit is the job's time limit (sbatch --time); 0 when it has none
	// (unlimited or unset).
	TimeLimit time.Duration
	// TimeMin is its --time-min, 0 when it has none: Slurm refuses a time
	// limit below it.
	TimeMin time.Duration

	Comment      string
	AdminComment string
	// Licenses is what it asks for with -L ("matlab:1,fluent@db:2");
	// ParseLicenses reads it.
	Licenses string
	// Dependency is what the job still waits for (--dependency), e.g.
	// "afterok:12(unfulfilled)"; empty when nothing.
	Dependency string
	// Constraint is the job's --constraint (features its nodes must have);
	// Excluded the nodes of its --exclude.
	Constraint string
	Excluded   []string
	// RequiredNodes are the nodes of the job's --nodelist (-w). Slurm
	// reports the node list of the last NodeList= update in its place, so
	// once rubick has placed the job this is rubick's list, not the user's.
	RequiredNodes []string
	// Exclusive is true for a job that does not share its nodes:
	// --exclusive, --exclusive=user or =mcs.
	Exclusive bool
	// ArrayJobID is the job array's ID for a task of one (its own record,
	// split off or the array's last); 0 for other jobs. ArrayTaskID is the
	// task's ID then.
	ArrayJobID, ArrayTaskID int
	// ArrayMaxTasks is the job array's limit on tasks running at once
	// (sbatch --array=0-9%N, scontrol update ArrayTaskThrottle=N), which
	// Slurm keeps on tasks split off the array too; 0 for none.
	ArrayMaxTasks int
	// Reservation is the reservation the job was submitted to
	// (--reservation); empty when none.
	Reservation string
	// HetJobID is the leader's ID for each component of a heterogeneous
	// job (sbatch with hetjob / ':'), 0 for other jobs; HetJobOffset is the
	// component's index, 0 for the leader.
	HetJobID, HetJobOffset int
	// Interactive is set for a job without a batch script (salloc, or srun
	// outside an allocation): Slurm neither requeues it nor signals its
	// batch shell, so it cannot be checkpointed and restarted.
	Interactive bool
	// ArrayTasks lists the tasks of a job array that are still one pending
	// record under this ID ("0-3", "0,2-3", "0-15:4"); empty for any other
	// job, array tasks Slurm has split off included.
	ArrayTasks string
	// WorkDir is the job's working directory, where its batch script
	// starts.
	WorkDir string
	// Tag is the rubick tag parsed from AdminComment; nil when there is none.
	Tag *Tag
	// TagErr is the parse error of a malformed rubick tag, nil otherwise.
	// A malformed tag never hides the job.
	TagErr error
	// NodesErr names the malformed hostlists of the job (its nodes,
	// --exclude, --nodelist), each read as no nodes; nil when there are
	// none. It never hides the job either.
	NodesErr error
}

// Node is a Slurm node as rubick needs it.
type Node struct {
	Name string
	// State is the upper-case base state, e.g. "IDLE", "MIXED", "ALLOCATED",
	// "DOWN"; Flags holds the rest (e.g. "DRAIN").
	State      string
	Flags      []string
	GPUs       int
	GPUsUsed   int
	CPUs       int
	CPUsAlloc  int
	MemMB      int64
	MemAllocMB int64
	Partitions []string
	Reason     string
	// GPUTypes are the types of the node's GPUs (gres gpu:a100:8); nil
	// when untyped.
	// GresFree is how much of each GRES other than GPUs is free on it
	// ("lscratch" 50, "nvme:fast" 1), as GresCounts reads them; nil for
	// none.
	GresFree map[string]int
	GPUTypes []string
	// Features are the node's active features, what --constraint matches.
	Features []string
}

// Partitions splits Partition.
func (j Job) Partitions() []string { return splitList(j.Partition) }

// Ended reports whether the job reached a final state. A requeued job
// passes through COMPLETING (a base state in 22.05, a flag in 24.11) on its
// way back to PENDING, so that is not an end.
func (j Job) Ended() bool {
	switch j.State {
	case StatePending, StateRunning, StateSuspended, StateCompleting:
		return false
	}
	return !slices.Contains(j.StateFlags, StateCompleting)
}

// Allocated reports whether the job holds an allocation: it runs or an
// administrator suspended it (scontrol suspend), which keeps its GPUs and
// memory and counts against its limits as before (22.05 lab: a second
// job was held with QOSGrpGRES beside a suspended one). Only its CPUs are
// free to others meanwhile.
func (j Job) Allocated() bool {
	return j.State == StateRunning || j.State == StateSuspended
}

// RunTime is how long the job has run at now on its current start, the
// time it stood suspended left out, as scontrol's RunTime counts it.
func (j Job) RunTime(now time.Time) time.Duration {
	switch {
	case j.State == StateSuspended:
		return j.PreSuspend
	case j.State != StateRunning || j.StartTime.IsZero():
		return 0
	case !j.SuspendTime.IsZero():
		return j.PreSuspend + max(now.Sub(j.SuspendTime), 0)
	}
	return max(now.Sub(j.StartTime), 0)
}

// Ref names the job to scontrol update and release and to scancel:
// "ARRAY_TASK" for a task of a job array, since the array's ID (which the
// array's last record keeps as its own) names every task, split off or
// not; "ARRAY_[TASKS]" for an array record that still holds several
// tasks, which names those alone (an update of the bare ID reached a task
// split off before, 22.05 lab; a release of the bracketed list left it
// held, both labs); the ID for other jobs. scontrol show job refuses the
// bracketed form, so a job's own fields are read by its ID.
func (j Job) Ref() string {
	switch {
	case j.ArrayJobID > 0 && j.ArrayTasks == "":
		return strconv.Itoa(j.ArrayJobID) + "_" + strconv.Itoa(j.ArrayTaskID)
	case j.ArrayJobID > 0:
		return strconv.Itoa(j.ArrayJobID) + "_[" + arrayRefTasks(j.ArrayTasks) + "]"
	}
	return strconv.Itoa(j.ID)
}

// arrayRefTasks is a task list as scontrol takes it between brackets:
// without the "%limit" Slurm reports after it, and, as scontrol refuses
// a ":step" there (22.05 lab), with stepped ranges written out.
func arrayRefTasks(tasks string) string {
	list, _, _ := strings.Cut(tasks, "%")
	if !strings.Contains(list, ":") {
		return list
	}
	ids, err := ArrayTaskIDs(list, maxArrayRefTasks)
	if err != nil {
		return list // scontrol names what it cannot read
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.Itoa(id)
	}
	return strings.Join(out, ",")
}

// maxArrayRefTasks bounds a written-out task list: Slurm's default
// MaxArraySize is 1001.
const maxArrayRefTasks = 1 << 16

// Partition is a Slurm partition.
type Partition struct {
	Name       string
	State      string
	Nodes      []string
	TotalCPUs  int
	TotalNodes int
	// MaxNodesPerJob is the partition's MaxNodes; 0 when unlimited (or
	// set to 0: Zero).
	MaxNodesPerJob int
	// MinNodesPerJob is the partition's MinNodes; 0 when none.
	MinNodesPerJob int
	// MaxTime is the partition's MaxTime; 0 when unlimited (or set to 0:
	// Zero).
	MaxTime time.Duration
	// Zero lists its MaxNodes and MaxTime where set to 0 ("MaxNodes=0"),
	// with the bound each sets (PerJob.Nodes, PerJob.Wall): Slurm starts
	// no job in it (PartitionNodeLimit, PartitionTimeLimit) unless the
	// job's QOS has the PartitionMaxNodes or PartitionTimeLimit flag.
	// Unlimited is another value in every version (-1, or infinite).
	Zero []ZeroLimit
	// MaxCPUsPerNode and MaxMemPerNodeMB are the partition's
	// MaxCPUsPerNode and MaxMemPerNode (MiB); 0 when unlimited.
	MaxCPUsPerNode  int
	MaxMemPerNodeMB int64
	// MaxMemPerCPUMB is the partition's MaxMemPerCPU (MiB); 0 when none.
	// Slurm gives a job whose memory on a node is above it times the
	// job's CPUs there more CPUs, and holds one it cannot give them. A
	// partition sets it or MaxMemPerNode, not both (one setting in Slurm).
	MaxMemPerCPUMB int64
	// QOS is the partition's QOS, whose limits apply to every job in it
	// ahead of the job's own QOS; "" for none.
	QOS string
	// PriorityJobFactor is the partition's weight in the multifactor
	// priority; PriorityTier orders partitions ahead of any priority.
	PriorityJobFactor, PriorityTier int
	// TRES is what the partition's nodes hold, as a TRES string
	// ("cpu=256,mem=2000G,node=4,billing=256,gres/gpu=32").
	TRES string
	// Billing is the partition's TRESBillingWeights.
	Billing BillingWeights
}

// partitionZero is Partition.Zero of a partition whose MaxNodes (nodes)
// or MaxTime (wall) is set to 0.
func partitionZero(nodes, wall bool) []ZeroLimit {
	var zero []ZeroLimit
	if nodes {
		zero = append(zero, ZeroLimit{Name: "MaxNodes=0", PerJob: JobLimits{Nodes: 1}})
	}
	if wall {
		zero = append(zero, ZeroLimit{Name: "MaxTime=0", PerJob: JobLimits{Wall: 1}})
	}
	return zero
}

// JobLimits is what a QOS or an association allows one job: its
// allocation (MaxTRESPerJob: gres/gpu, node, cpu, mem, billing), on each
// node (MaxTRESPerNode: gres/gpu, cpu, mem, billing), its time limit
// (MaxWall, or a partition's MaxTime) and its GPUs, CPUs, memory (MiB),
// billing and nodes times its time limit, in minutes (MaxTRESMinsPerJob:
// gres/gpu, cpu, mem, billing, node); 0 where it sets no bound.
type JobLimits struct {
	GPUs, Nodes, CPUs        int
	MemMB                    int64
	GPUsPerNode, CPUsPerNode int
	MemMBPerNode             int64
	Wall                     time.Duration
	GPUMins, CPUMins         int64
	// MemMins is MiB-minutes, as Slurm counts memory.
	MemMins int64
	// NodeMins is the job's node count times its time limit.
	NodeMins int64
	// Billing is the job's billing (MaxTRESPerJob: billing), as its
	// partition's TRESBillingWeights work it out.
	Billing, BillingMins int64
	// BillingPerNode is its bill on any one node (MaxTRESPerNode:
	// billing).
	BillingPerNode int64
}

// QOS is a Slurm QOS and its limits.
type QOS struct {
	Name string
	// OverPartQOS is the OverPartQOS flag: this QOS's limits apply ahead
	// of the partition's QOS for jobs that run with it.
	OverPartQOS bool
	// OverPartTime is the PartitionTimeLimit flag: its jobs may run past
	// their partition's MaxTime (22.05 lab: a job asking for 10 minutes in
	// a partition of MaxTime=5 ran with it, and waited with
	// PartitionTimeLimit without it).
	OverPartTime bool
	// OverPartNodes is the PartitionMaxNodes flag: its jobs may span more
	// nodes than their partition's MaxNodes (22.05 lab: root's resize of
	// a job to 2 nodes in a partition of MaxNodes=1 ran with it, and
	// waited with PartitionNodeLimit without it).
	OverPartNodes bool
	// OverPartMinNodes is the PartitionMinNodes flag: its jobs may span
	// fewer nodes than their partition's MinNodes (22.05 lab: root's
	// resize of a 2-node job to one node in a partition of MinNodes=2
	// ran with it, and waited with PartitionNodeLimit without it).
	OverPartMinNodes bool
	PerJob           JobLimits
	// Grp bounds all the QOS's jobs together (GrpTRES), PerUser and
	// PerAccount one user's or one account's jobs in it (MaxTRESPerUser,
	// MaxTRESPerAccount).
	Grp, PerUser, PerAccount GroupLimits
	// Budget is its GrpTRESMins, which slurmctld lists (ShowAssocMgr).
	Budget Budget
	// Typed are its limits on GPUs of one type.
	Typed TypedGPUs
	// Min is the least it lets one job have (MinTRESPerJob).
	Min JobMins
	// Unread lists the limits it sets on what rubick does not plan with
	// ("GrpTRES=energy=5", "MaxTRESPerJob=license/matlab=2"): Slurm
	// holds back a job rubick sizes past one.
	Unread []string
	// Zero lists its group limits set to 0 on what rubick plans with
	// (ZeroLimit).
	Zero []ZeroLimit
}

// JobMins is the least a QOS lets one job have (MinTRESPerJob): GPUs
// (gres/gpu), nodes, CPUs and memory (MiB), 0 where it sets none, and
// GPUs of one type (gres/gpu:h100=4) by type, nil where none is set.
// Slurm holds a job below one pending (QOSMinGRES, QOSMinCpuNotSatisfied,
// ...), root's resize included, and counts a typed one against every job:
// one asking for GPUs of another type, or of none, waits for good (22.05
// lab, MinTRESPerJob=gres/gpu:h100=4: jobs asking for 2 GPUs, 2 a100 or
// none waited with QOSMinGRES; one asking for 4 h100 ran).
type JobMins struct {
	GPUs, Nodes, CPUs int
	MemMB             int64
	Typed             map[string]int
}

// TypedGPUs are limits on the GPUs of one type (gres/gpu:h100=4, where
// AccountingStorageTRES tracks the type), by type, in each role rubick
// reads them in: MaxTRESPerJob, MaxTRESPerNode, GrpTRES, MaxTRESPerUser
// and MaxTRESPerAccount, and the GPU-minutes of MaxTRESMinsPerJob,
// GrpTRESRunMins, MaxTRESRunMinsPU and MaxTRESRunMinsPA; nil where none
// is set. Slurm holds a job to one
// only when the job asks for that type, and counts every running job's
// GPUs of the type against a group's (22.05 lab, GrpTRES=gres/gpu:h100=4:
// a job asking for gpu:h100:8 waited with QOSGrpGRES, one asking for 8
// GPUs of any type ran on an h100 node, and the QOS then showed 8 of 4 in
// use).
type TypedGPUs struct {
	PerJob, PerNode, Grp, PerUser, PerAccount                 map[string]int
	PerJobMins, GrpRunMins, PerUserRunMins, PerAccountRunMins map[string]int
	// Budget is an association's GrpTRESMins of the type as slurmdbd
	// lists it: it only tells whose budgets to ask slurmctld for, as
	// Association.ListedBudget does.
	Budget map[string]int
}

// GroupLimits bound the GPUs (gres/gpu), CPUs, memory (MiB), billing and
// nodes of several jobs together, and their GPU-, CPU-, memory- (MiB-),
// billing- and node-minutes still to run: each running job's GPUs (CPUs,
// memory, billing, nodes) times what is left of its time limit
// (GrpTRESRunMins, MaxTRESRunMinsPerUser and PerAccount); 0 where they set
// no bound. The same type sums what running jobs hold against them, but
// for Nodes: Slurm counts a node the group's jobs share once, while
// NodeRunMins sums each job's nodes (22.05 lab: two one-node jobs of 10
// minutes on one node under GrpTRESRunMins=node=15, the second waits with
// QOSGrpNodeRunMinutes). Jobs bounds how many run at
// once (GrpJobs, MaxJobsPerUser, MaxJobsPerAccount, an association's
// MaxJobs): each running job holds one.
type GroupLimits struct {
	GPUs, CPUs             int
	MemMB                  int64
	GPURunMins, CPURunMins int64
	Billing                int64
	BillingRunMins         int64
	MemRunMins             int64
	NodeRunMins            int64
	Nodes                  int
	Jobs                   int
}

// GroupAmount is one amount of a GroupLimits and what it counts.
type GroupAmount struct {
	Value int64
	// What names its unit ("GPUs", "MB of memory", "GPU-minutes").
	What string
	// RunMins marks the amounts of GrpTRESRunMins and its kin, Jobs the
	// running jobs of GrpJobs and its kin.
	RunMins, Jobs bool
}

// Amounts lists l's amounts in one order, for what goes through all of
// them (messages, status lines): a new field is added here alone.
func (l GroupLimits) Amounts() [11]GroupAmount {
	return [11]GroupAmount{
		{Value: int64(l.GPUs), What: "GPUs"},
		{Value: int64(l.CPUs), What: "CPUs"},
		{Value: l.MemMB, What: "MB of memory"},
		{Value: int64(l.Nodes), What: "nodes"},
		{Value: l.Billing, What: "billing"},
		{Value: l.GPURunMins, What: "GPU-minutes", RunMins: true},
		{Value: l.CPURunMins, What: "CPU-minutes", RunMins: true},
		{Value: l.BillingRunMins, What: "billing-minutes", RunMins: true},
		{Value: l.MemRunMins, What: "MB-minutes of memory", RunMins: true},
		{Value: l.NodeRunMins, What: "node-minutes", RunMins: true},
		{Value: int64(l.Jobs), What: "running jobs", Jobs: true},
	}
}

// Association is a Slurm association (an account, or a user in an
// account, optionally for one partition) and its per-job limits.
type Association struct {
	Cluster, Account, User, Partition string
	// Parent is the parent account of an account's own association.
	Parent string
	PerJob JobLimits
	// Grp bounds the association's jobs and its children's together
	// (GrpTRES, GrpJobs).
	Grp GroupLimits
	// MaxJobs is how many jobs of the association may run at once; the
	// listing shows an account's on its children too. 0: no bound.
	MaxJobs int
	// Budget is its GrpTRESMins, which slurmctld lists (ShowAssocMgr).
	Budget Budget
	// ListedBudget is its GrpTRESMins limit as slurmdbd lists it, in the
	// run-minute fields, when BudgetListed (false: the listing did not
	// say). It only tells whose budgets to ask slurmctld for
	// (Limits.BudgetScope): the usage is slurmctld's alone.
	ListedBudget GroupLimits
	BudgetListed bool
	// Typed are its limits on GPUs of one type (the per-user and
	// per-account ones unused).
	Typed TypedGPUs
	// Unread is as QOS.Unread; the listing shows an account's per-job
	// limits on its users too.
	Unread []string
	// Zero is as QOS.Zero.
	Zero []ZeroLimit
}

// License is one of the cluster's licenses (slurm.conf Licenses=, or a
// remote one from slurmdbd) and how many of it are in use.
type License struct {
	Name              string
	Total, Used, Free int
}

// Reservation is a Slurm advance reservation.
type Reservation struct {
	Name       string
	Nodes      []string
	Start, End time.Time
	Flags      []string
}

// Active reports whether the reservation holds its nodes at now.
func (r Reservation) Active(now time.Time) bool {
	return !now.Before(r.Start) && (r.End.IsZero() || now.Before(r.End))
}

// SubmitRequest is a batch job submission; rubick uses it in tests and the
// lab, not in scheduling.
type SubmitRequest struct {
	Name         string
	Partition    string
	Script       string
	Nodes        int
	Tasks        int
	CPUsPerTask  int
	GPUsPerNode  int
	MemPerNodeMB int64
	Hold         bool
	Requeue      bool
	Comment      string
	AdminComment string
	WorkDir      string
	StdOut       string
	// Env is the job environment as "K=V" pairs.
	Env []string
}
