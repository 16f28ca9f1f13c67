package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/store"
)

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
