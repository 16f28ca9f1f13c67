package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/store"
)

// SeedStore is the part of the store seeding writes.
type SeedStore interface {
	ModelTypes(ctx context.Context) ([]store.ModelType, error)
	UpsertModelType(ctx context.Context, spec model.Spec) error
	HasFit(ctx context.Context, modelType string) (bool, error)
	AddFit(ctx context.Context, modelType string, r model.FitResult, src store.Source) (store.Fit, error)
	ReplaceSpec(ctx context.Context, spec model.Spec) (model.Spec, error)
}

// Seed registers every model type of set that the store lacks, with its fit
// on set's profiling runs, so jobs of those types are scheduled from the
// first cycle without profiling. The runs themselves are not stored: they
// were measured on the artifact's cluster, which need not be this one, and
// an online refit must not be held to them (model.Refit keeps a refit from
// mispredicting its old samples); the seeded fit carries them as the
// starting point of every refit. Model types the store already has, and
// their fits, are left alone: a fit learned online is never overwritten.
// Without withFits (rubickd's seed_fits: false) the types are registered
// with their specs only, and the first job of each is profiled on this
// cluster. It returns the names it added.
func Seed(ctx context.Context, st SeedStore, set *artifact.Set, env model.Env, withFits bool) ([]string, error) {
	fitAll := func() (map[string]model.FitResult, error) { return nil, nil }
	if withFits {
		fitAll = func() (map[string]model.FitResult, error) { return artifact.FitAll(ctx, set, env) }
	}
	return seed(ctx, st, set, fitAll)
}

// seed is Seed with the fits of set's profiles from fitAll, which it
// calls only when the store lacks a type: a rubickd restarted on its store
// fits nothing.
func seed(ctx context.Context, st SeedStore, set *artifact.Set, fitAll func() (map[string]model.FitResult, error)) ([]string, error) {
	have, err := st.ModelTypes(ctx)
	if err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	known := map[string]bool{}
	for _, t := range have {
		known[t.Spec.Name] = true
	}
	var missing []string
	for _, name := range set.ModelNames() {
		if !known[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	fits, err := fitAll()
	if err != nil {
		return nil, fmt.Errorf("seed: fit shipped profiles: %w", err)
	}
	var added []string
	for _, name := range missing {
		if err := st.UpsertModelType(ctx, set.Models[name].Spec); err != nil {
			return added, fmt.Errorf("seed %s: %w", name, err)
		}
		if fit, ok := fits[name]; ok {
			if has, err := st.HasFit(ctx, name); err != nil {
				return added, fmt.Errorf("seed %s: %w", name, err)
			} else if !has {
				if _, err := st.AddFit(ctx, name, fit, store.SourceProfile); err != nil {
					return added, fmt.Errorf("seed %s: %w", name, err)
				}
			}
		}
		added = append(added, name)
	}
	return added, nil
}

// SpecChange is a model type of the seed data that the store has with
// another spec.
type SpecChange struct {
	Old, New model.Spec
}

// Keys says what changes, key by key as models.json names them, e.g.
// "forward_ms_1gpu: 2300 -> 23000".
func (c SpecChange) Keys() []string { return c.Old.Changes(c.New) }

// SpecChanges returns, ordered by name, the change of each model type
// names lists that st has with another spec than set's: Seed leaves such
// a type as it is.
func SpecChanges(ctx context.Context, st SeedStore, set *artifact.Set, names []string) ([]SpecChange, error) {
	have, err := st.ModelTypes(ctx)
	if err != nil {
		return nil, fmt.Errorf("read model types: %w", err)
	}
	var out []SpecChange
	for _, t := range have {
		m, ok := set.Models[t.Spec.Name]
		if ok && slices.Contains(names, t.Spec.Name) && t.Spec != m.Spec {
			out = append(out, SpecChange{Old: t.Spec, New: m.Spec})
		}
	}
	return out, nil
}

// Respec gives each changed model type its new spec (store.ReplaceSpec):
// the type is left without a current fit, since its fits were made
// against the old spec, and keeps its fits and samples. With withFits, a
// type that set has profiling runs for gets its fit on them under the new
// spec, as Seed gives a new type; the others wait for a refit on their
// samples (Learner.MarkForRefit) or their next job's profiling. It
// returns the types given a fit.
func Respec(ctx context.Context, st SeedStore, set *artifact.Set, changes []SpecChange, env model.Env, withFits bool) ([]string, error) {
	if len(changes) == 0 {
		return nil, nil
	}
	fits := map[string]model.FitResult{}
	if withFits {
		var err error
		if fits, err = artifact.FitAll(ctx, set, env); err != nil {
			return nil, fmt.Errorf("respec: fit profiles: %w", err)
		}
	}
	var fitted []string
	for _, c := range changes {
		name := c.New.Name
		if _, err := st.ReplaceSpec(ctx, c.New); err != nil {
			return fitted, fmt.Errorf("respec %s: %w", name, err)
		}
		if fit, ok := fits[name]; ok {
			if _, err := st.AddFit(ctx, name, fit, store.SourceProfile); err != nil {
				return fitted, fmt.Errorf("respec %s: %w", name, err)
			}
			fitted = append(fitted, name)
		}
	}
	return fitted, nil
}

// SeedOverlay is a Store that keeps what Seed and Respec write through it
// in memory: its ModelTypes and CurrentFit read the seeded model types and
// fits over the store's own, and the store is left as it is. rubickd
// --dry-run seeds an existing store through one, so that it plans as a
// start would while the store, which a running rubickd may use, stays
// unchanged.
type SeedOverlay struct {
	Store
	types map[string]store.ModelType
	fits  map[string]store.Fit
	// unfit are the types whose spec it replaced, without a fit since.
	unfit map[string]bool
}

// NewSeedOverlay returns an overlay of st with nothing seeded yet.
func NewSeedOverlay(st Store) *SeedOverlay {
	return &SeedOverlay{Store: st, types: map[string]store.ModelType{}, fits: map[string]store.Fit{}, unfit: map[string]bool{}}
}

// ModelTypes returns the store's model types and the seeded ones, ordered
// by name, as the store orders them.
func (o *SeedOverlay) ModelTypes(ctx context.Context) ([]store.ModelType, error) {
	have, err := o.Store.ModelTypes(ctx)
	if err != nil {
		return nil, err
	}
	have = slices.DeleteFunc(have, func(t store.ModelType) bool { _, seeded := o.types[t.Spec.Name]; return seeded })
	for _, t := range o.types {
		have = append(have, t)
	}
	slices.SortFunc(have, func(a, b store.ModelType) int { return cmp.Compare(a.Spec.Name, b.Spec.Name) })
	return have, nil
}

// UpsertModelType keeps spec in memory, refused as the store refuses it.
func (o *SeedOverlay) UpsertModelType(_ context.Context, spec model.Spec) error {
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("seed model type %q: %w: %w", spec.Name, store.ErrInvalid, err)
	}
	o.types[spec.Name] = store.ModelType{Spec: spec}
	return nil
}

// ReplaceSpec keeps spec in memory as the spec of a model type the store
// or the overlay has, and the type without a current fit, refused and
// done as the store does it.
func (o *SeedOverlay) ReplaceSpec(ctx context.Context, spec model.Spec) (model.Spec, error) {
	if err := spec.Validate(); err != nil {
		return model.Spec{}, fmt.Errorf("replace spec of %q: %w: %w", spec.Name, store.ErrInvalid, err)
	}
	have, err := o.ModelTypes(ctx)
	if err != nil {
		return model.Spec{}, err
	}
	i := slices.IndexFunc(have, func(t store.ModelType) bool { return t.Spec.Name == spec.Name })
	if i < 0 {
		return model.Spec{}, fmt.Errorf("replace spec of %q: %w", spec.Name, store.ErrNotFound)
	}
	if t := have[i]; t.Spec != spec {
		t.Spec = spec
		o.types[spec.Name] = t
		delete(o.fits, spec.Name)
		o.unfit[spec.Name] = true
	}
	return have[i].Spec, nil
}

// HasFit reports whether the model type has a seeded fit or a current
// one in the store.
func (o *SeedOverlay) HasFit(ctx context.Context, modelType string) (bool, error) {
	_, err := o.CurrentFit(ctx, modelType)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// AddFit keeps r in memory as the model type's current fit: Seed and
// Respec add a fit only to a type without one.
func (o *SeedOverlay) AddFit(_ context.Context, modelType string, r model.FitResult, src store.Source) (store.Fit, error) {
	f := store.Fit{ModelType: modelType, FitResult: r, Origin: src, Current: true}
	o.fits[modelType] = f
	return f, nil
}

// CurrentFit returns the seeded fit of the model type, else, unless it
// replaced the type's spec, the store's.
func (o *SeedOverlay) CurrentFit(ctx context.Context, modelType string) (store.Fit, error) {
	if f, ok := o.fits[modelType]; ok {
		return f, nil
	}
	if o.unfit[modelType] {
		return store.Fit{}, fmt.Errorf("current fit of %q: %w", modelType, store.ErrNotFound)
	}
	return o.Store.CurrentFit(ctx, modelType)
}
