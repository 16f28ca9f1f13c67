package slurm

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock advances only when slept on.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	return nil
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// fakeRestd serves recorded slurmrestd responses from testdata, with the
// authentication behaviour of the real one (22.05 lab).
type fakeRestd struct {
	t       *testing.T
	version string // Version38, Version41 or Version42
	dir     string
	user    string

	mu         sync.Mutex
	token      string
	lastUpdate int64 // jobs?update_time >= this gives 304
	requests   []string
	delay      time.Duration
	overrides  map[string]string // path -> body
}

func newFakeRestd(t *testing.T, version string) (*fakeRestd, *httptest.Server) {
	t.Helper()
	switch version {
	case Version38:
		return newFakeRestdDir(t, version, "testdata/22.05")
	case Version42:
		return newFakeRestdDir(t, version, "testdata/24.11-v42")
	}
	return newFakeRestdDir(t, version, "testdata/24.11")
}

// newFakeRestdDir serves version's answers recorded in dir.
func newFakeRestdDir(t *testing.T, version, dir string) (*fakeRestd, *httptest.Server) {
	t.Helper()
	f := &fakeRestd{t: t, version: version, dir: dir, user: "root", token: "good-token", overrides: map[string]string{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeRestd) setToken(tok string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.token = tok
}

func (f *fakeRestd) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

const badTokenBody = `{"meta":{},"errors":[{"error_code":1007,"error":"Unspecified error","source":"slurm_load_jobs"}]}`

func (f *fakeRestd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
	token, lastUpdate, delay := f.token, f.lastUpdate, f.delay
	override, hasOverride := f.overrides[r.URL.Path]
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if r.Header.Get("X-SLURM-USER-NAME") == "" || r.Header.Get("X-SLURM-USER-TOKEN") == "" {
		http.Error(w, "Authentication does not apply to request", http.StatusUnauthorized)
		return
	}
	if r.Header.Get("X-SLURM-USER-NAME") != f.user || r.Header.Get("X-SLURM-USER-TOKEN") != token {
		// 22.05 answers a bad JWT with 500 "Unspecified error", not 401
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, badTokenBody)
		return
	}
	path := r.URL.Path
	if hasOverride {
		fmt.Fprint(w, override)
		return
	}
	v := strings.TrimPrefix(f.version, "v")
	prefix := "/slurm/" + f.version + "/"
	if !strings.HasPrefix(path, prefix) {
		http.Error(w, "Unable to find path", http.StatusNotFound)
		return
	}
	name := strings.Trim(strings.TrimPrefix(path, prefix), "/")
	switch {
	case name == "jobs" && r.Method == http.MethodGet:
		if ut := r.URL.Query().Get("update_time"); ut != "" {
			if f.version == Version38 {
				// 22.05: seconds; 304 with an empty body when unchanged.
				n, _ := strconv.ParseInt(ut, 10, 64)
				if lastUpdate > 0 && n >= lastUpdate {
					w.WriteHeader(http.StatusNotModified)
					return
				}
				break
			}
			// 24.11 (checked on the chroot lab): "uts<seconds>"; a bare
			// number is refused with 422, and an unchanged list is a 200
			// with no jobs and last_update 0.
			n, err := strconv.ParseInt(strings.TrimPrefix(ut, "uts"), 10, 64)
			if !strings.HasPrefix(ut, "uts") || err != nil {
				w.WriteHeader(http.StatusUnprocessableEntity)
				fmt.Fprintf(w, `{"jobs":[],"errors":[{"description":"Parsing of %s for timestamp failed","error_number":9202,"error":"Unable to convert Data type","source":"#/update_time/"}]}`, ut)
				return
			}
			if lastUpdate > 0 && n >= lastUpdate {
				fmt.Fprint(w, `{"jobs":[],"last_backfill":{"set":true,"infinite":false,"number":0},"last_update":{"set":true,"infinite":false,"number":0},"meta":{},"errors":[],"warnings":[]}`)
				return
			}
		}
	case strings.HasPrefix(name, "job/") && r.Method == http.MethodGet:
		id := strings.TrimPrefix(name, "job/")
		name = "job-" + id
	case name == "job/submit" && r.Method == http.MethodPost:
		name = "submit-response"
	}
	body, err := os.ReadFile(filepath.Join(f.dir, "v"+v+"-"+name+".json"))
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"errors":[{"error_code":2017,"error":"Invalid job id specified"}]}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

// fakeRunner records argv and fails the calls listed in failAt (1-based).
type fakeRunner struct {
	mu     sync.Mutex
	calls  [][]string
	failAt map[int]string // call number -> stderr
	onRun  func(argv []string)
	out    []byte // every successful call's stdout
}

func (r *fakeRunner) Run(ctx context.Context, argv []string) ([]byte, error) {
	r.mu.Lock()
	r.calls = append(r.calls, append([]string(nil), argv...))
	n := len(r.calls)
	stderr, fail := r.failAt[n]
	hook := r.onRun
	r.mu.Unlock()
	if hook != nil {
		hook(argv)
	}
	if fail {
		return nil, &CommandError{Argv: argv, ExitCode: 1, Stderr: stderr, Err: fmt.Errorf("exit status 1")}
	}
	return r.out, nil
}

func (r *fakeRunner) Calls() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]string(nil), r.calls...)
}

// fakeCluster returns scripted job states: each Job call takes the next
// state of that job; the last one repeats.
type fakeCluster struct {
	mu    sync.Mutex
	jobs  map[int][]Job
	reads int
	err   error
}

func (c *fakeCluster) Job(ctx context.Context, id int) (Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	if c.err != nil {
		return Job{}, c.err
	}
	seq, ok := c.jobs[id]
	if !ok || len(seq) == 0 {
		return Job{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	j := seq[0]
	if len(seq) > 1 {
		c.jobs[id] = seq[1:]
	}
	return j, nil
}

func (c *fakeCluster) Ping(context.Context) error { return nil }
func (c *fakeCluster) Jobs(context.Context, time.Time) ([]Job, bool, error) {
	return nil, false, nil
}
func (c *fakeCluster) Nodes(context.Context) ([]Node, error)           { return nil, nil }
func (c *fakeCluster) Partitions(context.Context) ([]Partition, error) { return nil, nil }
func (c *fakeCluster) Submit(context.Context, SubmitRequest) (int, error) {
	return 0, fmt.Errorf("not supported")
}

// testdata reads testdata/name, failing the test when it cannot.
func testdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
