package daemon

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/store"
)

// Seeding stores each model type's own profiling runs with its fit, once;
// a type whose profile is a copy of another's gets the fit but no runs.
func TestSeedStoresProfileRunsOnce(t *testing.T) {
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
	for range 2 {
		if _, err := Seed(ctx, st, set, model.DefaultEnv()); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int{}
	for _, name := range set.ModelNames() {
		ss, err := st.Samples(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			if s.Source != store.SourceArtifact || s.SourceJob != 0 {
				t.Errorf("%s sample %d: source %q job %d, want artifact, no job", name, s.ID, s.Source, s.SourceJob)
			}
		}
		got[name] = len(ss)
	}
	want := map[string]int{}
	for _, name := range set.ModelNames() {
		want[name] = len(set.Profiles[name])
	}
	want["llama30"] = 0 // its profile is llama7's
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stored profiling runs per model type (-want +got):\n%s", d)
	}
}
