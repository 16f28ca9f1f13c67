package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

var t0 = time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)

type fakeCluster struct {
	jobs  []slurm.Job
	nodes []slurm.Node
	err   error
}

func (f *fakeCluster) Jobs(context.Context, time.Time) ([]slurm.Job, bool, error) {
	return f.jobs, true, f.err
}
func (f *fakeCluster) Nodes(context.Context) ([]slurm.Node, error) { return f.nodes, f.err }
func (f *fakeCluster) Job(_ context.Context, id int) (slurm.Job, error) {
	for _, j := range f.jobs {
		if j.ID == id {
			return j, nil
		}
	}
	return slurm.Job{}, slurm.ErrNotFound
}

type fakeApplier struct {
	mu   sync.Mutex
	got  []slurm.Action
	fail map[int]error
}

func (f *fakeApplier) Apply(_ context.Context, acts []slurm.Action) []slurm.ActionResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []slurm.ActionResult
	for _, a := range acts {
		f.got = append(f.got, a)
		out = append(out, slurm.ActionResult{Action: a, Err: f.fail[a.JobID]})
	}
	return out
}

func labNodes(n int) []slurm.Node {
	var out []slurm.Node
	for i := 1; i <= n; i++ {
		out = append(out, slurm.Node{
			Name: "node" + string(rune('0'+i)), State: "IDLE", GPUs: 8, CPUs: 64, MemMB: 512000, Partitions: []string{"gpu"},
		})
	}
	return out
}

func heldJob(id int, modelType string, nodes, gpus int) slurm.Job {
	return slurm.Job{
		ID: id, Name: "train", Account: "root", Partition: "gpu", State: slurm.StatePending, Held: true,
		NodeCount: nodes, GPUsPerNode: gpus, CPUs: 8 * nodes, MemPerNodeMB: 64000,
		SubmitTime: t0.Add(-time.Duration(id) * time.Minute), Requeue: true,
		Tag: &slurm.Tag{ModelType: modelType, Class: slurm.ClassBestEffort},
	}
}

// startedJobs are the jobs the applied actions started, in order.
func startedJobs(a *fakeApplier) []int {
	var out []int
	for _, act := range a.got {
		if act.Kind == slurm.ActionStart {
			out = append(out, act.JobID)
		}
	}
	return out
}

// oneStart is the one action a cycle applied, which must be a start.
func oneStart(t *testing.T, a *fakeApplier) slurm.Action {
	t.Helper()
	if len(a.got) != 1 || a.got[0].Kind != slurm.ActionStart || a.got[0].Tag == nil {
		t.Fatalf("actions %+v, want one start with a tag", a.got)
	}
	return a.got[0]
}

func newTestDaemon(t *testing.T, c *fakeCluster, a *fakeApplier) (*Daemon, *store.Store) {
	t.Helper()
	return newTestDaemonWith(t, c, a, func(*Config) {})
}

// oneCycle runs one cycle of a daemon with the default configuration on c
// and returns its report, what it applied and the daemon, checking the
// jobs it started against started.
func oneCycle(t *testing.T, c Cluster, started []int) (CycleReport, *fakeApplier, *Daemon) {
	t.Helper()
	a := &fakeApplier{}
	d, _ := newTestDaemonWith(t, c, a, func(*Config) {})
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(started, startedJobs(a)); diff != "" {
		t.Errorf("started (-want +got):\n%s", diff)
	}
	return rep, a, d
}

func newTestDaemonWith(t *testing.T, c Cluster, a *fakeApplier, edit func(*Config)) (*Daemon, *store.Store) {
	t.Helper()
	return newTestDaemonClock(t, c, a, edit, func() time.Time { return t0 }, filepath.Join(t.TempDir(), "rubick.db"))
}

// newTestDaemonClock is newTestDaemonWith with a store at path whose times
// come from clock.
func newTestDaemonClock(t *testing.T, c Cluster, a *fakeApplier, edit func(*Config), clock func() time.Time, path string) (*Daemon, *store.Store) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, path, store.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		t.Fatal(err)
	}
	seedShipped(ctx, t, st, set)
	pol, err := policy.New("rubick", Defaults().Policy.Config())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	edit(&cfg)
	d, err := New(cfg, Deps{Cluster: c, Applier: a, Store: st, Policy: pol, Env: model.DefaultEnv(), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return d, st
}

func TestCycleStartsHeldJobsUniformly(t *testing.T) {
	c := &fakeCluster{nodes: labNodes(4), jobs: []slurm.Job{heldJob(11, "gpt2", 1, 4), heldJob(12, "bert", 1, 2)}}
	a := &fakeApplier{}
	d, st := newTestDaemon(t, c, a)
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.got) == 0 {
		t.Fatalf("no actions applied; report %+v", rep)
	}
	for _, act := range a.got {
		t.Logf("action %+v tag %+v", act, *act.Tag)
	}
	t.Logf("skipped %v", rep.Skipped)
	for _, act := range a.got {
		if act.Kind != slurm.ActionStart {
			t.Errorf("job %d: kind %s, want start", act.JobID, act.Kind)
		}
		plan, err := model.ParsePlan(act.Tag.Plan)
		if err != nil {
			t.Fatalf("job %d: tag plan %q: %v", act.JobID, act.Tag.Plan, err)
		}
		if got, want := plan.GPUs(), act.GPUsPerNode*len(act.Nodes); got != want {
			t.Errorf("job %d: plan %s uses %d GPUs, allocation has %d", act.JobID, plan, got, want)
		}
		if act.Tag.Generation != 1 || act.Tag.Extra[tagReq] == "" {
			t.Errorf("job %d: tag %+v lacks generation 1 or the request", act.JobID, act.Tag)
		}
	}
	pending, err := st.Pending(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 0 {
		t.Errorf("%d actions left pending after a successful apply", len(pending))
	}
	hist, err := st.PlanHistory(context.Background(), int64(a.got[0].JobID))
	if err != nil || len(hist) != 1 || hist[0].Result != store.ResultOK {
		t.Errorf("plan history of job %d = %+v, %v; want one ok action", a.got[0].JobID, hist, err)
	}
}

func TestDryRunTouchesNothing(t *testing.T) {
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{heldJob(21, "gpt2", 1, 8)}}
	a := &fakeApplier{}
	d, st := newTestDaemon(t, c, a)
	rep, err := d.Cycle(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Actions) == 0 {
		t.Fatal("dry run decided nothing")
	}
	if len(a.got) != 0 {
		t.Errorf("dry run applied %d actions", len(a.got))
	}
	if _, err := st.Job(context.Background(), 21); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("dry run stored the job: %v", err)
	}
}

func TestUnschedulableJobsAreReleasedNotLost(t *testing.T) {
	bad := heldJob(31, "gpt2", 1, 2)
	bad.Tag, bad.TagErr = nil, errors.New(`malformed rubick tag: gen="x"`)
	unknown := heldJob(32, "mystery-model", 1, 2)
	noGPU := heldJob(33, "bert", 1, 0)
	unfitted := heldJob(34, "newnet", 1, 4)
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{bad, unknown, noGPU, unfitted}}
	a := &fakeApplier{}
	d, st := newTestDaemon(t, c, a)
	spec := model.Spec{Name: "newnet", Params: 1e8, Layers: 12, Hidden: 768, Heads: 12, SeqLen: 512, GlobalBatch: 32, ForwardMs: 50}
	if err := st.UpsertModelType(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{31, 32, 33, 34}, sortedIDs(rep.Ignored)); diff != "" {
		t.Errorf("ignored jobs (-want +got):\n%s\n%v", diff, rep.Ignored)
	}
	// Jobs without a usable model run on their own request; a registered
	// model type without a fit is profiled first.
	got := map[int]string{}
	for _, act := range a.got {
		if act.Kind != slurm.ActionStart || len(act.Nodes) != 0 {
			t.Errorf("job %d: %s on %v, want a start Slurm places", act.JobID, act.Kind, act.Nodes)
		}
		got[act.JobID] = ""
		if act.Tag != nil {
			got[act.JobID] = act.Tag.Extra["profile"]
		}
	}
	if diff := cmp.Diff(map[int]string{31: "", 32: "", 33: "", 34: "1"}, got); diff != "" {
		t.Errorf("released jobs -> profile flag (-want +got):\n%s", diff)
	}
}

// TestProfiledJobGetsArch: the job released to profile a model type
// without a fit carries the type's memory inputs in its tag, which
// rubick-srun reads to leave out the runs its GPUs cannot hold; a job of a
// fitted type carries neither.
func TestProfiledJobGetsArch(t *testing.T) {
	unfitted, fitted := heldJob(35, "gpt13", 1, 4), heldJob(36, "bert", 1, 4)
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{unfitted, fitted}}
	a := &fakeApplier{}
	d, st := newTestDaemon(t, c, a)
	spec := model.Spec{Name: "gpt13", Params: 13e9, Layers: 40, Hidden: 5120, Heads: 40, SeqLen: 2048, GlobalBatch: 16, ForwardMs: 9000}
	if err := st.UpsertModelType(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Cycle(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	got := map[int][2]string{}
	for _, act := range a.got {
		if act.Tag == nil {
			t.Fatalf("job %d: %s without a tag", act.JobID, act.Kind)
		}
		// What rubick-srun reads back from the job's AdminComment.
		ac, err := slurm.MergeAdminComment("model_type="+act.Tag.ModelType, *act.Tag)
		if err != nil {
			t.Fatal(err)
		}
		back, err := slurm.TagFromAdminComment(ac)
		if err != nil || back == nil {
			t.Fatalf("job %d: AdminComment %q: %v", act.JobID, ac, err)
		}
		got[act.JobID] = [2]string{back.Extra[tagProfile], back.Extra[launch.TagArch]}
	}
	want := map[int][2]string{35: {"1", "1.3e+10,40,5120,2048"}, 36: {"", ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobs -> profile, arch (-want +got):\n%s", diff)
	}
	mem, err := launch.ParseArch(got[35][1])
	if diff := cmp.Diff(model.Spec{Params: 13e9, Layers: 40, Hidden: 5120, SeqLen: 2048}, mem); err != nil || diff != "" {
		t.Errorf("arch read back: %v (-want +got):\n%s", err, diff)
	}
}

func TestApplyFailureIsRecorded(t *testing.T) {
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{heldJob(41, "bert", 1, 2)}}
	a := &fakeApplier{fail: map[int]error{41: errors.New("scontrol: Invalid node name specified")}}
	d, st := newTestDaemon(t, c, a)
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed[41] == "" {
		t.Fatalf("failure not reported: %+v", rep.Failed)
	}
	hist, err := st.PlanHistory(context.Background(), 41)
	if err != nil || len(hist) != 1 || hist[0].Result != store.ResultFailed {
		t.Errorf("history = %+v, %v; want one failed action", hist, err)
	}
}

func TestReconcileNeverReapplies(t *testing.T) {
	ctx := context.Background()
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{heldJob(51, "bert", 1, 2), heldJob(52, "bert", 1, 2), heldJob(53, "bert", 1, 2), heldJob(54, "bert", 1, 2)}}
	a := &fakeApplier{}
	d, st := newTestDaemon(t, c, a)
	// A previous run recorded four starts and died before confirming them.
	plan := model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1}
	for _, id := range []int64{51, 52, 53, 54} {
		if err := st.UpsertJob(ctx, store.Job{ID: id, ModelType: "bert", Class: store.BestEffort, State: "PENDING", Submitted: t0}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.RecordPlan(ctx, store.Action{JobID: id, Kind: "start", Plan: plan, Resources: model.Resources{Placement: model.Placement{2}, CPUs: 8}}); err != nil {
			t.Fatal(err)
		}
	}
	// Slurm shows 51 running that plan; 52 never got released; 53 was
	// resized and released, and waits for Slurm's next pass; 54 was
	// resized and not released.
	c.jobs[0].State, c.jobs[0].NodeList, c.jobs[0].Tag.Plan = slurm.StateRunning, []string{"node1"}, plan.String()
	c.jobs[2].Held, c.jobs[2].Tag.Plan = false, plan.String()
	c.jobs[3].Tag.Plan = plan.String()
	if err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if len(a.got) != 0 {
		t.Errorf("reconcile applied %d actions", len(a.got))
	}
	got := map[int64]store.Result{}
	for _, id := range []int64{51, 52, 53, 54} {
		h, err := st.PlanHistory(ctx, id)
		if err != nil || len(h) != 1 {
			t.Fatalf("history of %d: %+v %v", id, h, err)
		}
		got[id] = h[0].Result
	}
	if diff := cmp.Diff(map[int64]store.Result{51: store.ResultOK, 52: store.ResultAbandoned, 53: store.ResultOK, 54: store.ResultAbandoned}, got); diff != "" {
		t.Errorf("reconciled results (-want +got):\n%s", diff)
	}
}

// flakyJob is a Cluster whose Job fails its first fails calls, as
// slurmrestd does while it restarts.
type flakyJob struct {
	Cluster
	fails, calls int
}

func (f *flakyJob) Job(ctx context.Context, id int) (slurm.Job, error) {
	f.calls++
	if f.calls <= f.fails {
		return slurm.Job{}, errors.New("slurmrestd: dial tcp 127.0.0.1:6820: connect: connection refused")
	}
	return f.Cluster.Job(ctx, id)
}

// Reconcile tries again, a little later each time, when slurmrestd fails:
// one that is restarting is back within seconds, and rubickd must not exit
// for it. It gives up after reconcileTries tries.
func TestReconcileRetries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fails     int
		wantErr   bool
		wantCalls int
		want      store.Result
	}{
		{name: "no failure", fails: 0, wantCalls: 1, want: store.ResultAbandoned},
		{name: "two failures", fails: 2, wantCalls: 3, want: store.ResultAbandoned},
		{name: "slurmrestd stays down", fails: 100, wantErr: true, wantCalls: reconcileTries, want: store.ResultPending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := &flakyJob{Cluster: &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{heldJob(51, "bert", 1, 2)}}, fails: tc.fails}
			d, st := newTestDaemonWith(t, c, &fakeApplier{}, func(*Config) {})
			d.retryWait = time.Millisecond
			if err := st.UpsertJob(ctx, store.Job{ID: 51, ModelType: "bert", Class: store.BestEffort, State: "PENDING", Submitted: t0}); err != nil {
				t.Fatal(err)
			}
			plan := model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1}
			if _, err := st.RecordPlan(ctx, store.Action{JobID: 51, Kind: "start", Plan: plan, Resources: model.Resources{Placement: model.Placement{2}, CPUs: 8}}); err != nil {
				t.Fatal(err)
			}
			err := d.Reconcile(ctx)
			if (err != nil) != tc.wantErr || c.calls != tc.wantCalls {
				t.Errorf("Reconcile = %v after %d reads of the job; want an error: %v, after %d", err, c.calls, tc.wantErr, tc.wantCalls)
			}
			h, err := st.PlanHistory(ctx, 51)
			if err != nil || len(h) != 1 || h[0].Result != tc.want {
				t.Errorf("history %+v, %v; want its start %q", h, err, tc.want)
			}
		})
	}
}

// A restart that keeps the job's plan (more CPUs, other nodes) is
// settled by its tag's generation, not by the plan: a job running on as
// it was, its restart never begun, did not take it.
func TestReconcileRestartKeepingPlan(t *testing.T) {
	ctx := context.Background()
	plan := model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1}
	job := func(id int, gen int, state string) slurm.Job {
		j := heldJob(id, "bert", 1, 2)
		j.State, j.Held, j.Tag.Plan, j.Tag.Generation = state, false, plan.String(), gen
		if state == slurm.StateRunning {
			j.NodeList = []string{"node1"}
		}
		return j
	}
	// 71 runs on with its old tag; 72 runs the restart's; 73 was
	// released with it and waits for Slurm's next pass.
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{job(71, 1, slurm.StateRunning), job(72, 2, slurm.StateRunning), job(73, 2, slurm.StatePending)}}
	d, st := newTestDaemon(t, c, &fakeApplier{})
	restart := slurm.Tag{ModelType: "bert", Class: slurm.ClassBestEffort, Plan: plan.String(), Generation: 2}
	for _, j := range c.jobs {
		if err := st.UpsertJob(ctx, store.Job{ID: int64(j.ID), ModelType: "bert", Class: store.BestEffort, State: j.State, Submitted: t0}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.RecordPlan(ctx, store.Action{JobID: int64(j.ID), Kind: string(slurm.ActionRestart), Plan: plan,
			Resources: model.Resources{Placement: model.Placement{2}, CPUs: 16}, Tag: restart.String()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[int64]store.Result{}
	for _, j := range c.jobs {
		h, err := st.PlanHistory(ctx, int64(j.ID))
		if err != nil || len(h) != 1 {
			t.Fatalf("history of %d: %+v %v", j.ID, h, err)
		}
		got[int64(j.ID)] = h[0].Result
	}
	if diff := cmp.Diff(map[int64]store.Result{71: store.ResultAbandoned, 72: store.ResultOK, 73: store.ResultOK}, got); diff != "" {
		t.Errorf("reconciled results (-want +got):\n%s", diff)
	}
}

func sortedIDs(m map[int]string) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestWaitCheckpointReturnsWhenJobLeavesRunning(t *testing.T) {
	j := heldJob(61, "bert", 1, 2)
	j.State = slurm.StateRunning
	c := &fakeCluster{jobs: []slurm.Job{j}}
	wait := WaitCheckpoint(c, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := wait(ctx, j); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a running job = %v, want the deadline", err)
	}
	// Completing (a base state in 22.05, a flag in 24.11) is not over:
	// only the final state says whether the job requeued itself or ended.
	for _, completing := range []slurm.Job{
		{ID: j.ID, State: slurm.StateCompleting},
		{ID: j.ID, State: slurm.StateCancelled, StateFlags: []string{slurm.StateCompleting}},
	} {
		c.jobs[0] = completing
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := wait(ctx, j)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait on a job %s %v = %v, want the deadline", completing.State, completing.StateFlags, err)
		}
	}
	c.jobs[0] = j
	c.jobs[0].State = slurm.StatePending
	if err := wait(context.Background(), j); err != nil {
		t.Fatalf("wait on a requeued job = %v", err)
	}
}

func TestCycleWaitsForReleasedJobs(t *testing.T) {
	released := heldJob(71, "bert", 1, 2)
	released.Held = false
	released.Tag.Plan = "dp2.tp1.pp1.mb16.a1.z0"
	released.Tag.Extra = map[string]string{"at": strconv.FormatInt(t0.Add(-2*time.Second).Unix(), 10)}
	queued := heldJob(72, "gpt2", 1, 4)
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{released, queued}}
	a := &fakeApplier{}
	d, _ := newTestDaemon(t, c, a)
	now := t0
	d.deps.Now = func() time.Time { return now }
	// Run's cycles: /status says from the first that they wait, and for
	// which jobs, since the last completed cycle stays what it shows.
	for _, at := range []time.Time{t0, t0.Add(5 * time.Second)} {
		now = at
		rep, err := d.runCycle(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(a.got) != 0 || len(rep.Starting) != 1 {
			t.Fatalf("applied %d actions, starting %v; want none while job 71 starts", len(a.got), rep.Starting)
		}
		if diff := cmp.Diff(&Waiting{Since: t0, Jobs: []int{71}}, d.Status().Waiting); diff != "" {
			t.Errorf("status at %s: waiting (-want +got):\n%s", at, diff)
		}
	}
	// Past the grace the job is decided on again.
	c.jobs[0].Tag.Extra["at"] = strconv.FormatInt(now.Add(-StartGrace-time.Second).Unix(), 10)
	if _, err := d.runCycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(a.got) == 0 {
		t.Fatal("no action after the start grace")
	}
	if w := d.Status().Waiting; w != nil {
		t.Errorf("status after a completed cycle: waiting %+v, want nil", w)
	}
}

func TestApplyReleasesFirstAndKeepsResultOrder(t *testing.T) {
	a := &fakeApplier{fail: map[int]error{4: errors.New("boom")}}
	d, _ := newTestDaemon(t, &fakeCluster{}, a)
	acts := []slurm.Action{{Kind: slurm.ActionPreempt, JobID: 1}, {Kind: slurm.ActionShrink, JobID: 2}}
	for id := 3; id < 20; id++ {
		acts = append(acts, slurm.Action{Kind: slurm.ActionStart, JobID: id})
	}
	res := d.apply(context.Background(), acts)
	for i, r := range res {
		if r.Action.JobID != acts[i].JobID {
			t.Fatalf("result %d is job %d, want %d", i, r.Action.JobID, acts[i].JobID)
		}
	}
	// Job 4 is the fourth action.
	if !errors.Is(res[3].Err, a.fail[4]) || res[2].Err != nil || res[4].Err != nil {
		t.Errorf("errors misplaced: %v %v %v", res[2].Err, res[3].Err, res[4].Err)
	}
	if first := []int{a.got[0].JobID, a.got[1].JobID}; !slices.Contains(first, 1) || !slices.Contains(first, 2) {
		t.Errorf("releases applied as %v; want 1 and 2 first", first)
	}
}

// checkpointApplier's preemptions each wait for their job's checkpoint
// until every preemption has signalled its job, as the lab's would with
// the checkpoint grace; a start checks that every preemption is done.
type checkpointApplier struct {
	preempts          int
	signalled         sync.WaitGroup
	mu                sync.Mutex
	done              int
	startedBeforeDone bool
}

func (f *checkpointApplier) Apply(ctx context.Context, acts []slurm.Action) []slurm.ActionResult {
	a := acts[0]
	res := slurm.ActionResult{Action: a}
	switch a.Kind {
	case slurm.ActionPreempt:
		defer func() { f.mu.Lock(); f.done++; f.mu.Unlock() }()
		f.signalled.Done()
		waited := make(chan struct{})
		go func() { f.signalled.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-ctx.Done():
			res.Err = ctx.Err() // signalled, not requeued
		}
	case slurm.ActionStart:
		f.mu.Lock()
		f.startedBeforeDone = f.startedBeforeDone || f.done < f.preempts
		f.mu.Unlock()
	}
	return []slurm.ActionResult{res}
}

// Preemptions wait for their checkpoints side by side: one after another
// they would outlast a cycle's deadline (here 2 s) and leave the later jobs
// signalled but not requeued. The starts still wait for all of them.
func TestApplyPreemptsTogether(t *testing.T) {
	a := &checkpointApplier{preempts: 5}
	a.signalled.Add(a.preempts)
	d, _ := newTestDaemon(t, &fakeCluster{}, &fakeApplier{})
	d.deps.Applier = a
	var acts []slurm.Action
	for id := 1; id <= a.preempts; id++ {
		acts = append(acts, slurm.Action{Kind: slurm.ActionPreempt, JobID: id})
	}
	acts = append(acts, slurm.Action{Kind: slurm.ActionStart, JobID: 10}, slurm.Action{Kind: slurm.ActionStart, JobID: 11})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for i, r := range d.apply(ctx, acts) {
		if r.Err != nil || r.Action.JobID != acts[i].JobID {
			t.Errorf("result %d: job %d, err %v; want job %d applied", i, r.Action.JobID, r.Err, acts[i].JobID)
		}
	}
	if a.startedBeforeDone {
		t.Error("a start was applied before every preemption was done")
	}
}

func TestProfiledJobGetsItsPlanOnceFitted(t *testing.T) {
	j := heldJob(81, "bert", 1, 4)
	j.State, j.Held, j.NodeList, j.BatchHost = slurm.StateRunning, false, []string{"node1"}, "node1"
	j.StartTime = t0.Add(-time.Minute)
	j.Tag.Generation, j.Tag.Extra = 1, map[string]string{"profile": "1", "arch": "3.4e+08,24,1024,512", "req": "n1.g4.c8.m64000"}
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}
	a := &fakeApplier{}
	d, _ := newTestDaemon(t, c, a)
	if _, err := d.Cycle(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	var ann *slurm.Action
	for i := range a.got {
		if a.got[i].JobID == 81 && a.got[i].Kind == slurm.ActionAnnotate {
			ann = &a.got[i]
		}
	}
	if ann == nil {
		t.Fatalf("no annotation of the profiled job; actions %+v", a.got)
	}
	if _, err := model.ParsePlan(ann.Tag.Plan); err != nil || ann.Tag.Extra["profile"] != "" || ann.Tag.Extra["arch"] != "" {
		t.Errorf("tag %+v: want a plan, and no profile flag or arch", ann.Tag)
	}
}

// The cycle that makes a profiled job's model type its first fit plans the
// job in the same cycle: rubick-srun waits for that plan after its phase
// only so long (--plan-wait).
func TestProfiledJobPlannedInItsFitsCycle(t *testing.T) {
	j := heldJob(5, "newnet", 1, 8)
	j.State, j.Held, j.User, j.CPUs, j.NodeList, j.BatchHost = slurm.StateRunning, false, "alice", 64, []string{"node1"}, "node1"
	j.StartTime = t0.Add(-10 * time.Minute)
	j.Tag.Generation, j.Tag.Extra = 1, map[string]string{"profile": "1", "arch": launch.ArchValue(newnetSpec())}
	nodes := labNodes(1)
	nodes[0].State, nodes[0].GPUsUsed, nodes[0].CPUsAlloc, nodes[0].MemAllocMB = "ALLOCATED", 8, 64, 64000
	c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{j}}
	a := &fakeApplier{}
	d, st := newTestDaemon(t, c, a)
	ctx := context.Background()
	if err := st.UpsertModelType(ctx, newnetSpec()); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertJob(ctx, store.Job{ID: 5, ModelType: "newnet", Class: store.BestEffort, State: "RUNNING"}); err != nil {
		t.Fatal(err)
	}
	l := &Learner{Store: st, Cluster: c, Env: model.DefaultEnv(), LookupUID: func(string) (uint32, error) { return 1000, nil }}
	for _, s := range samplesOf(model.Predictor{Spec: newnetSpec(), Params: model.Priors(), Env: model.DefaultEnv()}, 1) {
		if err := l.Accept(ctx, 1000, s); err != nil {
			t.Fatal(err)
		}
	}
	d.deps.Learner = l
	rep, err := d.Cycle(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"newnet"}, rep.Refitted); d != "" {
		t.Fatalf("refitted (-want +got):\n%s", d)
	}
	var ann *slurm.Action
	for i := range a.got {
		if a.got[i].JobID == 5 && a.got[i].Kind == slurm.ActionAnnotate {
			ann = &a.got[i]
		}
	}
	if ann == nil {
		t.Fatalf("the fit's cycle did not plan the profiled job; actions %+v", a.got)
	}
	if _, err := model.ParsePlan(ann.Tag.Plan); err != nil || ann.Tag.Extra["profile"] != "" {
		t.Errorf("tag %+v: want a plan and no profile flag", ann.Tag)
	}
}

// TestFittedJobStartsWithoutProfiling: a job released to profile its model
// type keeps the profile flag and memory inputs in its tag until rubickd
// writes the tag again; once the type is fitted, that start of it (planned,
// or on its own request for a rigid job) carries neither, so that
// rubick-srun does not profile the type again. A rigid job of a type still
// unfitted is profiled.
func TestFittedJobStartsWithoutProfiling(t *testing.T) {
	stale := func(j slurm.Job) slurm.Job {
		j.Tag.Generation = 1
		j.Tag.Extra = map[string]string{tagProfile: "1", launch.TagArch: "3.4e+08,24,1024,512",
			"at": strconv.FormatInt(t0.Add(-StartGrace-time.Minute).Unix(), 10)}
		return j
	}
	held := stale(heldJob(61, "bert", 1, 2))
	released := stale(heldJob(62, "bert", 1, 2)) // Slurm has not started it yet
	released.Held = false
	exclusive := stale(heldJob(63, "bert", 1, 2))
	exclusive.Exclusive = true
	unfitted := heldJob(64, "newnet", 1, 2)
	unfitted.Exclusive = true
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{held, released, exclusive, unfitted}}
	a := &fakeApplier{}
	d, st := newTestDaemon(t, c, a)
	spec := model.Spec{Name: "newnet", Params: 1e8, Layers: 12, Hidden: 768, Heads: 12, SeqLen: 512, GlobalBatch: 32, ForwardMs: 50}
	if err := st.UpsertModelType(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Cycle(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	got := profileTags(t, a.got)
	want := map[int][2]string{61: {}, 62: {}, 63: {}, 64: {"1", "1e+08,12,768,512"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("started jobs -> profile, arch (-want +got):\n%s", diff)
	}
}

// TestOneJobOfATypeProfiles: of the jobs of a model type without a fit,
// one profiles at a time. Of two released in one cycle, the first gets
// profile=1 and the arch, the other neither; a running job of the type in
// its phase keeps a new start from profiling, until its rubick-srun reports
// the phase over or it started longer ago than a phase lasts. A job
// running unprofiled is left as it is.
func TestOneJobOfATypeProfiles(t *testing.T) {
	arch := launch.ArchValue(newnetSpec())
	held := func(id int) slurm.Job { return heldJob(id, "newnet", 1, 4) }
	running := func(id int, profile bool, ran time.Duration) slurm.Job {
		j := heldJob(id, "newnet", 1, 4)
		j.State, j.Held, j.NodeList, j.BatchHost, j.StartTime = slurm.StateRunning, false, []string{"node1"}, "node1", t0.Add(-ran)
		j.Tag.Generation, j.Tag.Extra = 1, map[string]string{"at": strconv.FormatInt(t0.Add(-ran).Unix(), 10)}
		if profile {
			j.Tag.Extra[tagProfile], j.Tag.Extra[launch.TagArch] = "1", arch
		}
		return j
	}
	for name, tc := range map[string]struct {
		jobs []slurm.Job
		over []int64 // jobs whose rubick-srun reported their phase over
		want map[int][2]string
	}{
		"two in one cycle": {jobs: []slurm.Job{held(81), held(82)},
			want: map[int][2]string{81: {"1", arch}, 82: {}}},
		"a phase under way": {jobs: []slurm.Job{running(80, true, 2*time.Minute), held(81)},
			want: map[int][2]string{81: {}}},
		"a phase reported over": {jobs: []slurm.Job{running(80, true, 2*time.Minute), held(81), held(82)}, over: []int64{80},
			want: map[int][2]string{81: {"1", arch}, 82: {}}},
		"a phase past its bound": {jobs: []slurm.Job{running(80, true, profilingBound+time.Minute), held(81)},
			want: map[int][2]string{81: {"1", arch}}},
		"a job running unprofiled": {jobs: []slurm.Job{running(80, false, 2*time.Minute), held(81)},
			want: map[int][2]string{81: {"1", arch}}},
	} {
		t.Run(name, func(t *testing.T) {
			c := &fakeCluster{nodes: labNodes(2), jobs: tc.jobs}
			a := &fakeApplier{}
			d, st := newTestDaemon(t, c, a)
			ctx := context.Background()
			if err := st.UpsertModelType(ctx, newnetSpec()); err != nil {
				t.Fatal(err)
			}
			for _, id := range tc.over {
				if err := st.UpsertJob(ctx, store.Job{ID: id, ModelType: "newnet", Class: store.BestEffort, State: "RUNNING"}); err != nil {
					t.Fatal(err)
				}
				if err := st.SetJobLaunch(ctx, id, "alice", store.Launch{GlobalBatch: 32, Profiled: "newnet"}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := d.Cycle(ctx, false); err != nil {
				t.Fatal(err)
			}
			got := profileTags(t, a.got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("started jobs -> profile, arch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProfilingTypes: a model type is in profiling while a job of it holds
// its allocation with profile=1, started within profilingBound, and has
// reported no phase over since that start; a notice of an earlier start (a
// requeued job) does not end the phase of this one.
func TestProfilingTypes(t *testing.T) {
	job := func(id int, mt, state string, profile bool, ran time.Duration) slurm.Job {
		j := heldJob(id, mt, 1, 4)
		j.State, j.Held, j.StartTime = state, false, t0.Add(-ran)
		j.Tag.Extra = map[string]string{}
		if profile {
			j.Tag.Extra[tagProfile] = "1"
		}
		return j
	}
	jobs := []slurm.Job{
		job(1, "a", slurm.StateRunning, true, time.Minute),     // in its phase
		job(2, "b", slurm.StateRunning, true, time.Minute),     // reported over since its start
		job(3, "c", slurm.StateRunning, true, time.Minute),     // reported over at an earlier start
		job(4, "d", slurm.StateSuspended, true, 2*time.Minute), // its phase resumes with it
		job(5, "e", slurm.StateRunning, true, profilingBound),  // past the bound
		job(6, "f", slurm.StateRunning, false, time.Minute),    // not profiling
		job(7, "g", slurm.StatePending, true, 0),               // released, not started
	}
	over := map[int64]time.Time{2: t0.Add(-time.Second), 3: t0.Add(-time.Hour), 5: t0.Add(-time.Hour)}
	want := map[string]bool{"a": true, "c": true, "d": true}
	if diff := cmp.Diff(want, profilingTypes(jobs, over, t0)); diff != "" {
		t.Errorf("profiling types (-want +got):\n%s", diff)
	}
}

// A guaranteed job arriving on a full cluster makes the policy release a
// best-effort job; the release is recorded (without a plan or placement of
// its own) and applied before the start that needs its GPUs.
func TestReclaimForGuaranteedJobIsRecordedAndApplied(t *testing.T) {
	be := heldJob(91, "bert", 1, 8)
	be.State, be.Held, be.NodeList, be.BatchHost = slurm.StateRunning, false, []string{"node1"}, "node1"
	be.StartTime = t0.Add(-time.Hour)
	be.Tag.Generation, be.Tag.Plan = 1, "dp8.tp1.pp1.mb4.a1.z0"
	be.Tag.Extra = map[string]string{"req": "n1.g8.c8.m64000", "at": strconv.FormatInt(t0.Add(-time.Hour).Unix(), 10)}
	g := heldJob(92, "roberta", 1, 8)
	g.Account, g.Tag.Class = "lab", slurm.ClassGuaranteed
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{be, g}}
	c.nodes[0].State = "MIXED"
	c.nodes[0].GPUsUsed, c.nodes[0].CPUsAlloc, c.nodes[0].MemAllocMB = 8, 8, 64000
	a := &fakeApplier{}
	d, st := newTestDaemonWith(t, c, a, func(cfg *Config) {
		cfg.Tenants = []TenantConfig{{Name: "lab", Match: []string{"lab"}, QuotaGPUs: 8}}
	})
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatalf("cycle: %v", err)
	}
	var kinds []string
	for _, act := range a.got {
		kinds = append(kinds, strconv.Itoa(act.JobID)+":"+string(act.Kind))
	}
	if len(kinds) == 0 || (kinds[0] != "91:preempt" && kinds[0] != "91:shrink" && kinds[0] != "91:restart") {
		t.Fatalf("applied %v (report %+v); want job 91 released first", kinds, rep)
	}
	hist, err := st.PlanHistory(context.Background(), 91)
	if err != nil || len(hist) != 1 || hist[0].Result != store.ResultOK {
		t.Errorf("plan history of job 91 = %+v, %v; want one ok action", hist, err)
	}
}

// Two guaranteed jobs wait for the same quota: the one whose sbatch --time
// is shorter is admitted first, though it was submitted later.
func TestGuaranteedQueueShortestTimeLimitFirst(t *testing.T) {
	long := heldJob(21, "bert", 1, 8) // submitted first (21 minutes ago)
	long.Account, long.Tag.Class, long.TimeLimit = "lab", slurm.ClassGuaranteed, 10*time.Hour
	short := heldJob(20, "bert", 1, 8)
	short.Account, short.Tag.Class, short.TimeLimit = "lab", slurm.ClassGuaranteed, time.Hour
	short.SubmitTime = t0.Add(-time.Minute)
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{long, short}}
	a := &fakeApplier{}
	d, _ := newTestDaemonWith(t, c, a, func(cfg *Config) {
		cfg.Tenants = []TenantConfig{{Name: "lab", Match: []string{"lab"}, QuotaGPUs: 8}}
	})
	if _, err := d.Cycle(context.Background(), false); err != nil {
		t.Fatalf("cycle: %v", err)
	}
	started := startedJobs(a)
	if diff := cmp.Diff([]int{20}, started); diff != "" {
		t.Errorf("started jobs (-want +got):\n%s", diff)
	}
}

// With policy.guaranteed_order: priority two jobs waiting for the same
// quota go by the priority Slurm would give them: the long one's QOS
// weighs more, though the short one was submitted first.
func TestGuaranteedQueuePriority(t *testing.T) {
	long := heldJob(21, "bert", 1, 8)
	long.Account, long.Tag.Class, long.TimeLimit, long.QOS = "lab", slurm.ClassGuaranteed, 10*time.Hour, "urgent"
	short := heldJob(20, "bert", 1, 8)
	short.Account, short.Tag.Class, short.TimeLimit, short.QOS = "lab", slurm.ClassGuaranteed, time.Hour, "normal"
	short.SubmitTime = t0.Add(-30 * time.Minute) // first by submission and by time limit
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{long, short}}
	a := &fakeApplier{}
	d, _ := newTestDaemonWith(t, c, a, func(cfg *Config) {
		cfg.Tenants = []TenantConfig{{Name: "lab", Match: []string{"lab"}, QuotaGPUs: 8}}
		cfg.Policy.GuaranteedOrder = policy.OrderPriority
	})
	pol, err := policy.New("rubick", d.cfg.Policy.Config())
	if err != nil {
		t.Fatal(err)
	}
	d.deps.Policy = pol
	d.deps.Budgets = &fakeBudgets{b: slurm.Budgets{
		QOSPriority: map[string]int64{"normal": 0, "urgent": 10},
		Priority:    slurm.PriorityConfig{Multifactor: true, QOS: 1000},
	}}
	if _, err := d.Cycle(context.Background(), false); err != nil {
		t.Fatalf("cycle: %v", err)
	}
	started := startedJobs(a)
	if diff := cmp.Diff([]int{21}, started); diff != "" {
		t.Errorf("started jobs (-want +got):\n%s", diff)
	}
}

// Prune applies the retention settings against the daemon's clock: cycles
// a day old lose their reasons (each job keeps its newest), reported
// samples beyond the bound per configuration go.
func TestPruneAppliesRetention(t *testing.T) {
	ctx := context.Background()
	st, now := clockStore(t, t0.Add(-48*time.Hour))
	spec := newnetSpec()
	if err := st.UpsertModelType(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertJob(ctx, store.Job{ID: 5, ModelType: spec.Name, Class: store.BestEffort, State: "RUNNING"}); err != nil {
		t.Fatal(err)
	}
	reason := map[int64]json.RawMessage{5: json.RawMessage(`"keep"`)}
	for range 3 { // two days ago
		if _, err := st.RecordDecision(ctx, store.Decision{Policy: "rubick", Reasons: reason}); err != nil {
			t.Fatal(err)
		}
	}
	smp := model.Sample{Plan: model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1},
		Resources: model.Resources{Placement: model.Placement{2}, CPUs: 8}, IterS: 1}
	for i := range 5 {
		if err := st.AddReported(ctx, spec.Name, smp, 5, i); err != nil {
			t.Fatal(err)
		}
	}
	*now = t0
	pol, err := policy.New("rubick", Defaults().Policy.Config())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.Retention = RetentionConfig{}
	off, err := New(cfg, Deps{Cluster: &fakeCluster{}, Applier: &fakeApplier{}, Store: st, Policy: pol, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := off.Prune(ctx); err != nil || got != (store.Pruned{}) {
		t.Errorf("retention off: Prune = %+v, %v; want nothing pruned", got, err)
	}
	cfg.Retention = RetentionConfig{Reasons: 24 * time.Hour, SamplesPerConfig: 2}
	d, err := New(cfg, Deps{Cluster: &fakeCluster{}, Applier: &fakeApplier{}, Store: st, Policy: pol, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(store.Pruned{Reasons: 2, Decisions: 2, Samples: 3}, got); diff != "" {
		t.Errorf("Prune (-want +got):\n%s", diff)
	}
}

// What rubick-srun reports a job's launch line cannot run reaches the
// policy through the store. gpt2 asking for 5 GPUs is planned (on 4, where
// ZeRO-DP beats TP 5 on 5) without a report; with a plain DeepSpeed line's
// report no plan the line can run fits its request (the global batch of 16
// does not split over 5 data-parallel ranks, and TP is out), so rubickd
// plans it from the nearest GPU count that can run it, 4, and says so in
// the cycle report. A job that has not reported yet is taken to be like its
// user's last job of the same model type. (TestCannot in package policy
// shows the policy itself avoiding what a job cannot run.)
func TestCycleKeepsToTheLaunchLine(t *testing.T) {
	tests := map[string]struct {
		model    string // gpt2 when empty
		gpus     int
		cannot   model.Features
		gb       int    // the global batch the line states (0: gpt2's 16)
		earlier  bool   // the report came from the user's earlier job, not this one
		wantPlan string // "" for a release without a plan
		adjusted string // what the cycle report says of the job's request
		ignored  string // what it says of a job it cannot plan
	}{
		"user's earlier deepspeed job": {gpus: 5, cannot: model.FeatureTP | model.FeaturePP, earlier: true, wantPlan: "dp4.tp1.pp1.mb4.a1.z2", adjusted: "without tp,pp (what its launch line cannot run) for model gpt2 on its request of 5 GPUs on 1 node; planned from 4 GPUs on 1 node"},
		"no report":                    {gpus: 5, wantPlan: "dp4.tp1.pp1.mb4.a1.z2"},
		"deepspeed line":               {gpus: 5, cannot: model.FeatureTP | model.FeaturePP, wantPlan: "dp4.tp1.pp1.mb4.a1.z2", adjusted: "without tp,pp (what its launch line cannot run) for model gpt2 on its request of 5 GPUs on 1 node; planned from 4 GPUs on 1 node"},
		"deepspeed line, 4 GPUs":       {gpus: 4, cannot: model.FeatureTP | model.FeaturePP, wantPlan: "dp4.tp1.pp1.mb4.a1.z2"},
		"megatron-deepspeed, 4 GPUs":   {gpus: 4, cannot: model.FeatureOffload, wantPlan: "dp4.tp1.pp1.mb4.a1.z2"},
		// llama7 fits one GPU only with ZeRO-Offload: planned from more.
		"llama7 without offload, 1 GPU": {model: "llama7", gpus: 1, cannot: model.FeatureOffload, wantPlan: "dp4.tp1.pp1.mb2.a1.z3",
			adjusted: "without offload (what its launch line cannot run) for model llama7 on its request of 1 GPU on 1 node; planned from 2 GPUs on 1 node"},
		// Nothing on the cluster runs llama30 without offload, TP or PP:
		// released on its request, as a job rubick cannot plan.
		"llama30 data-parallel only": {model: "llama30", gpus: 1, cannot: model.FeatureOffload | model.FeatureTP | model.FeaturePP,
			ignored: "on its request of 1 GPU on 1 node or on any other GPU count up to the cluster's 8"},
		// A line training with its own global batch keeps it: 5 GPUs split
		// 80 five ways, where gpt2's 16 would not.
		"own global batch":        {gpus: 5, gb: 80, wantPlan: "dp5.tp1.pp1.mb16.a1.z2"},
		"user's earlier batch":    {gpus: 4, gb: 64, earlier: true, wantPlan: "dp4.tp1.pp1.mb16.a1.z2"},
		"own batch and deepspeed": {gpus: 4, gb: 8, cannot: model.FeatureTP | model.FeaturePP, wantPlan: "dp4.tp1.pp1.mb2.a1.z2"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// Other work holds 3 of the node's 8 GPUs.
			nodes := labNodes(1)
			nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 3, 24
			mt := tc.model
			if mt == "" {
				mt = "gpt2"
			}
			c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{heldJob(21, mt, 1, tc.gpus)}}
			c.jobs[0].User = "alice"
			a := &fakeApplier{}
			d, st := newTestDaemon(t, c, a)
			ctx := context.Background()
			if tc.earlier {
				if err := st.UpsertJob(ctx, store.Job{ID: 20, ModelType: mt, Class: store.BestEffort, State: "COMPLETED"}); err != nil {
					t.Fatal(err)
				}
				if err := st.SetJobLaunch(ctx, 20, "alice", store.Launch{Cannot: tc.cannot, GlobalBatch: tc.gb}); err != nil {
					t.Fatal(err)
				}
			} else if tc.cannot != 0 || tc.gb != 0 {
				// The start that led to the report registered the job.
				if err := st.UpsertJob(ctx, store.Job{ID: 21, ModelType: mt, Class: store.BestEffort, State: "PENDING"}); err != nil {
					t.Fatal(err)
				}
				l := &Learner{Store: st, Cluster: c, Env: model.DefaultEnv(), LookupUID: func(string) (uint32, error) { return 1000, nil }}
				n := report.Launch{Kind: report.KindLaunch, Version: report.LaunchVersion, JobID: "21", ModelType: mt,
					Dialect: "deepspeed", Cannot: tc.cannot.String(), GlobalBatch: tc.gb, Plan: "dp1.tp5.pp1.mb16.a1.z0", Refused: true}
				if err := l.AcceptLaunch(ctx, 1000, n); err != nil {
					t.Fatal(err)
				}
				// The refused start left its plan in the tag.
				c.jobs[0].Tag.Plan, c.jobs[0].Tag.Generation = n.Plan, 1
			}
			rep, err := d.Cycle(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := oneStart(t, a).Tag.Plan; got != tc.wantPlan {
				t.Errorf("started with plan %q, want %q", got, tc.wantPlan)
			}
			if why := rep.Adjusted[21]; !strings.HasSuffix(why, tc.adjusted) || (why == "") != (tc.adjusted == "") {
				t.Errorf("report says the request was adjusted: %q, want it to end %q", why, tc.adjusted)
			}
			if why := rep.Ignored[21]; !strings.Contains(why, tc.ignored) || (why == "") != (tc.ignored == "") {
				t.Errorf("report ignores the job: %q, want it to say %q", why, tc.ignored)
			}
			// The store keeps the job's model type, whatever batch it
			// was planned at: rubick explain looks its fit up by it.
			if j, err := st.Job(ctx, 21); err != nil || j.ModelType != mt || j.User != "alice" {
				t.Errorf("stored job 21 with model type %q and user %q (%v), want %q and alice", j.ModelType, j.User, err, mt)
			}
			// The stored decision says it too, for rubick explain.
			if tc.adjusted != "" {
				rs, err := st.Reasons(ctx, 21, 1)
				if err != nil || len(rs) != 1 || !strings.Contains(string(rs[0].Reason), tc.adjusted) {
					t.Errorf("stored reasons %+v (%v), want one naming %q", rs, err, tc.adjusted)
				}
			}
		})
	}
}

// A job rubickd grew past what a Slurm limit allows stays pending with the
// limit as its reason. rubickd then plans it within its request and records
// the limit in its tag; held back again within the request, it is Slurm's
// to start (given its request back if rubick had resized it).
func TestCycleKeepsToSlurmLimits(t *testing.T) {
	// Released moments ago: a size limit needs no start grace, as Slurm
	// has decided; waiting for resources it is decided on again after it.
	released := func(gpus int, reason, limit string) slurm.Job {
		j := heldJob(21, "gpt2", 1, gpus)
		j.Held, j.Reason = false, reason
		j.CPUs = 8 * gpus
		j.Tag.Plan, j.Tag.Generation = "dp8.tp1.pp1.mb2.a1.z0", 1
		at := t0.Add(-2 * time.Second)
		if !refusedSize(j) {
			at = t0.Add(-StartGrace - time.Second)
		}
		j.Tag.Extra = map[string]string{tagReq: "n1.g2.c16.m64000", tagAt: strconv.FormatInt(at.Unix(), 10)}
		if limit != "" {
			j.Tag.Extra[tagLimit] = limit
		}
		return j
	}
	// Slurm zeroes the priority of a job whose constraints it cannot meet.
	badConstraints := func() slurm.Job {
		j := released(8, "BadConstraints", "")
		j.Priority, j.Held = 0, true
		return j
	}
	tests := map[string]struct {
		job     slurm.Job
		want    *slurm.Action // nil: no action
		ignored string
	}{
		"grown past a QOS limit": {job: released(8, "QOSMaxGRESPerJob", ""),
			want: &slurm.Action{Kind: slurm.ActionStart, JobID: 21, Nodes: []string{"node1"}, NumNodes: 1, GPUsPerNode: 2, CPUsPerTask: 16}},
		// A node limit rubick does not read: pending for good otherwise.
		"bad constraints after a resize": {job: badConstraints(),
			want: &slurm.Action{Kind: slurm.ActionStart, JobID: 21, Nodes: []string{"node1"}, NumNodes: 1, GPUsPerNode: 2, CPUsPerTask: 16}},
		"waiting for resources": {job: released(8, "Resources", ""),
			want: &slurm.Action{Kind: slurm.ActionStart, JobID: 21, Nodes: []string{"node1"}, NumNodes: 1, GPUsPerNode: 8, CPUsPerTask: 64}},
		"held back within its request": {job: released(2, "QOSGrpGRES", "QOSMaxGRESPerJob"), ignored: "QOSGrpGRES"},
		"held back below its request": {job: released(1, "QOSMinGRES", "QOSMaxGRESPerJob"), ignored: "QOSMinGRES",
			want: &slurm.Action{Kind: slurm.ActionStart, JobID: 21, ClearNodes: true, NumNodes: 1, GPUsPerNode: 2, CPUsPerTask: 16, MemPerNodeMB: 64000}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{tc.job}}
			a := &fakeApplier{}
			d, _ := newTestDaemon(t, c, a)
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			var got *slurm.Action
			if len(a.got) > 1 {
				t.Fatalf("actions %+v, want at most one", a.got)
			} else if len(a.got) == 1 {
				got = &a.got[0]
			}
			var tag *slurm.Tag
			if got != nil {
				tag, got.Tag = got.Tag, nil
				if tc.want != nil && tc.want.MemPerNodeMB == 0 {
					// The policy's plan sets the memory; a test of its own.
					if tc.job.Tag.Extra[tagLimit] != "" || refusedSize(tc.job) {
						if got.MemPerNodeMB > 64000 {
							t.Errorf("memory %d MB per node, above the request's 64000", got.MemPerNodeMB)
						}
					}
					got.MemPerNodeMB = 0
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("action (-want +got):\n%s", diff)
			}
			if why := rep.Ignored[21]; !strings.Contains(why, tc.ignored) || (why == "") != (tc.ignored == "") {
				t.Errorf("report ignores the job: %q, want it to name %q", why, tc.ignored)
			}
			if tag == nil {
				return
			}
			wantLimit := tc.job.Tag.Extra[tagLimit]
			if wantLimit == "" && refusedSize(tc.job) {
				wantLimit = tc.job.Reason
			}
			if tag.Extra[tagLimit] != wantLimit {
				t.Errorf("tag %s, want %s=%q", tag, tagLimit, wantLimit)
			}
			if tc.ignored != "" && tag.Plan != "" {
				t.Errorf("given its request back with plan %q, want none (the line runs unchanged)", tag.Plan)
			}
		})
	}
}

// A node drained or reserved under a running rubick job stays in the
// snapshot with what the job holds and nothing free: the cycle goes on (an
// allocation on a node the snapshot lacks would fail it), and no queued job
// is sent there.
func TestCycleAroundDrainedAndReservedNodes(t *testing.T) {
	for name, flags := range map[string][]string{"drained": {"DRAIN"}, "reserved": {"RESERVED"}} {
		t.Run(name, func(t *testing.T) {
			running := heldJob(91, "bert", 1, 4)
			running.State, running.Held, running.NodeList, running.BatchHost = slurm.StateRunning, false, []string{"node1"}, "node1"
			running.StartTime = t0.Add(-time.Minute)
			running.Tag.Plan, running.Tag.Generation = "dp4.tp1.pp1.mb8.a1.z0", 1
			nodes := labNodes(2)
			nodes[0].State, nodes[0].Flags = "MIXED", flags
			nodes[0].GPUsUsed, nodes[0].CPUsAlloc, nodes[0].MemAllocMB = 4, 8, 64000
			c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{running, heldJob(92, "bert", 1, 4)}}
			a := &fakeApplier{}
			d, _ := newTestDaemon(t, c, a)
			if _, err := d.Cycle(context.Background(), false); err != nil {
				t.Fatalf("cycle with a job on a %s node: %v", name, err)
			}
			started := false
			for _, act := range a.got {
				if slices.Contains(act.Nodes, "node1") && act.JobID != 91 {
					t.Errorf("job %d sent to the %s node: %+v", act.JobID, name, act)
				}
				started = started || act.JobID == 92
			}
			if !started {
				t.Errorf("queued job not started on the free node; actions %+v", a.got)
			}
		})
	}
}

// A held job array whose tasks are still one record is split, not started:
// a release would start every task alike. Its tasks are planned once they
// are jobs of their own.
func TestCycleSplitsJobArrays(t *testing.T) {
	array := heldJob(50, "bert", 1, 2)
	array.ArrayTasks = "0-3"
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{array}}
	a := &fakeApplier{}
	d, _ := newTestDaemon(t, c, a)
	if _, err := d.Cycle(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	want := []slurm.Action{{Kind: slurm.ActionSplit, JobID: 50, Tasks: []int{0, 1, 2, 3}}}
	if diff := cmp.Diff(want, a.got); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}

	big := heldJob(51, "bert", 1, 2)
	big.ArrayTasks = "0-999%8"
	c.jobs, a.got = []slurm.Job{big}, nil
	if _, err := d.Cycle(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if len(a.got) != 1 || len(a.got[0].Tasks) != splitPerCycle || a.got[0].Tasks[splitPerCycle-1] != splitPerCycle-1 {
		t.Errorf("actions %+v, want the first %d tasks split", a.got, splitPerCycle)
	}

	// An array that runs at most 3 tasks at once is split no further
	// ahead than 3 held tasks, each a job record of its own.
	limited := heldJob(52, "bert", 1, 2)
	limited.ArrayJobID, limited.ArrayTasks, limited.ArrayMaxTasks = 52, "0-99%3", 3
	task := func(id, n int, state string, held bool) slurm.Job {
		j := heldJob(id, "bert", 1, 2)
		j.ArrayJobID, j.ArrayTaskID, j.ArrayMaxTasks, j.State, j.Held = 52, n, 3, state, held
		return j
	}
	for name, tc := range map[string]struct {
		tasks []slurm.Job
		split []int
	}{
		"none split":         {split: []int{0, 1, 2}},
		"two running":        {tasks: []slurm.Job{task(60, 0, slurm.StateRunning, false), task(61, 1, slurm.StateRunning, false)}, split: []int{0, 1, 2}},
		"one held":           {tasks: []slurm.Job{task(60, 0, slurm.StateRunning, false), task(61, 1, slurm.StatePending, true)}, split: []int{0, 1}},
		"three held already": {tasks: []slurm.Job{task(60, 0, slurm.StatePending, true), task(61, 1, slurm.StatePending, true), task(62, 2, slurm.StatePending, true)}},
	} {
		t.Run(name, func(t *testing.T) {
			c.jobs, a.got = append([]slurm.Job{limited}, tc.tasks...), nil
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			var split []int
			for _, act := range a.got {
				if act.Kind == slurm.ActionSplit {
					split = act.Tasks
				}
			}
			if diff := cmp.Diff(tc.split, split); diff != "" {
				t.Errorf("tasks split (-want +got):\n%s", diff)
			}
			if why := rep.Ignored[52]; (why != "") != (tc.split == nil) {
				t.Errorf("array record ignored for %q, want a reason only when nothing is split", why)
			}
		})
	}
}

// --constraint, --exclude and --nodelist bound where rubick places a job;
// a constraint rubick cannot evaluate node by node leaves the placement to
// Slurm. The user's --nodelist is recorded in the tag, since rubick's own
// NodeList= updates replace what Slurm reports.
func TestCycleKeepsToConstraints(t *testing.T) {
	tests := map[string]struct {
		constraint string
		excluded   []string
		gpuTypes   []string
		required   []string // what Slurm reports as the job's node list
		gen        int      // rubick's actions on the job so far
		tagNodes   string   // the tag's record of the user's --nodelist
		nodes      []string // where it may start
		rigid      bool     // released on its request: Slurm places it on nodes
		clear      bool     // and clears the node list
		ignored    string
	}{
		"feature":            {constraint: "a100", nodes: []string{"node2", "node3"}},
		"feature or":         {constraint: "h100|a100&ib", nodes: []string{"node2"}},
		"exclude":            {excluded: []string{"node1", "node2"}, nodes: []string{"node3"}},
		"feature, exclude":   {constraint: "a100", excluded: []string{"node2"}, nodes: []string{"node3"}},
		"brackets":           {constraint: "[a100|h100]", rigid: true, ignored: "unsupported constraint"},
		"no such node":       {constraint: "h100", rigid: true, ignored: "no usable node"},
		"nodelist":           {required: []string{"node1", "node3"}, nodes: []string{"node1", "node3"}},
		"GPU type":           {gpuTypes: []string{"h100"}, nodes: []string{"node3"}},
		"GPU type, none":     {gpuTypes: []string{"v100"}, rigid: true, ignored: "no usable node"},
		"nodelist, feature":  {constraint: "a100", required: []string{"node1", "node2"}, nodes: []string{"node2"}},
		"nodelist recorded":  {required: []string{"node2"}, gen: 1, tagNodes: "node3", nodes: []string{"node3"}},
		"rubick's node list": {required: []string{"node2"}, gen: 1, nodes: []string{"node1", "node2", "node3"}},
		"nodelist unusable":  {required: []string{"node9"}, rigid: true, nodes: []string{"node9"}, ignored: "no node of its --nodelist=node9"},
		"rigid, nodelist back": {constraint: "[a100|h100]", required: []string{"node3"}, gen: 1, tagNodes: "node[1-2]",
			rigid: true, nodes: []string{"node1", "node2"}, ignored: "unsupported constraint"},
		"rigid, rubick's node list": {constraint: "[a100|h100]", required: []string{"node3"}, gen: 1,
			rigid: true, clear: true, ignored: "unsupported constraint"},
		// The user's list is unknown: the node list stays as it is.
		"bad record": {gen: 1, tagNodes: "node[2-", rigid: true, ignored: "tag nl="},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			nodes := labNodes(3)
			nodes[1].Features = []string{"a100", "ib"}
			nodes[2].Features = []string{"a100"}
			nodes[0].GPUTypes, nodes[1].GPUTypes, nodes[2].GPUTypes = []string{"a100"}, []string{"a100"}, []string{"h100"}
			j := heldJob(21, "bert", 1, 4)
			j.Constraint, j.Excluded, j.RequiredNodes, j.Tag.Generation = tc.constraint, tc.excluded, tc.required, tc.gen
			j.GPUTypes = tc.gpuTypes
			if tc.tagNodes != "" {
				j.Tag.Extra = map[string]string{tagNodes: tc.tagNodes}
			}
			c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{j}}
			a := &fakeApplier{}
			d, _ := newTestDaemon(t, c, a)
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			got := oneStart(t, a)
			if tc.rigid {
				if diff := cmp.Diff(tc.nodes, got.Nodes); diff != "" || got.ClearNodes != tc.clear || got.Tag.Plan != "" {
					t.Errorf("released on nodes %v (clear %v) with plan %q, want on its request with nodes %v and no plan",
						got.Nodes, got.ClearNodes, got.Tag.Plan, tc.nodes)
				}
			} else if len(got.Nodes) == 0 || got.Tag.Plan == "" {
				t.Errorf("started on %v with plan %q, want a planned start on nodes of %v", got.Nodes, got.Tag.Plan, tc.nodes)
			}
			for _, n := range got.Nodes {
				if !slices.Contains(tc.nodes, n) {
					t.Errorf("started on %v, want only nodes of %v", got.Nodes, tc.nodes)
				}
			}
			wantRecord := tc.tagNodes
			if tc.gen == 0 && tc.required != nil {
				wantRecord = slurm.CompressHostlist(tc.required)
			}
			if got.Tag.Extra[tagNodes] != wantRecord {
				t.Errorf("tag %s, want %s=%q", got.Tag, tagNodes, wantRecord)
			}
			if why := rep.Ignored[21]; !strings.Contains(why, tc.ignored) || (why == "") != (tc.ignored == "") {
				t.Errorf("report ignores the job: %q, want it to say %q", why, tc.ignored)
			}
		})
	}
}

// A job is placed on the nodes of its partition only; one submitted to
// several (job_submit.lua holds it when any is managed) is planned in the
// first managed one with a usable node and started there; one in no
// managed partition is not rubickd's.
func TestCycleKeepsToPartitions(t *testing.T) {
	tests := map[string]struct {
		partition string
		drained   string
		nodes     []string // where it may start; nil: not started
		part      string   // the partition its start names
	}{
		"managed":         {partition: "gpu2", nodes: []string{"node3"}},
		"several":         {partition: "debug,gpu", nodes: []string{"node1", "node2"}, part: "gpu"},
		"several managed": {partition: "gpu2,gpu", nodes: []string{"node3"}, part: "gpu2"},
		"first drained":   {partition: "gpu2,gpu", drained: "node3", nodes: []string{"node1", "node2"}, part: "gpu"},
		"unmanaged":       {partition: "debug"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			nodes := labNodes(4)
			for i, p := range [][]string{{"gpu", "debug"}, {"gpu", "debug"}, {"gpu2", "debug"}, {"debug"}} {
				nodes[i].Partitions = p
			}
			for i := range nodes {
				if nodes[i].Name == tc.drained {
					nodes[i].State, nodes[i].Flags = "IDLE", []string{"DRAIN"}
				}
			}
			j := heldJob(21, "bert", 1, 4)
			j.Partition = tc.partition
			c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{j}}
			a := &fakeApplier{}
			d, _ := newTestDaemonWith(t, c, a, func(cfg *Config) { cfg.Partitions = []string{"gpu", "gpu2"} })
			if _, err := d.Cycle(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			if tc.nodes == nil {
				if len(a.got) > 0 {
					t.Errorf("actions %+v, want none", a.got)
				}
				return
			}
			if len(a.got) != 1 || a.got[0].Kind != slurm.ActionStart || len(a.got[0].Nodes) == 0 {
				t.Fatalf("actions %+v, want one planned start", a.got)
			}
			got := a.got[0]
			for _, n := range got.Nodes {
				if !slices.Contains(tc.nodes, n) {
					t.Errorf("started on %v, want only nodes of %v", got.Nodes, tc.nodes)
				}
			}
			if got.Partition != tc.part {
				t.Errorf("start on %v names partition %q, want %q", got.Nodes, got.Partition, tc.part)
			}
		})
	}
}

// A job asking for GPUs of several types is released as it is: one
// per-node count cannot keep its request.
func TestCycleReleasesSeveralGPUTypes(t *testing.T) {
	j := heldJob(41, "bert", 1, 3)
	j.GPUTypes = []string{"a100", "v100"}
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{j}}
	a := &fakeApplier{}
	d, _ := newTestDaemon(t, c, a)
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.got) != 1 || a.got[0].Kind != slurm.ActionRelease || a.got[0].Tag == nil || a.got[0].Tag.Plan != "" {
		t.Errorf("actions %+v, want one release as submitted", a.got)
	}
	if !strings.Contains(rep.Ignored[41], "a100, v100") {
		t.Errorf("report on job 41: %q, want it to name the types", rep.Ignored[41])
	}
}

// A heterogeneous job is started as submitted: Slurm resizes none of its
// components and starts them together, so only the leader is released,
// as it is.
func TestCycleReleasesHeterogeneousJobs(t *testing.T) {
	leader, comp := heldJob(52, "bert", 1, 2), heldJob(53, "bert", 1, 1)
	leader.HetJobID, comp.HetJobID, comp.HetJobOffset = 52, 52, 1
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{leader, comp}}
	a := &fakeApplier{}
	d, _ := newTestDaemon(t, c, a)
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.got) != 1 || a.got[0].Tag == nil || a.got[0].Tag.Plan != "" || a.got[0].Tag.Generation != 1 {
		t.Fatalf("actions %+v, want one release of the leader, tagged without a plan", a.got)
	}
	got := a.got[0]
	got.Tag = nil
	if diff := cmp.Diff(slurm.Action{Kind: slurm.ActionRelease, JobID: 52}, got); diff != "" {
		t.Errorf("action (-want +got):\n%s", diff)
	}
	for _, id := range []int{52, 53} {
		if !strings.Contains(rep.Ignored[id], "heterogeneous job 52") {
			t.Errorf("report on job %d: %q, want it to name heterogeneous job 52", id, rep.Ignored[id])
		}
	}
}

// resvCluster lists reservations besides what fakeCluster reports.
type resvCluster struct {
	*fakeCluster
	resv []slurm.Reservation
}

func (r *resvCluster) Reservations(context.Context) ([]slurm.Reservation, error) { return r.resv, nil }

// A job submitted to an active reservation is planned on the reservation's
// nodes, and other jobs off them; one whose reservation is not active is
// released as it is, for Slurm to start when it is.
func TestCycleKeepsToReservations(t *testing.T) {
	tests := map[string]struct {
		start time.Time
		nodes []string // where job 61 (in r1) may start; nil: as submitted
	}{
		"active":     {t0.Add(-time.Minute), []string{"node2"}},
		"not active": {t0.Add(time.Hour), nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			nodes := labNodes(3)
			if tc.start.Before(t0) {
				nodes[1].Flags = []string{"RESERVED"}
			}
			inResv, other := heldJob(61, "bert", 1, 4), heldJob(62, "bert", 1, 4)
			inResv.Reservation = "r1"
			c := &resvCluster{fakeCluster: &fakeCluster{nodes: nodes, jobs: []slurm.Job{inResv, other}},
				resv: []slurm.Reservation{{Name: "r1", Nodes: []string{"node2"}, Start: tc.start, End: tc.start.Add(2 * time.Hour)}}}
			a := &fakeApplier{}
			d, _ := newTestDaemonWith(t, c, a, func(*Config) {})
			if _, err := d.Cycle(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			got := map[int]slurm.Action{}
			for _, act := range a.got {
				got[act.JobID] = act
			}
			r, o := got[61], got[62]
			if tc.nodes == nil {
				if r.Kind != slurm.ActionStart || len(r.Nodes) > 0 || r.Tag == nil || r.Tag.Plan != "" {
					t.Errorf("job 61 %+v, want a start as submitted", r)
				}
			} else if !slices.Equal(r.Nodes, tc.nodes) || r.Tag == nil || r.Tag.Plan == "" {
				t.Errorf("job 61 %+v, want a planned start on %v", r, tc.nodes)
			}
			if len(o.Nodes) == 0 || slices.Contains(o.Nodes, "node2") && tc.nodes != nil {
				t.Errorf("job 62 started on %v, want a planned start off the reservation's node2", o.Nodes)
			}
		})
	}
}

// limitsCluster lists QOS and association limits besides what fakeCluster
// reports.
type limitsCluster struct {
	*fakeCluster
	limits slurm.Limits
	err    error
	calls  int
}

func (l *limitsCluster) Limits(context.Context) (slurm.Limits, error) {
	l.calls++
	return l.limits, l.err
}

// A QOS's or an association's per-job limits bound what rubick gives the
// job before Slurm has to hold it back; a job under neither is the twin
// that shows rubick growing it past them.
func TestCycleKeepsToListedLimits(t *testing.T) {
	// Under the memory limit the job books the 64000 MB per node it asked
	// for; unbounded, 80 GB or more.
	bound := slurm.JobLimits{GPUs: 4, Nodes: 1, CPUs: 24, MemMB: 72000}
	limits := slurm.Limits{
		QOS: map[string]slurm.QOS{"normal": {Name: "normal", PerJob: bound}, "guaranteed": {Name: "guaranteed"},
			"narrow": {Name: "narrow", PerJob: slurm.JobLimits{GPUsPerNode: 2}}, "thin": {Name: "thin", PerJob: slurm.JobLimits{CPUsPerNode: 6}},
			"lean": {Name: "lean", PerJob: slurm.JobLimits{MemMBPerNode: 72000}}},
		Associations: []slurm.Association{
			{Cluster: "lab", Account: "physics", User: "ann", PerJob: bound},
			{Cluster: "lab", Account: "root"},
		},
	}
	tests := map[string]struct {
		qos, account, user string
		bounded            bool
	}{
		"QOS":         {"normal", "root", "bob", true},
		"association": {"guaranteed", "physics", "ann", true},
		"neither":     {"guaranteed", "root", "bob", false},
	}
	// start runs a cycle on an idle lab with one 2-GPU bert job of the
	// given QOS, account and user; it returns the job and its start.
	start := func(t *testing.T, qos, account, user string) (slurm.Job, slurm.Action) {
		j := heldJob(21, "bert", 1, 2)
		j.Cluster, j.QOS, j.Account, j.User = "lab", qos, account, user
		c := &limitsCluster{fakeCluster: &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{j}}, limits: limits}
		a := &fakeApplier{}
		d, _ := newTestDaemonWith(t, c, a, func(*Config) {})
		if _, err := d.Cycle(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		return j, oneStart(t, a)
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j, got := start(t, tc.qos, tc.account, tc.user)
			gpus, cpus := got.GPUsPerNode*got.NumNodes, got.CPUsPerTask*got.NumNodes
			mem := got.MemMB(j)
			if within := gpus <= 4 && got.NumNodes <= 1 && cpus <= 24 && mem <= 72000; within != tc.bounded {
				t.Errorf("started with %d GPUs, %d CPUs, %d MB on %d nodes; within 4 GPUs, 24 CPUs, 72000 MB, 1 node: %v, want %v",
					gpus, cpus, mem, got.NumNodes, within, tc.bounded)
			}
			if tc.bounded {
				return
			}
			// The twin of the per-node cases below: unbounded, it takes
			// more than 2 GPUs, 6 CPUs and 72000 MB on a node.
			if got.GPUsPerNode <= 2 || got.CPUsPerTask <= 6 || got.MemPerNodeMB <= 72000 {
				t.Errorf("unbounded job started with %d GPUs, %d CPUs per node; the per-node case needs more", got.GPUsPerNode, got.CPUsPerTask)
			}
		})
	}
	for qos, want := range map[string]slurm.JobLimits{"narrow": {GPUsPerNode: 2}, "thin": {CPUsPerNode: 6}, "lean": {MemMBPerNode: 72000}} {
		t.Run("per node "+qos, func(t *testing.T) {
			_, got := start(t, qos, "root", "bob")
			if want.GPUsPerNode > 0 && got.GPUsPerNode > want.GPUsPerNode || want.CPUsPerNode > 0 && got.CPUsPerTask > want.CPUsPerNode ||
				want.MemMBPerNode > 0 && got.MemPerNodeMB > want.MemMBPerNode {
				t.Errorf("started with %d GPUs, %d CPUs, %d MB per node on %d nodes; want no more than %+v",
					got.GPUsPerNode, got.CPUsPerTask, got.MemPerNodeMB, got.NumNodes, want)
			}
		})
	}
}

// The limits listing is read once a minute; a failed one keeps the last,
// and an API version without it is not asked again.
func TestSlurmLimitsRefresh(t *testing.T) {
	want := slurm.Limits{QOS: map[string]slurm.QOS{"normal": {Name: "normal", PerJob: slurm.JobLimits{GPUs: 4}}}}
	c := &limitsCluster{fakeCluster: &fakeCluster{}, limits: want}
	d, _ := newTestDaemonWith(t, c, &fakeApplier{}, func(*Config) {})
	ctx := context.Background()
	steps := []struct {
		after time.Duration
		err   error
		calls int
	}{
		{0, nil, 1},
		{30 * time.Second, nil, 1}, // reused
		{limitsRefresh, errors.New("slurmdbd down"), 2},
		{2 * limitsRefresh, slurm.ErrUnsupported, 3},
		{3 * limitsRefresh, nil, 3}, // not asked again
	}
	for _, st := range steps {
		c.err = st.err
		if st.err != nil {
			c.limits = slurm.Limits{}
		}
		got := d.slurmLimits(ctx, t0.Add(st.after), nil)
		if diff := cmp.Diff(want, got); diff != "" || c.calls != st.calls {
			t.Errorf("at +%v: %d listings, want %d; limits (-want +got):\n%s", st.after, c.calls, st.calls, diff)
		}
	}
}

// partsCluster lists the partitions alone besides the limits.
type partsCluster struct {
	*limitsCluster
	parts []slurm.Partition
	err   error
	calls int
}

func (p *partsCluster) Partitions(context.Context) ([]slurm.Partition, error) {
	p.calls++
	return p.parts, p.err
}

// Between limits listings the partitions alone are read each cycle: a
// partition set DOWN counts from the next cycle, the QOS of the listing
// stay, a failed read keeps the partitions last read, and a new listing
// brings its own.
func TestSlurmLimitsPartitionsEachCycle(t *testing.T) {
	qos := map[string]slurm.QOS{"normal": {Name: "normal", PerJob: slurm.JobLimits{GPUs: 4}}}
	up := map[string]slurm.Partition{"gpu": {Name: "gpu", State: "UP"}}
	down := map[string]slurm.Partition{"gpu": {Name: "gpu", State: "DOWN"}}
	c := &partsCluster{limitsCluster: &limitsCluster{fakeCluster: &fakeCluster{}, limits: slurm.Limits{QOS: qos, Partitions: up}}}
	d, _ := newTestDaemonWith(t, c, &fakeApplier{}, func(*Config) {})
	var log bytes.Buffer
	d.deps.Logger = slog.New(slog.NewTextHandler(&log, nil))
	ctx := context.Background()
	for _, st := range []struct {
		after               time.Duration
		parts               []slurm.Partition
		err                 error
		want                map[string]slurm.Partition
		listings, partsRead int
	}{
		{0, nil, nil, up, 1, 0},
		{5 * time.Second, []slurm.Partition{{Name: "gpu", State: "DOWN"}}, nil, down, 1, 1},
		{10 * time.Second, nil, errors.New("slurmrestd unavailable"), down, 1, 2},
		{15 * time.Second, nil, errors.New("slurmrestd unavailable"), down, 1, 3},
		{limitsRefresh, nil, nil, up, 2, 3}, // the listing's own
	} {
		c.parts, c.err = st.parts, st.err
		got := d.slurmLimits(ctx, t0.Add(st.after), nil)
		if diff := cmp.Diff(slurm.Limits{QOS: qos, Partitions: st.want}, got); diff != "" {
			t.Errorf("at +%v: limits (-want +got):\n%s", st.after, diff)
		}
		if c.limitsCluster.calls != st.listings || c.calls != st.partsRead {
			t.Errorf("at +%v: %d listings and %d partition reads, want %d and %d", st.after, c.limitsCluster.calls, c.calls, st.listings, st.partsRead)
		}
	}
	if n := strings.Count(log.String(), "partitions not read"); n != 1 {
		t.Errorf("%d warnings of the failed reads, want 1:\n%s", n, log.String())
	}
}

// slowLister is a limits listing that takes took on the daemon's clock.
type slowLister struct {
	*limitsCluster
	clock *time.Time
	took  time.Duration
}

func (s slowLister) Limits(ctx context.Context) (slurm.Limits, error) {
	*s.clock = s.clock.Add(s.took)
	return s.limitsCluster.Limits(ctx)
}

// A listing that took 10 s is reused for 200 s (limitsSlowdown), not one
// minute, while the budgets are still read each minute from the listing
// at hand, and with each new listing.
func TestSlowLimitsListing(t *testing.T) {
	clock := t0
	c := slowLister{&limitsCluster{fakeCluster: &fakeCluster{}, limits: slurm.Limits{QOS: map[string]slurm.QOS{"normal": {Name: "normal"}}}}, &clock, 10 * time.Second}
	d, _ := newTestDaemonWith(t, c, &fakeApplier{}, func(*Config) {})
	d.deps.Now = func() time.Time { return clock }
	budgets := &fakeBudgets{b: slurm.Budgets{QOS: map[string]slurm.Budget{"normal": {Limit: slurm.GroupLimits{GPURunMins: 100}}}}}
	d.deps.Budgets = budgets
	for _, st := range []struct {
		after           time.Duration
		listings, reads int
	}{
		{0, 1, 1},
		{time.Minute, 1, 2},
		{2 * time.Minute, 1, 3},
		{200 * time.Second, 2, 4},
		{230 * time.Second, 2, 4},
	} {
		clock = t0.Add(st.after)
		got := d.slurmLimits(context.Background(), clock, nil)
		if c.calls != st.listings || len(budgets.scopes) != st.reads || got.QOS["normal"].Budget.Limit.GPURunMins != 100 {
			t.Errorf("at +%v: %d listings, %d budget readings, QOS normal's budget %+v; want %d, %d and 100 GPU-minutes",
				st.after, c.calls, len(budgets.scopes), got.QOS["normal"].Budget, st.listings, st.reads)
		}
	}
}

// Limits on what rubick does not plan with are named in a warning, once
// while they last, and again when they change.
func TestSlurmLimitsWarnUnread(t *testing.T) {
	c := &limitsCluster{fakeCluster: &fakeCluster{}, limits: slurm.Limits{QOS: map[string]slurm.QOS{
		"normal": {Name: "normal", Unread: []string{"GrpTRESRunMins=fs/disk=100"}}}}}
	d, _ := newTestDaemonWith(t, c, &fakeApplier{}, func(*Config) {})
	var log strings.Builder
	d.deps.Logger = slog.New(slog.NewTextHandler(&log, nil))
	for i := range 3 {
		d.slurmLimits(context.Background(), t0.Add(time.Duration(i)*limitsRefresh), nil)
	}
	c.limits.Associations = []slurm.Association{{Account: "physics", Unread: []string{"MaxTRESPerJob=license/matlab=2"}}}
	d.slurmLimits(context.Background(), t0.Add(3*limitsRefresh), nil)
	if got := strings.Count(log.String(), "limits rubick does not plan with"); got != 2 ||
		!strings.Contains(log.String(), "QOS normal GrpTRESRunMins=fs/disk=100") ||
		!strings.Contains(log.String(), "QOS normal GrpTRESRunMins=fs/disk=100; association physics MaxTRESPerJob=license/matlab=2") {
		t.Errorf("log %q: want two warnings, the second naming both limits", log.String())
	}
}

// A partition whose billing weights did not parse is named in a warning,
// once while it lasts.
func TestSlurmLimitsWarnUnreadBilling(t *testing.T) {
	unread := slurm.Limits{Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu", Billing: slurm.BillingWeights{Unread: `weight "x" of cpu`}},
		"debug": {Name: "debug"}}}
	c := &limitsCluster{fakeCluster: &fakeCluster{}, limits: unread}
	d, _ := newTestDaemonWith(t, c, &fakeApplier{}, func(*Config) {})
	var log strings.Builder
	d.deps.Logger = slog.New(slog.NewTextHandler(&log, nil))
	for i := range 3 {
		d.slurmLimits(context.Background(), t0.Add(time.Duration(i)*limitsRefresh), nil)
	}
	if got := strings.Count(log.String(), "billing weights not read"); got != 1 || !strings.Contains(log.String(), `partition gpu: weight \"x\" of cpu`) {
		t.Errorf("log %q: want one warning naming partition gpu and why", log.String())
	}
}

// An --exclusive job keeps every other job off its nodes, whatever share
// of them it uses, and a job in a reservation runs on the reservation's
// nodes, which are not in the snapshot: each is released on its own
// request for Slurm to place. The node an exclusive job runs on (all its
// CPUs allocated) gets no rubick job.
func TestCycleLeavesExclusiveJobsToSlurm(t *testing.T) {
	tests := map[string]struct {
		mark func(*slurm.Job)
		says string
	}{
		"exclusive":   {func(j *slurm.Job) { j.Exclusive = true }, "--exclusive"},
		"reservation": {func(j *slurm.Job) { j.Reservation = "r1" }, "--reservation=r1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			running := heldJob(31, "bert", 1, 2)
			running.State, running.Held, running.NodeList, running.BatchHost = slurm.StateRunning, false, []string{"node1"}, "node1"
			running.StartTime, running.CPUs = t0.Add(-time.Hour), 64
			held := heldJob(32, "bert", 1, 2)
			tc.mark(&running)
			tc.mark(&held)
			nodes := labNodes(2)
			nodes[0].State, nodes[0].GPUsUsed, nodes[0].CPUsAlloc, nodes[0].MemAllocMB = "MIXED", 2, 64, 64000
			c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{running, held, heldJob(33, "bert", 1, 4)}}
			a := &fakeApplier{}
			d, st := newTestDaemon(t, c, a)
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			got := map[int]slurm.Action{}
			for _, act := range a.got {
				got[act.JobID] = act
			}
			if len(got) != 2 {
				t.Fatalf("actions %+v, want a start of jobs 32 and 33", a.got)
			}
			// rubick explain reads why from the store.
			reasons, err := st.Reasons(context.Background(), 32, 1)
			if err != nil || len(reasons) != 1 || !strings.Contains(string(reasons[0].Reason), `"reason":"as-submitted"`) ||
				!strings.Contains(string(reasons[0].Reason), tc.says) {
				t.Errorf("stored reasons of job 32: %v, %v; want as-submitted naming %s", reasons, err, tc.says)
			}
			want := slurm.Action{Kind: slurm.ActionStart, JobID: 32, NumNodes: 1, GPUsPerNode: 2, CPUsPerTask: 8, MemPerNodeMB: 64000}
			rigid := got[32]
			if rigid.Tag == nil || rigid.Tag.Plan != "" {
				t.Errorf("job released with tag %v, want one without a plan", rigid.Tag)
			}
			rigid.Tag = nil
			if diff := cmp.Diff(want, rigid); diff != "" {
				t.Errorf("job 32 (-want +got):\n%s", diff)
			}
			if slices.Contains(got[33].Nodes, "node1") || got[33].Tag.Plan == "" {
				t.Errorf("job 33 started on %v with plan %q, want a plan off node1 (job 31's)", got[33].Nodes, got[33].Tag.Plan)
			}
			for _, id := range []int{31, 32} {
				if !strings.Contains(rep.Ignored[id], tc.says) {
					t.Errorf("report on job %d: %q, want it to name %s", id, rep.Ignored[id], tc.says)
				}
			}
		})
	}
}

// A job that waits for its dependencies, begin time or a job-count limit is
// not planned: GPUs given to it would stay idle until Slurm lets it start.
// Nor is one an administrator or its user held: releasing it is theirs.
func TestCycleLeavesWaitingJobs(t *testing.T) {
	dep := heldJob(21, "bert", 1, 4)
	dep.Dependency = "afterok:20(unfulfilled)"
	throttled := heldJob(22, "bert", 1, 4)
	throttled.Held, throttled.Reason = false, "JobArrayTaskLimit"
	throttled.Tag.Extra = map[string]string{tagAt: strconv.FormatInt(t0.Add(-StartGrace-time.Second).Unix(), 10)}
	admin := heldJob(23, "bert", 1, 4)
	admin.Reason = "JobHeldAdmin"
	admin.ArrayTasks = "0-3" // not even split
	begin := heldJob(24, "bert", 1, 4)
	begin.EligibleTime = t0.Add(time.Hour) // --begin=now+1hour
	user := heldJob(25, "bert", 1, 4)
	user.Comment = "my note;rubick:hold" // sbatch --hold
	// A malformed tag is released as submitted, but not past a hold.
	badAdmin, badUser := heldJob(26, "bert", 1, 4), heldJob(27, "bert", 1, 4)
	badAdmin.Reason, badUser.Comment = "JobHeldAdmin", "rubick:hold"
	for _, j := range []*slurm.Job{&badAdmin, &badUser} {
		j.Tag, j.TagErr = nil, errors.New("rubick tag: bad field")
	}
	// An administrator's hold of a job rubick holds (job_submit.lua's field).
	marked := heldJob(29, "bert", 1, 4)
	marked.AdminComment = "rubick:v1 model=bert;" + slurm.AdminHoldField
	// --dependency=singleton behind job 21 of its name and user.
	single := heldJob(28, "bert", 1, 4)
	single.Dependency = "singleton(unfulfilled)"
	// Job 20, what job 21 depends on, runs (rigid, 1 GPU).
	first := slurm.Job{ID: 20, Partition: "gpu", State: slurm.StateRunning, NodeList: []string{"node1"}, GPUsPerNode: 1, CPUs: 1}
	nodes := labNodes(1)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 1, 1
	c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{first, dep, throttled, admin, begin, user, badAdmin, badUser, single, marked}}
	a := &fakeApplier{}
	d, _ := newTestDaemon(t, c, a)
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.got) != 0 {
		t.Errorf("actions %+v, want none", a.got)
	}
	for id, want := range map[int]string{21: "waits for dependency afterok:20(unfulfilled)", 22: "waits for JobArrayTaskLimit", 23: "held by an administrator",
		24: "waits for its begin time 2026-", 25: "held by its user (rubick:hold in its comment", 26: "held by an administrator", 27: "held by its user",
		28: "waits for dependency singleton(unfulfilled)", 29: "held by an administrator"} {
		if !strings.Contains(rep.Ignored[id], want) {
			t.Errorf("report on job %d: %q, want %q", id, rep.Ignored[id], want)
		}
	}
	// Once job 20 ends the job is planned, though Slurm clears the
	// dependency only at its next pass over held jobs.
	c.jobs = []slurm.Job{dep}
	if _, err := d.Cycle(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if len(a.got) != 1 || a.got[0].JobID != 21 || a.got[0].Kind != slurm.ActionStart {
		t.Errorf("actions %+v, want job 21 started", a.got)
	}
	// And job 24 once its begin time has come, job 25 once its user
	// released it (job_submit.lua takes the word out), job 23 once an
	// administrator released it (job_submit.lua keeps Slurm's hold, which
	// it marks rubick's).
	begin.EligibleTime = t0
	user.Comment = "my note"
	admin.ArrayTasks, admin.AdminComment = "", "rubick:v1 model=bert;"+slurm.RubickHeldField
	for _, j := range []slurm.Job{begin, user, admin} {
		a.got = nil
		c.jobs = []slurm.Job{j}
		if _, err := d.Cycle(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		if len(a.got) != 1 || a.got[0].JobID != j.ID || a.got[0].Kind != slurm.ActionStart {
			t.Errorf("actions %+v, want job %d started", a.got, j.ID)
		}
	}
}

func TestWaitsOnSingleton(t *testing.T) {
	for _, tc := range []struct {
		dep     string
		earlier bool
		want    bool
	}{
		{"singleton(unfulfilled)", true, true},
		{"singleton(unfulfilled)", false, false},
		{"afterok:11(unfulfilled),singleton", true, true},
		{"afterok:12(unfulfilled)", true, false},
	} {
		if got := waitsOn(tc.dep, map[int]bool{}, tc.earlier); got != tc.want {
			t.Errorf("waitsOn(%q, earlier %v) = %v, want %v", tc.dep, tc.earlier, got, tc.want)
		}
	}
}

func TestWaitsOn(t *testing.T) {
	active := map[int]bool{12: true, 15: true}
	for dep, want := range map[string]bool{
		"":                              false,
		"afterok:12(unfulfilled)":       true,
		"afterok:11:12(unfulfilled)":    true,
		"afterany:11(unfulfilled)":      false,
		"after:11+12(unfulfilled)":      false,
		"afterok:11,afterany:15_2":      true,
		"singleton(unfulfilled)":        false,
		"afternotok:13?afterok:12":      true,
		"afterok:x(unfulfilled)":        false,
		"afterburstbuffer:11,aftercorr": false,
	} {
		if got := waitsOn(dep, active, false); got != want {
			t.Errorf("waitsOn(%q) = %v, want %v", dep, got, want)
		}
	}
}

func TestJobTimeLimitAt(t *testing.T) {
	tests := map[string]struct {
		t    jobTime
		tput float64
		want time.Duration
		ran  time.Duration // time into the run; every case runs on 8 GPUs, 32 CPUs and 2 nodes
	}{
		"no limit":        {jobTime{reqTput: 10, margin: 0.25}, 5, 0, 0},
		"as fast":         {jobTime{user: time.Hour, reqTput: 10, margin: 0.25}, 10, time.Hour, 0},
		"faster":          {jobTime{user: time.Hour, reqTput: 10, margin: 0.25}, 20, time.Hour, 0},
		"half as fast":    {jobTime{user: time.Hour, reqTput: 10, margin: 0.25}, 5, 150 * time.Minute, 0},
		"whole minutes":   {jobTime{user: 10 * time.Minute, reqTput: 10}, 3, 34 * time.Minute, 0}, // 33.3 min
		"capped":          {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, max: 90 * time.Minute}, 5, 90 * time.Minute, 0},
		"cap below user":  {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, max: 30 * time.Minute}, 5, time.Hour, 0},
		"stretch off":     {jobTime{user: time.Hour, reqTput: 10, margin: -1}, 5, time.Hour, 0},
		"request unknown": {jobTime{user: time.Hour, margin: 0.25}, 5, time.Hour, 0},
		"plan unknown":    {jobTime{user: time.Hour, reqTput: 10, margin: 0.25}, 0, time.Hour, 0},
		// 8 GPUs may take 800 GPU-minutes (or 32 CPUs 3,200 CPU-minutes, a
		// bill of 40 4,000 billing-minutes, 65,536 MB 6,553,600
		// MB-minutes, or 2 nodes 200 node-minutes) in their group: 100 minutes
		// from now, after the 30 run already. A per-job limit counts the
		// whole time limit.
		"GPU-minutes":         {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, runMins: [5]int64{800, 0}}, 5, 100 * time.Minute, 0},
		"GPU-minutes, ran":    {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, runMins: [5]int64{800, 0}}, 5, 130 * time.Minute, 30 * time.Minute},
		"CPU-minutes":         {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, runMins: [5]int64{0, 3200}}, 5, 100 * time.Minute, 0},
		"per job, ran":        {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, perJob: [5]int64{800, 0}}, 5, 100 * time.Minute, 30 * time.Minute},
		"CPU-minutes per job": {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, perJob: [5]int64{0, 3200}}, 5, 100 * time.Minute, 0},
		"billing-minutes":     {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, runMins: [5]int64{0, 0, 4000}}, 5, 100 * time.Minute, 0},
		"billing-minutes per job": {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, perJob: [5]int64{0, 0, 4000}}, 5, 100 * time.Minute,
			30 * time.Minute},
		"memory-minutes":         {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, runMins: [5]int64{0, 0, 0, 6553600}}, 5, 100 * time.Minute, 0},
		"memory-minutes per job": {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, perJob: [5]int64{0, 0, 0, 6553600}}, 5, 100 * time.Minute, 0},
		"node-minutes":           {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, runMins: [5]int64{0, 0, 0, 0, 200}}, 5, 100 * time.Minute, 0},
		"node-minutes per job":   {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, perJob: [5]int64{0, 0, 0, 0, 200}}, 5, 100 * time.Minute, 0},
		"minutes below user":     {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, runMins: [5]int64{240, 0}}, 5, time.Hour, 0},
		"absurd":                 {jobTime{user: time.Hour, reqTput: 1e12, margin: 0.25}, 1e-12, maxStretch, 0},
		// --deadline 100.5 minutes away: 100 whole minutes from the start,
		// 30 of which a running job has run.
		"deadline":            {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, untilDeadline: 100*time.Minute + 30*time.Second}, 5, 100 * time.Minute, 0},
		"deadline, ran":       {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, untilDeadline: 70*time.Minute + 30*time.Second}, 5, 100 * time.Minute, 30 * time.Minute},
		"deadline below user": {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, untilDeadline: 30 * time.Minute}, 5, time.Hour, 0},
		"deadline far":        {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, untilDeadline: 24 * time.Hour}, 5, 150 * time.Minute, 0},
		// A job that has run (a restart) is cut at its deadline, below the
		// user's limit too, whatever its speed; a minute at least.
		"deadline, has run":        {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, untilDeadline: 30 * time.Minute, hasRun: true}, 5, 30 * time.Minute, 0},
		"deadline, has run, fast":  {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, untilDeadline: 30 * time.Minute, hasRun: true}, 20, 30 * time.Minute, 0},
		"deadline, has run, close": {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, untilDeadline: 20 * time.Second, hasRun: true}, 20, time.Minute, 0},
		"deadline, fast":           {jobTime{user: time.Hour, reqTput: 10, margin: 0.25, untilDeadline: 30 * time.Minute}, 20, time.Hour, 0},
		"deadline, no limit":       {jobTime{reqTput: 10, margin: 0.25, untilDeadline: 30 * time.Minute, hasRun: true}, 5, 0, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			size := slurm.GroupLimits{GPUs: 8, CPUs: 32, Billing: 40, MemMB: 65536, Nodes: 2}
			if got := tc.t.limitAt(tc.tput, size, tc.ran); got != tc.want {
				t.Errorf("limitAt(%v, %+v, %v) = %v, want %v", tc.tput, size, tc.ran, got, tc.want)
			}
		})
	}
}

// A job rubick runs slower than its request gets its time limit scaled to
// match, up to its MaxWall, and the user's back when it runs as fast again
// or is released on its request; the user's limit is kept in the tag.
func TestCycleStretchesTimeLimits(t *testing.T) {
	tests := map[string]struct {
		nodes, gpus int           // the request
		limit       time.Duration // what Slurm reports
		tagTime     string        // the tag's record of the user's limit
		wall        time.Duration // the QOS's MaxWall
		off         bool          // time_limits.stretch: false
		model       string
		check       func(time.Duration) bool // the start's TimeLimit
		want        string                   // what check says
		record      string                   // the tag's tl after the start
		ignored     string
		explain     string // in the stored reason
	}{
		"fewer GPUs": {nodes: 2, gpus: 8, limit: time.Hour, record: "60",
			check: func(d time.Duration) bool { return d > time.Hour && d%time.Minute == 0 }, want: "over 1h, whole minutes",
			explain: "the user's 60 min, for a plan predicted slower"},
		"capped": {nodes: 2, gpus: 8, limit: time.Hour, wall: 70 * time.Minute, record: "60",
			check: func(d time.Duration) bool { return d == 70*time.Minute }, want: "the QOS's 1h10m",
			explain: "time limit 70 min: the user's 60 min"},
		"stretch off": {nodes: 2, gpus: 8, limit: time.Hour, off: true, record: "60",
			check: func(d time.Duration) bool { return d == 0 }, want: "unchanged"},
		"no limit": {nodes: 2, gpus: 8,
			check: func(d time.Duration) bool { return d == 0 }, want: "unchanged"},
		"request fits": {nodes: 1, gpus: 2, limit: time.Hour, record: "60",
			check: func(d time.Duration) bool { return d == 0 }, want: "unchanged"},
		"user's back": {nodes: 1, gpus: 2, limit: 150 * time.Minute, tagTime: "60", record: "60",
			check: func(d time.Duration) bool { return d == time.Hour }, want: "the user's 1h", explain: "time limit back to the user's 60 min"},
		"rigid, user's back": {nodes: 1, gpus: 2, limit: 150 * time.Minute, tagTime: "60", model: "nosuch", record: "60",
			check: func(d time.Duration) bool { return d == time.Hour }, want: "the user's 1h", ignored: "no fitted model",
			explain: "time limit back to the user's 60 min"},
		"bad record": {nodes: 1, gpus: 2, limit: 150 * time.Minute, tagTime: "soon", record: "soon",
			check: func(d time.Duration) bool { return d == 0 }, want: "unchanged", ignored: `tag tl="soon"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			modelType := tc.model
			if modelType == "" {
				modelType = "bert"
			}
			j := heldJob(21, modelType, tc.nodes, tc.gpus)
			j.Cluster, j.QOS, j.TimeLimit = "lab", "normal", tc.limit
			if tc.tagTime != "" {
				j.Tag.Generation, j.Tag.Extra = 1, map[string]string{tagTime: tc.tagTime}
			}
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"normal": {Name: "normal", PerJob: slurm.JobLimits{Wall: tc.wall}}}}
			c := &limitsCluster{fakeCluster: &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}, limits: limits}
			a := &fakeApplier{}
			d, st := newTestDaemonWith(t, c, a, func(cfg *Config) { cfg.TimeLimits.Stretch = !tc.off })
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			got := oneStart(t, a)
			if !tc.check(got.TimeLimit) {
				t.Errorf("started on %d x %d GPUs with TimeLimit %v, want %s", got.NumNodes, got.GPUsPerNode, got.TimeLimit, tc.want)
			}
			if rec := got.Tag.Extra[tagTime]; rec != tc.record {
				t.Errorf("tag %s, want %s=%q", got.Tag, tagTime, tc.record)
			}
			if why := rep.Ignored[21]; !strings.Contains(why, tc.ignored) || (why == "") != (tc.ignored == "") {
				t.Errorf("report ignores the job: %q, want it to say %q", why, tc.ignored)
			}
			reasons, err := st.Reasons(context.Background(), 21, 1)
			if err != nil || len(reasons) != 1 {
				t.Fatalf("stored reasons of job 21: %v, %v; want one", reasons, err)
			}
			if says := strings.Contains(string(reasons[0].Reason), "time limit"); says != (tc.explain != "") ||
				!strings.Contains(string(reasons[0].Reason), tc.explain) {
				t.Errorf("stored reason %s, want it to say %q", reasons[0].Reason, tc.explain)
			}
		})
	}
}

// A QOS's GrpTRES (and any other group GPU, CPU or memory limit) bounds
// each job by the room its group has left: a job is grown no further, and
// one whose group is full stays held, planned once there is room. So do
// GrpTRESRunMins over the job's 60-minute time limit (the running job has
// 30 minutes left: 60 GPU- and 240 CPU-minutes) and MaxTRESMinsPerJob; a
// job that one GPU for its time limit takes past the latter is left to
// Slurm, which holds it back.
func TestCycleKeepsToGroupLimits(t *testing.T) {
	tests := map[string]struct {
		grp     slurm.GroupLimits // the QOS's GrpTRES
		budget  slurm.Budget      // the QOS's GrpTRESMins
		tick    time.Duration     // PriorityCalcPeriod, with a budget
		qosJob  slurm.JobLimits   // the QOS's per-job limits
		others  int               // GPUs a running job of the QOS holds on node2, with 8 CPUs and 32000 MB
		maxGPUs int               // the most GPUs the job may start with; 0: held
		maxCPUs int               // the most CPUs
		maxMem  int64             // the most memory (MB) over its nodes; 0: any
		ignored string
		node    string // the only node it may start on; "": any
		release bool   // released as submitted, for Slurm to hold back
		bound   string // what rubick explain says stopped it, where it started at its bound
		weights string // the partition's TRESBillingWeights
		unread  bool   // they did not parse
		minCPUs int    // the fewest CPUs it may start with
		// perNode bounds its GPUs and CPUs on each node; 0: any.
		perNode struct{ gpus, cpus int }
	}{
		"no limit": {others: 2, maxGPUs: 8, maxCPUs: 64}, // 4 GPUs, 16 CPUs
		"GPU room": {grp: slurm.GroupLimits{GPUs: 4}, others: 2, maxGPUs: 2, maxCPUs: 64,
			bound: "2 GPUs at most: QOS shared GrpTRES, 2 GPUs left"},
		"group full": {grp: slurm.GroupLimits{GPUs: 4}, others: 4, ignored: "waits for room in QOS shared GrpTRES: GPUs in use 4, allowed 4"},
		"CPU room":   {grp: slurm.GroupLimits{CPUs: 20}, others: 2, maxGPUs: 8, maxCPUs: 12},
		"CPUs full":  {grp: slurm.GroupLimits{CPUs: 8}, others: 2, ignored: "waits for room in QOS shared GrpTRES: CPUs in use 8, allowed 8"},
		// The job asked for 64000 MB (per node), which is what it books
		// under a memory limit; unbounded it books 80 GB for 4 GPUs.
		"memory room": {grp: slurm.GroupLimits{MemMB: 104000}, others: 2, maxGPUs: 8, maxCPUs: 64, maxMem: 72000},
		"memory full": {grp: slurm.GroupLimits{MemMB: 32000}, others: 2,
			ignored: "waits for room in QOS shared GrpTRES: memory in use 32000 MB, allowed 32000 MB, and one GPU needs 64000 MB"},
		// 28000 MB left, short of the 64000 per node it asked for.
		"memory short": {grp: slurm.GroupLimits{MemMB: 60000}, others: 2,
			ignored: "waits for room in QOS shared GrpTRES: memory in use 32000 MB, allowed 60000 MB, and one GPU needs 64000 MB"},
		"GPU-minutes room": {grp: slurm.GroupLimits{GPURunMins: 180}, others: 2, maxGPUs: 2, maxCPUs: 64,
			bound: "2 GPUs at most: QOS shared GrpTRESRunMins, 120 GPU-minutes left for its 60-minute time limit"},
		"GPU-minutes full": {grp: slurm.GroupLimits{GPURunMins: 100}, others: 2,
			ignored: "waits for room in QOS shared GrpTRESRunMins: GPU-minutes to run in use 60, allowed 100, and one GPU for its 60-minute time limit takes 60"},
		// GrpTRESMins counts the minutes its jobs used (120 GPU-minutes)
		// beside those its running jobs may still use (60).
		"GPU budget room": {budget: slurm.Budget{Limit: slurm.GroupLimits{GPURunMins: 300}, Spent: slurm.GroupLimits{GPURunMins: 120}}, others: 2,
			maxGPUs: 2, maxCPUs: 64, bound: "2 GPUs at most: QOS shared GrpTRESMins, 120 GPU-minutes left for its 60-minute time limit"},
		"GPU budget spent": {budget: slurm.Budget{Limit: slurm.GroupLimits{GPURunMins: 200}, Spent: slurm.GroupLimits{GPURunMins: 120}}, others: 2,
			ignored: "waits for room in QOS shared GrpTRESMins: GPU-minutes used or to run in use 180, allowed 200, and one GPU for its 60-minute time limit takes 60"},
		"CPU budget room": {budget: slurm.Budget{Limit: slurm.GroupLimits{CPURunMins: 1500}, Spent: slurm.GroupLimits{CPURunMins: 540}}, others: 2,
			maxGPUs: 8, maxCPUs: 12},
		// Slurm adds the other job's use every 5 minutes: up to 5 of its
		// minutes (40 CPU-minutes) are neither in what it used nor left.
		"CPU budget between ticks": {budget: slurm.Budget{Limit: slurm.GroupLimits{CPURunMins: 1500}, Spent: slurm.GroupLimits{CPURunMins: 540}},
			tick: 5 * time.Minute, others: 2, maxGPUs: 8, maxCPUs: 11},
		"CPU-minutes room": {grp: slurm.GroupLimits{CPURunMins: 960}, others: 2, maxGPUs: 8, maxCPUs: 12},
		"CPU-minutes full": {grp: slurm.GroupLimits{CPURunMins: 280}, others: 2,
			ignored: "waits for room in QOS shared GrpTRESRunMins: CPU-minutes to run in use 240, allowed 280, and one CPU for its 60-minute time limit takes 60"},
		"GPU-minutes per job": {qosJob: slurm.JobLimits{GPUMins: 120}, others: 2, maxGPUs: 2, maxCPUs: 64,
			bound: "2 GPUs at most: MaxTRESMinsPerJob of its QOS, its partition's QOS or its association, 120 GPU-minutes for its 60-minute time limit"},
		"CPU-minutes per job": {qosJob: slurm.JobLimits{CPUMins: 720}, others: 2, maxGPUs: 8, maxCPUs: 12},
		"GPU-minutes per job short": {qosJob: slurm.JobLimits{GPUMins: 30}, others: 2, release: true,
			ignored: "its 60-minute time limit on one GPU is over its GPU-minutes per job (30)"},
		// The other job holds 32000 MB for 30 more minutes: 960,000
		// MB-minutes. 4,320,000 MB-minutes are 72000 MB for the job's hour,
		// one node of the 64000 MB it asked for; 3,000,000 are less than
		// that one node's.
		"memory-minutes room": {grp: slurm.GroupLimits{MemRunMins: 5280000}, others: 2, maxGPUs: 8, maxCPUs: 64, maxMem: 72000},
		"memory-minutes full": {grp: slurm.GroupLimits{MemRunMins: 3960000}, others: 2,
			ignored: "waits for room in QOS shared GrpTRESRunMins: MB-minutes of memory to run in use 960000, allowed 3960000, and one GPU's 64000 MB for its 60-minute time limit takes 3840000"},
		"memory budget room": {budget: slurm.Budget{Limit: slurm.GroupLimits{MemRunMins: 6480000}, Spent: slurm.GroupLimits{MemRunMins: 1200000}}, others: 2,
			maxGPUs: 8, maxCPUs: 64, maxMem: 72000},
		"memory budget spent": {budget: slurm.Budget{Limit: slurm.GroupLimits{MemRunMins: 5000000}, Spent: slurm.GroupLimits{MemRunMins: 1200000}}, others: 2,
			ignored: "waits for room in QOS shared GrpTRESMins: MB-minutes of memory used or to run in use 2160000, allowed 5000000, and one GPU's 64000 MB for its 60-minute time limit takes 3840000"},
		// The other job holds node2: with room for one more node the job
		// may span node2 and one other, with none, only node2 beside it.
		"node room":              {grp: slurm.GroupLimits{Nodes: 2}, others: 2, maxGPUs: 14, maxCPUs: 64},
		"nodes full":             {grp: slurm.GroupLimits{Nodes: 1}, others: 2, maxGPUs: 6, maxCPUs: 56, node: "node2"},
		"jobs room":              {grp: slurm.GroupLimits{Jobs: 2}, others: 2, maxGPUs: 8, maxCPUs: 64},
		"jobs full":              {grp: slurm.GroupLimits{Jobs: 1}, others: 2, ignored: "waits for room in QOS shared GrpJobs: running jobs 1, allowed 1"},
		"memory-minutes per job": {qosJob: slurm.JobLimits{MemMins: 4320000}, others: 2, maxGPUs: 8, maxCPUs: 64, maxMem: 72000},
		"memory-minutes per job short": {qosJob: slurm.JobLimits{MemMins: 3000000}, others: 2, release: true,
			ignored: "its 60-minute time limit with 64000 MB of memory (one GPU's) is over its MB-minutes of memory per job (3000000)"},
		// Without weights Slurm bills CPUs: the other job's 8 of 20.
		"billing room": {grp: slurm.GroupLimits{Billing: 20}, others: 2, maxGPUs: 8, maxCPUs: 12},
		"billing full": {grp: slurm.GroupLimits{Billing: 8}, others: 2,
			ignored: "waits for room in QOS shared GrpTRES: billing in use 8, allowed 8, and its request bills 8 (TRESBillingWeights unset: CPUs alone)"},
		// The request bills 2x2 + 8x0.5 + 62.5x0.25 = 23.6, rounded down.
		// Its node's 62.5 GB bill 15.6 whatever it runs: of 34, 18.4 are
		// left for 2.3 times its 2 GPUs and 8 CPUs, 4 GPUs and 18 CPUs.
		"billing per job": {qosJob: slurm.JobLimits{Billing: 34}, weights: "CPU=0.5,Mem=0.25G,GRES/gpu=2.0", others: 2, maxGPUs: 4, maxCPUs: 18,
			bound: "4 GPUs at most: MaxTRESPerJob billing of its QOS, its partition's QOS or its association (34); its request bills 23 (TRESBillingWeights=CPU=0.5,GRES/gpu=2,Mem=0.25G)"},
		// The other job bills 4 + 4 + 7.8: 34 of 49 left.
		"billing group": {grp: slurm.GroupLimits{Billing: 49}, weights: "CPU=0.5,Mem=0.25G,GRES/gpu=2.0", others: 2, maxGPUs: 4, maxCPUs: 18,
			bound: "4 GPUs at most: QOS shared GrpTRES billing, 34 left; its request bills 23 (TRESBillingWeights=CPU=0.5,GRES/gpu=2,Mem=0.25G)"},
		// The other job bills 8 for 30 more minutes: 240 billing-minutes.
		"billing-minutes room": {grp: slurm.GroupLimits{BillingRunMins: 960}, others: 2, maxGPUs: 8, maxCPUs: 12},
		"billing-minutes full": {grp: slurm.GroupLimits{BillingRunMins: 280}, others: 2,
			ignored: "waits for room in QOS shared GrpTRESRunMins: billing-minutes to run in use 240, allowed 280, for its 60-minute time limit, and its request bills 8 (TRESBillingWeights unset: CPUs alone)"},
		"billing-minutes per job": {qosJob: slurm.JobLimits{BillingMins: 2040}, weights: "CPU=0.5,Mem=0.25G,GRES/gpu=2.0", others: 2, maxGPUs: 4, maxCPUs: 18,
			bound: "4 GPUs at most: MaxTRESMinsPerJob billing of its QOS, its partition's QOS or its association, 2040 billing-minutes for its 60-minute time limit; its request bills 23 (TRESBillingWeights=CPU=0.5,GRES/gpu=2,Mem=0.25G)"},
		// Without weights a node's bill is its CPUs.
		"billing per node": {qosJob: slurm.JobLimits{BillingPerNode: 12}, others: 2, maxGPUs: 16, maxCPUs: 64, perNode: struct{ gpus, cpus int }{0, 12}},
		// A node of the request bills 23.6, its memory 15.6 of it: of 30,
		// 14.4 are left for 1.8 times its 2 GPUs and 8 CPUs, 3 GPUs and 14
		// CPUs on each node.
		"billing per node, weights": {qosJob: slurm.JobLimits{BillingPerNode: 30}, weights: "CPU=0.5,Mem=0.25G,GRES/gpu=2.0", others: 2,
			maxGPUs: 16, maxCPUs: 64, perNode: struct{ gpus, cpus int }{3, 14}},
		"billing per node short": {qosJob: slurm.JobLimits{BillingPerNode: 10}, weights: "CPU=0.5,Mem=0.25G,GRES/gpu=2.0", others: 2, release: true,
			ignored: "no room to start under MaxTRESPerNode billing of its QOS, its partition's QOS or its association (10); its request bills 23 (TRESBillingWeights=CPU=0.5,GRES/gpu=2,Mem=0.25G)"},
		// Weights that did not parse: the billing limit is left to Slurm
		// (the job grows as without it, here to 8 GPUs and 32 CPUs).
		"billing unread": {grp: slurm.GroupLimits{Billing: 20}, unread: true, others: 2, maxGPUs: 8, maxCPUs: 64, minCPUs: 13},
		"billing per job short": {qosJob: slurm.JobLimits{Billing: 10}, weights: "CPU=0.5,Mem=0.25G,GRES/gpu=2.0", others: 2, release: true,
			ignored: "no room to start under MaxTRESPerJob billing of its QOS, its partition's QOS or its association (10); its request bills 23 (TRESBillingWeights=CPU=0.5,GRES/gpu=2,Mem=0.25G)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			nodes := labNodes(2)
			other := slurm.Job{ID: 9, Name: "other", Account: "root", Partition: "gpu", QOS: "shared", Cluster: "lab",
				State: slurm.StateRunning, NodeCount: 1, NodeList: []string{"node2"}, GPUsPerNode: tc.others, GPUs: tc.others, CPUs: 8, MemMB: 32000,
				TimeLimit: time.Hour, StartTime: t0.Add(-30 * time.Minute)}
			nodes[1].GPUsUsed, nodes[1].CPUsAlloc = tc.others, 8
			w, err := slurm.ParseBillingWeights(tc.weights)
			if err != nil {
				t.Fatal(err)
			}
			other.Billing = w.Of(tc.others, 8, 1, 32000) // as Slurm reports it
			if tc.unread {
				w = slurm.BillingWeights{Unread: `TRESBillingWeights "CPU=x": weight "x" of cpu is not a number >= 0`}
			}
			j := heldJob(21, "bert", 1, 2)
			j.Cluster, j.QOS, j.TimeLimit = "lab", "shared", time.Hour
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Grp: tc.grp, PerJob: tc.qosJob, Budget: tc.budget}},
				Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu", Billing: w}}, BudgetTick: tc.tick}
			c := &limitsCluster{fakeCluster: &fakeCluster{nodes: nodes, jobs: []slurm.Job{j, other}}, limits: limits}
			a := &fakeApplier{}
			d, st := newTestDaemonWith(t, c, a, func(*Config) {})
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			if tc.release {
				got := oneStart(t, a)
				if got.GPUsPerNode*got.NumNodes != 2 || rep.Ignored[21] != tc.ignored {
					t.Errorf("released %+v, ignored %q; want its request (2 GPUs), and %q", got, rep.Ignored[21], tc.ignored)
				}
				return
			}
			if tc.maxGPUs == 0 {
				if len(a.got) != 0 || rep.Ignored[21] != tc.ignored {
					t.Errorf("actions %+v, ignored %q; want none, and %q", a.got, rep.Ignored[21], tc.ignored)
				}
				if got := gauge(t, d, "rubick_group_limited_jobs"); got != 1 {
					t.Errorf("rubick_group_limited_jobs = %v, want 1", got)
				}
				// rubick explain says why it is still held.
				reasons, err := st.Reasons(context.Background(), 21, 1)
				if err != nil || len(reasons) != 1 || !strings.Contains(string(reasons[0].Reason), `"reason":"group-limit"`) ||
					!strings.Contains(string(reasons[0].Reason), tc.ignored) {
					t.Errorf("stored reasons of job 21: %v, %v; want group-limit saying %q", reasons, err, tc.ignored)
				}
				return
			}
			got := oneStart(t, a)
			gpus, cpus := got.GPUsPerNode*got.NumNodes, got.CPUsPerTask*got.NumNodes
			mem := got.MemMB(j)
			if gpus > tc.maxGPUs || gpus < 2 || cpus > tc.maxCPUs || cpus < tc.minCPUs || tc.maxMem > 0 && mem > tc.maxMem {
				t.Errorf("started on %d GPUs, %d CPUs, %d MB; want 2 to %d GPUs, %d to %d CPUs, %d MB at most (0: any)",
					gpus, cpus, mem, tc.maxGPUs, tc.minCPUs, tc.maxCPUs, tc.maxMem)
			}
			if tc.node != "" && !slices.Equal(got.Nodes, []string{tc.node}) {
				t.Errorf("started on %v, want %s alone", got.Nodes, tc.node)
			}
			if g, c := tc.perNode.gpus, tc.perNode.cpus; g > 0 && got.GPUsPerNode > g || c > 0 && got.CPUsPerTask > c {
				t.Errorf("started on %d GPUs and %d CPUs per node, want %d and %d at most (0: any)", got.GPUsPerNode, got.CPUsPerTask, g, c)
			}
			if tc.bound != "" {
				reasons, err := st.Reasons(context.Background(), 21, 1)
				if err != nil || len(reasons) != 1 || !strings.Contains(string(reasons[0].Reason), tc.bound) {
					t.Errorf("stored reasons of job 21: %v, %v; want them to say %q", reasons, err, tc.bound)
				}
			}
			if tc.grp == (slurm.GroupLimits{}) && tc.qosJob == (slurm.JobLimits{}) && !tc.budget.IsSet() && (gpus <= 2 || cpus <= 12 || mem <= 72000) {
				t.Errorf("without a limit started on %d GPUs, %d CPUs, %d MB; want over 2 GPUs, 12 CPUs and 72000 MB: the twin that shows the caps",
					gpus, cpus, mem)
			}
		})
	}
}

// Two queued jobs of one QOS with GrpTRES=gres/gpu=4 are planned within
// it together: no start is deferred for the group (bounded by the group's
// room alone, the policy gave each 4 GPUs and the second start was
// dropped by SlurmActions). bert scales well on one node, so the first
// keeps 4 and the second waits with reason group-limit, as on a cluster
// of 4 GPUs. Billing without TRESBillingWeights counts CPUs, so
// GrpTRES=billing=16 is planned as 16 CPUs the same way (bounded alone,
// both were planned on 16 CPUs and the second was deferred), and GrpJobs=1
// as one job.
func TestCycleSplitsGroupRoom(t *testing.T) {
	tests := map[string]struct {
		grp   slurm.GroupLimits
		most  int                    // GPUs, or CPUs, the starts may take together
		count func(slurm.Action) int // what they take
		says  string                 // what the one left waiting says
	}{
		"GPUs": {slurm.GroupLimits{GPUs: 4}, 4, func(a slurm.Action) int { return a.GPUsPerNode * a.NumNodes },
			"QOS shared GrpTRES: its jobs here hold 4 of the 4 GPUs left to them"},
		"billing": {slurm.GroupLimits{Billing: 16}, 16, func(a slurm.Action) int { return a.CPUsPerTask * a.NumNodes },
			"QOS shared GrpTRES: its jobs here hold 16 of the 16 CPUs left to them"},
		"jobs": {slurm.GroupLimits{Jobs: 1}, 1, func(slurm.Action) int { return 1 },
			"QOS shared GrpJobs: 1 of its jobs run here, as many as are left to them"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a1, a2 := heldJob(21, "bert", 1, 2), heldJob(22, "bert", 1, 2)
			for _, j := range []*slurm.Job{&a1, &a2} {
				j.Cluster, j.QOS = "lab", "shared"
			}
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Grp: tc.grp}}}
			c := &limitsCluster{fakeCluster: &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{a1, a2}}, limits: limits}
			a := &fakeApplier{}
			d, st := newTestDaemonWith(t, c, a, func(*Config) {})
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			took := 0
			for _, act := range a.got {
				took += tc.count(act)
			}
			if len(a.got) == 0 || took > tc.most || len(rep.Skipped) != 0 {
				t.Errorf("applied %+v (%d), skipped %v; want starts on %d at most, none deferred", a.got, took, rep.Skipped, tc.most)
			}
			if len(a.got) == 1 {
				waiting := int64(21 + 22 - a.got[0].JobID)
				reasons, err := st.Reasons(context.Background(), waiting, 1)
				if err != nil || len(reasons) != 1 || !strings.Contains(string(reasons[0].Reason), `"reason":"group-limit"`) ||
					!strings.Contains(string(reasons[0].Reason), tc.says) {
					t.Errorf("stored reasons of job %d: %v, %v; want group-limit saying %q", waiting, reasons, err, tc.says)
				}
				if got := gauge(t, d, "rubick_group_limited_jobs"); got != 1 {
					t.Errorf("rubick_group_limited_jobs = %v, want 1", got)
				}
			}
		})
	}
}

// A billing limit is a CPU room for the policy only where every job of it
// bills CPUs alone; with weights it bounds each job alone.
func TestSnapshotGroupsBilling(t *testing.T) {
	for name, tc := range map[string]struct {
		weights slurm.BillingWeights
		want    []policy.Group
	}{
		"unset":    {slurm.BillingWeights{}, []policy.Group{{Name: "QOS shared GrpTRES", GPUs: -1, CPUs: 16, Jobs: -1, JobsName: "QOS shared GrpJobs"}}},
		"weighted": {slurm.BillingWeights{CPU: 1, GPU: 4, Set: true}, []policy.Group{}},
		"unread":   {slurm.BillingWeights{Unread: "CPU=x"}, []policy.Group{}},
	} {
		t.Run(name, func(t *testing.T) {
			j := heldJob(21, "bert", 1, 2)
			j.Cluster, j.QOS = "lab", "shared"
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Grp: slurm.GroupLimits{Billing: 16}}},
				Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu", Billing: tc.weights}}}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: labNodes(2), Jobs: []slurm.Job{j}, Estimators: shippedEstimators(t), Limits: limits},
				slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, v.Snapshot.Groups, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("groups (-want +got):\n%s", d)
			}
		})
	}
}

// The plan's starts and restarts together stay within each group's room,
// in job order, after the plan's preemptions free theirs; the rest wait.
func TestSlurmActionsKeepGroupsTogether(t *testing.T) {
	est := shippedEstimators(t)
	running := runningJob(5, "bert")
	running.NodeList, running.GPUs, running.Tag.Plan = []string{"node1"}, 4, "dp4.tp1.pp1.mb8.a1.z0"
	running.MemMB, running.Billing = 32768, 8
	jobs := []slurm.Job{running, heldJob(6, "bert", 1, 4), heldJob(7, "bert", 1, 4), heldJob(8, "bert", 1, 4)}
	for i := range jobs {
		// Each asks for the 32 GB its start below books, and an hour.
		jobs[i].Cluster, jobs[i].QOS, jobs[i].MemPerNodeMB, jobs[i].TimeLimit = "lab", "shared", 32768, time.Hour
	}
	jobs[0].StartTime = t0.Add(-20 * time.Minute) // 40 minutes left: 160 GPU-minutes, 320 CPU-minutes
	nodes := labNodes(3)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
	start := func(id, node string) policy.Action {
		return policy.Action{Kind: policy.Start, JobID: id, Alloc: []policy.NodeAlloc{{Node: node, GPUs: 4, CPUs: 8, MemGB: 32}},
			Plan: model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}}
	}
	plan := policy.Plan{Actions: []policy.Action{
		{Kind: policy.Preempt, JobID: "5"}, start("6", "node2"), start("7", "node3"), start("8", "node1"),
	}}
	tests := map[string]struct {
		grp     slurm.GroupLimits
		kept    []int
		skipped map[int]string
	}{
		"GPUs": {slurm.GroupLimits{GPUs: 10}, []int{5, 6, 7},
			map[int]string{8: "QOS shared GrpTRES allows 10 GPUs, 8 in use or planned before it, and its plan adds 4"}},
		"CPUs": {slurm.GroupLimits{CPUs: 12}, []int{5, 6}, map[int]string{
			7: "QOS shared GrpTRES allows 12 CPUs, 8 in use or planned before it, and its plan adds 8",
			8: "QOS shared GrpTRES allows 12 CPUs, 8 in use or planned before it, and its plan adds 8"}},
		"memory": {slurm.GroupLimits{MemMB: 81920}, []int{5, 6, 7},
			map[int]string{8: "QOS shared GrpTRES allows 81920 MB of memory, 65536 in use or planned before it, and its plan adds 32768"}},
		// An hour on 4 GPUs and 8 CPUs: 240 GPU- and 480 CPU-minutes each.
		"GPU-minutes": {slurm.GroupLimits{GPURunMins: 600}, []int{5, 6, 7},
			map[int]string{8: "QOS shared GrpTRESRunMins allows 600 GPU-minutes to run, 480 in use or planned before it, and its plan adds 240"}},
		"CPU-minutes": {slurm.GroupLimits{CPURunMins: 1000}, []int{5, 6, 7},
			map[int]string{8: "QOS shared GrpTRESRunMins allows 1000 CPU-minutes to run, 960 in use or planned before it, and its plan adds 480"}},
		// No weights: each job bills its 8 CPUs.
		"billing": {slurm.GroupLimits{Billing: 20}, []int{5, 6, 7},
			map[int]string{8: "QOS shared GrpTRES allows 20 billing, 16 in use or planned before it, and its plan adds 8"}},
		"billing-minutes": {slurm.GroupLimits{BillingRunMins: 1000}, []int{5, 6, 7},
			map[int]string{8: "QOS shared GrpTRESRunMins allows 1000 billing-minutes to run, 960 in use or planned before it, and its plan adds 480"}},
		// And 32768 MB for an hour: 1,966,080 MB-minutes each.
		"memory-minutes": {slurm.GroupLimits{MemRunMins: 5000000}, []int{5, 6, 7},
			map[int]string{8: "QOS shared GrpTRESRunMins allows 5000000 MB-minutes of memory to run, 3932160 in use or planned before it, and its plan adds 1966080"}},
		// And one node for an hour: 60 node-minutes each.
		"node-minutes": {slurm.GroupLimits{NodeRunMins: 150}, []int{5, 6, 7},
			map[int]string{8: "QOS shared GrpTRESRunMins allows 150 node-minutes to run, 120 in use or planned before it, and its plan adds 60"}},
		// Each start takes a node the group did not hold; the preemption
		// gives node1 back first.
		"nodes": {slurm.GroupLimits{Nodes: 2}, []int{5, 6, 7},
			map[int]string{8: "QOS shared GrpTRES allows 2 nodes, 2 in use or planned before it, and its plan adds 1"}},
		"jobs": {slurm.GroupLimits{Jobs: 2}, []int{5, 6, 7},
			map[int]string{8: "QOS shared GrpJobs allows 2 running jobs, 2 in use or planned before it, and its plan adds 1"}},
		"room for all": {slurm.GroupLimits{GPUs: 12, CPUs: 24, MemMB: 98304, GPURunMins: 720, CPURunMins: 1440, Billing: 24, BillingRunMins: 1440,
			MemRunMins: 5898240, NodeRunMins: 180, Nodes: 3, Jobs: 3},
			[]int{5, 6, 7, 8}, map[int]string{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Grp: tc.grp}}}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: jobs, Estimators: est, Limits: limits}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			actions, skipped := v.SlurmActions(plan, t0)
			kept, why := groupVerdicts(t, actions, skipped)
			if diff := cmp.Diff(tc.kept, kept); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.skipped, why); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
		})
	}
}

// A preemption of a job outside the group, for a start the group limit
// then defers (on the preempted job's node), is dropped too: the job keeps
// running rather than restart for nothing. One whose room a kept start
// needs stays.
func TestSlurmActionsDropIdlePreemption(t *testing.T) {
	est := shippedEstimators(t)
	running := runningJob(5, "bert")
	running.NodeList, running.GPUs, running.Tag.Plan = []string{"node1"}, 4, "dp4.tp1.pp1.mb8.a1.z0"
	running.MemMB, running.Cluster, running.QOS = 32768, "lab", "other"
	jobs := []slurm.Job{running, heldJob(6, "bert", 1, 4), heldJob(7, "bert", 1, 4), heldJob(8, "bert", 1, 4)}
	for i := 1; i < len(jobs); i++ {
		jobs[i].Cluster, jobs[i].QOS, jobs[i].MemPerNodeMB, jobs[i].TimeLimit = "lab", "shared", 32768, time.Hour
	}
	nodes := labNodes(3)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
	start := func(id, node string) policy.Action {
		return policy.Action{Kind: policy.Start, JobID: id, Alloc: []policy.NodeAlloc{{Node: node, GPUs: 4, CPUs: 8, MemGB: 32}},
			Plan: model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}}
	}
	plan := policy.Plan{Actions: []policy.Action{{Kind: policy.Preempt, JobID: "5"}, start("6", "node2"), start("7", "node3"), start("8", "node1")}}
	tests := map[string]struct {
		qos     string // the running job's QOS
		limit   int64  // QOS shared's GrpTRES mem
		kept    []int
		skipped []int
	}{
		"outside the group": {"other", 65536, []int{6, 7}, []int{5, 8}},
		"room for all":      {"other", 98304, []int{5, 6, 7, 8}, nil},
		// In the group, its memory is what 7's start needs.
		"inside the group": {"shared", 81920, []int{5, 6, 7}, []int{8}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			jobs[0].QOS = tc.qos
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Grp: slurm.GroupLimits{MemMB: tc.limit}}}}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: jobs, Estimators: est, Limits: limits}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			actions, skipped := v.SlurmActions(plan, t0)
			kept, why := groupVerdicts(t, actions, skipped)
			var dropped []int
			if len(why) > 0 {
				dropped = slices.Sorted(maps.Keys(why))
			}
			if d := cmp.Diff(tc.kept, kept); d != "" {
				t.Errorf("kept (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.skipped, dropped); d != "" {
				t.Errorf("skipped (-want +got):\n%s (%v)", d, skipped)
			}
			if tc.qos == "other" && len(tc.skipped) > 0 && !strings.Contains(skipped[5].Error(), "its preemption was for a start deferred for a group limit; it keeps running") {
				t.Errorf("job 5 skipped for %v, want it to say why", skipped[5])
			}
		})
	}
}

// A restart onto fewer GPUs frees its room before any start takes it,
// whatever the order of the actions.
func TestSlurmActionsGroupRoomFreedFirst(t *testing.T) {
	running := runningJob(9, "bert")
	running.NodeList, running.GPUs, running.Tag.Plan = []string{"node1"}, 4, "dp4.tp1.pp1.mb8.a1.z0"
	jobs := []slurm.Job{heldJob(6, "bert", 1, 4), heldJob(7, "bert", 1, 4), running}
	for i := range jobs {
		jobs[i].Cluster, jobs[i].QOS = "lab", "shared"
	}
	nodes := labNodes(3)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
	limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Grp: slurm.GroupLimits{GPUs: 10}}}}
	v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: jobs, Estimators: shippedEstimators(t), Limits: limits}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	on := func(kind policy.Kind, id, node string, gpus int) policy.Action {
		return policy.Action{Kind: kind, JobID: id, Alloc: []policy.NodeAlloc{{Node: node, GPUs: gpus, CPUs: 8}},
			Plan: model.Plan{DP: gpus, TP: 1, PP: 1, MicroBatch: 32 / gpus, Accum: 1}}
	}
	plan := policy.Plan{Actions: []policy.Action{on(policy.Start, "6", "node2", 4), on(policy.Start, "7", "node3", 4), on(policy.Restart, "9", "node1", 2)}}
	actions, skipped := v.SlurmActions(plan, t0)
	if len(actions) != 3 || len(skipped) != 0 {
		t.Errorf("actions %+v, skipped %v; want all three: 4 + 4 + 2 GPUs fit the 10", actions, skipped)
	}
}

// A running job that reports a lower speed than its limit was set for
// (its plan overrated) gets its limit raised to what that speed needs; one
// as fast as predicted, or with stretching off, keeps its limit.
func TestCycleRaisesTimeLimitsOnMeasuredSpeed(t *testing.T) {
	plan := model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}
	res := model.Resources{Placement: model.Placement{4}, CPUs: 8}
	e, _ := shippedEstimators(t)("bert")
	b, err := e.Predict(plan, res)
	if err != nil {
		t.Fatal(err)
	}
	// The limit follows the request's predicted speed (its best plan on
	// 4 GPUs, 8 CPUs) over the measured one: 60 min x that x 1.25.
	_, req, err := e.BestPlan(model.Resources{Placement: model.Placement{4}, CPUs: 8, HostMemGB: 64000.0 / 1024}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raised := func(slower float64) time.Duration {
		d := time.Duration(float64(time.Hour) * b.Iter * slower / req.Iter * 1.25)
		return (d + time.Minute - 1) / time.Minute * time.Minute
	}
	tests := map[string]struct {
		slower  float64 // measured iteration time over the predicted one
		off     bool
		earlier bool          // the samples are of an earlier run
		set     string        // the tag's ts: the limit rubick set
		limit   time.Duration // the job's limit, 75 min if 0
		tag     string        // the tag's plan, the reported one if ""; "-": none
		want    time.Duration // the raised limit; 0: none
	}{
		"3x slower": {slower: 3, want: raised(3)},
		// It trains on its line as it is: priced at the plan it reports,
		// at that plan's speed.
		"3x slower, no plan in its tag":      {slower: 3, tag: "-", want: raised(3)},
		"3x slower, another plan in its tag": {slower: 3, tag: "dp2.tp2.pp1.mb16.a1.z0", want: raised(3)},
		"3x slower, limit rubick's":          {slower: 3, set: "75", want: raised(3)},
		// Someone cut it to 50 min (scontrol update): theirs to keep.
		"3x slower, limit set by hand": {slower: 3, set: "75", limit: 50 * time.Minute},
		"an earlier run's":             {slower: 3, earlier: true},
		// The 75 min it has cover the predicted speed with its margin.
		"as predicted": {slower: 1},
		"stretch off":  {slower: 3, off: true},
	}
	if raised(1) > 75*time.Minute*11/10 {
		t.Fatalf("at the predicted speed the limit would be raised to %v: the twin shows nothing", raised(1))
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := runningJob(5, "bert")
			j.NodeList, j.GPUs, j.Tag.Plan, j.Tag.Generation = []string{"node1"}, 4, plan.String(), 1
			switch tc.tag {
			case "":
			case "-":
				j.Tag.Plan = ""
			default:
				j.Tag.Plan = tc.tag
			}
			j.StartTime, j.TimeLimit = t0.Add(-10*time.Minute), 75*time.Minute
			if tc.limit > 0 {
				j.TimeLimit = tc.limit
			}
			if tc.earlier {
				j.StartTime = t0.Add(time.Second) // the store's clock stamps them at t0
			}
			j.Tag.Extra = map[string]string{tagTime: "60", tagReq: "n1.g4.c8.m64000"}
			if tc.set != "" {
				j.Tag.Extra[tagSet] = tc.set
			}
			nodes := labNodes(1)
			nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
			c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{j}}
			a := &fakeApplier{}
			d, st := newTestDaemonWith(t, c, a, func(cfg *Config) { cfg.TimeLimits.Stretch = !tc.off })
			for i := range 3 {
				smp := model.Sample{Plan: plan, Resources: res, IterS: b.Iter * tc.slower}
				if err := st.AddReported(context.Background(), "bert", smp, 5, 10*i); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := d.Cycle(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			var got time.Duration
			for _, act := range a.got {
				if act.Kind == slurm.ActionTimeLimit && act.JobID == 5 {
					got = act.TimeLimit
					if want := strconv.FormatInt(wholeMinutes(act.TimeLimit), 10); act.Tag == nil || act.Tag.Extra[tagSet] != want {
						t.Errorf("time limit action's tag %v; want ts=%s", act.Tag, want)
					}
				} else {
					t.Errorf("unexpected action %+v", act)
				}
			}
			if got != tc.want {
				t.Errorf("time limit raised to %v, want %v (0: none)", got, tc.want)
			}
			if tc.want > 0 {
				reasons, err := st.Reasons(context.Background(), 5, 1)
				if err != nil || len(reasons) != 1 || !strings.Contains(string(reasons[0].Reason), "time limit raised to") {
					t.Errorf("stored reasons %v, %v; want one saying the limit was raised", reasons, err)
				}
			}
		})
	}
}

// A partition Slurm starts no job in (DOWN, INACTIVE) has its jobs left as
// they are: a pending one held, a running one not restarted (Slurm would
// not start it again). A DRAIN partition still starts what is queued, and
// a job submitted to several partitions is planned in one that is up.
func TestBuildViewStoppedPartition(t *testing.T) {
	running := runningJob(5, "bert")
	running.NodeList, running.GPUs, running.Tag.Plan = []string{"node1"}, 4, "dp4.tp1.pp1.mb8.a1.z0"
	both := heldJob(7, "bert", 1, 4)
	both.Partition = "gpu,gpu2"
	nodes := labNodes(2)
	nodes[1].Partitions = []string{"gpu", "gpu2"}
	cfg := Defaults()
	cfg.Partitions = []string{"gpu", "gpu2"}
	for _, tc := range []struct {
		state   string
		managed []int // the jobs in the snapshot
		reasons map[int]string
	}{
		{"UP", []int{5, 6, 7}, map[int]string{}},
		{"DRAIN", []int{5, 6, 7}, map[int]string{}},
		{"DOWN", []int{7}, map[int]string{5: "partition gpu is DOWN: runs on as it is, since Slurm would not start it again",
			6: "partition gpu is DOWN: Slurm starts no job there; planned once it is UP"}},
		{"INACTIVE", []int{7}, map[int]string{5: "partition gpu is INACTIVE: runs on as it is, since Slurm would not start it again",
			6: "partition gpu is INACTIVE: Slurm starts no job there; planned once it is UP"}},
	} {
		t.Run(tc.state, func(t *testing.T) {
			limits := slurm.Limits{Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu", State: tc.state}, "gpu2": {Name: "gpu2", State: "UP"}}}
			v, err := BuildView(cfg, t0, Inputs{Nodes: nodes, Jobs: []slurm.Job{running, heldJob(6, "bert", 1, 4), both}, Estimators: shippedEstimators(t),
				Limits: limits}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, j := range v.Snapshot.Jobs {
				id, _ := strconv.Atoi(j.ID)
				got = append(got, id)
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.managed, got); diff != "" {
				t.Errorf("jobs planned (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.reasons, v.Unmanaged); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
			if tc.state == "DOWN" && v.managed["7"].part != "gpu2" {
				t.Errorf("job 7 planned in %q, want gpu2, the partition of its two that is up", v.managed["7"].part)
			}
		})
	}
}

// A job rubickd released a moment before its partition went DOWN does not
// keep the cycles waiting for it to start (StartGrace): the next cycle,
// which reads the partition's state, leaves it alone for the partition.
func TestBuildViewReleasedIntoStoppedPartition(t *testing.T) {
	released := heldJob(6, "bert", 1, 4)
	released.Held, released.Reason = false, "PartitionDown"
	released.Tag.Generation, released.Tag.Plan = 1, "dp4.tp1.pp1.mb8.a1.z0"
	released.Tag.Extra = map[string]string{tagAt: strconv.FormatInt(t0.Add(-5*time.Second).Unix(), 10)}
	for state, starting := range map[string]bool{"UP": true, "DOWN": false} {
		limits := slurm.Limits{Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu", State: state}}}
		v, err := BuildView(Defaults(), t0, Inputs{Nodes: labNodes(2), Jobs: []slurm.Job{released}, Estimators: shippedEstimators(t),
			Limits: limits}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(v.Starting, 6); got != starting {
			t.Errorf("partition %s: job 6 awaited as starting: %v, want %v (reason %q)", state, got, starting, v.Unmanaged[6])
		}
	}
}

// pollCluster answers a poll with update_time as slurmrestd does when
// nothing Slurm counts has changed: no list. Only a full poll reads it.
type pollCluster struct {
	fakeCluster
	full []bool // per poll, whether it was a full one
}

func (c *pollCluster) Jobs(ctx context.Context, since time.Time) ([]slurm.Job, bool, error) {
	c.full = append(c.full, since.IsZero())
	if !since.IsZero() {
		return nil, false, nil
	}
	jobs, changed, err := c.fakeCluster.Jobs(ctx, since)
	return slices.Clone(jobs), changed, err // what rubickd caches is a copy
}

// Slurm does not count a requeued job's begin time passing as a change of
// its job list. Once the begin time of a job the cached list has waiting
// for it comes, the list is read in full, until it no longer says so.
func TestJobsReadInFullOnceBeginTimeComes(t *testing.T) {
	j := heldJob(5, "bert", 1, 8)
	j.Held, j.Reason, j.EligibleTime = false, "BeginTime", t0.Add(10*time.Second)
	c := &pollCluster{fakeCluster: fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}}
	d, _ := newTestDaemonWith(t, c, &fakeApplier{}, func(*Config) {})
	now := t0
	d.deps.Now = func() time.Time { return now }
	var reasons []string
	for _, at := range []time.Duration{0, 5, 10, 15, 20} {
		now = t0.Add(at * time.Second)
		if at == 15 {
			c.jobs[0].Reason = "Resources" // Slurm's next pass
		}
		jobs, err := d.jobs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		reasons = append(reasons, jobs[0].Reason)
	}
	// The first poll is a full one; at 10 s and 15 s the cached list has
	// the job waiting for a begin time that has come.
	if diff := cmp.Diff([]bool{true, false, true, true, false}, c.full); diff != "" {
		t.Errorf("full polls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"BeginTime", "BeginTime", "BeginTime", "Resources", "Resources"}, reasons); diff != "" {
		t.Errorf("reasons read (-want +got):\n%s", diff)
	}
}

// A job rubickd released moments ago that started, and that Slurm then
// requeued unheld when its node failed, waits for nodes, not for the
// start it was released to: the cycle plans it (on another node) rather
// than wait for it until StartGrace from its release. So is one released
// onto a node that went down or was drained before it started there.
func TestBuildViewRequeuedSinceRelease(t *testing.T) {
	for name, tc := range map[string]struct {
		rc, restarts int    // the tag's restart count, and Slurm's
		state        string // node1's, the node it was sent to
		starting     bool
	}{
		"released, not started yet":            {0, 0, "IDLE", true},
		"released onto a node still busy":      {0, 0, "MIXED+COMPLETING", true},
		"requeued since, its node failed":      {0, 1, "DOWN+DRAIN", false},
		"requeued since, node back":            {0, 1, "IDLE", false},
		"released after an earlier requeue":    {1, 1, "IDLE", true},
		"its node went down since release":     {0, 0, "DOWN", false},
		"its node was drained since release":   {0, 0, "IDLE+DRAIN", false},
		"node gone from the managed partition": {0, 0, "", false},
	} {
		t.Run(name, func(t *testing.T) {
			j := heldJob(6, "bert", 1, 8)
			j.Held, j.Reason = false, "ReqNodeNotAvail,_UnavailableNodes:node1"
			j.RequiredNodes = []string{"node1"}
			j.Tag.Generation, j.Tag.Plan = 1, "dp8.tp1.pp1.mb4.a1.z2"
			j.Tag.Extra = map[string]string{tagAt: strconv.FormatInt(t0.Add(-20*time.Second).Unix(), 10), slurm.TagRestarts: strconv.Itoa(tc.rc)}
			j.RestartCount = tc.restarts
			nodes := labNodes(2)
			nodes[0].State = tc.state
			if tc.state == "" {
				nodes = nodes[1:]
			}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: []slurm.Job{j}, Estimators: shippedEstimators(t)},
				slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(v.Starting, 6); got != tc.starting {
				t.Errorf("job 6 awaited as starting: %v, want %v (%q)", got, tc.starting, v.Unmanaged[6])
			}
		})
	}
}

// A job rubick cannot reconfigure is released on its own request (its
// --nodelist left to Slurm), and never reconfigured once it runs: an
// interactive job (salloc, srun: no batch script), which Slurm can neither
// requeue nor signal through a batch shell, and one whose node lists Slurm
// reports in a form rubick cannot read, which a plan could put anywhere.
func TestCycleJobsLeftAsSubmitted(t *testing.T) {
	bad := errors.New(`required_nodes: invalid hostlist: unbalanced '[' in "gpu[01-"`)
	for name, tc := range map[string]struct {
		mark func(*slurm.Job)
		why  string
	}{
		"interactive":         {func(j *slurm.Job) { j.Interactive = true }, "interactive (salloc or srun)"},
		"unreadable nodelist": {func(j *slurm.Job) { j.NodesErr = bad }, "node lists could not be read (required_nodes: invalid hostlist"},
	} {
		t.Run(name, func(t *testing.T) {
			held := heldJob(21, "bert", 1, 2)
			running := runningJob(22, "bert")
			running.NodeList, running.GPUs, running.Tag.Plan = []string{"node2"}, 4, "dp4.tp1.pp1.mb8.a1.z0"
			tc.mark(&held)
			tc.mark(&running)
			nodes := labNodes(2)
			nodes[1].GPUsUsed, nodes[1].CPUsAlloc = 4, 8
			c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{held, running}}
			a := &fakeApplier{}
			d, _ := newTestDaemon(t, c, a)
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			want := []slurm.Action{{Kind: slurm.ActionStart, JobID: 21, NumNodes: 1, GPUsPerNode: 2, CPUsPerTask: 8, MemPerNodeMB: 64000}}
			if diff := cmp.Diff(want, a.got, cmpopts.IgnoreFields(slurm.Action{}, "Tag")); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			for _, id := range []int{21, 22} {
				if !strings.Contains(rep.Ignored[id], tc.why) {
					t.Errorf("job %d: %q, want it to say %q", id, rep.Ignored[id], tc.why)
				}
			}
		})
	}
}

// licenseCluster lists licenses besides what fakeCluster reports.
type licenseCluster struct {
	*fakeCluster
	licenses []slurm.License
}

func (l *licenseCluster) Licenses(context.Context) ([]slurm.License, error) { return l.licenses, nil }

// matlabJobs is two held bert jobs, 21 and 22, each asking for the
// cluster's one matlab license; free (0 or 1) says whether it is free.
func matlabJobs(free int) *licenseCluster {
	var jobs []slurm.Job
	for _, id := range []int{21, 22} {
		j := heldJob(id, "bert", 1, 4)
		j.Licenses = "matlab:1"
		jobs = append(jobs, j)
	}
	return &licenseCluster{fakeCluster: &fakeCluster{nodes: labNodes(2), jobs: jobs},
		licenses: []slurm.License{{Name: "matlab", Total: 1, Used: 1 - free, Free: free}}}
}

// A held job asking for a license none of which is free stays held (Slurm
// would keep it pending, with GPUs planned for it idle); of two asking for
// the one free, the plan starts one and defers the other.
func TestCycleLicenses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		free    int
		started []int
		ignored map[int]string
		skipped map[int]string
	}{
		{"none free", 0, nil, map[int]string{21: "waits for license matlab: it asks for 1, 0 of 1 free; planned once Slurm has them",
			22: "waits for license matlab: it asks for 1, 0 of 1 free; planned once Slurm has them"}, map[int]string{}},
		{"one free", 1, []int{21}, map[int]string{}, map[int]string{22: "job 22: its licenses are taken: license matlab: it asks for 1, and the plan's earlier starts leave 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, _, _ := oneCycle(t, matlabJobs(tc.free), tc.started)
			if diff := cmp.Diff(tc.ignored, rep.Ignored, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ignored (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.skipped, rep.Skipped, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
		})
	}
}

// A job asking for other GRES on each node (--gres=gpu:2,lscratch:100) is
// planned only on nodes with that much free, or those it holds; with none,
// it stays held.
func TestBuildViewOtherGres(t *testing.T) {
	for _, tc := range []struct {
		name   string
		free   [2]int // lscratch free on node1, node2
		want   []string
		reason string
	}{
		{"one node has it", [2]int{50, 1000}, []string{"node2"}, ""},
		{"both have it", [2]int{100, 1000}, []string{"node1", "node2"}, ""},
		{"none has it", [2]int{50, 99}, nil, "waits for lscratch:100 free on a node it may run on; planned once one has it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := labNodes(2)
			for i := range nodes {
				nodes[i].GresFree = map[string]int{"lscratch": tc.free[i]}
			}
			j := heldJob(21, "bert", 1, 2)
			j.OtherGres = []string{"lscratch:100"}
			running := runningJob(22, "bert")
			running.NodeList, running.GPUs, running.Tag.Plan, running.OtherGres = []string{"node1"}, 4, "dp4.tp1.pp1.mb8.a1.z0", []string{"lscratch:100"}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: []slurm.Job{j, running}, Estimators: shippedEstimators(t)}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, pj := range v.Snapshot.Jobs {
				got[pj.ID] = pj.Nodes
			}
			if diff := cmp.Diff(tc.want, got["21"]); diff != "" {
				t.Errorf("job 21's nodes (-want +got):\n%s", diff)
			}
			if !slices.Contains(got["22"], "node1") {
				t.Errorf("job 22 may run on %v, want the node1 it holds among them", got["22"])
			}
			if v.Unmanaged[21] != tc.reason {
				t.Errorf("job 21: %q, want %q", v.Unmanaged[21], tc.reason)
			}
		})
	}
}

// Of two jobs asking for 600 GB of lscratch each, where only node1 has
// 1000 free, the plan starts one there and defers the other; with 1200
// free both start. (Each bounds each job alone: both are planned there.)
func TestCycleOtherGresTogether(t *testing.T) {
	for _, tc := range []struct {
		free    int
		started []int
		skipped map[int]string
	}{
		{1000, []int{21}, map[int]string{22: "job 22: its GRES on a node are taken: lscratch on node1: it asks for 600, and the plan's earlier starts leave 400"}},
		{1200, []int{21, 22}, map[int]string{}},
	} {
		t.Run(strconv.Itoa(tc.free), func(t *testing.T) {
			nodes := labNodes(2)
			nodes[0].GresFree, nodes[1].GresFree = map[string]int{"lscratch": tc.free}, map[string]int{"lscratch": 0}
			var jobs []slurm.Job
			for _, id := range []int{21, 22} {
				j := heldJob(id, "bert", 1, 4)
				j.OtherGres = []string{"lscratch:600"}
				// Held to its request (a limit Slurm held it back for), so
				// that both fit on node1.
				j.Tag.Extra = map[string]string{tagLimit: "QOSGrpGRES"}
				jobs = append(jobs, j)
			}
			a := &fakeApplier{}
			d, _ := newTestDaemon(t, &fakeCluster{nodes: nodes, jobs: jobs}, a)
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			got := startedJobs(a)
			slices.Sort(got)
			if diff := cmp.Diff(tc.started, got); diff != "" {
				t.Errorf("started (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.skipped, rep.Skipped, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
		})
	}
}

// A preemption's tag keeps what the job has run so far (written once it is
// requeued), and its generation: the preemption and the start after it are
// one reconfiguration. At that start the job counts as having run, so its
// time limit is cut at its deadline as a restart's is (a limit past the
// deadline, Slurm ends the job at its release).
func TestPreemptRecordsRunTime(t *testing.T) {
	est := shippedEstimators(t)
	j := runningJob(5, "bert")
	j.NodeList, j.GPUs, j.StartTime, j.TimeLimit, j.Deadline = []string{"node1"}, 4, t0.Add(-10*time.Minute), time.Hour, t0.Add(40*time.Minute)
	j.Tag.Plan, j.Tag.Generation, j.Tag.Extra = "dp4.tp1.pp1.mb8.a1.z0", 1, map[string]string{"ran": "300", "tl": "60"}
	nodes := labNodes(1)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
	v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: []slurm.Job{j}, Estimators: est}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	actions, skipped := v.SlurmActions(policy.Plan{Actions: []policy.Action{{Kind: policy.Preempt, JobID: "5"}}}, t0)
	if len(actions) != 1 || len(skipped) != 0 || actions[0].Tag == nil {
		t.Fatalf("actions %+v, skipped %v; want the preemption with a tag", actions, skipped)
	}
	got := *actions[0].Tag
	if got.Extra["ran"] != "900" || got.Generation != 1 {
		t.Errorf("preemption tag %+v; want ran=900 (300 s before, 600 s this run) and gen=1", got)
	}
	if !actions[0].RanAt.Equal(t0) {
		t.Errorf("RanAt = %v, want %v: the Applier adds the run from the decision to the requeue", actions[0].RanAt, t0)
	}

	// Preempted: pending and held with that tag, 10 minutes later.
	later := t0.Add(10 * time.Minute)
	p := heldJob(5, "bert", 1, 4)
	p.Tag, p.TimeLimit, p.Deadline, p.RestartCount = &got, time.Hour, j.Deadline, 1
	v, err = BuildView(Defaults(), later, Inputs{Nodes: labNodes(1), Jobs: []slurm.Job{p}, Estimators: est}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	start := policy.Action{Kind: policy.Start, JobID: "5", Alloc: []policy.NodeAlloc{{Node: "node1", GPUs: 4, CPUs: 8, MemGB: 64}},
		Plan: model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}, Throughput: 1e6}
	actions, skipped = v.SlurmActions(policy.Plan{Actions: []policy.Action{start}}, later)
	if len(actions) != 1 || len(skipped) != 0 {
		t.Fatalf("actions %+v, skipped %v; want the start", actions, skipped)
	}
	if a := actions[0]; a.TimeLimit != 30*time.Minute || a.Tag.Generation != 2 || a.Tag.Extra["ran"] != "900" || !a.RanAt.IsZero() {
		t.Errorf("start: time limit %v, tag %+v, RanAt %v; want 30m (to the deadline), gen=2, ran=900, no RanAt", a.TimeLimit, a.Tag, a.RanAt)
	}
}

func TestUserTime(t *testing.T) {
	job := func(limit time.Duration, extra map[string]string) slurm.Job {
		j := heldJob(5, "bert", 1, 4)
		j.TimeLimit, j.Tag.Extra = limit, extra
		return j
	}
	tests := map[string]struct {
		j       slurm.Job
		want    time.Duration
		fixed   bool
		wantErr string
	}{
		"never acted on":            {j: job(time.Hour, nil), want: time.Hour},
		"stretched by rubick":       {j: job(90*time.Minute, map[string]string{tagTime: "60", tagSet: "90"}), want: time.Hour},
		"before ts was kept":        {j: job(90*time.Minute, map[string]string{tagTime: "60"}), want: time.Hour},
		"raised by hand":            {j: job(150*time.Minute, map[string]string{tagTime: "60", tagSet: "90"}), want: 150 * time.Minute, fixed: true},
		"cut by hand":               {j: job(20*time.Minute, map[string]string{tagTime: "60", tagSet: "90"}), want: 20 * time.Minute, fixed: true},
		"unlimited by hand":         {j: job(0, map[string]string{tagTime: "60", tagSet: "90"}), want: 0, fixed: true},
		"set by hand before":        {j: job(150*time.Minute, map[string]string{tagTime: "150", tagSet: "150", tagFixed: "1"}), want: 150 * time.Minute, fixed: true},
		"unlimited, by hand before": {j: job(0, map[string]string{tagFixed: "1"}), want: 0, fixed: true},
		"bad ts":                    {j: job(time.Hour, map[string]string{tagSet: "soon"}), wantErr: `tag ts="soon" is not whole minutes`},
		"bad tl":                    {j: job(time.Hour, map[string]string{tagTime: "-3"}), wantErr: `tag tl="-3" is not whole minutes`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, fixed, err := userTime(tc.j)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || fixed != tc.fixed {
				t.Errorf("userTime = %v, %v, %v; want %v, %v", got, fixed, err, tc.want, tc.fixed)
			}
		})
	}
}

// A tag whose action Slurm took in part, its AdminComment and not its
// TimeLimit (slurmctld applies them in that order, and stops at the
// refusal), records a limit the job does not have: read with the job's
// limit, the user's --time and a limit rubick set stay theirs, neither
// read as set by hand. A limit other than the tag's under a tag whose
// action Slurm took whole was set by hand.
func TestRefusedLimits(t *testing.T) {
	ctx := context.Background()
	const plan = "dp4.tp1.pp1.mb8.a1.z0"
	tag := func(gen int, extra map[string]string) slurm.Tag {
		e := map[string]string{tagReq: "n1.g4.c8.m64000"}
		maps.Copy(e, extra)
		return slurm.Tag{ModelType: "bert", Class: slurm.ClassBestEffort, Plan: plan, Generation: gen, Extra: e}
	}
	raised := tag(1, map[string]string{tagTime: "60", tagSet: "240"})
	started := tag(2, map[string]string{tagTime: "60", tagSet: "150"})
	type stored struct {
		kind slurm.ActionKind
		tag  slurm.Tag
		res  store.Result
	}
	type limit struct {
		User  time.Duration
		Fixed bool
	}
	tests := map[string]struct {
		state   string
		tag     slurm.Tag
		limit   time.Duration
		actions []stored
		// submitted, when set, is the job's submission; the store's clock
		// is at t0.
		submitted time.Time
		want      limit
	}{
		"raise refused": {state: slurm.StateRunning, tag: raised, limit: 75 * time.Minute,
			actions: []stored{{slurm.ActionTimeLimit, raised, store.ResultFailed}},
			want:    limit{User: time.Hour}},
		"raise abandoned, rubickd stopped after it": {state: slurm.StateRunning, tag: raised, limit: 75 * time.Minute,
			actions: []stored{{slurm.ActionTimeLimit, raised, store.ResultAbandoned}},
			want:    limit{User: time.Hour}},
		"start's limit refused": {state: slurm.StatePending, tag: started, limit: 75 * time.Minute,
			actions: []stored{{slurm.ActionStart, started, store.ResultFailed}},
			want:    limit{User: time.Hour}},
		"limit set by hand before, raise refused": {state: slurm.StateRunning, tag: tag(1, map[string]string{tagTime: "90", tagSet: "120", tagFixed: "1"}),
			limit:   90 * time.Minute,
			actions: []stored{{slurm.ActionStart, tag(1, map[string]string{tagTime: "90", tagSet: "120", tagFixed: "1"}), store.ResultFailed}},
			want:    limit{User: 90 * time.Minute, Fixed: true}},
		"raise taken, then cut by hand": {state: slurm.StateRunning, tag: raised, limit: 30 * time.Minute,
			actions: []stored{{slurm.ActionTimeLimit, raised, store.ResultOK}},
			want:    limit{User: 30 * time.Minute, Fixed: true}},
		"an earlier action's tag": {state: slurm.StateRunning, tag: raised, limit: 30 * time.Minute,
			actions: []stored{
				{slurm.ActionTimeLimit, raised, store.ResultOK},
				{slurm.ActionTimeLimit, tag(1, map[string]string{tagTime: "30", tagSet: "240", tagFixed: "1"}), store.ResultFailed},
			},
			want: limit{User: 30 * time.Minute, Fixed: true}},
		// Slurm gave the job the id of an earlier one, whose refused
		// raise wrote the tag the job has (a state reset).
		"an earlier job's of the id": {state: slurm.StateRunning, tag: raised, limit: 75 * time.Minute,
			actions:   []stored{{slurm.ActionTimeLimit, raised, store.ResultFailed}},
			submitted: t0.Add(time.Hour),
			want:      limit{User: 75 * time.Minute, Fixed: true}},
		"no action recorded": {state: slurm.StateRunning, tag: raised, limit: 30 * time.Minute,
			want: limit{User: 30 * time.Minute, Fixed: true}},
		"an annotation's tag": {state: slurm.StateRunning, tag: raised, limit: 30 * time.Minute,
			actions: []stored{{slurm.ActionAnnotate, raised, store.ResultFailed}},
			want:    limit{User: 30 * time.Minute, Fixed: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := runningJob(5, "bert")
			j.State, j.Held, j.TimeLimit, j.Tag = tc.state, tc.state == slurm.StatePending, tc.limit, &tc.tag
			if !tc.submitted.IsZero() {
				j.SubmitTime = tc.submitted
			}
			d, st := newTestDaemonWith(t, &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}, &fakeApplier{}, func(*Config) {})
			if err := st.UpsertJob(ctx, store.Job{ID: 5, ModelType: "bert", Class: store.BestEffort, State: j.State}); err != nil {
				t.Fatal(err)
			}
			for _, a := range tc.actions {
				rec, err := st.RecordPlan(ctx, store.Action{JobID: 5, Kind: string(a.kind), Tag: a.tag.String()})
				if err != nil {
					t.Fatal(err)
				}
				var why error
				if a.res != store.ResultOK {
					why = errors.New("slurm_update error: Requested time limit is invalid (missing or exceeds some limit)")
				}
				if err := st.MarkApplied(ctx, rec.ID, a.res, why); err != nil {
					t.Fatal(err)
				}
			}
			jobs, err := d.refusedLimits(ctx, []slurm.Job{j})
			if err != nil {
				t.Fatal(err)
			}
			var got limit
			if got.User, got.Fixed, err = userTime(jobs[0]); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("user's time limit read from tag %v with limit %v (-want +got):\n%s", jobs[0].Tag, tc.limit, d)
			}
		})
	}
}

// Slurm gives old ids to new jobs after its state is reset. A start the
// store holds under a job's id, recorded before the job's submission, is
// an earlier job's: the job's request is its own, though its CPUs are
// what that start set (the lab's job 143, taken for a request of 8 GPUs).
// One recorded since the submission is the job's own, whose tag's write
// failed after its resize: its request is that start's.
func TestUserRequestsOfReusedID(t *testing.T) {
	ctx := context.Background()
	old := slurm.Tag{ModelType: "llama7", Class: slurm.ClassGuaranteed, Plan: "dp8.tp1.pp1.mb1.a1.z0", Generation: 1,
		Extra: map[string]string{tagReq: "n1.g8.c1.m4000"}}
	for name, tc := range map[string]struct {
		submitted time.Time // the store's clock is at t0
		want      string
	}{
		"start recorded before the submission": {submitted: t0.Add(5 * time.Hour), want: "n1.g4.c8.m64000"},
		"start recorded after the submission":  {submitted: t0.Add(-time.Minute), want: "n1.g8.c1.m4000"},
		// Slurm's submit time is whole seconds, rubickd's clock may trail.
		"start recorded a second before the submission": {submitted: t0.Add(time.Second), want: "n1.g8.c1.m4000"},
	} {
		t.Run(name, func(t *testing.T) {
			j := heldJob(143, "gpt2", 1, 4)
			j.SubmitTime, j.Tag.Class = tc.submitted, slurm.ClassGuaranteed
			d, st := newTestDaemonWith(t, &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}, &fakeApplier{}, func(*Config) {})
			if err := st.UpsertJob(ctx, store.Job{ID: 143, ModelType: "llama7", Class: store.Guaranteed, State: slurm.StateRunning}); err != nil {
				t.Fatal(err)
			}
			plan := model.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1}
			rec, err := st.RecordPlan(ctx, store.Action{JobID: 143, Kind: string(slurm.ActionStart), Plan: plan,
				Resources: model.Resources{Placement: model.Placement{8}, CPUs: 8, HostMemGB: 4000.0 / 1024}, Tag: old.String()})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.MarkApplied(ctx, rec.ID, store.ResultOK, nil); err != nil {
				t.Fatal(err)
			}
			jobs, err := d.userRequests(ctx, []slurm.Job{j})
			if err != nil {
				t.Fatal(err)
			}
			if got := userRequest(jobs[0]).String(); got != tc.want {
				t.Errorf("request of job 143 submitted at %v = %s, want %s", tc.submitted, got, tc.want)
			}
		})
	}
}

// What an earlier job of the same id reported of its launch line is not
// a later-submitted job's own (Slurm's state was reset), not even in the
// cycle before the job's record is stored.
func TestJobFactsOfReusedID(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		submitted time.Time // the stored job's was t0-5h
		want      map[int]JobFacts
	}{
		"the same job": {submitted: t0.Add(-5 * time.Hour), want: map[int]JobFacts{5: {Cannot: model.FeatureTP, GlobalBatch: 64}}},
		"a later job":  {submitted: t0.Add(-time.Minute), want: map[int]JobFacts{}},
	} {
		t.Run(name, func(t *testing.T) {
			j := heldJob(5, "bert", 1, 4)
			j.User, j.SubmitTime = "bob", tc.submitted
			d, st := newTestDaemon(t, &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}, &fakeApplier{})
			if err := st.UpsertJob(ctx, store.Job{ID: 5, ModelType: "bert", Class: store.BestEffort, State: slurm.StateRunning,
				Submitted: t0.Add(-5 * time.Hour), User: "alice"}); err != nil {
				t.Fatal(err)
			}
			if err := st.SetJobLaunch(ctx, 5, "alice", store.Launch{Cannot: model.FeatureTP, GlobalBatch: 64}); err != nil {
				t.Fatal(err)
			}
			got, err := d.jobFacts(ctx, []slurm.Job{j})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("job facts of job 5 submitted at %v (-want +got):\n%s", tc.submitted, d)
			}
		})
	}
}

// A time limit someone set by hand since rubick last set one (an admin's
// extension, a user's cut, UNLIMITED) is the job's from then on: a restart
// onto a slower plan keeps it instead of stretching the user's --time
// again, and the tag marks it (tf=1) with the limit as the job's own.
func TestRestartKeepsTimeLimitSetByHand(t *testing.T) {
	plan := model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}
	tests := map[string]struct {
		limit     time.Duration // the job's, Slurm's reading
		want      time.Duration // the restart's TimeLimit; 0: unchanged
		wantExtra map[string]string
	}{
		// ts=75 is what rubick set: a slower plan stretches the user's 60.
		"rubick's own": {limit: 75 * time.Minute, want: -1, wantExtra: map[string]string{tagTime: "60"}},
		"raised by hand": {limit: 200 * time.Minute,
			wantExtra: map[string]string{tagTime: "200", tagSet: "200", tagFixed: "1"}},
		"cut by hand": {limit: 30 * time.Minute,
			wantExtra: map[string]string{tagTime: "30", tagSet: "30", tagFixed: "1"}},
		"unlimited by hand": {limit: 0, wantExtra: map[string]string{tagFixed: "1"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := runningJob(5, "bert")
			j.NodeList, j.GPUs, j.Tag.Plan, j.Tag.Generation = []string{"node1"}, 4, plan.String(), 1
			j.StartTime, j.TimeLimit = t0.Add(-10*time.Minute), tc.limit
			j.Tag.Extra = map[string]string{tagTime: "60", tagSet: "75", tagReq: "n1.g4.c8.m64000"}
			nodes := labNodes(1)
			nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: []slurm.Job{j}, Estimators: shippedEstimators(t)}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			// Half the speed of its request: a stretched limit is 2.5x.
			tput := v.managed["5"].time.reqTput / 2
			restart := policy.Action{Kind: policy.Restart, JobID: "5", Alloc: []policy.NodeAlloc{{Node: "node1", GPUs: 2, CPUs: 8, MemGB: 64}},
				Plan: model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1}, Throughput: tput}
			actions, skipped := v.SlurmActions(policy.Plan{Actions: []policy.Action{restart}}, t0)
			if len(actions) != 1 || len(skipped) != 0 {
				t.Fatalf("actions %+v, skipped %v; want the restart", actions, skipped)
			}
			a := actions[0]
			want := tc.want
			if want < 0 {
				want = 150 * time.Minute
				tc.wantExtra[tagSet] = "150"
			}
			if a.TimeLimit != want {
				t.Errorf("restart's time limit %v, want %v (0: unchanged)", a.TimeLimit, want)
			}
			if a.Tag.Extra[tagRan] != "600" || !a.RanAt.Equal(t0) {
				t.Errorf("restart's ran=%s counted at %v; want 600 at %v, the Applier adding the run to the requeue", a.Tag.Extra[tagRan], a.RanAt, t0)
			}
			got := map[string]string{}
			for _, k := range []string{tagTime, tagSet, tagFixed} {
				if v, ok := a.Tag.Extra[k]; ok {
					got[k] = v
				}
			}
			if d := cmp.Diff(tc.wantExtra, got); d != "" {
				t.Errorf("tag's time keys (-want +got):\n%s", d)
			}
		})
	}
}

func TestTimeLimitNote(t *testing.T) {
	for _, tc := range []struct {
		tl, user time.Duration
		want     string
	}{
		{time.Hour, time.Hour, "time limit back to the user's 60 min"},
		{150 * time.Minute, time.Hour, "time limit 150 min: the user's 60 min, for a plan predicted slower than its request"},
		{30 * time.Minute, time.Hour, "time limit 30 min: the user's 60 min, cut at the job's --deadline"},
	} {
		if got := timeLimitNote(tc.tl, tc.user); got != tc.want {
			t.Errorf("timeLimitNote(%v, %v) = %q, want %q", tc.tl, tc.user, got, tc.want)
		}
	}
}

// rubick explain says a start keeps a time limit set by hand.
func TestCycleExplainsTimeLimitSetByHand(t *testing.T) {
	for _, tc := range []struct {
		limit time.Duration
		want  bool
	}{{200 * time.Minute, true}, {75 * time.Minute, false}} {
		j := heldJob(5, "bert", 1, 4)
		j.TimeLimit, j.Tag.Generation, j.RestartCount = tc.limit, 1, 1
		j.Tag.Extra = map[string]string{tagTime: "60", tagSet: "75", tagReq: "n1.g4.c8.m64000", tagRan: "600"}
		a := &fakeApplier{}
		d, st := newTestDaemonWith(t, &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}, a, func(*Config) {})
		if _, err := d.Cycle(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		if got := startedJobs(a); len(got) != 1 {
			t.Fatalf("limit %v: started %v, want job 5", tc.limit, got)
		}
		reasons, err := st.Reasons(context.Background(), 5, 1)
		if err != nil || len(reasons) != 1 {
			t.Fatalf("limit %v: reasons %v, %v", tc.limit, reasons, err)
		}
		if got := strings.Contains(string(reasons[0].Reason), "time limit kept as set by hand"); got != tc.want {
			t.Errorf("limit %v: reason %s; want it to say the limit is kept as set by hand: %v", tc.limit, reasons[0].Reason, tc.want)
		}
	}
}

// requeuedJob is a bert job requeued held at restart count rc, its tag
// (plan dp2) counting none of them.
func requeuedJob(id, rc int) slurm.Job {
	j := heldJob(id, "bert", 1, 2)
	j.RestartCount, j.Tag.Plan, j.Tag.Extra = rc, "dp2.tp1.pp1.mb16.a1.z0", map[string]string{slurm.TagRestarts: "0"}
	return j
}

// A restart or preemption a previous run left between its requeue and the
// tag that acknowledges it: reconcile writes that tag (the job's own, with
// no hold), and nothing else; the job is then rubick's to start again.
func TestReconcileAcknowledgesRequeue(t *testing.T) {
	ctx := context.Background()
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{requeuedJob(61, 1), requeuedJob(62, 1), requeuedJob(63, 1)}}
	c.jobs[2].Tag.Extra[slurm.TagRestarts] = "1" // acknowledged before the crash
	a := &fakeApplier{}
	d, st := newTestDaemon(t, c, a)
	plan := model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}
	for id, kind := range map[int64]string{61: "restart", 62: "start", 63: "preempt"} {
		if err := st.UpsertJob(ctx, store.Job{ID: id, ModelType: "bert", Class: store.BestEffort, State: "RUNNING", Submitted: t0}); err != nil {
			t.Fatal(err)
		}
		act := store.Action{JobID: id, Kind: kind, Plan: plan, Resources: model.Resources{Placement: model.Placement{4}, CPUs: 8}}
		if kind == "start" {
			if _, err := st.RecordPlan(ctx, act); err != nil {
				t.Fatal(err)
			}
			continue
		}
		recordRequeue(t, st, act, 1)
	}
	if err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if len(a.got) != 1 || a.got[0].Kind != slurm.ActionAnnotate || a.got[0].JobID != 61 || a.got[0].Hold || a.got[0].Tag == nil || a.got[0].Tag.Plan != c.jobs[0].Tag.Plan {
		t.Errorf("reconcile applied %+v; want one annotate of job 61 with its own tag, no hold", a.got)
	}
}

// A preemption or restart a previous run left before its own requeue
// (none recorded), or after it at another restart count, finds its job
// requeued held by its user while rubickd was stopped: Reconcile writes no
// tag claiming that requeue, and records the action abandoned, saying why.
func TestReconcileLeavesUsersRequeue(t *testing.T) {
	ctx := context.Background()
	// 71: stopped before its requeue; 72: after a requeue to count 1, the
	// user released the job and requeued it again.
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{requeuedJob(71, 1), requeuedJob(72, 2)}}
	a := &fakeApplier{}
	d, st := newTestDaemon(t, c, a)
	plan := model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}
	ids := map[int64]int64{}
	for id, kind := range map[int64]string{71: "preempt", 72: "restart"} {
		if err := st.UpsertJob(ctx, store.Job{ID: id, ModelType: "bert", Class: store.BestEffort, State: "RUNNING", Submitted: t0}); err != nil {
			t.Fatal(err)
		}
		act := store.Action{JobID: id, Kind: kind, Plan: plan, Resources: model.Resources{Placement: model.Placement{4}, CPUs: 8}}
		if id == 71 {
			rec, err := st.RecordPlan(ctx, act)
			if err != nil {
				t.Fatal(err)
			}
			ids[id] = rec.ID
			continue
		}
		ids[id] = recordRequeue(t, st, act, 1).ID
	}
	if err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if len(a.got) != 0 {
		t.Errorf("reconcile applied %+v; want nothing: both requeues are the user's", a.got)
	}
	for id, action := range ids {
		hist, err := st.PlanHistory(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(hist, func(h store.Action) bool { return h.ID == action })
		if i < 0 || hist[i].Result != store.ResultAbandoned || !strings.Contains(hist[i].Error, "requeued by its user") {
			t.Errorf("job %d's action: %+v; want it abandoned, requeued by its user", id, hist)
		}
	}
}

// A requeue the store holds as awaiting its tag, or a pending preemption
// Reconcile finds, decided before the job's submission was an earlier
// job's of the same id (Slurm's state was reset): its tag, which holds
// that job's plan and run time, is not written to the later job, whose
// requeue is someone else's. The job's own is acknowledged in it.
func TestReconcileAckOfReusedID(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		pending bool // the preemption is unresolved, else failed and awaits its tag
		later   bool // the job was submitted after the preemption
	}{
		{name: "awaiting its tag"},
		{name: "awaiting its tag, later job", later: true},
		{name: "pending"},
		{name: "pending, later job", pending: true, later: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := heldJob(61, "bert", 1, 2)
			j.RestartCount, j.Tag.Plan, j.Tag.Generation = 1, "dp2.tp1.pp1.mb16.a1.z0", 1
			j.Tag.Extra = map[string]string{slurm.TagRestarts: "0", tagReq: "n1.g2.c8.m64000"}
			if tc.later {
				j.SubmitTime = t0.Add(time.Hour) // the store's clock is at t0
			}
			preempt := cloneTag(*j.Tag)
			preempt.Extra[tagRan] = "3600"
			a := &fakeApplier{}
			d, st := newTestDaemon(t, &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}, a)
			if err := st.UpsertJob(ctx, store.Job{ID: 61, ModelType: "bert", Class: store.BestEffort, State: "RUNNING"}); err != nil {
				t.Fatal(err)
			}
			rec, err := st.RecordPlan(ctx, store.Action{JobID: 61, Kind: string(slurm.ActionPreempt), Tag: preempt.String()})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.pending {
				if err := st.AwaitAck(ctx, rec.ID, ""); err != nil {
					t.Fatal(err)
				}
				if err := st.MarkApplied(ctx, rec.ID, store.ResultFailed, errors.New("requeue timed out")); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Cycle(ctx, false); err != nil {
				t.Fatal(err)
			}
			wrote := slices.ContainsFunc(a.got, func(act slurm.Action) bool { return act.Tag != nil && act.Tag.Extra[tagRan] == "3600" })
			if wrote == tc.later {
				t.Errorf("applied %+v; want the preemption's tag (ran=3600) written: %v", a.got, !tc.later)
			}
		})
	}
}

// A job someone else requeued held (its restart count past its tag's, no
// rubick:requeue from rubick-srun) is not started: it is marked held by
// its user, and rubick explain says why. So is one marked already whose
// tag does not count the requeue yet (the tag's write failed after the
// mark's): their release would read as another requeue by hand. One
// rubick-srun requeued, or whose requeue the tag acknowledges, is started.
func TestCycleRequeuedByOther(t *testing.T) {
	for _, tc := range []struct {
		name, rc, comment string
		marked, started   bool
		// why is what the job's stored reason names.
		why string
	}{
		{name: "scontrol requeuehold", rc: "1", comment: "my note", marked: true, why: "scontrol requeuehold"},
		{name: "marked, not counted", rc: "1", comment: "my note rubick:hold", marked: true, why: "held by its user"},
		{name: "marked and counted", rc: "2", comment: "my note rubick:hold"},
		{name: "rubick-srun's", rc: "1", comment: "my note rubick:requeue", started: true},
		{name: "acknowledged", rc: "2", comment: "my note", started: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := heldJob(5, "bert", 1, 4)
			j.RestartCount, j.Comment, j.Tag.Plan, j.Tag.Generation = 2, tc.comment, "dp4.tp1.pp1.mb8.a1.z0", 1
			j.Tag.Extra = map[string]string{slurm.TagRestarts: tc.rc, tagReq: "n1.g4.c8.m64000", tagRan: "300"}
			a := &fakeApplier{}
			d, st := newTestDaemonWith(t, &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}, a, func(*Config) {})
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			if got := startedJobs(a); (len(got) > 0) != tc.started {
				t.Errorf("started %v; want job 5 started: %v", got, tc.started)
			}
			var marks []slurm.Action
			for _, act := range a.got {
				if act.Hold {
					marks = append(marks, act)
				}
			}
			if !tc.marked {
				if len(marks) > 0 {
					t.Errorf("marked %+v; want no hold", marks)
				}
				return
			}
			if len(marks) != 1 || marks[0].Kind != slurm.ActionAnnotate || marks[0].JobID != 5 || marks[0].Tag == nil || marks[0].Tag.Plan != j.Tag.Plan {
				t.Errorf("actions %+v; want one annotate marking job 5 held, its tag kept", a.got)
			}
			if why := rep.Ignored[5]; !strings.Contains(why, tc.why) {
				t.Errorf("ignored reason %q; want it to say %q", why, tc.why)
			}
			if h, err := st.PlanHistory(context.Background(), 5); err != nil || len(h) != 1 || h[0].Kind != string(slurm.ActionAnnotate) {
				t.Errorf("history %+v, %v; want the annotate recorded", h, err)
			}
			if r, err := st.Reasons(context.Background(), 5, 1); err != nil || len(r) != 1 || !strings.Contains(string(r[0].Reason), `"held"`) ||
				!strings.Contains(string(r[0].Reason), tc.why) {
				t.Errorf("stored reasons %v, %v; want rubick explain to say it stays held, and why", r, err)
			}
		})
	}
}

// A preemption gives back its job's licenses for the plan's starts (Slurm
// frees them at the requeue): with one of two matlab licenses free and the
// other held by a job the plan preempts, both starts asking for one go.
func TestSlurmActionsPreemptionFreesLicenses(t *testing.T) {
	running := runningJob(5, "bert")
	running.NodeList, running.GPUs, running.Tag.Plan, running.Licenses = []string{"node1"}, 4, "dp4.tp1.pp1.mb8.a1.z0", "matlab:1"
	jobs := []slurm.Job{running, heldJob(21, "bert", 1, 4), heldJob(22, "bert", 1, 4)}
	jobs[1].Licenses, jobs[2].Licenses = "matlab:1", "matlab:1"
	nodes := labNodes(3)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
	start := func(id, node string) policy.Action {
		return policy.Action{Kind: policy.Start, JobID: id, Alloc: []policy.NodeAlloc{{Node: node, GPUs: 4, CPUs: 8, MemGB: 32}},
			Plan: model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}}
	}
	for _, tc := range []struct {
		name    string
		plan    []policy.Action
		skipped []int
	}{
		{"with the preemption", []policy.Action{{Kind: policy.Preempt, JobID: "5"}, start("21", "node2"), start("22", "node3")}, nil},
		{"without", []policy.Action{start("21", "node2"), start("22", "node3")}, []int{22}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Inputs{Nodes: nodes, Jobs: jobs, Estimators: shippedEstimators(t),
				Licenses: []slurm.License{{Name: "matlab", Total: 2, Used: 1, Free: 1}}}
			v, err := BuildView(Defaults(), t0, in, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			_, skipped := v.SlurmActions(policy.Plan{Actions: tc.plan}, t0)
			var got []int
			for id, err := range skipped {
				if !errors.Is(err, ErrLicense) {
					t.Errorf("job %d skipped for %v", id, err)
				}
				got = append(got, id)
			}
			if d := cmp.Diff(tc.skipped, got); d != "" {
				t.Errorf("skipped for licenses (-want +got):\n%s", d)
			}
		})
	}
}

// rubick explain says why rubickd leaves a job alone (a user's hold, a
// begin time): the reason is stored in the cycle it first appears or
// changes, not in every cycle.
func TestCycleStoresIgnoredReasonsOnChange(t *testing.T) {
	ctx := context.Background()
	held := heldJob(31, "bert", 1, 4)
	held.Comment, held.User = "rubick:hold", "bob"
	later := heldJob(32, "bert", 1, 4)
	later.EligibleTime = t0.Add(time.Hour)
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{held, later}}
	d, st := newTestDaemon(t, c, &fakeApplier{})
	stored := func() map[int64]int {
		out := map[int64]int{}
		for _, id := range []int64{31, 32} {
			r, err := st.Reasons(ctx, id, 0)
			if err != nil {
				t.Fatal(err)
			}
			out[id] = len(r)
			for _, x := range r {
				if !strings.Contains(string(x.Reason), `"ignored"`) {
					t.Errorf("job %d reason %s; want reason ignored", id, x.Reason)
				}
			}
		}
		return out
	}
	unchanged := func() []int64 {
		t.Helper()
		last, err := st.LastCycle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := st.Decision(ctx, last)
		if err != nil {
			t.Fatal(err)
		}
		return dec.Unchanged
	}
	for i := range 2 {
		if _, err := d.Cycle(ctx, false); err != nil {
			t.Fatal(err)
		}
		// The second cycle still saw both jobs, for reasons it did not store again.
		if diff := cmp.Diff([][]int64{nil, {31, 32}}[i], unchanged()); diff != "" {
			t.Errorf("cycle %d: unchanged jobs (-want +got):\n%s", i+1, diff)
		}
	}
	if d := cmp.Diff(map[int64]int{31: 1, 32: 1}, stored()); d != "" {
		t.Errorf("reasons stored over two cycles (-want +got):\n%s", d)
	}
	r, _ := st.Reasons(ctx, 31, 1)
	if len(r) != 1 || !strings.Contains(string(r[0].Reason), "held by its user") {
		t.Errorf("job 31's reason %v; want it held by its user", r)
	}
	if j, err := st.Job(ctx, 31); err != nil || j.ModelType != "bert" || j.User != "bob" {
		t.Errorf("stored job 31: %+v, %v; want it known to rubick explain, with its user", j, err)
	}
	c.jobs[1].EligibleTime = t0.Add(2 * time.Hour) // its --begin moved
	if _, err := d.Cycle(ctx, false); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[int64]int{31: 1, 32: 2}, stored()); d != "" {
		t.Errorf("reasons stored after job 32's begin time moved (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int64{31}, unchanged()); d != "" {
		t.Errorf("unchanged jobs after job 32's begin time moved (-want +got):\n%s", d)
	}
}

// Jobs held for rubick in partitions rubickd does not manage (job_submit.lua
// manages more than rubickd.yaml names) are warned of once while the list
// stays the same, never acted on.
func TestCycleWarnsOfStrandedJobs(t *testing.T) {
	held := func(id int, part string) slurm.Job {
		j := heldJob(id, "bert", 1, 2)
		j.Partition, j.Reason = part, "JobHeldUser"
		return j
	}
	userHeld := held(33, "cpu")
	userHeld.Comment = "rubick:hold"
	adminHeld := held(34, "cpu")
	adminHeld.Reason = "JobHeldAdmin"
	// moved in by root to a partition only job_submit.lua manages: held
	// for rubick (Slurm's hold, marked rubick's)
	movedIn := held(39, "cpu")
	movedIn.Reason, movedIn.AdminComment = "JobHeldAdmin", "rubick:v1 model=bert;"+slurm.RubickHeldField
	rigid := held(35, "cpu")
	rigid.Tag = nil
	released := held(36, "cpu")
	released.Held, released.Reason = false, "Priority"
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{held(31, "cpu"), held(32, "debug,other"), held(37, "cpu,gpu"),
		userHeld, adminHeld, rigid, released, movedIn}}
	a := &fakeApplier{}
	d, _ := newTestDaemon(t, c, a)
	var logs bytes.Buffer
	d.deps.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	warned := func() int {
		return strings.Count(logs.String(), "jobs held for rubick in partitions rubickd does not manage")
	}
	for range 2 {
		rep, err := d.Cycle(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		// rubick status and explain say so too.
		for _, id := range []int{31, 32, 39} {
			if !strings.Contains(rep.Ignored[id], "which rubickd does not manage") {
				t.Errorf("job %d: ignored as %q, want it said that rubickd does not manage its partition", id, rep.Ignored[id])
			}
		}
		for _, id := range []int{33, 34, 35, 36} {
			if strings.Contains(rep.Ignored[id], "which rubickd does not manage") {
				t.Errorf("job %d: ignored as %q, a job no one waits for rubick to release", id, rep.Ignored[id])
			}
		}
	}
	if warned() != 1 || !strings.Contains(logs.String(), "3 jobs: 31 (partition cpu), 32 (partition debug,other), 39 (partition cpu); rubickd manages gpu") {
		t.Fatalf("%d warnings, want one naming jobs 31, 32 and 39 only:\n%s", warned(), logs.String())
	}
	for _, act := range a.got {
		if act.JobID != 37 {
			t.Errorf("action %+v on a job outside rubickd's partitions", act)
		}
	}
	// Once they are gone, a new one is warned of again.
	c.jobs = []slurm.Job{held(38, "cpu")}
	for range 2 {
		if _, err := d.Cycle(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
	if warned() != 2 || !strings.Contains(logs.String(), "1 job: 38 (partition cpu)") {
		t.Fatalf("%d warnings, want a second one naming job 38:\n%s", warned(), logs.String())
	}
}

// A job the policy cannot take is logged once while its error stays the
// same (a running one's lasts as long as it runs), again when it changes.
func TestCycleWarnsOfUnschedulableJobOnce(t *testing.T) {
	j := heldJob(41, "bert", 1, 2)
	j.Tag.Extra = map[string]string{tagNodes: "node["}
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}
	d, _ := newTestDaemon(t, c, &fakeApplier{})
	var logs bytes.Buffer
	d.deps.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	warned := func() int { return strings.Count(logs.String(), "job not schedulable") }
	for range 3 {
		if _, err := d.Cycle(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
	if warned() != 1 || !strings.Contains(logs.String(), "job=41") {
		t.Fatalf("%d warnings, want one for job 41:\n%s", warned(), logs.String())
	}
	c.jobs[0].Tag.Extra[tagNodes] = "node[1-"
	if _, err := d.Cycle(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if warned() != 2 {
		t.Fatalf("%d warnings after the error changed, want 2:\n%s", warned(), logs.String())
	}
}

// A start deferred for its licenses keeps the place the policy gave the
// job in its order: rubick queue lists it there, waiting, with no gap in
// the positions.
func TestCycleDeferredStartKeepsItsPlace(t *testing.T) {
	d, st := newTestDaemonWith(t, matlabJobs(1), &fakeApplier{}, func(*Config) {})
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Skipped[22] == "" {
		t.Fatalf("skipped %v, want job 22 deferred", rep.Skipped)
	}
	type place struct {
		Kind     policy.Kind
		Reason   policy.Reason
		Position int
	}
	got := map[int64]place{}
	for _, id := range []int64{21, 22} {
		a := lastAction(t, st, id)
		p := place{Kind: a.Kind, Reason: a.Reason}
		if a.Order != nil {
			p.Position = a.Order.Position
		}
		got[id] = p
	}
	want := map[int64]place{21: {policy.Start, policy.ReasonSlope, 2}, 22: {policy.Keep, policy.ReasonNoResources, 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stored decisions (-want +got):\n%s", diff)
	}
	if a := lastAction(t, st, 22); len(a.Alloc) != 0 || !strings.Contains(a.Detail, "its licenses are taken") {
		t.Errorf("job 22: %+v, want it queued, saying why", a)
	}
}

// A job the store has as live that Slurm no longer lists when rubickd
// starts ended while it was stopped: Reconcile records it as gone, keeping
// the rest of its record; listed and ended jobs stay as they are.
func TestReconcileRecordsGoneJobs(t *testing.T) {
	ctx := context.Background()
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{runningJob(6, "bert")}}
	d, st := newTestDaemon(t, c, &fakeApplier{})
	plan := model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}
	res := model.Resources{Placement: model.Placement{4}, CPUs: 8}
	for _, j := range []store.Job{
		{ID: 5, ModelType: "bert", Class: store.BestEffort, State: slurm.StateRunning, User: "ann", LastPlan: plan, LastResources: res},
		{ID: 6, ModelType: "bert", Class: store.BestEffort, State: slurm.StateRunning},
		{ID: 7, ModelType: "bert", Class: store.BestEffort, State: slurm.StateCompleted},
		{ID: 8, Class: store.BestEffort, State: slurm.StatePending},
	} {
		if err := st.UpsertJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[int64]string{}
	for _, id := range []int64{5, 6, 7, 8} {
		j, err := st.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got[id] = j.State
	}
	want := map[int64]string{5: StateGone, 6: slurm.StateRunning, 7: slurm.StateCompleted, 8: StateGone}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stored states (-want +got):\n%s", diff)
	}
	if j, err := st.Job(ctx, 5); err != nil || j.LastPlan != plan || j.User != "ann" || j.ModelType != "bert" {
		t.Errorf("job 5: %+v, %v; want its record kept but its state", j, err)
	}
}

// A deferred start is logged when it first comes, not at every cycle it
// lasts (a group limit holds a job back for hours).
func TestCycleLogsDeferralOnce(t *testing.T) {
	d, _ := newTestDaemonWith(t, matlabJobs(1), &fakeApplier{}, func(*Config) {})
	var logs bytes.Buffer
	d.deps.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	for range 3 {
		rep, err := d.Cycle(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Skipped[22] == "" {
			t.Fatalf("skipped %v, want job 22 deferred at every cycle", rep.Skipped)
		}
	}
	if n := strings.Count(logs.String(), "start deferred for its licenses or GRES"); n != 1 {
		t.Errorf("%d log lines for the deferral, want 1:\n%s", n, logs.String())
	}
}

// ReleaseAll hands the queue back to Slurm: each job held for rubick is
// released on its own request (a resized one gets it back) and none is
// planned; holds of users and administrators stay, running and released
// jobs are left as they are.
func TestReleaseAll(t *testing.T) {
	held := heldJob(51, "bert", 1, 2)
	held.Reason = "JobHeldUser"
	resized := heldJob(56, "bert", 2, 8) // rubick sized it, a restart
	resized.Reason = "job_requeued_in_held_state"
	resized.Tag.Plan, resized.Tag.Generation = "dp16.tp1.pp1.mb2.a1.z0", 1
	resized.Tag.Extra = map[string]string{tagReq: "n1.g2.c8.m64000"}
	userHeld := heldJob(52, "bert", 1, 2)
	userHeld.Comment = "rubick:hold"
	adminHeld := heldJob(53, "bert", 1, 2)
	adminHeld.AdminComment = "rubick:v1 model=bert;" + slurm.AdminHoldField
	released := heldJob(55, "bert", 1, 2)
	released.Held, released.Reason = false, "Resources"
	c := &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{held, resized, userHeld, adminHeld, released}}
	a := &fakeApplier{}
	d, _ := newTestDaemon(t, c, a)
	rep, err := d.ReleaseAll(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	want := []slurm.Action{
		{Kind: slurm.ActionStart, JobID: 51, NumNodes: 1, GPUsPerNode: 2, CPUsPerTask: 8, MemPerNodeMB: 64000},
		{Kind: slurm.ActionStart, JobID: 56, NumNodes: 1, GPUsPerNode: 2, CPUsPerTask: 8, MemPerNodeMB: 64000, ClearNodes: true},
	}
	sortActions := cmpopts.SortSlices(func(x, y slurm.Action) bool { return x.JobID < y.JobID })
	if diff := cmp.Diff(want, a.got, sortActions, cmpopts.IgnoreFields(slurm.Action{}, "Tag")); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	for _, act := range a.got {
		if act.Tag == nil || act.Tag.Plan != "" {
			t.Errorf("job %d released with tag %+v, want one without a plan", act.JobID, act.Tag)
		}
	}
	if !strings.Contains(rep.Ignored[51], "rubickd --release-all") {
		t.Errorf("job 51: %q, want it said why it was released", rep.Ignored[51])
	}
	// The next cycle plans again.
	c.jobs = []slurm.Job{held}
	a.got = nil
	d.Invalidate()
	if _, err := d.Cycle(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if len(a.got) != 1 || a.got[0].Tag == nil || a.got[0].Tag.Plan == "" {
		t.Errorf("a plain cycle: %+v, want job 51 started on a plan", a.got)
	}
}

// TestCycleRestoresMail: a job rubick requeued runs again with the mail
// types it had before rubick quieted them (its tag's mail=), and the tag
// no longer keeps them; a job still waiting to run keeps them in its tag.
func TestCycleRestoresMail(t *testing.T) {
	for name, tc := range map[string]struct {
		state    string
		mail     string
		wantMail string // the annotate's MailType; "" for no restore
	}{
		"running":           {state: slurm.StateRunning, mail: "begin,end,requeue,time-limit-90", wantMail: "BEGIN,END,REQUEUE,TIME_LIMIT_90"},
		"running, no mail=": {state: slurm.StateRunning},
		"not running yet":   {state: slurm.StatePending, mail: "all"},
	} {
		t.Run(name, func(t *testing.T) {
			j := heldJob(31, "bert", 1, 8)
			j.Held = tc.state == slurm.StatePending
			j.State, j.Tag.Plan, j.Tag.Generation = tc.state, "dp8.tp1.pp1.mb4.a1.z0", 2
			if tc.state == slurm.StateRunning {
				j.NodeList, j.GPUs, j.CPUs, j.StartTime = []string{"node1"}, 8, 32, t0.Add(-time.Minute)
			}
			if tc.mail != "" {
				j.Tag.Extra = map[string]string{slurm.TagMail: tc.mail}
			}
			nodes := labNodes(1)
			if tc.state == slurm.StateRunning {
				nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 8, 32
			}
			a := &fakeApplier{}
			d, _ := newTestDaemon(t, &fakeCluster{nodes: nodes, jobs: []slurm.Job{j}}, a)
			if _, err := d.Cycle(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			var restored []slurm.Action
			for _, act := range a.got {
				if act.MailType != "" {
					restored = append(restored, act)
				}
				if act.Kind == slurm.ActionStart && act.Tag.Extra[slurm.TagMail] != tc.mail {
					t.Errorf("start's tag %+v, want it to keep mail=%s", act.Tag, tc.mail)
				}
			}
			if tc.state == slurm.StatePending && len(startedJobs(a)) != 1 {
				t.Errorf("actions %+v, want a start", a.got)
			}
			if tc.wantMail == "" {
				if len(restored) != 0 {
					t.Errorf("mail restored: %+v", restored)
				}
				return
			}
			if len(restored) != 1 || restored[0].Kind != slurm.ActionAnnotate || restored[0].MailType != tc.wantMail ||
				restored[0].Tag == nil || restored[0].Tag.Extra[slurm.TagMail] != "" || restored[0].Tag.Plan != j.Tag.Plan {
				t.Errorf("actions %+v, want one annotate giving back %s, its tag without mail=", a.got, tc.wantMail)
			}
		})
	}
}

// A job array's limit on running tasks (--array=0-9%N) holds on tasks
// split off it: Slurm keeps a released task past it pending
// (JobArrayTaskLimit), on GPUs rubick planned for it. The array's running,
// suspended and released tasks take its places first, then its held tasks
// in task order; tasks held by their user take none.
func TestThrottledTasks(t *testing.T) {
	task := func(id, task int, state string, held bool) slurm.Job {
		j := heldJob(id, "bert", 1, 2)
		j.ArrayJobID, j.ArrayTaskID, j.ArrayMaxTasks, j.State, j.Held = 50, task, 2, state, held
		return j
	}
	userHeld := task(57, 7, slurm.StatePending, true)
	userHeld.Comment = slurm.UserHoldWord
	tests := map[string]struct {
		jobs []slurm.Job
		want map[int]int
	}{
		"none running": {jobs: []slurm.Job{task(53, 3, slurm.StatePending, true), task(51, 1, slurm.StatePending, true), task(52, 2, slurm.StatePending, true)},
			want: map[int]int{53: 2}},
		"one running, one released": {jobs: []slurm.Job{task(51, 1, slurm.StateRunning, false), task(52, 2, slurm.StatePending, false), task(53, 3, slurm.StatePending, true)},
			want: map[int]int{53: 2}},
		"one suspended": {jobs: []slurm.Job{task(51, 1, slurm.StateSuspended, false), task(52, 2, slurm.StatePending, true), task(53, 3, slurm.StatePending, true)},
			want: map[int]int{53: 2}},
		"ended ones free places": {jobs: []slurm.Job{task(51, 1, slurm.StateCompleted, false), task(52, 2, slurm.StateFailed, false), task(53, 3, slurm.StatePending, true)}},
		"user's hold":            {jobs: []slurm.Job{userHeld, task(58, 8, slurm.StatePending, true), task(59, 9, slurm.StatePending, true)}},
		"over the limit already": {jobs: []slurm.Job{task(51, 1, slurm.StateRunning, false), task(52, 2, slurm.StateRunning, false), task(53, 3, slurm.StateRunning, false), task(54, 4, slurm.StatePending, true)},
			want: map[int]int{54: 2}},
	}
	unthrottled := task(61, 1, slurm.StatePending, true)
	unthrottled.ArrayJobID, unthrottled.ArrayMaxTasks = 60, 0
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := throttledTasks(limitedArrays(append(tc.jobs, unthrottled)))
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("throttled tasks (-want +got):\n%s", diff)
			}
		})
	}
}

// A cycle starts no more tasks of an array than its limit lets run, and
// says why the others wait.
func TestCycleKeepsArrayLimit(t *testing.T) {
	var jobs []slurm.Job
	for task := range 4 {
		j := heldJob(60+task, "bert", 1, 2)
		j.ArrayJobID, j.ArrayTaskID, j.ArrayMaxTasks = 60, task, 1
		jobs = append(jobs, j)
	}
	c := &fakeCluster{nodes: labNodes(4), jobs: jobs}
	a := &fakeApplier{}
	d, st := newTestDaemon(t, c, a)
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	// The store knows each task as squeue names it (rubick explain 60_2),
	// planned or waiting.
	for task, id := range []int64{60, 61, 62, 63} {
		if j, err := st.ArrayTask(context.Background(), 60, int64(task)); err != nil || j.ID != id {
			t.Errorf("store: task 60_%d is job %d (%v), want %d", task, j.ID, err, id)
		}
	}
	if diff := cmp.Diff([]int{60}, startedJobs(a)); diff != "" {
		t.Errorf("started (-want +got):\n%s", diff)
	}
	for _, id := range []int{61, 62, 63} {
		if why := rep.Ignored[id]; !strings.Contains(why, "runs at most 1 at once") {
			t.Errorf("job %d: %q, want it waiting for the array's limit", id, why)
		}
	}
}

// TestHealth: healthy while cycles complete, or shortly after the start;
// unhealthy, saying since when and why, once none has for three of the
// longest cycles.
func TestHealth(t *testing.T) {
	now := t0
	cfg := Defaults()
	cfg.Interval, cfg.Checkpoint.Grace, cfg.Commands.Timeout = 30*time.Second, time.Minute, 10*time.Second
	d := &Daemon{cfg: cfg, deps: Deps{Now: func() time.Time { return now }}}
	// A cycle may wait the grace twice: its preemptions', then its restarts'.
	window := 3 * (30*time.Second + 2*(time.Minute+20*time.Second)) // 9m30s
	if err := d.Health(); err != nil {
		t.Errorf("before Run: %v, want healthy", err)
	}
	d.started, d.window = t0, d.healthWindow() // as Run sets them
	now = t0.Add(window)
	if err := d.Health(); err != nil {
		t.Errorf("%s after the start, no cycle yet: %v, want healthy", window, err)
	}
	now = t0.Add(window + time.Second)
	d.lastErr = errors.New("slurmrestd: connection refused")
	want := "no cycle completed since rubickd started at 2026-11-22T08:00:00Z (9m31s ago, more than 9m30s): last cycle failed: slurmrestd: connection refused"
	if err := d.Health(); err == nil || err.Error() != want {
		t.Errorf("no cycle yet: %v, want %q", err, want)
	}
	d.last.At, d.lastErr = now.Add(-time.Minute), nil
	if err := d.Health(); err != nil {
		t.Errorf("a cycle a minute ago: %v, want healthy", err)
	}
	now = now.Add(window)
	if err := d.Health(); err == nil || !strings.HasPrefix(err.Error(), "no cycle completed since 2026-11-22T08:08:31Z (10m30s ago") {
		t.Errorf("the last cycle 10m30s ago: %v", err)
	}
}

// TestStatusFailing: /status says, from the first failed cycle, how many
// have failed since the last completed one, since when and why the last
// did, while it still serves that cycle's report; a completed cycle
// clears it, and a healthy rubickd's JSON is its report's alone.
func TestStatusFailing(t *testing.T) {
	ctx := context.Background()
	c := &fakeCluster{nodes: labNodes(1)}
	d, _ := newTestDaemon(t, c, &fakeApplier{})
	var log bytes.Buffer
	d.deps.Logger = slog.New(slog.NewTextHandler(&log, nil))
	now := t0
	d.deps.Now = func() time.Time { return now }
	cycle := func(at time.Time) {
		t.Helper()
		now = at
		d.Invalidate()
		if _, err := d.runCycle(ctx); (err != nil) != (c.err != nil) {
			t.Fatalf("cycle at %s: %v, want the cluster's error %v", at, err, c.err)
		}
	}
	healthyJSON := func() {
		t.Helper()
		s := d.Status()
		got, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(s.CycleReport)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("/status of a healthy rubickd (-report +status):\n%s", diff)
		}
	}
	cycle(t0)
	if s := d.Status(); !s.At.Equal(t0) || s.Failing != nil {
		t.Fatalf("after a completed cycle: last cycle at %s, failing %+v; want %s and nil", s.At, s.Failing, t0)
	}
	healthyJSON()

	c.err = errors.New("slurmrestd unavailable: connection refused")
	for i := 1; i <= 3; i++ {
		cycle(t0.Add(time.Duration(i) * time.Minute))
	}
	s := d.Status()
	want := &Failing{Since: t0.Add(time.Minute), Cycles: 3, Error: "read jobs: slurmrestd unavailable: connection refused"}
	if diff := cmp.Diff(want, s.Failing); diff != "" {
		t.Errorf("failing (-want +got):\n%s", diff)
	}
	if !s.At.Equal(t0) {
		t.Errorf("last cycle at %s, want the completed one's %s", s.At, t0)
	}
	var got map[string]any
	if b, err := json.Marshal(s); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	wantJSON := map[string]any{"since": "2026-11-22T08:01:00Z", "cycles": 3.0, "error": want.Error}
	if diff := cmp.Diff(wantJSON, got["failing"]); diff != "" {
		t.Errorf("/status failing (-want +got):\n%s", diff)
	}

	if strings.Contains(log.String(), "cycles complete again") {
		t.Errorf("the log says the cycles complete again while they fail:\n%s", log.String())
	}
	c.err = nil
	cycle(t0.Add(4 * time.Minute))
	if s := d.Status(); !s.At.Equal(t0.Add(4*time.Minute)) || s.Failing != nil {
		t.Errorf("after a completed cycle again: last cycle at %s, failing %+v; want %s and nil", s.At, s.Failing, t0.Add(4*time.Minute))
	}
	healthyJSON()
	// The journal says the failures ended, once.
	if got, want := strings.Count(log.String(), `msg="cycles complete again" failed_cycles=3 failing_since=2026-11-22T08:01:00.000Z`), 1; got != want {
		t.Errorf("%d recovery lines with 3 failed cycles since 08:01, want %d; log:\n%s", got, want, log.String())
	}
	cycle(t0.Add(4*time.Minute + 30*time.Second))
	if got := strings.Count(log.String(), "cycles complete again"); got != 1 {
		t.Errorf("%d recovery lines after a second completed cycle, want 1", got)
	}
	// A failure after that counts from one again.
	c.err = errors.New("slurmrestd unavailable")
	cycle(t0.Add(5 * time.Minute))
	if f := d.Status().Failing; f == nil || f.Cycles != 1 || !f.Since.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("failing %+v, want 1 cycle since %s", f, t0.Add(5*time.Minute))
	}
}

// TestStatusSetupChecks: the start-up checks that failed or warned are in
// /status (setup) from the first moment, the failed ones counted in
// rubick_setup_checks_failed; the held jobs are the cycles' to tell, and
// a rubickd whose checks all passed serves its report's JSON alone.
func TestStatusSetupChecks(t *testing.T) {
	scontrol := CheckResult{"commands.scontrol", CheckFail, "scontrol show config: exit status 1: slurm_load_ctl_conf error"}
	lua := CheckResult{"JobSubmitPlugins", CheckFail, "no lua"}
	limits := CheckResult{"limits", CheckWarn, "slurmrestd serves no /slurmdb listing"}
	held := CheckResult{checkHeldJobs, CheckWarn, "1 job: 7"}
	ok := CheckResult{"store", CheckOK, "fine"}
	tests := map[string]struct {
		results []CheckResult
		want    *SetupChecks
		failed  float64
		json    string // the setup key's JSON; "" when absent
	}{
		"failed and warned": {
			results: []CheckResult{ok, scontrol, limits, held, lua},
			want:    &SetupChecks{At: t0, Checks: []CheckResult{scontrol, limits, lua}},
			failed:  2,
			json: `{"at":"2026-11-22T08:00:00Z","checks":[{"name":"commands.scontrol","status":"FAIL","detail":"scontrol show config: exit status 1: slurm_load_ctl_conf error"},` +
				`{"name":"limits","status":"warn","detail":"slurmrestd serves no /slurmdb listing"},{"name":"JobSubmitPlugins","status":"FAIL","detail":"no lua"}]}`,
		},
		"warned": {
			results: []CheckResult{ok, limits},
			want:    &SetupChecks{At: t0, Checks: []CheckResult{limits}},
			json:    `{"at":"2026-11-22T08:00:00Z","checks":[{"name":"limits","status":"warn","detail":"slurmrestd serves no /slurmdb listing"}]}`,
		},
		"passed": {results: []CheckResult{ok, held}},
		"none":   {},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			base, _ := newTestDaemon(t, &fakeCluster{nodes: labNodes(1)}, &fakeApplier{})
			deps := base.deps
			deps.Metrics, deps.Setup = NewMetrics(), NewSetupChecks(t0, tc.results)
			d, err := New(base.boot, deps)
			if err != nil {
				t.Fatal(err)
			}
			s := d.Status()
			if diff := cmp.Diff(tc.want, s.Setup); diff != "" {
				t.Errorf("setup (-want +got):\n%s", diff)
			}
			if got := gauge(t, d, "rubick_setup_checks_failed"); got != tc.failed {
				t.Errorf("rubick_setup_checks_failed = %v, want %v", got, tc.failed)
			}
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.json, string(got["setup"])); diff != "" {
				t.Errorf("/status setup (-want +got):\n%s", diff)
			}
		})
	}
}

// A tagged job's end goes to the store once, while Slurm still lists it:
// rubick explain reads the job's last recorded state, which would stay
// RUNNING for a job that finished. A job without a tag is not recorded.
func TestCycleRecordsJobEnd(t *testing.T) {
	ctx := context.Background()
	run := runningJob(22, "bert")
	run.NodeList, run.GPUs, run.Tag.Plan = []string{"node1"}, 4, "dp4.tp1.pp1.mb8.a1.z0"
	nodes := labNodes(1)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
	plain := slurm.Job{ID: 23, Name: "plain", User: "bob", Partition: "gpu", State: slurm.StateCompleted}
	c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{run, plain}}
	d, st := newTestDaemon(t, c, &fakeApplier{})
	cycle := func() {
		t.Helper()
		d.Invalidate()
		if _, err := d.Cycle(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	state := func() string {
		t.Helper()
		j, err := st.Job(ctx, 22)
		if err != nil {
			t.Fatal(err)
		}
		return j.State
	}
	cycle()
	if got := state(); got != slurm.StateRunning {
		t.Fatalf("job 22 stored %s, want RUNNING", got)
	}
	c.jobs[0].State = slurm.StateCompleted
	c.nodes[0].GPUsUsed, c.nodes[0].CPUsAlloc = 0, 0
	cycle()
	if got := state(); got != slurm.StateCompleted {
		t.Errorf("job 22 stored %s after it completed, want COMPLETED", got)
	}
	if _, err := st.Job(ctx, 23); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("job 23 (no tag) stored: %v", err)
	}
	// Written once: a later cycle that still lists it leaves the record.
	if err := st.UpsertJob(ctx, store.Job{ID: 22, ModelType: "bert", Class: store.BestEffort, State: "MARK", Submitted: t0}); err != nil {
		t.Fatal(err)
	}
	cycle()
	if got := state(); got != "MARK" {
		t.Errorf("job 22's end written again: stored %s", got)
	}
}

// profileTags is the profile flag and architecture each of actions, every
// one a start with a tag, writes to its job's tag.
func profileTags(t *testing.T, actions []slurm.Action) map[int][2]string {
	t.Helper()
	got := map[int][2]string{}
	for _, act := range actions {
		if act.Kind != slurm.ActionStart || act.Tag == nil {
			t.Errorf("job %d: %s with tag %v, want a start with a tag", act.JobID, act.Kind, act.Tag)
			continue
		}
		got[act.JobID] = [2]string{act.Tag.Extra[tagProfile], act.Tag.Extra[launch.TagArch]}
	}
	return got
}

// A requeued job is rubick's only at the restart count its action
// recorded; an action an older rubickd left unresolved at any.
func TestRequeuedBy(t *testing.T) {
	job := func(rc int) slurm.Job {
		return slurm.Job{ID: 1, State: slurm.StatePending, Held: true, RestartCount: rc}
	}
	for _, tc := range []struct {
		name      string
		rc, count int
		want      bool
	}{
		{"its count", 2, 2, true},
		{"requeued again since", 3, 2, false},
		{"none recorded", 1, 0, false},
		{"older rubickd's", 5, store.RequeueUnknown, true},
	} {
		if got := requeuedBy(job(tc.rc), tc.count); got != tc.want {
			t.Errorf("%s: requeuedBy(restarts %d, count %d) = %t, want %t", tc.name, tc.rc, tc.count, got, tc.want)
		}
	}
}
