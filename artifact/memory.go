package artifact

import (
	"fmt"

	"github.com/rubick-sched/rubick/model"
)

// MemoryVerdict is one claim of models.json max_micro_batch checked against
// the memory estimator.
type MemoryVerdict struct {
	Model      string     `json:"model"`
	Key        string     `json:"key"`
	MicroBatch int        `json:"micro_batch"`
	TableFits  bool       `json:"table_fits"`
	ModelFits  bool       `json:"model_fits"`
	Plan       model.Plan `json:"plan"`
	GPUGB      float64    `json:"gpu_gb"`
}

// Agrees reports whether the estimator reproduces the table's verdict.
func (v MemoryVerdict) Agrees() bool { return v.TableFits == v.ModelFits }

// memoryKeys maps the table's keys to plan settings. zero_dp_gc and
// zero_offload_gc are 0 for every model, even where the same plan without
// checkpointing fits; checkpointing only lowers memory, so those zeros mean
// "not measured" and are not verdicts.
var memoryKeys = []struct {
	key     string
	zero    int
	offload bool
	gc      bool
}{
	{"dp", 0, false, false},
	{"dp_gc", 0, false, true},
	{"zero_dp", 2, false, false},
	{"zero_offload", 2, true, false},
}

// memoryDP is the data-parallel degree the table's ZeRO verdicts are
// evaluated at: one full node, the scale of the artifact's profiles. Plain
// data parallelism does not shard, so its degree does not matter.
const memoryDP = 8

// MemoryVerdicts turns every model's max_micro_batch table into verdicts
// and evaluates them with the memory estimator of env: a value v > 0 says
// micro-batch v fits and, when 2v does not exceed the global batch, that 2v
// does not (the table lists powers of two); 0 says micro-batch 1 does not
// fit.
func MemoryVerdicts(set *Set, env model.Env) ([]MemoryVerdict, error) {
	var out []MemoryVerdict
	for _, name := range set.ModelNames() {
		info := set.Models[name]
		pred := model.Predictor{Spec: info.Spec, Env: env}
		for _, k := range memoryKeys {
			v, ok := info.MaxMicroBatch[k.key]
			if !ok {
				continue
			}
			if v < 0 {
				return nil, fmt.Errorf("%w: models.json %s max_micro_batch.%s=%d must be >= 0", ErrFormat, name, k.key, v)
			}
			type claim struct {
				mb   int
				fits bool
			}
			var claims []claim
			if v == 0 {
				claims = append(claims, claim{1, false})
			} else {
				claims = append(claims, claim{v, true})
				if 2*v <= info.Spec.GlobalBatch {
					claims = append(claims, claim{2 * v, false})
				}
			}
			for _, c := range claims {
				d := 1
				if k.zero > 0 {
					d = memoryDP
				}
				plan := model.Plan{DP: d, TP: 1, PP: 1, MicroBatch: c.mb, Accum: 1, ZeRO: k.zero, Offload: k.offload, Checkpoint: k.gc}
				pl := model.Placement{d}
				est := pred.Memory(plan, pl)
				out = append(out, MemoryVerdict{
					Model: name, Key: k.key, MicroBatch: c.mb, TableFits: c.fits,
					ModelFits: est.GPUGB <= env.GPUMemGB, Plan: plan, GPUGB: est.GPUGB,
				})
			}
		}
	}
	return out, nil
}
