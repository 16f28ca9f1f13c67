//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubick-sched/rubick/slurm"
)

// lab describes the running lab, as read from $LAB/env.sh's variables.
type lab struct {
	dir       string // $LAB
	out       string // job output directory, writable by every user
	restURL   string
	restUser  string
	token     string
	partition string
	nodes     int
	gpus      int
}

var (
	labOnce sync.Once
	theLab  *lab
	labErr  string
)

// needLab returns the lab or skips the test with the reason it is missing.
func needLab(t *testing.T) *lab {
	t.Helper()
	labOnce.Do(func() { theLab, labErr = detectLab() })
	if theLab == nil {
		t.Skipf("SKIP: Slurm lab not available: %s (root: `make lab-up`; then `. /tmp/rubick-lab/env.sh`)", labErr)
	}
	return theLab
}

// needScheduler skips the test unless it runs as root: job_submit.lua lets
// only the scheduler's uids (root in the lab) release a held tagged job.
func needScheduler(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: releasing a held rubick job needs root (SCHEDULER_UIDS in job_submit.lua)")
	}
}

func detectLab() (*lab, string) {
	for _, v := range []string{"LAB", "SLURM_CONF", "SLURMRESTD_URL", "SLURMRESTD_TOKEN_FILE"} {
		if os.Getenv(v) == "" {
			return nil, v + " is not set"
		}
	}
	l := &lab{
		dir:       os.Getenv("LAB"),
		restURL:   strings.TrimRight(os.Getenv("SLURMRESTD_URL"), "/"),
		restUser:  envOr("SLURMRESTD_USER", "root"),
		partition: envOr("LAB_PARTITION", "gpu"),
	}
	l.out = filepath.Join(l.dir, "out")
	var err error
	if l.nodes, err = strconv.Atoi(envOr("LAB_NODES", "4")); err != nil {
		return nil, "LAB_NODES: " + err.Error()
	}
	if l.gpus, err = strconv.Atoi(envOr("LAB_GPUS_PER_NODE", "8")); err != nil {
		return nil, "LAB_GPUS_PER_NODE: " + err.Error()
	}
	b, err := os.ReadFile(os.Getenv("SLURMRESTD_TOKEN_FILE"))
	if err != nil {
		return nil, "token: " + err.Error()
	}
	l.token = strings.TrimSpace(string(b))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "scontrol", "ping").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "UP") {
		return nil, fmt.Sprintf("scontrol ping: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return l, ""
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// result is the outcome of one command.
type result struct {
	stdout, stderr string
	err            error
}

// command runs argv with a timeout. Slurm clients must use munge: a
// SLURM_JWT in their environment would make them authenticate as the token's
// user, and srun inside the submitted jobs would fail.
func command(asUser string, argv ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if asUser != "" {
		argv = append([]string{"setpriv", "--reuid=" + asUser, "--regid=nogroup", "--clear-groups"}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SLURM_JWT=") })
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return result{stdout.String(), stderr.String(), err}
}

// run runs argv as the current user and fails the test on error.
func run(t *testing.T, argv ...string) string {
	t.Helper()
	r := command("", argv...)
	if r.err != nil {
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", strings.Join(argv, " "), r.err, r.stdout, r.stderr)
	}
	return r.stdout
}

// sbatch submits a job in the lab's output directory and returns its id; the
// job is cancelled when the test ends.
func (l *lab) sbatch(t *testing.T, args ...string) string {
	t.Helper()
	argv := append([]string{"sbatch", "--parsable", "-D", l.out, "-o", filepath.Join(l.out, "it-%j.out"),
		"--job-name", "it-" + t.Name()}, args...)
	id, _, _ := strings.Cut(strings.TrimSpace(run(t, argv...)), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, want a job id", id)
	}
	t.Cleanup(func() { command("", "scancel", id) })
	return id
}

// showJob returns `scontrol show job -d` output of job id.
func showJob(t *testing.T, id string) string {
	t.Helper()
	return run(t, "scontrol", "show", "job", "-d", id)
}

var lineValueKeys = map[string]bool{"AdminComment": true, "Comment": true}

// field extracts Key=Value from scontrol's output. AdminComment and Comment
// take the rest of their line, because their values contain blanks.
func field(out, key string) string {
	if lineValueKeys[key] {
		m := regexp.MustCompile(`(?m)^\s*` + key + `=(.*)$`).FindStringSubmatch(out)
		if m == nil {
			return ""
		}
		return strings.TrimSpace(m[1])
	}
	m := regexp.MustCompile(`(?:^|\s)` + regexp.QuoteMeta(key) + `=(\S*)`).FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	return m[1]
}

// waitFor polls cond every 200 ms until it returns true or the timeout ends.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	waitForOr(t, timeout, what, cond, nil)
}

// waitForOr is waitFor that adds explain's text to the timeout's failure.
func waitForOr(t *testing.T, timeout time.Duration, what string, cond func() bool, explain func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			if explain != nil {
				what += "; " + explain()
			}
			t.Fatalf("timeout (%v) waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// jobState is the job's state as squeue prints it; "" once it has left the queue.
func jobState(id string) string {
	r := command("", "squeue", "-h", "-j", id, "-o", "%T")
	return strings.TrimSpace(r.stdout)
}

func waitState(t *testing.T, id, state string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "job "+id+" "+state, func() bool { return jobState(id) == state })
}

// idleNodes returns n nodes of the lab partition that run nothing, waiting up
// to 30 s for them, so that tests do not depend on which nodes earlier
// tests left busy.
func (l *lab) idleNodes(t *testing.T, n int) []string {
	t.Helper()
	var nodes []string
	waitForOr(t, 30*time.Second, fmt.Sprintf("%d idle nodes", n), func() bool {
		r := command("", "sinfo", "-h", "-N", "-r", "-p", l.partition, "-t", "idle", "-o", "%N")
		nodes = slices.Compact(slices.Sorted(slices.Values(strings.Fields(r.stdout))))
		return len(nodes) >= n
	}, func() string {
		// Name what holds the nodes: usually jobs a killed earlier run
		// left in the lab's state (make lab-fresh clears it).
		q := command("", "squeue", "-h", "-o", "%i %T %j %N")
		return fmt.Sprintf("idle: %v; the queue:\n%s", nodes, q.stdout)
	})
	return nodes[:n]
}

// cluster is rubick's slurmrestd client of the lab, with the lab's token.
func (l *lab) cluster(ctx context.Context, t *testing.T) *slurm.RESTCluster {
	t.Helper()
	c, err := slurm.NewCluster(ctx, slurm.Config{URL: l.restURL, User: l.restUser, TokenFile: os.Getenv("SLURMRESTD_TOKEN_FILE")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rest calls slurmrestd with the lab's JWT and decodes a JSON answer into v
// (when not nil). It returns the HTTP status.
func (l *lab) rest(t *testing.T, method, path string, body any, v any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, l.restURL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-SLURM-USER-NAME", l.restUser)
	req.Header.Set("X-SLURM-USER-TOKEN", l.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	if v != nil && len(b) > 0 {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s %s: HTTP %d, decoding %.300q: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// restJob is the part of a slurmrestd v0.0.38 job record the tests read.
type restJob struct {
	JobID        int      `json:"job_id"`
	JobState     string   `json:"job_state"`
	Priority     int64    `json:"priority"`
	AdminComment string   `json:"admin_comment"`
	Comment      string   `json:"comment"`
	Nodes        string   `json:"nodes"`
	NodeCount    int      `json:"node_count"`
	BatchHost    string   `json:"batch_host"`
	GresDetail   []string `json:"gres_detail"`
	Requeue      bool     `json:"requeue"`
}

type restError struct {
	ErrorCode int    `json:"error_code"`
	Error     string `json:"error"`
}

// restGetJob reads job id through slurmrestd v0.0.38 (Slurm 22.05).
func (l *lab) restGetJob(t *testing.T, id string) restJob {
	t.Helper()
	var resp struct {
		Jobs   []restJob   `json:"jobs"`
		Errors []restError `json:"errors"`
	}
	if code := l.rest(t, http.MethodGet, "/slurm/v0.0.38/job/"+id, nil, &resp); code != http.StatusOK {
		t.Fatalf("GET job %s: HTTP %d %+v", id, code, resp.Errors)
	}
	if len(resp.Jobs) != 1 {
		t.Fatalf("GET job %s: %d jobs, want 1", id, len(resp.Jobs))
	}
	return resp.Jobs[0]
}
