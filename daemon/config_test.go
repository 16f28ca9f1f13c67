package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/policy"
)

func TestLoadConfigDefaults(t *testing.T) {
	c, warn, err := LoadConfig("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(warn) != 0 {
		t.Errorf("warnings = %v, want none", warn)
	}
	if diff := cmp.Diff(Defaults(), c); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

func TestLoadConfigExampleFileAndEnv(t *testing.T) {
	c, warn, err := LoadConfig("../contrib/rubickd/rubickd.yaml", []string{
		"RUBICK_INTERVAL=45s", "RUBICK_PARTITIONS=gpu,a100", "RUBICK_MODEL_TYPE=gpt2", "PATH=/bin",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(warn) != 1 || !strings.Contains(warn[0], "RUBICK_MODEL_TYPE") {
		t.Errorf("warnings = %q, want one naming RUBICK_MODEL_TYPE", warn)
	}
	if c.Interval != 45*time.Second {
		t.Errorf("interval = %v, want the environment's 45s", c.Interval)
	}
	if diff := cmp.Diff([]string{"gpu", "a100"}, c.Partitions); diff != "" {
		t.Errorf("partitions (-want +got):\n%s", diff)
	}
	want := []TenantConfig{{Name: "vision", Match: []string{"vision", "vision-dev"}, QuotaGPUs: 16}, {Name: "nlp", Match: []string{"nlp"}, QuotaGPUs: 16}}
	if diff := cmp.Diff(want, c.Tenants); diff != "" {
		t.Errorf("tenants (-want +got):\n%s", diff)
	}
	if got := c.TenantOf("vision-dev", "normal"); got != "vision" {
		t.Errorf("TenantOf(vision-dev) = %q, want vision", got)
	}
	if got := c.TenantOf("other", "normal"); got != "" {
		t.Errorf("TenantOf(other) = %q, want none", got)
	}
	if diff := cmp.Diff(policy.DefaultConfig(), c.Policy.Config()); diff != "" {
		t.Errorf("the example's policy knobs differ from the policy defaults (-want +got):\n%s", diff)
	}
	if !c.SeedFits {
		t.Error("seed_fits = false, want the example's true")
	}
	if c.TimeLimits != Defaults().TimeLimits {
		t.Errorf("example: time_limits %+v, want the defaults %+v", c.TimeLimits, Defaults().TimeLimits)
	}
	if d := Defaults(); c.Retention != d.Retention || c.MeasureRestartCost != d.MeasureRestartCost || c.RestartCost != d.RestartCost {
		t.Errorf("example: retention %+v, measure_restart_cost %v, restart_cost %v; want the defaults %+v, %v, %v",
			c.Retention, c.MeasureRestartCost, c.RestartCost, d.Retention, d.MeasureRestartCost, d.RestartCost)
	}
	off, _, err := LoadConfig("", []string{"RUBICK_SEED_FITS=false"})
	if err != nil || off.SeedFits {
		t.Errorf("RUBICK_SEED_FITS=false: seed_fits = %v (%v), want false", off.SeedFits, err)
	}
}

func TestLoadConfigErrorsNameTheField(t *testing.T) {
	tests := map[string]struct {
		yaml string
		env  []string
		want string
	}{
		"bad url":            {yaml: "slurmrestd:\n  url: ftp://x\n", want: "slurmrestd.url"},
		"bad version":        {yaml: "slurmrestd:\n  version: v1\n", want: `slurmrestd.version="v1"`},
		"zero rate":          {yaml: "slurmrestd:\n  rate_limit: 0\n", want: "slurmrestd.rate_limit=0"},
		"shell in command":   {yaml: "commands:\n  scontrol: \"scontrol; rm -rf /\"\n", want: "commands.scontrol"},
		"shell in sshare":    {yaml: "commands:\n  sshare: \"sshare $(id)\"\n", want: "commands.sshare"},
		"no partitions":      {yaml: "partitions: []\n", want: "partitions"},
		"bad partition":      {yaml: "partitions: [\"gpu x\"]\n", want: `partitions[0]="gpu x"`},
		"tenant_from":        {yaml: "tenant_from: user\n", want: `tenant_from="user"`},
		"dup tenant":         {yaml: "tenants:\n  - {name: a, quota_gpus: 1}\n  - {name: a, quota_gpus: 1}\n", want: `tenants[1].name="a"`},
		"negative quota":     {yaml: "tenants:\n  - {name: a, quota_gpus: -3}\n", want: "tenants[0].quota_gpus=-3"},
		"shared account":     {yaml: "tenants:\n  - {name: a, match: [x]}\n  - {name: b, match: [x]}\n", want: `tenants[1].match[0]="x"`},
		"interval":           {yaml: "interval: 10ms\n", want: "interval=10ms"},
		"slurmrestd timeout": {yaml: "slurmrestd:\n  timeout: 1ms\n", want: "slurmrestd.timeout=1ms: want >= 1s"},
		"commands timeout":   {env: []string{"RUBICK_COMMANDS_TIMEOUT=500ms"}, want: "commands.timeout=500ms: want >= 1s (from environment variable RUBICK_COMMANDS_TIMEOUT)"},
		"empty store env":    {env: []string{"RUBICK_STORE="}, want: `store="": a database path is required (from environment variable RUBICK_STORE)`},
		"flag for a number":  {yaml: "policy:\n  reconfig_threshold: true\n", want: "policy.reconfig_threshold=true: want a number"},
		"flag for a count":   {yaml: "retention:\n  samples_per_config: false\n", want: "retention.samples_per_config=false: want a whole number"},
		"negative configs":   {yaml: "samples:\n  max_configs_per_job: -1\n", want: "samples.max_configs_per_job=-1"},
		"fraction configs":   {yaml: "samples:\n  max_configs_per_job: 6.5\n", want: "samples.max_configs_per_job=6.5"},
		"listen no port":     {yaml: "listen: 127.0.0.1\n", want: `listen="127.0.0.1"`},
		"listen named port":  {yaml: "listen: \"127.0.0.1:http\"\n", want: `listen="127.0.0.1:http": want host:port (port 1-65535)`},
		"listen port range":  {yaml: "listen: \":70000\"\n", want: `listen=":70000"`},
		"signal":             {yaml: "checkpoint:\n  signal: KILL\n", want: `checkpoint.signal="KILL"`},
		"threshold":          {yaml: "policy:\n  reconfig_threshold: 1.5\n", want: "policy.reconfig_threshold=1.5"},
		"unknown policy":     {yaml: "policy:\n  name: bogus\n", want: `policy.name="bogus": want one of `},
		"unknown policy env": {env: []string{"RUBICK_POLICY_NAME=rubik"}, want: `policy.name="rubik": want one of`},
		"env duration":       {env: []string{"RUBICK_INTERVAL=banana"}, want: `environment variable RUBICK_INTERVAL="banana"`},
		"env nested":         {env: []string{"RUBICK_POLICY_STARVATION_AGE=soon"}, want: `environment variable RUBICK_POLICY_STARVATION_AGE="soon"`},
		"starvation age":     {yaml: "policy:\n  starvation_age: -1s\n", want: "policy.starvation_age=-1s: want >= 0"},
		"deadline lead":      {yaml: "policy:\n  deadline_lead: -5m\n", want: "policy.deadline_lead=-5m0s: want >= 0"},
		"guaranteed order":   {yaml: "policy:\n  guaranteed_order: random\n", want: `policy.guaranteed_order="random"`},
		"best-effort order":  {yaml: "policy:\n  best_effort_order: age\n", want: `policy.best_effort_order="age": want "slope", "fairshare" or "priority"`},
		"time weight":        {yaml: "policy:\n  time_weight: 1.5\n", want: "policy.time_weight=1.5: want 0..1"},
		"guaranteed age":     {yaml: "policy:\n  guaranteed_age: -1h\n", want: "policy.guaranteed_age=-1h"},
		"reclaim keep":       {yaml: "policy:\n  reclaim_keep: 2\n", want: "policy.reclaim_keep=2"},
		"host memory":        {yaml: "policy:\n  host_mem_per_gpu_gb: -4\n", want: "policy.host_mem_per_gpu_gb=-4"},
		"rigid":              {yaml: "rigid_jobs: maybe\n", want: `rigid_jobs="maybe"`},
		"time margin":        {yaml: "time_limits:\n  margin: -0.1\n", want: "time_limits.margin=-0.1"},
		"retention":          {yaml: "retention:\n  reasons: -1h\n", want: "retention.reasons=-1h"},
		"samples kept":       {env: []string{"RUBICK_RETENTION_SAMPLES_PER_CONFIG=-2"}, want: "retention.samples_per_config=-2: want 0..1000000 (0 keeps all) (from environment variable RUBICK_RETENTION_SAMPLES_PER_CONFIG)"},
		"unknown key":        {yaml: "intervall: 30s\n", want: `unknown key "intervall"`},
		"bad duration":       {yaml: "interval: soon\n", want: "interval"},
		"env value":          {env: []string{"RUBICK_LOG_LEVEL=loud"}, want: `log_level="loud"`},
		"tenant key":         {yaml: "tenants:\n  - {name: a, match: [x], quota: 16}\n", want: `unknown key "tenants[0].quota"`},
		"tenant quota":       {yaml: "tenants:\n  - {name: a, match: [x], quota_gpus: 16.5}\n", want: "tenants[0].quota_gpus=16.5: want a whole number"},
		"grace without unit": {yaml: "checkpoint:\n  grace: 120\n", want: "checkpoint.grace=120: a number without a unit"},
		"cost without unit":  {yaml: "restart_cost: 260\n", want: "restart_cost=260: a number without a unit"},
		"age without unit":   {yaml: "retention:\n  reasons: 336\n", want: "retention.reasons=336: a number without a unit"},
		"float without unit": {yaml: "policy:\n  starvation_age: 1.5\n", want: "policy.starvation_age=1.5: a number without a unit"},
		"fraction of count":  {yaml: "retention:\n  samples_per_config: 2.5\n", want: "retention.samples_per_config=2.5: want a whole number"},
		"number for flag":    {yaml: "seed_fits: 2\n", want: "seed_fits=2: want true or false"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := ""
			if tc.yaml != "" {
				path = filepath.Join(t.TempDir(), "rubickd.yaml")
				if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := LoadConfig(path, tc.env)
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error = %v, want ErrConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

// A key earlier example files had and rubickd never used loads with a
// warning instead of failing as unknown.
func TestLoadConfigRetiredKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rubickd.yaml")
	if err := os.WriteFile(path, []byte("commands:\n  sacct: /usr/bin/sacct\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, warn, err := LoadConfig(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(warn) != 1 || !strings.Contains(warn[0], `"commands.sacct" is ignored`) {
		t.Errorf("warnings = %q, want one saying commands.sacct is ignored", warn)
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	if _, _, err := LoadConfig(filepath.Join(t.TempDir(), "absent.yaml"), nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("error = %v, want ErrConfig", err)
	}
}

func TestLoadConfigWarnsOnUnknownVariable(t *testing.T) {
	_, warn, err := LoadConfig("", []string{"RUBICK_INTERVL=3s"})
	if err != nil {
		t.Fatal(err)
	}
	if len(warn) != 1 || !strings.Contains(warn[0], "RUBICK_INTERVL") {
		t.Errorf("warnings = %q, want one naming RUBICK_INTERVL", warn)
	}
}

// A bare 0 is a duration without a unit that means the same in any unit:
// "0: never" and "0: keep all" in the example file.
func TestLoadConfigZeroDurations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rubickd.yaml")
	if err := os.WriteFile(path, []byte("policy:\n  deadline_lead: 0\n  guaranteed_age: 0.0\nretention:\n  reasons: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _, err := LoadConfig(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := []time.Duration{c.Policy.DeadlineLead, c.Policy.GuaranteedAge, c.Retention.Reasons}
	if diff := cmp.Diff([]time.Duration{0, 0, 0}, got); diff != "" {
		t.Errorf("deadline_lead, guaranteed_age, retention.reasons (-want +got):\n%s", diff)
	}
}

// FuzzLoadConfig loads any text as rubickd's file: what loads is a
// configuration that validates and loads the same again, and every error
// wraps ErrConfig.
func FuzzLoadConfig(f *testing.F) {
	example, err := os.ReadFile("../contrib/rubickd/rubickd.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(example), "", "slurmrestd:\n  url: ftp://x\n", "commands:\n  scontrol: \"scontrol; rm -rf /\"\n", "partitions: []\n",
		"tenants:\n  - {name: a, quota_gpus: 1}\n  - {name: a, quota_gpus: 1}\n", "tenants:\n  - {name: a, match: [x], quota: 16}\n",
		"tenants: 3\n", "tenants:\n  - 3\n", "policy:\n  reconfig_threshold: true\n", "samples:\n  max_configs_per_job: 6.5\n",
		"checkpoint:\n  grace: 120\n", "policy:\n  deadline_lead: 0\n  guaranteed_age: 0.0\nretention:\n  reasons: 0\n",
		"commands:\n  sacct: /usr/bin/sacct\n", "interval: soon\n", "a: &x [*x]\n", "policy: [1, 2]\n", "{", "\t",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, yaml string) {
		path := filepath.Join(t.TempDir(), "rubickd.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		c, _, err := LoadConfig(path, nil)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("loaded a configuration that does not validate: %v", err)
		}
		again, _, err := LoadConfig(path, nil)
		if err != nil {
			t.Fatalf("second load: %v", err)
		}
		if diff := cmp.Diff(c, again); diff != "" {
			t.Fatalf("two loads differ (-first +second):\n%s", diff)
		}
	})
}
