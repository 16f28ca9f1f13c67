package daemon

import (
	"fmt"
	"math"

	"github.com/rubick-sched/rubick/slurm"
)

// jobBill is what a job's billing limits leave it: the tighter of its
// per-job limit (MaxTRESPerJob billing) and its groups' room (GrpTRES
// billing and the like), as bounds on each TRES its partition's
// TRESBillingWeights bill (-1: none).
//
// Billing couples the TRES: a job may trade CPUs for GPUs under one
// number. The bounds split the room in the proportions of the job's
// request, the shape its user asked for, which the policy grows alike: an
// allocation within every bound bills no more than the room, whatever the
// policy makes of it. Without weights Slurm bills CPUs alone, and the room
// is a CPU bound, exactly.
type jobBill struct {
	w    slurm.BillingWeights
	room int64 // -1: no billing limit
	// perJob is the per-job limit, by the group that sets room when that
	// is tighter.
	perJob int64
	by     slurm.Group
	// req is what the request bills.
	req               int64
	gpus, cpus, nodes int
	memMB             int64
}

// billOf works out jobBill for a job whose request is req, memory
// included (MiB over its nodes; what the policy books for it when it asked
// for none), under the per-job limit perJob (0: none) and its groups'
// room.
func billOf(w slurm.BillingWeights, perJob int64, room groupRoom, req request, reqMemMB int64) jobBill {
	b := jobBill{w: w, room: room.billing, perJob: perJob, by: room.billingBy, gpus: -1, cpus: -1, nodes: -1, memMB: -1}
	if perJob > 0 && (b.room < 0 || perJob < b.room) {
		b.room = perJob
	}
	gpus, cpus, nodes := req.Nodes*req.GPUsPerNode, req.CPUs, req.Nodes
	b.req = w.Of(gpus, cpus, nodes, reqMemMB)
	if b.room < 0 {
		return b
	}
	if !w.Set {
		b.cpus = int(b.room)
		return b
	}
	variable := w.GPU*float64(gpus) + w.CPU*float64(cpus) + w.MemMB*float64(reqMemMB)
	left := float64(b.room)
	if w.Node > 0 {
		if variable <= 0 {
			b.nodes = int(left / w.Node)
			return b
		}
		// Nodes bill whatever the job runs on them: no more than it asked
		// for, and the rest of the room for what grows.
		b.nodes = nodes
		left -= w.Node * float64(nodes)
	}
	if variable <= 0 {
		return b // bills nothing rubick allocates
	}
	share := max(left, 0) / variable
	const eps = 1e-9 // against 0.1*30 landing below 3
	if w.GPU > 0 {
		b.gpus = int(math.Floor(share*float64(gpus) + eps))
	}
	if w.CPU > 0 {
		b.cpus = int(math.Floor(share*float64(cpus) + eps))
	}
	if w.MemMB > 0 {
		b.memMB = int64(math.Floor(share * float64(reqMemMB)))
	}
	return b
}

// full reports whether the bounds leave a pending job nothing to start on:
// no GPU, CPU, node or memory.
func (b jobBill) full() bool {
	return b.gpus == 0 || b.cpus == 0 || b.nodes == 0 || b.memMB == 0
}

// limit names the limit room comes from.
func (b jobBill) limit() string {
	if b.perJob > 0 && b.perJob == b.room {
		return fmt.Sprintf("MaxTRESPerJob billing of its QOS, its partition's QOS or its association (%d)", b.perJob)
	}
	return fmt.Sprintf("%s billing, %d left", b.by.Limit, b.room)
}

// why says what bounds the job, for a GPU bound the billing sets and a
// pending job it leaves no room.
func (b jobBill) why() string {
	return fmt.Sprintf("%s; its request bills %d (%s)", b.limit(), b.req, b.w)
}

// reqMemMB is the memory (MiB) a job's request holds over its nodes: what
// it asked for, per GPU or per node, else what the policy books for its
// GPUs by default (perGPU for one GPU on one node).
func reqMemMB(j slurm.Job, req request, perGPU func() int64) int64 {
	gpus := int64(req.Nodes * req.GPUsPerNode)
	switch {
	case j.MemPerGPUMB > 0:
		return j.MemPerGPUMB * gpus
	case req.MemMB > 0:
		return req.MemMB * int64(req.Nodes)
	}
	return perGPU() * gpus
}
