// Package policy decides what rubick does with a cluster: given an immutable
// Snapshot of nodes, jobs, tenants and fitted models it returns a Plan of
// typed actions (start, shrink, restart with a new plan, preempt, keep), each
// with its predicted throughput and a machine-readable reason. It is pure:
// it imports neither the Slurm bridge nor the store, so the daemon and the
// simulator run the same decisions.
package policy
