package settle

import (
	"context"
	"errors"
	"fmt"

	"github.com/starlog/starlog/shared/meta"
)

// ErrUnknownStream means a stream id has neither an identity row nor a
// tombstone: its basin, and so its settled-object keys, cannot be known.
var ErrUnknownStream = errors.New("settle: stream has no identity row")

// Streams is the settle job's deleted-stream check: whether a stream id is
// alive, and its basin (part of settled-object keys). The star implements
// it over its own rows; MetaStreams reads the rows directly.
type Streams interface {
	StreamState(ctx context.Context, streamID string) (alive bool, basin string, err error)
}

// tombstoneSK is the sort key of a deleted stream's tombstone
// (stream#<id>/deleted, written by star/node when the stream is deleted).
const tombstoneSK = "deleted"

// MetaStreams answers StreamState from the stream's own partition with one
// query: the tombstone (stream#<id>/deleted) means deleted, else the
// identity row (stream#<id>/meta, meta.StreamMetaKey) names the basin. The
// range between the two holds only the lease row, so the query reads at
// most three small items.
type MetaStreams struct{ Meta meta.Store }

// StreamState implements Streams.
func (m MetaStreams) StreamState(ctx context.Context, streamID string) (bool, string, error) {
	k := meta.StreamMetaKey(streamID)
	pg, err := m.Meta.Query(ctx, meta.Query{PK: k.PK, From: tombstoneSK, To: k.SK})
	if err != nil {
		return false, "", fmt.Errorf("settle: state of stream %s: %w", streamID, err)
	}
	var tomb, ident *meta.Item
	for i := range pg.Items {
		switch pg.Items[i].SK {
		case tombstoneSK:
			tomb = &pg.Items[i]
		case k.SK:
			ident = &pg.Items[i]
		}
	}
	var v struct {
		Basin string `json:"basin"`
	}
	switch {
	case tomb != nil:
		if err := meta.Decode(tomb.Val, &v); err != nil {
			return false, "", fmt.Errorf("settle: tombstone of stream %s: %w", streamID, err)
		}
		return false, v.Basin, nil
	case ident != nil:
		if err := meta.Decode(ident.Val, &v); err != nil {
			return false, "", fmt.Errorf("settle: identity of stream %s: %w", streamID, err)
		}
		if v.Basin == "" {
			return false, "", fmt.Errorf("settle: identity row of stream %s names no basin", streamID)
		}
		return true, v.Basin, nil
	}
	return false, "", fmt.Errorf("%w: %s", ErrUnknownStream, streamID)
}
