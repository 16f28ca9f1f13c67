// Package store keeps rubick's state in SQLite: model types, every fitted
// parameter tuple, profiling samples, jobs, plan history and per-cycle
// decisions. Schema changes are versioned migrations applied on open.
package store
