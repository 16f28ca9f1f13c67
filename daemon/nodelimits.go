package daemon

import (
	"fmt"
	"maps"
	"slices"

	"github.com/rubick-sched/rubick/slurm"
)

// groupNodes counts, per group limit on nodes (GrpTRES node= and its
// kin), the group's running jobs on each node: Slurm counts a node once
// however many of the group's jobs share it (22.05 and 24.11 labs: two
// one-node jobs on one node run under GrpTRES=node=1, a third on another
// node waits with QOSGrpNodeLimit).
type groupNodes map[slurm.Group]map[string]int

// add counts nodes k more times (-1: a job leaves them) in each of groups
// that limits nodes.
func (gn groupNodes) add(groups []slurm.Group, nodes []string, k int) {
	for _, g := range groups {
		if g.Nodes <= 0 {
			continue
		}
		m := gn[g]
		if m == nil {
			m = map[string]int{}
			gn[g] = m
		}
		for _, n := range nodes {
			if m[n] += k; m[n] <= 0 {
				delete(m, n)
			}
		}
	}
}

// adds is how many of nodes group g does not hold yet.
func (gn groupNodes) adds(g slurm.Group, nodes []string) int {
	n := 0
	for i, node := range nodes {
		if gn[g][node] == 0 && !slices.Contains(nodes[:i], node) {
			n++
		}
	}
	return n
}

// clone is a deep copy of gn.
func (gn groupNodes) clone() groupNodes {
	out := make(groupNodes, len(gn))
	for g, m := range gn {
		out[g] = maps.Clone(m)
	}
	return out
}

// nodeRoom is what job j's group limits on nodes leave it: at most room
// nodes beyond those shared, which the groups with room hold already and
// which cost it nothing there (-1: no bound), and, where a group has no
// room, only the nodes its other jobs hold already (only, nil otherwise);
// by names the group that binds. With several groups with room, shared is
// the nodes all of them hold and room the least left: the safe side.
type nodeRoom struct {
	room   int
	shared []string
	only   []string
	full   bool // a group has no room: only holds the nodes left
	by     slurm.Group
}

// nodeRoomOf works nodeRoom out for j under groups, j's own nodes given
// back first when it runs (a restart leaves them); the caller keeps a
// running job's bound at the nodes it holds at least (capBy).
func (gn groupNodes) nodeRoomOf(groups []slurm.Group, j slurm.Job) nodeRoom {
	r := nodeRoom{room: -1}
	roomy := 0 // groups with room seen
	own := []string(nil)
	if j.State == slurm.StateRunning {
		own = j.NodeList
	}
	for _, g := range groups {
		if g.Nodes <= 0 {
			continue
		}
		var others []string // the nodes the group holds without j
		for n, c := range gn[g] {
			if slices.Contains(own, n) {
				c--
			}
			if c > 0 {
				others = append(others, n)
			}
		}
		slices.Sort(others)
		left := max(g.Nodes-len(others), 0)
		if left > 0 {
			if r.room < 0 || left < r.room {
				r.room = left
				if !r.full {
					r.by = g
				}
			}
			if roomy++; roomy == 1 {
				r.shared = others
			} else {
				r.shared = slices.DeleteFunc(r.shared, func(n string) bool { return !slices.Contains(others, n) })
			}
			continue
		}
		// Full: only nodes it holds already, and a running job's own.
		allowed := append(slices.Clone(others), own...)
		if r.full {
			allowed = slices.DeleteFunc(allowed, func(n string) bool { return !slices.Contains(r.only, n) })
		} else {
			r.full, r.by = true, g
		}
		slices.Sort(allowed)
		r.only = slices.Compact(allowed)
	}
	return r
}

// restrict narrows the nodes a job may run on (allowed; nil: any of
// open) to r.only when a group is full; ok is false when none is left.
func (r nodeRoom) restrict(allowed []string, open []slurm.Node) (nodes []string, ok bool) {
	if !r.full {
		return allowed, true
	}
	for _, n := range r.only {
		if allowed == nil && slices.ContainsFunc(open, func(o slurm.Node) bool { return o.Name == n }) || slices.Contains(allowed, n) {
			nodes = append(nodes, n)
		}
	}
	return nodes, len(nodes) > 0
}

// waits says why a pending job waits for a full group's nodes.
func (r nodeRoom) waits(gn groupNodes) string {
	return fmt.Sprintf("waits for room in %s: nodes in use %d, allowed %d, none of them usable by it",
		r.by.Limit, len(gn[r.by]), r.by.Nodes)
}
