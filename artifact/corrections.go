package artifact

import (
	"fmt"
	"math"
	"slices"

	"github.com/rubick-sched/rubick/model"
)

// LLaMA-30B's architecture (Touvron et al. 2023). models.json carries a
// copy of another model's shape under llama30 and says so in its _about
// note; the measured llama30 plans (PP 5, 6; TP 2, 4) are only valid with
// the real shape (60 layers, 52 heads).
const (
	llama30Params = 32.5e9
	llama30Layers = 60
	llama30Hidden = 6656
	llama30Heads  = 52
)

// applyCorrections replaces the placeholders of models.json that would make
// the model predict nonsense; every change is recorded in the model's
// Corrections and documented in docs/model.md.
//
//   - llama7 forward_ms_1gpu (1000, a placeholder in the artifact): the
//     mean of forward_time x gpus over its profile rows (about 3,000 ms),
//     which is what the placements' own forward column shows on 1 GPU.
//   - shapes: every profile states hidden x sequence x layers (seq_hid) of
//     the runs it measured; where the spec disagrees, the spec follows the
//     profile (shapeFromProfile).
//   - llama30: the LLaMA-30B shape above, run with llama7's sequence length
//     (the llama runs share one setup), and a forward time scaled from
//     llama7's by the forward FLOPs (parameters x global batch x sequence),
//     since its profile is a copy of llama7's and cannot measure it.
func applyCorrections(s *Set) error {
	fix := func(name string, f func(*ModelInfo) error) error {
		info, ok := s.Models[name]
		if !ok {
			return nil
		}
		if err := f(&info); err != nil {
			return err
		}
		if err := info.Spec.Validate(); err != nil {
			return fmt.Errorf("%w: models.json after correcting %s: %v", ErrFormat, name, err)
		}
		s.Models[name] = info
		return nil
	}
	if err := fix("llama7", func(m *ModelInfo) error {
		fwd, ok := profileForwardMs(s.Profiles["llama7"])
		if !ok {
			return nil
		}
		m.Corrections = append(m.Corrections, fmt.Sprintf("forward_ms_1gpu %.0f -> %.0f (mean of profile forward_time x gpus)", m.Spec.ForwardMs, fwd))
		m.Spec.ForwardMs = fwd
		return nil
	}); err != nil {
		return err
	}
	for _, name := range s.ModelNames() {
		if err := fix(name, func(m *ModelInfo) error { return shapeFromProfile(m, s.Profiles[name]) }); err != nil {
			return err
		}
	}
	if err := fix("llama30", func(m *ModelInfo) error {
		ref, ok := s.Models["llama7"]
		if !ok {
			return nil
		}
		// The llama runs share one setup: the sequence llama7's profile ran.
		llama30Seq := ref.Spec.SeqLen
		sp := &m.Spec
		m.Corrections = append(m.Corrections, fmt.Sprintf(
			"shape parameters=%.3g layers=%d hidden=%d heads=%d seq_len=%d -> LLaMA-30B %.3g/%d/%d/%d/%d",
			sp.Params, sp.Layers, sp.Hidden, sp.Heads, sp.SeqLen,
			float64(llama30Params), llama30Layers, llama30Hidden, llama30Heads, llama30Seq))
		sp.Params, sp.Layers, sp.Hidden, sp.Heads, sp.SeqLen = llama30Params, llama30Layers, llama30Hidden, llama30Heads, llama30Seq
		r := ref.Spec
		fwd := r.ForwardMs * forwardFLOPs(*sp) / forwardFLOPs(r)
		m.Corrections = append(m.Corrections, fmt.Sprintf("forward_ms_1gpu %.0f -> %.0f (llama7's, scaled by forward FLOPs)", sp.ForwardMs, fwd))
		sp.ForwardMs = fwd
		return nil
	}); err != nil {
		return err
	}
	return nil
}

// forwardFLOPs is a transformer's forward FLOPs over the global batch:
// per token 2 P for the weights and 4 L s h for the attention scores and
// their product with the values (Narayanan et al. 2021, eq. 3's forward
// third). At 4,096 tokens the attention is 14 % of llama7's forward and
// 9 % of LLaMA-30B's, so leaving it out over-scales llama30 by 5 %.
func forwardFLOPs(sp model.Spec) float64 {
	s := float64(sp.SeqLen)
	perToken := 2*sp.Params + 4*float64(sp.Layers)*s*float64(sp.Hidden)
	return float64(sp.GlobalBatch) * s * perToken
}

// profileForwardMs is the forward time of the global batch on one GPU that
// a profile measured: forward_time x gpus, averaged over the rows.
func profileForwardMs(rows []ProfileRow) (float64, bool) {
	var vals []float64
	for _, r := range rows {
		if r.FwdMs > 0 && r.GPUs > 0 {
			vals = append(vals, r.FwdMs*float64(r.GPUs))
		}
	}
	if len(vals) == 0 {
		return 0, false
	}
	slices.Sort(vals)
	sum := 0.0
	for _, v := range vals {
		sum += v
	}
	return sum / float64(len(vals)), true
}

// publishedShapes are the published architectures a profile can be matched
// to by parameter count (within 3 %) and seq_hid when its spec's hidden
// size is wrong too.
var publishedShapes = []struct {
	name                       string
	params                     float64
	layers, hidden, heads, seq int
}{
	{"BERT-large", 336e6, 24, 1024, 16, 512},
	{"GPT-2 XL", 1558e6, 48, 1600, 25, 1024},
}

// shapeFromProfile makes the spec's hidden x sequence x layers agree with
// the seq_hid its profile was measured with: by the sequence length alone
// when that divides out (roberta, vit, llama7), else by a published
// architecture with the same parameter count and product (bert is
// BERT-large, gpt2 is GPT-2 XL, whose 25 heads also admit the measured
// TP-5 plans). A spec that matches neither is left as it is (t5: its
// seq_hid 2^24 is not 1280 x 16 x any integer and it matches no table
// entry).
func shapeFromProfile(m *ModelInfo, rows []ProfileRow) error {
	if len(rows) == 0 || !profileMatches(m.Spec, rows) {
		return nil
	}
	want := rows[0].SeqHid
	sp := &m.Spec
	cur := float64(sp.Hidden) * float64(sp.SeqLen) * float64(sp.Layers)
	if want <= 0 || cur == want {
		return nil
	}
	if s := want / float64(sp.Hidden*sp.Layers); s == math.Trunc(s) {
		m.Corrections = append(m.Corrections, fmt.Sprintf("seq_len %d -> %.0f (profile seq_hid %.0f = hidden x seq x layers)", sp.SeqLen, s, want))
		sp.SeqLen = int(s)
		return nil
	}
	for _, a := range publishedShapes {
		if math.Abs(sp.Params-a.params) <= 0.03*a.params && float64(a.layers*a.hidden*a.seq) == want {
			m.Corrections = append(m.Corrections, fmt.Sprintf("shape layers=%d hidden=%d heads=%d seq_len=%d -> %s %d/%d/%d/%d (profile seq_hid %.0f, %.3g parameters)",
				sp.Layers, sp.Hidden, sp.Heads, sp.SeqLen, a.name, a.layers, a.hidden, a.heads, a.seq, want, sp.Params))
			sp.Layers, sp.Hidden, sp.Heads, sp.SeqLen = a.layers, a.hidden, a.heads, a.seq
			return nil
		}
	}
	return nil
}
