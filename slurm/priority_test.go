package slurm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParsePriorityConfig(t *testing.T) {
	tests := map[string]struct {
		in   CtldConfig
		want PriorityConfig
	}{
		"basic": {CtldConfig{"PriorityType": "priority/basic", "PriorityWeightQOS": "5"}, PriorityConfig{}},
		"multifactor": {CtldConfig{
			"PriorityType": "priority/multifactor", "PriorityWeightAge": "1000", "PriorityWeightAssoc": "0",
			"PriorityWeightFairShare": "10000", "PriorityWeightJobSize": "1000", "PriorityWeightPartition": "1000",
			"PriorityWeightQOS": "100000", "PriorityWeightTRES": "(null)", "PriorityMaxAge": "7-00:00:00",
			"PriorityFavorSmall": "no", "PriorityFlags": "", "PrioritySiteFactorPlugin": "(null)",
		}, PriorityConfig{Multifactor: true, Age: 1000, FairShare: 10000, JobSize: 1000, Partition: 1000, QOS: 100000, MaxAge: 7 * 24 * time.Hour}},
		"flags": {CtldConfig{
			"PriorityType": "priority/multifactor", "PriorityWeightTRES": "CPU=1,GRES/gpu=10", "PriorityFavorSmall": "yes",
			"PriorityFlags": "SMALL_RELATIVE_TO_TIME,NO_NORMAL_ALL", "PrioritySiteFactorPlugin": "site_factor/example",
		}, PriorityConfig{Multifactor: true, TRES: map[string]float64{"cpu": 1, "gres/gpu": 10}, FavorSmall: true, SizeRelative: true,
			NoNormalAssoc: true, NoNormalPart: true, NoNormalQOS: true, NoNormalTRES: true, SiteFactor: "site_factor/example"}},
		"accrue always": {CtldConfig{"PriorityType": "priority/multifactor", "PriorityFlags": "ACCRUE_ALWAYS,CALCULATE_RUNNING"},
			PriorityConfig{Multifactor: true, AccrueAlways: true}},
		"memory weight per GiB": {CtldConfig{"PriorityType": "priority/multifactor", "PriorityWeightTRES": "Mem=2048G"},
			PriorityConfig{Multifactor: true, TRES: map[string]float64{"mem": 2}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParsePriorityConfig(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	for key, v := range map[string]string{"PriorityWeightQOS": "lots", "PriorityWeightAge": "-1", "PriorityMaxAge": "soon", "PriorityWeightTRES": "CPU=x"} {
		_, err := ParsePriorityConfig(CtldConfig{"PriorityType": "priority/multifactor", key: v})
		if !errors.Is(err, ErrPriorityConfig) || !strings.Contains(err.Error(), key+`="`+v+`"`) {
			t.Errorf("%s=%s: err = %v, want ErrPriorityConfig naming it", key, v, err)
		}
	}
}

// The cases with a slurmctld value are jobs submitted on the 24.11 lab
// with these weights, pending by --begin or for resources; their priority
// is what squeue printed (%Q). The others are worked by hand from the
// formula in the Slurm priority/multifactor documentation.
func TestPrioritiesOf(t *testing.T) {
	now := time.Unix(1795807975, 0)
	cfg := PriorityConfig{Multifactor: true, Age: 1000, FairShare: 10000, JobSize: 1000, Partition: 1000, QOS: 100000, MaxAge: 24 * time.Hour}
	base := Priorities{
		Config:     cfg,
		QOS:        map[string]int64{"normal": 0, "high": 100},
		Partitions: map[string]Partition{"gpu": {Name: "gpu", PriorityJobFactor: 1, PriorityTier: 1}},
		FairShare:  FairShares{{Cluster: "lab", Account: "root", User: "root"}: 1},
		Nodes:      4, CPUs: 256,
	}
	job := func(nodes, cpus int, qos string, f func(*Job)) Job {
		j := Job{Cluster: "lab", Account: "root", User: "root", Partition: "gpu", QOS: qos, NodeCount: nodes, CPUs: cpus,
			SubmitTime: now, EligibleTime: now.Add(time.Hour)}
		if f != nil {
			f(&j)
		}
		return j
	}
	with := func(f func(*Priorities)) Priorities {
		p := base
		f(&p)
		return p
	}
	tests := map[string]struct {
		p        Priorities
		j        Job
		want     float64
		wantTier int
	}{
		// fs 10000 + partition 1000 + QOS 100000 + size 1000 (2/4 + 40/256) / 2
		"slurmctld: -N2 -n40 --qos=high": {base, job(2, 40, "high", nil), 111328, 1},
		"slurmctld: -N1 -n4 --nice=500":  {base, job(1, 4, "normal", func(j *Job) { j.Nice = 500 }), 10632, 1},
		"slurmctld: -N4 -n4":             {base, job(4, 4, "normal", func(j *Job) { j.EligibleTime = now }), 11507, 1},
		"slurmctld: -N1":                 {base, job(1, 1, "normal", nil), 11126, 1},
		// age from the eligible time: 12 h of a 24 h PriorityMaxAge
		"age half": {base, job(1, 1, "normal", func(j *Job) { j.EligibleTime = now.Add(-12 * time.Hour) }), 11626, 1},
		// held without --begin: from the submission, and capped at 1
		"age capped": {base, job(1, 1, "normal", func(j *Job) { j.EligibleTime, j.SubmitTime = time.Time{}, now.Add(-72*time.Hour) }), 12126, 1},
		// ACCRUE_ALWAYS: from the submission, 12 h ago, though --begin is
		// an hour ahead
		"accrue always, begin ahead": {with(func(p *Priorities) { p.Config.AccrueAlways = true }),
			job(1, 1, "normal", func(j *Job) { j.SubmitTime = now.Add(-12 * time.Hour) }), 11626, 1},
		// and from the submission 24 h ago, not the --begin 12 h ago
		"accrue always, begin passed": {with(func(p *Priorities) { p.Config.AccrueAlways = true }),
			job(1, 1, "normal", func(j *Job) { j.SubmitTime, j.EligibleTime = now.Add(-24*time.Hour), now.Add(-12*time.Hour) }), 12126, 1},
		// (3/4 + 252/256) / 2 = 0.8671875
		"favor small": {with(func(p *Priorities) { p.Config.FavorSmall = true }), job(1, 4, "normal", nil), 11867, 1},
		// max(2 * 256/4, 40) / 60 min / 256 CPUs = 0.00833
		"size relative to time": {with(func(p *Priorities) { p.Config.SizeRelative = true }), job(2, 40, "normal", func(j *Job) { j.TimeLimit = time.Hour }), 11008, 1},
		// partition factors 1 and 3: gpu's normalises to 1/3
		"partition normalised": {with(func(p *Priorities) {
			p.Partitions = map[string]Partition{"gpu": {PriorityJobFactor: 1}, "big": {PriorityJobFactor: 3, PriorityTier: 2}}
		}), job(1, 1, "normal", nil), 10460, 0},
		"partition tier": {with(func(p *Priorities) {
			p.Partitions = map[string]Partition{"gpu": {PriorityJobFactor: 1}, "big": {PriorityJobFactor: 3, PriorityTier: 2}}
		}), job(1, 1, "normal", func(j *Job) { j.Partition = "big" }), 11126, 2},
		"raw QOS":             {with(func(p *Priorities) { p.Config.NoNormalQOS = true; p.Config.QOS = 10 }), job(1, 1, "high", nil), 12126, 1},
		"unknown association": {base, job(1, 1, "normal", func(j *Job) { j.User = "other" }), 1126, 1},
		"nice beyond the sum": {base, job(1, 1, "normal", func(j *Job) { j.Nice = 50000 }), 1, 1},
		"priority/basic":      {Priorities{Partitions: base.Partitions}, job(1, 1, "high", nil), 0, 1},
		// 6/256 CPUs x 2000 + 20/2000 GiB x 1000 + 6/32 GPUs x 4000 = 806.875; no
		// node weight, and billing's is not set
		"TRES": {with(func(p *Priorities) {
			p.Config.TRES = map[string]float64{"cpu": 2000, "mem": 1000, "gres/gpu": 4000, "license/x": 50}
			p.Partitions = map[string]Partition{"gpu": {PriorityJobFactor: 1, TRES: "cpu=256,mem=2000G,node=4,billing=256,gres/gpu=32"}}
		}), job(2, 6, "normal", func(j *Job) { j.TRESReq = "cpu=6,mem=20G,node=2,billing=6,gres/gpu=6" }), 12068, 0}, // + 261.7 job size
		// user root's association in account root: 30 of the largest 70
		"association": {with(func(p *Priorities) {
			p.Config.Assoc = 5000
			p.Assoc = map[AssocKey]int64{{Cluster: "lab", Account: "root"}: 0, {Cluster: "lab", Account: "root", User: "root"}: 30,
				{Cluster: "lab", Account: "pacct"}: 70, {Cluster: "lab", Account: "pacct", User: "root"}: 70}
		}), job(1, 1, "normal", nil), 13269, 1}, // 11126.95 + 2142.86
		"association raw": {with(func(p *Priorities) {
			p.Config.Assoc, p.Config.NoNormalAssoc = 10, true
			p.Assoc = map[AssocKey]int64{{Cluster: "lab", Account: "root", User: "root"}: 30, {Cluster: "lab", Account: "pacct", User: "root"}: 70}
		}), job(1, 1, "normal", nil), 11126 + 300, 1},
		"TRES raw": {with(func(p *Priorities) {
			p.Config.TRES, p.Config.NoNormalTRES = map[string]float64{"gres/gpu": 10, "mem": 0.001}, true
		}), job(2, 6, "normal", func(j *Job) { j.TRESReq = "cpu=6,mem=20G,node=2,billing=6,gres/gpu=6" }), 12068 - 806 + 60 + 20, 1}, // 6 GPUs x 10 + 20480 MiB x 0.001
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, tier := tc.p.Of(tc.j, tc.j.Partition, now)
			if got != tc.want || tier != tc.wantTier {
				t.Errorf("Of = %v tier %d, want %v tier %d", got, tier, tc.want, tc.wantTier)
			}
			if got, tier := tc.p.Prepared().Of(tc.j, tc.j.Partition, now); got != tc.want || tier != tc.wantTier {
				t.Errorf("Prepared().Of = %v tier %d, want %v tier %d", got, tier, tc.want, tc.wantTier)
			}
		})
	}
}

// 22.05's slurmrestd printed --nice=-100 as 4294967196 (lab, v0.0.38).
func TestNice38(t *testing.T) {
	for in, want := range map[int]int{0: 0, 500: 500, 4294967196: -100, -100: -100} {
		if got := nice38(in); got != want {
			t.Errorf("nice38(%d) = %d, want %d", in, got, want)
		}
	}
}

// One job's priority on a site of 50,000 associations, 100 QOS and 20
// partitions, with every weight set: what rubickd adds to a cycle per
// held job in priority order.
func BenchmarkPrioritiesOf(b *testing.B) {
	p := Priorities{
		Config: PriorityConfig{Multifactor: true, Age: 1000, Assoc: 5000, FairShare: 10000, JobSize: 1000, Partition: 1000, QOS: 100000,
			MaxAge: 24 * time.Hour, TRES: map[string]float64{"cpu": 2000, "mem": 1000, "gres/gpu": 4000}},
		QOS: map[string]int64{}, Assoc: map[AssocKey]int64{}, FairShare: FairShares{}, Partitions: map[string]Partition{},
		Nodes: 256, CPUs: 256 * 96,
	}
	for i := range 50000 {
		k := AssocKey{Cluster: "c", Account: fmt.Sprintf("a%d", i/10), User: fmt.Sprintf("u%d", i)}
		p.Assoc[k], p.FairShare[k] = int64(i%100), float64(i%100)/100
	}
	for i := range 100 {
		p.QOS[fmt.Sprintf("q%d", i)] = int64(i)
	}
	for i := range 20 {
		p.Partitions[fmt.Sprintf("p%d", i)] = Partition{PriorityJobFactor: i + 1, PriorityTier: i % 3, TRES: "cpu=24576,mem=400000G,node=256,billing=24576,gres/gpu=2048"}
	}
	p = p.Prepared()
	now := time.Unix(1795807975, 0)
	j := Job{Cluster: "c", Account: "a42", User: "u420", Partition: "p7", QOS: "q50", NodeCount: 2, CPUs: 32,
		TRESReq: "cpu=32,mem=128G,node=2,billing=32,gres/gpu=16", SubmitTime: now.Add(-time.Hour)}
	b.ReportAllocs()
	for b.Loop() {
		p.Of(j, j.Partition, now)
	}
}

// Factors lists what counts, as sprio would: the -N2 -n40 --qos=high job
// of TestPrioritiesOf with --nice=500 and 12 h of age.
func TestPriorityFactorsString(t *testing.T) {
	now := time.Unix(1795807975, 0)
	p := Priorities{
		Config:     PriorityConfig{Multifactor: true, Age: 1000, FairShare: 10000, JobSize: 1000, Partition: 1000, QOS: 100000, MaxAge: 24 * time.Hour},
		QOS:        map[string]int64{"high": 100},
		Partitions: map[string]Partition{"gpu": {PriorityJobFactor: 1, PriorityTier: 1}},
		FairShare:  FairShares{{Account: "root", User: "root"}: 1},
		Nodes:      4, CPUs: 256,
	}
	j := Job{Account: "root", User: "root", QOS: "high", NodeCount: 2, CPUs: 40, Nice: 500, SubmitTime: now.Add(-12 * time.Hour)}
	f := p.Factors(j, "gpu", now)
	if got, want := f.String(), "age 500, fairshare 10000, jobsize 328, partition 1000, qos 100000, nice 500"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := f.Priority(); got != 111328 {
		t.Errorf("Priority() = %v, want 111328", got)
	}
}

// A term that prints as 0 (a few seconds of age) is left out.
func TestPriorityFactorsStringDropsZeros(t *testing.T) {
	if got := (PriorityFactors{Age: 0.03, FairShare: 10000, TRES: 1018.4}).String(); got != "fairshare 10000, tres 1018" {
		t.Errorf("String() = %q", got)
	}
}
