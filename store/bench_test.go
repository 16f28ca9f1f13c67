package store

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/model"
)

// BenchmarkAddSamples measures one AddSamples transaction of a typical
// batch (a job reports its iterations every few minutes) at both
// synchronous levels; the difference is the price of SyncFull's fsync.
func BenchmarkAddSamples(b *testing.B) {
	for _, sync := range []Sync{SyncFull, SyncNormal} {
		for _, n := range []int{1, 100} {
			b.Run(fmt.Sprintf("sync=%s/batch=%d", sync, n), func(b *testing.B) {
				ctx := context.Background()
				s := openTest(b, "", WithSync(sync))
				if err := s.UpsertModelType(ctx, gpt2()); err != nil {
					b.Fatal(err)
				}
				batch := make([]model.Sample, n)
				for i := range batch {
					batch[i] = sample(8, 1, 1, model.Placement{8}, 1+float64(i)/100)
				}
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					if err := s.AddSamples(ctx, "gpt2", batch, int64(i+1), SourceOnline); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
			})
		}
	}
}

// BenchmarkUpsertJobs measures what rubickd's cycle writes of its jobs:
// 100 or 2,000 jobs one transaction each (UpsertJob), or all in one
// (UpsertJobs), at the default SyncFull.
func BenchmarkUpsertJobs(b *testing.B) {
	for _, n := range []int{100, 2000} {
		jobs := make([]Job, n)
		for i := range jobs {
			jobs[i] = Job{ID: int64(i + 1), ModelType: "gpt2", Class: BestEffort, State: "PENDING", User: "alice", Submitted: t0}
		}
		for _, batch := range []bool{false, true} {
			b.Run(fmt.Sprintf("jobs=%d/batch=%v", n, batch), func(b *testing.B) {
				ctx := context.Background()
				s := openTest(b, "")
				if err := s.UpsertModelType(ctx, gpt2()); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if batch {
						if err := s.UpsertJobs(ctx, jobs); err != nil {
							b.Fatal(err)
						}
						continue
					}
					for _, j := range jobs {
						if err := s.UpsertJob(ctx, j); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkCurrentFit measures the lookup every job start makes, with a
// long fit history, from one goroutine and from many.
func BenchmarkCurrentFit(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, "", WithSync(SyncNormal))
	if err := s.UpsertModelType(ctx, gpt2()); err != nil {
		b.Fatal(err)
	}
	for i := range 1000 {
		if _, err := s.AddFit(ctx, "gpt2", fitWith(float64(i%97+1)/100), SourceOnline); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.CurrentFit(ctx, "gpt2"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.CurrentFit(ctx, "gpt2"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkPrune measures the hourly prune at a busy site: 200 jobs that
// each reported 360 iteration times in the hour (one per 10 s) on one
// configuration, pruned to the default 100 per configuration, and 200
// jobs' reasons of 120 cycles (one per 30 s) pruned to the newest.
func BenchmarkPrune(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, "", WithSync(SyncNormal))
	if err := s.UpsertModelType(ctx, gpt2()); err != nil {
		b.Fatal(err)
	}
	const jobs, perJob, cycles = 200, 360, 120
	for j := range jobs {
		if err := s.UpsertJob(ctx, Job{ID: int64(j + 1), ModelType: "gpt2", Class: BestEffort, State: "RUNNING"}); err != nil {
			b.Fatal(err)
		}
	}
	fill := func() {
		err := s.write(ctx, func(tx *sql.Tx) error {
			for j := range jobs {
				for i := range perJob {
					if _, err := tx.ExecContext(ctx, `
						INSERT INTO samples(model_type, dp, tp, pp, micro_batch, accum, zero, offload, checkpoint,
							placement, gpus, cpus, host_mem_gb, iter_s, fwd_s, cc_s, opt_s, source_job, source, created_ns, iteration)
						VALUES ('gpt2', 8, 1, 1, 2, 4, 1, 0, 0, '8', 8, 64, 100, 1.5, 0, 0, 0, ?, 'online', ?, ?)`,
						j+1, i, i); err != nil {
						return err
					}
				}
			}
			for c := range cycles {
				res, err := tx.ExecContext(ctx, `INSERT INTO decisions(decided_ns, policy, duration_ns) VALUES (?, 'rubick', 0)`, c)
				if err != nil {
					return err
				}
				id, _ := res.LastInsertId()
				for j := range jobs {
					if _, err := tx.ExecContext(ctx, `INSERT INTO decision_reasons(cycle_id, job_id, reason) VALUES (?, ?, '"keep"')`, id, j+1); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	r := Retention{ReasonsBefore: time.Unix(0, cycles), SamplesPerConfig: 100}
	for b.Loop() {
		b.StopTimer()
		fill()
		b.StartTimer()
		p, err := s.Prune(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		if p.Samples < jobs*(perJob-100) || p.Reasons < jobs*(cycles-1) {
			b.Fatalf("pruned %+v", p)
		}
	}
}
