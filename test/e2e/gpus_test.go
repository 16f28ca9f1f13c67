//go:build e2e

package e2e

import (
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// TestGPUsPerJobAndTask: jobs that ask for GPUs with --gpus or
// --gpus-per-task, not per node. rubickd plans them like any other (a
// resize to Gres=gpu:N beside those requests is invalid, so it clears them)
// and they run to completion on rubick's plans.
func TestGPUsPerJobAndTask(t *testing.T) {
	lt := newLabTest(t, "gpus", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	d := runDaemon(t, l, bin, dir, cfgPath)

	body := shortTraining(bin, dir, "bert", 32)
	// The last asks for its memory per GPU: resized with MinMemoryNode, its
	// srun steps failed (SLURM_MEM_PER_NODE beside SLURM_MEM_PER_GPU).
	for _, gpus := range [][]string{{"--gpus=2", "--mem=32G"}, {"--ntasks=2", "--gpus-per-task=1", "--mem=32G"},
		{"--gres=gpu:2", "--mem-per-gpu=16G"}} {
		args := append([]string{"--model-type=bert", "-p", "gpu", "-J", "e2e-gpus", "-N", "1", "--cpus-per-task=4", "--requeue"}, gpus...)
		id := l.submitScript(t, dir, body, &lt.ids, args...)
		j, _ := waitEnded(ctx, cluster, id)
		if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" || j.Tag.Generation < 1 {
			t.Errorf("job %d (%v) ended %s (%s), tag %v; want COMPLETED on a plan rubickd chose; rubickd log %s", id, gpus, j.State, j.Reason, j.Tag, d.log)
		}
	}
}

// TestCPUsPerGPU: a job asking for --cpus-per-gpu=8 gets that many CPUs
// per GPU from Slurm whatever rubick resizes it to, so rubick plans them:
// on the idle lab it grows the job to a whole node with all its 64 CPUs,
// what Slurm allocates. Before rubick read the request (22.05 lists such a
// pending job's CPUs as 1), it planned 8 CPUs and Slurm allocated 64.
func TestCPUsPerGPU(t *testing.T) {
	lt := newLabTest(t, "cpus-per-gpu", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, dbPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.dbPath, lt.cluster
	d := runDaemon(t, l, bin, dir, cfgPath)
	id := l.submitScript(t, dir, shortTraining(bin, dir, "roberta", 64), &lt.ids, "--model-type=roberta", "-p", "gpu", "-J", "e2e-cpus-per-gpu",
		"-N", "1", "--gres=gpu:2", "--cpus-per-gpu=8", "--mem=32G", "--requeue")
	j, _ := waitEnded(ctx, cluster, id)
	if j.State != slurm.StateCompleted || j.Tag == nil || j.Tag.Plan == "" {
		t.Fatalf("job %d ended %s (%s), tag %v; want COMPLETED on a plan rubickd chose; rubickd log %s", id, j.State, j.Reason, j.Tag, d.log)
	}
	st, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hist, err := st.PlanHistory(ctx, int64(id))
	if err != nil || len(hist) == 0 {
		t.Fatalf("plan history of job %d: %+v (%v), want its start", id, hist, err)
	}
	start := hist[len(hist)-1]
	t.Logf("job %d ran on %d GPUs with %d CPUs; rubick planned %d CPUs", id, j.GPUs, j.CPUs, start.Resources.CPUs)
	if start.Resources.CPUs != j.CPUs || j.CPUs < 8*j.GPUs {
		t.Errorf("job %d ran on %d GPUs with %d CPUs, rubick planned %d; want what it planned, 8 per GPU", id, j.GPUs, j.CPUs, start.Resources.CPUs)
	}
}

// TestInteractiveJob: an interactive allocation with a model type (salloc
// --model-type) runs on what it asked for. Slurm can neither requeue it nor
// signal a batch shell, so rubick could never restart it on another size;
// before rubick read that, it grew the job to a whole node on the idle lab.
func TestInteractiveJob(t *testing.T) {
	lt := newLabTest(t, "interactive", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster
	d := runDaemon(t, l, bin, dir, cfgPath)
	// --no-shell: salloc returns once the allocation is granted.
	cmd := exec.CommandContext(ctx, "salloc", "--no-shell", "--model-type=bert", "-p", "gpu", "-J", "e2e-interactive", "-N", "1", "--gres=gpu:2")
	cmd.Env, cmd.Dir = l.env, dir
	out, err := cmd.CombinedOutput()
	m := regexp.MustCompile(`Granted job allocation (\d+)`).FindStringSubmatch(string(out))
	if err != nil || m == nil {
		t.Fatalf("salloc: %v\n%s; rubickd log %s", err, out, d.log)
	}
	lt.ids = append(lt.ids, m[1])
	id, _ := strconv.Atoi(m[1])
	j, err := cluster.Job(ctx, id)
	if err != nil || j.State != slurm.StateRunning || j.GPUs != 2 || !j.Interactive || j.Tag == nil || j.Tag.Plan != "" {
		t.Errorf("job %d: %s on %d GPUs, interactive %v, tag %v (%v); want running on the 2 GPUs it asked for, unplanned; rubickd log %s",
			id, j.State, j.GPUs, j.Interactive, j.Tag, err, d.log)
	}
}

// TestOtherGres: a job asking for node-local scratch beside its GPUs
// (--gres=gpu:2,lscratch:100; the lab's nodes have lscratch:1000) keeps it
// when rubick resizes the job: scontrol's Gres= replaces the whole list,
// and before rubick carried the other entries, the job grown to a whole
// node ran without its scratch.
func TestOtherGres(t *testing.T) {
	lt := newLabTest(t, "other-gres", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster
	d := runDaemon(t, l, bin, dir, cfgPath)
	id := l.submitScript(t, dir, shortTraining(bin, dir, "roberta", 64), &lt.ids, "--model-type=roberta", "-p", "gpu", "-J", "e2e-other-gres",
		"-N", "1", "--gres=gpu:2,lscratch:100", "--cpus-per-task=8", "--mem=32G", "--requeue")
	var ran slurm.Job
	for ctx.Err() == nil {
		j, err := cluster.Job(ctx, id)
		if err == nil && j.State == slurm.StateRunning {
			ran = j
			break
		}
		if err == nil && j.Ended() {
			t.Fatalf("job %d ended %s (%s) before it was seen running; rubickd log %s", id, j.State, j.Reason, d.log)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if ran.Tag == nil || ran.Tag.Plan == "" || ran.GPUs <= 2 || !slices.Equal(ran.OtherGres, []string{"lscratch:100"}) {
		t.Errorf("job %d ran on %d GPUs with other GRES %v, tag %v; want more than its 2 GPUs on a plan rubickd chose, with lscratch:100; rubickd log %s",
			id, ran.GPUs, ran.OtherGres, ran.Tag, d.log)
	}
	if j, _ := waitEnded(ctx, cluster, id); j.State != slurm.StateCompleted {
		t.Errorf("job %d ended %s (%s), want COMPLETED; rubickd log %s", id, j.State, j.Reason, d.log)
	}
}

// TestOtherGresTaken: jobs without a model type hold 950 of the 1000 GB
// of lscratch on node1 and node2, and a rubick job asking for 100 per node
// may not run on node3 or node4 (--exclude). It stays held until the
// scratch on node1 is free, then runs on a plan rubickd chose. Before
// rubick read the nodes' free GRES, it released the job onto a node
// Slurm could not give it the scratch on.
func TestOtherGresTaken(t *testing.T) {
	lt := newLabTest(t, "other-gres-taken", 2*time.Minute, "")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster
	var holders []string
	for _, node := range []string{"node1", "node2"} {
		id := strings.Split(l.run(t, "sbatch", "--parsable", "-p", "debug", "-w", node, "--gres=lscratch:950", "-o", "/dev/null", "--wrap", "sleep 300"), ";")[0]
		holders = append(holders, id)
		lt.ids = append(lt.ids, id)
	}
	// Running, so that the nodes list the scratch as taken.
	waitRunning(ctx, cluster, holders...)
	d := runDaemon(t, l, bin, dir, cfgPath)
	id := l.submitScript(t, dir, shortTraining(bin, dir, "bert", 32), &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-other-gres-taken",
		"-N", "1", "--gres=gpu:2,lscratch:100", "--exclude=node3,node4", "--requeue")
	heldUnplanned(t, lt, d, id, "while its scratch is taken")
	l.run(t, "scancel", holders[0])
	if j := completedOnPlan(t, lt, d, id); !slices.Equal(j.NodeList, []string{"node1"}) {
		t.Errorf("job %d ran on %v, want node1, whose scratch was freed", id, j.NodeList)
	}
}
