package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/slurm"
)

func TestInstance(t *testing.T) {
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		in   Instance
		want string
	}{
		{Instance{Host: "ctl1.cluster", PID: 4242, Start: start}, "ctl1.cluster/4242/2026-11-29T09:00:00Z"},
		{Instance{Host: "odd host;x=1", PID: 7, Start: start.Add(1500 * time.Millisecond)}, "odd-host-x-1/7/2026-11-29T09:00:01Z"},
		{Instance{PID: 7, Start: start}, "-/7/2026-11-29T09:00:00Z"},
	} {
		got := tc.in.String()
		if got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.in, got, tc.want)
		}
		if err := (slurm.Tag{Extra: map[string]string{slurm.TagBy: got}}).Validate(); err != nil {
			t.Errorf("%q is no tag value: %v", got, err)
		}
		back, err := ParseInstance(got)
		if err != nil {
			t.Fatalf("ParseInstance(%q): %v", got, err)
		}
		if back.String() != got {
			t.Errorf("ParseInstance(%q) writes %q", got, back.String())
		}
	}
	for in, want := range map[string]string{
		"ctl1/4242":                      "want host/pid/start",
		"ctl1/x/2026-11-29T09:00:00Z":    `pid "x"`,
		"ctl1/-3/2026-11-29T09:00:00Z":   `pid "-3"`,
		"ctl1/4242/yesterday":            `start "yesterday"`,
		"a/b/4242/2026-11-29T09:00:00Z":  "want host/pid/start",
		"ctl1/4242/2026-11-29 09:00:00Z": `start "2026-11-29 09:00:00Z"`,
	} {
		if _, err := ParseInstance(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseInstance(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

func TestInstanceStartedBefore(t *testing.T) {
	a := Instance{Host: "a", PID: 1, Start: t0}
	for _, tc := range []struct {
		name string
		i, o Instance
		want bool
	}{
		{"earlier", a, Instance{Host: "a", PID: 2, Start: t0.Add(time.Second)}, true},
		{"later", Instance{Host: "a", PID: 2, Start: t0.Add(time.Second)}, a, false},
		// The tag keeps whole seconds: both must read the same order.
		{"same second, by name", Instance{Host: "a", PID: 1, Start: t0.Add(900 * time.Millisecond)}, Instance{Host: "b", PID: 1, Start: t0}, true},
		{"same second, other side", Instance{Host: "b", PID: 1, Start: t0}, Instance{Host: "a", PID: 1, Start: t0.Add(900 * time.Millisecond)}, false},
	} {
		if got := tc.i.startedBefore(tc.o); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// taggedJob is a running job with a tag of plan and writer by.
func taggedJob(id int, plan, by string) slurm.Job {
	tag := &slurm.Tag{ModelType: "gpt2", Class: slurm.ClassBestEffort, Plan: plan, Generation: 1}
	if by != "" {
		tag.Extra = map[string]string{slurm.TagBy: by, slurm.TagRestarts: "0"}
	}
	return slurm.Job{ID: id, Partition: "gpu", State: slurm.StateRunning, Tag: tag}
}

func TestTagWritersObserve(t *testing.T) {
	self := Instance{Host: "ctl1", PID: 100, Start: t0}
	other := Instance{Host: "ctl2", PID: 200, Start: t0.Add(-time.Hour)}
	gone := Instance{Host: "ctl1", PID: 300, Start: t0.Add(-time.Hour)}
	here := Instance{Host: "ctl1", PID: 400, Start: t0.Add(-time.Hour)}
	runs := func(i Instance) bool { return i.PID == 400 || i.PID == 100 }
	before := Instance{Host: "ctl1", PID: 100, Start: t0.Add(-time.Hour)}
	lua := func(j slurm.Job) slurm.Job { j.Tag.Class = slurm.ClassGuaranteed; return j }
	for _, tc := range []struct {
		name         string
		before, then []slurm.Job
		want         []int
	}{
		{"first seen", nil, []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", other.String())}, nil},
		{"unchanged", []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", other.String())}, []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", other.String())}, nil},
		{"written here", []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", other.String())}, []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", self.String())}, nil},
		{"written by another", []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", self.String())}, []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", other.String())}, []int{1}},
		{"another writes again", []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", other.String())}, []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", other.String())}, []int{1}},
		{"job_submit.lua's class", []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", other.String())}, []slurm.Job{lua(taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", other.String()))}, nil},
		{"no writer named", []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", self.String())}, []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", "")}, nil},
		{"a rubickd of this host gone", []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", self.String())}, []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", gone.String())}, nil},
		{"a rubickd of this host running", []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", self.String())}, []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", here.String())}, []int{1}},
		// One running here is found without a write to see.
		{"a rubickd of this host running, first seen", nil, []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", here.String())}, []int{1}},
		{"a rubickd of this host running, unchanged", []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", here.String())}, []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", here.String())}, []int{1}},
		{"a rubickd of this host gone, first seen", nil, []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", gone.String())}, nil},
		// This one's pid, as a container restarted gives it again.
		{"a rubickd with this one's pid before it", nil, []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", before.String())}, nil},
		{"not a rubickd's name", []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", self.String())}, []slurm.Job{taggedJob(1, "dp4.tp1.pp1.mb1.a2.z0", "someone")}, []int{1}},
		{"one of two jobs", []slurm.Job{taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", self.String()), taggedJob(2, "dp8.tp1.pp1.mb1.a1.z0", self.String())},
			[]slurm.Job{taggedJob(2, "dp4.tp1.pp1.mb1.a2.z0", other.String()), taggedJob(1, "dp8.tp1.pp1.mb1.a1.z0", self.String())}, []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tagWriters{runs: runs}
			w.observe(self, tc.before)
			var got []int
			for _, o := range w.observe(self, tc.then) {
				got = append(got, o.Job.ID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("jobs written by another (-want +got):\n%s", diff)
			}
		})
	}
}

// onNode1 is j running with gpus GPUs (and as many CPUs) on node1.
func onNode1(j slurm.Job, gpus int) slurm.Job {
	j.NodeList, j.NodeCount, j.GPUsPerNode, j.CPUs = []string{"node1"}, 1, gpus, gpus
	return j
}

// writersDaemon is rubickd self on two nodes, with job 7 running on node1
// under a tag by wrote, and job 8 held; its log goes to the buffer.
func writersDaemon(t *testing.T, self Instance, by string) (*Daemon, *fakeCluster, *fakeApplier, *bytes.Buffer) {
	t.Helper()
	c := &fakeCluster{jobs: []slurm.Job{onNode1(taggedJob(7, "dp8.tp1.pp1.mb1.a1.z0", by), 8), heldJob(8, "gpt2", 1, 8)}, nodes: labNodes(2)}
	a := &fakeApplier{}
	d, _ := newTestDaemon(t, c, a)
	var logs bytes.Buffer
	d.deps.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	d.deps.Instance = self
	return d, c, a, &logs
}

func TestCycleStopsForAnOlderRubickd(t *testing.T) {
	self := Instance{Host: "ctl1", PID: 100, Start: t0}
	for _, tc := range []struct {
		name  string
		other Instance
		stops bool
	}{
		{"older", Instance{Host: "ctl2", PID: 200, Start: t0.Add(-time.Hour)}, true},
		{"younger", Instance{Host: "ctl2", PID: 200, Start: t0.Add(time.Minute)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, c, a, logs := writersDaemon(t, self, self.String())
			if rep, err := d.Cycle(context.Background(), false); err != nil || rep.Instance != self.String() {
				t.Fatalf("first cycle: instance %q (%v), want %q", rep.Instance, err, self)
			}
			applied := len(a.got)
			// The other rubickd rewrites job 7's tag before each of the
			// next two cycles.
			for _, plan := range []string{"dp4.tp1.pp1.mb1.a2.z0", "dp2.tp1.pp1.mb1.a4.z0"} {
				c.jobs = []slurm.Job{onNode1(taggedJob(7, plan, tc.other.String()), 4), heldJob(9, "gpt2", 1, 8)}
				_, err := d.Cycle(context.Background(), false)
				if !tc.stops {
					if err != nil {
						t.Fatalf("cycle beside a younger rubickd: %v", err)
					}
					continue
				}
				if !errors.Is(err, ErrLocked) || !errors.Is(err, ErrOtherWriter) {
					t.Fatalf("cycle after an older rubickd's write: %v, want ErrOtherWriter", err)
				}
				for _, want := range []string{"pid 200 on ctl2 since 2026-11-22T07:00:00Z wrote job 7's tag", "this rubickd (pid 100 on ctl1"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
				if len(a.got) != applied {
					t.Errorf("applied %+v after the older rubickd's write", a.got[applied:])
				}
				break
			}
			if tc.stops {
				return
			}
			if got := strings.Count(logs.String(), "another rubickd manages this cluster"); got != 1 {
				t.Errorf("%d errors logged for the younger rubickd, want 1:\n%s", got, logs.String())
			}
			rec := httptest.NewRecorder()
			d.deps.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if want := "rubick_other_rubickd_writes_total 2\n"; !strings.Contains(rec.Body.String(), want) {
				t.Errorf("metrics lack %q", want)
			}
			if !slices.Contains(startedJobs(a), 9) {
				t.Errorf("started %v: the older rubickd stopped planning", startedJobs(a))
			}
			// Each time, it wrote the tag as the other left it, for the
			// other to see its name there.
			if diff := cmp.Diff([]string{"dp4.tp1.pp1.mb1.a2.z0", "dp2.tp1.pp1.mb1.a4.z0"}, annotated(a, 7)); diff != "" {
				t.Errorf("tags written for job 7 (-want +got):\n%s", diff)
			}
		})
	}
}

// otherWriterCluster changes a job's tag to another rubickd's after the
// first poll.
type otherWriterCluster struct {
	fakeCluster
	polls int
	by    string
}

func (c *otherWriterCluster) Jobs(ctx context.Context, since time.Time) ([]slurm.Job, bool, error) {
	c.polls++
	if c.polls > 1 {
		c.jobs = []slurm.Job{taggedJob(7, "dp4.tp1.pp1.mb1.a2.z0", c.by)}
	}
	return c.fakeCluster.Jobs(ctx, since)
}

func TestRunStopsForAnOlderRubickd(t *testing.T) {
	self := Instance{Host: "ctl1", PID: 100, Start: t0}
	older := Instance{Host: "ctl2", PID: 200, Start: t0.Add(-time.Hour)}
	c := &otherWriterCluster{fakeCluster: fakeCluster{jobs: []slurm.Job{taggedJob(7, "dp8.tp1.pp1.mb1.a1.z0", self.String())}, nodes: labNodes(1)}, by: older.String()}
	d, _ := newTestDaemonWith(t, c, &fakeApplier{}, func(cfg *Config) { cfg.Interval = time.Millisecond })
	d.deps.Instance = self
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Run(ctx); !errors.Is(err, ErrOtherWriter) {
		t.Fatalf("Run = %v, want ErrOtherWriter", err)
	}
}

// Run ends without an error when its context does, during the start-up
// reconciliation or after the cycle in progress, and says so with the
// cause.
func TestRunStopsWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		before     bool // cancelled before Run, so during the reconciliation
	}{
		{"in a cycle", `msg="rubickd stopping; the cycle in progress finished" cause=terminated`, false},
		{"reconciling", `msg="rubickd stopping; reconciling stopped" cause=terminated`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			term := func() { cancel(errors.New("terminated")) }
			c := &cancelingCluster{fakeCluster: fakeCluster{nodes: labNodes(1)}, cancel: term}
			d, _ := newTestDaemonWith(t, c, &fakeApplier{}, func(cfg *Config) { cfg.Interval = time.Hour })
			var logs bytes.Buffer
			d.deps.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			if tc.before {
				term()
			}
			if err := d.Run(ctx); err != nil {
				t.Fatalf("Run = %v, want nil", err)
			}
			if !strings.Contains(logs.String(), tc.want) {
				t.Errorf("log lacks %q:\n%s", tc.want, logs.String())
			}
		})
	}
}

// cancelingCluster calls cancel at its first poll of the jobs, as a
// SIGTERM during a cycle would.
type cancelingCluster struct {
	fakeCluster
	cancel func()
}

func (c *cancelingCluster) Jobs(ctx context.Context, since time.Time) ([]slurm.Job, bool, error) {
	c.cancel()
	return c.fakeCluster.Jobs(ctx, since)
}

// A rubickd running on this host that started first is found in the first
// cycle, from a tag it wrote before this one started: nothing is applied.
// One that started later is logged once, and this one plans on.
func TestCycleBesideARubickdOfThisHost(t *testing.T) {
	self := Instance{Host: "ctl1", PID: 100, Start: t0}
	for _, tc := range []struct {
		name  string
		other Instance
		stops bool
	}{
		{"older", Instance{Host: "ctl1", PID: 200, Start: t0.Add(-time.Hour)}, true},
		{"younger", Instance{Host: "ctl1", PID: 200, Start: t0.Add(time.Minute)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _, a, logs := writersDaemon(t, self, tc.other.String())
			d.writers.runs = func(i Instance) bool { return i.PID == 200 }
			for range 2 {
				_, err := d.Cycle(context.Background(), false)
				if tc.stops {
					if !errors.Is(err, ErrOtherWriter) || !strings.Contains(err.Error(), "pid 200 on ctl1 since 2026-11-22T07:00:00Z runs on this host and wrote job 7's tag") {
						t.Fatalf("first cycle: %v, want ErrOtherWriter naming pid 200", err)
					}
					if len(a.got) != 0 {
						t.Errorf("applied %+v", a.got)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if got := strings.Count(logs.String(), "another rubickd manages this cluster"); got != 1 {
				t.Errorf("%d errors logged for the younger rubickd, want 1:\n%s", got, logs.String())
			}
			if !slices.Contains(startedJobs(a), 8) {
				t.Errorf("started %v, want job 8", startedJobs(a))
			}
			// Its tag, unchanged, is written once, not every cycle.
			if diff := cmp.Diff([]string{"dp8.tp1.pp1.mb1.a1.z0"}, annotated(a, 7)); diff != "" {
				t.Errorf("tags written for job 7 (-want +got):\n%s", diff)
			}
		})
	}
}

// rubickdRuns goes by the command name and the start: a sleep named
// rubickd is one, unless the tag's rubickd started long before it; the
// test process is not, and neither is a pid that ended, reaped or not.
func TestRubickdRuns(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep:", err)
	}
	bin, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	named := filepath.Join(t.TempDir(), "rubickd")
	if err := os.WriteFile(named, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(named, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// exec has returned once Start does, and the name is the new one.
	now := time.Now().Truncate(time.Second)
	if i := (Instance{PID: pid, Start: now}); !rubickdRuns(i) {
		t.Errorf("rubickdRuns(%s) = false for a process named rubickd started then", i)
	}
	// The process started long after the tag's rubickd: the pid was
	// given again.
	if i := (Instance{PID: pid, Start: now.Add(-time.Hour)}); rubickdRuns(i) {
		t.Errorf("rubickdRuns(%s) = true for a process that started an hour later", i)
	}
	if i := (Instance{PID: os.Getpid(), Start: now}); rubickdRuns(i) {
		t.Error("the test process counts as a rubickd")
	}
	_ = cmd.Process.Kill()
	// Not reaped yet: a zombie, as one whose parent reaps none stays.
	zombie := false
	for range 1000 {
		if state, _, err := processStat("/proc/" + strconv.Itoa(pid)); err == nil && state == "Z" {
			zombie = true
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !zombie {
		t.Fatalf("pid %d did not become a zombie after the kill", pid)
	}
	if i := (Instance{PID: pid, Start: now}); rubickdRuns(i) {
		t.Errorf("rubickdRuns(%s) = true for a zombie", i)
	}
	_ = cmd.Wait()
	if i := (Instance{PID: pid, Start: now}); rubickdRuns(i) {
		t.Errorf("rubickdRuns(%s) = true after it ended", i)
	}
}

// annotated is the plans of the tags applied to job id by annotations.
func annotated(a *fakeApplier, id int) []string {
	var out []string
	for _, act := range a.got {
		if act.Kind == slurm.ActionAnnotate && act.JobID == id && act.Tag != nil {
			out = append(out, act.Tag.Plan)
		}
	}
	return out
}

// claim writes only the tag of a running job that is not requeueing
// itself.
func TestClaim(t *testing.T) {
	running := taggedJob(7, "dp8.tp1.pp1.mb1.a1.z0", "ctl2/200/2026-11-22T09:00:00Z")
	pending := running
	pending.State = slurm.StatePending
	requeueing := running
	requeueing.Comment = "my note " + slurm.RequeueWord
	untagged := running
	untagged.Tag = nil
	restarted := taggedJob(7, "dp4.tp1.pp1.mb1.a2.z0", "ctl2/200/2026-11-22T09:00:00Z")
	restarted.Tag.Generation++
	for _, tc := range []struct {
		name string
		// job is the job as the cycle read it, now as Slurm has it at the
		// claim.
		job, now slurm.Job
		want     bool
	}{
		{"running", running, running, true},
		{"pending", pending, pending, false},
		{"requeueing itself", requeueing, requeueing, false},
		{"no tag", untagged, untagged, false},
		{"requeued since", running, pending, false},
		{"restarted since", running, restarted, true},
	} {
		a := &fakeApplier{}
		d, _ := newTestDaemon(t, &fakeCluster{jobs: []slurm.Job{tc.now}}, a)
		if got := d.claim(context.Background(), tc.job); got != tc.want || len(a.got) != map[bool]int{true: 1}[tc.want] {
			t.Errorf("%s: claim = %v with %d actions, want %v", tc.name, got, len(a.got), tc.want)
			continue
		}
		if tc.want && a.got[0].Tag.String() != tc.now.Tag.String() {
			t.Errorf("%s: claim wrote %v, want the tag Slurm has now, %v", tc.name, a.got[0].Tag, tc.now.Tag)
		}
	}
}

// rubickd --check names the rubickd the jobs' tags name, other than the
// one holding the store's lock: one running on this host, one of another
// host; not one of this host that ended, nor the lock's holder.
func TestCheckTagWriters(t *testing.T) {
	store := filepath.Join(t.TempDir(), "rubick.db")
	service := Instance{Host: "ctl1", PID: os.Getpid(), Start: t0}
	lock, err := LockInstance(LockPath(store), service)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	other := Instance{Host: "ctl1", PID: 200, Start: t0.Add(time.Hour)}
	ended := Instance{Host: "ctl1", PID: 300, Start: t0}
	remote := Instance{Host: "ctl2", PID: 400, Start: t0}
	deps := CheckDeps{Host: "ctl1", RubickdRuns: func(i Instance) bool { return i.PID != ended.PID }}
	tagged := func(by ...Instance) []slurm.Job {
		var jobs []slurm.Job
		for k, i := range by {
			jobs = append(jobs, taggedJob(10+k, "dp8.tp1.pp1.mb1.a1.z0", i.String()))
		}
		return jobs
	}
	if r, ok := checkTagWriters(tagged(service, ended, service), store, deps); ok {
		t.Errorf("tags of the service and of one that ended: %+v, want no line", r)
	}
	gone := Instance{Host: "ctl3", PID: 500, Start: t0}
	jobs := tagged(service, other, ended, remote, other, gone)
	jobs[5].State = slurm.StateCancelled // ctl3's managed the cluster back then
	r, ok := checkTagWriters(jobs, store, deps)
	if !ok || r.Status != CheckWarn || r.Name != "other rubickd" {
		t.Fatalf("got %+v (%v), want a warning", r, ok)
	}
	for _, want := range []string{
		"running on this host with another store: pid 200 on ctl1 since 2026-11-22T09:00:00Z (job 11)",
		"of another host, running there unless it ended: pid 400 on ctl2 since 2026-11-22T08:00:00Z (job 13)",
	} {
		if !strings.Contains(r.Detail, want) {
			t.Errorf("detail %q lacks %q", r.Detail, want)
		}
	}
	if strings.Contains(r.Detail, "pid 300") || strings.Contains(r.Detail, "ctl3") || strings.Contains(r.Detail, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("detail %q names the ended rubickd, one of an ended job only, or the service", r.Detail)
	}
}
