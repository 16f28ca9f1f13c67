package slurm

import (
	"errors"
	"testing"
)

func TestMatchConstraint(t *testing.T) {
	a100 := []string{"a100", "ib"}
	tests := []struct {
		constraint string
		features   []string
		want       bool
	}{
		{"", nil, true},
		{"a100", a100, true},
		{"h100", a100, false},
		{"a100&ib", a100, true},
		{"a100,ib", a100, true},
		{"a100&nvlink", a100, false},
		{"h100|a100", a100, true},
		{"h100|v100&ib", a100, false},
		{"h100|a100&ib", a100, true},
		// Left to right, as slurmctld evaluates it: (a100|h100)&nvlink,
		// not a100|(h100&nvlink).
		{"a100|h100&nvlink", a100, false},
		{"h100&nvlink|a100", a100, true},
		{"a100|h100&ib", a100, true},
		{"h100|v100|a100&ib", a100, true},
		{"h100&ib|a100&nvlink", a100, false},
		{"a100", nil, false},
	}
	for _, tc := range tests {
		got, err := MatchConstraint(tc.constraint, tc.features)
		if err != nil || got != tc.want {
			t.Errorf("MatchConstraint(%q, %v) = %v, %v; want %v", tc.constraint, tc.features, got, err, tc.want)
		}
	}
	for _, c := range []string{"[a100|h100]", "a100*2", "(a100|h100)&ib", "a100||h100", "&"} {
		if _, err := MatchConstraint(c, a100); !errors.Is(err, ErrConstraint) {
			t.Errorf("MatchConstraint(%q): %v, want ErrConstraint", c, err)
		}
	}
}
