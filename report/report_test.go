package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rubick-sched/rubick/slurm"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func load(t *testing.T, file string, o Options) *Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return build(t, string(b), o)
}

// build parses sacct text and builds its report.
func build(t *testing.T, text string, o Options) *Report {
	t.Helper()
	rows, cols, err := ParseSacct(strings.NewReader(text), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Build(rows, cols, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func syntheticOptions() Options {
	return Options{
		Since:           time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		Until:           time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC),
		RestartOverhead: DefaultRestartOverhead,
	}
}

// jobView is the part of a Job the synthetic test pins by hand.
type jobView struct {
	ID, ModelType, Class, Tenant, State string
	Finished                            bool
	JCTS, QueueS                        *float64
	Runs, Requeues, Resizes, Reconfigs  int
	LostS                               float64
	LostGPUh, GPUh, UsefulGPUh          *float64
	GPUSources                          []string
	GPUTRESMissing, BelowRequest        bool
	Plans                               []string
}

func view(j Job) jobView {
	v := jobView{ID: j.ID, ModelType: j.ModelType, Class: j.Class, Tenant: j.Tenant, State: j.State,
		Finished: j.Finished, JCTS: j.JCTS, QueueS: j.QueueS, Runs: len(j.Runs), Requeues: j.Requeues,
		Resizes: j.Resizes, Reconfigs: j.Reconfigurations, LostS: j.ReconfigLostS, LostGPUh: j.ReconfigLostGPUHours,
		GPUh: j.GPUHours, UsefulGPUh: j.UsefulGPUHours, GPUTRESMissing: j.GPUTRESMissing,
		BelowRequest: j.BelowRequest, Plans: j.Plans}
	for _, r := range j.Runs {
		v.GPUSources = append(v.GPUSources, r.GPUSource)
	}
	return v
}

func f(v float64) *float64 { return &v }

// TestSynthetic pins every metric of a hand-built sacct text; the expected
// numbers are worked out in the comments from the rows in
// testdata/synthetic.txt.
func TestSynthetic(t *testing.T) {
	r := load(t, "synthetic.txt", syntheticOptions())
	lost := 260.0 * 8 / 3600 // overhead x GPUs of the run after the reconfiguration
	want := []jobView{
		// Requeued once: 1 h on 4 GPUs, a 5 min gap, 2 h on 8 GPUs.
		{ID: "101", ModelType: "gpt2", Class: "guaranteed", Tenant: "physics", State: "COMPLETED", Finished: true,
			JCTS: f(3*3600 + 600), QueueS: f(300), Runs: 2, Requeues: 1, Reconfigs: 1,
			LostS: 300 + 260, LostGPUh: f(lost), GPUh: f(4 + 16), UsefulGPUh: f(20 - lost),
			GPUSources: []string{"alloc_tres", "alloc_tres"},
			Plans:      []string{"dp4.tp1.pp1.mb2.a8.z0", "dp8.tp1.pp1.mb1.a8.z0"}},
		// Shrunk in place from 16 to 8 GPUs, still running.
		{ID: "102", ModelType: "gpt2", Class: "best-effort", Tenant: "bio", State: "RUNNING",
			QueueS: f(30), Runs: 2, Resizes: 1, Reconfigs: 1, LostS: 260, LostGPUh: f(lost), GPUh: f(8 + 6), UsefulGPUh: f(14 - lost),
			GPUSources: []string{"alloc_tres", "alloc_tres"},
			Plans:      []string{"dp16.tp1.pp1.mb1.a4.z0", "dp8.tp1.pp1.mb1.a8.z0"}},
		// Guaranteed, asked for 4 GPUs, ran on 2.
		{ID: "103", ModelType: "bert", Class: "guaranteed", Tenant: "physics", State: "COMPLETED", Finished: true,
			JCTS: f(4200), QueueS: f(600), Runs: 1, LostGPUh: f(0), GPUh: f(2), UsefulGPUh: f(2), GPUSources: []string{"alloc_tres"},
			BelowRequest: true, Plans: []string{"dp2.tp1.pp1.mb8.a8.z0"}},
		// Malformed tag: reported untagged, with an error.
		{ID: "104", ModelType: NoModel, State: "COMPLETED", Finished: true, JCTS: f(610), QueueS: f(10), Runs: 1,
			LostGPUh: f(0), GPUh: f(1.0 / 6), UsefulGPUh: f(1.0 / 6), GPUSources: []string{"alloc_tres"}, Plans: []string{}},
		// No gres/gpu in AllocTRES: req= gives 8 GPUs per node on 2 nodes.
		// Ended at its time limit.
		{ID: "105", ModelType: "gpt2", Class: "best-effort", Tenant: "bio", State: "TIMEOUT", Finished: true,
			JCTS: f(1800), QueueS: f(0), Runs: 1, LostGPUh: f(0), GPUh: f(8), UsefulGPUh: f(8), GPUSources: []string{"request"}, Plans: []string{}},
		// No gres/gpu and nothing to fall back on.
		{ID: "106", ModelType: NoModel, State: "CANCELLED", Finished: true, JCTS: f(1260), QueueS: f(60), Runs: 1,
			LostGPUh: f(0), GPUh: f(0), UsefulGPUh: f(0),
			GPUSources: []string{"missing"}, GPUTRESMissing: true, Plans: []string{}},
		// 107 was submitted before the window. 108 never started.
		{ID: "108", ModelType: "bert", Class: "best-effort", Tenant: "bio", State: "PENDING", Runs: 1,
			LostGPUh: f(0), GPUh: f(0), UsefulGPUh: f(0),
			GPUSources: []string{"none"}, Plans: []string{}},
	}
	var got []jobView
	for _, j := range r.Jobs {
		got = append(got, view(j))
	}
	approx := cmpopts.EquateApprox(0, 1e-9)
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}

	wantAll := Summary{Key: "all", Jobs: 7, Finished: 5, TimedOut: 1,
		AvgJCTS: f((11400 + 4200 + 610 + 1800 + 1260) / 5.0), P99JCTS: f(11400),
		AvgQueueS: f((300 + 30 + 600 + 10 + 0 + 60) / 6.0),
		GPUHours:  f(20 + 14 + 2 + 1.0/6 + 8), UsefulGPUHours: f(20 + 14 + 2 + 1.0/6 + 8 - 2*lost),
		// 1 h x 8 + 2 h x 16, 30 min x 16 + 45 min x 8, then one run each.
		BillingHours:     f(40 + 14 + 4 + 1.0/6 + 16 + 4.0/3),
		Reconfigurations: 2, Requeues: 1, Resizes: 1, ReconfigLostS: 560 + 260, ReconfigLostGPUHours: f(2 * lost),
		InterruptionLostGPUHours: f(0), Guaranteed: 2, BelowRequest: 1, GPUTRESMissing: 1}
	if diff := cmp.Diff(wantAll, r.Overall, approx); diff != "" {
		t.Errorf("overall (-want +got):\n%s", diff)
	}
	var keys []string
	for _, g := range r.Groups {
		for _, s := range g.Rows {
			keys = append(keys, g.By+"="+s.Key)
		}
	}
	wantKeys := []string{"model=(none)", "model=bert", "model=gpt2", "account=bio", "account=chem", "account=physics",
		"tenant=(none)", "tenant=bio", "tenant=physics"}
	if diff := cmp.Diff(wantKeys, keys); diff != "" {
		t.Errorf("group keys (-want +got):\n%s", diff)
	}
	gpt2 := r.Groups[0].Rows[2]
	if gpt2.Jobs != 3 || gpt2.Finished != 2 || *gpt2.P99JCTS != 11400 || gpt2.Reconfigurations != 2 {
		t.Errorf("gpt2 summary = %+v", gpt2)
	}

	if len(r.Errors) != 1 {
		t.Fatalf("errors = %v, want the malformed tag of job 104", r.Errors)
	}
	e := r.Errors[0]
	if e.JobID != "104" || e.Field != "AdminComment" || e.Value != "rubick:v1 model=gpt2 class=gold" || !errors.Is(e, slurm.ErrTag) {
		t.Errorf("error = %+v", e)
	}
	if err := r.Err(); !errors.Is(err, ErrJob) || !strings.Contains(err.Error(), `job 104: AdminComment="rubick:v1 model=gpt2 class=gold"`) {
		t.Errorf("Err() = %v, want ErrJob naming job 104 and the field", err)
	}
	if len(r.Notes) != 0 {
		t.Errorf("notes = %q, want none: every column is present and every tagged job has gres/gpu or req=", r.Notes)
	}
}

func TestWindow(t *testing.T) {
	tests := map[string]struct {
		since, until time.Time
		want         []string
	}{
		"open":       {want: []string{"101", "102", "103", "104", "105", "106", "107", "108"}},
		"since only": {since: time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC), want: []string{"104", "105", "106", "108"}},
		"until is exclusive": {since: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), until: time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC),
			want: []string{"101", "102", "103"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := load(t, "synthetic.txt", Options{Since: tc.since, Until: tc.until})
			var got []string
			for _, j := range r.Jobs {
				got = append(got, j.ID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	day := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		o    Options
		want string
	}{
		"ok":               {o: Options{By: []string{"model", "qos"}}},
		"bad dimension":    {o: Options{By: []string{"owner"}}, want: `group by "owner"`},
		"negative":         {o: Options{RestartOverhead: -time.Second}, want: "negative"},
		"empty window":     {o: Options{Since: day, Until: day}, want: "not before"},
		"until before now": {o: Options{Since: day, Until: day.Add(-time.Hour)}, want: "not before"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.o.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	tests := map[string]struct {
		vs   []float64
		p    float64
		want float64
	}{
		"one":          {vs: []float64{7}, p: 99, want: 7},
		"nearest rank": {vs: []float64{5, 1, 4, 2, 3}, p: 50, want: 3},
		"p99 of 100":   {vs: seq(100), p: 99, want: 99},
		"p99 of 101":   {vs: seq(101), p: 99, want: 100},
		"p0":           {vs: []float64{3, 1, 2}, p: 0, want: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Percentile(tc.vs, tc.p); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.vs, tc.p, got, tc.want)
			}
		})
	}
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

// TestGoldenSample22_05 renders the report of sacct output captured on the
// Slurm 22.05 lab. That capture has no time or account columns, so only
// counts, GPU-hours and reconfigurations are known.
func TestGoldenSample22_05(t *testing.T) {
	r := load(t, "sacct-22.05.txt", Options{RestartOverhead: DefaultRestartOverhead})
	// Facts read off the sample by hand.
	byID := map[string]Job{}
	for _, j := range r.Jobs {
		byID[j.ID] = j
	}
	if len(r.Jobs) != 43 {
		t.Errorf("jobs = %d, want 43 distinct ids among 51 rows", len(r.Jobs))
	}
	for id, want := range map[string]struct {
		model   string
		resizes int
		gpuh    float64
	}{
		"20": {NoModel, 1, (2*24 + 15*8) / 3600.0},
		"25": {NoModel, 1, (18*8 + 6*8) / 3600.0}, // rows interleaved with 27 and 28
		"32": {NoModel, 0, 249 * 16 / 3600.0},
		"44": {"resnet50", 0, 5 / 3600.0}, // legacy model_type= segment
		"45": {"bert", 0, 5 / 3600.0},
		"47": {"gpt2", 0, 0},                // no AllocTRES: never ran
		"30": {NoModel, 0, 0},               // 364 days, but no AllocTRES
		"31": {NoModel, 0, 49 * 4 / 3600.0}, // malformed tag
	} {
		j := byID[id]
		if j.ModelType != want.model || j.Resizes != want.resizes || cmp.Diff(&want.gpuh, j.GPUHours, cmpopts.EquateApprox(0, 1e-12)) != "" {
			t.Errorf("job %s: model %q resizes %d GPU-h %v, want %q %d %v", id, j.ModelType, j.Resizes, orZero(j.GPUHours), want.model, want.resizes, want.gpuh)
		}
		if j.JCTS != nil || j.QueueS != nil {
			t.Errorf("job %s: JCT/queue known without time columns", id)
		}
	}
	if len(r.Errors) != 1 || r.Errors[0].JobID != "31" || r.Errors[0].Field != "AdminComment" {
		t.Errorf("errors = %v, want job 31's AdminComment", r.Errors)
	}
	for _, format := range []string{"table", "json", "csv"} {
		var b bytes.Buffer
		var err error
		switch format {
		case "table":
			err = r.WriteTable(&b, true)
		case "json":
			err = r.WriteJSON(&b)
		case "csv":
			err = r.WriteCSV(&b, false)
		}
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "sacct-22.05.golden."+format, b.Bytes())
	}
}

// TestGoldenSynthetic pins the three renderings of the synthetic report.
func TestGoldenSynthetic(t *testing.T) {
	r := load(t, "synthetic.txt", syntheticOptions())
	var table, js, csvSum, csvJobs bytes.Buffer
	if err := r.WriteTable(&table, true); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteCSV(&csvSum, false); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteCSV(&csvJobs, true); err != nil {
		t.Fatal(err)
	}
	golden(t, "synthetic.golden.table", table.Bytes())
	golden(t, "synthetic.golden.json", js.Bytes())
	golden(t, "synthetic.golden.csv", csvSum.Bytes())
	golden(t, "synthetic.golden.jobs.csv", csvJobs.Bytes())
}

// TestJSONKeys pins the documented top-level, summary and job keys.
func TestJSONKeys(t *testing.T) {
	r := load(t, "synthetic.txt", syntheticOptions())
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	var overall, job, run, jerr map[string]any
	var jobs, errs []json.RawMessage
	_ = json.Unmarshal(top["overall"], &overall)
	_ = json.Unmarshal(top["jobs"], &jobs)
	_ = json.Unmarshal(jobs[0], &job)
	_ = json.Unmarshal(top["errors"], &errs)
	_ = json.Unmarshal(errs[0], &jerr)
	runs, _ := json.Marshal(job["runs"].([]any)[0])
	_ = json.Unmarshal(runs, &run)
	for name, tc := range map[string]struct {
		m    any
		want []string
	}{
		"top": {top, []string{"errors", "groups", "jobs", "notes", "overall", "restart_overhead_s", "since", "store", "until"}},
		"summary": {overall, []string{"avg_jct_s", "avg_queue_s", "below_request", "billing_hours", "finished", "gpu_hours", "gpu_tres_missing",
			"guaranteed", "interruption_lost_gpu_hours", "interruption_lost_s", "interruptions", "interruptions_node_fail",
			"interruptions_other", "interruptions_preempted", "jobs", "key", "p99_jct_s",
			"reconfig_lost_gpu_hours", "reconfig_lost_s", "reconfigurations", "requeues", "resizes", "slo_unchecked",
			"slo_violations", "timed_out", "useful_gpu_hours"}},
		"job": {job, []string{"account", "below_request", "billing_hours", "class", "end", "finished", "first_start", "gpu_hours",
			"gpu_tres_missing", "interruption_lost_gpu_hours", "interruption_lost_s", "interruption_measured", "interruptions",
			"interruptions_node_fail", "interruptions_other", "interruptions_preempted",
			"jct_s", "job_id", "model_type", "name", "partition", "plans", "qos", "queue_s", "queued_from",
			"reconfig_lost_gpu_hours", "reconfig_lost_s", "reconfig_measured", "reconfigurations", "request", "requeues", "resizes", "runs",
			"slo_detail", "slo_violated", "state", "store_plans", "submit", "tasks", "tenant", "useful_gpu_hours", "user"}},
		"run":   {run, []string{"billing", "cpus", "elapsed_s", "end", "gpu_source", "gpus", "nodes", "plan", "start", "state"}},
		"error": {jerr, []string{"error", "field", "job_id", "value"}},
	} {
		var got []string
		switch m := tc.m.(type) {
		case map[string]json.RawMessage:
			got = sortedKeys(m)
		case map[string]any:
			got = sortedKeys(m)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s keys (-want +got):\n%s", name, diff)
		}
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}

func TestPlot(t *testing.T) {
	r := load(t, "synthetic.txt", syntheticOptions())
	for _, format := range []string{"png", "svg"} {
		dir := t.TempDir()
		files, err := r.Plot(dir, PlotOptions{Format: format, CapacityGPUs: 32, Now: time.Date(2026, 11, 2, 14, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"jct-cdf." + format, "gpu-alloc." + format, "plans." + format}
		var got []string
		for _, f := range files {
			got = append(got, filepath.Base(f))
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			magic := map[string]string{"png": "\x89PNG", "svg": "<?xml"}[format]
			if !bytes.HasPrefix(b, []byte(magic)) {
				t.Errorf("%s does not start with %q", f, magic)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("files (-want +got):\n%s", diff)
		}
	}
	// The 22.05 capture has no times: every chart is skipped with a reason.
	g := load(t, "sacct-22.05.txt", Options{})
	files, err := g.Plot(t.TempDir(), PlotOptions{Format: "png"})
	if len(files) != 0 || !errors.Is(err, ErrNoData) {
		t.Errorf("plot without times: files %v, error %v; want none and ErrNoData", files, err)
	}
	// Without AllocTRES the GPUs are unknown: gpu-alloc is skipped, saying
	// why, rather than drawn at 0.
	text, err := os.ReadFile(filepath.Join("testdata", "synthetic.txt"))
	if err != nil {
		t.Fatal(err)
	}
	nt := build(t, dropColumn(t, string(text), "AllocTRES"), syntheticOptions())
	files, err = nt.Plot(t.TempDir(), PlotOptions{Format: "svg", Now: time.Date(2026, 11, 2, 14, 0, 0, 0, time.UTC)})
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if diff := cmp.Diff([]string{"jct-cdf.svg", "plans.svg"}, names); diff != "" || !errors.Is(err, ErrNoData) ||
		!strings.Contains(err.Error(), "gpu-alloc: no data to plot: no AllocTRES column") {
		t.Errorf("plot without AllocTRES: files (-want +got):\n%s\nerror %v; want gpu-alloc skipped naming AllocTRES", diff, err)
	}
	if _, err := r.Plot(t.TempDir(), PlotOptions{Format: "gif"}); err == nil {
		t.Error("gif accepted")
	}
}

// --by user groups jobs by sacct's User; a job without one is (none).
func TestGroupByUser(t *testing.T) {
	r := load(t, "synthetic.txt", Options{By: []string{"user"}})
	if len(r.Groups) != 1 || r.Groups[0].By != "user" {
		t.Fatalf("groups = %+v, want one by user", r.Groups)
	}
	got := map[string]int{}
	for _, row := range r.Groups[0].Rows {
		got[row.Key] = row.Jobs
	}
	want := map[string]int{}
	for _, j := range r.Jobs {
		u := j.User
		if u == "" {
			u = NoModel
		}
		want[u]++
	}
	if want["alice"] == 0 || want["bob"] == 0 || want["carol"] == 0 {
		t.Fatalf("synthetic.txt's jobs have users %v, want alice, bob and carol", want)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("jobs per user (-want +got):\n%s", d)
	}
}

// dropColumn removes column col from sacct text.
func dropColumn(t *testing.T, text, col string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	i := slices.Index(strings.Split(lines[0], "|"), col)
	if i < 0 {
		t.Fatalf("no column %s in %q", col, lines[0])
	}
	var b strings.Builder
	for _, l := range lines {
		f := strings.Split(l, "|")
		b.WriteString(strings.Join(slices.Delete(f, i, i+1), "|") + "\n")
	}
	return b.String()
}

// Without AllocTRES, GPU-hours, useful and lost GPU-hours and billing-hours
// are unknown, per job and in every summary: "-" in the table, empty in
// CSV, null in JSON; never 0.
func TestMissingAllocTRES(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("testdata", "synthetic.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Jobs 101 (requeued), 102 (shrunk) and 103.
	r := build(t, dropColumn(t, string(text), "AllocTRES"), Options{
		Since: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC),
		RestartOverhead: DefaultRestartOverhead, By: []string{"model"},
	})
	const table = `rubick report: 3 jobs, submitted 2026-11-02T00:00:00Z .. 2026-11-03T09:00:00Z, restart overhead 4m20s, store -
note: no AllocTRES column: GPU-hours and billing-hours are unknown

by model  jobs  done  avg JCT  p99 JCT  avg queue  GPU-h  useful GPU-h  billing-h  reconf (rq+rs)  reconf cost       intr. (nf+pr+other)  intr. cost    guar.  below req  SLO viol.
bert      1     1     1h10m    1h10m    10m00s     -      -             -          0 (0+0)         0s / - GPU-h      0 (0+0+0)            0s / - GPU-h  1      0          -
gpt2      2     1     3h10m    3h10m    2m45s      -      -             -          2 (1+1)         13m40s / - GPU-h  0 (0+0+0)            0s / - GPU-h  1      0          -
all       3     2     2h10m    3h10m    5m10s      -      -             -          2 (1+1)         13m40s / - GPU-h  0 (0+0+0)            0s / - GPU-h  2      0          -

plan history
  job 101 (gpt2): dp4.tp1.pp1.mb2.a8.z0 -> dp8.tp1.pp1.mb1.a8.z0
  job 102 (gpt2): dp16.tp1.pp1.mb1.a4.z0 -> dp8.tp1.pp1.mb1.a8.z0
  job 103 (bert): dp2.tp1.pp1.mb8.a8.z0

job  name   model  class        account  state      runs  reconf  intr.  JCT    queue   GPU-h  useful GPU-h  billing-h  plans
101  train  gpt2   guaranteed   physics  COMPLETED  2     1       0      3h10m  5m00s   -      -             -          dp4.tp1.pp1.mb2.a8.z0 -> dp8.tp1.pp1.mb1.a8.z0
102  be     gpt2   best-effort  bio      RUNNING    2     1       0      -      30s     -      -             -          dp16.tp1.pp1.mb1.a4.z0 -> dp8.tp1.pp1.mb1.a8.z0
103  ft     bert   guaranteed   physics  COMPLETED  1     0       0      1h10m  10m00s  -      -             -          dp2.tp1.pp1.mb8.a8.z0
`
	const csvSummary = `by,key,jobs,finished,avg_jct_s,p99_jct_s,avg_queue_s,gpu_hours,useful_gpu_hours,reconfigurations,requeues,resizes,reconfig_lost_s,reconfig_lost_gpu_hours,guaranteed,below_request,slo_violations,slo_unchecked,gpu_tres_missing,timed_out,billing_hours,interruptions,interruption_lost_s,interruption_lost_gpu_hours,interruptions_node_fail,interruptions_preempted,interruptions_other
all,all,3,2,7800,11400,310,,,2,1,1,820,,2,0,,0,0,0,,0,0,,0,0,0
model,bert,1,1,4200,4200,600,,,0,0,0,0,,1,0,,0,0,0,,0,0,,0,0,0
model,gpt2,2,1,11400,11400,165,,,2,1,1,820,,1,0,,0,0,0,,0,0,,0,0,0
`
	const csvJobs = `job_id,name,account,qos,partition,model_type,class,tenant,state,finished,submit,first_start,end,jct_s,queue_s,runs,requeues,resizes,reconfigurations,reconfig_lost_s,reconfig_lost_gpu_hours,gpu_hours,useful_gpu_hours,gpu_tres_missing,below_request,slo_violated,plans,billing_hours,user,interruptions,interruption_lost_s,interruption_lost_gpu_hours,interruptions_node_fail,interruptions_preempted,interruptions_other
101,train,physics,normal,gpu,gpt2,guaranteed,physics,COMPLETED,true,2026-11-02T10:00:00Z,2026-11-02T10:05:00Z,2026-11-02T13:10:00Z,11400,300,2,1,0,1,560,,,,false,false,,dp4.tp1.pp1.mb2.a8.z0 dp8.tp1.pp1.mb1.a8.z0,,alice,0,0,,0,0,0
102,be,bio,normal,gpu,gpt2,best-effort,bio,RUNNING,false,2026-11-02T12:00:00Z,2026-11-02T12:00:30Z,,,30,2,0,1,1,260,,,,false,false,,dp16.tp1.pp1.mb1.a4.z0 dp8.tp1.pp1.mb1.a8.z0,,bob,0,0,,0,0,0
103,ft,physics,normal,gpu,bert,guaranteed,physics,COMPLETED,true,2026-11-03T08:00:00Z,2026-11-03T08:10:00Z,2026-11-03T09:10:00Z,4200,600,1,0,0,0,0,,,,false,false,,dp2.tp1.pp1.mb8.a8.z0,,alice,0,0,,0,0,0
`
	checkWritten(t, r, table, csvSummary, csvJobs)

	t.Run("json", func(t *testing.T) {
		var b bytes.Buffer
		if err := r.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		type hours struct {
			Key                  string   `json:"key"`
			ID                   string   `json:"job_id"`
			GPUHours             *float64 `json:"gpu_hours"`
			UsefulGPUHours       *float64 `json:"useful_gpu_hours"`
			BillingHours         *float64 `json:"billing_hours"`
			ReconfigLostGPUHours *float64 `json:"reconfig_lost_gpu_hours"`
		}
		type group struct {
			Rows []hours `json:"rows"`
		}
		type report struct {
			Overall hours    `json:"overall"`
			Groups  []group  `json:"groups"`
			Jobs    []hours  `json:"jobs"`
			Notes   []string `json:"notes"`
		}
		// The five keys must be present and null, not absent.
		for _, key := range []string{"gpu_hours", "useful_gpu_hours", "billing_hours", "reconfig_lost_gpu_hours", "interruption_lost_gpu_hours"} {
			if n := strings.Count(b.String(), `"`+key+`": null`); n != 1+2+3 {
				t.Errorf("%q is null %d times, want 6 (overall, 2 models, 3 jobs):\n%s", key, n, b.String())
			}
		}
		var got report
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		want := report{
			Overall: hours{Key: "all"},
			Groups:  []group{{Rows: []hours{{Key: "bert"}, {Key: "gpt2"}}}},
			Jobs:    []hours{{ID: "101"}, {ID: "102"}, {ID: "103"}},
			Notes:   []string{"no AllocTRES column: GPU-hours and billing-hours are unknown"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

// An End or Start before the job's Submit is a malformed row: the job is
// reported with the problem, and its negative JCT or queueing delay is
// left out of the averages.
func TestTimeBeforeSubmit(t *testing.T) {
	const header = "JobID|State|Submit|Start|End\n"
	// Job 1 is well formed: JCT 2 h, queue 10 min.
	const good = "1|COMPLETED|2026-11-02T00:00:00|2026-11-02T00:10:00|2026-11-02T02:00:00\n"
	tests := map[string]struct {
		rows               string
		wantErrs           []string
		wantJCT, wantQueue *float64
		avgJCTS, avgQueueS *float64
	}{
		"end before submit": {
			rows:      "7|COMPLETED|2026-11-02T00:00:00|2026-11-02T00:05:00|2026-11-01T00:00:00\n",
			wantErrs:  []string{`job 7: End="2026-11-01T00:00:00": line 3: before Submit="2026-11-02T00:00:00" (line 3): the JCT would be -24h0m0s`},
			wantQueue: f(300), avgJCTS: f(7200), avgQueueS: f((600 + 300) / 2.0),
		},
		"start before submit": {
			rows:     "7|RUNNING|2026-11-02T00:00:00|2026-11-01T23:00:00|Unknown\n",
			wantErrs: []string{`job 7: Start="2026-11-01T23:00:00": line 3: before Submit="2026-11-02T00:00:00" (line 3): the queueing delay would be -1h0m0s`},
			avgJCTS:  f(7200), avgQueueS: f(600),
		},
		// Requeued: the first run's row holds the earliest Submit and
		// Start, the last row the End.
		"both, over two rows": {
			rows: "7|REQUEUED|2026-11-02T00:00:00|2026-11-01T22:00:00|2026-11-01T22:30:00\n" +
				"7|COMPLETED|2026-11-02T01:00:00|2026-11-02T01:00:00|2026-11-01T23:00:00\n",
			wantErrs: []string{
				`job 7: End="2026-11-01T23:00:00": line 4: before Submit="2026-11-02T00:00:00" (line 3): the JCT would be -1h0m0s`,
				`job 7: Start="2026-11-01T22:00:00": line 3: before Submit="2026-11-02T00:00:00" (line 3): the queueing delay would be -2h0m0s`,
			},
			avgJCTS: f(7200), avgQueueS: f(600),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := build(t, header+good+tc.rows, Options{})
			var errs []string
			for _, e := range r.Errors {
				errs = append(errs, e.Error())
			}
			if diff := cmp.Diff(tc.wantErrs, errs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if err := r.Err(); !errors.Is(err, ErrJob) {
				t.Errorf("Err() = %v, want ErrJob", err)
			}
			if len(r.Jobs) != 2 || r.Jobs[1].ID != "7" {
				t.Fatalf("jobs = %+v, want 1 and 7", r.Jobs)
			}
			j := r.Jobs[1]
			type times struct{ JCT, Queue, AvgJCT, AvgQueue *float64 }
			want := times{tc.wantJCT, tc.wantQueue, tc.avgJCTS, tc.avgQueueS}
			got := times{j.JCTS, j.QueueS, r.Overall.AvgJCTS, r.Overall.AvgQueueS}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("job 7 and the averages (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCancelledWhilePending: Slurm gives a job cancelled while it waited
// (every rubick job waits held) its cancel time as Start, with Elapsed 0 and
// an empty AllocTRES (the 22.05 lab's job 4, slurmdbd's time.start equal
// to time.end). It never started: it has no queueing delay, and the
// average queue is over the jobs that did start. A job cancelled while it
// waited to start again after a requeue was requeued, but its wait until
// the cancel is no reconfiguration cost: no restart followed.
func TestCancelledWhilePending(t *testing.T) {
	const text = "JobID|State|Submit|Start|End|Elapsed|AllocTRES\n" +
		"1|COMPLETED|2026-11-02T00:00:00|2026-11-02T00:10:00|2026-11-02T02:00:00|01:50:00|cpu=1,gres/gpu=1,node=1\n" +
		"2|CANCELLED by 1000|2026-11-02T00:00:00|2026-11-02T05:00:00|2026-11-02T05:00:00|00:00:00|\n" +
		// Requeued, then cancelled while it waited to start again: it
		// started once, 20 minutes after its submission.
		"3|REQUEUED|2026-11-02T00:00:00|2026-11-02T00:20:00|2026-11-02T01:00:00|00:40:00|cpu=1,gres/gpu=1,node=1\n" +
		"3|CANCELLED by 1000|2026-11-02T01:00:00|2026-11-02T03:00:00|2026-11-02T03:00:00|00:00:00|\n"
	r := build(t, text, Options{RestartOverhead: DefaultRestartOverhead})
	type times struct {
		ID           string
		FirstStart   *time.Time
		JCTS, QueueS *float64
		Requeues     int
		LostS        float64
		LostGPUh     *float64
	}
	at := func(h, m int) *time.Time { t := time.Date(2026, 11, 2, h, m, 0, 0, time.UTC); return &t }
	want := []times{
		{"1", at(0, 10), f(7200), f(600), 0, 0, f(0)},
		{"2", nil, f(5 * 3600), nil, 0, 0, f(0)},
		{"3", at(0, 20), f(3 * 3600), f(1200), 1, 0, f(0)},
	}
	var got []times
	for _, j := range r.Jobs {
		got = append(got, times{j.ID, j.FirstStart, j.JCTS, j.QueueS, j.Requeues, j.ReconfigLostS, j.ReconfigLostGPUHours})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(f((600+1200)/2.0), r.Overall.AvgQueueS); diff != "" {
		t.Errorf("avg queue (-want +got):\n%s", diff)
	}
	if r.Overall.Requeues != 1 || r.Overall.ReconfigLostS != 0 {
		t.Errorf("overall: %d requeues costing %v s, want 1 costing 0 s", r.Overall.Requeues, r.Overall.ReconfigLostS)
	}
}

// Slurm moves a requeued job's Submit to the requeue, and rubickd keeps the
// first one in the tag's sub=. When sacct leaves out the run before the
// requeue (it ended before --starttime), the job counts from sub=: its JCT
// is from its first submission, the window selects it by that, and its
// first start is unknown. With every run there, sub= changes nothing.
func TestSubmitFromTag(t *testing.T) {
	const header = "JobID|State|Submit|Start|End|AdminComment\n"
	first := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	tag := func(at time.Time) string {
		return "rubick:v1 model=gpt2 class=best-effort plan=dp4.tp1.pp1.mb2.a8.z0 gen=2 sub=" + strconv.FormatInt(at.Unix(), 10)
	}
	// Submitted 00:00, ran 00:10-01:00, requeued, ran 01:05-03:00.
	const firstRun = "7|REQUEUED|2026-11-02T00:00:00|2026-11-02T00:10:00|2026-11-02T01:00:00|"
	const lastRun = "7|COMPLETED|2026-11-02T01:00:00|2026-11-02T01:05:00|2026-11-02T03:00:00|"
	at := func(h, m int) *time.Time {
		t := first.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
		return &t
	}
	type job struct {
		Submit, FirstStart *time.Time
		JCTS, QueueS       *float64
	}
	tests := map[string]struct {
		rows  string
		since time.Time
		want  []job
		errs  []string
	}{
		"first run left out": {rows: lastRun + tag(first) + "\n",
			want: []job{{Submit: at(0, 0), JCTS: f(3 * 3600)}}},
		"first run left out, before the window": {rows: lastRun + tag(first) + "\n", since: *at(0, 30)},
		"every run": {rows: firstRun + tag(first) + "\n" + lastRun + tag(first) + "\n",
			want: []job{{Submit: at(0, 0), FirstStart: at(0, 10), JCTS: f(3 * 3600), QueueS: f(600)}}},
		// A requeue by someone else before rubickd first acted on the
		// job: the tag has the requeue's Submit, the first row the job's.
		"tag later than the rows": {rows: firstRun + "\n" + lastRun + tag(*at(1, 0)) + "\n",
			want: []job{{Submit: at(0, 0), FirstStart: at(0, 10), JCTS: f(3 * 3600), QueueS: f(600)}}},
		"no sub=": {rows: lastRun + "rubick:v1 model=gpt2\n",
			want: []job{{Submit: at(1, 0), FirstStart: at(1, 5), JCTS: f(2 * 3600), QueueS: f(300)}}},
		"malformed sub=": {rows: lastRun + "rubick:v1 model=gpt2 sub=yesterday\n",
			want: []job{{Submit: at(1, 0), FirstStart: at(1, 5), JCTS: f(2 * 3600), QueueS: f(300)}},
			errs: []string{`job 7: AdminComment sub="yesterday": want seconds since 1970, > 0`}},
		// The row's own Submit still bounds its End.
		"end before submit": {rows: "7|COMPLETED|2026-11-02T03:00:00|2026-11-02T03:05:00|2026-11-02T02:00:00|" + tag(*at(1, 0)) + "\n",
			want: []job{{Submit: at(1, 0)}},
			errs: []string{`job 7: End="2026-11-02T02:00:00": line 2: before Submit="2026-11-02T03:00:00" (line 2): the JCT would be -1h0m0s`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := build(t, header+tc.rows, Options{Since: tc.since})
			var got []job
			for _, j := range r.Jobs {
				got = append(got, job{j.Submit, j.FirstStart, j.JCTS, j.QueueS})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
			var errs []string
			for _, e := range r.Errors {
				errs = append(errs, e.Error())
			}
			if diff := cmp.Diff(tc.errs, errs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// Slurm reuses job ids (after its state is reset, or past MaxJobId) and
// sacct -D lists the runs of every job of an id under it: a run submitted
// after the one before it ended for good, or whose tag's sub= differs,
// is another job's. Job 143 of the lab was a llama7 job in the morning
// and a gpt2 job in the afternoon.
func TestReusedJobID(t *testing.T) {
	const header = "JobID|State|Submit|Start|End|AllocTRES|AdminComment\n"
	day := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	tag := func(model string, h int) string {
		return "rubick:v1 model=" + model + " class=best-effort sub=" + strconv.FormatInt(day.Add(time.Duration(h)*time.Hour).Unix(), 10)
	}
	const tres = "cpu=1,gres/gpu=4,node=1"
	// The morning's job: submitted 08:00, ran 08:10-09:00, requeued, ran
	// 09:05-11:00.
	morning := "143|REQUEUED|2026-11-02T08:00:00|2026-11-02T08:10:00|2026-11-02T09:00:00|" + tres + "|" + tag("llama7", 8) + "\n" +
		"143|COMPLETED|2026-11-02T09:00:00|2026-11-02T09:05:00|2026-11-02T11:00:00|" + tres + "|" + tag("llama7", 8) + "\n"
	type job struct {
		ID, ModelType, State string
		JCTS, QueueS         *float64
		Runs, Requeues       int
		GPUh                 *float64
	}
	first := job{"143", "llama7", "COMPLETED", f(3 * 3600), f(600), 2, 1, f(4 * (50.0/60 + 115.0/60))}
	tests := map[string]struct {
		rows  string
		since time.Time
		want  []job
		note  bool
		errs  []string
	}{
		"completed, then a new job running": {
			rows: morning + "143|RUNNING|2026-11-02T14:00:00|2026-11-02T14:30:00|Unknown|" + tres + "|\n",
			want: []job{first, {"143", NoModel, "RUNNING", nil, f(1800), 1, 0, f(0)}},
			note: true,
		},
		"completed, then a new job pending": {
			rows: morning + "143|PENDING|2026-11-02T14:00:00|Unknown|Unknown||\n",
			want: []job{first, {"143", NoModel, "PENDING", nil, nil, 1, 0, f(0)}},
			note: true,
		},
		"completed, then a new job that ended, its tag without sub=": {
			rows: morning + "143|FAILED|2026-11-02T14:00:00|2026-11-02T14:30:00|2026-11-02T15:00:00|" + tres + "|rubick:v1 model=gpt2\n",
			want: []job{first, {"143", "gpt2", "FAILED", f(3600), f(1800), 1, 0, f(2)}},
			note: true,
		},
		// The reset lost the end of the earlier job's last run.
		"tags of different sub=, no ended run between": {
			rows: strings.Replace(morning, "COMPLETED", "RUNNING", 1) +
				"143|COMPLETED|2026-11-02T14:00:00|2026-11-02T14:30:00|2026-11-02T15:00:00|" + tres + "|" + tag("gpt2", 14) + "\n",
			want: []job{{"143", "llama7", "RUNNING", nil, f(600), 2, 1, first.GPUh},
				{"143", "gpt2", "COMPLETED", f(3600), f(1800), 1, 0, f(2)}},
			note: true,
		},
		// Each job's problem names its submission.
		"both tags malformed": {
			rows: strings.ReplaceAll(morning, tag("llama7", 8), "rubick:v1 model=llama7 gen=x") +
				"143|FAILED|2026-11-02T14:00:00|2026-11-02T14:30:00|2026-11-02T15:00:00|" + tres + "|rubick:v1 model=gpt2 gen=y\n",
			want: []job{{"143", NoModel, "COMPLETED", f(3 * 3600), f(600), 2, 1, first.GPUh}, {"143", NoModel, "FAILED", f(3600), f(1800), 1, 0, f(2)}},
			note: true,
			errs: []string{
				`job 143 (submitted 2026-11-02T08:00:00Z): AdminComment="rubick:v1 model=llama7 gen=x": malformed rubick tag: gen="x" is not a non-negative integer`,
				`job 143 (submitted 2026-11-02T14:00:00Z): AdminComment="rubick:v1 model=gpt2 gen=y": malformed rubick tag: gen="y" is not a non-negative integer`,
			},
		},
		"one job, its tag malformed": {
			rows: strings.ReplaceAll(morning, tag("llama7", 8), "rubick:v1 model=llama7 gen=x"),
			want: []job{{"143", NoModel, "COMPLETED", f(3 * 3600), f(600), 2, 1, first.GPUh}},
			errs: []string{`job 143: AdminComment="rubick:v1 model=llama7 gen=x": malformed rubick tag: gen="x" is not a non-negative integer`},
		},
		"the earlier job before the window": {
			rows:  morning + "143|RUNNING|2026-11-02T14:00:00|2026-11-02T14:30:00|Unknown|" + tres + "|\n",
			since: day.Add(12 * time.Hour),
			want:  []job{{"143", NoModel, "RUNNING", nil, f(1800), 1, 0, f(0)}},
		},
		"requeued: one job": {
			rows: morning,
			want: []job{first},
		},
		// Slurm requeues a job whose node failed, and its next run's
		// Submit is the requeue's. Untagged: the state alone tells. The
		// node failure is an interruption, no requeue (TestInterruptions).
		"running again after a node failure: one job": {
			rows: strings.Replace(strings.Replace(strings.ReplaceAll(morning, tag("llama7", 8), ""), "REQUEUED", "NODE_FAIL", 1),
				"COMPLETED|2026-11-02T09:00:00", "COMPLETED|2026-11-02T09:01:00", 1),
			want: []job{{"143", NoModel, "COMPLETED", f(3 * 3600), f(600), 2, 0, first.GPUh}},
		},
		// scontrol requeue also requeues a job that ended; rubickd's tag
		// keeps its first submission.
		"requeued once it had ended, the same sub=: one job": {
			rows: strings.Replace(strings.Replace(morning, "REQUEUED", "COMPLETED", 1), "COMPLETED|2026-11-02T09:00:00", "COMPLETED|2026-11-02T09:01:00", 1),
			want: []job{first},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := build(t, header+tc.rows, Options{Since: tc.since, RestartOverhead: time.Minute})
			var got []job
			for _, j := range r.Jobs {
				got = append(got, job{j.ID, j.ModelType, j.State, j.JCTS, j.QueueS, len(j.Runs), j.Requeues, j.GPUHours})
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
			var notes []string
			if tc.note {
				notes = []string{"1 job id(s) reused by Slurm: their runs are reported as separate jobs"}
			}
			reused := slices.DeleteFunc(slices.Clone(r.Notes), func(n string) bool { return !strings.Contains(n, "reused") })
			if diff := cmp.Diff(notes, reused, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(len(tc.want), r.Overall.Jobs); diff != "" {
				t.Errorf("overall jobs (-want +got):\n%s", diff)
			}
			var errs []string
			for _, e := range r.Errors {
				errs = append(errs, e.Error())
			}
			if diff := cmp.Diff(tc.errs, errs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// A REQUEUED run is rubick's reconfiguration when rubickd started the next
// run (its tag's gen= one more), and an interruption when Slurm started
// it again by itself after someone's scontrol requeue (the same gen=, as
// on the 22.05 lab). Where a tag is missing (a next run still running,
// whose tag sacct does not show yet) or has no gen=, it stays rubick's.
func TestRequeueOwnerFromTags(t *testing.T) {
	const header = "JobID|State|Submit|Start|End|AllocTRES|AdminComment\n"
	row := func(state, from, to, tag string) string {
		end := "2026-11-02T" + to + ":00"
		if to == "" {
			end = "Unknown"
		}
		return fmt.Sprintf("9|%s|2026-11-02T00:00:00|2026-11-02T%s:00|%s|cpu=8,gres/gpu=8,node=1|%s\n", state, from, end, tag)
	}
	gen := func(g int) string { return fmt.Sprintf("rubick:v1 model=bert plan=dp8.tp1.pp1.mb4.a1.z2 gen=%d", g) }
	tests := map[string]struct {
		rows                     string
		reconfigs, interruptions int
	}{
		"started again by rubickd":                  {row("REQUEUED", "00:10", "01:00", gen(1)) + row("COMPLETED", "01:05", "02:00", gen(2)), 1, 0},
		"started again by Slurm":                    {row("REQUEUED", "00:10", "01:00", gen(1)) + row("COMPLETED", "01:05", "02:00", gen(1)), 0, 1},
		"next run still running":                    {row("REQUEUED", "00:10", "01:00", gen(1)) + row("RUNNING", "01:05", "", ""), 1, 0},
		"no gen= on the run":                        {row("REQUEUED", "00:10", "01:00", "rubick:v1 model=bert") + row("COMPLETED", "01:05", "02:00", "rubick:v1 model=bert"), 1, 0},
		"requeued by hand once it had completed":    {row("COMPLETED", "00:10", "01:00", gen(1)) + row("COMPLETED", "01:05", "02:00", gen(1)), 0, 1},
		"by rubickd, then by hand, then by rubickd": {row("REQUEUED", "00:10", "01:00", gen(1)) + row("REQUEUED", "01:05", "02:00", gen(2)) + row("REQUEUED", "02:05", "03:00", gen(2)) + row("COMPLETED", "03:05", "04:00", gen(3)), 2, 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := build(t, header+tc.rows, Options{RestartOverhead: DefaultRestartOverhead})
			if len(r.Jobs) != 1 {
				t.Fatalf("%d jobs, want 1", len(r.Jobs))
			}
			j := r.Jobs[0]
			if j.Reconfigurations != tc.reconfigs || j.Requeues != tc.reconfigs || j.Interruptions != tc.interruptions {
				t.Errorf("%d reconfigurations (%d requeues), %d interruptions; want %d, %d", j.Reconfigurations, j.Requeues, j.Interruptions, tc.reconfigs, tc.interruptions)
			}
			if r.Overall.Interruptions != tc.interruptions {
				t.Errorf("overall: %d interruptions, want %d", r.Overall.Interruptions, tc.interruptions)
			}
		})
	}
}

// Slurm requeues a job whose node failed (NODE_FAIL, with JobRequeue=1)
// or that it preempted (PREEMPTED, PreemptMode=REQUEUE); rubickd's own
// restarts and preemptions end a run REQUEUED. A run ended by Slurm and
// followed by another is an interruption, no reconfiguration of rubick's:
// counted and priced on its own, and its lost GPU-hours are still no
// useful ones. A NODE_FAIL last run ended the job. A run requeued by hand
// (its next run's tag has the same gen=) is an interruption too. Each is
// counted by cause.
func TestInterruptions(t *testing.T) {
	const header = "JobID|State|Submit|Start|End|AllocTRES|AdminComment\n"
	// row is a run of job id on the 2nd of November, from and to hh:mm.
	row := func(id, state, from, to string, gpus int, model string) string {
		return fmt.Sprintf("%s|%s|2026-11-02T00:00:00|2026-11-02T%s:00|2026-11-02T%s:00|cpu=8,gres/gpu=%d,node=1|rubick:v1 model=%s\n",
			id, state, from, to, gpus, model)
	}
	// Two runs: 00:10-01:00 on 4 GPUs, 01:05-03:00 on 8 after a gap of
	// 5 minutes. The restart costs the gap and the overhead, 260 s,
	// which holds the next run's 8 GPUs.
	two := func(id, state, model string) string {
		return row(id, state, "00:10", "01:00", 4, model) + row(id, "COMPLETED", "01:05", "03:00", 8, model)
	}
	lost := 260.0 * 8 / 3600
	twoGPUh := (50*4 + 115*8) / 60.0
	// Requeued, then its node failed: 00:10-01:00 on 4 GPUs, 01:05-02:00
	// and 02:10-03:00 on 8.
	mix := row("4", "REQUEUED", "00:10", "01:00", 4, "bert") + row("4", "NODE_FAIL", "01:05", "02:00", 8, "bert") +
		row("4", "COMPLETED", "02:10", "03:00", 8, "bert")
	mixGPUh := (50*4 + 55*8 + 50*8) / 60.0
	type price struct {
		State                                  string
		Finished                               bool
		Requeues, Resizes, Reconfigs           int
		ReconfigLostS                          float64
		ReconfigLostGPUh                       *float64
		Interruptions                          int
		Causes                                 [3]int // node failure, Slurm's preemption, by hand
		InterruptionLostS                      float64
		InterruptionLostGPUh, GPUh, UsefulGPUh *float64
	}
	tests := map[string]struct {
		rows string
		want price
	}{
		"node failure": {rows: two("1", "NODE_FAIL", "gpt2"), want: price{State: "COMPLETED", Finished: true,
			ReconfigLostGPUh: f(0), Interruptions: 1, Causes: [3]int{1, 0, 0}, InterruptionLostS: 300 + 260, InterruptionLostGPUh: f(lost),
			GPUh: f(twoGPUh), UsefulGPUh: f(twoGPUh - lost)}},
		"preempted by Slurm": {rows: two("2", "PREEMPTED", "gpt2"), want: price{State: "COMPLETED", Finished: true,
			ReconfigLostGPUh: f(0), Interruptions: 1, Causes: [3]int{0, 1, 0}, InterruptionLostS: 300 + 260, InterruptionLostGPUh: f(lost),
			GPUh: f(twoGPUh), UsefulGPUh: f(twoGPUh - lost)}},
		"requeued by hand": {rows: two("6", "REQUEUED", "vit gen=1"), want: price{State: "COMPLETED", Finished: true,
			ReconfigLostGPUh: f(0), Interruptions: 1, Causes: [3]int{0, 0, 1}, InterruptionLostS: 300 + 260, InterruptionLostGPUh: f(lost),
			GPUh: f(twoGPUh), UsefulGPUh: f(twoGPUh - lost)}},
		"requeued by rubickd": {rows: two("3", "REQUEUED", "bert"), want: price{State: "COMPLETED", Finished: true,
			Requeues: 1, Reconfigs: 1, ReconfigLostS: 300 + 260, ReconfigLostGPUh: f(lost), InterruptionLostGPUh: f(0),
			GPUh: f(twoGPUh), UsefulGPUh: f(twoGPUh - lost)}},
		"requeued, then its node failed": {rows: mix, want: price{State: "COMPLETED", Finished: true,
			Requeues: 1, Reconfigs: 1, ReconfigLostS: 300 + 260, ReconfigLostGPUh: f(lost),
			Interruptions: 1, Causes: [3]int{1, 0, 0}, InterruptionLostS: 600 + 260, InterruptionLostGPUh: f(lost),
			GPUh: f(mixGPUh), UsefulGPUh: f(mixGPUh - 2*lost)}},
		// JobRequeue=0: the node failure ended the job.
		"ended by a node failure": {rows: row("5", "NODE_FAIL", "00:10", "01:00", 4, "llama7"), want: price{State: "NODE_FAIL",
			Finished: true, ReconfigLostGPUh: f(0), InterruptionLostGPUh: f(0), GPUh: f(200 / 60.0), UsefulGPUh: f(200 / 60.0)}},
	}
	approx := cmpopts.EquateApprox(0, 1e-9)
	var all strings.Builder
	for _, name := range slices.Sorted(maps.Keys(tests)) {
		tc := tests[name]
		all.WriteString(tc.rows)
		t.Run(name, func(t *testing.T) {
			r := build(t, header+tc.rows, Options{RestartOverhead: DefaultRestartOverhead})
			if len(r.Jobs) != 1 {
				t.Fatalf("%d jobs, want 1", len(r.Jobs))
			}
			j := r.Jobs[0]
			got := price{j.State, j.Finished, j.Requeues, j.Resizes, j.Reconfigurations, j.ReconfigLostS, j.ReconfigLostGPUHours,
				j.Interruptions, [3]int{j.IntrNodeFail, j.IntrPreempted, j.IntrOther}, j.InterruptionLostS, j.InterruptionLostGPUHours,
				j.GPUHours, j.UsefulGPUHours}
			if d := cmp.Diff(tc.want, got, approx); d != "" {
				t.Errorf("job (-want +got):\n%s", d)
			}
		})
	}

	// Every summary sums them.
	t.Run("summaries", func(t *testing.T) {
		r := build(t, header+all.String(), Options{RestartOverhead: DefaultRestartOverhead, By: []string{"model"}})
		type sum struct {
			Key                              string
			Reconfigs, Requeues              int
			ReconfigLostS                    float64
			ReconfigLostGPUh                 *float64
			Interruptions                    int
			Causes                           [3]int
			InterruptionLostS                float64
			InterruptionLostGPUh, UsefulGPUh *float64
		}
		want := []sum{
			{"bert", 2, 2, 2 * 560, f(2 * lost), 1, [3]int{1, 0, 0}, 860, f(lost), f(twoGPUh + mixGPUh - 3*lost)},
			{"gpt2", 0, 0, 0, f(0), 2, [3]int{1, 1, 0}, 2 * 560, f(2 * lost), f(2*twoGPUh - 2*lost)},
			{"llama7", 0, 0, 0, f(0), 0, [3]int{}, 0, f(0), f(200 / 60.0)},
			{"vit", 0, 0, 0, f(0), 1, [3]int{0, 0, 1}, 560, f(lost), f(twoGPUh - lost)},
			{"all", 2, 2, 2 * 560, f(2 * lost), 4, [3]int{2, 1, 1}, 3*560 + 860, f(4 * lost), f(4*twoGPUh + mixGPUh + 200/60.0 - 6*lost)},
		}
		var got []sum
		for _, s := range append(slices.Clone(r.Groups[0].Rows), r.Overall) {
			got = append(got, sum{s.Key, s.Reconfigurations, s.Requeues, s.ReconfigLostS, s.ReconfigLostGPUHours,
				s.Interruptions, [3]int{s.IntrNodeFail, s.IntrPreempted, s.IntrOther}, s.InterruptionLostS, s.InterruptionLostGPUHours,
				s.UsefulGPUHours})
		}
		if d := cmp.Diff(want, got, approx); d != "" {
			t.Errorf("summaries (-want +got):\n%s", d)
		}

		// The table's intr. columns and the CSV's interruption columns.
		const table = `rubick report: 6 jobs, submitted - .. -, restart overhead 4m20s, store -
note: no Elapsed column: run lengths come from End - Start
note: no Account column: every job is account (none)

by model  jobs  done  avg JCT  p99 JCT  avg queue  GPU-h   useful GPU-h  billing-h  reconf (rq+rs)  reconf cost           intr. (nf+pr+other)  intr. cost            guar.  below req  SLO viol.
bert      2     2     3h00m    3h00m    10m00s     36.000  34.267        0.000      2 (2+0)         18m40s / 1.156 GPU-h  1 (1+0+0)            14m20s / 0.578 GPU-h  0      0          -
gpt2      2     2     3h00m    3h00m    10m00s     37.333  36.178        0.000      0 (0+0)         0s / 0.000 GPU-h      2 (1+1+0)            18m40s / 1.156 GPU-h  0      0          -
llama7    1     1     1h00m    1h00m    10m00s     3.333   3.333         0.000      0 (0+0)         0s / 0.000 GPU-h      0 (0+0+0)            0s / 0.000 GPU-h      0      0          -
vit       1     1     3h00m    3h00m    10m00s     18.667  18.089        0.000      0 (0+0)         0s / 0.000 GPU-h      1 (0+0+1)            9m20s / 0.578 GPU-h   0      0          -
all       6     6     2h40m    3h00m    10m00s     95.333  91.867        0.000      2 (2+0)         18m40s / 1.156 GPU-h  4 (2+1+1)            42m20s / 2.311 GPU-h  0      0          -

job  name  model   class  account  state      runs  reconf  intr.  JCT    queue   GPU-h   useful GPU-h  billing-h  plans
1    -     gpt2    -      -        COMPLETED  2     0       1      3h00m  10m00s  18.667  18.089        0.000      -
2    -     gpt2    -      -        COMPLETED  2     0       1      3h00m  10m00s  18.667  18.089        0.000      -
3    -     bert    -      -        COMPLETED  2     1       0      3h00m  10m00s  18.667  18.089        0.000      -
4    -     bert    -      -        COMPLETED  3     1       1      3h00m  10m00s  17.333  16.178        0.000      -
5    -     llama7  -      -        NODE_FAIL  1     0       0      1h00m  10m00s  3.333   3.333         0.000      -
6    -     vit     -      -        COMPLETED  2     0       1      3h00m  10m00s  18.667  18.089        0.000      -
`
		const csvSummary = `by,key,jobs,finished,avg_jct_s,p99_jct_s,avg_queue_s,gpu_hours,useful_gpu_hours,reconfigurations,requeues,resizes,reconfig_lost_s,reconfig_lost_gpu_hours,guaranteed,below_request,slo_violations,slo_unchecked,gpu_tres_missing,timed_out,billing_hours,interruptions,interruption_lost_s,interruption_lost_gpu_hours,interruptions_node_fail,interruptions_preempted,interruptions_other
all,all,6,6,9600,10800,600,95.333333,91.866667,2,2,0,1120,1.155556,0,0,,0,0,0,0,4,2540,2.311111,2,1,1
model,bert,2,2,10800,10800,600,36,34.266667,2,2,0,1120,1.155556,0,0,,0,0,0,0,1,860,0.577778,1,0,0
model,gpt2,2,2,10800,10800,600,37.333333,36.177778,0,0,0,0,0,0,0,,0,0,0,0,2,1120,1.155556,1,1,0
model,llama7,1,1,3600,3600,600,3.333333,3.333333,0,0,0,0,0,0,0,,0,0,0,0,0,0,0,0,0,0
model,vit,1,1,10800,10800,600,18.666667,18.088889,0,0,0,0,0,0,0,,0,0,0,0,1,560,0.577778,0,0,1
`
		const csvJobs = `job_id,name,account,qos,partition,model_type,class,tenant,state,finished,submit,first_start,end,jct_s,queue_s,runs,requeues,resizes,reconfigurations,reconfig_lost_s,reconfig_lost_gpu_hours,gpu_hours,useful_gpu_hours,gpu_tres_missing,below_request,slo_violated,plans,billing_hours,user,interruptions,interruption_lost_s,interruption_lost_gpu_hours,interruptions_node_fail,interruptions_preempted,interruptions_other
1,,,,,gpt2,,,COMPLETED,true,2026-11-02T00:00:00Z,2026-11-02T00:10:00Z,2026-11-02T03:00:00Z,10800,600,2,0,0,0,0,0,18.666667,18.088889,false,false,,,0,,1,560,0.577778,1,0,0
2,,,,,gpt2,,,COMPLETED,true,2026-11-02T00:00:00Z,2026-11-02T00:10:00Z,2026-11-02T03:00:00Z,10800,600,2,0,0,0,0,0,18.666667,18.088889,false,false,,,0,,1,560,0.577778,0,1,0
3,,,,,bert,,,COMPLETED,true,2026-11-02T00:00:00Z,2026-11-02T00:10:00Z,2026-11-02T03:00:00Z,10800,600,2,1,0,1,560,0.577778,18.666667,18.088889,false,false,,,0,,0,0,0,0,0,0
4,,,,,bert,,,COMPLETED,true,2026-11-02T00:00:00Z,2026-11-02T00:10:00Z,2026-11-02T03:00:00Z,10800,600,3,1,0,1,560,0.577778,17.333333,16.177778,false,false,,,0,,1,860,0.577778,1,0,0
5,,,,,llama7,,,NODE_FAIL,true,2026-11-02T00:00:00Z,2026-11-02T00:10:00Z,2026-11-02T01:00:00Z,3600,600,1,0,0,0,0,0,3.333333,3.333333,false,false,,,0,,0,0,0,0,0,0
6,,,,,vit,,,COMPLETED,true,2026-11-02T00:00:00Z,2026-11-02T00:10:00Z,2026-11-02T03:00:00Z,10800,600,2,0,0,0,0,0,18.666667,18.088889,false,false,,,0,,1,560,0.577778,0,0,1
`
		checkWritten(t, r, table, csvSummary, csvJobs)
	})
}

// checkWritten compares what r writes as a table with its jobs, as CSV
// summaries and as CSV jobs with what each should be.
func checkWritten(t *testing.T, r *Report, table, csvSummary, csvJobs string) {
	t.Helper()
	for name, tc := range map[string]struct {
		write func(*bytes.Buffer) error
		want  string
	}{
		"table":    {func(b *bytes.Buffer) error { return r.WriteTable(b, true) }, table},
		"csv":      {func(b *bytes.Buffer) error { return r.WriteCSV(b, false) }, csvSummary},
		"csv jobs": {func(b *bytes.Buffer) error { return r.WriteCSV(b, true) }, csvJobs},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(&b); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The plans chart labels each run with its plan up to maxLabelledRows
// jobs; past it the labels of one row would run into the next, and the
// title says where the plans are listed. Either way a legend names each
// model type drawn.
func TestPlotPlansLabels(t *testing.T) {
	const header = "JobID|State|Submit|Start|End|AllocTRES|AdminComment\n"
	rows := func(n int) string {
		var b strings.Builder
		b.WriteString(header)
		for i := range n {
			model := []string{"gpt2", "bert"}[i%2]
			fmt.Fprintf(&b, "%d|COMPLETED|2026-11-02T10:00:00|2026-11-02T10:%02d:00|2026-11-02T11:00:00|cpu=8,gres/gpu=4,node=1|rubick:v1 model=%s gen=1 plan=dp4.tp1.pp1.mb2.a1.z0\n",
				100+i, i%60, model)
		}
		return b.String()
	}
	for name, tc := range map[string]struct {
		jobs   int
		labels int
		title  string
	}{
		"few":  {jobs: maxLabelledRows, labels: maxLabelledRows, title: "Plans over time (one row per job)<"},
		"many": {jobs: maxLabelledRows + 1, labels: 0, title: "31 jobs, too many to label: rubick report --jobs lists their plans"},
	} {
		t.Run(name, func(t *testing.T) {
			r := build(t, rows(tc.jobs), Options{})
			dir := t.TempDir()
			if _, err := r.Plot(dir, PlotOptions{Format: "svg"}); err != nil && !errors.Is(err, ErrNoData) {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "plans.svg"))
			if err != nil {
				t.Fatal(err)
			}
			svg := string(b)
			if got := strings.Count(svg, ">dp4.tp1.pp1.mb2.a1.z0<"); got != tc.labels {
				t.Errorf("%d plan labels, want %d", got, tc.labels)
			}
			for _, want := range []string{tc.title, ">bert<", ">gpt2<"} {
				if !strings.Contains(svg, want) {
					t.Errorf("the chart lacks %q", want)
				}
			}
		})
	}
}

// TestJobIDCompare: array tasks and heterogeneous components sort by
// their numbers among plain ids (before, as text after all of them:
// "100 1000_1 200_1 99_10 99_9").
func TestJobIDCompare(t *testing.T) {
	ids := []string{"1000_1", "99_10", "100", "200+1", "99_9", "x", "99", "200+0", "99_[11-20]"}
	slices.SortFunc(ids, jobIDCompare)
	want := []string{"99", "99_[11-20]", "99_9", "99_10", "100", "200+0", "200+1", "1000_1", "x"}
	if d := cmp.Diff(want, ids); d != "" {
		t.Errorf("order (-want +got):\n%s", d)
	}
}

// TestRunUntil: a run still running in saved input ends on the plots
// where its Elapsed, which its GPU-hours count, says; before, at now,
// 146 h later for a 1 h run in a capture 6 days old.
func TestRunUntil(t *testing.T) {
	start := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	end := start.Add(30 * time.Minute)
	now := start.Add(146 * time.Hour)
	for name, tc := range map[string]struct {
		run  Run
		want time.Time
	}{
		"ended":           {Run{Start: &start, End: &end, ElapsedS: 1800}, end},
		"running":         {Run{Start: &start, ElapsedS: 3600}, start.Add(time.Hour)},
		"elapsed unknown": {Run{Start: &start}, now},
	} {
		if got := tc.run.until(now); !got.Equal(tc.want) {
			t.Errorf("%s: until = %v, want %v", name, got, tc.want)
		}
	}
}

// TestHeterogeneousJob: the components of a heterogeneous job are one job
// with one run holding what they hold together (before, each component
// counted as a job of its own). Components whose run counts differ stay
// apart.
func TestHeterogeneousJob(t *testing.T) {
	in := "JobID|State|Submit|Start|End|Elapsed|AllocTRES\n" +
		"200+0|COMPLETED|2026-11-02T10:00:00|2026-11-02T10:01:00|2026-11-02T11:01:00|01:00:00|cpu=8,gres/gpu=2,node=1\n" +
		"201|COMPLETED|2026-11-02T10:00:00|2026-11-02T10:00:00|2026-11-02T10:30:00|00:30:00|cpu=1,gres/gpu=1,node=1\n" +
		"200+1|COMPLETED|2026-11-02T10:00:00|2026-11-02T10:01:00|2026-11-02T11:01:00|01:00:00|cpu=4,gres/gpu=1,node=1\n" +
		"300+0|REQUEUED|2026-11-02T10:00:00|2026-11-02T10:00:00|2026-11-02T10:10:00|00:10:00|gres/gpu=1\n" +
		"300+0|COMPLETED|2026-11-02T10:00:00|2026-11-02T10:11:00|2026-11-02T10:20:00|00:09:00|gres/gpu=1\n" +
		"300+1|COMPLETED|2026-11-02T10:00:00|2026-11-02T10:11:00|2026-11-02T10:20:00|00:09:00|gres/gpu=1\n"
	r := build(t, in, Options{})
	var ids []string
	for _, j := range r.Jobs {
		ids = append(ids, j.ID)
	}
	if d := cmp.Diff([]string{"200", "201", "300+0", "300+1"}, ids); d != "" {
		t.Fatalf("jobs (-want +got):\n%s", d)
	}
	j := r.Jobs[0]
	if len(j.Runs) != 1 || j.Runs[0].GPUs != 3 || j.Runs[0].CPUs != 12 || j.Runs[0].Nodes != 2 || j.JCTS == nil || *j.JCTS != 3660 ||
		j.GPUHours == nil || *j.GPUHours != 3 {
		t.Errorf("job 200: runs %+v, JCT %v, GPU-hours %v; want one run of 3 GPUs, 12 CPUs, 2 nodes, JCT 3660 s, 3 GPU-hours",
			j.Runs, orZero(j.JCTS), orZero(j.GPUHours))
	}
}

func TestArrayTasks(t *testing.T) {
	for id, want := range map[string]int{
		"12":             1,
		"12_3":           1,
		"12+1":           1,
		"12_[3-9]":       7,
		"12_[0-5%2]":     6,
		"12_[0,4-8:2]":   4,
		"12_[1,3,5]":     3,
		"12_[0-99:10%4]": 10,
		"12_[9-3]":       1, // does not read
		"12_[a]":         1,
		"12_[3-9":        1,
	} {
		if got := ArrayTasks(id); got != want {
			t.Errorf("ArrayTasks(%q) = %d, want %d", id, got, want)
		}
	}
}

// An array's tasks not split off yet are one sacct row ("5_[2-4]"), and
// as many jobs in the summaries: here cancelled while they waited, each
// done after its wait.
func TestArrayRecordCountsItsTasks(t *testing.T) {
	const text = "JobID|State|Submit|Start|End|Elapsed|AllocTRES|AdminComment\n" +
		"5_0|COMPLETED|2026-11-02T00:00:00|2026-11-02T00:10:00|2026-11-02T01:00:00|00:50:00|cpu=1,gres/gpu=1,node=1|rubick:v1 model=bert class=guaranteed\n" +
		"5_[2-4]|CANCELLED by 1000|2026-11-02T00:00:00|2026-11-02T02:00:00|2026-11-02T02:00:00|00:00:00||rubick:v1 model=bert class=guaranteed\n"
	r := build(t, text, Options{RestartOverhead: DefaultRestartOverhead})
	type counts struct {
		Jobs, Finished, Guaranteed int
		AvgJCTS, AvgQueueS         *float64
	}
	o := r.Overall
	want := counts{Jobs: 4, Finished: 4, Guaranteed: 4, AvgJCTS: f((3600 + 3*7200) / 4.0), AvgQueueS: f(600)}
	if d := cmp.Diff(want, counts{o.Jobs, o.Finished, o.Guaranteed, o.AvgJCTS, o.AvgQueueS}); d != "" {
		t.Errorf("overall (-want +got):\n%s", d)
	}
	var tasks []string
	for _, j := range r.Jobs {
		tasks = append(tasks, fmt.Sprintf("%s:%d", j.ID, j.Tasks))
	}
	if d := cmp.Diff([]string{"5_[2-4]:3", "5_0:1"}, tasks); d != "" {
		t.Errorf("jobs and their tasks (-want +got):\n%s", d)
	}
}
