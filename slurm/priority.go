package slurm

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// ErrPriorityConfig is wrapped by the error of a priority setting that
// does not read.
var ErrPriorityConfig = errors.New("unreadable priority setting")

// PriorityConfig is what slurmctld's priority/multifactor plugin weighs a
// job's priority by (`scontrol show config`).
type PriorityConfig struct {
	// Multifactor is true with PriorityType=priority/multifactor; the
	// rest means nothing otherwise.
	Multifactor bool
	// The PriorityWeight* values.
	Age, Assoc, FairShare, JobSize, Partition, QOS int64
	// TRES is PriorityWeightTRES by lower-case TRES name ("cpu", "mem",
	// "gres/gpu"); nil when unset.
	TRES map[string]float64
	// MaxAge is PriorityMaxAge: the age at which the age factor reaches 1.
	MaxAge time.Duration
	// FavorSmall is PriorityFavorSmall.
	FavorSmall bool
	// AccrueAlways is PriorityFlags=ACCRUE_ALWAYS: the age factor counts
	// from the submission, whatever the job's begin time.
	AccrueAlways bool
	// SizeRelative is PriorityFlags=SMALL_RELATIVE_TO_TIME; the NoNormal
	// fields are NO_NORMAL_ASSOC, _PART, _QOS and _TRES (or _ALL).
	SizeRelative, NoNormalAssoc, NoNormalPart, NoNormalQOS, NoNormalTRES bool
	// SiteFactor is PrioritySiteFactorPlugin; "" when none.
	SiteFactor string
}

// Weighted reports whether any factor carries a weight.
func (c PriorityConfig) Weighted() bool {
	return c.Age+c.Assoc+c.FairShare+c.JobSize+c.Partition+c.QOS > 0 || len(c.TRES) > 0
}

// ParsePriorityConfig reads the priority settings of a `scontrol show
// config`. A weight or age that does not read is an error naming it.
func ParsePriorityConfig(c CtldConfig) (PriorityConfig, error) {
	p := PriorityConfig{Multifactor: c["PriorityType"] == "priority/multifactor"}
	if !p.Multifactor {
		return p, nil
	}
	for _, w := range []struct {
		key string
		v   *int64
	}{
		{"PriorityWeightAge", &p.Age}, {"PriorityWeightAssoc", &p.Assoc}, {"PriorityWeightFairShare", &p.FairShare},
		{"PriorityWeightJobSize", &p.JobSize}, {"PriorityWeightPartition", &p.Partition}, {"PriorityWeightQOS", &p.QOS},
	} {
		v, ok := c[w.key]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return PriorityConfig{}, fmt.Errorf("%w: %s=%q is not a weight", ErrPriorityConfig, w.key, v)
		}
		*w.v = n
	}
	if v := c["PriorityMaxAge"]; v != "" {
		d, err := ParseElapsed(v)
		if err != nil {
			return PriorityConfig{}, fmt.Errorf("%w: PriorityMaxAge=%q: %v", ErrPriorityConfig, v, err)
		}
		p.MaxAge = d
	}
	if v := nullable(c["PriorityWeightTRES"]); v != "" {
		w, err := parseTRESWeights(v)
		if err != nil {
			return PriorityConfig{}, fmt.Errorf("%w: PriorityWeightTRES=%q: %v", ErrPriorityConfig, v, err)
		}
		p.TRES = w
	}
	p.SiteFactor = nullable(c["PrioritySiteFactorPlugin"])
	p.FavorSmall = strings.EqualFold(c["PriorityFavorSmall"], "yes")
	p.SizeRelative = c.Has("PriorityFlags", "SMALL_RELATIVE_TO_TIME")
	p.AccrueAlways = c.Has("PriorityFlags", "ACCRUE_ALWAYS")
	p.NoNormalAssoc = c.Has("PriorityFlags", "NO_NORMAL_ASSOC") || c.Has("PriorityFlags", "NO_NORMAL_ALL")
	p.NoNormalPart = c.Has("PriorityFlags", "NO_NORMAL_PART") || c.Has("PriorityFlags", "NO_NORMAL_ALL")
	p.NoNormalQOS = c.Has("PriorityFlags", "NO_NORMAL_QOS") || c.Has("PriorityFlags", "NO_NORMAL_ALL")
	p.NoNormalTRES = c.Has("PriorityFlags", "NO_NORMAL_TRES") || c.Has("PriorityFlags", "NO_NORMAL_ALL")
	return p, nil
}

// parseTRESWeights reads "CPU=1000,Mem=2000,GRES/gpu=3000": a weight per
// TRES name (lower-cased). A memory weight with a unit suffix is per
// unit, as in TRESBillingWeights, which Slurm parses alike.
func parseTRESWeights(s string) (map[string]float64, error) {
	w := map[string]float64{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("entry %q is not TRES=weight", kv)
		}
		k = strings.ToLower(strings.TrimSpace(k))
		scale := 1.0
		if k == "mem" && v != "" {
			if i := strings.IndexByte("KMGTP", byte(unicode.ToUpper(rune(v[len(v)-1])))); i >= 0 {
				scale, v = math.Pow(1024, -float64(max(i-1, 0))), v[:len(v)-1]
			}
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(f >= 0) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("weight %q of %s is not a number >= 0", v, k)
		}
		w[k] = f * scale
	}
	return w, nil
}

// tresCounts reads a TRES string ("cpu=6,mem=20G,node=2,gres/gpu=6") by
// lower-case name, memory in MiB; entries that do not read are left out.
func tresCounts(s string) map[string]float64 {
	out := map[string]float64{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			continue
		}
		k = strings.ToLower(k)
		if k == "mem" {
			if mb := tresMemMB(kv); mb > 0 {
				out[k] = float64(mb)
			}
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && !math.IsInf(f, 0) {
			out[k] = f
		}
	}
	return out
}

// nullable is v, or "" for the "(null)" scontrol prints for an unset value.
func nullable(v string) string {
	if v == "(null)" {
		return ""
	}
	return v
}

// Priorities computes the priority slurmctld would give a job that
// nothing holds: priority/multifactor's weighted sum of the age,
// association, fair-share, job size, partition, QOS and TRES factors,
// less the job's nice. A site factor plugin's is left out: rubick cannot
// see it. rubick holds the jobs it manages at priority 0, so Slurm
// computes none for them.
type Priorities struct {
	Config PriorityConfig
	// QOS is each QOS's Priority, by name (`scontrol show assoc_mgr`).
	QOS map[string]int64
	// Partitions gives each partition's PriorityJobFactor and PriorityTier.
	Partitions map[string]Partition
	// FairShare holds the associations' fair-share factors.
	FairShare FairShares
	// Assoc is each association's Priority; the factor divides by the
	// largest, so with an association weight it must list them all.
	Assoc map[AssocKey]int64
	// Nodes and CPUs are the cluster's node and CPU counts, what the job
	// size factor divides by.
	Nodes, CPUs int

	// tops holds the largest partition, QOS and association priorities
	// once Prepared has found them; nil before.
	tops *priorityTops
}

// priorityTops are what the partition, QOS and association factors
// divide by.
type priorityTops struct {
	part       int
	qos, assoc int64
}

// Prepared is p with the largest partition, QOS and association
// priorities found once, so that Of need not scan every association for
// every job.
func (p Priorities) Prepared() Priorities {
	t := p.findTops()
	p.tops = &t
	return p
}

func (p Priorities) findTops() priorityTops {
	if p.tops != nil {
		return *p.tops
	}
	var t priorityTops
	for _, o := range p.Partitions {
		t.part = max(t.part, o.PriorityJobFactor)
	}
	for _, o := range p.QOS {
		t.qos = max(t.qos, o)
	}
	for _, o := range p.Assoc {
		t.assoc = max(t.assoc, o)
	}
	return t
}

// Of is j's priority in partition part at now, as slurmctld would compute
// it for j if it were pending and not held (truncated to a whole number
// in 1..2^32-1), and the partition's PriorityTier, which Slurm orders by
// first.
func (p Priorities) Of(j Job, part string, now time.Time) (prio float64, tier int) {
	f := p.Factors(j, part, now)
	return f.Priority(), f.Tier
}

// PriorityFactors are a job's weighted priority factors, as sprio lists
// them, and its partition's tier.
type PriorityFactors struct {
	Age, Assoc, FairShare, JobSize, Partition, QOS, TRES float64
	Nice                                                 int
	Tier                                                 int
	// basic is true without priority/multifactor, which computes none.
	basic bool
}

// Priority is the sum less the nice, truncated to a whole number in
// 1..2^32-1 as slurmctld stores it; 0 without priority/multifactor.
func (f PriorityFactors) Priority() float64 {
	if f.basic {
		return 0
	}
	sum := f.Age + f.Assoc + f.FairShare + f.JobSize + f.Partition + f.QOS + f.TRES - float64(f.Nice)
	return min(max(math.Floor(sum), 1), math.MaxUint32)
}

// String lists the factors that count, sprio's way:
// "age 120, fairshare 10000, qos 100000, nice 500".
func (f PriorityFactors) String() string {
	var parts []string
	for _, t := range []struct {
		name string
		v    float64
	}{{"age", f.Age}, {"assoc", f.Assoc}, {"fairshare", f.FairShare}, {"jobsize", f.JobSize},
		{"partition", f.Partition}, {"qos", f.QOS}, {"tres", f.TRES}, {"nice", float64(f.Nice)}} {
		if math.Round(t.v) != 0 { // as printed: a second's age is no term
			parts = append(parts, fmt.Sprintf("%s %.0f", t.name, t.v))
		}
	}
	return strings.Join(parts, ", ")
}

// Factors is what Of sums for j in partition part at now.
//
// Age counts from j's eligible time (its --begin), else its submission:
// the hold is rubick's, so the time held counts as time waited. With
// ACCRUE_ALWAYS it counts from the submission, a --begin still ahead
// included, as Slurm's does.
func (p Priorities) Factors(j Job, part string, now time.Time) PriorityFactors {
	c := p.Config
	pt := p.Partitions[part]
	out := PriorityFactors{Tier: pt.PriorityTier, basic: !c.Multifactor}
	if out.basic {
		return out
	}
	tops := p.findTops()
	if c.Age > 0 {
		since := j.EligibleTime
		if since.IsZero() || c.AccrueAlways {
			since = j.SubmitTime
		}
		if waited := now.Sub(since); waited > 0 {
			f := 1.0
			if waited < c.MaxAge {
				f = float64(waited) / float64(c.MaxAge)
			}
			out.Age = float64(c.Age) * f
		}
	}
	if c.FairShare > 0 {
		f, _ := p.FairShare.Of(j.Cluster, j.Account, j.User, part)
		out.FairShare = float64(c.FairShare) * f
	}
	if c.Assoc > 0 {
		out.Assoc = float64(c.Assoc) * p.assoc(j, part, tops.assoc)
	}
	if c.JobSize > 0 {
		out.JobSize = float64(c.JobSize) * p.jobSize(j, pt)
	}
	if c.Partition > 0 && pt.PriorityJobFactor > 0 {
		f := float64(pt.PriorityJobFactor)
		if !c.NoNormalPart {
			f /= float64(tops.part)
		}
		out.Partition = float64(c.Partition) * f
	}
	if q := p.QOS[j.QOS]; c.QOS > 0 && q > 0 {
		f := float64(q)
		if !c.NoNormalQOS {
			f /= float64(tops.qos)
		}
		out.QOS = float64(c.QOS) * f
	}
	if len(c.TRES) > 0 {
		out.TRES = p.tres(j, pt)
	}
	out.Nice = j.Nice
	return out
}

// assoc is the association factor: the Priority of the job's association
// (its user's in the partition, else in the account) over the largest any
// association has.
func (p Priorities) assoc(j Job, part string, top int64) float64 {
	v, ok := p.Assoc[AssocKey{j.Cluster, j.Account, j.User, part}]
	if !ok || part == "" {
		v = p.Assoc[AssocKey{j.Cluster, j.Account, j.User, ""}]
	}
	if v <= 0 {
		return 0
	}
	if p.Config.NoNormalAssoc {
		return float64(v)
	}
	return float64(v) / float64(top)
}

// tres is the weighted TRES term: each weighted TRES the job asks for, as
// a share of what the partition holds (the count itself with
// NO_NORMAL_TRES), times its weight.
func (p Priorities) tres(j Job, pt Partition) float64 {
	req, part := tresCounts(j.TRESReq), tresCounts(pt.TRES)
	var sum float64
	for k, w := range p.Config.TRES {
		switch {
		case p.Config.NoNormalTRES:
			sum += w * req[k]
		case part[k] > 0:
			sum += w * req[k] / part[k]
		}
	}
	return sum
}

// jobSize is the job size factor in 0..1: the share of the cluster's
// nodes and CPUs the job asks for (or what it leaves, with
// PriorityFavorSmall), or with SMALL_RELATIVE_TO_TIME its CPUs per minute
// of its time limit.
func (p Priorities) jobSize(j Job, pt Partition) float64 {
	if p.Nodes <= 0 || p.CPUs <= 0 {
		return 0
	}
	nodes, cpus := float64(max(j.NodeCount, 1)), float64(max(j.CPUs, 0))
	total, totalCPUs := float64(p.Nodes), float64(p.CPUs)
	var f float64
	switch {
	case p.Config.SizeRelative:
		limit := j.TimeLimit
		if limit == 0 {
			limit = pt.MaxTime
		}
		mins := float64(math.MaxUint32) // Slurm's INFINITE
		if limit > 0 {
			mins = limit.Minutes()
		}
		f = max(nodes*totalCPUs/total, cpus) / mins / totalCPUs
		if p.Config.FavorSmall {
			f = 1 - f
		}
	case p.Config.FavorSmall:
		f = (total - nodes) / total
		if cpus > 0 {
			f = (f + (totalCPUs-cpus)/totalCPUs) / 2
		}
	default:
		f = nodes / total
		if cpus > 0 {
			f = (f + cpus/totalCPUs) / 2
		}
	}
	return min(max(f, 0), 1)
}
