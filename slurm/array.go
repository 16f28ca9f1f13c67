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
	bad := func(why string) error { return fmt.Errorf("%w: %q: %s", ErrArrayTasks, s, why) }
	list, _, _ := strings.Cut(s, "%")
	var out []int
	for _, part := range strings.Split(list, ",") {
		rng, stepS, hasStep := strings.Cut(part, ":")
		loS, hiS, isRange := strings.Cut(rng, "-")
		lo, err := strconv.Atoi(loS)
		if err != nil || lo < 0 {
			return nil, bad(fmt.Sprintf("task %q is not a non-negative integer", loS))
		}
		hi, step := lo, 1
		if isRange {
			if hi, err = strconv.Atoi(hiS); err != nil || hi < lo {
				return nil, bad(fmt.Sprintf("range end %q is not an integer >= %d", hiS, lo))
			}
		}
		if hasStep {
			if step, err = strconv.Atoi(stepS); err != nil || step < 1 || !isRange {
				return nil, bad(fmt.Sprintf("step %q needs a range and an integer >= 1", stepS))
			}
		}
		for k := lo; k <= hi && len(out) < limit; k += step {
			out = append(out, k)
		}
	}
	return out, nil
}
