package daemon

import (
	"context"
	"fmt"

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
