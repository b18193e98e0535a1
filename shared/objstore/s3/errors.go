package s3

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/starlog/starlog/shared/objstore"
)

// classify maps an SDK error of one request to the objstore contract.
//
// The rule: a failure is definite only when S3 answered with a status that
// says the request was refused (4xx other than 408, 409 conflict, 429). A
// request that got no answer (timeout, reset, EOF, cancelled context) or a
// 5xx may have been applied, so when it mutates it is an
// *objstore.IndefiniteError and the caller must probe. Reads are never
// indefinite: they are retried or failed plainly.
func classify(err error, op objstore.Op, what string) error {
	if err == nil {
		return nil
	}
	wrap := func(sentinel error) error { return fmt.Errorf("s3: %s %s: %w: %w", op, what, sentinel, err) }
	plain := func() error { return fmt.Errorf("s3: %s %s: %w", op, what, err) }
	maybe := func() error {
		if op.Mutates() {
			return &objstore.IndefiniteError{Err: plain()}
		}
		return plain()
	}

	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) {
		// Never sent: the SDK refused the input before any I/O.
		var ipe smithy.InvalidParamsError
		var se *smithy.SerializationError
		if errors.As(err, &ipe) || errors.As(err, &se) {
			return plain()
		}
		return maybe()
	}
	code := ""
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	status := re.HTTPStatusCode()
	switch {
	case status == http.StatusPreconditionFailed:
		// Retries are off for every conditional write, so a 412 answers
		// this call's own attempt: someone else's object is there.
		return wrap(objstore.ErrExists)
	case status == http.StatusNotFound && code != "NoSuchUpload":
		return wrap(objstore.ErrNotFound)
	case status == http.StatusForbidden:
		return wrap(objstore.ErrAccessDenied)
	case code == "ObjectParentIsFile" || code == "ExistingObjectIsDirectory":
		return wrap(objstore.ErrKeyConflict)
	case code == "EntityTooSmall":
		return wrap(objstore.ErrPartTooSmall)
	case status == http.StatusConflict, // ConditionalRequestConflict, OperationAborted
		status == http.StatusRequestTimeout,
		status == http.StatusTooManyRequests,
		status >= 500,
		status < 400: // a 2xx whose body failed to parse or carried an error
		return maybe()
	default:
		return plain()
	}
}

// classifyCall is classify for a call whose state track recorded. A call
// none of whose attempts reached the transport changed nothing: its
// failure is definite whatever it was (for S3 Express, typically the
// session: CreateSession refused or unreachable). A session refused 404
// means the directory bucket does not exist: ErrNotFound.
func classifyCall(err error, call *callState, op objstore.Op, what string) error {
	call.noteRefusal(err)
	if err == nil || call == nil || call.sent.Load() {
		return classify(err, op, what)
	}
	if serr := call.sessionErr(); serr != nil {
		var re *smithyhttp.ResponseError
		if errors.As(serr, &re) && re.HTTPStatusCode() == http.StatusNotFound {
			return fmt.Errorf("s3: %s %s: session: %w: %w", op, what, objstore.ErrNotFound, serr)
		}
		return fmt.Errorf("s3: %s %s: session: %w", op, what, serr)
	}
	return fmt.Errorf("s3: %s %s: not sent: %w", op, what, err)
}

// isNoSuchBucket tells a missing bucket from a missing key among 404s.
func isNoSuchBucket(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket"
}

func isNoSuchUpload(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "NoSuchUpload"
}
