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

// ArrayTaskCount counts what ArrayTaskIDs lists, and refuses what it
// refuses.
func TestArrayTaskCount(t *testing.T) {
	for in, want := range map[string]int{"0-3": 4, "0,2-3": 3, "1-15:2%4": 8, "7": 1, "0-3999999": 4000000} {
		if got, err := ArrayTaskCount(in); err != nil || got != want {
			t.Errorf("ArrayTaskCount(%q) = %d, %v; want %d", in, got, err, want)
		}
		if ids, _ := ArrayTaskIDs(in, 10_000_000); len(ids) != want {
			t.Errorf("ArrayTaskIDs(%q) lists %d, ArrayTaskCount %d", in, len(ids), want)
		}
	}
	for _, in := range []string{"", "a", "3-1", "1:2", "0-4:0", "1,,2"} {
		if _, err := ArrayTaskCount(in); !errors.Is(err, ErrArrayTasks) {
			t.Errorf("ArrayTaskCount(%q): %v, want ErrArrayTasks", in, err)
		}
	}
}
