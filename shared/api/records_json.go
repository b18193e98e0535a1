package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonHeader is a header on the JSON wire: a [name, value] pair of strings
// in the request's format.
type jsonHeader struct{ name, value string }

func (h *jsonHeader) UnmarshalJSON(b []byte) error {
	var pair []*string
	if err := json.Unmarshal(b, &pair); err != nil {
		return err
	}
	if len(pair) != 2 || pair[0] == nil || pair[1] == nil {
		return errors.New("a header must be a [name, value] pair of strings")
	}
	h.name, h.value = *pair[0], *pair[1]
	return nil
}

func (h jsonHeader) MarshalJSON() ([]byte, error) {
	return json.Marshal([2]string{h.name, h.value})
}

type appendRecordJSON struct {
	Timestamp *uint64      `json:"timestamp,omitempty"`
	Headers   []jsonHeader `json:"headers,omitempty"`
	Body      string       `json:"body,omitempty"`
}

type appendInputJSON struct {
	Records      []appendRecordJSON `json:"records"`
	MatchSeqNum  *uint64            `json:"match_seq_num,omitempty"`
	FencingToken *string            `json:"fencing_token,omitempty"`
}

type sequencedRecordJSON struct {
	SeqNum    *uint64      `json:"seq_num"`
	Timestamp *uint64      `json:"timestamp"`
	Headers   []jsonHeader `json:"headers"`
	Body      string       `json:"body"`
}

type readBatchJSON struct {
	Records []sequencedRecordJSON `json:"records"`
	Tail    *StreamPosition       `json:"tail"`
}

// jsonMessage renders a decoding error without Go type names.
func jsonMessage(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at offset %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Sprintf("field %q: unexpected JSON %s", typ.Field, typ.Value)
		}
		return fmt.Sprintf("unexpected JSON %s", typ.Value)
	}
	return err.Error()
}

// checkJSONText rejects JSON text that is not valid UTF-8 or that escapes
// a lone UTF-16 surrogate (\ud800 without its pair). encoding/json turns
// both into U+FFFD, so the bytes stored would not be the bytes sent; S2's
// parser rejects them as malformed JSON, and so do we. A backslash is only
// legal inside a string, so the escapes can be scanned without tracking
// string boundaries (anything else is a syntax error json.Unmarshal
// reports anyway).
func checkJSONText(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("the JSON text is not valid UTF-8")
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' {
			i++ // a two-byte escape: skip its second byte (it may be a backslash)
			continue
		}
		r, ok := hexEscape(b, i)
		switch {
		case !ok || !utf16.IsSurrogate(r):
		case r >= 0xdc00:
			return fmt.Errorf("lone low surrogate \\u%04x at offset %d", r, i)
		default:
			lo, ok := hexEscape(b, i+6)
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return fmt.Errorf("lone high surrogate \\u%04x at offset %d", r, i)
			}
			i += 6
		}
		i += 5
	}
	return nil
}

// UnmarshalText is json.Unmarshal of a request body whose strings must
// arrive exactly as sent (names, ids, configs): text that is not UTF-8 or
// escapes a lone surrogate is an error rather than U+FFFD (checkJSONText).
func UnmarshalText(body []byte, v any) error {
	if err := checkJSONText(body); err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// CheckJSONText is checkJSONText for decoders outside this package.
func CheckJSONText(b []byte) error { return checkJSONText(b) }

// hexEscape parses the \uXXXX escape at b[i:].
func hexEscape(b []byte, i int) (rune, bool) {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
	return rune(n), err == nil
}

// decodeBytes turns a JSON string in format f into bytes.
func decodeBytes(s string, f Format) ([]byte, error) {
	if f == FormatBase64 {
		return base64.StdEncoding.DecodeString(s)
	}
	return []byte(s), nil
}

// encodeText turns bytes into a JSON string value in format f; raw requires
// valid UTF-8 (the append side must not lose bytes).
func encodeText(b []byte, f Format) (string, error) {
	if f == FormatBase64 {
		return base64.StdEncoding.EncodeToString(b), nil
	}
	if !utf8.Valid(b) {
		return "", errors.New("bytes are not valid UTF-8: use the base64 format")
	}
	return string(b), nil
}

// EncodeAppendJSON encodes an append body in format f (for clients). Raw
// format fails on bytes that are not valid UTF-8.
func EncodeAppendJSON(in *AppendInput, f Format) ([]byte, error) {
	w := appendInputJSON{
		Records:      make([]appendRecordJSON, len(in.Records)),
		MatchSeqNum:  in.MatchSeqNum,
		FencingToken: in.FencingToken,
	}
	for i := range in.Records {
		r := &in.Records[i]
		wr := &w.Records[i]
		wr.Timestamp = r.Timestamp
		var err error
		if wr.Body, err = encodeText(r.Body, f); err != nil {
			return nil, fmt.Errorf("record %d body: %w", i, err)
		}
		if len(r.Headers) > 0 {
			wr.Headers = make([]jsonHeader, len(r.Headers))
		}
		for j, h := range r.Headers {
			if wr.Headers[j].name, err = encodeText(h.Name, f); err != nil {
				return nil, fmt.Errorf("record %d header %d name: %w", i, j, err)
			}
			if wr.Headers[j].value, err = encodeText(h.Value, f); err != nil {
				return nil, fmt.Errorf("record %d header %d value: %w", i, j, err)
			}
		}
	}
	return json.Marshal(w)
}

// appendBytesJSON appends b as a JSON string in format f; raw is lossy.
func appendBytesJSON(dst, b []byte, f Format) []byte {
	if f == FormatBase64 {
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b)
		return append(dst, '"')
	}
	return appendJSONString(dst, b)
}

func appendPositionJSON(dst []byte, p StreamPosition) []byte {
	dst = append(dst, `{"seq_num":`...)
	dst = strconv.AppendUint(dst, p.SeqNum, 10)
	dst = append(dst, `,"timestamp":`...)
	dst = strconv.AppendUint(dst, p.Timestamp, 10)
	return append(dst, '}')
}

// AppendReadBatchJSON appends the JSON of a read batch in format f:
// {"records":[{"seq_num","timestamp","headers"?,"body"?}…],"tail"?}. Empty
// headers and bodies are omitted; raw format replaces invalid UTF-8 with
// U+FFFD. It is hand-written because reads are the hot path.
func AppendReadBatchJSON(dst []byte, b *ReadBatch, f Format) []byte {
	// Grow once to the batch's likely size: a 1 MiB batch would otherwise
	// be copied by a dozen doublings.
	n := 0
	for i := range b.Records {
		r := &b.Records[i]
		n += len(r.Body) + 64
		for _, h := range r.Headers {
			n += len(h.Name) + len(h.Value) + 8
		}
	}
	if f == FormatBase64 {
		n = n/3*4 + 4
	}
	dst = slices.Grow(dst, n+64)
	dst = append(dst, `{"records":[`...)
	for i := range b.Records {
		r := &b.Records[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"seq_num":`...)
		dst = strconv.AppendUint(dst, r.SeqNum, 10)
		dst = append(dst, `,"timestamp":`...)
		dst = strconv.AppendUint(dst, r.ts(), 10)
		if len(r.Headers) > 0 {
			dst = append(dst, `,"headers":[`...)
			for j, h := range r.Headers {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, '[')
				dst = appendBytesJSON(dst, h.Name, f)
				dst = append(dst, ',')
				dst = appendBytesJSON(dst, h.Value, f)
				dst = append(dst, ']')
			}
			dst = append(dst, ']')
		}
		if len(r.Body) > 0 {
			dst = append(dst, `,"body":`...)
			dst = appendBytesJSON(dst, r.Body, f)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	if b.Tail != nil {
		dst = append(dst, `,"tail":`...)
		dst = appendPositionJSON(dst, *b.Tail)
	}
	return append(dst, '}')
}

// EncodeReadBatchJSON is AppendReadBatchJSON into a new slice.
func EncodeReadBatchJSON(b *ReadBatch, f Format) []byte {
	return AppendReadBatchJSON(make([]byte, 0, 64+int(MeteredBytes(b.Records))*2), b, f)
}

// DecodeReadBatchJSON decodes a JSON read batch in format f (for clients).
// Every record must carry seq_num and timestamp; missing headers and body
// are empty.
func DecodeReadBatchJSON(body []byte, f Format) (*ReadBatch, *Error) {
	if err := checkJSONText(body); err != nil {
		return nil, BadJSON("read batch: %v", err)
	}
	var w readBatchJSON
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, BadJSON("read batch: %s", jsonMessage(err))
	}
	if w.Records == nil {
		return nil, BadJSON("read batch: missing records")
	}
	b := &ReadBatch{Records: make([]Record, len(w.Records)), Tail: w.Tail}
	for i := range w.Records {
		wr := &w.Records[i]
		if wr.SeqNum == nil || wr.Timestamp == nil {
			return nil, BadJSON("read batch: record %d lacks seq_num or timestamp", i)
		}
		r := &b.Records[i]
		r.SeqNum = *wr.SeqNum
		r.Timestamp = wr.Timestamp
		var err error
		if r.Body, err = decodeBytes(wr.Body, f); err != nil {
			return nil, Invalid("read batch: record %d body: %v", i, err)
		}
		if len(wr.Headers) > 0 {
			r.Headers = make([]Header, len(wr.Headers))
		}
		for j, h := range wr.Headers {
			if r.Headers[j].Name, err = decodeBytes(h.name, f); err != nil {
				return nil, Invalid("read batch: record %d header %d name: %v", i, j, err)
			}
			if r.Headers[j].Value, err = decodeBytes(h.value, f); err != nil {
				return nil, Invalid("read batch: record %d header %d value: %v", i, j, err)
			}
		}
	}
	return b, nil
}

type positionJSON struct {
	SeqNum    *uint64 `json:"seq_num"`
	Timestamp *uint64 `json:"timestamp"`
}

func (p *positionJSON) get(field string) (StreamPosition, *Error) {
	if p == nil || p.SeqNum == nil || p.Timestamp == nil {
		return StreamPosition{}, BadJSON("%s: a position needs seq_num and timestamp", field)
	}
	return StreamPosition{SeqNum: *p.SeqNum, Timestamp: *p.Timestamp}, nil
}

// EncodeAppendAckJSON encodes {"start","end","tail"}.
func EncodeAppendAckJSON(a AppendAck) []byte {
	dst := append(make([]byte, 0, 160), `{"start":`...)
	dst = appendPositionJSON(dst, a.Start)
	dst = append(dst, `,"end":`...)
	dst = appendPositionJSON(dst, a.End)
	dst = append(dst, `,"tail":`...)
	dst = appendPositionJSON(dst, a.Tail)
	return append(dst, '}')
}

// DecodeAppendAckJSON decodes an append ack (for clients); all three
// positions must be complete.
func DecodeAppendAckJSON(body []byte) (AppendAck, *Error) {
	var w struct {
		Start *positionJSON `json:"start"`
		End   *positionJSON `json:"end"`
		Tail  *positionJSON `json:"tail"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return AppendAck{}, BadJSON("append ack: %s", jsonMessage(err))
	}
	var a AppendAck
	var err *Error
	if a.Start, err = w.Start.get("start"); err != nil {
		return AppendAck{}, err
	}
	if a.End, err = w.End.get("end"); err != nil {
		return AppendAck{}, err
	}
	if a.Tail, err = w.Tail.get("tail"); err != nil {
		return AppendAck{}, err
	}
	return a, nil
}

// EncodeTailJSON encodes the check-tail body {"tail":{…}}.
func EncodeTailJSON(tail StreamPosition) []byte {
	return append(appendPositionJSON(append(make([]byte, 0, 64), `{"tail":`...), tail), '}')
}

// DecodeTailJSON decodes a check-tail (or 416) body (for clients).
func DecodeTailJSON(body []byte) (StreamPosition, *Error) {
	var w struct {
		Tail *positionJSON `json:"tail"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return StreamPosition{}, BadJSON("tail: %s", jsonMessage(err))
	}
	return w.Tail.get("tail")
}
