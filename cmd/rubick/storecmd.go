package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/store"
)

const storeUsage = `usage: rubick store <stats|specs|prune> [flags]

  stats   what the store holds: rows per table, reported samples, decision cycles, size
  specs   each model type's spec, its current fit, and the specs rubickd --update-specs replaced
  prune   apply a retention now (rubickd prunes hourly by its retention settings)

Run 'rubick store <subcommand> -h' for its flags.`

func runStore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return storeCmd(ctx, args, stdout, stderr, processEnv())
}

// storeCmd implements `rubick store stats|specs|prune`.
func storeCmd(ctx context.Context, args []string, stdout, stderr io.Writer, env cliEnv) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, storeUsage)
		return nil
	}
	switch args[0] {
	case "stats":
		return storeStats(ctx, args[1:], stdout, stderr, env)
	case "specs":
		return storeSpecs(ctx, args[1:], stdout, stderr, env)
	case "prune":
		return storePrune(ctx, args[1:], stdout, stderr, env)
	}
	fmt.Fprintln(stderr, storeUsage)
	return fmt.Errorf("%w: unknown store subcommand %q", errUsage, args[0])
}

func storeStats(ctx context.Context, args []string, stdout, stderr io.Writer, env cliEnv) error {
	fs := newFlags("store stats", "Show what rubick's store holds: rows per table, the samples jobs reported,\n"+
		"the time span of the stored decision cycles and the database size.", stderr)
	storePath := storePathFlag(fs, env, configFlag(fs, env, stderr))
	asJSON := fs.Bool("json", false, "write JSON")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	st, path, err := openStoreFlag(ctx, "store stats", storePath)
	if err != nil {
		return err
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
		switch t {
		case "samples":
			fmt.Fprintf(tw, "    of them reported by jobs\t%d\n", s.OnlineSamples)
		case "plan_history":
			fmt.Fprintf(tw, "    of them pending\t%d\n", s.PendingActions)
			fmt.Fprintf(tw, "    of them requeues awaiting their tag\t%d\n", s.AwaitingTag)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return ew.err
}

// specsView is what `rubick store specs` shows.
type specsView struct {
	Store  string     `json:"store"`
	Models []specView `json:"model_types"`
}

// specView is a model type's stored spec and the specs it replaced.
type specView struct {
	Name string     `json:"name"`
	Spec model.Spec `json:"spec"`
	// FitID is the type's current fit; nil: none.
	FitID *int64 `json:"fit_id"`
	// Replaced are the specs rubickd --update-specs replaced, newest first.
	Replaced []replacedView `json:"replaced"`
}

// replacedView is a replaced spec.
type replacedView struct {
	Replaced time.Time  `json:"replaced"`
	Spec     model.Spec `json:"spec"`
	// FitID is the fit that was current under the spec; nil: none.
	FitID *int64 `json:"fit_id"`
	// Changes are the keys the spec that replaced it changed, "key: old -> new".
	Changes []string `json:"changes"`
}

func storeSpecs(ctx context.Context, args []string, stdout, stderr io.Writer, env cliEnv) error {
	fs := newFlags("store specs", "Show each model type's spec as the store holds it (models.json's keys), its\n"+
		"current fit, and the specs rubickd --update-specs replaced, newest first: when,\n"+
		"the keys that changed (old -> new) and the fit that was current under each.", stderr)
	storePath := storePathFlag(fs, env, configFlag(fs, env, stderr))
	name := fs.String("model", "", "show this model type only (default: every one)")
	asJSON := fs.Bool("json", false, "write JSON")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	st, path, err := openStoreFlag(ctx, "store specs", storePath)
	if err != nil {
		return err
	}
	defer st.Close()
	v, err := readSpecs(ctx, st, path, *name)
	if err != nil {
		return fmt.Errorf("store specs: %w", err)
	}
	if *asJSON {
		return writeJSON(stdout, v)
	}
	return v.write(stdout)
}

// readSpecs reads the spec history of the model type name, or of every
// type for "".
func readSpecs(ctx context.Context, st *store.Store, path, name string) (specsView, error) {
	v := specsView{Store: path, Models: []specView{}}
	var types []store.ModelType
	if name == "" {
		var err error
		if types, err = st.ModelTypes(ctx); err != nil {
			return v, err
		}
	} else {
		t, err := st.ModelType(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return v, fmt.Errorf("--model %q is not a model type of the store %s: %w", name, path, err)
		}
		if err != nil {
			return v, err
		}
		types = []store.ModelType{t}
	}
	for _, t := range types {
		m := specView{Name: t.Spec.Name, Spec: t.Spec, Replaced: []replacedView{}}
		fit, err := st.CurrentFit(ctx, t.Spec.Name)
		switch {
		case err == nil:
			m.FitID = &fit.ID
		case !errors.Is(err, store.ErrNotFound):
			return v, err
		}
		replaced, err := st.ReplacedSpecs(ctx, t.Spec.Name)
		if err != nil {
			return v, err
		}
		// Each spec was replaced by the one stored after it, the newest by
		// the current spec.
		next := t.Spec
		for _, r := range slices.Backward(replaced) {
			rv := replacedView{Replaced: r.Replaced, Spec: r.Spec, Changes: r.Spec.Changes(next)}
			if r.FitID != 0 {
				rv.FitID = &r.FitID
			}
			if rv.Changes == nil {
				rv.Changes = []string{}
			}
			m.Replaced = append(m.Replaced, rv)
			next = r.Spec
		}
		v.Models = append(v.Models, m)
	}
	return v, nil
}

func (v specsView) write(w io.Writer) error {
	ew := &stickyWriter{w: w}
	plural := "s"
	if len(v.Models) == 1 {
		plural = ""
	}
	fmt.Fprintf(ew, "store %s: %d model type%s\n", v.Store, len(v.Models), plural)
	for _, m := range v.Models {
		fmt.Fprintf(ew, "%s: %s\n", m.Name, fitNote("current fit", m.FitID))
		fmt.Fprintf(ew, "  spec: %s\n", strings.Join(m.Spec.KeyValues(), " "))
		for _, r := range m.Replaced {
			changes := strings.Join(r.Changes, "; ")
			// ReplaceSpec stores no spec equal to its successor: none read only
			// when a replacement came between the reads of the type and its history.
			if changes == "" {
				changes = "no key changed"
			}
			fmt.Fprintf(ew, "  replaced %s (%s was current): %s\n", utcTime(r.Replaced), fitNote("fit", r.FitID), changes)
		}
	}
	return ew.err
}

// fitNote is "what N" for fit id N, "no what" for none.
func fitNote(what string, id *int64) string {
	if id == nil {
		return "no " + what
	}
	return fmt.Sprintf("%s %d", what, *id)
}

func storePrune(ctx context.Context, args []string, stdout, stderr io.Writer, env cliEnv) error {
	fs := newFlags("store prune", "Delete what a retention does not keep, now: per-job decision reasons older\n"+
		"than --reasons (each job's newest stays) and reported samples beyond the newest\n"+
		"--samples-per-config per job and configuration. Plan history, fits and profile\n"+
		"samples are never deleted. Safe while rubickd runs.", stderr)
	cfg := configFlag(fs, env, stderr)
	storePath := storePathFlag(fs, env, cfg)
	asJSON := fs.Bool("json", false, "write JSON")
	def := daemon.Defaults().Retention
	reasons := fs.Duration("reasons", def.Reasons, "keep per-job reasons this long; 0 keeps all (default: rubickd's retention.reasons)")
	perConfig := fs.Int("samples-per-config", def.SamplesPerConfig, "reported samples kept per job and configuration; 0 keeps all (default: rubickd's retention.samples_per_config)")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	// A flag not given keeps what rubickd keeps: a site that keeps every
	// sample (samples_per_config: 0) must not lose them to a prune by hand.
	givenReasons, givenPerConfig := flagGiven(fs, "reasons"), flagGiven(fs, "samples-per-config")
	if !givenReasons || !givenPerConfig {
		c, err := cfg()
		if err != nil {
			return err
		}
		if !givenReasons {
			*reasons = c.Retention.Reasons
		}
		if !givenPerConfig {
			*perConfig = c.Retention.SamplesPerConfig
		}
	}
	if *reasons < 0 {
		return fmt.Errorf("%w: --reasons=%v must be >= 0", errUsage, *reasons)
	}
	if *perConfig < 0 {
		return fmt.Errorf("%w: --samples-per-config=%d must be >= 0", errUsage, *perConfig)
	}
	st, path, err := openStoreFlag(ctx, "store prune", storePath, store.WithoutMigrating())
	if err != nil {
		return err
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
