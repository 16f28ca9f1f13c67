package slurm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rubick-sched/rubick/slurm/gen/v0038"
)

// v38 adapts the generated v0.0.38 client (Slurm 22.05).
type v38 struct {
	c   *RESTCluster
	api *v0038.Client
}

func newV38(base string, d *doer, c *RESTCluster) (*v38, error) {
	api, err := v0038.NewClient(base, v0038.WithHTTPClient(d))
	if err != nil {
		return nil, fmt.Errorf("slurm: v0.0.38 client: %w", err)
	}
	return &v38{c: c, api: api}, nil
}

// The generated v0.0.38 types follow the spec, but 22.05 sends the meta
// version numbers as integers (the spec says strings) and errors with
// error_code (the spec says error_number). These wrappers shadow those
// fields with raw JSON (errors are read by parseErrors); the embedded
// generated type decodes the rest.
type (
	v38Jobs struct {
		v0038.V0038JobsResponse
		Meta   json.RawMessage `json:"meta"`
		Errors json.RawMessage `json:"errors"`
		Jobs   []v38Job        `json:"jobs"`
	}
	v38Job struct {
		v0038.V0038JobResponseProperties
		// cpus_per_task is a string in the spec, a number (or null) on the wire.
		CpusPerTask flexInt `json:"cpus_per_task"`
	}
	v38Nodes struct {
		v0038.V0038NodesResponse
		Meta   json.RawMessage `json:"meta"`
		Errors json.RawMessage `json:"errors"`
	}
	v38Partitions struct {
		v0038.V0038PartitionsResponse
		Meta       json.RawMessage `json:"meta"`
		Errors     json.RawMessage `json:"errors"`
		Partitions *[]v38Partition `json:"partitions"`
	}
	v38Partition struct {
		v0038.V0038Partition
		// 22.05 writes MinNodes under this key, and leaves the spec's
		// min_nodes_per_job out (22.05 lab, MinNodes=2).
		MinNodes *int `json:"min nodes per job"`
	}
	v38Licenses struct {
		v0038.V0038Licenses
		Meta   json.RawMessage `json:"meta"`
		Errors json.RawMessage `json:"errors"`
	}
	v38Reservations struct {
		v0038.V0038ReservationsResponse
		Meta   json.RawMessage `json:"meta"`
		Errors json.RawMessage `json:"errors"`
	}
	v38Pings struct {
		v0038.V0038Pings
		Meta   json.RawMessage `json:"meta"`
		Errors json.RawMessage `json:"errors"`
	}
	v38Submit struct {
		v0038.V0038JobSubmissionResponse
		Meta   json.RawMessage `json:"meta"`
		Errors json.RawMessage `json:"errors"`
	}
)

func (b *v38) ping(ctx context.Context) error {
	const ep = "GET /slurm/v0.0.38/ping"
	r, err := get[v38Pings](ctx, b.c, ep, func(ctx context.Context) (*http.Response, error) { return b.api.SlurmV0038Ping(ctx) })
	if err != nil {
		return err
	}
	var hosts, states []string
	for _, p := range deref(r.Pings) {
		hosts, states = append(hosts, deref(p.Hostname)), append(states, string(deref(p.Ping)))
	}
	return controllersUp(ep, hosts, states)
}

func (b *v38) jobs(ctx context.Context, since time.Time) ([]Job, bool, error) {
	const ep = "GET /slurm/v0.0.38/jobs"
	var params v0038.SlurmV0038GetJobsParams
	if !since.IsZero() {
		t := since.Unix()
		params.UpdateTime = &t
	}
	status, body, err := b.c.call(ctx, ep, func(ctx context.Context) (*http.Response, error) { return b.api.SlurmV0038GetJobs(ctx, &params) })
	if err != nil {
		return nil, false, err
	}
	if status == http.StatusNotModified {
		return nil, false, nil
	}
	js, err := b.decodeJobs(ep, status, body)
	return js, true, err
}

func (b *v38) job(ctx context.Context, id int) (Job, error) {
	ep := "GET /slurm/v0.0.38/job/" + strconv.Itoa(id)
	status, body, err := b.c.call(ctx, ep, func(ctx context.Context) (*http.Response, error) {
		return b.api.SlurmV0038GetJob(ctx, strconv.Itoa(id))
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

func (b *v38) decodeJobs(ep string, status int, body []byte) ([]Job, error) {
	var r v38Jobs
	if err := b.c.answer(ep, status, body, &r); err != nil {
		return nil, err
	}
	out := make([]Job, 0, len(r.Jobs))
	for _, w := range r.Jobs {
		out = append(out, b.c.finishJob(w.domain()))
	}
	return out, nil
}

func (w v38Job) domain() Job {
	j := Job{
		ID:            deref(w.JobId),
		Name:          deref(w.Name),
		User:          deref(w.UserName),
		Account:       deref(w.Account),
		Cluster:       deref(w.Cluster),
		Partition:     deref(w.Partition),
		QOS:           deref(w.Qos),
		Reason:        reason(deref(w.StateReason)),
		Priority:      int64(deref(w.Priority)),
		BatchHost:     deref(w.BatchHost),
		NodeCount:     deref(w.NodeCount),
		CPUs:          deref(w.Cpus),
		CPUsPerTask:   int(w.CpusPerTask.Value),
		Tasks:         deref(w.Tasks),
		MemPerNodeMB:  int64(deref(w.MemoryPerNode)),
		MemPerCPUMB:   int64(deref(w.MemoryPerCpu)),
		MemPerGPUMB:   memPerGPU(deref(w.MemoryPerTres)),
		Requeue:       deref(w.Requeue),
		RestartCount:  deref(w.RestartCnt),
		SubmitTime:    unixTime(deref(w.SubmitTime)),
		EligibleTime:  unixTime(deref(w.EligibleTime)),
		Deadline:      unixTime(int64(deref(w.Deadline))),
		StartTime:     unixTime(deref(w.StartTime)),
		SuspendTime:   unixTime(deref(w.SuspendTime)),
		PreSuspend:    time.Duration(deref(w.PreSusTime)) * time.Second,
		Nice:          nice38(deref(w.Nice)),
		TRESReq:       deref(w.TresReqStr),
		TimeLimit:     minutes(deref(w.TimeLimit)),
		TimeMin:       minutes(deref(w.TimeMinimum)),
		Comment:       deref(w.Comment),
		ArrayTasks:    deref(w.ArrayTaskString),
		Constraint:    deref(w.Features),
		Dependency:    dependency(deref(w.Dependency)),
		Exclusive:     exclusive(deref(w.Shared)),
		ArrayJobID:    deref(w.ArrayJobId),
		ArrayTaskID:   deref(w.ArrayTaskId),
		ArrayMaxTasks: deref(w.ArrayMaxTasks),
		HetJobID:      deref(w.HetJobId),
		HetJobOffset:  deref(w.HetJobOffset),
		Reservation:   deref(w.ResvName),
		Interactive:   w.BatchFlag != nil && !*w.BatchFlag,
		Licenses:      deref(w.Licenses),
		AdminComment:  deref(w.AdminComment),
		WorkDir:       deref(w.CurrentWorkingDirectory),
	}
	j.State, j.StateFlags = jobState38(deref(w.JobState))
	j.Held = j.State == StatePending && (w.Priority != nil && j.Priority == 0 || heldReason(j.Reason))
	setJobResources(&j, jobTRES{nodes: deref(w.Nodes), excluded: deref(w.ExcludedNodes), required: deref(w.RequiredNodes),
		perNode: deref(w.TresPerNode), perJob: deref(w.TresPerJob), perTask: deref(w.TresPerTask), alloc: deref(w.TresAllocStr),
		req: deref(w.TresReqStr), cpusPerTres: deref(w.CpusPerTres), gresDetail: deref(w.GresDetail)})
	return j
}

func (b *v38) nodes(ctx context.Context) ([]Node, error) {
	const ep = "GET /slurm/v0.0.38/nodes"
	r, err := get[v38Nodes](ctx, b.c, ep, func(ctx context.Context) (*http.Response, error) {
		return b.api.SlurmV0038GetNodes(ctx, nil)
	})
	if err != nil {
		return nil, err
	}
	var out []Node
	for _, n := range deref(r.Nodes) {
		state, flags := nodeState(strings.Split(deref(n.State), "+"))
		flags = append(flags, upperAll(deref(n.StateFlags))...)
		out = append(out, Node{
			Name:       deref(n.Name),
			State:      state,
			Flags:      flags,
			GPUs:       gpusFromGres(deref(n.Gres)),
			GPUTypes:   gpuTypes(deref(n.Gres)),
			GPUsUsed:   gpusFromGres(deref(n.GresUsed)),
			GresFree:   gresFree(deref(n.Gres), deref(n.GresUsed)),
			CPUs:       deref(n.Cpus),
			CPUsAlloc:  int(deref(n.AllocCpus)),
			MemMB:      int64(deref(n.RealMemory)),
			MemAllocMB: deref(n.AllocMemory),
			Partitions: deref(n.Partitions),
			Reason:     deref(n.Reason),
			Features:   splitList(deref(n.ActiveFeatures)),
		})
	}
	return out, nil
}

func (b *v38) qos(ctx context.Context) ([]QOS, error) {
	r, err := get[dbQOSList](ctx, b.c, "GET /slurmdb/v0.0.38/qos", func(ctx context.Context) (*http.Response, error) {
		return b.api.SlurmdbV0038GetQos(ctx, nil)
	})
	return r.convert(), err
}

func (b *v38) associations(ctx context.Context, cluster string) ([]Association, error) {
	var params *v0038.SlurmdbV0038GetAssociationsParams
	if cluster != "" {
		params = &v0038.SlurmdbV0038GetAssociationsParams{Cluster: &cluster}
	}
	r, err := get[dbAssocList](ctx, b.c, "GET /slurmdb/v0.0.38/associations", func(ctx context.Context) (*http.Response, error) {
		return b.api.SlurmdbV0038GetAssociations(ctx, params)
	})
	if apiErr, ok := errors.AsType[*APIError](err); ok && cluster != "" && slices.ContainsFunc(apiErr.Errors, func(e SlurmError) bool { return e.Code == errNothingFound }) {
		// 22.05 answers a filter that matches nothing with an error
		// (HTTP 500, "Nothing found with query"), as recorded on the lab:
		// a cluster slurmdbd holds no association of has none.
		return nil, nil
	}
	return r.convert(), err
}

// errNothingFound is Slurm's ESLURM_REST_EMPTY_RESULT (9003).
const errNothingFound = 9003

func (b *v38) reservations(ctx context.Context) ([]Reservation, error) {
	const ep = "GET /slurm/v0.0.38/reservations"
	r, err := get[v38Reservations](ctx, b.c, ep, func(ctx context.Context) (*http.Response, error) {
		return b.api.SlurmV0038GetReservations(ctx, nil)
	})
	if err != nil {
		return nil, err
	}
	var out []Reservation
	for _, v := range deref(r.Reservations) {
		nodes, err := ExpandHostlist(deref(v.NodeList))
		if err != nil {
			return nil, fmt.Errorf("slurmrestd %s: reservation %s: %w", ep, deref(v.Name), err)
		}
		out = append(out, Reservation{Name: deref(v.Name), Nodes: nodes, Start: unixTime(int64(deref(v.StartTime))),
			End: unixTime(int64(deref(v.EndTime))), Flags: upperAll(deref(v.Flags))})
	}
	return out, nil
}

func (b *v38) licenses(ctx context.Context) ([]License, error) {
	const ep = "GET /slurm/v0.0.38/licenses"
	r, err := get[v38Licenses](ctx, b.c, ep, func(ctx context.Context) (*http.Response, error) {
		return b.api.SlurmV0038SlurmctldGetLicenses(ctx)
	})
	if err != nil {
		return nil, err
	}
	var out []License
	for _, l := range deref(r.Licenses) {
		out = append(out, License{Name: deref(l.LicenseName), Total: deref(l.Total), Used: deref(l.Used), Free: deref(l.Free)})
	}
	return out, nil
}

func (b *v38) partitions(ctx context.Context) ([]Partition, error) {
	const ep = "GET /slurm/v0.0.38/partitions"
	r, err := get[v38Partitions](ctx, b.c, ep, func(ctx context.Context) (*http.Response, error) {
		return b.api.SlurmV0038GetPartitions(ctx, nil)
	})
	if err != nil {
		return nil, err
	}
	var out []Partition
	for _, p := range deref(r.Partitions) {
		nodes, err := ExpandHostlist(deref(p.Nodes))
		if err != nil {
			return nil, fmt.Errorf("slurmrestd %s: partition %s: %w", ep, deref(p.Name), err)
		}
		billing, err := ParseBillingWeights(deref(p.BillingWeights))
		if err != nil {
			billing = unreadBilling(err)
		}
		out = append(out, Partition{
			Name: deref(p.Name),
			// 0 is a limit, -1 none, and null not listed.
			Zero:       partitionZero(p.MaximumNodesPerJob != nil && *p.MaximumNodesPerJob == 0, p.MaxTimeLimit != nil && *p.MaxTimeLimit == 0),
			Billing:    billing,
			State:      strings.ToUpper(deref(p.State)),
			Nodes:      nodes,
			TotalCPUs:  deref(p.TotalCpus),
			TotalNodes: deref(p.TotalNodes),
			// -1: unlimited
			MaxNodesPerJob:    max(deref(p.MaximumNodesPerJob), 0),
			MinNodesPerJob:    max(deref(cmp.Or(p.MinNodes, p.MinNodesPerJob)), 0),
			MaxTime:           minutes(deref(p.MaxTimeLimit)),
			MaxCPUsPerNode:    max(deref(p.MaximumCpusPerNode), 0),
			MaxMemPerNodeMB:   max(deref(p.MaximumMemoryPerNode), 0),
			MaxMemPerCPUMB:    max(deref(p.MaximumMemoryPerCpu), 0),
			QOS:               deref(p.Qos),
			PriorityJobFactor: deref(p.PriorityJobFactor),
			PriorityTier:      deref(p.PriorityTier),
			TRES:              deref(p.Tres),
		})
	}
	return out, nil
}

// v38SubmitBody is written by hand: the spec's "nodes" is an array
// [min,max] that 22.05 silently ignores ([2,2] gives one node), while the
// string "n-n" works; "environment" is a dictionary in this version.
type v38SubmitBody struct {
	Job struct {
		Name         string            `json:"name,omitempty"`
		Partition    string            `json:"partition,omitempty"`
		Nodes        string            `json:"nodes,omitempty"`
		Tasks        int               `json:"tasks,omitempty"`
		CPUsPerTask  int               `json:"cpus_per_task,omitempty"`
		Gres         string            `json:"gres,omitempty"`
		MemPerNode   int64             `json:"memory_per_node,omitempty"`
		Hold         bool              `json:"hold,omitempty"`
		Requeue      bool              `json:"requeue"`
		Comment      string            `json:"comment,omitempty"`
		WorkDir      string            `json:"current_working_directory,omitempty"`
		StdOut       string            `json:"standard_output,omitempty"`
		Environment  map[string]string `json:"environment"`
		AdminComment string            `json:"admin_comment,omitempty"`
	} `json:"job"`
	Script string `json:"script"`
}

func (b *v38) submit(ctx context.Context, req SubmitRequest) (int, error) {
	const ep = "POST /slurm/v0.0.38/job/submit"
	var body v38SubmitBody
	j := &body.Job
	j.Name, j.Partition, j.Tasks, j.CPUsPerTask = req.Name, req.Partition, req.Tasks, req.CPUsPerTask
	if req.Nodes > 0 {
		j.Nodes = fmt.Sprintf("%d-%d", req.Nodes, req.Nodes)
	}
	if req.GPUsPerNode > 0 {
		j.Gres = "gpu:" + strconv.Itoa(req.GPUsPerNode)
	}
	j.MemPerNode, j.Hold, j.Requeue, j.Comment = req.MemPerNodeMB, req.Hold, req.Requeue, req.Comment
	j.WorkDir, j.StdOut = req.WorkDir, req.StdOut
	// v0.0.38 has no admin_comment on submit; it is sent anyway for
	// servers that accept it, and ignored otherwise.
	j.AdminComment = req.AdminComment
	j.Environment = map[string]string{}
	for _, kv := range envOrDefault(req.Env) {
		k, v, _ := strings.Cut(kv, "=")
		j.Environment[k] = v
	}
	body.Script = req.Script
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	status, resp, err := b.c.call(ctx, ep, func(ctx context.Context) (*http.Response, error) {
		return b.api.SlurmV0038SubmitJobWithBody(ctx, "application/json", bytes.NewReader(raw))
	})
	var r v38Submit
	if len(resp) > 0 {
		if derr := b.c.decode(ep, resp, &r); derr != nil && err == nil {
			return 0, derr
		}
	}
	return submitResult(ep, status, deref(r.JobId), resp, err)
}

// submitResult treats a job id with only "job held" (2042) errors as
// success, whatever the HTTP status.
func submitResult(ep string, status, id int, body []byte, callErr error) (int, error) {
	errs := parseErrors(body)
	onlyHeld := true
	for _, e := range errs {
		if e.Code != esJobHeld {
			onlyHeld = false
		}
	}
	if id > 0 && onlyHeld {
		return id, nil
	}
	if callErr != nil {
		return 0, callErr
	}
	if len(errs) > 0 {
		return 0, &APIError{Endpoint: ep, Status: status, Errors: errs}
	}
	return 0, fmt.Errorf("slurmrestd %s: no job id in the answer", ep)
}

func envOrDefault(env []string) []string {
	if len(env) == 0 {
		// slurmrestd rejects a submission without any environment.
		return []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	}
	return env
}

// nice38 reads v0.0.38's nice, which 22.05 prints as an unsigned 32-bit
// number: --nice=-100 reads 4294967196.
func nice38(v int) int { return int(int32(uint32(v))) }
