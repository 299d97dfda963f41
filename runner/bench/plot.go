package main

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotResults draws two panels into one PNG: terminal orders per second
// over the run, and the distribution of StartOrder and start-to-terminal
// latencies.
func plotResults(path string, res loadResult) error {
	tp := plot.New()
	tp.Title.Text = "Orders reaching a terminal status per second"
	tp.X.Label.Text = "time since load start (s)"
	tp.Y.Label.Text = "orders/s"
	per := perSecond(res)
	pts := make(plotter.XYs, 0, len(per))
	for i, n := range per {
		// The last bucket is a partial second.
		if i == len(per)-1 && len(per) > 1 {
			break
		}
		pts = append(pts, plotter.XY{X: float64(i) + 0.5, Y: float64(n)})
	}
	if len(pts) > 0 {
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = color.RGBA{B: 200, A: 255}
		l.Width = vg.Points(1.5)
		tp.Add(l, plotter.NewGrid())
	}
	tp.Y.Min = 0

	lp := plot.New()
	lp.Title.Text = "Latency distribution"
	lp.X.Label.Text = "latency (ms)"
	lp.Y.Label.Text = "orders"
	var start, e2e plotter.Values
	for _, r := range res.Results {
		if r.Err != "" {
			continue
		}
		start = append(start, ms(r.StartLat))
		if r.terminal() {
			e2e = append(e2e, ms(r.E2E))
		}
	}
	// Both histograms share the bins of the wider one, up to its p99, so
	// a few outliers do not squash the shape.
	hi := 0.0
	for _, v := range [][]time.Duration{durs(start), durs(e2e)} {
		if p := percentiles(v).P99; p > hi {
			hi = p
		}
	}
	if hi > 0 {
		for _, s := range []struct {
			name string
			v    plotter.Values
			c    color.Color
		}{
			{"StartOrder", start, color.NRGBA{R: 220, G: 60, B: 40, A: 150}},
			{"start → terminal", e2e, color.NRGBA{R: 30, G: 90, B: 220, A: 150}},
		} {
			clipped := make(plotter.Values, 0, len(s.v))
			for _, x := range s.v {
				if x <= hi {
					clipped = append(clipped, x)
				}
			}
			if len(clipped) == 0 {
				continue
			}
			h, err := plotter.NewHist(clipped, 60)
			if err != nil {
				return err
			}
			h.FillColor = s.c
			h.LineStyle.Width = 0
			lp.Add(h)
			lp.Legend.Add(fmt.Sprintf("%s (p50 %.1f, p99 %.1f ms)", s.name, percentiles(durs(s.v)).P50, percentiles(durs(s.v)).P99), h)
		}
		lp.Legend.Top = true
		lp.X.Min = 0
		lp.X.Max = hi
	}

	img := vgimg.New(10*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align([][]*plot.Plot{{tp}, {lp}}, tiles, dc)
	tp.Draw(canvases[0][0])
	lp.Draw(canvases[1][0])
	f, err := createFile(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return err
	}
	return f.Close()
}

// durs turns millisecond values back into durations for percentiles.
func durs(v plotter.Values) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x * float64(time.Millisecond))
	}
	return out
}
