package reader

import (
	"testing"

	"github.com/starlog/starlog/shared/format"
)

// A read never returns a record at or past the acknowledged tail: the
// records released but not yet acknowledged are cut, with the metered
// bytes, and the next read starts at the first of them.
func TestAckedOnly(t *testing.T) {
	recs := func(from, to uint64) []format.Record {
		var out []format.Record
		for s := from; s < to; s++ {
			out = append(out, format.Record{SeqNum: s, Body: []byte("0123456789")})
		}
		return out
	}
	size := func(rs []format.Record) int {
		n := 0
		for i := range rs {
			n += rs[i].MeteredSize()
		}
		return n
	}
	for _, c := range []struct {
		name             string
		from, to, acked  uint64
		cut              bool
		wantLen          int
		wantNext         uint64
		wantStopCaughtUp bool
	}{
		{"all acknowledged", 10, 20, 20, false, 10, 20, false},
		{"tail past the read", 10, 20, 25, false, 10, 20, false},
		{"last three not yet", 10, 20, 17, true, 7, 17, true},
		{"none yet", 10, 20, 10, true, 0, 10, true},
	} {
		rs := recs(c.from, c.to)
		res := Result{Records: rs, Start: c.from, Next: c.to, Bytes: size(rs), Stop: StopCount}
		if got := ackedOnly(&res, c.acked); got != c.cut {
			t.Fatalf("%s: cut %v, want %v", c.name, got, c.cut)
		}
		if len(res.Records) != c.wantLen || res.Next != c.wantNext || res.Bytes != size(res.Records) {
			t.Fatalf("%s: %d records, next %d, %d bytes; want %d, %d, %d", c.name, len(res.Records), res.Next, res.Bytes, c.wantLen, c.wantNext, size(res.Records))
		}
		if (res.Stop == StopCaughtUp) != c.wantStopCaughtUp {
			t.Fatalf("%s: stop %v", c.name, res.Stop)
		}
	}
}
