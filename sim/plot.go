package sim

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/rubick-sched/rubick/chart"
)

// palette gives each policy a distinct colour, in result order.
var palette = []color.RGBA{
	{0xd6, 0x27, 0x28, 0xff}, {0x1f, 0x77, 0xb4, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
}

// Plot writes two panels to file (.svg or .png): the CDF of job completion
// times per policy and the fraction of GPUs allocated over time.
func Plot(file string, results []*Result) error {
	cdf := plot.New()
	cdf.Title.Text = "Job completion time CDF"
	cdf.X.Label.Text = "JCT (s, log scale)"
	cdf.Y.Label.Text = "fraction of jobs"
	cdf.X.Scale = plot.LogScale{}
	cdf.X.Tick.Marker = plot.LogTicks{Prec: -1}
	util := plot.New()
	util.Title.Text = "GPU allocation"
	util.X.Label.Text = "time (h)"
	util.Y.Label.Text = "fraction of GPUs"
	util.Y.Min, util.Y.Max = 0, 1.05
	for i, r := range results {
		col := palette[i%len(palette)]
		jcts := r.JCTs()
		pts := make(plotter.XYs, 0, len(jcts))
		for k, x := range jcts {
			pts = append(pts, plotter.XY{X: max(x, 1), Y: float64(k+1) / float64(r.Jobs)})
		}
		if len(pts) > 0 {
			l, err := plotter.NewLine(pts)
			if err != nil {
				return fmt.Errorf("plot %s: %w", r.Policy, err)
			}
			l.Color = col
			cdf.Add(l)
			cdf.Legend.Add(r.Policy, l)
		}
		// Smooth utilisation over 30 rounds so the policies stay readable.
		u := r.Util()
		up := make(plotter.XYs, 0, len(u))
		const w = 30
		sum := 0.0
		for k, p := range u {
			sum += p.Util
			if k >= w {
				sum -= u[k-w].Util
			}
			up = append(up, plotter.XY{X: p.T / 3600, Y: sum / float64(min(k+1, w))})
		}
		if len(up) > 0 {
			l, err := plotter.NewLine(up)
			if err != nil {
				return fmt.Errorf("plot %s: %w", r.Policy, err)
			}
			l.Color = col
			util.Add(l)
			util.Legend.Add(r.Policy, l)
		}
	}
	cdf.Legend.Top, cdf.Legend.Left = false, false
	util.Legend.Top = false
	const width, height = 10 * vg.Inch, 8 * vg.Inch
	plots := [][]*plot.Plot{{cdf}, {util}}
	c, err := chart.NewCanvas(file, width, height)
	if err != nil {
		return err
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadX: vg.Points(6), PadY: vg.Points(12)}
	canvases := plot.Align(plots, tiles, dc)
	for row := range plots {
		plots[row][0].Draw(canvases[row][0])
	}
	return chart.WriteFile(c, file)
}
