//go:build e2e

package e2e

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// TestSlurmLimit: 4 GPUs per job, set on the QOS, on root's association or
// on the partition's QOS,
// or 4 GPUs (16 CPUs, 64 GB) for all the QOS's jobs together, or 64 GB per
// job (the job's 32 GB per node: 2 nodes at most), or 4 GPUs or 48 GB per
// node (with 16 GB per GPU: 3 GPUs), or 40 GPU-minutes of running jobs or
// per job (4 GPUs for the job's 10 minutes), or a billing of 12 (or 120
// billing-minutes) for the QOS's jobs together (without
// TRESBillingWeights Slurm bills CPUs), or 12 on each node, or 400,000
// MB-minutes of memory (40,000 MB for the job's 10 minutes). On
// the idle lab rubick grows a roberta job asking for 2 GPUs to a whole node
// (it trains 3x faster on 8 than on 2). rubickd reads these limits from
// slurmdbd and plans the job within them at once. A limit set after its
// last listing it learns from Slurm: Slurm holds the job back
// (QOSGrpGRES), rubickd plans it within its request, records the limit in
// its tag, and the job runs to completion.
func TestSlurmLimit(t *testing.T) {
	tests := []limitCase{
		{"QOS", []string{"qos", "normal", "set", "MaxTRESPerJob=gres/gpu="}, "4", "", bounds{gpus: 4}, "", "", ""},
		{"association", []string{"user", "root", "set", "MaxTRESPerJob=gres/gpu="}, "4", "", bounds{gpus: 4}, "", "", ""},
		{"group", []string{"qos", "normal", "set", "GrpTRES=gres/gpu="}, "4", "", bounds{gpus: 4}, "", "", ""},
		// Slurm itself lets root's NumCPUs= update past this one: before
		// rubick read it, the job ran on 8 GPUs with 32 CPUs.
		{"group CPUs", []string{"qos", "normal", "set", "GrpTRES=cpu="}, "16", "", bounds{gpus: 8, cpus: 16}, "", "", ""},
		// And its MinMemoryNode= update past these: before rubick read
		// them, the job ran on 8 GPUs with 144 GB.
		{"group memory", []string{"qos", "normal", "set", "GrpTRES=mem="}, "64G", "", bounds{gpus: 16, nodes: 2, mem: 64 << 10}, "", "", ""},
		{"memory per job", []string{"qos", "normal", "set", "MaxTRESPerJob=mem="}, "64G", "", bounds{gpus: 16, nodes: 2, mem: 64 << 10}, "", "", ""},
		// 16 GB per GPU: 3 GPUs on a node at most.
		{"memory per node", []string{"qos", "normal", "set", "MaxTRESPerNode=mem="}, "48G", "", bounds{gpus: 6, nodes: 2, perNode: 3, mem: 96 << 10},
			"--mem-per-gpu=16G", "", ""},
		// Before rubick read it, Slurm held the job back
		// (QOSMaxGRESPerNode) and rubick gave it its request.
		{"per node", []string{"qos", "normal", "set", "MaxTRESPerNode=gres/gpu="}, "4", "", bounds{gpus: 8, nodes: 2, perNode: 4}, "", "", ""},
		// Before rubick read them, Slurm held the job back
		// (QOSGrpGRESRunMinutes): at 8 GPUs its 10 minutes are 80
		// GPU-minutes. rubick then gave it its request.
		{"run minutes", []string{"qos", "normal", "set", "GrpTRESRunMins=gres/gpu="}, "40", "", bounds{gpus: 4}, "", "", ""},
		{"minutes per job", []string{"qos", "normal", "set", "MaxTRESMinsPerJob=gres/gpu="}, "40", "", bounds{gpus: 4}, "", "", ""},
		// Before rubick read it, Slurm held the job grown to 32 CPUs back
		// (QOSGrpBilling), and rubick gave it its request.
		{"billing", []string{"qos", "normal", "set", "GrpTRES=billing="}, "12", "", bounds{gpus: 8, cpus: 12}, "", "", ""},
		// 120 billing-minutes for its 10 minutes: a bill of 12, its CPUs.
		// Before rubick read them, Slurm held the job grown to 32 CPUs
		// back (QOSGrpBillingRunMinutes), and rubick gave it its request.
		{"billing minutes", []string{"qos", "normal", "set", "GrpTRESRunMins=billing="}, "120", "", bounds{gpus: 8, cpus: 12}, "", "", ""},
		// Before rubick read it, Slurm held the job grown to 32 CPUs back
		// (QOSMaxBillingPerNode), and rubick gave it its request.
		{"billing per node", []string{"qos", "normal", "set", "MaxTRESPerNode=billing="}, "12", "", bounds{gpus: 16, nodes: 2, cpusPerNode: 12}, "", "", ""},
		// 40,000 MB for its 10 minutes: one node of the 32 GB it asked
		// for. Before rubick read them, it grew the job to 8 GPUs, 32 CPUs
		// and 144 GB, Slurm held it back (QOSGrpMemoryRunMinutes, or
		// QOSMaxMemoryMinutesPerJob), and rubick gave it its request.
		{"memory minutes", []string{"qos", "normal", "set", "GrpTRESRunMins=mem="}, "400000", "", bounds{gpus: 8, mem: 32 << 10}, "", "", ""},
		{"memory minutes per job", []string{"qos", "normal", "set", "MaxTRESMinsPerJob=mem="}, "400000", "", bounds{gpus: 8, mem: 32 << 10}, "", "", ""},
		// The partition's: before rubick read them, the job was sized
		// past them and Slurm held it back, with BadConstraints for the
		// CPUs (a reason that names no limit) and MaxMemPerLimit.
		{"partition CPUs per node", []string{"scontrol", "update", "PartitionName=gpu", "MaxCPUsPerNode="}, "16", "",
			bounds{gpus: 16, nodes: 2, cpusPerNode: 16}, "", "", "UNLIMITED"},
		{"partition memory per node", []string{"scontrol", "update", "PartitionName=gpu", "MaxMemPerNode="}, "48000", "",
			bounds{gpus: 4, nodes: 2, perNode: 2, mem: 96000}, "--mem-per-gpu=16G", "", "0"},
		// Limits on one GPU type, for a job asking for that type (the lab
		// tracks gres/gpu:h100): before rubick read them, Slurm held the
		// job grown to 8 GPUs back (QOSGrpGRES, QOSMaxGRESPerJob,
		// QOSGrpGRESRunMinutes), and rubick gave it its request.
		{"typed GPUs", []string{"qos", "normal", "set", "GrpTRES=gres/gpu:h100="}, "4", "", bounds{gpus: 4}, "", "--gres=gpu:h100:2", ""},
		{"typed GPUs per job", []string{"qos", "normal", "set", "MaxTRESPerJob=gres/gpu:h100="}, "4", "", bounds{gpus: 4}, "", "--gres=gpu:h100:2", ""},
		{"typed GPU minutes", []string{"qos", "normal", "set", "GrpTRESRunMins=gres/gpu:h100="}, "40", "", bounds{gpus: 4}, "", "--gres=gpu:h100:2", ""},
		// A budget of h100 GPU-minutes (read from slurmctld; the 22.05
		// lab's priority/basic counts no usage, so Slurm itself would
		// have let the job grown to 8 GPUs run).
		{"typed GPU budget", []string{"qos", "normal", "set", "GrpTRESMins=gres/gpu:h100="}, "40", "", bounds{gpus: 4}, "", "--gres=gpu:h100:2", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { slurmLimit(t, tc, false) })
	}
	// Set once rubickd has read the limits: it grows the job to 8 GPUs,
	// Slurm holds it back, and rubick gives it its request.
	t.Run("set after the listing", func(t *testing.T) {
		slurmLimit(t, limitCase{set: []string{"qos", "normal", "set", "GrpTRES=gres/gpu="}, value: "4", limit: "QOSGrpGRES",
			want: bounds{gpus: 2, cpus: 8}}, true)
	})
	// The partition's QOS applies ahead of the job's (normal): before
	// rubick read it, Slurm held the job back (QOSMaxGRESPerJob) and
	// rubick gave it its request.
	t.Run("partition QOS", func(t *testing.T) {
		l := labFromEnv(t)
		l.run(t, "sacctmgr", "-i", "add", "qos", "gpupart")
		t.Cleanup(func() { l.run(t, "sacctmgr", "-i", "delete", "qos", "gpupart") })
		l.run(t, "scontrol", "update", "PartitionName=gpu", "QOS=gpupart")
		t.Cleanup(func() { l.run(t, "scontrol", "update", "PartitionName=gpu", "QOS=") })
		slurmLimit(t, limitCase{set: []string{"qos", "gpupart", "set", "MaxTRESPerJob=gres/gpu="}, value: "4", want: bounds{gpus: 4}}, false)
	})
	// Node-minutes: 10 for its 10 minutes are one node. With 16 GB per
	// GPU and 48 GB per node (MaxTRESPerNode=mem=48G) rubick spreads the
	// job over 2 nodes, as in the memory-per-node case; under
	// GrpTRESRunMins=node=10 (or MaxTRESMinsPerJob=node=10) it keeps to
	// one, with 3 GPUs.
	for _, nm := range []struct{ name, set string }{{"node minutes", "GrpTRESRunMins=node="}, {"node minutes per job", "MaxTRESMinsPerJob=node="}} {
		t.Run(nm.name, func(t *testing.T) {
			l := labFromEnv(t)
			l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "MaxTRESPerNode=mem=48G")
			t.Cleanup(func() { l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "MaxTRESPerNode=mem=-1") })
			slurmLimit(t, limitCase{set: []string{"qos", "normal", "set", nm.set}, value: "10", want: bounds{gpus: 3, perNode: 3},
				mem: "--mem-per-gpu=16G"}, false)
		})
	}
	// The partition's MaxNodes=1 beside 2 GPUs per node
	// (MaxTRESPerNode): a QOS with the PartitionMaxNodes flag lets its
	// jobs past the former, so rubick spreads the job over 2 nodes or
	// more (with the flag unread, it ran on 2 GPUs of one node).
	t.Run("PartitionMaxNodes", func(t *testing.T) {
		l := labFromEnv(t)
		l.run(t, "scontrol", "update", "PartitionName=gpu", "MaxNodes=1")
		t.Cleanup(func() { l.run(t, "scontrol", "update", "PartitionName=gpu", "MaxNodes=UNLIMITED") })
		l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "MaxTRESPerNode=gres/gpu=2")
		t.Cleanup(func() { l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "MaxTRESPerNode=gres/gpu=-1") })
		j := slurmLimit(t, limitCase{set: []string{"qos", "normal", "set", "Flags="}, value: "PartitionMaxNodes", want: bounds{gpus: 8, nodes: 4, perNode: 2},
			reset: "-1"}, false)
		if len(j.NodeList) < 2 {
			t.Errorf("job %d ran on %v; want 2 nodes or more past the partition's MaxNodes=1", j.ID, j.NodeList)
		}
	})
	// With weights the request bills 2x2 + 8x0.5 + 32x0.25 = 16. Its
	// node's 32 GB bill 8 whatever it runs, and the other 32 of 40 are 4
	// times its 2 GPUs and 8 CPUs: 8 GPUs, 32 CPUs and 32 GB at most.
	// Before rubick read them, it grew the job to 8 GPUs, 32 CPUs and 144
	// GB, which bill 68, and Slurm held it back (QOSGrpBilling).
	t.Run("billing weights", func(t *testing.T) {
		l := labFromEnv(t)
		l.run(t, "scontrol", "update", "PartitionName=gpu", "TRESBillingWeights=CPU=0.5,Mem=0.25G,GRES/gpu=2.0")
		t.Cleanup(func() { l.run(t, "scontrol", "update", "PartitionName=gpu", "TRESBillingWeights=") })
		slurmLimit(t, limitCase{set: []string{"qos", "normal", "set", "GrpTRES=billing="}, value: "40", want: bounds{gpus: 8, cpus: 32, mem: 32 << 10}}, false)
	})
}

// bounds is what a job may run on: at most gpus GPUs (perNode on one
// node, 0: any), on nodes nodes (0: one), cpus CPUs (cpusPerNode on one
// node) and mem MB (0: any).
type bounds struct {
	gpus, nodes, perNode, cpus, cpusPerNode int
	mem                                     int64
}

// limitCase is one limit TestSlurmLimit sets, and what the job may run on
// under it.
type limitCase struct {
	name  string
	set   []string // sacctmgr -i modify ... set (or a whole scontrol line), then the limit
	value string
	limit string // the reason Slurm holds the job back for; "" for none
	want  bounds
	mem   string // the job's memory request; "" for --mem=32G
	gres  string // its GPU request; "" for --gres=gpu:2
	reset string // the value that lifts the limit; "" for -1
}

// slurmLimit runs one limitCase; afterListing sets the limit once rubickd
// has read the limits (at its first cycle; the next listing is a minute
// later), not before it starts.
func slurmLimit(t *testing.T, tc limitCase, afterListing bool) slurm.Job {
	lt := newLabTest(t, "limit", 3*time.Minute, "log_level: debug\n")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster
	set, limit, want := tc.set, tc.limit, tc.want

	cmd := slices.Clone(set[:len(set)-1])
	if cmd[0] != "scontrol" {
		cmd = append([]string{"sacctmgr", "-i", "modify"}, cmd...)
	}
	setLimit := func() {
		l.run(t, append(cmd, set[len(set)-1]+tc.value)...)
		t.Cleanup(func() { l.run(t, append(cmd, set[len(set)-1]+cmp.Or(tc.reset, "-1"))...) })
	}
	if !afterListing {
		setLimit()
	}
	d := runDaemon(t, l, bin, dir, cfgPath)
	if afterListing {
		// The first cycle follows "rubickd running" at once, and cycles
		// come every 2 s on the lab.
		if deadline, ok := ctx.Deadline(); ok {
			d.waitLog(`"msg":"rubickd running"`, time.Until(deadline))
		}
		time.Sleep(3 * time.Second)
		setLimit()
	}

	body := shortTraining(bin, dir, "roberta", 64)
	id := l.submitScript(t, dir, body, &lt.ids, "--model-type=roberta", "-p", "gpu", "-J", "e2e-limit", "-N", "1",
		"--qos=normal", "--ntasks-per-node=1", cmp.Or(tc.gres, "--gres=gpu:2"), "--cpus-per-task=8", cmp.Or(tc.mem, "--mem=32G"), "--time=10", "--requeue")

	var (
		j   slurm.Job
		err error
	)
	heldFor := map[string]bool{} // the reasons it was seen pending for
	for ctx.Err() == nil {
		if j, err = cluster.Job(ctx, id); err == nil {
			if j.State == slurm.StatePending {
				heldFor[j.Reason] = true
			}
			if j.Ended() {
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	jobOut, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("job-%d.out", id)))
	if j.State != slurm.StateCompleted {
		t.Fatalf("job %d ended %s (%s), want COMPLETED; rubickd log %s; job output:\n%s", id, j.State, j.Reason, d.log, jobOut)
	}
	for reason := range heldFor {
		if slurm.SizeLimitReason(reason) && reason != limit {
			t.Errorf("job %d was held back for %s, want %q only (rubickd log %s)", id, reason, limit, d.log)
		}
	}
	if j.Tag == nil || j.Tag.Plan == "" || j.Tag.Extra["lim"] != limit {
		t.Errorf("job %d tag %+v, want a plan and lim=%q (pending for %v); rubickd log %s", id, j.Tag, limit, heldFor, d.log)
	}
	t.Logf("job %d ran on %v: %d GPUs, %d CPUs, %d MB (tag %v), pending for %v", id, j.NodeList, j.GPUs, j.CPUs, j.MemMB, j.Tag, heldFor)
	if len(j.NodeList) > max(want.nodes, 1) || j.GPUs > want.gpus || (want.perNode > 0 && j.GPUsPerNode > want.perNode) ||
		(want.cpus > 0 && j.CPUs > want.cpus) || (want.cpusPerNode > 0 && j.CPUs > want.cpusPerNode*max(len(j.NodeList), 1)) ||
		(want.mem > 0 && j.MemMB > want.mem) {
		t.Errorf("job %d ran on %v with %d GPUs (%d per node), %d CPUs, %d MB; want no more than %+v",
			id, j.NodeList, j.GPUs, j.GPUsPerNode, j.CPUs, j.MemMB, want)
	}
	return j
}

// TestQOSMinimum: the QOS lets no job run on fewer than 2 nodes, or 12
// GPUs (MinTRESPerJob=node=2, gres/gpu=12), or the partition on fewer
// than 2 nodes (MinNodes=2). On the idle lab rubick grows a roberta job
// asking for 2 GPUs on one node to a whole node; under the minimum it
// starts the job on 2 nodes (12 GPUs or more) at once, and Slurm never
// holds it back (root's resize is held below a minimum: QOSMinNode,
// QOSMinGRES, PartitionNodeLimit).
func TestQOSMinimum(t *testing.T) {
	for _, tc := range []struct {
		set         []string
		value       string
		nodes, gpus int
	}{
		{[]string{"qos", "normal", "set", "MinTRESPerJob=node="}, "2", 2, 2},
		{[]string{"qos", "normal", "set", "MinTRESPerJob=gres/gpu="}, "12", 2, 12},
		// Before 22.05's partitions were read under the key its
		// slurmrestd writes, Slurm held the job rubick sized to one node
		// back (PartitionNodeLimit), and its request was one node too.
		{[]string{"scontrol", "update", "PartitionName=gpu", "MinNodes="}, "2", 2, 2},
	} {
		t.Run(tc.set[len(tc.set)-1], func(t *testing.T) {
			j := slurmLimit(t, limitCase{set: tc.set, value: tc.value, want: bounds{gpus: 32, nodes: 4}, reset: map[bool]string{true: "0"}[tc.set[0] == "scontrol"]}, false)
			if len(j.NodeList) < tc.nodes || j.GPUs < tc.gpus {
				t.Errorf("job %d ran on %v with %d GPUs; want at least %d nodes and %d GPUs", j.ID, j.NodeList, j.GPUs, tc.nodes, tc.gpus)
			}
		})
	}
}

// TestTimeLimitStretched: a roberta job asks for 4 GPUs and 10 minutes
// under a QOS allowing 2 GPUs and 15 minutes per job. rubick runs it on 2
// GPUs, about half as fast as its request, so it scales the limit (10 min
// x the predicted slowdown x 1.25) up to the QOS's 15, keeps the user's 10
// in the tag, and the job completes. The partition's MaxTime of 12 caps it
// at 12, unless the QOS has the PartitionTimeLimit flag, which lets its
// jobs past the partition's MaxTime. A --deadline 13 minutes away caps it
// at 12 whole minutes: before rubick read the deadline, it set 15, and
// Slurm ended the job at its release (DEADLINE).
func TestTimeLimitStretched(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxTime  string // the partition's MaxTime
		flags    string // the QOS's
		deadline string // the job's --deadline; "" for none
		want     time.Duration
	}{
		{"QOS", "UNLIMITED", "-1", "", 15 * time.Minute},
		{"partition", "12", "-1", "", 12 * time.Minute},
		{"PartitionTimeLimit", "12", "PartitionTimeLimit", "", 15 * time.Minute},
		{"deadline", "UNLIMITED", "-1", "now+13minutes", 12 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) { timeLimitStretched(t, tc.maxTime, tc.flags, tc.deadline, tc.want) })
	}
}

// timeLimitStretched runs a TestTimeLimitStretched case.
func timeLimitStretched(t *testing.T, maxTime, flags, deadline string, want time.Duration) {
	lt := newLabTest(t, "timelimit", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "MaxTRESPerJob=gres/gpu=2", "MaxWall=15", "Flags="+flags)
	defer l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "MaxTRESPerJob=gres/gpu=-1", "MaxWall=-1", "Flags=-1")
	l.run(t, "scontrol", "update", "PartitionName=gpu", "MaxTime="+maxTime)
	defer l.run(t, "scontrol", "update", "PartitionName=gpu", "MaxTime=UNLIMITED")

	d := runDaemon(t, l, bin, dir, cfgPath)
	args := []string{"--model-type=roberta", "-p", "gpu", "-J", "e2e-timelimit", "-N", "1", "--qos=normal", "--ntasks-per-node=1",
		"--gres=gpu:4", "--cpus-per-task=8", "--mem=32G", "--time=10", "--requeue"}
	if deadline != "" {
		args = append(args, "--deadline="+deadline)
	}
	id := l.submitScript(t, dir, shortTraining(bin, dir, "roberta", 64), &lt.ids, args...)
	j, _ := waitEnded(ctx, cluster, id)
	limit := j.TimeLimit
	if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" {
		t.Fatalf("job %d ended %s (%s), tag %v; want COMPLETED on a plan rubickd chose; rubickd log %s", id, j.State, j.Reason, j.Tag, d.log)
	}
	t.Logf("job %d ran on %d GPUs with a %v limit, tag %v", id, j.GPUs, limit, j.Tag)
	if j.GPUs > 2 || limit != want || j.Tag.Extra["tl"] != "10" {
		t.Errorf("job %d ran on %d GPUs with a %v limit, tag %v; want 2 GPUs at most, a %v limit and tl=10; rubickd log %s",
			id, j.GPUs, limit, j.Tag, want, d.log)
	}
}

// TestGroupLimit: the QOS allows its jobs 4 GPUs together, and a job
// without a model type holds all 4 for 8 s. Two roberta jobs asking for 2
// GPUs each stay held meanwhile (rubick explain: group-limit), then run
// within the 4 together: never more, and never held back by Slurm
// (before rubick read group limits, it grew a job to 8 GPUs, Slurm held it
// back with QOSGrpGRES and rubick pinned it to its request).
func TestGroupLimit(t *testing.T) {
	lt := newLabTest(t, "group", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "GrpTRES=gres/gpu=4")
	defer l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "GrpTRES=gres/gpu=-1")

	filler := l.submitScript(t, dir, "#!/bin/bash\nsleep 8\n", &lt.ids, "-p", "gpu", "-J", "e2e-group-filler", "--qos=normal",
		"-N", "1", "--gres=gpu:4", "--cpus-per-task=4")
	for ctx.Err() == nil {
		if j, err := cluster.Job(ctx, filler); err == nil && j.State == slurm.StateRunning {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	d := runDaemon(t, l, bin, dir, cfgPath)
	var ids []int
	for range 2 {
		ids = append(ids, l.submitScript(t, dir, shortTraining(bin, dir, "roberta", 64), &lt.ids, "--model-type=roberta", "-p", "gpu",
			"-J", "e2e-group", "--qos=normal", "-N", "1", "--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue"))
	}
	var (
		fillerEnd  time.Time
		firstStart time.Time
		most       int                 // GPUs the QOS's jobs were seen holding together
		reasons    = map[string]bool{} // reasons the rubick jobs were seen pending for
	)
	for ctx.Err() == nil {
		ended, gpus := 0, 0
		for _, id := range append([]int{filler}, ids...) {
			j, err := cluster.Job(ctx, id)
			if err != nil {
				continue
			}
			if j.State == slurm.StateRunning {
				gpus += j.GPUs
				if id != filler && firstStart.IsZero() {
					firstStart = time.Now()
				}
			}
			if j.State == slurm.StatePending && id != filler {
				reasons[j.Reason] = true
			}
			if j.Ended() {
				ended++
				if id == filler && fillerEnd.IsZero() {
					fillerEnd = time.Now()
				}
			}
		}
		most = max(most, gpus)
		if ended == 3 {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	for _, id := range ids {
		j, err := cluster.Job(ctx, id)
		if err != nil || j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" || j.Tag.Extra["lim"] != "" {
			t.Errorf("job %d ended %s (%s), tag %v, %v; want COMPLETED on a plan, no lim; rubickd log %s", id, j.State, j.Reason, j.Tag, err, d.log)
		}
	}
	t.Logf("QOS jobs held %d GPUs together at most; rubick jobs pending for %v; first started %v after the filler ended",
		most, reasons, firstStart.Sub(fillerEnd).Round(100*time.Millisecond))
	if most > 4 || firstStart.Before(fillerEnd) {
		t.Errorf("the QOS's jobs held %d GPUs together (want 4 at most); a rubick job started at %v, the filler ended at %v; rubickd log %s",
			most, firstStart, fillerEnd, d.log)
	}
	for r := range reasons {
		if slurm.SizeLimitReason(r) {
			t.Errorf("a rubick job was held back for %s; rubickd log %s", r, d.log)
		}
	}
	out := l.run(t, filepath.Join(bin, "rubick"), "explain", "--store", lt.dbPath, "--reasons", "200", strconv.Itoa(ids[0]))
	if !strings.Contains(out, "group-limit") {
		t.Errorf("rubick explain %d does not say it waited for the group limit:\n%s", ids[0], out)
	}
}

// TestGroupNodeLimit: the QOS allows its jobs one node together, and a job
// without a model type holds 6 GPUs of node3. Slurm counts node3 once
// however many of the QOS's jobs share it, so rubick starts a roberta job
// asking for 2 GPUs there beside it, on the 2 GPUs left, never on another
// node, and Slurm never holds it back (with node limits unread, rubick grew
// the job to 8 GPUs on an idle node, Slurm held it back with
// QOSGrpNodeLimit, and rubick gave it its request). With two nodes
// allowed and 2 GPUs per node (MaxTRESPerNode), rubick spreads the job
// over node3 and one more node, 2 GPUs on each: node3 costs the group
// nothing.
func TestGroupNodeLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		set        []string // on QOS normal
		fillerGPUs int      // of node3
		nodes      int      // the job runs on node3 and nodes-1 others
		gpus       int      // at most, and at least when nodes > 1
	}{
		{"full", []string{"GrpTRES=node=1"}, 6, 1, 2},
		{"room beside", []string{"GrpTRES=node=2", "MaxTRESPerNode=gres/gpu=2"}, 2, 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) { groupNodeLimit(t, tc.set, tc.fillerGPUs, tc.nodes, tc.gpus) })
	}
}

// groupNodeLimit runs a TestGroupNodeLimit case.
func groupNodeLimit(t *testing.T, set []string, fillerGPUs, nodes, gpus int) {
	lt := newLabTest(t, "group-nodes", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	for _, limit := range set {
		l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", limit)
		name, _, _ := strings.Cut(limit, "=")
		what, _, _ := strings.Cut(strings.TrimPrefix(limit, name+"="), "=")
		t.Cleanup(func() { l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", name+"="+what+"=-1") })
	}

	filler := l.submitScript(t, dir, "#!/bin/bash\nsleep 30\n", &lt.ids, "-p", "gpu", "-J", "e2e-nodes-filler", "--qos=normal",
		"-w", "node3", "-N", "1", fmt.Sprintf("--gres=gpu:%d", fillerGPUs), "--cpus-per-task=4", "--mem=8G")
	for ctx.Err() == nil {
		if j, err := cluster.Job(ctx, filler); err == nil && j.State == slurm.StateRunning {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	d := runDaemon(t, l, bin, dir, cfgPath)
	id := l.submitScript(t, dir, shortTraining(bin, dir, "roberta", 64), &lt.ids, "--model-type=roberta", "-p", "gpu",
		"-J", "e2e-nodes", "--qos=normal", "-N", "1", "--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue")
	reasons := map[string]bool{}
	var j slurm.Job
	ran := map[string]bool{}
	for ctx.Err() == nil {
		var err error
		if j, err = cluster.Job(ctx, id); err == nil {
			switch {
			case j.State == slurm.StatePending:
				reasons[j.Reason] = true
			case j.State == slurm.StateRunning:
				for _, n := range j.NodeList {
					ran[n] = true
				}
			}
			if j.Ended() {
				break
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("job %d ran on %v with %d GPUs; pending for %v", id, ran, j.GPUs, reasons)
	if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" || j.Tag.Extra["lim"] != "" {
		t.Errorf("job %d ended %s (%s), tag %v; want COMPLETED on a plan, no lim; rubickd log %s", id, j.State, j.Reason, j.Tag, d.log)
	}
	if len(ran) != nodes || !ran["node3"] || j.GPUs > gpus || nodes > 1 && j.GPUs < gpus {
		t.Errorf("job %d ran on %v with %d GPUs, want node3 and %d other nodes, %d GPUs (at most with one node); rubickd log %s",
			id, ran, j.GPUs, nodes-1, gpus, d.log)
	}
	for r := range reasons {
		if slurm.SizeLimitReason(r) {
			t.Errorf("job %d was held back for %s; rubickd log %s", id, r, d.log)
		}
	}
}

// TestJobCountLimit: the QOS lets each user run one job at a time
// (MaxJobsPU=1). Of two roberta jobs asking for 2 GPUs each, rubick starts
// one and keeps the other held until it ends (rubick explain:
// group-limit, naming MaxJobsPerUser), so Slurm never holds a released
// job back for the count (with job counts unread, rubick released both
// and Slurm kept the second pending with QOSMaxJobsPerUserLimit on what
// rubick had sized it to). Both complete.
func TestJobCountLimit(t *testing.T) {
	lt := newLabTest(t, "job-count", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "MaxJobsPU=1")
	t.Cleanup(func() { l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "MaxJobsPU=-1") })

	d := runDaemon(t, l, bin, dir, cfgPath)
	var ids []int
	for range 2 {
		ids = append(ids, l.submitScript(t, dir, shortTraining(bin, dir, "roberta", 64), &lt.ids, "--model-type=roberta", "-p", "gpu",
			"-J", "e2e-job-count", "--qos=normal", "-N", "1", "--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue"))
	}
	reasons := map[string]bool{} // reasons the jobs were seen pending for
	most := 0                    // jobs seen running together
	for ctx.Err() == nil {
		ended, running := 0, 0
		for _, id := range ids {
			j, err := cluster.Job(ctx, id)
			if err != nil {
				continue
			}
			switch {
			case j.Ended():
				ended++
			case j.State == slurm.StateRunning:
				running++
			case j.State == slurm.StatePending:
				reasons[j.Reason] = true
			}
		}
		most = max(most, running)
		if ended == len(ids) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("at most %d running together; pending for %v", most, reasons)
	for _, id := range ids {
		j, err := cluster.Job(ctx, id)
		if err != nil || j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" {
			t.Errorf("job %d ended %s (%s), tag %v, %v; want COMPLETED on a plan; rubickd log %s", id, j.State, j.Reason, j.Tag, err, d.log)
		}
	}
	if most > 1 || reasons["QOSMaxJobsPerUserLimit"] {
		t.Errorf("%d jobs ran together, pending for %v; want one at a time, never QOSMaxJobsPerUserLimit; rubickd log %s", most, reasons, d.log)
	}
	var says bool
	for _, id := range ids {
		out := l.run(t, filepath.Join(bin, "rubick"), "explain", "--store", lt.dbPath, "--reasons", "200", strconv.Itoa(id))
		says = says || strings.Contains(out, "MaxJobsPerUser")
	}
	if !says {
		t.Errorf("rubick explain does not say either job waited for QOS normal MaxJobsPerUser")
	}
}
