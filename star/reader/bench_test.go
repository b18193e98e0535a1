package reader

import (
	"testing"

	"github.com/starlog/starlog/shared/meta"
)

// benchStream lays out about 2 MiB of stream "big" (4 KiB records) over 32
// standard slots, one absorb pass per 4 slots, with noise from another
// stream in every flight.
func benchStream(b *testing.B) *fixture {
	f := newFixture(b)
	f.body = 4 << 10
	f.epoch(meta.Standard, 1, stdBucket)
	set := []string{stdBucket}
	for range 8 {
		pass := f.flight(meta.Standard, 1, set, f.batch("big", 8), f.batch("noise", 4), f.batch("big", 8))
		f.absorb(meta.Standard, 1, pass)
		for range 3 {
			s := f.flight(meta.Standard, 1, set, f.batch("big", 16), f.batch("noise", 2))
			f.absorb(meta.Standard, 1, s)
		}
	}
	return f
}

func benchRead(b *testing.B, f *fixture, r *Reader) {
	res := f.read(r, "big", AtSeq(0), Limits{Bytes: 1 << 20}, nil)
	if res.Bytes < 1<<20-5<<10 || res.Stop != StopBytes {
		b.Fatalf("read %d bytes, stop %s", res.Bytes, res.Stop)
	}
}

// BenchmarkReadColdSpan reads 1 MiB from span refs with an empty cache:
// floor lookup, row pages, epoch record, one GET per slot ref.
func BenchmarkReadColdSpan(b *testing.B) {
	f := benchStream(b)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	gets := f.objs.total()
	for b.Loop() {
		benchRead(b, f, f.reader(Config{Registerer: noReg()}))
	}
	b.ReportMetric(float64(f.objs.total()-gets)/float64(b.N), "GETs/op")
}

// BenchmarkReadWarmSpan reads the same 1 MiB again: rows from the
// metastore, records from the cache.
func BenchmarkReadWarmSpan(b *testing.B) {
	f := benchStream(b)
	r := f.reader(Config{})
	benchRead(b, f, r)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	gets := f.objs.total()
	for b.Loop() {
		benchRead(b, f, r)
	}
	b.ReportMetric(float64(f.objs.total()-gets)/float64(b.N), "GETs/op")
}
