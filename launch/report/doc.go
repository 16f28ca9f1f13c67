// Package report carries profiling samples from a running job to rubickd.
//
// rubick-srun parses iteration times from the trainer's output (Parser),
// wraps each sample in a MUNGE credential and POSTs it to rubickd's samples
// endpoint (Reporter), and a launch notice (Launch, SendLaunch) before
// training. rubickd's Handler decodes each credential with unmunge
// (Munge.Decode), which yields the UID of the process that made it, and
// accepts the payload only for a job that UID owns. MUNGE runs on every
// Slurm node with a cluster-wide key, so this works across nodes without any
// new secret. Reporting is best effort: it never fails the training job.
package report
