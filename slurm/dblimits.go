package slurm

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The QOS and association lists of slurmdbd, as slurmrestd's database
// plugin writes them in v0.0.38 (22.05) and v0.0.41 (24.11): the same
// fields, with numbers either plain (22.05) or {set, infinite, number}
// (24.11), which flexInt reads alike. Only what rubick uses is decoded:
// 22.05 sends ids as numbers where its spec says strings, and names the
// QOS list "QOS"; the shipped 24.11 specification was served without the
// database plugin, so its generated client has none of these paths.
type (
	dbQOSList struct {
		QOS   []dbQOS `json:"qos"`
		QOS38 []dbQOS `json:"QOS"`
	}
	dbQOS struct {
		Name   *string   `json:"name"`
		Flags  *[]string `json:"flags"`
		Limits *struct {
			Max *dbMax `json:"max"`
			// Min holds MinTRESPerJob under tres.per.job (22.05 and
			// 24.11 labs).
			Min *struct {
				Tres *struct {
					Per *struct {
						Job *[]dbTRES `json:"job"`
					} `json:"per"`
				} `json:"tres"`
			} `json:"min"`
		} `json:"limits"`
	}
	dbAssocList struct {
		Associations []struct {
			Cluster       *string `json:"cluster"`
			Account       *string `json:"account"`
			User          *string `json:"user"`
			Partition     *string `json:"partition"`
			ParentAccount *string `json:"parent_account"`
			Max           *dbMax  `json:"max"`
		} `json:"associations"`
	}
	// dbMax holds the limits of a QOS or an association: TRES per job,
	// for all jobs together (total: GrpTRES) and, for a QOS, per user and
	// per account; and the time limit in minutes, which a QOS keeps under
	// wall_clock.per.job and an association under jobs.per.wall_clock.
	// TRES-minutes: per job (MaxTRESMinsPerJob) under minutes.per.job for
	// both; running jobs' together (GrpTRESRunMins) under minutes.per.qos
	// for a QOS and group.active for an association; a QOS's per user and
	// per account (MaxTRESRunMinsPU, PA) under minutes.per.user and
	// account (read off the 22.05 lab with each set in turn). An
	// association's GrpTRESMins is under group.minutes (22.05 and 24.11);
	// a QOS's is in neither version's listing. Running jobs: a QOS's
	// GrpJobs under active_jobs.count, MaxJobsPU and PA under
	// jobs.active_jobs.per.user and account; an association's GrpJobs
	// under jobs.per.count, MaxJobs under jobs.active (both labs).
	dbMax struct {
		Tres *struct {
			Total *[]dbTRES `json:"total"`
			Per   *struct {
				Job     *[]dbTRES `json:"job"`
				Node    *[]dbTRES `json:"node"`
				User    *[]dbTRES `json:"user"`
				Account *[]dbTRES `json:"account"`
			} `json:"per"`
			Minutes *struct {
				Per *dbMinutesPer `json:"per"`
			} `json:"minutes"`
			Group *struct {
				Active  *[]dbTRES `json:"active"`
				Minutes *[]dbTRES `json:"minutes"`
			} `json:"group"`
		} `json:"tres"`
		WallClock *struct {
			Per *struct {
				Job flexInt `json:"job"`
			} `json:"per"`
		} `json:"wall_clock"`
		Jobs *struct {
			Per *struct {
				WallClock flexInt `json:"wall_clock"`
				Count     flexInt `json:"count"`
			} `json:"per"`
			Active     flexInt `json:"active"`
			ActiveJobs *struct {
				Per *struct {
					User    flexInt `json:"user"`
					Account flexInt `json:"account"`
				} `json:"per"`
			} `json:"active_jobs"`
		} `json:"jobs"`
		ActiveJobs *struct {
			Count flexInt `json:"count"`
		} `json:"active_jobs"`
	}
	dbMinutesPer struct {
		Job     *[]dbTRES `json:"job"`
		QOS     *[]dbTRES `json:"qos"`
		User    *[]dbTRES `json:"user"`
		Account *[]dbTRES `json:"account"`
	}
	dbTRES struct {
		Type  string `json:"type"`
		Name  string `json:"name"`
		Count int    `json:"count"`
	}
)

func (l dbQOSList) convert() []QOS {
	var out []QOS
	for _, q := range append(l.QOS, l.QOS38...) {
		o := QOS{Name: deref(q.Name), OverPartQOS: slices.Contains(deref(q.Flags), "OVERRIDE_PARTITION_QOS"),
			OverPartTime: slices.Contains(deref(q.Flags), "PARTITION_TIME_LIMIT"), OverPartNodes: slices.Contains(deref(q.Flags), "PARTITION_MAXIMUM_NODE"),
			OverPartMinNodes: slices.Contains(deref(q.Flags), "PARTITION_MINIMUM_NODE")}
		if q.Limits != nil {
			m := q.Limits.Max
			o.PerJob, o.Grp, o.Typed = m.perJob(), m.grp(), m.typed()
			if m != nil && m.Tres != nil && m.Tres.Per != nil {
				o.PerUser, o.PerAccount = groupIn(m.Tres.Per.User), groupIn(m.Tres.Per.Account)
			}
			o.Unread = m.unread(true)
			if mn := q.Limits.Min; mn != nil && mn.Tres != nil && mn.Tres.Per != nil {
				o.Min = minsIn(mn.Tres.Per.Job)
				o.Unread = append(o.Unread, unreadIn("MinTRESPerJob", mn.Tres.Per.Job, func(one *[]dbTRES) bool { return minsIn(one).read() })...)
			}
			o.Zero = m.zeros(true)
			if m != nil && m.ActiveJobs != nil {
				o.Grp.Jobs = jobCount(m.ActiveJobs.Count)
				o.Zero = zeroJobs(o.Zero, "GrpJobs", m.ActiveJobs.Count, false)
			}
			if m != nil && m.Jobs != nil && m.Jobs.ActiveJobs != nil && m.Jobs.ActiveJobs.Per != nil {
				o.PerUser.Jobs, o.PerAccount.Jobs = jobCount(m.Jobs.ActiveJobs.Per.User), jobCount(m.Jobs.ActiveJobs.Per.Account)
				o.Zero = zeroJobs(o.Zero, "MaxJobsPerUser", m.Jobs.ActiveJobs.Per.User, false)
				o.Zero = zeroJobs(o.Zero, "MaxJobsPerAccount", m.Jobs.ActiveJobs.Per.Account, false)
			}
			if mp := m.minutesPer(); mp != nil {
				o.Grp.setRunMins(runMinsIn(mp.QOS))
				o.PerUser.setRunMins(runMinsIn(mp.User))
				o.PerAccount.setRunMins(runMinsIn(mp.Account))
			}
		}
		out = append(out, o)
	}
	return out
}

func (l dbAssocList) convert() []Association {
	var out []Association
	for _, a := range l.Associations {
		o := Association{Cluster: deref(a.Cluster), Account: deref(a.Account), User: deref(a.User),
			Partition: deref(a.Partition), Parent: deref(a.ParentAccount), PerJob: a.Max.perJob(), Grp: a.Max.grp(), Typed: a.Max.typed(),
			Unread: a.Max.unread(false), Zero: a.Max.zeros(false)}
		if m := a.Max; m != nil && m.Jobs != nil {
			o.MaxJobs = jobCount(m.Jobs.Active)
			o.Zero = zeroJobs(o.Zero, "MaxJobs", m.Jobs.Active, true)
			if m.Jobs.Per != nil {
				o.Grp.Jobs = jobCount(m.Jobs.Per.Count)
				o.Zero = zeroJobs(o.Zero, "GrpJobs", m.Jobs.Per.Count, false)
			}
		}
		if m := a.Max; m != nil && m.Tres != nil && m.Tres.Group != nil {
			o.Grp.setRunMins(runMinsIn(m.Tres.Group.Active))
			if l := m.Tres.Group.Minutes; l != nil {
				o.BudgetListed = true
				o.ListedBudget = runMinsIn(l)
			}
		}
		out = append(out, o)
	}
	return out
}

// minutesPer is the TRES-minutes limits of m; nil where it has none.
func (m *dbMax) minutesPer() *dbMinutesPer {
	if m == nil || m.Tres == nil || m.Tres.Minutes == nil {
		return nil
	}
	return m.Tres.Minutes.Per
}

// unread lists the TRES limits of m that rubick does not plan with, as an
// admin sets them ("GrpTRES=energy=5"); those of a QOS (qos) or an
// association, whose lists differ in name.
func (m *dbMax) unread(qos bool) []string {
	if m == nil || m.Tres == nil {
		return nil
	}
	var out []string
	// typed: the role's typed GPU limits are read (TypedGPUs).
	add := func(limit string, l *[]dbTRES, typed bool) {
		out = append(out, unreadIn(limit, l, func(one *[]dbTRES) bool {
			return groupIn(one) != (GroupLimits{}) || typed && typedIn(one) != nil
		})...)
	}
	tr := m.Tres
	add("GrpTRES", tr.Total, true)
	if tr.Per != nil {
		add("MaxTRESPerJob", tr.Per.Job, true)
		add("MaxTRESPerNode", tr.Per.Node, true)
		add("MaxTRESPerUser", tr.Per.User, qos)
		add("MaxTRESPerAccount", tr.Per.Account, qos)
	}
	if mp := m.minutesPer(); mp != nil {
		add("MaxTRESMinsPerJob", mp.Job, true)
		add("GrpTRESRunMins", mp.QOS, true)
		add("MaxTRESRunMinsPU", mp.User, true)
		add("MaxTRESRunMinsPA", mp.Account, true)
	}
	if !qos && tr.Group != nil {
		add("GrpTRESRunMins", tr.Group.Active, true)
		add("GrpTRESMins", tr.Group.Minutes, true)
	}
	return out
}

// zeros lists the limits of m (a QOS's with qos) set to 0 on what rubick
// plans with: the group limits on a TRES ("GrpTRES=gres/gpu=0"), in the
// order unread lists limits, then the per-job ones (MaxTRESPerJob,
// MaxTRESPerNode, MaxTRESMinsPerJob, MaxWall). perJob, jobCount and
// groupIn read such a limit as none, which it is not: Slurm starts no job
// it applies to until it is raised (a job asking for any GPUs is above
// MaxTRESPerJob=gres/gpu=0, any time limit above MaxWall=0).
func (m *dbMax) zeros(qos bool) []ZeroLimit {
	if m == nil {
		return nil
	}
	var out []ZeroLimit
	// mark is nil for a group limit, and reads a per-job one's bound
	// (ZeroLimit.PerJob) off a list of its one TRES.
	add := func(limit string, l *[]dbTRES, mark func(*[]dbTRES) JobLimits) {
		for _, t := range deref(l) {
			if t.Count != 0 {
				continue
			}
			z := ZeroLimit{Name: fmt.Sprintf("%s=%s=0", limit, strings.TrimSuffix(t.Type+"/"+t.Name, "/"))}
			one := dbTRES{Type: t.Type, Name: t.Name, Count: 1}
			if gpuType, ok := strings.CutPrefix(t.Name, "gpu:"); t.Type == "gres" && ok && gpuType != "" {
				z.GPUType, one.Name = gpuType, "gpu" // its bound is on the type's GPUs
			}
			switch {
			case mark != nil:
				if z.PerJob = mark(&[]dbTRES{one}); z.PerJob == (JobLimits{}) {
					continue // a TRES rubick does not plan with in this role
				}
			case z.GPUType == "" && groupIn(&[]dbTRES{one}) == (GroupLimits{}):
				continue // a TRES rubick does not plan with
			}
			out = append(out, z)
		}
	}
	if tr := m.Tres; tr != nil {
		add("GrpTRES", tr.Total, nil)
		if tr.Per != nil && qos {
			add("MaxTRESPerUser", tr.Per.User, nil)
			add("MaxTRESPerAccount", tr.Per.Account, nil)
		}
		if mp := m.minutesPer(); mp != nil {
			add("GrpTRESRunMins", mp.QOS, nil)
			add("MaxTRESRunMinsPU", mp.User, nil)
			add("MaxTRESRunMinsPA", mp.Account, nil)
		}
		if !qos && tr.Group != nil {
			add("GrpTRESRunMins", tr.Group.Active, nil)
			add("GrpTRESMins", tr.Group.Minutes, nil)
		}
		if tr.Per != nil {
			add("MaxTRESPerJob", tr.Per.Job, jobTRESIn)
			add("MaxTRESPerNode", tr.Per.Node, nodeTRESIn)
		}
		if mp := m.minutesPer(); mp != nil {
			add("MaxTRESMinsPerJob", mp.Job, jobMinsIn)
		}
	}
	if w := m.wall(); w.Set && !w.Infinite && w.Value == 0 {
		out = append(out, ZeroLimit{Name: "MaxWall=0", PerJob: JobLimits{Wall: time.Minute}})
	}
	return out
}

// wall is m's time limit in minutes (MaxWall): a QOS's wall_clock.per.job,
// else an association's jobs.per.wall_clock.
func (m *dbMax) wall() flexInt {
	if m.WallClock != nil && m.WallClock.Per != nil && m.WallClock.Per.Job.Set {
		return m.WallClock.Per.Job
	}
	if m.Jobs != nil && m.Jobs.Per != nil {
		return m.Jobs.Per.WallClock
	}
	return flexInt{}
}

// zeroJobs is zs with limit added when f, a job count, is set to 0; own
// marks a limit on the association's own jobs (MaxJobs).
func zeroJobs(zs []ZeroLimit, limit string, f flexInt, own bool) []ZeroLimit {
	if f.Set && !f.Infinite && f.Value == 0 {
		zs = append(zs, ZeroLimit{Name: limit + "=0", Own: own})
	}
	return zs
}

// unreadIn lists the entries of l, limit's TRES, that rubick does not plan
// with, as an admin sets them ("GrpTRES=energy=5"): those reads, given a
// list of the one TRES, says are not read. What is read is planned with,
// so the TRES are named once.
func unreadIn(limit string, l *[]dbTRES, reads func(one *[]dbTRES) bool) []string {
	var out []string
	for _, t := range deref(l) {
		if t.Count < 0 || reads(&[]dbTRES{{Type: t.Type, Name: t.Name, Count: 1}}) {
			continue
		}
		out = append(out, fmt.Sprintf("%s=%s=%d", limit, strings.TrimSuffix(t.Type+"/"+t.Name, "/"), t.Count))
	}
	return out
}

// minsIn reads gres/gpu, node, cpu and mem (MiB), and typed GPUs, off a
// MinTRESPerJob list.
func minsIn(l *[]dbTRES) JobMins {
	g := groupIn(l)
	return JobMins{GPUs: g.GPUs, Nodes: g.Nodes, CPUs: g.CPUs, MemMB: g.MemMB, Typed: typedIn(l)}
}

// read reports whether m sets any minimum.
func (m JobMins) read() bool {
	return m.GPUs > 0 || m.Nodes > 0 || m.CPUs > 0 || m.MemMB > 0 || len(m.Typed) > 0
}

// jobCount is a job count limit; 0 where none is set.
func jobCount(f flexInt) int {
	if !f.Set || f.Infinite {
		return 0
	}
	return int(max(f.Value, 0))
}

// runMinsIn reads gres/gpu, cpu, mem (MiB-minutes), billing and node off a
// TRES-minutes list into the run-minute fields; 0 where it has none.
func runMinsIn(l *[]dbTRES) GroupLimits {
	g := groupIn(l)
	return GroupLimits{GPURunMins: int64(g.GPUs), CPURunMins: int64(g.CPUs), MemRunMins: g.MemMB, BillingRunMins: g.Billing,
		NodeRunMins: int64(g.Nodes)}
}

// setRunMins sets l's run-minute fields to m's, leaving the others.
func (l *GroupLimits) setRunMins(m GroupLimits) {
	l.GPURunMins, l.CPURunMins, l.MemRunMins, l.BillingRunMins = m.GPURunMins, m.CPURunMins, m.MemRunMins, m.BillingRunMins
	l.NodeRunMins = m.NodeRunMins
}

// typed reads the typed GPU limits of m: GrpTRES, MaxTRESPerJob,
// MaxTRESPerNode, MaxTRESPerUser and MaxTRESPerAccount, and the
// GPU-minutes of MaxTRESMinsPerJob, GrpTRESRunMins (a QOS's, or an
// association's group.active), MaxTRESRunMinsPU and MaxTRESRunMinsPA.
func (m *dbMax) typed() TypedGPUs {
	if m == nil || m.Tres == nil {
		return TypedGPUs{}
	}
	out := TypedGPUs{Grp: typedIn(m.Tres.Total)}
	if p := m.Tres.Per; p != nil {
		out.PerJob, out.PerNode, out.PerUser, out.PerAccount = typedIn(p.Job), typedIn(p.Node), typedIn(p.User), typedIn(p.Account)
	}
	if mp := m.minutesPer(); mp != nil {
		out.PerJobMins, out.GrpRunMins = typedIn(mp.Job), typedIn(mp.QOS)
		out.PerUserRunMins, out.PerAccountRunMins = typedIn(mp.User), typedIn(mp.Account)
	}
	if g := m.Tres.Group; g != nil {
		if g.Active != nil {
			out.GrpRunMins = typedIn(g.Active)
		}
		out.Budget = typedIn(g.Minutes)
	}
	return out
}

// typedIn reads the typed GPU entries of a TRES list (gres/gpu:h100=4),
// by type; nil where it has none.
func typedIn(l *[]dbTRES) map[string]int {
	var out map[string]int
	for _, t := range deref(l) {
		gpuType, ok := strings.CutPrefix(t.Name, "gpu:")
		if t.Type != "gres" || !ok || gpuType == "" || t.Count < 0 {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[gpuType] = t.Count
	}
	return out
}

// grp reads the limits on all jobs together (GrpTRES).
func (m *dbMax) grp() GroupLimits {
	if m == nil || m.Tres == nil {
		return GroupLimits{}
	}
	return groupIn(m.Tres.Total)
}

// groupIn reads gres/gpu, cpu, mem (MiB, as slurmdbd counts it), billing
// and node off a TRES list; 0 where it has none.
func groupIn(l *[]dbTRES) GroupLimits {
	var out GroupLimits
	for _, t := range deref(l) {
		switch t.Type + "/" + t.Name {
		case "gres/gpu":
			out.GPUs = max(t.Count, 0)
		case "cpu/":
			out.CPUs = max(t.Count, 0)
		case "mem/":
			out.MemMB = int64(max(t.Count, 0))
		case "billing/":
			out.Billing = int64(max(t.Count, 0))
		case "node/":
			out.Nodes = max(t.Count, 0)
		}
	}
	return out
}

// perJob reads gres/gpu, node, cpu, mem and billing off the per-job TRES
// limits, gres/gpu, cpu, mem and billing off the per-node ones
// (MaxTRESPerNode), gres/gpu, cpu, mem, billing and node off the per-job
// TRES-minutes (MaxTRESMinsPerJob), and the time limit.
func (m *dbMax) perJob() JobLimits {
	var out JobLimits
	if m == nil {
		return out
	}
	if m.WallClock != nil && m.WallClock.Per != nil {
		out.Wall = minutes(m.WallClock.Per.Job.Value)
	}
	if m.Jobs != nil && m.Jobs.Per != nil {
		out.Wall = cmp.Or(out.Wall, minutes(m.Jobs.Per.WallClock.Value))
	}
	if mp := m.minutesPer(); mp != nil {
		out.fill(jobMinsIn(mp.Job))
	}
	if m.Tres == nil || m.Tres.Per == nil {
		return out
	}
	out.fill(jobTRESIn(m.Tres.Per.Job))
	out.fill(nodeTRESIn(m.Tres.Per.Node))
	return out
}

// jobTRESIn reads gres/gpu, node, cpu, mem and billing off a
// MaxTRESPerJob list: the TRES a group limit reads, for one job.
func jobTRESIn(l *[]dbTRES) JobLimits {
	g := groupIn(l)
	return JobLimits{GPUs: g.GPUs, Nodes: g.Nodes, CPUs: g.CPUs, MemMB: g.MemMB, Billing: g.Billing}
}

// nodeTRESIn reads gres/gpu, cpu, mem and billing off a MaxTRESPerNode
// list: the same TRES, on each node.
func nodeTRESIn(l *[]dbTRES) JobLimits {
	g := groupIn(l)
	return JobLimits{GPUsPerNode: g.GPUs, CPUsPerNode: g.CPUs, MemMBPerNode: g.MemMB, BillingPerNode: g.Billing}
}

// jobMinsIn reads gres/gpu, cpu, mem, billing and node off a
// MaxTRESMinsPerJob list.
func jobMinsIn(l *[]dbTRES) JobLimits {
	m := runMinsIn(l)
	return JobLimits{GPUMins: m.GPURunMins, CPUMins: m.CPURunMins, MemMins: m.MemRunMins, BillingMins: m.BillingRunMins, NodeMins: m.NodeRunMins}
}
