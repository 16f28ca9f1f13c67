package slurm

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestV38FlagStates: 22.05 writes a job's flag in place of its base state
// (job_state_string), so a running job whose nodes boot or whose
// PrologFlags=Alloc prolog runs reads "CONFIGURING". It must still read
// as the allocated, running job it is, as 24.11's ["RUNNING",
// "CONFIGURING"] does.
func TestV38FlagStates(t *testing.T) {
	type state struct {
		State            string
		Flags            []string
		Allocated, Ended bool
		Held             bool
	}
	tests := map[string]struct {
		wire     string
		priority int
		want     state
	}{
		"running":       {wire: "RUNNING", priority: 5, want: state{State: StateRunning, Allocated: true}},
		"configuring":   {wire: "CONFIGURING", priority: 5, want: state{State: StateRunning, Flags: []string{"CONFIGURING"}, Allocated: true}},
		"resizing":      {wire: "RESIZING", priority: 5, want: state{State: StateRunning, Flags: []string{"RESIZING"}, Allocated: true}},
		"stopped":       {wire: "STOPPED", priority: 5, want: state{State: StateRunning, Flags: []string{"STOPPED"}, Allocated: true}},
		"signaling":     {wire: "SIGNALING", priority: 5, want: state{State: StateRunning, Flags: []string{"SIGNALING"}, Allocated: true}},
		"special exit":  {wire: "SPECIAL_EXIT", priority: 0, want: state{State: StatePending, Flags: []string{"SPECIAL_EXIT"}, Held: true}},
		"requeue hold":  {wire: "REQUEUE_HOLD", priority: 0, want: state{State: StatePending, Flags: []string{"REQUEUE_HOLD"}, Held: true}},
		"resv del hold": {wire: "RESV_DEL_HOLD", priority: 0, want: state{State: StatePending, Flags: []string{"RESV_DEL_HOLD"}, Held: true}},
		"requeued":      {wire: "REQUEUED", priority: 5, want: state{State: StatePending, Flags: []string{"REQUEUED"}}},
		// A base state of its own in 22.05, as before.
		"completing": {wire: "COMPLETING", priority: 5, want: state{State: StateCompleting}},
		"lower case": {wire: "configuring", priority: 5, want: state{State: StateRunning, Flags: []string{"CONFIGURING"}, Allocated: true}},
		"completed":  {wire: "COMPLETED", priority: 5, want: state{State: StateCompleted, Ended: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, srv := newFakeRestd(t, Version38)
			c := newTestCluster(t, srv.URL, nil)
			f.overrides["/slurm/v0.0.38/jobs"] = `{"meta":{},"errors":[],"jobs":[{"job_id":7,"job_state":"` + tc.wire +
				`","priority":` + strconv.Itoa(tc.priority) + `,"state_reason":"None","nodes":"node1","node_count":1,"tres_per_node":"gres:gpu:4"}]}`
			jobs, _, err := c.Jobs(context.Background(), time.Time{})
			if err != nil || len(jobs) != 1 {
				t.Fatalf("Jobs: %+v, %v", jobs, err)
			}
			j := jobs[0]
			got := state{State: j.State, Flags: j.StateFlags, Allocated: j.Allocated(), Ended: j.Ended(), Held: j.Held}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("job_state %q (-want +got):\n%s", tc.wire, diff)
			}
		})
	}
}
