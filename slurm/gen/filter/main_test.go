package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const twoVersions = `{
  "openapi": "3.0.3",
  "paths": {
    "/slurm/v0.0.37/ping": {"get": {"operationId": "ping", "responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/v0.0.37_pings"}}}}}}},
    "/slurm/v0.0.38/ping": {"get": {"operationId": "ping", "responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/v0.0.38_pings"}}}}}}}
  },
  "components": {"schemas": {
    "v0.0.37_pings": {"type": "object"},
    "v0.0.38_pings": {"type": "object", "properties": {"meta": {"$ref": "#/components/schemas/v0.0.38_meta"}, "n": {"type": "integer", "format": "int64", "maximum": 9007199254740993}}},
    "v0.0.38_meta": {"type": "object", "properties": {"self": {"$ref": "#/components/schemas/v0.0.38_meta"}}},
    "v0.0.38_unused": {"type": "object"}
  }}
}`

func TestFilterSpec(t *testing.T) {
	out, err := filterSpec([]byte(twoVersions), "/v0.0.38/")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths      map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	var paths, schemas []string
	for p := range doc.Paths {
		paths = append(paths, p)
	}
	for s := range doc.Components.Schemas {
		schemas = append(schemas, s)
	}
	slices.Sort(schemas)
	if diff := cmp.Diff([]string{"/slurm/v0.0.38/ping"}, paths); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
	// reachable schemas only, the self-reference handled once
	if diff := cmp.Diff([]string{"v0.0.38_meta", "v0.0.38_pings"}, schemas); diff != "" {
		t.Errorf("schemas (-want +got):\n%s", diff)
	}
	again, err := filterSpec(out, "/v0.0.38/")
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Error("filter is not idempotent")
	}
	if !json.Valid(out) || !strings.Contains(string(out), "9007199254740993") {
		t.Error("large numbers must survive unchanged (json.Number)")
	}
}

func TestFilterErrors(t *testing.T) {
	if _, err := filterSpec([]byte(twoVersions), "/v0.0.99/"); err == nil {
		t.Error("no matching path accepted")
	}
	if _, err := filterSpec([]byte("{"), "/v0.0.38/"); err == nil {
		t.Error("bad JSON accepted")
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.json")
	if err := os.WriteFile(in, []byte(twoVersions), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(in, in, "/v0.0.38/"); err != nil {
		t.Fatalf("in-place run: %v", err)
	}
	if err := run(in, "", "x"); err == nil {
		t.Error("missing -out accepted")
	}
}
