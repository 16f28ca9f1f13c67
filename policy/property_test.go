package policy_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	pt "github.com/rubick-sched/rubick/policy/policytest"
)

// genInput draws a cluster with running and queued jobs that respects
// capacity: running jobs hold their request, packed, with the fake's best plan.
func genInput(t *rapid.T) (nodes []policy.Node, jobs []policy.Job, tenants []policy.Tenant) {
	nNodes := rapid.IntRange(1, 4).Draw(t, "nodes")
	perNode := rapid.SampledFrom([]int{4, 8}).Draw(t, "gpusPerNode")
	nodes = pt.Cluster(nNodes, perNode)
	free := make([]int, nNodes)
	for i := range free {
		free[i] = perNode
	}
	models := pt.Models()
	nJobs := rapid.IntRange(0, 14).Draw(t, "jobs")
	for i := range nJobs {
		m := rapid.SampledFrom([]string{"small", "wide", "big"}).Draw(t, "model")
		spec := pt.Specs()[m]
		var sizes []int
		for _, g := range []int{1, 2, 4, 8, 16} {
			if spec.GlobalBatch%g == 0 {
				sizes = append(sizes, g)
			}
		}
		g := rapid.SampledFrom(sizes).Draw(t, "gpus")
		b := pt.NewJob(fmt.Sprintf("j%02d", i), m).GPUs(g).
			SubmittedAt(time.Duration(rapid.IntRange(0, 600).Draw(t, "submitMin")) * time.Minute).
			TimeLimit(time.Duration(rapid.IntRange(0, 300).Draw(t, "limitMin")) * time.Minute)
		if rapid.Bool().Draw(t, "guaranteed") {
			b.Guaranteed()
		}
		b.FairShare(rapid.SampledFrom([]float64{0, 0.25, 0.5, 1}).Draw(t, "fairShare"))
		b.Priority(rapid.SampledFrom([]float64{0, 1, 5000, 5000, 100000}).Draw(t, "priority"), rapid.IntRange(0, 2).Draw(t, "tier"))
		running := false
		if rapid.Bool().Draw(t, "running") {
			var alloc []policy.NodeAlloc
			left := g
			for n := range free {
				take := min(free[n], left)
				if take > 0 {
					alloc = append(alloc, pt.On(nodes[n].Name, take))
					left -= take
				}
			}
			if left == 0 {
				var pl model.Placement
				for _, a := range alloc {
					pl = append(pl, a.GPUs)
				}
				plan, _, err := models[m].BestPlan(model.Resources{Placement: pl, CPUs: 8 * g, HostMemGB: 1600 * float64(len(pl))}, nil)
				if err == nil {
					for _, a := range alloc {
						n, _ := nodeIndex(nodes, a.Node)
						free[n] -= a.GPUs
					}
					b.Running(plan, time.Duration(rapid.IntRange(1, 600).Draw(t, "runMin"))*time.Minute, alloc...).
						Reconfigs(rapid.IntRange(0, 3).Draw(t, "reconfigs"))
					running = true
				}
			}
		}
		j := b.Obj()
		if rapid.IntRange(0, 3).Draw(t, "hasMin") == 0 {
			// A Slurm minimum; a running job holds at least its own.
			hi := 2 * g
			if running {
				hi = g
			}
			j.Min = policy.Size{GPUs: rapid.IntRange(0, hi).Draw(t, "minGPUs"), CPUs: rapid.IntRange(0, 8*hi).Draw(t, "minCPUs"),
				MemGB: float64(rapid.IntRange(0, 16*hi).Draw(t, "minMemGB"))}
			if !running {
				j.Min.Nodes = rapid.IntRange(0, 2).Draw(t, "minNodes")
			}
		}
		if !running && rapid.IntRange(0, 3).Draw(t, "hasCPUsPerGPU") == 0 {
			// --cpus-per-gpu, which its request's CPUs carry.
			j.CPUsPerGPU = rapid.IntRange(1, 12).Draw(t, "cpusPerGPU")
			j.Request.CPUs = max(j.Request.CPUs, j.CPUsPerGPU*j.Request.GPUs)
		}
		if !running && rapid.IntRange(0, 3).Draw(t, "hasQuota") == 0 {
			q := &policy.NodeQuota{New: rapid.IntRange(0, 2).Draw(t, "quotaNew")}
			for _, n := range nodes {
				if rapid.Bool().Draw(t, "shared") {
					q.Shared = append(q.Shared, n.Name)
				}
			}
			j.NodeQuota = q
		}
		jobs = append(jobs, j)
	}
	tenants = []policy.Tenant{{Name: "default", GPUQuota: rapid.IntRange(0, nNodes*perNode).Draw(t, "quota")}}
	return nodes, jobs, tenants
}

func nodeIndex(nodes []policy.Node, name string) (int, bool) {
	for i, n := range nodes {
		if n.Name == name {
			return i, true
		}
	}
	return 0, false
}

func predictTput(est policy.Estimator, p model.Plan, pl model.Placement, cpus int) float64 {
	b, err := est.Predict(p, model.Resources{Placement: pl, CPUs: cpus, HostMemGB: 1600 * float64(len(pl))})
	if err != nil || b.Iter <= 0 {
		return 0
	}
	return float64(est.Spec().GlobalBatch) / b.Iter
}

// checkPlan asserts the invariants every policy's plan keeps.
func checkPlan(t *rapid.T, name string, s *policy.Snapshot, p policy.Plan) {
	if len(p.Actions) != len(s.Jobs) {
		t.Fatalf("%s: %d actions for %d jobs", name, len(p.Actions), len(s.Jobs))
	}
	gpus := map[string]int{}
	cpus := map[string]int{}
	mem := map[string]float64{}
	for i, a := range p.Actions {
		j := &s.Jobs[i]
		if a.JobID != j.ID {
			t.Fatalf("%s: action %d is for %s, want %s (job order)", name, i, a.JobID, j.ID)
		}
		est := s.Models[j.Model]
		switch a.Kind {
		case policy.Keep:
			if !cmp.Equal(a.Alloc, j.Alloc, cmpopts.EquateEmpty()) {
				t.Fatalf("%s: keep of %s changes its allocation %v -> %v", name, j.ID, j.Alloc, a.Alloc)
			}
		case policy.Preempt:
			if !j.Running() {
				t.Fatalf("%s: preempts queued job %s", name, j.ID)
			}
		case policy.Start, policy.Shrink, policy.Restart:
			if (a.Kind == policy.Start) == j.Running() {
				t.Fatalf("%s: %s of %s with running=%v", name, a.Kind, j.ID, j.Running())
			}
			pl := a.Placement()
			if a.Plan.GPUs() != pl.GPUs() || pl.GPUs() == 0 {
				t.Fatalf("%s: %s runs %s (%d GPUs) on %s", name, j.ID, a.Plan, a.Plan.GPUs(), pl)
			}
			if got := a.Plan.DP * a.Plan.MicroBatch * a.Plan.Accum; got != est.Spec().GlobalBatch {
				t.Fatalf("%s: %s plan %s has global batch %d, want %d", name, j.ID, a.Plan, got, est.Spec().GlobalBatch)
			}
			r := model.Resources{Placement: pl, CPUs: a.Alloc[0].CPUs * len(a.Alloc), HostMemGB: 1600 * float64(len(pl))}
			if _, err := est.Predict(a.Plan, r); err != nil {
				t.Fatalf("%s: %s plan %s invalid on %s: %v", name, j.ID, a.Plan, pl, err)
			}
			if a.Plan != j.Request.Plan {
				if err := est.Feasible(a.Plan, r); err != nil {
					t.Fatalf("%s: %s chosen plan %s on %s: %v", name, j.ID, a.Plan, pl, err)
				}
			}
			var held policy.Size
			outside := 0
			for _, n := range a.Alloc {
				if n.CPUs < j.CPUsPerGPU*n.GPUs {
					t.Fatalf("%s: %s %s on %v, below its %d CPUs per GPU", name, a.Kind, j.ID, a.Alloc, j.CPUsPerGPU)
				}
				held.GPUs, held.CPUs, held.MemGB = held.GPUs+n.GPUs, held.CPUs+n.CPUs, held.MemGB+n.MemGB
				if q := j.NodeQuota; q != nil && !slices.Contains(q.Shared, n.Node) {
					outside++
				}
			}
			if m := j.Min; held.GPUs < m.GPUs || len(a.Alloc) < m.Nodes || held.CPUs < m.CPUs || held.MemGB < m.MemGB-1e-9 {
				t.Fatalf("%s: %s %s on %v, below its minimum %v", name, a.Kind, j.ID, a.Alloc, m)
			}
			if q := j.NodeQuota; q != nil && outside > q.New {
				t.Fatalf("%s: %s on %v, %d nodes outside %v, want %d at most", name, j.ID, a.Alloc, outside, q.Shared, q.New)
			}
		default:
			t.Fatalf("%s: unknown kind %q", name, a.Kind)
		}
		if a.Kind != policy.Preempt {
			for _, n := range a.Alloc {
				gpus[n.Node] += n.GPUs
				cpus[n.Node] += n.CPUs
				mem[n.Node] += n.MemGB
			}
		}
	}
	for _, n := range s.Nodes {
		if gpus[n.Name] > n.GPUs || cpus[n.Name] > n.CPUs || mem[n.Name] > n.MemGB+1e-6 {
			t.Fatalf("%s: node %s over capacity: %d/%d GPUs %d/%d CPUs %.0f/%.0f GB", name, n.Name,
				gpus[n.Name], n.GPUs, cpus[n.Name], n.CPUs, mem[n.Name], n.MemGB)
		}
	}
}

func TestPropertiesEveryPolicy(t *testing.T) {
	type run struct {
		name string
		cfg  policy.Config
	}
	var runs []run
	for _, name := range policy.Names() {
		runs = append(runs, run{name, policy.DefaultConfig()})
	}
	fair := policy.DefaultConfig()
	fair.BestEffortOrder = policy.OrderFairShare
	prio := policy.DefaultConfig()
	prio.BestEffortOrder, prio.GuaranteedOrder = policy.OrderPriority, policy.OrderPriority
	runs = append(runs, run{"rubick", fair}, run{"rubick", prio})
	for _, r := range runs {
		name := r.name
		t.Run(name+"/"+r.cfg.BestEffortOrder, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				nodes, jobs, tenants := genInput(t)
				s, err := policy.NewSnapshot(pt.Epoch.Add(10*time.Hour), nodes, jobs, tenants, pt.Models(), 260*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				before := slices.Clone(s.Jobs)
				p, _ := policy.New(name, r.cfg)
				plan, err := p.Decide(context.Background(), s)
				if err != nil {
					t.Fatal(err)
				}
				checkPlan(t, name, s, plan)
				if name == "sia" {
					checkSiaShapes(t, s, plan)
				}
				if diff := cmp.Diff(before, s.Jobs, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("Decide modified the snapshot:\n%s", diff)
				}
				// Determinism: a fresh policy on the same jobs in another order.
				shuffled := slices.Clone(jobs)
				slices.Reverse(shuffled)
				s2, err := policy.NewSnapshot(s.Now, nodes, shuffled, tenants, pt.Models(), 260*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				p2, _ := policy.New(name, r.cfg)
				plan2, err := p2.Decide(context.Background(), s2)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(plan, plan2); diff != "" {
					t.Fatalf("same snapshot, different plans:\n%s", diff)
				}
				// And the same instance again, with its caches warm.
				plan3, _ := p.Decide(context.Background(), s)
				if diff := cmp.Diff(plan, plan3); diff != "" {
					t.Fatalf("second Decide differs:\n%s", diff)
				}
			})
		})
	}
}

// TestPropertyGuaranteedKeepsSLO checks that rubick never preempts an
// admitted guaranteed job nor moves it below its requested throughput.
func TestPropertyGuaranteedKeepsSLO(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes, jobs, tenants := genInput(t)
		tenants[0].GPUQuota = 1 << 20
		s, err := policy.NewSnapshot(pt.Epoch.Add(10*time.Hour), nodes, jobs, tenants, pt.Models(), 260*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := policy.New("rubick", policy.DefaultConfig())
		plan, err := p.Decide(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range plan.Actions {
			j := &s.Jobs[i]
			if !j.Guaranteed || !j.Running() {
				continue
			}
			if a.Kind == policy.Preempt {
				t.Fatalf("guaranteed job %s preempted", j.ID)
			}
			if a.Kind == policy.Keep {
				continue
			}
			est := s.Models[j.Model]
			req := policy.PackedPlacement(j.Request.GPUs, nodes[0].GPUs)
			want := predictTput(est, j.Request.Plan, req, j.Request.CPUs)
			got := a.Throughput
			same := slices.Equal(a.Placement().Canonical(), req.Canonical())
			if !same && got < want {
				t.Fatalf("guaranteed job %s moved to %s at %.3g samples/s, below its request's %.3g", j.ID, a.Placement(), got, want)
			}
		}
	})
}

// checkSiaShapes asserts Sia's configuration set: one node with a power of
// two GPUs or whole nodes, unless the job asked for that shape itself.
func checkSiaShapes(t *rapid.T, s *policy.Snapshot, p policy.Plan) {
	for i, a := range p.Actions {
		if a.Kind != policy.Start && a.Kind != policy.Restart && a.Kind != policy.Shrink {
			continue
		}
		pl := a.Placement()
		j := &s.Jobs[i]
		if slices.Equal(pl.Canonical(), policy.PackedPlacement(j.Request.GPUs, s.Nodes[0].GPUs).Canonical()) {
			continue
		}
		ok := len(pl) == 1 && pl[0]&(pl[0]-1) == 0
		if len(pl) > 1 {
			ok = true
			for k, g := range pl {
				n, _ := s.NodeIndex(a.Alloc[k].Node)
				if g != s.Nodes[n].GPUs {
					ok = false
				}
			}
		}
		if !ok {
			t.Fatalf("sia placed %s on %s, outside its configuration set", j.ID, pl)
		}
	}
}
