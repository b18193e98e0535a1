package durable

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auditor"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/node"
)

// dsResp is one answer of retainCall.
type dsResp struct {
	code int
	body string
	hdr  http.Header
}

func retainCall(t *testing.T, method, url string, hdr map[string]string, body string) dsResp {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return dsResp{resp.StatusCode, string(b), resp.Header}
}

// A Durable Streams stream carries a retention age, from the
// Stream-Retention-Seconds header of its PUT or else its basin's default
// stream config; once the auditor has trimmed its records, a read at an
// offset below the retained range is 410 Gone (catch-up, long-poll and
// SSE), a read from -1 starts at the first retained record (here the
// tail: the stream keeps its tail), and appends go on at the tail. A
// stream whose header asks for a day keeps its records. A real node and
// the in-process auditor on a tiny settle policy and a one-second
// retention.
func TestDurableRetention(t *testing.T) {
	// Not parallel: its 1 s retention windows are judged on real time, and
	// the star processes of the tests beside it slowed it past them.
	ctx := context.Background()
	ms := testsvc.SQLite(t)
	objs, err := mem.New("standard")
	if err != nil {
		t.Fatal(err)
	}
	policy := settle.Config{
		Trigger:   32 << 10,
		Standard:  settle.ClassTimers{Linger: 20 * time.Millisecond, AgeCap: 60 * time.Millisecond},
		Express:   settle.ClassTimers{Linger: 20 * time.Millisecond, AgeCap: 60 * time.Millisecond},
		OutputCap: 64 << 10, ReadGrace: 200 * time.Millisecond, Workers: 2, ScratchDir: t.TempDir(),
	}
	cfg := node.Defaults()
	cfg.StarID = "retain-star"
	cfg.Standard.FlushInterval = time.Millisecond
	cfg.Settle = policy
	log := slog.New(slog.DiscardHandler)
	n, err := node.Open(ctx, cfg, node.Deps{Meta: ms, Objects: objs, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	st := &settle.Stores{Meta: ms, Objects: objs, SettledBucket: "standard", Streams: settle.MetaStreams{Meta: ms}, Config: policy, Logger: log}
	r, err := auditor.New(st, auditor.Options{Interval: 50 * time.Millisecond, RetryBase: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(rctx) })
	t.Cleanup(func() { stop(); wg.Wait() })

	// The face's basin defaults to a one-second retention.
	standard := api.StorageStandard
	const basin = "retain-basin"
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: basin, Config: &api.BasinConfig{
		DefaultStreamConfig: &api.StreamConfig{StorageClass: &standard, RetentionPolicy: &api.RetentionPolicy{AgeSecs: 1}}}}, ""); err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Node: n, Basin: basin})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), auth.AdminPrincipal())))
	}))
	t.Cleanup(func() { srv.Close(); h.Close() })
	url := srv.URL + DefaultPrefix
	text := map[string]string{"Content-Type": "text/plain"}
	withRetention := func(v string) map[string]string {
		return map[string]string{"Content-Type": "text/plain", hStreamRetention: v}
	}
	at := func(seq uint64) string { return "?offset=" + offsets.Format(seq) }

	// The header: one second; a day (it takes precedence over the basin's
	// default, as an S2 stream's own config does).
	hdr, long, dflt := url+"/hdr", url+"/long", url+"/dflt"
	for name, v := range map[string]string{"hdr": "1", "long": "86400"} {
		if c := retainCall(t, http.MethodPut, url+"/"+name, withRetention(v), "a"); c.code != http.StatusCreated || c.hdr.Get(hStreamRetention) != v {
			t.Fatalf("PUT with %s: %s: %d %q, %s %q; want 201 echoing it", hStreamRetention, v, c.code, c.body, hStreamRetention, c.hdr.Get(hStreamRetention))
		}
		if sc, err := n.StreamConfig(ctx, basin, name); err != nil || sc.RetentionPolicy == nil || fmt.Sprint(sc.RetentionPolicy.AgeSecs) != v {
			t.Fatalf("the stream's S2 config: %+v %v, want retention_policy.age %s", sc.RetentionPolicy, err, v)
		}
	}
	// A stream closed at its creation: its closing marker ages out too.
	closed := url + "/closed"
	if c := retainCall(t, http.MethodPut, closed, map[string]string{"Content-Type": "text/plain", hStreamRetention: "1", hStreamClosed: "true"}, "z"); c.code != http.StatusCreated {
		t.Fatalf("PUT %s closed: %d %q", closed, c.code, c.body)
	}
	// The basin's default: without the header.
	if c := retainCall(t, http.MethodPut, dflt, text, "a"); c.code != http.StatusCreated || c.hdr.Get(hStreamRetention) != "" {
		t.Fatalf("PUT %s: %d %q, %s %q", dflt, c.code, c.body, hStreamRetention, c.hdr.Get(hStreamRetention))
	}
	for _, u := range []string{hdr, long, dflt} {
		if c := retainCall(t, http.MethodPost, u, text, "b"); c.code != http.StatusNoContent {
			t.Fatalf("POST %s: %d %q", u, c.code, c.body)
		}
		if c := retainCall(t, http.MethodGet, u+at(0), nil, ""); c.code != http.StatusOK || c.body != "ab" {
			t.Fatalf("GET %s from 0 at once: %d %q, want 200 \"ab\"", u, c.code, c.body)
		}
	}
	// Past the age, each record stops being served (reads skip it by its
	// timestamp: "a" ages out a little before "b"), and the auditor
	// settles and trims them: below the tail is gone. (The bound here: the
	// age, the 60 ms age cap, 50 ms passes.)
	for _, u := range []string{hdr, dflt} {
		poll.Until(t, 30*time.Second, u+" from 1, the last record, answers 410", func() bool {
			return retainCall(t, http.MethodGet, u+at(1), nil, "").code == http.StatusGone
		})
		for _, q := range []string{at(0), at(0) + "&live=long-poll", at(0) + "&live=sse"} {
			if c := retainCall(t, http.MethodGet, u+q, nil, ""); c.code != http.StatusGone {
				t.Errorf("GET %s%s: %d %q, want 410", u, q, c.code, c.body)
			}
		}
		c := retainCall(t, http.MethodGet, u+"?offset=-1", nil, "")
		if c.code != http.StatusOK || c.body != "" || c.hdr.Get(hStreamNext) != offsets.Format(2) || c.hdr.Get(hStreamUpToDate) != "true" {
			t.Errorf("GET %s from -1: %d %q, next %q, up to date %q; want 200, nothing, the tail %s, true",
				u, c.code, c.body, c.hdr.Get(hStreamNext), c.hdr.Get(hStreamUpToDate), offsets.Format(2))
		}
		if c := retainCall(t, http.MethodHead, u, nil, ""); c.code != http.StatusOK || c.hdr.Get(hStreamNext) != offsets.Format(2) {
			t.Errorf("HEAD %s: %d, next %q; want the tail kept, %s", u, c.code, c.hdr.Get(hStreamNext), offsets.Format(2))
		}
		if c := retainCall(t, http.MethodGet, u+at(2), nil, ""); c.code != http.StatusOK || c.body != "" {
			t.Errorf("GET %s at the tail: %d %q, want 200 and nothing", u, c.code, c.body)
		}
	}
	// A star that has not folded them (restarted, or taking them over)
	// folds from the first retained record: none. The tail stays, and so
	// does the closure, though its marker is gone.
	poll.Until(t, 30*time.Second, closed+" from 0 answers 410", func() bool {
		return retainCall(t, http.MethodGet, closed+at(0), nil, "").code == http.StatusGone
	})
	for _, name := range []string{"hdr", "dflt", "closed"} {
		h.states.drop(name)
	}
	for _, u := range []string{hdr, dflt} {
		if c := retainCall(t, http.MethodHead, u, nil, ""); c.code != http.StatusOK || c.hdr.Get(hStreamNext) != offsets.Format(2) || c.hdr.Get(hStreamClosed) != "" {
			t.Errorf("HEAD %s on a cold fold: %d %q, next %q, closed %q; want 200 at the tail %s, open", u, c.code, c.body, c.hdr.Get(hStreamNext), c.hdr.Get(hStreamClosed), offsets.Format(2))
		}
	}
	if c := retainCall(t, http.MethodHead, closed, nil, ""); c.code != http.StatusOK || c.hdr.Get(hStreamNext) != offsets.Format(2) || c.hdr.Get(hStreamClosed) != "true" {
		t.Errorf("HEAD %s on a cold fold: %d %q, next %q, closed %q; want 200 at %s, closed", closed, c.code, c.body, c.hdr.Get(hStreamNext), c.hdr.Get(hStreamClosed), offsets.Format(2))
	}
	if c := retainCall(t, http.MethodPost, closed, text, "more"); c.code != http.StatusConflict || c.hdr.Get(hStreamClosed) != "true" {
		t.Errorf("POST to %s after its marker aged out: %d %q, closed %q; want 409, closed", closed, c.code, c.body, c.hdr.Get(hStreamClosed))
	}
	// Appends go on at the tail, and read back from it and from -1.
	if c := retainCall(t, http.MethodPost, hdr, text, "c"); c.code != http.StatusNoContent || c.hdr.Get(hStreamNext) != offsets.Format(3) {
		t.Fatalf("POST after the trim: %d %q, next %q; want 204 at %s", c.code, c.body, c.hdr.Get(hStreamNext), offsets.Format(3))
	}
	for _, q := range []string{at(2), "?offset=-1"} {
		if c := retainCall(t, http.MethodGet, hdr+q, nil, ""); c.code != http.StatusOK || c.body != "c" {
			t.Errorf("GET %s%s after the append: %d %q, want \"c\"", hdr, q, c.code, c.body)
		}
	}
	// A day's retention: everything stays.
	if c := retainCall(t, http.MethodGet, long+at(0), nil, ""); c.code != http.StatusOK || c.body != "ab" {
		t.Errorf("GET %s from 0: %d %q, want 200 \"ab\" (a day's retention)", long, c.code, c.body)
	}
}

// Stream-Retention-Seconds takes decimal seconds above 0, without sign,
// leading zero, point or exponent (Stream-TTL's rule), once; anything
// else is 400 and creates nothing. A value past what a duration holds is
// taken and stored as given (the S2 config's age, applied saturating:
// nothing ages out). A PUT again with the same value is 200, with another
// (or none) 409.
func TestStreamRetentionHeader(t *testing.T) {
	t.Parallel()
	s := startTestStar(t, testsvc.SQLite(t))
	for _, v := range []string{"0", "-1", "+5", "01", "1.5", "1e3", "abc", "18446744073709551616"} {
		u := s.url + "/bad/" + strings.NewReplacer("+", "p", ".", "d").Replace(v)
		if c := retainCall(t, http.MethodPut, u, map[string]string{"Content-Type": "text/plain", hStreamRetention: v}, "x"); c.code != http.StatusBadRequest {
			t.Errorf("PUT with %s %q: %d %q, want 400", hStreamRetention, v, c.code, c.body)
		}
		if c := retainCall(t, http.MethodHead, u, nil, ""); c.code != http.StatusNotFound {
			t.Errorf("%s %q refused, but HEAD is %d, want 404 (nothing created)", hStreamRetention, v, c.code)
		}
	}
	req, _ := http.NewRequest(http.MethodPut, s.url+"/bad/twice", strings.NewReader("x"))
	req.Header.Add(hStreamRetention, "5")
	req.Header.Add(hStreamRetention, "5")
	if resp, err := testClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("PUT with two %s: %v %v, want 400", hStreamRetention, resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	huge := "18446744073709551615"
	u := s.url + "/huge"
	if c := retainCall(t, http.MethodPut, u, map[string]string{"Content-Type": "text/plain", hStreamRetention: huge}, "x"); c.code != http.StatusCreated {
		t.Fatalf("PUT with %s %s: %d %q, want 201", hStreamRetention, huge, c.code, c.body)
	}
	if sc, err := s.h.n.StreamConfig(context.Background(), DefaultBasin, "huge"); err != nil || sc.RetentionPolicy == nil || sc.RetentionPolicy.AgeSecs != 1<<64-1 {
		t.Fatalf("the stream's S2 config: %+v %v, want retention_policy.age %s", sc.RetentionPolicy, err, huge)
	}
	if c := retainCall(t, http.MethodHead, u, nil, ""); c.code != http.StatusOK || c.hdr.Get(hStreamRetention) != huge {
		t.Errorf("HEAD: %d, %s %q; want it echoed", c.code, hStreamRetention, c.hdr.Get(hStreamRetention))
	}
	if c := retainCall(t, http.MethodPut, u, map[string]string{"Content-Type": "text/plain", hStreamRetention: huge}, "x"); c.code != http.StatusOK {
		t.Errorf("PUT again with the same retention: %d %q, want 200", c.code, c.body)
	}
	for _, h := range []map[string]string{{"Content-Type": "text/plain", hStreamRetention: "60"}, {"Content-Type": "text/plain"}} {
		if c := retainCall(t, http.MethodPut, u, h, "x"); c.code != http.StatusConflict {
			t.Errorf("PUT again with %v: %d %q, want 409", h, c.code, c.body)
		}
	}
	// A stream made through the S2 API gets the age when a PUT gives it
	// its Durable Streams face.
	ctx := context.Background()
	if _, err := s.h.n.CreateStream(ctx, DefaultBasin, api.CreateStreamRequest{Stream: "from-s2"}, ""); err != nil {
		t.Fatal(err)
	}
	if c := retainCall(t, http.MethodPut, s.url+"/from-s2", map[string]string{"Content-Type": "text/plain", hStreamRetention: "3600"}, ""); c.code != http.StatusCreated {
		t.Fatalf("PUT on an S2 stream: %d %q", c.code, c.body)
	}
	if sc, err := s.h.n.StreamConfig(ctx, DefaultBasin, "from-s2"); err != nil || sc.RetentionPolicy == nil || sc.RetentionPolicy.AgeSecs != 3600 {
		t.Fatalf("the S2 stream's config after the PUT: %+v %v, want retention_policy.age 3600", sc.RetentionPolicy, err)
	}
}
