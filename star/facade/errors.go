package facade

import (
	"fmt"
	"strconv"
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
