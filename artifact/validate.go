package artifact

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rubick-sched/rubick/model"
)

// RowPrediction is one measured placements.csv row with its prediction.
type RowPrediction struct {
	Model      string          `json:"model"`
	Family     model.Family    `json:"family"`
	ExecPlan   string          `json:"exec_plan"`
	Placement  model.Placement `json:"placement"`
	Plan       model.Plan      `json:"plan"`
	MeasuredS  float64         `json:"measured_s"`
	PredictedS float64         `json:"predicted_s"`
	APEPct     float64         `json:"ape_pct"`
	// Suspect is non-empty for rows the data README flags as unreliable.
	Suspect string `json:"suspect,omitempty"`
	Line    int    `json:"line"`
}

// Accuracy is the prediction error of one model (or "all") on one family
// (or "all").
type Accuracy struct {
	Model     string  `json:"model"`
	Family    string  `json:"family"`
	Rows      int     `json:"rows"`
	MAPEPct   float64 `json:"mape_pct"`
	MaxAPEPct float64 `json:"max_ape_pct"`
}

// PlanChoice scores the plan the model ranks first at every placement with
// several measured plans against the fastest measured plan there.
type PlanChoice struct {
	Model        string  `json:"model"`
	Family       string  `json:"family"` // always "plan-choice"
	Placements   int     `json:"placements"`
	BestPickPct  float64 `json:"best_pick_pct"`
	RegretPctAvg float64 `json:"regret_pct_avg"`
	RegretPctMax float64 `json:"regret_pct_max"`
}

// Validation is the result of Validate.
type Validation struct {
	Fits       map[string]model.FitResult
	Rows       []RowPrediction
	Accuracy   []Accuracy
	PlanChoice []PlanChoice
}

// ValidateOptions tune Validate.
type ValidateOptions struct {
	// ExcludeSuspect leaves the rows flagged by SuspectReason out of the
	// accuracy and plan-choice scores (they are still predicted and listed).
	ExcludeSuspect bool
}

// SuspectReason says why the data README distrusts a measured row, or ""
// when it does not: roberta ga and zero-dp on 1 GPU take as long as on 2
// GPUs, and vit's multi-node rows fall into two groups (about 70-100 ms and
// 300-450 ms) for similar placements, so every multi-node vit row is
// unreliable.
func SuspectReason(modelName string, m Measurement) string {
	switch {
	case modelName == "roberta" && (m.ExecPlan == "ga" || m.ExecPlan == "zero-dp") && m.Placement.GPUs() == 1:
		return "roberta 1-GPU time equals its 2-GPU time"
	case modelName == "vit" && m.Placement.Nodes() > 1:
		return "vit multi-node times are bimodal"
	}
	return ""
}

// Validate fits every model on its profile/ samples only (FitAll) and
// predicts every measured row of its placements.csv, then scores accuracy
// per model and family and the plan choice per placement.
//
// The measured rows ran with MeasuredThreadsPerGPU CPU threads per process.
func Validate(ctx context.Context, set *Set, env model.Env, opts ValidateOptions) (*Validation, error) {
	fits, err := FitAll(ctx, set, env)
	if err != nil {
		return nil, err
	}
	v := &Validation{Fits: fits}
	for _, name := range set.ModelNames() {
		fit, ok := fits[name]
		if !ok {
			continue
		}
		spec := set.Models[name].Spec
		pred := model.Predictor{Spec: spec, Params: fit.Params, Env: env}
		for _, m := range set.Placements[name] {
			smp, err := m.Sample(spec)
			if err != nil {
				return nil, fmt.Errorf("%s placements.csv line %d: %w", name, m.Line, err)
			}
			plan := smp.Plan
			bd, err := pred.Predict(plan, smp.Resources)
			if err != nil {
				return nil, fmt.Errorf("%s placements.csv line %d: %w", name, m.Line, err)
			}
			fam := plan.Family()
			if !isPTD(m.ExecPlan) {
				fam = model.Family(m.ExecPlan)
			}
			v.Rows = append(v.Rows, RowPrediction{
				Model: name, Family: fam, ExecPlan: m.ExecPlan, Placement: m.Placement, Plan: plan,
				MeasuredS: m.IterS, PredictedS: bd.Iter, APEPct: 100 * math.Abs(bd.Iter-m.IterS) / m.IterS,
				Suspect: SuspectReason(name, m), Line: m.Line,
			})
		}
	}
	scored := v.Rows
	if opts.ExcludeSuspect {
		scored = slices.DeleteFunc(slices.Clone(v.Rows), func(r RowPrediction) bool { return r.Suspect != "" })
	}
	v.Accuracy = accuracy(scored, set.ModelNames())
	v.PlanChoice = planChoice(scored, set.ModelNames())
	return v, nil
}

func isPTD(code string) bool {
	return len(code) == 3 && strings.Trim(code, "0123456789") == ""
}

// accuracy aggregates APEs per model x family, per family over all models,
// and overall.
func accuracy(rows []RowPrediction, models []string) []Accuracy {
	type agg struct {
		n        int
		sum, max float64
	}
	add := func(a *agg, ape float64) { a.n++; a.sum += ape; a.max = max(a.max, ape) }
	cells := map[[2]string]*agg{}
	get := func(m, f string) *agg {
		k := [2]string{m, f}
		if cells[k] == nil {
			cells[k] = &agg{}
		}
		return cells[k]
	}
	for _, r := range rows {
		add(get(r.Model, string(r.Family)), r.APEPct)
		add(get("all", string(r.Family)), r.APEPct)
		add(get("all", "all"), r.APEPct)
	}
	var out []Accuracy
	emit := func(m, f string) {
		if a := cells[[2]string{m, f}]; a != nil && a.n > 0 {
			out = append(out, Accuracy{Model: m, Family: f, Rows: a.n, MAPEPct: a.sum / float64(a.n), MaxAPEPct: a.max})
		}
	}
	for _, m := range append(slices.Clone(models), "all") {
		for _, f := range model.Families {
			emit(m, string(f))
		}
	}
	emit("all", "all")
	return out
}

// rotationKey is the lexicographically smallest rotation of a placement:
// the artifact treats rotations of the digit string as the same placement.
// It rotates nodes, not characters, so that "16-8" is not cut inside a count.
func rotationKey(pl model.Placement) string {
	best := pl
	for i := 1; i < len(pl); i++ {
		if r := append(slices.Clone(pl[i:]), pl[:i]...); slices.Compare(r, best) < 0 {
			best = r
		}
	}
	return best.String()
}

// planChoice scores, per model and overall, the model's first-ranked plan
// at each placement with at least two measured plans.
func planChoice(rows []RowPrediction, models []string) []PlanChoice {
	type group struct {
		model string
		rows  []RowPrediction
	}
	groups := map[[2]string]*group{}
	var keys [][2]string
	for _, r := range rows {
		k := [2]string{r.Model, rotationKey(r.Placement)}
		if groups[k] == nil {
			groups[k] = &group{model: r.Model}
			keys = append(keys, k)
		}
		groups[k].rows = append(groups[k].rows, r)
	}
	type score struct {
		n, hits  int
		sum, max float64
	}
	per := map[string]*score{}
	for _, k := range keys {
		g := groups[k]
		plans := map[string]bool{}
		for _, r := range g.rows {
			plans[r.ExecPlan] = true
		}
		if len(plans) < 2 {
			continue
		}
		pick, fastest := g.rows[0], g.rows[0]
		for _, r := range g.rows[1:] {
			if r.PredictedS < pick.PredictedS {
				pick = r
			}
			if r.MeasuredS < fastest.MeasuredS {
				fastest = r
			}
		}
		regret := 100 * (1 - fastest.MeasuredS/pick.MeasuredS)
		for _, m := range []string{g.model, "all"} {
			s := per[m]
			if s == nil {
				s = &score{}
				per[m] = s
			}
			s.n++
			if pick.ExecPlan == fastest.ExecPlan {
				s.hits++
			}
			s.sum += regret
			s.max = max(s.max, regret)
		}
	}
	var out []PlanChoice
	for _, m := range append(slices.Clone(models), "all") {
		s := per[m]
		if s == nil {
			continue
		}
		out = append(out, PlanChoice{
			Model: m, Family: "plan-choice", Placements: s.n,
			BestPickPct: 100 * float64(s.hits) / float64(s.n), RegretPctAvg: s.sum / float64(s.n), RegretPctMax: s.max,
		})
	}
	return out
}
