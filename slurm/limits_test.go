package slurm

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLimitsPerJob(t *testing.T) {
	l := Limits{
		QOS: map[string]QOS{
			"normal": {Name: "normal"},
			"small":  {Name: "small", PerJob: JobLimits{GPUs: 2, GPUsPerNode: 1, MemMBPerNode: 4096, Wall: 3 * time.Hour, GPUMins: 120}},
			"part":   {Name: "part", PerJob: JobLimits{GPUs: 3, Wall: 30 * time.Minute}},
			"over":   {Name: "over", OverPartQOS: true, PerJob: JobLimits{GPUs: 6}},
			"long":   {Name: "long", OverPartTime: true, PerJob: JobLimits{Wall: 3 * time.Hour}},
			"wide":   {Name: "wide", OverPartNodes: true},
		},
		Partitions: map[string]Partition{"small": {Name: "small", MaxNodesPerJob: 1, MaxTime: time.Hour, MaxCPUsPerNode: 16, MaxMemPerNodeMB: 2048},
			"slow":   {Name: "slow", MaxTime: time.Hour, QOS: "long"},
			"wide":   {Name: "wide", MaxNodesPerJob: 4, MaxTime: 4 * time.Hour},
			"shared": {Name: "shared", QOS: "part"}, "unknown": {Name: "unknown", QOS: "gone"}},
		Associations: []Association{
			{Cluster: "lab", Account: "root"},
			{Cluster: "lab", Account: "science", Parent: "root", PerJob: JobLimits{Nodes: 2, CPUs: 64}},
			{Cluster: "lab", Account: "physics", Parent: "science", PerJob: JobLimits{GPUs: 8, CPUsPerNode: 32, GPUMins: 480, MemMins: 2400000}},
			{Cluster: "lab", Account: "physics", User: "ann", PerJob: JobLimits{GPUs: 4, Wall: 2 * time.Hour, CPUMins: 1000}},
			{Cluster: "lab", Account: "physics", User: "ann", Partition: "big", PerJob: JobLimits{GPUs: 16}},
			{Cluster: "other", Account: "physics", User: "bob", PerJob: JobLimits{GPUs: 1}},
			{Cluster: "lab", Account: "loop", Parent: "loop2", PerJob: JobLimits{CPUs: 9}},
			{Cluster: "lab", Account: "loop2", Parent: "loop"},
		},
	}
	tests := map[string]struct {
		qos, account, user, partition string
		want                          JobLimits
	}{
		// The user's association for the partition is the job's, in place
		// of the user's without one (whose 2 hours and CPU-minutes do not
		// apply): its parent is the account, as the other's is.
		"user's":            {"normal", "physics", "ann", "gpu", JobLimits{GPUs: 4, Nodes: 2, CPUs: 64, CPUsPerNode: 32, Wall: 2 * time.Hour, GPUMins: 480, CPUMins: 1000, MemMins: 2400000}},
		"user's, partition": {"normal", "physics", "ann", "big", JobLimits{GPUs: 16, Nodes: 2, CPUs: 64, CPUsPerNode: 32, GPUMins: 480, MemMins: 2400000}},
		"QOS first":         {"small", "physics", "ann", "big", JobLimits{GPUs: 2, Nodes: 2, CPUs: 64, GPUsPerNode: 1, CPUsPerNode: 32, MemMBPerNode: 4096, Wall: 3 * time.Hour, GPUMins: 120, MemMins: 2400000}},
		"account's":         {"normal", "physics", "carl", "gpu", JobLimits{GPUs: 8, Nodes: 2, CPUs: 64, CPUsPerNode: 32, GPUMins: 480, MemMins: 2400000}},
		"other cluster":     {"normal", "physics", "bob", "gpu", JobLimits{GPUs: 8, Nodes: 2, CPUs: 64, CPUsPerNode: 32, GPUMins: 480, MemMins: 2400000}},
		"none":              {"normal", "root", "root", "gpu", JobLimits{}},
		"unknown":           {"gold", "nowhere", "x", "gpu", JobLimits{}},
		"parent cycle":      {"normal", "loop", "x", "gpu", JobLimits{CPUs: 9}},
		"partition":         {"normal", "physics", "carl", "small", JobLimits{GPUs: 8, Nodes: 1, CPUs: 64, CPUsPerNode: 16, MemMBPerNode: 2048, Wall: time.Hour, GPUMins: 480, MemMins: 2400000}},
		"partition above":   {"normal", "physics", "carl", "wide", JobLimits{GPUs: 8, Nodes: 2, CPUs: 64, CPUsPerNode: 32, Wall: 4 * time.Hour, GPUMins: 480, MemMins: 2400000}},
		"partition alone":   {"normal", "root", "root", "small", JobLimits{Nodes: 1, CPUsPerNode: 16, MemMBPerNode: 2048, Wall: time.Hour}},
		"partition's time":  {"small", "physics", "ann", "small", JobLimits{GPUs: 2, Nodes: 1, CPUs: 64, GPUsPerNode: 1, CPUsPerNode: 16, MemMBPerNode: 2048, Wall: time.Hour, GPUMins: 120, CPUMins: 1000, MemMins: 2400000}},
		// The partition's QOS first, then the job's, unless that has
		// OverPartQOS; a partition QOS slurmdbd does not list sets nothing.
		"partition QOS":         {"normal", "physics", "ann", "shared", JobLimits{GPUs: 3, Nodes: 2, CPUs: 64, CPUsPerNode: 32, Wall: 30 * time.Minute, GPUMins: 480, CPUMins: 1000, MemMins: 2400000}},
		"over job QOS":          {"small", "physics", "ann", "shared", JobLimits{GPUs: 3, Nodes: 2, CPUs: 64, GPUsPerNode: 1, CPUsPerNode: 32, MemMBPerNode: 4096, Wall: 30 * time.Minute, GPUMins: 120, CPUMins: 1000, MemMins: 2400000}},
		"OverPartQOS":           {"over", "physics", "carl", "shared", JobLimits{GPUs: 6, Nodes: 2, CPUs: 64, CPUsPerNode: 32, Wall: 30 * time.Minute, GPUMins: 480, MemMins: 2400000}},
		"same QOS":              {"part", "physics", "carl", "shared", JobLimits{GPUs: 3, Nodes: 2, CPUs: 64, CPUsPerNode: 32, Wall: 30 * time.Minute, GPUMins: 480, MemMins: 2400000}},
		"unknown partition QOS": {"normal", "physics", "carl", "unknown", JobLimits{GPUs: 8, Nodes: 2, CPUs: 64, CPUsPerNode: 32, GPUMins: 480, MemMins: 2400000}},
		// The PartitionTimeLimit flag of the job's QOS lifts the
		// partition's MaxTime; the partition's QOS's does not (22.05 lab).
		"PartitionTimeLimit":                 {"long", "root", "root", "small", JobLimits{Nodes: 1, CPUsPerNode: 16, MemMBPerNode: 2048, Wall: 3 * time.Hour}},
		"PartitionMaxNodes":                  {"wide", "root", "root", "small", JobLimits{CPUsPerNode: 16, MemMBPerNode: 2048, Wall: time.Hour}},
		"partition QOS's PartitionTimeLimit": {"normal", "root", "root", "slow", JobLimits{Wall: time.Hour}},
		"QOS's time":                         {"small", "physics", "ann", "wide", JobLimits{GPUs: 2, Nodes: 2, CPUs: 64, GPUsPerNode: 1, CPUsPerNode: 32, MemMBPerNode: 4096, Wall: 3 * time.Hour, GPUMins: 120, CPUMins: 1000, MemMins: 2400000}},
	}
	// The same with the associations scanned and looked up by key.
	for _, l := range []Limits{l, l.Indexed()} {
		for name, tc := range tests {
			t.Run(fmt.Sprintf("%s/indexed=%v", name, l.AssocIndex != nil), func(t *testing.T) {
				j := Job{Cluster: "lab", QOS: tc.qos, Account: tc.account, User: tc.user}
				if diff := cmp.Diff(tc.want, l.PerJob(j, tc.partition)); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			})
		}
	}
}

// A per-job limit of 0 holds a job only where it is the one Slurm applies:
// none set ahead of it in PerJob's order (the partition's QOS, then the
// job's unless that has OverPartQOS, then the nearest association), on the
// same bound; a limit on one GPU type only where the job asks for it.
func TestLimitsZeroPerJob(t *testing.T) {
	gpus0 := ZeroLimit{Name: "MaxTRESPerJob=gres/gpu=0", PerJob: JobLimits{GPUs: 1}}
	l := Limits{
		QOS: map[string]QOS{
			"normal": {Name: "normal"},
			"none":   {Name: "none", Zero: []ZeroLimit{gpus0}},
			"over":   {Name: "over", OverPartQOS: true, Zero: []ZeroLimit{gpus0}},
			"eight":  {Name: "eight", PerJob: JobLimits{GPUs: 8}},
			// a bound on CPUs ahead leaves a 0 on GPUs standing
			"cpus":   {Name: "cpus", PerJob: JobLimits{CPUs: 8}},
			"h100":   {Name: "h100", Typed: TypedGPUs{PerJob: map[string]int{"h100": 4}}},
			"noh100": {Name: "noh100", Zero: []ZeroLimit{{Name: "MaxTRESPerJob=gres/gpu:h100=0", GPUType: "h100", PerJob: JobLimits{GPUs: 1}}}},
		},
		Partitions: map[string]Partition{"gpu": {Name: "gpu"}, "shared": {Name: "shared", QOS: "eight"},
			"closed": {Name: "closed", QOS: "none"}, "typed": {Name: "typed", QOS: "h100"}, "cpus": {Name: "cpus", QOS: "cpus"}},
		Associations: []Association{
			{Cluster: "lab", Account: "root"},
			{Cluster: "lab", Account: "physics", Parent: "root", Zero: []ZeroLimit{gpus0}},
		},
	}
	tests := map[string]struct {
		qos, account, partition string
		types                   []string
		want                    string
	}{
		"job QOS":                        {"none", "root", "gpu", nil, "QOS none MaxTRESPerJob=gres/gpu=0"},
		"partition QOS ahead":            {"none", "root", "shared", nil, ""},
		"partition QOS's own":            {"eight", "root", "closed", nil, "QOS none MaxTRESPerJob=gres/gpu=0"},
		"OverPartQOS ahead":              {"over", "root", "shared", nil, "QOS over MaxTRESPerJob=gres/gpu=0"},
		"other bound ahead":              {"none", "root", "cpus", nil, "QOS none MaxTRESPerJob=gres/gpu=0"},
		"association":                    {"normal", "physics", "gpu", nil, "association physics MaxTRESPerJob=gres/gpu=0"},
		"QOS ahead of association":       {"eight", "physics", "gpu", nil, ""},
		"typed":                          {"noh100", "root", "gpu", []string{"h100"}, "QOS noh100 MaxTRESPerJob=gres/gpu:h100=0"},
		"typed, other type":              {"noh100", "root", "gpu", []string{"a100"}, ""},
		"typed, set ahead":               {"noh100", "root", "typed", []string{"h100"}, ""},
		"typed, untyped ahead no matter": {"noh100", "root", "shared", []string{"h100"}, "QOS noh100 MaxTRESPerJob=gres/gpu:h100=0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := Job{Cluster: "lab", QOS: tc.qos, Account: tc.account, User: "ann", GPUTypes: tc.types}
			got, perJob := l.Zero(j, tc.partition)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got != "" && !perJob {
				t.Errorf("Zero %q reads as a group limit, want a per-job one", got)
			}
		})
	}
}

// MinTRESPerJob: each TRES from the first QOS that sets it (the
// partition's QOS, then the job's, as for maxima), a minimum on the one
// GPU type a job asks for counted in its GPUs, and one on a type it does
// not ask for alone unmet at any size (22.05 lab).
func TestLimitsMinPerJob(t *testing.T) {
	l := Limits{
		QOS: map[string]QOS{
			"normal": {Name: "normal"},
			"big":    {Name: "big", Min: JobMins{GPUs: 4, CPUs: 16}},
			"part":   {Name: "part", Min: JobMins{GPUs: 2, Nodes: 2, MemMB: 8192}},
			"h100":   {Name: "h100", Min: JobMins{GPUs: 2, Typed: map[string]int{"h100": 8}}},
			"over":   {Name: "over", OverPartQOS: true, Min: JobMins{GPUs: 8}},
			"few":    {Name: "few", OverPartMinNodes: true, Min: JobMins{CPUs: 4}},
		},
		Partitions: map[string]Partition{"gpu": {Name: "gpu"}, "shared": {Name: "shared", QOS: "part"},
			"wide": {Name: "wide", MinNodesPerJob: 3}, "one": {Name: "one", MinNodesPerJob: 1}},
	}
	type want struct {
		Min       JobMins
		By, Unmet string
	}
	tests := map[string]struct {
		qos, partition string
		types          []string
		want           want
	}{
		"none":              {"normal", "gpu", nil, want{}},
		"job's QOS":         {"big", "gpu", nil, want{JobMins{GPUs: 4, CPUs: 16}, "QOS big MinTRESPerJob", ""}},
		"partition's":       {"normal", "shared", nil, want{JobMins{GPUs: 2, Nodes: 2, MemMB: 8192}, "QOS part MinTRESPerJob", ""}},
		"partition's first": {"big", "shared", nil, want{JobMins{GPUs: 2, Nodes: 2, CPUs: 16, MemMB: 8192}, "QOS part and QOS big MinTRESPerJob", ""}},
		"OverPartQOS":       {"over", "shared", nil, want{JobMins{GPUs: 8, Nodes: 2, MemMB: 8192}, "QOS over and QOS part MinTRESPerJob", ""}},
		"its type":          {"h100", "gpu", []string{"h100"}, want{JobMins{GPUs: 8}, "QOS h100 MinTRESPerJob", ""}},
		"untyped":           {"h100", "gpu", nil, want{JobMins{GPUs: 2}, "QOS h100 MinTRESPerJob", "QOS h100 MinTRESPerJob=gres/gpu:h100=8, and it asks for no h100 GPUs alone"}},
		"another type":      {"h100", "gpu", []string{"a100"}, want{JobMins{GPUs: 2}, "QOS h100 MinTRESPerJob", "QOS h100 MinTRESPerJob=gres/gpu:h100=8, and it asks for no h100 GPUs alone"}},
		"two types":         {"h100", "gpu", []string{"a100", "h100"}, want{JobMins{GPUs: 2}, "QOS h100 MinTRESPerJob", "QOS h100 MinTRESPerJob=gres/gpu:h100=8, and it asks for no h100 GPUs alone"}},
		"unknown QOS":       {"gold", "gpu", nil, want{}},
		// The partition's MinNodes beside the QOS's: Slurm holds a job to
		// both.
		"partition MinNodes": {"normal", "wide", nil, want{JobMins{Nodes: 3}, "partition wide MinNodes", ""}},
		"both":               {"big", "wide", nil, want{JobMins{GPUs: 4, Nodes: 3, CPUs: 16}, "QOS big MinTRESPerJob, partition wide MinNodes", ""}},
		// The PartitionMinNodes flag of the job's QOS lifts it (22.05 lab).
		"PartitionMinNodes": {"few", "wide", nil, want{JobMins{CPUs: 4}, "QOS few MinTRESPerJob", ""}},
		"MinNodes of 1":     {"normal", "one", nil, want{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got want
			got.Min, got.By, got.Unmet = l.MinPerJob(Job{QOS: tc.qos, GPUTypes: tc.types}, tc.partition)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestLimitsGroups(t *testing.T) {
	l := Limits{
		QOS: map[string]QOS{
			"normal": {Name: "normal"},
			"shared": {Name: "shared", Grp: GroupLimits{GPUs: 16}, PerUser: GroupLimits{GPUs: 8, CPUs: 64}, PerAccount: GroupLimits{CPUs: 96}},
			"part":   {Name: "part", Grp: GroupLimits{GPUs: 12, GPURunMins: 600}},
			"budget": {Name: "budget", Budget: Budget{Limit: GroupLimits{GPURunMins: 6000}, Spent: GroupLimits{GPURunMins: 10, CPURunMins: 80}}},
		},
		Partitions: map[string]Partition{"qos": {Name: "qos", QOS: "part"}, "shared": {Name: "shared", QOS: "shared"}},
		Associations: []Association{
			{Cluster: "lab", Account: "root"},
			{Cluster: "lab", Account: "science", Parent: "root", Grp: GroupLimits{GPUs: 32}},
			{Cluster: "lab", Account: "physics", Parent: "science", Grp: GroupLimits{GPUs: 24, CPUs: 200}},
			{Cluster: "lab", Account: "chem", Parent: "science", Budget: Budget{Limit: GroupLimits{CPURunMins: 9000, BillingRunMins: 100}, Spent: GroupLimits{CPURunMins: 8000}}},
			{Cluster: "lab", Account: "physics", User: "ann", Grp: GroupLimits{GPUs: 4}},
			{Cluster: "lab", Account: "physics", User: "ann", Partition: "big", Grp: GroupLimits{GPUs: 2}},
			{Cluster: "other", Account: "physics", User: "bob", Grp: GroupLimits{GPUs: 1}},
			// MaxJobs as listed: the account's on its users too.
			{Cluster: "lab", Account: "bio", Parent: "science", MaxJobs: 5},
			{Cluster: "lab", Account: "bio", User: "eve", MaxJobs: 5},
			{Cluster: "lab", Account: "bio", User: "eve", Partition: "big", MaxJobs: 2, Grp: GroupLimits{Jobs: 3}},
		},
	}
	tests := map[string]struct {
		qos, account, user, partition string
		want                          []Group
	}{
		"QOS": {"shared", "root", "carl", "gpu", []Group{
			{Limit: "QOS shared GrpTRES", GroupLimits: GroupLimits{GPUs: 16}}, {Limit: "QOS shared MaxTRESPerUser (user carl)", GroupLimits: GroupLimits{GPUs: 8, CPUs: 64}},
			{Limit: "QOS shared MaxTRESPerAccount (account root)", GroupLimits: GroupLimits{CPUs: 96}}}},
		"associations": {"normal", "physics", "ann", "gpu", []Group{
			{Limit: "association physics/ann GrpTRES", GroupLimits: GroupLimits{GPUs: 4}}, {Limit: "association physics GrpTRES", GroupLimits: GroupLimits{GPUs: 24, CPUs: 200}},
			{Limit: "association science GrpTRES", GroupLimits: GroupLimits{GPUs: 32}}}},
		// The user's association for the partition, not beside the
		// user's without one: both are the account's children.
		"partition": {"normal", "physics", "ann", "big", []Group{
			{Limit: "association physics/ann/big GrpTRES", GroupLimits: GroupLimits{GPUs: 2}},
			{Limit: "association physics GrpTRES", GroupLimits: GroupLimits{GPUs: 24, CPUs: 200}}, {Limit: "association science GrpTRES", GroupLimits: GroupLimits{GPUs: 32}}}},
		"other cluster": {"normal", "physics", "bob", "gpu", []Group{
			{Limit: "association physics GrpTRES", GroupLimits: GroupLimits{GPUs: 24, CPUs: 200}}, {Limit: "association science GrpTRES", GroupLimits: GroupLimits{GPUs: 32}}}},
		"none": {"normal", "root", "root", "gpu", nil},
		// MaxJobs counts the job's own association's jobs: for the
		// partition, or without one.
		"MaxJobs": {"normal", "bio", "eve", "gpu", []Group{
			{Limit: "association science GrpTRES", GroupLimits: GroupLimits{GPUs: 32}},
			{Limit: "association bio/eve MaxJobs", GroupLimits: GroupLimits{Jobs: 5}}}},
		"MaxJobs, partition": {"normal", "bio", "eve", "big", []Group{
			{Limit: "association bio/eve/big GrpTRES", GroupLimits: GroupLimits{Jobs: 3}},
			{Limit: "association science GrpTRES", GroupLimits: GroupLimits{GPUs: 32}},
			{Limit: "association bio/eve/big MaxJobs", GroupLimits: GroupLimits{Jobs: 2}}}},
		// GrpTRESMins: the limit and what was used, beside the GrpTRES of
		// the same association.
		"budgets": {"budget", "chem", "dan", "gpu", []Group{
			{Limit: "QOS budget GrpTRESMins", GroupLimits: GroupLimits{GPURunMins: 6000}, Budget: true, Spent: GroupLimits{GPURunMins: 10, CPURunMins: 80}},
			{Limit: "association chem GrpTRESMins", GroupLimits: GroupLimits{CPURunMins: 9000, BillingRunMins: 100}, Budget: true, Spent: GroupLimits{CPURunMins: 8000}},
			{Limit: "association science GrpTRES", GroupLimits: GroupLimits{GPUs: 32}}}},
		// Under the same name as a job QOS's, so that the jobs it applies
		// to in either role count together.
		"partition QOS": {"shared", "root", "carl", "qos", []Group{
			{Limit: "QOS part GrpTRES", GroupLimits: GroupLimits{GPUs: 12, GPURunMins: 600}}, {Limit: "QOS shared GrpTRES", GroupLimits: GroupLimits{GPUs: 16}},
			{Limit: "QOS shared MaxTRESPerUser (user carl)", GroupLimits: GroupLimits{GPUs: 8, CPUs: 64}},
			{Limit: "QOS shared MaxTRESPerAccount (account root)", GroupLimits: GroupLimits{CPUs: 96}}}},
		"partition QOS is the job's": {"shared", "root", "carl", "shared", []Group{
			{Limit: "QOS shared GrpTRES", GroupLimits: GroupLimits{GPUs: 16}}, {Limit: "QOS shared MaxTRESPerUser (user carl)", GroupLimits: GroupLimits{GPUs: 8, CPUs: 64}},
			{Limit: "QOS shared MaxTRESPerAccount (account root)", GroupLimits: GroupLimits{CPUs: 96}}}},
	}
	// The same with the associations scanned and looked up by key.
	for _, l := range []Limits{l, l.Indexed()} {
		for name, tc := range tests {
			t.Run(fmt.Sprintf("%s/indexed=%v", name, l.AssocIndex != nil), func(t *testing.T) {
				j := Job{Cluster: "lab", QOS: tc.qos, Account: tc.account, User: tc.user}
				if diff := cmp.Diff(tc.want, l.Groups(j, tc.partition)); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestGroupRunMinsName(t *testing.T) {
	tests := map[string]string{
		"QOS normal GrpTRES":                        "QOS normal GrpTRESRunMins",
		"QOS normal MaxTRESPerUser (user ann)":      "QOS normal MaxTRESRunMinsPU (user ann)",
		"QOS normal MaxTRESPerAccount (account ml)": "QOS normal MaxTRESRunMinsPA (account ml)",
		"association physics/ann GrpTRES":           "association physics/ann GrpTRESRunMins",
	}
	for limit, want := range tests {
		if got := (Group{Limit: limit}).RunMinsName(); got != want {
			t.Errorf("RunMinsName of %q = %q, want %q", limit, got, want)
		}
	}
	if got := (Group{Limit: "QOS normal GrpTRESMins", Budget: true}).RunMinsName(); got != "QOS normal GrpTRESMins" {
		t.Errorf("a budget's RunMinsName = %q, want its own name", got)
	}
}

// Each amount of a group is named by the limit an admin sets it with.
func TestGroupNameOf(t *testing.T) {
	amount := func(what string) GroupAmount {
		for _, a := range (GroupLimits{}).Amounts() {
			if a.What == what {
				return a
			}
		}
		t.Fatalf("no amount %q", what)
		return GroupAmount{}
	}
	gpus, gpuMins, nodeMins, jobs := amount("GPUs"), amount("GPU-minutes"), amount("node-minutes"), amount("running jobs")
	tests := []struct {
		limit  string
		amount GroupAmount
		want   string
	}{
		{"QOS normal GrpTRES", gpus, "QOS normal GrpTRES"},
		{"QOS normal GrpTRES", gpuMins, "QOS normal GrpTRESRunMins"},
		{"QOS normal MaxTRESPerUser (user ann)", nodeMins, "QOS normal MaxTRESRunMinsPU (user ann)"},
		{"QOS normal GrpTRES", jobs, "QOS normal GrpJobs"},
		{"QOS normal MaxTRESPerUser (user ann)", jobs, "QOS normal MaxJobsPerUser (user ann)"},
		{"QOS normal MaxTRESPerAccount (account ml)", jobs, "QOS normal MaxJobsPerAccount (account ml)"},
		{"association physics/ann GrpTRES", jobs, "association physics/ann GrpJobs"},
		{"association physics/ann MaxJobs", jobs, "association physics/ann MaxJobs"},
	}
	for _, tc := range tests {
		if got := (Group{Limit: tc.limit}).NameOf(tc.amount); got != tc.want {
			t.Errorf("NameOf(%s) of %q = %q, want %q", tc.amount.What, tc.limit, got, tc.want)
		}
	}
}

// BenchmarkLimitsLookup: PerJob and Groups for one job on a site of 50,001
// associations (5,000 accounts of 9 users each), as rubickd calls them for
// every job each cycle; scanned, and looked up in AssocIndex.
func BenchmarkLimitsLookup(b *testing.B) {
	var l Limits
	for i := range 5000 {
		account := fmt.Sprintf("account%d", i)
		l.Associations = append(l.Associations, Association{Cluster: "lab", Account: account, Parent: "root"})
		for u := range 9 {
			l.Associations = append(l.Associations, Association{Cluster: "lab", Account: account, User: fmt.Sprintf("user%d", u)})
		}
	}
	l.Associations = append(l.Associations, Association{Cluster: "lab", Account: "root"})
	j := Job{Cluster: "lab", Account: "account4000", User: "user5"}
	for _, l := range []Limits{l, l.Indexed()} {
		b.Run(fmt.Sprintf("indexed=%v", l.AssocIndex != nil), func(b *testing.B) {
			for range b.N {
				_ = l.PerJob(j, "gpu")
				_ = l.Groups(j, "gpu")
			}
		})
	}
}
