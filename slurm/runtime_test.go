package slurm

import (
	"testing"
	"time"
)

// RunTime counts as scontrol's RunTime does: the time a job stood
// suspended is left out, and a held or pending job has run nothing on its
// current start.
func TestRunTime(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	start := now.Add(-30 * time.Minute)
	tests := map[string]struct {
		j         Job
		want      time.Duration
		allocated bool
	}{
		"running":   {Job{State: StateRunning, StartTime: start}, 30 * time.Minute, true},
		"suspended": {Job{State: StateSuspended, StartTime: start, SuspendTime: now.Add(-20 * time.Minute), PreSuspend: 10 * time.Minute}, 10 * time.Minute, true},
		// Resumed 5 minutes ago after 10 minutes of running.
		"resumed":   {Job{State: StateRunning, StartTime: start, SuspendTime: now.Add(-5 * time.Minute), PreSuspend: 10 * time.Minute}, 15 * time.Minute, true},
		"pending":   {Job{State: StatePending, StartTime: start}, 0, false},
		"not yet":   {Job{State: StateRunning, StartTime: now.Add(time.Minute)}, 0, true},
		"no start":  {Job{State: StateRunning}, 0, true},
		"completed": {Job{State: StateCompleted, StartTime: start}, 0, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.j.RunTime(now); got != tc.want {
				t.Errorf("RunTime = %v, want %v", got, tc.want)
			}
			if got := tc.j.Allocated(); got != tc.allocated {
				t.Errorf("Allocated = %v, want %v", got, tc.allocated)
			}
		})
	}
}
