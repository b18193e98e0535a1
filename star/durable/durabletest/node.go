package durabletest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/star/node"
)

// OpenNode opens a real node on ms and in-memory buckets, flushing every
// millisecond, closed when the test ends: what a test serves the Durable
// Streams handler from.
func OpenNode(t testing.TB, ms meta.Store) *node.Node {
	t.Helper()
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Defaults()
	cfg.StarID = "keys-star"
	cfg.Standard.FlushInterval, cfg.Express.FlushInterval = time.Millisecond, time.Millisecond
	n, err := node.Open(context.Background(), cfg, node.Deps{Meta: ms, Objects: objs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	return n
}
