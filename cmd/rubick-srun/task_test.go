package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/model"
)

// TestAsTask runs rubick-srun --as-task as srun would start it: the command
// it execs sees its ranks from Slurm's task variables, once each, in place
// of any the job's environment had.
func TestAsTask(t *testing.T) {
	envProg, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env program")
	}
	cmd := exec.Command(testSelf(t), "--as-task", "--", envProg)
	cmd.Env = append(os.Environ(), "RUBICK_SRUN_MAIN=1", "RANK=99", "SLURM_PROCID=5", "SLURM_LOCALID=1", "SLURM_NODEID=2")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	var got []string
	for _, l := range strings.Split(out.String(), "\n") {
		if k, _, _ := strings.Cut(l, "="); k == "RANK" || k == "LOCAL_RANK" || k == "GROUP_RANK" {
			got = append(got, l)
		}
	}
	slices.Sort(got)
	if d := cmp.Diff([]string{"GROUP_RANK=2", "LOCAL_RANK=1", "RANK=5"}, got); d != "" {
		t.Errorf("the task's ranks (-want +got):\n%s", d)
	}
}

// TestAsTaskLocalRank: --local-rank-at puts the task's --local_rank=N
// where the deepspeed launcher would.
func TestAsTaskLocalRank(t *testing.T) {
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Skip("no echo program")
	}
	cmd := exec.Command(testSelf(t), "--as-task", "--local-rank-at", "2", "--", echo, "train.py", "--x")
	cmd.Env = append(os.Environ(), "RUBICK_SRUN_MAIN=1", "SLURM_PROCID=5", "SLURM_LOCALID=1", "SLURM_NODEID=2")
	out, err := cmd.Output()
	if err != nil || string(out) != "train.py --local_rank=1 --x\n" {
		t.Errorf("the command got %q, %v; want --local_rank=1 after the script", out, err)
	}
}

// TestAsTaskOneGPU: a task bound to its one GPU sees it as device 0, so
// its local rank, from which trainers pick their device, is 0 (before, the
// task of local ID 3 asked for device 3 of one).
func TestAsTaskOneGPU(t *testing.T) {
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Skip("no echo program")
	}
	cmd := exec.Command(testSelf(t), "--as-task", "--gpu-bind", "per-task", "--local-rank-at", "2", "--", echo, "train.py", "--x")
	cmd.Env = append(os.Environ(), "RUBICK_SRUN_MAIN=1", "SLURM_PROCID=5", "SLURM_LOCALID=3", "SLURM_NODEID=1")
	if out, err := cmd.Output(); err != nil || string(out) != "train.py --local_rank=0 --x\n" {
		t.Errorf("the command got %q, %v; want --local_rank=0 after the script", out, err)
	}
	got, err := taskEnv(envMap(map[string]string{"SLURM_PROCID": "5", "SLURM_LOCALID": "3", "SLURM_NODEID": "1"}), launch.BindPerTask)
	if d := cmp.Diff([]string{"RANK=5", "LOCAL_RANK=0", "GROUP_RANK=1"}, got); err != nil || d != "" {
		t.Errorf("taskEnv (-want +got), %v:\n%s", err, d)
	}
}

func TestAsTaskErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		cmd  []string
		code int
		want string
	}{
		{map[string]string{"SLURM_LOCALID": "0", "SLURM_NODEID": "0"}, []string{"true"}, exitUsage, `SLURM_PROCID="" is not a task number`},
		{map[string]string{"SLURM_PROCID": "-1", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}, []string{"true"}, exitUsage, `SLURM_PROCID="-1"`},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_LOCALID": "x", "SLURM_NODEID": "0"}, []string{"true"}, exitUsage, `SLURM_LOCALID="x"`},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}, []string{"/no/such/trainer"}, exitLaunch, "/no/such/trainer"},
	} {
		var out, errb bytes.Buffer
		code := run(t.Context(), append([]string{"--as-task", "--"}, tc.cmd...), envMap(tc.env), &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("--as-task with %v: exit %d, %q; want %d naming %q", tc.env, code, errb.String(), tc.code, tc.want)
		}
	}
}

// TestWrap: a per-GPU step's tasks go through --as-task, with the world's
// size and rendezvous in the step's environment; a job's own MASTER_ADDR
// and MASTER_PORT are kept; tensor parallelism gets
// CUDA_DEVICE_MAX_CONNECTIONS=1 unless the job set it.
func TestWrap(t *testing.T) {
	train := []string{"python", "pretrain_gpt.py"}
	plan := func(s string) model.Plan {
		p, err := model.ParsePlan(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		env      map[string]string
		geo      launch.Geometry
		plan     string
		wantArgv []string
		wantEnv  []string
	}{
		{"per GPU, two nodes", map[string]string{"SLURM_JOB_ID": "123456", "SLURM_JOB_NODELIST": "gpu[07-08]"},
			launch.Geometry{Mode: launch.ModePerGPU, Nodes: 2, GPUsPerNode: 4, TasksPerNode: 4}, "dp4.tp2.pp1.mb1.a1.z0",
			append([]string{"/bin/rubick-srun", "--as-task", "--"}, train...),
			[]string{"WORLD_SIZE=8", "LOCAL_WORLD_SIZE=4", "MASTER_PORT=23456", "MASTER_ADDR=gpu07", "CUDA_DEVICE_MAX_CONNECTIONS=1"}},
		{"the job's own rendezvous and connections", map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu[07-08]",
			"MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "6000", "CUDA_DEVICE_MAX_CONNECTIONS": "8"},
			launch.Geometry{Mode: launch.ModePerGPU, Nodes: 2, GPUsPerNode: 4, TasksPerNode: 4}, "dp4.tp2.pp1.mb1.a1.z0",
			append([]string{"/bin/rubick-srun", "--as-task", "--"}, train...),
			[]string{"WORLD_SIZE=8", "LOCAL_WORLD_SIZE=4", "MASTER_PORT=6000", "MASTER_ADDR=10.1.1.1"}},
		{"per GPU, one node, outside a job", nil,
			launch.Geometry{Mode: launch.ModePerGPU, Nodes: 1, GPUsPerNode: 2, TasksPerNode: 2}, "dp2.tp1.pp1.mb1.a1.z0",
			append([]string{"/bin/rubick-srun", "--as-task", "--"}, train...),
			[]string{"WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2", "MASTER_PORT=29500", "MASTER_ADDR=127.0.0.1"}},
		{"per GPU, one GPU per task: the tasks know", map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu07"},
			launch.Geometry{Mode: launch.ModePerGPU, Bind: launch.BindPerTask, Nodes: 1, GPUsPerNode: 2, TasksPerNode: 2}, "dp2.tp1.pp1.mb1.a1.z0",
			append([]string{"/bin/rubick-srun", "--as-task", "--gpu-bind", "per-task", "--"}, train...),
			[]string{"WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2", "MASTER_PORT=20007", "MASTER_ADDR=gpu07"}},
		{"per node: the launcher sets the ranks", map[string]string{"SLURM_JOB_ID": "7"},
			launch.Geometry{Mode: launch.ModePerNode, Nodes: 2, GPUsPerNode: 4, TasksPerNode: 1}, "dp2.tp4.pp1.mb1.a1.z0",
			train, []string{"CUDA_DEVICE_MAX_CONNECTIONS=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := envMap(tc.env)
			st := step{argv: slices.Clone(train)}
			distributedFor(getenv, getenv("SLURM_JOB_ID"), firstNode(getenv)).wrap(&st, tc.geo, plan(tc.plan), "/bin/rubick-srun", getenv)
			if d := cmp.Diff(tc.wantArgv, st.argv); d != "" {
				t.Errorf("argv (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantEnv, st.env); d != "" {
				t.Errorf("env (-want +got):\n%s", d)
			}
		})
	}
}

// stepOf is the step planStep makes, in a state directory of its own, of
// rubick-srun's args for plan on alloc, with env.
func stepOf(t *testing.T, args []string, plan string, alloc launch.Alloc, env func(string) string) step {
	t.Helper()
	cfg, err := parseFlags(args, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p, err := model.ParsePlan(plan)
	if err != nil {
		t.Fatal(err)
	}
	st, err := planStep(cfg, p, alloc, t.TempDir(), env)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPlanStepTorchrunNodes: torchrun on two nodes meets at the job's
// first node, under the job's id.
func TestPlanStepTorchrunNodes(t *testing.T) {
	st := stepOf(t, []string{"--", "torchrun", "--standalone", "--nproc_per_node=8", "pretrain_gpt.py", "--global-batch-size", "16"},
		"dp8.tp1.pp1.mb2.a1.z0", launch.Alloc{Nodes: 2, GPUsOnNode: 4, CPUsOnNode: 16},
		envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[3,9]"}))
	want := strings.Fields("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --gres=gpu:4 --cpus-per-task=16 --kill-on-bad-exit=1 --export=ALL " +
		"torchrun --nproc_per_node=4 --nnodes 2 --rdzv_backend c10d --rdzv_endpoint gpu3:20042 --rdzv_id 42 pretrain_gpt.py --global-batch-size 16 " +
		"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 2")
	if d := cmp.Diff(want, st.argv); d != "" {
		t.Errorf("argv (-want +got):\n%s", d)
	}
}

// TestPlanStepInContainer: a launcher inside a container's exec is sized
// and run once per node as it is outside one; the deepspeed launcher's
// workers on several nodes run in the container too, under its python3
// (the host cannot read the launcher in the image). Before, the line was
// a plain program: srun ran it once per GPU, each starting the line's 8
// ranks.
func TestPlanStepInContainer(t *testing.T) {
	env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[3,9]"})
	alloc := launch.Alloc{Nodes: 2, GPUsOnNode: 4, CPUsOnNode: 16}
	st := stepOf(t, []string{"--", "apptainer", "exec", "--nv", "-B", "/data", "img.sif", "torchrun", "--nproc_per_node=8", "pretrain_gpt.py",
		"--global-batch-size", "16"}, "dp8.tp1.pp1.mb2.a1.z0", alloc, env)
	want := strings.Fields("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --gres=gpu:4 --cpus-per-task=16 --kill-on-bad-exit=1 --export=ALL " +
		"apptainer exec --nv -B /data img.sif torchrun --nproc_per_node=4 --nnodes 2 --rdzv_backend c10d --rdzv_endpoint gpu3:20042 --rdzv_id 42 " +
		"pretrain_gpt.py --global-batch-size 16 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 2")
	if d := cmp.Diff(want, st.argv); d != "" {
		t.Errorf("torchrun: argv (-want +got):\n%s", d)
	}
	ds := filepath.Join(t.TempDir(), "ds.json")
	if err := os.WriteFile(ds, []byte(`{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	st = stepOf(t, []string{"--", "singularity", "exec", "--nv", "img.sif", "deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", ds},
		"dp8.tp1.pp1.mb2.a1.z0", alloc, env)
	if n := len(st.argv); n < 2 || !strings.HasSuffix(st.argv[n-1], "rubick-ds.json") {
		t.Fatalf("deepspeed: argv %q, want the rewritten config last", st.argv)
	}
	// The workers' --local_rank goes after the script: at 7 of the
	// command (stepOf's rubick-srun has no path).
	want = append(strings.Fields("srun --nodes=2 --ntasks=8 --ntasks-per-node=4 --gres=gpu:4 --cpus-per-task=4 --kill-on-bad-exit=1 --export=ALL"),
		"", "--as-task", "--local-rank-at", "7", "--", "singularity", "exec", "--nv", "img.sif", "python3", "-u", "train.py",
		"--deepspeed_config", st.argv[len(st.argv)-1])
	if d := cmp.Diff(want, st.argv); d != "" {
		t.Errorf("deepspeed: argv (-want +got):\n%s", d)
	}
}

// TestSrunArgs: the job's own srun options (a container's, say) go to
// every step after the geometry's, planned or not; those the plan sets,
// a program in their place, and any with no srun step are refused.
func TestSrunArgs(t *testing.T) {
	env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu3"})
	own := []string{"--srun-arg=--container-image=nvcr.io#nvidia/pytorch:24.05-py3", "--srun-arg", "--container-mounts", "--srun-arg", "/data:/data"}
	st := stepOf(t, append(own, "--", "torchrun", "--nproc_per_node=8", "pretrain_gpt.py", "--global-batch-size", "16"),
		"dp4.tp1.pp1.mb2.a2.z0", launch.Alloc{Nodes: 1, GPUsOnNode: 8, CPUsOnNode: 16}, env)
	want := strings.Fields("srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --gres=gpu:4 --cpus-per-task=16 --kill-on-bad-exit=1 --export=ALL " +
		"--container-image=nvcr.io#nvidia/pytorch:24.05-py3 --container-mounts /data:/data " +
		"torchrun --nproc_per_node=4 --nnodes 1 --master_port 20042 pretrain_gpt.py --global-batch-size 16 " +
		"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 2")
	if d := cmp.Diff(want, st.argv); d != "" {
		t.Errorf("planned: argv (-want +got):\n%s", d)
	}
	cfg, err := parseFlags(append(own, "--", "python", "train.py"), envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want = strings.Fields("srun --export=ALL --container-image=nvcr.io#nvidia/pytorch:24.05-py3 --container-mounts /data:/data python train.py")
	if d := cmp.Diff(want, unchangedStep(cfg).argv); d != "" {
		t.Errorf("unplanned: argv (-want +got):\n%s", d)
	}
	// The profiling phase's runs too.
	if cfg, err = parseFlags(append(own, "--", "python", "pretrain_gpt.py", "--micro-batch-size", "2", "--global-batch-size", "16"),
		envMap(nil), io.Discard); err != nil {
		t.Fatal(err)
	}
	ph, err := newProfilePhase(cfg, nil, launch.Alloc{Nodes: 1, GPUsOnNode: 8, CPUsOnNode: 16}, t.TempDir(), nil)
	if err != nil || len(ph.runs) == 0 {
		t.Fatalf("profiling phase: %v, %v", ph, err)
	}
	geo, err := ph.geometry(ph.runs[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := geo.SrunArgs("srun"); !slices.Contains(got, "--container-mounts") {
		t.Errorf("profiling run: srun %q, want the job's own options", got)
	}
	for _, tc := range []struct{ args, want string }{
		{"--srun-arg=-N2", `--srun-arg="-N2": rubick-srun sets srun's -N (--nodes) from the plan`},
		{"--srun-arg=--gres=gpu:8", `--srun-arg="--gres=gpu:8": rubick-srun sets srun's --gres`},
		{"--srun-arg --export=NONE", `rubick-srun sets srun's --export`},
		{"--srun-arg=hostname", `--srun-arg="hostname": not an srun option`},
		{"--launcher direct --srun-arg=--container-image=x", `--srun-arg="--container-image=x" with --launcher direct`},
	} {
		_, err := parseFlags(append(strings.Fields(tc.args), "--", "python", "train.py"), envMap(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %s", tc.args, err, tc.want)
		}
	}
}

// TestPlanStepTorchrunDirect: without srun the launcher is sized too, on
// the batch host (before, torchrun started the line's 8 ranks for a
// 4-GPU plan).
func TestPlanStepTorchrunDirect(t *testing.T) {
	st := stepOf(t, []string{"--launcher", "direct", "--", "torchrun", "--nproc_per_node=8", "pretrain_gpt.py", "--global-batch-size", "32"},
		"dp4.tp1.pp1.mb4.a2.z0", launch.Alloc{Nodes: 1, GPUsOnNode: 8, CPUsOnNode: 16},
		envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu3"}))
	want := strings.Fields("torchrun --nproc_per_node=4 --nnodes 1 --master_port 20042 pretrain_gpt.py --global-batch-size 32 " +
		"--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 4")
	if d := cmp.Diff(want, st.argv); d != "" {
		t.Errorf("argv (-want +got):\n%s", d)
	}
}

// TestPlanStepCheckpointDir: a Megatron line with its own --load and no
// --save starts from its --load, and, once --checkpoint-dir holds a
// checkpoint the job saved, resumes from that instead.
func TestPlanStepCheckpointDir(t *testing.T) {
	for _, tc := range []struct {
		name     string
		saved    string // tracker file in the checkpoint directory, "" for none
		restarts string // SLURM_RESTART_COUNT
		load     string // the --load the step gets; "CKPT" is the directory
	}{
		{name: "first start", load: "/models/base"},
		{name: "restart after a Megatron checkpoint", saved: "latest_checkpointed_iteration.txt", restarts: "1", load: "CKPT"},
		{name: "restart after a Megatron-DeepSpeed checkpoint", saved: "latest", restarts: "2", load: "CKPT"},
		{name: "new job, an older job's checkpoint", saved: "latest", restarts: "0", load: "/models/base"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ckpt := t.TempDir()
			if tc.saved != "" {
				if err := os.WriteFile(filepath.Join(ckpt, tc.saved), []byte("100\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			st := stepOf(t, []string{"--launcher", "direct", "--checkpoint-dir", ckpt, "--",
				"python", "pretrain_gpt.py", "--load", "/models/base", "--global-batch-size", "8"},
				"dp1.tp1.pp1.mb8.a1.z0", launch.Alloc{Nodes: 1, GPUsOnNode: 1}, envMap(map[string]string{"SLURM_RESTART_COUNT": tc.restarts}))
			load := strings.ReplaceAll(tc.load, "CKPT", ckpt)
			want := []string{"python", "pretrain_gpt.py", "--load", load, "--global-batch-size", "8", "--tensor-model-parallel-size", "1",
				"--pipeline-model-parallel-size", "1", "--micro-batch-size", "8", "--save", ckpt}
			if d := cmp.Diff(want, st.argv); d != "" {
				t.Errorf("argv (-want +got):\n%s", d)
			}
		})
	}
}

// TestPlanStepResumesFromSave: a Megatron line that saves to Y and loads
// X starts from X, and, once Y holds a checkpoint the job saved, resumes
// from Y instead; --ensure-load=false leaves its --load alone.
func TestPlanStepResumesFromSave(t *testing.T) {
	for _, tc := range []struct {
		name     string
		saved    string // tracker file in Y, "" for none
		restarts string // SLURM_RESTART_COUNT
		flags    []string
		load     string // the --load the step gets; "CKPT" is Y
	}{
		{name: "first start", load: "/models/base"},
		{name: "restart after a Megatron checkpoint", saved: "latest_checkpointed_iteration.txt", restarts: "1", load: "CKPT"},
		{name: "restart after a Megatron-DeepSpeed checkpoint", saved: "latest", restarts: "3", load: "CKPT"},
		{name: "restart, loads left alone", saved: "latest", restarts: "1", flags: []string{"--ensure-load=false"}, load: "/models/base"},
		{name: "new job, an older job's checkpoint", saved: "latest", load: "/models/base"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ckpt := t.TempDir()
			if tc.saved != "" {
				if err := os.WriteFile(filepath.Join(ckpt, tc.saved), []byte("100\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			args := append(append([]string{"--launcher", "direct"}, tc.flags...), "--",
				"python", "pretrain_gpt.py", "--save", ckpt, "--load=/models/base", "--global-batch-size", "8")
			st := stepOf(t, args, "dp1.tp1.pp1.mb8.a1.z0", launch.Alloc{Nodes: 1, GPUsOnNode: 1},
				envMap(map[string]string{"SLURM_RESTART_COUNT": tc.restarts}))
			load := strings.ReplaceAll(tc.load, "CKPT", ckpt)
			want := []string{"python", "pretrain_gpt.py", "--save", ckpt, "--load=" + load, "--global-batch-size", "8",
				"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "8"}
			if d := cmp.Diff(want, st.argv); d != "" {
				t.Errorf("argv (-want +got):\n%s", d)
			}
		})
	}
}

// TestPlanStepCPUs: the step's CPUs, in RUBICK_CPUS and its samples, are
// those srun gives its tasks (--cpus-per-task each), not the node's; a
// step without srun has the batch step's.
func TestPlanStepCPUs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		line  string
		plan  string
		alloc launch.Alloc
		want  int
	}{
		{"the node's CPUs shared evenly", nil, "python pretrain_gpt.py", "dp8.tp1.pp1.mb2.a1.z0",
			launch.Alloc{Nodes: 2, GPUsOnNode: 4, CPUsOnNode: 16}, 32},
		{"a remainder no task gets", nil, "python pretrain_gpt.py", "dp8.tp1.pp1.mb2.a1.z0",
			launch.Alloc{Nodes: 2, GPUsOnNode: 4, CPUsOnNode: 30}, 56},
		{"--cpus-per-task", []string{"--cpus-per-task", "2"}, "python pretrain_gpt.py", "dp4.tp1.pp1.mb4.a1.z2+off",
			launch.Alloc{Nodes: 1, GPUsOnNode: 4, CPUsOnNode: 16}, 8},
		{"nodes of different CPUs", nil, "python pretrain_gpt.py", "dp8.tp1.pp1.mb2.a1.z0",
			launch.Alloc{Nodes: 2, GPUsOnNode: 4, CPUsOnNode: 32, MinCPUsOnNode: 16}, 32},
		{"a launcher per node", nil, "torchrun --nproc_per_node=4 pretrain_gpt.py", "dp8.tp1.pp1.mb2.a1.z0",
			launch.Alloc{Nodes: 2, GPUsOnNode: 4, CPUsOnNode: 30}, 60},
		{"no srun", []string{"--launcher", "direct", "--cpus-per-task", "2"}, "python pretrain_gpt.py", "dp4.tp1.pp1.mb4.a1.z0",
			launch.Alloc{Nodes: 1, GPUsOnNode: 4, CPUsOnNode: 16}, 16},
		{"unknown", nil, "python pretrain_gpt.py", "dp4.tp1.pp1.mb4.a1.z0", launch.Alloc{Nodes: 1, GPUsOnNode: 4}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := stepOf(t, slices.Concat(tc.flags, []string{"--"}, strings.Fields(tc.line), []string{"--global-batch-size", "16"}),
				tc.plan, tc.alloc, envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[1-2]"}))
			var env []string
			for _, kv := range st.env {
				if strings.HasPrefix(kv, "RUBICK_CPUS=") {
					env = append(env, kv)
				}
			}
			var wantEnv []string
			if tc.want > 0 {
				wantEnv = []string{"RUBICK_CPUS=" + strconv.Itoa(tc.want)}
			}
			if st.cpus != tc.want || !slices.Equal(env, wantEnv) {
				t.Errorf("step CPUs %d, env %q; want %d, %q (argv %q)", st.cpus, env, tc.want, wantEnv, st.argv)
			}
		})
	}
}

// TestPlanStepParser: a Megatron-DeepSpeed step's iteration times are
// Megatron's lines alone. DeepSpeed's steps_per_print line comes first in
// the iteration both log: read too, it took the warm-up skip and let the
// first Megatron line, startup averaged in, through as a sample. A Hugging
// Face Trainer's are its progress bar's: accelerate turns DeepSpeed's
// lines off, and the step measured nothing.
func TestPlanStepParser(t *testing.T) {
	const (
		megatron  = " iteration       10/     100 | consumed samples: 320 | elapsed time per iteration (ms): 3900.0 |"
		deepspeed = "[INFO] [timer.py:260:stop] epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=32.0, CurrSamplesPerSec=32.0, MemAllocated=1GB"
		bar1      = "  1%|          | 1/100 [00:03<05:00,  3.03s/it]"
		bar2      = "  2%|▏         | 2/100 [00:04<04:00,  2.50s/it]"
	)
	cfgPath := filepath.Join(t.TempDir(), "ds.json")
	if err := os.WriteFile(cfgPath, []byte(`{"train_batch_size": 32}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		line string
		want []string // the sources of the lines read, in order
	}{
		{"megatron-deepspeed", "python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 32 --deepspeed --deepspeed_config " + cfgPath,
			[]string{report.SourceMegatron}},
		{"megatron", "python pretrain_gpt.py --micro-batch-size 4 --global-batch-size 32", []string{report.SourceMegatron}},
		{"deepspeed", "python train.py --deepspeed_config " + cfgPath, []string{report.SourceDeepSpeed, report.SourceMegatron}},
		{"hugging face", "python train.py --deepspeed " + cfgPath + " --per_device_train_batch_size 4",
			[]string{report.SourceTrainerBar, report.SourceTrainerBar}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := stepOf(t, append([]string{"--"}, strings.Fields(tc.line)...), "dp8.tp1.pp1.mb4.a1.z0",
				launch.Alloc{Nodes: 1, GPUsOnNode: 8}, envMap(nil))
			var got []string
			for _, l := range []string{deepspeed, megatron, bar1, bar1, bar2} {
				if m, ok := st.parser.Parse(l); ok {
					got = append(got, m.Source)
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("lines read (-want +got):\n%s", d)
			}
		})
	}
}

// TestAllocFromEnv: the job's allocation as Slurm's variables give it,
// with the fewest CPUs of any of its nodes (SLURM_JOB_CPUS_PER_NODE).
func TestAllocFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    launch.Alloc
		wantErr string
	}{
		{"out of a job", nil, launch.Alloc{Nodes: 1}, ""},
		{"one node", map[string]string{"SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "8", "SLURM_CPUS_ON_NODE": "64",
			"SLURM_JOB_CPUS_PER_NODE": "64"}, launch.Alloc{Nodes: 1, GPUsOnNode: 8, CPUsOnNode: 64, MinCPUsOnNode: 64}, ""},
		{"nodes of two sizes", map[string]string{"SLURM_JOB_NUM_NODES": "3", "SLURM_GPUS_ON_NODE": "8", "SLURM_CPUS_ON_NODE": "72",
			"SLURM_JOB_CPUS_PER_NODE": "72(x2),36"}, launch.Alloc{Nodes: 3, GPUsOnNode: 8, CPUsOnNode: 72, MinCPUsOnNode: 36}, ""},
		{"more nodes than the job's", map[string]string{"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_CPUS_PER_NODE": "72(x2),36"},
			launch.Alloc{}, `SLURM_JOB_CPUS_PER_NODE="72(x2),36" lists 3 nodes but SLURM_JOB_NUM_NODES=2`},
		{"not a count", map[string]string{"SLURM_JOB_CPUS_PER_NODE": "many"}, launch.Alloc{}, `SLURM_JOB_CPUS_PER_NODE="many": "many"`},
		{"no repeat", map[string]string{"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_CPUS_PER_NODE": "8(x0),8(x2)"}, launch.Alloc{},
			`SLURM_JOB_CPUS_PER_NODE="8(x0),8(x2)": "8(x0)"`},
		{"unclosed", map[string]string{"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_CPUS_PER_NODE": "8(x2"}, launch.Alloc{},
			`SLURM_JOB_CPUS_PER_NODE="8(x2": "8(x2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := allocFromEnv(envMap(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("alloc (-want +got):\n%s", d)
			}
		})
	}
}

func TestWithEnv(t *testing.T) {
	got := withEnv([]string{"A=1", "RANK=9", "B=2", "RANK=8"}, []string{"RANK=0", "C=3"})
	if d := cmp.Diff([]string{"A=1", "B=2", "RANK=0", "C=3"}, got); d != "" {
		t.Errorf("withEnv (-want +got):\n%s", d)
	}
}

// TestCheckpointBeforeStart: a checkpoint signal that came before the step
// started (kept by run's early subscription) ends the launch unstarted,
// as checkpointed, so the job is requeued rather than the signal lost.
func TestCheckpointBeforeStart(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	touch, err := exec.LookPath("touch")
	if err != nil {
		t.Skip("no touch program")
	}
	early := make(chan os.Signal, 1)
	early <- syscall.SIGUSR1
	var out, errb bytes.Buffer
	status, ckpt := launchStep(t.Context(), step{argv: []string{touch, ran}}, syscall.SIGUSR1, early, nil, &out, &errb, slog.New(slog.DiscardHandler))
	if status != exitCheckpointed || !ckpt {
		t.Errorf("launchStep = %d, %v; want %d, checkpointed", status, ckpt, exitCheckpointed)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the step ran")
	}
	// Without one, the step runs.
	status, ckpt = launchStep(t.Context(), step{argv: []string{touch, ran}}, syscall.SIGUSR1, make(chan os.Signal), nil, &out, &errb, slog.New(slog.DiscardHandler))
	if _, err := os.Stat(ran); err != nil || status != 0 || ckpt {
		t.Errorf("launchStep = %d, %v, %v; want the step run", status, ckpt, err)
	}
}

// TestCheckpointWhileReadingPlan: rubick-srun, signalled while it reads its
// plan, starts no step and requeues the job held, as after a checkpoint.
func TestCheckpointWhileReadingPlan(t *testing.T) {
	bin := fakes(t)
	dir := t.TempDir()
	reading, scontrolLog, srunLog := filepath.Join(dir, "reading"), filepath.Join(dir, "scontrol.log"), filepath.Join(dir, "srun.json")
	cmd := exec.Command(testSelf(t), "--srun", filepath.Join(bin, "srun"), "--scontrol", filepath.Join(bin, "scontrol"),
		"--squeue", filepath.Join(bin, "squeue"), "python", "pretrain_gpt.py", "--global-batch-size", "16")
	cmd.Env = append(os.Environ(), "RUBICK_SRUN_MAIN=1", "SLURM_JOB_NUM_NODES=1", "SLURM_JOB_ID=42", "FAKE_PLAN=dp1.tp1.pp1.mb4.a4.z0",
		"FAKE_SCONTROL_SLOW="+reading, "FAKE_SCONTROL_LOG="+scontrolLog, "FAKE_SRUN_LOG="+srunLog)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer kill.Stop()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(reading); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plan was never read:\n%s", errb.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitCheckpointed {
		t.Fatalf("exit %v, want %d\n%s", err, exitCheckpointed, errb.String())
	}
	if _, err := os.Stat(srunLog); err == nil {
		t.Error("the step was started")
	}
	calls, _ := os.ReadFile(scontrolLog)
	if !strings.Contains(string(calls), "requeuehold 42") {
		t.Errorf("scontrol calls:\n%s\nwant the job requeued held", calls)
	}
}

func TestShebangPython(t *testing.T) {
	for line, want := range map[string]string{
		"#!/venv/bin/python\n":            "/venv/bin/python",
		"#!/venv/bin/python3 -u\n":        "/venv/bin/python3",
		"#!/usr/bin/env python3\n":        "python3",
		"#!/usr/bin/env -S python3.11 \n": "python3.11",
		"import sys\n":                    "python3",
		"#!\n":                            "python3",
	} {
		if got := shebangPython(line); got != want {
			t.Errorf("shebangPython(%q) = %q, want %q", line, got, want)
		}
	}
}

// The deepspeed launcher whose python runs the workers is the one the
// line's env wrapper finds in the PATH it sets, not rubick-srun's.
func TestWorkerPython(t *testing.T) {
	dir := t.TempDir()
	launcher := func(sub, python string, mode os.FileMode) string {
		d := filepath.Join(dir, sub)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "deepspeed"), []byte("#!"+python+"\nimport sys\n"), mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	system := launcher("system", "/usr/bin/python3", 0o755)
	venv := launcher("venv", "/venv/bin/python", 0o755)
	plain := launcher("plain", "/plain/bin/python", 0o644) // not executable: passed over
	t.Setenv("PATH", system)
	for line, want := range map[string]string{
		"deepspeed t.py":                                     "/usr/bin/python3",
		"env PATH=" + venv + " deepspeed t.py":               "/venv/bin/python",
		"env NCCL_DEBUG=INFO deepspeed t.py":                 "/usr/bin/python3",
		"env PATH=" + plain + ":" + venv + " deepspeed t.py": "/venv/bin/python",
		"env PATH=/nonexistent deepspeed t.py":               "python3",
		venv + "/deepspeed t.py":                             "/venv/bin/python",
		"apptainer exec img.sif deepspeed t.py":              "python3",
	} {
		if got := workerPython(strings.Fields(line)); got != want {
			t.Errorf("workerPython(%s) = %q, want %q", line, got, want)
		}
	}
}

// TestPlanStepDeepSpeedNodes: a deepspeed launcher line planned on two
// nodes runs its workers through srun, one per GPU, under the launcher's
// python, each given its --local_rank as the launcher would.
func TestPlanStepDeepSpeedNodes(t *testing.T) {
	dir := t.TempDir()
	launcher := filepath.Join(dir, "deepspeed")
	if err := os.WriteFile(launcher, []byte("#!/venv/bin/python\nimport sys\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ds.json"), []byte(`{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"--", launcher, "--num_gpus", "8", "train.py", "--deepspeed_config", filepath.Join(dir, "ds.json")},
		envMap(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.self = "/bin/rubick-srun"
	p, err := model.ParsePlan("dp8.tp1.pp1.mb4.a1.z1")
	if err != nil {
		t.Fatal(err)
	}
	env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[3,9]"})
	state := filepath.Join(dir, "state")
	st, err := planStep(cfg, p, launch.Alloc{Nodes: 2, GPUsOnNode: 4, CPUsOnNode: 16}, state, env)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields("srun --nodes=2 --ntasks=8 --ntasks-per-node=4 --gres=gpu:4 --cpus-per-task=4 --kill-on-bad-exit=1 --export=ALL " +
		"/bin/rubick-srun --as-task --local-rank-at 3 -- /venv/bin/python -u train.py --deepspeed_config " + filepath.Join(state, "rubick-ds.json"))
	if d := cmp.Diff(want, st.argv); d != "" {
		t.Errorf("argv (-want +got):\n%s", d)
	}
	if !slices.Contains(st.env, "MASTER_ADDR=gpu3") || !slices.Contains(st.env, "WORLD_SIZE=8") {
		t.Errorf("env %q, want the rendezvous on gpu3 and a world of 8", st.env)
	}
	// One node: the launcher runs as written, sized.
	one, err := model.ParsePlan("dp4.tp1.pp1.mb4.a2.z1")
	if err != nil {
		t.Fatal(err)
	}
	st, err = planStep(cfg, one, launch.Alloc{Nodes: 1, GPUsOnNode: 4, CPUsOnNode: 16}, state, env)
	if err != nil {
		t.Fatal(err)
	}
	if st.argv[8] != launcher || !slices.Contains(st.argv, "--num_gpus") {
		t.Errorf("one node: argv %q, want the launcher run once", st.argv)
	}
}

// An unknown flag is said once: the flag set's line, with the usage.
func TestUnknownFlagSaidOnce(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"--bogus", "--", "true"}, envMap(nil), &out, &errb); code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	if n := strings.Count(errb.String(), "flag provided but not defined: -bogus"); n != 1 || !strings.Contains(errb.String(), "usage: rubick-srun") {
		t.Errorf("said %d times, stderr:\n%s", n, errb.String())
	}
}

// TestProfileStopsAtEarlySignal: a checkpoint signal that came before the
// profiling phase began stops it before its first run.
func TestProfileStopsAtEarlySignal(t *testing.T) {
	bin := fakes(t)
	logDir := t.TempDir()
	t.Setenv("FAKE_SRUN_LOGDIR", logDir)
	cfg, err := parseFlags([]string{"--srun", filepath.Join(bin, "srun"), "--", "python", "pretrain_gpt.py", "--micro-batch-size", "4",
		"--global-batch-size", "16"}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	plan := model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 2}
	ph, err := newProfilePhase(cfg, &plan, launch.Alloc{Nodes: 1, GPUsOnNode: 2, CPUsOnNode: 8}, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	early := make(chan os.Signal, 1)
	early <- syscall.SIGUSR1
	ph.early, ph.getenv, ph.log = early, envMap(nil), slog.New(slog.DiscardHandler)
	ph.stdout, ph.stderr = io.Discard, io.Discard
	if sig := ph.run(t.Context()); sig != syscall.SIGUSR1 {
		t.Errorf("ph.run = %v, want SIGUSR1", sig)
	}
	if _, err := os.Stat(filepath.Join(logDir, "calls.jsonl")); err == nil {
		t.Error("a profiling run was started")
	}
}

// running reports whether process pid exists and is not a zombie.
func running(pid int) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command, which is in parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestStepLeavesNoStrays: a step whose leader exits while a process it
// started still holds its output (a trainer's background helper, here a
// sleep) ends with the leader: rubick-srun neither waits for the stray
// nor leaves it running. Before, it waited until the stray exited, so a
// job could outlive its trainer by any length of time, and never requeue.
func TestStepLeavesNoStrays(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "stray.pid")
	for name, tc := range map[string]struct {
		tapped bool
	}{"output parsed": {tapped: true}, "output passed": {}} {
		t.Run(name, func(t *testing.T) {
			st := step{argv: []string{"/bin/sh", "-c", `sleep 60 & echo $! > "$0"; echo started; exit 3`, pidFile}}
			// With a plan the output is parsed, through a pipe; without
			// one it goes straight to the job's output file.
			var s *sampler
			var out, errb io.Writer = &bytes.Buffer{}, &bytes.Buffer{}
			outFile, err := os.Create(filepath.Join(t.TempDir(), "out"))
			if err != nil {
				t.Fatal(err)
			}
			defer outFile.Close()
			if tc.tapped {
				s = &sampler{}
			} else {
				out, errb = outFile, outFile
			}
			start := time.Now()
			status, ckpt := launchStep(t.Context(), st, syscall.SIGUSR1, make(chan os.Signal), s, out, errb, slog.New(slog.DiscardHandler))
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("launchStep took %s after its leader exited", took.Round(time.Second))
			}
			if status != 3 || ckpt {
				t.Errorf("launchStep = %d, %v; want 3, not checkpointed", status, ckpt)
			}
			got := ""
			if b, ok := out.(*bytes.Buffer); ok {
				got = b.String()
			} else {
				data, _ := os.ReadFile(outFile.Name())
				got = string(data)
			}
			if got != "started\n" {
				t.Errorf("output %q, want the step's", got)
			}
			data, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			gone(t, data, "the step's stray process, after rubick-srun's launch returned")
		})
	}
}

// TestStepLingerIsNoStray: what a step's leader leaves in its group that
// ends by itself soon after (srun's shepherd, in every srun step) ends
// the step quietly; a process that stays is killed, with a warning.
// Before, the warning came at the end of every step run through srun.
func TestStepLingerIsNoStray(t *testing.T) {
	for name, tc := range map[string]struct {
		left     string
		wantWarn bool
	}{
		"ends by itself": {left: "sleep 0.2"},
		"stays":          {left: "sleep 60", wantWarn: true},
	} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			st := step{argv: []string{"/bin/sh", "-c", tc.left + " & exit 0"}}
			status, _ := launchStep(t.Context(), st, syscall.SIGUSR1, make(chan os.Signal), nil, io.Discard, io.Discard, slog.New(slog.NewTextHandler(&logs, nil)))
			if status != 0 {
				t.Errorf("launchStep = %d, want 0", status)
			}
			if got := strings.Contains(logs.String(), "left processes running"); got != tc.wantWarn {
				t.Errorf("warned of strays: %v, want %v; log:\n%s", got, tc.wantWarn, logs.String())
			}
		})
	}
}

// TestProfileRunLeavesNoStrays: a profiling run that exits leaving a
// process running (which would hold its GPUs into the next run and the
// training run) has it killed, and the phase goes on at once.
func TestProfileRunLeavesNoStrays(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "stray.pid")
	line := []string{"/bin/sh", "-c", `sleep 60 & echo $! > "$0"; exit 0`, pidFile, "pretrain_gpt.py", "--micro-batch-size", "4", "--global-batch-size", "16"}
	cfg, err := parseFlags(append([]string{"--launcher", "direct", "--dialect", "megatron", "--"}, line...), envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	plan := model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 2}
	ph, err := newProfilePhase(cfg, &plan, launch.Alloc{Nodes: 1, GPUsOnNode: 2, CPUsOnNode: 8}, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ph.getenv, ph.log = envMap(nil), slog.New(slog.DiscardHandler)
	ph.stdout, ph.stderr = &bytes.Buffer{}, &bytes.Buffer{}
	rec := profileRecord{}
	start := time.Now()
	ph.runOne(t.Context(), 0, &rec)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the run took %s after it exited", took.Round(time.Second))
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the run did not start: %v (%+v)", err, rec)
	}
	gone(t, data, "the run's stray process")
}

// gone fails t unless the process whose pid data holds has ended within
// 5 s (what names it), and kills it if not.
func gone(t *testing.T, data []byte, what string) {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); running(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s: pid %d still runs", what, pid)
		}
	}
}
