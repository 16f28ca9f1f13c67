package daemon

import (
	"testing"

	"github.com/rubick-sched/rubick/slurm"
)

// Nodes' states as slurmrestd lists them (base state, flags), those of
// a reboot as the 22.05 lab showed them: a node whose reboot is requested
// without ASAP still takes jobs (Slurm started one there), and goes down
// when the reboot is issued.
func TestUsableNodeStates(t *testing.T) {
	for _, tc := range []struct {
		state    string
		flags    []string
		reserved bool // an active listed reservation holds it
		want     bool
	}{
		{"IDLE", nil, false, true},
		{"MIXED", []string{"COMPLETING"}, false, true},
		{"MIXED", []string{"REBOOT_REQUESTED"}, false, true},
		{"DOWN", []string{"REBOOT_ISSUED"}, false, false},
		{"IDLE", []string{"DRAIN"}, false, false},
		{"MIXED", []string{"DRAIN"}, false, false}, // draining
		{"IDLE", []string{"NOT_RESPONDING"}, false, false},
		{"IDLE", []string{"POWERED_DOWN"}, false, false},
		{"IDLE", []string{"POWERING_UP"}, false, false},
		{"IDLE", []string{"MAINT", "RESERVED"}, true, false},
		{"IDLE", []string{"RESERVED"}, false, false},
		{"IDLE", []string{"RESERVED"}, true, true},
		{"FUTURE", nil, false, false},
		{"UNKNOWN", nil, false, false},
		{"INVAL", nil, false, false},
	} {
		n := slurm.Node{Name: "node1", State: tc.state, Flags: tc.flags, Partitions: []string{"debug", "gpu"}}
		if got := usable(n, []string{"gpu"}, tc.reserved); got != tc.want {
			t.Errorf("%s%v (reserved %v): usable %v, want %v", tc.state, tc.flags, tc.reserved, got, tc.want)
		}
	}
	if usable(slurm.Node{Name: "node1", State: "IDLE", Partitions: []string{"debug"}}, []string{"gpu"}, false) {
		t.Error("a node outside the managed partitions is usable")
	}
}
