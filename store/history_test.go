package store

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

var (
	plan8 = model.Plan{DP: 4, TP: 2, PP: 1, MicroBatch: 4, Accum: 4, ZeRO: 1}
	res8  = model.Resources{Placement: model.Placement{8}, CPUs: 64, HostMemGB: 400}
	plan4 = model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, Accum: 8, ZeRO: 2, Offload: true}
	res4  = model.Resources{Placement: model.Placement{2, 2}, CPUs: 32, HostMemGB: 200}
)

func TestJobs(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	sub := time.Date(2026, 2, 28, 9, 0, 0, 0, time.UTC)
	jobs := []Job{
		{ID: 7, ModelType: "gpt2", Class: Guaranteed, Tenant: "nlp", State: "PENDING", Submitted: sub, User: "alice"},
		{ID: 3, Class: BestEffort, Tenant: "cv", State: "RUNNING"}, // rigid, submit time and user unknown
		{ID: 9, ModelType: "bert", Class: BestEffort, State: "RUNNING", LastPlan: plan4, LastResources: res4, ArrayJobID: 8, ArrayTaskID: 0, User: "bob"},
	}
	for _, j := range jobs { // t0, t0+1s, t0+2s
		if err := s.UpsertJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	// Job 7 starts; job 9 is requeued and its plan (and here its user) is
	// not known from Slurm.
	jobs[0].State, jobs[0].LastPlan, jobs[0].LastResources = "RUNNING", plan8, res8
	jobs[2].State = "PENDING"
	if err := s.UpsertJob(ctx, jobs[0]); err != nil { // t0+3s
		t.Fatal(err)
	}
	if err := s.UpsertJob(ctx, Job{ID: 9, ModelType: "bert", Class: BestEffort, State: "PENDING", ArrayJobID: 8}); err != nil { // t0+4s
		t.Fatal(err)
	}

	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	want := map[int64]Job{
		3: {ID: 3, Class: BestEffort, Tenant: "cv", State: "RUNNING", FirstSeen: sec(1), Updated: sec(1)},
		7: {ID: 7, ModelType: "gpt2", Class: Guaranteed, Tenant: "nlp", State: "RUNNING", Submitted: sub,
			FirstSeen: sec(0), Updated: sec(3), LastPlan: plan8, LastResources: res8, User: "alice"},
		9: {ID: 9, ModelType: "bert", Class: BestEffort, State: "PENDING", FirstSeen: sec(2), Updated: sec(4),
			LastPlan: plan4, LastResources: res4, ArrayJobID: 8, User: "bob"},
	}
	for name, tc := range map[string]struct {
		filter JobFilter
		want   []int64
	}{
		"all":             {JobFilter{}, []int64{3, 7, 9}},
		"running":         {JobFilter{States: []string{"RUNNING"}}, []int64{3, 7}},
		"pending or done": {JobFilter{States: []string{"PENDING", "COMPLETED"}}, []int64{9}},
		"by model":        {JobFilter{ModelType: "gpt2"}, []int64{7}},
		"model and state": {JobFilter{States: []string{"PENDING"}, ModelType: "gpt2"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := s.Jobs(ctx, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			var wantJobs []Job
			for _, id := range tc.want {
				wantJobs = append(wantJobs, want[id])
			}
			if d := cmp.Diff(wantJobs, got); d != "" {
				t.Errorf("Jobs(%+v) (-want +got):\n%s", tc.filter, d)
			}
		})
	}
	got, err := s.Job(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want[7], got); d != "" {
		t.Errorf("Job(7) (-want +got):\n%s", d)
	}
	if _, err := s.Job(ctx, 8); !errors.Is(err, ErrNotFound) {
		t.Errorf("Job(8) = %v, want ErrNotFound", err)
	}
	// Task 0 of array 8 is job 9, as squeue names it (8_0).
	if got, err := s.ArrayTask(ctx, 8, 0); err != nil || got.ID != 9 {
		t.Errorf("ArrayTask(8, 0) = job %d, %v; want job 9", got.ID, err)
	}
	for _, at := range [][2]int64{{8, 1}, {9, 0}, {7, 0}} {
		if got, err := s.ArrayTask(ctx, at[0], at[1]); !errors.Is(err, ErrNotFound) {
			t.Errorf("ArrayTask(%d, %d) = job %d, %v; want ErrNotFound", at[0], at[1], got.ID, err)
		}
	}
}

// A job's last wait for its begin time or dependencies is kept by upserts
// without one, replaced by a later one, and read back only for the jobs
// that waited.
func TestDeferred(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	first, last := t0.Add(-time.Hour), t0.Add(-time.Minute)
	for _, j := range []Job{
		{ID: 4, ModelType: "bert", Class: BestEffort, State: "PENDING", Deferred: first},
		{ID: 4, ModelType: "bert", Class: BestEffort, State: "PENDING", Deferred: last},
		{ID: 4, ModelType: "bert", Class: BestEffort, State: "RUNNING"},
		{ID: 5, ModelType: "bert", Class: BestEffort, State: "PENDING"},
	} {
		if err := s.UpsertJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Deferred(ctx, []int64{4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[int64]time.Time{4: last}, got); d != "" {
		t.Errorf("Deferred (-want +got):\n%s", d)
	}
	if j, err := s.Job(ctx, 4); err != nil || !j.Deferred.Equal(last) {
		t.Errorf("Job(4).Deferred = %v, %v; want %v", j.Deferred, err, last)
	}
}

// A job's run as last seen running survives the upserts of the job while
// it is not running, is replaced by a later one (a requeue's next run
// starts over), and reads back only for the jobs seen running.
func TestLastRuns(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	sub := t0.Add(-3 * time.Hour)
	for _, j := range []Job{
		{ID: 4, Class: BestEffort, State: "RUNNING", Submitted: sub, LastRun: Run{Restarts: 1, Time: time.Minute}},
		{ID: 4, Class: BestEffort, State: "RUNNING", Submitted: sub, LastRun: Run{Restarts: 1, Time: 2 * time.Hour}},
		{ID: 4, Class: BestEffort, State: "PENDING", Submitted: sub},
		{ID: 5, Class: BestEffort, State: "RUNNING", LastRun: Run{Time: 3 * time.Hour}},
		{ID: 5, Class: BestEffort, State: "RUNNING", LastRun: Run{Restarts: 1, Time: 20 * time.Second}},
		{ID: 6, Class: BestEffort, State: "PENDING"},
	} {
		if err := s.UpsertJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.LastRuns(ctx, []int64{4, 5, 6, 7})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]SeenRun{
		4: {Submitted: sub, Run: Run{Restarts: 1, Time: 2 * time.Hour}},
		5: {Run: Run{Restarts: 1, Time: 20 * time.Second}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("LastRuns (-want +got):\n%s", d)
	}
}

// What a job's launch line cannot express survives the daemon's upserts of
// the job and reads back per job; a job that has not reported yet gets its
// user's newest report for its model type.
func TestLaunchLimits(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	for _, mt := range []model.Spec{gpt2(), {Name: "bert", Params: 3.4e8, Layers: 24, Hidden: 1024, Heads: 16, SeqLen: 512, GlobalBatch: 32, ForwardMs: 100}} {
		if err := s.UpsertModelType(ctx, mt); err != nil {
			t.Fatal(err)
		}
	}
	for id, mt := range map[int64]string{4: "gpt2", 5: "gpt2", 6: "gpt2", 7: "bert", 8: "gpt2"} {
		if err := s.UpsertJob(ctx, Job{ID: id, ModelType: mt, Class: BestEffort, State: "RUNNING"}); err != nil {
			t.Fatal(err)
		}
	}
	keys := []LaunchKey{{ID: 4, User: "alice", ModelType: "gpt2"}, {ID: 5, User: "alice", ModelType: "gpt2"}, {ID: 6, User: "bob", ModelType: "gpt2"}, {ID: 7, User: "alice", ModelType: "bert"}, {ID: 8, User: "alice", ModelType: "gpt2"}, {ID: 99, User: "carol", ModelType: "gpt2"}}
	check := func(step string, want map[int64]Launch) {
		t.Helper()
		got, err := s.LaunchLimits(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: LaunchLimits (-want +got):\n%s", step, d)
		}
	}
	check("no reports", map[int64]Launch{})
	if err := s.SetJobLaunch(ctx, 99, "carol", Launch{Cannot: model.FeatureTP}); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetJobLaunch for an unknown job = %v, want ErrNotFound", err)
	}
	if err := s.SetJobLaunch(ctx, 5, "alice", Launch{GlobalBatch: -4}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "global_batch=-4") {
		t.Errorf("SetJobLaunch of a negative global batch = %v, want ErrInvalid naming it", err)
	}
	if err := s.SetJobLaunch(ctx, 4, "alice", Launch{Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 64}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetJobLaunch(ctx, 6, "bob", Launch{Cannot: model.FeatureOffload}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertJob(ctx, Job{ID: 4, ModelType: "gpt2", Class: BestEffort, State: "PENDING", LastPlan: plan4, LastResources: res4}); err != nil {
		t.Fatal(err)
	}
	ds := Launch{Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 64}
	ownDS, bobs := ds, Launch{Cannot: model.FeatureOffload, Own: true}
	ownDS.Own = true
	check("alice's deepspeed job", map[int64]Launch{4: ownDS, 5: ds, 6: bobs, 8: ds})
	// Alice's newest gpt2 job runs Megatron at gpt2's own global batch: her
	// other unreported job follows it, job 4 keeps its own report, and
	// job 8's, which says nothing, is its own still.
	if err := s.SetJobLaunch(ctx, 8, "alice", Launch{}); err != nil {
		t.Fatal(err)
	}
	check("alice's megatron job", map[int64]Launch{4: ownDS, 6: bobs, 8: {Own: true}})
	// A line that can run every plan, at a batch of its own.
	if err := s.SetJobLaunch(ctx, 8, "alice", Launch{GlobalBatch: 16}); err != nil {
		t.Fatal(err)
	}
	check("alice's batch of 16", map[int64]Launch{4: ownDS, 5: {GlobalBatch: 16}, 6: bobs, 8: {GlobalBatch: 16, Own: true}})
	j, err := s.Job(ctx, 6)
	if err != nil || j.Cannot != model.FeatureOffload {
		t.Errorf("Job(6).Cannot = %v, %v; want offload", j.Cannot, err)
	}
	if j, err := s.Job(ctx, 4); err != nil || j.GlobalBatch != 64 {
		t.Errorf("Job(4).GlobalBatch = %v, %v; want 64", j.GlobalBatch, err)
	}
}

// A job's profiling phase reported over stays pending, across a reopen,
// until a first-fit attempt uses it; a later report of the same job's phase
// is pending again.
func TestPendingPhases(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	s := openTest(t, path)
	for id, mt := range map[int64]string{4: "gpt2", 5: "gpt2", 6: "bert", 7: "gpt2"} {
		if err := s.UpsertJob(ctx, Job{ID: id, ModelType: mt, Class: BestEffort, State: "RUNNING"}); err != nil {
			t.Fatal(err)
		}
	}
	type step struct {
		report  map[int64]string // job: the model type its notice ends the phase of ("": none)
		used    []int64
		reopen  bool
		pending map[string][]int64
	}
	last := map[int64]Phase{} // the phases the last step read pending
	for i, st := range []step{
		{pending: map[string][]int64{}},
		{report: map[int64]string{4: "gpt2", 6: "bert", 7: ""}, pending: map[string][]int64{"gpt2": {4}, "bert": {6}}},
		{report: map[int64]string{5: "gpt2"}, reopen: true, pending: map[string][]int64{"gpt2": {4, 5}, "bert": {6}}},
		{used: []int64{4, 6, 7}, pending: map[string][]int64{"gpt2": {5}}},
		{used: []int64{4}, reopen: true, pending: map[string][]int64{"gpt2": {5}}},
		// A requeued job's later start reports its phase over again.
		{report: map[int64]string{4: "gpt2"}, pending: map[string][]int64{"gpt2": {4, 5}}},
		{used: []int64{5, 4}, pending: map[string][]int64{}},
	} {
		for id, mt := range st.report {
			if err := s.SetJobLaunch(ctx, id, "alice", Launch{GlobalBatch: 16, Profiled: mt}); err != nil {
				t.Fatal(err)
			}
		}
		var used []Phase
		for _, id := range st.used {
			p, ok := last[id]
			if !ok {
				p = Phase{JobID: id} // matches none
			}
			used = append(used, p)
		}
		if err := s.PhasesUsed(ctx, used); err != nil {
			t.Fatal(err)
		}
		if st.reopen {
			s.Close()
			s = openTest(t, path)
		}
		got, err := s.PendingPhases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(st.pending, phaseJobs(got)); d != "" {
			t.Errorf("step %d: PendingPhases (-want +got):\n%s", i, d)
		}
		last = map[int64]Phase{}
		for _, ps := range got {
			for _, p := range ps {
				last[p.JobID] = p
			}
		}
	}
	// A phase reported over again after the read stays pending: the
	// attempt that used the read did not see its new samples.
	if err := s.SetJobLaunch(ctx, 5, "alice", Launch{GlobalBatch: 16, Profiled: "gpt2"}); err != nil {
		t.Fatal(err)
	}
	read, err := s.PendingPhases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // the store's clock is the wall clock
	if err := s.SetJobLaunch(ctx, 5, "alice", Launch{GlobalBatch: 16, Profiled: "gpt2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PhasesUsed(ctx, read["gpt2"]); err != nil {
		t.Fatal(err)
	}
	if got, err := s.PendingPhases(ctx); err != nil || !slices.Equal(PhaseJobs(got["gpt2"]), []int64{5}) {
		t.Errorf("PendingPhases after a phase reported over again = %v, %v; want job 5 still", got, err)
	}
	if err := s.PhasesUsed(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SetJobLaunch(ctx, 99, "alice", Launch{Profiled: "gpt2"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetJobLaunch for an unknown job = %v, want ErrNotFound", err)
	}
	if err := s.SetJobLaunch(ctx, 5, "alice", Launch{Profiled: " gpt2"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `model_type=" gpt2"`) {
		t.Errorf("SetJobLaunch of a bad model type = %v, want ErrInvalid naming it", err)
	}
	if got, err := s.PendingPhases(ctx); err != nil || len(got) != 1 {
		t.Errorf("PendingPhases after refused reports = %v, %v; want job 5's alone", got, err)
	}
}

// phaseJobs are the jobs of each type's phases.
func phaseJobs(phases map[string][]Phase) map[string][]int64 {
	out := map[string][]int64{}
	for mt, ps := range phases {
		out[mt] = PhaseJobs(ps)
	}
	return out
}

// PhasesOver gives, for the jobs asked about, when each last reported its
// phase over, whether a fit used it or not; jobs without a notice are
// absent.
func TestPhasesOver(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	s := openTest(t, "", WithClock(func() time.Time { return now }))
	for _, id := range []int64{4, 5, 6} {
		if err := s.UpsertJob(ctx, Job{ID: id, ModelType: "gpt2", Class: BestEffort, State: "RUNNING"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []int64{4, 5} {
		if err := s.SetJobLaunch(ctx, id, "alice", Launch{GlobalBatch: 16, Profiled: "gpt2"}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
	}
	if err := s.PhasesUsed(ctx, []Phase{{JobID: 4, Over: now.Add(-2 * time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.PhasesOver(ctx, []int64{4, 5, 6, 99})
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	if d := cmp.Diff(map[int64]time.Time{4: t1, 5: t1.Add(time.Minute)}, got); d != "" {
		t.Errorf("PhasesOver (-want +got):\n%s", d)
	}
	if got, err := s.PhasesOver(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("PhasesOver(nil) = %v, %v; want none", got, err)
	}
}

func TestUpsertJobRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		job  Job
		want string
	}{
		"zero id":       {Job{Class: Guaranteed, State: "PENDING"}, "job_id=0"},
		"bad class":     {Job{ID: 1, Class: "gold", State: "PENDING"}, `class="gold"`},
		"empty state":   {Job{ID: 1, Class: Guaranteed}, `state=""`},
		"array task":    {Job{ID: 1, Class: Guaranteed, State: "PENDING", ArrayJobID: 1, ArrayTaskID: -1}, "array task 1_-1"},
		"zero-GPU plan": {Job{ID: 1, Class: Guaranteed, State: "RUNNING", LastPlan: plan8, LastResources: model.Resources{Placement: model.Placement{0}}}, "gpus=0"},
		"run time":      {Job{ID: 1, Class: Guaranteed, State: "RUNNING", LastRun: Run{Time: -time.Second}}, "run time=-1s"},
		"restarts":      {Job{ID: 1, Class: Guaranteed, State: "RUNNING", LastRun: Run{Restarts: -1, Time: time.Second}}, "restarts=-1"},
	} {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, "")
			err := s.UpsertJob(context.Background(), tc.job)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("UpsertJob = %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}

// UpsertJobs writes its jobs in order in one transaction: a later entry
// for a job updates an earlier one as UpsertJob would, and one bad job
// stores none.
func TestUpsertJobs(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	waited := t0.Add(-time.Hour)
	if err := s.UpsertJobs(ctx, []Job{
		{ID: 4, ModelType: "bert", Class: BestEffort, State: "PENDING", User: "alice", Deferred: waited},
		{ID: 5, Class: BestEffort, State: "RUNNING"},
		{ID: 4, ModelType: "bert", Class: BestEffort, State: "RUNNING", LastPlan: plan4, LastResources: res4},
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Jobs(ctx, JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{ID: 4, ModelType: "bert", Class: BestEffort, State: "RUNNING", User: "alice", Deferred: waited, LastPlan: plan4, LastResources: res4,
			FirstSeen: t0, Updated: t0},
		{ID: 5, Class: BestEffort, State: "RUNNING", FirstSeen: t0, Updated: t0},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("jobs (-want +got):\n%s", d)
	}
	err = s.UpsertJobs(ctx, []Job{{ID: 6, Class: BestEffort, State: "PENDING"}, {ID: 7, Class: "gold", State: "PENDING"}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "job 7") {
		t.Errorf("UpsertJobs with a bad job 7 = %v, want ErrInvalid naming job 7", err)
	}
	if _, err := s.Job(ctx, 6); !errors.Is(err, ErrNotFound) {
		t.Errorf("job 6 of the refused batch: %v, want ErrNotFound", err)
	}
}

// decide records one cycle for jobs 7 (start) and 9 (preempt).
func decide(t *testing.T, s *Store) Decision {
	t.Helper()
	ctx := context.Background()
	for _, j := range []Job{
		{ID: 7, ModelType: "gpt2", Class: Guaranteed, Tenant: "nlp", State: "PENDING"},
		{ID: 9, ModelType: "bert", Class: BestEffort, State: "RUNNING", LastPlan: plan4, LastResources: res4},
	} {
		if err := s.UpsertJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	d, err := s.RecordDecision(ctx, Decision{
		Policy:   "rubick",
		Duration: 1500 * time.Microsecond,
		Reasons: map[int64]json.RawMessage{
			7: json.RawMessage(`{"why":"guaranteed, minRes fits quota","slope":0.8}`),
			9: json.RawMessage(`"lowest slope"`),
		},
		Actions: []Action{
			{JobID: 7, Kind: "start", Plan: plan8, Resources: res8},
			{JobID: 9, Kind: "preempt"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRecordDecision(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if _, err := s.LastCycle(ctx); !errors.Is(err, ErrNotFound) {
		t.Errorf("LastCycle before any = %v, want ErrNotFound", err)
	}
	d := decide(t, s) // jobs at t0, t0+1s; decision at t0+2s
	if last, err := s.LastCycle(ctx); err != nil || last != d.CycleID {
		t.Errorf("LastCycle = %d, %v; want %d", last, err, d.CycleID)
	}
	if _, err := s.RecordDecision(ctx, Decision{Policy: "rubick"}); err != nil {
		t.Fatal(err)
	}
	if last, err := s.LastCycle(ctx); err != nil || last != d.CycleID+1 {
		t.Errorf("LastCycle after another = %d, %v; want %d", last, err, d.CycleID+1)
	}
	at := t0.Add(2 * time.Second)
	want := Decision{
		CycleID: 1, At: at, Policy: "rubick", Duration: 1500 * time.Microsecond,
		Reasons: map[int64]json.RawMessage{
			7: json.RawMessage(`{"why":"guaranteed, minRes fits quota","slope":0.8}`),
			9: json.RawMessage(`"lowest slope"`),
		},
		Actions: []Action{
			{ID: 1, CycleID: 1, JobID: 7, Kind: "start", Plan: plan8, Resources: res8, DecidedAt: at},
			{ID: 2, CycleID: 1, JobID: 9, Kind: "preempt", DecidedAt: at},
		},
	}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("RecordDecision (-want +got):\n%s", diff)
	}
	got, err := s.Decision(ctx, d.CycleID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Decision (-want +got):\n%s", diff)
	}
	if _, err := s.Decision(ctx, 99); !errors.Is(err, ErrNotFound) {
		t.Errorf("Decision(99) = %v, want ErrNotFound", err)
	}
	reasons, err := s.Reasons(ctx, 9, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantReasons := []Reason{{CycleID: 1, At: at, Policy: "rubick", JobID: 9, Reason: json.RawMessage(`"lowest slope"`)}}
	if diff := cmp.Diff(wantReasons, reasons); diff != "" {
		t.Errorf("Reasons(9) (-want +got):\n%s", diff)
	}
}

// TestReasonsAsOf: a cycle that lists a job as unchanged says of it what
// the job's newest reason up to that cycle says, not a later one.
func TestReasonsAsOf(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	record := func(d Decision) int64 {
		t.Helper()
		d.Policy = "rubick"
		got, err := s.RecordDecision(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		return got.CycleID
	}
	reason := func(s string) json.RawMessage { return json.RawMessage(strconv.Quote(s)) }
	c1 := record(Decision{Reasons: map[int64]json.RawMessage{5: reason("held by its user"), 6: reason("dependency")}})
	c2 := record(Decision{Reasons: map[int64]json.RawMessage{7: reason("begin time")}, Unchanged: []int64{6, 5, 6}})
	c3 := record(Decision{Reasons: map[int64]json.RawMessage{5: reason("held by an administrator")}, Unchanged: []int64{6, 7}})

	got, err := s.Decision(ctx, c2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{5, 6}, got.Unchanged); diff != "" {
		t.Errorf("Decision(%d).Unchanged, sorted and once each (-want +got):\n%s", c2, diff)
	}
	if got, err := s.Decision(ctx, c1); err != nil || got.Unchanged != nil {
		t.Errorf("Decision(%d).Unchanged = %v, %v; want none", c1, got.Unchanged, err)
	}
	at := func(c int64) time.Time {
		d, err := s.Decision(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return d.At
	}
	for _, tc := range []struct {
		cycle int64
		ids   []int64
		want  map[int64]Reason
	}{
		{c2, []int64{5, 6, 99}, map[int64]Reason{
			5: {CycleID: c1, At: at(c1), Policy: "rubick", JobID: 5, Reason: reason("held by its user")},
			6: {CycleID: c1, At: at(c1), Policy: "rubick", JobID: 6, Reason: reason("dependency")},
		}},
		{c3, []int64{5, 6, 7}, map[int64]Reason{
			5: {CycleID: c3, At: at(c3), Policy: "rubick", JobID: 5, Reason: reason("held by an administrator")},
			6: {CycleID: c1, At: at(c1), Policy: "rubick", JobID: 6, Reason: reason("dependency")},
			7: {CycleID: c2, At: at(c2), Policy: "rubick", JobID: 7, Reason: reason("begin time")},
		}},
		{c1, []int64{7}, map[int64]Reason{}},
		{c3, nil, map[int64]Reason{}},
	} {
		got, err := s.ReasonsAsOf(ctx, tc.cycle, tc.ids)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ReasonsAsOf(%d, %v) (-want +got):\n%s", tc.cycle, tc.ids, diff)
		}
	}
	// More ids than one query binds.
	many := make([]int64, 2500)
	for i := range many {
		many[i] = int64(i + 1)
	}
	got3, err := s.ReasonsAsOf(ctx, c3, many)
	if err != nil || len(got3) != 3 {
		t.Errorf("ReasonsAsOf(%d, 2,500 ids) = %d reasons, %v; want 3", c3, len(got3), err)
	}
}

// NewestReasons gives each span the job's newest reason recorded within
// it (From included, To not), none where it has none: another job's
// reasons and the job's outside the span do not count.
func TestNewestReasons(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	clock := now
	s := openTest(t, "", WithClock(func() time.Time { return clock }))
	reason := func(s string) json.RawMessage { return json.RawMessage(strconv.Quote(s)) }
	record := func(d time.Duration, reasons map[int64]json.RawMessage) Reason {
		t.Helper()
		clock = at(d)
		got, err := s.RecordDecision(ctx, Decision{Policy: "rubick", Reasons: reasons})
		if err != nil {
			t.Fatal(err)
		}
		return Reason{CycleID: got.CycleID, At: got.At, Policy: "rubick", JobID: 5, Reason: reasons[5]}
	}
	r1 := record(0, map[int64]json.RawMessage{5: reason("first")})
	r2 := record(time.Minute, map[int64]json.RawMessage{5: reason("second")})
	record(90*time.Second, map[int64]json.RawMessage{6: reason("another job's")})
	r3 := record(2*time.Minute, map[int64]json.RawMessage{5: reason("third"), 6: reason("another job's")})
	spans := []Span{
		{at(0), at(2 * time.Minute)},                  // r3 is at To: r2
		{at(time.Minute), at(10 * time.Minute)},       // r3, the newest
		{at(-time.Hour), at(30 * time.Second)},        // r1 at From
		{at(80 * time.Second), at(100 * time.Second)}, // only job 6's
		{at(2 * time.Minute), at(2 * time.Minute)},    // empty
		{at(time.Hour), at(2 * time.Hour)},            // after every reason
	}
	got, err := s.NewestReasons(ctx, 5, spans)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Reason{r2, r3, r1, {}, {}, {}}, got); diff != "" {
		t.Errorf("NewestReasons(5) (-want +got):\n%s", diff)
	}
	if got, err := s.NewestReasons(ctx, 5, nil); err != nil || len(got) != 0 {
		t.Errorf("NewestReasons(5, no spans) = %v, %v; want none", got, err)
	}
	// More spans than one query binds.
	many := make([]Span, 2500)
	for i := range many {
		many[i] = Span{at(time.Duration(i) * time.Second), at(time.Duration(i+1) * time.Second)}
	}
	gotMany, err := s.NewestReasons(ctx, 5, many)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]Reason, len(many))
	want[0], want[60], want[120] = r1, r2, r3
	if diff := cmp.Diff(want, gotMany); diff != "" {
		t.Errorf("NewestReasons(5, 2,500 spans) (-want +got):\n%s", diff)
	}
}

// LastSeen is the newest cycle that stored a reason for the job or listed
// it as unchanged.
func TestLastSeen(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	at := map[int64]time.Time{}
	record := func(d Decision) {
		t.Helper()
		d.Policy = "rubick"
		got, err := s.RecordDecision(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		at[got.CycleID] = got.At
	}
	reason := json.RawMessage(`"held by its user"`)
	record(Decision{Reasons: map[int64]json.RawMessage{5: reason, 6: reason}})
	record(Decision{Reasons: map[int64]json.RawMessage{7: reason}, Unchanged: []int64{5, 6}})
	record(Decision{Unchanged: []int64{5, 7}})
	record(Decision{Reasons: map[int64]json.RawMessage{8: reason}})
	got := map[int64]time.Time{}
	for _, id := range []int64{5, 6, 7, 8, 99} {
		seen, err := s.LastSeen(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got[id] = seen
	}
	want := map[int64]time.Time{5: at[3], 6: at[2], 7: at[3], 8: at[4], 99: {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LastSeen (-want +got):\n%s", diff)
	}
}

func TestRecordDecisionIsAtomic(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if err := s.UpsertJob(ctx, Job{ID: 7, Class: Guaranteed, State: "PENDING"}); err != nil {
		t.Fatal(err)
	}
	// The second action names a job the store has never seen.
	_, err := s.RecordDecision(ctx, Decision{Policy: "rubick", Actions: []Action{
		{JobID: 7, Kind: "start", Plan: plan8, Resources: res8},
		{JobID: 8, Kind: "start", Plan: plan8, Resources: res8},
	}})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("RecordDecision with an unknown job = %v, want ErrNotFound", err)
	}
	if p, err := s.Pending(ctx); err != nil || len(p) != 0 {
		t.Errorf("Pending after a failed decision = %v, %v; want none", p, err)
	}
	if _, err := s.Decision(ctx, 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("Decision(1) after a failed decision = %v, want ErrNotFound", err)
	}
}

func TestRecordDecisionRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		d    Decision
		want string
	}{
		"no policy":       {Decision{}, `policy=""`},
		"negative time":   {Decision{Policy: "p", Duration: -1}, "duration=-1ns"},
		"reason not JSON": {Decision{Policy: "p", Reasons: map[int64]json.RawMessage{4: json.RawMessage("slow")}}, `job 4="slow"`},
		"action no kind":  {Decision{Policy: "p", Actions: []Action{{JobID: 1}}}, `kind=""`},
		"action plan":     {Decision{Policy: "p", Actions: []Action{{JobID: 1, Kind: "start", Plan: plan8, Resources: res4}}}, "uses 8 GPUs"},
		"unchanged with a reason": {Decision{Policy: "p", Reasons: map[int64]json.RawMessage{4: json.RawMessage(`"x"`)}, Unchanged: []int64{4}},
			"unchanged job 4"},
		"unchanged job 0": {Decision{Policy: "p", Unchanged: []int64{3, 0}}, "unchanged job 0 must be > 0"},
		// What the store's own reads would refuse: stored, it would break
		// every read of the decisions and jobs around it.
		"micro-batch past ParsePlan's bound": {Decision{Policy: "p", Actions: []Action{{JobID: 1, Kind: "start",
			Plan: model.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 1<<20 + 1, Accum: 1}, Resources: model.Resources{Placement: model.Placement{1}}}}},
			"mb=\"1048577\""},
		"GPUs per node past ParsePlacement's bound": {Decision{Policy: "p", Actions: []Action{{JobID: 1, Kind: "start",
			Plan: model.Plan{DP: 2048, TP: 1, PP: 1, MicroBatch: 1, Accum: 1}, Resources: model.Resources{Placement: model.Placement{2048}}}}},
			"placement=1x2048"},
	} {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, "")
			_, err := s.RecordDecision(context.Background(), tc.d)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RecordDecision = %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}

func TestPendingAndMarkApplied(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	d := decide(t, s) // t0..t0+2s
	start, preempt := d.Actions[0], d.Actions[1]

	manual, err := s.RecordPlan(ctx, Action{JobID: 9, Kind: "reconfigure", Plan: plan4, Resources: res4}) // t0+3s
	if err != nil {
		t.Fatal(err)
	}
	if manual.ID != 3 || manual.CycleID != 0 || !manual.DecidedAt.Equal(t0.Add(3*time.Second)) {
		t.Errorf("RecordPlan = %+v, want ID 3, no cycle, decided at t0+3s", manual)
	}
	pending, err := s.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]Action{start, preempt, manual}, pending); d != "" {
		t.Errorf("Pending (-want +got):\n%s", d)
	}

	if err := s.MarkApplied(ctx, start.ID, ResultOK, nil); err != nil { // t0+4s
		t.Fatal(err)
	}
	if err := s.MarkApplied(ctx, preempt.ID, ResultFailed, errors.New("scontrol: Job is no longer pending")); err != nil { // t0+5s
		t.Fatal(err)
	}
	if err := s.MarkApplied(ctx, start.ID, ResultOK, nil); !errors.Is(err, ErrResolved) {
		t.Errorf("second MarkApplied = %v, want ErrResolved", err)
	}
	if err := s.MarkApplied(ctx, 99, ResultOK, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("MarkApplied(99) = %v, want ErrNotFound", err)
	}
	for name, tc := range map[string]struct {
		res Result
		err error
	}{
		"ok with error":     {ResultOK, errors.New("x")},
		"failed, no error":  {ResultFailed, nil},
		"pending is no end": {ResultPending, nil},
		"unknown result":    {"maybe", nil},
	} {
		if err := s.MarkApplied(ctx, manual.ID, tc.res, tc.err); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: MarkApplied = %v, want ErrInvalid", name, err)
		}
	}

	pending, err = s.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]Action{manual}, pending); d != "" {
		t.Errorf("Pending after marking (-want +got):\n%s", d)
	}

	// The applied start became job 7's last plan; the failed preempt left job 9 alone.
	j7, err := s.Job(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if j7.LastPlan != plan8 || !cmp.Equal(j7.LastResources, res8) {
		t.Errorf("job 7 last plan = %v on %+v, want %v on %+v", j7.LastPlan, j7.LastResources, plan8, res8)
	}
	hist, err := s.PlanHistory(ctx, 9)
	if err != nil {
		t.Fatal(err)
	}
	preempt.Result, preempt.AppliedAt, preempt.Error = ResultFailed, t0.Add(5*time.Second), "scontrol: Job is no longer pending"
	if d := cmp.Diff([]Action{preempt, manual}, hist); d != "" {
		t.Errorf("PlanHistory(9) (-want +got):\n%s", d)
	}
	if err := s.MarkApplied(ctx, manual.ID, ResultAbandoned, nil); err != nil {
		t.Errorf("MarkApplied abandoned: %v", err)
	}
	j9, err := s.Job(ctx, 9)
	if err != nil {
		t.Fatal(err)
	}
	if j9.LastPlan != plan4 {
		t.Errorf("job 9 last plan = %v, want %v unchanged", j9.LastPlan, plan4)
	}
}

func TestRecordPlanUnknownJobOrCycle(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if _, err := s.RecordPlan(ctx, Action{JobID: 5, Kind: "start", Plan: plan8, Resources: res8}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "record plan for job 5") {
		t.Errorf("RecordPlan for an unknown job = %v, want ErrNotFound naming job 5", err)
	}
	if err := s.UpsertJob(ctx, Job{ID: 5, Class: BestEffort, State: "PENDING"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPlan(ctx, Action{CycleID: 3, JobID: 5, Kind: "start", Plan: plan8, Resources: res8}); !errors.Is(err, ErrNotFound) {
		t.Errorf("RecordPlan for an unknown cycle = %v, want ErrNotFound", err)
	}
}

// A refusal is a resolved entry of the job's plan history, after its
// start, without resources; it is not pending and leaves the job's last
// plan as the start set it. A bad plan is refused naming the field, an
// unknown job with ErrNotFound.
func TestRecordRefusal(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if _, err := s.RecordRefusal(ctx, 5, plan8, "tp"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RecordRefusal for an unknown job = %v, want ErrNotFound", err)
	}
	if err := s.UpsertJob(ctx, Job{ID: 5, Class: BestEffort, State: "PENDING"}); err != nil {
		t.Fatal(err)
	}
	start, err := s.RecordPlan(ctx, Action{JobID: 5, Kind: "start", Plan: plan8, Resources: res8})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MarkApplied(ctx, start.ID, ResultOK, nil); err != nil {
		t.Fatal(err)
	}
	why := "it uses tp, which the line cannot express"
	if _, err := s.RecordRefusal(ctx, 5, plan8, why); err != nil {
		t.Fatal(err)
	}
	bad := plan8
	bad.MicroBatch = 0
	if _, err := s.RecordRefusal(ctx, 5, bad, why); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "plan.micro_batch=0") {
		t.Errorf("RecordRefusal of a bad plan = %v, want ErrInvalid naming plan.micro_batch", err)
	}
	hist, err := s.PlanHistory(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Kind   string
		Plan   model.Plan
		GPUs   int
		Result Result
		Error  string
		Done   bool
	}
	var got []entry
	for _, a := range hist {
		got = append(got, entry{a.Kind, a.Plan, a.Resources.Placement.GPUs(), a.Result, a.Error, !a.AppliedAt.IsZero()})
	}
	want := []entry{{"start", plan8, 8, ResultOK, "", true}, {KindRefused, plan8, 0, ResultFailed, why, true}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("plan history (-want +got):\n%s", d)
	}
	if pending, err := s.Pending(ctx); err != nil || len(pending) != 0 {
		t.Errorf("Pending = %v, %v; want none", pending, err)
	}
	if j, err := s.Job(ctx, 5); err != nil || j.LastPlan != plan8 {
		t.Errorf("job 5 last plan = %v (%v), want the start's %v", j.LastPlan, err, plan8)
	}
}

// An action's tag reads back as recorded. A preemption that failed after
// its requeue awaits its tag until the job's requeue is acknowledged:
// Unacked lists it, across a reopening of the store, and no longer once
// Acked; other jobs' marks stay.
func TestAwaitAck(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	s := openTest(t, path)
	d := decide(t, s)
	start, preempt := d.Actions[0], d.Actions[1]
	tag := "rubick:v1 model=bert class=best-effort plan=dp4.tp1.pp1.mb2.a8.z2+off ran=3600"
	later, err := s.RecordPlan(ctx, Action{JobID: 9, Kind: "preempt", Tag: tag})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MarkApplied(ctx, later.ID, ResultFailed, errors.New("annotate: exit status 1")); err != nil {
		t.Fatal(err)
	}
	mails := map[int64]string{start.ID: "", preempt.ID: "begin-end", later.ID: "requeue"}
	for _, id := range []int64{start.ID, preempt.ID, later.ID} {
		if err := s.AwaitAck(ctx, id, mails[id]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AwaitAck(ctx, 99, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("AwaitAck(99) = %v, want ErrNotFound", err)
	}
	s.Close()
	s = openTest(t, path)
	ids := func() []int64 {
		t.Helper()
		got, err := s.Unacked(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, a := range got {
			if !a.AwaitsAck || a.AckMail != mails[a.ID] {
				t.Errorf("Unacked listed action %d, awaiting its tag %v with mail %q; want true, %q", a.ID, a.AwaitsAck, a.AckMail, mails[a.ID])
			}
			out = append(out, a.ID)
		}
		return out
	}
	if d := cmp.Diff([]int64{start.ID, preempt.ID, later.ID}, ids()); d != "" {
		t.Errorf("Unacked after reopening (-want +got):\n%s", d)
	}
	hist, err := s.PlanHistory(ctx, 9)
	if err != nil || len(hist) != 2 || hist[1].Tag != tag || hist[0].Tag != "" {
		t.Errorf("PlanHistory(9) = %+v, %v; want the second action with tag %q", hist, err, tag)
	}
	if err := s.Acked(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int64{start.ID}, ids()); d != "" {
		t.Errorf("Unacked after job 9's acknowledgement (-want +got):\n%s", d)
	}
}

// The restart count an action's requeue gives its job, and the tag it
// leaves, read back from Pending and Unacked, across a reopening; an
// unknown action or a count below 1 is refused, naming it. No tag keeps
// the one recorded.
func TestWillRequeue(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	s := openTest(t, path)
	preempt := decide(t, s).Actions[1]
	const counted = "rubick:v1 model=bert class=best-effort gen=1 ran=130"
	if err := s.WillRequeue(ctx, preempt.ID, 2, counted); err != nil {
		t.Fatal(err)
	}
	if err := s.WillRequeue(ctx, preempt.ID, 3, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.WillRequeue(ctx, 99, 1, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("WillRequeue(99) = %v, want ErrNotFound", err)
	}
	if err := s.WillRequeue(ctx, preempt.ID, 0, ""); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "restart count 0") {
		t.Errorf("WillRequeue(count 0) = %v, want ErrInvalid naming the count", err)
	}
	s.Close()
	s = openTest(t, path)
	count := func(as []Action) map[int64]int {
		out := map[int64]int{}
		for _, a := range as {
			out[a.ID] = a.RequeueCount
		}
		return out
	}
	pending, err := s.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[int64]int{preempt.ID - 1: 0, preempt.ID: 3}, count(pending)); d != "" {
		t.Errorf("Pending's requeue counts (-want +got):\n%s", d)
	}
	for _, a := range pending {
		if a.ID == preempt.ID && a.Tag != counted {
			t.Errorf("preemption's tag %q, want %q", a.Tag, counted)
		}
	}
	if err := s.MarkApplied(ctx, preempt.ID, ResultFailed, errors.New("annotate: exit status 1")); err != nil {
		t.Fatal(err)
	}
	if err := s.AwaitAck(ctx, preempt.ID, ""); err != nil {
		t.Fatal(err)
	}
	unacked, err := s.Unacked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[int64]int{preempt.ID: 3}, count(unacked)); d != "" {
		t.Errorf("Unacked's requeue counts (-want +got):\n%s", d)
	}
}

// Starts lists each job's starts with a tag, newest first, with the node
// list each sent (schema 11); other kinds, and starts without a tag, are
// left out.
func TestStarts(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "rubick.db"))
	decide(t, s) // job 7's start without a tag, job 9's preempt
	first := "rubick:v1 model=gpt2 class=guaranteed plan=dp4.tp1.pp1.mb2.a1.z0 gen=1 req=n1.g2.c8.m64000"
	second := "rubick:v1 model=gpt2 class=guaranteed plan=dp8.tp1.pp1.mb2.a1.z0 gen=1 req=n1.g8.c32.m147456 nl=node1"
	for _, a := range []Action{
		{JobID: 7, Kind: "start", Tag: first, Nodes: "node[1-2]"},
		{JobID: 7, Kind: "start", Tag: second},
		{JobID: 9, Kind: "restart", Tag: "rubick:v1 model=bert class=best-effort plan=dp4.tp1.pp1.mb2.a1.z0 gen=2", Nodes: "node3"},
	} {
		if _, err := s.RecordPlan(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Starts(ctx, []int64{7, 9, 11})
	if err != nil {
		t.Fatal(err)
	}
	type start struct{ Tag, Nodes string }
	summary := map[int64][]start{}
	for job, as := range got {
		for _, a := range as {
			summary[job] = append(summary[job], start{a.Tag, a.Nodes})
		}
	}
	if d := cmp.Diff(map[int64][]start{7: {{second, ""}, {first, "node[1-2]"}}}, summary); d != "" {
		t.Errorf("Starts (-want +got):\n%s", d)
	}
}

// Tagged lists each job's actions of the kinds asked for that have a tag,
// newest first, with their results; other kinds, and actions without a
// tag, are left out.
func TestTagged(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "rubick.db"))
	decide(t, s) // job 7's start without a tag, job 9's preempt
	start := "rubick:v1 model=gpt2 plan=dp4.tp1.pp1.mb2.a1.z0 gen=1 tl=60 ts=90"
	raise := "rubick:v1 model=gpt2 plan=dp4.tp1.pp1.mb2.a1.z0 gen=1 tl=60 ts=120"
	restart := "rubick:v1 model=bert plan=dp2.tp1.pp1.mb2.a1.z0 gen=2 ts=30"
	for _, a := range []struct {
		Action
		res Result
	}{
		{Action{JobID: 7, Kind: "start", Tag: start}, ResultOK},
		{Action{JobID: 7, Kind: "timelimit", Tag: raise}, ResultFailed},
		{Action{JobID: 7, Kind: "annotate", Tag: raise}, ResultOK},
		{Action{JobID: 9, Kind: "restart", Tag: restart}, ResultAbandoned},
		{Action{JobID: 9, Kind: "preempt", Tag: restart}, ResultOK},
	} {
		rec, err := s.RecordPlan(ctx, a.Action)
		if err != nil {
			t.Fatal(err)
		}
		var why error
		if a.res != ResultOK {
			why = errors.New("refused")
		}
		if err := s.MarkApplied(ctx, rec.ID, a.res, why); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Tagged(ctx, []string{"start", "restart", "timelimit"}, []int64{7, 9, 11})
	if err != nil {
		t.Fatal(err)
	}
	type tagged struct {
		Kind, Tag string
		Result    Result
	}
	summary := map[int64][]tagged{}
	for job, as := range got {
		for _, a := range as {
			summary[job] = append(summary[job], tagged{a.Kind, a.Tag, a.Result})
		}
	}
	want := map[int64][]tagged{
		7: {{"timelimit", raise, ResultFailed}, {"start", start, ResultOK}},
		9: {{"restart", restart, ResultAbandoned}},
	}
	if d := cmp.Diff(want, summary); d != "" {
		t.Errorf("Tagged (-want +got):\n%s", d)
	}
}

// Slurm gives old ids to new jobs after its state is reset: an upsert of
// a later submission under a stored job's id starts the row afresh, and
// LaunchLimits does not give the earlier job's report as the later one's
// own. The same submission (a requeue) or an unknown one keeps it all.
func TestUpsertJobAnotherSubmission(t *testing.T) {
	ctx := context.Background()
	sub := t0.Add(-time.Hour)
	waited := t0.Add(-30 * time.Minute)
	// kept is what the row holds of the job first stored.
	type kept struct {
		Submitted, FirstSeen, Deferred time.Time
		User                           string
		LastPlan                       model.Plan
		Cannot                         model.Features
		GlobalBatch                    int
		Own                            bool // LaunchLimits' report is its own
		LastRun                        Run
	}
	ran := Run{Restarts: 2, Time: 90 * time.Minute}
	old := kept{Submitted: sub, Deferred: waited, User: "alice", LastPlan: plan4, Cannot: model.FeatureTP, GlobalBatch: 64, Own: true, LastRun: ran}
	for name, tc := range map[string]struct {
		submitted time.Time
		reset     bool
	}{
		"requeue, same submission": {submitted: sub},
		"unknown submission":       {},
		"later submission":         {submitted: sub.Add(5 * time.Hour), reset: true},
	} {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, "")
			if err := s.UpsertModelType(ctx, gpt2()); err != nil {
				t.Fatal(err)
			}
			if err := s.UpsertJob(ctx, Job{ID: 4, ModelType: "gpt2", Class: BestEffort, State: "RUNNING", User: "alice",
				Submitted: sub, Deferred: waited, LastPlan: plan4, LastResources: res4, LastRun: ran}); err != nil {
				t.Fatal(err)
			}
			if err := s.SetJobLaunch(ctx, 4, "alice", Launch{Cannot: model.FeatureTP, GlobalBatch: 64}); err != nil {
				t.Fatal(err)
			}
			first, err := s.Job(ctx, 4)
			if err != nil {
				t.Fatal(err)
			}
			want := old
			want.FirstSeen = first.FirstSeen
			if tc.reset {
				// bob's job: alice's report is not even his guess.
				want = kept{Submitted: tc.submitted}
			}
			key := LaunchKey{ID: 4, User: "bob", ModelType: "gpt2", Submitted: tc.submitted}
			limits, err := s.LaunchLimits(ctx, []LaunchKey{key})
			if err != nil {
				t.Fatal(err)
			}
			// Its user not known yet.
			if err := s.UpsertJob(ctx, Job{ID: 4, ModelType: "gpt2", Class: BestEffort, State: "PENDING", Submitted: tc.submitted}); err != nil {
				t.Fatal(err)
			}
			j, err := s.Job(ctx, 4)
			if err != nil {
				t.Fatal(err)
			}
			if tc.reset {
				want.FirstSeen = j.Updated
			}
			got := kept{Submitted: j.Submitted, FirstSeen: j.FirstSeen, Deferred: j.Deferred, User: j.User, LastPlan: j.LastPlan,
				Cannot: j.Cannot, GlobalBatch: j.GlobalBatch, Own: limits[4].Own, LastRun: j.LastRun}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("job 4 after an upsert submitted at %v (-want +got):\n%s", tc.submitted, d)
			}
			if got := limits[4]; !tc.reset && got != (Launch{Cannot: model.FeatureTP, GlobalBatch: 64, Own: true}) {
				t.Errorf("LaunchLimits of job 4 before the upsert = %+v, want its own report", got)
			}
		})
	}
}
