package launch

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"github.com/rubick-sched/rubick/launch/report"
	"github.com/rubick-sched/rubick/model"
)

// Unresolved starts a word, or the part of one, that a batch script leaves
// to its run: a variable it does not set before its rubick-srun line, or a
// command substitution. The name of the variable follows it. It cannot
// occur in a real argument (NUL), so no file read by that name exists and
// no number parses.
const Unresolved = "\x00"

var (
	// ErrNoLaunch is a batch script without a rubick-srun line.
	ErrNoLaunch = errors.New("no rubick-srun line in the batch script")
	// ErrUnresolvable is a rubick-srun line whose arguments only its run
	// tells: one expanding "$@", an array, or a variable it does not set
	// where flags may be, which may hold any flags.
	ErrUnresolvable = errors.New("the rubick-srun line's arguments depend on the script's run")
)

// ShowUnresolved writes the parts of s a script leaves to its run as the
// script wrote them: $NAME, $(...).
func ShowUnresolved(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, Unresolved+"$(", "$("), Unresolved, "$")
}

// ScriptLine is the rubick-srun line of a batch script, read without
// running the script.
type ScriptLine struct {
	// Dialect is rubick-srun's --dialect (DialectAuto when not given).
	Dialect Dialect
	// GlobalBatch is its --global-batch (0 when not given).
	GlobalBatch int
	// Train is the training command, each word as the shell would pass
	// it; words the script leaves to its run hold Unresolved.
	Train []string
	// Signal is its --signal, the checkpoint signal ("" when not given).
	Signal string
	// JobSignal is the script's #SBATCH --signal ("" when none): what the
	// job asks Slurm to send before its time limit.
	JobSignal string
}

// LineFacts is what a launch line read off a batch script tells before its
// job runs: what rubick-srun's launch notice will report.
type LineFacts struct {
	Dialect Dialect
	// Cannot is what the line cannot express.
	Cannot model.Features
	// GlobalBatch is the global batch the line states, 0 when it states
	// none (rubick-srun then writes the plan's into it) or when BatchErr
	// says why it is not known: a DeepSpeed config out of reach, a batch
	// the script sets only when it runs.
	GlobalBatch int
	BatchErr    error
}

// Facts reads sl's dialect, what it cannot express and its global batch,
// reading its DeepSpeed config through readFile (nil: os.ReadFile); gpus
// is what the job asks for (0: unknown), which a Hugging Face Trainer
// line's batch depends on. It fails only when the line's dialect cannot
// be told.
func (sl ScriptLine) Facts(readFile func(name string) ([]byte, error), gpus int) (LineFacts, error) {
	cannot, d, err := Cannot(sl.Train, Options{Dialect: sl.Dialect})
	if err != nil {
		return LineFacts{}, err
	}
	f := LineFacts{Dialect: d, Cannot: cannot}
	f.GlobalBatch, f.BatchErr = GlobalBatch(sl.Train, Options{Dialect: sl.Dialect, GlobalBatch: sl.GlobalBatch, ReadFile: readFile, GPUs: gpus})
	if f.BatchErr == nil && f.GlobalBatch > report.MaxGlobalBatch {
		f.BatchErr = fmt.Errorf("%w: global batch %d is above %d", ErrBadInput, f.GlobalBatch, report.MaxGlobalBatch)
	}
	if f.BatchErr != nil {
		f.GlobalBatch = 0
	}
	return f, nil
}

// FromScript finds the first rubick-srun command of a batch script and
// reads its arguments: literal words, and variables the script sets with
// plain assignments at its top level before the statement that runs
// rubick-srun (unquoted ones split as the shell splits them). It runs
// nothing: command substitutions and other variables are Unresolved.
func FromScript(script string) (sl ScriptLine, err error) {
	// The shell expander panics on some words a script may hold (${X@Q}
	// of a variable the script leaves to its run, whose Unresolved it
	// cannot quote). rubickd reads every user's script: such a line is
	// one rubick cannot read, not the end of the daemon.
	defer func() {
		if r := recover(); r != nil {
			sl, err = ScriptLine{}, fmt.Errorf("%w: expanding the rubick-srun line: %v", ErrUnresolvable, r)
		}
	}()
	if err := parseable(script); err != nil {
		return ScriptLine{}, err
	}
	f, err := syntax.NewParser().Parse(strings.NewReader(script), "")
	if err != nil {
		return ScriptLine{}, fmt.Errorf("%w: batch script: %w", ErrBadInput, err)
	}
	env := scriptEnv{}
	for _, st := range f.Stmts {
		if call := findSrun(st); call != nil {
			args, err := env.fields(call.Args[srunIndex(call)+1:])
			if err != nil {
				return ScriptLine{}, err
			}
			if sl, err = srunLine(args); err != nil {
				return ScriptLine{}, err
			}
			sl.JobSignal, _ = sbatchOption(script, "--signal")
			return sl, nil
		}
		env.apply(st)
	}
	return ScriptLine{}, ErrNoLaunch
}

// maxScriptParse bounds the batch script FromScript parses, and
// maxScriptNesting the characters in it that nest its syntax ('(', '{',
// '`', '|', '&', '!'): the shell parser, and the walks and the expansion
// over its tree, recurse once a level, taking up to a few KiB of stack
// each, so that a script of nothing but "((((" or "a|a|a|" overflowed the
// stack: a fatal error no recover catches, in rubickd, which reads every
// pending job's script. A launch script is a few KiB.
const (
	maxScriptParse   = 64 << 10
	maxScriptNesting = 4096
)

// parseable refuses a script past maxScriptParse or maxScriptNesting.
func parseable(script string) error {
	if len(script) > maxScriptParse {
		return fmt.Errorf("%w: batch script of %d bytes, more than %d", ErrBadInput, len(script), maxScriptParse)
	}
	n := 0
	for i := 0; i < len(script); i++ {
		switch script[i] {
		case '(', '{', '`', '|', '&', '!':
			n++
		}
	}
	if n > maxScriptNesting {
		return fmt.Errorf("%w: batch script with %d of ( { ` | & !, more than %d", ErrBadInput, n, maxScriptNesting)
	}
	return nil
}

// findSrun returns the first command of st that runs rubick-srun, directly
// or through exec or command.
func findSrun(st *syntax.Stmt) *syntax.CallExpr {
	var found *syntax.CallExpr
	syntax.Walk(st, func(n syntax.Node) bool {
		if found != nil {
			return false
		}
		if c, ok := n.(*syntax.CallExpr); ok && srunIndex(c) >= 0 {
			found = c
			return false
		}
		return true
	})
	return found
}

// srunIndex is where rubick-srun is among c's words, -1 when c does not run it.
func srunIndex(c *syntax.CallExpr) int {
	for i, w := range c.Args {
		lit := w.Lit()
		switch {
		case filepath.Base(lit) == "rubick-srun":
			return i
		case lit == "exec" || lit == "command":
			continue
		}
		return -1
	}
	return -1
}

// scriptEnv is the variables a script has set by the statement being read.
type scriptEnv map[string]string

// apply records the plain top-level assignments of st (X=1, export X=1);
// any other statement that may set variables forgets them all, since which
// it sets is only known at its run.
func (e scriptEnv) apply(st *syntax.Stmt) {
	switch c := st.Cmd.(type) {
	case *syntax.CallExpr:
		if len(c.Args) == 0 {
			e.assign(c.Assigns)
			return
		}
		if setsNothing(c) {
			return
		}
	case *syntax.FuncDecl:
		return // defines, runs nothing
	case *syntax.DeclClause:
		if v := c.Variant.Value; v == "export" || v == "readonly" || v == "declare" || v == "typeset" {
			e.assign(c.Args)
			return
		}
	}
	clear(e)
}

// setsNothing is a command that sets no shell variable: anything but a
// builtin that may, and set with options only.
func setsNothing(c *syntax.CallExpr) bool {
	switch c.Args[0].Lit() {
	case "", "source", ".", "eval", "read", "readarray", "mapfile", "unset", "getopts", "printf",
		"declare", "typeset", "export", "readonly", "local", "let", "cd", "pushd", "popd":
		return false
	case "set":
		for _, w := range c.Args[1:] {
			if l := w.Lit(); l == "" || l == "--" || l[0] != '-' && l[0] != '+' && !isShellOption(l) {
				return false
			}
		}
	}
	return true
}

// isShellOption is a name `set -o` takes, as in `set -o pipefail`.
func isShellOption(s string) bool {
	switch s {
	case "errexit", "nounset", "pipefail", "xtrace", "verbose", "noglob", "noclobber", "allexport":
		return true
	}
	return false
}

func (e scriptEnv) assign(as []*syntax.Assign) {
	for _, a := range as {
		if a.Name == nil || a.Naked {
			continue
		}
		name := a.Name.Value
		if a.Append || a.Array != nil || a.Index != nil || a.Value == nil {
			// arrays and appends are not followed; an empty X= is set.
			if a.Value == nil && !a.Append && a.Array == nil && a.Index == nil {
				e[name] = ""
			} else {
				delete(e, name)
			}
			continue
		}
		if e.size(a.Value.Parts) > maxExpandBytes {
			delete(e, name) // left to the run, as a value rubick cannot tell
			continue
		}
		v, err := expand.Literal(e.config(), a.Value)
		if err != nil {
			delete(e, name)
			continue
		}
		// Unresolved parts stay so: X=$DIR/ds.json keeps its name.
		e[name] = unmark(v)
	}
}

func (e scriptEnv) config() *expand.Config {
	return &expand.Config{
		Env: e,
		CmdSubst: func(w io.Writer, _ *syntax.CmdSubst) error {
			_, err := io.WriteString(w, cmdMark)
			return err
		},
		ProcSubst: func(*syntax.ProcSubst) (string, error) { return Unresolved + "<(...)", nil },
	}
}

// fields expands words as the shell would, with Unresolved for what the
// run decides, and fails where that could be any number of flags.
func (e scriptEnv) fields(words []*syntax.Word) ([]string, error) {
	var out []string
	total := 0
	for _, w := range words {
		if many(w) {
			return nil, fmt.Errorf("%w: %q", ErrUnresolvable, clip(wordText(w)))
		}
		n := e.size(w.Parts)
		if n > maxExpandBytes {
			return nil, fmt.Errorf("%w: %q expands to more than %d bytes", ErrBadInput, clip(wordText(w)), maxExpandBytes)
		}
		var fs []string
		for f, err := range expand.FieldsSeq(e.config(), w) {
			if err != nil {
				return nil, fmt.Errorf("%w: %q: %w", ErrUnresolvable, clip(wordText(w)), err)
			}
			// Each field of a word (its braces make many) is charged
			// the word's bound: the work its expansion may take.
			if total += n + 1; total > maxLineBytes {
				return nil, fmt.Errorf("%w: the rubick-srun line expands to more than %d bytes", ErrBadInput, maxLineBytes)
			}
			fs = append(fs, f)
		}
		if bare(w) && len(fs) == 1 && strings.HasPrefix(unmark(fs[0]), Unresolved) && !afterFlag(out) {
			// An unset $ARGS among the flags may hold any of them.
			return nil, fmt.Errorf("%w: %q is not set by the script", ErrUnresolvable, clip(wordText(w)))
		}
		for _, f := range fs {
			out = append(out, unmark(f))
		}
	}
	return out, nil
}

// maxExpandBytes bounds what one word of a script, a variable's value or
// a word of the rubick-srun line, may expand to, and maxLineBytes the
// whole line: a few lines of A=$A$A, or braces such as {1..9999} on many
// words, would otherwise take all of rubickd's memory, which reads every
// pending job's script. A value past the bound is left to the run; a line
// past them is not read.
const (
	maxExpandBytes = 64 << 10
	maxLineBytes   = 1 << 20
)

// size bounds what parts expand to before they are expanded (the fields
// of a word's braces each, not all of them), saturating; a form it does
// not bound is past maxExpandBytes.
func (e scriptEnv) size(parts []syntax.WordPart) int {
	n := 0
	for _, p := range parts {
		n = addSize(n, e.partSize(p))
	}
	return n
}

const unbounded = 1 << 40

func addSize(a, b int) int { return min(a+b, unbounded) }

func mulSize(a, b int) int {
	if a != 0 && b > unbounded/a {
		return unbounded
	}
	return min(a*b, unbounded)
}

func (e scriptEnv) partSize(p syntax.WordPart) int {
	switch p := p.(type) {
	case *syntax.Lit:
		// A tilde may become $HOME (a name's is left to the run).
		return addSize(len(p.Value), mulSize(strings.Count(p.Value, "~"), addSize(e.valueSize("HOME"), 16)))
	case *syntax.SglQuoted:
		return len(p.Value)
	case *syntax.DblQuoted:
		return e.size(p.Parts)
	case *syntax.ParamExp:
		return e.paramSize(p)
	case *syntax.CmdSubst:
		return len(cmdMark)
	case *syntax.ProcSubst:
		return len(Unresolved + "<(...)")
	case *syntax.ArithmExp:
		return 24 // a number
	case *syntax.ExtGlob:
		return len(p.Pattern.Value) + 4
	case *syntax.BraceExp:
		n := 24
		for _, w := range p.Elems {
			n = addSize(n, e.size(w.Parts))
		}
		return n
	}
	return unbounded
}

// valueSize is the length of name's value, or of what stands for it
// when the script leaves it to the run.
func (e scriptEnv) valueSize(name string) int {
	if v, ok := e[name]; ok {
		return len(v)
	}
	return len(Unresolved) + len(name)
}

func (e scriptEnv) paramSize(p *syntax.ParamExp) int {
	if p.Param == nil || p.Flags != nil || p.Width || p.IsSet || p.NestedParam != nil || len(p.Modifiers) > 0 ||
		p.Split != syntax.OptUnset || p.GlobSubst != syntax.OptUnset || p.RcExpand != syntax.OptUnset {
		return unbounded // not bash
	}
	name := p.Param.Value
	v := e.valueSize(name)
	switch {
	case p.Length:
		return 24
	case p.Excl || p.Names != 0:
		// Another variable's value, or the names set.
		n := 64
		for k, val := range e {
			n = addSize(n, len(k)+len(val)+1)
		}
		return n
	case p.Repl != nil:
		// Every match (of the empty string too) replaced.
		return mulSize(v+1, addSize(e.size(p.Repl.With.Parts), 1))
	case p.Exp != nil:
		switch p.Exp.Op {
		case syntax.RemSmallSuffix, syntax.RemLargeSuffix, syntax.RemSmallPrefix, syntax.RemLargePrefix:
			return v
		case syntax.UpperFirst, syntax.UpperAll, syntax.LowerFirst, syntax.LowerAll:
			return mulSize(v, 3) // a case's UTF-8 may be longer
		case syntax.OtherParamOps:
			// Quoted (@Q, @A), case changed or as it is.
			return addSize(mulSize(v, 4), len(name)+64)
		case syntax.AlternateUnset, syntax.AlternateUnsetOrNull, syntax.DefaultUnset, syntax.DefaultUnsetOrNull,
			syntax.ErrorUnset, syntax.ErrorUnsetOrNull, syntax.AssignUnset, syntax.AssignUnsetOrNull:
			if p.Exp.Word == nil {
				return v
			}
			return addSize(v, e.size(p.Exp.Word.Parts))
		}
		return unbounded
	}
	// As it is, or a slice or an index of it.
	return v
}

// cmdMark stands for a command substitution's output until the expansion
// is done: the expander drops NULs from that output, so Unresolved cannot
// be written there.
const cmdMark = "\x01$(...)\x01"

func unmark(s string) string { return strings.ReplaceAll(s, cmdMark, Unresolved+"$(...)") }

// many is a word that expands to a list: "$@", "$*", an array.
func many(w *syntax.Word) bool {
	found := false
	syntax.Walk(w, func(n syntax.Node) bool {
		if p, ok := n.(*syntax.ParamExp); ok && p.Param != nil {
			switch v := p.Param.Value; {
			case v == "@" || v == "*" || p.Index != nil || p.Excl:
				found = true
			case len(v) == 1 && v[0] >= '0' && v[0] <= '9':
				found = true // a positional parameter: the script's own arguments
			}
		}
		return !found
	})
	return found
}

// bare is a word that is one unquoted expansion ($ARGS, $(cat args)),
// which the shell splits into any number of words.
func bare(w *syntax.Word) bool {
	if len(w.Parts) != 1 {
		return false
	}
	switch w.Parts[0].(type) {
	case *syntax.ParamExp, *syntax.CmdSubst:
		return true
	}
	return false
}

// afterFlag is true when the last word so far is a flag (-x, --name), of
// which the next word may be the value.
func afterFlag(words []string) bool {
	if len(words) == 0 {
		return false
	}
	last := words[len(words)-1]
	return strings.HasPrefix(last, "-") && !strings.Contains(last, "=")
}

func wordText(w *syntax.Word) string {
	var b strings.Builder
	_ = syntax.NewPrinter().Print(&b, w)
	return b.String()
}

// Get is the script's value of name; a name it has not set is Unresolved
// followed by the name, but IFS, whose default the shell splits by.
func (e scriptEnv) Get(name string) expand.Variable {
	if v, ok := e[name]; ok {
		return expand.Variable{Set: true, Kind: expand.String, Str: v}
	}
	if name == "IFS" {
		return expand.Variable{}
	}
	return expand.Variable{Set: true, Kind: expand.String, Str: Unresolved + name}
}

// Each implements expand.Environ.
func (e scriptEnv) Each(f func(name string, vr expand.Variable) bool) {
	for k, v := range e {
		if !f(k, expand.Variable{Set: true, Kind: expand.String, Str: v}) {
			return
		}
	}
}

// srunLine reads rubick-srun's own flags off args, as its flag parsing
// does: up to "--" or its first word that is not a flag.
func srunLine(args []string) (ScriptLine, error) {
	var sl ScriptLine
	var srunArgs []string
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !SrunFlag(name) {
			// rubick-srun would stop at it (exit 2) before training.
			return ScriptLine{}, fmt.Errorf("%w: %s is not a rubick-srun flag", ErrBadInput, clip(a))
		}
		if !hasVal && !SrunBoolFlag(name) {
			if i+1 >= len(args) {
				return ScriptLine{}, fmt.Errorf("%w: rubick-srun flag %s has no value", ErrBadInput, a)
			}
			i++
			val = args[i]
		}
		switch name {
		case "dialect":
			d, err := ParseDialect(val)
			if err != nil {
				return ScriptLine{}, err
			}
			sl.Dialect = d
		case "global-batch":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return ScriptLine{}, fmt.Errorf("%w: rubick-srun --global-batch=%q is not a global batch", ErrBadInput, clip(val))
			}
			sl.GlobalBatch = n
		case "signal":
			sl.Signal = val
		case "srun-arg":
			srunArgs = append(srunArgs, val)
		}
	}
	sl.Train = args[i:]
	if len(sl.Train) == 0 {
		return ScriptLine{}, fmt.Errorf("%w: the rubick-srun line has no training command", ErrBadInput)
	}
	// What rubick-srun refuses before it runs anything; a word the script
	// sets only when it runs is left to rubick-srun.
	if !slices.ContainsFunc(srunArgs, func(a string) bool { return strings.Contains(a, Unresolved) }) {
		if err := CheckSrunExtra(srunArgs); err != nil {
			return ScriptLine{}, err
		}
	}
	if err := CheckWrappers(sl.Train); err != nil {
		return ScriptLine{}, err
	}
	return sl, nil
}

// srunFlags are rubick-srun's flags, each true when it takes no value
// (cmd/rubick-srun's TestScriptReadsSrunFlags keeps them in step).
var srunFlags = map[string]bool{
	"plan": false, "dialect": false, "launcher": false, "gpu-bind": false, "cpus-per-task": false, "global-batch": false,
	"signal": false, "scontrol": false, "squeue": false, "srun": false, "scancel": false, "state-dir": false, "checkpoint-dir": false,
	"model-type": false, "report-url": false, "munge": false, "munge-socket": false, "report-skip": false,
	"profile-iters": false, "profile-timeout": false, "profile-run-timeout": false, "plan-wait": false, "local-rank-at": false,
	"log-level": false, "ensure-load": true, "requeue-on-checkpoint": true, "requeue-mail": true, "dry-run": true,
	"as-task": true, "h": true, "help": true, "srun-arg": false,
}

// SrunBoolFlag is true for the rubick-srun flags that take no value.
func SrunBoolFlag(name string) bool { return srunFlags[name] }

// SrunFlags lists rubick-srun's flag names, sorted.
func SrunFlags() []string { return slices.Sorted(maps.Keys(srunFlags)) }

// SrunFlag reports whether name is one of rubick-srun's flags.
func SrunFlag(name string) bool {
	_, ok := srunFlags[name]
	return ok
}

// CheckSamples reports, wrapping ErrNoSamples, why the line's job would
// report no iteration times (the package's CheckSamples).
func (sl ScriptLine) CheckSamples() error {
	return CheckSamples(sl.Train, Options{Dialect: sl.Dialect})
}
