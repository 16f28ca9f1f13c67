package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"
)

// Result is the outcome of one replay; docs/simulator.md (Output) lists its
// JSON fields.
type Result struct {
	Policy    string  `json:"policy"`
	Jobs      int     `json:"jobs"`
	Completed int     `json:"completed"`
	AvgJCT    float64 `json:"avg_jct_s"`
	P50JCT    float64 `json:"p50_jct_s"`
	P99JCT    float64 `json:"p99_jct_s"`
	Makespan  float64 `json:"makespan_s"`
	AvgQueue  float64 `json:"avg_queue_s"`
	// Restarts counts checkpoint-restarts after a job's first start
	// (shrinks, growths, plan changes and resumptions after preemption).
	Restarts    int `json:"restarts"`
	Starts      int `json:"starts"`
	Preemptions int `json:"preemptions"`
	// GPUUtil is allocated GPU-seconds over cluster GPU-seconds until the makespan.
	GPUUtil    float64 `json:"gpu_util"`
	Rounds     int     `json:"rounds"`
	RoundMsAvg float64 `json:"round_ms_avg"`
	RoundMsMax float64 `json:"round_ms_max"`
	// SLOViolations counts guaranteed jobs that ever ran slower than their
	// own request would have (ground truth, outside restarts).
	SLOViolations int   `json:"slo_violations"`
	Guaranteed    Class `json:"guaranteed"`
	BestEffort    Class `json:"best_effort"`
	// Models splits the results per model type, each with its guaranteed
	// and best-effort jobs: which models a policy serves well or badly.
	Models map[string]ModelClasses `json:"models"`
	// FallbackJobS is job-seconds of progress priced by the fitted model
	// because nothing was measured for the plan and placement.
	FallbackJobS float64 `json:"fallback_job_s"`
	// PermutedJobS is job-seconds priced by a measured row whose placement
	// matches only up to the order of the nodes.
	PermutedJobS float64 `json:"permuted_job_s"`
	// CPUScaledJobS is job-seconds of measured ZeRO-Offload times scaled by
	// the model to the CPUs the job held.
	CPUScaledJobS float64 `json:"cpu_scaled_job_s"`
	// MispricedJobS is job-seconds of progress at a plan and placement whose
	// ground-truth iteration time is more than MispricedTolerance away
	// from the policy's own prediction, either way: how much of the run the
	// policy decided on wrong numbers.
	MispricedJobS float64 `json:"mispriced_job_s"`
	// Refits counts, per model type, the online refits run
	// (Config.RefitThreshold) and those the policy priced with from then on.
	Refits map[string]RefitCount `json:"refits,omitempty"`
	// ProgressJobS is all job-seconds of progress, the denominator of the above.
	ProgressJobS float64 `json:"progress_job_s"`
	// IdleQueuedGPUS is GPU-seconds left unallocated while jobs were queued.
	IdleQueuedGPUS float64 `json:"idle_gpu_s_while_queued"`
	// Bound is every job alone on the cluster at its best measured plan and
	// placement, with one restart penalty.
	Bound Bound `json:"bound"`

	jcts       []float64
	util       []UtilPoint
	gpuSeconds float64
	roundTotal time.Duration
}

// Class summarises one class of jobs.
type Class struct {
	Jobs      int     `json:"jobs"`
	Completed int     `json:"completed"`
	AvgJCT    float64 `json:"avg_jct_s"`
	P50JCT    float64 `json:"p50_jct_s"`
	P99JCT    float64 `json:"p99_jct_s"`
	AvgQueue  float64 `json:"avg_queue_s"`
}

// ModelClasses summarises the jobs of one model type.
type ModelClasses struct {
	All        Class `json:"all"`
	Guaranteed Class `json:"guaranteed"`
	BestEffort Class `json:"best_effort"`
}

// Bound is the lower bound of the trace's JCTs.
type Bound struct {
	AvgJCT   float64 `json:"avg_jct_s"`
	P50JCT   float64 `json:"p50_jct_s"`
	P99JCT   float64 `json:"p99_jct_s"`
	Makespan float64 `json:"makespan_s"`
}

// UtilPoint is the fraction of GPUs allocated during one round.
type UtilPoint struct {
	T    float64 `json:"t_s"`
	Util float64 `json:"util"`
}

// JCTs returns the completion times of the finished jobs, sorted.
func (r *Result) JCTs() []float64 { return slices.Clone(r.jcts) }

// Util returns the GPU allocation per round.
func (r *Result) Util() []UtilPoint { return slices.Clone(r.util) }

func (r *Result) addRound(d time.Duration) {
	r.Rounds++
	r.roundTotal += d
	r.RoundMsMax = max(r.RoundMsMax, float64(d.Microseconds())/1000)
}

// RefitCount is the online refits of one model type in a replay.
type RefitCount struct {
	Tried    int `json:"tried"`
	Promoted int `json:"promoted"`
}

func (r *Result) countRefit(name string, promoted bool) {
	if r.Refits == nil {
		r.Refits = map[string]RefitCount{}
	}
	c := r.Refits[name]
	if promoted {
		c.Promoted++
	} else {
		c.Tried++
	}
	r.Refits[name] = c
}

// MispricedTolerance is the relative gap between the ground truth and the
// policy's prediction above which progress counts as MispricedJobS.
const MispricedTolerance = 0.2

// mispriced reports whether a truth of truthS seconds lies outside
// [1/(1+tol), 1+tol] times the believedS prediction.
func mispriced(truthS, believedS float64) bool {
	r := truthS / believedS
	return r > 1+MispricedTolerance || r < 1/(1+MispricedTolerance)
}

func (r *Result) account(t Truth, believedS, s float64) {
	r.ProgressJobS += s
	if mispriced(t.IterS, believedS) {
		r.MispricedJobS += s
	}
	switch t.Source {
	case Fallback:
		r.FallbackJobS += s
	case MeasuredPermuted:
		r.PermutedJobS += s
	}
	if t.CPUScaled {
		r.CPUScaledJobS += s
	}
}

// percentile is the nearest-rank percentile of sorted xs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(xs)))) - 1
	return xs[max(0, min(k, len(xs)-1))]
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func summarise(jcts, queues []float64, n int) Class {
	slices.Sort(jcts)
	return Class{Jobs: n, Completed: len(jcts), AvgJCT: mean(jcts), P50JCT: percentile(jcts, 50), P99JCT: percentile(jcts, 99), AvgQueue: mean(queues)}
}

// classes gathers the JCTs and queueing delays of a set of jobs, split by
// class, for summarise.
type classes struct {
	all, allQ, g, gQ, be, beQ []float64
	n, nG                     int
}

func (c *classes) add(j *simJob) {
	c.n++
	if j.Guaranteed {
		c.nG++
	}
	if !j.finished {
		return
	}
	jct, q := j.finish-j.Submit, j.firstRun-j.Submit
	c.all, c.allQ = append(c.all, jct), append(c.allQ, q)
	if j.Guaranteed {
		c.g, c.gQ = append(c.g, jct), append(c.gQ, q)
	} else {
		c.be, c.beQ = append(c.be, jct), append(c.beQ, q)
	}
}

func (c *classes) summary() ModelClasses {
	return ModelClasses{All: summarise(c.all, c.allQ, c.n), Guaranteed: summarise(c.g, c.gQ, c.nG),
		BestEffort: summarise(c.be, c.beQ, c.n-c.nG)}
}

func (r *Result) finish(jobs []*simJob, totalGPUs float64, cfg Config, d *Data) {
	var total classes
	perModel := map[string]*classes{}
	for _, j := range jobs {
		total.add(j)
		if perModel[j.App] == nil {
			perModel[j.App] = &classes{}
		}
		perModel[j.App].add(j)
		if !j.finished {
			continue
		}
		if j.Guaranteed && j.violated {
			r.SLOViolations++
		}
		r.Makespan = max(r.Makespan, j.finish)
	}
	sum := total.summary()
	c := sum.All
	r.Completed, r.AvgJCT, r.P50JCT, r.P99JCT, r.AvgQueue = c.Completed, c.AvgJCT, c.P50JCT, c.P99JCT, c.AvgQueue
	r.jcts = total.all
	r.Guaranteed, r.BestEffort = sum.Guaranteed, sum.BestEffort
	r.Models = make(map[string]ModelClasses, len(perModel))
	for m, pc := range perModel {
		r.Models[m] = pc.summary()
	}
	if r.Makespan > 0 {
		r.GPUUtil = r.gpuSeconds / (totalGPUs * r.Makespan)
	}
	if r.Rounds > 0 {
		r.RoundMsAvg = float64(r.roundTotal.Microseconds()) / 1000 / float64(r.Rounds)
	}
	r.Bound = bound(jobs, cfg, d)
}

// bound computes the lower bound: each job alone at its model's fastest
// measured iteration on the cluster, plus one restart penalty.
func bound(jobs []*simJob, cfg Config, d *Data) Bound {
	var jcts []float64
	var b Bound
	for _, j := range jobs {
		it := d.Oracle.BestMeasured(j.App, cfg.Nodes*cfg.GPUsPerNode, cfg.Nodes, cfg.GPUsPerNode)
		if it == 0 || it > j.reqIter {
			it = j.reqIter
		}
		jct := cfg.RestartPenalty.Seconds() + j.steps*it
		jcts = append(jcts, jct)
		b.Makespan = max(b.Makespan, j.Submit+jct)
	}
	slices.Sort(jcts)
	b.AvgJCT, b.P50JCT, b.P99JCT = mean(jcts), percentile(jcts, 50), percentile(jcts, 99)
	return b
}

// WriteTable prints results as an aligned table like the paper's Table 4,
// with the lower bound as the last row.
func WriteTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tjobs\tdone\tavg JCT s\tp50 s\tp99 s\tmakespan s\tqueue s\tG avg s\tBE avg s\tSLO viol\trestarts\tGPU util\tround ms avg/max\tfallback %\tmispriced % of measured\t")
	for _, r := range results {
		fb, mp := 0.0, 0.0
		if r.ProgressJobS > 0 {
			fb = 100 * r.FallbackJobS / r.ProgressJobS
		}
		// Fallback progress is priced by the policy's own model, so only
		// measured progress can be mispriced: report its share of that.
		if m := r.ProgressJobS - r.FallbackJobS; m > 0 {
			mp = 100 * r.MispricedJobS / m
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\t%d\t%d\t%.2f\t%.2f/%.1f\t%.1f\t%.1f\t\n",
			r.Policy, r.Jobs, r.Completed, r.AvgJCT, r.P50JCT, r.P99JCT, r.Makespan, r.AvgQueue,
			classAvg(r.Guaranteed), classAvg(r.BestEffort), r.SLOViolations, r.Restarts, r.GPUUtil, r.RoundMsAvg, r.RoundMsMax, fb, mp)
	}
	if len(results) > 0 {
		b := results[0].Bound
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			"bound", results[0].Jobs, "-", b.AvgJCT, b.P50JCT, b.P99JCT, b.Makespan, "-", "-", "-", "-", "-", "-", "-", "-", "-")
	}
	return tw.Flush()
}

func classAvg(c Class) string {
	if c.Jobs == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", c.AvgJCT)
}
