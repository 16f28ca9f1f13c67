package model

import (
	"fmt"
	"slices"
)

// Predictor prices execution plans for one model type in one environment.
type Predictor struct {
	Spec   Spec
	Params Params
	Env    Env
}

// Throughput is the predicted training throughput in samples per second.
func (p Predictor) Throughput(plan Plan, r Resources) (float64, error) {
	b, err := p.Predict(plan, r)
	if err != nil {
		return 0, err
	}
	return float64(p.Spec.GlobalBatch) / b.Iter, nil
}

// MemoryEstimate is the memory a plan needs.
type MemoryEstimate struct {
	GPUGB      float64 `json:"gpu_gb"`       // per GPU, the most loaded GPU
	HostGBNode float64 `json:"host_gb_node"` // per node, the most loaded node
}

// FitOptions tune Fit.
type FitOptions struct {
	// Starts is the number of optimizer starts (deterministic seeds); 0 means a default.
	Starts int
	// NeedOffload requires the samples to identify the offload parameters.
	NeedOffload bool
	// AllowPartial accepts fewer samples than a fit of all seven parameters
	// needs (7, and 3 ZeRO-Offload ones with NeedOffload):
	// parameters the samples cannot identify stay at the prior and are
	// listed in FitResult.Pinned instead of failing with ErrTooFewSamples.
	AllowPartial bool
	// Prior overrides Priors() as starting point and pinned values.
	Prior *Params
	// Only, when set, names the parameters the fit may move (JSON names);
	// every other one stays at the prior, identifiable or not.
	Only []string
}

// FitResult is a fitted parameter tuple with its quality.
type FitResult struct {
	Params  Params   `json:"params"`
	RMSLE   float64  `json:"rmsle"`
	MAPE    float64  `json:"mape_pct"`
	Samples int      `json:"samples"`
	Pinned  []string `json:"pinned,omitempty"` // parameters the samples could not identify, held at priors
	// Source names the samples the parameters come from when they are not
	// the model's own (empty when they are).
	Source string `json:"source,omitempty"`
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

// PoorFitMAPE is the mean error over its own samples above which a fit is
// doubted (FitResult.Doubts): a shipped profile fits within a few percent,
// and refits on many placements within about 15 %.
const PoorFitMAPE = 50

// Doubts says why the fit, of a model type of spec, may not be trusted, one
// reason each; nil when none shows. k_bwd, free to move, at a bound of its
// range most often means the spec's forward_ms_1gpu, which nothing
// measures, is off by more than the backward/forward ratio can absorb:
// every forward and recompute time is then mispriced.
func (r FitResult) Doubts(spec Spec) []string {
	var out []string
	if !slices.Contains(r.Pinned, paramNames[0]) {
		lo, hi := paramBounds[0][0], paramBounds[0][1]
		tol := 1e-3 * (hi - lo)
		switch {
		case r.Params.KBwd <= lo+tol:
			out = append(out, fmt.Sprintf("k_bwd=%.4g is the least backward/forward ratio a fit allows: forward_ms_1gpu=%g is likely too long", r.Params.KBwd, spec.ForwardMs))
		case r.Params.KBwd >= hi-tol:
			out = append(out, fmt.Sprintf("k_bwd=%.4g is the largest backward/forward ratio a fit allows: forward_ms_1gpu=%g is likely too short", r.Params.KBwd, spec.ForwardMs))
		}
	}
	if r.MAPE > PoorFitMAPE {
		out = append(out, fmt.Sprintf("it misses its own samples by %.0f %% on average", r.MAPE))
	}
	return out
}
