package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/store"
	"github.com/rubick-sched/rubick/store/storetest"
)

// A second rubickd on a store another one holds stops before touching
// Slurm or the store; a dry run, which applies nothing, goes on.
func TestSecondInstanceRefused(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "rubick.db")
	cfg := filepath.Join(dir, "rubickd.yaml")
	// Nothing listens on port 1: a run that gets past the lock fails
	// connecting to slurmrestd.
	yaml := "store: " + store + "\nslurmrestd:\n  url: http://127.0.0.1:1\n  token_file: " + filepath.Join(dir, "jwt") + "\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "jwt"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := daemon.LockInstance(daemon.LockPath(store), daemon.NewInstance(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	ctx := context.Background()

	err = run(ctx, []string{"--config", cfg, "--once"}, io.Discard, io.Discard)
	if !errors.Is(err, daemon.ErrLocked) {
		t.Fatalf("--once beside a running rubickd: %v, want ErrLocked", err)
	}
	if _, serr := os.Stat(store); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the refused run opened the store (%v)", serr)
	}

	err = run(ctx, []string{"--config", cfg, "--dry-run"}, io.Discard, io.Discard)
	if err == nil || errors.Is(err, daemon.ErrLocked) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("--dry-run beside a running rubickd: %v, want it past the lock, failing at slurmrestd", err)
	}
}

// A dry run changes no existing store, which a running rubickd may use:
// it refuses one of an older schema, naming both versions, rather than
// migrating it, and seeds a current one in memory only. A missing store
// it creates and seeds, as any start does.
func TestDryRunLeavesStore(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		make  func(t *testing.T, path string)
		is    error  // the run's error, past the store
		say   string // ... saying this
		types bool   // the store has model types after the run
	}{
		{"older", func(t *testing.T, path string) { newStore(t, path); storetest.Older(t, path) }, store.ErrSchemaTooOld,
			fmt.Sprintf("database is at version %d, this binary reads version %d", store.SchemaVersion()-1, store.SchemaVersion()), false},
		{"current", newStore, nil, "127.0.0.1:1", false},
		{"missing", func(*testing.T, string) {}, nil, "127.0.0.1:1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, path := dryRunConfig(t)
			tc.make(t, path)
			err := run(ctx, []string{"--config", cfg, "--dry-run"}, io.Discard, io.Discard)
			if err == nil || tc.is != nil && !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("--dry-run: %v, want %v saying %q", err, tc.is, tc.say)
			}
			want := store.SchemaVersion()
			if tc.is != nil {
				want--
			}
			if v := storetest.Version(t, path); v != want {
				t.Errorf("store at version %d after the dry run, want %d", v, want)
			}
			st, err := store.Open(ctx, path, store.WithoutMigrating(), store.WithReaders(1))
			if errors.Is(err, store.ErrSchemaTooOld) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if types, err := st.ModelTypes(ctx); err != nil || (len(types) > 0) != tc.types {
				t.Errorf("store's model types after the dry run: %d (%v), want some: %v", len(types), err, tc.types)
			}
		})
	}
}

// --data adds its model types to the embedded ones, a new store is seeded
// with both, and its entry replaces an embedded type of the same name; a
// type without a profile is registered without a fit, so its first job is
// profiled. A malformed directory stops rubickd, naming it.
func TestDataDirAddsModelTypes(t *testing.T) {
	ctx := context.Background()
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		t.Fatal(err)
	}
	shipped := set.ModelNames()
	const spec = `{"parameters":13e9,"layers":40,"hidden":5120,"heads":40,"seq_len":2048,"global_batch":64,"forward_ms_1gpu":9000}`
	for _, tc := range []struct {
		name   string
		models string // models.json; "" writes none
		say    string // the run's error, past the seeding: slurmrestd
		fitted map[string]bool
	}{
		{"a new type", `{"models":{"gpt13":` + spec + `}}`, "127.0.0.1:1", map[string]bool{"gpt13": false}},
		{"a shipped type replaced", `{"models":{"bert":` + spec + `}}`, "127.0.0.1:1", map[string]bool{"bert": false}},
		{"an entry without its forward time", `{"models":{"gpt13":` + strings.Replace(spec, `,"forward_ms_1gpu":9000`, "", 1) + `}}`,
			"--data DIR: malformed data: models.json: model gpt13: missing forward_ms_1gpu", nil},
		{"no models.json", "", "--data DIR: read models.json", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, path := dryRunConfig(t)
			dir := t.TempDir()
			if tc.models != "" {
				if err := os.WriteFile(filepath.Join(dir, "models.json"), []byte(tc.models), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := run(ctx, []string{"--config", cfg, "--dry-run", "--data", dir}, io.Discard, io.Discard)
			if say := strings.ReplaceAll(tc.say, "DIR", dir); err == nil || !strings.Contains(err.Error(), say) {
				t.Fatalf("--dry-run --data: %v, want it saying %q", err, say)
			}
			st, err := store.Open(ctx, path, store.WithReaders(1))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			types, err := st.ModelTypes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, mt := range types {
				has, err := st.HasFit(ctx, mt.Spec.Name)
				if err != nil {
					t.Fatal(err)
				}
				if _, ours := tc.fitted[mt.Spec.Name]; ours && mt.Spec.Params != 13e9 {
					t.Errorf("%s: %g parameters, want the data directory's 1.3e10", mt.Spec.Name, mt.Spec.Params)
				}
				got[mt.Spec.Name] = has
			}
			want := map[string]bool{}
			if tc.fitted != nil {
				for _, name := range shipped {
					want[name] = true
				}
				maps.Copy(want, tc.fitted)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("the store's model types -> fitted (-want +got):\n%s", d)
			}
		})
	}
}

// A type of --data the store already has keeps the store's spec and fit;
// where the two differ, rubickd says so, naming the type and the keys,
// since the entry an administrator edited does not apply. With
// --update-specs a start gives the type the entry's spec and no current
// fit, keeping its fits, and says so; a dry run says what a start would
// replace and changes nothing. A shipped type the store has with another
// spec (an older release's) is not theirs to edit: neither warned of nor
// replaced.
func TestDataDirChangedSpec(t *testing.T) {
	ctx := context.Background()
	gpt13 := model.Spec{Name: "gpt13", Params: 13e9, Layers: 40, Hidden: 5120, Heads: 40, SeqLen: 2048, GlobalBatch: 64, ForwardMs: 9000}
	const entry = `{"models":{"gpt13":{"parameters":13e9,"layers":40,"hidden":5120,"heads":40,"seq_len":2048,"global_batch":64,"forward_ms_1gpu":9000}}}`
	edited, oldBert := gpt13, gpt13
	edited.ForwardMs, edited.Heads = 8000, 32
	oldBert.Name = "bert"
	changes := []string{"heads: 32 -> 40", "forward_ms_1gpu: 8000 -> 9000"}
	type said struct {
		Level, Msg, Model string
		Changes           []string
	}
	for _, tc := range []struct {
		name   string
		stored model.Spec
		args   []string
		said   []said     // what rubickd logged of the type, each Msg its start
		spec   model.Spec // the store's afterwards
		fit    bool       // the store's type has a current fit afterwards
	}{
		{"the same spec", gpt13, []string{"--dry-run"}, nil, gpt13, true},
		{"another spec", edited, []string{"--dry-run"}, []said{{Level: "WARN", Msg: "a model type of --data differs from the store's, which is kept", Model: "gpt13", Changes: changes}}, edited, true},
		{"another spec at a start", edited, nil, []said{{Level: "WARN", Msg: "a model type of --data differs from the store's, which is kept", Model: "gpt13", Changes: changes}}, edited, true},
		{"a shipped type's other spec", oldBert, []string{"--dry-run"}, nil, oldBert, true},
		{"another spec updated", edited, []string{"--update-specs"},
			[]said{{Level: "INFO", Msg: "replaced the spec of a model type of --data", Model: "gpt13", Changes: changes}}, gpt13, false},
		{"another spec updated in a dry run", edited, []string{"--update-specs", "--dry-run"},
			[]said{{Level: "INFO", Msg: "a start would replace the spec of a model type of --data", Model: "gpt13", Changes: changes}}, edited, true},
		{"a shipped type's other spec updated", oldBert, []string{"--update-specs"}, nil, oldBert, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, path := dryRunConfig(t)
			st, err := store.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.UpsertModelType(ctx, tc.stored); err != nil {
				t.Fatal(err)
			}
			fit := model.FitResult{Params: model.Priors(), RMSLE: 0.1, Samples: 7}
			if _, err := st.AddFit(ctx, tc.stored.Name, fit, store.SourceProfile); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "models.json"), []byte(entry), 0o600); err != nil {
				t.Fatal(err)
			}
			var log strings.Builder
			err = run(ctx, append([]string{"--config", cfg, "--data", dir}, tc.args...), io.Discard, &log)
			if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Fatalf("rubickd %v: %v, want it past the seeding, failing at slurmrestd", tc.args, err)
			}
			var got []said
			for line := range strings.Lines(log.String()) {
				var rec said
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Model == tc.stored.Name {
					got = append(got, rec)
				}
			}
			for i := range min(len(got), len(tc.said)) {
				if strings.HasPrefix(got[i].Msg, tc.said[i].Msg) {
					got[i].Msg = tc.said[i].Msg // the message starts so
				}
			}
			if d := cmp.Diff(tc.said, got); d != "" {
				t.Errorf("logged of %s (-want +got):\n%s\n%s", tc.stored.Name, d, log.String())
			}
			st, err = store.Open(ctx, path, store.WithReaders(1))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			mt, err := st.ModelType(ctx, tc.stored.Name)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.spec, mt.Spec); d != "" {
				t.Errorf("the store's spec (-want +got):\n%s", d)
			}
			if has, err := st.HasFit(ctx, tc.stored.Name); err != nil || has != tc.fit {
				t.Errorf("the store's type has a current fit: %v (%v), want %v", has, err, tc.fit)
			}
			if fits, err := st.Fits(ctx, tc.stored.Name); err != nil || len(fits) != 1 {
				t.Errorf("the store's type has %d fits (%v), want its one kept", len(fits), err)
			}
		})
	}
	cfg, _ := dryRunConfig(t)
	if err := run(ctx, []string{"--config", cfg, "--update-specs"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--update-specs goes with --data") {
		t.Errorf("--update-specs without --data: %v, want it refused", err)
	}
}

// dryRunConfig writes a configuration whose slurmrestd nothing listens
// on (a run that gets past the store fails there), and returns it and its
// store's path.
func dryRunConfig(t *testing.T) (cfg, path string) {
	t.Helper()
	dir := t.TempDir()
	path, cfg = filepath.Join(dir, "rubick.db"), filepath.Join(dir, "rubickd.yaml")
	yaml := "store: " + path + "\nslurmrestd:\n  url: http://127.0.0.1:1\n  token_file: " + filepath.Join(dir, "jwt") + "\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "jwt"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, path
}

// newStore creates an empty store at path, at this binary's schema.
func newStore(t *testing.T, path string) {
	t.Helper()
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// rubickd --check --json prints the checks as a JSON array, with a failed
// one (slurmrestd unreachable) in the exit status; --json alone is refused.
func TestCheckJSON(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rubickd.yaml")
	yaml := "store: " + filepath.Join(dir, "rubick.db") + "\nslurmrestd:\n  url: http://127.0.0.1:1\n  token_file: " + filepath.Join(dir, "jwt") +
		"\ncommands:\n  scontrol: " + filepath.Join(dir, "no-scontrol") + "\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err := run(context.Background(), []string{"--config", cfg, "--check", "--json"}, &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "checks failed") {
		t.Errorf("err = %v, want checks failed", err)
	}
	var got []daemon.CheckResult
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	status := map[string]string{}
	for _, r := range got {
		status[r.Name] = r.Status
	}
	if status["slurmrestd"] != daemon.CheckFail || status["commands.scontrol"] != daemon.CheckFail || status["store"] != daemon.CheckOK {
		t.Errorf("checks %+v: want slurmrestd and commands.scontrol failed, store ok", got)
	}
	if err := run(context.Background(), []string{"--config", cfg, "--json"}, io.Discard, io.Discard); err == nil {
		t.Error("--json without --check was accepted")
	}
}

// A file written at the default path after rubickd started on its
// defaults is read at the next reload; one read before and gone since is
// an error of the load, not a return to the defaults.
func TestConfigFile(t *testing.T) {
	def := filepath.Join(t.TempDir(), "rubickd.yaml")
	other := filepath.Join(t.TempDir(), "other.yaml")
	if got := configFile(def, "", def); got != "" {
		t.Fatalf("missing default file = %q, want the built-in defaults", got)
	}
	if got := configFile(other, "", def); got != other {
		t.Fatalf("a named file = %q, want it whether or not it exists", got)
	}
	if err := os.WriteFile(def, []byte("interval: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := configFile(def, "", def); got != def {
		t.Fatalf("default file written since = %q, want it read", got)
	}
	if err := os.Remove(def); err != nil {
		t.Fatal(err)
	}
	if got := configFile(def, def, def); got != def {
		t.Fatalf("default file read before, now gone = %q, want it named (its load fails)", got)
	}
}

// A sample the sender or its payload is at fault for is rejected; one
// rubickd could not check or store is an error of its own.
func TestAcceptResult(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "accepted"},
		{fmt.Errorf("%w: job_id=%q is not a Slurm job id", report.ErrBadSample, "x"), "rejected"},
		{fmt.Errorf("%w: uid 7 reported for job 4", report.ErrNotOwner), "rejected"},
		{fmt.Errorf("%w: bad notice", report.ErrBadLaunch), "rejected"},
		{fmt.Errorf("store the sample: %w", errors.New("database is locked")), "error"},
		{fmt.Errorf("read job 4: %w", errors.New("connection refused")), "error"},
	} {
		if got := acceptResult(tc.err); got != tc.want {
			t.Errorf("acceptResult(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// A throttled warning goes out at most once a period, and the next one
// says how many were held back since.
func TestThrottle(t *testing.T) {
	th := throttle{period: time.Minute}
	t0 := time.Date(2026, 11, 30, 17, 51, 0, 0, time.UTC)
	type call struct {
		ok   bool
		held int
	}
	var got []call
	for _, at := range []time.Duration{0, time.Second, 30 * time.Second, 59 * time.Second, time.Minute, 61 * time.Second, 3 * time.Minute} {
		ok, held := th.allow(t0.Add(at))
		got = append(got, call{ok, held})
	}
	want := []call{{true, 0}, {false, 0}, {false, 0}, {false, 0}, {true, 3}, {false, 0}, {true, 1}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(call{})); diff != "" {
		t.Errorf("allow (-want +got):\n%s", diff)
	}
}
