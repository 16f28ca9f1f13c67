package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

// TestModelValidateJSON checks the fields of `rubick model validate --json`
// that docs/model.md (JSON output) lists.
func TestModelValidateJSON(t *testing.T) {
	out, _, err := runCLI(t, "model", "validate", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, out)
	}
	accKeys := []string{"family", "mape_pct", "max_ape_pct", "model", "rows"}
	pcKeys := []string{"best_pick_pct", "family", "model", "placements", "regret_pct_avg", "regret_pct_max"}
	families := map[string]bool{"ga": true, "gc": true, "zero-dp": true, "zero-offload": true, "3d": true}
	var overall, allPC bool
	perFamilyAll := map[string]bool{}
	pcModels := map[string]bool{}
	for _, r := range rows {
		var keys []string
		for k := range r {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fam, _ := r["family"].(string)
		model, _ := r["model"].(string)
		switch {
		case fam == "plan-choice":
			if diff := cmp.Diff(pcKeys, keys); diff != "" {
				t.Errorf("plan-choice row keys (-want +got):\n%s", diff)
			}
			pcModels[model] = true
			allPC = allPC || model == "all"
		case fam == "all":
			overall = overall || model == "all"
			if diff := cmp.Diff(accKeys, keys); diff != "" {
				t.Errorf("overall row keys (-want +got):\n%s", diff)
			}
			if r["rows"].(float64) != 512 {
				t.Errorf("overall row covers %v rows, want 512", r["rows"])
			}
		case families[fam]:
			if diff := cmp.Diff(accKeys, keys); diff != "" {
				t.Errorf("accuracy row keys (-want +got):\n%s", diff)
			}
			if model == "all" {
				perFamilyAll[fam] = true
			}
		default:
			t.Errorf("unexpected family %q in %v", fam, r)
		}
	}
	if !overall || !allPC || len(perFamilyAll) != len(families) {
		t.Errorf("overall row %v, overall plan-choice %v, per-family all rows %v", overall, allPC, perFamilyAll)
	}
	if len(pcModels) < 7 {
		t.Errorf("plan-choice rows for %v, want every model with several plans and all", pcModels)
	}
}

func TestModelValidateTable(t *testing.T) {
	out, _, err := runCLI(t, "model", "validate", "--exclude-suspect")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mape_pct", "best_pick_pct", "81 of 512 rows are flagged suspect", "left out of"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
}

func TestModelBestPlan(t *testing.T) {
	out, _, err := runCLI(t, "model", "best-plan", "--model", "llama7", "--placement", "8888", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Plan struct {
			DP, TP, PP int
		} `json:"plan"`
		IterS float64 `json:"iter_s"`
		CPUs  int     `json:"cpus"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Plan.DP*got.Plan.TP*got.Plan.PP != 32 || !(got.IterS > 0) || got.CPUs != 128 {
		t.Errorf("best plan %+v", got)
	}
}

// Two nodes of 16 GPUs are 32 GPUs, and are shown in the form they were given.
func TestModelBestPlanWideNodes(t *testing.T) {
	out, _, err := runCLI(t, "model", "best-plan", "--model", "llama7", "--placement", "2x16", "--env", "node_gpus=16", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Placement string `json:"placement"`
		Plan      struct {
			DP, TP, PP int
		} `json:"plan"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Placement != "2x16" || got.Plan.DP*got.Plan.TP*got.Plan.PP != 32 {
		t.Errorf("best plan on 2x16: %+v", got)
	}
}

// A slower network between nodes makes multi-node plans slower.
func TestModelBestPlanEnv(t *testing.T) {
	iter := func(args ...string) float64 {
		t.Helper()
		out, _, err := runCLI(t, append([]string{"model", "best-plan", "--model", "bert", "--placement", "44", "--json"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			IterS float64 `json:"iter_s"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		return got.IterS
	}
	if fast, slow := iter(), iter("--env", "inter_gbps=1"); !(slow > fast) {
		t.Errorf("iteration on 44 with 1 GB/s between nodes = %v s, want slower than %v s at the default", slow, fast)
	}
}

func TestModelFit(t *testing.T) {
	out, _, err := runCLI(t, "model", "fit", "--model", "bert", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Model string `json:"model"`
		Fit   struct {
			Samples int `json:"samples"`
		} `json:"fit"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Model != "bert" || rows[0].Fit.Samples != 7 {
		t.Errorf("fit output %+v", rows)
	}
	table, _, err := runCLI(t, "model", "fit")
	if err != nil || !strings.Contains(table, "llama30") || !strings.Contains(table, "k_bwd") {
		t.Errorf("fit table: %v\n%s", err, table)
	}
}

// llama30's profile is a copy of llama7's: fitting or planning llama30
// alone must still find it, as fitting every model does.
func TestModelBorrowedProfile(t *testing.T) {
	out, _, err := runCLI(t, "model", "fit", "--model", "llama30", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Fit struct {
			Samples int    `json:"samples"`
			Source  string `json:"source"`
		} `json:"fit"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Fit.Samples != 3 || !strings.Contains(rows[0].Fit.Source, "llama7") {
		t.Errorf("fit --model llama30: %+v, want llama7's 3 runs with the source named", rows)
	}
	out, _, err = runCLI(t, "model", "best-plan", "--model", "llama30", "--placement", "8", "--json")
	if err != nil || !strings.Contains(out, `"plan"`) {
		t.Errorf("best-plan --model llama30: %v\n%s", err, out)
	}
}

// TestModelLearnJSON runs one draw of the online-refit replay.
func TestModelLearnJSON(t *testing.T) {
	out, _, err := runCLI(t, "model", "learn", "--rows", "7", "--seeds", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, out)
	}
	want := []string{"learned_best_pick_pct", "learned_mape_pct", "learned_regret_pct_avg", "model", "placements",
		"promoted", "refits", "scored", "static_best_pick_pct", "static_mape_pct", "static_regret_pct_avg"}
	by := map[string]map[string]any{}
	for _, r := range rows {
		keys := make([]string, 0, len(r))
		for k := range r {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if d := cmp.Diff(want, keys); d != "" {
			t.Errorf("row keys (-want +got):\n%s", d)
		}
		by[r["model"].(string)] = r
	}
	if by["all"] == nil || len(by) != 8 {
		t.Fatalf("rows for %d models, want the 7 shipped models and all:\n%s", len(by), out)
	}
	if l := by["llama30"]; l["promoted"].(float64) != 1 || !(l["learned_mape_pct"].(float64) < l["static_mape_pct"].(float64)) {
		t.Errorf("llama30 = %v, want its refit promoted and its error lower", l)
	}
}

func TestModelErrors(t *testing.T) {
	noModels := t.TempDir()
	if err := os.WriteFile(filepath.Join(noModels, "models.json"), []byte(`{"models":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	specOnly := t.TempDir()
	const entry = `{"models":{"gpt13":{"parameters":13e9,"layers":40,"hidden":5120,"heads":40,"seq_len":2048,"global_batch":64,"forward_ms_1gpu":9000}}}`
	if err := os.WriteFile(filepath.Join(specOnly, "models.json"), []byte(entry), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args  []string
		usage bool
		want  string
	}{
		"best-plan without a profile": {args: []string{"model", "best-plan", "--data", specOnly, "--model", "gpt13", "--placement", "8"},
			want: "no profiling runs: gpt13 has none in profile/gpt13/ to fit it on; rubickd fits it on the profiling runs of its first job"},
		"fit without a profile": {args: []string{"model", "fit", "--data", specOnly, "--model", "gpt13"}, want: "gpt13 has none in profile/gpt13/"},
		"unknown subcommand":    {args: []string{"model", "predict"}, usage: true, want: `"predict"`},
		"unknown flag":          {args: []string{"model", "validate", "--bogus"}, usage: true, want: "bogus"},
		"missing model":         {args: []string{"model", "best-plan", "--placement", "8"}, usage: true, want: "--model"},
		"unknown model":         {args: []string{"model", "best-plan", "--model", "gpt5", "--placement", "8"}, usage: true, want: `"gpt5"`},
		"bad placement":         {args: []string{"model", "best-plan", "--model", "gpt2", "--placement", "80"}, usage: true, want: `"80"`},
		"zero-GPU nodes":        {args: []string{"model", "best-plan", "--model", "gpt2", "--placement", "2x0"}, usage: true, want: `"2x0"`},
		"negative cpus":         {args: []string{"model", "best-plan", "--model", "gpt2", "--placement", "8", "--cpus", "-1"}, usage: true, want: "--cpus=-1"},
		"over a node's GPUs": {args: []string{"model", "best-plan", "--model", "gpt2", "--placement", "8", "--env", "node_gpus=4"}, usage: true,
			want: "--placement=8 puts 8 GPUs on a node of 4"},
		"over the nodes' CPUs": {args: []string{"model", "best-plan", "--model", "gpt2", "--placement", "44", "--cpus", "100000"}, usage: true,
			want: "--cpus=100000 is more than the 2 nodes"},
		"missing data":        {args: []string{"model", "validate", "--data", "/nonexistent/rubick"}, usage: true, want: "/nonexistent/rubick"},
		"fit unknown model":   {args: []string{"model", "fit", "--model", "gpt5"}, usage: true, want: `"gpt5"`},
		"unknown env name":    {args: []string{"model", "validate", "--env", "nvlink=400"}, usage: true, want: `"nvlink"`},
		"learn without rows":  {args: []string{"model", "learn", "--rows", "0"}, usage: true, want: "--rows=0"},
		"learn without seeds": {args: []string{"model", "learn", "--seeds", "0"}, usage: true, want: "--seeds=0"},
		"learn NaN threshold": {args: []string{"model", "learn", "--threshold", "NaN"}, usage: true, want: "--threshold=NaN"},
		"learn inf threshold": {args: []string{"model", "learn", "--threshold", "+Inf"}, usage: true, want: "--threshold=+Inf"},
		"fit no models":       {args: []string{"model", "fit", "--data", noModels}, want: "models.json has no model types"},
		"validate no models":  {args: []string{"model", "validate", "--data", noModels, "--json"}, want: "models.json has no model types"},
		"bad env value":       {args: []string{"model", "best-plan", "--model", "gpt2", "--placement", "8", "--env", "inter_gbps=-2"}, usage: true, want: "inter_gbps=-2"},
		"no env bandwidth":    {args: []string{"model", "best-plan", "--model", "gpt2", "--placement", "8", "--env", "pcie_gbps=0"}, usage: true, want: "env.pcie_gbps=0 must be >= 0.001 GB/s"},
		"env fraction":        {args: []string{"model", "fit", "--env", "node_cpus=0.5"}, usage: true, want: "env node_cpus=0.5 must be a whole number >= 0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := runCLI(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one naming %s", err, tc.want)
			}
			if errors.Is(err, errUsage) != tc.usage {
				t.Errorf("usage error = %v, want %v", errors.Is(err, errUsage), tc.usage)
			}
		})
	}
}

// TestModelHelpListsDefaults: every flag of every subcommand appears in -h
// with its default.
func TestModelHelpListsDefaults(t *testing.T) {
	for sub, flags := range map[string][]string{
		"fit":       {"--data", "--model", "--json", "--env"},
		"validate":  {"--data", "--json", "--exclude-suspect", "--rows", "--env"},
		"learn":     {"--data", "--json", "--rows", "--seeds", "--threshold", "--exclude-suspect", "--env"},
		"best-plan": {"--data", "--model", "--placement", "--cpus", "--json", "--env"},
	} {
		_, stderr, err := runCLI(t, "model", sub, "-h")
		if err != nil {
			t.Fatalf("%s -h: %v", sub, err)
		}
		for _, f := range flags {
			want := "(default " // a repeatable flag lists its defaults instead
			if f == "--env" {
				want = "(defaults: intra_gbps=150 "
			}
			i := strings.Index(stderr, "  "+f)
			if i < 0 || !strings.Contains(stderr[i:], want) {
				t.Errorf("%s -h does not list %s with its default:\n%s", sub, f, stderr)
			}
		}
	}
	out, _, err := runCLI(t, "model")
	if err != nil || !strings.Contains(out, "best-plan") {
		t.Errorf("model usage: %v\n%s", err, out)
	}
}

func TestParseOneArg(t *testing.T) {
	tests := map[string]struct {
		args          []string
		want, wantErr string
		top           int
		json          bool
		store         string
	}{
		"flags first":           {args: []string{"--top", "2", "--json", "42"}, want: "42", top: 2, json: true},
		"flags after":           {args: []string{"42", "--top", "2", "--json"}, want: "42", top: 2, json: true},
		"flags around":          {args: []string{"--json", "42", "--top", "2"}, want: "42", top: 2, json: true},
		"after --, a dash":      {args: []string{"--json", "--", "-5"}, want: "-5", top: 1, json: true},
		"-- as a flag's value":  {args: []string{"--store", "--", "42", "--top", "2"}, want: "42", top: 2, store: "--"},
		"-- after a bool flag":  {args: []string{"--json", "--", "--top"}, want: "--top", top: 1, json: true},
		"two arguments":         {args: []string{"42", "--json", "43"}, wantErr: `want exactly one JOBID, got ["42" "43"]`},
		"none":                  {args: []string{"--json"}, wantErr: "want exactly one JOBID, got []"},
		"an unknown flag after": {args: []string{"42", "--topp", "2"}, wantErr: "flag provided but not defined: -topp"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fs := flag.NewFlagSet("explain", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			top, asJSON, st := fs.Int("top", 1, ""), fs.Bool("json", false, ""), fs.String("store", "", "")
			got, help, err := parseOneArg(fs, tc.args, "JOBID")
			if tc.wantErr != "" {
				if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want a usage error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || help || got != tc.want || *top != tc.top || *asJSON != tc.json || *st != tc.store {
				t.Errorf("got %q (help %v, err %v), top %d, json %v, store %q; want %q, top %d, json %v, store %q",
					got, help, err, *top, *asJSON, *st, tc.want, tc.top, tc.json, tc.store)
			}
		})
	}
}

// A string flag's default is quoted, empty or not, also when its usage
// names its value (`file`), which flag.UnquoteUsage then returns as its type.
func TestPrintDefaultsQuotesStrings(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("input", "", "read this `file`")
	fs.Int("n", 0, "a count `N`")
	fs.String("tz", "Local", "a zone")
	var b strings.Builder
	printDefaults(&b, fs)
	want := "  --input file\n    \tread this file (default \"\")\n" +
		"  --n N\n    \ta count N (default 0)\n" +
		"  --tz string\n    \ta zone (default \"Local\")\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printDefaults (-want +got):\n%s", diff)
	}
}

// TestHelpProseDefault checks that a flag whose usage names its default in
// words is not given a second, empty one.
func TestHelpProseDefault(t *testing.T) {
	for _, tc := range []struct {
		cmd, flag, want string
	}{
		{"script", "--user", "(default: you)\n"},
		{"script", "--workdir", "as sbatch's)\n"},
		{"report", "--since", "unless given)\n"},
		{"script", "--gpus", "(default 0)\n"},
	} {
		_, stderr, err := runCLI(t, tc.cmd, "-h")
		if err != nil {
			t.Fatalf("%s -h: %v", tc.cmd, err)
		}
		i := strings.Index(stderr, "  "+tc.flag+" ")
		if i < 0 {
			t.Fatalf("%s -h does not list %s:\n%s", tc.cmd, tc.flag, stderr)
		}
		line := stderr[i:]
		line = line[strings.Index(line, "\n")+1:]
		line = line[:strings.Index(line, "\n")+1]
		if !strings.HasSuffix(line, tc.want) {
			t.Errorf("%s -h: %s help line %q, want it to end %q", tc.cmd, tc.flag, line, tc.want)
		}
	}
}

// A site's profile fitted under a spec whose forward time is four times
// too long is doubted, in the table and in the JSON; the shipped one is not.
func TestModelFitDoubts(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "profile", "bertx"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.csv", "data.csv"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "artifact", "data", "profile", "bert", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "profile", "bertx", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// bert's entry, its forward time four times its own.
	const entry = `{"models":{"bertx":{"parameters":336297858,"layers":24,"hidden":1536,"heads":16,"seq_len":1024,"global_batch":32,"forward_ms_1gpu":900}}}`
	if err := os.WriteFile(filepath.Join(dir, "models.json"), []byte(entry), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "model", "fit", "--data", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Fit struct {
			Params model.Params `json:"params"`
		} `json:"fit"`
		Doubts []string `json:"doubts"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("rows %+v, want bertx's", rows)
	}
	doubt := fmt.Sprintf("k_bwd=%.4g is the least backward/forward ratio a fit allows: forward_ms_1gpu=900 is likely too long", rows[0].Fit.Params.KBwd)
	if d := cmp.Diff([]string{doubt}, rows[0].Doubts); d != "" {
		t.Errorf("doubts (-want +got):\n%s", d)
	}
	table, _, err := runCLI(t, "model", "fit", "--data", dir)
	if err != nil || !strings.Contains(table, "doubt: bertx: "+doubt) {
		t.Errorf("fit table lacks the doubt: %v\n%s", err, table)
	}
	shipped, _, err := runCLI(t, "model", "fit")
	if err != nil || strings.Contains(shipped, "doubt:") {
		t.Errorf("the shipped fits are doubted: %v\n%s", err, shipped)
	}
}
