package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/report"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// storeEnv overrides rubickd's store setting for explain, queue, status,
// store and report, as it does for rubickd.
const storeEnv = "RUBICK_STORE"

// cliEnv is what the report, explain and status commands take from the
// process, injected so tests fix the clock, the zone and the collaborators.
type cliEnv struct {
	now    func() time.Time
	getenv func(string) string
	// environ is the process environment, whose RUBICK_* variables
	// rubickd's configuration is read with.
	environ func() []string
	// configPath is rubickd's default configuration file.
	configPath string
	loc        *time.Location
	runner     slurm.Runner
	http       *http.Client
	stdin      io.Reader
}

func processEnv() cliEnv {
	return cliEnv{
		now: time.Now, getenv: os.Getenv, environ: os.Environ, configPath: daemon.DefaultConfigPath,
		loc: time.Local, runner: slurm.ExecRunner{},
		http: &http.Client{Timeout: 5 * time.Second}, stdin: os.Stdin,
	}
}

func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return reportCmd(ctx, args, stdout, stderr, processEnv())
}

func reportCmd(ctx context.Context, args []string, stdout, stderr io.Writer, env cliEnv) error {
	fset := newFlags("report", "Summarise finished and running jobs from Slurm accounting (sacct): JCT, queueing,\n"+
		"GPU-hours, reconfigurations, SLO violations and plan history per model type, account and tenant.\n"+
		"docs/report.md defines every column.", stderr)
	since := fset.String("since", "", "first submit time: YYYY-MM-DD[THH:MM:SS], RFC 3339, now, or -<N>d / -<duration> before now (default: 7 days before --until; no bound with --input unless given)")
	until := fset.String("until", "now", "submit times before this; same forms as --since (no bound with --input unless given)")
	sacct := fset.String("sacct", "sacct", "sacct binary to run (argv, no shell)")
	input := fset.String("input", "", "read saved sacct --parsable2 output (with its header) from this `file` instead of running sacct; - for stdin")
	storePath := fset.String("store", "", "rubick store to add plan history and the SLO check from (optional; default: $"+storeEnv+
		", else rubickd's store setting when its configuration file is read)")
	cfg := configFlag(fset, env, stderr)
	asCSV := fset.Bool("csv", false, "write CSV: one row per summary (per job with --jobs)")
	asJSON := fset.Bool("json", false, "write the whole report as JSON")
	jobs := fset.Bool("jobs", false, "also list every job (table) or list jobs instead of summaries (CSV)")
	plotDir := fset.String("plot", "", "write charts (jct-cdf, gpu-alloc, plans) into this directory")
	plotFormat := fset.String("plot-format", "png", "chart format: png or svg")
	capacity := fset.Int("gpus", 0, "cluster GPUs, to plot allocation as a fraction (0: plot GPU counts)")
	by := fset.String("by", strings.Join(report.DefaultBy, ","), "group by these, comma-separated: "+strings.Join(report.Dimensions, ", "))
	overhead := fset.Duration("restart-overhead", report.DefaultRestartOverhead, "GPU time lost per reconfiguration or interruption on top of the measured gap (checkpoint load, warm-up)")
	tz := fset.String("tz", "Local", "time zone sacct prints its times in (IANA name, Local or UTC)")
	timeout := fset.Duration("timeout", 10*time.Minute, "time bound of the sacct run (a hung slurmdbd must not hang the report)")
	if help, err := parseFlags(fset, args); help || err != nil {
		return err
	}
	set := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// The store explain and queue read, where the site sets it; still
	// optional: users without one get sacct's report.
	fromConfig := false
	if !set["store"] {
		*storePath = env.getenv(storeEnv)
	}
	if !set["store"] && *storePath == "" {
		c, err := cfg()
		if err != nil {
			return err
		}
		// Without a file rubickd's default store is no site's setting.
		if c.File != "" {
			*storePath, fromConfig = c.Store, true
		}
	}
	if *asCSV && *asJSON {
		return fmt.Errorf("%w: --csv and --json are exclusive", errUsage)
	}
	switch {
	case *plotFormat != "png" && *plotFormat != "svg":
		return fmt.Errorf("%w: --plot-format=%q, want png or svg", errUsage, *plotFormat)
	case *capacity < 0:
		return fmt.Errorf("%w: --gpus=%d must be >= 0 (0: plot GPU counts)", errUsage, *capacity)
	case *timeout <= 0:
		return fmt.Errorf("%w: --timeout=%s must be > 0", errUsage, *timeout)
	case *overhead < 0:
		return fmt.Errorf("%w: --restart-overhead=%s must be >= 0", errUsage, *overhead)
	}
	// A flag that would do nothing is refused: its user expects it to.
	const noSacct, noPlot = "with --input, which reads saved output and runs no sacct", "without --plot, which it is for"
	for _, f := range []struct {
		name string
		idle bool
		why  string
	}{
		{"sacct", set["input"], noSacct}, {"timeout", set["input"], noSacct},
		{"gpus", !set["plot"], noPlot}, {"plot-format", !set["plot"], noPlot},
	} {
		if set[f.name] && f.idle {
			return fmt.Errorf("%w: --%s %s", errUsage, f.name, f.why)
		}
	}
	loc := env.loc
	if *tz != "Local" {
		l, err := time.LoadLocation(*tz)
		if err != nil {
			return fmt.Errorf("%w: --tz=%q: %v", errUsage, *tz, err)
		}
		loc = l
	}
	now := env.now().In(loc)
	var o report.Options
	var err error
	if *input == "" || set["until"] {
		if o.Until, err = parseWhen(*until, now, loc); err != nil {
			return fmt.Errorf("%w: --until: %v", errUsage, err)
		}
	}
	switch {
	case set["since"]:
		if o.Since, err = parseWhen(*since, now, loc); err != nil {
			return fmt.Errorf("%w: --since: %v", errUsage, err)
		}
	case *input == "":
		// The default window is the 7 days before --until.
		o.Since = o.Until.AddDate(0, 0, -7)
	}
	o.RestartOverhead = *overhead
	for _, d := range strings.Split(*by, ",") {
		// A dimension named twice is grouped by once, not printed twice.
		if d = strings.TrimSpace(d); d != "" && !slices.Contains(o.By, d) {
			o.By = append(o.By, d)
		}
	}
	if o.By == nil {
		if !*jobs {
			return fmt.Errorf("%w: --by=%q groups by nothing: name a dimension (%s), or list the jobs with --jobs", errUsage, *by, strings.Join(report.Dimensions, ", "))
		}
		o.By = []string{}
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}

	var text []byte
	// readLoc is the zone of the input's times, which carry no offset.
	readLoc := loc
	switch *input {
	case "":
		var run slurm.Runner
		run, readLoc = sacctRunner(env.runner, loc)
		q := report.Query{Path: *sacct, Since: o.Since, Until: o.Until, Location: readLoc}
		if text, err = q.Run(ctx, slurm.TimedRunner{Runner: run, Timeout: *timeout}); err != nil {
			return err
		}
	case "-":
		if text, err = io.ReadAll(env.stdin); err != nil {
			return fmt.Errorf("report: read stdin: %w", err)
		}
	default:
		if text, err = os.ReadFile(*input); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	rows, cols, err := report.ParseSacct(bytes.NewReader(text), readLoc)
	for i := range rows {
		r := &rows[i]
		r.Submit, r.Start, r.End = r.Submit.In(loc), r.Start.In(loc), r.End.In(loc)
	}
	if err != nil {
		if *input != "" {
			return fmt.Errorf("report: %s: %w", *input, err)
		}
		return fmt.Errorf("report: %w", err)
	}
	rep, err := report.Build(rows, cols, o)
	if err != nil {
		return err
	}
	if *storePath != "" {
		st, err := openStore(ctx, *storePath)
		switch {
		case err != nil && fromConfig:
			// Users may read rubickd's configuration but not its store:
			// the one they did not ask for must not cost them the report.
			fmt.Fprintf(stderr, "rubick report: warning: rubickd's store not read, the report goes without it: %v\n", err)
		case err != nil:
			return err
		default:
			defer st.Close()
			if err := rep.Enrich(ctx, st, *storePath, model.DefaultEnv()); err != nil {
				return err
			}
		}
	}
	switch {
	case *asJSON:
		err = rep.WriteJSON(stdout)
	case *asCSV:
		err = rep.WriteCSV(stdout, *jobs)
	default:
		err = rep.WriteTable(stdout, *jobs)
	}
	if err != nil {
		return err
	}
	if *plotDir != "" {
		files, err := rep.Plot(*plotDir, report.PlotOptions{Format: *plotFormat, CapacityGPUs: *capacity, Now: now})
		for _, f := range files {
			fmt.Fprintln(stderr, "wrote", f)
		}
		if err != nil && !errors.Is(err, report.ErrNoData) {
			return err
		}
		if err != nil {
			fmt.Fprintln(stderr, "rubick report:", err)
		}
	}
	return rep.Err()
}

// maxDays bounds a -<N>d of --since and --until: the longest time.Duration,
// 292 years, which bounds a -<duration>.
const maxDays = int(math.MaxInt64 / int64(24*time.Hour))

// parseWhen reads a point in time: now, -7d, -36h, a date, a date and time
// (in loc), or RFC 3339.
func parseWhen(s string, now time.Time, loc *time.Location) (time.Time, error) {
	switch {
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "-"):
		if n, ok := strings.CutSuffix(s[1:], "d"); ok {
			// Bounded as a -<duration> is: AddDate wraps a day count near
			// 2^63 around into the future.
			days, err := strconv.Atoi(n)
			if err != nil || days < 0 || days > maxDays {
				return time.Time{}, fmt.Errorf("%q: want -<days>d, at most %d days", s, maxDays)
			}
			return now.AddDate(0, 0, -days), nil
		}
		d, err := time.ParseDuration(s[1:])
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("%q: want -<N>d or a Go duration such as -36h", s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{"2006-01-02", "2006-01-02T15:04:05", "2006-01-02 15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, nil
		}
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q: want now, -<N>d, -<duration>, YYYY-MM-DD[THH:MM:SS] or RFC 3339", s)
}

// storePathFlag adds --store to fs for explain, queue, status and store,
// and returns what gives the path to use once fs is parsed: the flag when
// given, else $RUBICK_STORE, else rubickd's store setting (cfg, whose
// defaults are rubickd's).
func storePathFlag(fs *flag.FlagSet, env cliEnv, cfg func() (rubickdConfig, error)) func() (string, error) {
	path := fs.String("store", "", "rubick store (SQLite) (default: $"+storeEnv+", else rubickd's store setting, else "+daemon.Defaults().Store+")")
	return func() (string, error) {
		if flagGiven(fs, "store") {
			return *path, nil
		}
		if p := env.getenv(storeEnv); p != "" {
			return p, nil
		}
		c, err := cfg()
		return c.Store, err
	}
}

// openStoreFlag opens the existing store that storePath (storePathFlag)
// names, for command cmd, and returns it with its path.
func openStoreFlag(ctx context.Context, cmd string, storePath func() (string, error), opts ...store.Option) (*store.Store, string, error) {
	path, err := storePath()
	if err != nil {
		return nil, "", err
	}
	st, err := openStore(ctx, path, opts...)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", cmd, err)
	}
	return st, path, nil
}

// openStore opens an existing store to read it (store.ReadOnly, unless
// opts says to write it, store.WithoutMigrating): a user may read a store
// whose directory only rubickd may write. It never creates one, so a
// mistyped path is an error rather than an empty database. Nor does it
// migrate one: the running rubickd, when older than this rubick, would
// refuse the store afterwards, so one of an older schema is refused with
// store.ErrSchemaTooOld until the new rubickd migrates it.
func openStore(ctx context.Context, path string, opts ...store.Option) (*store.Store, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("store %s does not exist (set --store, %s or --config): %w", path, storeEnv, err)
		}
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	if len(opts) == 0 {
		opts = []store.Option{store.ReadOnly()}
	}
	st, err := store.Open(ctx, path, append([]store.Option{store.WithReaders(2)}, opts...)...)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// sacctRunner is r with sacct printing, and reading --starttime and
// --endtime, in UTC, and the zone its times are then read in. sacct prints
// local times without an offset: in a zone with daylight saving, the hour
// the clocks go back happens twice, and its times could not be told apart
// (a job's End read before its Submit). A runner other than ExecRunner
// (tests) keeps loc.
func sacctRunner(r slurm.Runner, loc *time.Location) (slurm.Runner, *time.Location) {
	if e, ok := r.(slurm.ExecRunner); ok {
		e.Env = append(slices.Clip(e.Env), "TZ=UTC")
		return e, time.UTC
	}
	return r, loc
}
