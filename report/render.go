package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("report: json: %w", err)
	}
	return nil
}

// summaryHeader is the CSV header of summary rows.
var summaryHeader = []string{
	"by", "key", "jobs", "finished", "avg_jct_s", "p99_jct_s", "avg_queue_s", "gpu_hours", "useful_gpu_hours",
	"reconfigurations", "requeues", "resizes", "reconfig_lost_s", "reconfig_lost_gpu_hours",
	"guaranteed", "below_request", "slo_violations", "slo_unchecked", "gpu_tres_missing", "timed_out", "billing_hours",
	"interruptions", "interruption_lost_s", "interruption_lost_gpu_hours",
	"interruptions_node_fail", "interruptions_preempted", "interruptions_other",
}

// jobHeader is the CSV header of job rows.
var jobHeader = []string{
	"job_id", "name", "account", "qos", "partition", "model_type", "class", "tenant", "state", "finished",
	"submit", "first_start", "end", "jct_s", "queue_s", "runs", "requeues", "resizes", "reconfigurations",
	"reconfig_lost_s", "reconfig_lost_gpu_hours", "gpu_hours", "useful_gpu_hours", "gpu_tres_missing",
	"below_request", "slo_violated", "plans", "billing_hours", "user",
	"interruptions", "interruption_lost_s", "interruption_lost_gpu_hours",
	"interruptions_node_fail", "interruptions_preempted", "interruptions_other",
}

// WriteCSV writes one row per summary: the overall row (by "all"), then
// every group. With jobs, it writes one row per job instead.
func (r *Report) WriteCSV(w io.Writer, jobs bool) error {
	cw := csv.NewWriter(w)
	if jobs {
		_ = cw.Write(jobHeader)
		for _, j := range r.Jobs {
			_ = cw.Write([]string{
				j.ID, j.Name, j.Account, j.QOS, j.Partition, j.ModelType, j.Class, j.Tenant, j.State,
				strconv.FormatBool(j.Finished), csvTime(j.Submit), csvTime(j.FirstStart), csvTime(j.End),
				csvPtr(j.JCTS), csvPtr(j.QueueS), strconv.Itoa(len(j.Runs)), strconv.Itoa(j.Requeues),
				strconv.Itoa(j.Resizes), strconv.Itoa(j.Reconfigurations), num(j.ReconfigLostS),
				csvPtr(j.ReconfigLostGPUHours), csvPtr(j.GPUHours), csvPtr(j.UsefulGPUHours),
				strconv.FormatBool(j.GPUTRESMissing), strconv.FormatBool(j.BelowRequest),
				csvBool(j.SLOViolated), strings.Join(j.Plans, " "), csvPtr(j.BillingHours), j.User,
				strconv.Itoa(j.Interruptions), num(j.InterruptionLostS), csvPtr(j.InterruptionLostGPUHours),
				strconv.Itoa(j.IntrNodeFail), strconv.Itoa(j.IntrPreempted), strconv.Itoa(j.IntrOther),
			})
		}
	} else {
		_ = cw.Write(summaryHeader)
		_ = cw.Write(summaryCSV("all", r.Overall))
		for _, g := range r.Groups {
			for _, s := range g.Rows {
				_ = cw.Write(summaryCSV(g.By, s))
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("report: csv: %w", err)
	}
	return nil
}

func summaryCSV(by string, s Summary) []string {
	slo := ""
	if s.SLOViolations != nil {
		slo = strconv.Itoa(*s.SLOViolations)
	}
	return []string{
		by, s.Key, strconv.Itoa(s.Jobs), strconv.Itoa(s.Finished), csvPtr(s.AvgJCTS), csvPtr(s.P99JCTS),
		csvPtr(s.AvgQueueS), csvPtr(s.GPUHours), csvPtr(s.UsefulGPUHours), strconv.Itoa(s.Reconfigurations),
		strconv.Itoa(s.Requeues), strconv.Itoa(s.Resizes), num(s.ReconfigLostS), csvPtr(s.ReconfigLostGPUHours),
		strconv.Itoa(s.Guaranteed), strconv.Itoa(s.BelowRequest), slo, strconv.Itoa(s.SLOUnchecked),
		strconv.Itoa(s.GPUTRESMissing), strconv.Itoa(s.TimedOut), csvPtr(s.BillingHours),
		strconv.Itoa(s.Interruptions), num(s.InterruptionLostS), csvPtr(s.InterruptionLostGPUHours),
		strconv.Itoa(s.IntrNodeFail), strconv.Itoa(s.IntrPreempted), strconv.Itoa(s.IntrOther),
	}
}

// num rounds to 6 decimals so CSV output does not depend on float noise.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}

func csvPtr(v *float64) string {
	if v == nil {
		return ""
	}
	return num(*v)
}

func csvBool(v *bool) string {
	if v == nil {
		return ""
	}
	return strconv.FormatBool(*v)
}

func csvTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.Format(time.RFC3339)
}

// WriteTable writes the human-readable report: header and notes, a table
// per grouping with the overall row last, the plan history of every job
// that has one, optionally every job, and the per-job problems.
func (r *Report) WriteTable(w io.Writer, jobs bool) error {
	ew := &errWriter{w: w}
	window := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format(time.RFC3339)
	}
	store := "-"
	if r.Store != "" {
		store = r.Store
	}
	fmt.Fprintf(ew, "rubick report: %d jobs, submitted %s .. %s, restart overhead %s, store %s\n",
		len(r.Jobs), window(r.Since), window(r.Until), time.Duration(r.RestartOverheadS*float64(time.Second)), store)
	for _, n := range r.Notes {
		fmt.Fprintf(ew, "note: %s\n", n)
	}
	for _, g := range r.Groups {
		fmt.Fprintln(ew)
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "by %s\tjobs\tdone\tavg JCT\tp99 JCT\tavg queue\tGPU-h\tuseful GPU-h\tbilling-h\treconf (rq+rs)\treconf cost\tintr. (nf+pr+other)\tintr. cost\tguar.\tbelow req\tSLO viol.\n", g.By)
		for _, s := range g.Rows {
			tableRow(tw, s)
		}
		tableRow(tw, r.Overall)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	var hist []Job
	for _, j := range r.Jobs {
		if len(j.Plans) > 0 || len(j.StorePlans) > 0 {
			hist = append(hist, j)
		}
	}
	if len(hist) > 0 {
		fmt.Fprintln(ew, "\nplan history")
		for _, j := range hist {
			plans := "-"
			if len(j.Plans) > 0 {
				plans = strings.Join(j.Plans, " -> ")
			}
			fmt.Fprintf(ew, "  job %s (%s): %s\n", j.ID, j.ModelType, plans)
			for _, pc := range j.StorePlans {
				res := pc.Result
				if res == "" {
					res = "pending"
				}
				cost := ""
				if pc.RestartCostS != nil {
					cost = fmt.Sprintf(" (restart cost %.1fs, measured)", *pc.RestartCostS)
				}
				fmt.Fprintf(ew, "    %s %s: %s%s%s\n", pc.At.Format(time.RFC3339), strings.TrimRight(fmt.Sprintf("%-8s %s", pc.Kind, pc.Subject()), " "),
					res, suffix(pc.Error), cost)
			}
			if j.SLOViolated != nil || j.SLODetail != "" {
				v := "unchecked"
				if j.SLOViolated != nil {
					v = map[bool]string{true: "VIOLATED", false: "met"}[*j.SLOViolated]
				}
				fmt.Fprintf(ew, "    SLO %s: %s\n", v, j.SLODetail)
			}
		}
	}
	if jobs {
		fmt.Fprintln(ew)
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "job\tname\tmodel\tclass\taccount\tstate\truns\treconf\tintr.\tJCT\tqueue\tGPU-h\tuseful GPU-h\tbilling-h\tplans")
		for _, j := range r.Jobs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, dash(j.Name), j.ModelType,
				dash(j.Class), dash(j.Account), j.State, len(j.Runs), j.Reconfigurations, j.Interruptions, dur(j.JCTS), dur(j.QueueS),
				hours(j.GPUHours), hours(j.UsefulGPUHours), hours(j.BillingHours), dash(strings.Join(j.Plans, " -> ")))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Errors) > 0 {
		fmt.Fprintf(ew, "\n%d problem(s):\n", len(r.Errors))
		for _, e := range r.Errors {
			fmt.Fprintf(ew, "  %v\n", e)
		}
	}
	return ew.err
}

func tableRow(w io.Writer, s Summary) {
	slo := "-"
	if s.SLOViolations != nil {
		slo = strconv.Itoa(*s.SLOViolations)
		if s.SLOUnchecked > 0 {
			slo += fmt.Sprintf(" (%d unchecked)", s.SLOUnchecked)
		}
	}
	done := strconv.Itoa(s.Finished)
	if s.TimedOut > 0 {
		done += fmt.Sprintf(" (%d timeout)", s.TimedOut)
	}
	fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d (%d+%d)\t%s / %s GPU-h\t%d (%d+%d+%d)\t%s / %s GPU-h\t%d\t%d\t%s\n",
		s.Key, s.Jobs, done, dur(s.AvgJCTS), dur(s.P99JCTS), dur(s.AvgQueueS), hours(s.GPUHours), hours(s.UsefulGPUHours),
		hours(s.BillingHours), s.Reconfigurations, s.Requeues, s.Resizes, dur(&s.ReconfigLostS), hours(s.ReconfigLostGPUHours),
		s.Interruptions, s.IntrNodeFail, s.IntrPreempted, s.IntrOther, dur(&s.InterruptionLostS), hours(s.InterruptionLostGPUHours), s.Guaranteed, s.BelowRequest, slo)
}

// dur formats seconds compactly ("45s", "12m05s", "3h04m", "2d05h"); "-"
// for unknown.
func dur(v *float64) string {
	if v == nil {
		return "-"
	}
	s := int64(math.Round(*v))
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// hours formats GPU- or billing-hours to 3 decimals; "-" for unknown.
func hours(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *v)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func suffix(e string) string {
	if e == "" {
		return ""
	}
	return " (" + e + ")"
}

// errWriter keeps the first write error so the table code can write
// freely and check once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
