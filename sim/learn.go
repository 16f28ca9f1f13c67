package sim

import (
	"context"
	"slices"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
)

// learner replays rubickd's online refits (daemon.Learner) inside a replay:
// every running job reports the ground-truth iteration time of its
// configuration, and when a model type's predictor is off by more than the
// threshold on the configurations measured since it was made, it is
// refitted (model.Refit); if held-out configurations confirm the refit,
// the policy prices that model type with it from the next round. The
// oracle's ground truth does not change.
type learner struct {
	env       model.Env
	threshold float64
	types     map[string]*learnType
	names     []string // sorted, for a deterministic order
}

type learnType struct {
	pred   model.Predictor // what the policy prices with
	old    []model.Sample  // what pred was fitted on or has seen
	recent []model.Sample  // one per configuration measured since pred
	seen   map[string]bool // keys of recent
	// checked is len(recent) at the last look: only a new configuration
	// can open the gate or change the refit.
	checked int
}

func newLearner(d *Data, env model.Env, threshold float64) (*learner, error) {
	l := &learner{env: env, threshold: threshold, types: map[string]*learnType{}}
	for name, p := range d.Predictors {
		old, err := artifact.OwnProfileSamples(d.Set, name)
		if err != nil {
			return nil, err
		}
		l.types[name] = &learnType{pred: p, old: old, seen: map[string]bool{}}
		l.names = append(l.names, name)
	}
	slices.Sort(l.names)
	return l, nil
}

// report records one job's ground-truth time on its configuration; a
// configuration already measured since the last refit adds nothing (the
// ground truth of a configuration does not change).
func (l *learner) report(app string, s model.Sample) {
	t, ok := l.types[app]
	if !ok {
		return
	}
	if k := model.ConfigKey(s); !t.seen[k] {
		t.seen[k] = true
		t.recent = append(t.recent, s)
	}
}

// refit runs the daemon's rule on every model type with a configuration
// not seen at its last look, and returns the model types it refitted and
// those whose predictor changed.
func (l *learner) refit(ctx context.Context) (tried, changed []string, err error) {
	for _, name := range l.names {
		t := l.types[name]
		if len(t.recent) == t.checked {
			continue
		}
		t.checked = len(t.recent)
		d, usable := model.DriftOf(t.pred, t.old, t.recent)
		if !d.Refittable(l.threshold) {
			continue
		}
		tried = append(tried, name)
		rr, err := model.Refit(ctx, t.pred.Spec, l.env, t.pred.Params, t.old, usable)
		if err != nil {
			return tried, changed, err
		}
		if !rr.Better {
			continue
		}
		t.pred.Params = rr.Fit.Params
		t.old = append(t.old, usable...)
		t.recent, t.seen, t.checked = nil, map[string]bool{}, 0
		changed = append(changed, name)
	}
	return tried, changed, nil
}
