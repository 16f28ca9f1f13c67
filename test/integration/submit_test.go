//go:build integration

package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/slurm"
)

// A --model-type job in the managed partition is tagged and held, and both
// scontrol and slurmrestd show it that way. The class comes from the QOS.
func TestModelTypeJobIsTaggedAndHeld(t *testing.T) {
	l := needLab(t)
	for name, tc := range map[string]struct {
		args []string
		tag  string
	}{
		"default class":  {[]string{"--model-type=gpt2"}, "rubick:v1 model=gpt2 class=best-effort"},
		"guaranteed QOS": {[]string{"--model-type=llama7", "--qos=guaranteed"}, "rubick:v1 model=llama7 class=guaranteed"},
	} {
		t.Run(name, func(t *testing.T) {
			id := l.sbatch(t, append(tc.args, "--gres=gpu:2", "-N1", "--wrap", "sleep 30")...)

			out := showJob(t, id)
			got := map[string]string{
				"JobState":     field(out, "JobState"),
				"Priority":     field(out, "Priority"),
				"AdminComment": field(out, "AdminComment"),
				"Requeue":      field(out, "Requeue"),
				"Partition":    field(out, "Partition"),
			}
			want := map[string]string{
				"JobState":     "PENDING",
				"Priority":     "0",
				"AdminComment": tc.tag,
				"Requeue":      "1",
				"Partition":    l.partition,
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("scontrol show job %s (-want +got):\n%s", id, d)
			}

			j := l.restGetJob(t, id)
			gotREST := restJob{JobState: j.JobState, Priority: j.Priority, AdminComment: j.AdminComment, Requeue: j.Requeue}
			wantREST := restJob{JobState: "PENDING", Priority: 0, AdminComment: tc.tag, Requeue: true}
			if d := cmp.Diff(wantREST, gotREST); d != "" {
				t.Errorf("GET /slurm/v0.0.38/job/%s (-want +got):\n%s", id, d)
			}
		})
	}
}

// A held job stays held across scheduling cycles: nothing but rubickd starts it.
func TestHeldJobStaysPending(t *testing.T) {
	l := needLab(t)
	id := l.sbatch(t, "--model-type=gpt2", "--gres=gpu:1", "-N1", "--wrap", "sleep 30")
	time.Sleep(6 * time.Second) // > sched_interval and bf_interval (5 s)
	if s := jobState(id); s != "PENDING" {
		t.Errorf("held job is %s after 6 s, want PENDING", s)
	}
}

// Bad model types are refused at submission, with the reason on stderr.
func TestBadModelTypeIsRefused(t *testing.T) {
	l := needLab(t)
	for name, tc := range map[string]struct {
		args    []string
		wantErr string
	}{
		"syntax (SPANK plugin)": {
			args:    []string{"--model-type=bad name!"},
			wantErr: "rubick: invalid --model-type 'bad name!'",
		},
		"upper case (SPANK plugin)": {
			args:    []string{"--model-type=GPT2"},
			wantErr: "rubick: invalid --model-type 'GPT2'",
		},
		"not in the site list (SPANK plugin)": {
			args:    []string{"--model-type=no-such-model"},
			wantErr: "rubick: unknown --model-type 'no-such-model'",
		},
		"comment fallback (job_submit.lua)": {
			args:    []string{"--comment=rubick:model=Bad!"},
			wantErr: "rubick: invalid model type 'Bad!'",
		},
		"comment fallback, not listed (job_submit.lua)": {
			args:    []string{"--comment=rubick:model=no-such-model"},
			wantErr: "rubick: unknown model type 'no-such-model'",
		},
	} {
		t.Run(name, func(t *testing.T) {
			argv := append([]string{"sbatch", "--parsable", "-D", l.out, "-o", "/dev/null"}, tc.args...)
			r := command("", append(argv, "--wrap", "true")...)
			if r.err == nil {
				command("", "scancel", strings.TrimSpace(r.stdout))
				t.Fatalf("sbatch %v succeeded (job %s), want an error", tc.args, r.stdout)
			}
			if !strings.Contains(r.stderr, tc.wantErr) {
				t.Errorf("stderr = %q, want it to contain %q", r.stderr, tc.wantErr)
			}
		})
	}
}

// job_submit.lua tells the user at sbatch when a model-typed job's batch
// script never mentions rubick-srun (rubickd cannot set its plan), and tags
// and holds the job all the same; a script that runs rubick-srun gets no
// notice.
func TestNoticeForScriptWithoutRubickSrun(t *testing.T) {
	l := needLab(t)
	for name, tc := range map[string]struct {
		body   string
		notice bool
	}{
		"plain srun":       {"#!/bin/bash\nsrun torchrun --nproc_per_node=2 train.py\n", true},
		"exec rubick-srun": {"#!/bin/bash\nexec rubick-srun -- python train.py\n", false},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "train.sh")
			if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			r := command("", "sbatch", "--parsable", "-D", l.out, "-o", "/dev/null", "--job-name", "it-notice",
				"--model-type=gpt2", "-p", l.partition, "-N1", "--gres=gpu:1", path)
			if r.err != nil {
				t.Fatalf("sbatch: %v: %s", r.err, r.stderr)
			}
			id, _, _ := strings.Cut(strings.TrimSpace(r.stdout), ";")
			if _, err := strconv.Atoi(id); err != nil {
				t.Fatalf("sbatch printed %q, want a job id", r.stdout)
			}
			t.Cleanup(func() { command("", "scancel", id) })

			notice := "rubick: " + path + " runs no rubick-srun: rubickd may resize this job but cannot set its execution plan"
			if tc.notice && !strings.Contains(r.stderr, notice) {
				t.Errorf("sbatch stderr %q, want it to contain %q", r.stderr, notice)
			}
			if !tc.notice && strings.Contains(r.stderr, "runs no rubick-srun") {
				t.Errorf("sbatch stderr %q, want no notice", r.stderr)
			}
			out := showJob(t, id)
			got := map[string]string{"Priority": field(out, "Priority"), "AdminComment": field(out, "AdminComment")}
			want := map[string]string{"Priority": "0", "AdminComment": "rubick:v1 model=gpt2 class=best-effort"}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("scontrol show job %s (-want +got):\n%s", id, d)
			}
		})
	}
}

// Jobs without a model type are left alone: no tag, no hold, user comment kept.
func TestJobWithoutModelTypeIsUntouched(t *testing.T) {
	l := needLab(t)
	id := l.sbatch(t, "--gres=gpu:1", "-N1", "--comment=user note", "--wrap", "sleep 30")
	waitState(t, id, "RUNNING", 20*time.Second)
	out := showJob(t, id)
	if ac := field(out, "AdminComment"); ac != "" {
		t.Errorf("AdminComment = %q, want empty", ac)
	}
	if c := field(out, "Comment"); c != "user note" {
		t.Errorf("Comment = %q, want %q", c, "user note")
	}
}

// REST submissions cannot pass SPANK options; "rubick:model=NAME" in the
// comment is the documented fallback. A held submit answers error 2042 along
// with a valid job id.
func TestRESTSubmitWithCommentFallback(t *testing.T) {
	l := needLab(t)
	body := map[string]any{
		"job": map[string]any{
			"name": "it-rest", "partition": l.partition, "nodes": "1", "tasks": 1,
			"gres": "gpu:1", "comment": "rubick:model=bert",
			"current_working_directory": l.out, "standard_output": "/dev/null",
			"environment": map[string]string{"PATH": "/usr/bin:/bin"},
		},
		"script": "#!/bin/bash\nsleep 30\n",
	}
	var resp struct {
		JobID  int         `json:"job_id"`
		Errors []restError `json:"errors"`
	}
	code := l.rest(t, http.MethodPost, "/slurm/v0.0.38/job/submit", body, &resp)
	if resp.JobID == 0 {
		t.Fatalf("submit: HTTP %d, no job id, errors %+v", code, resp.Errors)
	}
	id := fmt.Sprint(resp.JobID)
	t.Cleanup(func() { command("", "scancel", id) })
	for _, e := range resp.Errors {
		if e.ErrorCode != 2042 {
			t.Errorf("submit: unexpected error %+v", e)
		}
	}
	j := l.restGetJob(t, id)
	if j.Priority != 0 || j.AdminComment != "rubick:v1 model=bert class=best-effort" || j.Comment != "rubick:model=bert" {
		t.Errorf("job %s: priority %d admin_comment %q comment %q, want 0, the rubick:v1 tag and the user's comment",
			id, j.Priority, j.AdminComment, j.Comment)
	}
}

// Only the scheduler (root here) may release a held managed job; a user's
// own `scontrol release` is refused by job_submit.lua's slurm_job_modify.
func TestUserCannotReleaseManagedJob(t *testing.T) {
	l := needLab(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root to submit as another user")
	}
	r := command("nobody", "sbatch", "--parsable", "-D", l.out, "-o", "/dev/null",
		"--model-type=gpt2", "--gres=gpu:1", "--wrap", "sleep 30")
	if r.err != nil {
		t.Fatalf("sbatch as nobody: %v: %s", r.err, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { command("", "scancel", id) })
	if p := field(showJob(t, id), "Priority"); p != "0" {
		t.Fatalf("Priority = %s, want 0 (held)", p)
	}
	if r := command("nobody", "scontrol", "release", id); r.err == nil {
		t.Errorf("scontrol release by the job's owner succeeded, want it refused")
	}
	if p := field(showJob(t, id), "Priority"); p != "0" {
		t.Errorf("Priority after the user's release = %s, want 0", p)
	}
	// Nor may a new nice release it: priority/basic (the lab's) computes a
	// held job's priority anew from it, so job_submit.lua refuses it.
	if r := command("nobody", "scontrol", "update", "JobId="+id, "Nice=100"); r.err == nil || !strings.Contains(r.stderr, "held state") {
		t.Errorf("scontrol update Nice=100 by the job's owner: %v: %s; want it refused (held state)", r.err, r.stderr)
	}
	if p := field(showJob(t, id), "Priority"); p != "0" {
		t.Errorf("Priority after the user's new nice = %s, want 0", p)
	}
	// The user may still hold or cancel it.
	if r := command("nobody", "scancel", id); r.err != nil {
		t.Errorf("scancel by the owner: %v: %s", r.err, r.stderr)
	}
}

// A user may change their own managed job's mail types, as rubick-srun
// does before it requeues a job whose launch line cannot run its plan, and
// the job stays held for rubickd.
func TestUserQuietsOwnMail(t *testing.T) {
	l := needLab(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root to submit as another user")
	}
	r := command("nobody", "sbatch", "--parsable", "-D", l.out, "-o", "/dev/null", "--mail-type=ALL",
		"--model-type=gpt2", "--gres=gpu:1", "--wrap", "sleep 30")
	if r.err != nil {
		t.Fatalf("sbatch as nobody: %v: %s", r.err, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { command("", "scancel", id) })
	v, ok := slurm.QuietMailType(showJob(t, id))
	if !ok || v != "INVALID_DEPEND,END,FAIL,STAGE_OUT" {
		t.Fatalf("QuietMailType = %q, %v; want INVALID_DEPEND,END,FAIL,STAGE_OUT from the job's MailType=%s", v, ok, field(showJob(t, id), "MailType"))
	}
	if r := command("nobody", "scontrol", "update", "JobId="+id, "MailType="+v); r.err != nil {
		t.Fatalf("scontrol update MailType=%s by the job's owner: %v: %s", v, r.err, r.stderr)
	}
	out := showJob(t, id)
	if got, p := field(out, "MailType"), field(out, "Priority"); got != "INVALID_DEPEND,END,FAIL,STAGE_OUT" || p != "0" {
		t.Errorf("after the owner's update: MailType %s, Priority %s; want INVALID_DEPEND,END,FAIL,STAGE_OUT and 0 (held)", got, p)
	}
}

// A user's own hold is theirs (job_submit.lua): `sbatch --hold` writes
// rubick:hold in the comment, their `scontrol release` takes it out and
// leaves the job held for rubickd, a second release is refused, their
// `scontrol hold` writes the word again, and root's release of it hands
// the job to rubickd the same way.
func TestUserHold(t *testing.T) {
	l := needLab(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root to submit as another user")
	}
	r := command("nobody", "sbatch", "--parsable", "-D", l.out, "-o", "/dev/null", "--hold", "--comment=my note",
		"--model-type=gpt2", "--gres=gpu:1", "--wrap", "sleep 30")
	if r.err != nil {
		t.Fatalf("sbatch as nobody: %v: %s", r.err, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { command("", "scancel", id) })
	want := func(step, comment string) {
		t.Helper()
		out := showJob(t, id)
		if p, c := field(out, "Priority"), field(out, "Comment"); p != "0" || c != comment {
			t.Errorf("after %s: Priority %s, Comment %q; want 0 (held) and %q", step, p, c, comment)
		}
	}
	want("sbatch --hold", "my note rubick:hold")
	if r := command("nobody", "scontrol", "release", id); r.err != nil {
		t.Errorf("scontrol release of the user's own hold: %v: %s", r.err, r.stderr)
	}
	want("the user's release", "my note")
	if r := command("nobody", "scontrol", "release", id); r.err == nil {
		t.Errorf("a second scontrol release by the owner succeeded, want it refused")
	}
	want("a second release", "my note")
	if r := command("nobody", "scontrol", "hold", id); r.err != nil {
		t.Errorf("scontrol hold by the owner: %v: %s", r.err, r.stderr)
	}
	want("the user's hold", "my note rubick:hold")
	run(t, "scontrol", "release", id)
	want("root's release", "my note")
}

// A new QOS gives a job rubick holds the class job_submit.lua maps it to:
// root's `scontrol update QOS=guaranteed` makes it guaranteed in its tag,
// and back. A user may not make their own job guaranteed so, even where
// their association allows the QOS: only an administrator can write the
// tag, and the job would otherwise be guaranteed by QOS and best-effort for
// rubick.
func TestQOSChangeSetsClass(t *testing.T) {
	l := needLab(t)
	needScheduler(t)
	id := l.sbatch(t, "--model-type=bert", "--gres=gpu:1", "--hold", "--wrap", "sleep 30")
	for _, step := range []struct{ qos, class string }{{"guaranteed", "guaranteed"}, {"normal", "best-effort"}} {
		run(t, "scontrol", "update", "JobId="+id, "QOS="+step.qos)
		out := showJob(t, id)
		if got, ac := field(out, "QOS"), field(out, "AdminComment"); got != step.qos || !strings.Contains(ac, "class="+step.class) {
			t.Errorf("after QOS=%s: QOS %s, AdminComment %q; want class=%s", step.qos, got, ac, step.class)
		}
	}

	run(t, "sacctmgr", "-i", "modify", "user", "nobody", "set", "qos=normal,guaranteed")
	t.Cleanup(func() { command("", "sacctmgr", "-i", "modify", "user", "nobody", "set", "qos=normal") })
	r := command("nobody", "sbatch", "--parsable", "-D", l.out, "-o", "/dev/null", "--model-type=bert", "--gres=gpu:1", "--hold",
		"--wrap", "sleep 30")
	if r.err != nil {
		t.Fatalf("sbatch as nobody: %v: %s", r.err, r.stderr)
	}
	mine := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { command("", "scancel", mine) })
	if r := command("nobody", "scontrol", "update", "JobId="+mine, "QOS=guaranteed"); r.err == nil {
		t.Errorf("the user's QOS=guaranteed of their job succeeded, want it refused")
	}
	out := showJob(t, mine)
	if got, ac := field(out, "QOS"), field(out, "AdminComment"); got != "normal" || !strings.Contains(ac, "class=best-effort") {
		t.Errorf("after the user's QOS=guaranteed: QOS %s, AdminComment %q; want normal, class=best-effort", got, ac)
	}
}

// TestNestedSbatchDoesNotInheritModelType: an sbatch inside a job of a
// model type submits an untagged job unless it names one itself. Before,
// Slurm's SLURM_SPANK__SLURM_SPANK_OPTION_rubick_model_type in the job's
// environment tagged it with the job's (and, once that name left the
// list, failed it).
func TestNestedSbatchDoesNotInheritModelType(t *testing.T) {
	l := needLab(t)
	needScheduler(t)
	ids := filepath.Join(l.out, "nested-"+strconv.FormatInt(time.Now().UnixNano(), 10))
	inner := "sbatch --parsable -p gpu -N1 --gres=gpu:1 -o /dev/null --hold"
	l.sbatch(t, "-p", "debug", "--model-type=bert", "-N1", "--wrap",
		inner+" --wrap true > "+ids+".plain && "+inner+" --model-type=t5 --wrap true > "+ids+".named")
	for _, tc := range []struct{ file, want string }{{".plain", ""}, {".named", "rubick:v1 model=t5 class=best-effort"}} {
		var id string
		waitFor(t, 30*time.Second, "the nested sbatch's job id in "+ids+tc.file, func() bool {
			b, err := os.ReadFile(ids + tc.file)
			id, _, _ = strings.Cut(strings.TrimSpace(string(b)), ";")
			_, aerr := strconv.Atoi(id)
			return err == nil && aerr == nil
		})
		t.Cleanup(func() { command("", "scancel", id) })
		if ac := field(showJob(t, id), "AdminComment"); ac != tc.want {
			t.Errorf("nested job %s (%s): AdminComment %q, want %q", id, tc.file, ac, tc.want)
		}
	}
}

// TestWholeArrayUpdate: a change of a whole job array reaches each of its
// records as that record's own. Slurm hands job_submit.lua one request for
// every record in turn, edits included: before, a task its user had
// released got the hold word the script wrote for the tasks still held,
// and was held by its user again.
func TestWholeArrayUpdate(t *testing.T) {
	l := needLab(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root to submit as another user")
	}
	r := command("nobody", "sbatch", "--parsable", "-D", l.out, "-o", "/dev/null", "--array=0-2", "--hold",
		"--comment=my note", "--model-type=gpt2", "--gres=gpu:1", "--wrap", "sleep 30")
	if r.err != nil {
		t.Fatalf("sbatch as nobody: %v: %s", r.err, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { command("", "scancel", id) })
	want := func(step string, held, released string) {
		t.Helper()
		for _, rec := range []struct{ task, comment string }{{"0", held}, {"1", released}} {
			out := showJob(t, id+"_"+rec.task)
			if p, c := field(out, "Priority"), field(out, "Comment"); p != "0" || c != rec.comment {
				t.Errorf("after %s: task %s: Priority %s, Comment %q; want 0 (held) and %q", step, rec.task, p, c, rec.comment)
			}
		}
	}
	// Task 1 leaves the array's record, released from its user's hold.
	if r := command("nobody", "scontrol", "release", id+"_1"); r.err != nil {
		t.Fatalf("scontrol release %s_1 by the owner: %v: %s", id, r.err, r.stderr)
	}
	want("the release of task 1", "my note rubick:hold", "my note")
	if r := command("nobody", "scontrol", "update", "JobId="+id, "Comment=new note"); r.err != nil {
		t.Fatalf("scontrol update of the whole array's comment: %v: %s", r.err, r.stderr)
	}
	want("the whole array's new comment", "new note rubick:hold", "new note")
	// The release ends the user's hold of the tasks they hold and is refused
	// for task 1, which only rubickd starts.
	r = command("nobody", "scontrol", "release", id)
	if r.err == nil || !strings.Contains(r.stderr, id+"_1: Access/permission denied") {
		t.Errorf("scontrol release of the whole array by the owner: %v: %s; want task 1 refused", r.err, r.stderr)
	}
	want("the whole array's release", "new note", "new note")
}
