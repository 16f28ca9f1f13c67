package slurm

import "testing"

func TestSizeLimitReason(t *testing.T) {
	for reason, want := range map[string]bool{
		"PartitionNodeLimit":             true,
		"QOSMaxGRESPerJob":               true,
		"QOSMaxGRESPerUser":              true,
		"QOSGrpGRES":                     true,
		"QOSMaxNodePerJobLimit":          true,
		"QOSMaxCpuPerJobLimit":           true,
		"QOSGrpMemLimit":                 true,
		"AssocGrpGRES":                   true,
		"AssocMaxNodesPerJobLimit":       true,
		"AssocGrpCPURunMinutesLimit":     true,
		"AssocGrpBillingMinutes":         true,
		"MaxGRESPerAccount":              true,
		"QOSMaxJobsPerUserLimit":         false,
		"QOSMaxWallDurationPerJobLimit":  false,
		"AssocGrpJobsLimit":              false,
		"PartitionTimeLimit":             false,
		"PartitionDown":                  false,
		"Resources":                      false,
		"Priority":                       false,
		"ReqNodeNotAvail":                false,
		"JobHeldUser":                    false,
		"BadConstraints":                 false,
		"":                               false,
		"Dependency":                     false,
		"launch failed requeued held":    false,
		"Nodes required for job are DOW": false,
	} {
		if got := SizeLimitReason(reason); got != want {
			t.Errorf("SizeLimitReason(%q) = %v, want %v", reason, got, want)
		}
	}
}

func TestWaitReason(t *testing.T) {
	for reason, want := range map[string]bool{
		"Dependency":               true,
		"DependencyNeverSatisfied": true,
		"BeginTime":                true,
		"JobArrayTaskLimit":        true,
		"Licenses":                 true,
		"QOSMaxJobsPerUserLimit":   true,
		"AssocGrpJobsLimit":        true,
		"AssocMaxJobsLimit":        true,
		"Resources":                false,
		"Priority":                 false,
		"QOSMaxGRESPerJob":         false,
		"JobHeldUser":              false,
		"":                         false,
	} {
		if got := WaitReason(reason); got != want {
			t.Errorf("WaitReason(%q) = %v, want %v", reason, got, want)
		}
	}
}
