package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rubick-sched/rubick/slurm/gen/v0041"
	"github.com/rubick-sched/rubick/slurm/gen/v0042"
)

// v41 adapts the generated v0.0.41 client (Slurm 24.05 to 24.11) and the
// v0.0.42 one (24.11 and later). The answers of v0.0.42 differ from those
// of v0.0.41 only in fields this adapter neither reads nor sends
// (TestV42AnswersAsV41 checks both specifications), so both decode into
// the v0.0.41 types; only the calls go through each version's client.
type v41 struct {
	c      *RESTCluster
	ver    string // Version41 or Version42
	api    restCalls
	server string // base URL, for the /slurmdb paths no client has
	http   v0041.HttpRequestDoer
}

// restCalls are the generated client's requests this adapter makes,
// returning the raw answers it decodes.
type restCalls interface {
	ping(ctx context.Context) (*http.Response, error)
	jobs(ctx context.Context, updateTime *string) (*http.Response, error)
	job(ctx context.Context, id string) (*http.Response, error)
	nodes(ctx context.Context) (*http.Response, error)
	partitions(ctx context.Context) (*http.Response, error)
	reservations(ctx context.Context) (*http.Response, error)
	licenses(ctx context.Context) (*http.Response, error)
	submit(ctx context.Context, body io.Reader) (*http.Response, error)
}

func newV41(ver, base string, d *doer, c *RESTCluster) (*v41, error) {
	var (
		calls restCalls
		err   error
	)
	switch ver {
	case Version41:
		var api *v0041.Client
		api, err = v0041.NewClient(base, v0041.WithHTTPClient(d))
		calls = calls41{api}
	case Version42:
		var api *v0042.Client
		api, err = v0042.NewClient(base, v0042.WithHTTPClient(d))
		calls = calls42{api}
	default:
		return nil, fmt.Errorf("slurm: %w: %q", ErrUnsupportedVersion, ver)
	}
	if err != nil {
		return nil, fmt.Errorf("slurm: %s client: %w", ver, err)
	}
	return &v41{c: c, ver: ver, api: calls, server: base, http: d}, nil
}

type calls41 struct{ c *v0041.Client }

func (a calls41) ping(ctx context.Context) (*http.Response, error) { return a.c.SlurmV0041GetPing(ctx) }
func (a calls41) jobs(ctx context.Context, ut *string) (*http.Response, error) {
	return a.c.SlurmV0041GetJobs(ctx, &v0041.SlurmV0041GetJobsParams{UpdateTime: ut})
}
func (a calls41) job(ctx context.Context, id string) (*http.Response, error) {
	return a.c.SlurmV0041GetJob(ctx, id, nil)
}
func (a calls41) nodes(ctx context.Context) (*http.Response, error) {
	return a.c.SlurmV0041GetNodes(ctx, nil)
}
func (a calls41) partitions(ctx context.Context) (*http.Response, error) {
	return a.c.SlurmV0041GetPartitions(ctx, nil)
}
func (a calls41) reservations(ctx context.Context) (*http.Response, error) {
	return a.c.SlurmV0041GetReservations(ctx, nil)
}
func (a calls41) licenses(ctx context.Context) (*http.Response, error) {
	return a.c.SlurmV0041GetLicenses(ctx)
}
func (a calls41) submit(ctx context.Context, body io.Reader) (*http.Response, error) {
	return a.c.SlurmV0041PostJobSubmitWithBody(ctx, "application/json", body)
}

type calls42 struct{ c *v0042.Client }

func (a calls42) ping(ctx context.Context) (*http.Response, error) { return a.c.SlurmV0042GetPing(ctx) }
func (a calls42) jobs(ctx context.Context, ut *string) (*http.Response, error) {
	return a.c.SlurmV0042GetJobs(ctx, &v0042.SlurmV0042GetJobsParams{UpdateTime: ut})
}
func (a calls42) job(ctx context.Context, id string) (*http.Response, error) {
	return a.c.SlurmV0042GetJob(ctx, id, nil)
}
func (a calls42) nodes(ctx context.Context) (*http.Response, error) {
	return a.c.SlurmV0042GetNodes(ctx, nil)
}
func (a calls42) partitions(ctx context.Context) (*http.Response, error) {
	return a.c.SlurmV0042GetPartitions(ctx, nil)
}
func (a calls42) reservations(ctx context.Context) (*http.Response, error) {
	return a.c.SlurmV0042GetReservations(ctx, nil)
}
func (a calls42) licenses(ctx context.Context) (*http.Response, error) {
	return a.c.SlurmV0042GetLicenses(ctx)
}
func (a calls42) submit(ctx context.Context, body io.Reader) (*http.Response, error) {
	return a.c.SlurmV0042PostJobSubmitWithBody(ctx, "application/json", body)
}

// ep names an endpoint of this version in errors and logs.
func (b *v41) ep(method, path string) string {
	return method + " /slurm/" + b.ver + "/" + path
}

// noVal is the shape of 24.11's {set, infinite, number} objects as the
// generator writes them (an unnamed struct, identical for every field).
type noVal[T int32 | int64 | float64] = struct {
	Infinite *bool `json:"infinite,omitempty"`
	Number   *T    `json:"number,omitempty"`
	Set      *bool `json:"set,omitempty"`
}

// num returns a {set, infinite, number} value; unset or infinite give 0.
func num[T int32 | int64 | float64](v *noVal[T]) int64 {
	if v == nil || !deref(v.Set) || deref(v.Infinite) || v.Number == nil {
		return 0
	}
	return int64(*v.Number)
}

// isZero reports a {set, infinite, number} value set to 0.
func isZero[T int32 | int64 | float64](v *noVal[T]) bool {
	return v != nil && deref(v.Set) && !deref(v.Infinite) && v.Number != nil && *v.Number == 0
}

// v41Overlay re-reads the job fields whose real range exceeds the spec:
// priority is an int32 in the spec but a uint32 in Slurm (4294901729 is a
// normal priority/basic value), which the generated type cannot hold.
type v41Overlay struct {
	Jobs []struct {
		Priority flexInt `json:"priority"`
	} `json:"jobs"`
}

func (b *v41) ping(ctx context.Context) error {
	ep := b.ep("GET", "ping/")
	r, err := get[v0041.V0041OpenapiPingArrayResp](ctx, b.c, ep, b.api.ping)
	if err != nil {
		return err
	}
	var hosts, states []string
	for _, p := range r.Pings {
		hosts, states = append(hosts, deref(p.Hostname)), append(states, deref(p.Pinged))
	}
	return controllersUp(ep, hosts, states)
}

func (b *v41) jobs(ctx context.Context, since time.Time) ([]Job, bool, error) {
	ep := b.ep("GET", "jobs/")
	var updateTime *string
	if !since.IsZero() {
		// 24.11 parses update_time as a Slurm time: a bare number is
		// refused (422, "Parsing of N for timestamp failed"), "uts<N>"
		// is seconds since the epoch (checked on the chroot lab).
		t := "uts" + strconv.FormatInt(since.Unix(), 10)
		updateTime = &t
	}
	status, body, err := b.c.call(ctx, ep, func(ctx context.Context) (*http.Response, error) { return b.api.jobs(ctx, updateTime) })
	if err != nil {
		return nil, false, err
	}
	if status == http.StatusNotModified {
		return nil, false, nil
	}
	js, err := b.decodeJobs(ep, status, body)
	if err == nil && len(js) == 0 && !since.IsZero() && unchangedList(body) {
		return nil, false, nil
	}
	return js, true, err
}

// unchangedList reports a 24.11 answer to update_time meaning "nothing
// changed": no jobs and last_update 0, where 22.05 answered 304. A full
// list, even an empty one, carries the controller's last update time.
func unchangedList(body []byte) bool {
	var r struct {
		LastUpdate flexInt `json:"last_update"`
	}
	return json.Unmarshal(body, &r) == nil && r.LastUpdate.Set && r.LastUpdate.Value == 0
}

func (b *v41) job(ctx context.Context, id int) (Job, error) {
	ep := b.ep("GET", "job/"+strconv.Itoa(id))
	status, body, err := b.c.call(ctx, ep, func(ctx context.Context) (*http.Response, error) {
		return b.api.job(ctx, strconv.Itoa(id))
	})
	if err != nil {
		return Job{}, err
	}
	js, err := b.decodeJobs(ep, status, body)
	if err != nil {
		return Job{}, err
	}
	return findJob(js, id, ep)
}

func (b *v41) decodeJobs(ep string, status int, body []byte) ([]Job, error) {
	var r v0041.V0041OpenapiJobInfoResp
	if err := b.c.answer(ep, status, body, &r); err != nil {
		return nil, err
	}
	var ov v41Overlay
	if err := json.Unmarshal(body, &ov); err != nil || len(ov.Jobs) != len(r.Jobs) {
		return nil, fmt.Errorf("slurmrestd %s: decoding job priorities: %v (%d of %d jobs)", ep, err, len(ov.Jobs), len(r.Jobs))
	}
	out := make([]Job, 0, len(r.Jobs))
	for i, w := range r.Jobs {
		var states []string
		for _, s := range deref(w.JobState) {
			states = append(states, string(s))
		}
		state, flags := jobState(states)
		j := Job{
			ID:            int(deref(w.JobId)),
			Name:          deref(w.Name),
			User:          deref(w.UserName),
			Account:       deref(w.Account),
			Cluster:       deref(w.Cluster),
			Partition:     deref(w.Partition),
			QOS:           deref(w.Qos),
			State:         state,
			StateFlags:    flags,
			Reason:        reason(deref(w.StateReason)),
			Priority:      ov.Jobs[i].Priority.Value,
			BatchHost:     deref(w.BatchHost),
			NodeCount:     int(num(w.NodeCount)),
			CPUs:          int(num(w.Cpus)),
			CPUsPerTask:   int(num(w.CpusPerTask)),
			Tasks:         int(num(w.Tasks)),
			MemPerNodeMB:  num(w.MemoryPerNode),
			MemPerCPUMB:   num(w.MemoryPerCpu),
			MemPerGPUMB:   memPerGPU(deref(w.MemoryPerTres)),
			Requeue:       deref(w.Requeue),
			RestartCount:  int(deref(w.RestartCnt)),
			SubmitTime:    unixTime(num(w.SubmitTime)),
			EligibleTime:  unixTime(num(w.EligibleTime)),
			Deadline:      unixTime(num(w.Deadline)),
			StartTime:     unixTime(num(w.StartTime)),
			SuspendTime:   unixTime(num(w.SuspendTime)),
			PreSuspend:    time.Duration(num(w.PreSusTime)) * time.Second,
			Nice:          int(deref(w.Nice)),
			TRESReq:       deref(w.TresReqStr),
			TimeLimit:     minutes(num(w.TimeLimit)),
			TimeMin:       minutes(num(w.TimeMinimum)),
			Comment:       deref(w.Comment),
			ArrayTasks:    deref(w.ArrayTaskString),
			Constraint:    deref(w.Features),
			Dependency:    dependency(deref(w.Dependency)),
			ArrayJobID:    int(num(w.ArrayJobId)),
			ArrayTaskID:   int(num(w.ArrayTaskId)),
			ArrayMaxTasks: int(num(w.ArrayMaxTasks)),
			HetJobID:      int(num(w.HetJobId)),
			HetJobOffset:  int(num(w.HetJobOffset)),
			Reservation:   deref(w.ResvName),
			Interactive:   w.BatchFlag != nil && !*w.BatchFlag,
			Licenses:      deref(w.Licenses),
			AdminComment:  deref(w.AdminComment),
			WorkDir:       deref(w.CurrentWorkingDirectory),
		}
		for _, f := range deref(w.Shared) {
			j.Exclusive = j.Exclusive || exclusive(string(f))
		}
		j.Held = j.State == StatePending &&
			(deref(w.Hold) || ov.Jobs[i].Priority.Set && j.Priority == 0 || heldReason(j.Reason))
		setJobResources(&j, jobTRES{nodes: deref(w.Nodes), excluded: deref(w.ExcludedNodes), required: deref(w.RequiredNodes),
			perNode: deref(w.TresPerNode), perJob: deref(w.TresPerJob), perTask: deref(w.TresPerTask), alloc: deref(w.TresAllocStr),
			req: deref(w.TresReqStr), cpusPerTres: deref(w.CpusPerTres), gresDetail: deref(w.GresDetail)})
		out = append(out, b.c.finishJob(j))
	}
	return out, nil
}

func (b *v41) nodes(ctx context.Context) ([]Node, error) {
	ep := b.ep("GET", "nodes/")
	r, err := get[v0041.V0041OpenapiNodesResp](ctx, b.c, ep, b.api.nodes)
	if err != nil {
		return nil, err
	}
	out := make([]Node, 0, len(r.Nodes))
	for _, n := range r.Nodes {
		var words []string
		for _, s := range deref(n.State) {
			words = append(words, string(s))
		}
		state, flags := nodeState(words)
		out = append(out, Node{
			Name:       deref(n.Name),
			State:      state,
			Flags:      flags,
			GPUs:       gpusFromGres(deref(n.Gres)),
			GPUTypes:   gpuTypes(deref(n.Gres)),
			GPUsUsed:   gpusFromGres(deref(n.GresUsed)),
			GresFree:   gresFree(deref(n.Gres), deref(n.GresUsed)),
			CPUs:       int(deref(n.Cpus)),
			CPUsAlloc:  int(deref(n.AllocCpus)),
			MemMB:      deref(n.RealMemory),
			MemAllocMB: deref(n.AllocMemory),
			Partitions: deref(n.Partitions),
			Reason:     deref(n.Reason),
			Features:   deref(n.ActiveFeatures),
		})
	}
	return out, nil
}

func (b *v41) qos(ctx context.Context) ([]QOS, error) {
	r, err := getDB[dbQOSList](ctx, b, "slurmdb/"+b.ver+"/qos", nil)
	return r.convert(), err
}

func (b *v41) associations(ctx context.Context, cluster string) ([]Association, error) {
	var query url.Values
	if cluster != "" {
		query = url.Values{"cluster": {cluster}}
	}
	r, err := getDB[dbAssocList](ctx, b, "slurmdb/"+b.ver+"/associations", query)
	return r.convert(), err
}

// getDB reads a /slurmdb path, which the generated client lacks (the
// shipped specification was served without the database plugin). A
// slurmrestd without that plugin answers 404: ErrUnsupported, so the
// limits come from the partitions alone, as before.
func getDB[T any](ctx context.Context, b *v41, path string, query url.Values) (T, error) {
	ep := "GET /" + path
	r, err := get[T](ctx, b.c, ep, func(ctx context.Context) (*http.Response, error) {
		u, err := url.JoinPath(b.server, path)
		if err != nil {
			return nil, err
		}
		if len(query) > 0 {
			u += "?" + query.Encode()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		return b.http.Do(req)
	})
	if apiErr, ok := errors.AsType[*APIError](err); ok && apiErr.Status == http.StatusNotFound {
		return r, fmt.Errorf("slurmrestd %s: no database plugin: %w", ep, ErrUnsupported)
	}
	return r, err
}

func (b *v41) reservations(ctx context.Context) ([]Reservation, error) {
	ep := b.ep("GET", "reservations/")
	r, err := get[v0041.V0041OpenapiReservationResp](ctx, b.c, ep, b.api.reservations)
	if err != nil {
		return nil, err
	}
	var out []Reservation
	for _, v := range r.Reservations {
		nodes, err := ExpandHostlist(deref(v.NodeList))
		if err != nil {
			return nil, fmt.Errorf("slurmrestd %s: reservation %s: %w", ep, deref(v.Name), err)
		}
		var flags []string
		for _, f := range deref(v.Flags) {
			flags = append(flags, string(f))
		}
		out = append(out, Reservation{Name: deref(v.Name), Nodes: nodes, Start: unixTime(num(v.StartTime)),
			End: unixTime(num(v.EndTime)), Flags: upperAll(flags)})
	}
	return out, nil
}

func (b *v41) licenses(ctx context.Context) ([]License, error) {
	ep := b.ep("GET", "licenses/")
	r, err := get[v0041.V0041OpenapiLicensesResp](ctx, b.c, ep, b.api.licenses)
	if err != nil {
		return nil, err
	}
	out := make([]License, 0, len(r.Licenses))
	for _, l := range r.Licenses {
		out = append(out, License{Name: deref(l.LicenseName), Total: int(deref(l.Total)), Used: int(deref(l.Used)), Free: int(deref(l.Free))})
	}
	return out, nil
}

func (b *v41) partitions(ctx context.Context) ([]Partition, error) {
	ep := b.ep("GET", "partitions/")
	r, err := get[v0041.V0041OpenapiPartitionResp](ctx, b.c, ep, b.api.partitions)
	if err != nil {
		return nil, err
	}
	out := make([]Partition, 0, len(r.Partitions))
	for _, p := range r.Partitions {
		part := Partition{Name: deref(p.Name)}
		if p.Nodes != nil {
			nodes, err := ExpandHostlist(deref(p.Nodes.Configured))
			if err != nil {
				return nil, fmt.Errorf("slurmrestd %s: partition %s: %w", ep, part.Name, err)
			}
			part.Nodes, part.TotalNodes = nodes, int(deref(p.Nodes.Total))
		}
		if p.Cpus != nil {
			part.TotalCPUs = int(deref(p.Cpus.Total))
		}
		if p.Qos != nil {
			part.QOS = deref(p.Qos.Assigned)
		}
		if p.Priority != nil {
			part.PriorityJobFactor, part.PriorityTier = int(deref(p.Priority.JobFactor)), int(deref(p.Priority.Tier))
		}
		if p.Tres != nil {
			part.TRES = deref(p.Tres.Configured)
			w, err := ParseBillingWeights(deref(p.Tres.BillingWeights))
			if err != nil {
				w = unreadBilling(err)
			}
			part.Billing = w
		}
		if p.Minimums != nil {
			part.MinNodesPerJob = int(max(deref(p.Minimums.Nodes), 0))
		}
		if p.Maximums != nil {
			part.MaxNodesPerJob = int(num(p.Maximums.Nodes))
			part.MaxTime = minutes(num(p.Maximums.Time))
			part.MaxCPUsPerNode = int(num(p.Maximums.CpusPerNode))
			part.MaxMemPerNodeMB = num(p.Maximums.PartitionMemoryPerNode)
			part.MaxMemPerCPUMB = num(p.Maximums.PartitionMemoryPerCpu)
			// Set to 0 is a limit; unlimited is infinite.
			part.Zero = partitionZero(isZero(p.Maximums.Nodes), isZero(p.Maximums.Time))
		}
		if p.Partition != nil {
			var words []string
			for _, s := range deref(p.Partition.State) {
				words = append(words, string(s))
			}
			if len(words) > 0 {
				part.State = upperAll(words)[0]
			}
		}
		out = append(out, part)
	}
	return out, nil
}

func (b *v41) submit(ctx context.Context, req SubmitRequest) (int, error) {
	ep := b.ep("POST", "job/submit")
	// From v0.0.41 on the environment is a list of "K=V" and the script moves
	// into the job description.
	env := envOrDefault(req.Env)
	d := v0041.V0041JobDescMsg{
		Environment: &env,
		Script:      &req.Script,
		Requeue:     &req.Requeue,
	}
	setStr := func(dst **string, v string) {
		if v != "" {
			*dst = &v
		}
	}
	setI32 := func(dst **int32, v int) {
		if v > 0 {
			n := int32(v)
			*dst = &n
		}
	}
	setStr(&d.Name, req.Name)
	setStr(&d.Partition, req.Partition)
	setStr(&d.Comment, req.Comment)
	setStr(&d.AdminComment, req.AdminComment)
	setStr(&d.CurrentWorkingDirectory, req.WorkDir)
	setStr(&d.StandardOutput, req.StdOut)
	setI32(&d.MinimumNodes, req.Nodes)
	setI32(&d.MaximumNodes, req.Nodes)
	setI32(&d.Tasks, req.Tasks)
	setI32(&d.CpusPerTask, req.CPUsPerTask)
	if req.GPUsPerNode > 0 {
		setStr(&d.TresPerNode, "gres/gpu:"+strconv.Itoa(req.GPUsPerNode))
	}
	if req.MemPerNodeMB > 0 {
		set, mem := true, req.MemPerNodeMB
		d.MemoryPerNode = &noVal[int64]{Set: &set, Number: &mem}
	}
	if req.Hold {
		d.Hold = &req.Hold
	}
	raw, err := json.Marshal(v0041.V0041JobSubmitReq{Job: &d})
	if err != nil {
		return 0, err
	}
	status, resp, err := b.c.call(ctx, ep, func(ctx context.Context) (*http.Response, error) {
		return b.api.submit(ctx, bytes.NewReader(raw))
	})
	var r v0041.V0041OpenapiJobSubmitResponse
	if len(resp) > 0 {
		if derr := b.c.decode(ep, resp, &r); derr != nil && err == nil {
			return 0, derr
		}
	}
	// 24.11 reports the held state (2042) under warnings and in
	// result.error_code, not under errors.
	return submitResult(ep, status, int(deref(r.JobId)), resp, err)
}
