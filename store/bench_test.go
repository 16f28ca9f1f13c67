package store

import (
	"context"
	"fmt"
	"testing"

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
