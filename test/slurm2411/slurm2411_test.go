//go:build integration

// Package slurm2411 tests the slurmrestd v0.0.41 and v0.0.42 clients and
// the Applier against a real Slurm 24.11 (scripts/lab/trixie-up.sh, a
// Debian trixie chroot), which serves both: version detection, nodes, a
// REST submission tagged and held by job_submit.lua, a start through
// scontrol that lands where asked, polling, the limits, rubickd itself
// for a few cycles, and rubick-srun reading a job's memory per GPU.
package slurm2411

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/slurm"
)

// bothVersions runs f once with each API version 24.11 serves that rubick
// speaks.
func bothVersions(t *testing.T, f func(t *testing.T, version string)) {
	for _, v := range []string{slurm.Version41, slurm.Version42} {
		t.Run(v, func(t *testing.T) { f(t, v) })
	}
}

func TestDetectsV0042(t *testing.T) {
	_, c, _ := chrootLab(context.Background(), t, "")
	if c.Version() != slurm.Version42 {
		t.Fatalf("detected %s, want %s, the newest 24.11 serves", c.Version(), slurm.Version42)
	}
}

func TestRESTAgainstSlurm2411(t *testing.T) { bothVersions(t, restAgainstSlurm2411) }

func restAgainstSlurm2411(t *testing.T, version string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, c, app := chrootLab(ctx, t, version)
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) < 2 {
		t.Fatalf("%d nodes, want the lab's 4", len(nodes))
	}
	for i, n := range nodes {
		if n.GPUs != 8 || n.CPUs <= 0 || n.MemMB <= 0 {
			t.Errorf("node %+v: want 8 GPUs and positive CPUs and memory", n)
		}
		// The lab's first half of nodes has a100s, the rest h100s.
		want := []string{"h100"}
		if i < len(nodes)/2 {
			want = []string{"a100"}
		}
		if !slices.Equal(n.GPUTypes, want) {
			t.Errorf("node %s: GPU types %v, want %v", n.Name, n.GPUTypes, want)
		}
	}

	// A REST submission carries its model type in the comment; the lab's
	// job_submit.lua tags and holds it.
	id, err := c.Submit(ctx, slurm.SubmitRequest{
		Name: "rubick-" + version, Partition: "gpu", Script: "#!/bin/bash\nsleep 120\n", Nodes: 1, Tasks: 1,
		CPUsPerTask: 1, GPUsPerNode: 1, MemPerNodeMB: 1000, Requeue: true, Comment: "rubick:model=bert",
		WorkDir: "/tmp", StdOut: "/dev/null", Env: []string{"PATH=/usr/bin:/bin"},
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { cancelJob(root, id) })
	j, err := c.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !j.Held || j.State != slurm.StatePending || j.Tag == nil || j.Tag.ModelType != "bert" {
		t.Fatalf("job %d: state %s held %v tag %+v; want pending, held, model bert", id, j.State, j.Held, j.Tag)
	}
	// priority/multifactor keeps the hold at a new nice, and the lab's
	// job_submit.lua (NICE_KEEPS_HOLD = true) lets it through.
	if err := runArgv("chroot", root, "env", "-u", "SLURM_CONF", "scontrol", "update", fmt.Sprintf("JobId=%d", id), "Nice=50"); err != nil {
		t.Errorf("scontrol update Nice=50 of the held job: %v", err)
	}
	if j, err := c.Job(ctx, id); err != nil || !j.Held || j.Priority != 0 || j.Nice != 50 {
		t.Errorf("job %d after a new nice: held %v, priority %d, nice %d (%v); want held, nice 50", id, j.Held, j.Priority, j.Nice, err)
	}

	// Start it on two chosen nodes with 4 GPUs each, through the Applier.
	want := []string{nodes[0].Name, nodes[1].Name}
	tag := *j.Tag
	tag.Plan, tag.Generation = "dp8.tp1.pp1.mb4.a1.z0", 1
	res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionStart, JobID: id, Nodes: want, GPUsPerNode: 4, CPUsPerTask: 2, MemPerNodeMB: 2000,
		TimeLimit: 25 * time.Minute, Tag: &tag})
	if res.Err != nil {
		t.Fatalf("start: %v (steps %+v)", res.Err, res.Steps)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		j, err = c.Job(ctx, id)
		if err == nil && j.State == slurm.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d not running 60 s after release: %+v %v", id, j, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	got := slices.Clone(j.NodeList)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || j.GPUsPerNode != 4 || j.TimeLimit != 25*time.Minute {
		t.Errorf("running on %v with %d GPUs per node and a %v limit, want %v with 4 and 25m", got, j.GPUsPerNode, j.TimeLimit, want)
	}
	if j.Tag == nil || j.Tag.Plan != tag.Plan || !strings.Contains(j.AdminComment, "rubick:v1") {
		t.Errorf("tag after start = %+v (AdminComment %q), want plan %s", j.Tag, j.AdminComment, tag.Plan)
	}

	// An administrator's suspend: the client reads the state and the run
	// time before it, and after the resume a run time without the time the
	// job stood suspended.
	time.Sleep(time.Second)
	scontrol := func(verb string) {
		if err := runArgv("chroot", root, "env", "-u", "SLURM_CONF", "scontrol", verb, strconv.Itoa(id)); err != nil {
			t.Fatalf("scontrol %s %d: %v", verb, id, err)
		}
	}
	scontrol("suspend")
	if j, err = c.Job(ctx, id); err != nil || j.State != slurm.StateSuspended || !j.Allocated() || j.SuspendTime.IsZero() || j.PreSuspend < time.Second {
		t.Fatalf("suspended job: %v, state %s, suspended at %v after %v; want SUSPENDED, a time, >= 1s", err, j.State, j.SuspendTime, j.PreSuspend)
	}
	time.Sleep(4 * time.Second)
	scontrol("resume")
	if j, err = c.Job(ctx, id); err != nil || j.State != slurm.StateRunning {
		t.Fatalf("resumed job: %v, state %s, want RUNNING", err, j.State)
	}
	// Slurm's times are whole seconds: allow one either way.
	if now := time.Now(); j.RunTime(now) > now.Sub(j.StartTime)-3*time.Second || j.RunTime(now) < j.PreSuspend {
		t.Errorf("resumed job: run time %v of %v since its start (suspended about 4s, %v before it); want the suspension left out",
			j.RunTime(now), now.Sub(j.StartTime), j.PreSuspend)
	}
}

// chrootLab is the 24.11 chroot lab: its root, a client of version (""
// detects it) and an Applier whose scontrol runs inside the chroot
// (reading the chroot's own slurm.conf even where the 22.05 lab's env.sh
// exported SLURM_CONF).
func chrootLab(ctx context.Context, t *testing.T, version string) (string, *slurm.RESTCluster, *slurm.Applier) {
	t.Helper()
	root := os.Getenv("SLURM_CHROOT")
	url, token := os.Getenv("SLURMRESTD_URL"), os.Getenv("SLURMRESTD_TOKEN_FILE")
	if root == "" || url == "" || token == "" {
		t.Skip("SKIP: no Slurm 24.11 chroot lab in the environment (as root: make lab-2411; source /tmp/rubick-trixie/lab/env.sh)")
	}
	c, err := slurm.NewCluster(ctx, slurm.Config{URL: url, Version: version, User: "root", TokenFile: token})
	if err != nil {
		t.Fatal(err)
	}
	scontrol := filepath.Join(t.TempDir(), "scontrol")
	wrapper := fmt.Sprintf("#!/bin/sh\nexec chroot %s env -u SLURM_CONF scontrol \"$@\"\n", root)
	if err := os.WriteFile(scontrol, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	app, err := slurm.NewApplier(slurm.ApplierConfig{Scontrol: scontrol, Scancel: scontrol, Cluster: c})
	if err != nil {
		t.Fatal(err)
	}
	return root, c, app
}

func cancelJob(root string, id int) {
	// Best effort: the lab is torn down with its jobs anyway.
	_ = runArgv("chroot", root, "env", "-u", "SLURM_CONF", "scancel", fmt.Sprint(id))
}

func runArgv(argv ...string) error {
	return exec.Command(argv[0], argv[1:]...).Run()
}

// On 24.11 too: a --gpus job is resized to a per-node count (its per-job
// request cleared), a job asking for a GPU type keeps it when resized, a
// 2-node job runs on one node with fewer CPUs than it asked for on each,
// and a held job array is split, its last record then started under
// ARRAY_TASK.
func TestGPUsPerJobAndArrays2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, c, app := chrootLab(ctx, t, "")
	sbatch := func(args ...string) int {
		argv := append([]string{root, "env", "-u", "SLURM_CONF", "sbatch", "--parsable", "-H", "-p", "gpu", "-D", "/tmp", "-o", "/dev/null"}, args...)
		out, err := exec.Command("chroot", append(argv, "--wrap", "sleep 120")...).Output()
		if err != nil {
			t.Fatalf("sbatch %v: %v", args, err)
		}
		id, err := strconv.Atoi(strings.Split(strings.TrimSpace(string(out)), ";")[0])
		if err != nil {
			t.Fatalf("sbatch printed %q", out)
		}
		t.Cleanup(func() { cancelJob(root, id) })
		return id
	}
	running := func(id int) slurm.Job {
		deadline := time.Now().Add(60 * time.Second)
		for {
			j, err := c.Job(ctx, id)
			if err == nil && j.State == slurm.StateRunning {
				return j
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %d not running 60 s after release: %+v %v", id, j, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	id := sbatch("--gpus=2")
	j, err := c.Job(ctx, id)
	if err != nil || j.GPUsPerNode != 2 || !j.GPUsNotPerNode {
		t.Fatalf("--gpus=2 job %d: %d GPUs per node, not per node %v (%v); want 2, true", id, j.GPUsPerNode, j.GPUsNotPerNode, err)
	}
	if res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionStart, JobID: id, NumNodes: 1, GPUsPerNode: 4, CPUsPerTask: 2}); res.Err != nil {
		t.Fatalf("start: %v (steps %+v)", res.Err, res.Steps)
	}
	if j := running(id); j.GPUs != 4 {
		t.Errorf("--gpus=2 job resized to 4 per node runs with %d GPUs", j.GPUs)
	}

	typed := sbatch("--gres=gpu:h100:1")
	if j, err := c.Job(ctx, typed); err != nil || !slices.Equal(j.GPUTypes, []string{"h100"}) || j.GPUsPerNode != 1 {
		t.Fatalf("--gres=gpu:h100:1 job %d: types %v, %d GPUs per node (%v); want h100, 1", typed, j.GPUTypes, j.GPUsPerNode, err)
	}
	if res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionStart, JobID: typed, NumNodes: 1, GPUsPerNode: 2, CPUsPerTask: 2}); res.Err != nil {
		t.Fatalf("start of the typed job: %v (steps %+v)", res.Err, res.Steps)
	}
	if j := running(typed); j.GPUs != 2 || !slices.Equal(j.GPUTypes, []string{"h100"}) || len(j.NodeList) != 1 ||
		j.NodeList[0] != "node3" && j.NodeList[0] != "node4" {
		t.Errorf("h100 job resized to 2 GPUs runs with %d of types %v on %v; want 2 h100s on node3 or node4", j.GPUs, j.GPUTypes, j.NodeList)
	}

	// Fewer CPUs per node than it was submitted with: Slurm keeps the
	// submission's per-node minimum unless the resize sets it too, and
	// before it did the job stayed pending in BadConstraints.
	wide := sbatch("-N2", "--ntasks-per-node=1", "--cpus-per-task=8", "--gres=gpu:8")
	if res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionStart, JobID: wide, NumNodes: 1, GPUsPerNode: 4, CPUsPerTask: 4}); res.Err != nil {
		t.Fatalf("start of the 2-node job on one: %v (steps %+v)", res.Err, res.Steps)
	}
	if j := running(wide); j.CPUs != 4 || len(j.NodeList) != 1 || j.GPUs != 4 {
		t.Errorf("2-node job of 8 CPUs each resized to one node with 4 GPUs and 4 CPUs runs with %d CPUs, %d GPUs on %v", j.CPUs, j.GPUs, j.NodeList)
	}

	arr := sbatch("--array=0-1%1", "--gres=gpu:1")
	j, err = c.Job(ctx, arr)
	if err != nil || j.ArrayTasks == "" || j.ArrayMaxTasks != 1 {
		t.Fatalf("array %d: tasks %q, at most %d at once (%v); want one record for both, 1", arr, j.ArrayTasks, j.ArrayMaxTasks, err)
	}
	if res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionSplit, JobID: arr, Tasks: []int{0, 1}}); res.Err != nil {
		t.Fatalf("split: %v (steps %+v)", res.Err, res.Steps)
	}
	j, err = c.Job(ctx, arr)
	if err != nil || j.ArrayTasks != "" || j.Ref() != fmt.Sprintf("%d_1", arr) || !j.Held || j.ArrayMaxTasks != 1 {
		t.Fatalf("array %d after the split: tasks %q, ref %s, held %v, at most %d at once (%v); want task 1 alone, held, 1",
			arr, j.ArrayTasks, j.Ref(), j.Held, j.ArrayMaxTasks, err)
	}
	if res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionStart, JobID: arr, NumNodes: 1, GPUsPerNode: 2, CPUsPerTask: 2}); res.Err != nil {
		t.Fatalf("start of the array's last record: %v (steps %+v)", res.Err, res.Steps)
	}
	if j := running(arr); j.GPUs != 2 {
		t.Errorf("array task resized to 2 GPUs runs with %d", j.GPUs)
	}
}

// TestV0041Limits reads the limits: with slurmrestd's database plugin
// (trixie-up.sh WITH_DBD=1) the QOS and associations slurmdbd lists, the
// partitions' alone without it (slurmrestd answers 404 on /slurmdb); and
// the partition's TRESBillingWeights either way.
func TestRESTLimits2411(t *testing.T) { bothVersions(t, restLimits2411) }

func restLimits2411(t *testing.T, version string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root, c, _ := chrootLab(ctx, t, version)
	scontrol := func(arg string) {
		t.Helper()
		if out, err := exec.Command("chroot", root, "env", "-u", "SLURM_CONF", "scontrol", "update", "PartitionName=gpu", arg).CombinedOutput(); err != nil {
			t.Fatalf("scontrol update PartitionName=gpu %s: %v\n%s", arg, err, out)
		}
	}
	l, err := c.Limits(ctx)
	if err != nil {
		t.Fatalf("Limits: %v", err)
	}
	weights, want := "CPU=0.5,Mem=0.25G,GRES/gpu=2.0", slurm.BillingWeights{CPU: 0.5, GPU: 2, MemMB: 0.25 / 1024, Set: true}
	if l.QOS == nil {
		// Without slurmdbd gres/gpu is no TRES, and Slurm refuses its weight.
		weights, want.GPU = "CPU=0.5,Mem=0.25G", 0
	}
	scontrol("TRESBillingWeights=" + weights)
	t.Cleanup(func() { scontrol("TRESBillingWeights=") })
	if l, err = c.Limits(ctx); err != nil {
		t.Fatalf("Limits: %v", err)
	}
	if p, ok := l.Partitions["gpu"]; !ok || !cmp.Equal(p.Billing, want) {
		t.Errorf("partitions %+v, want gpu with its billing weights", l.Partitions)
	}
	if l.QOS == nil {
		t.Log("no /slurmdb paths (no database plugin): the partitions' limits alone")
		return
	}
	if _, ok := l.QOS["normal"]; !ok || len(l.Associations) == 0 {
		t.Errorf("QOS %v, associations %v; want QOS normal and the cluster's associations", l.QOS, l.Associations)
	}
}

// TestRESTPolling2411 polls with update_time as rubickd does every cycle:
// 24.11 refuses a bare number (HTTP 422), so the client sends
// uts<seconds>, and reads an answer with no jobs and last_update 0 as
// "unchanged".
func TestRESTPolling2411(t *testing.T) { bothVersions(t, restPolling2411) }

func restPolling2411(t *testing.T, version string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, _ := chrootLab(ctx, t, version)
	if _, changed, err := c.Jobs(ctx, time.Time{}); err != nil || !changed {
		t.Fatalf("full poll: changed %v, %v", changed, err)
	}
	if jobs, changed, err := c.Jobs(ctx, time.Now().Add(time.Hour)); err != nil || changed || jobs != nil {
		t.Errorf("poll since an hour ahead: %d jobs, changed %v, %v; want unchanged", len(jobs), changed, err)
	}
	if _, changed, err := c.Jobs(ctx, time.Now().Add(-24*time.Hour)); err != nil || !changed {
		t.Errorf("poll since a day ago: changed %v, %v; want the list", changed, err)
	}
}

// TestRubickdAgainstSlurm2411 runs rubickd itself against 24.11 for a few
// cycles: two model-typed jobs, held by job_submit.lua, are started on
// plans rubickd chose, and no cycle fails (every cycle after the first
// used to fail there: docs/slurm.md, Polling).
func TestRubickdAgainstSlurm2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, c, _ := chrootLab(ctx, t, "")
	logPath := runRubickd(ctx, t, root)
	ids := submitBert(ctx, t, root, 2)
	started := map[int]string{} // the plan each job was seen running with
	for ctx.Err() == nil && len(started) < len(ids) {
		for _, id := range ids {
			if j, err := c.Job(ctx, id); err == nil && j.State != slurm.StatePending && j.Tag != nil && j.Tag.Plan != "" {
				started[id] = j.Tag.Plan
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(5 * time.Second) // a few more cycles
	logText, _ := os.ReadFile(logPath)
	if len(started) < len(ids) || strings.Contains(string(logText), "cycle failed") {
		t.Errorf("jobs %v started on plans %v (want all); rubickd log:\n%s", ids, started, logText)
	}
}

// TestRubickdLimits2411: with slurmdbd (trixie-up.sh WITH_DBD=1), rubickd
// reads 24.11's QOS limits and plans within them: GrpTRESRunMins=gres/gpu=20
// on the jobs' QOS and MaxTRESPerJob=gres/gpu=4 on the partition's, for two
// bert jobs asking for 2 GPUs, of 2 and 5 minutes. Unbounded, rubick grows
// each to a node. Each limit binds (bert runs on 1, 2, 4 or 8 GPUs): the
// partition's alone would let both run on 4, 28 GPU-minutes; the minutes
// alone, the first on 8. Neither job is ever held back by Slurm for a
// limit, none runs on more than 4 GPUs, and the two never hold more than
// 20 GPU-minutes to run together.
func TestRubickdLimits2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, c, inRoot := chrootLabWithDBD(ctx, t)
	inRoot("sacctmgr", "-i", "modify", "qos", "normal", "set", "GrpTRESRunMins=gres/gpu=20")
	t.Cleanup(func() { inRoot("sacctmgr", "-i", "modify", "qos", "normal", "set", "GrpTRESRunMins=gres/gpu=-1") })
	inRoot("sacctmgr", "-i", "add", "qos", "gpupart", "MaxTRESPerJob=gres/gpu=4")
	t.Cleanup(func() { inRoot("sacctmgr", "-i", "delete", "qos", "gpupart") })
	inRoot("scontrol", "update", "PartitionName=gpu", "QOS=gpupart")
	t.Cleanup(func() { inRoot("scontrol", "update", "PartitionName=gpu", "QOS=") })

	logPath := runRubickd(ctx, t, root)
	ids := append(submitBert(ctx, t, root, 1, "--time=2", "--qos=normal"), submitBert(ctx, t, root, 1, "--time=5", "--qos=normal")...)
	watchUnheld(ctx, t, c, ids, logPath, func(running []slurm.Job) {
		minutes := 0
		for _, j := range running {
			if j.GPUs > 4 {
				t.Fatalf("job %d runs on %d GPUs, want 4 at most (the partition QOS's MaxTRESPerJob)", j.ID, j.GPUs)
			}
			// What Slurm counts: the minutes left of its limit.
			left := max(j.TimeLimit-time.Since(j.StartTime), 0)
			minutes += j.GPUs * int((left+time.Minute-1)/time.Minute)
		}
		if minutes > 20 {
			t.Fatalf("the jobs run with %d GPU-minutes of time limits together, want 20 at most (GrpTRESRunMins)", minutes)
		}
	})
}

// TestRubickdBudget2411: rubickd reads a GrpTRESMins budget and what was
// used of it from slurmctld (24.11 counts usage: priority/multifactor) and
// plans within what is left. QOS normal gets GrpTRESMins= what its earlier
// jobs used plus a room, for two bert jobs asking for 2 GPUs and 4 GB, of 2
// and 5 minutes: 20 GPU-minutes, or 30,000 MB-minutes of memory (their
// requests take 28,672). Unbounded, rubick grows each to a node: 56
// GPU-minutes, and 144 GB each. The running jobs never hold more than the
// room in time limits together, and every job runs.
func TestRubickdBudget2411(t *testing.T) {
	tests := []struct {
		tres  string
		room  int64
		of    func(slurm.Job) int64 // what a running job holds of the TRES
		spent func(slurm.GroupLimits) int64
	}{
		{"gres/gpu", 20, func(j slurm.Job) int64 { return int64(j.GPUs) }, func(g slurm.GroupLimits) int64 { return g.GPURunMins }},
		{"mem", 30000, func(j slurm.Job) int64 { return j.MemMB }, func(g slurm.GroupLimits) int64 { return g.MemRunMins }},
	}
	for _, tc := range tests {
		t.Run(tc.tres, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			root, c, inRoot := chrootLabWithDBD(ctx, t)
			t.Cleanup(func() { inRoot("sacctmgr", "-i", "modify", "qos", "normal", "set", "GrpTRESMins="+tc.tres+"=-1") })
			inRoot("sacctmgr", "-i", "modify", "qos", "normal", "set", "GrpTRESMins="+tc.tres+"=1000000000")
			spent := func() int64 {
				out, err := exec.CommandContext(ctx, "chroot", root, "env", "-u", "SLURM_CONF", "scontrol", "show", "assoc_mgr", "flags=qos").Output()
				if err != nil {
					t.Fatalf("scontrol show assoc_mgr: %v", err)
				}
				b, err := slurm.ParseAssocMgr(out)
				if err != nil {
					t.Fatal(err)
				}
				return tc.spent(b.QOS["normal"].Spent)
			}
			before := spent()
			inRoot("sacctmgr", "-i", "modify", "qos", "normal", "set", fmt.Sprintf("GrpTRESMins=%s=%d", tc.tres, before+tc.room))

			logPath := runRubickd(ctx, t, root)
			ids := append(submitBert(ctx, t, root, 1, "--time=2", "--qos=normal"), submitBert(ctx, t, root, 1, "--time=5", "--qos=normal")...)
			watchUnheld(ctx, t, c, ids, logPath, func(running []slurm.Job) {
				var minutes int64
				for _, j := range running {
					left := max(j.TimeLimit-time.Since(j.StartTime), 0)
					minutes += tc.of(j) * int64((left+time.Minute-1)/time.Minute)
				}
				if minutes > tc.room {
					logText, _ := os.ReadFile(logPath)
					t.Fatalf("the jobs run with %d %s-minutes of time limits together, want %d at most (GrpTRESMins %d, %d used before)\n%s",
						minutes, tc.tres, tc.room, before+tc.room, before, logText)
				}
			})
			t.Logf("QOS normal used %d %s-minutes before the jobs, %d after", before, tc.tres, spent())
		})
	}
}

// TestBudgetScope2411: slurmdbd's association listing says which accounts
// carry a GrpTRESMins (account budgetacct, and user root in it), and
// scontrol show assoc_mgr asked for those accounts alone lists both
// budgets and no association of another account.
func TestBudgetScope2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root, c, inRoot := chrootLabWithDBD(ctx, t)
	addRootAccount(t, inRoot, "budgetacct")
	inRoot("sacctmgr", "-i", "modify", "account", "budgetacct", "set", "GrpTRESMins=gres/gpu=777")
	inRoot("sacctmgr", "-i", "modify", "user", "root", "where", "account=budgetacct", "set", "GrpTRESMins=cpu=555")

	l, err := c.Limits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	scope := l.BudgetScope()
	if !slices.Equal(scope.Accounts, []string{"budgetacct"}) || scope.All {
		t.Fatalf("scope %+v, want account budgetacct alone; associations %+v", scope, l.Associations)
	}
	r := &recordingRunner{}
	b, err := slurm.AssocMgr{Runner: r, Scontrol: chrootCommand(t, root, "scontrol")}.Budgets(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	var cluster string
	for k := range b.Assoc {
		cluster = k.Cluster
	}
	want := map[slurm.AssocKey]slurm.GroupLimits{
		{Cluster: cluster, Account: "budgetacct"}:               {GPURunMins: 777},
		{Cluster: cluster, Account: "budgetacct", User: "root"}: {CPURunMins: 555},
	}
	got := map[slurm.AssocKey]slurm.GroupLimits{}
	for k, v := range b.Assoc {
		got[k] = v.Limit
	}
	if !maps.Equal(want, got) {
		t.Errorf("budgets %+v, want %+v", got, want)
	}
	if !strings.Contains(r.out, "Account=budgetacct") || strings.Contains(r.out, "Account=root ") {
		t.Errorf("scontrol listed other accounts' associations, or not budgetacct's:\n%s", r.out)
	}
}

// TestFairShare2411: the fair-share factors rubickd reads from scontrol
// show assoc_mgr, for the accounts of its jobs, are sshare's FairShare
// column (to scontrol's two decimals) for every user association of those
// accounts, on 24.11's priority/multifactor: root, with the usage of the
// lab's earlier jobs, and a new account fsacct without any; read with
// sshare too, as rubickd does, they are sshare's six decimals.
func TestFairShare2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root, _, inRoot := chrootLabWithDBD(ctx, t)
	addRootAccount(t, inRoot, "fsacct", "fairshare=5")
	factors, precise := readFactors(ctx, t, root, false, "fsacct", "root"), readFactors(ctx, t, root, true, "fsacct", "root")
	raw, err := exec.CommandContext(ctx, "chroot", root, "env", "-u", "SLURM_CONF",
		"sshare", "-P", "-n", "-a", "-A", "fsacct,root", "-o", "Cluster,Account,User,FairShare").Output()
	if err != nil {
		t.Fatalf("sshare: %v", err)
	}
	out, users := string(raw), 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 4 || f[2] == "" {
			continue // an account's own line carries no factor under Fair Tree
		}
		want, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			t.Fatalf("sshare line %q: FairShare %q: %v", line, f[3], err)
		}
		got, ok := factors.Of(f[0], strings.TrimSpace(f[1]), f[2], "")
		if !ok || got < want-0.0051 || got > want+0.0051 {
			t.Errorf("account %s user %s: factor %v (listed %v), sshare says %v", f[1], f[2], got, ok, want)
		}
		if got, ok := precise.Of(f[0], strings.TrimSpace(f[1]), f[2], ""); !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("account %s user %s: factor read with sshare %v (listed %v), sshare says %v", f[1], f[2], got, ok, want)
		}
		users++
	}
	if users < 2 {
		t.Fatalf("sshare listed %d user associations of fsacct and root, want 2 at least:\n%s", users, out)
	}
	t.Logf("sshare:\n%s\nfactors read: %v", out, factors)
}

// TestRubickdFairShare2411: rubickd with policy.best_effort_order:
// fairshare starts, of two bert jobs asking for 8 GPUs where a job without
// a model type holds the other three nodes, first the one whose
// association slurmctld gives the higher fair-share factor, though it was
// submitted second, and never both together (slope order shares the node
// between them). Accounts root and fsacct (new, no usage) get different
// factors from slurmctld, in a direction that depends on whether its
// PriorityCalcPeriod has passed since fsacct was added; the test reads them
// first and skips if they are equal, or change before the first job runs.
func TestRubickdFairShare2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, c, inRoot := chrootLabWithDBD(ctx, t)
	addRootAccount(t, inRoot, "fsacct")
	factors := func() map[string]float64 {
		out := map[string]float64{}
		for k, f := range readFactors(ctx, t, root, true, "fsacct", "root") {
			if k.User == "root" && k.Partition == "" {
				out[k.Account] = f
			}
		}
		return out
	}
	before := factors()
	if before["fsacct"] == before["root"] {
		t.Skipf("SKIP: accounts fsacct and root have the same fair-share factor (%v): no order to check", before)
	}
	low, high := "fsacct", "root"
	if before["fsacct"] > before["root"] {
		low, high = high, low
	}
	fillThreeNodes(ctx, t, root, c)
	node := []string{"--gres=gpu:8", "--time=2"}
	ids := append(submitBert(ctx, t, root, 1, append(node, "-A", low)...), submitBert(ctx, t, root, 1, append(node, "-A", high)...)...)
	logPath := runRubickd(ctx, t, root, "policy:\n  best_effort_order: fairshare\n")
	var atStart map[string]float64 // read once the first job runs: rubickd has decided
	order := oneAtATime(ctx, t, c, ids, logPath, func() { atStart = factors() })
	if !maps.Equal(before, atStart) {
		t.Skipf("SKIP: slurmctld recomputed the factors before rubickd started a job (%v, then %v)", before, atStart)
	}
	if want := []int{ids[1], ids[0]}; !slices.Equal(order, want) {
		logText, _ := os.ReadFile(logPath)
		t.Fatalf("jobs started in order %v, want %v: account %s (factor %v) before %s (%v)\n%s",
			order, want, high, before[high], low, before[low], logText)
	}
	t.Logf("factors %v: job %d (%s) ran before job %d (%s), submitted first", before, ids[1], high, ids[0], low)
}

// addRootAccount adds account name (sacctmgr options extra) under root,
// with user root in it, for the test.
func addRootAccount(t *testing.T, inRoot func(argv ...string), name string, extra ...string) {
	inRoot(append([]string{"sacctmgr", "-i", "add", "account", name, "parent=root"}, extra...)...)
	t.Cleanup(func() { inRoot("sacctmgr", "-i", "delete", "account", name) })
	inRoot("sacctmgr", "-i", "add", "user", "root", "account="+name)
	t.Cleanup(func() { inRoot("sacctmgr", "-i", "delete", "user", "root", "where", "account="+name) })
}

// readFactors reads the fair-share factors of accounts' associations as
// rubickd does, with sshare too when sshare is set.
func readFactors(ctx context.Context, t *testing.T, root string, sshare bool, accounts ...string) slurm.FairShares {
	t.Helper()
	m := slurm.AssocMgr{Runner: slurm.ExecRunner{}, Scontrol: chrootCommand(t, root, "scontrol")}
	if sshare {
		m.SShare = chrootCommand(t, root, "sshare")
	}
	b, err := m.Budgets(ctx, slurm.BudgetScope{}.With(accounts...))
	if err != nil || b.SShareErr != nil {
		t.Fatal(err, b.SShareErr)
	}
	return b.FairShare
}

// recordingRunner runs commands and keeps the output of the first.
type recordingRunner struct{ out string }

func (r *recordingRunner) Run(ctx context.Context, argv []string) ([]byte, error) {
	out, err := slurm.ExecRunner{}.Run(ctx, argv)
	if r.out == "" {
		r.out = string(out)
	}
	return out, err
}

// chrootCommand writes a wrapper that runs cmd inside the chroot at root
// (with the chroot's own slurm.conf) and returns its path.
func chrootCommand(t *testing.T, root, cmd string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), cmd)
	wrapper := fmt.Sprintf("#!/bin/sh\nexec chroot %s env -u SLURM_CONF %s \"$@\"\n", root, cmd)
	if err := os.WriteFile(path, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRubickdBilling2411: with slurmdbd, rubickd reads 24.11's billing:
// the partition's TRESBillingWeights=CPU=0.5,Mem=0.25G,GRES/gpu=2.0 and
// GrpTRES=billing=14 on the jobs' QOS, for two bert jobs asking for 2 GPUs,
// 2 CPUs and 4 GB, which bill 6 each. Unbounded, rubick grows the first to
// a node, which bills over 14, and Slurm held it back (QOSGrpBilling). No
// job is ever held back by Slurm for a limit, and what the running jobs
// bill together, as Slurm reports it, never passes 14.
func TestRubickdBilling2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, c, inRoot := chrootLabWithDBD(ctx, t)
	inRoot("scontrol", "update", "PartitionName=gpu", "TRESBillingWeights=CPU=0.5,Mem=0.25G,GRES/gpu=2.0")
	t.Cleanup(func() { inRoot("scontrol", "update", "PartitionName=gpu", "TRESBillingWeights=") })
	inRoot("sacctmgr", "-i", "modify", "qos", "normal", "set", "GrpTRES=billing=14")
	t.Cleanup(func() { inRoot("sacctmgr", "-i", "modify", "qos", "normal", "set", "GrpTRES=billing=-1") })

	logPath := runRubickd(ctx, t, root)
	ids := submitBert(ctx, t, root, 2, "--qos=normal")
	watchUnheld(ctx, t, c, ids, logPath, func(running []slurm.Job) {
		var billed int64
		for _, j := range running {
			billed += j.Billing
		}
		if billed > 14 {
			t.Fatalf("the running jobs bill %d together, want 14 at most (GrpTRES=billing=14)", billed)
		}
	})
}

// watchUnheld polls jobs ids until they end, failing the test when Slurm
// holds one back for a size limit and when one never runs or ends, and
// hands check the running ones at each poll.
func watchUnheld(ctx context.Context, t *testing.T, c *slurm.RESTCluster, ids []int, logPath string, check func(running []slurm.Job)) {
	t.Helper()
	ended := map[int]bool{}
	ran := map[int]int{} // the GPUs each job was seen running on
	for ctx.Err() == nil && len(ended) < len(ids) {
		var running []slurm.Job
		for _, id := range ids {
			j, err := c.Job(ctx, id)
			if err != nil {
				continue
			}
			switch {
			case j.Ended():
				ended[id] = true
			case j.State == slurm.StatePending && slurm.SizeLimitReason(j.Reason):
				logText, _ := os.ReadFile(logPath)
				t.Fatalf("job %d held back by Slurm for %s; rubickd log:\n%s", id, j.Reason, logText)
			case j.State == slurm.StateRunning:
				ran[id] = j.GPUs
				running = append(running, j)
			}
		}
		check(running)
		time.Sleep(300 * time.Millisecond)
	}
	if len(ended) < len(ids) || len(ran) < len(ids) {
		logText, _ := os.ReadFile(logPath)
		t.Fatalf("jobs %v, ended %v, ran on %v GPUs; want all run and ended; rubickd log:\n%s", ids, ended, ran, logText)
	}
	t.Logf("the jobs ran on %v GPUs", ran)
}

// oneAtATime watches jobs ids (watchUnheld) that must never run together
// and returns the order they started in; first runs when the first does.
func oneAtATime(ctx context.Context, t *testing.T, c *slurm.RESTCluster, ids []int, logPath string, first func()) []int {
	t.Helper()
	var order []int
	watchUnheld(ctx, t, c, ids, logPath, func(running []slurm.Job) {
		if len(running) > 1 {
			logText, _ := os.ReadFile(logPath)
			t.Fatalf("jobs %d and %d run together on the one free node\n%s", running[0].ID, running[1].ID, logText)
		}
		if len(running) == 1 && !slices.Contains(order, running[0].ID) {
			if order = append(order, running[0].ID); len(order) == 1 {
				first()
			}
		}
	})
	return order
}

// chrootLabWithDBD is chrootLab for a test that needs slurmdbd
// (trixie-up.sh WITH_DBD=1), which it skips without, and a way to run a
// command as root inside the chroot (sacctmgr, scontrol update), failing
// the test when it fails.
func chrootLabWithDBD(ctx context.Context, t *testing.T) (root string, c *slurm.RESTCluster, inRoot func(argv ...string)) {
	t.Helper()
	root, c, _ = chrootLab(ctx, t, "")
	if l, err := c.Limits(ctx); err != nil || l.QOS == nil {
		t.Skipf("SKIP: no slurmdbd behind the 24.11 lab (trixie-up.sh WITH_DBD=1): %v", err)
	}
	return root, c, func(argv ...string) {
		t.Helper()
		if out, err := exec.Command("chroot", append([]string{root, "env", "-u", "SLURM_CONF"}, argv...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}
}

// rubickdBin builds rubickd once per test run, into a directory named by
// $RUBICK_2411_BIN for the tests after the first, which TestMain removes.
func rubickdBin(ctx context.Context, t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("RUBICK_2411_BIN"); dir != "" {
		return filepath.Join(dir, "rubickd")
	}
	dir, err := os.MkdirTemp("", "rubick-2411-bin-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Setenv("RUBICK_2411_BIN", dir); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "rubickd")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/rubickd").CombinedOutput(); err != nil {
		_ = os.Unsetenv("RUBICK_2411_BIN")
		_ = os.RemoveAll(dir)
		t.Fatalf("go build rubickd: %v\n%s", err, out)
	}
	return bin
}

// TestMain runs the tests, then removes the rubickd they shared; the
// test binary exits with m.Run's code.
func TestMain(m *testing.M) {
	m.Run()
	if dir := os.Getenv("RUBICK_2411_BIN"); dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// runRubickd builds rubickd and runs it against the chroot lab until the
// test ends, with scontrol and scancel run inside the chroot; it returns
// the path of its log.
func runRubickd(ctx context.Context, t *testing.T, root string, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	bin := rubickdBin(ctx, t)
	for _, cmd := range []string{"scontrol", "scancel", "sshare"} {
		wrapper := fmt.Sprintf("#!/bin/sh\nexec chroot %s env -u SLURM_CONF %s \"$@\"\n", root, cmd)
		if err := os.WriteFile(filepath.Join(dir, cmd), []byte(wrapper), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`slurmrestd:
  url: %s
  user: root
  token_file: %s
commands:
  scontrol: %s/scontrol
  scancel: %s/scancel
  sshare: %s/sshare
partitions: [gpu]
interval: 2s
store: %s/rubick.db
listen: ""
log_level: debug
`, os.Getenv("SLURMRESTD_URL"), os.Getenv("SLURMRESTD_TOKEN_FILE"), dir, dir, dir, dir) + strings.Join(extra, "\n")
	if err := os.WriteFile(filepath.Join(dir, "rubickd.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "rubickd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	d := exec.CommandContext(dctx, bin, "--config", filepath.Join(dir, "rubickd.yaml"))
	d.Stdout, d.Stderr = logFile, logFile
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(); _ = d.Wait(); logFile.Close() })
	return logPath
}

// submitBert submits n bert jobs of 2 GPUs that sleep 5 s, with args, in
// the chroot lab; they are cancelled when the test ends.
func submitBert(ctx context.Context, t *testing.T, root string, n int, args ...string) []int {
	t.Helper()
	var ids []int
	for range n {
		argv := append([]string{root, "env", "-u", "SLURM_CONF", "sbatch", "--parsable", "--model-type=bert",
			"-p", "gpu", "-N", "1", "--gres=gpu:2", "--cpus-per-task=2", "--mem=4G", "--requeue", "-o", "/dev/null"}, args...)
		out, err := exec.CommandContext(ctx, "chroot", append(argv, "--wrap", "sleep 5")...).Output()
		if err != nil {
			t.Fatalf("sbatch: %v", err)
		}
		id, err := strconv.Atoi(strings.TrimSpace(strings.Split(string(out), ";")[0]))
		if err != nil {
			t.Fatalf("sbatch printed %q", out)
		}
		ids = append(ids, id)
		t.Cleanup(func() { cancelJob(root, id) })
	}
	return ids
}

// TestRestart2411 runs a checkpoint-restart on 24.11: the batch shell is
// signalled, the job requeued held, resized onto another node with more
// GPUs and a new time limit, and released; then its limit is raised while
// it runs.
func TestRestart2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, c, _ := chrootLab(ctx, t, "")
	dir := t.TempDir()
	for _, cmd := range []string{"scontrol", "scancel"} {
		wrapper := fmt.Sprintf("#!/bin/sh\nexec chroot %s env -u SLURM_CONF %s \"$@\"\n", root, cmd)
		if err := os.WriteFile(filepath.Join(dir, cmd), []byte(wrapper), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	app, err := slurm.NewApplier(slurm.ApplierConfig{Scontrol: filepath.Join(dir, "scontrol"), Scancel: filepath.Join(dir, "scancel"),
		Cluster: c, WaitCheckpoint: func(context.Context, slurm.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, "chroot", root, "env", "-u", "SLURM_CONF", "sbatch", "--parsable", "-H", "-p", "gpu",
		"--requeue", "-D", "/tmp", "-o", "/dev/null", "--gres=gpu:2", "--wrap", "sleep 120").Output()
	if err != nil {
		t.Fatalf("sbatch: %v", err)
	}
	id, err := strconv.Atoi(strings.Split(strings.TrimSpace(string(out)), ";")[0])
	if err != nil {
		t.Fatalf("sbatch printed %q", out)
	}
	t.Cleanup(func() { cancelJob(root, id) })
	runningOn := func(node string) slurm.Job {
		deadline := time.Now().Add(60 * time.Second)
		for {
			j, err := c.Job(ctx, id)
			if err == nil && j.State == slurm.StateRunning && slices.Equal(j.NodeList, []string{node}) {
				return j
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %d not running on %s after 60 s: %+v %v", id, node, j, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	start := slurm.Action{Kind: slurm.ActionStart, JobID: id, Nodes: []string{"node1"}, GPUsPerNode: 2, CPUsPerTask: 2}
	if res := app.ApplyOne(ctx, start); res.Err != nil {
		t.Fatalf("start: %v (steps %+v)", res.Err, res.Steps)
	}
	runningOn("node1")
	restart := slurm.Action{Kind: slurm.ActionRestart, JobID: id, Nodes: []string{"node2"}, GPUsPerNode: 4, CPUsPerTask: 4,
		TimeLimit: 20 * time.Minute}
	if res := app.ApplyOne(ctx, restart); res.Err != nil {
		t.Fatalf("restart: %v (steps %+v)", res.Err, res.Steps)
	}
	if j := runningOn("node2"); j.GPUs != 4 || j.TimeLimit != 20*time.Minute || j.RestartCount != 1 {
		t.Errorf("after the restart: %d GPUs, limit %v, %d restarts; want 4, 20m, 1", j.GPUs, j.TimeLimit, j.RestartCount)
	}
	// A running job's limit raised alone (a run slower than predicted).
	if res := app.ApplyOne(ctx, slurm.Action{Kind: slurm.ActionTimeLimit, JobID: id, TimeLimit: 45 * time.Minute}); res.Err != nil {
		t.Fatalf("time limit: %v (steps %+v)", res.Err, res.Steps)
	}
	if j := runningOn("node2"); j.TimeLimit != 45*time.Minute {
		t.Errorf("after raising the limit: %v, want 45m", j.TimeLimit)
	}
}

// TestPriority2411: the priority rubickd computes for a job (from scontrol
// show config, the QOS and association priorities and fair-share factors
// of scontrol show assoc_mgr, the partitions and the nodes) is the one
// slurmctld gives it, for jobs that nothing holds but their --begin keeps
// pending. The lab weighs QOS 100000, fair share 10000, association 5000,
// job size, partition and age 1000, and the TRES CPU 2000, Mem 1000 and
// GRES/gpu 4000. The test adds QOS prioqos of priority 100 beside
// normal's 0; partition prio of PriorityJobFactor 3 and PriorityTier 2,
// which brings gpu's factor of 1 to 1/3; and account pacct of priority 70,
// where user root's association in account root has 30.
func TestPriority2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root, c, inRoot := chrootLabWithDBD(ctx, t)
	addPriorityQOS(t, inRoot)
	addRootAccount(t, inRoot, "pacct", "priority=70")
	inRoot("sacctmgr", "-i", "modify", "user", "root", "where", "account=root", "set", "priority=30")
	t.Cleanup(func() {
		inRoot("sacctmgr", "-i", "modify", "user", "root", "where", "account=root", "set", "priority=-1")
	})
	inRoot("scontrol", "create", "PartitionName=prio", "Nodes=node[1-2]", "PriorityJobFactor=3", "PriorityTier=2", "State=UP")
	t.Cleanup(func() { inRoot("scontrol", "delete", "PartitionName=prio") })
	var ids []int
	for _, args := range [][]string{
		{"-p", "gpu", "-N", "1"},
		{"-p", "gpu", "-N", "2", "-n", "40", "--qos=prioqos", "--gres=gpu:3", "--mem=10G"},
		{"-p", "gpu", "-N", "1", "-n", "4", "--nice=500", "--gres=gpu:8"},
		{"-p", "gpu", "-N", "4", "--gres=gpu:1", "-A", "pacct"},
		{"-p", "prio", "-N", "1", "-n", "8", "--qos=prioqos", "--gres=gpu:2", "--mem=100G"},
	} {
		argv := append([]string{root, "env", "-u", "SLURM_CONF", "sbatch", "--parsable", "--begin=now+3600", "-o", "/dev/null"}, args...)
		out, err := exec.CommandContext(ctx, "chroot", append(argv, "--wrap", "sleep 1")...).CombinedOutput()
		if err != nil {
			t.Fatalf("sbatch %v: %v\n%s", args, err, out)
		}
		id, err := strconv.Atoi(strings.TrimSpace(strings.Split(string(out), ";")[0]))
		if err != nil {
			t.Fatalf("sbatch printed %q", out)
		}
		ids = append(ids, id)
		t.Cleanup(func() { cancelJob(root, id) })
	}
	// every association, as rubickd reads them with an association weight
	b, err := slurm.AssocMgr{Runner: slurm.ExecRunner{}, Scontrol: chrootCommand(t, root, "scontrol"), SShare: chrootCommand(t, root, "sshare")}.Budgets(ctx,
		slurm.BudgetScope{All: true})
	if err != nil || b.PriorityErr != nil || b.SShareErr != nil {
		t.Fatalf("assoc_mgr, config and sshare: %v, %v, %v", err, b.PriorityErr, b.SShareErr)
	}
	l, err := c.Limits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := slurm.Priorities{Config: b.Priority, QOS: b.QOSPriority, Assoc: b.AssocPriority, Partitions: l.Partitions, FairShare: b.FairShare, Nodes: len(nodes)}
	for _, n := range nodes {
		p.CPUs += n.CPUs
	}
	jobs, _, err := c.Jobs(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// sshare prints the fair-share factor to six decimals.
	slack := 1 + 5e-7*float64(p.Config.FairShare)
	checked := 0
	for _, j := range jobs {
		if !slices.Contains(ids, j.ID) {
			continue
		}
		checked++
		// slurmctld computed it at submission: no age yet.
		got, tier := p.Of(j, j.Partition, j.SubmitTime)
		wantTier := map[string]int{"gpu": 1, "prio": 2}[j.Partition]
		if math.Abs(got-float64(j.Priority)) > slack || tier != wantTier {
			t.Errorf("job %d (account %s, partition %s, QOS %s, TRES %s, nice %d): priority %v tier %d, slurmctld %d tier %d",
				j.ID, j.Account, j.Partition, j.QOS, j.TRESReq, j.Nice, got, tier, j.Priority, wantTier)
		} else {
			t.Logf("job %d (account %s, partition %s, QOS %s, TRES %s, nice %d): priority %v, slurmctld %d",
				j.ID, j.Account, j.Partition, j.QOS, j.TRESReq, j.Nice, got, j.Priority)
		}
	}
	if checked != len(ids) {
		t.Fatalf("slurmrestd listed %d of jobs %v", checked, ids)
	}
}

// addPriorityQOS adds QOS prioqos of priority 100, open to user root, for
// the test.
func addPriorityQOS(t *testing.T, inRoot func(argv ...string)) {
	inRoot("sacctmgr", "-i", "add", "qos", "prioqos", "priority=100")
	t.Cleanup(func() { inRoot("sacctmgr", "-i", "delete", "qos", "prioqos") })
	inRoot("sacctmgr", "-i", "modify", "user", "root", "set", "qos+=prioqos")
	t.Cleanup(func() { inRoot("sacctmgr", "-i", "modify", "user", "root", "set", "qos-=prioqos") })
}

// TestRubickdPriority2411: rubickd with policy.best_effort_order: priority
// starts, of two bert jobs asking for 8 GPUs where a job without a model
// type holds the other three nodes, first the one in QOS prioqos (priority
// 100 against normal's 0, weighed 100000), though it was submitted second,
// and never both together (slope order shares the node between them).
func TestRubickdPriority2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, c, inRoot := chrootLabWithDBD(ctx, t)
	addPriorityQOS(t, inRoot)
	fillThreeNodes(ctx, t, root, c)
	node := []string{"--gres=gpu:8", "--time=2"}
	ids := append(submitBert(ctx, t, root, 1, node...), submitBert(ctx, t, root, 1, append(node, "--qos=prioqos")...)...)
	logPath := runRubickd(ctx, t, root, "policy:\n  best_effort_order: priority\n")
	order := oneAtATime(ctx, t, c, ids, logPath, func() {})
	if want := []int{ids[1], ids[0]}; !slices.Equal(order, want) {
		logText, _ := os.ReadFile(logPath)
		t.Fatalf("jobs started in order %v, want %v: QOS prioqos first\n%s", order, want, logText)
	}
	t.Logf("job %d (QOS prioqos) ran before job %d (normal), submitted first", ids[1], ids[0])
}

// fillThreeNodes runs a job without a model type on three of the lab's
// four nodes until the test ends, and waits for it to run.
func fillThreeNodes(ctx context.Context, t *testing.T, root string, c *slurm.RESTCluster) {
	t.Helper()
	out, err := exec.CommandContext(ctx, "chroot", root, "env", "-u", "SLURM_CONF", "sbatch", "--parsable", "-p", "gpu", "-N", "3",
		"--gres=gpu:8", "--cpus-per-task=2", "--mem=4G", "-o", "/dev/null", "--wrap", "sleep 300").Output()
	if err != nil {
		t.Fatalf("sbatch filler: %v", err)
	}
	filler, err := strconv.Atoi(strings.TrimSpace(strings.Split(string(out), ";")[0]))
	if err != nil {
		t.Fatalf("sbatch printed %q", out)
	}
	t.Cleanup(func() { cancelJob(root, filler) })
	for {
		j, err := c.Job(ctx, filler)
		if err == nil && j.State == slurm.StateRunning {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the filler job %d never ran: %v %+v", filler, err, j)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// On 24.11 too rubickd reads a pending job's batch script with scontrol,
// and its working directory off slurmrestd; a job without a script (one
// that does not exist) is ErrNoScript, though scontrol exits 0.
func TestBatchScript2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root, c, _ := chrootLab(ctx, t, "")
	script := "#!/bin/bash\nexec rubick-srun python pretrain_gpt.py --global-batch-size 32\n"
	argv := []string{root, "env", "-u", "SLURM_CONF", "sbatch", "--parsable", "-H", "-p", "gpu", "-D", "/tmp", "-o", "/dev/null"}
	cmd := exec.Command("chroot", argv...)
	cmd.Stdin = strings.NewReader(script) // sbatch reads the script from stdin
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sbatch: %v", err)
	}
	id, err := strconv.Atoi(strings.Split(strings.TrimSpace(string(out)), ";")[0])
	if err != nil {
		t.Fatalf("sbatch printed %q", out)
	}
	t.Cleanup(func() { cancelJob(root, id) })
	scripts := slurm.BatchScripts{Runner: slurm.ExecRunner{}, Scontrol: chrootCommand(t, root, "scontrol")}
	got, err := scripts.BatchScript(ctx, id)
	if err != nil || got != script {
		t.Fatalf("batch script of job %d: %q, %v; want %q", id, got, err, script)
	}
	sl, err := launch.FromScript(got)
	if err != nil || strings.Join(sl.Train, " ") != "python pretrain_gpt.py --global-batch-size 32" {
		t.Errorf("rubick-srun line %+v, %v", sl, err)
	}
	if j, err := c.Job(ctx, id); err != nil || j.WorkDir != "/tmp" {
		t.Errorf("job %d: working directory %q (%v), want /tmp", id, j.WorkDir, err)
	}
	if _, err := scripts.BatchScript(ctx, 99999999); !errors.Is(err, slurm.ErrNoScript) {
		t.Errorf("script of a job that does not exist: %v, want ErrNoScript", err)
	}
}

// On 24.11 rubick-srun reads a --mem-per-gpu job's memory per GPU from its
// MemPerTres ("gres/gpu:MB" there, "gres:gpu:MB" on 22.05), which rubickd
// may raise and the job's SLURM_MEM_PER_GPU does not follow, and checks
// the profiling phase's offload runs against it times the GPUs on the
// node: 64 GB per GPU on 4 GPUs leaves out a 13B GPT's runs that need 276
// and 224 GB there.
func TestRubickSrunMemPerGPU2411(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, _, _ := chrootLab(ctx, t, "")
	dir, err := os.MkdirTemp(filepath.Join(root, "tmp"), "rubick-srun-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "rubick-srun"), "../../cmd/rubick-srun").CombinedOutput(); err != nil {
		t.Fatalf("go build rubick-srun: %v\n%s", err, out)
	}
	in := "/" + strings.TrimPrefix(strings.TrimPrefix(dir, root), "/") // the directory inside the chroot
	script := "#!/bin/bash\n" + in + "/rubick-srun --dry-run -- python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 16 --train-iters 20\n"
	if err := os.WriteFile(filepath.Join(dir, "job.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	chroot := func(argv ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "chroot", append([]string{root, "env", "-u", "SLURM_CONF"}, argv...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	out := chroot("sbatch", "--parsable", "-H", "-p", "gpu", "-N", "1", "--gres=gpu:4", "--mem-per-gpu=16000", "-c", "16",
		"-D", in, "-o", in+"/job.out", in+"/job.sh")
	id, err := strconv.Atoi(strings.Split(out, ";")[0])
	if err != nil {
		t.Fatalf("sbatch printed %q", out)
	}
	t.Cleanup(func() { cancelJob(root, id) })
	job := strconv.Itoa(id)
	chroot("scontrol", "update", "JobId="+job, "AdminComment=rubick:v1 model=gpt13 profile=1 arch=1.3e+10,40,5120,2048")
	// As rubickd raises a job's memory per GPU: only beside Gres=.
	chroot("scontrol", "update", "JobId="+job, "Gres=gpu:4", "MemPerTres=gres/gpu:65536")
	chroot("scontrol", "release", job)
	var log []byte
	for ctx.Err() == nil {
		if st := chroot("squeue", "-h", "-j", job, "-o", "%T"); st == "" || st == "COMPLETED" {
			if log, err = os.ReadFile(filepath.Join(dir, "job.out")); err == nil && len(log) > 0 {
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	const want = `msg="profiling runs left out: predicted not to fit in the job's memory on the node" prog=rubick-srun job=%d host_mem_gb=256 headroom=0.8 ` +
		`runs="dp4.tp1.pp1.mb4.a1.z1+off (276 GB), dp2.tp1.pp1.mb4.a2.z1+off (224 GB)`
	if !strings.Contains(string(log), fmt.Sprintf(want, id)) {
		t.Errorf("job %d's log lacks the runs left out for its 4 x 64 GB:\n%s", id, log)
	}
}
