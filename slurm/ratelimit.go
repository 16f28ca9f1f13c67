package slurm

import (
	"context"
	"sync"
	"time"
)

// rateLimiter is a token bucket: at most burst calls at once, refilled at
// rate calls per second. Waiters reserve a token before sleeping, so
// concurrent callers are spaced out rather than woken together. It exists so
// that a polling loop, however misconfigured, cannot flood slurmctld (every
// slurmrestd call is an RPC to it).
type rateLimiter struct {
	clock Clock
	rate  float64 // tokens per second
	burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newRateLimiter(clock Clock, rate float64, burst int) *rateLimiter {
	if burst < 1 {
		burst = 1
	}
	return &rateLimiter{clock: clock, rate: rate, burst: float64(burst), tokens: float64(burst), last: clock.Now()}
}

// wait blocks until a call may proceed or ctx is done.
func (l *rateLimiter) wait(ctx context.Context) error {
	if l == nil || l.rate <= 0 {
		return ctx.Err()
	}
	l.mu.Lock()
	now := l.clock.Now()
	if el := now.Sub(l.last).Seconds(); el > 0 {
		l.tokens = min(l.burst, l.tokens+el*l.rate)
		l.last = now
	}
	l.tokens--
	var d time.Duration
	if l.tokens < 0 {
		d = time.Duration(-l.tokens / l.rate * float64(time.Second))
	}
	l.mu.Unlock()
	if d == 0 {
		return ctx.Err()
	}
	if err := l.clock.Sleep(ctx, d); err != nil {
		l.mu.Lock()
		l.tokens++ // give the reservation back
		l.mu.Unlock()
		return err
	}
	return nil
}
