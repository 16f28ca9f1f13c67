package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// faultKind is how the command a fault is injected at fails.
type faultKind string

const (
	// faultRefused: Slurm does not take the command (rc=1).
	faultRefused faultKind = "refused"
	// faultPartial: a multi-field update is taken but for one field, and
	// reported failed (rc=1), as the lab found Slurm does.
	faultPartial faultKind = "partial"
	// faultPartialCrash: a multi-field update is taken but for one field,
	// and rubickd dies right after, before it can act on the failure.
	faultPartialCrash faultKind = "partial, then crash"
	// faultTimeout: Slurm takes the command, which is killed at its
	// timeout before it says so (exit code -1).
	faultTimeout faultKind = "timeout"
	// faultTimeoutLost: the command is killed at its timeout before
	// slurmctld took it (exit code -1), as when slurmctld is too busy to
	// answer.
	faultTimeoutLost faultKind = "timeout, not taken"
	// faultCrash: Slurm takes the command, and rubickd dies right after.
	faultCrash faultKind = "crash"
	// faultStoreCrash: rubickd dies right after the at-th write of its
	// store (counted, as the commands are, from the cycle's or the
	// recovery's start), between it and the next command.
	faultStoreCrash faultKind = "crash after store write"
	// faultStoreError: the at-th write of the store fails (a full disk,
	// an I/O error) and writes nothing; rubickd goes on.
	faultStoreError faultKind = "store write failing"
)

// fault is one failure point: the at-th command that changes Slurm fails
// as kind says, or, for faultStoreCrash, rubickd crashes after the at-th
// store write; field is the update's field (0 is the first after the job)
// a partial update leaves out.
type fault struct {
	at    int
	kind  faultKind
	field int
}

func (f fault) String() string {
	switch f.kind {
	case faultPartial, faultPartialCrash:
		return fmt.Sprintf("command %d %s without field %d", f.at, f.kind, f.field)
	case faultStoreCrash, faultStoreError:
		return fmt.Sprintf("%s %d", f.kind, f.at)
	}
	return fmt.Sprintf("command %d %s", f.at, f.kind)
}

// readFault is a failure point of reads: the at-th read of a cycle (of
// the jobs, the nodes, the limits, the budgets, the reservations, a job,
// a job's mail types) fails as it does when slurmrestd or slurmctld is
// down; with down, every read after it too, to the cycle's end.
type readFault struct {
	at   int
	down bool
}

func (f readFault) String() string {
	if f.down {
		return fmt.Sprintf("reads from %d failing", f.at)
	}
	return fmt.Sprintf("read %d failing", f.at)
}

// errCrashed is every answer a rubickd that crashed still gets.
var errCrashed = errors.New("rubickd crashed")

// faultSlurm is a Slurm that keeps its jobs' state (state, hold, nodes,
// size, tag, restart count), changed by the scontrol and scancel commands
// the Applier runs as Slurm changes them, and read back through a
// slurmConn as slurmrestd reads them. A fault makes one command fail, a
// readFault one read or all from one on.
type faultSlurm struct {
	mu    sync.Mutex
	jobs  []slurm.Job
	nodes []slurm.Node
	mail  map[int]string
	// epoch counts the crashes: a slurmConn of an earlier one is a dead
	// rubickd's.
	epoch int
	// cmds counts the commands run that change Slurm (all but show);
	// writes the store writes of the live rubickd.
	cmds   int
	writes int
	fault  fault
	// then is a second failure point of the first cycle's commands.
	then fault
	// crash stops the rubickd that ran the crashing command.
	crash func()
	// argv lists the commands run that change Slurm, in order.
	argv [][]string
	// requeues counts each job's requeuehold commands.
	requeues map[int]int
	// reads counts the reads, readFault fails them, and readLog names
	// each (jobs, nodes, job 91, mail 91, ...), in order.
	reads     int
	readFault readFault
	readLog   []string
	// failedRead names the first read that failed; cmdsAtRead is how
	// many commands had run then.
	failedRead string
	cmdsAtRead int
	// broken lists what Slurm was left with that must never be: a tag
	// that does not parse, a generation that goes back.
	broken []string
	nextID int
	// srun has each job requeue itself at the checkpoint signal, as
	// rubick-srun does once its trainer checkpointed: its Comment marked
	// (rubick:requeue), then requeued held.
	srun bool
	// userHeld are the jobs their users requeued held (userRequeueHold).
	userHeld map[int]bool
	// willRequeue is the store write, counted as writes, of the live
	// rubickd's last record of a requeue it is about to issue.
	willRequeue int
}

// userRequeueHold is job id's user's scontrol requeuehold: a running job
// is requeued held (its restart count up one, its Comment without
// rubick-srun's mark); one waiting held for rubick's release the user
// releases first, and Slurm starts. It reports whether the job was
// requeued; not one pending and released, which requeuehold refuses.
func (s *faultSlurm) userRequeueHold(id int) bool {
	j, err := s.find(strconv.Itoa(id))
	if err != nil || j.State == slurm.StatePending && !j.Held {
		return false
	}
	if j.State == slurm.StatePending {
		j.Held, j.Reason, j.Priority = false, "", 1
		j.State, j.NodeList, j.BatchHost, j.GPUs, j.StartTime = slurm.StateRunning, []string{s.nodes[0].Name}, s.nodes[0].Name, j.GPUsPerNode, t0
	}
	j.Comment = slurm.WithoutWord(j.Comment, slurm.RequeueWord)
	requeueHeld(j)
	if s.userHeld == nil {
		s.userHeld = map[int]bool{}
	}
	s.userHeld[id] = true
	return true
}

func newFaultSlurm(nodes int, jobs ...slurm.Job) *faultSlurm {
	s := &faultSlurm{nodes: labNodes(nodes), mail: map[int]string{}, requeues: map[int]int{}, nextID: 1000}
	for _, j := range jobs {
		if j.AdminComment == "" && j.Tag != nil {
			j.AdminComment = j.Tag.String()
		}
		j.Tag, j.TagErr = slurm.TagFromAdminComment(j.AdminComment)
		if j.Held && j.Reason == "" {
			j.Reason = "JobHeldUser" // job_submit.lua's hold
		}
		s.jobs = append(s.jobs, j)
	}
	return s
}

// slurmConn is one rubickd's way to Slurm: reads (a Cluster) and commands
// (a slurm.Runner). A crash cuts it.
type slurmConn struct {
	s     *faultSlurm
	epoch int
}

func (s *faultSlurm) conn() *slurmConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &slurmConn{s: s, epoch: s.epoch}
}

func (c *slurmConn) live() bool {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.epoch == c.s.epoch
}

// errStoreWrite is a store write's failure (faultStoreError).
var errStoreWrite = errors.New("disk I/O error")

// failWrite counts a store write of c's rubickd that s.fault fails
// (faultStoreError), and reports whether it does.
func (c *slurmConn) failWrite() bool {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fault.kind != faultStoreError || s.fault.at != s.writes+1 {
		return false
	}
	s.writes++
	return true
}

// wrote counts a store write of c's rubickd, and crashes it there when
// s.fault says so.
func (c *slurmConn) wrote() {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.epoch != s.epoch {
		return
	}
	s.writes++
	if s.fault.kind == faultStoreCrash && s.fault.at == s.writes {
		s.epoch++
		s.crash()
	}
}

// read is a read of what by conn c (its lock held): errCrashed for a dead
// rubickd's, the error s.readFault says, or nil.
func (c *slurmConn) read(what string) error {
	s := c.s
	if c.epoch != s.epoch {
		return errCrashed
	}
	s.reads++
	s.readLog = append(s.readLog, what)
	f := s.readFault
	if f.at == 0 || s.reads < f.at || s.reads > f.at && !f.down {
		return nil
	}
	if s.failedRead == "" {
		s.failedRead, s.cmdsAtRead = what, s.cmds
	}
	return fmt.Errorf("read %s: %w", what, slurm.ErrUnavailable)
}

func (c *slurmConn) Jobs(context.Context, time.Time) ([]slurm.Job, bool, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if err := c.read("jobs"); err != nil {
		return nil, false, err
	}
	return c.s.cloneJobs(), true, nil
}

func (c *slurmConn) Job(_ context.Context, id int) (slurm.Job, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if err := c.read("job " + strconv.Itoa(id)); err != nil {
		return slurm.Job{}, err
	}
	for _, j := range c.s.cloneJobs() {
		if j.ID == id {
			return j, nil
		}
	}
	return slurm.Job{}, slurm.ErrNotFound
}

// Nodes counts the running jobs' GPUs, CPUs and memory on their nodes.
func (c *slurmConn) Nodes(context.Context) ([]slurm.Node, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if err := c.read("nodes"); err != nil {
		return nil, err
	}
	nodes := slices.Clone(c.s.nodes)
	for i := range nodes {
		n := &nodes[i]
		for _, j := range c.s.jobs {
			if j.State != slurm.StateRunning || !slices.Contains(j.NodeList, n.Name) {
				continue
			}
			n.GPUsUsed += j.GPUsPerNode
			n.CPUsAlloc += j.CPUs / len(j.NodeList)
			n.MemAllocMB += j.MemPerNodeMB
		}
		if n.GPUsUsed > 0 || n.CPUsAlloc > 0 {
			n.State = "MIXED"
		}
	}
	return nodes, nil
}

// Limits lists no limit but a QOS map, so that the budgets are read too.
func (c *slurmConn) Limits(context.Context) (slurm.Limits, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if err := c.read("limits"); err != nil {
		return slurm.Limits{}, err
	}
	return slurm.Limits{QOS: map[string]slurm.QOS{}}.Indexed(), nil
}

func (c *slurmConn) Budgets(context.Context, slurm.BudgetScope) (slurm.Budgets, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return slurm.Budgets{}, c.read("budgets")
}

func (c *slurmConn) Reservations(context.Context) ([]slurm.Reservation, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return nil, c.read("reservations")
}

func (c *slurmConn) Ping(context.Context) error                            { return nil }
func (c *slurmConn) Partitions(context.Context) ([]slurm.Partition, error) { return nil, nil }
func (c *slurmConn) Submit(context.Context, slurm.SubmitRequest) (int, error) {
	return 0, errors.New("not supported")
}

func (c *slurmConn) Run(ctx context.Context, argv []string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if len(argv) > 2 && argv[0] == "scontrol" && argv[1] == "show" {
		if err := c.read("mail " + argv[len(argv)-1]); err != nil {
			return nil, &slurm.CommandError{Argv: argv, ExitCode: 1, Stderr: "slurm_load_jobs error: Unable to contact slurm controller (connect failure)", Err: err}
		}
	} else if c.epoch != c.s.epoch {
		return nil, errCrashed
	}
	return c.s.run(argv)
}

func (s *faultSlurm) cloneJobs() []slurm.Job {
	out := slices.Clone(s.jobs)
	for i := range out {
		out[i].NodeList = slices.Clone(out[i].NodeList)
		out[i].RequiredNodes = slices.Clone(out[i].RequiredNodes)
		out[i].Tag, out[i].TagErr = slurm.TagFromAdminComment(out[i].AdminComment)
	}
	return out
}

// run runs argv as Slurm would, failing it as s.fault or s.then says.
func (s *faultSlurm) run(argv []string) ([]byte, error) {
	if len(argv) > 2 && argv[0] == "scontrol" && argv[1] == "show" {
		id, _, _ := strings.Cut(argv[len(argv)-1], "_")
		n, _ := strconv.Atoi(id)
		return fmt.Appendf(nil, "JobId=%s JobName=train MailUser=alice MailType=%s\n", argv[len(argv)-1], cmp.Or(s.mail[n], "NONE")), nil
	}
	s.cmds++
	s.argv = append(s.argv, slices.Clone(argv))
	f := s.fault
	if f.at != s.cmds {
		f = s.then
	}
	if f.at != s.cmds {
		f = fault{}
	}
	fail := func(code int, stderr string, err error) error {
		return &slurm.CommandError{Argv: argv, ExitCode: code, Stderr: stderr, Err: err}
	}
	switch f.kind {
	case faultRefused:
		return nil, fail(1, "slurm_update error: Unable to contact slurm controller (connect failure)", errors.New("exit status 1"))
	case faultTimeoutLost:
		return nil, fail(-1, "", context.DeadlineExceeded)
	}
	skip := -1
	if f.kind == faultPartial || f.kind == faultPartialCrash {
		skip = f.field
	}
	if err := s.apply(argv, skip); err != nil {
		return nil, fail(1, err.Error(), errors.New("exit status 1"))
	}
	switch f.kind {
	case faultPartial:
		return nil, fail(1, "slurm_update error: Invalid generic resource (gres) specification", errors.New("exit status 1"))
	case faultTimeout:
		return nil, fail(-1, "", context.DeadlineExceeded)
	case faultCrash, faultPartialCrash:
		s.epoch++
		s.crash()
	}
	return nil, nil
}

// find is the job ref names ("JobId=12", "12", "50_3"); for a task still
// in its array's record, the task split off that record.
func (s *faultSlurm) find(ref string) (*slurm.Job, error) {
	ref = strings.TrimPrefix(ref, "JobId=")
	id, task, isTask := strings.Cut(ref, "_")
	n, err := strconv.Atoi(id)
	if err != nil {
		return nil, fmt.Errorf("Invalid job id specified: %q", ref)
	}
	if !isTask {
		for i := range s.jobs {
			if s.jobs[i].ID == n {
				return &s.jobs[i], nil
			}
		}
		return nil, errors.New("Invalid job id specified")
	}
	k, err := strconv.Atoi(task)
	if err != nil {
		return nil, fmt.Errorf("Invalid job id specified: %q", ref)
	}
	for i := range s.jobs {
		j := &s.jobs[i]
		if j.ArrayJobID == n && j.ArrayTaskID == k && j.ArrayTasks == "" {
			return j, nil
		}
	}
	for i := range s.jobs {
		j := &s.jobs[i]
		if j.ID != n || j.ArrayTasks == "" {
			continue
		}
		tasks := strings.Split(j.ArrayTasks, ",")
		left := slices.DeleteFunc(slices.Clone(tasks), func(t string) bool { return t == task })
		if len(left) == len(tasks) {
			break
		}
		if len(left) == 1 {
			// The record's last task is the record.
			rest, _ := strconv.Atoi(left[0])
			j.ArrayTasks, j.ArrayJobID, j.ArrayTaskID = "", n, rest
		} else {
			j.ArrayTasks = strings.Join(left, ",")
		}
		t := *j
		t.ID, t.ArrayJobID, t.ArrayTaskID, t.ArrayTasks = s.nextID, n, k, ""
		s.nextID++
		s.jobs = append(s.jobs, t)
		return &s.jobs[len(s.jobs)-1], nil
	}
	return nil, errors.New("Invalid job id specified")
}

// apply changes the jobs as Slurm does for argv, leaving out the update
// field skip (-1: none).
func (s *faultSlurm) apply(argv []string, skip int) error {
	var ref string
	switch {
	case argv[0] == "scancel":
		ref = argv[len(argv)-1]
	case len(argv) > 2:
		ref = argv[2]
	default:
		return fmt.Errorf("unexpected command %q", argv)
	}
	j, err := s.find(ref)
	if err != nil {
		return err
	}
	switch {
	case argv[0] == "scancel":
		if j.State != slurm.StateRunning {
			return errors.New("Job is pending execution")
		}
		if s.srun {
			j.Comment = slurm.WithWord(j.Comment, slurm.RequeueWord)
			requeueHeld(j)
			s.requeues[j.ID]++
		}
	case argv[1] == "requeuehold":
		if j.State != slurm.StateRunning {
			return errors.New("Job is pending execution")
		}
		requeueHeld(j)
		s.requeues[j.ID]++
	case argv[1] == "release":
		for i := range s.jobs {
			// A heterogeneous job's leader releases every component.
			c := &s.jobs[i]
			if (c == j || j.HetJobID != 0 && c.HetJobID == j.HetJobID) && c.State == slurm.StatePending && c.Held {
				c.Held, c.Reason, c.Priority = false, "", 1
			}
		}
	case argv[1] == "update":
		for i, a := range argv[3:] {
			if i == skip {
				continue
			}
			if err := s.update(j, a); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unexpected command %q", argv)
	}
	return nil
}

// requeueHeld changes running job j as scontrol requeuehold does: back in
// the queue, held, off its nodes, its restart count one up.
func requeueHeld(j *slurm.Job) {
	j.State, j.Held, j.Reason, j.Priority = slurm.StatePending, true, "JobHeldUser", 0
	j.NodeList, j.BatchHost, j.GPUs, j.MemMB, j.StartTime = nil, "", 0, 0, time.Time{}
	j.RestartCount++
}

// update sets one field of job j as scontrol update does.
func (s *faultSlurm) update(j *slurm.Job, field string) error {
	k, v, _ := strings.Cut(field, "=")
	n, _ := strconv.Atoi(v)
	switch k {
	case "AdminComment":
		old := j.Tag
		t, err := slurm.TagFromAdminComment(v)
		switch {
		case err != nil:
			s.broken = append(s.broken, fmt.Sprintf("job %d: tag %q does not parse: %v", j.ID, v, err))
		case old != nil && t != nil && t.Generation < old.Generation:
			s.broken = append(s.broken, fmt.Sprintf("job %d: tag generation back from %d to %d", j.ID, old.Generation, t.Generation))
		}
		j.AdminComment, j.Tag, j.TagErr = v, t, err
	case "Comment":
		j.Comment = v
	case "MailType":
		s.mail[j.ID] = v
	case "NumNodes":
		lo, _, _ := strings.Cut(v, "-")
		j.NodeCount, _ = strconv.Atoi(lo)
	case "NumCPUs":
		j.CPUs = n
	case "CPUsPerTask":
		j.CPUsPerTask = n
	case "MinMemoryNode":
		j.MemPerNodeMB = int64(n)
	case "Gres":
		g := strings.Split(strings.Split(v, ",")[0], ":")
		j.GPUsPerNode, _ = strconv.Atoi(g[len(g)-1])
	case "TimeLimit":
		j.TimeLimit = time.Duration(n) * time.Minute
	case "TimeMin":
		j.TimeMin = time.Duration(n) * time.Minute
	case "Partition":
		j.Partition = v
	case "NodeList":
		if j.State == slurm.StateRunning {
			return errors.New("Requested operation is presently disabled")
		}
		j.RequiredNodes = nil
		if v != "" {
			j.RequiredNodes = strings.Split(v, ",")
		}
	case "NumTasks", "MinCPUsNode", "StartTime", "MemPerTres", "TresPerJob", "TresPerTask":
	default:
		return fmt.Errorf("Update of %s not supported here", k)
	}
	return nil
}

// tick is Slurm's scheduling pass: it starts each released job where it
// fits, on its required nodes if it has them.
func (s *faultSlurm) tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	free := map[string]int{}
	for _, n := range s.nodes {
		free[n.Name] = n.GPUs
	}
	for _, j := range s.jobs {
		if j.State == slurm.StateRunning {
			for _, n := range j.NodeList {
				free[n] -= j.GPUsPerNode
			}
		}
	}
	for i := range s.jobs {
		j := &s.jobs[i]
		if j.State != slurm.StatePending || j.Held || j.ArrayTasks != "" {
			continue
		}
		var on []string
		for _, n := range s.nodes {
			if len(on) < max(j.NodeCount, 1) && free[n.Name] >= j.GPUsPerNode && (len(j.RequiredNodes) == 0 || slices.Contains(j.RequiredNodes, n.Name)) {
				on = append(on, n.Name)
			}
		}
		if len(on) < max(j.NodeCount, 1) {
			continue
		}
		for _, n := range on {
			free[n] -= j.GPUsPerNode
		}
		j.State, j.Reason, j.NodeList, j.BatchHost, j.StartTime = slurm.StateRunning, "", on, on[0], now
		j.GPUs, j.MemMB = j.GPUsPerNode*len(on), j.MemPerNodeMB*int64(len(on))
	}
}

// stepClock is a clock that only its sleeps move on: a wait for a state
// (the Applier's for a requeued job to be pending) ends at its deadline
// however often its reads fail, at once.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return nil
}

// ckptWait is how long a checkpoint takes in the fault matrix, on the
// Applier's clock: a requeue's tag counts the job's run to the requeue,
// this wait included, whether the Applier writes it or a rubickd
// restarted since acknowledges the requeue.
const ckptWait = 30 * time.Second

// connApplier is the real Applier on conn, with no waits worth the name
// but ckptWait on its clock, writing self in its tags.
func connApplier(t *testing.T, conn *slurmConn, self Instance) *slurm.Applier {
	t.Helper()
	clock := &stepClock{now: t0}
	app, err := slurm.NewApplier(slurm.ApplierConfig{Runner: conn, Cluster: conn, Clock: clock, Logger: slog.New(slog.DiscardHandler),
		CheckpointTimeout: time.Minute, WaitCheckpoint: func(ctx context.Context, _ slurm.Job) error { return clock.Sleep(ctx, ckptWait) },
		Instance: self.String()})
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// crashStore is the store of a rubickd that dies with its slurmConn: it
// writes nothing from then on.
type crashStore struct {
	Store
	conn *slurmConn
}

func (c crashStore) UpsertJobs(ctx context.Context, jobs []store.Job) error {
	return c.write(func() error { return c.Store.UpsertJobs(ctx, jobs) })
}

// write runs one store write of a live rubickd, which may fail
// (faultStoreError) or crash rubickd right after it (faultStoreCrash).
func (c crashStore) write(f func() error) error {
	if !c.conn.live() {
		return errCrashed
	}
	if c.conn.failWrite() {
		return errStoreWrite
	}
	err := f()
	c.conn.wrote()
	return err
}

func (c crashStore) RecordDecision(ctx context.Context, d store.Decision) (out store.Decision, err error) {
	err = c.write(func() error { out, err = c.Store.RecordDecision(ctx, d); return err })
	return out, err
}

func (c crashStore) MarkApplied(ctx context.Context, id int64, res store.Result, applyErr error) error {
	return c.write(func() error { return c.Store.MarkApplied(ctx, id, res, applyErr) })
}

func (c crashStore) AwaitAck(ctx context.Context, id int64, mail string) error {
	return c.write(func() error { return c.Store.AwaitAck(ctx, id, mail) })
}

func (c crashStore) WillRequeue(ctx context.Context, id int64, restarts int, tag string) error {
	return c.write(func() error {
		c.conn.s.mu.Lock()
		c.conn.s.willRequeue = c.conn.s.writes + 1
		c.conn.s.mu.Unlock()
		return c.Store.WillRequeue(ctx, id, restarts, tag)
	})
}

func (c crashStore) Acked(ctx context.Context, jobID int64) error {
	return c.write(func() error { return c.Store.Acked(ctx, jobID) })
}

func (c crashStore) AddRestartCost(ctx context.Context, rc store.RestartCost) (added bool, err error) {
	err = c.write(func() error { added, err = c.Store.AddRestartCost(ctx, rc); return err })
	return added, err
}

func (c crashStore) Prune(ctx context.Context, r store.Retention) (out store.Pruned, err error) {
	err = c.write(func() error { out, err = c.Store.Prune(ctx, r); return err })
	return out, err
}

// faultScenario is a cluster whose first cycle applies an action of kind,
// among others.
type faultScenario struct {
	name string
	kind slurm.ActionKind
	// nodes is the node count; jobs the jobs Slurm has.
	nodes int
	jobs  func() []slurm.Job
	mail  map[int]string
	edit  func(*Config)
	// plan, when set, is the first cycle's plan; the rubick policy
	// decides the others, unless keep: then plan is every cycle's.
	plan *policy.Plan
	keep bool
	// setup prepares the store.
	setup func(t *testing.T, st *store.Store)
	// srun is faultSlurm.srun: the job's rubick-srun requeues it.
	srun bool
}

// faultScenarios cover each kind of action the daemon applies; shrinks
// are restarts to rubickd (slurmAction), which never applies one.
func faultScenarios() []faultScenario {
	running := func(id int, tag slurm.Tag) slurm.Job {
		j := heldJob(id, tag.ModelType, 1, 8)
		j.State, j.Held, j.NodeList, j.BatchHost, j.GPUs = slurm.StateRunning, false, []string{"node1"}, "node1", 8
		j.StartTime = t0.Add(-time.Hour)
		j.Tag = &tag
		return j
	}
	ownTag := func(class string, extra map[string]string) slurm.Tag {
		e := map[string]string{tagReq: "n1.g8.c8.m64000", tagAt: strconv.FormatInt(t0.Add(-time.Hour).Unix(), 10), slurm.TagRestarts: "0"}
		maps.Copy(e, extra)
		return slurm.Tag{ModelType: "bert", Class: class, Generation: 1, Plan: "dp8.tp1.pp1.mb4.a1.z0", Extra: e}
	}
	restart := policy.Action{Kind: policy.Restart, JobID: "91", Alloc: []policy.NodeAlloc{{Node: "node1", GPUs: 4, CPUs: 8, MemGB: 64}},
		Plan: model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}, Throughput: 1e6}
	// keep91 keeps job 91 running as it is.
	keep91 := &policy.Plan{Actions: []policy.Action{{Kind: policy.Keep, JobID: "91", Alloc: []policy.NodeAlloc{{Node: "node1", GPUs: 8, CPUs: 8, MemGB: 62.5}},
		Plan: model.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, Accum: 1}}}}
	scs := []faultScenario{
		{name: "start", kind: slurm.ActionStart, nodes: 1,
			jobs: func() []slurm.Job { return []slurm.Job{heldJob(41, "bert", 1, 2)} }},
		{name: "preempt and start", kind: slurm.ActionPreempt, nodes: 1, mail: map[int]string{91: "BEGIN,END,REQUEUE"}, edit: withLab,
			jobs: func() []slurm.Job {
				g := heldJob(92, "roberta", 1, 8)
				g.Account, g.Tag.Class = "lab", slurm.ClassGuaranteed
				return []slurm.Job{running(91, ownTag(slurm.ClassBestEffort, nil)), g}
			}},
		{name: "restart", kind: slurm.ActionRestart, nodes: 1, mail: map[int]string{91: "BEGIN,END"},
			plan: &policy.Plan{Actions: []policy.Action{restart}},
			jobs: func() []slurm.Job { return []slurm.Job{running(91, ownTag(slurm.ClassBestEffort, nil))} }},
		{name: "annotate: hold of a job requeued by hand", kind: slurm.ActionAnnotate, nodes: 1,
			jobs: func() []slurm.Job {
				j := running(91, ownTag(slurm.ClassBestEffort, nil))
				j.State, j.Held, j.Reason, j.NodeList, j.BatchHost, j.GPUs, j.RestartCount = slurm.StatePending, true, "JobHeldUser", nil, "", 0, 1
				return []slurm.Job{j}
			}},
		{name: "annotate: mail given back", kind: slurm.ActionAnnotate, nodes: 1, mail: map[int]string{91: "END"}, plan: keep91, keep: true,
			jobs: func() []slurm.Job {
				return []slurm.Job{running(91, ownTag(slurm.ClassBestEffort, map[string]string{slurm.TagMail: "begin,end"}))}
			}},
		{name: "annotate: profiled plan", kind: slurm.ActionAnnotate, nodes: 1, plan: keep91, keep: true,
			jobs: func() []slurm.Job {
				return []slurm.Job{running(91, ownTag(slurm.ClassBestEffort, map[string]string{tagProfile: "1"}))}
			}},
		{name: "release", kind: slurm.ActionRelease, nodes: 2,
			jobs: func() []slurm.Job {
				leader, comp := heldJob(52, "bert", 1, 2), heldJob(53, "bert", 1, 1)
				leader.HetJobID, comp.HetJobID, comp.HetJobOffset = 52, 52, 1
				return []slurm.Job{leader, comp}
			}},
		{name: "split", kind: slurm.ActionSplit, nodes: 1,
			jobs: func() []slurm.Job {
				a := heldJob(50, "bert", 1, 2)
				a.ArrayTasks = "0,1"
				return []slurm.Job{a}
			}},
		{name: "time limit", kind: slurm.ActionTimeLimit, nodes: 1, edit: func(cfg *Config) { cfg.TimeLimits.Stretch = true },
			jobs: func() []slurm.Job {
				j := running(5, slurm.Tag{ModelType: "bert", Class: slurm.ClassBestEffort, Plan: "dp4.tp1.pp1.mb8.a1.z0", Generation: 1,
					Extra: map[string]string{tagTime: "60", tagReq: "n1.g4.c8.m64000", slurm.TagRestarts: "0"}})
				j.User, j.GPUsPerNode, j.GPUs, j.StartTime, j.TimeLimit = "alice", 4, 4, t0.Add(-10*time.Minute), 75*time.Minute
				return []slurm.Job{j}
			},
			setup: func(t *testing.T, st *store.Store) {
				plan := model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1}
				res := model.Resources{Placement: model.Placement{4}, CPUs: 8}
				e, _ := shippedEstimators(t)("bert")
				b, err := e.Predict(plan, res)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					if err := st.AddReported(context.Background(), "bert", model.Sample{Plan: plan, Resources: res, IterS: 3 * b.Iter}, 5, 10*i); err != nil {
						t.Fatal(err)
					}
				}
			}},
	}
	// rubick-srun requeues the job itself, marked, at the signal: the tag
	// that acknowledges it and the Comment that loses the mark must never
	// read, taken apart, as someone else's requeue.
	for _, name := range []string{"preempt and start", "restart"} {
		sc := scs[slices.IndexFunc(scs, func(sc faultScenario) bool { return sc.name == name })]
		sc.name, sc.srun = name+", rubick-srun requeues", true
		scs = append(scs, sc)
	}
	return scs
}

// faultCase is what fails in one run: first at the first cycle's
// commands; again, where first crashed rubickd, at the commands of the
// restarted one's Reconcile and first cycle (a crash loop, as systemd's
// Restart=on-failure makes of one); read at the first cycle's reads.
// Zero: nothing.
type faultCase struct {
	first, again fault
	read         readFault
	// reconcileRead, where first crashed rubickd, fails the reads of the
	// restarted one's Reconcile (counted from its start): a Reconcile
	// that still fails after its retries stops rubickd at start-up, and
	// systemd starts it again.
	reconcileRead readFault
	// then is a second failure point of the first cycle's commands, after
	// first.
	then fault
	// user, when set, is what a job's user changes in Slurm after the
	// first cycle (scontrol update as the user), named by userDid.
	user    func(s *faultSlurm)
	userDid string
	// downtime, where first crashed rubickd, is how long it stays down:
	// the clock of the restarted one, its store's and Slurm's scheduling
	// passes are that much later (and stay there).
	downtime time.Duration
}

func (c faultCase) String() string {
	var s []string
	if c.first.at > 0 {
		s = append(s, c.first.String())
	}
	if c.then.at > 0 {
		s = append(s, "then "+c.then.String())
	}
	if c.again.at > 0 {
		s = append(s, "then at recovery "+c.again.String())
	}
	if c.read.at > 0 {
		s = append(s, c.read.String())
	}
	if c.reconcileRead.at > 0 {
		s = append(s, "then at Reconcile "+c.reconcileRead.String())
	}
	if c.user != nil {
		s = append(s, "then its user "+c.userDid)
	}
	if c.downtime > 0 {
		s = append(s, "down for "+c.downtime.String())
	}
	return cmp.Or(strings.Join(s, ", "), "no fault")
}

// faultRun is one run of a scenario with a faultCase.
type faultRun struct {
	slurm *faultSlurm
	st    *store.Store
	// kinds are the kinds of the actions the first cycle applied.
	kinds []slurm.ActionKind
	// first lists the commands the first cycle ran; reads its reads;
	// writes counts its store writes.
	first  [][]string
	reads  []string
	writes int
	// recovery lists the commands the Reconcile and first cycle of the
	// rubickd restarted after the first crash ran; recoveryWrites counts
	// their store writes.
	recovery       [][]string
	recoveryWrites int
	// reconcileReads are the reads of the first restarted rubickd's
	// Reconcile.
	reconcileReads []string
	// failedRead is the first cycle's first read that failed, with the
	// commands run before it (cmdsAtRead).
	failedRead string
	cmdsAtRead int
	// willRequeue is the first cycle's store write that recorded the
	// requeue it was about to issue (0: none).
	willRequeue int
	// before is each job as the first cycle found it, mail its mail
	// types then.
	before map[int]slurm.Job
	mail   map[int]string
}

// runFault runs sc's first cycle with fault c, then recovers: a rubickd
// that crashed is started again on the same store, reconciles and runs a
// cycle (should c fail again there and crash it, once more); then come
// cycles with Slurm working, two after the first in all, a scheduling pass
// of Slurm's before each and after the last.
func runFault(t *testing.T, seeded []byte, sc faultScenario, c faultCase) faultRun {
	t.Helper()
	ctx := context.Background()
	s := newFaultSlurm(sc.nodes, sc.jobs()...)
	s.srun = sc.srun
	for id, m := range sc.mail {
		s.mail[id] = m
	}
	run := faultRun{slurm: s, before: map[int]slurm.Job{}, mail: maps.Clone(s.mail)}
	for _, j := range s.cloneJobs() {
		run.before[j.ID] = j
	}
	path := filepath.Join(t.TempDir(), "rubick.db")
	if err := os.WriteFile(path, seeded, 0o600); err != nil {
		t.Fatal(err)
	}
	// now is the clock of rubickd, its store and Slurm: t0 until a crash
	// that c.downtime follows.
	var clockMu sync.Mutex
	at := t0
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return at }
	st, err := store.Open(ctx, path, store.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	run.st = st
	if sc.setup != nil {
		sc.setup(t, st)
	}
	rubick, err := policy.New("rubick", Defaults().Policy.Config())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	if sc.edit != nil {
		sc.edit(&cfg)
	}
	conn := s.conn()
	// Each rubickd is a process of its own, as systemd restarts one: its
	// tags name it (by=), and one that crashed no longer runs.
	self := func(n int) Instance {
		return Instance{Host: "ctl1", PID: 4194304 + n, Start: t0.Add(time.Duration(n) * time.Second)}
	}
	started := 0
	d, err := New(cfg, Deps{Cluster: conn, Applier: connApplier(t, conn, self(started)), Instance: self(started),
		Store: crashStore{Store: st, conn: conn}, Policy: rubick,
		Env: model.DefaultEnv(), Now: now, Budgets: conn})
	if err != nil {
		t.Fatal(err)
	}
	if sc.plan != nil {
		d.deps.Policy = planned{*sc.plan}
	}
	// live runs one step of a rubickd with fault f at its commands, and
	// reports whether the rubickd crashed.
	live := func(f fault, step func(ctx context.Context) error) (bool, error) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s.mu.Lock()
		s.fault, s.crash = f, cancel
		epoch := s.epoch
		s.mu.Unlock()
		err := step(cctx)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.fault, s.then = fault{}, fault{}
		return s.epoch > epoch, err
	}
	s.mu.Lock()
	s.readFault, s.then = c.read, c.then
	s.mu.Unlock()
	crashed, err := live(c.first, func(ctx context.Context) error {
		rep, err := d.Cycle(ctx, false)
		for _, a := range rep.Actions {
			run.kinds = append(run.kinds, a.Kind)
		}
		return err
	})
	s.mu.Lock()
	run.first, run.reads, run.writes = slices.Clone(s.argv), slices.Clone(s.readLog), s.writes
	run.failedRead, run.cmdsAtRead, run.willRequeue = s.failedRead, s.cmdsAtRead, s.willRequeue
	s.readFault = readFault{}
	if c.user != nil {
		c.user(s)
	}
	s.mu.Unlock()
	if !crashed && err != nil && c.read.at == 0 && !errors.Is(err, errStoreWrite) {
		t.Fatalf("%v: cycle: %v", c, err)
	}
	if !sc.keep {
		d.deps.Policy = rubick
	}
	cycles := 2
	// restart starts a new rubickd on the same store, which reconciles
	// and runs a cycle, with fault f at the commands of both and rf at
	// the reads of its Reconcile. It reports whether the rubickd crashed,
	// and whether it stopped at start-up for its Reconcile's failure.
	restart := func(f fault, rf readFault) (crashed, stopped bool) {
		deps := d.deps
		conn = s.conn()
		started++
		deps.Cluster, deps.Applier, deps.Store, deps.Budgets = conn, connApplier(t, conn, self(started)), crashStore{Store: st, conn: conn}, conn
		deps.Instance = self(started)
		if d, err = New(d.boot, deps); err != nil {
			t.Fatal(err)
		}
		d.retryWait = time.Microsecond
		s.mu.Lock()
		s.reads, s.readLog, s.readFault, s.failedRead = 0, nil, rf, ""
		s.mu.Unlock()
		crashed, err := live(f, func(ctx context.Context) error {
			err := d.Reconcile(ctx)
			s.mu.Lock()
			if run.reconcileReads == nil {
				run.reconcileReads = slices.Clone(s.readLog)
			}
			s.readFault = readFault{}
			s.mu.Unlock()
			if err != nil {
				stopped = true
				return fmt.Errorf("reconcile: %w", err)
			}
			s.tick(now())
			if _, err := d.Cycle(ctx, false); err != nil {
				return fmt.Errorf("cycle after the restart: %w", err)
			}
			return nil
		})
		if !crashed && err != nil && !(stopped && rf.at > 0) && !errors.Is(err, errStoreWrite) {
			t.Fatalf("%v: %v", c, err)
		}
		if len(run.first) > 0 {
			// The first cycle's commands were its work; a first cycle
			// that crashed before any leaves it to this one.
			cycles = 1 // and one more
		}
		return crashed, stopped && !crashed
	}
	if crashed {
		clockMu.Lock()
		at = at.Add(c.downtime)
		clockMu.Unlock()
		s.mu.Lock()
		s.cmds, s.argv, s.writes = 0, nil, 0 // c.again counts the recovery's commands and writes
		s.mu.Unlock()
		again, stopped := restart(c.again, c.reconcileRead)
		s.mu.Lock()
		run.recovery, run.recoveryWrites = slices.Clone(s.argv), s.writes
		s.mu.Unlock()
		if again || stopped {
			restart(fault{}, readFault{})
		}
	}
	for range cycles {
		s.tick(now())
		d.Invalidate()
		if _, err := d.Cycle(ctx, false); err != nil {
			t.Fatalf("%v: cycle after the fault: %v", c, err)
		}
	}
	s.tick(now())
	return run
}

// faults are the failure points of commands, each command's as its kind
// allows: any refused, timed out or crashed after; a multi-field update
// partially applied, without each of its fields in turn, with rubickd
// going on or crashing right after.
func faults(commands [][]string) []fault {
	var out []fault
	for i, argv := range commands {
		at := i + 1
		out = append(out, fault{at: at, kind: faultRefused}, fault{at: at, kind: faultTimeout}, fault{at: at, kind: faultTimeoutLost}, fault{at: at, kind: faultCrash})
		if len(argv) > 4 && argv[1] == "update" {
			for k := range argv[3:] {
				out = append(out, fault{at: at, kind: faultPartial, field: k}, fault{at: at, kind: faultPartialCrash, field: k})
			}
		}
	}
	return out
}

// storeFaults are the failures of each of n store writes, and the
// crashes right after each.
func storeFaults(n int) []fault {
	out := make([]fault, 0, 2*n)
	for at := 1; at <= n; at++ {
		out = append(out, fault{at: at, kind: faultStoreError}, fault{at: at, kind: faultStoreCrash})
	}
	return out
}

// seededStore is a store's database with the shipped model types seeded,
// which each run copies: seeding it anew would take most of each run's
// time.
func seededStore(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	st, err := store.Open(ctx, path, store.WithClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatal(err)
	}
	set, err := artifact.Load(artifact.Default())
	if err != nil {
		t.Fatal(err)
	}
	seedShipped(ctx, t, st, set)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// violations are the invariants run breaks after its recovery.
func (run faultRun) violations(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	s := run.slurm
	s.mu.Lock()
	out := slices.Clone(s.broken)
	jobs := s.cloneJobs()
	requeues := s.requeues
	mail := maps.Clone(s.mail)
	userHeld := maps.Clone(s.userHeld)
	s.mu.Unlock()
	// theirs: held by its user or an administrator, which rubick never
	// releases.
	theirs := func(j slurm.Job) bool { return slurm.HeldByUser(j) || slurm.HeldByAdmin(j) || slurm.RequeuedByOther(j) }
	for _, j := range jobs {
		was, known := run.before[j.ID]
		switch {
		case (known && theirs(was) || userHeld[j.ID]) && !theirs(j):
			out = append(out, fmt.Sprintf("job %d: %s held=%t (comment %q, restarts %d, tag %v): the hold of its user or an administrator is gone", j.ID, j.State, j.Held, j.Comment, j.RestartCount, j.Tag))
		case j.TagErr != nil:
			out = append(out, fmt.Sprintf("job %d: tag %q does not parse: %v", j.ID, j.AdminComment, j.TagErr))
		case j.State == slurm.StateRunning, j.State == slurm.StateCompleted, j.State == slurm.StatePending && !j.Held:
		case theirs(j):
			if (!known || !theirs(was)) && !userHeld[j.ID] {
				out = append(out, fmt.Sprintf("job %d: held for its user or an administrator (comment %q, restarts %d, tag %v), which it was not", j.ID, j.Comment, j.RestartCount, j.Tag))
			}
			if slurm.HeldByUser(j) && slurm.RequeuedByOther(j) {
				// Their release would read as another requeue by hand,
				// and the job would be held for them again.
				out = append(out, fmt.Sprintf("job %d: held for its user with restart count %d, which its tag %v does not count", j.ID, j.RestartCount, j.Tag))
			}
		case heldForRubick(j):
			r, err := run.st.Reasons(ctx, int64(j.ID), 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(r) == 0 {
				out = append(out, fmt.Sprintf("job %d: held for rubick with no reason stored for rubick explain", j.ID))
			}
		default:
			out = append(out, fmt.Sprintf("job %d: %s held=%t reason %q: neither running nor held for rubick", j.ID, j.State, j.Held, j.Reason))
		}
		if n := requeues[j.ID]; n > 1 {
			out = append(out, fmt.Sprintf("job %d: requeued %d times", j.ID, n))
		}
		if known && was.State == slurm.StateRunning && was.Tag != nil && j.Tag != nil &&
			j.RestartCount > was.RestartCount && !slurm.RequeuedSinceTag(j) {
			// The tag counts the requeue (rc=): it must count the run
			// that requeue ended too, to the requeue, or nothing will.
			before, _ := was.Tag.RanTime()
			want := before + was.RunTime(t0).Truncate(time.Second)
			if requeues[j.ID] == 1 && !userHeld[j.ID] && !s.srun {
				// rubick's requeue, after the checkpoint. rubick-srun's
				// comes at the signal here; one of its user's ends the
				// action, which then counts nothing more.
				want += ckptWait
			}
			if got, err := j.Tag.RanTime(); err != nil || got < want {
				out = append(out, fmt.Sprintf("job %d: requeued, its tag %v counts %v (%v), want the %v it had run", j.ID, j.Tag, got, err, want))
			}
		}
		if !known {
			was, known = run.before[j.ArrayJobID] // a task split off its array
		}
		if known {
			out = append(out, userRecord(j, was)...)
			out = append(out, userLimit(j, was)...)
		}
		if m, ok := run.mail[j.ID]; ok {
			// What Slurm mails, with what rubick took out of it and gives
			// back when the job runs again (the tag's mail=).
			mails := func(mailType string, tag *slurm.Tag) []string {
				return mailSet(mailType + "," + slurm.MailTypeOfTag(tag))
			}
			if got, want := mails(mail[j.ID], j.Tag), mails(m, was.Tag); !slices.Equal(got, want) {
				out = append(out, fmt.Sprintf("job %d: mail types %q with its tag's %q, want the %v it was submitted with", j.ID, mail[j.ID], slurm.MailTypeOfTag(j.Tag), want))
			}
		}
	}
	pending, err := run.st.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range pending {
		out = append(out, fmt.Sprintf("job %d: %s action %d left pending", a.JobID, a.Kind, a.ID))
	}
	unacked, err := run.st.Unacked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range unacked {
		out = append(out, fmt.Sprintf("job %d: %s action %d awaits its tag still", a.JobID, a.Kind, a.ID))
	}
	return out
}

// userRecord is what j's tag says of its user's request (req=) and
// --nodelist (nl=) that is not what j asked for when it was was.
func userRecord(j, was slurm.Job) []string {
	r, ok := tagRequest(j)
	if !ok {
		return nil
	}
	var out []string
	if want := userRequest(was); r != want {
		out = append(out, fmt.Sprintf("job %d: tag %s=%s, its user asked for %s", j.ID, tagReq, r, want))
	}
	nodes, err := userNodes(was)
	if err != nil {
		return append(out, fmt.Sprintf("job %d: %v", j.ID, err))
	}
	if got, want := j.Tag.Extra[tagNodes], slurm.CompressHostlist(nodes); got != want {
		out = append(out, fmt.Sprintf("job %d: tag %s=%q, its user's --nodelist is %q", j.ID, tagNodes, got, want))
	}
	return out
}

// userLimit is what j's tag and time limit say of its user's time limit
// (tl=, ts=, tf=1) that is not what they said when it was was: no one
// sets a limit by hand here, and no limit of rubick's reads as one.
func userLimit(j, was slurm.Job) []string {
	if j.Tag == nil || was.Tag == nil {
		return nil
	}
	type limit struct {
		User  time.Duration
		Fixed bool
	}
	var got, want limit
	var err error
	if got.User, got.Fixed, err = userTime(j); err != nil {
		return []string{fmt.Sprintf("job %d: %v", j.ID, err)}
	}
	if want.User, want.Fixed, err = userTime(was); err != nil {
		return nil
	}
	if got != want {
		return []string{fmt.Sprintf("job %d: time limit %v with tag %v reads as its user's %+v, want %+v", j.ID, j.TimeLimit, j.Tag, got, want)}
	}
	return nil
}

// mailSet is the mail types of a MailType value, sorted; none for NONE.
func mailSet(v string) []string {
	out := slices.DeleteFunc(strings.Split(v, ","), func(t string) bool { return t == "" || t == "NONE" })
	return slices.Compact(slices.Sorted(slices.Values(out)))
}

// shape is a command's verb, job and the fields it sets, not their values.
func shape(argv []string) string {
	if len(argv) < 3 || argv[1] != "update" {
		return strings.Join(argv, " ")
	}
	out := slices.Clone(argv[:3])
	for _, a := range argv[3:] {
		k, _, _ := strings.Cut(a, "=")
		out = append(out, k+"=")
	}
	return strings.Join(out, " ")
}

// partial is what run's first cycle, whose reads failed, did on a partial
// picture of the cluster: any command after its jobs or nodes read failed
// (its picture of the cluster), or a command the cycle without the fault
// (clean) does not run, by its shape.
func (run faultRun) partial(clean faultRun) []string {
	var out []string
	if (run.failedRead == "jobs" || run.failedRead == "nodes") && len(run.first) > run.cmdsAtRead {
		out = append(out, fmt.Sprintf("%q and %d more ran after the %s read failed", run.first[run.cmdsAtRead], len(run.first)-run.cmdsAtRead-1, run.failedRead))
	}
	if run.failedRead == "" {
		out = append(out, "no read failed")
	}
	shapes := map[string]bool{}
	for _, argv := range clean.first {
		shapes[shape(argv)] = true
	}
	for _, argv := range run.first {
		if !shapes[shape(argv)] {
			out = append(out, fmt.Sprintf("%q ran, which the cycle with every read working does not run", argv))
		}
	}
	return out
}

// recoveryFaults is how many of the recovery's first commands fail again
// after a crash: each crash's recovery runs Reconcile's acknowledgements
// and the cycle's unfinished actions first, and failing every command of
// every recovery would multiply the runs past the test's time.
const recoveryFaults = 2

// Every command the daemon's first cycle sends Slurm, in each scenario,
// fails in turn in each way Slurm fails (refused, half-applied, timed out
// after it was taken or before) or rubickd crashes right after it (a half-applied
// update's too), or each of the cycle's store writes fails, or rubickd
// crashes right after it; after a crash, each of the first
// commands of its recovery (Reconcile's, then the restarted rubickd's
// first cycle's) fails in turn again in each way, and rubickd crashes
// right after each of the recovery's store writes (or the write fails), a crash loop included.
// After each crash at a command, each read of the restarted rubickd's
// Reconcile fails alone, and every one of them does (rubickd then stops
// at start-up, and is started again). Then each read of the first cycle
// (of the jobs, the nodes, the limits and budgets, a job inside the
// Applier, its mail types) fails in turn, alone or with every read after
// it. After a recovery (a
// new rubickd's Reconcile after each crash, then two cycles with Slurm
// working) no job is lost or stuck: each runs, or waits held for rubick
// with a reason rubick explain shows, or is held for its user or an
// administrator only if it was; every tag parses and its generation never
// goes back, and its record of its user's request and --nodelist (req=,
// nl=) is what the user asked for; the mail types Slurm has for a job,
// with those its tag keeps to give back (mail=), are the job's own; no
// action is left pending and no requeue unacknowledged; no job is
// requeued twice. A cycle whose jobs or nodes read failed runs no
// command after it, and one whose reads failed runs no command the cycle
// without the failure does not.
func TestFaultsNeverLoseJobs(t *testing.T) {
	seeded := seededStore(t)
	for _, sc := range faultScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			// Each scenario's runs have their own store and Slurm; side by
			// side they use every CPU, where one at a time they use one.
			t.Parallel()
			clean := runFault(t, seeded, sc, faultCase{})
			if !slices.Contains(clean.kinds, sc.kind) {
				t.Fatalf("first cycle applied %v, want a %s", clean.kinds, sc.kind)
			}
			if v := clean.violations(t); len(v) > 0 {
				t.Fatalf("without a fault:\n%s", strings.Join(v, "\n"))
			}
			first := clean.first
			check := func(t *testing.T, c faultCase, what []string, v []string) {
				t.Helper()
				if len(v) > 0 {
					t.Errorf("%s (%q):\n%s", c, what, strings.Join(v, "\n"))
				}
			}
			// again are the crash loops: each crash of the first cycle
			// with a fault at each of its recovery's first commands.
			var again []faultCase
			var againAt [][]string
			// at is what f fails: a command of cmds, or a store write.
			at := func(f fault, cmds [][]string) []string {
				if f.kind == faultStoreCrash || f.kind == faultStoreError {
					return []string{"store write " + strconv.Itoa(f.at)}
				}
				return cmds[f.at-1]
			}
			t.Run("commands", func(t *testing.T) {
				points := append(faults(first), storeFaults(clean.writes)...)
				for _, f := range points {
					c := faultCase{first: f}
					run := runFault(t, seeded, sc, c)
					check(t, c, at(f, first), run.violations(t))
					if f.kind != faultCrash && f.kind != faultStoreCrash {
						continue
					}
					rec := run.recovery[:min(len(run.recovery), recoveryFaults)]
					for _, g := range append(faults(rec), storeFaults(run.recoveryWrites)...) {
						again, againAt = append(again, faultCase{first: f, again: g}), append(againAt, at(g, rec))
					}
				}
				t.Logf("%d commands, %d store writes, %d failure points", len(first), clean.writes, len(points))
			})
			t.Run("crash loop", func(t *testing.T) {
				for i, c := range again {
					check(t, c, againAt[i], runFault(t, seeded, sc, c).violations(t))
				}
				t.Logf("%d failure points at the recoveries of the crashes", len(again))
			})
			t.Run("reads at Reconcile", func(t *testing.T) {
				// Each read of the Reconcile after each crash at a command
				// fails alone, and slurmrestd is down for the whole of it.
				var n int
				for _, f := range faults(first) {
					if f.kind != faultCrash {
						continue
					}
					reads := runFault(t, seeded, sc, faultCase{first: f}).reconcileReads
					for i := range reads {
						c := faultCase{first: f, reconcileRead: readFault{at: i + 1}}
						check(t, c, []string{reads[i]}, runFault(t, seeded, sc, c).violations(t))
						n++
					}
					c := faultCase{first: f, reconcileRead: readFault{at: 1, down: true}}
					check(t, c, reads, runFault(t, seeded, sc, c).violations(t))
					n++
				}
				t.Logf("%d failure points at the reads of Reconcile", n)
			})
			t.Run("reads", func(t *testing.T) {
				for i := range clean.reads {
					for _, down := range []bool{false, true} {
						c := faultCase{read: readFault{at: i + 1, down: down}}
						run := runFault(t, seeded, sc, c)
						check(t, c, []string{clean.reads[i]}, slices.Concat(run.violations(t), run.partial(clean)))
					}
				}
				t.Logf("%d reads %q, each failing alone and with the rest of the cycle's", len(clean.reads), clean.reads)
			})
		})
	}
}

// A user who requeues their job held while rubickd is down, after it
// crashed anywhere in a preemption or restart of the job (before its
// requeue, or after it, the user releasing and requeueing it again), keeps
// their hold: the restarted rubickd does not take the requeue for its own,
// and the invariants of TestFaultsNeverLoseJobs hold otherwise. A crash
// between the store's record of rubick's requeue and the requeue itself
// is left out: the record then names the restart count the user's
// requeue gives the job, and nothing in Slurm tells the two apart.
func TestUserRequeueHoldWhileDown(t *testing.T) {
	seeded := seededStore(t)
	for _, sc := range faultScenarios() {
		if sc.srun || sc.kind != slurm.ActionPreempt && sc.kind != slurm.ActionRestart {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			clean := runFault(t, seeded, sc, faultCase{})
			points := append(faults(clean.first), storeFaults(clean.writes)...)
			var held int
			for _, f := range points {
				if f.kind != faultCrash && f.kind != faultStoreCrash {
					continue
				}
				var did bool
				c := faultCase{first: f, userDid: "requeues job 91 held while rubickd is down", downtime: 10 * time.Minute,
					user: func(s *faultSlurm) { did = s.userRequeueHold(91) }}
				run := runFault(t, seeded, sc, c)
				if f.kind == faultStoreCrash && f.at == run.willRequeue {
					continue
				}
				if !did {
					continue
				}
				held++
				if v := run.violations(t); len(v) > 0 {
					t.Errorf("%s:\n%s", c, strings.Join(v, "\n"))
				}
			}
			if held == 0 {
				t.Fatalf("no crash point of %d left job 91 for its user to requeue", len(points))
			}
			t.Logf("%d crash points with the user's requeuehold", held)
		})
	}
}

// A rubickd that crashed anywhere in a cycle and is started again ten
// minutes later, its clock, its store's and Slurm's that much on, leaves
// no job lost or stuck (the invariants of TestFaultsNeverLoseJobs): the
// fault matrix's own runs keep the clock at t0 throughout.
func TestFaultsAcrossDowntime(t *testing.T) {
	seeded := seededStore(t)
	for _, sc := range faultScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			clean := runFault(t, seeded, sc, faultCase{})
			var n int
			for _, f := range append(faults(clean.first), storeFaults(clean.writes)...) {
				if f.kind != faultCrash && f.kind != faultStoreCrash {
					continue
				}
				c := faultCase{first: f, downtime: 10 * time.Minute}
				if v := runFault(t, seeded, sc, c).violations(t); len(v) > 0 {
					t.Errorf("%s:\n%s", c, strings.Join(v, "\n"))
				}
				n++
			}
			t.Logf("%d crash points", n)
		})
	}
}
