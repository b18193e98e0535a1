package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// TestDurableFoldCheckpoint: a star that never saw a Durable Streams
// stream (a restart, a takeover) folds its state from the stream's
// checkpoint, not from the first record: after 10,000 records and an
// idempotent producer's append on one star, a second star answers the
// producer's retry as a duplicate having read only the records past the
// checkpoint. A checkpoint of another stream under the same name (the S2
// stream deleted and created again) is not used.
func TestDurableFoldCheckpoint(t *testing.T) {
	t.Parallel()
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	ac := auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}
	start := func(id string) *env {
		return starServing(t, id, ms, objs, func(c *node.Config) { c.DeletionPending = 100 * time.Millisecond },
			server.Options{Auth: ac, Durable: &durable.Config{LongPoll: time.Second}})
	}
	bulk := func(e *env, stream string, n int) {
		t.Helper()
		for i := 0; i < n; i += 1000 {
			want(t, e.appendJSON("durable-streams", stream, textRecords(fmt.Sprintf("r%d-", i), 1000), bearer(testAdmin)...), 200, "")
		}
	}
	prod := []string{"Content-Type", "text/plain", "Producer-Id", "p", "Producer-Epoch", "0", "Producer-Seq", "0"}

	a := start("a")
	want(t, a.dsAdmin("PUT", "big", "", "Content-Type", "text/plain"), 201, "")
	bulk(a, "big", 10_000)
	want(t, a.dsAdmin("POST", "big", "last", prod...), 200, "")
	poll.Until(t, 5*time.Second, "a checkpoint written", func() bool {
		return a.metric("starlog_durable_fold_checkpoints_total", "result", "written") >= 1
	})
	if got := a.metric("starlog_durable_fold_records_total"); got != 10_000 {
		t.Fatalf("star a folded %v records, want 10,000 (the fold before its append)", got)
	}
	a.stop(t)

	b := start("b")
	if r := b.dsAdmin("POST", "big", "last", prod...); r.status != 204 || r.header.Get("Producer-Seq") != "0" {
		t.Fatalf("the producer's retry on b: %s, want 204 duplicate", r)
	}
	if got := b.metric("starlog_durable_fold_checkpoints_total", "result", "loaded"); got != 1 {
		t.Fatalf("b loaded %v checkpoints, want 1", got)
	}
	if got := b.metric("starlog_durable_fold_records_total"); got > 1 {
		t.Fatalf("star b folded %v records, want at most the one past the checkpoint", got)
	}
	r := b.call("GET", "/ds/big?offset=0000000000009999_0000000000000000", nil, bearer(testAdmin)...)
	if r.status != 200 || !strings.HasSuffix(string(r.body), "last") {
		t.Fatalf("read of the end: %s", r)
	}

	// The S2 stream deleted and made again under the name (its Durable
	// Streams row stays): the old checkpoint is of another stream.
	want(t, b.stream("durable-streams", "DELETE", "streams/big", nil, bearer(testAdmin)...), 202, "")
	poll.Until(t, 5*time.Second, "the S2 stream re-created", func() bool {
		return b.stream("durable-streams", "PUT", "streams/big", []byte(`{}`), bearer(testAdmin)...).status < 300
	})
	bulk(b, "big", 11_000) // past the old checkpoint's 10,000
	b.stop(t)
	c := start("c")
	if r := c.dsAdmin("POST", "big", "again", prod...); r.status != 200 {
		t.Fatalf("the producer on the new stream: %s, want 200 (no state from the old one)", r)
	}
	if got := c.metric("starlog_durable_fold_checkpoints_total", "result", "load_unfit"); got != 1 {
		t.Fatalf("c found %v unfit checkpoints, want 1", got)
	}
	if got := c.metric("starlog_durable_fold_records_total"); got != 11_000 {
		t.Fatalf("star c folded %v records, want the new stream's 11,000", got)
	}
}

// TestDurableCloseRetryOfAJSONBatch: an idempotent producer's append of
// several JSON messages that also closes the stream, retried, is a 204
// duplicate (the fold knows which producer's append closed it, though
// the marker is not the append's first record).
func TestDurableCloseRetryOfAJSONBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(_ *node.Config, o *server.Options) { o.Durable = &durable.Config{} })
	want(t, e.call("PUT", "/ds/j", nil, "Content-Type", "application/json"), 201, "")
	hdr := []string{"Content-Type", "application/json", "Stream-Closed", "true", "Producer-Id", "w", "Producer-Epoch", "1", "Producer-Seq", "0"}
	want(t, e.call("POST", "/ds/j", []byte(`[{"n":1},{"n":2},{"n":3}]`), hdr...), 200, "")
	r := e.call("POST", "/ds/j", []byte(`[{"n":1},{"n":2},{"n":3}]`), hdr...)
	if r.status != 204 || r.header.Get("Stream-Closed") != "true" || r.header.Get("Producer-Seq") != "0" {
		t.Fatalf("retry of the closing append: %s (Stream-Closed %q, Producer-Seq %q), want 204", r, r.header.Get("Stream-Closed"), r.header.Get("Producer-Seq"))
	}
	r = e.call("GET", "/ds/j?offset=-1", nil)
	if r.status != 200 || string(r.body) != `[{"n":1},{"n":2},{"n":3}]` {
		t.Fatalf("read: %s, want the three messages once", r)
	}
}
