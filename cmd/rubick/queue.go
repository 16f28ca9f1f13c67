package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/report"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// queueView is what `rubick queue` prints: the jobs of rubickd's newest
// recorded cycle in the order the policy handed out GPUs. squeue shows
// every job rubick holds as held (JobHeldUser); this is the order behind
// that. Its JSON keys are stable (docs/report.md).
type queueView struct {
	Store   string    `json:"store"`
	CycleID int64     `json:"cycle_id"`
	At      time.Time `json:"at"`
	AgeS    float64   `json:"age_s"`
	Policy  string    `json:"policy"`
	// Guaranteed lists the guaranteed jobs queued at the cycle in the
	// order the policy admits them, before the best-effort order, each
	// within its tenant's quota.
	Guaranteed []queueEntry `json:"guaranteed"`
	// Order is the best-effort order, head first.
	Order []queueEntry `json:"order"`
	// Others are the cycle's other jobs (held by rubickd for a group
	// limit, released as submitted, left alone, running outside the
	// order); with --all only.
	// A job rubickd has left alone for the same reason since an earlier
	// cycle is listed with that cycle's reason (SinceCycle).
	Others []queueEntry `json:"others,omitempty"`
	Notes  []string     `json:"notes"`
}

// queueEntry is one job's decision in the cycle.
type queueEntry struct {
	JobID int64 `json:"job_id"`
	// ArrayTask is the job as squeue names a task of a job array (A_T).
	ArrayTask string `json:"array_task,omitempty"`
	// User owns the job ("" where the store does not know: a job rubickd
	// last recorded before schema 8).
	User      string `json:"user"`
	ModelType string `json:"model_type"`
	Class     string `json:"class"`
	Tenant    string `json:"tenant"`
	// Queued: the job held no GPUs before the cycle's decision; GPUs is
	// what it holds after it.
	Queued    bool              `json:"queued"`
	GPUs      int               `json:"gpus"`
	Kind      string            `json:"kind"`
	Reason    string            `json:"reason"`
	Detail    string            `json:"detail"`
	MinRes    *policy.Size      `json:"min_res,omitempty"`
	Order     *policy.Order     `json:"order,omitempty"`
	Admission *policy.Admission `json:"admission,omitempty"`
	// SinceCycle is the earlier cycle that stored the reason shown, for a
	// job the cycle left alone for the same reason as then; 0 for the
	// cycle's own reasons.
	SinceCycle int64 `json:"since_cycle,omitempty"`
}

func runQueue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return queueCmd(ctx, args, stdout, stderr, processEnv())
}

func queueCmd(ctx context.Context, args []string, stdout, stderr io.Writer, env cliEnv) error {
	fset := newFlags("queue", "Show the jobs of rubickd's newest recorded cycle in the order the policy handed out\n"+
		"GPUs: the queued guaranteed jobs it admits first, then the best-effort order, head\n"+
		"first, with each job's slope, time left and decision. squeue shows the jobs rubick\n"+
		"holds as held; this is the order behind it. rubick explain JOBID has one job's story.", stderr)
	storePath := storePathFlag(fset, env, configFlag(fset, env, stderr))
	asJSON := fset.Bool("json", false, "write JSON")
	queuedOnly := fset.Bool("queued", false, "only the jobs queued at the cycle")
	all := fset.Bool("all", false, "also the cycle's jobs outside the order (held for a group limit, left to Slurm)")
	user := fset.String("user", "", "only this user's jobs (positions stay those of the whole order)")
	cycle := fset.Int64("cycle", 0, "an earlier decision cycle (its id, as rubick explain shows it) instead of the newest")
	if help, err := parseFlags(fset, args); help || err != nil {
		return err
	}
	if *cycle < 0 {
		return fmt.Errorf("%w: --cycle=%d must be a cycle id (> 0), or 0 for the newest", errUsage, *cycle)
	}
	st, path, err := openStoreFlag(ctx, "queue", storePath)
	if err != nil {
		return err
	}
	defer st.Close()
	q, err := queue(ctx, st, path, queueFilter{queuedOnly: *queuedOnly, all: *all, user: *user, cycle: *cycle}, env.now())
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, q)
	}
	return q.write(stdout)
}

// queueStore is what queue reads; *store.Store has it.
type queueStore interface {
	LastCycle(ctx context.Context) (int64, error)
	Decision(ctx context.Context, cycleID int64) (store.Decision, error)
	Job(ctx context.Context, id int64) (store.Job, error)
	ReasonsAsOf(ctx context.Context, cycleID int64, ids []int64) (map[int64]store.Reason, error)
}

// staleCycle is the age past which queue warns that its newest cycle may
// not be the queue as it is.
const staleCycle = 10 * time.Minute

// queueFilter selects the jobs queue lists.
type queueFilter struct {
	queuedOnly, all bool
	user            string // "": everyone's
	cycle           int64  // 0: the newest
}

func queue(ctx context.Context, st queueStore, path string, f queueFilter, now time.Time) (*queueView, error) {
	id := f.cycle
	if id == 0 {
		last, err := st.LastCycle(ctx)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("queue: the store %s has no decision cycle yet (rubickd records one per cycle it plans): %w", path, err)
		}
		if err != nil {
			return nil, fmt.Errorf("queue: %w", err)
		}
		id = last
	}
	d, err := st.Decision(ctx, id)
	if errors.Is(err, store.ErrNotFound) && f.cycle > 0 {
		return nil, fmt.Errorf("queue: cycle %d is not in the store %s (never recorded, or pruned past retention.reasons): %w", id, path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	age := now.Sub(d.At)
	q := &queueView{Store: path, CycleID: d.CycleID, At: d.At, AgeS: age.Seconds(), Policy: d.Policy,
		Guaranteed: []queueEntry{}, Order: []queueEntry{}, Notes: []string{}}
	reasons, since := d.Reasons, map[int64]int64{}
	if f.all && len(d.Unchanged) > 0 {
		// The jobs rubickd left alone for a reason it stored in an
		// earlier cycle, and stores once.
		earlier, err := st.ReasonsAsOf(ctx, d.CycleID, d.Unchanged)
		if err != nil {
			return nil, fmt.Errorf("queue: %w", err)
		}
		reasons = make(map[int64]json.RawMessage, len(d.Reasons)+len(d.Unchanged)) // a cycle may store no reason at all
		maps.Copy(reasons, d.Reasons)
		for _, id := range d.Unchanged {
			r, ok := earlier[id]
			if !ok {
				// Prune keeps each job's newest reason, so only an
				// earlier --cycle can lose it.
				raw, err := json.Marshal(policy.Action{Kind: policy.Keep, Reason: daemon.ReasonIgnored,
					Detail: fmt.Sprintf("its reason, stored before cycle %d, is pruned", d.CycleID)})
				if err != nil {
					return nil, fmt.Errorf("queue: %w", err)
				}
				r.Reason = raw
			}
			reasons[id], since[id] = r.Reason, r.CycleID
		}
	}
	ordered := false // the cycle's policy placed some job in an order
	for _, jobID := range slices.Sorted(maps.Keys(reasons)) {
		a, ok := report.DecodeReason(reasons[jobID])
		if !ok {
			continue // not a decision (another policy's free-form reason)
		}
		ordered = ordered || a.Order != nil || a.Admission != nil
		e := queueEntry{JobID: jobID, Kind: string(a.Kind), Reason: string(a.Reason), Detail: a.Detail, MinRes: a.MinRes, Order: a.Order, Admission: a.Admission,
			GPUs: a.Placement().GPUs(), Queued: a.Kind == policy.Start || a.Kind == policy.Keep && len(a.Alloc) == 0, SinceCycle: since[jobID]}
		j, err := st.Job(ctx, jobID)
		switch {
		case err == nil:
			e.ArrayTask, e.User, e.ModelType, e.Class, e.Tenant = arrayTaskName(j), j.User, j.ModelType, string(j.Class), j.Tenant
			if a.Order == nil && a.Admission == nil {
				// rubickd's own reasons (a hold, a job it leaves alone)
				// carry no allocation even for a running job: its state
				// as last recorded says.
				e.Queued = j.State == slurm.StatePending
			}
		case !errors.Is(err, store.ErrNotFound):
			return nil, fmt.Errorf("queue: %w", err)
		}
		switch {
		case f.queuedOnly && !e.Queued, f.user != "" && e.User != f.user:
		case e.Order != nil:
			q.Order = append(q.Order, e)
		case e.Admission != nil:
			q.Guaranteed = append(q.Guaranteed, e)
		case f.all:
			q.Others = append(q.Others, e)
		}
	}
	slices.SortFunc(q.Order, func(a, b queueEntry) int { return cmp.Compare(a.Order.Position, b.Order.Position) })
	slices.SortFunc(q.Guaranteed, func(a, b queueEntry) int { return cmp.Compare(a.Admission.Position, b.Admission.Position) })
	if f.cycle == 0 && age > staleCycle {
		// rubickd records a cycle every interval (30 s by default): an old
		// newest cycle is a queue of the past.
		q.Notes = append(q.Notes, fmt.Sprintf("the newest cycle is %s old, and rubickd records one every interval (30s by default): is it running? (rubick status)",
			ageString(q.AgeS)))
	}
	// Where nothing is listed, a held or waiting job is among the others.
	others := ""
	if !f.all {
		others = "; --all lists the cycle's other jobs (held, waiting, left to Slurm), rubick explain JOBID why one waits"
	}
	switch {
	case !ordered && policy.KeepsOrder(d.Policy):
		// Its order holds queued jobs and running ones it may reconfigure.
		q.Notes = append(q.Notes, fmt.Sprintf("cycle %d placed no job in an order: none was queued for GPUs, and no running one could be reconfigured%s", d.CycleID, others))
	case !ordered:
		var keep []string
		for _, n := range policy.Names() {
			if policy.KeepsOrder(n) {
				keep = append(keep, n)
			}
		}
		q.Notes = append(q.Notes, fmt.Sprintf("cycle %d placed no job in an order (policy %s: only %s keep one)%s", d.CycleID, d.Policy, strings.Join(keep, ", "), others))
	case len(q.Order) > 0 || len(q.Guaranteed) > 0:
	case f.user != "":
		q.Notes = append(q.Notes, fmt.Sprintf("no job of user %q in the orders of cycle %d%s", f.user, d.CycleID, others))
	case f.queuedOnly:
		q.Notes = append(q.Notes, fmt.Sprintf("no queued job in the orders of cycle %d%s", d.CycleID, others))
	}
	return q, nil
}

func (q *queueView) write(w io.Writer) error {
	ew := &stickyWriter{w: w}
	fmt.Fprintf(ew, "cycle %d at %s (%s ago), policy %s, store %s\n", q.CycleID, utcTime(q.At), ageString(q.AgeS), q.Policy, q.Store)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	if len(q.Guaranteed) > 0 {
		fmt.Fprintln(tw, "queued guaranteed jobs, in admission order, admitted first within their tenant's quota:")
		fmt.Fprintln(tw, "  POS\tJOB\tUSER\tMODEL\tTENANT\tMIN\tBY\tDECISION")
		for _, e := range q.Guaranteed { // each has an admission
			min := "-"
			if e.MinRes != nil {
				min = e.MinRes.String()
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Admission.Position, jobLabel(e.JobID, e.ArrayTask), orDash(e.User), orDash(e.ModelType),
				orDash(e.Tenant), min, e.Admission.By, e.decision())
		}
	}
	if len(q.Order) > 0 {
		queued := 0
		for _, e := range q.Order {
			if e.Queued {
				queued++
			}
		}
		fmt.Fprintf(tw, "best-effort order, head first: %d jobs shown, %d of them queued\n", len(q.Order), queued)
		fmt.Fprintln(tw, "  POS\tJOB\tUSER\tMODEL\tCLASS\tSTATE\tGPUS\tBY\tSLOPE\tLEFT\tWEIGHED\tDECISION")
		for _, e := range q.Order {
			o := e.Order
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%.3g\t%s\t%.3g\t%s\n", o.Position, jobLabel(e.JobID, e.ArrayTask), orDash(e.User), orDash(e.ModelType),
				orDash(e.Class), e.state(), e.GPUs, o.By, o.Slope, timeLeftString(*o), o.WeighedSlope, e.decision())
		}
	}
	if len(q.Others) > 0 {
		fmt.Fprintln(tw, "other jobs of the cycle:")
		fmt.Fprintln(tw, "  JOB\tUSER\tMODEL\tCLASS\tSTATE\tGPUS\tDECISION")
		for _, e := range q.Others {
			d := e.decision()
			if e.SinceCycle > 0 {
				d += fmt.Sprintf(" (since cycle %d)", e.SinceCycle)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%s\n", jobLabel(e.JobID, e.ArrayTask), orDash(e.User), orDash(e.ModelType), orDash(e.Class), e.state(), e.GPUs, d)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range q.Notes {
		fmt.Fprintf(ew, "note: %s\n", n)
	}
	return ew.err
}

func (e queueEntry) state() string {
	if e.Queued {
		return "queued"
	}
	return "running"
}

func (e queueEntry) decision() string {
	return fmt.Sprintf("%s (%s)%s", e.Kind, e.Reason, colonDetail(e.Detail))
}

// timeLeftString is an order's hours left as the LEFT column shows them:
// "-" where time left is not weighed, "none" for a job without a limit.
func timeLeftString(o policy.Order) string {
	switch {
	case o.NoTimeLimit:
		return "none"
	case o.TimeLeftH > 0:
		return fmt.Sprintf("%.2fh", o.TimeLeftH)
	}
	return "-"
}
