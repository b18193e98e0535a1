package durable

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/durable/records"
)

// chunk is what one read found from an offset: payloads of data records,
// the offset after the records scanned, and whether the closing marker
// was reached; skipped and empty say where the read started: above the
// offset (the records there were trimmed or past retention), or nowhere
// (no record at all).
type chunk struct {
	payload [][]byte
	next    uint64
	closed  bool
	skipped bool
	empty   bool
}

// gone reports that a read from seq below the stream's tail found the
// records at seq removed by retention or a trim: it started above seq, or
// found nothing below the tail.
func (c chunk) gone(seq, tail uint64) bool {
	return seq < tail && !c.closed && (c.skipped || c.empty)
}

// errGone answers a read at an offset below the retained range (protocol
// §5.5: 410 Gone).
const errGone = "offset is before the earliest retained position: retention or a trim removed the records there"

// firstRetained is the seq a read from seq (below tail) starts at: seq
// itself, or the first record left above it when retention or a trim
// removed those at seq, or the tail when none is left. One record read.
func (h *Handler) firstRetained(ctx context.Context, name string, seq, tail uint64) (uint64, error) {
	if seq >= tail {
		return seq, nil
	}
	b, err := h.n.Read(ctx, h.basin, name, api.ReadRequest{From: api.FromSeqNum, Value: seq, Count: api.Uint64(1)}, nil)
	if err != nil {
		return 0, err
	}
	if len(b.Records) == 0 {
		return tail, nil
	}
	return b.Records[0].SeqNum, nil
}

// readFrom reads one batch from seq, waiting up to wait for records when
// seq is the tail; it stops at the closing marker.
func (h *Handler) readFrom(ctx context.Context, name string, seq uint64, wait time.Duration) (chunk, error) {
	req := api.ReadRequest{From: api.FromSeqNum, Value: seq, Count: api.Uint64(foldBatch), Bytes: api.Uint64(maxReadBytes)}
	if wait > 0 {
		req.Wait = &wait
	}
	b, err := h.n.Read(ctx, h.basin, name, req, nil)
	if err != nil {
		return chunk{}, err
	}
	c := chunk{next: seq, empty: len(b.Records) == 0, skipped: len(b.Records) > 0 && b.Records[0].SeqNum > seq}
	for i := range b.Records {
		rec := &b.Records[i]
		c.next = rec.SeqNum + 1
		switch records.KindOf(rec) {
		case records.KindData:
			c.payload = append(c.payload, rec.Body)
		case records.KindClose:
			c.closed = true
			return c, nil
		}
	}
	return c, nil
}

func encodeBody(ct string, payload [][]byte) []byte {
	if isJSON(ct) {
		var b bytes.Buffer
		b.WriteByte('[')
		for i, m := range payload {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(m)
		}
		b.WriteByte(']')
		return b.Bytes()
	}
	return bytes.Join(payload, nil)
}

// cursorEpoch and cursorInterval define Stream-Cursor (protocol §10.1).
var cursorEpoch = time.Date(2024, 10, 9, 0, 0, 0, 0, time.UTC)

const cursorInterval = 20 * time.Second

// nextCursor is the current interval number, strictly above the client's
// cursor when the client is already there (1–3600 s of jitter). The sum
// saturates: a client's cursor near 2^64 must not wrap to a small one
// (2^64−1 itself is answered with 2^64−1).
func nextCursor(client string) string {
	cur := uint64(time.Since(cursorEpoch) / cursorInterval)
	if c, err := strconv.ParseUint(client, 10, 64); err == nil && c >= cur {
		jitter := uint64(rand.IntN(3600)+1) * uint64(time.Second) / uint64(cursorInterval)
		cur = api.AddSat(c, max(1, jitter))
	}
	return strconv.FormatUint(cur, 10)
}

func (h *Handler) cacheControl() string {
	if h.cfg.Private {
		return "private, max-age=60, stale-while-revalidate=300"
	}
	return "public, max-age=60, stale-while-revalidate=300"
}

// read serves GET: catch-up, long-poll or SSE.
func (h *Handler) read(w http.ResponseWriter, r *http.Request, name string) {
	ctx := r.Context()
	q, qerr := api.ParseQuery(r.URL.RawQuery)
	if qerr != nil {
		httpError(w, http.StatusBadRequest, qerr.Message)
		return
	}
	live := q.Get("live")
	if live != "" && live != "long-poll" && live != "sse" {
		httpError(w, http.StatusBadRequest, "live must be long-poll or sse")
		return
	}
	offs, hasOffset := q["offset"]
	if hasOffset && len(offs) > 1 {
		httpError(w, http.StatusBadRequest, "offset given more than once")
		return
	}
	if live != "" && !hasOffset {
		httpError(w, http.StatusBadRequest, "live reads need an offset")
		return
	}
	off := "-1"
	if hasOffset {
		off = offs[0]
	}
	var from uint64
	switch off {
	case "-1", "now":
	default:
		v, ok := offsets.Parse(off)
		if !ok {
			httpError(w, http.StatusBadRequest, "malformed offset")
			return
		}
		from = v
	}
	row, _, ok := h.liveRow(ctx, w, name)
	if !ok {
		return
	}
	h.touch(name, &row)
	s, err := h.state(ctx, name, &row)
	if err != nil {
		h.writeErr(w, err)
		return
	}
	if off == "now" {
		from = s.End()
	}
	if from > s.End() {
		httpError(w, http.StatusBadRequest, "offset is past the stream's tail")
		return
	}
	if live != "" && from < s.Next {
		// A live read resolves its start first: SSE has answered 200
		// before its first read.
		first, err := h.firstRetained(ctx, name, from, s.Next)
		if err != nil {
			h.writeErr(w, err)
			return
		}
		if first > from && off != "-1" {
			httpError(w, http.StatusGone, errGone)
			return
		}
		from = first
	}
	w.Header().Set("Content-Type", row.ContentType)
	switch live {
	case "sse":
		ctx, end := h.session(r)
		defer end()
		h.sse(w, r.WithContext(ctx), name, &row, s, from, q.Get("cursor"))
		return
	case "long-poll":
		ctx, end := h.session(r)
		defer end()
		h.longPoll(w, r.WithContext(ctx), name, &row, s, from, q.Get("cursor"))
		return
	}
	if off == "now" {
		w.Header().Set(hStreamNext, offsets.Format(from))
		w.Header().Set(hStreamUpToDate, "true")
		w.Header().Set("Cache-Control", "no-store")
		if s.Closed {
			w.Header().Set(hStreamClosed, "true")
		}
		_, _ = w.Write(encodeBody(row.ContentType, nil))
		return
	}
	c := chunk{next: from, closed: s.Closed && from >= s.End()}
	if c.closed {
		c.next = s.End()
	} else if from < s.Next {
		if c, err = h.readFrom(ctx, name, from, 0); err != nil {
			h.writeErr(w, err)
			return
		}
		if c.gone(from, s.Next) {
			if off != "-1" {
				w.Header().Del("Content-Type")
				httpError(w, http.StatusGone, errGone)
				return
			}
			if c.empty {
				c.next = s.Next // every record below the tail is gone: the read starts there
			}
		}
	}
	h.writeChunk(w, r, &row, s, from, c, "")
}

// session is the context of a live read: it ends when the server ends
// the request (Config.Session: its credential was revoked or expired).
func (h *Handler) session(r *http.Request) (context.Context, context.CancelFunc) {
	if h.cfg.Session != nil {
		return h.cfg.Session(r)
	}
	return context.WithCancel(r.Context())
}

// endedBy is the error that answers a live read which failed with err:
// the server's own error when it ended the read (Config.Session), else
// err.
func endedBy(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if e, ok := errors.AsType[*api.Error](context.Cause(ctx)); ok {
			return e
		}
	}
	return err
}

// writeChunk answers a catch-up or long-poll read that found c.
func (h *Handler) writeChunk(w http.ResponseWriter, r *http.Request, row *streamRow, s *records.State, from uint64, c chunk, cursor string) {
	hd := w.Header()
	hd.Set(hStreamNext, offsets.Format(c.next))
	upToDate := c.closed || c.next >= s.Next
	if upToDate {
		hd.Set(hStreamUpToDate, "true")
	}
	if c.closed {
		hd.Set(hStreamClosed, "true")
	}
	if cursor != "" && !c.closed {
		hd.Set(hStreamCursor, cursor)
	}
	etag := fmt.Sprintf(`"%s:%s:%s`, row.Incarnation, offsets.Format(from), offsets.Format(c.next))
	if c.closed {
		etag += ":c"
	}
	etag += `"`
	hd.Set("ETag", etag)
	if len(c.payload) == 0 && !c.closed {
		hd.Set("Cache-Control", "no-store") // the tail of an open stream moves
	} else {
		hd.Set("Cache-Control", h.cacheControl())
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatch(inm, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(encodeBody(row.ContentType, c.payload))
}

func etagMatch(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

// longPoll serves live=long-poll: data at once if there is some past from,
// else wait up to LongPoll for it; 204 on timeout or at a closed end.
func (h *Handler) longPoll(w http.ResponseWriter, r *http.Request, name string, row *streamRow, s *records.State, from uint64, clientCursor string) {
	cursor := nextCursor(clientCursor)
	if s.Closed && from >= s.End() {
		h.noContent(w, s.End(), true, "")
		return
	}
	c, err := h.readFrom(r.Context(), name, from, h.cfg.LongPoll)
	if err != nil {
		h.writeErr(w, endedBy(r.Context(), err))
		return
	}
	if len(c.payload) == 0 {
		// A timeout, or only control records (a close) arrived.
		if c.next > from && !c.closed {
			s.Next = max(s.Next, c.next)
		}
		h.noContent(w, c.next, c.closed, cursor)
		return
	}
	if c.next > s.Next {
		s.Next = c.next
	}
	h.writeChunk(w, r, row, s, from, c, cursor)
}

func (h *Handler) noContent(w http.ResponseWriter, next uint64, closed bool, cursor string) {
	hd := w.Header()
	hd.Set(hStreamNext, offsets.Format(next))
	hd.Set(hStreamUpToDate, "true")
	hd.Set("Cache-Control", "no-store")
	if closed {
		hd.Set(hStreamClosed, "true")
	} else if cursor != "" {
		hd.Set(hStreamCursor, cursor)
	}
	hd.Del("Content-Type")
	w.WriteHeader(http.StatusNoContent)
}

// controlEvent is the body of an SSE control event.
type controlEvent struct {
	StreamNextOffset string `json:"streamNextOffset"`
	StreamCursor     string `json:"streamCursor,omitempty"`
	UpToDate         bool   `json:"upToDate,omitempty"`
	StreamClosed     bool   `json:"streamClosed,omitempty"`
}

// sse serves live=sse: a data event per batch found and a control event
// after each; it ends at the closing marker or after SSELife.
func (h *Handler) sse(w http.ResponseWriter, r *http.Request, name string, row *streamRow, s *records.State, from uint64, clientCursor string) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SSELife)
	defer cancel()
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	b64 := !isText(row.ContentType)
	if b64 {
		hd.Set(hSSEEncoding, "base64")
	}
	w.WriteHeader(http.StatusOK)
	cursor := nextCursor(clientCursor)
	var buf bytes.Buffer
	control := func(next uint64, upToDate, closed bool) error {
		ev := controlEvent{StreamNextOffset: offsets.Format(next), UpToDate: upToDate || closed, StreamClosed: closed}
		if !closed {
			ev.StreamCursor = cursor
		}
		j, _ := json.Marshal(ev)
		buf.WriteString("event: control\ndata:")
		buf.Write(j)
		buf.WriteString("\n\n")
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		if err == nil {
			err = rc.Flush()
		}
		return err
	}
	if s.Closed && from >= s.End() {
		_ = control(s.End(), true, true)
		return
	}
	tail := s.Next
	caughtUp := false
	for ctx.Err() == nil {
		var wait time.Duration
		if from >= tail {
			if !caughtUp {
				caughtUp = true
				if control(from, true, false) != nil {
					return
				}
			}
			wait = h.cfg.SSELife
		}
		c, err := h.readFrom(ctx, name, from, wait)
		if err != nil {
			// The client sees the end and resumes from the last control;
			// when the server ended the read for its credential, the
			// reconnect is refused as any new request is (the protocol's
			// SSE has no error event).
			return
		}
		if c.next > tail {
			tail = c.next
		}
		if len(c.payload) > 0 {
			buf.WriteString("event: data\n")
			writeSSEData(&buf, row.ContentType, c.payload, b64)
			buf.WriteString("\n")
		}
		if c.next == from && !c.closed {
			continue // the wait ended without records
		}
		from = c.next
		if !c.closed && from >= tail {
			// The tail may have moved: ask it before claiming up to date.
			if pos, err := h.n.CheckTail(ctx, h.basin, name, nil); err == nil && pos.SeqNum > tail {
				tail = pos.SeqNum
			}
		}
		upToDate := from >= tail
		caughtUp = upToDate
		if control(from, upToDate, c.closed) != nil || c.closed {
			return
		}
	}
}

// writeSSEData writes the data: lines of one event.
func writeSSEData(buf *bytes.Buffer, ct string, payload [][]byte, b64 bool) {
	var text []byte
	switch {
	case b64:
		text = []byte(base64.StdEncoding.EncodeToString(bytes.Join(payload, nil)))
	case isJSON(ct):
		text = encodeBody(ct, payload)
	default:
		text = bytes.Join(payload, nil)
	}
	// Any of CRLF, CR and LF ends an SSE line: each becomes its own data:
	// line (the client joins them with LF), so a CR cannot end the event.
	text = bytes.ReplaceAll(text, []byte("\r\n"), []byte("\n"))
	text = bytes.ReplaceAll(text, []byte("\r"), []byte("\n"))
	for _, line := range bytes.Split(text, []byte("\n")) {
		buf.WriteString("data:")
		if len(line) > 0 && line[0] == ' ' {
			buf.WriteByte(' ') // the client strips one leading space
		}
		buf.Write(line)
		buf.WriteString("\n")
	}
}
