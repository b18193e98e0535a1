package node

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/catalog"
)

// A star that stopped leading a deleted stream but could not retire its
// lease (the write failed) retries at its next row check: a create of the
// name would otherwise wait for it for good, its lease naming a live star.
func TestUnretiredLeaseIsRetried(t *testing.T) {
	ctx := context.Background()
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.StarID = "test-star"
	cfg.Standard.FlushInterval, cfg.Express.FlushInterval = time.Millisecond, time.Millisecond
	ms := testsvc.SQLite(t)
	n, err := Open(ctx, cfg, Deps{Meta: ms, Objects: objs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "retire-basin", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Append(ctx, "retire-basin", "s", &api.AppendInput{Records: []api.Record{{Body: []byte("a")}}}, nil); err != nil {
		t.Fatal(err)
	}
	_, e, err := n.cat.LiveStream(ctx, "retire-basin", "s", catalog.AutoCreate{})
	if err != nil {
		t.Fatal(err)
	}
	id := e.Row.ID
	gone, cancel := context.WithCancel(ctx)
	cancel() // the retire's metastore calls fail
	n.stopDeleted(gone, id, "s")
	if n.ledIfOpen(id) != nil {
		t.Fatal("the stream is still led after stopDeleted")
	}
	if l, _, _, err := leader.ReadLease(ctx, ms, id); err != nil || l.Deleted {
		t.Fatalf("lease %+v, %v: want it still held (the injected failure shows nothing)", l, err)
	}
	n.retryRetires(ctx)
	l, _, ok, err := leader.ReadLease(ctx, ms, id)
	if err != nil || !ok || !l.Deleted || len(l.Pending) != 0 {
		t.Fatalf("lease after the retry: %+v ok %v err %v, want retired with nothing pending", l, ok, err)
	}
	if len(n.unretired) != 0 {
		t.Fatalf("%d retires still pending", len(n.unretired))
	}
}
