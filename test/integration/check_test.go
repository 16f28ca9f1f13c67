//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRubickdCheck runs rubickd --check against the lab, which is set up
// as the admin guide says: every check passes, with no warning but for the
// token, which the lab makes for 7 days and which is 3 days from expiring
// in a lab up for 4, and for its GPUs of two types (a100 and h100), which
// the model prices alike. A managed partition the cluster lacks fails it.
func TestRubickdCheck(t *testing.T) {
	l := needLab(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "rubickd")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/rubickd").CombinedOutput(); err != nil {
		t.Fatalf("go build rubickd: %v\n%s", err, out)
	}
	check := func(partitions string, extra ...string) (string, error) {
		cfg := filepath.Join(dir, "rubickd.yaml")
		yaml := fmt.Sprintf("slurmrestd:\n  url: %s\n  user: %s\n  token_file: %s\npartitions: [%s]\nstore: %s\n",
			l.restURL, l.restUser, os.Getenv("SLURMRESTD_TOKEN_FILE"), partitions, filepath.Join(dir, "rubick.db")) + strings.Join(extra, "")
		if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "--config", cfg, "--check").Output()
		return string(out), err
	}
	out, err := check(l.partition)
	if err != nil {
		t.Fatalf("rubickd --check: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, line := range lines {
		if !strings.HasPrefix(line, "ok ") && !strings.HasPrefix(line, "warn  slurmrestd.token_file") && !strings.HasPrefix(line, "warn  GPU types") {
			t.Errorf("not ok: %s", line)
		}
	}
	for _, want := range []string{"slurmrestd.token_file", "partition " + l.partition, "limits", "commands.scontrol", "JobSubmitPlugins", "AccountingStorageTRES",
		"a100: 16 GPUs on 2 nodes, h100: 16 GPUs on 2 nodes: rubick prices every GPU alike"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s line in:\n%s", want, out)
		}
	}
	out, err = check(l.partition + ", nosuch")
	if err == nil || !strings.Contains(out, "FAIL  partition nosuch") {
		t.Errorf("with a partition the lab lacks: %v\n%s", err, out)
	}
	// The lab runs priority/basic, which computes no fair-share factor.
	out, err = check(l.partition, "policy:\n  best_effort_order: fairshare\n")
	if err == nil || !strings.Contains(out, "FAIL  PriorityType") || !strings.Contains(out, "priority/basic computes no fair-share factor") {
		t.Errorf("fair-share order on priority/basic: %v\n%s", err, out)
	}
}
