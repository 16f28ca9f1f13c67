package launch

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Checkpoint signals. rubickd sends its checkpoint.signal to a job's batch
// shell before a restart; rubick-srun, that shell, takes its --signal as
// the checkpoint signal; a job may ask Slurm for a signal of its own before
// its time limit (sbatch --signal=[{R|B}:]SIG[@TIME]), which with B: goes to
// the batch shell alone. Nothing else makes them agree.
const (
	// DefaultCheckpointSignal is rubickd's checkpoint.signal and
	// rubick-srun's --signal when nothing sets them.
	DefaultCheckpointSignal = "USR1"
	// CheckpointSignalEnv names the variable a site exports, to jobs and
	// users, with its checkpoint.signal (rubickd reads its own from it
	// too): rubick-srun's --signal and rubick script's --checkpoint-signal
	// default to it.
	CheckpointSignalEnv = "RUBICK_CHECKPOINT_SIGNAL"
)

// ErrSignal marks a batch script whose signals do not agree with the
// checkpoint signal: a job that runs, but does not checkpoint when it
// should.
var ErrSignal = errors.New("checkpoint signal mismatch")

// signalNumbers names the Linux signal numbers a job may give for the
// signals rubick-srun knows: its checkpoint signals and QUIT.
var signalNumbers = map[int]string{1: "HUP", 2: "INT", 3: "QUIT", 10: "USR1", 12: "USR2", 15: "TERM", 18: "CONT", 23: "URG"}

// CheckpointSignals are the signals rubickd's checkpoint.signal may name:
// rubick-srun takes each as its --signal.
var CheckpointSignals = []string{"USR1", "USR2", "TERM", "INT", "HUP", "CONT", "URG"}

// SignalNumber is the Linux number of a signal rubick-srun knows, given as
// SignalName reads it, or of any signal 1-64 given by number.
func SignalNumber(s string) (int, error) {
	name, err := SignalName(s)
	if err != nil {
		return 0, err
	}
	if n, err := strconv.Atoi(name); err == nil {
		return n, nil
	}
	for n, known := range signalNumbers {
		if known == name {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: signal %q is not one of %s or a number 1-64", ErrBadInput, clip(s), strings.Join(append(slices.Clone(CheckpointSignals), "QUIT"), ", "))
}

// forwarded are the signals rubick-srun passes on to the training step
// besides its checkpoint signal.
var forwarded = []string{"TERM", "INT"}

// SignalName names a signal given by name, with or without "SIG", or by
// its Linux number: USR1, TERM, ... A number without such a name stays a
// number.
func SignalName(s string) (string, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "SIG")
	if n, err := strconv.Atoi(name); err == nil {
		if n < 1 || n > 64 {
			return "", fmt.Errorf("%w: signal %q is not a signal number 1-64", ErrBadInput, clip(s))
		}
		if known, ok := signalNumbers[n]; ok {
			return known, nil
		}
		return strconv.Itoa(n), nil
	}
	if name == "" || strings.Trim(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" {
		return "", fmt.Errorf("%w: signal %q is not a signal name or number", ErrBadInput, clip(s))
	}
	return name, nil
}

// jobSignal is a job's sbatch --signal.
type jobSignal struct {
	name  string
	batch bool // B: the batch shell alone
}

func parseJobSignal(spec string) (jobSignal, error) {
	var js jobSignal
	sig := spec
	if flags, rest, ok := strings.Cut(spec, ":"); ok {
		js.batch = strings.ContainsRune(strings.ToUpper(flags), 'B')
		sig = rest
	}
	sig, _, _ = strings.Cut(sig, "@")
	var err error
	if js.name, err = SignalName(sig); err != nil {
		return jobSignal{}, fmt.Errorf("sbatch --signal=%q: %w", clip(spec), err)
	}
	return js, nil
}

// CheckSignals reports, each wrapping ErrSignal, where the script's
// signals keep the trainer from checkpointing when it should. site is the
// site's checkpoint.signal, "" when unknown; rubick-srun's --signal
// defaults to it, else to DefaultCheckpointSignal. Checked: that
// rubick-srun's --signal is the site's, and that a --signal=B:SIG the job
// asks Slurm for is one rubick-srun passes on. A signal without B: goes to
// the job's steps, the trainer's, and is the user's own. What the script
// leaves to its run is not checked.
func (sl ScriptLine) CheckSignals(site string) []error {
	var errs []error
	srun := sl.Signal
	if srun == "" {
		srun = site
	}
	if srun == "" {
		srun = DefaultCheckpointSignal
	}
	if strings.Contains(srun, Unresolved) {
		return nil
	}
	ckpt, err := SignalName(srun)
	if err != nil {
		return []error{fmt.Errorf("%w: rubick-srun --signal: %w", ErrSignal, err)}
	}
	if site != "" {
		s, err := SignalName(site)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%w: the site's checkpoint signal: %w", ErrSignal, err))
		case s != ckpt:
			errs = append(errs, fmt.Errorf("%w: rubick-srun takes %s as the checkpoint signal (its --signal), but the site's rubickd "+
				"sends %s before a restart: give rubick-srun --signal %s", ErrSignal, ckpt, s, s))
		}
	}
	if sl.JobSignal == "" || strings.Contains(sl.JobSignal, Unresolved) {
		return errs
	}
	js, err := parseJobSignal(sl.JobSignal)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("%w: %w", ErrSignal, err))
	case js.batch && js.name != ckpt && !slices.Contains(forwarded, js.name):
		errs = append(errs, fmt.Errorf("%w: --signal=%s sends %s to the batch shell alone, rubick-srun, which passes on only its "+
			"checkpoint signal (%s), TERM and INT: the trainer would not get it. Ask for --signal=B:%s@SECONDS to have the job "+
			"checkpoint and requeue itself before its time limit, or leave out B: for the trainer's step to get %s",
			ErrSignal, clip(sl.JobSignal), js.name, ckpt, ckpt, js.name))
	}
	return errs
}

// sbatchOption returns the value of the last #SBATCH directive of script
// that sets the long option name ("--signal"), as sbatch reads them: from
// the script's first lines, up to its first command.
func sbatchOption(script, name string) (string, bool) {
	var v string
	found := false
	for i, ln := range strings.Split(script, "\n") {
		t := strings.TrimSpace(ln)
		if t == "" || (i == 0 && strings.HasPrefix(t, "#!")) {
			continue
		}
		if !strings.HasPrefix(t, "#") {
			break
		}
		rest, ok := strings.CutPrefix(ln, "#SBATCH")
		if !ok {
			continue
		}
		words := strings.Fields(rest)
		for j := 0; j < len(words); j++ {
			w := words[j]
			if strings.HasPrefix(w, "#") {
				break // a comment after the options
			}
			if val, ok := strings.CutPrefix(w, name+"="); ok {
				v, found = val, true
			} else if w == name && j+1 < len(words) {
				v, found = words[j+1], true
				j++
			}
		}
	}
	return v, found
}
