package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// simSlurm is a Cluster and a slurm.Runner over the same jobs: the
// commands the real Applier runs change what the next read reports, as
// scontrol changes what slurmrestd reports.
type simSlurm struct {
	mu    sync.Mutex
	jobs  []slurm.Job
	nodes []slurm.Node
	calls [][]string
	// fail, when it returns true for a command, makes it fail unrun; late
	// makes it fail after Slurm took it, as a timeout does.
	fail, late func(argv []string) bool
	// mail is each job's MailType, as scontrol shows and updates it.
	mail map[int]string
}

func (s *simSlurm) Jobs(context.Context, time.Time) ([]slurm.Job, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.jobs), true, nil
}

func (s *simSlurm) Nodes(context.Context) ([]slurm.Node, error) { return s.nodes, nil }

func (s *simSlurm) Job(_ context.Context, id int) (slurm.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.jobs {
		if j.ID == id {
			return j, nil
		}
	}
	return slurm.Job{}, slurm.ErrNotFound
}

// job is the job as Slurm now has it.
func (s *simSlurm) job(t *testing.T, id int) slurm.Job {
	t.Helper()
	j, err := s.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (s *simSlurm) Run(_ context.Context, argv []string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, slices.Clone(argv))
	if s.fail != nil && s.fail(argv) {
		return nil, &slurm.CommandError{Argv: argv, ExitCode: 1, Stderr: "slurm_update error: Unable to contact slurm controller", Err: fmt.Errorf("exit status 1")}
	}
	out, err := s.run(argv)
	if err != nil || s.late == nil || !s.late(argv) {
		return out, err
	}
	return nil, &slurm.CommandError{Argv: argv, ExitCode: -1, Err: context.DeadlineExceeded}
}

// run changes the jobs as Slurm would for argv, and says what it prints.
func (s *simSlurm) run(argv []string) ([]byte, error) {
	if len(argv) > 4 && argv[1] == "show" && argv[2] == "job" {
		id, _ := strconv.Atoi(argv[len(argv)-1])
		mail := s.mail[id]
		if mail == "" {
			mail = "NONE"
		}
		return fmt.Appendf(nil, "JobId=%d JobName=train MailUser=alice MailType=%s\n", id, mail), nil
	}
	find := func(ref string) *slurm.Job {
		id, _ := strconv.Atoi(strings.TrimPrefix(ref, "JobId="))
		for i := range s.jobs {
			if s.jobs[i].ID == id {
				return &s.jobs[i]
			}
		}
		return nil
	}
	var j *slurm.Job
	switch {
	case argv[0] == "scancel", len(argv) > 1 && argv[1] == "show":
		return nil, nil
	default:
		j = find(argv[2])
	}
	if j == nil {
		return nil, &slurm.CommandError{Argv: argv, ExitCode: 1, Stderr: "Invalid job id specified", Err: fmt.Errorf("exit status 1")}
	}
	switch argv[1] {
	case "requeuehold":
		j.State, j.Held, j.Reason, j.NodeList, j.BatchHost = slurm.StatePending, true, "JobHeldUser", nil, ""
		j.RestartCount++
	case "release":
		// Slurm starts it at once, where the update put it.
		j.Held, j.Reason, j.State = false, "", slurm.StateRunning
	case "update":
		for _, a := range argv[3:] {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "AdminComment":
				j.AdminComment = v
				j.Tag, j.TagErr = slurm.TagFromAdminComment(v)
			case "Comment":
				j.Comment = v
			case "NodeList":
				j.NodeList = strings.Split(v, ",")
			case "MailType":
				if s.mail == nil {
					s.mail = map[int]string{}
				}
				s.mail[j.ID] = v
			}
		}
	}
	return nil, nil
}

// simApplier is the real Applier on sim, with no waits worth the name.
func simApplier(t *testing.T, sim *simSlurm) *slurm.Applier {
	t.Helper()
	app, err := slurm.NewApplier(slurm.ApplierConfig{Runner: sim, Cluster: sim, Clock: instantClock{}, Logger: slog.New(slog.DiscardHandler), CheckpointTimeout: time.Millisecond,
		WaitCheckpoint: func(context.Context, slurm.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// instantClock never sleeps.
type instantClock struct{}

func (instantClock) Now() time.Time                                   { return t0 }
func (instantClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// newSimDaemon is a daemon applying its plans with the real Applier to sim.
func newSimDaemon(t *testing.T, sim *simSlurm, edit func(*Config)) (*Daemon, *store.Store) {
	t.Helper()
	d, st := newTestDaemonWith(t, sim, &fakeApplier{}, edit)
	d.deps.Applier = simApplier(t, sim)
	return d, st
}

// reclaimSim is a node a best-effort job (91) fills, and a guaranteed job
// (92) the policy preempts it for.
func reclaimSim() *simSlurm {
	be := heldJob(91, "bert", 1, 8)
	be.State, be.Held, be.NodeList, be.BatchHost = slurm.StateRunning, false, []string{"node1"}, "node1"
	be.StartTime = t0.Add(-time.Hour)
	tag := slurm.Tag{ModelType: "bert", Class: slurm.ClassBestEffort, Generation: 1, Plan: "dp8.tp1.pp1.mb4.a1.z0",
		Extra: map[string]string{"req": "n1.g8.c8.m64000", "at": strconv.FormatInt(t0.Add(-time.Hour).Unix(), 10), slurm.TagRestarts: "0"}}
	be.AdminComment = tag.String()
	be.Tag, _ = slurm.TagFromAdminComment(be.AdminComment)
	g := heldJob(92, "roberta", 1, 8)
	g.Account, g.Tag.Class = "lab", slurm.ClassGuaranteed
	sim := &simSlurm{nodes: labNodes(1), jobs: []slurm.Job{be, g}}
	sim.nodes[0].State = "MIXED"
	sim.nodes[0].GPUsUsed, sim.nodes[0].CPUsAlloc, sim.nodes[0].MemAllocMB = 8, 8, 64000
	return sim
}

func withLab(cfg *Config) {
	cfg.Tenants = []TenantConfig{{Name: "lab", Match: []string{"lab"}, QuotaGPUs: 8}}
}

// rubickd's requeue of a job whose acknowledgement in the tag failed is
// still rubickd's: a later cycle acknowledges it, with the preemption's tag,
// and never marks the job held by its user, which would leave it held until
// they release it. So is a requeuehold that timed out after Slurm took it.
func TestCycleAcknowledgesRequeueAfterFailure(t *testing.T) {
	isAck := func(argv []string) bool {
		return slices.Contains(argv, "JobId=91") && slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, "AdminComment=") })
	}
	for _, tc := range []struct {
		name string
		// fails is how many tag writes of job 91 fail after the requeue
		fails int
		// late makes the requeuehold time out after Slurm took it.
		late bool
	}{
		{name: "tag write fails once", fails: 1},
		{name: "tag write fails twice", fails: 2},
		{name: "requeuehold times out", fails: 0, late: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := reclaimSim()
			sim.mail = map[int]string{91: "BEGIN,END,REQUEUE"}
			requeued, acks := false, 0
			sim.fail = func(argv []string) bool {
				if slices.Contains(argv, "requeuehold") {
					requeued = true
					return false
				}
				if requeued && isAck(argv) {
					acks++
					return acks <= tc.fails
				}
				return false
			}
			sim.late = func(argv []string) bool { return tc.late && slices.Contains(argv, "requeuehold") }
			d, _ := newSimDaemon(t, sim, withLab)
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Failed[91] == "" || !slurm.RequeuedByOther(sim.job(t, 91)) {
				t.Fatalf("failed %v, job 91 %+v; want its preemption failed after the requeue", rep.Failed, sim.job(t, 91))
			}
			for range max(tc.fails, 1) {
				d.Invalidate()
				if _, err := d.Cycle(context.Background(), false); err != nil {
					t.Fatal(err)
				}
				if j := sim.job(t, 91); slurm.HeldByUser(j) {
					t.Fatalf("job 91 comment %q; want it never held for its user", j.Comment)
				}
			}
			j := sim.job(t, 91)
			if slurm.RequeuedByOther(j) || j.Tag.Extra["ran"] != "3600" {
				t.Errorf("job 91 tag %+v; want the preemption's (ran=3600), acknowledging the requeue", j.Tag)
			}
			// The mail types the preemption quieted come back at the start.
			if sim.mail[91] != "END" || slurm.MailTypeOfTag(j.Tag) != "BEGIN,END,REQUEUE" {
				t.Errorf("job 91 mail type %q, tag's %q; want END now and BEGIN,END,REQUEUE kept for its start", sim.mail[91], slurm.MailTypeOfTag(j.Tag))
			}
		})
	}
}

func (s *simSlurm) Ping(context.Context) error                            { return nil }
func (s *simSlurm) Partitions(context.Context) ([]slurm.Partition, error) { return nil, nil }
func (s *simSlurm) Submit(context.Context, slurm.SubmitRequest) (int, error) {
	return 0, fmt.Errorf("not supported")
}

// cancelApplier applies with a, then cancels the cycle's context: the
// cycle's deadline passed while the actions ran.
type cancelApplier struct {
	a      Applier
	cancel context.CancelFunc
}

func (c cancelApplier) Apply(ctx context.Context, acts []slurm.Action) []slurm.ActionResult {
	defer c.cancel()
	return c.a.Apply(ctx, acts)
}

// The results of actions Slurm took are recorded though the cycle's
// context ended while they ran: left pending, a later start would settle
// them from a Slurm that may have moved on (abandoned, the job gone).
func TestCycleRecordsResultsAfterDeadline(t *testing.T) {
	sim := &simSlurm{nodes: labNodes(1), jobs: []slurm.Job{heldJob(41, "bert", 1, 2)}}
	d, st := newSimDaemon(t, sim, func(*Config) {})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.deps.Applier = cancelApplier{a: d.deps.Applier, cancel: cancel}
	if _, err := d.Cycle(ctx, false); err != nil {
		t.Fatal(err)
	}
	h, err := st.PlanHistory(context.Background(), 41)
	if err != nil {
		t.Fatal(err)
	}
	var got []store.Result
	for _, a := range h {
		got = append(got, a.Result)
	}
	if diff := cmp.Diff([]store.Result{store.ResultOK}, got); diff != "" {
		t.Errorf("results of job 41 (-want +got):\n%s", diff)
	}
}

// planned is a Policy that returns plan whatever the snapshot.
type planned struct{ plan policy.Plan }

func (planned) Name() string { return "planned" }
func (p planned) Decide(context.Context, *policy.Snapshot) (policy.Plan, error) {
	return p.plan, nil
}

// A restart that failed after its requeue is acknowledged in the job's own
// tag, not the restart's, which names a plan the job never got, with the
// run time the restart counted: the hour the job ran before its requeue.
func TestCycleAcknowledgesRestartInOwnTag(t *testing.T) {
	sim := reclaimSim()
	sim.jobs = sim.jobs[:1]
	requeued, acks := false, 0
	sim.fail = func(argv []string) bool {
		if slices.Contains(argv, "requeuehold") {
			requeued = true
		}
		if requeued && slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, "AdminComment=") }) {
			acks++
			return acks == 1
		}
		return false
	}
	d, _ := newSimDaemon(t, sim, func(*Config) {})
	restart := policy.Action{Kind: policy.Restart, JobID: "91", Alloc: []policy.NodeAlloc{{Node: "node1", GPUs: 4, CPUs: 8, MemGB: 64}},
		Plan: model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}, Throughput: 1e6}
	d.deps.Policy = planned{policy.Plan{Actions: []policy.Action{restart}}}
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Actions) != 1 || rep.Actions[0].Kind != slurm.ActionRestart || rep.Failed[91] == "" || !slurm.RequeuedByOther(sim.job(t, 91)) {
		t.Fatalf("actions %+v, failed %v; want job 91's restart failed after its requeue", rep.Actions, rep.Failed)
	}
	d.deps.Policy = planned{}
	d.Invalidate()
	if _, err := d.Cycle(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if j := sim.job(t, 91); slurm.RequeuedByOther(j) || j.Tag.Plan != "dp8.tp1.pp1.mb4.a1.z0" || j.Tag.Extra["ran"] != "3600" {
		t.Errorf("job 91 tag %+v; want its own (plan dp8, ran=3600), acknowledging the requeue", j.Tag)
	}
}

// recordRequeue stores action a, a preemption or restart, as a rubickd
// that stopped right after its requeue left it: pending, with the restart
// count the requeue gave its job (store.WillRequeue).
func recordRequeue(t *testing.T, st *store.Store, a store.Action, restarts int) store.Action {
	t.Helper()
	ctx := context.Background()
	a, err := st.RecordPlan(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WillRequeue(ctx, a.ID, restarts, ""); err != nil {
		t.Fatal(err)
	}
	a.RequeueCount = restarts
	return a
}

// A requeue Reconcile could not acknowledge at start-up is acknowledged by
// the first cycle, not taken for someone else's.
func TestReconcileAckFailureRetried(t *testing.T) {
	ctx := context.Background()
	sim := reclaimSim()
	sim.jobs = sim.jobs[:1]
	// Stopped between the requeue and its acknowledgement.
	sim.Run(ctx, []string{"scontrol", "requeuehold", "91"})
	failing := true
	sim.fail = func(argv []string) bool { return failing && slices.Contains(argv, "update") }
	d, st := newSimDaemon(t, sim, func(*Config) {})
	if err := st.UpsertJob(ctx, store.Job{ID: 91, ModelType: "bert", Class: store.BestEffort, State: "RUNNING", Submitted: t0}); err != nil {
		t.Fatal(err)
	}
	recordRequeue(t, st, store.Action{JobID: 91, Kind: string(slurm.ActionPreempt)}, 1)
	if err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	failing = false
	if _, err := d.Cycle(ctx, false); err != nil {
		t.Fatal(err)
	}
	if j := sim.job(t, 91); slurm.RequeuedByOther(j) || slurm.HeldByUser(j) {
		t.Errorf("job 91 comment %q, tag %+v; want its requeue acknowledged, not held for its user", j.Comment, j.Tag)
	}
}

// A preemption a previous run left between its requeue and its tag is
// acknowledged in that tag, as stored with the action: the time the job
// ran so far (ran=) counts at its next start; a restart, in the job's own
// tag with the restart's ran=. So it is when the tag write at start-up
// fails and the first cycle writes it.
func TestReconcileAcknowledgesRequeueInStoredTag(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fails makes the tag write at start-up fail.
		fails bool
		// restart stores a restart to dp4 rather than a preemption: its
		// requeue is acknowledged in the job's own tag (dp8), with the
		// restart's ran=.
		restart bool
	}{
		{name: "at start-up"},
		{name: "by the first cycle", fails: true},
		{name: "restart at start-up", restart: true},
		{name: "restart by the first cycle", fails: true, restart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			sim := reclaimSim()
			sim.jobs = sim.jobs[:1]
			preempt := cloneTag(*sim.jobs[0].Tag)
			preempt.Extra["ran"] = "3600"
			// Stopped between the requeue and its acknowledgement.
			sim.Run(ctx, []string{"scontrol", "requeuehold", "91"})
			failing := tc.fails
			sim.fail = func(argv []string) bool { return failing && slices.Contains(argv, "update") }
			d, st := newSimDaemon(t, sim, func(*Config) {})
			if err := st.UpsertJob(ctx, store.Job{ID: 91, ModelType: "bert", Class: store.BestEffort, State: "RUNNING", Submitted: t0}); err != nil {
				t.Fatal(err)
			}
			a := store.Action{JobID: 91, Kind: string(slurm.ActionPreempt), Tag: preempt.String()}
			if tc.restart {
				restart := cloneTag(preempt)
				restart.Plan, restart.Generation = "dp4.tp1.pp1.mb8.a1.z0", preempt.Generation+1
				a = store.Action{JobID: 91, Kind: string(slurm.ActionRestart), Plan: model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1},
					Resources: model.Resources{Placement: model.Placement{4}, CPUs: 8}, Tag: restart.String()}
			}
			recordRequeue(t, st, a, 1)
			if err := d.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			failing = false
			if _, err := d.Cycle(ctx, false); err != nil {
				t.Fatal(err)
			}
			if j := sim.job(t, 91); slurm.RequeuedByOther(j) || slurm.HeldByUser(j) || j.Tag.Extra["ran"] != "3600" || j.Tag.Plan != "dp8.tp1.pp1.mb4.a1.z0" {
				t.Errorf("job 91 comment %q, tag %+v; want a tag of plan dp8 with ran=3600 acknowledging the requeue", j.Comment, j.Tag)
			}
		})
	}
}

// A requeue whose acknowledgement a cycle could not write is still
// rubickd's after a restart of rubickd before the next cycle: the store
// keeps it, and the new rubickd's first cycle acknowledges it, with the
// preemption's tag, instead of marking the job held by its user.
func TestRestartAcknowledgesRequeueAfterFailure(t *testing.T) {
	isAck := func(argv []string) bool {
		return slices.Contains(argv, "JobId=91") && slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, "AdminComment=") })
	}
	for _, tc := range []struct {
		name string
		// late makes the requeuehold time out after Slurm took it.
		late bool
	}{
		{name: "tag write fails"},
		{name: "requeuehold times out", late: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			sim := reclaimSim()
			sim.mail = map[int]string{91: "BEGIN,END"}
			requeued, failing := false, true
			sim.fail = func(argv []string) bool {
				if slices.Contains(argv, "requeuehold") {
					requeued = true
					return false
				}
				return failing && requeued && !tc.late && isAck(argv)
			}
			sim.late = func(argv []string) bool { return tc.late && slices.Contains(argv, "requeuehold") }
			d, st := newSimDaemon(t, sim, withLab)
			rep, err := d.Cycle(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Failed[91] == "" || !slurm.RequeuedByOther(sim.job(t, 91)) {
				t.Fatalf("failed %v, job 91 %+v; want its preemption failed after the requeue", rep.Failed, sim.job(t, 91))
			}
			// rubickd stops here, and a new one starts on the same store.
			failing = false
			d, err = New(d.boot, d.deps)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Cycle(ctx, false); err != nil {
				t.Fatal(err)
			}
			j := sim.job(t, 91)
			if slurm.HeldByUser(j) || slurm.RequeuedByOther(j) || j.Tag.Extra["ran"] != "3600" {
				t.Errorf("job 91 comment %q, tag %+v; want the preemption's tag (ran=3600) acknowledging the requeue, not held for its user", j.Comment, j.Tag)
			}
			// The mail the preemption quieted comes back at its start.
			if sim.mail[91] != "END" || slurm.MailTypeOfTag(j.Tag) != "BEGIN,END" {
				t.Errorf("job 91 mail type %q, tag's %q; want END now and BEGIN,END kept for its start", sim.mail[91], slurm.MailTypeOfTag(j.Tag))
			}
			if left, err := st.Unacked(ctx); err != nil || len(left) != 0 {
				t.Errorf("store's requeues awaiting their tag %+v, %v; want none once acknowledged", left, err)
			}
		})
	}
}

// markFails is a store whose MarkApplied fails for the actions of job.
type markFails struct {
	Store
	st     *store.Store
	job    int64
	marked []int64 // the jobs of the results recorded
}

func (m *markFails) MarkApplied(ctx context.Context, id int64, res store.Result, applyErr error) error {
	pending, err := m.st.Pending(ctx)
	if err != nil {
		return err
	}
	for _, a := range pending {
		if a.ID == id && a.JobID == m.job {
			return errors.New("disk I/O error")
		}
		if a.ID == id {
			m.marked = append(m.marked, a.JobID)
		}
	}
	return m.st.MarkApplied(ctx, id, res, applyErr)
}

// A store error recording one action's result fails the cycle, but the
// results after it are still recorded: left pending, a restarted rubickd
// would settle them from a Slurm that has moved on.
func TestCycleRecordsLaterResultsAfterStoreError(t *testing.T) {
	sim := reclaimSim()
	d, st := newSimDaemon(t, sim, withLab)
	m := &markFails{Store: d.deps.Store, st: st, job: 91}
	d.deps.Store = m
	_, err := d.Cycle(context.Background(), false)
	if err == nil || !strings.Contains(err.Error(), "disk I/O error") || !strings.Contains(err.Error(), "job 91") {
		t.Fatalf("cycle error = %v, want job 91's result unrecorded", err)
	}
	if diff := cmp.Diff([]int64{92}, m.marked); diff != "" {
		t.Errorf("results recorded (-want +got):\n%s", diff)
	}
}

// A start that stopped between its resize and its tag's write (the write
// refused, rubickd crashing after the resize) leaves the job untagged at
// rubick's size, on rubick's node: the next start records its user's
// request and --nodelist from the first start's tag in the store, not
// from what Slurm now reports.
func TestStartKeepsUserRequestAfterResize(t *testing.T) {
	seeded := seededStore(t)
	i := slices.IndexFunc(faultScenarios(), func(sc faultScenario) bool { return sc.name == "start" })
	sc := faultScenarios()[i]
	cases := []struct {
		name string
		c    faultCase
	}{
		{name: "crash after the resize", c: faultCase{first: fault{at: 1, kind: faultCrash}}},
		{name: "resize timed out", c: faultCase{first: fault{at: 1, kind: faultTimeout}}},
		{name: "tag write refused", c: faultCase{first: fault{at: 2, kind: faultRefused}}},
	}
	// Slurm may apply the resize field by field: any field rubick's
	// says that it did.
	for k := range 7 {
		for _, kind := range []faultKind{faultPartial, faultPartialCrash} {
			f := fault{at: 1, kind: kind, field: k}
			cases = append(cases, struct {
				name string
				c    faultCase
			}{name: f.String(), c: faultCase{first: f}})
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := runFault(t, seeded, sc, tc.c)
			if shape(run.first[0]) != "scontrol update JobId=41 NumNodes= NumTasks= CPUsPerTask= MinCPUsNode= NumCPUs= MinMemoryNode= Gres= NodeList=" {
				t.Fatalf("first command %q, want the start's resize", run.first[0])
			}
			j := run.slurm.cloneJobs()[0]
			type record struct{ State, Req, Nodes string }
			want := record{State: slurm.StateRunning, Req: "n1.g2.c8.m64000"}
			got := record{State: j.State}
			if j.Tag != nil {
				got.Req, got.Nodes = j.Tag.Extra[tagReq], j.Tag.Extra[tagNodes]
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("job 41 after recovery (-want +got):\n%s", d)
			}
		})
	}
}

// A start whose resize Slurm refused leaves the job as its user asked,
// and a change the user makes since to their pending job's size or
// --nodelist (scontrol update NumNodes=, Gres=, NumCPUs=, NodeList=) is
// their request from then on: the next start's tag records it, not the
// request the refused start's tag recorded.
func TestStartTakesUserChangeAfterRefusedResize(t *testing.T) {
	seeded := seededStore(t)
	i := slices.IndexFunc(faultScenarios(), func(sc faultScenario) bool { return sc.name == "start" })
	sc := faultScenarios()[i]
	sc.nodes = 2 // a --nodelist the start did not set
	update := func(fields ...string) func(s *faultSlurm) {
		return func(s *faultSlurm) {
			for _, f := range fields {
				if err := s.update(&s.jobs[0], f); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	type record struct{ Req, Nodes string }
	for _, tc := range []struct {
		name   string
		fields []string
		want   record
	}{
		{name: "size", fields: []string{"NumNodes=1", "Gres=gpu:4", "NumCPUs=16"}, want: record{Req: "n1.g4.c16.m64000"}},
		{name: "nodelist", fields: []string{"NodeList=node2"}, want: record{Req: "n1.g2.c8.m64000", Nodes: "node2"}},
		{name: "memory", fields: []string{"MinMemoryNode=32000"}, want: record{Req: "n1.g2.c8.m32000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := faultCase{first: fault{at: 1, kind: faultRefused}, user: update(tc.fields...), userDid: strings.Join(tc.fields, " ")}
			run := runFault(t, seeded, sc, c)
			if shape(run.first[0]) != "scontrol update JobId=41 NumNodes= NumTasks= CPUsPerTask= MinCPUsNode= NumCPUs= MinMemoryNode= Gres= NodeList=" {
				t.Fatalf("first command %q, want the start's resize", run.first[0])
			}
			j := run.slurm.cloneJobs()[0]
			if j.Tag == nil || j.Tag.Generation == 0 {
				t.Fatalf("job 41 not started after the refusal: tag %v", j.Tag)
			}
			got := record{Req: j.Tag.Extra[tagReq], Nodes: j.Tag.Extra[tagNodes]}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("job 41's tag after %v (-want +got):\n%s", c, d)
			}
		})
	}
}

// The mail types rubick takes out of a job's for its requeue come back
// after any one failure: a crash after the quieting update, before the
// requeue (the retried preemption finds nothing to quiet), or after the
// requeue (Reconcile's tag keeps them), and a give-back that failed,
// with rubickd crashing right after it or not: the tag keeps mail= until
// Slurm has the mail types back, so the next cycle, or the next rubickd,
// gives them back again. got is what Slurm mails, with what the tag keeps
// to give back.
func TestMailTypesSurviveFaults(t *testing.T) {
	seeded := seededStore(t)
	scenario := func(name string) faultScenario {
		i := slices.IndexFunc(faultScenarios(), func(sc faultScenario) bool { return sc.name == name })
		return faultScenarios()[i]
	}
	for _, tc := range []struct {
		name, scenario string
		c              faultCase
		// first begins the failing command's shape.
		first string
		want  string
	}{
		{name: "crash after quieting", scenario: "preempt and start", c: faultCase{first: fault{at: 2, kind: faultCrash}},
			first: "scontrol update JobId=91 MailType=", want: "BEGIN,END,REQUEUE"},
		{name: "quieting refused", scenario: "preempt and start", c: faultCase{first: fault{at: 2, kind: faultRefused}},
			first: "scontrol update JobId=91 MailType=", want: "BEGIN,END,REQUEUE"},
		{name: "crash after the requeue", scenario: "preempt and start", c: faultCase{first: fault{at: 4, kind: faultCrash}},
			first: "scontrol requeuehold 91", want: "BEGIN,END,REQUEUE"},
		{name: "give-back refused", scenario: "annotate: mail given back", c: faultCase{first: fault{at: 1, kind: faultRefused}},
			first: "scontrol update JobId=91 MailType=", want: "BEGIN,END"},
		{name: "give-back without its MailType, then a crash", scenario: "annotate: mail given back", c: faultCase{first: fault{at: 1, kind: faultPartialCrash, field: 0}},
			first: "scontrol update JobId=91 MailType=", want: "BEGIN,END"},
		{name: "crash after the give-back", scenario: "annotate: mail given back", c: faultCase{first: fault{at: 1, kind: faultCrash}},
			first: "scontrol update JobId=91 MailType=", want: "BEGIN,END"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := runFault(t, seeded, scenario(tc.scenario), tc.c)
			if got := shape(run.first[tc.c.first.at-1]); !strings.HasPrefix(got, tc.first) {
				t.Fatalf("failing command %q, want %q", got, tc.first)
			}
			j := run.slurm.cloneJobs()[0]
			got := strings.Join(mailSet(run.slurm.mail[91]+","+slurm.MailTypeOfTag(j.Tag)), ",")
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("job 91's mail types with its tag's (-want +got):\n%s", d)
			}
		})
	}
}

// A job whose tag still keeps the mail types an earlier requeue quieted
// (mail=begin,end), given back since and changed by its user (REQUEUE
// added): rubick's next requeue records the ones it finds over the old
// record, in Slurm's tag and in the one that acknowledges the requeue.
// After a crash right after the quieting or the requeue, the job gets its
// user's new choice back. Kept, the old record was given back where it
// matched the quieted ones, dropping REQUEUE, or read as changed and
// dropped with what it recorded.
func TestMailTypesSurviveFaultsAfterUserChange(t *testing.T) {
	seeded := seededStore(t)
	i := slices.IndexFunc(faultScenarios(), func(sc faultScenario) bool { return sc.name == "preempt and start" })
	sc := faultScenarios()[i]
	sc.mail = map[int]string{91: "BEGIN,END,REQUEUE"}
	jobs := sc.jobs
	sc.jobs = func() []slurm.Job {
		js := jobs()
		tag := cloneTag(*js[0].Tag)
		tag.Extra[slurm.TagMail] = "begin,end"
		js[0].Tag, js[0].AdminComment = &tag, tag.String()
		return js
	}
	clean := runFault(t, seeded, sc, faultCase{})
	for _, after := range []string{"scontrol update JobId=91 MailType=", "scontrol requeuehold 91"} {
		t.Run("crash after "+after, func(t *testing.T) {
			at := slices.IndexFunc(clean.first, func(argv []string) bool { return strings.HasPrefix(shape(argv), after) })
			if at < 0 {
				t.Fatalf("no %q among %q", after, clean.first)
			}
			run := runFault(t, seeded, sc, faultCase{first: fault{at: at + 1, kind: faultCrash}})
			j := run.slurm.cloneJobs()[0]
			got := strings.Join(mailSet(run.slurm.mail[91]+","+slurm.MailTypeOfTag(j.Tag)), ",")
			if d := cmp.Diff("BEGIN,END,REQUEUE", got); d != "" {
				t.Errorf("job 91's mail types %q with its tag's %v (-want +got):\n%s", run.slurm.mail[91], j.Tag, d)
			}
		})
	}
}

// Two faults in one cycle at the steps that quiet a job's mail types:
// the update that keeps them in the tag, or the one that quiets them,
// fails (refused, or timed out after Slurm took it), and the action goes
// on; then rubickd crashes right after any later command of the cycle.
// After the recovery every invariant of TestFaultsNeverLoseJobs holds:
// the job's mail types, with those its tag keeps to give back, are its
// own. (A crash, then a fault at the recovery, is among
// TestFaultsNeverLoseJobs's crash loops. A give-back that fails ends its
// action, leaving what a single fault leaves: nothing, or the MailType=
// taken, as a crash right after it does.)
func TestMailTypesSurviveTwoFaults(t *testing.T) {
	seeded := seededStore(t)
	for _, name := range []string{"preempt and start", "restart"} {
		t.Run(name, func(t *testing.T) {
			i := slices.IndexFunc(faultScenarios(), func(sc faultScenario) bool { return sc.name == name })
			sc := faultScenarios()[i]
			clean := runFault(t, seeded, sc, faultCase{})
			quiet := slices.IndexFunc(clean.first, func(argv []string) bool {
				return slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, "MailType=") })
			})
			if quiet < 1 {
				t.Fatalf("no update that keeps the mail types, then one that quiets them, among %q", clean.first)
			}
			n := 0
			for _, at := range []int{quiet, quiet + 1} { // keep, quiet
				for _, kind := range []faultKind{faultRefused, faultTimeout} {
					first := fault{at: at, kind: kind}
					for then := at + 1; then <= len(clean.first); then++ {
						c := faultCase{first: first, then: fault{at: then, kind: faultCrash}}
						if v := runFault(t, seeded, sc, c).violations(t); len(v) > 0 {
							t.Errorf("%s (%q):\n%s", c, clean.first[at-1], strings.Join(v, "\n"))
						}
						n++
					}
				}
			}
			t.Logf("%d pairs of faults", n)
		})
	}
}

// A rubickd that crashes in Reconcile, right after any store write, while
// it settles a preemption or restart that crashed between its requeue and
// its tag, leaves a record that the tag is still owed: the next rubickd
// writes it, and the job is not held for its user.
func TestReconcileCrashKeepsRequeueOwed(t *testing.T) {
	seeded := seededStore(t)
	for _, name := range []string{"preempt and start", "restart"} {
		t.Run(name, func(t *testing.T) {
			i := slices.IndexFunc(faultScenarios(), func(sc faultScenario) bool { return sc.name == name })
			sc := faultScenarios()[i]
			clean := runFault(t, seeded, sc, faultCase{})
			at := slices.IndexFunc(clean.first, func(argv []string) bool { return shape(argv) == "scontrol requeuehold 91" }) + 1
			if at == 0 {
				t.Fatalf("no requeuehold in %q", clean.first)
			}
			crashed := faultCase{first: fault{at: at, kind: faultCrash}}
			writes := runFault(t, seeded, sc, crashed).recoveryWrites
			if writes == 0 {
				t.Fatal("the recovery wrote nothing to the store")
			}
			var held []string
			for w := 1; w <= writes; w++ {
				c := crashed
				c.again = fault{at: w, kind: faultStoreCrash}
				j := runFault(t, seeded, sc, c).slurm.cloneJobs()[0]
				if slurm.HeldByUser(j) || slurm.RequeuedByOther(j) {
					held = append(held, fmt.Sprintf("%v: job 91 held for its user (comment %q, restarts %d, tag %v)", c, j.Comment, j.RestartCount, j.Tag))
				}
			}
			if d := cmp.Diff([]string(nil), held); d != "" {
				t.Errorf("%d crashes after the recovery's store writes (-want +got):\n%s", writes, d)
			}
		})
	}
}
