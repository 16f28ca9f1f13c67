package model

import (
	"context"
	"errors"
)

// errTODO marks the API skeleton while the implementation lands; nothing
// returns it once the package is complete.
var errTODO = errors.New("model: not implemented yet")

// Predictor prices execution plans for one model type in one environment.
type Predictor struct {
	Spec   Spec
	Params Params
	Env    Env
}

// Predict returns the predicted iteration breakdown of plan on r. It fails
// with ErrInvalidPlan when the plan does not match the placement.
func (p Predictor) Predict(plan Plan, r Resources) (Breakdown, error) {
	return Breakdown{}, errTODO
}

// Throughput is the predicted training throughput in samples per second.
func (p Predictor) Throughput(plan Plan, r Resources) (float64, error) {
	b, err := p.Predict(plan, r)
	if err != nil {
		return 0, err
	}
	return float64(p.Spec.GlobalBatch) / b.Iter, nil
}

// Enumerate lists every valid plan of spec on placement pl (BRIEF 3:
// d*t*p = g, TP inside a node and dividing heads, PP dividing layers, integer
// micro-batch, global batch unchanged), in a deterministic order. It does not
// check memory.
func Enumerate(spec Spec, pl Placement) []Plan { return nil }

// MemoryEstimate is the memory a plan needs.
type MemoryEstimate struct {
	GPUGB      float64 `json:"gpu_gb"`       // per GPU, the most loaded GPU
	HostGBNode float64 `json:"host_gb_node"` // per node, the most loaded node
}

// Memory estimates the memory plan needs on placement pl.
func (p Predictor) Memory(plan Plan, pl Placement) MemoryEstimate { return MemoryEstimate{} }

// Feasible reports whether plan fits in GPU memory and in the host memory of
// r; the error wraps ErrInfeasible and names the limit exceeded.
func (p Predictor) Feasible(plan Plan, r Resources) error { return errTODO }

// BestPlan returns the valid, memory-feasible plan with the shortest
// predicted iteration on r among those allow accepts (nil accepts all).
// Ties break deterministically. It wraps ErrNoPlan when none qualifies.
func (p Predictor) BestPlan(r Resources, allow func(Plan) bool) (Plan, Breakdown, error) {
	return Plan{}, Breakdown{}, errTODO
}

// FitOptions tune Fit.
type FitOptions struct {
	// Starts is the number of optimizer starts (deterministic seeds); 0 means a default.
	Starts int
	// NeedOffload requires the samples to identify the offload parameters.
	NeedOffload bool
}

// FitResult is a fitted parameter tuple with its quality.
type FitResult struct {
	Params  Params   `json:"params"`
	RMSLE   float64  `json:"rmsle"`
	MAPE    float64  `json:"mape_pct"`
	Samples int      `json:"samples"`
	Pinned  []string `json:"pinned,omitempty"` // parameters the samples could not identify, held at priors
}

// Fit fits the seven parameters of spec in env to samples by minimising the
// RMSLE of predicted iteration times, bounded, from several deterministic
// starts. It wraps ErrTooFewSamples naming what is missing.
func Fit(ctx context.Context, spec Spec, env Env, samples []Sample, opts FitOptions) (FitResult, error) {
	return FitResult{}, errTODO
}

// CurvePoint is one amount of a resource with the best plan there.
type CurvePoint struct {
	Amount     int     `json:"amount"`
	Plan       Plan    `json:"plan"`
	Throughput float64 `json:"throughput"` // samples/s; carried flat from the previous point where nothing is feasible
	Feasible   bool    `json:"feasible"`
}

// Curve is a resource-sensitivity curve: best throughput per resource amount.
type Curve struct {
	Points []CurvePoint `json:"points"`
	// Ref is the reference throughput the slopes are normalised by.
	Ref float64 `json:"ref"`
}
