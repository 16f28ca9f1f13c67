package artifact

import (
	"fmt"
	"slices"
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
	llama30Seq    = 2048
)

// applyCorrections replaces the placeholders of models.json that would make
// the model predict nonsense; every change is recorded in the model's
// Corrections and documented in docs/model.md.
//
//   - llama7 forward_ms_1gpu (1000, a placeholder in the artifact): the
//     mean of forward_time x gpus over its profile rows (about 3,000 ms),
//     which is what the placements' own forward column shows on 1 GPU.
//   - llama30: the LLaMA-30B shape above and a forward time scaled from
//     llama7's by the forward FLOPs (parameters x global batch x sequence),
//     since its profile is a copy of llama7's and cannot measure it.
//   - gpt2 heads 19: 1920 hidden units do not split into 19 heads, and the
//     measured TP=5 plans need a head count divisible by 5; 20 heads of 96.
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
	if err := fix("llama30", func(m *ModelInfo) error {
		ref, ok := s.Models["llama7"]
		if !ok {
			return nil
		}
		sp := &m.Spec
		m.Corrections = append(m.Corrections, fmt.Sprintf(
			"shape parameters=%.3g layers=%d hidden=%d heads=%d seq_len=%d -> LLaMA-30B %.3g/%d/%d/%d/%d",
			sp.Params, sp.Layers, sp.Hidden, sp.Heads, sp.SeqLen,
			float64(llama30Params), llama30Layers, llama30Hidden, llama30Heads, llama30Seq))
		sp.Params, sp.Layers, sp.Hidden, sp.Heads, sp.SeqLen = llama30Params, llama30Layers, llama30Hidden, llama30Heads, llama30Seq
		r := ref.Spec
		flops := func(params float64, batch, seq int) float64 { return params * float64(batch) * float64(seq) }
		fwd := r.ForwardMs * flops(sp.Params, sp.GlobalBatch, sp.SeqLen) / flops(r.Params, r.GlobalBatch, r.SeqLen)
		m.Corrections = append(m.Corrections, fmt.Sprintf("forward_ms_1gpu %.0f -> %.0f (llama7's, scaled by forward FLOPs)", sp.ForwardMs, fwd))
		sp.ForwardMs = fwd
		return nil
	}); err != nil {
		return err
	}
	return fix("gpt2", func(m *ModelInfo) error {
		if m.Spec.Heads != 19 || m.Spec.Hidden != 1920 {
			return nil
		}
		m.Corrections = append(m.Corrections, "heads 19 -> 20 (1920 hidden units; measured TP=5 plans)")
		m.Spec.Heads = 20
		return nil
	})
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
