// Package slurm is rubick's bridge to Slurm.
//
// It has three parts:
//
//   - Cluster, a narrow read (and submit) interface over slurmrestd. The
//     versioned clients generated from the OpenAPI documents live in
//     slurm/gen/v0038 (Slurm 22.05) and slurm/gen/v0041 (Slurm 24.05-24.11);
//     NewCluster detects which one the server speaks and converts its
//     responses into the version-free Job, Node and Partition types.
//   - Tag, the versioned "rubick:v1 ..." record that rubick keeps in a job's
//     AdminComment next to other tools' content.
//   - Applier, which turns slurm-level actions into the scontrol/scancel
//     command sequences that were tested on a real cluster (argv only, never
//     a shell), with a result per action and a re-read of the job after any
//     failure.
//
// Beside them, what only scontrol shows: slurmctld's configuration
// (ShowConfig) and the GrpTRESMins budgets with their usage
// (ShowAssocMgr, AssocMgr).
//
// Everything is testable without Slurm: the HTTP side against httptest
// servers serving recorded responses, the command side through Runner fakes.
package slurm
