package policy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	pt "github.com/rubick-sched/rubick/policy/policytest"
)

// The queue baselines preempt best-effort jobs for a guaranteed one only
// when it starts on what they free in the same round: preempted for a job
// that then waits, they would restart and be preempted again, round after
// round.
//
// On two nodes of 8 GPUs, guaranteed r holds n0 for another hour and
// best-effort be 4 GPUs of n1 for another two. Guaranteed head, for 16
// GPUs, waits for both (two hours from now) with or without be. Guaranteed
// g, for 8 GPUs, fits on n1 only without be.
func TestQueuePreemptsOnlyForAStart(t *testing.T) {
	jobs := func(gLimit time.Duration, least policy.Size) []policy.Job {
		g := pt.NewJob("g", "small").GPUs(8).Guaranteed().TimeLimit(gLimit).SubmittedAt(50 * time.Minute).Obj()
		g.Min = least
		return []policy.Job{
			pt.NewJob("r", "small").GPUs(8).Guaranteed().TimeLimit(2*time.Hour).Running(dp(8, 32), time.Hour, pt.On("n0", 8)).Obj(),
			pt.NewJob("be", "small").GPUs(4).TimeLimit(3*time.Hour).Running(dp(4, 32), time.Hour, pt.On("n1", 4)).Obj(),
			pt.NewJob("head", "small").GPUs(16).Guaranteed().SubmittedAt(40 * time.Minute).Obj(),
			g,
		}
	}
	kept := outcome{policy.Keep, 0, policy.ReasonNoResources}
	held := map[string]outcome{
		"r":    {policy.Keep, 8, policy.ReasonUnchanged},
		"be":   {policy.Keep, 4, policy.ReasonUnchanged},
		"head": kept,
		"g":    kept,
	}
	started := func(reason policy.Reason) map[string]outcome {
		return map[string]outcome{
			"r":    {policy.Keep, 8, policy.ReasonUnchanged},
			"be":   {policy.Preempt, 0, policy.ReasonReclaimed},
			"head": kept,
			"g":    {policy.Start, 8, reason},
		}
	}
	// On two nodes of 16 GPUs, r holds n0 for another hour, and be and
	// be2 12 GPUs of n1 for good. head, for 4 GPUs on each of two nodes,
	// waits for r. g, for 8 GPUs, fits on n1 only without be; be2 would
	// still leave head 4 GPUs there.
	shared := func() []policy.Job {
		head := pt.NewJob("head", "small").GPUs(8).Guaranteed().SubmittedAt(40 * time.Minute).Obj()
		head.Request.Placement = model.Placement{4, 4}
		return []policy.Job{
			pt.NewJob("r", "small").GPUs(16).Guaranteed().TimeLimit(2*time.Hour).Running(dp(16, 32), time.Hour, pt.On("n0", 16)).Obj(),
			pt.NewJob("be", "small").GPUs(8).Running(dp(8, 32), 30*time.Minute, pt.On("n1", 8)).Obj(),
			pt.NewJob("be2", "small").GPUs(4).Running(dp(4, 32), time.Hour, pt.On("n1", 4)).Obj(),
			head,
			pt.NewJob("g", "small").GPUs(8).Guaranteed().TimeLimit(10 * time.Hour).SubmittedAt(50 * time.Minute).Obj(),
		}
	}
	sharedStarted := func(reason policy.Reason) map[string]outcome {
		return map[string]outcome{
			"r":    {policy.Keep, 16, policy.ReasonUnchanged},
			"be":   {policy.Preempt, 0, policy.ReasonReclaimed},
			"be2":  {policy.Keep, 4, policy.ReasonUnchanged},
			"head": kept,
			"g":    {policy.Start, 8, reason},
		}
	}
	for _, tc := range []struct {
		name   string
		policy string
		nodes  []policy.Node
		jobs   []policy.Job
		want   map[string]outcome
	}{
		// Backfilled for 10 hours on n1, g would delay head: it waits,
		// and be keeps running.
		{"delays the head/rubick-n", "rubick-n", pt.Cluster(2, 8), jobs(10*time.Hour, policy.Size{}), held},
		{"delays the head/rubick-e", "rubick-e", pt.Cluster(2, 8), jobs(10*time.Hour, policy.Size{}), held},
		// Without backfill nothing holds g back for head.
		{"delays the head/antman", "antman", pt.Cluster(2, 8), jobs(10*time.Hour, policy.Size{}), started(policy.ReasonSLO)},
		// Done within the hour, g leaves head's start alone.
		{"ends before the head/rubick-n", "rubick-n", pt.Cluster(2, 8), jobs(time.Hour, policy.Size{}), started(policy.ReasonBackfill)},
		{"ends before the head/rubick-e", "rubick-e", pt.Cluster(2, 8), jobs(time.Hour, policy.Size{}), started(policy.ReasonBackfill)},
		{"ends before the head/antman", "antman", pt.Cluster(2, 8), jobs(time.Hour, policy.Size{}), started(policy.ReasonSLO)},
		// A minimum above what g asks for holds it whatever is free.
		{"below its minimum/rubick-n", "rubick-n", pt.Cluster(2, 8), jobs(time.Hour, policy.Size{CPUs: 80}), held},
		{"below its minimum/rubick-e", "rubick-e", pt.Cluster(2, 8), jobs(time.Hour, policy.Size{CPUs: 80}), held},
		{"below its minimum/antman", "antman", pt.Cluster(2, 8), jobs(time.Hour, policy.Size{CPUs: 80}), held},
		// What be frees counts at head's start too: g leaves head its room.
		{"leaves the head its room/rubick-n", "rubick-n", pt.Cluster(2, 16), shared(), sharedStarted(policy.ReasonBackfill)},
		{"leaves the head its room/rubick-e", "rubick-e", pt.Cluster(2, 16), shared(), sharedStarted(policy.ReasonBackfill)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := snap(t, time.Hour, tc.nodes, nil, tc.jobs...)
			if diff := cmp.Diff(tc.want, outcomes(decide(t, tc.policy, s))); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPropertyQueuePreemptsForAStart checks that the queue baselines
// preempt a best-effort job only for a guaranteed job they start.
func TestPropertyQueuePreemptsForAStart(t *testing.T) {
	for _, name := range []string{"antman", "rubick-e", "rubick-n"} {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				nodes, jobs, tenants := genInput(t)
				s, err := policy.NewSnapshot(pt.Epoch.Add(10*time.Hour), nodes, jobs, tenants, pt.Models(), 260*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				p, err := policy.New(name, policy.DefaultConfig())
				if err != nil {
					t.Fatal(err)
				}
				plan, err := p.Decide(context.Background(), s)
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range plan.Actions {
					if a.Kind != policy.Preempt || a.Reason != policy.ReasonReclaimed {
						continue
					}
					id, ok := strings.CutPrefix(a.Detail, "by guaranteed ")
					if g, _ := plan.Action(id); !ok || g.Kind != policy.Start {
						t.Fatalf("%s preempted (%s), and %s is to %s (%s %s)", a.JobID, a.Detail, id, g.Kind, g.Reason, g.Detail)
					}
				}
			})
		})
	}
}

// Where others hold every GPU (rubickd then reports nodes of 0 GPUs), no
// policy starts a job: not on an allocation without GPUs, nor by dividing
// by the GPUs it gets.
func TestNoGPUsNoStart(t *testing.T) {
	nodes := pt.Cluster(2, 0)
	for i := range nodes {
		nodes[i].CPUs = 96
	}
	kept := outcome{policy.Keep, 0, policy.ReasonNoResources}
	want := map[string]outcome{"be": kept, "g": kept}
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			s := snap(t, time.Hour, nodes, []policy.Tenant{{Name: "default", GPUQuota: 8}},
				pt.NewJob("be", "small").GPUs(2).Obj(),
				pt.NewJob("g", "small").GPUs(1).Guaranteed().Obj())
			if diff := cmp.Diff(want, outcomes(decide(t, name, s))); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
		})
	}
}

// synergy never gives a job more CPUs than its nodes have free: where they
// have fewer per GPU than the least it tunes a job to (MinCPUsPerGPU, or
// the job's --cpus-per-gpu), the job waits, even if it asked for fewer.
// One node of 8 GPUs and 32 CPUs, 4 GPUs and 29 CPUs of which are held: 3
// CPUs free.
func TestSynergyCPUsWithinFree(t *testing.T) {
	type got struct {
		Outcome outcome
		CPUs    int
	}
	for _, tc := range []struct {
		name       string
		minCPG     int
		gpus, cpus int
		want       got
	}{
		{"a CPU per GPU, fewer free", 1, 4, 2, got{outcome{policy.Keep, 0, policy.ReasonNoResources}, 0}},
		{"a CPU per GPU, enough free", 1, 2, 1, got{outcome{policy.Start, 2, policy.ReasonFIFO}, 2}},
		{"two CPUs per GPU, fewer free", 2, 2, 2, got{outcome{policy.Keep, 0, policy.ReasonNoResources}, 0}},
		{"two CPUs per GPU, enough free", 2, 1, 1, got{outcome{policy.Start, 1, policy.ReasonFIFO}, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := pt.Cluster(1, 8)
			nodes[0].CPUs = 32
			held := policy.NodeAlloc{Node: "n0", GPUs: 4, CPUs: 29, MemGB: 64}
			plan, _, err := pt.Models()["small"].BestPlan(model.Resources{Placement: model.Placement{4}, CPUs: 29, HostMemGB: 64}, nil)
			if err != nil {
				t.Fatal(err)
			}
			s := snap(t, time.Hour, nodes, nil,
				pt.NewJob("busy", "small").GPUs(4).CPUs(29).Running(plan, time.Hour, held).Obj(),
				pt.NewJob("a", "small").GPUs(tc.gpus).CPUs(tc.cpus).SubmittedAt(time.Minute).Obj())
			cfg := policy.DefaultConfig()
			cfg.MinCPUsPerGPU = tc.minCPG
			pol, err := policy.New("synergy", cfg)
			if err != nil {
				t.Fatal(err)
			}
			p, err := pol.Decide(context.Background(), s)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := p.Action("a")
			g := got{outcomes(p)["a"], allocCPUs(a)}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("a (-want +got):\n%s", diff)
			}
		})
	}
}

// The queue policies that run a job on its requested CPUs give it no fewer
// than its own CPUs per GPU (--cpus-per-gpu), which Slurm allocates at
// any size: a request's ratio below it is raised.
func TestQueueKeepsCPUsPerGPU(t *testing.T) {
	for _, name := range []string{"fifo", "antman", "rubick-e", "rubick-n"} {
		t.Run(name, func(t *testing.T) {
			j := pt.NewJob("a", "small").GPUs(2).CPUs(2).Obj()
			j.CPUsPerGPU = 4
			a, _ := decide(t, name, snap(t, time.Hour, pt.Cluster(1, 8), nil, j)).Action("a")
			if cpus := allocCPUs(a); a.Kind != policy.Start || cpus != 8 {
				t.Errorf("a: %s with %d CPUs, want a start with 8 (4 per GPU)", a.Kind, cpus)
			}
		})
	}
}

// allocCPUs are the CPUs of a's allocation.
func allocCPUs(a policy.Action) int {
	n := 0
	for _, al := range a.Alloc {
		n += al.CPUs
	}
	return n
}
