package artifact

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/rubick-sched/rubick/model"
)

// subset is the embedded data of a few models only, to keep tests fast.
func subset(t testing.TB, names ...string) *Set {
	t.Helper()
	all, err := Load(Default())
	if err != nil {
		t.Fatal(err)
	}
	s := &Set{Models: map[string]ModelInfo{}, Profiles: map[string][]ProfileRow{}, Placements: map[string][]Measurement{}}
	for _, n := range names {
		s.Models[n], s.Profiles[n], s.Placements[n] = all.Models[n], all.Profiles[n], all.Placements[n]
	}
	return s
}

func TestLearn(t *testing.T) {
	set := subset(t, "bert", "llama7", "llama30")
	const rows, seeds = 7, 4 // llama30 has no runs of its own: a refit needs 7 rows
	scores, err := Learn(context.Background(), set, model.DefaultEnv(), LearnOptions{Rows: rows, Seeds: seeds, Threshold: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]LearnScore{}
	sum := 0
	for _, s := range scores {
		by[s.Model] = s
		if s.Model != "all" {
			sum += s.Scored
			if want := (len(set.Placements[s.Model]) - rows) * seeds; s.Scored != want {
				t.Errorf("%s: scored %d predictions, want %d (every row not drawn, every seed)", s.Model, s.Scored, want)
			}
		}
		if s.Promoted == 0 && s.LearnedMAPEPct != s.StaticMAPEPct {
			t.Errorf("%s: no refit promoted, yet learned MAPE %.2f != static %.2f", s.Model, s.LearnedMAPEPct, s.StaticMAPEPct)
		}
		if s.Promoted > s.Refits {
			t.Errorf("%s: %d promotions out of %d refits", s.Model, s.Promoted, s.Refits)
		}
	}
	if by["all"].Scored != sum {
		t.Errorf("all: scored %d, want the sum %d", by["all"].Scored, sum)
	}
	// llama30's profile is llama7's, so its fit is off on every row: each
	// draw warrants a refit, and the refits must fix most of the error.
	l := by["llama30"]
	if l.Refits != seeds || l.Promoted < seeds-1 || !(l.LearnedMAPEPct < 0.6*l.StaticMAPEPct) {
		t.Errorf("llama30: %d refits, %d promoted, MAPE %.1f -> %.1f %%; want %d refits, >= %d promoted, under 60 %% of static",
			l.Refits, l.Promoted, l.StaticMAPEPct, l.LearnedMAPEPct, seeds, seeds-1)
	}
}

func TestLearnRejects(t *testing.T) {
	set := subset(t, "bert")
	for name, tc := range map[string]struct {
		opts LearnOptions
		want string
	}{
		"no rows":       {LearnOptions{Rows: 0, Seeds: 1, Threshold: 0.1}, "rows=0"},
		"no seeds":      {LearnOptions{Rows: 3, Seeds: 0, Threshold: 0.1}, "seeds=0"},
		"nan threshold": {LearnOptions{Rows: 3, Seeds: 1, Threshold: math.NaN()}, "threshold=NaN"},
		"rows of none":  {LearnOptions{Rows: 1000, Seeds: 1, Threshold: 0.1}, "rows=1000: no model"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Learn(context.Background(), set, model.DefaultEnv(), tc.opts)
			if !errors.Is(err, model.ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Learn(%+v) = %v, want ErrBadInput naming %s", tc.opts, err, tc.want)
			}
		})
	}
}

// BenchmarkRefitVit20 is one online refit decision of the daemon: vit's 7
// profile runs and 20 measured multi-node configurations, 10 folds.
func BenchmarkRefitVit20(b *testing.B) {
	set := subset(b, "vit")
	spec := set.Models["vit"].Spec
	fits, err := FitAll(context.Background(), set, model.DefaultEnv())
	if err != nil {
		b.Fatal(err)
	}
	old, err := OwnProfileSamples(set, "vit")
	if err != nil {
		b.Fatal(err)
	}
	var recent []model.Sample
	for _, m := range set.Placements["vit"] {
		if m.Placement.Nodes() < 2 || len(recent) == 20 {
			continue
		}
		s, err := m.Sample(spec)
		if err != nil {
			b.Fatal(err)
		}
		recent = append(recent, s)
	}
	for b.Loop() {
		if _, err := model.Refit(context.Background(), spec, model.DefaultEnv(), fits["vit"].Params, old, recent); err != nil {
			b.Fatal(err)
		}
	}
}
