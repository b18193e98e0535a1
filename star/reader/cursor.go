package reader

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/format"
)

// Heartbeat bounds of sessions: S2 sends one on entering live follow and
// then every random 5–15 s while idle (the TypeScript SDK gives up after 20
// s without a frame, 25 s without an SSE event).
const (
	DefaultHeartbeatMin = 5 * time.Second
	DefaultHeartbeatMax = 15 * time.Second
)

// Led is the stream a cursor reads as its leader holds it (star/node's led
// slot): the cursor holds it from Open until Close.
type Led interface {
	// Gone fails once the stream is being deleted or this star no longer
	// leads it.
	Gone() error
	// Live is the clock guard: nil while this star's memory (the tail, the
	// tail window) may be served.
	Live() error
	// Tail is the stream's acknowledged tail.
	Tail() api.StreamPosition
	// Window is the stream's tail window.
	Window() FollowWindow
	// TrimPoint is the stream's trim point as of its acknowledged trims
	// (this leader's, and those it found in the records when it opened
	// the stream): reads skip every record below it.
	TrimPoint() uint64
	// Release ends the cursor's hold on the stream.
	Release()
}

// FollowWindow is a tail window that signals releases (*loglet.Index):
// Released's channel closes at the next release into it.
type FollowWindow interface {
	TailWindow
	Released() <-chan struct{}
}

// CursorOptions shape a cursor's follow.
type CursorOptions struct {
	// Heartbeats makes the cursor report the tail on entering live follow
	// and then every HeartbeatMin–HeartbeatMax while idle (sessions).
	Heartbeats                 bool
	HeartbeatMin, HeartbeatMax time.Duration
	// Retention is the stream's retention age (0: infinite): each read
	// skips the records whose timestamp is older than that on this star's
	// clock, whether or not the auditor has reclaimed them yet.
	Retention time.Duration
}

// Open places a read's start by S2's rules (docs/design.md §16.1,
// ResolveStart) against led's tail and returns the cursor that serves it.
// Under a failed clock guard a start by seq num or timestamp is placed on
// the rows alone and resolved against the tail later (Next); a tail offset
// needs the tail now and fails. The cursor holds led from here on (Close
// releases it); on an error it does not.
func (r *Reader) Open(led Led, stream Stream, req api.ReadRequest, opts CursorOptions) (*Cursor, error) {
	var start Start
	var unresolved *api.ReadRequest
	if guard := led.Live(); guard == nil {
		var aerr *api.Error
		if start, aerr = ResolveStart(req, led.Tail()); aerr != nil {
			return nil, aerr
		}
	} else {
		if req.From != api.FromSeqNum && req.From != api.FromTimestamp {
			return nil, guard
		}
		start = AtSeq(req.Value)
		if req.From == api.FromTimestamp {
			start = AtTimestamp(req.Value)
		}
		unresolved = &req
	}
	wait, forever := req.EffectiveWait()
	c := &Cursor{
		r: r, led: led,
		stream:     stream,
		start:      start,
		unresolved: unresolved,
		count:      req.Count,
		bytes:      req.Bytes,
		until:      req.Until,
		wait:       wait,
		forever:    forever,
		heartbeat:  opts.Heartbeats,
		hbMin:      opts.HeartbeatMin,
		hbMax:      opts.HeartbeatMax,
		retention:  opts.Retention,
		idleSince:  time.Now(),
	}
	if c.hbMin <= 0 {
		c.hbMin = DefaultHeartbeatMin
	}
	if c.hbMax < c.hbMin {
		c.hbMax = max(DefaultHeartbeatMax, c.hbMin)
	}
	return c, nil
}

// Close releases the cursor's hold on the stream (idempotent).
func (c *Cursor) Close() {
	if !c.closed {
		c.closed = true
		c.pf.Close()
		c.led.Release()
	}
}

// ResolveStart places a read's start against the stream's tail, or fails
// with the 416 that carries the tail. A timestamp start at or below the
// tail's timestamp stays a timestamp (the reader finds the first record at
// or after it); every other start becomes a seq num.
func ResolveStart(req api.ReadRequest, tail api.StreamPosition) (Start, *api.Error) {
	var seq uint64
	switch req.From {
	case api.FromSeqNum:
		seq = req.Value
		if seq > tail.SeqNum {
			if !req.Clamp {
				return Start{}, api.RangeNotSatisfiable(tail)
			}
			seq = tail.SeqNum
		}
	case api.FromTailOffset:
		seq = tail.SeqNum - min(req.Value, tail.SeqNum)
	case api.FromTimestamp:
		if tail.SeqNum > 0 && req.Value <= tail.Timestamp {
			return AtTimestamp(req.Value), nil
		}
		if req.Value > tail.Timestamp && !req.Clamp {
			return Start{}, api.RangeNotSatisfiable(tail)
		}
		seq = tail.SeqNum
	default:
		return Start{}, api.Invalid("unknown read start")
	}
	if seq == tail.SeqNum && !req.CanFollow() {
		return Start{}, api.RangeNotSatisfiable(tail)
	}
	return AtSeq(seq), nil
}

// EventKind tells what a cursor step produced.
type EventKind uint8

const (
	// EventBatch carries records.
	EventBatch EventKind = iota + 1
	// EventHeartbeat reports the tail while following with nothing new.
	EventHeartbeat
	// EventEnd: a limit, until or the wait ended the read cleanly.
	EventEnd
)

// Event is one step of a read.
type Event struct {
	Kind EventKind
	// Batch holds the records of an EventBatch; its Tail is set when the
	// records were served live (the cursor had caught up before).
	Batch api.ReadBatch
	// Tail is the stream's tail, for EventHeartbeat.
	Tail api.StreamPosition
}

// Cursor is one read in progress: it reads catch-up batches through the
// rows and then follows the tail window, woken by each release. Not safe
// for concurrent use.
type Cursor struct {
	r      *Reader
	led    Led
	stream Stream
	start  Start
	// unresolved is the request whose start was placed without the tail
	// (the clock guard failed at open): resolved once the guard passes,
	// or settled by the rows returning records from it.
	unresolved *api.ReadRequest

	count, bytes *uint64 // remaining; nil is unbounded
	until        *uint64
	wait         time.Duration // idle bound, unless forever
	forever      bool

	heartbeat    bool
	hbMin, hbMax time.Duration
	nextBeat     time.Time
	retention    time.Duration // 0: infinite

	following bool
	idleSince time.Time
	done      bool
	closed    bool
	// pf is the read-ahead, made when a batch ends with more to read (a
	// catch-up): a unary read, one batch, never makes one.
	pf *Prefetch
	// unacked counts consecutive reads that found only records released
	// but not yet acknowledged (bounded by maxUnackedWaits).
	unacked int
}

// Next returns the next batch, heartbeat or the end of the read. Catch-up
// batches come back as fast as the reader serves them; once caught up the
// cursor waits for a release (or, without a wait, ends).
func (c *Cursor) Next(ctx context.Context) (Event, error) {
	for {
		if c.done || isZero(c.count) || isZero(c.bytes) {
			c.done = true
			return Event{Kind: EventEnd}, nil
		}
		if err := c.led.Gone(); err != nil {
			return Event{}, err
		}
		// The tail and the tail window are this star's memory, served only
		// under the clock guard (selfLive); the rows need none: what they
		// cover is acknowledged and never changes.
		guard := c.led.Live()
		// Take the wake channel before reading, so a release between the
		// read and the wait is not missed.
		idx := c.led.Window()
		wake := idx.Released()
		tail := c.led.Tail()
		var window *Tail
		if guard == nil {
			if c.unresolved != nil {
				start, aerr := ResolveStart(*c.unresolved, tail)
				if aerr != nil {
					return Event{}, aerr
				}
				c.start, c.unresolved = start, nil
			}
			window = &Tail{Window: idx, End: tail.SeqNum}
		}
		lim := Limits{Count: limitInt(c.count), Bytes: limitInt(c.bytes), Until: c.until,
			TrimPoint: c.led.TrimPoint(), NotBefore: NotBefore(time.Now(), c.retention)}
		res, err := c.read(ctx, lim, window)
		if err != nil {
			return Event{}, c.readErr(err)
		}
		if ackedOnly(&res, c.led.Tail().SeqNum) && len(res.Records) == 0 {
			// Released but not yet acknowledged: the ack follows at once
			// (the release's callbacks run next); a second without it is
			// a fault, not a wait.
			if c.unacked++; c.unacked > maxUnackedWaits {
				c.unacked = 0
				return Event{}, api.Unavailable("records released on this star are not acknowledged; retry")
			}
			select {
			case <-ctx.Done():
				return Event{}, ctx.Err()
			case <-time.After(time.Millisecond):
			}
			continue
		}
		c.unacked = 0
		c.start = AtSeq(res.Next)
		if res.Stop == StopBatch && c.pf == nil {
			c.pf = c.r.NewPrefetch(c.stream)
		}
		if len(res.Records) > 0 {
			// Records from the start on: it lies below the tail.
			c.unresolved = nil
			sub(c.count, uint64(len(res.Records)))
			sub(c.bytes, uint64(res.Bytes))
			switch res.Stop {
			case StopCount, StopBytes, StopUntil:
				c.done = true
			}
			now := time.Now()
			c.idleSince = now
			c.scheduleBeat(now)
			b := api.ReadBatch{Records: apiRecords(res.Records)}
			if c.following {
				t := c.liveTail(res.Records[len(res.Records)-1], guard == nil)
				b.Tail = &t
			}
			return Event{Kind: EventBatch, Batch: b}, nil
		}
		switch res.Stop {
		case StopCount, StopBytes, StopUntil:
			c.done = true
			continue
		case StopFrontier:
			if guard != nil {
				return Event{}, guard
			}
			// Only a read without the tail window gets this; this star
			// leads the stream and passed the guard, so it is a bug.
			return Event{}, api.Other("read reached the ref-covered frontier without a tail window")
		}
		if !c.forever && c.wait <= 0 {
			c.done = true
			continue
		}
		now := time.Now()
		if !c.following {
			c.following = true
			if c.heartbeat {
				c.scheduleBeat(now)
				return Event{Kind: EventHeartbeat, Tail: c.led.Tail()}, nil
			}
		}
		if err := c.waitForRecords(ctx, wake, now); err != nil {
			return Event{}, err
		}
		if c.beatDue() {
			if err := c.led.Live(); err != nil {
				return Event{}, err // a heartbeat reports the tail: memory
			}
			c.scheduleBeat(time.Now())
			return Event{Kind: EventHeartbeat, Tail: c.led.Tail()}, nil
		}
	}
}

// NotBefore is the retention cut of a stream whose age is age (0:
// infinite) at now: the timestamp (unix ms) below which its records are
// past retention, 0 when none is. The record's own timestamp counts (the
// one the stream keeps: the client's or the arrival time by its
// timestamping mode), as the auditor's retention counts it. Pure.
func NotBefore(now time.Time, age time.Duration) uint64 {
	if age <= 0 {
		return 0
	}
	ms := now.UnixMilli() - age.Milliseconds()
	if ms <= 0 {
		return 0
	}
	return uint64(ms)
}

// ackedOnly cuts res to the records below acked, the stream's
// acknowledged tail read after the read, and reports whether it cut any.
// A slot is released (its records in the tail window, its span refs
// possibly absorbed) a moment before its batches' acks move the tail:
// served in that moment, a record would be read before it is acknowledged,
// and a check-tail right after the read would report less than the read
// returned (star/e2e/verify found both). Every record left was acknowledged
// before the read returns. The cut records are read again next time.
func ackedOnly(res *Result, acked uint64) bool {
	n := len(res.Records)
	for n > 0 && res.Records[n-1].SeqNum >= acked {
		n--
	}
	if n == len(res.Records) {
		return false
	}
	for i := n; i < len(res.Records); i++ {
		res.Bytes -= res.Records[i].MeteredSize()
	}
	res.Records = res.Records[:n]
	res.Next = res.Start
	if n > 0 {
		res.Next = res.Records[n-1].SeqNum + 1
	}
	res.Stop = StopCaughtUp
	return true
}

// maxUnackedWaits bounds the 1 ms waits of a read that found only records
// released but not yet acknowledged (about a second).
const maxUnackedWaits = 1000

// gapRetries bounds how often a read that met a gap is retried.
const gapRetries = 3

// read runs one Read. A gap is retried a few times: the absorb can
// write the row a read is looking for between the read's floor lookup and
// its forward page, which the reader reports as a gap; a moment later the
// rows are whole. A gap that persists is real and fails the read.
func (c *Cursor) read(ctx context.Context, lim Limits, tail *Tail) (Result, error) {
	for attempt := 0; ; attempt++ {
		var res Result
		var err error
		if c.pf != nil {
			res, err = c.pf.Read(ctx, c.start, lim, tail)
		} else {
			res, err = c.r.Read(ctx, c.stream, c.start, lim, tail)
		}
		if err == nil || !errors.Is(err, ErrGap) || attempt == gapRetries {
			return res, err
		}
		c.r.log.Debug("read met a gap; retrying", "stream", c.stream.ID, "err", err)
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * time.Millisecond):
		}
	}
}

// waitForRecords blocks until a release, the heartbeat time, the end of the
// idle bound (which ends the read) or ctx.
func (c *Cursor) waitForRecords(ctx context.Context, wake <-chan struct{}, now time.Time) error {
	var idle <-chan time.Time
	if !c.forever {
		d := c.idleSince.Add(c.wait).Sub(now)
		if d <= 0 {
			c.done = true
			return nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		idle = t.C
	}
	var beat <-chan time.Time
	if c.heartbeat {
		t := time.NewTimer(max(c.nextBeat.Sub(now), 0))
		defer t.Stop()
		beat = t.C
	}
	sp := startTailWait(ctx) // nil unless traced
	select {
	case <-wake:
		endTailWait(sp, "release")
	case <-idle:
		c.done = true
		endTailWait(sp, "idle")
	case <-beat:
		endTailWait(sp, "heartbeat")
	case <-ctx.Done():
		endTailWait(sp, "done")
		return ctx.Err()
	}
	return nil
}

func (c *Cursor) beatDue() bool {
	return c.heartbeat && !c.done && !time.Now().Before(c.nextBeat)
}

func (c *Cursor) scheduleBeat(now time.Time) {
	if !c.heartbeat {
		return
	}
	span := c.hbMax - c.hbMin
	d := c.hbMin
	if span > 0 {
		d += rand.N(span)
	}
	c.nextBeat = now.Add(d)
}

// liveTail is the tail a live batch reports: the stream's durable tail, or
// the batch's end when the tail has not caught up yet (a flight enters the
// flight index just before its batches are acknowledged) or this star's
// tail is not to be trusted (fresh false: the clock guard failed).
func (c *Cursor) liveTail(last format.Record, fresh bool) api.StreamPosition {
	var t api.StreamPosition
	if fresh {
		t = c.led.Tail()
	}
	if t.SeqNum <= last.SeqNum {
		t = api.StreamPosition{SeqNum: last.SeqNum + 1, Timestamp: last.Timestamp}
	}
	return t
}

// readErr maps a read path failure to the API: the client's cancellation
// (as star/catalog.ContextError maps it) or the storage layer's failure
// (logged; the client sees 500 storage).
func (c *Cursor) readErr(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return api.Unavailable("request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return api.Unavailable("request timed out")
	}
	c.r.log.Error("read failed", "err", err)
	return api.Storage("read failed")
}

func isZero(v *uint64) bool { return v != nil && *v == 0 }

func sub(v *uint64, n uint64) {
	if v != nil {
		*v -= min(*v, n)
	}
}

// limitInt turns a remaining bound into the reader's limit (0: none). The
// reader caps every Read at a batch, so a huge bound is no bound.
func limitInt(v *uint64) int {
	if v == nil || *v > 1<<30 {
		return 0
	}
	return int(*v)
}

// apiRecords converts read records to the API's, sharing names, values
// and bodies; timestamps and headers each take one allocation per batch.
func apiRecords(recs []format.Record) []api.Record {
	out := make([]api.Record, len(recs))
	ts := make([]uint64, len(recs))
	nh := 0
	for i := range recs {
		nh += len(recs[i].Headers)
	}
	hs := make([]api.Header, 0, nh)
	for i := range recs {
		r := &recs[i]
		ts[i] = r.Timestamp
		var rh []api.Header
		if len(r.Headers) > 0 {
			start := len(hs)
			for _, h := range r.Headers {
				hs = append(hs, api.Header(h))
			}
			rh = hs[start:len(hs):len(hs)]
		}
		out[i] = api.Record{SeqNum: r.SeqNum, Timestamp: &ts[i], Headers: rh, Body: r.Body}
	}
	return out
}
