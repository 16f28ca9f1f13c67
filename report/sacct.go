package report

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// Sentinel errors callers branch on.
var (
	// ErrInput reports sacct text that cannot be read: a missing column, a
	// row with the wrong number of fields, or a value that does not parse.
	ErrInput = errors.New("bad sacct input")
	// ErrJob is wrapped by the per-job problems of a report (a malformed
	// rubick tag, for example); the rest of the report is still produced.
	ErrJob = errors.New("job not fully reported")
)

// Fields are the sacct columns the report asks for, in query order.
// Restarts are not a sacct field: they are counted from REQUEUED rows.
// sacct does not escape a '|' in text a user sets, so the one such column
// asked for, JobName, is last, where ParseSacct takes the rest of the line
// for it; Comment, another, is not asked for (the report does not use it).
var Fields = []string{
	"JobID", "Account", "QOS", "Partition", "State",
	"Submit", "Start", "End", "Elapsed", "AllocTRES", "AdminComment", "User", "JobName",
}

// otherColumns are the columns beyond Fields that saved input may have
// and the report reads.
var otherColumns = []string{"Comment", "Cluster"}

// freeText are the columns whose text users set: a '|' in them splits the
// line.
var freeText = []string{"JobName", "Comment"}

// Row is one sacct row: one run of a job.
type Row struct {
	// Line is the 1-based line of the row in the input, for error messages.
	Line    int
	JobID   string
	JobName string
	User    string
	Account string
	QOS     string
	// Partition is as sacct prints it.
	Partition string
	// State is the first word of sacct's state ("CANCELLED by 0" is
	// CANCELLED).
	State string
	// Submit, Start and End are zero when sacct prints Unknown or None, or
	// when the column is absent.
	Submit, Start, End time.Time
	// Elapsed is the run's wall time; HasElapsed is false when the column
	// is absent.
	Elapsed    time.Duration
	HasElapsed bool
	// AllocTRES is the raw allocation; GPUs is its gres/gpu count and
	// HasGPUTRES whether it names gres/gpu at all.
	AllocTRES  string
	GPUs       int
	HasGPUTRES bool
	// Nodes, CPUs and Billing come from AllocTRES (node=, cpu=,
	// billing=); 0 when absent.
	Nodes, CPUs, Billing int
	AdminComment         string
	Comment              string
}

// Columns says which of Fields an input had.
type Columns map[string]bool

// Delimiter separates the fields of the sacct output the report runs
// (--delimiter): a '|', sacct's own, may be in any field of text users or
// site tools write, AdminComment's other segments among them, and sacct
// does not escape it; the unit separator is in none.
const Delimiter = "\x1f"

// ParseSacct reads `sacct --parsable2` text with its header line, its
// fields separated by '|' or by Delimiter. Steps
// (JobID with a '.') are skipped: the report is about allocations. Errors
// wrap ErrInput and name the line, job, field and value.
func ParseSacct(r io.Reader, loc *time.Location) ([]Row, Columns, error) {
	if loc == nil {
		loc = time.Local
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var (
		idx  map[string]int
		cols Columns
		rows []Row
		line int
		// last is the column of user text that ends the line, which
		// takes the fields a '|' in it adds; -1 when none does.
		last = -1
		// parsable: --parsable (not 2) ends every line with a '|'.
		parsable bool
		// cluster is the first row's Cluster, when the input has one.
		cluster string
		// sep separates the fields: Delimiter where the header has it
		// (sacct run by the report), else sacct's '|'.
		sep = "|"
	)
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		if line == 1 {
			// A file saved by an editor that marks UTF-8.
			text = strings.TrimPrefix(text, "\ufeff")
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		if idx == nil && strings.Contains(text, Delimiter) {
			sep = Delimiter
		}
		f := strings.Split(text, sep)
		if idx == nil {
			if parsable = len(f) > 1 && strings.TrimSpace(f[len(f)-1]) == ""; parsable {
				f = f[:len(f)-1]
			}
			var err error
			if idx, cols, err = header(f, line); err != nil {
				return nil, nil, err
			}
			last = lastText(f)
			continue
		}
		if parsable && len(f) > len(idx) && f[len(f)-1] == "" {
			f = f[:len(f)-1]
		}
		if extra := len(f) - len(idx); extra > 0 && last >= 0 && sep == "|" {
			f = slices.Concat(f[:last], []string{strings.Join(f[last:last+extra+1], "|")}, f[last+extra+1:])
		}
		if len(f) != len(idx) {
			return nil, nil, fmt.Errorf("%w: line %d: %d fields, header has %d (a '|' inside a job name or comment, which sacct does not escape? put JobName last and leave Comment out)", ErrInput, line, len(f), len(idx))
		}
		get := func(name string) string {
			if i, ok := idx[name]; ok {
				return strings.TrimSpace(f[i])
			}
			return ""
		}
		row, err := parseRow(get, cols, line, loc)
		if err != nil {
			return nil, nil, err
		}
		// Job IDs are a cluster's own: jobs of two clusters with one ID
		// would be taken for runs of one job.
		if c := get("Cluster"); cluster == "" {
			cluster = c
		} else if c != "" && c != cluster {
			return nil, nil, fmt.Errorf("%w: line %d: job %q: Cluster=%q after jobs of cluster %q: the report covers one cluster; save each one's jobs apart (sacct -M %s)",
				ErrInput, line, row.JobID, clip(c), clip(cluster), clip(c))
		}
		if strings.Contains(row.JobID, ".") {
			continue
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("%w: line %d: %w", ErrInput, line+1, err)
	}
	if idx == nil {
		return nil, nil, fmt.Errorf("%w: no header line", ErrInput)
	}
	return rows, cols, nil
}

// lastText is the index of the header's last column when that is one of
// freeText, else -1.
func lastText(header []string) int {
	isText := func(col string) bool {
		return slices.ContainsFunc(freeText, func(c string) bool { return strings.EqualFold(strings.TrimSpace(col), c) })
	}
	i := len(header) - 1
	// With another such column before it, a '|' may be in either: the
	// fields it adds cannot be told apart.
	if i >= 0 && isText(header[i]) && !slices.ContainsFunc(header[:i], isText) {
		return i
	}
	return -1
}

func header(f []string, line int) (map[string]int, Columns, error) {
	idx := map[string]int{}
	cols := Columns{}
	for i, name := range f {
		name = strings.TrimSpace(name)
		// sacct capitalises as asked; compare with Fields' spelling.
		for _, want := range slices.Concat(Fields, otherColumns) {
			if strings.EqualFold(name, want) {
				name = want
			}
		}
		if _, dup := idx[name]; dup {
			return nil, nil, fmt.Errorf("%w: line %d: column %q twice", ErrInput, line, name)
		}
		idx[name] = i
		cols[name] = true
	}
	for _, need := range []string{"JobID", "State"} {
		if !cols[need] {
			return nil, nil, fmt.Errorf("%w: line %d: header lacks column %s (is the first line sacct's header?)", ErrInput, line, need)
		}
	}
	return idx, cols, nil
}

func parseRow(get func(string) string, cols Columns, line int, loc *time.Location) (Row, error) {
	r := Row{
		Line: line, JobID: get("JobID"), JobName: get("JobName"), User: get("User"), Account: get("Account"),
		QOS: get("QOS"), Partition: get("Partition"), AllocTRES: get("AllocTRES"),
		AdminComment: get("AdminComment"), Comment: get("Comment"),
	}
	bad := func(field, value string, err error) error {
		return fmt.Errorf("%w: line %d: job %q: %s=%q: %w", ErrInput, line, r.JobID, field, clip(value), err)
	}
	if r.JobID == "" {
		return r, bad("JobID", "", errors.New("empty"))
	}
	if st := strings.Fields(get("State")); len(st) > 0 {
		r.State = strings.TrimSuffix(st[0], "+")
	}
	if r.State == "" { // "+" alone is no state either
		return r, bad("State", get("State"), errors.New("empty"))
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"Submit", &r.Submit}, {"Start", &r.Start}, {"End", &r.End}} {
		v := get(t.name)
		ts, err := parseTime(v, loc)
		if err != nil {
			return r, bad(t.name, v, err)
		}
		*t.dst = ts
	}
	if cols["Elapsed"] {
		v := get("Elapsed")
		d, err := slurm.ParseElapsed(v)
		if err != nil {
			return r, bad("Elapsed", v, err)
		}
		r.Elapsed, r.HasElapsed = d, true
	}
	tres, err := ParseTRES(r.AllocTRES)
	if err != nil {
		return r, bad("AllocTRES", r.AllocTRES, err)
	}
	r.GPUs, r.HasGPUTRES = tres.GPUs, tres.HasGPU
	r.Nodes, r.CPUs, r.Billing = tres.Nodes, tres.CPUs, tres.Billing
	return r, nil
}

// timeLayouts are the forms sacct prints (SLURM_TIME_FORMAT=standard, the
// default) and RFC 3339 for inputs converted by other tools.
var timeLayouts = []string{"2006-01-02T15:04:05", time.RFC3339}

// parseTime parses a sacct time in loc; Unknown, None and empty give the
// zero time.
func parseTime(v string, loc *time.Location) (time.Time, error) {
	switch v {
	case "", "Unknown", "None":
		return time.Time{}, nil
	}
	for _, layout := range timeLayouts {
		if t, err := time.ParseInLocation(layout, v, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("want YYYY-MM-DDTHH:MM:SS, Unknown or None")
}

// TRES is what the report reads from an AllocTRES string.
type TRES struct {
	GPUs   int
	HasGPU bool
	Nodes  int
	CPUs   int
	// Billing is what Slurm billed the run by its partition's
	// TRESBillingWeights, the number sites charge allocations in.
	Billing int
}

// maxTRESCount bounds a count in an AllocTRES string, far above any
// allocation's: typed GPU counts are summed, which must not overflow.
const maxTRESCount = 1 << 40

// ParseTRES reads gres/gpu, node, cpu and billing from an AllocTRES string
// such as "billing=8,cpu=8,gres/gpu=4,mem=64G,node=1". Typed GPU entries
// ("gres/gpu:a100=4") count when the untyped total is absent.
func ParseTRES(s string) (TRES, error) {
	var t TRES
	if s == "" {
		return t, nil
	}
	typed, untyped := 0, -1
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return TRES{}, fmt.Errorf("entry %q has no '='", clip(kv))
		}
		isInt := k == "node" || k == "cpu" || k == "billing" || k == "gres/gpu" || strings.HasPrefix(k, "gres/gpu:")
		if !isInt {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxTRESCount {
			return TRES{}, fmt.Errorf("%s=%q is not an integer in 0..%d", k, clip(v), maxTRESCount)
		}
		switch {
		case k == "node":
			t.Nodes = n
		case k == "cpu":
			t.CPUs = n
		case k == "billing":
			t.Billing = n
		case k == "gres/gpu":
			untyped = n
		default:
			typed += n
			t.HasGPU = true
		}
	}
	if untyped >= 0 {
		t.GPUs, t.HasGPU = untyped, true
	} else {
		t.GPUs = typed
	}
	return t, nil
}

// allStates are sacct's job states, for --state.
var allStates = []string{"PD", "R", "S", "RQ", "RS", "RV", "CD", "CA", "F", "TO", "NF", "PR", "OOM", "BF", "DL"}

// Query says how to run sacct.
type Query struct {
	// Path is the sacct binary; "sacct" looks it up in PATH.
	Path string
	// Since bounds the jobs sacct selects (--starttime), up to now
	// (--endtime=now) whatever Until, the end of the report's window,
	// which Build applies; both zero leave the window to sacct's default.
	Since, Until time.Time
	// Location is the zone sacct runs in (its times carry no offset); nil
	// means the local zone.
	Location *time.Location
}

// Argv is the sacct command line for q: every user's allocations, one row
// per run (--duplicates), parsable with a header, the columns of Fields.
func (q Query) Argv() []string {
	path := q.Path
	if path == "" {
		path = "sacct"
	}
	argv := []string{path, "--allusers", "--allocations", "--duplicates", "--parsable2", "--delimiter=" + Delimiter,
		"--format=" + strings.Join(Fields, ",")}
	loc := q.Location
	if loc == nil {
		loc = time.Local
	}
	const layout = "2006-01-02T15:04:05"
	if !q.Since.IsZero() {
		// With a window and no states, sacct selects by eligible time,
		// which a held job lacks: rubick holds every job until it plans
		// it, and one cancelled before that (22.05 and 24.11 labs) would
		// be left out. Every state selects what the window alone does,
		// and those. (Without --starttime, states would start it now.)
		argv = append(argv, "--state="+strings.Join(allStates, ","), "--starttime="+q.Since.In(loc).Format(layout))
	}
	if !q.Since.IsZero() || !q.Until.IsZero() {
		// Up to now, whatever Until: with states, sacct selects a job by
		// what it was within the window, and one held past Until (rubick
		// holds every job until it plans it) was nothing there, so a job
		// submitted before Until and released after it was left out
		// (22.05 lab). Build keeps those submitted before Until. Without
		// an end, states would end the window at its start.
		argv = append(argv, "--endtime=now")
	}
	return argv
}

// Run runs sacct through r (argv, never a shell) and returns its output.
func (q Query) Run(ctx context.Context, r slurm.Runner) ([]byte, error) {
	out, err := r.Run(ctx, q.Argv())
	if err != nil {
		return nil, fmt.Errorf("report: sacct: %w", err)
	}
	return out, nil
}

// clip bounds input text quoted in error messages.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
