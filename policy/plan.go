package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rubick-sched/rubick/model"
)

// Kind is the type of an action.
type Kind string

// Action kinds. The Applier runs preemptions and shrinks before restarts
// and starts, so resources are released before they are taken.
const (
	// Start runs a queued job on Alloc with Plan.
	Start Kind = "start"
	// Shrink reduces a running job to Alloc (a subset of what it holds).
	Shrink Kind = "shrink"
	// Restart moves a running job to Alloc and Plan through checkpoint-restart
	// (growth, a different shape or a different plan).
	Restart Kind = "restart"
	// Preempt releases everything a best-effort job holds; it goes back to
	// the queue and resumes from its checkpoint later.
	Preempt Kind = "preempt"
	// Keep leaves the job as it is, running or queued.
	Keep Kind = "keep"
)

// Reason is a short machine-readable code explaining an action.
type Reason string

// Reason codes, for `rubick explain` and metrics.
const (
	ReasonSLO         Reason = "slo-min-res"      // guaranteed job admitted at (at least) its minimum resources
	ReasonSlope       Reason = "slope"            // resources went where they raise throughput most
	ReasonStarving    Reason = "starvation"       // queued past the anti-starvation age
	ReasonDeadline    Reason = "deadline"         // queued close to the latest start its --deadline allows
	ReasonFairShare   Reason = "fair-share"       // started in fair-share order (policy.best_effort_order)
	ReasonPriority    Reason = "priority"         // started in Slurm's multifactor priority order (policy.best_effort_order)
	ReasonFIFO        Reason = "fifo"             // next in submission order
	ReasonBackfill    Reason = "backfill"         // started out of order without delaying the queue head
	ReasonReplan      Reason = "replan"           // same resources, a faster plan
	ReasonReclaimed   Reason = "reclaimed"        // resources taken by a job with a higher slope or an SLO
	ReasonNoResources Reason = "no-resources"     // queued: nothing free enough to reach its minimum
	ReasonGroup       Reason = "group-limit"      // queued: its group's jobs hold all their group allows
	ReasonQuota       Reason = "quota"            // queued: tenant quota exhausted
	ReasonPenalty     Reason = "restart-penalty"  // not reconfigured: the restart would cost too much of its run time
	ReasonUnchanged   Reason = "unchanged"        // running as before
	ReasonNoPlan      Reason = "no-feasible-plan" // queued: no memory-feasible plan on any resources it could get
	ReasonUnsupported Reason = "launch-line"      // its launch line cannot run its plan: another plan, or back to the queue
)

// Action is one decision about one job.
type Action struct {
	Kind  Kind        `json:"kind"`
	JobID string      `json:"job"`
	Alloc []NodeAlloc `json:"alloc,omitempty"` // the job's allocation after the action
	Plan  model.Plan  `json:"plan"`            // the plan to run after the action
	// Throughput is the predicted samples/s after the action (0 when queued).
	Throughput float64 `json:"throughput"`
	Reason     Reason  `json:"reason"`
	Detail     string  `json:"detail,omitempty"`
	// MinRes is, for a guaranteed job under a policy with that class
	// (rubick, rubick-r), the fewest GPUs with which a plan reaches its
	// request's throughput: what its tenant's quota is charged and what it
	// may be shrunk to. Nil for other jobs.
	MinRes *Size `json:"min_res,omitempty"`
	// Order is where the job stood in the round's best-effort order; nil
	// for a job that order did not hold (a queued guaranteed job under
	// rubick and rubick-r, a running one the restart penalty froze, every
	// job of a queue policy).
	Order *Order `json:"order,omitempty"`
	// Admission is where a queued guaranteed job stood in the round's
	// admission order; nil for every other job.
	Admission *Admission `json:"admission,omitempty"`
}

// Admission is a queued guaranteed job's place in one round's admission
// order (docs/policy.md, Algorithm 1's step 1), which is served before the
// best-effort order, each job within its tenant's quota.
type Admission struct {
	Position int `json:"position"`
	Of       int `json:"of"`
	// By is what placed it: AdmitDeadline, AdmitAge, or
	// Config.GuaranteedOrder.
	By string `json:"by"`
}

// Admission.By for the jobs placed ahead of Config.GuaranteedOrder.
const (
	// AdmitDeadline: queued near the latest start its --deadline allows;
	// such jobs go first, the nearest first.
	AdmitDeadline = "deadline"
	// AdmitAge: queued longer than Config.GuaranteedAge, in shortest
	// order; such jobs go next, oldest first.
	AdmitAge = "age"
)

// OrderStarvation is Order.By for a job submitted longer ago than
// Config.StarvationAge, or queued near its deadline: those head the order,
// nearest deadline first, then oldest.
const OrderStarvation = "starvation"

// Order is a job's place in one round's best-effort order (docs/policy.md,
// Algorithm 1's step 2),
// which hands out GPUs first to the jobs at its head.
type Order struct {
	// Position is 1 for the head of the order; Of counts the jobs in it,
	// running ones included, and QueuedAhead the queued jobs before it.
	Position    int `json:"position"`
	Of          int `json:"of"`
	QueuedAhead int `json:"queued_ahead"`
	// By is what placed it: OrderStarvation, or Config.BestEffortOrder.
	By string `json:"by"`
	// Slope is the normalised throughput one more GPU adds to it (its
	// throughput per GPU on its best start when it holds none); 1 is
	// linear scaling at the per-GPU speed of one whole node.
	Slope float64 `json:"slope"`
	// TimeLeftH is the hours its time limit leaves it, as Config.TimeWeight
	// counts them (at least a tenth of the limit and a minute); a job
	// without a limit (NoTimeLimit) counts as the longest with one. 0 when
	// time left is not weighed.
	TimeLeftH   float64 `json:"time_left_h,omitempty"`
	NoTimeLimit bool    `json:"no_time_limit,omitempty"`
	// WeighedSlope is Slope / TimeLeftH^TimeWeight, the key of the slope
	// order (Slope when time left is not weighed).
	WeighedSlope float64 `json:"weighed_slope"`
}

// Placement returns the GPUs per node of the action's allocation.
func (a Action) Placement() model.Placement { return PlacementOf(a.Alloc) }

// PlacementOf returns the GPUs per node of an allocation, leaving out
// nodes where it holds no GPU.
func PlacementOf(alloc []NodeAlloc) model.Placement {
	var pl model.Placement
	for _, n := range alloc {
		if n.GPUs > 0 {
			pl = append(pl, n.GPUs)
		}
	}
	return pl
}

// Plan is the decision of one round: one action per job of the snapshot,
// in job ID order.
type Plan struct {
	Actions []Action `json:"actions"`
}

// Action returns the action for the job with the given ID.
func (p Plan) Action(id string) (Action, bool) {
	i, ok := slices.BinarySearchFunc(p.Actions, id, func(a Action, id string) int { return strings.Compare(a.JobID, id) })
	if !ok {
		return Action{}, false
	}
	return p.Actions[i], true
}

// Count returns the number of actions of kind k.
func (p Plan) Count(k Kind) int {
	n := 0
	for _, a := range p.Actions {
		if a.Kind == k {
			n++
		}
	}
	return n
}

// Policy decides one round.
type Policy interface {
	// Name is the registry name.
	Name() string
	// Decide returns one action per job of s. It must not modify s, and the
	// same snapshot yields the same plan.
	Decide(ctx context.Context, s *Snapshot) (Plan, error)
}

// constructors is the policy registry, a constant table.
var constructors = map[string]func(Config) Policy{
	"rubick":   func(c Config) Policy { return newEngine("rubick", c, variantRubick) },
	"rubick-e": func(c Config) Policy { return newQueue("rubick-e", c, queueRubickE) },
	"rubick-r": func(c Config) Policy { return newEngine("rubick-r", c, variantResourcesOnly) },
	"rubick-n": func(c Config) Policy { return newQueue("rubick-n", c, queueRubickN) },
	"sia":      func(c Config) Policy { return newEngine("sia", c, variantSia) },
	"fifo":     func(c Config) Policy { return newQueue("fifo", c, queueFIFO) },
	"synergy":  func(c Config) Policy { return newQueue("synergy", c, queueSynergy) },
	"antman":   func(c Config) Policy { return newQueue("antman", c, queueAntMan) },
}

// KeepsOrder reports whether the named policy places the jobs it plans
// in an order (Action.Order, Action.Admission): those built on rubick's
// engine do, the queue-based baselines do not.
func KeepsOrder(name string) bool {
	switch name {
	case "rubick", "rubick-r", "sia":
		return true
	}
	return false
}

// Names lists the registered policies, rubick first, then the baselines.
func Names() []string {
	return []string{"rubick", "fifo", "synergy", "sia", "antman", "rubick-e", "rubick-r", "rubick-n"}
}

// New returns the named policy with configuration c (validated).
func New(name string, c Config) (Policy, error) {
	f, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q (known: %s)", ErrUnknownPolicy, name, strings.Join(Names(), ", "))
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return f(c), nil
}
