package daemon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// ErrLocked means another rubickd holds the instance lock.
var ErrLocked = errors.New("another rubickd is running")

// InstanceLock keeps a second rubickd from acting on the cluster a first
// one manages from the same store: two would both apply plans, restarting
// and resizing the same jobs against each other.
type InstanceLock struct {
	f *os.File
}

// LockPath is the lock file of the store at path.
func LockPath(store string) string { return store + ".lock" }

// LockInstance takes the lock at path for rubickd self without waiting,
// creating the file if needed, and writes who holds it there
// (self.Describe). The lock is an flock on the open file: the kernel drops
// it when the process ends however it ends, so a crash never leaves a
// stale lock behind, and the next start takes it.
func LockInstance(path string, self Instance) (*InstanceLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("instance lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := io.ReadAll(io.LimitReader(f, 512))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is held by %s", ErrLocked, path, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("instance lock %s: %w", path, err)
	}
	who := self.Describe() + "\n"
	if err := f.Truncate(0); err == nil {
		// Who holds it is only for the next one's error message.
		_, _ = f.WriteAt([]byte(who), 0)
	}
	return &InstanceLock{f: f}, nil
}

// LockHolder reports whether a rubickd holds the lock at path, and who,
// without taking it for longer than the test or writing anything.
func LockHolder(path string) (holder string, held bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil // every rubickd creates it
	}
	if err != nil {
		return "", false, fmt.Errorf("instance lock: %w", err)
	}
	defer f.Close()
	// A shared lock is refused while a rubickd holds its exclusive one.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return "", false, fmt.Errorf("instance lock %s: %w", path, err)
		}
		text, _ := io.ReadAll(io.LimitReader(f, 512))
		return strings.TrimSpace(string(text)), true, nil
	}
	return "", false, nil // closing drops the shared lock
}

// Release drops the lock. The file stays: removing it could let a
// rubickd starting at that moment lock a file no longer on the path.
func (l *InstanceLock) Release() error {
	return l.f.Close()
}
