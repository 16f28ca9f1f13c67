package model

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func TestParsePlan(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    Plan
		wantErr bool
	}{
		"plain dp":     {in: "dp8.tp1.pp1.mb2.a1.z0", want: Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, Accum: 1}},
		"3d":           {in: "dp2.tp4.pp2.mb1.a4.z1", want: Plan{DP: 2, TP: 4, PP: 2, MicroBatch: 1, Accum: 4, ZeRO: 1}},
		"offload":      {in: "dp1.tp1.pp1.mb8.a1.z2+off", want: Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 8, Accum: 1, ZeRO: 2, Offload: true}},
		"both flags":   {in: "dp1.tp1.pp1.mb8.a1.z2+off+gc", want: Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 8, Accum: 1, ZeRO: 2, Offload: true, Checkpoint: true}},
		"empty":        {in: "", wantErr: true},
		"missing":      {in: "dp8.tp1.pp1.mb2.a1", wantErr: true},
		"zero dp":      {in: "dp0.tp1.pp1.mb2.a1.z0", wantErr: true},
		"bad stage":    {in: "dp1.tp1.pp1.mb2.a1.z4", wantErr: true},
		"order":        {in: "tp1.dp8.pp1.mb2.a1.z0", wantErr: true},
		"unknown flag": {in: "dp8.tp1.pp1.mb2.a1.z0+x", wantErr: true},
		"injection":    {in: "dp8.tp1.pp1.mb2.a1.z0;rm -rf /", wantErr: true},
		"negative":     {in: "dp8.tp1.pp1.mb-2.a1.z0", wantErr: true},
		// Plan.String writes none of these, so ParsePlan takes none.
		"leading zero":   {in: "dp08.tp1.pp1.mb2.a1.z0", wantErr: true},
		"signed stage":   {in: "dp8.tp1.pp1.mb2.a1.z-0", wantErr: true},
		"plus sign":      {in: "dp8.tp1.pp1.mb+2.a1.z0", wantErr: true},
		"flags reversed": {in: "dp1.tp1.pp1.mb8.a1.z2+gc+off", wantErr: true},
		"flag twice":     {in: "dp1.tp1.pp1.mb8.a1.z2+off+off", wantErr: true},
		"empty flags":    {in: "dp8.tp1.pp1.mb2.a1.z0+", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParsePlan(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrBadInput) {
					t.Fatalf("ParsePlan(%q) error = %v, want ErrBadInput", tc.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePlan(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParsePlan(%q) mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestPlanStringRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := Plan{
			DP: rapid.IntRange(1, 64).Draw(t, "dp"), TP: rapid.IntRange(1, 8).Draw(t, "tp"),
			PP: rapid.IntRange(1, 16).Draw(t, "pp"), MicroBatch: rapid.IntRange(1, 128).Draw(t, "mb"),
			Accum: rapid.IntRange(1, 64).Draw(t, "a"), ZeRO: rapid.IntRange(0, 3).Draw(t, "z"),
			Offload: rapid.Bool().Draw(t, "off"), Checkpoint: rapid.Bool().Draw(t, "gc"),
		}
		got, err := ParsePlan(p.String())
		if err != nil {
			t.Fatalf("ParsePlan(%q): %v", p.String(), err)
		}
		if diff := cmp.Diff(p, got); diff != "" {
			t.Fatalf("round trip of %q (-want +got):\n%s", p.String(), diff)
		}
	})
}

// FuzzParsePlan checks that a plan ParsePlan accepts is one it can run
// (every degree at least 1, a ZeRO stage 0-3) and written as String
// writes it, which parses back to the same plan; and that what it
// refuses wraps ErrBadInput.
func FuzzParsePlan(f *testing.F) {
	for _, s := range []string{
		"dp8.tp1.pp1.mb2.a1.z0", "dp2.tp4.pp2.mb1.a4.z1", "dp1.tp1.pp1.mb8.a1.z2+off", "dp1.tp1.pp1.mb8.a1.z2+off+gc",
		"", "dp8.tp1.pp1.mb2.a1", "dp0.tp1.pp1.mb2.a1.z0", "dp1.tp1.pp1.mb2.a1.z4", "tp1.dp8.pp1.mb2.a1.z0",
		"dp8.tp1.pp1.mb2.a1.z0+x", "dp8.tp1.pp1.mb2.a1.z0;rm -rf /", "dp8.tp1.pp1.mb-2.a1.z0", "dp08.tp1.pp1.mb2.a1.z0",
		"dp8.tp1.pp1.mb2.a1.z-0", "dp8.tp1.pp1.mb+2.a1.z0", "dp1.tp1.pp1.mb8.a1.z2+gc+off", "dp8.tp1.pp1.mb2.a1.z0+",
		"dp1048576.tp1048576.pp1048576.mb1048576.a1048576.z3+off+gc",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePlan(s)
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("ParsePlan(%q) error %v does not wrap ErrBadInput", s, err)
			}
			return
		}
		if p.DP < 1 || p.TP < 1 || p.PP < 1 || p.MicroBatch < 1 || p.Accum < 1 || p.ZeRO < 0 || p.ZeRO > 3 || p.GPUs() < 1 {
			t.Fatalf("ParsePlan(%q) = %+v", s, p)
		}
		if p.String() != s {
			t.Fatalf("ParsePlan(%q) = %+v, written %q", s, p, p.String())
		}
		back, err := ParsePlan(p.String())
		if err != nil {
			t.Fatalf("ParsePlan(%q): %v", p.String(), err)
		}
		if diff := cmp.Diff(p, back); diff != "" {
			t.Fatalf("round trip of %q (-first +second):\n%s", s, diff)
		}
	})
}
