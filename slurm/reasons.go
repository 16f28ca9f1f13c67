package slurm

import "strings"

// SizeLimitReason reports whether a pending job's state reason is a QOS,
// association or partition limit on its size (nodes, CPUs, GPUs and other
// TRES, memory, billing, or their run-minutes), e.g. "QOSMaxGRESPerJob",
// "AssocGrpGRES", "PartitionNodeLimit". A smaller job may start where this
// one cannot; limits on job counts or wall time ("QOSMaxJobsPerUserLimit",
// "PartitionTimeLimit") do not depend on the size and are not such reasons.
func SizeLimitReason(reason string) bool {
	if !strings.HasPrefix(reason, "QOS") && !strings.HasPrefix(reason, "Assoc") &&
		!strings.HasPrefix(reason, "Partition") && !strings.HasPrefix(reason, "Max") {
		return false
	}
	for _, w := range []string{"Node", "Cpu", "CPU", "GRES", "Gres", "Mem", "TRES", "Tres", "Billing"} {
		if strings.Contains(reason, w) {
			return true
		}
	}
	return false
}

// WaitReason reports whether a pending job's state reason says it waits for
// something other than nodes: its dependencies, its begin time, its job
// array's limit on running tasks, its licenses, or a limit on the number of
// jobs. Placing it changes none of these; Slurm starts it once they clear.
func WaitReason(reason string) bool {
	switch reason {
	case "Dependency", "DependencyNeverSatisfied", "BeginTime", "JobArrayTaskLimit", "Licenses":
		return true
	}
	return (strings.HasPrefix(reason, "QOS") || strings.HasPrefix(reason, "Assoc")) && strings.Contains(reason, "Jobs")
}
