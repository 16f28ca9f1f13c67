// Package report carries profiling samples from a running job to rubickd.
//
// rubick-srun parses iteration times from the trainer's output (Parser),
// wraps each sample in a MUNGE credential and POSTs it to rubickd's samples
// endpoint (Reporter). rubickd decodes the credential with unmunge
// (VerifyMunge, ReadSample), which yields the UID of the process that made
// it, and accepts the sample only for a job that UID owns. MUNGE runs on every
// Slurm node with a cluster-wide key, so this works across nodes without any
// new secret. Reporting is best effort: it never fails the training job.
package report
