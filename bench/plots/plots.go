// Package plots draws a bench report's charts (upstream in-flight, the
// latency CDF, the queue) as PNG and SVG, with gonum/plot. It is a package
// of its own so that only the bench command links a plotting library: the
// sluice server runs the bench for its page (web/benchtrace) and draws no
// chart.
package plots

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/bench"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// modeColor keeps a mode's colour the same on every chart.
var modeColor = map[string]color.Color{
	bench.ModeDirect:   color.RGBA{R: 120, G: 120, B: 120, A: 255},
	bench.ModePlain:    color.RGBA{R: 214, G: 39, B: 40, A: 255},
	bench.ModeWindowed: color.RGBA{R: 31, G: 119, B: 180, A: 255},
	// windowed-fifo: the seed's one line, against windowed's fair order
	bench.ModeWindowedFIFO: color.RGBA{R: 44, G: 160, B: 44, A: 255},
}

// variantColors colour the scenario's variants, in the order they ran.
var variantColors = []color.Color{
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 23, G: 190, B: 207, A: 255},
}

// colorOf is mode's colour: its own for direct, plain and windowed, else
// one of variantColors by the order the variants ran in.
func colorOf(r *bench.Report, mode string) color.Color {
	if c, ok := modeColor[mode]; ok {
		return c
	}
	i := 0
	for _, res := range r.Results() {
		if res.Mode == mode {
			break
		}
		if _, builtin := modeColor[res.Mode]; !builtin {
			i++
		}
	}
	return variantColors[i%len(variantColors)]
}

// spikeColor shades the upstream's slow periods: light enough that the
// lines over it stay legible (non-premultiplied: color.RGBA would need
// its channels scaled down to the alpha).
var spikeColor = color.NRGBA{R: 255, G: 190, B: 60, A: 70}

// The charts' size and type. gonum's default is a 12 pt serif title
// over 10 pt serif ticks; on a 7-inch chart viewed at screen size those
// read small, so everything is sans-serif and a size up.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 4.5 * vg.Inch
	titleSize  = 14
	labelSize  = 12
	tickSize   = 11
	legendSize = 11
	noteSize   = 9
)

var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// chart is a plot with its legend and caption, drawn beside and under it
// rather than over the data.
type chart struct {
	plot    *plot.Plot
	legend  plot.Legend
	names   []string
	caption []string
}

// Write draws inflight, latency_cdf and queue as PNG and SVG into dir: a
// bench.Plot, for Report.WriteFiles and Suite.WriteFiles.
func Write(r *bench.Report, dir string) error {
	for _, c := range []struct {
		name string
		make func(*bench.Report) (*chart, error)
	}{
		{"inflight", inflightPlot},
		{"latency_cdf", latencyPlot},
		{"queue", queuePlot},
	} {
		ch, err := c.make(r)
		if err != nil {
			return fmt.Errorf("plot %s: %w", c.name, err)
		}
		for _, ext := range []string{"png", "svg"} {
			if err := ch.save(filepath.Join(dir, c.name+"."+ext), ext); err != nil {
				return fmt.Errorf("plot %s: %w", c.name, err)
			}
		}
	}
	return nil
}

func (ch *chart) save(path, format string) error {
	cw, err := draw.NewFormattedCanvas(plotWidth, plotHeight, format)
	if err != nil {
		return err
	}
	dc := draw.New(cw)
	// White behind everything, the legend and the caption too.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	note := text.Style{Color: color.Gray{Y: 60}, Font: font.From(sans, noteSize), Handler: plot.DefaultTextHandler,
		XAlign: draw.XLeft, YAlign: draw.YBottom}
	lineH := note.Height("Ay") * 1.25
	pad := vg.Points(6)
	captionH := lineH*vg.Length(len(ch.caption)) + pad
	for i, line := range ch.caption {
		y := dc.Min.Y + pad/2 + lineH*vg.Length(len(ch.caption)-1-i)
		dc.FillText(note, vg.Point{X: dc.Min.X + pad, Y: y}, line)
	}

	legendW := vg.Length(0)
	for _, n := range ch.names {
		legendW = max(legendW, ch.legend.TextStyle.Width(n))
	}
	if legendW > 0 {
		legendW += ch.legend.ThumbnailWidth + 3*pad
	}
	area := draw.Crop(dc, 0, -legendW, captionH, 0)
	ch.plot.Draw(area)
	if legendW > 0 {
		// Beside the data area, level with its top.
		top := ch.plot.Title.TextStyle.Height(ch.plot.Title.Text) + ch.plot.Title.Padding + pad
		ch.legend.Draw(draw.Crop(dc, dc.Max.X-dc.Min.X-legendW+pad, 0, captionH, -top))
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := cw.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newChart(r *bench.Report, title, x, y string) *chart {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(sans, titleSize)
	p.Title.Padding = vg.Points(8)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, labelSize)
		a.Tick.Label.Font = font.From(sans, tickSize)
		a.Padding = vg.Points(2)
	}
	p.X.Label.Text, p.Y.Label.Text = x, y
	p.Add(plotter.NewGrid())
	l := plot.NewLegend()
	l.TextStyle.Font = font.From(sans, legendSize)
	l.Top, l.Left = true, true
	l.ThumbnailWidth = vg.Points(20)
	l.Padding = vg.Points(4)
	return &chart{plot: p, legend: l, caption: caption(r)}
}

func (ch *chart) add(name string, t ...plot.Thumbnailer) {
	ch.legend.Add(name, t...)
	ch.names = append(ch.names, name)
}

// caption says what produced the chart, so that a PNG passed around on
// its own can still be read: the scenario, the settings and the version.
func caption(r *bench.Report) []string {
	first := fmt.Sprintf("scenario %s, seed %d, %d arrivals; windowed: window %d or %g ms, %d slots, deadline %g s; client timeout %g s, %d retries",
		r.Scenario, r.Seed, r.Arrivals, r.Sluice.MaxSize, r.Sluice.MaxWaitMS, r.Sluice.MaxConcurrency, r.Sluice.TimeoutS,
		r.Client.TimeoutS, r.Client.MaxRetries)
	var second []string
	for _, s := range r.Spikes {
		second = append(second, fmt.Sprintf("upstream latency x%g from %g s to %g s (shaded)", s.Factor, s.FromS, s.ToS))
	}
	if n := len(r.Repeats); n > 1 {
		second = append(second, fmt.Sprintf("the first of %d runs", n))
	}
	second = append(second, "sluice "+r.Version)
	return []string{first, strings.Join(second, "; ")}
}

func series(r *bench.Report, ch *chart, value func(bench.Sample) float64, only func(*bench.ModeResult) bool) error {
	for _, res := range r.Results() {
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
		l.Color = colorOf(r, res.Mode)
		l.Width = vg.Points(1.5)
		ch.plot.Add(l)
		ch.add(res.Mode, l)
	}
	return nil
}

// timeChart is a chart over the run's time with the spike periods shaded
// under the data and counts on the y axis.
func timeChart(r *bench.Report, title, y string) *chart {
	ch := newChart(r, title, "time since the first arrival (s)", y)
	for i, s := range r.Spikes {
		b := &band{from: s.FromS, to: s.ToS}
		ch.plot.Add(b)
		if i == 0 {
			ch.add(fmt.Sprintf("upstream x%g slower", s.Factor), b)
		}
	}
	ch.plot.X.Min = 0
	ch.plot.X.Tick.Marker = niceTicks{}
	ch.plot.Y.Min = 0
	ch.plot.Y.Tick.Marker = niceTicks{integer: true}
	return ch
}

func inflightPlot(r *bench.Report) (*chart, error) {
	ch := timeChart(r, "Upstream in-flight — "+r.Scenario, "requests in generation")
	if err := series(r, ch, func(s bench.Sample) float64 { return float64(s.UpstreamInflight) }, nil); err != nil {
		return nil, err
	}
	cap := float64(r.Sluice.MaxConcurrency)
	f := plotter.NewFunction(func(float64) float64 { return cap })
	f.Color = color.Black
	f.Width = vg.Points(1)
	f.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	ch.plot.Add(f)
	ch.add(fmt.Sprintf("cap (%d slots)", r.Sluice.MaxConcurrency), f)
	ch.plot.Y.Max = max(ch.plot.Y.Max*1.05, cap+1) // headroom over the peak
	return ch, nil
}

func queuePlot(r *bench.Report) (*chart, error) {
	ch := timeChart(r, "Waiting in sluice (window + gate) — "+r.Scenario, "requests queued")
	err := series(r, ch, func(s bench.Sample) float64 { return float64(s.Queued) },
		func(res *bench.ModeResult) bool { return res.Windowed })
	ch.plot.Y.Max = max(ch.plot.Y.Max*1.05, 1) // headroom; an empty queue still gets an axis
	return ch, err
}

func latencyPlot(r *bench.Report) (*chart, error) {
	ch := newChart(r, "Latency CDF of successful requests — "+r.Scenario, "latency (ms, log scale)", "fraction of requests ≤ x")
	p := ch.plot
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logTicks{}
	p.Y.Tick.Marker = niceTicks{}
	for _, res := range r.Results() {
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
		l.Color = colorOf(r, res.Mode)
		l.Width = vg.Points(1.5)
		p.Add(l)
		ch.add(res.Mode, l)
	}
	p.Y.Min, p.Y.Max = 0, 1
	return ch, nil
}

// band shades [from, to) of the x axis over the whole height.
type band struct{ from, to float64 }

func (b *band) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x0, x1 := max(trX(b.from), c.Min.X), min(trX(b.to), c.Max.X)
	if x1 <= x0 {
		return
	}
	c.FillPolygon(spikeColor, []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
}

func (b *band) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(spikeColor, []vg.Point{c.Min, {X: c.Max.X, Y: c.Min.Y}, c.Max, {X: c.Min.X, Y: c.Max.Y}})
}

// niceTicks are four to eight labelled ticks at 1, 2 or 5 times a power of
// ten, with a minor tick between each; integer keeps the step at 1 or
// more, for counts, whose axis should not read 0.5 requests.
type niceTicks struct{ integer bool }

func (t niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return []plot.Tick{{Value: lo, Label: formatTick(lo, 1)}}
	}
	step := niceStep((hi - lo) / 8)
	if t.integer {
		step = max(step, 1)
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: formatTick(v, step)})
		if mid := v + step/2; mid < hi && (!t.integer || step >= 2) {
			ticks = append(ticks, plot.Tick{Value: mid})
		}
	}
	return ticks
}

// niceStep is the least of 1, 2 and 5 times a power of ten not below x.
func niceStep(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// formatTick prints v with as many decimals as step needs, so that 0.25
// steps do not read 0.2 0.5 0.8.
func formatTick(v, step float64) string {
	prec := max(0, -int(math.Floor(math.Log10(step)+1e-9)))
	if math.Abs(v) < step*1e-9 {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// logTicks label 1, 2 and 5 times each power of ten in range, the others
// of 1 to 9 as minor ticks. A range too narrow for three such labels (a
// CDF that spans less than a factor of 5) falls back to niceTicks, so
// there are always several labels to read a value against.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	lo = max(lo, 1e-3)
	var ticks []plot.Tick
	labelled := 0
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		p := math.Pow(10, e)
		for m := 1.0; m <= 9; m++ {
			v := m * p
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = formatTick(v, p)
				labelled++
			}
			ticks = append(ticks, t)
		}
	}
	if labelled < 3 {
		return niceTicks{}.Ticks(lo, hi)
	}
	return ticks
}
