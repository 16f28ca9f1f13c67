package daemon

import (
	"log/slog"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// A job with a --deadline is planned with the latest start that lets it end
// by it: its deadline less its --time-min, else its time limit.
func TestViewStartBy(t *testing.T) {
	for name, tc := range map[string]struct {
		deadline       time.Duration // from t0; 0: none
		limit, timeMin time.Duration
		want           time.Duration // StartBy from t0; 0: zero
	}{
		"no deadline": {limit: 30 * time.Minute},
		"time limit":  {deadline: 2 * time.Hour, limit: 30 * time.Minute, want: 90 * time.Minute},
		"time-min":    {deadline: 2 * time.Hour, limit: 30 * time.Minute, timeMin: 10 * time.Minute, want: 110 * time.Minute},
		"no time set": {deadline: 2 * time.Hour, want: 2 * time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			j := heldJob(7, "gpt2", 1, 2)
			j.TimeLimit, j.TimeMin = tc.limit, tc.timeMin
			if tc.deadline > 0 {
				j.Deadline = t0.Add(tc.deadline)
			}
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: labNodes(1), Jobs: []slurm.Job{j}, Estimators: shippedEstimators(t)}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Snapshot.Jobs) != 1 {
				t.Fatalf("snapshot jobs %+v, want job 7", v.Snapshot.Jobs)
			}
			var want time.Time
			if tc.want > 0 {
				want = t0.Add(tc.want)
			}
			if got := v.Snapshot.Jobs[0].StartBy; !got.Equal(want) {
				t.Errorf("StartBy = %v, want %v", got, want)
			}
		})
	}
}
