package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/model"
)

const modelUsage = `usage: rubick model <fit|validate|learn|best-plan> [flags]

  fit        fit the performance model of every model (or --model) on its profile/ samples
  validate   fit on profile/ only, predict every measured placements.csv row, score accuracy and plan choice
  learn      replay rubickd's online refits on measured rows and score the rows they did not see
  best-plan  the best feasible plan of --model on --placement and its predicted iteration time

Run 'rubick model <subcommand> -h' for its flags.`

// runModel implements `rubick model fit|validate|learn|best-plan`.
func runModel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, modelUsage)
		return nil
	}
	switch args[0] {
	case "fit":
		return modelFit(ctx, args[1:], stdout, stderr)
	case "validate":
		return modelValidate(ctx, args[1:], stdout, stderr)
	case "learn":
		return modelLearn(ctx, args[1:], stdout, stderr)
	case "best-plan":
		return modelBestPlan(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintln(stderr, modelUsage)
	return fmt.Errorf("%w: unknown model subcommand %q", errUsage, args[0])
}

// newFlags returns a flag set that prints its usage, with every default,
// to stderr and reports parse errors as usage errors.
func newFlags(name, summary string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: rubick %s [flags]\n\n%s\n\nflags:\n", name, summary)
		printDefaults(stderr, fs)
	}
	return fs
}

// printDefaults lists every flag with its default, including empty and
// false ones, which flag.PrintDefaults leaves out.
func printDefaults(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		def := f.DefValue
		// By the value, not typ: a `name` in the usage renames typ.
		if g, ok := f.Value.(flag.Getter); ok {
			if _, ok := g.Get().(string); ok {
				def = strconv.Quote(def)
			}
		}
		name := "--" + f.Name
		if typ != "" {
			name += " " + typ
		}
		if typ == "value" || strings.Contains(usage, "(default") {
			// A repeatable flag (flag.Func) names its defaults in its usage,
			// as does one whose default is not a value ("default: you").
			fmt.Fprintf(w, "  %s\n    \t%s\n", name, usage)
			return
		}
		fmt.Fprintf(w, "  %s\n    \t%s (default %s)\n", name, usage, def)
	})
}

// parseFlags parses args; -h is not an error.
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	return false, nil
}

// flagGiven says whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// parseOneArg parses args, whose one positional argument (what) may come
// before or after the flags ("-" is one, standard input); help is true
// when -h asked for the usage.
func parseOneArg(fs *flag.FlagSet, args []string, what string) (arg string, help bool, err error) {
	// Flags may come before and after the argument (flag.Parse stops at
	// the first non-flag); "--" ends the flags.
	var rest []string
	for len(args) > 0 {
		if !strings.HasPrefix(args[0], "-") || args[0] == "-" {
			rest, args = append(rest, args[0]), args[1:]
			continue
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("%w: %v", errUsage, err)
		}
		// The last token parsed is "--" as the terminator, not as the
		// value of a flag before it (--store --).
		if used := len(args) - fs.NArg(); args[used-1] == "--" && (used < 2 || !takesValue(fs, args[used-2])) {
			rest = append(rest, fs.Args()...)
			break
		}
		args = fs.Args()
	}
	if len(rest) != 1 {
		fs.Usage()
		return "", false, fmt.Errorf("%w: want exactly one %s, got %q", errUsage, what, rest)
	}
	return rest[0], false, nil
}

// takesValue reports whether tok is a flag of fs whose value is the next
// token: a known flag, not boolean, written without "=".
func takesValue(fs *flag.FlagSet, tok string) bool {
	// A flag written "--name=value" names no flag: Lookup finds none.
	f := fs.Lookup(strings.TrimPrefix(strings.TrimPrefix(tok, "-"), "-"))
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// envFlag adds --env to fs: repeatable name=value changes of the cluster
// environment the model prices (model.Env's JSON names), from DefaultEnv.
func envFlag(fs *flag.FlagSet) *model.Env {
	env := model.DefaultEnv()
	fs.Func("env", "change the priced environment, name=value; repeatable; gpu_mem_gb, node_mem_gb, node_cpus or node_gpus of 0 bounds nothing ("+envDefaults(env)+")", env.Set)
	return &env
}

// envDefaults lists every environment name with its value in e.
func envDefaults(e model.Env) string {
	return "defaults: " + strings.Join(e.KeyValues(), " ")
}

// checkDataDir refuses --data dir as a usage error where it is set ("" is
// the embedded copy) and is not a directory.
func checkDataDir(dir string) error {
	if dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("%w: --data %q is not a directory", errUsage, dir)
		}
	}
	return nil
}

// loadSet loads --data dir, the embedded copy for "" (checkDataDir).
func loadSet(dir string) (*artifact.Set, error) {
	if err := checkDataDir(dir); err != nil {
		return nil, err
	}
	set, err := artifact.Load(artifact.Open(dir))
	if dir == "" {
		dir = "embedded data"
	}
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return set, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// fitRow is one line of `rubick model fit --json`.
type fitRow struct {
	Model       string          `json:"model"`
	Spec        model.Spec      `json:"spec"`
	Corrections []string        `json:"corrections,omitempty"`
	Fit         model.FitResult `json:"fit"`
	// Doubts says why the fit puts the spec in doubt (FitResult.Doubts).
	Doubts []string `json:"doubts,omitempty"`
}

func modelFit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("model fit", "Fit the seven performance-model parameters of each model on its profile/ samples.", stderr)
	data := fs.String("data", "", "artifact data directory; empty means the embedded copy")
	only := fs.String("model", "", "fit only this model; empty means every model")
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table, with the fields docs/model.md lists under JSON output")
	env := envFlag(fs)
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	set, err := loadSet(*data)
	if err != nil {
		return err
	}
	var fits map[string]model.FitResult
	if *only != "" {
		if _, ok := set.Models[*only]; !ok {
			return fmt.Errorf("%w: --model %q: not in the data (have %s)", errUsage, *only, strings.Join(set.ModelNames(), ", "))
		}
		// The whole set stays: a profile may be a copy of another model's.
		f, err := artifact.FitOne(ctx, set, *env, *only)
		if err != nil {
			return err
		}
		fits = map[string]model.FitResult{*only: f}
	} else if fits, err = artifact.FitAll(ctx, set, *env); err != nil {
		return err
	}
	rows := make([]fitRow, 0, len(fits))
	for _, name := range set.ModelNames() {
		f, ok := fits[name]
		if !ok {
			continue
		}
		spec := set.Models[name].Spec
		rows = append(rows, fitRow{Model: name, Spec: spec, Corrections: set.Models[name].Corrections, Fit: f, Doubts: f.Doubts(spec)})
	}
	if *asJSON {
		return writeJSON(stdout, rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tsamples\tk_bwd\tk_sync\tk_opt\tk_opt_off\tk_off\tk_swap\tk_const\tk_3d\trmsle\tmape_pct\tpinned\t")
	for _, r := range rows {
		p := r.Fit.Params
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.4f\t%.3f\t%.3f\t%.3f\t%.4f\t%.3f\t%.4f\t%.2f\t%s\t\n", r.Model, r.Fit.Samples,
			p.KBwd, p.KSync, p.KOpt, p.KOptOff, p.KOff, p.KSwap, p.KConst, p.Normalized().K3D, r.Fit.RMSLE, r.Fit.MAPE, strings.Join(r.Fit.Pinned, ","))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Said before rubickd seeds the type and warns of the same.
	for _, r := range rows {
		for _, d := range r.Doubts {
			if _, err := fmt.Fprintf(stdout, "doubt: %s: %s (docs/admin-guide.md, Correcting a model type's spec)\n", r.Model, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// pctOrDash prints a percentage of n scored items, or "-" when none was.
func pctOrDash(n int, pct float64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", pct)
}

func modelValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("model validate", "Fit each model on its profile/ samples only, predict every measured row of its placements.csv,\nand score accuracy per model and plan family and the plan choice per placement.", stderr)
	data := fs.String("data", "", "artifact data directory; empty means the embedded copy")
	asJSON := fs.Bool("json", false, "print a JSON array, accuracy rows then plan-choice rows, instead of a table, with the fields docs/model.md lists under JSON output")
	exclude := fs.Bool("exclude-suspect", false, "leave the rows the data README flags as suspect out of the scores")
	rowsOut := fs.Bool("rows", false, "also list every predicted row (table output only)")
	env := envFlag(fs)
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	set, err := loadSet(*data)
	if err != nil {
		return err
	}
	v, err := artifact.Validate(ctx, set, *env, artifact.ValidateOptions{ExcludeSuspect: *exclude})
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]any, 0, len(v.Accuracy)+len(v.PlanChoice))
		for _, a := range v.Accuracy {
			out = append(out, a)
		}
		for _, p := range v.PlanChoice {
			out = append(out, p)
		}
		return writeJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tfamily\trows\tmape_pct\tmax_ape_pct\t")
	for _, a := range v.Accuracy {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t\n", a.Model, a.Family, a.Rows, a.MAPEPct, a.MaxAPEPct)
	}
	fmt.Fprintln(tw, "\t\t\t\t\t")
	fmt.Fprintln(tw, "model\tplan choice\tplacements\tbest_pick_pct\tregret_pct_avg\tregret_pct_max\t")
	for _, p := range v.PlanChoice {
		fmt.Fprintf(tw, "%s\t\t%d\t%.1f\t%.2f\t%.2f\t\n", p.Model, p.Placements, p.BestPickPct, p.RegretPctAvg, p.RegretPctMax)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	suspect := 0
	for _, r := range v.Rows {
		if r.Suspect != "" {
			suspect++
		}
	}
	scored := "included in"
	if *exclude {
		scored = "left out of"
	}
	fmt.Fprintf(stdout, "\n%d of %d rows are flagged suspect by the data README (%s the scores above; --rows lists them).\n", suspect, len(v.Rows), scored)
	if *rowsOut {
		rows := slices.Clone(v.Rows)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nmodel\texec_plan\tplacement\tplan\tmeasured_s\tpredicted_s\tape_pct\tsuspect")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.4f\t%.4f\t%.1f\t%s\n", r.Model, r.ExecPlan, r.Placement, r.Plan, r.MeasuredS, r.PredictedS, r.APEPct, r.Suspect)
		}
		return tw.Flush()
	}
	return nil
}

// bestPlanOut is the JSON of `rubick model best-plan --json`.
type bestPlanOut struct {
	Model      string               `json:"model"`
	Placement  string               `json:"placement"`
	CPUs       int                  `json:"cpus"`
	Plan       model.Plan           `json:"plan"`
	PlanString string               `json:"plan_string"`
	Family     model.Family         `json:"family"`
	IterS      float64              `json:"iter_s"`
	Throughput float64              `json:"throughput"`
	Breakdown  model.Breakdown      `json:"breakdown"`
	Memory     model.MemoryEstimate `json:"memory"`
}

// modelLearn implements `rubick model learn`.
func modelLearn(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("model learn", "Replay rubickd's online learning on the measured rows: per model and seed, --rows random\n"+
		"placements.csv rows reach the learner as job reports after the profile fit; when they warrant\n"+
		"a refit (mean error above --threshold over two or more configurations), the refit replaces the\n"+
		"fit if fits made without each configuration predict it better than the profile fit does.\n"+
		"Every other row is scored with the profile fit (static) and with the learner's fit (learned),\n"+
		"and so is the plan each ranks first at every placement with several measured plans and no\n"+
		"drawn row.", stderr)
	data := fs.String("data", "", "artifact data directory; empty means the embedded copy")
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table, with the fields docs/model.md lists under JSON output")
	rows := fs.Int("rows", 10, "measured rows each model's learner sees per seed (models with no more rows are left out)")
	seeds := fs.Int("seeds", 10, "independent random draws")
	threshold := fs.Float64("threshold", daemon.Defaults().Samples.RefitThreshold, "refit threshold, as rubickd's samples.refit_threshold")
	exclude := fs.Bool("exclude-suspect", false, "leave the rows the data README flags as suspect out of the scores")
	env := envFlag(fs)
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	switch {
	case *rows < 1:
		return fmt.Errorf("%w: --rows=%d must be >= 1", errUsage, *rows)
	case *seeds < 1:
		return fmt.Errorf("%w: --seeds=%d must be >= 1", errUsage, *seeds)
	case !(*threshold >= 0) || math.IsInf(*threshold, 1):
		return fmt.Errorf("%w: --threshold=%v must be a finite number >= 0", errUsage, *threshold)
	}
	set, err := loadSet(*data)
	if err != nil {
		return err
	}
	scores, err := artifact.Learn(ctx, set, *env, artifact.LearnOptions{Rows: *rows, Seeds: *seeds, Threshold: *threshold, ExcludeSuspect: *exclude})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, scores)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tscored\tstatic_mape_pct\tlearned_mape_pct\trefits\tpromoted\tplacements\tstatic_best_pick_pct\tlearned_best_pick_pct\tstatic_regret_pct\tlearned_regret_pct\t")
	for _, s := range scores {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n", s.Model, s.Scored, s.StaticMAPEPct, s.LearnedMAPEPct, s.Refits, s.Promoted,
			s.Placements, pctOrDash(s.Placements, s.StaticBestPickPct), pctOrDash(s.Placements, s.LearnedBestPickPct),
			pctOrDash(s.Placements, s.StaticRegretPct), pctOrDash(s.Placements, s.LearnedRegretPct))
	}
	return tw.Flush()
}

func modelBestPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("model best-plan", "Print the best memory-feasible plan of a model on a placement and its predicted iteration time.", stderr)
	data := fs.String("data", "", "artifact data directory; empty means the embedded copy")
	name := fs.String("model", "", "model type, e.g. gpt2 (required)")
	place := fs.String("placement", "", "GPUs per node as digits, e.g. 8 or 4444; over 9 on a node, NxG (2x16) or dash-separated (16-8) (required)")
	cpus := fs.Int("cpus", 0, "CPU cores of the job over all nodes; 0 means 4 per GPU, as the artifact measured")
	asJSON := fs.Bool("json", false, "print JSON instead of text, with the fields docs/model.md lists under JSON output")
	envp := envFlag(fs)
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if *name == "" || *place == "" {
		fs.Usage()
		return fmt.Errorf("%w: --model and --placement are required", errUsage)
	}
	pl, err := model.ParsePlacement(*place)
	if err != nil {
		return fmt.Errorf("%w: --placement: %w", errUsage, err)
	}
	if *cpus < 0 {
		return fmt.Errorf("%w: --cpus=%d must be >= 0", errUsage, *cpus)
	}
	set, err := loadSet(*data)
	if err != nil {
		return err
	}
	info, ok := set.Models[*name]
	if !ok {
		return fmt.Errorf("%w: --model %q: not in the data (have %s)", errUsage, *name, strings.Join(set.ModelNames(), ", "))
	}
	c := *cpus
	if c == 0 {
		c = artifact.MeasuredThreadsPerGPU * pl.GPUs()
	}
	env := *envp
	// The placement and CPUs must be ones the priced nodes hold.
	if env.NodeGPUs > 0 && pl.MaxPerNode() > env.NodeGPUs {
		return fmt.Errorf("%w: --placement=%s puts %d GPUs on a node of %d (env node_gpus=%d)", errUsage, *place, pl.MaxPerNode(), env.NodeGPUs, env.NodeGPUs)
	}
	if env.NodeCPUs > 0 && c > env.NodeCPUs*pl.Nodes() {
		return fmt.Errorf("%w: --cpus=%d is more than the %d nodes of the placement hold (%d each, env node_cpus)", errUsage, c, pl.Nodes(), env.NodeCPUs)
	}
	fit, err := artifact.FitOne(ctx, set, env, *name)
	if err != nil {
		return err
	}
	pred := model.Predictor{Spec: info.Spec, Params: fit.Params, Env: env}
	r := model.Resources{Placement: pl, CPUs: c}
	plan, bd, err := pred.BestPlan(r, nil)
	if err != nil {
		return err
	}
	out := bestPlanOut{
		Model: *name, Placement: pl.String(), CPUs: c, Plan: plan, PlanString: plan.String(), Family: plan.Family(),
		IterS: bd.Iter, Throughput: float64(info.Spec.GlobalBatch) / bd.Iter, Breakdown: bd, Memory: pred.Memory(plan, pl),
	}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "model %s on %s with %d CPUs: plan %s (%s)\npredicted iteration %.4f s, %.2f samples/s, %.1f GB per GPU\n",
		out.Model, out.Placement, out.CPUs, out.PlanString, out.Family, out.IterS, out.Throughput, out.Memory.GPUGB)
	return nil
}
