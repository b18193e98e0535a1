package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// SSE event names of a read session.
const (
	EventBatch = "batch"
	EventPing  = "ping"
	EventError = "error"
	// SSEDone is the data of the bare event that ends a read cleanly.
	SSEDone = "[DONE]"
)

// DefaultMaxSSEEventBytes bounds one SSE event's data in the parser. A
// session batch of 1 MiB metered can take up to six times that as raw JSON.
const DefaultMaxSSEEventBytes = 8 << 20

// Ping is the data of a ping event: the server's time in milliseconds and
// the stream tail.
type Ping struct {
	Timestamp uint64         `json:"timestamp"`
	Tail      StreamPosition `json:"tail"`
}

// SSEWriter writes the events of an SSE read session. Each event goes out
// in one Write; flushing is the caller's business.
type SSEWriter struct {
	w   io.Writer
	f   Format
	buf []byte
}

// NewSSEWriter returns a writer of events whose batches use format f.
func NewSSEWriter(w io.Writer, f Format) *SSEWriter {
	return &SSEWriter{w: w, f: f}
}

// Batch writes `event: batch`, `id: <id>` and the batch as data. id is the
// session's LastEventID after this batch (see LastEventID.Next). Empty
// batches are not sent in SSE: heartbeats are pings.
func (s *SSEWriter) Batch(b *ReadBatch, id LastEventID) error {
	if len(b.Records) == 0 {
		return errors.New("sse: a batch event needs records")
	}
	buf := append(s.buf[:0], "event: batch\nid: "...)
	buf = append(buf, id.String()...)
	buf = append(buf, "\ndata: "...)
	buf = AppendReadBatchJSON(buf, b, s.f)
	buf = append(buf, "\n\n"...)
	return s.flush(buf)
}

// Ping writes a heartbeat carrying the tail.
func (s *SSEWriter) Ping(p Ping) error {
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("sse: encode ping: %w", err)
	}
	return s.Event(SSEEvent{Event: EventPing, Data: data})
}

// Error writes an error event whose data is the error's JSON body.
func (s *SSEWriter) Error(e *Error) error {
	return s.Event(SSEEvent{Event: EventError, Data: e.JSON()})
}

// Done writes the bare `data: [DONE]` that ends a read cleanly.
func (s *SSEWriter) Done() error {
	return s.Event(SSEEvent{Data: []byte(SSEDone)})
}

// Event writes any event. Event and ID must not contain line breaks; Data
// may, and is split into several data lines.
func (s *SSEWriter) Event(ev SSEEvent) error {
	if strings.ContainsAny(ev.Event, "\r\n") || strings.ContainsAny(ev.ID, "\r\n\x00") {
		return errors.New("sse: event name and id must be single-line")
	}
	buf := s.buf[:0]
	if ev.Event != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, ev.Event...)
		buf = append(buf, '\n')
	}
	if ev.ID != "" {
		buf = append(buf, "id: "...)
		buf = append(buf, ev.ID...)
		buf = append(buf, '\n')
	}
	data := ev.Data
	for {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			break
		}
		buf = append(buf, "data: "...)
		buf = append(buf, data[:i]...)
		buf = append(buf, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	return s.flush(buf)
}

func (s *SSEWriter) flush(buf []byte) error {
	s.buf = buf
	if _, err := s.w.Write(buf); err != nil {
		return fmt.Errorf("sse: write: %w", err)
	}
	// Keep a big buffer from pinning memory between events of an idle
	// session, but not one a full batch (1 MiB of records, more as JSON)
	// needs: a catching-up session would grow a new one per event.
	if cap(s.buf) > 4<<20 {
		s.buf = nil
	}
	return nil
}

// SSEEvent is one dispatched server-sent event.
type SSEEvent struct {
	// Event is the event type; empty for the default ("message").
	Event string
	// ID is the last event ID buffer when the event was dispatched; it
	// persists across events, as the SSE spec says.
	ID string
	// Data is the event's data lines joined with LF.
	Data []byte
}

// SSEReader parses a text/event-stream per the HTML SSE spec (LF, CR and
// CRLF line ends; comments; a leading BOM), bounding each event's size.
type SSEReader struct {
	sc       *bufio.Scanner
	maxEvent int
	lastID   string
	started  bool
}

// NewSSEReader parses r; maxEventBytes ≤ 0 means DefaultMaxSSEEventBytes.
func NewSSEReader(r io.Reader, maxEventBytes int) *SSEReader {
	if maxEventBytes <= 0 {
		maxEventBytes = DefaultMaxSSEEventBytes
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEventBytes+64)
	sc.Split(scanSSELines)
	return &SSEReader{sc: sc, maxEvent: maxEventBytes}
}

// scanSSELines splits on LF, CR or CRLF. A CR at the end of the buffer waits
// for one more byte to tell CR from CRLF.
func scanSSELines(data []byte, atEOF bool) (int, []byte, error) {
	i := bytes.IndexAny(data, "\r\n")
	switch {
	case i < 0:
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	case data[i] == '\n':
		return i + 1, data[:i], nil
	case i+1 < len(data):
		if data[i+1] == '\n' {
			return i + 2, data[:i], nil
		}
		return i + 1, data[:i], nil
	case atEOF:
		return i + 1, data[:i], nil
	}
	return 0, nil, nil
}

// ErrSSETruncated means the stream ended inside an event.
var ErrSSETruncated = errors.New("sse: stream ended inside an event")

// Next returns the next dispatched event. It returns io.EOF at a clean end
// and ErrSSETruncated when the stream ends mid-event.
func (p *SSEReader) Next() (SSEEvent, error) {
	var (
		event   string
		data    []byte
		pending bool // a field was seen since the last dispatch
	)
	for p.sc.Scan() {
		line := p.sc.Bytes()
		if !p.started {
			p.started = true
			line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
		}
		if len(line) == 0 {
			if data == nil {
				event, pending = "", false
				continue
			}
			return SSEEvent{Event: event, ID: p.lastID, Data: data[:len(data)-1]}, nil
		}
		if line[0] == ':' {
			continue
		}
		pending = true
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(name) {
		case "event":
			event = string(value)
		case "data":
			if len(data)+len(value)+1 > p.maxEvent {
				return SSEEvent{}, fmt.Errorf("sse: event data exceeds %d bytes", p.maxEvent)
			}
			if data == nil {
				data = make([]byte, 0, len(value)+1)
			}
			data = append(data, value...)
			data = append(data, '\n')
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				p.lastID = string(value)
			}
		}
	}
	if err := p.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return SSEEvent{}, fmt.Errorf("sse: line exceeds %d bytes", p.maxEvent)
		}
		return SSEEvent{}, fmt.Errorf("sse: read: %w", err)
	}
	if pending {
		return SSEEvent{}, ErrSSETruncated
	}
	return SSEEvent{}, io.EOF
}

// ReadEventKind classifies the events of a read session.
type ReadEventKind uint8

const (
	// ReadEventUnknown is an event type this package does not know; skip it.
	ReadEventUnknown ReadEventKind = iota
	ReadEventBatch
	ReadEventPing
	ReadEventError
	ReadEventDone
)

// ReadEvent is a typed event of an SSE read session.
type ReadEvent struct {
	Kind  ReadEventKind
	Batch *ReadBatch  // ReadEventBatch
	ID    LastEventID // ReadEventBatch
	Ping  Ping        // ReadEventPing
	Err   *Error      // ReadEventError: status 503, code and message from the data
}

// DecodeReadEvent types an SSE event of a read session whose batches use
// format f. A malformed batch or ping is an *Error (bad_json, or
// bad_header for a malformed id).
func DecodeReadEvent(ev SSEEvent, f Format) (ReadEvent, *Error) {
	switch ev.Event {
	case EventBatch:
		id, err := ParseLastEventID(ev.ID)
		if err != nil {
			return ReadEvent{}, err
		}
		b, err := DecodeReadBatchJSON(ev.Data, f)
		if err != nil {
			return ReadEvent{}, err
		}
		return ReadEvent{Kind: ReadEventBatch, Batch: b, ID: id}, nil
	case EventPing:
		var w struct {
			Timestamp *uint64       `json:"timestamp"`
			Tail      *positionJSON `json:"tail"`
		}
		if err := json.Unmarshal(ev.Data, &w); err != nil {
			return ReadEvent{}, BadJSON("ping: %s", jsonMessage(err))
		}
		if w.Timestamp == nil {
			return ReadEvent{}, BadJSON("ping: missing timestamp")
		}
		p := Ping{Timestamp: *w.Timestamp}
		if w.Tail != nil {
			tail, err := w.Tail.get("ping tail")
			if err != nil {
				return ReadEvent{}, err
			}
			p.Tail = tail
		}
		return ReadEvent{Kind: ReadEventPing, Ping: p}, nil
	case EventError:
		e := ParseError(503, ev.Data)
		return ReadEvent{Kind: ReadEventError, Err: e}, nil
	case "", "message":
		if string(ev.Data) == SSEDone {
			return ReadEvent{Kind: ReadEventDone}, nil
		}
	}
	return ReadEvent{Kind: ReadEventUnknown}, nil
}
