// Command latcurve draws ack latency against ingest (issue 31 item 6) from
// the CSV that star/loglet's BenchmarkLatencyCurve writes (-curve.csv):
// p50 and p99 of each class on log axes, beside the anchors' published
// ack latencies as reference lines (S2: Express 40 ms, Standard 400 ms;
// WarpStream Lightning: p99 50 ms). make bench-curve runs both.
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"image/color"
	"log"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// point is one row of the CSV.
type point struct {
	class              string
	achieved, p50, p99 float64
	load               float64
	sustained          bool
}

func main() {
	in := flag.String("csv", "build/bench-curve.csv", "the benchmark's CSV")
	out := flag.String("png", "docs/bench-curve.png", "the chart to write")
	title := flag.String("title", "Ack latency against ingest, latency-injecting store", "the chart's title")
	flag.Parse()
	pts, err := read(*in)
	if err != nil {
		log.Fatal(err)
	}
	if err := chart(*out, *title, pts); err != nil {
		log.Fatal(err)
	}
}

func read(path string) ([]point, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) < 2 {
		return nil, fmt.Errorf("%s: no points", path)
	}
	var pts []point
	for i, r := range rows[1:] {
		if len(r) != 7 {
			return nil, fmt.Errorf("%s: row %d has %d fields, want 7", path, i+2, len(r))
		}
		var p point
		p.class = r[0]
		for j, dst := range []*float64{&p.achieved, &p.p50, &p.p99, &p.load} {
			if *dst, err = strconv.ParseFloat(r[j+2], 64); err != nil {
				return nil, fmt.Errorf("%s: row %d: %w", path, i+2, err)
			}
		}
		if p.sustained, err = strconv.ParseBool(r[6]); err != nil {
			return nil, fmt.Errorf("%s: row %d: %w", path, i+2, err)
		}
		pts = append(pts, p)
	}
	return pts, nil
}

var classColor = map[string]color.RGBA{
	"express":  {R: 220, G: 120, B: 40, A: 255},
	"standard": {R: 60, G: 90, B: 200, A: 255},
}

// chart draws each class's p50 (dashed) and p99 (solid) against the
// achieved ingest; a rate the class did not sustain is drawn hollow.
func chart(path, title string, pts []point) error {
	p := plot.New()
	var load float64
	for _, pt := range pts {
		load = max(load, pt.load)
	}
	p.Title.Text = fmt.Sprintf("%s (load average up to %.0f)", title, load)
	p.X.Label.Text = "ingest, MiB/s (achieved, log scale)"
	p.Y.Label.Text = "ack latency, ms (log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	var ring *plotter.Scatter // a hollow point, for the legend
	lo, hi, top := 1e9, 0.0, 0.0
	for _, pt := range pts {
		lo, hi, top = min(lo, pt.achieved), max(hi, pt.achieved), max(top, pt.p99)
	}
	lo, hi = lo/1.5, hi*1.5
	for _, class := range []string{"express", "standard"} {
		for _, q := range []string{"p50", "p99"} {
			var xy plotter.XYs
			var hollow plotter.XYs
			for _, pt := range pts {
				if pt.class != class {
					continue
				}
				v := pt.p50
				if q == "p99" {
					v = pt.p99
				}
				xy = append(xy, plotter.XY{X: pt.achieved, Y: v})
				if !pt.sustained {
					hollow = append(hollow, plotter.XY{X: pt.achieved, Y: v})
				}
			}
			if len(xy) == 0 {
				continue
			}
			l, s, err := plotter.NewLinePoints(xy)
			if err != nil {
				return err
			}
			l.Color, s.Color = classColor[class], classColor[class]
			l.Width = vg.Points(1.5)
			s.Shape = draw.CircleGlyph{}
			if q == "p50" {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l, s)
			p.Legend.Add(fmt.Sprintf("%s %s", class, q), l, s)
			if len(hollow) > 0 {
				h, err := plotter.NewScatter(hollow)
				if err != nil {
					return err
				}
				h.Shape, h.Color, h.Radius = draw.RingGlyph{}, color.Black, vg.Points(5)
				p.Add(h)
				ring = h
			}
		}
	}
	for _, ref := range []struct {
		name string
		ms   float64
		col  color.RGBA
	}{
		{"S2 Express ack (40 ms)", 40, classColor["express"]},
		{"WarpStream Lightning p99 (50 ms)", 50, color.RGBA{R: 120, G: 120, B: 120, A: 255}},
		{"S2 Standard ack (400 ms)", 400, classColor["standard"]},
	} {
		l, err := plotter.NewLine(plotter.XYs{{X: lo, Y: ref.ms}, {X: hi, Y: ref.ms}})
		if err != nil {
			return err
		}
		l.Color, l.Width = ref.col, vg.Points(0.8)
		l.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
		p.Add(l)
		p.Legend.Add(ref.name, l)
	}
	if ring != nil {
		p.Legend.Add("rate not sustained", ring)
	}
	p.X.Min, p.X.Max = lo, hi
	// Room above the curves and the 400 ms line for the legend.
	p.Y.Min, p.Y.Max = 2, max(8000, top*20)
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(20*vg.Centimeter, 13*vg.Centimeter, path)
}
