package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// s2sRead is a client of an S2S read session over h2c.
type s2sRead struct {
	res    *http.Response
	fr     *api.FrameReader
	cancel context.CancelFunc
}

func (e *env) openReadSession(basin, stream, query, acceptEncoding string) *s2sRead {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/v1/streams/"+stream+"/records?"+query, nil)
	req.Header.Set("s2-basin", basin)
	req.Header.Set("Content-Type", "s2s/proto")
	req.Header.Set("Accept", "application/protobuf")
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	res, err := e.h2.Do(req)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "s2s/proto" || res.ProtoMajor != 2 {
		b, _ := io.ReadAll(res.Body)
		cancel()
		e.t.Fatalf("read session: %s %q proto %d: %s", res.Status, res.Header.Get("Content-Type"), res.ProtoMajor, b)
	}
	return &s2sRead{res: res, fr: api.NewFrameReader(res.Body), cancel: cancel}
}

func (s *s2sRead) close() { s.cancel(); s.res.Body.Close() }

// next reads one frame: a batch (records or heartbeat) or a terminal error.
func (s *s2sRead) next(t *testing.T) (*api.ReadBatch, *api.Error, api.Compression) {
	t.Helper()
	f, err := s.fr.Next()
	if err != nil {
		t.Fatalf("read session frame: %v", err)
	}
	if f.Terminal {
		return nil, f.Err(), f.Compression
	}
	b, perr := api.DecodeReadBatchProto(f.Payload)
	if perr != nil {
		t.Fatalf("read session batch: %v", perr)
	}
	return b, nil, f.Compression
}

// records reads frames until n records arrived, skipping heartbeats.
func (s *s2sRead) records(t *testing.T, n int) []api.Record {
	t.Helper()
	var out []api.Record
	for len(out) < n {
		b, e, _ := s.next(t)
		if e != nil {
			t.Fatalf("terminal frame after %d records: %v", len(out), e)
		}
		out = append(out, b.Records...)
	}
	return out
}

func (s *s2sRead) wantEnd(t *testing.T) {
	t.Helper()
	if f, err := s.fr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("want the session's end, got frame %+v err %v", f, err)
	}
}

// 8. Tailing sessions: S2S and SSE.
func TestScenarioTailingReadSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("tail-basin")
	want(t, e.appendJSON("tail-basin", "t", textRecords("old", 2)), 200, "")
	s := e.openReadSession("tail-basin", "t", "", "")
	defer s.close()
	// Entering live follow sends a heartbeat with the tail.
	b, terr, _ := s.next(t)
	if terr != nil || len(b.Records) != 0 || b.Tail == nil || b.Tail.SeqNum != 2 {
		t.Fatalf("first frame: %+v %v", b, terr)
	}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { e.appendJSON("tail-basin", "t", textRecords(fmt.Sprintf("b%d", i), 2)) })
	}
	wg.Wait()
	got := s.records(t, 6)
	for i, r := range got {
		if r.SeqNum != uint64(2+i) {
			t.Fatalf("record %d has seq %d", i, r.SeqNum)
		}
	}
	// Idle: heartbeats keep coming (50–100 ms in this test).
	deadline := time.Now().Add(2 * time.Second)
	beats := 0
	for beats < 3 {
		b, terr, _ := s.next(t)
		if terr != nil || len(b.Records) != 0 || b.Tail == nil || b.Tail.SeqNum != 8 {
			t.Fatalf("heartbeat: %+v %v", b, terr)
		}
		beats++
		if time.Now().After(deadline) {
			t.Fatal("heartbeats too slow")
		}
	}
	// wait=1 on a bounded-by-wait session ends cleanly after the idle time.
	start := time.Now()
	s2 := e.openReadSession("tail-basin", "t", "seq_num=8&wait=1", "")
	defer s2.close()
	for {
		f, err := s2.fr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || f.Terminal {
			t.Fatalf("wait=1 session: %+v %v", f, err)
		}
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("wait=1 session ended after %v", d)
	}
}

func TestSSESession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("sse-basin")
	want(t, e.appendJSON("sse-basin", "s", textRecords("a", 3)), 200, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/v1/streams/s/records?seq_num=1", nil)
	req.Header.Set("s2-basin", "sse-basin")
	req.Header.Set("Accept", "text/event-stream")
	res, err := e.h1.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" ||
		res.Header.Get("Cache-Control") != "no-cache, no-transform" || res.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("sse response %s %v", res.Status, res.Header)
	}
	sr := api.NewSSEReader(res.Body, 0)
	next := func() api.ReadEvent {
		t.Helper()
		ev, err := sr.Next()
		if err != nil {
			t.Fatal(err)
		}
		re, derr := api.DecodeReadEvent(ev, api.FormatRaw)
		if derr != nil {
			t.Fatal(derr)
		}
		return re
	}
	ev := next()
	if ev.Kind != api.ReadEventBatch || len(ev.Batch.Records) != 2 || ev.ID != (api.LastEventID{SeqNum: 2, Count: 2, Bytes: 2 * 11}) || ev.Batch.Tail != nil {
		t.Fatalf("catch-up batch %+v", ev)
	}
	ev = next()
	if ev.Kind != api.ReadEventPing || ev.Ping.Tail.SeqNum != 3 || ev.Ping.Timestamp == 0 {
		t.Fatalf("ping on entering follow %+v", ev)
	}
	want(t, e.appendJSON("sse-basin", "s", textRecords("live", 1)), 200, "")
	for {
		ev = next()
		if ev.Kind == api.ReadEventPing {
			continue
		}
		if ev.Kind != api.ReadEventBatch || ev.Batch.Records[0].SeqNum != 3 || ev.Batch.Tail == nil || ev.Batch.Tail.SeqNum != 4 || ev.ID.Count != 3 {
			t.Fatalf("live batch %+v", ev)
		}
		break
	}
	cancel()

	// A bounded session ends with [DONE]; Last-Event-ID resumes after its seq.
	req, _ = http.NewRequest("GET", e.base+"/v1/streams/s/records?seq_num=0&count=3", nil)
	req.Header.Set("s2-basin", "sse-basin")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", "1,2,22")
	res2, err := e.h1.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res2.Body.Close()
	sr = api.NewSSEReader(res2.Body, 0)
	ev = next()
	if ev.Kind != api.ReadEventBatch || len(ev.Batch.Records) != 1 || ev.Batch.Records[0].SeqNum != 2 || ev.ID.Count != 3 {
		t.Fatalf("resumed batch %+v", ev)
	}
	if ev = next(); ev.Kind != api.ReadEventDone {
		t.Fatalf("want [DONE], got %+v", ev)
	}
	if _, err := sr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after [DONE]: %v", err)
	}
	// A malformed Last-Event-ID is 400 bad_header, before the stream starts.
	r := e.stream("sse-basin", "GET", "streams/s/records", nil, "Accept", "text/event-stream", "Last-Event-ID", "x")
	want(t, r, 400, api.CodeBadHeader)
}

// s2sAppend is a client of an S2S append session over h2c.
type s2sAppend struct {
	pw  *io.PipeWriter
	fw  *api.FrameWriter
	res *http.Response
	fr  *api.FrameReader
}

func (e *env) openAppendSession(basin, stream string, c api.Compression) *s2sAppend {
	e.t.Helper()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", e.base+"/v1/streams/"+stream+"/records", pr)
	req.Header.Set("s2-basin", basin)
	req.Header.Set("Content-Type", "s2s/proto")
	res, err := e.h2.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		e.t.Fatalf("append session: %s %s", res.Status, b)
	}
	s := &s2sAppend{pw: pw, fw: api.NewFrameWriter(pw, c), res: res, fr: api.NewFrameReader(res.Body)}
	e.t.Cleanup(func() { pw.Close(); res.Body.Close() })
	return s
}

func (s *s2sAppend) send(t testing.TB, in *api.AppendInput) {
	t.Helper()
	b, err := api.EncodeAppendProto(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.fw.WriteMessage(b); err != nil {
		t.Fatal(err)
	}
}

func (s *s2sAppend) ack(t testing.TB) (api.AppendAck, *api.Error) {
	t.Helper()
	f, err := s.fr.Next()
	if err != nil {
		t.Fatalf("ack frame: %v", err)
	}
	if f.Terminal {
		return api.AppendAck{}, f.Err()
	}
	a, perr := api.DecodeAppendAckProto(f.Payload)
	if perr != nil {
		t.Fatal(perr)
	}
	return a, nil
}

func batch(prefix string, n int) *api.AppendInput {
	in := &api.AppendInput{}
	for i := range n {
		in.Records = append(in.Records, api.Record{Body: fmt.Appendf(nil, "%s-%d", prefix, i)})
	}
	return in
}

// 9. Append session: pipelined, ordered acks, drain on half-close, a
// failure ends the session and later inputs are not applied.
func TestScenarioAppendSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("sess-basin")
	s := e.openAppendSession("sess-basin", "a", api.CompressionNone)
	done := make(chan error, 1)
	go func() {
		for i := range 100 {
			b, _ := api.EncodeAppendProto(batch(fmt.Sprint(i), 3))
			if err := s.fw.WriteMessage(b); err != nil {
				done <- err
				return
			}
		}
		done <- s.pw.Close() // half-close
	}()
	var prev api.AppendAck
	for i := range 100 {
		a, terr := s.ack(t)
		if terr != nil {
			t.Fatalf("ack %d: %v", i, terr)
		}
		if a.Start.SeqNum != uint64(3*i) || a.End.SeqNum != a.Start.SeqNum+3 || (i > 0 && a.End.SeqNum <= prev.End.SeqNum) || a.Tail.SeqNum < a.End.SeqNum {
			t.Fatalf("ack %d: %+v after %+v", i, a, prev)
		}
		prev = a
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := s.fr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last ack the response ends: %v", err)
	}
	b, _ := e.readJSON("sess-basin", "a", "seq_num=297")
	if len(b.Records) != 3 || string(b.Records[2].Body) != "99-2" {
		t.Fatalf("read back %+v", b.Records)
	}

	// A bad match_seq_num ends the session with 412; later inputs are not applied.
	s = e.openAppendSession("sess-basin", "a", api.CompressionGzip)
	ok := batch("ok", 2)
	ok.MatchSeqNum = api.Uint64(300)
	s.send(t, ok)
	bad := batch("bad", 1)
	bad.MatchSeqNum = api.Uint64(0)
	s.send(t, bad)
	big := batch(strings.Repeat("x", 2000), 5) // compressed by the client
	// The server may already have ended the session on the 412 and closed
	// the request body: then this write fails, which is fine.
	if b, err := api.EncodeAppendProto(big); err == nil {
		_ = s.fw.WriteMessage(b)
	}
	if a, terr := s.ack(t); terr != nil || a.Start.SeqNum != 300 {
		t.Fatalf("first ack %+v %v", a, terr)
	}
	_, terr := s.ack(t)
	if terr == nil || terr.Status != 412 {
		t.Fatalf("want terminal 412, got %v", terr)
	}
	if n, ok := terr.ExpectedSeqNum(); !ok || n != 302 {
		t.Fatalf("412 body %+v", terr)
	}
	if _, err := s.fr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the terminal frame the response ends: %v", err)
	}
	// A negative check: nothing signals that an input was not applied,
	// so give any straggler a deliberate 50 ms to land before the tail.
	time.Sleep(50 * time.Millisecond)
	if tail := e.tail("sess-basin", "a"); tail.SeqNum != 302 {
		t.Fatalf("tail %d: inputs after the failure were applied", tail.SeqNum)
	}

	// Malformed frames end the session with 400 bad_frame.
	s = e.openAppendSession("sess-basin", "a", api.CompressionNone)
	s.pw.Write([]byte{0, 0, 2, 0x0f, 0}) // reserved flag bits
	if _, terr := s.ack(t); terr == nil || terr.Status != 400 || terr.Code != api.CodeBadFrame {
		t.Fatalf("want bad_frame, got %v", terr)
	}
	s = e.openAppendSession("sess-basin", "a", api.CompressionNone)
	s.pw.Write(api.AppendFrame(nil, 0, []byte{0xff, 0xff, 0xff}))
	if _, terr := s.ack(t); terr == nil || terr.Status != 400 || terr.Code != api.CodeBadProto {
		t.Fatalf("want bad_proto, got %v", terr)
	}
	s = e.openAppendSession("sess-basin", "a", api.CompressionNone)
	s.pw.Write(api.AppendFrame(nil, 0x80, []byte{1, 144}))
	if _, terr := s.ack(t); terr == nil || terr.Code != api.CodeBadFrame {
		t.Fatalf("a client terminal frame: want bad_frame, got %v", terr)
	}
	s = e.openAppendSession("sess-basin", "a", api.CompressionNone)
	s.pw.Write([]byte{0, 0, 100, 0, 1, 2}) // cut off mid-frame
	s.pw.Close()
	if _, terr := s.ack(t); terr == nil || terr.Code != api.CodeBadFrame {
		t.Fatalf("a frame cut off: want bad_frame, got %v", terr)
	}
	if tail := e.tail("sess-basin", "a"); tail.SeqNum != 302 {
		t.Fatalf("tail %d after rejected sessions", tail.SeqNum)
	}
}

// Read sessions compress frames of 1 KiB or more with the negotiated codec.
func TestReadSessionCompression(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("zip-basin")
	want(t, e.appendJSON("zip-basin", "z", `{"records":[{"body":"`+strings.Repeat("abc", 2000)+`"}]}`), 200, "")
	for _, c := range []struct {
		accept string
		want   api.Compression
	}{{"gzip", api.CompressionGzip}, {"zstd, gzip", api.CompressionZstd}, {"", api.CompressionNone}} {
		s := e.openReadSession("zip-basin", "z", "seq_num=0&count=1", c.accept)
		b, terr, comp := s.next(t)
		if terr != nil || len(b.Records) != 1 || len(b.Records[0].Body) != 6000 || comp != c.want {
			t.Fatalf("accept %q: compression %v, terminal %v", c.accept, comp, terr)
		}
		s.wantEnd(t)
		s.close()
	}
}

// An S2S append session also works over HTTP/1.1 (full duplex, chunked).
func TestAppendSessionHTTP1(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("h1-basin")
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", e.base+"/v1/streams/h/records", pr)
	req.Header.Set("s2-basin", "h1-basin")
	req.Header.Set("Content-Type", "s2s/proto")
	go func() {
		fw := api.NewFrameWriter(pw, api.CompressionNone)
		for i := range 5 {
			b, _ := api.EncodeAppendProto(batch(fmt.Sprint(i), 2))
			fw.WriteMessage(b)
		}
		pw.Close()
	}()
	res, err := e.h1.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.ProtoMajor != 1 {
		t.Fatalf("%s proto %d", res.Status, res.ProtoMajor)
	}
	fr := api.NewFrameReader(res.Body)
	for i := range 5 {
		f, err := fr.Next()
		if err != nil || f.Terminal {
			t.Fatalf("ack %d: %+v %v", i, f, err)
		}
		a, _ := api.DecodeAppendAckProto(f.Payload)
		if a.Start.SeqNum != uint64(2*i) {
			t.Fatalf("ack %d at %d", i, a.Start.SeqNum)
		}
	}
	if _, err := fr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
}

// Deleting a stream ends the sessions still open on it.
func TestDeleteEndsSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("del-basin")
	want(t, e.appendJSON("del-basin", "d", textRecords("a", 1)), 200, "")
	rs := e.openReadSession("del-basin", "d", "", "")
	defer rs.close()
	if b, terr, _ := rs.next(t); terr != nil || b.Tail == nil {
		t.Fatalf("first heartbeat %+v %v", b, terr)
	}
	as := e.openAppendSession("del-basin", "d", api.CompressionNone)
	as.send(t, batch("x", 1))
	if _, terr := as.ack(t); terr != nil {
		t.Fatal(terr)
	}
	want(t, e.stream("del-basin", "DELETE", "streams/d", nil), 202, "")
	as.send(t, batch("y", 1))
	if _, terr := as.ack(t); terr == nil || terr.Code != api.CodeStreamDeletionPending {
		t.Fatalf("append session after delete: %v", terr)
	}
	for {
		b, terr, _ := rs.next(t)
		if terr != nil {
			if terr.Code != api.CodeStreamDeletionPending {
				t.Fatalf("read session after delete: %v", terr)
			}
			break
		}
		if len(b.Records) != 0 && b.Records[0].SeqNum != 1 {
			t.Fatalf("unexpected batch %+v", b)
		}
	}
}

// Drain (shutdown): read sessions end with 503 server_draining (S2's code,
// which the SDKs resume on at once and count as side-effect free); an
// append session acknowledges what it took, then ends with it; SSE gets
// an error event with it; the http.Server then shuts down promptly.
func TestDrainEndsSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("drain-basin")
	rs := e.openReadSession("drain-basin", "d", "", "")
	defer rs.close()
	if _, terr, _ := rs.next(t); terr != nil {
		t.Fatal(terr)
	}
	as := e.openAppendSession("drain-basin", "d", api.CompressionNone)
	for i := range 3 {
		as.send(t, batch(fmt.Sprint(i), 2))
	}
	if _, terr := as.ack(t); terr != nil {
		t.Fatal(terr)
	}
	req, _ := http.NewRequest("GET", e.base+"/v1/streams/d/records", nil)
	req.Header.Set("s2-basin", "drain-basin")
	req.Header.Set("Accept", "text/event-stream")
	res, err := e.h1.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sr := api.NewSSEReader(res.Body, 0)

	e.srv.Drain()
	for {
		b, terr, _ := rs.next(t)
		if terr != nil {
			if terr.Status != 503 || terr.Code != api.CodeServerDraining || !terr.Definite() {
				t.Fatalf("read session on drain: %v", terr)
			}
			break
		}
		_ = b
	}
	acked := 1
	for {
		a, terr := as.ack(t)
		if terr != nil {
			if terr.Status != 503 || terr.Code != api.CodeServerDraining {
				t.Fatalf("append session on drain: %v", terr)
			}
			break
		}
		if a.Start.SeqNum != uint64(2*acked) {
			t.Fatalf("ack at %d", a.Start.SeqNum)
		}
		acked++
	}
	// The drain may come before the session has read every input sent
	// (frames are read as they arrive): those it ends with server_draining
	// were not applied (side-effect free), every one it read is acked.
	if got := e.tailOf(t, "drain-basin", "d").SeqNum; got != uint64(2*acked) {
		t.Fatalf("%d of 3 inputs acknowledged before the drain ended the session, but the tail is %d: an input the session ended without an ack was applied", acked, got)
	}
	for {
		ev, err := sr.Next()
		if err != nil {
			t.Fatalf("sse on drain: %v", err)
		}
		re, _ := api.DecodeReadEvent(ev, api.FormatRaw)
		if re.Kind == api.ReadEventError {
			if re.Err.Code != api.CodeServerDraining {
				t.Fatalf("sse error event %+v", re.Err)
			}
			break
		}
	}
	// A new session on the draining star is refused the same way (the SDK
	// reconnects, to another star behind the load balancer).
	want(t, e.stream("drain-basin", "GET", "streams/d/records?seq_num=0", nil, "Accept", "text/event-stream"), 503, api.CodeServerDraining)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.hs.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
}

// A tailing session keeps up while the absorb moves the records it follows
// from the flight index into rows: every record arrives once, in order,
// with no error. (The reader's floor/forward race that node.Cursor retries
// shows up only rarely here; BenchmarkEndToEndLatency on the fs store
// hit it.)
func TestTailingWhileAbsorbing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("absorb-basin")
	want(t, e.stream("absorb-basin", "POST", "streams", []byte(`{"stream":"x","config":{"storage_class":"express"}}`)), 201, "")
	rs := e.openReadSession("absorb-basin", "x", "seq_num=0", "")
	defer rs.close()
	as := e.openAppendSession("absorb-basin", "x", api.CompressionNone)
	const batches, per = 1500, 4
	go func() {
		// A pause of a tick every 50 batches lets absorb passes run
		// between bursts.
		pace := time.NewTicker(time.Millisecond)
		defer pace.Stop()
		for i := range batches {
			b, _ := api.EncodeAppendProto(batch(fmt.Sprint(i), per))
			if as.fw.WriteMessage(b) != nil {
				return
			}
			if i%50 == 0 {
				<-pace.C
			}
		}
	}()
	acks := make(chan error, 1)
	go func() {
		for range batches {
			f, err := as.fr.Next()
			if err != nil || f.Terminal {
				acks <- fmt.Errorf("ack: %v %v", err, f.Err())
				return
			}
		}
		acks <- nil
	}()
	defer func() {
		if err := <-acks; err != nil {
			t.Error(err)
		}
	}()
	next := uint64(0)
	for next < batches*per {
		b, terr, _ := rs.next(t)
		if terr != nil {
			t.Fatalf("tailing session failed at seq %d: %v", next, terr)
		}
		for _, r := range b.Records {
			if r.SeqNum != next {
				t.Fatalf("got seq %d, want %d", r.SeqNum, next)
			}
			next++
		}
	}
}

// TestSSELastEventIDOverridesStart: S2's Last-Event-ID
// (`<seq_num>,<count>,<bytes>` of what was delivered) resumes after its
// seq num whatever start the query gives (an SSE client reconnects with
// the request it first sent), with the count and bytes limits reduced by
// what was delivered, and the ids carry on counting from it.
func TestSSELastEventIDOverridesStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("lei-basin")
	want(t, e.appendJSON("lei-basin", "s", textRecords("a", 6)), 200, "")
	read := func(query, lastEventID string) []api.ReadEvent {
		t.Helper()
		req, _ := http.NewRequest("GET", e.base+"/v1/streams/s/records?"+query, nil)
		req.Header.Set("s2-basin", "lei-basin")
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", lastEventID)
		res, err := e.h1.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%s with Last-Event-ID %s: %s", query, lastEventID, res.Status)
		}
		sr := api.NewSSEReader(res.Body, 0)
		var evs []api.ReadEvent
		for {
			ev, err := sr.Next()
			if errors.Is(err, io.EOF) {
				return evs
			}
			if err != nil {
				t.Fatal(err)
			}
			re, derr := api.DecodeReadEvent(ev, api.FormatRaw)
			if derr != nil {
				t.Fatal(derr)
			}
			evs = append(evs, re)
		}
	}
	seqs := func(evs []api.ReadEvent) (out []uint64, last api.LastEventID, done bool) {
		for _, ev := range evs {
			switch ev.Kind {
			case api.ReadEventBatch:
				for _, r := range ev.Batch.Records {
					out = append(out, r.SeqNum)
				}
				last = ev.ID
			case api.ReadEventDone:
				done = true
			}
		}
		return out, last, done
	}
	for _, c := range []struct {
		query, id string
		seqs      []uint64
		last      api.LastEventID
	}{
		// A tail offset would start at 5; the id resumes at 3, count 5-3.
		{"tail_offset=1&count=5", "2,3,33", []uint64{3, 4}, api.LastEventID{SeqNum: 4, Count: 5, Bytes: 55}},
		// A timestamp would start at 0; the id resumes at 2, bytes 55-22.
		{"timestamp=0&bytes=55", "1,2,22", []uint64{2, 3, 4}, api.LastEventID{SeqNum: 4, Count: 5, Bytes: 55}},
		// A seq num the same: the id wins.
		{"seq_num=0&count=6", "3,4,44", []uint64{4, 5}, api.LastEventID{SeqNum: 5, Count: 6, Bytes: 66}},
	} {
		got, last, done := seqs(read(c.query, c.id))
		if fmt.Sprint(got) != fmt.Sprint(c.seqs) || last != c.last || !done {
			t.Errorf("%s with Last-Event-ID %s: seqs %v, last id %v, [DONE] %v; want %v, %v, [DONE]", c.query, c.id, got, last, done, c.seqs, c.last)
		}
	}
}
