package report

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/store"
)

// fakeStore is an in-memory Store.
type fakeStore struct {
	jobs    map[int64]store.Job
	history map[int64][]store.Action
	specs   map[string]model.Spec
	fits    map[string]store.Fit
	costs   map[int64][]store.RestartCost
	reasons map[int64][]store.Reason // newest first
	// reads counts Job's reads by id, when set.
	reads map[int64]int
	// spanReads counts NewestReasons' reads.
	spanReads int
}

func (f *fakeStore) JobRestartCosts(_ context.Context, id int64) ([]store.RestartCost, error) {
	return f.costs[id], nil
}

func (f *fakeStore) Job(_ context.Context, id int64) (store.Job, error) {
	if f.reads != nil {
		f.reads[id]++
	}
	if j, ok := f.jobs[id]; ok {
		return j, nil
	}
	return store.Job{}, fmt.Errorf("job %d: %w", id, store.ErrNotFound)
}

func (f *fakeStore) ArrayTask(_ context.Context, array, task int64) (store.Job, error) {
	for _, j := range f.jobs {
		if j.ArrayJobID == array && j.ArrayTaskID == task {
			return j, nil
		}
	}
	return store.Job{}, fmt.Errorf("job %d_%d: %w", array, task, store.ErrNotFound)
}

func (f *fakeStore) PlanHistory(_ context.Context, id int64) ([]store.Action, error) {
	return f.history[id], nil
}

func (f *fakeStore) Reasons(_ context.Context, id int64, limit int) ([]store.Reason, error) {
	rs := f.reasons[id]
	return rs[:min(limit, len(rs))], nil
}

// NewestReasons gives each span the newest of f.reasons within it, From
// included and To not, as the store does.
func (f *fakeStore) NewestReasons(_ context.Context, id int64, spans []store.Span) ([]store.Reason, error) {
	f.spanReads++
	out := make([]store.Reason, len(spans))
	for k, sp := range spans {
		for _, r := range f.reasons[id] {
			if !r.At.Before(sp.From) && r.At.Before(sp.To) {
				out[k] = r
				break
			}
		}
	}
	return out, nil
}

func (f *fakeStore) ModelType(_ context.Context, name string) (store.ModelType, error) {
	if s, ok := f.specs[name]; ok {
		return store.ModelType{Spec: s}, nil
	}
	return store.ModelType{}, fmt.Errorf("model type %q: %w", name, store.ErrNotFound)
}

func (f *fakeStore) CurrentFit(_ context.Context, name string) (store.Fit, error) {
	if s, ok := f.fits[name]; ok {
		return s, nil
	}
	return store.Fit{}, fmt.Errorf("fit of %q: %w", name, store.ErrNotFound)
}

func gpt2Spec() model.Spec {
	return model.Spec{Name: "gpt2", Params: 1.5e9, Layers: 48, Hidden: 1600, Heads: 25, SeqLen: 1024, GlobalBatch: 64, ForwardMs: 812.5}
}

func mustPlan(t *testing.T, s string) model.Plan {
	t.Helper()
	p, err := model.ParsePlan(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEnrichSLO(t *testing.T) {
	ctx := context.Background()
	env := model.DefaultEnv()
	pred := model.Predictor{Spec: gpt2Spec(), Params: model.Priors(), Env: env}
	// Job 101 asked for n1.g4.c8.m64000: the SLO baseline is the best plan there.
	reqRes := model.Resources{Placement: model.Placement{4}, CPUs: 8, HostMemGB: 64000.0 / 1024}
	best, _, err := pred.BestPlan(reqRes, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := pred.Throughput(best, reqRes)
	small := model.Resources{Placement: model.Placement{2}, CPUs: 4, HostMemGB: 32}
	smallPlan := mustPlan(t, "dp2.tp1.pp1.mb4.a8.z0")
	got, err := pred.Throughput(smallPlan, small)
	if err != nil || got >= want {
		t.Fatalf("precondition: %s on 2 GPUs gives %v samples/s (err %v), want below %v", smallPlan, got, err, want)
	}
	double := pred
	double.Spec = pred.Spec.WithGlobalBatch(2 * pred.Spec.GlobalBatch)
	bestDouble, _, err := double.BestPlan(reqRes, nil)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		hist       []store.Action
		fits       map[string]store.Fit
		wantViol   *bool
		wantDetail string
	}{
		"applied best plan on the request meets the SLO": {
			hist: []store.Action{{JobID: 101, Kind: "start", Plan: best, Resources: reqRes, Result: store.ResultOK, DecidedAt: t0}},
			fits: map[string]store.Fit{"gpt2": {FitResult: model.FitResult{Params: model.Priors()}}}, wantViol: ptr(false),
		},
		"applied plan on 2 GPUs violates it": {
			hist: []store.Action{
				{JobID: 101, Kind: "start", Plan: best, Resources: reqRes, Result: store.ResultOK, DecidedAt: t0},
				{JobID: 101, Kind: "restart", Plan: smallPlan, Resources: small, Result: store.ResultOK, DecidedAt: t0.Add(time.Hour)},
			},
			fits: map[string]store.Fit{"gpt2": {FitResult: model.FitResult{Params: model.Priors()}}}, wantViol: ptr(true),
			wantDetail: "(dp2.tp1.pp1.mb4.a8.z0 on 2)",
		},
		"failed actions do not count": {
			hist: []store.Action{
				{JobID: 101, Kind: "start", Plan: best, Resources: reqRes, Result: store.ResultOK, DecidedAt: t0},
				{JobID: 101, Kind: "restart", Plan: smallPlan, Resources: small, Result: store.ResultFailed, Error: "rc=1", DecidedAt: t0.Add(time.Hour)},
			},
			fits: map[string]store.Fit{"gpt2": {FitResult: model.FitResult{Params: model.Priors()}}}, wantViol: ptr(false),
		},
		"without history the tag plans are priced": {
			fits: map[string]store.Fit{"gpt2": {FitResult: model.FitResult{Params: model.Priors()}}},
			// the tag's runs: dp4.mb2.a8 on 4 GPUs and dp8.mb1.a8 on 2 nodes of 4
			wantViol: ptr(min(tput(t, pred, "dp4.tp1.pp1.mb2.a8.z0", model.Placement{4}, 8),
				tput(t, pred, "dp8.tp1.pp1.mb1.a8.z0", model.Placement{4, 4}, 16)) < want*(1-sloTolerance)),
		},
		"no fit leaves it unchecked": {wantDetail: "no fitted model"},
		// Its launch line's global batch, twice gpt2's: the request is
		// priced at it too. Before, every plan of it was invalid for the
		// model type's batch, and the SLO went unchecked.
		"a job of its own global batch": {
			hist: []store.Action{{JobID: 101, Kind: "start", Plan: bestDouble, Resources: reqRes, Result: store.ResultOK, DecidedAt: t0}},
			fits: map[string]store.Fit{"gpt2": {FitResult: model.FitResult{Params: model.Priors()}}}, wantViol: ptr(false),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := load(t, "synthetic.txt", syntheticOptions())
			st := &fakeStore{
				history: map[int64][]store.Action{101: tc.hist},
				specs:   map[string]model.Spec{"gpt2": gpt2Spec()},
				fits:    tc.fits,
			}
			if err := r.Enrich(ctx, st, "/tmp/x.db", env); err != nil {
				t.Fatal(err)
			}
			j := r.Jobs[0]
			if j.ID != "101" {
				t.Fatalf("first job %s", j.ID)
			}
			if diff := cmp.Diff(tc.wantViol, j.SLOViolated); diff != "" {
				t.Errorf("violated (-want +got):\n%s\ndetail: %s", diff, j.SLODetail)
			}
			if !strings.Contains(j.SLODetail, tc.wantDetail) {
				t.Errorf("detail %q lacks %q", j.SLODetail, tc.wantDetail)
			}
			if len(j.StorePlans) != len(tc.hist) {
				t.Errorf("store plans %v, want %d", j.StorePlans, len(tc.hist))
			}
			// bert (job 103) has no model in the store: unchecked.
			if r.Overall.SLOViolations == nil || r.Overall.SLOUnchecked < 1 {
				t.Errorf("overall SLO = %v, unchecked %d", r.Overall.SLOViolations, r.Overall.SLOUnchecked)
			}
			wantCount := 0
			if tc.wantViol != nil && *tc.wantViol {
				wantCount = 1
			}
			if *r.Overall.SLOViolations != wantCount {
				t.Errorf("overall violations = %d, want %d", *r.Overall.SLOViolations, wantCount)
			}
			if r.Store != "/tmp/x.db" {
				t.Errorf("store = %q", r.Store)
			}
		})
	}
}

func tput(t *testing.T, p model.Predictor, plan string, pl model.Placement, cpus int) float64 {
	t.Helper()
	v, err := p.Throughput(mustPlan(t, plan), model.Resources{Placement: pl, CPUs: cpus})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func ptr[T any](v T) *T { return &v }

func TestEnrichClassFromStore(t *testing.T) {
	r := load(t, "sacct-22.05.txt", Options{})
	st := &fakeStore{jobs: map[int64]store.Job{32: {ID: 32, ModelType: "gpt2", Class: store.Guaranteed, State: "CANCELLED"}}}
	if err := r.Enrich(context.Background(), st, "s.db", model.DefaultEnv()); err != nil {
		t.Fatal(err)
	}
	for _, j := range r.Jobs {
		if j.ID != "32" {
			continue
		}
		if j.ModelType != "gpt2" || j.Class != "guaranteed" || j.SLOViolated != nil || !strings.Contains(j.SLODetail, "no fitted model") {
			t.Errorf("job 32 = model %q class %q slo %v %q", j.ModelType, j.Class, j.SLOViolated, j.SLODetail)
		}
	}
	if r.Overall.Guaranteed != 1 || r.Overall.SLOUnchecked != 1 || *r.Overall.SLOViolations != 0 {
		t.Errorf("overall = %+v", r.Overall)
	}
}

// A requeue whose restart rubickd measured is priced at the measured cost;
// a measurement from outside the run is not matched to it.
func TestEnrichMeasuredRestartCost(t *testing.T) {
	r := load(t, "synthetic.txt", syntheticOptions())
	var before Job
	for _, j := range r.Jobs {
		if j.ID == "101" {
			before = j
		}
	}
	// Run 1 of job 101: 10:05-11:05 on 4 GPUs; run 2 from 11:10 on 8.
	signaled := time.Date(2026, 11, 2, 11, 4, 50, 0, time.UTC)
	st := &fakeStore{history: map[int64][]store.Action{101: {{ID: 2, JobID: 101, Kind: "restart", DecidedAt: signaled, Result: store.ResultOK}}},
		costs: map[int64][]store.RestartCost{101: {
			{ActionID: 1, JobID: 101, Cost: time.Hour, Signaled: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)},
			{ActionID: 2, JobID: 101, Cost: 400 * time.Second, Signaled: signaled},
		}}}
	if err := r.Enrich(context.Background(), st, "s.db", model.DefaultEnv()); err != nil {
		t.Fatal(err)
	}
	var got Job
	for _, j := range r.Jobs {
		if j.ID == "101" {
			got = j
		}
	}
	const gapS = 300.0
	oh := before.ReconfigLostS - gapS
	type price struct {
		Measured        int
		LostS, LostGPUH float64
		UsefulGPUH      float64
	}
	want := price{1, 400, (400 - gapS) * 8 / 3600, *before.GPUHours - (400-gapS)*8/3600}
	if d := cmp.Diff(want, price{got.ReconfigMeasured, got.ReconfigLostS, *got.ReconfigLostGPUHours, *got.UsefulGPUHours},
		cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("job 101 priced (-want +got):\n%s\n(sacct price: %.0f s gap + %.0f s overhead)", d, gapS, oh)
	}
	if len(got.StorePlans) != 1 || got.StorePlans[0].RestartCostS == nil || *got.StorePlans[0].RestartCostS != 400 {
		t.Errorf("store plans %+v, want the restart with its measured 400 s", got.StorePlans)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "1 of ") {
		t.Errorf("notes %q do not say how many requeues were measured", r.Notes)
	}
}

// rubickd may have decided to restart the run Slurm then ended (its node
// failed while the job checkpointed): the interruption is priced at the
// measured cost, in its own figures; a requeue's measured cost stays the
// requeue's.
func TestEnrichMeasuredInterruption(t *testing.T) {
	const header = "JobID|State|Submit|Start|End|AllocTRES\n"
	// row is a run of job 7 on 8 GPUs, from and to hh:mm.
	row := func(state, from, to string) string {
		return "7|" + state + "|2026-11-02T00:00:00|2026-11-02T" + from + ":00|2026-11-02T" + to + ":00|cpu=8,gres/gpu=8,node=1\n"
	}
	at := func(h, m int) time.Time { return time.Date(2026, 11, 2, h, m, 0, 0, time.UTC) }
	cost := func(id int64, signaled time.Time) store.RestartCost {
		return store.RestartCost{ActionID: id, JobID: 7, Cost: 400 * time.Second, Signaled: signaled}
	}
	// 400 s measured, of which the gap of 300 s held no GPUs.
	measuredGPUh := (400 - 300) * 8 / 3600.0
	sacctGPUh := 260 * 8 / 3600.0
	type price struct {
		ReconfigMeasured, InterruptionMeasured int
		ReconfigLostS, InterruptionLostS       float64
		ReconfigLostGPUh, InterruptionLostGPUh float64
		LostToBoth                             float64 // GPU-h less useful GPU-h
		Notes                                  []string
	}
	note := "1 interruption(s) priced at the restart cost rubickd measured: it had decided to restart the run Slurm ended"
	tests := map[string]struct {
		rows  string
		costs []store.RestartCost
		hist  []store.Action
		want  price
	}{
		"decided within the run its node failure ended": {
			rows: row("NODE_FAIL", "00:10", "01:00") + row("COMPLETED", "01:05", "03:00"), costs: []store.RestartCost{cost(1, at(0, 59))},
			want: price{InterruptionMeasured: 1, InterruptionLostS: 400, InterruptionLostGPUh: measuredGPUh, LostToBoth: measuredGPUh,
				Notes: []string{note}},
		},
		"none decided": {
			rows: row("NODE_FAIL", "00:10", "01:00") + row("COMPLETED", "01:05", "03:00"),
			want: price{InterruptionLostS: 300 + 260, InterruptionLostGPUh: sacctGPUh, LostToBoth: sacctGPUh},
		},
		"decided within the run before, which rubickd requeued": {
			rows:  row("REQUEUED", "00:10", "01:00") + row("NODE_FAIL", "01:05", "02:00") + row("COMPLETED", "02:05", "03:00"),
			costs: []store.RestartCost{cost(1, at(0, 59))},
			hist:  []store.Action{{ID: 1, JobID: 7, Kind: "restart", DecidedAt: at(0, 59), Result: store.ResultOK}},
			want: price{ReconfigMeasured: 1, ReconfigLostS: 400, ReconfigLostGPUh: measuredGPUh,
				InterruptionLostS: 300 + 260, InterruptionLostGPUh: sacctGPUh, LostToBoth: measuredGPUh + sacctGPUh,
				Notes: []string{"1 of 1 requeues priced at the restart cost rubickd measured; the others at the gap plus the restart overhead"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := build(t, header+tc.rows, Options{RestartOverhead: DefaultRestartOverhead})
			st := &fakeStore{costs: map[int64][]store.RestartCost{7: tc.costs}, history: map[int64][]store.Action{7: tc.hist}}
			if err := r.Enrich(context.Background(), st, "s.db", model.DefaultEnv()); err != nil {
				t.Fatal(err)
			}
			j := r.Jobs[0]
			notes := slices.DeleteFunc(slices.Clone(r.Notes), func(n string) bool { return strings.HasPrefix(n, "no ") })
			got := price{j.ReconfigMeasured, j.InterruptionMeasured, j.ReconfigLostS, j.InterruptionLostS,
				*j.ReconfigLostGPUHours, *j.InterruptionLostGPUHours, *j.GPUHours - *j.UsefulGPUHours, notes}
			if d := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-9), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("job 7 priced (-want +got):\n%s", d)
			}
			if d := cmp.Diff(j.InterruptionLostGPUHours, r.Overall.InterruptionLostGPUHours, cmpopts.EquateApprox(0, 1e-9)); d != "" {
				t.Errorf("overall interruption GPU-h (-job +overall):\n%s", d)
			}
		})
	}
}

// With a store, the plan history of a job rubickd knows tells whose each
// requeue was: a restart or preemption rubickd decided while the run ran,
// or a plan the job's launch line refused in it (after which rubick-srun
// requeues the job), is rubick's; a run someone requeued by hand is not,
// even though rubickd started the job again (gen= one more, which sacct
// alone reads as rubick's). A job the store does not know keeps the tags'
// verdict.
func TestEnrichRequeueOwner(t *testing.T) {
	const header = "JobID|State|Submit|Start|End|AllocTRES|AdminComment\n"
	at := func(h, m int) time.Time { return time.Date(2026, 11, 2, h, m, 0, 0, time.UTC) }
	row := func(state, from, to string, gen int) string {
		end, tag := "2026-11-02T"+to+":00", fmt.Sprintf("rubick:v1 model=bert gen=%d", gen)
		if to == "" {
			end, tag = "Unknown", ""
		}
		return fmt.Sprintf("9|%s|2026-11-02T00:00:00|2026-11-02T%s:00|%s|cpu=8,gres/gpu=8,node=1|%s\n", state, from, end, tag)
	}
	requeued := row("REQUEUED", "00:10", "01:00", 1) + row("COMPLETED", "01:05", "02:00", 2)
	p8 := mustPlan(t, "dp8.tp1.pp1.mb4.a1.z2")
	on8 := model.Resources{Placement: model.Placement{8}, CPUs: 8}
	act := func(kind string, h, m int) store.Action {
		a := store.Action{JobID: 9, Kind: kind, Result: store.ResultOK, DecidedAt: at(h, m)}
		if kind != "preempt" {
			a.Plan, a.Resources = p8, on8
		}
		if kind == store.KindRefused {
			a.Resources, a.Result, a.Error = model.Resources{}, store.ResultFailed, "it uses tp, which the line cannot express"
		}
		return a
	}
	known := map[int64]store.Job{9: {ID: 9, ModelType: "bert", Class: store.BestEffort, Submitted: at(0, 0)}}
	tests := map[string]struct {
		rows                     string
		jobs                     map[int64]store.Job
		hist                     []store.Action
		reconfigs, interruptions int
	}{
		"restarted by rubickd":     {rows: requeued, jobs: known, hist: []store.Action{act("start", 0, 9), act("restart", 0, 59)}, reconfigs: 1},
		"preempted by rubickd":     {rows: requeued, jobs: known, hist: []store.Action{act("start", 0, 9), act("preempt", 0, 30), act("start", 1, 4)}, reconfigs: 1},
		"its line refused a plan":  {rows: requeued, jobs: known, hist: []store.Action{act("start", 0, 9), act(store.KindRefused, 0, 10), act("start", 1, 4)}, reconfigs: 1},
		"requeued by hand":         {rows: requeued, jobs: known, hist: []store.Action{act("start", 0, 9), act("start", 1, 4)}, interruptions: 1},
		"a restart before the run": {rows: requeued, jobs: known, hist: []store.Action{act("restart", 0, 5), act("start", 1, 4)}, interruptions: 1},
		"by hand, next run running": {rows: row("REQUEUED", "00:10", "01:00", 1) + row("RUNNING", "01:05", "", 0), jobs: known,
			hist: []store.Action{act("start", 0, 9), act("start", 1, 4)}, interruptions: 1},
		"a job the store does not know": {rows: requeued, reconfigs: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := build(t, header+tc.rows, Options{RestartOverhead: DefaultRestartOverhead})
			st := &fakeStore{jobs: tc.jobs, history: map[int64][]store.Action{9: tc.hist}}
			if err := r.Enrich(context.Background(), st, "s.db", model.DefaultEnv()); err != nil {
				t.Fatal(err)
			}
			j := r.Jobs[0]
			if j.Reconfigurations != tc.reconfigs || j.Interruptions != tc.interruptions || r.Overall.Interruptions != tc.interruptions {
				t.Errorf("%d reconfigurations, %d interruptions (overall %d); want %d, %d",
					j.Reconfigurations, j.Interruptions, r.Overall.Interruptions, tc.reconfigs, tc.interruptions)
			}
		})
	}
}

// Without AllocTRES a measured restart still reprices the lost seconds, but
// the lost and useful GPU-hours stay unknown.
func TestEnrichMeasuredRestartCostNoAllocTRES(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("testdata", "synthetic.txt"))
	if err != nil {
		t.Fatal(err)
	}
	r := build(t, dropColumn(t, string(text), "AllocTRES"), syntheticOptions())
	signaled := time.Date(2026, 11, 2, 11, 4, 50, 0, time.UTC)
	st := &fakeStore{history: map[int64][]store.Action{101: {{ID: 2, JobID: 101, Kind: "restart", DecidedAt: signaled, Result: store.ResultOK}}},
		costs: map[int64][]store.RestartCost{101: {{ActionID: 2, JobID: 101, Cost: 400 * time.Second, Signaled: signaled}}}}
	if err := r.Enrich(context.Background(), st, "s.db", model.DefaultEnv()); err != nil {
		t.Fatal(err)
	}
	type price struct {
		Measured                   int
		LostS                      float64
		LostGPUH, UsefulGPUH, GPUH *float64
		AllLostGPUH, AllUsefulGPUH *float64
	}
	want := price{Measured: 1, LostS: 400}
	for _, j := range r.Jobs {
		if j.ID == "101" {
			got := price{j.ReconfigMeasured, j.ReconfigLostS, j.ReconfigLostGPUHours, j.UsefulGPUHours, j.GPUHours,
				r.Overall.ReconfigLostGPUHours, r.Overall.UsefulGPUHours}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("job 101 priced (-want +got):\n%s", d)
			}
		}
	}
}

// A job rubickd saw held or waiting for its --begin or dependencies after
// its submission queues from the end of that wait, in its row and in the
// averages; a wait after its first start (a later hold) changes nothing.
func TestEnrichQueueFromWait(t *testing.T) {
	r := load(t, "synthetic.txt", Options{})
	before := map[string]float64{}
	for _, j := range r.Jobs {
		if j.QueueS != nil {
			before[j.ID] = *j.QueueS
		}
	}
	// Job 101: submitted 10:00, first started 10:05.
	waited := time.Date(2026, 11, 2, 10, 3, 0, 0, time.UTC)
	st := &fakeStore{jobs: map[int64]store.Job{
		101: {ID: 101, ModelType: "gpt2", Class: store.Guaranteed, Deferred: waited},
		102: {ID: 102, ModelType: "gpt2", Class: store.BestEffort, Deferred: time.Date(2026, 11, 2, 12, 10, 0, 0, time.UTC)},
	}}
	avg := r.Overall.AvgQueueS
	if err := r.Enrich(context.Background(), st, "s.db", model.DefaultEnv()); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	var from *time.Time
	for _, j := range r.Jobs {
		if j.QueueS != nil {
			got[j.ID] = *j.QueueS
		}
		if j.ID == "101" {
			from = j.QueuedFrom
		}
	}
	want := maps.Clone(before)
	want["101"] = 120
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("queue_s per job (-want +got):\n%s", diff)
	}
	if from == nil || !from.Equal(waited) {
		t.Errorf("job 101 queued_from = %v, want %v", from, waited)
	}
	if avg == nil || r.Overall.AvgQueueS == nil || math.Abs(*avg-*r.Overall.AvgQueueS-(before["101"]-120)/float64(len(before))) > 1e-9 {
		t.Errorf("average queue %v -> %v; want it lower by job 101's %v s over %d jobs", deref(avg), deref(r.Overall.AvgQueueS), before["101"]-120, len(before))
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, "1 job(s) queued from the end of a hold") }) {
		t.Errorf("notes %q; want one saying 1 job queues from the end of its wait", r.Notes)
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// A task of a job array, which sacct names ARRAY_TASK, is found in the
// store by the job id it was split off as: its plan history and SLO check
// come from there. Unsplit tasks and tasks the store never saw are left.
func TestEnrichArrayTask(t *testing.T) {
	const sacct = `JobID|JobName|Account|QOS|Partition|State|Submit|Start|End|Elapsed|AllocTRES|AdminComment|Comment
200_3|train|physics|normal|gpu|COMPLETED|2026-11-02T10:00:00|2026-11-02T10:01:00|2026-11-02T11:01:00|01:00:00|billing=4,cpu=4,gres/gpu=4,node=1|rubick:v1 model=gpt2 class=guaranteed tenant=physics plan=dp4.tp1.pp1.mb2.a8.z0 gen=1 req=n1.g4.c4.m64000|
200_4|train|physics|normal|gpu|COMPLETED|2026-11-02T10:00:00|2026-11-02T10:02:00|2026-11-02T11:02:00|01:00:00|billing=4,cpu=4,gres/gpu=4,node=1|rubick:v1 model=gpt2 class=guaranteed tenant=physics plan=dp4.tp1.pp1.mb2.a8.z0 gen=1 req=n1.g4.c4.m64000|
200_[5-9]|train|physics|normal|gpu|PENDING|2026-11-02T10:00:00|Unknown|Unknown|00:00:00||rubick:v1 model=gpt2 class=guaranteed tenant=physics|
`
	rows, cols, err := ParseSacct(strings.NewReader(sacct), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Build(rows, cols, Options{})
	if err != nil {
		t.Fatal(err)
	}
	plan := mustPlan(t, "dp4.tp1.pp1.mb2.a8.z0")
	res := model.Resources{Placement: model.Placement{4}, CPUs: 4, HostMemGB: 62.5}
	arrayWait := time.Date(2026, 11, 2, 10, 0, 40, 0, time.UTC)
	st := &fakeStore{
		jobs: map[int64]store.Job{
			210: {ID: 210, ModelType: "gpt2", Class: store.Guaranteed, ArrayJobID: 200, ArrayTaskID: 3},
			// The whole array was held until 10:00:40: the task queued from then.
			200: {ID: 200, ModelType: "gpt2", Class: store.Guaranteed, ArrayJobID: 200, Deferred: arrayWait},
		},
		history: map[int64][]store.Action{210: {{JobID: 210, Kind: "start", Plan: plan, Resources: res, Result: store.ResultOK,
			DecidedAt: time.Date(2026, 11, 2, 10, 0, 30, 0, time.UTC)}}},
		specs: map[string]model.Spec{"gpt2": gpt2Spec()},
		fits:  map[string]store.Fit{"gpt2": {FitResult: model.FitResult{Params: model.Priors()}}},
		reads: map[int64]int{},
	}
	if err := r.Enrich(context.Background(), st, "s.db", model.DefaultEnv()); err != nil {
		t.Fatal(err)
	}
	// ArrayTask read task 200_3's record (job 210); only the array's is
	// read by id, for its wait.
	if d := cmp.Diff(map[int64]int{200: 1}, st.reads); d != "" {
		t.Errorf("store reads by job id (-want +got):\n%s", d)
	}
	got := map[string]int{}
	checked := map[string]bool{}
	for _, j := range r.Jobs {
		got[j.ID] = len(j.StorePlans)
		checked[j.ID] = j.SLOViolated != nil
	}
	if d := cmp.Diff(map[string]int{"200_3": 1, "200_4": 0, "200_[5-9]": 0}, got); d != "" {
		t.Errorf("store plans per job (-want +got):\n%s", d)
	}
	if !checked["200_3"] || checked["200_4"] {
		t.Errorf("SLO checked %v; want task 200_3 checked with the store's plan, 200_4 (not in the store) left", checked)
	}
	for _, j := range r.Jobs {
		if j.ID == "200_3" && (j.QueuedFrom == nil || !j.QueuedFrom.Equal(arrayWait) || j.QueueS == nil || *j.QueueS != 20) {
			t.Errorf("200_3 queued from %v for %v s, want from the array's wait %v, 20 s", j.QueuedFrom, j.QueueS, arrayWait)
		}
	}
}

func TestParseJobID(t *testing.T) {
	type ref struct {
		ID, Array, Task int64
		OK              bool
	}
	for s, want := range map[string]ref{
		"42":       {ID: 42, OK: true},
		"200_3":    {Array: 200, Task: 3, OK: true},
		"200_0":    {Array: 200, OK: true},
		"0":        {},
		"-4":       {},
		"12+0":     {},
		"12_[3-9]": {},
		"0_1":      {},
		"12_-1":    {},
		"_":        {},
	} {
		var got ref
		got.ID, got.Array, got.Task, got.OK = ParseJobID(s)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("ParseJobID(%q) (-want +got):\n%s", s, d)
		}
	}
}

// sacct shows a run's tag only once the run ends: a running run takes the
// plan rubickd last applied to its job from the store. Runs that ended
// keep their tag's plan.
func TestEnrichRunningPlan(t *testing.T) {
	const header = "JobID|JobName|Account|QOS|Partition|State|Submit|Start|End|Elapsed|AllocTRES|AdminComment|User\n"
	const (
		running  = "301|train|physics|normal|gpu|RUNNING|2026-11-02T10:00:00|2026-11-02T10:01:00|Unknown|00:10:00|billing=8,cpu=8,gres/gpu=8,node=1||alice\n"
		requeued = "301|train|physics|normal|gpu|REQUEUED|2026-11-02T10:00:00|2026-11-02T10:01:00|2026-11-02T10:31:00|00:30:00|billing=4,cpu=4,gres/gpu=4,node=1|rubick:v1 model=gpt2 class=best-effort tenant=physics plan=dp4.tp1.pp1.mb2.a1.z0 gen=1|alice\n"
		finished = "301|train|physics|normal|gpu|COMPLETED|2026-11-02T10:00:00|2026-11-02T10:01:00|2026-11-02T11:01:00|01:00:00|billing=8,cpu=8,gres/gpu=8,node=1|rubick:v1 model=gpt2 class=best-effort tenant=physics plan=dp8.tp1.pp1.mb1.a1.z0 gen=1|alice\n"
		pending  = "301|train|physics|normal|gpu|PENDING|2026-11-02T10:32:00|Unknown|Unknown|00:00:00|||alice\n"
	)
	t0 := time.Date(2026, 11, 2, 10, 0, 30, 0, time.UTC)
	p4, p8 := mustPlan(t, "dp4.tp1.pp1.mb2.a1.z0"), mustPlan(t, "dp8.tp1.pp1.mb4.a1.z2")
	on4 := model.Resources{Placement: model.Placement{4}, CPUs: 4}
	on8 := model.Resources{Placement: model.Placement{8}, CPUs: 8}
	action := func(kind string, plan model.Plan, res model.Resources, r store.Result, after time.Duration) store.Action {
		a := store.Action{JobID: 301, Kind: kind, Plan: plan, Resources: res, Result: r, DecidedAt: t0.Add(after)}
		if r == store.ResultFailed {
			a.Error = "slurm: update job 301: rc=1"
		}
		return a
	}
	type plans struct {
		Plans, RunPlans []string
	}
	pl := mustPlan(t, "dp4.tp1.pp1.mb4.a4.z0") // the plan a launch line expresses
	keep := func(plan model.Plan, after time.Duration) store.Reason {
		raw, err := json.Marshal(policy.Action{Kind: policy.Keep, JobID: "301", Plan: plan, Reason: policy.ReasonPenalty,
			Alloc: []policy.NodeAlloc{{Node: "n1", GPUs: 8, CPUs: 8}}})
		if err != nil {
			t.Fatal(err)
		}
		return store.Reason{JobID: 301, At: t0.Add(after), Reason: raw}
	}
	tests := map[string]struct {
		rows    string
		hist    []store.Action // nil: no store
		reasons []store.Reason // newest first
		want    plans
	}{
		// rubickd keeps a running job at the plan its rubick-srun reports:
		// its line's, when it stopped waiting for the plan set after its
		// profiling phase, or when rubickd started it without one.
		"running, kept on the plan it reports": {
			rows:    running,
			hist:    []store.Action{action("start", p8, on8, store.ResultOK, 0)},
			reasons: []store.Reason{keep(pl, time.Minute)},
			want:    plans{[]string{pl.String()}, []string{pl.String()}},
		},
		"running, started without a plan, kept on the plan it reports": {
			rows:    running,
			hist:    []store.Action{action("start", model.Plan{}, on8, store.ResultOK, 0)},
			reasons: []store.Reason{keep(pl, time.Minute)},
			want:    plans{[]string{pl.String()}, []string{pl.String()}},
		},
		"running, restarted since it was kept on another plan": {
			rows:    running,
			hist:    []store.Action{action("start", p4, on4, store.ResultOK, 0), action("restart", p8, on8, store.ResultOK, 2*time.Minute)},
			reasons: []store.Reason{keep(pl, time.Minute)},
			want:    plans{[]string{p8.String()}, []string{p8.String()}},
		},
		// rubickd released it again without a plan (after Slurm requeued
		// it, or after its own preemption): the run has none of rubickd's.
		"running, released without a plan since the applied one": {
			rows: running,
			hist: []store.Action{action("start", p8, on8, store.ResultOK, 0), action("start", model.Plan{}, on8, store.ResultOK, 2*time.Minute)},
			want: plans{[]string{}, []string{""}},
		},
		"running, preempted, released without a plan, kept on the plan it reports": {
			rows: running,
			hist: []store.Action{action("start", p8, on8, store.ResultOK, 0),
				action("preempt", model.Plan{}, model.Resources{}, store.ResultOK, time.Minute),
				action("start", model.Plan{}, on8, store.ResultOK, 2*time.Minute)},
			reasons: []store.Reason{keep(pl, 3*time.Minute)},
			want:    plans{[]string{pl.String()}, []string{pl.String()}},
		},
		"running, an earlier job's decision of the same id": {
			rows:    running,
			hist:    []store.Action{action("start", p8, on8, store.ResultOK, 0)},
			reasons: []store.Reason{keep(pl, -24*time.Hour)},
			want:    plans{[]string{p8.String()}, []string{p8.String()}},
		},
		"running, applied start": {
			rows: running,
			hist: []store.Action{action("start", p8, on8, store.ResultOK, 0)},
			want: plans{[]string{p8.String()}, []string{p8.String()}},
		},
		"running, start failed": {
			rows: running,
			hist: []store.Action{action("start", p8, on8, store.ResultFailed, 0)},
			want: plans{[]string{}, []string{""}},
		},
		// Slurm reused the id: the store's start of it a day before this
		// job's submission is another job's.
		"running, an earlier job's start of the same id": {
			rows: running,
			hist: []store.Action{action("start", p8, on8, store.ResultOK, -24*time.Hour)},
			want: plans{[]string{}, []string{""}},
		},
		"running, newest applied plan after a failed restart and a pending one": {
			rows: running,
			hist: []store.Action{
				action("start", p4, on4, store.ResultOK, 0),
				action("restart", p8, on8, store.ResultOK, time.Minute),
				action("restart", p4, on4, store.ResultFailed, 2*time.Minute),
				action("restart", p4, on4, store.ResultPending, 3*time.Minute),
			},
			want: plans{[]string{p8.String()}, []string{p8.String()}},
		},
		"running after a requeue: the ended run keeps its tag": {
			rows: requeued + strings.Replace(running, "10:01:00", "10:33:00", 1),
			hist: []store.Action{
				action("start", p4, on4, store.ResultOK, 0),
				action("restart", p8, on8, store.ResultOK, 30*time.Minute),
			},
			want: plans{[]string{p4.String(), p8.String()}, []string{p4.String(), p8.String()}},
		},
		"running on the same plan after a requeue": {
			rows: requeued + strings.Replace(running, "10:01:00", "10:33:00", 1),
			hist: []store.Action{action("start", p4, on4, store.ResultOK, 0), action("restart", p4, on4, store.ResultOK, 30*time.Minute)},
			want: plans{[]string{p4.String()}, []string{p4.String(), p4.String()}},
		},
		"running since a preemption whose start is not confirmed": {
			rows: running,
			hist: []store.Action{
				action("start", p8, on8, store.ResultOK, 0),
				action("preempt", model.Plan{}, model.Resources{}, store.ResultOK, time.Minute),
				action("start", p4, on4, store.ResultPending, 2*time.Minute),
			},
			want: plans{[]string{}, []string{""}},
		},
		"running with a tag: the tag's plan, not the store's": {
			rows: strings.Replace(running, "||alice", "|rubick:v1 model=gpt2 class=best-effort tenant=physics plan=dp8.tp1.pp1.mb1.a1.z0 gen=1|alice", 1),
			hist: []store.Action{action("start", p8, on8, store.ResultOK, 0)},
			want: plans{[]string{"dp8.tp1.pp1.mb1.a1.z0"}, []string{"dp8.tp1.pp1.mb1.a1.z0"}},
		},
		"finished: the tag's plan, not the store's": {
			rows: finished,
			hist: []store.Action{action("start", p8, on8, store.ResultOK, 0)},
			want: plans{[]string{"dp8.tp1.pp1.mb1.a1.z0"}, []string{"dp8.tp1.pp1.mb1.a1.z0"}},
		},
		"queued again after a requeue: no run is running": {
			rows: requeued + pending,
			hist: []store.Action{action("start", p4, on4, store.ResultOK, 0), action("restart", p8, on8, store.ResultOK, 30*time.Minute)},
			want: plans{[]string{p4.String()}, []string{p4.String(), ""}},
		},
		"running, no store": {
			rows: running,
			want: plans{[]string{}, []string{""}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := build(t, header+tc.rows, Options{})
			if tc.hist != nil {
				st := &fakeStore{history: map[int64][]store.Action{301: tc.hist}, reasons: map[int64][]store.Reason{301: tc.reasons}}
				if err := r.Enrich(context.Background(), st, "s.db", model.DefaultEnv()); err != nil {
					t.Fatal(err)
				}
			}
			if len(r.Jobs) != 1 {
				t.Fatalf("%d jobs, want 1", len(r.Jobs))
			}
			j := r.Jobs[0]
			got := plans{Plans: j.Plans, RunPlans: []string{}}
			for _, run := range j.Runs {
				got.RunPlans = append(got.RunPlans, run.Plan)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("job 301's plans (-want +got):\n%s", d)
			}
		})
	}
}

// sacct shows a run's tag only once the run ends: a guaranteed job in its
// first run takes its request from the tag rubickd stored with its newest
// action, for the SLO check, below_request and the GPUs of a run whose
// AllocTRES lacks gres/gpu. A request in sacct's tag stays.
func TestEnrichStoreRequest(t *testing.T) {
	const header = "JobID|JobName|Account|QOS|Partition|State|Submit|Start|End|Elapsed|AllocTRES|AdminComment|User\n"
	running := func(tres, tag string) string {
		return "401|train|physics|normal|gpu|RUNNING|2026-11-02T10:00:00|2026-11-02T10:31:00|Unknown|00:10:00|" + tres + "|" + tag + "|alice\n"
	}
	const (
		on4     = "billing=8,cpu=8,gres/gpu=4,node=1"
		on2     = "billing=4,cpu=4,gres/gpu=2,node=1"
		noGRES  = "billing=8,cpu=8,node=1"
		tagBase = "rubick:v1 model=gpt2 class=guaranteed tenant=physics gen=1"
		reqA    = "n1.g2.c4.m32000"
		reqB    = "n1.g4.c8.m64000"
	)
	env := model.DefaultEnv()
	pred := model.Predictor{Spec: gpt2Spec(), Params: model.Priors(), Env: env}
	resB := model.Resources{Placement: model.Placement{4}, CPUs: 8, HostMemGB: 64000.0 / 1024}
	resA := model.Resources{Placement: model.Placement{2}, CPUs: 4, HostMemGB: 32000.0 / 1024}
	bestB, _, err := pred.BestPlan(resB, nil)
	if err != nil {
		t.Fatal(err)
	}
	bestA, _, err := pred.BestPlan(resA, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := tput(t, pred, bestA.String(), resA.Placement, resA.CPUs), tput(t, pred, bestB.String(), resB.Placement, resB.CPUs); a >= b {
		t.Fatalf("precondition: %s on 2 GPUs gives %v samples/s, want below %v (%s on 4)", bestA, a, b, bestB)
	}
	t0 := time.Date(2026, 11, 2, 10, 30, 0, 0, time.UTC)
	start := func(plan model.Plan, res model.Resources, tag string) []store.Action {
		return []store.Action{{JobID: 401, Kind: "start", Plan: plan, Resources: res, Result: store.ResultOK, DecidedAt: t0, Tag: tag}}
	}
	type view struct {
		Request        string
		SLOViolated    *bool
		BelowRequest   bool
		GPUs           []int
		GPUSources     []string
		GPUTRESMissing bool
		GPUHours       *float64
		TRESNote       bool
	}
	tests := map[string]struct {
		rows       string
		hist       []store.Action // nil: no store
		want       view
		wantDetail string
	}{
		"no tag in sacct: the store's request, its best plan meets the SLO": {
			rows: running(on4, ""),
			hist: start(bestB, resB, tagBase+" plan="+bestB.String()+" req="+reqB),
			want: view{Request: reqB, SLOViolated: ptr(false), GPUs: []int{4}, GPUSources: []string{GPUsFromTRES}, GPUHours: ptr(600 * 4 / 3600.0)},
		},
		"no tag in sacct: the store's request, a plan on 2 GPUs violates it": {
			rows: running(on2, ""),
			hist: start(bestA, resA, tagBase+" plan="+bestA.String()+" req="+reqB),
			want: view{Request: reqB, SLOViolated: ptr(true), BelowRequest: true, GPUs: []int{2}, GPUSources: []string{GPUsFromTRES},
				GPUHours: ptr(600 * 2 / 3600.0)},
			wantDetail: "on 4)",
		},
		"the newest stored tag with a request": {
			rows: running(on2, ""),
			hist: append(start(bestA, resA, tagBase+" plan="+bestA.String()+" req="+reqA),
				store.Action{JobID: 401, Kind: "restart", Plan: bestA, Resources: resA, Result: store.ResultFailed, Error: "rc=1",
					DecidedAt: t0.Add(time.Minute), Tag: tagBase + " plan=" + bestA.String() + " req=" + reqB},
				store.Action{JobID: 401, Kind: "resume", Result: store.ResultOK, DecidedAt: t0.Add(2 * time.Minute), Tag: tagBase}),
			want: view{Request: reqB, SLOViolated: ptr(true), BelowRequest: true, GPUs: []int{2}, GPUSources: []string{GPUsFromTRES},
				GPUHours: ptr(600 * 2 / 3600.0)},
		},
		"no gres/gpu in AllocTRES: the store's request gives the GPUs": {
			rows: running(noGRES, ""),
			hist: start(bestB, resB, tagBase+" plan="+bestB.String()+" req="+reqB),
			want: view{Request: reqB, SLOViolated: ptr(false), GPUs: []int{4}, GPUSources: []string{GPUsFromRequest}, GPUHours: ptr(600 * 4 / 3600.0)},
		},
		"a request in sacct's tag stays": {
			rows: running(on2, tagBase+" plan="+bestA.String()+" req="+reqA),
			hist: start(bestA, resA, tagBase+" plan="+bestA.String()+" req="+reqB),
			want: view{Request: reqA, SLOViolated: ptr(false), GPUs: []int{2}, GPUSources: []string{GPUsFromTRES}, GPUHours: ptr(600 * 2 / 3600.0)},
		},
		"a stored tag without a request: unchecked": {
			rows:       running(on4, ""),
			hist:       start(bestB, resB, tagBase+" plan="+bestB.String()),
			want:       view{GPUs: []int{4}, GPUSources: []string{GPUsFromTRES}, GPUHours: ptr(600 * 4 / 3600.0)},
			wantDetail: "no req= in the tag",
		},
		"no gres/gpu and no request anywhere": {
			rows:       running(noGRES, ""),
			hist:       start(bestB, resB, tagBase+" plan="+bestB.String()),
			want:       view{GPUs: []int{0}, GPUSources: []string{GPUsMissing}, GPUTRESMissing: true, GPUHours: ptr(0.0), TRESNote: true},
			wantDetail: "no req= in the tag",
		},
		"no store": {
			rows: running(on4, ""),
			want: view{GPUs: []int{4}, GPUSources: []string{GPUsFromTRES}, GPUHours: ptr(600 * 4 / 3600.0)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := build(t, header+tc.rows, Options{})
			if tc.hist != nil {
				st := &fakeStore{
					jobs:    map[int64]store.Job{401: {ID: 401, ModelType: "gpt2", Class: store.Guaranteed, State: "RUNNING"}},
					history: map[int64][]store.Action{401: tc.hist},
					specs:   map[string]model.Spec{"gpt2": gpt2Spec()},
					fits:    map[string]store.Fit{"gpt2": {FitResult: model.FitResult{Params: model.Priors()}}},
				}
				if err := r.Enrich(context.Background(), st, "s.db", env); err != nil {
					t.Fatal(err)
				}
			}
			if len(r.Jobs) != 1 {
				t.Fatalf("%d jobs, want 1", len(r.Jobs))
			}
			j := r.Jobs[0]
			got := view{Request: j.Request, SLOViolated: j.SLOViolated, BelowRequest: j.BelowRequest,
				GPUTRESMissing: j.GPUTRESMissing, GPUHours: j.GPUHours,
				TRESNote: slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "AllocTRES without gres/gpu") })}
			for _, run := range j.Runs {
				got.GPUs, got.GPUSources = append(got.GPUs, run.GPUs), append(got.GPUSources, run.GPUSource)
			}
			if d := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
				t.Errorf("job 401 (-want +got):\n%s\nslo_detail: %s", d, j.SLODetail)
			}
			if !strings.Contains(j.SLODetail, tc.wantDetail) {
				t.Errorf("slo_detail %q lacks %q", j.SLODetail, tc.wantDetail)
			}
			if d := cmp.Diff(tc.want.BelowRequest, r.Overall.BelowRequest == 1); d != "" {
				t.Errorf("overall below_request (-want +got):\n%s", d)
			}
		})
	}
}

// Each job of a reused id (Slurm reuses ids after its state is reset) gets
// the store's actions of its own time only, and the store's one record of
// the id, the later job's, gives no class to the earlier one.
func TestEnrichReusedJobID(t *testing.T) {
	const header = "JobID|State|Submit|Start|End|AllocTRES|AdminComment\n"
	const tres = "cpu=8,gres/gpu=8,node=1"
	t0 := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return t0.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	p4, p8 := mustPlan(t, "dp4.tp1.pp1.mb2.a1.z0"), mustPlan(t, "dp8.tp1.pp1.mb4.a1.z2")
	on4 := model.Resources{Placement: model.Placement{4}, CPUs: 4}
	on8 := model.Resources{Placement: model.Placement{8}, CPUs: 8}
	hist := []store.Action{
		{JobID: 143, Kind: "start", Plan: p4, Resources: on4, Result: store.ResultOK, DecidedAt: at(0, 9)},
		{JobID: 143, Kind: "restart", Plan: p8, Resources: on8, Result: store.ResultOK, DecidedAt: at(1, 0)},
		{JobID: 143, Kind: "start", Plan: p8, Resources: on8, Result: store.ResultOK, DecidedAt: at(6, 29)},
	}
	// The morning's job, untagged (its tag lost with the reset), then the
	// afternoon's, still running.
	rows := header +
		"143|REQUEUED|2026-11-02T08:00:00|2026-11-02T08:10:00|2026-11-02T09:00:00|" + tres + "|\n" +
		"143|COMPLETED|2026-11-02T09:00:00|2026-11-02T09:05:00|2026-11-02T11:00:00|" + tres + "|\n" +
		"143|RUNNING|2026-11-02T14:00:00|2026-11-02T14:30:00|Unknown|" + tres + "|\n"
	r := build(t, rows, Options{})
	st := &fakeStore{
		jobs:    map[int64]store.Job{143: {ID: 143, ModelType: "gpt2", Class: store.BestEffort, State: "RUNNING", Submitted: at(6, 0)}},
		history: map[int64][]store.Action{143: hist},
	}
	if err := r.Enrich(context.Background(), st, "s.db", model.DefaultEnv()); err != nil {
		t.Fatal(err)
	}
	type job struct {
		ModelType, Class, State string
		StorePlans              []time.Time
		Plans                   []string
	}
	want := []job{
		{NoModel, "", "COMPLETED", []time.Time{at(0, 9), at(1, 0)}, []string{}},
		{"gpt2", "best-effort", "RUNNING", []time.Time{at(6, 29)}, []string{p8.String()}},
	}
	var got []job
	for _, j := range r.Jobs {
		g := job{j.ModelType, j.Class, j.State, nil, j.Plans}
		for _, pc := range j.StorePlans {
			g.StorePlans = append(g.StorePlans, pc.At)
		}
		got = append(got, g)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("jobs 143 (-want +got):\n%s", d)
	}
	// The afternoon's job not in the rows (still held, or after --until):
	// the store's record, its class and model type, and its plans from
	// its submission on are still not the morning's.
	r = build(t, header+
		"143|REQUEUED|2026-11-02T08:00:00|2026-11-02T08:10:00|2026-11-02T09:00:00|"+tres+"|\n"+
		"143|COMPLETED|2026-11-02T09:00:00|2026-11-02T09:05:00|2026-11-02T11:00:00|"+tres+"|\n", Options{})
	st.jobs[143] = store.Job{ID: 143, ModelType: "gpt2", Class: store.Guaranteed, State: "PENDING", Submitted: at(6, 0)}
	if err := r.Enrich(context.Background(), st, "s.db", model.DefaultEnv()); err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, j := range r.Jobs {
		g := job{j.ModelType, j.Class, j.State, nil, j.Plans}
		for _, pc := range j.StorePlans {
			g.StorePlans = append(g.StorePlans, pc.At)
		}
		got = append(got, g)
	}
	if d := cmp.Diff(want[:1], got); d != "" {
		t.Errorf("the morning's job 143 alone (-want +got):\n%s", d)
	}
}

// A running guaranteed job that rubickd keeps on another plan than it
// applied last (RanPlan: rubick-srun trains on its launch line as it is)
// has its SLO checked at the plan it trains on: the applied one it never
// ran does not count, and a job started without a plan is checked too.
func TestEnrichSLOOfPlanKeptOn(t *testing.T) {
	const (
		header  = "JobID|JobName|Account|QOS|Partition|State|Submit|Start|End|Elapsed|AllocTRES|AdminComment|User\n"
		running = "401|train|physics|normal|gpu|RUNNING|2026-11-02T10:00:00|2026-11-02T10:31:00|Unknown|00:10:00|billing=8,cpu=8,gres/gpu=4,node=1||alice\n"
		tag     = "rubick:v1 model=gpt2 class=guaranteed tenant=physics gen=1 req=n1.g4.c8.m64000"
	)
	env, res, best, slow := sloPlans(t)
	t0 := time.Date(2026, 11, 2, 10, 30, 0, 0, time.UTC)
	keep := func(plan model.Plan) []store.Reason {
		raw, err := json.Marshal(policy.Action{Kind: policy.Keep, JobID: "401", Plan: plan, Reason: policy.ReasonPenalty,
			Alloc: []policy.NodeAlloc{{Node: "n1", GPUs: 4, CPUs: 8, MemGB: 64000.0 / 1024}}})
		if err != nil {
			t.Fatal(err)
		}
		return []store.Reason{{JobID: 401, At: t0.Add(time.Minute), Reason: raw}}
	}
	start := func(plan model.Plan) []store.Action {
		return []store.Action{{JobID: 401, Kind: "start", Plan: plan, Resources: res, Result: store.ResultOK, DecidedAt: t0, Tag: tag}}
	}
	tests := map[string]struct {
		hist    []store.Action
		reasons []store.Reason
		want    *bool
		detail  string
	}{
		"kept on the plan applied":                   {hist: start(best), reasons: keep(best), want: ptr(false)},
		"kept on a slower plan than the one applied": {hist: start(best), reasons: keep(slow), want: ptr(true), detail: slow.String()},
		"started without a plan, kept on the best":   {hist: start(model.Plan{}), reasons: keep(best), want: ptr(false)},
		"started without a plan, kept on a slower":   {hist: start(model.Plan{}), reasons: keep(slow), want: ptr(true), detail: slow.String()},
		"started without a plan, no decision":        {hist: start(model.Plan{}), detail: "no plan with resources recorded"},
		// Its first run trained on the slower plan; released again without
		// a plan, it is kept on the best: the first run still counts.
		"released again without a plan, kept on the best": {
			hist:    append(start(slow), store.Action{JobID: 401, Kind: "start", Resources: res, Result: store.ResultOK, DecidedAt: t0.Add(30 * time.Second), Tag: tag}),
			reasons: keep(best), want: ptr(true), detail: slow.String(),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			checkEnrichedSLO(t, header+running, "RUNNING", tc.hist, tc.reasons, env, tc.want, tc.detail)
		})
	}
}

// A run that ended has the plan it trained on where rubickd's newest
// decision within it, later than every action before its end, keeps it on
// another plan than its tag's (rubick-srun stopped waiting for the plan
// set after its profiling phase); otherwise its tag's.
func TestEnrichEndedRunPlan(t *testing.T) {
	const (
		header = "JobID|State|Submit|Start|End|AllocTRES|AdminComment\n"
		tres   = "cpu=8,gres/gpu=4,node=1"
	)
	t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return t0.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	x, y, z := mustPlan(t, "dp4.tp1.pp1.mb2.a1.z0"), mustPlan(t, "dp4.tp1.pp1.mb1.a2.z0"), mustPlan(t, "dp2.tp2.pp1.mb2.a1.z0")
	on4 := model.Resources{Placement: model.Placement{4}, CPUs: 8}
	tag := func(p model.Plan, extra string) string {
		return "rubick:v1 model=gpt2 class=best-effort gen=1 plan=" + p.String() + extra
	}
	row := func(id, state string, submit, start, end time.Time, tag string) string {
		f := func(t time.Time) string { return t.Format("2006-01-02T15:04:05") }
		return id + "|" + state + "|" + f(submit) + "|" + f(start) + "|" + f(end) + "|" + tres + "|" + tag + "\n"
	}
	decided := func(kind string, p model.Plan, when time.Time) store.Action {
		return store.Action{JobID: 501, Kind: kind, Plan: p, Resources: on4, Result: store.ResultOK, DecidedAt: when}
	}
	reason := func(kind policy.Kind, p model.Plan, when time.Time) store.Reason {
		raw, err := json.Marshal(policy.Action{Kind: kind, JobID: "501", Plan: p, Reason: policy.ReasonPenalty})
		if err != nil {
			t.Fatal(err)
		}
		// A cycle a minute from midnight.
		return store.Reason{CycleID: int64(when.Sub(t0) / time.Minute), JobID: 501, At: when, Reason: raw}
	}
	// One run, started on x, given x again after its profiling phase
	// (rubickd's annotate) at 10:10, completed at 12:00.
	completed := row("501", "COMPLETED", at(9, 50), at(10, 0), at(12, 0), tag(x, ""))
	profiled := []store.Action{decided("start", x, at(9, 59)), decided("annotate", x, at(10, 10))}
	tests := map[string]struct {
		rows    string
		hist    []store.Action
		reasons []store.Reason // newest first
		storeID int64          // the id the store knows the job by; 501 when 0
		want    [][]string     // per job: its runs' plans, then its plans
	}{
		"kept on another plan after its last action": {
			rows: completed, hist: profiled,
			reasons: []store.Reason{reason(policy.Keep, y, at(11, 50)), reason(policy.Keep, x, at(10, 5))},
			want:    [][]string{{y.String()}, {y.String()}},
		},
		"kept on its tag's plan": {
			rows: completed, hist: profiled,
			reasons: []store.Reason{reason(policy.Keep, x, at(11, 50)), reason(policy.Keep, y, at(10, 20))},
			want:    [][]string{{x.String()}, {x.String()}},
		},
		"kept on another plan before rubickd applied its tag's": {
			rows: row("501", "COMPLETED", at(9, 50), at(10, 0), at(10, 31), tag(x, "")),
			hist: []store.Action{decided("start", x, at(9, 59)), decided("annotate", x, at(10, 30))},
			// During the profiling phase rubickd names the best plan for
			// what the job holds.
			reasons: []store.Reason{reason(policy.Keep, y, at(10, 20))},
			want:    [][]string{{x.String()}, {x.String()}},
		},
		"a profiling run": {
			rows: row("501", "COMPLETED", at(9, 50), at(10, 0), at(12, 0), tag(x, " profile=1")),
			hist: profiled[:1], reasons: []store.Reason{reason(policy.Keep, y, at(11, 50))},
			want: [][]string{{x.String()}, {x.String()}},
		},
		"kept on another plan after it ended": {
			rows: completed, hist: profiled,
			reasons: []store.Reason{reason(policy.Keep, y, at(12, 5)), reason(policy.Keep, x, at(11, 50))},
			want:    [][]string{{x.String()}, {x.String()}},
		},
		"no decision within it (pruned)": {
			rows: completed, hist: profiled,
			want: [][]string{{x.String()}, {x.String()}},
		},
		// rubickd restarts it on z: its cycle decides the restart, and the
		// run ends after the checkpoint; the keep before is what it trained
		// on. The next run trains on its tag's.
		"restarted by rubickd": {
			rows: row("501", "REQUEUED", at(9, 50), at(10, 0), at(11, 0), tag(x, "")) +
				row("501", "COMPLETED", at(11, 0), at(11, 5), at(12, 0), tag(z, "")),
			hist: []store.Action{decided("start", x, at(9, 59)), decided("annotate", x, at(10, 10)), decided("restart", z, at(10, 59))},
			reasons: []store.Reason{
				reason(policy.Keep, z, at(11, 30)), reason(policy.Restart, z, at(10, 59)), reason(policy.Keep, y, at(10, 58)),
			},
			want: [][]string{{y.String(), z.String()}, {y.String(), z.String()}},
		},
		// Slurm requeued it after a node failure, and its next run, which
		// trains on its tag's, has no decision of its own (pruned): the
		// first run's keep is not the second's.
		"requeued by Slurm": {
			rows: row("501", "NODE_FAIL", at(9, 50), at(10, 0), at(11, 0), tag(x, "")) +
				row("501", "COMPLETED", at(11, 0), at(11, 5), at(12, 0), tag(x, "")),
			hist: profiled, reasons: []store.Reason{reason(policy.Keep, y, at(10, 50))},
			want: [][]string{{y.String(), x.String()}, {y.String(), x.String()}},
		},
		// Slurm reused the id: each job's runs get its own decisions.
		"an earlier job of the id": {
			rows: row("501", "COMPLETED", at(7, 50), at(8, 0), at(9, 0), tag(x, " sub=1793605800")) +
				row("501", "COMPLETED", at(13, 50), at(14, 0), at(15, 0), tag(x, " sub=1793627400")),
			hist: []store.Action{
				decided("start", x, at(7, 59)), decided("annotate", x, at(8, 10)),
				decided("start", x, at(13, 59)), decided("annotate", x, at(14, 10)),
			},
			reasons: []store.Reason{reason(policy.Keep, z, at(14, 50)), reason(policy.Keep, y, at(8, 50))},
			want:    [][]string{{y.String()}, {y.String()}, {z.String()}, {z.String()}},
		},
		"a task of a job array": {
			rows: row("200_3", "COMPLETED", at(9, 50), at(10, 0), at(12, 0), tag(x, "")), storeID: 210,
			hist:    profiled,
			reasons: []store.Reason{reason(policy.Keep, y, at(11, 50))},
			want:    [][]string{{y.String()}, {y.String()}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := build(t, header+tc.rows, Options{})
			id := tc.storeID
			if id == 0 {
				id = 501
			}
			st := &fakeStore{
				jobs:    map[int64]store.Job{id: {ID: id, ModelType: "gpt2", Class: store.BestEffort, State: "COMPLETED", ArrayJobID: 200, ArrayTaskID: 3}},
				history: map[int64][]store.Action{id: tc.hist},
				reasons: map[int64][]store.Reason{id: tc.reasons},
			}
			if err := r.Enrich(context.Background(), st, "s.db", model.DefaultEnv()); err != nil {
				t.Fatal(err)
			}
			var got [][]string
			for _, j := range r.Jobs {
				var runs []string
				for _, run := range j.Runs {
					runs = append(runs, run.Plan)
				}
				got = append(got, runs, j.Plans)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("runs' plans, plans (-want +got):\n%s", d)
			}
			if len(r.Jobs) != len(tc.want)/2 {
				t.Errorf("%d jobs, want %d", len(r.Jobs), len(tc.want)/2)
			}
			if st.spanReads > len(r.Jobs) {
				t.Errorf("%d reads of reasons within runs for %d jobs, want one per job at most", st.spanReads, len(r.Jobs))
			}
		})
	}
}

// A guaranteed job's SLO check prices what its runs that ended trained
// on: a plan rubickd applied that its runs never trained on does not
// count, one that another of its runs trained on does.
func TestEnrichSLOOfEndedRuns(t *testing.T) {
	const (
		header = "JobID|State|Submit|Start|End|AllocTRES|AdminComment\n"
		tres   = "billing=8,cpu=8,gres/gpu=4,node=1"
		tag    = "rubick:v1 model=gpt2 class=guaranteed tenant=physics gen=1 req=n1.g4.c8.m64000 plan="
	)
	env, res, best, slow := sloPlans(t)
	t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return t0.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	keep := func(plan model.Plan, when time.Time) store.Reason {
		raw, err := json.Marshal(policy.Action{Kind: policy.Keep, JobID: "401", Plan: plan, Reason: policy.ReasonPenalty})
		if err != nil {
			t.Fatal(err)
		}
		return store.Reason{CycleID: int64(when.Sub(t0) / time.Minute), JobID: 401, At: when, Reason: raw}
	}
	start := func(plan model.Plan) []store.Action {
		return []store.Action{{JobID: 401, Kind: "start", Plan: plan, Resources: res, Result: store.ResultOK, DecidedAt: at(9, 59)}}
	}
	one := func(plan model.Plan) string {
		return "401|COMPLETED|2026-11-02T09:50:00|2026-11-02T10:00:00|2026-11-02T12:00:00|" + tres + "|" + tag + plan.String() + "\n"
	}
	// Slurm requeued it after a node failure, on the same start.
	two := "401|NODE_FAIL|2026-11-02T09:50:00|2026-11-02T10:00:00|2026-11-02T11:00:00|" + tres + "|" + tag + slow.String() + "\n" +
		"401|COMPLETED|2026-11-02T11:00:00|2026-11-02T11:05:00|2026-11-02T12:00:00|" + tres + "|" + tag + slow.String() + "\n"
	tests := map[string]struct {
		rows    string
		hist    []store.Action
		reasons []store.Reason // newest first
		want    *bool
		detail  string
	}{
		"kept on the plan applied":                       {rows: one(best), hist: start(best), reasons: []store.Reason{keep(best, at(11, 50))}, want: ptr(false)},
		"kept on a slower plan than the one applied":     {rows: one(best), hist: start(best), reasons: []store.Reason{keep(slow, at(11, 50))}, want: ptr(true), detail: slow.String()},
		"kept on the best, a slower plan applied":        {rows: one(slow), hist: start(slow), reasons: []store.Reason{keep(best, at(11, 50))}, want: ptr(false)},
		"no decision within it: the slower plan applied": {rows: one(slow), hist: start(slow), want: ptr(true), detail: slow.String()},
		"the first run kept on the best, the second trained on the slower": {
			rows: two, hist: start(slow), reasons: []store.Reason{keep(slow, at(11, 50)), keep(best, at(10, 50))},
			want: ptr(true), detail: slow.String(),
		},
		"both runs kept on the best": {
			rows: two, hist: start(slow), reasons: []store.Reason{keep(best, at(11, 50)), keep(best, at(10, 50))}, want: ptr(false),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			checkEnrichedSLO(t, header+tc.rows, "COMPLETED", tc.hist, tc.reasons, env, tc.want, tc.detail)
		})
	}
}

// sloPlans is the setup of the SLO checks of a guaranteed gpt2 job asking
// for 4 GPUs, 8 CPUs and 64,000 MB: the environment, those resources, the
// best plan on them, and a plan slower there.
func sloPlans(t *testing.T) (model.Env, model.Resources, model.Plan, model.Plan) {
	t.Helper()
	env := model.DefaultEnv()
	pred := model.Predictor{Spec: gpt2Spec(), Params: model.Priors(), Env: env}
	res := model.Resources{Placement: model.Placement{4}, CPUs: 8, HostMemGB: 64000.0 / 1024}
	best, _, err := pred.BestPlan(res, nil)
	if err != nil {
		t.Fatal(err)
	}
	slow := mustPlan(t, "dp4.tp1.pp1.mb1.a16.z0+gc")
	if s, b := tput(t, pred, slow.String(), res.Placement, res.CPUs), tput(t, pred, best.String(), res.Placement, res.CPUs); s >= b {
		t.Fatalf("precondition: %s gives %v samples/s, want below %v (%s)", slow, s, b, best)
	}
	return env, res, best, slow
}

// checkEnrichedSLO enriches the report of sacct text with a store that
// holds guaranteed gpt2 job 401 in state, with hist and reasons, and
// checks its SLO verdict: want, and a detail that holds detail.
func checkEnrichedSLO(t *testing.T, text, state string, hist []store.Action, reasons []store.Reason, env model.Env, want *bool, detail string) {
	t.Helper()
	r := build(t, text, Options{})
	st := &fakeStore{
		jobs:    map[int64]store.Job{401: {ID: 401, ModelType: "gpt2", Class: store.Guaranteed, State: state}},
		history: map[int64][]store.Action{401: hist},
		reasons: map[int64][]store.Reason{401: reasons},
		specs:   map[string]model.Spec{"gpt2": gpt2Spec()},
		fits:    map[string]store.Fit{"gpt2": {FitResult: model.FitResult{Params: model.Priors()}}},
	}
	if err := r.Enrich(context.Background(), st, "s.db", env); err != nil {
		t.Fatal(err)
	}
	j := r.Jobs[0]
	if d := cmp.Diff(want, j.SLOViolated); d != "" || !strings.Contains(j.SLODetail, detail) {
		t.Errorf("slo_violated (-want +got):\n%s\nslo_detail %q, want it to hold %q", d, j.SLODetail, detail)
	}
}
