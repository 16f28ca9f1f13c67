package slurm

import (
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
		},
		Partitions: map[string]Partition{"small": {Name: "small", MaxNodesPerJob: 1, MaxTime: time.Hour, MaxCPUsPerNode: 16, MaxMemPerNodeMB: 2048},
			"wide":   {Name: "wide", MaxNodesPerJob: 4, MaxTime: 4 * time.Hour},
			"shared": {Name: "shared", QOS: "part"}, "unknown": {Name: "unknown", QOS: "gone"}},
		Associations: []Association{
			{Cluster: "lab", Account: "root"},
			{Cluster: "lab", Account: "science", Parent: "root", PerJob: JobLimits{Nodes: 2, CPUs: 64}},
			{Cluster: "lab", Account: "physics", Parent: "science", PerJob: JobLimits{GPUs: 8, CPUsPerNode: 32, GPUMins: 480}},
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
		"user's":            {"normal", "physics", "ann", "gpu", JobLimits{GPUs: 4, Nodes: 2, CPUs: 64, CPUsPerNode: 32, Wall: 2 * time.Hour, GPUMins: 480, CPUMins: 1000}},
		"user's, partition": {"normal", "physics", "ann", "big", JobLimits{GPUs: 16, Nodes: 2, CPUs: 64, CPUsPerNode: 32, Wall: 2 * time.Hour, GPUMins: 480, CPUMins: 1000}},
		"QOS first":         {"small", "physics", "ann", "big", JobLimits{GPUs: 2, Nodes: 2, CPUs: 64, GPUsPerNode: 1, CPUsPerNode: 32, MemMBPerNode: 4096, Wall: 3 * time.Hour, GPUMins: 120, CPUMins: 1000}},
		"account's":         {"normal", "physics", "carl", "gpu", JobLimits{GPUs: 8, Nodes: 2, CPUs: 64, CPUsPerNode: 32, GPUMins: 480}},
		"other cluster":     {"normal", "physics", "bob", "gpu", JobLimits{GPUs: 8, Nodes: 2, CPUs: 64, CPUsPerNode: 32, GPUMins: 480}},
		"none":              {"normal", "root", "root", "gpu", JobLimits{}},
		"unknown":           {"gold", "nowhere", "x", "gpu", JobLimits{}},
		"parent cycle":      {"normal", "loop", "x", "gpu", JobLimits{CPUs: 9}},
		"partition":         {"normal", "physics", "carl", "small", JobLimits{GPUs: 8, Nodes: 1, CPUs: 64, CPUsPerNode: 16, MemMBPerNode: 2048, Wall: time.Hour, GPUMins: 480}},
		"partition above":   {"normal", "physics", "carl", "wide", JobLimits{GPUs: 8, Nodes: 2, CPUs: 64, CPUsPerNode: 32, Wall: 4 * time.Hour, GPUMins: 480}},
		"partition alone":   {"normal", "root", "root", "small", JobLimits{Nodes: 1, CPUsPerNode: 16, MemMBPerNode: 2048, Wall: time.Hour}},
		"partition's time":  {"small", "physics", "ann", "small", JobLimits{GPUs: 2, Nodes: 1, CPUs: 64, GPUsPerNode: 1, CPUsPerNode: 16, MemMBPerNode: 2048, Wall: time.Hour, GPUMins: 120, CPUMins: 1000}},
		// The partition's QOS first, then the job's, unless that has
		// OverPartQOS; a partition QOS slurmdbd does not list sets nothing.
		"partition QOS":         {"normal", "physics", "ann", "shared", JobLimits{GPUs: 3, Nodes: 2, CPUs: 64, CPUsPerNode: 32, Wall: 30 * time.Minute, GPUMins: 480, CPUMins: 1000}},
		"over job QOS":          {"small", "physics", "ann", "shared", JobLimits{GPUs: 3, Nodes: 2, CPUs: 64, GPUsPerNode: 1, CPUsPerNode: 32, MemMBPerNode: 4096, Wall: 30 * time.Minute, GPUMins: 120, CPUMins: 1000}},
		"OverPartQOS":           {"over", "physics", "carl", "shared", JobLimits{GPUs: 6, Nodes: 2, CPUs: 64, CPUsPerNode: 32, Wall: 30 * time.Minute, GPUMins: 480}},
		"same QOS":              {"part", "physics", "carl", "shared", JobLimits{GPUs: 3, Nodes: 2, CPUs: 64, CPUsPerNode: 32, Wall: 30 * time.Minute, GPUMins: 480}},
		"unknown partition QOS": {"normal", "physics", "carl", "unknown", JobLimits{GPUs: 8, Nodes: 2, CPUs: 64, CPUsPerNode: 32, GPUMins: 480}},
		"QOS's time":            {"small", "physics", "ann", "wide", JobLimits{GPUs: 2, Nodes: 2, CPUs: 64, GPUsPerNode: 1, CPUsPerNode: 32, MemMBPerNode: 4096, Wall: 3 * time.Hour, GPUMins: 120, CPUMins: 1000}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := Job{Cluster: "lab", QOS: tc.qos, Account: tc.account, User: tc.user}
			if diff := cmp.Diff(tc.want, l.PerJob(j, tc.partition)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
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
		},
		Partitions: map[string]Partition{"qos": {Name: "qos", QOS: "part"}, "shared": {Name: "shared", QOS: "shared"}},
		Associations: []Association{
			{Cluster: "lab", Account: "root"},
			{Cluster: "lab", Account: "science", Parent: "root", Grp: GroupLimits{GPUs: 32}},
			{Cluster: "lab", Account: "physics", Parent: "science", Grp: GroupLimits{GPUs: 24, CPUs: 200}},
			{Cluster: "lab", Account: "physics", User: "ann", Grp: GroupLimits{GPUs: 4}},
			{Cluster: "lab", Account: "physics", User: "ann", Partition: "big", Grp: GroupLimits{GPUs: 2}},
			{Cluster: "other", Account: "physics", User: "bob", Grp: GroupLimits{GPUs: 1}},
		},
	}
	tests := map[string]struct {
		qos, account, user, partition string
		want                          []Group
	}{
		"QOS": {"shared", "root", "carl", "gpu", []Group{
			{"QOS shared GrpTRES", GroupLimits{GPUs: 16}}, {"QOS shared MaxTRESPerUser (user carl)", GroupLimits{GPUs: 8, CPUs: 64}},
			{"QOS shared MaxTRESPerAccount (account root)", GroupLimits{CPUs: 96}}}},
		"associations": {"normal", "physics", "ann", "gpu", []Group{
			{"association physics/ann GrpTRES", GroupLimits{GPUs: 4}}, {"association physics GrpTRES", GroupLimits{GPUs: 24, CPUs: 200}},
			{"association science GrpTRES", GroupLimits{GPUs: 32}}}},
		"partition": {"normal", "physics", "ann", "big", []Group{
			{"association physics/ann/big GrpTRES", GroupLimits{GPUs: 2}}, {"association physics/ann GrpTRES", GroupLimits{GPUs: 4}},
			{"association physics GrpTRES", GroupLimits{GPUs: 24, CPUs: 200}}, {"association science GrpTRES", GroupLimits{GPUs: 32}}}},
		"other cluster": {"normal", "physics", "bob", "gpu", []Group{
			{"association physics GrpTRES", GroupLimits{GPUs: 24, CPUs: 200}}, {"association science GrpTRES", GroupLimits{GPUs: 32}}}},
		"none": {"normal", "root", "root", "gpu", nil},
		// Under the same name as a job QOS's, so that the jobs it applies
		// to in either role count together.
		"partition QOS": {"shared", "root", "carl", "qos", []Group{
			{"QOS part GrpTRES", GroupLimits{GPUs: 12, GPURunMins: 600}}, {"QOS shared GrpTRES", GroupLimits{GPUs: 16}},
			{"QOS shared MaxTRESPerUser (user carl)", GroupLimits{GPUs: 8, CPUs: 64}},
			{"QOS shared MaxTRESPerAccount (account root)", GroupLimits{CPUs: 96}}}},
		"partition QOS is the job's": {"shared", "root", "carl", "shared", []Group{
			{"QOS shared GrpTRES", GroupLimits{GPUs: 16}}, {"QOS shared MaxTRESPerUser (user carl)", GroupLimits{GPUs: 8, CPUs: 64}},
			{"QOS shared MaxTRESPerAccount (account root)", GroupLimits{CPUs: 96}}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := Job{Cluster: "lab", QOS: tc.qos, Account: tc.account, User: tc.user}
			if diff := cmp.Diff(tc.want, l.Groups(j, tc.partition)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
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
}
