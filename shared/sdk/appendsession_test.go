package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk/sdktest"
)

// TestAppendSessionPipelined submits many batches without waiting and
// checks that the acks come back in order, contiguous, each covering its
// batch, and that the stream holds the records in submit order.
func TestAppendSessionPipelined(t *testing.T) {
	srv, _, s := setup(t, sdktest.Options{}, nil)
	ctx := testCtx(t)
	sess, err := s.AppendSession(ctx, AppendSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	futs := make([]*AppendFuture, n)
	for i := range n {
		recs := make([]api.Record, 1+i%3)
		for j := range recs {
			recs[j].Body = fmt.Appendf(nil, "%d.%d", i, j)
		}
		if futs[i], err = sess.Submit(ctx, &api.AppendInput{Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	var next uint64
	for i, f := range futs {
		ack, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if ack.Start.SeqNum != next || ack.End.SeqNum != next+uint64(1+i%3) {
			t.Fatalf("batch %d: ack %+v, want start %d", i, ack, next)
		}
		next = ack.End.SeqNum
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	recs := srv.Records(testBasin, "s")
	if uint64(len(recs)) != next {
		t.Fatalf("stream has %d records, acks cover %d", len(recs), next)
	}
	k := 0
	for i := range n {
		for j := range 1 + i%3 {
			if want := fmt.Sprintf("%d.%d", i, j); string(recs[k].Body) != want {
				t.Fatalf("record %d is %q, want %q", k, recs[k].Body, want)
			}
			k++
		}
	}
	if _, err := sess.Submit(ctx, &api.AppendInput{Records: textRecords("late")}); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("submit after close: %v", err)
	}
}

// gate is an append hook that holds every batch until released.
type gate struct {
	mu      sync.Mutex
	open    chan struct{}
	arrived chan struct{}
}

func newGate() *gate { return &gate{open: make(chan struct{}), arrived: make(chan struct{}, 1000)} }

func (g *gate) hook(ctx context.Context, _ sdktest.AppendCall) sdktest.Fault {
	g.arrived <- struct{}{}
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
	return sdktest.Fault{}
}

func (g *gate) release() { close(g.open) }

// TestAppendSessionBackpressure holds acks on the server and checks that
// Submit blocks once the unacked bytes would pass the bound, and resumes
// when acks free room.
func TestAppendSessionBackpressure(t *testing.T) {
	g := newGate()
	_, _, s := setup(t, sdktest.Options{AppendHook: g.hook}, nil)
	ctx := testCtx(t)
	rec := api.Record{Body: bytes.Repeat([]byte{'x'}, 992)} // 1000 metered bytes
	batch := func() *api.AppendInput { return &api.AppendInput{Records: []api.Record{rec}} }
	sess, err := s.AppendSession(ctx, AppendSessionOptions{MaxUnackedBytes: 2000})
	if err != nil {
		t.Fatal(err)
	}
	f1, err := sess.Submit(ctx, batch())
	if err != nil {
		t.Fatal(err)
	}
	f2, err := sess.Submit(ctx, batch())
	if err != nil {
		t.Fatal(err)
	}
	if got := sess.UnackedBytes(); got != 2000 {
		t.Fatalf("unacked %d, want 2000", got)
	}
	waitDone(t, g.arrived, 5*time.Second, "first batch at the server")

	// A third batch does not fit: Submit blocks, and gives up with its ctx.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = sess.Submit(short, batch())
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("submit over the bound: %v", err)
	}
	third := make(chan error, 1)
	go func() {
		_, err := sess.Submit(ctx, batch())
		third <- err
	}()
	select {
	case err := <-third:
		t.Fatalf("submit returned while over the bound: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.release()
	select {
	case err := <-third:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("submit still blocked after acks")
	}
	for _, f := range []*AppendFuture{f1, f2} {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sess.UnackedBytes(); got != 0 {
		t.Fatalf("unacked %d after close", got)
	}
}

// TestAppendSession412 fails a pipelined batch on match_seq_num: it fails
// with the 412 and the expected seq num, the batch after it fails
// definitely, the session is over and later submits fail.
func TestAppendSession412(t *testing.T) {
	g := newGate()
	srv, _, s := setup(t, sdktest.Options{AppendHook: g.hook}, nil)
	ctx := testCtx(t)
	sess, err := s.AppendSession(ctx, AppendSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ok, _ := sess.Submit(ctx, &api.AppendInput{Records: textRecords("a", "b"), MatchSeqNum: api.Uint64(0)})
	bad, _ := sess.Submit(ctx, &api.AppendInput{Records: textRecords("c"), MatchSeqNum: api.Uint64(5)})
	after, err := sess.Submit(ctx, &api.AppendInput{Records: textRecords("d")})
	if err != nil {
		t.Fatal(err)
	}
	g.release()
	if _, err := ok.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = bad.Wait(ctx)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusPreconditionFailed {
		t.Fatalf("bad batch: %v", err)
	}
	if n, ok := ae.ExpectedSeqNum(); !ok || n != 2 {
		t.Fatalf("expected seq num %d %v", n, ok)
	}
	_, err = after.Wait(ctx)
	var se *SessionError
	if !errors.As(err, &se) || !IsDefinite(err) || !errors.As(err, &ae) {
		t.Fatalf("batch after the 412: %v (definite %v)", err, IsDefinite(err))
	}
	_, err = sess.Submit(ctx, &api.AppendInput{Records: textRecords("e")})
	if !errors.As(err, &ae) || ae.Status != http.StatusPreconditionFailed || !IsDefinite(err) {
		t.Fatalf("submit after the session ended: %v", err)
	}
	if err := sess.Close(ctx); !errors.As(err, &ae) {
		t.Fatalf("close: %v", err)
	}
	if got := len(srv.Records(testBasin, "s")); got != 2 {
		t.Fatalf("stream has %d records, want 2", got)
	}
}

// TestAppendSessionCloseDrains closes right after submitting: Close
// returns only once every batch is acked.
func TestAppendSessionCloseDrains(t *testing.T) {
	g := newGate()
	srv, _, s := setup(t, sdktest.Options{AppendHook: g.hook}, nil)
	ctx := testCtx(t)
	sess, err := s.AppendSession(ctx, AppendSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var futs []*AppendFuture
	for i := range 20 {
		f, err := sess.Submit(ctx, &api.AppendInput{Records: textRecords(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	closed := make(chan error, 1)
	go func() { closed <- sess.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned before the acks: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for i, f := range futs {
		select {
		case <-f.Done():
		default:
			t.Fatalf("batch %d unresolved after Close", i)
		}
		if _, err := f.Result(); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if got := len(srv.Records(testBasin, "s")); got != 20 {
		t.Fatalf("stream has %d records", got)
	}
}

// TestAppendSessionRefused: a session on a missing stream fails its
// batches with the definite 404.
func TestAppendSessionRefused(t *testing.T) {
	_, c, _ := setup(t, sdktest.Options{}, nil)
	ctx := testCtx(t)
	sess, err := c.Basin(testBasin).Stream("missing").AppendSession(ctx, AppendSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := sess.Submit(ctx, &api.AppendInput{Records: textRecords("a")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Wait(ctx)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeStreamNotFound || !IsDefinite(err) {
		t.Fatalf("got %v", err)
	}
}

// badAckServer answers an append session with the acks ack(i) returns.
func badAckServer(t *testing.T, ack func(i int, in *api.AppendInput) api.AppendAck) string {
	srv := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", api.ContentTypeS2S)
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		fr := api.NewFrameReader(r.Body)
		fw := api.NewFrameWriter(w, api.CompressionNone)
		for i := 0; ; i++ {
			f, err := fr.Next()
			if err != nil {
				return
			}
			in, aerr := api.DecodeAppendProto(f.Payload)
			if aerr != nil {
				return
			}
			if fw.WriteMessage(api.EncodeAppendAckProto(ack(i, in))) != nil {
				return
			}
			_ = rc.Flush()
		}
	}))
	return srv.URL
}

func pos(n uint64) api.StreamPosition { return api.StreamPosition{SeqNum: n} }

// TestAppendSessionChecksAcks: an ack that does not cover its batch, or
// that goes backwards, ends the session with an indefinite protocol error.
func TestAppendSessionChecksAcks(t *testing.T) {
	for name, ack := range map[string]func(int, *api.AppendInput) api.AppendAck{
		"wrong size": func(i int, in *api.AppendInput) api.AppendAck {
			return api.AppendAck{Start: pos(0), End: pos(uint64(len(in.Records) + 1)), Tail: pos(9)}
		},
		"not increasing": func(i int, in *api.AppendInput) api.AppendAck {
			return api.AppendAck{Start: pos(0), End: pos(1), Tail: pos(1)}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, badAckServer(t, ack), nil)
			ctx := testCtx(t)
			sess, err := c.Basin(testBasin).Stream("s").AppendSession(ctx, AppendSessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f1, _ := sess.Submit(ctx, &api.AppendInput{Records: textRecords("a")})
			f2, _ := sess.Submit(ctx, &api.AppendInput{Records: textRecords("b")})
			_, err1 := f1.Wait(ctx)
			_, err2 := f2.Wait(ctx)
			var pe *ProtocolError
			if name == "wrong size" && (!errors.As(err1, &pe) || IsDefinite(err1)) {
				t.Fatalf("first batch: %v", err1)
			}
			if name == "not increasing" && err1 != nil {
				t.Fatalf("first batch: %v", err1)
			}
			if !errors.As(err2, &pe) || IsDefinite(err2) {
				t.Fatalf("second batch: %v", err2)
			}
		})
	}
}

// TestAppendSessionAckTimeout fails the session when an ack is late.
func TestAppendSessionAckTimeout(t *testing.T) {
	g := newGate()
	defer g.release()
	_, _, s := setup(t, sdktest.Options{AppendHook: g.hook}, nil)
	ctx := testCtx(t)
	sess, err := s.AppendSession(ctx, AppendSessionOptions{AckTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := sess.Submit(ctx, &api.AppendInput{Records: textRecords("a")})
	_, err = f.Wait(ctx)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestTimeout || IsDefinite(err) {
		t.Fatalf("got %v", err)
	}
}

// recordingTransport keeps a copy of every response body it carries.
type recordingTransport struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	body bytes.Buffer
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, writerFunc(func(p []byte) (int, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.body.Write(p)
	})), resp.Body}
	return resp, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// frameKinds counts the frames in b by compression.
func frameKinds(t *testing.T, b []byte) map[api.Compression]int {
	t.Helper()
	fr := api.NewFrameReader(bytes.NewReader(b))
	defer fr.Close()
	out := map[api.Compression]int{}
	for {
		f, err := fr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("frame: %v", err)
		}
		out[f.Compression]++
	}
}

// TestSessionsGzip runs both sessions with gzip: the client's frames of
// 1 KiB and more reach the server compressed (it decodes them), and the
// server's frames arrive compressed (checked on the wire) and decode.
func TestSessionsGzip(t *testing.T) {
	rt := &recordingTransport{rt: NewSessionTransport()}
	srv, _, s := setup(t, sdktest.Options{}, func(c *Config) {
		c.Compression = api.CompressionGzip
		c.SessionClient = &http.Client{Transport: rt}
	})
	ctx := testCtx(t)
	body := bytes.Repeat([]byte("compressible "), 400) // 5200 bytes
	sess, err := s.AppendSession(ctx, AppendSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var futs []*AppendFuture
	for range 5 {
		f, err := sess.Submit(ctx, &api.AppendInput{Records: []api.Record{{Body: body}, {Body: body}}})
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, r := range srv.Records(testBasin, "s") {
		if !bytes.Equal(r.Body, body) {
			t.Fatalf("record %d corrupted", i)
		}
	}
	rt.mu.Lock()
	rt.body.Reset()
	rt.mu.Unlock()

	rs, err := s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum, Count: api.Uint64(10)}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		b, err := rs.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range b.Records {
			if !bytes.Equal(r.Body, body) {
				t.Fatalf("read record %d corrupted", r.SeqNum)
			}
			n++
		}
	}
	if n != 10 {
		t.Fatalf("read %d records", n)
	}
	rt.mu.Lock()
	kinds := frameKinds(t, rt.body.Bytes())
	rt.mu.Unlock()
	if kinds[api.CompressionGzip] == 0 {
		t.Fatalf("no gzip frame from the server: %v", kinds)
	}
}

// TestClientFramesCompressed checks the client really compresses what it
// sends: a server that counts compressed frames.
func TestClientFramesCompressed(t *testing.T) {
	var mu sync.Mutex
	kinds := map[api.Compression]int{}
	srv := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", api.ContentTypeS2S)
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		fr := api.NewFrameReader(r.Body)
		fw := api.NewFrameWriter(w, api.CompressionNone)
		var next uint64
		for {
			f, err := fr.Next()
			if err != nil {
				return
			}
			mu.Lock()
			kinds[f.Compression]++
			mu.Unlock()
			in, aerr := api.DecodeAppendProto(f.Payload)
			if aerr != nil {
				return
			}
			end := next + uint64(len(in.Records))
			_ = fw.WriteMessage(api.EncodeAppendAckProto(api.AppendAck{Start: pos(next), End: pos(end), Tail: pos(end)}))
			_ = rc.Flush()
			next = end
		}
	}))
	c := newClient(t, srv.URL, func(c *Config) { c.Compression = api.CompressionGzip })
	ctx := testCtx(t)
	sess, err := c.Basin(testBasin).Stream("s").AppendSession(ctx, AppendSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	big, _ := sess.Submit(ctx, &api.AppendInput{Records: []api.Record{{Body: bytes.Repeat([]byte("z"), 4096)}}})
	small, _ := sess.Submit(ctx, &api.AppendInput{Records: textRecords("tiny")})
	for _, f := range []*AppendFuture{big, small} {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if kinds[api.CompressionGzip] != 1 || kinds[api.CompressionNone] != 1 {
		t.Fatalf("frames by compression: %v, want one gzip (big) and one plain (small)", kinds)
	}
}

// TestAppendSessionTerminalWhileSending: the server ends the session with
// a terminal frame while the client is still sending. The batch it
// concerns gets the server's error (not the broken pipe the writer sees),
// the batches before it are acked, and the later ones fail without being
// applied: the stream holds exactly the acked batches.
func TestAppendSessionTerminalWhileSending(t *testing.T) {
	for range 20 {
		var calls atomic.Int32
		srv, _, s := setup(t, sdktest.Options{AppendHook: func(context.Context, sdktest.AppendCall) sdktest.Fault {
			if calls.Add(1) == 5 {
				return sdktest.Fault{Err: api.Storage("disk on fire")}
			}
			return sdktest.Fault{}
		}}, nil)
		ctx := testCtx(t)
		sess, err := s.AppendSession(ctx, AppendSessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var futs []*AppendFuture
		for i := range 300 {
			f, err := sess.Submit(ctx, &api.AppendInput{Records: textRecords(fmt.Sprint(i))})
			if err != nil {
				break // the session already ended
			}
			futs = append(futs, f)
		}
		acked := 0
		for i, f := range futs {
			_, err := f.Wait(ctx)
			var ae *api.Error
			switch {
			case i < 4:
				if err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
				acked++
			case i == 4:
				if !errors.As(err, &ae) || ae.Code != api.CodeStorage {
					t.Fatalf("batch 4: %v", err)
				}
				var se *SessionError
				if errors.As(err, &se) {
					t.Fatalf("batch 4 got a session error, want the server's: %v", err)
				}
			default:
				var se *SessionError
				if !errors.As(err, &se) || !errors.As(err, &ae) || ae.Code != api.CodeStorage {
					t.Fatalf("batch %d: %v", i, err)
				}
			}
		}
		if got := len(srv.Records(testBasin, "s")); got != acked {
			t.Fatalf("stream holds %d records, %d acked", got, acked)
		}
	}
}
