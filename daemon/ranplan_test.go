package daemon

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// runningPlans is a Policy that plans nothing and records the plan the
// snapshot gives each running job.
type runningPlans map[string]model.Plan

func (runningPlans) Name() string { return "running-plans" }
func (p runningPlans) Decide(_ context.Context, s *policy.Snapshot) (policy.Plan, error) {
	for _, j := range s.Jobs {
		if len(j.Alloc) > 0 {
			p[j.ID] = j.Plan
		}
	}
	return policy.Plan{}, nil
}

// bertOn4 is bert's estimator, one node of 4 GPUs and 8 CPUs, bert's best
// plan there, and another plan it can run there, with TP: a job started
// on its request trains on whichever its launch line states.
func bertOn4(t *testing.T) (e policy.Estimator, res model.Resources, best, other model.Plan) {
	t.Helper()
	e, _ = shippedEstimators(t)("bert")
	res = model.Resources{Placement: model.Placement{4}, CPUs: 8}
	best, _, err := e.BestPlan(res, nil)
	if err != nil {
		t.Fatal(err)
	}
	other = model.Plan{DP: 2, TP: 2, PP: 1, MicroBatch: 16, Accum: 1}
	if other == best {
		t.Fatalf("%s is bert's best plan on 4 GPUs: the test tells nothing", other)
	}
	if _, err := e.Predict(other, res); err != nil {
		t.Fatal(err)
	}
	return e, res, best, other
}

// A running job is priced at the plan its newest report on its current
// training run names where that differs from its tag's: its tag names none
// (started on its request while its model type had no fit), or its plan
// came after its rubick-srun stopped waiting for one and it trains on its
// line as it is. With no report, one of an earlier run or of other GPUs,
// or while it profiles (its reports are its phase's runs), it is priced at
// its tag's plan, else the best plan for what it holds; a profiling phase
// on its current run counts only the reports after the phase's notice.
func TestCyclePricesRunningJobsAtTheirReportedPlan(t *testing.T) {
	e, res, best, other := bertOn4(t)
	onTwo := model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1}
	tagged := model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 4, Accum: 2}
	if tagged == best || tagged == other {
		t.Fatalf("the tag's plan %s is one the test reports", tagged)
	}
	tests := map[string]struct {
		phase     []model.Plan // a profiling phase's runs, then its notice
		reports   []model.Plan // oldest first, after any phase
		earlier   bool         // they are of an earlier run
		profiling bool         // the job's tag has profile=1
		tag       model.Plan   // the tag's plan; zero: none
		want      model.Plan
	}{
		"reported":                            {reports: []model.Plan{other}, want: other},
		"newest reported":                     {reports: []model.Plan{best, other}, want: other},
		"none reported":                       {want: best},
		"an earlier run's":                    {reports: []model.Plan{other}, earlier: true, want: best},
		"of other GPUs":                       {reports: []model.Plan{onTwo}, want: best},
		"profiling":                           {reports: []model.Plan{other}, profiling: true, want: best},
		"only the phase's":                    {phase: []model.Plan{best, other}, want: best},
		"tag's plan, another reported":        {tag: tagged, reports: []model.Plan{other}, want: other},
		"tag's plan reported":                 {tag: tagged, reports: []model.Plan{other, tagged}, want: tagged},
		"tag's plan, none reported":           {tag: tagged, want: tagged},
		"tag's plan, an earlier run's":        {tag: tagged, reports: []model.Plan{other}, earlier: true, want: tagged},
		"tag's plan, of other GPUs":           {tag: tagged, reports: []model.Plan{onTwo}, want: tagged},
		"tag's plan, only the phase's":        {tag: tagged, phase: []model.Plan{best, other}, want: tagged},
		"tag's plan, trained after its phase": {tag: tagged, phase: []model.Plan{other}, reports: []model.Plan{best}, want: best},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := runningJob(5, "bert")
			j.NodeList, j.GPUs, j.Tag.Generation = []string{"node1"}, 4, 1
			j.StartTime, j.TimeLimit = t0.Add(-10*time.Minute), time.Hour
			if tc.earlier {
				j.StartTime = t0 // after every report
			}
			if tc.profiling {
				j.Tag.Extra = map[string]string{tagProfile: "1"}
			}
			if tc.tag != (model.Plan{}) {
				j.Tag.Plan = tc.tag.String()
			}
			nodes := labNodes(1)
			nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
			// The store stamps each report and the phase's notice a second
			// after the last, from 5 min before t0.
			at := t0.Add(-5 * time.Minute)
			d, st := newTestDaemonClock(t, &fakeCluster{nodes: nodes, jobs: []slurm.Job{j}}, &fakeApplier{}, func(*Config) {},
				func() time.Time { return at }, filepath.Join(t.TempDir(), "rubick.db"))
			got := runningPlans{}
			d.deps.Policy = got
			ctx := context.Background()
			report := func(p model.Plan, i int) {
				t.Helper()
				r := res
				r.Placement = model.Placement{p.GPUs()}
				b, err := e.Predict(p, r)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.AddReported(ctx, "bert", model.Sample{Plan: p, Resources: r, IterS: b.Iter}, 5, 10*i); err != nil {
					t.Fatal(err)
				}
				at = at.Add(time.Second)
			}
			for i, p := range tc.phase {
				report(p, i)
			}
			if tc.phase != nil {
				if err := st.UpsertJob(ctx, store.Job{ID: 5, ModelType: "bert", Class: store.BestEffort, State: "RUNNING"}); err != nil {
					t.Fatal(err)
				}
				if err := st.SetJobLaunch(ctx, 5, "alice", store.Launch{GlobalBatch: e.Spec().GlobalBatch, Profiled: "bert"}); err != nil {
					t.Fatal(err)
				}
				at = at.Add(time.Second)
			}
			for i, p := range tc.reports {
				report(p, len(tc.phase)+i)
			}
			if _, err := d.Cycle(ctx, false); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(runningPlans{"5": tc.want}, got); diff != "" {
				t.Errorf("running jobs' plans in the snapshot (-want +got):\n%s", diff)
			}
		})
	}
}

// A reported plan prices the job only where it can be what the job runs:
// on the GPUs it holds, at the global batch it trains with (its own, else
// its model type's), and without what its launch line cannot run. Its
// reported speed, of that plan, counts only where it does.
func TestBuildViewChecksReportedPlan(t *testing.T) {
	e, res, best, other := bertOn4(t)
	gb := e.Spec().GlobalBatch
	if other.DP*other.MicroBatch*other.Accum != gb {
		t.Fatalf("%s is not at bert's global batch %d", other, gb)
	}
	double := other
	double.Accum *= 2 // at twice the global batch
	twice, _ := policy.Rebatch(e, 2*gb)
	bestTwice, _, err := twice.BestPlan(res, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		facts JobFacts
		want  model.Plan
	}{
		"reported":               {facts: JobFacts{RanPlan: other}, want: other},
		"at its own batch":       {facts: JobFacts{RanPlan: double, GlobalBatch: 2 * gb}, want: double},
		"of other GPUs":          {facts: JobFacts{RanPlan: model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1}}, want: best},
		"of another batch":       {facts: JobFacts{RanPlan: double}, want: best},
		"of the type's batch":    {facts: JobFacts{RanPlan: other, GlobalBatch: 2 * gb}, want: bestTwice},
		"its line cannot run it": {facts: JobFacts{RanPlan: other, Cannot: model.FeatureTP}, want: best},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := runningJob(5, "bert")
			j.NodeList, j.GPUs = []string{"node1"}, 4
			j.StartTime = t0.Add(-10 * time.Minute)
			nodes := labNodes(1)
			nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
			tc.facts.IterS = 2
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: []slurm.Job{j}, Estimators: shippedEstimators(t),
				Facts: map[int]JobFacts{5: tc.facts}}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, snapshotJob(v, "5").Plan); diff != "" {
				t.Errorf("job 5's plan in the snapshot (-want +got):\n%s", diff)
			}
			if got, want := v.managed["5"].time.measured > 0, tc.want == tc.facts.RanPlan; got != want {
				t.Errorf("job 5 priced at its reported speed: %t, want %t", got, want)
			}
		})
	}
}

// jobFacts reads a running job's training run from its newest reports:
// the plan the newest names (RanPlan) and, where its time limit may
// stretch, the median iteration time of that plan's reports (IterS), with
// minRunSamples of them; a plan in its tag or not. A profiling phase on
// its current run counts only the reports after the phase's notice; a
// profiling job's are its phase's.
func TestJobFactsReadTheTrainingRun(t *testing.T) {
	_, res, best, other := bertOn4(t)
	type smp struct {
		plan  model.Plan
		iterS float64
	}
	type run struct {
		Plan  model.Plan
		IterS float64
	}
	three := []smp{{other, 3}, {other, 1}, {other, 2}}
	tests := map[string]struct {
		phase     []smp // a profiling phase's runs, then its notice
		reports   []smp // oldest first, after any phase
		tag       model.Plan
		profiling bool
		off       bool // time limits do not stretch
		noLimit   bool // the job has no time limit
		// The phases' ends cannot be read: only reports of the tag's
		// plan are sure to be of the training run.
		phasesUnread bool
		want         run
	}{
		"no plan in its tag":      {reports: three, want: run{other, 2}},
		"another plan in its tag": {tag: best, reports: append([]smp{{best, 9}, {best, 9}}, three...), want: run{other, 2}},
		"its tag's plan":          {tag: other, reports: three, want: run{other, 2}},
		"fewer than three":        {reports: three[:2], want: run{Plan: other}},
		"after its phase":         {tag: best, phase: three, reports: []smp{{other, 5}, {other, 7}}, want: run{Plan: other}},
		"only its phase's":        {tag: best, phase: three},
		"phases unread":           {tag: best, phase: three, phasesUnread: true},
		"phases unread, its tag's plan reported": {tag: best, phase: three, reports: []smp{{best, 4}, {best, 6}, {best, 5}},
			phasesUnread: true, want: run{best, 5}},
		"profiling":     {reports: three, profiling: true},
		"stretch off":   {reports: three, off: true, want: run{Plan: other}},
		"no time limit": {reports: three, noLimit: true, want: run{Plan: other}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := runningJob(5, "bert")
			j.NodeList, j.GPUs, j.Tag.Generation = []string{"node1"}, 4, 1
			j.StartTime, j.TimeLimit = t0.Add(-10*time.Minute), time.Hour
			if tc.noLimit {
				j.TimeLimit = 0
			}
			if tc.profiling {
				j.Tag.Extra = map[string]string{tagProfile: "1"}
			}
			if tc.tag != (model.Plan{}) {
				j.Tag.Plan = tc.tag.String()
			}
			at := t0.Add(-5 * time.Minute)
			path := filepath.Join(t.TempDir(), "rubick.db")
			d, st := newTestDaemonClock(t, &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}, &fakeApplier{},
				func(cfg *Config) { cfg.TimeLimits.Stretch = !tc.off }, func() time.Time { return at }, path)
			ctx := context.Background()
			if err := st.UpsertJob(ctx, store.Job{ID: 5, ModelType: "bert", Class: store.BestEffort, State: "RUNNING"}); err != nil {
				t.Fatal(err)
			}
			report := func(s smp, i int) {
				t.Helper()
				if err := st.AddReported(ctx, "bert", model.Sample{Plan: s.plan, Resources: res, IterS: s.iterS}, 5, 10*i); err != nil {
					t.Fatal(err)
				}
				at = at.Add(time.Second)
			}
			for i, s := range tc.phase {
				report(s, i)
			}
			if tc.phase != nil {
				if err := st.SetJobLaunch(ctx, 5, "alice", store.Launch{GlobalBatch: 32, Profiled: "bert"}); err != nil {
					t.Fatal(err)
				}
				at = at.Add(time.Second)
			}
			for i, s := range tc.reports {
				report(s, len(tc.phase)+i)
			}
			if tc.phasesUnread {
				db, err := sql.Open("sqlite3", path)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if _, err := db.Exec(`DROP TABLE profiling_phases`); err != nil {
					t.Fatal(err)
				}
			}
			facts, err := d.jobFacts(ctx, []slurm.Job{j})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, run{facts[5].RanPlan, facts[5].IterS}); diff != "" {
				t.Errorf("job 5's training run (-want +got):\n%s", diff)
			}
		})
	}
}
