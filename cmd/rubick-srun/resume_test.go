package main

import (
	"log/slog"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rubick-sched/rubick/launch/report"
)

// itLine is a Megatron iteration line of iteration i at ms per iteration.
func itLine(i int, ms string) string {
	return " iteration " + string(rune('0'+i)) + "/ 9 | elapsed time per iteration (ms): " + ms + " |"
}

// A suspension (SIGSTOP, then SIGCONT at scontrol resume) inflates the
// trainer's next iteration time: that line is not reported, the ones
// before and after it are.
func TestSamplerDropsLineAcrossResume(t *testing.T) {
	var col collector
	srv := col.server(t)
	rep := report.NewReporter(t.Context(), report.ReporterConfig{URL: srv.URL, Encoder: base64Encoder{}})
	res := watchResumes(t.Context(), slog.New(slog.DiscardHandler))
	s := &sampler{rep: rep, skip: 1, resumes: res.lines(),
		base: report.Sample{Version: 1, JobID: "1", Plan: "dp1.tp1.pp1.mb1.a1.z0", Placement: "1"}}
	s.line(itLine(1, "900.0")) // warm-up
	s.line(itLine(2, "100.0"))
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); res.n.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("SIGCONT not counted")
		}
	}
	s.line(itLine(3, "4100.0")) // 4 s suspended in this interval
	s.line(itLine(4, "110.0"))
	rep.Close(t.Context())
	col.mu.Lock()
	defer col.mu.Unlock()
	var got []int
	for _, smp := range col.got {
		got = append(got, *smp.Iteration)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]int{2, 4}, got); diff != "" {
		t.Errorf("iterations reported (-want +got):\n%s", diff)
	}
}

// A profiling run counts the line as measured (the run moves on) but keeps
// no time from it; one in the warm-up is skipped as before.
func TestProfileMeterDropsLineAcrossResume(t *testing.T) {
	res := &resumes{}
	m := &profileMeter{skip: 1, want: 5, enough: make(chan struct{}), resumes: res.lines()}
	res.n.Add(1) // resumed during the warm-up
	m.line(itLine(1, "900.0"))
	m.line(itLine(2, "100.0"))
	res.n.Add(1)
	m.line(itLine(3, "4100.0"))
	m.line(itLine(4, "110.0"))
	m.line(itLine(5, "120.0"))
	n, iterS := m.result()
	if diff := cmp.Diff([]float64{0.1, 0.11, 0.12}, iterS); n != 5 || diff != "" {
		t.Errorf("measured %d (want 5), times (-want +got):\n%s", n, diff)
	}
}
