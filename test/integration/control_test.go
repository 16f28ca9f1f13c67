//go:build integration

package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/report"
	"github.com/rubick-sched/rubick/slurm"
)

// nodeLine prints "<node> <CUDA_VISIBLE_DEVICES>" once per node of the job.
const nodeLine = `srun -l bash -c 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"'`

// The decision rubickd applies to a held job: resize and place it with one
// `scontrol update`, then release. The job starts exactly there.
func TestUpdateThenReleaseStartsOnGivenNodes(t *testing.T) {
	l := needLab(t)
	needScheduler(t)
	nodes := l.idleNodes(t, 2)
	nodeList := strings.Join(nodes, ",")
	id := l.sbatch(t, "--model-type=bert", "-N1", "--gres=gpu:1", "--wrap", nodeLine+"; sleep 30")

	// The complete size every time: NumCPUs is raised but never lowered by
	// Slurm, and NumNodes needs the n-n form on 22.05.
	run(t, "scontrol", "update", "JobId="+id, "NumNodes=2-2", "NumTasks=2", "CPUsPerTask=4", "NumCPUs=8",
		"MinMemoryNode=16000", "Gres=gpu:4", "NodeList="+nodeList)
	start := time.Now()
	run(t, "scontrol", "release", id)
	waitState(t, id, "RUNNING", 20*time.Second)
	t.Logf("release -> RUNNING in %v", time.Since(start).Round(10*time.Millisecond))

	out := showJob(t, id)
	wantNodes := strings.TrimSpace(run(t, "scontrol", "show", "hostlist", nodeList))
	if got := field(out, "NodeList"); got != wantNodes {
		t.Errorf("NodeList = %q, want %q", got, wantNodes)
	}
	// The lab's GPUs are typed (a100, h100): an untyped request is given
	// GPUs of the nodes' type.
	four := `gpu:(?:[a-z0-9]+:)?4\(IDX:0-3\)`
	if got := regexp.MustCompile(`GRES=`+four).FindAllString(out, -1); len(got) != 1 ||
		!strings.Contains(out, "Nodes="+wantNodes+" ") {
		t.Errorf("want one per-node line for %s with GRES=gpu:[TYPE:]4(IDX:0-3) in:\n%s", wantNodes, out)
	}
	j := l.restGetJob(t, id)
	detail := regexp.MustCompile(`^` + four + `$`)
	if j.Nodes != wantNodes || j.NodeCount != 2 || len(j.GresDetail) != 2 ||
		slices.ContainsFunc(j.GresDetail, func(d string) bool { return !detail.MatchString(d) }) {
		t.Errorf("REST: nodes %q count %d gres_detail %q, want %q 2 [gpu:[TYPE:]4(IDX:0-3) x2]", j.Nodes, j.NodeCount, j.GresDetail, wantNodes)
	}

	// The tasks see the GPUs Slurm gave them, on the nodes it chose.
	outFile := filepath.Join(l.out, "it-"+id+".out")
	waitFor(t, 15*time.Second, "both tasks' output", func() bool {
		b, _ := os.ReadFile(outFile)
		return strings.Count(string(b), " 0,1,2,3\n") == 2
	})
	b, _ := os.ReadFile(outFile)
	for _, n := range nodes {
		if !strings.Contains(string(b), n+" 0,1,2,3\n") {
			t.Errorf("%s: no task on %s with CUDA_VISIBLE_DEVICES=0,1,2,3:\n%s", outFile, n, b)
		}
	}
}

// A running multi-node job shrinks in place; the batch host cannot go.
func TestShrinkRunningJob(t *testing.T) {
	l := needLab(t)
	nodes := l.idleNodes(t, 3)
	id := l.sbatch(t, "-N3", "--gres=gpu:2", "--nodelist="+strings.Join(nodes, ","), "--wrap", "sleep 60")
	waitState(t, id, "RUNNING", 20*time.Second)
	batchHost := field(showJob(t, id), "BatchHost")

	var other string
	for _, n := range nodes {
		if n != batchHost {
			other = n
			break
		}
	}
	r := command("", "scontrol", "update", "JobId="+id, "NodeList="+other)
	if r.err == nil || !strings.Contains(r.stderr, "Invalid node name") {
		t.Errorf("dropping the batch host: err %v stderr %q, want \"Invalid node name specified\"", r.err, r.stderr)
	}

	// rubickd raises a running job's limit alone (slurm.ActionTimeLimit).
	run(t, "scontrol", "update", "JobId="+id, "TimeLimit=45")
	if got := field(showJob(t, id), "TimeLimit"); got != "00:45:00" {
		t.Errorf("TimeLimit of the running job after TimeLimit=45: %q", got)
	}

	run(t, "scontrol", "update", "JobId="+id, "NumNodes=1")
	out := showJob(t, id)
	if got, want := [3]string{field(out, "JobState"), field(out, "NumNodes"), field(out, "NodeList")},
		[3]string{"RUNNING", "1", batchHost}; got != want {
		t.Errorf("after shrink: JobState, NumNodes, NodeList = %q, want %q", got, want)
	}
	j := l.restGetJob(t, id)
	if j.NodeCount != 1 || j.Nodes != batchHost {
		t.Errorf("REST after shrink: nodes %q count %d, want %q 1", j.Nodes, j.NodeCount, batchHost)
	}
	// The released nodes are free at once.
	waitFor(t, 10*time.Second, "released nodes idle", func() bool {
		r := command("", "sinfo", "-h", "-N", "-t", "idle", "-o", "%N")
		for _, n := range nodes {
			if n != batchHost && !strings.Contains(r.stdout, n) {
				return false
			}
		}
		return true
	})
}

// sacct (22.05) shows AdminComment once the job has ended, including what
// rubickd appended to the tag's segment list.
func TestSacctShowsAdminCommentAfterEnd(t *testing.T) {
	l := needLab(t)
	needScheduler(t)
	id := l.sbatch(t, "--model-type=t5", "-N1", "--gres=gpu:1", "--wrap", "echo MT=$RUBICK_MODEL_TYPE")
	tag := "rubick:v1 model=t5 class=best-effort"
	if ac := field(showJob(t, id), "AdminComment"); ac != tag {
		t.Fatalf("AdminComment = %q, want %q", ac, tag)
	}
	// rubickd keeps other tools' segments: it rewrites only its own.
	admin := "other-tool=1;" + tag + " plan=dp1"
	run(t, "scontrol", "update", "JobId="+id, "AdminComment="+admin)
	run(t, "scontrol", "release", id)

	var got string
	waitFor(t, 60*time.Second, "sacct row of the finished job", func() bool {
		r := command("", "sacct", "-X", "-n", "-P", "-j", id, "-o", "State,AdminComment")
		got = strings.TrimSpace(r.stdout)
		return strings.HasPrefix(got, "COMPLETED|")
	})
	if want := "COMPLETED|" + admin; got != want {
		t.Errorf("sacct State|AdminComment = %q, want %q", got, want)
	}
	b, err := os.ReadFile(filepath.Join(l.out, "it-"+id+".out"))
	if err != nil || !strings.Contains(string(b), "MT=t5") {
		t.Errorf("job output %q (%v), want RUBICK_MODEL_TYPE=t5 in the task environment", b, err)
	}
}

// TestReportQueryFindsJobCancelledWhileHeld: rubick holds every job until
// rubickd plans it, and a job its user cancels before that never becomes
// eligible. sacct's window without --state selects by eligible time and
// leaves such a job out (22.05 and 24.11); the report's query finds it.
func TestReportQueryFindsJobCancelledWhileHeld(t *testing.T) {
	l := needLab(t)
	needScheduler(t)
	since := time.Now().Add(-time.Minute)
	id := l.sbatch(t, "--model-type=bert", "-N1", "--gres=gpu:1", "--wrap", "true")
	run(t, "scancel", id)
	q := report.Query{Since: since, Until: time.Now().Add(time.Minute)}
	var rows []report.Row
	waitFor(t, 30*time.Second, "the cancelled job's sacct row", func() bool {
		out, err := q.Run(t.Context(), slurm.ExecRunner{})
		if err != nil {
			t.Fatal(err)
		}
		if rows, _, err = report.ParseSacct(bytes.NewReader(out), time.Local); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(rows, func(r report.Row) bool { return r.JobID == id && r.State == "CANCELLED" })
	})
}

// A job submitted before the report's --until and released after it is
// the report's: sacct, given states and a window ending at --until,
// selected it by what it was within the window, and a held job was
// nothing there (22.05 lab).
func TestReportQueryFindsJobHeldPastUntil(t *testing.T) {
	l := needLab(t)
	needScheduler(t)
	since := time.Now().Add(-time.Minute)
	id := l.sbatch(t, "--model-type=bert", "-N1", "--gres=gpu:1", "--wrap", "true")
	t.Cleanup(func() { command("", "scancel", id) })
	time.Sleep(2 * time.Second)
	until := time.Now()
	time.Sleep(2 * time.Second)
	run(t, "scontrol", "release", id)
	q := report.Query{Since: since, Until: until}
	waitFor(t, 30*time.Second, "the job's sacct row", func() bool {
		out, err := q.Run(t.Context(), slurm.ExecRunner{})
		if err != nil {
			t.Fatal(err)
		}
		rows, _, err := report.ParseSacct(bytes.NewReader(out), time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(rows, func(r report.Row) bool { return r.JobID == id && r.State == "COMPLETED" })
	})
}
