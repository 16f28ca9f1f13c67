package daemon

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rubick-sched/rubick/policy"
)

// ErrNeedsRestart reports a reloaded configuration that changes a setting
// only a restart of rubickd applies.
var ErrNeedsRestart = errors.New("needs a restart of rubickd")

// pendingReload is a configuration waiting for the next cycle.
type pendingReload struct {
	cfg Config
	pol policy.Policy
}

// restartOnly names the keys that differ between old and cfg and that a
// running rubickd cannot change: its connections, commands, checkpoint
// handling, store, seeding, GPU facts and endpoints are set up at start.
func restartOnly(old, cfg Config) []string {
	var keys []string
	add := func(changed bool, key string) {
		if changed {
			keys = append(keys, key)
		}
	}
	add(old.Slurmrestd != cfg.Slurmrestd, "slurmrestd")
	add(old.Commands != cfg.Commands, "commands")
	add(old.Checkpoint != cfg.Checkpoint, "checkpoint")
	add(old.Store != cfg.Store, "store")
	add(old.SeedFits != cfg.SeedFits, "seed_fits")
	add(old.GPUFacts != cfg.GPUFacts, "gpu_facts")
	add(old.Samples.Unmunge != cfg.Samples.Unmunge || old.Samples.MungeSocket != cfg.Samples.MungeSocket, "samples.unmunge/munge_socket")
	add(old.Listen != cfg.Listen, "listen")
	return keys
}

// Reload queues cfg, already validated, and its policy pol for the next
// cycle: partitions, tenants, interval, restart costs, retention, policy
// knobs, rigid_jobs and samples.refit_threshold change without a restart.
// A cfg that changes anything else is refused whole, wrapping
// ErrNeedsRestart and naming the keys; the running configuration stays.
func (d *Daemon) Reload(cfg Config, pol policy.Policy) error {
	if pol == nil {
		return errors.New("daemon: reload without a policy")
	}
	if keys := restartOnly(d.boot, cfg); len(keys) > 0 {
		return fmt.Errorf("%w: %s changed", ErrNeedsRestart, strings.Join(keys, ", "))
	}
	d.mu.Lock()
	d.pending = &pendingReload{cfg: cfg, pol: pol}
	d.mu.Unlock()
	return nil
}

// applyReload switches to a queued configuration; only the goroutine that
// runs cycles calls it, so the cycle never sees a half-changed one.
func (d *Daemon) applyReload() {
	d.mu.Lock()
	p := d.pending
	d.pending = nil
	d.mu.Unlock()
	if p == nil {
		return
	}
	d.cfg, d.deps.Policy = p.cfg, p.pol
	if d.deps.Learner != nil {
		d.deps.Learner.Threshold = p.cfg.Samples.RefitThreshold
		d.deps.Learner.SetMaxConfigsPerJob(p.cfg.Samples.MaxConfigsPerJob)
	}
	d.deps.Logger.Info("configuration reloaded", "policy", p.pol.Name(), "interval", p.cfg.Interval,
		"partitions", p.cfg.Partitions, "tenants", len(p.cfg.Tenants), "restart_cost", p.cfg.RestartCost)
}
