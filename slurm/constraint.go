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
// ",") and "|" (or), "&" binding tighter; an empty constraint matches every
// node. Brackets, counts ("a*2") and parentheses constrain the job's nodes
// together, not each node, and give ErrConstraint.
func MatchConstraint(constraint string, features []string) (bool, error) {
	if constraint == "" {
		return true, nil
	}
	if strings.ContainsAny(constraint, "[]()*") {
		return false, fmt.Errorf("%w: %q: brackets, parentheses and counts are Slurm's to place", ErrConstraint, constraint)
	}
	var terms [][]string
	for _, term := range strings.Split(constraint, "|") {
		var all []string
		for _, f := range strings.FieldsFunc(term, func(r rune) bool { return r == '&' || r == ',' }) {
			if f = strings.TrimSpace(f); f != "" {
				all = append(all, f)
			}
		}
		if len(all) == 0 {
			return false, fmt.Errorf("%w: %q: empty term", ErrConstraint, constraint)
		}
		terms = append(terms, all)
	}
	for _, all := range terms {
		if !slices.ContainsFunc(all, func(f string) bool { return !slices.Contains(features, f) }) {
			return true, nil
		}
	}
	return false, nil
}
