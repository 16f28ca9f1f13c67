package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rubick-sched/rubick/daemon"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// statusView is what `rubick status` prints; its JSON keys are stable
// (docs/report.md).
type statusView struct {
	URL    string     `json:"url"`
	Daemon daemonView `json:"daemon"`
	Store  string     `json:"store"`
	// StoreError says why the store could not be read; empty when it was.
	StoreError string `json:"store_error"`
	// JobsByState counts the store's jobs with a model type (managed) and
	// without (rigid) per Slurm state.
	JobsByState  map[string]int `json:"jobs_by_state"`
	RigidByState map[string]int `json:"rigid_by_state"`
	Models       []modelView    `json:"model_types"`
	// ArrayTasks names, as squeue does (A_T), the jobs of the last cycle's
	// lists that are tasks of job arrays, as the store knows them.
	ArrayTasks map[int]string `json:"array_tasks,omitempty"`
	Notes      []string       `json:"notes"`
}

// daemonView is rubickd's health and last cycle.
type daemonView struct {
	Reachable bool   `json:"reachable"`
	Healthy   bool   `json:"healthy"`
	Error     string `json:"error"`
	// Instance is rubickd as the tags it writes name it (by=).
	Instance string `json:"instance,omitempty"`
	// The fields below describe the last cycle; null or zero before the first.
	LastCycle *time.Time `json:"last_cycle"`
	CycleID   int64      `json:"cycle_id"`
	// DurationS is the whole cycle, PolicyS the policy's share.
	DurationS float64 `json:"duration_s"`
	PolicyS   float64 `json:"policy_s"`
	Jobs      int     `json:"jobs"`
	// Decided counts the policy's actions by kind; Applied the Slurm
	// actions the cycle ran that did not fail.
	Decided map[string]int `json:"decided"`
	Applied int            `json:"applied"`
	Failed  map[int]string `json:"failed"`
	Skipped map[int]string `json:"skipped"`
	Ignored map[int]string `json:"ignored"`
	// Adjusted lists managed jobs planned from another GPU count than
	// their request, on which no plan fits.
	Adjusted map[int]string `json:"adjusted"`
	// Reserved is what the last cycle held back for a pending rigid job.
	Reserved *daemon.Reservation `json:"reserved"`
	// Groups are the group limits (GrpTRES and the like) running jobs
	// count against, with what they hold.
	Groups []daemon.GroupUse `json:"groups"`
	// Queued counts the queued jobs the policy plans per class, with the
	// longest any has queued; absent before the first planned cycle.
	Queued map[string]daemon.Queue `json:"queued,omitempty"`
	// Failing says how many cycles failed since the last completed one,
	// since when and why the last did; absent unless the last failed.
	// /healthz answers 200 for a while after the last completed cycle.
	Failing *daemon.Failing `json:"failing,omitempty"`
	// Waiting says since when the cycles since the last completed one
	// decided nothing, waiting for Slurm to start jobs rubickd released,
	// and which; absent otherwise.
	Waiting *daemon.Waiting `json:"waiting,omitempty"`
	// Setup lists the checks of rubickd --check that failed or warned at
	// rubickd's start; absent when all passed. /healthz does not count
	// them: a check may fail at boot for a moment.
	Setup *daemon.SetupChecks `json:"setup,omitempty"`
}

// jobList is one of the last cycle's lists of jobs, with why each is on it.
type jobList struct {
	name string
	jobs map[int]string
}

// lists are the last cycle's lists of jobs, in the order status prints them.
func (d daemonView) lists() []jobList {
	return []jobList{{"failed", d.Failed}, {"skipped", d.Skipped}, {"ignored", d.Ignored}, {"adjusted", d.Adjusted}}
}

// modelView is one model type and its current fit.
type modelView struct {
	Name string   `json:"name"`
	Fit  *fitView `json:"fit"`
	// FitCount is the number of stored fits, current or not.
	FitCount int `json:"fits"`
	// RestartCostS is what rubickd prices the type's restarts at when it
	// has measured some (the median of the newest five); null otherwise.
	RestartCostS *float64 `json:"restart_cost_s"`
	// RestartsMeasured counts the type's measured restarts.
	RestartsMeasured int `json:"restarts_measured"`
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return statusCmd(ctx, args, stdout, stderr, processEnv())
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer, env cliEnv) error {
	fset := newFlags("status", "Show rubickd's health and last decision cycle (from its HTTP endpoint), the\n"+
		"managed jobs by state and every model type with its fit (from the store).\n"+
		"Either source may be down; the other is still shown.", stderr)
	rawURL := fset.String("url", "", "rubickd's HTTP endpoint: a URL, or its listen setting as it is (HOST:PORT) "+
		"(default: rubickd's listen setting, a wildcard host read as loopback, else http://"+daemon.Defaults().Listen+")")
	cfg := configFlag(fset, env, stderr)
	storePath := storePathFlag(fset, env, cfg)
	asJSON := fset.Bool("json", false, "write JSON")
	timeout := fset.Duration("timeout", 3*time.Second, "timeout of each request to rubickd")
	check := fset.Bool("check", false, "fail (exit status 1) unless rubickd answers healthy, for monitoring; the status is printed all the same")
	if help, err := parseFlags(fset, args); help || err != nil {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout=%s must be > 0", errUsage, *timeout)
	}
	base, noEndpoint, err := statusURL(fset, *rawURL, cfg, env)
	if err != nil {
		return err
	}
	path, err := storePath()
	if err != nil {
		return err
	}
	v := &statusView{URL: base, Store: path, JobsByState: map[string]int{},
		RigidByState: map[string]int{}, Models: []modelView{}, Notes: []string{}}

	switch {
	case noEndpoint != "":
		v.Daemon = newDaemonView()
		v.Daemon.Error = noEndpoint
		v.Notes = append(v.Notes, "rubickd "+noEndpoint+": showing the store only")
	default:
		v.Daemon = probeDaemon(ctx, env.http, v.URL, *timeout)
		if !v.Daemon.Reachable {
			v.Notes = append(v.Notes, fmt.Sprintf("rubickd is not reachable at %s: showing the store only", v.URL))
		}
	}
	if st, err := openStore(ctx, path); err != nil {
		v.StoreError = err.Error()
	} else {
		err := v.readStore(ctx, st, env.now())
		st.Close()
		if err != nil {
			v.StoreError = err.Error()
		}
	}
	if v.StoreError != "" {
		v.Notes = append(v.Notes, "store not read: "+v.StoreError)
	}
	if *asJSON {
		err = writeJSON(stdout, v)
	} else {
		err = v.write(stdout)
	}
	if err != nil {
		return err
	}
	if !v.Daemon.Reachable && v.StoreError != "" {
		return fmt.Errorf("status: neither rubickd (%s) nor the store (%s) could be read", v.Daemon.Error, v.StoreError)
	}
	if *check && noEndpoint != "" {
		return fmt.Errorf("status: rubickd %s", noEndpoint)
	}
	if *check && !(v.Daemon.Reachable && v.Daemon.Healthy) {
		return fmt.Errorf("status: rubickd at %s is not healthy: %s", v.URL, v.Daemon.Error)
	}
	return nil
}

// statusURL is rubickd's endpoint: --url when given, else rubickd's listen
// setting (cfg). When that is empty (HTTP disabled) it returns no URL and
// says so in noEndpoint, rather than trying an address rubickd does not
// serve.
func statusURL(fs *flag.FlagSet, rawURL string, cfg func() (rubickdConfig, error), env cliEnv) (base, noEndpoint string, err error) {
	if flagGiven(fs, "url") {
		base, err = daemonURL(rawURL)
		return base, "", err
	}
	c, err := cfg()
	if err != nil {
		return "", "", err
	}
	if c.Listen == "" {
		return "", fmt.Sprintf("has no HTTP endpoint configured (listen is empty in %s)", c.listenSource(env)), nil
	}
	base, err = listenURL(c.Listen)
	return base, "", err
}

// daemonURL reads --url: an http or https URL, or rubickd's listen
// setting as it is (HOST:PORT), which is taken as http://HOST:PORT. It
// returns the URL without a trailing slash.
func daemonURL(s string) (string, error) {
	full := s
	if !strings.Contains(s, "://") {
		full = "http://" + s
	}
	u, err := url.Parse(full)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%w: --url=%q: want http://HOST:PORT, or rubickd's listen setting (HOST:PORT)", errUsage, s)
	}
	return strings.TrimRight(full, "/"), nil
}

// newDaemonView is rubickd unreached, with empty lists, which its JSON
// shows as {} rather than null.
func newDaemonView() daemonView {
	return daemonView{Decided: map[string]int{}, Failed: map[int]string{}, Skipped: map[int]string{}, Ignored: map[int]string{}, Adjusted: map[int]string{}}
}

// probeDaemon asks /healthz and /status; errors are reported, not returned,
// because the store half of the status is still worth printing.
func probeDaemon(ctx context.Context, c *http.Client, base string, timeout time.Duration) daemonView {
	d := newDaemonView()
	body, code, err := get(ctx, c, base+"/healthz", timeout)
	if err != nil {
		d.Error = err.Error()
		return d
	}
	d.Reachable = true
	d.Healthy = code == http.StatusOK
	if !d.Healthy {
		d.Error = fmt.Sprintf("/healthz: HTTP %d: %s", code, strings.TrimSpace(string(body)))
	}
	body, code, err = get(ctx, c, base+"/status", timeout)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("HTTP %d", code)
	}
	var rep daemon.Status
	if err == nil {
		if jerr := json.Unmarshal(body, &rep); jerr != nil {
			err = fmt.Errorf("decode: %w", jerr)
		}
	}
	if err != nil {
		d.Error = strings.TrimPrefix(d.Error+"; ", "; ") + "/status: " + err.Error()
		return d
	}
	if !rep.At.IsZero() {
		at := rep.At
		d.LastCycle = &at
	}
	d.CycleID, d.Jobs, d.Instance = rep.CycleID, rep.Jobs, rep.Instance
	// The report lists every Slurm action the cycle ran, failed ones too.
	for _, a := range rep.Actions {
		if _, failed := rep.Failed[a.JobID]; !failed {
			d.Applied++
		}
	}
	d.DurationS, d.PolicyS = rep.Duration.Seconds(), rep.Policy.Seconds()
	for _, a := range rep.Plan.Actions {
		d.Decided[string(a.Kind)]++
	}
	maps.Copy(d.Failed, rep.Failed)
	maps.Copy(d.Skipped, rep.Skipped)
	maps.Copy(d.Ignored, rep.Ignored)
	maps.Copy(d.Adjusted, rep.Adjusted)
	d.Reserved, d.Groups, d.Queued, d.Failing, d.Waiting, d.Setup = rep.Reserved, rep.Groups, rep.Queued, rep.Failing, rep.Waiting, rep.Setup
	return d
}

func get(ctx context.Context, c *http.Client, url string, timeout time.Duration) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	// /status carries one cycle's plan: bounded, but not tiny.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", url, err)
	}
	return body, resp.StatusCode, nil
}

// statusStore is what status reads; *store.Store has it.
type statusStore interface {
	Jobs(ctx context.Context, f store.JobFilter) ([]store.Job, error)
	ModelTypes(ctx context.Context) ([]store.ModelType, error)
	Fits(ctx context.Context, modelType string) ([]store.Fit, error)
	RestartCosts(ctx context.Context, modelType string, limit int) ([]store.RestartCost, error)
}

func (v *statusView) readStore(ctx context.Context, st statusStore, now time.Time) error {
	jobs, err := st.Jobs(ctx, store.JobFilter{})
	if err != nil {
		return err
	}
	listed := func(id int) bool {
		for _, l := range v.Daemon.lists() {
			if _, ok := l.jobs[id]; ok {
				return true
			}
		}
		return false
	}
	for _, j := range jobs {
		if j.ModelType != "" {
			v.JobsByState[j.State]++
		} else {
			v.RigidByState[j.State]++
		}
		if name := arrayTaskName(j); name != "" && listed(int(j.ID)) {
			if v.ArrayTasks == nil {
				v.ArrayTasks = map[int]string{}
			}
			v.ArrayTasks[int(j.ID)] = name
		}
	}
	types, err := st.ModelTypes(ctx)
	if err != nil {
		return err
	}
	for _, t := range types {
		fits, err := st.Fits(ctx, t.Spec.Name)
		if err != nil {
			return err
		}
		m := modelView{Name: t.Spec.Name, FitCount: len(fits)}
		if i := slices.IndexFunc(fits, func(f store.Fit) bool { return f.Current }); i >= 0 {
			m.Fit = newFitView(fits[i], t.Spec, now)
			for _, d := range m.Fit.Doubts {
				v.Notes = append(v.Notes, fmt.Sprintf("the fit of %s is in doubt: %s; check its spec (docs/admin-guide.md, Correcting a model type's spec)", t.Spec.Name, d))
			}
		}
		restarts, err := st.RestartCosts(ctx, t.Spec.Name, 0)
		if err != nil {
			return err
		}
		if m.RestartsMeasured = len(restarts); m.RestartsMeasured > 0 {
			c := daemon.RestartCostOf(restarts).Seconds()
			m.RestartCostS = &c
		}
		v.Models = append(v.Models, m)
	}
	return nil
}

// queueNote says how many jobs of class queue and the longest any has.
func queueNote(class string, q map[string]daemon.Queue) string {
	c := q[class]
	if c.Jobs == 0 {
		return "0 " + class
	}
	return fmt.Sprintf("%d %s (longest %s)", c.Jobs, class, c.Longest.Round(time.Second))
}

func (v *statusView) write(w io.Writer) error {
	ew := &stickyWriter{w: w}
	d := v.Daemon
	switch {
	case v.URL == "":
		fmt.Fprintf(ew, "rubickd %s\n", d.Error)
	case !d.Reachable:
		fmt.Fprintf(ew, "rubickd %s: DOWN (%s)\n", v.URL, d.Error)
	case d.LastCycle == nil:
		fmt.Fprintf(ew, "rubickd %s: %s, no cycle yet%s%s%s\n", v.URL, health(d), colonDetail(d.Error), failingNote(d.Failing), waitingNote(d.Waiting))
		writeSetup(ew, d.Setup)
	default:
		fmt.Fprintf(ew, "rubickd %s%s: %s, last cycle %d at %s took %.3fs (policy %.3fs), %d jobs%s%s%s\n", v.URL, instanceNote(d), health(d),
			d.CycleID, utcTime(*d.LastCycle), d.DurationS, d.PolicyS, d.Jobs, colonDetail(d.Error), failingNote(d.Failing), waitingNote(d.Waiting))
		writeSetup(ew, d.Setup)
		fmt.Fprintf(ew, "  decided: %s; applied %d, failed %d, skipped %d, ignored %d, adjusted %d\n",
			counts(d.Decided), d.Applied, len(d.Failed), len(d.Skipped), len(d.Ignored), len(d.Adjusted))
		for _, l := range d.lists() {
			for _, id := range sortedKeys(l.jobs) {
				fmt.Fprintf(ew, "    %s job %s: %s\n", l.name, jobLabel(int64(id), v.ArrayTasks[id]), continued(l.jobs[id]))
			}
		}
		if len(d.Queued) > 0 {
			fmt.Fprintf(ew, "  queued: %s, %s\n", queueNote(slurm.ClassGuaranteed, d.Queued), queueNote(slurm.ClassBestEffort, d.Queued))
		}
		if r := d.Reserved; r != nil {
			fmt.Fprintf(ew, "  held for rigid job %d: %d free GPUs on %s\n", r.JobID, r.GPUs, strings.Join(r.Nodes, ","))
		}
		if len(d.Groups) > 0 {
			fmt.Fprintln(ew, "  group limits (in use / allowed):")
			for _, g := range d.Groups {
				if s := groupUse(g); s != "" {
					fmt.Fprintf(ew, "    %s\n", s)
				}
			}
		}
	}
	if v.StoreError != "" {
		fmt.Fprintf(ew, "store %s: NOT READ (%s)\n", v.Store, v.StoreError)
	} else {
		fmt.Fprintf(ew, "store %s\n", v.Store)
		fmt.Fprintf(ew, "  managed jobs by state: %s\n", counts(v.JobsByState))
		fmt.Fprintf(ew, "  rigid jobs by state:   %s\n", counts(v.RigidByState))
		if len(v.Models) == 0 {
			fmt.Fprintln(ew, "  no model types")
		} else {
			tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  model type\tfit\tRMSLE\tMAPE %\tsamples\torigin\tage\tfits\trestart cost")
			for _, m := range v.Models {
				restart := "-"
				if m.RestartCostS != nil {
					restart = fmt.Sprintf("%.1fs (%d measured)", *m.RestartCostS, m.RestartsMeasured)
				}
				if m.Fit == nil {
					fmt.Fprintf(tw, "  %s\tnone\t-\t-\t-\t-\t-\t%d\t%s\n", m.Name, m.FitCount, restart)
					continue
				}
				f := m.Fit
				origin := f.Origin
				if f.ParamSource != "" {
					origin += " (from " + f.ParamSource + ")"
				}
				fmt.Fprintf(tw, "  %s\t#%d\t%.4f\t%.2f\t%d\t%s\t%s\t%d\t%s\n", m.Name, f.ID, f.RMSLE, f.MAPE, f.Samples, origin, ageString(f.AgeS), m.FitCount, restart)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	for _, n := range v.Notes {
		fmt.Fprintf(ew, "note: %s\n", n)
	}
	return ew.err
}

// instanceNote names the rubickd as its tags do: " (by=head1/4242/...)".
func instanceNote(d daemonView) string {
	if d.Instance == "" {
		return ""
	}
	return " (by=" + d.Instance + ")"
}

// failingNote says that the cycles since the last completed one failed:
// "; 7 cycles failed since 2026-11-25T07:48:15Z: read jobs: ..."; ""
// when f is nil. /healthz stays 200 a while, so "healthy" alone would hide it.
func failingNote(f *daemon.Failing) string {
	if f == nil {
		return ""
	}
	cycles := "1 cycle"
	if f.Cycles != 1 {
		cycles = fmt.Sprintf("%d cycles", f.Cycles)
	}
	return fmt.Sprintf("; %s failed since %s: %s", cycles, utcTime(f.Since), f.Error)
}

// waitingNote says that the cycles since the last completed one decided
// nothing, waiting for released jobs to start: "; cycles since
// 2026-11-25T07:48:15Z wait for Slurm to start jobs 144, 145, which
// rubickd released (up to 60s each), and decide nothing"; "" when w is
// nil. Without it the last cycle's age would be unexplained.
func waitingNote(w *daemon.Waiting) string {
	if w == nil || len(w.Jobs) == 0 {
		return ""
	}
	ids := make([]string, len(w.Jobs))
	for i, id := range w.Jobs {
		ids[i] = strconv.Itoa(id)
	}
	jobs := "job " + ids[0]
	if len(ids) != 1 {
		jobs = "jobs " + strings.Join(ids, ", ")
	}
	return fmt.Sprintf("; cycles since %s wait for Slurm to start %s, which rubickd released (up to %.0fs each), and decide nothing",
		utcTime(w.Since), jobs, daemon.StartGrace.Seconds())
}

// continued indents the lines after the first of a reason (a command's
// stderr runs to several) under the line it belongs to, so they do not
// read as lines of status of their own.
func continued(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n      ")
}

// writeSetup writes the start-up checks that did not pass, one line
// each, under a line saying when they ran and how many failed and
// warned; nothing when s is nil. Those, not /healthz, tell a rubickd
// that cycles while a command or setting it needs is missing.
func writeSetup(w io.Writer, s *daemon.SetupChecks) {
	if s == nil {
		return
	}
	failed := s.Failed()
	fmt.Fprintf(w, "  setup checks at start %s (rubickd --check runs them again): %d failed, %d warned\n",
		utcTime(s.At), failed, len(s.Checks)-failed)
	for _, c := range s.Checks {
		what := "warned"
		if c.Status == daemon.CheckFail {
			what = "failed"
		}
		fmt.Fprintf(w, "    %s %s: %s\n", what, c.Name, continued(c.Detail))
	}
}

func health(d daemonView) string {
	if d.Healthy {
		return "healthy"
	}
	return "UNHEALTHY"
}

// counts renders "RUNNING=3 PENDING=1" in key order; "none" when empty.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// groupUse writes one group limit's use of what it bounds, by the name
// an admin sets each with: "QOS normal GrpTRES: 12/16 GPUs, 30/40
// billing; QOS normal GrpTRESRunMins: 600/640 GPU-minutes; QOS normal
// GrpJobs: 3/4 running jobs"; a budget's with what its jobs used: "QOS
// normal GrpTRESMins: 700/1000 GPU-minutes (100 used, 600 to run)"; ""
// when it bounds nothing.
func groupUse(g daemon.GroupUse) string {
	var names []string
	amounts := map[string][]string{}
	for _, b := range g.Bounds() {
		s := fmt.Sprintf("%d/%d %s", b.InUse, b.Allowed, b.What)
		if g.Spent != nil {
			s += fmt.Sprintf(" (%d used, %d to run)", b.Spent, b.InUse-b.Spent)
		}
		if _, seen := amounts[b.Limit]; !seen {
			names = append(names, b.Limit)
		}
		amounts[b.Limit] = append(amounts[b.Limit], s)
	}
	parts := make([]string, 0, len(names))
	for _, name := range names {
		parts = append(parts, name+": "+strings.Join(amounts[name], ", "))
	}
	return strings.Join(parts, "; ")
}
