package server_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// Resource exhaustion by a client (issue 13 items 7–9): each test is the
// attack at a small scale with its memory or time bound asserted.

func withServer(f func(*server.Options)) envOpt {
	return func(_ *node.Config, o *server.Options) { f(o) }
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Item 7: S2S frame headers announcing 2 MiB with a few bytes behind them,
// many sessions on one HTTP/2 connection (a raw client, so only the
// server's memory is measured). Each stalled session must cost what it
// sent, not what it announced (before: 2 MiB each), and must end with a
// terminal 408 once its frame is FrameTimeout late.
func TestStalledFramesHoldNoMemory(t *testing.T) {
	// Not parallel: it measures the process heap, which tests running
	// beside it would grow.
	const sessions = 60 // × 2 MiB announced = 120 MiB before the fix
	e := newEnv(t, withServer(func(o *server.Options) { o.FrameTimeout = 1500 * time.Millisecond }))
	e.setupBasin("stall-basin")
	want(t, e.appendJSON("stall-basin", "s", textRecords("a", 1)), 200, "")

	c, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	// The server's answers: per stream, the response bytes until it ends.
	var mu sync.Mutex
	bodies := map[uint32][]byte{}
	ended := make(chan uint32, 2*sessions)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					mu.Lock()
					fr.WriteSettingsAck()
					mu.Unlock()
				}
			case *http2.DataFrame:
				mu.Lock()
				bodies[f.StreamID] = append(bodies[f.StreamID], f.Data()...)
				mu.Unlock()
				if f.StreamEnded() {
					ended <- f.StreamID
				}
			case *http2.RSTStreamFrame:
				ended <- f.StreamID
			}
		}
	}()

	base := heapInUse()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	n := api.MaxFrameLen
	stall := append([]byte{byte(n >> 16), byte(n >> 8), byte(n), 0}, "a few bytes"...)
	start := time.Now()
	for i := range sessions {
		id := uint32(2*i + 1)
		hb.Reset()
		for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"},
			{":path", "/v1/streams/s/records"}, {"s2-basin", "stall-basin"}, {"content-type", "s2s/proto"}} {
			enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		mu.Lock()
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
		if err == nil {
			err = fr.WriteData(id, false, stall)
		}
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // every header has reached its reader
	held := int64(heapInUse()) - int64(base)
	t.Logf("%d stalled sessions hold %d KiB of heap (%d MiB announced)", sessions, held>>10, sessions*n>>20)
	if held > 24<<20 {
		t.Fatalf("%d stalled sessions hold %d MiB of heap: the reader allocates what frames announce", sessions, held>>20)
	}

	done := map[uint32]bool{}
	for len(done) < sessions {
		select {
		case id := <-ended:
			done[id] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d stalled sessions still open %v after they began (frame timeout 1.5 s)", sessions-len(done), time.Since(start))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range sessions {
		id := uint32(2*i + 1)
		f, err := api.NewFrameReader(bytes.NewReader(bodies[id])).Next()
		if err != nil || !f.Terminal || f.Err().Status != http.StatusRequestTimeout || f.Err().Code != api.CodeTimeout {
			t.Fatalf("session %d: want a terminal 408 timeout, got %v %+v", i, err, f)
		}
	}
}

// Item 7: the server advertises a bound on the streams (sessions) one
// HTTP/2 connection may open at once.
func TestMaxConcurrentStreamsAdvertised(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(e.base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		v, ok := sf.Value(http2.SettingMaxConcurrentStreams)
		if !ok || v > server.MaxConcurrentStreams {
			t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (set: %v), want ≤ %d", v, ok, server.MaxConcurrentStreams)
		}
		return
	}
}

// Item 7: connections past MaxConns wait until one closes (clients' ones:
// idle connections that never authenticated are closed to make room, see
// TestConnectionAdmission).
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withServer(func(o *server.Options) { o.MaxConns = 3 }))
	addr := strings.TrimPrefix(e.base, "http://")
	health := func(c net.Conn, wait time.Duration) error {
		c.SetDeadline(time.Now().Add(wait))
		if _, err := io.WriteString(c, "GET /v1/basins HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		res.Body.Close()
		return nil
	}
	var conns []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for i := range 3 {
		if err := health(conns[i], 5*time.Second); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	var ne net.Error
	if err := health(conns[3], 500*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a 4th connection past MaxConns 3 was served: %v", err)
	}
	conns[0].Close()
	// The request already sent is served once a slot frees.
	conns[3].SetDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conns[3]), nil)
	if err != nil {
		t.Fatalf("the waiting connection was not served after one closed: %v", err)
	}
	res.Body.Close()
}

// Item 8: a body dripped byte by byte is cut off at BodyReadTimeout with
// 408 and nothing applied; the server's wait is bounded, not the client's.
func TestDrippedBodyTimesOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withServer(func(o *server.Options) { o.BodyReadTimeout = 500 * time.Millisecond }))
	e.setupBasin("drip-basin")
	want(t, e.appendJSON("drip-basin", "s", textRecords("a", 1)), 200, "")
	body := textRecords("drip", 3)
	c, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/streams/s/records HTTP/1.1\r\nHost: x\r\ns2-basin: drip-basin\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	start := time.Now()
	got := make(chan *http.Response, 1)
	go func() {
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			got <- nil
			return
		}
		got <- res
	}()
	var res *http.Response
drip:
	for i := 0; i < len(body); i++ {
		select {
		case res = <-got:
			break drip
		case <-time.After(100 * time.Millisecond): // 10 bytes/s: 5 s for the body
		}
		if _, err := c.Write([]byte{body[i]}); err != nil {
			break
		}
	}
	if res == nil {
		select {
		case res = <-got:
		case <-time.After(5 * time.Second):
		}
	}
	took := time.Since(start)
	if res == nil {
		t.Fatalf("no answer to a dripped body after %v", took)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	want(t, resp{status: res.StatusCode, header: res.Header, body: b}, http.StatusRequestTimeout, api.CodeTimeout)
	if took > 3*time.Second {
		t.Fatalf("a dripped body was answered after %v (body read timeout 500 ms)", took)
	}
	if tail := e.tail("drip-basin", "s"); tail.SeqNum != 1 {
		t.Fatalf("a timed-out append was applied: tail %d", tail.SeqNum)
	}
}

// Item 8: the bounds of unary requests leave long-lived requests alone:
// a long poll past RequestTimeout (its wait comes on top), an SSE
// session and an idle append session past every timeout, and a
// keep-alive connection reused after the deadline of its first request.
func TestTimeoutsSpareSessions(t *testing.T) {
	t.Parallel()
	const limit = 400 * time.Millisecond
	e := newEnv(t, withServer(func(o *server.Options) {
		o.RequestTimeout, o.BodyReadTimeout, o.FrameTimeout, o.SessionWriteTimeout = limit, limit, limit, limit
	}))
	e.setupBasin("live-basin")
	want(t, e.appendJSON("live-basin", "s", textRecords("a", 1)), 200, "")

	start := time.Now()
	b, r := e.readJSON("live-basin", "s", "seq_num=1&wait=1")
	if b == nil || len(b.Records) != 0 {
		t.Fatalf("long poll: %v", r)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("long poll answered after %v, before its wait", took)
	}
	time.Sleep(2 * limit) // the keep-alive connection outlives its last deadline
	want(t, e.appendJSON("live-basin", "s", textRecords("b", 1)), 200, "")

	// SSE: events keep coming past RequestTimeout.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/v1/streams/s/records?seq_num=0", nil)
	req.Header.Set("s2-basin", "live-basin")
	req.Header.Set("Accept", "text/event-stream")
	res, err := e.h1.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sr := api.NewSSEReader(res.Body, 0)
	for start := time.Now(); time.Since(start) < 4*limit; {
		if _, err := sr.Next(); err != nil {
			t.Fatalf("SSE session ended after %v: %v", time.Since(start), err)
		}
	}

	// An idle append session outlives FrameTimeout and SessionWriteTimeout.
	s := e.openAppendSession("live-basin", "s", api.CompressionNone)
	s.send(t, batch("c", 1))
	if _, aerr := s.ack(t); aerr != nil {
		t.Fatal(aerr)
	}
	time.Sleep(3 * limit)
	s.send(t, batch("d", 1))
	if _, aerr := s.ack(t); aerr != nil {
		t.Fatalf("idle append session: %v", aerr)
	}
}

// Item 9: invented methods share one "other" label, and a huge request
// line is refused before any handler sees it (before: 500 methods made
// 500 series, 100 methods of 500 KB added 82 MB).
func TestMethodLabelBounded(t *testing.T) {
	// Not parallel: it measures the process heap, which tests running
	// beside it would grow.
	e := newEnv(t)
	addr := strings.TrimPrefix(e.base, "http://")
	send := func(method string) int {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		go fmt.Fprintf(c, "%s /v1/basins HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", method)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Errorf("method of %d bytes: %v", len(method), err)
			return 0
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	for i := range 200 {
		send(fmt.Sprintf("INVENTED%d", i))
	}
	base := heapInUse()
	// In parallel: the server lingers 500 ms before it closes a refused
	// connection.
	var wg sync.WaitGroup
	statuses := make([]int, 40)
	for i := range statuses {
		wg.Go(func() { statuses[i] = send(fmt.Sprintf("BIG%d%s", i, strings.Repeat("X", 400<<10))) })
	}
	wg.Wait()
	for _, st := range statuses {
		if st > 0 && st < 400 {
			t.Fatalf("a 400 KB method answered %d", st)
		}
	}
	grew := int64(heapInUse()) - int64(base)
	t.Logf("40 methods of 400 KB: heap grew %d KiB", grew>>10)
	if grew > 4<<20 {
		t.Fatalf("40 methods of 400 KB grew the heap by %d MiB", grew>>20)
	}
	mfs, err := e.n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "starlog_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" {
					methods[l.GetValue()] = true
				}
			}
		}
	}
	if len(methods) > 10 || !methods["other"] {
		t.Fatalf("method label values: %d (want the standard methods and other)", len(methods))
	}
}

// metric sums a metric's values (counters and gauges, label sets
// matching the given pairs) in the node's registry.
func (e *env) metric(name string, labels ...string) float64 {
	e.t.Helper()
	mfs, err := e.n.Registry().Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				if !found {
					continue next
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// metaWrites is the metastore writes the star made so far.
func (e *env) metaWrites() float64 {
	w := 0.0
	for _, op := range []string{"put", "batch_put", "delete", "batch_delete"} {
		w += e.metric("starlog_meta_requests_total", "op", op)
	}
	return w
}

// Item 10: the 20,000-names attack at a small scale. Rejected requests
// to new names (412, 422, 416, an append session with no input, reads
// where the basin does not create on read) leave no stream, no lease and
// no row behind; before, each created its stream and the star led it
// until shutdown.
func TestRejectedRequestsCreateNothing(t *testing.T) {
	t.Parallel()
	const names = 100
	e := newEnv(t)
	e.setupBasin("auto-basin") // creates on append and on read
	r := e.call("POST", "basins", jsonBody(map[string]any{"basin": "plain-basin"}), "Content-Type", "application/json")
	want(t, r, 201, "")
	tooMany := textRecords("x", 1001)
	writes := e.metaWrites()
	start := time.Now()
	for i := range names {
		// A name per request, so that each would create its own stream.
		s := func(kind string) string { return fmt.Sprintf("n%d-%s", i, kind) }
		want(t, e.appendJSON("auto-basin", s("match"), `{"records":[{"body":"x"}],"match_seq_num":5}`), 412, "")
		want(t, e.appendJSON("auto-basin", s("fence"), `{"records":[{"body":"x"}],"fencing_token":"t"}`), 412, "")
		want(t, e.appendJSON("auto-basin", s("big"), tooMany), 422, api.CodeInvalid)
		want(t, e.appendJSON("auto-basin", s("stamp"), `{"records":[{"body":"x"}]}`, "S2-Stream-Config", `{"timestamping":{"mode":"client-require"}}`), 422, api.CodeInvalid)
		if _, r := e.readJSON("auto-basin", s("read"), "seq_num=5"); r.status != 416 {
			t.Fatalf("read past the tail of a new stream: %s", r)
		}
		want(t, e.stream("plain-basin", "GET", "streams/"+s("tail")+"/records/tail", nil), 404, api.CodeStreamNotFound)
		if _, r := e.readJSON("plain-basin", s("read"), "seq_num=0"); r.status != 404 {
			t.Fatalf("read of a missing stream in a basin that does not create on read: %s", r)
		}
		if i%10 == 0 { // an append session that never appends
			sess := e.openAppendSession("auto-basin", s("session"), api.CompressionNone)
			sess.pw.Close()
			if f, err := sess.fr.Next(); !errors.Is(err, io.EOF) {
				t.Fatalf("empty append session: %v %+v", err, f)
			}
		}
	}
	took := time.Since(start)
	wrote := e.metaWrites() - writes
	led := e.metric("starlog_leader_streams_led")
	r = e.stream("auto-basin", "GET", "streams", nil)
	want(t, r, 200, "")
	t.Logf("%d names × 7 rejected requests in %v: %v metastore writes, %v streams led, list %s", names, took, wrote, led, truncate(r.body))
	if led != 0 {
		t.Fatalf("rejected requests left %v streams led", led)
	}
	if !strings.Contains(string(r.body), `"streams":[]`) {
		t.Fatalf("rejected requests created streams: %s", truncate(r.body))
	}
	if wrote > 5 { // a heartbeat or two
		t.Fatalf("rejected requests wrote %v metastore rows", wrote)
	}

	// An accepted append still creates its stream, and so does a
	// session's first accepted input.
	want(t, e.appendJSON("auto-basin", "made", `{"records":[{"body":"x"}],"match_seq_num":0}`), 200, "")
	sess := e.openAppendSession("auto-basin", "made-by-session", api.CompressionNone)
	sess.send(t, batch("s", 2))
	if ack, aerr := sess.ack(t); aerr != nil || ack.End.SeqNum != 2 {
		t.Fatalf("first input of a session on a new stream: %+v %v", ack, aerr)
	}
	if tail := e.tail("auto-basin", "made-by-session"); tail.SeqNum != 2 {
		t.Fatalf("stream created by a session: tail %d", tail.SeqNum)
	}
	if led := e.metric("starlog_leader_streams_led"); led != 2 {
		t.Fatalf("%v streams led after two accepted appends to new names", led)
	}
}

// Item 7 over HTTP/1.1 (a full-duplex append session): one input is
// acknowledged, then a frame that stalls after its header ends the
// session with 408 once FrameTimeout passes.
func TestStalledFrameHTTP1(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withServer(func(o *server.Options) { o.FrameTimeout = 500 * time.Millisecond }))
	e.setupBasin("h1-stall-basin")
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", e.base+"/v1/streams/h/records", pr)
	req.Header.Set("s2-basin", "h1-stall-basin")
	req.Header.Set("Content-Type", "s2s/proto")
	go func() {
		b, _ := api.EncodeAppendProto(batch("ok", 1))
		api.NewFrameWriter(pw, api.CompressionNone).WriteMessage(b)
		time.Sleep(time.Second) // idle between frames: no timeout
		pw.Write([]byte{0, 1, 0, 0, 'x'})
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
	if f, err := fr.Next(); err != nil || f.Terminal {
		t.Fatalf("ack: %+v %v", f, err)
	}
	start := time.Now()
	f, err := fr.Next()
	if err != nil || !f.Terminal || f.Err().Status != http.StatusRequestTimeout {
		t.Fatalf("want a terminal 408, got %+v %v", f, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("stalled frame ended the session after %v (frame timeout 500 ms)", took)
	}
}

// Long polls that carry big bodies nobody reads (GET routes read none)
// must not pin those bodies for their wait: HTTP/2 lets a client send a
// stream's whole window (16 MiB) before the handler reads.
func TestUnreadBodiesAreDropped(t *testing.T) {
	// Not parallel: it measures the process heap, which tests running
	// beside it would grow.
	const polls = 3
	e := newEnv(t)
	e.setupBasin("poll-basin")
	want(t, e.appendJSON("poll-basin", "s", textRecords("a", 1)), 200, "")
	body := make([]byte, 15<<20)
	base := heapInUse()
	var wg sync.WaitGroup
	for range polls {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", e.base+"/v1/streams/s/records?seq_num=1&wait=3", bytes.NewReader(body))
			req.Header.Set("s2-basin", "poll-basin")
			res, err := e.h2.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Errorf("long poll with a body: %s", res.Status)
			}
		})
	}
	time.Sleep(1500 * time.Millisecond) // the bodies are sent, the polls wait
	held := int64(heapInUse()) - int64(base)
	t.Logf("%d long polls with %d MiB bodies hold %d KiB of heap", polls, len(body)>>20, held>>10)
	wg.Wait()
	if held > 12<<20 {
		t.Fatalf("%d long polls hold %d MiB of the bodies they sent", polls, held>>20)
	}
}
