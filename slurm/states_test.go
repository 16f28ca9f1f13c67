package slurm

import (
	"context"
	"errors"
	"strconv"
	"strings"
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

// TestPingBackupController: slurmctld answers when one of its controllers
// is up; a backup controller that is down (SlurmctldHost listed twice)
// must not stop rubickd from starting or pass for slurmrestd being down.
func TestPingBackupController(t *testing.T) {
	pings := map[string]func(primary, backup string) string{
		Version38: func(p, b string) string {
			return `{"meta":{},"errors":[],"pings":[{"hostname":"ctl1","ping":"` + p + `","status":0,"mode":"primary"},{"hostname":"ctl2","ping":"` + b + `","status":0,"mode":"backup1"}]}`
		},
		Version41: func(p, b string) string {
			return `{"errors":[],"warnings":[],"pings":[{"hostname":"ctl1","pinged":"` + p + `","latency":834,"mode":"primary"},{"hostname":"ctl2","pinged":"` + b + `","latency":0,"mode":"backup1"}]}`
		},
		Version42: func(p, b string) string {
			return `{"errors":[],"warnings":[],"pings":[{"hostname":"ctl1","pinged":"` + p + `","responding":` + strconv.FormatBool(p == "UP") + `,"latency":834,"mode":"primary","primary":true},{"hostname":"ctl2","pinged":"` + b + `","responding":` + strconv.FormatBool(b == "UP") + `,"latency":0,"mode":"backup1","primary":false}]}`
		},
	}
	paths := map[string]string{Version38: "/slurm/v0.0.38/ping", Version41: "/slurm/v0.0.41/ping/", Version42: "/slurm/v0.0.42/ping/"}
	tests := map[string]struct {
		primary, backup string
		wantErr         bool
	}{
		"both up":      {primary: "UP", backup: "UP"},
		"backup down":  {primary: "UP", backup: "DOWN"},
		"primary down": {primary: "DOWN", backup: "UP"},
		"both down":    {primary: "DOWN", backup: "DOWN", wantErr: true},
	}
	for _, v := range []string{Version38, Version41, Version42} {
		for name, tc := range tests {
			t.Run(v+"/"+name, func(t *testing.T) {
				f, srv := newFakeRestd(t, v)
				f.overrides[paths[v]] = pings[v](tc.primary, tc.backup)
				c := newTestCluster(t, srv.URL, func(cfg *Config) { cfg.Version = v })
				err := c.Ping(context.Background())
				if tc.wantErr {
					if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "ctl1") || !strings.Contains(err.Error(), "ctl2") {
						t.Fatalf("Ping = %v, want ErrUnavailable naming ctl1 and ctl2", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Ping = %v, want nil", err)
				}
			})
		}
	}
}
