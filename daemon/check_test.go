package daemon

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

type checkCluster struct {
	parts  []slurm.Partition
	nodes  []slurm.Node
	limits slurm.Limits
	jobs   []slurm.Job
	ping   error
}

func (c checkCluster) Jobs(context.Context, time.Time) ([]slurm.Job, bool, error) {
	return c.jobs, true, nil
}

func (c checkCluster) Version() string                             { return slurm.Version41 }
func (c checkCluster) Ping(context.Context) error                  { return c.ping }
func (c checkCluster) Nodes(context.Context) ([]slurm.Node, error) { return c.nodes, nil }
func (c checkCluster) Partitions(context.Context) ([]slurm.Partition, error) {
	return c.parts, nil
}
func (c checkCluster) Limits(context.Context) (slurm.Limits, error) { return c.limits, nil }

// confRunner answers scontrol show config with out and show assoc_mgr
// with assoc; "" fails as scontrol does without slurmctld.
type confRunner struct{ out, assoc string }

func (r confRunner) Run(_ context.Context, argv []string) ([]byte, error) {
	if slices.Contains(argv, "assoc_mgr") {
		r.out = r.assoc
	}
	if r.out == "" {
		return nil, &slurm.CommandError{Argv: []string{"scontrol"}, ExitCode: 1, Err: errors.New("exit status 1"),
			Stderr: "slurm_load_ctl_conf error: Unable to contact slurm controller"}
	}
	return []byte(r.out), nil
}

// readFile is the file at path, relative to this package.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPreflight(t *testing.T) {
	recorded := readFile(t, "../slurm/testdata/22.05/scontrol-show-config.txt")
	assocMgr := readFile(t, "../slurm/testdata/22.05/scontrol-show-assoc_mgr.txt")
	good := checkCluster{
		parts: []slurm.Partition{{Name: "gpu", State: "UP", Nodes: []string{"n1", "n2", "login"}}, {Name: "debug", State: "UP"}},
		nodes: []slurm.Node{{Name: "n1", GPUs: 8}, {Name: "n2", GPUs: 8}, {Name: "login"}},
		// The 22.05 recording's budget: user root's in account root.
		limits: slurm.Limits{QOS: map[string]slurm.QOS{"normal": {}}, Associations: []slurm.Association{
			{Cluster: "rubicklab", Account: "root", User: "root", BudgetListed: true, ListedBudget: slurm.GroupLimits{GPURunMins: 600}}}},
	}
	found := func(p string) (string, error) { return "/usr/bin/" + p, nil }
	// A slurm.conf without what contrib/slurm/slurm.conf.example adds.
	bare := strings.NewReplacer("JobSubmitPlugins        = lua", "JobSubmitPlugins        = (null)",
		"SelectTypeParameters    = CR_CORE_MEMORY", "SelectTypeParameters    = CR_CORE",
		",gres/gpu\n", "\n", "SchedulerParameters     = bf_interval=5,sched_interval=5", "SchedulerParameters     = (null)",
		"JobRequeue              = 1", "JobRequeue              = 0").Replace(string(recorded))
	type line struct{ Name, Status string }
	tests := map[string]struct {
		cluster  checkCluster
		connect  error
		conf     string
		assoc    string // what scontrol show assoc_mgr prints
		lookPath func(string) (string, error)
		lock     bool
		uid      int
		cfg      func(*Config)
		want     []line
		detail   map[string]string // name -> a part of its detail
	}{
		"the lab's settings": {
			cluster: good, conf: string(recorded), assoc: string(assocMgr), lookPath: found,
			want: []line{{"store", CheckOK}, {"slurmrestd.token_file", CheckOK}, {"slurmrestd", CheckOK}, {"partition gpu", CheckOK}, {"limits", CheckOK},
				{"commands.scancel", CheckOK}, {"samples.unmunge", CheckOK}, {"commands.scontrol", CheckOK},
				{"user", CheckOK}, {"JobSubmitPlugins", CheckOK}, {"GresTypes", CheckOK}, {"SelectType", CheckOK}, {"SelectTypeParameters", CheckOK},
				{"DefMemPerCPU", CheckOK}, {"AccountingStorageTRES", CheckOK}, {"JobRequeue", CheckOK}, {"SchedulerParameters", CheckOK},
				{"PriorityType", CheckOK}, {"budgets", CheckWarn}},
			detail: map[string]string{"partition gpu": "2 nodes with 16 GPUs", "commands.scontrol": "Slurm 22.05.8",
				"store": "no rubickd holds it", "budgets": "2 GrpTRESMins budgets, but PriorityType=priority/basic counts no usage: they never fill; rubickd reads the QOS and the associations of 1 account each minute"},
		},
		"a bare slurm.conf, no limits, no commands, a missing partition, the service running": {
			cluster: checkCluster{parts: good.parts, nodes: good.nodes}, conf: bare,
			lookPath: func(p string) (string, error) { return "", errors.New("not found") },
			lock:     true,
			uid:      1000,
			cfg:      func(c *Config) { c.Partitions = []string{"gpu", "a100"} },
			want: []line{{"store", CheckOK}, {"slurmrestd.token_file", CheckOK}, {"slurmrestd", CheckOK}, {"partition gpu", CheckOK}, {"partition a100", CheckFail},
				{"limits", CheckWarn}, {"commands.scancel", CheckFail}, {"samples.unmunge", CheckWarn}, {"commands.scontrol", CheckOK},
				{"user", CheckWarn}, {"JobSubmitPlugins", CheckFail}, {"GresTypes", CheckOK}, {"SelectType", CheckOK}, {"SelectTypeParameters", CheckWarn},
				{"AccountingStorageTRES", CheckWarn}, {"JobRequeue", CheckWarn}, {"SchedulerParameters", CheckWarn}, {"PriorityType", CheckOK}, {"budgets", CheckWarn}},
			detail: map[string]string{"budgets": "GrpTRESMins budgets not read", "partition a100": "it has gpu, debug", "store": "in use by the running rubickd", "user": "uid 1000 is neither root nor SlurmUser root(0)",
				"JobSubmitPlugins": "rubickd manages none"},
		},
		"slurmrestd down, scontrol failing, no samples endpoint": {
			connect: slurm.ErrUnavailable, lookPath: found,
			cfg:    func(c *Config) { c.Listen = "" },
			want:   []line{{"store", CheckOK}, {"slurmrestd.token_file", CheckOK}, {"slurmrestd", CheckFail}, {"commands.scancel", CheckOK}, {"commands.scontrol", CheckFail}},
			detail: map[string]string{"commands.scontrol": "Unable to contact slurm controller"},
		},
		// In priority order sshare is looked for: without it the
		// factors are scontrol's two decimals.
		"priority order without sshare": {
			connect: slurm.ErrUnavailable, lookPath: func(p string) (string, error) {
				if p == "sshare" {
					return "", errors.New("not found")
				}
				return "/usr/bin/" + p, nil
			},
			cfg:    func(c *Config) { c.Listen, c.Policy.BestEffortOrder = "", policy.OrderPriority },
			want:   []line{{"store", CheckOK}, {"slurmrestd.token_file", CheckOK}, {"slurmrestd", CheckFail}, {"commands.scancel", CheckOK}, {"commands.sshare", CheckWarn}, {"commands.scontrol", CheckFail}},
			detail: map[string]string{"commands.sshare": "sshare not found: the fair-share factors are scontrol's, to two decimals"},
		},
		"slurmctld down behind slurmrestd": {
			cluster: checkCluster{ping: errors.New("slurmctld DOWN")}, conf: string(recorded), lookPath: found,
			assoc: "Current Association Manager state\n\nAssociation Records\n\nQOS Records\n",
			want: []line{{"store", CheckOK}, {"slurmrestd.token_file", CheckOK}, {"slurmrestd", CheckFail}, {"commands.scancel", CheckOK}, {"samples.unmunge", CheckOK},
				{"commands.scontrol", CheckOK}, {"user", CheckOK}, {"JobSubmitPlugins", CheckOK}, {"GresTypes", CheckOK}, {"SelectType", CheckOK},
				{"SelectTypeParameters", CheckOK}, {"DefMemPerCPU", CheckOK}, {"AccountingStorageTRES", CheckOK}, {"JobRequeue", CheckOK},
				{"SchedulerParameters", CheckOK}, {"PriorityType", CheckOK}, {"budgets", CheckOK}},
			detail: map[string]string{"budgets": "no GrpTRESMins budget set"},
		},
	}
	// Limits rubick does not plan with: a warning naming the first five.
	unread := good
	unread.limits.QOS = map[string]slurm.QOS{"normal": {Unread: []string{"GrpTRESRunMins=fs/disk=100", "MaxTRESPerJob=fs/disk=1000"}}}
	for i := range 5 {
		unread.limits.Associations = append(unread.limits.Associations,
			slurm.Association{Cluster: "rubicklab", Account: fmt.Sprintf("a%d", i), Unread: []string{"GrpTRES=energy=5"}})
	}
	lab := tests["the lab's settings"]
	lab.cluster, lab.want = unread, slices.Clone(lab.want)
	lab.want[4] = line{"limits", CheckWarn}
	lab.detail = map[string]string{"limits": "1 QOS and 6 associations read; rubick does not plan with QOS normal GrpTRESRunMins=fs/disk=100, " +
		"QOS normal MaxTRESPerJob=fs/disk=1000, association a0 GrpTRES=energy=5, association a1 GrpTRES=energy=5, " +
		"association a2 GrpTRES=energy=5 and 2 more: Slurm holds back a job sized past one, and rubick then runs it on its request"}
	tests["limits rubick does not plan with"] = lab
	// A job held for rubick where rubickd does not plan (job_submit.lua
	// manages debug too): no one releases it.
	strandedLab := tests["the lab's settings"]
	strandedLab.cluster = good
	strandedLab.cluster.jobs = []slurm.Job{
		{ID: 7, Partition: "debug", State: slurm.StatePending, Held: true, Reason: "JobHeldUser", Tag: &slurm.Tag{ModelType: "bert"}},
		{ID: 8, Partition: "gpu", State: slurm.StatePending, Held: true, Reason: "JobHeldUser", Tag: &slurm.Tag{ModelType: "bert"}},
		{ID: 9, Partition: "debug", State: slurm.StatePending, Held: true, Reason: "JobHeldUser"},
	}
	strandedLab.want = slices.Insert(slices.Clone(strandedLab.want), 4, line{"held jobs", CheckWarn})
	strandedLab.detail = map[string]string{"held jobs": "1 job: 7 (partition debug); rubickd manages gpu: held for rubick in partitions rubickd does not manage"}
	tests["a job held for rubick outside its partitions"] = strandedLab
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := Defaults()
			cfg.Store = filepath.Join(t.TempDir(), "rubick.db")
			cfg.Slurmrestd.TokenFile = writeToken(t, `{"exp":2000000000,"sun":"root"}`)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			if tc.lock {
				l, err := LockInstance(LockPath(cfg.Store), NewInstance(time.Now()))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release()
			}
			got := Preflight(context.Background(), cfg, CheckDeps{
				Connect: func(context.Context) (CheckCluster, error) {
					if tc.connect != nil {
						return nil, tc.connect
					}
					return tc.cluster, nil
				},
				Runner: confRunner{tc.conf, tc.assoc}, LookPath: tc.lookPath, UID: tc.uid,
				Now: func() time.Time { return time.Unix(1795582029, 0) },
			})
			var lines []line
			for _, r := range got {
				lines = append(lines, line{r.Name, r.Status})
				if want, ok := tc.detail[r.Name]; ok && !strings.Contains(r.Detail, want) {
					t.Errorf("%s: %q, want it to say %q", r.Name, r.Detail, want)
				}
			}
			if d := cmp.Diff(tc.want, lines); d != "" {
				t.Errorf("(-want +got):\n%s\n%+v", d, got)
			}
		})
	}
}

func TestPreflightPartitionStates(t *testing.T) {
	nodes := []slurm.Node{{Name: "n1", GPUs: 8}, {Name: "cpu1"}}
	for _, tc := range []struct {
		part       slurm.Partition
		status, in string
	}{
		{slurm.Partition{Name: "gpu", State: "DOWN", Nodes: []string{"n1"}}, CheckWarn, "state DOWN"},
		{slurm.Partition{Name: "gpu", State: "UP", Nodes: []string{"cpu1"}}, CheckFail, "none of its 1 nodes has a gres/gpu"},
	} {
		got := checkPartitions(context.Background(), checkCluster{parts: []slurm.Partition{tc.part}, nodes: nodes}, []string{"gpu"}, "")
		if len(got) != 1 || got[0].Status != tc.status || !strings.Contains(got[0].Detail, tc.in) {
			t.Errorf("%+v: %+v, want %s saying %q", tc.part, got, tc.status, tc.in)
		}
	}
}

// GPUs of several types in the managed partitions are a warning: the model
// sizes every plan for one GPU. A node in two managed partitions counts
// once; one type alone, or GPU types outside them, say nothing.
func TestPreflightGPUTypes(t *testing.T) {
	nodes := []slurm.Node{{Name: "a1", GPUs: 8, GPUTypes: []string{"a100"}}, {Name: "a2", GPUs: 8, GPUTypes: []string{"a100"}},
		{Name: "h1", GPUs: 4, GPUTypes: []string{"h100"}}, {Name: "u1", GPUs: 2}}
	parts := []slurm.Partition{{Name: "gpu", State: "UP", Nodes: []string{"a1", "a2", "h1"}}, {Name: "big", State: "UP", Nodes: []string{"a1", "h1"}},
		{Name: "old", State: "UP", Nodes: []string{"u1"}}}
	for _, tc := range []struct {
		managed []string
		facts   string
		want    string // the GPU types line; "" for none
	}{
		{[]string{"gpu", "big"}, "", "a100: 16 GPUs on 2 nodes, h100: 4 GPUs on 1 node: rubick prices every GPU alike and checks plans against one GPU memory (the built-in A800 80 GB values)"},
		{[]string{"gpu", "old"}, "/etc/rubick/a100.json", "untyped: 2 GPUs on 1 node, a100: 16 GPUs on 2 nodes, h100: 4 GPUs on 1 node: rubick prices every GPU alike and checks plans against one GPU memory (gpu_facts /etc/rubick/a100.json)"},
		{[]string{"old"}, "", ""},
	} {
		got := checkPartitions(context.Background(), checkCluster{parts: parts, nodes: nodes}, tc.managed, tc.facts)
		var line string
		for _, r := range got {
			if r.Name == "GPU types" {
				if r.Status != CheckWarn {
					t.Errorf("%v: GPU types %s, want %s", tc.managed, r.Status, CheckWarn)
				}
				line = r.Detail
			}
		}
		if tc.want == "" && line != "" || !strings.HasPrefix(line, tc.want) {
			t.Errorf("%v: GPU types line %q, want it to start %q", tc.managed, line, tc.want)
		}
	}
}

func TestCheckUser(t *testing.T) {
	for _, tc := range []struct {
		uid    int
		status string
	}{{0, CheckOK}, {64030, CheckOK}, {1000, CheckWarn}, {6403, CheckWarn}} {
		if got := checkUser(tc.uid, "slurm(64030)"); got.Status != tc.status {
			t.Errorf("uid %d: %+v, want %s", tc.uid, got, tc.status)
		}
	}
}

// writeToken writes a token file holding a JWT with payload.
func writeToken(t *testing.T, payload string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwt")
	tok := "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
	if err := os.WriteFile(path, []byte("SLURM_JWT="+tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckToken(t *testing.T) {
	now := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, path, status, in string
	}{
		{"a month", writeToken(t, `{"exp":1798174800,"sun":"root"}`), CheckOK, "user root, expires 2026-12-25T05:00:00Z (in 720h0m0s)"},
		{"six days", writeToken(t, `{"exp":1796101200,"sun":"root"}`), CheckOK, "(in 144h0m0s)"},
		{"two days", writeToken(t, `{"exp":1795755600,"sun":"root"}`), CheckWarn, "(in 48h0m0s): write a new one before then"},
		{"expired", writeToken(t, `{"exp":1794978000,"sun":"slurm"}`), CheckFail, "expired 2026-11-18T"},
		{"no expiry", writeToken(t, `{"sun":"root"}`), CheckOK, "no expiry"},
		{"not a JWT", writeToken(t, `nope`), CheckWarn, "its expiry cannot be read"},
		{"no file", filepath.Join(t.TempDir(), "missing"), CheckFail, "token file"},
	} {
		got := checkToken(tc.path, now)
		if got.Status != tc.status || !strings.Contains(got.Detail, tc.in) {
			t.Errorf("%s: %+v, want %s saying %q", tc.name, got, tc.status, tc.in)
		}
	}
}

func TestCheckGPUFacts(t *testing.T) {
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "gpu-facts.json")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, status, in string
	}{
		{"measured", write(`{"gpus":4,"mem_gb":40,"name":"NVIDIA A100-SXM4-40GB","nvlink_peers":3,"nvlink_gbps":300,"source":"nvml"}`),
			CheckOK, "NVIDIA A100-SXM4-40GB, 4 GPUs of 40 GB per node, 225 GB/s within a node"},
		{"MIG", write(`{"gpus":5,"mem_gb":9.5,"name":"NVIDIA A100-SXM4-80GB MIG 1g.10gb","pcie_gen":4,"pcie_width":16,"pcie_gbps":31.5,"source":"nvml","mig":true}`),
			CheckOK, "NVIDIA A100-SXM4-80GB MIG 1g.10gb, 5 GPUs of 9.5 GB per node (MIG devices counted as GPUs), 12 GB/s within a node"},
		{"configured", write(`{"gpus":4,"mem_gb":40,"source":"config"}`), CheckWarn, `source "config", not "nvml": not applied`},
		{"no source", write(`{"gpus":4,"mem_gb":40}`), CheckWarn, `source "", not "nvml"`},
		{"not JSON", write(`gpus: 4`), CheckFail, "rubickd does not start"},
		{"no file", filepath.Join(t.TempDir(), "missing.json"), CheckFail, "no such file"},
	} {
		got := checkGPUFacts(tc.path)
		if got.Name != "gpu_facts" || got.Status != tc.status || !strings.Contains(got.Detail, tc.in) {
			t.Errorf("%s: %+v, want %s saying %q", tc.name, got, tc.status, tc.in)
		}
	}
}

func TestLogChecks(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	n := LogChecks(log, []CheckResult{{"store", CheckOK, "fine"}, {"JobSubmitPlugins", CheckFail, "no lua"},
		{"AccountingStorageTRES", CheckWarn, "no gres/gpu"}, {checkHeldJobs, CheckWarn, "1 job: 7"}})
	out := buf.String()
	// The held jobs are the first cycle's to warn of: said once, not twice.
	if n != 1 || strings.Contains(out, "fine") || strings.Contains(out, "1 job: 7") || !strings.Contains(out, `level=ERROR msg="setup check failed (rubickd --check)" check=JobSubmitPlugins detail="no lua"`) ||
		!strings.Contains(out, `level=WARN msg="setup check warns (rubickd --check)" check=AccountingStorageTRES`) {
		t.Errorf("%d failed, log:\n%s", n, out)
	}
}

func TestCheckBudgets(t *testing.T) {
	one := slurm.Budgets{QOS: map[string]slurm.Budget{"normal": {Limit: slurm.GroupLimits{GPURunMins: 10}}}}
	multifactor := slurm.CtldConfig{"PriorityType": "priority/multifactor", "AccountingStorageEnforce": "associations,limits,qos"}
	safe := slurm.CtldConfig{"PriorityType": "priority/multifactor", "AccountingStorageEnforce": "associations,limits,qos,safe"}
	physics := slurm.Budgets{Assoc: map[slurm.AssocKey]slurm.Budget{
		{Cluster: "lab", Account: "physics"}:              {Limit: slurm.GroupLimits{GPURunMins: 10}},
		{Cluster: "lab", Account: "physics", User: "ann"}: {Limit: slurm.GroupLimits{CPURunMins: 10}},
	}}
	scoped := &slurm.BudgetScope{Accounts: []string{"physics"}}
	tests := map[string]struct {
		b      slurm.Budgets
		err    error
		conf   slurm.CtldConfig
		scope  *slurm.BudgetScope
		status string
		detail string
	}{
		"none":         {conf: multifactor, status: CheckOK, detail: "no GrpTRESMins budget set"},
		"not read":     {err: errors.New("exit status 1"), status: CheckWarn, detail: "not read (exit status 1)"},
		"basic":        {b: one, conf: slurm.CtldConfig{"PriorityType": "priority/basic"}, status: CheckWarn, detail: "never fill"},
		"without safe": {b: one, conf: multifactor, status: CheckWarn, detail: "1 GrpTRESMins budgets without safe"},
		"safe":         {b: one, conf: safe, status: CheckOK, detail: "1 GrpTRESMins budgets, enforced with safe"},
		"scoped":       {b: physics, conf: safe, scope: scoped, status: CheckOK, detail: "2 GrpTRESMins budgets, enforced with safe; rubickd reads the QOS and the associations of 1 account each minute"},
		"all":          {b: physics, conf: safe, scope: &slurm.BudgetScope{All: true}, status: CheckOK, detail: "reads every association's each minute"},
		// slurmctld holds a budget slurmdbd's listing did not show.
		"unlisted": {b: physics, conf: safe, scope: &slurm.BudgetScope{Accounts: []string{"chem"}}, status: CheckWarn,
			detail: "budgets of accounts physics that slurmdbd's association listing does not show"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := checkBudgets(tc.b, tc.err, tc.conf, tc.scope)
			if r.Name != "budgets" || r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) {
				t.Errorf("%+v, want status %s saying %q", r, tc.status, tc.detail)
			}
		})
	}
}

// In fair-share order the check says how many user associations list a
// factor and their range, and warns of one it cannot read or of none.
func TestCheckFairShare(t *testing.T) {
	raw := readFile(t, "../slurm/testdata/24.11/scontrol-show-assoc_mgr.txt")
	lab, err := slurm.ParseAssocMgr(raw)
	if err != nil {
		t.Fatal(err)
	}
	unread := lab
	unread.FairShareUnread = `SharesRaw/Norm/Level/Factor= of account a user "u": factor "nan": want a number in 0..1`
	tests := map[string]struct {
		b      slurm.Budgets
		status string
		detail string
	}{
		"24.11 lab": {lab, CheckOK, "1 user associations, factors 1.00 to 1.00"},
		"unread":    {unread, CheckWarn, `factor "nan": want a number in 0..1: that association's jobs go as factor 0`},
		"none":      {slurm.Budgets{FairShare: slurm.FairShares{{Account: "root"}: 0}}, CheckWarn, "no user association lists a factor"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := checkFairShare(tc.b)
			if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) {
				t.Errorf("%+v, want status %s saying %q", r, tc.status, tc.detail)
			}
		})
	}
}

// Where Slurm's priority weighs fair-share, QOS, partition or association,
// the check warns that it does not order the jobs rubick holds; the 24.11
// lab's multifactor with every weight 0, and 22.05's basic, pass.
func TestCheckPriority(t *testing.T) {
	raw := readFile(t, "../slurm/testdata/24.11/scontrol-show-config.txt")
	lab2411 := slurm.ParseCtldConfig(raw)
	fairShare := maps.Clone(lab2411)
	fairShare["PriorityWeightFairShare"], fairShare["PriorityWeightQOS"] = "10000", "500"
	fairOnly := maps.Clone(lab2411)
	fairOnly["PriorityWeightFairShare"] = "10000"
	withAssoc := maps.Clone(fairShare)
	withAssoc["PriorityWeightAssoc"], withAssoc["PriorityWeightTRES"] = "100", "GRES/gpu=1000"
	withSite := maps.Clone(withAssoc)
	withSite["PrioritySiteFactorPlugin"] = "site_factor/example"
	badWeight := maps.Clone(lab2411)
	badWeight["PriorityWeightQOS"] = "many"
	tests := map[string]struct {
		conf   slurm.CtldConfig
		order  string
		status string
		detail string
	}{
		"basic":                               {slurm.CtldConfig{"PriorityType": "priority/basic"}, policy.OrderSlope, CheckOK, "priority/basic"},
		"multifactor, no weights":             {lab2411, policy.OrderSlope, CheckOK, "priority/multifactor"},
		"fair-share and QOS":                  {fairShare, policy.OrderSlope, CheckWarn, "PriorityWeightFairShare=10000, PriorityWeightQOS=500: Slurm's priority does not order the jobs rubick holds (priority 0); rubick starts best-effort jobs by slope"},
		"fairshare order, basic":              {slurm.CtldConfig{"PriorityType": "priority/basic"}, policy.OrderFairShare, CheckFail, "priority/basic computes no fair-share factor: policy.best_effort_order fairshare needs PriorityType=priority/multifactor"},
		"fairshare order, unset":              {slurm.CtldConfig{}, policy.OrderFairShare, CheckFail, "priority/basic computes no fair-share factor"},
		"fairshare order, QOS":                {fairShare, policy.OrderFairShare, CheckWarn, "PriorityWeightQOS=500: Slurm's priority does not order the jobs rubick holds (priority 0); rubick starts best-effort jobs by fair-share factor"},
		"fairshare order kept":                {fairOnly, policy.OrderFairShare, CheckOK, "priority/multifactor: best-effort jobs go by their associations' fair-share factors"},
		"priority order, basic":               {slurm.CtldConfig{"PriorityType": "priority/basic"}, policy.OrderPriority, CheckFail, "priority/basic computes no multifactor priority: policy.best_effort_order priority needs PriorityType=priority/multifactor"},
		"priority order":                      {fairShare, policy.OrderPriority, CheckOK, "best-effort jobs go by partition PriorityTier, then age=0 assoc=0 fairshare=10000 jobsize=0 partition=0 qos=500 (PriorityMaxAge 7-00:00:00)"},
		"priority order, no weights":          {lab2411, policy.OrderPriority, CheckWarn, "every weight is 0: they go by tier alone"},
		"priority order, assoc and TRES kept": {withAssoc, policy.OrderPriority, CheckOK, "age=0 assoc=100 fairshare=10000 jobsize=0 partition=0 qos=500 (PriorityMaxAge 7-00:00:00) tres=GRES/gpu=1000"},
		"priority order, site factor":         {withSite, policy.OrderPriority, CheckWarn, "rubick leaves out PrioritySiteFactorPlugin=site_factor/example, so its order may differ from Slurm's there"},
		"priority order, bad weight":          {badWeight, policy.OrderPriority, CheckFail, `PriorityWeightQOS="many"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := checkPriority(tc.conf, tc.order, policy.OrderShortest)
			if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) {
				t.Errorf("%+v, want status %s saying %q", r, tc.status, tc.detail)
			}
		})
	}
}

// policy.guaranteed_order: priority is checked as best_effort_order's.
func TestCheckPriorityGuaranteed(t *testing.T) {
	weights := slurm.CtldConfig{"PriorityType": "priority/multifactor", "PriorityWeightQOS": "500"}
	tests := map[string]struct {
		conf          slurm.CtldConfig
		order, status string
		detail        string
	}{
		"basic":         {slurm.CtldConfig{"PriorityType": "priority/basic"}, policy.OrderSlope, CheckFail, "policy.guaranteed_order priority needs PriorityType=priority/multifactor"},
		"guaranteed":    {weights, policy.OrderSlope, CheckOK, "priority/multifactor: guaranteed jobs go by partition PriorityTier, then age=0 assoc=0 fairshare=0 jobsize=0 partition=0 qos=500"},
		"both":          {weights, policy.OrderPriority, CheckOK, "priority/multifactor: best-effort and guaranteed jobs go by partition PriorityTier"},
		"both on basic": {slurm.CtldConfig{}, policy.OrderPriority, CheckFail, "policy.best_effort_order priority needs PriorityType=priority/multifactor"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := checkPriority(tc.conf, tc.order, policy.OrderPriority)
			if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) {
				t.Errorf("%+v, want status %s saying %q", r, tc.status, tc.detail)
			}
		})
	}
}

// job_submit.lua is compared with rubickd.yaml where this host has it: the
// shipped script as it is, an older copy, and MANAGED_PARTITIONS that
// differ from partitions either way.
func TestCheckJobSubmit(t *testing.T) {
	shipped := readFile(t, "../contrib/slurm/job_submit.lua")
	edit := func(old, new string) []byte {
		if !strings.Contains(string(shipped), old) {
			t.Fatalf("the shipped script has no %q", old)
		}
		return []byte(strings.Replace(string(shipped), old, new, 1))
	}
	const managed = "local MANAGED_PARTITIONS = { gpu = true }"
	const nice = "local NICE_KEEPS_HOLD = false"
	for _, tc := range []struct {
		name       string
		body       []byte
		err        error
		partitions []string
		uid        int // rubickd's; 0 is root
		status     string
		detail     []string
		priority   string // PriorityType: priority/basic when "", none for not read
	}{
		{"shipped", shipped, nil, []string{"gpu"}, 0, CheckOK, []string{"version 6, MANAGED_PARTITIONS gpu as partitions, NICE_KEEPS_HOLD false for priority/basic"}, ""},
		// rubickd as SlurmUser, which the script does not let release.
		{"SlurmUser not a scheduler", shipped, nil, []string{"gpu"}, 64030, CheckFail, []string{"SCHEDULER_UIDS (0) lacks uid 64030", "no job starts"}, ""},
		{"SlurmUser a scheduler", edit("local SCHEDULER_UIDS = { [0] = true }", "local SCHEDULER_UIDS = { [0] = true, [64030] = true }"), nil,
			[]string{"gpu"}, 64030, CheckOK, []string{"version 6"}, ""},
		{"quoted keys", edit(managed, "local MANAGED_PARTITIONS = {\n  [\"gpu-a100\"] = true,\n  gpu = true,\n}"), nil, []string{"gpu", "gpu-a100"}, 0,
			CheckOK, []string{"MANAGED_PARTITIONS gpu-a100, gpu as partitions"}, ""},
		{"first copy", edit("local VERSION = 6\n", ""), nil, []string{"gpu"}, 0, CheckWarn,
			[]string{"an older copy (version 1, rubickd expects 6)", "release of a job rubick holds starts it as submitted, and a job with a model type moved"}, ""},
		{"second copy", edit("local VERSION = 6\n", "local VERSION = 2\n"), nil, []string{"gpu"}, 0, CheckWarn,
			[]string{"(version 2, rubickd expects 6)", "; until then a job with a model type moved into a managed partition runs as submitted"}, ""},
		{"third copy", edit("local VERSION = 6\n", "local VERSION = 3\n"), nil, []string{"gpu"}, 0, CheckWarn,
			[]string{"(version 3, rubickd expects 6)", "; until then a job given a new QOS or account (scontrol update QOS= or Account=) keeps the class it was submitted with"}, ""},
		{"fourth copy", edit("local VERSION = 6\n", "local VERSION = 4\n"), nil, []string{"gpu"}, 0, CheckWarn,
			[]string{"(version 4, rubickd expects 6)", "; until then a model type list slurmctld's user cannot read lets any model type through"}, ""},
		{"fifth copy", edit("local VERSION = 6\n", "local VERSION = 5\n"), nil, []string{"gpu"}, 0, CheckWarn,
			[]string{"(version 5, rubickd expects 6)", "; until then a change of a whole job array (scontrol update JobId=ARRAY ...) gives each task"}, ""},
		{"a newer copy", edit("local VERSION = 6\n", "local VERSION = 7\n"), nil, []string{"gpu"}, 0, CheckWarn,
			[]string{"a newer copy (version 7, this rubickd knows up to 6)"}, ""},
		// What is commented out is not set.
		{"uid commented out", edit("local SCHEDULER_UIDS = { [0] = true }", "local SCHEDULER_UIDS = { [0] = true, -- [64030] = true\n}"), nil,
			[]string{"gpu"}, 64030, CheckFail, []string{"lacks uid 64030"}, ""},
		{"partition in a block comment", edit(managed, "local MANAGED_PARTITIONS = { gpu = true, --[[ debug = true ]] }"), nil, []string{"gpu"}, 0,
			CheckOK, []string{"MANAGED_PARTITIONS gpu as partitions"}, ""},
		{"a partition only the script manages", edit(managed, "local MANAGED_PARTITIONS = { gpu = true, debug = true }"), nil, []string{"gpu"}, 0,
			CheckWarn, []string{"MANAGED_PARTITIONS has debug, which partitions in rubickd.yaml lacks"}, ""},
		{"a partition only rubickd manages", shipped, nil, []string{"gpu", "a100"}, 0,
			CheckWarn, []string{"partitions has a100, which MANAGED_PARTITIONS lacks"}, ""},
		{"both ways", edit(managed, "local MANAGED_PARTITIONS = { cpu = true }"), nil, []string{"gpu"}, 0,
			CheckWarn, []string{"MANAGED_PARTITIONS has cpu", "partitions has gpu"}, ""},
		{"no table", edit(managed, "local MANAGED = {}"), nil, []string{"gpu"}, 0, CheckWarn, []string{"no MANAGED_PARTITIONS table found"}, ""},
		{"elsewhere", nil, os.ErrNotExist, []string{"gpu"}, 0, CheckOK, []string{"not read on this host", "not compared"}, ""},
		// priority/basic ends a held job's hold at a new nice, which the
		// script must refuse; priority/multifactor keeps it.
		{"nice kept on basic", edit(nice, "local NICE_KEEPS_HOLD = true"), nil, []string{"gpu"}, 0, CheckWarn,
			[]string{"NICE_KEEPS_HOLD is true, but priority/basic ends a held job's hold", "set it false"}, ""},
		{"nice refused on multifactor", shipped, nil, []string{"gpu"}, 0, CheckWarn,
			[]string{"NICE_KEEPS_HOLD is false", "set it true"}, "priority/multifactor"},
		{"nice kept on multifactor", edit(nice, "local NICE_KEEPS_HOLD = true"), nil, []string{"gpu"}, 0, CheckOK,
			[]string{"version 6", "NICE_KEEPS_HOLD true for priority/multifactor"}, "priority/multifactor"},
		{"PriorityType unknown", edit(nice, "local NICE_KEEPS_HOLD = true"), nil, []string{"gpu"}, 0, CheckOK,
			[]string{"version 6"}, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pt := tc.priority
			switch pt {
			case "":
				pt = "priority/basic"
			case "none":
				pt = "" // scontrol show config without it
			}
			r := checkJobSubmit("/etc/slurm/job_submit.lua", tc.body, tc.err, tc.partitions, tc.uid, pt)
			if r.Status != tc.status {
				t.Errorf("status %s, want %s: %s", r.Status, tc.status, r.Detail)
			}
			for _, want := range tc.detail {
				if !strings.Contains(r.Detail, want) {
					t.Errorf("detail %q, want it to say %q", r.Detail, want)
				}
			}
		})
	}
}

// Preflight reads job_submit.lua next to the slurm.conf scontrol names.
func TestPreflightReadsJobSubmit(t *testing.T) {
	recorded := readFile(t, "../slurm/testdata/22.05/scontrol-show-config.txt")
	shipped := readFile(t, "../contrib/slurm/job_submit.lua")
	cfg := Defaults()
	cfg.Store = filepath.Join(t.TempDir(), "rubick.db")
	cfg.Slurmrestd.TokenFile = writeToken(t, `{"exp":2000000000,"sun":"root"}`)
	var read []string
	got := Preflight(context.Background(), cfg, CheckDeps{
		Connect: func(context.Context) (CheckCluster, error) {
			return checkCluster{parts: []slurm.Partition{{Name: "gpu", State: "UP", Nodes: []string{"n1"}}}, nodes: []slurm.Node{{Name: "n1", GPUs: 8}}}, nil
		},
		Runner:   confRunner{string(recorded), ""},
		LookPath: func(p string) (string, error) { return "/usr/bin/" + p, nil },
		Now:      func() time.Time { return time.Unix(1795582029, 0) },
		ReadFile: func(p string) ([]byte, error) { read = append(read, p); return shipped, nil },
	})
	if diff := cmp.Diff([]string{"/tmp/rubick-lab/etc/job_submit.lua"}, read); diff != "" {
		t.Errorf("files read (-want +got):\n%s", diff)
	}
	i := slices.IndexFunc(got, func(r CheckResult) bool { return r.Name == "job_submit.lua" })
	if i < 0 || got[i].Status != CheckOK {
		t.Errorf("no job_submit.lua line that is ok: %+v", got)
	}
}

// TestCheckStoreWritable: a store rubickd could not write fails the check,
// naming what it cannot write, before a start fails on it.
func TestCheckStoreWritable(t *testing.T) {
	dir := t.TempDir()
	fresh, existing := filepath.Join(dir, "new.db"), filepath.Join(dir, "rubick.db")
	if err := os.WriteFile(existing, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	denied := func(deny string) func(string) error {
		return func(p string) error {
			if p == deny {
				return syscall.EACCES
			}
			return nil
		}
	}
	for _, tc := range []struct {
		name, path, deny string
		status, detail   string
	}{
		{"writable", existing, "", CheckOK, "no rubickd holds it"},
		{"read-only directory", fresh, dir, CheckFail, "rubickd cannot write " + dir + ": permission denied"},
		{"read-only file", existing, existing, CheckFail, "rubickd cannot write " + existing},
		{"no file yet, a writable directory", fresh, fresh, CheckOK, "no rubickd holds it"},
		{"no directory yet", filepath.Join(dir, "sub", "rubick.db"), "", CheckOK, "is made at the first start"},
	} {
		r := checkStore(tc.path, denied(tc.deny))
		if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) {
			t.Errorf("%s: %s %q, want %s saying %q", tc.name, r.Status, r.Detail, tc.status, tc.detail)
		}
	}
}

// Slurm takes JobSubmitPlugins=job_submit/lua as lua.
func TestLuaJobSubmit(t *testing.T) {
	for v, want := range map[string]bool{"lua": true, "job_submit/lua": true, "all_partitions,Lua": true, "pbs": false, "": false, "lua2": false} {
		if got := luaJobSubmit(slurm.CtldConfig{"JobSubmitPlugins": v}); got != want {
			t.Errorf("JobSubmitPlugins=%q: %v, want %v", v, got, want)
		}
	}
}
