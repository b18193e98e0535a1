package expressfront

import (
	"encoding/xml"
	"net/http"
	"strconv"
	"strings"
)

// s3Error is one refusal the front answers itself, in S3's REST error shape.
// The codes and statuses are the ones in the S3 error-code list (API
// reference, "List of error codes"); which of them S3 Express picks for a
// given session fault is this front's reading, not a checked fact (see
// docs/deploy.md).
type s3Error struct {
	Status  int
	Code    string
	Message string
}

// bodyReadFailed starts the message of a request whose body did not
// arrive: its client went away (Stats.Aborted).
const bodyReadFailed = "reading the body: "

func (e *s3Error) aborted() bool { return strings.HasPrefix(e.Message, bodyReadFailed) }

func (e *s3Error) Error() string { return e.Code + ": " + e.Message }

// The refusals. Status first, then the S3 code.
func errAccessDenied(msg string) *s3Error {
	return &s3Error{http.StatusForbidden, "AccessDenied", msg}
}

func errInvalidAccessKeyID() *s3Error {
	return &s3Error{http.StatusForbidden, "InvalidAccessKeyId", "The AWS access key ID you provided does not exist in our records."}
}

func errSignature() *s3Error {
	return &s3Error{http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."}
}

func errSkewed() *s3Error {
	return &s3Error{http.StatusForbidden, "RequestTimeTooSkewed", "The difference between the request time and the server's time is too large."}
}

func errExpiredToken() *s3Error {
	return &s3Error{http.StatusBadRequest, "ExpiredToken", "The provided token has expired."}
}

func errInvalidToken(msg string) *s3Error {
	return &s3Error{http.StatusBadRequest, "InvalidToken", "The provided token is malformed or otherwise invalid: " + msg}
}

func errMissingSecurityHeader(msg string) *s3Error {
	return &s3Error{http.StatusBadRequest, "MissingSecurityHeader", "Your request is missing a required header: " + msg}
}

func errMalformedAuth(msg string) *s3Error {
	return &s3Error{http.StatusBadRequest, "AuthorizationHeaderMalformed", "The authorization header is malformed; " + msg}
}

func errInvalidArgument(msg string) *s3Error {
	return &s3Error{http.StatusBadRequest, "InvalidArgument", msg}
}

func errInvalidRequest(msg string) *s3Error {
	return &s3Error{http.StatusBadRequest, "InvalidRequest", msg}
}

func errNotImplemented(msg string) *s3Error {
	return &s3Error{http.StatusNotImplemented, "NotImplemented", msg}
}

func errNoSuchBucket() *s3Error {
	return &s3Error{http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist."}
}

func errContentSHA256Mismatch() *s3Error {
	return &s3Error{http.StatusBadRequest, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed."}
}

func errTooLarge(limit int64) *s3Error {
	return &s3Error{http.StatusBadRequest, "EntityTooLarge", "Your proposed upload exceeds the front's limit of " + strconv.FormatInt(limit, 10) + " bytes."}
}

func errInternal(msg string) *s3Error {
	return &s3Error{http.StatusInternalServerError, "InternalError", msg}
}

type errorBody struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource,omitempty"`
	RequestID string   `xml:"RequestId"`
}

// write answers e. HEAD answers carry no body (the SDK reads the status).
func (e *s3Error) write(w http.ResponseWriter, r *http.Request, requestID string) {
	w.Header().Set("x-amz-request-id", requestID)
	if r.Method == http.MethodHead {
		w.WriteHeader(e.Status)
		return
	}
	b, err := xml.Marshal(errorBody{Code: e.Code, Message: e.Message, Resource: r.URL.Path, RequestID: requestID})
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	body := append([]byte(xml.Header), b...)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
}
