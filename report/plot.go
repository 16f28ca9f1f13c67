package report

import (
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/rubick-sched/rubick/chart"
)

// ErrNoData reports a chart the input has no data for (no times, no plans).
var ErrNoData = errors.New("no data to plot")

// PlotOptions configure Plot.
type PlotOptions struct {
	// Format is "png" or "svg".
	Format string
	// CapacityGPUs turns the allocation chart into a utilisation fraction;
	// 0 plots allocated GPUs.
	CapacityGPUs int
	// Now ends the runs that have not ended yet.
	Now time.Time
}

// palette is a fixed colour cycle, one colour per model type.
var palette = []color.RGBA{
	{0xd6, 0x27, 0x28, 0xff}, {0x1f, 0x77, 0xb4, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
}

// modelColors gives each model type of the report's jobs its colour, in
// name order, so that a model type has one colour in every chart.
func (r *Report) modelColors() map[string]color.RGBA {
	all := map[string]bool{}
	for _, j := range r.Jobs {
		all[j.ModelType] = true
	}
	out := map[string]color.RGBA{}
	for i, mt := range sortedKeys(all) {
		out[mt] = palette[i%len(palette)]
	}
	return out
}

// Plot writes jct-cdf, gpu-alloc and plans charts into dir and returns the
// files written. A chart without data is skipped; its reason comes back in
// the joined error (wrapping ErrNoData), after the other charts are written.
func (r *Report) Plot(dir string, o PlotOptions) ([]string, error) {
	if o.Format != "png" && o.Format != "svg" {
		return nil, fmt.Errorf("report: plot format %q: want png or svg", o.Format)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: plot: %w", err)
	}
	var files []string
	var errs []error
	for _, c := range []struct {
		name string
		make func(PlotOptions) (*plot.Plot, error)
	}{{"jct-cdf", r.jctCDF}, {"gpu-alloc", r.gpuAlloc}, {"plans", r.plansOverTime}} {
		p, err := c.make(o)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
			continue
		}
		file := filepath.Join(dir, c.name+"."+o.Format)
		if err := save(p, file); err != nil {
			return files, err
		}
		files = append(files, file)
	}
	if len(errs) > 0 {
		return files, fmt.Errorf("report: plot: %w", errors.Join(errs...))
	}
	return files, nil
}

// jctCDF plots the CDF of JCTs per model type.
func (r *Report) jctCDF(PlotOptions) (*plot.Plot, error) {
	by := map[string][]float64{}
	for _, j := range r.Jobs {
		if j.JCTS != nil {
			by[j.ModelType] = append(by[j.ModelType], *j.JCTS)
		}
	}
	if len(by) == 0 {
		return nil, fmt.Errorf("%w: no job has a JCT (needs Submit and End)", ErrNoData)
	}
	p := plot.New()
	p.Title.Text = "Job completion time CDF"
	p.X.Label.Text = "JCT (h)"
	p.Y.Label.Text = "fraction of jobs"
	p.Y.Min, p.Y.Max = 0, 1
	colors := r.modelColors()
	for _, mt := range sortedKeys(by) {
		v := slices.Sorted(slices.Values(by[mt]))
		pts := make(plotter.XYs, 0, 2*len(v))
		for k, x := range v {
			pts = append(pts, plotter.XY{X: x / 3600, Y: float64(k) / float64(len(v))},
				plotter.XY{X: x / 3600, Y: float64(k+1) / float64(len(v))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = colors[mt]
		p.Add(l)
		p.Legend.Add(mt, l)
	}
	p.Legend.Top, p.Legend.Left = false, false
	return p, nil
}

// gpuAlloc plots the GPUs allocated over time (or their fraction of the
// capacity), summed over every run.
func (r *Report) gpuAlloc(o PlotOptions) (*plot.Plot, error) {
	// Without AllocTRES every run counts 0 GPUs: say why rather than
	// plot nothing allocated.
	if !r.tres {
		return nil, fmt.Errorf("%w: no AllocTRES column: the GPUs of every run are unknown", ErrNoData)
	}
	type ev struct {
		t time.Time
		d int
	}
	var evs []ev
	for _, j := range r.Jobs {
		for _, run := range j.Runs {
			if run.Start == nil || run.GPUs == 0 {
				continue
			}
			end := run.until(o.Now)
			if !end.After(*run.Start) {
				continue
			}
			evs = append(evs, ev{*run.Start, run.GPUs}, ev{end, -run.GPUs})
		}
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("%w: no run has a start time and GPUs", ErrNoData)
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return a.t.Compare(b.t) })
	t0 := evs[0].t
	p := plot.New()
	p.Title.Text = "GPUs allocated"
	p.X.Label.Text = "hours since " + t0.Format(time.RFC3339)
	p.Y.Label.Text = "GPUs"
	scale := 1.0
	if o.CapacityGPUs > 0 {
		p.Title.Text = fmt.Sprintf("GPU allocation (of %d GPUs)", o.CapacityGPUs)
		p.Y.Label.Text = "fraction of GPUs"
		scale = 1 / float64(o.CapacityGPUs)
		p.Y.Min, p.Y.Max = 0, 1.05
	}
	pts := plotter.XYs{}
	cur := 0
	for _, e := range evs {
		x := e.t.Sub(t0).Hours()
		pts = append(pts, plotter.XY{X: x, Y: float64(cur) * scale})
		cur += e.d
		pts = append(pts, plotter.XY{X: x, Y: float64(cur) * scale})
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	l.Color = palette[1]
	p.Add(l)
	return p, nil
}

// maxLabelledRows is the most jobs the plans chart labels its runs for:
// past it the labels of one row run into the next (a week of a busy
// cluster holds hundreds), and rubick report --jobs lists the plans.
const maxLabelledRows = 30

// plansOverTime draws one bar per run of every job with a plan, one job per
// row, in its model type's colour (as in the JCT chart, with a legend),
// labelled with the run's plan up to maxLabelledRows jobs. Bars thin as
// rows grow, so that rows stay apart.
func (r *Report) plansOverTime(o PlotOptions) (*plot.Plot, error) {
	var t0 time.Time
	type seg struct {
		row        int
		start, end time.Time
		plan       string
		color      color.RGBA
	}
	var segs []seg
	colors := r.modelColors()
	shown := map[string]color.RGBA{} // the model types with a bar
	row := 0
	for _, j := range r.Jobs {
		if len(j.Plans) == 0 {
			continue
		}
		added := false
		for _, run := range j.Runs {
			if run.Start == nil || run.Plan == "" {
				continue
			}
			end := run.until(o.Now)
			segs = append(segs, seg{row, *run.Start, end, run.Plan, colors[j.ModelType]})
			shown[j.ModelType] = colors[j.ModelType]
			if t0.IsZero() || run.Start.Before(t0) {
				t0 = *run.Start
			}
			added = true
		}
		if added {
			row++
		}
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("%w: no run has both a start time and a plan", ErrNoData)
	}
	p := plot.New()
	p.Title.Text = "Plans over time (one row per job)"
	labelled := row <= maxLabelledRows
	if !labelled {
		p.Title.Text = fmt.Sprintf("Plans over time (one row per job; %d jobs, too many to label: rubick report --jobs lists their plans)", row)
	}
	p.X.Label.Text = "hours since " + t0.Format(time.RFC3339)
	p.Y.Label.Text = "job"
	// About 300 points of height hold the rows.
	width := vg.Points(min(6, max(1, 300/float64(row))))
	labels := plotter.XYLabels{}
	for _, s := range segs {
		y := float64(s.row)
		l, err := plotter.NewLine(plotter.XYs{{X: s.start.Sub(t0).Hours(), Y: y}, {X: s.end.Sub(t0).Hours(), Y: y}})
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = s.color, width
		p.Add(l)
		if labelled {
			labels.XYs = append(labels.XYs, plotter.XY{X: s.start.Sub(t0).Hours(), Y: y + 0.25})
			labels.Labels = append(labels.Labels, s.plan)
		}
	}
	if labelled {
		lb, err := plotter.NewLabels(labels)
		if err != nil {
			return nil, err
		}
		p.Add(lb)
	}
	for _, mt := range sortedKeys(shown) {
		l, err := plotter.NewLine(plotter.XYs{{}})
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = shown[mt], vg.Points(6)
		p.Legend.Add(mt, l)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Min, p.Y.Max = -0.5, float64(row)-0.5+0.5
	return p, nil
}

// save draws p and writes it to file, whose extension is the format.
func save(p *plot.Plot, file string) error {
	const w, h = 8 * vg.Inch, 5 * vg.Inch
	c, err := chart.NewCanvas(file, w, h)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	p.Draw(draw.New(c))
	if err := chart.WriteFile(c, file); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// until is when a started run ends on a plot: its End; for one still
// running, its start plus the Elapsed sacct gave, as its GPU-hours count
// it (saved input may be days old), else now.
func (run Run) until(now time.Time) time.Time {
	switch {
	case run.End != nil:
		return *run.End
	case run.ElapsedS > 0:
		return run.Start.Add(time.Duration(run.ElapsedS * float64(time.Second)))
	}
	return now
}
