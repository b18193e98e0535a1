package reader

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

func recsOf(first uint64, sizes ...int) []format.Record {
	out := make([]format.Record, len(sizes))
	for i, n := range sizes {
		out[i] = format.Record{SeqNum: first + uint64(i), Timestamp: 100 + uint64(i), Body: make([]byte, n-8)}
	}
	return out
}

func TestAccLimits(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	cases := []struct {
		name       string
		lim        Limits
		batchCount int
		batchBytes int
		from       uint64
		since      *uint64
		in         []format.Record
		want       int // records taken
		next       uint64
		stop       Stop
	}{
		{"all", Limits{}, 100, 1000, 0, nil, recsOf(0, 10, 10, 10), 3, 3, 0},
		{"count", Limits{Count: 2}, 100, 1000, 0, nil, recsOf(0, 10, 10, 10), 2, 2, StopCount},
		{"batch count", Limits{Count: 200}, 2, 1000, 0, nil, recsOf(0, 10, 10, 10), 2, 2, StopBatch},
		{"bytes exact", Limits{Bytes: 20}, 100, 1000, 0, nil, recsOf(0, 10, 10, 10), 2, 2, StopBytes},
		{"bytes under", Limits{Bytes: 29}, 100, 1000, 0, nil, recsOf(0, 10, 10, 10), 2, 2, StopBytes},
		{"bytes below first", Limits{Bytes: 9}, 100, 1000, 0, nil, recsOf(0, 10, 10), 0, 0, StopBytes},
		{"batch bytes", Limits{Bytes: 5000}, 100, 25, 0, nil, recsOf(0, 10, 10, 10), 2, 2, StopBatch},
		{"until", Limits{Until: u(102)}, 100, 1000, 0, nil, recsOf(0, 10, 10, 10), 2, 2, StopUntil},
		{"until first", Limits{Until: u(100)}, 100, 1000, 0, nil, recsOf(0, 10), 0, 0, StopUntil},
		{"below start ignored", Limits{}, 100, 1000, 2, nil, recsOf(0, 10, 10, 10, 10), 2, 4, 0},
		{"since skips", Limits{Count: 1}, 100, 1000, 0, u(102), recsOf(0, 10, 10, 10, 10), 1, 3, StopCount},
		{"since skips free", Limits{Bytes: 10}, 100, 1000, 0, u(103), recsOf(0, 900, 900, 900, 10), 1, 4, StopBytes},
	}
	for _, c := range cases {
		a := newAcc(c.lim, c.batchCount, c.batchBytes)
		a.next, a.since = c.from, c.since
		if err := a.accept(c.in); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		res := a.result()
		if len(res.Records) != c.want || res.Next != c.next || res.Stop != c.stop {
			t.Errorf("%s: took %d next %d stop %s; want %d %d %s", c.name, len(res.Records), res.Next, res.Stop, c.want, c.next, c.stop)
		}
		sum := 0
		for _, r := range res.Records {
			sum += r.MeteredSize()
		}
		if sum != res.Bytes {
			t.Errorf("%s: bytes %d, records hold %d", c.name, res.Bytes, sum)
		}
	}
}

func TestAccRejectsGap(t *testing.T) {
	a := newAcc(Limits{}, 100, 1000)
	a.next = 1
	in := append(recsOf(0, 10, 10), recsOf(3, 10)...)
	if err := a.accept(in); !errors.Is(err, ErrGap) {
		t.Fatalf("gap: %v", err)
	}
	if len(a.recs) != 1 || a.next != 2 {
		t.Fatalf("took %d, next %d before the gap", len(a.recs), a.next)
	}
}

func TestLRU(t *testing.T) {
	c := newLRU[int](10)
	c.add("a", 1, 4)
	c.add("b", 2, 4)
	if _, ok := c.get("a"); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	c.add("c", 3, 4) // evicts b
	if _, ok := c.get("b"); ok {
		t.Fatal("b not evicted")
	}
	if v, ok := c.get("a"); !ok || v != 1 {
		t.Fatal("a evicted")
	}
	c.add("big", 9, 11) // larger than the cache: not stored, nothing evicted
	if _, ok := c.get("big"); ok {
		t.Fatal("oversized entry stored")
	}
	c.add("a", 5, 7) // replace: cost grows past the capacity, c is evicted
	if n, used := c.size(); n != 1 || used != 7 {
		t.Fatalf("size %d used %d, want 1 7", n, used)
	}
	if v, _ := c.get("a"); v != 5 {
		t.Fatalf("a = %d, want 5", v)
	}
}

func TestChunkEntries(t *testing.T) {
	lens := []uint32{100, 100, 250, 60, 60, 60, 400, 80}
	f := &format.SettledFooter{}
	var off uint64
	for _, l := range lens {
		f.Entries = append(f.Entries, format.SettledEntry{Offset: off, Length: l})
		off += uint64(l)
	}
	// Offsets 0 100 200 450 510 570 630 1030; chunks of 256.
	want := map[uint64][2]int{0: {0, 3}, 1: {3, 5}, 2: {5, 7}, 3: {7, 7}, 4: {7, 8}}
	for c, w := range want {
		if i, j := chunkEntries(f, 256, c); i != w[0] || j != w[1] {
			t.Errorf("chunk %d: [%d,%d), want %v", c, i, j, w)
		}
	}
	// Every entry is in exactly the chunk chunkOf names.
	for k, e := range f.Entries {
		i, j := chunkEntries(f, 256, chunkOf(e, 256))
		if k < i || k >= j {
			t.Errorf("entry %d not in its chunk [%d,%d)", k, i, j)
		}
	}
}

func TestSettledKey(t *testing.T) {
	if got, want := SettledKey("b", "s", 3, 42, 0), "streams/b/s/00000000000000000003/00000000000000000042"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	if got := SettledKey("b", "s", 3, 42, 7); !strings.HasSuffix(got, "/00000000000000000042~00000000000000000007") {
		t.Fatalf("revision key %s", got)
	}
}

func refItem(id string, first uint64, val string) meta.Item {
	k := meta.RefKey(id, first)
	return meta.Item{PK: k.PK, SK: k.SK, Val: []byte(val)}
}

func TestDecodeRef(t *testing.T) {
	span := func(slots string) string {
		return fmt.Sprintf(`{"first":10,"end":20,"span":{"class":"express","star":"s","epoch":1,"slots":[%s]}}`, slots)
	}
	good := []meta.Item{
		refItem("x", 10, span(`{"slot":3,"first":10,"n":4,"off":60,"len":70},{"slot":4,"first":14,"n":6,"off":60,"len":80}`)),
		refItem("x", 10, `{"first":10,"end":20,"settled":{"epoch":1,"first":0,"bytes":100}}`),
	}
	for _, it := range good {
		if _, err := decodeRef("x", it); err != nil {
			t.Errorf("%s: %v", it.Val, err)
		}
	}
	bad := []meta.Item{
		refItem("x", 11, span(`{"slot":3,"first":10,"n":10,"off":60,"len":70}`)), // key mismatch
		refItem("x", 10, `not json`),                                               // undecodable
		refItem("x", 10, `{"first":10,"end":10,"settled":{"epoch":1}}`),            // empty
		refItem("x", 10, `{"first":10,"end":20}`),                                  // no location
		refItem("x", 10, `{"first":10,"end":20,"settled":{"epoch":1,"first":11}}`), // object above row
		refItem("x", 10, span(``)),                                                 // no slots
		refItem("x", 10, span(`{"slot":3,"first":10,"n":4,"off":60,"len":70}`)),    // short
		refItem("x", 10, span(`{"slot":3,"first":10,"n":4,"off":60,"len":70},{"slot":4,"first":15,"n":5,"off":60,"len":80}`)),       // gap
		refItem("x", 10, span(`{"slot":3,"first":10,"n":11,"off":60,"len":70}`)),                                                    // overruns
		refItem("x", 10, span(`{"slot":3,"first":10,"n":4,"off":60,"len":70},{"slot":2,"first":14,"n":6,"off":60,"len":80}`)),       // slot order
		refItem("x", 10, span(`{"slot":3,"first":10,"n":10,"off":60,"len":0}`)),                                                     // empty extent
		refItem("x", 10, `{"first":10,"end":20,"min_ts":5,"max_ts":4,"settled":{"epoch":1}}`),                                       // time bounds
		refItem("x", 10, `{"first":10,"end":20,"span":{"class":"gold","star":"s","slots":[{"first":10,"n":10,"off":60,"len":9}]}}`), // class
	}
	for _, it := range bad {
		if _, err := decodeRef("x", it); !errors.Is(err, ErrCorruptRow) {
			t.Errorf("%s: err %v, want ErrCorruptRow", it.Val, err)
		}
	}
}

func TestDecodeExtent(t *testing.T) {
	recs := recsOf(7, 20, 30, 40)
	b := format.AppendBlock(nil, recs[:2])
	b = format.AppendBlock(b, recs[2:])
	sl := meta.SlotRef{FirstSeq: 7, Count: 3, Length: uint64(len(b))}
	got, err := decodeExtent(b, sl)
	if err != nil || len(got) != 3 || got[2].SeqNum != 9 {
		t.Fatalf("%d records, %v", len(got), err)
	}
	for _, bad := range []meta.SlotRef{
		{FirstSeq: 6, Count: 3, Length: sl.Length},
		{FirstSeq: 7, Count: 2, Length: sl.Length},
		{FirstSeq: 7, Count: 3, Length: sl.Length + 1},
	} {
		if _, err := decodeExtent(b, bad); !errors.Is(err, format.ErrCorrupt) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
