package slurm

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Tag is rubick's record on a job, kept in the job's AdminComment as one
// ';'-separated segment:
//
//	rubick:v1 model=gpt2 class=guaranteed tenant=physics plan=dp4.tp2.pp1.mb2.a1.z0 gen=3
//
// AdminComment rather than Comment because users cannot change it; a segment
// rather than the whole field so that other tools' content survives.
type Tag struct {
	// ModelType is the model type the job was submitted with (--model-type).
	ModelType string
	// Class is ClassGuaranteed, ClassBestEffort or empty (not yet decided).
	Class string
	// Tenant is the quota holder (a Slurm account or QOS, by configuration).
	Tenant string
	// Plan is the compact parallelisation plan, e.g. "dp4.tp2.pp1.mb2.a1.z0+gc".
	// It is opaque here; package model parses it.
	Plan string
	// Generation counts rubick's reconfigurations of the job: each start
	// and restart adds one.
	Generation int
	// Extra holds keys this version does not know, so that a tag written by
	// a newer rubick survives a round trip through an older one.
	Extra map[string]string
}

// Job classes.
const (
	ClassGuaranteed = "guaranteed"
	ClassBestEffort = "best-effort"
)

const (
	tagPrefix  = "rubick:"
	tagVersion = "v1"
	// legacyModelKey is what the first job_submit.lua wrote
	// ("model_type=resnet50"); it still yields a tag with the model type.
	legacyModelKey = "model_type="
	// adminCommentSep separates the segments of different tools.
	adminCommentSep = ";"
)

// ErrTag is wrapped by every malformed-tag error.
var ErrTag = errors.New("malformed rubick tag")

// ErrNewerTag is wrapped by the errors about a rubick tag of a later version
// than this rubick's (rubick:v2 and on): a newer rubick wrote it, and this one
// can neither read it nor write over it.
var ErrNewerTag = errors.New("a newer rubick's tag")

// ParseTag parses one "rubick:v1 ..." segment. Errors wrap ErrTag and name
// the offending field and value; ParseTag never panics.
func ParseTag(s string) (Tag, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, tagPrefix)
	if !ok {
		return Tag{}, fmt.Errorf("%w: %q does not start with %q", ErrTag, clip(s), tagPrefix)
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || fields[0] != tagVersion {
		got := ""
		if len(fields) > 0 {
			got = fields[0]
		}
		if newerVersion(got) {
			return Tag{}, fmt.Errorf("%w: version %q, want %q: %w", ErrTag, clip(got), tagVersion, ErrNewerTag)
		}
		return Tag{}, fmt.Errorf("%w: version %q, want %q", ErrTag, clip(got), tagVersion)
	}
	var t Tag
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Tag{}, fmt.Errorf("%w: field %q has no '='", ErrTag, clip(f))
		}
		if !validKey(k) {
			return Tag{}, fmt.Errorf("%w: bad key %q", ErrTag, clip(k))
		}
		if seen[k] {
			return Tag{}, fmt.Errorf("%w: duplicate key %q", ErrTag, k)
		}
		seen[k] = true
		if err := checkValue(k, v); err != nil {
			return Tag{}, err
		}
		switch k {
		case "model":
			t.ModelType = v
		case "class":
			if v != ClassGuaranteed && v != ClassBestEffort {
				return Tag{}, fmt.Errorf("%w: class=%q, want %q or %q", ErrTag, clip(v), ClassGuaranteed, ClassBestEffort)
			}
			t.Class = v
		case "tenant":
			t.Tenant = v
		case "plan":
			t.Plan = v
		case "gen":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || v != strconv.Itoa(n) {
				return Tag{}, fmt.Errorf("%w: gen=%q is not a non-negative integer", ErrTag, clip(v))
			}
			t.Generation = n
		default:
			if v == "" {
				return Tag{}, fmt.Errorf("%w: key %q has an empty value", ErrTag, k)
			}
			if t.Extra == nil {
				t.Extra = map[string]string{}
			}
			t.Extra[k] = v
		}
	}
	return t, nil
}

// String formats the tag; empty fields are left out and unknown keys follow
// the known ones in sorted order, so equal tags give equal strings. Call
// Validate first when the fields come from outside: String does not escape.
func (t Tag) String() string {
	var b strings.Builder
	b.WriteString(tagPrefix + tagVersion)
	add := func(k, v string) {
		if v != "" {
			b.WriteString(" " + k + "=" + v)
		}
	}
	add("model", t.ModelType)
	add("class", t.Class)
	add("tenant", t.Tenant)
	add("plan", t.Plan)
	if t.Generation > 0 {
		add("gen", strconv.Itoa(t.Generation))
	}
	for _, k := range slices.Sorted(maps.Keys(t.Extra)) {
		add(k, t.Extra[k])
	}
	return b.String()
}

// Validate reports whether the tag can be written and read back unchanged.
func (t Tag) Validate() error {
	for _, kv := range [][2]string{{"model", t.ModelType}, {"tenant", t.Tenant}, {"plan", t.Plan}} {
		if err := checkValue(kv[0], kv[1]); err != nil {
			return err
		}
	}
	if t.Class != "" && t.Class != ClassGuaranteed && t.Class != ClassBestEffort {
		return fmt.Errorf("%w: class=%q, want %q or %q", ErrTag, clip(t.Class), ClassGuaranteed, ClassBestEffort)
	}
	if t.Generation < 0 {
		return fmt.Errorf("%w: gen=%d is negative", ErrTag, t.Generation)
	}
	for k, v := range t.Extra {
		if !validKey(k) || isKnownKey(k) {
			return fmt.Errorf("%w: bad extra key %q", ErrTag, clip(k))
		}
		if v == "" {
			return fmt.Errorf("%w: extra key %q has an empty value", ErrTag, k)
		}
		if err := checkValue(k, v); err != nil {
			return err
		}
	}
	return nil
}

// TagFromAdminComment finds rubick's segment in an AdminComment. It returns
// nil and no error when there is none. A legacy "model_type=X" segment, and
// no rubick segment, gives a tag with only ModelType set.
func TagFromAdminComment(ac string) (*Tag, error) {
	var legacy *Tag
	for _, seg := range strings.Split(ac, adminCommentSep) {
		seg = strings.TrimSpace(seg)
		if strings.HasPrefix(seg, tagPrefix) {
			t, err := ParseTag(seg)
			if err != nil {
				return nil, err
			}
			return &t, nil
		}
		if v, ok := strings.CutPrefix(seg, legacyModelKey); ok && legacy == nil && checkValue("model_type", v) == nil && v != "" {
			legacy = &Tag{ModelType: v}
		}
	}
	return legacy, nil
}

// MergeAdminComment returns ac with its rubick segment replaced by t (or t
// appended), keeping every other segment and its order. A malformed or older
// rubick segment is replaced too: rubick owns that segment. A newer one is
// not (CheckTagVersion): its rubick may keep what this one cannot read.
func MergeAdminComment(ac string, t Tag) (string, error) {
	if err := t.Validate(); err != nil {
		return "", err
	}
	if err := CheckTagVersion(ac); err != nil {
		return "", err
	}
	var out []string
	placed := false
	for _, seg := range strings.Split(ac, adminCommentSep) {
		if strings.HasPrefix(strings.TrimSpace(seg), tagPrefix) {
			if !placed {
				out = append(out, t.String())
				placed = true
			}
			continue
		}
		if strings.TrimSpace(seg) == "" {
			continue
		}
		out = append(out, seg)
	}
	if !placed {
		out = append(out, t.String())
	}
	return strings.Join(out, adminCommentSep), nil
}

// CheckTagVersion returns an error wrapping ErrNewerTag, naming the
// segment, when AdminComment ac has a rubick segment of a later version
// than this rubick writes; nil otherwise.
func CheckTagVersion(ac string) error {
	for _, seg := range strings.Split(ac, adminCommentSep) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(seg), tagPrefix)
		if !ok {
			continue
		}
		if f := strings.Fields(rest); len(f) > 0 && newerVersion(f[0]) {
			return fmt.Errorf("%w: AdminComment segment %q is of version %q, this rubick writes %q: left as it is",
				ErrNewerTag, clip(strings.TrimSpace(seg)), f[0], tagVersion)
		}
	}
	return nil
}

// newerVersion reports whether v is a tag version after tagVersion: "v"
// and a larger number, as a later rubick would write it.
func newerVersion(v string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(v, "v"))
	own, _ := strconv.Atoi(strings.TrimPrefix(tagVersion, "v"))
	return err == nil && v == "v"+strconv.Itoa(n) && n > own
}

func isKnownKey(k string) bool {
	switch k {
	case "model", "class", "tenant", "plan", "gen":
		return true
	}
	return false
}

func validKey(k string) bool {
	if k == "" || len(k) > 32 {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// checkValue accepts the characters a plan, model name or account uses and
// rejects the separators of the format (space, '=', ';') and anything a
// careless reader might hand to a shell.
func checkValue(k, v string) error {
	if len(v) > 256 {
		return fmt.Errorf("%w: %s is %d bytes long, at most 256", ErrTag, k, len(v))
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.ContainsRune("._+-:/@,[]", c)) { // [] for hostlists
			return fmt.Errorf("%w: %s=%q contains %q", ErrTag, k, clip(v), c)
		}
	}
	return nil
}

// clip bounds user-controlled text quoted in error messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// UserHoldWord in a job's Comment is its user's hold: job_submit.lua writes
// it for `sbatch --hold` and for the user's `scontrol hold` of a job held
// for rubick, and takes it out for their `scontrol release`. A user can
// write Comment and not AdminComment, and Slurm reports the two holds
// alike (JobHeldUser), so the word is what tells them apart.
const UserHoldWord = "rubick:hold"

// RequeueWord in a job's Comment marks a requeue rubick-srun made itself
// (after a checkpoint signal, or refusing a plan its line cannot run): the
// job waits, held, for rubickd to start it again. The next annotate takes
// it out.
const RequeueWord = "rubick:requeue"

// TagRestarts is the tag key the Applier writes with every tag: the job's
// restart count (Slurm's restart_cnt) then. A requeue since, without
// RequeueWord, was someone else's (RequeuedByOther).
const TagRestarts = "rc"

// TagRan is the tag key of the job's run time before its current run,
// in whole seconds: Slurm's restarts its record of the job at each
// requeue. A restart's acknowledgement carries its tag's (the run that
// requeue ended included) into the job's own tag.
const TagRan = "ran"

// RanTime is the run time the tag's ran= records: 0 without one, an error
// naming the value where it is not whole seconds.
func (t Tag) RanTime() (time.Duration, error) {
	s, ok := t.Extra[TagRan]
	if !ok {
		return 0, nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return 0, fmt.Errorf("tag %s=%q is not whole seconds", TagRan, s)
	}
	return time.Duration(sec) * time.Second, nil
}

// RanSeconds is a tag's ran= value for run time d.
func RanSeconds(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// TagBy is the tag key that names the rubickd that wrote the tag
// (ApplierConfig.Instance). A tag that changes under one rubickd with
// another's name in it shows a second rubickd managing the same cluster.
const TagBy = "by"

// TagMail is the tag key that keeps the MailType a job had before rubick
// took BEGIN and REQUEUE out of it for its own requeue (ApplierConfig's
// RequeueMail off). The job gets it back once it runs again
// (Action.MailType), so that requeues and restarts that are not rubick's
// are mailed as it asked.
const TagMail = "mail"

// TagSubmit is the tag key in which rubickd keeps a job's submission time
// (seconds since 1970) from when it first acts on the job: Slurm moves a
// job's submit time to each requeue.
const TagSubmit = "sub"

// TagProfile is the tag key, set to "1", by which rubickd asks a job's
// rubick-srun for a profiling phase (its model type is not fitted yet):
// such a run trains on other plans than its tag's on purpose.
const TagProfile = "profile"

// mailTagValue writes a MailType ("BEGIN,END,INVALID_DEPEND") as a tag
// value, which has no '_' ("begin,end,invalid-depend"); no mail type has
// a '-'.
func mailTagValue(v string) string { return strings.ReplaceAll(strings.ToLower(v), "_", "-") }

// MailWordPrefix begins the word of a job's Comment that keeps the
// MailType rubick-srun took BEGIN and REQUEUE out of before it requeued
// the job itself: its user may write the Comment, not the AdminComment
// tag. The next annotate moves it into the tag (TagMail), and the job gets
// its mails back as after rubickd's own requeues.
const MailWordPrefix = "rubick:mail="

// MailWord is the Comment word that keeps mailType ("BEGIN,END").
func MailWord(mailType string) string { return MailWordPrefix + mailTagValue(mailType) }

// mailOfComment is the tag value (TagMail) of comment's first mail word
// ("" when it has none, or a malformed one: the user may write it), and
// comment without its mail words.
func mailOfComment(comment string) (value, rest string) {
	rest = comment
	for _, w := range strings.FieldsFunc(comment, isWordSep) {
		v, ok := strings.CutPrefix(w, MailWordPrefix)
		if !ok {
			continue
		}
		rest = WithoutWord(rest, w)
		if value == "" && v != "" && strings.Trim(v, "abcdefghijklmnopqrstuvwxyz0123456789,-") == "" && len(v) <= 128 {
			value = v
		}
	}
	return value, rest
}

// MailTypeOfTag is the MailType t keeps (TagMail), as scontrol takes it;
// "" when it keeps none.
func MailTypeOfTag(t *Tag) string {
	if t == nil {
		return ""
	}
	return strings.ReplaceAll(strings.ToUpper(t.Extra[TagMail]), "-", "_")
}

// HeldByUser reports whether j's user holds it: a pending held job whose
// Comment has UserHoldWord as a word of its own (blanks and ';' separate
// words).
func HeldByUser(j Job) bool {
	return j.State == StatePending && j.Held && HasWord(j.Comment, UserHoldWord)
}

// AdminHoldField, a ';'-separated field of a job's AdminComment, is an
// administrator's `scontrol hold` of a job rubick holds: job_submit.lua
// keeps the job in rubick's hold (Slurm's own hold, JobHeldAdmin, would end
// at the release, which would start the job as submitted) and takes the
// field out at the administrator's release. Its user cannot change it.
const AdminHoldField = "rubick-admin-hold"

// RubickHeldField, a ';'-separated field of a job's AdminComment, says
// that Slurm's administrator hold (JobHeldAdmin) of a pending job is
// rubick's. Slurm names any hold that root's update places, or leaves in
// place, an administrator's: job_submit.lua writes the field where it
// holds a job moved in by root, or keeps the job held at an
// administrator's release, and takes it out at the release that starts the
// job.
const RubickHeldField = "rubick-held"

// HeldByAdmin reports whether an administrator holds pending job j:
// AdminHoldField, or Slurm's hold (JobHeldAdmin) unless RubickHeldField
// says it is rubick's.
func HeldByAdmin(j Job) bool {
	if j.State != StatePending || !j.Held {
		return false
	}
	if hasField(j.AdminComment, AdminHoldField) {
		return true
	}
	return j.Reason == "JobHeldAdmin" && !hasField(j.AdminComment, RubickHeldField)
}

// hasField reports whether name is a ';'-separated field of an
// AdminComment, blanks around it aside.
func hasField(ac, name string) bool {
	for _, f := range strings.Split(ac, adminCommentSep) {
		if strings.TrimSpace(f) == name {
			return true
		}
	}
	return false
}

// RequeuedByOther reports whether pending held job j was requeued since
// rubick last wrote its tag, by someone other than rubick: a user's or an
// administrator's `scontrol requeuehold` (Slurm reports either as the
// user's hold, JobHeldUser, which the user may release), or Slurm's own
// (RequeueExitHold). Its restart count is past the tag's, and rubick-srun
// did not mark the requeue. A tag without the count says nothing.
func RequeuedByOther(j Job) bool {
	if j.State != StatePending || !j.Held {
		return false
	}
	return RequeuedSinceTag(j) && !HasWord(j.Comment, RequeueWord)
}

// RequeuedSinceTag reports whether job j was requeued, by anyone, since
// rubick last wrote its tag: its restart count is past the tag's
// (TagRestarts). A tag without the count says nothing.
func RequeuedSinceTag(j Job) bool {
	if j.Tag == nil {
		return false
	}
	n, err := strconv.Atoi(j.Tag.Extra[TagRestarts])
	return err == nil && j.RestartCount > n
}

// isWordSep separates the words of a Comment, as job_submit.lua reads them.
func isWordSep(r rune) bool { return r == ';' || r == ' ' || r == '\t' || r == '\n' }

// HasWord reports whether word is a word of comment of its own.
func HasWord(comment, word string) bool {
	return slices.Contains(strings.FieldsFunc(comment, isWordSep), word)
}

// WithWord is comment with word appended after a blank, unless it has it.
func WithWord(comment, word string) string {
	switch {
	case HasWord(comment, word):
		return comment
	case comment == "":
		return word
	}
	return comment + " " + word
}

// WithoutWord is comment without word and the separator after it, other
// words kept, blanks trimmed at both ends (as job_submit.lua takes
// UserHoldWord out); comment itself when it lacks the word.
func WithoutWord(comment, word string) string {
	if !HasWord(comment, word) {
		return comment
	}
	out := " " + comment + " "
	for i := 0; i+len(word) < len(out); {
		j := strings.Index(out[i:], word)
		if j < 0 {
			break
		}
		j += i
		end := j + len(word)
		if j > 0 && isWordSep(rune(out[j-1])) && end < len(out) && isWordSep(rune(out[end])) {
			out = out[:j] + out[end+1:]
			i = j
			continue
		}
		i = j + 1
	}
	return strings.Trim(out, " \t\n")
}
