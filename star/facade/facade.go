package facade

import (
	"errors"
	"fmt"
	"math"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/star/producer"
)

// Batch limits (docs/design.md §16.2); exceeding either is an InvalidError.
const (
	MaxBatchRecords      = 1000
	MaxBatchMeteredBytes = 1 << 20
)

// Mode is a stream's timestamping mode.
type Mode uint8

const (
	// ClientPrefer uses the client's timestamp when given, else arrival time.
	ClientPrefer Mode = iota
	// ClientRequire rejects a record that has no client timestamp.
	ClientRequire
	// Arrival always uses arrival time.
	Arrival
)

// String returns the mode's name in the stream config JSON.
func (m Mode) String() string {
	switch m {
	case ClientPrefer:
		return "client-prefer"
	case ClientRequire:
		return "client-require"
	case Arrival:
		return "arrival"
	default:
		return fmt.Sprintf("Mode(%d)", uint8(m))
	}
}

// ParseMode parses a mode name of the stream config JSON; "" is the default,
// ClientPrefer.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "client-prefer":
		return ClientPrefer, nil
	case "client-require":
		return ClientRequire, nil
	case "arrival":
		return Arrival, nil
	default:
		return 0, fmt.Errorf("facade: unknown timestamping mode %q", s)
	}
}

// Config is the stream's timestamping config.
type Config struct {
	Mode Mode
	// Uncapped lets timestamps later than arrival time stand.
	Uncapped bool
}

// Position is a point in a stream: a seq num and a timestamp in ms.
type Position struct {
	SeqNum, Timestamp uint64
}

// State is what a new leader opens a stream with: its durable frontier.
type State struct {
	NextSeq       uint64
	LastTimestamp uint64
	FencingToken  string
	TrimPoint     uint64
}

// Input is one record of an append, as the client sent it.
type Input struct {
	// Timestamp is the client's timestamp in ms, if any.
	Timestamp *uint64
	Headers   []format.Header
	Body      []byte
}

// Request is one append batch with its optional conditions.
type Request struct {
	Records      []Input
	MatchSeqNum  *uint64
	FencingToken *string
}

// Sequenced is an accepted batch.
type Sequenced struct {
	// Records carry their assigned seq nums and final timestamps. Their
	// Headers and Body alias the request's: nothing is copied.
	Records []format.Record
	// Start is the first record's position; End.SeqNum is the last record's
	// seq num + 1 and End.Timestamp the last record's timestamp.
	Start, End Position
	// FencingToken is the stream's token after this batch; a fence command in
	// the batch changes it for later batches only.
	FencingToken string
	// TrimPoint is the stream's trim point after this batch.
	TrimPoint uint64
	// Metered is the batch's metered size in bytes.
	Metered int
	// Producer is the batch's producer mark, if its first record has one.
	Producer *api.ProducerMark
}

// Stream sequences the appends of one stream the star leads.
//
// A Stream is NOT safe for concurrent use: the caller serialises every call
// (and must hand batches to the pool in the order Sequence returned them, so
// that per-stream order in flights is seq order).
type Stream struct {
	cfg Config

	// The pending view: every batch sequenced so far, durable or not.
	next   uint64
	lastTS uint64
	token  string
	trim   uint64

	// tail is the durable (acknowledged) frontier.
	tail Position

	// producers is the stream's idempotent producers (docs/design.md
	// §16.4), nil until the caller loads them (LoadProducers): a batch
	// with a producer mark is refused until then.
	producers *producer.Table
}

// New opens a stream at st, its durable frontier.
func New(cfg Config, st State) *Stream {
	return &Stream{
		cfg:    cfg,
		next:   st.NextSeq,
		lastTS: st.LastTimestamp,
		token:  st.FencingToken,
		trim:   st.TrimPoint,
		tail:   Position{SeqNum: st.NextSeq, Timestamp: st.LastTimestamp},
	}
}

// Sequence validates req, checks its fencing token and then its
// match_seq_num against the pending view, and assigns seq nums and
// timestamps. nowMs is the arrival time in ms.
//
// Errors are InvalidError (checked first, as the API decodes and validates a
// batch before it reaches the stream), FencingTokenMismatchError and
// SeqNumMismatchError. A rejected request changes nothing.
//
// A batch with a producer mark is judged by the producer table first
// (docs/design.md §16.4): a retry of an applied batch is a DuplicateError
// before any condition, since the original met its conditions when it
// was applied and a later fence or seq num must not hide its ack; a new
// batch then meets the fencing token and match_seq_num, as any batch, and
// only then the producer's seq and epoch (ProducerError), so a writer
// fenced out learns nothing of the producers.
func (s *Stream) Sequence(req Request, nowMs uint64) (Sequenced, error) {
	cmds, metered, err := s.validate(req)
	if err != nil {
		return Sequenced{}, err
	}
	n := uint64(len(req.Records))
	mark, dec, err := s.judgeProducer(req, nowMs)
	if err != nil {
		return Sequenced{}, err
	}
	if req.FencingToken != nil && *req.FencingToken != s.token {
		return Sequenced{}, FencingTokenMismatchError{Current: s.token}
	}
	if req.MatchSeqNum != nil && *req.MatchSeqNum != s.next {
		return Sequenced{}, SeqNumMismatchError{Expected: s.next}
	}
	if mark != nil && dec.Kind != producer.Apply {
		return Sequenced{}, ProducerError{Err: dec.Err(*mark)}
	}
	if s.next > math.MaxUint64-n {
		return Sequenced{}, invalidf("sequence number space exhausted")
	}

	// Work on copies and commit at the end, so that nothing partial is kept.
	lastTS, token, trim := s.lastTS, s.token, s.trim
	recs := make([]format.Record, len(req.Records))
	for i, in := range req.Records {
		seq := s.next + uint64(i)
		ts := s.stamp(in.Timestamp, nowMs)
		// Non-decreasing wins over the cap: a stream whose earlier records are
		// ahead of now (uncapped, or a clock that stepped back) keeps its order.
		ts = max(ts, lastTS)
		lastTS = ts
		recs[i] = format.Record{SeqNum: seq, Timestamp: ts, Headers: in.Headers, Body: in.Body}

		switch c := cmds[i]; c.Kind {
		case Fence:
			token = c.Token
		case Trim:
			trim = api.TrimAfter(trim, c.Point, seq)
		}
	}

	out := Sequenced{
		Records:      recs,
		Start:        Position{SeqNum: s.next, Timestamp: recs[0].Timestamp},
		End:          Position{SeqNum: s.next + n, Timestamp: lastTS},
		FencingToken: token,
		TrimPoint:    trim,
		Metered:      metered,
		Producer:     mark,
	}
	s.next += n
	s.lastTS, s.token, s.trim = lastTS, token, trim
	if mark != nil {
		s.producers.Applied(*mark, producer.Batch{Seq: mark.Seq, Records: mark.Records,
			Start: producer.Pos(out.Start), End: producer.Pos(out.End)})
	}
	return out, nil
}

// judgeProducer decides a batch's producer mark, if it has one, at its
// first record's timestamp (the clock the table's idle bound and its fold
// from the records share). A retry is a DuplicateError; a table not yet
// loaded is ErrProducersNotLoaded.
func (s *Stream) judgeProducer(req Request, nowMs uint64) (*api.ProducerMark, producer.Decision, error) {
	if !hasProducerHeader(req.Records[0].Headers) {
		return nil, producer.Decision{}, nil // the common case, without copying headers
	}
	m, ok, aerr := api.ProducerOf(apiHeaders(req.Records[0].Headers))
	if aerr != nil {
		return nil, producer.Decision{}, InvalidError{Reason: aerr.Message}
	}
	if !ok {
		return nil, producer.Decision{}, nil
	}
	if m.Records != 0 && m.Records != uint64(len(req.Records)) {
		return nil, producer.Decision{}, invalidf("%s says %d records, the batch has %d", api.HeaderProducerRecords, m.Records, len(req.Records))
	}
	if s.producers == nil {
		return nil, producer.Decision{}, ErrProducersNotLoaded
	}
	firstTS := max(s.stamp(req.Records[0].Timestamp, nowMs), s.lastTS)
	dec := s.producers.Decide(m, firstTS)
	if dec.Kind != producer.Duplicate {
		return &m, dec, nil
	}
	b, n := dec.Batch, uint64(len(req.Records))
	dup := DuplicateError{Mark: m, Start: Position(b.Start), End: Position(b.End), EndTimestampKnown: b.EndKnown()}
	if !b.EndKnown() {
		// Rebuilt from the records, which do not show where a batch
		// ended: the retry carries the same records.
		dup.End = Position{SeqNum: b.Start.SeqNum + n}
	} else if b.End.SeqNum-b.Start.SeqNum != n {
		return nil, producer.Decision{}, invalidf("a retry of producer %q epoch %d seq %d must carry its batch's %d records, not %d",
			m.ID, m.Epoch, m.Seq, b.End.SeqNum-b.Start.SeqNum, n)
	}
	return nil, producer.Decision{}, dup
}

func apiHeaders(hs []format.Header) []api.Header {
	out := make([]api.Header, len(hs))
	for i, h := range hs {
		out[i] = api.Header(h)
	}
	return out
}

// LoadProducers installs the stream's producer table, rebuilt by the
// caller from a checkpoint and the records up to the durable tail. Until
// then a marked batch is refused with ErrProducersNotLoaded.
func (s *Stream) LoadProducers(t *producer.Table) { s.producers = t }

// ProducersLoaded reports whether LoadProducers was called.
func (s *Stream) ProducersLoaded() bool { return s.producers != nil }

// ProducerCheckpoint is the producer table as of the durable tail, for a
// checkpoint (ok false: not loaded, or not now; see producer.Snapshot).
func (s *Stream) ProducerCheckpoint() (producer.Checkpoint, bool) {
	if s.producers == nil {
		return producer.Checkpoint{}, false
	}
	return s.producers.Snapshot(s.tail.SeqNum, s.tail.Timestamp)
}

// validate checks everything that makes a batch invalid (422), returning
// each record's decoded command and the batch's metered size.
func (s *Stream) validate(req Request) ([]Command, int, error) {
	n := len(req.Records)
	if n == 0 || n > MaxBatchRecords {
		return nil, 0, invalidf("a batch must hold 1 to %d records, got %d", MaxBatchRecords, n)
	}
	if t := req.FencingToken; t != nil && len(*t) > MaxFencingTokenBytes {
		return nil, 0, invalidf("fencing token is %d bytes, at most %d allowed", len(*t), MaxFencingTokenBytes)
	}
	cmds := make([]Command, n)
	metered := 0
	for i, in := range req.Records {
		if i > 0 && hasProducerHeader(in.Headers) {
			// The fold from the records takes a marked record for the start
			// of a batch.
			return nil, 0, invalidf("record %d carries a producer header; only a batch's first record may", i)
		}
		if s.cfg.Mode == ClientRequire && in.Timestamp == nil {
			return nil, 0, invalidf("record %d has no timestamp and the stream requires client timestamps", i)
		}
		c, err := ParseCommand(in.Headers, in.Body)
		if err != nil {
			return nil, 0, invalidf("record %d: %s", i, reason(err))
		}
		cmds[i] = c
		r := format.Record{Headers: in.Headers, Body: in.Body}
		metered += r.MeteredSize()
		if metered > MaxBatchMeteredBytes {
			return nil, 0, invalidf("batch exceeds %d metered bytes", MaxBatchMeteredBytes)
		}
	}
	return cmds, metered, nil
}

// reason unwraps an InvalidError so that nested reasons read as one.
func reason(err error) string {
	var ie InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return err.Error()
}

// stamp picks a record's timestamp by mode and applies the cap. Raising it to
// the stream's maximum is the caller's job.
func (s *Stream) stamp(client *uint64, nowMs uint64) uint64 {
	ts := nowMs
	if client != nil && s.cfg.Mode != Arrival {
		ts = *client
	}
	if !s.cfg.Uncapped {
		ts = min(ts, nowMs)
	}
	return ts
}

// Acked records that the batch ending at end is durable and released, and
// advances the durable tail to it. Acks arrive in sequencing order; a
// position at or below the tail is a duplicate and is ignored. A position
// beyond Next was never sequenced here: that is a caller bug, and Acked
// panics rather than report a tail that was never assigned.
func (s *Stream) Acked(end Position) {
	if end.SeqNum > s.next {
		panic(fmt.Sprintf("facade: ack of seq %d beyond next assignable seq %d", end.SeqNum, s.next))
	}
	if end.SeqNum > s.tail.SeqNum {
		s.tail = end
	}
}

// Tail is the durable (acknowledged) tail: what check-tail and 416 report.
func (s *Stream) Tail() Position { return s.tail }

// Next is the next assignable seq num, counting pending batches.
func (s *Stream) Next() uint64 { return s.next }

// Pending is the stream's state as of every batch sequenced so far, durable
// or not. Once nothing is pending it is the durable State a handoff passes on.
func (s *Stream) Pending() State {
	return State{NextSeq: s.next, LastTimestamp: s.lastTS, FencingToken: s.token, TrimPoint: s.trim}
}

// Config returns the stream's current timestamping config.
func (s *Stream) Config() Config { return s.cfg }

// Reconfigure changes the timestamping config for later batches.
func (s *Stream) Reconfigure(cfg Config) { s.cfg = cfg }

func hasProducerHeader(hs []format.Header) bool {
	for _, h := range hs {
		switch string(h.Name) {
		case api.HeaderProducer, api.HeaderProducerEpoch, api.HeaderProducerSeq, api.HeaderProducerRecords:
			return true
		}
	}
	return false
}
