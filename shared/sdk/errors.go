package sdk

import (
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/starlog/starlog/shared/api"
)

// IsDefinite reports whether err proves that the failed request had no
// effect. An error is definite only if something in its chain says so: an
// *api.Error (see api.Error.Definite), a *TransportError for a connection
// that was never made, or a *SessionError for a batch the server never
// applied. Everything else (timeouts, cancellations, broken connections,
// malformed responses) is indefinite.
func IsDefinite(err error) bool {
	var d interface{ Definite() bool }
	return errors.As(err, &d) && d.Definite()
}

// TransportError is a unary call that got no complete response.
type TransportError struct {
	// Op is the method and path of the call.
	Op  string
	Err error
	// responded: a status arrived but the body was cut off.
	responded bool
}

func (e *TransportError) Error() string { return fmt.Sprintf("%s: %v", e.Op, e.Err) }
func (e *TransportError) Unwrap() error { return e.Err }

// Definite reports whether the request surely never reached the server: the
// connection could not be made (refused, unreachable, name not resolved).
func (e *TransportError) Definite() bool {
	if e.responded {
		return false
	}
	return isDialError(e.Err)
}

// isDialError reports whether err is a failure to establish a connection,
// before any byte of the request was sent.
func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// ProtocolError is a response the SDK cannot accept: undecodable, or an
// ack that breaks the session's rules. It is indefinite.
type ProtocolError struct {
	Msg string
	Err error
}

func (e *ProtocolError) Error() string {
	if e.Err != nil {
		return "protocol error: " + e.Msg + ": " + e.Err.Error()
	}
	return "protocol error: " + e.Msg
}
func (e *ProtocolError) Unwrap() error  { return e.Err }
func (e *ProtocolError) Definite() bool { return false }

// AfterIndefiniteError is the failure of a retried append whose earlier
// attempt failed indefinitely: that attempt may have been applied. Err is
// the last failure (often a 412 that the earlier attempt itself caused),
// Earlier the indefinite one.
type AfterIndefiniteError struct {
	Earlier error
	Err     error
}

func (e *AfterIndefiniteError) Error() string {
	return fmt.Sprintf("%v (after an indefinite failure that may have been applied: %v)", e.Err, e.Earlier)
}

// Unwrap exposes the last failure first, so errors.As finds its *api.Error.
func (e *AfterIndefiniteError) Unwrap() []error { return []error{e.Err, e.Earlier} }

// Definite is false: the earlier attempt may have been applied.
func (e *AfterIndefiniteError) Definite() bool { return false }

// SessionError fails a batch of an append session that ended before the
// batch was acknowledged. Cause is what ended the session.
type SessionError struct {
	Cause error
	// applied: the batch may have been applied (it was sent, and the
	// session did not end with a definite rejection of an earlier batch).
	mayBeApplied bool
}

func (e *SessionError) Error() string {
	if e.mayBeApplied {
		return fmt.Sprintf("append session ended with the batch unacknowledged (it may have been applied): %v", e.Cause)
	}
	return fmt.Sprintf("append session ended before the batch was applied: %v", e.Cause)
}
func (e *SessionError) Unwrap() error { return e.Cause }

// Definite reports whether the batch surely was not applied.
func (e *SessionError) Definite() bool { return !e.mayBeApplied }

// ErrSessionClosed is returned by Submit on a session or producer that is
// closing or closed. It is definite: nothing was sent.
var ErrSessionClosed error = &closedError{}

type closedError struct{}

func (*closedError) Error() string  { return "sdk: session closed" }
func (*closedError) Definite() bool { return true }

// errHeartbeatTimeout is the failure of a read session that heard nothing
// for its heartbeat timeout; 408 like S2's SDKs, and retryable.
func errHeartbeatTimeout(d fmt.Stringer) *api.Error {
	return &api.Error{Status: http.StatusRequestTimeout, Code: api.CodeTimeout,
		Message: "read session: no frame for " + d.String()}
}
