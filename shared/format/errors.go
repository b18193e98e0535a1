package format

import (
	"errors"
	"fmt"
)

// Version is the layout version this package writes, and MaxVersion the
// newest it reads: a reader accepts every version from 1 up to its own, and
// a writer writes only a version every running reader accepts (a release
// that introduces version N+1 first ships reading it while still writing N;
// docs/format.md §7). Every layout carries its version right after its
// magic, so a reader can tell "written by a newer starlog" (ErrVersion) from
// "damaged" (ErrCorrupt).
const (
	Version    = 1
	MaxVersion = 1
)

// Limits enforced by encoders and decoders. They bound what a decoder will
// believe before it allocates, on top of checking every length against the
// bytes actually present.
const (
	// MaxBlockRecords is the most records one block holds: a batch holds at
	// most 1000 records and a block is one batch.
	MaxBlockRecords = 1000
	// MaxBlockSize bounds one encoded block. A batch is at most 1 MiB metered
	// and framing costs at most a few bytes more per record and header than
	// metering does, so 16 MiB leaves ample room while keeping a corrupt
	// length field from describing gigabytes.
	MaxBlockSize = 16 << 20
	// MaxStreamIDLen bounds a stream id in footers.
	MaxStreamIDLen = 512
	// MaxFencingTokenLen bounds a fencing token (the API's limit).
	MaxFencingTokenLen = 36
)

var (
	// ErrCorrupt marks bytes that are not a valid layout: wrong magic, bad
	// checksum, impossible lengths, trailing garbage.
	ErrCorrupt = errors.New("format: corrupt")
	// ErrVersion marks a layout whose magic is right but whose version this
	// build does not understand.
	ErrVersion = errors.New("format: unsupported version")
	// ErrPoison is returned by DecodeBundle when the slot holds poison rather
	// than a flight.
	ErrPoison = errors.New("format: slot holds poison")
	// ErrInvalid marks encoder input that violates a layout's rules (empty
	// batch, non-dense seqs, oversized stream id, ...).
	ErrInvalid = errors.New("format: invalid input")
)

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func versionErr(layout string, v byte) error {
	return fmt.Errorf("%w: %s version %d, this build reads 1 to %d", ErrVersion, layout, v, MaxVersion)
}
