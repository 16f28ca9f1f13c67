package policy

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/rubick-sched/rubick/model"
)

// queueKind selects one of the queue-based policies, which never change a
// running job's GPUs or plan.
type queueKind struct {
	backfill   bool // EASY backfill behind the first job that cannot start
	guaranteed bool // guaranteed jobs first, preempting best-effort ones
	tuneCPU    bool // CPUs follow the job's predicted sensitivity
	bestPlan   bool // the model's best plan for the requested resources
}

var (
	// queueFIFO is what Slurm users have: the requested resources and plan,
	// submission order with EASY backfill.
	queueFIFO = queueKind{backfill: true}
	// queueSynergy is FIFO with backfill whose CPUs follow each job's
	// sensitivity (Synergy-TUNE): fewer for jobs that do not need them, more
	// for jobs that speed up; GPUs and plan stay as requested.
	queueSynergy = queueKind{backfill: true, tuneCPU: true}
	// queueAntMan runs guaranteed jobs on their request in submission order,
	// ahead of best-effort jobs, which use whatever is idle and are preempted
	// the moment a guaranteed job needs their GPUs.
	queueAntMan = queueKind{guaranteed: true}
	// queueRubickE is rubick without resource reconfiguration: requested
	// resources, guaranteed jobs first, backfill, and the best plan.
	queueRubickE = queueKind{backfill: true, guaranteed: true, bestPlan: true}
	// queueRubickN is rubick without either reconfiguration.
	queueRubickN = queueKind{backfill: true, guaranteed: true}
)

// queue implements the queue-based baselines.
type queue struct {
	name string
	cfg  Config
	kind queueKind
	perf *perfCache
}

func newQueue(name string, c Config, k queueKind) *queue {
	return &queue{name: name, cfg: c, kind: k, perf: newPerfCache()}
}

// Name implements Policy.
func (q *queue) Name() string { return q.name }

// qnode is a node's free capacity during a queue round.
type qnode struct {
	gpus, cpus int
	mem        float64
}

// Decide implements Policy.
func (q *queue) Decide(ctx context.Context, s *Snapshot) (Plan, error) {
	q.perf.sync(s.Models)
	nodeGPUs, memGB := 0, leastMem(s)
	free := make([]qnode, len(s.Nodes))
	for i, n := range s.Nodes {
		free[i] = qnode{n.GPUs, n.CPUs, n.MemGB}
		nodeGPUs = max(nodeGPUs, n.GPUs)
	}
	for i := range s.Jobs {
		for _, a := range s.Jobs[i].Alloc {
			n, _ := s.NodeIndex(a.Node)
			free[n].gpus -= a.GPUs
			free[n].cpus -= a.CPUs
			free[n].mem -= a.MemGB
		}
	}
	actions := make(map[string]Action, len(s.Jobs))
	for i := range s.Jobs {
		j := &s.Jobs[i]
		switch {
		case j.Running() && !runs(s, j):
			actions[j.ID] = q.unsupported(s, j)
		case j.Running():
			actions[j.ID] = Action{Kind: Keep, JobID: j.ID, Alloc: slices.Clone(j.Alloc), Plan: j.Plan,
				Throughput: q.predict(s, j, j.Plan, placementOf(j.Alloc), cpusOf(j.Alloc), memGB), Reason: ReasonUnchanged}
		}
	}
	var queued []*Job
	for i := range s.Jobs {
		if !s.Jobs[i].Running() {
			queued = append(queued, &s.Jobs[i])
		}
	}
	slices.SortStableFunc(queued, func(a, b *Job) int {
		if q.kind.guaranteed && a.Guaranteed != b.Guaranteed {
			if a.Guaranteed {
				return -1
			}
			return 1
		}
		return cmp.Or(a.Submit.Compare(b.Submit), cmp.Compare(a.ID, b.ID))
	})
	var head *Job            // the first job that could not start (EASY backfill)
	var shadow []qnode       // free capacity when head can start
	var shadowT float64      // seconds from now until then
	var held map[string]bool // running jobs shadow counts as still holding theirs
	for _, j := range queued {
		if err := ctx.Err(); err != nil {
			return Plan{}, fmt.Errorf("policy %s: %w", q.name, err)
		}
		pl := j.Request.Placement
		if len(pl) == 0 {
			pl = PackedPlacement(j.Request.GPUs, nodeGPUs)
		}
		if pl.GPUs() == 0 {
			// No node has a GPU left to rubick (others hold them all): a
			// start would hold none.
			actions[j.ID] = Action{Kind: Keep, JobID: j.ID, Reason: ReasonNoResources, Detail: "no GPU free"}
			continue
		}
		if pl.GPUs() < j.Min.GPUs || len(pl) < j.Min.Nodes {
			actions[j.ID] = belowMin(j, pl)
			continue
		}
		// f is what j may start on: free, or for a guaranteed job free
		// with the victims preemptFor picks gone. They are preempted only
		// once j starts: preempted for a job that still waits, they would
		// restart and be preempted again round after round.
		f, victims := free, []*Job(nil)
		if q.kind.guaranteed && j.Guaranteed {
			if _, ok := q.fit(s, free, pl, j); !ok {
				if trial, vs, ok := q.preemptFor(s, free, pl, j, actions); ok {
					f, victims = trial, vs
				}
			}
		}
		nodes, ok := q.fit(s, f, pl, j)
		var a Action
		if ok {
			a = q.start(s, f, nodes, pl, j, memGB)
		}
		// outlives: a backfilled job still running when the head is to
		// start, which must leave the head's room free.
		outlives := false
		if ok && head != nil && shadow != nil && q.kind.backfill {
			// Backfill only if the head still starts on time: the job ends
			// before the head's shadow time or leaves the head's room free.
			// Its whole allocation counts: CPUs and memory it takes from
			// the head's nodes delay the head as GPUs do.
			outlives = !(j.TimeLimit > 0 && j.TimeLimit.Seconds() <= shadowT)
			if outlives {
				after := slices.Clone(shadow)
				for _, v := range victims {
					if held[v.ID] {
						release(s, after, v.Alloc)
					}
				}
				book(s, after, a.Alloc)
				hp := head.Request.Placement
				if len(hp) == 0 {
					hp = PackedPlacement(head.Request.GPUs, nodeGPUs)
				}
				_, ok = q.fit(s, after, hp, head)
			}
		}
		if !ok {
			detail := fmt.Sprintf("needs %s GPUs per node", model.Placement(pl))
			if j.MaxMemPerCPUGB > 0 {
				// The CPUs Slurm gives it for its memory may be what it
				// waits for, or take it past its bounds.
				detail += fmt.Sprintf(" with a CPU per %.3g GB of its memory (MaxMemPerCPU)", j.MaxMemPerCPUGB)
				if m := j.Max; m.CPUs > 0 || m.CPUsPerNode > 0 {
					detail += ", within " + Size{CPUs: m.CPUs, CPUsPerNode: m.CPUsPerNode}.String()
				}
			}
			actions[j.ID] = Action{Kind: Keep, JobID: j.ID, Reason: ReasonNoResources, Detail: detail}
			if head == nil && q.kind.backfill {
				head = j
				shadow, shadowT, held = q.shadow(s, free, j, pl, actions)
			}
			continue
		}
		if !j.allocMin(a.Alloc) {
			// As it asked, it is below its minimum: Slurm would hold it.
			actions[j.ID] = belowMin(j, pl)
			continue
		}
		for _, v := range victims {
			actions[v.ID] = Action{Kind: Preempt, JobID: v.ID, Reason: ReasonReclaimed, Detail: "by guaranteed " + j.ID}
			if held[v.ID] {
				// Gone, it no longer holds its room at head's start.
				release(s, shadow, v.Alloc)
				delete(held, v.ID)
			}
		}
		if victims != nil {
			copy(free, f)
		}
		book(s, free, a.Alloc)
		if head != nil {
			a.Reason = ReasonBackfill
		}
		if outlives {
			// What it holds is not there at the shadow time either: the
			// next job backfilled must leave the head's room without it.
			book(s, shadow, a.Alloc)
		}
		actions[j.ID] = a
	}
	p := Plan{Actions: make([]Action, 0, len(s.Jobs))}
	for i := range s.Jobs {
		p.Actions = append(p.Actions, actions[s.Jobs[i].ID])
	}
	return p, nil
}

// belowMin keeps a job that, run as it asked (pl), is below its Min:
// Slurm would hold it.
func belowMin(j *Job, pl model.Placement) Action {
	return Action{Kind: Keep, JobID: j.ID, Reason: ReasonNoResources,
		Detail: fmt.Sprintf("as it asked (%s GPUs per node), it is below its minimum: at least %s", pl, j.Min)}
}

func placementOf(alloc []NodeAlloc) model.Placement {
	var pl model.Placement
	for _, a := range alloc {
		if a.GPUs > 0 {
			pl = append(pl, a.GPUs)
		}
	}
	return pl
}

func cpusOf(alloc []NodeAlloc) int {
	c := 0
	for _, a := range alloc {
		c += a.CPUs
	}
	return c
}

// unsupported moves a running job whose launch line cannot run its plan to
// the best plan it can run on what it holds (within the host memory it
// holds), or back to the queue when none fits. Freed resources wait for
// the next round.
func (q *queue) unsupported(s *Snapshot, j *Job) Action {
	_, why := s.planRuns(j)
	mem := 0.0
	for _, a := range j.Alloc {
		mem += a.MemGB
	}
	res := model.Resources{Placement: placementOf(j.Alloc), CPUs: cpusOf(j.Alloc), HostMemGB: mem}
	est := s.Models[j.Model]
	if p, b, err := est.BestPlan(res, j.Cannot.Allows); err == nil && b.Iter > 0 {
		return Action{Kind: Restart, JobID: j.ID, Alloc: slices.Clone(j.Alloc), Plan: p,
			Throughput: float64(est.Spec().GlobalBatch) / b.Iter, Reason: ReasonUnsupported, Detail: why + "; " + p.String() + " instead"}
	}
	return Action{Kind: Preempt, JobID: j.ID, Reason: ReasonUnsupported, Detail: why + ", and no plan it can run fits what it holds"}
}

func runs(s *Snapshot, j *Job) bool { ok, _ := s.planRuns(j); return ok }

func (q *queue) predict(s *Snapshot, j *Job, plan model.Plan, pl model.Placement, cpus int, memGB float64) float64 {
	est := s.Models[j.Model]
	b, err := est.Predict(plan, model.Resources{Placement: pl, CPUs: cpus, HostMemGB: memGB * float64(len(pl))})
	if err != nil || !(b.Iter > 0) {
		return 0
	}
	return float64(est.Spec().GlobalBatch) / b.Iter
}

// fit finds nodes for placement pl (GPUs and the minimum CPUs and memory):
// for each part, largest first, the fitting node with the least free GPUs.
// A node fits with the fewest CPUs the job starts with, as Slurm raises
// them for the memory start books there with the requested plan
// (nodeAlloc), and the least memory any plan books there (cut to them).
// Raised past the job's CPU bounds (Max.CPUsPerNode, Max.CPUs), Slurm
// would hold it: nothing fits, unless rubick-e switches it on the nodes
// found to a plan that keeps within them (switchPlan).
func (q *queue) fit(s *Snapshot, free []qnode, pl model.Placement, j *Job) ([]int, bool) {
	est := s.Models[j.Model]
	need, base := est.Memory(j.Request.Plan, pl.Canonical()).HostGBNode, hostBase(est, j.Request.Plan)
	used := make(map[int]bool, len(pl))
	out := make([]int, len(pl))
	order := make([]int, len(pl))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return pl[b] - pl[a] })
	newLeft := math.MaxInt // nodes its NodeQuota lets it take outside the shared ones
	if j.NodeQuota != nil {
		newLeft = j.NodeQuota.New
	}
	asked, raised := 0, 0 // CPUs over the parts placed
	// rubick-e may take a node the requested plan is raised past its bound
	// on: the plan it switches to there may keep within it.
	bound, within := !q.kind.bestPlan, true
	for _, i := range order {
		g := pl[i]
		c := q.minCPUs(j, g)
		_, least := j.slurmAlloc(j.hostMem(q.cfg.HostMemPerGPUGB, g, 0, 0), g, c, 0, 0)
		best, bestNew, bestCPUs := -1, false, 0
		for n := range free {
			name := s.Nodes[n].Name
			isNew := j.newNode(name)
			if used[n] || !j.may(name) || isNew && newLeft <= 0 || free[n].gpus < g {
				continue
			}
			cpus, _ := q.nodeAlloc(j, g, c, need, base, free[n].mem)
			if free[n].cpus < cpus || free[n].mem < least || bound && !j.raiseWithin(c, cpus, j.Max.CPUsPerNode) {
				continue
			}
			// A shared node first: it leaves the quota to the parts after.
			if best < 0 || bestNew && !isNew || bestNew == isNew && free[n].gpus < free[best].gpus {
				best, bestNew, bestCPUs = n, isNew, cpus
			}
		}
		if best < 0 {
			return nil, false
		}
		if bestNew {
			newLeft--
		}
		used[best] = true
		out[i] = best
		asked, raised = asked+c, raised+bestCPUs
		within = within && j.raiseWithin(c, bestCPUs, j.Max.CPUsPerNode)
	}
	if !within || !j.raiseWithin(asked, raised, j.Max.CPUs) {
		if !q.kind.bestPlan {
			return nil, false
		}
		alloc := make([]NodeAlloc, len(out))
		for i := range out {
			alloc[i] = NodeAlloc{GPUs: pl[i], CPUs: q.minCPUs(j, pl[i])}
		}
		if _, _, ok := q.switchPlan(s, j, pl, out, alloc, free, leastMem(s)); !ok {
			return nil, false
		}
	}
	return out, true
}

// leastMem is the host memory of the cluster's smallest node, what the
// queue predicts a job's throughput with.
func leastMem(s *Snapshot) float64 {
	m := math.Inf(1)
	for _, n := range s.Nodes {
		m = min(m, n.MemGB)
	}
	return m
}

// nodeAlloc is the CPUs and host memory the queue books for j on a node
// holding g of its GPUs and cpus of its CPUs, with a plan whose host need
// there is need (base of it whatever the plan), out of free GB free: the
// memory hostMem books, or what is left where that is not free (the
// user's own plan ran before), as Slurm allocates it (slurmAlloc).
func (q *queue) nodeAlloc(j *Job, g, cpus int, need, base, free float64) (int, float64) {
	return j.slurmAlloc(min(j.hostMem(q.cfg.HostMemPerGPUGB, g, need, base), free), g, cpus, need, base)
}

// minCPUs is the fewest CPUs a job may start with on a node holding g of its GPUs.
func (q *queue) minCPUs(j *Job, g int) int {
	if q.kind.tuneCPU {
		// Tuned, it gets no fewer than minCPG per GPU (start), even where
		// it asked for fewer: fit must find those free.
		return q.minCPG(j) * g
	}
	// Never below the job's own CPUs per GPU (its --cpus-per-gpu, or what
	// its memory takes under MaxMemPerCPU), which Slurm allocates at any
	// size, as every policy keeps it.
	return max(j.Request.CPUs*g/max(1, j.Request.GPUs), j.minCPG(0)*g)
}

// minCPG is the fewest CPUs j runs with per GPU.
func (q *queue) minCPG(j *Job) int { return j.minCPG(q.cfg.MinCPUsPerGPU) }

// book takes alloc out of the free capacity f.
func book(s *Snapshot, f []qnode, alloc []NodeAlloc) { addAlloc(s, f, alloc, -1) }

// release gives alloc back to the free capacity f.
func release(s *Snapshot, f []qnode, alloc []NodeAlloc) { addAlloc(s, f, alloc, 1) }

// addAlloc adds alloc to the free capacity f sign times.
func addAlloc(s *Snapshot, f []qnode, alloc []NodeAlloc, sign int) {
	for _, a := range alloc {
		n, _ := s.NodeIndex(a.Node)
		f[n].gpus += sign * a.GPUs
		f[n].cpus += sign * a.CPUs
		f[n].mem += float64(sign) * a.MemGB
	}
}

// start returns the Start action of a job on nodes, out of what free
// leaves there; the caller books it.
func (q *queue) start(s *Snapshot, free []qnode, nodes []int, pl model.Placement, j *Job, memGB float64) Action {
	est := s.Models[j.Model]
	alloc := make([]NodeAlloc, len(nodes))
	total := 0
	for i, n := range nodes {
		c := q.minCPUs(j, pl[i])
		alloc[i] = NodeAlloc{Node: s.Nodes[n].Name, GPUs: pl[i], CPUs: c}
		total += c
	}
	if q.kind.tuneCPU {
		// Tune CPUs: the fewest that give (nearly) the best predicted
		// throughput among what is free on the job's nodes.
		// Up to the node's proportional share per GPU: more would starve
		// the GPUs of the jobs behind it of their data loaders.
		maxc := math.MaxInt
		for i, n := range nodes {
			share := s.Nodes[n].CPUs / max(1, s.Nodes[n].GPUs)
			maxc = min(maxc, free[n].cpus/pl[i], share)
			if m := j.Max.CPUsPerNode; m > 0 {
				maxc = min(maxc, m/pl[i])
			}
		}
		if m := j.Max.CPUs; m > 0 {
			maxc = min(maxc, m/pl.GPUs())
		}
		// No fewer than its Min of CPUs.
		lo := max(q.minCPG(j), (j.Min.CPUs+pl.GPUs()-1)/pl.GPUs())
		bestC, bestT := q.minCPG(j), 0.0
		for c := lo; c <= maxc; c++ {
			t := q.perf.best(j.Model, est, spaceFixed, j.Cannot, j.Request.Plan, shapeKey(pl), c*pl.GPUs(), memGB).tput
			if t > bestT*1.01 {
				bestC, bestT = c, t
			}
		}
		total = 0
		for i := range alloc {
			alloc[i].CPUs = bestC * alloc[i].GPUs
			total += alloc[i].CPUs
		}
	}
	plan := j.Request.Plan
	detail := fmt.Sprintf("requested %s on %s", plan, pl)
	if q.kind.bestPlan {
		if v, req, ok := q.switchPlan(s, j, pl, nodes, alloc, free, memGB); ok {
			plan = v.plan
			detail = fmt.Sprintf("%s on %s: %.3g samples/s, %.2fx the requested plan", plan, pl, v.tput, v.tput/max(req, 1e-12))
		}
	}
	hostNode, base := est.Memory(plan, pl.Canonical()).HostGBNode, hostBase(est, plan)
	for i, n := range nodes {
		alloc[i].CPUs, alloc[i].MemGB = q.nodeAlloc(j, pl[i], alloc[i].CPUs, hostNode, base, free[n].mem)
	}
	slices.SortFunc(alloc, func(a, b NodeAlloc) int {
		ia, _ := s.NodeIndex(a.Node)
		ib, _ := s.NodeIndex(b.Node)
		return ia - ib
	})
	reason := ReasonFIFO
	if j.Guaranteed && q.kind.guaranteed {
		reason = ReasonSLO
	}
	return Action{Kind: Start, JobID: j.ID, Alloc: alloc, Plan: plan,
		Throughput: q.predict(s, j, plan, pl, total, memGB), Reason: reason, Detail: detail}
}

// switchPlan returns the plan rubick-e runs j with on nodes instead of the
// requested one, alloc holding the CPUs it asks for there (before Slurm
// raises them for its memory), and the requested plan's throughput: the
// best plan, where it is faster and its memory and the CPUs Slurm raises
// it to fit (hostFits). false: it runs the requested plan.
func (q *queue) switchPlan(s *Snapshot, j *Job, pl model.Placement, nodes []int, alloc []NodeAlloc, free []qnode, memGB float64) (perfVal, float64, bool) {
	est, cpus := s.Models[j.Model], cpusOf(alloc)
	v := q.perf.pick(j.Model, est, spaceAny, j.Cannot, j.Request.Plan, shapeKey(pl), cpus, memGB, q.cfg.PlanSwitchGain)
	req := q.predict(s, j, j.Request.Plan, pl, cpus, memGB)
	return v, req, v.tput > req && q.hostFits(j, est, v.plan, pl, nodes, alloc, free)
}

// hostFits reports whether the host memory j books with plan on the
// chosen nodes (alloc, in nodes' order), and the CPUs Slurm raises it to
// for that memory (slurmAlloc), fit there and within what j may have.
func (q *queue) hostFits(j *Job, est Estimator, plan model.Plan, pl model.Placement, nodes []int, alloc []NodeAlloc, free []qnode) bool {
	h, base := est.Memory(plan, pl.Canonical()).HostGBNode, hostBase(est, plan)
	total, raised := 0.0, 0
	for i, n := range nodes {
		cpus, m := j.slurmAlloc(j.hostMem(q.cfg.HostMemPerGPUGB, pl[i], h, base), pl[i], alloc[i].CPUs, h, base)
		if m > free[n].mem || !j.memOnNode(m) || cpus > free[n].cpus || !j.raiseWithin(alloc[i].CPUs, cpus, j.Max.CPUsPerNode) {
			return false
		}
		total += m
		raised += cpus
	}
	return j.memWithin(total) && j.raiseWithin(cpusOf(alloc), raised, j.Max.CPUs)
}

// shadow returns the free capacity at the moment the head job could start
// if running jobs end at their time limits, how far away that is, and the
// jobs still holding their allocations then.
func (q *queue) shadow(s *Snapshot, free []qnode, head *Job, pl model.Placement, actions map[string]Action) ([]qnode, float64, map[string]bool) {
	type end struct {
		id    string
		t     float64
		alloc []NodeAlloc
	}
	var ends []end
	for i := range s.Jobs {
		j := &s.Jobs[i]
		a, ok := actions[j.ID]
		if !ok || (a.Kind != Keep && a.Kind != Start) || len(a.Alloc) == 0 {
			continue // queued, or preempted this round
		}
		t := math.Inf(1)
		if j.TimeLimit > 0 {
			t = max(0, (j.TimeLimit - j.RunTime).Seconds())
		}
		ends = append(ends, end{j.ID, t, a.Alloc})
	}
	slices.SortStableFunc(ends, func(a, b end) int { return cmp.Compare(a.t, b.t) })
	f := slices.Clone(free)
	held := make(map[string]bool, len(ends))
	for _, e := range ends {
		held[e.id] = true
	}
	for _, e := range ends {
		if _, ok := q.fit(s, f, pl, head); ok {
			return f, e.t, held
		}
		if math.IsInf(e.t, 1) {
			break
		}
		release(s, f, e.alloc)
		delete(held, e.id)
		if _, ok := q.fit(s, f, pl, head); ok {
			return f, e.t, held
		}
	}
	// Never fits on what running jobs release: do not hold others back.
	return nil, math.Inf(1), nil
}

// preemptFor picks best-effort running jobs, most recently started first,
// until guaranteed job j fits: it returns the free capacity without them,
// and them. false: j does not fit even so. It preempts nothing: the caller
// does once j starts.
func (q *queue) preemptFor(s *Snapshot, free []qnode, pl model.Placement, j *Job, actions map[string]Action) ([]qnode, []*Job, bool) {
	var victims []*Job
	for i := range s.Jobs {
		v := &s.Jobs[i]
		if a, ok := actions[v.ID]; ok && a.Kind == Keep && v.Running() && !v.Guaranteed {
			victims = append(victims, v)
		}
	}
	slices.SortStableFunc(victims, func(a, b *Job) int {
		return cmp.Or(cmp.Compare(a.RunTime, b.RunTime), cmp.Compare(a.ID, b.ID))
	})
	trial := slices.Clone(free)
	var chosen []*Job
	for _, v := range victims {
		if _, ok := q.fit(s, trial, pl, j); ok {
			break
		}
		release(s, trial, v.Alloc)
		chosen = append(chosen, v)
	}
	if _, ok := q.fit(s, trial, pl, j); !ok {
		return nil, nil, false
	}
	return trial, chosen, true
}
