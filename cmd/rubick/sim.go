package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/sim"
)

// simOptions are the parsed flags of `rubick sim`.
type simOptions struct {
	workload string
	data     string
	policies []string
	cfg      sim.Config
	policy   policy.Config // every policy's knobs
	json     bool
	plot     string
	parallel int
}

// knobDefaults lists every policy knob with its value in c.
func knobDefaults(c policy.Config) string {
	v := reflect.ValueOf(c)
	var out []string
	for _, k := range policy.Knobs() {
		out = append(out, fmt.Sprintf("%s=%v", k, v.FieldByName(k)))
	}
	return strings.Join(out, " ")
}

func parseSimFlags(args []string, stderr io.Writer) (simOptions, error) {
	def := sim.DefaultConfig()
	o := simOptions{cfg: def, policy: policy.DefaultConfig()}
	fset := flag.NewFlagSet("rubick sim", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() {
		fmt.Fprintln(stderr, "usage: rubick sim [flags]\n\nReplay a workload trace against scheduling policies on a simulated cluster.\n\nflags:")
		// Every default, 0 and false too, which fset.PrintDefaults leaves
		// out: --refit-threshold's read as rubickd's 0.1 its usage names.
		printDefaults(stderr, fset)
	}
	fset.StringVar(&o.workload, "workload", "workload-base", "embedded trace (workload-base, workload-bp, workload-mt, naive) or a CSV file path")
	fset.StringVar(&o.data, "data", "", "artifact data directory; empty means the embedded copy")
	pols := fset.String("policy", strings.Join(policy.Names(), ","), "comma-separated policies")
	fset.IntVar(&o.cfg.Nodes, "nodes", def.Nodes, "nodes in the cluster")
	fset.IntVar(&o.cfg.GPUsPerNode, "gpus-per-node", def.GPUsPerNode, "GPUs per node")
	fset.IntVar(&o.cfg.CPUsPerNode, "cpus-per-node", def.CPUsPerNode, "CPU cores per node")
	fset.Float64Var(&o.cfg.MemPerNodeGB, "mem-per-node-gb", def.MemPerNodeGB, "host memory per node, GB")
	fset.DurationVar(&o.cfg.Interval, "interval", def.Interval, "scheduling interval (simulated time)")
	fset.DurationVar(&o.cfg.MaxTime, "max-time", def.MaxTime, "how long a replay runs on after its last arrival before it stops, naming the jobs left (simulated time)")
	fset.DurationVar(&o.cfg.RestartPenalty, "restart-penalty", def.RestartPenalty, "time without progress after every start and placement change")
	fset.DurationVar(&o.cfg.AssumedRestartCost, "assumed-restart-cost", 0, "what the policies are told a restart costs; 0: the penalty itself")
	fset.Float64Var(&o.cfg.LoadScale, "load-scale", def.LoadScale, "divide submission times by this (> 1 compresses arrivals)")
	fset.IntVar(&o.cfg.GuaranteedQuota, "quota", def.GuaranteedQuota, "GPU quota of guaranteed jobs (0: every GPU)")
	fset.Float64Var(&o.cfg.TimeLimitOver, "time-limit-over", def.TimeLimitOver, "time limits overestimate runs by a per-job factor in [1, 1+this] (0: exact)")
	fset.BoolVar(&o.cfg.FixedFrameworks, "fixed-frameworks", def.FixedFrameworks, "jobs keep the framework of the plan they asked for: data-parallel requests are plain DeepSpeed scripts, which cannot take TP or PP plans")
	fset.Func("fixed-frameworks-models", "--fixed-frameworks for these comma-separated model types only (implies --fixed-frameworks)", func(v string) error {
		for _, m := range strings.Split(v, ",") {
			if m = strings.TrimSpace(m); m != "" {
				o.cfg.FixedFrameworkModels = append(o.cfg.FixedFrameworkModels, m)
			}
		}
		o.cfg.FixedFrameworks = true
		return nil
	})
	fset.BoolVar(&o.cfg.ExcludeSuspect, "exclude-suspect", def.ExcludeSuspect, "leave the measured rows the data README calls suspect out of the ground truth (the model prices them)")
	fset.Float64Var(&o.cfg.RefitThreshold, "refit-threshold", def.RefitThreshold,
		fmt.Sprintf("replay rubickd's online refits with this threshold (rubickd's default: %g; 0: the profile fits throughout)", daemon.Defaults().Samples.RefitThreshold))
	fset.StringVar(&o.cfg.FairShareAccounts, "fairshare-accounts", def.FairShareAccounts,
		"jobs carry their account's Fair Tree fair-share factor (for --set BestEffortOrder=fairshare), each account an equal share: \"model\" (every model type one account) or \"trace\" (the trace's account column); empty: no factors")
	fset.DurationVar(&o.cfg.FairShareHalfLife, "fairshare-half-life", def.FairShareHalfLife, "with --fairshare-accounts: the accounts' usage half-life (Slurm's PriorityDecayHalfLife)")
	fset.Func("priority-weights", "jobs carry the Slurm priority these weights give them (for --set BestEffortOrder=priority): age=N,fairshare=N,jobsize=N (fairshare needs --fairshare-accounts)", func(v string) error {
		w, err := parsePriorityWeights(v)
		o.cfg.PriorityWeights = w
		return err
	})
	fset.DurationVar(&o.cfg.PriorityMaxAge, "priority-max-age", def.PriorityMaxAge, "with --priority-weights age=N: the age at which the age factor reaches 1 (Slurm's PriorityMaxAge)")
	fset.Func("set", "set a policy knob, Name=value; repeatable (defaults: "+knobDefaults(o.policy)+")", func(kv string) error {
		return o.policy.Set(kv)
	})
	fset.BoolVar(&o.json, "json", false, "print a JSON array, one object per policy")
	fset.StringVar(&o.plot, "plot", "", "write JCT CDFs and GPU utilisation to this .svg or .png file")
	// 0 rather than this machine's CPU count: the help, and the man page
	// made from it, stay the same on every machine.
	fset.IntVar(&o.parallel, "parallel", 0, "policies simulated at once (0: one per CPU)")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fset.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected argument %q", errUsage, fset.Arg(0))
	}
	for _, p := range strings.Split(*pols, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(policy.Names(), p) {
			return o, fmt.Errorf("%w: --policy %q: unknown policy (known: %s)", errUsage, p, strings.Join(policy.Names(), ", "))
		}
		o.policies = append(o.policies, p)
	}
	if len(o.policies) == 0 {
		return o, fmt.Errorf("%w: --policy %q names no policy", errUsage, *pols)
	}
	checks := []struct {
		bad  bool
		flag string
		val  any
		why  string
	}{
		{o.cfg.Nodes <= 0 || o.cfg.Nodes > sim.MaxNodes, "--nodes", o.cfg.Nodes, fmt.Sprintf("must be in 1..%d", sim.MaxNodes)},
		{o.cfg.GPUsPerNode <= 0 || o.cfg.GPUsPerNode > 64, "--gpus-per-node", o.cfg.GPUsPerNode, "must be in 1..64"},
		{o.cfg.CPUsPerNode <= 0, "--cpus-per-node", o.cfg.CPUsPerNode, "must be > 0"},
		{!(o.cfg.MemPerNodeGB > 0) || math.IsInf(o.cfg.MemPerNodeGB, 1), "--mem-per-node-gb", o.cfg.MemPerNodeGB, "must be a finite number > 0"},
		// A year of simulated time is far past any trace, and keeps the
		// replay's float64 clock resolving its rounds.
		{o.cfg.MaxTime < time.Second || o.cfg.MaxTime > 365*24*time.Hour, "--max-time", o.cfg.MaxTime, "must be in [1s, 8760h]"},
		{o.cfg.Interval.Seconds() < 1, "--interval", o.cfg.Interval, "must be >= 1s"},
		{o.cfg.Interval > o.cfg.MaxTime, "--interval", o.cfg.Interval, fmt.Sprintf("must be at most %v, the time a replay runs on after its last arrival (--max-time)", o.cfg.MaxTime)},
		{o.cfg.RestartPenalty < 0, "--restart-penalty", o.cfg.RestartPenalty, "must be >= 0"},
		{o.cfg.AssumedRestartCost < 0, "--assumed-restart-cost", o.cfg.AssumedRestartCost, "must be >= 0"},
		// Below 1e-6 arrivals (artifact.MaxTraceSeconds at most) stretch
		// towards where the replay's float64 clock stops resolving its
		// rounds: at 1e-300 the naive trace's JCTs came out a third short.
		{!(o.cfg.LoadScale >= 1e-6) || o.cfg.LoadScale > 1e6, "--load-scale", o.cfg.LoadScale, "must be in [1e-6, 1e6]"},
		{o.cfg.GuaranteedQuota < 0, "--quota", o.cfg.GuaranteedQuota, "must be >= 0"},
		{!(o.cfg.TimeLimitOver >= 0) || o.cfg.TimeLimitOver > 1e6, "--time-limit-over", o.cfg.TimeLimitOver, "must be a number in [0, 1e6]"},
		{!(o.cfg.RefitThreshold >= 0) || o.cfg.RefitThreshold > 10, "--refit-threshold", o.cfg.RefitThreshold, "must be a number in [0, 10]"},
		{o.cfg.FairShareHalfLife <= 0, "--fairshare-half-life", o.cfg.FairShareHalfLife, "must be > 0"},
		{!slices.Contains([]string{"", sim.AccountsByModel, sim.AccountsFromTrace}, o.cfg.FairShareAccounts), "--fairshare-accounts", fmt.Sprintf("%q", o.cfg.FairShareAccounts), `must be "model", "trace" or empty`},
		{o.parallel < 0, "--parallel", o.parallel, "must be >= 0 (0: one per CPU)"},
		{o.policy.BestEffortOrder == policy.OrderPriority && o.cfg.PriorityWeights == (sim.PriorityWeights{}), "--set BestEffortOrder", o.policy.BestEffortOrder,
			"needs --priority-weights: replayed jobs have no Slurm priority without them"},
		{o.policy.GuaranteedOrder == policy.OrderPriority && o.cfg.PriorityWeights == (sim.PriorityWeights{}), "--set GuaranteedOrder", o.policy.GuaranteedOrder,
			"needs --priority-weights: replayed jobs have no Slurm priority without them"},
		{o.cfg.PriorityWeights.FairShare > 0 && o.cfg.FairShareAccounts == "", "--priority-weights fairshare", o.cfg.PriorityWeights.FairShare, "needs --fairshare-accounts"},
		// Without accounts every job's fair share is the same: the order
		// was the default one, silently.
		{o.policy.BestEffortOrder == policy.OrderFairShare && o.cfg.FairShareAccounts == "", "--set BestEffortOrder", o.policy.BestEffortOrder,
			"needs --fairshare-accounts: replayed jobs have no accounts without it"},
		{o.cfg.PriorityMaxAge <= 0, "--priority-max-age", o.cfg.PriorityMaxAge, "must be > 0"},
	}
	for _, c := range checks {
		if c.bad {
			return o, fmt.Errorf("%w: %s=%v %s", errUsage, c.flag, c.val, c.why)
		}
	}
	if o.parallel == 0 {
		o.parallel = runtime.GOMAXPROCS(0)
	}
	if o.plot != "" {
		ext := strings.ToLower(filepath.Ext(o.plot))
		if ext != ".svg" && ext != ".png" {
			return o, fmt.Errorf("%w: --plot %q must end in .svg or .png", errUsage, o.plot)
		}
	}
	return o, nil
}

// loadWorkload resolves --workload: a file that exists, else an embedded
// trace's name (a file of yours named workload-base.csv was replaced by
// the embedded trace).
func loadWorkload(fsys fs.FS, name string) ([]artifact.Job, error) {
	base := strings.TrimSuffix(name, ".csv")
	if _, err := os.Stat(name); err != nil {
		if names, err := artifact.Workloads(fsys); err == nil && slices.Contains(names, base) && !strings.ContainsRune(name, os.PathSeparator) {
			return artifact.LoadWorkload(fsys, base)
		}
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: --workload %q is neither an embedded trace nor a readable file: %v", errUsage, name, err)
	}
	defer f.Close()
	return artifact.ReadWorkload(f, name)
}

// runSim implements `rubick sim`.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseSimFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := checkDataDir(o.data); err != nil {
		return err
	}
	// Before the replay, which may take minutes, rather than after it.
	if dir := filepath.Dir(o.plot); o.plot != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("%w: --plot %q: %s is not a directory", errUsage, o.plot, dir)
		}
	}
	fsys := artifact.Open(o.data)
	rows, err := loadWorkload(fsys, o.workload)
	if err != nil {
		return err
	}
	data, err := sim.Prepare(ctx, fsys, o.cfg)
	if errors.Is(err, sim.ErrBadConfig) {
		return fmt.Errorf("%w: --fixed-frameworks-models: %v", errUsage, err)
	}
	if err != nil {
		return err
	}
	// Said once, not once per policy.
	if err := sim.CheckTrace(o.cfg, data, rows); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	results := make([]*sim.Result, len(o.policies))
	errs := make([]error, len(o.policies))
	sem := make(chan struct{}, o.parallel)
	var wg sync.WaitGroup
	for i, name := range o.policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			pol, err := policy.New(name, o.policy)
			if err != nil {
				errs[i] = err
				return
			}
			results[i], errs[i] = sim.Run(ctx, o.cfg, data, rows, pol, log.With("policy", name))
		}()
	}
	wg.Wait()
	// The policies that finished are printed even when another did not:
	// their replays are as good, and the error follows them.
	runErr := errors.Join(errs...)
	var finished []*sim.Result
	for i, r := range results {
		if errs[i] == nil && r != nil {
			finished = append(finished, r)
		}
	}
	if results = finished; len(results) == 0 {
		return runErr
	}
	// The results first: a plot that cannot be written loses no replay.
	if o.json {
		err = writeJSON(stdout, results)
	} else {
		fmt.Fprintf(stdout, "workload %s: %d jobs on %d x %d GPUs, interval %v, restart penalty %v, load scale %g\n\n",
			o.workload, len(rows), o.cfg.Nodes, o.cfg.GPUsPerNode, o.cfg.Interval, o.cfg.RestartPenalty, o.cfg.LoadScale)
		err = sim.WriteTable(stdout, results)
	}
	if err != nil || o.plot == "" {
		return errors.Join(runErr, err)
	}
	return errors.Join(runErr, sim.Plot(o.plot, results))
}

// parsePriorityWeights reads --priority-weights: "age=1000,fairshare=10000,
// jobsize=1000", each name at most once, weights whole numbers >= 0.
func parsePriorityWeights(v string) (sim.PriorityWeights, error) {
	var w sim.PriorityWeights
	seen := map[string]bool{}
	for _, kv := range strings.Split(v, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if !ok || err != nil || n < 0 {
			return w, fmt.Errorf("%q: want NAME=WEIGHT, a whole number >= 0", kv)
		}
		if seen[name] {
			return w, fmt.Errorf("%q: %s given twice", kv, name)
		}
		seen[name] = true
		switch name {
		case "age":
			w.Age = n
		case "fairshare":
			w.FairShare = n
		case "jobsize":
			w.JobSize = n
		default:
			return w, fmt.Errorf("%q: unknown weight %q (known: age, fairshare, jobsize)", kv, name)
		}
	}
	return w, nil
}
