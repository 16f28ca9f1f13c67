package report

import (
	"errors"
	"fmt"
	"time"

	"github.com/rubick-sched/rubick/model"
)

// ErrBadLaunch reports a launch notice that is malformed or out of range.
var ErrBadLaunch = errors.New("bad launch notice")

// LaunchVersion is the launch notice's format version.
const LaunchVersion = 1

// KindLaunch marks a launch notice on the samples endpoint; samples carry
// no kind.
const KindLaunch = "launch"

// Launch tells rubickd which plans a job's launch line can run. rubick-srun
// sends it when it starts the job's step, and before it requeues a job
// whose plan the line cannot express, so that rubickd keeps the job to the
// plans it can run from then on. After a profiling phase it also says that
// the phase is over (Profiled).
type Launch struct {
	Kind    string `json:"kind"` // always KindLaunch
	Version int    `json:"version"`
	// JobID is the Slurm job id ($SLURM_JOB_ID).
	JobID string `json:"job_id"`
	// ModelType is the job's model type, from its rubick tag.
	ModelType string `json:"model_type"`
	// Dialect is the framework the line was read as (launch.Dialect).
	Dialect string `json:"dialect"`
	// Cannot lists the plan features the line cannot express, in
	// model.Features' form ("tp,pp"; "" for none).
	Cannot string `json:"cannot"`
	// GlobalBatch is the global batch the job trains with: the one its
	// line states (its flags or its DeepSpeed config), else Plan's, which
	// rubick-srun writes into the line. 0: unknown.
	GlobalBatch int `json:"global_batch,omitempty"`
	// Plan is the plan rubickd had set, else, for a job rubickd started
	// without one, the plan its unchanged line expresses; "" for none.
	// Refused says the line cannot run it.
	Plan    string `json:"plan"`
	Refused bool   `json:"refused,omitempty"`
	// Profiled says the job's profiling phase ran to its end, at this start
	// or an earlier one, and that every sample it measured was sent before
	// this notice: rubickd may then fit the model type on what the phase
	// measured. rubick-srun sends such a notice for a job without a plan
	// too. A rubickd that predates the field ignores it, as JSON decoding
	// does any field it does not know, so the version stays 1.
	Profiled bool `json:"profiled,omitempty"`
	// Time is when rubick-srun read the line.
	Time time.Time `json:"time"`
}

// Validate reports the first field of l that rubickd cannot use.
func (l Launch) Validate() error {
	if l.Kind != KindLaunch {
		return fmt.Errorf("%w: kind=%q, want %q", ErrBadLaunch, clip(l.Kind), KindLaunch)
	}
	if l.Version != LaunchVersion {
		return fmt.Errorf("%w: version=%d, want %d", ErrBadLaunch, l.Version, LaunchVersion)
	}
	if !jobIDRe.MatchString(l.JobID) {
		return fmt.Errorf("%w: job_id=%q is not a Slurm job id", ErrBadLaunch, clip(l.JobID))
	}
	if _, err := model.ParseFeatures(l.Cannot); err != nil {
		return fmt.Errorf("%w: cannot: %w", ErrBadLaunch, err)
	}
	if l.GlobalBatch < 0 || l.GlobalBatch > MaxGlobalBatch {
		return fmt.Errorf("%w: global_batch=%d, want 0 to %d", ErrBadLaunch, l.GlobalBatch, MaxGlobalBatch)
	}
	if l.Plan != "" {
		if _, err := model.ParsePlan(l.Plan); err != nil {
			return fmt.Errorf("%w: plan: %w", ErrBadLaunch, err)
		}
	}
	return nil
}

// MaxGlobalBatch bounds a reported global batch: far above any training
// run's (millions of samples per step would be a unit mix-up), it keeps
// an absurd value out of the planner, as it does a spec's.
const MaxGlobalBatch = model.MaxGlobalBatch

// Features is Cannot parsed; l must be valid.
func (l Launch) Features() model.Features {
	f, _ := model.ParseFeatures(l.Cannot) // checked by Validate
	return f
}
