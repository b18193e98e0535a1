// Package sigv4 checks AWS Signature Version 4 on requests that reach the
// test fronts (package expressfront's S3 Express stand-in, package
// secretsfront's Secrets Manager stand-in): it parses the Authorization
// header, checks the signing time, and recomputes the signature with the
// SDK's own signer. Each front maps a Fault to its service's error.
package sigv4

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

const (
	// Algorithm is the only signing algorithm served.
	Algorithm = "AWS4-HMAC-SHA256"
	// DateFormat is X-Amz-Date's layout.
	DateFormat = "20060102T150405Z"
	// HeaderDate is the signing time header.
	HeaderDate = "X-Amz-Date"
	// MaxSkew is AWS's tolerance between the signing time and its clock.
	MaxSkew = 15 * time.Minute
)

// Fault says what is wrong with a request's signature.
type Fault int

const (
	// Anonymous: no Authorization header.
	Anonymous Fault = iota + 1
	// Presigned: query-string authentication, which the fronts do not serve.
	Presigned
	// Malformed: the header does not parse, or its scope is inconsistent.
	Malformed
	// NoDate: X-Amz-Date is missing or unreadable.
	NoDate
	// Skewed: the signing time is too far from the front's clock.
	Skewed
	// Mismatch: the recomputed signature differs.
	Mismatch
	// Internal: the front could not sign (a bug in the front).
	Internal
)

// Error is a failed check.
type Error struct {
	Fault   Fault
	Message string
}

func (e *Error) Error() string { return e.Message }

func fail(f Fault, format string, args ...any) *Error {
	return &Error{Fault: f, Message: fmt.Sprintf(format, args...)}
}

// Header is a parsed Authorization header.
type Header struct {
	AccessKey     string
	Date          string // yyyymmdd of the credential scope
	Region        string
	Service       string
	SignedHeaders []string
	signedRaw     string
	Signature     string
}

// Parse reads "AWS4-HMAC-SHA256 Credential=AK/date/region/service/
// aws4_request, SignedHeaders=a;b, Signature=hex".
func Parse(r *http.Request) (Header, *Error) {
	raw := r.Header.Get("Authorization")
	if raw == "" {
		if r.URL.Query().Has("X-Amz-Signature") {
			return Header{}, fail(Presigned, "presigned requests are not served")
		}
		return Header{}, fail(Anonymous, "anonymous requests are refused")
	}
	alg, rest, ok := strings.Cut(raw, " ")
	if !ok || alg != Algorithm {
		return Header{}, fail(Malformed, "want %s", Algorithm)
	}
	var a Header
	for part := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Header{}, fail(Malformed, "bad component %s", part)
		}
		switch k {
		case "Credential":
			f := strings.Split(v, "/")
			if len(f) != 5 || f[4] != "aws4_request" {
				return Header{}, fail(Malformed, "bad credential scope %s", v)
			}
			a.AccessKey, a.Date, a.Region, a.Service = f[0], f[1], f[2], f[3]
		case "SignedHeaders":
			a.signedRaw = v
			a.SignedHeaders = strings.Split(v, ";")
		case "Signature":
			a.Signature = v
		}
	}
	if a.AccessKey == "" || a.signedRaw == "" || a.Signature == "" {
		return Header{}, fail(Malformed, "missing Credential, SignedHeaders or Signature")
	}
	return a, nil
}

// SigningTime reads X-Amz-Date, which must match the credential scope's
// date and lie within MaxSkew of now.
func SigningTime(r *http.Request, a Header, now time.Time) (time.Time, *Error) {
	t, err := time.Parse(DateFormat, r.Header.Get(HeaderDate))
	if err != nil {
		return time.Time{}, fail(NoDate, "X-Amz-Date")
	}
	if t.Format("20060102") != a.Date {
		return time.Time{}, fail(Malformed, "credential date %s is not the X-Amz-Date", a.Date)
	}
	if d := now.Sub(t); d > MaxSkew || d < -MaxSkew {
		return time.Time{}, fail(Skewed, "signing time %s is more than %s from the server's clock", t.Format(DateFormat), MaxSkew)
	}
	return t, nil
}

// Options say how the service signs.
type Options struct {
	// S3 signs the path as sent, without escaping it again (S3 and S3
	// Express); other services escape it once more.
	S3 bool
}

// Verify recomputes r's signature with secret by signing a copy that holds
// only what the client says it signed, with the SDK's SigV4 signer, and
// compares it with the one sent. rawPath is the path exactly as sent
// (RequestPath); payloadHash is the hex SHA-256 the client signed (S3's
// X-Amz-Content-Sha256, or the hash of the body for other services).
func Verify(ctx context.Context, r *http.Request, rawPath string, a Header, secret, payloadHash string, at time.Time, o Options) *Error {
	vr := &http.Request{
		Method: r.Method,
		Host:   r.Host,
		Header: http.Header{},
		URL:    &url.URL{Scheme: "http", Host: r.Host, Opaque: "//" + r.Host + rawPath, RawQuery: r.URL.RawQuery},
	}
	for _, h := range a.SignedHeaders {
		switch h {
		case "host":
			continue
		case "content-length":
			vr.ContentLength = r.ContentLength
			continue
		}
		vals := r.Header.Values(h)
		if len(vals) == 0 {
			return fail(Mismatch, "signed header %s is missing", h)
		}
		vr.Header[http.CanonicalHeaderKey(h)] = vals
	}
	err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: a.AccessKey, SecretAccessKey: secret}, vr,
		payloadHash, a.Service, a.Region, at, func(so *v4.SignerOptions) {
			so.DisableURIPathEscaping = o.S3
			so.DisableSessionToken = true
		})
	if err != nil {
		return fail(Internal, "signing: %v", err)
	}
	want, perr := Parse(vr)
	if perr != nil {
		return fail(Internal, "re-signed header: %s", perr.Message)
	}
	if want.signedRaw != a.signedRaw || subtle.ConstantTimeCompare([]byte(want.Signature), []byte(a.Signature)) != 1 {
		return fail(Mismatch, "the request signature does not match")
	}
	return nil
}

// RequestPath is the path exactly as the client sent it (escaped), which is
// what it signed.
func RequestPath(r *http.Request) string {
	p := r.RequestURI
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" || p[0] != '/' { // absolute-form request line
		return r.URL.EscapedPath()
	}
	return p
}
