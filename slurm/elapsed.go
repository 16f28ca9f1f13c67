package slurm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// maxElapsed bounds the days of a period, and its leading hours or
// minutes, each: their sum stays inside time.Duration's 292 years, where
// it would otherwise wrap round to a wrong or negative duration.
const maxElapsed = 100 * 365 * 24 * time.Hour

// ParseElapsed parses a period as Slurm prints it: [D-]HH:MM:SS, and the
// MM:SS and MM:SS.mmm forms sacct uses for short times (sacct's Elapsed,
// scontrol show config's PriorityCalcPeriod), and D-HH and D-HH:MM, which
// Slurm reads as days and hours (and minutes), not minutes and seconds.
func ParseElapsed(v string) (time.Duration, error) {
	if v == "" {
		return 0, errors.New("empty elapsed time")
	}
	var d time.Duration
	rest := v
	ds, r, days := strings.Cut(v, "-")
	if days {
		n, err := strconv.Atoi(ds)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("days %q are not a non-negative integer", ds)
		}
		if time.Duration(n) > maxElapsed/(24*time.Hour) {
			return 0, fmt.Errorf("days %q exceed %v", ds, maxElapsed)
		}
		d, rest = time.Duration(n)*24*time.Hour, r
	}
	parts := strings.Split(rest, ":")
	var units []time.Duration
	switch {
	case days && len(parts) == 1:
		units = []time.Duration{time.Hour}
	case days && len(parts) == 2:
		units = []time.Duration{time.Hour, time.Minute}
	case len(parts) == 2:
		units = []time.Duration{time.Minute, time.Second}
	case len(parts) == 3:
		units = []time.Duration{time.Hour, time.Minute, time.Second}
	default:
		return 0, errors.New("want [D-]HH:MM:SS")
	}
	for i, p := range parts {
		if units[i] == time.Second {
			// Digits and a point only: ParseFloat also reads signs,
			// exponents, hex floats, Inf and NaN.
			secs, err := strconv.ParseFloat(p, 64)
			if err != nil || !(secs >= 0 && secs < 60) || strings.Trim(p, "0123456789.") != "" {
				return 0, fmt.Errorf("seconds %q are not in [0, 60)", p)
			}
			d += time.Duration(secs*float64(time.Second) + 0.5)
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || (i > 0 && n >= 60) || time.Duration(n) > maxElapsed/units[i] || strings.HasPrefix(p, "+") {
			return 0, fmt.Errorf("component %q is out of range", p)
		}
		d += time.Duration(n) * units[i]
	}
	return d, nil
}
