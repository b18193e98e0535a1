package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/node"
)

func testLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// stores are the durable media of one test: they outlive node restarts.
type stores struct {
	meta    meta.Store
	objects objstore.Store
}

func newStores(t *testing.T) stores {
	t.Helper()
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	return stores{meta: testsvc.SQLite(t), objects: objs}
}

func testConfig() node.Config {
	c := node.Defaults()
	c.StarID = "test-star"
	c.Standard.FlushInterval = time.Millisecond
	c.Express.FlushInterval = time.Millisecond
	c.DeletionPending = 200 * time.Millisecond
	return c
}

func open(t *testing.T, st stores, cfg node.Config) *node.Node {
	t.Helper()
	n, err := node.Open(context.Background(), cfg, node.Deps{Meta: st.meta, Objects: st.objects, Logger: testLog()})
	if err != nil {
		t.Fatalf("open node: %v", err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

func apiErr(t *testing.T, err error, status int, code string) *api.Error {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) {
		t.Fatalf("want %d %s, got %v", status, code, err)
	}
	if e.Status != status || e.Code != code {
		t.Fatalf("want %d %s, got %d %s: %s", status, code, e.Status, e.Code, e.Message)
	}
	return e
}

func records(prefix string, n int) *api.AppendInput {
	in := &api.AppendInput{}
	for i := range n {
		in.Records = append(in.Records, api.Record{Body: fmt.Appendf(nil, "%s-%d", prefix, i)})
	}
	return in
}

func readAll(t *testing.T, n *node.Node, basin, stream string) []api.Record {
	t.Helper()
	var out []api.Record
	for {
		b, err := n.Read(context.Background(), basin, stream, api.ReadRequest{From: api.FromSeqNum, Value: uint64(len(out)), Count: api.Uint64(1000), Bytes: api.Uint64(1 << 20)}, nil)
		var e *api.Error
		if errors.As(err, &e) && e.Status == 416 {
			return out
		}
		if err != nil {
			t.Fatalf("read from %d: %v", len(out), err)
		}
		out = append(out, b.Records...)
	}
}

// Restarting a star on the same stores (a new incarnation) settles what the
// previous one left and reads back every acknowledged record at its seq num.
func TestRestartReadsBackEveryAck(t *testing.T) {
	st := newStores(t)
	ctx := context.Background()
	n1 := open(t, st, testConfig())
	if _, err := n1.CreateBasin(ctx, api.CreateBasinRequest{Basin: "restart-basin"}, ""); err != nil {
		t.Fatal(err)
	}
	express := api.StorageExpress
	for _, s := range []struct {
		name string
		cfg  *api.StreamConfig
	}{{"std", nil}, {"exp", &api.StreamConfig{StorageClass: &express}}} {
		if _, err := n1.CreateStream(ctx, "restart-basin", api.CreateStreamRequest{Stream: s.name, Config: s.cfg}, ""); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			ack, err := n1.Append(ctx, "restart-basin", s.name, records(fmt.Sprint(i), 10), nil)
			if err != nil {
				t.Fatal(err)
			}
			if ack.Start.SeqNum != uint64(10*i) || ack.End.SeqNum != uint64(10*i+10) {
				t.Fatalf("ack %d: %+v", i, ack)
			}
		}
	}
	// Crash-like: no Close, so nothing is absorbed on the way out; the
	// second incarnation must settle the first one's chains. (The first
	// node's loglets keep running against the same stores until cleanup,
	// but the second's mint deposes them.)
	n2 := open(t, st, testConfig())
	if n2.Incarnation() != n1.Incarnation()+1 {
		t.Fatalf("incarnation %d after %d", n2.Incarnation(), n1.Incarnation())
	}
	for _, name := range []string{"std", "exp"} {
		tail, err := n2.CheckTail(ctx, "restart-basin", name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tail.SeqNum != 50 {
			t.Fatalf("%s: tail %d after restart, want 50", name, tail.SeqNum)
		}
		got := readAll(t, n2, "restart-basin", name)
		if len(got) != 50 {
			t.Fatalf("%s: read %d records, want 50", name, len(got))
		}
		for i, r := range got {
			if want := fmt.Sprintf("%d-%d", i/10, i%10); r.SeqNum != uint64(i) || string(r.Body) != want {
				t.Fatalf("%s: record %d is seq %d %q, want %q", name, i, r.SeqNum, r.Body, want)
			}
		}
		ack, err := n2.Append(ctx, "restart-basin", name, records("after", 1), nil)
		if err != nil {
			t.Fatal(err)
		}
		if ack.Start.SeqNum != 50 {
			t.Fatalf("%s: first append after restart at %d", name, ack.Start.SeqNum)
		}
	}
}

func TestDeletionTiming(t *testing.T) {
	st := newStores(t)
	ctx := context.Background()
	n := open(t, st, testConfig())
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "delete-basin"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateStream(ctx, "delete-basin", api.CreateStreamRequest{Stream: "s"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Append(ctx, "delete-basin", "s", records("x", 3), nil); err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteStream(ctx, "delete-basin", "s"); err != nil {
		t.Fatal(err)
	}
	apiErr(t, n.DeleteStream(ctx, "delete-basin", "s"), 409, api.CodeStreamDeletionPending)
	_, err := n.StreamConfig(ctx, "delete-basin", "s")
	apiErr(t, err, 409, api.CodeStreamDeletionPending)
	_, err = n.Append(ctx, "delete-basin", "s", records("y", 1), nil)
	apiErr(t, err, 409, api.CodeStreamDeletionPending)
	l, err := n.ListStreams(ctx, "delete-basin", api.ListRequest{Limit: 10})
	if err != nil || len(l.Streams) != 1 || l.Streams[0].DeletedAt == nil {
		t.Fatalf("listing during deletion: %+v %v", l, err)
	}
	// Past the deletion-pending window (200 ms) the stream is gone.
	poll.UntilErr(t, 5*time.Second, "the deleted stream answers 404", func() error {
		_, err := n.StreamConfig(ctx, "delete-basin", "s")
		if e, ok := errors.AsType[*api.Error](err); ok && e.Status == 409 {
			return err
		}
		apiErr(t, err, 404, api.CodeStreamNotFound)
		return nil
	})
	l, err = n.ListStreams(ctx, "delete-basin", api.ListRequest{Limit: 10})
	if err != nil || len(l.Streams) != 0 {
		t.Fatalf("listing after deletion: %+v %v", l, err)
	}
	// Re-created at once with a new id: it starts empty.
	if _, err := n.CreateStream(ctx, "delete-basin", api.CreateStreamRequest{Stream: "s"}, ""); err != nil {
		t.Fatal(err)
	}
	tail, err := n.CheckTail(ctx, "delete-basin", "s", nil)
	if err != nil || tail.SeqNum != 0 {
		t.Fatalf("re-created stream tail %+v %v", tail, err)
	}
}

// Concurrent starts of one star id get distinct, increasing incarnations.
func TestIncarnationsAreDistinct(t *testing.T) {
	st := newStores(t)
	seen := map[uint64]bool{}
	for range 3 {
		n := open(t, st, testConfig())
		if seen[n.Incarnation()] {
			t.Fatalf("incarnation %d twice", n.Incarnation())
		}
		seen[n.Incarnation()] = true
		n.Close(context.Background())
	}
	if !seen[1] || !seen[2] || !seen[3] {
		t.Fatalf("incarnations %v", seen)
	}
}

// The auditor's rows: every stream id has an identity row naming its
// basin, and a deleted stream (or a deleted basin's) gets a tombstone.
func TestIdentityAndTombstoneRows(t *testing.T) {
	st := newStores(t)
	ctx := context.Background()
	n := open(t, st, testConfig())
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "rows-basin"}, ""); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "b"} {
		if _, err := n.CreateStream(ctx, "rows-basin", api.CreateStreamRequest{Stream: s}, ""); err != nil {
			t.Fatal(err)
		}
	}
	ids := map[string]string{}
	for _, s := range []string{"a", "b"} {
		k := meta.StreamNameKey("rows-basin", s)
		it, err := st.meta.Get(ctx, k.PK, k.SK)
		if err != nil {
			t.Fatal(err)
		}
		var row node.StreamRow
		if err := meta.Decode(it.Val, &row); err != nil {
			t.Fatal(err)
		}
		ids[s] = row.ID
		ik := meta.StreamMetaKey(row.ID)
		it, err = st.meta.Get(ctx, ik.PK, ik.SK)
		if err != nil {
			t.Fatalf("identity row of %s: %v", s, err)
		}
		var ident meta.StreamMeta
		if err := meta.Decode(it.Val, &ident); err != nil || ident.Basin != "rows-basin" || ident.Name != s || ident.Class != meta.Standard {
			t.Fatalf("identity row of %s: %+v %v", s, ident, err)
		}
	}
	tomb := func(id string) bool {
		k := node.StreamTombstoneKey(id)
		_, err := st.meta.Get(ctx, k.PK, k.SK)
		return err == nil
	}
	if err := n.DeleteStream(ctx, "rows-basin", "a"); err != nil {
		t.Fatal(err)
	}
	if !tomb(ids["a"]) || tomb(ids["b"]) {
		t.Fatal("stream delete: tombstones wrong")
	}
	if err := n.DeleteBasin(ctx, "rows-basin"); err != nil {
		t.Fatal(err)
	}
	if !tomb(ids["b"]) {
		t.Fatal("basin delete did not tombstone its stream")
	}
}

// TestReplaceDeleting: an EnsureStream through node.ReplaceDeleting
// replaces a stream whose deletion is pending at once (a new id, empty),
// where a plain one answers 409 (the Durable Streams face re-creates a
// deleted URL at once).
func TestReplaceDeleting(t *testing.T) {
	st := newStores(t)
	ctx := context.Background()
	n := open(t, st, testConfig())
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "replace-basin"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.EnsureStream(ctx, "replace-basin", "s", api.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Append(ctx, "replace-basin", "s", records("x", 3), nil); err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteStream(ctx, "replace-basin", "s"); err != nil {
		t.Fatal(err)
	}
	_, _, err := n.EnsureStream(ctx, "replace-basin", "s", api.StreamConfig{})
	apiErr(t, err, 409, api.CodeStreamDeletionPending)
	if _, res, err := n.EnsureStream(node.ReplaceDeleting(ctx), "replace-basin", "s", api.StreamConfig{}); err != nil || res != api.ProvisionCreated {
		t.Fatalf("replace a deleting stream: %q %v", res, err)
	}
	tail, err := n.CheckTail(ctx, "replace-basin", "s", nil)
	if err != nil || tail.SeqNum != 0 {
		t.Fatalf("replaced stream tail %+v %v", tail, err)
	}
}
