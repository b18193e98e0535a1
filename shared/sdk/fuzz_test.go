package sdk

import (
	"context"
	"io"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// detachedSession is an append session with no connection, holding sent
// batches of the given sizes, for feeding consume directly.
func detachedSession(sizes []int) (*AppendSession, []*AppendFuture) {
	_, cancel := context.WithCancelCause(context.Background())
	_, pw := io.Pipe()
	a := &AppendSession{
		opts:     AppendSessionOptions{MaxUnackedBytes: DefaultMaxUnackedBytes},
		cancel:   cancel,
		pw:       pw,
		wake:     make(chan struct{}, 1),
		readDone: make(chan struct{}),
		done:     make(chan struct{}),
		space:    make(chan struct{}),
	}
	futs := make([]*AppendFuture, len(sizes))
	for i, n := range sizes {
		futs[i] = &AppendFuture{records: n, size: int64(n), sent: true, done: make(chan struct{})}
	}
	a.unacked = append(a.unacked, futs...)
	return a, futs
}

func ackFrame(start, end, tail uint64) []byte {
	return api.AppendFrame(nil, 0, api.EncodeAppendAckProto(api.AppendAck{
		Start: api.StreamPosition{SeqNum: start}, End: api.StreamPosition{SeqNum: end}, Tail: api.StreamPosition{SeqNum: tail},
	}))
}

// FuzzAppendSessionResponse feeds arbitrary bytes to an append session as
// its response stream. Whatever arrives, consume must not panic, every
// batch must end settled, and every ack it accepts must cover its batch
// and come strictly after the previous one.
func FuzzAppendSessionResponse(f *testing.F) {
	good := append(ackFrame(0, 1, 1), ackFrame(1, 3, 5)...)
	f.Add(good)
	f.Add(append(good, ackFrame(5, 6, 6)...))
	f.Add(ackFrame(0, 2, 2))                                                      // wrong size
	f.Add(append(ackFrame(3, 4, 4), ackFrame(2, 4, 4)...))                        // backwards
	f.Add(append(ackFrame(0, 1, 0), 0, 0))                                        // tail behind, then junk
	f.Add(api.AppendFrame(nil, 0x80, []byte("\x01\x9c{\"seq_num_mismatch\":4}"))) // terminal 412
	f.Add([]byte{0, 0, 5, 0x40, 1, 2, 3, 4})                                      // bad gzip
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		a, futs := detachedSession([]int{1, 2, 1})
		a.consume(&sliceReader{data})
		if a.Err() == nil {
			t.Fatal("the stream ended without the session ending")
		}
		var lastEnd *uint64
		for i, f := range futs {
			select {
			case <-f.done:
			default:
				t.Fatalf("batch %d unsettled", i)
			}
			if f.err != nil {
				continue
			}
			if f.ack.End.SeqNum-f.ack.Start.SeqNum != uint64(f.records) || f.ack.End.SeqNum < f.ack.Start.SeqNum {
				t.Fatalf("batch %d accepted ack %+v for %d records", i, f.ack, f.records)
			}
			if lastEnd != nil && (f.ack.End.SeqNum <= *lastEnd || f.ack.Start.SeqNum < *lastEnd) {
				t.Fatalf("batch %d accepted ack %+v after end %d", i, f.ack, *lastEnd)
			}
			end := f.ack.End.SeqNum
			lastEnd = &end
		}
	})
}

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// FuzzReadSessionAdvance feeds arbitrary ReadBatch payloads to a read
// session's position tracking: it must not panic, and an accepted batch
// must leave the resume position past its last record with the count
// reduced by its records.
func FuzzReadSessionAdvance(f *testing.F) {
	ts := uint64(5)
	f.Add(api.EncodeReadBatchProto(&api.ReadBatch{Records: []api.Record{{SeqNum: 3, Timestamp: &ts}, {SeqNum: 4, Timestamp: &ts}}}), uint64(3))
	f.Add(api.EncodeReadBatchProto(&api.ReadBatch{Tail: &api.StreamPosition{SeqNum: 9}}), uint64(0))
	f.Add(api.EncodeReadBatchProto(&api.ReadBatch{Records: []api.Record{{SeqNum: 4}, {SeqNum: 4}}}), uint64(4))
	f.Add([]byte{0x0a, 0xff}, uint64(0))
	f.Fuzz(func(t *testing.T, payload []byte, start uint64) {
		b, derr := api.DecodeReadBatchProto(payload)
		if derr != nil {
			return
		}
		r := &ReadSession{req: api.ReadRequest{From: api.FromSeqNum, Value: start, Count: api.Uint64(1 << 40)}, resumed: true}
		if err := r.advance(b); err != nil {
			return
		}
		if n := len(b.Records); n > 0 {
			last := b.Records[n-1].SeqNum
			if b.Records[0].SeqNum < start || r.req.Value != last+1 || *r.req.Count != 1<<40-uint64(n) {
				t.Fatalf("start %d, batch %d..%d: resume at %d, count %d", start, b.Records[0].SeqNum, last, r.req.Value, *r.req.Count)
			}
		} else if r.req.Value != start {
			t.Fatalf("a heartbeat moved the resume position from %d to %d", start, r.req.Value)
		}
	})
}
