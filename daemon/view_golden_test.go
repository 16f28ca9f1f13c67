package daemon

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/policy"
	"github.com/rubick-sched/rubick/slurm"
)

// TestBuildViewFromRealResponses builds the policy snapshot from what real
// Slurm 22.05 and 24.11 answered (slurm/testdata, captured from the lab):
// node capacity left to rubick is what jobs it does not manage leave, and
// jobs with malformed or legacy tags are reported, not scheduled.
func TestBuildViewFromRealResponses(t *testing.T) {
	tests := map[string]struct {
		dir, version string
		wantNodes    []policy.Node
		wantIgnored  []int
	}{
		"22.05": {
			dir: "22.05", version: slurm.Version38,
			// node1 runs job 31 (4 GPUs, 8 CPUs, 64 GiB); node2-3 job 32.
			wantNodes: []policy.Node{
				{Name: "node1", GPUs: 4, CPUs: 56, MemGB: 436},
				{Name: "node2", GPUs: 0, CPUs: 48, MemGB: 437.5},
				{Name: "node3", GPUs: 0, CPUs: 48, MemGB: 437.5},
				{Name: "node4", GPUs: 8, CPUs: 64, MemGB: 500},
			},
			// 31: "rubick:plan=dp4,gpus=4" and 33: "rubick:pending-decision" are malformed tags.
			wantIgnored: []int{31, 33},
		},
		"24.11": {
			dir: "24.11", version: slurm.Version41,
			wantNodes: []policy.Node{
				{Name: "node1", GPUs: 7, CPUs: 63, MemGB: 500 - 4000.0/1024},
				{Name: "node2", GPUs: 0, CPUs: 48, MemGB: 437.5},
				{Name: "node3", GPUs: 0, CPUs: 48, MemGB: 437.5},
				{Name: "node4", GPUs: 8, CPUs: 64, MemGB: 500},
			},
			// 2 runs "model_type=llama", a model type rubick has no fit for.
			wantIgnored: []int{2},
		},
		"24.11 v0.0.42": {
			dir: "24.11-v42", version: slurm.Version42,
			// job 2 runs 8 GPUs, 8 CPUs and 32 GiB on node1 and node2,
			// job 5 3 GPUs, 1 CPU and 24 GiB on node3.
			wantNodes: []policy.Node{
				{Name: "node1", GPUs: 0, CPUs: 56, MemGB: 468},
				{Name: "node2", GPUs: 0, CPUs: 56, MemGB: 468},
				{Name: "node3", GPUs: 5, CPUs: 63, MemGB: 476},
				{Name: "node4", GPUs: 8, CPUs: 64, MemGB: 500},
			},
			// 4 is tagged for bert, which this test gives no fit.
			wantIgnored: []int{4},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "slurm", "testdata", tc.dir)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var file string
				switch {
				case strings.Contains(r.URL.Path, "/jobs"):
					file = "jobs"
				case strings.Contains(r.URL.Path, "/nodes"):
					file = "nodes"
				case strings.Contains(r.URL.Path, "/ping"):
					file = "ping"
				default:
					http.NotFound(w, r)
					return
				}
				b, err := os.ReadFile(filepath.Join(dir, tc.version+"-"+file+".json"))
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.Write(b)
			}))
			defer srv.Close()
			ctx := context.Background()
			c, err := slurm.NewCluster(ctx, slurm.Config{URL: srv.URL, Version: tc.version, Token: "t", User: "root"})
			if err != nil {
				t.Fatal(err)
			}
			jobs, _, err := c.Jobs(ctx, t0.Add(-1))
			if err != nil {
				t.Fatal(err)
			}
			nodes, err := c.Nodes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			est := func(string) (policy.Estimator, bool) { return nil, false }
			v, err := BuildView(Defaults(), t0, Inputs{Nodes: nodes, Jobs: jobs, Estimators: est}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantNodes, v.Snapshot.Nodes); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantIgnored, sortedIDs(v.Unmanaged)); diff != "" {
				t.Errorf("ignored jobs (-want +got):\n%s\n%v", diff, v.Unmanaged)
			}
		})
	}
}
