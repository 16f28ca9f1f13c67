package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/store"
)

// shippedFits are the fits of the shipped profiles (artifact.FitAll),
// made once: the tests seed a store each, and fitting every type again for
// each took half the package's time under -race.
var shippedFits = sync.OnceValues(func() (map[string]model.FitResult, error) {
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		return nil, err
	}
	return artifact.FitAll(context.Background(), set, model.DefaultEnv())
})

// seedShipped seeds st with the shipped data, set, as Seed with fits
// does, from shippedFits.
func seedShipped(ctx context.Context, t testing.TB, st SeedStore, set *artifact.Set) {
	t.Helper()
	if _, err := seed(ctx, st, set, shippedFits); err != nil {
		t.Fatal(err)
	}
}

// emptyStoreAndData is a new store and the embedded data to seed it from.
func emptyStoreAndData(t *testing.T) (*store.Store, *artifact.Set) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "rubick.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		t.Fatal(err)
	}
	return st, set
}

// Seeding gives every shipped model type a fit, once, and stores none of
// the artifact's runs as samples of this cluster.
func TestSeedFitsOnceWithoutSamples(t *testing.T) {
	ctx := context.Background()
	st, set := emptyStoreAndData(t)
	added, err := Seed(ctx, st, set, model.DefaultEnv(), true)
	if err != nil || len(added) != len(set.ModelNames()) {
		t.Fatalf("first seed added %v, %v; want every shipped model", added, err)
	}
	if again, err := Seed(ctx, st, set, model.DefaultEnv(), true); err != nil || len(again) != 0 {
		t.Fatalf("second seed added %v, %v; want nothing", again, err)
	}
	// A store with every type fits nothing again (a rubickd restart).
	if _, err := seed(ctx, st, set, func() (map[string]model.FitResult, error) {
		t.Error("a store with every shipped type fitted the profiles again")
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range set.ModelNames() {
		fits, err := st.Fits(ctx, name)
		if err != nil || len(fits) != 1 || !fits[0].Current {
			t.Errorf("%s: %d fits (%v), want one current", name, len(fits), err)
		}
		if ss, err := st.Samples(ctx, name); err != nil || len(ss) != 0 {
			t.Errorf("%s: %d samples stored (%v), want none", name, len(ss), err)
		}
	}
}

// With seed_fits: false the shipped types are registered without fits, so
// the first job of each is profiled on this cluster.
func TestSeedSpecsOnly(t *testing.T) {
	ctx := context.Background()
	st, set := emptyStoreAndData(t)
	added, err := Seed(ctx, st, set, model.DefaultEnv(), false)
	if err != nil || len(added) != len(set.ModelNames()) {
		t.Fatalf("seed added %v, %v; want every shipped model", added, err)
	}
	for _, name := range set.ModelNames() {
		mt, err := st.ModelType(ctx, name)
		if err != nil || mt.Spec != set.Models[name].Spec {
			t.Errorf("%s: spec %+v (%v), want the shipped one", name, mt.Spec, err)
		}
		if has, err := st.HasFit(ctx, name); err != nil || has {
			t.Errorf("%s: has a fit = %v (%v), want none", name, has, err)
		}
	}
}

// Seeding through an overlay leaves the store as it is, and the overlay
// reads the seeded types and fits over the store's, once.
func TestSeedOverlay(t *testing.T) {
	ctx := context.Background()
	st, set := emptyStoreAndData(t)
	own := set.ModelNames()[0]
	if err := st.UpsertModelType(ctx, set.Models[own].Spec); err != nil {
		t.Fatal(err)
	}
	o := NewSeedOverlay(st)
	added, err := Seed(ctx, o, set, model.DefaultEnv(), true)
	if err != nil || len(added) != len(set.ModelNames())-1 {
		t.Fatalf("seed added %v, %v; want every shipped model but %s", added, err, own)
	}
	if again, err := Seed(ctx, o, set, model.DefaultEnv(), true); err != nil || len(again) != 0 {
		t.Fatalf("second seed added %v, %v; want nothing", again, err)
	}
	if types, err := st.ModelTypes(ctx); err != nil || len(types) != 1 || types[0].Spec.Name != own {
		t.Errorf("store's model types %v, %v; want only %s, as before", types, err, own)
	}
	types, err := o.ModelTypes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mt := range types {
		names = append(names, mt.Spec.Name)
	}
	if d := cmp.Diff(set.ModelNames(), names); d != "" {
		t.Errorf("overlay's model types (-want +got):\n%s", d)
	}
	for _, name := range set.ModelNames() {
		_, err := o.CurrentFit(ctx, name)
		if name == own && !errors.Is(err, store.ErrNotFound) || name != own && err != nil {
			t.Errorf("%s: current fit: %v; want one seeded for every type but the store's own", name, err)
		}
		if has, err := st.HasFit(ctx, name); err != nil || has {
			t.Errorf("%s: the store has a fit = %v (%v), want none", name, has, err)
		}
	}
}

// A model type of the data that the store has with another spec is a
// change, key by key; Respec gives it the data's spec and leaves its fit
// to be made again, from the data's profiling runs with withFits, every
// fit kept. Through an overlay the store stays as it is. A type not named
// (a shipped one) is no change of the site's.
func TestRespec(t *testing.T) {
	for _, tc := range []struct {
		name     string
		overlay  bool
		withFits bool
		fitted   []string
	}{
		{"without fits", false, false, nil},
		{"with fits", false, true, []string{"bert"}},
		{"overlay without fits", true, false, nil},
		{"overlay with fits", true, true, []string{"bert"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, set := emptyStoreAndData(t)
			if _, err := Seed(ctx, st, set, model.DefaultEnv(), true); err != nil {
				t.Fatal(err)
			}
			old := set.Models["bert"].Spec
			old.Heads, old.ForwardMs = 12, 2*old.ForwardMs
			if err := st.UpsertModelType(ctx, old); err != nil {
				t.Fatal(err)
			}
			gpt2 := set.Models["gpt2"].Spec
			gpt2.Layers++
			if err := st.UpsertModelType(ctx, gpt2); err != nil {
				t.Fatal(err)
			}
			was, err := st.CurrentFit(ctx, "bert")
			if err != nil {
				t.Fatal(err)
			}
			var through interface {
				SeedStore
				CurrentFit(ctx context.Context, modelType string) (store.Fit, error)
			} = st
			if tc.overlay {
				through = NewSeedOverlay(st)
			}
			changes, err := SpecChanges(ctx, through, set, []string{"bert", "t5"})
			if err != nil {
				t.Fatal(err)
			}
			want := []SpecChange{{Old: old, New: set.Models["bert"].Spec}}
			if d := cmp.Diff(want, changes); d != "" {
				t.Fatalf("changes (-want +got):\n%s", d)
			}
			keys := []string{fmt.Sprintf("heads: 12 -> %d", set.Models["bert"].Spec.Heads),
				fmt.Sprintf("forward_ms_1gpu: %g -> %g", old.ForwardMs, set.Models["bert"].Spec.ForwardMs)}
			if d := cmp.Diff(keys, changes[0].Keys()); d != "" {
				t.Errorf("keys (-want +got):\n%s", d)
			}
			fitted, err := Respec(ctx, through, set, changes, model.DefaultEnv(), tc.withFits)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.fitted, fitted); d != "" {
				t.Errorf("fitted (-want +got):\n%s", d)
			}
			// What rubickd plans with: the new spec, and a fit made on it or none.
			types, err := through.ModelTypes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			specs := map[string]model.Spec{}
			for _, mt := range types {
				specs[mt.Spec.Name] = mt.Spec
			}
			if specs["bert"] != set.Models["bert"].Spec || specs["gpt2"] != gpt2 {
				t.Errorf("specs bert %+v, gpt2 %+v; want bert's replaced, gpt2's kept", specs["bert"], specs["gpt2"])
			}
			cur, err := through.CurrentFit(ctx, "bert")
			switch {
			case tc.withFits && (err != nil || cur.ID == was.ID || cur.Origin != store.SourceProfile):
				t.Errorf("current fit %+v (%v), want one on the profiling runs", cur, err)
			case !tc.withFits && !errors.Is(err, store.ErrNotFound):
				t.Errorf("current fit %+v (%v), want none", cur, err)
			}
			// The store: every fit kept; through the overlay, nothing changed.
			mt, err := st.ModelType(ctx, "bert")
			if err != nil {
				t.Fatal(err)
			}
			fits, err := st.Fits(ctx, "bert")
			if err != nil {
				t.Fatal(err)
			}
			stored, err := st.CurrentFit(ctx, "bert")
			switch {
			case tc.overlay && (mt.Spec != old || len(fits) != 1 || err != nil || stored.ID != was.ID):
				t.Errorf("the store's bert: %+v, %d fits, current %d (%v); want it as it was", mt.Spec, len(fits), stored.ID, err)
			case !tc.overlay && (mt.Spec != set.Models["bert"].Spec || len(fits) != 1+len(tc.fitted) || fits[0].ID != was.ID):
				t.Errorf("the store's bert: %+v, %d fits; want the new spec and every fit", mt.Spec, len(fits))
			}
		})
	}
}
