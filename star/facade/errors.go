package facade

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/starlog/starlog/shared/api"
)

// SeqNumMismatchError rejects a batch whose match_seq_num is not the next
// assignable sequence number. The API answers 412 {"seq_num_mismatch": Expected}.
type SeqNumMismatchError struct {
	// Expected is the next assignable seq num, counting pending batches.
	Expected uint64
}

func (e SeqNumMismatchError) Error() string {
	return "facade: match_seq_num mismatch: next assignable seq num is " + strconv.FormatUint(e.Expected, 10)
}

// FencingTokenMismatchError rejects a batch whose fencing token is not the
// stream's current one. The API answers 412 {"fencing_token_mismatch": Current}.
type FencingTokenMismatchError struct {
	// Current is the stream's token as of every batch sequenced so far.
	Current string
}

func (e FencingTokenMismatchError) Error() string {
	return fmt.Sprintf("facade: fencing token mismatch: current token is %q", e.Current)
}

// InvalidError rejects a malformed batch. The API answers 422 "invalid".
type InvalidError struct {
	Reason string
}

func (e InvalidError) Error() string {
	return "facade: invalid append: " + e.Reason
}

func invalidf(format string, args ...any) error {
	return InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// DuplicateError answers a retry of a batch its producer already applied
// (docs/design.md §16.4): nothing is sequenced, and the retry's ack is the
// original's, once the original is durable.
type DuplicateError struct {
	Mark api.ProducerMark
	// Start and End are the original batch's ack positions. End.Timestamp
	// is known only if EndTimestampKnown: a batch rebuilt from the records
	// has its end seq num from the retry's record count, and the caller
	// reads its last record's timestamp.
	Start, End        Position
	EndTimestampKnown bool
}

func (e DuplicateError) Error() string {
	return fmt.Sprintf("facade: producer %q epoch %d seq %d was already applied at [%d, %d)",
		e.Mark.ID, e.Mark.Epoch, e.Mark.Seq, e.Start.SeqNum, e.End.SeqNum)
}

// ProducerError refuses a batch whose producer seq is not its next, or
// whose epoch is stale: Err is the API's 409.
type ProducerError struct {
	Err *api.Error
}

func (e ProducerError) Error() string { return "facade: " + e.Err.Message }

// ErrProducersNotLoaded refuses a marked batch on a stream whose producer
// table is not loaded yet (the caller loads it first; a retry succeeds).
var ErrProducersNotLoaded = errors.New("facade: the stream's producer table is not loaded")
