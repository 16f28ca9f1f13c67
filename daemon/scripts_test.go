package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rubick-sched/rubick/launch"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/slurm"
	"github.com/rubick-sched/rubick/store"
)

// fakeScripts gives scripted batch scripts and counts the reads.
type fakeScripts struct {
	mu      sync.Mutex
	scripts map[int]string
	err     error
	reads   []int
}

func (f *fakeScripts) BatchScript(_ context.Context, id int) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads = append(f.reads, id)
	if f.err != nil {
		return "", f.err
	}
	s, ok := f.scripts[id]
	if !ok {
		return "", slurm.ErrNoScript
	}
	return s, nil
}

func currentUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Skip("no current user:", err)
	}
	return u.Username
}

// TestCycleReadsBatchScript: a job's first plan keeps the global batch and
// the features its batch script's rubick-srun line states, before its
// rubick-srun ever reports; where the script tells nothing usable, the
// user's earlier job of the model type still guides it.
func TestCycleReadsBatchScript(t *testing.T) {
	const megatron80 = "#!/bin/bash\nGBS=80\nexec rubick-srun python pretrain_gpt.py --global-batch-size $GBS --micro-batch-size 2\n"
	tests := map[string]struct {
		model     string // gpt2 when empty
		gpus      int
		script    string
		scriptErr error
		dsConfig  string // the DeepSpeed config in the job's working directory
		earlierGB int    // the global batch the user's earlier job reported
		off       bool   // read_batch_scripts: false
		restarted bool   // the job has run before
		ownGB     int    // the global batch the job reported at that start
		wantPlan  string
	}{
		// 5 GPUs split 80 five ways, where gpt2's 16 would not.
		"megatron line's batch":                  {gpus: 5, script: megatron80, wantPlan: "dp5.tp1.pp1.mb16.a1.z2"},
		"the script over the user's earlier job": {gpus: 5, script: megatron80, earlierGB: 64, wantPlan: "dp5.tp1.pp1.mb16.a1.z2"},
		"deepspeed config's batch; no TP or PP": {gpus: 4, script: "exec rubick-srun deepspeed train.py --deepspeed_config ds.json\n",
			dsConfig: `{"train_batch_size": 8}`, wantPlan: "dp4.tp1.pp1.mb2.a1.z2"},
		"a line that states no batch": {gpus: 5, script: "exec rubick-srun python pretrain_gpt.py --micro-batch-size 2\n", earlierGB: 64, wantPlan: "dp4.tp1.pp1.mb4.a1.z2"},
		// Nothing usable: planned as before, from the user's earlier job.
		"no script":                {gpus: 4, scriptErr: slurm.ErrNoScript, earlierGB: 64, wantPlan: "dp4.tp1.pp1.mb16.a1.z2"},
		"a batch set at run time":  {gpus: 4, script: "exec rubick-srun python pretrain_gpt.py --global-batch-size $GBS\n", earlierGB: 64, wantPlan: "dp4.tp1.pp1.mb16.a1.z2"},
		"a config it cannot read":  {gpus: 4, script: "exec rubick-srun deepspeed train.py --deepspeed_config missing.json\n", earlierGB: 64, wantPlan: "dp4.tp1.pp1.mb16.a1.z2"},
		"read_batch_scripts false": {gpus: 5, script: megatron80, off: true, wantPlan: "dp4.tp1.pp1.mb4.a1.z2"},
		// A job that ran before reported its own line at that start.
		"a requeued job": {gpus: 5, script: megatron80, restarted: true, ownGB: 16, earlierGB: 64, wantPlan: "dp4.tp1.pp1.mb4.a1.z2"},
		// One that ran without reporting (no samples endpoint) still has
		// its script.
		"a requeued job that never reported": {gpus: 5, script: megatron80, restarted: true, earlierGB: 64, wantPlan: "dp5.tp1.pp1.mb16.a1.z2"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			nodes := labNodes(1)
			nodes[0].GPUsUsed, nodes[0].CPUsAlloc = 3, 24
			mt := tc.model
			if mt == "" {
				mt = "gpt2"
			}
			j := heldJob(21, mt, 1, tc.gpus)
			j.User, j.WorkDir = currentUser(t), t.TempDir()
			if tc.restarted {
				j.RestartCount = 1
			}
			if tc.dsConfig != "" {
				if err := os.WriteFile(filepath.Join(j.WorkDir, "ds.json"), []byte(tc.dsConfig), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c := &fakeCluster{nodes: nodes, jobs: []slurm.Job{j}}
			a := &fakeApplier{}
			d, st := newTestDaemonWith(t, c, a, func(cfg *Config) { cfg.ReadBatchScripts = !tc.off })
			scripts := &fakeScripts{scripts: map[int]string{21: tc.script}, err: tc.scriptErr}
			d.deps.Scripts = scripts
			ctx := context.Background()
			if tc.earlierGB != 0 {
				if err := st.UpsertJob(ctx, store.Job{ID: 20, ModelType: mt, Class: store.BestEffort, State: "COMPLETED"}); err != nil {
					t.Fatal(err)
				}
				if err := st.SetJobLaunch(ctx, 20, j.User, store.Launch{GlobalBatch: tc.earlierGB}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.ownGB != 0 {
				if err := st.UpsertJob(ctx, store.Job{ID: 21, ModelType: mt, Class: store.BestEffort, State: "PENDING"}); err != nil {
					t.Fatal(err)
				}
				if err := st.SetJobLaunch(ctx, 21, j.User, store.Launch{GlobalBatch: tc.ownGB}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := d.Cycle(ctx, false); err != nil {
				t.Fatal(err)
			}
			if got := oneStart(t, a).Tag.Plan; got != tc.wantPlan {
				t.Errorf("started with plan %q, want %q", got, tc.wantPlan)
			}
			wantReads := []int{21}
			if tc.off || tc.ownGB != 0 {
				wantReads = nil
			}
			if diff := cmp.Diff(wantReads, scripts.reads); diff != "" {
				t.Errorf("scripts read (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJobFactsFromScript: what a script tells replaces the guess from the
// user's earlier job (global batch 64, TP and PP unexpressible) as far as
// it goes: a DeepSpeed line whose config rubickd may not open still tells
// what it cannot express.
func TestJobFactsFromScript(t *testing.T) {
	tests := map[string]struct {
		script string
		job    func(*slurm.Job) // the job as its user submitted it, changed
		want   JobFacts
	}{
		"megatron line":          {script: "exec rubick-srun python pretrain_gpt.py --global-batch-size 32\n", want: JobFacts{GlobalBatch: 32}},
		"deepspeed, config read": {script: "exec rubick-srun deepspeed train.py --deepspeed_config ds.json\n", want: JobFacts{Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 8}},
		"megatron-deepspeed without a config, batch set at run time": {script: "exec rubick-srun python pretrain_gpt.py --deepspeed --global-batch-size $GBS\n",
			want: JobFacts{Cannot: model.FeatureOffload, GlobalBatch: 64}},
		"deepspeed, config not readable": {script: "exec rubick-srun deepspeed train.py --deepspeed_config /etc/ds.json\n", want: JobFacts{Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 64}},
		"no line":                        {script: "srun python train.py\n", want: JobFacts{Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 64}},
		// A Hugging Face line's batch: per device x accumulation x the
		// GPUs the user asked for (1 node of 4).
		"hugging face line": {script: "exec rubick-srun python train.py --deepspeed hf.json --per_device_train_batch_size 4 --gradient_accumulation_steps 2\n",
			want: JobFacts{Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 32}},
		// --gpus=6 over 2 nodes: 3 a node, 6 in all.
		"hugging face line, --gpus": {script: "exec rubick-srun python train.py --deepspeed hf.json --per_device_train_batch_size 4 --gradient_accumulation_steps 2\n",
			job:  func(j *slurm.Job) { j.NodeCount, j.GPUsPerNode, j.GPUsNotPerNode = 2, 3, true },
			want: JobFacts{Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 48}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := heldJob(21, "gpt2", 1, 4)
			if tc.job != nil {
				tc.job(&j)
			}
			j.User, j.WorkDir = currentUser(t), t.TempDir()
			if err := os.WriteFile(filepath.Join(j.WorkDir, "ds.json"), []byte(`{"train_batch_size": 8}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(j.WorkDir, "hf.json"), []byte(`{"train_batch_size": "auto"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			d, st := newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(*Config) {})
			d.deps.Scripts = &fakeScripts{scripts: map[int]string{21: tc.script}}
			ctx := context.Background()
			if err := st.UpsertJob(ctx, store.Job{ID: 20, ModelType: "gpt2", Class: store.BestEffort, State: "COMPLETED"}); err != nil {
				t.Fatal(err)
			}
			if err := st.SetJobLaunch(ctx, 20, j.User, store.Launch{Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 64}); err != nil {
				t.Fatal(err)
			}
			facts, err := d.jobFacts(ctx, []slurm.Job{j})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, facts[21]); diff != "" {
				t.Errorf("facts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJobFactsOfStartedJob: a job that has run trains with the batch of
// the plan it ran and keeps what its script says it cannot express, until
// it reports its own line; its user's earlier job (global batch 64, TP and
// PP unexpressible) and its model type's batch no longer guide it.
func TestJobFactsOfStartedJob(t *testing.T) {
	const deepspeed = "exec rubick-srun python pretrain_gpt.py --deepspeed --global-batch-size 32\n"
	tests := map[string]struct {
		job       func(*slurm.Job)
		script    string
		own       *store.Launch // what the job reported at its start
		want      JobFacts
		wantReads []int
	}{
		"running, never reported": {job: func(j *slurm.Job) { j.State = slurm.StateRunning },
			script: deepspeed, want: JobFacts{Cannot: model.FeatureOffload, GlobalBatch: 32}, wantReads: []int{21}},
		"running, no script": {job: func(j *slurm.Job) { j.State = slurm.StateRunning },
			want: JobFacts{Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 32}, wantReads: []int{21}},
		"requeued, never reported": {job: func(j *slurm.Job) { j.RestartCount = 1 },
			want: JobFacts{Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 32}, wantReads: []int{21}},
		"running, reported": {job: func(j *slurm.Job) { j.State = slurm.StateRunning }, script: deepspeed,
			own: &store.Launch{Cannot: model.FeatureTP, GlobalBatch: 16}, want: JobFacts{Cannot: model.FeatureTP, GlobalBatch: 16}},
		// A start whose release failed: the tag's plan never ran.
		"never started": {want: JobFacts{Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 64}, wantReads: []int{21}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := heldJob(21, "gpt2", 1, 8)
			j.User, j.WorkDir, j.Tag.Plan = currentUser(t), t.TempDir(), "dp8.tp1.pp1.mb4.a1.z2"
			if tc.job != nil {
				tc.job(&j)
			}
			d, st := newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(*Config) {})
			scripts := &fakeScripts{scripts: map[int]string{}}
			if tc.script != "" {
				scripts.scripts[21] = tc.script
			}
			d.deps.Scripts = scripts
			ctx := context.Background()
			for id, l := range map[int64]*store.Launch{20: {Cannot: model.FeatureTP | model.FeaturePP, GlobalBatch: 64}, 21: tc.own} {
				if l == nil {
					continue
				}
				if err := st.UpsertJob(ctx, store.Job{ID: id, ModelType: "gpt2", Class: store.BestEffort, State: "COMPLETED"}); err != nil {
					t.Fatal(err)
				}
				if err := st.SetJobLaunch(ctx, id, j.User, *l); err != nil {
					t.Fatal(err)
				}
			}
			facts, err := d.jobFacts(ctx, []slurm.Job{j})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, facts[21]); diff != "" {
				t.Errorf("facts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantReads, scripts.reads); diff != "" {
				t.Errorf("scripts read (-want +got):\n%s", diff)
			}
		})
	}
}

// TestScriptFactsReadOnce: each batch script is read once, at most
// maxScriptReads per cycle; the tasks of an array share the array's. The
// pending jobs past the bound are the cycle's unread, to wait for theirs.
func TestScriptFactsReadOnce(t *testing.T) {
	var jobs []slurm.Job
	scripts := &fakeScripts{scripts: map[int]string{}}
	for id := 1; id <= maxScriptReads+4; id++ {
		j := heldJob(id, "gpt2", 1, 2)
		scripts.scripts[id] = "exec rubick-srun python pretrain_gpt.py --global-batch-size 32\n"
		jobs = append(jobs, j)
	}
	jobs[0].ArrayJobID, jobs[0].ID = 2, 100 // a task of array 2, whose script job 2 has too
	d, _ := newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(*Config) {})
	d.deps.Scripts = scripts
	d.inRun = true
	ctx := context.Background()
	first, unread := d.scriptFacts(ctx, jobs, nil)
	if len(first) != maxScriptReads+1 || len(scripts.reads) != maxScriptReads || scripts.reads[0] != 2 {
		t.Fatalf("first cycle: %d facts from reads %v, want %d from %d, the first of job 2", len(first), scripts.reads, maxScriptReads+1, maxScriptReads)
	}
	past := map[int]bool{maxScriptReads + 2: true, maxScriptReads + 3: true, maxScriptReads + 4: true}
	if diff := cmp.Diff(past, unread); diff != "" {
		t.Errorf("first cycle's unread (-want +got):\n%s", diff)
	}
	second, unread := d.scriptFacts(ctx, jobs, nil)
	if len(second) != len(jobs) || len(scripts.reads) != len(jobs)-1 || len(unread) != 0 {
		t.Fatalf("second cycle: %d facts, %d reads in all, unread %v; want %d, %d and none", len(second), len(scripts.reads), unread, len(jobs), len(jobs)-1)
	}
	if got := second[100]; got != (scriptRead{gb: 32, batch: true}) {
		t.Errorf("array task's facts %+v, want global batch 32", got)
	}
	// Started: kept, until the job reports its line.
	jobs[2].State, jobs[2].StartTime = slurm.StateRunning, t0
	if got, _ := d.scriptFacts(ctx, jobs, nil); len(got) != len(jobs) || len(scripts.reads) != len(jobs)-1 {
		t.Fatalf("a job started: %d facts, %d reads in all; want %d and %d", len(got), len(scripts.reads), len(jobs), len(jobs)-1)
	}
	got, _ := d.scriptFacts(ctx, jobs, map[int]bool{jobs[2].ID: true})
	if _, ok := d.scripts[jobs[2].ID]; ok || len(d.scripts) != len(jobs)-2 || len(got) != len(jobs)-1 {
		t.Errorf("kept %d scripts and gave %d facts, with reported job %d: %v", len(d.scripts), len(got), jobs[2].ID, ok)
	}
}

// TestScriptFactsTime: a cycle reads no more scripts once it has spent
// scriptReadTime reading them (here each look at the clock is a second
// later); the rest wait for the next cycles, each pending job
// maxScriptWaits cycles at most before it is planned unread.
func TestScriptFactsTime(t *testing.T) {
	var jobs []slurm.Job
	scripts := &fakeScripts{scripts: map[int]string{}}
	for id := 1; id <= 5; id++ {
		jobs = append(jobs, heldJob(id, "gpt2", 1, 2))
		scripts.scripts[id] = "exec rubick-srun python pretrain_gpt.py --global-batch-size 32\n"
	}
	d, _ := newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(*Config) {})
	d.deps.Scripts = scripts
	d.inRun = true
	now := t0
	d.deps.Now = func() time.Time { now = now.Add(time.Second); return now }
	for cycle, want := range []struct {
		reads  int
		unread map[int]bool
	}{
		{1, map[int]bool{2: true, 3: true, 4: true, 5: true}},
		{2, map[int]bool{3: true, 4: true, 5: true}},
		{3, map[int]bool{4: true, 5: true}},
		{4, map[int]bool{}}, // job 5 left unread a fourth time
		{5, map[int]bool{}},
	} {
		_, unread := d.scriptFacts(context.Background(), jobs, nil)
		if len(scripts.reads) != want.reads {
			t.Fatalf("after cycle %d: %d scripts read, want %d", cycle+1, len(scripts.reads), want.reads)
		}
		if diff := cmp.Diff(want.unread, unread); diff != "" {
			t.Errorf("cycle %d's unread (-want +got):\n%s", cycle+1, diff)
		}
	}
	if len(d.scriptWaits) != 0 {
		t.Errorf("waits still counted once every script was read: %v", d.scriptWaits)
	}
	// Reads turned off (a reload) drop what was read and counted.
	if len(d.scripts) != len(jobs) {
		t.Fatalf("%d scripts kept, want %d", len(d.scripts), len(jobs))
	}
	d.scriptWaits[7] = 1 // a job past this cycle's reads
	d.cfg.ReadBatchScripts = false
	if facts, unread := d.scriptFacts(context.Background(), jobs, nil); facts != nil || unread != nil || len(d.scripts)+len(d.scriptWaits) != 0 {
		t.Errorf("reads off: facts %v, unread %v; kept %d scripts and %d waits, want none", facts, unread, len(d.scripts), len(d.scriptWaits))
	}
	// A cycle outside Run (--once) has no next one to wait for.
	d, _ = newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(*Config) {})
	d.deps.Scripts = &fakeScripts{scripts: scripts.scripts}
	d.deps.Now = func() time.Time { now = now.Add(time.Second); return now }
	if _, unread := d.scriptFacts(context.Background(), jobs, nil); len(unread) != 0 {
		t.Errorf("a cycle outside Run waits for %v", unread)
	}
}

func TestReadUserFile(t *testing.T) {
	me := currentUser(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ds.json"), []byte(`{"train_batch_size": 8}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big.json"), make([]byte, maxUserFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tests := []struct {
		name, workDir, file string
		want                string
		err                 error
	}{
		{name: "relative to the working directory", workDir: dir, file: "ds.json", want: `{"train_batch_size": 8}`},
		{name: "absolute", workDir: "/", file: filepath.Join(dir, "ds.json"), want: `{"train_batch_size": 8}`},
		{name: "set at run time", workDir: dir, file: launch.Unresolved + "DIR/ds.json", err: launch.ErrUnresolvable},
		{name: "a FIFO, without blocking", workDir: dir, file: "fifo.json", err: errNotUsers},
		{name: "a directory", workDir: dir, file: ".", err: errNotUsers},
		{name: "missing", workDir: dir, file: "none.json", err: os.ErrNotExist},
		{name: "too big", workDir: dir, file: "big.json"},
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(dir, "other.json")
		if err := os.WriteFile(other, []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, struct {
			name, workDir, file string
			want                string
			err                 error
		}{name: "another user's", workDir: dir, file: "other.json", err: errNotUsers})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadUserFile(ctx, me, tt.workDir, tt.file)
			if tt.want == "" {
				if err == nil || tt.err != nil && !errors.Is(err, tt.err) {
					t.Fatalf("ReadUserFile() = %q, %v; want error %v", got, err, tt.err)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("ReadUserFile() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := ReadUserFile(ctx, "no-such-user-rubick", dir, "ds.json"); err == nil {
		t.Error("an unknown user's file was read")
	}
	if _, err := ReadUserFile(ctx, me, "", "ds.json"); err == nil {
		t.Error("a relative path was read without a working directory")
	}
}

// TestReadUserFileOpensOnlyRegular: rubickd, which may open what the job's
// user may not, opens a file to read it only once it is known to be a
// regular file of that user's: a device's open can act (a watchdog starts
// at it), and a FIFO's releases the writer that waits for a reader.
func TestReadUserFileOpensOnlyRegular(t *testing.T) {
	me := currentUser(t)
	fifo := filepath.Join(t.TempDir(), "ds.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // blocks until a reader opens it
		if err == nil {
			w.Close()
		}
		opened <- err
	}()
	time.Sleep(50 * time.Millisecond) // the writer waits in its open
	_, err := ReadUserFile(context.Background(), me, "/", fifo)
	var released bool
	select {
	case <-opened:
		released = true
	case <-time.After(300 * time.Millisecond):
		// Release the writer ourselves.
		r, rerr := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if rerr != nil {
			t.Fatal(rerr)
		}
		<-opened
		r.Close()
	}
	got := struct {
		NotUsers, Released bool
	}{errors.Is(err, errNotUsers), released}
	if diff := cmp.Diff(struct{ NotUsers, Released bool }{NotUsers: true}, got); diff != "" {
		t.Errorf("ReadUserFile(FIFO) = %v; mismatch (-want +got):\n%s", err, diff)
	}
}

// TestUserFilesBound: a read a hung file system keeps goes on after its
// timeout and holds its slot; once every slot is held, reads fail at once
// with errFilesBusy, until a kept read returns.
func TestUserFilesBound(t *testing.T) {
	gate := make(chan struct{})
	u := newUserFiles(2)
	u.timeout = 10 * time.Millisecond
	u.open = func(_, name string) ([]byte, error) {
		if name == "/hung/ds.json" {
			<-gate
			return nil, errors.New("returned late")
		}
		return []byte("{}"), nil
	}
	ctx := context.Background()
	for i := range 2 {
		if _, err := u.read(ctx, "alice", "/hung", "ds.json"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hung read %d: %v, want its timeout", i+1, err)
		}
	}
	if _, err := u.read(ctx, "alice", "/ok", "ds.json"); !errors.Is(err, errFilesBusy) {
		t.Fatalf("read with both slots held: %v, want %v", err, errFilesBusy)
	}
	close(gate)
	deadline := time.Now().Add(5 * time.Second)
	for len(u.slots) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	u.timeout = time.Minute // no read hangs now: a loaded machine must not time one out
	if b, err := u.read(ctx, "alice", "/ok", "ds.json"); err != nil || string(b) != "{}" {
		t.Fatalf("read after the hung ones returned: %q, %v", b, err)
	}
}

// TestScriptFactsFilesBusy: with the reads of users' files all held by a
// hung file system, a DeepSpeed job's config is read in a later cycle,
// from the launch line already read (its script is not read again), and
// rubickd warns once. The job whose own read timed out is not retried.
func TestScriptFactsFilesBusy(t *testing.T) {
	const line = "exec rubick-srun deepspeed train.py --deepspeed_config ds.json\n"
	scripts := &fakeScripts{scripts: map[int]string{1: line, 2: line, 3: line}}
	var jobs []slurm.Job
	for id := 1; id <= 3; id++ {
		j := heldJob(id, "bert", 1, 2)
		j.User, j.WorkDir = "alice", "/ok"
		jobs = append(jobs, j)
	}
	jobs[0].WorkDir = "/hung"
	d, _ := newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(*Config) {})
	var logs bytes.Buffer
	d.deps.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	d.deps.Scripts = scripts
	gate := make(chan struct{})
	d.files = newUserFiles(1)
	d.files.timeout = 10 * time.Millisecond
	d.files.open = func(_, name string) ([]byte, error) {
		if name == "/hung/ds.json" {
			<-gate
			return nil, errors.New("returned late")
		}
		return []byte(`{"train_batch_size": 48}`), nil
	}
	ctx := context.Background()
	unread := scriptRead{cannot: model.FeatureTP | model.FeaturePP}
	read := scriptRead{cannot: model.FeatureTP | model.FeaturePP, gb: 48, batch: true}
	got, _ := d.scriptFacts(ctx, jobs, nil)
	opts := cmp.Options{cmp.AllowUnexported(scriptRead{}), cmpopts.IgnoreFields(scriptRead{}, "line")}
	if diff := cmp.Diff(map[int]scriptRead{1: unread, 2: unread, 3: unread}, got, opts); diff != "" {
		t.Errorf("first cycle (-want +got):\n%s", diff)
	}
	if d.scripts[1].line != nil || d.scripts[2].line == nil || d.scripts[3].line == nil {
		t.Errorf("lines kept to read again: %v %v %v, want jobs 2 and 3's", d.scripts[1].line, d.scripts[2].line, d.scripts[3].line)
	}
	close(gate)
	deadline := time.Now().Add(5 * time.Second)
	for len(d.files.slots) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// No read hangs now: a loaded machine must not time one out.
	d.files.timeout = time.Minute
	got, _ = d.scriptFacts(ctx, jobs, nil)
	if diff := cmp.Diff(map[int]scriptRead{1: unread, 2: read, 3: read}, got, opts); diff != "" {
		t.Errorf("second cycle (-want +got):\n%s", diff)
	}
	if d.scripts[2].line != nil || d.scripts[3].line != nil {
		t.Errorf("lines still kept after their configs were read")
	}
	if len(scripts.reads) != 3 {
		t.Errorf("scripts read %v, want each once", scripts.reads)
	}
	if n := strings.Count(logs.String(), "have not returned (a hung file system?)"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
	}
}

// TestScriptsNotGiven: Slurm gives no script to a rubickd that is neither
// root nor an operator; after scriptMisses such reads in a row rubickd
// says so, once. A script of its own fault, or an interactive job
// (which has none), counts for nothing.
func TestScriptsNotGiven(t *testing.T) {
	var jobs []slurm.Job
	for id := 1; id <= scriptMisses+2; id++ {
		jobs = append(jobs, heldJob(id, "gpt2", 1, 2))
	}
	tests := map[string]struct {
		scripts     map[int]string
		interactive bool
		warn        bool
	}{
		"none given":         {warn: true},
		"one given":          {scripts: map[int]string{3: "exec rubick-srun python pretrain_gpt.py\n"}},
		"scripts without it": {scripts: map[int]string{1: "srun true", 2: "srun true", 3: "srun true", 4: "srun true", 5: "srun true"}},
		"interactive jobs":   {interactive: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, _ := newTestDaemonWith(t, &fakeCluster{}, &fakeApplier{}, func(*Config) {})
			var logs bytes.Buffer
			d.deps.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			d.deps.Scripts = &fakeScripts{scripts: tc.scripts}
			js := slices.Clone(jobs)
			for i := range js {
				js[i].Interactive = tc.interactive
			}
			d.scriptFacts(context.Background(), js, nil)
			if got := strings.Count(logs.String(), "Slurm gives rubickd no batch scripts"); got != map[bool]int{true: 1}[tc.warn] {
				t.Errorf("%d warnings, want warn=%v:\n%s", got, tc.warn, logs.String())
			}
		})
	}
}
