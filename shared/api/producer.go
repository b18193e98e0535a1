package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Idempotent producers on the S2 face (docs/api.md "Idempotent producers",
// docs/design.md §16.4): a batch whose first record carries these headers is
// applied at most once per (producer, epoch, seq). They are plain record
// headers: any S2 SDK can set them, and readers see them as written.
const (
	HeaderProducer      = "starlog-producer"
	HeaderProducerEpoch = "starlog-producer-epoch"
	HeaderProducerSeq   = "starlog-producer-seq"
	// HeaderProducerRecords, on a marked batch, is its record count and
	// says its seq counts records, not batches (Kafka's sequence, which
	// the Kafka face's idempotent producers carry): the producer's next
	// seq is this batch's plus its record count, modulo ProducerSeqWrap.
	HeaderProducerRecords = "starlog-producer-records"
	// ProducerSeqWrap is where a seq counted in records wraps to 0, as
	// Kafka's int32 sequence does; such a seq is below it.
	ProducerSeqWrap = 1 << 31
	// MaxProducerIDBytes bounds a producer id.
	MaxProducerIDBytes = 128
)

// Codes of the producer refusals (409, body ProducerConflict).
const (
	CodeProducerSeqGap       = "producer_seq_gap"
	CodeProducerEpochStale   = "producer_epoch_stale"
	CodeProducerAckForgotten = "producer_ack_forgotten"
)

// ProducerMark is a batch's producer, epoch and seq.
type ProducerMark struct {
	ID         string
	Epoch, Seq uint64
	// Records is the batch's record count when its seq counts records
	// (HeaderProducerRecords), 0 when it counts batches.
	Records uint64
}

// NextSeq is the seq the producer's batch after this one carries: one
// more, or, counted in records, Records more modulo ProducerSeqWrap.
func (m ProducerMark) NextSeq() uint64 {
	if m.Records == 0 {
		return m.Seq + 1
	}
	return (m.Seq + m.Records) % ProducerSeqWrap
}

// ProducerOf reads the producer headers of a batch's first record. ok is
// false when the record carries none of them. A malformed mark (an id
// outside 1–128 bytes, a value that is not a decimal u64, an epoch or seq
// without an id or an id without both, a header given twice, a record
// count of 0 or with a seq not below ProducerSeqWrap) is a 422. That a
// record count is the batch's own is for the sequencer to check.
func ProducerOf(headers []Header) (m ProducerMark, ok bool, err *Error) {
	var id, epoch, seq, records []byte
	var seen [4]bool
	for _, h := range headers {
		var i int
		switch {
		case bytes.Equal(h.Name, []byte(HeaderProducer)):
			i, id = 0, h.Value
		case bytes.Equal(h.Name, []byte(HeaderProducerEpoch)):
			i, epoch = 1, h.Value
		case bytes.Equal(h.Name, []byte(HeaderProducerSeq)):
			i, seq = 2, h.Value
		case bytes.Equal(h.Name, []byte(HeaderProducerRecords)):
			i, records = 3, h.Value
		default:
			continue
		}
		if seen[i] {
			return ProducerMark{}, false, Invalid("the first record carries a producer header twice")
		}
		seen[i] = true
	}
	if !seen[0] && !seen[1] && !seen[2] && !seen[3] {
		return ProducerMark{}, false, nil
	}
	if !seen[0] || !seen[1] || !seen[2] {
		return ProducerMark{}, false, Invalid("an idempotent batch needs all of %s, %s and %s on its first record",
			HeaderProducer, HeaderProducerEpoch, HeaderProducerSeq)
	}
	if len(id) == 0 || len(id) > MaxProducerIDBytes {
		return ProducerMark{}, false, Invalid("%s must be 1 to %d bytes, got %d", HeaderProducer, MaxProducerIDBytes, len(id))
	}
	e, perr := parseDecimal(epoch)
	if perr != nil {
		return ProducerMark{}, false, Invalid("%s: %v", HeaderProducerEpoch, perr)
	}
	s, perr := parseDecimal(seq)
	if perr != nil {
		return ProducerMark{}, false, Invalid("%s: %v", HeaderProducerSeq, perr)
	}
	m = ProducerMark{ID: string(id), Epoch: e, Seq: s}
	if seen[3] {
		if m.Records, perr = parseDecimal(records); perr != nil {
			return ProducerMark{}, false, Invalid("%s: %v", HeaderProducerRecords, perr)
		}
		if m.Records == 0 || m.Seq >= ProducerSeqWrap {
			return ProducerMark{}, false, Invalid("%s needs a count of at least 1 and a %s below %d, got %d and %d",
				HeaderProducerRecords, HeaderProducerSeq, uint64(ProducerSeqWrap), m.Records, m.Seq)
		}
	}
	return m, true, nil
}

// parseDecimal accepts a canonical decimal u64: digits only, no sign, no
// leading zero (so one number has one spelling).
func parseDecimal(b []byte) (uint64, error) {
	if len(b) == 0 || len(b) > 1 && b[0] == '0' {
		return 0, fmt.Errorf("%q is not a canonical decimal u64", b)
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a canonical decimal u64", b)
		}
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a decimal u64", b)
	}
	return v, nil
}

// ProducerHeaders are the headers that mark a batch's first record (with
// HeaderProducerRecords when m.Records is set).
func ProducerHeaders(m ProducerMark) []Header {
	hs := []Header{
		{Name: []byte(HeaderProducer), Value: []byte(m.ID)},
		{Name: []byte(HeaderProducerEpoch), Value: strconv.AppendUint(nil, m.Epoch, 10)},
		{Name: []byte(HeaderProducerSeq), Value: strconv.AppendUint(nil, m.Seq, 10)},
	}
	if m.Records > 0 {
		hs = append(hs, Header{Name: []byte(HeaderProducerRecords), Value: strconv.AppendUint(nil, m.Records, 10)})
	}
	return hs
}

// ProducerConflict is the 409 body of a producer refusal: the standard
// {"code","message"} plus the number the producer needs.
type ProducerConflict struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// ExpectedSeq is the seq the producer's next batch must carry
	// (producer_seq_gap).
	ExpectedSeq *uint64 `json:"expected_seq,omitempty"`
	// CurrentEpoch is the producer's current epoch (producer_epoch_stale).
	CurrentEpoch *uint64 `json:"current_epoch,omitempty"`
}

// ProducerSeqGap refuses a batch whose seq is past the producer's next:
// 409 producer_seq_gap naming the seq expected.
func ProducerSeqGap(id string, epoch, got, expected uint64) *Error {
	msg := fmt.Sprintf("producer %q epoch %d sent seq %d; the next seq it may send is %d", id, epoch, got, expected)
	return &Error{Status: http.StatusConflict, Code: CodeProducerSeqGap, Message: msg,
		Body: ProducerConflict{Code: CodeProducerSeqGap, Message: msg, ExpectedSeq: &expected}}
}

// ProducerEpochStale refuses a batch of an epoch older than the producer's
// current one: 409 producer_epoch_stale naming the current epoch.
func ProducerEpochStale(id string, got, current uint64) *Error {
	msg := fmt.Sprintf("producer %q sent epoch %d; its current epoch is %d", id, got, current)
	return &Error{Status: http.StatusConflict, Code: CodeProducerEpochStale, Message: msg,
		Body: ProducerConflict{Code: CodeProducerEpochStale, Message: msg, CurrentEpoch: &current}}
}

// ProducerAckForgotten answers a retry of a batch that was applied so long
// ago (more batches of its producer since than the star remembers acks for)
// that its ack is no longer known: 409 producer_ack_forgotten. The batch
// was applied once; this retry appended nothing.
func ProducerAckForgotten(id string, epoch, seq, expected uint64) *Error {
	msg := fmt.Sprintf("producer %q epoch %d seq %d was applied, but its ack is no longer remembered; the next seq it may send is %d", id, epoch, seq, expected)
	return &Error{Status: http.StatusConflict, Code: CodeProducerAckForgotten, Message: msg,
		Body: ProducerConflict{Code: CodeProducerAckForgotten, Message: msg, ExpectedSeq: &expected}}
}

// ProducerExpectedSeq is the seq carried by a producer_seq_gap or
// producer_ack_forgotten.
func (e *Error) ProducerExpectedSeq() (uint64, bool) {
	if b, ok := e.Body.(ProducerConflict); ok && b.ExpectedSeq != nil {
		return *b.ExpectedSeq, true
	}
	return 0, false
}

// ProducerCurrentEpoch is the epoch carried by a producer_epoch_stale.
func (e *Error) ProducerCurrentEpoch() (uint64, bool) {
	if b, ok := e.Body.(ProducerConflict); ok && b.CurrentEpoch != nil {
		return *b.CurrentEpoch, true
	}
	return 0, false
}

// parseProducerConflict rebuilds a producer refusal from its 409 body, or
// returns nil for any other error.
func parseProducerConflict(status int, code string, body []byte) *Error {
	if status != http.StatusConflict {
		return nil
	}
	switch code {
	case CodeProducerSeqGap, CodeProducerEpochStale, CodeProducerAckForgotten:
	default:
		return nil
	}
	var b ProducerConflict
	if json.Unmarshal(body, &b) != nil {
		return nil
	}
	return &Error{Status: status, Code: code, Message: b.Message, Body: b}
}
