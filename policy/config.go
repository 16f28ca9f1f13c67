package policy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config tunes the policies. The zero value is not valid; start from
// DefaultConfig. Every policy reads only the fields that apply to it.
type Config struct {
	// ReconfigKeep is the fraction of a running job's run time that must
	// remain useful after its restarts: a job is reconfigured only if
	// (T - N*delta)/T >= ReconfigKeep with T its run time so far, N its
	// reconfigurations including the new one and delta the restart cost.
	ReconfigKeep float64
	// StarvationAge is how long a best-effort job may wait before it is
	// scheduled ahead of the slope order.
	StarvationAge time.Duration
	// DeadlineLead is how long before its Job.StartBy (the latest start
	// its --deadline allows) a queued best-effort job goes first, as a
	// starving one does (0: never): Slurm ends a job that cannot finish by
	// its deadline, held or not.
	DeadlineLead time.Duration
	// BestEffortOrder is the order in which best-effort jobs take GPUs:
	// OrderSlope, OrderFairShare or OrderPriority.
	BestEffortOrder string
	// TimeWeight weighs the slope order by the time each job has left, its
	// time limit less its run time: jobs are ranked by slope / left^TimeWeight.
	// Average completion time rewards finishing short jobs first, and a
	// user's limit, even a loose one, tells a 5-minute job from a 5-hour
	// one. 0 is the slope order alone; 1 is throughput gained per second
	// left. Jobs without a limit count as the longest one that has one.
	TimeWeight float64
	// GuaranteedOrder is the order in which queued guaranteed jobs are
	// admitted within their tenant's quota: OrderShortest, OrderSubmit or
	// OrderPriority.
	GuaranteedOrder string
	// GuaranteedAge bounds the wait shortest-first can impose on a long
	// guaranteed job: one queued this long is admitted ahead of the
	// younger ones, in submission order (0: never).
	GuaranteedAge time.Duration
	// SLOMargin is the headroom over the requested throughput a guaranteed
	// job needs when it runs on other resources or another plan than it
	// asked for, to absorb performance-model error.
	SLOMargin float64
	// MinCPUsPerGPU is the fewest CPU cores a job gets per GPU (data loading).
	MinCPUsPerGPU int
	// HostMemPerGPUGB is host memory reserved per GPU besides what the
	// plan's offloaded state needs (data loader, pinned buffers).
	HostMemPerGPUGB float64
	// MaxScale bounds a job's GPUs to MaxScale times its request (0: no bound).
	MaxScale float64
	// MinGain is the smallest marginal efficiency worth taking a free GPU
	// for: the throughput one more GPU adds, over the per-GPU throughput of
	// the model on one whole node. It keeps jobs from hoarding GPUs that
	// barely help and that they could not give back without a restart.
	MinGain float64
	// MinShare is the fraction of its requested throughput a best-effort
	// job must get to start, or keep when it is shrunk: a job crawling on a
	// sliver of GPUs could not grow back without a restart.
	MinShare float64
	// ReclaimKeep is the fraction of its throughput a best-effort job must
	// keep when a guaranteed job takes part of its GPUs; below it the job
	// is preempted whole instead, and restarts on a proper allocation.
	ReclaimKeep float64
	// MaxSpread bounds the nodes a job spans to MaxSpread times the nodes of
	// its request: a job scattered over GPU fragments of many nodes runs on
	// the model's least certain predictions and costs every round it is
	// priced in.
	MaxSpread int
	// PlanSwitchGain is the predicted speed-up over the requested plan's
	// family another plan needs to be chosen instead (model error margin).
	PlanSwitchGain float64
	// DefaultQuota is the GPU quota of a tenant the snapshot does not list
	// (0: such tenants have no quota).
	DefaultQuota int
}

// Orders of the guaranteed queue (Config.GuaranteedOrder).
const (
	// OrderShortest admits the job with the shortest time limit first (jobs
	// without one last), which minimises the average wait when the quota
	// is the bottleneck.
	OrderShortest = "shortest"
	// OrderSubmit admits jobs in submission order. OrderPriority (below)
	// admits them by Job.PriorityTier, then Job.Priority, then submission.
	OrderSubmit = "submit"
)

// Orders of the best-effort jobs (Config.BestEffortOrder). Jobs queued
// past StarvationAge go first in either.
const (
	// OrderSlope ranks by slope, the throughput one more GPU adds to a
	// job: the order that finishes the most work.
	OrderSlope = "slope"
	// OrderFairShare ranks by Job.FairShare, highest first, and jobs of
	// equal factor (one association's) by slope: Slurm's fair-share order,
	// for sites whose accounts must share the GPUs without quotas.
	OrderFairShare = "fairshare"
	// OrderPriority ranks by Job.PriorityTier, then Job.Priority, highest
	// first, and jobs of equal rank by slope: Slurm's multifactor order.
	OrderPriority = "priority"
)

// DefaultConfig returns the configuration the benchmarks use.
func DefaultConfig() Config {
	return Config{
		ReconfigKeep:    0.9,
		StarvationAge:   4 * time.Hour,
		DeadlineLead:    30 * time.Minute,
		BestEffortOrder: OrderSlope,
		TimeWeight:      0.5,
		GuaranteedOrder: OrderShortest,
		GuaranteedAge:   8 * time.Hour,
		SLOMargin:       0.2,
		MinCPUsPerGPU:   1,
		HostMemPerGPUGB: 16,
		MaxScale:        0,
		MinGain:         0.5,
		MinShare:        0,
		ReclaimKeep:     0.5,
		PlanSwitchGain:  0.1,
		MaxSpread:       2,
		DefaultQuota:    0,
	}
}

// FieldError is what Validate returns: the first invalid field of Config,
// named as Set names it, so that a caller with its own names for the knobs
// (rubickd's YAML keys) can report the field in its own terms.
type FieldError struct {
	Field string // the Config field, e.g. "ReclaimKeep"
	Value string // the value as written in a message (strings quoted)
	Want  string // what would be valid, e.g. "0..1"
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%v: %s=%s: want %s", ErrBadConfig, e.Field, e.Value, e.Want)
}

// Unwrap makes errors.Is(err, ErrBadConfig) hold.
func (e *FieldError) Unwrap() error { return ErrBadConfig }

// Validate reports the first invalid field as a *FieldError.
func (c Config) Validate() error {
	bad := func(field string, v any, want string) error {
		if s, ok := v.(string); ok {
			v = strconv.Quote(s)
		}
		return &FieldError{Field: field, Value: fmt.Sprint(v), Want: want}
	}
	switch {
	case !(c.ReconfigKeep >= 0 && c.ReconfigKeep <= 1):
		return bad("ReconfigKeep", c.ReconfigKeep, "0..1")
	case c.StarvationAge < 0:
		return bad("StarvationAge", c.StarvationAge, ">= 0")
	case c.DeadlineLead < 0:
		return bad("DeadlineLead", c.DeadlineLead, ">= 0")
	case c.BestEffortOrder != OrderSlope && c.BestEffortOrder != OrderFairShare && c.BestEffortOrder != OrderPriority:
		return bad("BestEffortOrder", c.BestEffortOrder, strconv.Quote(OrderSlope)+", "+strconv.Quote(OrderFairShare)+" or "+strconv.Quote(OrderPriority))
	case !(c.TimeWeight >= 0 && c.TimeWeight <= 1):
		return bad("TimeWeight", c.TimeWeight, "0..1")
	case c.GuaranteedOrder != OrderShortest && c.GuaranteedOrder != OrderSubmit && c.GuaranteedOrder != OrderPriority:
		return bad("GuaranteedOrder", c.GuaranteedOrder, strconv.Quote(OrderShortest)+", "+strconv.Quote(OrderSubmit)+" or "+strconv.Quote(OrderPriority))
	case c.GuaranteedAge < 0:
		return bad("GuaranteedAge", c.GuaranteedAge, ">= 0")
	case !(c.SLOMargin >= 0 && c.SLOMargin < 1):
		return bad("SLOMargin", c.SLOMargin, "0 <= x < 1")
	case c.MinCPUsPerGPU < 0:
		return bad("MinCPUsPerGPU", c.MinCPUsPerGPU, ">= 0")
	case !sizeGB(c.HostMemPerGPUGB):
		return bad("HostMemPerGPUGB", c.HostMemPerGPUGB, "a finite number >= 0")
	case !(c.MaxScale == 0 || c.MaxScale >= 1):
		return bad("MaxScale", c.MaxScale, "0 (no bound) or >= 1")
	case !(c.MinGain >= 0):
		return bad("MinGain", c.MinGain, ">= 0")
	case !(c.MinShare >= 0 && c.MinShare <= 1):
		return bad("MinShare", c.MinShare, "0..1")
	case !(c.ReclaimKeep >= 0 && c.ReclaimKeep <= 1):
		return bad("ReclaimKeep", c.ReclaimKeep, "0..1")
	case c.MaxSpread < 1:
		return bad("MaxSpread", c.MaxSpread, ">= 1")
	case !(c.PlanSwitchGain >= 0):
		return bad("PlanSwitchGain", c.PlanSwitchGain, ">= 0")
	case c.DefaultQuota < 0:
		return bad("DefaultQuota", c.DefaultQuota, ">= 0")
	}
	return nil
}

// Knobs lists the names Set accepts, in the order of Config's fields.
func Knobs() []string {
	out := make([]string, len(knobs))
	for i, k := range knobs {
		out[i] = k.name
	}
	return out
}

type knob struct {
	name string
	set  func(c *Config, v string) error
}

// setter parses a value with parse into the field of Config that field
// points to.
func setter[T any](parse func(string) (T, error), field func(*Config) *T) func(*Config, string) error {
	return func(c *Config, v string) error {
		x, err := parse(v)
		if err != nil {
			return err
		}
		*field(c) = x
		return nil
	}
}

// The parsers say what a knob's value must be rather than strconv's or
// time's own message ("strconv.Atoi: parsing ...").

func parseFloat(v string) (float64, error) {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, errors.New("want a number")
	}
	return x, nil
}

func parseInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, errors.New("want a whole number")
	}
	return n, nil
}

func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errors.New("want a duration such as 90s, 30m or 4h")
	}
	return d, nil
}

func parseWord(v string) (string, error) { return v, nil }

// knobs names every field of Config for Set, as the field is named.
var knobs = []knob{
	{"ReconfigKeep", setter(parseFloat, func(c *Config) *float64 { return &c.ReconfigKeep })},
	{"StarvationAge", setter(parseDuration, func(c *Config) *time.Duration { return &c.StarvationAge })},
	{"DeadlineLead", setter(parseDuration, func(c *Config) *time.Duration { return &c.DeadlineLead })},
	{"BestEffortOrder", setter(parseWord, func(c *Config) *string { return &c.BestEffortOrder })},
	{"TimeWeight", setter(parseFloat, func(c *Config) *float64 { return &c.TimeWeight })},
	{"GuaranteedOrder", setter(parseWord, func(c *Config) *string { return &c.GuaranteedOrder })},
	{"GuaranteedAge", setter(parseDuration, func(c *Config) *time.Duration { return &c.GuaranteedAge })},
	{"SLOMargin", setter(parseFloat, func(c *Config) *float64 { return &c.SLOMargin })},
	{"MinCPUsPerGPU", setter(parseInt, func(c *Config) *int { return &c.MinCPUsPerGPU })},
	{"HostMemPerGPUGB", setter(parseFloat, func(c *Config) *float64 { return &c.HostMemPerGPUGB })},
	{"MaxScale", setter(parseFloat, func(c *Config) *float64 { return &c.MaxScale })},
	{"MinGain", setter(parseFloat, func(c *Config) *float64 { return &c.MinGain })},
	{"MinShare", setter(parseFloat, func(c *Config) *float64 { return &c.MinShare })},
	{"ReclaimKeep", setter(parseFloat, func(c *Config) *float64 { return &c.ReclaimKeep })},
	{"MaxSpread", setter(parseInt, func(c *Config) *int { return &c.MaxSpread })},
	{"PlanSwitchGain", setter(parseFloat, func(c *Config) *float64 { return &c.PlanSwitchGain })},
	{"DefaultQuota", setter(parseInt, func(c *Config) *int { return &c.DefaultQuota })},
}

// Set parses "Name=value" (a field of Config, see Knobs; durations as in
// time.ParseDuration) into c and validates the result. It lets a simulation
// try one setting without a rebuild.
func (c *Config) Set(kv string) error {
	name, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("%w: %q: want Name=value", ErrBadConfig, kv)
	}
	i := slices.IndexFunc(knobs, func(k knob) bool { return k.name == name })
	if i < 0 {
		return fmt.Errorf("%w: %q: unknown knob (known: %s)", ErrBadConfig, name, strings.Join(Knobs(), ", "))
	}
	next := *c
	if err := knobs[i].set(&next, v); err != nil {
		return fmt.Errorf("%w: %s=%q: %v", ErrBadConfig, name, v, err)
	}
	if err := next.Validate(); err != nil {
		return err
	}
	*c = next
	return nil
}
