// Package objstoretest is the conformance suite every objstore backend
// passes, so code written against one backend behaves the same on the
// others (docs/design.md §4.1, §15).
package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/objstore"
)

// NewStore returns a fresh store for one subtest and the names of at least
// two empty buckets in it. Cleanup is registered on t.
type NewStore func(t *testing.T) (objstore.Store, []string)

type config struct {
	listKeys  int
	skipChurn string
}

// Option tunes the suite for a backend.
type Option func(*config)

// ListKeys sets how many keys the listing test writes (default 1100, more
// than one S3 page). A backend where that is slow should shrink its list
// page size and pass a smaller number that still spans several pages.
func ListKeys(n int) Option { return func(c *config) { c.listKeys = n } }

// SkipNestedChurn skips the NestedChurn subtest with reason: for a server
// with a known race between removing an emptied folder and creating a key
// in it (versitygw v1.8.0's posix backend answers such a PutObject with a
// spurious 409 ExistingObjectIsDirectory). Name the defect in reason.
func SkipNestedChurn(reason string) Option { return func(c *config) { c.skipChurn = reason } }

// Run runs the conformance suite against the stores newStore returns.
func Run(t *testing.T, newStore NewStore, opts ...Option) {
	cfg := config{listKeys: 1100}
	for _, o := range opts {
		o(&cfg)
	}
	open := func(t *testing.T) (objstore.Bucket, objstore.Bucket, objstore.Store) {
		t.Helper()
		st, names := newStore(t)
		if len(names) < 2 {
			t.Fatalf("objstoretest: newStore returned %d buckets, need 2", len(names))
		}
		return st.Bucket(names[0]), st.Bucket(names[1]), st
	}
	t.Run("PutIfAbsentRace", func(t *testing.T) { b, _, _ := open(t); testPutIfAbsentRace(t, b) })
	t.Run("GetRanges", func(t *testing.T) { b, _, _ := open(t); testGetRanges(t, b) })
	t.Run("Multipart", func(t *testing.T) { b, src, _ := open(t); testMultipart(t, b, src) })
	t.Run("MultipartRefusals", func(t *testing.T) { b, src, _ := open(t); testMultipartRefusals(t, b, src) })
	t.Run("Delete", func(t *testing.T) { b, _, _ := open(t); testDelete(t, b) })
	t.Run("List", func(t *testing.T) { b, other, _ := open(t); testList(t, b, other, cfg.listKeys) })
	t.Run("NestedKeys", func(t *testing.T) { b, _, _ := open(t); testNested(t, b) })
	t.Run("NestedChurn", func(t *testing.T) {
		if cfg.skipChurn != "" {
			t.Skip(cfg.skipChurn)
		}
		b, _, _ := open(t)
		testNestedChurn(t, b)
	})
	t.Run("InvalidKeys", func(t *testing.T) { b, _, st := open(t); testInvalid(t, b, st) })
	t.Run("MissingBucket", func(t *testing.T) { _, _, st := open(t); testMissingBucket(t, st) })
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// payload returns n deterministic pseudo-random bytes.
func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func mustPut(t *testing.T, b objstore.Bucket, key string, body []byte) objstore.ObjectInfo {
	t.Helper()
	info, err := b.PutIfAbsent(ctxFor(t), key, body)
	if err != nil {
		t.Fatalf("PutIfAbsent(%q): %v", key, err)
	}
	return info
}

func mustGet(t *testing.T, b objstore.Bucket, key string, off, n int64) []byte {
	t.Helper()
	got, err := b.Get(ctxFor(t), key, off, n)
	if err != nil {
		t.Fatalf("Get(%q, %d, %d): %v", key, off, n, err)
	}
	return got
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
	if objstore.IsIndefinite(err) {
		t.Fatalf("%s: a definite refusal came back indefinite: %v", what, err)
	}
}

func testPutIfAbsentRace(t *testing.T, b objstore.Bucket) {
	ctx := ctxFor(t)
	const writers = 16
	const key = "race/slot-000001"
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		errs    [writers]error
		infos   [writers]objstore.ObjectInfo
		payload = func(i int) []byte {
			return fmt.Appendf(nil, "writer %02d %s", i, bytes.Repeat([]byte{byte(i)}, 1000+i))
		}
	)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			infos[i], errs[i] = b.PutIfAbsent(ctx, key, payload(i))
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("writers %d and %d both created %q", winner, i, key)
			}
			winner = i
		case errors.Is(err, objstore.ErrExists) && !objstore.IsIndefinite(err):
		default:
			t.Errorf("writer %d: %v, want nil or ErrExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer created %q", key)
	}
	if got, want := mustGet(t, b, key, 0, -1), payload(winner); !bytes.Equal(got, want) {
		t.Fatalf("content is not the winner's (writer %d): got %d bytes %q…", winner, len(got), got[:min(len(got), 12)])
	}
	head, err := b.Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if head.Size != int64(len(payload(winner))) || head.Key != key {
		t.Fatalf("Head = %+v, want key %q size %d", head, key, len(payload(winner)))
	}
	if w := infos[winner]; w.Size != head.Size || w.ETag == "" || w.ETag != head.ETag {
		t.Fatalf("winner's info %+v does not match Head %+v", w, head)
	}
	// A later write still loses, with nothing changed.
	_, err = b.PutIfAbsent(ctx, key, []byte("late"))
	wantErr(t, "late PutIfAbsent", err, objstore.ErrExists)
	if got := mustGet(t, b, key, 0, -1); !bytes.Equal(got, payload(winner)) {
		t.Fatal("a losing write changed the object")
	}
}

func testGetRanges(t *testing.T, b objstore.Bucket) {
	ctx := ctxFor(t)
	body := payload(1, 1000)
	put := append([]byte(nil), body...)
	mustPut(t, b, "ranges/obj", put)
	put[0] ^= 0xff // the store must not alias the caller's buffer
	cases := []struct {
		name   string
		off, n int64
		want   []byte
	}{
		{"start", 0, 60, body[:60]},
		{"middle", 400, 100, body[400:500]},
		{"one byte", 999, 1, body[999:]},
		{"to end", 900, -1, body[900:]},
		{"whole", 0, -1, body},
		{"whole exact", 0, 1000, body},
		{"past end truncated", 990, 100, body[990:]},
		{"huge n", 10, 1 << 62, body[10:]},
		{"at end", 1000, 10, nil},
		{"at end to end", 1000, -1, nil},
		{"beyond end", 5000, 10, nil},
		{"zero length", 10, 0, nil},
	}
	for _, c := range cases {
		got, err := b.Get(ctx, "ranges/obj", c.off, c.n)
		if err != nil {
			t.Fatalf("%s: Get(%d, %d): %v", c.name, c.off, c.n, err)
		}
		if !bytes.Equal(got, c.want) {
			t.Fatalf("%s: Get(%d, %d) = %d bytes, want %d", c.name, c.off, c.n, len(got), len(c.want))
		}
		if len(got) > 0 {
			got[0] ^= 0xff // nor alias the returned buffer
		}
	}
	if got := mustGet(t, b, "ranges/obj", 0, -1); !bytes.Equal(got, body) {
		t.Fatal("object changed after callers mutated their buffers")
	}
	if _, err := b.Get(ctx, "ranges/obj", -1, 10); err == nil {
		t.Fatal("Get with a negative offset succeeded")
	}
	if info, err := b.Head(ctx, "ranges/obj"); err != nil || info.Size != 1000 || info.Key != "ranges/obj" {
		t.Fatalf("Head = %+v, %v; want size 1000", info, err)
	}

	mustPut(t, b, "ranges/empty", nil)
	if got := mustGet(t, b, "ranges/empty", 0, -1); len(got) != 0 {
		t.Fatalf("empty object read %d bytes", len(got))
	}
	if info, err := b.Head(ctx, "ranges/empty"); err != nil || info.Size != 0 {
		t.Fatalf("Head(empty) = %+v, %v", info, err)
	}

	for _, n := range []int64{-1, 0, 10} {
		_, err := b.Get(ctx, "ranges/missing", 0, n)
		wantErr(t, fmt.Sprintf("Get(missing, n=%d)", n), err, objstore.ErrNotFound)
	}
	_, err := b.Head(ctx, "ranges/missing")
	wantErr(t, "Head(missing)", err, objstore.ErrNotFound)
}

func testMultipart(t *testing.T, b, src objstore.Bucket) {
	ctx := ctxFor(t)
	source := payload(2, objstore.MinPartSize+2000)
	mustPut(t, src, "src/bundle", source)
	uploaded := payload(3, objstore.MinPartSize+17)
	last := payload(4, 1234)

	mp, err := b.NewMultipart(ctx, "settled/obj")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mp.Abort(context.Background()) })
	if err := mp.AddCopyPart(ctx, src.Name(), "src/bundle", 1000, objstore.MinPartSize); err != nil {
		t.Fatalf("AddCopyPart: %v", err)
	}
	if err := mp.AddPart(ctx, uploaded); err != nil {
		t.Fatalf("AddPart: %v", err)
	}
	if err := mp.AddPart(ctx, last); err != nil {
		t.Fatalf("AddPart(last): %v", err)
	}
	info, err := mp.Complete(ctx)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	want := bytes.Join([][]byte{source[1000 : 1000+objstore.MinPartSize], uploaded, last}, nil)
	if info.Size != int64(len(want)) || info.Key != "settled/obj" || info.ETag == "" {
		t.Fatalf("Complete info = %+v, want size %d", info, len(want))
	}
	got := mustGet(t, b, "settled/obj", 0, -1)
	if !bytes.Equal(got, want) {
		t.Fatalf("multipart content differs: got %d bytes, want %d", len(got), len(want))
	}
	if got := mustGet(t, b, "settled/obj", objstore.MinPartSize-10, 20); !bytes.Equal(got, want[objstore.MinPartSize-10:objstore.MinPartSize+10]) {
		t.Fatal("ranged read across the part boundary differs")
	}
	if err := mp.Abort(ctx); err != nil {
		t.Fatalf("Abort after Complete: %v", err)
	}

	// A second upload of the same key loses, and leaves the first intact.
	mp2, err := b.NewMultipart(ctx, "settled/obj")
	if err != nil {
		t.Fatal(err)
	}
	if err := mp2.AddPart(ctx, []byte("second")); err != nil {
		t.Fatal(err)
	}
	_, err = mp2.Complete(ctx)
	wantErr(t, "second Complete", err, objstore.ErrExists)
	if err := mp2.Abort(ctx); err != nil {
		t.Fatalf("Abort after a refused Complete: %v", err)
	}
	if got := mustGet(t, b, "settled/obj", 0, -1); !bytes.Equal(got, want) {
		t.Fatal("a losing Complete changed the object")
	}

	// A plain put loses to a multipart object too.
	_, err = b.PutIfAbsent(ctx, "settled/obj", []byte("x"))
	wantErr(t, "PutIfAbsent over a multipart object", err, objstore.ErrExists)

	// A single small part is a valid (last) part.
	mp3, err := b.NewMultipart(ctx, "settled/small")
	if err != nil {
		t.Fatal(err)
	}
	if err := mp3.AddCopyPart(ctx, src.Name(), "src/bundle", 7, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := mp3.Complete(ctx); err != nil {
		t.Fatalf("Complete of one small part: %v", err)
	}
	if got := mustGet(t, b, "settled/small", 0, -1); !bytes.Equal(got, source[7:107]) {
		t.Fatal("single copy part content differs")
	}
}

func testMultipartRefusals(t *testing.T, b, src objstore.Bucket) {
	ctx := ctxFor(t)
	mustPut(t, src, "src/small", payload(5, 100))

	// A part below MinPartSize that is not last is refused at Complete.
	mp, err := b.NewMultipart(ctx, "refused/small-parts")
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.AddPart(ctx, payload(6, 100)); err != nil {
		t.Fatal(err)
	}
	if err := mp.AddCopyPart(ctx, src.Name(), "src/small", 0, 100); err != nil {
		t.Fatal(err)
	}
	_, err = mp.Complete(ctx)
	wantErr(t, "Complete with a small non-last part", err, objstore.ErrPartTooSmall)
	if err := mp.Abort(ctx); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	_, err = b.Head(ctx, "refused/small-parts")
	wantErr(t, "Head after refused Complete", err, objstore.ErrNotFound)

	// Abort discards; twice is fine; the key is never created.
	mp, err = b.NewMultipart(ctx, "refused/aborted")
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.AddPart(ctx, payload(7, 100)); err != nil {
		t.Fatal(err)
	}
	if err := mp.Abort(ctx); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if err := mp.Abort(ctx); err != nil {
		t.Fatalf("second Abort: %v", err)
	}
	_, err = b.Head(ctx, "refused/aborted")
	wantErr(t, "Head after Abort", err, objstore.ErrNotFound)
	if _, err := mp.Complete(ctx); err == nil {
		t.Fatal("Complete after Abort succeeded")
	}

	// Copy parts from a missing source or past the source's end fail.
	mp, err = b.NewMultipart(ctx, "refused/copy")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mp.Abort(context.Background()) }()
	err = mp.AddCopyPart(ctx, src.Name(), "src/missing", 0, 10)
	wantErr(t, "AddCopyPart from a missing key", err, objstore.ErrNotFound)
	if err := mp.AddCopyPart(ctx, src.Name(), "src/small", 50, 51); err == nil {
		t.Fatal("AddCopyPart past the source's end succeeded")
	}
	if err := mp.AddCopyPart(ctx, src.Name(), "src/small", 100, 1); err == nil {
		t.Fatal("AddCopyPart starting at the source's end succeeded")
	}
}

func testDelete(t *testing.T, b objstore.Bucket) {
	ctx := ctxFor(t)
	if err := b.Delete(ctx, "del/missing"); err != nil {
		t.Fatalf("Delete(missing): %v", err)
	}
	mustPut(t, b, "del/one", []byte("1"))
	if err := b.Delete(ctx, "del/one"); err != nil {
		t.Fatal(err)
	}
	_, err := b.Get(ctx, "del/one", 0, -1)
	wantErr(t, "Get after Delete", err, objstore.ErrNotFound)
	// A deleted key can be created again.
	mustPut(t, b, "del/one", []byte("again"))
	if got := mustGet(t, b, "del/one", 0, -1); string(got) != "again" {
		t.Fatalf("re-created object = %q", got)
	}

	var keys []string
	for i := range 5 {
		k := fmt.Sprintf("del/many/%d", i)
		mustPut(t, b, k, []byte(k))
		keys = append(keys, k, fmt.Sprintf("del/many/missing-%d", i))
	}
	mustPut(t, b, "del/keep", []byte("keep"))
	if err := b.DeleteMany(ctx, keys); err != nil {
		t.Fatalf("DeleteMany: %v", err)
	}
	for _, k := range keys {
		_, err := b.Head(ctx, k)
		wantErr(t, "Head after DeleteMany", err, objstore.ErrNotFound)
	}
	if err := b.DeleteMany(ctx, nil); err != nil {
		t.Fatalf("DeleteMany(nil): %v", err)
	}
	if got := mustGet(t, b, "del/keep", 0, -1); string(got) != "keep" {
		t.Fatal("DeleteMany removed a key it was not given")
	}
}

func testList(t *testing.T, b, other objstore.Bucket, n int) {
	ctx := ctxFor(t)
	want := make(map[string]int64, n)
	keys := make(chan string)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				if _, err := b.PutIfAbsent(ctx, k, []byte(k)); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	for i := range n {
		// Two levels, so listings must descend into folders.
		k := fmt.Sprintf("list/p/%02d/%06d", i%7, i)
		want[k] = int64(len(k))
		keys <- k
	}
	for _, k := range []string{"list/q/1", "list/pp", "lisx", "list-x"} {
		keys <- k
	}
	close(keys)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("put: %v", err)
	}
	mustPut(t, other, "list/p/00/other-bucket", []byte("x"))

	got := make(map[string]int64, n)
	for info, err := range b.List(ctx, "list/p/") {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if _, dup := got[info.Key]; dup {
			t.Fatalf("List yielded %q twice", info.Key)
		}
		got[info.Key] = info.Size
	}
	if len(got) != len(want) {
		t.Fatalf("List(list/p/) yielded %d keys, want %d", len(got), len(want))
	}
	for k, size := range want {
		if gs, ok := got[k]; !ok || gs != size {
			t.Fatalf("List: key %q size %d (present %v), want size %d", k, gs, ok, size)
		}
	}

	all := 0
	for _, err := range b.List(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		all++
	}
	if all != n+4 {
		t.Fatalf("List(\"\") yielded %d keys, want %d", all, n+4)
	}
	for info, err := range b.List(ctx, "nothing/") {
		t.Fatalf("List(nothing/) yielded %+v, %v", info, err)
	}
	taken := 0
	for _, err := range b.List(ctx, "list/") {
		if err != nil {
			t.Fatal(err)
		}
		if taken++; taken == 3 {
			break
		}
	}
	if taken != 3 {
		t.Fatalf("early break: took %d", taken)
	}
}

func testNested(t *testing.T, b objstore.Bucket) {
	ctx := ctxFor(t)
	mustPut(t, b, "n/a", []byte("leaf"))
	_, err := b.PutIfAbsent(ctx, "n", []byte("x"))
	wantErr(t, "PutIfAbsent of a folder of a key", err, objstore.ErrKeyConflict)
	_, err = b.PutIfAbsent(ctx, "n/a/b", []byte("x"))
	wantErr(t, "PutIfAbsent below a key", err, objstore.ErrKeyConflict)
	_, err = b.PutIfAbsent(ctx, "n/a/b/c", []byte("x"))
	wantErr(t, "PutIfAbsent two levels below a key", err, objstore.ErrKeyConflict)
	_, err = b.Get(ctx, "n", 0, -1)
	wantErr(t, "Get of a folder", err, objstore.ErrNotFound)
	_, err = b.Head(ctx, "n")
	wantErr(t, "Head of a folder", err, objstore.ErrNotFound)
	_, err = b.Get(ctx, "n/a/b", 0, -1)
	wantErr(t, "Get below a key", err, objstore.ErrNotFound)
	_, err = b.Head(ctx, "n/a/b")
	wantErr(t, "Head below a key", err, objstore.ErrNotFound)
	if err := b.Delete(ctx, "n"); err != nil {
		t.Fatalf("Delete of a folder: %v", err)
	}
	if err := b.Delete(ctx, "n/a/b"); err != nil {
		t.Fatalf("Delete below a key: %v", err)
	}
	if got := mustGet(t, b, "n/a", 0, -1); string(got) != "leaf" {
		t.Fatal("deleting folder names removed the key")
	}

	mp, err := b.NewMultipart(ctx, "n/a/mp")
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.AddPart(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	_, err = mp.Complete(ctx)
	wantErr(t, "multipart Complete below a key", err, objstore.ErrKeyConflict)
	_ = mp.Abort(ctx)

	// Once the key is gone its folder is free again, at any depth.
	if err := b.Delete(ctx, "n/a"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, b, "n", []byte("now a key"))
	_, err = b.PutIfAbsent(ctx, "n/x", []byte("x"))
	wantErr(t, "PutIfAbsent below the new key", err, objstore.ErrKeyConflict)
	mustPut(t, b, "deep/e/f/g", []byte("x"))
	if err := b.Delete(ctx, "deep/e/f/g"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, b, "deep", []byte("x"))
	for info, err := range b.List(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		if info.Key != "n" && info.Key != "deep" {
			t.Fatalf("List yielded %q; only n and deep exist", info.Key)
		}
	}
}

// testNestedChurn creates and deletes siblings in one folder from several
// goroutines: removing an emptied folder must never fail a concurrent
// create in it.
func testNestedChurn(t *testing.T, b objstore.Bucket) {
	ctx := ctxFor(t)
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				k := fmt.Sprintf("churn/x/y/%d-%d", g, i)
				if _, err := b.PutIfAbsent(ctx, k, []byte(k)); err != nil {
					errc <- fmt.Errorf("put %s: %w", k, err)
					return
				}
				if err := b.Delete(ctx, k); err != nil {
					errc <- fmt.Errorf("delete %s: %w", k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	mustPut(t, b, "churn", []byte("folder is free"))
}

func testInvalid(t *testing.T, b objstore.Bucket, st objstore.Store) {
	ctx := ctxFor(t)
	for _, k := range []string{"", "/a", "a/", "a//b", "./a", "a/./b", "a/../b", "..", "a\x00b", string(bytes.Repeat([]byte("k"), objstore.MaxKeyLen+1))} {
		_, err := b.PutIfAbsent(ctx, k, []byte("x"))
		wantErr(t, fmt.Sprintf("PutIfAbsent(%q)", k), err, objstore.ErrInvalidKey)
		_, err = b.Get(ctx, k, 0, -1)
		wantErr(t, fmt.Sprintf("Get(%q)", k), err, objstore.ErrInvalidKey)
		err = b.Delete(ctx, k)
		wantErr(t, fmt.Sprintf("Delete(%q)", k), err, objstore.ErrInvalidKey)
		_, err = b.NewMultipart(ctx, k)
		wantErr(t, fmt.Sprintf("NewMultipart(%q)", k), err, objstore.ErrInvalidKey)
	}
	for info, err := range b.List(ctx, "") {
		t.Fatalf("an invalid key was stored: %+v, %v", info, err)
	}
	for _, name := range []string{"", "ab", "Upper", "-x-", "a/b", ".."} {
		if _, err := st.Bucket(name).PutIfAbsent(ctx, "k", []byte("x")); err == nil {
			t.Fatalf("PutIfAbsent in bucket %q succeeded", name)
		}
	}
}

func testMissingBucket(t *testing.T, st objstore.Store) {
	ctx := ctxFor(t)
	b := st.Bucket("starlog-no-such-bucket")
	_, err := b.Get(ctx, "k", 0, -1)
	wantErr(t, "Get in a missing bucket", err, objstore.ErrNotFound)
	_, err = b.Head(ctx, "k")
	wantErr(t, "Head in a missing bucket", err, objstore.ErrNotFound)
	if _, err := b.PutIfAbsent(ctx, "k", []byte("x")); err == nil {
		t.Fatal("PutIfAbsent in a missing bucket succeeded")
	}
	if err := b.Delete(ctx, "k"); err == nil {
		t.Fatal("Delete in a missing bucket succeeded")
	}
	for _, err := range b.List(ctx, "") {
		if err == nil {
			t.Fatal("List of a missing bucket yielded an object")
		}
		break
	}
}
