package daemon

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/slurm"
)

func TestMetricsExposeDocumentedNames(t *testing.T) {
	m := NewMetrics()
	m.Actions.WithLabelValues("start", "ok").Inc()
	m.SlurmErrors.WithLabelValues("slurmrestd").Inc()
	m.Jobs.WithLabelValues("PENDING", "best-effort").Set(3)
	m.CycleDuration.Observe(0.2)
	m.RestartCost.WithLabelValues("gpt2").Set(42.5)
	m.RigidReserved.Set(8)
	m.GroupLimited.Set(2)
	m.OtherWrites.Inc()
	m.QueuedAge.WithLabelValues("best-effort").Set(90)
	m.SetupFailed.Set(1)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`rubick_actions_total{action="start",result="ok"} 1`,
		`rubick_slurm_api_errors_total{source="slurmrestd"} 1`,
		`rubick_jobs{class="best-effort",state="PENDING"} 3`,
		`rubick_cycle_duration_seconds_count 1`,
		`rubick_restart_cost_seconds{model_type="gpt2"} 42.5`,
		`rubick_rigid_reserved_gpus 8`,
		`rubick_group_limited_jobs 2`,
		`rubick_other_rubickd_writes_total 1`,
		`rubick_queued_age_seconds{class="best-effort"} 90`,
		`rubick_setup_checks_failed 1`,
		"# HELP rubick_policy_duration_seconds",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics output lacks %q", want)
		}
	}
}

// rubick_jobs counts the jobs of the managed partitions only: a job of
// another partition is neither rubick's nor a rigid job it plans around.
func TestJobGaugesOnlyManagedPartitions(t *testing.T) {
	cpu := heldJob(7, "", 1, 0)
	cpu.Partition, cpu.Tag, cpu.Held, cpu.State = "cpu", nil, false, slurm.StateRunning
	both := heldJob(8, "", 1, 0)
	both.Partition, both.Tag, both.Held = "cpu,gpu", nil, false
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{heldJob(6, "bert", 1, 2), cpu, both}}
	_, _, d := oneCycle(t, c, []int{6})
	want := map[string]float64{"PENDING best-effort": 1, "PENDING rigid": 1}
	if diff := cmp.Diff(want, jobGauges(t, d.deps.Metrics)); diff != "" {
		t.Errorf("rubick_jobs (-want +got):\n%s", diff)
	}
}
