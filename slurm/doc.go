// Package slurm is rubick's bridge to Slurm: versioned slurmrestd clients
// behind one narrow interface, the snapshot builder, and the Applier that
// turns policy actions into scontrol/scancel commands (argv only, never a
// shell) with a result per action.
package slurm
