package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/report"
	"github.com/rubick-sched/rubick/slurm"
)

// fixedNow is the clock of every command test.
var fixedNow = time.Date(2026, 11, 8, 12, 0, 0, 0, time.UTC)

func testEnv(t *testing.T) cliEnv {
	t.Helper()
	return cliEnv{
		now:     func() time.Time { return fixedNow },
		getenv:  func(string) string { return "" },
		environ: func() []string { return nil },
		// A default configuration file that does not exist: tests never
		// read the host's.
		configPath: filepath.Join(t.TempDir(), "rubickd.yaml"),
		loc:        time.UTC,
		runner:     slurm.ExecRunner{},
		http:       &http.Client{Timeout: 5 * time.Second},
		stdin:      strings.NewReader(""),
	}
}

const sample2205 = "../../report/testdata/sacct-22.05.txt"
const synthetic = "../../report/testdata/synthetic.txt"

func TestReportInputJSON(t *testing.T) {
	var out, errb bytes.Buffer
	err := reportCmd(context.Background(), []string{"--input", sample2205, "--json"}, &out, &errb, testEnv(t))
	// The sample holds one malformed tag (job 31): the report is still
	// written, and the command fails naming the job and the field.
	if !errors.Is(err, report.ErrJob) || !strings.Contains(err.Error(), `job 31: AdminComment="rubick:plan=dp4,gpus=4"`) {
		t.Fatalf("error = %v, want ErrJob naming job 31", err)
	}
	var rep struct {
		Overall report.Summary `json:"overall"`
		Errors  []struct {
			JobID string `json:"job_id"`
			Field string `json:"field"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out.String())
	}
	if rep.Overall.Jobs != 43 || rep.Overall.Resizes != 7 || len(rep.Errors) != 1 || rep.Errors[0].JobID != "31" {
		t.Errorf("report = %+v", rep)
	}
}

func TestReportTableMatchesGolden(t *testing.T) {
	var out, errb bytes.Buffer
	err := reportCmd(context.Background(), []string{"--input", sample2205, "--jobs"}, &out, &errb, testEnv(t))
	if !errors.Is(err, report.ErrJob) {
		t.Fatalf("error = %v", err)
	}
	want, err := os.ReadFile("../../report/testdata/sacct-22.05.golden.table")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), out.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// A dimension given twice in --by is grouped by once.
func TestReportByTwice(t *testing.T) {
	var out, errb bytes.Buffer
	err := reportCmd(context.Background(), []string{"--input", synthetic, "--by", "model, model", "--json"}, &out, &errb, testEnv(t))
	if !errors.Is(err, report.ErrJob) {
		t.Fatalf("error = %v", err)
	}
	var rep struct {
		Groups []struct {
			By string `json:"by"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	var by []string
	for _, g := range rep.Groups {
		by = append(by, g.By)
	}
	if diff := cmp.Diff([]string{"model"}, by); diff != "" {
		t.Errorf("groupings (-want +got):\n%s", diff)
	}
}

// TestReportFakeSacct runs the argv path against a fake sacct binary: the
// default window is the 7 days before the injected now.
func TestReportFakeSacct(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	data, err := filepath.Abs(synthetic)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sacct")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > '" + argsFile + "'\ncat '" + data + "'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	err = reportCmd(context.Background(), []string{"--sacct", bin, "--csv", "--by", "model"}, &out, &errb, testEnv(t))
	if !errors.Is(err, report.ErrJob) { // job 104's malformed tag
		t.Fatalf("error = %v", err)
	}
	args, _ := os.ReadFile(argsFile)
	for _, want := range []string{"--starttime=2026-11-01T12:00:00\n", "--endtime=now\n", "--duplicates\n", "--parsable2\n"} {
		if !strings.Contains(string(args), want) {
			t.Errorf("sacct argv %q lacks %q", args, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// header, overall, 3 model types; 107 (October) is outside the window.
	if len(lines) != 5 || !strings.HasPrefix(lines[1], "all,all,7,") {
		t.Errorf("csv:\n%s", out.String())
	}
}

// TestReportSinceDefaultsBeforeUntil: when sacct is run, --since defaults
// to 7 days before --until, not before now.
func TestReportSinceDefaultsBeforeUntil(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	bin := filepath.Join(dir, "sacct")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > '" + argsFile + "'\necho 'JobID|State'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		// sacct's window ends now whatever --until (report.Query).
		{[]string{"--until", "2026-10-01"}, []string{"--starttime=2026-09-24T00:00:00\n", "--endtime=now\n"}},
		{[]string{"--until", "-2d"}, []string{"--starttime=2026-10-30T12:00:00\n", "--endtime=now\n"}},
		{[]string{"--since", "-3d", "--until", "-2d"}, []string{"--starttime=2026-11-05T12:00:00\n", "--endtime=now\n"}},
	} {
		var out, errb bytes.Buffer
		if err := reportCmd(context.Background(), append([]string{"--sacct", bin, "--json"}, tc.args...), &out, &errb, testEnv(t)); err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		args, _ := os.ReadFile(argsFile)
		for _, want := range tc.want {
			if !strings.Contains(string(args), want) {
				t.Errorf("%v: sacct argv %q lacks %q", tc.args, args, want)
			}
		}
	}
}

// A hung sacct (slurmdbd down) ends at --timeout with an error.
func TestReportSacctTimeout(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "sacct")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	start := time.Now()
	err := reportCmd(context.Background(), []string{"--sacct", bin, "--timeout", "200ms"}, &out, &errb, testEnv(t))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), bin) {
		t.Errorf("error = %v after %s, want the deadline naming %s", err, time.Since(start), bin)
	}
}

func TestReportPlot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "charts")
	var out, errb bytes.Buffer
	err := reportCmd(context.Background(), []string{"--input", synthetic, "--since", "2026-11-01", "--plot", dir, "--plot-format", "svg", "--gpus", "32"},
		&out, &errb, testEnv(t))
	if !errors.Is(err, report.ErrJob) {
		t.Fatalf("error = %v", err)
	}
	for _, name := range []string{"jct-cdf.svg", "gpu-alloc.svg", "plans.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
}

func TestReportUsageErrors(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string // what the error names
	}{
		"csv and json":      {args: []string{"--input", synthetic, "--csv", "--json"}, want: "--csv and --json"},
		"bad since":         {args: []string{"--input", synthetic, "--since", "last tuesday"}, want: `--since: "last tuesday"`},
		"bad group":         {args: []string{"--input", synthetic, "--by", "model,owner"}, want: `"owner"`},
		"window":            {args: []string{"--input", synthetic, "--since", "2026-11-05", "--until", "2026-11-01"}, want: "since 2026-11-05"},
		"extra argument":    {args: []string{"--input", synthetic, "42"}, want: `"42"`},
		"bad zone":          {args: []string{"--input", synthetic, "--tz", "Mars/Olympus"}, want: `--tz="Mars/Olympus"`},
		"plot format":       {args: []string{"--input", synthetic, "--plot-format", "jpg"}, want: `--plot-format="jpg"`},
		"negative gpus":     {args: []string{"--input", synthetic, "--gpus", "-5"}, want: "--gpus=-5"},
		"no grouping":       {args: []string{"--input", synthetic, "--by", ""}, want: `--by=""`},
		"no timeout":        {args: []string{"--input", synthetic, "--timeout", "0s"}, want: "--timeout=0s"},
		"negative overhead": {args: []string{"--input", synthetic, "--restart-overhead", "-5m"}, want: "--restart-overhead=-5m0s must be >= 0"},
		// Flags that would do nothing.
		"sacct with input":    {args: []string{"--input", synthetic, "--sacct", "/opt/slurm/bin/sacct"}, want: "--sacct with --input"},
		"timeout with input":  {args: []string{"--input", synthetic, "--timeout", "1m"}, want: "--timeout with --input"},
		"gpus without plot":   {args: []string{"--input", synthetic, "--gpus", "64"}, want: "--gpus without --plot"},
		"format without plot": {args: []string{"--input", synthetic, "--plot-format", "svg"}, want: "--plot-format without --plot"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := reportCmd(context.Background(), tc.args, &out, &errb, testEnv(t))
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) || out.Len() > 0 {
				t.Errorf("error = %v, output %q; want a usage error naming %s before any report", err, out.String(), tc.want)
			}
		})
	}
	var out, errb bytes.Buffer
	err := reportCmd(context.Background(), []string{"--input", filepath.Join(t.TempDir(), "missing.txt")}, &out, &errb, testEnv(t))
	if err == nil || !strings.Contains(err.Error(), "missing.txt") {
		t.Errorf("missing input: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.txt")
	_ = os.WriteFile(bad, []byte("JobID|State|Elapsed\n7|COMPLETED|soon\n"), 0o644)
	err = reportCmd(context.Background(), []string{"--input", bad}, &out, &errb, testEnv(t))
	if !errors.Is(err, report.ErrInput) || !strings.Contains(err.Error(), `Elapsed="soon"`) {
		t.Errorf("bad input: %v", err)
	}
}

func TestReportStdin(t *testing.T) {
	env := testEnv(t)
	env.stdin = strings.NewReader("JobID|State|Elapsed|AllocTRES\n1|COMPLETED|01:00:00|gres/gpu=2,node=1\n")
	var out, errb bytes.Buffer
	if err := reportCmd(context.Background(), []string{"--input", "-", "--csv"}, &out, &errb, env); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\nall,all,1,1,,,,2,") {
		t.Errorf("csv:\n%s", out.String())
	}
}

// Saved sacct output without AllocTRES: the GPU-hour and billing-hour
// columns are unknown, not 0, in every format.
func TestReportMissingAllocTRES(t *testing.T) {
	text, err := os.ReadFile(synthetic)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSuffix(string(text), "\n"), "\n") {
		f := strings.Split(l, "|")
		b.WriteString(strings.Join(append(f[:10:10], f[11:]...), "|") + "\n") // column 10 is AllocTRES
	}
	if !strings.HasPrefix(string(text), "JobID|JobName|Account|QOS|Partition|State|Submit|Start|End|Elapsed|AllocTRES|") {
		t.Fatalf("%s: AllocTRES is no longer column 10", synthetic)
	}
	input := filepath.Join(t.TempDir(), "no-alloctres.txt")
	if err := os.WriteFile(input, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		flag string
		want []string // lines of the output
	}{
		"table": {"--by=model", []string{
			"note: no AllocTRES column: GPU-hours and billing-hours are unknown",
			"all       7     5 (1 timeout)  1h04m    3h10m    2m47s      -      -             -          2 (1+1)         13m40s / - GPU-h  0 (0+0+0)            0s / - GPU-h  2      0          -",
		}},
		"csv": {"--csv", []string{"all,all,7,5,3854,11400,166.666667,,,2,1,1,820,,2,0,,0,0,1,,0,0,,0,0,0"}},
		"json": {"--json", []string{`"gpu_hours": null,`, `"useful_gpu_hours": null,`, `"billing_hours": null,`, `"reconfig_lost_gpu_hours": null,`,
			`"interruption_lost_gpu_hours": null,`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := reportCmd(context.Background(), []string{"--input", input, "--since", "2026-11-01", tc.flag}, &out, &errb, testEnv(t))
			if !errors.Is(err, report.ErrJob) { // job 104's malformed tag
				t.Fatalf("error = %v", err)
			}
			lines := map[string]bool{}
			for _, l := range strings.Split(out.String(), "\n") {
				lines[strings.TrimSpace(l)] = true
			}
			var missing []string
			for _, w := range tc.want {
				if !lines[w] {
					missing = append(missing, w)
				}
			}
			if diff := cmp.Diff([]string(nil), missing); diff != "" {
				t.Errorf("output lacks lines (-want +got):\n%s\noutput:\n%s", diff, out.String())
			}
			if strings.Contains(out.String(), "0.000") || strings.Contains(out.String(), `_hours": 0`) {
				t.Errorf("output has a GPU- or billing-hour of 0:\n%s", out.String())
			}
		})
	}
}

// TestHelpListsEveryFlag checks that -h prints every flag with its default.
func TestHelpListsEveryFlag(t *testing.T) {
	for name, fn := range map[string]func(context.Context, []string, *bytes.Buffer, *bytes.Buffer, cliEnv) error{
		"report": func(ctx context.Context, a []string, o, e *bytes.Buffer, env cliEnv) error {
			return reportCmd(ctx, a, o, e, env)
		},
		"explain": func(ctx context.Context, a []string, o, e *bytes.Buffer, env cliEnv) error {
			return explainCmd(ctx, a, o, e, env)
		},
		"status": func(ctx context.Context, a []string, o, e *bytes.Buffer, env cliEnv) error {
			return statusCmd(ctx, a, o, e, env)
		},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if err := fn(context.Background(), []string{"--help"}, &out, &errb, testEnv(t)); err != nil {
				t.Fatalf("--help: %v", err)
			}
			help := errb.String()
			want := map[string][]string{
				"report":  {"since", "until", "sacct", "input", "store", "config", "csv", "json", "jobs", "plot", "plot-format", "gpus", "by", "restart-overhead", "tz", "timeout"},
				"explain": {"store", "config", "json", "top", "reasons"},
				"status":  {"url", "store", "config", "json", "timeout", "check"},
			}[name]
			for _, f := range want {
				if !strings.Contains(help, "--"+f+" ") && !strings.Contains(help, "--"+f+"\n") {
					t.Errorf("help lacks --%s:\n%s", f, help)
				}
			}
			if name == "report" && !strings.Contains(help, "  --input file\n") {
				t.Errorf("help does not name --input's value a file:\n%s", help)
			}
			// One default per flag, in words ("(default: ...") or a value.
			if n := strings.Count(help, "(default"); n != len(want) {
				t.Errorf("help shows %d defaults, want %d:\n%s", n, len(want), help)
			}
		})
	}
}

func TestParseWhen(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		"now":       {in: "now", want: fixedNow},
		"days":      {in: "-7d", want: fixedNow.AddDate(0, 0, -7)},
		"duration":  {in: "-36h", want: fixedNow.Add(-36 * time.Hour)},
		"date":      {in: "2026-11-01", want: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)},
		"datetime":  {in: "2026-11-01T10:30:00", want: time.Date(2026, 11, 1, 10, 30, 0, 0, time.UTC)},
		"rfc3339":   {in: "2026-11-01T10:30:00+02:00", want: time.Date(2026, 11, 1, 8, 30, 0, 0, time.UTC)},
		"words":     {in: "yesterday", wantErr: true},
		"bad days":  {in: "-xd", wantErr: true},
		"positive":  {in: "7d", wantErr: true},
		"most days": {in: "-106751d", want: fixedNow.AddDate(0, 0, -106751)},
		// AddDate wrapped these around: 2^63-1 days ago was tomorrow.
		"too many days": {in: "-106752d", wantErr: true},
		"days wrapping": {in: "-9223372036854775807d", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseWhen(tc.in, fixedNow, time.UTC)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseWhen(%q) error = %v", tc.in, err)
			}
			if !got.Equal(tc.want) {
				t.Errorf("parseWhen(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// sacct run by the report prints in UTC, which the report reads its times
// in, whatever the process's zone.
func TestSacctRunnerZone(t *testing.T) {
	script := filepath.Join(t.TempDir(), "sacct")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"TZ=$TZ\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TZ", "America/New_York")
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Skip(err)
	}
	r, loc := sacctRunner(slurm.ExecRunner{}, tokyo)
	out, err := r.Run(t.Context(), []string{script})
	if got := strings.TrimSpace(string(out)); err != nil || got != "TZ=UTC" || loc != time.UTC {
		t.Errorf("sacct saw %q (%v), read in %v; want TZ=UTC, read in UTC", got, err, loc)
	}
	if r, loc := sacctRunner(fakeRunnerForZone{}, tokyo); r != (fakeRunnerForZone{}) || loc != tokyo {
		t.Error("a runner other than ExecRunner was replaced")
	}
}

// TestReportDSTFallBack: a job that spans the hour New York's clocks go
// back. sacct, printing in local time, would give its End (01:10 EST) as
// before its Submit (01:30 EDT); run in UTC, the JCT is its 40 minutes,
// and the job's times are shown in the report's zone. Before, the job's
// JCT was unknown and the command failed.
func TestReportDSTFallBack(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "sacct")
	// What sacct prints with TZ=UTC: 05:30Z is 01:30 EDT, 06:10Z 01:10 EST.
	script := "#!/bin/sh\n[ \"$TZ\" = UTC ] || { echo 'not run in UTC' >&2; exit 1; }\n" +
		"echo 'JobID|State|Submit|Start|End|Elapsed|AllocTRES'\n" +
		"echo '5|COMPLETED|2026-11-01T05:30:00|2026-11-01T05:30:00|2026-11-01T06:10:00|00:40:00|gres/gpu=1'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t)
	env.loc = ny
	var out, errb bytes.Buffer
	if err := reportCmd(context.Background(), []string{"--sacct", bin, "--json", "--jobs", "--until", "2026-11-02"}, &out, &errb, env); err != nil {
		t.Fatalf("report: %v\n%s", err, errb.String())
	}
	var rep struct {
		Jobs []struct {
			JobID  string  `json:"job_id"`
			Submit string  `json:"submit"`
			JCT    float64 `json:"jct_s"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.Jobs) != 1 || rep.Jobs[0].JCT != 2400 || rep.Jobs[0].Submit != "2026-11-01T01:30:00-04:00" {
		t.Errorf("jobs %+v, want job 5 submitted 01:30 EDT, JCT 2400 s\n%s", rep.Jobs, out.String())
	}
}

type fakeRunnerForZone struct{}

func (fakeRunnerForZone) Run(context.Context, []string) ([]byte, error) { return nil, nil }

// TestHelpCommand: rubick help CMD [SUB] prints that command's own help,
// as CMD [SUB] -h does; an unknown one is a usage error.
func TestHelpCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "usage: rubick <command> [flags]"},
		{[]string{"help", "sim"}, "usage: rubick sim [flags]"},
		{[]string{"help", "model"}, "usage: rubick model <fit|validate|learn|best-plan>"},
		{[]string{"help", "model", "fit"}, "usage: rubick model fit [flags]"},
		{[]string{"help", "store", "stats"}, "usage: rubick store stats [flags]"},
	} {
		var out, errb bytes.Buffer
		if err := run(context.Background(), tc.args, &out, &errb); err != nil {
			t.Errorf("rubick %s: %v", strings.Join(tc.args, " "), err)
		}
		if got := out.String() + errb.String(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("rubick %s printed %.80q, want it to start %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"help", "bogus"}, &out, &errb); !errors.Is(err, errUsage) {
		t.Errorf("rubick help bogus = %v, want a usage error", err)
	}
}

// The report takes its store from --store, else $RUBICK_STORE, as explain
// does; --store "" leaves it out. Else it reads the store rubickd's
// configuration names only when a file is read, and goes on without one it
// cannot open, which the user did not ask for.
func TestReportStoreSources(t *testing.T) {
	path, _ := seedExplainStore(t)
	missing := filepath.Join(t.TempDir(), "missing.db")
	tests := map[string]struct {
		args        []string
		env         string
		defaultFile []string // its lines; nil: no file
		want        string
		stderr      string
	}{
		"flag":                    {args: []string{"--store", path}, want: path},
		"environment":             {env: path, want: path},
		"neither":                 {},
		"flag left empty":         {args: []string{"--store", ""}, env: path},
		"flag beside env":         {args: []string{"--store", path}, env: path + ".other", want: path},
		"from the file":           {defaultFile: []string{"store: " + path}, want: path},
		"file without a store":    {defaultFile: []string{"interval: 30s"}, want: "", stderr: daemon.Defaults().Store},
		"store missing":           {defaultFile: []string{"store: " + missing}, stderr: "rubick report: warning: rubickd's store not read, the report goes without it: store " + missing + " does not exist"},
		"--store '' beside files": {defaultFile: []string{"store: " + path}, args: []string{"--store", ""}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			env := testEnv(t)
			env.getenv = func(k string) string {
				if k == storeEnv {
					return tc.env
				}
				return ""
			}
			if tc.defaultFile != nil {
				env.configPath = writeConfig(t, tc.defaultFile...)
			}
			var out, errb bytes.Buffer
			args := append([]string{"--input", synthetic, "--json"}, tc.args...)
			// The input's one malformed tag fails the command after the
			// report is written.
			if err := reportCmd(context.Background(), args, &out, &errb, env); !errors.Is(err, report.ErrJob) {
				t.Fatalf("error = %v, want %v for the input's malformed tag", err, report.ErrJob)
			}
			var rep struct {
				Store string `json:"store"`
			}
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Store != tc.want {
				t.Errorf("store %q, want %q", rep.Store, tc.want)
			}
			if !strings.Contains(errb.String(), tc.stderr) || tc.stderr == "" && errb.Len() > 0 {
				t.Errorf("stderr %q, want %q", errb.String(), tc.stderr)
			}
		})
	}
}
