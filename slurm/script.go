package slurm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// ErrNoScript is a job whose batch script Slurm does not give: an
// interactive job, a job that has ended, or one rubickd may not read.
var ErrNoScript = errors.New("no batch script")

// MaxScriptBytes bounds a batch script BatchScripts returns: a script
// that embeds data is no launch line rubick could read.
const MaxScriptBytes = 1 << 20

// BatchScripts reads jobs' batch scripts with `scontrol write
// batch_script` (a TimedRunner bounds each command). Slurm gives them to
// their owner, operators and administrators only.
type BatchScripts struct {
	Runner   Runner
	Scontrol string
}

// BatchScript returns the batch script of job id (an array task's is its
// array's).
func (b BatchScripts) BatchScript(ctx context.Context, id int) (string, error) {
	out, err := b.Runner.Run(ctx, []string{b.Scontrol, "write", "batch_script", strconv.Itoa(id), "-"})
	if err != nil {
		return "", fmt.Errorf("batch script of job %d: %w", id, err)
	}
	// A job without one exits 0, saying so on stderr only.
	if len(out) == 0 {
		return "", fmt.Errorf("job %d: %w", id, ErrNoScript)
	}
	if len(out) > MaxScriptBytes {
		return "", fmt.Errorf("job %d: %w: the script has %d bytes, more than %d", id, ErrNoScript, len(out), MaxScriptBytes)
	}
	return string(out), nil
}
