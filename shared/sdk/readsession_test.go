package sdk

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/sdk/sdktest"
)

// nextRecords reads batches until n records have arrived.
func nextRecords(t *testing.T, rs *ReadSession, n int) []api.Record {
	t.Helper()
	var out []api.Record
	for len(out) < n {
		b, err := rs.Next()
		if err != nil {
			t.Fatalf("after %d of %d records: %v", len(out), n, err)
		}
		out = append(out, b.Records...)
	}
	if len(out) != n {
		t.Fatalf("got %d records, want %d", len(out), n)
	}
	return out
}

func checkBodies(t *testing.T, recs []api.Record, first uint64, bodies ...string) {
	t.Helper()
	for i, r := range recs {
		if r.SeqNum != first+uint64(i) || string(r.Body) != bodies[i] {
			t.Fatalf("record %d: seq %d body %q, want seq %d body %q", i, r.SeqNum, r.Body, first+uint64(i), bodies[i])
		}
	}
}

// TestReadSessionFollows catches up, then receives records appended while
// it follows, in order.
func TestReadSessionFollows(t *testing.T) {
	_, _, s := setup(t, sdktest.Options{}, nil)
	appendText(t, s, "a", "b")
	ctx := testCtx(t)
	rs, err := s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	checkBodies(t, nextRecords(t, rs, 2), 0, "a", "b")
	appended := make(chan error, 1)
	go func() {
		for _, b := range []string{"c", "d", "e"} {
			if _, err := s.Append(ctx, &api.AppendInput{Records: textRecords(b)}); err != nil {
				appended <- err
				return
			}
		}
		appended <- nil
	}()
	checkBodies(t, nextRecords(t, rs, 3), 2, "c", "d", "e")
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if tail, ok := rs.Tail(); !ok || tail.SeqNum < 3 {
		t.Fatalf("tail %+v %v", tail, ok)
	}
}

// TestReadSessionHeartbeats: a session idle for many heartbeat timeouts
// stays up on the server's heartbeats alone, without reconnecting.
func TestReadSessionHeartbeats(t *testing.T) {
	srv, _, s := setup(t, sdktest.Options{HeartbeatInterval: 20 * time.Millisecond}, nil)
	ctx := testCtx(t)
	rs, err := s.ReadSession(ctx, api.ReadRequest{}, ReadSessionOptions{HeartbeatTimeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	appended := make(chan error, 1)
	go func() {
		// Idle for 30 heartbeats (600 ms, four heartbeat timeouts) first.
		if err := poll.Wait(5*time.Second, func() error {
			if n := srv.Heartbeats(); n < 30 {
				return fmt.Errorf("%d heartbeats sent", n)
			}
			return nil
		}); err != nil {
			appended <- err
			return
		}
		_, err := s.Append(ctx, &api.AppendInput{Records: textRecords("late")})
		appended <- err
	}()
	checkBodies(t, nextRecords(t, rs, 1), 0, "late")
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if rs.Reconnects() != 0 || len(srv.ReadSessions()) != 1 {
		t.Fatalf("reconnected %d times (%d sessions)", rs.Reconnects(), len(srv.ReadSessions()))
	}
}

// TestReadSessionSilence: with no frame for the heartbeat timeout the
// connection is given up, retried, and the session fails with a 408 when
// the attempts run out.
func TestReadSessionSilence(t *testing.T) {
	srv, _, s := setup(t, sdktest.Options{
		ReadSessionHook: func(url.Values) sdktest.ReadFault { return sdktest.ReadFault{NoHeartbeats: true} },
	}, func(c *Config) { c.Retry = fastRetry(3) })
	ctx := testCtx(t)
	rs, err := s.ReadSession(ctx, api.ReadRequest{}, ReadSessionOptions{HeartbeatTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = rs.Next()
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestTimeout {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("failed after %v, before three timeouts", d)
	}
	if n := len(srv.ReadSessions()); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
	// The failure sticks.
	if _, err2 := rs.Next(); !errors.Is(err2, err) && err2.Error() != err.Error() {
		t.Fatalf("second Next: %v", err2)
	}
}

// TestReadSessionResumes breaks the connection after a batch; the session
// reconnects at the last seq num + 1 with the count reduced, and delivers
// everything once.
func TestReadSessionResumes(t *testing.T) {
	var sessions atomic.Int32
	srv, _, s := setup(t, sdktest.Options{
		ReadSessionHook: func(url.Values) sdktest.ReadFault {
			if sessions.Add(1) == 1 {
				return sdktest.ReadFault{DropAfter: 1}
			}
			return sdktest.ReadFault{}
		},
	}, nil)
	appendText(t, s, "0", "1", "2", "3")
	ctx := testCtx(t)
	rs, err := s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum, Value: 1, Count: api.Uint64(6)}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	checkBodies(t, nextRecords(t, rs, 3), 1, "1", "2", "3")
	appendText(t, s, "4", "5", "6", "7")
	checkBodies(t, nextRecords(t, rs, 3), 4, "4", "5", "6")
	if _, err := rs.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the count: %v", err)
	}
	qs := srv.ReadSessions()
	if len(qs) != 2 {
		t.Fatalf("%d connections, want 2", len(qs))
	}
	if qs[1].Get("seq_num") != "4" || qs[1].Get("count") != "3" {
		t.Fatalf("resumed with %v, want seq_num=4 count=3", qs[1])
	}
	if rs.Reconnects() != 1 {
		t.Fatalf("reconnects %d", rs.Reconnects())
	}
}

// TestReadSessionTailOffsetPinned: a session from the tail that breaks
// before its first record resumes at the seq num the tail had when it
// opened. Records appended while it reconnects are delivered, where
// re-resolving the tail offset would skip them.
func TestReadSessionTailOffsetPinned(t *testing.T) {
	var sessions atomic.Int32
	var s *Stream
	srv, _, s := setup(t, sdktest.Options{
		ReadSessionHook: func(url.Values) sdktest.ReadFault {
			switch sessions.Add(1) {
			case 1:
				return sdktest.ReadFault{DropAfterHeartbeat: true}
			case 2:
				// Appended before the reconnect's start is resolved.
				if _, err := s.Append(t.Context(), &api.AppendInput{Records: textRecords("new1", "new2")}); err != nil {
					t.Error(err)
				}
			}
			return sdktest.ReadFault{}
		},
	}, nil)
	appendText(t, s, "old0", "old1")
	ctx := testCtx(t)
	rs, err := s.ReadSession(ctx, api.ReadRequest{From: api.FromTailOffset}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	checkBodies(t, nextRecords(t, rs, 2), 2, "new1", "new2")
	qs := srv.ReadSessions()
	if len(qs) != 2 || qs[0].Get("seq_num") != "2" || qs[1].Get("seq_num") != "2" {
		t.Fatalf("sessions %v", qs)
	}
}

// TestReadSessionHeartbeatAhead: a heartbeat may report a tail ahead of
// what the session has delivered (records not yet durable, or still being
// caught up). It must not move the resume position: the records below
// that tail that follow are accepted, and a reconnect resumes after the
// last record delivered.
func TestReadSessionHeartbeatAhead(t *testing.T) {
	var conns atomic.Int32
	var mu sync.Mutex
	var queries []string
	srv := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := conns.Add(1)
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", api.ContentTypeS2S)
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		fw := api.NewFrameWriter(w, api.CompressionNone)
		send := func(b *api.ReadBatch) {
			_ = fw.WriteMessage(api.EncodeReadBatchProto(b))
			_ = rc.Flush()
		}
		ts := uint64(1)
		rec := func(sn uint64) api.Record {
			return api.Record{SeqNum: sn, Timestamp: &ts, Body: []byte(fmt.Sprint(sn))}
		}
		if n == 1 {
			send(&api.ReadBatch{Records: []api.Record{rec(0), rec(1)}})
			send(&api.ReadBatch{Tail: &api.StreamPosition{SeqNum: 10}}) // ahead
			send(&api.ReadBatch{Records: []api.Record{rec(2), rec(3)}})
			panic(http.ErrAbortHandler) // break the connection
		}
		send(&api.ReadBatch{Records: []api.Record{rec(4)}})
		<-r.Context().Done()
	}))
	c := newClient(t, srv.URL, nil)
	rs, err := c.Basin(testBasin).Stream("s").ReadSession(testCtx(t), api.ReadRequest{From: api.FromSeqNum}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	checkBodies(t, nextRecords(t, rs, 5), 0, "0", "1", "2", "3", "4")
	mu.Lock()
	defer mu.Unlock()
	if len(queries) != 2 || !strings.Contains(queries[1], "seq_num=4") {
		t.Fatalf("queries %v", queries)
	}
}

// TestReadSessionReconnectAdvised: a draining server's hint makes the
// session reconnect at a batch boundary, losing nothing.
func TestReadSessionReconnectAdvised(t *testing.T) {
	var sessions atomic.Int32
	srv, _, s := setup(t, sdktest.Options{
		ReadSessionHook: func(url.Values) sdktest.ReadFault {
			if sessions.Add(1) == 1 {
				return sdktest.ReadFault{ReconnectAfter: 1}
			}
			return sdktest.ReadFault{}
		},
	}, nil)
	appendText(t, s, "a", "b")
	ctx := testCtx(t)
	rs, err := s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	checkBodies(t, nextRecords(t, rs, 2), 0, "a", "b")
	appendText(t, s, "c")
	checkBodies(t, nextRecords(t, rs, 1), 2, "c")
	if qs := srv.ReadSessions(); len(qs) != 2 || qs[1].Get("seq_num") != "2" {
		t.Fatalf("sessions %v", qs)
	}
}

// TestReadSessionErrors: a start past the tail fails at open with the 416
// and the tail; a non-retryable terminal frame ends the session; a
// retryable one is retried.
func TestReadSessionErrors(t *testing.T) {
	var mode atomic.Int32
	srv, _, s := setup(t, sdktest.Options{
		ReadSessionHook: func(url.Values) sdktest.ReadFault {
			switch mode.Load() {
			case 1:
				return sdktest.ReadFault{Terminal: api.Invalid("no")}
			case 2:
				mode.Store(0)
				return sdktest.ReadFault{Terminal: api.Unavailable("later")}
			}
			return sdktest.ReadFault{}
		},
	}, nil)
	appendText(t, s, "a")
	ctx := testCtx(t)
	_, err := s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum, Value: 5}, ReadSessionOptions{})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("past the tail: %v", err)
	}
	if tail, _ := ae.Tail(); tail.SeqNum != 1 {
		t.Fatalf("416 tail %+v", tail)
	}

	mode.Store(1)
	rs, err := s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Next(); !errors.As(err, &ae) || ae.Status != http.StatusUnprocessableEntity {
		t.Fatalf("terminal 422: %v", err)
	}

	mode.Store(2)
	before := len(srv.ReadSessions())
	rs, err = s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkBodies(t, nextRecords(t, rs, 1), 0, "a")
	if n := len(srv.ReadSessions()) - before; n != 2 {
		t.Fatalf("%d connections for a retried 503, want 2", n)
	}
}

// TestReadSessionEnds: limits and wait end a session with io.EOF.
func TestReadSessionEnds(t *testing.T) {
	_, _, s := setup(t, sdktest.Options{}, nil)
	for i := range 5 {
		appendText(t, s, fmt.Sprint(i))
	}
	ctx := testCtx(t)
	rs, err := s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum, Count: api.Uint64(3)}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkBodies(t, nextRecords(t, rs, 3), 0, "0", "1", "2")
	if _, err := rs.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after count: %v", err)
	}
	wait := time.Duration(0)
	rs, err = s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum, Value: 2, Wait: &wait}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkBodies(t, nextRecords(t, rs, 3), 2, "2", "3", "4")
	if _, err := rs.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after catching up with wait=0: %v", err)
	}
}

// TestReadSessionClose: Close from another goroutine ends a blocked Next.
func TestReadSessionClose(t *testing.T) {
	_, _, s := setup(t, sdktest.Options{}, nil)
	rs, err := s.ReadSession(testCtx(t), api.ReadRequest{}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := rs.Next()
		done <- err
	}()
	// Next has read the first heartbeat (the empty stream's tail) and
	// waits for records that never come.
	poll.Until(t, 5*time.Second, "the first heartbeat", func() bool { _, ok := rs.Tail(); return ok })
	rs.Close()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("Next after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next still blocked after Close")
	}
}

// TestReadSessionReuseBatch: a session decoding in place delivers every
// record once, across batches and a reconnect, each batch read before the
// next Next (as its contract asks).
func TestReadSessionReuseBatch(t *testing.T) {
	var sessions atomic.Int32
	_, _, s := setup(t, sdktest.Options{
		ReadSessionHook: func(url.Values) sdktest.ReadFault {
			if sessions.Add(1) == 1 {
				return sdktest.ReadFault{DropAfter: 1}
			}
			return sdktest.ReadFault{}
		},
	}, nil)
	appendText(t, s, "0", "1", "2")
	ctx := testCtx(t)
	rs, err := s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum, Count: api.Uint64(5)}, ReadSessionOptions{ReuseBatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var got []string
	for {
		if len(got) == 3 {
			appendText(t, s, "3", "4")
		}
		b, err := rs.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range b.Records {
			if r.SeqNum != uint64(len(got)) || r.Timestamp == nil {
				t.Fatalf("batch record %d: seq %d timestamp %v, want seq %d", i, r.SeqNum, r.Timestamp, len(got))
			}
			got = append(got, string(r.Body)) // copied before the next Next
		}
	}
	if strings.Join(got, ",") != "0,1,2,3,4" {
		t.Fatalf("read %q", got)
	}
	if rs.Reconnects() != 1 {
		t.Fatalf("reconnects %d, want 1", rs.Reconnects())
	}
}
