package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/store"
	"github.com/rubick-sched/rubick/store/storetest"
)

func TestStoreStatsAndPrune(t *testing.T) {
	path, _ := seedExplainStore(t)
	ctx := context.Background()
	var out, errb bytes.Buffer
	if err := storeCmd(ctx, []string{"stats", "--store", path, "--json"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	var s struct {
		Store         string           `json:"store"`
		SchemaVersion int              `json:"schema_version"`
		Rows          map[string]int64 `json:"rows"`
		Bytes         int64            `json:"bytes"`
	}
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	// The seed: 2 model types, 1 fit, 2 jobs, 2 cycles with 3 reasons and 1 action.
	if s.Store != path || s.SchemaVersion < 2 || s.Rows["model_types"] != 2 || s.Rows["decisions"] != 2 ||
		s.Rows["decision_reasons"] != 3 || s.Rows["plan_history"] != 1 || s.Bytes <= 0 {
		t.Errorf("stats = %+v", s)
	}

	// The seeded cycles are two hours old (testEnv's now): --reasons 1h
	// deletes job 42's older reason and keeps its newest.
	out.Reset()
	if err := storeCmd(ctx, []string{"prune", "--store", path, "--reasons", "1h"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	if want := "deleted 1 reasons, 0 decision cycles, 0 reported samples"; !strings.Contains(out.String(), want) {
		t.Errorf("prune printed %q, want %q", out.String(), want)
	}
	out.Reset()
	if err := storeCmd(ctx, []string{"stats", "--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(out.String(), "\n") {
		lines[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, want := range []string{"decision_reasons 2", "of them reported by jobs 0", "decisions 2"} {
		if !lines[want] {
			t.Errorf("stats lacks a line %q:\n%s", want, out.String())
		}
	}

	for name, args := range map[string][]string{
		"negative reasons": {"prune", "--store", path, "--reasons", "-1h"},
		"negative samples": {"prune", "--store", path, "--samples-per-config", "-1"},
		"unknown":          {"vacuum"},
	} {
		if err := storeCmd(ctx, args, &out, &errb, testEnv(t)); !errors.Is(err, errUsage) {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
	}
	if err := storeCmd(ctx, []string{"stats", "--store", path + ".missing"}, &out, &errb, testEnv(t)); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing store: %v", err)
	}
}

// Every command that reads the store refuses one of an older schema and
// leaves it at its version: migrated, it would be refused by the older
// rubickd still running on it.
func TestOlderStoreNotMigrated(t *testing.T) {
	ctx := context.Background()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // status reads the store alone
	for name, run := range map[string]func(path string) error{
		"explain": func(path string) error {
			return explainCmd(ctx, []string{"42", "--store", path}, io.Discard, io.Discard, testEnv(t))
		},
		"queue": func(path string) error {
			return queueCmd(ctx, []string{"--store", path}, io.Discard, io.Discard, testEnv(t))
		},
		"status": func(path string) error {
			return statusCmd(ctx, []string{"--url", down.URL, "--store", path}, io.Discard, io.Discard, testEnv(t))
		},
		"report": func(path string) error {
			return reportCmd(ctx, []string{"--input", synthetic, "--store", path}, io.Discard, io.Discard, testEnv(t))
		},
		"store stats": func(path string) error {
			return storeCmd(ctx, []string{"stats", "--store", path}, io.Discard, io.Discard, testEnv(t))
		},
		"store specs": func(path string) error {
			return storeCmd(ctx, []string{"specs", "--store", path}, io.Discard, io.Discard, testEnv(t))
		},
		"store prune": func(path string) error {
			return storeCmd(ctx, []string{"prune", "--store", path}, io.Discard, io.Discard, testEnv(t))
		},
	} {
		t.Run(name, func(t *testing.T) {
			path, _ := seedExplainStore(t)
			storetest.Older(t, path)
			err := run(path)
			if err == nil || !strings.Contains(err.Error(), store.ErrSchemaTooOld.Error()) || !strings.Contains(err.Error(), "upgrade rubickd") {
				t.Errorf("error = %v, want %v telling to upgrade rubickd", err, store.ErrSchemaTooOld)
			}
			if v := storetest.Version(t, path); v != store.SchemaVersion()-1 {
				t.Errorf("store at version %d after %s, want %d as it was", v, name, store.SchemaVersion()-1)
			}
		})
	}
}

// seedSpecsStore writes a store with model types bert (no fit) and gpt2,
// whose spec was replaced twice: first without a fit current under it,
// then with fit 1; fit 2, made under its third spec, is current.
func seedSpecsStore(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	clock := fixedNow.Add(-3 * time.Hour)
	st, err := store.Open(ctx, path, store.WithClock(func() time.Time { return clock }))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fit := model.FitResult{Params: model.Priors(), RMSLE: 0.05, MAPE: 4.5, Samples: 9}
	bert := model.Spec{Name: "bert", Params: 3.4e8, Layers: 24, Hidden: 1024, Heads: 16, SeqLen: 512, GlobalBatch: 128, ForwardMs: 100}
	gpt2 := explainGPT2Spec()
	if err := st.UpsertModelType(ctx, bert); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertModelType(ctx, gpt2); err != nil {
		t.Fatal(err)
	}
	for i, change := range []func(*model.Spec){
		func(s *model.Spec) { s.ForwardMs = 8125 },
		func(s *model.Spec) { s.Layers, s.Heads = 36, 20 },
	} {
		if i > 0 {
			if _, err := st.AddFit(ctx, "gpt2", fit, store.SourceProfile); err != nil {
				t.Fatal(err)
			}
		}
		clock = fixedNow.Add(time.Duration(i-2) * time.Hour)
		change(&gpt2)
		if _, err := st.ReplaceSpec(ctx, gpt2); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.AddFit(ctx, "gpt2", fit, store.SourceProfile); err != nil {
		t.Fatal(err)
	}
	return path
}

// store stats counts every table of the schema, those no list named too.
func TestStoreStatsEveryTable(t *testing.T) {
	path := seedSpecsStore(t)
	want := map[string]int64{"model_types": 2, "fits": 2, "replaced_specs": 2, "samples": 0, "jobs": 0, "decisions": 0,
		"decision_reasons": 0, "plan_history": 0, "restart_costs": 0, "launch_limits": 0, "profiling_phases": 0}
	for _, tc := range []struct {
		name string
		args []string
		rows func(t *testing.T, out []byte) map[string]int64
	}{
		{name: "text", args: []string{"stats", "--store", path}, rows: func(t *testing.T, out []byte) map[string]int64 {
			rows := map[string]int64{}
			for _, l := range strings.Split(string(out), "\n") {
				// "  table  rows" lines; the header's rows is no number.
				if f := strings.Fields(l); len(f) == 2 {
					if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
						rows[f[0]] = n
					}
				}
			}
			return rows
		}},
		{name: "json", args: []string{"stats", "--store", path, "--json"}, rows: func(t *testing.T, out []byte) map[string]int64 {
			var s struct {
				Rows map[string]int64 `json:"rows"`
			}
			if err := json.Unmarshal(out, &s); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			return s.Rows
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := storeCmd(context.Background(), tc.args, &out, io.Discard, testEnv(t)); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, tc.rows(t, out.Bytes())); d != "" {
				t.Errorf("rows per table (-want +got):\n%s\n%s", d, out.String())
			}
		})
	}
}

// store specs shows each type's spec and current fit, and what each
// replaced spec was: newest first, the keys the next spec changed and the
// fit current under it.
func TestStoreSpecs(t *testing.T) {
	path := seedSpecsStore(t)
	const (
		bert = `bert: no current fit
  spec: parameters=340000000 layers=24 hidden=1024 heads=16 seq_len=512 global_batch=128 forward_ms_1gpu=100
`
		gpt2 = `gpt2: current fit 2
  spec: parameters=1500000000 layers=36 hidden=1600 heads=20 seq_len=1024 global_batch=64 forward_ms_1gpu=8125
  replaced 2026-11-08T11:00:00Z (fit 1 was current): layers: 48 -> 36; heads: 25 -> 20
  replaced 2026-11-08T10:00:00Z (no fit was current): forward_ms_1gpu: 812.5 -> 8125
`
		bertJSON = `{"name": "bert", "fit_id": null, "replaced": [],
			"spec": {"name": "bert", "parameters": 3.4e8, "layers": 24, "hidden": 1024, "heads": 16, "seq_len": 512, "global_batch": 128, "forward_ms_1gpu": 100}}`
		gpt2JSON = `{"name": "gpt2", "fit_id": 2,
			"spec": {"name": "gpt2", "parameters": 1.5e9, "layers": 36, "hidden": 1600, "heads": 20, "seq_len": 1024, "global_batch": 64, "forward_ms_1gpu": 8125},
			"replaced": [
				{"replaced": "2026-11-08T11:00:00Z", "fit_id": 1, "changes": ["layers: 48 -> 36", "heads: 25 -> 20"],
				 "spec": {"name": "gpt2", "parameters": 1.5e9, "layers": 48, "hidden": 1600, "heads": 25, "seq_len": 1024, "global_batch": 64, "forward_ms_1gpu": 8125}},
				{"replaced": "2026-11-08T10:00:00Z", "fit_id": null, "changes": ["forward_ms_1gpu: 812.5 -> 8125"],
				 "spec": {"name": "gpt2", "parameters": 1.5e9, "layers": 48, "hidden": 1600, "heads": 25, "seq_len": 1024, "global_batch": 64, "forward_ms_1gpu": 812.5}}]}`
	)
	for _, tc := range []struct {
		name   string
		args   []string
		envVar string // $RUBICK_STORE
		want   string // the text, or JSON with --json
		err    []string
	}{
		{name: "every type", args: []string{"specs", "--store", path},
			want: "store " + path + ": 2 model types\n" + bert + gpt2},
		{name: "one type", args: []string{"specs", "--store", path, "--model", "gpt2"},
			want: "store " + path + ": 1 model type\n" + gpt2},
		{name: "store from the environment", args: []string{"specs", "--model", "bert"}, envVar: path,
			want: "store " + path + ": 1 model type\n" + bert},
		{name: "every type as JSON", args: []string{"specs", "--store", path, "--json"},
			want: `{"store": "` + path + `", "model_types": [` + bertJSON + `, ` + gpt2JSON + `]}`},
		{name: "one type as JSON", args: []string{"specs", "--json", "--store", path, "--model", "bert"},
			want: `{"store": "` + path + `", "model_types": [` + bertJSON + `]}`},
		{name: "unknown type", args: []string{"specs", "--store", path, "--model", "gpt3"},
			err: []string{`--model "gpt3"`, path, store.ErrNotFound.Error()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(t)
			env.getenv = func(k string) string {
				if k == storeEnv {
					return tc.envVar
				}
				return ""
			}
			var out bytes.Buffer
			err := storeCmd(context.Background(), tc.args, &out, io.Discard, env)
			if tc.err != nil {
				if err == nil || !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("error = %v, want one wrapping %v", err, store.ErrNotFound)
				}
				for _, part := range tc.err {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("error %q does not say %q", err, part)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(tc.args, "--json") {
				if d := cmp.Diff(tc.want, out.String()); d != "" {
					t.Errorf("output (-want +got):\n%s", d)
				}
				return
			}
			var want, got any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("JSON (-want +got):\n%s", d)
			}
		})
	}
}

// TestStorePruneRetentionFromConfig: store prune keeps what rubickd's
// retention keeps where its flags are not given, so a site that keeps
// more than the built-in retention loses nothing to a prune by hand;
// a flag still overrides the file. The seeded reasons are two hours old.
func TestStorePruneRetentionFromConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		config []string // the default configuration file; nil: none
		args   []string
		want   string
	}{
		"built-in retention":  {want: "deleted 0 reasons"},
		"file's retention":    {config: []string{"retention:", "  reasons: 1h"}, want: "deleted 1 reasons"},
		"flag over the file":  {config: []string{"retention:", "  reasons: 1h"}, args: []string{"--reasons", "0"}, want: "deleted 0 reasons"},
		"file keeps all":      {config: []string{"retention:", "  reasons: 0"}, want: "deleted 0 reasons"},
		"flag with no file":   {args: []string{"--reasons", "1h"}, want: "deleted 1 reasons"},
		"file, other setting": {config: []string{"retention:", "  samples_per_config: 0"}, args: []string{"--reasons", "1h"}, want: "deleted 1 reasons"},
	} {
		t.Run(name, func(t *testing.T) {
			path, _ := seedExplainStore(t)
			env := testEnv(t)
			if tc.config != nil {
				env.configPath = writeConfig(t, append([]string{"store: " + path}, tc.config...)...)
			}
			var out, errb bytes.Buffer
			if err := storeCmd(context.Background(), append([]string{"prune", "--store", path}, tc.args...), &out, &errb, env); err != nil {
				t.Fatalf("%v\n%s", err, errb.String())
			}
			if !strings.Contains(out.String(), tc.want) || errb.Len() > 0 {
				t.Errorf("prune printed %q (stderr %q), want %q", out.String(), errb.String(), tc.want)
			}
		})
	}
}
