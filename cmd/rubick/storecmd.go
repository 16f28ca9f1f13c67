package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/rubick-sched/rubick/store"
)

const storeUsage = `usage: rubick store <stats|prune> [flags]

  stats   what the store holds: rows per table, reported samples, decision cycles, size
  prune   apply a retention now (rubickd prunes hourly by its retention settings)

Run 'rubick store <subcommand> -h' for its flags.`

func runStore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return storeCmd(ctx, args, stdout, stderr, processEnv())
}

// storeCmd implements `rubick store stats|prune`.
func storeCmd(ctx context.Context, args []string, stdout, stderr io.Writer, env cliEnv) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, storeUsage)
		return nil
	}
	switch args[0] {
	case "stats":
		return storeStats(ctx, args[1:], stdout, stderr, env)
	case "prune":
		return storePrune(ctx, args[1:], stdout, stderr, env)
	}
	fmt.Fprintln(stderr, storeUsage)
	return fmt.Errorf("%w: unknown store subcommand %q", errUsage, args[0])
}

func storeStats(ctx context.Context, args []string, stdout, stderr io.Writer, env cliEnv) error {
	fs := newFlags("store stats", "Show what rubick's store holds: rows per table, the samples jobs reported,\n"+
		"the time span of the stored decision cycles and the database size.", stderr)
	storePath := storePathFlag(fs, env)
	asJSON := fs.Bool("json", false, "write JSON")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	path := storePath()
	st, err := openStore(ctx, path)
	if err != nil {
		return fmt.Errorf("store stats: %w", err)
	}
	defer st.Close()
	s, err := st.Stats(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, struct {
			Store string `json:"store"`
			store.Stats
		}{path, s})
	}
	ew := &stickyWriter{w: stdout}
	fmt.Fprintf(ew, "store %s: schema version %d, %s (%s free for reuse)\n", path, s.SchemaVersion, bytesString(s.Bytes), bytesString(s.FreeBytes))
	if s.NewestCycle.IsZero() {
		fmt.Fprintln(ew, "decision cycles: none")
	} else {
		fmt.Fprintf(ew, "decision cycles: %s .. %s\n", utcTime(s.OldestCycle), utcTime(s.NewestCycle))
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  table\trows")
	for _, t := range sortedKeys(s.Rows) {
		fmt.Fprintf(tw, "  %s\t%d\n", t, s.Rows[t])
		if t == "samples" {
			fmt.Fprintf(tw, "    of them reported by jobs\t%d\n", s.OnlineSamples)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return ew.err
}

func storePrune(ctx context.Context, args []string, stdout, stderr io.Writer, env cliEnv) error {
	fs := newFlags("store prune", "Delete what a retention does not keep, now: per-job decision reasons older\n"+
		"than --reasons (each job's newest stays) and reported samples beyond the newest\n"+
		"--samples-per-config per job and configuration. Plan history, fits and profile\n"+
		"samples are never deleted. Safe while rubickd runs.", stderr)
	storePath := storePathFlag(fs, env)
	asJSON := fs.Bool("json", false, "write JSON")
	reasons := fs.Duration("reasons", 14*24*time.Hour, "keep per-job reasons this long; 0 keeps all")
	perConfig := fs.Int("samples-per-config", 100, "reported samples kept per job and configuration; 0 keeps all")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if *reasons < 0 {
		return fmt.Errorf("%w: --reasons=%v must be >= 0", errUsage, *reasons)
	}
	if *perConfig < 0 {
		return fmt.Errorf("%w: --samples-per-config=%d must be >= 0", errUsage, *perConfig)
	}
	path := storePath()
	st, err := openStore(ctx, path)
	if err != nil {
		return fmt.Errorf("store prune: %w", err)
	}
	defer st.Close()
	r := store.Retention{SamplesPerConfig: *perConfig}
	if *reasons > 0 {
		r.ReasonsBefore = env.now().Add(-*reasons)
	}
	p, err := st.Prune(ctx, r)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, struct {
			Store string `json:"store"`
			store.Pruned
		}{path, p})
	}
	_, err = fmt.Fprintf(stdout, "store %s: deleted %d reasons, %d decision cycles, %d reported samples\n",
		path, p.Reasons, p.Decisions, p.Samples)
	return err
}

// bytesString writes a size in binary units.
func bytesString(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[i])
}
