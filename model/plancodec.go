package model

import (
	"fmt"
	"strconv"
	"strings"
)

// ParsePlan parses the compact form written by Plan.String, e.g.
// "dp4.tp2.pp1.mb2.a1.z0+off+gc". It is the form carried in the job's
// AdminComment tag, so it rejects anything it would not have written.
func ParsePlan(s string) (Plan, error) {
	body, flags, _ := strings.Cut(s, "+")
	var p Plan
	if flags != "" {
		for _, f := range strings.Split(flags, "+") {
			switch f {
			case "off":
				p.Offload = true
			case "gc":
				p.Checkpoint = true
			default:
				return Plan{}, fmt.Errorf("%w: plan %q: unknown flag %q", ErrBadInput, s, f)
			}
		}
	}
	fields := strings.Split(body, ".")
	want := []struct {
		prefix string
		dst    *int
		min    int
	}{
		{"dp", &p.DP, 1}, {"tp", &p.TP, 1}, {"pp", &p.PP, 1},
		{"mb", &p.MicroBatch, 1}, {"a", &p.Accum, 1}, {"z", &p.ZeRO, 0},
	}
	if len(fields) != len(want) {
		return Plan{}, fmt.Errorf("%w: plan %q: want %d dot-separated fields, got %d", ErrBadInput, s, len(want), len(fields))
	}
	for i, w := range want {
		v, ok := strings.CutPrefix(fields[i], w.prefix)
		if !ok {
			return Plan{}, fmt.Errorf("%w: plan %q: field %d=%q must start with %q", ErrBadInput, s, i+1, fields[i], w.prefix)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < w.min || n > 1<<20 {
			return Plan{}, fmt.Errorf("%w: plan %q: %s=%q is not an integer in %d..%d", ErrBadInput, s, w.prefix, v, w.min, 1<<20)
		}
		*w.dst = n
	}
	if p.ZeRO > 3 {
		return Plan{}, fmt.Errorf("%w: plan %q: z=%d is not a ZeRO stage 0-3", ErrBadInput, s, p.ZeRO)
	}
	// Atoi takes leading zeros and signs, and the flags parse in any order
	// and number: only the spelling String writes is the plan's.
	if w := p.String(); w != s {
		return Plan{}, fmt.Errorf("%w: plan %q: write it as %q (fields in this order, no leading zeros, +off before +gc)", ErrBadInput, s, w)
	}
	return p, nil
}
