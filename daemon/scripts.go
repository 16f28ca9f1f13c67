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

	"golang.org/x/sys/unix"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/slurm"
)

// ScriptReader gives a job's batch script (slurm.BatchScripts).
type ScriptReader interface {
	BatchScript(ctx context.Context, id int) (string, error)
}

// maxScriptReads bounds the batch scripts one cycle reads, and
// scriptReadTime the time it spends reading them (a slow slurmctld, a
// hung file system); the jobs past either are read in the next cycles.
// A pending job among them waits for its read, maxScriptWaits cycles at
// most, and is planned as before its read past them: started on its
// model type's batch, a line of another would refuse the plan and the
// job restart, while reads slowed to a trickle must not hold jobs back.
const (
	maxScriptReads = 64
	scriptReadTime = 2 * time.Second
	maxScriptWaits = 3
)

// scriptRead is what a batch script told, read once: what its rubick-srun
// line cannot express, and its global batch when batch (a DeepSpeed
// line's config may be out of reach where its flags are not).
type scriptRead struct {
	cannot model.Features
	gb     int
	batch  bool
	// line is kept while the batch waits for a config read that could not
	// start (errFilesBusy), to read it in a later cycle without the script.
	line *launch.ScriptLine
}

// scriptFacts returns, for the pending and running jobs among jobs that
// have not reported their launch line (reported), what the rubick-srun
// line of their batch script says: what it cannot express and the global
// batch it trains with; and the pending jobs whose scripts the cycle's
// reads did not reach, to wait for them (maxScriptWaits). Until a job's
// rubick-srun reports at its start these are its best facts: its user's
// last job of the model type may have run another line. A job that runs
// without reporting (no samples endpoint) keeps them: a restart on a plan
// its line cannot run would end it. A script rubick cannot read (a launch
// line built at run time) gives nothing, and the job is planned as
// before; so does the batch of a line whose DeepSpeed config rubickd may
// not open.
func (d *Daemon) scriptFacts(ctx context.Context, jobs []slurm.Job, reported map[int]bool) (map[int]scriptRead, map[int]bool) {
	if d.deps.Scripts == nil || !d.cfg.ReadBatchScripts {
		// A reload that turned the reads off: what they told is dropped,
		// not kept for as long as they stay off.
		clear(d.scripts)
		clear(d.scriptWaits)
		return nil, nil
	}
	seen := make(map[int]bool)
	out, unread, waited := map[int]scriptRead{}, map[int]bool{}, map[int]bool{}
	reads, start := 0, d.deps.Now()
	for _, j := range jobs {
		if j.Tag == nil || j.Tag.ModelType == "" || j.State != slurm.StatePending && j.State != slurm.StateRunning || reported[j.ID] || j.Interactive {
			continue
		}
		sid := scriptID(j)
		seen[sid] = true
		r, ok := d.scripts[sid]
		again := ok && r != nil && r.line != nil
		if (!ok || again) && reads < maxScriptReads && d.deps.Now().Sub(start) < scriptReadTime {
			reads++
			if again {
				r = d.lineFacts(ctx, j, *r.line)
			} else {
				var err error
				r, err = d.scriptLaunch(ctx, j)
				d.scriptMissed(err)
			}
			d.scripts[sid] = r
			delete(d.scriptWaits, sid)
		} else if !ok && j.State == slurm.StatePending && d.inRun {
			if !waited[sid] { // once a cycle for an array's tasks
				waited[sid] = true
				d.scriptWaits[sid]++
			}
			if d.scriptWaits[sid] <= maxScriptWaits {
				unread[j.ID] = true
			}
		}
		if r != nil {
			out[j.ID] = *r
		}
	}
	for id := range d.scripts {
		if !seen[id] {
			delete(d.scripts, id) // reported, ended or gone
		}
	}
	for id := range d.scriptWaits {
		if !seen[id] {
			delete(d.scriptWaits, id)
		}
	}
	return out, unread
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
// tells, as rubick-srun would report it; nil when it tells nothing.
func (d *Daemon) scriptLaunch(ctx context.Context, j slurm.Job) (*scriptRead, error) {
	sl, err := d.scriptLine(ctx, j)
	if err != nil {
		d.deps.Logger.Debug("batch script not read; the job is planned from its user's last launch line until it reports its own", "job", j.ID, "err", err)
		return nil, err
	}
	return d.lineFacts(ctx, j, sl), nil
}

// lineFacts is what launch line sl of job j tells, reading its DeepSpeed
// config as the job's user; nil when it tells nothing.
func (d *Daemon) lineFacts(ctx context.Context, j slurm.Job, sl launch.ScriptLine) *scriptRead {
	log := d.deps.Logger.With("job", j.ID)
	read := d.deps.ReadUserFile
	if read == nil {
		read = d.readUserFile
	}
	// The GPUs its user asked for, which a Hugging Face line's batch is
	// per-device batch x accumulation x.
	req := userRequest(j)
	f, err := sl.Facts(func(name string) ([]byte, error) { return read(ctx, j.User, j.WorkDir, name) }, req.Nodes*req.GPUsPerNode)
	if err != nil {
		log.Debug("batch script not read; the job is planned from its user's last launch line until it reports its own", "err", err)
		return nil
	}
	r := &scriptRead{cannot: f.Cannot, gb: f.GlobalBatch, batch: f.BatchErr == nil}
	switch {
	case errors.Is(f.BatchErr, errFilesBusy):
		r.line = &sl
		log.Debug("global batch not read off the batch script yet: its DeepSpeed config waits for earlier reads of users' files", "cannot", f.Cannot.String(), "err", f.BatchErr)
	case f.BatchErr != nil:
		log.Debug("global batch not read off the batch script; the job is planned at its user's last one until it reports its own", "cannot", f.Cannot.String(), "err", f.BatchErr)
	default:
		log.Debug("launch line read off the batch script", "cannot", f.Cannot.String(), "global_batch", f.GlobalBatch)
	}
	return r
}

// scriptID is the job whose batch script job j runs: the tasks of an
// array share the array's.
func scriptID(j slurm.Job) int {
	if j.ArrayJobID > 0 {
		return j.ArrayJobID
	}
	return j.ID
}

// scriptLine is the rubick-srun line of job j's batch script.
func (d *Daemon) scriptLine(ctx context.Context, j slurm.Job) (launch.ScriptLine, error) {
	s, err := d.deps.Scripts.BatchScript(ctx, scriptID(j))
	if err != nil {
		return launch.ScriptLine{}, err
	}
	return launch.FromScript(s)
}

// readUserFile is ReadUserFile with at most maxUserFileReads reads
// outstanding: a read a hung file system keeps goes on in the background
// past its timeout and holds an OS thread, so rubickd starts no more once
// that many are stuck, and warns once until one returns.
func (d *Daemon) readUserFile(ctx context.Context, userName, workDir, name string) ([]byte, error) {
	b, err := d.files.read(ctx, userName, workDir, name)
	switch {
	case errors.Is(err, errFilesBusy) && !d.filesBusy:
		d.filesBusy = true
		d.deps.Logger.Warn("reads of users' DeepSpeed configs have not returned (a hung file system?); rubickd reads no more until one does, and plans those jobs at their users' last global batch",
			"outstanding", maxUserFileReads, "err", err)
	case !errors.Is(err, errFilesBusy):
		d.filesBusy = false
	}
	return b, err
}

// userFileTimeout bounds one read of a user's file: a hung network file
// system must not hold the cycle (the read goes on in the background).
// maxUserFileReads bounds such background reads.
const (
	userFileTimeout  = 2 * time.Second
	maxUserFileBytes = 1 << 20
	maxUserFileReads = 4
)

var (
	// errNotUsers is a file rubickd will not read for a user's job.
	errNotUsers = errors.New("not a regular file of the job's user")
	// errFilesBusy is a read not started: maxUserFileReads are outstanding.
	errFilesBusy = errors.New("earlier reads of users' files have not returned")
)

// userFiles reads users' files with a bounded number outstanding; its
// zero value has no bound.
type userFiles struct {
	slots chan struct{}
	// open and timeout replace readOwned and userFileTimeout in tests.
	open    func(userName, name string) ([]byte, error)
	timeout time.Duration
}

func newUserFiles(n int) userFiles { return userFiles{slots: make(chan struct{}, n)} }

// ReadUserFile reads the file a job's launch line names (its DeepSpeed
// config), relative to the job's working directory, as far as the job's
// user could: only a regular file that user owns, of at most 1 MiB, so
// that rubickd, which may read any file, tells no one more than their own
// files say. Paths the script leaves to its run are refused.
func ReadUserFile(ctx context.Context, userName, workDir, name string) ([]byte, error) {
	return userFiles{}.read(ctx, userName, workDir, name)
}

func (u userFiles) read(ctx context.Context, userName, workDir, name string) ([]byte, error) {
	if strings.Contains(name, launch.Unresolved) {
		return nil, fmt.Errorf("%w: %q is set only when the job runs", launch.ErrUnresolvable, launch.ShowUnresolved(name))
	}
	if !filepath.IsAbs(name) {
		if !filepath.IsAbs(workDir) {
			return nil, fmt.Errorf("%s: the job has no working directory", name)
		}
		name = filepath.Join(workDir, name)
	}
	if u.slots != nil {
		select {
		case u.slots <- struct{}{}:
		default:
			return nil, fmt.Errorf("%s: %w (%d)", name, errFilesBusy, cap(u.slots))
		}
	}
	type result struct {
		b   []byte
		err error
	}
	open, timeout := u.open, u.timeout
	if open == nil {
		open = readOwned
	}
	if timeout == 0 {
		timeout = userFileTimeout
	}
	done := make(chan result, 1)
	go func() {
		// The user's lookup too: a directory service can hang as well.
		b, err := open(userName, name)
		// The slot is given back before the result, so that the caller's
		// next read, made as soon as this one returns, finds it free.
		if u.slots != nil {
			<-u.slots
		}
		done <- result{b, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", name, ctx.Err())
	}
}

// readOwned reads file name if it is a regular file of userName's.
func readOwned(userName, name string) ([]byte, error) {
	u, err := user.Lookup(userName)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", userName, u.Uid, err)
	}
	// O_PATH opens the file without opening it for reading: a device's
	// open, which rubickd may make and its user may not, can act (a
	// watchdog starts, a tape rewinds at the close), and a FIFO's opens
	// release its writers. The file read is then this one, opened again
	// through /proc once it is known to be a regular file of the user's,
	// whatever the path names by then.
	p, err := os.OpenFile(name, unix.O_PATH|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	st, err := ownedRegular(p, uint32(uid))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if st.Size() > maxUserFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", name, st.Size(), maxUserFileBytes)
	}
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(p.Fd())), os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer f.Close()
	st2, err := ownedRegular(f, uint32(uid))
	if err != nil || !os.SameFile(st, st2) {
		return nil, fmt.Errorf("%s: %w", name, errNotUsers)
	}
	return io.ReadAll(io.LimitReader(f, maxUserFileBytes))
}

// ownedRegular is f's stat when f is a regular file of uid's, else
// errNotUsers.
func ownedRegular(f *os.File, uid uint32) (os.FileInfo, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.Mode().IsRegular() || !ok || sys.Uid != uid {
		return nil, errNotUsers
	}
	return st, nil
}

// started: job j runs, or ran before it was requeued.
func started(j slurm.Job) bool {
	return j.State == slurm.StateRunning || j.State == slurm.StatePending && (j.RestartCount > 0 || !j.StartTime.IsZero())
}
