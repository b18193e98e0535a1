package reader

import (
	"testing"
)

// A read skips what the leader knows is gone before the auditor removes
// anything (issue 29 item 2): the records below the trim point, and those
// whose timestamp is below the retention cut, in a settled object shared
// with newer records, in span refs and in the tail window, from a start
// by seq, by timestamp and by tail offset.
func TestReadSkipsBelowTrimPointAndRetention(t *testing.T) {
	f := newFixture(t)
	catalogSpanTail(f) // settled [0,60), span refs [60,80), tail window [80,95)
	r := f.reader(Config{SettledChunkBytes: 300})
	truth := f.truth["c1"]
	firstAt := func(ts uint64) uint64 {
		for _, rec := range truth {
			if rec.Timestamp >= ts {
				return rec.SeqNum
			}
		}
		return uint64(len(truth))
	}
	for _, tc := range []struct {
		name  string
		start Start
		lim   Limits
		tail  bool
		first uint64
	}{
		{"trim in the settled object", AtSeq(0), Limits{TrimPoint: 30}, false, 30},
		{"trim, by timestamp", AtTimestamp(0), Limits{TrimPoint: 30}, false, 30},
		{"trim, by tail offset", AtTailOffset(95), Limits{TrimPoint: 30}, true, 30},
		{"trim in the span refs", AtSeq(3), Limits{TrimPoint: 70}, false, 70},
		{"trim in the tail window", AtSeq(3), Limits{TrimPoint: 85}, true, 85},
		{"a start above the trim point stays", AtSeq(40), Limits{TrimPoint: 30}, false, 40},
		{"retention in the settled object", AtSeq(0), Limits{NotBefore: truth[40].Timestamp}, false, firstAt(truth[40].Timestamp)},
		{"retention with a count", AtSeq(0), Limits{NotBefore: truth[40].Timestamp, Count: 2}, false, firstAt(truth[40].Timestamp)},
		{"retention in the span refs", AtSeq(0), Limits{NotBefore: truth[71].Timestamp}, false, firstAt(truth[71].Timestamp)},
		{"retention in the tail window", AtSeq(0), Limits{NotBefore: truth[88].Timestamp}, true, firstAt(truth[88].Timestamp)},
		{"both: the later wins", AtSeq(0), Limits{TrimPoint: 20, NotBefore: truth[50].Timestamp}, false, firstAt(truth[50].Timestamp)},
	} {
		var tl *Tail
		if tc.tail {
			tl = f.tail("c1", 80)
		}
		res := f.read(r, "c1", tc.start, tc.lim, tl)
		if len(res.Records) == 0 || res.Start != tc.first || res.Records[0].SeqNum != tc.first {
			t.Errorf("%s: start %d, %d records (%s), want them from %d", tc.name, res.Start, len(res.Records), seqRange(res.Records), tc.first)
			continue
		}
		end := res.Records[len(res.Records)-1].SeqNum + 1
		f.want("c1", res.Records, tc.first, end)
	}
	// Everything past retention: nothing, at the tail.
	res := f.read(r, "c1", AtSeq(0), Limits{NotBefore: truth[94].Timestamp + 1}, f.tail("c1", 80))
	if len(res.Records) != 0 || res.Next != 95 || res.Stop != StopCaughtUp {
		t.Fatalf("all past retention: %d records (%s), next %d, stop %s; want none, caught up at 95", len(res.Records), seqRange(res.Records), res.Next, res.Stop)
	}
}
