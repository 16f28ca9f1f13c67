package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// ErrNotUniform reports an allocation Slurm cannot express for one job:
// Gres=gpu:N and CPUsPerTask are per node, so every node of a job gets the
// same GPUs and CPUs.
var ErrNotUniform = errors.New("allocation is not uniform across nodes")

// Tag keys rubick keeps in the tag's extra fields.
const (
	// tagReq records the user's original request (GPUs per node x nodes,
	// CPUs, memory) before rubick resizes the job: Slurm forgets it.
	tagReq = "req"
	// tagRan records seconds of run time before the current start, so the
	// reconfiguration rule sees the whole run time across requeues.
	tagRan = slurm.TagRan
	// tagLimit records the Slurm reason (a QOS, association or partition
	// size limit) that held back a larger allocation rubickd gave the job;
	// from then on the job is planned within its request.
	tagLimit = "lim"
	// tagAt records when rubickd released the job (Unix seconds). Slurm
	// takes a moment to start a released job; until then it must not look
	// like a queued job to decide on again.
	tagAt = "at"
	// tagNodes records the user's --nodelist (a hostlist) when rubick first
	// acts on the job: rubick's own NodeList= updates replace the list
	// Slurm reports.
	tagNodes = "nl"
	// tagTime records the user's time limit (whole minutes) when rubick
	// first acts on the job: rubick's own TimeLimit= updates replace the
	// one Slurm reports.
	tagTime = "tl"
	// tagSet records the time limit (whole minutes) rubick's last action
	// left the job with: a different one since was set by hand (scontrol
	// update TimeLimit=, an admin's extension, a user's cut).
	tagSet = "ts"
	// tagFixed marks a time limit set by hand: rubick keeps it at every
	// start from then on, never stretched or raised.
	tagFixed = "tf"
	// tagSubmit records the job's submission time (Unix seconds) when
	// rubick first acts on it: Slurm moves a job's submit time to each
	// requeue (22.05 lab: a requeued job's SubmitTime became the requeue's,
	// sacct -D keeps both), which would restart a preempted job's age for
	// the starvation and guaranteed-age rules.
	tagSubmit = slurm.TagSubmit
)

// splitPerCycle bounds the array tasks split off in one cycle (one scontrol
// call each).
const splitPerCycle = 32

// StartGrace is how long a released job may stay pending before rubickd
// decides on it again (Slurm starts a released job in 0.2-3 s in the lab;
// a job still pending after this will not start where it was sent).
const StartGrace = 60 * time.Second

// request is the user's original resource request, kept in the tag.
type request struct {
	Nodes, GPUsPerNode, CPUs int
	MemMB                    int64
}

func (r request) String() string {
	return fmt.Sprintf("n%d.g%d.c%d.m%d", r.Nodes, r.GPUsPerNode, r.CPUs, r.MemMB)
}

func parseRequest(s string) (request, error) {
	var r request
	parts := strings.Split(s, ".")
	dst := []*int{&r.Nodes, &r.GPUsPerNode, &r.CPUs}
	if len(parts) != 4 {
		return r, fmt.Errorf("tag %s=%q: want n<nodes>.g<gpus>.c<cpus>.m<MiB>", tagReq, s)
	}
	for i, p := range []string{"n", "g", "c"} {
		v, ok := strings.CutPrefix(parts[i], p)
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 || n > 1<<20 {
			return r, fmt.Errorf("tag %s=%q: field %q is not %s<integer>", tagReq, s, parts[i], p)
		}
		*dst[i] = n
	}
	v, ok := strings.CutPrefix(parts[3], "m")
	m, err := strconv.ParseInt(v, 10, 64)
	if !ok || err != nil || m < 0 {
		return r, fmt.Errorf("tag %s=%q: field %q is not m<MiB>", tagReq, s, parts[3])
	}
	r.MemMB = m
	if r.Nodes == 0 || r.GPUsPerNode == 0 {
		return r, fmt.Errorf("tag %s=%q: nodes and GPUs must be > 0", tagReq, s)
	}
	return r, nil
}

// managedJob is one job rubick schedules, with what the policy needs and
// what the Applier needs to act on it.
type managedJob struct {
	slurm slurm.Job
	tag   slurm.Tag
	req   request
	ran   time.Duration
	// adjusted says why the policy's request is not req; empty when it is.
	adjusted string
	// limit is the Slurm size limit that now holds the pending job back;
	// its next action records it in the tag.
	limit string
	// nodes is the user's --nodelist; the job's actions record it.
	nodes []string
	// part is the managed partition a pending job submitted to several is
	// planned in and started in; empty for other jobs.
	part string
	// time is what the job's time limit at a start is worked out from.
	time jobTime
	// groups are the group limits the job counts against.
	groups []slurm.Group
	// billing are its partition's TRESBillingWeights.
	billing slurm.BillingWeights
}

// ErrLicense reports a start whose licenses (-L) the plan's earlier
// starts take: Slurm would keep the job pending for them. It is planned
// again next cycle.
var ErrLicense = errors.New("its licenses are taken")

// ErrGres reports a start or restart onto a node whose GRES other than
// GPUs (lscratch) the plan's earlier starts take. It is planned again next
// cycle.
var ErrGres = errors.New("its GRES on a node are taken")

// ErrGroupLimit reports an action that would take a job's group (its QOS,
// user, account or association) past a GPU, CPU, memory, billing or
// run-minute limit on its jobs together.
var ErrGroupLimit = errors.New("over a group limit")

// ErrServedDeferred, beside ErrGroupLimit, reports a preemption or a
// shrink dropped because it made room only for a start deferred for a
// group limit: its job keeps running as it is.
var ErrServedDeferred = errors.New("made room only for a deferred start")

// groupsMemo gives slurm.Limits.Groups, worked out once per distinct
// cluster, QOS, account, user and partition (most jobs share one of a
// few). Once use is set, the first time it gives a budget it adds what the
// budget's jobs have used to it: a budget counts that beside what running
// jobs hold, whether or not one of them runs.
type groupsMemo struct {
	l      slurm.Limits
	memo   map[[5]string][]slurm.Group
	use    map[slurm.Group]slurm.GroupLimits
	seeded map[slurm.Group]bool
}

func (m *groupsMemo) of(j slurm.Job, partition string) []slurm.Group {
	k := [5]string{j.Cluster, j.QOS, j.Account, j.User, partition}
	g, ok := m.memo[k]
	if !ok {
		if m.memo == nil {
			m.memo = map[[5]string][]slurm.Group{}
		}
		g = m.l.Groups(j, partition)
		m.memo[k] = g
	}
	if m.use != nil {
		for _, b := range g {
			if b.Budget && !m.seeded[b] {
				if m.seeded == nil {
					m.seeded = map[slurm.Group]bool{}
				}
				m.seeded[b] = true
				m.use[b] = plus(m.use[b], b.Spent, 1)
			}
		}
	}
	return g
}

// holds is what j counts against its groups at now: the GPUs, CPUs,
// memory and billing it holds when it runs or stands suspended, and each
// of those and its node count times the minutes left of its time limit
// (none without one); nothing when it holds no allocation.
func holds(j slurm.Job, now time.Time) slurm.GroupLimits {
	if !j.Allocated() {
		return slurm.GroupLimits{}
	}
	h := slurm.GroupLimits{GPUs: j.GPUs, CPUs: j.CPUs, MemMB: j.MemMB, Billing: j.Billing, Jobs: 1}
	if j.TimeLimit > 0 {
		left := wholeMinutes(max(j.TimeLimit-j.RunTime(now), 0))
		h.GPURunMins, h.CPURunMins, h.BillingRunMins = int64(j.GPUs)*left, int64(j.CPUs)*left, j.Billing*left
		h.MemRunMins, h.NodeRunMins = j.MemMB*left, int64(len(j.NodeList))*left
	}
	return h
}

// wholeMinutes is d in minutes, rounded up.
func wholeMinutes(d time.Duration) int64 {
	return int64((d + time.Minute - 1) / time.Minute)
}

// nodeGPUTypes are the GPU types of each node, by name.
type nodeGPUTypes map[string][]string

// share is what a job holding h on nodes counts against group g: all of
// it, or for a limit on one GPU type its GPUs and GPU-minutes on the nodes
// of that type, as if spread evenly over its nodes (a job rubick starts
// is).
func (t nodeGPUTypes) share(g slurm.Group, h slurm.GroupLimits, nodes []string) slurm.GroupLimits {
	if g.GPUType == "" {
		return h
	}
	n := 0
	for _, node := range nodes {
		if slices.Contains(t[node], g.GPUType) {
			n++
		}
	}
	if n == 0 {
		return slurm.GroupLimits{}
	}
	return slurm.GroupLimits{GPUs: h.GPUs * n / len(nodes), GPURunMins: h.GPURunMins * int64(n) / int64(len(nodes))}
}

// plus is a + k*b, field by field: one place to add a field to. Nodes
// are a's: a group's are counted as a set (groupNodes), not summed.
func plus(a, b slurm.GroupLimits, k int) slurm.GroupLimits {
	return slurm.GroupLimits{Nodes: a.Nodes, GPUs: a.GPUs + k*b.GPUs, CPUs: a.CPUs + k*b.CPUs, MemMB: a.MemMB + int64(k)*b.MemMB,
		GPURunMins: a.GPURunMins + int64(k)*b.GPURunMins, CPURunMins: a.CPURunMins + int64(k)*b.CPURunMins,
		Billing: a.Billing + int64(k)*b.Billing, BillingRunMins: a.BillingRunMins + int64(k)*b.BillingRunMins,
		MemRunMins: a.MemRunMins + int64(k)*b.MemRunMins, NodeRunMins: a.NodeRunMins + int64(k)*b.NodeRunMins, Jobs: a.Jobs + k*b.Jobs}
}

// groupUsage sums what the running and suspended jobs, every job in Slurm,
// hold at now, per group limit each counts against (their GPUs on nodes of
// its type, for a limit on one type), with what the budgets among them
// have used, and counts the nodes they hold per group that limits nodes;
// groups adds what the budgets it gives later have used to the same map.
func groupUsage(groups *groupsMemo, jobs []slurm.Job, types nodeGPUTypes, now time.Time) (map[slurm.Group]slurm.GroupLimits, groupNodes) {
	use := map[slurm.Group]slurm.GroupLimits{}
	nodes := groupNodes{}
	groups.use = use
	for _, j := range jobs {
		if !j.Allocated() {
			continue
		}
		gs := groups.of(j, j.Partition)
		nodes.add(gs, j.NodeList, 1)
		held := holds(j, now)
		for _, g := range gs {
			use[g] = plus(use[g], types.share(g, held, j.NodeList), 1)
			if g.Budget {
				use[g] = plus(use[g], types.share(g, unticked(j, groups.l.BudgetTick, now), j.NodeList), 1)
			}
		}
	}
	for g, m := range nodes {
		u := use[g]
		u.Nodes = len(m)
		use[g] = u
	}
	return use, nodes
}

// unticked is what running job j has used of a budget since Slurm last
// added its use to the budget's, which it does every tick: at most a
// tick's worth, counted whole (Slurm's own check has no such gap: it
// lowers the time left at the same tick).
func unticked(j slurm.Job, tick time.Duration, now time.Time) slurm.GroupLimits {
	m := wholeMinutes(min(max(now.Sub(j.StartTime), 0), tick))
	return slurm.GroupLimits{GPURunMins: int64(j.GPUs) * m, CPURunMins: int64(j.CPUs) * m, BillingRunMins: j.Billing * m, MemRunMins: j.MemMB * m,
		NodeRunMins: int64(len(j.NodeList)) * m}
}

// groupRoom is what a job may hold under its group limits: GPUs, CPUs,
// memory (MiB), billing and GPU-, CPU-, memory-, billing- and
// node-minutes to run, 0 when a group is full (or over), -1 where no group
// bounds them; by names the group that binds.
type groupRoom struct {
	gpus, cpus, jobs                               int
	mem, gpuMins, cpuMins, billing                 int64
	billingMins, memMins, nodeMins                 int64
	gpuBy, cpuBy, memBy, billingBy                 slurm.Group
	gpuMinsBy, cpuMinsBy, billingMinsBy, memMinsBy slurm.Group
	nodeMinsBy, jobsBy                             slurm.Group
}

// roomOf is the room job j has under groups at now, given what their
// running jobs hold (j's own included, when it runs: a restart gives its
// GPUs and the minutes left of its limit back first); a limit on a GPU
// type j does not ask for leaves it all.
func roomOf(groups []slurm.Group, use map[slurm.Group]slurm.GroupLimits, j slurm.Job, types nodeGPUTypes, now time.Time) groupRoom {
	r := groupRoom{gpus: -1, cpus: -1, jobs: -1, mem: -1, gpuMins: -1, cpuMins: -1, billing: -1, billingMins: -1, memMins: -1, nodeMins: -1}
	held := holds(j, now)
	for _, g := range groups {
		if !g.Binds(j) {
			continue
		}
		u, own := use[g], types.share(g, held, j.NodeList)
		tighten(&r.gpus, &r.gpuBy, g, g.GPUs, u.GPUs, own.GPUs)
		tighten(&r.cpus, &r.cpuBy, g, g.CPUs, u.CPUs, own.CPUs)
		tighten(&r.mem, &r.memBy, g, g.MemMB, u.MemMB, own.MemMB)
		tighten(&r.gpuMins, &r.gpuMinsBy, g, g.GPURunMins, u.GPURunMins, own.GPURunMins)
		tighten(&r.cpuMins, &r.cpuMinsBy, g, g.CPURunMins, u.CPURunMins, own.CPURunMins)
		tighten(&r.billing, &r.billingBy, g, g.Billing, u.Billing, own.Billing)
		tighten(&r.billingMins, &r.billingMinsBy, g, g.BillingRunMins, u.BillingRunMins, own.BillingRunMins)
		tighten(&r.memMins, &r.memMinsBy, g, g.MemRunMins, u.MemRunMins, own.MemRunMins)
		tighten(&r.nodeMins, &r.nodeMinsBy, g, g.NodeRunMins, u.NodeRunMins, own.NodeRunMins)
		tighten(&r.jobs, &r.jobsBy, g, g.Jobs, u.Jobs, own.Jobs)
	}
	return r
}

// tighten lowers *room (-1: none) to what group g leaves under its limit
// (0: none) on one resource, given its use and what the job itself holds
// there, and names g in *by when it binds.
func tighten[T int | int64](room *T, by *slurm.Group, g slurm.Group, limit, used, own T) {
	if limit <= 0 {
		return
	}
	if n := max(limit-used+own, 0); *room < 0 || n < *room {
		*room, *by = n, g
	}
}

// full names what a pending job waits for when one of its groups has no
// room left for it: no GPU or CPU, or less memory (MiB) than its smallest
// start books (minMem); the group, the resource and its use and limit. ok
// is false while there is room.
func (r groupRoom) full(use map[slurm.Group]slurm.GroupLimits, minMem int64) (why string, ok bool) {
	switch {
	case r.jobs == 0:
		return fmt.Sprintf("waits for room in %s: running jobs %d, allowed %d", r.jobsBy.JobsName(), use[r.jobsBy].Jobs, r.jobsBy.Jobs), true
	case r.gpus == 0:
		return fmt.Sprintf("waits for room in %s: GPUs in use %d, allowed %d", r.gpuBy.Limit, use[r.gpuBy].GPUs, r.gpuBy.GPUs), true
	case r.cpus == 0:
		return fmt.Sprintf("waits for room in %s: CPUs in use %d, allowed %d", r.cpuBy.Limit, use[r.cpuBy].CPUs, r.cpuBy.CPUs), true
	case r.mem == 0 || r.mem > 0 && r.mem < minMem:
		return fmt.Sprintf("waits for room in %s: memory in use %d MB, allowed %d MB, and one GPU needs %d MB",
			r.memBy.Limit, use[r.memBy].MemMB, r.memBy.MemMB, minMem), true
	}
	return "", false
}

// oneGPUMem is the memory (MiB) the smallest start of j books under a
// memory limit: what it asked for with one GPU on one node, when it asked
// for memory (the policy books that alone then: per GPU for
// --mem-per-gpu, per node otherwise); else the policy's default for one
// GPU and what a node needs whatever the plan, as Slurm allocates it
// under its partition's MaxMemPerCPU (perCPUMB MiB; 0: none): cut to the
// CPUs that come with the GPU (its request's per GPU, and no fewer than
// the policy gives it), as the policy books it.
func oneGPUMem(cfg Config, e policy.Estimator, j slurm.Job, perCPUMB int64) int64 {
	if m := userMemPerGPU(j); m > 0 {
		return m
	}
	req := userRequest(j)
	if req.MemMB > 0 {
		return req.MemMB
	}
	plan := model.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 1, Accum: max(e.Spec().GlobalBatch, 1)}
	cpus := max(req.CPUs/max(req.Nodes*req.GPUsPerNode, 1), cfg.Policy.Config().MinCPUsPerGPU, j.CPUsPerGPU)
	gb := policy.DefaultMemGB(cfg.Policy.HostMemPerGPUGB, 1, cpus, e.Memory(plan, model.Placement{1}).HostGBNode, float64(perCPUMB)/1024)
	return int64(math.Ceil(gb * 1024))
}

// jobMinutes is what a job's TRES-minute limits leave it: GPU-, CPU-,
// memory- (MiB-) and node-minutes (-1: no bound), the tighter of its
// per-job limit (MaxTRESMinsPerJob) and its groups' room to run
// (GrpTRESRunMins and the like), and its user's time limit in whole
// minutes (0: none, which leaves the minutes unpriced).
type jobMinutes struct {
	gpu, cpu, mem, node int64
	limit               int64
	room                groupRoom
	lim                 slurm.JobLimits
}

// minutesOf works out jobMinutes for j.
func minutesOf(j slurm.Job, lim slurm.JobLimits, room groupRoom) jobMinutes {
	m := jobMinutes{gpu: room.gpuMins, cpu: room.cpuMins, mem: room.memMins, node: room.nodeMins, room: room, lim: lim}
	if tl, _, err := userTime(j); err == nil {
		m.limit = wholeMinutes(tl)
	}
	m.gpu, m.cpu, m.mem = perJobMins(m.gpu, lim.GPUMins), perJobMins(m.cpu, lim.CPUMins), perJobMins(m.mem, lim.MemMins)
	m.node = perJobMins(m.node, lim.NodeMins)
	return m
}

// perJobMins is the tighter of a group's room (-1: none) and a per-job
// limit (0: none).
func perJobMins(room, perJob int64) int64 {
	if perJob > 0 && (room < 0 || perJob < room) {
		return perJob
	}
	return room
}

// bound lowers the job's GPU, CPU, memory (MiB) and node bounds (0: none)
// to what its minutes allow over its time limit, never below what it
// holds (nodes: on).
func (m jobMinutes) bound(gpus, cpus int, memMB int64, nodes int, held slurm.GroupLimits, on int) (int, int, int64, int) {
	if m.limit <= 0 {
		return gpus, cpus, memMB, nodes
	}
	if m.gpu >= 0 {
		gpus = capBy(gpus, int(m.gpu/m.limit), held.GPUs)
	}
	if m.cpu >= 0 {
		cpus = capBy(cpus, int(m.cpu/m.limit), held.CPUs)
	}
	if m.mem >= 0 {
		memMB = capBy(memMB, m.mem/m.limit, held.MemMB)
	}
	if m.node >= 0 {
		nodes = capBy(nodes, int(m.node/m.limit), on)
	}
	return gpus, cpus, memMB, nodes
}

// gpuBy names the limit its GPU-minutes come from, for a GPU bound they
// set.
func (m jobMinutes) gpuBy() string {
	if m.lim.GPUMins > 0 && m.lim.GPUMins == m.gpu {
		return fmt.Sprintf("MaxTRESMinsPerJob of its QOS, its partition's QOS or its association, %d GPU-minutes for its %d-minute time limit", m.gpu, m.limit)
	}
	return fmt.Sprintf("%s, %d GPU-minutes left for its %d-minute time limit", m.room.gpuMinsBy.RunMinsName(), m.gpu, m.limit)
}

// nodeBy names the limit its node-minutes come from, for a node bound
// they set.
func (m jobMinutes) nodeBy() string {
	if m.lim.NodeMins > 0 && m.lim.NodeMins == m.node {
		return fmt.Sprintf("MaxTRESMinsPerJob of its QOS, its partition's QOS or its association, %d node-minutes for its %d-minute time limit", m.node, m.limit)
	}
	return fmt.Sprintf("%s, %d node-minutes left for its %d-minute time limit", m.room.nodeMinsBy.RunMinsName(), m.node, m.limit)
}

// noRoom says why a pending job cannot start on even one GPU (or CPU, or
// minMem MiB of memory, what its smallest start books) for its time
// limit, and whether that is for good (its per-job limit) rather than
// until a group's running jobs use up their minutes; ok is false when it
// can start.
func (m jobMinutes) noRoom(use map[slurm.Group]slurm.GroupLimits, minMem int64) (why string, never, ok bool) {
	if m.limit <= 0 {
		return "", false, false
	}
	check := func(what string, room, perJob int64, by slurm.Group, limit, used int64) (string, bool, bool) {
		if room < 0 || room >= m.limit {
			return "", false, false
		}
		if perJob > 0 && perJob < m.limit {
			return fmt.Sprintf("its %d-minute time limit on one %s is over its %s-minutes per job (%d)", m.limit, what, what, perJob), true, true
		}
		return fmt.Sprintf("waits for room in %s: %s-minutes %s in use %d, allowed %d, and one %s for its %d-minute time limit takes %d",
			by.RunMinsName(), what, by.MinsWhat(), used, limit, what, m.limit, m.limit), false, true
	}
	if why, never, ok := check("GPU", m.gpu, m.lim.GPUMins, m.room.gpuMinsBy, m.room.gpuMinsBy.GPURunMins, use[m.room.gpuMinsBy].GPURunMins); ok {
		return why, never, ok
	}
	if why, never, ok := check("CPU", m.cpu, m.lim.CPUMins, m.room.cpuMinsBy, m.room.cpuMinsBy.CPURunMins, use[m.room.cpuMinsBy].CPURunMins); ok {
		return why, never, ok
	}
	if why, never, ok := check("node", m.node, m.lim.NodeMins, m.room.nodeMinsBy, m.room.nodeMinsBy.NodeRunMins, use[m.room.nodeMinsBy].NodeRunMins); ok {
		return why, never, ok
	}
	if need := minMem * m.limit; m.mem >= 0 && m.mem < need {
		if m.lim.MemMins > 0 && m.lim.MemMins < need {
			return fmt.Sprintf("its %d-minute time limit with %d MB of memory (one GPU's) is over its MB-minutes of memory per job (%d)",
				m.limit, minMem, m.lim.MemMins), true, true
		}
		by := m.room.memMinsBy
		return fmt.Sprintf("waits for room in %s: MB-minutes of memory %s in use %d, allowed %d, and one GPU's %d MB for its %d-minute time limit takes %d",
			by.RunMinsName(), by.MinsWhat(), use[by].MemRunMins, by.MemRunMins, minMem, m.limit, need), false, true
	}
	return "", false, false
}

// capBy lowers a per-job bound (0: none) to room (-1: none), never below
// what the job holds: a running job is not made to shrink because its
// group is over a limit lowered meanwhile.
func capBy[T int | int64](bound, room, holds T) T {
	if room < 0 {
		return bound
	}
	room = max(room, holds)
	if bound == 0 || room < bound {
		return room
	}
	return bound
}

// jobTime is what a job's time limit at a start is worked out from.
type jobTime struct {
	user     time.Duration // the user's --time; 0: none
	reqTput  float64       // predicted samples/s on the request; 0: unknown
	measured float64       // samples/s the running job reports; 0: unknown
	max      time.Duration // the MaxWall or MaxTime that applies; 0: none
	margin   float64       // share added to a stretched limit; < 0: never stretch
	// runMins are the GPU-, CPU-, billing-, memory- (MiB-) and
	// node-minutes its groups have left for the rest of its run, perJob
	// those its per-job limit allows over its whole time limit; 0: no
	// bound (a job with none left is not started).
	runMins, perJob [5]int64
	// untilDeadline is how long from now the job has until its
	// --deadline, past which Slurm ends a job rather than start it on a
	// limit that runs there (22.05 lab: a held job with --time=10 and a
	// deadline 20 minutes away, given TimeLimit=30, ended DEADLINE at its
	// release); 0: no deadline.
	untilDeadline time.Duration
	// hasRun is set for a job that has run before (running, or requeued):
	// what is left of its work needs less than the user's whole limit.
	hasRun bool
	// fixed is set for a limit set by hand (userTime): user is kept as it
	// is, to the deadline at most.
	fixed bool
}

// maxStretch bounds a stretched limit whatever the prediction says.
const maxStretch = 365 * 24 * time.Hour

// limitAt is the job's time limit for a run at tput samples/s on size's
// GPUs, CPUs, memory (MiB), billing and Nodes, ran into it so far: the
// user's, or, when that is predicted slower than its request, the user's
// scaled by how much slower, plus the margin, in whole minutes up to max
// and to what its GPU-, CPU-, billing-, memory- and node-minutes allow for
// the rest of the run, never below the user's own. In whole minutes to
// its deadline: past it Slurm ends the job at its release, so a job that
// has run is cut there even below the user's limit (a minute at least),
// while one that has not keeps the user's (its own request's fate). 0
// when the job has no limit.
func (t jobTime) limitAt(tput float64, size slurm.GroupLimits, ran time.Duration) time.Duration {
	d := t.stretched(tput, size, ran)
	if d <= 0 || t.untilDeadline <= 0 {
		return d
	}
	dl := max((t.untilDeadline+ran)/time.Minute*time.Minute, time.Minute)
	if t.hasRun {
		return min(d, dl)
	}
	return max(min(d, dl), min(d, t.user))
}

// stretched is limitAt without the deadline.
func (t jobTime) stretched(tput float64, size slurm.GroupLimits, ran time.Duration) time.Duration {
	if t.user <= 0 || t.fixed || t.margin < 0 || !(t.reqTput > 0) || !(tput > 0) || tput >= t.reqTput {
		return t.user
	}
	d := time.Duration(min(float64(t.user)*t.reqTput/tput*(1+t.margin), float64(maxStretch)))
	d = (d + time.Minute - 1) / time.Minute * time.Minute
	if t.max > 0 {
		d = min(d, t.max)
	}
	for i, n := range [5]int64{int64(size.GPUs), int64(size.CPUs), size.Billing, size.MemMB, int64(size.Nodes)} {
		if t.runMins[i] > 0 && n > 0 {
			d = min(d, time.Duration(t.runMins[i]/n)*time.Minute+ran)
		}
		if t.perJob[i] > 0 && n > 0 {
			d = min(d, time.Duration(t.perJob[i]/n)*time.Minute)
		}
	}
	return max(d, t.user)
}

// wallBelow names the time limit wall (the MaxWall or MaxTime that
// applies to job j; 0: none) where it is below the limit j would start
// again with once requeued: its user's --time, which a restart never
// cuts but at its deadline (limitAt), or none. Slurm holds the job then
// (QOSMaxWallDurationPerJobLimit, PartitionTimeLimit) until the limit
// is raised. "" when wall lets it start again, or its tag does not read
// (convertJob says so).
func wallBelow(j slurm.Job, wall time.Duration, now time.Time) string {
	if wall <= 0 {
		return ""
	}
	user, _, err := userTime(j)
	if err != nil {
		return ""
	}
	t := jobTime{user: user, hasRun: true}
	if !j.Deadline.IsZero() {
		t.untilDeadline = max(j.Deadline.Sub(now), time.Nanosecond)
	}
	again := t.limitAt(0, slurm.GroupLimits{}, 0)
	if again > 0 && again <= wall {
		return ""
	}
	what := "none"
	if again > 0 {
		what = fmt.Sprintf("%d min", wholeMinutes(again))
	}
	return fmt.Sprintf("the MaxWall of its QOS or association or its partition's MaxTime, %d min, is below the time limit it would start again with (%s)",
		wholeMinutes(wall), what)
}

// userTime is the job's --time: the tag's record once rubick has acted on
// the job, what Slurm reports before that (0 when unlimited). fixed
// reports a limit set by hand: one other than rubick last set (the job's
// from now on, what Slurm reports), or one the tag marks.
func userTime(j slurm.Job) (user time.Duration, fixed bool, err error) {
	if j.Tag == nil {
		return j.TimeLimit, false, nil
	}
	if s, ok := j.Tag.Extra[tagSet]; ok {
		m, err := strconv.ParseInt(s, 10, 32)
		if err != nil || m <= 0 {
			return 0, false, fmt.Errorf("tag %s=%q is not whole minutes", tagSet, s)
		}
		if wholeMinutes(j.TimeLimit) != m {
			return j.TimeLimit, true, nil
		}
	}
	fixed = j.Tag.Extra[tagFixed] == "1"
	s, ok := j.Tag.Extra[tagTime]
	if !ok {
		return j.TimeLimit, fixed, nil
	}
	m, err := strconv.ParseInt(s, 10, 32)
	if err != nil || m <= 0 {
		return 0, false, fmt.Errorf("tag %s=%q is not whole minutes", tagTime, s)
	}
	return time.Duration(m) * time.Minute, fixed, nil
}

// recordTime writes into an action's tag the user's time limit (fixed: set
// by hand), and set, the limit the job has once the action ran (0: none).
func recordTime(tag *slurm.Tag, user time.Duration, fixed bool, set time.Duration) {
	switch {
	case user > 0:
		tag.Extra[tagTime] = strconv.FormatInt(int64(user/time.Minute), 10)
	case fixed:
		// Made unlimited by hand: Slurm's reading is the job's.
		delete(tag.Extra, tagTime)
	}
	if fixed {
		tag.Extra[tagFixed] = "1"
	}
	if set > 0 {
		tag.Extra[tagSet] = strconv.FormatInt(wholeMinutes(set), 10)
	} else {
		delete(tag.Extra, tagSet)
	}
}

// inPartitions reports whether one of the partitions job j was submitted
// to is among partitions.
func inPartitions(j slurm.Job, partitions []string) bool {
	return slices.ContainsFunc(j.Partitions(), func(p string) bool { return slices.Contains(partitions, p) })
}

// stranded lists the pending jobs held for rubick (job_submit.lua's hold
// at submission: JobHeldUser, neither its user's nor an administrator's,
// nor a requeue by hand) none of whose partitions rubickd manages: no one
// releases them. job_submit.lua releases a job moved out of its managed
// partitions, so these are jobs it manages and rubickd does not. nil when
// there are none.
func stranded(jobs []slurm.Job, managed []string) error {
	const shown = 5
	var ids []string
	n := 0
	for _, j := range jobs {
		if !heldForRubick(j) || inPartitions(j, managed) {
			continue
		}
		if n++; n <= shown {
			ids = append(ids, fmt.Sprintf("%d (partition %s)", j.ID, j.Partition))
		}
	}
	if n == 0 {
		return nil
	}
	more := ""
	if n > shown {
		more = fmt.Sprintf(" and %d more", n-shown)
	}
	noun := "jobs"
	if n == 1 {
		noun = "job"
	}
	return fmt.Errorf("%d %s: %s%s; rubickd manages %s", n, noun, strings.Join(ids, ", "), more, strings.Join(managed, ", "))
}

// heldForRubick reports whether pending job j waits in job_submit.lua's
// hold for rubickd to start it: JobHeldUser (its hold at submission), or
// JobHeldAdmin marked rubick's (its hold at root's move), with a tag,
// neither its user's hold nor an administrator's, nor a requeue by hand.
func heldForRubick(j slurm.Job) bool {
	return j.State == slurm.StatePending && j.Held && (j.Reason == "JobHeldUser" || j.Reason == "JobHeldAdmin") && j.Tag != nil &&
		!slurm.HeldByUser(j) && !slurm.HeldByAdmin(j) && !slurm.RequeuedByOther(j)
}

// partitionOf is the partition rubickd plans the job in: its own, or, for
// a pending job submitted to several, the first managed one (in the job's
// order) that Slurm starts jobs in (not in stopped) with a usable node,
// else the first managed one. "" when none of them is managed.
func partitionOf(j slurm.Job, managed []string, open []slurm.Node, stopped map[string]string) string {
	var first, firstUp string
	for _, p := range j.Partitions() {
		if !slices.Contains(managed, p) {
			continue
		}
		_, down := stopped[p]
		if !down && slices.ContainsFunc(open, func(n slurm.Node) bool { return slices.Contains(n.Partitions, p) }) {
			return p
		}
		if first == "" {
			first = p
		}
		if firstUp == "" && !down {
			firstUp = p
		}
	}
	return cmp.Or(firstUp, first)
}

// stoppedPartitions are the partitions Slurm starts no job in, with their
// state: DOWN (running jobs go on) and INACTIVE. A DRAIN partition still
// starts the jobs queued in it.
func stoppedPartitions(parts map[string]slurm.Partition) map[string]string {
	out := map[string]string{}
	for name, p := range parts {
		if p.State == "DOWN" || p.State == "INACTIVE" {
			out[name] = p.State
		}
	}
	return out
}

// arraySplit is a job array record and the tasks to split off it.
type arraySplit struct {
	job   slurm.Job
	tasks []int
}

// HoldActions mark each job someone else requeued held as held by its
// user (slurm.UserHoldWord in its Comment), and write its restart count
// into its tag: Slurm reports that requeue's hold as the user's own
// (JobHeldUser, which the user may release), and job_submit.lua hands a
// job with the word back to rubickd at its release, which it refuses for
// any other held job.
func (v *View) HoldActions() []slurm.Action {
	var out []slurm.Action
	for _, j := range v.Marked {
		tag := cloneTag(*j.Tag)
		out = append(out, slurm.Action{Kind: slurm.ActionAnnotate, JobID: j.ID, Tag: &tag, Hold: true})
	}
	return out
}

// SplitActions splits the tasks of each held array record off it.
func (v *View) SplitActions() []slurm.Action {
	var out []slurm.Action
	for _, a := range v.Arrays {
		out = append(out, slurm.Action{Kind: slurm.ActionSplit, JobID: a.job.ID, Tasks: a.tasks})
	}
	return out
}

// waitsOn reports whether a held job's --dependency names a job that has
// not ended: Slurm clears a satisfied dependency only at its next pass over
// held jobs (up to a minute later on the lab), so a dependency on jobs that
// have all ended is taken as satisfied. singleton waits while singleton
// is set: an earlier job of the job's name and user has not ended. Other
// forms without a job ID are Slurm's to judge once the job is released.
func waitsOn(dep string, active map[int]bool, singleton bool) bool {
	// "afterok:12:13(unfulfilled),after:14+5(unfulfilled)?afterany:15_2"
	for _, item := range strings.FieldsFunc(dep, func(r rune) bool { return r == ',' || r == '?' }) {
		item, _, _ = strings.Cut(item, "(")
		if item == "singleton" && singleton {
			return true
		}
		_, ids, _ := strings.Cut(item, ":")
		for _, id := range strings.Split(ids, ":") {
			id, _, _ = strings.Cut(id, "+") // after:ID+minutes
			id, _, _ = strings.Cut(id, "_") // an array task: its array
			if n, err := strconv.Atoi(id); err == nil && active[n] {
				return true
			}
		}
	}
	return false
}

// userNodes is the job's --nodelist: the tag's record once rubick has
// acted on the job, what Slurm reports before that. nil when it has none.
func userNodes(j slurm.Job) ([]string, error) {
	if j.Tag == nil {
		return j.RequiredNodes, nil
	}
	if s, ok := j.Tag.Extra[tagNodes]; ok {
		nodes, err := slurm.ExpandHostlist(s)
		if err != nil {
			return nil, fmt.Errorf("tag %s=%q: %w", tagNodes, s, err)
		}
		return nodes, nil
	}
	if placedByRubick(j.Tag) {
		return nil, nil // what Slurm reports is rubick's placement
	}
	if len(slurm.CompressHostlist(j.RequiredNodes)) > maxTagNodes {
		return nil, fmt.Errorf("--nodelist=%s...: longer than the %d characters rubick can record",
			slurm.CompressHostlist(j.RequiredNodes)[:32], maxTagNodes)
	}
	return j.RequiredNodes, nil
}

// placedByRubick reports whether tag is that of a job rubick may have
// placed, whose node list Slurm reports is then rubick's: one it started,
// or whose tag records the user's request (req=), and with it their
// --nodelist, if any (nl=).
func placedByRubick(tag *slurm.Tag) bool {
	return tag.Generation > 0 || tag.Extra[tagReq] != ""
}

// maxTagNodes is the longest hostlist a tag value holds.
const maxTagNodes = 256

// recordNodes writes the user's --nodelist into an action's tag.
func recordNodes(tag *slurm.Tag, nodes []string) {
	if len(nodes) > 0 {
		tag.Extra[tagNodes] = slurm.CompressHostlist(nodes)
	}
}

// openNodes are the usable nodes of one cycle, each with the active
// reservations holding it, and the allowed-node lists worked out so far for
// jobs that differ only in partition, reservation, GPU type and constraint
// (most jobs share one of a few).
type openNodes struct {
	nodes []slurm.Node
	resv  [][]string
	memo  map[[4]string][]string
}

// allowedNodes lists the usable nodes the job's partition (part),
// reservation, GPU type, --constraint, --exclude and --nodelist (required)
// leave it; nil when that is all of them. A constraint rubick cannot
// evaluate node by node, or no node left, is an error: Slurm places the
// job.
func (o *openNodes) allowedNodes(j slurm.Job, part string, required []string) ([]string, error) {
	gpuType := ""
	if len(j.GPUTypes) == 1 {
		gpuType = j.GPUTypes[0]
	}
	key := [4]string{part, j.Reservation, gpuType, j.Constraint}
	plain := len(j.Excluded) == 0 && len(required) == 0
	if out, ok := o.memo[key]; ok && plain {
		return out, nil
	}
	var out []string
	for i, n := range o.nodes {
		// A reservation's job runs on its nodes, and other jobs off them.
		inResv := j.Reservation == "" && len(o.resv[i]) == 0 || slices.Contains(o.resv[i], j.Reservation)
		if !inResv || !slices.Contains(n.Partitions, part) || gpuType != "" && !slices.Contains(n.GPUTypes, gpuType) ||
			slices.Contains(j.Excluded, n.Name) || len(required) > 0 && !slices.Contains(required, n.Name) {
			continue
		}
		ok, err := slurm.MatchConstraint(j.Constraint, n.Features)
		if err != nil {
			return nil, fmt.Errorf("job %d: --constraint: %w", j.ID, err)
		}
		if ok {
			out = append(out, n.Name)
		}
	}
	switch {
	case len(out) == len(o.nodes):
		out = nil
	case len(out) == 0 && len(required) > 0:
		return nil, fmt.Errorf("job %d: no node of its --nodelist=%s is usable in partition %s or satisfies --constraint=%q",
			j.ID, slurm.CompressHostlist(required), part, j.Constraint)
	case len(out) == 0:
		return nil, fmt.Errorf("job %d: no usable node of partition %s satisfies --constraint=%q without the %d --exclude nodes",
			j.ID, part, j.Constraint, len(j.Excluded))
	}
	if plain {
		if o.memo == nil {
			o.memo = map[[4]string][]string{}
		}
		o.memo[key] = out
	}
	return out, nil
}

// clusterShape is what the managed partitions' usable nodes add up to.
type clusterShape struct {
	nodeGPUs int // GPUs of the largest node
	gpus     int // GPUs in all, or what the job's limits allow when less
	// limited says gpus is the job's limit, not the cluster's.
	limited bool
}

// View is one cycle's picture of the cluster: the policy's snapshot and the
// Slurm jobs behind it.
type View struct {
	Snapshot *policy.Snapshot
	managed  map[string]*managedJob
	// Unmanaged lists held jobs with a rubick tag that the policy cannot
	// schedule (no fitted model, malformed tag), with the reason.
	Unmanaged map[int]string
	// Unschedulable lists the jobs of Unmanaged that the policy could not
	// take (their conversion failed), with the error, for the daemon to
	// log when it is new.
	Unschedulable map[int]string
	// Adjusted lists managed jobs on whose request no plan fits: the
	// policy plans them from the nearest GPU count where one does. The
	// value says why and from what.
	Adjusted map[int]string
	// Bounds names, for managed jobs whose GPUs a Slurm limit bounds, the
	// bound and the limit that sets it, for rubick explain.
	Bounds map[int]GPUBound
	// NodeBounds does the same for the nodes a job may span.
	NodeBounds map[int]NodeBound
	// Mins are the minimums of managed jobs that have one (policy.Job
	// Min), with the limits that set them, for rubick explain.
	Mins map[int]MinBound
	// Arrays are held job arrays whose tasks are still one record, with
	// the tasks to split off this cycle; they are planned once split.
	Arrays []arraySplit
	// Starting lists jobs rubickd released less than StartGrace ago that
	// Slurm has not started yet; a cycle that sees any waits for them.
	Starting []int
	// Rigid lists held jobs with a rubick tag the policy cannot schedule
	// (no fitted model yet, malformed tag). They are released on their own
	// request rather than left held: a job is never stranded.
	Rigid []slurm.Job
	// Reserved is what the snapshot holds back for the first pending
	// rigid job (rigid_jobs: schedule); nil when none waits.
	Reserved *Reservation
	// usage is the GPUs, CPUs and memory running jobs hold per group limit.
	usage map[slurm.Group]slurm.GroupLimits
	// nodes counts the nodes running jobs hold per group limit on nodes.
	nodes groupNodes
	// gpuTypes are the nodes' GPU types, for the limits on one type.
	gpuTypes nodeGPUTypes
	// Waiting lists pending jobs kept held while a limit of theirs has no
	// room left: a group's, or one on each job set to 0; Unmanaged says
	// which, waitReasons the reason code of those not a group's.
	Waiting     []slurm.Job
	waitReasons map[int]policy.Reason
	// Marked lists pending jobs someone else requeued held
	// (slurm.RequeuedByOther), to mark held by their user (HoldActions):
	// those not marked yet, and those marked whose tag does not count
	// the requeue yet.
	Marked []slurm.Job
	// Deferred lists held jobs that do not queue for GPUs: held by their
	// user or an administrator, or, never run, waiting for their --begin
	// or their dependencies. They queue from the cycle that wait ends
	// (JobFacts.Deferred).
	Deferred []slurm.Job
	// jobs are the jobs the View was built from, by ID.
	jobs map[int]slurm.Job
	// licenses are how many of each listed license are free; nil when not
	// listed. licensesOf are the managed pending jobs' license requests.
	licenses   map[string]int
	licensesOf map[int]map[string]int
	// gresFree is what of each GRES other than GPUs is free on each open
	// node (slurm.Node.GresFree), for the check of one plan's starts
	// together.
	gresFree map[string]map[string]int
}

// GPUBound is the most GPUs a job's Slurm limits let it hold, and why.
type GPUBound struct {
	GPUs int
	By   string
}

// NodeBound is the most nodes a job's Slurm limits let it span, and why.
type NodeBound struct {
	Nodes int
	By    string
}

// MinBound is the least a job's Slurm limits let it have, and why.
type MinBound struct {
	Min policy.Size
	By  string
}

// nodeCount says n nodes in words: "1 node", "2 nodes".
func nodeCount(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

// batchKey names, in the policy's snapshot, the estimator of model type mt
// at a job's own global batch gb.
func batchKey(mt string, gb int) string { return fmt.Sprintf("%s@gb%d", mt, gb) }

// Estimators gives the fitted estimator of a model type, or false.
type Estimators func(modelType string) (policy.Estimator, bool)

// JobFacts are what the store knows of a job beyond what Slurm says.
type JobFacts struct {
	// Cannot is what the job's launch line cannot express (every plan
	// rubickd gives it avoids these features).
	Cannot model.Features
	// GlobalBatch is the global batch the job trains with, as rubick-srun
	// reported it or, before its first start, its batch script says: its
	// plans keep it. 0: not known, the model type's.
	GlobalBatch int
	// RestartCost is the median of the job's own measured restarts; 0
	// prices them as its model type's.
	RestartCost time.Duration
	// IterS is the iteration time of RanPlan the running job reports on
	// its current run, read where its time limit may stretch; 0 when
	// unknown. It counts where the job is priced at RanPlan.
	IterS float64
	// RanPlan is the plan the running job's newest report on its current
	// training run names (since its start, and since the end of a
	// profiling phase on it), read while it is not profiling; the zero
	// Plan when none. The job is priced at it where it differs from its
	// tag's and fits what the job holds (ranFits).
	RanPlan model.Plan
	// Deferred is when rubickd last saw the job held by its user or an
	// administrator, or, before its first start, wait for its --begin or
	// dependencies (View.Deferred); zero: never.
	Deferred time.Time
	// ScriptUnread says that the pending job's batch script is read in a
	// coming cycle, this one's reads spent: it waits for it (scriptFacts).
	ScriptUnread bool
	// Unrecorded is run time of runs Slurm requeued that the job's tag
	// does not count yet (noteRuns): it ran that long too.
	Unrecorded time.Duration
}

// Inputs is what one cycle read: Slurm's nodes, jobs and QOS limits, and
// what rubick knows beyond them.
type Inputs struct {
	Nodes []slurm.Node
	Jobs  []slurm.Job
	// Estimators gives each fitted model type's estimator.
	Estimators Estimators
	// RestartCosts are the measured restart costs per model type; others
	// are priced at Config.RestartCost.
	RestartCosts map[string]time.Duration
	// Facts holds, per job id, what the store knows of it beyond Slurm.
	Facts map[int]JobFacts
	// Licenses are the cluster's licenses and how many of each are free;
	// nil when not listed (a pending job then asks Slurm for its own).
	Licenses []slurm.License
	// Limits are the QOS and association limits slurmdbd lists; empty when
	// unknown, and then Slurm's pending reasons teach them (tagLimit).
	Limits slurm.Limits
	// Reservations are Slurm's advance reservations; those active now keep
	// their nodes for their own jobs.
	Reservations []slurm.Reservation
	// FairShare holds the fair-share factors of the jobs' associations,
	// when the policy orders best-effort jobs by them.
	FairShare slurm.FairShares
	// Priority computes the jobs' Slurm priorities, when the policy orders
	// best-effort jobs by them; nil otherwise.
	Priority *slurm.Priorities
	// ReleaseAll hands the queue back to Slurm (rubickd --release-all):
	// every job held for rubick is released on its own request, and none
	// is planned.
	ReleaseAll bool
}

// arrayTasks is what one job array with a limit on running tasks
// (ArrayMaxTasks) has split off: its running, suspended and released
// pending tasks (busy), and those held for rubick, lowest task ID first.
// Tasks its user or an administrator holds count in neither.
type arrayTasks struct {
	max, busy int
	held      []slurm.Job
}

// limitedArrays returns the arrayTasks of each job array with a limit on
// running tasks, by array ID. Slurm keeps the limit on tasks split off the
// array too.
func limitedArrays(jobs []slurm.Job) map[int]*arrayTasks {
	arrays := map[int]*arrayTasks{}
	for _, j := range jobs {
		if j.ArrayJobID == 0 || j.ArrayMaxTasks <= 0 || j.ArrayTasks != "" {
			continue // the array's unsplit record is split before any release
		}
		a := arrays[j.ArrayJobID]
		if a == nil {
			a = &arrayTasks{max: j.ArrayMaxTasks}
			arrays[j.ArrayJobID] = a
		}
		switch {
		case j.Allocated() || j.State == slurm.StatePending && !j.Held:
			a.busy++
		case j.State == slurm.StatePending && !slurm.HeldByAdmin(j) && !slurm.HeldByUser(j) && !slurm.RequeuedByOther(j):
			a.held = append(a.held, j)
		}
	}
	for _, a := range arrays {
		slices.SortFunc(a.held, func(x, y slurm.Job) int { return cmp.Compare(x.ArrayTaskID, y.ArrayTaskID) })
	}
	return arrays
}

// throttledTasks returns, by job ID, the held tasks of arrays that Slurm
// would not start now if released, with the array's limit: the array's
// busy tasks take its places first, then its held ones in task order, as
// a user of --array=0-9%2 expects.
func throttledTasks(arrays map[int]*arrayTasks) map[int]int {
	out := map[int]int{}
	for _, a := range arrays {
		for _, j := range a.held[min(max(a.max-a.busy, 0), len(a.held)):] {
			out[j.ID] = a.max
		}
	}
	return out
}

// BuildView converts what Slurm reports into a policy snapshot. Only nodes
// of the managed partitions that can run jobs count; their capacity is
// reduced by whatever jobs rubick does not manage hold on them, and, with
// rigid_jobs: schedule, by what the first pending rigid job needs.
func BuildView(cfg Config, now time.Time, in Inputs, log *slog.Logger) (*View, error) {
	nodes, jobs, est, facts := in.Nodes, in.Jobs, in.Estimators, in.Facts
	v := &View{managed: map[string]*managedJob{}, Unmanaged: map[int]string{}, Unschedulable: map[int]string{}, Adjusted: map[int]string{}, Bounds: map[int]GPUBound{},
		NodeBounds: map[int]NodeBound{}, Mins: map[int]MinBound{}, jobs: make(map[int]slurm.Job, len(jobs))}
	for _, j := range jobs {
		v.jobs[j.ID] = j
	}
	models := map[string]policy.Estimator{}
	restartCosts := maps.Clone(in.RestartCosts) // and those of the estimators of jobs' own global batches
	if restartCosts == nil {
		restartCosts = map[string]time.Duration{}
	}
	var pjobs []policy.Job
	usage := map[string]policy.NodeAlloc{} // what managed jobs hold, per node
	var shape clusterShape
	reserved := map[string][]string{} // node -> the active reservations holding it
	activeResv := map[string]bool{}
	for _, r := range in.Reservations {
		if r.Active(now) {
			activeResv[r.Name] = true
			for _, n := range r.Nodes {
				reserved[n] = append(reserved[n], r.Name)
			}
		}
	}
	isUsable := func(n slurm.Node) bool { return usable(n, cfg.Partitions, len(reserved[n.Name]) > 0) }
	var open openNodes
	openSet := map[string]bool{}
	for _, n := range nodes {
		if isUsable(n) {
			openSet[n.Name] = true
			open.nodes = append(open.nodes, n)
			open.resv = append(open.resv, reserved[n.Name])
			shape.nodeGPUs = max(shape.nodeGPUs, n.GPUs)
			shape.gpus += n.GPUs
		}
	}
	if slices.ContainsFunc(jobs, func(j slurm.Job) bool { return len(j.OtherGres) > 0 }) {
		v.gresFree = map[string]map[string]int{}
		for _, n := range open.nodes {
			v.gresFree[n.Name] = n.GresFree
		}
	}
	active := map[int]bool{}          // jobs not ended, by ID, for dependencies
	firstNamed := map[[2]string]int{} // the first such job of each name and user, for singleton
	for _, j := range jobs {
		if !j.Ended() {
			active[j.ID] = true
			if k := [2]string{j.Name, j.User}; firstNamed[k] == 0 || j.ID < firstNamed[k] {
				firstNamed[k] = j.ID
			}
		}
	}
	arrays := limitedArrays(jobs)
	throttled := throttledTasks(arrays)
	groupsOf := &groupsMemo{l: in.Limits}
	v.gpuTypes = nodeGPUTypes{}
	for _, n := range nodes {
		v.gpuTypes[n.Name] = n.GPUTypes
	}
	partTypes := map[string][]string{} // the GPU types of each partition's usable nodes; none: untyped
	for _, n := range open.nodes {
		for _, p := range n.Partitions {
			if partTypes[p] == nil {
				partTypes[p] = []string{}
			}
			for _, t := range n.GPUTypes {
				if !slices.Contains(partTypes[p], t) {
					partTypes[p] = append(partTypes[p], t)
				}
			}
		}
	}
	v.usage, v.nodes = groupUsage(groupsOf, jobs, v.gpuTypes, now)
	stopped := stoppedPartitions(in.Limits.Partitions)
	for _, j := range jobs {
		if j.State != slurm.StatePending && !j.Allocated() {
			continue
		}
		part := partitionOf(j, cfg.Partitions, open.nodes, stopped)
		if part == "" {
			if heldForRubick(j) {
				// job_submit.lua manages its partition, rubickd does not
				// (stranded): said here for rubick status and explain.
				v.Unmanaged[j.ID] = fmt.Sprintf("held for rubick in partition %s, which rubickd does not manage (partitions in rubickd.yaml; MANAGED_PARTITIONS in job_submit.lua): waits for a release by hand", j.Partition)
			}
			continue
		}
		if j.State == slurm.StateSuspended {
			// Its GPUs and memory stay its own (the nodes' counters show
			// them) but nothing it runs moves: a checkpoint signal would
			// wait for the resume, and a restart would undo the suspension
			// (an administrator's, or Slurm's own preemption).
			if j.Tag != nil && j.Tag.ModelType != "" {
				v.Unmanaged[j.ID] = "suspended (scontrol suspend, or Slurm's own suspend preemption or gang scheduling): keeps its GPUs and memory; planned again once resumed"
			}
			continue
		}
		if j.Tag != nil || j.TagErr != nil {
			// Holds that are not rubick's to release, whatever else
			// rubick makes of the job.
			if slurm.HeldByAdmin(j) {
				// An admin's scontrol hold: Slurm's (job_submit.lua's
				// hold reads JobHeldUser), or, of a job rubick held, the
				// field job_submit.lua writes.
				v.Unmanaged[j.ID] = "held by an administrator (scontrol hold); planned once released"
				v.noteDeferred(j, true)
				continue
			}
			if slurm.HeldByUser(j) {
				v.Unmanaged[j.ID] = fmt.Sprintf("held by its user (%s in its comment: sbatch --hold or scontrol hold); planned once they release it (scontrol release)", slurm.UserHoldWord)
				if slurm.RequeuedByOther(j) {
					// Marked for a requeue by hand, its tag not yet
					// counting it (a failed write): their release would
					// read as another such requeue, marked again.
					v.Marked = append(v.Marked, j)
				}
				v.noteDeferred(j, true)
				continue
			}
			if slurm.RequeuedByOther(j) {
				v.Unmanaged[j.ID] = "requeued and held by its user or an administrator (scontrol requeuehold); planned once they release it (scontrol release)"
				v.Marked = append(v.Marked, j)
				v.noteDeferred(j, true)
				continue
			}
			if in.ReleaseAll {
				// Running jobs run on as they are; released ones wait
				// for Slurm already.
				if j.State == slurm.StatePending && j.Held {
					v.asSubmitted(j, "released on its own request: rubickd --release-all handed the queue back to Slurm")
				}
				continue
			}
			if st, ok := stopped[part]; ok {
				// A start there would wait, and a restart would not come
				// back: the job stays as it is until the partition is up.
				if j.State == slurm.StatePending {
					v.Unmanaged[j.ID] = fmt.Sprintf("partition %s is %s: Slurm starts no job there; planned once it is UP", part, st)
				} else {
					v.Unmanaged[j.ID] = fmt.Sprintf("partition %s is %s: runs on as it is, since Slurm would not start it again", part, st)
				}
				continue
			}
		}
		if j.TagErr != nil {
			v.asSubmitted(j, j.TagErr.Error())
			continue
		}
		if j.Tag == nil || j.Tag.ModelType == "" {
			continue // rigid: Slurm schedules it; its usage shows in the node counters
		}
		if j.NodesErr != nil {
			// A --nodelist or --exclude read as none would let a plan put
			// it anywhere, and a restart would lose where it runs.
			v.asSubmitted(j, fmt.Sprintf("its node lists could not be read (%v): runs on its own request, placed by Slurm", j.NodesErr))
			continue
		}
		if j.Interactive {
			// Slurm neither requeues it nor signals a batch shell (22.05
			// lab: "Only batch jobs are accepted or processed"), so it
			// could never be restarted on another size.
			v.asSubmitted(j, "interactive (salloc or srun): runs on its own request; rubick reconfigures batch jobs, which it can checkpoint and requeue")
			continue
		}
		if !j.Requeue {
			// Slurm refuses rubick's requeuehold of it, so it could never
			// be restarted on another size: job_submit.lua makes jobs
			// requeueable at submission (FORCE_REQUEUE), but its user may
			// set Requeue=0 since (22.05 lab).
			v.asSubmitted(j, "not requeueable (scontrol update Requeue=0, or --no-requeue without FORCE_REQUEUE): runs on its own request; rubick reconfigures jobs by requeueing them")
			continue
		}
		if j.Reservation != "" && !activeResv[j.Reservation] {
			// Not active (or not listed): Slurm starts it when it is.
			v.asSubmitted(j, fmt.Sprintf("--reservation=%s is not active: runs on its own request, placed by Slurm in the reservation", j.Reservation))
			continue
		}
		if len(j.GPUTypes) > 1 {
			// One per-node count cannot keep a request for several types.
			v.asSubmitted(j, fmt.Sprintf("GPUs of types %s: runs on its own request, placed by Slurm", strings.Join(j.GPUTypes, ", ")))
			continue
		}
		if j.HetJobID != 0 {
			// Slurm resizes no component of a heterogeneous job and starts
			// them together: the leader's release starts them all.
			why := fmt.Sprintf("component %d of heterogeneous job %d: runs on its own request, placed by Slurm", j.HetJobOffset, j.HetJobID)
			if j.ID == j.HetJobID {
				v.asSubmitted(j, why)
			} else {
				v.Unmanaged[j.ID] = why
			}
			continue
		}
		if j.State == slurm.StatePending && j.Held && j.ArrayTasks != "" {
			// One record for many tasks: a release would start them all
			// alike. Split them off first; each is then a job of its own.
			n := splitPerCycle
			if j.ArrayMaxTasks > 0 {
				// A split task is a job record of its own (in squeue too):
				// split no further ahead than the array's limit lets run,
				// with as many held ready as it has places.
				held := 0
				if a := arrays[j.ArrayJobID]; a != nil {
					held = len(a.held)
				}
				if n = min(n, j.ArrayMaxTasks-held); n <= 0 {
					v.Unmanaged[j.ID] = fmt.Sprintf("tasks %s wait for tasks of their array to end: it runs at most %d at once (--array=...%%%d, ArrayTaskThrottle) and has %d split off and held; split off once one starts",
						j.ArrayTasks, j.ArrayMaxTasks, j.ArrayMaxTasks, held)
					continue
				}
			}
			tasks, err := slurm.ArrayTaskIDs(j.ArrayTasks, n)
			if err != nil {
				v.asSubmitted(j, err.Error())
				continue
			}
			v.Arrays = append(v.Arrays, arraySplit{job: j, tasks: tasks})
			continue
		}
		if j.State == slurm.StatePending && j.Held && j.Licenses != "" && in.Licenses != nil {
			if why, short := v.licensesShort(j, in.Licenses); short {
				// Slurm would keep it pending for them; GPUs planned for
				// it would stay idle meanwhile.
				v.Unmanaged[j.ID] = why
				continue
			}
		}
		if j.State == slurm.StatePending && j.Held && j.EligibleTime.After(now) {
			// Its --begin (or the few seconds Slurm puts before a
			// requeued job may start): a size chosen now would be stale
			// by then, and GPUs planned for it would stay idle.
			v.Unmanaged[j.ID] = fmt.Sprintf("waits for its begin time %s; planned once it comes", j.EligibleTime.UTC().Format(time.RFC3339))
			v.noteDeferred(j, false)
			continue
		}
		singleton := firstNamed[[2]string{j.Name, j.User}] < j.ID // an earlier job of its name and user has not ended
		if j.State == slurm.StatePending && (j.Held && waitsOn(j.Dependency, active, singleton) || !j.Held && slurm.WaitReason(j.Reason)) {
			// Its dependencies, begin time or a job-count limit hold it,
			// not nodes: GPUs planned for it would stay idle meanwhile.
			why := j.Reason
			if j.Held {
				why = "dependency " + j.Dependency
				v.noteDeferred(j, false)
			}
			v.Unmanaged[j.ID] = fmt.Sprintf("waits for %s; planned once Slurm lets it start", why)
			continue
		}
		if n, ok := throttled[j.ID]; ok {
			// Released, it would wait (JobArrayTaskLimit) on GPUs planned
			// for it, which others could use meanwhile.
			v.Unmanaged[j.ID] = fmt.Sprintf("waits for a task of its array to end: the array runs at most %d at once (--array=...%%%d, ArrayTaskThrottle); planned once one ends", n, n)
			continue
		}
		if j.Exclusive {
			// Slurm keeps every other job off its nodes, whatever share of
			// them it uses, while the policies place jobs side by side.
			v.asSubmitted(j, "--exclusive: runs on its own request, placed by Slurm; rubick reconfigures jobs that share nodes")
			continue
		}
		// A size limit is Slurm's verdict on a released job: it will not
		// start as it is, so there is no start to wait for.
		limit := ""
		if j.State == slurm.StatePending && refusedSize(j) {
			if j.Tag.Extra[tagLimit] != "" {
				// Held back even within its request: Slurm decides when it
				// starts. A job rubick had resized gets its request back.
				v.Unmanaged[j.ID] = fmt.Sprintf("Slurm holds it back for a limit (%s) within its request; it starts when Slurm allows", j.Reason)
				if !atRequest(j) {
					v.Rigid = append(v.Rigid, j)
				}
				continue
			}
			limit = strings.Map(func(r rune) rune {
				if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
					return r
				}
				return -1
			}, j.Reason) // a tag value
		} else if starting(j, now, openSet) {
			v.Starting = append(v.Starting, j.ID)
			continue
		}
		if facts[j.ID].ScriptUnread && j.State == slurm.StatePending {
			v.Unmanaged[j.ID] = "its batch script is read in a coming cycle, this one's reads spent; planned then, on a plan its launch line can run"
			continue
		}
		e, ok := est(j.Tag.ModelType)
		if !ok {
			v.asSubmitted(j, fmt.Sprintf("model type %q has no fitted model", j.Tag.ModelType))
			continue
		}
		// The estimator is the snapshot's by name, and so are the policy's
		// caches: a job that trains with a global batch of its own gets one
		// of its own.
		estKey := j.Tag.ModelType
		if gb := facts[j.ID].GlobalBatch; gb > 0 && gb != e.Spec().GlobalBatch {
			if r, ok := policy.Rebatch(e, gb); ok {
				e, estKey = r, batchKey(j.Tag.ModelType, gb)
				if c, ok := in.RestartCosts[j.Tag.ModelType]; ok {
					restartCosts[estKey] = c
				}
			}
		}
		lim := in.Limits.PerJob(j, part)
		least, minBy, unmet := in.Limits.MinPerJob(j, part)
		if unmet != "" {
			// Slurm holds it at any size: left to Slurm.
			v.asSubmitted(j, "Slurm holds it at any size for "+unmet)
			continue
		}
		zero, perJob := in.Limits.Zero(j, part)
		if zero == "" && j.State != slurm.StatePending {
			// A wall limit lowered below its time limit holds it as a 0
			// holds every job.
			zero = wallBelow(j, lim.Wall, now)
		}
		if zero != "" {
			// Not no limit: Slurm starts no job it applies to, and a
			// running one it requeued would wait until it is raised.
			if j.State == slurm.StatePending {
				reason := policy.ReasonGroup
				if perJob {
					reason = reasonJobLimit
				}
				v.waits(j, reason, fmt.Sprintf("waits for %s to be raised: Slurm starts no job it applies to", zero))
			} else {
				v.Unmanaged[j.ID] = fmt.Sprintf("%s: runs on as it is, since Slurm would not start it again until the limit is raised", zero)
			}
			continue
		}
		groups := groupsOf.of(j, part)
		room := roomOf(groups, v.usage, j, v.gpuTypes, now)
		var minMem int64
		if (room.mem >= 0 || room.memMins >= 0 || lim.MemMins > 0) && j.State == slurm.StatePending {
			minMem = oneGPUMem(cfg, e, j, in.Limits.Partitions[part].MaxMemPerCPUMB)
		}
		if why, full := room.full(v.usage, minMem); full && j.State == slurm.StatePending {
			// Slurm would hold it back whatever its size: it stays held
			// and is planned once the group has room.
			v.waits(j, policy.ReasonGroup, why)
			continue
		}
		held := holds(j, now)
		bound := GPUBound{GPUs: lim.GPUs, By: "MaxTRESPerJob of its QOS, its partition's QOS or its association"}
		lim.GPUs, lim.CPUs = capBy(lim.GPUs, room.gpus, held.GPUs), capBy(lim.CPUs, room.cpus, held.CPUs)
		lim.MemMB = capBy(lim.MemMB, room.mem, held.MemMB)
		if lim.GPUs != bound.GPUs {
			bound = GPUBound{lim.GPUs, fmt.Sprintf("%s, %d GPUs left", room.gpuBy.Limit, room.gpus)}
		}
		mins := minutesOf(j, lim, room)
		if j.State == slurm.StatePending {
			if why, never, ok := mins.noRoom(v.usage, minMem); ok {
				if never {
					// Slurm holds it back at any size: left to Slurm.
					v.asSubmitted(j, why)
				} else {
					v.waits(j, policy.ReasonGroup, why)
				}
				continue
			}
		}
		nbound := NodeBound{lim.Nodes, "MaxTRESPerJob node of its QOS, its partition's QOS or its association, or its partition's MaxNodes"}
		lim.GPUs, lim.CPUs, lim.MemMB, lim.Nodes = mins.bound(lim.GPUs, lim.CPUs, lim.MemMB, lim.Nodes, held, len(j.NodeList))
		if lim.Nodes != nbound.Nodes {
			nbound = NodeBound{lim.Nodes, mins.nodeBy()}
		}
		nodeRoom := v.nodes.nodeRoomOf(groups, j)
		if nodeRoom.room >= 0 {
			// Its groups' own nodes cost it nothing: it may span them
			// beside the nodes left (policy.NodeQuota).
			lim.Nodes = capBy(lim.Nodes, nodeRoom.room+len(nodeRoom.shared), len(j.NodeList))
		}
		if lim.Nodes != nbound.Nodes {
			why := fmt.Sprintf("%s, %s left", nodeRoom.by.Limit, nodeCount(nodeRoom.room))
			if len(nodeRoom.shared) > 0 {
				why += fmt.Sprintf(" beside the %s its jobs hold", nodeCount(len(nodeRoom.shared)))
			}
			nbound = NodeBound{lim.Nodes, why}
		}
		if nbound.Nodes > 0 {
			v.NodeBounds[j.ID] = nbound
		}
		if lim.GPUs != bound.GPUs {
			bound = GPUBound{lim.GPUs, mins.gpuBy()}
		}
		// A GPU bills its type's weight too: the one the job asks for, or
		// the highest of its partition's.
		types := partTypes[part]
		if len(j.GPUTypes) == 1 {
			types = j.GPUTypes
		}
		weights := in.Limits.Partitions[part].Billing.ForTypes(types)
		if !v.billBounds(j, weights, billRooms(lim, room, v.usage, mins.limit), &lim, &bound, held, func() int64 { return oneGPUMem(cfg, e, j, in.Limits.Partitions[part].MaxMemPerCPUMB) }) {
			continue
		}
		if bound.GPUs > 0 {
			v.Bounds[j.ID] = bound
		}
		jshape := shape // what the job's limits let it reach
		if lim.GPUs > 0 && lim.GPUs < jshape.gpus {
			jshape.gpus, jshape.limited = lim.GPUs, true
		}
		mj, pj, err := convertJob(cfg, now, j, e, facts[j.ID], jshape, limit)
		pj.FairShare, _ = in.FairShare.Of(j.Cluster, j.Account, j.User, part)
		if in.Priority != nil {
			f := in.Priority.Factors(j, part, now)
			pj.Priority, pj.PriorityTier, pj.PriorityFactors = f.Priority(), f.Tier, f.String()
		}
		pj.Max = policy.Size{GPUs: lim.GPUs, Nodes: lim.Nodes, CPUs: lim.CPUs, MemGB: float64(lim.MemMB) / 1024,
			GPUsPerNode: lim.GPUsPerNode, CPUsPerNode: lim.CPUsPerNode, MemGBPerNode: float64(lim.MemMBPerNode) / 1024}
		// Slurm raises the CPUs of a job with more memory per CPU than
		// this, past what the policy counted free.
		pj.MaxMemPerCPUGB = float64(in.Limits.Partitions[part].MaxMemPerCPUMB) / 1024
		if nodeRoom.room >= 0 {
			pj.NodeQuota = &policy.NodeQuota{Shared: nodeRoom.shared, New: nodeRoom.room}
		}
		pj.Min = policy.Size{GPUs: least.GPUs, Nodes: least.Nodes, CPUs: least.CPUs, MemGB: float64(least.MemMB) / 1024}
		if minBy != "" {
			v.Mins[j.ID] = MinBound{pj.Min, minBy}
		}
		if err == nil {
			mj.time.max = lim.Wall
			mj.time.runMins = [5]int64{max(room.gpuMins, 0), max(room.cpuMins, 0), max(room.billingMins, 0), max(room.memMins, 0), max(room.nodeMins, 0)}
			mj.time.perJob = [5]int64{lim.GPUMins, lim.CPUMins, lim.BillingMins, lim.MemMins, lim.NodeMins}
			if weights.Unread != "" {
				mj.time.runMins[2], mj.time.perJob[2] = 0, 0 // its bills are unknown
			}
			mj.nodes, err = userNodes(j)
		}
		if err == nil {
			pj.Nodes, err = open.allowedNodes(j, part, mj.nodes)
		}
		if err == nil {
			var ok bool
			if pj.Nodes, ok = nodeRoom.restrict(pj.Nodes, open.nodes); !ok {
				if j.State == slurm.StatePending {
					delete(v.Bounds, j.ID)
					delete(v.NodeBounds, j.ID)
					v.waits(j, policy.ReasonGroup, nodeRoom.waits(v.nodes))
					continue
				}
				pj.Nodes = j.NodeList // it keeps the nodes it holds
			}
		}
		if err == nil && len(j.OtherGres) > 0 {
			var why string
			if pj.Nodes, why = gresNodes(j, pj.Nodes, open.nodes); why != "" {
				// Slurm would keep it pending on any node rubick chose.
				v.Unmanaged[j.ID] = why
				delete(v.Bounds, j.ID)
				delete(v.NodeBounds, j.ID)
				continue
			}
		}
		if len(j.Partitions()) > 1 {
			mj.part = part
		}
		if err == nil && mj.adjusted != "" {
			v.Adjusted[j.ID] = mj.adjusted
			log.Debug("request adjusted", "job", j.ID, "why", mj.adjusted)
		}
		if err != nil {
			v.Unschedulable[j.ID] = err.Error()
			v.asSubmitted(j, err.Error())
			continue
		}
		pj.Model = estKey
		if estKey != j.Tag.ModelType {
			pj.GlobalBatch = e.Spec().GlobalBatch
		}
		models[estKey] = e
		mj.groups, mj.billing = groups, weights
		v.managed[pj.ID] = mj
		pjobs = append(pjobs, pj)
		for _, a := range pj.Alloc {
			u := usage[a.Node]
			u.GPUs += a.GPUs
			u.CPUs += a.CPUs
			u.MemGB += a.MemGB
			usage[a.Node] = u
		}
	}
	var pnodes []policy.Node
	for _, n := range nodes {
		u := usage[n.Name]
		if !isUsable(n) {
			if u.GPUs > 0 || u.CPUs > 0 {
				// Drained or reserved under a running rubick job: the job
				// keeps what it holds (or is moved), nothing new goes there.
				pnodes = append(pnodes, policy.Node{Name: n.Name, GPUs: u.GPUs, CPUs: u.CPUs, MemGB: u.MemGB})
			}
			continue
		}
		// Capacity left to rubick: total minus what others hold, where
		// others = used - rubick's own.
		others := func(used, mine int) int { return max(used-mine, 0) }
		memOthers := max(float64(n.MemAllocMB)/1024-u.MemGB, 0)
		pnodes = append(pnodes, policy.Node{
			Name:  n.Name,
			GPUs:  max(n.GPUs-others(n.GPUsUsed, u.GPUs), 0),
			CPUs:  max(n.CPUs-others(n.CPUsAlloc, u.CPUs), 0),
			MemGB: math.Max(float64(n.MemMB)/1024-memOthers, 0),
		})
	}
	if cfg.RigidJobs == RigidSchedule {
		v.Reserved = reserveRigid(cfg, jobs, nodes, pnodes, usage)
	}
	var tenants []policy.Tenant
	for _, t := range cfg.Tenants {
		tenants = append(tenants, policy.Tenant{Name: t.Name, GPUQuota: t.QuotaGPUs})
	}
	groups := snapshotGroups(pjobs, v.managed, v.usage, v.gpuTypes, pnodes, now)
	snap, err := policy.NewSnapshot(now, pnodes, pjobs, tenants, models, cfg.RestartCost, policy.WithRestartCosts(restartCosts),
		policy.WithGroups(groups))
	if err != nil {
		return nil, err
	}
	v.Snapshot = snap
	return v, nil
}

// snapshotGroups are the GPU and CPU group limits of the managed jobs as
// the policy keeps their jobs within them together: each limit less what
// the running jobs outside the snapshot hold under it. A billing limit
// whose jobs here all run in partitions without TRESBillingWeights bills
// their CPUs alone, so it is a CPU limit too. It names each job's groups
// in its Groups, those that could bind: a group with room for the whole of
// nodes bounds nothing. Memory limits and weighted billing stay per job
// (Max) and with SlurmActions' check: the policy books memory after it
// places GPUs.
func snapshotGroups(pjobs []policy.Job, managed map[string]*managedJob, usage map[slurm.Group]slurm.GroupLimits, types nodeGPUTypes,
	nodes []policy.Node, now time.Time) []policy.Group {
	inside := map[slurm.Group]slurm.GroupLimits{}
	weighted := map[slurm.Group]bool{} // one of its jobs here bills more than CPUs, or an unknown bill
	jobs := map[slurm.Group]int{}      // its jobs here
	for i := range pjobs {
		mj := managed[pjobs[i].ID]
		held := holds(mj.slurm, now)
		for _, g := range mj.groups {
			// A job a typed limit does not hold back is left out of its
			// group: its GPUs of the type stay in the group's use.
			if (g.GPUs > 0 || g.CPUs > 0 || g.Billing > 0 || g.Jobs > 0) && g.Binds(mj.slurm) {
				inside[g] = plus(inside[g], types.share(g, held, mj.slurm.NodeList), 1)
				weighted[g] = weighted[g] || mj.billing.Set || mj.billing.Unread != ""
				jobs[g]++
			}
		}
	}
	var gpus, cpus int
	for _, n := range nodes {
		gpus, cpus = gpus+n.GPUs, cpus+n.CPUs
	}
	room := func(limit, used, mine int) int {
		if limit <= 0 {
			return -1
		}
		return max(limit-(used-mine), 0)
	}
	binds := map[slurm.Group]policy.Group{}
	for g, in := range inside {
		u := usage[g]
		pg := policy.Group{Name: g.Limit, GPUs: room(g.GPUs, u.GPUs, in.GPUs), CPUs: room(g.CPUs, u.CPUs, in.CPUs),
			Jobs: room(g.Jobs, u.Jobs, in.Jobs), JobsName: g.JobsName()}
		if b := room(int(g.Billing), int(u.Billing), int(in.Billing)); !weighted[g] && b >= 0 && (pg.CPUs < 0 || b < pg.CPUs) {
			pg.CPUs = b
		}
		if pg.GPUs >= 0 && pg.GPUs < gpus || pg.CPUs >= 0 && pg.CPUs < cpus || pg.Jobs >= 0 && pg.Jobs < jobs[g] {
			binds[g] = pg
		}
	}
	for i := range pjobs {
		mj := managed[pjobs[i].ID]
		for _, g := range mj.groups {
			if _, ok := binds[g]; ok && g.Binds(mj.slurm) {
				pjobs[i].Groups = append(pjobs[i].Groups, g.Limit)
			}
		}
	}
	keys := slices.SortedFunc(maps.Keys(binds), func(a, b slurm.Group) int {
		return cmp.Or(strings.Compare(a.Limit, b.Limit), cmp.Compare(a.GPUs, b.GPUs), cmp.Compare(a.CPUs, b.CPUs))
	})
	out := make([]policy.Group, 0, len(keys))
	for _, g := range keys {
		if len(out) > 0 && out[len(out)-1].Name == g.Limit {
			continue // one name is one limit; should two ever differ, the first in order is kept
		}
		out = append(out, binds[g])
	}
	return out
}

// refusedSize reports whether Slurm refuses to start the pending job j as
// rubick released it: a limit on its size, or BadConstraints once rubick
// has planned it (a node limit rubick does not read; such a job would
// otherwise stay pending for good, as one did under a partition's
// MaxCPUsPerNode before rubick read it). Slurm sets such a job's priority
// to 0, which reads as held.
func refusedSize(j slurm.Job) bool {
	if j.Reason == "BadConstraints" {
		return j.Tag != nil && j.Tag.Plan != ""
	}
	return !j.Held && slurm.SizeLimitReason(j.Reason)
}

// asSubmitted lists j as ignored, for why, and releases it on its own
// request when it is held for rubick (RigidActions): a job rubick cannot
// plan is never stranded.
func (v *View) asSubmitted(j slurm.Job, why string) {
	v.Unmanaged[j.ID] = why
	if j.State == slurm.StatePending && j.Held {
		v.Rigid = append(v.Rigid, j)
	}
}

// waits keeps pending job j held while a limit of its has no room for it,
// and says why; reason is what rubick explain reads: policy.ReasonGroup
// for a group's limit, reasonJobLimit for one on each job (set to 0).
func (v *View) waits(j slurm.Job, reason policy.Reason, why string) {
	v.Unmanaged[j.ID] = why
	v.Waiting = append(v.Waiting, j)
	if reason != policy.ReasonGroup {
		if v.waitReasons == nil {
			v.waitReasons = map[int]policy.Reason{}
		}
		v.waitReasons[j.ID] = reason
	}
}

// waitReason is the reason code of Waiting job j (waits).
func (v *View) waitReason(j slurm.Job) policy.Reason {
	return cmp.Or(v.waitReasons[j.ID], policy.ReasonGroup)
}

// submitTime is when the job was submitted: the tag's record (tagSubmit)
// where it is earlier than the submit time Slurm reports, which moves to
// each requeue.
func submitTime(j slurm.Job) time.Time {
	if j.Tag == nil {
		return j.SubmitTime
	}
	sec, err := strconv.ParseInt(j.Tag.Extra[tagSubmit], 10, 64)
	if err != nil || sec <= 0 {
		return j.SubmitTime
	}
	if t := time.Unix(sec, 0); j.SubmitTime.IsZero() || t.Before(j.SubmitTime) {
		return t
	}
	return j.SubmitTime
}

// recordSubmit writes job j's submission time (submitTime) into the tag of
// an action on it, so that it outlives the action's requeue.
func recordSubmit(tag *slurm.Tag, j slurm.Job) {
	if t := submitTime(j); !t.IsZero() {
		tag.Extra[tagSubmit] = strconv.FormatInt(t.Unix(), 10)
	}
}

// noteDeferred lists held job j in Deferred: held by its user or an
// administrator (hold), or waiting for its --begin or dependencies if it
// has never run. A requeued job waits its few seconds before its begin
// time too, and has queued since its first wait; a hold is someone's
// decision whenever it comes, and Slurm ages no held job either.
func (v *View) noteDeferred(j slurm.Job, hold bool) {
	if hold || j.RestartCount == 0 && (j.Tag == nil || j.Tag.Generation == 0) {
		v.Deferred = append(v.Deferred, j)
	}
}

// queuedSince is when job j, submitted at submitTime(j), began to queue
// for GPUs: the later of that and deferred, when rubickd last saw it wait
// for a hold's release, its --begin or dependencies (zero: never). A chain of jobs, each
// waiting for the one before it, does not reach the starvation age by
// the time the chain's first jobs ran.
func queuedSince(j slurm.Job, deferred time.Time) time.Time {
	if t := submitTime(j); !deferred.After(t) {
		return t
	}
	return deferred
}

// starting reports whether rubickd released the pending job moments ago,
// and it has not run since. One Slurm requeued since (its node failed:
// its restart count is past the tag's) ran and waits for nodes now, not
// for the start it was released to: awaited as starting, it would stop
// every cycle's decisions until StartGrace from the release (22.05 lab:
// 36 s, with nodes free for it elsewhere). So would one sent to a node
// that has gone down or drained since (open: the usable nodes): it cannot
// start there. Its reason cannot tell that, as Slurm gives
// ReqNodeNotAvail for a node still busy with a job that is ending too.
func starting(j slurm.Job, now time.Time, open map[string]bool) bool {
	if j.State != slurm.StatePending || j.Held || j.Tag == nil {
		return false
	}
	if slurm.RequeuedSinceTag(j) {
		return false
	}
	for _, n := range j.RequiredNodes {
		if !open[n] {
			return false
		}
	}
	sec, err := strconv.ParseInt(j.Tag.Extra[tagAt], 10, 64)
	if err != nil {
		return false
	}
	return now.Sub(time.Unix(sec, 0)) < StartGrace
}

// usable reports whether a node belongs to a managed partition and can run
// jobs. A node Slurm flags RESERVED is usable only when a listed active
// reservation holds it (reserved): rubick then plans that reservation's
// jobs there, and no others.
func usable(n slurm.Node, partitions []string, reserved bool) bool {
	in := false
	for _, p := range n.Partitions {
		in = in || slices.Contains(partitions, p)
	}
	if !in {
		return false
	}
	state := strings.ToUpper(n.State + " " + strings.Join(n.Flags, " "))
	if strings.Contains(state, "RESERVED") && !reserved {
		return false
	}
	for _, bad := range []string{"DOWN", "DRAIN", "FAIL", "INVAL", "NOT_RESPONDING", "MAINT", "POWER", "FUTURE", "UNKNOWN"} {
		if strings.Contains(state, bad) {
			return false
		}
	}
	return true
}

// convertJob maps one tagged Slurm job onto a policy job.
//
// limit is the Slurm reason a size limit holds the pending job back for,
// empty when none does; with it, or once one has (the tag says so), the
// job is planned within its request.
func convertJob(cfg Config, now time.Time, j slurm.Job, e policy.Estimator, facts JobFacts, shape clusterShape, limit string) (*managedJob, policy.Job, error) {
	cannot := facts.Cannot
	mj := &managedJob{slurm: j, tag: *j.Tag, limit: limit}
	if s, ok := j.Tag.Extra[tagReq]; ok {
		r, err := parseRequest(s)
		if err != nil {
			return nil, policy.Job{}, err
		}
		mj.req = r
	} else {
		mj.req = ownRequest(j)
	}
	if mj.req.GPUsPerNode <= 0 {
		return nil, policy.Job{}, fmt.Errorf("job %d: gres gpu per node=%d: a model-type job needs GPUs", j.ID, mj.req.GPUsPerNode)
	}
	ran, err := j.Tag.RanTime()
	if err != nil {
		return nil, policy.Job{}, fmt.Errorf("job %d: %w", j.ID, err)
	}
	mj.ran = ran
	mj.ran += facts.Unrecorded
	tenant := cfg.TenantOf(j.Account, j.QOS)
	pl := make(model.Placement, mj.req.Nodes)
	for i := range pl {
		pl[i] = mj.req.GPUsPerNode
	}
	reqRes := model.Resources{Placement: pl, CPUs: mj.req.CPUs, HostMemGB: float64(mj.req.MemMB) * float64(mj.req.Nodes) / 1024}
	// The user's launch line is not visible to rubickd; the SLO baseline is
	// the best plan on the requested resources that the line can run (any,
	// until rubick-srun has said what it cannot), the strictest reading.
	allow := cannot.Allows
	reqPlan, reqB, err := e.BestPlan(reqRes, allow)
	if err != nil {
		what := "no feasible plan"
		if cannot != 0 {
			what = fmt.Sprintf("no feasible plan without %s (what its launch line cannot run)", cannot)
		}
		// Started on its request the job could only fail, and choosing
		// GPUs is rubick's job: plan it from the nearest count that can
		// run it.
		res, plan, ok := nearestRequest(e, allow, reqRes, mj.req.Nodes, shape)
		if !ok {
			upTo := fmt.Sprintf("the cluster's %d", shape.gpus)
			if shape.limited {
				upTo = fmt.Sprintf("the %d its QOS or association allows", shape.gpus)
			}
			return nil, policy.Job{}, fmt.Errorf("job %d: %s for model %s on its request of %s or on any other GPU count up to %s: %w",
				j.ID, what, j.Tag.ModelType, gpusOn(pl), upTo, err)
		}
		mj.adjusted = fmt.Sprintf("%s for model %s on its request of %s; planned from %s", what, j.Tag.ModelType, gpusOn(pl), gpusOn(res.Placement))
		pl, reqRes, reqPlan = res.Placement, res, plan
		reqB, _ = e.Predict(plan, res)
	}
	mj.time.margin = -1
	if cfg.TimeLimits.Stretch {
		mj.time.margin = cfg.TimeLimits.Margin
	}
	if reqB.Iter > 0 {
		mj.time.reqTput = float64(e.Spec().GlobalBatch) / reqB.Iter
	}
	if mj.time.user, mj.time.fixed, err = userTime(j); err != nil {
		return nil, policy.Job{}, fmt.Errorf("job %d: %w", j.ID, err)
	}
	if !j.Deadline.IsZero() {
		mj.time.untilDeadline = max(j.Deadline.Sub(now), time.Nanosecond)
	}
	mj.time.hasRun = mj.ran > 0 || j.State == slurm.StateRunning
	pj := policy.Job{
		ID: strconv.Itoa(j.ID), Model: j.Tag.ModelType, Tenant: tenant,
		Guaranteed: j.Tag.Class == slurm.ClassGuaranteed && tenant != "",
		Submit:     queuedSince(j, facts.Deferred),
		Request: policy.Request{
			GPUs: pl.GPUs(), CPUs: reqRes.CPUs, MemGB: reqRes.HostMemGB, Placement: pl, Plan: reqPlan,
			MemPerGPUGB: float64(userMemPerGPU(j)) / 1024,
		},
		RunTime: mj.ran,
		// A start after a requeue, rubick's or Slurm's, advances the
		// generation; a job Slurm started again by itself after its
		// requeue paid a restart too, which only Slurm's count shows.
		Reconfigs: max(j.Tag.Generation-1, j.RestartCount, 0),
		// The user's --time: the order of the guaranteed queue and backfill.
		TimeLimit:     mj.time.user,
		Cannot:        cannot,
		RestartCost:   facts.RestartCost,
		WithinRequest: limit != "" || j.Tag.Extra[tagLimit] != "",
		// Slurm gives it that many per GPU whatever rubick asks for.
		CPUsPerGPU: j.CPUsPerGPU,
	}
	if !j.Deadline.IsZero() {
		// Slurm ends a job that starts later than its deadline less its
		// --time-min, or its time limit.
		pj.StartBy = j.Deadline.Add(-cmp.Or(j.TimeMin, mj.time.user))
	}
	if j.State == slurm.StateRunning && len(j.NodeList) > 0 {
		n := len(j.NodeList)
		for _, name := range j.NodeList {
			pj.Alloc = append(pj.Alloc, policy.NodeAlloc{
				Node: name, GPUs: j.GPUsPerNode, CPUs: j.CPUs / n, MemGB: float64(memPerNode(j)) / 1024,
			})
		}
		pj.RunTime += j.RunTime(now)
		plan, ok := tagPlan(j)
		if facts.RanPlan != plan && ranFits(facts.RanPlan, j.GPUsPerNode*n, e.Spec().GlobalBatch, allow) {
			// A job that trains on its launch line as it is (started on
			// its request while its model type had no fit, or outside
			// rubick, or given its plan after its rubick-srun stopped
			// waiting for one): the plan it reports running, until its
			// next start runs its tag's.
			plan, ok = facts.RanPlan, true
		}
		if !ok {
			// Nothing reported yet (or an old tag): assume the best plan
			// for what it holds.
			plan, _, err = e.BestPlan(model.Resources{Placement: policy.PlacementOf(pj.Alloc), CPUs: j.CPUs}, allow)
			if err != nil {
				return nil, policy.Job{}, fmt.Errorf("job %d: no feasible plan on its allocation: %w", j.ID, err)
			}
		}
		pj.Plan = plan
		if facts.IterS > 0 && plan == facts.RanPlan {
			// Its speed on another plan than it is priced at says nothing
			// of the time it needs.
			mj.time.measured = float64(e.Spec().GlobalBatch) / facts.IterS
		}
	}
	return mj, pj, nil
}

// tagPlan is the plan running job j's tag names, false when it names none
// or one for other than the GPUs the job holds.
func tagPlan(j slurm.Job) (model.Plan, bool) {
	plan, err := model.ParsePlan(j.Tag.Plan)
	return plan, err == nil && plan.GPUs() == j.GPUsPerNode*len(j.NodeList)
}

// ranFits reports whether a job holding gpus GPUs and training with
// global batch gb (its estimator's) can be running plan, as a report of
// it says, on a launch line that allow says can run it: a report of an
// earlier allocation or batch is not.
func ranFits(plan model.Plan, gpus, gb int, allow func(model.Plan) bool) bool {
	return plan.GPUs() == gpus && plan.DP*plan.MicroBatch*plan.Accum == gb && allow(plan)
}

// nearestRequest finds the GPU count nearest the request, packed on nodes
// of the cluster's shape, on which some plan the launch line can run fits:
// the most below the request, else the fewest above it (the cluster's GPUs
// at most). CPUs follow the GPUs at the request's ratio, host memory the
// nodes at the request's per-node amount.
func nearestRequest(e policy.Estimator, allow func(model.Plan) bool, req model.Resources, reqNodes int, shape clusterShape) (model.Resources, model.Plan, bool) {
	reqGPUs := req.Placement.GPUs()
	memPerNode := req.HostMemGB / float64(max(reqNodes, 1))
	try := func(g int) (model.Resources, model.Plan, bool) {
		pl := policy.PackedPlacement(g, shape.nodeGPUs)
		res := model.Resources{Placement: pl, CPUs: max(req.CPUs*g/max(reqGPUs, 1), 1), HostMemGB: memPerNode * float64(len(pl))}
		plan, _, err := e.BestPlan(res, allow)
		return res, plan, err == nil
	}
	for g := min(reqGPUs-1, shape.gpus); g >= 1; g-- {
		if res, plan, ok := try(g); ok {
			return res, plan, true
		}
	}
	for g := reqGPUs + 1; g <= shape.gpus; g++ {
		if res, plan, ok := try(g); ok {
			return res, plan, true
		}
	}
	return model.Resources{}, model.Plan{}, false
}

// gpusOn says "5 GPUs on 1 node" of a placement.
func gpusOn(pl model.Placement) string {
	plural := func(n int, what string) string {
		if n == 1 {
			return "1 " + what
		}
		return fmt.Sprintf("%d %ss", n, what)
	}
	return plural(pl.GPUs(), "GPU") + " on " + plural(len(pl), "node")
}

// memPerNode is the memory per node the job asks for (MiB): --mem-per-gpu
// times its GPUs per node, --mem, or --mem-per-cpu times its CPUs spread
// over its nodes; 0 when it asked for none of them. A --mem-per-gpu job
// keeps its memory per GPU when rubick resizes it (MemPerTres, which
// MemPerGPUMB reads), and the per-node value Slurm reports beside it is not
// the job's.
func memPerNode(j slurm.Job) int64 {
	if j.MemPerGPUMB > 0 {
		return j.MemPerGPUMB * int64(j.GPUsPerNode)
	}
	if j.MemPerNodeMB > 0 {
		return j.MemPerNodeMB
	}
	// NodeCount: a pending job has no node list yet.
	if n := max(j.NodeCount, len(j.NodeList), 1); j.MemPerCPUMB > 0 {
		return j.MemPerCPUMB * int64(j.CPUs) / int64(n)
	}
	return 0
}

// userMemPerGPU is the memory per GPU (MiB) a --mem-per-gpu job asked
// for: as rubick recorded its request when it first resized it, as Slurm
// reports it until then; 0 for any other job. rubick raises the job's
// memory per GPU to what a plan books, and that must not become the floor
// of the next plan: the node's share of each plan, spread over the GPUs,
// would raise it again at every resize.
func userMemPerGPU(j slurm.Job) int64 {
	if j.MemPerGPUMB <= 0 {
		return 0
	}
	if r, ok := tagRequest(j); ok && r.GPUsPerNode > 0 && r.MemMB > 0 {
		return (r.MemMB + int64(r.GPUsPerNode) - 1) / int64(r.GPUsPerNode)
	}
	return j.MemPerGPUMB
}

// SlurmActions turns the policy's plan into Slurm actions, in the order
// they must run: releases (preempt, shrink) before takes (restart, start).
// Keep actions become nothing. An action Slurm cannot express is dropped
// and reported in skipped, keyed by job id.
//
// The policy keeps a group's jobs within its GPU and CPU room together, but
// bounds memory, billing and GPU-, CPU- and billing-minutes per job; a
// start or restart that would take a group past any of its limits together
// with the plan's others, after what the plan frees, is dropped too
// (ErrGroupLimit), in the order of the actions: the job stays as it is, and
// the next cycle plans it within the room left. A preemption, or a shrink
// in place, whose nodes no other start or restart kept takes then served a
// dropped one: it is dropped too (ErrGroupLimit and ErrServedDeferred), and
// its job keeps running as it is, where the plan's other actions stay the
// same without what it freed.
func (v *View) SlurmActions(p policy.Plan, now time.Time) (actions []slurm.Action, skipped map[int]error) {
	actions, skipped = v.slurmActions(p, now)
	kept, over := v.keepGroups(actions, now)
	if len(over) > 0 {
		kept, over = v.dropIdlePreemptions(actions, kept, over, now)
	}
	maps.Copy(skipped, over)
	return kept, skipped
}

// dropIdlePreemptions drops the preemptions and shrinks (restarts on
// fewer GPUs of the nodes a job holds) among kept (what keepGroups kept of
// actions, over what it deferred) whose nodes no other kept start or
// restart takes, where keepGroups keeps and defers the same starts without
// them; it returns what is kept and deferred then.
func (v *View) dropIdlePreemptions(actions, kept []slurm.Action, over map[int]error, now time.Time) ([]slurm.Action, map[int]error) {
	takers := map[string][]int{} // the jobs whose kept starts and restarts take each node
	for _, a := range kept {
		_, t := v.moves(a)
		for _, n := range t {
			takers[n] = append(takers[n], a.JobID)
		}
	}
	idle := func(a slurm.Action) bool {
		mj := v.managed[strconv.Itoa(a.JobID)]
		if mj == nil {
			return false
		}
		left, took := v.moves(a)
		shrink := a.Kind == slurm.ActionRestart && a.GPUsPerNode*a.NodeCount() < mj.slurm.GPUs &&
			!slices.ContainsFunc(took, func(n string) bool { return !slices.Contains(left, n) })
		return (a.Kind == slurm.ActionPreempt || shrink) && !slices.ContainsFunc(left, func(n string) bool {
			return slices.ContainsFunc(takers[n], func(id int) bool { return id != a.JobID })
		})
	}
	want := slices.DeleteFunc(slices.Clone(kept), idle)
	if len(want) == len(kept) {
		return kept, over
	}
	k, o := v.keepGroups(slices.DeleteFunc(slices.Clone(actions), idle), now)
	if !slices.EqualFunc(k, want, func(a, b slurm.Action) bool { return a.JobID == b.JobID && a.Kind == b.Kind }) || len(o) != len(over) {
		return kept, over
	}
	for id := range over {
		if o[id] == nil {
			return kept, over // other starts deferred
		}
	}
	for _, a := range kept {
		if idle(a) {
			what := "preemption"
			if a.Kind == slurm.ActionRestart {
				what = "restart on fewer GPUs"
			}
			o[a.JobID] = fmt.Errorf("job %d: %w: %w: its %s was for a start deferred for a group limit; it keeps running as it is",
				a.JobID, ErrGroupLimit, ErrServedDeferred, what)
		}
	}
	return k, o
}

// moves is the nodes an action's job leaves (all it held, for a preemption
// or a restart of a running job) and takes (a start's or restart's).
func (v *View) moves(a slurm.Action) (left, taken []string) {
	mj := v.managed[strconv.Itoa(a.JobID)]
	if mj == nil || a.Kind != slurm.ActionPreempt && a.Kind != slurm.ActionStart && a.Kind != slurm.ActionRestart {
		return nil, nil
	}
	if mj.slurm.State == slurm.StateRunning {
		left = mj.slurm.NodeList
	}
	if a.Kind != slurm.ActionPreempt {
		taken = a.Nodes
	}
	return left, taken
}

// keepGroups is SlurmActions' check of the plan's starts and restarts
// against the group limits: the actions kept, in order, and those dropped.
func (v *View) keepGroups(actions []slurm.Action, now time.Time) (kept []slurm.Action, skipped map[int]error) {
	skipped = map[int]error{}
	use, nodes := maps.Clone(v.usage), v.nodes.clone()
	licenses := maps.Clone(v.licenses)
	gres := map[string]map[string]int{} // what the plan's starts leave of v.gresFree, by node
	gresOn := func(node string) map[string]int {
		if gres[node] == nil {
			gres[node] = map[string]int{}
			maps.Copy(gres[node], v.gresFree[node])
		}
		return gres[node]
	}
	// move is what an action's job holds before it (on the nodes it
	// leaves) and after it (on those it takes), and its groups.
	type move struct {
		job           slurm.Job
		before, after slurm.GroupLimits
		left, taken   []string
		groups        []slurm.Group
	}
	// newNodes are the nodes a move takes that its job does not hold.
	newNodes := func(m move) []string {
		return slices.DeleteFunc(slices.Clone(m.taken), func(n string) bool { return slices.Contains(m.left, n) })
	}
	change := func(a slurm.Action) move {
		mj := v.managed[strconv.Itoa(a.JobID)]
		if mj == nil {
			return move{}
		}
		m := move{job: mj.slurm, before: holds(mj.slurm, now), groups: mj.groups}
		m.left, m.taken = v.moves(a)
		switch a.Kind {
		case slurm.ActionPreempt:
			return m
		case slurm.ActionStart, slurm.ActionRestart:
			n := a.NodeCount()
			after := m.before // what the job holds once the action ran
			after.GPUs, after.CPUs, after.Jobs = a.GPUsPerNode*n, a.CPUsPerTask*n, 1
			if mem := a.MemMB(mj.slurm); mem > 0 {
				// An action that sets no memory leaves the job's as it is.
				after.MemMB = mem
			}
			// A start or a restart runs its whole time limit from now.
			tl := wholeMinutes(cmp.Or(a.TimeLimit, mj.slurm.TimeLimit))
			if tl > 0 {
				after.GPURunMins, after.CPURunMins, after.MemRunMins = int64(after.GPUs)*tl, int64(after.CPUs)*tl, after.MemMB*tl
				after.NodeRunMins = int64(n) * tl
			}
			if mj.billing.Unread == "" && slices.ContainsFunc(mj.groups, func(g slurm.Group) bool { return g.Billing > 0 || g.BillingRunMins > 0 }) {
				// Priced only where it is limited: it bills what Slurm
				// reported before, and the weights' arithmetic after.
				after.Billing = mj.billing.Of(after.GPUs, after.CPUs, n, after.MemMB)
				after.BillingRunMins = after.Billing * tl
			}
			m.after = after
			return m
		}
		return move{}
	}
	// delta is what m adds to group g (negative for what it frees).
	delta := func(m move, g slurm.Group) slurm.GroupLimits {
		return plus(v.gpuTypes.share(g, m.after, m.taken), v.gpuTypes.share(g, m.before, m.left), -1)
	}
	apply := func(m move) {
		for _, g := range m.groups {
			use[g] = plus(use[g], delta(m, g), 1)
		}
		nodes.add(m.groups, m.left, -1)
		nodes.add(m.groups, m.taken, 1)
	}
	frees := func(m move) bool {
		for _, x := range plus(m.after, m.before, -1).Amounts() {
			if x.Value > 0 {
				return false
			}
		}
		return !slices.ContainsFunc(m.taken, func(n string) bool { return !slices.Contains(m.left, n) })
	}
	// giveBack returns a preempted job's licenses, which Slurm frees at
	// its requeue, for the plan's starts. (Its other GRES need not: a
	// start is planned only on nodes with enough free before the plan.)
	giveBack := func(a slurm.Action, m move) {
		if lic, err := slurm.ParseLicenses(m.job.Licenses); err == nil && a.Kind == slurm.ActionPreempt {
			give(licenses, lic, true)
		}
	}
	// What the plan frees first (preemptions, restarts on less), then what
	// it takes, in order.
	ms := make([]move, len(actions))
	for i, a := range actions {
		if ms[i] = change(a); frees(ms[i]) {
			apply(ms[i])
			giveBack(a, ms[i])
		}
	}
	kept = make([]slurm.Action, 0, len(actions))
	for i, a := range actions {
		m := ms[i]
		if frees(m) {
			kept = append(kept, a)
			continue
		}
		nodes.add(m.groups, m.left, -1)
		var over error
		for _, g := range m.groups {
			if !g.Binds(m.job) {
				continue // Slurm counts its GPUs of the type, and starts it past the limit
			}
			u, dg := use[g], delta(m, g)
			u.Nodes, dg.Nodes = len(nodes[g]), nodes.adds(g, m.taken)
			if what := overGroup(g, u, dg); what != "" {
				over = fmt.Errorf("job %d: %w: %s", a.JobID, ErrGroupLimit, what)
				break
			}
		}
		nodes.add(m.groups, m.left, 1)
		var wantLic map[string]int // only a start takes licenses: a running job holds its own
		if a.Kind == slurm.ActionStart {
			wantLic = v.licensesOf[a.JobID]
		}
		if name, short := shortOf(wantLic, licenses, true); over == nil && short {
			over = fmt.Errorf("job %d: %w: license %s: it asks for %d, and the plan's earlier starts leave %d", a.JobID, ErrLicense, name, wantLic[name], licenses[name])
		}
		var fresh []string // the nodes whose GRES it takes
		wantGres := slurm.GresCounts(m.job.OtherGres...)
		if len(wantGres) > 0 {
			fresh = newNodes(m)
		}
		for _, n := range fresh {
			if k, short := shortOf(wantGres, gresOn(n), false); over == nil && short {
				over = fmt.Errorf("job %d: %w: %s on %s: it asks for %d, and the plan's earlier starts leave %d", a.JobID, ErrGres, k, n, wantGres[k], gresOn(n)[k])
			}
		}
		if over != nil {
			skipped[a.JobID] = over // it stays where it is
			continue
		}
		for _, n := range fresh {
			take(gresOn(n), wantGres, false)
		}
		take(licenses, wantLic, true)
		apply(m)
		kept = append(kept, a)
	}
	return kept, skipped
}

// slurmActions is SlurmActions before the group limits.
func (v *View) slurmActions(p policy.Plan, now time.Time) (actions []slurm.Action, skipped map[int]error) {
	skipped = map[int]error{}
	var releases, takes []slurm.Action
	for _, a := range p.Actions {
		mj, ok := v.managed[a.JobID]
		if !ok {
			continue
		}
		if a.Kind == policy.Keep {
			n := len(takes)
			if ann, ok := mj.profiledAnnotation(a); ok {
				takes = append(takes, ann)
			}
			if ext, ok := mj.timeExtension(now); ok {
				takes = append(takes, ext)
			}
			// One tag write per job and cycle: the mails wait a cycle
			// behind another.
			if ret, ok := mj.mailRestore(); ok && len(takes) == n {
				takes = append(takes, ret)
			}
			continue
		}
		sa, err := mj.slurmAction(a, now)
		if err != nil {
			skipped[mj.slurm.ID] = err
			continue
		}
		if sa.Kind == slurm.ActionPreempt || sa.Kind == slurm.ActionShrink {
			releases = append(releases, sa)
		} else {
			takes = append(takes, sa)
		}
	}
	return append(releases, takes...), skipped
}

// profiledAnnotation gives a running job that was started for profiling,
// and whose model type is now fitted, the plan the policy keeps it on, and
// clears its profile flag. The fit and this annotation come in the same
// cycle (Cycle refits before it plans): rubick-srun, which waits a while
// for the plan after its phase's launch notice, trains on it.
func (mj *managedJob) profiledAnnotation(a policy.Action) (slurm.Action, bool) {
	if mj.slurm.State != slurm.StateRunning || mj.tag.Extra[tagProfile] != "1" {
		return slurm.Action{}, false
	}
	tag := cloneTag(mj.tag)
	profileTag(&tag, model.Spec{}, false)
	tag.Plan = a.Plan.String()
	return annotateRunning(mj.slurm, tag), true
}

// annotateRunning writes tag to running job j. The allocation is what the
// job holds; annotate only records it.
func annotateRunning(j slurm.Job, tag slurm.Tag) slurm.Action {
	n := max(len(j.NodeList), 1)
	return slurm.Action{Kind: slurm.ActionAnnotate, JobID: j.ID, Tag: &tag, Nodes: j.NodeList, NumNodes: n,
		GPUsPerNode: j.GPUsPerNode, CPUsPerTask: j.CPUs / n, MemPerNodeMB: memPerNode(j)}
}

// mailRestore gives a running job back the mail types rubick took BEGIN
// and REQUEUE out of at its last requeue (slurm.TagMail): it has begun
// again, so Slurm mails no second "Began", and a requeue that is not
// rubick's (a node failure, an administrator's) is mailed as the job
// asked. Its next restart quiets them again.
func (mj *managedJob) mailRestore() (slurm.Action, bool) {
	mt := slurm.MailTypeOfTag(&mj.tag)
	if mj.slurm.State != slurm.StateRunning || mt == "" {
		return slurm.Action{}, false
	}
	tag := cloneTag(mj.tag)
	delete(tag.Extra, slurm.TagMail)
	act := annotateRunning(mj.slurm, tag)
	act.MailType = mt
	return act, true
}

func (mj *managedJob) slurmAction(a policy.Action, now time.Time) (slurm.Action, error) {
	j := mj.slurm
	tag := cloneTag(mj.tag)
	tag.Extra[tagReq] = mj.req.String()
	if mj.limit != "" {
		tag.Extra[tagLimit] = mj.limit
	}
	recordNodes(&tag, mj.nodes)
	recordTime(&tag, mj.time.user, mj.time.fixed, j.TimeLimit)
	recordSubmit(&tag, j)
	profileTag(&tag, model.Spec{}, false) // a managed job's type is fitted
	tag.Generation = mj.tag.Generation + 1
	ran := mj.ran + j.RunTime(now)
	out := slurm.Action{JobID: j.ID, Tag: &tag}
	switch a.Kind {
	case policy.Preempt:
		// What it ran so far counts at its next start (its restart cost's
		// rule, a deadline cut), to the requeue (RanAt); the preemption
		// and that start are one reconfiguration, as the simulator counts
		// them.
		tag.Extra[tagRan] = slurm.RanSeconds(ran)
		tag.Generation = mj.tag.Generation
		out.Kind, out.RanAt = slurm.ActionPreempt, now
		return out, nil
	case policy.Start, policy.Restart, policy.Shrink:
	default:
		return slurm.Action{}, fmt.Errorf("job %d: unknown action kind %q", j.ID, a.Kind)
	}
	var nodes []string
	gpus, cpus, memMB := -1, -1, int64(0)
	for _, n := range a.Alloc {
		if n.GPUs == 0 && n.CPUs == 0 {
			continue
		}
		if (gpus >= 0 && n.GPUs != gpus) || (cpus >= 0 && n.CPUs != cpus) {
			return slurm.Action{}, fmt.Errorf("job %d: %w: %v", j.ID, ErrNotUniform, a.Alloc)
		}
		gpus, cpus = n.GPUs, n.CPUs
		memMB = max(memMB, int64(math.Ceil(n.MemGB*1024)))
		nodes = append(nodes, n.Node)
	}
	if len(nodes) == 0 {
		return slurm.Action{}, fmt.Errorf("job %d: %s action with an empty allocation", j.ID, a.Kind)
	}
	if j.State == slurm.StatePending {
		out.Partition = mj.part
	}
	tag.Plan = a.Plan.String()
	tag.Extra[tagAt] = strconv.FormatInt(now.Unix(), 10)
	out.Nodes, out.NumNodes, out.GPUsPerNode, out.CPUsPerTask, out.MemPerNodeMB = nodes, len(nodes), gpus, cpus, memMB
	out.MemPerGPUFloorMB = userMemPerGPU(j)
	bill := mj.billing.Of(gpus*len(nodes), cpus*len(nodes), len(nodes), out.MemMB(j))
	size := slurm.GroupLimits{GPUs: gpus * len(nodes), CPUs: cpus * len(nodes), Billing: bill, MemMB: cmp.Or(out.MemMB(j), j.MemMB), Nodes: len(nodes)}
	if tl := mj.time.limitAt(a.Throughput, size, 0); tl > 0 && tl != j.TimeLimit {
		out.TimeLimit = tl
		recordTime(&tag, mj.time.user, mj.time.fixed, tl)
	}
	if j.State == slurm.StatePending {
		out.Kind = slurm.ActionStart
		if mj.ran > 0 {
			// With what it ran before Slurm's own requeues, if any.
			tag.Extra[tagRan] = slurm.RanSeconds(mj.ran)
		}
		return out, nil
	}
	// Every change of a running job is a checkpoint-restart, shrinks
	// included: Slurm changes GPUs only on pending jobs, and an in-place
	// NumNodes shrink kills the trainer's ranks on the dropped nodes before
	// they can checkpoint, while the new plan needs a relaunch anyway.
	out.Kind = slurm.ActionRestart
	// The Applier adds the run from now to the requeue (RanAt).
	tag.Extra[tagRan] = slurm.RanSeconds(ran)
	out.RanAt = now
	return out, nil
}

// overGroup says which of group g's limits its use u plus d would pass,
// and by how much; "" for none.
func overGroup(g slurm.Group, u, d slurm.GroupLimits) string {
	limits, used, adds := g.GroupLimits.Amounts(), u.Amounts(), d.Amounts()
	for i, l := range limits {
		if l.Value > 0 && adds[i].Value > 0 && used[i].Value+adds[i].Value > l.Value {
			name, what := g.NameOf(l), l.What
			if l.RunMins {
				what += " " + g.MinsWhat()
			}
			return fmt.Sprintf("%s allows %d %s, %d in use or planned before it, and its plan adds %d", name, l.Value, what, used[i].Value, adds[i].Value)
		}
	}
	return ""
}

// timeExtension raises the time limit of a running job that reports a
// slower speed than its limit was set for (a plan the model overrated):
// to the limit it would get at the measured speed, once that is over a
// tenth above the one it has. It never lowers a limit.
func (mj *managedJob) timeExtension(now time.Time) (slurm.Action, bool) {
	j := mj.slurm
	if j.State != slurm.StateRunning || j.TimeLimit <= 0 || !(mj.time.measured > 0) || mj.time.fixed {
		return slurm.Action{}, false
	}
	want := mj.time.limitAt(mj.time.measured, slurm.GroupLimits{GPUs: j.GPUs, CPUs: j.CPUs, Billing: j.Billing, MemMB: j.MemMB, Nodes: len(j.NodeList)},
		j.RunTime(now))
	if want <= j.TimeLimit+j.TimeLimit/10 {
		return slurm.Action{}, false
	}
	tag := cloneTag(mj.tag)
	recordTime(&tag, mj.time.user, false, want)
	return slurm.Action{Kind: slurm.ActionTimeLimit, JobID: j.ID, TimeLimit: want, Tag: &tag}, true
}

// cloneTag copies t so that an action's tag can be edited without touching
// the job's; Extra is never nil in the copy.
func cloneTag(t slurm.Tag) slurm.Tag {
	t.Extra = maps.Clone(t.Extra)
	if t.Extra == nil {
		t.Extra = map[string]string{}
	}
	return t
}

// tagProfile asks rubick-srun to run its profiling phase before training.
const tagProfile = slurm.TagProfile

// profileTag sets tagProfile and the model type's memory inputs
// (launch.TagArch, from spec) in tag where the job is to profile its type,
// registered but not fitted (profile), and clears them otherwise: a
// release before the fit left them, and a start with them would profile
// the type again.
func profileTag(tag *slurm.Tag, spec model.Spec, profile bool) {
	if !profile {
		delete(tag.Extra, tagProfile)
		delete(tag.Extra, launch.TagArch)
		return
	}
	tag.Extra[tagProfile] = "1"
	tag.Extra[launch.TagArch] = launch.ArchValue(spec)
}

// profilingBound bounds the wait on a job tagged profile=1 that never
// reports its phase over (launch.ProfilingBound: the phase's own bound,
// rubick-srun --profile-timeout, 5 min, with room for the batch script's
// setup). Such a job (a line rubick-srun cannot profile, no samples
// endpoint, no rubick-srun at all) would otherwise keep every other job of
// its type from profiling for as long as it runs.
const profilingBound = launch.ProfilingBound

// profilingCandidate reports whether job j may be profiling its model type
// at now, unless its rubick-srun reported the phase over since its start
// (profilingTypes): it holds its allocation (a suspended phase resumes)
// with tagProfile, started less than profilingBound ago.
func profilingCandidate(j slurm.Job, now time.Time) bool {
	return j.Allocated() && j.Tag != nil && j.Tag.ModelType != "" && j.Tag.Extra[tagProfile] == "1" &&
		now.Sub(j.StartTime) < profilingBound
}

// profilingTypes names the model types a job of which is profiling at now
// (profilingCandidate) and has not reported its phase over since its
// current start: over holds when each job's last notice came. A notice
// before that start was an earlier start's; a requeued job keeps
// profile=1, and its rubick-srun sends the notice again at once.
func profilingTypes(jobs []slurm.Job, over map[int64]time.Time, now time.Time) map[string]bool {
	out := map[string]bool{}
	for _, j := range jobs {
		if !profilingCandidate(j, now) {
			continue
		}
		if t, ok := over[int64(j.ID)]; ok && !t.Before(j.StartTime) {
			continue
		}
		out[j.Tag.ModelType] = true
	}
	return out
}

// RigidActions releases each rigid job on its own request, letting Slurm
// place it. A job whose model type is registered but not fitted (profile
// gives its spec) is tagged profile=1, so rubick-srun measures the
// configurations the fit needs before it trains, and with the spec's
// memory inputs (launch.TagArch), so that it leaves out the runs its GPUs
// cannot hold; a job of a fitted type loses both (profileTag). One job of
// a type profiles at a time: the first phase gives the type its fit, and
// more at once would only measure the same runs on more GPUs. So a job of
// a type in profiling (a running job's phase is under way) loses both too,
// as do the jobs of a type after the first this call tags; they train on
// their line as it is, and their samples count towards the fit.
func (v *View) RigidActions(now time.Time, profile func(modelType string) (model.Spec, bool), profiling map[string]bool) []slurm.Action {
	profiling = maps.Clone(profiling)
	if profiling == nil {
		profiling = map[string]bool{}
	}
	var out []slurm.Action
	for _, j := range v.Rigid {
		req := userRequest(j) // as asked, though rubick resized it before
		a := slurm.Action{Kind: slurm.ActionStart, JobID: j.ID, NumNodes: req.Nodes,
			GPUsPerNode: req.GPUsPerNode, CPUsPerTask: max(req.CPUs/req.Nodes, 1), MemPerNodeMB: req.MemMB, MemPerGPUFloorMB: userMemPerGPU(j)}
		if j.HetJobID != 0 || len(j.GPUTypes) > 1 {
			// Any size update is refused (a heterogeneous job), or cannot
			// keep the GPU request; rubick never changed either.
			a = slurm.Action{Kind: slurm.ActionRelease, JobID: j.ID}
		}
		if j.Tag != nil {
			// Nodes an earlier start of rubick's chose are not the user's:
			// the job gets its own --nodelist back, or none.
			tag := cloneTag(*j.Tag)
			if a.Kind == slurm.ActionStart {
				nodes, err := userNodes(j)
				a.Nodes, a.ClearNodes = nodes, err == nil && len(nodes) == 0 && placedByRubick(j.Tag)
				recordNodes(&tag, nodes)
				// The user's own time limit back, for the request it was
				// meant for.
				if user, fixed, err := userTime(j); err == nil {
					if user > 0 && user != j.TimeLimit {
						a.TimeLimit = user
					}
					recordTime(&tag, user, fixed, cmp.Or(a.TimeLimit, j.TimeLimit))
				}
			}
			// Released unplanned: rubick-srun runs the line unchanged. A plan
			// left from an earlier start was chosen for other resources, or
			// is one the line has refused.
			tag.Plan = ""
			tag.Generation++
			tag.Extra[tagAt] = strconv.FormatInt(now.Unix(), 10)
			recordSubmit(&tag, j)
			spec, unfitted := profile(tag.ModelType)
			first := unfitted && !profiling[tag.ModelType]
			if first {
				profiling[tag.ModelType] = true
			}
			profileTag(&tag, spec, first)
			a.Tag = &tag
		}
		out = append(out, a)
	}
	return out
}

// ownRequest is the job's request as Slurm reports it now: the user's
// until rubick first resizes the job (tagRequest has it from then on).
func ownRequest(j slurm.Job) request {
	return request{Nodes: max(j.NodeCount, 1), GPUsPerNode: j.GPUsPerNode, CPUs: j.CPUs, MemMB: memPerNode(j)}
}

// userRequest is the user's request: as rubick recorded it, else as the
// job still has it.
func userRequest(j slurm.Job) request {
	if r, ok := tagRequest(j); ok {
		return r
	}
	return ownRequest(j)
}

// tagRequest is the user's request as rubick recorded it when it first
// resized the job; false when it never did (or the record is unreadable).
func tagRequest(j slurm.Job) (request, bool) {
	if j.Tag == nil {
		return request{}, false
	}
	s, ok := j.Tag.Extra[tagReq]
	if !ok {
		return request{}, false
	}
	r, err := parseRequest(s)
	return r, err == nil
}

// atRequest reports whether the job's size is its user's request.
func atRequest(j slurm.Job) bool {
	r, ok := tagRequest(j)
	return !ok || (max(j.NodeCount, 1) == r.Nodes && j.GPUsPerNode == r.GPUsPerNode && j.CPUs == r.CPUs)
}

// licensesShort reports whether pending job j asks for more of a listed
// license than is free, and says so; it records what j asks for (for the
// check of one plan's starts together, keepGroups). A license Slurm does
// not list, or a request rubick does not read (alternatives), is left to
// Slurm.
func (v *View) licensesShort(j slurm.Job, list []slurm.License) (string, bool) {
	want, err := slurm.ParseLicenses(j.Licenses)
	if err != nil || len(want) == 0 {
		return "", false
	}
	if v.licenses == nil {
		v.licenses, v.licensesOf = map[string]int{}, map[int]map[string]int{}
		for _, l := range list {
			v.licenses[l.Name] = l.Free
		}
	}
	if name, short := shortOf(want, v.licenses, true); short {
		l := list[slices.IndexFunc(list, func(l slurm.License) bool { return l.Name == name })]
		return fmt.Sprintf("waits for license %s: it asks for %d, %d of %d free; planned once Slurm has them", name, want[name], l.Free, l.Total), true
	}
	v.licensesOf[j.ID] = want
	return "", false
}

// shortOf names the first (by name) of the counts in want that free has
// less of. A name free does not hold counts as none free, unless
// listedOnly: then it bounds nothing (a license Slurm does not list).
func shortOf(want, free map[string]int, listedOnly bool) (string, bool) {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if have, listed := free[k]; (listed || !listedOnly) && have < want[k] {
			return k, true
		}
	}
	return "", false
}

// take takes want from free, as shortOf counts it; give returns it.
func take(free, want map[string]int, listedOnly bool) { shift(free, want, listedOnly, -1) }
func give(free, got map[string]int, listedOnly bool)  { shift(free, got, listedOnly, 1) }

// shift adds sign times counts to free; with listedOnly, only to the
// names free holds.
func shift(free, counts map[string]int, listedOnly bool, sign int) {
	for k, n := range counts {
		if _, listed := free[k]; listed || !listedOnly {
			free[k] += sign * n
		}
	}
}

// gresNodes narrows allowed (nil: every open node) to the nodes with as
// much of each GRES other than GPUs free as job j asks for on a node
// (OtherGres: --gres=gpu:2,lscratch:100), and those j holds already (what
// it holds there comes back at a restart). why, for a job none of whose
// nodes has them, says what it waits for.
func gresNodes(j slurm.Job, allowed []string, open []slurm.Node) (nodes []string, why string) {
	want := slurm.GresCounts(j.OtherGres...)
	for _, n := range open {
		if allowed != nil && !slices.Contains(allowed, n.Name) {
			continue
		}
		if _, short := shortOf(want, n.GresFree, false); !short || slices.Contains(j.NodeList, n.Name) {
			nodes = append(nodes, n.Name)
		}
	}
	if len(nodes) == 0 {
		return nil, fmt.Sprintf("waits for %s free on a node it may run on; planned once one has it", strings.Join(j.OtherGres, ","))
	}
	return nodes, ""
}
