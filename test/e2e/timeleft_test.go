//go:build e2e

package e2e

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestShorterLimitFirst: one GPU free and two bert jobs held for it, alike
// but for their --time. By slope alone they tie and the first submitted,
// with 2 hours, would get it; weighed by time left (policy.time_weight,
// 0.5 by default) the one submitted after it, with 10 minutes, starts
// first, with reason slope. rubick explain shows each one's place in the
// order and the hours its limit left it.
func TestShorterLimitFirst(t *testing.T) {
	lt := newLabTest(t, "timeleft", 2*time.Minute, "")
	l, ctx, dir, bin, cluster := lt.lab, lt.ctx, lt.dir, lt.bin, lt.cluster
	lt.ids = append(lt.ids, holdGPUs(ctx, t, l, cluster, filler{"3", "8"}, filler{"1", "7"})...)
	submit := func(limit string) int {
		return l.submitScript(t, dir, shortTraining(bin, dir, "bert", 32), &lt.ids, "--model-type=bert", "-p", "gpu",
			"-J", "e2e-timeleft", "-N", "1", "--ntasks-per-node=1", "--gres=gpu:2", "--cpus-per-task=4", "--mem=16G",
			"--time="+limit, "--requeue")
	}
	long := submit("120")
	short := submit("10")
	d := runDaemon(t, l, bin, dir, lt.cfgPath)

	lt.startsFirst(t, d, job{short, "10-minute job"}, job{long, "2-hour job"})
	lt.wantStartReason(t, short, "slope")
	lt.wantOrder(t, short, 0.5/3, 0)
	lt.wantOrder(t, long, 2, 1)
	lt.wantQueued(t, long, 2)
}

// wantQueued fails the test unless rubick queue, asked for the lab user's
// jobs, lists job id in the best-effort order of rubickd's newest cycle,
// queued, with leftH hours left by its time limit.
func (lt *labTest) wantQueued(t *testing.T, id int, leftH float64) {
	t.Helper()
	out := lt.lab.run(t, filepath.Join(lt.bin, "rubick"), "queue", "--store", lt.dbPath, "--json", "--queued", "--user", lt.lab.user)
	var q struct {
		Order []struct {
			JobID  int    `json:"job_id"`
			User   string `json:"user"`
			Queued bool   `json:"queued"`
			Order  struct {
				TimeLeftH float64 `json:"time_left_h"`
			} `json:"order"`
		} `json:"order"`
	}
	if err := json.Unmarshal([]byte(out), &q); err != nil {
		t.Fatalf("rubick queue: %v\n%s", err, out)
	}
	for _, e := range q.Order {
		if e.JobID == id && e.User == lt.lab.user && e.Queued && math.Abs(e.Order.TimeLeftH-leftH) < 1e-3 {
			return
		}
	}
	t.Errorf("rubick queue does not list job %d queued with %.3f h left:\n%s", id, leftH, out)
}

// wantOrder fails the test unless a decision rubickd stored for job id,
// as rubick explain shows it, placed it in the best-effort order by slope,
// with leftH hours left by its time limit and queuedAhead queued jobs
// before it. Job id is pending then, so its run time adds nothing.
func (lt *labTest) wantOrder(t *testing.T, id int, leftH float64, queuedAhead int) {
	t.Helper()
	out := lt.lab.run(t, filepath.Join(lt.bin, "rubick"), "explain", "--store", lt.dbPath, "--json", "--reasons", "100", strconv.Itoa(id))
	type order struct {
		QueuedAhead int     `json:"queued_ahead"`
		By          string  `json:"by"`
		TimeLeftH   float64 `json:"time_left_h"`
	}
	var ex struct {
		Reasons []struct {
			Kind  string `json:"kind"`
			Order *order `json:"order"`
		} `json:"reasons"`
	}
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("rubick explain %d: %v\n%s", id, err, out)
	}
	for _, r := range ex.Reasons {
		if o := r.Order; o != nil && (r.Kind == "keep" || r.Kind == "start") && o.By == "slope" && o.QueuedAhead == queuedAhead &&
			math.Abs(o.TimeLeftH-leftH) < 1e-3 {
			return
		}
	}
	t.Errorf("job %d: no stored decision places it by slope with %.3f h left and %d queued ahead:\n%s", id, leftH, queuedAhead, out)
}
