package soak

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// streamHeader is the per-stream CSV's columns.
var streamHeader = []string{"t_s", "stream", "id", "live", "stored_bytes", "objects", "retained_bytes",
	"superseded_bytes", "trimmed_waiting_bytes", "unnamed_bytes", "bound_over_bytes", "catalog_rows", "span_refs",
	"rows", "reclaim_entries", "unsettled_metered_bytes", "readable_metered_bytes", "oldest_readable_age_s"}

// WriteStreamsCSV writes one line per stream id per sample.
func WriteStreamsCSV(path string, samples []Sample, outputCap uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(streamHeader)
	for _, s := range samples {
		for _, ss := range s.Streams {
			_ = w.Write([]string{secs(s.At.Seconds()), ss.Name, ss.ID, strconv.FormatBool(ss.Live),
				u(ss.Stored), strconv.Itoa(ss.Objects), u(ss.Retained), u(ss.Superseded), u(ss.Trimmed), u(ss.Unnamed),
				strconv.FormatInt(ss.Over(outputCap), 10), strconv.Itoa(ss.CatalogRows), strconv.Itoa(ss.SpanRefs),
				strconv.Itoa(ss.Rows), strconv.Itoa(ss.Entries), u(ss.Unsettled), u(ss.Readable), secs(ss.OldestAge.Seconds())})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Totals are a sample's sums over its stream ids.
type Totals struct {
	Stored, Retained, Bound uint64
	Live                    int
}

// Total sums a sample: stored bytes of every id measured (deleted ones
// too), retained bytes of the live ones, and the bound over the live ones
// (1.1 × retained + one output cap each).
func Total(s Sample, outputCap uint64) Totals {
	var t Totals
	for _, ss := range s.Streams {
		t.Stored += ss.Stored
		if ss.Live {
			t.Retained += ss.Retained
			t.Bound += ss.Retained + ss.Retained/10 + outputCap
			t.Live++
		}
	}
	return t
}

// WriteTotalsCSV writes one line per sample: the sums and the whole
// store by kind, and the metastore's rows by kind.
func WriteTotalsCSV(path string, samples []Sample, outputCap uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	kinds := Kinds(samples)
	w := csv.NewWriter(f)
	head := []string{"t_s", "stored_bytes", "retained_bytes", "bound_bytes", "settled_bucket_bytes", "settled_objects",
		"transit_bytes", "transit_objects", "staging_bytes", "other_bytes", "meta_rows"}
	for _, k := range kinds {
		head = append(head, "rows_"+k)
	}
	_ = w.Write(head)
	for _, s := range samples {
		t := Total(s, outputCap)
		n := 0
		for _, c := range s.MetaRows {
			n += c
		}
		line := []string{secs(s.At.Seconds()), u(t.Stored), u(t.Retained), u(t.Bound), u(s.SettledBytes),
			strconv.Itoa(s.SettledObjects), u(s.TransitBytes), strconv.Itoa(s.TransitObjects), u(s.StagingBytes),
			u(s.OtherBytes), strconv.Itoa(n)}
		for _, k := range kinds {
			line = append(line, strconv.Itoa(s.MetaRows[k]))
		}
		_ = w.Write(line)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WritePlot draws stored against retained bytes over time (sums over the
// streams), with the bound and the transit slots' bytes, as a PNG.
func WritePlot(path, title string, samples []Sample, outputCap uint64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "MiB"
	p.Add(plotter.NewGrid())
	series := []struct {
		name string
		val  func(Sample, Totals) uint64
		c    color.RGBA
		dash bool
	}{
		{"stored (settled objects, all ids)", func(_ Sample, t Totals) uint64 { return t.Stored }, color.RGBA{R: 200, A: 255}, false},
		{"retained (bytes catalog rows name)", func(_ Sample, t Totals) uint64 { return t.Retained }, color.RGBA{B: 200, A: 255}, false},
		{"bound (1.1 x retained + 1 cap per stream)", func(_ Sample, t Totals) uint64 { return t.Bound }, color.RGBA{A: 255}, true},
		{"transit slots (all chains)", func(s Sample, _ Totals) uint64 { return s.TransitBytes }, color.RGBA{G: 150, A: 255}, false},
	}
	top := 0.0
	for _, sr := range series {
		pts := make(plotter.XYs, len(samples))
		for i, s := range samples {
			pts[i].X = s.At.Seconds()
			pts[i].Y = float64(sr.val(s, Total(s, outputCap))) / (1 << 20)
			top = max(top, pts[i].Y)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = sr.c
		l.Width = vg.Points(1.5)
		if sr.dash {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(sr.name, l)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Min = 0
	p.Y.Max = top * 1.3 // room for the legend above the lines
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

func secs(v float64) string { return fmt.Sprintf("%.1f", v) }
