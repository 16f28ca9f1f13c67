package launch

import (
	"slices"
	"strings"
)

// flagSpec names one command-line option with its aliases. Valued options
// take a value as "--name value" or "--name=value"; switches take none.
type flagSpec struct {
	names  []string
	valued bool
}

func valued(names ...string) flagSpec { return flagSpec{names: names, valued: true} }
func switchFlag(names ...string) flagSpec {
	return flagSpec{names: names}
}

// occurrence is one appearance of a flag in argv.
type occurrence struct {
	idx    int    // index of the flag token
	n      int    // tokens it spans (1 inline or switch, 2 separate value)
	value  string // its value ("" for a switch)
	inline bool   // "--name=value"
}

// cmdline is a command line edited in place: every token the edits do not
// touch keeps its position relative to the others.
type cmdline struct {
	toks []string
}

// find lists the occurrences of f in toks[lo:hi].
func (c *cmdline) find(f flagSpec, lo, hi int) []occurrence {
	hi = min(hi, len(c.toks))
	var out []occurrence
	for i := lo; i < hi; i++ {
		t := c.toks[i]
		for _, name := range f.names {
			if t == name {
				o := occurrence{idx: i, n: 1}
				// A following "--flag" is not a value: the value is missing.
				if f.valued && i+1 < hi && !strings.HasPrefix(c.toks[i+1], "--") {
					o.n, o.value = 2, c.toks[i+1]
				}
				out = append(out, o)
				i += o.n - 1 // skip the value token
				break
			}
			if f.valued && strings.HasPrefix(t, name+"=") {
				out = append(out, occurrence{idx: i, n: 1, value: t[len(name)+1:], inline: true})
				break
			}
		}
	}
	return out
}

// get returns the value of the last occurrence of f in toks[lo:hi], the one
// argparse keeps.
func (c *cmdline) get(f flagSpec, lo, hi int) (string, bool) {
	occ := c.find(f, lo, hi)
	if len(occ) == 0 {
		return "", false
	}
	return occ[len(occ)-1].value, true
}

func (c *cmdline) has(f flagSpec, lo, hi int) bool { return len(c.find(f, lo, hi)) > 0 }

// set gives f the value v in toks[lo:hi]: the first occurrence keeps its
// form and place, later ones are removed, and an absent flag is inserted at
// hi as "--name value". It returns the new end of the region.
func (c *cmdline) set(f flagSpec, v string, lo, hi int) int {
	occ := c.find(f, lo, hi)
	if len(occ) == 0 {
		c.toks = slices.Insert(c.toks, hi, f.names[0], v)
		return hi + 2
	}
	hi = c.removeOcc(occ[1:], hi)
	first := occ[0]
	name := c.toks[first.idx]
	switch {
	case first.inline:
		name, _, _ = strings.Cut(name, "=")
		c.toks[first.idx] = name + "=" + v
	case first.n == 2:
		c.toks[first.idx+1] = v
	default: // a trailing flag with its value missing
		c.toks = slices.Insert(c.toks, first.idx+1, v)
		hi++
	}
	return hi
}

// dropListValues removes the values after the first of every "--name v1
// v2 ..." of f in toks[lo:hi]: a list option (argparse's nargs="+") takes
// each token up to the next option, so setting the first value alone
// would leave the others in the list. "--name=v" takes one value. It
// returns the new end of the region.
func (c *cmdline) dropListValues(f flagSpec, lo, hi int) int {
	occ := c.find(f, lo, hi)
	for i := len(occ) - 1; i >= 0; i-- {
		o := occ[i]
		if o.n != 2 {
			continue
		}
		from, to := o.idx+2, o.idx+2
		for to < hi && !strings.HasPrefix(c.toks[to], "-") {
			to++
		}
		c.toks = slices.Delete(c.toks, from, to)
		hi -= to - from
	}
	return hi
}

// setSwitch makes switch f present once (on) or absent (off) in toks[lo:hi]
// and returns the new end of the region.
func (c *cmdline) setSwitch(f flagSpec, on bool, lo, hi int) int {
	occ := c.find(f, lo, hi)
	if !on {
		return c.removeOcc(occ, hi)
	}
	if len(occ) == 0 {
		c.toks = slices.Insert(c.toks, hi, f.names[0])
		return hi + 1
	}
	return c.removeOcc(occ[1:], hi)
}

// setOptional makes f, an option whose value is optional (argparse's
// nargs="?" with a const), mean on or off in toks[lo:hi]: off removes it;
// on keeps its first occurrence, given the value v if it has one, drops
// later ones, and inserts a bare "--name" when it is absent. It returns the
// new end of the region.
func (c *cmdline) setOptional(f flagSpec, on bool, v string, lo, hi int) int {
	occ := c.find(f, lo, hi)
	if !on {
		return c.removeOcc(occ, hi)
	}
	if len(occ) == 0 {
		c.toks = slices.Insert(c.toks, hi, f.names[0])
		return hi + 1
	}
	hi = c.removeOcc(occ[1:], hi)
	switch first := occ[0]; {
	case first.inline:
		name, _, _ := strings.Cut(c.toks[first.idx], "=")
		c.toks[first.idx] = name + "=" + v
	case first.n == 2:
		c.toks[first.idx+1] = v
	}
	return hi
}

// remove deletes every occurrence of f in toks[lo:hi] and returns the new
// end of the region.
func (c *cmdline) remove(f flagSpec, lo, hi int) int {
	return c.removeOcc(c.find(f, lo, hi), hi)
}

func (c *cmdline) removeOcc(occ []occurrence, hi int) int {
	for i := len(occ) - 1; i >= 0; i-- {
		o := occ[i]
		c.toks = slices.Delete(c.toks, o.idx, o.idx+o.n)
		hi -= o.n
	}
	return hi
}

// LookupFlag returns the value of the last "--name value" or "--name=value"
// in argv, the one argparse keeps.
func LookupFlag(argv []string, name string) (string, bool) {
	c := cmdline{toks: argv}
	return c.get(valued(name), 0, len(argv))
}

// HasFlag reports whether the switch "--name" appears in argv.
func HasFlag(argv []string, name string) bool {
	c := cmdline{toks: argv}
	return c.has(switchFlag(name), 0, len(argv))
}
