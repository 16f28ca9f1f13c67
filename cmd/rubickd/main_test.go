package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/launch/report"
)

// A second rubickd on a store another one holds stops before touching
// Slurm or the store; a dry run, which applies nothing, goes on.
func TestSecondInstanceRefused(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "rubick.db")
	cfg := filepath.Join(dir, "rubickd.yaml")
	// Nothing listens on port 1: a run that gets past the lock fails
	// connecting to slurmrestd.
	yaml := "store: " + store + "\nslurmrestd:\n  url: http://127.0.0.1:1\n  token_file: " + filepath.Join(dir, "jwt") + "\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "jwt"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := daemon.LockInstance(daemon.LockPath(store), daemon.NewInstance(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	ctx := context.Background()

	err = run(ctx, []string{"--config", cfg, "--once"}, io.Discard, io.Discard)
	if !errors.Is(err, daemon.ErrLocked) {
		t.Fatalf("--once beside a running rubickd: %v, want ErrLocked", err)
	}
	if _, serr := os.Stat(store); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the refused run opened the store (%v)", serr)
	}

	err = run(ctx, []string{"--config", cfg, "--dry-run"}, io.Discard, io.Discard)
	if err == nil || errors.Is(err, daemon.ErrLocked) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("--dry-run beside a running rubickd: %v, want it past the lock, failing at slurmrestd", err)
	}
}

// rubickd --check --json prints the checks as a JSON array, with a failed
// one (slurmrestd unreachable) in the exit status; --json alone is refused.
func TestCheckJSON(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rubickd.yaml")
	yaml := "store: " + filepath.Join(dir, "rubick.db") + "\nslurmrestd:\n  url: http://127.0.0.1:1\n  token_file: " + filepath.Join(dir, "jwt") +
		"\ncommands:\n  scontrol: " + filepath.Join(dir, "no-scontrol") + "\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err := run(context.Background(), []string{"--config", cfg, "--check", "--json"}, &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "checks failed") {
		t.Errorf("err = %v, want checks failed", err)
	}
	var got []daemon.CheckResult
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	status := map[string]string{}
	for _, r := range got {
		status[r.Name] = r.Status
	}
	if status["slurmrestd"] != daemon.CheckFail || status["commands.scontrol"] != daemon.CheckFail || status["store"] != daemon.CheckOK {
		t.Errorf("checks %+v: want slurmrestd and commands.scontrol failed, store ok", got)
	}
	if err := run(context.Background(), []string{"--config", cfg, "--json"}, io.Discard, io.Discard); err == nil {
		t.Error("--json without --check was accepted")
	}
}

// A file written at the default path after rubickd started on its
// defaults is read at the next reload; one read before and gone since is
// an error of the load, not a return to the defaults.
func TestConfigFile(t *testing.T) {
	def := filepath.Join(t.TempDir(), "rubickd.yaml")
	other := filepath.Join(t.TempDir(), "other.yaml")
	if got := configFile(def, "", def); got != "" {
		t.Fatalf("missing default file = %q, want the built-in defaults", got)
	}
	if got := configFile(other, "", def); got != other {
		t.Fatalf("a named file = %q, want it whether or not it exists", got)
	}
	if err := os.WriteFile(def, []byte("interval: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := configFile(def, "", def); got != def {
		t.Fatalf("default file written since = %q, want it read", got)
	}
	if err := os.Remove(def); err != nil {
		t.Fatal(err)
	}
	if got := configFile(def, def, def); got != def {
		t.Fatalf("default file read before, now gone = %q, want it named (its load fails)", got)
	}
}

// A sample the sender or its payload is at fault for is rejected; one
// rubickd could not check or store is an error of its own.
func TestAcceptResult(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "accepted"},
		{fmt.Errorf("%w: job_id=%q is not a Slurm job id", report.ErrBadSample, "x"), "rejected"},
		{fmt.Errorf("%w: uid 7 reported for job 4", report.ErrNotOwner), "rejected"},
		{fmt.Errorf("%w: bad notice", report.ErrBadLaunch), "rejected"},
		{fmt.Errorf("store the sample: %w", errors.New("database is locked")), "error"},
		{fmt.Errorf("read job 4: %w", errors.New("connection refused")), "error"},
	} {
		if got := acceptResult(tc.err); got != tc.want {
			t.Errorf("acceptResult(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
