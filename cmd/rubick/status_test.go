package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// fakeDaemon serves rubickd's /healthz and /status with rep.
func fakeDaemon(t *testing.T, rep daemon.CycleReport) *httptest.Server {
	t.Helper()
	return fakeDaemonStatus(t, daemon.Status{CycleReport: rep})
}

// fakeDaemonStatus serves a healthy rubickd's /healthz, and /status with s.
func fakeDaemonStatus(t *testing.T, s daemon.Status) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestStatusJSON(t *testing.T) {
	path, plan := seedExplainStore(t)
	addRestartCost(t, path, 42, "gpt2", plan, 12500*time.Millisecond)
	rep := daemon.CycleReport{
		At: fixedNow.Add(-30 * time.Second), Jobs: 3, CycleID: 7, Duration: 1500 * time.Millisecond, Policy: 20 * time.Millisecond,
		Instance: "head1/4242/2026-11-25T05:00:00Z",
		Plan:     policy.Plan{Actions: []policy.Action{{Kind: policy.Start, JobID: "42"}, {Kind: policy.Keep, JobID: "43"}, {Kind: policy.Keep, JobID: "44"}}},
		// The report lists the failed action too; it is not applied.
		Actions:  []slurm.Action{{Kind: slurm.ActionStart, JobID: 42}, {Kind: slurm.ActionAnnotate, JobID: 44}},
		Failed:   map[int]string{44: "scontrol: rc=1"},
		Adjusted: map[int]string{46: "no feasible plan for model llama7 on its request of 1 GPU on 1 node; planned from 2 GPUs on 1 node"},
		Reserved: &daemon.Reservation{JobID: 45, Nodes: []string{"n2"}, GPUs: 8},
		Queued:   map[string]daemon.Queue{slurm.ClassGuaranteed: {}, slurm.ClassBestEffort: {Jobs: 2, Longest: 4*time.Hour + 90*time.Second}},
		Groups: []daemon.GroupUse{
			{Limit: "QOS normal GrpTRES", RunMins: "QOS normal GrpTRESRunMins", Jobs: "QOS normal GrpJobs",
				InUse:   daemon.TRESAmounts{GPUs: 12, CPUs: 48, MemMB: 1000, Billing: 30, GPURunMins: 600, CPURunMins: 2400, BillingRunMins: 1800, Jobs: 3},
				Allowed: daemon.TRESAmounts{GPUs: 16, Billing: 40, GPURunMins: 640, Jobs: 4}},
			// No bound on what it holds: not listed.
			{Limit: "QOS idle GrpTRES", RunMins: "QOS idle GrpTRESRunMins", InUse: daemon.TRESAmounts{GPUs: 2}},
			{Limit: "association root GrpTRES", RunMins: "association root GrpTRESRunMins",
				InUse:   daemon.TRESAmounts{GPUs: 4, MemMB: 32768, CPURunMins: 1200},
				Allowed: daemon.TRESAmounts{MemMB: 65536, CPURunMins: 5000}},
			{Limit: "association physics GrpTRESMins", RunMins: "association physics GrpTRESMins",
				InUse: daemon.TRESAmounts{GPURunMins: 700}, Allowed: daemon.TRESAmounts{GPURunMins: 1000},
				Spent: &daemon.TRESAmounts{GPURunMins: 100}},
		},
	}
	srv := fakeDaemon(t, rep)
	var out, errb bytes.Buffer
	if err := statusCmd(context.Background(), []string{"--url", srv.URL + "/", "--store", path, "--json"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	var v statusView
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	d := v.Daemon
	if !d.Reachable || !d.Healthy || d.CycleID != 7 || d.Jobs != 3 || d.DurationS != 1.5 || d.Applied != 1 ||
		d.LastCycle == nil || !d.LastCycle.Equal(rep.At) || d.Instance != rep.Instance {
		t.Errorf("daemon = %+v", d)
	}
	if diff := cmp.Diff(map[string]int{"start": 1, "keep": 2}, d.Decided); diff != "" {
		t.Errorf("decided (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int]string{44: "scontrol: rc=1"}, d.Failed); diff != "" {
		t.Errorf("failed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(rep.Adjusted, d.Adjusted); diff != "" {
		t.Errorf("adjusted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(rep.Reserved, d.Reserved); diff != "" {
		t.Errorf("reserved (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(rep.Groups, d.Groups); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(rep.Queued, d.Queued); diff != "" {
		t.Errorf("queued (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"RUNNING": 1}, v.JobsByState); diff != "" {
		t.Errorf("managed jobs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"PENDING": 1}, v.RigidByState); diff != "" {
		t.Errorf("rigid jobs (-want +got):\n%s", diff)
	}
	if len(v.Models) != 2 || v.Models[0].Name != "bert" || v.Models[0].Fit != nil || v.Models[1].Name != "gpt2" ||
		v.Models[1].Fit == nil || v.Models[1].Fit.Samples != 9 || v.Models[1].FitCount != 1 {
		t.Errorf("models = %+v", v.Models)
	}
	if c := v.Models[1].RestartCostS; c == nil || *c != 12.5 || v.Models[1].RestartsMeasured != 1 || v.Models[0].RestartCostS != nil {
		t.Errorf("restart costs: gpt2 %v (%d measured), bert %v; want 12.5 s (1) and none",
			v.Models[1].RestartCostS, v.Models[1].RestartsMeasured, v.Models[0].RestartCostS)
	}
	// The fit was made by the store's clock, two hours before fixedNow
	// plus a few ticks; age comes from the injected now.
	if age := v.Models[1].Fit.AgeS; age <= 0 || age > 2*3600 {
		t.Errorf("fit age = %v s", age)
	}
	if len(v.Notes) != 0 || v.StoreError != "" {
		t.Errorf("notes %q, store error %q", v.Notes, v.StoreError)
	}

	out.Reset()
	if err := statusCmd(context.Background(), []string{"--url", srv.URL, "--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" (by=head1/4242/2026-11-25T05:00:00Z): healthy, last cycle 7 at ", "applied 1, failed 1, skipped 0, ignored 0, adjusted 1\n", "    failed job 44: scontrol: rc=1\n",
		"    adjusted job 46: no feasible plan for model llama7 on its request of 1 GPU on 1 node; planned from 2 GPUs on 1 node\n",
		"\n  queued: 0 guaranteed, 2 best-effort (longest 4h1m30s)\n  held for rigid job 45: 8 free GPUs on n2\n",
		"  group limits (in use / allowed):\n    QOS normal GrpTRES: 12/16 GPUs, 30/40 billing; QOS normal GrpTRESRunMins: 600/640 GPU-minutes; QOS normal GrpJobs: 3/4 running jobs\n    association root GrpTRES: 32768/65536 MB of memory; association root GrpTRESRunMins: 1200/5000 CPU-minutes\n    association physics GrpTRESMins: 700/1000 GPU-minutes (100 used, 600 to run)\nstore "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "QOS idle") {
		t.Errorf("output lists a group with nothing bounded:\n%s", out.String())
	}
}

func TestStatusDaemonDown(t *testing.T) {
	path, _ := seedExplainStore(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	var out, errb bytes.Buffer
	if err := statusCmd(context.Background(), []string{"--url", url, "--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatalf("daemon down but store readable: %v", err)
	}
	for _, want := range []string{"rubickd " + url + ": DOWN", "managed jobs by state: RUNNING=1", "gpt2", "#1", "bert", "none",
		"note: rubickd is not reachable at " + url + ": showing the store only"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// Neither source: an error naming both.
	missing := filepath.Join(t.TempDir(), "none.db")
	out.Reset()
	err := statusCmd(context.Background(), []string{"--url", url, "--store", missing}, &out, &errb, testEnv(t))
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("error = %v, want one naming %s", err, missing)
	}
}

func TestStatusUnhealthy(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "store locked", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "{not json") })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	path, _ := seedExplainStore(t)
	var out, errb bytes.Buffer
	if err := statusCmd(context.Background(), []string{"--url", srv.URL, "--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"UNHEALTHY", "HTTP 503: store locked", "/status: decode"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// For monitoring: the same status, and a failure.
	out.Reset()
	err := statusCmd(context.Background(), []string{"--url", srv.URL, "--store", path, "--check"}, &out, &errb, testEnv(t))
	if err == nil || !strings.Contains(err.Error(), "is not healthy: /healthz: HTTP 503: store locked") || !strings.Contains(out.String(), "UNHEALTHY") {
		t.Errorf("--check: %v, output:\n%s\nwant the status and an error saying why", err, out.String())
	}
}

// TestStatusCheck: --check passes a healthy rubickd, fails one that is
// down, and a --timeout that cannot be met is a usage error.
func TestStatusCheck(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "{}") })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	path, _ := seedExplainStore(t)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	for _, tc := range []struct {
		args []string
		say  string // "" for success
	}{
		{[]string{"--url", srv.URL}, ""},
		{[]string{"--url", down.URL}, "status: rubickd at " + down.URL + " is not healthy"},
		{[]string{"--url", srv.URL, "--timeout", "-1s"}, "--timeout=-1s must be > 0"},
	} {
		var out, errb bytes.Buffer
		err := statusCmd(context.Background(), append([]string{"--store", path, "--check"}, tc.args...), &out, &errb, testEnv(t))
		if (err == nil) != (tc.say == "") || err != nil && !strings.Contains(err.Error(), tc.say) {
			t.Errorf("status --check %v: %v, want %q", tc.args, err, tc.say)
		}
	}
}

// TestStatusURL: --url takes rubickd's listen setting as it is
// (HOST:PORT) as well as a URL; anything else is a usage error naming it.
func TestStatusURL(t *testing.T) {
	srv := fakeDaemon(t, daemon.CycleReport{})
	path, _ := seedExplainStore(t)
	tests := map[string]struct {
		url     string
		wantErr string // "": reaches the fake rubickd
	}{
		"url":               {url: srv.URL},
		"url with a slash":  {url: srv.URL + "/"},
		"listen setting":    {url: strings.TrimPrefix(srv.URL, "http://")},
		"another scheme":    {url: "ftp://" + strings.TrimPrefix(srv.URL, "http://"), wantErr: `--url="ftp://`},
		"no host":           {url: "http://", wantErr: `--url="http://"`},
		"empty":             {url: "", wantErr: `--url=""`},
		"unterminated ipv6": {url: "[::1:9717", wantErr: `--url="[::1:9717"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := statusCmd(context.Background(), []string{"--url", tc.url, "--store", path, "--json", "--check"}, &out, &errb, testEnv(t))
			if tc.wantErr != "" {
				if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want a usage error naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var v statusView
			if err := json.Unmarshal(out.Bytes(), &v); err != nil {
				t.Fatal(err)
			}
			if v.URL != srv.URL || !v.Daemon.Reachable {
				t.Errorf("url %q, reachable %v; want %q, reachable", v.URL, v.Daemon.Reachable, srv.URL)
			}
		})
	}
}

// TestStatusFailing: cycles failing since the last completed one are
// said on rubickd's line and in the JSON while /healthz still answers
// 200, and --check still passes; so are cycles that wait for released
// jobs to start, and so decide nothing, since the last completed cycle
// grows old meanwhile. Nothing is said while cycles complete.
func TestStatusFailing(t *testing.T) {
	path, _ := seedExplainStore(t)
	last := daemon.CycleReport{At: fixedNow.Add(-8 * time.Minute), CycleID: 15, Jobs: 3, Duration: 1500 * time.Millisecond}
	failing := &daemon.Failing{Since: fixedNow.Add(-7 * time.Minute), Cycles: 7,
		Error: "read jobs: slurmrestd unavailable: dial unix /run/slurmrestd.sock: connect: no such file or directory"}
	tests := map[string]struct {
		status daemon.Status
		line   string // how rubickd's line ends
	}{
		"failing": {
			status: daemon.Status{CycleReport: last, Failing: failing},
			line: "healthy, last cycle 15 at 2026-11-08T11:52:00Z took 1.500s (policy 0.000s), 3 jobs; 7 cycles failed since 2026-11-08T11:53:00Z: " +
				"read jobs: slurmrestd unavailable: dial unix /run/slurmrestd.sock: connect: no such file or directory\n",
		},
		"failing before a first cycle": {
			status: daemon.Status{Failing: &daemon.Failing{Since: fixedNow.Add(-time.Minute), Cycles: 1, Error: "read jobs: slurmrestd unavailable"}},
			line:   ": healthy, no cycle yet; 1 cycle failed since 2026-11-08T11:59:00Z: read jobs: slurmrestd unavailable\n",
		},
		"completing": {
			status: daemon.Status{CycleReport: last},
			line:   "healthy, last cycle 15 at 2026-11-08T11:52:00Z took 1.500s (policy 0.000s), 3 jobs\n",
		},
		"waiting for one job": {
			status: daemon.Status{CycleReport: last, Waiting: &daemon.Waiting{Since: fixedNow.Add(-7 * time.Minute), Jobs: []int{144}}},
			line: "last cycle 15 at 2026-11-08T11:52:00Z took 1.500s (policy 0.000s), 3 jobs; cycles since 2026-11-08T11:53:00Z " +
				"wait for Slurm to start job 144, which rubickd released (up to 60s each), and decide nothing\n",
		},
		"waiting for two before a first cycle": {
			status: daemon.Status{Waiting: &daemon.Waiting{Since: fixedNow.Add(-5 * time.Second), Jobs: []int{144, 145}}},
			line: ": healthy, no cycle yet; cycles since 2026-11-08T11:59:55Z " +
				"wait for Slurm to start jobs 144, 145, which rubickd released (up to 60s each), and decide nothing\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := fakeDaemonStatus(t, tc.status)
			text, v, raw := statusTextAndJSON(t, srv.URL, path)
			if first, _, _ := strings.Cut(text, "\n"); !strings.HasSuffix(first+"\n", tc.line) {
				t.Errorf("rubickd's line:\n%s\nwant it to end in:\n%s", first, tc.line)
			}
			if diff := cmp.Diff(tc.status.Failing, v.Daemon.Failing); diff != "" {
				t.Errorf("JSON failing (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.status.Waiting, v.Daemon.Waiting); diff != "" {
				t.Errorf("JSON waiting (-want +got):\n%s", diff)
			}
			for key, want := range map[string]bool{`"failing"`: tc.status.Failing != nil, `"waiting"`: tc.status.Waiting != nil} {
				if got := strings.Contains(raw, key); got != want {
					t.Errorf("JSON has %s: %v, want %v:\n%s", key, got, want, raw)
				}
			}
		})
	}
}

// TestStatusSetupChecks: the start-up checks that failed or warned are
// listed under rubickd's line and in the JSON; --check, which asks
// whether cycles complete, passes all the same; nothing is said when all
// passed.
func TestStatusSetupChecks(t *testing.T) {
	path, _ := seedExplainStore(t)
	last := daemon.CycleReport{At: fixedNow.Add(-8 * time.Minute), CycleID: 15, Jobs: 3, Duration: 1500 * time.Millisecond}
	setup := &daemon.SetupChecks{At: fixedNow.Add(-time.Hour), Checks: []daemon.CheckResult{
		// A command's stderr runs to several lines: indented under the check.
		{Name: "commands.scontrol", Status: daemon.CheckFail, Detail: "scontrol show config: exit status 1: scontrol: error: fetch_config\nscontrol: fatal: no configuration source\n"},
		{Name: "limits", Status: daemon.CheckWarn, Detail: "slurmrestd serves no /slurmdb listing"},
	}}
	const listed = "  setup checks at start 2026-11-08T11:00:00Z (rubickd --check runs them again): 1 failed, 1 warned\n" +
		"    failed commands.scontrol: scontrol show config: exit status 1: scontrol: error: fetch_config\n" +
		"      scontrol: fatal: no configuration source\n" +
		"    warned limits: slurmrestd serves no /slurmdb listing\n"
	tests := map[string]struct {
		status daemon.Status
		lines  string // what follows rubickd's line
	}{
		"after a cycle": {
			status: daemon.Status{CycleReport: last, Setup: setup},
			lines:  listed + "  decided: none;",
		},
		"before a first cycle": {
			status: daemon.Status{Setup: setup},
			lines:  listed + "store ",
		},
		"all passed": {
			status: daemon.Status{CycleReport: last},
			lines:  "  decided: none;",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := fakeDaemonStatus(t, tc.status)
			text, v, raw := statusTextAndJSON(t, srv.URL, path)
			if _, rest, _ := strings.Cut(text, "\n"); !strings.HasPrefix(rest, tc.lines) {
				t.Errorf("output:\n%s\nwant rubickd's line followed by:\n%s", text, tc.lines)
			}
			if diff := cmp.Diff(tc.status.Setup, v.Daemon.Setup); diff != "" {
				t.Errorf("JSON setup (-want +got):\n%s", diff)
			}
			if got := strings.Contains(raw, `"setup"`); got != (tc.status.Setup != nil) {
				t.Errorf("JSON has setup: %v, want %v:\n%s", got, tc.status.Setup != nil, raw)
			}
		})
	}
}

func TestStatusNoCycleYet(t *testing.T) {
	srv := fakeDaemon(t, daemon.CycleReport{})
	var out, errb bytes.Buffer
	env := testEnv(t)
	if err := statusCmd(context.Background(), []string{"--url", srv.URL, "--store", filepath.Join(t.TempDir(), "x.db")}, &out, &errb, env); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "healthy, no cycle yet") || !strings.Contains(out.String(), "NOT READ") {
		t.Errorf("output:\n%s", out.String())
	}
}

// addRestartCost records an applied restart of job and its measured cost.
func addRestartCost(t *testing.T, path string, job int64, mt string, plan model.Plan, cost time.Duration) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	res := model.Resources{Placement: model.Placement{plan.GPUs()}, CPUs: 16}
	a, err := st.RecordPlan(ctx, store.Action{JobID: job, Kind: string(slurm.ActionRestart), Plan: plan, Resources: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.MarkApplied(ctx, a.ID, store.ResultOK, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddRestartCost(ctx, store.RestartCost{ActionID: a.ID, JobID: job, ModelType: mt, Cost: cost,
		Signaled: a.DecidedAt, Resumed: a.DecidedAt.Add(cost), BeforeIter: 10, AfterIter: 12}); err != nil {
		t.Fatal(err)
	}
}

// Jobs of the last cycle's lists that are tasks of job arrays are named
// as squeue names them too, from the store.
func TestStatusArrayTasks(t *testing.T) {
	path, _ := seedExplainStore(t)
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []store.Job{
		{ID: 47, ModelType: "bert", Class: store.BestEffort, State: "PENDING", ArrayJobID: 40, ArrayTaskID: 3},
		{ID: 48, ModelType: "bert", Class: store.BestEffort, State: "PENDING", ArrayJobID: 40, ArrayTaskID: 4},
	} {
		if err := st.UpsertJob(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	srv := fakeDaemon(t, daemon.CycleReport{At: fixedNow, CycleID: 3, Ignored: map[int]string{47: "waits for a task of its array to end", 43: "queued"}})
	var out, errb bytes.Buffer
	if err := statusCmd(context.Background(), []string{"--url", srv.URL, "--store", path, "--json"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	var v statusView
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[int]string{47: "40_3"}, v.ArrayTasks); diff != "" {
		t.Errorf("array tasks (-want +got):\n%s", diff)
	}
	out.Reset()
	if err := statusCmd(context.Background(), []string{"--url", srv.URL, "--store", path}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"    ignored job 47 (40_3): waits for a task of its array to end\n", "    ignored job 43: queued\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// statusTextAndJSON runs status against rubickd at url and the store at
// path, as --check (which must pass: /healthz answers 200) and as --json,
// and returns the text, the JSON read and the JSON as written.
func statusTextAndJSON(t *testing.T, url, path string) (string, statusView, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if err := statusCmd(context.Background(), []string{"--url", url, "--store", path, "--check"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatalf("--check: %v, want success: /healthz answers 200", err)
	}
	text := out.String()
	out.Reset()
	if err := statusCmd(context.Background(), []string{"--url", url, "--store", path, "--json"}, &out, &errb, testEnv(t)); err != nil {
		t.Fatal(err)
	}
	var v statusView
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	return text, v, out.String()
}
