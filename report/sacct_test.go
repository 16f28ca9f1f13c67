package report

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/slurm"
)

func TestParseTRES(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    TRES
		wantErr bool
	}{
		"gpu":        {in: "billing=8,cpu=8,gres/gpu=4,mem=64G,node=1", want: TRES{GPUs: 4, HasGPU: true, Nodes: 1, CPUs: 8, Billing: 8}},
		"no gpu":     {in: "billing=1,cpu=1,mem=500G,node=1", want: TRES{Nodes: 1, CPUs: 1, Billing: 1}},
		"empty":      {in: ""},
		"typed only": {in: "cpu=2,gres/gpu:a100=2,gres/gpu:v100=1,node=2", want: TRES{GPUs: 3, HasGPU: true, Nodes: 2, CPUs: 2}},
		"typed and total": {in: "gres/gpu=4,gres/gpu:a100=4,node=1",
			want: TRES{GPUs: 4, HasGPU: true, Nodes: 1}},
		"fractional mem is ignored": {in: "mem=62.50G,gres/gpu=16,node=2", want: TRES{GPUs: 16, HasGPU: true, Nodes: 2}},
		"bad gpu":                   {in: "gres/gpu=four", wantErr: true},
		"bad billing":               {in: "billing=-2,cpu=1", wantErr: true},
		"no equals":                 {in: "cpu=1,node", wantErr: true},
		"huge typed gpus":           {in: "gres/gpu:a100=9223372036854775807,gres/gpu:v100=1", wantErr: true},
		"largest count":             {in: "gres/gpu:a100=1099511627776,gres/gpu:v100=1099511627776", want: TRES{GPUs: 2 << 40, HasGPU: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseTRES(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseTRES(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseTRES(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

// TestParseSacctErrors checks that bad input names the line, the job, the
// field and the value.
func TestParseSacctErrors(t *testing.T) {
	const head = "JobID|State|Submit|Elapsed|AllocTRES\n"
	tests := map[string]struct {
		in   string
		want []string // substrings of the error
	}{
		"bad elapsed":    {in: head + "7|COMPLETED|None|ten minutes|\n", want: []string{"line 2", `job "7"`, `Elapsed="ten minutes"`}},
		"bad submit":     {in: head + "7|COMPLETED|yesterday|00:00:01|\n", want: []string{`Submit="yesterday"`}},
		"bad tres":       {in: head + "8|COMPLETED|None|00:00:01|gres/gpu=x\n", want: []string{`job "8"`, `AllocTRES="gres/gpu=x"`, "gres/gpu"}},
		"empty state":    {in: head + "9||None|00:00:01|\n", want: []string{`State=""`}},
		"plus state":     {in: head + "9|+ 0|None|00:00:01|\n", want: []string{`State="+ 0"`}},
		"empty job id":   {in: head + "|COMPLETED|None|00:00:01|\n", want: []string{`JobID=""`}},
		"field count":    {in: head + "7|COMPLETED|None|00:00:01|a|b|c\n", want: []string{"line 2", "7 fields, header has 5"}},
		"no job id":      {in: "State|Elapsed\nCOMPLETED|00:00:01\n", want: []string{"lacks column JobID"}},
		"duplicate col":  {in: "JobID|State|State\n1|A|B\n", want: []string{`column "State" twice`}},
		"empty input":    {in: "", want: []string{"no header"}},
		"data as header": {in: "44|mt-test|COMPLETED\n", want: []string{"lacks column JobID"}},
		// Before, the two clusters' job 300 was one job run twice.
		"two clusters": {in: "cluster|JobID|State\na|300|COMPLETED\n|301|COMPLETED\nb|300|COMPLETED\n",
			want: []string{"line 4", `job "300"`, `Cluster="b" after jobs of cluster "a"`, "sacct -M b"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := ParseSacct(strings.NewReader(tc.in), time.UTC)
			if !errors.Is(err, ErrInput) {
				t.Fatalf("error = %v, want ErrInput", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParseSacctRows(t *testing.T) {
	in := "JobID|State|Start|Elapsed|AllocTRES|\n" + // --parsable: a trailing '|'
		"5|CANCELLED by 0|2026-11-02T10:00:00|00:00:01|billing=2,cpu=2,gres/gpu=2,mem=8000M,node=2|\n" +
		"5.batch|CANCELLED|2026-11-02T10:00:00|00:00:01|cpu=1\n" +
		"\n" +
		"6|RUNNING|Unknown|00:00:00|\n"
	rows, cols, err := ParseSacct(strings.NewReader(in), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{Line: 2, JobID: "5", State: "CANCELLED", Start: time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC),
			Elapsed: time.Second, HasElapsed: true, AllocTRES: "billing=2,cpu=2,gres/gpu=2,mem=8000M,node=2",
			GPUs: 2, HasGPUTRES: true, Nodes: 2, CPUs: 2, Billing: 2},
		{Line: 5, JobID: "6", State: "RUNNING", HasElapsed: true},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Columns{"JobID": true, "State": true, "Start": true, "Elapsed": true, "AllocTRES": true}, cols); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
}

// TestParseSacctPipeInName: sacct does not escape a '|' in a job name; the
// name last takes the rest of the line, elsewhere the row is an error.
func TestParseSacctPipeInName(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []string // job names
		wantErr string
	}{
		"parsable2": {in: "JobID|State|JobName\n7|COMPLETED|a|b||c\n8|FAILED|plain\n", want: []string{"a|b||c", "plain"}},
		// The report's own sacct run: a '|' anywhere is text.
		"delimiter": {in: "JobID\x1fState\x1fAdminComment\x1fUser\x1fJobName\n7\x1fCOMPLETED\x1fsite|x\x1falice\x1fa|b\n",
			want: []string{"a|b"}},
		"parsable":               {in: "JobID|State|JobName|\n7|COMPLETED|a|b|\n8|FAILED||\n", want: []string{"a|b", ""}},
		"comment last":           {in: "JobID|State|Comment\n7|COMPLETED|x|y\n", want: []string{""}},
		"name not last":          {in: "JobID|JobName|State\n7|a|b|COMPLETED\n", wantErr: "4 fields, header has 3"},
		"another column last":    {in: "JobID|State|User\n7|COMPLETED|u|v\n", wantErr: "4 fields, header has 3"},
		"a name with no pipe ok": {in: "JobID|State|JobName\n7|COMPLETED|n\n", want: []string{"n"}},
		// Before, the empty AdminComment was taken for a trailing '|' and
		// the columns after the name shifted: User "v2", Account "alice".
		"name not last, empty column last": {in: "JobID|State|JobName|User|Account|AdminComment\n7|COMPLETED|train|v2|alice|physics|\n",
			wantErr: "7 fields, header has 6"},
		// The '|' may be in either: before, Comment took the name's rest.
		"name and comment last": {in: "JobID|JobName|State|Comment\n7|a|b|COMPLETED|note\n", wantErr: "5 fields, header has 4"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rows, _, err := ParseSacct(strings.NewReader(tc.in), time.UTC)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want ErrInput saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range rows {
				names = append(names, r.JobName)
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("job names (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQueryArgv(t *testing.T) {
	q := Query{Path: "/usr/bin/sacct", Since: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		Until: time.Date(2026, 11, 8, 12, 30, 0, 0, time.UTC), Location: time.UTC}
	want := []string{"/usr/bin/sacct", "--allusers", "--allocations", "--duplicates", "--parsable2", "--delimiter=\x1f",
		"--format=JobID,Account,QOS,Partition,State,Submit,Start,End,Elapsed,AllocTRES,AdminComment,User,JobName",
		"--state=PD,R,S,RQ,RS,RV,CD,CA,F,TO,NF,PR,OOM,BF,DL", "--starttime=2026-11-01T00:00:00", "--endtime=now"}
	if diff := cmp.Diff(want, q.Argv()); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if got := (Query{}).Argv(); got[0] != "sacct" || len(got) != 7 {
		t.Errorf("default argv = %q, want sacct without time bounds", got)
	}
}

// TestQueryRunFakeSacct runs a fake sacct binary through the real exec
// path: it records its arguments one per line and prints a saved output.
func TestQueryRunFakeSacct(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	sample, err := filepath.Abs("testdata/synthetic.txt")
	if err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > '" + argsFile + "'\ncat '" + sample + "'\n"
	bin := filepath.Join(dir, "sacct")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	q := Query{Path: bin, Since: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), Location: time.UTC}
	out, err := q.Run(context.Background(), slurm.ExecRunner{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(sample)
	if diff := cmp.Diff(string(want), string(out)); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	gotArgs, _ := os.ReadFile(argsFile)
	if diff := cmp.Diff(strings.Join(q.Argv()[1:], "\n")+"\n", string(gotArgs)); diff != "" {
		t.Errorf("argv seen by sacct (-want +got):\n%s", diff)
	}

	failing := filepath.Join(dir, "sacct-fail")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho 'sacct: error: Problem talking to the database' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Query{Path: failing}.Run(context.Background(), slurm.ExecRunner{})
	if err == nil || !strings.Contains(err.Error(), "Problem talking to the database") {
		t.Errorf("failing sacct: error = %v, want its stderr", err)
	}
}

// TestQueryRunTimeFormat: sacct writes its times as SLURM_TIME_FORMAT says,
// which sites often set in users' profiles ("relative", "%F %T"); the
// report reads the standard form only, so sacct must run with that.
func TestQueryRunTimeFormat(t *testing.T) {
	t.Setenv("SLURM_TIME_FORMAT", "relative")
	dir := t.TempDir()
	bin := filepath.Join(dir, "sacct")
	script := "#!/bin/sh\necho 'JobID|State|Submit'\necho \"1|COMPLETED|${SLURM_TIME_FORMAT:-unset}\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := Query{Path: bin}.Run(context.Background(), slurm.ExecRunner{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "JobID|State|Submit\n1|COMPLETED|standard\n"; string(out) != want {
		t.Errorf("sacct saw SLURM_TIME_FORMAT as in %q, want %q", out, want)
	}
}

// FuzzParseSacct checks that whatever ParseSacct accepts is a row the
// report can use: a job (not a step) with a state, a duration that is not
// negative and TRES counts that are not either; and that what it refuses
// wraps ErrInput.
func FuzzParseSacct(f *testing.F) {
	for _, name := range []string{"sacct-22.05.txt", "synthetic.txt"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	for _, s := range []string{
		"JobID|State|Start|Elapsed|AllocTRES\n5|CANCELLED by 0|2026-11-02T10:00:00|00:00:01|billing=2,cpu=2,gres/gpu=2,mem=8000M,node=2|\n5.batch|CANCELLED|2026-11-02T10:00:00|00:00:01|cpu=1\n\n6|RUNNING|Unknown|00:00:00|\n",
		"JobID|State|JobName\n7|COMPLETED|a|b||c\n8|FAILED|plain\n",
		"JobID|State|JobName|\n7|COMPLETED|a|b|\n8|FAILED||\n",
		"JobID|State|Submit|Elapsed|AllocTRES\n7|COMPLETED|None|ten minutes|\n",
		"JobID|State|Elapsed\n7|COMPLETED|2-03:04:05.5\r\n",
		"JobID|State|Elapsed|AllocTRES\n7|COMPLETED|106751-23:47:17|gres/gpu:a=9223372036854775807,gres/gpu:b=1\n8|FAILED|00:NaN|\n",
		"JobID|State|State\n1|A|B\n",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		rows, cols, err := ParseSacct(strings.NewReader(in), time.UTC)
		if err != nil {
			if !errors.Is(err, ErrInput) {
				t.Fatalf("error %v does not wrap ErrInput", err)
			}
			return
		}
		if !cols["JobID"] || !cols["State"] {
			t.Fatalf("columns %v lack JobID or State", cols)
		}
		line := 0
		for _, r := range rows {
			switch {
			case r.Line <= line:
				t.Fatalf("row at line %d after line %d", r.Line, line)
			case r.JobID == "" || strings.Contains(r.JobID, "."):
				t.Fatalf("line %d: job id %q", r.Line, r.JobID)
			case r.State == "":
				t.Fatalf("line %d: no state", r.Line)
			case r.Elapsed < 0:
				t.Fatalf("line %d: negative elapsed %v", r.Line, r.Elapsed)
			case r.HasElapsed != cols["Elapsed"]:
				t.Fatalf("line %d: HasElapsed %v with columns %v", r.Line, r.HasElapsed, cols)
			case r.GPUs < 0 || r.Nodes < 0 || r.CPUs < 0 || r.Billing < 0:
				t.Fatalf("line %d: negative count in %+v", r.Line, r)
			}
			line = r.Line
		}
	})
}

// FuzzParseTRES checks that an AllocTRES string ParseTRES accepts gives
// counts that are not negative, and GPUs only where it names gres/gpu.
func FuzzParseTRES(f *testing.F) {
	for _, s := range []string{
		"billing=8,cpu=8,gres/gpu=4,mem=64G,node=1", "billing=1,cpu=1,mem=500G,node=1", "",
		"cpu=2,gres/gpu:a100=2,gres/gpu:v100=1,node=2", "gres/gpu=4,gres/gpu:a100=4,node=1",
		"mem=62.50G,gres/gpu=16,node=2", "gres/gpu=four", "billing=-2,cpu=1", "cpu=1,node",
		"gres/gpu:a100=9223372036854775807,gres/gpu:v100=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tres, err := ParseTRES(s)
		if err != nil {
			return
		}
		if tres.GPUs < 0 || tres.Nodes < 0 || tres.CPUs < 0 || tres.Billing < 0 {
			t.Fatalf("ParseTRES(%q) = %+v: a negative count", s, tres)
		}
		if !tres.HasGPU && tres.GPUs != 0 {
			t.Fatalf("ParseTRES(%q) = %+v: GPUs without gres/gpu", s, tres)
		}
	})
}

// TestParseSacctOneCluster: input of one cluster, its Cluster column
// named as the user spelled it, reads as any other.
func TestParseSacctOneCluster(t *testing.T) {
	rows, cols, err := ParseSacct(strings.NewReader("JobID|State|CLUSTER\n300|COMPLETED|a\n301|FAILED|a\n"), time.UTC)
	if err != nil || len(rows) != 2 || !cols["Cluster"] {
		t.Fatalf("ParseSacct = %d rows, columns %v, %v; want 2 rows and the Cluster column", len(rows), cols, err)
	}
}

// TestParseSacctBOM: a saved file that starts with a UTF-8 byte order
// mark reads as one without (before: "header lacks column JobID").
func TestParseSacctBOM(t *testing.T) {
	rows, _, err := ParseSacct(strings.NewReader("\ufeffJobID|State\r\n7|COMPLETED\r\n"), time.UTC)
	if err != nil || len(rows) != 1 || rows[0].JobID != "7" {
		t.Errorf("ParseSacct = %+v, %v; want job 7", rows, err)
	}
}
