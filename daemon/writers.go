package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// Instance names one rubickd process in the tags it writes (slurm.TagBy):
// the instance lock keeps a second rubickd off the same store, but only
// the tags show one that runs from another store or another host.
type Instance struct {
	Host  string
	PID   int
	Start time.Time
}

// NewInstance names this process, started at start.
func NewInstance(start time.Time) Instance {
	host, _ := os.Hostname()
	return Instance{Host: host, PID: os.Getpid(), Start: start}
}

// IsZero reports whether i names no process.
func (i Instance) IsZero() bool { return i.PID == 0 }

// String is the tag value: host/pid/start, start in UTC to the second.
// Characters a tag value cannot hold become '-'.
func (i Instance) String() string {
	return i.hostName() + "/" + strconv.Itoa(i.PID) + "/" + i.Start.UTC().Format(time.RFC3339)
}

// hostName is the host as String writes it.
func (i Instance) hostName() string {
	host := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' {
			return c
		}
		return '-'
	}, i.Host)
	if host == "" {
		host = "-"
	}
	return host
}

// ParseInstance reads a tag's by= value.
func ParseInstance(s string) (Instance, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return Instance{}, fmt.Errorf("instance %q: want host/pid/start", s)
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return Instance{}, fmt.Errorf("instance %q: pid %q is not a positive integer", s, parts[1])
	}
	start, err := time.Parse(time.RFC3339, parts[2])
	if err != nil {
		return Instance{}, fmt.Errorf("instance %q: start %q is not an RFC 3339 time", s, parts[2])
	}
	return Instance{Host: parts[0], PID: pid, Start: start}, nil
}

// startedBefore reports whether i started before o; the same second goes
// by the names, so that of two rubickd exactly one gives way.
func (i Instance) startedBefore(o Instance) bool {
	a, b := i.Start.Truncate(time.Second), o.Start.Truncate(time.Second)
	if !a.Equal(b) {
		return a.Before(b)
	}
	return i.String() < o.String()
}

// Describe is the instance for an administrator: "pid 4242 on ctl1 since
// 2026-11-29T10:00:00Z".
func (i Instance) Describe() string {
	return fmt.Sprintf("pid %d on %s since %s", i.PID, i.hostName(), i.Start.UTC().Format(time.RFC3339))
}

// ErrOtherWriter means a job's tag names another rubickd that manages the
// cluster: it changed since the last cycle, or names one running on this
// host. It wraps ErrLocked.
var ErrOtherWriter = fmt.Errorf("%w: it writes this cluster's job tags", ErrLocked)

// tagWriters watches the jobs' tags between cycles for writes of another
// rubickd: two would apply their own plans to the same jobs, restarting
// and resizing them against each other.
type tagWriters struct {
	// seen is each job's tag at the last cycle, as rubickd writes it
	// (writerView).
	seen map[int]string
	// runs reports whether i, of this host, runs; nil means
	// rubickdRuns.
	runs func(i Instance) bool
}

// otherWrite is a tag that names another writer than this rubickd and
// either changed since the last cycle or names a rubickd running on this
// host (Running).
type otherWrite struct {
	Job slurm.Job
	By  string
	// Instance is By parsed, and Err the error where it does not parse.
	Instance Instance
	Err      error
	// Running: the tag names a rubickd that runs on this host now; it
	// need not have changed.
	Running bool
}

// observe takes this cycle's jobs and returns their tags that name
// another rubickd than self and changed since the last cycle, or name a
// rubickd running on this host. A tag of another host first seen now
// tells nothing: it may be from a rubickd that ran before this one.
func (w *tagWriters) observe(self Instance, jobs []slurm.Job) []otherWrite {
	seen := make(map[int]string, len(jobs))
	runs := map[string]bool{} // by instance: asked once a cycle, not once a job
	me, host := self.String(), self.hostName()
	var out []otherWrite
	for _, j := range jobs {
		if j.Tag == nil {
			continue
		}
		view := writerView(*j.Tag)
		seen[j.ID] = view
		by := j.Tag.Extra[slurm.TagBy]
		if by == "" || by == me {
			continue
		}
		prev, ok := w.seen[j.ID]
		o := otherWrite{Job: j, By: by}
		o.Instance, o.Err = ParseInstance(by)
		if o.Err == nil && o.Instance.Host == host {
			r, asked := runs[by]
			if !asked {
				r = o.Instance.PID != self.PID && w.rubickdRuns(o.Instance)
				runs[by] = r
			}
			if !r {
				// A rubickd of this host that no longer runs (one
				// with this one's pid ran before it, as in a
				// container restarted): its tags are from before,
				// and a change is someone's edit by hand.
				continue
			}
			o.Running = true
		} else if !ok || prev == view {
			continue
		}
		out = append(out, o)
	}
	w.seen = seen
	return out
}

func (w *tagWriters) rubickdRuns(i Instance) bool {
	if w.runs != nil {
		return w.runs(i)
	}
	return rubickdRuns(i)
}

// rubickdRuns reports whether rubickd i of this host runs: its pid's
// command is rubickd, that process started by i's start, and it has not
// exited. A pid the kernel gave to another process since, rubickd or not,
// started later. An exited one stays a zombie until its parent reaps it,
// which in a container whose first process reaps none is never.
func rubickdRuns(i Instance) bool {
	dir := "/proc/" + strconv.Itoa(i.PID)
	comm, err := os.ReadFile(dir + "/comm")
	if err != nil || strings.TrimSpace(string(comm)) != "rubickd" {
		return false
	}
	state, started, err := processStat(dir)
	// The tag's start is in whole seconds, and taken just after the
	// process started.
	return err == nil && state != "Z" && state != "X" && !started.After(i.Start.Add(2*time.Second))
}

// processStat is the state of the process of /proc directory dir ("R",
// "S", "Z" for one that exited and was not reaped, ...) and when it
// started: its stat's starttime (clock ticks after boot, USER_HZ = 100 on
// Linux) after /proc/stat's btime.
func processStat(dir string) (state string, start time.Time, err error) {
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return "", time.Time{}, err
	}
	// The command, in parentheses, may hold spaces; the state is the
	// first field after it, starttime the 20th.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 20 {
		return "", time.Time{}, fmt.Errorf("%s/stat: %d fields after the command", dir, len(fields))
	}
	state = fields[0]
	ticks, err := strconv.ParseInt(fields[19], 10, 64)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%s/stat: starttime: %w", dir, err)
	}
	boot, err := os.ReadFile("/proc/stat")
	if err != nil {
		return "", time.Time{}, err
	}
	for _, line := range strings.Split(string(boot), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			btime, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return "", time.Time{}, fmt.Errorf("/proc/stat: btime: %w", err)
			}
			return state, time.Unix(btime, ticks*int64(time.Second/100)), nil
		}
	}
	return "", time.Time{}, errors.New("/proc/stat: no btime")
}

// writerView is the tag as rubickd writes it: job_submit.lua rewrites
// the class when a job's QOS or account changes, so the class is left out.
func writerView(t slurm.Tag) string {
	t.Class = ""
	t.Extra = maps.Clone(t.Extra)
	return t.String()
}

// checkWriters returns ErrOtherWriter when a rubickd that started before
// this one wrote a tag since the last cycle, or runs on this host and
// wrote one of the tags now listed: this one stops, as the instance lock
// stops a second rubickd on the same store. The older one goes on and
// says, once for each, that another rubickd manages the cluster too; that
// one stops as soon as it sees a tag of the older's, which the older
// writes for it (claim).
func (d *Daemon) checkWriters(ctx context.Context, jobs []slurm.Job) error {
	if d.deps.Instance.IsZero() {
		return nil
	}
	claimed := map[string]bool{}
	for _, o := range d.writers.observe(d.deps.Instance, jobs) {
		if !o.Running {
			d.deps.Metrics.OtherWrites.Inc()
		}
		if o.Err != nil {
			if !d.writersSaid[o.By] {
				d.writersSaid[o.By] = true
				d.deps.Logger.Warn("a job's tag changed since the last cycle and names a writer not in rubickd's form, host/pid/start", "job", o.Job.ID, "by", o.By, "err", o.Err)
			}
			continue
		}
		if o.Instance.startedBefore(d.deps.Instance) {
			what := fmt.Sprintf("wrote job %d's tag since the last cycle", o.Job.ID)
			if o.Running {
				what = fmt.Sprintf("runs on this host and wrote job %d's tag", o.Job.ID)
			}
			return fmt.Errorf("%w: %s %s; this rubickd (%s) started later and stops",
				ErrOtherWriter, o.Instance.Describe(), what, d.deps.Instance.Describe())
		}
		if !d.writersSaid[o.By] {
			d.writersSaid[o.By] = true
			d.deps.Logger.Error("another rubickd manages this cluster's jobs too; it started later and stops once it sees a tag this one writes",
				"other", o.Instance.Describe(), "job", o.Job.ID)
		}
		// One claim a cycle for each, and for a tag that did not change
		// (one running here) one in all: it stands until the other writes.
		if !claimed[o.By] && !(o.Running && d.writersClaimed[o.By]) && d.claim(ctx, o.Job) {
			claimed[o.By], d.writersClaimed[o.By] = true, true
		}
	}
	return nil
}

// claim writes job j's tag as it is, under this rubickd's name, so that
// the younger rubickd that wrote it sees a tag of this one's in its next
// cycle and stops, rather than when this one next has reason to write.
// Only a running job that is not requeueing itself: a tag write takes
// rubick-srun's requeue mark out, and the younger one may be in the middle
// of a restart of a job that is not running.
func (d *Daemon) claim(ctx context.Context, j slurm.Job) bool {
	if j.Tag == nil || j.State != slurm.StateRunning || slurm.HasWord(j.Comment, slurm.RequeueWord) {
		return false
	}
	// Read again: the other rubickd may have rewritten the tag since the
	// cycle read it (a restart's new plan and generation), which the tag
	// as read then would take back.
	now, err := d.deps.Cluster.Job(ctx, j.ID)
	if err != nil {
		d.deps.Logger.Warn("reading a job to write its tag for the other rubickd failed", "job", j.ID, "err", err)
		return false
	}
	if j = now; j.Tag == nil || j.State != slurm.StateRunning || slurm.HasWord(j.Comment, slurm.RequeueWord) {
		return false
	}
	if err := d.writeTag(ctx, j.ID, *j.Tag); err != nil {
		d.deps.Logger.Warn("writing a tag for the other rubickd to see failed", "job", j.ID, "err", err)
		return false
	}
	d.deps.Logger.Info("wrote a job's tag under this rubickd's name for the other rubickd to see", "job", j.ID)
	return true
}
