package server

import (
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/node"
)

// writeError writes err's status and JSON body. An error that is not an
// *api.Error is a server fault: logged, answered 500 other (see
// failureLog for what is logged and how often).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *api.Error
	if !errors.As(err, &e) {
		s.failures.failed(r, slog.LevelError, "err", err)
		e = api.Other("internal error")
	} else if e.Status >= 500 {
		s.failures.failed(r, slog.LevelWarn, "status", e.Status, "code", e.Code, "msg", e.Message)
	}
	if stored, ok := r.Context().Value(storedStreamKey{}).(string); ok {
		if msg := auth.FromContext(r.Context()).ClientMessage(e.Message, stored); msg != e.Message {
			c := *e
			c.Message = msg
			e = &c
		}
	}
	body := e.JSON()
	h := w.Header()
	var nl *node.NotLeaderError
	if errors.As(err, &nl) {
		// "-": this star gave the stream up and names no successor.
		h.Set(HeaderNotLeader, cmp.Or(nl.Leader.Star, "-"))
	}
	setRetryAfter(h, e)
	h.Set("Content-Type", api.ContentTypeJSON)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.Status)
	w.Write(body)
}

// writeJSON writes v as the JSON body of a response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only our own response types are passed; this cannot happen.
		status, body = http.StatusInternalServerError, api.Other("unencodable response").JSON()
	}
	writeBody(w, status, api.ContentTypeJSON, body)
}

func writeBody(w http.ResponseWriter, status int, contentType string, body []byte) {
	h := w.Header()
	if rw, ok := w.(*recorder); ok && rw.codecs != nil && rw.coding != "" {
		if z, ok := rw.codecs.compressBody(rw.coding, body); ok {
			body = z
			h.Set("Content-Encoding", rw.coding)
		}
		h.Add("Vary", "Accept-Encoding")
	}
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// writeEmpty answers a 2xx with no body (S2 SDKs need Content-Length: 0).
func writeEmpty(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(status)
}

// readBody reads the whole request body, at most limit bytes, within
// timeout, and decodes a Content-Encoding of gzip or zstd, the decoded
// body bounded by limit too (compress.go). A larger body is 422 invalid
// (it cannot hold a valid request);
// one not in within timeout (a client dripping it) is 408 timeout; a body
// that ends early (a client that declared more than it sent, or a stream
// reset) is 400 with the code of what it should have been: nothing is
// applied from a truncated request.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration, truncated func(string, ...any) *api.Error) ([]byte, *api.Error) {
	if r.ContentLength > limit {
		return nil, api.Invalid("request body of %d bytes exceeds %d", r.ContentLength, limit)
	}
	// Cleared once read: on HTTP/1.1 a read deadline left behind would
	// end the connection's background read, and with it the request. Kept
	// after a timeout: the HTTP/1.1 server reads the rest of an unread
	// body before it answers, and must not wait for the drip either.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
	coding, cerr := contentCoding(r)
	if cerr != nil {
		return nil, cerr
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil && coding != "" {
		_ = rc.SetReadDeadline(time.Time{})
		rw, ok := w.(*recorder)
		if !ok || rw.codecs == nil {
			return nil, api.BadHeader("Content-Encoding %s is not taken here", coding)
		}
		return rw.codecs.decompress(coding, body, limit, truncated)
	}
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, api.Invalid("request body exceeds %d bytes", limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if r.ProtoMajor == 1 {
				w.Header().Set("Connection", "close")
			}
			return nil, api.Timeout("the request body did not arrive within %v", timeout)
		}
		_ = rc.SetReadDeadline(time.Time{})
		return nil, truncated("request body cut off: %v", err)
	}
	_ = rc.SetReadDeadline(time.Time{})
	return body, nil
}

// format reads the s2-format header (JSON bodies only).
func format(r *http.Request) (api.Format, *api.Error) {
	return api.ParseFormat(r.Header.Get(api.HeaderFormat))
}

// streamConfigHeader reads the s2-stream-config header: the config of a
// stream an append or read creates.
func streamConfigHeader(r *http.Request) (*api.StreamConfig, *api.Error) {
	v := r.Header.Get(api.HeaderStreamConfig)
	if v == "" {
		return nil, nil
	}
	c, err := api.ParseStreamConfigHeader(v)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// wantsProto reports whether the response should be protobuf: the first
// media type of Accept decides, as in S2.
func wantsProto(r *http.Request) bool {
	return api.ParseMediaType(r.Header.Get("Accept")) == api.MediaProto
}
