package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/starlog/starlog/shared/api"
)

// maxErrorBody bounds the body of a session request refused with plain
// HTTP.
const maxErrorBody = 64 << 10

// sessionRequest builds the HTTP request of an S2S session on a stream's
// records: Content-Type s2s/proto (on GET too), the compression the
// client wants, and the usual auth and basin headers.
func (s *Stream) sessionRequest(ctx context.Context, method string, query url.Values, body io.Reader) (*http.Request, error) {
	c := s.b.c
	target, header, err := c.target(s.b.name, s.recordsPath(), query)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, fmt.Errorf("build session request: %w", err)
	}
	req.Header = header
	req.Header.Set("Content-Type", api.ContentTypeS2S)
	req.Header.Set("Accept", api.ContentTypeProto)
	// Always set Accept-Encoding: left unset, Go's transport would ask for
	// gzip on its own.
	switch c.compression {
	case api.CompressionGzip:
		req.Header.Set("Accept-Encoding", "gzip")
	case api.CompressionZstd:
		req.Header.Set("Accept-Encoding", "zstd")
	default:
		req.Header.Set("Accept-Encoding", "identity")
	}
	return req, nil
}

// checkSessionResponse turns a refused session (non-200, or not s2s) into
// an error; it closes the body when it fails.
func checkSessionResponse(resp *http.Response) error {
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		e := api.ParseError(resp.StatusCode, b)
		if e.Status == http.StatusTooManyRequests {
			e.RetryAfter = api.ParseRetryAfter(resp.Header.Get)
		}
		return e
	}
	if mt := api.ParseMediaType(resp.Header.Get("Content-Type")); mt != api.MediaS2S {
		resp.Body.Close()
		return &ProtocolError{Msg: fmt.Sprintf("session answered with Content-Type %q, want %s (does the server speak S2S over HTTP/2?)",
			resp.Header.Get("Content-Type"), api.ContentTypeS2S)}
	}
	return nil
}

// frameError classifies a failure to read a frame: a malformed frame is a
// protocol error, anything else a transport error.
func frameError(op string, err error) error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return &ProtocolError{Msg: op + ": malformed frame", Err: ae}
	}
	return &TransportError{Op: op, Err: err, responded: true}
}
