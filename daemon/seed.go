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
	have, err := st.ModelTypes(ctx)
	if err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	known := map[string]bool{}
	for _, t := range have {
		known[t.Spec.Name] = true
	}
	fits := map[string]model.FitResult{}
	if withFits {
		if fits, err = artifact.FitAll(ctx, set, env); err != nil {
			return nil, fmt.Errorf("seed: fit shipped profiles: %w", err)
		}
	}
	var added []string
	for _, name := range set.ModelNames() {
		if known[name] {
			continue
		}
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

// SeedOverlay is a Store that keeps what Seed writes through it in
// memory: its ModelTypes and CurrentFit read the seeded model types and
// fits over the store's own, and the store is left as it is. rubickd
// --dry-run seeds an existing store through one, so that it plans as a
// start would while the store, which a running rubickd may use, stays
// unchanged.
type SeedOverlay struct {
	Store
	types map[string]store.ModelType
	fits  map[string]store.Fit
}

// NewSeedOverlay returns an overlay of st with nothing seeded yet.
func NewSeedOverlay(st Store) *SeedOverlay {
	return &SeedOverlay{Store: st, types: map[string]store.ModelType{}, fits: map[string]store.Fit{}}
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

// HasFit reports whether the model type has a seeded fit or a current
// one in the store.
func (o *SeedOverlay) HasFit(ctx context.Context, modelType string) (bool, error) {
	if _, ok := o.fits[modelType]; ok {
		return true, nil
	}
	_, err := o.Store.CurrentFit(ctx, modelType)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// AddFit keeps r in memory as the model type's current fit: Seed adds a
// fit only to a type without one.
func (o *SeedOverlay) AddFit(_ context.Context, modelType string, r model.FitResult, src store.Source) (store.Fit, error) {
	f := store.Fit{ModelType: modelType, FitResult: r, Origin: src, Current: true}
	o.fits[modelType] = f
	return f, nil
}

// CurrentFit returns the seeded fit of the model type, else the store's.
func (o *SeedOverlay) CurrentFit(ctx context.Context, modelType string) (store.Fit, error) {
	if f, ok := o.fits[modelType]; ok {
		return f, nil
	}
	return o.Store.CurrentFit(ctx, modelType)
}
