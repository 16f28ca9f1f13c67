package model

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFeatures(t *testing.T) {
	dp := Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1}
	tp := Plan{DP: 4, TP: 2, PP: 1, MicroBatch: 2, Accum: 1}
	pp := Plan{DP: 2, TP: 1, PP: 4, MicroBatch: 1, Accum: 4}
	off := Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1, ZeRO: 2, Offload: true}
	tests := map[string]struct {
		cannot Features
		str    string
		allows []bool // dp, tp, pp, off
	}{
		"nothing":   {0, "", []bool{true, true, true, true}},
		"deepspeed": {FeatureTP | FeaturePP, "tp,pp", []bool{true, false, false, true}},
		"no config": {FeatureOffload, "offload", []bool{true, true, true, false}},
		"all":       {FeatureTP | FeaturePP | FeatureOffload, "tp,pp,offload", []bool{true, false, false, false}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.cannot.String(); got != tc.str {
				t.Errorf("String() = %q, want %q", got, tc.str)
			}
			back, err := ParseFeatures(tc.str)
			if err != nil || back != tc.cannot {
				t.Errorf("ParseFeatures(%q) = %v, %v; want %v", tc.str, back, err, tc.cannot)
			}
			var got []bool
			for _, p := range []Plan{dp, tp, pp, off} {
				got = append(got, tc.cannot.Allows(p))
			}
			if d := cmp.Diff(tc.allows, got); d != "" {
				t.Errorf("Allows dp, tp, pp, off (-want +got):\n%s", d)
			}
		})
	}
	if _, err := ParseFeatures("tp,zero3"); !errors.Is(err, ErrBadInput) {
		t.Errorf("ParseFeatures with an unknown name = %v, want ErrBadInput", err)
	}
}
