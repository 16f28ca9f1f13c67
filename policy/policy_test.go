package policy_test

import (
	stdcmp "cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	pt "github.com/rubick-sched/rubick/policy/policytest"
)

// outcome is the part of an action a table test pins down.
type outcome struct {
	Kind   policy.Kind
	GPUs   int
	Reason policy.Reason
}

func outcomes(p policy.Plan) map[string]outcome {
	out := map[string]outcome{}
	for _, a := range p.Actions {
		g := 0
		for _, n := range a.Alloc {
			g += n.GPUs
		}
		out[a.JobID] = outcome{Kind: a.Kind, GPUs: g, Reason: a.Reason}
	}
	return out
}

func snap(t *testing.T, now time.Duration, nodes []policy.Node, tenants []policy.Tenant, jobs ...policy.Job) *policy.Snapshot {
	t.Helper()
	s, err := policy.NewSnapshot(pt.Epoch.Add(now), nodes, jobs, tenants, pt.Models(), 260*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func dp(g, batch int) model.Plan {
	return model.Plan{DP: g, TP: 1, PP: 1, MicroBatch: batch / g, Accum: 1}
}

// fairShare orders best-effort jobs by their fair-share factor.
func fairShare(c *policy.Config) { c.BestEffortOrder = policy.OrderFairShare }

// slurmPriority orders best-effort jobs by their Slurm priority.
func slurmPriority(c *policy.Config) { c.BestEffortOrder = policy.OrderPriority }

// byPriority moves the jobs' fair-share factors to their priorities (x
// 10000, as a PriorityWeightFairShare of 10000 would), so the fair-share
// cases run in priority order too.
func byPriority(jobs []policy.Job) []policy.Job {
	for i := range jobs {
		jobs[i].Priority, jobs[i].FairShare = 10000*jobs[i].FairShare, 0
	}
	return jobs
}

// twoForTwoGPUs is a young job on 6 of 8 GPUs and two queued ones, a (big,
// factor 0.2) and b (small, 0.9), for the 2 left.
func twoForTwoGPUs() []policy.Job {
	return []policy.Job{
		pt.NewJob("r", "small").GPUs(6).Running(dp(6, 30), 20*time.Minute, pt.On("n0", 6)).Obj(),
		pt.NewJob("a", "big").GPUs(4).SubmittedAt(time.Hour).FairShare(0.2).Obj(),
		pt.NewJob("b", "small").GPUs(1).SubmittedAt(time.Hour).FairShare(0.9).Obj(),
	}
}

// holderAndQueued is hi, asking for req GPUs and running on all 8 for 3 h
// with factor hiFS, and lo, queued for 2 with factor loFS.
func holderAndQueued(req int, hiFS, loFS float64) []policy.Job {
	return []policy.Job{
		pt.NewJob("hi", "wide").GPUs(req).Running(dp(8, 16), 3*time.Hour, pt.On("n0", 8)).FairShare(hiFS).Obj(),
		pt.NewJob("lo", "small").GPUs(2).SubmittedAt(3 * time.Hour).FairShare(loFS).Obj(),
	}
}

// oneGPUFor is queued, behind a young job r on 7 of 8 GPUs: one GPU free
// for the queued jobs, and no victim.
func oneGPUFor(queued ...policy.Job) []policy.Job {
	return append([]policy.Job{pt.NewJob("r", "small").GPUs(7).Running(dp(7, 28), 20*time.Minute, pt.On("n0", 7)).Obj()}, queued...)
}

// withMemGB sets j's requested host memory per node.
func withMemGB(j policy.Job, gb float64) policy.Job {
	j.Request.MemGB = gb
	return j
}

func TestDecide(t *testing.T) {
	// One GPU free and two jobs of one model for it, the longer one
	// submitted first: by slope alone they tie and it goes first.
	longAndShort := oneGPUFor(pt.NewJob("long", "small").GPUs(2).TimeLimit(5*time.Hour).SubmittedAt(time.Minute).Obj(),
		pt.NewJob("short", "small").GPUs(2).TimeLimit(10*time.Minute).SubmittedAt(2*time.Minute).Obj())
	startsOne := func(first, second string) map[string]outcome {
		return map[string]outcome{
			"r":    {policy.Keep, 7, policy.ReasonPenalty},
			first:  {policy.Start, 1, policy.ReasonSlope},
			second: {policy.Keep, 0, policy.ReasonNoResources},
		}
	}
	shortFirst, longFirst := startsOne("short", "long"), startsOne("long", "short")
	tests := map[string]struct {
		policy  string
		config  func(*policy.Config) // changes to DefaultConfig, if any
		now     time.Duration
		nodes   []policy.Node
		tenants []policy.Tenant
		jobs    []policy.Job
		want    map[string]outcome
	}{
		"fifo backfills a job that ends before the head can start": {
			policy: "fifo", now: 10 * time.Minute, nodes: pt.Cluster(2, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(4).TimeLimit(time.Hour).Running(dp(4, 32), 10*time.Minute, pt.On("n0", 4)).Obj(),
				pt.NewJob("a", "small").GPUs(16).Plan(dp(16, 32)).SubmittedAt(time.Minute).Obj(),
				pt.NewJob("b", "small").GPUs(4).TimeLimit(30 * time.Minute).SubmittedAt(2 * time.Minute).Obj(),
				pt.NewJob("c", "small").GPUs(4).TimeLimit(2 * time.Hour).SubmittedAt(3 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"r": {policy.Keep, 4, policy.ReasonUnchanged},
				"a": {policy.Keep, 0, policy.ReasonNoResources},
				"b": {policy.Start, 4, policy.ReasonBackfill},
				"c": {policy.Keep, 0, policy.ReasonNoResources},
			},
		},
		"fifo backfills two jobs only while together they leave the head its room": {
			// r frees 4 GPUs on each node at 1 h, when either node can
			// host a; b takes one node's room, so c cannot take the other's.
			policy: "fifo", now: 10 * time.Minute, nodes: pt.Cluster(2, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(8).TimeLimit(time.Hour).Running(dp(8, 32), 10*time.Minute, pt.On("n0", 4), pt.On("n1", 4)).Obj(),
				pt.NewJob("a", "small").GPUs(8).SubmittedAt(time.Minute).Obj(),
				pt.NewJob("b", "small").GPUs(4).TimeLimit(5 * time.Hour).SubmittedAt(2 * time.Minute).Obj(),
				pt.NewJob("c", "small").GPUs(4).TimeLimit(5 * time.Hour).SubmittedAt(3 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"r": {policy.Keep, 8, policy.ReasonUnchanged},
				"a": {policy.Keep, 0, policy.ReasonNoResources},
				"b": {policy.Start, 4, policy.ReasonBackfill},
				"c": {policy.Keep, 0, policy.ReasonNoResources},
			},
		},
		"fifo backfills no job that takes the CPUs the head needs at its start": {
			// r frees its 4 GPUs at 1 h, when a can start on 6; b, on 2
			// GPUs to 5 h, leaves a its GPUs but 36 of the 48 CPUs it asks.
			policy: "fifo", now: 10 * time.Minute, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(4).TimeLimit(time.Hour).Running(dp(4, 32), 10*time.Minute, pt.On("n0", 4)).Obj(),
				pt.NewJob("a", "small").GPUs(6).SubmittedAt(time.Minute).Obj(),
				pt.NewJob("b", "small").GPUs(2).CPUs(60).TimeLimit(5 * time.Hour).SubmittedAt(2 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"r": {policy.Keep, 4, policy.ReasonUnchanged},
				"a": {policy.Keep, 0, policy.ReasonNoResources},
				"b": {policy.Keep, 0, policy.ReasonNoResources},
			},
		},
		"fifo backfills no job that takes the host memory the head needs at its start": {
			// As above with memory: b's 1,520 GB leave a 80 of its 96.
			policy: "fifo", now: 10 * time.Minute, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(4).TimeLimit(time.Hour).Running(dp(4, 32), 10*time.Minute, pt.On("n0", 4)).Obj(),
				pt.NewJob("a", "small").GPUs(6).SubmittedAt(time.Minute).Obj(),
				withMemGB(pt.NewJob("b", "small").GPUs(2).TimeLimit(5*time.Hour).SubmittedAt(2*time.Minute).Obj(), 1520),
			},
			want: map[string]outcome{
				"r": {policy.Keep, 4, policy.ReasonUnchanged},
				"a": {policy.Keep, 0, policy.ReasonNoResources},
				"b": {policy.Keep, 0, policy.ReasonNoResources},
			},
		},
		"fifo backfills a job that leaves the head its GPUs, CPUs and memory": {
			policy: "fifo", now: 10 * time.Minute, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(4).TimeLimit(time.Hour).Running(dp(4, 32), 10*time.Minute, pt.On("n0", 4)).Obj(),
				pt.NewJob("a", "small").GPUs(6).SubmittedAt(time.Minute).Obj(),
				withMemGB(pt.NewJob("b", "small").GPUs(2).CPUs(48).TimeLimit(5*time.Hour).SubmittedAt(2*time.Minute).Obj(), 1500),
			},
			want: map[string]outcome{
				"r": {policy.Keep, 4, policy.ReasonUnchanged},
				"a": {policy.Keep, 0, policy.ReasonNoResources},
				"b": {policy.Start, 2, policy.ReasonBackfill},
			},
		},
		"fifo starts in submission order on the request": {
			policy: "fifo", nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("a", "small").GPUs(4).Obj(),
				pt.NewJob("b", "small").GPUs(8).SubmittedAt(time.Second).Obj(),
				pt.NewJob("c", "small").GPUs(2).SubmittedAt(2 * time.Second).Obj(),
			},
			want: map[string]outcome{
				"a": {policy.Start, 4, policy.ReasonFIFO},
				"b": {policy.Keep, 0, policy.ReasonNoResources},
				"c": {policy.Start, 2, policy.ReasonBackfill},
			},
		},
		"rubick scales a lone job up on an idle node": {
			policy: "rubick", nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{pt.NewJob("a", "small").GPUs(1).Obj()},
			want: map[string]outcome{"a": {policy.Start, 8, policy.ReasonSlope}},
		},
		"rubick starts a job below its request rather than queue it": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(6).Running(dp(2, 32), 30*time.Minute, pt.On("n0", 6)).Obj(),
				pt.NewJob("a", "small").GPUs(8).SubmittedAt(50 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"r": {policy.Keep, 6, policy.ReasonPenalty},
				"a": {policy.Start, 2, policy.ReasonSlope},
			},
		},
		"rubick shrinks a best-effort job for a guaranteed one": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(1, 8),
			tenants: []policy.Tenant{{Name: "default", GPUQuota: 8}},
			jobs: []policy.Job{
				pt.NewJob("be", "small").GPUs(8).Running(dp(8, 32), 10*time.Minute, pt.On("n0", 8)).Obj(),
				pt.NewJob("g", "small").GPUs(4).Guaranteed().SubmittedAt(59 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"be": {policy.Shrink, 4, policy.ReasonReclaimed},
				"g":  {policy.Start, 4, policy.ReasonSLO},
			},
		},
		"rubick preempts a best-effort job that would keep less than ReclaimKeep": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(1, 8),
			// dp4 keeps about 60 % of dp8's throughput.
			config:  func(c *policy.Config) { c.ReclaimKeep = 0.9 },
			tenants: []policy.Tenant{{Name: "default", GPUQuota: 8}},
			jobs: []policy.Job{
				pt.NewJob("be", "small").GPUs(8).Running(dp(8, 32), 10*time.Minute, pt.On("n0", 8)).Obj(),
				pt.NewJob("g", "small").GPUs(4).Guaranteed().SubmittedAt(59 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"be": {policy.Preempt, 0, policy.ReasonReclaimed},
				"g":  {policy.Start, 8, policy.ReasonSLO}, // and grows into the rest
			},
		},
		"rubick keeps a guaranteed job over its tenant's quota queued": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(2, 8),
			tenants: []policy.Tenant{{Name: "default", GPUQuota: 4}},
			jobs: []policy.Job{
				pt.NewJob("g1", "small").GPUs(4).Guaranteed().Running(dp(4, 32), 10*time.Minute, pt.On("n0", 4)).Obj(),
				pt.NewJob("g2", "small").GPUs(4).Guaranteed().SubmittedAt(59 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"g1": {policy.Keep, 4, policy.ReasonPenalty},
				"g2": {policy.Keep, 0, policy.ReasonQuota},
			},
		},
		"rubick admits the guaranteed job with the shortest time limit first": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(2, 8),
			tenants: []policy.Tenant{{Name: "default", GPUQuota: 4}},
			jobs: []policy.Job{
				pt.NewJob("long", "small").GPUs(4).Guaranteed().TimeLimit(5 * time.Hour).SubmittedAt(10 * time.Minute).Obj(),
				pt.NewJob("short", "small").GPUs(4).Guaranteed().TimeLimit(time.Hour).SubmittedAt(20 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"long":  {policy.Keep, 0, policy.ReasonQuota},
				"short": {policy.Start, 8, policy.ReasonSLO},
			},
		},
		// The longer job must start within 20 minutes for its --deadline.
		"rubick admits the guaranteed job near its deadline first": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(2, 8),
			tenants: []policy.Tenant{{Name: "default", GPUQuota: 4}},
			jobs: []policy.Job{
				pt.NewJob("long", "small").GPUs(4).Guaranteed().TimeLimit(5 * time.Hour).SubmittedAt(10 * time.Minute).StartBy(80 * time.Minute).Obj(),
				pt.NewJob("short", "small").GPUs(4).Guaranteed().TimeLimit(time.Hour).SubmittedAt(20 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"long":  {policy.Start, 8, policy.ReasonSLO},
				"short": {policy.Keep, 0, policy.ReasonQuota},
			},
		},
		"rubick admits a guaranteed job without a time limit after those with one": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(2, 8),
			tenants: []policy.Tenant{{Name: "default", GPUQuota: 4}},
			jobs: []policy.Job{
				pt.NewJob("unknown", "small").GPUs(4).Guaranteed().SubmittedAt(10 * time.Minute).Obj(),
				pt.NewJob("known", "small").GPUs(4).Guaranteed().TimeLimit(20 * time.Hour).SubmittedAt(20 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"unknown": {policy.Keep, 0, policy.ReasonQuota},
				"known":   {policy.Start, 8, policy.ReasonSLO},
			},
		},
		"rubick admits a guaranteed job queued past GuaranteedAge first": {
			policy: "rubick", now: 9 * time.Hour, nodes: pt.Cluster(2, 8),
			tenants: []policy.Tenant{{Name: "default", GPUQuota: 4}},
			jobs: []policy.Job{
				pt.NewJob("old", "small").GPUs(4).Guaranteed().TimeLimit(5 * time.Hour).Obj(),
				pt.NewJob("young", "small").GPUs(4).Guaranteed().TimeLimit(time.Hour).SubmittedAt(8*time.Hour + 30*time.Minute).Obj(),
			},
			want: map[string]outcome{
				"old":   {policy.Start, 8, policy.ReasonSLO},
				"young": {policy.Keep, 0, policy.ReasonQuota},
			},
		},
		"rubick admits guaranteed jobs in submission order when configured": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(2, 8),
			config:  func(c *policy.Config) { c.GuaranteedOrder = policy.OrderSubmit },
			tenants: []policy.Tenant{{Name: "default", GPUQuota: 4}},
			jobs: []policy.Job{
				pt.NewJob("long", "small").GPUs(4).Guaranteed().TimeLimit(5 * time.Hour).SubmittedAt(10 * time.Minute).Obj(),
				pt.NewJob("short", "small").GPUs(4).Guaranteed().TimeLimit(time.Hour).SubmittedAt(20 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"long":  {policy.Start, 8, policy.ReasonSLO},
				"short": {policy.Keep, 0, policy.ReasonQuota},
			},
		},
		// short would go first by time limit, long by submission.
		"rubick admits guaranteed jobs by Slurm priority when configured": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(2, 8),
			config:  func(c *policy.Config) { c.GuaranteedOrder = policy.OrderPriority },
			tenants: []policy.Tenant{{Name: "default", GPUQuota: 4}},
			jobs: []policy.Job{
				pt.NewJob("long", "small").GPUs(4).Guaranteed().TimeLimit(5*time.Hour).SubmittedAt(10*time.Minute).Priority(100, 0).Obj(),
				pt.NewJob("short", "small").GPUs(4).Guaranteed().TimeLimit(time.Hour).SubmittedAt(20*time.Minute).Priority(50, 0).Obj(),
				pt.NewJob("urgent", "small").GPUs(4).Guaranteed().TimeLimit(time.Hour).SubmittedAt(30*time.Minute).Priority(10, 1).Obj(),
			},
			want: map[string]outcome{
				"long":   {policy.Keep, 0, policy.ReasonQuota},
				"short":  {policy.Keep, 0, policy.ReasonQuota},
				"urgent": {policy.Start, 8, policy.ReasonSLO},
			},
		},
		"rubick admits the guaranteed job of higher Slurm priority first, not the shorter": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(2, 8),
			config:  func(c *policy.Config) { c.GuaranteedOrder = policy.OrderPriority },
			tenants: []policy.Tenant{{Name: "default", GPUQuota: 4}},
			jobs: []policy.Job{
				pt.NewJob("short", "small").GPUs(4).Guaranteed().TimeLimit(time.Hour).SubmittedAt(10*time.Minute).Priority(50, 0).Obj(),
				pt.NewJob("long", "small").GPUs(4).Guaranteed().TimeLimit(5*time.Hour).SubmittedAt(20*time.Minute).Priority(100, 0).Obj(),
			},
			want: map[string]outcome{
				"long":  {policy.Start, 8, policy.ReasonSLO},
				"short": {policy.Keep, 0, policy.ReasonQuota},
			},
		},
		"antman preempts an opportunistic job for a guaranteed one": {
			policy: "antman", now: time.Hour, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("be", "small").GPUs(8).Running(dp(8, 32), 10*time.Minute, pt.On("n0", 8)).Obj(),
				pt.NewJob("g", "small").GPUs(4).Guaranteed().SubmittedAt(59 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"be": {policy.Preempt, 0, policy.ReasonReclaimed},
				"g":  {policy.Start, 4, policy.ReasonSLO},
			},
		},
		"rubick regrows an old job when GPUs free up": {
			policy: "rubick", now: 4 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("old", "small").GPUs(2).Running(dp(2, 32), 3*time.Hour, pt.On("n0", 2)).Obj(),
			},
			want: map[string]outcome{"old": {policy.Restart, 8, policy.ReasonSlope}},
		},
		"rubick leaves a young job alone however much it could gain": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("young", "small").GPUs(2).Running(dp(2, 32), 10*time.Minute, pt.On("n0", 2)).Obj(),
			},
			want: map[string]outcome{"young": {policy.Keep, 2, policy.ReasonPenalty}},
		},
		"rubick starts a starving job first, then shares by slope": {
			policy: "rubick", now: 10 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(4).Running(dp(4, 32), 20*time.Minute, pt.On("n0", 4)).Obj(),
				pt.NewJob("old", "wide").GPUs(4).SubmittedAt(time.Hour).Obj(),
				pt.NewJob("new", "wide").GPUs(4).SubmittedAt(10*time.Hour - time.Minute).Obj(),
			},
			// Both wide jobs run at 2 GPUs faster in sum than one at 4.
			want: map[string]outcome{
				"r":   {policy.Keep, 4, policy.ReasonPenalty},
				"old": {policy.Start, 2, policy.ReasonStarving},
				"new": {policy.Start, 2, policy.ReasonSlope},
			},
		},
		"rubick starts the job with less time left by its limit first": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(1, 8),
			jobs: longAndShort,
			want: shortFirst,
		},
		"rubick with TimeWeight 0 starts by slope, then submission": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(1, 8),
			config: func(c *policy.Config) { c.TimeWeight = 0 },
			jobs:   longAndShort,
			want:   longFirst,
		},
		"sia ignores time limits": {
			policy: "sia", now: time.Hour, nodes: pt.Cluster(1, 8),
			jobs: longAndShort,
			want: longFirst,
		},
		"rubick counts a job without a time limit as longer than one with": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(1, 8),
			jobs: oneGPUFor(pt.NewJob("unlimited", "small").GPUs(2).SubmittedAt(time.Minute).Obj(),
				pt.NewJob("limited", "small").GPUs(2).TimeLimit(10*time.Hour).SubmittedAt(2*time.Minute).Obj()),
			want: startsOne("limited", "unlimited"),
		},
		// small gains more per GPU than wide, which has less time left:
		// 10 minutes against 8 hours outweighs the slope.
		"rubick weighs time left against slope": {
			policy: "rubick", now: time.Hour, nodes: pt.Cluster(1, 8),
			jobs: oneGPUFor(pt.NewJob("long", "small").GPUs(2).TimeLimit(8*time.Hour).SubmittedAt(2*time.Minute).Obj(),
				pt.NewJob("short", "wide").GPUs(2).TimeLimit(10*time.Minute).SubmittedAt(time.Minute).Obj()),
			want: shortFirst,
		},
		// Its launch line trains with a global batch of 32 (small's), and
		// the plan it runs has 4 x 7 = 28: restarted with one of 32, by
		// every policy, whatever a restart costs.
		"rubick restarts a job on a plan of another global batch": {
			policy: "rubick", now: 10 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(4).GlobalBatch(32).Running(dp(4, 28), 20*time.Minute, pt.On("n0", 4)).Obj(),
			},
			want: map[string]outcome{"r": {policy.Restart, 4, policy.ReasonUnsupported}},
		},
		"fifo restarts a job on a plan of another global batch": {
			policy: "fifo", nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(4).GlobalBatch(32).Running(dp(4, 28), 20*time.Minute, pt.On("n0", 4)).Obj(),
			},
			want: map[string]outcome{"r": {policy.Restart, 4, policy.ReasonUnsupported}},
		},
		// Two GPUs free: by slope the big job takes them (next case); the
		// small one must start within 20 minutes for its --deadline, and
		// goes first.
		"rubick starts a job near its deadline first": {
			policy: "rubick", now: 2 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(6).Running(dp(6, 30), 20*time.Minute, pt.On("n0", 6)).Obj(),
				pt.NewJob("big", "big").GPUs(2).SubmittedAt(time.Hour).Obj(),
				pt.NewJob("dl", "small").GPUs(2).SubmittedAt(90 * time.Minute).StartBy(2*time.Hour + 20*time.Minute).Obj(),
			},
			want: map[string]outcome{
				"r":   {policy.Keep, 6, policy.ReasonPenalty},
				"big": {policy.Keep, 0, policy.ReasonNoResources},
				"dl":  {policy.Start, 2, policy.ReasonDeadline},
			},
		},
		// Its latest start has passed: Slurm would end it at any start, so
		// it gets no GPUs ahead of the others.
		"rubick orders by slope a job past its latest start": {
			policy: "rubick", now: 2 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(6).Running(dp(6, 30), 20*time.Minute, pt.On("n0", 6)).Obj(),
				pt.NewJob("big", "big").GPUs(2).SubmittedAt(time.Hour).Obj(),
				pt.NewJob("dl", "small").GPUs(2).SubmittedAt(90 * time.Minute).StartBy(110 * time.Minute).Obj(),
			},
			want: map[string]outcome{
				"r":   {policy.Keep, 6, policy.ReasonPenalty},
				"big": {policy.Start, 2, policy.ReasonSlope},
				"dl":  {policy.Keep, 0, policy.ReasonReclaimed},
			},
		},
		"rubick orders by slope a job whose deadline is far": {
			policy: "rubick", now: 2 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(6).Running(dp(6, 30), 20*time.Minute, pt.On("n0", 6)).Obj(),
				pt.NewJob("big", "big").GPUs(2).SubmittedAt(time.Hour).Obj(),
				pt.NewJob("dl", "small").GPUs(2).SubmittedAt(90 * time.Minute).StartBy(5 * time.Hour).Obj(),
			},
			want: map[string]outcome{
				"r":   {policy.Keep, 6, policy.ReasonPenalty},
				"big": {policy.Start, 2, policy.ReasonSlope},
				"dl":  {policy.Keep, 0, policy.ReasonReclaimed},
			},
		},
		"rubick serves a starving job before younger ones": {
			policy: "rubick", now: 10 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(6).Running(dp(6, 30), 20*time.Minute, pt.On("n0", 6)).Obj(),
				pt.NewJob("old", "big").GPUs(4).SubmittedAt(time.Hour).Obj(),
				pt.NewJob("new", "small").GPUs(1).SubmittedAt(10*time.Hour - time.Minute).Obj(),
			},
			want: map[string]outcome{
				"r":   {policy.Keep, 6, policy.ReasonPenalty},
				"old": {policy.Start, 2, policy.ReasonStarving},
				"new": {policy.Keep, 0, policy.ReasonNoResources},
			},
		},
		"rubick in fair-share order starts the job further below its share": {
			policy: "rubick", config: fairShare, now: 2 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: twoForTwoGPUs(),
			// b takes the 2 free GPUs first and keeps the one it asked for;
			// by slope a would take both (next case).
			want: map[string]outcome{
				"r": {policy.Keep, 6, policy.ReasonPenalty},
				"a": {policy.Start, 1, policy.ReasonFairShare},
				"b": {policy.Start, 1, policy.ReasonFairShare},
			},
		},
		"rubick in slope order ignores the fair-share factor": {
			policy: "rubick", now: 2 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: twoForTwoGPUs(),
			want: map[string]outcome{
				"r": {policy.Keep, 6, policy.ReasonPenalty},
				"a": {policy.Start, 2, policy.ReasonSlope},
				"b": {policy.Keep, 0, policy.ReasonReclaimed},
			},
		},
		"rubick in fair-share order starts a starving job first": {
			policy: "rubick", config: fairShare, now: 10 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(6).Running(dp(6, 30), 20*time.Minute, pt.On("n0", 6)).Obj(),
				pt.NewJob("old", "big").GPUs(4).SubmittedAt(time.Hour).FairShare(0.1).Obj(),
				pt.NewJob("new", "small").GPUs(1).SubmittedAt(10*time.Hour - time.Minute).FairShare(0.9).Obj(),
			},
			want: map[string]outcome{
				"r":   {policy.Keep, 6, policy.ReasonPenalty},
				"old": {policy.Start, 2, policy.ReasonStarving},
				"new": {policy.Keep, 0, policy.ReasonNoResources},
			},
		},
		"rubick in fair-share order shrinks no job further below its share": {
			policy: "rubick", config: fairShare, now: 4 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: holderAndQueued(8, 0.9, 0.1),
			// By slope lo takes 4 of hi's GPUs (next case).
			want: map[string]outcome{
				"hi": {policy.Restart, 8, policy.ReasonReplan},
				"lo": {policy.Keep, 0, policy.ReasonNoResources},
			},
		},
		"rubick in fair-share order takes what a job holds beyond its request": {
			policy: "rubick", config: fairShare, now: 4 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: holderAndQueued(4, 0.9, 0.1),
			want: map[string]outcome{
				"hi": {policy.Shrink, 4, policy.ReasonReclaimed},
				"lo": {policy.Start, 4, policy.ReasonFairShare},
			},
		},
		"rubick in fair-share order shrinks a job above its share": {
			policy: "rubick", config: fairShare, now: 4 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: holderAndQueued(8, 0.1, 0.9),
			want: map[string]outcome{
				"hi": {policy.Shrink, 4, policy.ReasonReclaimed},
				"lo": {policy.Start, 4, policy.ReasonFairShare},
			},
		},
		"rubick in priority order starts the higher-priority job first": {
			policy: "rubick", config: slurmPriority, now: 2 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: byPriority(twoForTwoGPUs()),
			want: map[string]outcome{
				"r": {policy.Keep, 6, policy.ReasonPenalty},
				"a": {policy.Start, 1, policy.ReasonPriority},
				"b": {policy.Start, 1, policy.ReasonPriority},
			},
		},
		"rubick in priority order puts a higher partition tier first": {
			policy: "rubick", config: slurmPriority, now: 2 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: func() []policy.Job {
				jobs := byPriority(twoForTwoGPUs())
				jobs[1].PriorityTier = 1 // a: priority 2000, but in a higher tier than b's 9000
				return jobs
			}(),
			want: map[string]outcome{
				"r": {policy.Keep, 6, policy.ReasonPenalty},
				"a": {policy.Start, 2, policy.ReasonPriority},
				"b": {policy.Keep, 0, policy.ReasonNoResources},
			},
		},
		"rubick in priority order shrinks no job of higher priority below its request": {
			policy: "rubick", config: slurmPriority, now: 4 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: byPriority(holderAndQueued(8, 0.9, 0.1)),
			want: map[string]outcome{
				"hi": {policy.Restart, 8, policy.ReasonReplan},
				"lo": {policy.Keep, 0, policy.ReasonNoResources},
			},
		},
		"rubick in priority order shrinks a job of lower priority": {
			policy: "rubick", config: slurmPriority, now: 4 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: byPriority(holderAndQueued(8, 0.1, 0.9)),
			want: map[string]outcome{
				"hi": {policy.Shrink, 4, policy.ReasonReclaimed},
				"lo": {policy.Start, 4, policy.ReasonPriority},
			},
		},
		"rubick in priority order: a lower tier's job is shrunk for a higher tier's": {
			policy: "rubick", config: slurmPriority, now: 4 * time.Hour, nodes: pt.Cluster(1, 8),
			jobs: func() []policy.Job {
				jobs := byPriority(holderAndQueued(8, 0.9, 0.1))
				jobs[1].PriorityTier = 2
				return jobs
			}(),
			want: map[string]outcome{
				"hi": {policy.Shrink, 4, policy.ReasonReclaimed},
				"lo": {policy.Start, 4, policy.ReasonPriority},
			},
		},
		"rubick-n runs the request exactly": {
			policy: "rubick-n", nodes: pt.Cluster(1, 8),
			jobs: []policy.Job{pt.NewJob("a", "small").GPUs(2).Obj()},
			want: map[string]outcome{"a": {policy.Start, 2, policy.ReasonFIFO}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := policy.DefaultConfig()
			if tc.config != nil {
				tc.config(&cfg)
			}
			p, err := policy.New(tc.policy, cfg)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := p.Decide(context.Background(), snap(t, tc.now, tc.nodes, tc.tenants, tc.jobs...))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, outcomes(plan)); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s\nplan: %+v", diff, plan)
			}
		})
	}
}

func TestNew(t *testing.T) {
	tests := map[string]struct {
		name    string
		mutate  func(*policy.Config)
		wantErr error
		field   string
	}{
		"every registered name":     {name: "rubick"},
		"unknown policy":            {name: "tetris", wantErr: policy.ErrUnknownPolicy, field: "tetris"},
		"keep fraction above one":   {name: "rubick", mutate: func(c *policy.Config) { c.ReconfigKeep = 1.5 }, wantErr: policy.ErrBadConfig, field: "ReconfigKeep"},
		"negative starvation age":   {name: "fifo", mutate: func(c *policy.Config) { c.StarvationAge = -time.Second }, wantErr: policy.ErrBadConfig, field: "StarvationAge"},
		"margin of one":             {name: "rubick", mutate: func(c *policy.Config) { c.SLOMargin = 1 }, wantErr: policy.ErrBadConfig, field: "SLOMargin"},
		"unknown best-effort order": {name: "rubick", mutate: func(c *policy.Config) { c.BestEffortOrder = "age" }, wantErr: policy.ErrBadConfig, field: "BestEffortOrder"},
		"unknown guaranteed order":  {name: "rubick", mutate: func(c *policy.Config) { c.GuaranteedOrder = "random" }, wantErr: policy.ErrBadConfig, field: "GuaranteedOrder"},
		"negative guaranteed age":   {name: "rubick", mutate: func(c *policy.Config) { c.GuaranteedAge = -time.Hour }, wantErr: policy.ErrBadConfig, field: "GuaranteedAge"},
		"scale below one":           {name: "rubick", mutate: func(c *policy.Config) { c.MaxScale = 0.5 }, wantErr: policy.ErrBadConfig, field: "MaxScale"},
		"reclaim keep above one":    {name: "rubick", mutate: func(c *policy.Config) { c.ReclaimKeep = 1.5 }, wantErr: policy.ErrBadConfig, field: "ReclaimKeep"},
		"share above one":           {name: "rubick", mutate: func(c *policy.Config) { c.MinShare = 2 }, wantErr: policy.ErrBadConfig, field: "MinShare"},
		"time weight above one":     {name: "rubick", mutate: func(c *policy.Config) { c.TimeWeight = 1.5 }, wantErr: policy.ErrBadConfig, field: "TimeWeight"},
		"negative time weight":      {name: "rubick", mutate: func(c *policy.Config) { c.TimeWeight = -0.5 }, wantErr: policy.ErrBadConfig, field: "TimeWeight"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := policy.DefaultConfig()
			if tc.mutate != nil {
				tc.mutate(&c)
			}
			p, err := policy.New(tc.name, c)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("New(%q) error = %v, want %v", tc.name, err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %q", err, tc.field)
			}
			var fe *policy.FieldError
			if errors.Is(tc.wantErr, policy.ErrBadConfig) && (!errors.As(err, &fe) || fe.Field != tc.field) {
				t.Errorf("error %v is not a *FieldError for %s", err, tc.field)
			}
			if err == nil && p.Name() != tc.name {
				t.Errorf("Name() = %q, want %q", p.Name(), tc.name)
			}
		})
	}
	for _, n := range policy.Names() {
		if _, err := policy.New(n, policy.DefaultConfig()); err != nil {
			t.Errorf("New(%q): %v", n, err)
		}
	}
}

func TestNewSnapshotRejects(t *testing.T) {
	ok := pt.NewJob("a", "small").GPUs(2).Running(dp(2, 32), time.Minute, pt.On("n0", 2)).Obj()
	tests := map[string]struct {
		nodes []policy.Node
		jobs  []policy.Job
		want  string
	}{
		"duplicate node":   {nodes: append(pt.Cluster(1, 8), pt.Cluster(1, 8)...), want: `duplicate node "n0"`},
		"duplicate job":    {nodes: pt.Cluster(1, 8), jobs: []policy.Job{ok, ok}, want: `duplicate job "a"`},
		"unknown node":     {nodes: pt.Cluster(1, 8), jobs: []policy.Job{pt.NewJob("b", "small").Running(dp(1, 32), time.Minute, pt.On("n9", 1)).Obj()}, want: `unknown node "n9"`},
		"unknown model":    {nodes: pt.Cluster(1, 8), jobs: []policy.Job{{ID: "c", Model: "gpt9", Request: policy.Request{GPUs: 1}}}, want: `model type "gpt9"`},
		"over capacity":    {nodes: pt.Cluster(1, 4), jobs: []policy.Job{pt.NewJob("d", "small").GPUs(8).Running(dp(8, 32), time.Minute, pt.On("n0", 8)).Obj()}, want: "over capacity"},
		"zero GPU request": {nodes: pt.Cluster(1, 8), jobs: []policy.Job{{ID: "e", Model: "small"}}, want: "request.gpus=0"},
		"placement with an empty node": {nodes: pt.Cluster(2, 8), jobs: []policy.Job{{ID: "h", Model: "small", Request: policy.Request{GPUs: 4, Placement: model.Placement{4, 0}}}},
			want: "request.placement=40 must give each node at least one GPU and 4 in all"},
		"placement not the GPUs": {nodes: pt.Cluster(2, 8), jobs: []policy.Job{{ID: "i", Model: "small", Request: policy.Request{GPUs: 4, Placement: model.Placement{2, 4}}}},
			want: "request.placement=24 must give each node at least one GPU and 4 in all"},
		"fair share NaN":    {nodes: pt.Cluster(1, 8), jobs: []policy.Job{pt.NewJob("f", "small").FairShare(math.NaN()).Obj()}, want: "fair_share=NaN must be in 0..1"},
		"fair share over 1": {nodes: pt.Cluster(1, 8), jobs: []policy.Job{pt.NewJob("g", "small").FairShare(1.5).Obj()}, want: "fair_share=1.5 must be in 0..1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := policy.NewSnapshot(pt.Epoch, tc.nodes, tc.jobs, nil, pt.Models(), 0)
			if !errors.Is(err, policy.ErrBadSnapshot) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewSnapshot error = %v, want ErrBadSnapshot naming %q", err, tc.want)
			}
		})
	}
}

func TestDecideHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := snap(t, 0, pt.Cluster(1, 8), nil, pt.NewJob("a", "small").Obj())
	for _, name := range policy.Names() {
		p, _ := policy.New(name, policy.DefaultConfig())
		if _, err := p.Decide(ctx, s); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Decide on a cancelled context = %v, want context.Canceled", name, err)
		}
	}
}

func TestSynergyTunesCPUs(t *testing.T) {
	offload := model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, ZeRO: 2, Offload: true}
	s := snap(t, 0, pt.Cluster(1, 8), nil,
		pt.NewJob("off", "big").GPUs(4).Plan(offload).Obj(),
		pt.NewJob("dp", "small").GPUs(4).SubmittedAt(time.Second).Obj(),
	)
	p, _ := policy.New("synergy", policy.DefaultConfig())
	plan, err := p.Decide(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, a := range plan.Actions {
		for _, n := range a.Alloc {
			got[a.JobID] += n.CPUs
		}
	}
	// 96 CPUs: the offload job's CPU Adam speeds up with every core, the
	// data-parallel job needs only its data loaders (1 per GPU).
	if diff := cmp.Diff(map[string]int{"off": 48, "dp": 4}, got); diff != "" {
		t.Errorf("CPUs per job (-want +got):\n%s", diff)
	}
}

func TestConfigSet(t *testing.T) {
	tests := map[string]struct {
		kv      string
		want    func(*policy.Config)
		wantErr string
	}{
		"float":          {kv: "ReconfigKeep=0.97", want: func(c *policy.Config) { c.ReconfigKeep = 0.97 }},
		"duration":       {kv: "StarvationAge=2h", want: func(c *policy.Config) { c.StarvationAge = 2 * time.Hour }},
		"int":            {kv: "MaxSpread=3", want: func(c *policy.Config) { c.MaxSpread = 3 }},
		"word":           {kv: "GuaranteedOrder=submit", want: func(c *policy.Config) { c.GuaranteedOrder = policy.OrderSubmit }},
		"no equals":      {kv: "MinGain", wantErr: `"MinGain": want Name=value`},
		"unknown":        {kv: "Speed=2", wantErr: `"Speed": unknown knob`},
		"not a number":   {kv: "MinGain=lots", wantErr: `MinGain="lots": want a number`},
		"not whole":      {kv: "MinCPUsPerGPU=1e9", wantErr: `MinCPUsPerGPU="1e9": want a whole number`},
		"not a duration": {kv: "StarvationAge=4", wantErr: `StarvationAge="4": want a duration such as 90s, 30m or 4h`},
		"fails validate": {kv: "SLOMargin=2", wantErr: "SLOMargin=2: want 0 <= x < 1"},
		"bad word":       {kv: "GuaranteedOrder=lifo", wantErr: `GuaranteedOrder="lifo"`},
		"priority word":  {kv: "GuaranteedOrder=priority", want: func(c *policy.Config) { c.GuaranteedOrder = policy.OrderPriority }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := policy.DefaultConfig()
			err := got.Set(tc.kv)
			want := policy.DefaultConfig()
			if tc.wantErr != "" {
				if !errors.Is(err, policy.ErrBadConfig) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Set(%q) = %v, want ErrBadConfig with %q", tc.kv, err, tc.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("Set(%q) = %v", tc.kv, err)
				}
				tc.want(&want)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("config after Set(%q) (-want +got):\n%s", tc.kv, diff)
			}
		})
	}
}

// In fair-share order a job left waiting says its factor, then why it
// waits.
func TestFairShareDetail(t *testing.T) {
	cfg := policy.DefaultConfig()
	fairShare(&cfg)
	p, err := policy.New("rubick", cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := p.Decide(context.Background(), snap(t, 4*time.Hour, pt.Cluster(1, 8), nil, holderAndQueued(8, 0.9, 0.1)...))
	if err != nil {
		t.Fatal(err)
	}
	// And why: hi, ranked higher, gives up no GPU it asked for.
	want := map[string]string{"hi": "", "lo": "fair-share factor 0.10; no GPU free; no running job may give up GPUs to it"}
	for _, a := range plan.Actions {
		if w := want[a.JobID]; w != "" && a.Detail != w {
			t.Errorf("job %s: detail %q, want %q", a.JobID, a.Detail, w)
		}
	}
}

// In priority order a job left waiting says its priority and tier, then
// why it waits.
func TestPriorityDetail(t *testing.T) {
	cfg := policy.DefaultConfig()
	slurmPriority(&cfg)
	p, err := policy.New("rubick", cfg)
	if err != nil {
		t.Fatal(err)
	}
	jobs := byPriority(holderAndQueued(8, 0.9, 0.1))
	jobs[0].PriorityTier = 3
	plan, err := p.Decide(context.Background(), snap(t, 4*time.Hour, pt.Cluster(1, 8), nil, jobs...))
	if err != nil {
		t.Fatal(err)
	}
	jobs = byPriority(holderAndQueued(8, 0.1, 0.9))
	jobs[1].PriorityTier, jobs[1].PriorityFactors = 3, "fairshare 9000"
	plan2, err := p.Decide(context.Background(), snap(t, 4*time.Hour, pt.Cluster(1, 8), nil, jobs...))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range append(plan.Actions, plan2.Actions...) {
		if a.JobID == "lo" {
			got[string(a.Reason)] = a.Detail
		}
	}
	want := map[string]string{
		string(policy.ReasonNoResources): "priority 1000; no GPU free; no running job may give up GPUs to it",
		string(policy.ReasonPriority):    "priority 9000 in partition tier 3 (fairshare 9000)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lo's details by reason (-want +got):\n%s", diff)
	}
}

// In guaranteed priority order a job waiting for its tenant's quota says
// its priority too.
func TestGuaranteedPriorityDetail(t *testing.T) {
	cfg := policy.DefaultConfig()
	cfg.GuaranteedOrder = policy.OrderPriority
	p, err := policy.New("rubick", cfg)
	if err != nil {
		t.Fatal(err)
	}
	jobs := []policy.Job{
		pt.NewJob("first", "small").GPUs(4).Guaranteed().Priority(100, 0).Obj(),
		pt.NewJob("second", "small").GPUs(4).Guaranteed().Priority(50, 0).Obj(),
	}
	plan, err := p.Decide(context.Background(), snap(t, time.Hour, pt.Cluster(2, 8), []policy.Tenant{{Name: "default", GPUQuota: 4}}, jobs...))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range plan.Actions {
		if a.JobID != "second" {
			continue
		}
		found = true
		if a.Reason != policy.ReasonQuota || !strings.HasSuffix(a.Detail, "; priority 50") {
			t.Errorf("second: %s %q, want %s ending in \"; priority 50\"", a.Reason, a.Detail, policy.ReasonQuota)
		}
	}
	if !found {
		t.Errorf("no action for job second: %+v", plan.Actions)
	}
}

// Every field of Config can be set by its name.
func TestKnobsCoverConfig(t *testing.T) {
	var fields []string
	ct := reflect.TypeOf(policy.Config{})
	for i := range ct.NumField() {
		fields = append(fields, ct.Field(i).Name)
	}
	if diff := cmp.Diff(fields, policy.Knobs()); diff != "" {
		t.Errorf("Knobs() against Config's fields (-fields +knobs):\n%s", diff)
	}
}

// A guaranteed job whose SLO needs whole nodes must not be kept queued by
// best-effort jobs scattered over the cluster: it takes the nodes that can
// be emptied, not the free GPUs the greedy search finds first.
func TestGuaranteedTakesWholeNodesFromScatteredBestEffort(t *testing.T) {
	wide := model.Plan{DP: 2, TP: 8, PP: 1, MicroBatch: 4, Accum: 1}
	jobs := []policy.Job{
		pt.NewJob("gs", "small").GPUs(2).Guaranteed().Running(dp(2, 32), time.Hour, pt.On("n0", 2)).Obj(),
		pt.NewJob("b0", "small").GPUs(4).Running(dp(4, 32), time.Hour, pt.On("n0", 4)).Obj(),
		pt.NewJob("b1", "small").GPUs(8).Running(dp(8, 32), time.Hour, pt.On("n1", 8)).Obj(),
		pt.NewJob("b2", "small").GPUs(4).Running(dp(4, 32), time.Hour, pt.On("n2", 4)).Obj(),
		pt.NewJob("b3", "small").GPUs(2).Running(dp(2, 32), time.Hour, pt.On("n3", 2)).Obj(),
		pt.NewJob("b4", "small").GPUs(4).Running(dp(4, 32), time.Hour, pt.On("n3", 4)).Obj(),
		pt.NewJob("g", "big").GPUs(16).Plan(wide).Guaranteed().SubmittedAt(2 * time.Hour).Obj(),
	}
	p, err := policy.New("rubick", policy.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	plan, err := p.Decide(context.Background(), snap(t, 2*time.Hour+time.Minute, pt.Cluster(4, 8), []policy.Tenant{{Name: "default", GPUQuota: 32}}, jobs...))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range plan.Actions {
		switch a.JobID {
		case "g":
			if a.Kind != policy.Start || a.Placement().GPUs() < 16 {
				t.Errorf("g: %s on %v (%s %s), want a start on at least 16 GPUs", a.Kind, a.Placement(), a.Reason, a.Detail)
			}
		case "gs":
			if a.Kind != policy.Keep {
				t.Errorf("gs: %s, want keep", a.Kind)
			}
		}
	}
}

// A best-effort job on one GPU of each of two nodes is in the way of a
// guaranteed job that needs two whole nodes of three. Shrunk by its GPU on
// one node it would keep less than ReclaimKeep (1 here) of its speed, so it
// is preempted whole, freeing both nodes, as a job on one node would be
// (and may restart on what is left).
func TestGuaranteedPreemptsBestEffortAcrossNodes(t *testing.T) {
	wide := model.Plan{DP: 2, TP: 8, PP: 1, MicroBatch: 4, Accum: 1}
	jobs := []policy.Job{
		pt.NewJob("x", "small").GPUs(2).Running(dp(2, 32), time.Hour, pt.On("n0", 1), pt.On("n1", 1)).Obj(),
		pt.NewJob("y", "small").GPUs(2).Running(dp(2, 32), time.Hour, pt.On("n1", 1), pt.On("n2", 1)).Obj(),
		pt.NewJob("g", "big").GPUs(16).Plan(wide).Guaranteed().SubmittedAt(2 * time.Hour).Obj(),
	}
	cfg := policy.DefaultConfig()
	cfg.ReclaimKeep = 1
	p, err := policy.New("rubick", cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := p.Decide(context.Background(), snap(t, 2*time.Hour+time.Minute, pt.Cluster(3, 8), []policy.Tenant{{Name: "default", GPUQuota: 24}}, jobs...))
	if err != nil {
		t.Fatal(err)
	}
	got := outcomes(plan)
	if g := got["g"]; g.Kind != policy.Start || g.GPUs != 16 {
		t.Errorf("g: %+v, want a start on 16 GPUs; plan %+v", g, plan)
	}
	// What frees the nodes moves at least one of them: preempted, or
	// restarted on the GPUs left over.
	moved := 0
	for _, id := range []string{"x", "y"} {
		switch o := got[id]; o.Kind {
		case policy.Preempt, policy.Restart:
			moved++
		case policy.Keep:
		default:
			t.Errorf("%s: %+v, want preempt, restart or keep", id, o)
		}
	}
	if moved == 0 {
		t.Errorf("neither best-effort job moved: %+v", got)
	}
}

// A measured restart cost replaces the default for its model type only: with
// the default 260 s a job 10 minutes in may not restart, with a measured 5 s
// it may, and a job of another model type still may not.
func TestMeasuredRestartCosts(t *testing.T) {
	jobs := []policy.Job{
		pt.NewJob("a", "small").GPUs(4).Running(dp(4, 32), 10*time.Minute, pt.On("n0", 4)).Obj(),
		pt.NewJob("b", "wide").GPUs(4).Running(dp(4, 16), 10*time.Minute, pt.On("n1", 4)).Obj(),
	}
	for name, tc := range map[string]struct {
		costs map[string]time.Duration
		want  map[string]outcome
	}{
		"default": {nil, map[string]outcome{
			"a": {policy.Keep, 4, policy.ReasonPenalty}, "b": {policy.Keep, 4, policy.ReasonPenalty}}},
		"measured for small": {map[string]time.Duration{"small": 5 * time.Second}, map[string]outcome{
			"a": {policy.Restart, 8, policy.ReasonSlope}, "b": {policy.Keep, 4, policy.ReasonPenalty}}},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(2, 8), jobs, nil, pt.Models(), 260*time.Second,
				policy.WithRestartCosts(tc.costs))
			if err != nil {
				t.Fatal(err)
			}
			p := decideRubick(t, s)
			if d := cmp.Diff(tc.want, outcomes(p)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			for _, a := range p.Actions {
				// 10 minutes run, 260 s per restart: 57 % left.
				want := "one more restart (4m20s each, 0 so far) would leave 57% of its 10m0s run time useful, below 90%"
				if a.Reason == policy.ReasonPenalty && a.Detail != want {
					t.Errorf("job %s: detail %q, want %q", a.JobID, a.Detail, want)
				}
			}
		})
	}
	_, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(1, 8), nil, nil, pt.Models(), 0,
		policy.WithRestartCosts(map[string]time.Duration{"small": -time.Second}))
	if !errors.Is(err, policy.ErrBadSnapshot) || !strings.Contains(err.Error(), `"small"`) {
		t.Errorf("negative measured cost: %v, want ErrBadSnapshot naming the model type", err)
	}
}

// A job's launch line may be unable to express some plans (a DeepSpeed
// script takes no TP or PP degree): no policy gives it one, and a running
// job found on such a plan is moved to one it can run, penalty or not.
func TestCannot(t *testing.T) {
	tp := model.Plan{DP: 2, TP: 4, PP: 1, MicroBatch: 4, Accum: 1}
	jobs := []policy.Job{
		pt.NewJob("free", "big").GPUs(8).Obj(),
		pt.NewJob("ds", "big").GPUs(8).Cannot(model.FeatureTP | model.FeaturePP).Obj(),
		pt.NewJob("nooff", "big").GPUs(1).Cannot(model.FeatureOffload).Obj(),
		// Frozen by the restart penalty, yet on a plan it cannot run.
		pt.NewJob("stuck", "big").GPUs(8).Cannot(model.FeatureTP|model.FeaturePP).Reconfigs(3).
			Running(tp, 10*time.Minute, pt.On("n3", 8)).Obj(),
	}
	s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(4, 8), jobs, nil, pt.Models(), 260*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cannot := map[string]model.Features{}
	for _, j := range jobs {
		cannot[j.ID] = j.Cannot
	}
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			p := decide(t, name, s)
			for _, a := range p.Actions {
				if len(a.Alloc) > 0 && !cannot[a.JobID].Allows(a.Plan) {
					t.Errorf("job %s: %s %s, which uses what it cannot (%s)", a.JobID, a.Kind, a.Plan, cannot[a.JobID])
				}
				if a.JobID == "stuck" && (a.Reason != policy.ReasonUnsupported || (a.Kind != policy.Restart && a.Kind != policy.Preempt)) {
					t.Errorf("job stuck: %s (%s: %s), want a restart or preemption for its launch line", a.Kind, a.Reason, a.Detail)
				}
			}
			if name != "rubick" {
				return
			}
			// The unrestricted twin shows the restriction mattered.
			for _, a := range p.Actions {
				if a.JobID == "free" && a.Plan.TP == 1 && a.Plan.PP == 1 {
					t.Errorf("job free runs %s: the fake's best plan for big on 8 GPUs should use TP, or this test shows nothing", a.Plan)
				}
			}
		})
	}
}

// decideRubick is the rubick policy's plan for s.
func decideRubick(t *testing.T, s *policy.Snapshot) policy.Plan {
	t.Helper()
	return decide(t, "rubick", s)
}

// decide is the named policy's plan for s, with the default configuration.
func decide(t *testing.T, name string, s *policy.Snapshot) policy.Plan {
	t.Helper()
	pol, err := policy.New(name, policy.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p, err := pol.Decide(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A job's own measured restart cost overrides its model type's, either way.
func TestJobRestartCost(t *testing.T) {
	for name, tc := range map[string]struct {
		own   time.Duration
		types map[string]time.Duration
		want  outcome
	}{
		"own cheap, type default":   {own: 5 * time.Second, want: outcome{policy.Restart, 8, policy.ReasonSlope}},
		"own dear, type cheap":      {own: 260 * time.Second, types: map[string]time.Duration{"small": 5 * time.Second}, want: outcome{policy.Keep, 4, policy.ReasonPenalty}},
		"none, type cheap":          {types: map[string]time.Duration{"small": 5 * time.Second}, want: outcome{policy.Restart, 8, policy.ReasonSlope}},
		"none, type default (260s)": {want: outcome{policy.Keep, 4, policy.ReasonPenalty}},
	} {
		t.Run(name, func(t *testing.T) {
			a := pt.NewJob("a", "small").GPUs(4).Running(dp(4, 32), 10*time.Minute, pt.On("n0", 4)).Obj()
			a.RestartCost = tc.own
			s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(2, 8), []policy.Job{a}, nil, pt.Models(), 260*time.Second,
				policy.WithRestartCosts(tc.types))
			if err != nil {
				t.Fatal(err)
			}
			p := decideRubick(t, s)
			if d := cmp.Diff(map[string]outcome{"a": tc.want}, outcomes(p)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
	bad := pt.NewJob("a", "small").GPUs(4).Obj()
	bad.RestartCost = -time.Second
	if _, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(1, 8), []policy.Job{bad}, nil, pt.Models(), 0); !errors.Is(err, policy.ErrBadSnapshot) ||
		!strings.Contains(err.Error(), "restart_cost=-1s") {
		t.Errorf("negative job restart cost: %v, want ErrBadSnapshot naming it", err)
	}
}

// A job Slurm's limits hold to its request gets no more GPUs, nodes or CPUs
// than it asked for from any policy, on a cluster where rubick would
// otherwise grow it (the twin without the flag shows that).
func TestWithinRequest(t *testing.T) {
	for _, within := range []bool{false, true} {
		b := pt.NewJob("a", "small").GPUs(2).CPUs(8)
		if within {
			b = b.WithinRequest()
		}
		j := b.Obj()
		j.Request.MemGB = 20 // below the policy's default host memory for 2 GPUs
		s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(2, 8), []policy.Job{j}, nil, pt.Models(), 260*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range policy.Names() {
			a := decide(t, name, s).Actions[0]
			gpus, cpus, mem := 0, 0, 0.0
			for _, n := range a.Alloc {
				gpus += n.GPUs
				cpus += n.CPUs
				mem += n.MemGB
			}
			switch {
			case within && (gpus == 0 || gpus > 2 || len(a.Alloc) > 1 || cpus > 8 || mem > 20):
				t.Errorf("%s: job within its request of 2 GPUs, 8 CPUs, 20 GB got %d GPUs, %d CPUs, %.0f GB on %d nodes (%s: %s)",
					name, gpus, cpus, mem, len(a.Alloc), a.Reason, a.Detail)
			case !within && name == "rubick" && gpus <= 2:
				t.Errorf("rubick gave the unlimited job %d GPUs; the test needs it to grow", gpus)
			}
		}
	}
}

// A job's Max (the per-job limits of its Slurm QOS and association) bounds what every policy
// gives it, above its request too; the bounds are table rows, with no
// bound as the row that shows rubick growing the job past them.
func TestJobMax(t *testing.T) {
	tests := map[string]policy.Size{
		"none":  {},
		"gpus":  {GPUs: 4},
		"nodes": {Nodes: 1},
		"cpus":  {CPUs: 20},
		"all":   {GPUs: 3, Nodes: 1, CPUs: 12},
		// 16 GB per GPU by default: 2 GPUs at most.
		"mem": {MemGB: 40},
		// And 16 GB per node whatever the plan (below): 4 GPUs would book
		// 80 GB, and 3 have no plan for a batch of 32.
		"mem and base":  {MemGB: 72},
		"GPUs per node": {GPUsPerNode: 2},
		"CPUs per node": {CPUsPerNode: 8},
		// 16 GB per GPU: 3 GPUs on a node at most, and a batch of 32
		// splits over 2 per node.
		"memory per node": {MemGBPerNode: 50},
	}
	for name, bound := range tests {
		t.Run(name, func(t *testing.T) {
			j := pt.NewJob("a", "small").GPUs(2).CPUs(8).Obj()
			j.Max = bound
			models := pt.Models()
			if name == "mem and base" {
				models["small"].(*pt.Fake).HostBaseGB = 16
			}
			s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(4, 4), []policy.Job{j}, nil, models, 260*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, pol := range policy.Names() {
				a := decide(t, pol, s).Actions[0]
				gpus, cpus, mem, nodeGPUs, nodeCPUs, nodeMem := 0, 0, 0.0, 0, 0, 0.0
				for _, n := range a.Alloc {
					gpus += n.GPUs
					cpus += n.CPUs
					mem += n.MemGB
					nodeGPUs, nodeCPUs, nodeMem = max(nodeGPUs, n.GPUs), max(nodeCPUs, n.CPUs), max(nodeMem, n.MemGB)
				}
				if gpus == 0 || bound.GPUs > 0 && gpus > bound.GPUs || bound.Nodes > 0 && len(a.Alloc) > bound.Nodes || bound.CPUs > 0 && cpus > bound.CPUs ||
					bound.MemGB > 0 && mem > bound.MemGB || bound.GPUsPerNode > 0 && nodeGPUs > bound.GPUsPerNode || bound.CPUsPerNode > 0 && nodeCPUs > bound.CPUsPerNode ||
					bound.MemGBPerNode > 0 && nodeMem > bound.MemGBPerNode {
					t.Errorf("%s: got %d GPUs, %d CPUs, %.0f GB on %d nodes (at most %d GPUs, %d CPUs on one), want a start within %+v (%s: %s)",
						pol, gpus, cpus, mem, len(a.Alloc), nodeGPUs, nodeCPUs, bound, a.Reason, a.Detail)
				}
				// rubick says when the bound, not the slope, stopped it.
				atBound := fmt.Sprintf("at the %d GPUs its limits allow", bound.GPUs)
				if pol == "rubick" && (bound.GPUs > 0 && gpus == bound.GPUs) != strings.Contains(a.Detail, atBound) {
					t.Errorf("rubick started it on %d GPUs within %+v, detail %q: want %q exactly when at its GPU bound", gpus, bound, a.Detail, atBound)
				}
				if bound == (policy.Size{}) && pol == "rubick" && (gpus <= 4 || cpus <= 20 || len(a.Alloc) <= 1 || mem <= 40 || nodeGPUs <= 2 || nodeCPUs <= 8 || nodeMem <= 50) {
					t.Errorf("rubick gave the unbounded job %d GPUs, %d CPUs, %.0f GB on %d nodes (at most %d GPUs, %d CPUs on one); the test needs it past every bound",
						gpus, cpus, mem, len(a.Alloc), nodeGPUs, nodeCPUs)
				}
			}
		})
	}
	for _, bad := range []policy.Size{{CPUs: -1}, {MemGB: -1}, {MemGB: math.NaN()}, {MemGB: math.Inf(1)}, {GPUsPerNode: -1}, {CPUsPerNode: -2}, {MemGBPerNode: math.NaN()}} {
		j := pt.NewJob("a", "small").GPUs(2).Obj()
		j.Max = bad
		if _, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(1, 8), []policy.Job{j}, nil, pt.Models(), 0); !errors.Is(err, policy.ErrBadSnapshot) || !strings.Contains(err.Error(), "max=") {
			t.Errorf("bound %+v: %v, want ErrBadSnapshot naming max", bad, err)
		}
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		j := pt.NewJob("a", "small").GPUs(2).Obj()
		j.Request.MemGB = bad
		if _, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(1, 8), []policy.Job{j}, nil, pt.Models(), 0); !errors.Is(err, policy.ErrBadSnapshot) || !strings.Contains(err.Error(), "request.mem_gb=") {
			t.Errorf("request memory %v: %v, want ErrBadSnapshot naming request.mem_gb", bad, err)
		}
	}
}

// A job's Min (its Slurm QOS's MinTRESPerJob) bounds what a policy gives
// it from below: rubick grows a job past its request to reach it and never
// starts it below, the queue baselines, which run jobs as they asked, keep
// it queued; the row without a bound shows rubick starting the job below
// every bound.
func TestJobMin(t *testing.T) {
	tests := map[string]policy.Size{
		"none":  {},
		"gpus":  {GPUs: 6},
		"nodes": {Nodes: 2},
		"cpus":  {CPUs: 32},
		// 16 GB per GPU by default.
		"mem": {MemGB: 120},
		"all": {GPUs: 5, Nodes: 2, CPUs: 24, MemGB: 100},
	}
	for name, bound := range tests {
		t.Run(name, func(t *testing.T) {
			j := pt.NewJob("a", "big").GPUs(2).CPUs(8).Obj()
			j.Min = bound
			s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(4, 4), []policy.Job{j}, nil, pt.Models(), 260*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, pol := range policy.Names() {
				a := decide(t, pol, s).Actions[0]
				gpus, cpus, mem := 0, 0, 0.0
				for _, n := range a.Alloc {
					gpus, cpus, mem = gpus+n.GPUs, cpus+n.CPUs, mem+n.MemGB
				}
				below := gpus < bound.GPUs || len(a.Alloc) < bound.Nodes || cpus < bound.CPUs || mem < bound.MemGB
				switch {
				case a.Kind == policy.Start && below:
					t.Errorf("%s: started on %d GPUs, %d CPUs, %.0f GB on %d nodes, below its minimum of %v (%s)", pol, gpus, cpus, mem, len(a.Alloc), bound, a.Detail)
				case pol == "rubick" && a.Kind != policy.Start:
					t.Errorf("rubick: %s (%s: %s), want a start on an idle cluster", a.Kind, a.Reason, a.Detail)
				case bound == (policy.Size{}) && pol == "rubick" && (gpus >= 5 || len(a.Alloc) >= 2 || cpus >= 24 || mem >= 100):
					t.Errorf("rubick gave the unbounded job %d GPUs, %d CPUs, %.0f GB on %d nodes; the test needs it below every bound", gpus, cpus, mem, len(a.Alloc))
				case bound != (policy.Size{}) && a.Kind == policy.Keep && !strings.Contains(a.Detail, "at least "+bound.String()):
					t.Errorf("%s: kept with %q, want it to name its minimum (at least %s)", pol, a.Detail, bound)
				}
			}
		})
	}

	// A minimum above its other bounds: kept, saying so.
	j := pt.NewJob("a", "big").GPUs(2).CPUs(8).Obj()
	j.Min, j.Max = policy.Size{GPUs: 6}, policy.Size{GPUs: 4}
	s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(4, 4), []policy.Job{j}, nil, pt.Models(), 260*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if a := decideRubick(t, s).Actions[0]; a.Kind != policy.Keep || a.Detail != "needs at least 6 GPUs, above the 4 GPUs it may have" {
		t.Errorf("min above max: %s (%s), want kept for both bounds", a.Kind, a.Detail)
	}

	for _, bad := range []policy.Size{{GPUs: -1}, {Nodes: -1}, {CPUs: -1}, {MemGB: -1}, {MemGB: math.NaN()}, {MemGB: math.Inf(1)}} {
		j := pt.NewJob("a", "small").GPUs(2).Obj()
		j.Min = bad
		if _, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(1, 8), []policy.Job{j}, nil, pt.Models(), 0); !errors.Is(err, policy.ErrBadSnapshot) || !strings.Contains(err.Error(), "min=") {
			t.Errorf("bound %+v: %v, want ErrBadSnapshot naming min", bad, err)
		}
	}
}

// A job's Min of memory is met by what it books as Slurm allocates it:
// under its partition's MaxMemPerCPU, the default per GPU cut to its CPUs.
// A job on 4 GPUs with 16 CPUs under 2 GB per CPU books 32 GB, below a
// minimum of 40 GB (Slurm would hold it, as fifo leaves it queued), so
// rubick grows it to 8 GPUs and 64 GB; held to 4 GPUs it waits. Held to
// its request, it may grow to the 8 GPUs a minimum of 64 GB takes (not
// the 4 that book 64 GB uncut). Without MaxMemPerCPU its 4 GPUs book 64
// GB, and so they do without a minimum.
func TestJobMinMemMaxMemPerCPU(t *testing.T) {
	na := func(node string, gpus, cpus int, memGB float64) policy.NodeAlloc {
		return policy.NodeAlloc{Node: node, GPUs: gpus, CPUs: cpus, MemGB: memGB}
	}
	for _, tc := range []struct {
		name        string
		perCPU, min float64
		maxGPUs     int
		within      bool // held to its request
		want        []policy.NodeAlloc
		detail      string
	}{
		{"2 GB per CPU, no minimum", 2, 0, 0, false, []policy.NodeAlloc{na("n0", 4, 16, 32)}, ""},
		{"2 GB per CPU, at least 40 GB", 2, 40, 0, false, []policy.NodeAlloc{na("n0", 4, 16, 32), na("n1", 4, 16, 32)}, ""},
		{"2 GB per CPU, at least 40 GB, 4 GPUs at most", 2, 40, 4, false, nil, "needs at least 40 GB"},
		{"no MaxMemPerCPU, at least 40 GB", 0, 40, 0, false, []policy.NodeAlloc{na("n0", 4, 16, 64)}, ""},
		{"2 GB per CPU, at least 64 GB, held to its request", 2, 64, 0, true, []policy.NodeAlloc{na("n0", 4, 16, 32), na("n1", 4, 16, 32)}, ""},
	} {
		j := pt.NewJob("a", "big").GPUs(2).CPUs(8).Obj()
		j.MaxMemPerCPUGB, j.Min.MemGB, j.Max.GPUs, j.WithinRequest = tc.perCPU, tc.min, tc.maxGPUs, tc.within
		s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(4, 4), []policy.Job{j}, nil, pt.Models(), 260*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		a := actionOf(t, "rubick", s, "a")
		if d := cmp.Diff(tc.want, a.Alloc); d != "" {
			t.Errorf("%s: %s (%s), allocation (-want +got):\n%s", tc.name, a.Kind, a.Detail, d)
		}
		if !strings.Contains(a.Detail, tc.detail) {
			t.Errorf("%s: detail %q, want it to say %q", tc.name, a.Detail, tc.detail)
		}
	}
}

// A job's NodeQuota (a Slurm group's node limit, which counts a node the
// group's jobs share once) lets it span at most New nodes outside Shared,
// with every policy; without the quota rubick spreads the job over n0 and
// n1, and the queue baselines start it on n0.
func TestJobNodeQuota(t *testing.T) {
	tests := map[string]struct {
		quota *policy.NodeQuota
		gpus  int // its request, 2 by default
	}{
		"none":                 {},
		"one new":              {quota: &policy.NodeQuota{Shared: []string{"n2"}, New: 1}},
		"shared alone":         {quota: &policy.NodeQuota{Shared: []string{"n2"}, New: 0}},
		"two shared":           {quota: &policy.NodeQuota{Shared: []string{"n2", "n3"}, New: 0}},
		"one new, none shared": {quota: &policy.NodeQuota{New: 1}},
		// Its request takes 2 nodes: the queue baselines cannot start it.
		"request past it": {quota: &policy.NodeQuota{Shared: []string{"n2"}, New: 0}, gpus: 8},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			quota := tc.quota
			j := pt.NewJob("a", "small").GPUs(stdcmp.Or(tc.gpus, 2)).CPUs(8).Obj()
			j.NodeQuota = quota
			s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(4, 4), []policy.Job{j}, nil, pt.Models(), 260*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, pol := range policy.Names() {
				a := decide(t, pol, s).Actions[0]
				var nodes []string
				outside := 0
				for _, n := range a.Alloc {
					nodes = append(nodes, n.Node)
					if quota != nil && !slices.Contains(quota.Shared, n.Node) {
						outside++
					}
				}
				switch {
				case quota != nil && outside > quota.New:
					t.Errorf("%s: on %v, %d nodes outside %v; want %d at most", pol, nodes, outside, quota.Shared, quota.New)
				case pol == "rubick" && a.Kind != policy.Start:
					t.Errorf("rubick: %s (%s), want a start", a.Kind, a.Detail)
				case quota == nil && pol == "rubick" && !slices.Equal(nodes, []string{"n0", "n1"}):
					t.Errorf("rubick without a quota started it on %v; the test needs n0 and n1", nodes)
				case quota == nil && pol == "fifo" && !slices.Equal(nodes, []string{"n0"}):
					t.Errorf("fifo without a quota started it on %v; the test needs n0", nodes)
				}
			}
		})
	}
	j := pt.NewJob("a", "small").GPUs(2).Obj()
	j.NodeQuota = &policy.NodeQuota{New: -1}
	if _, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(1, 8), []policy.Job{j}, nil, pt.Models(), 0); !errors.Is(err, policy.ErrBadSnapshot) || !strings.Contains(err.Error(), "node_quota.new=-1") {
		t.Errorf("negative quota: %v, want ErrBadSnapshot naming node_quota.new", err)
	}
}

// busyNode is a snapshot of one node of 8 GPUs and 32 CPUs, 4 GPUs and 26
// CPUs of which a running job holds, with job j queued.
func busyNode(t *testing.T, j policy.Job) *policy.Snapshot {
	t.Helper()
	other := pt.NewJob("busy", "small").GPUs(4).CPUs(26).Running(model.Plan{}, time.Hour, policy.NodeAlloc{Node: "n0", GPUs: 4, CPUs: 26, MemGB: 64}).Obj()
	nodes := pt.Cluster(1, 8)
	nodes[0].CPUs = 32
	plan, _, err := pt.Models()["small"].BestPlan(model.Resources{Placement: model.Placement{4}, CPUs: 26, HostMemGB: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	other.Plan = plan
	s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), nodes, []policy.Job{other, j}, nil, pt.Models(), 260*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// actionOf is policy pol's action for job id on s (zero: none).
func actionOf(t *testing.T, pol string, s *policy.Snapshot, id string) policy.Action {
	t.Helper()
	for _, a := range decide(t, pol, s).Actions {
		if a.JobID == id {
			return a
		}
	}
	return policy.Action{}
}

// A job's CPUsPerGPU (--cpus-per-gpu, which Slurm allocates whatever the
// job is resized to) is the fewest CPUs it gets per GPU, with every
// policy. On a node with 4 GPUs and 6 CPUs free, a job asking for 2 GPUs
// and 8 CPUs would otherwise run on 2 GPUs with the 6 CPUs.
func TestJobCPUsPerGPU(t *testing.T) {
	for _, cpg := range []int{0, 4} {
		j := pt.NewJob("a", "small").GPUs(2).CPUs(8).Obj()
		j.CPUsPerGPU = cpg
		s := busyNode(t, j)
		for _, pol := range policy.Names() {
			a := actionOf(t, pol, s, "a")
			gpus, cpus := 0, 0
			for _, n := range a.Alloc {
				gpus, cpus = gpus+n.GPUs, cpus+n.CPUs
			}
			switch {
			case a.Kind == policy.Start && cpus < cpg*gpus:
				t.Errorf("cpus_per_gpu %d, %s: started on %d GPUs with %d CPUs", cpg, pol, gpus, cpus)
			case cpg == 0 && pol == "rubick" && (a.Kind != policy.Start || cpus >= 4*gpus):
				t.Errorf("rubick without cpus_per_gpu: %s on %d GPUs with %d CPUs; the test needs a start below 4 CPUs per GPU", a.Kind, gpus, cpus)
			}
		}
	}
	j := pt.NewJob("a", "small").GPUs(2).Obj()
	j.CPUsPerGPU = -1
	if _, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(1, 8), []policy.Job{j}, nil, pt.Models(), 0); !errors.Is(err, policy.ErrBadSnapshot) || !strings.Contains(err.Error(), "cpus_per_gpu=-1") {
		t.Errorf("negative cpus_per_gpu: %v, want ErrBadSnapshot naming it", err)
	}
}

// A job in a partition with MaxMemPerCPU is booked no more host memory on
// a node than its CPUs there times MaxMemPerCPU, with every policy: Slurm
// would raise its CPUs to that, past what the policy counted free. The
// policy's default per GPU (HostMemPerGPUGB, 16 GB) is cut to fit; memory
// the job asked for per GPU is kept, with a CPU per MaxMemPerCPU of it.
// The node of TestJobCPUsPerGPU, and 4 GB per CPU: without the limit,
// rubick starts the job with 6 CPUs and 32 GB or more.
func TestJobMaxMemPerCPU(t *testing.T) {
	for _, tc := range []struct{ perCPU, perGPU float64 }{{0, 0}, {4, 0}, {4, 16}} {
		j := pt.NewJob("a", "small").GPUs(2).CPUs(8).Obj()
		j.MaxMemPerCPUGB, j.Request.MemPerGPUGB = tc.perCPU, tc.perGPU
		s := busyNode(t, j)
		for _, pol := range policy.Names() {
			a := actionOf(t, pol, s, "a")
			if a.Kind != policy.Start {
				continue
			}
			for _, n := range a.Alloc {
				switch {
				case tc.perCPU > 0 && n.MemGB > float64(n.CPUs)*tc.perCPU+1e-9:
					t.Errorf("%+v, %s: %d GPUs with %d CPUs and %.1f GB on %s, over MaxMemPerCPU", tc, pol, n.GPUs, n.CPUs, n.MemGB, n.Node)
				case n.MemGB < tc.perGPU*float64(n.GPUs)-1e-9:
					t.Errorf("%+v, %s: %d GPUs with %.1f GB on %s, below the job's memory per GPU", tc, pol, n.GPUs, n.MemGB, n.Node)
				case tc.perCPU == 0 && pol == "rubick" && n.MemGB <= float64(n.CPUs)*4:
					t.Errorf("rubick without MaxMemPerCPU: %d GPUs with %d CPUs and %.1f GB; the test needs more than 4 GB per CPU", n.GPUs, n.CPUs, n.MemGB)
				}
			}
		}
	}
	for _, v := range []float64{-1, math.Inf(1), math.NaN()} {
		j := pt.NewJob("a", "small").GPUs(2).Obj()
		j.MaxMemPerCPUGB = v
		if _, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(1, 8), []policy.Job{j}, nil, pt.Models(), 0); !errors.Is(err, policy.ErrBadSnapshot) || !strings.Contains(err.Error(), "max_mem_per_cpu_gb=") {
			t.Errorf("max_mem_per_cpu_gb %v: %v, want ErrBadSnapshot naming it", v, err)
		}
	}
}

// Where a job's own memory on a node (its --mem) is more than its CPUs
// there times MaxMemPerCPU, Slurm raises its CPUs to a CPU per
// MaxMemPerCPU of it: the rubick policies book those CPUs, and leave the
// job queued where the node has too few free. A job asking for 64 GB on 2
// GPUs under 4 GB per CPU takes 16 CPUs: on the busy node's 6 free CPUs
// it does not start, on an empty node it starts with 16 CPUs or more.
func TestJobMaxMemPerCPURaisesCPUs(t *testing.T) {
	j := pt.NewJob("a", "small").GPUs(2).CPUs(8).Obj()
	j.MaxMemPerCPUGB, j.Request.MemGB = 4, 64
	empty, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(1, 8), []policy.Job{j}, nil, pt.Models(), 260*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range []string{"rubick", "rubick-r", "sia"} {
		for name, s := range map[string]*policy.Snapshot{"busy node": busyNode(t, j), "empty node": empty} {
			a := actionOf(t, pol, s, "a")
			if name == "busy node" && a.Kind != policy.Keep {
				t.Errorf("%s, %s: %s on %+v, want it queued: Slurm would give it 16 CPUs, 6 are free", pol, name, a.Kind, a.Alloc)
			}
			if name == "empty node" && a.Kind != policy.Start {
				t.Errorf("%s, %s: %s (%s), want a start", pol, name, a.Kind, a.Detail)
			}
			for _, n := range a.Alloc {
				if n.MemGB > float64(n.CPUs)*j.MaxMemPerCPUGB+1e-9 {
					t.Errorf("%s, %s: %.1f GB with %d CPUs on %s: Slurm would raise the CPUs past what the policy booked", pol, name, n.MemGB, n.CPUs, n.Node)
				}
			}
		}
	}
}

// The host memory the rubick policies book for a job under MaxMemPerCPU
// while they choose the plans of a round is what its allocation records,
// cut to its CPUs times MaxMemPerCPU, not the default per GPU: on a node
// of 100 GB, a job on 4 GPUs with at most 16 CPUs under 2 GB per CPU
// takes 32 GB at most, which leaves the 64 GB another 4-GPU job books.
func TestMaxMemPerCPUBooksWhatAllocRecords(t *testing.T) {
	a := pt.NewJob("a", "small").GPUs(4).CPUs(16).Obj()
	a.MaxMemPerCPUGB, a.Max.CPUs = 2, 16
	b := pt.NewJob("b", "small").GPUs(4).CPUs(16).Obj()
	b.Max.CPUs = 16
	nodes := pt.Cluster(1, 8)
	nodes[0].MemGB = 100
	s, err := policy.NewSnapshot(pt.Epoch, nodes, []policy.Job{a, b}, nil, pt.Models(), 260*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range []string{"rubick", "rubick-r", "sia"} {
		mem := 0.0
		for _, act := range decide(t, pol, s).Actions {
			if act.Kind != policy.Start {
				t.Errorf("%s: job %s %s (%s), want both started", pol, act.JobID, act.Kind, act.Detail)
			}
			for _, n := range act.Alloc {
				mem += n.MemGB
			}
		}
		if mem > nodes[0].MemGB+1e-9 {
			t.Errorf("%s: %.1f GB booked on a node of %.0f", pol, mem, nodes[0].MemGB)
		}
	}
}

// offloadFast is the fake estimator with ZeRO-Offload plans 4x faster, so
// that the best plan offloads where the job's requested one does not.
type offloadFast struct{ *pt.Fake }

func (o offloadFast) Predict(p model.Plan, r model.Resources) (model.Breakdown, error) {
	b, err := o.Fake.Predict(p, r)
	if p.Offload {
		b.Iter /= 4
	}
	return b, err
}

func (o offloadFast) BestPlan(r model.Resources, allow func(model.Plan) bool) (model.Plan, model.Breakdown, error) {
	p, _, err := o.Fake.BestPlan(r, func(p model.Plan) bool { return p.Offload && (allow == nil || allow(p)) })
	if err != nil {
		return o.Fake.BestPlan(r, allow)
	}
	b, err := o.Predict(p, r)
	return p, b, err
}

// The queue policies book what Slurm allocates a job under its
// partition's MaxMemPerCPU, as the rubick policies do: a CPU per
// MaxMemPerCPU of the memory it gets on a node where its --mem or its
// plan's own need (ZeRO-Offload's states) is more than its CPUs there
// allow, taken from the node's free CPUs, so the next job sees what is
// left (b starts on n1, or with synergy's fewer CPUs beside a); no start,
// and no switch to a faster plan (rubick-e), where those CPUs are not
// free or take the job past its CPU bounds (Max.CPUs, Max.CPUsPerNode),
// which Slurm would hold it for: b starts in its place, and rubick-e runs
// a faster plan within them where there is one, or else leaves it queued
// as the others do (no room held for it, no job preempted for it); and the default per GPU cut to its CPUs,
// which fits a node with less free memory than the default. a asks for 4
// GPUs and 16 CPUs.
func TestQueueMaxMemPerCPU(t *testing.T) {
	nodes := func(n, cpus int, memGB float64) []policy.Node {
		out := pt.Cluster(n, 8)
		for i := range out {
			out[i].CPUs, out[i].MemGB = cpus, memGB
		}
		return out
	}
	job := func(m string, perCPU, memGB float64) policy.Job {
		j := pt.NewJob("a", m).GPUs(4).CPUs(16).Obj()
		j.MaxMemPerCPUGB, j.Request.MemGB = perCPU, memGB
		return j
	}
	offload := job("big", 2, 0)
	offload.Request.Plan = model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, ZeRO: 2, Offload: true}
	bounded, boundedNode := offload, offload
	bounded.Max.CPUs, boundedNode.Max.CPUsPerNode = 32, 32
	fast := job("fast", 2, 0)
	fast.Request.Plan = model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, ZeRO: 2}
	// Offloading is its fastest plan: rubick-e has none to switch to within
	// the bounds.
	fastBounded := job("fast", 2, 0)
	fastBounded.Request.Plan, fastBounded.Max.CPUs = offload.Request.Plan, 32
	fastBoundedNode := fastBounded
	fastBoundedNode.Max.CPUs, fastBoundedNode.Max.CPUsPerNode = 0, 32
	r := pt.NewJob("r", "small").GPUs(4).TimeLimit(time.Hour).Running(dp(4, 32), 10*time.Minute, pt.On("n0", 4)).Obj()
	fastGuaranteed := fastBounded
	fastGuaranteed.Guaranteed = true
	v := pt.NewJob("v", "small").GPUs(8).Running(dp(8, 32), 10*time.Minute, policy.NodeAlloc{Node: "n0", GPUs: 8, CPUs: 32, MemGB: 128}).Obj()
	b := pt.NewJob("b", "small").GPUs(4).CPUs(16).SubmittedAt(time.Second).Obj()
	na := func(node string, gpus, cpus int, memGB float64) policy.NodeAlloc {
		return policy.NodeAlloc{Node: node, GPUs: gpus, CPUs: cpus, MemGB: memGB}
	}
	requested := []string{"fifo", "antman", "rubick-e", "rubick-n"}
	for _, tc := range []struct {
		name  string
		pols  []string
		nodes []policy.Node
		jobs  []policy.Job
		want  map[string][]policy.NodeAlloc // by job; nil: queued
		why   string                        // in a's detail
	}{
		{"--mem=128G under 4 GB per CPU: 32 CPUs", requested, nodes(2, 40, 1600), []policy.Job{job("small", 4, 128), b},
			map[string][]policy.NodeAlloc{"a": {na("n0", 4, 32, 128)}, "b": {na("n1", 4, 16, 64)}}, ""},
		{"--mem=128G under 4 GB per CPU, CPUs tuned", []string{"synergy"}, nodes(2, 40, 1600), []policy.Job{job("small", 4, 128), b},
			map[string][]policy.NodeAlloc{"a": {na("n0", 4, 32, 128)}, "b": {na("n0", 4, 4, 64)}}, ""},
		{"--mem=128G under 4 GB per CPU, 24 CPUs", append(requested, "synergy"), nodes(1, 24, 1600), []policy.Job{job("small", 4, 128)},
			map[string][]policy.NodeAlloc{"a": nil}, "needs 4 GPUs per node with a CPU per 4 GB of its memory (MaxMemPerCPU)"},
		{"84 GB of offloaded states under 2 GB per CPU: 42 CPUs", []string{"fifo", "antman", "rubick-n"}, nodes(2, 48, 1600), []policy.Job{offload, b},
			map[string][]policy.NodeAlloc{"a": {na("n0", 4, 42, 84)}, "b": {na("n1", 4, 16, 64)}}, ""},
		{"84 GB of offloaded states under 2 GB per CPU, CPUs tuned", []string{"synergy"}, nodes(2, 48, 1600), []policy.Job{offload, b},
			map[string][]policy.NodeAlloc{"a": {na("n0", 4, 42, 84)}, "b": {na("n0", 4, 4, 64)}}, ""},
		{"42 CPUs for offloaded states, over a bound of 32", []string{"fifo", "antman", "rubick-n"}, nodes(1, 48, 1600), []policy.Job{bounded, b},
			map[string][]policy.NodeAlloc{"a": nil, "b": {na("n0", 4, 16, 64)}}, "needs 4 GPUs per node with a CPU per 2 GB of its memory (MaxMemPerCPU), within 32 CPUs"},
		{"42 CPUs for offloaded states, over a bound of 32 per node", []string{"fifo", "antman", "rubick-n"}, nodes(1, 48, 1600), []policy.Job{boundedNode, b},
			map[string][]policy.NodeAlloc{"a": nil, "b": {na("n0", 4, 16, 64)}}, "(MaxMemPerCPU), within 32 CPUs per node"},
		{"42 CPUs for offloaded states, over a bound of 32, CPUs tuned", []string{"synergy"}, nodes(1, 48, 1600), []policy.Job{bounded, b},
			map[string][]policy.NodeAlloc{"a": nil, "b": {na("n0", 4, 4, 64)}}, ""},
		{"42 CPUs for offloaded states, over a bound of 32, a faster plan within it", []string{"rubick-e"}, nodes(1, 48, 1600), []policy.Job{bounded, b},
			map[string][]policy.NodeAlloc{"a": {na("n0", 4, 16, 32)}, "b": {na("n0", 4, 16, 64)}}, ""},
		{"42 CPUs for offloaded states, over a bound of 32, no faster plan", []string{"rubick-e"}, nodes(1, 48, 1600), []policy.Job{fastBounded, b},
			map[string][]policy.NodeAlloc{"a": nil, "b": {na("n0", 4, 16, 64)}}, "needs 4 GPUs per node with a CPU per 2 GB of its memory (MaxMemPerCPU), within 32 CPUs"},
		{"42 CPUs for offloaded states, over a bound of 32 per node, no faster plan", []string{"rubick-e"}, nodes(1, 48, 1600), []policy.Job{fastBoundedNode, b},
			map[string][]policy.NodeAlloc{"a": nil, "b": {na("n0", 4, 16, 64)}}, "(MaxMemPerCPU), within 32 CPUs per node"},
		// a, never to start so, holds no room for itself that b must leave.
		{"42 CPUs for offloaded states, over a bound of 32, no faster plan, backfill", []string{"rubick-e"}, nodes(1, 80, 1600), []policy.Job{r, fastBounded, b},
			map[string][]policy.NodeAlloc{"r": {pt.On("n0", 4)}, "a": nil, "b": {na("n0", 4, 16, 64)}}, "within 32 CPUs"},
		{"42 CPUs for offloaded states, over a bound of 32, no faster plan, guaranteed", []string{"rubick-e"}, nodes(1, 48, 1600), []policy.Job{v, fastGuaranteed},
			map[string][]policy.NodeAlloc{"v": {na("n0", 8, 32, 128)}, "a": nil}, "within 32 CPUs"},
		{"an offloading plan faster, its 42 CPUs free", []string{"rubick-e"}, nodes(1, 48, 1600), []policy.Job{fast},
			map[string][]policy.NodeAlloc{"a": {na("n0", 4, 42, 84)}}, ""},
		{"an offloading plan faster, 40 CPUs", []string{"rubick-e"}, nodes(1, 40, 1600), []policy.Job{fast},
			map[string][]policy.NodeAlloc{"a": {na("n0", 4, 16, 32)}}, ""},
		{"default per GPU cut to 32 GB on a node of 40", requested, nodes(1, 96, 40), []policy.Job{job("small", 2, 0)},
			map[string][]policy.NodeAlloc{"a": {na("n0", 4, 16, 32)}}, ""},
	} {
		models := pt.Models()
		models["fast"] = offloadFast{&pt.Fake{S: pt.Specs()["big"]}}
		s, err := policy.NewSnapshot(pt.Epoch, tc.nodes, tc.jobs, nil, models, 260*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, pol := range tc.pols {
			got := map[string][]policy.NodeAlloc{}
			why := ""
			for _, a := range decide(t, pol, s).Actions {
				got[a.JobID] = a.Alloc
				if a.JobID == "a" {
					why = a.Detail
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s, %s: allocations (-want +got):\n%s", tc.name, pol, d)
			}
			if !strings.Contains(why, tc.why) {
				t.Errorf("%s, %s: a's detail %q, want it to say %q", tc.name, pol, why, tc.why)
			}
		}
	}
}

// cpuHungry is the fake estimator with every plan slower by a second over
// its CPUs (data loading), so that more CPUs always pay.
type cpuHungry struct{ *pt.Fake }

func (o cpuHungry) Predict(p model.Plan, r model.Resources) (model.Breakdown, error) {
	b, err := o.Fake.Predict(p, r)
	b.Iter += 1 / float64(max(1, r.CPUs))
	return b, err
}

func (o cpuHungry) BestPlan(r model.Resources, allow func(model.Plan) bool) (model.Plan, model.Breakdown, error) {
	p, _, err := o.Fake.BestPlan(r, allow)
	if err != nil {
		return p, model.Breakdown{}, err
	}
	b, err := o.Predict(p, r)
	return p, b, err
}

// The rubick policies grow a job within its host memory bound (Max.MemGB)
// by what it books under its partition's MaxMemPerCPU: the default per
// GPU cut to its CPUs. A job asking for 4 GPUs and 16 CPUs under a bound
// of 32 GB and 2 GB per CPU books 8 GB a GPU, and gets its 4 GPUs, not
// the 2 the uncut 16 GB a GPU allow; CPUs that pay are not given past
// the bound, where no plan would fit. Under a bound of 6 GB it waits,
// told that one GPU books 8 GB.
func TestMaxMemPerCPUWithinMemBound(t *testing.T) {
	na := func(node string, gpus, cpus int, memGB float64) policy.NodeAlloc {
		return policy.NodeAlloc{Node: node, GPUs: gpus, CPUs: cpus, MemGB: memGB}
	}
	for _, tc := range []struct {
		name   string
		model  string
		perCPU float64
		cpus   int     // the node's, for 8 GPUs
		bound  float64 // Max.MemGB
		want   []policy.NodeAlloc
		detail string
	}{
		{"2 GB per CPU", "small", 2, 32, 32, []policy.NodeAlloc{na("n0", 4, 16, 32)}, ""},
		{"no MaxMemPerCPU: 16 GB a GPU", "small", 0, 32, 32, []policy.NodeAlloc{na("n0", 2, 8, 32)}, ""},
		{"2 GB per CPU, CPUs that pay", "hungry", 2, 64, 32, []policy.NodeAlloc{na("n0", 4, 16, 32)}, ""},
		{"2 GB per CPU, a bound below one GPU", "small", 2, 32, 6, nil, "is below the 8 GB one GPU books"},
	} {
		j := pt.NewJob("a", tc.model).GPUs(4).CPUs(16).Obj()
		j.MaxMemPerCPUGB, j.Max.MemGB = tc.perCPU, tc.bound
		nodes := pt.Cluster(1, 8)
		nodes[0].CPUs = tc.cpus
		checkOneJob(t, tc.name, j, nodes, []string{"rubick", "rubick-r", "sia"}, tc.want, tc.detail)
	}
}

// checkOneJob decides snapshot nodes with job "a" alone under each of
// pols, the "hungry" model among the models, and checks a's allocation and
// that its detail says detail.
func checkOneJob(t *testing.T, name string, j policy.Job, nodes []policy.Node, pols []string, want []policy.NodeAlloc, detail string) {
	t.Helper()
	models := pt.Models()
	models["hungry"] = cpuHungry{&pt.Fake{S: pt.Specs()["small"]}}
	s, err := policy.NewSnapshot(pt.Epoch, nodes, []policy.Job{j}, nil, models, 260*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range pols {
		a := actionOf(t, pol, s, "a")
		if d := cmp.Diff(want, a.Alloc); d != "" {
			t.Errorf("%s, %s: %s (%s), allocation (-want +got):\n%s", name, pol, a.Kind, a.Detail, d)
		}
		if !strings.Contains(a.Detail, detail) {
			t.Errorf("%s, %s: detail %q, want it to say %q", name, pol, a.Detail, detail)
		}
	}
}

// The rubick policies grow a job on a node within the memory it has free
// (and the job's bound per node, Max.MemGBPerNode) by what it books there
// under its partition's MaxMemPerCPU: the default per GPU cut to its CPUs.
// On a node of 40 GB, a job asking for 4 GPUs and 16 CPUs under 2 GB per
// CPU books 8 GB a GPU and gets its 4 GPUs, as fifo starts it, not the 2
// the uncut 16 GB a GPU allow; under a bound of 10 GB per node it gets 1,
// and under 6 it waits, told that one GPU books 8 GB. CPUs that pay are
// given only as far as the node's memory holds what they book, where a
// plan still fits.
func TestMaxMemPerCPUWithinNodeMem(t *testing.T) {
	na := func(gpus, cpus int, memGB float64) []policy.NodeAlloc {
		return []policy.NodeAlloc{{Node: "n0", GPUs: gpus, CPUs: cpus, MemGB: memGB}}
	}
	rubicks := []string{"rubick", "rubick-r", "sia"}
	for _, tc := range []struct {
		name    string
		model   string
		perCPU  float64
		nodeMem float64
		perNode float64 // Max.MemGBPerNode
		pols    []string
		want    []policy.NodeAlloc
		detail  string
	}{
		{"2 GB per CPU, 40 GB free", "small", 2, 40, 0, rubicks, na(4, 16, 32), ""},
		{"no MaxMemPerCPU, 40 GB free: 16 GB a GPU", "small", 0, 40, 0, rubicks, na(2, 8, 32), ""},
		{"2 GB per CPU, a bound of 40 GB per node", "small", 2, 1600, 40, rubicks, na(4, 16, 32), ""},
		{"2 GB per CPU, a bound of 10 GB per node", "small", 2, 1600, 10, rubicks, na(1, 4, 8), ""},
		{"2 GB per CPU, a bound per node below one GPU", "small", 2, 1600, 6, rubicks, nil, "is below the 8 GB one GPU books"},
		// sia gives no CPUs past those that come with the GPUs.
		{"2 GB per CPU, 40 GB free, CPUs that pay", "hungry", 2, 40, 0, []string{"rubick", "rubick-r"}, na(4, 20, 40), ""},
	} {
		j := pt.NewJob("a", tc.model).GPUs(4).CPUs(16).Obj()
		j.MaxMemPerCPUGB, j.Max.MemGBPerNode = tc.perCPU, tc.perNode
		nodes := pt.Cluster(1, 8)
		nodes[0].MemGB = tc.nodeMem
		checkOneJob(t, tc.name, j, nodes, tc.pols, tc.want, tc.detail)
	}
}

// A queued job takes no more of the GPUs a victim frees than its room: on
// a node a best-effort job holds whole, one asking for 4 GPUs under a
// memory bound of 20 GB (16 GB a GPU) takes 1 of the 4 the victim frees
// (dp8 to dp4), and the rest stay free; taken whole, no plan fit it and
// the victim was shrunk for nothing. Under 2 GB per CPU (8 GB a GPU with
// its 4 CPUs) it takes 1 under a bound of 10 GB and 2 under 20.
func TestVictimGPUsWithinRoom(t *testing.T) {
	for _, tc := range []struct {
		perCPU, bound float64
		gpus          int
	}{{0, 20, 1}, {2, 10, 1}, {2, 20, 2}} {
		j := pt.NewJob("a", "small").GPUs(4).CPUs(16).SubmittedAt(time.Hour).Obj()
		j.MaxMemPerCPUGB, j.Max.MemGB = tc.perCPU, tc.bound
		busy := pt.NewJob("busy", "small").GPUs(8).Running(dp(8, 32), time.Hour, pt.On("n0", 8)).Obj()
		s := snap(t, time.Hour, pt.Cluster(1, 8), nil, busy, j)
		want := map[string]outcome{
			"a":    {Kind: policy.Start, GPUs: tc.gpus, Reason: policy.ReasonSlope},
			"busy": {Kind: policy.Shrink, GPUs: 4, Reason: policy.ReasonReclaimed},
		}
		for _, pol := range []string{"rubick", "rubick-r", "sia"} {
			if d := cmp.Diff(want, outcomes(decide(t, pol, s))); d != "" {
				t.Errorf("%g GB per CPU, a bound of %g GB, %s: (-want +got):\n%s", tc.perCPU, tc.bound, pol, d)
			}
		}
	}
}

// A guaranteed job reclaims GPUs from a best-effort one no further than
// the victim's minimum: below it Slurm would hold the victim's restart, so
// it gives up all its GPUs or none. Without the minimum it is shrunk to 4.
func TestJobMinVictim(t *testing.T) {
	for _, min := range []int{0, 6} {
		be := pt.NewJob("be", "small").GPUs(8).Running(dp(8, 32), 10*time.Minute, pt.On("n0", 8)).Obj()
		be.Min.GPUs = min
		g := pt.NewJob("g", "small").GPUs(4).Guaranteed().SubmittedAt(59 * time.Minute).Obj()
		s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(1, 8), []policy.Job{be, g}, []policy.Tenant{{Name: "default", GPUQuota: 8}}, pt.Models(), 260*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		p := decideRubick(t, s)
		got := map[string]int{}
		for _, a := range p.Actions {
			for _, n := range a.Alloc {
				got[a.JobID] += n.GPUs
			}
		}
		want := map[string]int{"be": 4, "g": 4}
		if min > 0 {
			want = map[string]int{"g": 8} // be preempted; g grows into its GPUs
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("victim's min %d: GPUs (-want +got):\n%s", min, d)
		}
	}
}

// Under a memory bound a job that asked for memory is booked from its own
// request alone (4 GB per GPU here, below the policy's 16 and the model's
// 16 per node), so it starts within a bound the default booking could
// never fit; the twin without a memory request shows the default cannot.
func TestMemoryBoundBooksOwnRequest(t *testing.T) {
	for _, asked := range []float64{8, 0} {
		j := pt.NewJob("a", "small").GPUs(2).CPUs(8).Obj()
		j.Request.MemGB = asked
		j.Max.MemGB = 12
		models := pt.Models()
		models["small"].(*pt.Fake).HostBaseGB = 16
		s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(2, 8), []policy.Job{j}, nil, models, 260*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"rubick", "sia"} {
			a := decide(t, name, s).Actions[0]
			gpus, mem := 0, 0.0
			for _, n := range a.Alloc {
				gpus += n.GPUs
				mem += n.MemGB
			}
			switch {
			case asked > 0 && (gpus < 2 || mem > 12):
				t.Errorf("%s: job asking 8 GB for 2 GPUs under a 12 GB bound got %d GPUs, %.0f GB (%s: %s); want a start within the bound",
					name, gpus, mem, a.Reason, a.Detail)
			case asked == 0 && gpus > 0:
				t.Errorf("%s: job without a memory request got %d GPUs, %.0f GB under a 12 GB bound; the default booking (16 per GPU, 16 per node) cannot fit",
					name, gpus, mem)
			case asked == 0 && !strings.Contains(a.Detail, "below the 32 GB one GPU books"):
				t.Errorf("%s: waits with %q, want it to say its bound is below the 32 GB one GPU books", name, a.Detail)
			}
		}
	}
}

// A job keeps the host memory it asked for when a policy gives it other
// GPUs, as Slurm reads the request: per node (--mem) or per GPU
// (--mem-per-gpu); a job that asked for less gets the policy's 16 GB per
// GPU. One asking for 500 GB per GPU is grown no further than its nodes'
// 1,600 GB allow (grown past them, no plan would fit and it would not
// start at all); one asking for a whole node's 1,600 still starts.
func TestMemoryRequest(t *testing.T) {
	tests := []struct {
		perNode, perGPU float64 // asked for with 2 GPUs on one node
	}{{perNode: 8}, {perNode: 100}, {perNode: 1000}, {perNode: 1600}, {perGPU: 4}, {perGPU: 50}, {perGPU: 500}}
	for _, tc := range tests {
		j := pt.NewJob("a", "small").GPUs(2).CPUs(8).Obj()
		j.Request.Placement = model.Placement{2}
		j.Request.MemGB, j.Request.MemPerGPUGB = tc.perNode+2*tc.perGPU, tc.perGPU
		s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(2, 8), []policy.Job{j}, nil, pt.Models(), 260*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		def := policy.DefaultConfig().HostMemPerGPUGB
		for _, name := range policy.Names() {
			a := decide(t, name, s).Actions[0]
			gpus := 0
			for _, n := range a.Alloc {
				gpus += n.GPUs
				if want := max(def*float64(n.GPUs), tc.perNode, tc.perGPU*float64(n.GPUs)); n.MemGB < want || n.MemGB > 1600 {
					t.Errorf("%s: %+v: %d GPUs on %s with %.0f GB, want %.0f to 1600", name, tc, n.GPUs, n.Node, n.MemGB, want)
				}
			}
			if gpus < 2 {
				t.Errorf("%s: %+v: got %d GPUs (%s: %s); want a start", name, tc, gpus, a.Reason, a.Detail)
			}
			if name == "rubick" && gpus <= 2 {
				t.Errorf("rubick gave the job %d GPUs; the test needs it to grow", gpus)
			}
		}
	}
}

// Jobs of one group (a Slurm group limit) stay within it together, each
// still bounded alone by its Max: two jobs that would each take 4 GPUs
// share a group's 4, and both start; under a group's 16 CPUs too, the
// second taking GPUs, and with them CPUs, from the first. The twin
// without the bound shows they would take 8 GPUs and 32 CPUs. A group that
// lets one job run starts the older, and the other waits naming it.
func TestGroups(t *testing.T) {
	tests := map[string]struct {
		group      policy.Group
		gpus, cpus int // the most both jobs may hold together; 0: any
		starts     int
		waits      string // what the job that does not start says
	}{
		"none": {group: policy.Group{Name: "g", GPUs: -1, CPUs: -1, Jobs: -1}, starts: 2},
		"GPUs": {group: policy.Group{Name: "g", GPUs: 4, CPUs: -1, Jobs: -1}, gpus: 4, starts: 2},
		"CPUs": {group: policy.Group{Name: "g", GPUs: -1, CPUs: 16, Jobs: -1}, cpus: 16, starts: 2},
		"jobs": {group: policy.Group{Name: "g", GPUs: -1, CPUs: -1, Jobs: 1}, starts: 1, gpus: 8, cpus: 32,
			waits: "g: 1 of its jobs run here, as many as are left to them"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := pt.NewJob("a", "small").GPUs(2).CPUs(8).SubmittedAt(0).Obj()
			b := pt.NewJob("b", "small").GPUs(2).CPUs(8).SubmittedAt(time.Minute).Obj()
			a.Groups, b.Groups = []string{"g"}, []string{"g"}
			a.Max.GPUs, b.Max.GPUs = 4, 4
			s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(2, 8), []policy.Job{a, b}, nil, pt.Models(), 260*time.Second,
				policy.WithGroups([]policy.Group{tc.group}))
			if err != nil {
				t.Fatal(err)
			}
			for _, pol := range []string{"rubick", "sia", "rubick-r"} {
				gpus, cpus, starts := 0, 0, 0
				for _, act := range decide(t, pol, s).Actions {
					if act.Kind == policy.Start {
						starts++
						if tc.waits != "" && act.JobID != "a" {
							t.Errorf("%s: job %s starts, want the older a", pol, act.JobID)
						}
					} else if act.Reason != policy.ReasonGroup || !strings.Contains(act.Detail, stdcmp.Or(tc.waits, "g: its jobs here hold")) {
						t.Errorf("%s: job %s waits with %s: %s, want group-limit naming the group", pol, act.JobID, act.Reason, act.Detail)
					}
					for _, n := range act.Alloc {
						gpus += n.GPUs
						cpus += n.CPUs
					}
				}
				if starts != tc.starts {
					t.Errorf("%s: %d jobs start, want %d", pol, starts, tc.starts)
				}
				if tc.gpus > 0 && gpus > tc.gpus || tc.cpus > 0 && cpus > tc.cpus {
					t.Errorf("%s: the group's jobs hold %d GPUs, %d CPUs together, want at most %+v", pol, gpus, cpus, tc.group)
				}
				if tc.waits == "" && tc.gpus == 0 && tc.cpus == 0 && (gpus <= 4 || cpus <= 16) {
					t.Errorf("%s: unbounded, the jobs took %d GPUs, %d CPUs; the test needs more than 4 and 16", pol, gpus, cpus)
				}
			}
		})
	}
	for name, groups := range map[string][]policy.Group{
		"empty name":    {{Name: "", GPUs: 1, CPUs: -1, Jobs: -1}},
		"duplicate":     {{Name: "g", GPUs: 1, CPUs: -1, Jobs: -1}, {Name: "g", GPUs: 2, CPUs: -1, Jobs: -1}},
		"negative":      {{Name: "g", GPUs: -2, CPUs: -1, Jobs: -1}},
		"negative jobs": {{Name: "g", GPUs: -1, CPUs: -1, Jobs: -3}},
	} {
		if _, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(1, 8), nil, nil, pt.Models(), 0, policy.WithGroups(groups)); !errors.Is(err, policy.ErrBadSnapshot) {
			t.Errorf("%s: %v, want ErrBadSnapshot", name, err)
		}
	}
	j := pt.NewJob("a", "small").GPUs(2).Obj()
	j.Groups = []string{"nowhere"}
	if _, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(1, 8), []policy.Job{j}, nil, pt.Models(), 0); !errors.Is(err, policy.ErrBadSnapshot) || !strings.Contains(err.Error(), `"nowhere"`) {
		t.Errorf("unknown group: %v, want ErrBadSnapshot naming it", err)
	}
}

// A queued job of a group may take a victim's GPUs outside the group only
// as far as the group has room: none (it waits), 2 of the 4 the victim
// frees (the rest stay free), or, unbounded, all 4.
func TestGroupVictims(t *testing.T) {
	for _, tc := range []struct{ room, want int }{{0, 0}, {2, 2}, {-1, 4}} {
		d := pt.NewJob("d", "small").GPUs(8).CPUs(32).SubmittedAt(0).
			Running(model.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, Accum: 1}, 10*time.Hour, pt.On("n0", 8)).Obj()
		b := pt.NewJob("b", "small").GPUs(2).CPUs(8).SubmittedAt(time.Minute).Obj()
		b.Groups = []string{"g"}
		s, err := policy.NewSnapshot(pt.Epoch.Add(11*time.Hour), pt.Cluster(1, 8), []policy.Job{d, b}, nil, pt.Models(), 260*time.Second,
			policy.WithGroups([]policy.Group{{Name: "g", GPUs: tc.room, CPUs: -1, Jobs: -1}}))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, a := range decide(t, "rubick", s).Actions {
			if a.JobID != "b" {
				continue
			}
			for _, n := range a.Alloc {
				got += n.GPUs
			}
			if tc.want == 0 && (a.Reason != policy.ReasonGroup || !strings.Contains(a.Detail, "g: its jobs here hold 0 of the 0 GPUs left to them")) {
				t.Errorf("group room 0: the queued job waits with %s: %q, want group-limit naming the group", a.Reason, a.Detail)
			}
		}
		if got != tc.want {
			t.Errorf("group room %d: the queued job got %d GPUs, want %d", tc.room, got, tc.want)
		}
	}
}

// A job that may run on some nodes only (its --constraint and --exclude)
// gets GPUs there alone, from every policy, though the others are free.
func TestJobNodes(t *testing.T) {
	j := pt.NewJob("a", "small").GPUs(4).Obj()
	j.Nodes = []string{"n2"}
	s, err := policy.NewSnapshot(pt.Epoch.Add(time.Hour), pt.Cluster(4, 8), []policy.Job{j}, nil, pt.Models(), 260*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range policy.Names() {
		a := decide(t, name, s).Actions[0]
		if len(a.Alloc) == 0 {
			t.Errorf("%s: %s (%s: %s), want a start on n2", name, a.Kind, a.Reason, a.Detail)
		}
		for _, n := range a.Alloc {
			if n.Node != "n2" {
				t.Errorf("%s: GPUs on %s, want n2 only", name, n.Node)
			}
		}
	}
}

// A queued job past the starvation age says it goes first; the oldest one
// that cannot start, that the GPUs that free up are held for it. Started,
// a starving job says so after its plan.
func TestQueuedDetail(t *testing.T) {
	p, err := policy.New("rubick", policy.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		running int // GPUs the running job holds of the node's 8
		want    map[string]string
	}{
		{"nothing free", 8, map[string]string{
			"old": "past the starvation age: goes first; the GPUs that free up are held for it",
			"new": "no GPU free; running job r holding 8 GPUs may not be reconfigured yet (reconfiguration rule): from 43m20s run time, in 23m20s",
		}},
		{"room for both", 4, map[string]string{
			"old": "dp1.tp2.pp1.mb8.a1.z0 on 2 with 16 CPUs: 3.13 samples/s (0.71x request); past the starvation age: goes first",
			"new": "dp1.tp2.pp1.mb8.a1.z0 on 2 with 16 CPUs: 3.13 samples/s (0.71x request)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs := []policy.Job{
				pt.NewJob("r", "small").GPUs(tc.running).Running(dp(tc.running, 32), 20*time.Minute, pt.On("n0", tc.running)).Obj(),
				pt.NewJob("old", "big").GPUs(4).SubmittedAt(time.Hour).Obj(),
				pt.NewJob("new", "big").GPUs(4).SubmittedAt(5*time.Hour + 50*time.Minute).Obj(),
			}
			plan, err := p.Decide(context.Background(), snap(t, 6*time.Hour, pt.Cluster(1, 8), nil, jobs...))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, a := range plan.Actions {
				if a.JobID != "r" {
					got[a.JobID] = a.Detail
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("details (-want +got):\n%s\nactions %+v", diff, plan.Actions)
			}
		})
	}
}

// Each action says where its job stood in the round's best-effort order,
// and a guaranteed job's its minimum resources, for rubick explain.
func TestOrder(t *testing.T) {
	// long (5 h limit), short (10 min) and none (no limit) queue for one
	// GPU behind r, which the restart penalty holds out of the order.
	queued := oneGPUFor(pt.NewJob("long", "small").GPUs(2).TimeLimit(5*time.Hour).SubmittedAt(time.Minute).Obj(),
		pt.NewJob("short", "small").GPUs(2).TimeLimit(10*time.Minute).SubmittedAt(2*time.Minute).Obj(),
		pt.NewJob("none", "small").GPUs(2).SubmittedAt(3*time.Minute).Obj())
	type view struct {
		Position, Of, QueuedAhead int
		By                        string
		TimeLeftH                 string
		NoTimeLimit               bool
		MinRes                    string
		Admission                 string // position/of by
	}
	tests := map[string]struct {
		policy string
		config func(*policy.Config)
		now    time.Duration
		jobs   []policy.Job
		want   map[string]view
	}{
		"rubick weighs time left; no limit counts as the longest": {
			policy: "rubick", now: time.Hour, jobs: queued,
			want: map[string]view{
				"r":     {},
				"short": {1, 3, 0, "slope", "0.167", false, "", ""},
				"long":  {2, 3, 1, "slope", "5.000", false, "", ""},
				"none":  {3, 3, 2, "slope", "5.000", true, "", ""},
			},
		},
		"sia orders by slope, then submission": {
			policy: "sia", now: time.Hour, jobs: queued,
			want: map[string]view{
				"r":     {},
				"long":  {1, 3, 0, "slope", "0.000", false, "", ""},
				"short": {2, 3, 1, "slope", "0.000", false, "", ""},
				"none":  {3, 3, 2, "slope", "0.000", false, "", ""},
			},
		},
		"a starving job heads the order; running jobs count in it": {
			policy: "rubick", config: fairShare, now: 10 * time.Hour,
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(4).SubmittedAt(7*time.Hour).Running(dp(4, 32), 3*time.Hour, pt.On("n0", 4)).Obj(),
				pt.NewJob("old", "big").GPUs(4).SubmittedAt(time.Hour).FairShare(0.1).Obj(),
				pt.NewJob("new", "small").GPUs(1).SubmittedAt(10*time.Hour - time.Minute).FairShare(0.9).Obj(),
			},
			want: map[string]view{
				"old": {1, 3, 0, "starvation", "0.000", false, "", ""},
				"new": {2, 3, 1, "fairshare", "0.000", false, "", ""},
				"r":   {3, 3, 2, "fairshare", "0.000", false, "", ""},
			},
		},
		"only a queued job past the starvation age heads the order; queued ahead counts queued jobs only": {
			policy: "rubick", now: 10 * time.Hour,
			jobs: []policy.Job{
				pt.NewJob("r", "small").GPUs(4).Running(dp(4, 32), 3*time.Hour, pt.On("n0", 4)).Obj(),
				pt.NewJob("old", "big").GPUs(4).SubmittedAt(time.Hour).Obj(),
				pt.NewJob("new", "small").GPUs(1).SubmittedAt(10*time.Hour - time.Minute).Obj(),
			},
			want: map[string]view{
				"old": {1, 3, 0, "starvation", "0.000", false, "", ""},
				"new": {2, 3, 1, "slope", "0.000", false, "", ""},
				"r":   {3, 3, 2, "slope", "0.000", false, "", ""},
			},
		},
		"a guaranteed job has minimum resources, and an order once running": {
			policy: "rubick", now: 10 * time.Hour,
			jobs: []policy.Job{
				pt.NewJob("g", "small").GPUs(4).Guaranteed().Running(dp(4, 32), 3*time.Hour, pt.On("n0", 4)).Obj(),
				pt.NewJob("q", "small").GPUs(8).Guaranteed().SubmittedAt(10*time.Hour - time.Minute).Obj(),
			},
			want: map[string]view{
				"g": {1, 1, 0, "slope", "0.000", false, "4 GPUs", ""},
				"q": {MinRes: "8 GPUs", Admission: "1/1 shortest"},
			},
		},
		"queued guaranteed jobs: near a deadline, past the age, then shortest limit": {
			policy: "rubick", now: 10 * time.Hour,
			jobs: []policy.Job{
				pt.NewJob("long", "small").GPUs(8).Guaranteed().TimeLimit(4 * time.Hour).SubmittedAt(9 * time.Hour).Obj(),
				pt.NewJob("short", "small").GPUs(8).Guaranteed().TimeLimit(time.Hour).SubmittedAt(9 * time.Hour).Obj(),
				pt.NewJob("old", "small").GPUs(8).Guaranteed().TimeLimit(4 * time.Hour).SubmittedAt(time.Hour).Obj(),
				pt.NewJob("dl", "small").GPUs(8).Guaranteed().TimeLimit(4 * time.Hour).SubmittedAt(9 * time.Hour).StartBy(10*time.Hour + 10*time.Minute).Obj(),
			},
			want: map[string]view{
				"dl":    {MinRes: "8 GPUs", Admission: "1/4 deadline"},
				"old":   {MinRes: "8 GPUs", Admission: "2/4 age"},
				"short": {MinRes: "8 GPUs", Admission: "3/4 shortest"},
				"long":  {MinRes: "8 GPUs", Admission: "4/4 shortest"},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := policy.DefaultConfig()
			if tc.config != nil {
				tc.config(&cfg)
			}
			p, err := policy.New(tc.policy, cfg)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := p.Decide(context.Background(), snap(t, tc.now, pt.Cluster(1, 8), nil, tc.jobs...))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]view{}
			for _, a := range plan.Actions {
				var v view
				if o := a.Order; o != nil {
					v = view{o.Position, o.Of, o.QueuedAhead, o.By, fmt.Sprintf("%.3f", o.TimeLeftH), o.NoTimeLimit, "", ""}
					key := o.Slope
					if o.TimeLeftH > 0 {
						key /= math.Pow(o.TimeLeftH, cfg.TimeWeight)
					}
					if !(o.Slope > 0) || math.Abs(o.WeighedSlope-key) > 1e-9*key {
						t.Errorf("job %s: slope %g, weighed %g, want > 0 and %g", a.JobID, o.Slope, o.WeighedSlope, key)
					}
				}
				if a.MinRes != nil {
					v.MinRes = a.MinRes.String()
				}
				if ad := a.Admission; ad != nil {
					v.Admission = fmt.Sprintf("%d/%d %s", ad.Position, ad.Of, ad.By)
				}
				got[a.JobID] = v
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("orders (-want +got):\n%s\nplan %+v", diff, plan.Actions)
			}
		})
	}
}

// A running job whose faster plan does not fit the node's host memory
// keeps its plan and the memory it holds, and the jobs placed after it in
// the round get no more than the rest of the node.
func TestReplanThatDoesNotFitKeepsItsMemory(t *testing.T) {
	nodes := pt.Cluster(1, 8)
	nodes[0].MemGB = 56
	offload := model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1, ZeRO: 2, Offload: true}
	held := pt.On("n0", 4)
	held.MemGB = 10 // what Slurm gave it: less than a plan's booking here
	c := pt.NewJob("c", "small").GPUs(1).SubmittedAt(3 * time.Hour).Obj()
	c.Max = policy.Size{GPUs: 1}
	s := snap(t, 3*time.Hour, nodes, nil,
		pt.NewJob("a", "small").GPUs(4).Running(offload, 3*time.Hour, held).Obj(),
		pt.NewJob("b", "small").GPUs(2).SubmittedAt(3*time.Hour).Obj(),
		c)
	plan := decideRubick(t, s)
	mem := 0.0
	for _, a := range plan.Actions {
		if a.Kind == policy.Preempt {
			continue
		}
		for _, n := range a.Alloc {
			mem += n.MemGB
		}
	}
	if mem > nodes[0].MemGB+1e-6 {
		t.Errorf("n0 books %.1f of its %.0f GB:\n%+v", mem, nodes[0].MemGB, plan.Actions)
	}
	if a, _ := plan.Action("a"); a.Kind != policy.Keep || a.Plan != offload {
		t.Errorf("a: %s on %s, want it kept on %s", a.Kind, a.Plan, offload)
	}
}

// A guaranteed job on its own request shape keeps its SLO only with the
// CPUs its plan needs: an offloading plan (CPU Adam) given one CPU of the
// eight it asked for runs at a fifth of its request's speed.
func TestGuaranteedRequestShapeNeedsItsCPUs(t *testing.T) {
	nodes := pt.Cluster(1, 8)
	nodes[0].CPUs = 64
	offload := model.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 8, Accum: 1, ZeRO: 2, Offload: true}
	held := pt.On("n0", 7)
	held.CPUs = 63 // one CPU left with the free GPU
	s := snap(t, time.Hour, nodes, []policy.Tenant{{Name: "default", GPUQuota: 8}},
		pt.NewJob("be", "small").GPUs(7).Running(model.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 32, Accum: 1}, 10*time.Minute, held).Obj(),
		pt.NewJob("g", "big").GPUs(1).Plan(offload).Guaranteed().SubmittedAt(59*time.Minute).Obj())
	plan := decideRubick(t, s)
	g, _ := plan.Action("g")
	if g.Kind == policy.Keep {
		return // waiting for CPUs keeps the SLO too
	}
	est := s.Models["big"]
	cpus := 0
	for _, n := range g.Alloc {
		cpus += n.CPUs
	}
	got := predictThroughput(t, est, g.Plan, g.Placement(), cpus)
	want := predictThroughput(t, est, offload, model.Placement{1}, 8)
	if got < want || math.Abs(g.Throughput-got) > 1e-9*got {
		t.Errorf("g: %s on %+v, %.3g samples/s (action says %.3g), want at least its request's %.3g", g.Plan, g.Alloc, got, g.Throughput, want)
	}
}

func predictThroughput(t *testing.T, est policy.Estimator, p model.Plan, pl model.Placement, cpus int) float64 {
	t.Helper()
	b, err := est.Predict(p, model.Resources{Placement: pl, CPUs: cpus, HostMemGB: 1600 * float64(len(pl))})
	if err != nil {
		t.Fatal(err)
	}
	return float64(est.Spec().GlobalBatch) / b.Iter
}

// The GPUs held back for a starving job that cannot start are on the nodes
// it may run on (Job.Nodes): held anywhere else, they would idle while the
// job waited as long. old may run on n1 only, which r fills; new takes
// every free GPU of n0.
func TestStarvingReservesItsNodes(t *testing.T) {
	old := pt.NewJob("old", "small").GPUs(4).SubmittedAt(time.Hour).Obj()
	old.Nodes = []string{"n1"}
	jobs := []policy.Job{
		pt.NewJob("r", "small").GPUs(8).Running(dp(8, 32), 20*time.Minute, pt.On("n1", 8)).Obj(),
		pt.NewJob("r0", "small").GPUs(4).Running(dp(4, 32), 20*time.Minute, pt.On("n0", 4)).Obj(),
		old,
		pt.NewJob("new", "small").GPUs(4).SubmittedAt(10*time.Hour - time.Minute).Obj(),
	}
	got := outcomes(decide(t, "rubick", snap(t, 10*time.Hour, pt.Cluster(2, 8), nil, jobs...)))
	want := map[string]outcome{
		"r":   {policy.Keep, 8, policy.ReasonPenalty},
		"r0":  {policy.Keep, 4, policy.ReasonPenalty},
		"old": {policy.Keep, 0, policy.ReasonNoResources},
		"new": {policy.Start, 4, policy.ReasonSlope},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}

// A starving job that its own bounds keep from starting, however many
// GPUs were free, holds none back: held, they would idle without
// bringing its start any closer, and new would wait for them. old would
// run on r's free GPU but for its group's room, its memory bound (one GPU
// books 16 GB), a Min above its Max or a node quota that leaves it no
// node. Below, old needs 2 GPUs (its Min) where one is free: that GPU is
// held for it.
func TestStarvingHeldByItsBoundsReservesNothing(t *testing.T) {
	tests := map[string]struct {
		bound func(*policy.Job)
		old   policy.Reason
		new   outcome
	}{
		"group":      {func(j *policy.Job) { j.Groups = []string{"g"} }, policy.ReasonGroup, outcome{policy.Start, 1, policy.ReasonSlope}},
		"memory":     {func(j *policy.Job) { j.Max.MemGB = 8 }, policy.ReasonNoResources, outcome{policy.Start, 1, policy.ReasonSlope}},
		"min":        {func(j *policy.Job) { j.Min.GPUs, j.Max.GPUs = 4, 2 }, policy.ReasonNoResources, outcome{policy.Start, 1, policy.ReasonSlope}},
		"node quota": {func(j *policy.Job) { j.NodeQuota = &policy.NodeQuota{New: 0} }, policy.ReasonNoResources, outcome{policy.Start, 1, policy.ReasonSlope}},
		"free GPUs":  {func(j *policy.Job) { j.Min.GPUs = 2 }, policy.ReasonNoResources, outcome{policy.Keep, 0, policy.ReasonNoResources}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			old := pt.NewJob("old", "small").GPUs(1).SubmittedAt(time.Hour).Obj()
			tc.bound(&old)
			jobs := oneGPUFor(old, pt.NewJob("new", "small").GPUs(1).SubmittedAt(10*time.Hour-time.Minute).Obj())
			s, err := policy.NewSnapshot(pt.Epoch.Add(10*time.Hour), pt.Cluster(1, 8), jobs, nil, pt.Models(), 260*time.Second,
				policy.WithGroups([]policy.Group{{Name: "g", GPUs: 0, CPUs: -1, Jobs: -1}}))
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]outcome{
				"r":   {policy.Keep, 7, policy.ReasonPenalty},
				"old": {policy.Keep, 0, tc.old},
				"new": tc.new,
			}
			if diff := cmp.Diff(want, outcomes(decideRubick(t, s))); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
		})
	}
}

// Host memory the round gives one job on a node is not given to another
// there: q, queued past the starvation age, takes 200 GB of n0's 250 for 2
// GPUs, and r, running on 2 GPUs (32 GB), is grown no further than the
// 50 GB left (4 GPUs would book 64). Given both, the job committed second
// found no plan that fits: r, guaranteed or not, was preempted, or q kept
// queued beside idle GPUs. Either way round, q starts and r runs on.
func TestRoundBooksHostMemoryOnce(t *testing.T) {
	for _, tc := range []struct {
		running, queued string // job IDs, which set the commit order
		guaranteed      bool
	}{{"r", "q", false}, {"r", "q", true}, {"a", "q", false}, {"a", "q", true}} {
		nodes := pt.Cluster(1, 8)
		nodes[0].MemGB = 250
		r := pt.NewJob(tc.running, "small").GPUs(2).Running(dp(2, 32), 3*time.Hour, pt.On("n0", 2))
		if tc.guaranteed {
			r = r.Guaranteed()
		}
		q := pt.NewJob(tc.queued, "small").GPUs(2).Obj()
		q.Request.MemPerGPUGB = 100
		s := snap(t, 5*time.Hour, nodes, []policy.Tenant{{Name: "default", GPUQuota: 8}}, r.Obj(), q)
		plan := decideRubick(t, s)
		want := map[string]outcome{
			tc.running: {policy.Keep, 2, policy.ReasonUnchanged},
			tc.queued:  {policy.Start, 2, policy.ReasonStarving},
		}
		if diff := cmp.Diff(want, outcomes(plan)); diff != "" {
			t.Errorf("%+v: outcomes (-want +got):\n%s", tc, diff)
		}
		mem := 0.0
		for _, a := range plan.Actions {
			for _, n := range a.Alloc {
				mem += n.MemGB
			}
		}
		if mem > nodes[0].MemGB+1e-6 {
			t.Errorf("%+v: n0 books %.0f of its %.0f GB:\n%+v", tc, mem, nodes[0].MemGB, plan.Actions)
		}
	}
}

// A running job whose new allocation no plan fits in the host memory left
// at commit keeps what it holds, where that is still free, rather than
// going back to the queue. a, big on its one GPU, runs offloaded and
// books 100 GB of n0's 160, more than the round counted for it (16, no
// plan books less); b, grown from 2 GPUs to 4, would book 64 of the 60
// left, and keeps its 2 GPUs and 32 GB.
func TestRunningJobKeepsWhatItHoldsWhereNoPlanFits(t *testing.T) {
	nodes := pt.Cluster(1, 8)
	nodes[0].MemGB = 160
	a := pt.NewJob("a", "big").GPUs(1).Obj()
	a.Max.GPUs = 1
	b := pt.NewJob("b", "small").GPUs(2).Running(dp(2, 32), 3*time.Hour, pt.On("n0", 2)).Obj()
	b.Max.GPUs = 4
	plan := decideRubick(t, snap(t, 5*time.Hour, nodes, nil, a, b))
	want := map[string]outcome{
		"a": {policy.Start, 1, policy.ReasonStarving},
		"b": {policy.Keep, 2, policy.ReasonUnchanged},
	}
	if diff := cmp.Diff(want, outcomes(plan)); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	got, _ := plan.Action("b")
	if !slices.Equal(got.Alloc, b.Alloc) || got.Plan != b.Plan {
		t.Errorf("b: %s on %+v, want it kept on %+v with %s", got.Plan, got.Alloc, b.Alloc, b.Plan)
	}
	if want := "no plan fits the free host memory: it runs on as it is, not on 4"; got.Detail != want {
		t.Errorf("b: detail %q, want %q", got.Detail, want)
	}
}

// A queued best-effort job with nothing to try says why: how few GPUs are
// free against the fewest it runs on, and whether the running jobs
// holding the rest lose more per GPU than it would gain or may not be
// reconfigured yet, and from what run time the first of them may be.
func TestWaitDetail(t *testing.T) {
	cfg := policy.DefaultConfig()
	// The run time from which a job restarted n times may be reconfigured:
	// (T - (n+1)*delta)/T >= ReconfigKeep solved for T, delta 260 s (snap).
	from := func(n int) time.Duration {
		return time.Duration(float64(n+1) * float64(260*time.Second) / (1 - cfg.ReconfigKeep))
	}
	// Four jobs hold both nodes' 16 GPUs; b, restarted once, would be the
	// first reconfigurable by run time alone, a by the least time left.
	running := func(rt [4]time.Duration, limit time.Duration, held int) []policy.Job {
		var jobs []policy.Job
		for i, id := range []string{"a", "b", "c", "d"} {
			g := 4
			if i == 3 {
				g = held
			}
			jb := pt.NewJob(id, "small").GPUs(g).Running(dp(g, 32), rt[i], pt.On(fmt.Sprintf("n%d", i/2), g))
			if id == "b" {
				jb = jb.Reconfigs(1)
			}
			if limit > 0 {
				jb = jb.TimeLimit(limit)
			}
			jobs = append(jobs, jb.Obj())
		}
		return jobs
	}
	young := [4]time.Duration{30 * time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute}
	frozen := fmt.Sprintf("4 running jobs holding 16 GPUs may not be reconfigured yet (reconfiguration rule): the first, job a, from %v run time, in %v",
		from(0), from(0)-young[0])
	for _, tc := range []struct {
		name   string
		jobs   []policy.Job
		wait   policy.Job
		want   string
		mutate func(*policy.Config)
	}{
		{"young jobs hold every GPU", running(young, 0, 4), pt.NewJob("w", "small").GPUs(4).SubmittedAt(5*time.Hour + 50*time.Minute).Obj(),
			"no GPU free; " + frozen, nil},
		// The rank it waits at comes first, then why.
		{"in fair-share order", running(young, 0, 4), pt.NewJob("w", "small").GPUs(4).SubmittedAt(5*time.Hour + 50*time.Minute).FairShare(0.5).Obj(),
			"fair-share factor 0.50; no GPU free; " + frozen, fairShare},
		{"first one just short of it", running([4]time.Duration{from(0) - time.Second, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute}, 0, 4),
			pt.NewJob("w", "small").GPUs(4).SubmittedAt(5*time.Hour + 50*time.Minute).Obj(),
			"no GPU free; " + strings.Replace(frozen, "in "+(from(0)-young[0]).String(), "in 1s", 1), nil},
		{"first one old enough", running([4]time.Duration{from(0) + time.Second, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute}, 0, 4),
			pt.NewJob("w", "small").GPUs(4).SubmittedAt(5*time.Hour + 50*time.Minute).Obj(), "", nil},
		{"victims lose more than it gains", running([4]time.Duration{2 * time.Hour, 2 * time.Hour, 2 * time.Hour, 2 * time.Hour}, 2*time.Hour+10*time.Minute, 4),
			pt.NewJob("w", "small").GPUs(4).TimeLimit(100 * time.Hour).SubmittedAt(5*time.Hour + 50*time.Minute).Obj(),
			"no GPU free; the running jobs it could take GPUs from lose more per GPU (least 1.90) than its slope, both weighed by time left", nil},
		{"too few free", running(young, 0, 3), pt.NewJob("w", "big").GPUs(8).Cannot(model.FeatureOffload).SubmittedAt(5*time.Hour + 50*time.Minute).Obj(),
			"1 GPU free, below the 2 its smallest runnable plan needs; " + strings.Replace(frozen, "16 GPUs", "15 GPUs", 1), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cfg
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			p, err := policy.New("rubick", cfg)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := p.Decide(context.Background(), snap(t, 6*time.Hour, pt.Cluster(2, 8), nil, append(tc.jobs, tc.wait)...))
			if err != nil {
				t.Fatal(err)
			}
			var got policy.Action
			for _, a := range plan.Actions {
				if a.JobID == "w" {
					got = a
				}
			}
			want := policy.Action{Kind: policy.Keep, JobID: "w", Reason: policy.ReasonNoResources, Detail: tc.want}
			if tc.want == "" {
				// Old enough, a gives up GPUs to it.
				want = policy.Action{Kind: policy.Start, Reason: policy.ReasonSlope}
				got = policy.Action{Kind: got.Kind, Reason: got.Reason}
			}
			got.Order, got.Plan = nil, model.Plan{}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("w (-want +got):\n%s\nactions %+v", diff, plan.Actions)
			}
		})
	}
}

// KeepsOrder names the policies whose plans place queued jobs in an order
// (rubick queue and rubick explain show it): each policy's plan for one
// queued job says so, or not, as KeepsOrder does.
func TestKeepsOrder(t *testing.T) {
	jobs := []policy.Job{pt.NewJob("q", "big").GPUs(8).Obj()}
	s, err := policy.NewSnapshot(pt.Epoch, pt.Cluster(2, 8), jobs, nil, pt.Models(), 260*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range policy.Names() {
		ordered := false
		for _, a := range decide(t, name, s).Actions {
			ordered = ordered || a.Order != nil || a.Admission != nil
		}
		if ordered != policy.KeepsOrder(name) {
			t.Errorf("policy %s: plan places a job in an order %v, KeepsOrder %v", name, ordered, policy.KeepsOrder(name))
		}
	}
}
