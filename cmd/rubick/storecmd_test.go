package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
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
