package server_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// starOn is one star (id) of a cluster sharing ms and objs, serving on a
// loopback port it advertises in its registry row.
func starOn(t *testing.T, id string, ms meta.Store, objs objstore.Store) *env {
	t.Helper()
	return starWith(t, id, ms, objs, nil)
}

// starWith is starOn with tweak applied to the star's config.
func starWith(t *testing.T, id string, ms meta.Store, objs objstore.Store, tweak func(*node.Config)) *env {
	t.Helper()
	return starAuthed(t, id, ms, objs, tweak, auth.Open())
}

// starAuthed is starWith authenticating with ac.
func starAuthed(t *testing.T, id string, ms meta.Store, objs objstore.Store, tweak func(*node.Config), ac auth.Config) *env {
	t.Helper()
	return starServing(t, id, ms, objs, tweak, server.Options{Auth: ac})
}

// starServing is starWith serving with opts (the heartbeat bounds of the
// sessions are set here).
func starServing(t testing.TB, id string, ms meta.Store, objs objstore.Store, tweak func(*node.Config), opts server.Options) *env {
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
	// The append loops here drive one connection past S2's 200 batches/s
	// per stream; the rate limits have their own tests (ratelimit_test.go).
	cfg.Limits.StreamBatchesPerSec = -1
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := node.Open(context.Background(), cfg, node.Deps{Meta: ms, Objects: objs, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	opts.HeartbeatMin, opts.HeartbeatMax = 50*time.Millisecond, 100*time.Millisecond
	srv, err := server.New(n, opts)
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
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	return starOn(t, "a", ms, objs), starOn(t, "b", ms, objs)
}

// Every data request to a star that does not lead the stream is served
// by the leader through it: unary append, check-tail and read, an SSE
// read session and an S2S append session (h2c, full duplex).
func TestForwardToLeader(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// appendLoop appends one record at a time to stream through e (HTTP/1.1,
// no client retry) until stop, counting the acks in oks (when not nil),
// and reports the statuses and the acked seq nums with their bodies.
func appendLoop(e *env, basin, stream, prefix string, stop <-chan struct{}, oks *atomic.Int64) (statuses map[int]int, acked map[uint64]string) {
	statuses, acked = map[int]int{}, map[uint64]string{}
	// At most one append a millisecond: the load leaves the stars room
	// for the handoffs and outages it runs through.
	pace := time.NewTicker(time.Millisecond)
	defer pace.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return statuses, acked
		case <-pace.C:
		}
		body := fmt.Sprintf("%s-%d", prefix, i)
		req, _ := http.NewRequest("POST", e.base+"/v1/streams/"+stream+"/records", strings.NewReader(`{"records":[{"body":"`+body+`"}]}`))
		req.Header.Set("s2-basin", basin)
		req.Header.Set("Content-Type", "application/json")
		res, err := e.h1.Do(req)
		if err != nil {
			statuses[-1]++
			continue
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		statuses[res.StatusCode]++
		if res.StatusCode == 200 {
			if ack, err := api.DecodeAppendAckJSON(b); err == nil {
				acked[ack.Start.SeqNum] = body
				if oks != nil {
					oks.Add(1)
				}
			}
		}
	}
}

// checkAcked reads stream back through e and checks every acked record.
func checkAcked(t *testing.T, e *env, basin, stream string, acked map[uint64]string) {
	t.Helper()
	var got []api.Record
	for {
		batch, r := e.readJSON(basin, stream, fmt.Sprintf("seq_num=%d", len(got)))
		if r.status == 416 {
			break
		}
		want(t, r, 200, "")
		got = append(got, batch.Records...)
	}
	for seq, body := range acked {
		if seq >= uint64(len(got)) || string(got[seq].Body) != body {
			t.Fatalf("seq %d was acknowledged as %q; %d records read back", seq, body, len(got))
		}
	}
}

// A request the forwarding star sends to the old leader while it hands
// the stream off is refused there before anything is sequenced ("not
// the leader"); the forwarding star resolves the lease again and sends
// it to the new leader (to c), or serves it itself once it is the new
// leader (to b), instead of answering 503. Clients appending through b
// see no error across the move, and every ack reads back at its seq.
func TestForwardFollowsHandoff(t *testing.T) {
	t.Parallel()
	for _, to := range []string{"c", "b"} {
		t.Run("to "+to, func(t *testing.T) {
			objs := memObjects(t)
			ms := testsvc.SQLite(t)
			off := func(c *node.Config) { c.BalanceEvery = 0 }
			a, b := starWith(t, "a", ms, objs, off), starWith(t, "b", ms, objs, off)
			starWith(t, "c", ms, objs, off)
			a.setupBasin("hand-basin")
			want(t, a.appendJSON("hand-basin", "s", textRecords("a", 1)), 200, "")
			want(t, b.appendJSON("hand-basin", "s", textRecords("b", 1)), 200, "")

			stop := make(chan struct{})
			done := make(chan struct{})
			var statuses map[int]int
			var acked map[uint64]string
			var oks atomic.Int64
			go func() {
				defer close(done)
				statuses, acked = appendLoop(b, "hand-basin", "s", "through-b", stop, &oks)
			}()
			// Ten appends acknowledged before the handoff and ten after it.
			poll.Until(t, 10*time.Second, "appends through b before the handoff", func() bool { return oks.Load() >= 10 })
			res, err := a.n.Handoff(context.Background(), "hand-basin", "s", to)
			if err != nil {
				t.Fatal(err)
			}
			after := oks.Load()
			poll.Until(t, 10*time.Second, "appends through b after the handoff", func() bool { return oks.Load() >= after+10 })
			close(stop)
			<-done
			retried := metricValue(t, b, `starlog_http_forwarded_total{result="retried"}`)
			t.Logf("handoff a→%s took %v; appends through b: %v; forwards retried: %v", to, res.Took.Round(time.Millisecond), statuses, retried)
			if len(statuses) != 1 || statuses[200] == 0 {
				t.Fatalf("appends through b across the handoff: %v, want only 200s", statuses)
			}
			if retried == 0 {
				t.Fatal("no forward was retried: the test did not hit the handoff")
			}
			checkAcked(t, b, "hand-basin", "s", acked)
		})
	}
}

// metricValue is e's sample of series (name{labels} as exposed), 0 when absent.
func metricValue(t *testing.T, e *env, series string) float64 {
	t.Helper()
	r := e.call("GET", "/metrics", nil)
	want(t, r, 200, "")
	for _, line := range strings.Split(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %q", series, v)
			}
			return f
		}
	}
	return 0
}

// Through a metastore outage of ten dead-after bounds, appends through a
// star that forwards to the leader keep being acknowledged, end to end
// over HTTP, and /health stays 200 on both stars; afterwards both go on.
func TestForwardThroughMetastoreOutage(t *testing.T) {
	// Not parallel: its 300 ms dead-after is the subject, and heartbeats
	// starved by tests running beside it end the registration early.
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	aMeta, bMeta := mfaults.New(ms, 1), mfaults.New(ms, 2)
	tweak := func(c *node.Config) {
		c.BalanceEvery, c.HeartbeatEvery, c.DeadAfter, c.LeaseCacheTTL = 0, 20*time.Millisecond, 300*time.Millisecond, 50*time.Millisecond
		c.BacklogFlights = 1 << 14 // the outage must not fill the backlog budget
	}
	a, b := starWith(t, "a", aMeta, objs, tweak), starWith(t, "b", bMeta, objs, tweak)
	t.Cleanup(func() { aMeta.SetUnavailable(false); bMeta.SetUnavailable(false) })
	a.setupBasin("out-basin")
	want(t, a.appendJSON("out-basin", "s", textRecords("a", 1)), 200, "")
	want(t, b.appendJSON("out-basin", "s", textRecords("b", 1)), 200, "")

	aMeta.SetUnavailable(true)
	bMeta.SetUnavailable(true)
	stop := make(chan struct{})
	done := make(chan struct{})
	var statuses map[int]int
	var acked map[uint64]string
	go func() {
		defer close(done)
		statuses, acked = appendLoop(b, "out-basin", "s", "through-b", stop, nil)
	}()
	// /health every 100 ms for 3 s of outage: the window is real time,
	// ten times the stars' dead-after, which their own timers measure.
	probe := time.NewTicker(100 * time.Millisecond)
	defer probe.Stop()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); <-probe.C {
		for _, e := range []*env{a, b} {
			if r := e.call("GET", "/health", nil); r.status != 200 {
				t.Errorf("/health of %s during the metastore outage: %s", e.n.StarID(), r)
			}
		}
	}
	close(stop)
	<-done
	t.Logf("appends through b during a 3 s metastore outage (dead-after 300 ms): %v", statuses)
	if len(statuses) != 1 || statuses[200] == 0 {
		t.Fatalf("appends through b during the outage: %v, want only 200s", statuses)
	}
	aMeta.SetUnavailable(false)
	bMeta.SetUnavailable(false)
	poll.UntilErr(t, 5*time.Second, "an append through b after the outage", func() error {
		if r := b.appendJSON("out-basin", "s", textRecords("after", 1)); r.status != 200 {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	// Reads answer from a's memory again once its heartbeat has landed.
	poll.UntilErr(t, 5*time.Second, "a check-tail through b after the outage", func() error {
		if r := b.stream("out-basin", "GET", "streams/s/records/tail", nil); r.status != 200 {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	checkAcked(t, b, "out-basin", "s", acked)
}
