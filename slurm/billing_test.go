package slurm

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseBillingWeights(t *testing.T) {
	tests := []struct {
		in      string
		want    BillingWeights
		wantErr string
	}{
		{in: "", want: BillingWeights{}},
		{in: "CPU=0.5,Mem=0.25G,GRES/gpu=2.0", want: BillingWeights{CPU: 0.5, GPU: 2, MemMB: 0.25 / 1024, Set: true}},
		{in: "cpu=2,gres/GPU=1", want: BillingWeights{CPU: 2, GPU: 1, Set: true}},
		{in: "Mem=0.001", want: BillingWeights{MemMB: 0.001, Set: true}},
		{in: "Mem=2K,Node=3", want: BillingWeights{MemMB: 2, Node: 3, Set: true}},
		{in: "Mem=1T", want: BillingWeights{MemMB: 1.0 / (1024 * 1024), Set: true}},
		{in: "CPU=1,GRES/gpu=2,GRES/gpu:a100=5", want: BillingWeights{CPU: 1, GPU: 2, Typed: map[string]float64{"a100": 5}, Set: true}},
		// Weights of TRES rubick does not allocate bill nothing it does.
		{in: "license/matlab=4", want: BillingWeights{Set: true}},
		{in: "CPU=abc", wantErr: `weight "abc" of cpu`},
		{in: "CPU=-1", wantErr: `weight "-1" of cpu`},
		{in: "CPU", wantErr: `entry "CPU" is not TRES=weight`},
	}
	for _, tc := range tests {
		got, err := ParseBillingWeights(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseBillingWeights(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseBillingWeights(%q): %v", tc.in, err)
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("ParseBillingWeights(%q) (-want +got):\n%s", tc.in, d)
		}
	}
}

// TestBillingOf checks the bills read off the 22.05 lab (scontrol show
// job's TRES, with the partition's weights set as named).
func TestBillingOf(t *testing.T) {
	tests := []struct {
		weights           string
		gpus, cpus, nodes int
		memMB             int64
		want              int64
	}{
		{"", 8, 32, 1, 64 << 10, 32}, // no weights: CPUs
		{"CPU=0.5,Mem=0.25G,GRES/gpu=2.0", 2, 3, 1, 10 << 10, 8},
		{"CPU=0.5,Mem=0.25G,GRES/gpu=2.0", 2, 3, 1, 1 << 10, 5}, // 5.75, rounded down
		{"CPU=0.5,Mem=0.25G,GRES/gpu=2.0", 1, 1, 1, 1000, 2},
		{"CPU=0.5,Mem=0.25G,GRES/gpu=2.0", 2, 2, 2, 2 << 10, 5},
		{"Mem=0.001", 2, 2, 1, 10 << 10, 10},
		{"Mem=2K,Node=3", 2, 2, 1, 10 << 10, 20483},
		{"cpu=2,gres/GPU=1", 2, 2, 1, 10 << 10, 6},
		{"Mem=1T", 2, 2, 1, 10 << 10, 0},
		// A GPU of a type bills its type's weight too; not knowing which,
		// the highest.
		{"CPU=1,GRES/gpu=1,GRES/gpu:h100=3,GRES/gpu:a100=10", 2, 4, 1, 1 << 10, 26},
	}
	for _, tc := range tests {
		w, err := ParseBillingWeights(tc.weights)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.Of(tc.gpus, tc.cpus, tc.nodes, tc.memMB); got != tc.want {
			t.Errorf("%q: %d GPUs, %d CPUs, %d nodes, %d MiB bill %d, want %d", tc.weights, tc.gpus, tc.cpus, tc.nodes, tc.memMB, got, tc.want)
		}
	}
}

// Typed GPU weights resolved for the types a job may run on bill as the
// 22.05 lab did (CPU=1,GRES/gpu=1,GRES/gpu:h100=3,GRES/gpu:a100=10; 4 CPUs
// and 2 GPUs): 12 on h100, 26 on a100, and the highest of the types given.
func TestBillingForTypes(t *testing.T) {
	w, err := ParseBillingWeights("CPU=1,GRES/gpu=1,GRES/gpu:h100=3,GRES/gpu:a100=10")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		types []string
		want  int64
		str   string
	}{
		{[]string{"h100"}, 12, "TRESBillingWeights=CPU=1,GRES/gpu=1,GRES/gpu:h100=3"},
		{[]string{"A100"}, 26, "TRESBillingWeights=CPU=1,GRES/gpu=1,GRES/gpu:a100=10"},
		{[]string{"h100", "a100"}, 26, "TRESBillingWeights=CPU=1,GRES/gpu=1,GRES/gpu:a100=10"},
		{[]string{"v100"}, 6, "TRESBillingWeights=CPU=1,GRES/gpu=1"},
		{nil, 26, "TRESBillingWeights=CPU=1,GRES/gpu=1,GRES/gpu:a100=10"},
	}
	for _, tc := range tests {
		r := w.ForTypes(tc.types)
		if got := r.Of(2, 4, 1, 1<<10); got != tc.want || r.String() != tc.str {
			t.Errorf("for %v: bill %d, %s; want %d, %s", tc.types, got, r, tc.want, tc.str)
		}
	}
	if got, want := w.String(), "TRESBillingWeights=CPU=1,GRES/gpu=1,GRES/gpu:a100=10,GRES/gpu:h100=3"; got != want {
		t.Errorf("unresolved: %s, want %s", got, want)
	}
}
