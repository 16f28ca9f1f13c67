package report

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rubick-sched/rubick/model"
)

// Sentinel errors callers branch on.
var (
	// ErrBadSample reports a sample payload that is malformed or out of range.
	ErrBadSample = errors.New("bad sample")
	// ErrUnavailable reports that MUNGE is not installed or munged is not
	// running here; reporting is then skipped.
	ErrUnavailable = errors.New("munge unavailable")
	// ErrCredential reports a credential unmunge rejected (forged, expired,
	// replayed, or for another cluster).
	ErrCredential = errors.New("invalid munge credential")
)

// SampleVersion is the payload format version.
const SampleVersion = 1

// Sample is one measured iteration time of a job, as reported to rubickd.
type Sample struct {
	Version int `json:"version"`
	// JobID is the Slurm job id ($SLURM_JOB_ID).
	JobID string `json:"job_id"`
	// ModelType is the job's model type, from its rubick tag.
	ModelType string `json:"model_type"`
	// Plan is the compact plan the job ran, model.Plan.String's form.
	Plan string `json:"plan"`
	// Placement is the GPUs per node, model.Placement.String's form.
	Placement string `json:"placement"`
	// CPUs is the number of CPU cores over all nodes (0 when unknown).
	CPUs int `json:"cpus"`
	// Iteration is the trainer's optimizer-step counter at the measurement,
	// which a resumed run continues (Megatron's iteration, DeepSpeed's
	// global_step); absent when the log line has none (DeepSpeed's old
	// epoch/micro_step form). rubickd measures restart costs with it.
	Iteration *int `json:"iteration,omitempty"`
	// IterS is the measured time of one iteration, in seconds.
	IterS float64 `json:"iter_s"`
	// Source names the log format the time was read from.
	Source string `json:"source"`
	// Time is when rubick-srun read the measurement.
	Time time.Time `json:"time"`
}

var jobIDRe = regexp.MustCompile(`^[0-9]+(_[0-9]+)?$`)

// Validate reports the first field of s that rubickd cannot use.
func (s Sample) Validate() error {
	if s.Version != SampleVersion {
		return fmt.Errorf("%w: version=%d, want %d", ErrBadSample, s.Version, SampleVersion)
	}
	if !jobIDRe.MatchString(s.JobID) {
		return fmt.Errorf("%w: job_id=%q is not a Slurm job id", ErrBadSample, clip(s.JobID))
	}
	if _, err := model.ParsePlan(s.Plan); err != nil {
		return fmt.Errorf("%w: plan: %w", ErrBadSample, err)
	}
	if _, err := model.ParsePlacement(s.Placement); err != nil {
		return fmt.Errorf("%w: placement: %w", ErrBadSample, err)
	}
	if s.CPUs < 0 {
		return fmt.Errorf("%w: cpus=%d is negative", ErrBadSample, s.CPUs)
	}
	if !(s.IterS > 0) || math.IsInf(s.IterS, 0) || s.IterS > 7*24*3600 {
		return fmt.Errorf("%w: iter_s=%v is not a positive duration", ErrBadSample, s.IterS)
	}
	if s.Iteration != nil && *s.Iteration < 0 {
		return fmt.Errorf("%w: iteration=%d is negative", ErrBadSample, *s.Iteration)
	}
	return nil
}

// ModelSample converts s into the model's sample type, with its plan and
// placement parsed, as rubickd stores it.
func (s Sample) ModelSample() (model.Sample, error) {
	if err := s.Validate(); err != nil {
		return model.Sample{}, err
	}
	plan, _ := model.ParsePlan(s.Plan)         // checked by Validate
	pl, _ := model.ParsePlacement(s.Placement) // checked by Validate
	return model.Sample{Plan: plan, Resources: model.Resources{Placement: pl, CPUs: s.CPUs}, IterS: s.IterS}, nil
}

// Measurement is one iteration time read from a trainer's log.
type Measurement struct {
	Iteration int
	// Step says Iteration counts optimizer steps and continues across a
	// resume; DeepSpeed's old lines count micro-steps instead.
	Step   bool
	IterS  float64
	Source string
}

// With returns s carrying m, read at time at.
func (s Sample) With(m Measurement, at time.Time) Sample {
	s.Iteration = nil
	if m.Step {
		it := m.Iteration
		s.Iteration = &it
	}
	s.IterS, s.Source, s.Time = m.IterS, m.Source, at
	return s
}

// Log formats Parser understands.
const (
	// SourceMegatron is Megatron's training_log line:
	//   " [2024-05-01 10:00:00] iteration       10/    1000 | consumed samples: 320 |
	//    elapsed time per iteration (ms): 512.3 | ..."
	// Recent versions print "512.3/498.7" (this interval / running mean);
	// the first number is taken.
	SourceMegatron = "megatron"
	// SourceDeepSpeed is DeepSpeed's ThroughputTimer line:
	//   "epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=61.2,
	//    CurrSamplesPerSec=62.0, MemAllocated=..."
	// or the older "0/40, SamplesPerSec=61.2". The iteration time is the
	// global batch divided by the samples per second.
	SourceDeepSpeed = "deepspeed"
	// SourceTrainerBar is the Hugging Face Trainer's training progress
	// bar (tqdm's, redrawn on stderr with carriage returns):
	//   " 25%|██▌       | 10/40 [00:04<00:12,  2.41it/s]"
	// or "1.30s/it" once a step takes over a second. The count is the
	// optimizer steps done (the Trainer's global_step); the rate, tqdm's
	// moving average (smoothing 0.3), is read back to each redraw's own
	// seconds (trainerBar).
	SourceTrainerBar = "hf-trainer-bar"
)

var (
	megatronIterRe = regexp.MustCompile(`iteration\s+(\d+)\s*/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*([0-9.]+(?:[eE][-+]?\d+)?)`)
	dsCurrRe       = regexp.MustCompile(`global_step=(\d+),.*?CurrSamplesPerSec=([0-9.]+(?:[eE][-+]?\d+)?)`)
	dsOldRe        = regexp.MustCompile(`(\d+)/(\d+), SamplesPerSec=([0-9.]+(?:[eE][-+]?\d+)?)`)
)

// Parser reads iteration times from trainer log lines. GlobalBatch converts
// DeepSpeed's samples per second into seconds per iteration; with 0,
// DeepSpeed lines are ignored. A Parser made by TrainerBarParser reads the
// Hugging Face Trainer's progress bar instead.
type Parser struct {
	GlobalBatch int
	// bar, shared by the Parser's copies, follows the Trainer's training
	// bar across redraws; nil for a Parser of log lines.
	bar *trainerBar
}

// TrainerBarParser returns a Parser of a Hugging Face Trainer's output,
// which has no step lines of DeepSpeed's (accelerate, through which the
// Trainer builds its engine, sets steps_per_print to infinity) but its
// training progress bar (SourceTrainerBar). Its copies share what they
// have read, and are safe for concurrent use.
func TrainerBarParser() Parser { return Parser{bar: &trainerBar{}} }

// Parse returns the measurement a line carries, if any.
func (p Parser) Parse(line string) (Measurement, bool) {
	m, ok := p.parse(line)
	// A time that rounds to 0 or overflows (1e-320 samples/s) is none:
	// rubickd would refuse the one, and JSON cannot carry the other.
	if !ok || !(m.IterS > 0) || math.IsInf(m.IterS, 0) {
		return Measurement{}, false
	}
	return m, true
}

func (p Parser) parse(line string) (Measurement, bool) {
	if p.bar != nil {
		return p.bar.parse(line)
	}
	if m := megatronIterRe.FindStringSubmatch(line); m != nil {
		it, err1 := strconv.Atoi(m[1])
		ms, err2 := strconv.ParseFloat(m[2], 64)
		if err1 != nil || err2 != nil || !(ms > 0) {
			return Measurement{}, false
		}
		return Measurement{Iteration: it, Step: true, IterS: ms / 1000, Source: SourceMegatron}, true
	}
	if p.GlobalBatch <= 0 {
		return Measurement{}, false
	}
	var step, sps string
	global := false
	if m := dsCurrRe.FindStringSubmatch(line); m != nil {
		step, sps, global = m[1], m[2], true
	} else if m := dsOldRe.FindStringSubmatch(line); m != nil {
		step, sps = m[2], m[3]
	} else {
		return Measurement{}, false
	}
	it, err1 := strconv.Atoi(step)
	v, err2 := strconv.ParseFloat(sps, 64)
	if err1 != nil || err2 != nil || !(v > 0) || math.IsInf(v, 0) {
		return Measurement{}, false
	}
	return Measurement{Iteration: it, Step: global, IterS: float64(p.GlobalBatch) / v, Source: SourceDeepSpeed}, true
}

// barRe matches a tqdm bar without a description, with a total and a
// rate in steps: "pct%|bar| n/total [elapsed<remaining, rate{it/s,s/it}
// (, postfix)]". A described bar ("Loading checkpoint shards: ...",
// datasets' "Map: ...") starts with its description; one counting other
// units says so in its rate ("examples/s").
// stepsRe matches the Trainer's log line announcing its training bar's
// total, "  Total optimization steps = 1,000", which it logs at info level
// (a profiling run's --log_level) before it draws the bar.
var stepsRe = regexp.MustCompile(`Total optimization steps = ([0-9][0-9,]*)`)

var barRe = regexp.MustCompile(`^\s*\d+%\|[^|]*\| (\d+)/(\d+) \[[0-9:]+<[0-9:?]+, +([0-9.]+(?:[eE][-+]?\d+)?)(it/s|s/it)(?:, [^\]]*)?\]`)

// The smoothing of tqdm's rate, an exponential moving average, and the
// share of a redraw's steps the bar's first redraw may still hold in it
// before the rate is read.
const (
	barSmoothing = 0.3
	barJumpShare = 0.01
)

// trainerBar follows the Trainer's training bar. That is the first bar
// without a description whose count moves and that is drawn at the top:
// tqdm draws a bar opened while another is open (the Trainer's evaluation
// and prediction bars during training) one line down, and moves back up
// after each redraw with an escape sequence. Other bars without a
// description (an evaluation after training, a script's own loop later)
// are told apart by their total. A redraw measures the steps since the
// last one that moved the count: tqdm redraws the same count when the
// Trainer writes its logs and when the bar closes.
//
// An evaluation a script runs before training draws the first such bar,
// of its batches, and closes it full; the Trainer logs nothing over it
// (ProgressCallback writes logs over its training bar only). So a bar of
// another total replaces the one followed once that one is full, unless
// the Trainer has logged over it: the training bar, which always is, with
// the train_runtime logs just before it closes. tqdm clears its bars for
// such a write ("\r", spaces, "\r") and redraws them after it.
//
// The rate a redraw shows is tqdm's moving average, steps over seconds,
// each averaged over the redraws that moved the count (the last weighing
// barSmoothing, each earlier one 1-barSmoothing times the next). Read as
// it is, it would carry a slow first step (start-up, compilation) into
// the next several measurements. The steps of every redraw are known from
// the counts, so each redraw's average of the steps, over its rate, gives
// its average of the seconds, and two consecutive averages the seconds of
// the last redraw alone, however late or bunched the redraws arrive.
type trainerBar struct {
	mu    sync.Mutex
	total int // the training bar's, 0 until found
	n     int // its count at the last redraw
	// steps and secs are tqdm's averages of the steps and the seconds
	// between redraws, both without the normalisation they share.
	steps, secs float64
	// first is how far the bar's first redraw moved the count, while it
	// may still weigh in the averages (0 after), and moves the redraws
	// that moved it since. The Trainer advances the bar from 0 to its
	// global step after its first step: 1, or a resumed run's step. The
	// seconds of a later redraw are then the small difference of two
	// large averages, each rounded to the rate's three digits.
	first, moves int
	// want is the total the Trainer announced (stepsRe), 0 until then:
	// a bar of another total is not its training bar, even the first
	// (an evaluation the script runs before training).
	want int
	// cleared: a line of spaces alone (tqdm's clear for a write) came
	// after the last bar at the top; logged: the bar followed was
	// redrawn right after one, so the Trainer logs over it.
	cleared, logged bool
}

func (b *trainerBar) parse(line string) (Measurement, bool) {
	if strings.Contains(line, "\x1b[") {
		return Measurement{}, false // a bar drawn below another
	}
	if line != "" && strings.Trim(line, " ") == "" {
		b.mu.Lock()
		b.cleared = b.total != 0
		b.mu.Unlock()
		return Measurement{}, false
	}
	if m := stepsRe.FindStringSubmatch(line); m != nil {
		if want, err := strconv.Atoi(strings.ReplaceAll(m[1], ",", "")); err == nil && want > 0 {
			b.mu.Lock()
			if b.total != want {
				// The bar followed so far was not the training bar.
				b.total, b.n, b.steps, b.secs, b.first, b.moves, b.logged = 0, 0, 0, 0, 0, 0, false
			}
			b.want = want
			b.mu.Unlock()
		}
		return Measurement{}, false
	}
	m := barRe.FindStringSubmatch(line)
	if m == nil {
		return Measurement{}, false
	}
	n, err1 := strconv.Atoi(m[1])
	total, err2 := strconv.Atoi(m[2])
	v, err3 := strconv.ParseFloat(m[3], 64)
	if err1 != nil || err2 != nil || err3 != nil || !(v > 0) || math.IsInf(v, 0) {
		return Measurement{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cleared := b.cleared
	b.cleared = false
	if n == 0 || total == 0 {
		// A bar at 0 has moved no step (a new bar drawn with a rate
		// shown was measured as one), and a total of 0 is no training's.
		return Measurement{}, false
	}
	rate := v // steps per second
	if m[4] == "s/it" {
		rate = 1 / v
	}
	if cleared && total == b.total && n >= b.n {
		b.logged = true
	}
	switch {
	case b.want != 0 && total != b.want:
		return Measurement{}, false
	case total != b.total && b.total != 0 && (b.logged || b.n < b.total):
		return Measurement{}, false
	case n == b.n && total == b.total:
		return Measurement{}, false
	case total != b.total || n < b.n:
		// The bar's first redraw that moved the count, a new bar of the
		// same total's, or one that replaces a full bar the Trainer did
		// not log over: its averages start over.
		if total != b.total {
			b.logged = false
		}
		b.total, b.n, b.first, b.moves = total, n, 0, 0
		b.steps = barSmoothing * float64(n)
		b.secs = b.steps / rate
		if n > 1 {
			// A resumed run's global step at once (or the first steps
			// of a fast one, between two of tqdm's redraws): not one
			// step's time.
			b.first = n
			return Measurement{}, false
		}
		return Measurement{Iteration: n, Step: true, IterS: 1 / rate, Source: SourceTrainerBar}, true
	}
	dn := n - b.n
	b.n = n
	b.moves++
	prev := b.secs
	b.steps = (1-barSmoothing)*b.steps + barSmoothing*float64(dn)
	b.secs = b.steps / rate
	if b.first > 0 {
		// The first redraw's jump must have decayed to a small share of
		// this redraw's steps.
		w := barSmoothing * math.Pow(1-barSmoothing, float64(b.moves))
		if w*float64(b.first-dn) > barJumpShare*float64(dn) {
			return Measurement{}, false
		}
		b.first = 0
	}
	secs := (b.secs - (1-barSmoothing)*prev) / barSmoothing
	if !(secs > 0) {
		return Measurement{}, false // rates that are not one bar's averages
	}
	return Measurement{Iteration: n, Step: true, IterS: secs / float64(dn), Source: SourceTrainerBar}, true
}

// clip bounds untrusted text quoted in error messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
