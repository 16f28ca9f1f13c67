package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/trainer"
)

// The test binary runs as the command when RUBICK_EMU_MAIN is set, so the
// signal tests exercise a real process.
func TestMain(m *testing.M) {
	if os.Getenv("RUBICK_EMU_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--micro-batch-size", "1", "--help"}, os.Getenv, &out, &errOut); code != exitOK {
		t.Fatalf("--help exit %d", code)
	}
	for _, f := range []string{"--train-iters", "--save", "--load", "--model-type", "--iter-ms", "--time-scale", "--checkpoint-exit-code", "default"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("help lacks %s", f)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"train iters": {"--micro-batch-size", "1", "--global-batch-size", "1", "--train-iters", "x"},
		"exit code":   {"--checkpoint-exit-code", "300"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(args, func(string) string { return "" }, &out, &errOut)
			if code != exitUsage || !strings.Contains(errOut.String(), args[len(args)-2]) {
				t.Errorf("exit %d, stderr %q; want %d naming %s", code, errOut.String(), exitUsage, args[len(args)-2])
			}
		})
	}
}

// start runs the command as a child process and returns it with a reader of
// its output.
func start(t *testing.T, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RUBICK_EMU_MAIN=1", "SLURM_GPUS_ON_NODE=2", "SLURM_PROCID=0", "SLURM_NTASKS=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// waitLines reads until n iteration lines have been printed.
func waitLines(t *testing.T, sc *bufio.Scanner, n int) {
	t.Helper()
	for seen := 0; seen < n; {
		if !sc.Scan() {
			t.Fatalf("output ended after %d iteration lines: %v", seen, sc.Err())
		}
		if strings.Contains(sc.Text(), "elapsed time per iteration (ms)") {
			seen++
		}
	}
}

func exitCode(t *testing.T, cmd *exec.Cmd, sc *bufio.Scanner) int {
	t.Helper()
	for sc.Scan() { // drain, so the child never blocks on a full pipe
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

func TestSignalCheckpointAndResume(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--micro-batch-size", "1", "--global-batch-size", "2", "--iter-ms", "20",
				"--save", dir, "--load", dir, "--train-iters", "100000"}
			cmd, sc := start(t, args...)
			waitLines(t, sc, 3)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := exitCode(t, cmd, sc); code != exitCheckpointed {
				t.Fatalf("exit %d after %v, want %d", code, sig, exitCheckpointed)
			}
			saved, err := trainer.ReadTracker(dir)
			if err != nil || saved < 3 {
				t.Fatalf("tracker %d, %v; want >= 3", saved, err)
			}

			// The restart resumes and stops at --train-iters in total.
			args[len(args)-1] = strconv.Itoa(saved + 2)
			cmd, sc = start(t, args...)
			var out strings.Builder
			deadline := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
			defer deadline.Stop()
			for sc.Scan() {
				out.WriteString(sc.Text() + "\n")
			}
			if code := exitCode(t, cmd, sc); code != exitOK {
				t.Fatalf("resumed run exit %d:\n%s", code, out.String())
			}
			if !strings.Contains(out.String(), "loading checkpoint from "+dir+" at iteration "+strconv.Itoa(saved)) ||
				strings.Count(out.String(), "elapsed time per iteration") != 2 {
				t.Errorf("resumed run did not resume from %d for 2 iterations:\n%s", saved, out.String())
			}
			if n, _ := trainer.ReadTracker(dir); n != saved+2 {
				t.Errorf("tracker %d after the resumed run, want %d", n, saved+2)
			}
		})
	}
}

func TestCheckpointExitCode(t *testing.T) {
	cmd, sc := start(t, "--micro-batch-size", "1", "--global-batch-size", "2", "--iter-ms", "20",
		"--train-iters", "100000", "--checkpoint-exit-code", "0")
	waitLines(t, sc, 1)
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd, sc); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
}
