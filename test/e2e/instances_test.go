//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// TestOtherRubickdStops: a rubickd sees a job's tag rewritten between two
// of its cycles with another rubickd's name in it (by=), as a second
// rubickd with a store of its own writes it. When the other started later,
// it writes the tag back under its own name and goes on. When the other
// started first, it exits with status 3 naming that rubickd, and the job
// runs on.
func TestOtherRubickdStops(t *testing.T) {
	lt := newLabTest(t, "instances", 2*time.Minute, "")
	l, ctx, dir, bin, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cluster

	logPath := dir + "/rubickd.log"
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin+"/rubickd", "--config", lt.cfgPath)
	cmd.Env, cmd.Stdout, cmd.Stderr = l.env, logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	body := longTraining(bin, dir)
	id := l.submitScript(t, dir, body, &lt.ids, "--model-type=bert", "-p", "gpu", "-J", "e2e-instances", "-N", "1",
		"--ntasks-per-node=1", "--gres=gpu:8", "--cpus-per-task=8", "--mem=32G", "--requeue")
	// rubickd starts it and names itself in the tag.
	by := regexp.MustCompile(` by=(\S+)`)
	var job slurm.Job
	for ctx.Err() == nil {
		if job, err = cluster.Job(ctx, id); err == nil && job.State == slurm.StateRunning && by.MatchString(job.AdminComment) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	self := by.FindStringSubmatch(job.AdminComment)
	if self == nil {
		t.Fatalf("job %d: %s, AdminComment %q; want it running with a tag naming rubickd; log %s", id, job.State, job.AdminComment, logPath)
	}
	if want := fmt.Sprintf("/%d/", cmd.Process.Pid); !strings.Contains(self[1], want) {
		t.Errorf("tag names %s, want rubickd's pid (%s)", self[1], want)
	}

	// A rubickd started after this one writes the tag: this one writes
	// it back under its own name, for the other to see and stop, and
	// goes on.
	const younger = "e2e-younger/4343/2099-01-01T00:00:00Z"
	l.run(t, "scontrol", "update", fmt.Sprintf("JobId=%d", id), "AdminComment="+by.ReplaceAllString(job.AdminComment, " by="+younger))
	for deadline := time.Now().Add(30 * time.Second); ctx.Err() == nil && time.Now().Before(deadline); {
		if job, err = cluster.Job(ctx, id); err == nil && strings.Contains(job.AdminComment, " by="+self[1]) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(job.AdminComment, " by="+self[1]) {
		t.Fatalf("job %d's tag still %q, want it written back by rubickd; log %s", id, job.AdminComment, logPath)
	}
	select {
	case <-exited:
		t.Fatalf("rubickd ended (%v) beside a younger rubickd; log %s", waitErr, logPath)
	default:
	}

	// A rubickd started before this one writes the tag.
	const other = "e2e-other/4242/2026-01-01T00:00:00Z"
	written := by.ReplaceAllString(job.AdminComment, " by="+other)
	written = regexp.MustCompile(` gen=\d+`).ReplaceAllString(written, " gen=99")
	l.run(t, "scontrol", "update", fmt.Sprintf("JobId=%d", id), "AdminComment="+written)

	select {
	case <-exited:
		var exit *exec.ExitError
		if !errors.As(waitErr, &exit) || exit.ExitCode() != 3 {
			t.Errorf("rubickd ended with %v, want exit status 3", waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("rubickd still runs 30 s after another rubickd's write; log %s", logPath)
	}
	log, _ := os.ReadFile(logPath)
	for _, want := range []string{"another rubickd is running", fmt.Sprintf("pid 4242 on e2e-other since 2026-01-01T00:00:00Z wrote job %d's tag", id), "started later and stops"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("rubickd's log lacks %q:\n%s", want, log)
		}
	}
	if job, err = cluster.Job(ctx, id); err != nil || job.State != slurm.StateRunning {
		t.Errorf("job %d after rubickd stopped: %s (%v), want it running on", id, job.State, err)
	}
}
