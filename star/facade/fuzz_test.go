package facade

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/starlog/starlog/shared/format"
)

// FuzzParseCommand checks that the command decoder never panics, accepts
// exactly the well-formed commands, and decodes them faithfully.
func FuzzParseCommand(f *testing.F) {
	f.Add([]byte(""), []byte("fence"), []byte("tok"), false)
	f.Add([]byte(""), []byte("fence"), []byte(""), false)
	f.Add([]byte(""), []byte("trim"), binary.BigEndian.AppendUint64(nil, 42), false)
	f.Add([]byte(""), []byte("trim"), []byte{1, 2, 3}, false)
	f.Add([]byte(""), []byte("fence"), []byte{0xff}, false)
	f.Add([]byte(""), []byte("fence"), []byte("x"), true)
	f.Add([]byte(""), []byte("other"), []byte(""), false)
	f.Add([]byte("name"), []byte("fence"), []byte("body"), false)
	f.Add([]byte("name"), []byte("v"), []byte("b"), true)
	f.Fuzz(func(t *testing.T, name, value, body []byte, extra bool) {
		headers := []format.Header{{Name: name, Value: value}}
		if extra {
			headers = append(headers, format.Header{Name: []byte("x"), Value: []byte("y")})
		}
		c, err := ParseCommand(headers, body)
		var ie InvalidError
		if err != nil && !errors.As(err, &ie) {
			t.Fatalf("error %T is not an InvalidError", err)
		}
		if len(name) != 0 {
			if err != nil || c.Kind != NotCommand {
				t.Fatalf("named header parsed as %+v, %v", c, err)
			}
			return
		}
		v := string(value)
		switch {
		case extra:
			if err == nil {
				t.Fatalf("command with two headers accepted: %+v", c)
			}
		case v == "fence":
			valid := len(body) <= MaxFencingTokenBytes && utf8.Valid(body)
			if valid != (err == nil) {
				t.Fatalf("fence %q: valid %v, err %v", body, valid, err)
			}
			if err == nil && (c.Kind != Fence || c.Token != string(body)) {
				t.Fatalf("fence decoded as %+v", c)
			}
		case v == "trim":
			if (len(body) == 8) != (err == nil) {
				t.Fatalf("trim of %d bytes: err %v", len(body), err)
			}
			if err == nil && (c.Kind != Trim || !reflect.DeepEqual(binary.BigEndian.AppendUint64(nil, c.Point), body)) {
				t.Fatalf("trim decoded as %+v from %x", c, body)
			}
		default:
			if err == nil {
				t.Fatalf("unknown command %q accepted", v)
			}
		}
	})
}

// FuzzSequence drives a stream with requests decoded from arbitrary bytes
// and checks the invariants: no panic, dense seqs, non-decreasing
// timestamps, rejections change nothing, Tail ≤ Next.
func FuzzSequence(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("\x03\x10fence\x00\x22trim\x00\x00\x00\x00\x00\x00\x00\x05"))
	f.Add([]byte{0xff, 0xfe, 0x80, 0x41, 0x00, 0x00, 0x07})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		s := New(Config{Mode: Mode(next() % 3), Uncapped: next()&1 == 1}, State{NextSeq: uint64(next())})
		now := uint64(1000)
		seq := s.Next()
		var lastTS uint64
		var pending []Position
		for len(data) > 0 {
			op := next()
			now = now + uint64(op&0x1f) - 8
			if op&0x60 == 0x60 && len(pending) > 0 {
				s.Acked(pending[0])
				pending = pending[1:]
				continue
			}
			req := Request{Records: make([]Input, int(next()%5))}
			for i := range req.Records {
				flags := next()
				in := Input{Body: []byte{next()}}
				if flags&1 == 1 {
					ts := now + uint64(next()) - 128
					in.Timestamp = &ts
				}
				switch flags >> 5 {
				case 0:
					in.Headers = []format.Header{{Value: []byte("fence")}}
					in.Body = []byte{'a' + next()%3}
				case 1:
					in.Headers = []format.Header{{Value: []byte("trim")}}
					in.Body = binary.BigEndian.AppendUint64(nil, uint64(next()))
				case 2:
					in.Headers = []format.Header{{Value: []byte{next()}}}
				case 3:
					in.Headers = []format.Header{{Name: []byte{next()}, Value: []byte{next()}}}
				}
				req.Records[i] = in
			}
			if b := next(); b&1 == 1 {
				req.MatchSeqNum = u64(s.Next() + uint64(b>>6) - 1)
			}
			if b := next(); b&1 == 1 {
				req.FencingToken = str(string([]byte{'a' + (b>>1)%3}))
			}
			before := *s
			out, err := s.Sequence(req, now)
			if err != nil {
				if !reflect.DeepEqual(before, *s) {
					t.Fatalf("rejection changed the stream")
				}
				continue
			}
			for _, r := range out.Records {
				if r.SeqNum != seq || r.Timestamp < lastTS {
					t.Fatalf("record %+v after seq %d ts %d", r, seq, lastTS)
				}
				seq++
				lastTS = r.Timestamp
			}
			pending = append(pending, out.End)
			if s.Tail().SeqNum > s.Next() || s.Next() != seq {
				t.Fatalf("tail %+v next %d seq %d", s.Tail(), s.Next(), seq)
			}
		}
	})
}
