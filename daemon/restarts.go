package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// RestartStore is the part of the store that measuring restart costs uses.
type RestartStore interface {
	JobsRestartCosts(ctx context.Context, ids []int64) (map[int64][]store.RestartCost, error)
	Unmeasured(ctx context.Context, kind string, since time.Time) ([]store.Action, error)
	PlanHistory(ctx context.Context, jobID int64) ([]store.Action, error)
	JobSamples(ctx context.Context, jobID int64) ([]store.StoredSample, error)
	AddRestartCost(ctx context.Context, c store.RestartCost) (bool, error)
	RestartCosts(ctx context.Context, modelType string, limit int) ([]store.RestartCost, error)
}

const (
	// measureWindow bounds how far back restarts are still measured: a job
	// that has not reported within a day of its restart never will.
	measureWindow = 24 * time.Hour
	// recentRestarts is how many of a model type's newest measured
	// restarts its cost is the median of.
	recentRestarts = 5
)

// Why a restart cannot be measured (yet).
var (
	errNoSampleAfter  = errors.New("no sample reported between the restart and the job's next action")
	errNoSampleBefore = errors.New("no sample reported in the run before the restart")
	errCounterBack    = errors.New("the trainer's iteration counter went back: the run did not resume from its checkpoint")
)

// MeasureRestart prices the checkpoint-restart a, applied to its job, from
// the samples the job reported (oldest first). prev is when the job's
// previous start or restart was applied (zero if none) and next when its
// next action was decided (zero if none): the samples before the restart
// must come from the run that a stopped, and the one after it from the run
// a started.
//
// With t0, i0 and v0 the time, iteration counter and iteration time of the
// last sample before the restart was decided (at td), and t1, i1 and v1
// those of the first sample after it was applied, the run trained about
// (td-t0)/v0 more iterations before it stopped, so the restarted run had
// done n = i1 - i0 - (td-t0)/v0 of its own by t1, and
//
//	cost = (t1 - td) - max(n, 0) * v1
//
// is the wall time from the decision to restart until training went on,
// less the training done in it: checkpoint, requeue, the wait for the
// nodes, start-up, loading and warm-up, and any iterations the checkpoint
// lost. It fails with errNoSampleAfter when the restarted run has not
// reported before the job's next action.
func MeasureRestart(a store.Action, prev, next time.Time, samples []store.StoredSample) (store.RestartCost, error) {
	var before, after *store.StoredSample
	for i := range samples {
		s := &samples[i]
		switch {
		case s.Iteration < 0 || s.Source != store.SourceOnline:
			// profile and artifact samples have no place in the run
		case s.Created.Before(a.DecidedAt) && s.Created.After(prev):
			before = s
		case s.Created.After(a.AppliedAt) && (next.IsZero() || s.Created.Before(next)) && after == nil:
			after = s
		}
	}
	switch {
	case after == nil:
		return store.RestartCost{}, errNoSampleAfter
	case before == nil:
		return store.RestartCost{}, errNoSampleBefore
	case after.Iteration < before.Iteration:
		return store.RestartCost{}, fmt.Errorf("%w: iteration %d before, %d after", errCounterBack, before.Iteration, after.Iteration)
	}
	td := a.DecidedAt
	trained := a.DecidedAt.Sub(before.Created).Seconds() / before.IterS
	own := max(float64(after.Iteration-before.Iteration)-trained, 0)
	cost := after.Created.Sub(td).Seconds() - own*after.IterS
	return store.RestartCost{
		ActionID: a.ID, JobID: a.JobID, ModelType: after.ModelType,
		Cost:     time.Duration(max(cost, 0) * float64(time.Second)),
		Signaled: td, Resumed: after.Created, BeforeIter: before.Iteration, AfterIter: after.Iteration,
	}, nil
}

// measureRestarts stores the cost of every restart of the last
// measureWindow whose job has reported since. A restart that cannot be
// measured from the reports there are (see MeasureRestart) never will be:
// it goes into skip, keyed by action id with its decision time, and is not
// read again; entries older than the window are dropped.
func measureRestarts(ctx context.Context, st RestartStore, now time.Time, skip map[int64]time.Time, log *slog.Logger) error {
	since := now.Add(-measureWindow)
	for id, at := range skip {
		if at.Before(since) {
			delete(skip, id)
		}
	}
	todo, err := st.Unmeasured(ctx, string(slurm.ActionRestart), since)
	if err != nil {
		return err
	}
	for _, a := range todo {
		if _, ok := skip[a.ID]; ok {
			continue
		}
		hist, err := st.PlanHistory(ctx, a.JobID)
		if err != nil {
			return err
		}
		prev, next := neighbours(hist, a)
		samples, err := st.JobSamples(ctx, a.JobID)
		if err != nil {
			return err
		}
		c, err := MeasureRestart(a, prev, next, samples)
		if err != nil {
			skip[a.ID] = a.DecidedAt
			log.Info("restart not measurable", "job", a.JobID, "action", a.ID, "why", err)
			continue
		}
		if added, err := st.AddRestartCost(ctx, c); err != nil {
			return err
		} else if added {
			log.Info("restart cost measured", "job", a.JobID, "model_type", c.ModelType, "cost", c.Cost.Round(time.Millisecond),
				"iterations", fmt.Sprintf("%d..%d", c.BeforeIter, c.AfterIter))
		}
	}
	return nil
}

// medianRestartCosts returns the restart cost of each model type with a
// measured one (RestartCostOf of its newest).
func medianRestartCosts(ctx context.Context, st RestartStore) (map[string]time.Duration, error) {
	cs, err := st.RestartCosts(ctx, "", recentRestarts)
	if err != nil {
		return nil, err
	}
	byType := map[string][]store.RestartCost{}
	for _, c := range cs {
		byType[c.ModelType] = append(byType[c.ModelType], c)
	}
	out := make(map[string]time.Duration, len(byType))
	for mt, cs := range byType {
		out[mt] = RestartCostOf(cs)
	}
	return out, nil
}

// RestartCostOf is the restart cost rubickd prices a model type's restarts
// at, given its measured restarts newest first: the median of the newest
// five. It is 0 without measurements.
func RestartCostOf(newestFirst []store.RestartCost) time.Duration {
	n := min(len(newestFirst), recentRestarts)
	if n == 0 {
		return 0
	}
	ds := make([]time.Duration, n)
	for i, c := range newestFirst[:n] {
		ds[i] = c.Cost
	}
	slices.Sort(ds)
	if n%2 == 0 {
		return (ds[n/2-1] + ds[n/2]) / 2
	}
	return ds[n/2]
}

// neighbours returns when the job's last applied start or restart before a
// was applied, and when its first action after a was decided.
func neighbours(hist []store.Action, a store.Action) (prev, next time.Time) {
	for _, h := range hist {
		switch {
		case h.ID < a.ID && h.Result == store.ResultOK &&
			(h.Kind == string(slurm.ActionStart) || h.Kind == string(slurm.ActionRestart)):
			prev = h.AppliedAt
		case h.ID > a.ID && next.IsZero():
			next = h.DecidedAt
		}
	}
	return prev, next
}
