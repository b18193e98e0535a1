package kafka_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/starlog/starlog/star/kafka"
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
	want := [][2]string{{kafka.HeaderKey, "user-7"}, {"trace", "abc"}}
	if got.Body != "from kafka" || len(got.Headers) != 2 || got.Headers[0] != want[0] || got.Headers[1] != want[1] ||
		got.Timestamp != uint64(rec.Timestamp.UnixMilli()) {
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
