package slurm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseTag(t *testing.T) {
	tests := map[string]struct {
		in   string
		want Tag
	}{
		"full": {
			"rubick:v1 model=gpt2 class=guaranteed tenant=physics plan=dp4.tp2.pp1.mb2.a1.z0+gc gen=3",
			Tag{ModelType: "gpt2", Class: ClassGuaranteed, Tenant: "physics", Plan: "dp4.tp2.pp1.mb2.a1.z0+gc", Generation: 3},
		},
		"model only":   {"rubick:v1 model=bert", Tag{ModelType: "bert"}},
		"best effort":  {"rubick:v1 class=best-effort", Tag{Class: ClassBestEffort}},
		"bare version": {"rubick:v1", Tag{}},
		"extra spaces": {"  rubick:v1   model=gpt2  ", Tag{ModelType: "gpt2"}},
		"unknown key":  {"rubick:v1 model=gpt2 zone=eu-1", Tag{ModelType: "gpt2", Extra: map[string]string{"zone": "eu-1"}}},
		"account w/ @": {"rubick:v1 tenant=lab@site", Tag{Tenant: "lab@site"}},
		"hostlist":     {"rubick:v1 nl=node[1-3,5]", Tag{Extra: map[string]string{"nl": "node[1-3,5]"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseTag(tc.in)
			if err != nil {
				t.Fatalf("ParseTag(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseTagErrors(t *testing.T) {
	// Each error must name the field and the value at fault.
	tests := map[string]struct{ in, mention string }{
		"not a tag":      {"model_type=gpt2", "rubick:"},
		"old lab form":   {"rubick:plan=dp4,gpus=4", `"plan=dp4,gpus=4"`},
		"future version": {"rubick:v2 model=x", `"v2"`},
		"no equals":      {"rubick:v1 model", `"model"`},
		"bad class":      {"rubick:v1 class=gold", `class="gold"`},
		"bad gen":        {"rubick:v1 gen=-1", `gen="-1"`},
		"gen not number": {"rubick:v1 gen=3x", `gen="3x"`},
		"gen leading 0":  {"rubick:v1 gen=03", `gen="03"`},
		"duplicate":      {"rubick:v1 model=a model=b", `"model"`},
		"bad key":        {"rubick:v1 Model=a", `"Model"`},
		"shell chars":    {"rubick:v1 plan=$(reboot)", "plan="},
		"empty extra":    {"rubick:v1 zone=", `"zone"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseTag(tc.in)
			if !errors.Is(err, ErrTag) {
				t.Fatalf("ParseTag(%q) err = %v, want ErrTag", tc.in, err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %s", err, tc.mention)
			}
		})
	}
}

// A tag of a later version is a newer rubick's: MergeAdminComment leaves
// it, and every other segment, as it is, with an error naming it. An older
// or malformed rubick segment is still replaced (TestMergeAdminComment).
func TestMergeAdminCommentNewerTag(t *testing.T) {
	tag := Tag{ModelType: "gpt2", Generation: 1}
	for name, tc := range map[string]struct {
		in    string
		newer string // the segment the error names; "" for none
	}{
		"v2":               {in: "rubick:v2 model=gpt2 plan=x", newer: `"rubick:v2 model=gpt2 plan=x"`},
		"v10 among others": {in: "a=1; rubick:v10 zone=eu ;b=2", newer: `"rubick:v10 zone=eu"`},
		"after a v1":       {in: "rubick:v1 gen=1;rubick:v3", newer: `"rubick:v3"`},
		"v2 alone":         {in: "rubick:v2", newer: `"rubick:v2"`},
		"tab after v2":     {in: "rubick:v2\tgen=1", newer: `version "v2"`},
		"v1":               {in: "rubick:v1 gen=1"},
		"v0":               {in: "rubick:v0 gen=1"},
		"not a number":     {in: "rubick:v2x gen=1"},
		"leading zero":     {in: "rubick:v02"},
		"signed":           {in: "rubick:v+2"},
		"old lab form":     {in: "rubick:plan=dp4,gpus=4"},
		"v2 in no segment": {in: "note rubick:v2"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := MergeAdminComment(tc.in, tag)
			if tc.newer == "" {
				if err != nil || !strings.Contains(got, tag.String()) {
					t.Errorf("MergeAdminComment(%q) = %q, %v; want the tag written", tc.in, got, err)
				}
				return
			}
			if !errors.Is(err, ErrNewerTag) || !strings.Contains(err.Error(), tc.newer) || got != "" {
				t.Errorf("MergeAdminComment(%q) = %q, %v; want an error wrapping ErrNewerTag naming %s", tc.in, got, err, tc.newer)
			}
			if err := CheckTagVersion(tc.in); !errors.Is(err, ErrNewerTag) {
				t.Errorf("CheckTagVersion(%q) = %v, want ErrNewerTag", tc.in, err)
			}
		})
	}
	// ParseTag tells a newer rubick's tag from a malformed one.
	if _, err := ParseTag("rubick:v2 model=x"); !errors.Is(err, ErrTag) || !errors.Is(err, ErrNewerTag) {
		t.Errorf("ParseTag of a v2 tag: %v, want ErrTag and ErrNewerTag", err)
	}
	if _, err := ParseTag("rubick:plan=dp4"); errors.Is(err, ErrNewerTag) {
		t.Errorf("ParseTag of the old lab form: %v, want no ErrNewerTag", err)
	}
}

func TestTagString(t *testing.T) {
	tag := Tag{ModelType: "gpt2", Class: ClassBestEffort, Tenant: "t1", Plan: "dp2.tp1.pp1.mb4.a1.z2+off", Generation: 2,
		Extra: map[string]string{"zz": "1", "aa": "2"}}
	want := "rubick:v1 model=gpt2 class=best-effort tenant=t1 plan=dp2.tp1.pp1.mb4.a1.z2+off gen=2 aa=2 zz=1"
	if got := tag.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	back, err := ParseTag(want)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tag, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestTagValidate(t *testing.T) {
	bad := map[string]Tag{
		"space in model":  {ModelType: "gpt 2"},
		"semicolon":       {Tenant: "a;b"},
		"class":           {Class: "premium"},
		"negative gen":    {Generation: -1},
		"known extra key": {Extra: map[string]string{"plan": "x"}},
		"empty extra":     {Extra: map[string]string{"x": ""}},
		"long":            {Plan: strings.Repeat("a", 300)},
	}
	for name, tag := range bad {
		if err := tag.Validate(); !errors.Is(err, ErrTag) {
			t.Errorf("%s: Validate() = %v, want ErrTag", name, err)
		}
	}
}

func TestMergeAdminComment(t *testing.T) {
	tag := Tag{ModelType: "gpt2", Plan: "dp4.tp1.pp1.mb1.a1.z0", Generation: 1}
	ts := tag.String()
	tests := map[string]struct{ in, want string }{
		"empty":               {"", ts},
		"legacy model_type":   {"model_type=gpt2", "model_type=gpt2;" + ts},
		"replace old tag":     {"model_type=gpt2;rubick:v1 model=gpt2 gen=0", "model_type=gpt2;" + ts},
		"replace malformed":   {"rubick:plan=dp4,gpus=4", ts},
		"keep order":          {"a=1;rubick:v1 gen=9;b=2", "a=1;" + ts + ";b=2"},
		"keep other's spaces": {"site: note with spaces ", "site: note with spaces ;" + ts},
		"two rubick segments": {"rubick:v1 gen=1;x;rubick:v1 gen=2", ts + ";x"},
		"shell text kept":     {"x; rm -rf /;$(reboot)", "x; rm -rf /;$(reboot);" + ts},
		// job_submit.lua's field for an administrator's hold.
		"admin hold kept": {"rubick:v1 model=gpt2;" + AdminHoldField, ts + ";" + AdminHoldField},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := MergeAdminComment(tc.in, tag)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("MergeAdminComment(%q) =\n %q\nwant\n %q", tc.in, got, tc.want)
			}
			back, err := TagFromAdminComment(got)
			if err != nil || back == nil {
				t.Fatalf("TagFromAdminComment(%q) = %v, %v", got, back, err)
			}
			if diff := cmp.Diff(tag, *back); diff != "" {
				t.Errorf("read back (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := MergeAdminComment("x", Tag{Plan: "a b"}); !errors.Is(err, ErrTag) {
		t.Errorf("invalid tag merged: %v", err)
	}
}

func TestTagFromAdminComment(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    *Tag
		wantErr bool
	}{
		"none":          {"just a note", nil, false},
		"empty":         {"", nil, false},
		"legacy":        {"model_type=resnet50", &Tag{ModelType: "resnet50"}, false},
		"tag wins":      {"model_type=resnet50;rubick:v1 model=bert", &Tag{ModelType: "bert"}, false},
		"malformed tag": {"model_type=x;rubick:pending-decision", nil, true},
	}
	for name, tc := range tests {
		got, err := TagFromAdminComment(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v", name, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

// FuzzParseTag checks that the parser never panics and that whatever it
// accepts formats back to something it parses to the same tag.
func FuzzParseTag(f *testing.F) {
	for _, s := range []string{
		"rubick:v1 model=gpt2 class=guaranteed tenant=physics plan=dp4.tp2.pp1.mb2.a1.z0+gc gen=3",
		"rubick:v1", "rubick:v1 zone=eu", "rubick:v2 x=y", "rubick:plan=dp4", "rubick:v1 gen=99999999999999999999",
		"rubick:v1 model=a model=b", "rubick:v1 class=", "rubick:v1 \x00=\xff", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tag, err := ParseTag(s)
		if err != nil {
			if !errors.Is(err, ErrTag) {
				t.Fatalf("error %v does not wrap ErrTag", err)
			}
			return
		}
		if err := tag.Validate(); err != nil {
			t.Fatalf("parsed tag %+v fails Validate: %v", tag, err)
		}
		again, err := ParseTag(tag.String())
		if err != nil {
			t.Fatalf("re-parse of %q: %v", tag.String(), err)
		}
		if diff := cmp.Diff(tag, again); diff != "" {
			t.Fatalf("round trip of %q (-first +second):\n%s", s, diff)
		}
	})
}

// FuzzMergeAdminComment checks that merging keeps every non-rubick,
// non-empty segment and leaves exactly one readable tag.
func FuzzMergeAdminComment(f *testing.F) {
	for _, s := range []string{"", "model_type=x", "a;b;;c", "rubick:v1 gen=1;x", "x; rm -rf /", "rubick:garbage"} {
		f.Add(s)
	}
	tag := Tag{ModelType: "m", Generation: 4}
	f.Fuzz(func(t *testing.T, ac string) {
		got, err := MergeAdminComment(ac, tag)
		if errors.Is(err, ErrNewerTag) {
			return // a newer rubick's segment is left as it is
		}
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, seg := range strings.Split(ac, ";") {
			if strings.TrimSpace(seg) != "" && !strings.HasPrefix(strings.TrimSpace(seg), "rubick:") {
				kept = append(kept, seg)
			}
		}
		var others []string
		n := 0
		for _, seg := range strings.Split(got, ";") {
			if strings.HasPrefix(strings.TrimSpace(seg), "rubick:") {
				n++
				continue
			}
			others = append(others, seg)
		}
		if n != 1 {
			t.Fatalf("%d rubick segments in %q", n, got)
		}
		if diff := cmp.Diff(kept, others); diff != "" {
			t.Fatalf("other content changed (-want +got):\n%s", diff)
		}
		back, err := TagFromAdminComment(got)
		if err != nil || back == nil || back.Generation != 4 {
			t.Fatalf("read back %v, %v", back, err)
		}
	})
}

func TestHeldByUser(t *testing.T) {
	held := func(comment string) Job { return Job{State: StatePending, Held: true, Comment: comment} }
	for _, tc := range []struct {
		name string
		job  Job
		want bool
	}{
		{"alone", held("rubick:hold"), true},
		{"after a note", held("my note rubick:hold"), true},
		{"between fields", held("rubick:model=bert;rubick:hold;x"), true},
		{"no word", held("my note"), false},
		{"part of a word", held("rubick:holder"), false},
		{"prefixed", held("xrubick:hold"), false},
		{"not held", Job{State: StatePending, Comment: "rubick:hold"}, false},
		{"running", Job{State: StateRunning, Held: true, Comment: "rubick:hold"}, false},
	} {
		if got := HeldByUser(tc.job); got != tc.want {
			t.Errorf("%s: HeldByUser(%q) = %v, want %v", tc.name, tc.job.Comment, got, tc.want)
		}
	}
}

// An administrator holds a job Slurm holds for them (JobHeldAdmin), or one
// rubick holds with job_submit.lua's field in its AdminComment.
func TestHeldByAdmin(t *testing.T) {
	held := func(reason, ac string) Job {
		return Job{State: StatePending, Held: true, Reason: reason, AdminComment: ac}
	}
	tag := "rubick:v1 model=gpt2 class=best-effort"
	for _, tc := range []struct {
		name string
		job  Job
		want bool
	}{
		{"Slurm's hold", held("JobHeldAdmin", tag), true},
		{"field", held("JobHeldUser", tag+";"+AdminHoldField), true},
		{"field first, blanks", held("JobHeldUser", " "+AdminHoldField+" ;"+tag), true},
		{"rubick's hold", held("JobHeldUser", tag), false},
		{"user's hold", Job{State: StatePending, Held: true, Reason: "JobHeldUser", AdminComment: tag, Comment: "rubick:hold"}, false},
		{"in another field", held("JobHeldUser", tag+";note "+AdminHoldField), false},
		{"released", Job{State: StatePending, AdminComment: tag + ";" + AdminHoldField}, false},
		{"running", Job{State: StateRunning, AdminComment: tag + ";" + AdminHoldField}, false},
		{"Slurm's hold, rubick's", held("JobHeldAdmin", tag+"; "+RubickHeldField), false},
		{"rubick's, then an administrator's", held("JobHeldAdmin", tag+";"+RubickHeldField+";"+AdminHoldField), true},
		{"rubick-held in another field", held("JobHeldAdmin", tag+";x "+RubickHeldField), true},
	} {
		if got := HeldByAdmin(tc.job); got != tc.want {
			t.Errorf("%s: HeldByAdmin(%s, %q) = %v, want %v", tc.name, tc.job.Reason, tc.job.AdminComment, got, tc.want)
		}
	}
}

// WithoutWord takes a word out as job_submit.lua's without_hold does (the
// same cases as contrib/slurm/test_job_submit.lua), WithWord adds it once.
func TestCommentWords(t *testing.T) {
	for _, tc := range []struct{ in, without, with string }{
		{"my note rubick:hold", "my note", "my note rubick:hold"},
		{"a;rubick:hold;rubick:holder b", "a;rubick:holder b", "a;rubick:hold;rubick:holder b"},
		{"rubick:hold rubick:hold x", "x", "rubick:hold rubick:hold x"},
		{"rubick:hold", "", "rubick:hold"},
		{"rubick:holder", "rubick:holder", "rubick:holder rubick:hold"},
		{"xrubick:hold", "xrubick:hold", "xrubick:hold rubick:hold"},
		{"", "", "rubick:hold"},
		{"rubick:hold my note", "my note", "rubick:hold my note"},
		{"a\trubick:hold\nb", "a\tb", "a\trubick:hold\nb"},
	} {
		if got := WithoutWord(tc.in, UserHoldWord); got != tc.without {
			t.Errorf("WithoutWord(%q) = %q, want %q", tc.in, got, tc.without)
		}
		if got := WithWord(tc.in, UserHoldWord); got != tc.with {
			t.Errorf("WithWord(%q) = %q, want %q", tc.in, got, tc.with)
		}
	}
}

func TestRequeuedByOther(t *testing.T) {
	job := func(restarts int, rc, comment string) Job {
		j := Job{State: StatePending, Held: true, RestartCount: restarts, Comment: comment,
			Tag: &Tag{ModelType: "bert", Extra: map[string]string{}}}
		if rc != "" {
			j.Tag.Extra[TagRestarts] = rc
		}
		return j
	}
	running := job(2, "1", "")
	running.State, running.Held = StateRunning, false
	for _, tc := range []struct {
		name string
		job  Job
		want bool
	}{
		{"requeued by someone", job(2, "1", "my note"), true},
		{"rubick's own", job(2, "2", ""), false},
		{"rubick-srun's", job(2, "1", "my note rubick:requeue"), false},
		{"tag without the count", job(2, "", ""), false},
		{"unreadable count", job(2, "x", ""), false},
		{"never run", job(0, "0", ""), false},
		{"not held", func() Job { j := job(2, "1", ""); j.Held = false; return j }(), false},
		{"running", running, false},
		{"no tag", Job{State: StatePending, Held: true, RestartCount: 3}, false},
	} {
		if got := RequeuedByOther(tc.job); got != tc.want {
			t.Errorf("%s: RequeuedByOther = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// ran= reads as whole seconds, 0 without one; anything else is an error
// naming the value. RanSeconds writes what it reads.
func TestTagRanTime(t *testing.T) {
	for _, tc := range []struct {
		ran     string // "" for no ran=
		want    time.Duration
		wantErr string
	}{
		{ran: "", want: 0},
		{ran: "0", want: 0},
		{ran: "3600", want: time.Hour},
		{ran: "1.5", wantErr: `tag ran="1.5" is not whole seconds`},
		{ran: "-1", wantErr: `tag ran="-1" is not whole seconds`},
	} {
		tag := Tag{Extra: map[string]string{}}
		if tc.ran != "" {
			tag.Extra[TagRan] = tc.ran
		}
		got, err := tag.RanTime()
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("ran=%q: err %v, want %q", tc.ran, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ran=%q: %v, %v; want %v", tc.ran, got, err, tc.want)
		}
		if tc.ran != "" && RanSeconds(got) != tc.ran {
			t.Errorf("RanSeconds(%v) = %q, want %q", got, RanSeconds(got), tc.ran)
		}
	}
	if got := RanSeconds(90*time.Second + 999*time.Millisecond); got != "90" {
		t.Errorf("RanSeconds(90.999s) = %q, want 90 (truncated)", got)
	}
}
