package api

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestSSEWriterGolden(t *testing.T) {
	var buf bytes.Buffer
	w := NewSSEWriter(&buf, FormatRaw)
	batch := &ReadBatch{Records: []Record{{SeqNum: 4, Timestamp: Uint64(9), Body: []byte("hi")}}, Tail: &StreamPosition{5, 9}}
	id := LastEventID{}.Next(batch)
	steps := []func() error{
		func() error { return w.Batch(batch, id) },
		func() error { return w.Ping(Ping{Timestamp: 1700000000000, Tail: StreamPosition{5, 9}}) },
		func() error { return w.Error(Unavailable("draining")) },
		func() error { return w.Done() },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			t.Fatal(err)
		}
	}
	want := "event: batch\nid: 4,1,10\ndata: {\"records\":[{\"seq_num\":4,\"timestamp\":9,\"body\":\"hi\"}],\"tail\":{\"seq_num\":5,\"timestamp\":9}}\n\n" +
		"event: ping\ndata: {\"timestamp\":1700000000000,\"tail\":{\"seq_num\":5,\"timestamp\":9}}\n\n" +
		"event: error\ndata: {\"code\":\"unavailable\",\"message\":\"draining\"}\n\n" +
		"data: [DONE]\n\n"
	if buf.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", buf.String(), want)
	}
	if err := w.Batch(&ReadBatch{}, id); err == nil {
		t.Fatal("empty batch event accepted")
	}
}

func TestSSERoundTripTyped(t *testing.T) {
	var buf bytes.Buffer
	w := NewSSEWriter(&buf, FormatBase64)
	batch := &ReadBatch{Records: []Record{
		{SeqNum: 7, Timestamp: Uint64(1), Headers: []Header{{[]byte{0}, []byte("\n\r")}}, Body: []byte{0xff, '\n'}},
		{SeqNum: 8, Timestamp: Uint64(2)},
	}}
	id := LastEventID{SeqNum: 6, Count: 7, Bytes: 70}.Next(batch)
	_ = w.Batch(batch, id)
	_ = w.Ping(Ping{Timestamp: 3, Tail: StreamPosition{9, 2}})
	_ = w.Error(StreamNotFound("gone"))
	_ = w.Done()

	r := NewSSEReader(&buf, 0)
	var kinds []ReadEventKind
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		re, derr := DecodeReadEvent(ev, FormatBase64)
		if derr != nil {
			t.Fatal(derr)
		}
		kinds = append(kinds, re.Kind)
		switch re.Kind {
		case ReadEventBatch:
			if re.ID != id || !equalBatch(re.Batch, batch) {
				t.Fatalf("batch %+v id %+v", re.Batch, re.ID)
			}
		case ReadEventPing:
			if re.Ping != (Ping{3, StreamPosition{9, 2}}) {
				t.Fatalf("ping %+v", re.Ping)
			}
		case ReadEventError:
			if re.Err.Status != 503 || re.Err.Code != CodeStreamNotFound || re.Err.Message != "gone" {
				t.Fatalf("error %+v", re.Err)
			}
		}
	}
	if want := []ReadEventKind{ReadEventBatch, ReadEventPing, ReadEventError, ReadEventDone}; !equalKinds(kinds, want) {
		t.Fatalf("kinds %v", kinds)
	}
}

func equalKinds(a, b []ReadEventKind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func readAllEvents(t *testing.T, r io.Reader) ([]SSEEvent, error) {
	t.Helper()
	p := NewSSEReader(r, 64)
	var evs []SSEEvent
	for {
		ev, err := p.Next()
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestSSEParserSpec(t *testing.T) {
	in := "\xEF\xBB\xBF: comment\r\n" +
		"event: a\r\nid: 1\r\ndata: x\r\ndata:  y\r\n\r\n" + // CRLF; only one leading space stripped
		"data\rdata:z\r\r" + // CR only; a field without colon has an empty value
		"id: 2\n\n" + // no data: not dispatched, but the id sticks
		"event: only\n\n" + // no data: dropped along with its type
		"data: after\nid: bad\x00id\n\n" + // ids with NUL are ignored
		"data: [DONE]\n\n"
	evs, err := readAllEvents(t, strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []SSEEvent{
		{Event: "a", ID: "1", Data: []byte("x\n y")},
		{ID: "1", Data: []byte("\nz")},
		{ID: "2", Data: []byte("after")},
		{ID: "2", Data: []byte("[DONE]")},
	}
	if len(evs) != len(want) {
		t.Fatalf("got %d events: %+v", len(evs), evs)
	}
	for i := range want {
		if evs[i].Event != want[i].Event || evs[i].ID != want[i].ID || !bytes.Equal(evs[i].Data, want[i].Data) {
			t.Errorf("event %d: got %+v (%q), want %+v (%q)", i, evs[i], evs[i].Data, want[i], want[i].Data)
		}
	}
	// The same stream delivered one byte at a time parses the same, including
	// a CR split from its LF.
	evs2, err := readAllEvents(t, iotest.OneByteReader(strings.NewReader(in)))
	if err != nil || len(evs2) != len(evs) {
		t.Fatalf("one byte at a time: %d events, %v", len(evs2), err)
	}
}

func TestSSEParserEnds(t *testing.T) {
	_, err := readAllEvents(t, strings.NewReader("data: x\n"))
	if !errors.Is(err, ErrSSETruncated) {
		t.Fatalf("truncated event: %v", err)
	}
	_, err = readAllEvents(t, strings.NewReader("data: x"))
	if !errors.Is(err, ErrSSETruncated) {
		t.Fatalf("truncated line: %v", err)
	}
	evs, err := readAllEvents(t, strings.NewReader(": just a comment\n"))
	if err != nil || len(evs) != 0 {
		t.Fatalf("comment only: %v %v", evs, err)
	}
	// Bounded: a 64-byte event limit refuses bigger events and longer lines.
	_, err = readAllEvents(t, strings.NewReader(strings.Repeat("data: 0123456789\n", 10)+"\n"))
	if err == nil || errors.Is(err, ErrSSETruncated) {
		t.Fatalf("oversized event: %v", err)
	}
	_, err = readAllEvents(t, strings.NewReader("data: "+strings.Repeat("x", 1000)+"\n\n"))
	if err == nil {
		t.Fatal("oversized line accepted")
	}
	rerr := errors.New("boom")
	_, err = readAllEvents(t, iotest.ErrReader(rerr))
	if !errors.Is(err, rerr) {
		t.Fatalf("read error: %v", err)
	}
}

func TestSSEWriterSplitsMultilineData(t *testing.T) {
	var buf bytes.Buffer
	if err := NewSSEWriter(&buf, FormatRaw).Event(SSEEvent{Event: "x", Data: []byte("a\nb\r\nc\rd")}); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "event: x\ndata: a\ndata: b\ndata: c\ndata: d\n\n" {
		t.Fatalf("got %q", buf.String())
	}
	if err := NewSSEWriter(&buf, FormatRaw).Event(SSEEvent{Event: "a\nb"}); err == nil {
		t.Fatal("multi-line event name accepted")
	}
}

func TestDecodeReadEventErrors(t *testing.T) {
	cases := []SSEEvent{
		{Event: EventBatch, ID: "1,2", Data: []byte(`{"records":[]}`)},
		{Event: EventBatch, ID: "1,2,3", Data: []byte(`{"records":`)},
		{Event: EventPing, Data: []byte(`{}`)},
		{Event: EventPing, Data: []byte(`{"timestamp":1,"tail":{"seq_num":1}}`)},
	}
	for _, ev := range cases {
		if _, err := DecodeReadEvent(ev, FormatRaw); err == nil {
			t.Errorf("%+v accepted", ev)
		}
	}
	re, err := DecodeReadEvent(SSEEvent{Event: "future", Data: []byte("x")}, FormatRaw)
	if err != nil || re.Kind != ReadEventUnknown {
		t.Fatalf("unknown event: %+v %v", re, err)
	}
	re, err = DecodeReadEvent(SSEEvent{Event: EventPing, Data: []byte(`{"timestamp":5}`)}, FormatRaw)
	if err != nil || re.Ping.Timestamp != 5 {
		t.Fatalf("ping without tail (older servers): %+v %v", re, err)
	}
}
