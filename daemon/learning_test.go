package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// clockStore opens a store in t's temporary directory whose clock reads
// the returned time, starting at start; the store closes when t ends.
func clockStore(t *testing.T, start time.Time) (*store.Store, *time.Time) {
	t.Helper()
	now := start
	return openClockStore(t, filepath.Join(t.TempDir(), "rubick.db"), &now), &now
}

// openClockStore opens the store at path, whose clock reads *now; it
// closes when t ends.
func openClockStore(t *testing.T, path string, now *time.Time) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), path, store.WithClock(func() time.Time { return *now }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newLearner(t *testing.T, jobs ...slurm.Job) (*Learner, *store.Store, *time.Time) {
	t.Helper()
	st, now := clockStore(t, t0)
	return learnerOn(st, jobs...), st, now
}

// learnerOn is a Learner over st, as rubickd starts one, for a cluster
// running jobs, whose user alice has UID 1000.
func learnerOn(st LearnStore, jobs ...slurm.Job) *Learner {
	return &Learner{Store: st, Cluster: &fakeCluster{jobs: jobs}, Env: model.DefaultEnv(), Threshold: 0.1,
		LookupUID: func(name string) (uint32, error) {
			if name == "alice" {
				return 1000, nil
			}
			return 0, errors.New("unknown user " + name)
		}}
}

func runningJob(id int, modelType string) slurm.Job {
	j := heldJob(id, modelType, 1, 4)
	j.State, j.User, j.Held = slurm.StateRunning, "alice", false
	return j
}

// measuringJob runs on 4 nodes of 8 GPUs with CPUs to spare: every sample
// of the learning tests fits in it (ranOn).
func measuringJob(id int, modelType string) slurm.Job {
	j := heldJob(id, modelType, 4, 8)
	j.State, j.User, j.Held, j.CPUs = slurm.StateRunning, "alice", false, 1024
	return j
}

func TestAcceptChecksOwnerModelAndJob(t *testing.T) {
	small := runningJob(6, "bert") // 1 node of 4 GPUs, 8 CPUs
	pending := heldJob(7, "bert", 1, 4)
	pending.User = "alice"
	requeued := pending
	requeued.ID, requeued.RestartCount = 8, 1
	l, st, _ := newLearner(t, measuringJob(5, "bert"), small, pending, requeued)
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertModelType(context.Background(), set.Models["bert"].Spec); err != nil {
		t.Fatal(err)
	}
	fits, err := shippedFits()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddFit(context.Background(), "bert", fits["bert"], store.SourceProfile); err != nil {
		t.Fatal(err)
	}
	good := report.Sample{Version: report.SampleVersion, JobID: "5", ModelType: "bert", Plan: "dp4.tp1.pp1.mb8.a1.z0", Placement: "4", CPUs: 16, Iteration: ptr(3), IterS: 0.2}
	tests := map[string]struct {
		uid     uint32
		mutate  func(*report.Sample)
		wantErr error
		field   string // the error names it
	}{
		"owner":         {uid: 1000},
		"root":          {uid: 0},
		"no step count": {uid: 1000, mutate: func(s *report.Sample) { s.Iteration = nil }},
		"other user":    {uid: 1001, wantErr: report.ErrNotOwner},
		"unknown job":   {uid: 1000, mutate: func(s *report.Sample) { s.JobID = "99" }, wantErr: report.ErrBadSample},
		"bad job id":    {uid: 1000, mutate: func(s *report.Sample) { s.JobID = "5; rm -rf /" }, wantErr: report.ErrBadSample},
		"wrong model":   {uid: 1000, mutate: func(s *report.Sample) { s.ModelType = "gpt2" }, wantErr: report.ErrBadSample},
		"bad iteration": {uid: 1000, mutate: func(s *report.Sample) { s.IterS = -1 }, wantErr: report.ErrBadSample},
		// bert's global batch is 32; a job whose launch line trains with 16
		// is priced at its own.
		"own global batch": {uid: 1000, mutate: func(s *report.Sample) { s.Plan = "dp4.tp1.pp1.mb4.a1.z0"; s.IterS = 0.1 }},
		// A plan of 4 GPUs cannot have run on 2.
		"unpriceable plan": {uid: 1000, mutate: func(s *report.Sample) { s.Placement = "2" }, wantErr: report.ErrBadSample, field: "dp4.tp1.pp1.mb8.a1.z0"},
		// Milliseconds reported as seconds: 1000x the fit's prediction.
		"absurd time":  {uid: 1000, mutate: func(s *report.Sample) { s.IterS = 200 }, wantErr: report.ErrBadSample, field: "iter_s=200"},
		"fast by 100x": {uid: 1000, mutate: func(s *report.Sample) { s.IterS = 0.002 }, wantErr: report.ErrBadSample, field: "iter_s=0.002"},
		// Only what the job holds, and only once it has run.
		"never ran":            {uid: 1000, mutate: func(s *report.Sample) { s.JobID = "7" }, wantErr: report.ErrBadSample, field: "PENDING and has not run"},
		"requeued after a run": {uid: 1000, mutate: func(s *report.Sample) { s.JobID, s.CPUs = "8", 8 }},
		// Its pending sizes are not those it ran on (here 8 CPUs).
		"requeued, more than its pending request": {uid: 1000, mutate: func(s *report.Sample) { s.JobID = "8" }},
		"more nodes": {uid: 1000, mutate: func(s *report.Sample) { s.JobID, s.Placement, s.CPUs = "6", "22", 8 }, wantErr: report.ErrBadSample,
			field: "placement 22 spans 2 nodes, the job has 1"},
		"more GPUs a node": {uid: 1000, mutate: func(s *report.Sample) { s.JobID, s.Plan, s.Placement, s.CPUs = "6", "dp8.tp1.pp1.mb4.a1.z0", "8", 8 },
			wantErr: report.ErrBadSample, field: "uses 8 GPUs on a node, the job has 4"},
		"more CPUs": {uid: 1000, mutate: func(s *report.Sample) { s.JobID = "6" }, wantErr: report.ErrBadSample, field: "cpus=16, the job has 8"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := good
			if tc.mutate != nil {
				tc.mutate(&s)
			}
			err := l.Accept(context.Background(), tc.uid, s)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Accept = %v, want %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Accept = %v, want it to name %s", err, tc.field)
			}
		})
	}
	got, err := st.Samples(context.Background(), "bert")
	if err != nil || len(got) != 6 {
		t.Fatalf("stored samples = %d (%v), want the 6 accepted", len(got), err)
	}
	var iters []int
	for _, g := range got {
		iters = append(iters, g.Iteration)
	}
	slices.Sort(iters)
	if d := cmp.Diff([]int{-1, 3, 3, 3, 3, 3}, iters); d != "" {
		t.Errorf("stored iterations (-want +got):\n%s", d)
	}
}

func ptr[T any](v T) *T { return &v }

// samplesOf measures the plans of a hidden "true" model on one node.
func samplesOf(p model.Predictor, scale float64) []report.Sample {
	var out []report.Sample
	for _, g := range []int{1, 2, 4, 8} {
		for _, off := range []bool{false, true} {
			pl := model.Placement{g}
			plan := model.Plan{DP: g, TP: 1, PP: 1, MicroBatch: p.Spec.GlobalBatch / g, Accum: 1}
			cpus := 4 * g
			if off {
				plan.ZeRO, plan.Offload = 2, true
			}
			b, err := p.Predict(plan, model.Resources{Placement: pl, CPUs: cpus})
			if err != nil {
				continue
			}
			out = append(out, report.Sample{Version: report.SampleVersion, JobID: "5", ModelType: p.Spec.Name,
				Plan: plan.String(), Placement: pl.String(), CPUs: cpus, Iteration: ptr(2), IterS: b.Iter * scale})
		}
	}
	return out
}

// newnetLearner is a learner for job 5 of the registered, unfitted model
// type newnet, and the samples of newnet's true model (the priors) on one
// node.
func newnetLearner(t *testing.T) (*Learner, *store.Store, *time.Time, model.Predictor, []report.Sample) {
	t.Helper()
	l, st, now := newLearner(t, measuringJob(5, "newnet"))
	spec := newnetSpec()
	if err := st.UpsertModelType(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	truth := model.Predictor{Spec: spec, Params: model.Priors(), Env: model.DefaultEnv()}
	samples := samplesOf(truth, 1)
	if len(samples) < 7 {
		t.Fatalf("only %d samples generated", len(samples))
	}
	return l, st, now, truth, samples
}

// A model type without a fit waits for seven configurations, not seven
// reports: a profiling run reports every iteration.
func TestFirstFitCountsConfigurations(t *testing.T) {
	ctx := context.Background()
	l, _, _, _, samples := newnetLearner(t)
	// Six configurations, four reports each.
	for _, s := range samples[:6] {
		for it := range 4 {
			s.Iteration = ptr(2 + it)
			if err := l.Accept(ctx, 1000, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if refitted, err := l.Refit(ctx); err != nil || len(refitted) != 0 {
		t.Fatalf("Refit = %v, %v; want no fit from 24 reports of 6 configurations", refitted, err)
	}
	if err := l.Accept(ctx, 1000, samples[6]); err != nil {
		t.Fatal(err)
	}
	if refitted, err := l.Refit(ctx); err != nil || len(refitted) != 1 {
		t.Fatalf("Refit = %v, %v; want a fit once a seventh configuration reported", refitted, err)
	}
}

// A first fit that puts its spec in doubt (model.FitResult.Doubts) is
// warned of: newnet's samples measured with a forward time a quarter of
// what its registered spec says.
func TestFirstFitDoubted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		scale float64 // of the registered forward_ms_1gpu
		want  string
	}{
		{"right spec", 1, ""},
		{"forward time too long", 4, "forward_ms_1gpu=1200 is likely too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l, st, _ := newLearner(t, measuringJob(5, "newnet"))
			var logs bytes.Buffer
			l.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			spec := newnetSpec()
			spec.ForwardMs *= tc.scale
			if err := st.UpsertModelType(ctx, spec); err != nil {
				t.Fatal(err)
			}
			for _, s := range samplesOf(model.Predictor{Spec: newnetSpec(), Params: model.Priors(), Env: model.DefaultEnv()}, 1) {
				if err := l.Accept(ctx, 1000, s); err != nil {
					t.Fatal(err)
				}
			}
			if refitted, err := l.Refit(ctx); err != nil || len(refitted) != 1 {
				t.Fatalf("Refit = %v, %v; want newnet fitted", refitted, err)
			}
			warned := strings.Contains(logs.String(), "level=WARN msg=\"the current fit of a model type explains its samples poorly")
			if warned != (tc.want != "") || !strings.Contains(logs.String(), tc.want) {
				t.Errorf("warned %v, want %q in the log:\n%s", warned, tc.want, logs.String())
			}
		})
	}
}

func TestRefitNewModelTypeAndDrift(t *testing.T) {
	ctx := context.Background()
	l, st, now, truth, samples := newnetLearner(t)
	for _, s := range samples {
		if err := l.Accept(ctx, 1000, s); err != nil {
			t.Fatal(err)
		}
	}
	refitted, err := l.Refit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(refitted) != 1 {
		t.Fatalf("refitted %v, want newnet fitted from its samples", refitted)
	}
	if ok, _ := st.HasFit(ctx, "newnet"); !ok {
		t.Fatal("no fit stored")
	}
	// Samples the fit predicts well: no refit.
	*now = now.Add(time.Hour)
	for _, s := range samplesOf(truth, 1.02)[:3] {
		if err := l.Accept(ctx, 1000, s); err != nil {
			t.Fatal(err)
		}
	}
	if refitted, err := l.Refit(ctx); err != nil || len(refitted) != 0 {
		t.Fatalf("refit after accurate samples = %v, %v; want none", refitted, err)
	}
	// The job runs 40 % slower than predicted: refit, and every fit is kept.
	*now = now.Add(time.Hour)
	for _, s := range samplesOf(truth, 1.4) {
		if err := l.Accept(ctx, 1000, s); err != nil {
			t.Fatal(err)
		}
	}
	if refitted, err := l.Refit(ctx); err != nil || len(refitted) != 1 {
		t.Fatalf("refit after drift = %v, %v; want newnet", refitted, err)
	}
	fits, err := st.Fits(ctx, "newnet")
	if err != nil || len(fits) != 2 {
		t.Fatalf("fits = %d, %v; want both kept", len(fits), err)
	}
	// The refit is current (its RMSLE over every sample is higher than the
	// first fit's over its own, so the store alone would not have chosen
	// it) and prices the drifted job.
	cur, err := st.CurrentFit(ctx, "newnet")
	if err != nil || cur.ID != fits[1].ID {
		t.Fatalf("current fit = %d (%v), want the refit %d", cur.ID, err, fits[1].ID)
	}
	if cur.RMSLE <= fits[0].RMSLE {
		t.Errorf("refit RMSLE %v <= first fit's %v: the promotion rule was not exercised", cur.RMSLE, fits[0].RMSLE)
	}
	last := samplesOf(truth, 1.4)
	drifted, err := report.Sample.ModelSample(last[len(last)-1])
	if err != nil {
		t.Fatal(err)
	}
	b, err := model.Predictor{Spec: truth.Spec, Params: cur.Params, Env: model.DefaultEnv()}.Predict(drifted.Plan, drifted.Resources)
	if err != nil {
		t.Fatal(err)
	}
	// The first fit is 1 - 1/1.4 = 29 % off; the refit must halve that (a
	// uniform slowdown is not exactly expressible: the forward time is the
	// spec's).
	if e := math.Abs(b.Iter/drifted.IterS - 1); e > 0.5*(1-1/1.4) {
		t.Errorf("refit predicts %.3f s for a %.3f s sample (%.0f %% off)", b.Iter, drifted.IterS, 100*e)
	}
}

// newnetSpec is a BERT-large-like model type the shipped data does not know.
func newnetSpec() model.Spec {
	return model.Spec{Name: "newnet", Params: 350e6, Layers: 24, Hidden: 1024, Heads: 16, SeqLen: 1024, GlobalBatch: 32, ForwardMs: 300}
}

// seedFit stores spec with a fit on truth's single-node samples, as a
// profiled model type starts out.
func seedFit(t *testing.T, l *Learner, st *store.Store, spec model.Spec, truth model.Predictor) {
	t.Helper()
	ctx := context.Background()
	if err := st.UpsertModelType(ctx, spec); err != nil {
		t.Fatal(err)
	}
	for _, s := range samplesOf(truth, 1) {
		if err := l.Accept(ctx, 1000, s); err != nil {
			t.Fatal(err)
		}
	}
	if refitted, err := l.Refit(ctx); err != nil || len(refitted) != 1 {
		t.Fatalf("first fit = %v, %v", refitted, err)
	}
}

// multiNode is the sample of a data-parallel plan on placement pl, its
// iteration time scale times truth's.
func multiNode(t *testing.T, truth model.Predictor, pl model.Placement, scale float64) report.Sample {
	t.Helper()
	g := pl.GPUs()
	plan := model.Plan{DP: g, TP: 1, PP: 1, MicroBatch: truth.Spec.GlobalBatch / g, Accum: 1}
	b, err := truth.Predict(plan, model.Resources{Placement: pl, CPUs: 4 * g})
	if err != nil {
		t.Fatal(err)
	}
	return report.Sample{Version: report.SampleVersion, JobID: "5", ModelType: truth.Spec.Name,
		Plan: plan.String(), Placement: pl.String(), CPUs: 4 * g, Iteration: ptr(2), IterS: b.Iter * scale}
}

func TestRefitNeedsTwoConfigurationsAndNewEvidence(t *testing.T) {
	ctx := context.Background()
	l, st, now := newLearner(t, measuringJob(5, "newnet"))
	spec := newnetSpec()
	truth := model.Predictor{Spec: spec, Params: model.Priors(), Env: model.DefaultEnv()}
	seedFit(t, l, st, spec, truth)
	// Cross-node runs 30 % slower than the single-node fit predicts: a
	// systematic error a refit can learn.
	step := func(pl model.Placement, reports int) []string {
		t.Helper()
		*now = now.Add(time.Minute)
		for range reports {
			if err := l.Accept(ctx, 1000, multiNode(t, truth, pl, 1.3)); err != nil {
				t.Fatal(err)
			}
		}
		refitted, err := l.Refit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return refitted
	}
	fits := func() int {
		t.Helper()
		f, err := st.Fits(ctx, "newnet")
		if err != nil {
			t.Fatal(err)
		}
		return len(f)
	}
	if got := step(model.Placement{4, 4}, 5); len(got) != 0 || fits() != 1 {
		t.Fatalf("one configuration: refitted %v, %d fits; want no refit yet", got, fits())
	}
	if got := step(model.Placement{4, 4}, 5); len(got) != 0 || fits() != 1 {
		t.Fatalf("the same configuration again: refitted %v, %d fits; want no refit", got, fits())
	}
	if got := step(model.Placement{2, 2}, 1); len(got) != 1 || fits() != 2 {
		t.Fatalf("a second configuration: refitted %v, %d fits; want the refit current", got, fits())
	}
}

func TestRefitRejectedWhenHeldOutConfigurationsDisagree(t *testing.T) {
	ctx := context.Background()
	l, st, now := newLearner(t, measuringJob(5, "newnet"))
	spec := newnetSpec()
	truth := model.Predictor{Spec: spec, Params: model.Priors(), Env: model.DefaultEnv()}
	seedFit(t, l, st, spec, truth)
	first, err := st.CurrentFit(ctx, "newnet")
	if err != nil {
		t.Fatal(err)
	}
	// Two cross-node configurations that contradict each other: no fit made
	// from one predicts the other, so the refit must not replace the fit.
	*now = now.Add(time.Minute)
	for _, s := range []report.Sample{multiNode(t, truth, model.Placement{4, 4}, 2), multiNode(t, truth, model.Placement{2, 2}, 0.5)} {
		if err := l.Accept(ctx, 1000, s); err != nil {
			t.Fatal(err)
		}
	}
	refitted, err := l.Refit(ctx)
	if err != nil || len(refitted) != 0 {
		t.Fatalf("refit = %v, %v; want the refit kept as a candidate only", refitted, err)
	}
	fits, err := st.Fits(ctx, "newnet")
	if err != nil || len(fits) != 2 {
		t.Fatalf("fits = %d, %v; want the rejected refit stored too", len(fits), err)
	}
	if cur, err := st.CurrentFit(ctx, "newnet"); err != nil || cur.ID != first.ID {
		t.Errorf("current fit = %d (%v), want still %d", cur.ID, err, first.ID)
	}
}

// A seeded type on faster GPUs than the artifact's: jobs run at half the
// predicted time on two configurations, and the first refit is promoted.
// Nothing from the artifact's cluster holds it back.
func TestRefitSeededTypeOnFasterHardware(t *testing.T) {
	ctx := context.Background()
	l, st, now := newLearner(t, measuringJob(5, "bert"))
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		t.Fatal(err)
	}
	seedShipped(ctx, t, st, set)
	seeded, err := st.CurrentFit(ctx, "bert")
	if err != nil {
		t.Fatal(err)
	}
	spec := set.Models["bert"].Spec
	was := model.Predictor{Spec: spec, Params: seeded.Params, Env: model.DefaultEnv()}
	*now = now.Add(time.Minute)
	// Seven configurations: a type with no samples of this cluster needs as
	// many as a first fit.
	for _, pl := range []model.Placement{{8}, {4, 4}, {2, 2, 2, 2}, {4}, {2, 2}, {1, 1, 1, 1}, {2}} {
		if err := l.Accept(ctx, 1000, multiNode(t, was, pl, 0.5)); err != nil {
			t.Fatal(err)
		}
	}
	if refitted, err := l.Refit(ctx); err != nil || len(refitted) != 1 {
		t.Fatalf("refit = %v, %v; want bert's refit current", refitted, err)
	}
	cur, err := st.CurrentFit(ctx, "bert")
	if err != nil || cur.ID == seeded.ID {
		t.Fatalf("current fit %d (%v), want a new one", cur.ID, err)
	}
}

// Samples stored under an older spec of the type (another global batch)
// cannot be priced any more; a refit leaves them out instead of failing.
func TestRefitSkipsSamplesOfAnOlderSpec(t *testing.T) {
	ctx := context.Background()
	l, st, now := newLearner(t, measuringJob(5, "newnet"))
	spec := newnetSpec()
	seedFit(t, l, st, spec, model.Predictor{Spec: spec, Params: model.Priors(), Env: model.DefaultEnv()})
	spec.GlobalBatch, spec.ForwardMs = 64, 600
	if err := st.UpsertModelType(ctx, spec); err != nil {
		t.Fatal(err)
	}
	truth := model.Predictor{Spec: spec, Params: model.Priors(), Env: model.DefaultEnv()}
	*now = now.Add(time.Minute)
	// The old samples were measured at the old global batch; each is still
	// priced at its own (ForPlan), so the refit weighs them with the new.
	for _, pl := range []model.Placement{{4, 4}, {2, 2}, {8}, {4}, {2, 2, 2, 2}, {1, 1, 1, 1}, {2}} {
		if err := l.Accept(ctx, 1000, multiNode(t, truth, pl, 1.5)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Refit(ctx); err != nil {
		t.Fatalf("refit with samples of an older spec stored: %v", err)
	}
	if fits, err := st.Fits(ctx, "newnet"); err != nil || len(fits) != 2 {
		t.Errorf("fits = %d (%v), want the first and the refit", len(fits), err)
	}
}

// A type whose spec was replaced has no current fit; marked for a refit,
// it is fitted again on the samples it has, under the new spec, without
// waiting for a new sample to come.
func TestRefitAfterSpecReplaced(t *testing.T) {
	ctx := context.Background()
	l, st, now := newLearner(t, measuringJob(5, "newnet"))
	spec := newnetSpec()
	seedFit(t, l, st, spec, model.Predictor{Spec: spec, Params: model.Priors(), Env: model.DefaultEnv()})
	first, err := st.CurrentFit(ctx, "newnet")
	if err != nil {
		t.Fatal(err)
	}
	*now = now.Add(time.Minute)
	spec.ForwardMs *= 2
	if _, err := st.ReplaceSpec(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if refitted, err := l.Refit(ctx); err != nil || len(refitted) != 0 {
		t.Fatalf("refit before the mark = %v, %v; want nothing to look at", refitted, err)
	}
	l.MarkForRefit("newnet")
	if refitted, err := l.Refit(ctx); err != nil || len(refitted) != 1 {
		t.Fatalf("refit = %v, %v; want newnet fitted on its samples", refitted, err)
	}
	cur, err := st.CurrentFit(ctx, "newnet")
	if err != nil || cur.ID == first.ID || cur.Samples != first.Samples {
		t.Errorf("current fit %+v (%v), want a new one on the %d samples of the first", cur, err, first.Samples)
	}
}

func TestAcceptLaunch(t *testing.T) {
	l, st, _ := newLearner(t, runningJob(5, "bert"), runningJob(6, "bert"))
	ctx := context.Background()
	if err := st.UpsertJob(ctx, store.Job{ID: 5, ModelType: "bert", Class: store.BestEffort, State: "RUNNING"}); err != nil {
		t.Fatal(err)
	}
	good := report.Launch{Kind: report.KindLaunch, Version: report.LaunchVersion, JobID: "5", ModelType: "bert",
		Dialect: "deepspeed", Cannot: "tp,pp", GlobalBatch: 64, Plan: "dp2.tp2.pp1.mb16.a1.z0", Refused: true}
	tests := map[string]struct {
		uid     uint32
		mutate  func(*report.Launch)
		wantErr error
	}{
		"owner":            {uid: 1000},
		"other user":       {uid: 1001, wantErr: report.ErrNotOwner},
		"wrong model":      {uid: 1000, mutate: func(n *report.Launch) { n.ModelType = "gpt2" }, wantErr: report.ErrBadLaunch},
		"unknown to slurm": {uid: 1000, mutate: func(n *report.Launch) { n.JobID = "99" }, wantErr: report.ErrBadLaunch},
		// Slurm knows job 6, rubickd never scheduled it.
		"never scheduled": {uid: 1000, mutate: func(n *report.Launch) { n.JobID = "6" }, wantErr: report.ErrBadLaunch},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := good
			if tc.mutate != nil {
				tc.mutate(&n)
			}
			if err := l.AcceptLaunch(ctx, tc.uid, n); tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("AcceptLaunch = %v, want %v", err, tc.wantErr)
			}
		})
	}
	got, err := st.LaunchLimits(ctx, []store.LaunchKey{{ID: 5, User: "alice", ModelType: "bert"}, {ID: 6}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[int64]store.Launch{5: {Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 64, Own: true}}, got); d != "" {
		t.Errorf("stored (-want +got):\n%s", d)
	}
	// The accepted refusal is in the job's plan history, for rubick
	// report to count the requeue after it as rubick's.
	hist, err := st.PlanHistory(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || hist[0].Kind != store.KindRefused || hist[0].Plan.String() != good.Plan ||
		hist[0].Error != "it uses tp, which the line cannot express; its global batch is 32, the line's 64" {
		t.Errorf("plan history %+v, want the one refusal of %s, why", hist, good.Plan)
	}
}

// A job reports as many samples as it likes of the configurations it has
// reported, and new configurations only up to MaxConfigsPerJob; a reload
// raising the bound lets the next one in.
func TestAcceptBoundsConfigsPerJob(t *testing.T) {
	ctx := context.Background()
	l, st, _ := newLearner(t, measuringJob(5, "bert"))
	l.MaxConfigsPerJob = 2
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertModelType(ctx, set.Models["bert"].Spec); err != nil {
		t.Fatal(err)
	}
	s := report.Sample{Version: report.SampleVersion, JobID: "5", ModelType: "bert", Plan: "dp4.tp1.pp1.mb8.a1.z0", Placement: "4", CPUs: 16, Iteration: ptr(3), IterS: 0.2}
	other, third := s, s
	other.CPUs = 8
	third.Plan, third.Placement = "dp2.tp1.pp1.mb16.a1.z0", "2"
	for i, step := range []struct {
		s       report.Sample
		wantErr error
	}{{s, nil}, {other, nil}, {s, nil}, {third, report.ErrBadSample}, {other, nil}} {
		if err := l.Accept(ctx, 1000, step.s); !errors.Is(err, step.wantErr) || (err == nil) != (step.wantErr == nil) {
			t.Errorf("sample %d: Accept = %v, want %v", i, err, step.wantErr)
		} else if err != nil && !strings.Contains(err.Error(), "job 5 has reported 2 configurations") {
			t.Errorf("sample %d: Accept = %v, want it to say how many configurations job 5 reported", i, err)
		}
	}
	l.SetMaxConfigsPerJob(3)
	if err := l.Accept(ctx, 1000, third); err != nil {
		t.Errorf("Accept after raising the bound = %v", err)
	}
}

// lockedStore fails every sample write as a busy store does.
type lockedStore struct{ LearnStore }

func (lockedStore) AddOnline(context.Context, string, model.Sample, int64, int, int) error {
	return errors.New("database is locked")
}

// A store that cannot take the sample is not the sample's fault: the
// endpoint answers 503 for it, not 400.
func TestAcceptStoreFailure(t *testing.T) {
	l, st, _ := newLearner(t, measuringJob(5, "bert"))
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertModelType(context.Background(), set.Models["bert"].Spec); err != nil {
		t.Fatal(err)
	}
	l.Store = lockedStore{st}
	s := report.Sample{Version: report.SampleVersion, JobID: "5", ModelType: "bert", Plan: "dp4.tp1.pp1.mb8.a1.z0", Placement: "4", CPUs: 16, Iteration: ptr(3), IterS: 0.2}
	err = l.Accept(context.Background(), 1000, s)
	if err == nil || errors.Is(err, report.ErrBadSample) || !strings.Contains(err.Error(), "database is locked") {
		t.Errorf("Accept = %v, want the store's error, not a bad sample", err)
	}
}

// One model type's failed refit neither stops the others' nor is dropped:
// the next Refit tries it again.
func TestRefitGoesOnPastAFailure(t *testing.T) {
	ctx := context.Background()
	l, _, _, _, samples := newnetLearner(t)
	for _, s := range samples {
		if err := l.Accept(ctx, 1000, s); err != nil {
			t.Fatal(err)
		}
	}
	l.dirty["aaa"] = true // sorted before newnet; not registered, so its refit fails
	refitted, err := l.Refit(ctx)
	if err == nil || !strings.Contains(err.Error(), `refit aaa: store: model type "aaa": not found`) || !slices.Equal(refitted, []string{"newnet"}) {
		t.Fatalf("Refit = %v, %v; want newnet refitted and aaa's error", refitted, err)
	}
	if !l.dirty["aaa"] || l.dirty["newnet"] {
		t.Errorf("after Refit, to do: %v; want aaa again", l.dirty)
	}
}

// phaselessStore cannot read the profiling phases, as a busy store cannot.
type phaselessStore struct{ LearnStore }

func (phaselessStore) PendingPhases(context.Context) (map[string][]store.Phase, error) {
	return nil, errors.New("database is locked")
}

// A Refit that cannot read the profiling phases reported over fits nothing
// (a type without a fit would be fitted as if its phase were not over) and
// leaves the types with new samples to the next.
func TestRefitWaitsForPhases(t *testing.T) {
	ctx := context.Background()
	l, st, _, _, samples := newnetLearner(t)
	for _, s := range samples {
		if err := l.Accept(ctx, 1000, s); err != nil {
			t.Fatal(err)
		}
	}
	l.Store = phaselessStore{st}
	if refitted, err := l.Refit(ctx); err == nil || !strings.Contains(err.Error(), "database is locked") || len(refitted) != 0 {
		t.Fatalf("Refit without the phases = %v, %v; want the store's error and no fit", refitted, err)
	}
	l.Store = st
	refitted, err := l.Refit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"newnet"}, refitted); d != "" {
		t.Errorf("Refit once the phases read (-want +got):\n%s", d)
	}
}

// failingFitStore fails the next fit write as a busy store does.
type failingFitStore struct {
	LearnStore
	fail int
}

func (s *failingFitStore) AddFitAs(ctx context.Context, mt string, r model.FitResult, src store.Source, how store.Promotion) (store.Fit, error) {
	if s.fail > 0 {
		s.fail--
		return store.Fit{}, errors.New("database is locked")
	}
	return s.LearnStore.AddFitAs(ctx, mt, r, src, how)
}

// A refit whose fit could not be stored is made again at the next Refit,
// without waiting for a configuration not measured before.
func TestRefitRetriedAfterAFailedWrite(t *testing.T) {
	ctx := context.Background()
	l, st, now := newLearner(t, measuringJob(5, "newnet"))
	spec := newnetSpec()
	truth := model.Predictor{Spec: spec, Params: model.Priors(), Env: model.DefaultEnv()}
	seedFit(t, l, st, spec, truth)
	*now = now.Add(time.Minute)
	for _, pl := range []model.Placement{{4, 4}, {2, 2}} {
		if err := l.Accept(ctx, 1000, multiNode(t, truth, pl, 1.3)); err != nil {
			t.Fatal(err)
		}
	}
	l.Store = &failingFitStore{LearnStore: st, fail: 1}
	if refitted, err := l.Refit(ctx); err == nil || !strings.Contains(err.Error(), "database is locked") || len(refitted) != 0 {
		t.Fatalf("Refit with the fit write failing = %v, %v; want the store's error", refitted, err)
	}
	refitted, err := l.Refit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"newnet"}, refitted); diff != "" {
		t.Errorf("Refit after the failure (-want +got):\n%s", diff)
	}
	fits, err := st.Fits(ctx, "newnet")
	if err != nil {
		t.Fatal(err)
	}
	if len(fits) != 2 {
		t.Errorf("%d fits stored, want the first and the refit", len(fits))
	}
}

// gpt13bSpec is a model type too large for a profiling phase's plain
// data-parallel runs on 80 GB GPUs (docs/admin-guide.md, Adding a model
// type).
func gpt13bSpec() model.Spec {
	return model.Spec{Name: "gpt13b", Params: 13e9, Layers: 40, Hidden: 5120, Heads: 40, SeqLen: 2048, GlobalBatch: 64, ForwardMs: 23000}
}

// largePhase is what a profiling phase of gpt13b measures on 8 GPUs and
// 96 CPUs, its iteration times truth's: the runs that fit memory, ZeRO-DP
// on 8 GPUs, then ZeRO-Offload on 1 GPU with all the CPUs, on 8 GPUs, on
// 1 GPU with half the CPUs and on 2 GPUs, three reports each.
func largePhase(t *testing.T, truth model.Predictor, job int) []report.Sample {
	t.Helper()
	var out []report.Sample
	for _, c := range []struct {
		dp, cpus int
		off      bool
	}{{8, 96, false}, {1, 96, true}, {8, 96, true}, {1, 48, true}, {2, 96, true}} {
		plan := model.Plan{DP: c.dp, TP: 1, PP: 1, MicroBatch: 1, Accum: truth.Spec.GlobalBatch / c.dp, ZeRO: 2, Offload: c.off}
		res := model.Resources{Placement: model.Placement{c.dp}, CPUs: c.cpus}
		b, err := truth.Predict(plan, res)
		if err != nil {
			t.Fatal(err)
		}
		for it := range 3 {
			out = append(out, report.Sample{Version: report.SampleVersion, JobID: strconv.Itoa(job), ModelType: truth.Spec.Name,
				Plan: plan.String(), Placement: res.Placement.String(), CPUs: c.cpus, Iteration: ptr(2 + it), IterS: b.Iter})
		}
	}
	return out
}

// A model type whose profiling phases cannot run the plain data-parallel
// runs gets its first fit from what a phase measured, once the job says
// the phase is over, with the parameters those runs cannot identify
// pinned at their priors. Samples reported any other way still wait for
// seven configurations, and a phase that measured too little gives no fit.
// A rubickd restarted after it took the notice fits the type as the old one
// would have, and one restarted after a first-fit attempt used the phase
// makes no other on it.
func TestFirstFitAfterProfilingPhase(t *testing.T) {
	truth := model.Predictor{Spec: gpt13bSpec(), Params: model.Priors(), Env: model.DefaultEnv()}
	truth.Params.KBwd, truth.Params.KOptOff, truth.Params.KConst = 2.4, 12, 0.05
	// Each event is samples of a job's phase runs (configs: indices into
	// largePhase), a launch notice, a Refit, or a restart of rubickd: a new
	// Learner over the store reopened.
	type event struct {
		job      int
		configs  []int
		notice   bool
		profiled bool
		refit    bool
		restart  bool
	}
	samples := func(job int, configs ...int) event { return event{job: job, configs: configs} }
	over := func(job int) event { return event{job: job, notice: true, profiled: true} }
	refit := event{refit: true}
	restart := event{restart: true}
	tests := map[string]struct {
		events []event
		pinned []string // nil: no fit
		maxErr float64  // of the fit on each run of the phase
	}{
		"phase over": {events: []event{samples(5, 0, 1, 2, 3), refit, over(5)},
			pinned: []string{"k_opt", "k_sync", "k_swap", "k_off", "k_3d"}, maxErr: 0.02},
		"phase over, three configurations": {events: []event{samples(5, 1, 2, 3), over(5)},
			pinned: []string{"k_opt_off", "k_opt", "k_sync", "k_swap", "k_off", "k_3d"}, maxErr: 0.11},
		// Another job's configurations count in the fit, not towards the
		// phase's minimum.
		"phase over, and a running job's": {events: []event{samples(5, 1, 2, 3), samples(6, 0, 4), over(5)},
			pinned: []string{"k_opt", "k_sync", "k_swap", "k_off", "k_3d"}, maxErr: 0.02},
		"no notice":             {events: []event{samples(5, 0, 1, 2, 3, 4)}},
		"notice of an old line": {events: []event{samples(5, 0, 1, 2, 3), {job: 5, notice: true}}},
		"two configurations":    {events: []event{samples(5, 1, 2), samples(6, 0, 3, 4), over(5)}},
		// Every run failed; what the job reports after its phase is a
		// running job's.
		"every run failed": {events: []event{over(5), refit, samples(5, 0, 1, 2, 3, 4)}},
		"phase over, then a restart": {events: []event{samples(5, 0, 1, 2, 3), over(5), restart},
			pinned: []string{"k_opt", "k_sync", "k_swap", "k_off", "k_3d"}, maxErr: 0.02},
		"phase over, then two restarts": {events: []event{samples(5, 1, 2, 3), refit, over(5), restart, restart},
			pinned: []string{"k_opt_off", "k_opt", "k_sync", "k_swap", "k_off", "k_3d"}, maxErr: 0.11},
		"every run failed, then a restart": {events: []event{over(5), refit, restart, samples(5, 0, 1, 2, 3, 4)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			jobs := []slurm.Job{measuringJob(5, "gpt13b"), measuringJob(6, "gpt13b")}
			path, now := filepath.Join(t.TempDir(), "rubick.db"), t0
			st := openClockStore(t, path, &now)
			l := learnerOn(st, jobs...)
			if err := st.UpsertModelType(ctx, truth.Spec); err != nil {
				t.Fatal(err)
			}
			if err := st.UpsertJob(ctx, store.Job{ID: 5, ModelType: "gpt13b", Class: store.BestEffort, State: "RUNNING"}); err != nil {
				t.Fatal(err)
			}
			for _, e := range tc.events {
				switch {
				case e.restart:
					if err := st.Close(); err != nil {
						t.Fatal(err)
					}
					st = openClockStore(t, path, &now)
					l = learnerOn(st, jobs...)
				case e.refit:
					if refitted, err := l.Refit(ctx); err != nil || len(refitted) != 0 {
						t.Fatalf("Refit before the phase is over = %v, %v; want no fit", refitted, err)
					}
				case e.notice:
					n := report.Launch{Kind: report.KindLaunch, Version: report.LaunchVersion, JobID: strconv.Itoa(e.job), ModelType: "gpt13b",
						Dialect: "megatron", GlobalBatch: 64, Profiled: e.profiled}
					if err := l.AcceptLaunch(ctx, 1000, n); err != nil {
						t.Fatal(err)
					}
				default:
					all := largePhase(t, truth, e.job)
					for _, c := range e.configs {
						for _, s := range all[3*c : 3*c+3] {
							if err := l.Accept(ctx, 1000, s); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
			}
			refitted, err := l.Refit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cur, err := st.CurrentFit(ctx, "gpt13b")
			if tc.pinned == nil {
				if !errors.Is(err, store.ErrNotFound) || len(refitted) != 0 {
					t.Fatalf("fit %+v (%v), refitted %v; want none", cur, err, refitted)
				}
				return
			}
			if err != nil {
				t.Fatalf("no fit: %v", err)
			}
			if d := cmp.Diff([]string{"gpt13b"}, refitted); d != "" {
				t.Errorf("refitted (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.pinned, cur.Pinned); d != "" {
				t.Errorf("pinned (-want +got):\n%s", d)
			}
			// The fit prices every run the phase could measure, those it
			// was not fitted on too: within 2 %, and within 11 % from the
			// three ZeRO-Offload runs alone, which leave CPU Adam at its
			// prior (ZeRO-DP on 8 GPUs).
			for i, s := range largePhase(t, truth, 5) {
				if i%3 != 0 {
					continue // one report of each run
				}
				ms, err := s.ModelSample()
				if err != nil {
					t.Fatal(err)
				}
				b, err := model.Predictor{Spec: truth.Spec, Params: cur.Params, Env: truth.Env}.Predict(ms.Plan, ms.Resources)
				if err != nil {
					t.Fatal(err)
				}
				if e := math.Abs(b.Iter/ms.IterS - 1); e > tc.maxErr {
					t.Errorf("%s on %s, %d CPUs: fit predicts %.3f s for %.3f s", ms.Plan, ms.Resources.Placement, ms.Resources.CPUs, b.Iter, ms.IterS)
				}
			}
			if refitted, err := l.Refit(ctx); err != nil || len(refitted) != 0 {
				t.Errorf("Refit after the fit = %v, %v; want nothing to do", refitted, err)
			}
		})
	}
}

// At its start rubickd warns of each current fit that puts its type's spec
// in doubt, and of no other: neither a sound fit, nor a doubted one that is
// no longer current, nor a type without a fit.
func TestWarnDoubtedFits(t *testing.T) {
	ctx := context.Background()
	_, st, _ := newLearner(t)
	for _, name := range []string{"sound", "doubted", "superseded", "unfitted"} {
		spec := newnetSpec()
		spec.Name = name
		if err := st.UpsertModelType(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	poor := model.FitResult{Params: model.Priors(), MAPE: 120, Samples: 7}
	fits := []struct {
		mt  string
		r   model.FitResult
		how store.Promotion
	}{
		{"sound", model.FitResult{Params: model.Priors(), MAPE: 3, Samples: 7}, store.PromoteAlways},
		{"doubted", poor, store.PromoteAlways},
		{"superseded", poor, store.PromoteAlways},
		{"superseded", model.FitResult{Params: model.Priors(), MAPE: 3, Samples: 9}, store.PromoteAlways},
	}
	for _, f := range fits {
		if _, err := st.AddFitAs(ctx, f.mt, f.r, store.SourceOnline, f.how); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	if err := WarnDoubtedFits(ctx, st, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	var warned []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if i := strings.Index(line, " model="); i >= 0 && strings.Contains(line, "level=WARN") {
			warned = append(warned, strings.Fields(line[i+1:])[0])
		}
	}
	if d := cmp.Diff([]string{"model=doubted"}, warned); d != "" {
		t.Errorf("warned of (-want +got):\n%s\n%s", d, logs.String())
	}
	if !strings.Contains(logs.String(), "it misses its own samples by 120 % on average") {
		t.Errorf("the warning lacks the doubt:\n%s", logs.String())
	}
}

// A refused plan's notice says why: the features of the plan the line
// cannot express, and a global batch other than the line's.
func TestRefusal(t *testing.T) {
	for name, tc := range map[string]struct {
		n    report.Launch
		want string
	}{
		"features": {report.Launch{Cannot: "tp,pp", GlobalBatch: 64, Plan: "dp2.tp2.pp1.mb32.a1.z0"},
			"it uses tp, which the line cannot express"},
		"global batch": {report.Launch{GlobalBatch: 32, Plan: "dp4.tp1.pp1.mb16.a1.z0"},
			"its global batch is 64, the line's 32"},
		"both": {report.Launch{Cannot: "offload", GlobalBatch: 8, Plan: "dp1.tp1.pp1.mb4.a4.z2+off"},
			"it uses offload, which the line cannot express; its global batch is 16, the line's 8"},
		"batch unknown":   {report.Launch{Plan: "dp4.tp1.pp1.mb16.a1.z0"}, ""},
		"no plan":         {report.Launch{Cannot: "tp", GlobalBatch: 32}, ""},
		"features unused": {report.Launch{Cannot: "tp,pp", GlobalBatch: 64, Plan: "dp4.tp1.pp1.mb16.a1.z0"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, why, _ := refusal(tc.n)
			if diff := cmp.Diff(tc.want, why); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
		})
	}
}
