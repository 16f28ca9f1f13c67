package policy

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/model"
)

// Sentinel errors callers branch on.
var (
	// ErrBadSnapshot reports a snapshot that cannot be scheduled: a duplicate
	// name, an allocation on an unknown node, a node over capacity, a job
	// whose model type has no estimator.
	ErrBadSnapshot = errors.New("bad snapshot")
	// ErrUnknownPolicy reports a policy name missing from the registry.
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrBadConfig reports an invalid Config; the message names the field.
	ErrBadConfig = errors.New("bad policy config")
)

// Estimator prices execution plans for one model type. model.Predictor
// implements it through FromPredictor; tests substitute simple fakes.
type Estimator interface {
	// Spec returns the model type's constants (global batch, heads, layers).
	Spec() model.Spec
	// BestPlan returns the memory-feasible plan with the shortest predicted
	// iteration on r among those allow accepts (nil accepts all).
	BestPlan(r model.Resources, allow func(model.Plan) bool) (model.Plan, model.Breakdown, error)
	// Predict returns the predicted iteration of plan on r.
	Predict(plan model.Plan, r model.Resources) (model.Breakdown, error)
	// Feasible reports whether plan fits in GPU memory and the host memory of r.
	Feasible(plan model.Plan, r model.Resources) error
	// Memory estimates the memory plan needs on pl.
	Memory(plan model.Plan, pl model.Placement) model.MemoryEstimate
}

// predictorEstimator adapts model.Predictor to Estimator.
type predictorEstimator struct{ p model.Predictor }

// FromPredictor returns the Estimator backed by a fitted model.Predictor.
func FromPredictor(p model.Predictor) Estimator { return predictorEstimator{p} }

// Rebatch returns e for a job that trains with global batch b, its launch
// line's rather than its model type's (model.Spec.WithGlobalBatch); false
// when e cannot be priced at another batch (an estimator that is not a
// model.Predictor's).
func Rebatch(e Estimator, b int) (Estimator, bool) {
	pe, ok := e.(predictorEstimator)
	if !ok || b <= 0 {
		return e, false
	}
	pe.p.Spec = pe.p.Spec.WithGlobalBatch(b)
	return pe, true
}

func (e predictorEstimator) Spec() model.Spec { return e.p.Spec }
func (e predictorEstimator) BestPlan(r model.Resources, allow func(model.Plan) bool) (model.Plan, model.Breakdown, error) {
	return e.p.BestPlan(r, allow)
}
func (e predictorEstimator) Predict(plan model.Plan, r model.Resources) (model.Breakdown, error) {
	return e.p.Predict(plan, r)
}
func (e predictorEstimator) Feasible(plan model.Plan, r model.Resources) error {
	return e.p.Feasible(plan, r)
}
func (e predictorEstimator) Memory(plan model.Plan, pl model.Placement) model.MemoryEstimate {
	return e.p.Memory(plan, pl)
}

// Node is one schedulable machine.
type Node struct {
	Name  string  `json:"name"`
	GPUs  int     `json:"gpus"`
	CPUs  int     `json:"cpus"`
	MemGB float64 `json:"mem_gb"`
	// Class names the node's bandwidth class (a switch or rack); the model
	// prices one inter-node bandwidth for the whole cluster, so the policy
	// only uses it to keep a job's nodes together when it has the choice.
	Class string `json:"class,omitempty"`
}

// NodeAlloc is what one job holds (or is to hold) on one node.
type NodeAlloc struct {
	Node  string  `json:"node"`
	GPUs  int     `json:"gpus"`
	CPUs  int     `json:"cpus"`
	MemGB float64 `json:"mem_gb"`
}

// Request is what the user asked for: the resources and the plan a
// guaranteed job's SLO is measured against.
type Request struct {
	GPUs  int     `json:"gpus"`
	CPUs  int     `json:"cpus"`
	MemGB float64 `json:"mem_gb,omitempty"`
	// Placement is the requested shape (GPUs per node); nil means packed:
	// whole nodes first, the remainder on one more node.
	Placement model.Placement `json:"placement,omitempty"`
	// MemPerGPUGB is set when the job asked for memory per GPU
	// (--mem-per-gpu): it keeps that per GPU on any GPUs. Otherwise MemGB
	// is per node, over the request's nodes, as Slurm reads --mem.
	MemPerGPUGB float64 `json:"mem_per_gpu_gb,omitempty"`
	// Plan is the execution plan the user's launch line describes.
	Plan model.Plan `json:"plan"`
}

// Job is one training job as the scheduler sees it.
type Job struct {
	ID         string    `json:"id"`
	Model      string    `json:"model"` // names its estimator in Snapshot.Models: its model type's, or one at the job's own global batch
	Tenant     string    `json:"tenant,omitempty"`
	Guaranteed bool      `json:"guaranteed"`
	Submit     time.Time `json:"submit"`
	Request    Request   `json:"request"`
	// Alloc is what the job holds now, one entry per node; empty when queued.
	Alloc []NodeAlloc `json:"alloc,omitempty"`
	// Plan is the plan the job runs now; meaningful only when Alloc is set.
	Plan model.Plan `json:"plan"`
	// RunTime is the time the job has held resources, over all its starts.
	RunTime time.Duration `json:"run_time"`
	// Reconfigs counts the restarts after the first start: placement or
	// plan changes, and starts after a requeue.
	Reconfigs int `json:"reconfigs"`
	// TimeLimit is the user's estimate of the run time on the request (the
	// Slurm time limit); 0 when unknown. Only backfill uses it.
	TimeLimit time.Duration `json:"time_limit,omitempty"`
	// Cannot is what the job's launch line cannot express: every plan the
	// policy gives the job avoids these features.
	Cannot model.Features `json:"cannot,omitempty"`
	// GlobalBatch, when set, is the global batch the job's launch line
	// trains with, which its estimator (Snapshot.Models[Model]) prices:
	// a running plan of another batch is one the line cannot run.
	GlobalBatch int `json:"global_batch,omitempty"`
	// StartBy is the latest start that lets the job end by its Slurm
	// --deadline (the deadline less its time limit); zero: no deadline.
	StartBy time.Time `json:"start_by,omitzero"`
	// RestartCost is what the job's own restarts were measured to cost; 0
	// prices it as its model type (Snapshot.JobRestartCost).
	RestartCost time.Duration `json:"restart_cost,omitempty"`
	// Nodes, when not empty, are the only nodes the job may run on (those
	// its partition, reservation, GPU type, --constraint, --exclude and
	// --nodelist leave it); empty: any node.
	Nodes []string `json:"nodes,omitempty"`
	// WithinRequest holds the job to its request: no more GPUs, nodes or
	// CPUs than it asked for. rubickd sets it once Slurm has held a larger
	// allocation back for a QOS, association or partition limit.
	WithinRequest bool `json:"within_request,omitempty"`
	// Max bounds the job's allocation from outside, whatever pays: the
	// per-job limits of its Slurm QOS and association, and the room left
	// under the limits on its groups' jobs together. Zero fields bound
	// nothing.
	Max Size `json:"max,omitzero"`
	// NodeQuota, when set, bounds the nodes it may span outside a set it
	// shares with others: a Slurm group limit on nodes counts a node its
	// jobs share once, so a node the group holds already costs the job
	// nothing there.
	NodeQuota *NodeQuota `json:"node_quota,omitempty"`
	// CPUsPerGPU is the fewest CPUs it runs with per GPU: its
	// --cpus-per-gpu, which Slurm allocates whatever the job is resized
	// to. 0: Config.MinCPUsPerGPU, which bounds it from below too.
	CPUsPerGPU int `json:"cpus_per_gpu,omitempty"`
	// MaxMemPerCPUGB is its Slurm partition's MaxMemPerCPU; 0: none. Slurm
	// gives a job no less than a CPU for each MaxMemPerCPU of its memory
	// on a node, raising its CPUs past what a policy counted free, so a
	// policy books no more memory than the job's CPUs allow where it can
	// (cpuMem), gives it CPUs for its own memory per GPU (minCPG), and
	// books the CPUs Slurm raises it to for the rest (slurmAlloc).
	MaxMemPerCPUGB float64 `json:"max_mem_per_cpu_gb,omitempty"`
	// Min bounds it from below: the least its Slurm QOS lets one job have
	// (MinTRESPerJob), which Slurm holds a smaller job pending for. Only
	// GPUs, Nodes, CPUs and MemGB are read; zero fields bound nothing.
	Min Size `json:"min,omitzero"`
	// Groups names the snapshot's groups the job counts against: the
	// rubick policies keep each group's jobs within it together.
	Groups []string `json:"groups,omitempty"`
	// FairShare is the Slurm fair-share factor of the job's association
	// (0..1, higher: its account has used less of its share); only
	// OrderFairShare reads it. 0 when unknown.
	FairShare float64 `json:"fair_share,omitempty"`
	// Priority is the Slurm multifactor priority the job would have if
	// rubick did not hold it, and PriorityTier its partition's
	// PriorityTier; only OrderPriority reads them.
	Priority     float64 `json:"priority,omitempty"`
	PriorityTier int     `json:"priority_tier,omitempty"`
	// PriorityFactors says what Priority sums, for `rubick explain`
	// ("age 500, qos 100000"); "" when unknown.
	PriorityFactors string `json:"priority_factors,omitempty"`
}

// NodeQuota is how many nodes outside Shared a job may span.
type NodeQuota struct {
	Shared []string `json:"shared,omitempty"`
	New    int      `json:"new"`
}

// Size is an allocation's size over all its nodes, and the most it holds
// on any one node.
type Size struct {
	GPUs         int     `json:"gpus,omitempty"`
	Nodes        int     `json:"nodes,omitempty"`
	CPUs         int     `json:"cpus,omitempty"`
	MemGB        float64 `json:"mem_gb,omitempty"`
	GPUsPerNode  int     `json:"gpus_per_node,omitempty"`
	CPUsPerNode  int     `json:"cpus_per_node,omitempty"`
	MemGBPerNode float64 `json:"mem_gb_per_node,omitempty"`
}

// String lists s's bounds that are set ("4 GPUs, 2 nodes, 32 GB").
func (s Size) String() string {
	var parts []string
	add := func(v float64, one, many string) {
		switch {
		case v == 1:
			parts = append(parts, "1 "+one)
		case v > 0:
			parts = append(parts, fmt.Sprintf("%g %s", v, many))
		}
	}
	add(float64(s.GPUs), "GPU", "GPUs")
	add(float64(s.Nodes), "node", "nodes")
	add(float64(s.CPUs), "CPU", "CPUs")
	add(s.MemGB, "GB", "GB")
	add(float64(s.GPUsPerNode), "GPU per node", "GPUs per node")
	add(float64(s.CPUsPerNode), "CPU per node", "CPUs per node")
	add(s.MemGBPerNode, "GB per node", "GB per node")
	if len(parts) == 0 {
		return "no bound"
	}
	return strings.Join(parts, ", ")
}

// cpusWithin reports whether the job may hold cpus CPUs in all: no more
// than it asked for when held to its request, nor than Max allows.
func (j *Job) cpusWithin(cpus int) bool {
	return (!j.WithinRequest || cpus <= j.Request.CPUs) && (j.Max.CPUs <= 0 || cpus <= j.Max.CPUs)
}

// cpuBudget is how many more CPUs a job holding cpus may get under Max;
// -1 when unbounded.
func (j *Job) cpuBudget(cpus int) int {
	if j.Max.CPUs <= 0 {
		return -1
	}
	return max(j.Max.CPUs-cpus, 0)
}

// minMet reports whether an allocation of gpus GPUs over nodes nodes,
// with cpus CPUs and memGB of host memory in all, is at least Min.
func (j *Job) minMet(gpus, nodes, cpus int, memGB float64) bool {
	m := j.Min
	return gpus >= m.GPUs && nodes >= m.Nodes && cpus >= m.CPUs && memGB+1e-9 >= m.MemGB
}

// allocMin reports whether alloc is at least the job's Min.
func (j *Job) allocMin(alloc []NodeAlloc) bool {
	gpus, cpus, mem := 0, 0, 0.0
	for _, a := range alloc {
		gpus, cpus, mem = gpus+a.GPUs, cpus+a.CPUs, mem+a.MemGB
	}
	return j.minMet(gpus, len(alloc), cpus, mem)
}

// newNode reports whether a node is one NodeQuota counts (not Shared).
func (j *Job) newNode(node string) bool {
	return j.NodeQuota != nil && !slices.Contains(j.NodeQuota.Shared, node)
}

// may reports whether the job may run on the named node.
func (j *Job) may(node string) bool { return len(j.Nodes) == 0 || slices.Contains(j.Nodes, node) }

// memBound reports whether Max bounds the job's host memory.
func (j *Job) memBound() bool { return j.Max.MemGB > 0 || j.Max.MemGBPerNode > 0 }

// ownMem reports whether a policy books the job's host memory from its own
// request alone: under a memory bound, for a job that asked for memory.
// Its user sized that for what the job runs, and the policy's default per
// GPU could keep it from starting within the bound at all.
func (j *Job) ownMem() bool { return j.memBound() && j.Request.MemGB > 0 }

// memFloor is the host memory the job asked for on a node holding g of its
// GPUs, as Slurm reads its request: per GPU (--mem-per-gpu) or per node
// (--mem, or per CPU); 0 when it asked for none.
func (j *Job) memFloor(g int) float64 {
	if j.Request.MemPerGPUGB > 0 {
		return j.Request.MemPerGPUGB * float64(g)
	}
	return j.Request.MemGB / float64(max(1, len(j.Request.Placement)))
}

// memRates bound what a policy books for the job on a node holding g of
// its GPUs from above by per*g + base (offloaded states aside): per GPU
// and per node. def is the policy's default per GPU, hostBase what any
// plan needs on a node.
func (j *Job) memRates(def, hostBase float64) (per, base float64) {
	switch {
	case j.ownMem() && j.Request.MemPerGPUGB > 0:
		return j.Request.MemPerGPUGB, 0
	case j.ownMem():
		return 0, j.memFloor(0)
	case j.Request.MemPerGPUGB > 0:
		return max(def, j.Request.MemPerGPUGB), hostBase
	}
	return def, max(hostBase, j.memFloor(0))
}

// minCPG is the fewest CPUs the job runs with per GPU: its own
// (CPUsPerGPU), the policy's (min), and under its partition's
// MaxMemPerCPU those its own memory per GPU (--mem-per-gpu) takes, which
// a policy books on any GPUs. A job held to its request is left at it.
func (j *Job) minCPG(min int) int {
	out := max(min, j.CPUsPerGPU)
	if j.MaxMemPerCPUGB > 0 && j.Request.MemPerGPUGB > 0 && !j.WithinRequest {
		out = max(out, int(math.Ceil(j.Request.MemPerGPUGB/j.MaxMemPerCPUGB-1e-9)))
	}
	return out
}

// cpuMem is mem, the host memory a policy books for the job on a node
// holding g of its GPUs and cpus of its CPUs (need and base as for
// hostMem), within its partition's MaxMemPerCPU times those CPUs: the
// policy's default per GPU is cut to fit, never below what the plan needs
// there nor what the job asked for (minCPG gives CPUs for its memory per
// GPU), and never above mem. Slurm would otherwise raise the job's CPUs
// past what the policy counted free on the node.
func (j *Job) cpuMem(mem float64, g, cpus int, need, base float64) float64 {
	if j.MaxMemPerCPUGB <= 0 {
		return mem
	}
	return min(mem, max(float64(cpus)*j.MaxMemPerCPUGB, j.hostMem(0, g, need, base)))
}

// slurmCPUs is the CPUs Slurm gives the job on a node where it asks for
// cpus CPUs and mem GB of host memory: a CPU per its partition's
// MaxMemPerCPU of mem at least.
func (j *Job) slurmCPUs(mem float64, cpus int) int {
	if j.MaxMemPerCPUGB <= 0 {
		return cpus
	}
	return max(cpus, int(math.Ceil(mem/j.MaxMemPerCPUGB-1e-9)))
}

// slurmAlloc is the CPUs and host memory Slurm allocates the job on a node
// holding g of its GPUs where a policy asks for cpus CPUs and up to mem GB
// (need and base as for hostMem): mem cut to its CPUs (cpuMem), the CPUs
// raised to a CPU per MaxMemPerCPU of what is left where the plan's need
// or the job's request is more than they allow (slurmCPUs), and the memory
// cut again to the raised CPUs. Every policy books this, so the CPUs a
// node has free are not over-counted.
func (j *Job) slurmAlloc(mem float64, g, cpus int, need, base float64) (int, float64) {
	cut := j.cpuMem(mem, g, cpus, need, base)
	raised := j.slurmCPUs(cut, cpus)
	if raised > cpus {
		// A fixed point: booked again on the raised CPUs, it reads the
		// same.
		cut = j.cpuMem(mem, g, raised, need, base)
	}
	return raised, cut
}

// DefaultMemGB is the host memory a policy books, whatever the plan, for
// a job that asked for none on a node holding g of its GPUs and cpus of
// its CPUs, where any plan needs base GB: def per GPU
// (Config.HostMemPerGPUGB) and base, as Slurm allocates it (slurmAlloc)
// under the job's partition's MaxMemPerCPU, maxMemPerCPU GB (0: none): cut
// to those CPUs, never below base. rubickd checks its memory limits'
// room against it.
func DefaultMemGB(def float64, g, cpus int, base, maxMemPerCPU float64) float64 {
	j := Job{MaxMemPerCPUGB: maxMemPerCPU}
	_, mem := j.slurmAlloc(j.hostMem(def, g, base, base), g, cpus, base, base)
	return mem
}

// raiseWithin reports whether Slurm raising the job's CPUs from asked to
// cpus for its memory (slurmAlloc) keeps them within limit, Max.CPUs over
// the job or Max.CPUsPerNode on a node (0: none): a policy keeps what it
// asks for within them itself, and Slurm holds a job raised past them.
func (j *Job) raiseWithin(asked, cpus, limit int) bool {
	return cpus <= asked || limit <= 0 || cpus <= limit
}

// hostMem is the host memory a policy books for the job on a node holding
// g of its GPUs, with a plan whose host need there is need, base of it what
// any plan needs (offloaded states are the rest): the default per GPU
// (def) plus need, and no less than the job asked for there; booked from
// its own request alone, what it asked for plus offloaded states. A job
// held to its request gets no more than it asked for per node unless need
// takes more.
func (j *Job) hostMem(def float64, g int, need, base float64) float64 {
	var mem float64
	if j.ownMem() {
		mem = j.memFloor(g) + max(need-base, 0)
	} else {
		mem = max(def*float64(g)+need, j.memFloor(g))
	}
	if !j.WithinRequest || j.Request.MemGB <= 0 {
		return mem
	}
	per := j.Request.MemGB / float64(max(1, len(j.Request.Placement)))
	return max(min(mem, per), need)
}

// hostBase is the host memory a node of a job needs whatever its plan:
// plan's need without its offloaded states.
func hostBase(e Estimator, plan model.Plan) float64 {
	plan.Offload = false
	return e.Memory(plan, model.Placement{1}).HostGBNode
}

// memWithin reports whether total host memory over the job's nodes is
// what the job may have: no more than Max allows, nor, for a job held to
// its request, than it asked for. Max's bound per node is memOnNode's.
func (j *Job) memWithin(total float64) bool {
	if j.Max.MemGB > 0 && total > j.Max.MemGB+1e-9 {
		return false
	}
	return !j.WithinRequest || j.Request.MemGB <= 0 || total <= j.Request.MemGB+1e-9
}

// sizeGB reports whether v is a memory size: finite and >= 0 (not NaN).
func sizeGB(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// memOnNode reports whether host memory mem on one node is within Max.
func (j *Job) memOnNode(mem float64) bool {
	return j.Max.MemGBPerNode <= 0 || mem <= j.Max.MemGBPerNode+1e-9
}

// Running reports whether the job holds resources.
func (j *Job) Running() bool { return len(j.Alloc) > 0 }

// GPUs is the number of GPUs the job holds.
func (j *Job) GPUs() int {
	n := 0
	for _, a := range j.Alloc {
		n += a.GPUs
	}
	return n
}

// Tenant is a quota holder (a Slurm account or QOS).
type Tenant struct {
	Name string `json:"name"`
	// GPUQuota bounds the GPUs its guaranteed jobs may hold at their minimum.
	GPUQuota int `json:"gpu_quota"`
}

// Snapshot is the immutable input of one scheduling round. Build it with
// NewSnapshot, which copies its inputs; Decide never modifies it.
type Snapshot struct {
	Now     time.Time
	Nodes   []Node
	Jobs    []Job
	Tenants []Tenant
	// Models maps a model type to its fitted estimator.
	Models map[string]Estimator
	// RestartCost is the cost of one checkpoint-restart (signal,
	// checkpoint, requeue, restart) of a job whose model type has no
	// measured cost in RestartCosts; the reconfiguration rule uses it.
	RestartCost time.Duration
	// RestartCosts holds measured restart costs per model type.
	RestartCosts map[string]time.Duration
	// Groups bound jobs together (WithGroups); Job.Groups names them.
	Groups []Group

	nodeIndex  map[string]int
	groupIndex map[string]int
}

// Group bounds what several jobs of a snapshot hold together: a Slurm
// group limit (GrpTRES and the like) less what jobs outside the snapshot
// hold under it.
type Group struct {
	Name string `json:"name"`
	// GPUs and CPUs its jobs may hold in all, and how many of them may
	// run; -1 where it sets no bound.
	GPUs int `json:"gpus"`
	CPUs int `json:"cpus"`
	Jobs int `json:"jobs"`
	// JobsName names its bound on running jobs where that is not Name
	// (Slurm's GrpJobs beside the GrpTRES of the same QOS).
	JobsName string `json:"jobs_name,omitempty"`
}

// WithGroups gives the groups that bound jobs together; each job lists its
// own in Job.Groups.
func WithGroups(groups []Group) SnapshotOption {
	return func(s *Snapshot) error {
		s.groupIndex = make(map[string]int, len(groups))
		for i, g := range groups {
			if _, dup := s.groupIndex[g.Name]; dup || g.Name == "" {
				return fmt.Errorf("%w: group %d: name %q is empty or taken", ErrBadSnapshot, i, g.Name)
			}
			if g.GPUs < -1 || g.CPUs < -1 || g.Jobs < -1 {
				return fmt.Errorf("%w: group %q: gpus=%d, cpus=%d, jobs=%d: want >= 0, or -1 for no bound", ErrBadSnapshot, g.Name, g.GPUs, g.CPUs, g.Jobs)
			}
			s.groupIndex[g.Name] = i
		}
		s.Groups = slices.Clone(groups)
		return nil
	}
}

// SnapshotOption sets an optional input of NewSnapshot.
type SnapshotOption func(*Snapshot) error

// WithRestartCosts gives restart costs measured per model type; a job of
// another model type is priced at the snapshot's default restart cost.
func WithRestartCosts(costs map[string]time.Duration) SnapshotOption {
	return func(s *Snapshot) error {
		for mt, c := range costs {
			if c < 0 {
				return fmt.Errorf("%w: restart cost of model type %q is %v", ErrBadSnapshot, mt, c)
			}
		}
		s.RestartCosts = maps.Clone(costs)
		return nil
	}
}

// planRuns reports whether j's launch line can run the plan j runs: one
// without the features the line cannot express, at the global batch the
// line trains with (when known); else why not.
func (s *Snapshot) planRuns(j *Job) (bool, string) {
	p := j.Plan
	if b := p.DP * p.MicroBatch * p.Accum; j.GlobalBatch > 0 && b != j.GlobalBatch {
		return false, fmt.Sprintf("its launch line trains with a global batch of %d, not the %d of %s", j.GlobalBatch, b, p)
	}
	if !j.Cannot.Allows(p) {
		return false, fmt.Sprintf("its launch line cannot run %s (no %s)", p, j.Cannot)
	}
	return true, ""
}

// RestartCostOf is the restart cost of a job of modelType.
func (s *Snapshot) RestartCostOf(modelType string) time.Duration {
	if c, ok := s.RestartCosts[modelType]; ok {
		return c
	}
	return s.RestartCost
}

// JobRestartCost is what one more restart of j costs: its own measured
// cost, else its model type's (RestartCostOf).
func (s *Snapshot) JobRestartCost(j *Job) time.Duration {
	if j.RestartCost > 0 {
		return j.RestartCost
	}
	return s.RestartCostOf(j.Model)
}

// NewSnapshot validates and copies its inputs into a Snapshot: names are
// unique, every allocation names a known node, no node is over capacity and
// every job's model type has an estimator. Jobs are kept in ID order and
// nodes in the given order, so decisions never depend on map iteration.
func NewSnapshot(now time.Time, nodes []Node, jobs []Job, tenants []Tenant, models map[string]Estimator, restartCost time.Duration, opts ...SnapshotOption) (*Snapshot, error) {
	s := &Snapshot{
		Now: now, Nodes: slices.Clone(nodes), Tenants: slices.Clone(tenants),
		Models: make(map[string]Estimator, len(models)), RestartCost: restartCost,
		nodeIndex: make(map[string]int, len(nodes)),
	}
	if restartCost < 0 {
		return nil, fmt.Errorf("%w: restart cost %v is negative", ErrBadSnapshot, restartCost)
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	for k, v := range models {
		s.Models[k] = v
	}
	for i, n := range s.Nodes {
		if n.Name == "" {
			return nil, fmt.Errorf("%w: node %d has no name", ErrBadSnapshot, i)
		}
		if _, dup := s.nodeIndex[n.Name]; dup {
			return nil, fmt.Errorf("%w: duplicate node %q", ErrBadSnapshot, n.Name)
		}
		if n.GPUs < 0 || n.CPUs < 0 || n.MemGB < 0 {
			return nil, fmt.Errorf("%w: node %q has negative capacity", ErrBadSnapshot, n.Name)
		}
		s.nodeIndex[n.Name] = i
	}
	s.Jobs = make([]Job, len(jobs))
	for i, j := range jobs {
		j.Alloc = slices.Clone(j.Alloc)
		j.Request.Placement = slices.Clone(j.Request.Placement)
		j.Nodes = slices.Clone(j.Nodes)
		if q := j.NodeQuota; q != nil {
			j.NodeQuota = &NodeQuota{Shared: slices.Clone(q.Shared), New: q.New}
		}
		j.Groups = slices.Clone(j.Groups)
		s.Jobs[i] = j
	}
	slices.SortFunc(s.Jobs, func(a, b Job) int { return strings.Compare(a.ID, b.ID) })
	gpus := make([]int, len(nodes))
	cpus := make([]int, len(nodes))
	mem := make([]float64, len(nodes))
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if j.ID == "" {
			return nil, fmt.Errorf("%w: a job has no id", ErrBadSnapshot)
		}
		if i > 0 && s.Jobs[i-1].ID == j.ID {
			return nil, fmt.Errorf("%w: duplicate job %q", ErrBadSnapshot, j.ID)
		}
		if _, ok := s.Models[j.Model]; !ok {
			return nil, fmt.Errorf("%w: job %s: no estimator for model type %q", ErrBadSnapshot, j.ID, j.Model)
		}
		if j.Request.GPUs <= 0 {
			return nil, fmt.Errorf("%w: job %s: request.gpus=%d must be > 0", ErrBadSnapshot, j.ID, j.Request.GPUs)
		}
		if p := j.Request.Placement; p != nil && (slices.ContainsFunc(p, func(g int) bool { return g <= 0 }) || p.GPUs() != j.Request.GPUs) {
			return nil, fmt.Errorf("%w: job %s: request.placement=%v must give each node at least one GPU and %d in all (request.gpus)",
				ErrBadSnapshot, j.ID, p, j.Request.GPUs)
		}
		if j.RestartCost < 0 {
			return nil, fmt.Errorf("%w: job %s: restart_cost=%v is negative", ErrBadSnapshot, j.ID, j.RestartCost)
		}
		if !sizeGB(j.Request.MemGB) {
			return nil, fmt.Errorf("%w: job %s: request.mem_gb=%v must be finite and >= 0", ErrBadSnapshot, j.ID, j.Request.MemGB)
		}
		if !sizeGB(j.Request.MemPerGPUGB) {
			return nil, fmt.Errorf("%w: job %s: request.mem_per_gpu_gb=%v must be finite and >= 0", ErrBadSnapshot, j.ID, j.Request.MemPerGPUGB)
		}
		if m := j.Max; m.GPUs < 0 || m.Nodes < 0 || m.CPUs < 0 || m.GPUsPerNode < 0 || m.CPUsPerNode < 0 || !sizeGB(m.MemGB) || !sizeGB(m.MemGBPerNode) {
			return nil, fmt.Errorf("%w: job %s: max=%+v has a negative bound", ErrBadSnapshot, j.ID, j.Max)
		}
		if j.CPUsPerGPU < 0 {
			return nil, fmt.Errorf("%w: job %s: cpus_per_gpu=%d is negative", ErrBadSnapshot, j.ID, j.CPUsPerGPU)
		}
		if !sizeGB(j.MaxMemPerCPUGB) {
			return nil, fmt.Errorf("%w: job %s: max_mem_per_cpu_gb=%v must be finite and >= 0", ErrBadSnapshot, j.ID, j.MaxMemPerCPUGB)
		}
		if q := j.NodeQuota; q != nil && q.New < 0 {
			return nil, fmt.Errorf("%w: job %s: node_quota.new=%d is negative", ErrBadSnapshot, j.ID, q.New)
		}
		if m := j.Min; m.GPUs < 0 || m.Nodes < 0 || m.CPUs < 0 || !sizeGB(m.MemGB) {
			return nil, fmt.Errorf("%w: job %s: min=%+v has a negative bound", ErrBadSnapshot, j.ID, j.Min)
		}
		if !(j.FairShare >= 0 && j.FairShare <= 1) {
			return nil, fmt.Errorf("%w: job %s: fair_share=%v must be in 0..1", ErrBadSnapshot, j.ID, j.FairShare)
		}
		if !(j.Priority >= 0 && j.Priority <= math.MaxUint32) {
			return nil, fmt.Errorf("%w: job %s: priority=%v must be in 0..%d", ErrBadSnapshot, j.ID, j.Priority, uint32(math.MaxUint32))
		}
		if j.PriorityTier < 0 {
			return nil, fmt.Errorf("%w: job %s: priority_tier=%d must be >= 0", ErrBadSnapshot, j.ID, j.PriorityTier)
		}
		for _, g := range j.Groups {
			if _, ok := s.groupIndex[g]; !ok {
				return nil, fmt.Errorf("%w: job %s: group %q is not in the snapshot", ErrBadSnapshot, j.ID, g)
			}
		}
		for _, a := range j.Alloc {
			n, ok := s.nodeIndex[a.Node]
			if !ok {
				return nil, fmt.Errorf("%w: job %s holds resources on unknown node %q", ErrBadSnapshot, j.ID, a.Node)
			}
			gpus[n] += a.GPUs
			cpus[n] += a.CPUs
			mem[n] += a.MemGB
		}
	}
	for i, n := range s.Nodes {
		if gpus[i] > n.GPUs || cpus[i] > n.CPUs || mem[i] > n.MemGB+1e-6 {
			return nil, fmt.Errorf("%w: node %q over capacity: %d/%d GPUs, %d/%d CPUs, %.1f/%.1f GB",
				ErrBadSnapshot, n.Name, gpus[i], n.GPUs, cpus[i], n.CPUs, mem[i], n.MemGB)
		}
	}
	return s, nil
}

// NodeIndex returns the position of the named node in Nodes.
func (s *Snapshot) NodeIndex(name string) (int, bool) {
	i, ok := s.nodeIndex[name]
	return i, ok
}

// Job returns the job with the given ID.
func (s *Snapshot) Job(id string) (*Job, bool) {
	i, ok := slices.BinarySearchFunc(s.Jobs, id, func(j Job, id string) int { return strings.Compare(j.ID, id) })
	if !ok {
		return nil, false
	}
	return &s.Jobs[i], true
}

// PackedPlacement is the request shape a Slurm user gets for g GPUs on
// nodes of perNode GPUs: whole nodes first, the remainder on one more.
func PackedPlacement(g, perNode int) model.Placement {
	if perNode <= 0 || g <= 0 {
		return nil
	}
	var pl model.Placement
	for g > 0 {
		n := min(g, perNode)
		pl = append(pl, n)
		g -= n
	}
	return pl
}
