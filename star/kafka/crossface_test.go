package kafka_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/kafka"
	"github.com/starlog/starlog/star/server"
)

// s2 sends one S2 API request (the admin's on an authenticated star).
func (s *star) s2(method, stream, query string, body any) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	u := s.base + "/v1/streams/" + url.PathEscape(stream) + "/records" + query
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("s2-basin", kafka.DefaultBasin)
	req.Header.Set("Content-Type", "application/json")
	if !s.open {
		req.Header.Set("Authorization", "Bearer "+testAdmin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type s2Record struct {
	SeqNum    uint64      `json:"seq_num"`
	Timestamp uint64      `json:"timestamp"`
	Headers   [][2]string `json:"headers"`
	Body      string      `json:"body"`
}

// A record produced through Kafka reads back through the S2 API (the key
// as the first header, kafka.key; the Kafka headers after it; the value
// as the body; the timestamp), and records appended through S2 are
// consumed through Kafka, a fence command among them left out as a gap.
func TestCrossFace(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	createTopic(t, c, "mixed", 1)
	p := s.admin(kgo.DefaultProduceTopic("mixed"))
	rec := &kgo.Record{Key: []byte("user-7"), Value: []byte("from kafka"),
		Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}}}
	if err := p.ProduceSync(ctxT(t), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	code, body := s.s2("GET", "mixed/0", "?seq_num=0", nil)
	var read struct{ Records []s2Record }
	if err := json.Unmarshal(body, &read); code != 200 || err != nil || len(read.Records) != 1 {
		t.Fatalf("S2 read: %d %s", code, body)
	}
	got := read.Records[0]
	// kgo produces idempotently: the batch's first record carries the
	// producer's mark after the Kafka headers (docs/kafka.md).
	want := [][2]string{{kafka.HeaderKey, "user-7"}, {"trace", "abc"}, {"starlog-producer", "kafka-0"},
		{"starlog-producer-epoch", "0"}, {"starlog-producer-seq", "0"}, {"starlog-producer-records", "1"}}
	if got.Body != "from kafka" || !slices.Equal(got.Headers, want) || got.Timestamp != uint64(rec.Timestamp.UnixMilli()) {
		t.Fatalf("S2 read of a Kafka record: %+v (produced at %d)", got, rec.Timestamp.UnixMilli())
	}

	appendS2 := func(records ...map[string]any) {
		t.Helper()
		if code, body := s.s2("POST", "mixed/0", "", map[string]any{"records": records}); code != 200 {
			t.Fatalf("S2 append: %d %s", code, body)
		}
	}
	appendS2(map[string]any{"headers": [][2]string{{kafka.HeaderKey, "k2"}, {"x", "y"}}, "body": "from s2"})
	appendS2(map[string]any{"headers": [][2]string{{"", "fence"}}, "body": "token-1"}) // a command record: seq 2
	appendS2(map[string]any{"body": "no key"})

	code, body = s.s2("GET", "mixed/0", "?seq_num=1&count=1", nil)
	if err := json.Unmarshal(body, &read); code != 200 || err != nil || len(read.Records) != 1 {
		t.Fatalf("S2 read: %d %s", code, body)
	}
	s2ts := int64(read.Records[0].Timestamp)

	cons := s.admin(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"mixed": {0: kgo.NewOffset().At(1)}}))
	var recs []*kgo.Record
	for len(recs) < 2 {
		fs := cons.PollFetches(ctxT(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, fs.Records()...)
	}
	a, b := recs[0], recs[1]
	if a.Offset != 1 || string(a.Key) != "k2" || string(a.Value) != "from s2" || len(a.Headers) != 1 ||
		a.Headers[0].Key != "x" || string(a.Headers[0].Value) != "y" || a.Timestamp.UnixMilli() != s2ts {
		t.Fatalf("an S2 record through Kafka: offset %d key %q value %q headers %v ts %d (S2: %d)", a.Offset, a.Key, a.Value, a.Headers, a.Timestamp.UnixMilli(), s2ts)
	}
	if b.Offset != 3 || b.Key != nil || string(b.Value) != "no key" {
		t.Fatalf("after the fence: offset %d key %v value %q (want offset 3, null key)", b.Offset, b.Key, b.Value)
	}
}

// ds sends one Durable Streams request to /ds/<path> (the admin's on an
// authenticated star): the status, the body and the response headers.
func (s *star) ds(method, path, body string, hdr ...string) (int, string, http.Header) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+"/ds/"+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if !s.open {
		req.Header.Set("Authorization", "Bearer "+testAdmin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// The Durable Streams face on the topics' basin: a partition's stream
// T/p is the Durable Streams stream /ds/T/p. A record produced through
// Kafka reads back through it as its value (the protocol carries bodies
// only: the key and headers stay in the record, seen through S2 and
// Kafka). Records appended through Durable Streams are consumed through
// Kafka as values with a null key at their seq nums, with their
// timestamps; the protocol's metadata on a batch's first record (an
// idempotent producer's ds-producer-* headers) and a close's marker
// (empty, header ds-close) are Kafka headers and an empty record
// (docs/kafka.md, Records).
func TestCrossFaceDurableStreams(t *testing.T) {
	s := startStarWith(t, starOpts{open: true, meta: testsvc.SQLite(t), server: func(o *server.Options) {
		o.Durable = &durable.Config{Basin: kafka.DefaultBasin}
	}})
	createTopic(t, s.admin(), "shared", 1)
	p := s.admin(kgo.DefaultProduceTopic("shared"))
	rec := &kgo.Record{Key: []byte("user-7"), Value: []byte("from kafka;"),
		Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}}}
	if err := p.ProduceSync(ctxT(t), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A PUT gives the partition's stream its Durable Streams face, records kept.
	if code, body, _ := s.ds("PUT", "shared/0", "", "Content-Type", "text/plain"); code != 200 && code != 201 {
		t.Fatalf("DS PUT shared/0: %d %s", code, body)
	}
	if code, body, _ := s.ds("GET", "shared/0?offset=-1", ""); code != 200 || body != "from kafka;" {
		t.Fatalf("DS read of a Kafka record: %d %q, want its value", code, body)
	}

	if code, body, _ := s.ds("POST", "shared/0", "from ds;", "Content-Type", "text/plain"); code != 200 && code != 204 {
		t.Fatalf("DS append: %d %s", code, body)
	}
	if code, body, _ := s.ds("POST", "shared/0", "idempotent;", "Content-Type", "text/plain",
		"Producer-Id", "w", "Producer-Epoch", "0", "Producer-Seq", "0"); code != 200 && code != 204 {
		t.Fatalf("DS idempotent append: %d %s", code, body)
	}
	if code, body, _ := s.ds("POST", "shared/0", "", "Content-Type", "text/plain", "Stream-Closed", "true"); code != 200 && code != 204 {
		t.Fatalf("DS close: %d %s", code, body)
	}
	if code, body, _ := s.ds("GET", "shared/0?offset=-1", ""); code != 200 || body != "from kafka;from ds;idempotent;" {
		t.Fatalf("DS read of the stream: %d %q", code, body)
	}
	code, body := s.s2("GET", "shared/0", "?seq_num=1&count=3", nil)
	var read struct{ Records []s2Record }
	if err := json.Unmarshal(body, &read); code != 200 || err != nil || len(read.Records) != 3 {
		t.Fatalf("S2 read: %d %s", code, body)
	}

	cons := s.admin(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"shared": {0: kgo.NewOffset().At(1)}}))
	var recs []*kgo.Record
	for len(recs) < 3 {
		fs := cons.PollFetches(ctxT(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, fs.Records()...)
	}
	hdrs := func(r *kgo.Record) map[string]string {
		m := map[string]string{}
		for _, h := range r.Headers {
			m[h.Key] = string(h.Value)
		}
		return m
	}
	for i, r := range recs {
		if r.Offset != int64(i+1) || r.Key != nil || r.Timestamp.UnixMilli() != int64(read.Records[i].Timestamp) {
			t.Fatalf("record %d through Kafka: offset %d key %v ts %d (S2: seq %d ts %d)", i, r.Offset, r.Key,
				r.Timestamp.UnixMilli(), read.Records[i].SeqNum, read.Records[i].Timestamp)
		}
	}
	if string(recs[0].Value) != "from ds;" || len(recs[0].Headers) != 0 {
		t.Fatalf("a Durable Streams append through Kafka: value %q headers %v", recs[0].Value, recs[0].Headers)
	}
	if h := hdrs(recs[1]); string(recs[1].Value) != "idempotent;" || h["ds-producer-id"] != "w" || h["ds-producer-epoch"] != "0" || h["ds-producer-seq"] != "0" {
		t.Fatalf("an idempotent Durable Streams append through Kafka: value %q headers %v", recs[1].Value, recs[1].Headers)
	}
	if h := hdrs(recs[2]); len(recs[2].Value) != 0 || h["ds-close"] != "true" {
		t.Fatalf("the close marker through Kafka: value %q headers %v", recs[2].Value, recs[2].Headers)
	}
}

// The edges of the mapping, both ways: a Kafka record's own timestamp (an
// hour old) reads back through S2 as given, and an S2 append's timestamp
// is the Kafka record's; an empty key is the header kafka.key with an
// empty value and a null key no header, both ways; a null value is an
// empty body, and an empty-valued header stays a header.
func TestCrossFaceMappingEdges(t *testing.T) {
	s := startStar(t, true)
	createTopic(t, s.admin(), "edges", 1)
	p := s.admin(kgo.DefaultProduceTopic("edges"))
	past := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	recs := []*kgo.Record{
		{Key: []byte{}, Value: []byte("empty key"), Timestamp: past},
		{Value: nil, Timestamp: past.Add(time.Millisecond), Headers: []kgo.RecordHeader{{Key: "h", Value: nil}}},
	}
	if err := p.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	code, body := s.s2("GET", "edges/0", "?seq_num=0", nil)
	var read struct{ Records []s2Record }
	if err := json.Unmarshal(body, &read); code != 200 || err != nil || len(read.Records) != 2 {
		t.Fatalf("S2 read: %d %s", code, body)
	}
	// kgo produces idempotently: the first record carries the producer's
	// mark (starlog-producer…, TestCrossFace), which is not the mapping's.
	for i := range read.Records {
		read.Records[i].Headers = slices.DeleteFunc(read.Records[i].Headers, func(h [2]string) bool { return strings.HasPrefix(h[0], "starlog-producer") })
	}
	if r := read.Records[0]; r.Body != "empty key" || len(r.Headers) != 1 || r.Headers[0] != [2]string{kafka.HeaderKey, ""} ||
		r.Timestamp != uint64(past.UnixMilli()) {
		t.Fatalf("S2 read of a Kafka record with an empty key at %d: %+v", past.UnixMilli(), r)
	}
	if r := read.Records[1]; r.Body != "" || len(r.Headers) != 1 || r.Headers[0] != [2]string{"h", ""} ||
		r.Timestamp != uint64(past.UnixMilli())+1 {
		t.Fatalf("S2 read of a Kafka record with a null key and value at %d: %+v", past.UnixMilli()+1, r)
	}

	at := uint64(past.Add(time.Second).UnixMilli())
	records := []map[string]any{
		{"headers": [][2]string{{kafka.HeaderKey, ""}, {"e", ""}}, "body": "s2 empty key", "timestamp": at},
		{"body": "", "timestamp": at + 1},
	}
	if code, body := s.s2("POST", "edges/0", "", map[string]any{"records": records}); code != 200 {
		t.Fatalf("S2 append: %d %s", code, body)
	}
	cons := s.admin(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"edges": {0: kgo.NewOffset().At(2)}}))
	var got []*kgo.Record
	for len(got) < 2 {
		fs := cons.PollFetches(ctxT(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got = append(got, fs.Records()...)
	}
	a, b := got[0], got[1]
	if a.Offset != 2 || a.Key == nil || len(a.Key) != 0 || string(a.Value) != "s2 empty key" || len(a.Headers) != 1 ||
		a.Headers[0].Key != "e" || len(a.Headers[0].Value) != 0 || a.Timestamp.UnixMilli() != int64(at) {
		t.Fatalf("an S2 record with an empty kafka.key at %d through Kafka: offset %d key %v value %q headers %v ts %d",
			at, a.Offset, a.Key, a.Value, a.Headers, a.Timestamp.UnixMilli())
	}
	if b.Offset != 3 || b.Key != nil || len(b.Value) != 0 || len(b.Headers) != 0 || b.Timestamp.UnixMilli() != int64(at)+1 {
		t.Fatalf("an S2 record with no headers and an empty body at %d through Kafka: offset %d key %v value %q headers %v ts %d",
			at+1, b.Offset, b.Key, b.Value, b.Headers, b.Timestamp.UnixMilli())
	}
}
