package policy

import (
	"sync"

	"github.com/rubick-sched/rubick/model"
)

// space restricts the plans a policy may choose.
type space uint8

const (
	// spaceAny allows every valid, memory-feasible plan.
	spaceAny space = iota
	// spaceDP keeps the requested plan's TP, PP, ZeRO stage, offload and
	// checkpointing and scales data parallelism with the GPUs.
	spaceDP
	// spaceFixed allows only the requested plan, on its own GPU count.
	spaceFixed
	// spacePick is spaceAny biased to the requested family (see pick); it
	// only names pick's own cache entries.
	spacePick
)

// perfKey identifies one cached prediction: the best plan of a model type
// within a plan space on one placement shape with a CPU count.
type perfKey struct {
	model  string
	space  space
	cannot model.Features // plan features the job's launch line cannot express
	req    model.Plan     // the requested plan for spaceDP and spaceFixed, else zero
	shape  string         // canonical placement, one byte per node
	cpus   int
	mem    int // host GB per node the plan may use
}

// perfVal is the cached best plan and its throughput (0 when nothing fits).
type perfVal struct {
	plan model.Plan
	tput float64
}

// perfCache memoises predictions across rounds: a placement's best plan
// only depends on its canonical shape, so a round re-evaluates only shapes
// it has never seen. It is safe for concurrent use and is dropped per model
// type when that type's estimator changes (a refit).
type perfCache struct {
	mu   sync.Mutex
	ests map[string]Estimator
	m    map[perfKey]perfVal
}

func newPerfCache() *perfCache {
	return &perfCache{ests: map[string]Estimator{}, m: map[perfKey]perfVal{}}
}

// maxEntries bounds the cache; past it the cache starts over, which only
// costs the next rounds their misses.
const maxEntries = 1 << 20

// sync drops the entries of every model type whose estimator changed and
// returns those types.
func (c *perfCache) sync(models map[string]Estimator) map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	stale := map[string]bool{}
	for name, e := range models {
		if old, ok := c.ests[name]; !ok || old != e {
			stale[name] = true
			c.ests[name] = e
		}
	}
	if len(c.m) > maxEntries {
		clear(c.m)
		return stale
	}
	if len(stale) == 0 {
		return nil
	}
	for k := range c.m {
		if stale[k.model] {
			delete(c.m, k)
		}
	}
	return stale
}

// shapeKey encodes a placement as its canonical byte string.
func shapeKey(pl []int) string {
	if len(pl) > 16 {
		return shapeKeyLong(pl)
	}
	var arr [16]byte
	b := arr[:0]
	for _, g := range pl {
		if g <= 0 {
			continue
		}
		// Insertion sort, descending: shapes are short.
		x := byte(min(g, 255))
		b = append(b, x)
		i := len(b) - 1
		for i > 0 && b[i-1] < x {
			b[i] = b[i-1]
			i--
		}
		b[i] = x
	}
	return string(b)
}

func shapePlacement(shape string) model.Placement {
	pl := make(model.Placement, len(shape))
	for i := range len(shape) {
		pl[i] = int(shape[i])
	}
	return pl
}

// allowDP accepts plans that differ from req only in data parallelism and
// the micro-batch split.
func allowDP(req model.Plan) func(model.Plan) bool {
	return func(p model.Plan) bool {
		return p.TP == req.TP && p.PP == req.PP && p.ZeRO == req.ZeRO &&
			p.Offload == req.Offload && p.Checkpoint == req.Checkpoint
	}
}

// allowing is allow with the plans using a feature of cannot removed; nil
// (every plan) when both allow everything.
func allowing(allow func(model.Plan) bool, cannot model.Features) func(model.Plan) bool {
	switch {
	case cannot == 0:
		return allow
	case allow == nil:
		return cannot.Allows
	}
	return func(p model.Plan) bool { return cannot.Allows(p) && allow(p) }
}

// siaShape reports whether a shape is in Sia's configuration set: one node
// with a power-of-two GPU count, or several whole nodes.
func siaShape(shape string, nodeGPUs int) bool {
	if len(shape) == 1 {
		g := int(shape[0])
		return g&(g-1) == 0 || g == nodeGPUs
	}
	for i := range len(shape) {
		if int(shape[i]) != nodeGPUs {
			return false
		}
	}
	return true
}

// best returns the best plan of est within sp, without the features of
// cannot, on shape with cpus CPUs.
func (c *perfCache) best(name string, est Estimator, sp space, cannot model.Features, req model.Plan, shape string, cpus int, memGB float64) perfVal {
	if shape == "" {
		return perfVal{}
	}
	k := perfKey{model: name, space: sp, cannot: cannot, shape: shape, cpus: cpus, mem: int(memGB)}
	if sp != spaceAny {
		k.req = req
	}
	c.mu.Lock()
	v, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return v
	}
	v = compute(est, sp, cannot, req, shape, cpus, memGB)
	c.mu.Lock()
	c.m[k] = v
	c.mu.Unlock()
	return v
}

func compute(est Estimator, sp space, cannot model.Features, req model.Plan, shape string, cpus int, memGB float64) perfVal {
	pl := shapePlacement(shape)
	r := model.Resources{Placement: pl, CPUs: cpus, HostMemGB: memGB * float64(len(pl))}
	gb := float64(est.Spec().GlobalBatch)
	switch sp {
	case spaceFixed:
		if req.GPUs() != pl.GPUs() || !cannot.Allows(req) {
			return perfVal{}
		}
		// The user's own plan ran on real hardware, so its memory is not
		// second-guessed; only a plan the placement cannot host is rejected.
		b, err := est.Predict(req, r)
		if err != nil || !(b.Iter > 0) {
			return perfVal{}
		}
		return perfVal{plan: req, tput: gb / b.Iter}
	case spaceDP:
		p, b, err := est.BestPlan(r, allowing(allowDP(req), cannot))
		if err != nil || !(b.Iter > 0) {
			return perfVal{}
		}
		return perfVal{plan: p, tput: gb / b.Iter}
	default:
		p, b, err := est.BestPlan(r, allowing(nil, cannot))
		if err != nil || !(b.Iter > 0) {
			return perfVal{}
		}
		return perfVal{plan: p, tput: gb / b.Iter}
	}
}

// pick is best within sp, except that with spaceAny the requested plan's
// family (scaled along data parallelism) is kept unless another plan is
// predicted at least gain faster: the user's plan ran before, the model
// may be off by several per cent, and a wrong switch costs a restart.
func (c *perfCache) pick(name string, est Estimator, sp space, cannot model.Features, req model.Plan, shape string, cpus int, memGB, gain float64) perfVal {
	if sp != spaceAny || gain <= 0 {
		return c.best(name, est, sp, cannot, req, shape, cpus, memGB)
	}
	k := perfKey{model: name, space: spacePick, cannot: cannot, req: req, shape: shape, cpus: cpus, mem: int(memGB)}
	c.mu.Lock()
	v, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return v
	}
	v = c.best(name, est, spaceAny, cannot, req, shape, cpus, memGB)
	d := c.best(name, est, spaceDP, cannot, req, shape, cpus, memGB)
	if d.tput > 0 && v.tput < d.tput*(1+gain) {
		v = d
	}
	c.mu.Lock()
	c.m[k] = v
	c.mu.Unlock()
	return v
}

// shapeKeyLong is shapeKey by counting, for shapes over many nodes.
func shapeKeyLong(pl []int) string {
	var count [256]int
	n := 0
	for _, g := range pl {
		if g > 0 {
			count[min(g, 255)]++
			n++
		}
	}
	b := make([]byte, 0, n)
	for g := 255; g > 0; g-- {
		for range count[g] {
			b = append(b, byte(g))
		}
	}
	return string(b)
}
