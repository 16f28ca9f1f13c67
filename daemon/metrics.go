package daemon

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// Metrics are rubickd's Prometheus metrics, registered on their own
// registry so tests and several daemons in one process do not collide.
type Metrics struct {
	Registry       *prometheus.Registry
	CycleDuration  prometheus.Histogram
	PolicyDuration prometheus.Histogram
	Actions        *prometheus.CounterVec
	SlurmErrors    *prometheus.CounterVec
	Jobs           *prometheus.GaugeVec
	Samples        *prometheus.CounterVec
	LaunchNotices  *prometheus.CounterVec
	RestartCost    *prometheus.GaugeVec
	RigidReserved  prometheus.Gauge
	GroupLimited   prometheus.Gauge
	GroupAllowed   *prometheus.GaugeVec
	GroupInUse     *prometheus.GaugeVec
	LastCycle      prometheus.Gauge
	TokenExpiry    prometheus.Gauge
	OtherWrites    prometheus.Counter
	QueuedAge      *prometheus.GaugeVec
	SetupFailed    prometheus.Gauge
}

// NewMetrics creates and registers every metric.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		CycleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rubick_cycle_duration_seconds",
			Help:    "Duration of one control cycle: Slurm reads, policy and apply, excluding waits for checkpoints.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		PolicyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rubick_policy_duration_seconds",
			Help:    "Duration of one policy decision on a snapshot.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		Actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rubick_actions_total",
			Help: "Actions applied to Slurm. action: start, shrink, restart, preempt, annotate. result: ok, failed, skipped (dry run or already applied).",
		}, []string{"action", "result"}),
		SlurmErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rubick_slurm_api_errors_total",
			Help: "Failed calls to Slurm. source: slurmrestd, scontrol, scancel, sacct.",
		}, []string{"source"}),
		Jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rubick_jobs",
			Help: "Jobs in managed partitions at the last cycle. state: Slurm job state (PENDING, RUNNING, ...). class: guaranteed, best-effort, rigid.",
		}, []string{"state", "class"}),
		Samples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rubick_samples_total",
			Help: "Profiling samples reported by rubick-srun. result: accepted, rejected (by rubickd's checks), error (rubickd could not check or store it: a locked store, slurmrestd down), refused (a credential munge refused, a malformed payload), unverified (munged could not check the credential).",
		}, []string{"result"}),
		LaunchNotices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rubick_launch_notices_total",
			Help: "Launch notices from rubick-srun. result: accepted, refused (the job's line could not run its plan; it requeued itself), rejected, error.",
		}, []string{"result"}),
		RestartCost: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rubick_restart_cost_seconds",
			Help: "Measured cost of one checkpoint-restart per model type (median of the newest five), as the policy prices it. Absent for types priced at restart_cost.",
		}, []string{"model_type"}),
		RigidReserved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rubick_rigid_reserved_gpus",
			Help: "Free GPUs held back at the last cycle for the first pending job without a model type (rigid_jobs: schedule).",
		}),
		GroupLimited: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rubick_group_limited_jobs",
			Help: "Jobs kept from starting or growing at the last cycle by a group limit (GrpTRES, MaxTRESPerUser, MaxTRESPerAccount): held while the group is full, or deferred to the next cycle.",
		}),
		GroupAllowed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rubick_group_allowed",
			Help: "What a group limit allows, at the last cycle. limit: as an admin sets it (\"QOS normal GrpTRES\", \"QOS normal GrpTRESRunMins\", \"association physics GrpTRESMins\"). what: GPUs, CPUs, MB of memory, billing, GPU-minutes, CPU-minutes, billing-minutes.",
		}, []string{"limit", "what"}),
		GroupInUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rubick_group_in_use",
			Help: "What the running jobs hold against a group limit at the last cycle (every job in Slurm counts); for a budget (GrpTRESMins), with the minutes its jobs used. Labels as rubick_group_allowed.",
		}, []string{"limit", "what"}),
		LastCycle: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rubick_last_cycle_timestamp_seconds",
			Help: "Unix time at which the last control cycle finished.",
		}),
		TokenExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rubick_slurm_token_expiry_timestamp_seconds",
			Help: "Unix time at which rubickd's slurmrestd JWT expires (its exp claim); 0 when it has none or is not a JWT.",
		}),
		QueuedAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rubick_queued_age_seconds",
			Help: "How long the longest-queued job the policy plans has queued, at the last cycle, as the policy ages it (from its first submission, or from the end of its hold by its user or an administrator, or of its wait for its --begin or dependencies); 0 when none queues. class: guaranteed, best-effort. Best-effort jobs past policy.starvation_age go first.",
		}, []string{"class"}),
		OtherWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rubick_other_rubickd_writes_total",
			Help: "Job tags seen changed since the last cycle with another rubickd's name in them (tag by=): a second rubickd manages the same cluster. The one that started later stops.",
		}),
		SetupFailed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rubick_setup_checks_failed",
			Help: "Checks of rubickd --check that failed when rubickd started; it runs anyway. /status lists them (setup), with those that warned.",
		}),
	}
	m.Registry.MustRegister(m.CycleDuration, m.PolicyDuration, m.Actions, m.SlurmErrors, m.Jobs, m.Samples, m.LaunchNotices, m.RestartCost, m.RigidReserved, m.GroupLimited, m.GroupAllowed, m.GroupInUse, m.LastCycle, m.TokenExpiry, m.OtherWrites, m.QueuedAge, m.SetupFailed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// Queue is how many jobs of one class the policy plans queue, and the
// longest any has queued, as the policy ages it (policy.Job.Submit).
type Queue struct {
	Jobs    int           `json:"jobs"`
	Longest time.Duration `json:"longest_ns"`
}

// queues are the queued jobs of snapshot s per class, guaranteed and
// best-effort, both always present.
func queues(s *policy.Snapshot) map[string]Queue {
	out := map[string]Queue{slurm.ClassGuaranteed: {}, slurm.ClassBestEffort: {}}
	for _, j := range s.Jobs {
		if j.Running() {
			continue
		}
		c := slurm.ClassBestEffort
		if j.Guaranteed {
			c = slurm.ClassGuaranteed
		}
		q := out[c]
		q.Jobs++
		q.Longest = max(q.Longest, s.Now.Sub(j.Submit))
		out[c] = q
	}
	return out
}

// setQueuedAge sets rubick_queued_age_seconds from the queues.
func (m *Metrics) setQueuedAge(q map[string]Queue) {
	for c, q := range q {
		m.QueuedAge.WithLabelValues(c).Set(q.Longest.Seconds())
	}
}

// setGroups sets the group gauges to groups, dropping those of limits no
// longer listed.
func (m *Metrics) setGroups(groups []GroupUse) {
	m.GroupAllowed.Reset()
	m.GroupInUse.Reset()
	for _, g := range groups {
		for _, b := range g.Bounds() {
			m.GroupAllowed.WithLabelValues(b.Limit, b.What).Set(float64(b.Allowed))
			m.GroupInUse.WithLabelValues(b.Limit, b.What).Set(float64(b.InUse))
		}
	}
}
