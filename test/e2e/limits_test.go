//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// TestSlurmLimit: the QOS allows 4 GPUs per job. On the idle lab rubick
// grows a roberta job asking for 2 GPUs to a whole node (it trains 3x
// faster on 8 than on 2), which Slurm holds back with QOSMaxGRESPerJob.
// rubickd then plans the job within its request, records the limit in its
// tag, and the job runs to completion.
func TestSlurmLimit(t *testing.T) {
	lt := newLabTest(t, "limit", 3*time.Minute, "log_level: debug\n")
	l, ctx, dir, bin, cfgPath, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cfgPath, lt.cluster

	l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "MaxTRESPerJob=gres/gpu=4")
	defer l.run(t, "sacctmgr", "-i", "modify", "qos", "normal", "set", "MaxTRESPerJob=gres/gpu=-1")

	d := runDaemon(t, l, bin, dir, cfgPath)

	body := shortTraining(bin, dir, "roberta", 64)
	id := l.submitScript(t, dir, body, &lt.ids, "--model-type=roberta", "-p", "gpu", "-J", "e2e-limit", "-N", "1",
		"--qos=normal", "--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=8", "--mem=32G", "--requeue")

	var (
		j   slurm.Job
		err error
	)
	held := false // seen held back by the QOS limit
	for ctx.Err() == nil {
		if j, err = cluster.Job(ctx, id); err == nil {
			held = held || j.Reason == "QOSMaxGRESPerJob"
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
	if j.Tag == nil || j.Tag.Extra["lim"] != "QOSMaxGRESPerJob" {
		t.Errorf("job %d tag %+v, want lim=QOSMaxGRESPerJob (held back: %v); rubickd log %s", id, j.Tag, held, d.log)
	}
	if len(j.NodeList) != 1 || j.GPUs > 2 {
		t.Errorf("job %d ran on %v with %d GPUs, want its request: one node, 2 GPUs at most", id, j.NodeList, j.GPUs)
	}
}
