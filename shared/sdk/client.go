package sdk

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// DefaultEndpoint is where a star listens by default (star dev).
const DefaultEndpoint = "http://127.0.0.1:7480"

// DefaultUserAgent identifies the SDK.
const DefaultUserAgent = "starlog-sdk-go/1"

// Default timeouts.
const (
	// DefaultRequestTimeout bounds one attempt of a unary call (a read's
	// long-poll wait is added to it).
	DefaultRequestTimeout = 30 * time.Second
)

// maxResponseBytes bounds a unary response body read into memory: a 1 MiB
// metered read batch can take up to about six times that as raw JSON.
const maxResponseBytes = 16 << 20

// Encoding is the body encoding of unary appends and reads.
type Encoding uint8

const (
	// EncodingProto sends and asks for application/protobuf (the default).
	EncodingProto Encoding = iota
	// EncodingJSON sends and asks for JSON with s2-format: base64.
	EncodingJSON
)

// Config configures a Client. Only AccountEndpoint is needed; zero values
// take the defaults.
type Config struct {
	// AccountEndpoint is the base URL of the account API (basins). "/v1"
	// is appended when it has no path. Default DefaultEndpoint.
	AccountEndpoint string
	// BasinEndpoint is the base URL of the basin API (streams, records);
	// default AccountEndpoint. A "{basin}" in it is replaced by the basin
	// name, and then no s2-basin header is sent.
	BasinEndpoint string
	// Token, if set, is sent as Authorization: Bearer.
	Token string
	// UserAgent, default DefaultUserAgent.
	UserAgent string
	// HTTPClient carries unary calls; default an HTTP/1.1 client. Its
	// Timeout should be zero: attempts are bounded by RequestTimeout.
	HTTPClient *http.Client
	// SessionClient carries S2S sessions; it must speak HTTP/2 (h2c for
	// http:// endpoints). Default: see NewSessionTransport.
	SessionClient *http.Client
	// RequestTimeout bounds one attempt of a unary call; default
	// DefaultRequestTimeout, negative for none.
	RequestTimeout time.Duration
	// Encoding of unary appends and reads; default EncodingProto.
	Encoding Encoding
	// Retry is the retry policy; the zero value takes DefaultRetryPolicy.
	Retry RetryPolicy
	// Compression of session frames: the client compresses its frames of
	// at least 1 KiB with it and asks the server (Accept-Encoding) for the
	// same. Default none.
	Compression api.Compression
	// Logger receives debug logs of retries and reconnects; default
	// slog.Default().
	Logger *slog.Logger
}

// Client is a handle on an S2-compatible server. It is safe for concurrent
// use.
type Client struct {
	account     *url.URL
	basinTmpl   string
	token       string
	userAgent   string
	http        *http.Client
	session     *http.Client
	reqTimeout  time.Duration
	encoding    Encoding
	retry       RetryPolicy
	compression api.Compression
	log         *slog.Logger
}

// New builds a Client from cfg.
func New(cfg Config) (*Client, error) {
	if cfg.AccountEndpoint == "" {
		cfg.AccountEndpoint = DefaultEndpoint
	}
	account, err := parseEndpoint(cfg.AccountEndpoint)
	if err != nil {
		return nil, fmt.Errorf("sdk: account endpoint: %w", err)
	}
	basinTmpl := cfg.AccountEndpoint
	if cfg.BasinEndpoint != "" {
		basinTmpl = cfg.BasinEndpoint
	}
	// Validate the basin endpoint now, with a placeholder-free stand-in.
	if _, err := parseEndpoint(strings.ReplaceAll(basinTmpl, basinPlaceholder, "basin")); err != nil {
		return nil, fmt.Errorf("sdk: basin endpoint: %w", err)
	}
	if cfg.Compression > api.CompressionGzip {
		return nil, fmt.Errorf("sdk: unknown compression %d", cfg.Compression)
	}
	c := &Client{
		account:     account,
		basinTmpl:   basinTmpl,
		token:       cfg.Token,
		userAgent:   cfg.UserAgent,
		http:        cfg.HTTPClient,
		session:     cfg.SessionClient,
		reqTimeout:  cfg.RequestTimeout,
		encoding:    cfg.Encoding,
		retry:       cfg.Retry.withDefaults(),
		compression: cfg.Compression,
		log:         cfg.Logger,
	}
	if c.userAgent == "" {
		c.userAgent = DefaultUserAgent
	}
	if c.http == nil {
		c.http = &http.Client{Transport: NewUnaryTransport()}
	}
	if c.session == nil {
		c.session = &http.Client{Transport: NewSessionTransport()}
	}
	if c.reqTimeout == 0 {
		c.reqTimeout = DefaultRequestTimeout
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// NewUnaryTransport is the default transport of unary calls: HTTP/1.1
// (HTTP/2 over TLS too for https endpoints), as S2's SDKs use.
func NewUnaryTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	p := new(http.Protocols)
	p.SetHTTP1(true)
	t.Protocols = p
	t.ForceAttemptHTTP2 = false
	t.MaxIdleConnsPerHost = 64
	return t
}

// NewSessionTransport is the default transport of S2S sessions: HTTP/2
// only, in cleartext with prior knowledge (h2c) for http:// endpoints and
// over TLS for https://. HTTP/2 pings detect a dead connection on an idle
// session.
func NewSessionTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	p := new(http.Protocols)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	t.Protocols = p
	t.HTTP2 = &http.HTTP2Config{
		SendPingTimeout: 30 * time.Second,
		PingTimeout:     15 * time.Second,
		// A catch-up read session moves 1 MiB batches back to back: in
		// the default 16 KiB DATA frames the star spends a write syscall
		// per 16 KiB.
		MaxReadFrameSize: 1 << 20,
	}
	return t
}

const basinPlaceholder = "{basin}"

// parseEndpoint parses a base URL and gives it the /v1 path when it has
// none.
func parseEndpoint(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q: no host", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q: an endpoint takes no query or fragment", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path, u.RawPath = "/v1", ""
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = strings.TrimSuffix(u.RawPath, "/")
	return u, nil
}

// basinBase is the base URL of basin's stream API and whether the s2-basin
// header names the basin.
func (c *Client) basinBase(basin string) (*url.URL, bool, error) {
	if strings.Contains(c.basinTmpl, basinPlaceholder) {
		u, err := parseEndpoint(strings.ReplaceAll(c.basinTmpl, basinPlaceholder, basin))
		return u, false, err
	}
	u, err := parseEndpoint(c.basinTmpl)
	return u, true, err
}

// request describes one unary call.
type request struct {
	method string
	// basin, when set, addresses the basin API; otherwise the account API.
	basin string
	// path is the escaped path below the base, starting with "/".
	path        string
	query       url.Values
	body        []byte
	contentType string
	accept      string
	header      http.Header
	// wait extends the attempt timeout (a read's long poll).
	wait time.Duration
}

// response is a successful unary response, its body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// target builds the URL and headers common to unary calls and sessions.
func (c *Client) target(basin, path string, query url.Values) (string, http.Header, error) {
	base := c.account
	header := make(http.Header, 6)
	if basin != "" {
		u, useHeader, err := c.basinBase(basin)
		if err != nil {
			return "", nil, fmt.Errorf("basin endpoint: %w", err)
		}
		base = u
		if useHeader {
			header.Set(api.HeaderBasin, basin)
		}
	}
	u := *base
	// Keep the escaped form: stream names are one percent-encoded segment.
	escaped := u.EscapedPath() + path
	unescaped, err := url.PathUnescape(escaped)
	if err != nil {
		return "", nil, fmt.Errorf("path %q: %w", escaped, err)
	}
	u.Path, u.RawPath = unescaped, escaped
	if len(query) > 0 {
		u.RawQuery = query.Encode()
	}
	if c.token != "" {
		header.Set("Authorization", "Bearer "+c.token)
	}
	header.Set("User-Agent", c.userAgent)
	return u.String(), header, nil
}

// attempt performs one unary call. A non-2xx status becomes an *api.Error;
// transport failures are wrapped.
func (c *Client) attempt(ctx context.Context, r *request) (*response, error) {
	target, header, err := c.target(r.basin, r.path, r.query)
	if err != nil {
		return nil, err
	}
	if c.reqTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.reqTimeout+r.wait)
		defer cancel()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	hr, err := http.NewRequestWithContext(ctx, r.method, target, body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	for k, v := range header {
		hr.Header[k] = v
	}
	for k, v := range r.header {
		hr.Header[k] = v
	}
	if r.contentType != "" {
		hr.Header.Set("Content-Type", r.contentType)
	}
	if r.accept != "" {
		hr.Header.Set("Accept", r.accept)
	}
	resp, err := c.http.Do(hr)
	if err != nil {
		return nil, &TransportError{Op: r.method + " " + r.path, Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, &TransportError{Op: r.method + " " + r.path, Err: fmt.Errorf("read response: %w", err), responded: true}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := api.ParseError(resp.StatusCode, b)
		if e.Status == http.StatusTooManyRequests {
			e.RetryAfter = api.ParseRetryAfter(resp.Header.Get)
		}
		return nil, e
	}
	if len(b) > maxResponseBytes {
		return nil, &ProtocolError{Msg: fmt.Sprintf("%s %s: response exceeds %d bytes", r.method, r.path, maxResponseBytes)}
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// do performs a unary call with retries under kind's rules.
func (c *Client) do(ctx context.Context, r *request, kind opKind) (*response, error) {
	var prev error
	resp, err := retryLoop(ctx, c.retry, func(attempt int) (*response, error) {
		resp, err := c.attempt(ctx, r)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			// The caller gave up: never retry, and say why.
			return nil, permanent(fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), err))
		}
		if !c.retry.mayRetry(kind, err) {
			return nil, permanent(err)
		}
		if kind.append && !IsDefinite(err) {
			prev = err
		}
		c.log.DebugContext(ctx, "sdk: retrying", "op", r.method+" "+r.path, "attempt", attempt, "err", err)
		return nil, err
	})
	if err != nil && prev != nil && !errors.Is(err, prev) {
		// An earlier attempt failed indefinitely and may have been applied:
		// a later 412 may be that attempt's own doing.
		err = &AfterIndefiniteError{Earlier: prev, Err: err}
	}
	return resp, err
}

// doJSON performs a JSON call and decodes the response into out (if
// non-nil and the body is not empty).
func (c *Client) doJSON(ctx context.Context, r *request, kind opKind, in, out any) (*response, error) {
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", r.method, r.path, err)
		}
		r.body = b
		r.contentType = api.ContentTypeJSON
	}
	r.accept = api.ContentTypeJSON
	resp, err := c.do(ctx, r, kind)
	if err != nil {
		return nil, err
	}
	if out != nil && len(bytes.TrimSpace(resp.body)) > 0 {
		if err := json.Unmarshal(resp.body, out); err != nil {
			return nil, &ProtocolError{Msg: fmt.Sprintf("%s %s: decode response", r.method, r.path), Err: err}
		}
	}
	return resp, nil
}

// newRequestToken is a random idempotency token for creates, reused by
// their retries.
func newRequestToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b[:])
}

// ProvisionResult is what an ensure (PUT) did.
type ProvisionResult string

const (
	Created ProvisionResult = api.ProvisionCreated
	Updated ProvisionResult = api.ProvisionUpdated
	Noop    ProvisionResult = api.ProvisionNoop
)

// provisionResult reads s2-provision-result, falling back to the status as
// S2's SDKs do (201 created, otherwise updated).
func provisionResult(resp *response) ProvisionResult {
	switch v := ProvisionResult(strings.ToLower(strings.TrimSpace(resp.header.Get(api.HeaderProvisionResult)))); v {
	case Created, Updated, Noop:
		return v
	}
	if resp.status == http.StatusCreated {
		return Created
	}
	return Updated
}
