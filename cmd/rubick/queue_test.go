package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/store"
)

// seedQueueStore writes a store whose newest cycle (2, at fixedNow less 30
// s) has queued guaranteed jobs 10 (admitted 1st) and 9 (2nd), best-effort jobs 11 (queued, 2nd in
// the order), 12 (queued, started, 1st) and 13 (running, 3rd), a job 14
// the restart penalty kept out of the order, a job 15 with a free-form
// reason, job 16 of an array, and two jobs rubickd decided outside the
// policy: guaranteed job 17 held for a group limit and running job 18 it
// leaves alone. It also left alone job 19, held by its user, for the
// reason it stored in the older cycle 1, and job 20, whose reason is
// pruned. Cycle 1 also holds job 99, in its order.
func seedQueueStore(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	clock := fixedNow.Add(-90 * time.Second)
	st, err := store.Open(ctx, path, store.WithClock(func() time.Time { return clock }))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	jobs := []store.Job{
		{ID: 9, ModelType: "gpt2", Class: store.Guaranteed, Tenant: "physics", State: "PENDING", User: "carol"},
		{ID: 10, ModelType: "llama7", Class: store.Guaranteed, Tenant: "physics", State: "PENDING", User: "alice"},
		{ID: 11, ModelType: "bert", Class: store.BestEffort, State: "PENDING", User: "bob"},
		{ID: 12, ModelType: "gpt2", Class: store.BestEffort, State: "PENDING", User: "alice"},
		{ID: 13, ModelType: "t5", Class: store.BestEffort, State: "RUNNING", User: "bob"},
		{ID: 14, ModelType: "vit", Class: store.BestEffort, State: "RUNNING", User: "bob"},
		{ID: 16, ModelType: "bert", Class: store.BestEffort, State: "PENDING", ArrayJobID: 7, ArrayTaskID: 3}, // user unknown
		{ID: 17, ModelType: "bert", Class: store.Guaranteed, Tenant: "physics", State: "PENDING", User: "bob"},
		{ID: 18, Class: store.BestEffort, State: "RUNNING", User: "bob"},
		{ID: 19, ModelType: "gpt2", Class: store.BestEffort, State: "PENDING", User: "carol"},
		{ID: 20, Class: store.BestEffort, State: "RUNNING", User: "bob"},
		{ID: 99, ModelType: "bert", Class: store.BestEffort, State: "PENDING"},
	}
	for _, j := range jobs {
		if err := st.UpsertJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	enc := func(a policy.Action) json.RawMessage {
		raw, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	on := func(g int) []policy.NodeAlloc { return []policy.NodeAlloc{{Node: "n1", GPUs: g, CPUs: 4 * g}} }
	if _, err := st.RecordDecision(ctx, store.Decision{Policy: "rubick", Reasons: map[int64]json.RawMessage{
		99: enc(policy.Action{Kind: policy.Keep, Reason: policy.ReasonNoResources, Order: &policy.Order{Position: 1, Of: 1, By: policy.OrderSlope}}),
		19: enc(policy.Action{Kind: policy.Keep, Reason: daemon.ReasonIgnored, Detail: "held by its user"}),
	}}); err != nil {
		t.Fatal(err)
	}
	clock = fixedNow.Add(-30 * time.Second)
	if _, err := st.RecordDecision(ctx, store.Decision{Policy: "rubick", Reasons: map[int64]json.RawMessage{
		9: enc(policy.Action{Kind: policy.Keep, Reason: policy.ReasonQuota, Detail: `needs 2 GPUs, tenant "physics" has 8 of 8 in use`,
			MinRes: &policy.Size{GPUs: 2}, Admission: &policy.Admission{Position: 2, Of: 2, By: policy.OrderShortest}}),
		10: enc(policy.Action{Kind: policy.Keep, Reason: policy.ReasonQuota, Detail: `needs 4 GPUs, tenant "physics" has 8 of 8 in use`,
			MinRes: &policy.Size{GPUs: 4}, Admission: &policy.Admission{Position: 1, Of: 2, By: policy.AdmitAge}}),
		11: enc(policy.Action{Kind: policy.Keep, Reason: policy.ReasonNoResources, Detail: "queued 5m0s",
			Order: &policy.Order{Position: 2, Of: 4, QueuedAhead: 1, By: policy.OrderSlope, Slope: 1.5, TimeLeftH: 4, WeighedSlope: 0.75}}),
		12: enc(policy.Action{Kind: policy.Start, Reason: policy.ReasonSlope, Alloc: on(2),
			Order: &policy.Order{Position: 1, Of: 4, By: policy.OrderSlope, Slope: 1, TimeLeftH: 0.25, WeighedSlope: 2}}),
		13: enc(policy.Action{Kind: policy.Keep, Reason: policy.ReasonUnchanged, Alloc: on(4),
			Order: &policy.Order{Position: 3, Of: 4, QueuedAhead: 2, By: policy.OrderSlope, Slope: 0.5, TimeLeftH: 16, NoTimeLimit: true, WeighedSlope: 0.125}}),
		14: enc(policy.Action{Kind: policy.Keep, Reason: policy.ReasonPenalty, Alloc: on(1)}),
		15: json.RawMessage(`"free-form"`),
		16: enc(policy.Action{Kind: policy.Keep, Reason: policy.ReasonNoResources,
			Order: &policy.Order{Position: 4, Of: 4, QueuedAhead: 2, By: policy.OrderStarvation, Slope: 0.2, WeighedSlope: 0.2}}),
		17: enc(policy.Action{Kind: policy.Keep, Reason: policy.ReasonGroup, Detail: "QOS normal GrpTRES: 16/16 GPUs"}),
		18: enc(policy.Action{Kind: policy.Keep, Reason: "ignored", Detail: "suspended"}),
	}, Unchanged: []int64{19, 20}}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestQueueJSON(t *testing.T) {
	path := seedQueueStore(t)
	g := queueEntry{JobID: 10, User: "alice", ModelType: "llama7", Class: "guaranteed", Tenant: "physics", Queued: true, Kind: "keep", Reason: "quota",
		Detail: `needs 4 GPUs, tenant "physics" has 8 of 8 in use`, MinRes: &policy.Size{GPUs: 4}, Admission: &policy.Admission{Position: 1, Of: 2, By: "age"}}
	g2 := queueEntry{JobID: 9, User: "carol", ModelType: "gpt2", Class: "guaranteed", Tenant: "physics", Queued: true, Kind: "keep", Reason: "quota",
		Detail: `needs 2 GPUs, tenant "physics" has 8 of 8 in use`, MinRes: &policy.Size{GPUs: 2}, Admission: &policy.Admission{Position: 2, Of: 2, By: "shortest"}}
	first := queueEntry{JobID: 12, User: "alice", ModelType: "gpt2", Class: "best-effort", Queued: true, GPUs: 2, Kind: "start", Reason: "slope",
		Order: &policy.Order{Position: 1, Of: 4, By: "slope", Slope: 1, TimeLeftH: 0.25, WeighedSlope: 2}}
	second := queueEntry{JobID: 11, User: "bob", ModelType: "bert", Class: "best-effort", Queued: true, Kind: "keep", Reason: "no-resources", Detail: "queued 5m0s",
		Order: &policy.Order{Position: 2, Of: 4, QueuedAhead: 1, By: "slope", Slope: 1.5, TimeLeftH: 4, WeighedSlope: 0.75}}
	third := queueEntry{JobID: 13, User: "bob", ModelType: "t5", Class: "best-effort", GPUs: 4, Kind: "keep", Reason: "unchanged",
		Order: &policy.Order{Position: 3, Of: 4, QueuedAhead: 2, By: "slope", Slope: 0.5, TimeLeftH: 16, NoTimeLimit: true, WeighedSlope: 0.125}}
	fourth := queueEntry{JobID: 16, ArrayTask: "7_3", ModelType: "bert", Class: "best-effort", Queued: true, Kind: "keep", Reason: "no-resources",
		Order: &policy.Order{Position: 4, Of: 4, QueuedAhead: 2, By: "starvation", Slope: 0.2, WeighedSlope: 0.2}}
	frozen := queueEntry{JobID: 14, User: "bob", ModelType: "vit", Class: "best-effort", GPUs: 1, Kind: "keep", Reason: "restart-penalty"}
	grouped := queueEntry{JobID: 17, User: "bob", ModelType: "bert", Class: "guaranteed", Tenant: "physics", Queued: true, Kind: "keep", Reason: "group-limit",
		Detail: "QOS normal GrpTRES: 16/16 GPUs"}
	leftAlone := queueEntry{JobID: 18, User: "bob", Class: "best-effort", Kind: "keep", Reason: "ignored", Detail: "suspended"}
	heldSince := queueEntry{JobID: 19, User: "carol", ModelType: "gpt2", Class: "best-effort", Queued: true, Kind: "keep", Reason: "ignored",
		Detail: "held by its user", SinceCycle: 1}
	pruned := queueEntry{JobID: 20, User: "bob", Class: "best-effort", Kind: "keep", Reason: "ignored", Detail: "its reason, stored before cycle 2, is pruned"}
	at := fixedNow.Add(-30 * time.Second)
	// Where nothing is listed, the note says where a held job is.
	const others = "; --all lists the cycle's other jobs (held, waiting, left to Slurm), rubick explain JOBID why one waits"
	for _, tc := range []struct {
		name string
		args []string
		want queueView
	}{
		{"default", nil, queueView{CycleID: 2, At: at, AgeS: 30, Policy: "rubick", Guaranteed: []queueEntry{g, g2},
			Order: []queueEntry{first, second, third, fourth}, Notes: []string{}}},
		{"queued only", []string{"--queued"}, queueView{CycleID: 2, At: at, AgeS: 30, Policy: "rubick", Guaranteed: []queueEntry{g, g2},
			Order: []queueEntry{first, second, fourth}, Notes: []string{}}},
		{"all", []string{"--all"}, queueView{CycleID: 2, At: at, AgeS: 30, Policy: "rubick", Guaranteed: []queueEntry{g, g2},
			Order: []queueEntry{first, second, third, fourth}, Others: []queueEntry{frozen, grouped, leftAlone, heldSince, pruned}, Notes: []string{}}},
		{"all queued", []string{"--all", "--queued"}, queueView{CycleID: 2, At: at, AgeS: 30, Policy: "rubick", Guaranteed: []queueEntry{g, g2},
			Order: []queueEntry{first, second, fourth}, Others: []queueEntry{grouped, heldSince}, Notes: []string{}}},
		{"one user's", []string{"--user", "bob", "--all"}, queueView{CycleID: 2, At: at, AgeS: 30, Policy: "rubick", Guaranteed: []queueEntry{},
			Order: []queueEntry{second, third}, Others: []queueEntry{frozen, grouped, leftAlone, pruned}, Notes: []string{}}},
		{"one user's queued, none", []string{"--user", "bob", "--queued", "--cycle", "1"}, queueView{CycleID: 1, At: fixedNow.Add(-90 * time.Second),
			AgeS: 90, Policy: "rubick", Guaranteed: []queueEntry{}, Order: []queueEntry{}, Notes: []string{`no job of user "bob" in the orders of cycle 1` + others}}},
		{"an earlier cycle", []string{"--cycle", "1"}, queueView{CycleID: 1, At: fixedNow.Add(-90 * time.Second), AgeS: 90, Policy: "rubick",
			Guaranteed: []queueEntry{}, Order: []queueEntry{{JobID: 99, ModelType: "bert", Class: "best-effort", Queued: true, Kind: "keep",
				Reason: "no-resources", Order: &policy.Order{Position: 1, Of: 1, By: "slope"}}}, Notes: []string{}}},
		{"an unknown user's", []string{"--user", "dave"}, queueView{CycleID: 2, At: at, AgeS: 30, Policy: "rubick", Guaranteed: []queueEntry{},
			Order: []queueEntry{}, Notes: []string{`no job of user "dave" in the orders of cycle 2` + others}}},
		{"an unknown user's, all", []string{"--user", "dave", "--all"}, queueView{CycleID: 2, At: at, AgeS: 30, Policy: "rubick", Guaranteed: []queueEntry{},
			Order: []queueEntry{}, Notes: []string{`no job of user "dave" in the orders of cycle 2`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if err := queueCmd(context.Background(), append([]string{"--store", path, "--json"}, tc.args...), &out, &errb, testEnv(t)); err != nil {
				t.Fatal(err)
			}
			var got queueView
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			tc.want.Store = path
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("queue (-want +got):\n%s", d)
			}
		})
	}
}

// A newest cycle older than staleCycle is said to be so; an earlier cycle
// asked for by id is old by choice.
func TestQueueStale(t *testing.T) {
	path := seedQueueStore(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "note: the newest cycle is 1.0h old, and rubickd records one every interval (30s by default): is it running? (rubick status)\n"},
		{[]string{"--cycle", "2"}, ""},
	} {
		env := testEnv(t)
		env.now = func() time.Time { return fixedNow.Add(time.Hour) }
		var out, errb bytes.Buffer
		if err := queueCmd(context.Background(), append([]string{"--store", path}, tc.args...), &out, &errb, env); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "is it running"); got != (tc.want != "") || !strings.Contains(out.String(), tc.want) {
			t.Errorf("queue %v an hour later:\n%s\nwant note %q", tc.args, out.String(), tc.want)
		}
	}
}

func TestQueueText(t *testing.T) {
	path := seedQueueStore(t)
	var out, errb bytes.Buffer
	if err := queueCmd(context.Background(), []string{"--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	want := "cycle 2 at 2026-11-08T11:59:30Z (30s ago), policy rubick, store " + path + "\n" +
		"queued guaranteed jobs, in admission order, admitted first within their tenant's quota:\n" +
		"  POS  JOB  USER   MODEL   TENANT   MIN     BY        DECISION\n" +
		`  1    10   alice  llama7  physics  4 GPUs  age       keep (quota): needs 4 GPUs, tenant "physics" has 8 of 8 in use` + "\n" +
		`  2    9    carol  gpt2    physics  2 GPUs  shortest  keep (quota): needs 2 GPUs, tenant "physics" has 8 of 8 in use` + "\n" +
		"best-effort order, head first: 4 jobs shown, 3 of them queued\n" +
		"  POS  JOB       USER   MODEL  CLASS        STATE    GPUS  BY          SLOPE  LEFT   WEIGHED  DECISION\n" +
		"  1    12        alice  gpt2   best-effort  queued   2     slope       1      0.25h  2        start (slope)\n" +
		"  2    11        bob    bert   best-effort  queued   0     slope       1.5    4.00h  0.75     keep (no-resources): queued 5m0s\n" +
		"  3    13        bob    t5     best-effort  running  4     slope       0.5    none   0.125    keep (unchanged)\n" +
		"  4    16 (7_3)  -      bert   best-effort  queued   0     starvation  0.2    -      0.2      keep (no-resources)\n"
	if d := cmp.Diff(want, out.String()); d != "" {
		t.Errorf("queue text (-want +got):\n%s", d)
	}
	out.Reset()
	if err := queueCmd(context.Background(), []string{"--store", path, "--all"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	others := "other jobs of the cycle:\n" +
		"  JOB  USER   MODEL  CLASS        STATE    GPUS  DECISION\n" +
		"  14   bob    vit    best-effort  running  1     keep (restart-penalty)\n" +
		"  17   bob    bert   guaranteed   queued   0     keep (group-limit): QOS normal GrpTRES: 16/16 GPUs\n" +
		"  18   bob    -      best-effort  running  0     keep (ignored): suspended\n" +
		"  19   carol  gpt2   best-effort  queued   0     keep (ignored): held by its user (since cycle 1)\n" +
		"  20   bob    -      best-effort  running  0     keep (ignored): its reason, stored before cycle 2, is pruned\n"
	if got := out.String(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, others) {
		t.Errorf("queue --all text:\n%s\nwant the default's, then:\n%s", got, others)
	}
}

// A cycle that stored no reason of its own still lists the jobs it left
// alone for an earlier one.
func TestQueueOnlyUnchanged(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	st, err := store.Open(ctx, path, store.WithClock(func() time.Time { return fixedNow }))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertJob(ctx, store.Job{ID: 5, Class: store.BestEffort, State: "PENDING", User: "bob"}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []store.Decision{
		{Policy: "rubick", Reasons: map[int64]json.RawMessage{5: json.RawMessage(`{"kind":"keep","reason":"ignored","detail":"held by its user"}`)}},
		{Policy: "rubick", Unchanged: []int64{5}},
	} {
		if _, err := st.RecordDecision(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	var out, errb bytes.Buffer
	if err := queueCmd(ctx, []string{"--store", path, "--all", "--json"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	var got queueView
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := []queueEntry{{JobID: 5, User: "bob", Class: "best-effort", Queued: true, Kind: "keep", Reason: "ignored", Detail: "held by its user", SinceCycle: 1}}
	if d := cmp.Diff(want, got.Others); got.CycleID != 2 || d != "" {
		t.Errorf("queue --all of cycle %d, others (-want +got):\n%s", got.CycleID, d)
	}
}

func TestQueueErrors(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.db")
	st, err := store.Open(context.Background(), empty)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	// A mistyped --store naming someone's file is refused, never made a store.
	notes := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notes, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		is   error
		say  string
	}{
		"not a store":   {args: []string{"--store", notes}, is: store.ErrNotStore, say: notes},
		"no cycle yet":  {args: []string{"--store", empty}, is: store.ErrNotFound, say: "has no decision cycle yet"},
		"missing store": {args: []string{"--store", filepath.Join(t.TempDir(), "nope.db")}, say: "does not exist"},
		"an argument":   {args: []string{"--store", empty, "42"}, is: errUsage, say: "unexpected arguments"},
		"no such cycle": {args: []string{"--store", seedQueueStore(t), "--cycle", "7"}, is: store.ErrNotFound, say: "cycle 7 is not in the store"},
		"bad cycle":     {args: []string{"--store", empty, "--cycle", "-1"}, is: errUsage, say: "--cycle=-1"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := queueCmd(context.Background(), tc.args, &out, &errb, testEnv(t))
			if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(err.Error(), tc.say) {
				t.Errorf("error %v, want %v saying %q", err, tc.is, tc.say)
			}
		})
	}
}

// A queue policy keeps no order: the command says so.
func TestQueueWithoutOrder(t *testing.T) {
	for _, tc := range []struct {
		policy string
		reason policy.Reason
		want   string
	}{
		{"fifo", policy.ReasonFIFO, "note: cycle 1 placed no job in an order (policy fifo: only rubick, sia, rubick-r keep one)"},
		// rubick's cycle with one running job it may not reconfigure yet:
		// before, the note said only rubick kept an order, of rubick's.
		{"rubick", policy.ReasonPenalty, "note: cycle 1 placed no job in an order: none was queued for GPUs, and no running one could be reconfigured"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "rubick.db")
			st, err := store.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(policy.Action{Kind: policy.Keep, Reason: tc.reason})
			_, err = st.RecordDecision(ctx, store.Decision{Policy: tc.policy, Reasons: map[int64]json.RawMessage{5: raw}})
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if err := queueCmd(ctx, []string{"--store", path}, &out, &errb, testEnv(t)); err != nil {
				t.Fatal(err)
			}
			if want := tc.want + "; --all lists the cycle's other jobs (held, waiting, left to Slurm), rubick explain JOBID why one waits\n"; !strings.HasSuffix(out.String(), want) {
				t.Errorf("output does not end in %q:\n%s", want, out.String())
			}
		})
	}
}

// explain and queue read a stored reason alike: a decision to both, or to
// neither (explain shows it raw, queue leaves the job out).
func TestReasonDecodedAlike(t *testing.T) {
	for _, tc := range []struct {
		name     string
		raw      string
		decision bool
	}{
		{"an action", `{"kind":"keep","job":"1","reason":"quota","detail":"needs 4 GPUs"}`, true},
		{"only a kind", `{"kind":"keep"}`, true},
		{"no kind", `{"reason":"quota","detail":"needs 4 GPUs"}`, false},
		{"a string", `"queued"`, false},
		{"null", `null`, false},
		{"an empty object", `{}`, false},
		{"a field of another type", `{"kind":"keep","reason":"quota","throughput":"fast"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "rubick.db")
			st, err := store.Open(ctx, path, store.WithClock(func() time.Time { return fixedNow }))
			if err != nil {
				t.Fatal(err)
			}
			err = st.UpsertJob(ctx, store.Job{ID: 1, Class: store.BestEffort, State: "PENDING", User: "bob"})
			if err == nil {
				_, err = st.RecordDecision(ctx, store.Decision{Policy: "rubick", Reasons: map[int64]json.RawMessage{1: json.RawMessage(tc.raw)}})
			}
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if err := queueCmd(ctx, []string{"--store", path, "--all", "--json"}, &out, &errb, testEnv(t)); err != nil {
				t.Fatal(err)
			}
			var q queueView
			if err := json.Unmarshal(out.Bytes(), &q); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			v := newReasonView(store.Reason{CycleID: 1, JobID: 1, Reason: json.RawMessage(tc.raw)})
			explained := v.Raw == nil
			listed := len(q.Guaranteed)+len(q.Order)+len(q.Others) > 0
			if explained != tc.decision || listed != tc.decision {
				t.Errorf("reason %s: explain read a decision %v (%+v), queue listed the job %v; want %v", tc.raw, explained, v, listed, tc.decision)
			}
		})
	}
}
