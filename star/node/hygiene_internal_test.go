package node

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/catalog"
)

// A request that took a stream's slot before the idle release forgot it
// must not open the stream in that orphaned slot: a later request opens
// it in a new slot, and two facades would sequence the same stream.
func TestForgottenSlotIsNotOpened(t *testing.T) {
	ctx := context.Background()
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.StarID = "test-star"
	cfg.Standard.FlushInterval, cfg.Express.FlushInterval = time.Millisecond, time.Millisecond
	cfg.IdleRelease = 0 // released by hand below
	n, err := Open(ctx, cfg, Deps{Meta: testsvc.SQLite(t), Objects: objs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "slot-basin", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Append(ctx, "slot-basin", "s", &api.AppendInput{Records: []api.Record{{Body: []byte("a")}}}, nil); err != nil {
		t.Fatal(err)
	}
	b, e, err := n.cat.LiveStream(ctx, "slot-basin", "s", catalog.AutoCreate{})
	if err != nil {
		t.Fatal(err)
	}
	id := e.Row.ID
	l := n.ledIfOpen(id)
	if _, err := n.release(ctx, id, l, nil); err != nil {
		t.Fatal(err)
	}
	stale := n.slot(id) // a request between the release and forget
	n.forget(id, e.Key)

	_, err = n.leadIn(ctx, stale, b, e)
	if ae, ok := errors.AsType[*api.Error](err); !ok || ae.Status != 503 {
		t.Fatalf("leading through a forgotten slot: want a retryable 503, got %v", err)
	}
	if stale.l != nil {
		t.Fatal("the stream was opened in a forgotten slot")
	}
	// The next request leads it in the current slot, at its tail.
	ack, err := n.Append(ctx, "slot-basin", "s", &api.AppendInput{Records: []api.Record{{Body: []byte("b")}}}, nil)
	if err != nil || ack.Start.SeqNum != 1 {
		t.Fatalf("append after the refusal: %+v %v", ack, err)
	}
}
