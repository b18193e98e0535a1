package node

import (
	"context"
	"math"
	"net/http"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/catalog"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/reader"
)

// The flight index is the tail window a led stream's reads pass and follow.
var _ reader.FollowWindow = (*loglet.Index)(nil)

// The cursor, its events and the start rules are star/reader's; the node
// resolves and leads the stream a read names.
type (
	Cursor    = reader.Cursor
	Event     = reader.Event
	EventKind = reader.EventKind
)

const (
	EventBatch     = reader.EventBatch
	EventHeartbeat = reader.EventHeartbeat
	EventEnd       = reader.EventEnd

	DefaultHeartbeatMin = reader.DefaultHeartbeatMin
	DefaultHeartbeatMax = reader.DefaultHeartbeatMax
)

// ResolveStart places a read's start against the stream's tail
// (reader.ResolveStart).
func ResolveStart(req api.ReadRequest, tail api.StreamPosition) (reader.Start, *api.Error) {
	return reader.ResolveStart(req, tail)
}

// ReadOptions shape a read.
type ReadOptions struct {
	// Heartbeats makes the cursor report the tail on entering live follow
	// and then every HeartbeatMin–HeartbeatMax while idle (sessions).
	Heartbeats                 bool
	HeartbeatMin, HeartbeatMax time.Duration
	// Create is the config of a stream auto-created by this read (the
	// s2-stream-config header), when the basin creates streams on read.
	Create *api.StreamConfig
}

// CheckTail returns a stream's durable tail: one past its last
// acknowledged record, with that record's timestamp (0, 0 when empty).
func (n *Node) CheckTail(ctx context.Context, basin, name string, create *api.StreamConfig) (api.StreamPosition, error) {
	b, e, err := n.cat.LiveStream(ctx, basin, name, catalog.AutoCreate{OnRead: true, Config: create})
	if err != nil {
		return api.StreamPosition{}, err
	}
	l, err := n.lead(ctx, b, e)
	if err != nil {
		return api.StreamPosition{}, err
	}
	l.touch()
	// The tail is this star's memory: the clock guard (selfLive).
	if err := n.selfLive(); err != nil {
		return api.StreamPosition{}, err
	}
	return position(l.s.Tail()), nil
}

// Read serves a unary read (JSON or protobuf): one batch, after waiting up
// to req.Wait for records when the read starts at the tail.
func (n *Node) Read(ctx context.Context, basin, name string, req api.ReadRequest, create *api.StreamConfig) (api.ReadBatch, error) {
	c, err := n.OpenRead(ctx, basin, name, req, ReadOptions{Create: create})
	if err != nil {
		return api.ReadBatch{}, err
	}
	defer c.Close()
	ev, err := c.Next(ctx)
	if err != nil {
		return api.ReadBatch{}, err
	}
	if ev.Kind == EventBatch {
		return ev.Batch, nil
	}
	return api.ReadBatch{}, nil
}

// OpenRead resolves the stream (auto-creating it when the basin creates
// streams on read, unless the read would fail 416 on the new stream and
// names no config for it), leads
// it, and opens a cursor on it (reader.Open places the start by S2's rules,
// docs/design.md §16.1). Close the cursor when done: a stream with an open
// cursor is not released as idle.
func (n *Node) OpenRead(ctx context.Context, basin, name string, req api.ReadRequest, opts ReadOptions) (*Cursor, error) {
	admit := func(api.EffectiveStreamConfig) error {
		_, err := ResolveStart(req, api.StreamPosition{})
		if err == nil || opts.Create != nil && err.Status == http.StatusRequestedRangeNotSatisfiable {
			// A read that names the new stream's config (s2-stream-config)
			// creates it though the read is 416 on it, as S2 applies the
			// header when a read creates the stream; one without it
			// creates nothing then (a stray read makes no stream).
			return nil
		}
		return err
	}
	b, e, err := n.cat.LiveStream(ctx, basin, name, catalog.AutoCreate{OnRead: true, Config: opts.Create, Admit: admit})
	if err != nil {
		return nil, err
	}
	l, err := n.lead(ctx, b, e)
	if err != nil {
		return nil, err
	}
	if err := n.findTrim(ctx, l, basin); err != nil {
		return nil, err
	}
	l.acquire()
	c, err := n.reader.Open(ledRead{n, l}, reader.Stream{ID: e.Row.ID, Basin: basin}, req, reader.CursorOptions{
		Heartbeats: opts.Heartbeats, HeartbeatMin: opts.HeartbeatMin, HeartbeatMax: opts.HeartbeatMax,
		Retention: retentionAge(e.Row.Config.Resolve(b.Row.Config.DefaultStreamConfig).Retention),
	})
	if err != nil {
		l.release()
		return nil, err
	}
	return c, nil
}

// ledRead is a led stream as a cursor holds it.
type ledRead struct {
	n *Node
	l *ledStream
}

func (r ledRead) Gone() error                 { return r.l.gone() }
func (r ledRead) Live() error                 { return r.n.selfLive() }
func (r ledRead) Tail() api.StreamPosition    { return position(r.l.s.Tail()) }
func (r ledRead) Window() reader.FollowWindow { return r.l.loglet.Index() }
func (r ledRead) Release()                    { r.l.release() }
func (r ledRead) TrimPoint() uint64           { return r.l.trimPoint() }

// retentionAge is a retention policy's age for the read path (0:
// infinite); an age past what a duration holds keeps every record.
func retentionAge(p api.RetentionPolicy) time.Duration {
	if p.Infinite || p.AgeSecs == 0 || p.AgeSecs > uint64(math.MaxInt64/int64(time.Second)) {
		return 0
	}
	return time.Duration(p.AgeSecs) * time.Second
}
