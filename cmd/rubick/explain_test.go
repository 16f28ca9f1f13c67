package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/store"
)

func explainGPT2Spec() model.Spec {
	return model.Spec{Name: "gpt2", Params: 1.5e9, Layers: 48, Hidden: 1600, Heads: 25, SeqLen: 1024, GlobalBatch: 64, ForwardMs: 812.5}
}

// seedStore writes a store with model types gpt2 (fitted) and bert (not),
// a running gpt2 job 42 with two decisions, and a queued rigid job 43.
func seedExplainStore(t *testing.T) (string, model.Plan) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	clock := fixedNow.Add(-2 * time.Hour)
	st, err := store.Open(ctx, path, store.WithClock(func() time.Time { clock = clock.Add(time.Minute); return clock }))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.UpsertModelType(ctx, explainGPT2Spec()); err != nil {
		t.Fatal(err)
	}
	bert := model.Spec{Name: "bert", Params: 3.4e8, Layers: 24, Hidden: 1024, Heads: 16, SeqLen: 512, GlobalBatch: 128, ForwardMs: 100}
	if err := st.UpsertModelType(ctx, bert); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddFit(ctx, "gpt2", model.FitResult{Params: model.Priors(), RMSLE: 0.05, MAPE: 4.5, Samples: 9, Pinned: []string{"k_off"}}, store.SourceProfile); err != nil {
		t.Fatal(err)
	}
	plan, err := model.ParsePlan("dp4.tp1.pp1.mb2.a8.z0")
	if err != nil {
		t.Fatal(err)
	}
	res := model.Resources{Placement: model.Placement{4}, CPUs: 16, HostMemGB: 128}
	if err := st.UpsertJob(ctx, store.Job{ID: 42, ModelType: "gpt2", Class: store.Guaranteed, Tenant: "physics", State: "RUNNING", User: "alice",
		Submitted: fixedNow.Add(-3 * time.Hour), Deferred: fixedNow.Add(-150 * time.Minute), LastPlan: plan, LastResources: res}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertJob(ctx, store.Job{ID: 43, Class: store.BestEffort, State: "PENDING"}); err != nil {
		t.Fatal(err)
	}
	start := policy.Action{Kind: policy.Start, JobID: "42", Plan: plan, Throughput: 50, Reason: policy.ReasonSLO,
		Detail: "admitted at its minimum", Alloc: []policy.NodeAlloc{{Node: "n1", GPUs: 4, CPUs: 16, MemGB: 128}}}
	raw, _ := json.Marshal(start)
	d, err := st.RecordDecision(ctx, store.Decision{Policy: "rubick", Duration: time.Millisecond,
		Reasons: map[int64]json.RawMessage{42: raw}, Actions: []store.Action{{JobID: 42, Kind: "start", Plan: plan, Resources: res}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.MarkApplied(ctx, d.Actions[0].ID, store.ResultOK, nil); err != nil {
		t.Fatal(err)
	}
	// A later cycle's reason carries its minimum resources and its place
	// in the best-effort order.
	keep := json.RawMessage(`{"kind":"keep","job":"42","plan":{"dp":4,"tp":1,"pp":1,"micro_batch":2,"accum":8},"throughput":50,` +
		`"reason":"restart-penalty","detail":"a restart would cost 4% of its run time","min_res":{"gpus":2},` +
		`"order":{"position":3,"of":12,"queued_ahead":1,"by":"slope","slope":0.31,"time_left_h":2.25,"weighed_slope":0.2067}}`)
	if _, err := st.RecordDecision(ctx, store.Decision{Policy: "rubick", Reasons: map[int64]json.RawMessage{42: keep, 43: json.RawMessage(`"queued"`)}}); err != nil {
		t.Fatal(err)
	}
	return path, plan
}

// A job whose id Slurm reused (its state reset, or past MaxJobId) is
// explained by its own records only: the decisions and plan history the
// store holds of the id from before its submission are an earlier job's.
func TestExplainReusedID(t *testing.T) {
	path, _ := seedExplainStore(t)
	ctx := context.Background()
	for name, tc := range map[string]struct {
		submitted     time.Time
		reasons, hist int
	}{
		// The seed's job, submitted before its decisions.
		"the same job": {submitted: fixedNow.Add(-3 * time.Hour), reasons: 2, hist: 1},
		// A new job of id 42, submitted after them.
		"a later job of its id": {submitted: fixedNow.Add(-10 * time.Minute)},
	} {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, path, store.WithClock(func() time.Time { return fixedNow.Add(-time.Minute) }))
			if err != nil {
				t.Fatal(err)
			}
			err = st.UpsertJob(ctx, store.Job{ID: 42, ModelType: "gpt2", Class: store.Guaranteed, State: "PENDING", Submitted: tc.submitted})
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			ex := explainJSON(t, path, "42")
			if len(ex.Reasons) != tc.reasons || len(ex.History) != tc.hist {
				t.Errorf("%d reasons and %d plan changes, want %d and %d", len(ex.Reasons), len(ex.History), tc.reasons, tc.hist)
			}
		})
	}
}

// A job later cycles leave alone for a reason stored before (a hold that
// lasts) is last seen at the newest of them, not at its last record.
func TestExplainLastSeen(t *testing.T) {
	path, _ := seedExplainStore(t)
	ctx := context.Background()
	st, err := store.Open(ctx, path, store.WithClock(func() time.Time { return fixedNow.Add(-time.Minute) }))
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.RecordDecision(ctx, store.Decision{Policy: "rubick", Unchanged: []int64{42}})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	ex := explainJSON(t, path, "42")
	if !ex.LastSeen.Equal(d.At) || !ex.Updated.Before(d.At) {
		t.Errorf("last_seen %v, updated %v; want last seen at cycle %d's %v, after the job's last record", ex.LastSeen, ex.Updated, d.CycleID, d.At)
	}
	var out bytes.Buffer
	if err := explainCmd(ctx, []string{"42", "--store", path}, &out, io.Discard, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	if want := "last seen " + utcTime(d.At) + ","; !strings.Contains(out.String(), want) {
		t.Errorf("explain prints:\n%s\nwant %q", out.String(), want)
	}
}

// A job rubickd recorded as gone (it ended while rubickd was stopped) is
// explained as such, with where to read how it ended.
func TestExplainGone(t *testing.T) {
	path, _ := seedExplainStore(t)
	ctx := context.Background()
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	err = st.UpsertJob(ctx, store.Job{ID: 44, ModelType: "gpt2", Class: store.BestEffort, State: daemon.StateGone})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := explainCmd(ctx, []string{"44", "--store", path}, &out, io.Discard, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"state GONE", "ended while rubickd was stopped", "sacct -j 44"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explain prints:\n%s\nwant %q", out.String(), want)
		}
	}
}

func TestExplainJSON(t *testing.T) {
	path, plan := seedExplainStore(t)
	var out, errb bytes.Buffer
	if err := explainCmd(context.Background(), []string{"42", "--store", path, "--json", "--top", "3"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	var ex explanation
	if err := json.Unmarshal(out.Bytes(), &ex); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if ex.ModelType != "gpt2" || ex.User != "alice" || ex.Plan != plan.String() || ex.Placement != "4" || ex.CPUs != 16 || ex.State != "RUNNING" {
		t.Errorf("job fields = %+v", ex)
	}
	if ex.Waited == nil || !ex.Waited.Equal(fixedNow.Add(-150*time.Minute)) {
		t.Errorf("last_seen_waiting = %v, want %v", ex.Waited, fixedNow.Add(-150*time.Minute))
	}
	if ex.Fit == nil || ex.Fit.Samples != 9 || ex.Fit.RMSLE != 0.05 || ex.Fit.Origin != "profile" || !cmp.Equal(ex.Fit.Pinned, []string{"k_off"}) {
		t.Errorf("fit = %+v", ex.Fit)
	}
	// Alternatives: the top 3 by predicted throughput, plus the current
	// plan when it is not among them, each priced like the daemon does.
	p := model.Predictor{Spec: explainGPT2Spec(), Params: model.Priors(), Env: model.DefaultEnv()}
	res := model.Resources{Placement: model.Placement{4}, CPUs: 16, HostMemGB: 128}
	cur, err := p.Throughput(plan, res)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Throughput == nil || *ex.Throughput != cur {
		t.Errorf("throughput = %v, want %v", ex.Throughput, cur)
	}
	if n := len(ex.Alternatives); n < 3 || n > 4 {
		t.Fatalf("alternatives = %d, want 3 (+ current)", n)
	}
	sawCurrent := false
	for i, a := range ex.Alternatives {
		want, err := p.Throughput(mustParseTestPlan(t, a.Plan), res)
		if err != nil || want != a.Throughput {
			t.Errorf("alternative %s: %v samples/s, model says %v (%v)", a.Plan, a.Throughput, want, err)
		}
		if i > 0 && i < 3 && a.Throughput > ex.Alternatives[i-1].Throughput {
			t.Errorf("alternatives not sorted: %+v", ex.Alternatives)
		}
		sawCurrent = sawCurrent || (a.Current && a.Plan == plan.String())
	}
	if !sawCurrent {
		t.Errorf("current plan missing from %+v", ex.Alternatives)
	}
	wantOrder := &orderView{CycleID: 2, At: ex.Reasons[0].At, Order: policy.Order{Position: 3, Of: 12, QueuedAhead: 1, By: policy.OrderSlope,
		Slope: 0.31, TimeLeftH: 2.25, WeighedSlope: 0.2067}}
	if d := cmp.Diff(&policy.Size{GPUs: 2}, ex.MinRes); d != "" {
		t.Errorf("min_res (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantOrder, ex.Order); d != "" || ex.Slope == nil || *ex.Slope != 0.31 {
		t.Errorf("slope %v, order (-want +got):\n%s", ex.Slope, d)
	}
	wantReasons := []struct{ kind, reason string }{{"keep", "restart-penalty"}, {"start", "slo-min-res"}}
	if len(ex.Reasons) != 2 {
		t.Fatalf("reasons = %+v", ex.Reasons)
	}
	for i, w := range wantReasons {
		if r := ex.Reasons[i]; r.Kind != w.kind || r.Reason != w.reason || r.Policy != "rubick" {
			t.Errorf("reason %d = %+v, want %v", i, r, w)
		}
	}
	if ex.Reasons[1].Placement != "4" || ex.Reasons[1].Detail != "admitted at its minimum" {
		t.Errorf("start reason = %+v", ex.Reasons[1])
	}
	if len(ex.History) != 1 || ex.History[0].Result != "ok" || ex.History[0].Plan != plan.String() {
		t.Errorf("history = %+v", ex.History)
	}
}

// A job whose launch line trains with a global batch of its own (128,
// gpt2's is 64) is shown so, with its current plan and every alternative
// priced at that batch; so is one that has not reported yet, at the batch
// of the plan it was given.
func TestExplainOwnGlobalBatch(t *testing.T) {
	for _, reported := range []bool{true, false} {
		t.Run(fmt.Sprintf("reported=%v", reported), func(t *testing.T) { testExplainOwnGlobalBatch(t, reported) })
	}
}

func testExplainOwnGlobalBatch(t *testing.T, reported bool) {
	path, _ := seedExplainStore(t)
	ctx := context.Background()
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	// rubickd restarted the job on a plan of the batch its line trains with.
	plan := mustParseTestPlan(t, "dp4.tp1.pp1.mb4.a8.z0")
	res := model.Resources{Placement: model.Placement{4}, CPUs: 16, HostMemGB: 128}
	d, err := st.RecordDecision(ctx, store.Decision{Policy: "rubick", Actions: []store.Action{{JobID: 42, Kind: "restart", Plan: plan, Resources: res}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.MarkApplied(ctx, d.Actions[0].ID, store.ResultOK, nil); err != nil {
		t.Fatal(err)
	}
	if reported {
		if err := st.SetJobLaunch(ctx, 42, "alice", store.Launch{GlobalBatch: 128}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	var out, errb bytes.Buffer
	if err := explainCmd(ctx, []string{"42", "--store", path, "--json", "--top", "50"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	var ex explanation
	if err := json.Unmarshal(out.Bytes(), &ex); err != nil {
		t.Fatal(err)
	}
	if ex.GlobalBatch != 128 || ex.GlobalBatchReported != reported || ex.Throughput == nil || len(ex.Alternatives) == 0 {
		t.Fatalf("global batch %d (reported %v), throughput %v, %d alternatives; want 128 (%v), the current plan priced, alternatives",
			ex.GlobalBatch, ex.GlobalBatchReported, ex.Throughput, len(ex.Alternatives), reported)
	}
	current := false
	for _, a := range ex.Alternatives {
		p := mustParseTestPlan(t, a.Plan)
		if p.DP*p.MicroBatch*p.Accum != 128 {
			t.Errorf("alternative %s is not of global batch 128", a.Plan)
		}
		current = current || a.Current
	}
	if !current {
		t.Errorf("alternatives %+v lack the current plan %s", ex.Alternatives, plan)
	}
	out.Reset()
	if err := explainCmd(ctx, []string{"42", "--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	from := map[bool]string{true: "reported by rubick-srun", false: "planned from its batch script or its user's last job"}[reported]
	if !strings.Contains(out.String(), "trains with a global batch of 128, not its model type's ("+from) {
		t.Errorf("explain lacks the job's global batch, %s:\n%s", from, out.String())
	}
}

// A job whose launch line cannot run TP or PP is shown so, and its
// alternatives are only plans it can run.
func TestExplainCannot(t *testing.T) {
	path, _ := seedExplainStore(t)
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetJobLaunch(context.Background(), 42, "alice", store.Launch{Cannot: model.FeatureTP | model.FeaturePP}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, top := range []string{"3", "50"} {
		var out, errb bytes.Buffer
		if err := explainCmd(context.Background(), []string{"42", "--store", path, "--json", "--top", top}, &out, &errb, testEnv(t)); err != nil {
			t.Fatal(err)
		}
		var ex explanation
		if err := json.Unmarshal(out.Bytes(), &ex); err != nil {
			t.Fatal(err)
		}
		if ex.Cannot != "tp,pp" || len(ex.Alternatives) == 0 {
			t.Fatalf("cannot %q, %d alternatives", ex.Cannot, len(ex.Alternatives))
		}
		for _, a := range ex.Alternatives {
			if p := mustParseTestPlan(t, a.Plan); p.TP > 1 || p.PP > 1 {
				t.Errorf("--top %s: alternative %s uses what the line cannot run", top, a.Plan)
			}
		}
	}
	var out, errb bytes.Buffer
	if err := explainCmd(context.Background(), []string{"42", "--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "its launch line cannot run plans with tp,pp") {
		t.Errorf("text output lacks the launch line's limits:\n%s", out.String())
	}
}

func mustParseTestPlan(t *testing.T, s string) model.Plan {
	t.Helper()
	p, err := model.ParsePlan(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExplainText(t *testing.T) {
	path, plan := seedExplainStore(t)
	addRestartCost(t, path, 42, "gpt2", plan, 12500*time.Millisecond)
	// A time limit changes no plan, and a refused plan ran on the job's
	// allocation: neither has a placement to show.
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := st.RecordPlan(context.Background(), store.Action{JobID: 42, Kind: "timelimit"})
	if err == nil {
		err = st.MarkApplied(context.Background(), tl.ID, store.ResultOK, nil)
	}
	if err == nil {
		_, err = st.RecordRefusal(context.Background(), 42, plan, "it uses tp, which the line cannot express")
	}
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	// Flags before the job id, and the store from the environment.
	env := testEnv(t)
	env.getenv = func(k string) string {
		if k == storeEnv {
			return path
		}
		return ""
	}
	if err := explainCmd(context.Background(), []string{"--reasons", "1", "42"}, &out, &errb, env); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"job 42: user alice, model gpt2, class guaranteed, tenant physics, state RUNNING",
		"last seen held or waiting for its --begin or dependencies at 2026-11-08T09:30:00Z; its age in the queue counts from then",
		"fit #1: RMSLE 0.0500, MAPE 4.50 %, 9 samples, profile",
		"current plan dp4.tp1.pp1.mb2.a8.z0 on 4, 16 CPUs",
		"(current)",
		"minimum resources: 2 GPUs, the fewest with which a plan reaches its request's throughput",
		"best-effort order at cycle 2: 3rd of 12 jobs (1 queued ahead of it), slope 0.31 per GPU, 2.25 h left by its time limit, weighed 0.207",
		"keep (restart-penalty) dp4.tp1.pp1.mb2.a8.z0 on -, 50 samples/s, 3rd of 12 in order: a restart",
		"plan history:",
		"restart dp4.tp1.pp1.mb2.a8.z0 on 4, 16 CPUs: ok (restart cost 12.5s, measured)",
		"timelimit: ok\n",
		"refused dp4.tp1.pp1.mb2.a8.z0: failed: it uses tp, which the line cannot express\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "slo-min-res") {
		t.Errorf("--reasons 1 showed the older reason:\n%s", out.String())
	}

	out.Reset()
	if err := explainCmd(context.Background(), []string{"43", "--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"job 43: user -, model (none)", `cycle 2 rubick: "queued"`, "note: no model type the store has a spec for (none given, or an unknown one"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("rigid job output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "waited") {
		t.Errorf("job 43, which never waited for a --begin or dependency, is said to:\n%s", out.String())
	}

	// A queued job's decisions have no plan to show.
	st, err = store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertJobs(context.Background(), []store.Job{{ID: 44, ModelType: "gpt2", Class: store.BestEffort, State: "PENDING"},
		{ID: 45, ModelType: "gpt2", Class: store.Guaranteed, State: "PENDING"}}); err != nil {
		t.Fatal(err)
	}
	queued, _ := json.Marshal(policy.Action{Kind: policy.Keep, JobID: "44", Reason: policy.ReasonNoResources, Detail: "queued 10m0s",
		Order: &policy.Order{Position: 2, Of: 5, QueuedAhead: 1, By: policy.OrderSlope, Slope: 0.5, WeighedSlope: 0.5}})
	quota, _ := json.Marshal(policy.Action{Kind: policy.Keep, JobID: "45", Reason: policy.ReasonQuota, MinRes: &policy.Size{GPUs: 4},
		Admission: &policy.Admission{Position: 2, Of: 3, By: policy.OrderShortest}})
	_, err = st.RecordDecision(context.Background(), store.Decision{Policy: "rubick", Reasons: map[int64]json.RawMessage{44: queued, 45: quota}})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := explainCmd(context.Background(), []string{"44", "--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"best-effort order at cycle 3: 2nd of 5 jobs (1 queued ahead of it), slope 0.5 per GPU\n",
		"cycle 3 rubick: keep (no-resources), 2nd of 5 in order: queued 10m0s\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("queued job output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := explainCmd(context.Background(), []string{"45", "--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"minimum resources: 4 GPUs,",
		"admission order at cycle 3: 2nd of 3 queued guaranteed jobs, shortest time limit first; each is admitted within its tenant's quota\n",
		"cycle 3 rubick: keep (quota), 2nd of 3 to admit\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("queued guaranteed job output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestExplainErrors(t *testing.T) {
	path, _ := seedExplainStore(t)
	missing := filepath.Join(t.TempDir(), "nope.db")
	tests := map[string]struct {
		args  []string
		is    error
		parts []string
	}{
		"unknown job":      {args: []string{"999", "--store", path}, is: store.ErrNotFound, parts: []string{"job 999", path}},
		"missing store":    {args: []string{"42", "--store", missing}, parts: []string{missing, "does not exist"}},
		"no job id":        {args: []string{"--store", path}, is: errUsage},
		"two job ids":      {args: []string{"1", "2"}, is: errUsage},
		"bad job id":       {args: []string{"12x"}, is: errUsage},
		"bad array task":   {args: []string{"12_x"}, is: errUsage},
		"no array":         {args: []string{"0_1"}, is: errUsage},
		"unknown task":     {args: []string{"40_9", "--store", path}, is: store.ErrNotFound, parts: []string{"job 40_9", "split off"}},
		"negative top":     {args: []string{"42", "--top", "-1"}, is: errUsage, parts: []string{"--top=-1 must be >= 0"}},
		"negative reasons": {args: []string{"42", "--reasons", "-2"}, is: errUsage, parts: []string{"--reasons=-2 must be >= 0"}},
		"unknown flag":     {args: []string{"42", "--verbose"}, is: errUsage},
		"flag after id ":   {args: []string{"42", "--store"}, is: errUsage},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := explainCmd(context.Background(), tc.args, &out, &errb, testEnv(t))
			if err == nil {
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error = %v, want %v", err, tc.is)
			}
			for _, p := range tc.parts {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("error %q lacks %q", err, p)
				}
			}
		})
	}
}

// A task of a job array is named as squeue shows it (A_T), and said so.
func TestExplainArrayTask(t *testing.T) {
	path, _ := seedExplainStore(t)
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	err = st.UpsertJob(context.Background(), store.Job{ID: 44, ModelType: "bert", Class: store.BestEffort, State: "PENDING", ArrayJobID: 40, ArrayTaskID: 3})
	// The whole array was held before the task was split off.
	arrayWait := fixedNow.Add(-20 * time.Minute).UTC()
	if err == nil {
		err = st.UpsertJob(context.Background(), store.Job{ID: 40, ModelType: "bert", Class: store.BestEffort, State: "PENDING", ArrayJobID: 40, Deferred: arrayWait})
	}
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := explainCmd(context.Background(), []string{"40_3", "--store", path, "--json"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatalf("explain 40_3: %v\n%s", err, errb.String())
	}
	var got struct {
		JobID     int64      `json:"job_id"`
		ArrayTask string     `json:"array_task"`
		ModelType string     `json:"model_type"`
		Waited    *time.Time `json:"last_seen_waiting"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.JobID != 44 || got.ArrayTask != "40_3" || got.ModelType != "bert" {
		t.Errorf("explain 40_3 = %+v, want job 44, task 40_3 of bert", got)
	}
	if got.Waited == nil || !got.Waited.Equal(arrayWait) {
		t.Errorf("explain 40_3 last seen waiting %v, want the array's wait %v", got.Waited, arrayWait)
	}
	out.Reset()
	if err := explainCmd(context.Background(), []string{"44", "--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(out.String(), "\n"); !strings.HasPrefix(first, "job 44 (40_3): user -, model bert") {
		t.Errorf("first line %q, want the job named with its array task", first)
	}
}

func TestOrderString(t *testing.T) {
	for _, tc := range []struct {
		o    policy.Order
		want string
	}{
		{policy.Order{Position: 1, Of: 3, By: policy.OrderSlope, Slope: 0.5, WeighedSlope: 0.5},
			"1st of 3 jobs (0 queued ahead of it), slope 0.5 per GPU"},
		{policy.Order{Position: 2, Of: 3, QueuedAhead: 1, By: policy.OrderStarvation, Slope: 0.5, TimeLeftH: 4, WeighedSlope: 0.25},
			"2nd of 3 jobs (1 queued ahead of it), ahead of younger jobs: past the starvation age or near its deadline; slope 0.5 per GPU, 4.00 h left by its time limit, weighed 0.25"},
		{policy.Order{Position: 13, Of: 23, QueuedAhead: 4, By: policy.OrderFairShare, Slope: 1, TimeLeftH: 4, NoTimeLimit: true, WeighedSlope: 0.5},
			"13th of 23 jobs (4 queued ahead of it), by fair-share factor, then slope 1 per GPU, no time limit (counted as the longest, 4.00 h left), weighed 0.5"},
		{policy.Order{Position: 22, Of: 23, By: policy.OrderPriority, Slope: 1, WeighedSlope: 1},
			"22nd of 23 jobs (0 queued ahead of it), by Slurm priority, then slope 1 per GPU"},
		{policy.Order{Position: 111, Of: 203, By: policy.OrderSlope, Slope: 1, WeighedSlope: 1},
			"111th of 203 jobs (0 queued ahead of it), slope 1 per GPU"},
	} {
		if got := orderString(tc.o); got != tc.want {
			t.Errorf("orderString(%+v)\n got %q\nwant %q", tc.o, got, tc.want)
		}
	}
}

func TestAdmissionString(t *testing.T) {
	const quota = "; each is admitted within its tenant's quota"
	for _, tc := range []struct {
		by, want string
	}{
		{policy.AdmitDeadline, "1st of 4 queued guaranteed jobs, ahead of the rest: near the latest start its --deadline allows" + quota},
		{policy.AdmitAge, "1st of 4 queued guaranteed jobs, ahead of shorter jobs: queued past policy.guaranteed_age" + quota},
		{policy.OrderShortest, "1st of 4 queued guaranteed jobs, shortest time limit first" + quota},
		{policy.OrderSubmit, "1st of 4 queued guaranteed jobs, in submission order" + quota},
		{policy.OrderPriority, "1st of 4 queued guaranteed jobs, by Slurm priority" + quota},
	} {
		if got := admissionString(policy.Admission{Position: 1, Of: 4, By: tc.by}); got != tc.want {
			t.Errorf("admissionString(by %s)\n got %q\nwant %q", tc.by, got, tc.want)
		}
	}
}

// explain shows the job's places in the orders from the newest of its
// last --reasons decisions that has them, but from none older than a
// decision that left it out of the policy's hands (held, left alone,
// released as submitted): it is in no order since. Its minimum resources
// are the job's own, and stay.
func TestExplainPlaces(t *testing.T) {
	ordered := policy.Action{Kind: policy.Keep, Reason: policy.ReasonNoResources, Order: &policy.Order{Position: 3, Of: 5, By: policy.OrderSlope}}
	admitted := policy.Action{Kind: policy.Keep, Reason: policy.ReasonQuota, MinRes: &policy.Size{GPUs: 4},
		Admission: &policy.Admission{Position: 1, Of: 2, By: policy.OrderShortest}}
	penalty := policy.Action{Kind: policy.Keep, Reason: policy.ReasonPenalty, Alloc: []policy.NodeAlloc{{Node: "n1", GPUs: 2}}}
	ignored := policy.Action{Kind: policy.Keep, Reason: daemon.ReasonIgnored, Detail: "held by its user"}
	held := policy.Action{Kind: policy.Keep, Reason: "held", Detail: "requeued and held by its user or an administrator"}
	rigid := policy.Action{Kind: policy.Start, Reason: "as-submitted", Detail: "--exclusive"}
	zero := policy.Action{Kind: policy.Keep, Reason: "job-limit", Detail: "waits for QOS normal MaxWall=0 to be raised: Slurm starts no job it applies to"}
	type places struct{ Order, Admission int64 } // the cycles they come from; 0: none
	for _, tc := range []struct {
		name    string
		cycles  []policy.Action // oldest first, one a cycle
		reasons string
		want    places
		minRes  bool
	}{
		{name: "queued", cycles: []policy.Action{ordered, ordered}, want: places{Order: 2}},
		{name: "frozen by the restart penalty", cycles: []policy.Action{ordered, penalty}, want: places{Order: 1}},
		{name: "frozen past the window", cycles: []policy.Action{ordered, penalty}, reasons: "1"},
		{name: "held by its user since", cycles: []policy.Action{ordered, ignored}},
		{name: "requeued held since", cycles: []policy.Action{ordered, penalty, held}},
		{name: "released as submitted since", cycles: []policy.Action{ordered, rigid}},
		{name: "held for a per-job limit of 0 since", cycles: []policy.Action{ordered, zero}},
		{name: "queued again once released", cycles: []policy.Action{ordered, ignored, ordered}, want: places{Order: 3}},
		{name: "guaranteed, queued", cycles: []policy.Action{admitted}, want: places{Admission: 1}, minRes: true},
		{name: "guaranteed, held since", cycles: []policy.Action{admitted, ignored}, minRes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "rubick.db")
			st, err := store.Open(ctx, path, store.WithClock(func() time.Time { return fixedNow }))
			if err != nil {
				t.Fatal(err)
			}
			err = st.UpsertJob(ctx, store.Job{ID: 1, Class: store.BestEffort, State: "PENDING", User: "bob"})
			for _, a := range tc.cycles {
				if err != nil {
					break
				}
				a.JobID = "1"
				raw, _ := json.Marshal(a)
				_, err = st.RecordDecision(ctx, store.Decision{Policy: "rubick", Reasons: map[int64]json.RawMessage{1: raw}})
			}
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"1", "--store", path, "--json"}
			if tc.reasons != "" {
				args = append(args, "--reasons", tc.reasons)
			}
			var out, errb bytes.Buffer
			if err := explainCmd(ctx, args, &out, &errb, testEnv(t)); err != nil {
				t.Fatal(err)
			}
			var ex explanation
			if err := json.Unmarshal(out.Bytes(), &ex); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			var got places
			if ex.Order != nil {
				got.Order = ex.Order.CycleID
			}
			if ex.Admission != nil {
				got.Admission = ex.Admission.CycleID
			}
			if d := cmp.Diff(tc.want, got); d != "" || (ex.MinRes != nil) != tc.minRes || (ex.Slope != nil) != (got.Order > 0) {
				t.Errorf("places (-want +got):\n%s\nmin_res %v (want %v), slope %v", d, ex.MinRes, tc.minRes, ex.Slope)
			}
		})
	}
}

// limitsStore records the limits explain reads a job's reasons with.
type limitsStore struct {
	*store.Store
	limits []int
}

func (s *limitsStore) Reasons(ctx context.Context, jobID int64, limit int) ([]store.Reason, error) {
	s.limits = append(s.limits, limit)
	return s.Store.Reasons(ctx, jobID, limit)
}

// --reasons N reads N reasons, and --reasons 0 none: the store's limit of
// 0 reads every reason the job has.
func TestExplainReasonsRead(t *testing.T) {
	path, _ := seedExplainStore(t)
	ctx := context.Background()
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, n := range []int{0, 1, 5} {
		ls := &limitsStore{Store: st}
		ex, err := explain(ctx, ls, path, 42, 3, n, fixedNow)
		if err != nil {
			t.Fatal(err)
		}
		// The newest is read with --reasons 0 too: it may name the plan
		// the job trains on (report.RanPlan).
		want := []int{max(n, 1)}
		if d := cmp.Diff(want, ls.limits); d != "" || len(ex.Reasons) != min(n, 2) {
			t.Errorf("--reasons %d: %d reasons shown, limits read (-want +got):\n%s", n, len(ex.Reasons), d)
		}
	}
}

// A job recorded as holding no GPUs (queued again after a preemption) is
// shown the plan it had last, not as its current one.
func TestExplainLastPlan(t *testing.T) {
	for _, tc := range []struct {
		state, plan, mark string
	}{
		{"RUNNING", "current plan dp4.tp1.pp1.mb2.a8.z0 on 4, 16 CPUs, 128 GB host memory: ", "(current)"},
		{"SUSPENDED", "current plan dp4.tp1.pp1.mb2.a8.z0 on 4, 16 CPUs, 128 GB host memory: ", "(current)"},
		{"PENDING", "last plan dp4.tp1.pp1.mb2.a8.z0 on 4, 16 CPUs, 128 GB host memory: ", "(last)"},
		{"COMPLETED", "last plan dp4.tp1.pp1.mb2.a8.z0 on 4, 16 CPUs, 128 GB host memory: ", "(last)"},
	} {
		t.Run(tc.state, func(t *testing.T) {
			path, _ := seedExplainStore(t)
			ctx := context.Background()
			st, err := store.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			j, err := st.Job(ctx, 42)
			if err == nil {
				j.State = tc.state
				err = st.UpsertJob(ctx, j)
			}
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if err := explainCmd(ctx, []string{"42", "--store", path, "--top", "1"}, &out, &errb, testEnv(t)); err != nil {
				t.Fatal(err)
			}
			now := ""
			if tc.mark == "(last)" {
				now = "; the job holds no GPUs now (" + tc.state + ")"
			}
			var line string
			for l := range strings.Lines(out.String()) {
				if strings.Contains(l, " plan dp4") {
					line = l
				}
			}
			if !strings.HasPrefix(line, tc.plan) || !strings.HasSuffix(line, " samples/s predicted"+now+"\n") ||
				!strings.Contains(out.String(), "vs "+strings.Trim(tc.mark, "()")+"\n") || !strings.Contains(out.String(), tc.mark+"\n") {
				t.Errorf("state %s: plan line %q, want %q...%q, alternatives marked %s:\n%s", tc.state, line, tc.plan, now, tc.mark, out.String())
			}
		})
	}
}

// A current fit that puts its model type's spec in doubt (k_bwd at its
// bound, or a fit that misses its own samples) is said so by explain, in
// text and JSON, and by status, in a note; the seeded fit has no doubt.
func TestFitDoubtShown(t *testing.T) {
	path, _ := seedExplainStore(t)
	ctx := context.Background()
	doubt := "it misses its own samples by 534 % on average"
	for _, doubted := range []bool{false, true} {
		if doubted {
			st, err := store.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.AddFitAs(ctx, "gpt2", model.FitResult{Params: model.Priors(), RMSLE: 1.7, MAPE: 534.4, Samples: 9}, store.SourceOnline, store.PromoteAlways); err != nil {
				t.Fatal(err)
			}
			st.Close()
		}
		var out, errb bytes.Buffer
		if err := explainCmd(ctx, []string{"42", "--store", path, "--json"}, &out, &errb, testEnv(t)); err != nil {
			t.Fatal(err)
		}
		var ex explanation
		if err := json.Unmarshal(out.Bytes(), &ex); err != nil {
			t.Fatal(err)
		}
		want := []string{}
		if doubted {
			want = []string{doubt}
		}
		if d := cmp.Diff(want, ex.Fit.Doubts); d != "" {
			t.Errorf("doubted=%v: explain JSON doubts (-want +got):\n%s", doubted, d)
		}
		out.Reset()
		if err := explainCmd(ctx, []string{"42", "--store", path}, &out, &errb, testEnv(t)); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "  doubt: "+doubt+" (the model type's spec is the administrator's"); got != doubted {
			t.Errorf("doubted=%v: explain text shows the doubt %v:\n%s", doubted, got, out.String())
		}
		out.Reset()
		if err := statusCmd(ctx, []string{"--url", "http://127.0.0.1:1", "--store", path}, &out, &errb, testEnv(t)); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "note: the fit of gpt2 is in doubt: "+doubt+"; check its spec"); got != doubted {
			t.Errorf("doubted=%v: status notes the doubt %v:\n%s", doubted, got, out.String())
		}
	}
}

// A job of a type without a fit is said to run on its own request while
// one job of the type at a time profiles it, not to wait.
func TestExplainUnfittedType(t *testing.T) {
	path, _ := seedExplainStore(t)
	ctx := context.Background()
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertJob(ctx, store.Job{ID: 44, ModelType: "bert", Class: store.BestEffort, State: "RUNNING", User: "bob"}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	var out, errb bytes.Buffer
	if err := explainCmd(ctx, []string{"44", "--store", path, "--json"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	var ex explanation
	if err := json.Unmarshal(out.Bytes(), &ex); err != nil {
		t.Fatal(err)
	}
	want := []string{`model type "bert" has no fit yet: the job runs on its own request, and one job of the type at a time profiles it (its rubick-srun, before training); ` +
		"rubickd fits the type once seven configurations, or three of a finished profiling phase, are measured (docs/rubick-srun.md, Profiling phase)"}
	if d := cmp.Diff(want, ex.Notes); d != "" {
		t.Errorf("notes (-want +got):\n%s", d)
	}
}

// explainJSON runs explain --json on job id of the store at path and
// returns what it wrote.
func explainJSON(t *testing.T, path, id string) explanation {
	t.Helper()
	var out bytes.Buffer
	if err := explainCmd(context.Background(), []string{id, "--store", path, "--json"}, &out, io.Discard, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	var ex explanation
	if err := json.Unmarshal(out.Bytes(), &ex); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return ex
}

// A job whose rubick-srun stopped waiting for the plan rubickd set after
// its profiling phase trains on its launch line as it is, and rubickd
// keeps it at the plan it reports: explain shows that plan as the current
// one, until rubickd acts on the job again. So too for a job rubickd
// started without a plan, on what it holds.
func TestExplainRanPlan(t *testing.T) {
	t.Run("started without a plan", testExplainRanUnplanned)
	const ran, set = "dp4.tp1.pp1.mb4.a4.z0", "dp4.tp1.pp1.mb2.a8.z0"
	keep := func(plan string) json.RawMessage {
		p := mustParseTestPlan(t, plan)
		raw, err := json.Marshal(policy.Action{Kind: policy.Keep, JobID: "42", Plan: p, Throughput: 40, Reason: policy.ReasonPenalty})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for name, tc := range map[string]struct {
		reasons   []json.RawMessage // recorded after the seed's, in order
		actAfter  bool              // a restart onto set after them
		want      string
		wantNoted bool
	}{
		"kept on the reported plan":       {reasons: []json.RawMessage{keep(ran)}, want: ran, wantNoted: true},
		"kept on the plan set":            {reasons: []json.RawMessage{keep(ran), keep(set)}, want: set},
		"restarted since":                 {reasons: []json.RawMessage{keep(ran)}, actAfter: true, want: set},
		"newest decision not a keep":      {reasons: []json.RawMessage{keep(ran), json.RawMessage(`{"kind":"restart","job":"42","reason":"grow"}`)}, want: set},
		"another writer's reason, newest": {reasons: []json.RawMessage{keep(ran), json.RawMessage(`"free text"`)}, want: set},
	} {
		t.Run(name, func(t *testing.T) {
			path, _ := seedExplainStore(t)
			ctx := context.Background()
			st := openAfterSeed(t, path)
			for _, r := range tc.reasons {
				if _, err := st.RecordDecision(ctx, store.Decision{Policy: "rubick", Reasons: map[int64]json.RawMessage{42: r}}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.actAfter {
				res := model.Resources{Placement: model.Placement{4}, CPUs: 16, HostMemGB: 128}
				d, err := st.RecordDecision(ctx, store.Decision{Policy: "rubick",
					Actions: []store.Action{{JobID: 42, Kind: "restart", Plan: mustParseTestPlan(t, set), Resources: res}}})
				if err != nil {
					t.Fatal(err)
				}
				if err := st.MarkApplied(ctx, d.Actions[0].ID, store.ResultOK, nil); err != nil {
					t.Fatal(err)
				}
			}
			ex, err := explain(ctx, st, path, 42, 50, 0, fixedNow.Add(time.Hour))
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			var current []string
			for _, a := range ex.Alternatives {
				if a.Current {
					current = append(current, a.Plan)
				}
			}
			noted := slices.ContainsFunc(ex.Notes, func(n string) bool { return strings.Contains(n, "reports it training on "+ran) })
			if diff := cmp.Diff([]string{tc.want, tc.want}, []string{ex.Plan, strings.Join(current, ",")}); diff != "" || noted != tc.wantNoted {
				t.Errorf("current plan and alternative (-want +got):\n%s\nnoted %v, want %v; notes %q", diff, noted, tc.wantNoted, ex.Notes)
			}
		})
	}
}

// openAfterSeed opens the seeded store with a clock that ticks a minute a
// read from fixedNow, after every record seedExplainStore wrote.
func openAfterSeed(t *testing.T, path string) *store.Store {
	t.Helper()
	clock := fixedNow
	st, err := store.Open(context.Background(), path, store.WithClock(func() time.Time { clock = clock.Add(time.Minute); return clock }))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A job rubickd started without a plan (another job of its type profiled
// it) trains on its launch line as it is, on what it holds: job 44 from its
// first start, and job 42, which ran on the seed's plan, was preempted and
// started again so. The store's last plan is then the first run's; the run
// is explained as rubick report reads it.
func testExplainRanUnplanned(t *testing.T) {
	type shown struct {
		Plan, Placement string
		CPUs            int
		HostMemGB       float64
		Priced          bool
		Note            bool
	}
	for name, tc := range map[string]struct {
		id      int64
		actions []string // applied, without a plan, after the seed's
		ran     string
		alloc   []policy.NodeAlloc
		want    shown
	}{
		"first start": {id: 44, actions: []string{"start"}, ran: "dp4.tp1.pp1.mb4.a4.z0",
			alloc: []policy.NodeAlloc{{Node: "n1", GPUs: 2, CPUs: 8, MemGB: 64}, {Node: "n2", GPUs: 2, CPUs: 8, MemGB: 64}},
			want:  shown{"dp4.tp1.pp1.mb4.a4.z0", "22", 16, 128, true, true}},
		"started again after a preemption": {id: 42, actions: []string{"preempt", "start"}, ran: "dp2.tp1.pp1.mb4.a8.z0",
			alloc: []policy.NodeAlloc{{Node: "n2", GPUs: 2, CPUs: 8, MemGB: 64}},
			want:  shown{"dp2.tp1.pp1.mb4.a8.z0", "2", 8, 64, true, true}},
	} {
		t.Run(name, func(t *testing.T) {
			path, _ := seedExplainStore(t)
			ctx := context.Background()
			st := openAfterSeed(t, path)
			defer st.Close()
			if tc.id == 44 {
				if err := st.UpsertJob(ctx, store.Job{ID: 44, ModelType: "gpt2", Class: store.BestEffort, State: "RUNNING", Submitted: fixedNow}); err != nil {
					t.Fatal(err)
				}
			}
			for _, kind := range tc.actions {
				d, err := st.RecordDecision(ctx, store.Decision{Policy: "rubick", Actions: []store.Action{{JobID: tc.id, Kind: kind}}})
				if err != nil {
					t.Fatal(err)
				}
				if err := st.MarkApplied(ctx, d.Actions[0].ID, store.ResultOK, nil); err != nil {
					t.Fatal(err)
				}
			}
			raw, err := json.Marshal(policy.Action{Kind: policy.Keep, JobID: strconv.FormatInt(tc.id, 10), Plan: mustParseTestPlan(t, tc.ran),
				Throughput: 40, Reason: policy.ReasonPenalty, Alloc: tc.alloc})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.RecordDecision(ctx, store.Decision{Policy: "rubick", Reasons: map[int64]json.RawMessage{tc.id: raw}}); err != nil {
				t.Fatal(err)
			}
			ex, err := explain(ctx, st, path, tc.id, 50, 0, fixedNow.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			got := shown{ex.Plan, ex.Placement, ex.CPUs, ex.HostMemGB, ex.Throughput != nil,
				slices.ContainsFunc(ex.Notes, func(n string) bool { return strings.Contains(n, "(rubickd started it without a plan)") })}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("job %d (-want +got):\n%s\nnotes %q", tc.id, diff, ex.Notes)
			}
		})
	}
}

// TestAgeString: an age just under the next unit keeps its unit (before,
// 59.6 s printed as "60s" and 59m40s as "60m").
func TestAgeString(t *testing.T) {
	for s, want := range map[float64]string{0: "0s", 59.6: "59s", 60: "1m", 3580: "59m", 3600: "1.0h", 50 * 3600: "2.1d"} {
		if got := ageString(s); got != want {
			t.Errorf("ageString(%v) = %q, want %q", s, got, want)
		}
	}
}

// A current plan the memory model finds does not fit (a launch line's
// own, kept as it is) is not priced among the best plans: a note says so,
// rather than leave it out unsaid.
func TestExplainCurrentPlanOutOfTheList(t *testing.T) {
	spec := explainGPT2Spec()
	p := model.Predictor{Spec: spec, Params: model.Priors(), Env: model.DefaultEnv()}
	var res model.Resources
	var infeasible model.Plan
	for _, g := range []int{1, 2, 4} {
		r := model.Resources{Placement: model.Placement{g}, CPUs: 4 * g, HostMemGB: 128}
		for _, mb := range []int{1, 2, 4, 8, 16, 32, 64} {
			pl := model.Plan{DP: g, TP: 1, PP: 1, MicroBatch: mb, Accum: 64 / (g * mb)}
			if 64%(g*mb) == 0 && infeasible == (model.Plan{}) && p.Feasible(pl, r) != nil {
				infeasible, res = pl, r
			}
		}
	}
	if infeasible == (model.Plan{}) {
		t.Fatal("no plan the memory model refuses: pick another")
	}
	path, _ := seedExplainStore(t)
	ctx := context.Background()
	st := openAfterSeed(t, path)
	defer st.Close()
	if err := st.UpsertJob(ctx, store.Job{ID: 42, ModelType: "gpt2", Class: store.BestEffort, State: "RUNNING", LastPlan: infeasible, LastResources: res}); err != nil {
		t.Fatal(err)
	}
	ex, err := explain(ctx, st, path, 42, 3, 0, fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	listed := slices.ContainsFunc(ex.Alternatives, func(a alternative) bool { return a.Current })
	noted := slices.ContainsFunc(ex.Notes, func(n string) bool {
		return strings.Contains(n, "current plan "+infeasible.String()+" is not among the plans listed: the memory model")
	})
	if !listed && !noted {
		t.Errorf("current plan %s neither listed nor noted; notes %q", infeasible, ex.Notes)
	}
}
