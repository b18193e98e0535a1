package expressfront

import (
	"context"
	"net/http"
	"time"

	"github.com/starlog/starlog/shared/testsvc/sigv4"
)

const (
	amzDateFormat     = sigv4.DateFormat
	headerDate        = sigv4.HeaderDate
	headerContentHash = "X-Amz-Content-Sha256"
	headerSession     = "X-Amz-S3session-Token"
	headerSecurity    = "X-Amz-Security-Token"
	headerMode        = "X-Amz-Create-Session-Mode"
)

// authHeader is a parsed SigV4 Authorization header.
type authHeader = sigv4.Header

// s3Fault answers a failed signature check as S3 does.
func s3Fault(e *sigv4.Error) *s3Error {
	switch e.Fault {
	case sigv4.Anonymous:
		return errAccessDenied(e.Message)
	case sigv4.Presigned:
		return errNotImplemented("presigned requests are not served by the express front")
	case sigv4.NoDate:
		return errMissingSecurityHeader(e.Message)
	case sigv4.Skewed:
		return errSkewed()
	case sigv4.Mismatch:
		return errSignature()
	case sigv4.Internal:
		return errInternal(e.Message)
	default:
		return errMalformedAuth(e.Message)
	}
}

// parseAuth reads the Authorization header (presigned requests are not
// served).
func parseAuth(r *http.Request) (authHeader, *s3Error) {
	a, err := sigv4.Parse(r)
	if err != nil {
		return a, s3Fault(err)
	}
	return a, nil
}

// signingTime reads X-Amz-Date, which must match the credential scope's
// date and lie within S3's skew of now.
func signingTime(r *http.Request, a authHeader, now time.Time) (time.Time, *s3Error) {
	t, err := sigv4.SigningTime(r, a, now)
	if err != nil {
		return t, s3Fault(err)
	}
	return t, nil
}

// verify recomputes the request's signature with secret, S3 style (the
// path is signed as sent, no double escaping).
func verify(ctx context.Context, r *http.Request, rawPath string, a authHeader, secret, payloadHash string, at time.Time) *s3Error {
	if err := sigv4.Verify(ctx, r, rawPath, a, secret, payloadHash, at, sigv4.Options{S3: true}); err != nil {
		return s3Fault(err)
	}
	return nil
}

// requestPath is the path exactly as the client sent it.
func requestPath(r *http.Request) string { return sigv4.RequestPath(r) }
