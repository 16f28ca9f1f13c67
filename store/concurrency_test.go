package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

// TestConcurrentReadersAndWriters runs writers and readers at once (run it
// with -race): no call may fail with SQLITE_BUSY or a lock error, and no
// reader may ever see part of a transaction.
func TestConcurrentReadersAndWriters(t *testing.T) {
	ctx := context.Background()
	// The synchronous level does not change what readers can see; NORMAL
	// keeps the fsyncs from stretching the test under -race.
	s := openTest(t, "", WithSync(SyncNormal))
	if err := s.UpsertModelType(ctx, gpt2()); err != nil {
		t.Fatal(err)
	}
	const (
		writers = 3
		rounds  = 40
		batch   = 10
		readers = 6
	)
	batchOf := func() []model.Sample {
		out := make([]model.Sample, batch)
		for i := range out {
			out[i] = sample(8, 1, 1, model.Placement{8}, 1+float64(i)/10)
		}
		return out
	}()

	var done atomic.Bool
	var reads atomic.Int64
	errc := make(chan error, writers+readers)
	var wwg, rwg sync.WaitGroup
	for w := range writers {
		wwg.Go(func() {
			for r := range rounds {
				job := int64(w*rounds + r + 1)
				if err := s.AddSamples(ctx, "gpt2", batchOf, job, SourceOnline); err != nil {
					errc <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				if _, err := s.AddFit(ctx, "gpt2", fitWith(1/float64(job)), SourceOnline); err != nil {
					errc <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				if err := s.UpsertJob(ctx, Job{ID: job, ModelType: "gpt2", Class: BestEffort, State: "RUNNING"}); err != nil {
					errc <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				if _, err := s.RecordDecision(ctx, Decision{Policy: "rubick", Actions: []Action{
					{JobID: job, Kind: "start", Plan: plan8, Resources: res8},
					{JobID: job, Kind: "shrink", Plan: plan4, Resources: res4},
				}}); err != nil {
					errc <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		})
	}
	for r := range readers {
		rwg.Go(func() {
			fail := func(err error) { errc <- fmt.Errorf("reader %d: %w", r, err) }
			for !done.Load() {
				smp, err := s.Samples(ctx, "gpt2")
				if err != nil {
					fail(err)
					return
				}
				perJob := map[int64]int{}
				for _, x := range smp {
					perJob[x.SourceJob]++
				}
				for job, n := range perJob {
					if n != batch {
						fail(fmt.Errorf("saw %d of the %d samples of job %d", n, batch, job))
						return
					}
				}
				if _, err := s.CurrentFit(ctx, "gpt2"); err != nil && !errors.Is(err, ErrNotFound) {
					fail(err)
					return
				}
				if _, err := s.Jobs(ctx, JobFilter{States: []string{"RUNNING"}}); err != nil {
					fail(err)
					return
				}
				pending, err := s.Pending(ctx)
				if err != nil {
					fail(err)
					return
				}
				if len(pending)%2 != 0 {
					fail(fmt.Errorf("saw %d pending actions, decisions hold 2 each", len(pending)))
					return
				}
				reads.Add(1)
			}
		})
	}
	wwg.Wait()
	done.Store(true)
	rwg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}

	smp, err := s.Samples(ctx, "gpt2")
	if err != nil {
		t.Fatal(err)
	}
	if want := writers * rounds * batch; len(smp) != want {
		t.Errorf("stored %d samples, want %d", len(smp), want)
	}
	cur, err := s.CurrentFit(ctx, "gpt2")
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 / float64(writers*rounds); cur.RMSLE != want {
		t.Errorf("current fit rmsle %v, want the best, %v", cur.RMSLE, want)
	}
	t.Logf("%d reader rounds beside %d write transactions", reads.Load(), writers*rounds*4)
}

// TestTwoStoresOneFile writes through two Stores on one file, as rubickd and
// an admin command would from two processes: BEGIN IMMEDIATE and the busy
// timeout make them wait for each other instead of failing.
func TestTwoStoresOneFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rubick.db")
	a, b := openTest(t, path), openTest(t, path)
	if err := a.UpsertModelType(ctx, gpt2()); err != nil {
		t.Fatal(err)
	}
	const n = 50
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for i, s := range []*Store{a, b} {
		wg.Go(func() {
			for r := range n {
				job := int64(i*n + r + 1)
				if err := s.AddSamples(ctx, "gpt2", []model.Sample{sample(8, 1, 1, model.Placement{8}, 1)}, job, SourceOnline); err != nil {
					errc <- fmt.Errorf("store %d: %w", i, err)
					return
				}
				if _, err := s.AddFit(ctx, "gpt2", fitWith(1/float64(job)), SourceOnline); err != nil {
					errc <- fmt.Errorf("store %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	smp, err := b.Samples(ctx, "gpt2")
	if err != nil || len(smp) != 2*n {
		t.Errorf("Samples = %d, %v; want %d", len(smp), err, 2*n)
	}
	fits, err := a.Fits(ctx, "gpt2")
	if err != nil {
		t.Fatal(err)
	}
	var current []float64
	for _, f := range fits {
		if f.Current {
			current = append(current, f.RMSLE)
		}
	}
	if want := []float64{1.0 / (2 * n)}; !cmp.Equal(want, current) {
		t.Errorf("current fits' RMSLE = %v, want %v", current, want)
	}
}
