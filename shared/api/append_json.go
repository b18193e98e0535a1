package api

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// The append body's JSON decoder is hand-written for the unary hot path:
// encoding/json (reflection, a string per field, then a copy to []byte)
// was a third of the star's CPU on 16 clients × 64-record appends. It
// reads {"records":[…],"match_seq_num"?,"fencing_token"?} in one pass and
// copies every decoded byte once into an arena the records alias.
//
// It accepts what encoding/json accepted, with two exceptions, both S2's
// (serde) behaviour: field names match exactly (encoding/json folds case),
// and text that is not valid UTF-8 or that escapes a lone surrogate is
// malformed (encoding/json replaces both with U+FFFD, so the bytes stored
// would not be the bytes sent). Unknown fields are skipped after a full
// syntax check; a repeated field keeps its last value; null leaves a field
// unset. Every syntax or type error is 400 bad_json; a bad base64 string or
// a failed ValidateAppendInput is 422 invalid, reported only for a body
// that is well-formed throughout (as before: encoding/json checked the
// whole text first).

// maxJSONDepth bounds the nesting of skipped values, as encoding/json does.
const maxJSONDepth = 10000

// jsonErr is a syntax or type error at a byte offset.
type jsonErr struct {
	off int
	msg string
}

func (e *jsonErr) Error() string { return fmt.Sprintf("%s at offset %d", e.msg, e.off) }

// appendScanner holds one decode's state.
type appendScanner struct {
	b     []byte
	i     int
	f     Format
	arena []byte // decoded bytes; records alias it
	tmp   []byte // a base64 string's text, when it holds escapes
	key   []byte // the object key being matched (consumed before its value)
	hdrs  []Header
	// invalid is the first 422 found (a bad base64 string), kept until
	// the whole body has been checked.
	invalid *Error
}

// recordJSON is one record while its object is read: headers are a range
// of the scanner's hdrs, which may still move.
type recordJSON struct {
	ts         uint64
	hasTS      bool
	body       []byte
	hdr0, hdr1 int
}

// DecodeAppendJSON decodes and validates a JSON append body
// {"records":[…],"match_seq_num"?,"fencing_token"?} in format f. Malformed
// JSON is 400 bad_json; bad base64 and every ValidateAppendInput failure are
// 422 invalid.
func DecodeAppendJSON(body []byte, f Format) (*AppendInput, *Error) {
	s := &appendScanner{b: body, f: f, arena: make([]byte, 0, len(body))}
	recs, in, err := s.input()
	if err != nil {
		return nil, BadJSON("append: %v", err)
	}
	if len(recs) > MaxBatchRecords {
		return nil, Invalid("an append batch holds at most %d records, got %d", MaxBatchRecords, len(recs))
	}
	if s.invalid != nil {
		return nil, s.invalid
	}
	in.Records = make([]Record, len(recs))
	ts := make([]uint64, len(recs))
	for i := range recs {
		r, w := &in.Records[i], &recs[i]
		if w.hasTS {
			ts[i] = w.ts
			r.Timestamp = &ts[i]
		}
		r.Body = w.body
		if w.hdr1 > w.hdr0 {
			r.Headers = s.hdrs[w.hdr0:w.hdr1:w.hdr1]
		}
	}
	if err := ValidateAppendInput(in); err != nil {
		return nil, err
	}
	return in, nil
}

// input reads the whole body: one value, then only whitespace.
func (s *appendScanner) input() ([]recordJSON, *AppendInput, error) {
	in := &AppendInput{}
	var recs []recordJSON
	s.ws()
	if s.null() {
		// encoding/json leaves the target as it was: no records.
	} else {
		if s.peek() != '{' {
			if err := s.skip(0); err != nil {
				return nil, nil, err
			}
			return nil, nil, s.errAt(0, "the append body must be a JSON object")
		}
		err := s.object(func(key []byte) error {
			switch string(key) {
			case "records":
				var err error
				recs, err = s.records()
				return err
			case "match_seq_num":
				v, ok, err := s.uint("match_seq_num")
				in.MatchSeqNum = nil
				if ok {
					in.MatchSeqNum = &v
				}
				return err
			case "fencing_token":
				if s.null() {
					in.FencingToken = nil
					return nil
				}
				if s.peek() != '"' {
					return s.typeErr("fencing_token", "a string")
				}
				t, err := s.str(nil)
				if err != nil {
					return err
				}
				tok := string(t)
				in.FencingToken = &tok
				return nil
			}
			return s.skip(0)
		})
		if err != nil {
			return nil, nil, err
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return nil, nil, s.errAt(s.i, "invalid character after the top-level value")
	}
	return recs, in, nil
}

// records reads the records array (or null: none).
func (s *appendScanner) records() ([]recordJSON, error) {
	s.invalid = nil // a repeated "records" replaces the earlier one
	if s.null() {
		return nil, nil
	}
	if s.peek() != '[' {
		return nil, s.typeErr("records", "an array")
	}
	var recs []recordJSON
	err := s.array(func() error {
		if s.null() {
			recs = append(recs, recordJSON{})
			return nil
		}
		if s.peek() != '{' {
			return s.typeErr("records", "an object")
		}
		var r recordJSON
		n := len(recs)
		err := s.object(func(key []byte) error {
			switch string(key) {
			case "timestamp":
				v, ok, err := s.uint("timestamp")
				r.ts, r.hasTS = v, ok
				return err
			case "headers":
				return s.headers(&r, n)
			case "body":
				if s.null() {
					return nil
				}
				if s.peek() != '"' {
					return s.typeErr("body", "a string")
				}
				b, err := s.bytes(func() string { return fmt.Sprintf("record %d: body", n) })
				r.body = b
				return err
			}
			return s.skip(0)
		})
		recs = append(recs, r)
		return err
	})
	return recs, err
}

// headers reads a record's [[name, value], …] (or null: none).
func (s *appendScanner) headers(r *recordJSON, rec int) error {
	r.hdr0, r.hdr1 = len(s.hdrs), len(s.hdrs)
	if s.null() {
		return nil
	}
	if s.peek() != '[' {
		return s.typeErr("headers", "an array")
	}
	return s.array(func() error {
		j := len(s.hdrs) - r.hdr0
		if s.peek() != '[' {
			if err := s.skip(0); err != nil {
				return err
			}
			return s.errAt(s.i, "a header must be a [name, value] pair of strings")
		}
		var pair [2][]byte
		k := 0
		err := s.array(func() error {
			if s.peek() != '"' || k >= 2 {
				return s.errAt(s.i, "a header must be a [name, value] pair of strings")
			}
			what := [2]string{"name", "value"}[k]
			b, err := s.bytes(func() string { return fmt.Sprintf("record %d: header %d %s", rec, j, what) })
			pair[k] = b
			k++
			return err
		})
		if err != nil {
			return err
		}
		if k != 2 {
			return s.errAt(s.i, "a header must be a [name, value] pair of strings")
		}
		s.hdrs = append(s.hdrs, Header{Name: pair[0], Value: pair[1]})
		r.hdr1 = len(s.hdrs)
		return nil
	})
}

// bytes reads a string holding bytes in the scanner's format into the
// arena. A bad base64 string is noted as 422 (what names it) and reads as
// empty; scanning goes on, since a syntax error later would be 400.
func (s *appendScanner) bytes(what func() string) ([]byte, error) {
	start := len(s.arena)
	if s.f != FormatBase64 {
		var err error
		if s.arena, err = s.str(s.arena); err != nil {
			return nil, err
		}
		return s.arena[start:len(s.arena):len(s.arena)], nil
	}
	if n, ok := s.plainBase64(); ok {
		s.arena = s.arena[:start+n]
		return s.arena[start : start+n : start+n], nil
	}
	text, err := s.strView()
	if err != nil {
		return nil, err
	}
	need := base64.StdEncoding.DecodedLen(len(text))
	s.arena = growTo(s.arena, need)
	n, derr := base64.StdEncoding.Decode(s.arena[start:start+need], text)
	if derr != nil {
		if s.invalid == nil {
			s.invalid = Invalid("%s: %v", what(), derr)
		}
		n = 0
	}
	s.arena = s.arena[:start+n]
	return s.arena[start : start+n : start+n], nil
}

// plainBase64 is the common case of a base64 string, found with a few
// vectorized scans: no escapes, and it decodes. Decoding succeeds only on
// the base64 alphabet, '=' and the line breaks the decoder skips, so with
// no line breaks the text was plain JSON. Anything else (ok false) takes
// the careful path, which tells a syntax error from bad base64.
func (s *appendScanner) plainBase64() (int, bool) {
	end := bytes.IndexByte(s.b[s.i+1:], '"')
	if end < 0 {
		return 0, false
	}
	text := s.b[s.i+1 : s.i+1+end]
	if bytes.IndexByte(text, '\\') >= 0 || bytes.IndexByte(text, '\n') >= 0 || bytes.IndexByte(text, '\r') >= 0 {
		return 0, false
	}
	start := len(s.arena)
	need := base64.StdEncoding.DecodedLen(len(text))
	s.arena = growTo(s.arena, need)
	n, err := base64.StdEncoding.Decode(s.arena[start:start+need], text)
	if err != nil {
		return 0, false
	}
	s.i += end + 2
	return n, true
}

// growTo extends b by n bytes of room (reallocating only past cap; earlier
// slices keep the old array, which stays valid).
func growTo(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n][:len(b)]
}

// strView returns the string at s.i unescaped: a view of the body when it
// has no escapes, else a copy in s.tmp.
func (s *appendScanner) strView() ([]byte, error) {
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		c := s.b[j]
		if c == '"' {
			s.i = j + 1
			return s.b[start:j], nil
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			break
		}
	}
	var err error
	s.tmp, err = s.str(s.tmp[:0])
	return s.tmp, err
}

// str reads the string at s.i (a '"') and appends its unescaped bytes to
// dst. Text that is not UTF-8, a control character and a lone surrogate
// are errors.
func (s *appendScanner) str(dst []byte) ([]byte, error) {
	b := s.b
	i := s.i + 1
	for {
		run := i
		for i < len(b) && plainJSON[b[i]] {
			i++
		}
		dst = append(dst, b[run:i]...)
		if i >= len(b) {
			return dst, s.errAt(i, "unexpected end of JSON input in a string")
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return dst, nil
		case c < 0x20:
			return dst, s.errAt(i, "invalid control character in a string")
		case c >= 0x80:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return dst, s.errAt(i, "the JSON text is not valid UTF-8")
			}
			dst = append(dst, b[i:i+size]...)
			i += size
		default: // a backslash
			if i+1 >= len(b) {
				return dst, s.errAt(i, "unexpected end of JSON input in an escape")
			}
			e := b[i+1]
			if e != 'u' {
				d, ok := simpleEscape(e)
				if !ok {
					return dst, s.errAt(i, fmt.Sprintf("invalid escape \\%c in a string", e))
				}
				dst = append(dst, d)
				i += 2
				continue
			}
			r, ok := hex4(b, i)
			if !ok {
				return dst, s.errAt(i, "invalid \\u escape in a string")
			}
			i += 6
			if utf16.IsSurrogate(r) {
				lo, ok := hex4(b, i)
				if r >= 0xdc00 || !ok || lo < 0xdc00 || lo > 0xdfff {
					return dst, s.errAt(i-6, fmt.Sprintf("lone surrogate \\u%04x in a string", r))
				}
				r = utf16.DecodeRune(r, lo)
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
		}
	}
}

// plainJSON marks the bytes a JSON string holds as themselves: ASCII but
// control characters, the quote and the backslash.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func simpleEscape(e byte) (byte, bool) {
	switch e {
	case '"', '\\', '/':
		return e, true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	}
	return 0, false
}

// hex4 parses the \uXXXX escape at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[i+2 : i+6] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// uint reads a non-negative integer that fits in uint64 (ok) or null.
func (s *appendScanner) uint(field string) (v uint64, ok bool, err error) {
	if s.null() {
		return 0, false, nil
	}
	start := s.i
	if err := s.number(); err != nil {
		return 0, false, err
	}
	for _, c := range s.b[start:s.i] {
		if c < '0' || c > '9' || v > (1<<64-1-uint64(c-'0'))/10 {
			return 0, false, &jsonErr{start, fmt.Sprintf("field %q: want a non-negative integer below 2^64, got %s", field, s.b[start:s.i])}
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true, nil
}

// number checks a JSON number at s.i and moves past it.
func (s *appendScanner) number() error {
	b, i := s.b, s.i
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		digits()
	default:
		return s.errAt(i, "invalid number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return s.errAt(i, "invalid number: no digits after the decimal point")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return s.errAt(i, "invalid number: no digits in the exponent")
		}
	}
	s.i = i
	return nil
}

// object reads an object at s.i, calling field with each key (unescaped)
// and s.i at its value, which field must consume. The key is valid only
// until field reads further: it is one buffer for every object.
func (s *appendScanner) object(field func(key []byte) error) error {
	s.i++ // '{'
	s.ws()
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.errAt(s.i, "want a string for an object key")
		}
		key, err := s.str(s.key[:0])
		if err != nil {
			return err
		}
		s.key = key
		s.ws()
		if s.peek() != ':' {
			return s.errAt(s.i, "want ':' after an object key")
		}
		s.i++
		s.ws()
		if err := field(key); err != nil {
			return err
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
			s.ws()
		case '}':
			s.i++
			return nil
		default:
			return s.errAt(s.i, "want ',' or '}' in an object")
		}
	}
}

// array reads an array at s.i, calling elem with s.i at each element,
// which elem must consume.
func (s *appendScanner) array(elem func() error) error {
	s.i++ // '['
	s.ws()
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
			s.ws()
		case ']':
			s.i++
			return nil
		default:
			return s.errAt(s.i, "want ',' or ']' in an array")
		}
	}
}

// skip checks and moves past any JSON value.
func (s *appendScanner) skip(depth int) error {
	if depth > maxJSONDepth {
		return s.errAt(s.i, "exceeded max depth")
	}
	switch c := s.peek(); {
	case c == '{':
		return s.object(func([]byte) error { return s.skip(depth + 1) })
	case c == '[':
		return s.array(func() error { return s.skip(depth + 1) })
	case c == '"':
		_, err := s.strView()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case s.literal("true"), s.literal("false"), s.null():
		return nil
	}
	if s.i >= len(s.b) {
		return s.errAt(s.i, "unexpected end of JSON input")
	}
	return s.errAt(s.i, fmt.Sprintf("invalid character %q looking for a value", s.b[s.i]))
}

// null moves past a null literal at s.i, if there is one.
func (s *appendScanner) null() bool { return s.literal("null") }

func (s *appendScanner) literal(lit string) bool {
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// typeErr is a value of the wrong JSON type for field; the value is still
// checked first, so a syntax error in it is the one reported.
func (s *appendScanner) typeErr(field, want string) error {
	start := s.i
	if err := s.skip(0); err != nil {
		return err
	}
	return &jsonErr{start, fmt.Sprintf("field %q: want %s", field, want)}
}

func (s *appendScanner) errAt(off int, msg string) error { return &jsonErr{off, msg} }

func (s *appendScanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *appendScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}
