package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/sim"
)

func runSimArgs(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), append([]string{"sim"}, args...), &out, &errb)
	return out.String(), errb.String(), err
}

func TestSimBadFlags(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"zero nodes":          {[]string{"--nodes", "0"}, "--nodes=0 must be in 1..20000"},
		"a billion nodes":     {[]string{"--nodes", "1000000000"}, "--nodes=1000000000 must be in 1..20000"},
		"huge load":           {[]string{"--load-scale", "1e300"}, "--load-scale=1e+300 must be in [1e-6, 1e6]"},
		"tiny load":           {[]string{"--load-scale", "1e-300"}, "--load-scale=1e-300 must be in [1e-6, 1e6]"},
		"too many gpus":       {[]string{"--gpus-per-node", "100"}, "--gpus-per-node=100"},
		"no cpus":             {[]string{"--cpus-per-node", "-4"}, "--cpus-per-node=-4"},
		"no memory":           {[]string{"--mem-per-node-gb", "0"}, "--mem-per-node-gb=0"},
		"endless memory":      {[]string{"--mem-per-node-gb", "Inf"}, "--mem-per-node-gb=+Inf must be a finite number > 0"},
		"endless host memory": {[]string{"--set", "HostMemPerGPUGB=Inf"}, "HostMemPerGPUGB=+Inf"},
		"tiny interval":       {[]string{"--interval", "10ms"}, "--interval=10ms"},
		"huge interval":       {[]string{"--interval", "100h"}, "--interval=100h0m0s must be at most 72h0m0s"},
		"interval past max":   {[]string{"--max-time", "1h", "--interval", "2h"}, "--interval=2h0m0s must be at most 1h0m0s"},
		"no max time":         {[]string{"--max-time", "0s"}, "--max-time=0s must be in [1s, 8760h]"},
		"endless max time":    {[]string{"--max-time", "10000h"}, "--max-time=10000h0m0s"},
		"negative penalty":    {[]string{"--restart-penalty", "-1s"}, "--restart-penalty=-1s"},
		"negative load":       {[]string{"--load-scale", "-2"}, "--load-scale=-2"},
		"unknown policy":      {[]string{"--policy", "rubick,tetris"}, `--policy "tetris"`},
		"empty policy":        {[]string{"--policy", ","}, "--policy"},
		"plot format":         {[]string{"--plot", "out.pdf"}, `--plot "out.pdf"`},
		"plot directory":      {[]string{"--workload", "naive", "--policy", "fifo", "--plot", "/nonexistent/cdf.svg"}, `--plot "/nonexistent/cdf.svg": /nonexistent is not a directory`},
		"missing workload":    {[]string{"--workload", "/nonexistent/trace.csv"}, `--workload "/nonexistent/trace.csv"`},
		"missing data":        {[]string{"--data", "/nonexistent"}, `--data "/nonexistent"`},
		"not a duration":      {[]string{"--interval", "soon"}, "soon"},
		"stray argument":      {[]string{"extra"}, `"extra"`},
		"unknown knob":        {[]string{"--set", "Speed=2"}, `"Speed": unknown knob`},
		"bad knob value":      {[]string{"--set", "SLOMargin=1.5"}, "SLOMargin=1.5"},
		"negative refit":      {[]string{"--refit-threshold", "-0.1"}, "--refit-threshold=-0.1"},
		"unknown model":       {[]string{"--fixed-frameworks-models", "bert,gpt5"}, `model type "gpt5"`},
		"priority order":      {[]string{"--set", "BestEffortOrder=priority"}, "--set BestEffortOrder=priority needs --priority-weights"},
		"guaranteed priority": {[]string{"--set", "GuaranteedOrder=priority"}, "--set GuaranteedOrder=priority needs --priority-weights"},
		// Before, the default order, silently.
		"fair share order":  {[]string{"--set", "BestEffortOrder=fairshare"}, "--set BestEffortOrder=fairshare needs --fairshare-accounts"},
		"unknown weight":    {[]string{"--priority-weights", "age=1,qos=2"}, `unknown weight "qos"`},
		"weight twice":      {[]string{"--priority-weights", "age=1,age=2"}, "age given twice"},
		"bad weight":        {[]string{"--priority-weights", "age=-1"}, "want NAME=WEIGHT"},
		"fair share alone":  {[]string{"--priority-weights", "fairshare=5"}, "--priority-weights fairshare=5 needs --fairshare-accounts"},
		"zero max age":      {[]string{"--priority-max-age", "0s"}, "--priority-max-age=0s"},
		"negative parallel": {[]string{"--parallel", "-1"}, "--parallel=-1 must be >= 0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := runSimArgs(t, tc.args...)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("sim %v: error %v, want a usage error naming %s", tc.args, err, tc.want)
			}
		})
	}
}

// --max-time bounds how long a replay runs on after its last arrival: the
// naive trace, which finishes within the default, stops after one second.
func TestSimMaxTime(t *testing.T) {
	if _, _, err := runSimArgs(t, "--workload", "naive", "--policy", "fifo"); err != nil {
		t.Fatal(err)
	}
	_, _, err := runSimArgs(t, "--workload", "naive", "--policy", "fifo", "--max-time", "1s", "--interval", "1s")
	if err == nil || !strings.Contains(err.Error(), "unfinished 1s after the last arrival") {
		t.Errorf("sim --max-time 1s: %v, want the replay stopped 1s after the last arrival", err)
	}
}

func TestSimHelpListsDefaults(t *testing.T) {
	_, stderr, err := runSimArgs(t, "-h")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-workload", "workload-base", "-nodes", "(default 8)", "-interval", "1m0s", "-max-time", "72h0m0s", "-restart-penalty", "4m20s", "-load-scale", "-json", "-plot", "-policy", "rubick,fifo", "-set", "ReconfigKeep=0.9", "GuaranteedOrder=shortest", "-refit-threshold", "-exclude-suspect"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("help does not mention %q:\n%s", want, stderr)
		}
	}
	// Zero defaults too: --refit-threshold's usage names rubickd's 0.1.
	for _, want := range []string{"0: the profile fits throughout) (default 0)\n", "(0: every GPU) (default 0)\n", "one object per policy (default false)\n"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("help does not say %q:\n%s", want, stderr)
		}
	}
}

// The help is the same on every machine: docs/man/rubick-sim.md is made
// from it, and scripts/gen-man.sh --check compares them.
func TestSimHelpSameOnEveryMachine(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	_, one, err := runSimArgs(t, "-h")
	if err != nil {
		t.Fatal(err)
	}
	runtime.GOMAXPROCS(3)
	_, three, err := runSimArgs(t, "-h")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(one, three); diff != "" {
		t.Errorf("help on 1 CPU (-) and on 3 (+):\n%s", diff)
	}
}

func TestSimJSON(t *testing.T) {
	out, _, err := runSimArgs(t, "--workload", "naive", "--policy", "fifo,rubick", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, out)
	}
	var names []string
	for _, r := range rows {
		names = append(names, r["policy"].(string))
		for _, k := range []string{"policy", "jobs", "completed", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "avg_queue_s",
			"restarts", "gpu_util", "round_ms_avg", "round_ms_max", "slo_violations", "guaranteed", "best_effort", "fallback_job_s", "mispriced_job_s", "bound"} {
			if _, ok := r[k]; !ok {
				t.Errorf("%v lacks %q", r["policy"], k)
			}
		}
		for _, k := range []string{"guaranteed", "best_effort", "bound"} {
			if _, ok := r[k].(map[string]any)["avg_jct_s"]; !ok {
				t.Errorf("%v: %s lacks avg_jct_s", r["policy"], k)
			}
		}
		if r["jobs"].(float64) != 10 || r["completed"].(float64) != 10 {
			t.Errorf("%v: jobs %v completed %v, want 10 and 10", r["policy"], r["jobs"], r["completed"])
		}
	}
	if diff := cmp.Diff([]string{"fifo", "rubick"}, names); diff != "" {
		t.Errorf("policy order (-want +got):\n%s", diff)
	}
}

func TestSimTableAndPlot(t *testing.T) {
	dir := t.TempDir()
	for _, file := range []string{"cdf.svg", "cdf.png"} {
		path := filepath.Join(dir, file)
		out, _, err := runSimArgs(t, "--workload", "naive", "--policy", "rubick,antman", "--plot", path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"policy", "avg JCT s", "rubick", "antman", "bound"} {
			if !strings.Contains(out, want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
		if st, err := os.Stat(path); err != nil || st.Size() < 1000 {
			t.Errorf("plot %s: %v (size %d)", path, err, st.Size())
		}
	}
}

// A plot that cannot be written fails the command after the results are
// printed, not instead of them.
func TestSimPlotFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cdf.svg")
	if err := os.Mkdir(dir, 0o755); err != nil { // a directory, not a file
		t.Fatal(err)
	}
	out, _, err := runSimArgs(t, "--workload", "naive", "--policy", "fifo", "--json", "--plot", dir)
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %v, want one naming %s", err, dir)
	}
	var rows []map[string]any
	if jerr := json.Unmarshal([]byte(out), &rows); jerr != nil || len(rows) != 1 {
		t.Errorf("results %v (%v), want the fifo row printed all the same:\n%s", rows, jerr, out)
	}
}

// traceFile writes a trace of rows, after the trace header, and returns
// its path.
func traceFile(t *testing.T, rows string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.csv")
	csv := "name,submission_time,duration,application,num_gpus,num_cpus,bandwidth,exec_plan,steps,is_sla\n" + rows
	if err := os.WriteFile(path, []byte(csv), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSimWorkloadFile(t *testing.T) {
	path := traceFile(t, "bert-0,0,100,bert,2,16,0,ga,100,1\n")
	out, _, err := runSimArgs(t, "--workload", path, "--policy", "rubick", "--json", "--interval", "30s", "--restart-penalty", "0s")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Completed  int `json:"completed"`
		Guaranteed struct {
			Jobs int `json:"jobs"`
		} `json:"guaranteed"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Completed != 1 || rows[0].Guaranteed.Jobs != 1 {
		t.Errorf("rows = %+v, want one completed guaranteed job", rows)
	}
}

// TestSimWorkloadFileNamedLikeEmbedded: a file of the user's named as an
// embedded trace is read, and a BOM before its header is not a column's
// (before, the embedded trace of 406 jobs was replayed instead).
func TestSimWorkloadFileNamedLikeEmbedded(t *testing.T) {
	t.Chdir(t.TempDir())
	csv := "\ufeffname,submission_time,duration,application,num_gpus,num_cpus,bandwidth,exec_plan,steps,is_sla\n" +
		"bert-0,0,100,bert,2,16,0,ga,100,1\n"
	if err := os.WriteFile("workload-base.csv", []byte(csv), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runSimArgs(t, "--workload", "workload-base.csv", "--policy", "fifo", "--json")
	var rows []struct {
		Jobs int `json:"jobs"`
	}
	if err != nil || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].Jobs != 1 {
		t.Errorf("rows %+v (%v), want the file's one job:\n%s", rows, err, out)
	}
}

// A trace error is said once, not once per policy replaying the trace.
func TestSimTraceErrorOnce(t *testing.T) {
	path := traceFile(t, "vit-0,0,100,nosuch,2,16,0,ga,100,1\n")
	_, _, err := runSimArgs(t, "--workload", path, "--policy", "rubick,fifo,sia")
	if err == nil || strings.Count(err.Error(), `application="nosuch" is not a model type`) != 1 {
		t.Errorf("error %v, want one naming the unknown model once", err)
	}
}

// A trace rubick sim cannot replay is an error naming the file, line,
// column and value; a job the cluster cannot hold as requested is named
// with the reason once the replay gives up on it (an elastic policy may
// still run it on fewer GPUs).
func TestSimBadTrace(t *testing.T) {
	const header = "name,submission_time,duration,application,num_gpus,num_cpus,bandwidth,exec_plan,steps,is_sla\n"
	const first = "bert-0,0,100,bert,2,16,0,ga,100,0\n"
	tests := map[string]struct {
		csv  string
		args []string
		want string // FILE stands for the trace's path
	}{
		"missing column": {csv: "name,submission_time,duration,application,num_gpus,num_cpus,bandwidth,exec_plan,is_sla\nbert-0,0,100,bert,2,16,0,ga,0\n",
			want: `FILE: missing column "steps"`},
		// Every missing column at once, not one a run.
		"missing columns": {csv: "job_id,submit_time,model,num_gpus,duration\n1,0,gpt2,4,3600\n",
			want: `FILE: missing columns "name", "submission_time", "application", "num_cpus", "bandwidth", "exec_plan", "steps", "is_sla"`},
		"unknown application": {csv: header + first + "x-1,60,200,gpt5,4,32,0,zero-dp,200,1\n",
			want: `FILE line 3: job x-1: application="gpt5" is not a model type of the data (have bert, gpt2, llama30, llama7, roberta, t5, vit)`},
		"malformed exec_plan": {csv: header + first + "gpt2-1,60,200,gpt2,4,32,0,zero-2,200,1\n",
			want: `FILE line 3: job gpt2-1: exec_plan="zero-2" with num_gpus=4: bad input: exec plan "zero-2" is not ga, gc, zero-dp, zero-offload or a PTD code of three digits 1-9`},
		"exec_plan of other GPUs": {csv: header + first + "gpt2-1,60,200,gpt2,4,32,0,222,200,1\n",
			want: `FILE line 3: job gpt2-1: exec_plan="222" with num_gpus=4: invalid plan: exec plan "222" uses 8 GPUs, placement 4 has 4`},
		"no steps": {csv: header + first + "gpt2-1,60,200,gpt2,4,32,0,zero-dp,0,1\n",
			want: "FILE line 3: job gpt2-1: steps=0 must be > 0"},
		// The file's line (before, the record's: 3 here too).
		"after blank lines": {csv: header + first + "\n\ngpt2-1,60,200,gpt2,4,32,0,zero-dp,0,1\n",
			want: "FILE line 5: job gpt2-1: steps=0 must be > 0"},
		"after a quoted line break": {csv: header + `"bert` + "\n" + `-0",0,100,bert,2,16,0,ga,100,1` + "\ngpt2-1,60,200,gpt2,4,32,0,zero-dp,-5,1\n",
			want: `FILE line 4: steps="-5" is not a non-negative integer`},
		"negative steps": {csv: header + first + "gpt2-1,60,200,gpt2,4,32,0,zero-dp,-5,1\n",
			want: `FILE line 3: steps="-5" is not a non-negative integer`},
		"no name": {csv: header + first + ",60,200,gpt2,4,32,0,zero-dp,200,1\n",
			want: "FILE line 3: name is empty"},
		"name twice": {csv: header + first + "bert-0,60,200,gpt2,4,32,0,zero-dp,200,1\n",
			want: `FILE line 3: job bert-0: name="bert-0" repeats line 2`},
		"column twice": {csv: strings.Replace(header, "steps", "num_gpus", 1) + first, want: `FILE: column "num_gpus" twice in the header`},
		"empty file":   {csv: "", want: "FILE: no header"},
		"header only":  {csv: header, want: "FILE: no jobs after the header"},
		"more GPUs than the cluster": {csv: header + first + "roberta-1,60,200,roberta,64,512,1.25,ga,200,1\n", args: []string{"--nodes", "4"},
			want: "sim fifo: 1 of 2 jobs unfinished 72h0m0s after the last arrival (MaxTime): roberta-1; 1 of them ask for more GPUs than the cluster's 4 nodes of 8 hold"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "trace.csv")
			if err := os.WriteFile(path, []byte(tc.csv), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := runSimArgs(t, append([]string{"--workload", path, "--policy", "fifo"}, tc.args...)...)
			if want := strings.ReplaceAll(tc.want, "FILE", path); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want one saying %q", err, want)
			}
		})
	}
}

// The example of docs/simulator.md (Trace format) is
// testdata/trace-example.csv, and it replays as the doc says: under fifo
// every job starts on its request at its submission, so it takes one
// restart penalty plus its duration, steps times the measured time of
// the request.
func TestSimTraceExample(t *testing.T) {
	const file = "testdata/trace-example.csv"
	example, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/simulator.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```csv\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !closed {
		t.Fatal("docs/simulator.md has no ```csv block")
	}
	if diff := cmp.Diff(string(example), block); diff != "" {
		t.Errorf("docs/simulator.md's example (+) is not %s (-):\n%s", file, diff)
	}
	out, _, err := runSimArgs(t, "--workload", file, "--policy", "fifo", "--fairshare-accounts", "trace", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []sim.Result
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d results, want fifo's", len(rows))
	}
	r := rows[0]
	if r.Jobs != 3 || r.Completed != 3 || r.Guaranteed.Jobs != 1 || r.FallbackJobS != 0 {
		t.Errorf("jobs %d, completed %d, guaranteed %d, fallback %.0f job-s; want 3, 3, 1 and 0", r.Jobs, r.Completed, r.Guaranteed.Jobs, r.FallbackJobS)
	}
	jobs, err := artifact.ReadWorkload(bytes.NewReader(example), file)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs { // one job per model type
		if got := r.Models[j.App].All.AvgJCT; math.Abs(got-(260+j.DurationS)) > 1 {
			t.Errorf("%s: JCT %.1f s, want the 260 s restart penalty plus its duration, %.0f s", j.Name, got, j.DurationS)
		}
	}
}

// TestSimSomePoliciesUnfinished: a job whose tensor-parallel group the
// cluster's nodes split is never started by sia, which keeps TP inside a
// node. Its error says why, and fifo's row, a finished replay, is printed
// all the same (before: no results at all, and no reason).
func TestSimSomePoliciesUnfinished(t *testing.T) {
	path := traceFile(t, "gpt2-40,0,572.01,gpt2,5,40,0,151,552,0\n")
	out, _, err := runSimArgs(t, "--workload", path, "--policy", "fifo,sia", "--nodes", "4", "--gpus-per-node", "4", "--json")
	if err == nil || !strings.Contains(err.Error(), "sim sia: 1 of 1 jobs unfinished") ||
		!strings.Contains(err.Error(), "1 of them ask for a tensor-parallel group split over nodes of 4 GPUs") {
		t.Errorf("error %v, want sia's naming the split tensor-parallel group", err)
	}
	var rows []struct {
		Policy    string `json:"policy"`
		Completed int    `json:"completed"`
	}
	if jerr := json.Unmarshal([]byte(out), &rows); jerr != nil || len(rows) != 1 || rows[0].Policy != "fifo" || rows[0].Completed != 1 {
		t.Errorf("results %+v (%v), want fifo's finished replay:\n%s", rows, jerr, out)
	}
}
