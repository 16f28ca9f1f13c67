package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"

	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/launch"
)

// scriptView is what `rubick script` prints; its JSON keys are stable
// (docs/report.md).
type scriptView struct {
	Script string `json:"script"`
	// Line is the training command of the rubick-srun line, words the
	// script leaves to its run as $NAME or $(...).
	Line    []string `json:"line"`
	Dialect string   `json:"dialect"`
	Cannot  string   `json:"cannot"`
	// GlobalBatch is the batch the line states (0: none, or not known,
	// when GlobalBatchError says why).
	GlobalBatch      int    `json:"global_batch"`
	GlobalBatchError string `json:"global_batch_error,omitempty"`
	// SignalWarnings say where the script's signals keep the trainer from
	// checkpointing when it should (launch.ScriptLine.CheckSignals).
	SignalWarnings []string `json:"signal_warnings,omitempty"`
	// SampleWarnings say why the job would report no iteration times
	// (launch.ScriptLine.CheckSamples).
	SampleWarnings []string `json:"sample_warnings,omitempty"`
}

// errNothingRead is a script rubickd reads nothing off.
var errNothingRead = errors.New("rubickd reads nothing off this script")

// errNoPlan is a launch line rubick-srun refuses whatever the plan: the job
// would exit 2 at its start.
var errNoPlan = errors.New("rubick-srun runs no plan of this line")

func runScript(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return scriptCmd(ctx, args, stdout, stderr, os.Stdin, os.Getenv)
}

func scriptCmd(ctx context.Context, args []string, stdout, stderr io.Writer, stdin io.Reader, getenv func(string) string) error {
	fset := newFlags("script FILE", "Show what rubickd reads off a batch script's rubick-srun line before the job's\n"+
		"first start, as it would for a job of yours: the training command, its dialect,\n"+
		"what it cannot express and its global batch, and where the signals it asks for\n"+
		"would not have the trainer checkpoint. FILE - reads standard input.\n"+
		"Exit status 1 when rubickd would read nothing off it, or rubick-srun would run\n"+
		"no plan of its line.", stderr)
	workDir := fset.String("workdir", "", "the job's working directory, where a relative DeepSpeed config is (default: this one, as sbatch's)")
	userName := fset.String("user", "", "the job's user, who must own its DeepSpeed config (default: you)")
	gpus := fset.Int("gpus", 0, "the GPUs the job asks for, which a Hugging Face Trainer line's global batch depends on (0: unknown)")
	site := fset.String("checkpoint-signal", getenv(launch.CheckpointSignalEnv),
		"the site's checkpoint.signal, which rubick-srun's --signal must be (default $"+launch.CheckpointSignalEnv+"; empty: unknown, not checked)")
	asJSON := fset.Bool("json", false, "write JSON")
	file, help, err := parseOneArg(fset, args, "FILE")
	if help || err != nil {
		return err
	}
	// Before the script is read: a usage error exits 2 whatever the script.
	if *gpus < 0 {
		return fmt.Errorf("%w: --gpus=%d must be >= 0", errUsage, *gpus)
	}
	v := scriptView{Script: file}
	var b []byte
	if file == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}
	if *workDir == "" {
		if *workDir, err = os.Getwd(); err != nil {
			return err
		}
	}
	if *userName == "" {
		u, err := user.Current()
		if err != nil {
			return err
		}
		*userName = u.Username
	}
	sl, err := launch.FromScript(string(b))
	if err != nil {
		return fmt.Errorf("%w: %w", errNothingRead, err)
	}
	f, err := sl.Facts(func(name string) ([]byte, error) { return daemon.ReadUserFile(ctx, *userName, *workDir, name) }, *gpus)
	if errors.Is(err, launch.ErrBadInput) {
		return fmt.Errorf("%w: %w", errNoPlan, err)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errNothingRead, err)
	}
	for _, w := range sl.Train {
		v.Line = append(v.Line, launch.ShowUnresolved(w))
	}
	for _, err := range sl.CheckSignals(*site) {
		v.SignalWarnings = append(v.SignalWarnings, launch.ShowUnresolved(err.Error()))
	}
	if err := sl.CheckSamples(); err != nil {
		v.SampleWarnings = append(v.SampleWarnings, launch.ShowUnresolved(err.Error()))
	}
	v.Dialect, v.Cannot, v.GlobalBatch = string(f.Dialect), f.Cannot.String(), f.GlobalBatch
	if f.BatchErr != nil {
		v.GlobalBatchError = launch.ShowUnresolved(f.BatchErr.Error())
	}
	if *asJSON {
		return writeJSON(stdout, v)
	}
	cannot := v.Cannot
	if cannot == "" {
		cannot = "nothing: any plan"
	}
	batch := fmt.Sprint(v.GlobalBatch)
	switch {
	case v.GlobalBatchError != "":
		batch = "not known before the job runs (" + v.GlobalBatchError + "): planned at your last job's of its model type, else the model type's, until rubick-srun reports"
	case v.GlobalBatch == 0:
		batch = "none stated: the plan's, which rubick-srun writes into the line"
	}
	_, err = fmt.Fprintf(stdout, "rubick-srun runs: %s\n  dialect:        %s\n  cannot express: %s\n  global batch:   %s\n",
		strings.Join(v.Line, " "), v.Dialect, cannot, batch)
	for _, w := range slices.Concat(v.SignalWarnings, v.SampleWarnings) {
		if err == nil {
			_, err = fmt.Fprintf(stdout, "  warning:        %s\n", w)
		}
	}
	return err
}
