package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/starlog/starlog/shared/api/s2pb"
)

// Every decoder has a fuzz target: no panic, bounded memory, and whatever
// decodes successfully re-encodes to something that decodes to the same
// value. Seeds run in plain `go test`; `make fuzz` explores.

func formatOf(b64 bool) Format {
	if b64 {
		return FormatBase64
	}
	return FormatRaw
}

func FuzzDecodeAppendJSON(f *testing.F) {
	f.Add([]byte(`{"records":[{"timestamp":1,"headers":[["k","v"]],"body":"hello"}],"match_seq_num":0,"fencing_token":"w1"}`), false)
	f.Add([]byte(`{"records":[{"headers":[["AA==","/w=="]],"body":"AP8="}]}`), true)
	f.Add([]byte(`{"records":[{"headers":[["","fence"]],"body":"tok"}]}`), false)
	f.Add([]byte(`{"records":[{"headers":[["","trim"]],"body":"AAAAAAAAAAU="}]}`), true)
	f.Add([]byte(`{"records":[{"body":"\u00ff\ud800"}]}`), false)
	f.Add([]byte(`{"records":[]}`), false)
	f.Add([]byte(`{"records":[{"headers":[["a"]]}]}`), false)
	f.Add([]byte(`{"records":[{"timestamp":-1}]}`), false)
	f.Fuzz(func(t *testing.T, data []byte, b64 bool) {
		fm := formatOf(b64)
		in, err := DecodeAppendJSON(data, fm)
		if err != nil {
			if err.Status != 400 && err.Status != 422 {
				t.Fatalf("unexpected status %d", err.Status)
			}
			return
		}
		if verr := ValidateAppendInput(in); verr != nil {
			t.Fatalf("decoded input fails validation: %v", verr)
		}
		enc, eerr := EncodeAppendJSON(in, fm)
		if eerr != nil {
			t.Fatalf("re-encode: %v", eerr)
		}
		back, err := DecodeAppendJSON(enc, fm)
		if err != nil || !equalInput(in, back) {
			t.Fatalf("re-decode: %v\n%+v\n%+v", err, in, back)
		}
		// Accepted text is kept exactly: a U+FFFD in what was decoded must
		// have been in the request (literally or escaped), never put there
		// in place of bytes that were not text.
		if fm == FormatRaw && containsFFFD(in) && !bytes.Contains(data, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(data), []byte(`\ufffd`)) {
			t.Fatalf("decoding replaced bytes with U+FFFD: %q → %+v", data, in)
		}
	})
}

func containsFFFD(in *AppendInput) bool {
	has := func(b []byte) bool { return bytes.ContainsRune(b, '\uFFFD') }
	if in.FencingToken != nil && strings.ContainsRune(*in.FencingToken, '\uFFFD') {
		return true
	}
	for _, r := range in.Records {
		if has(r.Body) {
			return true
		}
		for _, h := range r.Headers {
			if has(h.Name) || has(h.Value) {
				return true
			}
		}
	}
	return false
}

// Any bytes in a record: an append in raw format encodes only text and
// decodes it exactly; a read in raw format replaces what is not text with
// U+FFFD (S2's lossy raw reads) and nothing else; base64 keeps everything.
func FuzzJSONRecordBytes(f *testing.F) {
	f.Add([]byte("plain"), []byte("k"))
	f.Add([]byte{0xff, 'a', 0xed, 0xa0, 0x80}, []byte{0xc3})
	f.Add([]byte("\ufffd\"\\\u2028"), []byte{})
	f.Fuzz(func(t *testing.T, body, name []byte) {
		in := &AppendInput{Records: []Record{{Headers: []Header{{Name: name, Value: body}}, Body: body}}}
		text := utf8.Valid(body) && utf8.Valid(name)
		enc, err := EncodeAppendJSON(in, FormatRaw)
		if (err == nil) != text {
			t.Fatalf("raw append encode of %q/%q: %v", body, name, err)
		}
		for _, fm := range []Format{FormatRaw, FormatBase64} {
			if fm == FormatBase64 {
				if enc, err = EncodeAppendJSON(in, fm); err != nil {
					t.Fatal(err)
				}
			} else if err != nil {
				continue
			}
			back, derr := DecodeAppendJSON(enc, fm)
			if derr != nil && derr.Code != CodeInvalid {
				t.Fatalf("format %v: %s → %v", fm, enc, derr)
			}
			if derr == nil && !equalInput(in, back) {
				t.Fatalf("format %v: append round trip changed %+v into %+v", fm, in, back)
			}
		}
		rb := &ReadBatch{Records: []Record{{SeqNum: 1, Timestamp: Uint64(2), Headers: in.Records[0].Headers, Body: body}}}
		for _, fm := range []Format{FormatRaw, FormatBase64} {
			back, derr := DecodeReadBatchJSON(EncodeReadBatchJSON(rb, fm), fm)
			if derr != nil {
				t.Fatalf("format %v: read batch: %v", fm, derr)
			}
			want := rb
			if fm == FormatRaw {
				lossy := func(b []byte) []byte { return []byte(toValidUTF8(b)) }
				want = &ReadBatch{Records: []Record{{SeqNum: 1, Timestamp: Uint64(2), Headers: []Header{{Name: lossy(name), Value: lossy(body)}}, Body: lossy(body)}}}
			}
			if !equalBatch(want, back) {
				t.Fatalf("format %v: read round trip gave %+v, want %+v", fm, back, want)
			}
		}
	})
}

func FuzzDecodeAppendProto(f *testing.F) {
	seed := func(m *s2pb.AppendInput) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&s2pb.AppendInput{Records: []*s2pb.AppendRecord{{Timestamp: proto.Uint64(5), Headers: []*s2pb.Header{{Name: []byte("k"), Value: []byte{0, 0xff}}}, Body: []byte("b")}}, MatchSeqNum: proto.Uint64(0), FencingToken: proto.String("")})
	seed(&s2pb.AppendInput{Records: []*s2pb.AppendRecord{{Headers: []*s2pb.Header{{Value: []byte("trim")}}, Body: make([]byte, 8)}}})
	seed(&s2pb.AppendInput{})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := DecodeAppendProto(data)
		if err != nil {
			if err.Status != 400 && err.Status != 422 {
				t.Fatalf("unexpected status %d", err.Status)
			}
			return
		}
		enc, eerr := EncodeAppendProto(in)
		if eerr != nil {
			t.Fatalf("re-encode: %v", eerr)
		}
		back, err := DecodeAppendProto(enc)
		if err != nil || !equalInput(in, back) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzDecodeReadBatch(f *testing.F) {
	f.Add([]byte(`{"records":[{"seq_num":1,"timestamp":2,"headers":[["k","v"]],"body":"x"}],"tail":{"seq_num":2,"timestamp":2}}`), false, false)
	f.Add([]byte(`{"records":[{"seq_num":1,"timestamp":2,"body":"AP8="}]}`), true, false)
	f.Add(EncodeReadBatchProto(&ReadBatch{Records: []Record{{SeqNum: 3, Timestamp: Uint64(4), Body: []byte{1}}}, Tail: &StreamPosition{}}), false, true)
	f.Fuzz(func(t *testing.T, data []byte, b64, isProto bool) {
		fm := formatOf(b64)
		if isProto {
			b, err := DecodeReadBatchProto(data)
			if err != nil {
				return
			}
			back, err := DecodeReadBatchProto(EncodeReadBatchProto(b))
			if err != nil || !equalBatch(b, back) {
				t.Fatalf("proto re-decode: %v", err)
			}
			return
		}
		b, err := DecodeReadBatchJSON(data, fm)
		if err != nil {
			return
		}
		back, err := DecodeReadBatchJSON(EncodeReadBatchJSON(b, fm), fm)
		if err != nil || !equalBatch(b, back) {
			t.Fatalf("json re-decode: %v\n%+v\n%+v", err, b, back)
		}
	})
}

func FuzzDecodeAppendAck(f *testing.F) {
	a := AppendAck{Start: StreamPosition{1, 2}, End: StreamPosition{3, 4}, Tail: StreamPosition{5, 6}}
	f.Add(EncodeAppendAckJSON(a), false)
	f.Add(EncodeAppendAckProto(a), true)
	f.Add([]byte(`{"start":{}}`), false)
	f.Fuzz(func(t *testing.T, data []byte, isProto bool) {
		if isProto {
			a, err := DecodeAppendAckProto(data)
			if err != nil {
				return
			}
			if back, err := DecodeAppendAckProto(EncodeAppendAckProto(a)); err != nil || back != a {
				t.Fatalf("proto re-decode %+v %v", back, err)
			}
			return
		}
		a, err := DecodeAppendAckJSON(data)
		if err != nil {
			return
		}
		if back, err := DecodeAppendAckJSON(EncodeAppendAckJSON(a)); err != nil || back != a {
			t.Fatalf("json re-decode %+v %v", back, err)
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	for _, c := range []Compression{CompressionNone, CompressionGzip, CompressionZstd} {
		buf.Reset()
		w := NewFrameWriter(&buf, c)
		_ = w.WriteMessage([]byte("small"))
		_ = w.WriteMessage(bytes.Repeat([]byte("abc"), 600))
		_ = w.WriteTerminal(SeqNumMismatch(3))
		w.Close()
		f.Add(bytes.Clone(buf.Bytes()))
	}
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0x00})
	f.Add([]byte{0, 0, 1, 0x1f})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr := NewFrameReader(bytes.NewReader(data))
		defer fr.Close()
		for {
			fm, err := fr.Next()
			if err != nil {
				var e *Error
				if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) && (!errors.As(err, &e) || e.Code != CodeBadFrame) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(fm.Payload) > MaxFramePayload {
				t.Fatalf("payload of %d bytes", len(fm.Payload))
			}
			// Re-encode uncompressed and read back.
			payload := bytes.Clone(fm.Payload)
			flag := byte(0)
			if fm.Terminal {
				flag = flagTerminal
				payload = append([]byte{byte(fm.Status >> 8), byte(fm.Status)}, payload...)
			}
			if fm.ReconnectAdvised {
				flag |= flagReconnect
			}
			if len(payload) > MaxFramePayload {
				continue // a terminal frame that was compressed may not fit again
			}
			back, err := NewFrameReader(bytes.NewReader(AppendFrame(nil, flag, payload))).Next()
			if err != nil || back.Terminal != fm.Terminal || back.Status != fm.Status || back.ReconnectAdvised != fm.ReconnectAdvised || !bytes.Equal(back.Payload, fm.Payload) {
				t.Fatalf("re-read %+v %v", back, err)
			}
			_ = fm.Err()
		}
	})
}

func FuzzParseSSE(f *testing.F) {
	var buf bytes.Buffer
	w := NewSSEWriter(&buf, FormatRaw)
	_ = w.Batch(&ReadBatch{Records: []Record{{SeqNum: 1, Timestamp: Uint64(2), Body: []byte("x")}}}, LastEventID{1, 1, 9})
	_ = w.Ping(Ping{Timestamp: 1, Tail: StreamPosition{2, 2}})
	_ = w.Error(Unavailable("bye"))
	_ = w.Done()
	f.Add(buf.Bytes())
	f.Add([]byte("\xEF\xBB\xBF: c\r\nevent: a\rid: 1\r\ndata: x\ndata\n\n"))
	f.Add([]byte("data: unterminated"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := NewSSEReader(bytes.NewReader(data), 4096)
		for {
			ev, err := p.Next()
			if err != nil {
				return
			}
			if len(ev.Data) > 4096 {
				t.Fatalf("event of %d bytes", len(ev.Data))
			}
			for _, fm := range []Format{FormatRaw, FormatBase64} {
				re, derr := DecodeReadEvent(ev, fm)
				if derr == nil && re.Kind == ReadEventBatch {
					back, err := DecodeReadBatchJSON(EncodeReadBatchJSON(re.Batch, fm), fm)
					if err != nil || !equalBatch(back, re.Batch) {
						t.Fatalf("batch re-decode: %v", err)
					}
				}
			}
			// Re-encode the event alone and parse it back.
			var out bytes.Buffer
			if err := NewSSEWriter(&out, FormatRaw).Event(ev); err != nil {
				t.Fatalf("re-encode %+v: %v", ev, err)
			}
			back, err := NewSSEReader(&out, 8192).Next()
			if err != nil || back.Event != ev.Event || back.ID != ev.ID || !bytes.Equal(back.Data, ev.Data) {
				t.Fatalf("re-parse %+v → %q → %+v %v", ev, out.String(), back, err)
			}
		}
	})
}

func FuzzParseReadQuery(f *testing.F) {
	for _, s := range []string{"", "seq_num=5&count=10", "timestamp=1&until=2&wait=3", "tail_offset=9&clamp=true&bytes=100",
		"seq_num=1&timestamp=2", "count=5000&wait=600", "clamp=maybe", "seq_num=1&seq_num=1", "until=%zz"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, raw string, session bool) {
		q, _ := url.ParseQuery(raw) // a partly malformed query still yields its good pairs
		mode := ReadUnary
		if session {
			mode = ReadSession
		}
		r, err := ParseReadQuery(q, mode)
		if err != nil {
			if err.Code != CodeBadQuery && err.Code != CodeInvalid {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if mode == ReadUnary {
			if r.Count == nil || *r.Count > MaxUnaryReadCount || r.Bytes == nil || *r.Bytes > MaxUnaryReadBytes || (r.Wait != nil && *r.Wait > MaxUnaryReadWait) {
				t.Fatalf("unary caps not applied: %+v", r)
			}
		}
		if r.From == FromTimestamp && r.Until != nil && r.Value >= *r.Until {
			t.Fatalf("until not after start: %+v", r)
		}
		back, err := ParseReadQuery(r.Query(), mode)
		if err != nil || !reflect.DeepEqual(back, r) {
			t.Fatalf("re-parse %+v → %s → %+v %v", r, r.Query().Encode(), back, err)
		}
	})
}

func FuzzParseListQuery(f *testing.F) {
	f.Add("prefix=a&start_after=b&limit=10")
	f.Add("limit=99999999999999999999")
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw)
		r, err := ParseListQuery(q)
		if err != nil {
			return
		}
		if r.Limit < 1 || r.Limit > MaxListLimit {
			t.Fatalf("limit %d", r.Limit)
		}
		if back, err := ParseListQuery(r.Query()); err != nil || back != r {
			t.Fatalf("re-parse %+v %v", back, err)
		}
	})
}

func FuzzParseLastEventID(f *testing.F) {
	for _, s := range []string{"1,2,3", "0,0,0", "18446744073709551615,1,1", "1,2", "a,b,c", "01,2,3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseLastEventID(s)
		if err != nil {
			if err.Code != CodeBadHeader {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if back, err := ParseLastEventID(id.String()); err != nil || back != id {
			t.Fatalf("re-parse %+v %v", back, err)
		}
	})
}

func FuzzStreamConfigJSON(f *testing.F) {
	for _, s := range []string{
		`{"storage_class":"express","retention_policy":{"age":3600},"timestamping":{"mode":"arrival","uncapped":true},"delete_on_empty":{"min_age_secs":60}}`,
		`{"retention_policy":{"infinite":{}}}`,
		`{"retention_policy":{"age":0}}`,
		`{"storage_class":null,"timestamping":{"uncapped":null},"delete_on_empty":null}`,
		`{"retention_policy":{"age":1,"infinite":{}}}`,
		``, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := DecodeStreamConfig(data); err == nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("decoded config invalid: %v", err)
			}
			enc, merr := json.Marshal(c)
			if merr != nil {
				t.Fatal(merr)
			}
			back, err := DecodeStreamConfig(enc)
			if err != nil || !reflect.DeepEqual(back, c) {
				t.Fatalf("re-decode %s: %+v %v", enc, back, err)
			}
			eff := c.Resolve(&c)
			if eff.StorageClass == "" || eff.TimestampingMode == "" || (!eff.Retention.Infinite && eff.Retention.AgeSecs == 0) {
				t.Fatalf("resolved config incomplete: %+v", eff)
			}
		} else if err.Code != CodeBadJSON && err.Code != CodeInvalid {
			t.Fatalf("unexpected error %v", err)
		}
		if r, err := DecodeStreamReconfiguration(data); err == nil {
			enc, merr := json.Marshal(r)
			if merr != nil {
				t.Fatal(merr)
			}
			back, err := DecodeStreamReconfiguration(enc)
			if err != nil || !reflect.DeepEqual(back, r) {
				t.Fatalf("re-decode reconfiguration %s: %+v %v", enc, back, err)
			}
			next := DefaultStreamConfig().StreamConfig().Reconfigure(r)
			if err := next.Validate(); err != nil {
				t.Fatalf("valid reconfiguration produced invalid config: %v", err)
			}
		}
	})
}

func FuzzBasinConfigJSON(f *testing.F) {
	for _, s := range []string{
		`{"default_stream_config":{"storage_class":"express"},"create_stream_on_append":true,"create_stream_on_read":false}`,
		`{"default_stream_config":null,"create_stream_on_append":null,"stream_cipher":null}`,
		`{"stream_cipher":"aegis-256"}`,
		`{"basin":"my-basin-1","config":{"create_stream_on_read":true}}`,
		`{"stream":"a/b","config":{"retention_policy":{"infinite":{}}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := DecodeBasinConfig(data); err == nil {
			enc, _ := json.Marshal(c)
			if back, err := DecodeBasinConfig(enc); err != nil || !reflect.DeepEqual(back, c) {
				t.Fatalf("re-decode %s: %+v %v", enc, back, err)
			}
		}
		if r, err := DecodeBasinReconfiguration(data); err == nil {
			enc, _ := json.Marshal(r)
			back, err := DecodeBasinReconfiguration(enc)
			if err != nil || !reflect.DeepEqual(back, r) {
				t.Fatalf("re-decode reconfiguration %s: %+v %v", enc, back, err)
			}
			next := BasinConfig{}.Reconfigure(r)
			if err := next.Validate(); err != nil {
				t.Fatalf("valid reconfiguration produced invalid config: %v", err)
			}
		}
		if r, err := DecodeCreateBasinRequest(data); err == nil {
			if ValidateBasinName(r.Basin) != nil {
				t.Fatalf("invalid basin name %q accepted", r.Basin)
			}
		}
		if r, err := DecodeCreateStreamRequest(data); err == nil {
			if ValidateStreamName(r.Stream) != nil {
				t.Fatalf("invalid stream name %q accepted", r.Stream)
			}
		}
		_, _ = DecodeEnsureBasinRequest(data)
		_, _ = ParseStreamConfigHeader(string(data))
	})
}

func FuzzParseError(f *testing.F) {
	for _, e := range []*Error{SeqNumMismatch(4), FencingTokenMismatch("t"), RangeNotSatisfiable(StreamPosition{1, 2}), Invalid("x"), Unavailable("y")} {
		f.Add(uint16(e.Status), e.JSON())
	}
	f.Add(uint16(502), []byte("<html>"))
	f.Add(uint16(412), []byte(`{"seq_num_mismatch":"x"}`))
	f.Fuzz(func(t *testing.T, status uint16, body []byte) {
		e := ParseError(int(status), body)
		if e == nil || e.Status != int(status) || e.Code == "" {
			t.Fatalf("parsed %+v", e)
		}
		if len(e.Message) > 3*maxParsedMessage && !json.Valid(body) {
			t.Fatalf("message of %d bytes from a non-JSON body", len(e.Message))
		}
		back := ParseError(e.Status, e.JSON())
		if back.Status != e.Status || back.Code != e.Code || back.Message != e.Message || !reflect.DeepEqual(back.Body, e.Body) {
			t.Fatalf("re-parse %+v → %s → %+v", e, e.JSON(), back)
		}
		_ = e.Definite()
		_ = e.Retryable()
		_ = strings.TrimSpace(e.Error())
	})
}
