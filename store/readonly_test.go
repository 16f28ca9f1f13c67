package store

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mattn/go-sqlite3"
)

// readOnlyEnv names the store TestHelperReader reads.
const readOnlyEnv = "RUBICK_STORE_READONLY_DB"

// TestHelperReader is the child process of TestReadOnlyUser: it reads the
// store ReadOnly as a user who may not write its directory, and fails
// unless it finds job 7 and a write is refused with ErrReadOnly.
func TestHelperReader(t *testing.T) {
	path := os.Getenv(readOnlyEnv)
	if path == "" {
		t.Skip("child process of TestReadOnlyUser")
	}
	readOnlyChecks(t, path)
}

func readOnlyChecks(t *testing.T, path string) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, path, ReadOnly())
	if err != nil {
		t.Fatalf("Open ReadOnly: %v", err)
	}
	defer s.Close()
	if j, err := s.Job(ctx, 7); err != nil || j.User != "alice" {
		t.Errorf("Job(7) = %+v, %v; want alice's job", j, err)
	}
	if err := s.UpsertJob(ctx, Job{ID: 8, Class: BestEffort, State: "PENDING"}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("UpsertJob on a read-only store = %v, want ErrReadOnly", err)
	}
}

// A user who may read the store but not write its directory (rubickd's,
// 0755 or 0750 with their group) reads it ReadOnly whether or not rubickd
// has it open: with rubickd running, through the shared-memory file it
// keeps; with rubickd stopped, SQLite cannot create that file, and the
// store, which no one has open, is read as immutable. As root the reader
// runs as nobody, in a child process.
func TestReadOnlyUser(t *testing.T) {
	base, err := os.MkdirTemp("", "rubick-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "st")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rubick.db")
	w := openTest(t, path)
	if err := w.UpsertJob(context.Background(), Job{ID: 7, Class: BestEffort, State: "PENDING", User: "alice"}); err != nil {
		t.Fatal(err)
	}
	read := readerAs(t, base, dir)
	t.Run("rubickd running", func(t *testing.T) { read(t, path) })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the store's log is still there after its last close (%v)", err)
	}
	t.Run("rubickd stopped", func(t *testing.T) { read(t, path) })
}

// readerAs returns how TestReadOnlyUser reads: in this process, with dir
// made read-only to it, or, as root, whom no file mode stops, in a copy of
// the test binary in base run as nobody.
func readerAs(t *testing.T, base, dir string) func(t *testing.T, path string) {
	if os.Getuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return readOnlyChecks
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "store.test")
	copyFile(t, os.Args[0], bin)
	return func(t *testing.T, path string) {
		cmd := exec.Command(bin, "-test.run=^TestHelperReader$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), readOnlyEnv+"="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("reader as nobody: %v\n%s", err, out)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestUnsharable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rubick.db")
	readonly := sqlite3.Error{Code: sqlite3.ErrReadonly}
	if !unsharable(path, readonly) || !unsharable(path, sqlite3.Error{Code: sqlite3.ErrCantOpen}) {
		t.Error("a read-only or can't-open failure with no log: want it read as immutable")
	}
	if unsharable(path, sqlite3.Error{Code: sqlite3.ErrCorrupt}) || unsharable(path, errors.New("other")) {
		t.Error("another failure: want it reported")
	}
	if err := os.WriteFile(path+"-wal", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if unsharable(path, readonly) {
		t.Error("a log beside the store (someone has it open, or crashed with it): want it not read as immutable")
	}
}
