package bench

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// modeColor keeps a mode's colour the same on every chart.
var modeColor = map[string]color.Color{
	ModeDirect:   color.RGBA{R: 120, G: 120, B: 120, A: 255},
	ModePlain:    color.RGBA{R: 214, G: 39, B: 40, A: 255},
	ModeWindowed: color.RGBA{R: 31, G: 119, B: 180, A: 255},
}

// WritePlots writes inflight, latency_cdf and queue as PNG and SVG into dir.
func (r *Report) WritePlots(dir string) error {
	for _, c := range []struct {
		name string
		make func() (*plot.Plot, error)
	}{
		{"inflight", r.inflightPlot},
		{"latency_cdf", r.latencyPlot},
		{"queue", r.queuePlot},
	} {
		p, err := c.make()
		if err != nil {
			return fmt.Errorf("plot %s: %w", c.name, err)
		}
		for _, ext := range []string{".png", ".svg"} {
			if err := p.Save(7*vg.Inch, 3.5*vg.Inch, filepath.Join(dir, c.name+ext)); err != nil {
				return fmt.Errorf("plot %s: %w", c.name, err)
			}
		}
	}
	return nil
}

func (r *Report) newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s — scenario %s", title, r.Scenario)
	p.X.Label.Text, p.Y.Label.Text = x, y
	p.Legend.Top, p.Legend.Left = true, false
	p.Add(plotter.NewGrid())
	return p
}

func (r *Report) series(p *plot.Plot, value func(Sample) float64, only func(*ModeResult) bool) error {
	for _, res := range r.results {
		if only != nil && !only(res) {
			continue
		}
		xys := make(plotter.XYs, len(res.Samples))
		for i, s := range res.Samples {
			xys[i].X, xys[i].Y = s.T.Seconds(), value(s)
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = modeColor[res.Mode]
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(res.Mode, l)
	}
	return nil
}

func (r *Report) inflightPlot() (*plot.Plot, error) {
	p := r.newPlot("Upstream in-flight", "time (s)", "requests in generation")
	if err := r.series(p, func(s Sample) float64 { return float64(s.UpstreamInflight) }, nil); err != nil {
		return nil, err
	}
	cap := float64(r.Sluice.MaxConcurrency)
	f := plotter.NewFunction(func(float64) float64 { return cap })
	f.Color = color.Black
	f.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(f)
	p.Legend.Add(fmt.Sprintf("cap (BATCH_MAX_CONCURRENCY=%d)", r.Sluice.MaxConcurrency), f)
	p.Y.Min = 0
	return p, nil
}

func (r *Report) queuePlot() (*plot.Plot, error) {
	p := r.newPlot("Waiting in sluice (window + gate)", "time (s)", "requests queued")
	err := r.series(p, func(s Sample) float64 { return float64(s.Queued) },
		func(res *ModeResult) bool { return res.Mode == ModeWindowed })
	p.Y.Min = 0
	return p, err
}

func (r *Report) latencyPlot() (*plot.Plot, error) {
	p := r.newPlot("Latency CDF of successful requests", "latency (ms, log scale)", "fraction ≤ x")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = false, false
	for _, res := range r.results {
		var lat []float64
		for _, rec := range res.Records {
			if rec.Outcome == "ok" {
				lat = append(lat, max(rec.DoneMS-rec.ArrivalMS, 0.1))
			}
		}
		if len(lat) == 0 {
			continue
		}
		slices.Sort(lat)
		xys := make(plotter.XYs, len(lat))
		for i, v := range lat {
			xys[i].X, xys[i].Y = v, float64(i+1)/float64(len(lat))
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color = modeColor[res.Mode]
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(res.Mode, l)
	}
	p.Y.Min, p.Y.Max = 0, 1
	return p, nil
}
