package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// hupChildEnv names the configuration TestHelperStartup's child runs
// rubickd with.
const hupChildEnv = "RUBICKD_TEST_START_CONFIG"

// TestHelperStartup is rubickd in a child process of TestReloadDuringStart.
func TestHelperStartup(t *testing.T) {
	cfg := os.Getenv(hupChildEnv)
	if cfg == "" {
		t.Skip("runs as TestReloadDuringStart's child")
	}
	err := run(context.Background(), []string{"--config", cfg}, os.Stdout, os.Stderr)
	fmt.Println("run returned:", err)
}

// A SIGHUP (systemctl reload) that comes while rubickd starts does not end
// it: systemd counts an end by SIGHUP as clean and would not restart it.
// Here it comes while rubickd first asks slurmrestd for its version.
func TestReloadDuringStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := t.TempDir()
	pid := make(chan int, 1)
	var once sync.Once
	signalled := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() {
			if err := syscall.Kill(<-pid, syscall.SIGHUP); err != nil {
				t.Error(err)
			}
			time.Sleep(300 * time.Millisecond) // for the signal to land
			close(signalled)
		})
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer srv.Close()
	cfg := filepath.Join(dir, "rubickd.yaml")
	yaml := "store: " + filepath.Join(dir, "rubick.db") + "\nslurmrestd:\n  url: " + srv.URL + "\n  token_file: " + filepath.Join(dir, "jwt") +
		"\ncommands:\n  scontrol: " + filepath.Join(dir, "no-scontrol") + "\nlisten: \"\"\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "jwt"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestHelperStartup$", "-test.v")
	child.Env = append(os.Environ(), hupChildEnv+"="+cfg)
	var out bytes.Buffer
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid <- child.Process.Pid
	err := child.Wait()
	select {
	case <-signalled:
	case <-time.After(5 * time.Second):
		t.Fatalf("the child never reached slurmrestd: %v\n%s", err, out.String())
	}
	if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("rubickd ended by %v while starting:\n%s", ws.Signal(), out.String())
	}
}
