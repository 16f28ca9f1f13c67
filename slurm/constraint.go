package slurm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrConstraint reports a --constraint expression this package cannot
// evaluate node by node.
var ErrConstraint = errors.New("unsupported constraint")

// MatchConstraint reports whether a node with the given features satisfies
// a job's --constraint. It reads features joined by "&" (and, also written
// ",") and "|" (or), evaluated left to right as slurmctld does, neither
// binding tighter ("a|b&c" is (a|b)&c); an empty constraint matches every
// node. Brackets, counts ("a*2") and parentheses constrain the job's nodes
// together, not each node, and give ErrConstraint.
func MatchConstraint(constraint string, features []string) (bool, error) {
	if constraint == "" {
		return true, nil
	}
	if strings.ContainsAny(constraint, "[]()*") {
		return false, fmt.Errorf("%w: %q: brackets, parentheses and counts are Slurm's to place", ErrConstraint, constraint)
	}
	match, op, start := true, '&', 0
	for i, r := range constraint + "&" { // a last operator closes the last feature
		if r != '&' && r != ',' && r != '|' {
			continue
		}
		f := strings.TrimSpace(constraint[start:min(i, len(constraint))])
		if f == "" {
			return false, fmt.Errorf("%w: %q: empty term", ErrConstraint, constraint)
		}
		if has := slices.Contains(features, f); op == '|' {
			match = match || has
		} else {
			match = match && has
		}
		op, start = r, i+1
	}
	return match, nil
}
