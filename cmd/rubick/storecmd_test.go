package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
