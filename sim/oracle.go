package sim

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
)

// Source says where a ground-truth iteration time came from.
type Source int

// Ground-truth sources, best first.
const (
	// Measured: a row of placements.csv with the same plan code and the
	// same placement up to rotation of its digit string.
	Measured Source = iota
	// MeasuredPermuted: the same plan code on the same multiset of per-node
	// GPU counts in another order. Nodes are identical and the links between
	// them uniform, so the order of the digits is not physical.
	MeasuredPermuted
	// Fallback: nothing measured; the model fitted on the profile data.
	Fallback
)

// Oracle is the simulator's ground truth: measured iteration times of
// (plan, placement) pairs, the fitted model where nothing was measured.
type Oracle struct {
	rows  map[string]map[string][]measured // model -> plan code -> rows
	preds map[string]model.Predictor
	// refCPUsPerGPU is the CPU count per GPU the measured rows are taken to
	// have run with; ZeRO-Offload times are scaled from it by the model.
	refCPUsPerGPU int

	mu    sync.Mutex
	cache map[oracleKey]Truth
}

type measured struct {
	pl   model.Placement
	iter float64
}

type oracleKey struct {
	model string
	shape string // the placement's digits in node order
	cpus  int
	// plan, not its code: a fallback time, and the CPU scaling of a
	// measured offload time, are the model's for the plan itself.
	plan model.Plan
}

// Truth is one ground-truth iteration time.
type Truth struct {
	IterS  float64
	Source Source
	// CPUScaled is set when a measured ZeRO-Offload time was scaled by the
	// model to a CPU count other than the measurement's.
	CPUScaled bool
}

// NewOracle indexes the measured rows of set; preds are the fitted models
// used where nothing was measured and to scale offload times with CPUs.
// With excludeSuspect the rows artifact.SuspectReason flags are not
// indexed, so the model prices those configurations.
func NewOracle(set *artifact.Set, preds map[string]model.Predictor, refCPUsPerGPU int, excludeSuspect bool) *Oracle {
	o := &Oracle{rows: map[string]map[string][]measured{}, preds: preds, refCPUsPerGPU: refCPUsPerGPU, cache: map[oracleKey]Truth{}}
	for _, name := range set.ModelNames() {
		byCode := map[string][]measured{}
		for _, m := range set.Placements[name] {
			if excludeSuspect && artifact.SuspectReason(name, m) != "" {
				continue
			}
			byCode[m.ExecPlan] = append(byCode[m.ExecPlan], measured{pl: m.Placement, iter: m.IterS})
		}
		o.rows[name] = byCode
	}
	return o
}

// PlanCode returns the artifact's code for plan: the family name for
// data-parallel plans, "PTD" digits for 3D plans; "" when the artifact has
// no code for it (a degree above 9, or ZeRO with checkpointing).
func PlanCode(p model.Plan) string {
	if p.TP > 1 || p.PP > 1 {
		if p.PP > 9 || p.TP > 9 || p.DP > 9 || p.ZeRO > 0 || p.Offload {
			return ""
		}
		return fmt.Sprintf("%d%d%d", p.PP, p.TP, p.DP)
	}
	switch {
	case p.Offload && !p.Checkpoint:
		return string(model.FamilyZeroOffload)
	case p.ZeRO > 0 && !p.Offload && !p.Checkpoint:
		return string(model.FamilyZeroDP)
	case p.ZeRO == 0 && !p.Offload && p.Checkpoint:
		return string(model.FamilyGC)
	case p.ZeRO == 0 && !p.Offload:
		return string(model.FamilyGA)
	}
	return ""
}

func digits(pl model.Placement) string {
	var b strings.Builder
	for i, g := range pl {
		if i > 0 {
			b.WriteByte('.')
		}
		fmt.Fprint(&b, g)
	}
	return b.String()
}

func isRotation(a, b model.Placement) bool {
	if len(a) != len(b) {
		return false
	}
	for s := range a {
		ok := true
		for i := range a {
			if a[(i+s)%len(a)] != b[i] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// IterTime returns the ground-truth iteration time of plan for a model on
// placement pl (GPUs per node, in node order) with cpus CPU cores.
func (o *Oracle) IterTime(name string, plan model.Plan, pl model.Placement, cpus int) (Truth, error) {
	k := oracleKey{model: name, shape: digits(pl), cpus: cpus, plan: plan}
	o.mu.Lock()
	t, ok := o.cache[k]
	o.mu.Unlock()
	if ok {
		return t, nil
	}
	t, err := o.compute(name, PlanCode(plan), plan, pl, cpus)
	if err != nil {
		return Truth{}, err
	}
	o.mu.Lock()
	o.cache[k] = t
	o.mu.Unlock()
	return t, nil
}

func (o *Oracle) compute(name, code string, plan model.Plan, pl model.Placement, cpus int) (Truth, error) {
	pred, ok := o.preds[name]
	if !ok {
		return Truth{}, fmt.Errorf("oracle: no model for %q", name)
	}
	if code != "" {
		rows := o.rows[name][code]
		var found *measured
		src := Measured
		for i := range rows {
			if isRotation(rows[i].pl, pl) {
				found = &rows[i]
				break
			}
		}
		if found == nil {
			want := pl.Canonical()
			for i := range rows {
				if slices.Equal(rows[i].pl.Canonical(), want) {
					found, src = &rows[i], MeasuredPermuted
					break
				}
			}
		}
		if found != nil {
			t := Truth{IterS: found.iter, Source: src}
			if plan.Offload {
				ref := o.refCPUsPerGPU * pl.GPUs()
				if cpus != ref {
					a, errA := pred.Predict(plan, wholeNodes(pred.Env, pl, cpus))
					b, errB := pred.Predict(plan, wholeNodes(pred.Env, pl, ref))
					if errA == nil && errB == nil && a.Iter > 0 && b.Iter > 0 {
						t.IterS *= a.Iter / b.Iter
						t.CPUScaled = true
					}
				}
			}
			return t, nil
		}
	}
	b, err := pred.Predict(plan, wholeNodes(pred.Env, pl, cpus))
	if err != nil {
		return Truth{}, fmt.Errorf("oracle: %s %s on %s: %w", name, plan, pl, err)
	}
	if !(b.Iter > 0) {
		return Truth{}, fmt.Errorf("oracle: %s %s on %s: predicted iteration %v", name, plan, pl, b.Iter)
	}
	return Truth{IterS: b.Iter, Source: Fallback}, nil
}

// BestMeasured returns the shortest measured iteration time of a model on
// at most maxGPUs GPUs and maxNodes nodes of perNode GPUs, or 0 when nothing was measured.
func (o *Oracle) BestMeasured(name string, maxGPUs, maxNodes, perNode int) float64 {
	best := 0.0
	for _, rows := range o.rows[name] {
		for _, m := range rows {
			if m.pl.GPUs() > maxGPUs || m.pl.Nodes() > maxNodes || m.pl.MaxPerNode() > perNode {
				continue
			}
			if best == 0 || m.iter < best {
				best = m.iter
			}
		}
	}
	return best
}

// wholeNodes is a run on placement pl with cpus CPUs and all the memory of
// its nodes in env: how the replay prices a run nobody measured, and
// checks a trace request against memory.
func wholeNodes(env model.Env, pl model.Placement, cpus int) model.Resources {
	return model.Resources{Placement: pl, CPUs: cpus, HostMemGB: env.NodeMemGB * float64(len(pl))}
}
