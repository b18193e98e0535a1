package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"
)

// Error codes of the standard error body, by HTTP status (S2 error codes).
const (
	// 400
	CodeBadHeader = "bad_header"
	CodeBadPath   = "bad_path"
	CodeBadQuery  = "bad_query"
	CodeBadJSON   = "bad_json"
	CodeBadProto  = "bad_proto"
	CodeBadFrame  = "bad_frame"
	// 403
	CodePermissionDenied = "permission_denied"
	CodeQuotaExhausted   = "quota_exhausted" // S2's status for it too (a basin's quota, star/quota)
	// 404
	CodeBasinNotFound    = "basin_not_found"
	CodeStreamNotFound   = "stream_not_found"
	CodeDecryptionFailed = "decryption_failed"
	// 408 (S2 renamed it from "timeout")
	CodeRequestTimeout = "request_timeout"
	CodeTimeout        = CodeRequestTimeout
	// 409
	CodeResourceAlreadyExists = "resource_already_exists"
	CodeBasinDeletionPending  = "basin_deletion_pending"
	CodeStreamDeletionPending = "stream_deletion_pending"
	CodeTransactionConflict   = "transaction_conflict"
	// 422
	CodeInvalid = "invalid"
	// 429
	CodeRateLimited = "rate_limited"
	// 500
	CodeStorage = "storage"
	CodeOther   = "other"
	// 502
	CodeHotServer = "hot_server"
	// 501
	CodeNotImplemented = "not_implemented"
	// 503
	CodeUnavailable    = "unavailable"
	CodeServerDraining = "server_draining"
)

// Codes of the special bodies. They never appear on the wire as "code": the
// 412 and 416 bodies have their own shapes; these name them in Go.
const (
	CodeSeqNumMismatch       = "seq_num_mismatch"
	CodeFencingTokenMismatch = "fencing_token_mismatch"
	CodeRangeNotSatisfiable  = "range_not_satisfiable"
)

// codeUnknown is given to a parsed error whose body carried no code.
const codeUnknown = "unknown"

// maxParsedMessage bounds the message kept from a non-JSON error body.
const maxParsedMessage = 512

// Error is an API failure: the HTTP status, the code and message of the
// standard body {"code","message"}, or, for 412 and 416, the exact special
// body. The server writes it with Status and JSON(); the SDK gets it back
// from ParseError.
type Error struct {
	Status  int
	Code    string
	Message string
	// Body, when non-nil, replaces the standard body: an
	// AppendConditionFailed (412) or a TailResponse (416).
	Body any
	// RetryAfter, when positive, is how long the client should wait before
	// retrying (a 429): the server sends it as Retry-After (whole seconds,
	// rounded up) and retry-after-ms (what S2's Rust SDK reads).
	RetryAfter time.Duration
}

// ErrorInfo is the standard error body.
type ErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// AppendConditionFailed is the 412 body: exactly one field is set.
type AppendConditionFailed struct {
	// SeqNumMismatch is the next seq num the stream would assign.
	SeqNumMismatch *uint64 `json:"seq_num_mismatch,omitempty"`
	// FencingTokenMismatch is the stream's current fencing token.
	FencingTokenMismatch *string `json:"fencing_token_mismatch,omitempty"`
}

func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// JSON renders the response body: the special body if set, otherwise
// {"code","message"}.
func (e *Error) JSON() []byte {
	var v any = ErrorInfo{Code: e.Code, Message: e.Message}
	if e.Body != nil {
		v = e.Body
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own body types are ever set; this cannot happen.
		b, _ = json.Marshal(ErrorInfo{Code: CodeOther, Message: "unencodable error body"})
	}
	return b
}

// ExpectedSeqNum is the stream's next seq num carried by a 412
// seq_num_mismatch.
func (e *Error) ExpectedSeqNum() (uint64, bool) {
	if b, ok := e.Body.(AppendConditionFailed); ok && b.SeqNumMismatch != nil {
		return *b.SeqNumMismatch, true
	}
	return 0, false
}

// CurrentFencingToken is the stream's token carried by a 412
// fencing_token_mismatch.
func (e *Error) CurrentFencingToken() (string, bool) {
	if b, ok := e.Body.(AppendConditionFailed); ok && b.FencingTokenMismatch != nil {
		return *b.FencingTokenMismatch, true
	}
	return "", false
}

// Tail is the stream tail carried by a 416.
func (e *Error) Tail() (StreamPosition, bool) {
	if b, ok := e.Body.(TailResponse); ok {
		return b.Tail, true
	}
	return StreamPosition{}, false
}

// Definite reports whether the failure proves that the request had no
// effect; otherwise it is indefinite: a write may or may not have happened.
//
// The rule: a response in which the server rejected the request before
// acting on it is definite. That is every 4xx except 408 (the server gave
// up waiting, e.g. on durability, and the write may still land) and 499,
// plus 502 hot_server (refused by an overloaded server before admission),
// 501 not_implemented (nothing to act with) and 503 server_draining (a
// draining star acknowledges every input it took before it says so: what
// is unacknowledged was never applied). It includes 409 transaction_conflict, which aborts the operation, 412
// condition failures, 416 and 429 rate_limited. Every other 5xx (storage,
// other, unavailable), 408, and any failure without a response (transport errors,
// timeouts, cancellations: see IsDefinite) is indefinite.
func (e *Error) Definite() bool {
	switch {
	case e.Status == http.StatusRequestTimeout || e.Status == 499:
		return false
	case e.Status >= 400 && e.Status < 500:
		return true
	case e.Status == http.StatusBadGateway && e.Code == CodeHotServer,
		e.Status == http.StatusServiceUnavailable && e.Code == CodeServerDraining,
		e.Status == http.StatusNotImplemented:
		return true
	default:
		return false
	}
}

// Retryable reports whether retrying the same request may succeed: the
// statuses the official SDKs retry (408, 429, 500, 502, 503, 504) and 409
// transaction_conflict. Whether a retry may duplicate a write is Definite's
// question, not this one's.
func (e *Error) Retryable() bool {
	switch e.Status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		return e.Code == CodeTransactionConflict
	}
	return false
}

// IsDefinite reports whether err proves that a request had no effect. Only
// an *Error can; a transport error, a timeout or a cancellation is always
// indefinite.
func IsDefinite(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Definite()
}

// newError builds a standard error.
func newError(status int, code, format string, args ...any) *Error {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	return &Error{Status: status, Code: code, Message: msg}
}

// BadHeader is 400 bad_header: a missing or malformed request header.
func BadHeader(format string, args ...any) *Error {
	return newError(http.StatusBadRequest, CodeBadHeader, format, args...)
}

// BadPath is 400 bad_path: a malformed path segment.
func BadPath(format string, args ...any) *Error {
	return newError(http.StatusBadRequest, CodeBadPath, format, args...)
}

// BadQuery is 400 bad_query: a malformed query parameter.
func BadQuery(format string, args ...any) *Error {
	return newError(http.StatusBadRequest, CodeBadQuery, format, args...)
}

// BadJSON is 400 bad_json: a body that is not the expected JSON.
func BadJSON(format string, args ...any) *Error {
	return newError(http.StatusBadRequest, CodeBadJSON, format, args...)
}

// BadProto is 400 bad_proto: a body that is not the expected protobuf.
func BadProto(format string, args ...any) *Error {
	return newError(http.StatusBadRequest, CodeBadProto, format, args...)
}

// BadFrame is 400 bad_frame: a malformed s2s frame.
func BadFrame(format string, args ...any) *Error {
	return newError(http.StatusBadRequest, CodeBadFrame, format, args...)
}

// PermissionDenied is 403 permission_denied.
func PermissionDenied(format string, args ...any) *Error {
	return newError(http.StatusForbidden, CodePermissionDenied, format, args...)
}

// BasinNotFound is 404 basin_not_found.
func BasinNotFound(format string, args ...any) *Error {
	return newError(http.StatusNotFound, CodeBasinNotFound, format, args...)
}

// StreamNotFound is 404 stream_not_found.
func StreamNotFound(format string, args ...any) *Error {
	return newError(http.StatusNotFound, CodeStreamNotFound, format, args...)
}

// Timeout is 408 request_timeout: the server gave up; the outcome is
// indefinite.
func Timeout(format string, args ...any) *Error {
	return newError(http.StatusRequestTimeout, CodeRequestTimeout, format, args...)
}

// DecryptionFailed is 400 decryption_failed: a record did not decrypt with
// the key the read gave.
func DecryptionFailed(format string, args ...any) *Error {
	return newError(http.StatusBadRequest, CodeDecryptionFailed, format, args...)
}

// NotImplemented is 501 not_implemented: an S2 endpoint or feature this
// deployment does not offer.
func NotImplemented(format string, args ...any) *Error {
	return newError(http.StatusNotImplemented, CodeNotImplemented, format, args...)
}

// ResourceAlreadyExists is 409 resource_already_exists.
func ResourceAlreadyExists(format string, args ...any) *Error {
	return newError(http.StatusConflict, CodeResourceAlreadyExists, format, args...)
}

// BasinDeletionPending is 409 basin_deletion_pending.
func BasinDeletionPending(format string, args ...any) *Error {
	return newError(http.StatusConflict, CodeBasinDeletionPending, format, args...)
}

// StreamDeletionPending is 409 stream_deletion_pending.
func StreamDeletionPending(format string, args ...any) *Error {
	return newError(http.StatusConflict, CodeStreamDeletionPending, format, args...)
}

// TransactionConflict is 409 transaction_conflict (retryable).
func TransactionConflict(format string, args ...any) *Error {
	return newError(http.StatusConflict, CodeTransactionConflict, format, args...)
}

// QuotaExhausted is 403 quota_exhausted: a basin's quota refuses the
// request (star/quota). S2 answers its code with 403, as PermissionDenied:
// definite, and not retried by the SDKs.
func QuotaExhausted(format string, args ...any) *Error {
	return newError(http.StatusForbidden, CodeQuotaExhausted, format, args...)
}

// Invalid is 422 invalid: well-formed but semantically invalid input.
func Invalid(format string, args ...any) *Error {
	return newError(http.StatusUnprocessableEntity, CodeInvalid, format, args...)
}

// RateLimited is 429 rate_limited.
func RateLimited(format string, args ...any) *Error {
	return newError(http.StatusTooManyRequests, CodeRateLimited, format, args...)
}

// RateLimitedAfter is 429 rate_limited with the wait a retry should take.
func RateLimitedAfter(wait time.Duration, format string, args ...any) *Error {
	e := RateLimited(format, args...)
	e.RetryAfter = wait
	return e
}

// Storage is 500 storage: the storage layer failed.
func Storage(format string, args ...any) *Error {
	return newError(http.StatusInternalServerError, CodeStorage, format, args...)
}

// Other is 500 other: any other internal failure.
func Other(format string, args ...any) *Error {
	return newError(http.StatusInternalServerError, CodeOther, format, args...)
}

// HotServer is 502 hot_server: refused before admission by an overloaded
// server.
func HotServer(format string, args ...any) *Error {
	return newError(http.StatusBadGateway, CodeHotServer, format, args...)
}

// Unavailable is 503 unavailable.
func Unavailable(format string, args ...any) *Error {
	return newError(http.StatusServiceUnavailable, CodeUnavailable, format, args...)
}

// ServerDraining is 503 server_draining: the star is shutting down and took
// nothing of the request (a session: nothing unacknowledged); retry at once
// on another connection.
func ServerDraining(format string, args ...any) *Error {
	return newError(http.StatusServiceUnavailable, CodeServerDraining, format, args...)
}

// SeqNumMismatch is the 412 for a failed match_seq_num; next is the seq num
// the stream would assign.
func SeqNumMismatch(next uint64) *Error {
	return &Error{
		Status:  http.StatusPreconditionFailed,
		Code:    CodeSeqNumMismatch,
		Message: fmt.Sprintf("sequence number mismatch: next is %d", next),
		Body:    AppendConditionFailed{SeqNumMismatch: &next},
	}
}

// FencingTokenMismatch is the 412 for a failed fencing_token; current is the
// stream's token.
func FencingTokenMismatch(current string) *Error {
	return &Error{
		Status:  http.StatusPreconditionFailed,
		Code:    CodeFencingTokenMismatch,
		Message: fmt.Sprintf("fencing token mismatch: current is %q", current),
		Body:    AppendConditionFailed{FencingTokenMismatch: &current},
	}
}

// RangeNotSatisfiable is the 416 for a read that starts past (or, when it
// cannot wait, at) the tail.
func RangeNotSatisfiable(tail StreamPosition) *Error {
	return &Error{
		Status:  http.StatusRequestedRangeNotSatisfiable,
		Code:    CodeRangeNotSatisfiable,
		Message: fmt.Sprintf("read start is beyond the tail %d", tail.SeqNum),
		Body:    TailResponse{Tail: tail},
	}
}

// ParseError turns an error response (status and body) back into an
// *Error, recognising the 412 and 416 special bodies. It never fails: a
// body that is not JSON is kept, truncated, as the message.
func ParseError(status int, body []byte) *Error {
	switch status {
	case http.StatusPreconditionFailed:
		var raw map[string]json.RawMessage
		if json.Unmarshal(body, &raw) == nil && len(raw) == 1 {
			if v, ok := raw["seq_num_mismatch"]; ok {
				var n uint64
				if json.Unmarshal(v, &n) == nil {
					return SeqNumMismatch(n)
				}
			}
			if v, ok := raw["fencing_token_mismatch"]; ok {
				var tok string
				if json.Unmarshal(v, &tok) == nil {
					return FencingTokenMismatch(tok)
				}
			}
		}
	case http.StatusRequestedRangeNotSatisfiable:
		var t struct {
			Tail *StreamPosition `json:"tail"`
		}
		if json.Unmarshal(body, &t) == nil && t.Tail != nil {
			return RangeNotSatisfiable(*t.Tail)
		}
	}
	var info ErrorInfo
	if json.Unmarshal(body, &info) == nil && info.Code != "" {
		if e := parseProducerConflict(status, info.Code, body); e != nil {
			return e
		}
		return &Error{Status: status, Code: info.Code, Message: info.Message}
	}
	msg := bytes.TrimSpace(body)
	if len(msg) > maxParsedMessage {
		msg = msg[:maxParsedMessage]
	}
	text := string(msg)
	if !utf8.ValidString(text) {
		text = toValidUTF8(msg)
	}
	if text == "" {
		text = http.StatusText(status)
	}
	return &Error{Status: status, Code: codeUnknown, Message: text}
}
