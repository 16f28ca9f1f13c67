package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rubick-sched/rubick/slurm"
)

// jobFile, in the job's state directory, names the job the directory
// belongs to (jobIdentity). Slurm reuses job IDs (once slurmctld's state is
// lost or reset, and when they wrap at MaxJobId): a new job must not take
// the records of an earlier job of the same ID for its own, a complete
// profiling phase (phaseDone) or a refused plan (refuse).
const jobFile = "job"

// maxAside bounds the names setAside tries for an earlier job's directory.
const maxAside = 100

// jobIdentity tells the job from an earlier one of the same ID: the first
// submission time rubickd keeps in its tag (slurm.TagSubmit), which a
// requeue keeps, unlike Slurm's own submit time. It is "" when unknown (no
// tag, or one of an older rubickd): the state directory is then taken as
// it is.
func jobIdentity(tag *slurm.Tag, log *slog.Logger) string {
	if tag == nil {
		return ""
	}
	v, ok := tag.Extra[slurm.TagSubmit]
	if !ok {
		return ""
	}
	if n, err := strconv.ParseInt(v, 10, 64); err != nil || n <= 0 {
		log.Warn("the job's submission time in its rubick tag is malformed; its state directory is not checked for an earlier job's",
			"key", slurm.TagSubmit, "value", v)
		return ""
	}
	return slurm.TagSubmit + "=" + v
}

// ownStateDir makes dir, the job's state directory, this job's before
// anything reads it: one whose jobFile names another job than ident is an
// earlier job's of the same ID, and its records are moved aside
// (setAside), so that nothing of them is lost. A directory without the
// file (none yet, or an older rubick-srun's) or a job of unknown identity
// (ident "") keeps them as they are. A dry run moves nothing: it reads
// nothing there either. The error says the records could not be moved.
func ownStateDir(dir, ident string, dryRun bool, log *slog.Logger) error {
	if ident == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(dir, jobFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		log.Warn("cannot read which job the state directory belongs to; it is taken as this job's", "file", filepath.Join(dir, jobFile), "err", err)
		return nil
	}
	was := strings.TrimSpace(string(data))
	if was == ident {
		return nil // an earlier start of this job, before a requeue
	}
	if dryRun {
		log.Info("the state directory holds an earlier job's records of the same ID; a run would move them aside", "dir", dir,
			"earlier_job", was, "this_job", ident)
		return nil
	}
	to, err := setAside(dir, was)
	if err != nil {
		return fmt.Errorf("state directory %s of job %q (this job is %q): %w", dir, was, ident, err)
	}
	log.Info("the state directory held an earlier job's records of the same ID; moved aside", "dir", dir, "moved_to", to,
		"earlier_job", was, "this_job", ident)
	return nil
}

// setAside moves the records of the job was names out of dir into a new
// subdirectory, earlier-sub-N for its submission time N, with -2, -3, ...
// after it where that is taken. It returns the subdirectory. The records
// are what rubick-srun keeps there across a job's starts, and the
// profiling runs' configs; the directory itself stays: --state-dir may
// name one that holds more (a mistake, but those files must not move), and
// the rewritten DeepSpeed config is written anew at each start.
func setAside(dir, was string) (string, error) {
	name := "earlier"
	if v, ok := strings.CutPrefix(was, slurm.TagSubmit+"="); ok {
		if _, err := strconv.ParseInt(v, 10, 64); err == nil {
			name += "-" + slurm.TagSubmit + "-" + v
		}
	}
	base := filepath.Join(dir, name)
	to := ""
	for i := 1; i <= maxAside && to == ""; i++ {
		cand := base
		if i > 1 {
			cand = fmt.Sprintf("%s-%d", base, i)
		}
		// Mkdir fails on any name already there, which is left alone.
		if err := os.Mkdir(cand, 0o700); err == nil {
			to = cand
		} else if !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	if to == "" {
		return "", fmt.Errorf("no free name from %s to %s-%d", base, base, maxAside)
	}
	for _, r := range []string{jobFile, profileFile, refusedFile, profileRunsDir} {
		if err := os.Rename(filepath.Join(dir, r), filepath.Join(to, r)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	return to, nil
}

// claimStateDir records in dir that it is the job ident's, before the job
// first writes there: a later job of the same ID then sets it aside
// (ownStateDir). Nothing is written for a job of unknown identity, nor when
// dir says so already.
func claimStateDir(dir, ident string, log *slog.Logger) {
	if ident == "" {
		return
	}
	path := filepath.Join(dir, jobFile)
	if data, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(data)) == ident {
		return
	}
	if err := writeFileAtomic(path, []byte(ident+"\n")); err != nil {
		log.Warn("cannot record which job the state directory belongs to; a later job of the same ID would take its records for its own",
			"file", path, "err", err)
	}
}
