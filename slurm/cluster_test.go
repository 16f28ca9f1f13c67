package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newTestCluster(t *testing.T, url string, mod func(*Config)) *RESTCluster {
	t.Helper()
	cfg := Config{URL: url, User: "root", Token: "good-token", Logger: quiet, Timeout: 5 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewCluster(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewCluster: %v", err)
	}
	return c
}

func ts(sec int64) time.Time { return time.Unix(sec, 0).UTC() }

// ignoreTagErr: malformed-tag errors are checked by message separately.
var ignoreTagErr = cmpopts.IgnoreFields(Job{}, "TagErr")

func TestGolden2205(t *testing.T) {
	_, srv := newFakeRestd(t, Version38)
	c := newTestCluster(t, srv.URL, nil)
	if c.Version() != Version38 {
		t.Fatalf("detected %s, want %s", c.Version(), Version38)
	}
	ctx := context.Background()
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	jobs, changed, err := c.Jobs(ctx, time.Time{})
	if err != nil || !changed {
		t.Fatalf("Jobs: changed=%v err=%v", changed, err)
	}
	if len(jobs) != 9 {
		t.Fatalf("got %d jobs, want 9", len(jobs))
	}
	byID := map[int]Job{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	// Values read off testdata/22.05/v0.0.38-jobs.json by hand.
	want := map[int]Job{
		31: {
			ID: 31, Name: "resnet50", User: "root", Account: "root", Cluster: "rubick", Partition: "gpu", QOS: "normal",
			WorkDir: "/tmp/slurm-lab/out",
			State:   StateRunning, Priority: 4294901729,
			NodeList: []string{"node1"}, BatchHost: "node1", NodeCount: 1,
			GPUsPerNode: 4, GPUs: 4, CPUs: 8, Tasks: 1, MemPerNodeMB: 65536, MemMB: 65536, Billing: 8,
			TRESReq: "cpu=8,mem=64G,node=1,billing=8,gres/gpu=4",
			Requeue: true, SubmitTime: ts(1795315344), EligibleTime: ts(1795315344), StartTime: ts(1795315344),
			Comment: "model=resnet50;updated", AdminComment: "rubick:plan=dp4,gpus=4",
		},
		32: {
			ID: 32, Name: "gpt2-ddp", User: "root", Account: "root", Cluster: "rubick", Partition: "gpu", QOS: "normal",
			WorkDir: "/tmp/slurm-lab/out",
			State:   StateRunning, Priority: 4294901728,
			NodeList: []string{"node2", "node3"}, BatchHost: "node2", NodeCount: 2,
			GPUsPerNode: 8, GPUs: 16, CPUs: 32, Tasks: 2, MemPerCPUMB: 4000, MemMB: 128000, Billing: 32,
			TRESReq: "cpu=32,mem=125G,node=2,billing=32,gres/gpu=16",
			Requeue: true, SubmitTime: ts(1795315344), EligibleTime: ts(1795315344), StartTime: ts(1795315344),
		},
		33: {
			ID: 33, Name: "bert-held", User: "root", Account: "root", Cluster: "rubick", Partition: "gpu", QOS: "normal",
			WorkDir: "/tmp/slurm-lab/out",
			State:   StatePending, Reason: "JobHeldUser", Priority: 0, Held: true,
			NodeCount: 1, GPUsPerNode: 2, CPUs: 1, Tasks: 1, MemPerCPUMB: 4000,
			TRESReq: "cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2",
			Requeue: true, SubmitTime: ts(1795315344),
			AdminComment: "rubick:pending-decision",
		},
		24: {
			ID: 24, Name: "rq.sh", User: "root", Account: "root", Cluster: "rubick", Partition: "gpu", QOS: "normal",
			WorkDir: "/tmp/slurm-lab/out",
			State:   StateCancelled, Priority: 4294901735,
			NodeList: []string{"node2", "node3"}, BatchHost: "node2", NodeCount: 2,
			GPUsPerNode: 8, GPUs: 16, CPUs: 2, Tasks: byID[24].Tasks, MemPerCPUMB: 4000, MemMB: 8000, Billing: 1,
			RequiredNodes: []string{"node2", "node3"},
			TRESReq:       "cpu=2,mem=8000M,node=2,billing=2,gres/gpu=16",
			Requeue:       true, RestartCount: 4, SubmitTime: byID[24].SubmitTime, EligibleTime: byID[24].SubmitTime, StartTime: byID[24].StartTime,
		},
	}
	for id, w := range want {
		if diff := cmp.Diff(w, byID[id], ignoreTagErr); diff != "" {
			t.Errorf("job %d (-want +got):\n%s", id, diff)
		}
	}
	// time_limit is in minutes; null (no limit) reads as 0.
	if got, want := byID[27].TimeLimit, 525599*time.Minute; got != want {
		t.Errorf("job 27 TimeLimit = %v, want %v", got, want)
	}
	// salloc --no-shell jobs (batch_flag false) are interactive.
	for id, want := range map[int]bool{28: true, 30: true, 31: false, 33: false} {
		if byID[id].Interactive != want {
			t.Errorf("job %d Interactive = %v, want %v", id, byID[id].Interactive, want)
		}
	}
	// The lab's old free-form tags are reported as malformed, not dropped.
	for _, id := range []int{31, 33} {
		if !errors.Is(byID[id].TagErr, ErrTag) || !strings.Contains(byID[id].TagErr.Error(), "version") {
			t.Errorf("job %d TagErr = %v, want a version error", id, byID[id].TagErr)
		}
	}

	one, err := c.Job(ctx, 31)
	if err != nil {
		t.Fatalf("Job(31): %v", err)
	}
	if diff := cmp.Diff(byID[31], one, ignoreTagErr); diff != "" {
		t.Errorf("Job(31) differs from the list entry (-list +job):\n%s", diff)
	}

	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatalf("Nodes: %v", err)
	}
	wantNodes := []Node{
		{Name: "node1", State: "MIXED", GPUs: 8, GPUsUsed: 4, CPUs: 64, CPUsAlloc: 8, MemMB: 512000, MemAllocMB: 65536, Partitions: []string{"gpu"}},
		{Name: "node2", State: "MIXED", GPUs: 8, GPUsUsed: 8, CPUs: 64, CPUsAlloc: 16, MemMB: 512000, MemAllocMB: 64000, Partitions: []string{"gpu"}},
	}
	if diff := cmp.Diff(wantNodes, nodes[:2], cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if len(nodes) != 4 {
		t.Errorf("got %d nodes, want 4", len(nodes))
	}

	parts, err := c.Partitions(ctx)
	if err != nil {
		t.Fatalf("Partitions: %v", err)
	}
	wantParts := []Partition{{Name: "gpu", State: "UP", Nodes: []string{"node1", "node2", "node3", "node4"}, TotalCPUs: 256, TotalNodes: 4, PriorityJobFactor: 1, PriorityTier: 1, TRES: "cpu=256,mem=2000G,node=4,billing=256,gres/gpu=32"}}
	if diff := cmp.Diff(wantParts, parts); diff != "" {
		t.Errorf("partitions (-want +got):\n%s", diff)
	}
}

func TestGolden2411(t *testing.T) {
	_, srv := newFakeRestd(t, Version41)
	c := newTestCluster(t, srv.URL, nil)
	if c.Version() != Version41 {
		t.Fatalf("detected %s, want %s", c.Version(), Version41)
	}
	ctx := context.Background()
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	jobs, changed, err := c.Jobs(ctx, time.Time{})
	if err != nil || !changed {
		t.Fatalf("Jobs: changed=%v err=%v", changed, err)
	}
	// Values read off testdata/24.11/v0.0.41-jobs.json by hand. The
	// sample cluster ran without slurmdbd, so tres_alloc_str lacks gres/gpu
	// and the totals come from gres_detail.
	want := []Job{
		{
			ID: 1, Name: "wrap", User: "root", Cluster: "rubick24", Partition: "gpu", State: StateCompleted, Priority: 1,
			WorkDir:  "/var/lib/slurm-lab/out",
			NodeList: []string{"node1"}, BatchHost: "node1", NodeCount: 1, GPUsPerNode: 1,
			CPUs: 1, CPUsPerTask: 1, Tasks: 1, MemPerCPUMB: 4000, MemMB: 4000, Billing: 1, TRESReq: "cpu=1,mem=4000M,node=1,billing=1",
			Requeue:    true,
			SubmitTime: ts(1795317671), EligibleTime: ts(1795317671), StartTime: ts(1795317671),
		},
		{
			ID: 2, Name: "wrap", User: "root", Cluster: "rubick24", Partition: "gpu", State: StateRunning, Priority: 1,
			WorkDir:  "/var/lib/slurm-lab/out",
			NodeList: []string{"node1"}, BatchHost: "node1", NodeCount: 1, GPUsPerNode: 1, GPUs: 1,
			CPUs: 1, CPUsPerTask: 1, Tasks: 1, MemPerCPUMB: 4000, MemMB: 4000, Billing: 1, TRESReq: "cpu=1,mem=4000M,node=1,billing=1",
			Requeue:    true,
			SubmitTime: ts(1795317681), EligibleTime: ts(1795317681), StartTime: ts(1795317681),
			Comment: "model_type=llama", AdminComment: "model_type=llama",
			Tag: &Tag{ModelType: "llama"}, // the legacy job_submit.lua form
		},
		{
			ID: 3, Name: "gpt2-ddp", User: "root", Cluster: "rubick24", Partition: "gpu", State: StateRunning, Priority: 1,
			WorkDir:  "/",
			NodeList: []string{"node2", "node3"}, BatchHost: "node2", NodeCount: 2, GPUsPerNode: 8, GPUs: 16,
			CPUs: 32, CPUsPerTask: 16, Tasks: 2, MemPerCPUMB: 4000, MemMB: 128000, Billing: 32, TRESReq: "cpu=32,mem=125G,node=2,billing=32",
			Requeue:    true,
			SubmitTime: ts(1795317689), EligibleTime: ts(1795317689), StartTime: ts(1795317690),
		},
		{
			ID: 4, Name: "bert-held", User: "root", Cluster: "rubick24", Partition: "gpu", State: StatePending,
			WorkDir: "/",
			Reason:  "JobHeldUser", Priority: 0, Held: true, NodeCount: 1, GPUsPerNode: 2,
			CPUs: 1, CPUsPerTask: 1, Tasks: 1, MemPerCPUMB: 4000, TRESReq: "cpu=1,mem=4000M,node=1,billing=1",
			Requeue:    true,
			SubmitTime: ts(1795317689),
		},
	}
	if diff := cmp.Diff(want, jobs, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}

	one, err := c.Job(ctx, 1) // v0.0.41-job-1.json was recorded earlier, while job 1 ran
	if err != nil {
		t.Fatalf("Job(1): %v", err)
	}
	if one.State != StateRunning || one.GPUsPerNode != 4 || one.GPUs != 4 || one.AdminComment != "rubick:plan=dp4" || one.TagErr == nil {
		t.Errorf("Job(1) = %+v", one)
	}

	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatalf("Nodes: %v", err)
	}
	wantNodes := []Node{
		{Name: "node1", State: "MIXED", GPUs: 8, GPUsUsed: 1, CPUs: 64, CPUsAlloc: 1, MemMB: 512000, MemAllocMB: 4000, Partitions: []string{"gpu"}},
		{Name: "node2", State: "MIXED", GPUs: 8, GPUsUsed: 8, CPUs: 64, CPUsAlloc: 16, MemMB: 512000, MemAllocMB: 64000, Partitions: []string{"gpu"}},
		{Name: "node3", State: "MIXED", GPUs: 8, GPUsUsed: 8, CPUs: 64, CPUsAlloc: 16, MemMB: 512000, MemAllocMB: 64000, Partitions: []string{"gpu"}},
		{Name: "node4", State: "IDLE", GPUs: 8, GPUsUsed: 0, CPUs: 64, CPUsAlloc: 0, MemMB: 512000, MemAllocMB: 0, Partitions: []string{"gpu"}},
	}
	if diff := cmp.Diff(wantNodes, nodes, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}

	parts, err := c.Partitions(ctx)
	if err != nil {
		t.Fatalf("Partitions: %v", err)
	}
	wantParts := []Partition{{Name: "gpu", State: "UP", Nodes: []string{"node1", "node2", "node3", "node4"}, TotalCPUs: 256, TotalNodes: 4, PriorityJobFactor: 1, PriorityTier: 1, TRES: "cpu=256,mem=2000G,node=4,billing=256"}}
	if diff := cmp.Diff(wantParts, parts); diff != "" {
		t.Errorf("partitions (-want +got):\n%s", diff)
	}
}

func TestJobsNotModified(t *testing.T) {
	for _, v := range []string{Version38, Version41, Version42} {
		t.Run(v, func(t *testing.T) {
			f, srv := newFakeRestd(t, v)
			f.lastUpdate = 1795315400
			c := newTestCluster(t, srv.URL, nil)
			ctx := context.Background()

			jobs, changed, err := c.Jobs(ctx, ts(1795315500))
			if err != nil || changed || jobs != nil {
				t.Fatalf("after lastUpdate: jobs=%d changed=%v err=%v, want unchanged", len(jobs), changed, err)
			}
			jobs, changed, err = c.Jobs(ctx, ts(1795315300))
			if err != nil || !changed || len(jobs) == 0 {
				t.Fatalf("before lastUpdate: jobs=%d changed=%v err=%v, want the list", len(jobs), changed, err)
			}
			reqs := f.Requests()
			want := "update_time=1795315300"
			if v != Version38 {
				want = "update_time=uts1795315300"
			}
			if last := reqs[len(reqs)-1]; !strings.Contains(last, want) {
				t.Errorf("last request %q lacks %s", last, want)
			}
		})
	}
}

func TestBadTokenIs500APIError(t *testing.T) {
	f, srv := newFakeRestd(t, Version38)
	c := newTestCluster(t, srv.URL, nil)
	f.setToken("rotated-on-server")
	_, _, err := c.Jobs(context.Background(), time.Time{})
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v, want *APIError", err)
	}
	want := &APIError{Endpoint: "GET /slurm/v0.0.38/jobs", Status: 500,
		Errors: []SlurmError{{Code: 1007, Message: "Unspecified error", Source: "slurm_load_jobs"}}}
	if diff := cmp.Diff(want, ae); diff != "" {
		t.Errorf("APIError (-want +got):\n%s", diff)
	}
	if !ae.Unauthorized() {
		t.Error("Unauthorized() = false for the bad-token answer")
	}
	if errors.Is(err, ErrUnavailable) {
		t.Error("a bad token must not look like slurmrestd being down")
	}
	if !strings.Contains(err.Error(), "HTTP 500") || !strings.Contains(err.Error(), "Unspecified error") {
		t.Errorf("message %q lacks status or Slurm error", err)
	}
}

func TestMissingCredentials(t *testing.T) {
	_, srv := newFakeRestd(t, Version38)
	_, err := NewCluster(context.Background(), Config{URL: srv.URL, User: "root", Logger: quiet})
	if !errors.Is(err, ErrNoToken) {
		t.Fatalf("no token: err = %v, want ErrNoToken", err)
	}
	// No user name: slurmrestd answers 401, and detection reports it
	// instead of guessing a version.
	_, err = NewCluster(context.Background(), Config{URL: srv.URL, Token: "good-token", Logger: quiet})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 401 || !ae.Unauthorized() {
		t.Fatalf("no user: err = %v, want a 401 APIError", err)
	}
}

func TestConnectionRefusedIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = NewCluster(context.Background(), Config{URL: "http://" + addr, User: "root", Token: "t", Logger: quiet})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("detect: err = %v, want ErrUnavailable", err)
	}
	c, err := NewCluster(context.Background(), Config{URL: "http://" + addr, Version: Version38, User: "root", Token: "t", Logger: quiet})
	if err != nil {
		t.Fatalf("pinned version needs no server: %v", err)
	}
	_, _, err = c.Jobs(context.Background(), time.Time{})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "GET /slurm/v0.0.38/jobs") {
		t.Fatalf("Jobs: err = %v, want ErrUnavailable naming the endpoint", err)
	}
}

func TestTimeoutIsUnavailableButCallerCancelIsNot(t *testing.T) {
	f, srv := newFakeRestd(t, Version41)
	c := newTestCluster(t, srv.URL, func(cfg *Config) { cfg.Timeout = 50 * time.Millisecond })
	f.mu.Lock()
	f.delay = time.Second
	f.mu.Unlock()
	_, err := c.Nodes(context.Background())
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("timeout: err = %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Nodes(ctx)
	if errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err = %v, want context.Canceled only", err)
	}
}

func TestJobNotFound(t *testing.T) {
	for _, v := range []string{Version38, Version41, Version42} {
		t.Run(v, func(t *testing.T) {
			_, srv := newFakeRestd(t, v)
			c := newTestCluster(t, srv.URL, nil)
			_, err := c.Job(context.Background(), 999)
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestTokenFileReread(t *testing.T) {
	f, srv := newFakeRestd(t, Version38)
	path := filepath.Join(t.TempDir(), "jwt")
	if err := os.WriteFile(path, []byte("SLURM_JWT=good-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, srv.URL, func(cfg *Config) { cfg.Token, cfg.TokenFile = "", path })
	ctx := context.Background()
	if _, err := c.Nodes(ctx); err != nil {
		t.Fatalf("first token: %v", err)
	}
	// Rotate on the server: the old token now fails.
	f.setToken("second-token")
	if _, err := c.Nodes(ctx); err == nil {
		t.Fatal("old token accepted after rotation")
	}
	// Rotate the file (raw form this time); the next call must pick it up.
	if err := os.WriteFile(path, []byte("second-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Nodes(ctx); err != nil {
		t.Fatalf("after rewriting the token file: %v", err)
	}
}

func TestTokenFileChangeDetection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jwt")
	write := func(s string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tf := &tokenFile{path: path}
	steps := []struct {
		content string
		mtime   time.Time
		want    string
	}{
		{"SLURM_JWT=aaaa\n", t0, "aaaa"},
		{"SLURM_JWT=bbbb\n", t0, "aaaa"},                           // same size and mtime: cached (documented limit)
		{"SLURM_JWT=cccc\n", t0.Add(time.Second), "cccc"},          // same size, new mtime
		{"export SLURM_JWT=dddddd", t0.Add(time.Second), "dddddd"}, // new size
	}
	for i, s := range steps {
		write(s.content, s.mtime)
		got, err := tf.get()
		if err != nil || got != s.want {
			t.Errorf("step %d: got %q, %v; want %q", i, got, err, s.want)
		}
	}
	write("\n# nothing\n", t0.Add(2*time.Second))
	if _, err := tf.get(); !errors.Is(err, ErrNoToken) {
		t.Errorf("empty file: err = %v, want ErrNoToken", err)
	}
}

func TestParseToken(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"scontrol token":  {"SLURM_JWT=eyJhbGciOi.x.y\n", "eyJhbGciOi.x.y"},
		"export quoted":   {"export SLURM_JWT=\"abc.def.ghi\"\n", "abc.def.ghi"},
		"raw":             {"  abc.def.ghi  \n", "abc.def.ghi"},
		"raw after blank": {"\n\nabc\n", "abc"},
		"other vars":      {"FOO=bar\nSLURM_JWT=tok\n", "tok"},
		"empty":           {"", ""},
	}
	for name, tc := range tests {
		if got := parseToken([]byte(tc.in)); got != tc.want {
			t.Errorf("%s: parseToken(%q) = %q, want %q", name, tc.in, got, tc.want)
		}
	}
}

func TestVersionDetectionAndPinning(t *testing.T) {
	f, srv := newFakeRestd(t, Version38)
	c := newTestCluster(t, srv.URL, nil)
	if c.Version() != Version38 {
		t.Errorf("detected %q", c.Version())
	}
	reqs := f.Requests()
	want := []string{"GET /slurm/v0.0.42/ping/", "GET /slurm/v0.0.41/ping/", "GET /slurm/v0.0.38/ping"}
	if diff := cmp.Diff(want, reqs); diff != "" {
		t.Errorf("probe requests (-want +got):\n%s", diff)
	}
	if _, err := NewCluster(context.Background(), Config{URL: srv.URL, Version: "v0.0.99", Token: "x", Logger: quiet}); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("unknown pinned version: err = %v", err)
	}
	// A server speaking neither version.
	none, nsrv := newFakeRestd(t, "v0.0.37")
	_ = none
	if _, err := NewCluster(context.Background(), Config{URL: nsrv.URL, User: "root", Token: "good-token", Logger: quiet}); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("no known version: err = %v", err)
	}
}

func TestSubmitHeldIsSuccess(t *testing.T) {
	tests := map[string]struct {
		version string
		wantID  int
	}{
		"22.05 error 2042":   {Version38, 34},
		"24.11 warning 2042": {Version41, 9},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, srv := newFakeRestd(t, tc.version)
			c := newTestCluster(t, srv.URL, nil)
			id, err := c.Submit(context.Background(), SubmitRequest{
				Name: "rest-job", Partition: "gpu", Script: "#!/bin/bash\nsleep 300\n", Nodes: 2, Tasks: 2,
				CPUsPerTask: 4, GPUsPerNode: 2, MemPerNodeMB: 16000, Hold: true, Requeue: true,
			})
			if err != nil || id != tc.wantID {
				t.Fatalf("Submit = %d, %v; want %d, nil", id, err, tc.wantID)
			}
		})
	}
}

func TestSubmitRealErrorFails(t *testing.T) {
	f, srv := newFakeRestd(t, Version38)
	c := newTestCluster(t, srv.URL, nil)
	f.overrides["/slurm/v0.0.38/job/submit"] = `{"errors":[{"error_code":2041,"error":"Requested partition configuration not available now"}],"job_id":0}`
	_, err := c.Submit(context.Background(), SubmitRequest{Script: "#!/bin/sh\n"})
	var ae *APIError
	if !errors.As(err, &ae) || !ae.HasCode(2041) {
		t.Fatalf("err = %v, want APIError with 2041", err)
	}
}

func TestSubmitBodies(t *testing.T) {
	// The request bodies carry the fixes the 22.05 lab showed: nodes as
	// "n-n" and environment as a dict in v0.0.38; a list and the script
	// inside the job from v0.0.41 on.
	for _, v := range []string{Version38, Version41, Version42} {
		t.Run(v, func(t *testing.T) {
			var body string
			f, srv := newFakeRestd(t, v)
			_ = f
			c := newTestCluster(t, srv.URL, func(cfg *Config) {
				cfg.HTTPClient = &http.Client{Transport: captureBody{&body}}
			})
			_, _ = c.Submit(context.Background(), SubmitRequest{Script: "#!/bin/sh\n", Nodes: 2, GPUsPerNode: 4, Env: []string{"A=1"}})
			var wants []string
			if v == Version38 {
				wants = []string{`"nodes":"2-2"`, `"gres":"gpu:4"`, `"environment":{"A":"1"}`, `"script":"#!/bin/sh\n"`}
			} else {
				wants = []string{`"minimum_nodes":2`, `"maximum_nodes":2`, `"tres_per_node":"gres/gpu:4"`, `"environment":["A=1"]`}
			}
			for _, w := range wants {
				if !strings.Contains(body, w) {
					t.Errorf("body %s lacks %s", body, w)
				}
			}
		})
	}
}

// captureBody records the last POST body and forwards the request.
type captureBody struct{ body *string }

func (c captureBody) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Method == http.MethodPost {
		b, _ := io.ReadAll(r.Body)
		*c.body = string(b)
		r.Body = io.NopCloser(strings.NewReader(string(b)))
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestFlexInt(t *testing.T) {
	tests := map[string]flexInt{
		`4`:    {Value: 4, Set: true},
		`"4"`:  {Value: 4, Set: true},
		`null`: {},
		`{"set":true,"infinite":false,"number":4294901729}`: {Value: 4294901729, Set: true},
		`{"set":false,"infinite":true,"number":0}`:          {Infinite: true},
	}
	for in, want := range tests {
		var got flexInt
		if err := got.UnmarshalJSON([]byte(in)); err != nil || got != want {
			t.Errorf("%s: got %+v, %v; want %+v", in, got, err, want)
		}
	}
}

func TestV38CpusPerTaskNumber(t *testing.T) {
	// The spec says string; 22.05 sends a number when the job set it.
	f, srv := newFakeRestd(t, Version38)
	c := newTestCluster(t, srv.URL, nil)
	f.overrides["/slurm/v0.0.38/jobs"] = `{"meta":{"Slurm":{"version":{"major":22}}},"errors":[],"jobs":[{"job_id":7,"job_state":"PENDING","cpus_per_task":4,"priority":0,"state_reason":"job_requeued_in_held_state"}]}`
	jobs, _, err := c.Jobs(context.Background(), time.Time{})
	if err != nil || len(jobs) != 1 || jobs[0].CPUsPerTask != 4 || !jobs[0].Held {
		t.Fatalf("got %+v, %v", jobs, err)
	}
}

func TestV41LargePriority(t *testing.T) {
	// priority/basic priorities exceed the spec's int32.
	f, srv := newFakeRestd(t, Version41)
	c := newTestCluster(t, srv.URL, nil)
	f.overrides["/slurm/v0.0.41/jobs/"] = `{"jobs":[{"job_id":7,"job_state":["PENDING"],"priority":{"set":true,"infinite":false,"number":4294901729},"hold":false}],"errors":[],"warnings":[]}`
	jobs, _, err := c.Jobs(context.Background(), time.Time{})
	if err != nil || len(jobs) != 1 || jobs[0].Priority != 4294901729 || jobs[0].Held {
		t.Fatalf("got %+v, %v", jobs, err)
	}
}

func TestV41TimeLimit(t *testing.T) {
	tests := map[string]struct {
		limit string
		want  time.Duration
	}{
		"set":      {`{"set":true,"infinite":false,"number":90}`, 90 * time.Minute},
		"infinite": {`{"set":false,"infinite":true,"number":0}`, 0},
		"absent":   {`null`, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, srv := newFakeRestd(t, Version41)
			c := newTestCluster(t, srv.URL, nil)
			f.overrides["/slurm/v0.0.41/jobs/"] = `{"jobs":[{"job_id":7,"job_state":["PENDING"],"priority":{"set":true,"number":5},"time_limit":` + tc.limit + `}],"errors":[]}`
			jobs, _, err := c.Jobs(context.Background(), time.Time{})
			if err != nil || len(jobs) != 1 {
				t.Fatalf("got %+v, %v", jobs, err)
			}
			if jobs[0].TimeLimit != tc.want {
				t.Errorf("TimeLimit = %v, want %v", jobs[0].TimeLimit, tc.want)
			}
		})
	}
}

func TestRateLimitedCalls(t *testing.T) {
	clk := newFakeClock()
	_, srv := newFakeRestd(t, Version38)
	c := newTestCluster(t, srv.URL, func(cfg *Config) { cfg.Version, cfg.RateLimit, cfg.Clock = Version38, 2, clk })
	for range 3 {
		if err := c.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]time.Duration{500 * time.Millisecond, 500 * time.Millisecond}, clk.Sleeps()); diff != "" {
		t.Errorf("sleeps (-want +got):\n%s", diff)
	}
}

func TestDecodeToleratesFieldTypeDrift(t *testing.T) {
	// A field whose type drifts from the spec is skipped with a warning,
	// once, not at every poll; the job is still reported.
	f, srv := newFakeRestd(t, Version41)
	h := countingHandler{mu: &sync.Mutex{}, msgs: map[string]int{}}
	c := newTestCluster(t, srv.URL, func(cfg *Config) { cfg.Logger = slog.New(h) })
	f.overrides["/slurm/v0.0.41/jobs/"] = `{"jobs":[{"job_id":7,"name":"x","job_state":["RUNNING"],"restart_cnt":"three","nodes":"n[1-2]","priority":{"set":true,"number":5}}],"errors":[]}`
	for range 3 {
		jobs, _, err := c.Jobs(context.Background(), time.Time{})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("got %v, %v", jobs, err)
		}
		if j := jobs[0]; j.ID != 7 || j.State != StateRunning || j.RestartCount != 0 || len(j.NodeList) != 2 || j.Priority != 5 {
			t.Errorf("job = %+v", j)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.msgs["slurmrestd field type differs from the spec; field skipped"]; n != 1 {
		t.Errorf("%d warnings over three polls, want 1", n)
	}
}

func TestErrorsIn200Answer(t *testing.T) {
	f, srv := newFakeRestd(t, Version38)
	c := newTestCluster(t, srv.URL, nil)
	f.overrides["/slurm/v0.0.38/nodes"] = `{"meta":{},"errors":[{"error_code":1,"error":"Unable to query nodes"}],"nodes":[]}`
	_, err := c.Nodes(context.Background())
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 200 || !ae.HasCode(1) {
		t.Fatalf("err = %v", err)
	}
}

// Jobs that ask for GPUs per job or per task, and array records, as the
// 22.05 and 24.11 lab report them.
func TestJobsGPUsPerJobAndArrays(t *testing.T) {
	type got struct {
		GPUsPerNode    int
		GPUsNotPerNode bool
		ArrayJobID     int
		ArrayTaskID    int
		ArrayTasks     string
		Ref            string
		ArrayMaxTasks  int
	}
	tests := map[string]struct {
		version, path, body string
		want                []got
	}{
		"22.05": {Version38, "/slurm/v0.0.38/jobs", `{"errors":[],"jobs":[
			{"job_id":53,"job_state":"PENDING","node_count":1,"tres_per_job":"gres:gpu:4","tres_per_node":"","tres_req_str":"cpu=1,mem=4000M,node=1,billing=1,gres/gpu=4","array_job_id":0},
			{"job_id":54,"job_state":"PENDING","node_count":2,"tres_per_task":"gres:gpu:1","tres_req_str":"cpu=8,node=2,gres/gpu=8","array_job_id":0},
			{"job_id":55,"job_state":"PENDING","node_count":2,"tres_req_str":"cpu=8,node=2,gres/gpu=5","array_job_id":0},
			{"job_id":46,"job_state":"PENDING","node_count":1,"tres_per_node":"gres:gpu:1","array_job_id":46,"array_task_id":1,"array_task_string":"","array_max_tasks":2},
			{"job_id":48,"job_state":"PENDING","node_count":1,"tres_per_node":"gres:gpu:2","array_job_id":48,"array_task_string":"0-2"}]}`,
			[]got{{4, true, 0, 0, "", "53", 0}, {4, true, 0, 0, "", "54", 0}, {0, false, 0, 0, "", "55", 0}, {1, false, 46, 1, "", "46_1", 2}, {2, false, 48, 0, "0-2", "48_[0-2]", 0}}},
		"24.11": {Version41, "/slurm/v0.0.41/jobs/", `{"errors":[],"warnings":[],"jobs":[
			{"job_id":53,"job_state":["PENDING"],"node_count":{"set":true,"number":1},"tres_per_job":"gres/gpu:4","tres_req_str":"cpu=1,node=1,gres/gpu=4","array_job_id":{"set":true,"number":0}},
			{"job_id":47,"job_state":["PENDING"],"node_count":{"set":true,"number":1},"tres_per_node":"gres/gpu:1","array_job_id":{"set":true,"number":46},"array_task_id":{"set":true,"number":0},"array_max_tasks":{"set":true,"infinite":false,"number":2}},
			{"job_id":56,"job_state":["PENDING"],"node_count":{"set":true,"number":1},"tres_per_job":"gres/gpu:2","tres_req_str":"cpu=1,mem=4000M,node=1,billing=1"},
			{"job_id":57,"job_state":["PENDING"],"node_count":{"set":true,"number":2},"tasks":{"set":true,"number":4},"tres_per_task":"gres/gpu:1","tres_req_str":"cpu=4,node=2"}]}`,
			[]got{{4, true, 0, 0, "", "53", 0}, {1, false, 46, 0, "", "46_0", 2}, {2, true, 0, 0, "", "56", 0}, {2, true, 0, 0, "", "57", 0}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var gots []got
			for _, j := range jobsServed(t, tc.version, tc.path, tc.body) {
				gots = append(gots, got{j.GPUsPerNode, j.GPUsNotPerNode, j.ArrayJobID, j.ArrayTaskID, j.ArrayTasks, j.Ref(), j.ArrayMaxTasks})
			}
			if d := cmp.Diff(tc.want, gots); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestJobsExclusiveRequiredNodesHet: the shared modes, node lists,
// heterogeneous job fields and reservations are what the two labs report
// for sbatch --exclusive, --exclusive=user, --oversubscribe, -w, none of
// them, a job with two components (hetjob) and --reservation.
func TestJobsExclusiveRequiredNodesHet(t *testing.T) {
	type got struct {
		Exclusive   bool
		Required    []string
		Het, Offset int
		Reservation string
	}
	tests := map[string]struct {
		version, path, body string
		want                []got
	}{
		"22.05": {Version38, "/slurm/v0.0.38/jobs", `{"errors":[],"jobs":[
			{"job_id":40,"job_state":"PENDING","shared":"none","required_nodes":""},
			{"job_id":41,"job_state":"PENDING","shared":null,"required_nodes":"node[3-4]"},
			{"job_id":42,"job_state":"PENDING","shared":"user","required_nodes":""},
			{"job_id":43,"job_state":"PENDING","shared":"shared","required_nodes":""},
			{"job_id":44,"job_state":"PENDING","shared":null,"required_nodes":""},
			{"job_id":52,"job_state":"PENDING","het_job_id":52,"het_job_offset":0,"het_job_id_set":"52-53"},
			{"job_id":53,"job_state":"PENDING","het_job_id":52,"het_job_offset":1,"het_job_id_set":"52-53"},
			{"job_id":58,"job_state":"PENDING","resv_name":"r1"}]}`,
			[]got{{true, nil, 0, 0, ""}, {false, []string{"node3", "node4"}, 0, 0, ""}, {true, nil, 0, 0, ""}, {false, nil, 0, 0, ""},
				{false, nil, 0, 0, ""}, {false, nil, 52, 0, ""}, {false, nil, 52, 1, ""}, {false, nil, 0, 0, "r1"}}},
		"24.11": {Version41, "/slurm/v0.0.41/jobs/", `{"errors":[],"warnings":[],"jobs":[
			{"job_id":5,"job_state":["PENDING"],"shared":["none"],"exclusive":["true"],"required_nodes":""},
			{"job_id":6,"job_state":["PENDING"],"shared":["user"],"exclusive":["user"],"required_nodes":""},
			{"job_id":7,"job_state":["PENDING"],"shared":[],"exclusive":[],"required_nodes":"node2"},
			{"job_id":8,"job_state":["PENDING"],"shared":["oversubscribe"],"exclusive":["false"],"required_nodes":""},
			{"job_id":9,"job_state":["PENDING"],"shared":[],"exclusive":[],"required_nodes":""},
			{"job_id":15,"job_state":["PENDING"],"het_job_id":{"set":true,"infinite":false,"number":15},"het_job_offset":{"set":true,"infinite":false,"number":0}},
			{"job_id":16,"job_state":["PENDING"],"het_job_id":{"set":true,"infinite":false,"number":15},"het_job_offset":{"set":true,"infinite":false,"number":1}},
			{"job_id":17,"job_state":["PENDING"],"resv_name":"r1"}]}`,
			[]got{{true, nil, 0, 0, ""}, {true, nil, 0, 0, ""}, {false, []string{"node2"}, 0, 0, ""}, {false, nil, 0, 0, ""},
				{false, nil, 0, 0, ""}, {false, nil, 15, 0, ""}, {false, nil, 15, 1, ""}, {false, nil, 0, 0, "r1"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var gots []got
			for _, j := range jobsServed(t, tc.version, tc.path, tc.body) {
				gots = append(gots, got{j.Exclusive, j.RequiredNodes, j.HetJobID, j.HetJobOffset, j.Reservation})
			}
			if d := cmp.Diff(tc.want, gots); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestLimits reads the lab's QOS and association lists, recorded
// (scripts/lab/record-limits.sh) with
// MaxTRESPerJob=gres/gpu=4,node=2,cpu=64,mem=200G,billing=50,fs/disk=1000
// MaxWall=120
// GrpTRES=gres/gpu=12,cpu=96,mem=1T,billing=80,node=3
// MaxTRESPerUser=gres/gpu=6,cpu=48,mem=400G,billing=40,node=2
// MaxTRESPerAccount=gres/gpu=7 MaxTRESPerNode=gres/gpu=3,billing=20
// GrpTRESRunMins=gres/gpu=600,cpu=6000,billing=9000,mem=3000000,node=100
// MaxTRESMinsPerJob=gres/gpu=240,cpu=2400,billing=3000,mem=1200000
// MaxTRESRunMinsPU=gres/gpu=300,billing=4000,mem=2000000
// MaxTRESRunMinsPA=gres/gpu=360
// on QOS normal; MaxTRESPerJob=gres/gpu=4,node=2 MaxTRESPerNode=cpu=24
// MaxWall=90 GrpTRES=gres/gpu=5,cpu=40,mem=300G,billing=30,node=2,energy=5
// GrpTRESRunMins=gres/gpu=500,billing=5000,mem=2500000
// MaxTRESMinsPerJob=gres/gpu=200,node=50
// GrpJobs=4 MaxJobs=3 on user root's association;
// MaxTRESPerJob=node=2 GrpTRES=gres/gpu=9 GrpTRESRunMins=cpu=9000 MaxJobs=6
// on account root's; and MinTRESPerJob=gres/gpu=2,node=1,cpu=4,mem=8G,billing=3
// on QOS guaranteed.
func TestLimits(t *testing.T) {
	f, srv := newFakeRestd(t, Version38)
	c := newTestCluster(t, srv.URL, nil)
	f.overrides["/slurmdb/v0.0.38/qos"] = testdata(t, "22.05/dbv0.0.38-qos.json")
	f.overrides["/slurmdb/v0.0.38/associations"] = testdata(t, "22.05/dbv0.0.38-associations.json")
	got, err := c.Limits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{
		QOS: map[string]QOS{
			"normal": {Name: "normal", PerJob: JobLimits{GPUs: 4, Nodes: 2, CPUs: 64, MemMB: 200 << 10, GPUsPerNode: 3, Wall: 120 * time.Minute,
				GPUMins: 240, CPUMins: 2400, MemMins: 1200000, Billing: 50, BillingMins: 3000, BillingPerNode: 20},
				Grp: GroupLimits{GPUs: 12, CPUs: 96, MemMB: 1 << 20, GPURunMins: 600, CPURunMins: 6000, Billing: 80, BillingRunMins: 9000,
					MemRunMins: 3000000, NodeRunMins: 100, Nodes: 3, Jobs: 5},
				PerUser: GroupLimits{GPUs: 6, CPUs: 48, MemMB: 400 << 10, GPURunMins: 300, Billing: 40, BillingRunMins: 4000, MemRunMins: 2000000,
					Nodes: 2, Jobs: 2},
				PerAccount: GroupLimits{GPUs: 7, GPURunMins: 360, Jobs: 3},
				// What rubick does not plan with: a file system's TRES.
				Unread: []string{"MaxTRESPerJob=fs/disk=1000"}},
			"guaranteed": {Name: "guaranteed", Min: JobMins{GPUs: 2, Nodes: 1, CPUs: 4, MemMB: 8 << 10},
				Unread: []string{"MinTRESPerJob=billing=3"}},
		},
		Associations: []Association{
			{Cluster: "rubicklab", Account: "root", PerJob: JobLimits{Nodes: 2}, Grp: GroupLimits{GPUs: 9, CPURunMins: 9000}, MaxJobs: 6,
				BudgetListed: true},
			// slurmdbd lists the per-job limits (and MaxJobs) a child
			// inherits on the child too, not the group limits it counts
			// against.
			{Cluster: "rubicklab", Account: "root", User: "nobody", PerJob: JobLimits{Nodes: 2}, MaxJobs: 6, BudgetListed: true},
			{Cluster: "rubicklab", Account: "root", User: "root", PerJob: JobLimits{GPUs: 4, Nodes: 2, CPUsPerNode: 24, Wall: 90 * time.Minute,
				GPUMins: 200, NodeMins: 50},
				Grp: GroupLimits{GPUs: 5, CPUs: 40, MemMB: 300 << 10, GPURunMins: 500, Billing: 30, BillingRunMins: 5000, MemRunMins: 2500000,
					Nodes: 2, Jobs: 4},
				MaxJobs: 3, BudgetListed: true, Unread: []string{"GrpTRES=energy=5"}},
		},
		Partitions: map[string]Partition{"gpu": {Name: "gpu", State: "UP", Nodes: []string{"node1", "node2", "node3", "node4"},
			TotalCPUs: 256, TotalNodes: 4, PriorityJobFactor: 1, PriorityTier: 1, TRES: "cpu=256,mem=2000G,node=4,billing=256,gres/gpu=32"}},
	}
	if d := cmp.Diff(want.Indexed(), got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	wantUnread := []string{"QOS guaranteed MinTRESPerJob=billing=3", "QOS normal MaxTRESPerJob=fs/disk=1000", "association root/root GrpTRES=energy=5"}
	if d := cmp.Diff(wantUnread, got.Unread()); d != "" {
		t.Errorf("unread (-want +got):\n%s", d)
	}

	f.overrides["/slurmdb/v0.0.38/qos"] = `{"errors":[{"error_code":7000,"error":"Unable to connect to database"}],"QOS":[]}`
	if _, err := c.Limits(context.Background()); err == nil || !strings.Contains(err.Error(), "Unable to connect to database") {
		t.Errorf("Limits with slurmdbd down: %v, want its error", err)
	}

	// A 24.11 slurmrestd without the database plugin answers 404 there:
	// the partitions' limits alone.
	_, srv41 := newFakeRestd(t, Version41)
	l41, err := newTestCluster(t, srv41.URL, nil).Limits(context.Background())
	if err != nil || l41.QOS != nil || l41.Associations != nil || len(l41.Partitions) != 1 {
		t.Errorf("Limits over v0.0.41 without /slurmdb: %+v, %v; want the partitions alone", l41, err)
	}
	// With it (the 24.11 chroot lab with WITH_DBD=1, the same limits set).
	f41, srv41 := newFakeRestd(t, Version41)
	f41.overrides["/slurmdb/v0.0.41/qos"] = testdata(t, "24.11/dbv0.0.41-qos.json")
	f41.overrides["/slurmdb/v0.0.41/associations"] = testdata(t, "24.11/dbv0.0.41-associations.json")
	l41, err = newTestCluster(t, srv41.URL, nil).Limits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want41 := want
	want41.Partitions = l41.Partitions
	want41.Associations = slices.Clone(want.Associations)
	for i := range want41.Associations {
		want41.Associations[i].Cluster = "rubicklab2411"
	}
	if d := cmp.Diff(want41.Indexed(), l41); d != "" {
		t.Errorf("24.11 (-want +got):\n%s", d)
	}

	// MaxTRESPerNode=mem=4G, shaped as the recorded per-node gres/gpu
	// and per-job mem entries; and Flags=OverPartQOS, and
	// Flags=PartitionMinNodes,PartitionMaxNodes,PartitionTimeLimit, as
	// both labs list them.
	f.overrides["/slurmdb/v0.0.38/qos"] = `{"errors":[],"QOS":[{"name":"narrow","flags":["OVERRIDE_PARTITION_QOS"],"limits":{"max":{"tres":{"per":{"node":[{"type":"mem","name":null,"id":2,"count":4096}]}}}}},` +
		`{"name":"long","flags":["PARTITION_MINIMUM_NODE","PARTITION_MAXIMUM_NODE","PARTITION_TIME_LIMIT"]}]}`
	if got, err := c.Limits(context.Background()); err != nil || got.QOS["narrow"].PerJob != (JobLimits{MemMBPerNode: 4096}) || !got.QOS["narrow"].OverPartQOS ||
		got.QOS["narrow"].OverPartTime || got.QOS["narrow"].OverPartNodes || !got.QOS["long"].OverPartTime || !got.QOS["long"].OverPartNodes || !got.QOS["long"].OverPartMinNodes || got.QOS["long"].OverPartQOS ||
		got.QOS["narrow"].OverPartMinNodes {
		t.Errorf("per-node memory: %+v, %+v, %v; want MemMBPerNode 4096 and OverPartQOS, and PartitionTimeLimit, PartitionMaxNodes and PartitionMinNodes on long alone", got.QOS["narrow"], got.QOS["long"], err)
	}

	// MaxNodes, MaxTime, MaxCPUsPerNode and MaxMemPerNode as the 22.05
	// lab reports them (scontrol update PartitionName=gpu MaxNodes=2
	// MaxTime=60; -1 or null when unlimited) and as 24.11 writes a limit
	// (its unlimited MaxMemPerNode is a set 0, as recorded); QOS=gpupart
	// and TRESBillingWeights=CPU=0.5,Mem=0.25G,GRES/gpu=2.0 as both labs
	// report them; MinNodes=2, which 24.11 lists under minimums.nodes and
	// 22.05 under "min nodes per job" (never the spec's min_nodes_per_job).
	f.overrides["/slurm/v0.0.38/partitions"] = `{"errors":[],"partitions":[{"name":"gpu","nodes":"node[1-4]","maximum_nodes_per_job":2,"min nodes per job":2,"max_time_limit":60,"maximum_cpus_per_node":16,"maximum_memory_per_node":65536,"qos":"gpupart","billing_weights":"CPU=0.5,Mem=0.25G,GRES\/gpu=2.0"},{"name":"debug","qos":"","nodes":"node[1-4]","maximum_nodes_per_job":-1,"max_time_limit":-1,"maximum_cpus_per_node":-1,"maximum_memory_per_node":null}]}`
	f41, srv41 = newFakeRestd(t, Version41)
	f41.overrides["/slurm/v0.0.41/partitions/"] = `{"errors":[],"warnings":[],"partitions":[{"name":"gpu","maximums":{"nodes":{"set":true,"infinite":false,"number":2},"time":{"set":true,"infinite":false,"number":60},"cpus_per_node":{"set":true,"infinite":false,"number":16},"partition_memory_per_node":{"set":true,"infinite":false,"number":65536}},"minimums":{"nodes":2},"qos":{"allowed":"","deny":"","assigned":"gpupart"},"tres":{"billing_weights":"CPU=0.5,Mem=0.25G,GRES/gpu=2.0","configured":"cpu=256,mem=2000G,node=4,billing=256,gres/gpu=32"}},{"name":"debug","maximums":{"nodes":{"set":false,"infinite":true,"number":0},"time":{"set":false,"infinite":true,"number":0},"cpus_per_node":{"set":false,"infinite":true,"number":0},"partition_memory_per_node":{"set":true,"infinite":false,"number":0}}}]}`
	for v, c := range map[string]*RESTCluster{"22.05": c, "24.11": newTestCluster(t, srv41.URL, nil)} {
		parts, err := c.Partitions(context.Background())
		if err != nil || len(parts) != 2 || parts[0].MaxNodesPerJob != 2 || parts[1].MaxNodesPerJob != 0 || parts[0].MinNodesPerJob != 2 || parts[1].MinNodesPerJob != 0 ||
			parts[0].MaxTime != time.Hour || parts[1].MaxTime != 0 || parts[0].MaxCPUsPerNode != 16 || parts[1].MaxCPUsPerNode != 0 ||
			parts[0].MaxMemPerNodeMB != 65536 || parts[1].MaxMemPerNodeMB != 0 || parts[0].QOS != "gpupart" || parts[1].QOS != "" ||
			!cmp.Equal(parts[0].Billing, BillingWeights{CPU: 0.5, GPU: 2, MemMB: 0.25 / 1024, Set: true}) || !cmp.Equal(parts[1].Billing, BillingWeights{}) {
			t.Errorf("%s: partitions %+v, %v; want MaxNodes 2 and unlimited, MinNodes 2 and none, MaxTime 1 h and unlimited, MaxCPUsPerNode 16 and unlimited, MaxMemPerNode 65536 and unlimited, QOS gpupart and none, billing weights and none",
				v, parts, err)
		}
	}

	// Weights that do not parse cost the partition its billing, not the
	// listing.
	f.overrides["/slurm/v0.0.38/partitions"] = `{"errors":[],"partitions":[{"name":"gpu","nodes":"node[1-4]","maximum_nodes_per_job":2,"billing_weights":"CPU=x"}]}`
	f41.overrides["/slurm/v0.0.41/partitions/"] = `{"errors":[],"warnings":[],"partitions":[{"name":"gpu","maximums":{"nodes":{"set":true,"infinite":false,"number":2}},"tres":{"billing_weights":"CPU=x"}}]}`
	for v, c := range map[string]*RESTCluster{"22.05": c, "24.11": newTestCluster(t, srv41.URL, nil)} {
		parts, err := c.Partitions(context.Background())
		if err != nil || len(parts) != 1 || parts[0].MaxNodesPerJob != 2 || parts[0].Billing.Set ||
			!strings.Contains(parts[0].Billing.Unread, `weight "x" of cpu`) {
			t.Errorf("%s: partitions %+v, %v; want gpu, MaxNodes 2, its billing weights unread", v, parts, err)
		}
	}
}

// MaxMemPerCPU is read off every version as slurmrestd lists it: 22.05's
// maximum_memory_per_cpu (null when unset), v0.0.41's and v0.0.42's
// maximums.partition_memory_per_cpu (not set when unset), beside their
// raw maximums.memory_per_cpu, which carries Slurm's per-CPU flag (the top
// bit) and does not fit the spec's int64. Slurm keeps it and MaxMemPerNode
// in one setting, so the other is unset.
func TestPartitionMaxMemPerCPU(t *testing.T) {
	unset41 := `{"set":false,"infinite":false,"number":0}`
	for _, v := range []string{Version38, Version41, Version42} {
		t.Run(v, func(t *testing.T) {
			f, srv := newFakeRestd(t, v)
			if v == Version38 {
				f.overrides["/slurm/v0.0.38/partitions"] = `{"errors":[],"partitions":[{"name":"gpu","nodes":"node[1-4]","maximum_memory_per_cpu":4096,"maximum_memory_per_node":null},` +
					`{"name":"debug","nodes":"node[1-4]","maximum_memory_per_cpu":null,"maximum_memory_per_node":65536}]}`
			} else {
				f.overrides["/slurm/"+v+"/partitions/"] = `{"errors":[],"warnings":[],"partitions":[` +
					`{"name":"gpu","maximums":{"memory_per_cpu":9223372036854779904,"partition_memory_per_cpu":{"set":true,"infinite":false,"number":4096},"partition_memory_per_node":` + unset41 + `}},` +
					`{"name":"debug","maximums":{"memory_per_cpu":65536,"partition_memory_per_cpu":` + unset41 + `,"partition_memory_per_node":{"set":true,"infinite":false,"number":65536}}}]}`
			}
			c := newTestCluster(t, srv.URL, func(c *Config) { c.Version = v })
			parts, err := c.Partitions(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			type mem struct{ PerCPU, PerNode int64 }
			got := map[string]mem{}
			for _, p := range parts {
				got[p.Name] = mem{p.MaxMemPerCPUMB, p.MaxMemPerNodeMB}
			}
			if diff := cmp.Diff(map[string]mem{"gpu": {PerCPU: 4096}, "debug": {PerNode: 65536}}, got); diff != "" {
				t.Errorf("MaxMemPerCPU, MaxMemPerNode (-want +got):\n%s", diff)
			}
		})
	}
}

// The limits listing asks slurmdbd for Config.Cluster's associations
// alone (a slurmdbd may serve several clusters), and for every cluster's
// without it; the QOS are not per cluster.
func TestLimitsClusterFilter(t *testing.T) {
	for _, v := range []string{Version38, Version41, Version42} {
		for cluster, want := range map[string]string{"": "associations", "lab": "associations?cluster=lab"} {
			t.Run(v+"/"+cluster, func(t *testing.T) {
				f, srv := newFakeRestd(t, v)
				db := "/slurmdb/" + v + "/"
				f.overrides[db+"qos"] = `{"errors":[],"qos":[]}`
				f.overrides[db+"associations"] = `{"errors":[],"associations":[]}`
				c := newTestCluster(t, srv.URL, func(c *Config) { c.Cluster = cluster; c.Version = v })
				if _, err := c.Limits(context.Background()); err != nil {
					t.Fatal(err)
				}
				f.mu.Lock()
				defer f.mu.Unlock()
				var got []string
				for _, r := range f.requests {
					if strings.HasPrefix(r, "GET "+db) {
						got = append(got, strings.TrimPrefix(r, "GET "+db))
					}
				}
				slices.Sort(got) // read at once, in any order
				if diff := cmp.Diff([]string{want, "qos"}, got); diff != "" {
					t.Errorf("slurmdbd requests (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// 22.05 answers a cluster filter that matches no association with an
// error (recorded: HTTP 500, error 9003 "Nothing found with query"); the
// cluster has none. The same error without a filter still fails the
// listing.
func TestLimitsClusterWithoutAssociations(t *testing.T) {
	for cluster, wantErr := range map[string]bool{"nosuch": false, "": true} {
		f, srv := newFakeRestd(t, Version38)
		f.overrides["/slurmdb/v0.0.38/qos"] = testdata(t, "22.05/dbv0.0.38-qos.json")
		f.overrides["/slurmdb/v0.0.38/associations"] = testdata(t, "22.05/dbv0.0.38-associations-nothing-found.json")
		l, err := newTestCluster(t, srv.URL, func(c *Config) { c.Cluster = cluster }).Limits(context.Background())
		if (err != nil) != wantErr || err == nil && (len(l.Associations) != 0 || l.QOS == nil) {
			t.Errorf("cluster %q: limits %+v, error %v; want error %v", cluster, l, err, wantErr)
		}
	}
}

// jobsServed is what Jobs makes of body, served at path by a fake
// slurmrestd of version.
func jobsServed(t *testing.T, version, path, body string) []Job {
	t.Helper()
	f, srv := newFakeRestd(t, version)
	f.overrides[path] = body
	jobs, _, err := newTestCluster(t, srv.URL, nil).Jobs(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// TestReservations reads the labs' reservation lists: on 22.05 r1 (node4,
// active) and later (node3, an hour ahead); on 24.11 r1 (node2).
func TestReservations(t *testing.T) {
	tests := map[string]struct {
		version string
		want    []Reservation
	}{
		"22.05": {Version38, []Reservation{
			{Name: "r1", Nodes: []string{"node4"}, Start: ts(1795538892), End: ts(1795540692), Flags: []string{"SPEC_NODES"}},
			{Name: "later", Nodes: []string{"node3"}, Start: ts(1795542492), End: ts(1795544292), Flags: []string{"SPEC_NODES"}},
		}},
		"24.11": {Version41, []Reservation{
			{Name: "r1", Nodes: []string{"node2"}, Start: ts(1795538897), End: ts(1795540697), Flags: []string{"SPEC_NODES"}},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, srv := newFakeRestd(t, tc.version)
			got, err := newTestCluster(t, srv.URL, nil).Reservations(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
	r := Reservation{Start: ts(100), End: ts(200)}
	for at, want := range map[int64]bool{99: false, 100: true, 199: true, 200: false} {
		if got := r.Active(ts(at)); got != want {
			t.Errorf("Active at %d = %v, want %v", at, got, want)
		}
	}
}

// Limits on one GPU type, shaped as the 22.05 lab lists them once
// AccountingStorageTRES tracks the type (GrpTRES=gres/gpu:h100=4
// MaxTRESPerNode=gres/gpu:a100=2 on QOS normal, read back): read into
// QOS.Typed and Association.Typed and applied to the jobs that ask for the
// type; a file system's limit is named as unread. 24.11's v0.0.41
// and v0.0.42 list the same entries (the 24.11 lab with the types added
// to AccountingStorageTRES and the same QOS limits set, read back).
func TestTypedGPULimits(t *testing.T) {
	for _, v := range []struct {
		version   string
		path, key string
	}{{Version38, "v0.0.38", "QOS"}, {Version41, "v0.0.41", "qos"}} {
		t.Run(v.path, func(t *testing.T) { typedGPULimits(t, v.version, v.path, v.key) })
	}
}

func typedGPULimits(t *testing.T, version, path, key string) {
	f, srv := newFakeRestd(t, version)
	c := newTestCluster(t, srv.URL, nil)
	f.overrides["/slurmdb/"+path+"/qos"] = `{"errors":[],"` + key + `":[{"name":"normal","limits":{"max":{"tres":{` +
		`"total":[{"type":"gres","name":"gpu:h100","id":1003,"count":4},{"type":"gres","name":"gpu","id":1001,"count":12},` +
		`{"type":"fs","name":"disk","id":6,"count":1000}],` +
		`"minutes":{"per":{"qos":[{"type":"gres","name":"gpu:h100","id":1003,"count":100}],"job":[{"type":"gres","name":"gpu:h100","id":1003,"count":60}],` +
		`"account":[{"type":"gres","name":"gpu:a100","id":1002,"count":500}],"user":[]}},` +
		`"per":{"account":[],"job":[{"type":"gres","name":"gpu:h100","id":1003,"count":3}],` +
		`"node":[{"type":"gres","name":"gpu:a100","id":1002,"count":2}],"user":[{"type":"gres","name":"gpu:h100","id":1003,"count":6}]}}}}}]}`
	f.overrides["/slurmdb/"+path+"/associations"] = `{"errors":[],"associations":[{"cluster":"lab","account":"root","user":"",` +
		`"max":{"tres":{"total":[{"type":"gres","name":"gpu:a100","id":1002,"count":16}],"group":{"active":[{"type":"gres","name":"gpu:h100","id":1003,"count":900}],` +
		`"minutes":[{"type":"gres","name":"gpu:h100","id":1003,"count":5000}]}}}}]}`
	l, err := c.Limits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	q := l.QOS["normal"]
	wantTyped := TypedGPUs{Grp: map[string]int{"h100": 4}, PerJob: map[string]int{"h100": 3}, PerNode: map[string]int{"a100": 2},
		PerUser: map[string]int{"h100": 6}, GrpRunMins: map[string]int{"h100": 100}, PerJobMins: map[string]int{"h100": 60},
		PerAccountRunMins: map[string]int{"a100": 500}}
	if d := cmp.Diff(wantTyped, q.Typed); d != "" {
		t.Errorf("QOS normal typed (-want +got):\n%s", d)
	}
	if d := cmp.Diff(GroupLimits{GPUs: 12}, q.Grp); d != "" {
		t.Errorf("QOS normal GrpTRES (-want +got):\n%s", d)
	}
	if d := cmp.Diff(TypedGPUs{Grp: map[string]int{"a100": 16}, GrpRunMins: map[string]int{"h100": 900}, Budget: map[string]int{"h100": 5000}},
		l.Associations[0].Typed); d != "" {
		t.Errorf("association root typed (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"QOS normal GrpTRES=fs/disk=1000"}, l.Unread()); d != "" {
		t.Errorf("unread (-want +got):\n%s", d)
	}
	job := func(types ...string) Job {
		return Job{Cluster: "lab", Account: "root", User: "ann", QOS: "normal", GPUTypes: types}
	}
	for _, tc := range []struct {
		job  Job
		want JobLimits
	}{
		{job("h100"), JobLimits{GPUs: 3, GPUMins: 60}},
		{job("a100"), JobLimits{GPUsPerNode: 2}},
		{job(), JobLimits{}},
		{job("a100", "h100"), JobLimits{}},
	} {
		if d := cmp.Diff(tc.want, l.PerJob(tc.job, "gpu")); d != "" {
			t.Errorf("PerJob of a job asking for %v (-want +got):\n%s", tc.job.GPUTypes, d)
		}
	}
	// Every job counts against the typed groups; only those asking for
	// the type are held to them.
	wantGroups := []Group{
		{Limit: "QOS normal GrpTRES", GroupLimits: GroupLimits{GPUs: 12}},
		{Limit: "QOS normal GrpTRES gres/gpu:h100", GroupLimits: GroupLimits{GPUs: 4, GPURunMins: 100}, GPUType: "h100"},
		{Limit: "QOS normal MaxTRESPerUser (user ann) gres/gpu:h100", GroupLimits: GroupLimits{GPUs: 6}, GPUType: "h100"},
		{Limit: "QOS normal MaxTRESPerAccount (account root) gres/gpu:a100", GroupLimits: GroupLimits{GPURunMins: 500}, GPUType: "a100"},
		{Limit: "association root GrpTRES gres/gpu:a100", GroupLimits: GroupLimits{GPUs: 16}, GPUType: "a100"},
		{Limit: "association root GrpTRES gres/gpu:h100", GroupLimits: GroupLimits{GPURunMins: 900}, GPUType: "h100"},
	}
	groups := l.Groups(job(), "gpu")
	if d := cmp.Diff(wantGroups, groups); d != "" {
		t.Errorf("groups (-want +got):\n%s", d)
	}
	for _, g := range groups {
		if binds, want := g.Binds(job("h100")), g.GPUType != "a100"; binds != want {
			t.Errorf("%s binds an h100 job: %v, want %v", g.Limit, binds, want)
		}
		if g.Binds(job()) != (g.GPUType == "") {
			t.Errorf("%s binds a job of any type: %v", g.Limit, g.Binds(job()))
		}
	}
}

// --deadline as both labs list it (a job with --deadline=now+20minutes,
// one without), read into Job.Deadline.
func TestDeadline(t *testing.T) {
	want := map[int]time.Time{7: time.Unix(1795843641, 0).UTC(), 8: {}}
	for v, tc := range map[string]struct{ path, body string }{
		Version38: {"/slurm/v0.0.38/jobs", `{"errors":[],"jobs":[{"job_id":7,"job_state":"PENDING","deadline":1795843641},{"job_id":8,"job_state":"PENDING","deadline":0}]}`},
		Version41: {"/slurm/v0.0.41/jobs/", `{"errors":[],"jobs":[{"job_id":7,"job_state":["PENDING"],"deadline":{"set":true,"infinite":false,"number":1795843641}},` +
			`{"job_id":8,"job_state":["PENDING"],"deadline":{"set":true,"infinite":false,"number":0}}]}`},
	} {
		f, srv := newFakeRestd(t, v)
		c := newTestCluster(t, srv.URL, nil)
		f.overrides[tc.path] = tc.body
		jobs, _, err := c.Jobs(context.Background(), time.Time{})
		if err != nil || len(jobs) != 2 {
			t.Fatalf("%s: got %+v, %v", v, jobs, err)
		}
		for _, j := range jobs {
			if !j.Deadline.Equal(want[j.ID]) {
				t.Errorf("%s: job %d deadline %v, want %v", v, j.ID, j.Deadline, want[j.ID])
			}
		}
	}
}

// --cpus-per-gpu=4 with --gres=gpu:2, pending, as both labs list it:
// 22.05 gives cpus 1, 24.11 8; both read as 8 CPUs, 4 per GPU.
func TestCPUsPerGPU(t *testing.T) {
	for v, tc := range map[string]struct{ path, body string }{
		Version38: {"/slurm/v0.0.38/jobs", `{"errors":[],"jobs":[{"job_id":7,"job_state":"PENDING","node_count":1,"cpus":1,"cpus_per_task":null,` +
			`"cpus_per_tres":"gres:gpu:4","tres_per_node":"gres:gpu:2","tres_req_str":"cpu=1,mem=4000M,node=1,billing=1,gres\/gpu=2"}]}`},
		Version41: {"/slurm/v0.0.41/jobs/", `{"errors":[],"jobs":[{"job_id":7,"job_state":["PENDING"],"node_count":{"set":true,"infinite":false,"number":1},` +
			`"cpus":{"set":true,"infinite":false,"number":8},"cpus_per_task":{"set":true,"infinite":false,"number":1},"cpus_per_tres":"gres/gpu:4",` +
			`"tres_per_node":"gres/gpu:2","tres_req_str":"cpu=8,mem=32000M,node=1,billing=8,gres/gpu=2"}]}`},
	} {
		f, srv := newFakeRestd(t, v)
		c := newTestCluster(t, srv.URL, nil)
		f.overrides[tc.path] = tc.body
		jobs, _, err := c.Jobs(context.Background(), time.Time{})
		if err != nil || len(jobs) != 1 || jobs[0].CPUs != 8 || jobs[0].CPUsPerGPU != 4 || jobs[0].GPUsPerNode != 2 {
			t.Errorf("%s: got %+v, %v; want 8 CPUs, 4 per GPU, 2 GPUs", v, jobs, err)
		}
	}
}

// countingHandler counts the records logged at one message.
type countingHandler struct {
	mu   *sync.Mutex
	msgs map[string]int
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs[r.Message]++
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// A job's malformed tag is logged when it is first seen, not at every poll
// (a busy queue changes every cycle, and every change lists all jobs
// again), and again once the job has left the listing and come back.
func TestMalformedTagLoggedOnce(t *testing.T) {
	f, srv := newFakeRestd(t, Version38)
	h := countingHandler{mu: &sync.Mutex{}, msgs: map[string]int{}}
	c := newTestCluster(t, srv.URL, func(cfg *Config) { cfg.Logger = slog.New(h) })
	ctx := context.Background()
	const msg = "malformed rubick tag in AdminComment"
	warned := func() int { h.mu.Lock(); defer h.mu.Unlock(); return h.msgs[msg] }
	for range 3 {
		if _, _, err := c.Jobs(ctx, time.Time{}); err != nil {
			t.Fatalf("Jobs: %v", err)
		}
	}
	if _, err := c.Job(ctx, 31); err != nil {
		t.Fatalf("Job(31): %v", err)
	}
	// Jobs 31 and 33 carry the lab's old free-form tags.
	if got := warned(); got != 2 {
		t.Fatalf("after three polls: %d warnings, want 2 (one per job)", got)
	}

	// A listing without job 31 forgets it; its return is logged again.
	var list struct {
		Jobs []map[string]any `json:"jobs"`
	}
	raw := testdata(t, "22.05/v0.0.38-jobs.json")
	if err := json.Unmarshal([]byte(raw), &list); err != nil {
		t.Fatal(err)
	}
	all := list.Jobs
	list.Jobs = slices.DeleteFunc(slices.Clone(all), func(j map[string]any) bool { return j["job_id"] == float64(31) })
	without, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.overrides["/slurm/v0.0.38/jobs"] = string(without)
	f.mu.Unlock()
	if _, _, err := c.Jobs(ctx, time.Time{}); err != nil {
		t.Fatalf("Jobs without 31: %v", err)
	}
	if got := warned(); got != 2 {
		t.Fatalf("after the listing without job 31: %d warnings, want still 2", got)
	}
	f.mu.Lock()
	delete(f.overrides, "/slurm/v0.0.38/jobs")
	f.mu.Unlock()
	if _, _, err := c.Jobs(ctx, time.Time{}); err != nil {
		t.Fatalf("Jobs: %v", err)
	}
	if got := warned(); got != 3 {
		t.Fatalf("after job 31 came back: %d warnings, want 3", got)
	}
}

// --time-min is read in every version: 22.05 gives minutes, 24.11 a
// number object, as it gives time_limit (both read off the labs).
func TestTimeMinRead(t *testing.T) {
	for _, v := range []string{Version38, Version41, Version42} {
		t.Run(v, func(t *testing.T) {
			f, srv := newFakeRestd(t, v)
			var list map[string]any
			if err := json.Unmarshal([]byte(testdata(t, strings.TrimPrefix(f.dir, "testdata/")+"/"+v+"-jobs.json")), &list); err != nil {
				t.Fatal(err)
			}
			jobs := list["jobs"].([]any)
			first := jobs[0].(map[string]any)
			var set any = 45
			if v != Version38 {
				set = map[string]any{"set": true, "infinite": false, "number": 45}
			}
			first["time_minimum"] = set
			body, err := json.Marshal(list)
			if err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			f.overrides[jobsPath(v)] = string(body)
			f.mu.Unlock()
			c := newTestCluster(t, srv.URL, func(cfg *Config) { cfg.Version = v })
			got, _, err := c.Jobs(context.Background(), time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			id := int(first["job_id"].(float64))
			for _, j := range got {
				want := time.Duration(0)
				if j.ID == id {
					want = 45 * time.Minute
				}
				if j.TimeMin != want {
					t.Errorf("job %d TimeMin = %v, want %v", j.ID, j.TimeMin, want)
				}
			}
		})
	}
}

// jobsPath is where version v lists jobs: 24.11's client asks "jobs/".
func jobsPath(v string) string {
	if v == Version38 {
		return "/slurm/" + v + "/jobs"
	}
	return "/slurm/" + v + "/jobs/"
}

// zeroVersion is how one API version lists a limit set to 0 and an unset
// one, in slurmdbd's QOS listing under key.
type zeroVersion struct {
	version        string
	path, key      string
	zero, infinite string
}

// zeroVersions are the versions the zero-limit tests read listings of.
func zeroVersions() []zeroVersion {
	return []zeroVersion{
		{Version38, "v0.0.38", "QOS", "0", "null"},
		{Version41, "v0.0.41", "qos", `{"set":true,"infinite":false,"number":0}`, `{"set":false,"infinite":true,"number":0}`},
	}
}

// zeroOf has slurmdbd list qos and assocs (the entries of its QOS and
// association listings) on v, and returns Limits.Zero of each job of the
// lab cluster in partition gpu, each a group limit or, wantPerJob, a
// per-job one.
func zeroOf(t *testing.T, v zeroVersion, qos, assocs string, jobs map[string]Job, wantPerJob bool) map[string]string {
	t.Helper()
	f, srv := newFakeRestd(t, v.version)
	c := newTestCluster(t, srv.URL, nil)
	f.overrides["/slurmdb/"+v.path+"/qos"] = `{"errors":[],"` + v.key + `":[` + qos + `]}`
	f.overrides["/slurmdb/"+v.path+"/associations"] = `{"errors":[],"associations":[` + assocs + `]}`
	l, err := c.Limits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for jname, j := range jobs {
		j.Cluster = "lab"
		name, perJob := l.Zero(j, "gpu")
		if name != "" && perJob != wantPerJob {
			t.Errorf("job %+v: Zero %q reads as per-job %v, want %v", j, name, perJob, wantPerJob)
		}
		got[jname] = name
	}
	return got
}

// A group limit set to 0 (sacctmgr's way of stopping an account's jobs)
// is read as one that Slurm starts no job under, not as no limit, on both
// versions; as listed, with an unset one (null) and a TRES rubick does not
// plan with beside it.
func TestZeroLimits(t *testing.T) {
	for _, v := range zeroVersions() {
		t.Run(v.path, func(t *testing.T) {
			gpu0 := `{"type":"gres","name":"gpu","id":1001,"count":0}`
			qos := `{"name":"normal","limits":{"max":{"active_jobs":{"count":` + v.infinite + `},"tres":{"total":[{"type":"fs","name":"disk","id":6,"count":0}]}}}},` +
				`{"name":"frozen","limits":{"max":{"active_jobs":{"count":` + v.zero + `}}}},` +
				`{"name":"peruser","limits":{"max":{"jobs":{"active_jobs":{"per":{"user":` + v.zero + `,"account":` + v.infinite + `}}}}}},` +
				`{"name":"nogpu","limits":{"max":{"tres":{"total":[` + gpu0 + `]}}}},` +
				`{"name":"noh100","limits":{"max":{"tres":{"per":{"user":[{"type":"gres","name":"gpu:h100","id":1003,"count":0}]}}}}},` +
				`{"name":"nomins","limits":{"max":{"tres":{"minutes":{"per":{"qos":[{"type":"cpu","name":null,"id":1,"count":0}]}}}}}}`
			assocs := `{"cluster":"lab","account":"root","user":"","max":{"jobs":{"active":` + v.infinite + `,"per":{"count":` + v.infinite + `}}}},` +
				`{"cluster":"lab","account":"phys","user":"","parent_account":"root","max":{"jobs":{"per":{"count":` + v.zero + `}}}},` +
				`{"cluster":"lab","account":"bio","user":"","parent_account":"root","max":{"jobs":{"active":` + v.zero + `}}},` +
				`{"cluster":"lab","account":"bio","user":"eve","max":{"jobs":{"active":` + v.zero + `}}},` +
				`{"cluster":"lab","account":"chem","user":"","parent_account":"root","max":{"tres":{"total":[` + gpu0 + `]}}}`
			jobs := map[string]Job{
				"none":          {QOS: "normal", Account: "root", User: "ann"},
				"QOS GrpJobs":   {QOS: "frozen", Account: "root", User: "ann"},
				"MaxJobsPU":     {QOS: "peruser", Account: "root", User: "ann"},
				"QOS GrpTRES":   {QOS: "nogpu", Account: "root", User: "ann"},
				"h100":          {QOS: "noh100", Account: "root", User: "ann", GPUTypes: []string{"h100"}},
				"a100":          {QOS: "noh100", Account: "root", User: "ann", GPUTypes: []string{"a100"}},
				"run-minutes":   {QOS: "nomins", Account: "root", User: "ann"},
				"parent":        {QOS: "normal", Account: "phys", User: "ann"},
				"own MaxJobs":   {QOS: "normal", Account: "bio", User: "eve"},
				"account TRES":  {QOS: "normal", Account: "chem", User: "ann"},
				"no such assoc": {QOS: "normal", Account: "bio", User: "carl"},
			}
			want := map[string]string{
				"none":          "",
				"QOS GrpJobs":   "QOS frozen GrpJobs=0",
				"MaxJobsPU":     "QOS peruser MaxJobsPerUser=0",
				"QOS GrpTRES":   "QOS nogpu GrpTRES=gres/gpu=0",
				"h100":          "QOS noh100 MaxTRESPerUser=gres/gpu:h100=0",
				"a100":          "",
				"run-minutes":   "QOS nomins GrpTRESRunMins=cpu=0",
				"parent":        "association phys GrpJobs=0",
				"own MaxJobs":   "association bio/eve MaxJobs=0",
				"account TRES":  "association chem GrpTRES=gres/gpu=0",
				"no such assoc": "association bio MaxJobs=0",
			}
			if d := cmp.Diff(want, zeroOf(t, v, qos, assocs, jobs, false)); d != "" {
				t.Errorf("Zero (-want +got):\n%s", d)
			}
		})
	}
}

// A partition's MaxNodes=0 or MaxTime=0 is read as a limit that Slurm
// starts no job under (PartitionNodeLimit, PartitionTimeLimit: it holds a
// job whose node count or time limit is above the partition's, and
// unlimited is -1 or infinite), not as no limit, on both versions;
// unless the job's QOS has the PartitionMaxNodes or PartitionTimeLimit
// flag, which lets its jobs past the partition's limit.
func TestZeroPartitionLimits(t *testing.T) {
	for _, v := range zeroVersions() {
		t.Run(v.path, func(t *testing.T) {
			f, srv := newFakeRestd(t, v.version)
			c := newTestCluster(t, srv.URL, nil)
			if v.version == Version38 {
				part := func(name, nodes, time string) string {
					return `{"name":"` + name + `","nodes":"node[1-4]","maximum_nodes_per_job":` + nodes + `,"max_time_limit":` + time + `}`
				}
				f.overrides["/slurm/v0.0.38/partitions"] = `{"errors":[],"partitions":[` + part("open", "-1", "-1") + `,` + part("nonodes", "0", "-1") + `,` +
					part("notime", "-1", "0") + `,` + part("short", "2", "60") + `,` + `{"name":"unlisted","nodes":"node[1-4]"}]}`
			} else {
				part := func(name, nodes, time string) string {
					return `{"name":"` + name + `","maximums":{"nodes":` + nodes + `,"time":` + time + `}}`
				}
				two, hour := `{"set":true,"infinite":false,"number":2}`, `{"set":true,"infinite":false,"number":60}`
				f.overrides["/slurm/v0.0.41/partitions/"] = `{"errors":[],"warnings":[],"partitions":[` + part("open", v.infinite, v.infinite) + `,` +
					part("nonodes", v.zero, v.infinite) + `,` + part("notime", v.infinite, v.zero) + `,` + part("short", two, hour) + `,` +
					`{"name":"unlisted","maximums":{"nodes":{"set":false,"infinite":false,"number":0}}}]}`
			}
			f.overrides["/slurmdb/"+v.path+"/qos"] = `{"errors":[],"` + v.key + `":[{"name":"normal"},` +
				`{"name":"wide","flags":["PARTITION_MAXIMUM_NODE"]},{"name":"long","flags":["PARTITION_TIME_LIMIT"]}]}`
			f.overrides["/slurmdb/"+v.path+"/associations"] = `{"errors":[],"associations":[]}`
			l, err := c.Limits(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			type run struct{ qos, partition string }
			got := map[run]string{}
			for _, r := range []run{{"normal", "open"}, {"normal", "short"}, {"normal", "unlisted"}, {"normal", "nonodes"}, {"normal", "notime"},
				{"wide", "nonodes"}, {"wide", "notime"}, {"long", "nonodes"}, {"long", "notime"}} {
				name, perJob := l.Zero(Job{QOS: r.qos, Cluster: "lab"}, r.partition)
				if name != "" && !perJob {
					t.Errorf("%+v: Zero %q reads as a group limit, want a per-job one", r, name)
				}
				got[r] = name
			}
			want := map[run]string{
				{"normal", "open"}: "", {"normal", "short"}: "", {"normal", "unlisted"}: "",
				{"normal", "nonodes"}: "partition nonodes MaxNodes=0", {"normal", "notime"}: "partition notime MaxTime=0",
				{"wide", "nonodes"}: "", {"wide", "notime"}: "partition notime MaxTime=0",
				{"long", "nonodes"}: "partition nonodes MaxNodes=0", {"long", "notime"}: "",
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("Zero (-want +got):\n%s", d)
			}
		})
	}
}

// A job's malformed hostlist is read as no nodes, named in NodesErr, and
// logged once, not at every poll; the job is still listed, its other lists
// read.
func TestMalformedHostlistLogged(t *testing.T) {
	for v, tc := range map[string]struct{ path, body string }{
		Version38: {"/slurm/v0.0.38/jobs", `{"jobs":[{"job_id":7,"name":"x","job_state":"PENDING","nodes":"","required_nodes":"gpu[01-","excluded_nodes":"n[1-2]"},` +
			`{"job_id":8,"name":"y","job_state":"RUNNING","nodes":"n[3-4]"}],"errors":[]}`},
		Version41: {"/slurm/v0.0.41/jobs/", `{"jobs":[{"job_id":7,"name":"x","job_state":["PENDING"],"nodes":"","required_nodes":"gpu[01-","excluded_nodes":"n[1-2]"},` +
			`{"job_id":8,"name":"y","job_state":["RUNNING"],"nodes":"n[3-4]"}],"errors":[]}`},
	} {
		t.Run(v, func(t *testing.T) {
			f, srv := newFakeRestd(t, v)
			h := countingHandler{mu: &sync.Mutex{}, msgs: map[string]int{}}
			c := newTestCluster(t, srv.URL, func(cfg *Config) { cfg.Logger = slog.New(h) })
			f.overrides[tc.path] = tc.body
			type lists struct {
				ID                                int
				NodeList, Excluded, RequiredNodes []string
				Err                               string
			}
			want := []lists{
				{ID: 7, Excluded: []string{"n1", "n2"}, Err: `required_nodes: invalid hostlist: unbalanced '[' in "gpu[01-" (in "gpu[01-")`},
				{ID: 8, NodeList: []string{"n3", "n4"}},
			}
			for range 3 {
				jobs, _, err := c.Jobs(context.Background(), time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				var got []lists
				for _, j := range jobs {
					l := lists{ID: j.ID, NodeList: j.NodeList, Excluded: j.Excluded, RequiredNodes: j.RequiredNodes}
					if j.NodesErr != nil {
						l.Err = j.NodesErr.Error()
						if !errors.Is(j.NodesErr, ErrHostlist) {
							t.Errorf("job %d: NodesErr %v does not wrap ErrHostlist", j.ID, j.NodesErr)
						}
					}
					got = append(got, l)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("jobs (-want +got):\n%s", diff)
				}
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if n := h.msgs["malformed hostlist in a job, read as no nodes"]; n != 1 {
				t.Errorf("%d warnings over three polls, want 1", n)
			}
		})
	}
}

// A per-job limit set to 0 (MaxTRESPerJob=gres/gpu=0, MaxTRESPerNode,
// MaxTRESMinsPerJob, MaxWall=0) is read as one that Slurm starts no job
// under, not as no limit, on both versions, unless a QOS or a nearer
// association sets the same bound ahead of it: Slurm holds a job to the
// first that sets one.
func TestZeroPerJobLimits(t *testing.T) {
	for _, v := range zeroVersions() {
		t.Run(v.path, func(t *testing.T) {
			gpu0 := `{"type":"gres","name":"gpu","id":1001,"count":0}`
			gpu8 := `{"type":"gres","name":"gpu","id":1001,"count":8}`
			qos := `{"name":"normal","limits":{"max":{"wall_clock":{"per":{"job":` + v.infinite + `}},"tres":{"per":{"job":[{"type":"fs","name":"disk","id":6,"count":0}],"node":[{"type":"node","name":null,"id":4,"count":0}]}}}}},` +
				`{"name":"nojobgpu","limits":{"max":{"tres":{"per":{"job":[` + gpu0 + `]}}}}},` +
				`{"name":"nonodecpu","limits":{"max":{"tres":{"per":{"node":[{"type":"cpu","name":null,"id":1,"count":0}]}}}}},` +
				`{"name":"nogpumins","limits":{"max":{"tres":{"minutes":{"per":{"job":[` + gpu0 + `]}}}}}},` +
				`{"name":"nowall","limits":{"max":{"wall_clock":{"per":{"job":` + v.zero + `}}}}},` +
				`{"name":"noh100","limits":{"max":{"tres":{"per":{"job":[{"type":"gres","name":"gpu:h100","id":1003,"count":0}]}}}}},` +
				`{"name":"wide","limits":{"max":{"tres":{"per":{"job":[` + gpu8 + `]}}}}}`
			assocs := `{"cluster":"lab","account":"root","user":""},` +
				`{"cluster":"lab","account":"chem","user":"","parent_account":"root","max":{"tres":{"per":{"job":[` + gpu0 + `]}}}},` +
				`{"cluster":"lab","account":"chem","user":"bo","max":{"tres":{"per":{"job":[` + gpu8 + `]}}}},` +
				`{"cluster":"lab","account":"geo","user":"","parent_account":"root","max":{"jobs":{"per":{"wall_clock":` + v.zero + `}}}}`
			jobs := map[string]Job{
				"none":               {QOS: "normal", Account: "root", User: "ann"},
				"QOS MaxTRESPerJob":  {QOS: "nojobgpu", Account: "root", User: "ann"},
				"QOS MaxTRESPerNode": {QOS: "nonodecpu", Account: "root", User: "ann"},
				"QOS MaxTRESMins":    {QOS: "nogpumins", Account: "root", User: "ann"},
				"QOS MaxWall":        {QOS: "nowall", Account: "root", User: "ann"},
				"h100":               {QOS: "noh100", Account: "root", User: "ann", GPUTypes: []string{"h100"}},
				"a100":               {QOS: "noh100", Account: "root", User: "ann", GPUTypes: []string{"a100"}},
				"account":            {QOS: "normal", Account: "chem", User: "ann"},
				"QOS sets it ahead":  {QOS: "wide", Account: "chem", User: "ann"},
				"user sets it ahead": {QOS: "normal", Account: "chem", User: "bo"},
				"account MaxWall":    {QOS: "normal", Account: "geo", User: "ann"},
			}
			want := map[string]string{
				"none":               "",
				"QOS MaxTRESPerJob":  "QOS nojobgpu MaxTRESPerJob=gres/gpu=0",
				"QOS MaxTRESPerNode": "QOS nonodecpu MaxTRESPerNode=cpu=0",
				"QOS MaxTRESMins":    "QOS nogpumins MaxTRESMinsPerJob=gres/gpu=0",
				"QOS MaxWall":        "QOS nowall MaxWall=0",
				"h100":               "QOS noh100 MaxTRESPerJob=gres/gpu:h100=0",
				"a100":               "",
				"account":            "association chem MaxTRESPerJob=gres/gpu=0",
				"QOS sets it ahead":  "",
				"user sets it ahead": "",
				"account MaxWall":    "association geo MaxWall=0",
			}
			if d := cmp.Diff(want, zeroOf(t, v, qos, assocs, jobs, true)); d != "" {
				t.Errorf("Zero (-want +got):\n%s", d)
			}
		})
	}
}
