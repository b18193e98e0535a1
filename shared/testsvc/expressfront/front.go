// Package expressfront is a test stand-in for the zonal endpoint of S3
// Express One Zone, in front of an S3-compatible server (versitygw).
//
// aws-sdk-go-v2 treats bucket names ending "--<zone id>--x-s3" as directory
// buckets: it first calls CreateSession (GET /<bucket>?session, SigV4 with
// the long-term keys, service "s3express"), caches the session credentials
// per bucket, and signs every data request with them plus the header
// x-amz-s3session-token. versitygw does not serve CreateSession, so the
// front does: it issues ReadWrite or ReadOnly sessions that expire, checks
// that every data request on a directory bucket is signed with a live
// session it issued and that the session's mode allows the operation, then
// forwards the request to the upstream re-signed with the upstream's own
// keys (SigV4, service "s3", path style) and passes the answer back.
// Requests on general-purpose bucket names are checked against the
// long-term keys (service "s3") and forwarded as they are, so one client
// can hold both kinds of bucket, as a star does.
//
// Where the star depends on S3 Express behaving unlike S3 Standard, the
// front answers as S3 Express does: ListObjectsV2 pages come back unsorted,
// and only prefixes ending in '/' (and only the '/' delimiter) are taken.
// Conditional writes (If-None-Match: * → 412), ranges, multipart uploads
// and copies are the upstream's own answers.
//
// It is test infrastructure: an http.Handler for a loopback listener, with
// no state outside the Front value.
package expressfront

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Mode is a session's mode (CreateSession's x-amz-create-session-mode).
type Mode string

// The session modes.
const (
	ReadWrite Mode = "ReadWrite"
	ReadOnly  Mode = "ReadOnly"
)

// Principal is one set of long-term keys the front knows, standing for an
// IAM identity allowed s3express:CreateSession on every directory bucket.
type Principal struct {
	AccessKey, SecretKey string
	// ReadOnly limits the principal to ReadOnly sessions, as a policy with
	// the condition s3express:SessionMode = ReadOnly does (the stack's
	// settle role). A CreateSession without a mode then gets a ReadOnly
	// session; one asking for ReadWrite is refused 403.
	ReadOnly bool
}

// Config configures a Front.
type Config struct {
	// Region is the signing region clients use (e.g. us-east-1).
	Region string
	// Upstream is the S3-compatible server's base URL (http://127.0.0.1:port),
	// reached path style with UpstreamAccessKey/UpstreamSecretKey.
	Upstream                             string
	UpstreamAccessKey, UpstreamSecretKey string
	// Principals are the long-term keys clients may use. At least one.
	Principals []Principal
	// Domain is the host name of the endpoint for virtual-hosted requests:
	// Host "<bucket>.<Domain>[:port]" addresses <bucket>. Requests to Domain
	// itself or to an IP address are path style. Default "s3express.test".
	Domain string
	// SessionLifetime is how long a session lives (S3 Express: 5 minutes,
	// the default). Tests shorten it so the SDK's refresh runs.
	SessionLifetime time.Duration
	// ExpiryGrace accepts a request signed before its session expired that
	// arrives up to this long after (default 1 s): the in-flight margin a
	// client cannot avoid. A request signed after expiry is always refused.
	ExpiryGrace time.Duration
	// MaxBody bounds a request body the front buffers (default 64 MiB).
	MaxBody int64
	// RequestTimeout bounds one forwarded request (default 60 s).
	RequestTimeout time.Duration
	// Seed drives the listing shuffle and nothing else.
	Seed uint64
	// Now is the clock for session expiry and signature skew (default
	// time.Now). The client's SDK uses the real clock for its cache.
	Now func() time.Time
	// Client sends the forwarded requests (default: a private transport).
	Client *http.Client
}

// Stats counts what the front did, for tests.
type Stats struct {
	// Sessions counts the sessions issued, by mode.
	Sessions map[Mode]int
	// SessionsByBucket counts the sessions issued, by bucket.
	SessionsByBucket map[string]int
	// Forwarded counts the requests passed upstream, by operation.
	Forwarded map[Op]int
	// Refused counts the front's own refusals, by S3 error code.
	Refused map[string]int
	// Aborted counts requests whose client went away before its body
	// arrived (a star killed mid-request): no answer reaches anyone, so
	// they are not refusals.
	Aborted int
	// ShuffledPages counts ListObjectsV2 pages returned in a new order.
	ShuffledPages int
	// InGrace counts requests accepted although their session had expired
	// when they arrived (signed before the expiry, within ExpiryGrace).
	InGrace int
}

// Front is the express stand-in. It is safe for concurrent use.
type Front struct {
	cfg      Config
	upstream *url.URL
	keys     map[string]Principal

	mu       sync.Mutex
	sessions map[string]*session // by token
	byKey    map[string]*session // by session access key id
	rng      *mrand.Rand
	nextID   uint64
	stats    Stats
}

type session struct {
	accessKey, secret, token string
	bucket                   string
	mode                     Mode
	principal                string
	expires                  time.Time
}

// New checks cfg and returns a Front.
func New(cfg Config) (*Front, error) {
	if cfg.Region == "" || cfg.Upstream == "" || cfg.UpstreamAccessKey == "" || len(cfg.Principals) == 0 {
		return nil, errors.New("expressfront: Region, Upstream, upstream keys and a principal are required")
	}
	u, err := url.Parse(cfg.Upstream)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("expressfront: upstream %q: not a base URL", cfg.Upstream)
	}
	if cfg.Domain == "" {
		cfg.Domain = "s3express.test"
	}
	if cfg.SessionLifetime <= 0 {
		cfg.SessionLifetime = 5 * time.Minute
	}
	if cfg.ExpiryGrace <= 0 {
		cfg.ExpiryGrace = time.Second
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 64 << 20
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 60 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			DisableCompression:  true, // pass bodies through byte for byte
			IdleConnTimeout:     30 * time.Second,
		}}
	}
	f := &Front{
		cfg:      cfg,
		upstream: u,
		keys:     make(map[string]Principal, len(cfg.Principals)),
		sessions: map[string]*session{},
		byKey:    map[string]*session{},
		rng:      mrand.New(mrand.NewPCG(cfg.Seed, cfg.Seed^0x5eed)),
		stats:    newStats(),
	}
	for _, p := range cfg.Principals {
		if p.AccessKey == "" || p.SecretKey == "" {
			return nil, errors.New("expressfront: a principal without keys")
		}
		f.keys[p.AccessKey] = p
	}
	return f, nil
}

func newStats() Stats {
	return Stats{Sessions: map[Mode]int{}, SessionsByBucket: map[string]int{}, Forwarded: map[Op]int{}, Refused: map[string]int{}}
}

// Stats returns a copy of the counters.
func (f *Front) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := newStats()
	for k, v := range f.stats.Sessions {
		c.Sessions[k] = v
	}
	for k, v := range f.stats.SessionsByBucket {
		c.SessionsByBucket[k] = v
	}
	for k, v := range f.stats.Forwarded {
		c.Forwarded[k] = v
	}
	for k, v := range f.stats.Refused {
		c.Refused[k] = v
	}
	c.ShuffledPages = f.stats.ShuffledPages
	c.InGrace = f.stats.InGrace
	c.Aborted = f.stats.Aborted
	return c
}

// CloseIdleConnections drops the front's idle connections to the upstream
// (call it before stopping the upstream, so it need not wait for them).
func (f *Front) CloseIdleConnections() { f.cfg.Client.CloseIdleConnections() }

// IsDirectoryBucket reports a directory bucket name: "<base>--<zone id>--x-s3"
// (the SDK's own test is the "--x-s3" suffix).
func IsDirectoryBucket(name string) bool {
	base, ok := strings.CutSuffix(name, "--x-s3")
	if !ok {
		return false
	}
	i := strings.LastIndex(base, "--")
	return i > 0 && i+2 < len(base)
}

// request is one parsed incoming request.
type request struct {
	id        string
	bucket    string
	key       string // unescaped
	keyPath   string // "/"+escaped key, or "" for bucket-level requests
	directory bool
	op        Op
}

func (f *Front) requestID() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	return fmt.Sprintf("EXPRESSFRONT%08X", f.nextID)
}

// ServeHTTP checks one request and answers it or forwards it.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), f.cfg.RequestTimeout)
	defer cancel()
	req := &request{id: f.requestID()}
	if err := f.serve(ctx, w, r, req); err != nil {
		f.mu.Lock()
		if err.aborted() {
			f.stats.Aborted++
		} else {
			f.stats.Refused[err.Code]++
		}
		f.mu.Unlock()
		err.write(w, r, req.id)
	}
}

func (f *Front) serve(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) *s3Error {
	rawPath := requestPath(r)
	if err := f.address(r, rawPath, req); err != nil {
		return err
	}
	req.op = identify(r.Method, req.key, r.URL.Query(), r.Header)
	if req.directory && req.op == OpUnsupported {
		return errNotImplemented("the express front does not serve this operation on a directory bucket")
	}
	a, aerr := parseAuth(r)
	if aerr != nil {
		return aerr
	}
	now := f.cfg.Now()
	at, terr := signingTime(r, a, now)
	if terr != nil {
		return terr
	}
	if a.Region != f.cfg.Region {
		return errMalformedAuth("the region '" + a.Region + "' is wrong; expecting '" + f.cfg.Region + "'")
	}
	wantService := "s3"
	if req.directory {
		wantService = "s3express"
	}
	if a.Service != wantService {
		return errMalformedAuth("incorrect service \"" + a.Service + "\"; this endpoint wants \"" + wantService + "\" for bucket " + req.bucket)
	}
	payloadHash := r.Header.Get(headerContentHash)
	if payloadHash == "" {
		return errInvalidRequest("missing required header for this request: x-amz-content-sha256")
	}
	body, berr := f.readBody(r, payloadHash)
	if berr != nil {
		return berr
	}
	if !req.directory {
		// A general-purpose bucket: long-term keys, no session.
		if r.Header.Get(headerSession) != "" {
			return errInvalidArgument("x-amz-s3session-token on a general purpose bucket")
		}
		if _, err := f.principal(ctx, r, rawPath, a, payloadHash, at); err != nil {
			return err
		}
		if err := f.authorizeCopySource(r, a.AccessKey, nil); err != nil {
			return err
		}
		return f.forward(ctx, w, r, req, body, payloadHash)
	}
	if req.op == OpCreateSession {
		return f.createSession(ctx, w, r, rawPath, req, a, payloadHash, at)
	}
	if err := f.authorizeData(ctx, r, rawPath, req, a, payloadHash, at, now); err != nil {
		return err
	}
	if req.op == OpListObjectsV2 {
		if err := checkExpressListing(r.URL.Query()); err != nil {
			return err
		}
	}
	return f.forward(ctx, w, r, req, body, payloadHash)
}

// address finds the bucket and key: virtual-hosted ("<bucket>.<Domain>")
// or path style ("/<bucket>/<key>").
func (f *Front) address(r *http.Request, rawPath string, req *request) *s3Error {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	escaped := rawPath
	if b, ok := strings.CutSuffix(host, "."+f.cfg.Domain); ok && net.ParseIP(host) == nil {
		req.bucket = b
	} else {
		b, k, _ := strings.Cut(strings.TrimPrefix(rawPath, "/"), "/")
		req.bucket, escaped = b, "/"+k
	}
	if req.bucket == "" {
		return errInvalidRequest("the express front serves bucket requests only")
	}
	if escaped == "/" {
		escaped = ""
	}
	key, err := url.PathUnescape(strings.TrimPrefix(escaped, "/"))
	if err != nil {
		return errInvalidRequest("bad path escaping")
	}
	req.key, req.keyPath = key, escaped
	req.directory = IsDirectoryBucket(req.bucket)
	return nil
}

// readBody buffers the body (bounded) so it can be checked against the
// signed payload hash and re-sent (seekable) upstream.
func (f *Front) readBody(r *http.Request, payloadHash string) ([]byte, *s3Error) {
	if strings.HasPrefix(payloadHash, "STREAMING-AWS4-HMAC-SHA256") {
		// Chunk signatures chain from the seed signature, which re-signing
		// would break.
		return nil, errNotImplemented("signed aws-chunked payloads are not served by the express front")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, f.cfg.MaxBody+1))
	if err != nil {
		return nil, errInvalidRequest(bodyReadFailed + err.Error())
	}
	if int64(len(body)) > f.cfg.MaxBody {
		return nil, errTooLarge(f.cfg.MaxBody)
	}
	if isHexHash(payloadHash) && sha256Hex(body) != payloadHash {
		return nil, errContentSHA256Mismatch()
	}
	return body, nil
}

// principal checks a request signed with long-term keys.
func (f *Front) principal(ctx context.Context, r *http.Request, rawPath string, a authHeader, payloadHash string, at time.Time) (Principal, *s3Error) {
	p, ok := f.keys[a.AccessKey]
	if !ok {
		return Principal{}, errInvalidAccessKeyID()
	}
	if err := verify(ctx, r, rawPath, a, p.SecretKey, payloadHash, at); err != nil {
		return Principal{}, err
	}
	return p, nil
}

// authorizeData checks a request on a directory bucket other than
// CreateSession: a live session of this bucket signed it and its mode
// allows the operation. CopyObject, UploadPartCopy and HeadBucket are
// signed with long-term keys instead (the SDK disables session auth for
// them); their authority is the principal's right to open sessions.
func (f *Front) authorizeData(ctx context.Context, r *http.Request, rawPath string, req *request, a authHeader, payloadHash string, at, now time.Time) *s3Error {
	token := r.Header.Get(headerSession)
	if token == "" {
		if _, ok := f.keys[a.AccessKey]; ok {
			if !iamSigned[req.op] {
				// S3 Express accepts this when a client disables session
				// auth; the front refuses it so that a client that lost
				// session auth fails its tests.
				return errAccessDenied(string(req.op) + " on a directory bucket must be signed with a session (x-amz-s3session-token); the express front refuses long-term keys here")
			}
			p, err := f.principal(ctx, r, rawPath, a, payloadHash, at)
			if err != nil {
				return err
			}
			if writes(req.op) && p.ReadOnly {
				return errAccessDenied(string(req.op) + " needs a ReadWrite session right on " + req.bucket + "; the principal has ReadOnly")
			}
			return f.authorizeCopySource(r, a.AccessKey, nil)
		}
		if f.knownSessionKey(a.AccessKey) {
			return errMissingSecurityHeader("x-amz-s3session-token")
		}
		return errInvalidAccessKeyID()
	}
	if r.Header.Get(headerSecurity) != "" {
		return errInvalidRequest("both x-amz-security-token and x-amz-s3session-token")
	}
	if !signed(a, "x-amz-s3session-token") {
		return errAccessDenied("x-amz-s3session-token is not among the signed headers")
	}
	s, ok := f.lookup(token)
	switch {
	case !ok:
		return errInvalidToken("no such session")
	case s.accessKey != a.AccessKey:
		return errInvalidToken("the token belongs to another access key")
	case s.bucket != req.bucket:
		return errAccessDenied("the session is for bucket " + s.bucket + ", not " + req.bucket)
	case !at.Before(s.expires) || now.After(s.expires.Add(f.cfg.ExpiryGrace)):
		return errExpiredToken()
	}
	if err := verify(ctx, r, rawPath, a, s.secret, payloadHash, at); err != nil {
		return err
	}
	if s.mode == ReadOnly && !readOnlyOps[req.op] {
		return errAccessDenied(string(req.op) + " is not allowed in a ReadOnly session")
	}
	if !now.Before(s.expires) {
		f.mu.Lock()
		f.stats.InGrace++
		f.mu.Unlock()
	}
	return f.authorizeCopySource(r, s.principal, &s)
}

// authorizeCopySource checks the source of a copy: a directory bucket
// source needs the right to open a session on it (any mode). With a
// session s, only its own bucket is covered by it.
func (f *Front) authorizeCopySource(r *http.Request, principal string, s *session) *s3Error {
	src := r.Header.Get("X-Amz-Copy-Source")
	if src == "" {
		return nil
	}
	dec, err := url.PathUnescape(strings.TrimPrefix(src, "/"))
	if err != nil {
		return errInvalidArgument("bad x-amz-copy-source")
	}
	bucket, _, _ := strings.Cut(dec, "/")
	if !IsDirectoryBucket(bucket) || (s != nil && s.bucket == bucket) {
		return nil
	}
	if _, ok := f.keys[principal]; !ok {
		return errAccessDenied("no right to read copy source bucket " + bucket)
	}
	return nil
}

func signed(a authHeader, h string) bool {
	for _, s := range a.SignedHeaders {
		if s == h {
			return true
		}
	}
	return false
}

func (f *Front) lookup(token string) (session, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[token]
	if !ok {
		return session{}, false
	}
	return *s, true
}

func (f *Front) knownSessionKey(ak string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.byKey[ak]
	return ok
}

type createSessionResult struct {
	XMLName     struct{} `xml:"CreateSessionResult"`
	Xmlns       string   `xml:"xmlns,attr"`
	Credentials struct {
		SessionToken    string `xml:"SessionToken"`
		SecretAccessKey string `xml:"SecretAccessKey"`
		AccessKeyID     string `xml:"AccessKeyId"`
		Expiration      string `xml:"Expiration"`
	} `xml:"Credentials"`
}

// createSession serves CreateSession: checks the long-term signature and
// the principal's mode right, checks the bucket exists upstream, and
// issues a session.
func (f *Front) createSession(ctx context.Context, w http.ResponseWriter, r *http.Request, rawPath string, req *request, a authHeader, payloadHash string, at time.Time) *s3Error {
	if r.Header.Get(headerSession) != "" {
		// S3 Express's own answer (seen by smithy-rs, PR 3474).
		return errInvalidRequest(`CreateSession request should not include "x-amz-s3session-token"`)
	}
	p, err := f.principal(ctx, r, rawPath, a, payloadHash, at)
	if err != nil {
		return err
	}
	var mode Mode
	switch m := Mode(r.Header.Get(headerMode)); m {
	case "":
		// The most privilege the policy allows: ReadWrite, else ReadOnly.
		mode = ReadWrite
		if p.ReadOnly {
			mode = ReadOnly
		}
	case ReadWrite:
		if p.ReadOnly {
			return errAccessDenied("the principal may only create ReadOnly sessions")
		}
		mode = ReadWrite
	case ReadOnly:
		mode = ReadOnly
	default:
		return errInvalidArgument("x-amz-create-session-mode must be ReadWrite or ReadOnly")
	}
	exists, uerr := f.bucketExists(ctx, req.bucket)
	if uerr != nil {
		return uerr
	}
	if !exists {
		return errNoSuchBucket()
	}
	s, gerr := f.issue(req.bucket, mode, p.AccessKey)
	if gerr != nil {
		return errInternal(gerr.Error())
	}
	var out createSessionResult
	out.Xmlns = "http://s3.amazonaws.com/doc/2006-03-01/"
	out.Credentials.SessionToken = s.token
	out.Credentials.SecretAccessKey = s.secret
	out.Credentials.AccessKeyID = s.accessKey
	out.Credentials.Expiration = s.expires.UTC().Format(time.RFC3339)
	writeXML(w, req.id, out)
	return nil
}

// issue mints a session and forgets the ones expired for more than a
// lifetime (so a recently expired token still reads as ExpiredToken).
func (f *Front) issue(bucket string, mode Mode, principal string) (session, error) {
	var b [56]byte
	if _, err := rand.Read(b[:]); err != nil {
		return session{}, err
	}
	now := f.cfg.Now()
	// Whole seconds: the expiry the client parses is the one enforced.
	expires := now.Add(f.cfg.SessionLifetime).Truncate(time.Second)
	s := &session{
		accessKey: "ASIAEXPRESS" + strings.ToUpper(hex.EncodeToString(b[:6])),
		secret:    base64.RawStdEncoding.EncodeToString(b[6:36]),
		token:     base64.RawURLEncoding.EncodeToString(b[36:]) + "." + base64.RawURLEncoding.EncodeToString([]byte(bucket+"|"+string(mode))),
		bucket:    bucket,
		mode:      mode,
		principal: principal,
		expires:   expires,
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for t, old := range f.sessions {
		if now.Sub(old.expires) > f.cfg.SessionLifetime+f.cfg.ExpiryGrace {
			delete(f.sessions, t)
			delete(f.byKey, old.accessKey)
		}
	}
	f.sessions[s.token] = s
	f.byKey[s.accessKey] = s
	f.stats.Sessions[mode]++
	f.stats.SessionsByBucket[bucket]++
	return *s, nil
}

// IssueSession mints a session as CreateSession would, for tests that sign
// requests themselves.
func (f *Front) IssueSession(bucket string, mode Mode, principal string) (aws.Credentials, error) {
	if _, ok := f.keys[principal]; !ok {
		return aws.Credentials{}, fmt.Errorf("expressfront: unknown principal %q", principal)
	}
	s, err := f.issue(bucket, mode, principal)
	if err != nil {
		return aws.Credentials{}, err
	}
	return aws.Credentials{AccessKeyID: s.accessKey, SecretAccessKey: s.secret, SessionToken: s.token, CanExpire: true, Expires: s.expires}, nil
}

// checkExpressListing refuses what a directory bucket's ListObjectsV2
// does not support (API reference): a prefix that does not end in '/', a
// delimiter other than '/', StartAfter.
func checkExpressListing(q url.Values) *s3Error {
	if p := q.Get("prefix"); p != "" && !strings.HasSuffix(p, "/") {
		return errInvalidArgument("directory buckets only support prefixes that end in a delimiter (/)")
	}
	if d, ok := q["delimiter"]; ok && (len(d) != 1 || d[0] != "/") {
		return errInvalidArgument("directory buckets only support the delimiter /")
	}
	if q.Has("start-after") {
		return errInvalidArgument("StartAfter is not supported for directory buckets")
	}
	return nil
}

// ForgetSessions drops every session the front issued, as a service that
// lost its session state would: requests with their tokens are answered
// InvalidToken.
func (f *Front) ForgetSessions() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.sessions)
}
