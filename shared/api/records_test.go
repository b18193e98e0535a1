package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/starlog/starlog/shared/api/s2pb"
)

// ---- generators and comparison -------------------------------------------

func genBytes(t *rapid.T, label string, utf8Only bool, min, max int) []byte {
	if utf8Only {
		return []byte(rapid.StringN(min, max, max*4).Draw(t, label))
	}
	return rapid.SliceOfN(rapid.Byte(), min, max).Draw(t, label)
}

func genRecord(t *rapid.T, utf8Only, sequenced bool) Record {
	var r Record
	if sequenced {
		r.SeqNum = rapid.Uint64().Draw(t, "seq")
		r.Timestamp = Uint64(rapid.Uint64().Draw(t, "ts"))
	} else if rapid.Bool().Draw(t, "hasTS") {
		r.Timestamp = Uint64(rapid.Uint64().Draw(t, "ts"))
	}
	n := rapid.IntRange(0, 3).Draw(t, "nheaders")
	for i := 0; i < n; i++ {
		r.Headers = append(r.Headers, Header{
			Name:  genBytes(t, "hname", utf8Only, 1, 8),
			Value: genBytes(t, "hvalue", utf8Only, 0, 8),
		})
	}
	r.Body = genBytes(t, "body", utf8Only, 0, 64)
	return r
}

func genAppendInput(t *rapid.T, utf8Only bool) *AppendInput {
	in := &AppendInput{}
	n := rapid.IntRange(1, 5).Draw(t, "nrecords")
	for i := 0; i < n; i++ {
		in.Records = append(in.Records, genRecord(t, utf8Only, false))
	}
	if rapid.Bool().Draw(t, "hasMatch") {
		in.MatchSeqNum = Uint64(rapid.Uint64().Draw(t, "match"))
	}
	if rapid.Bool().Draw(t, "hasToken") {
		in.FencingToken = String(rapid.StringN(0, 9, MaxFencingTokenBytes).Draw(t, "token"))
	}
	return in
}

func equalU64(a, b *uint64) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func equalRecord(a, b *Record) bool {
	if a.SeqNum != b.SeqNum || !equalU64(a.Timestamp, b.Timestamp) || !bytes.Equal(a.Body, b.Body) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if !bytes.Equal(a.Headers[i].Name, b.Headers[i].Name) || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

func equalInput(a, b *AppendInput) bool {
	if len(a.Records) != len(b.Records) || !equalU64(a.MatchSeqNum, b.MatchSeqNum) {
		return false
	}
	if (a.FencingToken == nil) != (b.FencingToken == nil) || (a.FencingToken != nil && *a.FencingToken != *b.FencingToken) {
		return false
	}
	for i := range a.Records {
		if !equalRecord(&a.Records[i], &b.Records[i]) {
			return false
		}
	}
	return true
}

func equalBatch(a, b *ReadBatch) bool {
	if len(a.Records) != len(b.Records) || (a.Tail == nil) != (b.Tail == nil) || (a.Tail != nil && *a.Tail != *b.Tail) {
		return false
	}
	for i := range a.Records {
		if !equalRecord(&a.Records[i], &b.Records[i]) {
			return false
		}
	}
	return true
}

func wantErr(t *testing.T, err *Error, status int, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %d %s", status, code)
	}
	if err.Status != status || err.Code != code {
		t.Fatalf("got %d %s (%s), want %d %s", err.Status, err.Code, err.Message, status, code)
	}
}

// ---- append ---------------------------------------------------------------

func TestDecodeAppendJSONRaw(t *testing.T) {
	body := `{"records":[{"timestamp":1700000000000,"headers":[["k","v"],["k2",""]],"body":"héllo"},{"body":""},{}],
	         "match_seq_num":5,"fencing_token":"w1","future_field":1}`
	in, err := DecodeAppendJSON([]byte(body), FormatRaw)
	if err != nil {
		t.Fatal(err)
	}
	want := &AppendInput{
		Records: []Record{
			{Timestamp: Uint64(1700000000000), Headers: []Header{{[]byte("k"), []byte("v")}, {[]byte("k2"), nil}}, Body: []byte("héllo")},
			{}, {},
		},
		MatchSeqNum:  Uint64(5),
		FencingToken: String("w1"),
	}
	if !equalInput(in, want) {
		t.Fatalf("got %+v", in)
	}
}

func TestDecodeAppendJSONBase64(t *testing.T) {
	body := `{"records":[{"headers":[["AA==","/w=="]],"body":"AP8="}]}`
	in, err := DecodeAppendJSON([]byte(body), FormatBase64)
	if err != nil {
		t.Fatal(err)
	}
	r := in.Records[0]
	if !bytes.Equal(r.Headers[0].Name, []byte{0}) || !bytes.Equal(r.Headers[0].Value, []byte{0xff}) || !bytes.Equal(r.Body, []byte{0, 0xff}) {
		t.Fatalf("got %+v", r)
	}
	if r.Timestamp != nil || in.MatchSeqNum != nil || in.FencingToken != nil {
		t.Fatal("absent optionals must stay nil")
	}
}

func TestDecodeAppendErrors(t *testing.T) {
	big := strings.Repeat("x", MaxBatchMeteredBytes-8) // one record of exactly 1 MiB metered
	many := `{"records":[` + strings.TrimSuffix(strings.Repeat(`{"body":"a"},`, MaxBatchRecords+1), ",") + `]}`
	thousand := `{"records":[` + strings.TrimSuffix(strings.Repeat(`{"body":"a"},`, MaxBatchRecords), ",") + `]}`
	cases := []struct {
		name   string
		body   string
		f      Format
		status int
		code   string
	}{
		{"not json", `{"records":`, FormatRaw, 400, CodeBadJSON},
		{"empty body", ``, FormatRaw, 400, CodeBadJSON},
		{"records not array", `{"records":{}}`, FormatRaw, 400, CodeBadJSON},
		{"negative timestamp", `{"records":[{"timestamp":-1}]}`, FormatRaw, 400, CodeBadJSON},
		{"float timestamp", `{"records":[{"timestamp":1.5}]}`, FormatRaw, 400, CodeBadJSON},
		{"header triple", `{"records":[{"headers":[["a","b","c"]]}]}`, FormatRaw, 400, CodeBadJSON},
		{"header single", `{"records":[{"headers":[["a"]]}]}`, FormatRaw, 400, CodeBadJSON},
		{"header null value", `{"records":[{"headers":[["a",null]]}]}`, FormatRaw, 400, CodeBadJSON},
		{"header number", `{"records":[{"headers":[["a",1]]}]}`, FormatRaw, 400, CodeBadJSON},
		{"header object", `{"records":[{"headers":[{"a":"b"}]}]}`, FormatRaw, 400, CodeBadJSON},
		{"trailing data", `{"records":[{}]} x`, FormatRaw, 400, CodeBadJSON},
		{"no records", `{"records":[]}`, FormatRaw, 422, CodeInvalid},
		{"missing records", `{}`, FormatRaw, 422, CodeInvalid},
		{"too many records", many, FormatRaw, 422, CodeInvalid},
		{"too many bytes", `{"records":[{"body":"` + big + `"},{"body":"y"}]}`, FormatRaw, 422, CodeInvalid},
		{"bad base64 body", `{"records":[{"body":"not base64!"}]}`, FormatBase64, 422, CodeInvalid},
		{"bad base64 name", `{"records":[{"headers":[["@@","AA=="]]}]}`, FormatBase64, 422, CodeInvalid},
		{"unpadded base64", `{"records":[{"body":"AP8"}]}`, FormatBase64, 422, CodeInvalid},
		{"token too long", `{"records":[{}],"fencing_token":"` + strings.Repeat("t", 37) + `"}`, FormatRaw, 422, CodeInvalid},
		{"empty name not command", `{"records":[{"headers":[["","fence"],["a","b"]]}]}`, FormatRaw, 422, CodeInvalid},
		{"unknown command", `{"records":[{"headers":[["","compact"]]}]}`, FormatRaw, 422, CodeInvalid},
		{"fence too long", `{"records":[{"headers":[["","fence"]],"body":"` + strings.Repeat("t", 37) + `"}]}`, FormatRaw, 422, CodeInvalid},
		{"trim short", `{"records":[{"headers":[["","trim"]],"body":"AAAA"}]}`, FormatBase64, 422, CodeInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeAppendJSON([]byte(c.body), c.f)
			wantErr(t, err, c.status, c.code)
		})
	}
	// The boundaries themselves are accepted.
	if _, err := DecodeAppendJSON([]byte(thousand), FormatRaw); err != nil {
		t.Fatalf("1000 records: %v", err)
	}
	if _, err := DecodeAppendJSON([]byte(`{"records":[{"body":"`+big+`"}]}`), FormatRaw); err != nil {
		t.Fatalf("exactly 1 MiB metered: %v", err)
	}
	if _, err := DecodeAppendJSON([]byte(`{"records":[{}],"fencing_token":"`+strings.Repeat("t", 36)+`"}`), FormatRaw); err != nil {
		t.Fatalf("36-byte token: %v", err)
	}
}

func TestAppendJSONRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		utf8Only := rapid.Bool().Draw(t, "utf8")
		f := FormatBase64
		if utf8Only && rapid.Bool().Draw(t, "raw") {
			f = FormatRaw
		}
		in := genAppendInput(t, utf8Only)
		b, err := EncodeAppendJSON(in, f)
		if err != nil {
			t.Fatal(err)
		}
		out, derr := DecodeAppendJSON(b, f)
		if derr != nil {
			t.Fatalf("%v on %s", derr, b)
		}
		if !equalInput(in, out) {
			t.Fatalf("round trip changed %+v into %+v", in, out)
		}
	})
}

func TestEncodeAppendJSONRawRejectsBinary(t *testing.T) {
	in := &AppendInput{Records: []Record{{Body: []byte{0xff}}}}
	if _, err := EncodeAppendJSON(in, FormatRaw); err == nil {
		t.Fatal("raw format must refuse invalid UTF-8 on append")
	}
	b, err := EncodeAppendJSON(in, FormatBase64)
	if err != nil || string(b) != `{"records":[{"body":"/w=="}]}` {
		t.Fatalf("got %s %v", b, err)
	}
}

func TestAppendProtoRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genAppendInput(t, false)
		b, err := EncodeAppendProto(in)
		if err != nil {
			t.Fatal(err)
		}
		out, derr := DecodeAppendProto(b)
		if derr != nil {
			t.Fatal(derr)
		}
		if !equalInput(in, out) {
			t.Fatalf("round trip changed %+v into %+v", in, out)
		}
	})
}

func TestDecodeAppendProtoPresence(t *testing.T) {
	// Explicit zeros are kept apart from absence: match_seq_num=0 and an
	// empty fencing token are real conditions.
	m := &s2pb.AppendInput{
		Records:      []*s2pb.AppendRecord{{Timestamp: proto.Uint64(0)}, {}},
		MatchSeqNum:  proto.Uint64(0),
		FencingToken: proto.String(""),
	}
	b, _ := proto.Marshal(m)
	in, err := DecodeAppendProto(b)
	if err != nil {
		t.Fatal(err)
	}
	if in.MatchSeqNum == nil || *in.MatchSeqNum != 0 || in.FencingToken == nil || *in.FencingToken != "" {
		t.Fatalf("conditions lost: %+v", in)
	}
	if in.Records[0].Timestamp == nil || in.Records[1].Timestamp != nil {
		t.Fatal("timestamp presence lost")
	}
}

func TestDecodeAppendProtoErrors(t *testing.T) {
	_, err := DecodeAppendProto([]byte{0x0a, 0x05, 0x01})
	wantErr(t, err, 400, CodeBadProto)
	bad, _ := proto.Marshal(&s2pb.AppendInput{Records: []*s2pb.AppendRecord{{}}})
	bad = append(bad, 0x1a, 0x01, 0xff) // fencing_token "\xff": not UTF-8
	_, err = DecodeAppendProto(bad)
	wantErr(t, err, 400, CodeBadProto)
	empty, _ := proto.Marshal(&s2pb.AppendInput{})
	_, err = DecodeAppendProto(empty)
	wantErr(t, err, 422, CodeInvalid)
	trim, _ := proto.Marshal(&s2pb.AppendInput{Records: []*s2pb.AppendRecord{{Headers: []*s2pb.Header{{Value: []byte("trim")}}, Body: []byte{1}}}})
	_, err = DecodeAppendProto(trim)
	wantErr(t, err, 422, CodeInvalid)
}

// ---- commands and sizes ------------------------------------------------------

func TestParseCommand(t *testing.T) {
	cmd, err := ParseCommand(&Record{Body: []byte("x"), Headers: []Header{{[]byte("a"), nil}}})
	if err != nil || cmd.Kind != NotCommand {
		t.Fatalf("plain record: %+v %v", cmd, err)
	}
	fence := FenceRecord("w1")
	cmd, err = ParseCommand(&fence)
	if err != nil || cmd.Kind != Fence || cmd.FencingToken != "w1" {
		t.Fatalf("fence: %+v %v", cmd, err)
	}
	clear := FenceRecord("")
	if cmd, err = ParseCommand(&clear); err != nil || cmd.Kind != Fence || cmd.FencingToken != "" {
		t.Fatalf("clearing fence: %+v %v", cmd, err)
	}
	trim := TrimRecord(1<<40 + 3)
	cmd, err = ParseCommand(&trim)
	if err != nil || cmd.Kind != Trim || cmd.TrimPoint != 1<<40+3 {
		t.Fatalf("trim: %+v %v", cmd, err)
	}
	for _, r := range []Record{
		{Headers: []Header{{nil, []byte("fence")}}, Body: []byte{0xff}},
		{Headers: []Header{{nil, []byte("fence")}}, Body: bytes.Repeat([]byte("é"), 19)},
		{Headers: []Header{{nil, []byte("trim")}}, Body: make([]byte, 9)},
		{Headers: []Header{{nil, []byte("")}}},
		{Headers: []Header{{[]byte("a"), nil}, {nil, []byte("trim")}}, Body: make([]byte, 8)},
	} {
		if _, err := ParseCommand(&r); err == nil || err.Code != CodeInvalid {
			t.Errorf("%+v: got %v, want invalid", r, err)
		}
	}
}

// TestParseCommandHeaders checks that the generic decoder, which the star's
// facade calls with format.Header, agrees with ParseCommand on any header type
// of Header's layout.
func TestParseCommandHeaders(t *testing.T) {
	type otherHeader struct {
		Name  []byte
		Value []byte
	}
	for _, r := range []Record{
		{Body: []byte("x"), Headers: []Header{{[]byte("a"), nil}}},
		{},
		FenceRecord("w1"),
		FenceRecord(""),
		TrimRecord(1<<40 + 3),
		{Headers: []Header{{nil, []byte("fence")}}, Body: []byte{0xff}},
		{Headers: []Header{{nil, []byte("trim")}}, Body: make([]byte, 7)},
		{Headers: []Header{{nil, []byte("compact")}}},
		{Headers: []Header{{[]byte("a"), nil}, {nil, []byte("trim")}}, Body: make([]byte, 8)},
	} {
		other := make([]otherHeader, len(r.Headers))
		for i, h := range r.Headers {
			other[i] = otherHeader(h)
		}
		want, wantErr := ParseCommand(&r)
		got, gotErr := ParseCommandHeaders(other, r.Body)
		if got != want || (gotErr == nil) != (wantErr == nil) || (gotErr != nil && *gotErr != *wantErr) {
			t.Errorf("%+v: got %+v %v, want %+v %v", r, got, gotErr, want, wantErr)
		}
		if IsCommand(other) != (want.Kind != NotCommand || wantErr != nil) {
			t.Errorf("%+v: IsCommand %v", r, IsCommand(other))
		}
	}
}

func TestMeteredSize(t *testing.T) {
	r := Record{Headers: []Header{{[]byte("ab"), []byte("cde")}, {nil, nil}}, Body: []byte("12345")}
	if got := r.MeteredSize(); got != 8+2*2+5+5 {
		t.Fatalf("metered %d", got)
	}
	if MeteredBytes([]Record{r, {}}) != 22+8 {
		t.Fatal("batch metered")
	}
}

// ---- read -------------------------------------------------------------------

func TestReadBatchJSONGolden(t *testing.T) {
	b := &ReadBatch{Records: []Record{
		{SeqNum: 0, Timestamp: Uint64(1700000000000), Body: []byte("hello")},
		{SeqNum: 1, Timestamp: Uint64(1700000000001), Headers: []Header{{[]byte("k"), []byte("v")}}},
		{SeqNum: 2, Timestamp: Uint64(1700000000001)},
	}}
	want := `{"records":[{"seq_num":0,"timestamp":1700000000000,"body":"hello"},` +
		`{"seq_num":1,"timestamp":1700000000001,"headers":[["k","v"]]},` +
		`{"seq_num":2,"timestamp":1700000000001}]}`
	if got := string(EncodeReadBatchJSON(b, FormatRaw)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	b.Tail = &StreamPosition{SeqNum: 3, Timestamp: 1700000000001}
	want = strings.TrimSuffix(want, "}") + `,"tail":{"seq_num":3,"timestamp":1700000000001}}`
	if got := string(EncodeReadBatchJSON(b, FormatRaw)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := string(EncodeReadBatchJSON(&ReadBatch{}, FormatRaw)); got != `{"records":[]}` {
		t.Fatalf("empty batch %s", got)
	}
	bin := &ReadBatch{Records: []Record{{SeqNum: 9, Timestamp: Uint64(1), Headers: []Header{{[]byte{0}, []byte{0xff}}}, Body: []byte{0, 0xff}}}}
	if got := string(EncodeReadBatchJSON(bin, FormatBase64)); got != `{"records":[{"seq_num":9,"timestamp":1,"headers":[["AA==","/w=="]],"body":"AP8="}]}` {
		t.Fatalf("base64 %s", got)
	}
}

func TestReadBatchJSONRawIsLossyAndEscaped(t *testing.T) {
	body := []byte("a\"b\\c\n\t\x00\x1f\xffz\u2028é")
	b := &ReadBatch{Records: []Record{{Timestamp: Uint64(0), Body: body}}}
	out := EncodeReadBatchJSON(b, FormatRaw)
	if !json.Valid(out) {
		t.Fatalf("invalid JSON %s", out)
	}
	var w struct {
		Records []struct {
			Body string `json:"body"`
		} `json:"records"`
	}
	if err := json.Unmarshal(out, &w); err != nil {
		t.Fatal(err)
	}
	if want := "a\"b\\c\n\t\x00\x1f\uFFFDz\u2028é"; w.Records[0].Body != want {
		t.Fatalf("body %q, want %q", w.Records[0].Body, want)
	}
	if bytes.Contains(out, []byte("\u2028")) {
		t.Fatal("U+2028 must be escaped")
	}
}

// appendJSONString agrees with encoding/json on every input.
func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, "s")
		if rapid.Bool().Draw(t, "text") {
			s = []byte(rapid.String().Draw(t, "str"))
		}
		enc := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Fatalf("%q encoded as invalid JSON %s", s, enc)
		}
		if want := toValidUTF8(s); got != want {
			t.Fatalf("%q: decoded %q, want %q", s, got, want)
		}
		std, _ := json.Marshal(string(s))
		var stdGot string
		_ = json.Unmarshal(std, &stdGot)
		if stdGot != got {
			t.Fatalf("%q: ours %q, encoding/json %q", s, got, stdGot)
		}
	})
}

func TestReadBatchJSONRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		utf8Only := rapid.Bool().Draw(t, "utf8")
		f := FormatBase64
		if utf8Only {
			f = FormatRaw
		}
		b := &ReadBatch{}
		for i := rapid.IntRange(0, 4).Draw(t, "n"); i > 0; i-- {
			b.Records = append(b.Records, genRecord(t, utf8Only, true))
		}
		if rapid.Bool().Draw(t, "tail") {
			b.Tail = &StreamPosition{rapid.Uint64().Draw(t, "tseq"), rapid.Uint64().Draw(t, "tts")}
		}
		out, err := DecodeReadBatchJSON(EncodeReadBatchJSON(b, f), f)
		if err != nil {
			t.Fatal(err)
		}
		if !equalBatch(b, out) {
			t.Fatalf("round trip changed %+v into %+v", b, out)
		}
	})
}

func TestDecodeReadBatchJSONErrors(t *testing.T) {
	for _, body := range []string{`{}`, `{"records":[{"seq_num":1}]}`, `{"records":[{"timestamp":1}]}`, `[`} {
		if _, err := DecodeReadBatchJSON([]byte(body), FormatRaw); err == nil || err.Code != CodeBadJSON {
			t.Errorf("%s: got %v", body, err)
		}
	}
}

// The hand-written protobuf encoder produces exactly proto.Marshal's bytes.
func TestReadBatchProtoMatchesGenerated(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := &ReadBatch{}
		m := &s2pb.ReadBatch{}
		for i := rapid.IntRange(0, 4).Draw(t, "n"); i > 0; i-- {
			r := genRecord(t, false, true)
			if rapid.Bool().Draw(t, "zero") {
				r.SeqNum, r.Timestamp, r.Body = 0, Uint64(0), nil
				if len(r.Headers) > 0 {
					r.Headers[0].Value = nil
				}
			}
			b.Records = append(b.Records, r)
			m.Records = append(m.Records, &s2pb.SequencedRecord{SeqNum: r.SeqNum, Timestamp: *r.Timestamp, Headers: headersToPB(r.Headers), Body: r.Body})
		}
		if rapid.Bool().Draw(t, "tail") {
			b.Tail = &StreamPosition{rapid.Uint64().Draw(t, "tseq"), rapid.Uint64().Draw(t, "tts")}
			m.Tail = positionToPB(*b.Tail)
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := EncodeReadBatchProto(b)
		if !bytes.Equal(got, want) {
			t.Fatalf("ours %x\nproto %x", got, want)
		}
		back, derr := DecodeReadBatchProto(got)
		if derr != nil {
			t.Fatal(derr)
		}
		if !equalBatch(b, back) {
			t.Fatalf("round trip changed %+v into %+v", b, back)
		}
	})
}

func TestReadBatchProtoHeartbeatKeepsZeroTail(t *testing.T) {
	// A heartbeat on an empty stream has tail 0/0: its presence must survive.
	b := &ReadBatch{Tail: &StreamPosition{}}
	back, err := DecodeReadBatchProto(EncodeReadBatchProto(b))
	if err != nil || back.Tail == nil || len(back.Records) != 0 {
		t.Fatalf("heartbeat lost its tail: %+v %v", back, err)
	}
	back, err = DecodeReadBatchProto(EncodeReadBatchProto(&ReadBatch{}))
	if err != nil || back.Tail != nil {
		t.Fatalf("absent tail appeared: %+v %v", back, err)
	}
}

func TestAppendAckCodecs(t *testing.T) {
	a := AppendAck{Start: StreamPosition{10, 100}, End: StreamPosition{13, 102}, Tail: StreamPosition{15, 104}}
	if got := string(EncodeAppendAckJSON(a)); got != `{"start":{"seq_num":10,"timestamp":100},"end":{"seq_num":13,"timestamp":102},"tail":{"seq_num":15,"timestamp":104}}` {
		t.Fatalf("json %s", got)
	}
	if std, _ := json.Marshal(a); string(std) != string(EncodeAppendAckJSON(a)) {
		t.Fatalf("struct tags disagree: %s", std)
	}
	back, err := DecodeAppendAckJSON(EncodeAppendAckJSON(a))
	if err != nil || back != a {
		t.Fatalf("json round trip %+v %v", back, err)
	}
	if _, err := DecodeAppendAckJSON([]byte(`{"start":{"seq_num":1,"timestamp":1},"end":{"seq_num":2}}`)); err == nil {
		t.Fatal("incomplete ack accepted")
	}
	want, _ := proto.Marshal(&s2pb.AppendAck{Start: positionToPB(a.Start), End: positionToPB(a.End), Tail: positionToPB(a.Tail)})
	if got := EncodeAppendAckProto(a); !bytes.Equal(got, want) {
		t.Fatalf("proto %x want %x", got, want)
	}
	zero := AppendAck{}
	wantZero, _ := proto.Marshal(&s2pb.AppendAck{Start: &s2pb.StreamPosition{}, End: &s2pb.StreamPosition{}, Tail: &s2pb.StreamPosition{}})
	if got := EncodeAppendAckProto(zero); !bytes.Equal(got, wantZero) {
		t.Fatalf("zero proto %x want %x", got, wantZero)
	}
	pback, perr := DecodeAppendAckProto(EncodeAppendAckProto(a))
	if perr != nil || pback != a {
		t.Fatalf("proto round trip %+v %v", pback, perr)
	}
}

func TestTailJSON(t *testing.T) {
	tail := StreamPosition{SeqNum: 0, Timestamp: 0}
	if got := string(EncodeTailJSON(tail)); got != `{"tail":{"seq_num":0,"timestamp":0}}` {
		t.Fatalf("tail %s", got)
	}
	got, err := DecodeTailJSON([]byte(`{"tail":{"seq_num":7,"timestamp":8}}`))
	if err != nil || got != (StreamPosition{7, 8}) {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := DecodeTailJSON([]byte(`{}`)); err == nil {
		t.Fatal("missing tail accepted")
	}
}

func TestLastEventIDNext(t *testing.T) {
	id := LastEventID{SeqNum: 4, Count: 5, Bytes: 50}
	b := &ReadBatch{Records: []Record{{SeqNum: 5, Body: []byte("ab")}, {SeqNum: 6}}}
	next := id.Next(b)
	if next != (LastEventID{SeqNum: 6, Count: 7, Bytes: 50 + 10 + 8}) {
		t.Fatalf("next %+v", next)
	}
	if id.Next(&ReadBatch{}) != id {
		t.Fatal("empty batch moved the id")
	}
	if next.String() != "6,7,68" {
		t.Fatalf("string %s", next)
	}
}

func ExampleEncodeReadBatchJSON() {
	b := &ReadBatch{Records: []Record{{SeqNum: 1, Timestamp: Uint64(2), Body: []byte{0xff, 'a'}}}}
	fmt.Println(string(EncodeReadBatchJSON(b, FormatRaw)))
	fmt.Println(string(EncodeReadBatchJSON(b, FormatBase64)))
	fmt.Println(base64.StdEncoding.EncodeToString([]byte{0xff, 'a'}))
	// Output:
	// {"records":[{"seq_num":1,"timestamp":2,"body":"\ufffda"}]}
	// {"records":[{"seq_num":1,"timestamp":2,"body":"/2E="}]}
	// /2E=
}

// A JSON append whose text is not valid UTF-8, or escapes a lone UTF-16
// surrogate, is 400 bad_json in every format, as S2's JSON parser rejects
// it: encoding/json would store U+FFFD, so the bytes could not round-trip.
func TestDecodeAppendJSONRejectsInvalidText(t *testing.T) {
	for _, c := range []struct {
		name, body string
	}{
		{"invalid byte in body", "{\"records\":[{\"body\":\"a\xffz\"}]}"},
		{"invalid byte in header", "{\"records\":[{\"headers\":[[\"k\xc3\",\"v\"]]}]}"},
		{"invalid byte in token", "{\"records\":[{\"body\":\"a\"}],\"fencing_token\":\"\xed\xa0\x80\"}"},
		{"lone high surrogate", `{"records":[{"body":"\ud800"}]}`},
		{"lone low surrogate", `{"records":[{"body":"x\uDC00y"}]}`},
		{"high then non-low", `{"records":[{"body":"\ud83d\u0041"}]}`},
		{"high at the end", `{"records":[{"headers":[["\ud83d",""]]}]}`},
	} {
		for _, f := range []Format{FormatRaw, FormatBase64} {
			_, err := DecodeAppendJSON([]byte(c.body), f)
			if err == nil || err.Status != 400 || err.Code != CodeBadJSON {
				t.Errorf("%s (format %v): got %v, want 400 bad_json", c.name, f, err)
			}
		}
	}
	// A surrogate pair is one character; an escaped backslash before "u"
	// is no escape.
	in, err := DecodeAppendJSON([]byte(`{"records":[{"body":"\ud83d\ude00 \\ud800"}]}`), FormatRaw)
	if err != nil || string(in.Records[0].Body) != "😀 \\ud800" {
		t.Fatalf("valid text: %v %+v", err, in)
	}
}
