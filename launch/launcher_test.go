package launch

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSizeLauncher: a per-node launcher gets the plan's nodes and GPUs; on
// several nodes torchrun meets at the rendezvous rubick-srun names, and the
// deepspeed launcher, which starts remote workers itself, is refused.
func TestSizeLauncher(t *testing.T) {
	ds := mapReader(map[string][]byte{"ds.json": []byte(`{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2}`)})
	train := []string{"pretrain_gpt.py", "--global-batch-size", "16"}
	trained := []string{"pretrain_gpt.py", "--global-batch-size", "16", "--tensor-model-parallel-size", "1",
		"--pipeline-model-parallel-size", "1", "--micro-batch-size", "2"}
	line := func(launcher ...string) []string { return append(launcher, train...) }
	want := func(launcher ...string) []string { return append(launcher, trained...) }
	two := Options{Nodes: 2, GPUsPerNode: 4, Rendezvous: "node1:20042", RendezvousID: "42"}
	for _, tc := range []struct {
		name    string
		argv    []string
		plan    string
		opts    Options
		want    []string
		wantErr string
	}{
		{name: "torchrun, one node: its rendezvous kept",
			argv: line("torchrun", "--standalone", "--nproc_per_node=8"), plan: "dp4.tp1.pp1.mb2.a2.z0",
			opts: Options{Nodes: 1, GPUsPerNode: 4, Rendezvous: "node1:20042"},
			want: want("torchrun", "--standalone", "--nproc_per_node=4", "--nnodes", "1")},
		{name: "torchrun, one node: the job's port, not every job's 29500",
			argv: line("torchrun", "--nproc_per_node=8", "--master_addr", "127.0.0.1"), plan: "dp4.tp1.pp1.mb2.a2.z0",
			opts: Options{Nodes: 1, GPUsPerNode: 4, Rendezvous: "node1:20042"},
			want: want("torchrun", "--nproc_per_node=4", "--master_addr", "127.0.0.1", "--nnodes", "1", "--master_port", "20042")},
		{name: "torchrun, one node: a c10d rendezvous at the job's port, not every job's 29400",
			argv: line("python", "-m", "torch.distributed.run", "--rdzv-backend=c10d", "--nproc-per-node", "8"), plan: "dp4.tp1.pp1.mb2.a2.z0",
			opts: Options{Nodes: 1, GPUsPerNode: 4, Rendezvous: "node1:20042"},
			want: want("python", "-m", "torch.distributed.run", "--rdzv-backend=c10d", "--nproc-per-node", "4", "--nnodes", "1",
				"--rdzv_endpoint", "localhost:20042")},
		{name: "torchrun, one node: the line's port kept",
			argv: line("torchrun", "--master-port=30000", "--nproc_per_node=8"), plan: "dp4.tp1.pp1.mb2.a2.z0",
			opts: Options{Nodes: 1, GPUsPerNode: 4, Rendezvous: "node1:20042"},
			want: want("torchrun", "--master-port=30000", "--nproc_per_node=4", "--nnodes", "1")},
		{name: "torchrun, one node: the line's endpoint kept",
			argv: line("torchrun", "--rdzv_backend", "c10d", "--rdzv_endpoint", "localhost:0", "--nproc_per_node=8"), plan: "dp4.tp1.pp1.mb2.a2.z0",
			opts: Options{Nodes: 1, GPUsPerNode: 4, Rendezvous: "node1:20042"},
			want: want("torchrun", "--rdzv_backend", "c10d", "--rdzv_endpoint", "localhost:0", "--nproc_per_node=4", "--nnodes", "1")},
		{name: "torchrun, two nodes: standalone becomes a c10d rendezvous",
			argv: line("torchrun", "--standalone", "--nproc_per_node=8"), plan: "dp8.tp1.pp1.mb2.a1.z0", opts: two,
			want: want("torchrun", "--nproc_per_node=4", "--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", "node1:20042",
				"--rdzv_id", "42")},
		{name: "torchrun, two nodes: a fixed master and rank go, the line's spellings stay",
			argv: line("python", "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node", "8", "--master_addr=10.0.0.9",
				"--master_port", "1234", "--node_rank", "0", "--rdzv-endpoint=old:1", "--rdzv-backend=static"),
			plan: "dp8.tp1.pp1.mb2.a1.z0", opts: two,
			want: want("python", "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node", "4", "--rdzv-endpoint=node1:20042",
				"--rdzv-backend=c10d", "--rdzv_id", "42")},
		{name: "torchrun, one node: a module program after -m",
			argv: []string{"torchrun", "--nproc_per_node=8", "-m", "megatron.pretrain_gpt", "--global-batch-size", "16"},
			plan: "dp4.tp1.pp1.mb2.a2.z0", opts: Options{Nodes: 1, GPUsPerNode: 4, Rendezvous: "node1:20042"},
			want: []string{"torchrun", "--nproc_per_node=4", "--nnodes", "1", "--master_port", "20042", "-m", "megatron.pretrain_gpt",
				"--global-batch-size", "16", "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "2"}},
		{name: "torchrun in a container: sized inside it, the container's flags kept",
			argv: line("apptainer", "exec", "--nv", "-B", "/data:/data", "--env=A=1", "img.sif", "torchrun", "--nproc_per_node=8"),
			plan: "dp4.tp1.pp1.mb2.a2.z0", opts: Options{Nodes: 1, GPUsPerNode: 4, Rendezvous: "node1:20042"},
			want: want("apptainer", "exec", "--nv", "-B", "/data:/data", "--env=A=1", "img.sif", "torchrun", "--nproc_per_node=4", "--nnodes", "1",
				"--master_port", "20042")},
		{name: "torchrun after env's assignments",
			argv: line("env", "-u", "X", "NCCL_DEBUG=INFO", "torchrun", "--nproc_per_node=8"), plan: "dp8.tp1.pp1.mb2.a1.z0", opts: two,
			want: want("env", "-u", "X", "NCCL_DEBUG=INFO", "torchrun", "--nproc_per_node=4", "--nnodes", "2", "--rdzv_backend", "c10d",
				"--rdzv_endpoint", "node1:20042", "--rdzv_id", "42")},
		{name: "torchrun, two nodes, no rendezvous host",
			argv: line("torchrun", "--nproc_per_node=8"), plan: "dp8.tp1.pp1.mb2.a1.z0", opts: Options{Nodes: 2, GPUsPerNode: 4},
			wantErr: "torchrun on 2 nodes needs a rendezvous host"},
		{name: "accelerate, one node: all its processes, the job's port, Slurm picks the GPUs",
			argv: []string{"accelerate", "launch", "--num_processes=8", "--gpu_ids", "0,1,2,3", "--multi_gpu", "train.py", "--deepspeed", "ds.json"},
			plan: "dp2.tp1.pp1.mb2.a4.z0", opts: Options{Nodes: 1, GPUsPerNode: 2, ConfigDir: "/job", ReadFile: ds, Rendezvous: "127.0.0.1:20042"},
			want: []string{"accelerate", "launch", "--num_processes=2", "--multi_gpu", "--num_machines", "1", "--main_process_port", "20042",
				"train.py", "--deepspeed", "/job/rubick-ds.json", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4"}},
		{name: "accelerate, one node: the line's port kept",
			argv: []string{"python", "-m", "accelerate.commands.launch", "--main-process-port", "30000", "train.py", "--deepspeed", "ds.json"},
			plan: "dp2.tp1.pp1.mb2.a4.z0", opts: Options{Nodes: 1, GPUsPerNode: 2, ConfigDir: "/job", ReadFile: ds, Rendezvous: "127.0.0.1:20042"},
			want: []string{"python", "-m", "accelerate.commands.launch", "--main-process-port", "30000", "--num_machines", "1", "--num_processes", "2",
				"train.py", "--deepspeed", "/job/rubick-ds.json", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4"}},
		{name: "accelerate, two nodes: every node's launcher meets at a c10d rendezvous",
			argv: []string{"accelerate", "launch", "--num_processes", "8", "--num_machines", "1", "--machine_rank", "0", "--same_network",
				"--main_process_ip", "10.0.0.9", "--main_process_port", "1234", "--multi_gpu", "train.py", "--deepspeed", "ds.json"},
			plan: "dp8.tp1.pp1.mb2.a1.z0", opts: Options{Nodes: 2, GPUsPerNode: 4, ConfigDir: "/job", ReadFile: ds, Rendezvous: "node1:20042"},
			want: []string{"accelerate", "launch", "--num_processes", "8", "--num_machines", "2", "--main_process_ip", "node1",
				"--main_process_port", "20042", "--multi_gpu", "--rdzv_backend", "c10d",
				"train.py", "--deepspeed", "/job/rubick-ds.json", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1"}},
		{name: "accelerate, two nodes, no rendezvous host",
			argv: []string{"accelerate", "launch", "train.py", "--deepspeed", "ds.json"}, plan: "dp8.tp1.pp1.mb2.a1.z0",
			opts: Options{Nodes: 2, GPUsPerNode: 4, ConfigDir: "/job", ReadFile: ds}, wantErr: "accelerate launch on 2 nodes needs a rendezvous"},
		{name: "deepspeed, one node: --include goes, Slurm picks the GPUs",
			argv: []string{"deepspeed", "--include", "localhost:0,1,2,3", "-e=localhost:5", "train.py", "--deepspeed_config", "ds.json"},
			plan: "dp2.tp1.pp1.mb2.a4.z0", opts: Options{Nodes: 1, GPUsPerNode: 2, ConfigDir: "/job", ReadFile: ds},
			want: []string{"deepspeed", "--num_nodes", "1", "--num_gpus", "2", "train.py", "--deepspeed_config", "/job/rubick-ds.json"}},
		{name: "deepspeed, one node: the job's port, not every job's 29500",
			argv: []string{"deepspeed", "--num_gpus=8", "train.py", "--deepspeed_config", "ds.json"},
			plan: "dp2.tp1.pp1.mb2.a4.z0", opts: Options{Nodes: 1, GPUsPerNode: 2, ConfigDir: "/job", ReadFile: ds, Rendezvous: "node1:20042"},
			want: []string{"deepspeed", "--num_gpus=2", "--num_nodes", "1", "--master_port", "20042", "train.py", "--deepspeed_config", "/job/rubick-ds.json"}},
		{name: "deepspeed, one node: the line's port kept",
			argv: []string{"deepspeed", "--master_port", "30000", "train.py", "--deepspeed_config", "ds.json"},
			plan: "dp2.tp1.pp1.mb2.a4.z0", opts: Options{Nodes: 1, GPUsPerNode: 2, ConfigDir: "/job", ReadFile: ds, Rendezvous: "node1:20042"},
			want: []string{"deepspeed", "--master_port", "30000", "--num_nodes", "1", "--num_gpus", "2", "train.py", "--deepspeed_config", "/job/rubick-ds.json"}},
		{name: "deepspeed, two nodes",
			argv: []string{"deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"},
			plan: "dp8.tp1.pp1.mb2.a1.z0", opts: Options{Nodes: 2, GPUsPerNode: 4, ConfigDir: "/job", ReadFile: ds, Rendezvous: "node1:1"},
			wantErr: "the deepspeed launcher cannot run a plan on 2 nodes as one launcher per node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Rewrite(tc.argv, mustPlan(t, tc.plan), tc.opts)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Rewrite = %v, want ErrBadInput saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, res.Argv); d != "" {
				t.Errorf("argv (-want +got):\n%s", d)
			}
		})
	}
}

// TestWithoutLauncher: a deepspeed launcher line becomes what the launcher
// runs on each GPU.
func TestWithoutLauncher(t *testing.T) {
	for _, tc := range []struct {
		name    string
		argv    []string
		want    Unlaunched
		wantErr string
	}{
		{name: "the deepspeed program",
			argv: strings.Fields("deepspeed --num_gpus 8 --master_port 29501 train.py --deepspeed_config ds.json --epochs 1"),
			want: Unlaunched{Argv: strings.Fields("/venv/bin/python -u train.py --deepspeed_config ds.json --epochs 1"), LocalRankAt: 3}},
		{name: "python -m deepspeed.launcher.runner: its python",
			argv: strings.Fields("/opt/py/bin/python3 -m deepspeed.launcher.runner --include localhost:0,1 train.py --x"),
			want: Unlaunched{Argv: strings.Fields("/opt/py/bin/python3 -u train.py --x"), LocalRankAt: 3}},
		{name: "no python, no local rank",
			argv: strings.Fields("deepspeed --no_python --no-local-rank ./train.py --x"),
			want: Unlaunched{Argv: strings.Fields("./train.py --x"), LocalRankAt: -1}},
		{name: "a module",
			argv: strings.Fields("deepspeed --num_gpus 8 --module pkg.train --deepspeed_config ds.json"),
			want: Unlaunched{Argv: strings.Fields("/venv/bin/python -u -m pkg.train --deepspeed_config ds.json"), LocalRankAt: 4}},
		{name: "in a container: its workers too",
			argv: strings.Fields("singularity exec --nv -B /d img.sif deepspeed --num_gpus 8 train.py --deepspeed_config ds.json"),
			want: Unlaunched{Argv: strings.Fields("singularity exec --nv -B /d img.sif /venv/bin/python -u train.py --deepspeed_config ds.json"),
				LocalRankAt: 9}},
		{name: "in a container, python -m deepspeed.launcher.runner: its python",
			argv:    strings.Fields("apptainer exec img.sif python -m deepspeed.launcher.runner --no_python --module pkg.train"),
			wantErr: "--no_python with --module"},
		{name: "in a container, python -m deepspeed.launcher.runner",
			argv: strings.Fields("env A=1 apptainer exec img.sif python -m deepspeed.launcher.runner --no_local_rank train.py --x"),
			want: Unlaunched{Argv: strings.Fields("env A=1 apptainer exec img.sif python -u train.py --x"), LocalRankAt: -1}},
		{name: "a module without python", argv: strings.Fields("deepspeed --no_python --module pkg.train"), wantErr: "--no_python with --module"},
		{name: "torchrun", argv: strings.Fields("torchrun --nproc_per_node 8 train.py"), wantErr: "does not start a .py script or module with the deepspeed launcher"},
		{name: "no script", argv: strings.Fields("deepspeed --num_gpus 8 mytrainer"), wantErr: "does not start a .py script"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WithoutLauncher(tc.argv, "/venv/bin/python")
			if tc.wantErr != "" {
				if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("WithoutLauncher = %v, want ErrBadInput saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestLauncherWorld: the processes a launcher starts as written, which
// an unplanned job's unchanged line trains on.
func TestLauncherWorld(t *testing.T) {
	type world struct {
		Nodes, PerNode int
		OK             bool
	}
	for line, want := range map[string]world{
		"torchrun --nproc_per_node 4 pretrain_gpt.py":                      {1, 4, true},
		"torchrun --nnodes=2 --nproc-per-node=8 -m megatron.pretrain_gpt":  {2, 8, true},
		"python -m torch.distributed.run --nproc_per_node 2 train.py":      {1, 2, true},
		"deepspeed --num_nodes 1 --num_gpus 4 train.py":                    {1, 4, true},
		"accelerate launch --num_processes 8 --num_machines 2 train.py":    {2, 4, true},
		"accelerate launch --num_processes 6 --num_machines 4 train.py":    {},
		"torchrun --nproc_per_node gpu train.py":                           {},
		"torchrun --nnodes 1:4 --nproc_per_node 8 train.py":                {},
		"apptainer exec --nv img.sif torchrun --nproc_per_node 4 train.py": {1, 4, true},
		"env A=1 deepspeed --num_gpus 2 train.py":                          {1, 2, true},
		"deepspeed train.py":                                       {},
		"python pretrain_gpt.py --nproc_per_node 4":                {},
		"torchrun --nproc_per_node 4 mytrainer --nproc_per_node 8": {},
	} {
		nodes, perNode, ok := LauncherWorld(strings.Fields(line))
		if got := (world{nodes, perNode, ok}); got != want && (ok || want.OK) {
			t.Errorf("LauncherWorld(%s) = %+v, want %+v", line, got, want)
		}
	}
}

// TestWrapperEnd: the command a launch line runs inside env and a
// container's exec, which rubick sizes and rewrites; a wrapper it cannot
// read to its end is the program itself.
func TestWrapperEnd(t *testing.T) {
	type got struct {
		Command   string
		Container bool
	}
	for line, want := range map[string]got{
		"torchrun train.py":                                                   {"torchrun train.py", false},
		"env NCCL_DEBUG=INFO A=b torchrun train.py":                           {"torchrun train.py", false},
		"/usr/bin/env -i -u X --unset=Y -C /w --chdir=/x -uZ python train.py": {"python train.py", false},
		"env -- python train.py":                                              {"python train.py", false},
		"env -S 'python train.py'":                                            {"env -S 'python train.py'", false},
		"env A=1":                                                             {"env A=1", false},
		"apptainer exec --nv img.sif torchrun train.py":                       {"torchrun train.py", true},
		"apptainer exec -B /a:/b --bind=/c -e --env A=1 docker://nvcr.io/nvidia/pytorch:24.01-py3 python train.py": {"python train.py", true},
		// Short flags run together: -c and -e, then -B with its value.
		"singularity exec -ce -B /a img.sif python train.py":                               {"python train.py", true},
		"singularity exec -ceB /a img.sif python train.py":                                 {"python train.py", true},
		"singularity exec -B/a img.sif python train.py":                                    {"python train.py", true},
		"/opt/apptainer/bin/apptainer exec --overlay o.img --nv ./sandbox/ deepspeed t.py": {"deepspeed t.py", true},
		"env A=1 apptainer exec img.sif env B=2 torchrun t.py":                             {"torchrun t.py", true},
		// The image's runscript, not a command of the line's.
		"apptainer run img.sif torchrun train.py": {"apptainer run img.sif torchrun train.py", false},
		"apptainer exec --nv img.sif":             {"apptainer exec --nv img.sif", false},
		"apptainer exec --nv":                     {"apptainer exec --nv", false},
		// SingularityCE 4's flags with a value.
		"singularity exec --data d.sif:/data --netns-path /n --proot /p img.sif torchrun t.py": {"torchrun t.py", true},
		// Global options before exec.
		"apptainer --debug -q exec img.sif torchrun t.py":               {"torchrun t.py", true},
		"singularity -c /etc/s.conf --nocolor exec img.sif python t.py": {"python t.py", true},
		"apptainer --config=/etc/a.conf exec img.sif python t.py":       {"python t.py", true},
		"apptainer --version": {"apptainer --version", false},
		// GNU env reads assignments after --.
		"env -- NCCL_DEBUG=INFO A=1 torchrun t.py": {"torchrun t.py", false},
	} {
		argv := strings.Fields(line)
		end, container := wrapperEnd(argv)
		if g := (got{strings.Join(argv[end:], " "), container}); g != want {
			t.Errorf("wrapperEnd(%s) = %+v, want %+v", line, g, want)
		}
	}
}

// A wrapper option that clears the environment rubick-srun passes each
// rank in, or moves the directory it reads the line's files from, is
// refused, naming it; the rest are not.
func TestCheckWrappers(t *testing.T) {
	for line, want := range map[string]string{
		"env NCCL_DEBUG=INFO torchrun t.py":                     "",
		"env -u X -- A=1 torchrun t.py":                         "",
		"apptainer exec --nv -B /a img.sif torchrun t.py":       "",
		"apptainer exec --contain img.sif torchrun t.py":        "",
		"apptainer run --cleanenv img.sif":                      "", // not read: the image's runscript
		"env -i PATH=/usr/bin torchrun t.py":                    "env -i",
		"/usr/bin/env --ignore-environment torchrun t.py":       "env --ignore-environment",
		"env - torchrun t.py":                                   "env -",
		"env -C /w deepspeed t.py":                              "env -C",
		"env --chdir=/w deepspeed t.py":                         "env --chdir",
		"env -C/w deepspeed t.py":                               "env -C",
		"apptainer exec --cleanenv img.sif torchrun t.py":       "apptainer --cleanenv",
		"singularity exec -ce img.sif torchrun t.py":            "singularity -e",
		"apptainer exec -C img.sif torchrun t.py":               "apptainer -C",
		"apptainer exec --compat img.sif torchrun t.py":         "apptainer --compat",
		"apptainer exec --pwd /workspace img.sif torchrun t.py": "apptainer --pwd",
		"apptainer exec --cwd=/w img.sif torchrun t.py":         "apptainer --cwd",
		"env A=1 apptainer exec -e img.sif torchrun t.py":       "apptainer -e",
	} {
		err := CheckWrappers(strings.Fields(line))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", line, err)
		case want != "" && (!errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), want+" in the launch line")):
			t.Errorf("%s: %v, want ErrBadInput naming %q", line, err, want)
		}
	}
}

func TestWrapperPath(t *testing.T) {
	type result struct {
		Path string
		Set  bool
	}
	for line, want := range map[string]result{
		"deepspeed t.py":                                      {},
		"env NCCL_DEBUG=INFO deepspeed t.py":                  {},
		"env PATH=/venv/bin:/usr/bin deepspeed t.py":          {Path: "/venv/bin:/usr/bin", Set: true},
		"env PATH=/a env PATH=/b deepspeed t.py":              {Path: "/b", Set: true},
		"env -u PATH deepspeed t.py":                          {Path: DefaultPath, Set: true},
		"env --unset=PATH deepspeed t.py":                     {Path: DefaultPath, Set: true},
		"env -u PATH PATH=/v deepspeed t.py":                  {Path: "/v", Set: true},
		"env -u HOME deepspeed t.py":                          {},
		"env -- PATH=/v deepspeed t.py":                       {Path: "/v", Set: true},
		"deepspeed t.py PATH=/v":                              {},
		"env PATH=/v apptainer exec img.sif deepspeed t.py":   {},
		"apptainer exec --env PATH=/v img.sif deepspeed t.py": {},
	} {
		path, set := WrapperPath(strings.Fields(line))
		if d := cmp.Diff(want, result{path, set}); d != "" {
			t.Errorf("WrapperPath(%s) (-want +got):\n%s", line, d)
		}
	}
}
