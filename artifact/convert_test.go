package artifact

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/rubick-sched/rubick/model"
)

func TestProfileSamples(t *testing.T) {
	spec := model.Spec{Name: "m", Params: 1e9, Layers: 4, Hidden: 8, Heads: 2, SeqLen: 4, GlobalBatch: 32, ForwardMs: 100}
	row := func(gpus, threads int, strategy string) ProfileRow {
		return ProfileRow{Nodes: 1, GPUs: gpus, CPUThreads: threads, Strategy: strategy, FwdMs: 10, TccMs: 20, OptMs: 5, IterMs: 40}
	}
	tests := map[string]struct {
		row  ProfileRow
		want model.Plan
		cpus int
	}{
		"plain dp":     {row: row(8, 1, "1100"), want: model.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, Accum: 1}, cpus: 8},
		"zero-offload": {row: row(4, 4, "1111"), want: model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 8, Accum: 1, ZeRO: 2, Offload: true}, cpus: 16},
		"zero-dp":      {row: row(8, 1, "1102"), want: model.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, Accum: 1, ZeRO: 2}, cpus: 8},
		"checkpoint":   {row: row(2, 1, "2100"), want: model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 16, Accum: 1, Checkpoint: true}, cpus: 2},
		"accumulation": {row: row(2, 1, "1400"), want: model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, Accum: 4}, cpus: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ProfileSamples(spec, []ProfileRow{tc.row})
			if err != nil {
				t.Fatal(err)
			}
			want := model.Sample{
				Plan:      tc.want,
				Resources: model.Resources{Placement: model.Placement{tc.row.GPUs}, CPUs: tc.cpus},
				IterS:     0.04, FwdS: 0.01, CCS: 0.02, OptS: 0.005,
			}
			if diff := cmp.Diff([]model.Sample{want}, got); diff != "" {
				t.Errorf("ProfileSamples (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProfileSampleErrors(t *testing.T) {
	spec := model.Spec{Name: "m", Params: 1e9, Layers: 4, Hidden: 8, Heads: 2, SeqLen: 4, GlobalBatch: 8, ForwardMs: 100}
	ok := ProfileRow{Nodes: 1, GPUs: 2, CPUThreads: 1, Strategy: "1100", IterMs: 40}
	tests := map[string]struct {
		mutate func(*ProfileRow)
		want   string
	}{
		"letter":        {mutate: func(r *ProfileRow) { r.Strategy = "1x00" }, want: `strategy="1x00"`},
		"zero type":     {mutate: func(r *ProfileRow) { r.Strategy = "1103" }, want: "zero type 3"},
		"multiplier":    {mutate: func(r *ProfileRow) { r.Strategy = "3100" }, want: "forward multiplier 3"},
		"no accum":      {mutate: func(r *ProfileRow) { r.Strategy = "1000" }, want: "accumulation steps 0"},
		"short":         {mutate: func(r *ProfileRow) { r.Strategy = "11" }, want: `strategy="11"`},
		"batch":         {mutate: func(r *ProfileRow) { r.GPUs = 3 }, want: "does not split over gpus=3"},
		"tp row":        {mutate: func(r *ProfileRow) { r.IsTP = true }, want: "is_tp"},
		"uneven nodes":  {mutate: func(r *ProfileRow) { r.Nodes = 3 }, want: "gpus=2 nodes=3"},
		"zero iter":     {mutate: func(r *ProfileRow) { r.IterMs = 0 }, want: "iter_time=0"},
		"nan iteration": {mutate: func(r *ProfileRow) { r.IterMs = math.NaN() }, want: "iter_time=NaN"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := ok
			tc.mutate(&r)
			_, err := ProfileSamples(spec, []ProfileRow{r})
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want ErrFormat naming %q", err, tc.want)
			}
		})
	}
}

func TestLoadMalformedProfile(t *testing.T) {
	models := `{"models":{"m":{"layers":2,"hidden":8,"heads":2,"seq_len":4,"global_batch":4,"parameters":100,"forward_ms_1gpu":1}}}`
	cfg := "nodes,gpus,parameter_size,batch_size,seq_hid,num_cpu_threads,zero_type,is_tp,is_pp\n"
	dat := "forward_time,Tcc,Topt,iter_time,strategy\n"
	tests := map[string]struct {
		cfg, dat string
		want     string
	}{
		"nan forward":  {cfg: cfg + "1,2,0.0001,1,64,1,0,0,0\n", dat: dat + "NaN,2,1,5,1100\n", want: `forward_time="NaN"`},
		"zero gpus":    {cfg: cfg + "1,0,0.0001,1,64,1,0,0,0\n", dat: dat + "1,2,1,5,1100\n", want: "gpus=0"},
		"row mismatch": {cfg: cfg + "1,2,0.0001,1,64,1,0,0,0\n", dat: dat, want: "config.csv has 1 rows, data.csv 0"},
		"short row":    {cfg: cfg + "1,2\n", dat: dat + "1,2,1,5,1100\n", want: "wrong number of fields"},
		"missing field": {cfg: "nodes,gpus\n1,2\n", dat: dat + "1,2,1,5,1100\n",
			want: `config.csv: missing columns "parameter_size", "batch_size", "seq_hid", "num_cpu_threads", "zero_type", "is_tp", "is_pp"`},
		// Both files' missing columns at once, even without rows.
		"missing in both": {cfg: "nodes,gpus,parameter_size,batch_size,seq_hid,num_cpu_threads,zero_type,is_tp\n", dat: "forward_time,Tcc,Topt,iter\n",
			want: `config.csv: missing column "is_pp"` + "\n" + `malformed data: profile/m/data.csv: missing columns "iter_time", "strategy"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fsys := fstest.MapFS{
				"models.json":          {Data: []byte(models)},
				"profile/m/config.csv": {Data: []byte(tc.cfg)},
				"profile/m/data.csv":   {Data: []byte(tc.dat)},
			}
			_, err := Load(fsys)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load error = %v, want ErrFormat naming %q", err, tc.want)
			}
		})
	}
}

func TestCorrections(t *testing.T) {
	set, err := Load(Default())
	if err != nil {
		t.Fatal(err)
	}
	l7, l30 := set.Models["llama7"], set.Models["llama30"]
	// llama7's profile measures ~3 s for its global batch on one GPU.
	if f := l7.Spec.ForwardMs; f < 2900 || f > 3100 {
		t.Errorf("llama7 forward = %v ms, want the profile's ~3000", f)
	}
	if l7.Spec.Layers != 32 || l7.Spec.Hidden != 4096 || l7.Spec.SeqLen != 4096 || l7.Spec.GlobalBatch != 8 {
		t.Fatalf("llama7 spec %+v, want 32 layers, hidden 4096, sequence 4096, global batch 8", l7.Spec)
	}
	// Forward FLOPs per token 2 P + 4 L s h: weights plus attention.
	perToken7 := 2*l7.Spec.Params + 4*32*4096*4096
	perToken30 := 2*32.5e9 + 4*60*4096*6656.0
	want := model.Spec{Name: "llama30", Params: 32.5e9, Layers: 60, Hidden: 6656, Heads: 52, SeqLen: 4096, GlobalBatch: 4,
		ForwardMs: l7.Spec.ForwardMs * (4 * perToken30) / (8 * perToken7)}
	if diff := cmp.Diff(want, l30.Spec); diff != "" {
		t.Errorf("llama30 spec (-want +got):\n%s", diff)
	}
	// Shapes follow each profile's seq_hid (hidden x sequence x layers).
	type shape struct{ Layers, Hidden, Heads, SeqLen int }
	wantShapes := map[string]shape{
		"bert":    {24, 1024, 16, 512},  // BERT-large
		"gpt2":    {48, 1600, 25, 1024}, // GPT-2 XL
		"roberta": {24, 1024, 16, 512},
		"vit":     {12, 768, 12, 512},
		"llama7":  {32, 4096, 32, 4096},
		"t5":      {16, 1280, 16, 768}, // seq_hid matches no shape: unchanged
	}
	gotShapes := map[string]shape{}
	for name := range wantShapes {
		sp := set.Models[name].Spec
		gotShapes[name] = shape{sp.Layers, sp.Hidden, sp.Heads, sp.SeqLen}
	}
	if diff := cmp.Diff(wantShapes, gotShapes); diff != "" {
		t.Errorf("shapes (-want +got):\n%s", diff)
	}
	for name, n := range map[string]int{"llama7": 2, "llama30": 2, "gpt2": 1, "bert": 1, "roberta": 1, "vit": 1, "t5": 0} {
		if got := len(set.Models[name].Corrections); got != n {
			t.Errorf("%s: %d corrections recorded, want %d: %q", name, got, n, set.Models[name].Corrections)
		}
	}
	// Every measured plan of the shipped data must parse.
	for name, rows := range set.Placements {
		for _, m := range rows {
			if _, err := model.ParseExecPlan(set.Models[name].Spec, m.ExecPlan, m.Placement); err != nil {
				t.Errorf("%s line %d: %v", name, m.Line, err)
			}
		}
	}
}

func TestFitAll(t *testing.T) {
	set, err := Load(Default())
	if err != nil {
		t.Fatal(err)
	}
	fits, err := FitAll(context.Background(), set, model.DefaultEnv())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(set.ModelNames(), sortedKeys(fits)); diff != "" {
		t.Fatalf("fitted models (-want +got):\n%s", diff)
	}
	for name, f := range fits {
		// The profiles are fitted well in-sample; the regression test on
		// placements.csv below measures out of sample.
		if f.RMSLE > 0.05 {
			t.Errorf("%s: in-sample RMSLE %v", name, f.RMSLE)
		}
		// rubickd warns of a doubted fit: none of the shipped ones is.
		if d := f.Doubts(set.Models[name].Spec); d != nil {
			t.Errorf("%s: doubted: %v", name, d)
		}
	}
	if !strings.Contains(fits["llama30"].Source, "llama7") || fits["llama7"].Source != "" {
		t.Errorf("llama30 source %q, llama7 source %q", fits["llama30"].Source, fits["llama7"].Source)
	}
	// The llama profile is three ZeRO-Offload runs on one node: the backward
	// ratio and the GPU optimizer cannot be seen.
	for _, p := range []string{"k_bwd", "k_opt", "k_sync"} {
		if !contains(fits["llama7"].Pinned, p) {
			t.Errorf("llama7 pinned %v, want %s among them", fits["llama7"].Pinned, p)
		}
	}
	again, err := FitAll(context.Background(), set, model.DefaultEnv())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fits, again); diff != "" {
		t.Errorf("FitAll not deterministic:\n%s", diff)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	s := &Set{Models: map[string]ModelInfo{}}
	for k := range m {
		s.Models[k] = ModelInfo{}
	}
	return s.ModelNames()
}

// Accuracy the model reaches on the shipped data (docs/benchmarks.md). These
// are regression bounds on today's numbers, a little above them; the
// accuracy targets (10 % overall MAPE, 15 % per cell, 40 % max APE) are not
// all met, and docs/benchmarks.md (Against the targets) lists what misses.
const (
	maxOverallMAPEAll   = 17.5 // every row of placements.csv (17.0 %)
	maxOverallMAPEClean = 10.9 // without the README's suspect rows (10.3 %)
	minBestPickClean    = 65   // 65.6 %
	maxRegretClean      = 3.6  // 3.32 %
	maxCellMAPE         = 15   // the target per model x family
)

func TestValidateShipped(t *testing.T) {
	set, err := Load(Default())
	if err != nil {
		t.Fatal(err)
	}
	all, err := Validate(context.Background(), set, model.DefaultEnv(), ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Rows) != 512 {
		t.Fatalf("%d rows predicted, want 512", len(all.Rows))
	}
	suspect := 0
	for _, r := range all.Rows {
		if r.Suspect != "" {
			suspect++
		}
		if !(r.PredictedS > 0) {
			t.Errorf("%s %s %s: prediction %v", r.Model, r.ExecPlan, r.Placement, r.PredictedS)
		}
	}
	if suspect != 81 { // 2 roberta 1-GPU rows and 79 multi-node vit rows
		t.Errorf("%d suspect rows, want 81", suspect)
	}
	overall := func(v *Validation) Accuracy {
		for _, a := range v.Accuracy {
			if a.Model == "all" && a.Family == "all" {
				return a
			}
		}
		t.Fatal("no overall accuracy row")
		return Accuracy{}
	}
	if a := overall(all); a.Rows != 512 || a.MAPEPct > maxOverallMAPEAll {
		t.Errorf("overall over all rows: %+v, want 512 rows and MAPE <= %v", a, maxOverallMAPEAll)
	}
	clean, err := Validate(context.Background(), set, model.DefaultEnv(), ValidateOptions{ExcludeSuspect: true})
	if err != nil {
		t.Fatal(err)
	}
	if a := overall(clean); a.Rows != 431 || a.MAPEPct > maxOverallMAPEClean {
		t.Errorf("overall without suspect rows: %+v, want 431 rows and MAPE <= %v", a, maxOverallMAPEClean)
	}
	pc := clean.PlanChoice[len(clean.PlanChoice)-1]
	if pc.Model != "all" || pc.BestPickPct < minBestPickClean || pc.RegretPctAvg > maxRegretClean {
		t.Errorf("plan choice without suspect rows: %+v, want best pick >= %v %% and regret <= %v %%", pc, minBestPickClean, maxRegretClean)
	}
	// Every cell meets the bound but those docs/benchmarks.md explains:
	// t5's 3D rows and vit's bimodal multi-node data-parallel rows.
	missed := []string{"t5 3d", "vit ga", "vit gc", "vit zero-dp"}
	for _, a := range all.Accuracy {
		if a.Family != "all" && !contains([]string{"ga", "gc", "zero-dp", "zero-offload", "3d"}, a.Family) {
			t.Errorf("unknown family %q", a.Family)
		}
		if a.Model != "all" && a.Family != "all" && a.MAPEPct > maxCellMAPE && !contains(missed, a.Model+" "+a.Family) {
			t.Errorf("%s %s: MAPE %.1f %%, want <= %v %%", a.Model, a.Family, a.MAPEPct, maxCellMAPE)
		}
	}
}

func TestMemoryVerdicts(t *testing.T) {
	set, err := Load(Default())
	if err != nil {
		t.Fatal(err)
	}
	vs, err := MemoryVerdicts(set, model.DefaultEnv())
	if err != nil {
		t.Fatal(err)
	}
	agree := 0
	var miss []string
	for _, v := range vs {
		if v.Agrees() {
			agree++
		} else {
			miss = append(miss, v.Model+"/"+v.Key)
		}
	}
	// docs/model.md: 27 of 30; the misses are llama30 (its table is a copy
	// of llama7's and cannot hold for a 30B model) and llama7's
	// zero_offload row (see docs/model.md).
	want := []string{"llama30/zero_dp", "llama30/zero_offload", "llama7/zero_offload"}
	if len(vs) != 30 || agree != 27 {
		t.Errorf("%d of %d verdicts agree, want 27 of 30", agree, len(vs))
	}
	if diff := cmp.Diff(want, miss); diff != "" {
		t.Errorf("disagreements (-want +got):\n%s", diff)
	}
}

func BenchmarkFitAll(b *testing.B) {
	set, err := Load(Default())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := FitAll(context.Background(), set, model.DefaultEnv()); err != nil {
			b.Fatal(err)
		}
	}
}

// Rotations of a placement share a key; a node of 10 or more GPUs is
// rotated whole.
func TestRotationKey(t *testing.T) {
	for _, tc := range []struct {
		pl   model.Placement
		want string
	}{
		{model.Placement{8}, "8"},
		{model.Placement{4, 1, 1, 1, 1}, "11114"},
		{model.Placement{1, 4, 1, 1, 1}, "11114"},
		{model.Placement{16, 8}, "8-16"},
		{model.Placement{8, 16}, "8-16"},
		{model.Placement{16, 16}, "2x16"},
		{model.Placement{12, 10, 12, 10}, "10-12-10-12"},
	} {
		if got := rotationKey(tc.pl); got != tc.want {
			t.Errorf("rotationKey(%v) = %q, want %q", []int(tc.pl), got, tc.want)
		}
	}
}
