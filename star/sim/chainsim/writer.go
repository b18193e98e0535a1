package chainsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// A Writer is one incarnation of the chain's star: Loglet (star/loglet's
// Core under the sim's driver), or another one a test plugs in.
type Writer interface {
	// Run opens the incarnation (settle the chain's earlier epochs with
	// env.Settle, mint), writes env.Flights flights of batches on
	// env.Streams, reports every release through env.Ack in slot order,
	// then idles until ctx ends. It returns when ctx ends or when the
	// incarnation stops for good (deposed: a successor owns the chain).
	Run(ctx context.Context, env WriterEnv) error
}

// WriterEnv is everything the sim hands one writer incarnation. Its stores
// are this actor's views: every request goes through the scheduler.
type WriterEnv struct {
	Star        string // the chain's star
	Incarnation string // chain.Incarnation(Star, n)
	Class       meta.Class
	Params      meta.EpochParams // the bucket set, W and window to mint
	Chain       *chain.Chain     // seeded, on the sim's stores as this actor
	Meta        meta.Store       // the same metastore view Chain uses
	Deadline    time.Duration    // a flight's deadline to reach W
	Streams     []string         // the streams to append to
	Flights     int              // how many flights to write
	MaxRecords  int              // records per batch, at most
	Rand        *rand.Rand       // this actor's own randomness (batch shapes, pacing)
	// Settle restores "rows cover every acknowledged byte" on the chain
	// before a mint: chainsettle.Chain with a fresh absorber (what the node
	// hands loglet.Open).
	Settle func(context.Context) error
	// NewAbsorber returns an absorber on Meta for the live absorb.
	NewAbsorber func() *absorb.Absorber
	// Ack reports one released flight (call it in slot order, once).
	Ack func(Ack)
	// Note adds a line to the run's trace.
	Note func(format string, args ...any)
}

// Ack is one released flight: the batches it acknowledged and where.
type Ack struct {
	Incarnation string
	Epoch, Slot uint64
	Batches     []format.Batch
}

// Payload is the body of record seq of a stream written by incarnation
// inc: distinct per writer, so two records at one seq tell apart.
func Payload(stream string, seq uint64, inc string) []byte {
	return fmt.Appendf(nil, "%s#%d@%s", stream, seq, inc)
}

// Tail reads a stream's durable tail from its greatest row: the next seq
// to assign and the totals an absorber continues from.
func Tail(ctx context.Context, ms meta.Store, streamID string) (uint64, absorb.StreamTotals, error) {
	pk := meta.RefKey(streamID, 0).PK
	pg, err := ms.Query(ctx, meta.Query{PK: pk, From: meta.RefPrefix, To: meta.RefPrefix + "~", Backward: true, Limit: 1})
	if err != nil {
		return 0, absorb.StreamTotals{}, fmt.Errorf("chainsim: tail of %s: %w", streamID, err)
	}
	if len(pg.Items) == 0 {
		return 0, absorb.StreamTotals{}, nil
	}
	var r meta.Ref
	if err := meta.Decode(pg.Items[0].Val, &r); err != nil {
		return 0, absorb.StreamTotals{}, err
	}
	return r.EndSeq, absorb.StreamTotals{CumBytes: r.CumBytes, FencingToken: r.FencingToken, TrimPoint: r.TrimPoint}, nil
}
