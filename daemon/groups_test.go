package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// A cycle reports what the running jobs hold against each group limit,
// every job in Slurm counted, beside what the limit allows.
func TestCycleReportsGroupUse(t *testing.T) {
	nodes := labNodes(2)
	other := slurm.Job{ID: 9, Name: "other", Account: "root", Partition: "gpu", QOS: "shared", Cluster: "lab", User: "alice",
		State: slurm.StateRunning, NodeCount: 1, NodeList: []string{"node2"}, GPUsPerNode: 2, GPUs: 2, CPUs: 8, MemMB: 32000, Billing: 8,
		TimeLimit: time.Hour, StartTime: t0.Add(-30 * time.Minute)}
	nodes[1].GPUsUsed, nodes[1].CPUsAlloc = 2, 8
	limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared",
		Grp:     slurm.GroupLimits{GPUs: 4, Billing: 40, GPURunMins: 600, MemRunMins: 2000000, NodeRunMins: 100, Nodes: 2},
		PerUser: slurm.GroupLimits{CPUs: 16, Jobs: 3}}}}
	c := &limitsCluster{fakeCluster: &fakeCluster{nodes: nodes, jobs: []slurm.Job{other}}, limits: limits}
	d, _ := newTestDaemonWith(t, c, &fakeApplier{}, func(*Config) {})
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	// 30 minutes left of its hour: 60 GPU-, 240 CPU-, 240 billing-,
	// 960,000 MB- and 30 node-minutes.
	held := TRESAmounts{GPUs: 2, CPUs: 8, MemMB: 32000, Billing: 8, GPURunMins: 60, CPURunMins: 240, BillingRunMins: 240, MemRunMins: 960000,
		NodeRunMins: 30, Jobs: 1}
	want := []GroupUse{
		{Limit: "QOS shared GrpTRES", RunMins: "QOS shared GrpTRESRunMins", InUse: onNodes(held, 1),
			Allowed: TRESAmounts{GPUs: 4, Billing: 40, GPURunMins: 600, MemRunMins: 2000000, NodeRunMins: 100, Nodes: 2}},
		{Limit: "QOS shared MaxTRESPerUser (user alice)", RunMins: "QOS shared MaxTRESRunMinsPU (user alice)",
			Jobs: "QOS shared MaxJobsPerUser (user alice)", InUse: held, Allowed: TRESAmounts{CPUs: 16, Jobs: 3}},
	}
	if d := cmp.Diff(want, rep.Groups); d != "" {
		t.Errorf("groups (-want +got):\n%s", d)
	}
	wantGauges := map[string]float64{
		"rubick_group_allowed QOS shared GrpTRES GPUs":                             4,
		"rubick_group_in_use QOS shared GrpTRES GPUs":                              2,
		"rubick_group_allowed QOS shared GrpTRES billing":                          40,
		"rubick_group_in_use QOS shared GrpTRES billing":                           8,
		"rubick_group_allowed QOS shared GrpTRES nodes":                            2,
		"rubick_group_in_use QOS shared GrpTRES nodes":                             1,
		"rubick_group_allowed QOS shared GrpTRESRunMins GPU-minutes":               600,
		"rubick_group_in_use QOS shared GrpTRESRunMins GPU-minutes":                60,
		"rubick_group_allowed QOS shared GrpTRESRunMins MB-minutes of memory":      2000000,
		"rubick_group_in_use QOS shared GrpTRESRunMins MB-minutes of memory":       960000,
		"rubick_group_allowed QOS shared GrpTRESRunMins node-minutes":              100,
		"rubick_group_in_use QOS shared GrpTRESRunMins node-minutes":               30,
		"rubick_group_allowed QOS shared MaxTRESPerUser (user alice) CPUs":         16,
		"rubick_group_in_use QOS shared MaxTRESPerUser (user alice) CPUs":          8,
		"rubick_group_allowed QOS shared MaxJobsPerUser (user alice) running jobs": 3,
		"rubick_group_in_use QOS shared MaxJobsPerUser (user alice) running jobs":  1,
	}
	if d := cmp.Diff(wantGauges, groupGauges(t, d.deps.Metrics)); d != "" {
		t.Errorf("group gauges (-want +got):\n%s", d)
	}
}

// groupGauges reads rubick_group_allowed and rubick_group_in_use as
// "name limit what" -> value.
func groupGauges(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	return gauges(t, m, func(name string, labels map[string]string) string {
		if name != "rubick_group_allowed" && name != "rubick_group_in_use" {
			return ""
		}
		return name + " " + labels["limit"] + " " + labels["what"]
	})
}

// gauges reads the gauges key names (by metric name and labels; "" skips
// one) -> value.
func gauges(t *testing.T, m *Metrics, key func(name string, labels map[string]string) string) map[string]float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if k := key(f.GetName(), labels); k != "" && mt.GetGauge() != nil {
				out[k] = mt.GetGauge().GetValue()
			}
		}
	}
	return out
}

// A budget (GrpTRESMins) counts what its jobs used beside what its running
// jobs may still use, and is reported while none of its jobs runs.
func TestCycleReportsBudgetUse(t *testing.T) {
	j := heldJob(21, "bert", 1, 2)
	j.Cluster, j.QOS, j.TimeLimit = "lab", "shared", time.Hour
	budget := slurm.Budget{Limit: slurm.GroupLimits{GPURunMins: 1000, CPURunMins: 9000}, Spent: slurm.GroupLimits{GPURunMins: 950, CPURunMins: 30}}
	limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared", Budget: budget}}}
	c := &limitsCluster{fakeCluster: &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{j}}, limits: limits}
	a := &fakeApplier{}
	d, _ := newTestDaemonWith(t, c, a, func(*Config) {})
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	spent := TRESAmounts(budget.Spent)
	want := []GroupUse{{Limit: "QOS shared GrpTRESMins", RunMins: "QOS shared GrpTRESMins", InUse: spent,
		Allowed: TRESAmounts(budget.Limit), Spent: &spent}}
	if d := cmp.Diff(want, rep.Groups); d != "" {
		t.Errorf("groups (-want +got):\n%s", d)
	}
	wantGauges := map[string]float64{
		"rubick_group_allowed QOS shared GrpTRESMins GPU-minutes": 1000, "rubick_group_in_use QOS shared GrpTRESMins GPU-minutes": 950,
		"rubick_group_allowed QOS shared GrpTRESMins CPU-minutes": 9000, "rubick_group_in_use QOS shared GrpTRESMins CPU-minutes": 30,
	}
	if d := cmp.Diff(wantGauges, groupGauges(t, d.deps.Metrics)); d != "" {
		t.Errorf("group gauges (-want +got):\n%s", d)
	}
	// 50 GPU-minutes left: not one GPU for the job's hour.
	if len(a.got) != 0 || !strings.Contains(rep.Ignored[21], "waits for room in QOS shared GrpTRESMins") {
		t.Errorf("applied %v, ignored %q; want the job held, waiting for the budget", a.got, rep.Ignored[21])
	}
}

type fakeBudgets struct {
	b      slurm.Budgets
	err    error
	scopes []slurm.BudgetScope
}

func (f *fakeBudgets) Budgets(_ context.Context, scope slurm.BudgetScope) (slurm.Budgets, error) {
	f.scopes = append(f.scopes, scope)
	return f.b, f.err
}

// rubickd reads the budgets with the limits, asking for the associations
// of the accounts slurmdbd lists with one, and puts them on the QOS and
// associations slurmdbd lists; when a reading fails, the last one read
// stays in force.
func TestCycleReadsBudgets(t *testing.T) {
	j := heldJob(21, "bert", 1, 2)
	j.Cluster, j.QOS, j.TimeLimit = "lab", "shared", time.Hour
	limits := slurm.Limits{QOS: map[string]slurm.QOS{"shared": {Name: "shared"}}, Associations: []slurm.Association{
		{Cluster: "lab", Account: "physics", BudgetListed: true, ListedBudget: slurm.GroupLimits{GPURunMins: 10}},
		{Cluster: "lab", Account: "chem", BudgetListed: true}}}
	c := &limitsCluster{fakeCluster: &fakeCluster{nodes: labNodes(2), jobs: []slurm.Job{j}}, limits: limits}
	a := &fakeApplier{}
	d, _ := newTestDaemonWith(t, c, a, func(*Config) {})
	spent := &fakeBudgets{b: slurm.Budgets{QOS: map[string]slurm.Budget{"shared": {
		Limit: slurm.GroupLimits{GPURunMins: 100}, Spent: slurm.GroupLimits{GPURunMins: 90}}}}}
	d.deps.Budgets = spent
	for i, step := range []struct {
		err  error
		none bool // the budget was lifted
		held bool
	}{
		{held: true},
		{err: errors.New("scontrol: exit status 1"), held: true},
		{none: true},
	} {
		spent.err = step.err
		if step.none {
			spent.b = slurm.Budgets{}
		}
		d.limitsAt = time.Time{} // read the limits again
		rep, err := d.Cycle(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		if held := len(a.got) == 0; held != step.held {
			t.Fatalf("cycle %d: actions %v, ignored %q; want held %v", i, a.got, rep.Ignored[21], step.held)
		}
		if step.held && !strings.Contains(rep.Ignored[21], "waits for room in QOS shared GrpTRESMins: GPU-minutes used or to run in use 90, allowed 100") {
			t.Errorf("cycle %d: ignored %q, want it waiting for the budget", i, rep.Ignored[21])
		}
	}
	want := slurm.BudgetScope{Accounts: []string{"physics"}}
	if diff := cmp.Diff([]slurm.BudgetScope{want, want, want}, spent.scopes); diff != "" {
		t.Errorf("scopes read (-want +got):\n%s", diff)
	}
}

// With policy.best_effort_order: fairshare, rubickd reads the fair-share
// factors of its jobs' accounts with the budgets and starts, of two jobs
// that cannot both start, the one whose association is further below its
// share (a higher factor), whichever that is.
func TestCycleFairShareOrder(t *testing.T) {
	for _, first := range []string{"physics", "chem"} {
		t.Run(first, func(t *testing.T) {
			j1, j2 := heldJob(31, "llama7", 1, 8), heldJob(32, "llama7", 1, 8)
			j1.Cluster, j1.Account, j1.User = "lab", "physics", "ann"
			j2.Cluster, j2.Account, j2.User = "lab", "chem", "bob"
			c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j1, j2}}
			a := &fakeApplier{}
			d, _ := newTestDaemonWith(t, c, a, func(c *Config) { c.Policy.BestEffortOrder = policy.OrderFairShare })
			pol, err := policy.New("rubick", d.cfg.Policy.Config())
			if err != nil {
				t.Fatal(err)
			}
			d.deps.Policy = pol
			factors := slurm.FairShares{{Cluster: "lab", Account: "physics", User: "ann"}: 0.2, {Cluster: "lab", Account: "chem", User: "bob"}: 0.2}
			factors[slurm.AssocKey{Cluster: "lab", Account: first, User: map[string]string{"physics": "ann", "chem": "bob"}[first]}] = 0.7
			budgets := &fakeBudgets{b: slurm.Budgets{FairShare: factors}}
			d.deps.Budgets = budgets
			if _, err := d.Cycle(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			want := map[string]int{"physics": 31, "chem": 32}[first]
			if got := oneStart(t, a); got.JobID != want {
				t.Errorf("started job %d, want %d (account %s, factor 0.7)", got.JobID, want, first)
			}
			if diff := cmp.Diff([]slurm.BudgetScope{{Accounts: []string{"chem", "physics"}}}, budgets.scopes); diff != "" {
				t.Errorf("assoc_mgr scopes read (-want +got):\n%s", diff)
			}
		})
	}
}

// The fair-share factors are read with the budgets once a minute, and at
// once when a job of an account not read yet appears.
func TestFairShareRereadForNewAccount(t *testing.T) {
	d, _ := newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(c *Config) { c.Policy.BestEffortOrder = policy.OrderFairShare })
	budgets := &fakeBudgets{}
	d.deps.Budgets = budgets
	for _, st := range []struct {
		after    time.Duration
		accounts []string
		reads    int
	}{
		{0, []string{"a"}, 1},
		{10 * time.Second, []string{"a"}, 1},
		{20 * time.Second, []string{"a", "b"}, 2}, // b is new
		{30 * time.Second, []string{"b"}, 2},      // read with a
		{20*time.Second + limitsRefresh, []string{"b"}, 3},
		{25*time.Second + limitsRefresh, nil, 3}, // slope order, or no job
	} {
		d.slurmLimits(context.Background(), t0.Add(st.after), st.accounts)
		if len(budgets.scopes) != st.reads {
			t.Fatalf("at +%v with accounts %v: %d readings %v, want %d", st.after, st.accounts, len(budgets.scopes), budgets.scopes, st.reads)
		}
	}
	want := []slurm.BudgetScope{{Accounts: []string{"a"}}, {Accounts: []string{"a", "b"}}, {Accounts: []string{"b"}}}
	if diff := cmp.Diff(want, budgets.scopes); diff != "" {
		t.Errorf("scopes read (-want +got):\n%s", diff)
	}
}

// A fair-share factor slurmctld printed as nan is logged once, with the
// association, and the other factors are used.
func TestFairShareUnreadWarned(t *testing.T) {
	d, _ := newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(c *Config) { c.Policy.BestEffortOrder = policy.OrderFairShare })
	var log strings.Builder
	d.deps.Logger = slog.New(slog.NewTextHandler(&log, nil))
	d.deps.Budgets = &fakeBudgets{b: slurm.Budgets{FairShare: slurm.FairShares{{Account: "a", User: "v"}: 0.4},
		FairShareUnread: `SharesRaw/Norm/Level/Factor= of account a user "u": factor "nan": want a number in 0..1`}}
	for i := range 3 {
		d.slurmLimits(context.Background(), t0.Add(time.Duration(i)*limitsRefresh), []string{"a"})
	}
	if n := strings.Count(log.String(), "fair-share factor not read"); n != 1 || !strings.Contains(log.String(), `account a user \"u\": factor \"nan\"`) {
		t.Errorf("log %q: want one warning naming the association and the value", log.String())
	}
	if f, ok := d.budgets.FairShare.Of("", "a", "v", ""); !ok || f != 0.4 {
		t.Errorf("user v's factor %v, %v; want 0.4", f, ok)
	}
}

// With policy.best_effort_order: priority, rubickd computes each held job's
// Slurm priority from the weights and QOS priorities read with the budgets,
// and starts, of two jobs that cannot both start, the one in the QOS of
// higher priority, whichever that is.
func TestCyclePriorityOrder(t *testing.T) {
	for _, first := range []string{"high", "normal"} {
		t.Run(first, func(t *testing.T) {
			j1, j2 := heldJob(31, "llama7", 1, 8), heldJob(32, "llama7", 1, 8)
			j1.Cluster, j1.Account, j1.User, j1.QOS = "lab", "physics", "ann", "normal"
			j2.Cluster, j2.Account, j2.User, j2.QOS = "lab", "chem", "bob", "low"
			if first == "high" {
				j2.QOS = "high"
			} else {
				j1.QOS = "high"
			}
			c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{j1, j2}}
			a := &fakeApplier{}
			d, _ := newTestDaemonWith(t, c, a, func(c *Config) { c.Policy.BestEffortOrder = policy.OrderPriority })
			pol, err := policy.New("rubick", d.cfg.Policy.Config())
			if err != nil {
				t.Fatal(err)
			}
			d.deps.Policy = pol
			budgets := &fakeBudgets{b: slurm.Budgets{
				QOSPriority: map[string]int64{"low": 0, "normal": 10, "high": 100},
				Priority:    slurm.PriorityConfig{Multifactor: true, QOS: 1000, FairShare: 100},
				FairShare:   slurm.FairShares{{Cluster: "lab", Account: "physics", User: "ann"}: 1, {Cluster: "lab", Account: "chem", User: "bob"}: 0},
			}}
			d.deps.Budgets = budgets
			if _, err := d.Cycle(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			want := map[string]int{"high": 32, "normal": 31}[first]
			if got := oneStart(t, a); got.JobID != want {
				t.Errorf("started job %d, want %d (QOS high)", got.JobID, want)
			}
			if diff := cmp.Diff([]slurm.BudgetScope{{Accounts: []string{"chem", "physics"}}}, budgets.scopes); diff != "" {
				t.Errorf("assoc_mgr scopes read (-want +got):\n%s", diff)
			}
		})
	}
}

// Priority weights that do not read are logged once, and the last ones
// read stay in force.
func TestPriorityConfigUnreadKeepsLast(t *testing.T) {
	d, _ := newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(c *Config) { c.Policy.BestEffortOrder = policy.OrderPriority })
	var log strings.Builder
	d.deps.Logger = slog.New(slog.NewTextHandler(&log, nil))
	good := slurm.PriorityConfig{Multifactor: true, QOS: 1000}
	budgets := &fakeBudgets{b: slurm.Budgets{Priority: good}}
	d.deps.Budgets = budgets
	d.slurmLimits(context.Background(), t0, []string{"a"})
	budgets.b = slurm.Budgets{PriorityErr: fmt.Errorf("%w: PriorityWeightQOS=\"x\" is not a weight", slurm.ErrPriorityConfig)}
	for i := 1; i <= 3; i++ {
		d.slurmLimits(context.Background(), t0.Add(time.Duration(i)*limitsRefresh), []string{"a"})
	}
	if n := strings.Count(log.String(), "priority weights not read"); n != 1 || !strings.Contains(log.String(), `PriorityWeightQOS=\"x\"`) {
		t.Errorf("log %q: want one warning naming the setting", log.String())
	}
	if diff := cmp.Diff(good, d.priorityConf); diff != "" {
		t.Errorf("priority configuration %+v, want the last read %+v", d.priorityConf, good)
	}
}

// In priority order with an association weight the reading lists every
// association, whose priorities the factor divides by the largest of: at
// once when the weights read with the jobs' accounts call for it, and
// from then on.
func TestPriorityAssocReadsEveryAssociation(t *testing.T) {
	d, _ := newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(c *Config) { c.Policy.BestEffortOrder = policy.OrderPriority })
	budgets := &fakeBudgets{b: slurm.Budgets{Priority: slurm.PriorityConfig{Multifactor: true, Assoc: 100}}}
	d.deps.Budgets = budgets
	d.slurmLimits(context.Background(), t0, []string{"a"})
	d.slurmLimits(context.Background(), t0.Add(limitsRefresh), []string{"a"})
	d.slurmLimits(context.Background(), t0.Add(2*limitsRefresh), nil) // no job: nothing to read
	want := []slurm.BudgetScope{{Accounts: []string{"a"}}, {All: true}, {All: true}}
	if diff := cmp.Diff(want, budgets.scopes); diff != "" {
		t.Errorf("scopes read (-want +got):\n%s", diff)
	}
}

// sshare failing is logged once: the factors are scontrol's two decimals
// meanwhile.
func TestSShareFailureWarned(t *testing.T) {
	d, _ := newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(c *Config) { c.Policy.BestEffortOrder = policy.OrderPriority })
	var log strings.Builder
	d.deps.Logger = slog.New(slog.NewTextHandler(&log, nil))
	d.deps.Budgets = &fakeBudgets{b: slurm.Budgets{FairShare: slurm.FairShares{{Account: "a", User: "v"}: 0.4},
		SShareErr: errors.New("sshare: exit status 1")}}
	for i := range 3 {
		d.slurmLimits(context.Background(), t0.Add(time.Duration(i)*limitsRefresh), []string{"a"})
	}
	if n := strings.Count(log.String(), "sshare failed"); n != 1 {
		t.Errorf("log %q: want one warning", log.String())
	}
}

// onNodes is a with its Nodes set: a node limit's use counts nodes, which
// no other limit does.
func onNodes(a TRESAmounts, nodes int) TRESAmounts {
	a.Nodes = nodes
	return a
}
