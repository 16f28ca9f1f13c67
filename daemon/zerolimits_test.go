package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// A group limit set to 0 (sacctmgr modify account physics set GrpJobs=0,
// or GrpTRES=gres/gpu=0), or a per-job one that Slurm applies
// (MaxTRESPerJob=gres/gpu=0), stops every job it applies to in Slurm: rubickd
// keeps such a job held and says why, rather than read the 0 as no limit
// and release the job sized for GPUs Slurm never lets it have. rubick
// explain reads the held job's reason as group-limit under a group's limit
// (counted in rubick_group_limited_jobs), job-limit under one on each job.
func TestCycleHoldsJobUnderZeroLimit(t *testing.T) {
	type result struct {
		Started bool
		Ignored string
		// Reason is the stored reason code of a held job.
		Reason       policy.Reason
		GroupLimited float64
	}
	tests := map[string]struct {
		qos   slurm.QOS
		assoc []slurm.Association
		// part is partition gpu's limits set to 0.
		part []slurm.ZeroLimit
		// budget is QOS normal's as slurmctld lists it (scontrol show
		// assoc_mgr), for the cycle's budgets reading.
		budget *slurm.Budget
		want   result
	}{
		"none": {want: result{Started: true}},
		"QOS GrpJobs=0": {qos: slurm.QOS{Zero: []slurm.ZeroLimit{{Name: "GrpJobs=0"}}},
			want: result{Ignored: "waits for QOS normal GrpJobs=0 to be raised: Slurm starts no job it applies to", Reason: policy.ReasonGroup, GroupLimited: 1}},
		"account GrpTRES=gres/gpu=0": {assoc: []slurm.Association{{Cluster: "lab", Account: "physics", Zero: []slurm.ZeroLimit{{Name: "GrpTRES=gres/gpu=0"}}}},
			want: result{Ignored: "waits for association physics GrpTRES=gres/gpu=0 to be raised: Slurm starts no job it applies to", Reason: policy.ReasonGroup, GroupLimited: 1}},
		// A limit on a type the job does not ask for holds it to nothing.
		"other type": {qos: slurm.QOS{Zero: []slurm.ZeroLimit{{Name: "GrpTRES=gres/gpu:h100=0", GPUType: "h100"}}}, want: result{Started: true}},
		"QOS MaxTRESPerJob=gres/gpu=0": {qos: slurm.QOS{Zero: []slurm.ZeroLimit{{Name: "MaxTRESPerJob=gres/gpu=0", PerJob: slurm.JobLimits{GPUs: 1}}}},
			want: result{Ignored: "waits for QOS normal MaxTRESPerJob=gres/gpu=0 to be raised: Slurm starts no job it applies to", Reason: reasonJobLimit}},
		// The QOS's bound applies in Slurm, not the association's 0.
		"account MaxTRESPerJob=gres/gpu=0 behind the QOS's": {qos: slurm.QOS{PerJob: slurm.JobLimits{GPUs: 4}},
			assoc: []slurm.Association{{Cluster: "lab", Account: "physics", Zero: []slurm.ZeroLimit{{Name: "MaxTRESPerJob=gres/gpu=0", PerJob: slurm.JobLimits{GPUs: 1}}}}},
			want:  result{Started: true}},
		// A partition's MaxTime=0 holds every job in it (PartitionTimeLimit),
		// but those of a QOS with the PartitionTimeLimit flag.
		"partition MaxTime=0": {part: []slurm.ZeroLimit{{Name: "MaxTime=0", PerJob: slurm.JobLimits{Wall: 1}}},
			want: result{Ignored: "waits for partition gpu MaxTime=0 to be raised: Slurm starts no job it applies to", Reason: reasonJobLimit}},
		"partition MaxTime=0, QOS PartitionTimeLimit": {qos: slurm.QOS{OverPartTime: true},
			part: []slurm.ZeroLimit{{Name: "MaxTime=0", PerJob: slurm.JobLimits{Wall: 1}}}, want: result{Started: true}},
		// slurmdbd does not list a QOS's GrpTRESMins; slurmctld does.
		"QOS GrpTRESMins=gres/gpu=0": {budget: &slurm.Budget{Spent: slurm.GroupLimits{GPURunMins: 30}, Zero: []slurm.ZeroLimit{{Name: "GrpTRESMins=gres/gpu=0"}}},
			want: result{Ignored: "waits for QOS normal GrpTRESMins=gres/gpu=0 to be raised: Slurm starts no job it applies to", Reason: policy.ReasonGroup, GroupLimited: 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := heldJob(21, "bert", 1, 2)
			j.Cluster, j.QOS, j.Account, j.User = "lab", "normal", "physics", "bob"
			q := tc.qos
			q.Name = "normal"
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"normal": q}, Associations: tc.assoc,
				Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu", Zero: tc.part}}}
			c := &limitsCluster{fakeCluster: &fakeCluster{nodes: labNodes(4), jobs: []slurm.Job{j}}, limits: limits}
			a := &fakeApplier{}
			d, st := newTestDaemonWith(t, c, a, func(*Config) {})
			if tc.budget != nil {
				d.deps.Budgets = &fakeBudgets{b: slurm.Budgets{QOS: map[string]slurm.Budget{"normal": *tc.budget}}}
			}
			rep, err := d.Cycle(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			var got result
			for _, act := range a.got {
				if act.JobID == 21 && act.Kind == slurm.ActionStart {
					got.Started = true
				}
			}
			got.Ignored = rep.Ignored[21]
			if !got.Started {
				reasons, err := st.Reasons(context.Background(), 21, 1)
				if err != nil || len(reasons) != 1 {
					t.Fatalf("stored reasons of job 21: %v, %v; want one", reasons, err)
				}
				var act policy.Action
				if err := json.Unmarshal(reasons[0].Reason, &act); err != nil {
					t.Fatal(err)
				}
				got.Reason = act.Reason
			}
			got.GroupLimited = gauge(t, d, "rubick_group_limited_jobs")
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// A running job under a limit set to 0 (lowered while it ran: Slurm does
// not stop it) runs on as it is: restarted on another size or preempted,
// it would wait until the limit is raised. The policy is not offered it,
// so it can do neither, and rubick says why; a pending job under the same
// limit waits, and one under none is planned.
func TestCycleKeepsRunningJobUnderZeroLimit(t *testing.T) {
	for name, zero := range map[string]slurm.ZeroLimit{
		"GrpJobs=0":                {Name: "GrpJobs=0"},
		"MaxTRESPerJob=gres/gpu=0": {Name: "MaxTRESPerJob=gres/gpu=0", PerJob: slurm.JobLimits{GPUs: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			running := runningJob(5, "bert")
			running.Cluster, running.QOS, running.Account = "lab", "frozen", "physics"
			running.NodeList, running.GPUs, running.Tag.Plan = []string{"node1"}, 4, "dp4.tp1.pp1.mb8.a1.z0"
			pending := heldJob(6, "bert", 1, 4)
			pending.Cluster, pending.QOS, pending.Account, pending.User = "lab", "frozen", "physics", "alice"
			other := heldJob(7, "bert", 1, 4)
			other.Cluster, other.QOS, other.Account, other.User = "lab", "normal", "physics", "alice"
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"frozen": {Name: "frozen", Zero: []slurm.ZeroLimit{zero}}, "normal": {Name: "normal"}},
				Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu"}}}
			offered, rep := offerCycle(t, limits, running, pending, other)
			if diff := cmp.Diff([]string{"7"}, offered); diff != "" {
				t.Errorf("jobs offered to the policy (-want +got):\n%s", diff)
			}
			want := map[int]string{
				5: "QOS frozen " + zero.Name + ": runs on as it is, since Slurm would not start it again until the limit is raised",
				6: "waits for QOS frozen " + zero.Name + " to be raised: Slurm starts no job it applies to",
			}
			if diff := cmp.Diff(want, rep.Ignored); diff != "" {
				t.Errorf("ignored (-want +got):\n%s", diff)
			}
		})
	}
}

// A running job whose time limit is above a MaxWall (or its partition's
// MaxTime) lowered while it ran runs on as it is, as under a limit set to
// 0: a restart never cuts the user's --time (but at a deadline), so Slurm
// would hold the requeued job (QOSMaxWallDurationPerJobLimit,
// PartitionTimeLimit) until the limit is raised. One whose own limit
// fits, though rubick stretched the limit it runs with past the wall, is
// offered to the policy, as is one whose QOS lifts the partition's MaxTime
// or whose deadline cuts a restart within the wall.
func TestCycleKeepsRunningJobOverWall(t *testing.T) {
	const kept = "the MaxWall of its QOS or association or its partition's MaxTime, 60 min, is below the time limit it would start again with (%s): " +
		"runs on as it is, since Slurm would not start it again until the limit is raised"
	tests := map[string]struct {
		qos      slurm.QOS
		maxTime  time.Duration
		limit    time.Duration     // the time limit it runs with
		extra    map[string]string // its tag's
		deadline time.Duration     // from now; 0: none
		want     string            // why it is kept; "": offered
	}{
		"QOS MaxWall below":      {qos: slurm.QOS{PerJob: slurm.JobLimits{Wall: time.Hour}}, limit: 2 * time.Hour, want: fmt.Sprintf(kept, "120 min")},
		"QOS MaxWall above":      {qos: slurm.QOS{PerJob: slurm.JobLimits{Wall: 3 * time.Hour}}, limit: 2 * time.Hour},
		"no time limit":          {qos: slurm.QOS{PerJob: slurm.JobLimits{Wall: time.Hour}}, want: fmt.Sprintf(kept, "none")},
		"partition MaxTime":      {maxTime: time.Hour, limit: 2 * time.Hour, want: fmt.Sprintf(kept, "120 min")},
		"PartitionTimeLimit":     {qos: slurm.QOS{OverPartTime: true}, maxTime: time.Hour, limit: 2 * time.Hour},
		"stretched past it":      {qos: slurm.QOS{PerJob: slurm.JobLimits{Wall: time.Hour}}, limit: 2 * time.Hour, extra: map[string]string{"tl": "30", "ts": "120"}},
		"deadline within it":     {qos: slurm.QOS{PerJob: slurm.JobLimits{Wall: time.Hour}}, limit: 2 * time.Hour, deadline: 40 * time.Minute},
		"deadline past it":       {qos: slurm.QOS{PerJob: slurm.JobLimits{Wall: time.Hour}}, limit: 2 * time.Hour, deadline: 90 * time.Minute, want: fmt.Sprintf(kept, "90 min")},
		"no wall, no time limit": {},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := runningJob(5, "bert")
			j.Cluster, j.QOS, j.TimeLimit = "lab", "normal", tc.limit
			j.NodeList, j.GPUs, j.Tag.Plan, j.Tag.Extra = []string{"node1"}, 4, "dp4.tp1.pp1.mb8.a1.z0", tc.extra
			j.StartTime = t0.Add(-10 * time.Minute)
			if tc.deadline > 0 {
				j.Deadline = t0.Add(tc.deadline)
			}
			q := tc.qos
			q.Name = "normal"
			limits := slurm.Limits{QOS: map[string]slurm.QOS{"normal": q}, Partitions: map[string]slurm.Partition{"gpu": {Name: "gpu", MaxTime: tc.maxTime}}}
			offered, rep := offerCycle(t, limits, j)
			got := rep.Ignored[5]
			if tc.want == "" && !slices.Equal(offered, []string{"5"}) {
				t.Errorf("offered %v, ignored %q; want job 5 offered", offered, got)
			}
			if tc.want != "" && (len(offered) != 0 || got != tc.want) {
				t.Errorf("offered %v, ignored %q; want none offered, and %q", offered, got, tc.want)
			}
		})
	}
}

// offerCycle runs one cycle of jobs under limits on two lab nodes, the
// first half busy, with a policy that plans nothing, and returns the IDs
// of the jobs the policy was offered and the cycle's report.
func offerCycle(t *testing.T, limits slurm.Limits, jobs ...slurm.Job) ([]string, CycleReport) {
	t.Helper()
	nodes := labNodes(2)
	nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 4, 8
	c := &limitsCluster{fakeCluster: &fakeCluster{nodes: nodes, jobs: jobs}, limits: limits}
	d, _ := newTestDaemonWith(t, c, &fakeApplier{}, func(*Config) {})
	offered := &offeredJobs{}
	d.deps.Policy = offered
	rep, err := d.Cycle(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	return offered.ids, rep
}

// offeredJobs is a Policy that plans nothing and records the jobs of the
// snapshot it was given.
type offeredJobs struct{ ids []string }

func (*offeredJobs) Name() string { return "offered" }
func (o *offeredJobs) Decide(_ context.Context, s *policy.Snapshot) (policy.Plan, error) {
	for _, j := range s.Jobs {
		o.ids = append(o.ids, j.ID)
	}
	return policy.Plan{}, nil
}
