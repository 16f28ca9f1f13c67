// Package report turns Slurm accounting records (sacct) into the admin
// report of rubick: per model type, account and tenant, and overall, the
// job count, job completion time (JCT), queueing delay, GPU-hours allocated
// and usefully trained, reconfigurations and Slurm's interruptions (node
// failures, its preemptions) and their cost, SLO violations of guaranteed
// jobs, and each job's plan history.
//
// The input is the text `sacct --parsable2 --duplicates --allocations`
// prints: one row per run of a job, so a job requeued twice has three rows
// and a shrunk job has a RESIZING row for its old size. ParseSacct reads it
// by its header, so any subset and order of the columns works; metrics that
// need a missing column are reported as unknown rather than guessed.
// Build groups the rows into jobs, and Enrich adds what only rubick's store
// knows (plans it applied, predicted throughputs for the SLO check).
// docs/report.md defines every column.
package report
