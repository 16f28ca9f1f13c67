package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// A reload takes effect at the next cycle: here a tenant quota, the
// policy and the refit threshold. One that changes a setting only a
// restart applies is refused and changes nothing.
func TestReload(t *testing.T) {
	c := &fakeCluster{nodes: labNodes(1), jobs: []slurm.Job{heldJob(11, "bert", 1, 2)}}
	d, _ := newTestDaemon(t, c, &fakeApplier{})
	d.deps.Learner = &Learner{Threshold: 0.1}

	next := Defaults()
	next.Tenants = []TenantConfig{{Name: "nlp", Match: []string{"nlp"}, QuotaGPUs: 8}}
	next.Samples.RefitThreshold = 0.2
	next.Samples.MaxConfigsPerJob = 5
	next.Interval = time.Minute
	fifo, err := policy.New("fifo", next.Policy.Config())
	if err != nil {
		t.Fatal(err)
	}
	bad := next
	bad.Store = "/elsewhere.db"
	bad.Listen = "127.0.0.1:1"
	if err := d.Reload(bad, fifo); !errors.Is(err, ErrNeedsRestart) || !strings.Contains(err.Error(), "store, listen") {
		t.Errorf("Reload changing store and listen = %v, want ErrNeedsRestart naming both", err)
	}
	if _, err := d.Cycle(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if d.deps.Policy.Name() != "rubick" || len(d.cfg.Tenants) != 0 {
		t.Fatalf("a refused reload changed the daemon: policy %s, tenants %v", d.deps.Policy.Name(), d.cfg.Tenants)
	}

	if err := d.Reload(next, fifo); err != nil {
		t.Fatal(err)
	}
	if d.deps.Policy.Name() != "rubick" {
		t.Error("Reload switched the policy before the next cycle")
	}
	rep, err := d.Cycle(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if d.deps.Policy.Name() != "fifo" || d.cfg.Interval != time.Minute || d.deps.Learner.Threshold != 0.2 || d.deps.Learner.MaxConfigsPerJob != 5 || len(d.cfg.Tenants) != 1 {
		t.Errorf("after the cycle: policy %s, interval %v, refit threshold %v, configs per job %d, tenants %v; want the reloaded ones",
			d.deps.Policy.Name(), d.cfg.Interval, d.deps.Learner.Threshold, d.deps.Learner.MaxConfigsPerJob, d.cfg.Tenants)
	}
	for _, a := range rep.Plan.Actions {
		if a.Reason != policy.ReasonFIFO && a.Reason != policy.ReasonBackfill && a.Reason != policy.ReasonNoResources {
			t.Errorf("job %s decided with reason %s: not by fifo", a.JobID, a.Reason)
		}
	}
	if err := d.Reload(next, nil); err == nil {
		t.Error("Reload without a policy succeeded")
	}
}
