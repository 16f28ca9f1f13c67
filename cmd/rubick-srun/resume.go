package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

// resumes counts the SIGCONTs rubick-srun receives. Slurm suspends a job
// (scontrol suspend) by stopping every process of it and resumes it with
// SIGCONT, so the trainer's next iteration-time line averages in the time
// the job stood still: no plan's speed, and a sample that would pull the
// model type's fit. A nil *resumes counts none.
type resumes struct{ n atomic.Int64 }

// watchResumes counts SIGCONTs until ctx ends.
func watchResumes(ctx context.Context, log *slog.Logger) *resumes {
	r := &resumes{}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCONT)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ch:
				r.n.Add(1)
				log.Info("resumed (SIGCONT): the next iteration time is not reported")
			case <-ctx.Done():
				return
			}
		}
	}()
	return r
}

// mark is the count to compare later lines with.
func (r *resumes) mark() int64 {
	if r == nil {
		return 0
	}
	return r.n.Load()
}

// since reports whether a resume came after *seen (the count at the
// previous line) and moves *seen on: the line at hand then spans the stop.
func (r *resumes) since(seen *int64) bool {
	if r == nil {
		return false
	}
	n := r.n.Load()
	was := *seen
	*seen = n
	return n != was
}
