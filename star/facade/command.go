package facade

import (
	"encoding/binary"
	"unicode/utf8"

	"github.com/starlog/starlog/shared/format"
)

// MaxFencingTokenBytes bounds a fencing token, set by a fence command or
// supplied with an append.
const MaxFencingTokenBytes = 36

// CommandKind tells what a record is: an ordinary record or a command.
type CommandKind uint8

const (
	// NotCommand is an ordinary record.
	NotCommand CommandKind = iota
	// Fence sets (or, with an empty body, clears) the fencing token for later
	// batches.
	Fence
	// Trim moves the stream's trim point forward.
	Trim
)

// Command is a decoded command record.
type Command struct {
	Kind CommandKind
	// Token is the new fencing token of a Fence ("" clears it).
	Token string
	// Point is the requested trim point of a Trim, before it is clamped to
	// the command's own seq num + 1.
	Point uint64
}

// IsCommand reports whether a record with these headers is a command record
// (or an attempt at one): it has a header whose name is empty. Readers use it
// to hide commands from clients that ask for that.
func IsCommand(headers []format.Header) bool {
	for _, h := range headers {
		if len(h.Name) == 0 {
			return true
		}
	}
	return false
}

// ParseCommand decodes a record's headers and body. A record without an
// empty-named header is NotCommand. A command record must have exactly one
// header, with an empty name and value "fence" or "trim", and a body valid
// for that command; anything else is an InvalidError.
func ParseCommand(headers []format.Header, body []byte) (Command, error) {
	if !IsCommand(headers) {
		return Command{Kind: NotCommand}, nil
	}
	if len(headers) != 1 {
		return Command{}, invalidf("a command record must have exactly one header, got %d", len(headers))
	}
	switch string(headers[0].Value) {
	case "fence":
		if len(body) > MaxFencingTokenBytes {
			return Command{}, invalidf("fence token is %d bytes, at most %d allowed", len(body), MaxFencingTokenBytes)
		}
		if !utf8.Valid(body) {
			return Command{}, invalidf("fence token is not valid UTF-8")
		}
		return Command{Kind: Fence, Token: string(body)}, nil
	case "trim":
		if len(body) != 8 {
			return Command{}, invalidf("trim body must be an 8-byte big-endian u64, got %d bytes", len(body))
		}
		return Command{Kind: Trim, Point: binary.BigEndian.Uint64(body)}, nil
	default:
		return Command{}, invalidf("unknown command %q", headers[0].Value)
	}
}
