package daemon

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func reported(sec float64, iter int, iterS float64) store.StoredSample {
	return store.StoredSample{ModelType: "bert", Sample: model.Sample{IterS: iterS}, SourceJob: 7,
		Source: store.SourceOnline, Created: at(sec), Iteration: iter}
}

func TestMeasureRestart(t *testing.T) {
	// Decided at 100 s, applied (released) at 130 s.
	restart := store.Action{ID: 3, JobID: 7, Kind: string(slurm.ActionRestart), DecidedAt: at(100), AppliedAt: at(130), Result: store.ResultOK}
	profile := reported(97, -1, 0.1)
	profile.Source, profile.Iteration = store.SourceProfile, -1
	for name, tc := range map[string]struct {
		prev, next time.Time
		samples    []store.StoredSample
		want       store.RestartCost
		err        error
	}{
		// 5 more iterations at 1 s before the stop, so 70-50-5 = 15 of the
		// new run's at 2 s by 160 s: 60 s - 30 s.
		"steady on both sides": {samples: []store.StoredSample{reported(90, 45, 1), reported(95, 50, 1), reported(110, 51, 1),
			reported(160, 70, 2), reported(162, 71, 2)},
			want: store.RestartCost{ActionID: 3, JobID: 7, ModelType: "bert", Cost: 30 * time.Second,
				Signaled: at(100), Resumed: at(160), BeforeIter: 50, AfterIter: 70}},
		"profile samples ignored": {samples: []store.StoredSample{reported(95, 50, 1), profile, reported(160, 70, 2)},
			want: store.RestartCost{ActionID: 3, JobID: 7, ModelType: "bert", Cost: 30 * time.Second,
				Signaled: at(100), Resumed: at(160), BeforeIter: 50, AfterIter: 70}},
		// The checkpoint lost the 5 iterations after the last sample: they
		// count as cost, at the new run's speed.
		"lost iterations": {samples: []store.StoredSample{reported(95, 50, 1), reported(160, 65, 2)},
			want: store.RestartCost{ActionID: 3, JobID: 7, ModelType: "bert", Cost: 40 * time.Second,
				Signaled: at(100), Resumed: at(160), BeforeIter: 50, AfterIter: 65}},
		"never negative": {samples: []store.StoredSample{reported(95, 50, 1), reported(160, 200, 2)},
			want: store.RestartCost{ActionID: 3, JobID: 7, ModelType: "bert", Cost: 0,
				Signaled: at(100), Resumed: at(160), BeforeIter: 50, AfterIter: 200}},
		"not reported yet":        {samples: []store.StoredSample{reported(95, 50, 1)}, err: errNoSampleAfter},
		"reported after the next": {next: at(150), samples: []store.StoredSample{reported(95, 50, 1), reported(160, 70, 2)}, err: errNoSampleAfter},
		"before from an older run": {prev: at(96), samples: []store.StoredSample{reported(95, 50, 1), reported(160, 70, 2)},
			err: errNoSampleBefore},
		"counter went back": {samples: []store.StoredSample{reported(95, 50, 1), reported(160, 12, 2)}, err: errCounterBack},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := MeasureRestart(restart, tc.prev, tc.next, tc.samples)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// A restart the daemon applied is measured once its job reports again, and
// the model type's restart cost becomes the median of its measurements;
// with measure_restart_cost off the configured cost stays.
func TestDaemonMeasuresRestartCosts(t *testing.T) {
	ctx := context.Background()
	st, now := clockStore(t, t0)
	spec := newnetSpec()
	if err := st.UpsertModelType(ctx, spec); err != nil {
		t.Fatal(err)
	}
	plan := model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1}
	smp := model.Sample{Plan: plan, Resources: model.Resources{Placement: model.Placement{2}, CPUs: 8}, IterS: 1}
	report := func(sec float64, job int64, iter int) {
		*now = at(sec)
		if err := st.AddReported(ctx, spec.Name, smp, job, iter); err != nil {
			t.Fatal(err)
		}
	}
	restart := func(sec, appliedSec float64, job int64) {
		*now = at(sec)
		a, err := st.RecordPlan(ctx, store.Action{JobID: job, Kind: string(slurm.ActionRestart), Plan: plan, Resources: smp.Resources})
		if err != nil {
			t.Fatal(err)
		}
		*now = at(appliedSec)
		if err := st.MarkApplied(ctx, a.ID, store.ResultOK, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []int64{1, 2, 3, 4} {
		if err := st.UpsertJob(ctx, store.Job{ID: id, ModelType: spec.Name, Class: store.BestEffort, State: "RUNNING"}); err != nil {
			t.Fatal(err)
		}
	}
	// Each job trains 5 iterations at 1 s after its last report before the
	// restart. Job 1: 30 s to its next report, 5 iterations of its own in
	// it: 25 s lost. Job 2: 60 s, 15 own: 45 s. Job 3: not reported yet.
	report(5, 1, 10)
	restart(10, 15, 1)
	report(40, 1, 20)
	report(15, 2, 20)
	restart(20, 30, 2)
	report(80, 2, 40)
	report(25, 3, 5)
	restart(30, 40, 3)
	// Job 4's trainer did not resume: its counter restarted from 0.
	report(50, 4, 100)
	restart(55, 60, 4)
	report(90, 4, 3)
	pol, err := policy.New("rubick", Defaults().Policy.Config())
	if err != nil {
		t.Fatal(err)
	}

	d, err := New(Defaults(), Deps{Cluster: &fakeCluster{}, Applier: &fakeApplier{}, Store: st, Policy: pol,
		Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.restartCosts(ctx, at(100), true); len(got) != 0 {
		t.Errorf("dry run measured %v", got)
	}
	want := map[string]time.Duration{spec.Name: 35 * time.Second} // median of 25 s and 45 s
	if d := cmp.Diff(want, d.restartCosts(ctx, at(100), false)); d != "" {
		t.Errorf("restart costs (-want +got):\n%s", d)
	}
	if len(d.unmeasurable) != 1 {
		t.Errorf("unmeasurable restarts %v, want job 4's", d.unmeasurable)
	}
	report(130, 3, 15) // 100 s, 5 own iterations: 95 s
	want[spec.Name] = 45 * time.Second
	if d := cmp.Diff(want, d.restartCosts(ctx, at(140), false)); d != "" {
		t.Errorf("restart costs after job 3 reported (-want +got):\n%s", d)
	}
	if got := gaugeValue(t, d.deps.Metrics, "rubick_restart_cost_seconds", spec.Name); got != 45 {
		t.Errorf("rubick_restart_cost_seconds{model_type=%q} = %v, want 45", spec.Name, got)
	}
	cs, err := st.RestartCosts(ctx, spec.Name, 0)
	if err != nil || len(cs) != 3 {
		t.Errorf("stored %d restart costs (%v), want 3", len(cs), err)
	}

	// A job is priced at its own restarts once it has two: job 2's second
	// restart, decided at 150 s, resumes at 200 s with 10 iterations of its
	// own (40 s); its median is 42.5 s, job 1 keeps the type's cost.
	jobs := []slurm.Job{
		{ID: 1, State: slurm.StateRunning, Tag: &slurm.Tag{ModelType: spec.Name}},
		{ID: 2, State: slurm.StateRunning, Tag: &slurm.Tag{ModelType: spec.Name}},
	}
	if facts, err := d.jobFacts(ctx, jobs); err != nil || len(facts) != 0 {
		t.Errorf("job facts with one restart each = %v, %v; want none", facts, err)
	}
	restart(150, 160, 2)
	report(200, 2, 120)
	d.restartCosts(ctx, at(210), false)
	facts, err := d.jobFacts(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[int]JobFacts{2: {RestartCost: 42500 * time.Millisecond}}, facts); d != "" {
		t.Errorf("job facts (-want +got):\n%s", d)
	}
	// Slurm gave id 2 to a job submitted after those restarts (its state
	// was reset): they are an earlier job's, and price nothing of this one.
	reused := slices.Clone(jobs)
	reused[1].SubmitTime = at(205)
	if facts, err := d.jobFacts(ctx, reused); err != nil || len(facts) != 0 {
		t.Errorf("job facts of a later job 2 = %v, %v; want none", facts, err)
	}

	// Reloaded with measure_restart_cost: false, every type is priced at
	// restart_cost, and the gauge, which shows what the policy prices,
	// drops the measured ones.
	off := Defaults()
	off.MeasureRestartCost = false
	if err := d.Reload(off, pol); err != nil {
		t.Fatal(err)
	}
	d.applyReload()
	if got := d.restartCosts(ctx, at(220), false); got != nil {
		t.Errorf("reloaded with measure_restart_cost off: %v, want none", got)
	}
	left := gauges(t, d.deps.Metrics, func(name string, l map[string]string) string {
		if name == "rubick_restart_cost_seconds" {
			return l["model_type"]
		}
		return ""
	})
	if diff := cmp.Diff(map[string]float64{}, left); diff != "" {
		t.Errorf("rubick_restart_cost_seconds after the reload (-want +got):\n%s", diff)
	}

	d2, err := New(off, Deps{Cluster: &fakeCluster{}, Applier: &fakeApplier{}, Store: st, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if got := d2.restartCosts(ctx, at(140), false); got != nil {
		t.Errorf("measure_restart_cost off: %v, want none", got)
	}
}

// shippedEstimators gives every shipped model type's estimator, fitted on
// its shipped profile.
func shippedEstimators(t *testing.T) Estimators {
	t.Helper()
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		t.Fatal(err)
	}
	fits, err := shippedFits()
	if err != nil {
		t.Fatal(err)
	}
	return func(mt string) (policy.Estimator, bool) {
		m, ok := set.Models[mt]
		if !ok {
			return nil, false
		}
		return policy.FromPredictor(model.Predictor{Spec: m.Spec, Params: fits[mt].Params, Env: model.DefaultEnv()}), true
	}
}

// A job's own restart cost, from the store's facts, reaches the snapshot.
func TestBuildViewPricesRestartsPerJob(t *testing.T) {
	est := shippedEstimators(t)
	jobs := []slurm.Job{heldJob(5, "bert", 1, 2), heldJob(6, "bert", 1, 2)}
	v, err := BuildView(Defaults(), t0, Inputs{Nodes: labNodes(1), Jobs: jobs, Estimators: est, Facts: map[int]JobFacts{5: {RestartCost: 7 * time.Second}}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]time.Duration{}
	for i := range v.Snapshot.Jobs {
		got[v.Snapshot.Jobs[i].ID] = v.Snapshot.JobRestartCost(&v.Snapshot.Jobs[i])
	}
	if d := cmp.Diff(map[string]time.Duration{"5": 7 * time.Second, "6": Defaults().RestartCost}, got); d != "" {
		t.Errorf("restart cost per job (-want +got):\n%s", d)
	}
}

// A pending job whose batch script is still to be read waits for it,
// unplanned; a running one is planned all the same.
func TestBuildViewWaitsForUnreadScripts(t *testing.T) {
	running := heldJob(6, "bert", 1, 2)
	running.Held, running.State, running.NodeList, running.StartTime = false, slurm.StateRunning, []string{"node1"}, t0.Add(-time.Hour)
	jobs := []slurm.Job{heldJob(5, "bert", 1, 2), running, heldJob(7, "bert", 1, 2)}
	facts := map[int]JobFacts{5: {ScriptUnread: true}, 6: {ScriptUnread: true}}
	v, err := BuildView(Defaults(), t0, Inputs{Nodes: labNodes(1), Jobs: jobs, Estimators: shippedEstimators(t), Facts: facts}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var planned []string
	for _, j := range v.Snapshot.Jobs {
		planned = append(planned, j.ID)
	}
	if diff := cmp.Diff([]string{"6", "7"}, planned, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("jobs planned (-want +got):\n%s", diff)
	}
	want := map[int]string{5: "its batch script is read in a coming cycle, this one's reads spent; planned then, on a plan its launch line can run"}
	if diff := cmp.Diff(want, v.Unmanaged); diff != "" {
		t.Errorf("unmanaged (-want +got):\n%s", diff)
	}
}

func TestBuildViewPricesRestartsPerModelType(t *testing.T) {
	none := func(string) (policy.Estimator, bool) { return nil, false }
	v, err := BuildView(Defaults(), t0, Inputs{Nodes: labNodes(1), Estimators: none, RestartCosts: map[string]time.Duration{"bert": 5 * time.Second}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Snapshot.RestartCostOf("bert"); got != 5*time.Second {
		t.Errorf("bert restart cost %v, want the measured 5s", got)
	}
	if got := v.Snapshot.RestartCostOf("gpt2"); got != Defaults().RestartCost {
		t.Errorf("gpt2 restart cost %v, want restart_cost %v", got, Defaults().RestartCost)
	}
}

func TestRestartCostOf(t *testing.T) {
	cs := func(secs ...int) []store.RestartCost {
		var out []store.RestartCost
		for _, s := range secs {
			out = append(out, store.RestartCost{Cost: time.Duration(s) * time.Second})
		}
		return out
	}
	for name, tc := range map[string]struct {
		newestFirst []store.RestartCost
		want        time.Duration
	}{
		"none":                {nil, 0},
		"one":                 {cs(7), 7 * time.Second},
		"even count":          {cs(10, 30, 20, 40), 25 * time.Second},
		"newest five only":    {cs(1, 2, 3, 4, 5, 1000, 1000, 1000), 3 * time.Second},
		"outlier in the five": {cs(300, 10, 11, 12, 13), 12 * time.Second},
	} {
		if got := RestartCostOf(tc.newestFirst); got != tc.want {
			t.Errorf("%s: RestartCostOf = %v, want %v", name, got, tc.want)
		}
	}
}

// gaugeValue reads the gauge name{model_type=label} from m's registry.
func gaugeValue(t *testing.T, m *Metrics, name, label string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "model_type" && l.GetValue() == label {
					return mt.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{model_type=%q}", name, label)
	return 0
}
