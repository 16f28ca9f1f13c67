package daemon

import (
	"fmt"
	"math"

	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// jobBill is what a job's billing limits leave it: the tightest of its
// rooms (billRooms), as bounds on each TRES its partition's
// TRESBillingWeights bill (-1: none).
//
// Billing couples the TRES: a job may trade CPUs for GPUs under one
// number. The bounds split the room the way the policy books the job
// (billOf): an allocation within every bound bills no more than the room,
// whatever the policy makes of it. Without weights Slurm bills CPUs alone,
// and the room is a CPU bound, exactly.
type jobBill struct {
	w slurm.BillingWeights
	// by is the room that binds; room is its billing, -1 when none does.
	by   billRoom
	room int64
	// req is what the request bills.
	req               int64
	gpus, cpus, nodes int
	memMB             int64
}

// billRoom is one billing limit's room for a job: the billing it may hold
// (-1: none), whether it is a per-job limit (Slurm holds the job at any
// size past it) or a group's (room comes as its jobs end), what to call
// it, and, for a group, its use against its limit.
type billRoom struct {
	room   int64
	perJob bool
	name   string
	use    string
}

// billRooms lists job j's billing rooms: its per-job limit, its groups'
// room, and the billing-minutes of either over its time limit (minutes,
// whole; 0: none, which leaves them unpriced).
func billRooms(lim slurm.JobLimits, room groupRoom, use map[slurm.Group]slurm.GroupLimits, minutes int64) []billRoom {
	var out []billRoom
	if lim.Billing > 0 {
		out = append(out, billRoom{room: lim.Billing, perJob: true,
			name: fmt.Sprintf("MaxTRESPerJob billing of its QOS, its partition's QOS or its association (%d)", lim.Billing)})
	}
	if room.billing >= 0 {
		by := room.billingBy
		out = append(out, billRoom{room: room.billing, name: fmt.Sprintf("%s billing, %d left", by.Limit, room.billing),
			use: fmt.Sprintf("%s: billing in use %d, allowed %d", by.Limit, use[by].Billing, by.Billing)})
	}
	if minutes <= 0 {
		return out
	}
	if lim.BillingMins > 0 {
		out = append(out, billRoom{room: lim.BillingMins / minutes, perJob: true,
			name: fmt.Sprintf("MaxTRESMinsPerJob billing of its QOS, its partition's QOS or its association, %d billing-minutes for its %d-minute time limit",
				lim.BillingMins, minutes)})
	}
	if room.billingMins >= 0 {
		by := room.billingMinsBy
		out = append(out, billRoom{room: room.billingMins / minutes,
			name: fmt.Sprintf("%s, %d billing-minutes left for its %d-minute time limit", by.RunMinsName(), room.billingMins, minutes),
			use: fmt.Sprintf("%s: billing-minutes %s in use %d, allowed %d, for its %d-minute time limit",
				by.RunMinsName(), by.MinsWhat(), use[by].BillingRunMins, by.BillingRunMins, minutes)})
	}
	return out
}

// jobMem is how the policy books a job's host memory under a memory
// bound (Max.MemGB, which a billing bound with a memory weight sets): what
// it asked for on each node (--mem), or for each GPU (--mem-per-gpu); for a
// job that asked for none, the policy's default, which grows about with
// its GPUs (total: MiB at its request). One of the three is set.
type jobMem struct {
	perNode, perGPU, total int64
}

// memOf is jobMem for j, whose request is req; perGPU gives the policy's
// default for one GPU on one node.
func memOf(j slurm.Job, req request, perGPU func() int64) jobMem {
	switch {
	case j.MemPerGPUMB > 0:
		return jobMem{perGPU: userMemPerGPU(j)}
	case req.MemMB > 0:
		return jobMem{perNode: req.MemMB}
	}
	return jobMem{total: perGPU() * int64(req.Nodes*req.GPUsPerNode)}
}

// billOf works out jobBill for a job whose request is req, booking memory
// as mem, under rooms.
//
// What each node costs whatever runs on it (its node weight, and the
// memory a job that asked for it per node books there) is held at the
// request's nodes; the rest of the room is split over what grows with the
// job (GPUs with their memory per GPU, CPUs, default memory) in the
// request's proportions.
func billOf(w slurm.BillingWeights, rooms []billRoom, req request, mem jobMem) jobBill {
	b := jobBill{w: w, room: -1, gpus: -1, cpus: -1, nodes: -1, memMB: -1}
	for _, r := range rooms {
		if r.room >= 0 && (b.room < 0 || r.room < b.room) {
			b.by, b.room = r, r.room
		}
	}
	gpus, cpus, nodes := req.Nodes*req.GPUsPerNode, req.CPUs, req.Nodes
	b.req = w.Of(gpus, cpus, nodes, mem.perNode*int64(nodes)+mem.perGPU*int64(gpus)+mem.total)
	if b.room < 0 {
		return b
	}
	if !w.Set {
		b.cpus = int(b.room)
		return b
	}
	perGPU := w.GPUWeight() + w.MemMB*float64(mem.perGPU)
	perNode := w.Node + w.MemMB*float64(mem.perNode)
	variable := perGPU*float64(gpus) + w.CPU*float64(cpus) + w.MemMB*float64(mem.total)
	left := float64(b.room)
	if perNode > 0 {
		b.nodes = nodes
		if variable <= 0 {
			b.nodes = int(left / perNode)
		}
		left -= perNode * float64(b.nodes)
	}
	share := 0.0
	if variable > 0 {
		share = max(left, 0) / variable
	}
	const eps = 1e-9 // against 0.1*30 landing below 3
	if perGPU > 0 {
		b.gpus = int(math.Floor(share*float64(gpus) + eps))
	}
	if w.CPU > 0 {
		b.cpus = int(math.Floor(share*float64(cpus) + eps))
	}
	if w.MemMB > 0 {
		switch {
		case mem.perNode > 0:
			b.memMB = mem.perNode * int64(b.nodes) // what its nodes book, no more
		case mem.perGPU > 0:
			b.memMB = mem.perGPU * int64(b.gpus)
		default:
			b.memMB = int64(math.Floor(share * float64(mem.total)))
		}
	}
	return b
}

// full reports whether the bounds leave a pending job nothing to start on:
// no GPU, CPU, node or memory.
func (b jobBill) full() bool {
	return b.gpus == 0 || b.cpus == 0 || b.nodes == 0 || b.memMB == 0
}

// why says what bounds the job, for a GPU bound the billing sets and a
// pending job it leaves no room.
func (b jobBill) why() string {
	return fmt.Sprintf("%s; its request bills %d (%s)", b.by.name, b.req, b.w)
}

// waits says what a pending job it leaves no room waits for, under a
// group's limit.
func (b jobBill) waits() string {
	return fmt.Sprintf("waits for room in %s, and its request bills %d (%s)", b.by.use, b.req, b.w)
}

// billBounds lowers job j's limits (lim, and the GPU bound rubick explain
// names) to what its billing limits leave it: rooms, priced by its
// partition's weights w, and MaxTRESPerNode billing on each node. held is
// what it holds, oneGPUMem the policy's default memory for one GPU. It
// reports false for a pending job they leave nothing to start on, which
// it then keeps waiting (a group's room) or releases as submitted (a
// per-job limit, which Slurm holds it back for). Weights that did not
// parse leave its billing to Slurm.
func (v *View) billBounds(j slurm.Job, w slurm.BillingWeights, rooms []billRoom, lim *slurm.JobLimits, bound *GPUBound, held slurm.GroupLimits,
	oneGPUMem func() int64) bool {
	if w.Unread != "" || len(rooms) == 0 && lim.BillingPerNode <= 0 {
		return true
	}
	req := userRequest(j)
	mem := memOf(j, req, oneGPUMem)
	pending := j.State == slurm.StatePending
	if len(rooms) > 0 {
		bill := billOf(w, rooms, req, mem)
		if pending && bill.full() {
			if bill.by.perJob {
				v.asSubmitted(j, "no room to start under "+bill.why())
			} else {
				v.waits(j, policy.ReasonGroup, bill.waits())
			}
			return false
		}
		heldNodes := 0
		if j.State == slurm.StateRunning {
			heldNodes = max(j.NodeCount, 1)
		}
		lim.GPUs, lim.CPUs = capBy(lim.GPUs, bill.gpus, held.GPUs), capBy(lim.CPUs, bill.cpus, held.CPUs)
		lim.MemMB, lim.Nodes = capBy(lim.MemMB, bill.memMB, held.MemMB), capBy(lim.Nodes, bill.nodes, heldNodes)
		if lim.GPUs != bound.GPUs {
			*bound = GPUBound{lim.GPUs, bill.why()}
		}
	}
	if lim.BillingPerNode > 0 {
		// One node of the request, billed against the limit on each.
		nodes := max(req.Nodes, 1)
		one := request{Nodes: 1, GPUsPerNode: req.GPUsPerNode, CPUs: max(req.CPUs/nodes, 1)}
		mem.total /= int64(nodes)
		room := []billRoom{{room: lim.BillingPerNode, perJob: true,
			name: fmt.Sprintf("MaxTRESPerNode billing of its QOS, its partition's QOS or its association (%d)", lim.BillingPerNode)}}
		bill := billOf(w, room, one, mem)
		if pending && bill.full() {
			v.asSubmitted(j, "no room to start under "+bill.why())
			return false
		}
		var perNode slurm.GroupLimits // what it holds on each node
		if n := int64(max(j.NodeCount, 1)); j.State == slurm.StateRunning {
			perNode = slurm.GroupLimits{GPUs: j.GPUsPerNode, CPUs: int(int64(j.CPUs) / n), MemMB: j.MemMB / n}
		}
		lim.GPUsPerNode, lim.CPUsPerNode = capBy(lim.GPUsPerNode, bill.gpus, perNode.GPUs), capBy(lim.CPUsPerNode, bill.cpus, perNode.CPUs)
		lim.MemMBPerNode = capBy(lim.MemMBPerNode, bill.memMB, perNode.MemMB)
	}
	return true
}
