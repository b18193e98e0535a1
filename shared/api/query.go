package api

import (
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Read limits of unary (non-session) reads.
const (
	MaxUnaryReadCount = MaxBatchRecords
	MaxUnaryReadBytes = MaxBatchMeteredBytes
	MaxUnaryReadWait  = 60 * time.Second
)

// List limits.
const (
	MaxListLimit = 1000
)

// ReadFrom is where a read starts.
type ReadFrom uint8

const (
	// FromTailOffset starts Value records before the tail (saturating at 0).
	FromTailOffset ReadFrom = iota
	// FromSeqNum starts at seq num Value.
	FromSeqNum
	// FromTimestamp starts at the first record with timestamp ≥ Value.
	FromTimestamp
)

// ReadMode selects the caps a read query gets.
type ReadMode uint8

const (
	// ReadUnary is a single JSON or protobuf response: count ≤ 1000, bytes ≤
	// 1 MiB (both always bounded), wait ≤ 60 s.
	ReadUnary ReadMode = iota
	// ReadSession is SSE or s2s: limits are uncapped.
	ReadSession
)

// ReadRequest is a parsed read query. Nil pointers are "not given".
type ReadRequest struct {
	From  ReadFrom
	Value uint64 // seq num, timestamp or tail offset, by From
	// Clamp starts at the tail instead of failing 416 when the start is
	// past it.
	Clamp bool
	// Count and Bytes bound the records and metered bytes returned; a read
	// stops before exceeding either. Zero returns nothing.
	Count *uint64
	Bytes *uint64
	// Until is an exclusive timestamp bound.
	Until *uint64
	// Wait bounds idle time: how long a unary read waits for records, or how
	// long a session may go without a batch. Nil takes the default (see
	// EffectiveWait).
	Wait *time.Duration
}

// Bounded reports whether a count, bytes or until bound is set.
func (r *ReadRequest) Bounded() bool {
	return r.Count != nil || r.Bytes != nil || r.Until != nil
}

// EffectiveWait is the wait that applies: the given one, else infinite
// (forever=true) for an unbounded read, else zero.
func (r *ReadRequest) EffectiveWait() (d time.Duration, forever bool) {
	if r.Wait != nil {
		return *r.Wait, false
	}
	if !r.Bounded() {
		return 0, true
	}
	return 0, false
}

// CanFollow reports whether a read starting exactly at the tail may wait for
// new records rather than answer 416: its limits and until are unbounded,
// or it has a positive wait.
func (r *ReadRequest) CanFollow() bool {
	d, forever := r.EffectiveWait()
	return forever || d > 0
}

// ApplyLastEventID resumes an SSE session: start after id's seq num and
// reduce count and bytes by what was already sent (saturating at zero).
func (r *ReadRequest) ApplyLastEventID(id LastEventID) {
	r.From = FromSeqNum
	r.Value = id.SeqNum
	if r.Value != ^uint64(0) {
		r.Value++
	}
	if r.Count != nil {
		r.Count = Uint64(subSat(*r.Count, id.Count))
	}
	if r.Bytes != nil {
		r.Bytes = Uint64(subSat(*r.Bytes, id.Bytes))
	}
}

func subSat(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// ParseQuery parses a request's raw query string. Where net/url would
// drop a pair it cannot decode (a malformed escape such as %ZZ, a ";"
// separator) and serve the request as if it were absent, this is 400
// bad_query; so is a value that does not decode to UTF-8 (names and
// prefixes are text). Unknown parameters are kept, for the caller to
// ignore, as S2 does.
func ParseQuery(raw string) (url.Values, *Error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, BadQuery("malformed query: %s", truncate(err.Error(), 128))
	}
	for name, vs := range q {
		for _, v := range vs {
			if !utf8.ValidString(name) || !utf8.ValidString(v) {
				return nil, BadQuery("query parameter %q is not UTF-8 once decoded", truncate(toValidUTF8([]byte(name)), 32))
			}
		}
	}
	return q, nil
}

// readParams are the query parameters a read understands; others are
// ignored, as S2 does.
var readParams = [...]string{"seq_num", "timestamp", "tail_offset", "clamp", "count", "bytes", "until", "wait"}

// ParseReadQuery parses a read's query parameters (seq_num | timestamp |
// tail_offset, clamp, count, bytes, until, wait) and applies mode's caps.
// A malformed or repeated parameter is 400 bad_query; more than one start
// parameter, or a start timestamp at or after until, is 422 invalid. With no
// start parameter the read starts at the tail (tail_offset=0).
func ParseReadQuery(q url.Values, mode ReadMode) (ReadRequest, *Error) {
	var r ReadRequest
	vals := make(map[string]uint64, len(readParams))
	for _, name := range readParams {
		vs, ok := q[name]
		if !ok {
			continue
		}
		if len(vs) != 1 {
			return ReadRequest{}, BadQuery("parameter %s given %d times", name, len(vs))
		}
		v := vs[0]
		if name == "clamp" {
			if v != "true" && v != "false" {
				return ReadRequest{}, BadQuery("clamp must be true or false, got %q", truncate(v, 32))
			}
			r.Clamp = v == "true"
			continue
		}
		bits := 64
		if name == "wait" {
			bits = 32
		}
		n, err := strconv.ParseUint(v, 10, bits)
		if err != nil {
			return ReadRequest{}, BadQuery("%s must be an unsigned %d-bit integer, got %q", name, bits, truncate(v, 32))
		}
		vals[name] = n
	}

	starts := 0
	for _, s := range [...]struct {
		name string
		from ReadFrom
	}{{"seq_num", FromSeqNum}, {"timestamp", FromTimestamp}, {"tail_offset", FromTailOffset}} {
		if v, ok := vals[s.name]; ok {
			starts++
			r.From, r.Value = s.from, v
		}
	}
	if starts > 1 {
		return ReadRequest{}, Invalid("only one of seq_num, timestamp or tail_offset may be given")
	}
	if v, ok := vals["count"]; ok {
		r.Count = Uint64(v)
	}
	if v, ok := vals["bytes"]; ok {
		r.Bytes = Uint64(v)
	}
	if v, ok := vals["until"]; ok {
		r.Until = Uint64(v)
	}
	if v, ok := vals["wait"]; ok {
		d := Seconds(v) // a u32 (S2's type): at most 136 years, in range
		r.Wait = &d
	}

	if mode == ReadUnary {
		r.Count = Uint64(capOr(r.Count, MaxUnaryReadCount))
		r.Bytes = Uint64(capOr(r.Bytes, MaxUnaryReadBytes))
		if r.Wait != nil && *r.Wait > MaxUnaryReadWait {
			d := MaxUnaryReadWait
			r.Wait = &d
		}
	}
	if r.From == FromTimestamp && r.Until != nil && r.Value >= *r.Until {
		return ReadRequest{}, Invalid("start timestamp %d is at or after until %d", r.Value, *r.Until)
	}
	return r, nil
}

func capOr(v *uint64, max uint64) uint64 {
	if v == nil || *v > max {
		return max
	}
	return *v
}

// Query renders the request as query parameters (for clients). A start at
// tail offset 0 is left implicit.
func (r *ReadRequest) Query() url.Values {
	q := url.Values{}
	switch r.From {
	case FromSeqNum:
		q.Set("seq_num", strconv.FormatUint(r.Value, 10))
	case FromTimestamp:
		q.Set("timestamp", strconv.FormatUint(r.Value, 10))
	default:
		if r.Value != 0 {
			q.Set("tail_offset", strconv.FormatUint(r.Value, 10))
		}
	}
	if r.Clamp {
		q.Set("clamp", "true")
	}
	if r.Count != nil {
		q.Set("count", strconv.FormatUint(*r.Count, 10))
	}
	if r.Bytes != nil {
		q.Set("bytes", strconv.FormatUint(*r.Bytes, 10))
	}
	if r.Until != nil {
		q.Set("until", strconv.FormatUint(*r.Until, 10))
	}
	if r.Wait != nil {
		q.Set("wait", strconv.FormatUint(uint64(*r.Wait/time.Second), 10))
	}
	return q
}

// ParseLastEventID parses an SSE Last-Event-ID "seq,count,bytes"; a
// malformed one is 400 bad_header.
func ParseLastEventID(v string) (LastEventID, *Error) {
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return LastEventID{}, BadHeader("last-event-id must be seq_num,count,bytes, got %q", truncate(v, 64))
	}
	var n [3]uint64
	for i, p := range parts {
		x, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return LastEventID{}, BadHeader("last-event-id must be seq_num,count,bytes, got %q", truncate(v, 64))
		}
		n[i] = x
	}
	return LastEventID{SeqNum: n[0], Count: n[1], Bytes: n[2]}, nil
}

func (id LastEventID) String() string {
	b := make([]byte, 0, 48)
	b = strconv.AppendUint(b, id.SeqNum, 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, id.Count, 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, id.Bytes, 10)
	return string(b)
}

// ListRequest is a parsed list query (basins or streams).
type ListRequest struct {
	Prefix     string
	StartAfter string
	// Limit is 1–1000; absent or 0 means 1000, larger values are capped.
	Limit int
}

// ParseListQuery parses prefix, start_after and limit. A malformed or
// repeated parameter is 400 bad_query; a start_after below a non-empty
// prefix is 422 invalid.
func ParseListQuery(q url.Values) (ListRequest, *Error) {
	r := ListRequest{Limit: MaxListLimit}
	get := func(name string) (string, *Error) {
		vs := q[name]
		if len(vs) > 1 {
			return "", BadQuery("parameter %s given %d times", name, len(vs))
		}
		if len(vs) == 0 {
			return "", nil
		}
		return vs[0], nil
	}
	var err *Error
	if r.Prefix, err = get("prefix"); err != nil {
		return ListRequest{}, err
	}
	if r.StartAfter, err = get("start_after"); err != nil {
		return ListRequest{}, err
	}
	lim, err := get("limit")
	if err != nil {
		return ListRequest{}, err
	}
	if lim != "" {
		n, perr := strconv.ParseUint(lim, 10, 64)
		if perr != nil {
			return ListRequest{}, BadQuery("limit must be an unsigned integer, got %q", truncate(lim, 32))
		}
		if n > 0 && n < MaxListLimit {
			r.Limit = int(n)
		}
	}
	if r.StartAfter != "" && r.Prefix != "" && r.StartAfter < r.Prefix {
		return ListRequest{}, Invalid("start_after must not sort before prefix")
	}
	return r, nil
}

// Within refuses a prefix or start_after longer than max bytes, the
// longest name the listing holds (MaxBasinNameLen, MaxStreamNameLen, a
// token id's bound): it could match nothing, and past the metastore's key
// limit it would fail there instead (400 bad_query).
func (r ListRequest) Within(max int) *Error {
	for name, v := range map[string]string{"prefix": r.Prefix, "start_after": r.StartAfter} {
		if len(v) > max {
			return BadQuery("%s is %d bytes; the names listed here are at most %d", name, len(v), max)
		}
	}
	return nil
}

// Query renders the list request as query parameters (for clients).
func (r ListRequest) Query() url.Values {
	q := url.Values{}
	if r.Prefix != "" {
		q.Set("prefix", r.Prefix)
	}
	if r.StartAfter != "" {
		q.Set("start_after", r.StartAfter)
	}
	if r.Limit > 0 {
		q.Set("limit", strconv.Itoa(r.Limit))
	}
	return q
}
