package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

func TestPrune(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if err := s.UpsertModelType(ctx, gpt2()); err != nil { // t0
		t.Fatal(err)
	}
	for _, id := range []int64{7, 9} {
		if err := s.UpsertJob(ctx, Job{ID: id, ModelType: "gpt2", Class: BestEffort, State: "RUNNING"}); err != nil { // t0+1..2s
			t.Fatal(err)
		}
	}
	reason := json.RawMessage(`"keep"`)
	// Cycles 1-4 at t0+3..6s: 1 has reasons for both jobs, 2 only for job
	// 7 and an action, 3 only for job 7, 4 (the newest) for job 9 only.
	cycles := []Decision{
		{Policy: "rubick", Reasons: map[int64]json.RawMessage{7: reason, 9: reason}},
		{Policy: "rubick", Reasons: map[int64]json.RawMessage{7: reason}, Actions: []Action{{JobID: 7, Kind: "preempt"}}},
		{Policy: "rubick", Reasons: map[int64]json.RawMessage{7: reason}},
		{Policy: "rubick", Reasons: map[int64]json.RawMessage{9: reason}},
	}
	for _, d := range cycles {
		if _, err := s.RecordDecision(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	a := sample(8, 1, 1, model.Placement{8}, 1.5)
	b := sample(4, 1, 1, model.Placement{4}, 2.5)
	for i := range 5 {
		if err := s.AddReported(ctx, "gpt2", a, 7, i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := s.AddReported(ctx, "gpt2", b, 7, 10+i); err != nil {
			t.Fatal(err)
		}
		if err := s.AddReported(ctx, "gpt2", a, 9, 20+i); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddSamples(ctx, "gpt2", []model.Sample{a, a, a}, 7, SourceProfile); err != nil {
		t.Fatal(err)
	}

	before, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every table of the schema but schema_migrations, the empty ones too.
	wantRows := map[string]int64{"model_types": 1, "fits": 0, "samples": 14, "jobs": 2, "decisions": 4,
		"decision_reasons": 5, "plan_history": 1, "restart_costs": 0, "launch_limits": 0, "profiling_phases": 0,
		"replaced_specs": 0}
	if d := cmp.Diff(wantRows, before.Rows); d != "" || before.OnlineSamples != 11 || before.SchemaVersion != SchemaVersion() ||
		before.PendingActions != 1 || before.AwaitingTag != 0 ||
		!before.OldestCycle.Equal(t0.Add(3*time.Second)) || !before.NewestCycle.Equal(t0.Add(6*time.Second)) || before.Bytes <= 0 {
		t.Errorf("Stats = %+v (rows -want +got:\n%s)", before, d)
	}
	got, err := s.Prune(ctx, Retention{ReasonsBefore: t0.Add(6 * time.Second), SamplesPerConfig: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Reasons older than cycle 4: job 7 keeps cycle 3's, job 9 keeps
	// cycle 4's; cycle 1 loses both and goes, cycle 2 keeps its action.
	// Samples: job 7 loses 3 of config a and 1 of b, job 9 loses 1.
	if d := cmp.Diff(Pruned{Reasons: 3, Decisions: 1, Samples: 5}, got); d != "" {
		t.Errorf("Prune (-want +got):\n%s", d)
	}
	if _, err := s.Decision(ctx, 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("cycle 1 = %v, want deleted", err)
	}
	if d, err := s.Decision(ctx, 2); err != nil || len(d.Actions) != 1 || len(d.Reasons) != 0 {
		t.Errorf("cycle 2 = %+v, %v; want kept for its action, without reasons", d, err)
	}
	for job, want := range map[int64]int64{7: 3, 9: 4} {
		rs, err := s.Reasons(ctx, job, 0)
		if err != nil || len(rs) != 1 || rs[0].CycleID != want {
			t.Errorf("reasons of job %d = %+v, %v; want only cycle %d's", job, rs, err, want)
		}
	}
	iters := func(job int64) []int {
		ss, err := s.JobSamples(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for _, smp := range ss {
			out = append(out, smp.Iteration)
		}
		return out
	}
	if d := cmp.Diff([]int{3, 4, 11, 12, -1, -1, -1}, iters(7)); d != "" {
		t.Errorf("job 7's samples after pruning (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int{21, 22}, iters(9)); d != "" {
		t.Errorf("job 9's samples after pruning (-want +got):\n%s", d)
	}

	d2, err := s.Decision(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MarkApplied(ctx, d2.Actions[0].ID, ResultFailed, errors.New("annotate: exit status 1")); err != nil {
		t.Fatal(err)
	}
	if err := s.AwaitAck(ctx, d2.Actions[0].ID, ""); err != nil {
		t.Fatal(err)
	}
	after, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Rows["decision_reasons"] != 2 || after.Rows["decisions"] != 3 || after.OnlineSamples != 6 || after.Rows["samples"] != 9 ||
		after.PendingActions != 0 || after.AwaitingTag != 1 {
		t.Errorf("Stats after pruning = %+v", after)
	}
	again, err := s.Prune(ctx, Retention{ReasonsBefore: t0.Add(6 * time.Second), SamplesPerConfig: 2})
	if err != nil || again != (Pruned{}) {
		t.Errorf("second Prune = %+v, %v; want nothing left to prune", again, err)
	}
	if none, err := s.Prune(ctx, Retention{}); err != nil || none != (Pruned{}) {
		t.Errorf("Prune keeping everything = %+v, %v", none, err)
	}
	if _, err := s.Prune(ctx, Retention{SamplesPerConfig: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative samples_per_config: %v, want ErrInvalid", err)
	}
}
