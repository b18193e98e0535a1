package server_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
)

// The ten conformance scenarios of docs/design.md §16.3, at the HTTP level (the
// TypeScript SDK runs them too, in the interop test).

// 1. Provisioning.
func TestScenarioProvisioning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.call("POST", "basins", []byte(`{"basin":"prov-basin","config":{"create_stream_on_append":true,"create_stream_on_read":false,"default_stream_config":{"storage_class":"express"}}}`), "Content-Type", "application/json")
	want(t, r, 201, "")
	var bi map[string]any
	if err := json.Unmarshal(r.body, &bi); err != nil || bi["name"] != "prov-basin" || bi["state"] != "active" || bi["deleted_at"] != nil {
		t.Fatalf("basin info %s", r)
	}
	r = e.call("GET", "basins/prov-basin", nil)
	want(t, r, 200, "")
	if !strings.Contains(string(r.body), `"create_stream_on_append":true`) || !strings.Contains(string(r.body), `"storage_class":"express"`) {
		t.Fatalf("basin config %s", r)
	}
	full := `{"storage_class":"standard","retention_policy":{"age":3600},"timestamping":{"mode":"client-require","uncapped":true},"delete_on_empty":{"min_age_secs":60}}`
	r = e.stream("prov-basin", "POST", "streams", []byte(`{"stream":"orders/eu","config":`+full+`}`))
	want(t, r, 201, "")
	var si map[string]any
	if err := json.Unmarshal(r.body, &si); err != nil || si["name"] != "orders/eu" || si["created_at"] == nil {
		t.Fatalf("stream info %s", r)
	}
	if r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("content-type %q", r.header.Get("Content-Type"))
	}
	r = e.stream("prov-basin", "GET", "streams/orders%2Feu", nil)
	want(t, r, 200, "")
	var got, wantCfg any
	json.Unmarshal(r.body, &got)
	json.Unmarshal([]byte(full), &wantCfg)
	if fmt.Sprint(got) != fmt.Sprint(wantCfg) {
		t.Fatalf("config round trip:\n got %s\nwant %s", r.body, full)
	}
	// A stream without config resolves through the basin default.
	want(t, e.stream("prov-basin", "POST", "streams", []byte(`{"stream":"other"}`)), 201, "")
	r = e.stream("prov-basin", "GET", "streams/other", nil)
	if !strings.Contains(string(r.body), `"storage_class":"express"`) || !strings.Contains(string(r.body), `"age":604800`) {
		t.Fatalf("resolved config %s", r)
	}
	r = e.stream("prov-basin", "GET", "streams?prefix=orders", nil)
	want(t, r, 200, "")
	var list api.ListStreamsResponse
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Streams) != 1 || list.Streams[0].Name != "orders/eu" || list.HasMore {
		t.Fatalf("list %s", r)
	}
	if tail := e.tail("prov-basin", "orders%2Feu"); tail != (api.StreamPosition{}) {
		t.Fatalf("tail of a new stream %+v", tail)
	}
	// Listing basins, with the prefix and limit.
	want(t, e.call("POST", "basins", []byte(`{"basin":"prov-basin-2"}`)), 201, "")
	r = e.call("GET", "basins?prefix=prov&limit=1", nil)
	var bl api.ListBasinsResponse
	if err := json.Unmarshal(r.body, &bl); err != nil || len(bl.Basins) != 1 || bl.Basins[0].Name != "prov-basin" || !bl.HasMore {
		t.Fatalf("basin list %s", r)
	}
	r = e.call("GET", "basins?start_after=prov-basin", nil)
	if err := json.Unmarshal(r.body, &bl); err != nil || len(bl.Basins) != 1 || bl.Basins[0].Name != "prov-basin-2" || bl.HasMore {
		t.Fatalf("basin list after %s", r)
	}
}

// 2. String append with headers, read back.
func TestScenarioStringAppend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("str-basin")
	r := e.appendJSON("str-basin", "s", `{"records":[{"headers":[["k","v"],["k2",""]],"body":"hello"},{"body":"wörld"},{"headers":[["only","header"]]}]}`)
	want(t, r, 200, "")
	ack, err := api.DecodeAppendAckJSON(r.body)
	if err != nil || ack.Start.SeqNum != 0 || ack.End.SeqNum != 3 || ack.Tail.SeqNum < 3 {
		t.Fatalf("ack %s", r)
	}
	want(t, e.appendJSON("str-basin", "s", textRecords("x", 5)), 200, "")
	b, r := e.readJSON("str-basin", "s", "seq_num=0")
	if b == nil {
		t.Fatalf("read %s", r)
	}
	if len(b.Records) != 8 {
		t.Fatalf("read %d records", len(b.Records))
	}
	if string(b.Records[0].Body) != "hello" || len(b.Records[0].Headers) != 2 || string(b.Records[0].Headers[0].Name) != "k" || string(b.Records[0].Headers[0].Value) != "v" {
		t.Fatalf("record 0: %+v", b.Records[0])
	}
	if string(b.Records[1].Body) != "wörld" || len(b.Records[2].Body) != 0 || len(b.Records[2].Headers) != 1 {
		t.Fatalf("records 1-2: %+v", b.Records[1:3])
	}
	// Empty bodies and headers are omitted on the wire.
	if strings.Contains(string(r.body), `"body":""`) || strings.Contains(string(r.body), `"headers":[]`) {
		t.Fatalf("empty fields on the wire: %s", r)
	}
	if b.Tail != nil {
		t.Fatalf("a catch-up read carries a tail: %s", r)
	}
	var last uint64
	for i, rec := range b.Records {
		if rec.SeqNum != uint64(i) || *rec.Timestamp < last {
			t.Fatalf("record %d: seq %d ts %d after %d", i, rec.SeqNum, *rec.Timestamp, last)
		}
		last = *rec.Timestamp
	}
}

// 3. Binary round trip through protobuf, base64 JSON and an S2S session.
func TestScenarioBinaryRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("bin-basin")
	body := []byte{0x00, 0xff, 0x10, 0x00, 0xfe}
	in := &api.AppendInput{Records: []api.Record{
		{Body: body, Headers: []api.Header{{Name: []byte{0xff}, Value: []byte{0x00}}}},
		{Body: []byte{0xff}},
	}}
	pb, err := api.EncodeAppendProto(in)
	if err != nil {
		t.Fatal(err)
	}
	r := e.call("POST", "streams/b/records", pb, "s2-basin", "bin-basin", "Content-Type", "application/protobuf", "Accept", "application/protobuf")
	want(t, r, 200, "")
	if r.header.Get("Content-Type") != "application/protobuf" {
		t.Fatalf("ack content-type %q", r.header.Get("Content-Type"))
	}
	ack, aerr := api.DecodeAppendAckProto(r.body)
	if aerr != nil || ack.End.SeqNum != 2 {
		t.Fatalf("proto ack %+v %v", ack, aerr)
	}
	check := func(how string, recs []api.Record) {
		t.Helper()
		if len(recs) != 2 || string(recs[0].Body) != string(body) || string(recs[1].Body) != "\xff" ||
			len(recs[0].Headers) != 1 || string(recs[0].Headers[0].Name) != "\xff" || string(recs[0].Headers[0].Value) != "\x00" {
			t.Fatalf("%s: %+v", how, recs)
		}
	}
	r = e.call("GET", "streams/b/records?seq_num=0", nil, "s2-basin", "bin-basin", "Accept", "application/protobuf")
	want(t, r, 200, "")
	pbb, perr := api.DecodeReadBatchProto(r.body)
	if perr != nil {
		t.Fatal(perr)
	}
	check("protobuf read", pbb.Records)
	b, r := e.readJSON("bin-basin", "b", "seq_num=0", "s2-format", "base64")
	if b == nil {
		t.Fatalf("base64 read %s", r)
	}
	check("base64 read", b.Records)
	if !strings.Contains(string(r.body), base64.StdEncoding.EncodeToString(body)) {
		t.Fatalf("base64 body not on the wire: %s", r)
	}
	// Raw JSON is lossy on read: invalid UTF-8 becomes U+FFFD.
	b, _ = e.readJSON("bin-basin", "b", "seq_num=0")
	if !strings.Contains(string(b.Records[1].Body), "\uFFFD") {
		t.Fatalf("raw read of 0xff: %q", b.Records[1].Body)
	}
	s := e.openReadSession("bin-basin", "b", "seq_num=0&count=2", "")
	defer s.close()
	got := s.records(t, 2)
	check("s2s read session", got)
	s.wantEnd(t)
}

// 4. match_seq_num.
func TestScenarioMatchSeqNum(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("match-basin")
	want(t, e.appendJSON("match-basin", "m", `{"records":[{"body":"a"},{"body":"b"}],"match_seq_num":0}`), 200, "")
	want(t, e.appendJSON("match-basin", "m", `{"records":[{"body":"c"}],"match_seq_num":2}`), 200, "")
	r := e.appendJSON("match-basin", "m", `{"records":[{"body":"stale"}],"match_seq_num":1}`)
	if r.status != 412 || string(r.body) != `{"seq_num_mismatch":3}` {
		t.Fatalf("stale match_seq_num: %s", r)
	}
	if tail := e.tail("match-basin", "m"); tail.SeqNum != 3 {
		t.Fatalf("rejected batch moved the tail to %d", tail.SeqNum)
	}
}

// 5. Fencing.
func TestScenarioFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("fence-basin")
	fence := func(tok string) string {
		return fmt.Sprintf(`{"records":[{"headers":[["","fence"]],"body":%q}]}`, tok)
	}
	want(t, e.appendJSON("fence-basin", "f", fence("w1")), 200, "")
	want(t, e.appendJSON("fence-basin", "f", `{"records":[{"body":"ok"}],"fencing_token":"w1"}`), 200, "")
	r := e.appendJSON("fence-basin", "f", `{"records":[{"body":"no"}],"fencing_token":"w2"}`)
	if r.status != 412 || string(r.body) != `{"fencing_token_mismatch":"w1"}` {
		t.Fatalf("wrong token: %s", r)
	}
	want(t, e.appendJSON("fence-basin", "f", `{"records":[{"body":"untokened"}]}`), 200, "")
	want(t, e.appendJSON("fence-basin", "f", `{"records":[{"headers":[["","fence"]],"body":""}],"fencing_token":"w1"}`), 200, "")
	want(t, e.appendJSON("fence-basin", "f", `{"records":[{"body":"cleared"}],"fencing_token":""}`), 200, "")
	if tail := e.tail("fence-basin", "f"); tail.SeqNum != 5 {
		t.Fatalf("tail %d, want 5", tail.SeqNum)
	}
}

// 6. Read edges.
func TestScenarioReadEdges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("edge-basin")
	e.call("PUT", "streams/e", nil, "s2-basin", "edge-basin")
	wantTail := func(r resp, seq uint64) {
		t.Helper()
		if r.status != 416 {
			t.Fatalf("want 416, got %s", r)
		}
		p, err := api.DecodeTailJSON(r.body)
		if err != nil || p.SeqNum != seq {
			t.Fatalf("416 body %s", r)
		}
	}
	_, r := e.readJSON("edge-basin", "e", "seq_num=0")
	wantTail(r, 0)
	_, r = e.readJSON("edge-basin", "e", "")
	wantTail(r, 0)
	for i := range 3 {
		want(t, e.appendJSON("edge-basin", "e", textRecords(fmt.Sprint(i), 1000)), 200, "")
	}
	_, r = e.readJSON("edge-basin", "e", "seq_num=5000")
	wantTail(r, 3000)
	_, r = e.readJSON("edge-basin", "e", "seq_num=5000&clamp=true")
	wantTail(r, 3000) // clamped to the tail, and a unary read without wait cannot follow
	_, r = e.readJSON("edge-basin", "e", "seq_num=3000")
	wantTail(r, 3000)
	b, r := e.readJSON("edge-basin", "e", "tail_offset=10&count=100")
	if b == nil || len(b.Records) != 10 || b.Records[0].SeqNum != 2990 {
		t.Fatalf("tail_offset=10: %s", r)
	}
	b, r = e.readJSON("edge-basin", "e", "tail_offset=100000")
	if b == nil || len(b.Records) == 0 || b.Records[0].SeqNum != 0 {
		t.Fatalf("tail_offset saturates at 0: %s", r)
	}
	b, r = e.readJSON("edge-basin", "e", "seq_num=0&count=5000")
	if b == nil || len(b.Records) != 1000 {
		t.Fatalf("count=5000 is capped at 1000: %d records", len(b.Records))
	}
	b, r = e.readJSON("edge-basin", "e", "seq_num=10&count=0")
	if b == nil || len(b.Records) != 0 || string(r.body) != `{"records":[]}` {
		t.Fatalf("count=0: %s", r)
	}
	// until is exclusive: appending with explicit timestamps (on a stream
	// that keeps them forever: under an age, reads skip records that old).
	want(t, e.stream("edge-basin", "POST", "streams", []byte(`{"stream":"u","config":{"retention_policy":{"infinite":{}}}}`)), 201, "")
	want(t, e.appendJSON("edge-basin", "u", `{"records":[{"timestamp":10,"body":"a"},{"timestamp":20,"body":"b"},{"timestamp":30,"body":"c"}]}`), 200, "")
	b, r = e.readJSON("edge-basin", "u", "seq_num=0&until=20")
	if b == nil || len(b.Records) != 1 || string(b.Records[0].Body) != "a" {
		t.Fatalf("until=20: %s", r)
	}
	b, r = e.readJSON("edge-basin", "u", "timestamp=15")
	if b == nil || len(b.Records) != 2 || string(b.Records[0].Body) != "b" {
		t.Fatalf("timestamp=15: %s", r)
	}
	_, r = e.readJSON("edge-basin", "u", "timestamp=31")
	wantTail(r, 3)
	_, r = e.readJSON("edge-basin", "u", "timestamp=20&until=20")
	want(t, r, 422, api.CodeInvalid)
	_, r = e.readJSON("edge-basin", "u", "seq_num=0&timestamp=1")
	want(t, r, 422, api.CodeInvalid)
	b, r = e.readJSON("edge-basin", "u", "seq_num=0&bytes=10")
	if b == nil || len(b.Records) != 1 {
		t.Fatalf("bytes=10 holds one 9-byte record: %s", r)
	}
}

// 7. Long poll.
func TestScenarioLongPoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("poll-basin")
	want(t, e.appendJSON("poll-basin", "p", textRecords("a", 1)), 200, "")
	type answer struct {
		b  *api.ReadBatch
		r  resp
		at time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		b, r := e.readJSON("poll-basin", "p", "tail_offset=0&wait=3")
		answered <- answer{b, r, time.Now()}
	}()
	// The poll is placed at the tail (seq 1) and waits: the record
	// appended now is the one it returns.
	waitSessions(t, e, "long_poll", 1)
	appended := time.Now()
	want(t, e.appendJSON("poll-basin", "p", textRecords("late", 1)), 200, "")
	var a answer
	select {
	case a = <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll is not answered")
	}
	b, r := a.b, a.r
	if b == nil || len(b.Records) != 1 || string(b.Records[0].Body) != "late-0" || b.Records[0].SeqNum != 1 {
		t.Fatalf("long poll: %s", r)
	}
	if d := a.at.Sub(appended); d < 0 || d > 2*time.Second {
		t.Fatalf("long poll returned %v after the append began", d)
	}
	waitSessions(t, e, "long_poll", 0)
	if b.Tail == nil || b.Tail.SeqNum != 2 {
		t.Fatalf("a live batch carries the tail: %s", r)
	}
	start := time.Now()
	b, r = e.readJSON("poll-basin", "p", "wait=1")
	if b == nil || len(b.Records) != 0 || string(r.body) != `{"records":[]}` {
		t.Fatalf("empty long poll: %s", r)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("empty long poll returned after %v", d)
	}
}

// 10. Commands, timestamps, deletion.
func TestScenarioCommandsTimestampsDeletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("cmd-basin")
	want(t, e.appendJSON("cmd-basin", "c", textRecords("a", 5)), 200, "")
	trim := base64.StdEncoding.EncodeToString([]byte{0, 0, 0, 0, 0, 0, 0, 2})
	want(t, e.appendJSON("cmd-basin", "c", `{"records":[{"headers":[["","dHJpbQ=="]],"body":"`+trim+`"}]}`, "s2-format", "base64"), 200, "")
	b, r := e.readJSON("cmd-basin", "c", "seq_num=5")
	if b == nil || len(b.Records) != 1 || len(b.Records[0].Headers) != 1 || len(b.Records[0].Headers[0].Name) != 0 {
		t.Fatalf("a command record reads back like any record: %s", r)
	}
	want(t, e.appendJSON("cmd-basin", "c", `{"records":[{"headers":[["","nope"]]}]}`), 422, api.CodeInvalid)

	// client-require without a timestamp.
	want(t, e.stream("cmd-basin", "POST", "streams", []byte(`{"stream":"req","config":{"timestamping":{"mode":"client-require"}}}`)), 201, "")
	want(t, e.appendJSON("cmd-basin", "req", `{"records":[{"body":"x"}]}`), 422, api.CodeInvalid)
	want(t, e.appendJSON("cmd-basin", "req", `{"records":[{"body":"x","timestamp":5}]}`), 200, "")

	// A future timestamp is capped to now; a lower one is raised.
	future := uint64(time.Now().Add(time.Hour).UnixMilli())
	r = e.appendJSON("cmd-basin", "ts", fmt.Sprintf(`{"records":[{"timestamp":%d,"body":"f"},{"timestamp":1,"body":"low"}]}`, future))
	want(t, r, 200, "")
	b, _ = e.readJSON("cmd-basin", "ts", "seq_num=0")
	now := uint64(time.Now().UnixMilli())
	if ts := *b.Records[0].Timestamp; ts > now || ts < now-60_000 {
		t.Fatalf("future timestamp not capped: %d (now %d)", ts, now)
	}
	if *b.Records[1].Timestamp != *b.Records[0].Timestamp {
		t.Fatalf("lower timestamp not raised: %d after %d", *b.Records[1].Timestamp, *b.Records[0].Timestamp)
	}

	// Deletion: 202, then 409, then 404; appends fail; the name is reusable.
	r = e.stream("cmd-basin", "DELETE", "streams/c", nil)
	want(t, r, 202, "")
	if len(r.body) != 0 || r.header.Get("Content-Length") != "0" {
		t.Fatalf("202 with a body: %s %v", r, r.header)
	}
	want(t, e.stream("cmd-basin", "GET", "streams/c", nil), 409, api.CodeStreamDeletionPending)
	want(t, e.appendJSON("cmd-basin", "c", textRecords("z", 1)), 409, api.CodeStreamDeletionPending)
	r = e.stream("cmd-basin", "GET", "streams", nil)
	if !strings.Contains(string(r.body), `"name":"c"`) || strings.Contains(string(r.body), `"name":"c","created_at":"`+"x") {
		t.Fatalf("listing during deletion: %s", r)
	}
	var l api.ListStreamsResponse
	json.Unmarshal(r.body, &l)
	for _, s := range l.Streams {
		if s.Name == "c" && s.DeletedAt == nil {
			t.Fatalf("deleting stream lists without deleted_at: %s", r)
		}
	}
	poll.Until(t, 10*time.Second, "the deletion to end", func() bool {
		r := e.stream("cmd-basin", "GET", "streams/c", nil)
		if r.status == 409 {
			want(t, r, 409, api.CodeStreamDeletionPending)
			return false
		}
		want(t, r, 404, api.CodeStreamNotFound)
		return true
	})
	// Auto-create on append makes a new stream under the old name.
	want(t, e.appendJSON("cmd-basin", "c", textRecords("new", 1)), 200, "")
	if tail := e.tail("cmd-basin", "c"); tail.SeqNum != 1 {
		t.Fatalf("re-created stream tail %d", tail.SeqNum)
	}
}
