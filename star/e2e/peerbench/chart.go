package peerbench

import (
	"fmt"
	"image/color"
	"strings"
	"unicode/utf8"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// WriteChart draws each workload's median throughput, both systems side by
// side, on a log scale (the rows span four orders of magnitude) as a PNG.
func WriteChart(path, title string, rows []Row) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "messages/s (median, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())

	// Bars stand on an invisible base of 1 msg/s: a log scale has no 0.
	n := len(rows)
	base, err := plotter.NewBarChart(ones(n), vg.Points(1))
	if err != nil {
		return err
	}
	nats, star := make(plotter.Values, n), make(plotter.Values, n)
	names := make([]string, n)
	for i, r := range rows {
		nats[i] = max(Median(r.NATS)-1, 0)
		star[i] = max(Median(r.Star)-1, 0)
		names[i] = fmt.Sprintf("%s\n%.2f×", wrapLabel(r.Workload.Name, labelWidth), r.Ratio())
	}
	w := vg.Points(18)
	for _, s := range []struct {
		name string
		vals plotter.Values
		col  color.RGBA
		off  vg.Length
	}{
		{"NATS JetStream (sync_interval: always)", nats, color.RGBA{R: 90, G: 90, B: 200, A: 255}, -w / 2},
		{"star dev (directory store)", star, color.RGBA{R: 220, G: 120, B: 40, A: 255}, w / 2},
	} {
		bc, err := plotter.NewBarChart(s.vals, w)
		if err != nil {
			return err
		}
		bc.StackOn(base)
		bc.Color, bc.Offset = s.col, s.off
		bc.LineStyle.Width = 0
		p.Add(bc)
		p.Legend.Add(s.name, bc)
	}
	p.Legend.Top = true
	p.NominalX(names...)
	p.Y.Min = 1
	top := 1.0
	for _, r := range rows {
		top = max(top, Median(r.NATS), Median(r.Star))
	}
	p.Y.Max = top * 20 // headroom for the legend above the tallest bar
	return p.Save(vg.Length(180+110*n), 9*vg.Centimeter*1.4, path)
}

// labelWidth is about the most characters of a label that fit under one
// workload's bars without running into the next one's.
const labelWidth = 28

// wrapLabel breaks s at spaces into lines of at most width characters (a
// longer word stays whole on its own line).
func wrapLabel(s string, width int) string {
	var b strings.Builder
	line := 0
	for i, w := range strings.Fields(s) {
		n := utf8.RuneCountInString(w)
		if i > 0 {
			if line+1+n > width {
				b.WriteByte('\n')
				line = 0
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(w)
		line += n
	}
	return b.String()
}

func ones(n int) plotter.Values {
	v := make(plotter.Values, n)
	for i := range v {
		v[i] = 1
	}
	return v
}
