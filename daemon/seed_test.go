package daemon

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/store"
)

// Seeding gives every shipped model type a fit, once, and stores none of
// the artifact's runs as samples of this cluster.
func TestSeedFitsOnceWithoutSamples(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "rubick.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		t.Fatal(err)
	}
	added, err := Seed(ctx, st, set, model.DefaultEnv())
	if err != nil || len(added) != len(set.ModelNames()) {
		t.Fatalf("first seed added %v, %v; want every shipped model", added, err)
	}
	if again, err := Seed(ctx, st, set, model.DefaultEnv()); err != nil || len(again) != 0 {
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
