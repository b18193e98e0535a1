package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// Revocation and expiry end open sessions (issue 27, defect 1): every
// long-lived request re-checks its token at least every TokenCacheTTL and
// ends with S2's error for a revoked or expired token, and none outlives
// its token's expires_at. Each session kind is opened with a scoped
// token on star a, the token revoked through star b (which shares the
// metastore, so a learns it only by reading it again), and the session
// must end within TokenCacheTTL plus a margin; then the same with a token
// that expires 1.5 s after the session opens, which must end at its
// expires_at.

const (
	rvBasin = "rv-basin"
	// rvRevokeMargin is what a session may take past TokenCacheTTL to end
	// after a revocation on another star: one metastore read and the
	// error's way back (TestRevocationAcrossStars allows new requests the
	// same).
	rvRevokeMargin = time.Second
	// rvExpiryMargin is how late after expires_at a session may end.
	rvExpiryMargin = 500 * time.Millisecond
	// rvExpiresIn is how far ahead the expiring tokens expire.
	rvExpiresIn = 1500 * time.Millisecond
)

// sessionEnd is how a session ended, as its client saw it.
type sessionEnd struct {
	at     time.Time
	status int    // the error's status (0: the response just ended)
	code   string // the error's code ("" when it just ended)
	err    error  // a client-side failure, not an end the server chose
	acked  uint64 // append sessions: records acknowledged before the end
}

// openFunc opens one session with tok and returns once it is established;
// the channel gets its end.
type openFunc func(t *testing.T, tok string) <-chan sessionEnd

// rvStars is two authenticated stars sharing a metastore and buckets;
// the balancer is off, so a stream stays with the star that took it.
func rvStars(t *testing.T, opts server.Options) (a, b *env) {
	t.Helper()
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	return rvStar(t, "a", ms, objs, opts), rvStar(t, "b", ms, objs, opts)
}

func rvStar(t *testing.T, id string, ms meta.Store, objs objstore.Store, opts server.Options) *env {
	t.Helper()
	opts.Auth = auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}
	// DeadAfter well above the tests' few seconds: a star slow to renew its
	// registration on a loaded machine (or through the outage test's
	// metastore outage) must not end sessions for that.
	return starServing(t, id, ms, objs, func(c *node.Config) { c.BalanceEvery, c.DeadAfter = 0, 10*time.Second }, opts)
}

// rvToken issues a token for basin with ops, expiring at exp (nil: never).
func rvToken(e *env, id, basin string, exp *time.Time, ops ...string) string {
	body := map[string]any{"id": id, "scope": map[string]any{
		"basins": map[string]string{"exact": basin}, "streams": map[string]string{"prefix": ""}, "ops": ops}}
	if exp != nil {
		body["expires_at"] = exp.UTC().Format(time.RFC3339Nano)
	}
	return e.issue(body)
}

// checkSessionEnds runs the two cases for one session kind: revoked
// through b, and expired. ops are the token's operations; after, when
// set, checks what the session left (nothing applied after its end).
func checkSessionEnds(t *testing.T, a, b *env, basin string, ops []string, open openFunc, after func(t *testing.T, end sessionEnd)) {
	t.Helper()
	t.Run("revoked", func(t *testing.T) {
		id := "rv-" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-")
		tok := rvToken(a, id, basin, nil, ops...)
		ends := open(t, tok)
		time.Sleep(200 * time.Millisecond) // the session runs a while
		revokedAt := time.Now()
		want(t, b.call("DELETE", "access-tokens/"+id, nil, bearer(testAdmin)...), 204, "")
		bound := server.TokenCacheTTL + rvRevokeMargin
		var end sessionEnd
		select {
		case end = <-ends:
		case <-time.After(bound + 2*time.Second):
			t.Fatalf("the session is still open %v after its token was revoked (bound %v)", time.Since(revokedAt).Round(time.Millisecond), bound)
		}
		took := end.at.Sub(revokedAt)
		t.Logf("ended %v after the revocation: %d %s %v", took.Round(time.Millisecond), end.status, end.code, end.err)
		checkEnd(t, end)
		if took > bound {
			t.Fatalf("the session ended %v after the revocation, more than TokenCacheTTL %v + %v", took, server.TokenCacheTTL, rvRevokeMargin)
		}
		if after != nil {
			after(t, end)
		}
	})
	t.Run("expired", func(t *testing.T) {
		id := "rv-" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-")
		exp := time.Now().Add(rvExpiresIn)
		tok := rvToken(a, id, basin, &exp, ops...)
		ends := open(t, tok)
		var end sessionEnd
		select {
		case end = <-ends:
		case <-time.After(time.Until(exp) + 2*time.Second):
			t.Fatalf("the session is still open %v after its token expired", time.Since(exp).Round(time.Millisecond))
		}
		late := end.at.Sub(exp)
		t.Logf("ended %v after expires_at: %d %s %v", late.Round(time.Millisecond), end.status, end.code, end.err)
		checkEnd(t, end)
		if late < -50*time.Millisecond || late > rvExpiryMargin {
			t.Fatalf("the session ended %v from its token's expires_at, want within [-50ms, %v]", late, rvExpiryMargin)
		}
		if after != nil {
			after(t, end)
		}
	})
}

// checkEnd wants S2's error for a revoked or expired token (401 authn),
// unless the kind only ends its response (status 0).
func checkEnd(t *testing.T, end sessionEnd) {
	t.Helper()
	if end.err != nil {
		t.Fatalf("the session failed on the client: %v", end.err)
	}
	if end.status != 0 && (end.status != http.StatusUnauthorized || end.code != auth.CodeAuthn) {
		t.Fatalf("the session ended with %d %q, want 401 %s", end.status, end.code, auth.CodeAuthn)
	}
}

// rvAppendAdmin appends to basin/stream on e as the admin every 20 ms
// until the test ends, so read sessions have something to deliver.
func rvAppendAdmin(t *testing.T, e *env, basin, stream string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		pace := time.NewTicker(20 * time.Millisecond)
		defer pace.Stop()
		for ; ctx.Err() == nil; <-pace.C {
			req, _ := http.NewRequestWithContext(ctx, "POST", e.base+"/v1/streams/"+stream+"/records", strings.NewReader(`{"records":[{"body":"x"}]}`))
			req.Header.Set("s2-basin", basin)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+testAdmin)
			if res, err := e.h1.Do(req); err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}
	}()
}

func rvSetup(t *testing.T, a *env, stream string) {
	t.Helper()
	want(t, a.call("POST", "basins", jsonBody(map[string]any{"basin": rvBasin, "config": map[string]any{"create_stream_on_append": true}}), bearer(testAdmin)...), 201, "")
	want(t, a.appendJSON(rvBasin, stream, textRecords("first", 1), bearer(testAdmin)...), 200, "") // a leads it
}

// An S2S append session opened through b (forwarded to a, which leads
// the stream, and watches the token: it runs the session) ends with a
// terminal 401 frame after the acks of what it took; nothing the client
// sends after is applied.
func TestRevocationEndsAppendSession(t *testing.T) {
	t.Parallel()
	a, b := rvStars(t, server.Options{})
	rvSetup(t, a, "app")
	open := func(t *testing.T, tok string) <-chan sessionEnd {
		start := a.tailOf(t, rvBasin, "app").SeqNum
		pr, pw := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", b.base+"/v1/streams/app/records", pr)
		req.Header.Set("s2-basin", rvBasin)
		req.Header.Set("Content-Type", "s2s/proto")
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := b.h2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); pw.Close(); res.Body.Close() })
		if res.StatusCode != 200 {
			body, _ := io.ReadAll(res.Body)
			t.Fatalf("append session: %s %s", res.Status, body)
		}
		fw := api.NewFrameWriter(pw, api.CompressionNone)
		fr := api.NewFrameReader(res.Body)
		step := func() (uint64, *api.Error, error) {
			in, _ := api.EncodeAppendProto(batch("s", 2))
			if err := fw.WriteMessage(in); err != nil {
				return 0, nil, err
			}
			f, err := fr.Next()
			if err != nil {
				return 0, nil, err
			}
			if f.Terminal {
				return 0, f.Err(), nil
			}
			ack, perr := api.DecodeAppendAckProto(f.Payload)
			if perr != nil {
				return 0, nil, perr
			}
			return ack.End.SeqNum - ack.Start.SeqNum, nil, nil
		}
		if n, terr, err := step(); err != nil || terr != nil || n != 2 {
			t.Fatalf("first append: %d %v %v", n, terr, err)
		}
		ends := make(chan sessionEnd, 1)
		go func() {
			acked := start + 2
			pace := time.NewTicker(5 * time.Millisecond) // a batch every 5 ms until the end
			defer pace.Stop()
			for ; ; <-pace.C {
				n, terr, err := step()
				switch {
				case err != nil:
					ends <- sessionEnd{at: time.Now(), err: err, acked: acked}
					return
				case terr != nil:
					ends <- sessionEnd{at: time.Now(), status: terr.Status, code: terr.Code, acked: acked}
					return
				}
				acked += n
			}
		}()
		return ends
	}
	after := func(t *testing.T, end sessionEnd) {
		if end.status == 0 {
			t.Fatal("the append session ended without a terminal frame")
		}
		time.Sleep(200 * time.Millisecond) // anything still in flight lands
		if got := a.tailOf(t, rvBasin, "app").SeqNum; got != end.acked {
			t.Fatalf("the stream's tail is %d, but the session acknowledged up to %d before its end: an input was applied after the end", got, end.acked)
		}
	}
	checkSessionEnds(t, a, b, rvBasin, []string{"append"}, open, after)
}

// An S2S read session ends with a terminal 401 frame, then EOF.
func TestRevocationEndsReadSession(t *testing.T) {
	t.Parallel()
	a, b := rvStars(t, server.Options{})
	rvSetup(t, a, "rd")
	rvAppendAdmin(t, a, rvBasin, "rd")
	open := func(t *testing.T, tok string) <-chan sessionEnd {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", a.base+"/v1/streams/rd/records?tail_offset=0", nil)
		req.Header.Set("s2-basin", rvBasin)
		req.Header.Set("Content-Type", "s2s/proto")
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := a.h2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); res.Body.Close() })
		if res.StatusCode != 200 {
			body, _ := io.ReadAll(res.Body)
			t.Fatalf("read session: %s %s", res.Status, body)
		}
		fr := api.NewFrameReader(res.Body)
		if f, err := fr.Next(); err != nil || f.Terminal {
			t.Fatalf("first frame: %+v %v", f, err)
		}
		ends := make(chan sessionEnd, 1)
		go func() {
			for {
				f, err := fr.Next()
				if err != nil {
					ends <- sessionEnd{at: time.Now(), err: err}
					return
				}
				if f.Terminal {
					e := f.Err()
					end := sessionEnd{at: time.Now(), status: e.Status, code: e.Code}
					if _, err := fr.Next(); !errors.Is(err, io.EOF) {
						end.err = fmt.Errorf("after the terminal frame: %v", err)
					}
					ends <- end
					return
				}
			}
		}()
		return ends
	}
	after := func(t *testing.T, end sessionEnd) {
		if end.status == 0 {
			t.Fatal("the read session ended without a terminal frame")
		}
	}
	checkSessionEnds(t, a, b, rvBasin, []string{"read"}, open, after)
}

// An SSE read session ends with S2's error event (authn).
func TestRevocationEndsSSESession(t *testing.T) {
	t.Parallel()
	a, b := rvStars(t, server.Options{})
	rvSetup(t, a, "sse")
	rvAppendAdmin(t, a, rvBasin, "sse")
	open := func(t *testing.T, tok string) <-chan sessionEnd {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", a.base+"/v1/streams/sse/records?tail_offset=0", nil)
		req.Header.Set("s2-basin", rvBasin)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := a.h1.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); res.Body.Close() })
		if res.StatusCode != 200 {
			body, _ := io.ReadAll(res.Body)
			t.Fatalf("sse session: %s %s", res.Status, body)
		}
		sr := api.NewSSEReader(res.Body, 0)
		if _, err := sr.Next(); err != nil {
			t.Fatalf("first event: %v", err)
		}
		ends := make(chan sessionEnd, 1)
		go func() {
			for {
				ev, err := sr.Next()
				if err != nil {
					ends <- sessionEnd{at: time.Now(), err: err}
					return
				}
				re, derr := api.DecodeReadEvent(ev, api.FormatRaw)
				if derr != nil {
					ends <- sessionEnd{at: time.Now(), err: derr}
					return
				}
				if re.Kind == api.ReadEventError {
					// The event carries no status; authn is S2's 401.
					end := sessionEnd{at: time.Now(), status: http.StatusUnauthorized, code: re.Err.Code}
					if re.Err.Code != auth.CodeAuthn {
						end.err = fmt.Errorf("error event %v", re.Err)
					}
					if _, err := sr.Next(); !errors.Is(err, io.EOF) {
						end.err = fmt.Errorf("after the error event: %v", err)
					}
					ends <- end
					return
				}
			}
		}()
		return ends
	}
	checkSessionEnds(t, a, b, rvBasin, []string{"read"}, open, nil)
}

// A long-poll read (wait) is answered 401 authn.
func TestRevocationEndsLongPoll(t *testing.T) {
	t.Parallel()
	a, b := rvStars(t, server.Options{})
	rvSetup(t, a, "lp")
	open := func(t *testing.T, tok string) <-chan sessionEnd {
		tail := a.tailOf(t, rvBasin, "lp").SeqNum
		ends := make(chan sessionEnd, 1)
		started := make(chan struct{})
		go func() {
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/streams/lp/records?seq_num=%d&wait=8", a.base, tail), nil)
			req.Header.Set("s2-basin", rvBasin)
			req.Header.Set("Authorization", "Bearer "+tok)
			close(started)
			res, err := a.h1.Do(req)
			if err != nil {
				ends <- sessionEnd{at: time.Now(), err: err}
				return
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			end := sessionEnd{at: time.Now(), status: res.StatusCode}
			if res.StatusCode != 200 {
				var info api.ErrorInfo
				if err := json.Unmarshal(body, &info); err == nil {
					end.code = info.Code
				}
			} else {
				end.code = "200 " + string(body) // not an end the token caused
			}
			ends <- end
		}()
		<-started
		waitSessions(t, a, "long_poll", 1) // the request is waiting
		return ends
	}
	after := func(t *testing.T, end sessionEnd) {
		if end.status == 0 {
			t.Fatal("the long poll was not answered")
		}
	}
	checkSessionEnds(t, a, b, rvBasin, []string{"read"}, open, after)
}

// Durable Streams live reads: SSE (the protocol has data and control
// events only, so the response ends; the client's reconnect is 401) and
// long-poll (answered 401).
func TestRevocationEndsDurableLiveReads(t *testing.T) {
	t.Parallel()
	a, b := rvStars(t, server.Options{Durable: &durable.Config{LongPoll: 8 * time.Second}})
	want(t, a.ds("PUT", "room", "hello", "Content-Type", "text/plain", "Authorization", "Bearer "+testAdmin), 201, "")
	rvAppendDurable := func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		t.Cleanup(func() { cancel(); <-done })
		go func() {
			defer close(done)
			pace := time.NewTicker(20 * time.Millisecond)
			defer pace.Stop()
			for ; ctx.Err() == nil; <-pace.C {
				req, _ := http.NewRequestWithContext(ctx, "POST", a.base+"/ds/room", strings.NewReader("x"))
				req.Header.Set("Content-Type", "text/plain")
				req.Header.Set("Authorization", "Bearer "+testAdmin)
				if res, err := a.h1.Do(req); err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			}
		}()
	}
	t.Run("sse", func(t *testing.T) {
		rvAppendDurable(t)
		open := func(t *testing.T, tok string) <-chan sessionEnd {
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", a.base+"/ds/room?offset=-1&live=sse", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			res, err := a.h1.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cancel(); res.Body.Close() })
			if res.StatusCode != 200 {
				body, _ := io.ReadAll(res.Body)
				t.Fatalf("durable sse: %s %s", res.Status, body)
			}
			br := bufio.NewReader(res.Body)
			if _, err := br.ReadString('\n'); err != nil {
				t.Fatalf("first event: %v", err)
			}
			ends := make(chan sessionEnd, 1)
			go func() {
				for {
					if _, err := br.ReadString('\n'); err != nil {
						end := sessionEnd{at: time.Now()}
						if !errors.Is(err, io.EOF) {
							end.err = err
						}
						// The reconnect is refused for the token.
						r, rerr := http.NewRequest("GET", a.base+"/ds/room?offset=-1&live=sse", nil)
						if rerr == nil {
							r.Header.Set("Authorization", "Bearer "+tok)
							if res2, err := a.h1.Do(r); err == nil {
								res2.Body.Close()
								if res2.StatusCode != http.StatusUnauthorized && end.err == nil {
									end.err = fmt.Errorf("the reconnect after the end: %s", res2.Status)
								}
							}
						}
						ends <- end
						return
					}
				}
			}()
			return ends
		}
		checkSessionEnds(t, a, b, dsBasin, []string{"read"}, open, nil)
	})
	t.Run("long-poll", func(t *testing.T) {
		open := func(t *testing.T, tok string) <-chan sessionEnd {
			r := a.ds("GET", "room?offset=now", "", "Authorization", "Bearer "+testAdmin)
			want(t, r, 200, "")
			next := r.header.Get("Stream-Next-Offset")
			ends := make(chan sessionEnd, 1)
			go func() {
				req, _ := http.NewRequest("GET", a.base+"/ds/room?live=long-poll&offset="+next, nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				res, err := a.h1.Do(req)
				if err != nil {
					ends <- sessionEnd{at: time.Now(), err: err}
					return
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				end := sessionEnd{at: time.Now(), status: res.StatusCode}
				if res.StatusCode == http.StatusUnauthorized {
					end.code = auth.CodeAuthn // the face answers text, as for a new request
				} else {
					end.code = strings.TrimSpace(string(body))
				}
				ends <- end
			}()
			waitSessions(t, a, "ds_live", 1) // the request is waiting, its credential watched
			return ends
		}
		checkSessionEnds(t, a, b, dsBasin, []string{"read"}, open, nil)
	})
}

// Through a metastore outage a session of a token verified lately goes
// on (TokenStaleIfError, as for new requests), checks and all; it still
// ends at its token's expires_at.
func TestSessionThroughMetastoreOutageEndsAtExpiry(t *testing.T) {
	t.Parallel()
	fm := mfaults.New(testsvc.SQLite(t), 1)
	t.Cleanup(func() { fm.SetUnavailable(false) })
	a := rvStar(t, "a", fm, memObjects(t), server.Options{})
	rvSetup(t, a, "out")
	exp := time.Now().Add(server.TokenCacheTTL + 1500*time.Millisecond)
	tok := rvToken(a, "rv-outage", rvBasin, &exp, "read")
	ctx, cancel := context.WithDeadline(context.Background(), exp.Add(2*time.Second))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.base+"/v1/streams/out/records?tail_offset=0", nil)
	req.Header.Set("s2-basin", rvBasin)
	req.Header.Set("Content-Type", "s2s/proto")
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := a.h2.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("read session: %s %s", res.Status, body)
	}
	fm.SetUnavailable(true)
	outage := time.Now()
	fr := api.NewFrameReader(res.Body)
	for {
		f, err := fr.Next()
		if ctx.Err() != nil {
			t.Fatalf("the session is still open %v after its token expired", time.Since(exp).Round(time.Millisecond))
		}
		if err != nil {
			t.Fatalf("read session: %v", err)
		}
		if !f.Terminal {
			continue // heartbeats
		}
		e := f.Err()
		at := time.Now()
		t.Logf("ended %v into the outage, %v after expires_at: %v", at.Sub(outage).Round(time.Millisecond), at.Sub(exp).Round(time.Millisecond), e)
		if at.Sub(outage) < server.TokenCacheTTL+time.Second {
			t.Fatalf("the session ended %v into a metastore outage, before its token expired: %v", at.Sub(outage), e)
		}
		if e.Status != http.StatusUnauthorized || e.Code != auth.CodeAuthn || at.Sub(exp) > rvExpiryMargin {
			t.Fatalf("the session ended %v after expires_at with %v, want 401 %s within %v", at.Sub(exp), e, auth.CodeAuthn, rvExpiryMargin)
		}
		return
	}
}
