package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// decodeAppendJSONRef is the encoding/json decoder DecodeAppendJSON
// replaced, kept as the reference its differential fuzz test compares
// against. It decodes and validates a JSON append body
// {"records":[…],"match_seq_num"?,"fencing_token"?} in format f. Malformed
// JSON is 400 bad_json; bad base64 and every ValidateAppendInput failure are
// 422 invalid.
func decodeAppendJSONRef(body []byte, f Format) (*AppendInput, *Error) {
	if err := checkJSONText(body); err != nil {
		return nil, BadJSON("append: %v", err)
	}
	var w appendInputJSON
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, BadJSON("append: %s", jsonMessage(err))
	}
	if len(w.Records) > MaxBatchRecords {
		return nil, Invalid("an append batch holds at most %d records, got %d", MaxBatchRecords, len(w.Records))
	}
	in := &AppendInput{
		Records:      make([]Record, len(w.Records)),
		MatchSeqNum:  w.MatchSeqNum,
		FencingToken: w.FencingToken,
	}
	for i := range w.Records {
		wr := &w.Records[i]
		r := &in.Records[i]
		r.Timestamp = wr.Timestamp
		var err error
		if r.Body, err = decodeBytes(wr.Body, f); err != nil {
			return nil, Invalid("record %d: body: %v", i, err)
		}
		if len(wr.Headers) > 0 {
			r.Headers = make([]Header, len(wr.Headers))
		}
		for j, h := range wr.Headers {
			if r.Headers[j].Name, err = decodeBytes(h.name, f); err != nil {
				return nil, Invalid("record %d: header %d name: %v", i, j, err)
			}
			if r.Headers[j].Value, err = decodeBytes(h.value, f); err != nil {
				return nil, Invalid("record %d: header %d value: %v", i, j, err)
			}
		}
	}
	if err := ValidateAppendInput(in); err != nil {
		return nil, err
	}
	return in, nil
}

// FuzzDecodeAppendJSONReference: the hand-written decoder accepts and
// rejects what encoding/json did, with the same status and the same
// records, except where it is stricter on purpose (append_json.go): a key
// that matches a field only by folding case, and a repeated key (encoding/json
// reuses an earlier array's elements; the last value wins here).
func FuzzDecodeAppendJSONReference(f *testing.F) {
	for _, s := range []string{
		`{"records":[{"timestamp":1,"headers":[["k","v"]],"body":"hello"}],"match_seq_num":0,"fencing_token":"w1"}`,
		`{"records":[{"headers":[["AA==","/w=="]],"body":"AP8="}]}`,
		`{"records":[{"body":"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"}],"x":[1,-2.5e3,true,false,null,{"y":{}}]}`,
		`{"records":[{"body":"\ud800"}]}`, `{"records":[{"body":"\udc00x"}]}`,
		`{"records":[null,{}],"match_seq_num":null,"fencing_token":null}`,
		`{"records":[{"timestamp":18446744073709551615}]}`, `{"records":[{"timestamp":18446744073709551616}]}`,
		`{"records":[{"timestamp":1e3}]}`, `{"records":[{"timestamp":-0}]}`, `{"records":[{"timestamp":01}]}`,
		`{"records":[{"body":"not base64!"}],"x":}`, `{"records":[{"headers":[["a","b","c"]]}]}`,
		` null `, `[]`, `"x"`, `{"records":[{"body":"é"}]}`, "{\"records\":[{\"body\":\"\xff\"}]}",
		"{\"records\":[{\"body\":\"a\tb\"}]}",
		`{"records":[{"body":"AA\n=="}]}`, "{\"records\":[{\"body\":\"AA\n==\"}]}", `{"records":[{"body":"AA\u003d="}]}`, `{"records":[{"body":"AP8"}]}`, `{"records":[{}],"fencing_token":5}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, b64 bool) {
		if awkwardKeys(data) {
			t.Skip()
		}
		fm := formatOf(b64)
		got, gerr := DecodeAppendJSON(data, fm)
		want, werr := decodeAppendJSONRef(data, fm)
		switch {
		case gerr == nil && werr == nil:
			if !equalInput(got, want) {
				t.Fatalf("%q: decoded\n%+v\nencoding/json decoded\n%+v", data, got, want)
			}
		case gerr == nil || werr == nil:
			t.Fatalf("%q: err %v, encoding/json err %v", data, gerr, werr)
		case gerr.Status != werr.Status || gerr.Code != werr.Code:
			t.Fatalf("%q: err %v, encoding/json err %v", data, gerr, werr)
		}
	})
}

// awkwardKeys reports an object key that names a field only by folding
// case, or a key repeated in one object.
func awkwardKeys(data []byte) bool {
	fields := []string{"records", "match_seq_num", "fencing_token", "timestamp", "headers", "body"}
	type frame struct {
		object, wantKey bool
		seen            map[string]bool
	}
	var stack []*frame
	d := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.wantKey {
			if k, ok := tok.(string); ok {
				if top.seen[k] {
					return true
				}
				top.seen[k] = true
				for _, f := range fields {
					if k != f && strings.EqualFold(k, f) {
						return true
					}
				}
				top.wantKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, wantKey: true, seen: map[string]bool{}})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object wants its next key.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].wantKey = true
		}
	}
}

// Where the decoder departs from encoding/json on purpose.
func TestDecodeAppendJSONStricterThanEncodingJSON(t *testing.T) {
	// Field names match exactly (serde's rule), so "Records" is unknown.
	if _, err := DecodeAppendJSON([]byte(`{"Records":[{"body":"x"}]}`), FormatRaw); err == nil || err.Code != CodeInvalid {
		t.Fatalf("case-folded key: %v, want 422 (no records)", err)
	}
	if _, err := decodeAppendJSONRef([]byte(`{"Records":[{"body":"x"}]}`), FormatRaw); err != nil {
		t.Fatalf("encoding/json folded the key: %v", err)
	}
	// A repeated key keeps its last value, fresh: encoding/json decoded the
	// second array into the first one's elements, keeping "x".
	in, err := DecodeAppendJSON([]byte(`{"records":[{"body":"x"}],"records":[{}]}`), FormatRaw)
	if err != nil || len(in.Records) != 1 || len(in.Records[0].Body) != 0 {
		t.Fatalf("repeated records: %+v %v, want one empty record", in, err)
	}
	// A bad base64 string in a replaced array is not an error.
	if _, err := DecodeAppendJSON([]byte(`{"records":[{"body":"!"}],"records":[{"body":"AA=="}]}`), FormatBase64); err != nil {
		t.Fatalf("replaced bad base64: %v", err)
	}
	// Decoded bytes do not share capacity: appending to one body cannot
	// overwrite the next.
	in, err = DecodeAppendJSON([]byte(`{"records":[{"body":"ab"},{"body":"cd"}]}`), FormatRaw)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(in.Records[0].Body, 'z')
	if string(in.Records[1].Body) != "cd" {
		t.Fatalf("second body %q after appending to the first", in.Records[1].Body)
	}
}
