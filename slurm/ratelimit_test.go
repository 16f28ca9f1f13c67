package slurm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRateLimiter(t *testing.T) {
	clk := newFakeClock()
	l := newRateLimiter(clk, 10, 2) // 10/s, burst 2
	ctx := context.Background()
	for range 4 {
		if err := l.wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// two free calls, then one every 100 ms
	if diff := cmp.Diff([]time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, clk.Sleeps()); diff != "" {
		t.Errorf("sleeps (-want +got):\n%s", diff)
	}
	// an idle second refills the bucket to its burst, not beyond
	_ = clk.Sleep(ctx, time.Second)
	before := len(clk.Sleeps())
	for range 2 {
		_ = l.wait(ctx)
	}
	if len(clk.Sleeps()) != before {
		t.Errorf("refilled bucket still slept: %v", clk.Sleeps()[before:])
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.wait(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}
	var unlimited *rateLimiter
	if err := unlimited.wait(ctx); err != nil {
		t.Errorf("nil limiter: %v", err)
	}
}
