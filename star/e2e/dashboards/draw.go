package dashboards

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Grid sizes: a grid column and a grid row in points (Grafana's grid is
// 24 columns wide; a row unit is about 30 px there).
const (
	colWidth  = vg.Length(50)
	rowHeight = vg.Length(22)
	margin    = vg.Length(4)
	headerH   = vg.Length(48)
)

var palette = []color.Color{
	color.RGBA{R: 115, G: 191, B: 105, A: 255}, color.RGBA{R: 242, G: 204, B: 12, A: 255},
	color.RGBA{R: 87, G: 148, B: 242, A: 255}, color.RGBA{R: 255, G: 120, B: 10, A: 255},
	color.RGBA{R: 242, G: 73, B: 92, A: 255}, color.RGBA{R: 184, G: 119, B: 217, A: 255},
	color.RGBA{R: 112, G: 219, B: 237, A: 255}, color.RGBA{R: 150, G: 150, B: 150, A: 255},
}

// Drawn is a panel and its evaluated lines.
type Drawn struct {
	Panel
	Lines []Line
}

// Render draws panels on their grid as one PNG at path: a title and a
// caption (the run's parameters) on top, each panel a time series over
// the run in seconds, a panel without data saying so, an AWS-only widget
// saying where its data lives.
func Render(path, title, caption string, panels []Drawn) error {
	rows, xmax := 0, 1.0
	for _, p := range panels {
		rows = max(rows, p.Y+p.H)
		for _, l := range p.Lines {
			for _, x := range l.X {
				xmax = max(xmax, x)
			}
		}
	}
	width, height := 24*colWidth, vg.Length(rows)*rowHeight+headerH
	img := vgimg.New(width, height)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	big := font.Font{Typeface: "Liberation", Variant: "Sans", Size: 14}
	small := font.Font{Typeface: "Liberation", Variant: "Sans", Size: 8}
	line(dc, big, vg.Point{X: margin, Y: height - 18}, title, color.Black)
	line(dc, small, vg.Point{X: margin, Y: height - 32}, caption, color.Gray{Y: 60})

	for _, p := range panels {
		r := vg.Rectangle{
			Min: vg.Point{X: vg.Length(p.X)*colWidth + margin, Y: height - headerH - vg.Length(p.Y+p.H)*rowHeight + margin},
			Max: vg.Point{X: vg.Length(p.X+p.W)*colWidth - margin, Y: height - headerH - vg.Length(p.Y)*rowHeight - margin},
		}
		sub := draw.Canvas{Canvas: dc.Canvas, Rectangle: r}
		if p.Row {
			line(sub, font.Font{Typeface: "Liberation", Variant: "Sans", Style: 0, Size: 11}, vg.Point{X: r.Min.X, Y: r.Min.Y + 2}, p.Title, color.Black)
			continue
		}
		sub.SetColor(color.Gray{Y: 200})
		sub.SetLineWidth(0.5)
		sub.Stroke(r.Path())
		if err := drawPanel(sub, p, small, xmax); err != nil {
			return fmt.Errorf("panel %q: %w", p.Title, err)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func line(c draw.Canvas, fnt font.Font, at vg.Point, s string, col color.Color) {
	sty := text.Style{Color: col, Font: fnt, Handler: plot.DefaultTextHandler}
	c.FillText(sty, at, s)
}

// notice draws a panel's title and a message in place of a chart.
func notice(c draw.Canvas, title string, msg []string, fnt font.Font, col color.Color) {
	tf := fnt
	tf.Size = 9
	y := c.Max.Y - 12
	line(c, tf, vg.Point{X: c.Min.X + 4, Y: y}, title, color.Black)
	for _, m := range msg {
		y -= 12
		line(c, fnt, vg.Point{X: c.Min.X + 4, Y: y}, m, col)
	}
}

// drawPanel draws p's lines over [0, xmax] s, the whole run, as every
// panel of a dashboard shows the same time range.
func drawPanel(c draw.Canvas, p Drawn, small font.Font, xmax float64) error {
	var notes []string
	if p.AWSOnly != "" {
		notes = wrap(p.AWSOnly, int((c.Max.X-c.Min.X)/4.3))
	}
	if len(p.Lines) == 0 {
		msg := []string{"no data in this run"}
		if p.AWSOnly != "" && len(p.Targets) == 0 {
			msg = append([]string{"not in a local run: its source is AWS alone"}, notes...)
		} else {
			for _, t := range p.Targets {
				msg = append(msg, wrap(t.Expr, int((c.Max.X-c.Min.X)/4.3))...)
			}
			msg = append(msg, notes...)
		}
		notice(c, p.Title, msg, small, color.Gray{Y: 90})
		return nil
	}
	if len(notes) > 0 { // room below the chart for what only AWS has
		nc := c
		nc.Max.Y = c.Min.Y + vg.Length(12*len(notes)) + 4
		y := nc.Max.Y - 10
		for _, n := range notes {
			line(nc, small, vg.Point{X: c.Min.X + 4, Y: y}, n, color.RGBA{R: 160, G: 80, B: 0, A: 255})
			y -= 12
		}
		c.Min.Y = nc.Max.Y
	}
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.Title.TextStyle.Font.Size = 9
	pl.X.Label.Text = "s since the first scrape"
	pl.X.Label.TextStyle.Font.Size = 7
	pl.Y.Label.Text = p.Unit
	pl.Y.Label.TextStyle.Font.Size = 7
	pl.X.Tick.Label.Font.Size = 7
	pl.Y.Tick.Label.Font.Size = 7
	pl.Legend.TextStyle.Font.Size = 7
	pl.Legend.Top = true
	pl.Legend.Left = true
	pl.Add(plotter.NewGrid())
	for i, l := range p.Lines {
		var ln *plotter.Line
		for _, seg := range segments(l) {
			s, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			s.Color = palette[i%len(palette)]
			s.Width = 1
			pl.Add(s)
			ln = s
		}
		if i < 8 {
			pl.Legend.Add(l.Legend, ln)
		} else if i == 8 {
			pl.Legend.Add(fmt.Sprintf("… %d more", len(p.Lines)-8))
		}
	}
	pl.X.Min, pl.X.Max = 0, xmax
	pl.Y.Min = min(pl.Y.Min, 0)
	if pl.Y.Max <= pl.Y.Min {
		pl.Y.Max = pl.Y.Min + 1
	}
	pl.Y.Max += (pl.Y.Max - pl.Y.Min) * 0.35 // headroom for the legend
	pl.Draw(c)
	return nil
}

// segments splits l where it has no value for longer than one and a half
// of its shortest step (a quantile of no observations, a series not yet
// exported), so a gap is drawn as a gap, not a straight line across it.
func segments(l Line) []plotter.XYs {
	step := math.Inf(1)
	for j := 1; j < len(l.X); j++ {
		if d := l.X[j] - l.X[j-1]; d > 0 {
			step = min(step, d)
		}
	}
	var out []plotter.XYs
	var cur plotter.XYs
	for j := range l.X {
		if j > 0 && l.X[j]-l.X[j-1] > 1.5*step {
			out = append(out, cur)
			cur = nil
		}
		cur = append(cur, plotter.XY{X: l.X[j], Y: l.Y[j]})
	}
	return append(out, cur)
}

// wrap breaks s at spaces into lines of at most n characters.
func wrap(s string, n int) []string {
	var out []string
	var cur strings.Builder
	for _, w := range strings.Fields(s) {
		if cur.Len() > 0 && cur.Len()+1+len(w) > n {
			out = append(out, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(w)
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}
