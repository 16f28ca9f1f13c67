package slurm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrArrayTasks reports an array task string this package cannot read.
var ErrArrayTasks = errors.New("malformed array task list")

// ArrayTaskIDs reads up to limit task IDs, in order, from a job array's task
// list as Slurm reports it: comma-separated IDs and ranges, a range with an
// optional ":step", and an optional "%limit" suffix (ignored): "0-3",
// "0,2-3", "1-15:2%4".
func ArrayTaskIDs(s string, limit int) ([]int, error) {
	var out []int
	err := arrayRanges(s, func(lo, hi, step int) {
		for k := lo; k <= hi && len(out) < limit; k += step {
			out = append(out, k)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ArrayTaskCount is how many task IDs the task list s (ArrayTaskIDs's
// form) names, without listing them: a record's may name millions.
func ArrayTaskCount(s string) (int, error) {
	n := 0
	err := arrayRanges(s, func(lo, hi, step int) { n += (hi-lo)/step + 1 })
	return n, err
}

// arrayRanges reads the task list s, each of its ranges in turn to visit
// (a lone ID is a range of one), and fails naming the first part it
// cannot read; visit sees every range before the failure.
func arrayRanges(s string, visit func(lo, hi, step int)) error {
	bad := func(why string) error { return fmt.Errorf("%w: %q: %s", ErrArrayTasks, s, why) }
	list, _, _ := strings.Cut(s, "%")
	for _, part := range strings.Split(list, ",") {
		rng, stepS, hasStep := strings.Cut(part, ":")
		loS, hiS, isRange := strings.Cut(rng, "-")
		lo, err := strconv.Atoi(loS)
		if err != nil || lo < 0 {
			return bad(fmt.Sprintf("task %q is not a non-negative integer", loS))
		}
		hi, step := lo, 1
		if isRange {
			if hi, err = strconv.Atoi(hiS); err != nil || hi < lo {
				return bad(fmt.Sprintf("range end %q is not an integer >= %d", hiS, lo))
			}
		}
		if hasStep {
			if step, err = strconv.Atoi(stepS); err != nil || step < 1 || !isRange {
				return bad(fmt.Sprintf("step %q needs a range and an integer >= 1", stepS))
			}
		}
		visit(lo, hi, step)
	}
	return nil
}
