package daemon

import (
	"cmp"
	"math"
	"slices"

	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// Rigid-job modes (Config.RigidJobs).
const (
	// RigidSchedule keeps free resources for the first pending rigid job:
	// the policy does not grow jobs into them, and Slurm starts the job
	// there once its own request fits.
	RigidSchedule = "schedule"
	// RigidIgnore leaves rigid jobs wholly to Slurm: they compete for
	// whatever the policy leaves free at the moment Slurm schedules.
	RigidIgnore = "ignore"
)

// Reservation is what a cycle keeps free for a pending rigid job.
type Reservation struct {
	JobID int      `json:"job_id"`
	Nodes []string `json:"nodes"`
	GPUs  int      `json:"gpus"` // held back from the policy now, over all nodes
}

// waitsForResources reports whether a pending job waits only for free
// resources, not for a dependency, a begin time, a hold or a limit.
func waitsForResources(j slurm.Job) bool {
	switch j.Reason {
	case "", "Resources", "Priority":
		return true
	}
	return false
}

// reserveRigid picks the first pending rigid job (no rubick tag, in a
// managed partition, waiting for resources; highest Slurm priority, then
// oldest) whose request some nodes can hold, chooses the nodes with the
// most free GPUs for it, and takes their free GPUs, CPUs and memory, up to
// its request per node, out of pnodes' capacity. usage is what rubick's
// running jobs hold per node, which the reservation never touches. It
// returns nil when no job is waiting.
func reserveRigid(cfg Config, jobs []slurm.Job, nodes []slurm.Node, pnodes []policy.Node, usage map[string]policy.NodeAlloc) *Reservation {
	var waiting []slurm.Job
	for _, j := range jobs {
		if j.State == slurm.StatePending && !j.Held && j.Tag == nil && j.TagErr == nil &&
			slices.Contains(cfg.Partitions, j.Partition) && waitsForResources(j) {
			waiting = append(waiting, j)
		}
	}
	slices.SortFunc(waiting, func(a, b slurm.Job) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.SubmitTime.Compare(b.SubmitTime), cmp.Compare(a.ID, b.ID))
	})
	byName := make(map[string]slurm.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	for _, j := range waiting {
		nNodes := max(j.NodeCount, 1)
		cpus := int(math.Ceil(float64(j.CPUs) / float64(nNodes)))
		memGB := float64(j.MemPerNodeMB) / 1024
		switch {
		case j.MemPerGPUMB > 0:
			// Beside it 22.05 reports a default per-CPU memory and 24.11
			// the per-GPU value as per-node memory.
			memGB = float64(j.MemPerGPUMB) * float64(j.GPUsPerNode) / 1024
		case j.MemPerCPUMB > 0:
			memGB = float64(j.MemPerCPUMB) * float64(cpus) / 1024
		}
		type cand struct {
			i                  int
			freeGPUs, freeCPUs int
		}
		var cands []cand
		for i, pn := range pnodes {
			n := byName[pn.Name]
			// A node that could never hold the request is no candidate.
			if !slices.Contains(n.Partitions, j.Partition) || n.GPUs < j.GPUsPerNode || n.CPUs < cpus {
				continue
			}
			u := usage[pn.Name]
			cands = append(cands, cand{i, pn.GPUs - u.GPUs, pn.CPUs - u.CPUs})
		}
		if len(cands) < nNodes {
			continue
		}
		slices.SortFunc(cands, func(a, b cand) int {
			return cmp.Or(cmp.Compare(b.freeGPUs, a.freeGPUs), cmp.Compare(b.freeCPUs, a.freeCPUs), cmp.Compare(pnodes[a.i].Name, pnodes[b.i].Name))
		})
		r := &Reservation{JobID: j.ID}
		for _, c := range cands[:nNodes] {
			pn := &pnodes[c.i]
			u := usage[pn.Name]
			g := min(max(pn.GPUs-u.GPUs, 0), j.GPUsPerNode)
			pn.GPUs -= g
			pn.CPUs -= min(max(pn.CPUs-u.CPUs, 0), cpus)
			pn.MemGB -= math.Min(math.Max(pn.MemGB-u.MemGB, 0), memGB)
			r.Nodes = append(r.Nodes, pn.Name)
			r.GPUs += g
		}
		slices.Sort(r.Nodes)
		return r
	}
	return nil
}
