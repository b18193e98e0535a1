package s3

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
)

// S3 Express session auth, as the SDK does it: a request on a directory
// bucket ("<base>--<zone id>--x-s3") first gets session credentials for the
// bucket from the client's ExpressCredentials provider, which calls
// CreateSession when its per-bucket cache has none (or an expired one), and
// refreshes them in the background in the last minute of their life.
//
// Two things about that path matter to the objstore contract, and this file
// handles both without replacing the SDK's provider (its cache, refresh and
// single-flight are kept):
//
//   - A failed CreateSession means the data request was never sent, so its
//     outcome is definite: nothing was written. The SDK reports it through
//     the identity step with the cause flattened to text ("get identity:
//     get credentials: …"), which classify cannot read. So each objstore
//     call carries a callState: a Deserialize-step marker records that an
//     attempt reached the transport, and a thin wrapper around the provider
//     records the CreateSession error itself, typed. A call that failed
//     before any attempt was sent is never indefinite, and a CreateSession
//     404 (no such directory bucket) is ErrNotFound like any missing bucket.
//
//   - The SDK clones the default provider for every call made with
//     per-call options (finalizeOperationExpressCredentials), and a clone
//     has its own single-flight group: concurrent calls on a cold bucket
//     then each call CreateSession (16 racing PutIfAbsent, 16 sessions).
//     The Store therefore sends through clients configured once, with no
//     per-call options, sharing one wrapped provider (one cache, one
//     single-flight group per bucket).

// callState is what one objstore call learned while the SDK ran it.
type callState struct {
	sent atomic.Bool // some attempt reached the transport

	mu      sync.Mutex
	session error // the last session credentials failure
}

func (c *callState) setSession(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.session = err
}

func (c *callState) sessionErr() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

type callKey struct{}

// track starts a call: its context carries the state the marker and the
// provider wrapper fill in.
func track(ctx context.Context) (context.Context, *callState) {
	c := &callState{}
	return context.WithValue(ctx, callKey{}, c), c
}

func callFrom(ctx context.Context) *callState {
	c, _ := ctx.Value(callKey{}).(*callState)
	return c
}

// sessionCredentials wraps the client's S3 Express credentials provider
// (the SDK's default one) and records a failure in the call's state.
type sessionCredentials struct {
	inner awss3.ExpressCredentialsProvider
}

func (p sessionCredentials) Retrieve(ctx context.Context, bucket string) (aws.Credentials, error) {
	creds, err := p.inner.Retrieve(ctx, bucket)
	if err != nil {
		if c := callFrom(ctx); c != nil {
			c.setSession(err)
		}
	}
	return creds, err
}

// sentMarker sits last in the Deserialize step, just before the request
// goes to the HTTP client, and marks the call as sent.
type sentMarker struct{}

func (sentMarker) ID() string { return "StarlogObjstoreSentMarker" }

func (sentMarker) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error,
) {
	if c := callFrom(ctx); c != nil {
		c.sent.Store(true)
	}
	return next.HandleDeserialize(ctx, in)
}

func addSentMarker(st *middleware.Stack) error {
	return st.Deserialize.Add(sentMarker{}, middleware.After)
}

// clients derives the two clients a Store sends through from the caller's:
// one with the SDK's retries, one with a single attempt (conditional
// writes, see Store.once). Both share the caller's session provider,
// wrapped, and carry the sent marker. The caller's client itself issues the
// CreateSession calls (its provider is bound to it).
func clients(client *awss3.Client) (retrying, once *awss3.Client) {
	instrument := func(o *awss3.Options) {
		if o.ExpressCredentials != nil {
			o.ExpressCredentials = sessionCredentials{inner: o.ExpressCredentials}
		}
		o.APIOptions = append(o.APIOptions, addSentMarker)
	}
	base := client.Options()
	retrying = awss3.New(base, instrument)
	once = awss3.New(base, instrument, func(o *awss3.Options) { o.RetryMaxAttempts = 1 })
	return retrying, once
}
