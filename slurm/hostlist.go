package slurm

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxHostlist bounds an expansion so that a malformed or hostile range such
// as "n[0-999999999]" cannot exhaust memory.
const maxHostlist = 1 << 16

// ErrHostlist is wrapped by every hostlist syntax error.
var ErrHostlist = errors.New("invalid hostlist")

// ExpandHostlist expands a Slurm hostlist expression such as
// "node[1-3,5],gpu07" into node names, in order. Ranges keep their
// zero padding ("n[08-10]" gives n08, n09, n10) and several bracket groups in
// one name expand as a cartesian product ("r[1-2]n[1-2]"). The empty string
// gives nil.
func ExpandHostlist(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "(null)" {
		return nil, nil
	}
	var out []string
	for _, item := range splitTopLevel(s) {
		if item == "" {
			return nil, fmt.Errorf("%w: empty name in %q", ErrHostlist, s)
		}
		names, err := expandOne(item, maxHostlist-len(out))
		if err != nil {
			return nil, fmt.Errorf("%w (in %q)", err, s)
		}
		out = append(out, names...)
	}
	return out, nil
}

// splitTopLevel splits on commas outside brackets.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(parts, strings.TrimSpace(s[start:]))
}

func expandOne(item string, budget int) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if strings.ContainsRune(item, ']') {
			return nil, fmt.Errorf("%w: unbalanced ']' in %q", ErrHostlist, item)
		}
		return []string{item}, nil
	}
	end := strings.IndexByte(item[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%w: unbalanced '[' in %q", ErrHostlist, item)
	}
	end += open
	prefix, body, rest := item[:open], item[open+1:end], item[end+1:]
	if strings.ContainsRune(body, '[') {
		return nil, fmt.Errorf("%w: nested '[' in %q", ErrHostlist, item)
	}
	suffixes, err := expandOne(rest, budget)
	if err != nil {
		return nil, err
	}
	if rest == "" {
		suffixes = []string{""}
	}
	var out []string
	for _, rng := range strings.Split(body, ",") {
		lo, hi, width, err := parseRange(rng)
		if err != nil {
			return nil, fmt.Errorf("%w: %v in %q", ErrHostlist, err, item)
		}
		if (hi-lo+1)*len(suffixes) > budget-len(out) {
			return nil, fmt.Errorf("%w: more than %d names in %q", ErrHostlist, maxHostlist, item)
		}
		for n := lo; n <= hi; n++ {
			num := fmt.Sprintf("%0*d", width, n)
			for _, suf := range suffixes {
				out = append(out, prefix+num+suf)
			}
		}
	}
	return out, nil
}

// parseRange parses "5", "1-3" or "08-10"; width is the zero-padded width.
func parseRange(r string) (lo, hi, width int, err error) {
	r = strings.TrimSpace(r)
	a, b, isRange := strings.Cut(r, "-")
	if lo, err = parseIndex(a); err != nil {
		return 0, 0, 0, err
	}
	hi = lo
	if isRange {
		if hi, err = parseIndex(b); err != nil {
			return 0, 0, 0, err
		}
	}
	if hi < lo {
		return 0, 0, 0, fmt.Errorf("descending range %q", r)
	}
	width = 0
	if len(a) > 1 && a[0] == '0' {
		width = len(a)
	}
	return lo, hi, width, nil
}

func parseIndex(s string) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, fmt.Errorf("bad index %q", s)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad index %q", s)
		}
	}
	return strconv.Atoi(s)
}

// CompressHostlist writes names as a hostlist expression that
// ExpandHostlist turns back into the same names: names sharing a prefix and
// ending in numbers of one zero padding become one range group
// ("node1,node2,node3,node5" gives "node[1-3,5]"). Groups keep the order of
// their first name; duplicates are dropped; nil gives "".
func CompressHostlist(names []string) string {
	type group struct {
		prefix string
		width  int // digits of a zero-padded number; 0 when unpadded
		nums   []int
	}
	var groups []*group // names without a usable number are groups of width -1
	at := map[[2]string]*group{}
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		i := len(name)
		for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
			i--
		}
		digits := name[i:]
		n, err := strconv.Atoi(digits)
		// A prefix with brackets or commas would not read back as one name.
		if digits == "" || len(digits) > 9 || err != nil || strings.ContainsAny(name[:i], "[],") {
			groups = append(groups, &group{prefix: name, width: -1})
			continue
		}
		width := 0
		if len(digits) > 1 && digits[0] == '0' {
			width = len(digits)
		}
		key := [2]string{name[:i], strconv.Itoa(width)}
		g := at[key]
		if g == nil {
			g = &group{prefix: name[:i], width: width}
			at[key] = g
			groups = append(groups, g)
		}
		g.nums = append(g.nums, n)
	}
	num := func(n, width int) string { return fmt.Sprintf("%0*d", width, n) }
	var out []string
	for _, g := range groups {
		if g.width < 0 {
			out = append(out, g.prefix)
			continue
		}
		if len(g.nums) == 1 {
			out = append(out, g.prefix+num(g.nums[0], g.width))
			continue
		}
		slices.Sort(g.nums)
		var ranges []string
		for k := 0; k < len(g.nums); {
			e := k
			for e+1 < len(g.nums) && g.nums[e+1] == g.nums[e]+1 {
				e++
			}
			r := num(g.nums[k], g.width)
			if e > k {
				r += "-" + num(g.nums[e], g.width)
			}
			ranges = append(ranges, r)
			k = e + 1
		}
		out = append(out, g.prefix+"["+strings.Join(ranges, ",")+"]")
	}
	return strings.Join(out, ",")
}
