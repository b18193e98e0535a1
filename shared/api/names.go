package api

import (
	"strings"
	"unicode/utf8"
)

// Name limits.
const (
	MinBasinNameLen  = 8
	MaxBasinNameLen  = 48
	MaxStreamNameLen = 512
)

// ValidateBasinName checks ^[a-z0-9][a-z0-9-]{6,46}[a-z0-9]$: 8–48 bytes of
// lower-case letters, digits and hyphens, not starting or ending with a
// hyphen. It fails with 422 invalid.
func ValidateBasinName(name string) *Error {
	if len(name) < MinBasinNameLen || len(name) > MaxBasinNameLen {
		return Invalid("basin name must be %d to %d bytes, got %d", MinBasinNameLen, MaxBasinNameLen, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i != 0 && i != len(name)-1:
		default:
			return Invalid("basin name %q: only a-z, 0-9 and inner hyphens are allowed", name)
		}
	}
	return nil
}

// ValidateStreamName checks a stream name: 1–512 bytes of UTF-8 without
// NUL, and neither "." nor ".." (S2 rejects those). (docs/design.md §16.1: S2 only bounds
// the length; names travel in JSON and in metastore keys, so they must be
// text.) It fails with 422 invalid.
func ValidateStreamName(name string) *Error {
	if len(name) == 0 || len(name) > MaxStreamNameLen {
		return Invalid("stream name must be 1 to %d bytes, got %d", MaxStreamNameLen, len(name))
	}
	if name == "." || name == ".." {
		return Invalid("stream name must not be %q", name)
	}
	if !utf8.ValidString(name) {
		return Invalid("stream name must be valid UTF-8")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return Invalid("stream name must not contain NUL")
	}
	return nil
}

// Where a name was given decides the error S2 answers for a bad one: 400
// bad_path in the request path, 400 bad_json in a JSON body (the name
// fails to deserialize there). The node's own checks stay 422 invalid.

// InPath re-codes a name validation failure as 400 bad_path.
func InPath(err *Error) *Error {
	if err == nil {
		return nil
	}
	return BadPath("%s", err.Message)
}

// InJSON re-codes a name validation failure as 400 bad_json.
func InJSON(err *Error) *Error {
	if err == nil {
		return nil
	}
	return BadJSON("%s", err.Message)
}
