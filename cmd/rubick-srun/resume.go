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

// lines follows r from now on, for one reader of iteration-time lines.
func (r *resumes) lines() resumeMark {
	m := resumeMark{r: r}
	if r != nil {
		m.seen = r.n.Load()
	}
	return m
}

// resumeMark is the resume count at a reader's previous line.
type resumeMark struct {
	r    *resumes
	seen int64
}

// spans reports whether a resume came since the previous line, so that the
// line at hand spans the stop, and moves the mark on.
func (m *resumeMark) spans() bool {
	if m.r == nil {
		return false
	}
	n := m.r.n.Load()
	was := m.seen
	m.seen = n
	return n != was
}
