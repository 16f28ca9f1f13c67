package slurm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Budget is a GrpTRESMins limit of a QOS or an association: the GPU-, CPU-,
// memory-, billing- and node-minutes its jobs (an association's children's included) may
// use in all, in Limit's run-minute fields (0: no bound), and what they
// have used, in Spent's, as slurmctld counts it: decayed by
// PriorityDecayHalfLife and reset by PriorityUsageResetPeriod, and only
// counted with priority/multifactor.
type Budget struct {
	Limit, Spent GroupLimits
	// Typed are its budgets of GPU-minutes of one type
	// (GrpTRESMins=gres/gpu:h100=5000), by type, in Limit's and Spent's
	// GPURunMins; nil where none is set.
	Typed map[string]Budget
	// Zero lists a QOS's entries set to 0 ("GrpTRESMins=gres/gpu=0"),
	// which Limit reads as none: Slurm starts no job under one, whatever
	// was used (its usage is never below 0).
	Zero []ZeroLimit
}

// IsSet reports whether b bounds anything above 0.
func (b Budget) IsSet() bool {
	return b.bounds() || len(b.Typed) > 0
}

// bounds reports whether b bounds anything of any GPU type.
func (b Budget) bounds() bool {
	return b.Limit.GPURunMins > 0 || b.Limit.CPURunMins > 0 || b.Limit.MemRunMins > 0 || b.Limit.BillingRunMins > 0 ||
		b.Limit.NodeRunMins > 0
}

// AssocKey names an association as slurmctld lists it.
type AssocKey struct {
	Cluster, Account, User, Partition string
}

// Budgets are the GrpTRESMins limits slurmctld holds, with their usage:
// per QOS name and per association. Only the QOS and associations that set
// one are listed.
type Budgets struct {
	QOS   map[string]Budget
	Assoc map[AssocKey]Budget
	// Tick is PriorityCalcPeriod: how often slurmctld adds what running
	// jobs used since the last tick to the usage.
	Tick time.Duration
	// FairShare is every listed association's fair-share factor.
	FairShare FairShares
	// FairShareUnread names the first association whose factor did not
	// read as a number in 0..1 (slurmctld prints nan where classic fair
	// share divides by zero shares); such an association is left out of
	// FairShare, and the budgets stand.
	FairShareUnread string
	// SShareErr says why the factors are scontrol's two decimals, not
	// sshare's six: sshare failed; nil when it was not asked.
	SShareErr error
	// QOSPriority is every listed QOS's Priority, by name; AssocPriority
	// every listed association's (inherited where it sets none).
	QOSPriority   map[string]int64
	AssocPriority map[AssocKey]int64
	// Priority is the multifactor priority configuration, read with the
	// budgets; PriorityErr says why it could not be, and Priority is
	// then the zero value.
	Priority    PriorityConfig
	PriorityErr error
}

// FairShares are the fair-share factors slurmctld computed for its
// associations (0..1, higher: further below its share of the cluster), as
// priority/multifactor ranks them (with Fair Tree, on user associations).
// slurmctld prints them to two decimals; with priority/basic they are not
// computed and mean nothing.
type FairShares map[AssocKey]float64

// Of is the factor of a job's association: its user's in the partition,
// else its user's in the account; false when neither is listed.
func (f FairShares) Of(cluster, account, user, partition string) (float64, bool) {
	if v, ok := f[AssocKey{cluster, account, user, partition}]; ok && partition != "" {
		return v, true
	}
	v, ok := f[AssocKey{cluster, account, user, ""}]
	return v, ok
}

// defaultTick is Slurm's default PriorityCalcPeriod.
const defaultTick = 5 * time.Minute

// BudgetScope is what a reading of the budgets asks slurmctld for: every
// QOS, and the associations of Accounts (their users' included), or of
// every account with All. A site has a handful of QOS but may have tens
// of thousands of associations, which slurmctld lists under its
// association lock; the few that carry a budget are all rubick needs.
type BudgetScope struct {
	All      bool
	Accounts []string
}

// maxScopeArg bounds the accounts= argument, far below Linux's 128 KiB
// per argument; a longer list reads every association instead.
const maxScopeArg = 32 << 10

// args is the scontrol argv after the command's path.
func (s BudgetScope) args() []string {
	list := strings.Join(s.Accounts, ",")
	switch {
	case s.All || len(list) > maxScopeArg:
		return []string{"show", "assoc_mgr", "flags=assoc,qos"}
	case len(s.Accounts) == 0:
		return []string{"show", "assoc_mgr", "flags=qos"}
	default:
		return []string{"show", "assoc_mgr", "flags=assoc,qos", "accounts=" + list}
	}
}

// With is s widened to the associations of accounts too.
func (s BudgetScope) With(accounts ...string) BudgetScope {
	if s.All || len(accounts) == 0 {
		return s
	}
	set := map[string]bool{}
	for _, a := range append(slices.Clone(s.Accounts), accounts...) {
		if a != "" {
			set[a] = true
		}
	}
	return BudgetScope{Accounts: slices.Sorted(maps.Keys(set))}
}

// Reads reports whether reading s reads account's associations. Accounts
// is sorted, as With and Limits.BudgetScope give it.
func (s BudgetScope) Reads(account string) bool {
	_, found := slices.BinarySearch(s.Accounts, account)
	return s.All || found
}

// Covers reports whether reading s reads every association o does.
func (s BudgetScope) Covers(o BudgetScope) bool {
	if o.All {
		return s.All
	}
	for _, a := range o.Accounts {
		if !s.Reads(a) {
			return false
		}
	}
	return true
}

// BudgetScope is the scope that reads every budget l's jobs can meet: the
// accounts whose association (or a user's in it) has a GrpTRESMins in
// slurmdbd's listing, and every account where the listing did not say.
// A budget set since the listing was read is read with the next listing.
func (l Limits) BudgetScope() BudgetScope {
	accounts := map[string]bool{}
	for _, a := range l.Associations {
		switch {
		case !a.BudgetListed:
			return BudgetScope{All: true}
		case a.ListedBudget != GroupLimits{} || len(a.Typed.Budget) > 0:
			accounts[a.Account] = true
		}
	}
	var s BudgetScope
	if len(accounts) > 0 {
		s.Accounts = slices.Sorted(maps.Keys(accounts))
	}
	return s
}

// ShowAssocMgr runs `scontrol show assoc_mgr` for scope (argv, through r)
// and reads the budgets it lists. slurmrestd has no equivalent before
// v0.0.42's QOS minutes, and none for the usage on 22.05.
func ShowAssocMgr(ctx context.Context, r Runner, scontrol string, scope BudgetScope) (Budgets, error) {
	out, err := r.Run(ctx, append([]string{scontrol}, scope.args()...))
	if err != nil {
		return Budgets{}, err
	}
	return ParseAssocMgr(out)
}

// ParseAssocMgr reads the GrpTRESMins lines of `scontrol show assoc_mgr`
// output: "GrpTRESMins=cpu=N(3),...,gres/gpu=1000(4)" under a
// "ClusterName=... Account=... UserName=root(0) Partition=..." or a
// "QOS=normal(1)" record. An entry's limit is before its parentheses (N:
// none), the minutes used inside. An association's fair-share factor is
// the last of "SharesRaw/Norm/Level/Factor=1/0.50/1/0.83"; one that does not
// read is named in FairShareUnread. Output with neither section is an
// error: it is not assoc_mgr's.
func ParseAssocMgr(out []byte) (Budgets, error) {
	b := Budgets{QOS: map[string]Budget{}, Assoc: map[AssocKey]Budget{}, FairShare: FairShares{}}
	var (
		sections int
		qos      string
		assoc    *AssocKey
	)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "Association Records" || trimmed == "QOS Records":
			sections++
			qos, assoc = "", nil
		case strings.HasPrefix(line, "ClusterName="):
			k := assocKeyOf(line)
			qos, assoc = "", &k
			if v, ok := fieldValue(line, "Priority"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 0 {
					return Budgets{}, fmt.Errorf("assoc_mgr: account %s user %q: Priority=%q is not a priority", k.Account, k.User, v)
				}
				if b.AssocPriority == nil {
					b.AssocPriority = map[AssocKey]int64{}
				}
				b.AssocPriority[k] = n
			}
		case strings.HasPrefix(line, "QOS="):
			name, _, _ := strings.Cut(strings.TrimPrefix(trimmed, "QOS="), "(")
			qos, assoc = name, nil
		case strings.HasPrefix(trimmed, "Account Limits") || strings.HasPrefix(trimmed, "User Limits"):
			qos = "" // a QOS's per-account and per-user sections follow its own limits
		case strings.HasPrefix(trimmed, sharesField) && assoc != nil:
			f, err := parseFactor(strings.TrimPrefix(trimmed, sharesField))
			switch {
			case err == nil:
				b.FairShare[*assoc] = f
			case b.FairShareUnread == "":
				b.FairShareUnread = fmt.Sprintf("%s of account %s user %q: %v", sharesField, assoc.Account, assoc.User, err)
			}
		case strings.HasPrefix(trimmed, "Priority=") && qos != "":
			v := strings.TrimPrefix(trimmed, "Priority=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return Budgets{}, fmt.Errorf("assoc_mgr: QOS %s: Priority=%q is not a priority", qos, v)
			}
			if b.QOSPriority == nil {
				b.QOSPriority = map[string]int64{}
			}
			b.QOSPriority[qos] = n
		case strings.HasPrefix(trimmed, "GrpTRESMins="):
			bud, err := parseBudget(strings.TrimPrefix(trimmed, "GrpTRESMins="))
			if err != nil {
				return Budgets{}, err
			}
			switch {
			case assoc != nil && bud.IsSet():
				// slurmdbd's listing gives an association's entries set
				// to 0 (Association.Zero).
				bud.Zero = nil
				b.Assoc[*assoc] = bud
			case qos != "" && (bud.IsSet() || len(bud.Zero) > 0):
				b.QOS[qos] = bud
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Budgets{}, fmt.Errorf("read assoc_mgr: %w", err)
	}
	if sections == 0 {
		return Budgets{}, fmt.Errorf("assoc_mgr: no \"Association Records\" or \"QOS Records\" in %d bytes", len(out))
	}
	return b, nil
}

// sharesField starts an association's shares line.
const sharesField = "SharesRaw/Norm/Level/Factor="

// parseFactor reads the fair-share factor, the last of the shares line's
// four values.
func parseFactor(v string) (float64, error) {
	fs := strings.Fields(v)
	if len(fs) == 0 {
		return 0, fmt.Errorf("%q: want RAW/NORM/LEVEL/FACTOR", v)
	}
	parts := strings.Split(fs[0], "/")
	if len(parts) != 4 {
		return 0, fmt.Errorf("%q: want RAW/NORM/LEVEL/FACTOR", v)
	}
	return factorValue(parts[3])
}

// factorValue reads a fair-share factor: a number in 0..1.
func factorValue(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0 && f <= 1) {
		return 0, fmt.Errorf("factor %q: want a number in 0..1", v)
	}
	return f, nil
}

// assocKeyOf reads a record's first line, "ClusterName=c Account=a
// UserName=u(uid) Partition=p Priority=0 ID=2".
// fieldValue is the value of name=value among line's space-separated
// fields.
func fieldValue(line, name string) (string, bool) {
	for _, f := range strings.Fields(line) {
		if n, v, ok := strings.Cut(f, "="); ok && n == name {
			return v, true
		}
	}
	return "", false
}

func assocKeyOf(line string) AssocKey {
	var k AssocKey
	for _, f := range strings.Fields(line) {
		name, v, _ := strings.Cut(f, "=")
		switch name {
		case "ClusterName":
			k.Cluster = v
		case "Account":
			k.Account = v
		case "UserName":
			k.User, _, _ = strings.Cut(v, "(")
		case "Partition":
			k.Partition = v
		}
	}
	return k
}

// parseBudget reads one GrpTRESMins list: its gres/gpu, cpu, mem, billing
// and node entries, and those of GPU types (gres/gpu:h100); other TRES
// are not planned with.
func parseBudget(list string) (Budget, error) {
	var b Budget
	type entry struct {
		key          string
		limit, spent *int64
	}
	entries := []entry{
		{"gres/gpu", &b.Limit.GPURunMins, &b.Spent.GPURunMins},
		{"cpu", &b.Limit.CPURunMins, &b.Spent.CPURunMins},
		{"mem", &b.Limit.MemRunMins, &b.Spent.MemRunMins},
		{"billing", &b.Limit.BillingRunMins, &b.Spent.BillingRunMins},
		{"node", &b.Limit.NodeRunMins, &b.Spent.NodeRunMins},
	}
	typed := map[string]*Budget{}
	// values holds each key's first value, by its key in lower case, as
	// listValue reads it: looking each entry up with listValue took time
	// quadratic in the entries.
	values := map[string]string{}
	for _, kv := range strings.Split(list, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		if _, ok := values[strings.ToLower(k)]; !ok {
			values[strings.ToLower(k)] = v
		}
		if t, ok := strings.CutPrefix(k, "gres/gpu:"); ok && t != "" && typed[t] == nil {
			tb := &Budget{}
			typed[t] = tb
			entries = append(entries, entry{k, &tb.Limit.GPURunMins, &tb.Spent.GPURunMins})
		}
	}
	for _, e := range entries {
		v, ok := values[strings.ToLower(e.key)]
		if !ok {
			continue
		}
		limit, spent, ok := strings.Cut(v, "(")
		spent, closed := strings.CutSuffix(spent, ")")
		if !ok || !closed {
			return Budget{}, fmt.Errorf("assoc_mgr: GrpTRESMins %s=%q: want LIMIT(USED)", e.key, v)
		}
		var err error
		if *e.spent, err = strconv.ParseInt(spent, 10, 64); err != nil || *e.spent < 0 {
			return Budget{}, fmt.Errorf("assoc_mgr: GrpTRESMins %s=%q: used minutes %q not a count", e.key, v, spent)
		}
		if limit == "N" {
			continue
		}
		if *e.limit, err = strconv.ParseInt(limit, 10, 64); err != nil || *e.limit < 0 {
			return Budget{}, fmt.Errorf("assoc_mgr: GrpTRESMins %s=%q: limit %q not a count", e.key, v, limit)
		}
		if *e.limit == 0 {
			var gpuType string
			if t, ok := strings.CutPrefix(e.key, "gres/gpu:"); ok {
				gpuType = t
			}
			b.Zero = append(b.Zero, ZeroLimit{Name: "GrpTRESMins=" + e.key + "=0", GPUType: gpuType})
		}
	}
	for t, tb := range typed {
		if tb.Limit.GPURunMins > 0 {
			if b.Typed == nil {
				b.Typed = map[string]Budget{}
			}
			b.Typed[t] = *tb
		}
	}
	return b, nil
}

// WithBudgets is l with the budgets of b on its QOS and associations (those
// slurmdbd listed; a budget of one it did not list is dropped) and none on
// the others, and b's Tick; a QOS's budget entries set to 0 join its Zero
// (slurmdbd lists an association's, not a QOS's). l itself is not changed.
func (l Limits) WithBudgets(b Budgets) Limits {
	var qos map[string]QOS
	if l.QOS != nil {
		qos = make(map[string]QOS, len(l.QOS))
	}
	for name, q := range l.QOS {
		q.Budget = b.QOS[name]
		if len(q.Budget.Zero) > 0 {
			q.Zero = slices.Concat(q.Zero, q.Budget.Zero)
		}
		qos[name] = q
	}
	assocs := slices.Clone(l.Associations)
	for i, a := range assocs {
		assocs[i].Budget = b.Assoc[a.key()]
	}
	l.QOS, l.Associations, l.BudgetTick = qos, assocs, b.Tick
	return l
}

// AssocMgr reads the budgets from slurmctld with scontrol (a TimedRunner
// bounds each command), and the fair-share factors more precisely with
// sshare when SShare names it.
type AssocMgr struct {
	Runner   Runner
	Scontrol string
	SShare   string
}

// Budgets runs ShowAssocMgr for scope, and reads PriorityCalcPeriod
// (Slurm's default where that fails) and the priority configuration from
// `scontrol show config`.
func (a AssocMgr) Budgets(ctx context.Context, scope BudgetScope) (Budgets, error) {
	b, err := ShowAssocMgr(ctx, a.Runner, a.Scontrol, scope)
	if err != nil {
		return b, err
	}
	if a.SShare != "" && len(b.FairShare) > 0 {
		precise, err := ShowFairShare(ctx, a.Runner, a.SShare, scope)
		b.SShareErr = err
		for k := range b.FairShare {
			if v, ok := precise[k]; ok {
				b.FairShare[k] = v
			}
		}
	}
	c, err := ShowConfig(ctx, a.Runner, a.Scontrol)
	if err == nil {
		b.Priority, err = ParsePriorityConfig(c)
	}
	b.PriorityErr = err
	if len(b.QOS)+len(b.Assoc) == 0 {
		return b, nil
	}
	b.Tick = defaultTick
	if d, err := ParseElapsed(c["PriorityCalcPeriod"]); err == nil && d > 0 {
		b.Tick = d
	}
	return b, nil
}
