package expressfront

import (
	"context"
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

const (
	sigAlgorithm      = "AWS4-HMAC-SHA256"
	amzDateFormat     = "20060102T150405Z"
	headerDate        = "X-Amz-Date"
	headerContentHash = "X-Amz-Content-Sha256"
	headerSession     = "X-Amz-S3session-Token"
	headerSecurity    = "X-Amz-Security-Token"
	headerMode        = "X-Amz-Create-Session-Mode"
	// maxSkew is S3's tolerance between the signing time and its clock.
	maxSkew = 15 * time.Minute
)

// authHeader is a parsed SigV4 Authorization header.
type authHeader struct {
	AccessKey     string
	Date          string // yyyymmdd of the credential scope
	Region        string
	Service       string
	SignedHeaders []string
	signedRaw     string
	Signature     string
}

// parseAuth reads "AWS4-HMAC-SHA256 Credential=AK/date/region/service/
// aws4_request, SignedHeaders=a;b, Signature=hex". Presigned (query)
// authentication is not served.
func parseAuth(r *http.Request) (authHeader, *s3Error) {
	raw := r.Header.Get("Authorization")
	if raw == "" {
		if r.URL.Query().Has("X-Amz-Signature") {
			return authHeader{}, errNotImplemented("presigned requests are not served by the express front")
		}
		return authHeader{}, errAccessDenied("anonymous requests are refused")
	}
	alg, rest, ok := strings.Cut(raw, " ")
	if !ok || alg != sigAlgorithm {
		return authHeader{}, errMalformedAuth("want " + sigAlgorithm)
	}
	var a authHeader
	for part := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return authHeader{}, errMalformedAuth("bad component " + part)
		}
		switch k {
		case "Credential":
			f := strings.Split(v, "/")
			if len(f) != 5 || f[4] != "aws4_request" {
				return authHeader{}, errMalformedAuth("bad credential scope " + v)
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
		return authHeader{}, errMalformedAuth("missing Credential, SignedHeaders or Signature")
	}
	return a, nil
}

// signingTime reads X-Amz-Date, which must match the credential scope's
// date and lie within S3's skew of now.
func signingTime(r *http.Request, a authHeader, now time.Time) (time.Time, *s3Error) {
	t, err := time.Parse(amzDateFormat, r.Header.Get(headerDate))
	if err != nil {
		return time.Time{}, errMissingSecurityHeader("X-Amz-Date")
	}
	if t.Format("20060102") != a.Date {
		return time.Time{}, errMalformedAuth("credential date " + a.Date + " is not the X-Amz-Date")
	}
	if d := now.Sub(t); d > maxSkew || d < -maxSkew {
		return time.Time{}, errSkewed()
	}
	return t, nil
}

// verify recomputes the request's signature with secret by signing a copy
// that holds only what the client says it signed, using the SDK's own SigV4
// signer (S3 style: the path is signed as sent, no double escaping), and
// compares it with the one the client sent.
func verify(ctx context.Context, r *http.Request, rawPath string, a authHeader, secret, payloadHash string, at time.Time) *s3Error {
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
			return errSignature()
		}
		vr.Header[http.CanonicalHeaderKey(h)] = vals
	}
	signer := v4.NewSigner()
	err := signer.SignHTTP(ctx, aws.Credentials{AccessKeyID: a.AccessKey, SecretAccessKey: secret}, vr,
		payloadHash, a.Service, a.Region, at, func(o *v4.SignerOptions) {
			o.DisableURIPathEscaping = true
			o.DisableSessionToken = true
		})
	if err != nil {
		return errInternal("signing: " + err.Error())
	}
	want, perr := parseAuth(vr)
	if perr != nil {
		return errInternal("re-signed header: " + perr.Message)
	}
	if want.signedRaw != a.signedRaw || subtle.ConstantTimeCompare([]byte(want.Signature), []byte(a.Signature)) != 1 {
		return errSignature()
	}
	return nil
}

// requestPath is the path exactly as the client sent it (escaped), which is
// what it signed.
func requestPath(r *http.Request) string {
	p := r.RequestURI
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" || p[0] != '/' { // absolute-form request line
		return r.URL.EscapedPath()
	}
	return p
}
