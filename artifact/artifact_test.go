package artifact

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

func TestLoadEmbedded(t *testing.T) {
	set, err := Load(Default())
	if err != nil {
		t.Fatal(err)
	}
	wantModels := []string{"bert", "gpt2", "llama30", "llama7", "roberta", "t5", "vit"}
	if diff := cmp.Diff(wantModels, set.ModelNames()); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	rows := 0
	for _, m := range set.Placements {
		rows += len(m)
	}
	// The artifact README documents 512 measured (plan, placement) rows.
	if rows != 512 {
		t.Errorf("placement rows = %d, want 512", rows)
	}
	gotProfiles := map[string]int{}
	for name, p := range set.Profiles {
		gotProfiles[name] = len(p)
	}
	wantProfiles := map[string]int{"bert": 7, "gpt2": 4, "llama30": 3, "llama7": 3, "roberta": 6, "t5": 7, "vit": 7}
	if diff := cmp.Diff(wantProfiles, gotProfiles); diff != "" {
		t.Errorf("profile rows (-want +got):\n%s", diff)
	}
	base, err := LoadWorkload(Default(), "workload-base")
	if err != nil {
		t.Fatal(err)
	}
	if len(base) != 406 {
		t.Errorf("base trace jobs = %d, want 406", len(base))
	}
}

// An account column, where a trace has one, names each job's account.
func TestReadWorkloadAccount(t *testing.T) {
	const header = "name,submission_time,duration,application,num_gpus,num_cpus,bandwidth,exec_plan,steps,is_sla"
	for _, tc := range []struct{ header, row, want string }{
		{header, "a,0,1,gpt2,1,8,0,ga,10,0", ""},
		{header + ",account", "a,0,1,gpt2,1,8,0,ga,10,0,physics", "physics"},
	} {
		jobs, err := ReadWorkload(strings.NewReader(tc.header+"\n"+tc.row+"\n"), "w.csv")
		if err != nil {
			t.Fatal(err)
		}
		if jobs[0].Account != tc.want {
			t.Errorf("%s: account %q, want %q", tc.header, jobs[0].Account, tc.want)
		}
	}
}

func TestReadWorkloadErrors(t *testing.T) {
	const header = "name,submission_time,duration,application,num_gpus,num_cpus,bandwidth,exec_plan,steps,is_sla\n"
	tests := map[string]struct {
		body string
		want string // substring naming the field and value
	}{
		"nan submit":          {body: "a,NaN,1,gpt2,1,8,0,ga,10,0\n", want: `submission_time="NaN"`},
		"zero gpus":           {body: "a,0,1,gpt2,0,8,0,ga,10,0\n", want: "num_gpus=0 must be in [1, 2097152]"},
		"absurd gpus":         {body: "a,0,1,gpt2,2000000000,8,0,ga,10,0\n", want: "num_gpus=2000000000 must be in [1, 2097152]"},
		"frac steps":          {body: "a,0,1,gpt2,1,8,0,ga,1.5,0\n", want: `steps="1.5"`},
		"short row":           {body: "a,0,1\n", want: "wrong number of fields"},
		"negative cpu":        {body: "a,0,1,gpt2,1,-8,0,ga,10,0\n", want: `num_cpus="-8"`},
		"negative duration":   {body: "a,0,-1,gpt2,1,8,0,ga,10,0\n", want: "duration=-1 must be in [0, 1e+09] seconds"},
		"endless duration":    {body: "a,0,1e300,gpt2,1,8,0,ga,10,0\n", want: "duration=1e+300 must be in [0, 1e+09] seconds"},
		"far submit":          {body: "a,1e300,1,gpt2,1,8,0,ga,10,0\n", want: "submission_time=1e+300 must be in [0, 1e+09] seconds"},
		"negative submit":     {body: "a,-5,1,gpt2,1,8,0,ga,10,0\n", want: "submission_time=-5 must be in [0, 1e+09] seconds"},
		"sla neither 0 nor 1": {body: "a,0,1,gpt2,1,8,0,ga,10,7\n", want: "is_sla=7 must be 0 or 1"},
		"header only":         {body: "", want: "w.csv: no jobs after the header"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ReadWorkload(strings.NewReader(header+tc.body), "w.csv")
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error = %v, want ErrFormat", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

// A models.json of the wrong shape is an error naming the model and the
// field, what it holds and what it should, not encoding/json's own.
func TestLoadMalformedModels(t *testing.T) {
	tests := map[string]struct {
		doc, want string
	}{
		"an array":          {doc: `[]`, want: `models.json: a JSON array, want an object with a "models" object of model types`},
		"models an array":   {doc: `{"models":[]}`, want: "models.json: models is a JSON array, want an object"},
		"a model a number":  {doc: `{"models":{"m":5}}`, want: "models.json: model m: a JSON number, want an object"},
		"layers a string":   {doc: `{"models":{"m":{"layers":"x"}}}`, want: "models.json: model m: layers is a JSON string, want a whole number"},
		"a fraction":        {doc: `{"models":{"m":{"max_micro_batch":{"dp":1.5}}}}`, want: "model m: max_micro_batch is a JSON number 1.5, want a whole number"},
		"env an array":      {doc: `{"models":{"m":{"env":[]}}}`, want: "model m: env is a JSON array, want an object"},
		"parameters a bool": {doc: `{"models":{"m":{"parameters":true}}}`, want: "model m: parameters is a JSON bool, want a number"},
		"cut short":         {doc: `{"models"`, want: "models.json: unexpected end of JSON input"},
		"trailing data":     {doc: `{"models":{"m":` + specOnly + `}} {}`, want: "models.json: invalid character '{' after top-level value"},
		"no model types":    {doc: `{"models":{}}`, want: `models.json has no model types: want {"models": {"NAME": {...}, ...}}`},
		"models left out":   {doc: `{"m":` + specOnly + `}`, want: `models.json: unknown field "m"`},
		"a misspelt key": {doc: `{"models":{"m":` + strings.Replace(specOnly, `"parameters"`, `"paramters"`, 1) + `}}`,
			want: `models.json: model m: unknown field "paramters"`},
		"a misspelt optional key": {doc: `{"models":{"m":` + strings.Replace(specOnly, `{`, `{"max_microbatch":{"dp":4},`, 1) + `}}`,
			want: `models.json: model m: unknown field "max_microbatch"`},
		"no forward time": {doc: `{"models":{"m":` + strings.Replace(specOnly, `,"forward_ms_1gpu":1`, ``, 1) + `}}`,
			want: "models.json: model m: missing forward_ms_1gpu (every model type needs parameters, layers, hidden, heads, seq_len, global_batch, forward_ms_1gpu)"},
		"nothing but optional keys": {doc: `{"models":{"m":{"fitted":{"k_bwd":2}}}}`,
			want: "models.json: model m: missing parameters, layers, hidden, heads, seq_len, global_batch, forward_ms_1gpu ("},
		"a zero": {doc: `{"models":{"m":` + strings.Replace(specOnly, `"heads":2`, `"heads":0`, 1) + `}}`, want: "models.json: bad input: spec m: heads=0 must be > 0 and at most 65536"},
		"a batch with zeros too many": {doc: `{"models":{"m":` + strings.Replace(specOnly, `"global_batch":4`, `"global_batch":2000000000`, 1) + `}}`,
			want: "models.json: bad input: spec m: global_batch=2000000000 must be > 0 and at most 1048576"},
		"an upper-case name": {doc: `{"models":{"GPT13":` + specOnly + `}}`,
			want: `models.json: model "GPT13": a model type name is [a-z0-9][a-z0-9._-]{0,63}, as --model-type takes it`},
		"a name with a space": {doc: `{"models":{"gpt 13":` + specOnly + `}}`, want: `model "gpt 13": a model type name is`},
		"a name too long":     {doc: `{"models":{"` + strings.Repeat("a", 65) + `":` + specOnly + `}}`, want: `model "aaaa`},
		// Before, ignored: the parameter read as 0.
		"a fitted key unknown": {doc: `{"models":{"m":` + strings.Replace(specOnly, `{`, `{"fitted":{"k_bwd":2,"k_sinc":1},`, 1) + `}}`,
			want: "models.json: model m: fitted.k_sinc is not a parameter (have k_bwd, k_sync,"},
		"both names of CPU Adam's parameter": {doc: `{"models":{"m":` + strings.Replace(specOnly, `{`, `{"fitted":{"k_opt_off":4,"k_os_offload":5},`, 1) + `}}`,
			want: "models.json: model m: fitted.k_opt_off=4 but fitted.k_os_offload=5 (one parameter)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Load(fstest.MapFS{"models.json": {Data: []byte(tc.doc)}})
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load error = %v, want ErrFormat saying %q", err, tc.want)
			}
		})
	}
}

// specOnly is a models.json entry with only the fields a model.Spec needs,
// as an administrator writes one for a model type without measurements.
const specOnly = `{"parameters":100,"layers":2,"hidden":8,"heads":2,"seq_len":4,"global_batch":4,"forward_ms_1gpu":1}`

// An entry with only the spec's fields, and no profile or placements,
// loads: its jobs are profiled on the cluster, so it has no fit to start
// from (FitOne says so, rather than calling the data malformed), and a name of up to 64 characters of --model-type's syntax is one.
func TestLoadSpecOnly(t *testing.T) {
	long := "a" + strings.Repeat("b", 61) + ".-"
	set, err := Load(fstest.MapFS{"models.json": {Data: []byte(`{"models":{"gpt-13b_v2.1":` + specOnly + `,"` + long + `":` + specOnly + `}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	want := model.Spec{Name: "gpt-13b_v2.1", Params: 100, Layers: 2, Hidden: 8, Heads: 2, SeqLen: 4, GlobalBatch: 4, ForwardMs: 1}
	if d := cmp.Diff(want, set.Models["gpt-13b_v2.1"].Spec); d != "" {
		t.Errorf("spec (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{long, "gpt-13b_v2.1"}, set.ModelNames()); d != "" {
		t.Errorf("models (-want +got):\n%s", d)
	}
	fits, err := FitAll(context.Background(), set, model.DefaultEnv())
	if err != nil || len(fits) != 0 {
		t.Errorf("FitAll = %v, %v; want no fit", fits, err)
	}
	const say = "gpt-13b_v2.1 has none in profile/gpt-13b_v2.1/ to fit it on"
	if _, err := FitOne(context.Background(), set, model.DefaultEnv(), "gpt-13b_v2.1"); !errors.Is(err, ErrNoProfile) || !strings.Contains(err.Error(), say) {
		t.Errorf("FitOne: %v, want ErrNoProfile saying %q", err, say)
	}
}

func TestLoadMalformedPlacements(t *testing.T) {
	for name, tc := range map[string]struct{ csv, want string }{
		"placement": {"exec_plan,placement,iter_time\nga,80,1.0\n", `"80"`},
		// Every column it lacks, even without rows.
		"header": {"plan,nodes,iter_time\n", `traces/m/placements.csv: missing columns "exec_plan", "placement"`},
	} {
		t.Run(name, func(t *testing.T) {
			fsys := fstest.MapFS{
				"models.json":             {Data: []byte(`{"models":{"m":{"layers":2,"hidden":8,"heads":2,"seq_len":4,"global_batch":4,"parameters":100,"forward_ms_1gpu":1}}}`)},
				"traces/m/placements.csv": {Data: []byte(tc.csv)},
			}
			_, err := Load(fsys)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load error = %v, want ErrFormat naming %s", err, tc.want)
			}
		})
	}
}

// A profile directory with only one of its two files is an error naming
// the missing one; without it, the model silently had no profile and
// `rubick model fit --data` left it out.
func TestLoadHalfAProfile(t *testing.T) {
	const models = `{"models":{"m":{"layers":2,"hidden":8,"heads":2,"seq_len":4,"global_batch":4,"parameters":100,"forward_ms_1gpu":1}}}`
	const cfg = "nodes,gpus,parameter_size,batch_size,seq_hid,num_cpu_threads,zero_type,is_tp,is_pp\n1,2,0.0001,1,64,1,0,0,0\n"
	const dat = "forward_time,Tcc,Topt,iter_time,strategy\n1,2,1,5,1100\n"
	for name, tc := range map[string]struct {
		file, data string
		want       string
	}{
		"no data.csv":   {"profile/m/config.csv", cfg, "profile/m/data.csv"},
		"no config.csv": {"profile/m/data.csv", dat, "profile/m/config.csv"},
	} {
		t.Run(name, func(t *testing.T) {
			fsys := fstest.MapFS{"models.json": {Data: []byte(models)}, tc.file: {Data: []byte(tc.data)}}
			_, err := Load(fsys)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load error = %v, want ErrFormat naming %s", err, tc.want)
			}
		})
	}
}

// A (plan, placement) pair measured twice is refused: rubick model learn
// would score the copy of a row its learner saw as unseen, and validate and
// the simulator would weigh or pick one of the two silently.
func TestLoadDuplicatePlacementRow(t *testing.T) {
	fsys := fstest.MapFS{
		"models.json":             {Data: []byte(`{"models":{"m":{"layers":2,"hidden":8,"heads":2,"seq_len":4,"global_batch":4,"parameters":100,"forward_ms_1gpu":1}}}`)},
		"traces/m/placements.csv": {Data: []byte("exec_plan,placement,iter_time\nga,44,1.0\ngc,44,1.2\nga,44,1.1\n")},
	}
	_, err := Load(fsys)
	const want = "traces/m/placements.csv line 4: exec_plan=ga placement=44 repeats line 2"
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load error = %v, want ErrFormat naming %q", err, want)
	}
}

// Merge keeps base's model types and adds over's; where both have one,
// over's entry wins with its own profile and measurements, none of base's.
func TestMerge(t *testing.T) {
	spec := func(name string, params float64) string {
		return `"` + name + `":` + strings.Replace(specOnly, `"parameters":100`, fmt.Sprintf(`"parameters":%g`, params), 1)
	}
	const placements = "exec_plan,placement,iter_time\nga,2,1.0\n"
	base, err := Load(fstest.MapFS{
		"models.json":             {Data: []byte(`{"models":{` + spec("a", 100) + `,` + spec("b", 100) + `}}`)},
		"traces/a/placements.csv": {Data: []byte(placements)},
		"traces/b/placements.csv": {Data: []byte(placements)},
	})
	if err != nil {
		t.Fatal(err)
	}
	over, err := Load(fstest.MapFS{"models.json": {Data: []byte(`{"models":{` + spec("b", 200) + `,` + spec("c", 300) + `}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	got := Merge(base, over)
	type entry struct {
		Params float64
		Rows   int
	}
	entries := map[string]entry{}
	for _, name := range got.ModelNames() {
		entries[name] = entry{got.Models[name].Spec.Params, len(got.Placements[name])}
	}
	want := map[string]entry{"a": {100, 1}, "b": {200, 0}, "c": {300, 0}}
	if d := cmp.Diff(want, entries); d != "" {
		t.Errorf("merged model types (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"a", "b"}, base.ModelNames()); d != "" || len(base.Placements["b"]) != 1 {
		t.Errorf("Merge changed base: models (-want +got):\n%s, b has %d rows", d, len(base.Placements["b"]))
	}
}

// TestLoadFittedNames: a fitted object in rubick model fit --json's names
// (k_opt_off, k_3d) is read as the artifact's (before, they read as 0).
func TestLoadFittedNames(t *testing.T) {
	doc := `{"models":{"m":` + strings.Replace(specOnly, `{`, `{"fitted":{"k_bwd":2,"k_opt_off":4.5,"k_3d":1.7},`, 1) + `}}`
	set, err := Load(fstest.MapFS{"models.json": {Data: []byte(doc)}})
	if err != nil {
		t.Fatal(err)
	}
	if f := set.Models["m"].Fitted; f.KBwd != 2 || f.KOptOff != 4.5 || f.K3D != 1.7 {
		t.Errorf("fitted %+v, want k_bwd 2, k_opt_off 4.5, k_3d 1.7", f)
	}
}
