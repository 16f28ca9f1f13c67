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
