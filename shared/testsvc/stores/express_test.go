package stores_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/expressfront"
	"github.com/starlog/starlog/shared/testsvc/stores"
)

// An Express chain on K=3 directory buckets (W=2) through the S3 Express
// stand-in, on the production s3 backend: mint, commit slots, a
// successor's fence deposes the writer, the settle role walks the epoch
// with ReadOnly sessions and copies a slot's bytes into the standard
// bucket.
func TestExpressChainThroughSessions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	zones := []string{"use1-az4", "use1-az5", "use1-az6"}
	var set []string
	for _, z := range zones {
		set = append(set, testsvc.DirectoryBucket("starlog-express", z))
	}
	const standard = "starlog-standard"
	store, e := stores.S3Express(t, append([]string{standard}, set...)...)
	ms := testsvc.SQLite(t)
	p := meta.EpochParams{Buckets: set, W: 2, Window: 4}

	w1 := chain.New("star1", meta.Express, "star1:1", ms, store)
	ep, err := w1.Mint(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	wr, err := w1.Writer(ep, chain.WriterOptions{Deadline: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	bodies := map[uint64][]byte{}
	for s := range uint64(6) {
		body, err := wr.Render(s, []format.Batch{{StreamID: "s", Records: []format.Record{{SeqNum: s, Timestamp: 1, Body: fmt.Appendf(nil, "record %d", s)}}}})
		if err != nil {
			t.Fatal(err)
		}
		bodies[s] = body
		if err := wr.Commit(ctx, s, body); err != nil {
			t.Fatalf("commit %d: %v", s, err)
		}
	}
	// A successor (another star's incarnation) fences the epoch: the cut is
	// the first slot the writer never committed.
	f := chain.New("star1", meta.Express, "star2:1", ms, store)
	cut, err := f.Fence(ctx, ep.Epoch, false)
	if err != nil || cut != 6 {
		t.Fatalf("fence: cut %d, %v; want 6", cut, err)
	}
	var halt *chain.HaltError
	if err := wr.Commit(ctx, 6, bodies[0]); !errors.As(err, &halt) {
		t.Fatalf("commit into the fenced epoch: %v, want a halt", err)
	}

	// The settle role: ReadOnly sessions on the directory buckets.
	ro := stores.S3ExpressClient(t, e, e.ReadOnlyAccessKey, e.ReadOnlySecretKey)
	reader := chain.New("star1", meta.Express, "settle:1", ms, ro)
	rec, _, err := reader.Epoch(ctx, ep.Epoch)
	if err != nil || rec.Cut == nil || *rec.Cut != 6 {
		t.Fatalf("epoch record %+v, %v", rec, err)
	}
	var walked []uint64
	if err := reader.Walk(ctx, rec, 0, 6, func(sf chain.SlotFooter) error {
		walked = append(walked, sf.Slot)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(walked) != "[0 1 2 3 4 5]" {
		t.Fatalf("walked %v", walked)
	}
	for s := range uint64(6) {
		ta, err := reader.Classify(ctx, ep, s)
		if err != nil || ta.Fate() != chain.Committed {
			t.Fatalf("slot %d: %v %v", s, ta.Fate(), err)
		}
	}
	// Settling copies slot bytes server-side into the standard bucket
	// (UploadPartCopy, signed with the long-term keys; the source is a
	// directory bucket the role may open a ReadOnly session on) ...
	slot := chain.SlotKey("star1", meta.Express, ep.Epoch, 2)
	mp, err := ro.Bucket(standard).NewMultipart(ctx, "streams/b/s/1/2")
	if err != nil {
		t.Fatal(err)
	}
	body := bodies[2]
	if err := mp.AddCopyPart(ctx, set[1], slot, 0, int64(len(body))); err != nil {
		t.Fatalf("copy part from %s: %v", set[1], err)
	}
	if _, err := mp.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := ro.Bucket(standard).Get(ctx, "streams/b/s/1/2", 0, -1); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("settled copy: %d bytes, %v", len(got), err)
	}
	// ... but may not write a slot.
	if _, err := ro.Bucket(set[0]).PutIfAbsent(ctx, chain.SlotKey("star1", meta.Express, ep.Epoch, 9), body); err == nil || objstore.IsIndefinite(err) {
		t.Fatalf("a ReadOnly session wrote a slot: %v", err)
	}

	st := e.Front.Stats()
	t.Logf("front: %+v", st)
	for _, b := range set {
		// One ReadWrite session per bucket for the writer and the fencer
		// (one client), one ReadOnly session per bucket for the reader.
		if st.SessionsByBucket[b] != 2 {
			t.Errorf("bucket %s: %d sessions, want 2", b, st.SessionsByBucket[b])
		}
	}
	if st.Forwarded[expressfront.OpPutObject] < 6*2 || st.Refused["AccessDenied"] != 1 || len(st.Refused) != 1 {
		t.Fatalf("front stats %+v: want the slot PUTs and one refused ReadOnly write", st)
	}
}
