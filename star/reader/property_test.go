package reader

import (
	"fmt"
	"os"
	"testing"

	"pgregory.net/rapid"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// expect is the model of a Read over a stream whose records are truth:
// rows cover [trimmed, frontier), the tail window (when present) the rest.
func expect(truth []format.Record, trimmed, frontier uint64, hasTail bool, start Start, lim Limits, batchCount, batchBytes int) Result {
	end := frontier
	if hasTail {
		end = uint64(len(truth))
	}
	var next uint64
	switch start.Kind {
	case FromSeq:
		next = start.Value
	case FromTimestamp:
		next = end
		for i := trimmed; i < end; i++ {
			if truth[i].Timestamp >= start.Value {
				next = i
				break
			}
		}
	case FromTailOffset:
		next = end - min(start.Value, end)
	}
	next = max(next, min(trimmed, end))
	maxCount, maxBytes := batchCount, batchBytes
	countStop, bytesStop := StopBatch, StopBatch
	if lim.Count > 0 && lim.Count <= batchCount {
		maxCount, countStop = lim.Count, StopCount
	}
	if lim.Bytes > 0 && lim.Bytes <= batchBytes {
		maxBytes, bytesStop = lim.Bytes, StopBytes
	}
	res := Result{Start: next}
	for ; next < end && res.Stop == 0; next++ {
		r := truth[next]
		if lim.Until != nil && r.Timestamp >= *lim.Until {
			res.Stop = StopUntil
			break
		}
		if res.Bytes+r.MeteredSize() > maxBytes {
			res.Stop = bytesStop
			break
		}
		res.Records = append(res.Records, r)
		res.Bytes += r.MeteredSize()
		if len(res.Records) == maxCount {
			res.Stop = countStop
		} else if res.Bytes == maxBytes {
			res.Stop = bytesStop
		}
	}
	res.Next = next
	if res.Stop == 0 {
		res.Stop = StopFrontier
		if hasTail {
			res.Stop = StopCaughtUp
		}
	}
	return res
}

// TestReadMatchesModel lays out a random stream over random flights and
// absorb passes (some settled into catalog rows, some trimmed by
// retention, the rest left in the tail window) and checks random reads
// against the model.
func TestReadMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp(t.TempDir(), "m")
		if err != nil {
			rt.Fatal(err)
		}
		f := newFixtureIn(rt, dir)
		defer f.meta.Close()
		f.body = rapid.IntRange(0, 300).Draw(rt, "body")
		class := rapid.SampledFrom([]meta.Class{meta.Standard, meta.Express}).Draw(rt, "class")
		set := []string{stdBucket}
		if class == meta.Express {
			set = expressBuckets
		}
		f.epoch(class, 1, set...)

		// Flights of batches of "a" (and noise from "b").
		nFlights := rapid.IntRange(1, 8).Draw(rt, "flights")
		var slots []absorb.Slot
		for range nFlights {
			var batches []format.Batch
			for range rapid.IntRange(1, 4).Draw(rt, "batches") {
				stream := rapid.SampledFrom([]string{"a", "a", "b"}).Draw(rt, "stream")
				batches = append(batches, f.batch(stream, rapid.IntRange(1, 5).Draw(rt, "n")))
			}
			// Each flight reaches at least one bucket of the set.
			var to []string
			for _, b := range set {
				if rapid.IntRange(0, 3).Draw(rt, "reach") > 0 {
					to = append(to, b)
				}
			}
			if len(to) == 0 {
				to = set[len(set)-1:]
			}
			slots = append(slots, f.flight(class, 1, to, batches...))
		}
		// Absorb a prefix of the flights in passes; the rest is the tail.
		absorbed := rapid.IntRange(0, nFlights).Draw(rt, "absorbed")
		var rows []meta.Ref
		for i := 0; i < absorbed; {
			n := rapid.IntRange(1, absorbed-i).Draw(rt, "pass")
			for _, rw := range f.absorb(class, 1, slots[i:i+n]...) {
				if rw.StreamID == "a" {
					rows = append(rows, rw.Ref)
				}
			}
			i += n
		}
		truth := f.truth["a"]
		if len(truth) == 0 {
			return
		}
		frontier := uint64(0)
		if len(rows) > 0 {
			frontier = rows[len(rows)-1].EndSeq
		}
		// Settle a prefix of the rows into one catalog row, as the settle
		// does: the pivot row becomes the catalog row, the covered span
		// refs are deleted.
		if k := rapid.IntRange(0, len(rows)).Draw(rt, "settled"); k > 0 {
			end := rows[k-1].EndSeq
			cat := f.settled("a", 1, 0, end, rapid.IntRange(1, 7).Draw(rt, "per"), 0)
			f.putRef("a", cat)
			for _, r := range rows[1:k] {
				f.deleteRef("a", r.FirstSeq)
			}
			rows = append([]meta.Ref{cat}, rows[k:]...)
		}
		// Retention removes a prefix of the rows.
		trimmed := uint64(0)
		if len(rows) > 1 {
			k := rapid.IntRange(0, len(rows)-1).Draw(rt, "trim")
			for _, r := range rows[:k] {
				f.deleteRef("a", r.FirstSeq)
			}
			if k > 0 {
				trimmed = rows[k].FirstSeq
			}
		}
		hasTail := rapid.Bool().Draw(rt, "tail")
		var tail *Tail
		if hasTail {
			tail = f.tail("a", frontier)
		}
		cfg := Config{
			MaxBatchCount:     rapid.IntRange(1, 40).Draw(rt, "batchCount"),
			MaxBatchBytes:     rapid.IntRange(200, 1<<14).Draw(rt, "batchBytes"),
			RowPage:           rapid.IntRange(1, 4).Draw(rt, "rowPage"),
			SettledChunkBytes: int64(rapid.IntRange(60, 4000).Draw(rt, "chunk")),
			CacheBytes:        int64(rapid.IntRange(1, 1<<16).Draw(rt, "cache")),
			Registerer:        noReg(),
		}
		r := f.reader(cfg)
		total := uint64(len(truth))
		for range rapid.IntRange(1, 6).Draw(rt, "reads") {
			var start Start
			switch rapid.IntRange(0, 2).Draw(rt, "kind") {
			case 0:
				start = AtSeq(rapid.Uint64Range(0, total+2).Draw(rt, "seq"))
			case 1:
				start = AtTimestamp(rapid.Uint64Range(tsBase-5, truth[total-1].Timestamp+5).Draw(rt, "ts"))
			default:
				start = AtTailOffset(rapid.Uint64Range(0, total+2).Draw(rt, "offset"))
			}
			lim := Limits{Count: rapid.IntRange(0, 30).Draw(rt, "count"), Bytes: rapid.IntRange(0, 3000).Draw(rt, "bytes")}
			if rapid.Bool().Draw(rt, "hasUntil") {
				u := rapid.Uint64Range(tsBase, truth[total-1].Timestamp+5).Draw(rt, "until")
				if start.Kind != FromTimestamp || start.Value < u {
					lim.Until = &u
				}
			}
			got, err := r.Read(f.ctx, Stream{ID: "a", Basin: testBasin}, start, lim, tail)
			if err != nil {
				rt.Fatalf("read from %s %+v: %v", start, lim, err)
			}
			want := expect(truth, trimmed, frontier, hasTail, start, lim, cfg.MaxBatchCount, cfg.MaxBatchBytes)
			if got.Start != want.Start || got.Next != want.Next || got.Stop != want.Stop || got.Bytes != want.Bytes {
				rt.Fatalf("read from %s %+v: got start %d next %d stop %s bytes %d (%s); want %d %d %s %d (%s)", start, lim,
					got.Start, got.Next, got.Stop, got.Bytes, seqRange(got.Records), want.Start, want.Next, want.Stop, want.Bytes, seqRange(want.Records))
			}
			for i := range got.Records {
				g, w := got.Records[i], want.Records[i]
				if g.SeqNum != w.SeqNum || g.Timestamp != w.Timestamp || string(g.Body) != string(w.Body) || len(g.Headers) != len(w.Headers) {
					rt.Fatalf("read from %s: record %d: %s", start, i, fmt.Sprint(g.SeqNum, " vs ", w.SeqNum))
				}
			}
		}
	})
}
