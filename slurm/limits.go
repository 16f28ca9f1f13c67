package slurm

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Limits are the QOS and associations slurmdbd lists, and the partitions,
// for working out the per-job limits that apply to a job.
type Limits struct {
	QOS          map[string]QOS
	Associations []Association
	// Partitions holds each partition's per-job limits by name.
	Partitions map[string]Partition
	// BudgetTick is Budgets.Tick once budgets were added (WithBudgets):
	// up to that much of each running job's time is neither in a budget's
	// Spent nor in what is left of its time limit.
	BudgetTick time.Duration

	// AssocIndex is each association's position in Associations (the
	// first of its key), built by Indexed: a site may list tens of
	// thousands of associations, and PerJob and Groups look up several
	// for every job each cycle. Without it they scan Associations.
	AssocIndex map[AssocKey]int
}

// PartitionsByName keys parts by name, as Limits.Partitions holds them.
func PartitionsByName(parts []Partition) map[string]Partition {
	out := make(map[string]Partition, len(parts))
	for _, p := range parts {
		out[p.Name] = p
	}
	return out
}

// Indexed is l with AssocIndex built; the listing calls it. Associations
// must not be reordered or resized after it.
func (l Limits) Indexed() Limits {
	l.AssocIndex = make(map[AssocKey]int, len(l.Associations))
	for i, a := range l.Associations {
		if _, dup := l.AssocIndex[a.key()]; !dup {
			l.AssocIndex[a.key()] = i
		}
	}
	return l
}

// maxAccountDepth bounds the walk up the account tree, against a cycle in
// what slurmdbd reports.
const maxAccountDepth = 64

// PerJob is what applies to job j run in partition: for each TRES, the
// limit of the partition's QOS when that sets one, else of the job's QOS
// (the other way round when the job's QOS has OverPartQOS: QOS limits take
// precedence in Slurm), else the nearest association's on j's cluster
// that does: the user's for the partition (else the user's without one),
// then the account's and its parents' up the tree (an association
// inherits a limit it does not set); and no more nodes than the partition's MaxNodes, nor more time
// than its MaxTime (unless the job's QOS has the PartitionMaxNodes or
// PartitionTimeLimit flag), nor more CPUs or memory on a node than its
// MaxCPUsPerNode and MaxMemPerNode. A job that asks for one GPU type gets
// no more GPUs (on a node) than the limits on that type allow, found the
// same way.
func (l Limits) PerJob(j Job, partition string) JobLimits {
	out := l.tres(j, partition)
	p := l.Partitions[partition]
	q := l.QOS[j.QOS] // its flags lift these, not its partition's QOS's
	if !q.OverPartNodes {
		out.Nodes = tighter(out.Nodes, p.MaxNodesPerJob)
	}
	if !q.OverPartTime {
		out.Wall = tighter(out.Wall, p.MaxTime)
	}
	out.CPUsPerNode = tighter(out.CPUsPerNode, p.MaxCPUsPerNode)
	out.MemMBPerNode = tighter(out.MemMBPerNode, p.MaxMemPerNodeMB)
	return out
}

// MinPerJob is the least job j run in partition may have: the
// MinTRESPerJob of its QOS and its partition's QOS, each TRES from the
// first of them that sets it (as for PerJob), a minimum on the one GPU
// type j asks for counted in GPUs (Typed is left nil), and the
// partition's MinNodes unless j's QOS has the PartitionMinNodes flag; by
// names the limits that set any ("QOS normal MinTRESPerJob, partition
// gpu MinNodes"). unmet names a typed minimum j meets at no size, for it
// asks for no GPUs of that type alone: Slurm holds it whatever rubick
// does.
func (l Limits) MinPerJob(j Job, partition string) (m JobMins, by, unmet string) {
	var names []string
	typed := 0
	for _, q := range l.qosOf(j, partition) {
		from := q.Min
		if !from.read() {
			continue
		}
		names = append(names, q.Name)
		m.GPUs, m.Nodes, m.CPUs, m.MemMB = cmp.Or(m.GPUs, from.GPUs), cmp.Or(m.Nodes, from.Nodes), cmp.Or(m.CPUs, from.CPUs), cmp.Or(m.MemMB, from.MemMB)
		for _, t := range slices.Sorted(maps.Keys(from.Typed)) {
			n := from.Typed[t]
			switch {
			case len(j.GPUTypes) == 1 && j.GPUTypes[0] == t:
				typed = cmp.Or(typed, n)
			case unmet == "" && n > 0:
				unmet = fmt.Sprintf("QOS %s MinTRESPerJob=gres/gpu:%s=%d, and it asks for no %s GPUs alone", q.Name, t, n, t)
			}
		}
	}
	m.GPUs = max(m.GPUs, typed)
	if len(names) > 0 {
		by = "QOS " + strings.Join(names, " and QOS ") + " MinTRESPerJob"
	}
	if p := l.Partitions[partition]; p.MinNodesPerJob > 1 && !l.QOS[j.QOS].OverPartMinNodes {
		// Slurm holds a job to both.
		m.Nodes = max(m.Nodes, p.MinNodesPerJob)
		by = strings.TrimPrefix(by+", ", ", ") + "partition " + p.Name + " MinNodes"
	}
	return m, by, unmet
}

// tighter is the smaller of two bounds where 0 is none.
func tighter[T int | int64 | time.Duration](a, b T) T {
	if b > 0 && (a == 0 || b < a) {
		return b
	}
	return a
}

// tres is PerJob without the partition's own limits.
func (l Limits) tres(j Job, partition string) JobLimits {
	var out JobLimits
	var typed JobLimits // the limits on the one GPU type j asks for
	fill := func(perJob JobLimits, t TypedGPUs) {
		out.fill(perJob)
		typed.fill(t.perJobOf(j))
	}
	for _, q := range l.qosOf(j, partition) {
		fill(q.PerJob, q.Typed)
	}
	for _, a := range l.chain(j, partition) {
		fill(a.PerJob, a.Typed)
	}
	out.GPUs, out.GPUsPerNode, out.GPUMins = tighter(out.GPUs, typed.GPUs), tighter(out.GPUsPerNode, typed.GPUsPerNode), tighter(out.GPUMins, typed.GPUMins)
	return out
}

// perJobOf is what t allows one job of the one GPU type j asks for, in
// GPUs, GPUsPerNode and GPUMins; nothing for a job asking for no one type.
func (t TypedGPUs) perJobOf(j Job) JobLimits {
	if len(j.GPUTypes) != 1 {
		return JobLimits{}
	}
	g := j.GPUTypes[0]
	return JobLimits{GPUs: t.PerJob[g], GPUsPerNode: t.PerNode[g], GPUMins: int64(t.PerJobMins[g])}
}

// fill sets each bound l leaves unset (0) to from's.
func (l *JobLimits) fill(from JobLimits) {
	l.GPUs = cmp.Or(l.GPUs, from.GPUs)
	l.Nodes = cmp.Or(l.Nodes, from.Nodes)
	l.CPUs = cmp.Or(l.CPUs, from.CPUs)
	l.MemMB = cmp.Or(l.MemMB, from.MemMB)
	l.GPUsPerNode = cmp.Or(l.GPUsPerNode, from.GPUsPerNode)
	l.CPUsPerNode = cmp.Or(l.CPUsPerNode, from.CPUsPerNode)
	l.MemMBPerNode = cmp.Or(l.MemMBPerNode, from.MemMBPerNode)
	l.Wall = cmp.Or(l.Wall, from.Wall)
	l.GPUMins = cmp.Or(l.GPUMins, from.GPUMins)
	l.CPUMins = cmp.Or(l.CPUMins, from.CPUMins)
	l.MemMins = cmp.Or(l.MemMins, from.MemMins)
	l.NodeMins = cmp.Or(l.NodeMins, from.NodeMins)
	l.Billing = cmp.Or(l.Billing, from.Billing)
	l.BillingMins = cmp.Or(l.BillingMins, from.BillingMins)
	l.BillingPerNode = cmp.Or(l.BillingPerNode, from.BillingPerNode)
}

// qosOf lists the QOS whose limits apply to job j run in partition, first
// first: the partition's QOS, then the job's (the job's first when it has
// OverPartQOS); one QOS once, and only those slurmdbd lists.
func (l Limits) qosOf(j Job, partition string) []QOS {
	var out []QOS
	for _, name := range []string{l.Partitions[partition].QOS, j.QOS} {
		if q, ok := l.QOS[name]; ok && name != "" && !slices.ContainsFunc(out, func(o QOS) bool { return o.Name == name }) {
			out = append(out, q)
		}
	}
	if len(out) == 2 && out[1].OverPartQOS {
		out[0], out[1] = out[1], out[0]
	}
	return out
}

// chain lists the associations of job j run in partition, nearest first:
// the user's for the partition, else the user's without one (Slurm runs
// the job under the first of them that exists; both are the account's
// children, so the other's limits do not apply), then the account's and
// its parents' up the tree, on j's cluster; those that exist.
func (l Limits) chain(j Job, partition string) []Association {
	var out []Association
	find := func(account, user, partition string) bool {
		if l.AssocIndex != nil {
			i, ok := l.AssocIndex[AssocKey{j.Cluster, account, user, partition}]
			if ok {
				out = append(out, l.Associations[i])
			}
			return ok
		}
		for _, a := range l.Associations {
			if a.Cluster == j.Cluster && a.Account == account && a.User == user && a.Partition == partition {
				out = append(out, a)
				return true
			}
		}
		return false
	}
	if j.User != "" && (partition == "" || !find(j.Account, j.User, partition)) {
		find(j.Account, j.User, "")
	}
	account := j.Account
	for range maxAccountDepth {
		if !find(account, "", "") {
			break
		}
		parent := out[len(out)-1].Parent
		if parent == "" || parent == account {
			break
		}
		account = parent
	}
	return out
}

// Group is a limit on several jobs together: a QOS's GrpTRES,
// MaxTRESPerUser or MaxTRESPerAccount, or an association's GrpTRES, with
// the run-minute limits of the same (GrpTRESRunMins, MaxTRESRunMinsPU and
// PA); or a budget (GrpTRESMins). It is comparable, so usage can be summed
// per group.
type Group struct {
	// Limit names the limit and whose it is, as an admin would look it up.
	Limit string
	GroupLimits
	// Budget marks a GrpTRESMins limit: its run-minute fields bound what
	// its jobs have used (Spent) plus what its running jobs may still use
	// (GPUs times the minutes left of their time limits), as Slurm's
	// AccountingStorageEnforce=safe checks a start.
	Budget bool
	Spent  GroupLimits
	// GPUType is the type of a limit on one type's GPUs (GrpTRES
	// gres/gpu:h100=4), whose GPUs alone are set: every job's GPUs of the
	// type count against it, and it bounds only the jobs that ask for the
	// type (Binds).
	GPUType string
}

// Binds reports whether g holds job j back: any group but a typed one,
// and that one when j asks for its type alone.
func (g Group) Binds(j Job) bool {
	return g.GPUType == "" || len(j.GPUTypes) == 1 && j.GPUTypes[0] == g.GPUType
}

// NameOf names the limit of g that sets amount a as an admin sets it: its
// run-minute limit (RunMinsName), its job count's (JobsName) or Limit.
func (g Group) NameOf(a GroupAmount) string {
	switch {
	case a.RunMins:
		return g.RunMinsName()
	case a.Jobs:
		return g.JobsName()
	}
	return g.Limit
}

// JobsName names g's limit on running jobs as an admin sets it: GrpJobs,
// MaxJobsPerUser or MaxJobsPerAccount where Limit names the GrpTRES,
// MaxTRESPerUser or MaxTRESPerAccount of the same QOS or association; an
// association's MaxJobs its own name; none for a limit on one GPU type.
func (g Group) JobsName() string {
	if g.GPUType != "" {
		return ""
	}
	return strings.NewReplacer("GrpTRES", "GrpJobs", "MaxTRESPerUser", "MaxJobsPerUser",
		"MaxTRESPerAccount", "MaxJobsPerAccount").Replace(g.Limit)
}

// RunMinsName names g's run-minute limit as an admin sets it:
// GrpTRESRunMins, MaxTRESRunMinsPU or MaxTRESRunMinsPA where Limit names
// the GrpTRES, MaxTRESPerUser or MaxTRESPerAccount of the same QOS or
// association; a budget's own name (GrpTRESMins).
func (g Group) RunMinsName() string {
	if g.Budget {
		return g.Limit
	}
	return strings.NewReplacer("GrpTRES", "GrpTRESRunMins", "MaxTRESPerUser", "MaxTRESRunMinsPU",
		"MaxTRESPerAccount", "MaxTRESRunMinsPA").Replace(g.Limit)
}

// MinsWhat is what g's run-minute amounts count, after their unit
// ("GPU-minutes to run"): a budget's count what its jobs used as well.
func (g Group) MinsWhat() string {
	if g.Budget {
		return "used or to run"
	}
	return "to run"
}

// Groups lists the group limits on GPUs, CPUs, memory or run-minutes, and
// the budgets (GrpTRESMins), job j counts against when it runs in
// partition: its QOS's and its
// partition's QOS's (GrpTRES, and MaxTRESPerUser and MaxTRESPerAccount for
// its user and account; one QOS's limits count the jobs it applies to in
// either role together, as in Slurm), and the
// GrpTRES of its associations, the user's (for the partition, else without
// one) and its account's and their parents' up the tree. Slurm may skip an
// association's where the QOS sets the same kind of limit; counting every
// one is the strictest reading. Each limit on one GPU type (and each
// budget of one) is a group of its own, named after the limit with the
// type ("QOS normal GrpTRES gres/gpu:h100"), which every job counts
// against and only a job asking for the type is held to (Group.Binds).
func (l Limits) Groups(j Job, partition string) []Group {
	var out []Group
	add := func(g GroupLimits, format string, args ...any) {
		if g != (GroupLimits{}) {
			out = append(out, Group{Limit: fmt.Sprintf(format, args...), GroupLimits: g})
		}
	}
	budget := func(b Budget, format string, args ...any) {
		name := fmt.Sprintf(format, args...)
		if b.bounds() {
			out = append(out, Group{Limit: name, GroupLimits: b.Limit, Budget: true, Spent: b.Spent})
		}
		for _, t := range slices.Sorted(maps.Keys(b.Typed)) {
			tb := b.Typed[t]
			out = append(out, Group{Limit: name + " gres/gpu:" + t, GroupLimits: tb.Limit, Budget: true, Spent: tb.Spent, GPUType: t})
		}
	}
	// typed adds a group per GPU type that gpus or runMins (GPU-minutes)
	// limit.
	typed := func(gpus, runMins map[string]int, format string, args ...any) {
		types := slices.Collect(maps.Keys(gpus))
		for t := range runMins {
			if _, ok := gpus[t]; !ok {
				types = append(types, t)
			}
		}
		slices.Sort(types)
		for _, t := range types {
			out = append(out, Group{Limit: fmt.Sprintf(format, args...) + " gres/gpu:" + t,
				GroupLimits: GroupLimits{GPUs: gpus[t], GPURunMins: int64(runMins[t])}, GPUType: t})
		}
	}
	for _, q := range l.qosOf(j, partition) {
		add(q.Grp, "QOS %s GrpTRES", q.Name)
		add(q.PerUser, "QOS %s MaxTRESPerUser (user %s)", q.Name, j.User)
		add(q.PerAccount, "QOS %s MaxTRESPerAccount (account %s)", q.Name, j.Account)
		budget(q.Budget, "QOS %s GrpTRESMins", q.Name)
		typed(q.Typed.Grp, q.Typed.GrpRunMins, "QOS %s GrpTRES", q.Name)
		typed(q.Typed.PerUser, q.Typed.PerUserRunMins, "QOS %s MaxTRESPerUser (user %s)", q.Name, j.User)
		typed(q.Typed.PerAccount, q.Typed.PerAccountRunMins, "QOS %s MaxTRESPerAccount (account %s)", q.Name, j.Account)
	}
	chain := l.chain(j, partition)
	for _, a := range chain {
		add(a.Grp, "association %s GrpTRES", a.path())
		budget(a.Budget, "association %s GrpTRESMins", a.path())
		typed(a.Typed.Grp, a.Typed.GrpRunMins, "association %s GrpTRES", a.path())
	}
	if len(chain) > 0 && chain[0].MaxJobs > 0 {
		// Slurm holds the job's own association to it, which counts its
		// own jobs alone (its children's too for an account's).
		add(GroupLimits{Jobs: chain[0].MaxJobs}, "association %s MaxJobs", chain[0].path())
	}
	return out
}

// ZeroLimit is a limit of a QOS or an association set to 0 on what rubick
// plans with: a group limit on GPUs, CPUs, memory, billing or nodes, their
// minutes, or running jobs ("GrpJobs=0", "GrpTRES=gres/gpu=0"), or a
// per-job one on the same ("MaxTRESPerJob=gres/gpu=0", "MaxWall=0"); or a
// partition's MaxNodes or MaxTime set to 0 (Partition.Zero). Slurm
// starts no job it applies to until it is raised (sacctmgr's way of
// stopping an account's or a user's jobs), where a limit rubick reads as 0
// is none.
type ZeroLimit struct {
	// Name is the limit as an admin sets it.
	Name string
	// GPUType is the type of a limit on one type's GPUs, which applies to
	// the jobs that ask for the type alone (Group.Binds).
	GPUType string
	// Own marks an association's MaxJobs, which applies to its own jobs
	// alone (Groups).
	Own bool
	// PerJob marks a per-job limit: the one JobLimits bound it sets is
	// nonzero (GPUs, GPUsPerNode or GPUMins for one of GPUType). Slurm
	// holds a job to the first QOS, then the nearest association, that
	// sets that bound (PerJob), so one behind a bound set nearer applies
	// to nothing.
	PerJob JobLimits
}

// Zero names the first limit set to 0 (ZeroLimit) that job j run in
// partition counts against, with whose it is ("association physics GrpJobs=0"):
// its partition's MaxNodes or MaxTime (unless j's QOS has the
// PartitionMaxNodes or PartitionTimeLimit flag, as PerJob reads them),
// its QOS's and its partition's QOS's, then its associations' (as Groups
// lists them); "" when none does. A per-job one of a QOS or association
// counts only where no QOS or association ahead of it in PerJob's order
// sets the same bound. Slurm starts no such job until the limit is raised.
// perJob reports a limit on each job alone (ZeroLimit.PerJob, and the
// partition's), not on a group's jobs together.
func (l Limits) Zero(j Job, partition string) (name string, perJob bool) {
	q := l.QOS[j.QOS]
	for _, z := range l.Partitions[partition].Zero {
		if z.PerJob.Nodes > 0 && !q.OverPartNodes || z.PerJob.Wall > 0 && !q.OverPartTime {
			return "partition " + partition + " " + z.Name, true
		}
	}
	var set, typed JobLimits // the per-job bounds set ahead, as tres reads them
	applies := func(z ZeroLimit) bool {
		if z.GPUType != "" && (len(j.GPUTypes) != 1 || j.GPUTypes[0] != z.GPUType) {
			return false
		}
		if z.PerJob == (JobLimits{}) {
			return true
		}
		ahead := set
		if z.GPUType != "" {
			ahead = typed
		}
		probe := ahead
		probe.fill(z.PerJob)
		return probe != ahead // not set ahead
	}
	for _, q := range l.qosOf(j, partition) {
		for _, z := range q.Zero {
			if applies(z) {
				return "QOS " + q.Name + " " + z.Name, z.PerJob != (JobLimits{})
			}
		}
		set.fill(q.PerJob)
		typed.fill(q.Typed.perJobOf(j))
	}
	for i, a := range l.chain(j, partition) {
		for _, z := range a.Zero {
			if applies(z) && (!z.Own || i == 0) {
				return "association " + a.path() + " " + z.Name, z.PerJob != (JobLimits{})
			}
		}
		set.fill(a.PerJob)
		typed.fill(a.Typed.perJobOf(j))
	}
	return "", false
}

// Unread lists the limits the listing sets on what rubick does not plan
// with, each with whose it is ("QOS normal GrpTRES=energy=5"): the
// QOS's by name, then the associations' in listing order.
func (l Limits) Unread() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(l.QOS)) {
		for _, u := range l.QOS[name].Unread {
			out = append(out, "QOS "+name+" "+u)
		}
	}
	for _, a := range l.Associations {
		for _, u := range a.Unread {
			out = append(out, "association "+a.path()+" "+u)
		}
	}
	return out
}

// key is the association's AssocKey, as slurmctld lists it.
func (a Association) key() AssocKey {
	return AssocKey{a.Cluster, a.Account, a.User, a.Partition}
}

// path names the association as account[/user[/partition]].
func (a Association) path() string {
	p := a.Account
	if a.User != "" {
		p += "/" + a.User
		if a.Partition != "" {
			p += "/" + a.Partition
		}
	}
	return p
}
