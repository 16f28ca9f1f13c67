package slurm

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseLicenses reads a job's license request (-L, as Slurm lists it:
// "matlab:1,fluent@db:2"; a name alone asks for one) into counts by name.
// An alternative ("a|b"), which Slurm satisfies with either, is an error:
// no count of one name is what the job needs.
func ParseLicenses(s string) (map[string]int, error) {
	if s == "" {
		return nil, nil
	}
	if strings.Contains(s, "|") {
		return nil, fmt.Errorf("licenses %q: alternatives (|) are not read", s)
	}
	out := map[string]int{}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		name, count, has := strings.Cut(e, ":")
		if !has {
			// Slurm writes "name*count" in some listings.
			name, count, has = strings.Cut(e, "*")
		}
		n := 1
		if has {
			var err error
			if n, err = strconv.Atoi(count); err != nil || n < 0 {
				return nil, fmt.Errorf("licenses %q: count %q of %q is not a whole number", s, count, name)
			}
		}
		if name == "" {
			return nil, fmt.Errorf("licenses %q: an entry without a name", s)
		}
		out[name] += n
	}
	return out, nil
}
