// Package store keeps rubick's state in SQLite: model types, every fitted
// parameter tuple, profiling samples, jobs, plan history and per-cycle
// decisions. Schema changes are versioned migrations applied on open, except
// by an Open told WithoutMigrating.
//
// A Store holds two connection pools on one database file in WAL mode: a
// single writer connection, so the process's own writes are serialised
// instead of racing for SQLite's one write lock, and a small pool of
// query-only reader connections, which WAL lets run beside the writer and
// see committed data only. Every write of the API is one transaction, so a
// crash leaves either all of it or none of it.
//
// Fits follow one rule: a model type has at most one current fit. AddFit
// makes a new fit current only when its RMSLE is strictly lower; AddFitAs
// and PromoteFit let the caller decide. Every fit is kept.
//
// Plan actions are recorded before they are applied and resolved afterwards
// with MarkApplied; Pending lists the ones a crashed daemon decided but never
// confirmed, so a restart reconciles them against Slurm instead of applying
// them twice.
//
// Prune bounds what grows with activity (per-job decision reasons, reported
// samples); plan history, fits and profile samples are never pruned.
//
// All times come from the clock given with WithClock and are stored as Unix
// nanoseconds in UTC. docs/store.md describes the schema and the durability
// choices.
package store
