package daemon

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"

	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

func TestSubmitTime(t *testing.T) {
	slurmSubmit := t0.Add(-time.Minute)
	first := t0.Add(-5 * time.Hour)
	unix := strconv.FormatInt(first.Unix(), 10)
	for _, tc := range []struct {
		name   string
		submit time.Time
		tag    *slurm.Tag
		want   time.Time
	}{
		{"no tag", slurmSubmit, nil, slurmSubmit},
		{"no record", slurmSubmit, &slurm.Tag{ModelType: "bert"}, slurmSubmit},
		{"requeued", slurmSubmit, &slurm.Tag{ModelType: "bert", Extra: map[string]string{tagSubmit: unix}}, first},
		{"Slurm's earlier", first, &slurm.Tag{ModelType: "bert", Extra: map[string]string{tagSubmit: strconv.FormatInt(slurmSubmit.Unix(), 10)}}, first},
		{"Slurm's unknown", time.Time{}, &slurm.Tag{ModelType: "bert", Extra: map[string]string{tagSubmit: unix}}, first},
		{"malformed", slurmSubmit, &slurm.Tag{ModelType: "bert", Extra: map[string]string{tagSubmit: "yesterday"}}, slurmSubmit},
		{"zero", slurmSubmit, &slurm.Tag{ModelType: "bert", Extra: map[string]string{tagSubmit: "0"}}, slurmSubmit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := slurm.Job{ID: 5, SubmitTime: tc.submit, Tag: tc.tag}
			if got := submitTime(j); !got.Equal(tc.want) {
				t.Errorf("submitTime = %v, want %v", got, tc.want)
			}
		})
	}
}

// Slurm moves a requeued job's submit time to the requeue. A job preempted
// five hours after its submission is still five hours old for the policy
// (it starts as a starving job), for the store (rubick explain) and in the
// tag of its next start; a job rubick never acted on gets Slurm's submit
// time recorded at its first start.
func TestCycleKeepsFirstSubmit(t *testing.T) {
	requeuedAt := t0.Add(-time.Minute)
	for _, tc := range []struct {
		name       string
		sub        time.Time // the tag's record; zero: none
		want       time.Time
		wantReason policy.Reason
	}{
		{"preempted 5h after its submission", t0.Add(-5 * time.Hour), t0.Add(-5 * time.Hour), policy.ReasonStarving},
		{"never acted on", time.Time{}, requeuedAt, policy.ReasonSlope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := heldJob(5, "bert", 1, 4)
			j.SubmitTime = requeuedAt
			if !tc.sub.IsZero() {
				j.RestartCount, j.Tag.Plan, j.Tag.Generation = 1, "dp4.tp1.pp1.mb8.a1.z0", 1
				j.Tag.Extra = map[string]string{slurm.TagRestarts: "1", tagReq: "n1.g4.c8.m64000", tagRan: "600",
					tagSubmit: strconv.FormatInt(tc.sub.Unix(), 10)}
			}
			a := &fakeApplier{}
			d, st := newTestDaemonWith(t, &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j}}, a, func(*Config) {})
			if _, err := d.Cycle(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			start := oneStart(t, a)
			if diff := cmp.Diff(strconv.FormatInt(tc.want.Unix(), 10), start.Tag.Extra[tagSubmit]); diff != "" {
				t.Errorf("the start's tag %s= (-want +got):\n%s", tagSubmit, diff)
			}
			sj, err := st.Job(context.Background(), 5)
			if err != nil {
				t.Fatal(err)
			}
			if !sj.Submitted.Equal(tc.want) {
				t.Errorf("stored submit time %v, want %v", sj.Submitted, tc.want)
			}
			act := lastAction(t, st, 5)
			if act.Reason != tc.wantReason {
				t.Errorf("start reason %q (%s), want %q", act.Reason, act.Detail, tc.wantReason)
			}
			if want := "; past the starvation age: goes first; queued 5h0m0s"; tc.wantReason == policy.ReasonStarving && !strings.HasSuffix(act.Detail, want) {
				t.Errorf("start detail %q, want it to end %q", act.Detail, want)
			}
		})
	}
}

// A job submitted five hours ago that waited for its dependency, or its
// --begin, from four hours ago until a minute ago has queued for a minute:
// it is not starving, though its submission and its first wait are past
// the starvation age. The store keeps the last cycle it waited, for a
// rubickd that did not see it wait. So for a job its user held, or one
// its user requeued held after it ran. A job that ran before waits a few
// seconds for the begin time Slurm gives it at a requeue: it is as old as
// its submission.
func TestCycleAgeFromLastWait(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wait     func(j *slurm.Job, jobs *[]slurm.Job) // until t0; undone after
		requeued bool                                  // it ran before
		starving bool                                  // aged from its submission
	}{
		{"dependency", func(j *slurm.Job, jobs *[]slurm.Job) {
			j.Dependency = "afterok:20(unfulfilled)"
			*jobs = append(*jobs, slurm.Job{ID: 20, Partition: "gpu", State: slurm.StateRunning, NodeList: []string{"node2"}, GPUsPerNode: 1, CPUs: 1})
		}, false, false},
		{"begin", func(j *slurm.Job, _ *[]slurm.Job) { j.EligibleTime = t0.Add(30 * time.Second) }, false, false},
		{"requeued", func(j *slurm.Job, _ *[]slurm.Job) { j.EligibleTime = t0.Add(10 * time.Second) }, true, true},
		{"user's hold", func(j *slurm.Job, _ *[]slurm.Job) { j.Comment = slurm.UserHoldWord }, false, false},
		{"requeued held by its user", func(j *slurm.Job, _ *[]slurm.Job) { j.RestartCount = 2 }, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			j := heldJob(21, "bert", 1, 4)
			j.SubmitTime = t0.Add(-5 * time.Hour)
			if tc.requeued {
				j.RestartCount, j.Tag.Plan, j.Tag.Generation = 1, "dp4.tp1.pp1.mb8.a1.z0", 1
				j.Tag.Extra = map[string]string{slurm.TagRestarts: "1", tagReq: "n1.g4.c8.m64000", tagRan: "600"}
			}
			waiting := j
			c := &fakeCluster{nodes: labNodes(1)}
			c.jobs = []slurm.Job{waiting}
			tc.wait(&c.jobs[0], &c.jobs)
			a := &fakeApplier{}
			d, st := newTestDaemonWith(t, c, a, func(*Config) {})
			for _, at := range []time.Duration{-4 * time.Hour, 0} {
				cycleAt(t, d, at)
				if got := startedJobs(a); len(got) != 0 {
					t.Fatalf("started %v while it waits, want none", got)
				}
			}
			c.jobs = []slurm.Job{j}
			var rep CycleReport
			for cycle, at := range []time.Duration{time.Minute, 2 * time.Minute} {
				if cycle == 1 {
					d.deferredSeen = nil // a rubickd that did not see the wait
				}
				a.got = nil
				rep = cycleAt(t, d, at)
				oneStart(t, a)
				act := lastAction(t, st, 21)
				if starving := act.Reason == policy.ReasonStarving; starving != tc.starving {
					t.Errorf("cycle %d: start reason %q (%s); want starvation: %v", cycle+3, act.Reason, act.Detail, tc.starving)
				}
			}
			// The fake cluster still lists it queued: so do the cycle's
			// report and the metric.
			wantAge := 2 * time.Minute
			if tc.starving {
				wantAge = 5*time.Hour + 2*time.Minute
			}
			if diff := cmp.Diff(map[string]Queue{slurm.ClassBestEffort: {Jobs: 1, Longest: wantAge}, slurm.ClassGuaranteed: {}}, rep.Queued); diff != "" {
				t.Errorf("queued (-want +got):\n%s", diff)
			}
			for class, want := range map[string]time.Duration{slurm.ClassBestEffort: wantAge, slurm.ClassGuaranteed: 0} {
				var m dto.Metric
				if err := d.deps.Metrics.QueuedAge.WithLabelValues(class).Write(&m); err != nil {
					t.Fatal(err)
				}
				if got := m.GetGauge().GetValue(); got != want.Seconds() {
					t.Errorf("rubick_queued_age_seconds{class=%q} = %v, want %v", class, got, want.Seconds())
				}
			}
			got, err := st.Deferred(ctx, []int64{21})
			if err != nil {
				t.Fatal(err)
			}
			want := map[int64]time.Time{21: t0}
			if tc.starving {
				want = map[int64]time.Time{}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("stored last wait (-want +got):\n%s", d)
			}
		})
	}
}

// A job whose wait ends in a cycle that releases it as submitted (here
// --exclusive) gets its last wait stored as a planned one does.
func TestCycleStoresLastWaitOfRigidJob(t *testing.T) {
	ctx := context.Background()
	j := heldJob(21, "bert", 1, 4)
	j.Exclusive = true
	waiting := j
	waiting.Dependency = "afterok:20(unfulfilled)"
	first := slurm.Job{ID: 20, Partition: "gpu", State: slurm.StateRunning, NodeList: []string{"node2"}, GPUsPerNode: 1, CPUs: 1}
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{first, waiting}}
	a := &fakeApplier{}
	d, st := newTestDaemonWith(t, c, a, func(*Config) {})
	for _, at := range []time.Duration{-4 * time.Hour, 0, time.Minute} {
		if at == time.Minute {
			c.jobs = []slurm.Job{j}
		}
		cycleAt(t, d, at)
	}
	if got := startedJobs(a); len(got) != 1 {
		t.Fatalf("started %v, want job 21 released as submitted", got)
	}
	got, err := st.Deferred(ctx, []int64{21})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[int64]time.Time{21: t0}, got); d != "" {
		t.Errorf("stored last wait (-want +got):\n%s", d)
	}
}

// While a job keeps waiting, its wait goes to the store when rubick
// explain is first told of it and again every deferredRefresh, so that a
// wait that ends while rubickd is stopped counts from at most that long
// before.
func TestCycleRefreshesStoredWait(t *testing.T) {
	ctx := context.Background()
	j := heldJob(21, "bert", 1, 4)
	j.Dependency = "afterok:20(unfulfilled)"
	first := slurm.Job{ID: 20, Partition: "gpu", State: slurm.StateRunning, NodeList: []string{"node2"}, GPUsPerNode: 1, CPUs: 1}
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{first, j}}
	d, st := newTestDaemonWith(t, c, &fakeApplier{}, func(*Config) {})
	for _, tc := range []struct {
		at, want time.Duration
	}{{0, 0}, {5 * time.Minute, 0}, {11 * time.Minute, 11 * time.Minute}, {15 * time.Minute, 11 * time.Minute}} {
		cycleAt(t, d, tc.at)
		got, err := st.Deferred(ctx, []int64{21})
		if err != nil {
			t.Fatal(err)
		}
		if want := t0.Add(tc.want); !got[21].Equal(want) {
			t.Errorf("after the cycle at +%v: stored wait %v, want %v", tc.at, got[21], want)
		}
	}
}

// A job left waiting for GPUs says, in its stored reason, how long it has
// queued: rubickd adds it to the policy's reason.
func TestCycleSaysHowLongQueued(t *testing.T) {
	ctx := context.Background()
	nodes := labNodes(1)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 8, 8
	rigid := slurm.Job{ID: 20, Partition: "gpu", State: slurm.StateRunning, NodeList: []string{"node1"}, GPUsPerNode: 8, CPUs: 8}
	j := heldJob(21, "bert", 1, 4)
	j.SubmitTime = t0.Add(-10 * time.Minute)
	d, st := newTestDaemonWith(t, &fakeCluster{nodes: nodes, jobs: []slurm.Job{rigid, j}}, &fakeApplier{}, func(*Config) {})
	if _, err := d.Cycle(ctx, false); err != nil {
		t.Fatal(err)
	}
	if act := lastAction(t, st, 21); act.Kind != policy.Keep || act.Reason != policy.ReasonNoResources || act.Detail != "queued 10m0s; no GPU free" {
		t.Errorf("stored reason %s %s %q, want keep no-resources \"queued 10m0s; no GPU free\"", act.Kind, act.Reason, act.Detail)
	}
}

// A task split off a job array its user held waited with the array: it
// queues from the end of the array's hold, stored under the array's
// record, not from the array's submission.
func TestCycleArrayTaskAgesFromArrayWait(t *testing.T) {
	for _, restarted := range []bool{false, true} {
		array := heldJob(30, "bert", 1, 4)
		array.SubmitTime, array.ArrayJobID, array.ArrayTasks, array.Comment = t0.Add(-5*time.Hour), 30, "0-1", slurm.UserHoldWord
		task := heldJob(31, "bert", 1, 4)
		task.SubmitTime, task.ArrayJobID, task.ArrayTaskID = t0.Add(-5*time.Hour), 30, 0
		c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{array}}
		a := &fakeApplier{}
		d, st := newTestDaemonWith(t, c, a, func(*Config) {})
		for _, at := range []time.Duration{-4 * time.Hour, 0} {
			cycleAt(t, d, at)
		}
		if restarted {
			d.deferredSeen = nil
		}
		// Released and split: the array's record keeps the rest.
		array.Comment, array.ArrayTasks = "", "1"
		c.jobs, a.got = []slurm.Job{task, array}, nil
		cycleAt(t, d, time.Minute)
		if act := lastAction(t, st, 31); act.Kind != policy.Start || act.Reason == policy.ReasonStarving {
			t.Errorf("restarted %v: task 30_0 %s %s (%s); want started, not as a starving job", restarted, act.Kind, act.Reason, act.Detail)
		}
	}
}

// cycleAt runs one cycle of d with its clock at t0 + at.
func cycleAt(t *testing.T, d *Daemon, at time.Duration) CycleReport {
	t.Helper()
	d.deps.Now = func() time.Time { return t0.Add(at) }
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// lastAction is the newest reason st holds for job id, as the
// policy.Action rubickd stores.
func lastAction(t *testing.T, st *store.Store, id int64) policy.Action {
	t.Helper()
	reasons, err := st.Reasons(context.Background(), id, 1)
	if err != nil || len(reasons) != 1 {
		t.Fatalf("job %d: reasons %v, %v", id, reasons, err)
	}
	var act policy.Action
	if err := json.Unmarshal(reasons[0].Reason, &act); err != nil {
		t.Fatal(err)
	}
	return act
}
