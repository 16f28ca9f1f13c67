package slurm

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseCtldConfigRecorded(t *testing.T) {
	for dir, version := range map[string]string{"22.05": "22.05.8", "24.11": "24.11.5"} {
		raw, err := os.ReadFile("testdata/" + dir + "/scontrol-show-config.txt")
		if err != nil {
			t.Fatal(err)
		}
		c := ParseCtldConfig(raw)
		got := map[string]string{}
		for _, k := range []string{"SLURM_VERSION", "SelectType", "JobSubmitPlugins", "GresTypes", "PrologFlags"} {
			got[k] = c[k]
		}
		want := map[string]string{"SLURM_VERSION": version, "SelectType": "select/cons_tres", "JobSubmitPlugins": "lua",
			"GresTypes": "gpu", "PrologFlags": "(null)"}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", dir, d)
		}
		if _, ok := c["Configuration data as of 2026-11-25T04:50:55"]; ok {
			t.Errorf("%s: the header line was read as a key", dir)
		}
		if !c.Has("AccountingStorageTRES", "gres/gpu") || c.Has("AccountingStorageTRES", "gres/gp") || !c.Has("SelectTypeParameters", "cr_core_memory") {
			t.Errorf("%s: Has: AccountingStorageTRES %q, SelectTypeParameters %q", dir, c["AccountingStorageTRES"], c["SelectTypeParameters"])
		}
		if v, ok := c.Param("SchedulerParameters", "sched_interval"); !ok || v != "5" {
			t.Errorf("%s: sched_interval %q %v, want 5", dir, v, ok)
		}
		if v, ok := c.Param("AuthInfo", "cred_expire"); !ok || v != "10" {
			t.Errorf("%s: cred_expire %q %v, want 10", dir, v, ok)
		}
		if _, ok := c.Param("SchedulerParameters", "bf_max_job_test"); ok {
			t.Errorf("%s: a parameter that is not set was found", dir)
		}
	}
}

func TestShowConfig(t *testing.T) {
	r := &scriptedRunner{out: []byte("Configuration data as of now\nSelectType              = select/cons_tres\n")}
	c, err := ShowConfig(context.Background(), r, "/usr/bin/scontrol")
	if err != nil || c["SelectType"] != "select/cons_tres" {
		t.Fatalf("ShowConfig = %v, %v", c, err)
	}
	if d := cmp.Diff([]string{"/usr/bin/scontrol", "show", "config"}, r.argv); d != "" {
		t.Errorf("argv (-want +got):\n%s", d)
	}
	r.out = []byte("slurm_load_ctl_conf error: Unable to contact slurm controller\n")
	if _, err := ShowConfig(context.Background(), r, "scontrol"); err == nil {
		t.Error("output without settings: no error")
	}
	r.err = errors.New("exit status 1")
	if _, err := ShowConfig(context.Background(), r, "scontrol"); err == nil {
		t.Error("failing scontrol: no error")
	}
}

type scriptedRunner struct {
	out  []byte
	err  error
	argv []string
}

func (r *scriptedRunner) Run(_ context.Context, argv []string) ([]byte, error) {
	r.argv = argv
	return r.out, r.err
}
