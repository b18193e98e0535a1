// Package offsets is the Durable Streams offset format this server mints
// and reads: the stream handler (star/durable) answers with it and the
// subscriptions (star/durable/subs) show and take cursors in it, so both
// import it and neither imports the other for it.
package offsets

import (
	"fmt"
	"strconv"
)

// An offset is "<seq>_0000000000000000": the seq num of the next record
// to read as 16 decimal digits, and a second field of 16 digits that this
// server always mints as zero. Fixed width makes string order seq order;
// digits and "_" need no URL escaping and can never be the sentinels "-1"
// or "now". The two-field shape is the reference server's, so offsets a
// client was told name the start ("0000000000000000_0000000000000000")
// mean the start here too. 10^16 seq nums outlast any stream.
const (
	seqDigits = 16
	offsetLen = 2*seqDigits + 1
	// MaxSeq is the largest seq num an offset holds.
	MaxSeq    = 9_999_999_999_999_999
	zeroField = "0000000000000000"
)

// Format is the offset of seq.
func Format(seq uint64) string { return fmt.Sprintf("%0*d_%s", seqDigits, seq, zeroField) }

// Parse reads an offset a client sent; ok is false for anything
// not of this shape.
func Parse(s string) (uint64, bool) {
	if len(s) != offsetLen || s[seqDigits] != '_' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if i != seqDigits && (s[i] < '0' || s[i] > '9') {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s[:seqDigits], 10, 64)
	if err != nil {
		return 0, false
	}
	if s[seqDigits+1:] != zeroField {
		// Past any position of a record boundary this server mints:
		// reads treat it as the next record.
		n++
	}
	return n, true
}
