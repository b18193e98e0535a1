package s3

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"golang.org/x/sync/singleflight"
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
//
// And one thing the SDK's provider does not do: drop a session the
// service refused. A request whose session token is answered InvalidToken
// or ExpiredToken (the service forgot the session, or its clock and ours
// disagree on its expiry) leaves the provider sending that token until it
// expires by the client's clock, up to the session's lifetime (5 minutes
// on AWS), and the bucket refuses every write meanwhile. So a refusal
// marks the bucket (refusedSessions), and its next request opens a new
// session at once.

// callState is what one objstore call learned while the SDK ran it.
type callState struct {
	sent atomic.Bool // some attempt reached the transport

	mu       sync.Mutex
	session  error            // the last session credentials failure
	bucket   string           // the directory bucket whose session the call used
	sessions *refusedSessions // where a refusal of that session is noted
}

// noteRefusal marks the call's session refused when err says so.
func (c *callState) noteRefusal(err error) {
	if c == nil {
		return
	}
	c.mu.Lock()
	bucket, sessions := c.bucket, c.sessions
	c.mu.Unlock()
	if sessions != nil && bucket != "" && sessionRefused(err) {
		sessions.refuse(bucket)
	}
}

// sessionRefused reports whether err is the service refusing the
// request's session token.
func sessionRefused(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "InvalidToken", "ExpiredToken":
		return true
	}
	return false
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
// (the SDK's default one): it serves a bucket whose session was refused
// from refused, and records the bucket and any failure in the call's
// state.
type sessionCredentials struct {
	inner   awss3.ExpressCredentialsProvider
	refused *refusedSessions
}

func (p sessionCredentials) Retrieve(ctx context.Context, bucket string) (aws.Credentials, error) {
	c := callFrom(ctx)
	if c != nil {
		c.mu.Lock()
		c.bucket, c.sessions = bucket, p.refused
		c.mu.Unlock()
	}
	creds, ok, err := p.refused.retrieve(ctx, bucket)
	if !ok && err == nil {
		creds, err = p.inner.Retrieve(ctx, bucket)
	}
	if err != nil && c != nil {
		c.setSession(err)
	}
	return creds, err
}

// freshMargin is how long before its expiry a session opened after a
// refusal is handed back to the SDK's provider, whose own session (older,
// so expiring first) it has refreshed by then.
const freshMargin = time.Minute

// refusedSessions opens a new session for a directory bucket whose session
// the service refused, and serves it until freshMargin before it expires.
type refusedSessions struct {
	client *awss3.Client // opens sessions with the long-term credentials
	group  singleflight.Group
	// any is set at the first refusal: until then every request goes
	// straight to the SDK's provider, without the lock.
	any atomic.Bool
	// refusals counts the refused sessions noted, reopened the sessions
	// opened after a refusal (Store.SessionStats).
	refusals, reopened atomic.Uint64

	mu      sync.Mutex
	refused map[string]bool
	fresh   map[string]aws.Credentials
}

func newRefusedSessions(client *awss3.Client) *refusedSessions {
	return &refusedSessions{client: client, refused: map[string]bool{}, fresh: map[string]aws.Credentials{}}
}

// refuse notes that bucket's session was refused.
func (r *refusedSessions) refuse(bucket string) {
	r.any.Store(true)
	r.refusals.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused[bucket] = true
	delete(r.fresh, bucket)
}

// retrieve returns a session for bucket if one was refused (ok), opening
// a new one if need be; !ok leaves the bucket to the SDK's provider.
func (r *refusedSessions) retrieve(ctx context.Context, bucket string) (aws.Credentials, bool, error) {
	if !r.any.Load() {
		return aws.Credentials{}, false, nil
	}
	r.mu.Lock()
	if creds, ok := r.fresh[bucket]; ok {
		if time.Until(creds.Expires) > freshMargin {
			r.mu.Unlock()
			return creds, true, nil
		}
		delete(r.fresh, bucket)
	}
	refused := r.refused[bucket]
	r.mu.Unlock()
	if !refused {
		return aws.Credentials{}, false, nil
	}
	v, err, _ := r.group.Do(bucket, func() (any, error) {
		out, err := r.client.CreateSession(ctx, &awss3.CreateSessionInput{Bucket: aws.String(bucket)})
		if err != nil {
			return nil, err
		}
		sc := out.Credentials
		if sc == nil || sc.Expiration == nil {
			return nil, fmt.Errorf("s3: CreateSession %s: no credentials in the answer", bucket)
		}
		creds := aws.Credentials{
			AccessKeyID: aws.ToString(sc.AccessKeyId), SecretAccessKey: aws.ToString(sc.SecretAccessKey),
			SessionToken: aws.ToString(sc.SessionToken), CanExpire: true, Expires: *sc.Expiration,
			Source: "starlog: a session opened after a refusal",
		}
		r.reopened.Add(1)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.fresh[bucket] = creds
		delete(r.refused, bucket)
		return creds, nil
	})
	if err != nil {
		return aws.Credentials{}, true, err
	}
	return v.(aws.Credentials), true, nil
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
// CreateSession calls (its provider is bound to it). refused is what the
// wrapper serves after a refusal.
func clients(client *awss3.Client) (retrying, once *awss3.Client, refused *refusedSessions) {
	refused = newRefusedSessions(client)
	instrument := func(o *awss3.Options) {
		if o.ExpressCredentials != nil {
			o.ExpressCredentials = sessionCredentials{inner: o.ExpressCredentials, refused: refused}
		}
		o.APIOptions = append(o.APIOptions, addSentMarker)
	}
	base := client.Options()
	retrying = awss3.New(base, instrument)
	once = awss3.New(base, instrument, func(o *awss3.Options) { o.RetryMaxAttempts = 1 })
	return retrying, once, refused
}
