package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/slurm"
)

// asTaskFlag makes rubick-srun one task of a per-GPU step: srun starts
// "rubick-srun --as-task -- <training command>" once per GPU, and each sets
// its rank from Slurm's task variables, then execs the command. PyTorch's
// env:// initialisation (Megatron, DeepSpeed) reads RANK and LOCAL_RANK,
// which srun does not set.
const asTaskFlag = "as-task"

// localRankAtFlag places a task's "--local_rank=N" in its command, where
// the deepspeed launcher would: scripts written for it read their device
// from that argument.
const localRankAtFlag = "local-rank-at"

// taskEnv is the per-task part of torch.distributed's environment, from
// srun's variables for this task. Bound to one GPU (launch.BindPerTask:
// srun's --gpus-per-task=1 implies --gpu-bind=per_task:1), a task sees
// that GPU alone, as device 0: its LOCAL_RANK, from which Megatron,
// DeepSpeed and the Trainer pick their device, is 0.
func taskEnv(getenv func(string) string, bind launch.GPUBind) ([]string, error) {
	var env []string
	for _, v := range []struct{ key, from string }{
		{"RANK", "SLURM_PROCID"}, {"LOCAL_RANK", "SLURM_LOCALID"}, {"GROUP_RANK", "SLURM_NODEID"},
	} {
		s := getenv(v.from)
		if n, err := strconv.Atoi(s); err != nil || n < 0 {
			return nil, fmt.Errorf("--%s: %s=%q is not a task number (run under srun, as rubick-srun starts it)", asTaskFlag, v.from, s)
		}
		if v.key == "LOCAL_RANK" && bind == launch.BindPerTask {
			s = "0"
		}
		env = append(env, v.key+"="+s)
	}
	return env, nil
}

// runTask execs train with the task's ranks in its environment; it returns
// only when it cannot.
func runTask(train []string, localRankAt int, bind launch.GPUBind, getenv func(string) string, stderr io.Writer) int {
	add, err := taskEnv(getenv, bind)
	if err != nil {
		fmt.Fprintln(stderr, "rubick-srun:", err)
		return exitUsage
	}
	if localRankAt >= 0 {
		if localRankAt > len(train) {
			fmt.Fprintf(stderr, "rubick-srun: --%s=%d is past the command's %d words\n", localRankAtFlag, localRankAt, len(train))
			return exitUsage
		}
		local := getenv("SLURM_LOCALID")
		if bind == launch.BindPerTask {
			local = "0" // as LOCAL_RANK (taskEnv)
		}
		train = slices.Insert(slices.Clone(train), localRankAt, "--local_rank="+local)
	}
	path, err := exec.LookPath(train[0])
	if err != nil {
		fmt.Fprintln(stderr, "rubick-srun:", err)
		return exitLaunch
	}
	err = syscall.Exec(path, train, withEnv(os.Environ(), add))
	fmt.Fprintln(stderr, "rubick-srun: exec", path+":", err)
	return exitLaunch
}

// withEnv is environ with the KEY=value entries of add replacing any of
// the same key: a process reading its environment (getenv) takes the
// first entry of a key, exec does not deduplicate.
func withEnv(environ, add []string) []string {
	keys := map[string]bool{}
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	out := make([]string, 0, len(environ)+len(add))
	for _, kv := range environ {
		if k, _, _ := strings.Cut(kv, "="); !keys[k] {
			out = append(out, kv)
		}
	}
	return append(out, add...)
}

// distributed is what the step's processes need to find each other.
type distributed struct {
	// addr and port are the rendezvous: MASTER_ADDR and MASTER_PORT when
	// the job sets them, else the first node of the step and a port of
	// the job's own (two jobs sharing a node do not collide).
	addr, port string
}

// distributedFor picks the rendezvous of a step whose first node is first
// ("" when unknown).
func distributedFor(getenv func(string) string, jobID, first string) distributed {
	d := distributed{addr: getenv("MASTER_ADDR"), port: getenv("MASTER_PORT")}
	if d.addr == "" {
		d.addr = first
	}
	if d.port == "" {
		d.port = "29500" // torch's default
		if id, err := strconv.ParseUint(jobID, 10, 64); err == nil {
			d.port = strconv.FormatUint(20000+id%20000, 10)
		}
	}
	return d
}

// firstNode is the first node of the job's allocation, where srun starts
// rank 0 and the batch script runs.
func firstNode(getenv func(string) string) string {
	if nodes, err := slurm.ExpandHostlist(getenv("SLURM_JOB_NODELIST")); err == nil && len(nodes) > 0 {
		return nodes[0]
	}
	return getenv("SLURMD_NODENAME")
}

// rendezvous is the host:port torchrun's launchers meet at; "" when the
// host is unknown.
func (d distributed) rendezvous() string {
	if d.addr == "" {
		return ""
	}
	return d.addr + ":" + d.port
}

// wrap fits the training command into a step of geo: in a per-GPU step each
// task goes through rubick-srun --as-task (self is this program) for its
// rank, and the step's environment gets the world's size and rendezvous.
// Megatron asserts CUDA_DEVICE_MAX_CONNECTIONS=1 under tensor parallelism
// (it orders communication before computation on the device).
func (d distributed) wrap(st *step, geo launch.Geometry, plan model.Plan, self string, getenv func(string) string, taskArgs ...string) {
	if geo.Mode == launch.ModePerGPU {
		if geo.Bind == launch.BindPerTask {
			taskArgs = append(slices.Clone(taskArgs), "--gpu-bind", string(launch.BindPerTask))
		}
		st.argv = slices.Concat([]string{self, "--" + asTaskFlag}, taskArgs, []string{"--"}, st.argv)
		st.env = append(st.env, "WORLD_SIZE="+strconv.Itoa(geo.Tasks()), "LOCAL_WORLD_SIZE="+strconv.Itoa(geo.TasksPerNode), "MASTER_PORT="+d.port)
		addr := d.addr
		if addr == "" && geo.Nodes == 1 {
			addr = "127.0.0.1" // the step's one node is every task's
		}
		if addr != "" {
			st.env = append(st.env, "MASTER_ADDR="+addr)
		}
	}
	if plan.TP > 1 && getenv("CUDA_DEVICE_MAX_CONNECTIONS") == "" {
		st.env = append(st.env, "CUDA_DEVICE_MAX_CONNECTIONS=1")
	}
}

// workerPython is the interpreter the deepspeed launcher of line runs
// its workers with: the launcher's own (launcherPython), found where the
// line's env wrappers look for it (launch.WrapperPath), or python3 in a
// container, whose launcher the host cannot read.
func workerPython(line []string) string {
	if launch.InContainer(line) {
		return "python3"
	}
	path, set := launch.WrapperPath(line)
	if !set {
		path = os.Getenv("PATH")
	}
	return launcherPython(launch.Unwrapped(line)[0], path)
}

// launcherPython is the interpreter the deepspeed launcher program runs
// under, from its "#!" line (a pip-installed script names its venv's
// python); python3 where that cannot be read. The launcher is looked up
// in path.
func launcherPython(launcher, path string) string {
	file, ok := lookPath(launcher, path)
	if !ok {
		return "python3"
	}
	f, err := os.Open(file)
	if err != nil {
		return "python3"
	}
	defer f.Close()
	line, _ := bufio.NewReader(io.LimitReader(f, 512)).ReadString('\n')
	return shebangPython(line)
}

// lookPath finds the executable file name in path as execvp does: a name
// with a slash as it is, else the first directory of path holding it (an
// empty entry is the working directory). exec.LookPath reads the
// process's own PATH only.
func lookPath(name, path string) (string, bool) {
	executable := func(f string) bool {
		st, err := os.Stat(f)
		return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
	}
	if strings.Contains(name, "/") {
		return name, executable(name)
	}
	for _, dir := range filepath.SplitList(path) {
		if f := filepath.Join(cmp.Or(dir, "."), name); executable(f) {
			return f, true
		}
	}
	return "", false
}

// shebangPython reads the interpreter off a "#!" line: "#!/venv/bin/python"
// or "#!/usr/bin/env python3" (an env option such as -S skipped).
func shebangPython(line string) string {
	f := strings.Fields(strings.TrimPrefix(line, "#!"))
	if !strings.HasPrefix(line, "#!") || len(f) == 0 {
		return "python3"
	}
	if filepath.Base(f[0]) != "env" {
		return f[0]
	}
	for _, a := range f[1:] {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return "python3"
}
