package daemon

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
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

// A running job whose tag names no plan (started on its request while its
// model type had no fit) is priced at the plan its newest report on its
// current run names; with none, a report of other GPUs, or while it
// profiles (its reports are its phase's runs), at the best plan for what
// it holds.
func TestCyclePricesUntaggedJobsAtTheirReportedPlan(t *testing.T) {
	e, res, best, other := bertOn4(t)
	onTwo := model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1}
	tagged := model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 4, Accum: 2}
	if tagged == best || tagged == other {
		t.Fatalf("the tag's plan %s is one the test reports", tagged)
	}
	tests := map[string]struct {
		reports   []model.Plan // oldest first
		earlier   bool         // they are of an earlier run
		profiling bool         // the job's tag has profile=1
		tag       model.Plan   // the tag's plan; zero: none
		want      model.Plan
	}{
		"reported":         {reports: []model.Plan{other}, want: other},
		"newest reported":  {reports: []model.Plan{best, other}, want: other},
		"none reported":    {want: best},
		"an earlier run's": {reports: []model.Plan{other}, earlier: true, want: best},
		"of other GPUs":    {reports: []model.Plan{onTwo}, want: best},
		"profiling":        {reports: []model.Plan{other}, profiling: true, want: best},
		"tag's plan":       {reports: []model.Plan{other}, tag: tagged, want: tagged},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := runningJob(5, "bert")
			j.NodeList, j.GPUs, j.Tag.Generation = []string{"node1"}, 4, 1
			j.StartTime, j.TimeLimit = t0.Add(-10*time.Minute), time.Hour
			if tc.earlier {
				j.StartTime = t0.Add(time.Second) // the store's clock stamps them at t0
			}
			if tc.profiling {
				j.Tag.Extra = map[string]string{tagProfile: "1"}
			}
			if tc.tag != (model.Plan{}) {
				j.Tag.Plan = tc.tag.String()
			}
			nodes := labNodes(1)
			nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
			d, st := newTestDaemonWith(t, &fakeCluster{nodes: nodes, jobs: []slurm.Job{j}}, &fakeApplier{}, func(*Config) {})
			got := runningPlans{}
			d.deps.Policy = got
			for i, p := range tc.reports {
				r := res
				r.Placement = model.Placement{p.GPUs()}
				b, err := e.Predict(p, r)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.AddReported(context.Background(), "bert", model.Sample{Plan: p, Resources: r, IterS: b.Iter}, 5, 10*i); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := d.Cycle(context.Background(), false); err != nil {
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
// its model type's), and without what its launch line cannot run.
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
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: []slurm.Job{j}, Estimators: shippedEstimators(t),
				Facts: map[int]JobFacts{5: tc.facts}}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, snapshotJob(v, "5").Plan); diff != "" {
				t.Errorf("job 5's plan in the snapshot (-want +got):\n%s", diff)
			}
		})
	}
}
