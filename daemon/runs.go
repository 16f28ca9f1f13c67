package daemon

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// A job Slurm requeues by itself (its node failed, a QOS preempted it, an
// administrator ran scontrol requeue) loses the run that ended from its
// tag's run time (ran=): Slurm's record of the job starts over at the
// requeue, and only rubickd's own requeues write ran=. Yet that requeue
// counts as one of the job's restarts when rubickd starts it again, so the
// restart rule, (T - N*delta)/T, and the gains weighed against a restart's
// cost (run time so far standing for time left) saw a job that ran for
// hours as one that had just begun (24.11 lab, three requeues: "would
// leave 0% of its 16s run time useful"). rubickd keeps the run time it
// last saw of each running job and, once Slurm has requeued the job since,
// counts it as run until a tag of rubickd's records it. The store keeps
// each job's run as last seen (record writes it with the job), so a
// rubickd restarted since, even one stopped across the requeue, counts it
// too, up to where the one before saw it; what no rubickd saw (a run that
// began and ended while it was stopped) stays lost.

// runSeen is a running job as the last cycle saw it: its restart count,
// which a requeue raises, and its run time then.
type runSeen struct {
	restarts int
	ran      time.Duration
}

// unrecorded is run time of runs Slurm requeued that the job's tag does
// not count, with the tag's ran= when it was first counted: a tag that
// says otherwise has been written by rubickd since, with it.
type unrecorded struct {
	ran  time.Duration
	base string
}

// loadRuns reads what the store kept of the listed jobs' runs as last
// seen into d.runs, where noteRuns then finds the runs Slurm requeued
// since. A stored run of another job of the id (an earlier submission) is
// not the job's.
func (d *Daemon) loadRuns(ctx context.Context, jobs []slurm.Job) error {
	ids := make([]int64, 0, len(jobs))
	for _, j := range jobs {
		if j.Tag != nil {
			ids = append(ids, int64(j.ID))
		}
	}
	seen, err := d.deps.Store.LastRuns(ctx, ids)
	if err != nil {
		return fmt.Errorf("read jobs' runs as last seen: %w", err)
	}
	d.runs, d.unrecorded = make(map[int]runSeen, len(seen)), map[int]unrecorded{}
	for _, j := range jobs {
		s, ok := seen[int64(j.ID)]
		if ok && j.Tag != nil && s.Submitted.Unix() == submitTime(j).Unix() {
			d.runs[j.ID] = runSeen{restarts: s.Restarts, ran: s.Time}
		}
	}
	return nil
}

// lastRun is job id's run as the cycle last saw it, for the store: zero
// for a job not seen running since its last requeue.
func (d *Daemon) lastRun(id int) store.Run {
	s, ok := d.runs[id]
	if !ok || s.ran <= 0 {
		return store.Run{}
	}
	return store.Run{Restarts: s.restarts, Time: s.ran}
}

// noteRuns updates what rubickd saw run (d.runs) from jobs, as read at
// now, and counts the runs Slurm requeued since (d.unrecorded). It runs
// after ackRequeues: a requeue of rubickd's own is acknowledged by then,
// its tag counting the run, and a job whose acknowledgement failed is
// not in jobs.
func (d *Daemon) noteRuns(jobs []slurm.Job, now time.Time) {
	listed := make(map[int]bool, len(jobs))
	if d.runs == nil {
		d.runs, d.unrecorded = map[int]runSeen{}, map[int]unrecorded{}
	}
	for _, j := range jobs {
		listed[j.ID] = true
		if j.Tag == nil {
			delete(d.runs, j.ID)
			delete(d.unrecorded, j.ID)
			continue
		}
		if u, ok := d.unrecorded[j.ID]; ok && j.Tag.Extra[tagRan] != u.base {
			delete(d.unrecorded, j.ID)
		}
		if s, ok := d.runs[j.ID]; ok && j.RestartCount > s.restarts {
			delete(d.runs, j.ID)
			if slurm.RequeuedSinceTag(j) && s.ran >= time.Second {
				u, ok := d.unrecorded[j.ID]
				if !ok {
					u.base = j.Tag.Extra[tagRan]
				}
				u.ran += s.ran.Truncate(time.Second)
				d.unrecorded[j.ID] = u
			}
		}
		if j.State == slurm.StateRunning || j.State == slurm.StateSuspended {
			d.runs[j.ID] = runSeen{restarts: j.RestartCount, ran: j.RunTime(now)}
		}
	}
	for id := range d.runs {
		if !listed[id] {
			delete(d.runs, id)
		}
	}
	for id := range d.unrecorded {
		if _, waits := d.unacked[id]; !listed[id] && !waits {
			delete(d.unrecorded, id)
		}
	}
}

// recordRuns writes into the tags of the running jobs Slurm started again
// by itself after its requeue (their node back by their begin time) the
// run time the tag does not count yet, and returns jobs as they are then:
// rubickd writes no other tag of theirs until it reconfigures them, maybe
// hours later. A pending job's is written with its start, or with the hold
// of a requeue by hand. A write that fails is tried next cycle.
func (d *Daemon) recordRuns(ctx context.Context, jobs []slurm.Job) []slurm.Job {
	cloned := false
	for i, j := range jobs {
		if _, ok := d.unrecorded[j.ID]; !ok || j.State != slurm.StateRunning || !slurm.RequeuedSinceTag(j) {
			continue
		}
		tag := cloneTag(*j.Tag)
		d.countUnrecorded(j.ID, &tag)
		if err := d.writeTag(ctx, j.ID, tag); err != nil {
			d.deps.Logger.Warn("recording the run time of a job Slurm requeued failed; tried again next cycle", "job", j.ID, "err", err)
			continue
		}
		delete(d.unrecorded, j.ID)
		if !cloned {
			jobs, cloned = slices.Clone(jobs), true // d.lastJobs is the cached list
		}
		tag.Extra[slurm.TagRestarts] = strconv.Itoa(j.RestartCount) // as the Applier writes it
		jobs[i].Tag = &tag
	}
	return jobs
}

// countUnrecorded adds to tag, about to be written as job id's, the run
// time Slurm's requeue took that the job's tag does not count
// (d.unrecorded): the write sets the tag's restart count past that
// requeue, and from then on only ran= would count the run.
func (d *Daemon) countUnrecorded(id int, tag *slurm.Tag) {
	u, ok := d.unrecorded[id]
	if !ok || tag == nil || tag.Extra[tagRan] != u.base {
		return
	}
	ran := u.ran
	if before, err := tag.RanTime(); err == nil {
		ran += before
	}
	if tag.Extra == nil {
		tag.Extra = map[string]string{}
	}
	tag.Extra[tagRan] = slurm.RanSeconds(ran)
}
