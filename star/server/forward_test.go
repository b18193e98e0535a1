package server_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// starOn is one star (id) of a cluster sharing ms and objs, serving on a
// loopback port it advertises in its registry row.
func starOn(t *testing.T, id string, ms meta.Store, objs objstore.Store) *env {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Defaults()
	cfg.StarID, cfg.Address = id, ln.Addr().String()
	cfg.Standard.FlushInterval = time.Millisecond
	cfg.Express.FlushInterval = time.Millisecond
	cfg.HeartbeatEvery, cfg.DeadAfter = 50*time.Millisecond, time.Second
	n, err := node.Open(context.Background(), cfg, node.Deps{Meta: ms, Objects: objs, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(n, server.Options{HeartbeatMin: 50 * time.Millisecond, HeartbeatMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer(ln.Addr().String())
	go hs.Serve(ln)
	e := &env{t: t, n: n, srv: srv, hs: hs, base: "http://" + ln.Addr().String()}
	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetUnencryptedHTTP2(true)
	e.h1 = &http.Client{Transport: &http.Transport{Protocols: &p1, DisableCompression: true}, Timeout: 30 * time.Second}
	e.h2 = &http.Client{Transport: &http.Transport{Protocols: &p2, DisableCompression: true}}
	t.Cleanup(func() {
		srv.Drain()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		n.Close(ctx)
		e.h1.CloseIdleConnections()
		e.h2.CloseIdleConnections()
	})
	return e
}

func starPair(t *testing.T) (a, b *env) {
	t.Helper()
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	ms := testsvc.SQLite(t)
	return starOn(t, "a", ms, objs), starOn(t, "b", ms, objs)
}

// Every data request to a star that does not lead the stream is served
// by the leader through it: unary append, check-tail and read, an SSE
// read session and an S2S append session (h2c, full duplex).
func TestForwardToLeader(t *testing.T) {
	a, b := starPair(t)
	a.setupBasin("fwd-basin")
	want(t, a.appendJSON("fwd-basin", "s", textRecords("a", 3)), 200, "")

	r := b.appendJSON("fwd-basin", "s", textRecords("b", 2))
	want(t, r, 200, "")
	ack, err := api.DecodeAppendAckJSON(r.body)
	if err != nil || ack.Start.SeqNum != 3 || ack.End.SeqNum != 5 {
		t.Fatalf("forwarded append ack %+v %v", ack, err)
	}
	if tb, ta := b.tail("fwd-basin", "s"), a.tail("fwd-basin", "s"); tb != ta || tb.SeqNum != 5 {
		t.Fatalf("tail through b %+v, through a %+v", tb, ta)
	}
	batch, rr := b.readJSON("fwd-basin", "s", "seq_num=0")
	want(t, rr, 200, "")
	if len(batch.Records) != 5 || string(batch.Records[3].Body) != "b-0" {
		t.Fatalf("forwarded read: %d records", len(batch.Records))
	}

	// SSE read session through b, ending at a count limit.
	sse := b.stream("fwd-basin", "GET", "streams/s/records?seq_num=0&count=5", nil, "Accept", "text/event-stream")
	want(t, sse, 200, "")
	if got := string(sse.body); strings.Count(got, "event: batch") == 0 || !strings.Contains(got, "[DONE]") {
		t.Fatalf("forwarded SSE session: %s", truncate(sse.body))
	}

	// S2S append session through b: pipelined acks in order.
	s := b.openAppendSession("fwd-basin", "s", api.CompressionNone)
	for i := range 5 {
		s.send(t, batch_(i))
	}
	next := uint64(5)
	for range 5 {
		a, terr := s.ack(t)
		if terr != nil {
			t.Fatalf("session ack: %v", terr)
		}
		if a.Start.SeqNum != next {
			t.Fatalf("session ack at %d, want %d", a.Start.SeqNum, next)
		}
		next = a.End.SeqNum
	}
	s.pw.Close()

	// A request already forwarded is never forwarded again: b answers
	// 503 and says it is not the leader.
	r = b.appendJSON("fwd-basin", "s", textRecords("loop", 1), server.HeaderForwardedBy, "c")
	want(t, r, 503, api.CodeUnavailable)
	if r.header.Get(server.HeaderNotLeader) != "a" {
		t.Fatalf("not-leader header %q", r.header.Get(server.HeaderNotLeader))
	}

	// A delete through b reaches the leader, which stops taking appends
	// for the stream at once.
	want(t, b.stream("fwd-basin", "DELETE", "streams/s", nil), 202, "")
	want(t, a.appendJSON("fwd-basin", "s", textRecords("late", 1)), 409, api.CodeStreamDeletionPending)
}

func batch_(i int) *api.AppendInput { return batch(string(rune('p'+i)), 2) }

// A leader whose port stops answering while it stays registered live:
// forwards fail with a retryable 503 (never a takeover of a live star's
// stream); once the leader stops, the star takes the stream over at its
// tail.
func TestForwardFailsOverWhenLeaderStops(t *testing.T) {
	a, b := starPair(t)
	a.setupBasin("fwd-basin")
	want(t, a.appendJSON("fwd-basin", "s", textRecords("a", 4)), 200, "")
	a.srv.Drain()
	a.hs.Close()
	for range 5 {
		want(t, b.appendJSON("fwd-basin", "s", textRecords("b", 1)), 503, api.CodeUnavailable)
	}
	if err := a.n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := b.appendJSON("fwd-basin", "s", textRecords("b", 1))
	want(t, r, 200, "")
	if ack, _ := api.DecodeAppendAckJSON(r.body); ack.Start.SeqNum != 4 {
		t.Fatalf("successor appended at %d, want 4", ack.Start.SeqNum)
	}
}
