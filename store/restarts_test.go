package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

func TestReportedSamplesByJob(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if err := s.UpsertModelType(ctx, gpt2()); err != nil { // t0
		t.Fatal(err)
	}
	a := sample(8, 1, 1, model.Placement{8}, 1.5)
	b := sample(4, 1, 1, model.Placement{4}, 2.5)
	if err := s.AddSamples(ctx, "gpt2", []model.Sample{a}, 5, SourceProfile); err != nil { // t0+1s
		t.Fatal(err)
	}
	if err := s.AddReported(ctx, "gpt2", a, 5, 40); err != nil { // t0+2s
		t.Fatal(err)
	}
	if err := s.AddReported(ctx, "gpt2", b, 6, 0); err != nil { // t0+3s
		t.Fatal(err)
	}
	if err := s.AddReported(ctx, "gpt2", b, 5, 60); err != nil { // t0+4s
		t.Fatal(err)
	}
	got, err := s.JobSamples(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	want := []StoredSample{
		{ID: 1, ModelType: "gpt2", Sample: a, SourceJob: 5, Source: SourceProfile, Created: sec(1), Iteration: -1},
		{ID: 2, ModelType: "gpt2", Sample: a, SourceJob: 5, Source: SourceOnline, Created: sec(2), Iteration: 40},
		{ID: 4, ModelType: "gpt2", Sample: b, SourceJob: 5, Source: SourceOnline, Created: sec(4), Iteration: 60},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("JobSamples(5) (-want +got):\n%s", d)
	}
	// The newest reported ones per job, the profile's left out; job 7 has
	// none.
	recent, err := s.RecentJobSamples(ctx, []int64{5, 6, 7}, 1)
	if err != nil {
		t.Fatal(err)
	}
	wantRecent := map[int64][]StoredSample{
		5: {want[2]},
		6: {{ID: 3, ModelType: "gpt2", Sample: b, SourceJob: 6, Source: SourceOnline, Created: sec(3), Iteration: 0}},
	}
	if d := cmp.Diff(wantRecent, recent); d != "" {
		t.Errorf("RecentJobSamples(5, 6, 7; 1) (-want +got):\n%s", d)
	}
	if recent, err = s.RecentJobSamples(ctx, []int64{5}, 5); err != nil || cmp.Diff(want[1:], recent[5]) != "" {
		t.Errorf("RecentJobSamples(5; 5) = %v, %v; want its two reported samples, oldest first", recent, err)
	}
	// More ids than one statement takes: job 6 comes in the second.
	ids := make([]int64, 0, maxVars+1)
	for i := range maxVars {
		ids = append(ids, int64(1000+i))
	}
	if recent, err = s.RecentJobSamples(ctx, append(ids, 6), 5); err != nil || len(recent) != 1 || len(recent[6]) != 1 {
		t.Errorf("RecentJobSamples(%d ids) = %v, %v; want job 6's one sample", len(ids)+1, recent, err)
	}
	for name, tc := range map[string]struct {
		job  int64
		iter int
		want string
	}{
		"negative iteration": {5, -1, "iteration=-1"},
		"no job":             {0, 3, "source_job=0"},
	} {
		if err := s.AddReported(ctx, "gpt2", a, tc.job, tc.iter); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: AddReported = %v, want ErrInvalid naming %s", name, err, tc.want)
		}
	}
}

func TestRestartCosts(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	for _, spec := range []model.Spec{gpt2(), {Name: "bert", Params: 3.4e8, Layers: 24, Hidden: 1024, Heads: 16,
		SeqLen: 512, GlobalBatch: 64, ForwardMs: 100}} {
		if err := s.UpsertModelType(ctx, spec); err != nil { // t0, t0+1s
			t.Fatal(err)
		}
	}
	for _, j := range []Job{
		{ID: 7, ModelType: "gpt2", Class: BestEffort, State: "RUNNING"},
		{ID: 9, ModelType: "bert", Class: BestEffort, State: "RUNNING"},
	} {
		if err := s.UpsertJob(ctx, j); err != nil { // t0+2s, t0+3s
			t.Fatal(err)
		}
	}
	d, err := s.RecordDecision(ctx, Decision{Policy: "rubick", Actions: []Action{ // t0+4s
		{JobID: 7, Kind: "restart", Plan: plan8, Resources: res8},
		{JobID: 9, Kind: "restart", Plan: plan4, Resources: res4},
		{JobID: 9, Kind: "start", Plan: plan4, Resources: res4},
		{JobID: 7, Kind: "restart", Plan: plan8, Resources: res8},
		{JobID: 7, Kind: "restart", Plan: plan8, Resources: res8},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r7, r9, st9, failed, r7b := d.Actions[0], d.Actions[1], d.Actions[2], d.Actions[3], d.Actions[4]
	for _, a := range []Action{r7, r9, st9, r7b} {
		if err := s.MarkApplied(ctx, a.ID, ResultOK, nil); err != nil { // t0+5..8s
			t.Fatal(err)
		}
	}
	if err := s.MarkApplied(ctx, failed.ID, ResultFailed, errors.New("scontrol failed")); err != nil { // t0+9s
		t.Fatal(err)
	}
	ids := func(as []Action) []int64 {
		var out []int64
		for _, a := range as {
			out = append(out, a.ID)
		}
		return out
	}
	// Nothing to measure before the jobs report again.
	un, err := s.Unmeasured(ctx, "restart", t0)
	if err != nil || len(un) != 0 {
		t.Errorf("Unmeasured before any report = %v, %v; want none", ids(un), err)
	}
	if err := s.AddReported(ctx, "gpt2", sample(8, 1, 1, model.Placement{8}, 1.5), 7, 30); err != nil { // t0+10s
		t.Fatal(err)
	}
	if un, _ := s.Unmeasured(ctx, "restart", t0); !cmp.Equal([]int64{r7.ID, r7b.ID}, ids(un)) {
		t.Errorf("Unmeasured after job 7 reported = %v, want %v", ids(un), []int64{r7.ID, r7b.ID})
	}
	if err := s.AddReported(ctx, "gpt2", sample(8, 1, 1, model.Placement{8}, 1.5), 9, 30); err != nil { // t0+11s
		t.Fatal(err)
	}
	un, err = s.Unmeasured(ctx, "restart", t0)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int64{r7.ID, r9.ID, r7b.ID}, ids(un)); d != "" {
		t.Errorf("Unmeasured (-want +got):\n%s", d)
	}
	if un, _ := s.Unmeasured(ctx, "restart", t0.Add(time.Hour)); len(un) != 0 {
		t.Errorf("Unmeasured since a later time = %v, want none", ids(un))
	}

	sig := r7.DecidedAt
	c7 := RestartCost{ActionID: r7.ID, JobID: 7, ModelType: "gpt2", Cost: 42500 * time.Millisecond,
		Signaled: sig, Resumed: sig.Add(time.Minute), BeforeIter: 100, AfterIter: 120}
	if added, err := s.AddRestartCost(ctx, c7); err != nil || !added { // t0+12s
		t.Fatalf("AddRestartCost = %v, %v; want added", added, err)
	}
	again := c7
	again.Cost = time.Second
	if added, err := s.AddRestartCost(ctx, again); err != nil || added {
		t.Errorf("second AddRestartCost = %v, %v; want kept the first, no error", added, err)
	}
	c9 := RestartCost{ActionID: r9.ID, JobID: 9, ModelType: "bert", Cost: 0,
		Signaled: sig, Resumed: sig, BeforeIter: 5, AfterIter: 5}
	if _, err := s.AddRestartCost(ctx, c9); err != nil { // t0+14s
		t.Fatal(err)
	}
	c7b := RestartCost{ActionID: r7b.ID, JobID: 7, ModelType: "gpt2", Cost: 30 * time.Second,
		Signaled: sig, Resumed: sig.Add(time.Minute), BeforeIter: 150, AfterIter: 170}
	if _, err := s.AddRestartCost(ctx, c7b); err != nil { // t0+15s
		t.Fatal(err)
	}
	un, err = s.Unmeasured(ctx, "restart", t0)
	if err != nil || len(un) != 0 {
		t.Errorf("Unmeasured after measuring = %v, %v; want none", ids(un), err)
	}

	c7.Measured, c9.Measured, c7b.Measured = t0.Add(12*time.Second), t0.Add(14*time.Second), t0.Add(15*time.Second)
	for name, tc := range map[string]struct {
		model string
		limit int
		want  []RestartCost
	}{
		"all":            {"", 0, []RestartCost{c9, c7b, c7}},
		"newest of each": {"", 1, []RestartCost{c9, c7b}},
		"one type":       {"gpt2", 5, []RestartCost{c7b, c7}},
		"newest of one":  {"gpt2", 1, []RestartCost{c7b}},
		"none":           {"t5", 0, nil},
	} {
		got, err := s.RestartCosts(ctx, tc.model, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s: RestartCosts(%q, %d) (-want +got):\n%s", name, tc.model, tc.limit, d)
		}
	}

	byJob, err := s.JobRestartCosts(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]RestartCost{c7, c7b}, byJob); d != "" {
		t.Errorf("JobRestartCosts(7) (-want +got):\n%s", d)
	}
	byJobs, err := s.JobsRestartCosts(ctx, []int64{7, 9, 12})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[int64][]RestartCost{7: {c7b, c7}, 9: {c9}}, byJobs); d != "" {
		t.Errorf("JobsRestartCosts(7, 9, 12) (-want +got):\n%s", d)
	}

	bad := func(f func(*RestartCost)) RestartCost {
		c := c7
		c.ActionID = st9.ID
		c.JobID = 9
		c.ModelType = "bert"
		f(&c)
		return c
	}
	for name, tc := range map[string]struct {
		c    RestartCost
		is   error
		want string
	}{
		"negative cost":     {bad(func(c *RestartCost) { c.Cost = -time.Second }), ErrInvalid, "cost=-1s"},
		"resumed first":     {bad(func(c *RestartCost) { c.Resumed = c.Signaled.Add(-time.Second) }), ErrInvalid, "resumed="},
		"iterations back":   {bad(func(c *RestartCost) { c.AfterIter = 3 }), ErrInvalid, "after_iter=3"},
		"other job's":       {bad(func(c *RestartCost) { c.JobID = 7 }), ErrInvalid, "job_id=7 but action"},
		"failed action":     {bad(func(c *RestartCost) { c.ActionID, c.JobID = failed.ID, 7 }), ErrInvalid, `result "failed"`},
		"unknown action":    {bad(func(c *RestartCost) { c.ActionID = 99 }), ErrNotFound, "action 99"},
		"unknown model":     {bad(func(c *RestartCost) { c.ModelType = "t5" }), ErrNotFound, "t5"},
		"empty model":       {bad(func(c *RestartCost) { c.ModelType = "" }), ErrInvalid, `model_type=""`},
		"no action id":      {bad(func(c *RestartCost) { c.ActionID = 0 }), ErrInvalid, "action_id=0"},
		"zero signal time":  {bad(func(c *RestartCost) { c.Signaled = time.Time{} }), ErrInvalid, "signaled="},
		"negative iterator": {bad(func(c *RestartCost) { c.BeforeIter = -1 }), ErrInvalid, "before_iter=-1"},
	} {
		if _, err := s.AddRestartCost(ctx, tc.c); !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: AddRestartCost = %v, want %v naming %s", name, err, tc.is, tc.want)
		}
	}
}
