package daemon

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/slurm"
)

func TestBillOf(t *testing.T) {
	req := request{Nodes: 1, GPUsPerNode: 2, CPUs: 8, MemMB: 32 << 10}
	grp := slurm.Group{Limit: "QOS q GrpTRES", GroupLimits: slurm.GroupLimits{Billing: 100}}
	type bounds struct {
		GPUs, CPUs, Nodes int
		MemMB             int64
		Room, Req         int64
	}
	tests := []struct {
		name    string
		weights string
		perJob  int64
		room    int64 // the group's room; -1: none
		want    bounds
		mem     jobMem // zero: the request's 32 GiB on its node
	}{
		{"no limit", "CPU=1,GRES/gpu=4", 0, -1, bounds{-1, -1, -1, -1, -1, 16}, jobMem{}},
		// Unset weights bill CPUs: the room is a CPU bound, whatever the GPUs.
		{"unset", "", 0, 20, bounds{-1, 20, -1, -1, 20, 8}, jobMem{}},
		// 2x4 + 8x1 = 16 per request; 40 is 2.5 of them.
		{"GPUs and CPUs", "CPU=1,GRES/gpu=4", 0, 40, bounds{5, 20, -1, -1, 40, 16}, jobMem{}},
		{"per job tighter", "CPU=1,GRES/gpu=4", 24, 40, bounds{3, 12, -1, -1, 24, 16}, jobMem{}},
		// Its node's 32 GiB bill 8 whatever it runs: 24 of 32 left, 3 times
		// its 8 CPUs.
		{"memory", "CPU=1,Mem=0.25G", 0, 32, bounds{-1, 24, 1, 32 << 10, 32, 16}, jobMem{}},
		// 16 GiB per GPU bill 4 more per GPU: 6 each, 2.5 times its 2 GPUs.
		{"memory per GPU", "GRES/gpu=2,Mem=0.25G", 0, 30, bounds{5, -1, -1, 5 * 16 << 10, 30, 12}, jobMem{perGPU: 16 << 10}},
		// Memory the policy books by default grows with the job.
		{"default memory", "CPU=1,Mem=0.25G", 0, 32, bounds{-1, 16, -1, 64 << 10, 32, 16}, jobMem{total: 32 << 10}},
		// The node bills 10 whatever runs on it: 30 of 40 left, 1.9 times 2x4 + 8x1.
		{"node", "CPU=1,GRES/gpu=4,Node=10", 0, 40, bounds{3, 15, 1, -1, 40, 26}, jobMem{}},
		{"node alone", "Node=10", 0, 35, bounds{-1, -1, 3, -1, 35, 10}, jobMem{}},
		{"nothing of rubick's", "license/x=1", 0, 5, bounds{-1, -1, -1, -1, 5, 0}, jobMem{}},
		{"full", "CPU=1,GRES/gpu=4", 0, 7, bounds{0, 3, -1, -1, 7, 16}, jobMem{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := slurm.ParseBillingWeights(tc.weights)
			if err != nil {
				t.Fatal(err)
			}
			rooms := billRooms(slurm.JobLimits{Billing: tc.perJob}, groupRoom{billing: tc.room, billingBy: grp, billingMins: -1}, nil, 60)
			mem := tc.mem
			if mem == (jobMem{}) {
				mem.perNode = req.MemMB
			}
			b := billOf(w, rooms, req, mem)
			got := bounds{b.gpus, b.cpus, b.nodes, b.memMB, b.room, b.req}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			// Whatever stays within the bounds bills no more than the room.
			if tc.want.Room >= 0 && !b.full() {
				at := func(n, none int) int {
					if n < 0 {
						return none
					}
					return n
				}
				most := b.memMB
				if most < 0 {
					most = mem.perNode + mem.perGPU*2 + mem.total
				}
				if bill := w.Of(at(b.gpus, 2), at(b.cpus, 8), at(b.nodes, 1), most); bill > b.room {
					t.Errorf("the bounds bill %d, over the room %d", bill, b.room)
				}
			}
		})
	}
}

// The tightest room binds; billing-minutes are priced over the job's time
// limit, and not at all without one.
func TestBillRooms(t *testing.T) {
	grp := slurm.Group{Limit: "QOS q GrpTRES", GroupLimits: slurm.GroupLimits{Billing: 100, BillingRunMins: 6000}}
	room := groupRoom{billing: 40, billingBy: grp, billingMins: 1800, billingMinsBy: grp}
	use := map[slurm.Group]slurm.GroupLimits{grp: {Billing: 60, BillingRunMins: 4200}}
	tests := []struct {
		name    string
		lim     slurm.JobLimits
		minutes int64
		room    int64
		perJob  bool
		says    string
	}{
		{"group", slurm.JobLimits{}, 0, 40, false, "QOS q GrpTRES billing, 40 left"},
		{"group minutes", slurm.JobLimits{}, 60, 30, false, "QOS q GrpTRESRunMins, 1800 billing-minutes left for its 60-minute time limit"},
		{"per job", slurm.JobLimits{Billing: 25}, 60, 25, true, "MaxTRESPerJob billing of its QOS, its partition's QOS or its association (25)"},
		{"per job minutes", slurm.JobLimits{BillingMins: 600}, 60, 10, true,
			"MaxTRESMinsPerJob billing of its QOS, its partition's QOS or its association, 600 billing-minutes for its 60-minute time limit"},
		{"per job minutes, no time limit", slurm.JobLimits{BillingMins: 600}, 0, 40, false, "QOS q GrpTRES billing, 40 left"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := billOf(slurm.BillingWeights{}, billRooms(tc.lim, room, use, tc.minutes), request{Nodes: 1, GPUsPerNode: 2, CPUs: 8}, jobMem{})
			if b.room != tc.room || b.by.perJob != tc.perJob || b.by.name != tc.says {
				t.Errorf("room %d (per job %v, %q), want %d (%v, %q)", b.room, b.by.perJob, b.by.name, tc.room, tc.perJob, tc.says)
			}
		})
	}
	b := billOf(slurm.BillingWeights{}, billRooms(slurm.JobLimits{}, room, use, 60), request{Nodes: 1, GPUsPerNode: 2, CPUs: 8}, jobMem{})
	if want := "waits for room in QOS q GrpTRESRunMins: billing-minutes to run in use 4200, allowed 6000, for its 60-minute time limit, and its request bills 8 (TRESBillingWeights unset: CPUs alone)"; b.waits() != want {
		t.Errorf("waits() = %q, want %q", b.waits(), want)
	}
}
