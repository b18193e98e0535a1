package api

import (
	"encoding/binary"
	"unicode/utf8"
)

// Batch and record limits.
const (
	// MaxBatchRecords is the most records one append (or unary read) holds.
	MaxBatchRecords = 1000
	// MaxBatchMeteredBytes bounds an append batch's (and a unary read's)
	// metered size.
	MaxBatchMeteredBytes = 1 << 20
	// MaxFencingTokenBytes bounds a fencing token (UTF-8).
	MaxFencingTokenBytes = 36
)

// Suggested bounds for reading request bodies before decoding. JSON can
// expand bytes up to six-fold (\u00XX escapes in raw, 4/3 in base64), so its
// bound is generous; protobuf adds a few bytes per field.
const (
	MaxAppendJSONBodyBytes  = 8 << 20
	MaxAppendProtoBodyBytes = 2 << 20
	MaxResourceJSONBytes    = 1 << 20
)

// Command names, the value of a command record's single empty-named header.
const (
	CommandFence = "fence"
	CommandTrim  = "trim"
)

// Header is one record header. It has the layout of format.Header, so the
// star converts with format.Header(h).
type Header struct {
	Name  []byte
	Value []byte
}

// Record is the one record model of the API, used by appends and reads
// alike; field for field it matches format.Record except for Timestamp.
type Record struct {
	// SeqNum is assigned by the stream: set on read, ignored on append.
	SeqNum uint64
	// Timestamp in milliseconds. On append it is the optional client
	// timestamp; on read it is always set (a nil one encodes as 0).
	Timestamp *uint64
	Headers   []Header
	Body      []byte
}

// Uint64 returns a pointer to v, for optional fields.
func Uint64(v uint64) *uint64 { return &v }

// String returns a pointer to v, for optional fields.
func String(v string) *string { return &v }

// MeteredSize is S2's metered size of a record:
// 8 + 2·len(headers) + Σ(len(name)+len(value)) + len(body).
func (r *Record) MeteredSize() uint64 {
	n := 8 + 2*uint64(len(r.Headers)) + uint64(len(r.Body))
	for _, h := range r.Headers {
		n += uint64(len(h.Name)) + uint64(len(h.Value))
	}
	return n
}

// MeteredBytes is the metered size of a batch of records.
func MeteredBytes(records []Record) uint64 {
	var n uint64
	for i := range records {
		n += records[i].MeteredSize()
	}
	return n
}

// ts returns the record's timestamp, 0 when unset.
func (r *Record) ts() uint64 {
	if r.Timestamp == nil {
		return 0
	}
	return *r.Timestamp
}

// StreamPosition is a position in a stream: a seq num and a timestamp.
type StreamPosition struct {
	SeqNum    uint64 `json:"seq_num"`
	Timestamp uint64 `json:"timestamp"`
}

// AppendInput is one append batch with its optional conditions.
type AppendInput struct {
	Records []Record
	// MatchSeqNum, if set, must equal the seq num the first record gets.
	MatchSeqNum *uint64
	// FencingToken, if set, must equal the stream's current token.
	FencingToken *string
}

// AppendAck acknowledges a durable batch: Start is the first record, End is
// last+1 with the last record's timestamp, Tail is the stream's tail (at or
// ahead of End).
type AppendAck struct {
	Start StreamPosition `json:"start"`
	End   StreamPosition `json:"end"`
	Tail  StreamPosition `json:"tail"`
}

// ReadBatch is a batch of read records. Tail is set on batches served live
// and on heartbeats (which carry no records).
type ReadBatch struct {
	Records []Record
	Tail    *StreamPosition
}

// TailResponse is the check-tail body and the 416 body.
type TailResponse struct {
	Tail StreamPosition `json:"tail"`
}

// CommandKind distinguishes command records.
type CommandKind uint8

const (
	// NotCommand is an ordinary record.
	NotCommand CommandKind = iota
	// Fence sets the stream's fencing token for later batches.
	Fence
	// Trim deletes records below a seq num, asynchronously.
	Trim
)

// Command is a parsed command record.
type Command struct {
	Kind CommandKind
	// FencingToken is the new token of a fence (empty clears it).
	FencingToken string
	// TrimPoint is the first seq num a trim keeps.
	TrimPoint uint64
}

// HeaderLayout is satisfied by every header type with Header's layout: Header
// itself and format.Header in the star. It lets the star's facade use the one
// command decoder below without converting its headers.
type HeaderLayout interface {
	~struct {
		Name  []byte
		Value []byte
	}
}

// IsCommand reports whether a record with these headers is a command record
// (or an attempt at one): one of its headers has an empty name.
func IsCommand[H HeaderLayout](headers []H) bool {
	for i := range headers {
		if len(Header(headers[i]).Name) == 0 {
			return true
		}
	}
	return false
}

// ParseCommand classifies a record. A command record has exactly one header,
// with an empty name and the command as value: fence (body: the new token,
// UTF-8, at most 36 bytes) or trim (body: an 8-byte big-endian seq num). An
// empty header name anywhere else, or an unknown command, is 422 invalid.
func ParseCommand(r *Record) (Command, *Error) {
	return ParseCommandHeaders(r.Headers, r.Body)
}

// ParseCommandHeaders is ParseCommand on a record's headers and body. It is
// the one decoder of command records (docs/design.md §16.2): the star's facade, which
// decides what a stream accepts, calls it too.
func ParseCommandHeaders[H HeaderLayout](headers []H, body []byte) (Command, *Error) {
	if !IsCommand(headers) {
		return Command{Kind: NotCommand}, nil
	}
	if len(headers) != 1 {
		return Command{}, Invalid("a header with an empty name marks a command record, which must have exactly one header, got %d", len(headers))
	}
	switch cmd := string(Header(headers[0]).Value); cmd {
	case CommandFence:
		if len(body) > MaxFencingTokenBytes {
			return Command{}, Invalid("fence token is %d bytes, at most %d allowed", len(body), MaxFencingTokenBytes)
		}
		if !utf8.Valid(body) {
			return Command{}, Invalid("fence token must be valid UTF-8")
		}
		return Command{Kind: Fence, FencingToken: string(body)}, nil
	case CommandTrim:
		if len(body) != 8 {
			return Command{}, Invalid("trim body must be an 8-byte big-endian seq num, got %d bytes", len(body))
		}
		return Command{Kind: Trim, TrimPoint: binary.BigEndian.Uint64(body)}, nil
	default:
		return Command{}, Invalid("unknown command %q", truncate(cmd, 64))
	}
}

// TrimAfter is a stream's trim point after a trim command at seq asking
// for point, when it was cur: S2 keeps the record at min(point, seq+1) and
// every later one, and a trim point never moves back.
func TrimAfter(cur, point, seq uint64) uint64 {
	return max(cur, min(point, seq+1))
}

// ApplyTrim is a stream's trim point after the record at seq with these
// headers and body, when it was cur: a trim command moves it (TrimAfter),
// any other record, or a malformed command (which no star accepted),
// leaves it. The settle finds trim points in settled records with it.
func ApplyTrim[H HeaderLayout](cur uint64, headers []H, body []byte, seq uint64) uint64 {
	if !IsCommand(headers) {
		return cur
	}
	c, err := ParseCommandHeaders(headers, body)
	if err != nil || c.Kind != Trim {
		return cur
	}
	return TrimAfter(cur, c.TrimPoint, seq)
}

// FenceRecord builds a fence command record.
func FenceRecord(token string) Record {
	return Record{
		Headers: []Header{{Name: []byte{}, Value: []byte(CommandFence)}},
		Body:    []byte(token),
	}
}

// TrimRecord builds a trim command record that trims below point.
func TrimRecord(point uint64) Record {
	return Record{
		Headers: []Header{{Name: []byte{}, Value: []byte(CommandTrim)}},
		Body:    binary.BigEndian.AppendUint64(nil, point),
	}
}

// ValidateAppendInput checks what the API bounds on its own, independent of
// the stream: 1–1000 records, at most 1 MiB metered, well-formed command
// records and a fencing token of at most 36 bytes. Every failure is 422
// invalid. Timestamp requirements depend on the stream's config and are the
// star's to check.
func ValidateAppendInput(in *AppendInput) *Error {
	if len(in.Records) == 0 {
		return Invalid("an append batch must hold at least one record")
	}
	if len(in.Records) > MaxBatchRecords {
		return Invalid("an append batch holds at most %d records, got %d", MaxBatchRecords, len(in.Records))
	}
	if n := MeteredBytes(in.Records); n > MaxBatchMeteredBytes {
		return Invalid("an append batch is at most %d metered bytes, got %d", MaxBatchMeteredBytes, n)
	}
	if in.FencingToken != nil {
		if len(*in.FencingToken) > MaxFencingTokenBytes {
			return Invalid("fencing token is %d bytes, at most %d allowed", len(*in.FencingToken), MaxFencingTokenBytes)
		}
		if !utf8.ValidString(*in.FencingToken) {
			return Invalid("fencing token must be valid UTF-8")
		}
	}
	for i := range in.Records {
		if _, err := ParseCommand(&in.Records[i]); err != nil {
			err.Message = "record " + itoa(i) + ": " + err.Message
			return err
		}
	}
	return nil
}

// LastEventID is an SSE event id: the last seq num sent and the cumulative
// record count and metered bytes of the session so far.
type LastEventID struct {
	SeqNum uint64
	Count  uint64
	Bytes  uint64
}

// Next is the id after sending a batch: its last seq num, the counts grown
// by its records. An empty batch leaves the id unchanged.
func (id LastEventID) Next(b *ReadBatch) LastEventID {
	if len(b.Records) == 0 {
		return id
	}
	id.SeqNum = b.Records[len(b.Records)-1].SeqNum
	id.Count += uint64(len(b.Records))
	id.Bytes += MeteredBytes(b.Records)
	return id
}
