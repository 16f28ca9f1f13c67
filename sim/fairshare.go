package sim

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// Where a replay's jobs get their accounts (Config.FairShareAccounts).
const (
	// AccountsByModel makes every model type one account.
	AccountsByModel = "model"
	// AccountsFromTrace takes the trace's account column.
	AccountsFromTrace = "trace"
)

// account is the job's account for its fair-share factor.
func (j *simJob) account(cfg Config) string {
	if cfg.FairShareAccounts == AccountsFromTrace {
		return j.Account
	}
	return j.App
}

// checkAccounts reports a job without an account when they come from
// the trace.
func checkAccounts(jobs []*simJob, cfg Config) error {
	if cfg.FairShareAccounts != AccountsFromTrace {
		return nil
	}
	for _, j := range jobs {
		if j.Account == "" {
			return fmt.Errorf("%w: %s: account is empty; FairShareAccounts=%q takes accounts from the trace", ErrBadTrace, j.Where(), AccountsFromTrace)
		}
	}
	return nil
}

// fairShare replays what slurmctld's priority/multifactor computes for
// the fair-share order (policy.OrderFairShare) for accounts with equal
// shares: each account's GPU usage, halved every
// half-life as PriorityDecayHalfLife does, and Fair Tree's factor for
// siblings, rank over count. An account's Level FS is its share over its
// usage's share (infinite without usage); the accounts rank by it, ties
// alike, and the factor is the number of accounts whose Level FS is at
// most its own over the number of accounts: 1 for the least used.
type fairShare struct {
	usage    map[string]float64 // decayed GPU-seconds per account
	used     map[string]float64 // GPU-seconds per account in this interval
	halfLife float64            // seconds
}

// newFairShare starts every account of accounts (repeats allowed) unused.
func newFairShare(accounts []string, halfLife float64) *fairShare {
	f := &fairShare{usage: map[string]float64{}, used: map[string]float64{}, halfLife: halfLife}
	for _, a := range accounts {
		f.usage[a] = 0
	}
	return f
}

// use counts gpuS GPU-seconds of account in this interval. A nil
// fairShare (a replay without accounts) counts nothing.
func (f *fairShare) use(account string, gpuS float64) {
	if f != nil {
		f.used[account] += gpuS
	}
}

// tick ends an interval of dt seconds: add what use counted in it.
func (f *fairShare) tick(dt float64) {
	if f != nil {
		f.add(dt, f.used)
		clear(f.used)
	}
}

// add decays every account's usage over dt seconds and adds what each
// used in them (GPU-seconds).
func (f *fairShare) add(dt float64, used map[string]float64) {
	k := math.Exp2(-dt / f.halfLife)
	for a, u := range f.usage {
		f.usage[a] = u*k + used[a]
	}
}

// factors is every account's factor now.
func (f *fairShare) factors() map[string]float64 {
	total := 0.0
	for _, u := range f.usage {
		total += u
	}
	n := float64(len(f.usage))
	level := make(map[string]float64, len(f.usage))
	for a, u := range f.usage {
		if u <= 0 || total <= 0 {
			level[a] = math.Inf(1)
		} else {
			level[a] = (1 / n) / (u / total)
		}
	}
	// Sorted once, the accounts at or below a level are a binary search
	// away: a trace may name hundreds of accounts, and this runs each round.
	sorted := slices.Sorted(maps.Values(level))
	out := make(map[string]float64, len(level))
	for a, la := range level {
		below, _ := slices.BinarySearchFunc(sorted, la, func(x, t float64) int {
			if x <= t {
				return -1 // past every level at most t: the count of them
			}
			return 1
		})
		out[a] = float64(below) / n
	}
	return out
}
