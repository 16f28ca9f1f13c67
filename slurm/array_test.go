package slurm

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestArrayTaskIDs(t *testing.T) {
	tests := map[string]struct {
		in   string
		max  int
		want []int
	}{
		"range":         {"0-3", 10, []int{0, 1, 2, 3}},
		"list":          {"0,2-3", 10, []int{0, 2, 3}},
		"step and cap":  {"1-15:2%4", 10, []int{1, 3, 5, 7, 9, 11, 13, 15}},
		"max":           {"0-999", 3, []int{0, 1, 2}},
		"max over list": {"5,7-9", 2, []int{5, 7}},
		"one":           {"7", 10, []int{7}},
	}
	for name, tc := range tests {
		got, err := ArrayTaskIDs(tc.in, tc.max)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s: ArrayTaskIDs(%q) (-want +got):\n%s", name, tc.in, d)
		}
	}
	for _, in := range []string{"", "a", "3-1", "-1", "1:2", "0-4:0", "0-x", "1,,2"} {
		if _, err := ArrayTaskIDs(in, 10); !errors.Is(err, ErrArrayTasks) {
			t.Errorf("ArrayTaskIDs(%q): %v, want ErrArrayTasks", in, err)
		}
	}
}
