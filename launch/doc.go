// Package launch rewrites a training job's launch line to an execution plan.
//
// Given the user's training command (what follows rubick-srun in the batch
// script) and the model.Plan that rubickd chose, it detects the framework
// dialect (Megatron-LM, Megatron-DeepSpeed or DeepSpeed), rewrites the
// parallelism, batch, ZeRO, offload and recompute settings, keeps the global
// batch unchanged, and computes the srun task geometry the plan needs.
//
// The package is pure: it runs no process and writes no file. The user's
// DeepSpeed config is read through Options.ReadFile, and the rewritten copy is
// returned for the caller to write into a job-private directory, so the
// user's file is never modified.
package launch
