// Package artifact loads the measurements rubick ships from the Rubick /
// Morphling artifact (Apache-2.0, see NOTICE): per-model facts, the profiling
// runs the performance model is fitted on, the measured iteration times of
// (plan, placement) pairs, and the job traces. The files are embedded so
// every command has a working default; Dir reads a replacement tree with the
// same layout.
package artifact

import (
	"bytes"
	"embed"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/rubick-sched/rubick/model"
)

//go:embed data
var embedded embed.FS

// ErrFormat reports a malformed data file; the message names file, line and field.
var ErrFormat = errors.New("malformed data")

// ErrNoProfile reports a model type without profiling runs in the data,
// such as one an administrator added with its spec only: nothing fits it
// before rubickd profiles its first job.
var ErrNoProfile = errors.New("no profiling runs")

// Default returns the embedded data tree.
func Default() fs.FS {
	sub, err := fs.Sub(embedded, "data")
	if err != nil { // unreachable: the directory is embedded at build time
		return embedded
	}
	return sub
}

// Dir returns the data tree rooted at dir on disk.
func Dir(dir string) fs.FS { return os.DirFS(dir) }

// Open returns Dir(dir), or Default when dir is empty.
func Open(dir string) fs.FS {
	if dir == "" {
		return Default()
	}
	return Dir(dir)
}

// ModelInfo is one entry of models.json.
type ModelInfo struct {
	Spec model.Spec
	// MaxMicroBatch is the largest per-GPU micro-batch that fits in 80 GB by
	// family key: dp, dp_gc, zero_dp, zero_dp_gc, zero_offload, zero_offload_gc (0 = infeasible).
	MaxMicroBatch map[string]int
	PCIeGBps      float64 // the artifact's per-model PCIe figure
	NVLinkGBps    float64 // the artifact's per-model NVLink figure
	Fitted        model.Params
	RefThroughput float64             // samples/s
	Placements3D  map[string][]string // PTD code -> measured placements
	// Corrections lists the placeholder values of models.json that Load
	// replaced (see corrections.go), one human-readable line each.
	Corrections []string
}

// ProfileRow is one profiling run (profile/<m>/config.csv + data.csv).
type ProfileRow struct {
	Nodes, GPUs   int
	ParamsM       float64 // parameters / 2^20
	Batch         int
	SeqHid        float64
	CPUThreads    int
	ZeroType      int // 0 none, 1 ZeRO-Offload, 2 ZeRO-DP
	IsTP, IsPP    bool
	FwdMs, TccMs  float64
	OptMs, IterMs float64
	Strategy      string // digit code: [0] forward multiplier (2 = checkpointing), [1] accumulation steps, last = zero type
}

// Measurement is one row of traces/<m>/placements.csv.
type Measurement struct {
	ExecPlan  string // ga, gc, zero-dp, zero-offload or a PTD code such as "248"
	Placement model.Placement
	IterS     float64 // measured iteration time for the global batch, seconds
	Line      int
}

// Sample is the measurement as a sample of spec: its plan code read for
// spec on its placement, with the MeasuredThreadsPerGPU CPU threads per
// GPU the row ran with.
func (m Measurement) Sample(spec model.Spec) (model.Sample, error) {
	plan, err := model.ParseExecPlan(spec, m.ExecPlan, m.Placement)
	if err != nil {
		return model.Sample{}, err
	}
	return model.Sample{Plan: plan, IterS: m.IterS,
		Resources: model.Resources{Placement: m.Placement, CPUs: MeasuredThreadsPerGPU * m.Placement.GPUs()}}, nil
}

// Set is the whole data tree.
type Set struct {
	Models     map[string]ModelInfo
	Profiles   map[string][]ProfileRow
	Placements map[string][]Measurement
}

// ModelNames returns the model names in sorted order.
func (s *Set) ModelNames() []string {
	names := make([]string, 0, len(s.Models))
	for n := range s.Models {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Merge returns the model types of base and over, over's where both have
// one: its entry, profile and measurements, none of base's, since those
// were measured on base's model and a spec-only entry of over must be
// profiled anew. base and over are left as they are.
func Merge(base, over *Set) *Set {
	out := &Set{Models: map[string]ModelInfo{}, Profiles: map[string][]ProfileRow{}, Placements: map[string][]Measurement{}}
	maps.Copy(out.Models, base.Models)
	maps.Copy(out.Profiles, base.Profiles)
	maps.Copy(out.Placements, base.Placements)
	for name, m := range over.Models {
		out.Models[name] = m
		out.Profiles[name] = over.Profiles[name]
		out.Placements[name] = over.Placements[name]
	}
	return out
}

// profileDir maps model names to the artifact's profile directory names.
var profileDir = map[string]string{"llama7": "llama7b", "llama30": "llama30b"}

// profilePath is the directory of the model's profile in a data tree.
func profilePath(name string) string {
	if d, ok := profileDir[name]; ok {
		return path.Join("profile", d)
	}
	return path.Join("profile", name)
}

// Load reads models.json, every model's profile and placements.
func Load(fsys fs.FS) (*Set, error) {
	models, err := loadModels(fsys)
	if err != nil {
		return nil, err
	}
	s := &Set{Models: models, Profiles: map[string][]ProfileRow{}, Placements: map[string][]Measurement{}}
	for name := range models {
		prof, err := loadProfile(fsys, profilePath(name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		s.Profiles[name] = prof
		meas, err := loadPlacements(fsys, path.Join("traces", name, "placements.csv"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		s.Placements[name] = meas
	}
	if err := applyCorrections(s); err != nil {
		return nil, err
	}
	return s, nil
}

// jsonProblem says what is wrong with a JSON document that did not decode:
// the field, what it holds and what it should, for a value of another
// type than the field's (whole, when the document is not what); the
// syntax error otherwise.
func jsonProblem(err error, whole string) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		// encoding/json's unknown-field error has no type of its own.
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	want := "a " + te.Type.Kind().String()
	switch te.Type.Kind() {
	case reflect.Int, reflect.Int64:
		want = "a whole number"
	case reflect.Float64:
		want = "a number"
	case reflect.Map, reflect.Struct:
		want = "an object"
	case reflect.Slice:
		want = "an array"
	}
	if te.Field == "" {
		return fmt.Sprintf("a JSON %s, want %s", te.Value, whole)
	}
	return fmt.Sprintf("%s is a JSON %s, want %s", te.Field, te.Value, want)
}

type jsonModel struct {
	Layers        int                 `json:"layers"`
	Hidden        int                 `json:"hidden"`
	Heads         int                 `json:"heads"`
	SeqLen        int                 `json:"seq_len"`
	GlobalBatch   int                 `json:"global_batch"`
	Parameters    float64             `json:"parameters"`
	ForwardMs     float64             `json:"forward_ms_1gpu"`
	RefThroughput float64             `json:"reference_throughput_samples_per_s"`
	MaxMicroBatch map[string]int      `json:"max_micro_batch"`
	Env           map[string]float64  `json:"env"`
	Fitted        map[string]float64  `json:"fitted"`
	Placements3D  map[string][]string `json:"placements_3d"`
}

// specFields are the keys of a models.json entry that make its model.Spec;
// every other key is optional, and only the simulator and rubick model
// validate read them.
var specFields = []string{"parameters", "layers", "hidden", "heads", "seq_len", "global_batch", "forward_ms_1gpu"}

// decodeStrict is json.Unmarshal that also refuses keys v has no field
// for: a misspelt key would otherwise leave its field at 0 or, for an
// optional one, be dropped without a word.
func decodeStrict(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// validTypeName reports whether name is a model type name a job can be
// submitted with: [a-z0-9][a-z0-9._-]{0,63}, the syntax the SPANK plugin
// and job_submit.lua check --model-type against.
func validTypeName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case i > 0 && (r == '.' || r == '_' || r == '-'):
		default:
			return false
		}
	}
	return true
}

// fittedKeys are the parameters a model type's "fitted" object may give:
// the artifact's names, and k_opt_off and k_3d as rubick model fit --json
// writes them.
var fittedKeys = []string{"k_bwd", "k_sync", "k_opt", "k_os_offload", "k_opt_off", "k_off", "k_swap", "k_const", "k_3d"}

func loadModels(fsys fs.FS) (map[string]ModelInfo, error) {
	raw, err := fs.ReadFile(fsys, "models.json")
	if err != nil {
		return nil, fmt.Errorf("read models.json: %w", err)
	}
	// Each model decoded on its own, so that an error names it.
	var doc struct {
		About  string                     `json:"_about"`
		Models map[string]json.RawMessage `json:"models"`
	}
	if err := decodeStrict(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: models.json: %s", ErrFormat, jsonProblem(err, `an object with a "models" object of model types`))
	}
	if len(doc.Models) == 0 {
		return nil, fmt.Errorf(`%w: models.json has no model types: want {"models": {"NAME": {...}, ...}}`, ErrFormat)
	}
	out := make(map[string]ModelInfo, len(doc.Models))
	for name, r := range doc.Models {
		if !validTypeName(name) {
			return nil, fmt.Errorf("%w: models.json: model %q: a model type name is [a-z0-9][a-z0-9._-]{0,63}, as --model-type takes it", ErrFormat, name)
		}
		var m jsonModel
		if err := decodeStrict(r, &m); err != nil {
			return nil, fmt.Errorf("%w: models.json: model %s: %s", ErrFormat, name, jsonProblem(err, "an object"))
		}
		// A key left out reads as 0, which Validate would quote as if
		// it had been written.
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(r, &keys); err != nil {
			return nil, fmt.Errorf("%w: models.json: model %s: %s", ErrFormat, name, jsonProblem(err, "an object"))
		}
		var missing []string
		for _, k := range specFields {
			if _, ok := keys[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("%w: models.json: model %s: missing %s (every model type needs %s)",
				ErrFormat, name, strings.Join(missing, ", "), strings.Join(specFields, ", "))
		}
		spec := model.Spec{
			Name: name, Params: m.Parameters, Layers: m.Layers, Hidden: m.Hidden, Heads: m.Heads,
			SeqLen: m.SeqLen, GlobalBatch: m.GlobalBatch, ForwardMs: m.ForwardMs,
		}
		if err := spec.Validate(); err != nil {
			return nil, fmt.Errorf("%w: models.json: %v", ErrFormat, err)
		}
		f := m.Fitted
		for k := range f {
			if !slices.Contains(fittedKeys, k) {
				return nil, fmt.Errorf("%w: models.json: model %s: fitted.%s is not a parameter (have %s)", ErrFormat, name, k, strings.Join(fittedKeys, ", "))
			}
		}
		// rubick model fit --json writes k_opt_off for the artifact's
		// k_os_offload: either is read, both must agree.
		if v, ok := f["k_opt_off"]; ok {
			if w, both := f["k_os_offload"]; both && w != v {
				return nil, fmt.Errorf("%w: models.json: model %s: fitted.k_opt_off=%v but fitted.k_os_offload=%v (one parameter)", ErrFormat, name, v, w)
			}
			f["k_os_offload"] = v
		}
		out[name] = ModelInfo{
			Spec:          spec,
			MaxMicroBatch: m.MaxMicroBatch,
			PCIeGBps:      m.Env["pcie_gbps"],
			NVLinkGBps:    m.Env["nvlink_gbps"],
			Fitted: model.Params{
				KBwd: f["k_bwd"], KSync: f["k_sync"], KOpt: f["k_opt"], KOptOff: f["k_os_offload"],
				KOff: f["k_off"], KSwap: f["k_swap"], KConst: f["k_const"], K3D: f["k_3d"],
			},
			RefThroughput: m.RefThroughput,
			Placements3D:  m.Placements3D,
		}
	}
	return out, nil
}

// table is a parsed CSV file with a header.
type table struct {
	file   string
	header map[string]int
	rows   [][]string
	lines  []int // the file line of each row
}

// line is the file line of data row i.
func (t *table) line(i int) int { return t.lines[i] }

func readTable(r io.Reader, file string) (*table, error) {
	cr := csv.NewReader(r)
	cr.TrimLeadingSpace = true
	var recs [][]string
	var lines []int
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrFormat, file, err)
		}
		// The file's line, which blank lines and quoted line breaks
		// before it move away from the record's number.
		line, _ := cr.FieldPos(0)
		recs, lines = append(recs, rec), append(lines, line)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: %s: no header", ErrFormat, file)
	}
	t := &table{file: file, header: map[string]int{}, rows: recs[1:], lines: lines[1:]}
	for i, h := range recs[0] {
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff") // as a spreadsheet saves UTF-8
		}
		h = strings.TrimSpace(h)
		if _, dup := t.header[h]; dup {
			return nil, fmt.Errorf("%w: %s: column %q twice in the header", ErrFormat, file, h)
		}
		t.header[h] = i
	}
	return t, nil
}

func openTable(fsys fs.FS, file string) (*table, error) {
	f, err := fsys.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readTable(f, file)
}

// require reports every one of cols the header lacks at once, so that a
// file written by hand is mended in one pass, not one column a run.
func (t *table) require(cols ...string) error {
	var missing []string
	for _, c := range cols {
		if _, ok := t.header[c]; !ok {
			missing = append(missing, strconv.Quote(c))
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: %s: missing column %s", ErrFormat, t.file, missing[0])
	}
	return fmt.Errorf("%w: %s: missing columns %s", ErrFormat, t.file, strings.Join(missing, ", "))
}

// field returns the named column of row i (0-based data row).
func (t *table) field(i int, col string) (string, error) {
	c, ok := t.header[col]
	if !ok {
		return "", fmt.Errorf("%w: %s: missing column %q", ErrFormat, t.file, col)
	}
	if c >= len(t.rows[i]) {
		return "", fmt.Errorf("%w: %s line %d: missing field %q", ErrFormat, t.file, t.line(i), col)
	}
	return strings.TrimSpace(t.rows[i][c]), nil
}

func (t *table) float(i int, col string) (float64, error) {
	s, err := t.field(i, col)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%w: %s line %d: %s=%q is not a finite number", ErrFormat, t.file, t.line(i), col, s)
	}
	return v, nil
}

func (t *table) int(i int, col string) (int, error) {
	v, err := t.float(i, col)
	if err != nil {
		return 0, err
	}
	if v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
		s, _ := t.field(i, col)
		return 0, fmt.Errorf("%w: %s line %d: %s=%q is not a non-negative integer", ErrFormat, t.file, t.line(i), col, s)
	}
	return int(v), nil
}

// rowReader accumulates the first error of a row's field reads.
type rowReader struct {
	t   *table
	i   int
	err error
}

func (r *rowReader) str(col string) string {
	if r.err != nil {
		return ""
	}
	v, err := r.t.field(r.i, col)
	r.err = err
	return v
}

func (r *rowReader) f(col string) float64 {
	if r.err != nil {
		return 0
	}
	v, err := r.t.float(r.i, col)
	r.err = err
	return v
}

func (r *rowReader) n(col string) int {
	if r.err != nil {
		return 0
	}
	v, err := r.t.int(r.i, col)
	r.err = err
	return v
}

// loadProfile reads the profile in dir. It wraps fs.ErrNotExist only when
// both of its files are missing (the model has no profile); one without
// the other is malformed data.
func loadProfile(fsys fs.FS, dir string) ([]ProfileRow, error) {
	cfg, cfgErr := openTable(fsys, path.Join(dir, "config.csv"))
	dat, datErr := openTable(fsys, path.Join(dir, "data.csv"))
	cfgGone, datGone := errors.Is(cfgErr, fs.ErrNotExist), errors.Is(datErr, fs.ErrNotExist)
	switch {
	case cfgGone && datGone:
		return nil, cfgErr
	case cfgGone != datGone:
		missing, have := "config.csv", "data.csv"
		if datGone {
			missing, have = have, missing
		}
		// Not wrapping fs.ErrNotExist: Load skips a model with no profile.
		return nil, fmt.Errorf("%w: %s has %s but no %s", ErrFormat, dir, have, path.Join(dir, missing))
	case cfgErr != nil:
		return nil, cfgErr
	case datErr != nil:
		return nil, datErr
	}
	if err := errors.Join(cfg.require("nodes", "gpus", "parameter_size", "batch_size", "seq_hid", "num_cpu_threads", "zero_type", "is_tp", "is_pp"),
		dat.require("forward_time", "Tcc", "Topt", "iter_time", "strategy")); err != nil {
		return nil, err
	}
	if len(cfg.rows) != len(dat.rows) {
		return nil, fmt.Errorf("%w: %s: config.csv has %d rows, data.csv %d", ErrFormat, dir, len(cfg.rows), len(dat.rows))
	}
	out := make([]ProfileRow, 0, len(cfg.rows))
	for i := range cfg.rows {
		c, d := &rowReader{t: cfg, i: i}, &rowReader{t: dat, i: i}
		p := ProfileRow{
			Nodes: c.n("nodes"), GPUs: c.n("gpus"), ParamsM: c.f("parameter_size"), Batch: c.n("batch_size"),
			SeqHid: c.f("seq_hid"), CPUThreads: c.n("num_cpu_threads"), ZeroType: c.n("zero_type"),
			IsTP: c.n("is_tp") != 0, IsPP: c.n("is_pp") != 0,
			FwdMs: d.f("forward_time"), TccMs: d.f("Tcc"), OptMs: d.f("Topt"), IterMs: d.f("iter_time"),
			Strategy: d.str("strategy"),
		}
		if err := errors.Join(c.err, d.err); err != nil {
			return nil, err
		}
		if p.GPUs <= 0 || p.Nodes <= 0 {
			return nil, fmt.Errorf("%w: %s/config.csv line %d: gpus=%d nodes=%d must be > 0", ErrFormat, dir, cfg.line(i), p.GPUs, p.Nodes)
		}
		if len(p.Strategy) < 3 {
			return nil, fmt.Errorf("%w: %s/data.csv line %d: strategy=%q needs at least 3 digits", ErrFormat, dir, dat.line(i), p.Strategy)
		}
		out = append(out, p)
	}
	return out, nil
}

func loadPlacements(fsys fs.FS, file string) ([]Measurement, error) {
	t, err := openTable(fsys, file)
	if err != nil {
		return nil, err
	}
	if err := t.require("exec_plan", "placement", "iter_time"); err != nil {
		return nil, err
	}
	out := make([]Measurement, 0, len(t.rows))
	// A pair measured twice has no one time: learn would score a drawn
	// row's copy as unseen, validate would count it twice.
	lineOf := map[[2]string]int{}
	for i := range t.rows {
		r := &rowReader{t: t, i: i}
		m := Measurement{ExecPlan: r.str("exec_plan"), IterS: r.f("iter_time"), Line: t.line(i)}
		pl := r.str("placement")
		if r.err != nil {
			return nil, r.err
		}
		if m.Placement, err = model.ParsePlacement(pl); err != nil {
			return nil, fmt.Errorf("%w: %s line %d: %v", ErrFormat, file, t.line(i), err)
		}
		if !(m.IterS > 0) {
			return nil, fmt.Errorf("%w: %s line %d: iter_time=%v must be > 0", ErrFormat, file, t.line(i), m.IterS)
		}
		k := [2]string{m.ExecPlan, m.Placement.String()}
		if first, ok := lineOf[k]; ok {
			return nil, fmt.Errorf("%w: %s line %d: exec_plan=%s placement=%s repeats line %d", ErrFormat, file, t.line(i), k[0], k[1], first)
		}
		lineOf[k] = t.line(i)
		out = append(out, m)
	}
	return out, nil
}

// Job is one row of a workload trace.
type Job struct {
	Name       string
	SubmitS    float64 // submission time, seconds from trace start
	DurationS  float64 // duration on the requested resources, seconds
	App        string  // model type
	GPUs, CPUs int     // requested
	Bandwidth  float64
	ExecPlan   string // requested plan: ga, gc, zero-dp, zero-offload or a PTD code
	Steps      int    // iterations to finish
	Guaranteed bool   // is_sla
	// Account is the submitting account, from an optional account
	// column; empty where the trace has none (the shipped ones).
	Account string
	// File and Line say where the row is, for errors about it.
	File string
	Line int
}

// Where names the row in errors: "FILE line N: job NAME" (no file for
// rows made in code, no job for a row without a name).
func (j Job) Where() string {
	at := fmt.Sprintf("line %d", j.Line)
	if j.File != "" {
		at = j.File + " " + at
	}
	if j.Name == "" {
		return at
	}
	return fmt.Sprintf("%s: job %s", at, j.Name)
}

// Workloads lists the workload files shipped under workloads/.
func Workloads(fsys fs.FS) ([]string, error) {
	ents, err := fs.ReadDir(fsys, "workloads")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".csv") {
			out = append(out, strings.TrimSuffix(e.Name(), ".csv"))
		}
	}
	return out, nil
}

// LoadWorkload reads workloads/<name>.csv from fsys.
func LoadWorkload(fsys fs.FS, name string) ([]Job, error) {
	file := path.Join("workloads", name+".csv")
	f, err := fsys.Open(file)
	if err != nil {
		return nil, fmt.Errorf("workload %q: %w", name, err)
	}
	defer f.Close()
	return ReadWorkload(f, file)
}

// MaxTraceSeconds bounds a trace's submission times and durations: about
// 32 years, past any trace. A replay keeps its clock in float64 seconds,
// which stops resolving its rounds far above that (at 1e300 every job ran
// in no time), and its time limits in time.Durations (292 years at most).
const MaxTraceSeconds = 1e9

// MaxTraceGPUs bounds a trace job's num_gpus: above the largest cluster a
// replay builds (20,000 nodes of 64 GPUs), and small enough that packing
// the request onto nodes costs little. A typo of 2,000,000,000 GPUs
// otherwise took 8 GB and half a minute to refuse.
const MaxTraceGPUs = 1 << 21

// ReadWorkload parses a workload CSV; file names the source in errors.
func ReadWorkload(r io.Reader, file string) ([]Job, error) {
	t, err := readTable(r, file)
	if err != nil {
		return nil, err
	}
	if err := t.require("name", "submission_time", "duration", "application", "num_gpus", "num_cpus",
		"bandwidth", "exec_plan", "steps", "is_sla"); err != nil {
		return nil, err
	}
	out := make([]Job, 0, len(t.rows))
	for i := range t.rows {
		rr := &rowReader{t: t, i: i}
		j := Job{
			Name: rr.str("name"), SubmitS: rr.f("submission_time"), DurationS: rr.f("duration"),
			App: rr.str("application"), GPUs: rr.n("num_gpus"), CPUs: rr.n("num_cpus"),
			Bandwidth: rr.f("bandwidth"), ExecPlan: rr.str("exec_plan"), Steps: rr.n("steps"), File: file, Line: t.line(i),
		}
		sla := rr.n("is_sla")
		j.Guaranteed = sla == 1
		if _, ok := t.header["account"]; ok {
			j.Account = rr.str("account")
		}
		if rr.err != nil {
			return nil, rr.err
		}
		if j.GPUs <= 0 || j.GPUs > MaxTraceGPUs {
			return nil, fmt.Errorf("%w: %s line %d: num_gpus=%d must be in [1, %d]", ErrFormat, file, t.line(i), j.GPUs, MaxTraceGPUs)
		}
		for _, c := range []struct {
			col string
			v   float64
		}{{"submission_time", j.SubmitS}, {"duration", j.DurationS}} {
			if c.v < 0 || c.v > MaxTraceSeconds {
				return nil, fmt.Errorf("%w: %s line %d: %s=%v must be in [0, %g] seconds", ErrFormat, file, t.line(i), c.col, c.v, float64(MaxTraceSeconds))
			}
		}
		if sla > 1 {
			// Any other value read as best-effort silently.
			return nil, fmt.Errorf("%w: %s line %d: is_sla=%d must be 0 or 1", ErrFormat, file, t.line(i), sla)
		}
		out = append(out, j)
	}
	if len(out) == 0 {
		// A replay of nothing prints a table of zeros, as if it had run.
		return nil, fmt.Errorf("%w: %s: no jobs after the header", ErrFormat, file)
	}
	return out, nil
}
