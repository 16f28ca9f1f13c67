// Package integration tests rubick's Slurm integration against a real
// Slurm 22.05 cluster: the lab started by scripts/lab/up.sh (4 emulated
// nodes x 8 fake GPUs, slurmdbd, slurmrestd with JWT, the rubick SPANK
// plugin and job_submit.lua).
//
// The tests carry the build tag "integration" and read the lab from the
// environment written to $LAB/env.sh (LAB, SLURM_CONF, SLURMRESTD_URL,
// SLURMRESTD_USER, SLURMRESTD_TOKEN_FILE, LAB_*). They skip, saying
// why, when that environment is missing or slurmctld does not answer.
//
//	make integration                                  # starts the lab when root
//	. /tmp/rubick-lab/env.sh && go test -tags integration -count=1 ./test/integration/
//
// They submit real jobs, so they assume nothing else (rubickd in
// particular) releases or resizes jobs in the lab while they run. Slurm is
// driven with argv only (exec.Command), never through a shell.
package integration
