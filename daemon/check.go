package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rubick-sched/rubick/gpuinfo"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// Check outcomes. A failed check means rubickd cannot do its work; a
// warning, that it works with less (no limits read, no GPU counts in
// reports, slow starts).
const (
	CheckOK   = "ok"
	CheckWarn = "warn"
	CheckFail = "FAIL"
)

// checkHeldJobs names the check of jobs held for rubick outside its
// partitions, which rubickd's cycles warn of too.
const checkHeldJobs = "held jobs"

// CheckResult is one line of rubickd --check.
type CheckResult struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// CheckCluster is what the checks read from slurmrestd.
type CheckCluster interface {
	Version() string
	Ping(ctx context.Context) error
	Nodes(ctx context.Context) ([]slurm.Node, error)
	Partitions(ctx context.Context) ([]slurm.Partition, error)
	Limits(ctx context.Context) (slurm.Limits, error)
	Jobs(ctx context.Context, since time.Time) ([]slurm.Job, bool, error)
}

// CheckDeps are how the checks reach Slurm and the host.
type CheckDeps struct {
	// Connect reaches slurmrestd as rubickd does.
	Connect func(ctx context.Context) (CheckCluster, error)
	// Runner runs scontrol (argv).
	Runner slurm.Runner
	// LookPath finds a command as exec.LookPath does.
	LookPath func(string) (string, error)
	// UID is the user rubickd runs scontrol as (os.Geteuid).
	UID int
	// Now is the time the token's expiry is checked against.
	Now func() time.Time
	// ReadFile reads job_submit.lua next to slurm.conf where this host
	// has it, as os.ReadFile does; nil skips that check.
	ReadFile func(string) ([]byte, error)
	// Host is this host's name (default os.Hostname), and RubickdRuns
	// whether a rubickd of it runs (default: by /proc), for the job tags'
	// writers (checkTagWriters).
	Host        string
	RubickdRuns func(Instance) bool
	// Writable says whether this user may write path, as access(2) with
	// W_OK does (default syscall.Access).
	Writable func(path string) error
}

// Preflight checks what rubickd relies on, in the order an admin sets it
// up (docs/admin-guide.md sections 2 and 3), without changing Slurm or the
// store: the store's directory and lock, the JWT's expiry, slurmrestd, the
// managed partitions and their GPUs (and jobs held for rubick outside
// them), the QOS and association limits, the
// commands rubickd runs and as whom, the slurm.conf settings it needs, and
// the budgets (GrpTRESMins).
func Preflight(ctx context.Context, cfg Config, deps CheckDeps) []CheckResult {
	var out []CheckResult
	var scope *slurm.BudgetScope // what rubickd reads each minute; nil: no slurmdbd listing
	add := func(name, status, format string, args ...any) {
		out = append(out, CheckResult{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
	}
	writable := deps.Writable
	if writable == nil {
		writable = func(path string) error { return syscall.Access(path, 2 /* W_OK */) }
	}
	out = append(out, checkStore(cfg.Store, writable), checkToken(cfg.Slurmrestd.TokenFile, deps.Now()))
	if cfg.GPUFacts != "" {
		out = append(out, checkGPUFacts(cfg.GPUFacts))
	}

	c, err := deps.Connect(ctx)
	if err == nil {
		err = c.Ping(ctx)
	}
	if err != nil {
		add("slurmrestd", CheckFail, "%s: %v", cfg.Slurmrestd.URL, err)
	} else {
		add("slurmrestd", CheckOK, "%s at %s, slurmctld answers", c.Version(), cfg.Slurmrestd.URL)
		out = append(out, checkPartitions(ctx, c, cfg.Partitions, cfg.GPUFacts)...)
		if jobs, _, err := c.Jobs(ctx, time.Time{}); err == nil {
			if err := stranded(jobs, cfg.Partitions); err != nil {
				add(checkHeldJobs, CheckWarn, "%v: held for rubick in partitions rubickd does not manage, they wait until released by hand; make MANAGED_PARTITIONS in job_submit.lua and partitions in rubickd.yaml name the same partitions", err)
			}
			if r, ok := checkTagWriters(jobs, cfg.Store, deps); ok {
				out = append(out, r)
			}
		}
		l, err := c.Limits(ctx)
		unread := l.Unread()
		if err == nil && l.QOS != nil {
			s := l.BudgetScope()
			scope = &s
		}
		switch {
		case err != nil:
			add("limits", CheckWarn, "QOS and association limits not read (%v): rubickd learns them from the jobs Slurm holds back", err)
		case l.QOS == nil:
			add("limits", CheckWarn, "slurmrestd serves no /slurmdb listing: rubickd learns QOS and association limits from the jobs Slurm holds back (run slurmrestd with openapi/slurmdbd)")
		case len(unread) > 0:
			u, more := unread, ""
			if len(u) > 5 {
				u, more = u[:5], fmt.Sprintf(" and %d more", len(u)-5)
			}
			add("limits", CheckWarn, "%d QOS and %d associations read; rubick does not plan with %s%s: Slurm holds back a job sized past one, and rubick then runs it on its request",
				len(l.QOS), len(l.Associations), strings.Join(u, ", "), more)
		default:
			add("limits", CheckOK, "%d QOS and %d associations read", len(l.QOS), len(l.Associations))
		}
	}

	cmds := []struct{ key, path string }{{"commands.scancel", cfg.Commands.Scancel}}
	if cfg.Listen != "" { // the samples endpoint verifies with unmunge
		cmds = append(cmds, struct{ key, path string }{"samples.unmunge", cfg.Samples.Unmunge})
	}
	if cfg.Policy.readsFactors() {
		cmds = append(cmds, struct{ key, path string }{"commands.sshare", cfg.Commands.Sshare})
	}
	for _, cmd := range cmds {
		switch p, err := deps.LookPath(cmd.path); {
		case err == nil:
			add(cmd.key, CheckOK, "%s", p)
		case cmd.key == "samples.unmunge":
			add(cmd.key, CheckWarn, "%s not found: rubick-srun's samples are refused, and the model learns nothing from the jobs' runs", cmd.path)
		case cmd.key == "commands.sshare":
			add(cmd.key, CheckWarn, "%s not found: the fair-share factors are scontrol's, to two decimals", cmd.path)
		default:
			add(cmd.key, CheckFail, "%s not found: rubickd cannot signal a job before a restart", cmd.path)
		}
	}
	conf, err := slurm.ShowConfig(ctx, deps.Runner, cfg.Commands.Scontrol)
	if err != nil {
		add("commands.scontrol", CheckFail, "%v", err)
		return out
	}
	add("commands.scontrol", CheckOK, "%s show config: Slurm %s", cfg.Commands.Scontrol, conf["SLURM_VERSION"])
	out = append(out, checkUser(deps.UID, conf["SlurmUser"]))
	out = append(out, checkConf(conf)...)
	if deps.ReadFile != nil && luaJobSubmit(conf) && conf["SLURM_CONF"] != "" {
		path := filepath.Join(filepath.Dir(conf["SLURM_CONF"]), "job_submit.lua")
		body, err := deps.ReadFile(path)
		out = append(out, checkJobSubmit(path, body, err, cfg.Partitions, deps.UID, conf["PriorityType"]))
	}
	out = append(out, checkPriority(conf, cfg.Policy.BestEffortOrder, cfg.Policy.GuaranteedOrder))
	b, err := slurm.ShowAssocMgr(ctx, deps.Runner, cfg.Commands.Scontrol, slurm.BudgetScope{All: true})
	out = append(out, checkBudgets(b, err, conf, scope))
	if err == nil && (readsFairShare(cfg.Policy.BestEffortOrder, conf) || readsFairShare(cfg.Policy.GuaranteedOrder, conf)) {
		out = append(out, checkFairShare(b))
	}
	return out
}

// readsFairShare reports whether order goes by the fair-share factors:
// fair-share order, or priority order with a fair-share weight.
func readsFairShare(order string, c slurm.CtldConfig) bool {
	if order == policy.OrderFairShare {
		return true
	}
	p, err := slurm.ParsePriorityConfig(c)
	return order == policy.OrderPriority && err == nil && p.FairShare > 0
}

// checkFairShare says what the fair-share order will go by: the factors
// of the user associations slurmctld lists, and any it could not read.
func checkFairShare(b slurm.Budgets) CheckResult {
	r := CheckResult{Name: "fair-share factors", Status: CheckOK}
	var users []float64
	for k, f := range b.FairShare {
		if k.User != "" {
			users = append(users, f)
		}
	}
	switch {
	case b.FairShareUnread != "":
		r.Status, r.Detail = CheckWarn, b.FairShareUnread+": that association's jobs go as factor 0"
	case len(users) == 0:
		r.Status, r.Detail = CheckWarn, "no user association lists a factor: every best-effort job goes as factor 0, by slope"
	default:
		r.Detail = fmt.Sprintf("%d user associations, factors %.2f to %.2f", len(users), slices.Min(users), slices.Max(users))
	}
	return r
}

// checkBudgets says what rubickd makes of the GrpTRESMins budgets: read
// from scontrol show assoc_mgr, and counted by Slurm only with
// priority/multifactor; rubickd plans within them as
// AccountingStorageEnforce=safe does, which Slurm may not. b holds every
// budget; scope is what rubickd reads each minute (nil without slurmdbd's
// listing), which must cover the associations' budgets in b.
func checkBudgets(b slurm.Budgets, err error, c slurm.CtldConfig, scope *slurm.BudgetScope) CheckResult {
	r := CheckResult{Name: "budgets", Status: CheckOK}
	n := len(b.QOS) + len(b.Assoc)
	var unread []string
	if scope != nil {
		missed := map[string]bool{}
		for k := range b.Assoc {
			if !scope.Reads(k.Account) {
				missed[k.Account] = true
			}
		}
		unread = slices.Sorted(maps.Keys(missed))
	}
	switch {
	case err != nil:
		r.Status, r.Detail = CheckWarn, fmt.Sprintf("GrpTRESMins budgets not read (%v): rubickd may grow a job past what its budget has left", err)
	case n == 0:
		r.Detail = "no GrpTRESMins budget set"
	case len(unread) > 0:
		r.Status, r.Detail = CheckWarn, fmt.Sprintf("slurmctld holds GrpTRESMins budgets of accounts %s that slurmdbd's association listing does not show: rubickd does not read them until it does", strings.Join(unread, ", "))
	case c["PriorityType"] != "priority/multifactor":
		r.Status, r.Detail = CheckWarn, fmt.Sprintf("%d GrpTRESMins budgets, but PriorityType=%s counts no usage: they never fill", n, c["PriorityType"])
	case !c.Has("AccountingStorageEnforce", "safe"):
		r.Status, r.Detail = CheckWarn, fmt.Sprintf("%d GrpTRESMins budgets without safe in AccountingStorageEnforce: Slurm starts jobs a budget cannot pay for and kills its running jobs when it runs out; rubickd starts and grows jobs only within what is left, as safe does", n)
	default:
		r.Detail = fmt.Sprintf("%d GrpTRESMins budgets, enforced with safe", n)
	}
	if scope != nil && n > 0 && err == nil && len(unread) == 0 {
		if scope.All {
			r.Detail += "; rubickd reads every association's each minute (slurmdbd's listing does not say which carry one)"
		} else {
			plural := "s"
			if len(scope.Accounts) == 1 {
				plural = ""
			}
			r.Detail += fmt.Sprintf("; rubickd reads the QOS and the associations of %d account%s each minute", len(scope.Accounts), plural)
		}
	}
	return r
}

// LogChecks logs every check that did not pass (a failure as an error),
// for rubickd's start, and returns how many failed.
func LogChecks(log *slog.Logger, results []CheckResult) (failed int) {
	found := startFindings(results)
	for _, r := range found {
		if r.Status == CheckFail {
			log.Error("setup check failed (rubickd --check)", "check", r.Name, "detail", r.Detail)
		} else {
			log.Warn("setup check warns (rubickd --check)", "check", r.Name, "detail", r.Detail)
		}
	}
	return (&SetupChecks{Checks: found}).Failed()
}

// startFindings are the checks of results that failed or warned, which
// rubickd's start tells of.
func startFindings(results []CheckResult) []CheckResult {
	var out []CheckResult
	for _, r := range results {
		if r.Name == checkHeldJobs {
			// Each cycle warns of these jobs, the first one seconds
			// after this, and again when they change.
			continue
		}
		if r.Status == CheckFail || r.Status == CheckWarn {
			out = append(out, r)
		}
	}
	return out
}

// SetupChecks are the checks of rubickd --check that failed or warned
// when rubickd started, which it runs anyway: /status and rubick status
// say so, where otherwise only the log would.
type SetupChecks struct {
	// At is when the checks ran.
	At     time.Time     `json:"at"`
	Checks []CheckResult `json:"checks"`
}

// NewSetupChecks keeps the checks of results, run at at, that failed or
// warned; nil when none did.
func NewSetupChecks(at time.Time, results []CheckResult) *SetupChecks {
	found := startFindings(results)
	if len(found) == 0 {
		return nil
	}
	return &SetupChecks{At: at, Checks: found}
}

// Failed counts the checks that failed; 0 for nil.
func (s *SetupChecks) Failed() int {
	if s == nil {
		return 0
	}
	n := 0
	for _, r := range s.Checks {
		if r.Status == CheckFail {
			n++
		}
	}
	return n
}

// checkTagWriters warns of the rubickd that the tags of jobs not ended
// name (by=), other than the one holding store's lock: one running on this host, or
// one of another host, which may run. A rubickd started with this
// configuration beside either stops (checkWriters). No line when there
// is none.
func checkTagWriters(jobs []slurm.Job, store string, deps CheckDeps) (CheckResult, bool) {
	host := deps.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	host = Instance{Host: host}.hostName()
	runs := deps.RubickdRuns
	if runs == nil {
		runs = rubickdRuns
	}
	// LockInstance writes its holder's Describe; "" when none holds it.
	holder, _, _ := LockHolder(LockPath(store))
	var here, elsewhere []string
	seen := map[string]bool{}
	for _, j := range jobs {
		if j.Tag == nil || j.Ended() || seen[j.Tag.Extra[slurm.TagBy]] {
			// An ended job's tag says who managed the cluster then.
			continue
		}
		by := j.Tag.Extra[slurm.TagBy]
		seen[by] = true
		i, err := ParseInstance(by)
		switch {
		case err != nil:
		case i.Host != host:
			elsewhere = append(elsewhere, fmt.Sprintf("%s (job %d)", i.Describe(), j.ID))
		case i.Describe() != holder && runs(i):
			here = append(here, fmt.Sprintf("%s (job %d)", i.Describe(), j.ID))
		}
	}
	if len(here)+len(elsewhere) == 0 {
		return CheckResult{}, false
	}
	var parts []string
	if len(here) > 0 {
		parts = append(parts, fmt.Sprintf("running on this host with another store: %s", strings.Join(here, ", ")))
	}
	if len(elsewhere) > 0 {
		parts = append(parts, fmt.Sprintf("of another host, running there unless it ended: %s", strings.Join(elsewhere, ", ")))
	}
	return CheckResult{Name: "other rubickd", Status: CheckWarn, Detail: fmt.Sprintf(
		"job tags name a rubickd %s; of two rubickd managing one cluster, the one started later stops (exit status 3) once it sees a tag the other wrote",
		strings.Join(parts, "; "))}, true
}

func checkStore(path string, writable func(string) error) CheckResult {
	r := CheckResult{Name: "store", Status: CheckOK}
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		r.Detail = fmt.Sprintf("%s: its directory %s is made at the first start", path, dir)
		return r
	}
	// SQLite writes the database, and its -wal and -shm files beside it.
	for _, p := range []string{dir, path} {
		if _, err := os.Stat(p); p == path && errors.Is(err, os.ErrNotExist) {
			continue // created at the first start
		}
		if err := writable(p); err != nil {
			r.Status, r.Detail = CheckFail, fmt.Sprintf("%s: rubickd cannot write %s: %v", path, p, err)
			return r
		}
	}
	holder, held, err := LockHolder(LockPath(path))
	switch {
	case err != nil:
		r.Status, r.Detail = CheckFail, err.Error()
	case held:
		r.Detail = fmt.Sprintf("%s in use by the running rubickd (pid %s)", path, strings.TrimPrefix(holder, "pid "))
	default:
		r.Detail = fmt.Sprintf("%s: no rubickd holds it", path)
	}
	return r
}

// checkToken reads the JWT rubickd sends: an expired one stops rubickd,
// one that expires within tokenWarnBefore soon will.
func checkToken(path string, now time.Time) CheckResult {
	r := CheckResult{Name: "slurmrestd.token_file", Status: CheckOK}
	tok, err := slurm.ReadTokenFile(path)
	if err != nil {
		r.Status, r.Detail = CheckFail, err.Error()
		return r
	}
	c, err := slurm.ParseTokenClaims(tok)
	switch {
	case err != nil:
		r.Status, r.Detail = CheckWarn, fmt.Sprintf("%s: its expiry cannot be read (%v)", path, err)
	case c.Expires.IsZero():
		r.Detail = fmt.Sprintf("%s: user %s, no expiry", path, c.User)
	case !c.Expires.After(now):
		r.Status, r.Detail = CheckFail, fmt.Sprintf("%s: user %s, expired %s: write a new one (scontrol token username=%s lifespan=...)",
			path, c.User, c.Expires.UTC().Format(time.RFC3339), c.User)
	default:
		left := c.Expires.Sub(now).Round(time.Hour)
		r.Detail = fmt.Sprintf("%s: user %s, expires %s (in %s)", path, c.User, c.Expires.UTC().Format(time.RFC3339), left)
		if c.Expires.Sub(now) < tokenWarnBefore {
			r.Status = CheckWarn
			r.Detail += ": write a new one before then (scontrol token)"
		}
	}
	return r
}

// checkPartitions checks that each managed partition exists and has GPUs,
// and says when their GPUs are of several types: the model prices every
// GPU alike and checks memory against one GPU size (facts: the gpu_facts
// file, "" for the built-in values).
func checkPartitions(ctx context.Context, c CheckCluster, managed []string, facts string) []CheckResult {
	parts, err := c.Partitions(ctx)
	if err != nil {
		return []CheckResult{{"partitions", CheckFail, err.Error()}}
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return []CheckResult{{"partitions", CheckFail, err.Error()}}
	}
	byNode := map[string]slurm.Node{}
	for _, n := range nodes {
		byNode[n.Name] = n
	}
	perType := map[string][2]int{} // GPUs, nodes
	seen := map[string]bool{}
	byName := map[string]slurm.Partition{}
	var names []string
	for _, p := range parts {
		byName[p.Name] = p
		names = append(names, p.Name)
	}
	var out []CheckResult
	for _, name := range managed {
		r := CheckResult{Name: "partition " + name, Status: CheckOK}
		p, ok := byName[name]
		if !ok {
			r.Status, r.Detail = CheckFail, fmt.Sprintf("not a partition of this cluster (it has %s): set partitions in rubickd.yaml and MANAGED_PARTITIONS in job_submit.lua", strings.Join(names, ", "))
			out = append(out, r)
			continue
		}
		withGPUs, total := 0, 0
		for _, name := range p.Nodes {
			if n := byNode[name]; n.GPUs > 0 {
				withGPUs++
				total += n.GPUs
				if !seen[name] {
					seen[name] = true
					t := strings.Join(n.GPUTypes, "+")
					c := perType[t]
					perType[t] = [2]int{c[0] + n.GPUs, c[1] + 1}
				}
			}
		}
		switch {
		case total == 0:
			r.Status, r.Detail = CheckFail, fmt.Sprintf("none of its %d nodes has a gres/gpu", len(p.Nodes))
		case p.State != "" && p.State != "UP":
			r.Status, r.Detail = CheckWarn, fmt.Sprintf("state %s: %d nodes with %d GPUs, none started while it is", p.State, withGPUs, total)
		default:
			r.Detail = fmt.Sprintf("%d nodes with %d GPUs", withGPUs, total)
		}
		out = append(out, r)
	}
	if len(perType) > 1 {
		var types []string
		for _, t := range slices.Sorted(maps.Keys(perType)) {
			name := cmp.Or(t, "untyped")
			nodes := "nodes"
			if perType[t][1] == 1 {
				nodes = "node"
			}
			types = append(types, fmt.Sprintf("%s: %d GPUs on %d %s", name, perType[t][0], perType[t][1], nodes))
		}
		src := "the built-in A800 80 GB values"
		if facts != "" {
			src = "gpu_facts " + facts
		}
		out = append(out, CheckResult{"GPU types", CheckWarn, fmt.Sprintf(
			"%s: rubick prices every GPU alike and checks plans against one GPU memory (%s); give gpu_facts the facts of the type with the least memory (rubick gpuinfo on one of its nodes), or manage one partition per type",
			strings.Join(types, ", "), src)})
	}
	return out
}

// checkGPUFacts reads gpu_facts as rubickd's start does: a file that does
// not read stops it, and facts NVML did not measure are not applied.
func checkGPUFacts(path string) CheckResult {
	r := CheckResult{Name: "gpu_facts", Status: CheckOK}
	f, err := gpuinfo.ReadFacts(path)
	switch {
	case err != nil:
		r.Status, r.Detail = CheckFail, fmt.Sprintf("%v: rubickd does not start; write it with rubick gpuinfo on a compute node, or unset gpu_facts", err)
	case f.Source != gpuinfo.SourceNVML:
		r.Status, r.Detail = CheckWarn, fmt.Sprintf("%s: source %q, not %q: not applied, so rubick prices the built-in A800 80 GB values; write it with rubick gpuinfo on a compute node",
			path, f.Source, gpuinfo.SourceNVML)
	default:
		env := gpuinfo.ApplyTo(model.DefaultEnv(), f)
		mig := ""
		if f.MIG {
			// Priced as GPUs of their own, which they are only where
			// Slurm schedules them so.
			mig = " (MIG devices counted as GPUs)"
		}
		r.Detail = fmt.Sprintf("%s: %s, %d GPUs of %g GB per node%s, %g GB/s within a node", path, cmp.Or(f.Name, "unnamed GPUs"), env.NodeGPUs, env.GPUMemGB, mig, env.IntraGBps)
	}
	return r
}

// checkUser checks that scontrol runs as someone Slurm lets update and
// release other users' jobs: root or SlurmUser ("slurm(64030)"). Anyone
// else must be a Slurm operator, which only sacctmgr shows.
func checkUser(uid int, slurmUser string) CheckResult {
	r := CheckResult{Name: "user", Status: CheckOK}
	want := fmt.Sprintf("(%d)", uid)
	switch {
	case uid == 0:
		r.Detail = "root"
	case strings.HasSuffix(slurmUser, want):
		r.Detail = "SlurmUser " + slurmUser
	default:
		r.Status = CheckWarn
		r.Detail = fmt.Sprintf("uid %d is neither root nor SlurmUser %s: scontrol updates and releases other users' jobs only for a Slurm operator (sacctmgr modify user ... set AdminLevel=Operator)", uid, slurmUser)
	}
	return r
}

// checkConf checks the slurm.conf settings of contrib/slurm/slurm.conf.example.
func checkConf(c slurm.CtldConfig) []CheckResult {
	var out []CheckResult
	add := func(name string, ok bool, failStatus, okDetail, badDetail string) {
		r := CheckResult{Name: name, Status: CheckOK, Detail: okDetail}
		if !ok {
			r.Status, r.Detail = failStatus, badDetail
		}
		out = append(out, r)
	}
	add("JobSubmitPlugins", luaJobSubmit(c), CheckFail, "lua",
		fmt.Sprintf("%q has no lua: without job_submit.lua no job is tagged and held, and rubickd manages none", c["JobSubmitPlugins"]))
	add("GresTypes", c.Has("GresTypes", "gpu"), CheckFail, "gpu",
		fmt.Sprintf("%q has no gpu: Slurm allocates no GPUs", c["GresTypes"]))
	add("SelectType", c["SelectType"] == "select/cons_tres", CheckWarn, "select/cons_tres",
		fmt.Sprintf("%q: rubick sizes GPUs per node as select/cons_tres allocates them", c["SelectType"]))
	memory := strings.Contains(strings.ToUpper(c["SelectTypeParameters"]), "MEMORY")
	add("SelectTypeParameters", memory, CheckWarn, c["SelectTypeParameters"],
		fmt.Sprintf("%q: memory is not a consumable resource, so the memory rubick books for offloaded optimizer states is not held for the job", c["SelectTypeParameters"]))
	if memory {
		_, perCPU := c["DefMemPerCPU"]
		_, perGPU := c["DefMemPerGPU"]
		node := c["DefMemPerNode"]
		add("DefMemPerCPU", perCPU || perGPU || node != "" && node != "UNLIMITED" && node != "0", CheckWarn, "a default memory is set",
			"no DefMemPerCPU, DefMemPerGPU or DefMemPerNode: a job that asks for no memory gets a whole node's, and no other job fits beside it (unless each partition sets one)")
	}
	add("AccountingStorageTRES", c.Has("AccountingStorageTRES", "gres/gpu"), CheckWarn, "has gres/gpu",
		"no gres/gpu: sacct shows no GPU counts, and rubick report no GPU-hours")
	add("JobRequeue", c["JobRequeue"] != "0", CheckWarn, c["JobRequeue"],
		"0: a job without --requeue cannot be restarted on another size (job_submit.lua forces --requeue)")
	bf, okBF := c.Param("SchedulerParameters", "bf_interval")
	si, okSI := c.Param("SchedulerParameters", "sched_interval")
	add("SchedulerParameters", okBF && okSI, CheckWarn, fmt.Sprintf("bf_interval=%s, sched_interval=%s", bf, si),
		"no bf_interval and sched_interval (defaults 30 and 60 s): a job rubickd releases may wait a minute to start (bf_interval=5,sched_interval=5)")
	return out
}

// checkPriority warns where Slurm's priority weighs the factors an admin
// orders jobs by (fair-share, QOS, partition, association): the jobs
// rubick holds have priority 0, and rubick starts them by its own order,
// which follows fair share with policy.best_effort_order: fairshare, and
// the multifactor priority with priority (and guaranteed jobs with
// policy.guaranteed_order: priority). Those orders fail without
// priority/multifactor, which alone computes the factors.
func checkPriority(c slurm.CtldConfig, order, guaranteed string) CheckResult {
	r := CheckResult{Name: "PriorityType", Status: CheckOK, Detail: c["PriorityType"]}
	fair := order == policy.OrderFairShare
	if c["PriorityType"] != "priority/multifactor" {
		if guaranteed == policy.OrderPriority && order != policy.OrderPriority {
			r.Status, r.Detail = CheckFail, fmt.Sprintf("%s computes no multifactor priority: policy.guaranteed_order priority needs PriorityType=priority/multifactor", cmp.Or(c["PriorityType"], "priority/basic"))
			return r
		}
		if fair || order == policy.OrderPriority {
			what := "fair-share factor"
			if !fair {
				what = "multifactor priority"
			}
			r.Status, r.Detail = CheckFail, fmt.Sprintf("%s computes no %s: policy.best_effort_order %s needs PriorityType=priority/multifactor", cmp.Or(c["PriorityType"], "priority/basic"), what, order)
		}
		return r
	}
	switch {
	case order == policy.OrderPriority && guaranteed == policy.OrderPriority:
		return checkPriorityOrder(c, "best-effort and guaranteed jobs")
	case order == policy.OrderPriority:
		return checkPriorityOrder(c, "best-effort jobs")
	case guaranteed == policy.OrderPriority:
		return checkPriorityOrder(c, "guaranteed jobs")
	}
	if fair {
		r.Detail += ": best-effort jobs go by their associations' fair-share factors"
	}
	var weighed []string
	for _, k := range []string{"PriorityWeightFairShare", "PriorityWeightQOS", "PriorityWeightPartition", "PriorityWeightAssoc"} {
		if w, err := strconv.ParseInt(c[k], 10, 64); err == nil && w > 0 && !(fair && k == "PriorityWeightFairShare") {
			weighed = append(weighed, fmt.Sprintf("%s=%d", k, w))
		}
	}
	if len(weighed) > 0 {
		by := "slope and age, and keeps accounts apart only by tenant quotas"
		if fair {
			by = "fair-share factor, slope and age"
		}
		r.Status, r.Detail = CheckWarn, fmt.Sprintf("%s: Slurm's priority does not order the jobs rubick holds (priority 0); rubick starts best-effort jobs by %s; policy.best_effort_order priority orders them by Slurm's priority (admin guide, *Order among jobs*)", strings.Join(weighed, ", "), by)
	}
	return r
}

// checkPriorityOrder says what priority order goes by: the weights rubick
// applies, and warns of the factor it leaves out (a site plugin's).
func checkPriorityOrder(c slurm.CtldConfig, who string) CheckResult {
	r := CheckResult{Name: "PriorityType", Status: CheckOK}
	p, err := slurm.ParsePriorityConfig(c)
	if err != nil {
		r.Status, r.Detail = CheckFail, err.Error()
		return r
	}
	r.Detail = fmt.Sprintf("priority/multifactor: %s go by partition PriorityTier, then age=%d assoc=%d fairshare=%d jobsize=%d partition=%d qos=%d (PriorityMaxAge %s)",
		who, p.Age, p.Assoc, p.FairShare, p.JobSize, p.Partition, p.QOS, cmp.Or(c["PriorityMaxAge"], "7-00:00:00"))
	if len(p.TRES) > 0 {
		r.Detail += " tres=" + c["PriorityWeightTRES"]
	}
	switch {
	case p.SiteFactor != "":
		r.Status, r.Detail = CheckWarn, r.Detail+"; rubick leaves out PrioritySiteFactorPlugin="+p.SiteFactor+", so its order may differ from Slurm's there"
	case !p.Weighted():
		r.Status, r.Detail = CheckWarn, r.Detail+"; every weight is 0: they go by tier alone"
	}
	return r
}

// luaJobSubmit reports whether slurmctld runs job_submit.lua: its
// JobSubmitPlugins lists lua, or job_submit/lua, which Slurm accepts too.
func luaJobSubmit(c slurm.CtldConfig) bool {
	return c.Has("JobSubmitPlugins", "lua") || c.Has("JobSubmitPlugins", "job_submit/lua")
}

// JobSubmitVersion is the job_submit.lua (its VERSION) this rubickd
// expects: 2 keeps an administrator's hold of a job rubick holds in
// rubick's hold (AdminHoldField) and releases a job moved out of the
// managed partitions; 3 tags and holds a job moved in, marks rubick's
// holds that Slurm names an administrator's (RubickHeldField), and refuses
// a new nice of a held job that would end its hold (NICE_KEEPS_HOLD); 4
// gives a job the class of its new QOS or account; 5 refuses model types
// when their list cannot be read and keeps a hold across a move between
// unmanaged partitions; 6 changes each record of a job array changed as a
// whole (one request for all, which the script edits) as its own.
const JobSubmitVersion = 6

// jobSubmitLacks says what a copy of job_submit.lua older than each
// version does wrong, for rubickd --check.
var jobSubmitLacks = []struct {
	version int
	says    string
}{
	{2, "an administrator's scontrol release of a job rubick holds starts it as submitted"},
	{3, "a job with a model type moved into a managed partition runs as submitted, and with PriorityType=priority/basic a user's new nice (scontrol update Nice=) of a job rubick holds starts it as submitted"},
	{4, "a job given a new QOS or account (scontrol update QOS= or Account=) keeps the class it was submitted with"},
	{5, "a model type list slurmctld's user cannot read lets any model type through, and a move between partitions rubickd does not manage ends a hold"},
	{6, "a change of a whole job array (scontrol update JobId=ARRAY ...) gives each task the comment and holds written for the one before it: a task its user released can be held by them again"},
}

var (
	luaVersion = regexp.MustCompile(`(?m)^local\s+VERSION\s*=\s*(\d+)`)
	luaManaged = regexp.MustCompile(`(?s)local\s+MANAGED_PARTITIONS\s*=\s*\{(.*?)\}`)
	luaKey     = regexp.MustCompile(`\[\s*"([^"]+)"\s*\]\s*=\s*true|([A-Za-z_][A-Za-z0-9_]*)\s*=\s*true`)
	luaUIDs    = regexp.MustCompile(`(?s)local\s+SCHEDULER_UIDS\s*=\s*\{(.*?)\}`)
	luaUID     = regexp.MustCompile(`\[\s*(\d+)\s*\]\s*=\s*true`)
	luaNice    = regexp.MustCompile(`(?m)^local\s+NICE_KEEPS_HOLD\s*=\s*(true|false)`)
	// Lua comments: --[[ ... ]] blocks, then -- to the end of the line.
	luaBlockComment = regexp.MustCompile(`(?s)--\[\[.*?\]\]`)
	luaLineComment  = regexp.MustCompile(`--[^\n]*`)
)

// checkNice compares NICE_KEEPS_HOLD in job_submit.lua (body, of version)
// with slurmctld's PriorityType. priority/basic ends a held job's hold at a
// new nice, so the script must refuse it; priority/multifactor keeps the
// hold, and a refusal only keeps users from changing it. It returns what
// the ok line adds, or the problems.
func checkNice(body []byte, version int, priorityType string) (string, []string) {
	if version < 3 || priorityType == "" {
		return "", nil // an older copy's is said above; an unknown type is not compared
	}
	keeps := false
	if m := luaNice.FindSubmatch(body); m != nil {
		keeps = string(m[1]) == "true"
	}
	switch multifactor := priorityType == "priority/multifactor"; {
	case keeps && !multifactor:
		return "", []string{fmt.Sprintf("NICE_KEEPS_HOLD is true, but %s ends a held job's hold at a new nice: a user's scontrol update Nice= of a job rubick holds starts it as submitted; set it false", priorityType)}
	case !keeps && multifactor:
		return "", []string{"NICE_KEEPS_HOLD is false: users' new nice (scontrol update Nice=) of a job rubick holds is refused, though priority/multifactor keeps the hold; set it true"}
	}
	return fmt.Sprintf(", NICE_KEEPS_HOLD %v for %s", keeps, priorityType), nil
}

// checkJobSubmit compares job_submit.lua at path (body, or the error
// reading it) with what rubickd expects: its VERSION, its
// MANAGED_PARTITIONS against partitions, its SCHEDULER_UIDS against uid,
// the user rubickd runs scontrol as, and its NICE_KEEPS_HOLD against
// priorityType, slurmctld's PriorityType ("" when unknown). A partition
// only the script manages holds jobs no one releases; one only rubickd
// manages never has its jobs held, so they run as submitted; without uid
// every release of rubickd's is refused, and no job starts. The script
// lives on the slurmctld host: elsewhere it is not compared.
func checkJobSubmit(path string, body []byte, err error, partitions []string, uid int, priorityType string) CheckResult {
	r := CheckResult{Name: "job_submit.lua", Status: CheckOK}
	if err != nil {
		r.Detail = fmt.Sprintf("%s not read on this host (%v): not compared; run rubickd --check on the slurmctld host to compare it", path, err)
		return r
	}
	// A commented-out uid or partition is not a setting.
	body = luaLineComment.ReplaceAll(luaBlockComment.ReplaceAll(body, nil), nil)
	if m := luaUIDs.FindSubmatch(body); m != nil {
		var uids []string
		for _, k := range luaUID.FindAllSubmatch(m[1], -1) {
			uids = append(uids, string(k[1]))
		}
		if !slices.Contains(uids, strconv.Itoa(uid)) {
			r.Status, r.Detail = CheckFail, fmt.Sprintf("%s: SCHEDULER_UIDS (%s) lacks uid %d, which rubickd runs as: the script refuses its every release, and no job starts; add [%d] = true",
				path, strings.Join(uids, ", "), uid, uid)
			return r
		}
	}
	var problems []string
	version := 1 // copies before VERSION
	if m := luaVersion.FindSubmatch(body); m != nil {
		version, _ = strconv.Atoi(string(m[1]))
	}
	if version > JobSubmitVersion {
		problems = append(problems, fmt.Sprintf("a newer copy (version %d, this rubickd knows up to %d): install the rubickd that came with it", version, JobSubmitVersion))
	}
	if version < JobSubmitVersion {
		var lacks []string
		for _, l := range jobSubmitLacks {
			if version < l.version {
				lacks = append(lacks, l.says)
			}
		}
		problems = append(problems, fmt.Sprintf("an older copy (version %d, rubickd expects %d): install contrib/slurm/job_submit.lua, keeping the settings at its top; until then %s", version, JobSubmitVersion, strings.Join(lacks, ", and ")))
	}
	m := luaManaged.FindSubmatch(body)
	if m == nil {
		problems = append(problems, "no MANAGED_PARTITIONS table found: not compared with partitions")
	} else {
		var managed []string
		for _, k := range luaKey.FindAllSubmatch(m[1], -1) {
			managed = append(managed, string(k[1])+string(k[2]))
		}
		var onlyLua, onlyYAML []string
		for _, p := range managed {
			if !slices.Contains(partitions, p) {
				onlyLua = append(onlyLua, p)
			}
		}
		for _, p := range partitions {
			if !slices.Contains(managed, p) {
				onlyYAML = append(onlyYAML, p)
			}
		}
		if len(onlyLua) > 0 {
			problems = append(problems, fmt.Sprintf("MANAGED_PARTITIONS has %s, which partitions in rubickd.yaml lacks: jobs there are held and no one releases them", strings.Join(onlyLua, ", ")))
		}
		if len(onlyYAML) > 0 {
			problems = append(problems, fmt.Sprintf("partitions has %s, which MANAGED_PARTITIONS lacks: jobs there are never held for rubick and run as submitted", strings.Join(onlyYAML, ", ")))
		}
		nice, niceProblems := checkNice(body, version, priorityType)
		problems = append(problems, niceProblems...)
		if len(problems) == 0 {
			r.Detail = fmt.Sprintf("%s: version %d, MANAGED_PARTITIONS %s as partitions%s", path, version, strings.Join(managed, ", "), nice)
			return r
		}
	}
	r.Status, r.Detail = CheckWarn, path+": "+strings.Join(problems, "; ")
	return r
}
