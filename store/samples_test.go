package store

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

func TestSamplesRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if err := s.UpsertModelType(ctx, gpt2()); err != nil { // t0
		t.Fatal(err)
	}
	off := model.Sample{
		Plan:      model.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 8, Accum: 4, ZeRO: 2, Offload: true, Checkpoint: true},
		Resources: model.Resources{Placement: model.Placement{1, 1}, CPUs: 24, HostMemGB: 256.5},
		IterS:     3.25, FwdS: 0.5, CCS: 1.75, OptS: 1.5,
	}
	wide := sample(16, 2, 1, model.Placement{16, 16}, 0.8) // > 9 GPUs per node: stored as 2x16
	batch1 := []model.Sample{sample(8, 1, 1, model.Placement{8}, 1.5), off}
	if err := s.AddSamples(ctx, "gpt2", batch1, 1001, SourceProfile); err != nil { // t0+1s
		t.Fatal(err)
	}
	if err := s.AddSamples(ctx, "gpt2", []model.Sample{wide}, 0, SourceArtifact); err != nil { // t0+2s
		t.Fatal(err)
	}
	if err := s.AddSamples(ctx, "gpt2", nil, 0, SourceArtifact); err != nil {
		t.Fatalf("AddSamples of no samples: %v", err)
	}
	got, err := s.Samples(ctx, "gpt2")
	if err != nil {
		t.Fatal(err)
	}
	want := []StoredSample{
		{ID: 1, ModelType: "gpt2", Sample: batch1[0], SourceJob: 1001, Source: SourceProfile, Created: t0.Add(1e9), Iteration: -1},
		{ID: 2, ModelType: "gpt2", Sample: off, SourceJob: 1001, Source: SourceProfile, Created: t0.Add(1e9), Iteration: -1},
		{ID: 3, ModelType: "gpt2", Sample: wide, SourceJob: 0, Source: SourceArtifact, Created: t0.Add(2e9), Iteration: -1},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Samples (-want +got):\n%s", d)
	}
	if other, err := s.Samples(ctx, "bert"); err != nil || len(other) != 0 {
		t.Errorf("Samples of another model = %v, %v; want none", other, err)
	}
}

// Placements with more than 9 GPUs on a node round-trip through the
// samples and the jobs' plan columns, and rows an older rubick stored in the
// dash form ("16-16") still read back.
func TestWidePlacementsRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if err := s.UpsertModelType(ctx, gpt2()); err != nil {
		t.Fatal(err)
	}
	in := []model.Sample{
		sample(16, 1, 1, model.Placement{16}, 1.5),
		sample(16, 2, 1, model.Placement{16, 16}, 0.8),
		sample(24, 1, 1, model.Placement{16, 8}, 1.1),
	}
	if err := s.AddSamples(ctx, "gpt2", in, 0, SourceArtifact); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `
		INSERT INTO samples(model_type, dp, tp, pp, micro_batch, accum, zero, offload, checkpoint, placement,
			gpus, cpus, host_mem_gb, iter_s, fwd_s, cc_s, opt_s, source_job, source, created_ns)
		VALUES ('gpt2', 16, 2, 1, 2, 4, 1, 0, 0, '16-16', 32, 256, 100, 0.8, 0, 0, 0, 0, 'artifact', 5)`); err != nil {
		t.Fatal(err)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT placement FROM samples ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for rows.Next() {
		var pl string
		if err := rows.Scan(&pl); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, pl)
	}
	rows.Close()
	if d := cmp.Diff([]string{"1x16", "2x16", "16-8", "16-16"}, stored); d != "" {
		t.Errorf("stored placements (-want +got):\n%s", d)
	}
	got, err := s.Samples(ctx, "gpt2")
	if err != nil {
		t.Fatal(err)
	}
	var back []model.Placement
	for _, ss := range got {
		back = append(back, ss.Resources.Placement)
	}
	want := []model.Placement{{16}, {16, 16}, {16, 8}, {16, 16}}
	if d := cmp.Diff(want, back); d != "" {
		t.Errorf("placements read back (-want +got):\n%s", d)
	}

	job := Job{ID: 1, ModelType: "gpt2", Class: BestEffort, State: "RUNNING",
		LastPlan: in[0].Plan, LastResources: in[0].Resources}
	if err := s.UpsertJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	j, err := s.Job(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(in[0].Resources, j.LastResources); d != "" {
		t.Errorf("job's resources read back (-want +got):\n%s", d)
	}
}

func TestAddSamplesRejects(t *testing.T) {
	good := sample(8, 1, 1, model.Placement{8}, 1.5)
	with := func(f func(*model.Sample)) model.Sample {
		s := good
		s.Resources.Placement = append(model.Placement(nil), good.Resources.Placement...)
		f(&s)
		return s
	}
	for name, tc := range map[string]struct {
		model   string
		samples []model.Sample
		job     int64
		src     Source
		want    string
	}{
		"empty model name": {"", []model.Sample{good}, 1, SourceOnline, `model_type=""`},
		"empty source":     {"gpt2", []model.Sample{good}, 1, "", `source=""`},
		"negative job":     {"gpt2", []model.Sample{good}, -1, SourceOnline, "source_job=-1"},
		"NaN iteration":    {"gpt2", []model.Sample{good, with(func(s *model.Sample) { s.IterS = math.NaN() })}, 1, SourceOnline, "sample 1: invalid input: iter_s=NaN"},
		"zero iteration":   {"gpt2", []model.Sample{with(func(s *model.Sample) { s.IterS = 0 })}, 1, SourceOnline, "iter_s=0"},
		"infinite fwd":     {"gpt2", []model.Sample{with(func(s *model.Sample) { s.FwdS = math.Inf(1) })}, 1, SourceOnline, "fwd_s=+Inf"},
		"zero GPUs":        {"gpt2", []model.Sample{with(func(s *model.Sample) { s.Resources.Placement = model.Placement{0} })}, 1, SourceOnline, "gpus=0"},
		"no placement":     {"gpt2", []model.Sample{with(func(s *model.Sample) { s.Resources.Placement = nil })}, 1, SourceOnline, "placement=[]"},
		"zero dp":          {"gpt2", []model.Sample{with(func(s *model.Sample) { s.Plan.DP = 0 })}, 1, SourceOnline, "plan.dp=0"},
		"zero stage 4":     {"gpt2", []model.Sample{with(func(s *model.Sample) { s.Plan.ZeRO = 4 })}, 1, SourceOnline, "plan.zero=4"},
		// The model refuses such a plan: a fit on the stored samples would
		// fail on it.
		"offload without ZeRO": {"gpt2", []model.Sample{with(func(s *model.Sample) { s.Plan.ZeRO, s.Plan.Offload = 0, true })}, 1, SourceOnline,
			"plan.offload=true needs plan.zero >= 1, have 0"},
		"plan vs placement": {"gpt2", []model.Sample{with(func(s *model.Sample) { s.Resources.Placement = model.Placement{4} })}, 1, SourceOnline,
			"uses 8 GPUs but placement=4 has 4"},
		"negative cpus":   {"gpt2", []model.Sample{with(func(s *model.Sample) { s.Resources.CPUs = -2 })}, 1, SourceOnline, "cpus=-2"},
		"NaN host memory": {"gpt2", []model.Sample{with(func(s *model.Sample) { s.Resources.HostMemGB = math.NaN() })}, 1, SourceOnline, "host_mem_gb=NaN"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openTest(t, "")
			if err := s.UpsertModelType(ctx, gpt2()); err != nil {
				t.Fatal(err)
			}
			err := s.AddSamples(ctx, tc.model, tc.samples, tc.job, tc.src)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("AddSamples = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
			if got, _ := s.Samples(ctx, "gpt2"); len(got) != 0 {
				t.Errorf("a rejected batch stored %d samples", len(got))
			}
		})
	}
}

func TestAddSamplesUnknownModel(t *testing.T) {
	s := openTest(t, "")
	err := s.AddSamples(context.Background(), "gpt2", []model.Sample{sample(8, 1, 1, model.Placement{8}, 1)}, 1, SourceOnline)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("AddSamples for an unknown model type = %v, want ErrNotFound", err)
	}
}

// A job may report any number of samples of the configurations it has
// reported, and new ones only up to its bound; profile samples, other jobs'
// reports and a host-memory change (not part of a configuration) do not
// count.
func TestAddOnlineBoundsConfigs(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "")
	if err := s.UpsertModelType(ctx, gpt2()); err != nil {
		t.Fatal(err)
	}
	a := sample(8, 1, 1, model.Placement{8}, 1.5)
	b := sample(4, 1, 1, model.Placement{4}, 2.5)
	c := sample(2, 1, 1, model.Placement{2}, 4.5)
	fewerCPUs := a
	fewerCPUs.Resources.CPUs = 16
	moreMem := a
	moreMem.Resources.HostMemGB = 200
	if err := s.AddSamples(ctx, "gpt2", []model.Sample{c}, 7, SourceProfile); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		smp     model.Sample
		job     int64
		iter    int
		wantErr error
	}{
		{a, 7, 1, nil},
		{a, 7, -1, nil},
		{moreMem, 7, 2, nil},
		{b, 7, 3, nil},
		{a, 7, 4, nil},
		{c, 7, 5, ErrTooManyConfigs},
		{fewerCPUs, 7, 6, ErrTooManyConfigs},
		{b, 7, 7, nil},
		{c, 9, 1, nil},
		{b, 9, 2, nil},
		{a, 9, 3, ErrTooManyConfigs},
	}
	for i, st := range steps {
		err := s.AddOnline(ctx, "gpt2", st.smp, st.job, st.iter, 2)
		if !errors.Is(err, st.wantErr) || (st.wantErr == nil) != (err == nil) {
			t.Errorf("step %d: AddOnline(job %d, %s on %s, cpus=%d) = %v, want %v", i, st.job, st.smp.Plan, st.smp.Resources.Placement, st.smp.Resources.CPUs, err, st.wantErr)
		}
	}
	if err := s.AddOnline(ctx, "gpt2", c, 7, 8, 0); err != nil {
		t.Errorf("AddOnline without a bound = %v", err)
	}
	if err := s.AddOnline(ctx, "gpt2", c, 7, 8, -1); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddOnline with max_configs -1 = %v, want ErrInvalid", err)
	}
	got, err := s.JobSamples(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	var iters []int
	for _, smp := range got {
		iters = append(iters, smp.Iteration)
	}
	if d := cmp.Diff([]int{-1, 1, -1, 2, 3, 4, 7, 8}, iters); d != "" {
		t.Errorf("job 7's stored iterations (-want +got):\n%s", d)
	}
}
