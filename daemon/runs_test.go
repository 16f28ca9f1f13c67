package daemon

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/slurm"
)

// ranBert is bert job 5 running on node1's 8 GPUs since start, its tag
// as rubickd's start wrote it with restart count rc and ran= ran ("":
// none).
func ranBert(start time.Time, restarts int, rc, ran string) slurm.Job {
	j := heldJob(5, "bert", 1, 8)
	j.State, j.Held, j.User = slurm.StateRunning, false, "alice"
	j.NodeList, j.StartTime, j.RestartCount = []string{"node1"}, start, restarts
	j.Tag.Generation, j.Tag.Plan = 1, "dp8.tp1.pp1.mb4.a1.z2"
	j.Tag.Extra = map[string]string{slurm.TagRestarts: rc}
	if ran != "" {
		j.Tag.Extra[tagRan] = ran
	}
	return j
}

// requeued is running job j as Slurm has it once it requeued it unheld:
// pending, its restart count raised, its begin time come.
func requeued(j slurm.Job) slurm.Job {
	j.State, j.NodeList, j.StartTime, j.Reason = slurm.StatePending, nil, time.Time{}, "None"
	j.RestartCount++
	return j
}

// oneNodeLab is a daemon on one node whose 8 GPUs running job j holds,
// with its cluster, its applier and the time its clock reads (t0 until
// set).
func oneNodeLab(t *testing.T, j slurm.Job) (*fakeCluster, *fakeApplier, *Daemon, *time.Time) {
	t.Helper()
	nodes := labNodes(1)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 8, 8
	c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{j}}
	a := &fakeApplier{}
	d, _ := newTestDaemon(t, c, a)
	now := t0
	d.deps.Now = func() time.Time { return now }
	return c, a, d, &now
}

// A job Slurm requeued (its node failed, a QOS preempted it) keeps the run
// that ended: the tag rubickd writes when it starts the job again counts
// it in ran=, as a requeue of rubickd's own does, and a run counted once
// is not counted again at the next requeue.
func TestSlurmRequeueKeepsRunTime(t *testing.T) {
	for name, tc := range map[string]struct {
		ran     string // the tag's ran= while it ran
		rc, now string // the tag's restart count and ran= once requeued
		unseen  bool   // rubickd never saw it run
		want    string // ran= of the start's tag
	}{
		"Slurm's requeue":             {"", "0", "", false, "7200"},
		"Slurm's, after earlier runs": {"600", "0", "600", false, "7800"},
		// The restart's tag, written with its requeue, counts the run.
		"rubickd's own, acknowledged": {"", "1", "7200", false, "7200"},
		"a run rubickd never saw":     {"", "0", "", true, ""},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			j := ranBert(t0.Add(-2*time.Hour), 0, "0", tc.ran)
			c, a, d, now := oneNodeLab(t, j)
			if !tc.unseen {
				if _, err := d.Cycle(ctx, false); err != nil {
					t.Fatal(err)
				}
			}
			*now = t0.Add(30 * time.Second)
			r := requeued(j)
			r.Tag.Extra[slurm.TagRestarts] = tc.rc
			delete(r.Tag.Extra, tagRan)
			if tc.now != "" {
				r.Tag.Extra[tagRan] = tc.now
			}
			c.jobs, c.nodes[0].GPUsUsed, c.nodes[0].CPUsAlloc = []slurm.Job{r}, 0, 0
			a.got = nil
			if _, err := d.Cycle(ctx, false); err != nil {
				t.Fatal(err)
			}
			if got := oneStart(t, a).Tag.Extra[tagRan]; got != tc.want {
				t.Errorf("start's tag ran=%q, want %q", got, tc.want)
			}
		})
	}
}

// Once the start's tag counts the run, it is not counted again: the next
// requeue by Slurm adds only the run after it.
func TestSlurmRequeueCountedOnce(t *testing.T) {
	ctx := context.Background()
	j := ranBert(t0.Add(-2*time.Hour), 0, "0", "")
	c, a, d, now := oneNodeLab(t, j)
	var got []string
	for i, step := range []struct {
		at  time.Duration
		job slurm.Job
	}{
		{0, j},
		{30 * time.Second, requeued(j)},
		// Started on the tag the start wrote, 10 minutes, then requeued
		// by Slurm again.
		{11 * time.Minute, ranBert(t0.Add(time.Minute), 1, "1", "7200")},
		{12 * time.Minute, requeued(ranBert(t0.Add(time.Minute), 1, "1", "7200"))},
	} {
		*now = t0.Add(step.at)
		c.jobs = []slurm.Job{step.job}
		c.nodes[0].GPUsUsed, c.nodes[0].CPUsAlloc = 0, 0
		if step.job.State == slurm.StateRunning {
			c.nodes[0].GPUsUsed, c.nodes[0].CPUsAlloc = 8, 8
		}
		a.got = nil
		if _, err := d.Cycle(ctx, false); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		for _, act := range a.got {
			if act.Kind == slurm.ActionStart {
				got = append(got, act.Tag.Extra[tagRan])
			}
		}
	}
	if diff := cmp.Diff([]string{"7200", "7800"}, got); diff != "" {
		t.Errorf("starts' ran= (-want +got):\n%s", diff)
	}
}

// The run before Slurm's requeue counts in the restart rule: a job that
// ran two hours on 4 GPUs before Slurm requeued it, running again on them
// for a minute, may grow onto the node's other 4, where counting the
// minute alone froze it (restart-penalty).
func TestSlurmRequeueRunCountsForRestarts(t *testing.T) {
	ctx := context.Background()
	half := func(start time.Time, restarts int) slurm.Job {
		j := ranBert(start, restarts, "0", "")
		j.GPUsPerNode, j.Tag.Plan = 4, "dp4.tp1.pp1.mb8.a1.z2"
		return j
	}
	nodes := labNodes(1)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 8, 16 // the other 4 taken
	other := heldJob(9, "", 1, 4)
	other.State, other.Held, other.Tag, other.NodeList, other.StartTime = slurm.StateRunning, false, nil, []string{"node1"}, t0.Add(-time.Hour)
	c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{half(t0.Add(-2*time.Hour), 0), other}}
	a := &fakeApplier{}
	d, _ := newTestDaemon(t, c, a)
	now := t0
	d.deps.Now = func() time.Time { return now }
	if _, err := d.Cycle(ctx, false); err != nil {
		t.Fatal(err)
	}
	// Requeued by Slurm and started again on its GPUs by Slurm itself;
	// the other job has ended.
	now = t0.Add(2 * time.Minute)
	c.jobs, c.nodes[0].GPUsUsed, c.nodes[0].CPUsAlloc = []slurm.Job{half(t0.Add(time.Minute), 1)}, 4, 8
	a.got = nil
	rep, err := d.Cycle(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	// The run Slurm ended goes into the tag at once (recordRuns), then
	// the restart counts both runs: two hours, and a minute.
	if len(a.got) != 2 || a.got[0].Kind != slurm.ActionAnnotate || a.got[1].Kind != slurm.ActionRestart || a.got[1].GPUsPerNode != 8 {
		t.Fatalf("actions %+v (plan %+v), want job 5's tag written, then the job restarted on 8 GPUs", a.got, rep.Plan.Actions)
	}
	if got, want := []string{a.got[0].Tag.Extra[tagRan], a.got[1].Tag.Extra[tagRan]}, []string{"7200", "7260"}; !slices.Equal(got, want) {
		t.Errorf("tags' ran= %q, want %q", got, want)
	}
}

// A job Slurm started again by itself after its requeue gets the run
// that ended into its tag at once: rubickd may write no other tag of it
// for hours, and its memory does not outlive a restart. A write that
// fails is tried again the next cycle; once written, it is not counted
// again.
func TestSlurmRestartedJobRunRecorded(t *testing.T) {
	ctx := context.Background()
	c, a, d, now := oneNodeLab(t, ranBert(t0.Add(-2*time.Hour), 0, "0", ""))
	if _, err := d.Cycle(ctx, false); err != nil {
		t.Fatal(err)
	}
	again := ranBert(t0.Add(time.Minute), 1, "0", "")
	c.jobs = []slurm.Job{again}
	a.fail = map[int]error{5: errors.New("scontrol: Socket timed out")}
	var written []string
	for i, at := range []time.Duration{2 * time.Minute, 3 * time.Minute, 4 * time.Minute} {
		*now = t0.Add(at)
		a.got = nil
		if _, err := d.Cycle(ctx, false); err != nil {
			t.Fatal(err)
		}
		for _, act := range a.got {
			if act.Kind == slurm.ActionAnnotate {
				written = append(written, act.Tag.Extra[tagRan])
			}
		}
		if i == 1 {
			// Written: Slurm lists the tag as the Applier wrote it.
			c.jobs = []slurm.Job{ranBert(t0.Add(time.Minute), 1, "1", "7200")}
		}
		a.fail = nil
	}
	if diff := cmp.Diff([]string{"7200", "7200"}, written); diff != "" {
		t.Errorf("tags written with ran= (-want +got):\n%s", diff)
	}
}

// A rubickd restarted after Slurm requeued a job by itself still counts
// the run the requeue ended, up to where the rubickd before it saw it:
// the store keeps each job's run as last seen. It does not count a run
// the job's tag counts already, nor another job's of the same id.
func TestSlurmRequeueAcrossRubickdRestart(t *testing.T) {
	for name, tc := range map[string]struct {
		after func(slurm.Job) slurm.Job // the job as the next rubickd finds it
		kind  slurm.ActionKind          // the action that writes its tag
		want  string                    // ran= of that tag
	}{
		"requeued while rubickd was stopped": {requeued, slurm.ActionStart, "7200"},
		"started again by Slurm since": {func(j slurm.Job) slurm.Job {
			j.StartTime, j.RestartCount = t0.Add(time.Minute), 1
			return j
		}, slurm.ActionAnnotate, "7200"},
		"rubickd's own requeue, acknowledged": {func(j slurm.Job) slurm.Job {
			r := requeued(j)
			r.Tag.Extra = map[string]string{slurm.TagRestarts: "1", tagRan: "7200"}
			return r
		}, slurm.ActionStart, "7200"},
		// Submitted since, and requeued by Slurm once too, in a run no
		// rubickd saw.
		"another job of the id": {func(j slurm.Job) slurm.Job {
			r := requeued(j)
			r.SubmitTime, r.Tag.Extra = t0, map[string]string{slurm.TagRestarts: "0"}
			return r
		}, slurm.ActionStart, ""},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			j := ranBert(t0.Add(-2*time.Hour), 0, "0", "")
			c, a, d, now := oneNodeLab(t, j)
			if _, err := d.Cycle(ctx, false); err != nil {
				t.Fatal(err)
			}
			*now = t0.Add(2 * time.Minute)
			next, err := New(d.cfg, d.deps)
			if err != nil {
				t.Fatal(err)
			}
			c.jobs = []slurm.Job{tc.after(j)}
			if c.jobs[0].State != slurm.StateRunning {
				c.nodes[0].GPUsUsed, c.nodes[0].CPUsAlloc = 0, 0
			}
			a.got = nil
			if _, err := next.Cycle(ctx, false); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, act := range a.got {
				if act.Kind == tc.kind && act.Tag != nil {
					got = append(got, act.Tag.Extra[tagRan])
				}
			}
			if diff := cmp.Diff([]string{tc.want}, got); diff != "" {
				t.Errorf("ran= of the %s tags (-want +got):\n%s (actions %+v)", tc.kind, diff, a.got)
			}
		})
	}
}

// A restart counts in the restart rule however the job got it: a start
// after a requeue, rubick's or Slurm's, advances the tag's generation, and
// a job Slurm started again by itself has only Slurm's restart count to
// show it.
func TestRestartsCounted(t *testing.T) {
	for name, tc := range map[string]struct {
		gen, restarts, want int
	}{
		"first run":                       {1, 0, 0},
		"restarted by rubick":             {2, 1, 1},
		"requeued and started by Slurm":   {1, 1, 1},
		"then restarted by rubick":        {2, 2, 2},
		"a generation past Slurm's count": {3, 1, 2},
	} {
		t.Run(name, func(t *testing.T) {
			j := ranBert(t0.Add(-time.Hour), tc.restarts, strconv.Itoa(tc.restarts), "")
			j.Tag.Generation = tc.gen
			nodes := labNodes(1)
			nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 8, 8
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: []slurm.Job{j}, Estimators: shippedEstimators(t)},
				slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Snapshot.Jobs) != 1 {
				t.Fatalf("snapshot jobs %+v (unmanaged %v), want job 5", v.Snapshot.Jobs, v.Unmanaged)
			}
			if got := v.Snapshot.Jobs[0].Reconfigs; got != tc.want {
				t.Errorf("Reconfigs = %d, want %d", got, tc.want)
			}
		})
	}
}

// A job requeued held by hand (scontrol requeuehold) is marked held by its
// user, a tag write that counts the requeue (rc=): it counts the run that
// requeue ended too, which nothing would count after a rubickd restart.
func TestHandRequeueRunRecorded(t *testing.T) {
	ctx := context.Background()
	j := ranBert(t0.Add(-2*time.Hour), 0, "0", "")
	c, a, d, now := oneNodeLab(t, j)
	if _, err := d.Cycle(ctx, false); err != nil {
		t.Fatal(err)
	}
	*now = t0.Add(30 * time.Second)
	r := requeued(j)
	r.Held, r.Reason = true, "JobHeldUser"
	c.jobs, c.nodes[0].GPUsUsed, c.nodes[0].CPUsAlloc = []slurm.Job{r}, 0, 0
	a.got = nil
	if _, err := d.Cycle(ctx, false); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, act := range a.got {
		if act.Kind == slurm.ActionAnnotate && act.Hold {
			got = append(got, act.Tag.Extra[tagRan])
		}
	}
	if diff := cmp.Diff([]string{"7200"}, got); diff != "" {
		t.Errorf("ran= of the hold's tag (-want +got):\n%s (actions %+v)", diff, a.got)
	}
}
