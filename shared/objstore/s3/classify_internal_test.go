package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/starlog/starlog/shared/objstore"
)

func httpErr(status int, code string) error {
	return &smithy.OperationError{ServiceID: "S3", OperationName: "Op", Err: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
		Err:      &smithy.GenericAPIError{Code: code, Message: "m"},
	}}
}

func TestClassifyTable(t *testing.T) {
	type want int
	const (
		definite want = iota
		indefinite
		exists
		notFound
		conflict
		tooSmall
	)
	cases := []struct {
		name  string
		err   error
		write want // for a mutating op (put)
		read  want // for a read (get)
	}{
		{"412", httpErr(412, "PreconditionFailed"), exists, exists},
		{"404 key", httpErr(404, "NoSuchKey"), notFound, notFound},
		{"404 head", httpErr(404, "NotFound"), notFound, notFound},
		{"404 bucket", httpErr(404, "NoSuchBucket"), notFound, notFound},
		{"404 upload", httpErr(404, "NoSuchUpload"), definite, definite},
		{"409 conditional", httpErr(409, "ConditionalRequestConflict"), indefinite, definite},
		{"409 aborted", httpErr(409, "OperationAborted"), indefinite, definite},
		{"409 parent is file", httpErr(409, "ObjectParentIsFile"), conflict, conflict},
		{"409 is directory", httpErr(409, "ExistingObjectIsDirectory"), conflict, conflict},
		{"400 too small", httpErr(400, "EntityTooSmall"), tooSmall, tooSmall},
		{"400 bad digest", httpErr(400, "BadDigest"), definite, definite},
		{"403", httpErr(403, "AccessDenied"), definite, definite},
		{"408", httpErr(408, "RequestTimeout"), indefinite, definite},
		{"429", httpErr(429, "TooManyRequests"), indefinite, definite},
		{"500", httpErr(500, "InternalError"), indefinite, definite},
		{"503", httpErr(503, "SlowDown"), indefinite, definite},
		{"200 with error", httpErr(200, "InternalError"), indefinite, definite},
		{"send error", &smithy.OperationError{Err: &smithyhttp.RequestSendError{Err: errors.New("connection reset by peer")}}, indefinite, definite},
		{"deadline", &smithy.OperationError{Err: fmt.Errorf("wait: %w", context.DeadlineExceeded)}, indefinite, definite},
		{"invalid params", &smithy.OperationError{Err: smithy.InvalidParamsError{Context: "X"}}, definite, definite},
	}
	check := func(t *testing.T, got error, w want) {
		t.Helper()
		isInd := objstore.IsIndefinite(got)
		ok := false
		switch w {
		case definite:
			ok = !isInd && !errors.Is(got, objstore.ErrExists) && !errors.Is(got, objstore.ErrNotFound)
		case indefinite:
			ok = isInd && !errors.Is(got, objstore.ErrExists)
		case exists:
			ok = !isInd && errors.Is(got, objstore.ErrExists)
		case notFound:
			ok = !isInd && errors.Is(got, objstore.ErrNotFound)
		case conflict:
			ok = !isInd && errors.Is(got, objstore.ErrKeyConflict)
		case tooSmall:
			ok = !isInd && errors.Is(got, objstore.ErrPartTooSmall)
		}
		if !ok {
			t.Errorf("classified as %v (indefinite=%v), want class %d", got, isInd, w)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			check(t, classify(c.err, objstore.OpPut, "b/k"), c.write)
			check(t, classify(c.err, objstore.OpMultipartComplete, "b/k"), c.write)
			check(t, classify(c.err, objstore.OpGet, "b/k"), c.read)
		})
	}
	if classify(nil, objstore.OpPut, "b/k") != nil {
		t.Fatal("nil error classified as non-nil")
	}
}

// A call none of whose attempts reached the transport changed nothing, so
// it is definite; a session refused 404 names a missing directory bucket.
func TestClassifyCall(t *testing.T) {
	flattened := &smithy.OperationError{ServiceID: "S3", OperationName: "PutObject",
		Err: fmt.Errorf("get identity: %w", errors.New("get credentials: operation error S3: CreateSession, StatusCode: 404"))}
	notSent := func(session error) *callState {
		c := &callState{}
		if session != nil {
			c.setSession(session)
		}
		return c
	}
	sent := &callState{}
	sent.sent.Store(true)

	for _, op := range []objstore.Op{objstore.OpPut, objstore.OpMultipartComplete, objstore.OpGet} {
		// Today's rule for a send failure: indefinite for writes.
		if err := classifyCall(flattened, sent, op, "b/k"); objstore.IsIndefinite(err) != op.Mutates() {
			t.Errorf("%v sent: %v", op, err)
		}
		if err := classifyCall(flattened, nil, op, "b/k"); objstore.IsIndefinite(err) != op.Mutates() {
			t.Errorf("%v untracked: %v", op, err)
		}
		err := classifyCall(flattened, notSent(nil), op, "b/k")
		if err == nil || objstore.IsIndefinite(err) || errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%v not sent: %v, want definite", op, err)
		}
		err = classifyCall(flattened, notSent(httpErr(404, "NoSuchBucket")), op, "b/k")
		if objstore.IsIndefinite(err) || !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%v session 404: %v, want ErrNotFound", op, err)
		}
		for _, serr := range []error{httpErr(403, "AccessDenied"), httpErr(503, "SlowDown"), context.DeadlineExceeded} {
			err = classifyCall(flattened, notSent(serr), op, "b/k")
			if err == nil || objstore.IsIndefinite(err) || errors.Is(err, objstore.ErrNotFound) || !errors.Is(err, serr) {
				t.Errorf("%v session %v: %v, want definite, wrapping the session error", op, serr, err)
			}
		}
	}
	// A sent 412 stays ErrExists.
	if err := classifyCall(httpErr(412, "PreconditionFailed"), sent, objstore.OpPut, "b/k"); !errors.Is(err, objstore.ErrExists) {
		t.Errorf("sent 412: %v", err)
	}
}
