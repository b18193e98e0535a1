package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/starlog/starlog/shared/api"
)

// AppendRetry says which failed unary appends may be retried.
type AppendRetry uint8

const (
	// AppendRetrySafe (the default) retries an append only when a retry
	// cannot duplicate it: after a definite failure, or after an indefinite
	// one if the append carries match_seq_num (a duplicate then fails 412)
	// or a producer mark (a duplicate gets the original ack).
	AppendRetrySafe AppendRetry = iota
	// AppendRetryAll also retries appends without match_seq_num after
	// indefinite failures: at-least-once, duplicates possible. This is
	// what S2's SDKs do by default (appendRetryPolicy "all").
	AppendRetryAll
	// AppendRetryNone never retries an append.
	AppendRetryNone
)

// RetryPolicy governs retries of unary calls and reconnects of read
// sessions. The zero value takes DefaultRetryPolicy's fields.
type RetryPolicy struct {
	// MaxAttempts counts every attempt, the first included: 1 disables
	// retries. 0 takes the default (3).
	MaxAttempts int
	// InitialBackoff before the first retry, doubled each time (with ±50%
	// jitter) up to MaxBackoff. Defaults 100 ms and 5 s.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// AppendRetry selects which failed appends are retried.
	AppendRetry AppendRetry
	// MaxRetryAfter caps the wait a 429's retry-after-ms (or Retry-After)
	// asks for; default 30 s. A retry waits the longer of the server's
	// wait and the backoff, and is never attempted when the wait would
	// outlast the context's deadline (the 429 is returned at once).
	MaxRetryAfter time.Duration
}

// DefaultRetryPolicy: 3 attempts, 100 ms doubling to 5 s (or a 429's
// retry-after, up to 30 s), appends retried only when safe.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 3, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second,
		MaxRetryAfter: 30 * time.Second}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = d.InitialBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = d.MaxBackoff
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = d.MaxRetryAfter
	}
	if p.MaxBackoff < p.InitialBackoff {
		p.MaxBackoff = p.InitialBackoff
	}
	return p
}

// opKind is what a call is, for the retry rules.
type opKind struct {
	// append: a unary append, which is not idempotent.
	append bool
	// matchSeqNum: the append carries match_seq_num.
	matchSeqNum bool
	// producer: the append's first record carries a producer mark: the
	// star answers a retry of an applied batch with its original ack.
	producer bool
	// definite: a call that is retried only after a definite failure,
	// whatever the policy (issuing a token: a retry of an attempt that was
	// applied could only fail).
	definite bool
}

var (
	idempotent   = opKind{}
	definiteOnly = opKind{definite: true}
)

// mayRetry is the retry rule: may a call of this kind be attempted again
// after err? It never looks at attempts or time; the loop does.
//
// A failure must be retryable at all: an *api.Error with a retryable
// status (api.Error.Retryable) or a transport failure. Then reads and
// management calls retry; an append retries if the failure is definite,
// or if a duplicate is impossible (match_seq_num, or a producer mark) or
// accepted (AppendRetryAll).
func (p RetryPolicy) mayRetry(kind opKind, err error) bool {
	var ae *api.Error
	var te *TransportError
	switch {
	case errors.As(err, &ae):
		if !ae.Retryable() {
			return false
		}
	case errors.As(err, &te):
	default:
		// Protocol errors and local failures: a retry would fail the same.
		return false
	}
	if kind.definite {
		return IsDefinite(err)
	}
	if !kind.append {
		return true
	}
	switch p.AppendRetry {
	case AppendRetryNone:
		return false
	case AppendRetryAll:
		return true
	}
	return IsDefinite(err) || kind.matchSeqNum || kind.producer
}

// producerMarked reports whether an append is an idempotent producer's
// batch (a well-formed mark on its first record).
func producerMarked(in *api.AppendInput) bool {
	if len(in.Records) == 0 {
		return false
	}
	_, ok, err := api.ProducerOf(in.Records[0].Headers)
	return ok && err == nil
}

// retryAfter is the wait a failure's server asked for (a 429's
// retry-after), zero if none.
func retryAfter(err error) time.Duration {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests {
		return ae.RetryAfter
	}
	return 0
}

// permanentError stops retryLoop.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }

func permanent(err error) error { return &permanentError{err} }

// newBackoff is the policy's backoff schedule.
func (p RetryPolicy) newBackoff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     p.InitialBackoff,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         p.MaxBackoff,
	}
	b.Reset()
	return b
}

// retryLoop runs op until it succeeds, returns a permanent error, the
// attempts run out or ctx ends. op gets the attempt number from 1.
func retryLoop[T any](ctx context.Context, p RetryPolicy, op func(attempt int) (T, error)) (T, error) {
	b := p.newBackoff()
	var zero T
	for attempt := 1; ; attempt++ {
		v, err := op(attempt)
		if err == nil {
			return v, nil
		}
		var perm *permanentError
		if errors.As(err, &perm) {
			return zero, perm.err
		}
		if attempt >= p.MaxAttempts {
			return zero, err
		}
		wait := b.NextBackOff()
		if ra := retryAfter(err); ra > 0 {
			wait = max(wait, min(ra, p.MaxRetryAfter))
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				// The server asks for a wait the caller will not give:
				// fail now with its answer instead of sleeping to the end.
				return zero, err
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), err)
		case <-t.C:
		}
	}
}
