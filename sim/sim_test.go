package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rubick-sched/rubick/artifact"
	"github.com/rubick-sched/rubick/model"
	"github.com/rubick-sched/rubick/policy"
)

// testData fits the embedded data once for the whole package.
var testData = sync.OnceValues(func() (*Data, error) {
	return Prepare(context.Background(), artifact.Default(), DefaultConfig())
})

func data(t *testing.T) *Data {
	t.Helper()
	d, err := testData()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPlanCode(t *testing.T) {
	tests := map[string]struct {
		plan model.Plan
		want string
	}{
		"data parallel":            {model.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 4, Accum: 1}, "ga"},
		"accumulation":             {model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 2, Accum: 4}, "ga"},
		"checkpointing":            {model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 8, Accum: 1, Checkpoint: true}, "gc"},
		"zero":                     {model.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, ZeRO: 2}, "zero-dp"},
		"zero-3":                   {model.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, ZeRO: 3}, "zero-dp"},
		"offload":                  {model.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1, ZeRO: 2, Offload: true}, "zero-offload"},
		"zero with checkpointing":  {model.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1, ZeRO: 2, Checkpoint: true}, ""},
		"3d":                       {model.Plan{DP: 4, TP: 4, PP: 3, MicroBatch: 1, Accum: 1}, "344"},
		"tensor only":              {model.Plan{DP: 1, TP: 5, PP: 1, MicroBatch: 16, Accum: 1}, "151"},
		"degree above nine":        {model.Plan{DP: 16, TP: 2, PP: 1, MicroBatch: 1, Accum: 1}, ""},
		"3d with checkpointing":    {model.Plan{DP: 2, TP: 4, PP: 2, MicroBatch: 2, Accum: 1, Checkpoint: true}, "242"},
		"pipeline with accumulate": {model.Plan{DP: 1, TP: 4, PP: 6, MicroBatch: 1, Accum: 4}, "641"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := PlanCode(tc.plan); got != tc.want {
				t.Errorf("PlanCode(%s) = %q, want %q", tc.plan, got, tc.want)
			}
		})
	}
}

func TestOracleMatching(t *testing.T) {
	d := data(t)
	gaPlan := func(g int) model.Plan { return model.Plan{DP: g, TP: 1, PP: 1, MicroBatch: 32 / g, Accum: 1} }
	tests := map[string]struct {
		model  string
		plan   model.Plan
		pl     model.Placement
		iter   float64 // 0: do not check
		source Source
	}{
		// bert,ga,112 = 0.319 s; rotations match exactly.
		"exact":               {"bert", gaPlan(4), model.Placement{1, 1, 2}, 0.319, Measured},
		"rotation":            {"bert", gaPlan(4), model.Placement{2, 1, 1}, 0.319, Measured},
		"rotation of another": {"bert", gaPlan(4), model.Placement{1, 2, 1}, 0.319, Measured},
		// bert,ga,11222 = 0.268 s; 12122 is no rotation of it, only a permutation.
		"permutation": {"bert", gaPlan(8), model.Placement{1, 2, 1, 2, 2}, 0.268, MeasuredPermuted},
		// Nothing measured for bert on two full nodes.
		"fallback": {"bert", model.Plan{DP: 16, TP: 1, PP: 1, MicroBatch: 2, Accum: 1}, model.Placement{8, 8}, 0, Fallback},
		// llama7,244,8888 = 0.943 s.
		"3d": {"llama7", model.Plan{DP: 4, TP: 4, PP: 2, MicroBatch: 1, Accum: 2}, model.Placement{8, 8, 8, 8}, 0.943, Measured},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := d.Oracle.IterTime(tc.model, tc.plan, tc.pl, 8*tc.pl.GPUs())
			if err != nil {
				t.Fatal(err)
			}
			if got.Source != tc.source {
				t.Errorf("source = %d, want %d", got.Source, tc.source)
			}
			if tc.iter > 0 && math.Abs(got.IterS-tc.iter) > 0.001 {
				t.Errorf("iteration = %.4f s, want %.3f", got.IterS, tc.iter)
			}
			if !(got.IterS > 0) {
				t.Errorf("iteration = %v, want > 0", got.IterS)
			}
		})
	}
}

// Without suspect rows, roberta's 1-GPU ga time (705 ms, equal to its 2-GPU
// time) is no longer ground truth: the model prices it.
func TestOracleExcludeSuspect(t *testing.T) {
	d := data(t)
	plan := model.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: d.Predictors["roberta"].Spec.GlobalBatch, Accum: 1}
	for _, exclude := range []bool{false, true} {
		o := NewOracle(d.Set, d.Predictors, artifact.MeasuredThreadsPerGPU, exclude)
		got, err := o.IterTime("roberta", plan, model.Placement{1}, 4)
		if err != nil {
			t.Fatal(err)
		}
		want, wantSource := 0.7054, Measured
		if exclude {
			b, err := d.Predictors["roberta"].Predict(plan, model.Resources{Placement: model.Placement{1}, CPUs: 4})
			if err != nil {
				t.Fatal(err)
			}
			want, wantSource = b.Iter, Fallback
		}
		if got.Source != wantSource || math.Abs(got.IterS-want) > 1e-3 {
			t.Errorf("exclude=%v: %.4f s from source %d, want %.4f s from %d", exclude, got.IterS, got.Source, want, wantSource)
		}
	}
}

func TestOracleScalesOffloadWithCPUs(t *testing.T) {
	d := data(t)
	// llama7,zero-offload,8 = 9.401 s, measured with 4 CPU Adam threads per GPU.
	plan := model.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, Accum: 1, ZeRO: 2, Offload: true}
	ref, err := d.Oracle.IterTime("llama7", plan, model.Placement{8}, 32)
	if err != nil {
		t.Fatal(err)
	}
	fewer, err := d.Oracle.IterTime("llama7", plan, model.Placement{8}, 8)
	if err != nil {
		t.Fatal(err)
	}
	if ref.CPUScaled || math.Abs(ref.IterS-9.401) > 0.001 {
		t.Errorf("at the measured CPUs: %+v, want the measured 9.401 s unscaled", ref)
	}
	if !fewer.CPUScaled || !(fewer.IterS > ref.IterS) {
		t.Errorf("with 8 CPUs: %+v, want a scaled time above %.3f s", fewer, ref.IterS)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := map[string]struct {
		mutate func(*Config)
		field  string
	}{
		"default":       {func(*Config) {}, ""},
		"no nodes":      {func(c *Config) { c.Nodes = 0 }, "Nodes"},
		"huge nodes":    {func(c *Config) { c.GPUsPerNode = 65 }, "GPUsPerNode"},
		"no cpus":       {func(c *Config) { c.CPUsPerNode = 0 }, "CPUsPerNode"},
		"no memory":     {func(c *Config) { c.MemPerNodeGB = 0 }, "MemPerNodeGB"},
		"fast interval": {func(c *Config) { c.Interval = time.Millisecond }, "Interval"},
		"slow interval": {func(c *Config) { c.Interval = c.MaxTime + time.Second }, "Interval=72h0m1s must be <= MaxTime"},
		"negative cost": {func(c *Config) { c.RestartPenalty = -time.Second }, "RestartPenalty"},
		"negative told": {func(c *Config) { c.AssumedRestartCost = -time.Second }, "AssumedRestartCost"},
		"zero load":     {func(c *Config) { c.LoadScale = 0 }, "LoadScale"},
		"nan load":      {func(c *Config) { c.LoadScale = math.NaN() }, "LoadScale"},
		"negative over": {func(c *Config) { c.TimeLimitOver = -1 }, "TimeLimitOver"},
		"nan refit":     {func(c *Config) { c.RefitThreshold = math.NaN() }, "RefitThreshold"},
		"nan over":      {func(c *Config) { c.TimeLimitOver = math.NaN() }, "TimeLimitOver"},
		"no half-life":  {func(c *Config) { c.FairShareAccounts, c.FairShareHalfLife = AccountsByModel, 0 }, "FairShareHalfLife"},
		"accounts":      {func(c *Config) { c.FairShareAccounts = "user" }, "FairShareAccounts"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mutate(&c)
			err := c.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Validate() = %v, want ErrBadConfig naming %s", err, tc.field)
			}
		})
	}
}

// Overestimated time limits are fixed per job name, within [1, 1+over],
// and spread over that range.
func TestOverestimate(t *testing.T) {
	lo, hi := math.Inf(1), 0.0
	for i := range 200 {
		name := fmt.Sprintf("job-%d", i)
		f := overestimate(name, 3)
		if f < 1 || f > 4 || f != overestimate(name, 3) {
			t.Fatalf("overestimate(%s, 3) = %v (then %v), want a fixed value in [1, 4]", name, f, overestimate(name, 3))
		}
		lo, hi = min(lo, f), max(hi, f)
	}
	if lo > 1.2 || hi < 3.8 {
		t.Errorf("200 factors span [%.2f, %.2f], want most of [1, 4]", lo, hi)
	}
	if f := overestimate("job-1", 0); f != 1 {
		t.Errorf("overestimate with 0 = %v, want 1 (exact limits)", f)
	}
}

// secs saturates past time.Duration's range instead of wrapping around.
func TestSecs(t *testing.T) {
	got := []time.Duration{secs(1.5), secs(-2), secs(1.4e10), secs(1e300), secs(-1e300)}
	want := []time.Duration{1500 * time.Millisecond, -2 * time.Second, math.MaxInt64, math.MaxInt64, math.MinInt64}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("secs (-want +got):\n%s", diff)
	}
}

// A load scale that stretches an arrival past what a replay times is an
// error naming the job, its submission time and the scale.
func TestLoadScaleTooSmall(t *testing.T) {
	d := data(t)
	cfg := DefaultConfig()
	cfg.LoadScale = 1e-6
	rows := []artifact.Job{{Name: "bert-0", SubmitS: 47550, App: "bert", GPUs: 4, CPUs: 32, ExecPlan: "ga", Steps: 100, Line: 7}}
	err := CheckTrace(cfg, d, rows)
	want := "bad trace: line 7: job bert-0: submission_time=47550 at load scale 1e-06 arrives 4.76e+10 s into the replay, past the 1e+09 s it times"
	if err == nil || err.Error() != want {
		t.Errorf("CheckTrace = %v, want %q", err, want)
	}
	cfg.LoadScale = 1e-4
	if err := CheckTrace(cfg, d, rows); err != nil {
		t.Errorf("at load scale 1e-4: %v", err)
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	got := []float64{percentile(xs, 50), percentile(xs, 99), percentile(xs, 100), percentile(nil, 50)}
	if diff := cmp.Diff([]float64{5, 10, 10, 0}, got); diff != "" {
		t.Errorf("percentiles (-want +got):\n%s", diff)
	}
}

// TestRunNaive replays the artifact's 10-job trace with every policy and
// checks what must hold whatever the policy: every job completes, no job
// beats the lower bound, the accounting adds up, and replays repeat.
func TestRunNaive(t *testing.T) {
	d := data(t)
	rows, err := artifact.LoadWorkload(artifact.Default(), "naive")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			run := func() *Result {
				p, err := policy.New(name, policy.DefaultConfig())
				if err != nil {
					t.Fatal(err)
				}
				r, err := Run(context.Background(), cfg, d, rows, p, nil)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			r := run()
			if r.Completed != len(rows) || r.Jobs != len(rows) {
				t.Fatalf("completed %d of %d jobs", r.Completed, r.Jobs)
			}
			if r.AvgJCT < r.Bound.AvgJCT-1e-6 || r.Makespan < r.Bound.Makespan-1e-6 {
				t.Errorf("beats the lower bound: avg %.0f < %.0f or makespan %.0f < %.0f", r.AvgJCT, r.Bound.AvgJCT, r.Makespan, r.Bound.Makespan)
			}
			if r.P50JCT > r.P99JCT || r.P99JCT > r.Makespan {
				t.Errorf("percentiles out of order: p50 %.0f p99 %.0f makespan %.0f", r.P50JCT, r.P99JCT, r.Makespan)
			}
			if r.GPUUtil <= 0 || r.GPUUtil > 1 {
				t.Errorf("gpu_util = %v, want in (0, 1]", r.GPUUtil)
			}
			if r.Starts != len(rows) {
				t.Errorf("starts = %d, want one per job (%d)", r.Starts, len(rows))
			}
			// The per-model split adds up to the whole trace.
			jobs, done, sum := 0, 0, 0.0
			for _, m := range r.Models {
				if m.All.Jobs != m.Guaranteed.Jobs+m.BestEffort.Jobs {
					t.Errorf("model split %+v: classes do not add up", m)
				}
				jobs, done, sum = jobs+m.All.Jobs, done+m.All.Completed, sum+m.All.AvgJCT*float64(m.All.Completed)
			}
			if jobs != r.Jobs || done != r.Completed || math.Abs(sum/float64(done)-r.AvgJCT) > 1e-6 {
				t.Errorf("models add up to %d jobs, %d done, avg %.3f; want %d, %d, %.3f", jobs, done, sum/float64(done), r.Jobs, r.Completed, r.AvgJCT)
			}
			if r.FallbackJobS+r.PermutedJobS > r.ProgressJobS+1e-6 {
				t.Errorf("fallback %.0f + permuted %.0f exceed progress %.0f", r.FallbackJobS, r.PermutedJobS, r.ProgressJobS)
			}
			// Fallback progress is priced by the policy's own model, so it
			// can be mispriced only where the CPU count scales a measurement.
			if r.MispricedJobS > r.ProgressJobS-r.FallbackJobS+r.CPUScaledJobS+1e-6 {
				t.Errorf("mispriced %.0f exceeds measured progress %.0f", r.MispricedJobS, r.ProgressJobS-r.FallbackJobS+r.CPUScaledJobS)
			}
			again := run()
			opts := cmp.Options{cmp.AllowUnexported(Result{}), cmp.FilterPath(func(p cmp.Path) bool {
				switch p.Last().String() {
				case ".RoundMsAvg", ".RoundMsMax", ".roundTotal":
					return true // wall-clock time of the policy
				}
				return false
			}, cmp.Ignore())}
			if diff := cmp.Diff(r, again, opts); diff != "" {
				t.Errorf("two replays differ:\n%s", diff)
			}
		})
	}
}

// TestRestartPenaltyCounts checks the penalty on the first start: a lone
// job takes exactly its run time plus the penalty, rounded up to the
// interval at which it arrives.
func TestRestartPenaltyCounts(t *testing.T) {
	d := data(t)
	rows := []artifact.Job{{Name: "bert-0", SubmitS: 0, App: "bert", GPUs: 1, CPUs: 8, ExecPlan: "ga", Steps: 1000, Line: 2}}
	for _, pen := range []time.Duration{0, 260 * time.Second} {
		cfg := DefaultConfig()
		cfg.RestartPenalty = pen
		p, _ := policy.New("fifo", policy.DefaultConfig())
		r, err := Run(context.Background(), cfg, d, rows, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := pen.Seconds() + 1000*0.657 // bert,ga,1 = 0.657 s
		if math.Abs(r.AvgJCT-want) > 0.5 {
			t.Errorf("penalty %v: JCT %.1f s, want %.1f", pen, r.AvgJCT, want)
		}
	}
}

// toldPolicy records the restart cost its snapshots carry.
type toldPolicy struct {
	policy.Policy
	told []time.Duration
}

func (p *toldPolicy) Decide(ctx context.Context, s *policy.Snapshot) (policy.Plan, error) {
	p.told = append(p.told, s.RestartCost)
	return p.Policy.Decide(ctx, s)
}

// The policy is told AssumedRestartCost; the replay still charges the
// penalty.
func TestAssumedRestartCost(t *testing.T) {
	d := data(t)
	rows := []artifact.Job{{Name: "bert-0", SubmitS: 0, App: "bert", GPUs: 1, CPUs: 8, ExecPlan: "ga", Steps: 1000, Line: 2}}
	for _, tc := range []struct{ assumed, told time.Duration }{{0, 260 * time.Second}, {30 * time.Second, 30 * time.Second}} {
		cfg := DefaultConfig()
		cfg.AssumedRestartCost = tc.assumed
		fifo, _ := policy.New("fifo", policy.DefaultConfig())
		p := &toldPolicy{Policy: fifo}
		r, err := Run(context.Background(), cfg, d, rows, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.told) == 0 || p.told[0] != tc.told {
			t.Errorf("assumed %v: the policy was told %v, want %v", tc.assumed, p.told, tc.told)
		}
		if want := 260 + 1000*0.657; math.Abs(r.AvgJCT-want) > 0.5 {
			t.Errorf("assumed %v: JCT %.1f s, want the 260 s penalty charged: %.1f", tc.assumed, r.AvgJCT, want)
		}
	}
}

// A trace row the replay cannot run is an error naming the file, line,
// job, column and value, from CheckTrace and from Run alike.
func TestRunRejectsBadTrace(t *testing.T) {
	d := data(t)
	p, _ := policy.New("fifo", policy.DefaultConfig())
	ok := artifact.Job{Name: "bert-0", App: "bert", GPUs: 4, CPUs: 32, ExecPlan: "ga", Steps: 10, File: "w.csv", Line: 2}
	with := func(f func(*artifact.Job)) artifact.Job {
		j := ok
		j.Name, j.Line = "x-1", 3
		f(&j)
		return j
	}
	tests := map[string]struct {
		row  artifact.Job
		want string
	}{
		"unknown model": {with(func(j *artifact.Job) { j.App = "gpt5" }),
			`bad trace: w.csv line 3: job x-1: application="gpt5" is not a model type of the data (have bert, gpt2, llama30, llama7, roberta, t5, vit)`},
		"malformed plan": {with(func(j *artifact.Job) { j.ExecPlan = "zero-2" }),
			`bad trace: w.csv line 3: job x-1: exec_plan="zero-2" with num_gpus=4: bad input: exec plan "zero-2" is not ga, gc, zero-dp, zero-offload or a PTD code of three digits 1-9`},
		"plan of other GPUs": {with(func(j *artifact.Job) { j.ExecPlan = "222" }),
			`bad trace: w.csv line 3: job x-1: exec_plan="222" with num_gpus=4: invalid plan: exec plan "222" uses 8 GPUs, placement 4 has 4`},
		"batch does not split": {with(func(j *artifact.Job) { j.GPUs = 3 }),
			`bad trace: w.csv line 3: job x-1: exec_plan="ga" with num_gpus=3: invalid plan: exec plan "ga": global batch 32 does not split over 3 GPUs`},
		"plan no GPU holds": {with(func(j *artifact.Job) { j.App, j.GPUs, j.CPUs = "llama30", 1, 8 }),
			`bad trace: w.csv line 3: job x-1: exec_plan="ga" with num_gpus=1: plan does not fit in memory: llama30 plan dp1.tp1.pp1.mb1.a4.z0 needs 579.6 GB per GPU, gpu_mem_gb=80`},
		"no steps": {with(func(j *artifact.Job) { j.Steps = 0 }),
			"bad trace: w.csv line 3: job x-1: steps=0 must be > 0"},
		"no name": {with(func(j *artifact.Job) { j.Name = "" }),
			"bad trace: w.csv line 3: name is empty"},
		"name twice": {with(func(j *artifact.Job) { j.Name = "bert-0" }),
			`bad trace: w.csv line 3: job bert-0: name="bert-0" repeats line 2`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rows := []artifact.Job{ok, tc.row}
			err := CheckTrace(DefaultConfig(), d, rows)
			if !errors.Is(err, ErrBadTrace) {
				t.Fatalf("CheckTrace = %v, want ErrBadTrace", err)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("CheckTrace error (-want +got):\n%s", diff)
			}
			if _, err := Run(context.Background(), DefaultConfig(), d, rows, p, nil); !errors.Is(err, ErrBadTrace) || err.Error() != tc.want {
				t.Errorf("Run = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestMispriced(t *testing.T) {
	for name, tc := range map[string]struct {
		truth, believed float64
		want            bool
	}{
		"exact":                   {1, 1, false},
		"19 % slower":             {1.19, 1, false},
		"21 % slower":             {1.21, 1, true},
		"just inside 1/1.2":       {1, 1.19, false},
		"faster than 1/1.2":       {1, 1.21, true},
		"four times slower (vit)": {0.4, 0.1, true},
	} {
		if got := mispriced(tc.truth, tc.believed); got != tc.want {
			t.Errorf("%s: mispriced(%v, %v) = %v, want %v", name, tc.truth, tc.believed, got, tc.want)
		}
	}
}

// watchPolicy checks every plan against what its snapshot says each job
// cannot run.
type watchPolicy struct {
	policy.Policy
	t          *testing.T
	restricted int // job-rounds with something the job cannot run
}

func (p *watchPolicy) Decide(ctx context.Context, s *policy.Snapshot) (policy.Plan, error) {
	plan, err := p.Policy.Decide(ctx, s)
	cannot := map[string]model.Features{}
	for _, j := range s.Jobs {
		cannot[j.ID] = j.Cannot
		if j.Cannot != 0 {
			p.restricted++
			if j.Request.Plan.TP > 1 || j.Request.Plan.PP > 1 {
				p.t.Errorf("job %s asked for %s yet cannot run %s", j.ID, j.Request.Plan, j.Cannot)
			}
		}
	}
	for _, a := range plan.Actions {
		if len(a.Alloc) > 0 && !cannot[a.JobID].Allows(a.Plan) {
			p.t.Errorf("job %s given %s, which it cannot run (%s)", a.JobID, a.Plan, cannot[a.JobID])
		}
	}
	return plan, err
}

// With FixedFrameworks a job that asked for a data-parallel plan never
// gets a TP or PP plan.
func TestFixedFrameworks(t *testing.T) {
	d := data(t)
	rows, err := artifact.LoadWorkload(artifact.Default(), "naive")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.FixedFrameworks = true
	rubick, err := policy.New("rubick", policy.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p := &watchPolicy{Policy: rubick, t: t}
	r, err := Run(context.Background(), cfg, d, rows, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Completed != len(rows) || p.restricted == 0 {
		t.Errorf("completed %d of %d, %d restricted job-rounds; want all done and some restricted", r.Completed, len(rows), p.restricted)
	}
}

// countPolicy counts the starts and restarts of jobs that asked for a
// data-parallel plan, the GPUs they got, and those on a TP or PP plan.
type countPolicy struct {
	policy.Policy
	dpJobs, on3D, gpus int
}

func (p *countPolicy) Decide(ctx context.Context, s *policy.Snapshot) (policy.Plan, error) {
	plan, err := p.Policy.Decide(ctx, s)
	req := map[string]model.Plan{}
	for _, j := range s.Jobs {
		req[j.ID] = j.Request.Plan
	}
	for _, a := range plan.Actions {
		if r := req[a.JobID]; (a.Kind == policy.Start || a.Kind == policy.Restart) && r.TP == 1 && r.PP == 1 {
			p.dpJobs++
			for _, al := range a.Alloc {
				p.gpus += al.GPUs
			}
			if a.Plan.TP > 1 || a.Plan.PP > 1 {
				p.on3D++
			}
		}
	}
	return plan, err
}

// On the Base trace rubick never gives a job that asked for a data-parallel
// plan a TP or PP plan, restricted or not: the difference --fixed-frameworks
// makes comes from the plans it weighs, not those it chooses. This pins
// what docs/simulator.md says; a policy change that fails it changes that
// reading.
func TestFixedFrameworksChangesNoPlan(t *testing.T) {
	d := data(t)
	rows, err := artifact.LoadWorkload(artifact.Default(), "workload-base")
	if err != nil {
		t.Fatal(err)
	}
	for _, fixed := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.FixedFrameworks = fixed
		rubick, err := policy.New("rubick", policy.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		p := &countPolicy{Policy: rubick}
		r, err := Run(context.Background(), cfg, d, rows, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("fixed frameworks %v: avg JCT %.0f s; %d starts and restarts of data-parallel requests, %.2f GPUs each on average, %d on TP or PP",
			fixed, r.AvgJCT, p.dpJobs, float64(p.gpus)/float64(p.dpJobs), p.on3D)
		if p.on3D != 0 {
			t.Errorf("fixed frameworks %v: %d data-parallel requests started on TP or PP plans", fixed, p.on3D)
		}
	}
}

// TestUnfinished: a replay stops MaxTime after its last arrival, however
// late that is, and says which jobs are left and which of them the
// cluster cannot hold as requested.
func TestUnfinished(t *testing.T) {
	d := data(t)
	fifo, err := policy.New("fifo", policy.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Nodes, cfg.GPUsPerNode, cfg.MaxTime = 1, 4, 2*time.Hour
	// Arrivals past MaxTime do not stop the replay: the last is at 3 h.
	fits := []artifact.Job{
		{Name: "bert-0", SubmitS: 0, App: "bert", GPUs: 4, CPUs: 32, ExecPlan: "ga", Steps: 100, Line: 2},
		{Name: "bert-1", SubmitS: 3 * 3600, App: "bert", GPUs: 4, CPUs: 32, ExecPlan: "ga", Steps: 100, Line: 3},
	}
	if _, err := Run(context.Background(), cfg, d, fits, fifo, nil); err != nil {
		t.Fatalf("a late arrival: %v", err)
	}
	tooBig := append(fits, artifact.Job{Name: "bert-2", SubmitS: 60, App: "bert", GPUs: 8, CPUs: 64, ExecPlan: "ga", Steps: 100, Line: 4})
	_, err = Run(context.Background(), cfg, d, tooBig, fifo, nil)
	want := "sim fifo: 1 of 3 jobs unfinished 2h0m0s after the last arrival (MaxTime): bert-2; 1 of them ask for more GPUs than the cluster's 1 nodes of 4 hold"
	if err == nil || err.Error() != want {
		t.Errorf("a job the cluster cannot hold: %v, want %q", err, want)
	}
	// 32 CPUs for 4 GPUs on nodes of 16 CPUs: a node holds all 4 GPUs.
	cfg.CPUsPerNode = 16
	_, err = Run(context.Background(), cfg, d, fits[:1], fifo, nil)
	want = "sim fifo: 1 of 1 jobs unfinished 2h0m0s after the last arrival (MaxTime): bert-0; 1 of them ask for more CPUs on a node than the 16 it has (their CPUs per GPU times the GPUs packed on a node)"
	if err == nil || err.Error() != want {
		t.Errorf("a job whose CPUs a node cannot hold: %v, want %q", err, want)
	}
}

// TestUnfinishedInterval: a replay stopped with jobs left names the
// interval as the likely cause when most of them run, restart included,
// shorter than one round, each holding its GPUs to the next. Five jobs of
// 10 s arrive together on a 4-GPU cluster, which runs one per round.
func TestUnfinishedInterval(t *testing.T) {
	d := data(t)
	fifo, err := policy.New("fifo", policy.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var rows []artifact.Job
	for i := range 5 {
		rows = append(rows, artifact.Job{Name: fmt.Sprintf("bert-%d", i), App: "bert", GPUs: 4, CPUs: 32, ExecPlan: "ga", Steps: 10, DurationS: 10, Line: i + 2})
	}
	tests := map[string]struct {
		interval, maxTime time.Duration
		want              string
	}{
		"rounds longer than the jobs": {time.Hour, 2 * time.Hour,
			"sim fifo: 2 of 5 jobs unfinished 2h0m0s after the last arrival (MaxTime): bert-3, bert-4; " +
				"the interval (1h0m0s) is the likely cause: 2 of them run, restart included, shorter than one round and hold their GPUs to the next"},
		// The restart penalty, 260 s, is longer than a round.
		"rounds shorter than the jobs": {time.Minute, 2 * time.Minute,
			"sim fifo: 5 of 5 jobs unfinished 2m0s after the last arrival (MaxTime): bert-0, bert-1, bert-2, bert-3, bert-4"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Nodes, cfg.GPUsPerNode, cfg.Interval, cfg.MaxTime = 1, 4, tc.interval, tc.maxTime
			_, err := Run(context.Background(), cfg, d, rows, fifo, nil)
			if err == nil {
				t.Fatal("the replay finished")
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

// A fallback time is the model's prediction for the plan itself, whatever
// other plan of the same code was priced on that placement before: the
// artifact's code leaves out the micro-batch, accumulation and ZeRO stage,
// which the model does not.
func TestOracleFallbackPerPlan(t *testing.T) {
	d := data(t)
	pl := model.Placement{8, 8} // nothing measured for bert on two full nodes
	// Both zero-dp.
	plans := []model.Plan{
		{DP: 16, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, ZeRO: 1},
		{DP: 16, TP: 1, PP: 1, MicroBatch: 2, Accum: 1, ZeRO: 3},
	}
	want := make([]float64, len(plans))
	for i, p := range plans {
		b, err := d.Predictors["bert"].Predict(p, model.Resources{Placement: pl, CPUs: 8 * pl.GPUs(), HostMemGB: d.Predictors["bert"].Env.NodeMemGB * 2})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = b.Iter
	}
	if want[0] == want[1] {
		t.Fatalf("the model prices the plans alike (%v): the test needs plans it tells apart", want)
	}
	for first := range plans {
		o := NewOracle(d.Set, d.Predictors, artifact.MeasuredThreadsPerGPU, false)
		order := []int{first, 1 - first}
		got := make([]float64, len(plans))
		for _, i := range order {
			tr, err := o.IterTime("bert", plans[i], pl, 8*pl.GPUs())
			if err != nil {
				t.Fatal(err)
			}
			if tr.Source != Fallback {
				t.Fatalf("%s on %s: source %d, want the fallback", plans[i], pl, tr.Source)
			}
			got[i] = tr.IterS
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateApprox(1e-12, 0)); diff != "" {
			t.Errorf("priced %s first (-want +got):\n%s", plans[first], diff)
		}
	}
}

// TestWriteTableEmptyClass: a class without jobs has no average JCT, "-"
// like the guaranteed column (before, "BE avg s" printed 0).
func TestWriteTableEmptyClass(t *testing.T) {
	var b strings.Builder
	r := &Result{Policy: "fifo", Jobs: 1, Completed: 1, AvgJCT: 100, Guaranteed: Class{Jobs: 1, AvgJCT: 100}}
	if err := WriteTable(&b, []*Result{r}); err != nil {
		t.Fatal(err)
	}
	// policy jobs done avg p50 p99 makespan queue G BE ...
	row := strings.Fields(strings.Split(b.String(), "\n")[1])
	if len(row) < 10 || row[8] != "100" || row[9] != "-" {
		t.Errorf("table:\n%s\nwant G avg 100 and BE avg \"-\"", b.String())
	}
}
