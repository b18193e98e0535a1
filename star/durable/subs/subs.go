package subs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// Subscriptions (protocol §6–7) are durable cursors over a set of streams
// that wake a worker, by a signed webhook or by an event in a wake
// stream, when a linked stream has records past its acked offset. This
// file holds the pure parts: the subscription's config, its stored row and
// the rules on paths and webhook URLs. state.go is the state machine,
// driver.go the I/O, http.go the routes.

// Bounds of a subscription (docs/durable-streams.md, "Subscriptions").
const (
	defaultLeaseTTL = 30 * time.Second
	minLeaseTTL     = time.Second
	maxLeaseTTL     = 10 * time.Minute
	// maxSubLinks bounds the streams one subscription links: its row is
	// one metastore item (DynamoDB's limit is 400 KB) and every pass over
	// it checks each link's tail.
	maxSubLinks = 1000
	// maxSubIDBytes bounds a subscription id (and a worker name).
	maxSubIDBytes = 128
	// maxSubBody bounds a control request's JSON body.
	maxSubBody = 256 << 10
	// maxDescription bounds a subscription's description.
	maxDescription = 1024
	// maxPatternBytes bounds a subscription's pattern as a stream name is
	// bounded (api.MaxStreamNameLen): with the matcher's cost the product
	// of the two segment counts, one match costs at most about 257 × 257
	// steps (BenchmarkGlobMatchAtTheMaxima).
	maxPatternBytes = 512
)

// Subscription types.
const (
	subWebhook  = "webhook"
	subPullWake = "pull-wake"
)

// subError is a protocol error of the control API: an HTTP status and the
// code clients switch on ({"error":{"code":…}}).
type subError struct {
	Status  int
	Code    string
	Message string
	// Holder and Generation go with ALREADY_CLAIMED.
	Holder     string
	Generation uint64
}

func (e *subError) Error() string { return e.Code + ": " + e.Message }

// Error codes of the control API (the reference server's names).
const (
	codeInvalidRequest = "INVALID_REQUEST"
	codeNotFound       = "SUBSCRIPTION_NOT_FOUND"
	codeExists         = "SUBSCRIPTION_ALREADY_EXISTS"
	codeURLRejected    = "WEBHOOK_URL_REJECTED"
	codeTokenInvalid   = "TOKEN_INVALID"
	codeFenced         = "FENCED"
	codeClaimed        = "ALREADY_CLAIMED"
	codeNoPending      = "NO_PENDING_WORK"
	codeInvalidOffset  = "INVALID_OFFSET"
)

func invalidReq(format string, args ...any) *subError {
	return &subError{Status: http.StatusBadRequest, Code: codeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

var (
	errSubNotFound = &subError{Status: http.StatusNotFound, Code: codeNotFound, Message: "subscription not found"}
	errFenced      = &subError{Status: http.StatusConflict, Code: codeFenced, Message: "the wake is stale: its generation or wake id is not the current one"}
	errTokenBad    = &subError{Status: http.StatusUnauthorized, Code: codeTokenInvalid, Message: "missing or invalid wake token"}
	// errHolderGone: the access token that claimed the wake was revoked
	// or has expired; the wake is withdrawn (pending work wakes again).
	errHolderGone = &subError{Status: http.StatusUnauthorized, Code: codeTokenInvalid, Message: "the access token that claimed this wake was revoked or has expired; the wake is withdrawn"}
)

// subConfig is what a PUT defines; its hash decides 201, 200 or 409.
type subConfig struct {
	Type        string   `json:"type"`
	Pattern     string   `json:"pattern,omitempty"`
	Streams     []string `json:"streams,omitempty"` // normalized, sorted, distinct
	WebhookURL  string   `json:"webhook_url,omitempty"`
	WakeStream  string   `json:"wake_stream,omitempty"`
	LeaseTTLms  int64    `json:"lease_ttl_ms"`
	Description *string  `json:"description,omitempty"`
}

// leaseTTL is the wake lease: the parse bounds it (1 s to 10 min); a
// stored row is converted saturating all the same.
func (c *subConfig) leaseTTL() time.Duration { return api.Millis(uint64(max(c.LeaseTTLms, 0))) }

// hash is the SHA-256 of the normalized config (json.Marshal of a struct
// is canonical: fixed field order, sorted streams).
func (c *subConfig) hash() string {
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// parseSubConfig reads a PUT body. Paths are root-relative, with leading
// and trailing slashes dropped; the URL policy is checked by the caller.
func parseSubConfig(body []byte) (subConfig, *subError) {
	var in struct {
		Type    string             `json:"type"`
		Pattern *string            `json:"pattern"`
		Streams []any              `json:"streams"`
		Webhook *struct{ URL any } `json:"webhook"`
		Wake    *string            `json:"wake_stream"`
		Lease   *json.Number       `json:"lease_ttl_ms"`
		Desc    *string            `json:"description"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		return subConfig{}, invalidReq("the body must be a JSON object: %v", err)
	}
	var c subConfig
	switch in.Type {
	case subWebhook, subPullWake:
		c.Type = in.Type
	default:
		return subConfig{}, invalidReq(`type must be "webhook" or "pull-wake"`)
	}
	if in.Pattern != nil && *in.Pattern != "" {
		if len(*in.Pattern) > maxPatternBytes {
			return subConfig{}, invalidReq("pattern is at most %d bytes", maxPatternBytes)
		}
		c.Pattern = normPath(*in.Pattern)
		if err := checkRelPath(c.Pattern); err != nil {
			return subConfig{}, invalidReq("pattern: %s", err)
		}
	}
	for _, s := range in.Streams {
		p, ok := s.(string)
		if !ok || normPath(p) == "" {
			return subConfig{}, invalidReq("streams must be non-empty strings")
		}
		p = normPath(p)
		if err := checkRelPath(p); err != nil {
			return subConfig{}, invalidReq("stream %q: %s", p, err)
		}
		c.Streams = append(c.Streams, p)
	}
	slices.Sort(c.Streams)
	c.Streams = slices.Compact(c.Streams)
	if c.Pattern == "" && len(c.Streams) == 0 {
		return subConfig{}, invalidReq("at least one of pattern or streams is required")
	}
	if len(c.Streams) > maxSubLinks {
		return subConfig{}, invalidReq("at most %d streams", maxSubLinks)
	}
	c.LeaseTTLms = defaultLeaseTTL.Milliseconds()
	if in.Lease != nil {
		n, err := in.Lease.Int64()
		if err != nil || n < minLeaseTTL.Milliseconds() || n > maxLeaseTTL.Milliseconds() {
			return subConfig{}, invalidReq("lease_ttl_ms must be an integer from %d to %d", minLeaseTTL.Milliseconds(), maxLeaseTTL.Milliseconds())
		}
		c.LeaseTTLms = n
	}
	switch c.Type {
	case subWebhook:
		u, _ := func() (string, bool) {
			if in.Webhook == nil {
				return "", false
			}
			s, ok := in.Webhook.URL.(string)
			return s, ok
		}()
		if u == "" {
			return subConfig{}, invalidReq("a webhook subscription needs webhook.url")
		}
		c.WebhookURL = u
	case subPullWake:
		if in.Wake == nil || normPath(*in.Wake) == "" {
			return subConfig{}, invalidReq("a pull-wake subscription needs wake_stream")
		}
		c.WakeStream = normPath(*in.Wake)
		if err := checkRelPath(c.WakeStream); err != nil {
			return subConfig{}, invalidReq("wake_stream: %s", err)
		}
	}
	if in.Desc != nil {
		if len(*in.Desc) > maxDescription {
			return subConfig{}, invalidReq("description is at most %d bytes", maxDescription)
		}
		c.Description = in.Desc
	}
	return c, nil
}

// normPath drops leading and trailing slashes (the reference's rule).
func normPath(p string) string { return strings.Trim(p, "/") }

// checkRelPath refuses the reserved segment: a path with a __ds segment
// is a control route, never a stream.
func checkRelPath(p string) error {
	if slices.Contains(strings.Split(p, "/"), reservedSegment) {
		return errors.New("the __ds segment is reserved")
	}
	return nil
}

// reservedSegment marks the control routes (protocol §6).
const reservedSegment = "__ds"

// globMatch matches a root-relative path against a pattern: "*" is one
// whole segment, "**" zero or more; other segments match literally. It
// runs in O(segments(pattern) × segments(path)) time whatever the pattern
// (a backtracking matcher is exponential in the number of "**" segments:
// nine of them against a 41-segment name cost seconds).
func globMatch(pattern, path string) bool {
	return globSegs(strings.Split(pattern, "/"), strings.Split(path, "/"))
}

// globSegs is globMatch on segments. After pattern segment i, m[j] says
// whether pat[:i+1] matches segs[:j]; one row is kept.
func globSegs(pat, segs []string) bool {
	m := make([]bool, len(segs)+1)
	m[0] = true // the empty pattern matches the empty path
	for _, p := range pat {
		if p == "**" {
			// Zero or more segments: any prefix matched so far extends.
			for j := 1; j <= len(segs); j++ {
				m[j] = m[j] || m[j-1]
			}
			continue
		}
		// One segment: "*" any non-empty one, else the literal. Right to
		// left, so m[j-1] is still the previous row's.
		for j := len(segs); j >= 1; j-- {
			m[j] = m[j-1] && (p == "*" && segs[j-1] != "" || p != "*" && segs[j-1] == p)
		}
		m[0] = false
	}
	return m[len(segs)]
}

// globPrefix starts every name the pattern matches: the range a backfill
// lists (globMatch then filters it). It is the literal segments before the
// first wildcard, with the separator after them when that wildcard is "*"
// (one whole segment follows), without it for "**" ("a/**" matches "a"),
// and "" when the pattern starts with a wildcard.
func globPrefix(pattern string) string {
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		switch {
		case s == "*" && i > 0:
			return strings.Join(segs[:i], "/") + "/"
		case s == "*" || s == "**":
			return strings.Join(segs[:i], "/")
		}
	}
	return pattern // no wildcard: the one name
}

// webhookPolicy decides which webhook URLs a subscription may name (SSRF,
// protocol §6.2): https to a public host; http, or https, to loopback only
// when AllowLoopback (a development star, or a test's local receiver).
type webhookPolicy struct{ AllowLoopback bool }

// check validates a webhook URL at creation. Names are resolved only when
// a delivery dials (allowedIP is checked there too, so a public name that
// resolves to a private address is refused then).
func (p webhookPolicy) check(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return errors.New("webhook.url must be an absolute URL")
	}
	if u.User != nil {
		return errors.New("webhook.url must not carry credentials")
	}
	host := strings.ToLower(u.Hostname())
	loopName := host == "localhost" || strings.HasSuffix(host, ".localhost")
	ip, ipErr := netip.ParseAddr(host)
	isIP := ipErr == nil
	if !isIP && numericLabel(host[strings.LastIndexByte(host, '.')+1:]) {
		// "127.1", "0x7f000001", "2130706433": not an address netip
		// reads, and not a DNS name (no top-level domain is numeric),
		// but what a C resolver would read as one.
		return errors.New("webhook.url's host must be a DNS name or an IP address in its canonical form")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !p.AllowLoopback || !(loopName || isIP && ip.Unmap().IsLoopback()) {
			return errors.New("webhook.url must use https (http only to loopback on a development star)")
		}
	default:
		return errors.New("webhook.url must use https")
	}
	if loopName && !p.AllowLoopback {
		return errors.New("webhook.url must not target localhost")
	}
	if isIP && !p.allowedIP(ip) {
		return fmt.Errorf("webhook.url must not target a private, loopback, link-local or otherwise local address (%s)", ip)
	}
	return nil
}

// cgnat is the shared address space (RFC 6598), local to a carrier.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// IPv6 ranges that carry an IPv4 address, which a router on the way may
// turn into a connection to it: NAT64 (RFC 6052's well-known prefix, the
// address in the last 32 bits; RFC 8215's local-use prefix, where the
// operator chooses where), 6to4 (RFC 3056, bits 16–47), the deprecated
// IPv4-compatible form (::/96) and Teredo (RFC 4380).
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64Site = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour = netip.MustParsePrefix("2002::/16")
	v4Compat  = netip.MustParsePrefix("::/96")
	teredo    = netip.MustParsePrefix("2001::/32")
)

// allowedIP reports whether a delivery may connect to ip: a global
// unicast address outside the private (RFC 1918, fc00::/7) and shared
// ranges, or loopback when the policy allows it. An IPv6 address that
// carries an IPv4 one is judged by that one (never as loopback), and the
// ranges whose embedding is not fixed (local-use NAT64, Teredo) are
// refused whole.
func (p webhookPolicy) allowedIP(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.IsLoopback() {
		return p.AllowLoopback
	}
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64Site.Contains(ip), teredo.Contains(ip):
			return false
		case nat64.Contains(ip), v4Compat.Contains(ip):
			return webhookPolicy{}.allowedIP(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(ip):
			return webhookPolicy{}.allowedIP(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	return ip.IsGlobalUnicast() && !ip.IsPrivate() && !cgnat.Contains(ip)
}

// numericLabel reports whether a host name's label is a number, decimal
// or hexadecimal (0x…).
func numericLabel(l string) bool {
	digits := "0123456789"
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		l, digits = h, "0123456789abcdef"
	}
	return l != "" && strings.Trim(l, digits) == ""
}

// metaError is a metastore failure: 503 to clients, who retry.
type metaError struct{ err error }

func (e *metaError) Error() string { return "durable: subscriptions: metastore: " + e.err.Error() }
func (e *metaError) Unwrap() error { return e.err }
