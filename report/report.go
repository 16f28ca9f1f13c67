package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Dimensions the report can group by, in their documented order.
var Dimensions = []string{"model", "account", "tenant", "class", "qos", "partition", "user"}

// DefaultBy is the default grouping.
var DefaultBy = []string{"model", "account", "tenant"}

// DefaultRestartOverhead is the cost charged for each reconfiguration and
// interruption on top of the measured gap: checkpoint load and warm-up of the next run.
// 260 s is the paper artifact's restart penalty, also the simulator's.
const DefaultRestartOverhead = 260 * time.Second

// Options configure Build.
type Options struct {
	// Since and Until select jobs by submit time: Since <= Submit < Until.
	// A zero bound is open. Jobs whose submit time is unknown are kept.
	Since, Until time.Time
	// RestartOverhead is charged per reconfiguration and interruption,
	// capped at the next run's length.
	RestartOverhead time.Duration
	// By lists the dimensions to group by (see Dimensions).
	By []string
}

// Validate names the first bad option.
func (o Options) Validate() error {
	if o.RestartOverhead < 0 {
		return fmt.Errorf("report: restart overhead %v is negative", o.RestartOverhead)
	}
	if !o.Since.IsZero() && !o.Until.IsZero() && !o.Since.Before(o.Until) {
		return fmt.Errorf("report: since %s is not before until %s", o.Since.Format(time.RFC3339), o.Until.Format(time.RFC3339))
	}
	for _, d := range o.By {
		if !slices.Contains(Dimensions, d) {
			return fmt.Errorf("report: group by %q: want one of %s", d, strings.Join(Dimensions, ", "))
		}
	}
	return nil
}

// Summary aggregates a set of jobs. Pointer fields are null when no job of
// the set has the columns they need.
type Summary struct {
	Key      string `json:"key"`
	Jobs     int    `json:"jobs"`
	Finished int    `json:"finished"`
	// TimedOut counts the finished jobs whose last run ended TIMEOUT:
	// Slurm ended them at their time limit, before they were done.
	TimedOut int      `json:"timed_out"`
	AvgJCTS  *float64 `json:"avg_jct_s"`
	P99JCTS  *float64 `json:"p99_jct_s"`
	// AvgQueueS averages first start - submit over the jobs that started.
	AvgQueueS *float64 `json:"avg_queue_s"`
	// GPUHours, UsefulGPUHours, BillingHours, ReconfigLostGPUHours and
	// InterruptionLostGPUHours need AllocTRES: null without that column.
	GPUHours             *float64 `json:"gpu_hours"`
	UsefulGPUHours       *float64 `json:"useful_gpu_hours"`
	BillingHours         *float64 `json:"billing_hours"`
	Reconfigurations     int      `json:"reconfigurations"`
	Requeues             int      `json:"requeues"`
	Resizes              int      `json:"resizes"`
	ReconfigLostS        float64  `json:"reconfig_lost_s"`
	ReconfigLostGPUHours *float64 `json:"reconfig_lost_gpu_hours"`
	// Interruptions are the requeues that were not rubick's
	// (Job.Interruptions), apart from its reconfigurations.
	Interruptions int `json:"interruptions"`
	// IntrNodeFail, IntrPreempted and IntrOther split them by cause, as
	// Job's do.
	IntrNodeFail             int      `json:"interruptions_node_fail"`
	IntrPreempted            int      `json:"interruptions_preempted"`
	IntrOther                int      `json:"interruptions_other"`
	InterruptionLostS        float64  `json:"interruption_lost_s"`
	InterruptionLostGPUHours *float64 `json:"interruption_lost_gpu_hours"`
	Guaranteed               int      `json:"guaranteed"`
	BelowRequest             int      `json:"below_request"`
	// SLOViolations counts guaranteed jobs the store check found below
	// their requested throughput; null without a store.
	SLOViolations *int `json:"slo_violations"`
	// SLOUnchecked counts guaranteed jobs the store check could not price.
	SLOUnchecked   int `json:"slo_unchecked"`
	GPUTRESMissing int `json:"gpu_tres_missing"`
}

// Group is the summaries along one dimension, ordered by key.
type Group struct {
	By   string    `json:"by"`
	Rows []Summary `json:"rows"`
}

// Report is the whole report. Its JSON keys are stable; docs/report.md
// lists them.
type Report struct {
	Since            *time.Time `json:"since"`
	Until            *time.Time `json:"until"`
	RestartOverheadS float64    `json:"restart_overhead_s"`
	// Store is the store path the report was enriched from; empty for none.
	Store   string      `json:"store"`
	Overall Summary     `json:"overall"`
	Groups  []Group     `json:"groups"`
	Jobs    []Job       `json:"jobs"`
	Errors  []*JobError `json:"errors"`
	Notes   []string    `json:"notes"`

	by       []string
	storeSet bool
	// overhead is Options.RestartOverhead, for Enrich to rebuild a job.
	overhead time.Duration
	// tres says the input had AllocTRES, which every GPU-hour and
	// billing-hour figure needs.
	tres bool
}

// Err returns nil, or an error wrapping ErrJob that lists the jobs that
// could not be fully reported.
func (r *Report) Err() error {
	if len(r.Errors) == 0 {
		return nil
	}
	errs := make([]error, len(r.Errors))
	for i, e := range r.Errors {
		errs[i] = e
	}
	return fmt.Errorf("report: %d problem(s): %w", len(r.Errors), errors.Join(errs...))
}

// Build groups sacct rows into jobs, keeps those in the window and
// summarises them. Per-job problems go to Report.Errors; the jobs are still
// reported.
func Build(rows []Row, cols Columns, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.By == nil {
		o.By = DefaultBy
	}
	r := &Report{
		Since: timePtr(o.Since), Until: timePtr(o.Until), RestartOverheadS: o.RestartOverhead.Seconds(),
		Jobs: []Job{}, Errors: []*JobError{}, Notes: []string{}, by: o.By, tres: cols["AllocTRES"],
		overhead: o.RestartOverhead,
	}
	for _, c := range []struct{ col, note string }{
		{"Submit", "no Submit column: the time window is not applied and JCT and queueing delay are unknown"},
		{"Start", "no Start column: queueing delay and restart gaps are unknown"},
		{"End", "no End column: JCT and restart gaps are unknown"},
		{"Elapsed", "no Elapsed column: run lengths come from End - Start"},
		{"AllocTRES", "no AllocTRES column: GPU-hours and billing-hours are unknown"},
		{"AdminComment", "no AdminComment column: every job is model type " + NoModel},
		{"Account", "no Account column: every job is account " + NoModel},
	} {
		if !cols[c.col] {
			r.Notes = append(r.Notes, c.note)
		}
	}
	groups := groupRows(mergeHet(rows))
	jobs := make([]Job, len(groups))
	errs := make([][]*JobError, len(groups))
	for k, rs := range groups {
		jobs[k], errs[k] = buildJob(rs, o.RestartOverhead, r.tres, nil, nil)
	}
	for k, j := range jobs {
		// groupRows puts the jobs of a reused id next to each other.
		if k+1 < len(jobs) && jobs[k+1].ID == j.ID {
			j.next = jobs[k+1].Submit
		}
		if k+1 < len(jobs) && jobs[k+1].ID == j.ID || k > 0 && jobs[k-1].ID == j.ID {
			for _, e := range errs[k] {
				e.Submit = j.Submit
			}
		}
		if j.Submit != nil && (!o.Since.IsZero() && j.Submit.Before(o.Since) || !o.Until.IsZero() && !j.Submit.Before(o.Until)) {
			continue
		}
		r.Jobs = append(r.Jobs, j)
		r.Errors = append(r.Errors, errs[k]...)
	}
	slices.SortStableFunc(r.Jobs, func(a, b Job) int { return jobIDCompare(a.ID, b.ID) })
	if n := reusedNote(r.Jobs); n != "" {
		r.Notes = append(r.Notes, n)
	}
	if n := tresMissingNote(r.Jobs); n != "" {
		r.Notes = append(r.Notes, n)
	}
	r.summarize()
	return r, nil
}

// reusedNote is the note on the job ids that more than one of jobs
// (sorted by id) has: Slurm reused them. "" for none.
func reusedNote(jobs []Job) string {
	var n int
	for k := 1; k < len(jobs); k++ {
		if jobs[k].ID == jobs[k-1].ID && (k == 1 || jobs[k-2].ID != jobs[k].ID) {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d job id(s) reused by Slurm: their runs are reported as separate jobs", n)
}

// tresMissingNote is the note on the rubick jobs whose GPUs are unknown:
// AllocTRES lacks gres/gpu and there is no req= to fall back on. "" for
// none.
func tresMissingNote(jobs []Job) string {
	var missing int
	for _, j := range jobs {
		if j.GPUTRESMissing && j.ModelType != NoModel {
			missing++
		}
	}
	if missing == 0 {
		return ""
	}
	return fmt.Sprintf("%d rubick job(s) have AllocTRES without gres/gpu and no req= to fall back on: set AccountingStorageTRES=gres/gpu", missing)
}

// summarize fills Overall and Groups from Jobs.
func (r *Report) summarize() {
	r.Overall = summarize("all", r.Jobs, r.storeSet, r.tres)
	r.Groups = []Group{}
	for _, dim := range r.by {
		keys := map[string][]Job{}
		for _, j := range r.Jobs {
			k := dimension(j, dim)
			keys[k] = append(keys[k], j)
		}
		g := Group{By: dim, Rows: []Summary{}}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			g.Rows = append(g.Rows, summarize(k, keys[k], r.storeSet, r.tres))
		}
		r.Groups = append(r.Groups, g)
	}
}

func dimension(j Job, dim string) string {
	v := ""
	switch dim {
	case "model":
		v = j.ModelType
	case "account":
		v = j.Account
	case "tenant":
		v = j.Tenant
	case "class":
		v = j.Class
	case "qos":
		v = j.QOS
	case "partition":
		v = j.Partition
	case "user":
		v = j.User
	}
	if v == "" {
		return NoModel
	}
	return v
}

// summarize aggregates jobs; withTRES says the input had AllocTRES, without
// which the GPU-hour and billing-hour sums are unknown rather than 0.
func summarize(key string, jobs []Job, withStore, withTRES bool) Summary {
	s := Summary{Key: key}
	var gpuH, usefulH, billingH, lostH, intrH float64
	var jcts []float64
	var queue float64
	var queued int
	var slo int
	for _, j := range jobs {
		// An array's record of tasks not split off yet is each of them:
		// they share its state, submit and end, and none has run.
		n := max(j.Tasks, 1)
		s.Jobs += n
		if j.Finished {
			s.Finished += n
		}
		if j.State == "TIMEOUT" {
			s.TimedOut += n
		}
		if j.JCTS != nil {
			for range n {
				jcts = append(jcts, *j.JCTS)
			}
		}
		if j.QueueS != nil {
			queue += *j.QueueS
			queued++
		}
		gpuH += orZero(j.GPUHours)
		usefulH += orZero(j.UsefulGPUHours)
		billingH += orZero(j.BillingHours)
		s.Reconfigurations += j.Reconfigurations
		s.Requeues += j.Requeues
		s.Resizes += j.Resizes
		s.ReconfigLostS += j.ReconfigLostS
		lostH += orZero(j.ReconfigLostGPUHours)
		s.Interruptions += j.Interruptions
		s.IntrNodeFail += j.IntrNodeFail
		s.IntrPreempted += j.IntrPreempted
		s.IntrOther += j.IntrOther
		s.InterruptionLostS += j.InterruptionLostS
		intrH += orZero(j.InterruptionLostGPUHours)
		if j.Class == "guaranteed" {
			s.Guaranteed += n
			if withStore && j.SLOViolated == nil {
				s.SLOUnchecked += n
			}
		}
		if j.BelowRequest {
			s.BelowRequest++
		}
		if j.SLOViolated != nil && *j.SLOViolated {
			slo++
		}
		if j.GPUTRESMissing {
			s.GPUTRESMissing++
		}
	}
	if len(jcts) > 0 {
		sum := 0.0
		for _, v := range jcts {
			sum += v
		}
		s.AvgJCTS = floatPtr(sum / float64(len(jcts)))
		s.P99JCTS = floatPtr(Percentile(jcts, 99))
	}
	if queued > 0 {
		s.AvgQueueS = floatPtr(queue / float64(queued))
	}
	if withStore {
		s.SLOViolations = &slo
	}
	if withTRES {
		s.GPUHours, s.UsefulGPUHours = floatPtr(gpuH), floatPtr(usefulH)
		s.BillingHours, s.ReconfigLostGPUHours = floatPtr(billingH), floatPtr(lostH)
		s.InterruptionLostGPUHours = floatPtr(intrH)
	}
	return s
}

// Percentile is the nearest-rank percentile: the smallest value with at
// least p percent of the values at or below it. It does not modify vs.
func Percentile(vs []float64, p float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

func marshalJSON(v any) ([]byte, error) { return json.Marshal(v) }
