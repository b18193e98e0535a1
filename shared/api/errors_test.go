package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

func TestErrorConstructorsStatusAndCode(t *testing.T) {
	cases := []struct {
		err    *Error
		status int
		code   string
	}{
		{BadHeader("x"), 400, "bad_header"},
		{BadPath("x"), 400, "bad_path"},
		{BadQuery("x"), 400, "bad_query"},
		{BadJSON("x"), 400, "bad_json"},
		{BadProto("x"), 400, "bad_proto"},
		{BadFrame("x"), 400, "bad_frame"},
		{PermissionDenied("x"), 403, "permission_denied"},
		{BasinNotFound("x"), 404, "basin_not_found"},
		{StreamNotFound("x"), 404, "stream_not_found"},
		{Timeout("x"), 408, "request_timeout"},
		{DecryptionFailed("x"), 400, "decryption_failed"},
		{NotImplemented("x"), 501, "not_implemented"},
		{ServerDraining("x"), 503, "server_draining"},
		{ResourceAlreadyExists("x"), 409, "resource_already_exists"},
		{BasinDeletionPending("x"), 409, "basin_deletion_pending"},
		{StreamDeletionPending("x"), 409, "stream_deletion_pending"},
		{TransactionConflict("x"), 409, "transaction_conflict"},
		{Invalid("x"), 422, "invalid"},
		{RateLimited("x"), 429, "rate_limited"},
		{Storage("x"), 500, "storage"},
		{Other("x"), 500, "other"},
		{HotServer("x"), 502, "hot_server"},
		{Unavailable("x"), 503, "unavailable"},
		{SeqNumMismatch(7), 412, CodeSeqNumMismatch},
		{FencingTokenMismatch("w1"), 412, CodeFencingTokenMismatch},
		{RangeNotSatisfiable(StreamPosition{3, 4}), 416, CodeRangeNotSatisfiable},
	}
	for _, c := range cases {
		if c.err.Status != c.status || c.err.Code != c.code {
			t.Errorf("%v: got %d %s, want %d %s", c.err, c.err.Status, c.err.Code, c.status, c.code)
		}
		// Every error survives the wire: the SDK must see what the server sent.
		back := ParseError(c.err.Status, c.err.JSON())
		if back.Status != c.err.Status || back.Code != c.err.Code || back.Message != c.err.Message {
			t.Errorf("ParseError(%s) = %+v, want %+v", c.err.JSON(), back, c.err)
		}
	}
}

func TestErrorFormatting(t *testing.T) {
	e := Invalid("record %d: %s", 3, "bad")
	if e.Message != "record 3: bad" {
		t.Fatalf("message %q", e.Message)
	}
	if e := Other("%d%% sure", 100); e.Message != "100% sure" {
		t.Fatalf("message %q", e.Message)
	}
	if got := e.Error(); got != "422 invalid: record 3: bad" {
		t.Fatalf("Error() = %q", got)
	}
}

func TestErrorBodiesGolden(t *testing.T) {
	cases := []struct {
		err  *Error
		want string
	}{
		{StreamNotFound("stream %q not found", "a/b"), `{"code":"stream_not_found","message":"stream \"a/b\" not found"}`},
		{SeqNumMismatch(42), `{"seq_num_mismatch":42}`},
		{FencingTokenMismatch("w1"), `{"fencing_token_mismatch":"w1"}`},
		{FencingTokenMismatch(""), `{"fencing_token_mismatch":""}`},
		{RangeNotSatisfiable(StreamPosition{SeqNum: 10, Timestamp: 1700000000000}), `{"tail":{"seq_num":10,"timestamp":1700000000000}}`},
		{RangeNotSatisfiable(StreamPosition{}), `{"tail":{"seq_num":0,"timestamp":0}}`},
	}
	for _, c := range cases {
		if got := string(c.err.JSON()); got != c.want {
			t.Errorf("JSON() = %s, want %s", got, c.want)
		}
	}
}

func TestParseErrorSpecialBodies(t *testing.T) {
	e := ParseError(412, []byte(`{"seq_num_mismatch":18446744073709551615}`))
	if n, ok := e.ExpectedSeqNum(); !ok || n != 1<<64-1 {
		t.Fatalf("ExpectedSeqNum = %d %v", n, ok)
	}
	if _, ok := e.CurrentFencingToken(); ok {
		t.Fatal("seq mismatch must not carry a token")
	}
	e = ParseError(412, []byte(`{"fencing_token_mismatch":"w1"}`))
	if tok, ok := e.CurrentFencingToken(); !ok || tok != "w1" {
		t.Fatalf("CurrentFencingToken = %q %v", tok, ok)
	}
	e = ParseError(416, []byte(`{"tail":{"seq_num":5,"timestamp":9}}`))
	if tail, ok := e.Tail(); !ok || tail != (StreamPosition{5, 9}) {
		t.Fatalf("Tail = %+v %v", tail, ok)
	}
	// A 412 with both keys is not one of the two shapes: keep it generic.
	e = ParseError(412, []byte(`{"seq_num_mismatch":1,"fencing_token_mismatch":"x"}`))
	if _, ok := e.ExpectedSeqNum(); ok || e.Code != codeUnknown {
		t.Fatalf("ambiguous 412 parsed as %+v", e)
	}
}

func TestParseErrorNonJSON(t *testing.T) {
	e := ParseError(502, []byte("  <html>bad gateway</html>\n"))
	if e.Status != 502 || e.Code != codeUnknown || e.Message != "<html>bad gateway</html>" {
		t.Fatalf("got %+v", e)
	}
	e = ParseError(503, nil)
	if e.Message != "Service Unavailable" {
		t.Fatalf("empty body message %q", e.Message)
	}
	long := make([]byte, 10000)
	for i := range long {
		long[i] = 0xff
	}
	e = ParseError(500, long)
	if len(e.Message) > 3*maxParsedMessage {
		t.Fatalf("message not bounded: %d bytes", len(e.Message))
	}
}

func TestDefiniteClassification(t *testing.T) {
	definite := []*Error{
		BadHeader("x"), BadJSON("x"), BadProto("x"), BadFrame("x"), Invalid("x"),
		StreamNotFound("x"), BasinNotFound("x"), ResourceAlreadyExists("x"),
		StreamDeletionPending("x"), TransactionConflict("x"), SeqNumMismatch(1),
		FencingTokenMismatch("a"), RangeNotSatisfiable(StreamPosition{}),
		RateLimited("x"), HotServer("x"), PermissionDenied("x"),
		ServerDraining("x"), NotImplemented("x"), DecryptionFailed("x"), QuotaExhausted("x"),
	}
	indefinite := []*Error{
		Timeout("x"), Storage("x"), Other("x"), Unavailable("x"),
		{Status: 504, Code: codeUnknown}, {Status: 502, Code: codeUnknown},
		{Status: 499, Code: "client_hangup"}, {Status: 0},
	}
	for _, e := range definite {
		if !e.Definite() {
			t.Errorf("%v should be definite", e)
		}
		if !IsDefinite(fmt.Errorf("append: %w", e)) {
			t.Errorf("wrapped %v should be definite", e)
		}
	}
	for _, e := range indefinite {
		if e.Definite() || IsDefinite(e) {
			t.Errorf("%v should be indefinite", e)
		}
	}
	for _, err := range []error{io.ErrUnexpectedEOF, errors.New("connection reset"), nil} {
		if IsDefinite(err) {
			t.Errorf("IsDefinite(%v) = true", err)
		}
	}
}

func TestRetryable(t *testing.T) {
	retry := map[int]bool{408: true, 429: true, 500: true, 502: true, 503: true, 504: true}
	for _, status := range []int{400, 403, 404, 408, 409, 412, 416, 422, 429, 500, 502, 503, 504} {
		e := &Error{Status: status, Code: "x"}
		if got := e.Retryable(); got != retry[status] {
			t.Errorf("status %d Retryable = %v", status, got)
		}
	}
	if !TransactionConflict("x").Retryable() || ResourceAlreadyExists("x").Retryable() {
		t.Error("409: only transaction_conflict is retryable")
	}
	if http.StatusText(SeqNumMismatch(1).Status) != "Precondition Failed" {
		t.Error("412 status")
	}
}

func TestParseRetryAfter(t *testing.T) {
	for _, c := range []struct {
		h    map[string]string
		want time.Duration
	}{
		{map[string]string{HeaderRetryAfterMs: "250", HeaderRetryAfter: "1"}, 250 * time.Millisecond},
		{map[string]string{HeaderRetryAfter: "3"}, 3 * time.Second},
		{map[string]string{HeaderRetryAfter: "Wed, 21 Oct 2015 07:28:00 GMT"}, 0},
		{map[string]string{HeaderRetryAfterMs: "-5"}, 0},
		{nil, 0},
	} {
		if got := ParseRetryAfter(func(k string) string { return c.h[k] }); got != c.want {
			t.Errorf("%v: %v, want %v", c.h, got, c.want)
		}
	}
}
