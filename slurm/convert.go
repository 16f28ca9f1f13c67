package slurm

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// heldReason reports whether a pending job's reason means it is held.
func heldReason(r string) bool {
	switch r {
	case "JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state":
		return true
	}
	return false
}

// reason drops Slurm's "None", which means no reason.
func reason(r string) string {
	if r == "None" {
		return ""
	}
	return r
}

// jobTRES is what slurmrestd says of a job's nodes and trackable resources.
type jobTRES struct {
	nodes, excluded, required            string
	perNode, perJob, perTask, alloc, req string
	cpusPerTres                          string
	gresDetail                           []string
}

// setJobResources fills the node lists and GPU counts from the strings both
// API versions share.
func setJobResources(j *Job, t jobTRES) {
	var bad []error
	expand := func(field, s string) []string {
		list, err := ExpandHostlist(s)
		if err != nil {
			bad = append(bad, fmt.Errorf("%s: %w", field, err))
		}
		return list
	}
	j.NodeList = expand("nodes", t.nodes)
	j.Excluded = expand("excluded_nodes", t.excluded)
	j.RequiredNodes = expand("required_nodes", t.required)
	j.NodesErr = errors.Join(bad...)
	j.GPUsPerNode = gpusFromGres(t.perNode)
	j.OtherGres = otherGres(t.perNode)
	j.GPUTypes = gpuTypes(t.perNode + "," + t.perJob + "," + t.perTask)
	if j.GPUsPerNode == 0 && j.State == StatePending {
		// --gpus=N or --gpus-per-task asks for GPUs per job or task; the
		// total over the job's nodes is the per-node count rubick's
		// resize (Gres=gpu:N) replaces it with. tres_req_str has the
		// total only where AccountingStorageTRES lists gres/gpu.
		total := tresGPUs(t.req)
		if total == 0 {
			total = gpusFromGres(t.perJob) + gpusFromGres(t.perTask)*max(j.Tasks, 1)
		}
		if n := max(j.NodeCount, 1); total > 0 && total%n == 0 {
			j.GPUsPerNode, j.GPUsNotPerNode = total/n, true
		}
	}
	detail := 0
	for _, d := range t.gresDetail {
		n := gpusFromGres(d)
		detail += n
		if j.GPUsPerNode == 0 {
			// a job submitted with --gpus has no per-node request; report
			// the largest per-node allocation
			j.GPUsPerNode = max(j.GPUsPerNode, n)
		}
	}
	// tres_alloc_str lacks gres/gpu unless AccountingStorageTRES has it;
	// gres_detail (one entry per allocated node) is always there.
	j.GPUs = tresGPUs(t.alloc)
	if j.GPUs == 0 {
		j.GPUs = detail
	}
	// cpus_per_tres has the shape of a GRES count: "gres:gpu:4".
	j.CPUsPerGPU = gpusFromGres(t.cpusPerTres)
	if j.State == StatePending {
		j.CPUs = max(j.CPUs, j.CPUsPerGPU*j.GPUsPerNode*max(j.NodeCount, 1))
	}
	if j.State != StatePending {
		j.MemMB = tresMemMB(t.alloc)
		if v, ok := listValue(t.alloc, "billing"); ok {
			j.Billing, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if j.MemPerNodeMB == 0 && j.MemPerCPUMB == 0 && j.MemPerGPUMB == 0 {
		// --mem=0, or no memory asked for and no default: Slurm gives the
		// job each node's whole memory, which only the TRES line shows
		// (memory_per_node is 0 or null; read off both labs).
		tres := t.alloc
		if j.State == StatePending {
			tres = t.req
		}
		if m := tresMemMB(tres); m > 0 {
			j.MemPerNodeMB = m / int64(max(j.NodeCount, len(j.NodeList), 1))
		}
	}
}

// finishJob parses the rubick tag and logs, rather than fails on, a
// malformed one, or a malformed node list (NodesErr): a broken AdminComment
// or hostlist must not hide a job from the poll. Each job's error is logged
// once, until it changes.
func (c *RESTCluster) finishJob(j Job) Job {
	j.Tag, j.TagErr = TagFromAdminComment(j.AdminComment)
	c.warnOnce(j.ID, "malformed rubick tag in AdminComment", j.TagErr)
	c.warnOnce(j.ID, "malformed hostlist in a job, read as no nodes", j.NodesErr)
	return j
}

// jobWarning is one kind of problem of one job, by its log message.
type jobWarning struct {
	job int
	msg string
}

// warnOnce logs err under msg unless it is the error last logged for job
// id under msg; a nil err forgets that.
func (c *RESTCluster) warnOnce(id int, msg string, err error) {
	c.warnMu.Lock()
	defer c.warnMu.Unlock()
	k := jobWarning{id, msg}
	if err == nil {
		delete(c.warned, k)
		return
	}
	if s := err.Error(); c.warned[k] != s {
		if c.warned == nil {
			c.warned = map[jobWarning]string{}
		}
		c.warned[k] = s
		c.log.Warn(msg, "job_id", id, "err", err)
	}
}

// forgetWarnings drops the logged errors of jobs a full listing no longer
// has, so that the record stays as small as the queue.
func (c *RESTCluster) forgetWarnings(listed []Job) {
	c.warnMu.Lock()
	defer c.warnMu.Unlock()
	if len(c.warned) == 0 {
		return
	}
	keep := make(map[int]bool, len(listed))
	for _, j := range listed {
		keep[j.ID] = true
	}
	for k := range c.warned {
		if !keep[k.job] {
			delete(c.warned, k)
		}
	}
}

// nodeBaseStates are the node states that are not flags.
var nodeBaseStates = []string{"IDLE", "MIXED", "ALLOCATED", "ALLOC", "DOWN", "ERROR", "FUTURE", "UNKNOWN", "COMPLETING"}

// nodeState splits Slurm's node state words into the base state and flags,
// e.g. ["IDLE", "DRAIN"] or "mixed+drain" split on '+'.
func nodeState(words []string) (string, []string) {
	state := ""
	var flags []string
	for _, w := range upperAll(words) {
		if w == "" {
			continue
		}
		if state == "" && slices.Contains(nodeBaseStates, w) {
			state = w
			continue
		}
		flags = append(flags, w)
	}
	if state == "" && len(flags) > 0 {
		state, flags = flags[0], flags[1:]
	}
	return state, flags
}

// jobBaseStates are the job states that are not flags in 24.11's list.
var jobBaseStates = []string{StatePending, StateRunning, StateSuspended, StateCompleted, StateCancelled,
	StateFailed, StateTimeout, StateNodeFail, StatePreempted, StateBootFail, StateDeadline, StateOutOfMem}

// jobState picks the base state out of a 24.11 job_state list such as
// ["PENDING", "REQUEUED"].
func jobState(words []string) (string, []string) {
	state := ""
	var flags []string
	for _, w := range upperAll(words) {
		if state == "" && slices.Contains(jobBaseStates, w) {
			state = w
			continue
		}
		flags = append(flags, w)
	}
	if state == "" && len(flags) > 0 {
		state, flags = flags[0], flags[1:]
	}
	return state, flags
}

// flagStates38 are the job flags 22.05 (v0.0.38) writes as job_state in
// place of the base state (job_state_string puts flags first), with the
// base state each implies. CONFIGURING (nodes booting, or a
// PrologFlags=Alloc prolog running), RESIZING, STOPPED (SIGSTOP) and
// SIGNALING mark jobs that hold their allocation; the requeue and hold
// flags pending jobs. COMPLETING stays a state of its own (Ended knows
// it); STAGE_OUT and REVOKED follow an end whose kind 22.05 does not say.
var flagStates38 = map[string]string{
	"CONFIGURING": StateRunning, "RESIZING": StateRunning, "STOPPED": StateRunning, "SIGNALING": StateRunning,
	"REQUEUED": StatePending, "REQUEUE_FED": StatePending, "REQUEUE_HOLD": StatePending,
	"SPECIAL_EXIT": StatePending, "RESV_DEL_HOLD": StatePending,
}

// jobState38 reads a 22.05 job_state as the base state and flags 24.11
// lists.
func jobState38(s string) (string, []string) {
	s = strings.ToUpper(strings.TrimSpace(s))
	if base, ok := flagStates38[s]; ok {
		return base, []string{s}
	}
	return s, nil
}

func upperAll(ws []string) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, strings.ToUpper(strings.TrimSpace(w)))
	}
	return out
}

// findJob picks job id out of a one-job answer; slurmrestd answers with a
// list even for one job.
func findJob(js []Job, id int, ep string) (Job, error) {
	for _, j := range js {
		if j.ID == id {
			return j, nil
		}
	}
	return Job{}, fmt.Errorf("slurmrestd %s: job %d: %w", ep, id, ErrNotFound)
}

// dependency is what the job still waits for; Slurm reports none as "" or
// "(null)".
func dependency(d string) string {
	if d == "(null)" {
		return ""
	}
	return d
}

// exclusive reports whether a job's shared mode (22.05 "shared", 24.11 one
// of the "shared" flags) keeps other jobs off its nodes: "none" for
// --exclusive, "user" and "mcs" for the per-user and per-MCS forms; "topo"
// (24.11) keeps its whole topology segment. "shared" and "oversubscribe"
// (--oversubscribe), and nothing, let it share.
func exclusive(shared string) bool {
	switch strings.ToLower(shared) {
	case "none", "user", "mcs", "topo":
		return true
	}
	return false
}

// splitList splits Slurm's comma-separated lists; nil for "".
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
