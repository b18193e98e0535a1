package reader

import (
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// ResolveStart follows S2's rules (docs/design.md §16.1) exactly.
func TestResolveStart(t *testing.T) {
	tail := api.StreamPosition{SeqNum: 10, Timestamp: 500}
	empty := api.StreamPosition{}
	wait := func(d time.Duration) *time.Duration { return &d }
	n := api.Uint64
	cases := []struct {
		name  string
		req   api.ReadRequest
		tail  api.StreamPosition
		start Start
		is416 bool
	}{
		{"seq below tail", api.ReadRequest{From: api.FromSeqNum, Value: 3}, tail, AtSeq(3), false},
		{"seq past tail", api.ReadRequest{From: api.FromSeqNum, Value: 11}, tail, Start{}, true},
		{"seq past tail, clamp, unbounded session", api.ReadRequest{From: api.FromSeqNum, Value: 11, Clamp: true}, tail, AtSeq(10), false},
		{"seq past tail, clamp, bounded", api.ReadRequest{From: api.FromSeqNum, Value: 11, Clamp: true, Count: n(5)}, tail, Start{}, true},
		{"seq past tail, clamp, bounded with wait", api.ReadRequest{From: api.FromSeqNum, Value: 11, Clamp: true, Count: n(5), Wait: wait(time.Second)}, tail, AtSeq(10), false},
		{"at tail, bounded", api.ReadRequest{From: api.FromSeqNum, Value: 10, Count: n(1000)}, tail, Start{}, true},
		{"at tail, wait 0 given", api.ReadRequest{From: api.FromSeqNum, Value: 10, Wait: wait(0)}, tail, Start{}, true},
		{"at tail, unbounded", api.ReadRequest{From: api.FromSeqNum, Value: 10}, tail, AtSeq(10), false},
		{"at tail, until bounds", api.ReadRequest{From: api.FromSeqNum, Value: 10, Until: n(99)}, tail, Start{}, true},
		{"tail offset", api.ReadRequest{From: api.FromTailOffset, Value: 4, Count: n(1)}, tail, AtSeq(6), false},
		{"tail offset saturates", api.ReadRequest{From: api.FromTailOffset, Value: 400, Count: n(1)}, tail, AtSeq(0), false},
		{"tail offset 0 bounded", api.ReadRequest{From: api.FromTailOffset, Count: n(1)}, tail, Start{}, true},
		{"timestamp within", api.ReadRequest{From: api.FromTimestamp, Value: 500, Count: n(1)}, tail, AtTimestamp(500), false},
		{"timestamp past", api.ReadRequest{From: api.FromTimestamp, Value: 501, Count: n(1)}, tail, Start{}, true},
		{"timestamp past, clamp, follows", api.ReadRequest{From: api.FromTimestamp, Value: 501, Clamp: true}, tail, AtSeq(10), false},
		{"empty stream from 0", api.ReadRequest{From: api.FromSeqNum, Count: n(1000)}, empty, Start{}, true},
		{"empty stream timestamp 0", api.ReadRequest{From: api.FromTimestamp, Count: n(1000)}, empty, Start{}, true},
		{"empty stream session", api.ReadRequest{From: api.FromTimestamp}, empty, AtSeq(0), false},
	}
	for _, c := range cases {
		start, err := ResolveStart(c.req, c.tail)
		if c.is416 {
			if err == nil || err.Status != 416 {
				t.Errorf("%s: want 416, got start %v err %v", c.name, start, err)
				continue
			}
			if got, ok := err.Tail(); !ok || got != c.tail {
				t.Errorf("%s: 416 carries tail %+v, want %+v", c.name, got, c.tail)
			}
			continue
		}
		if err != nil || start != c.start {
			t.Errorf("%s: got %v %v, want %v", c.name, start, err, c.start)
		}
	}
}
