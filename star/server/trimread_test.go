package server_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/server"
)

// trimRecord is an append of one trim command to point (base64 format).
func trimRecord(point uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], point)
	return `{"records":[{"headers":[["","dHJpbQ=="]],"body":"` + base64.StdEncoding.EncodeToString(b[:]) + `"}]}`
}

// trimStar is a star of a cluster on ms and objs serving the S2 API and
// the Durable Streams face, with no auditor: nothing settles, so what a
// read shows of a trim is the read path's alone.
func trimStar(t *testing.T, id string, ms meta.Store, objs objstore.Store) *env {
	return starServing(t, id, ms, objs, nil, server.Options{Auth: auth.Open(), Durable: &durable.Config{LongPoll: time.Second}})
}

// firstSeqs reads from seq 0 through e over every S2 transport (unary
// JSON, an S2S session, an SSE session; a start by timestamp and by tail
// offset) and returns each read's first seq num, by transport.
func firstSeqs(t *testing.T, e *env, basin, stream string, tail uint64) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	first := func(name string, b *api.ReadBatch, r resp) {
		t.Helper()
		if b == nil || len(b.Records) == 0 {
			t.Fatalf("%s through %s: %s, want records", name, e.base, r)
		}
		out[name] = b.Records[0].SeqNum
	}
	b, r := e.readJSON(basin, stream, "seq_num=0")
	first("unary seq_num=0", b, r)
	b, r = e.readJSON(basin, stream, "timestamp=0")
	first("unary timestamp=0", b, r)
	b, r = e.readJSON(basin, stream, fmt.Sprintf("tail_offset=%d", tail))
	first("unary tail_offset", b, r)

	s := e.openReadSession(basin, stream, "seq_num=0&count=1", "")
	out["s2s session"] = s.records(t, 1)[0].SeqNum
	s.close()

	sse := e.stream(basin, "GET", "streams/"+stream+"/records?seq_num=0&count=1", nil, "Accept", "text/event-stream")
	want(t, sse, 200, "")
	sr := api.NewSSEReader(bytes.NewReader(sse.body), 0)
	for {
		ev, err := sr.Next()
		if err != nil {
			t.Fatalf("SSE through %s: %v: %s", e.base, err, truncate(sse.body))
		}
		re, derr := api.DecodeReadEvent(ev, api.FormatRaw)
		if derr != nil {
			t.Fatal(derr)
		}
		if re.Kind == api.ReadEventBatch && len(re.Batch.Records) > 0 {
			out["sse session"] = re.Batch.Records[0].SeqNum
			break
		}
	}
	return out
}

// TestTrimShowsAtOnce (issue 29 item 2): from a trim's acknowledgement
// on, a read from below the trim point starts at it, on the leader and on
// a star that forwards the read, over every transport, with no settle at
// all (this cluster runs no auditor); the tail stays. On the Durable
// Streams face an offset below it is 410 Gone and -1 starts at it.
func TestTrimShowsAtOnce(t *testing.T) {
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	a, b := trimStar(t, "a", ms, objs), trimStar(t, "b", ms, objs)
	a.setupBasin("trim-basin")
	want(t, a.appendJSON("trim-basin", "s", textRecords("r", 6)), 200, "")
	// The trim goes through b, which forwards it to a, the leader.
	want(t, b.appendJSON("trim-basin", "s", trimRecord(4), "s2-format", "base64"), 200, "")
	for _, e := range []*env{a, b} {
		if tail := e.tail("trim-basin", "s"); tail.SeqNum != 7 {
			t.Fatalf("tail through %s: %+v, want 7 (a trim keeps the tail)", e.base, tail)
		}
		for name, got := range firstSeqs(t, e, "trim-basin", "s", 7) {
			if got != 4 {
				t.Errorf("%s through %s right after trim(4): first record %d, want 4", name, e.base, got)
			}
		}
	}
	// A trim point never moves back: a later trim to 2 changes nothing.
	want(t, a.appendJSON("trim-basin", "s", trimRecord(2), "s2-format", "base64"), 200, "")
	if b, r := b.readJSON("trim-basin", "s", "seq_num=0"); b == nil || len(b.Records) == 0 || b.Records[0].SeqNum != 4 {
		t.Errorf("after trim(2) below trim(4): %s, want the read to start at 4", r)
	}

	// The Durable Streams face on the same streams (its basin): four
	// messages, a trim to 2 through the S2 API.
	want(t, a.call("PUT", "/ds/d", nil, "Content-Type", "text/plain"), 201, "")
	for _, m := range []string{"a", "b", "c", "d"} {
		want(t, a.call("POST", "/ds/d", []byte(m), "Content-Type", "text/plain"), 204, "")
	}
	want(t, b.appendJSON(durable.DefaultBasin, "d", trimRecord(2), "s2-format", "base64"), 200, "")
	for _, e := range []*env{a, b} {
		for _, q := range []string{"", "&live=long-poll", "&live=sse"} {
			if r := e.call("GET", "/ds/d?offset="+offsets.Format(0)+q, nil); r.status != 410 {
				t.Errorf("GET /ds/d from 0%s through %s right after trim(2): %s, want 410", q, e.base, r)
			}
		}
		for _, off := range []string{offsets.Format(2), "-1"} {
			if r := e.call("GET", "/ds/d?offset="+off, nil); r.status != 200 || string(r.body) != "cd" {
				t.Errorf("GET /ds/d from %s through %s: %s, want 200 \"cd\"", off, e.base, r)
			}
		}
	}
}

// TestTrimSurvivesRestartAndHandoff: a trim acknowledged but not settled
// (no auditor runs here) stays in force when its leader stops and another
// star takes the stream over (a handoff of the released lease), and when
// the first star restarts and takes it back: the new leader finds the
// trim command in the records it opens the stream from.
func TestTrimSurvivesRestartAndHandoff(t *testing.T) {
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	a := trimStar(t, "a", ms, objs)
	a.setupBasin("trim-basin")
	want(t, a.appendJSON("trim-basin", "s", textRecords("r", 6)), 200, "")
	want(t, a.appendJSON("trim-basin", "s", trimRecord(4), "s2-format", "base64"), 200, "")
	want(t, a.appendJSON("trim-basin", "s", textRecords("t", 2)), 200, "")
	check := func(e *env, when string) {
		t.Helper()
		b, r := e.readJSON("trim-basin", "s", "seq_num=0")
		if b == nil || len(b.Records) == 0 || b.Records[0].SeqNum != 4 {
			t.Fatalf("%s: read from 0: %s, want it to start at 4", when, r)
		}
		if tail := e.tail("trim-basin", "s"); tail.SeqNum != 9 {
			t.Fatalf("%s: tail %+v, want 9", when, tail)
		}
	}
	check(a, "on the leader")
	a.stop(t)
	b := trimStar(t, "b", ms, objs)
	check(b, "after a handoff to b")
	b.stop(t)
	a = trimStar(t, "a", ms, objs)
	check(a, "after a restart of a")
}

// TestRetentionShowsAtOnce: a record older than its stream's retention
// age (by its own timestamp, here a client's) is not served, though it
// shares its flight and span ref with newer records and nothing has
// settled or trimmed it; a stream with infinite retention serves it.
func TestRetentionShowsAtOnce(t *testing.T) {
	e := newEnv(t)
	e.setupBasin("age-basin")
	want(t, e.stream("age-basin", "POST", "streams", []byte(`{"stream":"aged","config":{"retention_policy":{"age":60}}}`)), 201, "")
	want(t, e.stream("age-basin", "POST", "streams", []byte(`{"stream":"kept","config":{"retention_policy":{"infinite":{}}}}`)), 201, "")
	old := time.Now().Add(-2 * time.Minute).UnixMilli()
	body := fmt.Sprintf(`{"records":[{"timestamp":%d,"body":"old-0"},{"timestamp":%d,"body":"old-1"},{"body":"new-2"},{"body":"new-3"}]}`, old, old)
	for _, s := range []string{"aged", "kept"} {
		want(t, e.appendJSON("age-basin", s, body), 200, "")
	}
	for s, first := range map[string]uint64{"aged": 2, "kept": 0} {
		b, r := e.readJSON("age-basin", s, "seq_num=0")
		if b == nil || len(b.Records) == 0 || b.Records[0].SeqNum != first {
			t.Errorf("%s: read from 0: %s, want it to start at %d", s, r, first)
		}
		ss := e.openReadSession("age-basin", s, "seq_num=0&count=1", "")
		if got := ss.records(t, 1)[0].SeqNum; got != first {
			t.Errorf("%s: session from 0 starts at %d, want %d", s, got, first)
		}
		ss.close()
		if tail := e.tail("age-basin", s); tail.SeqNum != 4 {
			t.Errorf("%s: tail %+v, want 4", s, tail)
		}
	}
}

// TestCreateOnReadWithConfig (issue 29 item 3): a read of a missing
// stream in a basin that creates streams on read, carrying the
// s2-stream-config header, creates the stream with that config even when
// the read itself is 416 on the new, empty stream (the SDK's read session
// with streamConfig and a count); unary, S2S and SSE. Without the header
// such a read still creates nothing (TestRejectedRequestsCreateNothing).
func TestCreateOnReadWithConfig(t *testing.T) {
	e := newEnv(t)
	e.setupBasin("cor-basin")
	cfg := func(age int) []string {
		return []string{"s2-stream-config", fmt.Sprintf(`{"retention_policy":{"age":%d},"timestamping":{"mode":"arrival"}}`, age)}
	}
	check := func(name string, age int) {
		t.Helper()
		r := e.stream("cor-basin", "GET", "streams/"+name, nil)
		want(t, r, 200, "")
		c, err := api.DecodeStreamConfig(r.body)
		if err != nil || c.RetentionPolicy == nil || c.RetentionPolicy.AgeSecs != uint64(age) || c.Timestamping == nil || c.Timestamping.Mode == nil || *c.Timestamping.Mode != api.Arrival {
			t.Fatalf("config of %s after its read: %s (%v), want retention age %d and arrival timestamps", name, r, err, age)
		}
	}
	// Unary: 416 with the tail, and the stream made with the header's config.
	r := e.stream("cor-basin", "GET", "streams/unary/records?seq_num=0", nil, cfg(111)...)
	want(t, r, 416, "")
	check("unary", 111)
	// An S2S read session with a count: 416 before the session starts.
	r = e.do(e.h2, "GET", "/v1/streams/s2s/records?seq_num=0&count=1", nil, append([]string{"s2-basin", "cor-basin", "Content-Type", "s2s/proto"}, cfg(222)...)...)
	if r.status != 416 {
		t.Fatalf("S2S session on a missing stream: %s, want 416", r)
	}
	check("s2s", 222)
	// SSE likewise.
	r = e.stream("cor-basin", "GET", "streams/sse/records?seq_num=0&count=1", nil, append([]string{"Accept", "text/event-stream"}, cfg(333)...)...)
	if r.status != 416 {
		t.Fatalf("SSE session on a missing stream: %s, want 416", r)
	}
	check("sse", 333)
	// An existing stream keeps its config.
	if _, r := e.readJSON("cor-basin", "unary", "seq_num=0", cfg(444)...); r.status != 416 {
		t.Fatalf("read of the existing empty stream: %s, want 416", r)
	}
	check("unary", 111)
}
