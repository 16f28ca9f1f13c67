package slurm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestParseAssocMgrRecorded reads `scontrol show assoc_mgr flags=assoc,qos`
// as recorded on the labs with budgets set by sacctmgr (24.11:
// GrpTRESMins=gres/gpu=1000,cpu=5000 on account root, billing=300 on
// root's user association, gres/gpu=800 on QOS normal, after jobs that used
// 4 GPU-minutes; 22.05: see its recording's test case).
func TestParseAssocMgrRecorded(t *testing.T) {
	tests := map[string]Budgets{
		"24.11/scontrol-show-assoc_mgr.txt": {
			QOS: map[string]Budget{"normal": {Limit: GroupLimits{GPURunMins: 800}, Spent: GroupLimits{GPURunMins: 4, CPURunMins: 3, BillingRunMins: 4, MemRunMins: 38181}}},
			Assoc: map[AssocKey]Budget{
				{Cluster: "rubicklab2411", Account: "root"}: {
					Limit: GroupLimits{GPURunMins: 1000, CPURunMins: 5000}, Spent: GroupLimits{GPURunMins: 4, CPURunMins: 3, BillingRunMins: 4, MemRunMins: 38181}},
				{Cluster: "rubicklab2411", Account: "root", User: "root"}: {
					Limit: GroupLimits{BillingRunMins: 300}, Spent: GroupLimits{GPURunMins: 4, CPURunMins: 3, BillingRunMins: 4, MemRunMins: 38181}},
			},
			// priority/multifactor with Fair Tree: the factor is the user's.
			FairShare:   FairShares{{Cluster: "rubicklab2411", Account: "root"}: 0, {Cluster: "rubicklab2411", Account: "root", User: "root"}: 1},
			QOSPriority: map[string]int64{"normal": 0},
			AssocPriority: map[AssocKey]int64{
				{Cluster: "rubicklab2411", Account: "root"}: 0, {Cluster: "rubicklab2411", Account: "root", User: "root"}: 0},
		},
		"22.05/scontrol-show-assoc_mgr.txt": {
			QOS: map[string]Budget{"guaranteed": {Limit: GroupLimits{GPURunMins: 120, BillingRunMins: 500}}},
			Assoc: map[AssocKey]Budget{
				{Cluster: "rubicklab", Account: "root", User: "root"}: {Limit: GroupLimits{GPURunMins: 600}},
			},
			// priority/basic computes no factor (and no normalised shares).
			FairShare: FairShares{
				{Cluster: "rubicklab", Account: "root"}: 0, {Cluster: "rubicklab", Account: "root", User: "nobody"}: 0,
				{Cluster: "rubicklab", Account: "root", User: "root"}: 0,
			},
			QOSPriority: map[string]int64{"guaranteed": 0, "normal": 0},
			AssocPriority: map[AssocKey]int64{
				{Cluster: "rubicklab", Account: "root"}: 0, {Cluster: "rubicklab", Account: "root", User: "nobody"}: 0,
				{Cluster: "rubicklab", Account: "root", User: "root"}: 0},
		},
	}
	for path, want := range tests {
		t.Run(path, func(t *testing.T) {
			got, err := ParseAssocMgr([]byte(testdata(t, path)))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseAssocMgrErrors(t *testing.T) {
	record := func(line string) string {
		return "Current Association Manager state\n\nQOS Records\n\nQOS=normal(1)\n    " + line + "\n"
	}
	tests := map[string]struct{ out, want string }{
		"not assoc_mgr":  {"Configuration data as of ...\n", `no "Association Records" or "QOS Records"`},
		"no parentheses": {record("GrpTRESMins=cpu=N(0),gres/gpu=100"), `GrpTRESMins gres/gpu="100": want LIMIT(USED)`},
		"bad limit":      {record("GrpTRESMins=gres/gpu=lots(3)"), `limit "lots" not a count`},
		"negative used":  {record("GrpTRESMins=cpu=10(-1)"), `used minutes "-1" not a count`},
		"bad priority":   {record("Priority=high"), `QOS normal: Priority="high" is not a priority`},
		"bad association priority": {"Association Records\n\nClusterName=c Account=a UserName=u(1) Partition= Priority=-3 ID=2\n",
			`account a user "u": Priority="-3" is not a priority`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseAssocMgr([]byte(tc.out))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A QOS's per-account and per-user sections (MaxTRESRunMinsPA and the
// like) do not overwrite its own GrpTRESMins, and a record without one
// lists nothing (a QOS's entries set to 0 are listed, in Zero). A memory budget alone is one (mem, MiB-minutes; vmem is
// another TRES), and so is a node-minute budget alone, or one of a GPU
// type alone.
func TestParseAssocMgrSections(t *testing.T) {
	out := `QOS Records

QOS=normal(1)
    GrpTRESMins=cpu=N(0),gres/gpu=50(7)
    Priority=10
    Account Limits
      root
        MaxTRESRunMinsPA=cpu=N(0),gres/gpu=N(0)
QOS=idle(2)
    GrpTRESMins=cpu=N(0),gres/gpu=N(9)
    Priority=0
QOS=memory(3)
    GrpTRESMins=cpu=N(0),mem=400000(1200),vmem=N(5),gres/gpu=N(0)
    Priority=0
QOS=nodes(4)
    GrpTRESMins=cpu=N(0),mem=N(0),energy=N(0),node=600(45),billing=N(0),gres/gpu=N(0)
    Priority=0
QOS=h100(5)
    GrpTRESMins=cpu=N(0),mem=N(0),node=N(0),billing=N(0),gres/gpu=N(40),gres/gpu:a100=N(30),gres/gpu:h100=5000(10)
    Priority=0
QOS=closed(6)
    GrpTRESMins=cpu=0(3),mem=N(0),energy=0(0),node=N(0),billing=N(0),gres/gpu=0(12),gres/gpu:h100=0(2)
    Priority=0

Association Records

ClusterName=lab Account=frozen UserName= Partition= Priority=0 ID=3
    GrpTRESMins=cpu=N(0),gres/gpu=0(12)
ClusterName=lab Account=half UserName= Partition= Priority=0 ID=4
    GrpTRESMins=cpu=0(0),gres/gpu=100(12)
`
	got, err := ParseAssocMgr([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := Budgets{QOS: map[string]Budget{"normal": {Limit: GroupLimits{GPURunMins: 50}, Spent: GroupLimits{GPURunMins: 7}},
		"memory": {Limit: GroupLimits{MemRunMins: 400000}, Spent: GroupLimits{MemRunMins: 1200}},
		"nodes":  {Limit: GroupLimits{NodeRunMins: 600}, Spent: GroupLimits{NodeRunMins: 45}},
		// A budget of one GPU type alone; what the others used is not
		// bounded.
		"h100": {Spent: GroupLimits{GPURunMins: 40},
			Typed: map[string]Budget{"h100": {Limit: GroupLimits{GPURunMins: 5000}, Spent: GroupLimits{GPURunMins: 10}}}},
		// Entries set to 0 are limits Slurm starts no job under, not
		// none; one on a TRES rubick does not plan with is left out.
		"closed": {Spent: GroupLimits{GPURunMins: 12, CPURunMins: 3}, Zero: []ZeroLimit{{Name: "GrpTRESMins=gres/gpu=0"}, {Name: "GrpTRESMins=cpu=0"},
			{Name: "GrpTRESMins=gres/gpu:h100=0", GPUType: "h100"}}}},
		// An association's come from slurmdbd's listing (Association.Zero).
		Assoc:         map[AssocKey]Budget{{Cluster: "lab", Account: "half"}: {Limit: GroupLimits{GPURunMins: 100}, Spent: GroupLimits{GPURunMins: 12}}},
		FairShare:     FairShares{},
		QOSPriority:   map[string]int64{"normal": 10, "idle": 0, "memory": 0, "nodes": 0, "h100": 0, "closed": 0},
		AssocPriority: map[AssocKey]int64{{Cluster: "lab", Account: "frozen"}: 0, {Cluster: "lab", Account: "half"}: 0}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestParseAssocMgrManyTypes: a list of many GPU types reads in time
// linear in its entries; each entry's lookup scanned the whole list, and
// 20000 types took about 13 s.
func TestParseAssocMgrManyTypes(t *testing.T) {
	const n = 20000
	b, err := ParseAssocMgr(manyTypes(n))
	if err != nil {
		t.Fatal(err)
	}
	typed := b.QOS["many"].Typed
	if len(typed) != n {
		t.Errorf("%d types read, want %d", len(typed), n)
	}
	if diff := cmp.Diff(Budget{Limit: GroupLimits{GPURunMins: 10}, Spent: GroupLimits{GPURunMins: 1}}, typed["t9"]); diff != "" {
		t.Errorf("t9 (-want +got):\n%s", diff)
	}
}

// manyTypes is a QOS whose GrpTRESMins lists n GPU types.
func manyTypes(n int) []byte {
	var out strings.Builder
	out.WriteString("QOS Records\n\nQOS=many(1)\n    GrpTRESMins=cpu=N(0)")
	for i := range n {
		fmt.Fprintf(&out, ",gres/gpu:t%d=%d(1)", i, i+1)
	}
	return []byte(out.String() + "\n")
}

// BenchmarkParseAssocMgrManyTypes reads a GrpTRESMins list of 20000 GPU
// types: linear in the list (a lookup per entry made it quadratic, 13.6 s).
func BenchmarkParseAssocMgrManyTypes(b *testing.B) {
	in := manyTypes(20000)
	for b.Loop() {
		if _, err := ParseAssocMgr(in); err != nil {
			b.Fatal(err)
		}
	}
}

// A factor that does not read leaves its association out and is named;
// the budgets beside it stand.
func TestParseAssocMgrUnreadFactor(t *testing.T) {
	for line, why := range map[string]string{
		"SharesRaw/Norm/Level/Factor=0/0.00/1/nan":  `factor "nan": want a number in 0..1`,
		"SharesRaw/Norm/Level/Factor=1/0.50/1/1.50": `factor "1.50": want a number in 0..1`,
		"SharesRaw/Norm/Level/Factor=1/0.50":        `"1/0.50": want RAW/NORM/LEVEL/FACTOR`,
		"SharesRaw/Norm/Level/Factor=":              `"": want RAW/NORM/LEVEL/FACTOR`,
	} {
		out := "Association Records\n\nClusterName=c Account=a UserName=u(1) Partition= ID=2\n    " + line +
			"\n    GrpTRESMins=cpu=N(0),gres/gpu=50(7)\nClusterName=c Account=a UserName=v(2) Partition= ID=3\n" +
			"    SharesRaw/Norm/Level/Factor=1/0.50/1/0.40\n"
		b, err := ParseAssocMgr([]byte(out))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		want := Budgets{QOS: map[string]Budget{}, Assoc: map[AssocKey]Budget{{Cluster: "c", Account: "a", User: "u"}: {
			Limit: GroupLimits{GPURunMins: 50}, Spent: GroupLimits{GPURunMins: 7}}},
			FairShare:       FairShares{{Cluster: "c", Account: "a", User: "v"}: 0.4},
			FairShareUnread: `SharesRaw/Norm/Level/Factor= of account a user "u": ` + why}
		if diff := cmp.Diff(want, b); diff != "" {
			t.Errorf("%s (-want +got):\n%s", line, diff)
		}
	}
}

// A job's factor is its user's association in its partition, else in its
// account; an account's own record (0 under Fair Tree) is not a user's.
func TestFairShareOf(t *testing.T) {
	out := `Association Records

ClusterName=c Account=lab UserName= Partition= Priority=0 ID=2
    SharesRaw/Norm/Level/Factor=68209/0.01/8360303/0.00
ClusterName=c Account=lab UserName=me(123) Partition= Priority=0 ID=3
    SharesRaw/Norm/Level/Factor=1/0.03/30/0.83
ClusterName=c Account=lab UserName=me(123) Partition=gpu Priority=0 ID=4
    SharesRaw/Norm/Level/Factor=1/0.03/30/0.25
`
	b, err := ParseAssocMgr([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		account, user, partition string
		want                     float64
		ok                       bool
	}{
		{"lab", "me", "", 0.83, true},
		{"lab", "me", "cpu", 0.83, true},
		{"lab", "me", "gpu", 0.25, true},
		{"lab", "you", "", 0, false},
		{"other", "me", "", 0, false},
	}
	for _, tc := range tests {
		got, ok := b.FairShare.Of("c", tc.account, tc.user, tc.partition)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Of(%s, %s, %s) = %v, %v; want %v, %v", tc.account, tc.user, tc.partition, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBudgetScopeWith(t *testing.T) {
	tests := map[string]struct {
		s    BudgetScope
		add  []string
		want BudgetScope
	}{
		"all stays all":   {BudgetScope{All: true}, []string{"a"}, BudgetScope{All: true}},
		"nothing added":   {BudgetScope{Accounts: []string{"b"}}, nil, BudgetScope{Accounts: []string{"b"}}},
		"union, sorted":   {BudgetScope{Accounts: []string{"c", "a"}}, []string{"b", "a", ""}, BudgetScope{Accounts: []string{"a", "b", "c"}}},
		"from none (qos)": {BudgetScope{}, []string{"x"}, BudgetScope{Accounts: []string{"x"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := tc.s.With(tc.add...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if !got.Covers(tc.s) || !got.Covers(BudgetScope{Accounts: slices.DeleteFunc(slices.Clone(tc.add), func(a string) bool { return a == "" })}) {
				t.Errorf("%+v does not cover %+v and %q", got, tc.s, tc.add)
			}
		})
	}
	if (BudgetScope{Accounts: []string{"a"}}).Covers(BudgetScope{Accounts: []string{"a", "b"}}) || (BudgetScope{Accounts: []string{"a"}}).Covers(BudgetScope{All: true}) {
		t.Error("a scope covers accounts it does not read")
	}
}

func TestShowAssocMgrArgv(t *testing.T) {
	long := make([]string, 0, 5000)
	for i := range cap(long) {
		long = append(long, fmt.Sprintf("account%04d", i))
	}
	base := []string{"/opt/slurm/bin/scontrol", "show", "assoc_mgr"}
	tests := map[string]struct {
		scope BudgetScope
		want  []string
	}{
		"all":         {BudgetScope{All: true}, append(base, "flags=assoc,qos")},
		"no accounts": {BudgetScope{}, append(base, "flags=qos")},
		"accounts":    {BudgetScope{Accounts: []string{"chem", "physics"}}, append(base, "flags=assoc,qos", "accounts=chem,physics")},
		// 60 KB of names: past maxScopeArg, so every association.
		"too many accounts": {BudgetScope{Accounts: long}, append(base, "flags=assoc,qos")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := &fakeRunner{out: []byte("QOS Records\n")}
			if _, err := ShowAssocMgr(context.Background(), r, "/opt/slurm/bin/scontrol", tc.scope); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([][]string{tc.want}, r.calls); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
}

// BudgetScope reads the accounts whose associations carry a GrpTRESMins
// off slurmdbd's listing, as recorded on both labs after `sacctmgr modify
// account budgetacct set GrpTRESMins=gres/gpu=777` and `sacctmgr modify
// user root where account=budgetacct set GrpTRESMins=cpu=555`; the
// recordings without budgets ask for the QOS alone.
func TestBudgetScopeRecorded(t *testing.T) {
	for _, lab := range []struct{ version, dir, db string }{
		{Version38, "22.05", "dbv0.0.38"},
		{Version41, "24.11", "dbv0.0.41"},
	} {
		for file, want := range map[string]BudgetScope{
			"-associations.json":         {},
			"-associations-budgets.json": {Accounts: []string{"budgetacct"}},
		} {
			t.Run(lab.dir+"/"+lab.db+file, func(t *testing.T) {
				f, srv := newFakeRestd(t, lab.version)
				api := strings.TrimPrefix(lab.db, "db")
				f.overrides["/slurmdb/"+api+"/qos"] = testdata(t, lab.dir+"/"+lab.db+"-qos.json")
				f.overrides["/slurmdb/"+api+"/associations"] = testdata(t, lab.dir+"/"+lab.db+file)
				l, err := newTestCluster(t, srv.URL, nil).Limits(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, l.BudgetScope()); diff != "" {
					t.Errorf("scope (-want +got):\n%s", diff)
				}
				if want.Accounts == nil {
					return
				}
				listed := map[string]GroupLimits{}
				for _, a := range l.Associations {
					if a.Account == "budgetacct" {
						listed[a.User] = a.ListedBudget
					}
				}
				if diff := cmp.Diff(map[string]GroupLimits{"": {GPURunMins: 777}, "root": {CPURunMins: 555}}, listed); diff != "" {
					t.Errorf("budgetacct's listed budgets (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// An association whose listing does not say whether it has a budget (a
// slurmrestd version without group.minutes, or one built by hand) makes
// the scope every association: a budget missed would be overspent.
func TestBudgetScopeUnlisted(t *testing.T) {
	l := Limits{Associations: []Association{
		{Account: "b", BudgetListed: true, ListedBudget: GroupLimits{GPURunMins: 1}},
		{Account: "a", User: "ann", BudgetListed: true, ListedBudget: GroupLimits{BillingRunMins: 1}},
		{Account: "b", User: "bob", BudgetListed: true, ListedBudget: GroupLimits{CPURunMins: 1}},
		{Account: "c", BudgetListed: true},
		// A budget of one GPU type alone.
		{Account: "e", BudgetListed: true, Typed: TypedGPUs{Budget: map[string]int{"h100": 5000}}},
	}}
	if diff := cmp.Diff(BudgetScope{Accounts: []string{"a", "b", "e"}}, l.BudgetScope()); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
	l.Associations = append(l.Associations, Association{Account: "d"})
	if diff := cmp.Diff(BudgetScope{All: true}, l.BudgetScope()); diff != "" {
		t.Errorf("one unlisted (-want +got):\n%s", diff)
	}
}

func TestWithBudgets(t *testing.T) {
	l := Limits{
		QOS:          map[string]QOS{"normal": {Name: "normal"}, "old": {Name: "old", Budget: Budget{Limit: GroupLimits{GPURunMins: 5}}}},
		Associations: []Association{{Cluster: "lab", Account: "physics"}, {Cluster: "lab", Account: "physics", User: "ann"}},
	}
	b := Budgets{
		QOS:   map[string]Budget{"normal": {Limit: GroupLimits{GPURunMins: 100}}, "gone": {Limit: GroupLimits{GPURunMins: 1}}},
		Assoc: map[AssocKey]Budget{{Cluster: "lab", Account: "physics", User: "ann"}: {Limit: GroupLimits{CPURunMins: 10}, Spent: GroupLimits{CPURunMins: 4}}},
	}
	got := l.WithBudgets(b)
	want := Limits{
		QOS: map[string]QOS{"normal": {Name: "normal", Budget: Budget{Limit: GroupLimits{GPURunMins: 100}}}, "old": {Name: "old"}},
		Associations: []Association{{Cluster: "lab", Account: "physics"},
			{Cluster: "lab", Account: "physics", User: "ann", Budget: Budget{Limit: GroupLimits{CPURunMins: 10}, Spent: GroupLimits{CPURunMins: 4}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if l.QOS["old"].Budget.Limit.GPURunMins != 5 || l.Associations[1].Budget.IsSet() {
		t.Error("WithBudgets changed the limits it was called on")
	}
}

// A QOS's GrpTRESMins entry set to 0, which only slurmctld lists, is a
// limit its jobs wait under (Limits.Zero), after the listing's own; the
// limits WithBudgets was called on keep theirs alone, reading after
// reading.
func TestWithBudgetsZero(t *testing.T) {
	listed := ZeroLimit{Name: "GrpJobs=0"}
	l := Limits{QOS: map[string]QOS{"normal": {Name: "normal"}, "frozen": {Name: "frozen", Zero: []ZeroLimit{listed}}}}
	zeros := Budget{Zero: []ZeroLimit{{Name: "GrpTRESMins=gres/gpu=0"}}}
	for range 2 {
		got := l.WithBudgets(Budgets{QOS: map[string]Budget{"normal": zeros, "frozen": zeros}})
		for qos, want := range map[string]string{"normal": "QOS normal GrpTRESMins=gres/gpu=0", "frozen": "QOS frozen GrpJobs=0"} {
			if z, _ := got.Zero(Job{QOS: qos}, "gpu"); z != want {
				t.Errorf("QOS %s: Zero = %q, want %q", qos, z, want)
			}
		}
		if diff := cmp.Diff([]ZeroLimit{listed, zeros.Zero[0]}, got.QOS["frozen"].Zero); diff != "" {
			t.Errorf("QOS frozen's zeros (-want +got):\n%s", diff)
		}
	}
	if diff := cmp.Diff([]ZeroLimit{listed}, l.QOS["frozen"].Zero); diff != "" {
		t.Errorf("WithBudgets changed the limits it was called on (-want +got):\n%s", diff)
	}
}

// argvRunner answers each command by its third word (show config, show
// assoc_mgr); one it has no answer for fails.
type argvRunner map[string]string

func (r argvRunner) Run(_ context.Context, argv []string) ([]byte, error) {
	out, ok := r[argv[2]]
	if !ok {
		return nil, &CommandError{Argv: argv, ExitCode: 1, Err: os.ErrNotExist}
	}
	return []byte(out), nil
}

// AssocMgr gives the budgets with slurmctld's PriorityCalcPeriod, Slurm's
// default where show config fails.
func TestAssocMgrTick(t *testing.T) {
	assoc, conf := testdata(t, "24.11/scontrol-show-assoc_mgr.txt"), testdata(t, "24.11/scontrol-show-config.txt")
	tenMin := strings.Replace(conf, "PriorityCalcPeriod      = 00:05:00", "PriorityCalcPeriod      = 00:10:00", 1)
	tests := map[string]struct {
		r    argvRunner
		want time.Duration
	}{
		"24.11":              {argvRunner{"assoc_mgr": assoc, "config": conf}, 5 * time.Minute},
		"10 minutes":         {argvRunner{"assoc_mgr": assoc, "config": tenMin}, 10 * time.Minute},
		"config unread":      {argvRunner{"assoc_mgr": assoc}, defaultTick},
		"no budget, no tick": {argvRunner{"assoc_mgr": "QOS Records\n", "config": tenMin}, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := AssocMgr{Runner: tc.r, Scontrol: "scontrol"}.Budgets(context.Background(), BudgetScope{All: true})
			if err != nil {
				t.Fatal(err)
			}
			if b.Tick != tc.want {
				t.Errorf("Tick = %v, want %v", b.Tick, tc.want)
			}
			if l := (Limits{QOS: map[string]QOS{"normal": {Name: "normal"}}}).WithBudgets(b); l.BudgetTick != tc.want {
				t.Errorf("the limits' BudgetTick is %v, want %v", l.BudgetTick, tc.want)
			}
		})
	}
	if _, err := (AssocMgr{Runner: argvRunner{}, Scontrol: "scontrol"}).Budgets(context.Background(), BudgetScope{}); err == nil {
		t.Error("AssocMgr.Budgets with scontrol failing gave no error")
	}
}

// The budgets recorded with scontrol land on the associations and QOS
// slurmdbd lists through slurmrestd on the same lab: the names agree.
func TestBudgetsOnRecordedLimits(t *testing.T) {
	for _, lab := range []struct {
		version, dir, db, cluster string
		qos                       string // the QOS with a budget
		account, user             Budget // on account root's and user root's associations
	}{
		{Version38, "22.05", "dbv0.0.38", "rubicklab", "guaranteed", Budget{}, Budget{Limit: GroupLimits{GPURunMins: 600}}},
		{Version41, "24.11", "dbv0.0.41", "rubicklab2411", "normal",
			Budget{Limit: GroupLimits{GPURunMins: 1000, CPURunMins: 5000}, Spent: GroupLimits{GPURunMins: 4, CPURunMins: 3, BillingRunMins: 4, MemRunMins: 38181}},
			Budget{Limit: GroupLimits{BillingRunMins: 300}, Spent: GroupLimits{GPURunMins: 4, CPURunMins: 3, BillingRunMins: 4, MemRunMins: 38181}}},
	} {
		t.Run(lab.dir, func(t *testing.T) {
			f, srv := newFakeRestd(t, lab.version)
			api := strings.TrimPrefix(lab.db, "db")
			f.overrides["/slurmdb/"+api+"/qos"] = testdata(t, lab.dir+"/"+lab.db+"-qos.json")
			f.overrides["/slurmdb/"+api+"/associations"] = testdata(t, lab.dir+"/"+lab.db+"-associations.json")
			l, err := newTestCluster(t, srv.URL, nil).Limits(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			b, err := ParseAssocMgr([]byte(testdata(t, lab.dir+"/scontrol-show-assoc_mgr.txt")))
			if err != nil {
				t.Fatal(err)
			}
			l = l.WithBudgets(b)
			if !l.QOS[lab.qos].Budget.IsSet() {
				t.Errorf("QOS %s has no budget: %+v", lab.qos, l.QOS)
			}
			got := map[string]Budget{}
			for _, a := range l.Associations {
				if a.Cluster != lab.cluster {
					t.Errorf("association %+v: cluster %q, want %q", a, a.Cluster, lab.cluster)
				}
				got[a.Account+"/"+a.User] = a.Budget
			}
			want := map[string]Budget{"root/": lab.account, "root/root": lab.user, "root/nobody": {}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("budgets by association (-want +got):\n%s", diff)
			}
		})
	}
}

// Reading every association, as rubickd does in priority order with an
// association weight: 50,000 of them, each as 24.11 prints it.
func BenchmarkParseAssocMgr50000(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("Current Association Manager state\n\nAssociation Records\n\n")
	rec := `    SharesRaw/Norm/Level/Factor=1/0.00/1/0.50
    UsageRaw/Norm/Efctv=0.00/1.00/1.00
    ParentAccount= Lineage=/ DefAssoc=No
    GrpJobs=N(1) GrpJobsAccrue=N(1)
    GrpSubmitJobs=N(5) GrpWall=N(0.00)
    GrpTRES=cpu=N(2),mem=N(8000),energy=N(0),node=N(1),billing=N(2),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(1),gres/gpumem=N(0),gres/gpuutil=N(0)
    GrpTRESMins=cpu=N(0),mem=N(0),energy=N(0),node=N(0),billing=N(0),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(0),gres/gpumem=N(0),gres/gpuutil=N(0)
    GrpTRESRunMins=cpu=N(1051200),mem=N(4204800000),energy=N(0),node=N(525600),billing=N(1051200),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(525600),gres/gpumem=N(0),gres/gpuutil=N(0)
    MaxJobs= MaxJobsAccrue= MaxSubmitJobs= MaxWallPJ=
    MaxTRESPJ=
    MaxTRESPN=
    MaxTRESMinsPJ=
    MinPrioThresh=
    Comment=(null)
`
	for i := range 50000 {
		fmt.Fprintf(&sb, "ClusterName=c Account=a%d UserName=u%d(%d) Partition= Priority=%d ID=%d\n%s", i/10, i, i, i%100, i, rec)
	}
	out := []byte(sb.String())
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		if _, err := ParseAssocMgr(out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(out))/1e6, "MB")
}

// With SShare the factors assoc_mgr lists take sshare's six decimals; if
// sshare fails they stay at two, and SShareErr says why.
func TestAssocMgrSShare(t *testing.T) {
	assoc, conf := testdata(t, "24.11/scontrol-show-assoc_mgr.txt"), testdata(t, "24.11/scontrol-show-config.txt")
	user := AssocKey{Cluster: "rubicklab2411", Account: "root", User: "root"}
	r := argvRunner{"assoc_mgr": assoc, "config": conf, "-n": "rubicklab2411|root|||\nrubicklab2411| root|root||0.987654\nrubicklab2411| other|u||0.5\n"}
	b, err := AssocMgr{Runner: r, Scontrol: "scontrol", SShare: "sshare"}.Budgets(context.Background(), BudgetScope{Accounts: []string{"root"}})
	if err != nil || b.SShareErr != nil {
		t.Fatal(err, b.SShareErr)
	}
	want := FairShares{{Cluster: "rubicklab2411", Account: "root"}: 0, user: 0.987654}
	if diff := cmp.Diff(want, b.FairShare); diff != "" {
		t.Errorf("factors (-want +got):\n%s", diff)
	}
	delete(r, "-n")
	b, err = AssocMgr{Runner: r, Scontrol: "scontrol", SShare: "sshare"}.Budgets(context.Background(), BudgetScope{Accounts: []string{"root"}})
	if err != nil || b.SShareErr == nil || b.FairShare[user] != 1 {
		t.Errorf("sshare failing: err %v, SShareErr %v, factor %v; want the two decimals' 1 and SShareErr set", err, b.SShareErr, b.FairShare[user])
	}
}

// FuzzParseAssocMgr checks that whatever ParseAssocMgr reads off any text
// is a budget it can plan with: limits and minutes used that are not
// negative, priorities that are not either, and fair-share factors in
// 0..1.
func FuzzParseAssocMgr(f *testing.F) {
	for _, name := range []string{"24.11/scontrol-show-assoc_mgr.txt", "22.05/scontrol-show-assoc_mgr.txt"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("QOS Records\n\nQOS=h100(5)\n    GrpTRESMins=cpu=N(0),gres/gpu=N(40),gres/gpu:a100=N(30),gres/gpu:h100=5000(10)\n    Priority=0\n" +
		"QOS=closed(6)\n    GrpTRESMins=cpu=0(3),gres/gpu=0(12),gres/gpu:h100=0(2)\n    Account Limits\n" +
		"Association Records\n\nClusterName=c Account=a UserName=u(1) Partition= Priority=3 ID=2\n    SharesRaw/Norm/Level/Factor=0/0.00/1/nan\n    GrpTRESMins=cpu=N(0),gres/gpu=50(7)\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		b, err := ParseAssocMgr(out)
		if err != nil {
			return
		}
		check := func(what string, bud Budget) {
			for _, g := range []GroupLimits{bud.Limit, bud.Spent} {
				if g.GPURunMins < 0 || g.CPURunMins < 0 || g.MemRunMins < 0 || g.BillingRunMins < 0 || g.NodeRunMins < 0 {
					t.Fatalf("%s: negative minutes in %+v", what, bud)
				}
			}
			for ty, tb := range bud.Typed {
				if ty == "" || tb.Limit.GPURunMins <= 0 || tb.Spent.GPURunMins < 0 {
					t.Fatalf("%s: type %q: %+v", what, ty, tb)
				}
			}
		}
		for q, bud := range b.QOS {
			check("QOS "+q, bud)
		}
		for k, bud := range b.Assoc {
			check(fmt.Sprintf("association %+v", k), bud)
			if !bud.IsSet() {
				t.Fatalf("association %+v listed with no budget: %+v", k, bud)
			}
		}
		for k, v := range b.FairShare {
			if !(v >= 0 && v <= 1) {
				t.Fatalf("association %+v: fair-share factor %v", k, v)
			}
		}
		for _, p := range b.QOSPriority {
			if p < 0 {
				t.Fatalf("QOS priorities %v", b.QOSPriority)
			}
		}
		for _, p := range b.AssocPriority {
			if p < 0 {
				t.Fatalf("association priorities %v", b.AssocPriority)
			}
		}
	})
}
