package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestInstanceLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rubick.db.lock")
	l, err := LockInstance(path, NewInstance(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockInstance(path, NewInstance(time.Now()))
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d on ", os.Getpid())) {
		t.Fatalf("second lock: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l, err = LockInstance(path, NewInstance(time.Now()))
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l.Release()

	if _, err := LockInstance(filepath.Join(t.TempDir(), "missing", "x.lock"), NewInstance(time.Now())); err == nil || errors.Is(err, ErrLocked) {
		t.Errorf("lock in a missing directory: %v, want the open error", err)
	}
}

// A rubickd killed while holding the lock leaves none behind.
func TestInstanceLockDiesWithItsProcess(t *testing.T) {
	if path := os.Getenv("RUBICK_LOCK_HELPER"); path != "" {
		if _, err := LockInstance(path, NewInstance(time.Now())); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("locked")
		select {} // until killed
	}
	path := filepath.Join(t.TempDir(), "rubick.db.lock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestInstanceLockDiesWithItsProcess$")
	cmd.Env = append(os.Environ(), "RUBICK_LOCK_HELPER="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "locked" {
		t.Fatalf("helper said %q", line)
	}
	if _, err := LockInstance(path, NewInstance(time.Now())); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d on ", cmd.Process.Pid)) {
		t.Fatalf("while the helper holds it: %v, want ErrLocked naming pid %d", err, cmd.Process.Pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := LockInstance(path, NewInstance(time.Now()))
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	l.Release()
}

func TestLockHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rubick.db.lock")
	if who, held, err := LockHolder(path); err != nil || held || who != "" {
		t.Fatalf("no lock file: %q %v %v, want not held", who, held, err)
	}
	l, err := LockInstance(path, NewInstance(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if who, held, err := LockHolder(path); err != nil || !held || !strings.HasPrefix(who, fmt.Sprintf("pid %d on ", os.Getpid())) {
		t.Fatalf("held: %q %v %v, want held by pid %d", who, held, err, os.Getpid())
	}
	// Asking took nothing: the holder still has it, and after its release
	// the next rubickd gets it.
	if _, err := LockInstance(path, NewInstance(time.Now())); !errors.Is(err, ErrLocked) {
		t.Fatalf("after LockHolder: %v, want ErrLocked", err)
	}
	l.Release()
	if who, held, err := LockHolder(path); err != nil || held {
		t.Fatalf("released: %q %v %v, want not held", who, held, err)
	}
	l, err = LockInstance(path, NewInstance(time.Now()))
	if err != nil {
		t.Fatalf("lock after LockHolder: %v", err)
	}
	l.Release()
}
