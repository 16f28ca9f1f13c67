package daemon

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/slurm"
)

// suspendedJob is a bert job on node1's 8 GPUs that ran 10 minutes of its
// hour and has stood suspended for the last 20: Slurm keeps its GPUs and
// memory, frees its CPUs, and its time left is 50 minutes.
func suspendedJob() slurm.Job {
	j := heldJob(5, "bert", 1, 8)
	j.State, j.Held, j.User, j.QOS = slurm.StateSuspended, false, "alice", "shared"
	j.NodeList, j.GPUs, j.CPUs, j.MemMB, j.Billing = []string{"node1"}, 8, 16, 64000, 16
	j.Tag.Plan, j.Tag.Generation = "dp8.tp1.pp1.mb4.a1.z2", 1
	j.TimeLimit = time.Hour
	j.StartTime, j.SuspendTime, j.PreSuspend = t0.Add(-30*time.Minute), t0.Add(-20*time.Minute), 10*time.Minute
	return j
}

// A job an administrator suspended is left alone: not planned, restarted
// or shrunk, and listed with why. Its GPUs stay taken, and it counts
// against its group limits as Slurm counts it, with the time left of its
// limit as it stood at the suspension.
func TestCycleSuspendedJob(t *testing.T) {
	const why = "suspended (scontrol suspend, or Slurm's own suspend preemption or gang scheduling): keeps its GPUs and memory; planned again once resumed"
	for _, tc := range []struct {
		name    string
		grpGPUs int
		started []int
	}{
		// The held job goes to node2, never node1 under the suspended job.
		{"no limit", 0, []int{6}},
		// 8 GPUs allowed and the suspended job's 8 in use: it waits.
		{"group full", 8, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := labNodes(2)
			nodes[0].GPUsUsed, nodes[0].MemAllocMB = 8, 64000
			held := heldJob(6, "bert", 1, 8)
			held.QOS, held.User = "shared", "alice"
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Grp: slurm.GroupLimits{GPUs: tc.grpGPUs}}}}
			if tc.grpGPUs == 0 {
				limits = slurm.Limits{}
			}
			c := &limitsCluster{fakeCluster: &fakeCluster{nodes: nodes, jobs: []slurm.Job{suspendedJob(), held}}, limits: limits}
			rep, a, d := oneCycle(t, c, tc.started)
			for _, act := range a.got {
				if act.JobID == 5 {
					t.Errorf("an action for the suspended job: %+v", act)
				}
				if act.Kind == slurm.ActionStart && len(act.Nodes) > 0 && act.Nodes[0] != "node2" {
					t.Errorf("job %d started on %v, want node2", act.JobID, act.Nodes)
				}
			}
			if got := rep.Ignored[5]; got != why {
				t.Errorf("ignored[5] = %q, want %q", got, why)
			}
			// Still rubick's best-effort job in rubick_jobs, not a rigid one.
			if got := jobGauges(t, d.deps.Metrics)["SUSPENDED best-effort"]; got != 1 {
				t.Errorf("rubick_jobs{SUSPENDED,best-effort} = %v, want 1", got)
			}
		})
	}
}

// What a suspended job counts against its groups: all it holds, and its
// limit's minutes left as they were when it stopped (Slurm moves its end
// by the time it stands suspended).
func TestHoldsOfSuspendedJob(t *testing.T) {
	j := suspendedJob()
	want := slurm.GroupLimits{GPUs: 8, CPUs: 16, MemMB: 64000, Billing: 16, Jobs: 1,
		GPURunMins: 8 * 50, CPURunMins: 16 * 50, BillingRunMins: 16 * 50, MemRunMins: 64000 * 50, NodeRunMins: 50}
	if diff := cmp.Diff(want, holds(j, t0)); diff != "" {
		t.Errorf("suspended (-want +got):\n%s", diff)
	}
	// Resumed 5 minutes ago: 15 minutes run, 45 left.
	j.State, j.SuspendTime = slurm.StateRunning, t0.Add(-5*time.Minute)
	if got := holds(j, t0).GPURunMins; got != 8*45 {
		t.Errorf("resumed: %d GPU-minutes left, want %d", got, 8*45)
	}
}

// jobGauges reads rubick_jobs as "state class" -> value.
func jobGauges(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	return gauges(t, m, func(name string, labels map[string]string) string {
		if name != "rubick_jobs" {
			return ""
		}
		return labels["state"] + " " + labels["class"]
	})
}

// A job its user made not requeueable (scontrol update Requeue=0: Slurm
// lets them, 22.05 lab) could never be restarted: held, it is released on
// its own request; running, it runs on as it is, where a requeueable one
// of two hours would be grown onto the idle node.
func TestCycleNotRequeueable(t *testing.T) {
	const why = "not requeueable (scontrol update Requeue=0, or --no-requeue without FORCE_REQUEUE): runs on its own request; rubick reconfigures jobs by requeueing them"
	for _, requeue := range []bool{true, false} {
		t.Run(fmt.Sprintf("requeue=%v", requeue), func(t *testing.T) {
			held := heldJob(21, "bert", 1, 2)
			running := runningJob(22, "bert")
			running.NodeList, running.GPUsPerNode, running.GPUs, running.CPUs, running.Tag.Plan = []string{"node2"}, 2, 2, 8, "dp2.tp1.pp1.mb16.a1.z0"
			running.StartTime, running.Tag.Generation = t0.Add(-2*time.Hour), 1
			held.Requeue, running.Requeue = requeue, requeue
			nodes := labNodes(2)
			nodes[1].GPUsUsed, nodes[1].CPUsAlloc = 2, 8
			rep, a, _ := oneCycle(t, &fakeCluster{nodes: nodes, jobs: []slurm.Job{held, running}}, []int{21})
			var kinds []string
			for _, act := range a.got {
				kinds = append(kinds, fmt.Sprintf("%s %d %dx%d", act.Kind, act.JobID, act.NodeCount(), act.GPUsPerNode))
			}
			if !requeue {
				// 21 on its request, 22 untouched.
				if diff := cmp.Diff([]string{"start 21 1x2"}, kinds); diff != "" {
					t.Errorf("actions (-want +got):\n%s", diff)
				}
				for _, id := range []int{21, 22} {
					if rep.Ignored[id] != why {
						t.Errorf("ignored[%d] = %q, want %q", id, rep.Ignored[id], why)
					}
				}
				return
			}
			if !slices.ContainsFunc(kinds, func(k string) bool { return strings.HasPrefix(k, "restart 22") }) {
				t.Errorf("actions %v; want the requeueable running job restarted on more GPUs", kinds)
			}
		})
	}
}
