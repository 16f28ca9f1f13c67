package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rubick-sched/rubick/daemon"
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
	held, err := daemon.LockInstance(daemon.LockPath(store))
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
