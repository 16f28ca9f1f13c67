package store

import (
	"database/sql"
	"fmt"
	"math"
	"strings"

	"github.com/rubick-sched/rubick/model"
)

// maxName bounds free-text identifiers (model types, sources, kinds) so a
// runaway caller cannot fill the database through them.
const maxName = 128

func checkName(field, v string) error {
	if v == "" || len(v) > maxName || strings.TrimSpace(v) != v {
		return fmt.Errorf("%w: %s=%q must be 1-%d characters without surrounding spaces", ErrInvalid, field, v, maxName)
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func checkNonNeg(field string, v float64) error {
	if !finite(v) || v < 0 {
		return fmt.Errorf("%w: %s=%v must be finite and >= 0", ErrInvalid, field, v)
	}
	return nil
}

func checkParams(p model.Params) error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"k_bwd", p.KBwd}, {"k_sync", p.KSync}, {"k_opt", p.KOpt}, {"k_opt_off", p.KOptOff},
		{"k_off", p.KOff}, {"k_swap", p.KSwap}, {"k_const", p.KConst}, {"k_3d", p.K3D},
	} {
		// Every parameter is a ratio, a rate, an exponent or a time; a
		// negative one makes every prediction of the model type fail.
		if !finite(f.v) || f.v < 0 {
			return fmt.Errorf("%w: params.%s=%v must be finite and >= 0", ErrInvalid, f.name, f.v)
		}
	}
	return nil
}

// checkPlan validates a plan against its resources: positive degrees, a
// ZeRO stage under offload, and DP*TP*PP equal to the GPUs of the placement.
func checkPlan(p model.Plan, r model.Resources) error {
	if err := checkPlanFields(p); err != nil {
		return err
	}
	if err := checkResources(r); err != nil {
		return err
	}
	if p.GPUs() != r.Placement.GPUs() {
		return fmt.Errorf("%w: plan %s uses %d GPUs but placement=%s has %d", ErrInvalid, p, p.GPUs(), r.Placement, r.Placement.GPUs())
	}
	return nil
}

// checkPlanFields checks a plan on its own, without the resources it runs on.
func checkPlanFields(p model.Plan) error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"plan.dp", p.DP}, {"plan.tp", p.TP}, {"plan.pp", p.PP},
		{"plan.micro_batch", p.MicroBatch}, {"plan.accum", p.Accum},
	} {
		if f.v < 1 {
			return fmt.Errorf("%w: %s=%d must be >= 1", ErrInvalid, f.name, f.v)
		}
	}
	if p.ZeRO < 0 || p.ZeRO > 3 {
		return fmt.Errorf("%w: plan.zero=%d must be a ZeRO stage 0-3", ErrInvalid, p.ZeRO)
	}
	// ZeRO-Offload offloads ZeRO's partitions: the model prices no such
	// plan, and a fit on stored samples that hold one fails.
	if p.Offload && p.ZeRO == 0 {
		return fmt.Errorf("%w: plan.offload=true needs plan.zero >= 1, have 0", ErrInvalid)
	}
	// Stored as written, read back with ParsePlan: one its bounds refuse
	// would make every read of the rows around it fail.
	if _, err := model.ParsePlan(p.String()); err != nil {
		return fmt.Errorf("%w: plan=%s: %w", ErrInvalid, p, err)
	}
	return nil
}

func checkResources(r model.Resources) error {
	if len(r.Placement) == 0 {
		return fmt.Errorf("%w: placement=[] must hold at least one node (0 GPUs)", ErrInvalid)
	}
	for i, g := range r.Placement {
		if g < 1 {
			return fmt.Errorf("%w: placement=%v: node %d has gpus=%d, must be >= 1", ErrInvalid, []int(r.Placement), i, g)
		}
	}
	if _, err := decodePlacement(encodePlacement(r.Placement)); err != nil {
		// As a plan: what the store writes, it must read.
		return fmt.Errorf("%w: placement=%s: %w", ErrInvalid, r.Placement, err)
	}
	if r.CPUs < 0 {
		return fmt.Errorf("%w: cpus=%d must be >= 0", ErrInvalid, r.CPUs)
	}
	return checkNonNeg("host_mem_gb", r.HostMemGB)
}

// encodePlacement writes the placement as model.Placement.String does:
// digits ("2222"), or "2x16" / "16-8" once a node holds more than 9.
func encodePlacement(p model.Placement) string { return p.String() }

// decodePlacement reads a stored placement. model.ParsePlacement reads every
// form encodePlacement has written, including the "16-16" of rows stored
// before equal nodes of more than 9 GPUs were written "2x16".
func decodePlacement(s string) (model.Placement, error) { return model.ParsePlacement(s) }

// planColumns maps a plan and its resources to nullable columns: a zero
// plan (an action that stops a job) is stored as NULLs.
func planColumns(p model.Plan, r model.Resources) (plan, placement sql.NullString) {
	if p != (model.Plan{}) {
		plan = sql.NullString{String: p.String(), Valid: true}
	}
	if len(r.Placement) > 0 {
		placement = sql.NullString{String: encodePlacement(r.Placement), Valid: true}
	}
	return plan, placement
}

func fromPlanColumns(plan, placement sql.NullString) (model.Plan, model.Placement, error) {
	var p model.Plan
	var pl model.Placement
	var err error
	if plan.Valid {
		if p, err = model.ParsePlan(plan.String); err != nil {
			return p, pl, fmt.Errorf("stored plan: %w", err)
		}
	}
	if placement.Valid {
		if pl, err = decodePlacement(placement.String); err != nil {
			return p, pl, fmt.Errorf("stored placement: %w", err)
		}
	}
	return p, pl, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
