package server_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// FuzzAppendBody posts arbitrary bodies, content types and formats to the
// real handler over a real node: the answer is never a 5xx, a rejection
// leaves the stream exactly as it was, and an ack advances the tail by the
// batch.
func FuzzAppendBody(f *testing.F) {
	pb, _ := api.EncodeAppendProto(batch("p", 3))
	seeds := []struct {
		body   string
		ct     uint8
		format string
	}{
		{`{"records":[{"body":"a"}]}`, 0, ""},
		{`{"records":[{"headers":[["k","v"]],"body":"a"}],"match_seq_num":0}`, 0, "raw"},
		{`{"records":[{"body":"AAH/"}]}`, 0, "base64"},
		{`{"records":[{"headers":[["","fence"]],"body":"tok"}]}`, 0, ""},
		{`{"records":[{"body":"x"}],"fencing_token":"tok"}`, 0, ""},
		{`{"records":[]}`, 0, ""},
		{`{"records":[{"body":`, 0, ""},
		{string(pb), 1, ""},
		{"\x0a\x02\x1a\x00", 1, ""},
		{"\xff", 1, ""},
		{"", 2, ""},
		{"\x00\x00\x01\x00", 3, ""},
		{string(api.AppendFrame(nil, 0, pb)), 3, ""},
		{string(api.AppendFrame(api.AppendFrame(nil, 0, pb), 0x40, []byte("junk"))), 3, ""},
	}
	for _, s := range seeds {
		f.Add([]byte(s.body), s.ct, s.format)
	}
	e := newEnv(f)
	e.setupBasin("fuzz-basin")
	cts := []string{"application/json", "application/protobuf", "", "s2s/proto", "text/plain"}
	f.Fuzz(func(t *testing.T, body []byte, ct uint8, format string) {
		before := e.tailOf(t, "fuzz-basin", "f")
		req := httptest.NewRequest("POST", "/v1/streams/f/records", bytes.NewReader(body))
		req.Header.Set("s2-basin", "fuzz-basin")
		if c := cts[int(ct)%len(cts)]; c != "" {
			req.Header.Set("Content-Type", c)
		}
		if format != "" {
			req.Header.Set("s2-format", format)
		}
		w := httptest.NewRecorder()
		e.srv.ServeHTTP(w, req)
		after := e.tailOf(t, "fuzz-basin", "f")
		if w.Code >= 500 {
			t.Fatalf("status %d: %s", w.Code, w.Body.Bytes())
		}
		if req.Header.Get("Content-Type") == "s2s/proto" && w.Code == http.StatusOK {
			// A session: acks, maybe a terminal frame; the tail moves by
			// exactly the acknowledged batches.
			fr := api.NewFrameReader(bytes.NewReader(w.Body.Bytes()))
			defer fr.Close()
			end := before.SeqNum
			for {
				f, err := fr.Next()
				if err != nil {
					break
				}
				if f.Terminal {
					if f.Status >= 500 {
						t.Fatalf("terminal frame %d: %s", f.Status, f.Payload)
					}
					break
				}
				ack, aerr := api.DecodeAppendAckProto(f.Payload)
				if aerr != nil || ack.Start.SeqNum != end {
					t.Fatalf("session ack %+v (%v) after %d", ack, aerr, end)
				}
				end = ack.End.SeqNum
			}
			if after.SeqNum != end {
				t.Fatalf("session acked up to %d, tail %d", end, after.SeqNum)
			}
			return
		}
		if w.Code != http.StatusOK {
			if after != before {
				t.Fatalf("rejected (%d %s) but the tail moved %d → %d", w.Code, w.Body.Bytes(), before.SeqNum, after.SeqNum)
			}
			return
		}
		ack, err := api.DecodeAppendAckJSON(w.Body.Bytes())
		if err != nil {
			ack, err = api.DecodeAppendAckProto(w.Body.Bytes())
		}
		if err != nil || ack.Start.SeqNum != before.SeqNum || after.SeqNum != ack.End.SeqNum {
			t.Fatalf("ack %+v (%v): tail %d → %d", ack, err, before.SeqNum, after.SeqNum)
		}
	})
}
