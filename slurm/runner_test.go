package slurm

import (
	"context"
	"errors"
	"testing"
	"time"
)

// blockRunner waits for its context and returns its error.
type blockRunner struct{}

func (blockRunner) Run(ctx context.Context, _ []string) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TimedRunner gives up on a command after its Timeout; without one the
// command runs as long as ctx lets it.
func TestTimedRunner(t *testing.T) {
	_, err := TimedRunner{Runner: blockRunner{}, Timeout: 10 * time.Millisecond}.Run(context.Background(), []string{"scontrol"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("with a timeout: err = %v, want a deadline", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	_, err = TimedRunner{Runner: blockRunner{}}.Run(ctx, []string{"scontrol"})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("without a timeout: err = %v, want ctx's cancellation", err)
	}
}
