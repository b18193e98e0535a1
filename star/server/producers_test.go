package server_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// producerJSON is a unary append body of n records, the first marked.
func producerJSON(id string, epoch, seq uint64, prefix string, n int) string {
	recs := make([]map[string]any, n)
	for i := range n {
		recs[i] = map[string]any{"body": fmt.Sprintf("%s-%d", prefix, i)}
	}
	recs[0]["headers"] = [][2]string{{api.HeaderProducer, id}, {api.HeaderProducerEpoch, fmt.Sprint(epoch)}, {api.HeaderProducerSeq, fmt.Sprint(seq)}}
	b, _ := json.Marshal(map[string]any{"records": recs})
	return string(b)
}

func producerInput(id string, epoch, seq uint64, prefix string, n int) *api.AppendInput {
	in := batch(prefix, n)
	in.Records[0].Headers = api.ProducerHeaders(api.ProducerMark{ID: id, Epoch: epoch, Seq: seq})
	return in
}

// Unary appends: a retry gets the original ack body; a gap and a stale
// epoch are 409 with the number in the body; a malformed mark is 422.
func TestProducerUnary(t *testing.T) {
	e := newEnv(t)
	e.setupBasin("prod-basin")
	first := e.appendJSON("prod-basin", "s", producerJSON("p", 2, 0, "a", 3), "Content-Type", "application/json")
	want(t, first, 200, "")
	retry := e.appendJSON("prod-basin", "s", producerJSON("p", 2, 0, "a", 3), "Content-Type", "application/json")
	want(t, retry, 200, "")
	var a, b api.AppendAck
	if err := json.Unmarshal(first.body, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(retry.body, &b); err != nil {
		t.Fatal(err)
	}
	if a.Start != b.Start || a.End != b.End || a.End.SeqNum != 3 {
		t.Fatalf("retry acked %s, the original %s", retry.body, first.body)
	}

	gap := e.appendJSON("prod-basin", "s", producerJSON("p", 2, 4, "g", 1), "Content-Type", "application/json")
	want(t, gap, 409, api.CodeProducerSeqGap)
	if pe := api.ParseError(gap.status, gap.body); func() bool { n, ok := pe.ProducerExpectedSeq(); return !ok || n != 1 }() {
		t.Fatalf("gap body %s, want expected_seq 1", gap.body)
	}
	stale := e.appendJSON("prod-basin", "s", producerJSON("p", 1, 1, "s", 1), "Content-Type", "application/json")
	want(t, stale, 409, api.CodeProducerEpochStale)
	if pe := api.ParseError(stale.status, stale.body); func() bool { n, ok := pe.ProducerCurrentEpoch(); return !ok || n != 2 }() {
		t.Fatalf("stale body %s, want current_epoch 2", stale.body)
	}
	bad := `{"records":[{"headers":[["starlog-producer-seq","1"]],"body":"x"}]}`
	want(t, e.appendJSON("prod-basin", "s", bad, "Content-Type", "application/json"), 422, api.CodeInvalid)
	if tail := e.tail("prod-basin", "s"); tail.SeqNum != 3 {
		t.Fatalf("tail %d, want 3: only the first batch applied", tail.SeqNum)
	}
}

// An S2S session pipelines a producer's batches; retries sent while their
// originals may still be in flight get the originals' acks, in order, and
// append nothing; a gap ends the session with its 409.
func TestProducerSession(t *testing.T) {
	e := newEnv(t)
	e.setupBasin("prod-basin")
	s := e.openAppendSession("prod-basin", "s", api.CompressionNone)
	const n = 20
	sent := 0
	for i := range n {
		s.send(t, producerInput("p", 0, uint64(i), fmt.Sprint(i), 2))
		sent++
		if i%4 == 3 { // a retry of the batch before, right behind it
			s.send(t, producerInput("p", 0, uint64(i-1), fmt.Sprint(i-1), 2))
			sent++
		}
	}
	acks := map[uint64][]api.AppendAck{}
	seqOf := func(k int) uint64 { // the producer seq of the k-th input
		i := 0
		for j := range n {
			if i == k {
				return uint64(j)
			}
			i++
			if j%4 == 3 {
				if i == k {
					return uint64(j - 1)
				}
				i++
			}
		}
		return 0
	}
	for k := range sent {
		a, terr := s.ack(t)
		if terr != nil {
			t.Fatalf("ack %d: %v", k, terr)
		}
		acks[seqOf(k)] = append(acks[seqOf(k)], a)
	}
	for i := range uint64(n) {
		as := acks[i]
		if as[0].Start.SeqNum != 2*i || as[0].End.SeqNum != 2*i+2 {
			t.Fatalf("seq %d acked %+v", i, as[0])
		}
		for _, r := range as[1:] {
			if r.Start != as[0].Start || r.End != as[0].End {
				t.Fatalf("seq %d: retry acked %+v, the original %+v", i, r, as[0])
			}
		}
	}
	s.send(t, producerInput("p", 0, n+1, "gap", 1))
	if _, terr := s.ack(t); terr == nil || terr.Status != 409 || terr.Code != api.CodeProducerSeqGap {
		t.Fatalf("gap in a session: %v, want 409 %s", terr, api.CodeProducerSeqGap)
	} else if x, ok := terr.ProducerExpectedSeq(); !ok || x != n {
		t.Fatalf("gap in a session names %d (%v), want %d", x, ok, n)
	}
	if tail := e.tail("prod-basin", "s"); tail.SeqNum != 2*n {
		t.Fatalf("tail %d, want %d: each batch once", tail.SeqNum, 2*n)
	}
}

// An encrypted stream's headers are sealed before the sequencer sees
// them, so a producer mark there could not be honoured: it is refused
// with 422, not silently appended without deduplication.
func TestProducerOnEncryptedStreamIsRefused(t *testing.T) {
	e := newEnv(t)
	want(t, e.call("POST", "basins", []byte(`{"basin":"enc-prod","config":{"stream_cipher":"aes-256-gcm","create_stream_on_append":true}}`)), 201, "")
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	r := e.appendJSON("enc-prod", "s", producerJSON("p", 0, 0, "a", 1), "Content-Type", "application/json", "s2-encryption-key", key)
	want(t, r, 422, api.CodeInvalid)
	if !strings.Contains(string(r.body), "encrypted") {
		t.Fatalf("refusal %s does not say why", r.body)
	}
	s := e.openAppendSessionWith("enc-prod", "s", "s2-encryption-key", key)
	s.send(t, producerInput("p", 0, 0, "a", 1))
	if _, terr := s.ack(t); terr == nil || terr.Status != 422 {
		t.Fatalf("a marked batch in a session on an encrypted stream: %v, want 422", terr)
	}
	want(t, e.appendJSON("enc-prod", "s", textRecords("plain", 1), "Content-Type", "application/json", "s2-encryption-key", key), 200, "")
	if tail := e.tail("enc-prod", "s"); tail.SeqNum != 1 {
		t.Fatalf("tail %d, want 1", tail.SeqNum)
	}
}

// openAppendSessionWith is openAppendSession (uncompressed) with extra
// request headers, name then value.
func (e *env) openAppendSessionWith(basin, stream string, headers ...string) *s2sAppend {
	e.t.Helper()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", e.base+"/v1/streams/"+stream+"/records", pr)
	req.Header.Set("s2-basin", basin)
	req.Header.Set("Content-Type", "s2s/proto")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := e.h2.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		e.t.Fatalf("append session: %s %s", res.Status, b)
	}
	s := &s2sAppend{pw: pw, fw: api.NewFrameWriter(pw, api.CompressionNone), res: res, fr: api.NewFrameReader(res.Body)}
	e.t.Cleanup(func() { pw.Close(); res.Body.Close() })
	return s
}
