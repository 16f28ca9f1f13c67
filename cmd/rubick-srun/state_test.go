package main

import (
	"bytes"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/slurm"
)

// files lists the files under root with their contents, by path relative
// to root.
func files(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		out[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeFiles writes files (path relative to root: contents) under root.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestJobIdentity(t *testing.T) {
	for name, tc := range map[string]struct {
		tag  *slurm.Tag
		want string
	}{
		"no tag":          {},
		"legacy tag":      {tag: &slurm.Tag{ModelType: "gpt2"}},
		"older rubickd":   {tag: &slurm.Tag{ModelType: "gpt2", Extra: map[string]string{"profile": "1"}}},
		"submission time": {tag: &slurm.Tag{Extra: map[string]string{slurm.TagSubmit: "1700000100"}}, want: "sub=1700000100"},
		"malformed":       {tag: &slurm.Tag{Extra: map[string]string{slurm.TagSubmit: "yesterday"}}},
		"zero":            {tag: &slurm.Tag{Extra: map[string]string{slurm.TagSubmit: "0"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := jobIdentity(tc.tag, slog.New(slog.DiscardHandler)); got != tc.want {
				t.Errorf("jobIdentity = %q, want %q", got, tc.want)
			}
		})
	}
}

// ownStateDir moves aside the records of a state directory that names
// another job than this one, and nothing else; a dry run moves nothing.
func TestOwnStateDir(t *testing.T) {
	const ident = "sub=1700000200"
	earlier := map[string]string{"42/job": "sub=1700000100\n", "42/profile.json": `{"complete": true}`, "42/refused-plan": "dp2.tp1.pp1.mb8.a1.z0\n",
		"42/profile/run-01/ds_config.json": "{}", "42/ds_config.json": "{}", "42/train.log": "mine"}
	moved := func(to string) map[string]string {
		out := map[string]string{}
		for k, v := range earlier {
			if k != "42/ds_config.json" && k != "42/train.log" {
				k = strings.Replace(k, "42/", "42/"+to+"/", 1)
			}
			out[k] = v
		}
		return out
	}
	for name, tc := range map[string]struct {
		ident  string
		dryRun bool
		before map[string]string // under the directory that holds the state directory, 42
		after  map[string]string // nil: as before
		logged string
	}{
		"no directory": {ident: ident},
		"older rubick-srun's": {ident: ident,
			before: map[string]string{"42/profile.json": `{"complete": true}`}},
		"this job's, before a requeue": {ident: ident,
			before: map[string]string{"42/job": ident + "\n", "42/profile.json": `{"complete": true}`}},
		"identity unknown": {before: earlier},
		"earlier job's":    {ident: ident, before: earlier, after: moved("earlier-sub-1700000100"), logged: "moved aside"},
		"earlier job's, its name taken": {ident: ident,
			before: mergeMaps(earlier, map[string]string{"42/earlier-sub-1700000100/x": "x", "42/earlier-sub-1700000100-2/y": "y"}),
			after:  mergeMaps(moved("earlier-sub-1700000100-3"), map[string]string{"42/earlier-sub-1700000100/x": "x", "42/earlier-sub-1700000100-2/y": "y"}),
			logged: "moved aside"},
		"unreadable identity": {ident: ident, before: map[string]string{"42/job": "?\n"},
			after: map[string]string{"42/earlier/job": "?\n"}, logged: "moved aside"},
		"dry run": {ident: ident, dryRun: true, before: earlier, logged: "a run would move them aside"},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tc.before)
			var logged bytes.Buffer
			if err := ownStateDir(filepath.Join(root, "42"), tc.ident, tc.dryRun, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
				t.Fatal(err)
			}
			want := tc.after
			if want == nil {
				want = tc.before
			}
			if want == nil {
				want = map[string]string{}
			}
			if d := cmp.Diff(want, files(t, root)); d != "" {
				t.Errorf("files (-want +got):\n%s", d)
			}
			if tc.logged != "" && !strings.Contains(logged.String(), tc.logged) || tc.logged == "" && logged.Len() > 0 {
				t.Errorf("logged %q, want %q", logged.String(), tc.logged)
			}
		})
	}
}

func mergeMaps(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// A job ID Slurm reused: the state directory an earlier job of the ID left
// holds its complete profiling phase. The new job (another submission
// time in its tag) profiles, having moved that record aside; a dry run
// says so and moves nothing. A requeue of the new job does not profile
// again.
func TestProfileStateOfEarlierJob(t *testing.T) {
	flags, _, stateDir := profileSetup(t, "")
	// Every run is skipped: enough to tell a phase that ran from one
	// taken as done.
	flags = append(flags, "--profile-timeout", "1ns")
	t.Setenv("FAKE_TAG_EXTRA", "profile=1 sub=1700000200")
	earlier := map[string]string{"job": "sub=1700000100\n", profileFile: `{"complete": true}`}
	writeFiles(t, stateDir, earlier)
	start := func(extra ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(t.Context(), slices.Concat(flags, extra, []string{"--"}, profileLine), profileEnv(), &out, &errOut); code != 0 {
			t.Fatalf("exit %d:\n%s", code, errOut.String())
		}
		return errOut.String()
	}

	logged := start("--dry-run")
	if !strings.Contains(logged, "a run would move them aside") {
		t.Errorf("dry run's stderr lacks the earlier job's directory:\n%s", logged)
	}
	if d := cmp.Diff(earlier, files(t, stateDir)); d != "" {
		t.Errorf("state directory after a dry run (-want +got):\n%s", d)
	}

	logged = start()
	if strings.Contains(logged, "profiling phase already done") || !strings.Contains(logged, "moved aside") {
		t.Errorf("stderr:\n%s\nwant the earlier job's records moved aside and the phase run", logged)
	}
	if d := cmp.Diff(earlier, files(t, filepath.Join(stateDir, "earlier-sub-1700000100"))); d != "" {
		t.Errorf("earlier job's records moved aside (-want +got):\n%s", d)
	}
	rep := readProfile(t, stateDir)
	if !rep.Complete || len(rep.Runs) == 0 || rep.JobID != "42" {
		t.Errorf("profile.json %+v, want this job's phase", rep)
	}
	if got := files(t, stateDir)[jobFile]; got != "sub=1700000200\n" {
		t.Errorf("%s holds %q, want this job's identity", jobFile, got)
	}

	// Requeued: the directory is this job's own.
	logged = start()
	if !strings.Contains(logged, "profiling phase already done") || strings.Contains(logged, "moved aside") {
		t.Errorf("requeued job's stderr:\n%s\nwant the phase not repeated", logged)
	}
}

// A job ID Slurm reused: the plan an earlier job of the ID refused is not
// the new job's. Given the same plan, the new job asks rubickd for another
// rather than end; given it again after that requeue, it ends, as after
// its own refusal.
func TestRunRefusedPlanOfEarlierJob(t *testing.T) {
	bin := fakes(t)
	dir := t.TempDir()
	t.Setenv("FAKE_SCONTROL_LOG", filepath.Join(dir, "scontrol.log"))
	t.Setenv("FAKE_PLAN", "dp2.tp1.pp1.mb8.a1.z0") // of a global batch of 16, the line's is 64
	var col collector
	srv := col.server(t)
	env := envMap(map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "2",
		"SLURM_CPUS_ON_NODE": "8", "SLURM_SUBMIT_DIR": dir})
	var got []int
	for _, sub := range []string{"1700000100", "1700000200", "1700000200"} {
		t.Setenv("FAKE_TAG_EXTRA", "sub="+sub)
		var out, errOut bytes.Buffer
		got = append(got, run(t.Context(), []string{"--scontrol", filepath.Join(bin, "scontrol"), "--squeue", filepath.Join(bin, "squeue"),
			"--srun", filepath.Join(bin, "srun"), "--munge", filepath.Join(bin, "munge"), "--report-url", srv.URL, "--",
			"python", "pretrain_gpt.py", "--global-batch-size", "64", "--micro-batch-size", "4"}, env, &out, &errOut))
	}
	// The earlier job refuses, the new job refuses, its requeue ends.
	if d := cmp.Diff([]int{exitCheckpointed, exitCheckpointed, exitUsage}, got); d != "" {
		t.Errorf("exit statuses (-want +got):\n%s", d)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	var refused []bool
	for _, l := range col.launches {
		refused = append(refused, l.Refused)
	}
	if d := cmp.Diff([]bool{true, true}, refused); d != "" {
		t.Errorf("launch notices' refused (-want +got):\n%s", d)
	}
	earlier := map[string]string{"job": "sub=1700000100\n", refusedFile: "dp2.tp1.pp1.mb8.a1.z0\n"}
	want := map[string]string{"job": "sub=1700000200\n", refusedFile: "dp2.tp1.pp1.mb8.a1.z0\n"}
	for k, v := range earlier {
		want["earlier-sub-1700000100/"+k] = v
	}
	if d := cmp.Diff(want, files(t, filepath.Join(dir, ".rubick", "42"))); d != "" {
		t.Errorf("state directory, the earlier job's records moved aside (-want +got):\n%s", d)
	}
}
