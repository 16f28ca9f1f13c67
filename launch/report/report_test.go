package report

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/model"
)

// The test binary doubles as a fake munge and unmunge when it runs under
// those names (symbolic links made by fakeMunge), so the tests need no munged.
func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "munge":
		in, _ := io.ReadAll(os.Stdin)
		fmt.Printf("MUNGE:%s:\n", base64.StdEncoding.EncodeToString(append([]byte(os.Getenv("FAKE_UID")+";"), in...)))
		os.Exit(0)
	case "unmunge":
		if code, err := strconv.Atoi(os.Getenv("FAKE_UNMUNGE_EXIT")); err == nil {
			fmt.Fprintln(os.Stderr, "unmunge: Error: as told")
			os.Exit(code)
		}
		in, _ := io.ReadAll(os.Stdin)
		body := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(string(in)), "MUNGE:"), ":")
		raw, err := base64.StdEncoding.DecodeString(body)
		uid, payload, ok := strings.Cut(string(raw), ";")
		if err != nil || !ok {
			fmt.Fprintln(os.Stderr, "unmunge: Error: Invalid credential format")
			os.Exit(8)
		}
		// The layout of unmunge --numeric --keys=STATUS,UID,GID,LENGTH.
		fmt.Printf("STATUS:          0\nUID:             %s\nGID:             %s\nLENGTH:          %d\n\n%s", uid, uid, len(payload), payload)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeMunge returns a Munge whose programs are this test binary, encoding
// credentials for uid.
func fakeMunge(t *testing.T, uid int) Munge {
	t.Helper()
	t.Setenv("FAKE_UID", strconv.Itoa(uid))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"munge", "unmunge"} {
		if err := os.Symlink(self, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return Munge{MungePath: filepath.Join(dir, "munge"), UnmungePath: filepath.Join(dir, "unmunge")}
}

// inProcess encodes and decodes credentials in the fake's format without
// running a program, for tests about what happens around the credential.
type inProcess struct{ uid uint32 }

func (f inProcess) Encode(_ context.Context, payload []byte) (string, error) {
	return "MUNGE:" + base64.StdEncoding.EncodeToString(append([]byte(strconv.Itoa(int(f.uid))+";"), payload...)) + ":", nil
}

func (f inProcess) Decode(_ context.Context, cred string) (Credential, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(strings.TrimPrefix(cred, "MUNGE:"), ":"))
	uid, payload, ok := strings.Cut(string(raw), ";")
	n, err2 := strconv.Atoi(uid)
	if err != nil || err2 != nil || !ok {
		return Credential{}, fmt.Errorf("%w: fake", ErrCredential)
	}
	return Credential{UID: uint32(n), GID: uint32(n), Payload: []byte(payload)}, nil
}

func sample() Sample {
	return Sample{Version: SampleVersion, JobID: "42", ModelType: "gpt2", Plan: "dp4.tp2.pp1.mb2.a1.z0+gc",
		Placement: "44", CPUs: 32, Iteration: ptr(10), IterS: 0.5123, Source: SourceMegatron,
		Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func TestParser(t *testing.T) {
	cases := map[string]struct {
		line string
		gb   int
		bar  bool // a TrainerBarParser's
		want Measurement
		ok   bool
	}{
		"megatron": {
			line: " [2024-05-01 10:00:00] iteration       10/    1000 | consumed samples:          320 | elapsed time per iteration (ms): 512.3 | learning rate: 1.500E-04 |",
			want: Measurement{Iteration: 10, Step: true, IterS: 0.5123, Source: SourceMegatron}, ok: true,
		},
		"megatron with running mean": {
			line: " iteration      200/  500000 | consumed samples: 6400 | elapsed time per iteration (ms): 1034.5/1020.0 | throughput per GPU (TFLOP/s/GPU): 180.2 |",
			want: Measurement{Iteration: 200, Step: true, IterS: 1.0345, Source: SourceMegatron}, ok: true,
		},
		"deepspeed": {
			line: "[2024-05-01 10:00:00,123] [INFO] [timer.py:260:stop] epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=61.2, CurrSamplesPerSec=64.0, MemAllocated=4.2GB, MaxMemAllocated=9.1GB",
			gb:   32, want: Measurement{Iteration: 10, Step: true, IterS: 0.5, Source: SourceDeepSpeed}, ok: true,
		},
		"old deepspeed": {
			line: "[INFO] [logging.py:60:log_dist] [Rank 0] 0/50, SamplesPerSec=16.0",
			gb:   32, want: Measurement{Iteration: 50, IterS: 2, Source: SourceDeepSpeed}, ok: true,
		},
		"deepspeed without global batch": {line: "epoch=0/micro_step=1/global_step=1, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=1,"},
		"validation line":                {line: " validation loss at iteration 100 | lm loss value: 3.2 |"},
		"zero time":                      {line: " iteration 1/ 2 | elapsed time per iteration (ms): 0.0 |"},
		"noise":                          {line: "loss: 2.34 iteration time 12ms", gb: 8},
		// Times a float64 cannot hold.
		"megatron time rounds to 0": {line: " iteration 1/ 2 | elapsed time per iteration (ms): 1e-323 |"},
		"deepspeed time overflows":  {line: "epoch=0/micro_step=1/global_step=1, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=1e-320,", gb: 8},
		"bar time overflows":        {line: "  1%|          | 1/100 [00:03<05:00,  1e-320it/s]", bar: true},
		"bar time rounds to 0":      {line: "  1%|          | 1/100 [00:03<05:00,  1e-320s/it]", bar: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := Parser{GlobalBatch: c.gb}
			if c.bar {
				p = TrainerBarParser()
			}
			got, ok := p.Parse(c.line)
			if ok != c.ok {
				t.Fatalf("Parse ok = %v, want %v (%+v)", ok, c.ok, got)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// barLines splits a captured Trainer log as rubick-srun's line tap does:
// at newlines and carriage returns, empty lines dropped.
func barLines(t *testing.T, name string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.FieldsFunc(string(data), func(r rune) bool { return r == '\n' || r == '\r' })
}

// TestTrainerBarFixtures: the Trainer's training bar, recorded with tqdm
// (testdata/hf-trainer-bar.py), gives one measurement per redraw that
// moved its count, in s/it and in it/s; the described bars before it
// ("Loading checkpoint shards", "Map" in examples/s), the evaluation bar
// drawn below it, its redraws around the logs and at its close give none.
// Before, a Trainer line was read for DeepSpeed's step lines only, which
// accelerate turns off: it measured nothing.
func TestTrainerBarFixtures(t *testing.T) {
	for _, tc := range []struct {
		file  string
		steps []int   // the counts measured
		stepS float64 // each step's time in the script
		pause int     // the count whose redraw times an evaluation too (0: none)
		// eval is how many measurements come first from an evaluation's
		// bar before training, of its batches: nothing tells it from a
		// training bar until the training bar replaces it.
		eval int
	}{
		{"hf-trainer-slow.log", []int{1, 2, 3, 4, 5, 6, 7, 8}, 1.3, 5, 0},
		// The first redraw, 2 steps at once, is not one step's time.
		{"hf-trainer-fast.log", []int{4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40}, 0.05, 22, 0},
		// tqdm's own rate reads 1.47 s/it after the 3 s first step and
		// 0.55 s at step 6; each redraw's own seconds are 0.4.
		{"hf-trainer-warm.log", []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 0.4, 0, 0},
		// An evaluation of 10 batches before training and one of 12
		// after it, at the default log level (no announced total): the
		// training bar replaces the first once it is full, and the
		// Trainer's logs over the training bar (train_runtime, before it
		// closes) keep the second from replacing it. Before, the first
		// evaluation's bar was followed, and no step was measured.
		{"hf-trainer-evalfirst.log", []int{6, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8}, 0.5, 0, 3},
	} {
		t.Run(tc.file, func(t *testing.T) {
			p := TrainerBarParser()
			var got []int
			for _, l := range barLines(t, tc.file) {
				meas, ok := p.Parse(l)
				if !ok {
					continue
				}
				got = append(got, meas.Iteration)
				if meas.Source != SourceTrainerBar || !meas.Step {
					t.Errorf("%q: %+v", l, meas)
				}
				switch n := meas.Iteration; {
				case len(got) <= tc.eval:
				case tc.file == "hf-trainer-warm.log" && n == 1:
					if math.Abs(meas.IterS-3) > 0.1 {
						t.Errorf("step 1: %.3f s, want the first step's 3", meas.IterS)
					}
				case n == tc.pause:
					if meas.IterS < tc.stepS*1.2 {
						t.Errorf("step %d: %.3f s, want the evaluation's pause in it", n, meas.IterS)
					}
				case math.Abs(meas.IterS/tc.stepS-1) > 0.03:
					t.Errorf("step %d: %.4f s, want %.2f within 3 %%", n, meas.IterS, tc.stepS)
				}
			}
			if d := cmp.Diff(tc.steps, got); d != "" {
				t.Errorf("counts measured (-want +got):\n%s", d)
			}
		})
	}
}

// TestTrainerBar: which redraws of which bars are measurements, line by
// line.
func TestTrainerBar(t *testing.T) {
	const (
		bar0 = "  0%|          | 0/100 [00:00<?, ?it/s]"
		bar1 = "  1%|          | 1/100 [00:03<05:00,  3.03s/it]"
		// Steps of 3.03, 2, 1.5 and 0.25 s, as tqdm averages them.
		bar2 = "  2%|▏         | 2/100 [00:05<04:00,  2.42s/it]"
		bar3 = "  3%|▎         | 3/100 [00:06<03:00,  2.00s/it, loss=2.3]"
		bar4 = "  4%|▍         | 4/100 [00:06<00:30,  1.31s/it]"
	)
	type m struct {
		N     int
		IterS float64
	}
	for _, tc := range []struct {
		name  string
		lines []string
		want  []m
	}{
		{"training bar", []string{bar0, bar1, bar2, bar3, bar4}, []m{{1, 3.03}, {2, 2}, {3, 1.5}, {4, 0.25}}},
		{"repeated count", []string{bar1, bar1, "  1%|          | 1/100 [00:04<05:00,  3.10s/it]", bar2}, []m{{1, 3.03}, {2, 2}}},
		{"described bars", []string{
			"Loading checkpoint shards:  50%|█████     | 1/2 [00:03<00:03,  3.00s/it]",
			"Map:  33%|███▎      | 1000/3000 [00:00<00:00, 4997.29 examples/s]",
			"Epoch 1:  10%|█         | 10/100 [00:01<00:09, 9.9it/s]",
		}, nil},
		{"other units", []string{"  5%|▌         | 5/100 [00:01<00:19, 4.90 examples/s]", " 10%|█         | 10/100 [00:02<00:18, 4.9ba/s]"}, nil},
		{"no total", []string{"12it [00:03,  3.99it/s]"}, nil},
		{"unknown rate", []string{bar0, "  1%|          | 1/100 [00:00<?, ?it/s]"}, nil},
		{"evaluation bar below the training bar", []string{
			bar1, "  0%|          | 0/6 [00:00<?, ?it/s]\x1b[A", " 50%|█████     | 3/6 [00:00<00:00, 29.76it/s]\x1b[A",
			"                                             \x1b[A", bar1, bar2,
		}, []m{{1, 3.03}, {2, 2}}},
		{"a bar of another total before the training bar is full", []string{bar1, bar2, " 10%|█         | 1/10 [00:00<00:00, 29.76it/s]", " 20%|██        | 2/10 [00:00<00:00, 29.76it/s]"},
			[]m{{1, 3.03}, {2, 2}}},
		// At the default log level the Trainer announces no total. An
		// evaluation before training draws the first bar and closes it
		// full, with nothing logged over it: the training bar replaces
		// it. Its redraws before are read (the warm-up skip drops a
		// run's first).
		{"evaluation before training", []string{
			" 50%|█████     | 3/6 [00:00<00:00, 29.76it/s]", "100%|██████████| 6/6 [00:00<00:00, 29.76it/s]", bar0, bar1, bar2,
		}, []m{{6, 0.0336}, {1, 3.03}, {2, 2}}},
		// The Trainer logs train_runtime over its training bar before it
		// closes it: tqdm clears the bar, the logs go to stdout, and the
		// bar is redrawn. An evaluation after training does not replace
		// it.
		{"evaluation after training", append(small("                              ", "{'train_runtime': 4.0, 'train_loss': 2.3, 'epoch': 1.0}"),
			" 50%|█████     | 5/10 [00:00<00:00, 29.76it/s]", "100%|██████████| 10/10 [00:00<00:00, 29.76it/s]"),
			[]m{{1, 3.03}, {2, 2}, {3, 1.5}}},
		// Without the Trainer's logs over it, a full bar is replaced by
		// the next of another total.
		{"a full bar not logged over", append(small(),
			" 50%|█████     | 5/10 [00:00<00:00, 29.76it/s]", "100%|██████████| 10/10 [00:00<00:00, 29.76it/s]"),
			[]m{{1, 3.03}, {2, 2}, {3, 1.5}, {10, 0.0336}}},
		{"a new bar of the same total", []string{bar1, bar2, bar1, bar2}, []m{{1, 3.03}, {2, 2}, {1, 3.03}, {2, 2}}},
		// An evaluation the script runs before training draws the first
		// bar at the top, read until the Trainer announces its total
		// (logged at info level, as in profiling runs; the warm-up skip
		// drops a run's first measurements); then the training bar is.
		{"evaluation before training, total announced", []string{
			" 50%|█████     | 3/6 [00:00<00:00, 29.76it/s]", "100%|██████████| 6/6 [00:00<00:00, 29.76it/s]",
			"[INFO|trainer.py:2128] 2026-11-30 06:00:00,000 >>   Total optimization steps = 100", bar0, bar1, bar2,
		}, []m{{6, 0.0336}, {1, 3.03}, {2, 2}}},
		{"total announced, another bar first", []string{
			"  Total optimization steps = 1,000", " 17%|█▋        | 1/6 [00:00<00:00, 29.76it/s]", bar1,
			"  0%|          | 1/1000 [00:03<50:00,  3.03s/it]",
		}, []m{{1, 3.03}}},
		// A redraw at 0 moved no step, whatever rate it shows.
		{"a new bar drawn at 0", []string{bar1, bar2, "  0%|          | 0/100 [00:00<05:00,  2.00s/it]", bar1}, []m{{1, 3.03}, {2, 2}, {1, 3.03}}},
		{"a total of 0", []string{"  0%|          | 1/0 [00:01<00:00,  1.00it/s]", "  0%|          | 0/0 [00:01<00:00,  1.00it/s]"}, nil},
		// Resumed at step 500, the Trainer advances the bar from 0 to 501
		// at once: tqdm's averages hold those steps, weighing 0.3 x 0.7^k
		// after k more redraws, so redraws are read once they are under
		// 1 % of theirs (k = 27 for a step a redraw).
		{"resumed run", resumed(30), []m{{528, 0.5}, {529, 0.5}, {530, 0.5}, {531, 0.5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := TrainerBarParser()
			var got []m
			for _, l := range tc.lines {
				if meas, ok := p.Parse(l); ok {
					got = append(got, m{meas.Iteration, meas.IterS})
				}
			}
			// The rates shown have three digits: the seconds read back
			// from them are within 1 %.
			if d := cmp.Diff(tc.want, got, cmpWithin(0.01)); d != "" {
				t.Errorf("measurements (-want +got):\n%s", d)
			}
		})
	}
}

// small is a training bar of 3 steps of 3.03, 2 and 1.5 s, full, with the
// lines written between its last redraws (a clear and a logs line), and
// redrawn as tqdm closes it.
func small(between ...string) []string {
	full := "100%|██████████| 3/3 [00:06<00:00,  2.00s/it]"
	lines := []string{
		"  0%|          | 0/3 [00:00<?, ?it/s]", " 33%|███▎      | 1/3 [00:03<00:06,  3.03s/it]",
		" 67%|██████▋   | 2/3 [00:05<00:02,  2.42s/it]", full,
	}
	lines = append(lines, between...)
	return append(lines, full, full)
}

// cmpWithin compares floats within a relative tolerance.
func cmpWithin(rel float64) cmp.Option {
	return cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b)) })
}

// resumed is a resumed run's bar as tqdm draws it: 0, its first redraw at
// step 501 after 9 s, then k redraws a step of 0.5 s apart.
func resumed(k int) []string {
	steps, secs := []int{501}, []float64{9}
	for range k {
		steps, secs = append(steps, 1), append(secs, 0.5)
	}
	return tqdmRedraws(1000, steps, secs)
}

// tqdmRedraws is what tqdm 4.64 draws of a bar of total steps whose
// redraws advance it by steps[i] in secs[i] seconds: its rate is the ratio
// of its moving averages (smoothing 0.3) of the steps and the seconds,
// shown with two decimals, in s/it when a step takes over a second.
func tqdmRedraws(total int, steps []int, secs []float64) []string {
	lines := []string{fmt.Sprintf("  0%%|          | 0/%d [00:00<?, ?it/s]", total)}
	n, avgSteps, avgSecs := 0, 0.0, 0.0
	for i, dn := range steps {
		n += dn
		avgSteps = 0.3*float64(dn) + 0.7*avgSteps
		avgSecs = 0.3*secs[i] + 0.7*avgSecs
		rate := fmt.Sprintf("%5.2fit/s", avgSteps/avgSecs)
		if avgSecs > avgSteps {
			rate = fmt.Sprintf("%5.2fs/it", avgSecs/avgSteps)
		}
		lines = append(lines, fmt.Sprintf("%3d%%|█████     | %d/%d [00:09<00:09, %s]", 100*n/total, n, total, rate))
	}
	return lines
}

func TestSampleValidate(t *testing.T) {
	mod := map[string]func(*Sample){
		"version":   func(s *Sample) { s.Version = 2 },
		"job_id":    func(s *Sample) { s.JobID = "42; rm -rf" },
		"plan":      func(s *Sample) { s.Plan = "dp4" },
		"placement": func(s *Sample) { s.Placement = "0" },
		"cpus":      func(s *Sample) { s.CPUs = -1 },
		"iter_s":    func(s *Sample) { s.IterS = 0 },
		"iteration": func(s *Sample) { s.Iteration = ptr(-3) },
	}
	for field, f := range mod {
		t.Run(field, func(t *testing.T) {
			s := sample()
			f(&s)
			err := s.Validate()
			if !errors.Is(err, ErrBadSample) || !strings.Contains(err.Error(), field) {
				t.Errorf("Validate = %v, want ErrBadSample naming %s", err, field)
			}
		})
	}
	ms, err := sample().ModelSample()
	if err != nil || ms.Plan.TP != 2 || ms.Resources.Placement.GPUs() != 8 || ms.IterS != 0.5123 {
		t.Errorf("ModelSample = %+v, %v", ms, err)
	}
	// A node of 16 GPUs is one node, not a node of 1 and one of 6.
	wide := sample()
	wide.Plan, wide.Placement = "dp8.tp2.pp1.mb2.a1.z0", model.Placement{16}.String()
	ms, err = wide.ModelSample()
	if err != nil || !slices.Equal(ms.Resources.Placement, model.Placement{16}) {
		t.Errorf("ModelSample of placement %q = %v, %v; want [16]", wide.Placement, ms.Resources.Placement, err)
	}
}

func TestMungeFakeRoundTrip(t *testing.T) {
	m := fakeMunge(t, 1234)
	payload := []byte(`{"a":1}` + "\n\n" + `tail`)
	cred, err := m.Encode(t.Context(), payload)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Decode(t.Context(), cred)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Credential{UID: 1234, GID: 1234, Payload: payload}, c); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := m.Decode(t.Context(), "MUNGE:AAAA:"); !errors.Is(err, ErrCredential) {
		t.Errorf("Decode(garbage) = %v, want ErrCredential", err)
	}
	if _, err := m.Decode(t.Context(), "not a credential"); !errors.Is(err, ErrCredential) {
		t.Errorf("Decode(text) = %v, want ErrCredential", err)
	}
	if _, err := (Munge{MungePath: t.TempDir() + "/absent"}).Encode(t.Context(), payload); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Encode without munge = %v, want ErrUnavailable", err)
	}
	// unmunge's exit status says whether munged could check it at all.
	for code, want := range map[int]error{6: ErrUnavailable, 7: ErrUnavailable, 1: ErrUnavailable, 15: ErrCredential, 17: ErrCredential, 11: ErrCredential} {
		t.Setenv("FAKE_UNMUNGE_EXIT", strconv.Itoa(code))
		if _, err := m.Decode(t.Context(), cred); !errors.Is(err, want) {
			t.Errorf("unmunge exiting %d: %v, want %v", code, err, want)
		}
	}
}

// TestLimit: no more than n decodes at once; one waiting past its
// context fails with the context's error, neither a bad credential nor
// munged being down.
func TestLimit(t *testing.T) {
	var mu sync.Mutex
	now, most := 0, 0
	slow := verifierFunc(func(ctx context.Context, cred string) (Credential, error) {
		mu.Lock()
		now++
		most = max(most, now)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		now--
		mu.Unlock()
		return Credential{UID: 7}, nil
	})
	v := Limit(slow, 3)
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			if _, err := v.Decode(t.Context(), "MUNGE:x:"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if most > 3 || most < 1 {
		t.Errorf("%d decodes at once, want at most 3", most)
	}
	block, holding := make(chan struct{}), make(chan struct{})
	stuck := Limit(verifierFunc(func(context.Context, string) (Credential, error) {
		close(holding)
		<-block
		return Credential{}, nil
	}), 1)
	go func() { _, _ = stuck.Decode(context.Background(), "MUNGE:x:") }()
	<-holding // the only turn is taken
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := stuck.Decode(ctx, "MUNGE:y:"); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Errorf("waiting past the context: %v, want the context's error, not ErrUnavailable", err)
	}
	close(block)
}

type verifierFunc func(ctx context.Context, cred string) (Credential, error)

func (f verifierFunc) Decode(ctx context.Context, cred string) (Credential, error) {
	return f(ctx, cred)
}

func TestParseUnmunge(t *testing.T) {
	cases := map[string]struct {
		out  string
		want Credential
		err  error
	}{
		"numeric":          {out: "STATUS:  0\nUID:  1000\nGID:  100\nLENGTH:  2\n\nhi", want: Credential{UID: 1000, GID: 100, Payload: []byte("hi")}},
		"named status":     {out: "STATUS:  Success (0)\nUID: 7\nGID: 7\nLENGTH: 0\n\n", want: Credential{UID: 7, GID: 7, Payload: []byte{}}},
		"failed status":    {out: "STATUS:  Expired credential (15)\nUID: 7\nGID: 7\n\n", err: ErrCredential},
		"no separator":     {out: "STATUS: 0\nUID: 7\n", err: ErrCredential},
		"uid not numeric":  {out: "STATUS: 0\nUID: root (0)\nGID: 0\n\n", err: ErrCredential},
		"length trims end": {out: "STATUS: 0\nUID: 1\nGID: 1\nLENGTH: 2\n\nab\n", want: Credential{UID: 1, GID: 1, Payload: []byte("ab")}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseUnmunge([]byte(c.out))
			if !errors.Is(err, c.err) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestReporterEndToEnd sends samples through a Reporter to a Handler, both
// with the fake munge, and checks what the daemon side receives.
func TestReporterEndToEnd(t *testing.T) {
	m := fakeMunge(t, 4321)
	var mu sync.Mutex
	var got []Sample
	srv := httptest.NewServer(Handler(m, Acceptors{Sample: func(_ context.Context, uid uint32, s Sample) error {
		if uid != 4321 {
			return fmt.Errorf("%w: uid %d", ErrNotOwner, uid)
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, s)
		return nil
	}}))
	defer srv.Close()

	r := NewReporter(t.Context(), ReporterConfig{URL: srv.URL, Encoder: m})
	want := []Sample{sample(), sample()}
	want[1].Iteration = ptr(20)
	for _, s := range want {
		if !r.Submit(s) {
			t.Fatal("Submit dropped a sample")
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if n := r.Close(ctx); n != 2 {
		t.Fatalf("sent %d samples, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("received (-want +got):\n%s", diff)
	}
}

// Flush returns once the samples submitted before it have reached the
// endpoint, so that a launch notice sent next comes after them; without a
// URL it returns at once.
func TestReporterFlush(t *testing.T) {
	var got atomic.Int32
	srv := httptest.NewServer(Handler(inProcess{uid: 1}, Acceptors{Sample: func(context.Context, uint32, Sample) error {
		time.Sleep(10 * time.Millisecond) // a busy rubickd
		got.Add(1)
		return nil
	}}))
	defer srv.Close()
	r := NewReporter(t.Context(), ReporterConfig{URL: srv.URL, Encoder: inProcess{uid: 1}})
	defer r.Close(t.Context())
	for range 10 {
		if !r.Submit(sample()) {
			t.Fatal("Submit dropped a sample")
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil || got.Load() != 10 {
		t.Errorf("Flush = %v with %d of 10 samples received, want nil with all", err, got.Load())
	}
	// A flush that cannot finish in time says so.
	r.Submit(sample())
	short, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	if err := r.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Flush past its deadline = %v, want %v", err, context.DeadlineExceeded)
	}
	if err := NewReporter(t.Context(), ReporterConfig{}).Flush(short); err != nil {
		t.Errorf("Flush without a URL = %v", err)
	}
}

// syncBuffer is a log sink safe for the reporter's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestReporterWithoutMungeLogsOnce(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	var logs syncBuffer
	r := NewReporter(t.Context(), ReporterConfig{URL: srv.URL, Encoder: Munge{MungePath: t.TempDir() + "/absent"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 5 {
		r.Submit(sample())
	}
	if n := r.Close(t.Context()); n != 0 {
		t.Errorf("sent %d samples without munge", n)
	}
	if c := strings.Count(logs.String(), "level=WARN"); c != 1 || hits.Load() != 0 {
		t.Errorf("logged %d times (want 1), %d requests (want 0):\n%s", c, hits.Load(), logs.String())
	}
}

func TestReporterServerErrorsDoNotBlock(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer srv.Close()
	var logs syncBuffer
	r := NewReporter(t.Context(), ReporterConfig{URL: srv.URL, Encoder: inProcess{uid: 1}, Queue: 2,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 50 {
		r.Submit(sample()) // never blocks, drops when full
	}
	r.Close(t.Context())
	if c := strings.Count(logs.String(), "level=WARN"); c != 1 {
		t.Errorf("%d warnings, want 1:\n%s", c, logs.String())
	}
	if NewReporter(t.Context(), ReporterConfig{}).Submit(sample()) {
		t.Error("a Reporter without URL accepted a sample")
	}
}

func TestHandlerStatus(t *testing.T) {
	m := inProcess{uid: 1000}
	cred := func(payload string) string {
		c, err := m.Encode(t.Context(), []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	good := `{"version":1,"job_id":"42","model_type":"gpt2","plan":"dp1.tp1.pp1.mb1.a1.z0","placement":"1","iter_s":0.1}`
	launch := `{"kind":"launch","version":1,"job_id":"42","model_type":"gpt2","dialect":"deepspeed","cannot":"tp,pp","plan":"dp1.tp2.pp1.mb1.a1.z0","refused":true}`
	accept := Acceptors{
		Sample: func(_ context.Context, uid uint32, s Sample) error {
			if s.JobID != "42" {
				return ErrNotOwner
			}
			return nil
		},
		Launch: func(_ context.Context, uid uint32, l Launch) error {
			if l.JobID != "42" {
				return ErrNotOwner
			}
			if l.Features() != model.FeatureTP|model.FeaturePP {
				return fmt.Errorf("cannot %v", l.Features())
			}
			return nil
		},
	}
	cases := map[string]struct {
		method, body string
		want         int
	}{
		"ok":           {http.MethodPost, cred(good), http.StatusNoContent},
		"get":          {http.MethodGet, "", http.StatusMethodNotAllowed},
		"forged":       {http.MethodPost, "MUNGE:bm90LWEtY3JlZA==:", http.StatusUnauthorized},
		"bad payload":  {http.MethodPost, cred(`{"version":1}`), http.StatusBadRequest},
		"not json":     {http.MethodPost, cred(`plan=dp1`), http.StatusBadRequest},
		"not the user": {http.MethodPost, cred(strings.Replace(good, `"42"`, `"43"`, 1)), http.StatusForbidden},
		"launch":       {http.MethodPost, cred(launch), http.StatusNoContent},
		"launch, not the user": {http.MethodPost, cred(strings.Replace(launch, `"42"`, `"43"`, 1)),
			http.StatusForbidden},
		"launch, unknown feature": {http.MethodPost, cred(strings.Replace(launch, `tp,pp`, `tp,zero4`, 1)),
			http.StatusBadRequest},
		"launch, bad plan": {http.MethodPost, cred(strings.Replace(launch, `dp1.tp2`, `dp0.tp2`, 1)),
			http.StatusBadRequest},
		"unknown kind": {http.MethodPost, cred(`{"kind":"hello","version":1}`), http.StatusBadRequest},
	}
	var refused []error
	accept.Refused = func(err error) { refused = append(refused, err) }
	h := Handler(m, accept)
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			refused = nil
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(c.method, "/v1/samples", strings.NewReader(c.body)))
			if rec.Code != c.want {
				t.Errorf("status %d, want %d: %s", rec.Code, c.want, rec.Body)
			}
			// Refused hears of what no acceptor saw: a forged credential,
			// a payload that is none.
			wantRefused := map[string]bool{"forged": true, "bad payload": true, "not json": true, "unknown kind": true,
				"launch, unknown feature": true, "launch, bad plan": true}[name]
			if (len(refused) == 1) != wantRefused || len(refused) > 1 {
				t.Errorf("refused %v, want one: %v", refused, wantRefused)
			}
		})
	}
	// munged down: 503, and Refused hears of it.
	refused = nil
	down := verifierFunc(func(context.Context, string) (Credential, error) {
		return Credential{}, fmt.Errorf("%w: unmunge: exit status 6", ErrUnavailable)
	})
	rec := httptest.NewRecorder()
	Handler(down, accept).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/samples", strings.NewReader(cred(good))))
	if rec.Code != http.StatusServiceUnavailable || len(refused) != 1 || !errors.Is(refused[0], ErrUnavailable) {
		t.Errorf("munged down: status %d, refused %v; want 503 and one ErrUnavailable", rec.Code, refused)
	}
	// An endpoint without a launch acceptor refuses launch notices.
	rec = httptest.NewRecorder()
	Handler(m, Acceptors{Sample: accept.Sample}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/samples", strings.NewReader(cred(launch))))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("launch notice without a launch acceptor: status %d, want 400", rec.Code)
	}
}

// SendLaunch fills in the kind and version, and the handler hands the
// notice over as sent.
func TestSendLaunch(t *testing.T) {
	m := fakeMunge(t, 4321)
	var got Launch
	srv := httptest.NewServer(Handler(m, Acceptors{
		Sample: func(context.Context, uint32, Sample) error { return errors.New("not a sample") },
		Launch: func(_ context.Context, uid uint32, l Launch) error { got = l; return nil },
	}))
	defer srv.Close()
	sent := Launch{JobID: "7", ModelType: "gpt2", Dialect: "deepspeed", Cannot: "tp,pp", GlobalBatch: 8, Plan: "dp2.tp2.pp1.mb4.a1.z0",
		Refused: true, Profiled: true, Time: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)}
	if err := SendLaunch(t.Context(), srv.Client(), srv.URL, m, sent); err != nil {
		t.Fatal(err)
	}
	sent.Kind, sent.Version = KindLaunch, LaunchVersion
	if d := cmp.Diff(sent, got); d != "" {
		t.Errorf("received (-sent +got):\n%s", d)
	}
}

// TestMungeRealRoundTrip runs the real munge and unmunge when munged
// answers here (or at $RUBICK_TEST_MUNGE_SOCKET).
func TestMungeRealRoundTrip(t *testing.T) {
	m := Munge{Socket: os.Getenv("RUBICK_TEST_MUNGE_SOCKET")}
	for _, p := range []string{"munge", "unmunge"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s not installed", p)
		}
	}
	payload, _ := sampleJSON(t)
	cred, err := m.Encode(t.Context(), payload)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("munged not running: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Decode(t.Context(), cred)
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(os.Getuid()); strconv.Itoa(int(c.UID)) != want || !bytes.Equal(c.Payload, payload) {
		t.Errorf("decoded uid %d payload %q, want uid %s payload %q", c.UID, c.Payload, want, payload)
	}
	// munged refuses a credential it has already decoded: no replay.
	if _, err := m.Decode(t.Context(), cred); !errors.Is(err, ErrCredential) {
		t.Errorf("replayed credential: err = %v, want ErrCredential", err)
	}
}

func sampleJSON(t *testing.T) ([]byte, Sample) {
	t.Helper()
	s := sample()
	var b bytes.Buffer
	if _, err := fmt.Fprintf(&b, `{"version":1,"job_id":%q,"plan":%q,"placement":%q,"iter_s":%v}`, s.JobID, s.Plan, s.Placement, s.IterS); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), s
}

func ptr[T any](v T) *T { return &v }

// A measurement becomes a sample's fields; a micro-step count is not
// reported as an iteration.
func TestSampleWith(t *testing.T) {
	at := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	base := Sample{Version: SampleVersion, JobID: "7", ModelType: "gpt2", Plan: "dp8.tp1.pp1.mb1.a1.z0", Placement: "8", Iteration: ptr(99)}
	for name, tc := range map[string]struct {
		m    Measurement
		want Sample
	}{
		"step counter": {Measurement{Iteration: 40, Step: true, IterS: 0.5, Source: SourceMegatron},
			Sample{Version: SampleVersion, JobID: "7", ModelType: "gpt2", Plan: "dp8.tp1.pp1.mb1.a1.z0", Placement: "8",
				Iteration: ptr(40), IterS: 0.5, Source: SourceMegatron, Time: at}},
		"micro-steps": {Measurement{Iteration: 160, IterS: 2, Source: SourceDeepSpeed},
			Sample{Version: SampleVersion, JobID: "7", ModelType: "gpt2", Plan: "dp8.tp1.pp1.mb1.a1.z0", Placement: "8",
				IterS: 2, Source: SourceDeepSpeed, Time: at}},
	} {
		if d := cmp.Diff(tc.want, base.With(tc.m, at)); d != "" {
			t.Errorf("%s (-want +got):\n%s", name, d)
		}
	}
	if *base.Iteration != 99 {
		t.Errorf("With changed its receiver's iteration to %d", *base.Iteration)
	}
}

// A launch notice's global batch is a count of samples: none (0) or a
// sane positive number.
func TestLaunchValidateGlobalBatch(t *testing.T) {
	good := Launch{Kind: KindLaunch, Version: LaunchVersion, JobID: "7", ModelType: "gpt2", Dialect: "megatron", Plan: "dp2.tp1.pp1.mb4.a1.z0"}
	for _, tc := range []struct {
		gb   int
		want error
	}{{0, nil}, {64, nil}, {MaxGlobalBatch, nil}, {-1, ErrBadLaunch}, {MaxGlobalBatch + 1, ErrBadLaunch}} {
		l := good
		l.GlobalBatch = tc.gb
		if err := l.Validate(); !errors.Is(err, tc.want) || err != nil && !strings.Contains(err.Error(), fmt.Sprintf("global_batch=%d", tc.gb)) {
			t.Errorf("global_batch=%d: Validate = %v, want %v naming it", tc.gb, err, tc.want)
		}
	}
}

// checkMeasurement fails t unless m is a time rubickd can take: finite and
// positive seconds, at an iteration that is not negative, from a source
// Parse names.
func checkMeasurement(t *testing.T, line string, m Measurement) {
	t.Helper()
	if !(m.IterS > 0) || math.IsInf(m.IterS, 0) || m.Iteration < 0 ||
		!slices.Contains([]string{SourceMegatron, SourceDeepSpeed, SourceTrainerBar}, m.Source) {
		t.Fatalf("Parse(%q) = %+v", line, m)
	}
	if m.IterS > 7*24*3600 {
		return // Validate refuses it: rubick-srun sends it and rubickd says why
	}
	if err := sample().With(m, time.Now()).Validate(); err != nil {
		t.Fatalf("Parse(%q) = %+v, a sample Validate refuses: %v", line, m, err)
	}
}

// FuzzParser checks Megatron's and DeepSpeed's log lines: whatever Parse
// reads off a line is a measurement a sample can carry.
func FuzzParser(f *testing.F) {
	for _, line := range []string{
		" [2024-05-01 10:00:00] iteration       10/    1000 | consumed samples:          320 | elapsed time per iteration (ms): 512.3 | learning rate: 1.500E-04 |",
		" iteration      200/  500000 | consumed samples: 6400 | elapsed time per iteration (ms): 1034.5/1020.0 | throughput per GPU (TFLOP/s/GPU): 180.2 |",
		"[2024-05-01 10:00:00,123] [INFO] [timer.py:260:stop] epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=61.2, CurrSamplesPerSec=64.0, MemAllocated=4.2GB, MaxMemAllocated=9.1GB",
		"[INFO] [logging.py:60:log_dist] [Rank 0] 0/50, SamplesPerSec=16.0",
		"epoch=0/micro_step=1/global_step=1, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=1,",
		" validation loss at iteration 100 | lm loss value: 3.2 |",
		" iteration 1/ 2 | elapsed time per iteration (ms): 0.0 |",
		"loss: 2.34 iteration time 12ms",
		" iteration 1/ 2 | elapsed time per iteration (ms): 1e-323 |",
		"epoch=0/micro_step=1/global_step=1, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=1e-320,",
	} {
		f.Add(line, 32)
	}
	f.Fuzz(func(t *testing.T, line string, gb int) {
		if m, ok := (Parser{GlobalBatch: gb}).Parse(line); ok {
			checkMeasurement(t, line, m)
		}
	})
}

// FuzzTrainerBar feeds a Trainer's output, split into lines as rubick-srun
// splits it (at newlines and carriage returns), to one TrainerBarParser:
// each measurement is of a step of the bar, and a time a sample can carry.
func FuzzTrainerBar(f *testing.F) {
	for _, name := range []string{"hf-trainer-slow.log", "hf-trainer-fast.log", "hf-trainer-warm.log", "hf-trainer-evalfirst.log"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	f.Add(strings.Join(resumed(30), "\r"))
	f.Add("  1%|          | 1/100 [00:03<05:00,  1e-320it/s]")
	f.Add("  1%|          | 1/100 [00:03<05:00,  1e-320s/it]")
	f.Add("  1%|          | 1/100 [00:03<05:00,  3.03s/it]\r  2%|▏         | 2/100 [00:05<04:00,  2.42s/it]\r" +
		"  0%|          | 0/6 [00:00<?, ?it/s]\x1b[A\n  3%|▎         | 3/100 [00:06<03:00,  2.00s/it, loss=2.3]\n" +
		" 10%|█         | 1/10 [00:00<00:00, 29.76it/s]\r12it [00:03,  3.99it/s]\n")
	f.Fuzz(func(t *testing.T, out string) {
		p := TrainerBarParser()
		for _, line := range strings.FieldsFunc(out, func(r rune) bool { return r == '\n' || r == '\r' }) {
			m, ok := p.Parse(line)
			if !ok {
				continue
			}
			checkMeasurement(t, line, m)
			if m.Source != SourceTrainerBar || !m.Step || m.Iteration < 1 {
				t.Fatalf("Parse(%q) = %+v", line, m)
			}
		}
	})
}

// FuzzSamplePayload posts any payload, in a credential, to the samples
// endpoint: a sample it hands on converts to a model sample with a plan,
// a placement and a finite positive time, a launch notice is valid, and
// whatever it refuses is a bad request.
func FuzzSamplePayload(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"job_id":"42","model_type":"gpt2","plan":"dp1.tp1.pp1.mb1.a1.z0","placement":"1","iter_s":0.1}`,
		`{"version":1,"job_id":"42_3","plan":"dp4.tp2.pp1.mb2.a1.z0+gc","placement":"1x16","cpus":32,"iteration":10,"iter_s":0.5123,"source":"megatron","time":"2025-01-02T03:04:05Z"}`,
		`{"kind":"launch","version":1,"job_id":"42","model_type":"gpt2","dialect":"deepspeed","cannot":"tp,pp","plan":"dp1.tp2.pp1.mb1.a1.z0","refused":true}`,
		`{"version":1,"job_id":"42","plan":"dp1.tp1.pp1.mb1.a1.z0","placement":"1","iter_s":1e309}`,
		`{"version":1,"job_id":"42","plan":"dp1.tp1.pp1.mb1.a1.z0","placement":"16-8","iter_s":-1}`,
		`{"kind":"other"}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	m := inProcess{uid: 1000}
	f.Fuzz(func(t *testing.T, payload []byte) {
		h := Handler(m, Acceptors{
			Sample: func(_ context.Context, _ uint32, s Sample) error {
				ms, err := s.ModelSample()
				if err != nil {
					t.Fatalf("sample %+v handed on, but ModelSample: %v", s, err)
				}
				if !(ms.IterS > 0) || math.IsInf(ms.IterS, 0) || ms.Plan.GPUs() < 1 || ms.Resources.Placement.GPUs() < 1 || ms.Resources.CPUs < 0 {
					t.Fatalf("payload %q gives model sample %+v", payload, ms)
				}
				if _, err := model.ParsePlan(ms.Plan.String()); err != nil {
					t.Fatalf("payload %q: plan %v: %v", payload, ms.Plan, err)
				}
				return nil
			},
			Launch: func(_ context.Context, _ uint32, l Launch) error {
				if err := l.Validate(); err != nil {
					t.Fatalf("launch notice %+v handed on: %v", l, err)
				}
				return nil
			},
		})
		cred, err := m.Encode(t.Context(), payload)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/samples", strings.NewReader(cred)))
		if rec.Code != http.StatusNoContent && rec.Code != http.StatusBadRequest && rec.Code != http.StatusUnauthorized {
			t.Fatalf("payload %q: status %d: %s", payload, rec.Code, rec.Body)
		}
	})
}
