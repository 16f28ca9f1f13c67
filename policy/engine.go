package policy

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rubick-sched/rubick/model"
)

// variant selects which reconfigurations a slope-driven policy may make;
// rubick and its ablations and Sia share the same engine.
type variant struct {
	space   space // plans it may choose
	tuneCPU bool  // CPUs are a second, tuned dimension
	slo     bool  // guaranteed jobs get SLO admission within quota
	sia     bool  // Sia's configuration set: power-of-two single node or whole nodes
	replan  bool  // a running job may restart on the same resources with a faster plan
	// noStarve drops the anti-starvation age (Sia has none).
	noStarve bool
	// timeLeft weighs slopes and victim losses by time left
	// (Config.TimeWeight); Sia ranks by goodput alone.
	timeLeft bool
}

var (
	variantRubick        = variant{space: spaceAny, tuneCPU: true, slo: true, replan: true, timeLeft: true}
	variantResourcesOnly = variant{space: spaceDP, tuneCPU: true, slo: true, timeLeft: true}
	variantSia           = variant{space: spaceDP, sia: true, noStarve: true}
)

// engine is Algorithm 1 (docs/policy.md, "rubick (Algorithm 1)")
// parameterised by a variant.
type engine struct {
	name string
	cfg  Config
	v    variant
	perf *perfCache

	mu    sync.Mutex
	infos map[infoKey]jobInfo // per request, persisted across rounds
}

func newEngine(name string, c Config, v variant) *engine {
	p := newPerfCache()
	return &engine{name: name, cfg: c, v: v, perf: p, infos: map[infoKey]jobInfo{}}
}

// Name implements Policy.
func (e *engine) Name() string { return e.name }

// slot is what a job holds on one node during a round.
type slot struct{ node, gpus, cpus int }

// jstate is one job during a round.
type jstate struct {
	j   *Job
	idx int
	// allowed marks the nodes the job may run on, by index; nil: any.
	allowed []bool
	est     Estimator
	running bool   // held resources in the snapshot
	orig    []slot // the snapshot's allocation, by node index
	cur     []slot // the tentative allocation, by node index
	gpus    int
	info    jobInfo
	minNT   float64 // normalised throughput it must keep (SLO), 0 for best-effort
	// Throughput is normalised by info.unit, so a slope of 1 is linear
	// scaling at the per-GPU speed of one whole node.
	floor  float64 // normalised throughput a best-effort job needs to start
	cap    int     // most GPUs it may hold
	cpg    int     // baseline CPUs per GPU
	frozen bool    // running and not reconfigurable this round
	admit  bool    // guaranteed and admitted within quota
	starve bool
	// reserves marks the starving queued job the free GPUs are held for.
	reserves bool
	// ranked: detail is the rank it waits at in fair-share or priority
	// order, which what held it back is added to.
	ranked bool
	// deadline marks a queued job near its Job.StartBy (Config.DeadlineLead).
	deadline bool
	// tw divides its slope and its losses as a victim: its time left in
	// hours to the power TimeWeight (1 when that is 0).
	tw     float64
	leftH  float64    // the hours of time left tw was weighed by (0: none)
	order  Order      // its place in step 2's order (Of 0: not there)
	admit1 Admission  // its place in step 1's order (Of 0: not there)
	ver    int        // bumped whenever its allocation changes
	losses []lossMemo // its cheapest release per node, as a victim
	// fresh[k-1] is its normalised throughput with k more GPUs on a node it
	// does not hold, valid at version freshVer (nodes must be alike in size).
	fresh    []float64
	freshVer int
	maxNodes int // most nodes it may span
	leastG   int // fewest GPUs its Min takes (minGPUs)
	// newNode marks the nodes its NodeQuota counts, by index (nil: no
	// quota); it may hold GPUs on newMax of them at most.
	newNode []bool
	newMax  int
	// hostBase is the host memory any plan needs on each of its nodes;
	// memPer and memBase price its host memory against Max.MemGB: booked
	// per GPU, and per node whatever the plan.
	hostBase, memPer, memBase float64
	groups                    []int // indexes of its groups in the snapshot
	reason                    Reason
	detail                    string
	held                      heldBack
}

// heldBack is what a queued best-effort job found when it had nothing to
// try (stuck, in run), kept to tell its user why it waits.
type heldBack struct {
	ok             bool
	free, reserved int     // GPUs free for it, and held for a starving job
	need           int     // fewest GPUs any plan of it runs on
	loss           float64 // least victim loss per GPU, weighed
}

// lossMemo is a job's cheapest release on one node at one version.
type lossMemo struct {
	node, ver  int
	privileged bool
	protected  bool // shrunk no further than its request (fair-share or priority order)
	v          victim
	ok         bool
}

// nstate is one node during a round.
type nstate struct {
	n       *Node
	freeGPU int
	freeCPU int
	heldMem float64 // host memory the snapshot's jobs hold here
	jobs    []int   // jobs holding GPUs here (possibly zero after a shrink)
	// newMem is what the jobs placed anew this round book here beyond
	// what they hold (newMemOn), as of node version newMemVer.
	newMem    float64
	newMemVer int
}

// op is one logged change of a job's slot, for undo.
type op struct{ job, node, dg, dc int }

// round is the mutable working copy of one Decide call.
type round struct {
	e        *engine
	s        *Snapshot
	nodes    []nstate
	jobs     []*jstate
	nodeGPUs int
	gpuTotal int // GPUs over all nodes
	memGB    float64
	log      []op
	logging  bool
	reserved []int // GPUs per node held back for a starving job
	buf      []int
	// groupUse is what each of the snapshot's groups' jobs hold now.
	groupUse []groupUse

	// Incremental state that keeps a round cheap when little can change.
	freeTotal     int        // free GPUs over all nodes
	reservedTotal int        // reserved GPUs over all nodes
	version       int        // bumped on every allocation change
	nodeVer       []int      // per node, bumped when an allocation there changes
	memo          [][2]vmemo // per node and privileged: the two best victims
	minLoss       [2]float64 // cluster-wide least victim loss, per privileged
	minLossVer    [2]int     // version minLoss was computed at (0: never)
	// frozen sums up the running jobs that may not be reconfigured this
	// round, for the details of queued jobs; computed on first use.
	frozen *frozenSum
	// held holds the details of queued jobs held back alike, the last one
	// apart: a round may hold thousands, and formatting each its own
	// doubled its time.
	held           map[heldBack]string
	lastHeld       heldBack
	lastHeldDetail string
	// floor is, in fair-share or priority order, the rank of the job
	// being placed: best-effort jobs ranked higher give it only the GPUs
	// they hold beyond their request. byRank holds every job's index,
	// highest rank first, and above counts the jobs at its head ranked
	// above floor.
	floor  rank
	byRank []int
	above  int
}

// rank is a job's place in fair-share or priority order: tier first, then
// value, higher first.
type rank struct {
	tier  int
	value float64
}

// topRank is above every job's: nobody is protected under it.
var topRank = rank{math.MaxInt, math.Inf(1)}

func (a rank) compare(b rank) int {
	if c := cmp.Compare(a.tier, b.tier); c != 0 {
		return c
	}
	return cmp.Compare(a.value, b.value)
}

// ranked reports whether best-effort jobs go by rank before slope.
// minCPG is the fewest CPUs j runs with per GPU.
func (e *engine) minCPG(j *Job) int { return j.minCPG(e.cfg.MinCPUsPerGPU) }

func (e *engine) ranked() bool { return e.cfg.BestEffortOrder != OrderSlope }

// timeWeight is the exponent of the time-left weighting this policy applies
// (Config.TimeWeight; 0 for Sia, which ranks by goodput alone).
func (e *engine) timeWeight() float64 {
	if !e.v.timeLeft {
		return 0
	}
	return e.cfg.TimeWeight
}

// rankOf is j's rank under the configured order.
func (e *engine) rankOf(j *Job) rank {
	switch e.cfg.BestEffortOrder {
	case OrderFairShare:
		return rank{value: j.FairShare}
	case OrderPriority:
		return rank{tier: j.PriorityTier, value: j.Priority}
	}
	return rank{}
}

// rankReason is why a job started in rank order, and what it ranked by.
func (e *engine) rankReason(j *Job) (Reason, string) {
	if e.cfg.BestEffortOrder == OrderFairShare {
		return ReasonFairShare, fmt.Sprintf("fair-share factor %.2f", j.FairShare)
	}
	return e.priorityDetail(j)
}

// priorityDetail is what a job in priority order ranked by.
func (e *engine) priorityDetail(j *Job) (Reason, string) {
	d := fmt.Sprintf("priority %.0f", j.Priority)
	if j.PriorityTier > 0 {
		d += fmt.Sprintf(" in partition tier %d", j.PriorityTier)
	}
	if j.PriorityFactors != "" {
		d += " (" + j.PriorityFactors + ")"
	}
	return ReasonPriority, d
}

// vmemo caches a node's best victims at one node version.
type vmemo struct {
	ver       int
	valid     bool
	best, alt victim // alt is the best victim that is not best's job
	nBest     int    // 0, 1 or 2 victims found
}

// Decide implements Policy.
func (e *engine) Decide(ctx context.Context, s *Snapshot) (Plan, error) {
	if stale := e.perf.sync(s.Models); len(stale) > 0 {
		e.mu.Lock()
		for k := range e.infos {
			if stale[k.model] {
				delete(e.infos, k)
			}
		}
		e.mu.Unlock()
	}
	r, err := e.newRound(s)
	if err != nil {
		return Plan{}, err
	}
	if err := r.run(ctx); err != nil {
		return Plan{}, err
	}
	return r.commit(), nil
}

func (e *engine) newRound(s *Snapshot) (*round, error) {
	r := &round{e: e, s: s, nodes: make([]nstate, len(s.Nodes)), reserved: make([]int, len(s.Nodes)),
		nodeVer: make([]int, len(s.Nodes)), memo: make([][2]vmemo, len(s.Nodes))}
	r.memGB = math.Inf(1)
	for i := range s.Nodes {
		n := &s.Nodes[i]
		r.nodes[i] = nstate{n: n, freeGPU: n.GPUs, freeCPU: n.CPUs}
		r.nodeGPUs = max(r.nodeGPUs, n.GPUs)
		r.gpuTotal += n.GPUs
		r.memGB = min(r.memGB, n.MemGB)
	}
	if len(s.Nodes) == 0 {
		r.memGB = 0
	}
	r.version = 1
	r.floor = topRank
	r.groupUse = make([]groupUse, len(s.Groups))
	r.jobs = make([]*jstate, len(s.Jobs))
	// Once a round: over every node, it was a quarter of a large round's
	// time when taken per job.
	maxCPG := maxCPUsPerGPU(s)
	for i := range s.Jobs {
		j := &s.Jobs[i]
		js := &jstate{j: j, idx: i, est: s.Models[j.Model], running: j.Running(), freshVer: -1}
		if len(j.Nodes) > 0 {
			js.allowed = make([]bool, len(s.Nodes))
			for _, name := range j.Nodes {
				if n, ok := s.NodeIndex(name); ok {
					js.allowed[n] = true
				}
			}
		}
		if q := j.NodeQuota; q != nil {
			js.newNode, js.newMax = make([]bool, len(s.Nodes)), q.New
			for i, n := range s.Nodes {
				js.newNode[i] = j.newNode(n.Name)
			}
		}
		for _, a := range j.Alloc {
			n, _ := s.NodeIndex(a.Node)
			if a.GPUs == 0 && a.CPUs == 0 {
				continue
			}
			js.orig = append(js.orig, slot{node: n, gpus: a.GPUs, cpus: a.CPUs})
			r.nodes[n].freeGPU -= a.GPUs
			r.nodes[n].freeCPU -= a.CPUs
			r.nodes[n].heldMem += a.MemGB
			r.nodes[n].jobs = append(r.nodes[n].jobs, i)
		}
		slices.SortFunc(js.orig, func(a, b slot) int { return a.node - b.node })
		js.cur = slices.Clone(js.orig)
		for _, sl := range js.cur {
			js.gpus += sl.gpus
		}
		for _, name := range j.Groups {
			g := s.groupIndex[name]
			js.groups = append(js.groups, g)
			for _, sl := range js.cur {
				r.groupUse[g].gpus += sl.gpus
				r.groupUse[g].cpus += sl.cpus
			}
			if js.gpus > 0 {
				r.groupUse[g].jobs++
			}
		}
		js.info = e.jobInfo(r, js)
		js.cpg = max(e.minCPG(j), min(j.Request.CPUs/max(1, j.Request.GPUs), maxCPG))
		js.hostBase = hostBase(js.est, j.Request.Plan)
		js.memPer, js.memBase = j.memRates(e.cfg.HostMemPerGPUGB, js.hostBase)
		js.leastG = r.minGPUs(js)
		js.cap = r.capOf(js)
		js.maxNodes = max(1, e.cfg.MaxSpread*len(js.info.reqShape))
		if j.WithinRequest {
			js.maxNodes = max(1, len(js.info.reqShape))
		}
		// Enough nodes for what its Min takes.
		js.maxNodes = max(js.maxNodes, j.Min.Nodes, (js.leastG+r.nodeGPUs-1)/max(r.nodeGPUs, 1))
		if j.Max.Nodes > 0 {
			js.maxNodes = min(js.maxNodes, j.Max.Nodes)
		}
		if e.v.slo && j.Guaranteed {
			js.minNT = (1 + e.cfg.SLOMargin) * js.info.ref / js.info.unit
		}
		js.floor = e.cfg.MinShare * js.info.ref / js.info.unit
		if js.running {
			js.frozen = !e.reconfigurable(s, j)
		}
		// Old queued jobs are served first (docs/policy.md,
		// Anti-starvation), and one that cannot start has free GPUs held
		// back for it: that bounds the tail of completion times. Once
		// running it competes like any other job, by slope; heading the
		// order or shielded from shrinks, an old job cut down to a sliver
		// (by a guaranteed job) kept that sliver, or grew first, for hours.
		js.starve = !js.running && !(e.v.slo && j.Guaranteed) && !e.v.noStarve && e.cfg.StarvationAge > 0 && s.Now.Sub(j.Submit) >= e.cfg.StarvationAge
		// A queued job near the latest start its --deadline allows goes
		// first too: Slurm ends it past that, held or not.
		js.deadline = !js.running && !(e.v.slo && j.Guaranteed) && !e.v.noStarve && nearDeadline(e.cfg, s.Now, j)
		js.starve = js.starve || js.deadline
		r.jobs[i] = js
	}
	r.weighByTimeLeft()
	for i := range r.nodes {
		r.freeTotal += r.nodes[i].freeGPU
	}
	return r, nil
}

func maxCPUsPerGPU(s *Snapshot) int {
	m := 0
	for _, n := range s.Nodes {
		if n.GPUs > 0 {
			m = max(m, n.CPUs/n.GPUs)
		}
	}
	return m
}

// minGPUs is the fewest GPUs js's Min takes, whatever its request: its
// GPUs, one on each of its nodes, those its CPUs come with, and, packed,
// those whose host memory (as booked whatever the plan, with the CPUs
// that come with them: leastMemOn) reaches its memory.
func (r *round) minGPUs(js *jstate) int {
	m := js.j.Min
	g := max(m.GPUs, m.Nodes, (m.CPUs+js.cpg-1)/max(js.cpg, 1))
	if m.MemGB <= 0 {
		return g
	}
	for k := max(g, 1); k <= r.gpuTotal; k++ {
		mem := 0.0
		for _, n := range PackedPlacement(k, r.nodeGPUs) {
			mem += r.leastMemOn(js, n, js.cpg*n)
		}
		if mem+1e-9 >= m.MemGB {
			return k
		}
	}
	return g
}

func (r *round) capOf(js *jstate) int {
	req := js.j.Request.GPUs
	total := r.gpuTotal
	if r.e.cfg.MaxScale > 0 {
		total = min(total, int(math.Floor(r.e.cfg.MaxScale*float64(req))))
	}
	if js.j.WithinRequest {
		total = min(total, req)
	}
	total = min(r.gpuTotal, max(total, js.leastG))
	if m := js.j.Max; m.GPUs > 0 {
		total = min(total, m.GPUs)
	}
	if m := js.j.Max; m.CPUs > 0 && r.e.minCPG(js.j) > 0 {
		total = min(total, m.CPUs/r.e.minCPG(js.j))
	}
	return max(total, 1)
}

// groupUse is what a group's jobs hold during a round, and how many of
// them hold GPUs.
type groupUse struct{ gpus, cpus, jobs int }

// groupFree is how many more GPUs and CPUs js's groups let it take;
// math.MaxInt where none bounds them. A job that holds no GPU takes none
// from a group whose running jobs are as many as it allows.
func (r *round) groupFree(js *jstate) (gpus, cpus int) {
	gpus, cpus = math.MaxInt, math.MaxInt
	for _, g := range js.groups {
		b, u := r.s.Groups[g], r.groupUse[g]
		if b.Jobs >= 0 && js.gpus == 0 && u.jobs >= b.Jobs {
			gpus = 0
		}
		if b.GPUs >= 0 {
			gpus = min(gpus, max(b.GPUs-u.gpus, 0))
		}
		if b.CPUs >= 0 {
			cpus = min(cpus, max(b.CPUs-u.cpus, 0))
		}
	}
	return gpus, cpus
}

// fullGroup names the group of js that has no room left for it, and what
// its jobs hold.
func (r *round) fullGroup(js *jstate) string {
	for _, g := range js.groups {
		b, u := r.s.Groups[g], r.groupUse[g]
		switch {
		case b.Jobs >= 0 && js.gpus == 0 && u.jobs >= b.Jobs:
			return fmt.Sprintf("%s: %d of its jobs run here, as many as are left to them", cmp.Or(b.JobsName, b.Name), u.jobs)
		case b.GPUs >= 0 && u.gpus >= b.GPUs:
			return fmt.Sprintf("%s: its jobs here hold %d of the %d GPUs left to them", b.Name, u.gpus, b.GPUs)
		case b.CPUs >= 0 && b.CPUs-u.cpus < r.e.minCPG(js.j):
			return fmt.Sprintf("%s: its jobs here hold %d of the %d CPUs left to them", b.Name, u.cpus, b.CPUs)
		}
	}
	return ""
}

// groupsOf is what js's groups hold now, for groupsOver.
func (r *round) groupsOf(js *jstate) []groupUse {
	if len(js.groups) == 0 {
		return nil
	}
	out := make([]groupUse, len(js.groups))
	for i, g := range js.groups {
		out[i] = r.groupUse[g]
	}
	return out
}

// groupsOver reports whether a change since before left one of js's groups
// above its bound and holding more than it did: a step taken from victims
// outside the group adds to it, one from its own jobs does not.
func (r *round) groupsOver(js *jstate, before []groupUse) bool {
	for i, g := range js.groups {
		b, u := r.s.Groups[g], r.groupUse[g]
		if b.GPUs >= 0 && u.gpus > b.GPUs && u.gpus > before[i].gpus ||
			b.CPUs >= 0 && u.cpus > b.CPUs && u.cpus > before[i].cpus ||
			b.Jobs >= 0 && u.jobs > b.Jobs && u.jobs > before[i].jobs {
			return true
		}
	}
	return false
}

// memHeldOn is the host memory js holds on the named node in the snapshot.
func (js *jstate) memHeldOn(node string) float64 {
	m := 0.0
	for _, a := range js.j.Alloc {
		if a.Node == node {
			m += a.MemGB
		}
	}
	return m
}

// memRoom is how many more GPUs j may take on node n within its host
// memory bound (Max.MemGB), with the CPUs that come with them (cpg per
// GPU): what it then books whatever the plan (baseMem), so a job is not
// grown to an allocation no plan fits.
func (r *round) memRoom(j *jstate, n int) int {
	if j.j.Max.MemGB <= 0 {
		return math.MaxInt
	}
	k := 0
	for k < r.nodes[n].n.GPUs-j.on(n) && r.baseMem(j, n, k+1, j.cpg*(k+1)) <= j.j.Max.MemGB+1e-9 {
		k++
	}
	return k
}

// baseMem is the host memory js books whatever its plan (offloaded states
// aside), with node n changed by dg GPUs and dc CPUs: on each node memPer
// per GPU and memBase, which bound hostMem from above, as Slurm allocates
// it (slurmAlloc, as nodeAllocs books it). Under MaxMemPerCPU that is cut
// to its CPUs there, so that more CPUs book more.
func (r *round) baseMem(js *jstate, n, dg, dc int) float64 {
	total, found := 0.0, false
	for _, s := range js.cur {
		g, c := s.gpus, s.cpus
		if s.node == n {
			g, c, found = g+dg, c+dc, true
		}
		total += js.baseMemOn(g, c)
	}
	if !found {
		total += js.baseMemOn(dg, dc)
	}
	return total
}

// baseMemOn is what baseMem counts on a node holding g of js's GPUs and
// cpus of its CPUs.
func (js *jstate) baseMemOn(g, cpus int) float64 {
	if g <= 0 {
		return 0
	}
	_, mem := js.j.slurmAlloc(js.memPer*float64(g)+js.memBase, g, cpus, js.hostBase, js.hostBase)
	return mem
}

// cpusOverMem reports whether c more CPUs for js on node n take what it
// books whatever its plan past its host memory bound (Max.MemGB), or on n
// past the memory n has for it (memOn): memRoom and growOn counted the
// CPUs that came with its GPUs, and under MaxMemPerCPU more CPUs book
// more memory.
func (r *round) cpusOverMem(js *jstate, n, c int) bool {
	if js.j.MaxMemPerCPUGB <= 0 {
		return false
	}
	g, cpus := js.on(n), js.cpusOn(n)
	if on := r.leastMemOn(js, g, cpus+c); on > r.memOn(js, n)+1e-9 && on > r.leastMemOn(js, g, cpus) {
		return true
	}
	if js.j.Max.MemGB <= 0 {
		return false
	}
	after := r.baseMem(js, n, 0, c)
	return after > js.j.Max.MemGB+1e-9 && after > r.baseMem(js, n, 0, 0)
}

// memOn is the host memory node n has for js: what the other jobs leave
// there, the snapshot's as they are, and those placed anew this round as
// they are booked whatever the plan, within its bound per node
// (Max.MemGBPerNode).
func (r *round) memOn(js *jstate, n int) float64 {
	nd := &r.nodes[n]
	if nd.newMemVer != r.nodeVer[n] {
		// Every change of a job's slots bumps the version of the nodes it
		// holds; none has changed at version 0.
		nd.newMem, nd.newMemVer = 0, r.nodeVer[n]
		for _, k := range nd.jobs {
			nd.newMem += r.newMemOn(r.jobs[k], n)
		}
	}
	mem := nd.n.MemGB - nd.heldMem + js.memHeldOn(nd.n.Name) - (nd.newMem - r.newMemOn(js, n))
	if b := js.j.Max.MemGBPerNode; b > 0 {
		mem = min(mem, b)
	}
	return mem
}

// newMemOn is the host memory js, placed anew this round, books on node
// n beyond what it holds there: commit books it no less than leastMemOn
// there (an unchanged job keeps what it holds), and counted as held
// alone it could be given to another job too.
func (r *round) newMemOn(js *jstate, n int) float64 {
	if !js.changed() {
		return 0
	}
	return max(0, r.leastMemOn(js, js.on(n), js.cpusOn(n))-js.memHeldOn(r.nodes[n].n.Name))
}

// leastMemOn is the host memory js books whatever its plan (offloaded
// states aside) on a node holding g of its GPUs and cpus of its CPUs, as
// Slurm allocates it (slurmAlloc, as nodeAllocs books it): under
// MaxMemPerCPU, cut to those CPUs. No plan books less there.
func (r *round) leastMemOn(js *jstate, g, cpus int) float64 {
	if g <= 0 {
		return 0
	}
	_, mem := js.j.slurmAlloc(js.j.hostMem(r.e.cfg.HostMemPerGPUGB, g, js.hostBase, js.hostBase), g, cpus, js.hostBase, js.hostBase)
	return mem
}

// reconfigurable applies the reconfiguration-cost rule.
func (e *engine) reconfigurable(s *Snapshot, j *Job) bool {
	return usefulAfterRestart(s, j) >= e.cfg.ReconfigKeep
}

// usefulAfterRestart is the share of j's run time left useful after one
// more restart, (T - (N+1)*delta)/T: 1 when restarts cost nothing, and -Inf
// for a job that has not run yet, which no ReconfigKeep admits.
func usefulAfterRestart(s *Snapshot, j *Job) float64 {
	delta := s.JobRestartCost(j).Seconds()
	if delta <= 0 {
		return 1
	}
	t := j.RunTime.Seconds()
	if t <= 0 {
		return math.Inf(-1)
	}
	return (t - float64(j.Reconfigs+1)*delta) / t
}

// infoKey identifies a request on a cluster shape; jobInfo depends on
// nothing else (and on the estimator, whose change drops the entries).
type infoKey struct {
	model    string
	cannot   model.Features
	plan     model.Plan
	shape    string
	cpus     int
	nodeGPUs int
	memGB    int
}

// jobInfo is derived from a job's request once and cached.
type jobInfo struct {
	ref      float64 // predicted samples/s of the requested plan on the request
	unit     float64 // samples/s per GPU of the model's best plan on one whole node
	reqShape string  // canonical requested placement
	entry    float64 // best normalised throughput per GPU at any size
	minGPUs  int     // fewest GPUs meeting the SLO on a packed placement (quota charge)
	minShape string
	// startGPUs is the fewest GPUs (packed) giving a best-effort job its
	// MinShare of the requested throughput.
	startGPUs int
	// minG is the fewest GPUs (packed) with any runnable plan.
	minG int
}

func (e *engine) jobInfo(r *round, js *jstate) jobInfo {
	j := js.j
	pl := j.Request.Placement
	if len(pl) == 0 {
		pl = PackedPlacement(j.Request.GPUs, r.nodeGPUs)
	}
	k := infoKey{model: j.Model, cannot: j.Cannot, plan: j.Request.Plan, shape: shapeKey(pl), cpus: j.Request.CPUs, nodeGPUs: r.nodeGPUs, memGB: int(r.memGB)}
	e.mu.Lock()
	info, ok := e.infos[k]
	e.mu.Unlock()
	if ok {
		return info
	}
	info = jobInfo{reqShape: k.shape, minGPUs: j.Request.GPUs, minShape: k.shape}
	info.ref = e.perf.best(j.Model, js.est, spaceFixed, j.Cannot, j.Request.Plan, k.shape, j.Request.CPUs, r.memGB).tput
	if !(info.ref > 0) {
		info.ref = e.perf.best(j.Model, js.est, spaceAny, j.Cannot, j.Request.Plan, k.shape, j.Request.CPUs, r.memGB).tput
	}
	if !(info.ref > 0) {
		info.ref = 1
	}
	cpg := max(1, j.Request.CPUs/max(1, j.Request.GPUs))
	hi := max(j.Request.GPUs, r.nodeGPUs)
	info.unit = e.perf.best(j.Model, js.est, spaceAny, j.Cannot, model.Plan{}, shapeKey(PackedPlacement(r.nodeGPUs, r.nodeGPUs)), r.nodeGPUs*cpg, r.memGB).tput / float64(max(1, r.nodeGPUs))
	if !(info.unit > 0) {
		info.unit = info.ref / float64(j.Request.GPUs)
	}
	minNT := (1 + e.cfg.SLOMargin) * info.ref / info.unit
	for g := 1; g <= hi; g++ {
		shape := shapeKey(PackedPlacement(g, r.nodeGPUs))
		v := e.perf.best(j.Model, js.est, e.v.space, j.Cannot, j.Request.Plan, shape, g*cpg, r.memGB)
		nt := v.tput / info.unit
		info.entry = max(info.entry, nt/float64(g))
		if g < info.minGPUs && nt >= minNT {
			info.minGPUs, info.minShape = g, shape
		}
		if info.minG == 0 && v.tput > 0 {
			info.minG = g
		}
		if info.startGPUs == 0 && v.tput > 0 && v.tput >= e.cfg.MinShare*info.ref {
			info.startGPUs = g
		}
	}
	if info.startGPUs == 0 {
		info.startGPUs = j.Request.GPUs
	}
	e.mu.Lock()
	e.infos[k] = info
	e.mu.Unlock()
	return info
}

// may reports whether js may run on node n (Job.Nodes).
func (js *jstate) may(n int) bool { return js.allowed == nil || js.allowed[n] }

// quotaAllows reports whether js's NodeQuota lets it take GPUs on node n:
// one it holds, one of the shared ones, or another while it spans fewer
// than newMax outside them.
func (js *jstate) quotaAllows(n int) bool {
	if js.newNode == nil || !js.newNode[n] || js.on(n) > 0 {
		return true
	}
	c := 0
	for _, s := range js.cur {
		if s.gpus > 0 && js.newNode[s.node] {
			c++
		}
	}
	return c < js.newMax
}

// on returns the GPUs js holds on node n.
func (js *jstate) on(n int) int {
	for _, s := range js.cur {
		if s.node == n {
			return s.gpus
		}
	}
	return 0
}

// cpusOn returns the CPUs js holds on node n.
func (js *jstate) cpusOn(n int) int {
	for _, s := range js.cur {
		if s.node == n {
			return s.cpus
		}
	}
	return 0
}

func (js *jstate) cpus() int {
	c := 0
	for _, s := range js.cur {
		c += s.cpus
	}
	return c
}

// adjust changes js's slot on node n by dg GPUs and dc CPUs.
func (r *round) adjust(js *jstate, n, dg, dc int) {
	i := slices.IndexFunc(js.cur, func(s slot) bool { return s.node == n })
	if i < 0 {
		pos, _ := slices.BinarySearchFunc(js.cur, n, func(s slot, n int) int { return s.node - n })
		js.cur = slices.Insert(js.cur, pos, slot{node: n})
		i = pos
		if !slices.Contains(r.nodes[n].jobs, js.idx) {
			r.nodes[n].jobs = append(r.nodes[n].jobs, js.idx)
		}
	}
	js.cur[i].gpus += dg
	js.cur[i].cpus += dc
	dj := 0 // a job that starts or stops holding GPUs
	switch {
	case js.gpus == 0 && dg > 0:
		dj = 1
	case js.gpus > 0 && js.gpus+dg == 0:
		dj = -1
	}
	js.gpus += dg
	for _, g := range js.groups {
		r.groupUse[g].gpus += dg
		r.groupUse[g].cpus += dc
		r.groupUse[g].jobs += dj
	}
	js.ver++
	r.nodes[n].freeGPU -= dg
	r.nodes[n].freeCPU -= dc
	r.freeTotal -= dg
	r.version++
	r.nodeVer[n] = r.version
	for _, sl := range js.cur {
		// js's throughput, hence its loss as a victim, changed on every node it holds.
		r.nodeVer[sl.node] = r.version
	}
	if js.cur[i].gpus == 0 && js.cur[i].cpus == 0 {
		js.cur = slices.Delete(js.cur, i, i+1)
	}
	if r.logging {
		r.log = append(r.log, op{job: js.idx, node: n, dg: dg, dc: dc})
	}
}

// undo reverts logged changes back to mark.
func (r *round) undo(mark int) {
	logging := r.logging
	r.logging = false
	for i := len(r.log) - 1; i >= mark; i-- {
		o := r.log[i]
		r.adjust(r.jobs[o.job], o.node, -o.dg, -o.dc)
	}
	r.log = r.log[:mark]
	r.logging = logging
}

// tput is the best predicted samples/s of js on slots (with their CPUs),
// or on slots with node n changed by dg GPUs and dc CPUs.
func (r *round) tput(js *jstate, slots []slot, n, dg, dc int) perfVal {
	r.buf = r.buf[:0]
	cpus := 0
	found := false
	for _, s := range slots {
		g, c := s.gpus, s.cpus
		if s.node == n {
			g, c, found = g+dg, c+dc, true
		}
		if g > 0 {
			r.buf = append(r.buf, g)
		}
		cpus += c
	}
	if !found && dg > 0 {
		r.buf = append(r.buf, dg)
		cpus += dc
	}
	if len(r.buf) == 0 {
		return perfVal{}
	}
	shape := shapeKey(r.buf)
	if r.e.v.sia && !siaShape(shape, r.nodeGPUs) && shape != js.info.reqShape {
		// Sia only considers its configuration set (and the request itself,
		// for plans such as TP=5 that no power of two can host).
		return perfVal{}
	}
	return r.e.perf.pick(js.j.Model, js.est, r.e.v.space, js.j.Cannot, js.j.Request.Plan, shape, cpus, r.memGB, r.e.cfg.PlanSwitchGain)
}

// nt is normalised throughput: samples/s over the request's.
func (r *round) nt(js *jstate) float64 {
	if js.gpus == 0 {
		return 0
	}
	return r.tput(js, js.cur, -1, 0, 0).tput / js.info.unit
}

// cpuFor is the CPUs that come with k more GPUs on node n for js.
func (r *round) cpuFor(js *jstate, n, k int) (int, bool) {
	free := r.nodes[n].freeCPU
	if b := js.j.cpuBudget(js.cpus()); b >= 0 {
		free = min(free, b)
	}
	if m := js.j.Max.CPUsPerNode; m > 0 {
		free = min(free, m-js.cpusOn(n))
	}
	if _, gc := r.groupFree(js); gc < free {
		free = gc
	}
	want := js.cpg * k
	if want <= free {
		return want, true
	}
	if r.e.minCPG(js.j)*k <= free {
		return free, true
	}
	return 0, false
}

// minMet reports whether js holding slots (gpus GPUs) is at least its Min:
// memory as booked on each node whatever the plan (leastMemOn: under
// MaxMemPerCPU, cut to its CPUs there), which no plan lowers.
func (r *round) minMet(js *jstate, slots []slot, gpus int) bool {
	m := js.j.Min
	if m == (Size{}) {
		return true
	}
	nodes, cpus, mem := 0, 0, 0.0
	for _, s := range slots {
		if s.gpus > 0 {
			nodes++
			mem += r.leastMemOn(js, s.gpus, s.cpus)
		}
		cpus += s.cpus
	}
	return js.j.minMet(gpus, nodes, cpus, mem)
}

// sloOK reports whether js's tentative allocation meets its minimum.
func (r *round) sloOK(js *jstate, nt float64) bool { return r.okAt(js, js.cur, js.gpus, nt) }

// okAt reports whether js holding slots (gpus GPUs, normalised throughput
// nt) meets its minimum: the SLO for an admitted guaranteed job (its own request shape, where the
// requested plan is kept, or the requested throughput plus the margin);
// for a best-effort job a runnable plan with at least its floor.
func (r *round) okAt(js *jstate, slots []slot, gpus int, nt float64) bool {
	if gpus == 0 || nt <= 0 || !r.minMet(js, slots, gpus) {
		return false
	}
	if js.minNT == 0 {
		return nt >= js.floor
	}
	if len(js.info.reqShape) == 1 && len(slots) > 1 {
		// Cross-node predictions are the least certain (profiles are taken
		// on one node), so a guaranteed job that asked for one node stays
		// on one node.
		return false
	}
	return nt >= js.minNT || r.shapeOf(slots) == js.info.reqShape && r.requestSpeed(js, slots) >= js.info.ref*(1-1e-9)
}

// requestSpeed is the predicted samples/s of js's requested plan on slots,
// its request shape, with their CPUs: with fewer CPUs than it asked for,
// an offloading plan runs slower than its request (CPU Adam). A request
// plan the model cannot price counts as its request's speed.
func (r *round) requestSpeed(js *jstate, slots []slot) float64 {
	j := js.j
	cpus := 0
	for _, s := range slots {
		cpus += s.cpus
	}
	if cpus >= j.Request.CPUs {
		return js.info.ref
	}
	v := r.e.perf.best(j.Model, js.est, spaceFixed, j.Cannot, j.Request.Plan, js.info.reqShape, cpus, r.memGB)
	if v.tput <= 0 {
		return js.info.ref
	}
	return v.tput
}

func (r *round) shapeOf(slots []slot) string {
	r.buf = r.buf[:0]
	for _, s := range slots {
		r.buf = append(r.buf, s.gpus)
	}
	return shapeKey(r.buf)
}

// victim is a candidate to give up GPUs on one node.
type victim struct {
	js   *jstate
	r    int     // GPUs it gives up on the node
	loss float64 // normalised throughput lost per GPU
	// whole: preempted, it gives up its GPUs on every node.
	whole bool
}

// shrinkable reports whether v may give up resources to a job this round.
func (r *round) shrinkable(v *jstate, privileged bool) bool {
	switch {
	case privileged && !v.j.Guaranteed:
		return true // best-effort jobs yield to guaranteed jobs below their SLO
	case !v.running:
		return true // placed this round: moving it costs nothing
	}
	return !v.frozen
}

// setFloor sets floor, and forgets the victims found under the last one.
// A lower floor protects the jobs ranked between the two, so only the
// victims found on their nodes are forgotten: in priority order, where
// nearly every job has a rank of its own, forgetting them all for every
// job tripled a round's time.
func (r *round) setFloor(f rank) {
	if f == r.floor {
		return
	}
	old := r.floor
	r.floor = f
	r.minLossVer[0] = 0
	if f.compare(old) < 0 && r.byRank != nil {
		for ; r.aboveFloor(r.above); r.above++ {
			for _, sl := range r.jobs[r.byRank[r.above]].cur {
				r.memo[sl.node][0].valid = false
			}
		}
		return
	}
	for n := range r.memo {
		r.memo[n][0].valid = false
	}
	r.countAbove()
}

// countAbove sets above afresh.
func (r *round) countAbove() {
	r.above = 0
	for r.aboveFloor(r.above) {
		r.above++
	}
}

// aboveFloor reports whether the i-th job by rank is ranked above floor.
func (r *round) aboveFloor(i int) bool {
	return i < len(r.byRank) && r.e.rankOf(r.jobs[r.byRank[i]].j).compare(r.floor) > 0
}

// bestVictim returns the job on node n losing the least normalised
// throughput per GPU by giving some GPUs to j.
func (r *round) bestVictim(j *jstate, n int, privileged bool) (victim, bool) {
	p := 0
	if privileged {
		p = 1
	}
	m := &r.memo[n][p]
	if !m.valid || m.ver != r.nodeVer[n] {
		*m = r.scanVictims(n, privileged)
		m.ver, m.valid = r.nodeVer[n], true
	}
	switch {
	case m.nBest == 0:
		return victim{}, false
	case m.best.js != j:
		return m.best, true
	case m.nBest == 2:
		return m.alt, true
	}
	return victim{}, false
}

// minVictimLoss is the least loss per GPU of any victim in the cluster.
func (r *round) minVictimLoss(privileged bool) float64 {
	p := 0
	if privileged {
		p = 1
	}
	if r.minLossVer[p] == r.version {
		return r.minLoss[p]
	}
	best := math.Inf(1)
	for n := range r.nodes {
		if v, ok := r.bestVictim(nil, n, privileged); ok {
			best = min(best, v.loss)
		}
	}
	r.minLoss[p], r.minLossVer[p] = best, r.version
	return best
}

// scanVictims finds the two best victims on node n from different jobs.
func (r *round) scanVictims(n int, privileged bool) vmemo {
	var m vmemo
	consider := func(c victim) {
		switch {
		case m.nBest == 0:
			m.best, m.nBest = c, 1
		case better(c, m.best):
			if c.js != m.best.js {
				m.alt, m.nBest = m.best, 2
			}
			m.best = c
		case c.js != m.best.js && (m.nBest == 1 || better(c, m.alt)):
			m.alt, m.nBest = c, 2
		}
	}
	for _, vi := range r.nodes[n].jobs {
		v := r.jobs[vi]
		if !r.shrinkable(v, privileged) {
			continue
		}
		if c, ok := r.releaseOn(v, n, privileged); ok {
			consider(c)
		}
	}
	return m
}

// releaseOn is v's cheapest release of GPUs on node n that leaves it at or
// above its minimum (or preempts a best-effort job), memoised per version.
func (r *round) releaseOn(v *jstate, n int, privileged bool) (victim, bool) {
	// A job whose account is further below its share than the one taking
	// keeps what it asked for: fair share decides who gets the GPUs
	// requested, slope who gets the rest. So does a job started near the
	// latest start its --deadline allows, against best-effort jobs.
	protected := !privileged && (r.e.rankOf(v.j).compare(r.floor) > 0 || v.deadline)
	for _, m := range v.losses {
		if m.node == n && m.ver == v.ver && m.privileged == privileged && m.protected == protected {
			return m.v, m.ok
		}
	}
	c, ok := r.computeRelease(v, n, privileged, protected)
	for i := range v.losses {
		if v.losses[i].node == n && v.losses[i].privileged == privileged && v.losses[i].protected == protected {
			v.losses[i] = lossMemo{node: n, ver: v.ver, privileged: privileged, protected: protected, v: c, ok: ok}
			return c, ok
		}
	}
	v.losses = append(v.losses, lossMemo{node: n, ver: v.ver, privileged: privileged, protected: protected, v: c, ok: ok})
	return c, ok
}

// computeRelease finds the fewest GPUs v can give up on node n. For a
// guaranteed job (privileged) a best-effort job gives up part of its GPUs
// only if it keeps ReclaimKeep of its throughput, else all of them: a job
// cut to a sliver holds GPUs it barely uses, and counts a reconfiguration
// that keeps it from growing back, where a preempted one restarts whole.
// A protected job gives up only GPUs beyond its request.
func (r *round) computeRelease(v *jstate, n int, privileged, protected bool) (victim, bool) {
	held := v.on(n)
	if protected {
		held = min(held, v.gpus-v.j.Request.GPUs)
	}
	if held <= 0 {
		return victim{}, false
	}
	cur := r.nt(v)
	// A guaranteed job is never preempted.
	preemptible := v.minNT == 0 && !(v.j.Guaranteed && r.e.v.slo)
	for k := 1; k <= held; k++ {
		var after float64
		if k < v.gpus {
			slots := withDelta(v.cur, n, -k)
			after = r.tput(v, slots, -1, 0, 0).tput / v.info.unit
			if !r.okAt(v, slots, v.gpus-k, after) || (privileged && v.minNT == 0 && after < r.e.cfg.ReclaimKeep*cur) {
				continue
			}
		} else if !preemptible {
			return victim{}, false
		}
		return victim{js: v, r: k, loss: (cur - after) / float64(k) / v.tw}, true
	}
	if privileged && preemptible && held < v.gpus {
		// A best-effort job across nodes that no release here leaves
		// runnable at ReclaimKeep is preempted whole, as one on this node
		// alone would be; else a single GPU of it could keep a guaranteed
		// job from the node for as long as it runs.
		return victim{js: v, r: held, loss: cur / float64(held) / v.tw, whole: true}, true
	}
	return victim{}, false
}

// yieldTo frees what victim v gives up for a job on node n.
func (r *round) yieldTo(v victim, n int) {
	if !v.whole {
		r.take(nil, v.js, n, v.r)
		return
	}
	for _, s := range slices.Clone(v.js.cur) {
		r.take(nil, v.js, s.node, s.gpus)
	}
}

func better(a, b victim) bool {
	return a.loss < b.loss || (a.loss == b.loss && a.js.idx < b.js.idx)
}

// withDelta returns slots with dg GPUs more on node n; a release gives
// back CPUs in proportion, as take does.
func withDelta(slots []slot, n, dg int) []slot {
	out := make([]slot, 0, len(slots))
	for _, s := range slots {
		if s.node == n {
			if dg < 0 && s.gpus > 0 {
				s.cpus = s.cpus * (s.gpus + dg) / s.gpus
			}
			s.gpus += dg
		}
		if s.gpus > 0 {
			out = append(out, s)
		}
	}
	return out
}

// take moves k GPUs on node n from v to j (v nil: from free GPUs; j nil:
// to free GPUs).
func (r *round) take(j, v *jstate, n, k int) bool {
	if j != nil && !j.may(n) {
		return false
	}
	if v != nil {
		held := v.on(n)
		var heldCPU int
		for _, s := range v.cur {
			if s.node == n {
				heldCPU = s.cpus
			}
		}
		dc := heldCPU
		if k < held {
			dc = heldCPU - heldCPU*(held-k)/held
		}
		r.adjust(v, n, -k, -dc)
		// A job placed this round and still starting keeps the reason it
		// starts for.
		if v.running || v.gpus == 0 {
			v.reason = ReasonReclaimed
			if j != nil {
				v.detail = "by " + j.j.ID
			}
		}
	}
	if j == nil {
		return true
	}
	c, ok := r.cpuFor(j, n, k)
	if !ok {
		return false
	}
	r.adjust(j, n, k, c)
	return true
}

// nodeOrder lists the nodes j may take GPUs on: its own first, then nodes
// with free GPUs (best fit for its request, then most free), then nodes
// holding jobs it could take from.
func (r *round) nodeOrder(j *jstate, privileged bool) []int {
	var own, free, busy []int
	for _, s := range j.cur {
		own = append(own, s.node)
	}
	slices.SortStableFunc(own, func(a, b int) int { return j.on(b) - j.on(a) })
	want := min(j.j.Request.GPUs, r.nodeGPUs)
	if j.minNT > 0 && len(j.info.reqShape) == 1 && len(j.cur) == 1 {
		return own
	}
	for i := range r.nodes {
		if j.on(i) > 0 || !j.may(i) {
			continue
		}
		nd := &r.nodes[i]
		if nd.freeGPU-r.reserved[i] > 0 {
			free = append(free, i)
			continue
		}
		// Only nodes with a victim j could take from: any victim when j
		// is privileged, else one losing less than j's entry slope (for a
		// job holding nothing) or than its largest possible gain.
		if v, ok := r.bestVictim(j, i, privileged); ok && (privileged || j.gpus > 0 || v.loss < j.info.entry/j.tw) {
			busy = append(busy, i)
		}
	}
	avail := func(i int) int { return r.nodes[i].freeGPU - r.reserved[i] }
	slices.SortStableFunc(free, func(a, b int) int {
		fa, fb := avail(a) >= want, avail(b) >= want
		switch {
		case fa && !fb:
			return -1
		case fb && !fa:
			return 1
		case fa:
			return cmp.Compare(avail(a), avail(b))
		default:
			return cmp.Compare(avail(b), avail(a))
		}
	})
	return append(append(own, free...), busy...)
}

// schedule is ScheduleJob: j takes free GPUs and GPUs of jobs whose slope is
// lower than its own, node by node, then commits if it reached its minimum
// (a runnable allocation, and its SLO if guaranteed) or undoes everything.
func (r *round) schedule(j *jstate, privileged bool) bool {
	mark := len(r.log)
	r.logging = true
	defer func() { r.logging = false }()
	for _, n := range r.nodeOrder(j, privileged) {
		r.growOn(j, n, privileged)
		if j.gpus >= j.cap {
			break
		}
	}
	nt := r.nt(j)
	if r.sloOK(j, nt) {
		return true
	}
	r.undo(mark)
	if privileged && j.gpus == 0 {
		return r.fitShape(j)
	}
	return false
}

// fitShape (called by schedule, which logs changes for undo) places a
// queued guaranteed job on exactly its minimum shape, or
// else its requested one, node by node on the nodes that need the fewest
// GPUs reclaimed. The greedy search takes free GPUs first, wherever they
// are; when the SLO needs whole nodes and best-effort jobs are scattered
// over every node, that ends on a shape below the SLO, and the job would
// wait for the best-effort jobs to end instead of reclaiming their GPUs.
func (r *round) fitShape(j *jstate) bool {
	shapes := []string{j.info.minShape}
	if j.info.reqShape != j.info.minShape {
		shapes = append(shapes, j.info.reqShape)
	}
	for _, shape := range shapes {
		mark := len(r.log)
		ok := true
		for _, c := range []byte(shape) {
			if !r.fitOn(j, int(c)) {
				ok = false
				break
			}
		}
		if ok && r.sloOK(j, r.nt(j)) {
			return true
		}
		r.undo(mark)
	}
	return false
}

// fitOn gives j k GPUs on one node it does not hold yet: the node needing
// the fewest GPUs reclaimed from jobs that must yield to it, then the one
// with the fewest free GPUs left over.
func (r *round) fitOn(j *jstate, k int) bool {
	type cand struct{ n, free int }
	var cands []cand
	for n := range r.nodes {
		nd := &r.nodes[n]
		if j.on(n) > 0 || nd.n.GPUs < k || !j.may(n) || !j.quotaAllows(n) {
			continue
		}
		free := nd.freeGPU - r.reserved[n]
		avail := free
		for _, vi := range nd.jobs {
			if v := r.jobs[vi]; v != j && r.shrinkable(v, true) {
				avail += v.on(n)
			}
		}
		if avail >= k {
			cands = append(cands, cand{n, free})
		}
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		return cmp.Or(cmp.Compare(max(0, k-a.free), max(0, k-b.free)), cmp.Compare(a.free, b.free))
	})
	for _, c := range cands {
		if r.claim(j, c.n, k, true, math.Inf(1)) {
			return true
		}
	}
	return false
}

// growOn is the per-node loop of ScheduleJob.
func (r *round) growOn(j *jstate, n int, privileged bool) {
	nd := &r.nodes[n]
	// No more GPUs than the node's memory could book, other jobs' as they
	// are (a job asking for much memory per GPU grown past it would have
	// no plan that fits at all).
	mem := r.memOn(j, n)
	for iter := 0; iter < 4*nd.n.GPUs+4; iter++ {
		room := min(nd.n.GPUs-j.on(n), j.cap-j.gpus, r.memRoom(j, n))
		if m := j.j.Max.GPUsPerNode; m > 0 {
			room = min(room, m-j.on(n))
		}
		// With the CPUs that come with them: under MaxMemPerCPU its
		// booking is cut to those.
		for room > 0 && r.leastMemOn(j, j.on(n)+room, j.cpusOn(n)+j.cpg*room) > mem+1e-9 {
			room-- // its booking grows with its GPUs here: at most a node's GPUs steps
		}
		if m := j.j.Min.Nodes; m > 1 && len(j.cur) < m {
			// Until it spans its Min of nodes, no node takes more than its
			// share of what it may have.
			room = min(room, max(1, j.cap/m)-j.on(n))
		}
		if room <= 0 || (j.on(n) == 0 && len(j.cur) >= j.maxNodes) || !j.quotaAllows(n) {
			return
		}
		gg, _ := r.groupFree(j)
		free := max(0, min(nd.freeGPU-r.reserved[n], room, gg))
		cur := r.nt(j)
		below := !r.sloOK(j, cur)
		if cur == 0 || below {
			// Not runnable yet (or below its SLO): take one GPU, free first.
			if free > 0 {
				if r.take(j, nil, n, 1) {
					continue
				}
				if _, gc := r.groupFree(j); gc >= r.e.minCPG(j.j) {
					return
				}
				// Its group's CPUs are taken: a victim of the group frees
				// some with its GPUs.
			}
			v, ok := r.bestVictim(j, n, privileged)
			if !ok || !(privileged && below || v.loss < j.info.entry/j.tw) {
				return
			}
			// The victim frees v.r GPUs; j takes what its room (its
			// memory bound, its GPUs per node) and its groups let it
			// (more once the victim is in one of them), the rest stays
			// free. Taken whole, they could leave it no plan that fits.
			mark, before := len(r.log), r.groupsOf(j)
			r.yieldTo(v, n)
			k := min(v.r, room)
			if gg, _ := r.groupFree(j); gg < k {
				k = gg
			}
			if k <= 0 || !r.take(j, nil, n, k) || r.groupsOver(j, before) {
				r.undo(mark)
				return
			}
			continue
		}
		// Runnable: the best step of k GPUs on this node by gain per GPU.
		bestK, bestGain := 0, 0.0
		freeK, freeGain := 0, 0.0
		fresh := j.on(n) == 0
		if fresh && j.freshVer != j.ver {
			// Every node j does not hold yet gives the same shapes: price
			// them once per allocation of j.
			j.freshVer = j.ver
			j.fresh = j.fresh[:0]
			for k := 1; k <= min(nd.n.GPUs, j.cap-j.gpus); k++ {
				j.fresh = append(j.fresh, r.tput(j, j.cur, n, k, j.cpg*k).tput/j.info.unit)
			}
		}
		for k := 1; k <= room; k++ {
			var next float64
			if fresh && k <= len(j.fresh) {
				next = j.fresh[k-1]
			} else {
				next = r.tput(j, j.cur, n, k, j.cpg*k).tput / j.info.unit
			}
			g := (next - cur) / float64(k)
			if g > bestGain+1e-12 {
				bestK, bestGain = k, g
			}
			if k <= free && g > freeGain+1e-12 {
				freeK, freeGain = k, g
			}
		}
		if freeK > 0 && freeGain > r.e.cfg.MinGain {
			if !r.take(j, nil, n, freeK) {
				return
			}
			continue
		}
		if bestK <= free || bestGain <= r.e.cfg.MinGain {
			return
		}
		// Take the step only whole, from victims each losing less than j
		// gains. Above its minimum a guaranteed job has no privilege left:
		// it grows like any other job, from victims that may be reconfigured.
		if !r.claim(j, n, bestK, false, bestGain/j.tw) {
			return
		}
	}
}

// claim gives j k GPUs on node n, first freeing what is missing from the
// cheapest victims, each losing less than maxLoss per GPU; if that falls
// short, it leaves everything as it was. Changes are logged for undo.
func (r *round) claim(j *jstate, n, k int, privileged bool, maxLoss float64) bool {
	mark := len(r.log)
	for r.nodes[n].freeGPU-r.reserved[n] < k {
		v, ok := r.bestVictim(j, n, privileged)
		if !ok || v.loss >= maxLoss {
			r.undo(mark)
			return false
		}
		r.yieldTo(v, n)
	}
	before := r.groupsOf(j)
	if !r.take(j, nil, n, k) || r.groupsOver(j, before) {
		r.undo(mark)
		return false
	}
	return true
}

// slope is the normalised throughput gain per GPU j could get next: its
// entry efficiency when it holds nothing, else the best step on its nodes.
func (r *round) slope(j *jstate) float64 {
	if j.gpus == 0 {
		return j.info.entry
	}
	cur := r.nt(j)
	best := 0.0
	for _, s := range j.cur {
		room := min(r.nodes[s.node].n.GPUs-s.gpus, j.cap-j.gpus)
		for k := 1; k <= room; k++ {
			g := (r.tput(j, j.cur, s.node, k, j.cpg*k).tput/j.info.unit - cur) / float64(k)
			best = max(best, g)
		}
	}
	return best
}

func (r *round) run(ctx context.Context) error {
	// 1. Privileged: queued guaranteed jobs whose minimum fits the quota.
	used := map[string]int{}
	if r.e.v.slo {
		for _, js := range r.jobs {
			if js.running && js.j.Guaranteed {
				used[js.j.Tenant] += js.info.minGPUs
				js.admit = true
			}
		}
		var queued []*jstate
		for _, js := range r.jobs {
			if !js.running && js.j.Guaranteed {
				queued = append(queued, js)
			}
		}
		r.orderGuaranteed(queued)
		for i, js := range queued {
			js.admit1 = Admission{Position: i + 1, Of: len(queued), By: r.admittedBy(js)}
		}
		for _, js := range queued {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("policy %s: %w", r.e.name, err)
			}
			if used[js.j.Tenant]+js.info.minGPUs > r.quota(js.j.Tenant) {
				js.reason, js.detail = ReasonQuota, fmt.Sprintf("needs %d GPUs, tenant %q has %d of %d in use", js.info.minGPUs, js.j.Tenant, used[js.j.Tenant], r.quota(js.j.Tenant))
				if r.e.cfg.GuaranteedOrder == OrderPriority {
					_, why := r.e.priorityDetail(js.j)
					js.detail += "; " + why
				}
				continue
			}
			if r.schedule(js, true) {
				used[js.j.Tenant] += js.info.minGPUs
				js.admit = true
				js.reason = ReasonSLO
			} else {
				js.reason = ReasonNoResources
			}
		}
	}
	// 2. Best-effort queued and running jobs, starving first, then by slope
	// weighed by time left (or by fair-share factor, then that).
	type cand struct {
		js  *jstate
		key float64 // slope over time left^TimeWeight
	}
	var cands []cand
	for _, js := range r.jobs {
		guaranteedQueued := r.e.v.slo && js.j.Guaranteed && !js.running
		if guaranteedQueued || (js.running && js.frozen) {
			continue
		}
		slope := r.slope(js)
		js.order = Order{Slope: slope, WeighedSlope: slope / js.tw, TimeLeftH: js.leftH, NoTimeLimit: js.leftH > 0 && js.j.TimeLimit <= 0}
		cands = append(cands, cand{js, js.order.WeighedSlope})
	}
	weighed := r.e.timeWeight() > 0
	ranked := r.e.ranked()
	if ranked {
		r.byRank = r.byRank[:0]
		for i := range r.jobs {
			r.byRank = append(r.byRank, i)
		}
		slices.SortFunc(r.byRank, func(a, b int) int { return r.e.rankOf(r.jobs[b].j).compare(r.e.rankOf(r.jobs[a].j)) })
		r.countAbove()
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		if c := firstTrue(a.js.starve, b.js.starve); c != 0 {
			return c
		}
		if a.js.starve {
			// Deadlines first, the nearest first; then the oldest.
			return cmp.Or(byDeadline(a.js, b.js, a.js.deadline, b.js.deadline), bySubmit(a.js, b.js))
		}
		if ranked {
			if c := r.e.rankOf(b.js.j).compare(r.e.rankOf(a.js.j)); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(b.key, a.key); c != 0 {
			return c
		}
		if weighed {
			// A job without a limit counts as the longest one with a
			// limit, and as longer still where that is all that tells
			// them apart.
			if c := firstTrue(a.js.j.TimeLimit > 0, b.js.j.TimeLimit > 0); c != 0 {
				return c
			}
		}
		return bySubmit(a.js, b.js)
	})
	queuedAhead := 0
	for i, c := range cands {
		by := r.e.cfg.BestEffortOrder
		if c.js.starve {
			by = OrderStarvation
		}
		o := &c.js.order
		o.Position, o.Of, o.QueuedAhead, o.By = i+1, len(cands), queuedAhead, by
		if !c.js.running {
			queuedAhead++
		}
	}
	reserving := false
	for _, c := range cands {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("policy %s: %w", r.e.name, err)
		}
		js := c.js
		if ranked {
			floor := r.e.rankOf(js.j)
			if js.starve {
				floor = topRank // starving jobs come first and may take from anyone
			}
			r.setFloor(floor)
		}
		// Nothing free and nobody worth shrinking: nothing to try.
		stuck := r.freeTotal-r.reservedTotal < max(1, js.info.minG-js.gpus) && !(r.minVictimLoss(false) < c.key)
		if stuck && !js.running {
			js.held = heldBack{ok: true, free: r.freeTotal - r.reservedTotal, reserved: r.reservedTotal,
				need: max(1, js.info.minG), loss: r.minVictimLoss(false)}
		}
		if js.running {
			if !stuck {
				r.replace(js)
			}
			continue
		}
		had := js.gpus
		if !stuck && r.schedule(js, false) {
			if !js.running && js.reason == "" {
				switch {
				case js.deadline:
					js.reason = ReasonDeadline
					js.detail = fmt.Sprintf("its --deadline lets it start until %s", js.j.StartBy.UTC().Format(time.RFC3339))
				case js.starve:
					js.reason = ReasonStarving
				case ranked:
					js.reason, js.detail = r.e.rankReason(js.j)
				default:
					js.reason = ReasonSlope
				}
			}
			continue
		}
		if !js.running && js.gpus == 0 && had == 0 {
			js.reason = ReasonNoResources
			if ranked && !js.starve {
				_, js.detail = r.e.rankReason(js.j)
				js.ranked = true
			}
			if js.starve && !reserving && !r.bounded(js) {
				// Hold back what is free for the oldest starving job, so
				// that jobs behind it cannot keep taking it forever; not
				// for one its own bounds hold, which free GPUs would not
				// start: they would idle.
				reserving = true
				r.reserve(js, js.info.startGPUs)
				js.reserves = true
			}
		}
	}
	r.setFloor(topRank)
	if r.e.v.tuneCPU {
		r.tuneCPUs()
	}
	return nil
}

// weighByTimeLeft sets every job's tw. A job without a time limit counts
// as the longest one with a limit; where none has one, all weigh alike.
func (r *round) weighByTimeLeft() {
	w := r.e.timeWeight()
	longest := 0.0
	if w > 0 {
		for _, js := range r.jobs {
			longest = max(longest, timeLeft(js.j))
		}
	}
	for _, js := range r.jobs {
		js.tw, js.leftH = 1, 0
		if left := cmp.Or(timeLeft(js.j), longest); w > 0 && left > 0 {
			js.leftH = left / 3600
			js.tw = math.Pow(js.leftH, w)
		}
	}
}

// timeLeft is the seconds j has left by its time limit (0: no limit). A
// job slowed by rubick runs past what its limit allowed at the request's
// speed without being nearly done, so it keeps at least a tenth of the
// limit, and a minute (a round).
func timeLeft(j *Job) float64 {
	if j.TimeLimit <= 0 {
		return 0
	}
	return max((j.TimeLimit - j.RunTime).Seconds(), j.TimeLimit.Seconds()/10, 60)
}

// Details of a starving queued job; constants, as a round may hold
// thousands of queued jobs (rubickd adds how long each has queued).
const (
	detailStarving = "past the starvation age: goes first"
	detailReserved = detailStarving + "; the GPUs that free up are held for it"
)

// replace re-places a running job from scratch, as if its GPUs were free,
// and keeps the result only if the restart pays for itself: the new
// allocation is faster by more than MinGain and, taking the run time so far
// as the best guess of the time left, saves more than one restart cost.
func (r *round) replace(js *jstate) {
	mark := len(r.log)
	r.logging = true
	old := r.nt(js)
	orig := slices.Clone(js.cur)
	for _, s := range orig {
		r.adjust(js, s.node, -s.gpus, -s.cpus)
	}
	ok := r.schedule(js, false)
	now := r.nt(js)
	left := js.j.RunTime.Seconds()
	worth := ok && now > old*(1+r.e.cfg.MinGain) && left*(1-old/now) >= r.s.JobRestartCost(js.j).Seconds()
	if !worth || slices.Equal(js.cur, orig) {
		r.undo(mark)
		r.logging = false
		return
	}
	r.logging = false
	js.reason = ReasonSlope
	js.detail = fmt.Sprintf("%.2fx faster", now/old)
}

// reserve holds back up to need free GPUs, node by node, for the rest of
// the round, so that jobs behind starving js cannot keep taking them. Only
// on the nodes js may run on (Job.Nodes): GPUs held elsewhere would idle
// without bringing its start any closer.
func (r *round) reserve(js *jstate, need int) {
	for i := range r.nodes {
		if need <= 0 {
			return
		}
		if !js.may(i) {
			continue
		}
		k := min(need, r.nodes[i].freeGPU-r.reserved[i])
		if k > 0 {
			r.reserved[i] += k
			r.reservedTotal += k
			need -= k
		}
	}
}

// orderGuaranteed sorts the queued guaranteed jobs for admission. The
// quota, not the GPUs, is what they wait for, and jobs admitted greedily in
// submission order queue every short job behind the long ones of a burst;
// shortest time limit first minimises the average wait, and GuaranteedAge
// keeps it from starving a long job. Jobs near their deadline go first.
func (r *round) orderGuaranteed(q []*jstate) {
	r.orderGuaranteedBy(q)
	// Whatever the order, a job near the latest start its --deadline
	// allows goes first, the nearest first: Slurm ends it past that.
	near := func(js *jstate) bool { return nearDeadline(r.e.cfg, r.s.Now, js.j) }
	slices.SortStableFunc(q, func(a, b *jstate) int { return byDeadline(a, b, near(a), near(b)) })
}

// admittedBy is what placed js in orderGuaranteed's order.
func (r *round) admittedBy(js *jstate) string {
	switch {
	case nearDeadline(r.e.cfg, r.s.Now, js.j):
		return AdmitDeadline
	case r.isOld(js):
		return AdmitAge
	}
	return r.e.cfg.GuaranteedOrder
}

// isOld reports whether js has queued past GuaranteedAge, which in
// shortest order puts it ahead of the others.
func (r *round) isOld(js *jstate) bool {
	return r.e.cfg.GuaranteedOrder == OrderShortest && r.e.cfg.GuaranteedAge > 0 && r.s.Now.Sub(js.j.Submit) >= r.e.cfg.GuaranteedAge
}

func (r *round) orderGuaranteedBy(q []*jstate) {
	switch r.e.cfg.GuaranteedOrder {
	case OrderPriority:
		// Slurm's priority carries its own age factor.
		slices.SortStableFunc(q, func(a, b *jstate) int {
			ra, rb := rank{a.j.PriorityTier, a.j.Priority}, rank{b.j.PriorityTier, b.j.Priority}
			return cmp.Or(rb.compare(ra), bySubmit(a, b))
		})
		return
	case OrderSubmit:
		slices.SortStableFunc(q, bySubmit)
		return
	}
	old := r.isOld
	limit := func(js *jstate) time.Duration {
		if js.j.TimeLimit <= 0 {
			return math.MaxInt64 // no estimate: after every job that has one
		}
		return js.j.TimeLimit
	}
	slices.SortStableFunc(q, func(a, b *jstate) int {
		oa, ob := old(a), old(b)
		if c := firstTrue(oa, ob); c != 0 {
			return c
		}
		if oa {
			return bySubmit(a, b)
		}
		return cmp.Or(cmp.Compare(limit(a), limit(b)), bySubmit(a, b))
	})
}

// firstTrue orders a before b where only a holds, b before a where only
// b does.
func firstTrue(a, b bool) int {
	switch {
	case a && !b:
		return -1
	case b && !a:
		return 1
	}
	return 0
}

// byDeadline puts the jobs near their deadline (na, nb) first, the one
// with the nearest Job.StartBy first; 0 between two that are not.
func byDeadline(a, b *jstate, na, nb bool) int {
	if c := firstTrue(na, nb); c != 0 || !na {
		return c
	}
	return a.j.StartBy.Compare(b.j.StartBy)
}

// nearDeadline reports whether j must start within cfg.DeadlineLead of
// now for its --deadline. One already past its latest start is not: Slurm
// ends it whenever it starts, and GPUs held back for it would idle.
func nearDeadline(cfg Config, now time.Time, j *Job) bool {
	return cfg.DeadlineLead > 0 && !j.StartBy.IsZero() && !j.StartBy.Before(now) && !now.Add(cfg.DeadlineLead).Before(j.StartBy)
}

func bySubmit(a, b *jstate) int {
	if c := a.j.Submit.Compare(b.j.Submit); c != 0 {
		return c
	}
	return strings.Compare(a.j.ID, b.j.ID)
}

func (r *round) quota(tenant string) int {
	for _, t := range r.s.Tenants {
		if t.Name == tenant {
			return t.GPUQuota
		}
	}
	return r.e.cfg.DefaultQuota
}

// changed reports whether js's allocation differs from the snapshot's.
func (js *jstate) changed() bool { return !slices.Equal(js.orig, js.cur) }

// gpuChanged reports whether js's GPUs per node differ from the snapshot's.
func (js *jstate) gpuChanged() bool {
	if len(js.orig) != len(js.cur) {
		return true
	}
	for i := range js.orig {
		if js.orig[i].node != js.cur[i].node || js.orig[i].gpus != js.cur[i].gpus {
			return true
		}
	}
	return false
}

// tuneCPUs gives free CPUs, one per GPU of a slot at a time, to the jobs
// placed this round whose predicted throughput rises most per CPU.
func (r *round) tuneCPUs() {
	for n := range r.nodes {
		nd := &r.nodes[n]
		share := nd.n.CPUs / max(1, nd.n.GPUs)
		for nd.freeCPU > 0 {
			var best *jstate
			bestGain := 1e-9
			for _, vi := range nd.jobs {
				js := r.jobs[vi]
				g := js.on(n)
				if _, gc := r.groupFree(js); g == 0 || !js.gpuChanged() || g > nd.freeCPU || js.cpusOn(n)+g > g*share ||
					!js.j.cpusWithin(js.cpus()+g) || js.j.Max.CPUsPerNode > 0 && js.cpusOn(n)+g > js.j.Max.CPUsPerNode || gc < g ||
					r.cpusOverMem(js, n, g) {
					// Beyond the node's CPUs per GPU, the GPUs of jobs placed
					// later would have no data loaders; past its memory
					// bound, it would have no plan.
					continue
				}
				cur := r.nt(js)
				gain := (r.tput(js, js.cur, n, 0, g).tput/js.info.unit - cur) / float64(g)
				if gain > bestGain {
					best, bestGain = js, gain
				}
			}
			if best == nil {
				break
			}
			r.adjust(best, n, 0, best.on(n))
		}
	}
}

// commit turns the final allocation into actions, choosing each changed
// job's plan and its host memory.
func (r *round) commit() Plan {
	memFree := make([]float64, len(r.nodes))
	for i := range r.nodes {
		memFree[i] = r.nodes[i].n.MemGB
	}
	// Unchanged running jobs keep their memory.
	for _, js := range r.jobs {
		if js.running && !js.changed() {
			r.bookHeld(memFree, js.j, 1)
		}
	}
	p := Plan{Actions: make([]Action, 0, len(r.jobs))}
	// One backing array for the orders: a round may hold thousands.
	orders := make([]Order, 0, len(r.jobs))
	for _, js := range r.jobs {
		a := r.action(js, memFree)
		if js.order.Of > 0 {
			orders = append(orders, js.order)
			a.Order = &orders[len(orders)-1]
		}
		if r.e.v.slo && js.j.Guaranteed {
			a.MinRes = &Size{GPUs: js.info.minGPUs}
		}
		if js.admit1.Of > 0 {
			ad := js.admit1
			a.Admission = &ad
		}
		p.Actions = append(p.Actions, a)
	}
	return p
}

func (r *round) action(js *jstate, memFree []float64) Action {
	j := js.j
	a := Action{JobID: j.ID, Reason: js.reason, Detail: js.detail}
	if js.gpus == 0 {
		if js.running {
			a.Kind = Preempt
			if a.Reason == "" {
				a.Reason = ReasonReclaimed
			}
			return a
		}
		a.Kind = Keep
		if gg, gc := r.groupFree(js); (a.Reason == "" || a.Reason == ReasonNoResources) && (gg == 0 || gc < r.e.minCPG(js.j)) {
			a.Reason, a.Detail = ReasonGroup, r.fullGroup(js)
		}
		if a.Reason == "" {
			a.Reason = ReasonNoResources
		}
		if one := r.oneOverBound(js); a.Detail == "" && one > 0 {
			a.Detail = fmt.Sprintf("its memory bound (%.0f GB per job, %.0f per node; 0: none) is below the %.0f GB one GPU books",
				j.Max.MemGB, j.Max.MemGBPerNode, one)
		}
		if m := j.Min; a.Detail == "" && m != (Size{}) {
			a.Detail = "needs at least " + m.String()
			if m.GPUs > js.cap {
				a.Detail += fmt.Sprintf(", above the %d GPUs it may have", js.cap)
			}
		}
		if a.Reason == ReasonNoResources && a.Detail == "" && js.starve && !js.deadline {
			a.Detail = detailStarving
			if js.reserves {
				a.Detail = detailReserved
			}
		}
		if a.Reason == ReasonNoResources && js.held.ok {
			switch {
			case a.Detail == "":
				a.Detail = r.heldDetailOf(js.held)
			case js.ranked && a.Detail == js.detail:
				a.Detail += "; " + r.heldDetailOf(js.held)
			}
		}
		return a
	}
	if js.running && !js.changed() && !runs(r.s, j) {
		return r.unsupported(js, memFree)
	}
	if js.running && !js.changed() {
		a.Kind, a.Alloc, a.Plan = Keep, slices.Clone(j.Alloc), j.Plan
		a.Reason = ReasonUnchanged
		if js.frozen {
			a.Reason = ReasonPenalty
			if a.Detail == "" {
				delta := r.s.JobRestartCost(j)
				left := usefulAfterRestart(r.s, j)
				a.Detail = fmt.Sprintf("one more restart (%v each, %d so far) would leave %.0f%% of its %v run time useful, below %.0f%%",
					delta.Round(100*time.Millisecond), j.Reconfigs, 100*max(left, 0), j.RunTime.Round(time.Second), 100*r.e.cfg.ReconfigKeep)
			}
		}
		pl := r.placement(js.cur)
		cur := model.Resources{Placement: pl, CPUs: js.cpus(), HostMemGB: r.memGB * float64(len(pl))}
		if b, err := js.est.Predict(j.Plan, cur); err == nil && b.Iter > 0 {
			a.Throughput = float64(js.est.Spec().GlobalBatch) / b.Iter
		}
		if r.e.v.replan && !js.frozen {
			v := r.tput(js, js.cur, -1, 0, 0)
			worth := a.Throughput > 0 && j.RunTime.Seconds()*(1-a.Throughput/v.tput) >= r.s.JobRestartCost(j).Seconds()
			if v.tput > a.Throughput*(1+r.e.cfg.PlanSwitchGain) && v.plan != j.Plan && worth {
				r.bookHeld(memFree, j, -1)
				if r.memFits(js, v.plan, memFree, true) {
					a.Detail = fmt.Sprintf("%s predicted %.3g samples/s over %.3g for %s", v.plan, v.tput, a.Throughput, j.Plan)
					a.Kind, a.Plan, a.Throughput, a.Reason = Restart, v.plan, v.tput, ReasonReplan
					a.Alloc = r.allocOf(js, v.plan)
				} else {
					// It keeps what it holds, which its own plan's booking
					// here may not match, nor fit.
					r.bookHeld(memFree, j, 1)
				}
			}
		}
		return a
	}
	v := r.tput(js, js.cur, -1, 0, 0)
	plan, tput := v.plan, v.tput
	if js.admit && r.shapeOf(js.cur) == js.info.reqShape && tput < js.info.unit*js.minNT {
		// On its own request shape a guaranteed job keeps its own plan
		// unless another is clearly faster: the SLO is its plan's speed.
		plan, tput = j.Request.Plan, r.requestSpeed(js, js.cur)
	}
	if !r.memFits(js, plan, memFree, false) {
		pl := r.placement(js.cur)
		res := model.Resources{Placement: pl, CPUs: js.cpus(), HostMemGB: r.memGB * float64(len(pl))}
		alt, b, err := js.est.BestPlan(res, allowing(func(p model.Plan) bool { return r.memFits(js, p, memFree, false) }, j.Cannot))
		if err != nil || !(b.Iter > 0) {
			r.release(js)
			why := "no plan fits the free host memory"
			if j.MaxMemPerCPUGB > 0 {
				why += fmt.Sprintf(" and CPUs (Slurm gives it a CPU per %.3g GB: MaxMemPerCPU)", j.MaxMemPerCPUGB)
			}
			if j.Max.MemGB > 0 {
				why += fmt.Sprintf(" within the job's bound of %.0f GB", j.Max.MemGB)
			}
			if js.running && r.restore(js, memFree) {
				// What it holds is free still: it runs on as it is rather
				// than go back to the queue for a change no plan fits.
				js.reason, js.detail = "", why+": it runs on as it is, not on "+pl.String()
				return r.action(js, memFree)
			}
			if js.running {
				return Action{Kind: Preempt, JobID: j.ID, Reason: ReasonNoPlan, Detail: why}
			}
			return Action{Kind: Keep, JobID: j.ID, Reason: ReasonNoPlan, Detail: why}
		}
		plan, tput = alt, float64(js.est.Spec().GlobalBatch)/b.Iter
	}
	r.memFits(js, plan, memFree, true)
	a.Plan, a.Throughput = plan, tput
	a.Alloc = r.allocOf(js, plan)
	switch {
	case !js.running:
		a.Kind = Start
		if a.Reason == "" {
			a.Reason = ReasonSlope
		}
	case subset(js.cur, js.orig):
		a.Kind = Shrink
		if a.Reason == "" {
			a.Reason = ReasonReclaimed
		}
	default:
		a.Kind = Restart
		if a.Reason == "" || a.Reason == ReasonReclaimed {
			a.Reason = ReasonSlope
		}
	}
	if a.Detail == "" {
		a.Detail = fmt.Sprintf("%s on %s with %d CPUs: %.3g samples/s (%.2fx request)", plan, r.placement(js.cur), js.cpus(), tput, tput/js.info.ref)
		if m := j.Max.GPUs; m > 0 && js.gpus >= m {
			// Say so when its limits, not its slope, stopped its growth.
			a.Detail += fmt.Sprintf(", at the %d GPUs its limits allow", m)
		}
	}
	if a.Reason == ReasonStarving {
		a.Detail += "; " + detailStarving
	}
	return a
}

// oneOverBound is what one GPU of js books whatever the plan, cut to its
// CPUs under MaxMemPerCPU, where that is past its memory bound: against
// the bound per job as memRoom counts it, per node as growOn does. 0
// where it is within them.
func (r *round) oneOverBound(js *jstate) float64 {
	j := js.j
	switch perJob, perNode := js.baseMemOn(1, js.cpg), r.leastMemOn(js, 1, js.cpg); {
	case j.Max.MemGB > 0 && j.Max.MemGB < perJob:
		return perJob
	case j.Max.MemGBPerNode > 0 && j.Max.MemGBPerNode < perNode:
		return perNode
	}
	return 0
}

// bounded reports whether queued js's own bounds keep it from starting
// however many GPUs were free: its groups' room below the fewest GPUs (or
// their CPUs) it runs on, a memory bound below what one GPU books, a cap
// (Max) below its Min or below any runnable plan, a Min of nodes past
// those it may span, or no node it may take GPUs on (Nodes, NodeQuota).
func (r *round) bounded(js *jstate) bool {
	need := max(1, js.leastG, js.info.minG)
	if gg, gc := r.groupFree(js); gg < need || gc < r.e.minCPG(js.j)*need {
		return true
	}
	if r.oneOverBound(js) > 0 || js.cap < need || js.j.Min.Nodes > js.maxNodes {
		return true
	}
	for i := range r.nodes {
		if js.may(i) && (js.newNode == nil || !js.newNode[i] || js.newMax > 0) {
			return false
		}
	}
	return true
}

// unsupported gives a running job whose launch line cannot run its plan
// the best plan it can run on the resources it holds, whatever the restart
// costs (the job makes no progress as it is), or sends it back to the
// queue when none fits.
func (r *round) unsupported(js *jstate, memFree []float64) Action {
	j := js.j
	r.bookHeld(memFree, j, -1)
	_, why := r.s.planRuns(j)
	if v := r.tput(js, js.cur, -1, 0, 0); v.tput > 0 && r.memFits(js, v.plan, memFree, true) {
		return Action{Kind: Restart, JobID: j.ID, Plan: v.plan, Throughput: v.tput, Alloc: r.allocOf(js, v.plan),
			Reason: ReasonUnsupported, Detail: why + "; " + v.plan.String() + " instead"}
	}
	r.release(js)
	return Action{Kind: Preempt, JobID: j.ID, Reason: ReasonUnsupported, Detail: why + ", and no plan it can run fits what it holds"}
}

// restore gives running js, released, back what it holds in the
// snapshot where the round left that free (GPUs, CPUs, host memory and
// its groups' room), booking its memory; else it changes nothing.
func (r *round) restore(js *jstate, memFree []float64) bool {
	gpus, cpus := 0, 0
	for _, s := range js.orig {
		if nd := &r.nodes[s.node]; nd.freeGPU < s.gpus || nd.freeCPU < s.cpus {
			return false
		}
		gpus, cpus = gpus+s.gpus, cpus+s.cpus
	}
	for _, al := range js.j.Alloc {
		if n, _ := r.s.NodeIndex(al.Node); al.MemGB > memFree[n]+1e-9 {
			return false
		}
	}
	if gg, gc := r.groupFree(js); gpus > gg || cpus > gc {
		return false
	}
	for _, s := range js.orig {
		r.adjust(js, s.node, s.gpus, s.cpus)
	}
	r.bookHeld(memFree, js.j, 1)
	return true
}

// bookHeld takes the host memory job j holds on each node out of memFree
// (sign 1), or gives it back (sign -1).
func (r *round) bookHeld(memFree []float64, j *Job, sign float64) {
	for _, al := range j.Alloc {
		n, _ := r.s.NodeIndex(al.Node)
		memFree[n] -= sign * al.MemGB
	}
}

// release frees a job's tentative GPUs (used when no plan fits memory).
func (r *round) release(js *jstate) {
	for len(js.cur) > 0 {
		s := js.cur[0]
		r.adjust(js, s.node, -s.gpus, -s.cpus)
	}
}

func subset(cur, orig []slot) bool {
	for _, c := range cur {
		i := slices.IndexFunc(orig, func(o slot) bool { return o.node == c.node })
		if i < 0 || c.gpus > orig[i].gpus || c.cpus > orig[i].cpus {
			return false
		}
	}
	return true
}

func (r *round) placement(slots []slot) model.Placement {
	pl := make(model.Placement, 0, len(slots))
	for _, s := range slots {
		if s.gpus > 0 {
			pl = append(pl, s.gpus)
		}
	}
	return pl
}

// nodeAllocs is what plan books for js on each node it holds, in js.cur's
// order, as Slurm allocates it (slurmAlloc): the host memory (hostMem, cut
// to its partition's MaxMemPerCPU times its CPUs there) and its CPUs,
// raised where the plan's own need is more than they allow. memFits checks
// and books it, allocOf records it.
func (r *round) nodeAllocs(js *jstate, plan model.Plan) []NodeAlloc {
	out := make([]NodeAlloc, 0, len(js.cur))
	need := js.est.Memory(plan, r.placement(js.cur).Canonical()).HostGBNode
	for _, s := range js.cur {
		full := js.j.hostMem(r.e.cfg.HostMemPerGPUGB, s.gpus, need, js.hostBase)
		cpus, mem := js.j.slurmAlloc(full, s.gpus, s.cpus, need, js.hostBase)
		out = append(out, NodeAlloc{Node: r.nodes[s.node].n.Name, GPUs: s.gpus, CPUs: cpus, MemGB: mem})
	}
	return out
}

// memFits checks (and with reserve, books) the host memory of plan, and
// the CPUs Slurm raises the job to for it (nodeAllocs): free on each node
// and within the job's bounds and its groups' room. A job held to its
// request gets no more memory than it asked for.
func (r *round) memFits(js *jstate, plan model.Plan, memFree []float64, reserve bool) bool {
	allocs := r.nodeAllocs(js, plan)
	total, extra := 0.0, 0
	for i, s := range js.cur {
		a := allocs[i]
		more := a.CPUs - s.cpus
		if a.MemGB > memFree[s.node]+1e-9 || !js.j.memOnNode(a.MemGB) ||
			more > r.nodes[s.node].freeCPU || !js.j.raiseWithin(s.cpus, a.CPUs, js.j.Max.CPUsPerNode) {
			return false
		}
		total += a.MemGB
		extra += more
	}
	if !js.j.memWithin(total) {
		return false
	}
	if extra > 0 {
		if _, gc := r.groupFree(js); extra > gc || !js.j.raiseWithin(js.cpus(), js.cpus()+extra, js.j.Max.CPUs) {
			return false
		}
	}
	if reserve {
		// adjust changes only the CPUs of slots js.cur holds: their order
		// stays that of allocs.
		for i, s := range js.cur {
			memFree[s.node] -= allocs[i].MemGB
			if more := allocs[i].CPUs - s.cpus; more > 0 {
				r.adjust(js, s.node, 0, more)
			}
		}
	}
	return true
}

// allocOf is js's allocation with plan, as memFits booked it.
func (r *round) allocOf(js *jstate, plan model.Plan) []NodeAlloc { return r.nodeAllocs(js, plan) }

// frozenSum is what the running jobs that may not be reconfigured this
// round hold, and which of them the reconfiguration rule frees first.
type frozenSum struct {
	jobs, gpus int
	only       *jstate       // one of them: the only one where jobs is 1
	first      *jstate       // the first to become reconfigurable (nil: none ever)
	at, in     time.Duration // its run time then, and how long until then
}

// frozenSummary sums up the frozen running jobs once per round. Their GPUs
// change only in step 1, before any queued best-effort job is placed.
func (r *round) frozenSummary() *frozenSum {
	if r.frozen != nil {
		return r.frozen
	}
	f := &frozenSum{}
	keep := r.e.cfg.ReconfigKeep
	for _, js := range r.jobs {
		if !js.frozen || js.gpus == 0 {
			continue
		}
		f.jobs++
		f.gpus += js.gpus
		f.only = js
		if keep >= 1 {
			continue // no run time makes it reconfigurable
		}
		// (T - (N+1)*delta)/T >= keep solved for T.
		at := time.Duration(float64(js.j.Reconfigs+1) * float64(r.s.JobRestartCost(js.j)) / (1 - keep))
		if in := at - js.j.RunTime; f.first == nil || in < f.in {
			f.first, f.at, f.in = js, at, in
		}
	}
	r.frozen = f
	return f
}

// heldDetailOf is heldDetail, formatted once per round for jobs held back
// alike; those placed one after another in the round usually are.
func (r *round) heldDetailOf(h heldBack) string {
	if h == r.lastHeld {
		return r.lastHeldDetail
	}
	d, ok := r.held[h]
	if !ok {
		d = r.heldDetail(h)
		if r.held == nil {
			r.held = map[heldBack]string{}
		}
		r.held[h] = d
	}
	r.lastHeld, r.lastHeldDetail = h, d
	return d
}

// heldDetail says why a queued best-effort job with nothing to try waits:
// too few GPUs free, and the running jobs holding the rest either losing
// more per GPU than it would gain or not reconfigurable yet. Its slope is
// left to its Order, which rubick explain shows: one detail serves every
// job held back alike.
func (r *round) heldDetail(h heldBack) string {
	var b strings.Builder
	switch h.free {
	case 0:
		b.WriteString("no GPU free")
	case 1:
		b.WriteString("1 GPU free")
	default:
		fmt.Fprintf(&b, "%d GPUs free", h.free)
	}
	if h.reserved > 0 {
		fmt.Fprintf(&b, " (%d more held for a job past the starvation age)", h.reserved)
	}
	if h.need > 1 {
		fmt.Fprintf(&b, ", below the %d its smallest runnable plan needs", h.need)
	}
	if !math.IsInf(h.loss, 1) {
		fmt.Fprintf(&b, "; the running jobs it could take GPUs from lose more per GPU (least %.2f) than its slope", h.loss)
		if r.e.timeWeight() > 0 {
			b.WriteString(", both weighed by time left")
		}
	}
	f := r.frozenSummary()
	switch {
	case f.jobs == 1:
		fmt.Fprintf(&b, "; running job %s holding %d GPUs may not be reconfigured yet (reconfiguration rule)", f.only.j.ID, f.gpus)
		if f.first != nil {
			fmt.Fprintf(&b, ": from %v run time, in %v", f.at.Round(time.Second), f.in.Round(time.Second))
		}
	case f.jobs > 1:
		fmt.Fprintf(&b, "; %d running jobs holding %d GPUs may not be reconfigured yet (reconfiguration rule)", f.jobs, f.gpus)
		if f.first != nil {
			fmt.Fprintf(&b, ": the first, job %s, from %v run time, in %v", f.first.j.ID, f.at.Round(time.Second), f.in.Round(time.Second))
		}
	case math.IsInf(h.loss, 1) && h.free+h.reserved < r.gpuTotal:
		b.WriteString("; no running job may give up GPUs to it")
	}
	return b.String()
}
