package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/model"
)

// crashEnv names the database the child writer uses; crashBaseEnv the
// first batch number it writes.
const (
	crashEnv     = "RUBICK_STORE_CRASH_DB"
	crashBaseEnv = "RUBICK_STORE_CRASH_BASE"
	crashSamples = 200 // samples per AddSamples transaction
	crashActions = 3   // jobs, actions and reasons per decision
)

// TestHelperWriter is the child process of TestCrashConsistency: it writes
// batches through the Store until it is killed. Each batch is several
// transactions; before each it prints "w BATCH STEP" and after it commits
// "c BATCH STEP", so the parent knows which write the kill interrupted.
func TestHelperWriter(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("child process of TestCrashConsistency")
	}
	base, err := strconv.ParseInt(os.Getenv(crashBaseEnv), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", crashBaseEnv, err)
	}
	ctx := context.Background()
	s, err := Open(ctx, path, WithClock((&fakeClock{}).now))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertModelType(ctx, gpt2()); err != nil {
		t.Fatal(err)
	}
	samples := make([]model.Sample, crashSamples)
	for i := range samples {
		samples[i] = sample(8, 1, 1, model.Placement{8}, 1+float64(i)/1000)
	}
	fmt.Println("ready")
	step := func(batch int64, name string, fn func() error) {
		fmt.Println("w", batch, name)
		if err := fn(); err != nil {
			t.Fatalf("batch %d %s: %v", batch, name, err)
		}
		fmt.Println("c", batch, name)
	}
	// The deadline only ends an orphan whose parent died before killing it.
	deadline := time.Now().Add(30 * time.Second)
	for batch := base; time.Now().Before(deadline); batch++ {
		step(batch, "samples", func() error { return s.AddSamples(ctx, "gpt2", samples, batch, SourceOnline) })
		step(batch, "fit", func() error {
			_, err := s.AddFit(ctx, "gpt2", fitWith(crashRMSLE(batch)), SourceOnline)
			return err
		})
		var d Decision
		for i := range int64(crashActions) {
			job := batch*crashActions + i
			step(batch, "job", func() error {
				return s.UpsertJob(ctx, Job{ID: job, ModelType: "gpt2", Class: BestEffort, State: "PENDING"})
			})
			d.Actions = append(d.Actions, Action{JobID: job, Kind: "start", Plan: plan8, Resources: res8})
		}
		step(batch, "decision", func() error {
			d.Policy = "rubick"
			d.Reasons = map[int64]json.RawMessage{}
			for _, a := range d.Actions {
				d.Reasons[a.JobID] = json.RawMessage(`{"batch":` + strconv.FormatInt(batch, 10) + `}`)
			}
			var err error
			d, err = s.RecordDecision(ctx, d)
			return err
		})
		step(batch, "applied", func() error { return s.MarkApplied(ctx, d.Actions[0].ID, ResultOK, nil) })
	}
}

// crashRMSLE spreads fits over better and worse errors.
func crashRMSLE(batch int64) float64 { return float64(batch*7919%1000+1) / 1000 }

// TestCrashConsistency kills a writing child process at seeded random
// moments, then checks that the database opens, passes integrity_check and
// holds every transaction whole or not at all, including every transaction
// the child saw committed.
func TestCrashConsistency(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	const seed = 20260301
	rng := rand.New(rand.NewPCG(seed, 0))
	path := filepath.Join(t.TempDir(), "crash.db")
	inside := 0
	for run := range 6 {
		delay := time.Duration(20+rng.IntN(180)) * time.Millisecond
		last, committed := killWriter(t, path, int64(run+1)*1_000_000, delay)
		if strings.HasPrefix(last, "w ") {
			inside++
		}
		t.Logf("run %d: killed after %v, %d sample batches committed, last line %q", run, delay, len(committed), last)
		verifyCrashDB(t, path, committed)
		if t.Failed() {
			t.Fatalf("seed %d, run %d", seed, run)
		}
	}
	// A kill between two writes would prove nothing about atomicity.
	if inside == 0 {
		t.Errorf("no kill landed inside a write; the test did not exercise a torn transaction")
	}
	t.Logf("%d of 6 kills landed inside a write call", inside)
}

// killWriter runs the child on path, SIGKILLs it delay after it is ready
// and returns the last line it printed and the sample batches it saw
// committed.
func killWriter(t *testing.T, path string, base int64, delay time.Duration) (string, []int64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+path, crashBaseEnv+"="+strconv.FormatInt(base, 10))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	lastc := make(chan string, 1)
	var committed []int64
	go func() {
		sc := bufio.NewScanner(out)
		last := ""
		for sc.Scan() {
			last = sc.Text()
			if last == "ready" {
				close(ready)
			}
			var batch int64
			if _, err := fmt.Sscanf(last, "c %d samples", &batch); err == nil {
				committed = append(committed, batch)
			}
		}
		lastc <- last
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child never became ready; stderr:\n%s", stderr.String())
	}
	time.Sleep(delay)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	last := <-lastc
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child ended with %v before the kill; stderr:\n%s", err, stderr.String())
	}
	return last, committed
}

func verifyCrashDB(t *testing.T, path string, committed []int64) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer s.Close()
	ints := func(q string) []int64 {
		t.Helper()
		rows, err := s.r.QueryContext(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		var out []int64
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}

	var check string
	if err := s.r.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check = %q, %v", check, err)
	}
	if rows := ints(`SELECT COUNT(*) FROM pragma_foreign_key_check`); rows[0] != 0 {
		t.Errorf("foreign_key_check found %d violations", rows[0])
	}
	// Samples: each AddSamples batch is all or nothing.
	for _, n := range ints(`SELECT COUNT(*) FROM samples GROUP BY source_job`) {
		if n != crashSamples {
			t.Errorf("a sample batch holds %d rows, want %d", n, crashSamples)
		}
	}
	// A commit the child saw returned survives the kill of the process.
	for _, batch := range committed {
		if n := ints(fmt.Sprintf(`SELECT COUNT(*) FROM samples WHERE source_job = %d`, batch)); n[0] != crashSamples {
			t.Errorf("committed sample batch %d holds %d rows, want %d", batch, n[0], crashSamples)
		}
	}
	// Fits: exactly one current fit, the best stored.
	if got := ints(`SELECT COUNT(*) FROM fits WHERE current = 1`); ints(`SELECT COUNT(*) FROM fits`)[0] > 0 && got[0] != 1 {
		t.Errorf("%d current fits, want 1", got[0])
	}
	if bad := ints(`SELECT COUNT(*) FROM fits f WHERE current = 1
		AND rmsle > (SELECT MIN(rmsle) FROM fits g WHERE g.model_type = f.model_type)`); bad[0] != 0 {
		t.Errorf("the current fit is not the best one")
	}
	// Decisions: every cycle holds all its actions and reasons.
	for _, n := range ints(`SELECT COUNT(a.id) FROM decisions d LEFT JOIN plan_history a USING (cycle_id) GROUP BY d.cycle_id`) {
		if n != crashActions {
			t.Errorf("a decision holds %d actions, want %d", n, crashActions)
		}
	}
	for _, n := range ints(`SELECT COUNT(r.job_id) FROM decisions d LEFT JOIN decision_reasons r USING (cycle_id) GROUP BY d.cycle_id`) {
		if n != crashActions {
			t.Errorf("a decision holds %d reasons, want %d", n, crashActions)
		}
	}
	// MarkApplied: the result and the job's last plan change together.
	if bad := ints(`SELECT COUNT(*) FROM plan_history a JOIN jobs j USING (job_id)
		WHERE (a.result = 'ok') <> (j.last_plan IS NOT NULL)`); bad[0] != 0 {
		t.Errorf("%d actions disagree with their job's last plan", bad[0])
	}
}
