package store

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

func TestModelTypeUpsert(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if _, err := s.ModelType(ctx, "gpt2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ModelType of an empty store = %v, want ErrNotFound", err)
	}
	spec := gpt2()
	if err := s.UpsertModelType(ctx, spec); err != nil { // clock t0
		t.Fatal(err)
	}
	bert := model.Spec{Name: "bert", Params: 3.4e8, Layers: 24, Hidden: 1024, Heads: 16, SeqLen: 512, GlobalBatch: 128, ForwardMs: 100}
	if err := s.UpsertModelType(ctx, bert); err != nil { // t0+1s
		t.Fatal(err)
	}
	spec.GlobalBatch = 128
	if err := s.UpsertModelType(ctx, spec); err != nil { // t0+2s
		t.Fatal(err)
	}
	got, err := s.ModelTypes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []ModelType{
		{Spec: bert, Created: t0.Add(time.Second), Updated: t0.Add(time.Second)},
		{Spec: spec, Created: t0, Updated: t0.Add(2 * time.Second)},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ModelTypes (-want +got):\n%s", d)
	}
}

func TestModelTypeRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*model.Spec)
		want   string
	}{
		"empty name":      {func(s *model.Spec) { s.Name = "" }, "spec.name is empty"},
		"spaced name":     {func(s *model.Spec) { s.Name = " gpt2" }, `spec.name=" gpt2"`},
		"NaN params":      {func(s *model.Spec) { s.Params = math.NaN() }, "parameters=NaN"},
		"zero layers":     {func(s *model.Spec) { s.Layers = 0 }, "layers=0"},
		"zero forward ms": {func(s *model.Spec) { s.ForwardMs = 0 }, "forward_ms_1gpu=0"},
		// JSON cannot hold infinities: they must be refused as input, not
		// fail later as a marshalling error.
		"infinite forward ms": {func(s *model.Spec) { s.ForwardMs = math.Inf(1) }, "forward_ms_1gpu=+Inf"},
		"infinite params":     {func(s *model.Spec) { s.Params = math.Inf(1) }, "parameters=+Inf"},
		// A few zeros too many: planning would spend seconds per placement.
		"absurd batch":  {func(s *model.Spec) { s.GlobalBatch = 2_000_000_000 }, "global_batch=2000000000 must be > 0 and at most 1048576"},
		"absurd params": {func(s *model.Spec) { s.Params = 1e300 }, "parameters=1e+300 must be > 0 and at most 1000000000000000"},
		"absurd layers": {func(s *model.Spec) { s.Layers = 1 << 20 }, "layers=1048576 must be > 0 and at most 65536"},
	} {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, "")
			spec := gpt2()
			tc.mutate(&spec)
			err := s.UpsertModelType(context.Background(), spec)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("UpsertModelType = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

// A replaced spec leaves its type without a current fit, since its fits
// were made against the old spec; every fit, every sample and the old spec
// with the fit that was current under it are kept. The same spec again
// changes nothing.
func TestReplaceSpec(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	old := gpt2()
	if err := s.UpsertModelType(ctx, old); err != nil { // t0
		t.Fatal(err)
	}
	first, err := s.AddFit(ctx, "gpt2", fitWith(0.1), SourceProfile) // t0+1s
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddSamples(ctx, "gpt2", []model.Sample{sample(8, 1, 1, model.Placement{8}, 1.2)}, 7, SourceOnline); err != nil { // t0+2s
		t.Fatal(err)
	}
	fixed := old
	fixed.ForwardMs, fixed.Heads = 700, 32
	replaced, err := s.ReplaceSpec(ctx, fixed) // t0+3s
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(old, replaced); d != "" {
		t.Errorf("ReplaceSpec returned (-want +got):\n%s", d)
	}
	if _, err := s.ReplaceSpec(ctx, fixed); err != nil { // the same again: t0+4s, nothing stored
		t.Fatal(err)
	}
	again := fixed
	again.GlobalBatch = 128
	if _, err := s.ReplaceSpec(ctx, again); err != nil { // t0+5s, no current fit
		t.Fatal(err)
	}
	mt, err := s.ModelType(ctx, "gpt2")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(ModelType{Spec: again, Created: t0, Updated: t0.Add(5 * time.Second)}, mt); d != "" {
		t.Errorf("model type (-want +got):\n%s", d)
	}
	if _, err := s.CurrentFit(ctx, "gpt2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("current fit after the spec changed: %v, want ErrNotFound", err)
	}
	fits, err := s.Fits(ctx, "gpt2")
	if err != nil || len(fits) != 1 || fits[0].ID != first.ID || fits[0].Current {
		t.Errorf("fits = %+v (%v), want the first kept, not current", fits, err)
	}
	if smp, err := s.Samples(ctx, "gpt2"); err != nil || len(smp) != 1 {
		t.Errorf("samples = %d (%v), want the one kept", len(smp), err)
	}
	history, err := s.ReplacedSpecs(ctx, "gpt2")
	if err != nil {
		t.Fatal(err)
	}
	want := []ReplacedSpec{{Spec: old, FitID: first.ID, Replaced: t0.Add(3 * time.Second)}, {Spec: fixed, Replaced: t0.Add(5 * time.Second)}}
	if d := cmp.Diff(want, history); d != "" {
		t.Errorf("replaced specs (-want +got):\n%s", d)
	}
	// A fit made since is current again, as a new type's first fit.
	if f, err := s.AddFit(ctx, "gpt2", fitWith(0.5), SourceOnline); err != nil || !f.Current {
		t.Errorf("first fit on the new spec: %+v (%v), want it current", f, err)
	}
}

// A spec is refused as a new type's is, naming the field, and a type the
// store lacks is not found; neither changes anything.
func TestReplaceSpecRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*model.Spec)
		is     error
		want   string
	}{
		"zero heads":     {func(s *model.Spec) { s.Heads = 0 }, ErrInvalid, "heads=0"},
		"NaN forward ms": {func(s *model.Spec) { s.ForwardMs = math.NaN() }, ErrInvalid, "forward_ms_1gpu=NaN"},
		"unknown type":   {func(s *model.Spec) { s.Name = "gpt3" }, ErrNotFound, `"gpt3"`},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openTest(t, "")
			if err := s.UpsertModelType(ctx, gpt2()); err != nil {
				t.Fatal(err)
			}
			f, err := s.AddFit(ctx, "gpt2", fitWith(0.1), SourceProfile)
			if err != nil {
				t.Fatal(err)
			}
			spec := gpt2()
			tc.mutate(&spec)
			_, err = s.ReplaceSpec(ctx, spec)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReplaceSpec = %v, want %v naming %s", err, tc.is, tc.want)
			}
			if cur, err := s.CurrentFit(ctx, "gpt2"); err != nil || cur.ID != f.ID {
				t.Errorf("current fit %d (%v), want %d kept", cur.ID, err, f.ID)
			}
			if mt, err := s.ModelType(ctx, "gpt2"); err != nil || mt.Spec != gpt2() {
				t.Errorf("spec %+v (%v), want it kept", mt.Spec, err)
			}
		})
	}
}

func fitWith(rmsle float64) model.FitResult {
	return model.FitResult{Params: model.Params{KBwd: 2, KSync: 1 + rmsle, KOpt: 1e-9, KConst: 0.01},
		RMSLE: rmsle, MAPE: 100 * rmsle, Samples: 7, Pinned: []string{"k_off", "k_swap"}}
}

func TestBestFitWins(t *testing.T) {
	for name, tc := range map[string]struct {
		rmsles  []float64
		promote int // index of a fit to promote after adding all, -1 for none
		// wantCurrent is, after each AddFit, the index of the current fit.
		wantCurrent []int
		// addAfter, when > 0, is the RMSLE of one more fit added after the promotion.
		addAfter  float64
		wantFinal int
	}{
		"first fit is current":        {[]float64{0.3}, -1, []int{0}, 0, 0},
		"better replaces":             {[]float64{0.3, 0.1}, -1, []int{0, 1}, 0, 1},
		"worse never replaces":        {[]float64{0.1, 0.3}, -1, []int{0, 0}, 0, 0},
		"equal keeps the incumbent":   {[]float64{0.1, 0.1}, -1, []int{0, 0}, 0, 0},
		"best of many":                {[]float64{0.5, 0.2, 0.4, 0.05, 0.06}, -1, []int{0, 1, 1, 3, 3}, 0, 3},
		"promotion overrides":         {[]float64{0.1, 0.3}, 1, []int{0, 0}, 0, 1},
		"better beats a promoted fit": {[]float64{0.1, 0.3}, 1, []int{0, 0}, 0.2, 2},
		"worse loses to a promoted":   {[]float64{0.1, 0.3}, 1, []int{0, 0}, 0.4, 1},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openTest(t, "")
			if err := s.UpsertModelType(ctx, gpt2()); err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for i, r := range tc.rmsles {
				f, err := s.AddFit(ctx, "gpt2", fitWith(r), SourceOnline)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, f.ID)
				if want := ids[tc.wantCurrent[i]]; (f.ID == want) != f.Current {
					t.Errorf("AddFit %d (rmsle %v): Current=%v, want current fit id %d", i, r, f.Current, want)
				}
				cur, err := s.CurrentFit(ctx, "gpt2")
				if err != nil {
					t.Fatal(err)
				}
				if cur.ID != ids[tc.wantCurrent[i]] {
					t.Errorf("after AddFit %d: current fit id %d, want %d", i, cur.ID, ids[tc.wantCurrent[i]])
				}
			}
			if tc.promote >= 0 {
				if err := s.PromoteFit(ctx, ids[tc.promote]); err != nil {
					t.Fatal(err)
				}
			}
			if tc.addAfter > 0 {
				f, err := s.AddFit(ctx, "gpt2", fitWith(tc.addAfter), SourceOnline)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, f.ID)
			}
			fits, err := s.Fits(ctx, "gpt2")
			if err != nil {
				t.Fatal(err)
			}
			if len(fits) != len(ids) {
				t.Fatalf("Fits returned %d fits, want every one of %d", len(fits), len(ids))
			}
			var current []int
			for i, f := range fits {
				if f.Current {
					current = append(current, i)
				}
			}
			if d := cmp.Diff([]int{tc.wantFinal}, current); d != "" {
				t.Errorf("indexes of current fits (-want +got):\n%s", d)
			}
		})
	}
}

func TestAddFitAs(t *testing.T) {
	for name, tc := range map[string]struct {
		first, second float64 // RMSLEs; the second is added with how
		how           Promotion
		wantSecond    bool // the second fit is current afterwards
	}{
		"never, type without a fit": {0, 0.3, PromoteNever, true},
		"never keeps a worse one":   {0.3, 0.1, PromoteNever, false},
		"always takes a worse one":  {0.1, 0.3, PromoteAlways, true},
		"if better, better":         {0.3, 0.1, PromoteIfBetter, true},
		"if better, worse":          {0.1, 0.3, PromoteIfBetter, false},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openTest(t, "")
			if err := s.UpsertModelType(ctx, gpt2()); err != nil {
				t.Fatal(err)
			}
			if tc.first > 0 {
				if _, err := s.AddFit(ctx, "gpt2", fitWith(tc.first), SourceProfile); err != nil {
					t.Fatal(err)
				}
			}
			f, err := s.AddFitAs(ctx, "gpt2", fitWith(tc.second), SourceOnline, tc.how)
			if err != nil {
				t.Fatal(err)
			}
			cur, err := s.CurrentFit(ctx, "gpt2")
			if err != nil {
				t.Fatal(err)
			}
			if got := cur.ID == f.ID; got != tc.wantSecond || f.Current != tc.wantSecond {
				t.Errorf("second fit current: stored %v, returned %v; want %v", got, f.Current, tc.wantSecond)
			}
		})
	}
	ctx := context.Background()
	s := openTest(t, "")
	if err := s.UpsertModelType(ctx, gpt2()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddFitAs(ctx, "gpt2", fitWith(0.1), SourceOnline, Promotion(7)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "promotion=7") {
		t.Errorf("AddFitAs(promotion 7) = %v, want ErrInvalid naming promotion=7", err)
	}
	if fits, err := s.Fits(ctx, "gpt2"); err != nil || len(fits) != 0 {
		t.Errorf("after a rejected fit: %d fits, %v; want none stored", len(fits), err)
	}
}

func TestFitRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if has, err := s.HasFit(ctx, "gpt2"); err != nil || has {
		t.Fatalf("HasFit before any fit = %v, %v; want false", has, err)
	}
	if _, err := s.CurrentFit(ctx, "gpt2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("CurrentFit before any fit = %v, want ErrNotFound", err)
	}
	// A failed write still reads the clock: this one takes t0.
	if _, err := s.AddFit(ctx, "gpt2", fitWith(0.1), SourceProfile); !errors.Is(err, ErrNotFound) {
		t.Fatalf("AddFit for an unknown model type = %v, want ErrNotFound", err)
	}
	if err := s.UpsertModelType(ctx, gpt2()); err != nil { // t0+1s
		t.Fatal(err)
	}
	r := model.FitResult{Params: model.Params{KBwd: 2.1, KSync: 3.5, KOpt: 1.25e-9, KOptOff: 4e-9, KOff: 2, KSwap: 1.5, KConst: 0.031, K3D: 2.75},
		RMSLE: 0.042, MAPE: 3.9, Samples: 11, Pinned: []string{"k_swap"}, Source: "gpt2-xl profile"}
	got, err := s.AddFit(ctx, "gpt2", r, SourceArtifact) // t0+2s
	if err != nil {
		t.Fatal(err)
	}
	want := Fit{ID: got.ID, ModelType: "gpt2", FitResult: r, Origin: SourceArtifact, Created: t0.Add(2 * time.Second), Current: true}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("AddFit (-want +got):\n%s", d)
	}
	cur, err := s.CurrentFit(ctx, "gpt2")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, cur); d != "" {
		t.Errorf("CurrentFit (-want +got):\n%s", d)
	}
	if has, err := s.HasFit(ctx, "gpt2"); err != nil || !has {
		t.Errorf("HasFit = %v, %v; want true", has, err)
	}
	if err := s.PromoteFit(ctx, 999); !errors.Is(err, ErrNotFound) {
		t.Errorf("PromoteFit(999) = %v, want ErrNotFound", err)
	}
}

func TestAddFitRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		model string
		fit   model.FitResult
		src   Source
		want  string
	}{
		"empty model":      {"", fitWith(0.1), SourceOnline, `model_type=""`},
		"empty origin":     {"gpt2", fitWith(0.1), "", `origin=""`},
		"NaN rmsle":        {"gpt2", model.FitResult{RMSLE: math.NaN()}, SourceOnline, "rmsle=NaN"},
		"negative mape":    {"gpt2", model.FitResult{MAPE: -1}, SourceOnline, "mape_pct=-1"},
		"infinite k_const": {"gpt2", model.FitResult{Params: model.Params{KConst: math.Inf(1)}}, SourceOnline, "params.k_const=+Inf"},
		"negative k_3d":    {"gpt2", model.FitResult{Params: model.Params{K3D: -1}}, SourceOnline, "params.k_3d=-1"},
		"negative k_bwd":   {"gpt2", model.FitResult{Params: model.Params{KBwd: -2}}, SourceOnline, "params.k_bwd=-2"},
		"negative k_const": {"gpt2", model.FitResult{Params: model.Params{KBwd: 2, KConst: -0.5}}, SourceOnline, "params.k_const=-0.5"},
		"negative samples": {"gpt2", model.FitResult{Samples: -3}, SourceOnline, "samples=-3"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openTest(t, "")
			if err := s.UpsertModelType(ctx, gpt2()); err != nil {
				t.Fatal(err)
			}
			_, err := s.AddFit(ctx, tc.model, tc.fit, tc.src)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("AddFit = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
			if fits, _ := s.Fits(ctx, "gpt2"); len(fits) != 0 {
				t.Errorf("a rejected fit was stored: %+v", fits)
			}
		})
	}
}
