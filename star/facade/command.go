package facade

import (
	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/format"
)

// Command records are decoded by shared/api (docs/design.md §16.2), the one
// implementation the wire layer and the facade share; the facade turns its
// 422 into an InvalidError.

// MaxFencingTokenBytes bounds a fencing token, set by a fence command or
// supplied with an append.
const MaxFencingTokenBytes = api.MaxFencingTokenBytes

// CommandKind tells what a record is: an ordinary record or a command.
type CommandKind = api.CommandKind

const (
	// NotCommand is an ordinary record.
	NotCommand = api.NotCommand
	// Fence sets (or, with an empty body, clears) the fencing token for later
	// batches.
	Fence = api.Fence
	// Trim moves the stream's trim point forward.
	Trim = api.Trim
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
	return api.IsCommand(headers)
}

// ParseCommand decodes a record's headers and body. A record without an
// empty-named header is NotCommand. A command record must have exactly one
// header, with an empty name and value "fence" or "trim", and a body valid
// for that command; anything else is an InvalidError.
func ParseCommand(headers []format.Header, body []byte) (Command, error) {
	c, err := api.ParseCommandHeaders(headers, body)
	if err != nil {
		return Command{}, InvalidError{Reason: err.Message}
	}
	return Command{Kind: c.Kind, Token: c.FencingToken, Point: c.TrimPoint}, nil
}
