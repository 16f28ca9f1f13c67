package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// ScriptReader gives a job's batch script (slurm.BatchScripts).
type ScriptReader interface {
	BatchScript(ctx context.Context, id int) (string, error)
}

// maxScriptReads bounds the batch scripts one cycle reads; the jobs past
// it are read in the next cycles, planned meanwhile as before their read.
const maxScriptReads = 16

// scriptRead is what a job's batch script told, read once per job.
type scriptRead struct {
	launch store.Launch
	ok     bool // false: the script tells nothing rubick can use
}

// scriptFacts returns, for the pending jobs among jobs that have never
// started, what the rubick-srun line of their batch script says: what it
// cannot express and the global batch it trains with. Until a job's
// rubick-srun reports at its start these are its best facts: its user's
// last job of the model type may have run another line. A script rubick
// cannot read (a launch line built at run time, a DeepSpeed config it may
// not open) gives nothing, and the job is planned as before.
func (d *Daemon) scriptFacts(ctx context.Context, jobs []slurm.Job) map[int]store.Launch {
	if d.deps.Scripts == nil || !d.cfg.ReadBatchScripts {
		return nil
	}
	seen := make(map[int]bool)
	out := map[int]store.Launch{}
	reads := 0
	for _, j := range jobs {
		if j.Tag == nil || j.Tag.ModelType == "" || j.State != slurm.StatePending || j.RestartCount > 0 || !j.StartTime.IsZero() || j.Interactive {
			continue
		}
		seen[j.ID] = true
		r, ok := d.scripts[j.ID]
		if !ok {
			if reads == maxScriptReads {
				continue
			}
			reads++
			l, err := d.scriptLaunch(ctx, j)
			if err != nil {
				d.deps.Logger.Debug("batch script not read; the job is planned from its user's last launch line until it reports its own", "job", j.ID, "err", err)
			}
			d.scriptMissed(err)
			r = scriptRead{launch: l, ok: err == nil}
			d.scripts[j.ID] = r
		}
		if r.ok {
			out[j.ID] = r.launch
		}
	}
	for id := range d.scripts {
		if !seen[id] {
			delete(d.scripts, id) // started, ended or gone
		}
	}
	return out
}

// scriptMisses is how many batch scripts of pending jobs in a row Slurm
// did not give before rubickd warns: it gives them to operators and
// administrators only, saying so on stderr with exit 0.
const scriptMisses = 3

// scriptMissed counts the reads Slurm gave no script for, and warns once
// when scriptMisses of them came in a row.
func (d *Daemon) scriptMissed(err error) {
	if err == nil {
		d.scriptMiss = 0
		return
	}
	if !errors.Is(err, slurm.ErrNoScript) {
		return // the script's own fault
	}
	if d.scriptMiss++; d.scriptMiss == scriptMisses {
		d.deps.Logger.Warn("Slurm gives rubickd no batch scripts: run it as root or as a Slurm operator (sacctmgr modify user NAME set adminlevel=operator), or set read_batch_scripts: false; jobs are planned from their users' last launch lines until they start",
			"misses", d.scriptMiss, "err", err)
	}
}

// scriptLaunch reads job j's batch script and what its rubick-srun line
// tells, as rubick-srun would report it.
func (d *Daemon) scriptLaunch(ctx context.Context, j slurm.Job) (store.Launch, error) {
	id := j.ID
	if j.ArrayJobID > 0 {
		id = j.ArrayJobID // its tasks share the array's script
	}
	s, err := d.deps.Scripts.BatchScript(ctx, id)
	if err != nil {
		return store.Launch{}, err
	}
	sl, err := launch.FromScript(s)
	if err != nil {
		return store.Launch{}, err
	}
	cannot, _, err := launch.Cannot(sl.Train, launch.Options{Dialect: sl.Dialect})
	if err != nil {
		return store.Launch{}, err
	}
	read := d.deps.ReadUserFile
	if read == nil {
		read = ReadUserFile
	}
	gb, err := launch.GlobalBatch(sl.Train, launch.Options{Dialect: sl.Dialect, GlobalBatch: sl.GlobalBatch,
		ReadFile: func(name string) ([]byte, error) { return read(ctx, j.User, j.WorkDir, name) }})
	if err != nil {
		return store.Launch{}, err
	}
	if gb > report.MaxGlobalBatch {
		return store.Launch{}, fmt.Errorf("%w: global batch %d is above %d", launch.ErrBadInput, gb, report.MaxGlobalBatch)
	}
	return store.Launch{Cannot: cannot, GlobalBatch: gb}, nil
}

// userFileTimeout bounds one read of a user's file: a hung network file
// system must not hold the cycle (the read goes on in the background).
const (
	userFileTimeout  = 2 * time.Second
	maxUserFileBytes = 1 << 20
)

// errNotUsers is a file rubickd will not read for a user's job.
var errNotUsers = errors.New("not a regular file of the job's user")

// ReadUserFile reads the file a job's launch line names (its DeepSpeed
// config), relative to the job's working directory, as far as the job's
// user could: only a regular file that user owns, of at most 1 MiB, so
// that rubickd, which may read any file, tells no one more than their own
// files say. Paths the script leaves to its run are refused.
func ReadUserFile(ctx context.Context, userName, workDir, name string) ([]byte, error) {
	if strings.Contains(name, launch.Unresolved) {
		return nil, fmt.Errorf("%w: %q is set only when the job runs", launch.ErrUnresolvable, strings.ReplaceAll(name, launch.Unresolved, "$"))
	}
	if !filepath.IsAbs(name) {
		if !filepath.IsAbs(workDir) {
			return nil, fmt.Errorf("%s: the job has no working directory", name)
		}
		name = filepath.Join(workDir, name)
	}
	u, err := user.Lookup(userName)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", userName, u.Uid, err)
	}
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := readOwned(name, uint32(uid))
		done <- result{b, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, userFileTimeout)
	defer cancel()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", name, ctx.Err())
	}
}

func readOwned(name string, uid uint32) ([]byte, error) {
	// O_NONBLOCK: a FIFO must not block the open.
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.Mode().IsRegular() || !ok || sys.Uid != uid {
		return nil, fmt.Errorf("%s: %w", name, errNotUsers)
	}
	if st.Size() > maxUserFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", name, st.Size(), maxUserFileBytes)
	}
	return io.ReadAll(io.LimitReader(f, maxUserFileBytes))
}
