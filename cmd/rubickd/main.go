// Command rubickd is rubick's scheduling daemon: every interval it reads
// jobs and nodes from slurmrestd, asks the policy for a plan, applies it
// with scontrol and records it in its SQLite store.
//
// Usage:
//
//	rubickd [--config /etc/rubick/rubickd.yaml] [--once] [--dry-run] [--release-all] [--check [--json]] [--data DIR [--update-specs]]
//
// SIGTERM lets the cycle in progress finish; SIGHUP re-reads the
// configuration for the next cycle.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/gpuinfo"
	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // the flag set printed the usage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rubickd:", err)
		switch {
		case errors.Is(err, daemon.ErrLocked):
			// Another rubickd manages the cluster; the unit's
			// RestartPreventExitStatus keeps systemd from starting
			// this one again and again beside it.
			os.Exit(exitLocked)
		}
		os.Exit(1)
	}
}

// seedData is the embedded data with the model types of the data
// directory dir added, its entry where both have a type: a site adds its
// own types without a copy of the shipped ones, which would otherwise go
// unseeded in a new store. own names dir's types.
func seedData(dir string) (set *artifact.Set, own []string, err error) {
	set, err = artifact.Load(artifact.Default())
	if err != nil {
		return nil, nil, fmt.Errorf("embedded data: %w", err)
	}
	if dir == "" {
		return set, nil, nil
	}
	ours, err := artifact.Load(artifact.Dir(dir))
	if err != nil {
		return nil, nil, fmt.Errorf("--data %s: %w", dir, err)
	}
	return artifact.Merge(set, ours), ours.ModelNames(), nil
}

// updateSpecs deals with the model types own names that the store has
// with another spec than set's: seeding leaves a type the store has as it
// is, so an entry edited since applies only with --update-specs (update),
// which replaces the stored spec (daemon.Respec); without it, rubickd says
// what it keeps. It returns the types whose spec it replaced.
func updateSpecs(ctx context.Context, st daemon.SeedStore, set *artifact.Set, own []string, update, dryRun, withFits bool,
	env model.Env, log *slog.Logger) ([]string, error) {
	if len(own) == 0 {
		return nil, nil
	}
	changes, err := daemon.SpecChanges(ctx, st, set, own)
	if err != nil {
		return nil, err
	}
	if !update {
		for _, c := range changes {
			log.Warn("a model type of --data differs from the store's, which is kept: seeding adds only types the store lacks; --update-specs replaces it",
				"model", c.New.Name, "changes", c.Keys())
		}
		return nil, nil
	}
	fitted, err := daemon.Respec(ctx, st, set, changes, env, withFits)
	if err != nil {
		return nil, err
	}
	msg := "replaced the spec of a model type of --data; its fits, made against the old spec, are kept and none is current"
	if dryRun {
		msg = "a start would replace the spec of a model type of --data, replaced for this dry run only; its fits, made against the old spec, are kept and none is current"
	}
	var replaced []string
	for _, c := range changes {
		fit := "none until refitted on its stored samples or profiled"
		if slices.Contains(fitted, c.New.Name) {
			fit = "on its profiling runs in --data"
		}
		log.Info(msg, "model", c.New.Name, "changes", c.Keys(), "fit", fit)
		replaced = append(replaced, c.New.Name)
	}
	return replaced, nil
}

// exitLocked is the exit status when another rubickd manages the cluster
// (daemon.ErrLocked).
const exitLocked = 3

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// Caught from the start: a SIGHUP's default action ends the process,
	// and systemd takes an end by SIGHUP as clean, so a reload while
	// rubickd starts would leave it stopped. One that comes before the
	// loop below reloads once it runs.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	self := daemon.NewInstance(time.Now())
	fs := flag.NewFlagSet("rubickd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", daemon.DefaultConfigPath, "configuration file (YAML); a missing file at the default path means built-in defaults")
	once := fs.Bool("once", false, "run one cycle, print its report as JSON and exit")
	dryRun := fs.Bool("dry-run", false, "decide one cycle and print the plan; applies nothing to Slurm and changes no existing store: it refuses one of an older schema, which a start migrates, and seeds in memory only; a missing store it creates and seeds like any start (implies --once)")
	releaseAll := fs.Bool("release-all", false, "hand the queue back to Slurm: release every job held for rubick on its own request, print the report as JSON and exit (with --dry-run: say which); users' and administrators' holds stay")
	check := fs.Bool("check", false, "check the configuration, slurmrestd, the managed partitions, the commands, the slurm.conf settings and the GrpTRESMins budgets rubickd relies on, print one line each, and exit (1 if one failed); changes nothing")
	checkJSON := fs.Bool("json", false, "with --check: print the checks as a JSON array of {name, status, detail}")
	dataDir := fs.String("data", "", "directory whose models.json (and optional profile/, traces/) adds model types to seed to the embedded ones; an entry replaces the embedded one of its name; a type the store has keeps its spec and fit, unless --update-specs")
	respec := fs.Bool("update-specs", false, "with --data: give each model type of the directory that the store has with another spec the directory's (with --dry-run, in memory only); its fits, made against the old spec, and its samples are kept, and none is current until it is refitted: on its profiling runs in the directory with seed_fits, else on its stored samples at the first cycle")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rubickd [flags]\n\nEvery configuration key can also be set as RUBICK_<KEY> (see contrib/rubickd/rubickd.yaml).\n"+
			"SIGHUP re-reads the configuration; it applies from the next cycle (docs/admin-guide.md).\n"+
			"Exit status: 3 when another rubickd manages the cluster (its store's lock, or job tags it writes), 1 on any other error.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *checkJSON && !*check {
		return errors.New("--json goes with --check")
	}
	if *respec && *dataDir == "" {
		return errors.New("--update-specs goes with --data")
	}
	file := configFile(*configPath, "", daemon.DefaultConfigPath)
	cfg, warnings, err := daemon.LoadConfig(file, os.Environ())
	if err != nil {
		return err
	}
	var logLevel slog.LevelVar
	logLevel.Set(level(cfg.LogLevel))
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: &logLevel}))
	for _, w := range warnings {
		log.Warn(w)
	}

	slurmCfg := slurm.Config{
		URL: cfg.Slurmrestd.URL, Version: cfg.Slurmrestd.Version, TokenFile: cfg.Slurmrestd.TokenFile,
		User: cfg.Slurmrestd.User, RateLimit: cfg.Slurmrestd.RateLimit, Timeout: cfg.Slurmrestd.Timeout, Logger: log,
		Cluster: clusterName(ctx, cfg, log),
	}
	if *check {
		return runChecks(ctx, cfg, slurmCfg, *checkJSON, stdout)
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Store), 0o750); err != nil {
		return fmt.Errorf("store directory: %w", err)
	}
	if !*dryRun {
		// One rubickd per store: a second one would apply its own plans to
		// the same jobs. A dry run applies nothing and may run beside it.
		lock, err := daemon.LockInstance(daemon.LockPath(cfg.Store), self)
		if err != nil {
			return err
		}
		defer lock.Release()
	}
	st, leave, err := openStore(ctx, cfg.Store, *dryRun, log)
	if err != nil {
		return err
	}
	defer st.Close()
	var dst interface {
		daemon.Store
		daemon.SeedStore
	} = st
	if leave {
		dst = daemon.NewSeedOverlay(st)
	}
	env := model.DefaultEnv()
	if cfg.GPUFacts != "" {
		facts, err := gpuinfo.ReadFacts(cfg.GPUFacts)
		if err != nil {
			return err
		}
		env = gpuinfo.ApplyTo(env, facts)
		log.Info("GPU facts applied", "file", cfg.GPUFacts, "source", facts.Source, "gpus", env.NodeGPUs, "gpu_mem_gb", env.GPUMemGB, "intra_gbps", env.IntraGBps)
	}
	set, own, err := seedData(*dataDir)
	if err != nil {
		return err
	}
	replaced, err := updateSpecs(ctx, dst, set, own, *respec, leave, cfg.SeedFits, env, log)
	if err != nil {
		return err
	}
	if added, err := daemon.Seed(ctx, dst, set, env, cfg.SeedFits); err != nil {
		return err
	} else if len(added) > 0 && leave {
		log.Info("model types a start would seed, seeded for this dry run only", "models", added)
	} else if len(added) > 0 {
		log.Info("seeded model types", "models", added)
	}
	if err := daemon.WarnDoubtedFits(ctx, dst, log); err != nil {
		return err
	}

	cluster, err := slurm.NewCluster(ctx, slurmCfg)
	if err != nil {
		return err
	}
	log.Info("connected to slurmrestd", "url", cfg.Slurmrestd.URL, "version", cluster.Version())
	// What --check would say, in the journal and /status: a site missing
	// job_submit.lua gets a rubickd that runs and manages nothing, and
	// should read why.
	checkedAt := time.Now()
	checks := daemon.Preflight(ctx, cfg, checkDeps(cfg, func(context.Context) (daemon.CheckCluster, error) { return cluster, nil }))
	daemon.LogChecks(log, checks)
	applier, err := slurm.NewApplier(slurm.ApplierConfig{
		Scontrol: cfg.Commands.Scontrol, Scancel: cfg.Commands.Scancel, Cluster: cluster, Logger: log,
		CommandTimeout: cfg.Commands.Timeout, Signal: cfg.Checkpoint.Signal, CheckpointTimeout: cfg.Checkpoint.Grace,
		RequeueMail: cfg.Checkpoint.RequeueMail, Instance: self.String(),
		WaitCheckpoint: daemon.WaitCheckpoint(cluster, 500*time.Millisecond),
	})
	if err != nil {
		return err
	}
	pol, err := policy.New(cfg.Policy.Name, cfg.Policy.Config())
	if err != nil {
		return err
	}
	metrics := daemon.NewMetrics()
	learner := &daemon.Learner{Store: st, Cluster: cluster, Env: env, Threshold: cfg.Samples.RefitThreshold,
		MaxConfigsPerJob: cfg.Samples.MaxConfigsPerJob, Logger: log}
	learner.MarkForRefit(replaced...)
	d, err := daemon.New(cfg, daemon.Deps{Cluster: cluster, Applier: applier, Store: dst, Policy: pol, Env: env, Metrics: metrics, Logger: log, Learner: learner, Instance: self,
		Setup:   daemon.NewSetupChecks(checkedAt, checks),
		Budgets: slurm.AssocMgr{Runner: commands(cfg), Scontrol: cfg.Commands.Scontrol, SShare: cfg.Commands.Sshare},
		Scripts: slurm.BatchScripts{Runner: commands(cfg), Scontrol: cfg.Commands.Scontrol}})
	if err != nil {
		return err
	}

	if *once || *dryRun || *releaseAll {
		if !*dryRun {
			if err := d.Reconcile(ctx); err != nil {
				return err
			}
		}
		cycle := d.Cycle
		if *releaseAll {
			cycle = d.ReleaseAll
		}
		rep, err := cycle(ctx, *dryRun)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}

	if cfg.Listen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler())
		// Anyone can send requests, and a job whose samples rubickd
		// rejects (its model type's spec off by more than
		// maxSampleRatio) sends one each logging interval: each warning
		// comes at most once a minute, the rest at debug level.
		unverified, unstored := throttle{period: time.Minute}, throttle{period: time.Minute}
		// At most 8 unmunge processes at once, whoever sends requests.
		verifier := report.Limit(report.Munge{UnmungePath: cfg.Samples.Unmunge, Socket: cfg.Samples.MungeSocket}, 8)
		mux.Handle("/samples", report.Handler(verifier, report.Acceptors{
			Sample: func(ctx context.Context, uid uint32, s report.Sample) error {
				err := learner.Accept(ctx, uid, s)
				result := acceptResult(err)
				if err != nil {
					level, held := slog.LevelDebug, 0
					if ok, n := unstored.allow(time.Now()); ok {
						level, held = slog.LevelWarn, n
					}
					log.Log(ctx, level, "sample not stored", "job", s.JobID, "uid", uid, "result", result, "err", err,
						"not_stored_since_last_warning", held)
				}
				metrics.Samples.WithLabelValues(result).Inc()
				return err
			},
			Launch: func(ctx context.Context, uid uint32, n report.Launch) error {
				err := learner.AcceptLaunch(ctx, uid, n)
				result := acceptResult(err)
				switch {
				case err != nil:
					log.Warn("launch notice not stored", "job", n.JobID, "uid", uid, "result", result, "err", err)
				case n.Refused:
					result = "refused"
				}
				metrics.LaunchNotices.WithLabelValues(result).Inc()
				return err
			},
			Refused: func(err error) {
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					return // the sender went away
				}
				// munged down: no sample reaches the model until it is back.
				if errors.Is(err, report.ErrUnavailable) {
					metrics.Samples.WithLabelValues("unverified").Inc()
					if ok, _ := unverified.allow(time.Now()); ok {
						log.Warn("a sample could not be verified; is munged running? (samples.munge_socket; rubick_samples_total{result=\"unverified\"} counts them)", "err", err)
					}
					return
				}
				metrics.Samples.WithLabelValues("refused").Inc()
				log.Debug("a request to the samples endpoint refused", "err", err)
			},
		}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if err := d.Health(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(d.Status())
		})
		// Bounded, since compute nodes (anyone on them) reach it.
		srv := &http.Server{Addr: cfg.Listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics endpoint", "err", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	go func() {
		for range hup {
			if f := configFile(*configPath, file, daemon.DefaultConfigPath); reload(d, f, &logLevel, log) {
				file = f
			}
		}
	}()
	log.Info("rubickd running", "policy", pol.Name(), "interval", cfg.Interval, "partitions", cfg.Partitions)
	return d.Run(ctx)
}

// openStore opens rubickd's store. A dry run leaves an existing store as
// it finds it (leave): a rubickd may run on it, and would refuse a store
// this one migrated (store.ErrSchemaTooNew), so one of an older schema is
// refused. A missing store no rubickd uses: it is created, as at any
// start.
func openStore(ctx context.Context, path string, dryRun bool, log *slog.Logger) (st *store.Store, leave bool, err error) {
	opts := []store.Option{store.WithLogger(log)}
	if dryRun {
		switch _, err := os.Stat(path); {
		case err == nil:
			leave = true
			opts = append(opts, store.WithoutMigrating())
		case !errors.Is(err, fs.ErrNotExist):
			return nil, false, fmt.Errorf("store: %w", err)
		}
	}
	st, err = store.Open(ctx, path, opts...)
	if leave && errors.Is(err, store.ErrSchemaTooOld) {
		return nil, false, fmt.Errorf("--dry-run migrates no store, since a running rubickd may use it: %w", err)
	}
	return st, leave, err
}

// throttle lets a warning through at most once a period, and counts the
// ones it held back since the last, for the next to say.
type throttle struct {
	period time.Duration
	mu     sync.Mutex
	last   time.Time
	held   int
}

// allow reports whether a warning at now goes out, and how many were held
// back since the last that did.
func (t *throttle) allow(now time.Time) (bool, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() && now.Sub(t.last) < t.period {
		t.held++
		return false, 0
	}
	held := t.held
	t.last, t.held = now, 0
	return true, held
}

// acceptResult labels what became of a sample or launch notice, for the
// metrics: rejected when the sender or its payload is at fault (rubickd's
// checks), error when rubickd is (a locked store, slurmrestd down; the
// endpoint answers 503).
func acceptResult(err error) string {
	switch {
	case err == nil:
		return "accepted"
	case errors.Is(err, report.ErrBadSample), errors.Is(err, report.ErrBadLaunch), errors.Is(err, report.ErrNotOwner):
		return "rejected"
	}
	return "error"
}

// configFile is the file to load for --config path, "" for the built-in
// defaults: those when path is def and missing. loaded is what the last
// load read ("" at the first): a file written at def after rubickd started
// on its defaults is read at the next reload, and one that was read and is
// gone is an error, not a silent return to the defaults.
func configFile(path, loaded, def string) string {
	if path == def && loaded == "" {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return ""
		}
	}
	return path
}

// reload re-reads the configuration on SIGHUP. A file that does not load,
// or that changes a setting only a restart applies, is logged and the
// running configuration stays. It reports whether the file was applied.
func reload(d *daemon.Daemon, path string, logLevel *slog.LevelVar, log *slog.Logger) bool {
	cfg, warnings, err := daemon.LoadConfig(path, os.Environ())
	if err != nil {
		log.Error("reload refused; the running configuration stays", "err", err)
		return false
	}
	for _, w := range warnings {
		log.Warn(w)
	}
	pol, err := policy.New(cfg.Policy.Name, cfg.Policy.Config())
	if err != nil {
		log.Error("reload refused; the running configuration stays", "err", err)
		return false
	}
	if err := d.Reload(cfg, pol); err != nil {
		log.Error("reload refused; the running configuration stays", "err", err)
		return false
	}
	logLevel.Set(level(cfg.LogLevel))
	log.Info("configuration read; it applies from the next cycle", "file", path)
	return true
}

func level(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s))
	return l
}

// runChecks prints rubickd --check: one line per check (or, asJSON, one
// JSON array), failures first in the exit status.
func runChecks(ctx context.Context, cfg daemon.Config, slurmCfg slurm.Config, asJSON bool, stdout io.Writer) error {
	results := daemon.Preflight(ctx, cfg, checkDeps(cfg, func(ctx context.Context) (daemon.CheckCluster, error) {
		return slurm.NewCluster(ctx, slurmCfg)
	}))
	if err := printChecks(stdout, results, asJSON); err != nil {
		return err
	}
	failed := 0
	for _, r := range results {
		if r.Status == daemon.CheckFail {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks failed", failed, len(results))
	}
	return nil
}

// printChecks writes the checks as aligned lines (status, name, detail),
// or as a JSON array.
func printChecks(w io.Writer, results []daemon.CheckResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Status, r.Name, r.Detail)
	}
	return tw.Flush()
}

// checkDeps are the checks' ways to Slurm and the host, reaching
// slurmrestd through connect.
func checkDeps(cfg daemon.Config, connect func(context.Context) (daemon.CheckCluster, error)) daemon.CheckDeps {
	return daemon.CheckDeps{Connect: connect, Runner: commands(cfg), LookPath: exec.LookPath, UID: os.Geteuid(), Now: time.Now, ReadFile: os.ReadFile}
}

// commands runs the Slurm commands of the checks, the budgets and the
// cluster name, each bounded by commands.timeout.
func commands(cfg daemon.Config) slurm.Runner {
	return slurm.TimedRunner{Runner: slurm.ExecRunner{}, Timeout: cfg.Commands.Timeout}
}

// clusterName is slurm.conf's ClusterName, from scontrol show config: a
// slurmdbd serving several clusters lists every cluster's associations,
// and rubickd needs its own. Empty (all of them) where scontrol fails.
func clusterName(ctx context.Context, cfg daemon.Config, log *slog.Logger) string {
	conf, err := slurm.ShowConfig(ctx, commands(cfg), cfg.Commands.Scontrol)
	if err != nil {
		log.Warn("ClusterName not read; the limits listing reads every cluster's associations", "err", err)
		return ""
	}
	return conf["ClusterName"]
}
