// Command filter reduces a slurmrestd OpenAPI document to the paths of one
// API version and the component schemas those paths reach.
//
// slurmrestd serves several API versions in one document with the same
// operationIds, so generating a client from the whole document declares every
// Go name several times. Filtering to one version first gives one compiling
// package per version. The filter is idempotent: running it on its own output
// changes nothing, which lets `go generate` run it in place on the committed
// spec.json as well as on a fresh copy of /openapi/v3 from a newer slurmrestd.
//
// Usage:
//
//	go run ./slurm/gen/filter -keep /v0.0.41/ -in openapi.json -out spec.json
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

const schemaRefPrefix = "#/components/schemas/"

func main() {
	in := flag.String("in", "", "input OpenAPI JSON document")
	out := flag.String("out", "", "output file (may equal -in)")
	keep := flag.String("keep", "", "keep only paths containing this substring, e.g. /v0.0.41/")
	flag.Parse()
	if err := run(*in, *out, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "filter:", err)
		os.Exit(1)
	}
}

func run(in, out, keep string) error {
	if in == "" || out == "" || keep == "" {
		return errors.New("-in, -out and -keep are required")
	}
	raw, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	filtered, err := filterSpec(raw, keep)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return os.WriteFile(out, filtered, 0o644)
}

// filterSpec returns the document with only the paths containing keep and the
// schemas reachable from them, as indented JSON with sorted keys so that the
// committed file diffs cleanly between Slurm releases.
func filterSpec(raw []byte, keep string) ([]byte, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	paths, ok := doc["paths"].(map[string]any)
	if !ok {
		return nil, errors.New("no paths object")
	}
	kept := map[string]any{}
	for p, v := range paths {
		if strings.Contains(p, keep) {
			kept[p] = v
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("no path contains %q", keep)
	}
	doc["paths"] = kept

	if comps, ok := doc["components"].(map[string]any); ok {
		if schemas, ok := comps["schemas"].(map[string]any); ok {
			comps["schemas"] = reachable(kept, schemas)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// reachable returns the schemas referenced, directly or transitively, from root.
func reachable(root any, schemas map[string]any) map[string]any {
	out := map[string]any{}
	queue := refs(root)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if _, done := out[name]; done {
			continue
		}
		s, ok := schemas[name]
		if !ok {
			continue // a dangling $ref is the generator's error to report
		}
		out[name] = s
		queue = append(queue, refs(s)...)
	}
	return out
}

// refs lists the schema names of every $ref inside v, sorted for determinism.
func refs(v any) []string {
	seen := map[string]bool{}
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, e := range t {
				if s, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(s, schemaRefPrefix) {
					seen[strings.TrimPrefix(s, schemaRefPrefix)] = true
					continue
				}
				walk(e)
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	walk(v)
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
