package launch

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

func TestPlanGeometry(t *testing.T) {
	cases := map[string]struct {
		plan  string
		alloc Alloc
		opts  GeometryOptions
		want  []string
		place model.Placement
	}{
		"one task per GPU, two nodes": {
			plan: "dp4.tp2.pp2.mb1.a8.z0", alloc: Alloc{Nodes: 2, GPUsOnNode: 8, CPUsOnNode: 64},
			want:  []string{"srun", "--nodes=2", "--ntasks=16", "--ntasks-per-node=8", "--gres=gpu:8", "--cpus-per-task=8", "--kill-on-bad-exit=1", "--export=ALL"},
			place: model.Placement{8, 8},
		},
		"offload binds cores": {
			plan: "dp4.tp1.pp1.mb4.a2.z2+off", alloc: Alloc{Nodes: 1, GPUsOnNode: 4, CPUsOnNode: 32},
			want:  []string{"srun", "--nodes=1", "--ntasks=4", "--ntasks-per-node=4", "--gres=gpu:4", "--cpus-per-task=8", "--cpu-bind=cores", "--kill-on-bad-exit=1", "--export=ALL"},
			place: model.Placement{4},
		},
		"nodes of different CPUs: the fewest bound every task": {
			plan: "dp16.tp1.pp1.mb1.a1.z0", alloc: Alloc{Nodes: 2, GPUsOnNode: 8, CPUsOnNode: 64, MinCPUsOnNode: 48},
			want:  []string{"srun", "--nodes=2", "--ntasks=16", "--ntasks-per-node=8", "--gres=gpu:8", "--cpus-per-task=6", "--kill-on-bad-exit=1", "--export=ALL"},
			place: model.Placement{8, 8},
		},
		"per-node launcher": {
			plan: "dp8.tp1.pp1.mb4.a1.z0", alloc: Alloc{Nodes: 2, CPUsOnNode: 16}, opts: GeometryOptions{Launcher: LauncherTorchrun},
			want:  []string{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--gres=gpu:4", "--cpus-per-task=16", "--kill-on-bad-exit=1", "--export=ALL"},
			place: model.Placement{4, 4},
		},
		"one GPU per task, explicit CPUs": {
			plan: "dp2.tp1.pp1.mb4.a1.z0", alloc: Alloc{Nodes: 1}, opts: GeometryOptions{Bind: BindPerTask, CPUsPerTask: 3},
			want:  []string{"srun", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2", "--gpus-per-task=1", "--cpus-per-task=3", "--kill-on-bad-exit=1", "--export=ALL"},
			place: model.Placement{2},
		},
		"direct": {
			plan: "dp2.tp1.pp1.mb4.a1.z0", alloc: Alloc{Nodes: 1}, opts: GeometryOptions{Mode: ModeDirect},
			place: model.Placement{2},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := PlanGeometry(mustPlan(t, c.plan), c.alloc, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, g.SrunArgs("srun")); diff != "" {
				t.Errorf("srun args (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.place, g.Placement()); diff != "" {
				t.Errorf("placement (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanGeometryErrors(t *testing.T) {
	cases := map[string]struct {
		plan  string
		alloc Alloc
		opts  GeometryOptions
	}{
		"uneven":              {"dp3.tp1.pp1.mb1.a1.z0", Alloc{Nodes: 2}, GeometryOptions{}},
		"too many per node":   {"dp8.tp1.pp1.mb1.a1.z0", Alloc{Nodes: 1, GPUsOnNode: 4}, GeometryOptions{}},
		"no nodes":            {"dp1.tp1.pp1.mb1.a1.z0", Alloc{}, GeometryOptions{}},
		"per-task + per-node": {"dp2.tp1.pp1.mb1.a1.z0", Alloc{Nodes: 1}, GeometryOptions{Mode: ModePerNode, Bind: BindPerTask}},
		"direct on two nodes": {"dp2.tp1.pp1.mb1.a1.z0", Alloc{Nodes: 2}, GeometryOptions{Mode: ModeDirect}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := PlanGeometry(mustPlan(t, c.plan), c.alloc, c.opts); !errors.Is(err, ErrBadInput) {
				t.Fatalf("err = %v, want ErrBadInput", err)
			}
		})
	}
}
