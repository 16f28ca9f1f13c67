// Package daemon is rubickd's core: its validated configuration, the
// control loop (snapshot, decide, apply, record) and its metrics. The
// command in cmd/rubickd only wires flags, signals and logging to it.
package daemon

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/policy"
	"github.com/spf13/viper"
)

// DefaultConfigPath is where rubickd looks for its configuration file.
const DefaultConfigPath = "/etc/rubick/rubickd.yaml"

// ErrConfig reports an invalid configuration; the message names the field path.
var ErrConfig = errors.New("invalid configuration")

// Config is rubickd's configuration. Field names are the YAML keys; every
// key can also be set from the environment as RUBICK_<PATH> with dots
// replaced by underscores (RUBICK_SLURMRESTD_URL, RUBICK_INTERVAL).
type Config struct {
	Slurmrestd SlurmrestdConfig `mapstructure:"slurmrestd"`
	Commands   CommandsConfig   `mapstructure:"commands"`
	// Partitions are the partitions whose jobs rubickd manages.
	Partitions []string `mapstructure:"partitions"`
	// TenantFrom picks what a job's tenant is: its Slurm "account" or "qos".
	TenantFrom string         `mapstructure:"tenant_from"`
	Tenants    []TenantConfig `mapstructure:"tenants"`
	// Interval is the time between two cycles when nothing changes.
	Interval   time.Duration    `mapstructure:"interval"`
	Checkpoint CheckpointConfig `mapstructure:"checkpoint"`
	// RestartCost is what the policy assumes one checkpoint-restart
	// (signal, checkpoint, requeue, restart) costs a job of a model type
	// whose restarts rubickd has not measured.
	RestartCost time.Duration `mapstructure:"restart_cost"`
	// MeasureRestartCost says whether rubickd measures each restart from
	// the iteration times its job reports before and after it, and prices
	// a model type's restarts at the median of its last five measurements.
	MeasureRestartCost bool `mapstructure:"measure_restart_cost"`
	// ReadBatchScripts says whether rubickd reads the batch script of a
	// job that has not started yet (scontrol write batch_script, and the
	// DeepSpeed config its rubick-srun line names when the job's user owns
	// it), so that its first plan keeps the global batch and the features
	// of its launch line.
	ReadBatchScripts bool `mapstructure:"read_batch_scripts"`
	// Store is the SQLite database path.
	Store  string       `mapstructure:"store"`
	Policy PolicyConfig `mapstructure:"policy"`
	// TimeLimits says what rubickd does with the time limit (--time) of a
	// job it runs slower than its request.
	TimeLimits TimeLimitsConfig `mapstructure:"time_limits"`
	// RigidJobs says what rubickd does for jobs in managed partitions that
	// carry no model type, which Slurm itself starts: "schedule" keeps free
	// resources for the first pending one until its request fits
	// (RigidSchedule), "ignore" lets them take what is free when Slurm
	// looks (RigidIgnore).
	RigidJobs string `mapstructure:"rigid_jobs"`
	// SeedFits says whether the shipped model types are registered with the
	// fits of their shipped profiles (measured on A800 GPUs), or with their
	// specs only, so that the first job of each is profiled on this cluster.
	SeedFits bool          `mapstructure:"seed_fits"`
	Samples  SamplesConfig `mapstructure:"samples"`
	// GPUFacts is a JSON file written by `rubick gpuinfo` on a compute node
	// (GPU memory, GPUs per node, NVLink); empty keeps the built-in A800
	// values. rubickd usually runs where no GPU is.
	GPUFacts  string          `mapstructure:"gpu_facts"`
	Retention RetentionConfig `mapstructure:"retention"`
	// Listen is the address of the metrics and samples HTTP endpoint.
	Listen   string `mapstructure:"listen"`
	LogLevel string `mapstructure:"log_level"`
}

// SlurmrestdConfig says how to reach slurmrestd.
type SlurmrestdConfig struct {
	URL string `mapstructure:"url"`
	// Version pins the API version (v0.0.38, v0.0.41, v0.0.42); empty detects it.
	Version   string        `mapstructure:"version"`
	User      string        `mapstructure:"user"`
	TokenFile string        `mapstructure:"token_file"`
	RateLimit float64       `mapstructure:"rate_limit"` // requests per second
	Timeout   time.Duration `mapstructure:"timeout"`
}

// CommandsConfig holds the Slurm command paths (run with argv, never a shell).
type CommandsConfig struct {
	Scontrol string `mapstructure:"scontrol"`
	Scancel  string `mapstructure:"scancel"`
	// Sshare reads the fair-share factors to six decimals in fair-share
	// and priority order (scontrol prints two).
	Sshare  string        `mapstructure:"sshare"`
	Timeout time.Duration `mapstructure:"timeout"`
}

// TenantConfig is one tenant: the accounts or QOS it covers and its GPU quota.
type TenantConfig struct {
	Name string `mapstructure:"name"`
	// Match lists the accounts (or QOS, per tenant_from) of the tenant.
	Match []string `mapstructure:"match"`
	// QuotaGPUs is the guaranteed GPU quota; jobs within it are guaranteed.
	QuotaGPUs int `mapstructure:"quota_gpus"`
}

// CheckpointConfig says how a job is asked to checkpoint before a restart.
type CheckpointConfig struct {
	Signal string        `mapstructure:"signal"`
	Grace  time.Duration `mapstructure:"grace"`
	// RequeueMail keeps the BEGIN and REQUEUE mails Slurm sends at each
	// of rubick's requeues and restarts; false (the default) takes those
	// two types out of a job's MailType at its first requeue.
	RequeueMail bool `mapstructure:"requeue_mail"`
}

// TimeLimitsConfig says how a job's time limit follows its plan. A user's
// --time is meant for the request; on fewer or slower resources the same
// work takes longer, and Slurm would end the job (TIMEOUT) before it.
type TimeLimitsConfig struct {
	// Stretch scales the limit at each start by how much slower than its
	// request the job's plan is predicted to run, up to the job's MaxWall
	// (QOS, association) or its partition's MaxTime; a job as fast as its
	// request or faster keeps the user's limit.
	Stretch bool `mapstructure:"stretch"`
	// Margin is added to a stretched limit against prediction error
	// (0.25: a quarter more).
	Margin float64 `mapstructure:"margin"`
}

// RetentionConfig bounds what the store keeps; rubickd prunes once an
// hour. Plan history, fits and profile samples are always kept.
type RetentionConfig struct {
	// Reasons is how long per-job decision reasons are kept (each job's
	// newest is kept longer, for rubick explain); 0 keeps all.
	Reasons time.Duration `mapstructure:"reasons"`
	// SamplesPerConfig is how many reported samples are kept per job and
	// configuration (plan, placement, CPUs), the newest; 0 keeps all.
	SamplesPerConfig int `mapstructure:"samples_per_config"`
}

// SamplesConfig governs the iteration times rubick-srun reports.
type SamplesConfig struct {
	// Unmunge verifies the munge credential of each report.
	Unmunge string `mapstructure:"unmunge"`
	// MungeSocket is munged's socket; empty uses munge's default.
	MungeSocket string `mapstructure:"munge_socket"`
	// RefitThreshold is the mean relative error of new samples above which
	// a model type is refitted.
	RefitThreshold float64 `mapstructure:"refit_threshold"`
	// MaxConfigsPerJob bounds the configurations (plan, placement, CPUs)
	// one job may report; 0 leaves them unbounded.
	MaxConfigsPerJob int `mapstructure:"max_configs_per_job"`
}

// PolicyConfig selects the policy and its knobs.
type PolicyConfig struct {
	Name string `mapstructure:"name"`
	// ReconfigThreshold is the least (T - N*delta)/T a running job keeps
	// after one more reconfiguration.
	ReconfigThreshold float64 `mapstructure:"reconfig_threshold"`
	// StarvationAge is how long a best-effort job may wait before it is
	// scheduled regardless of its slope.
	StarvationAge time.Duration `mapstructure:"starvation_age"`
	// DeadlineLead is how long before the latest start its --deadline
	// allows a queued best-effort job goes first (0: never).
	DeadlineLead time.Duration `mapstructure:"deadline_lead"`
	// BestEffortOrder is the order in which best-effort jobs take GPUs:
	// "slope", "fairshare" (Slurm's fair-share factor of each job's
	// association, read with scontrol show assoc_mgr) or "priority"
	// (Slurm's partition tier and multifactor priority, computed as
	// slurmctld would for the job unheld).
	BestEffortOrder string `mapstructure:"best_effort_order"`
	// TimeWeight weighs that order by each job's time left by its time
	// limit: slope / left^time_weight (0: slope alone).
	TimeWeight float64 `mapstructure:"time_weight"`
	// GuaranteedOrder is the admission order of queued guaranteed jobs:
	// "shortest" (time limit), "submit" or "priority" (as
	// best_effort_order's).
	GuaranteedOrder string `mapstructure:"guaranteed_order"`
	// GuaranteedAge is how long a guaranteed job may wait before it is
	// admitted ahead of shorter ones (0: never).
	GuaranteedAge time.Duration `mapstructure:"guaranteed_age"`
	// ReclaimKeep is the fraction of its throughput a best-effort job keeps
	// when a guaranteed job takes part of its GPUs; below it the job is
	// requeued whole instead.
	ReclaimKeep float64 `mapstructure:"reclaim_keep"`
	// HostMemPerGPUGB is the host memory (GB) booked per GPU of a job that
	// asked for less per GPU, besides what its plan's offloaded states take.
	HostMemPerGPUGB float64 `mapstructure:"host_mem_per_gpu_gb"`
}

// prioritised reports whether either class of jobs goes by Slurm's
// priority, which rubickd then computes for every job.
func (p PolicyConfig) prioritised() bool {
	return p.BestEffortOrder == policy.OrderPriority || p.GuaranteedOrder == policy.OrderPriority
}

// readsFactors reports whether rubickd reads the fair-share factors of its
// jobs' associations: for fair-share order, or for Slurm's priority,
// which weighs them.
func (p PolicyConfig) readsFactors() bool {
	return p.BestEffortOrder == policy.OrderFairShare || p.prioritised()
}

// Config returns the policy package's configuration with these knobs set.
func (p PolicyConfig) Config() policy.Config {
	c := policy.DefaultConfig()
	c.ReconfigKeep = p.ReconfigThreshold
	c.StarvationAge = p.StarvationAge
	c.DeadlineLead = p.DeadlineLead
	c.BestEffortOrder = p.BestEffortOrder
	c.TimeWeight = p.TimeWeight
	c.GuaranteedOrder = p.GuaranteedOrder
	c.GuaranteedAge = p.GuaranteedAge
	c.ReclaimKeep = p.ReclaimKeep
	c.HostMemPerGPUGB = p.HostMemPerGPUGB
	return c
}

// keyOf returns the YAML key under which this file sets the policy.Config
// field, or "" for a field it leaves at the policy's default.
func (PolicyConfig) keyOf(field string) string {
	switch field {
	case "ReconfigKeep":
		return "policy.reconfig_threshold"
	case "StarvationAge":
		return "policy.starvation_age"
	case "DeadlineLead":
		return "policy.deadline_lead"
	case "BestEffortOrder":
		return "policy.best_effort_order"
	case "TimeWeight":
		return "policy.time_weight"
	case "GuaranteedOrder":
		return "policy.guaranteed_order"
	case "GuaranteedAge":
		return "policy.guaranteed_age"
	case "ReclaimKeep":
		return "policy.reclaim_keep"
	case "HostMemPerGPUGB":
		return "policy.host_mem_per_gpu_gb"
	}
	return ""
}

// Defaults returns the configuration used for every key the file and the
// environment leave unset.
func Defaults() Config {
	pd := policy.DefaultConfig()
	return Config{
		Slurmrestd: SlurmrestdConfig{
			URL: "http://127.0.0.1:6820", User: "root", TokenFile: "/etc/rubick/slurm.jwt",
			RateLimit: 20, Timeout: 10 * time.Second,
		},
		Commands: CommandsConfig{
			Scontrol: "scontrol", Scancel: "scancel", Sshare: "sshare", Timeout: 30 * time.Second,
		},
		Partitions:         []string{"gpu"},
		TenantFrom:         "account",
		Interval:           30 * time.Second,
		Checkpoint:         CheckpointConfig{Signal: launch.DefaultCheckpointSignal, Grace: 120 * time.Second},
		RestartCost:        260 * time.Second,
		MeasureRestartCost: true,
		ReadBatchScripts:   true,
		Retention:          RetentionConfig{Reasons: 14 * 24 * time.Hour, SamplesPerConfig: 100},
		Store:              "/var/lib/rubick/rubick.db",
		// The policy's own tuned defaults (docs/policy.md says why 0.9, not
		// the paper's 0.97, with a 260 s restart).
		Policy: PolicyConfig{Name: "rubick", ReconfigThreshold: pd.ReconfigKeep, StarvationAge: pd.StarvationAge, DeadlineLead: pd.DeadlineLead,
			BestEffortOrder: pd.BestEffortOrder, TimeWeight: pd.TimeWeight, GuaranteedOrder: pd.GuaranteedOrder, GuaranteedAge: pd.GuaranteedAge, ReclaimKeep: pd.ReclaimKeep,
			HostMemPerGPUGB: pd.HostMemPerGPUGB},
		// The margin covers the model's error on measured rows (17 % mean,
		// docs/benchmarks.md) with some of its tail.
		TimeLimits: TimeLimitsConfig{Stretch: true, Margin: 0.25},
		RigidJobs:  RigidSchedule,
		SeedFits:   true,
		Samples:    SamplesConfig{Unmunge: "unmunge", RefitThreshold: 0.10, MaxConfigsPerJob: 64},
		Listen:     "127.0.0.1:9717",
		LogLevel:   "info",
	}
}

// retiredKeys are keys earlier example files had that rubickd never used:
// a file that still has one loads, with a warning saying why it is ignored.
var retiredKeys = map[string]string{
	"commands.sacct": "rubickd never runs sacct; rubick report takes --sacct",
}

// LoadConfig reads path (empty: no file) over the defaults, then applies
// the RUBICK_* variables of environ, and validates the result. environ is
// passed explicitly (os.Environ() in main) so tests control it. RUBICK_*
// variables that match no key (a typo, or another rubick tool's variable
// such as RUBICK_MODEL_TYPE) are returned as warnings for the caller to log.
func LoadConfig(path string, environ []string) (Config, []string, error) {
	v := viper.New()
	d := Defaults()
	setDefaults(v, d)
	known := v.AllKeys()
	defaults := make(map[string]any, len(known))
	for _, k := range known {
		defaults[k] = v.Get(k)
	}
	if path != "" {
		v.SetConfigFile(path)
		if err := v.ReadInConfig(); err != nil {
			return Config{}, nil, fmt.Errorf("%w: read %s: %v", ErrConfig, path, err)
		}
	}
	var warnings []string
	if path != "" {
		for _, k := range v.AllKeys() {
			if why, ok := retiredKeys[k]; ok {
				warnings = append(warnings, fmt.Sprintf("%s: key %q is ignored: %s", path, k, why))
				continue
			}
			// tenants is a list of maps, which viper reports as one key.
			if !slices.Contains(known, k) && k != "tenants" {
				return Config{}, nil, fmt.Errorf("%w: %s: unknown key %q", ErrConfig, path, k)
			}
			if !v.InConfig(k) {
				continue
			}
			if k == "tenants" {
				if err := checkTenants(path, v.Get(k)); err != nil {
					return Config{}, nil, err
				}
				continue
			}
			if err := checkType(k, defaults[k], v.Get(k)); err != nil {
				return Config{}, nil, err
			}
		}
	}
	byEnv := make(map[string]string, len(known))
	for _, k := range known {
		byEnv["RUBICK_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))] = k
	}
	var fromEnv []string // the RUBICK_* variables set, as NAME=value
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "RUBICK_") {
			continue
		}
		key, ok := byEnv[name]
		if !ok {
			warnings = append(warnings, fmt.Sprintf("environment variable %s matches no configuration key; ignored", name))
			continue
		}
		v.Set(key, val)
		fromEnv = append(fromEnv, kv)
	}
	// setBy finds the variable that set the key err names, written in
	// err as named(key).
	setBy := func(err error, named func(key string) string) (name, val string, ok bool) {
		for _, kv := range fromEnv {
			name, val, _ := strings.Cut(kv, "=")
			if strings.Contains(err.Error(), named(byEnv[name])) {
				return name, val, true
			}
		}
		return "", "", false
	}
	var c Config
	if err := v.Unmarshal(&c); err != nil {
		// The decoder names the key; say which variable set it.
		if name, val, ok := setBy(err, func(key string) string { return "'" + key + "'" }); ok {
			return Config{}, warnings, fmt.Errorf("%w: environment variable %s=%q: %v", ErrConfig, name, val, err)
		}
		return Config{}, warnings, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := c.Validate(); err != nil {
		// A value the environment gave (an empty RUBICK_STORE= in a
		// service's environment file, say) is not in any file to look for.
		if name, _, ok := setBy(err, func(key string) string { return ": " + key + "=" }); ok {
			return Config{}, warnings, fmt.Errorf("%w (from environment variable %s)", err, name)
		}
		return Config{}, warnings, err
	}
	return c, warnings, nil
}

// checkType refuses a value from the file that the decoder would take
// in another sense than the one written: a number for a duration (120
// would be 120 ns, not seconds; only 0 means the same in every unit), a
// fraction for a count (cut to its whole part), a flag for a number (true
// would be 1) or a number for a flag.
// def is the key's default, which has the key's type.
func checkType(key string, def, val any) error {
	num, isNum := number(val)
	bad := func(why string) error { return fmt.Errorf("%w: %s=%v: %s", ErrConfig, key, val, why) }
	switch def.(type) {
	case time.Duration:
		if isNum && num != 0 {
			return bad(fmt.Sprintf("a number without a unit; want a duration such as %vs or %vm", val, val))
		}
	case int:
		if _, isBool := val.(bool); isBool || isNum && num != math.Trunc(num) {
			return bad("want a whole number")
		}
	case float64:
		// The decoder reads true as 1 and false as 0.
		if _, ok := val.(bool); ok {
			return bad("want a number")
		}
	case bool:
		if isNum {
			return bad("want true or false")
		}
	}
	return nil
}

// tenantKeys are the keys of one tenants entry, with values of their types.
var tenantKeys = map[string]any{"name": "", "match": []string(nil), "quota_gpus": 0}

// checkTenants does for the entries of tenants, which viper reports as
// one key, what LoadConfig does for the other keys: a key no entry has is
// an error, as is a value of another type than its key's.
func checkTenants(path string, raw any) error {
	list, ok := raw.([]any)
	if !ok {
		return nil // the decoder names it
	}
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			continue // the decoder names it
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			key := fmt.Sprintf("tenants[%d].%s", i, strings.ToLower(k))
			def, known := tenantKeys[strings.ToLower(k)]
			if !known {
				return fmt.Errorf("%w: %s: unknown key %q", ErrConfig, path, key)
			}
			if err := checkType(key, def, m[k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// number returns val as a float64 when it is a number.
func number(val any) (float64, bool) {
	r := reflect.ValueOf(val)
	switch r.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(r.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(r.Uint()), true
	case reflect.Float32, reflect.Float64:
		return r.Float(), true
	}
	return 0, false
}

func setDefaults(v *viper.Viper, d Config) {
	v.SetDefault("slurmrestd.url", d.Slurmrestd.URL)
	v.SetDefault("slurmrestd.version", d.Slurmrestd.Version)
	v.SetDefault("slurmrestd.user", d.Slurmrestd.User)
	v.SetDefault("slurmrestd.token_file", d.Slurmrestd.TokenFile)
	v.SetDefault("slurmrestd.rate_limit", d.Slurmrestd.RateLimit)
	v.SetDefault("slurmrestd.timeout", d.Slurmrestd.Timeout)
	v.SetDefault("commands.scontrol", d.Commands.Scontrol)
	v.SetDefault("commands.scancel", d.Commands.Scancel)
	v.SetDefault("commands.sshare", d.Commands.Sshare)
	v.SetDefault("commands.timeout", d.Commands.Timeout)
	v.SetDefault("partitions", d.Partitions)
	v.SetDefault("tenant_from", d.TenantFrom)
	v.SetDefault("interval", d.Interval)
	v.SetDefault("checkpoint.signal", d.Checkpoint.Signal)
	v.SetDefault("checkpoint.grace", d.Checkpoint.Grace)
	v.SetDefault("checkpoint.requeue_mail", d.Checkpoint.RequeueMail)
	v.SetDefault("restart_cost", d.RestartCost)
	v.SetDefault("measure_restart_cost", d.MeasureRestartCost)
	v.SetDefault("read_batch_scripts", d.ReadBatchScripts)
	v.SetDefault("retention.reasons", d.Retention.Reasons)
	v.SetDefault("retention.samples_per_config", d.Retention.SamplesPerConfig)
	v.SetDefault("store", d.Store)
	v.SetDefault("policy.name", d.Policy.Name)
	v.SetDefault("policy.reconfig_threshold", d.Policy.ReconfigThreshold)
	v.SetDefault("policy.starvation_age", d.Policy.StarvationAge)
	v.SetDefault("policy.deadline_lead", d.Policy.DeadlineLead)
	v.SetDefault("policy.best_effort_order", d.Policy.BestEffortOrder)
	v.SetDefault("policy.time_weight", d.Policy.TimeWeight)
	v.SetDefault("policy.guaranteed_order", d.Policy.GuaranteedOrder)
	v.SetDefault("policy.guaranteed_age", d.Policy.GuaranteedAge)
	v.SetDefault("policy.reclaim_keep", d.Policy.ReclaimKeep)
	v.SetDefault("policy.host_mem_per_gpu_gb", d.Policy.HostMemPerGPUGB)
	v.SetDefault("time_limits.stretch", d.TimeLimits.Stretch)
	v.SetDefault("time_limits.margin", d.TimeLimits.Margin)
	v.SetDefault("rigid_jobs", d.RigidJobs)
	v.SetDefault("seed_fits", d.SeedFits)
	v.SetDefault("gpu_facts", d.GPUFacts)
	v.SetDefault("samples.unmunge", d.Samples.Unmunge)
	v.SetDefault("samples.munge_socket", d.Samples.MungeSocket)
	v.SetDefault("samples.refit_threshold", d.Samples.RefitThreshold)
	v.SetDefault("samples.max_configs_per_job", d.Samples.MaxConfigsPerJob)
	v.SetDefault("listen", d.Listen)
	v.SetDefault("log_level", d.LogLevel)
}

// minCallTimeout bounds slurmrestd.timeout and commands.timeout from
// below: a busy slurmctld takes longer than a few milliseconds to answer,
// so a shorter bound fails every request and command rubickd makes.
const minCallTimeout = time.Second

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	versionRE = regexp.MustCompile(`^v0\.0\.(3[89]|4[0-9])$`)
)

// Validate reports the first invalid field by its path and value.
func (c Config) Validate() error {
	bad := func(path string, val any, why string) error {
		return fmt.Errorf("%w: %s=%v: %s", ErrConfig, path, val, why)
	}
	u, err := url.Parse(c.Slurmrestd.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix") || (u.Scheme != "unix" && u.Host == "") {
		return bad("slurmrestd.url", fmt.Sprintf("%q", c.Slurmrestd.URL), "want http(s)://host:port")
	}
	if c.Slurmrestd.Version != "" && !versionRE.MatchString(c.Slurmrestd.Version) {
		return bad("slurmrestd.version", fmt.Sprintf("%q", c.Slurmrestd.Version), "want empty (detect) or v0.0.38 .. v0.0.49")
	}
	if !nameRE.MatchString(c.Slurmrestd.User) {
		return bad("slurmrestd.user", fmt.Sprintf("%q", c.Slurmrestd.User), "not a user name")
	}
	if c.Slurmrestd.TokenFile == "" {
		return bad("slurmrestd.token_file", `""`, "a JWT token file is required")
	}
	if !(c.Slurmrestd.RateLimit > 0) || c.Slurmrestd.RateLimit > 10000 {
		return bad("slurmrestd.rate_limit", c.Slurmrestd.RateLimit, "want requests per second in (0, 10000]")
	}
	if c.Slurmrestd.Timeout < minCallTimeout {
		return bad("slurmrestd.timeout", c.Slurmrestd.Timeout, "want >= "+minCallTimeout.String())
	}
	for path, cmd := range map[string]string{"commands.scontrol": c.Commands.Scontrol, "commands.scancel": c.Commands.Scancel, "commands.sshare": c.Commands.Sshare,
		"samples.unmunge": c.Samples.Unmunge} {
		if cmd == "" || strings.ContainsAny(cmd, " \t\n;|&$`") {
			return bad(path, fmt.Sprintf("%q", cmd), "want a command name or absolute path without spaces or shell characters")
		}
	}
	if c.Commands.Timeout < minCallTimeout {
		return bad("commands.timeout", c.Commands.Timeout, "want >= "+minCallTimeout.String())
	}
	if len(c.Partitions) == 0 {
		return bad("partitions", "[]", "at least one managed partition is required")
	}
	for i, p := range c.Partitions {
		if !nameRE.MatchString(p) {
			return bad(fmt.Sprintf("partitions[%d]", i), fmt.Sprintf("%q", p), "not a partition name")
		}
	}
	if c.TenantFrom != "account" && c.TenantFrom != "qos" {
		return bad("tenant_from", fmt.Sprintf("%q", c.TenantFrom), `want "account" or "qos"`)
	}
	seen := map[string]bool{}
	matched := map[string]string{}
	for i, t := range c.Tenants {
		path := fmt.Sprintf("tenants[%d]", i)
		if !nameRE.MatchString(t.Name) {
			return bad(path+".name", fmt.Sprintf("%q", t.Name), "not a tenant name")
		}
		if seen[t.Name] {
			return bad(path+".name", fmt.Sprintf("%q", t.Name), "duplicate tenant")
		}
		seen[t.Name] = true
		if t.QuotaGPUs < 0 || t.QuotaGPUs > 1_000_000 {
			return bad(path+".quota_gpus", t.QuotaGPUs, "want 0..1000000")
		}
		for j, m := range t.Match {
			if !nameRE.MatchString(m) {
				return bad(fmt.Sprintf("%s.match[%d]", path, j), fmt.Sprintf("%q", m), "not an account or QOS name")
			}
			if other, dup := matched[m]; dup {
				return bad(fmt.Sprintf("%s.match[%d]", path, j), fmt.Sprintf("%q", m), "already belongs to tenant "+other)
			}
			matched[m] = t.Name
		}
	}
	if c.Interval < time.Second || c.Interval > time.Hour {
		return bad("interval", c.Interval, "want 1s..1h")
	}
	if !slices.Contains(launch.CheckpointSignals, strings.TrimPrefix(strings.ToUpper(c.Checkpoint.Signal), "SIG")) {
		return bad("checkpoint.signal", fmt.Sprintf("%q", c.Checkpoint.Signal), "want one of "+strings.Join(launch.CheckpointSignals, ", "))
	}
	if c.Checkpoint.Grace < 0 || c.Checkpoint.Grace > 24*time.Hour {
		return bad("checkpoint.grace", c.Checkpoint.Grace, "want 0..24h")
	}
	if c.RestartCost < 0 || c.RestartCost > 24*time.Hour {
		return bad("restart_cost", c.RestartCost, "want 0..24h")
	}
	if c.Store == "" {
		return bad("store", `""`, "a database path is required")
	}
	if c.Retention.Reasons < 0 {
		return bad("retention.reasons", c.Retention.Reasons, "want >= 0 (0 keeps all)")
	}
	if c.Retention.SamplesPerConfig < 0 || c.Retention.SamplesPerConfig > 1_000_000 {
		return bad("retention.samples_per_config", c.Retention.SamplesPerConfig, "want 0..1000000 (0 keeps all)")
	}
	if !slices.Contains(policy.Names(), c.Policy.Name) {
		return bad("policy.name", fmt.Sprintf("%q", c.Policy.Name), "want one of "+strings.Join(policy.Names(), ", "))
	}
	if err := c.Policy.Config().Validate(); err != nil {
		var fe *policy.FieldError
		if errors.As(err, &fe) {
			if key := c.Policy.keyOf(fe.Field); key != "" {
				return bad(key, fe.Value, "want "+fe.Want)
			}
		}
		// A field this file does not set was valid by default; keep the
		// policy's words rather than lose the error.
		return fmt.Errorf("%w: policy: %w", ErrConfig, err)
	}
	if !(c.Samples.RefitThreshold > 0 && c.Samples.RefitThreshold < 10) {
		return bad("samples.refit_threshold", c.Samples.RefitThreshold, "want a relative error in (0, 10)")
	}
	if c.Samples.MaxConfigsPerJob < 0 {
		return bad("samples.max_configs_per_job", c.Samples.MaxConfigsPerJob, "want a count >= 0 (0: no bound)")
	}
	if !(c.TimeLimits.Margin >= 0 && c.TimeLimits.Margin <= 10) {
		return bad("time_limits.margin", c.TimeLimits.Margin, "want a fraction in [0, 10]")
	}
	if c.RigidJobs != RigidSchedule && c.RigidJobs != RigidIgnore {
		return bad("rigid_jobs", fmt.Sprintf("%q", c.RigidJobs), `want "schedule" or "ignore"`)
	}
	if c.Listen != "" {
		// A port that is not a number between 1 and 65535 would fail only
		// when the endpoint starts, logged, with rubickd running on.
		_, port, err := net.SplitHostPort(c.Listen)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
			return bad("listen", fmt.Sprintf("%q", c.Listen), "want host:port (port 1-65535) or empty to disable")
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return bad("log_level", fmt.Sprintf("%q", c.LogLevel), "want debug, info, warn or error")
	}
	return nil
}

// TenantOf returns the tenant of a job with the given account and QOS, or
// "" when no tenant matches (the job is best-effort).
func (c Config) TenantOf(account, qos string) string {
	key := account
	if c.TenantFrom == "qos" {
		key = qos
	}
	for _, t := range c.Tenants {
		if slices.Contains(t.Match, key) {
			return t.Name
		}
	}
	return ""
}
