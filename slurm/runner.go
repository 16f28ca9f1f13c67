package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Runner executes one command given as argv. It never involves a shell, so
// job names, comments and node names reach Slurm as single arguments
// whatever characters they contain.
type Runner interface {
	Run(ctx context.Context, argv []string) (stdout []byte, err error)
}

// CommandError is a failed command: its argv, exit code and stderr.
type CommandError struct {
	Argv     []string
	ExitCode int // -1 when the command did not run or was killed
	Stderr   string
	Err      error
}

// Error gives the command line, the failure and stderr.
func (e *CommandError) Error() string {
	s := fmt.Sprintf("%s: %v", strings.Join(e.Argv, " "), e.Err)
	if e.Stderr != "" {
		s += ": " + e.Stderr
	}
	return s
}

// Unwrap returns the underlying exec or context error.
func (e *CommandError) Unwrap() error { return e.Err }

// TimedRunner bounds each command Runner runs by Timeout (0: no bound
// but ctx's): a hung scontrol, with slurmctld unreachable, must not hold
// a cycle or rubickd's start.
type TimedRunner struct {
	Runner  Runner
	Timeout time.Duration
}

// Run implements Runner.
func (t TimedRunner) Run(ctx context.Context, argv []string) ([]byte, error) {
	if t.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.Timeout)
		defer cancel()
	}
	return t.Runner.Run(ctx, argv)
}

// ExecRunner runs commands with os/exec.
type ExecRunner struct {
	// Env is set in the command's environment last, over rubickd's own
	// (TZ=Europe/Paris for a sacct that must print in that zone).
	Env []string
}

// maxStderr bounds the stderr kept in a CommandError.
const maxStderr = 4 << 10

// Run implements Runner. The environment is rubickd's own minus
// SLURM_JOB_ID/SLURM_JOBID: with those set, scontrol writes resize scripts
// into its working directory on every shrink. SLURM_TIME_FORMAT is
// standard: sites set it in profiles ("relative", "%F %T"), and the times
// rubick reads (sacct's) are parsed in that form.
func (e ExecRunner) Run(ctx context.Context, argv []string) ([]byte, error) {
	if len(argv) == 0 {
		return nil, errors.New("empty argv")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append(withoutJobID(os.Environ()), "SLURM_TIME_FORMAT=standard"), e.Env...) // the last of a key wins
	// a grandchild holding the pipes must not block Wait after a kill
	cmd.WaitDelay = time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		stderr := strings.TrimSpace(errb.String())
		if len(stderr) > maxStderr {
			stderr = stderr[:maxStderr] + "..."
		}
		return out.Bytes(), &CommandError{Argv: argv, ExitCode: code, Stderr: stderr, Err: err}
	}
	return out.Bytes(), nil
}

func withoutJobID(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, "SLURM_JOB_ID=") || strings.HasPrefix(kv, "SLURM_JOBID=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
