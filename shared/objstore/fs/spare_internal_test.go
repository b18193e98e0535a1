package fs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/poll"
)

// gatedFS blocks SyncDir of one folder while gate is set, until released.
type gatedFS struct {
	osFS
	dir     string
	gate    atomic.Bool
	release chan struct{}
}

func (g *gatedFS) SyncDir(dir string) error {
	if dir == g.dir && g.gate.Load() {
		<-g.release
	}
	return g.osFS.SyncDir(dir)
}

// A PUT that opens a new segment takes one prepared in the background: it
// does not wait for a segment file's create and its folder's sync, which
// on a loaded disk cost a lone producer one append in ~20 (one segment per
// materializeAfter).
func TestPutAfterSealTakesPreparedSegment(t *testing.T) {
	root := t.TempDir()
	g := &gatedFS{dir: filepath.Join(root, journalDir), release: make(chan struct{})}
	s, err := open(root, Options{Journal: true}, g)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer close(g.release)
	if err := s.CreateBucket("bkt"); err != nil {
		t.Fatal(err)
	}
	b := s.Bucket("bkt")
	ctx := context.Background()
	if _, err := b.PutIfAbsent(ctx, "a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	// The first segment seals and retires (materializeAfter); the next
	// PUT needs a new one.
	poll.Until(t, 10*time.Second, "the first segment retired", func() bool { return s.j.retired.Load() >= 1 })
	g.gate.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := b.PutIfAbsent(ctx, "b", []byte("b"))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the PUT after a seal waited for the journal folder's sync (a segment made on the append path)")
	}
}

// journaledStore opens a journaled store on fsys in a temp folder with
// the buckets made; it closes with the test.
func journaledStore(t *testing.T, fsys fileSys, buckets ...string) *Store {
	t.Helper()
	s, err := open(t.TempDir(), Options{Journal: true}, fsys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, name := range buckets {
		if err := s.CreateBucket(name); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// A flight's copies reach the journal together (chain.Writer starts one
// goroutine per bucket, its context marked with objstore.WithCopies): the
// leader holds its group open until all three have queued, so they share
// one data sync and a W=2 commit waits for one fdatasync, not two in a
// row. The test lengthens the wait's bound so that a slow machine cannot
// end it first.
func TestCopiesStartedTogetherShareOneSync(t *testing.T) {
	buckets := []string{"express-a", "express-b", "express-c"}
	s := journaledStore(t, osFS{}, buckets...)
	s.j.copiesWait = time.Minute
	ctx := objstore.WithCopies(context.Background(), len(buckets))
	for round := range 3 {
		before := s.j.syncs.Load()
		var wg sync.WaitGroup
		for _, name := range buckets {
			b := s.Bucket(name)
			wg.Go(func() {
				if _, err := b.PutIfAbsent(ctx, fmt.Sprintf("slot/%d", round), []byte("copy")); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := s.j.syncs.Load() - before; n != 1 {
			t.Fatalf("round %d: three copies started together took %d data syncs, want 1", round, n)
		}
	}
	if s.j.missed != 0 || !s.j.noWaitUntil.IsZero() {
		t.Fatal("a wait for the copies ran out")
	}
}

// Copies marked for three buckets of which this store has one (the others
// are other stores) cost copiesMisses bounded waits in a row, after which
// groups stop waiting for copiesBackoff: PUTs alone are not held again.
func TestCopiesElsewhereCostBoundedWaits(t *testing.T) {
	s := journaledStore(t, osFS{}, "express-a")
	s.j.copiesWait = 20 * time.Millisecond
	b := s.Bucket("express-a")
	ctx := objstore.WithCopies(context.Background(), 3)
	noWaitUntil := func() time.Time {
		s.j.mu.Lock()
		defer s.j.mu.Unlock()
		return s.j.noWaitUntil
	}
	for i := range copiesMisses {
		start := time.Now()
		if _, err := b.PutIfAbsent(ctx, fmt.Sprintf("slot/%d", i), []byte("copy")); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 20*time.Millisecond {
			t.Fatalf("PUT %d took %v: it did not wait for its copies", i, took)
		}
		if stop := !noWaitUntil().IsZero(); stop != (i == copiesMisses-1) {
			t.Fatalf("after %d waits ran out, stopped waiting: %v", i+1, stop)
		}
	}
	if n := s.JournalStats().CopyWaitsMissed; n != copiesMisses {
		t.Fatalf("%d missed copy waits counted, want %d", n, copiesMisses)
	}
	until := noWaitUntil()
	for i := range 5 {
		if _, err := b.PutIfAbsent(ctx, fmt.Sprintf("slot/x%d", i), []byte("copy")); err != nil {
			t.Fatal(err)
		}
	}
	if !noWaitUntil().Equal(until) {
		t.Fatal("a PUT within the backoff waited for its copies again")
	}
}

// syncGatedFS holds every file's data sync while gate is set, until
// released, and counts the syncs that are waiting.
type syncGatedFS struct {
	osFS
	gate    atomic.Bool
	waiting atomic.Int32
	release chan struct{}
}

func (g *syncGatedFS) Create(path string) (file, error) {
	f, err := g.osFS.Create(path)
	if err != nil {
		return nil, err
	}
	return syncGatedFile{f, g}, nil
}

type syncGatedFile struct {
	file
	g *syncGatedFS
}

func (f syncGatedFile) Sync() error {
	if f.g.gate.Load() {
		f.g.waiting.Add(1)
		<-f.g.release
		f.g.waiting.Add(-1)
	}
	return f.file.Sync()
}

// Copies that arrive while another group syncs are written by the group
// after it, which waits for the rest of them as a leader's group does:
// two copies queued behind a sync and the third arriving after it share
// one sync (found in star dev's Express path: the copies of a flight came
// during the previous flight's straggler's sync, and 1.5–1.8 syncs went
// to an append).
func TestCopiesQueuedBehindASyncShareTheNext(t *testing.T) {
	g := &syncGatedFS{release: make(chan struct{})}
	buckets := []string{"express-a", "express-b", "express-c"}
	s := journaledStore(t, g, buckets...)
	s.j.copiesWait = time.Minute
	g.gate.Store(true)
	var wg sync.WaitGroup
	put := func(ctx context.Context, bucket, key string) {
		wg.Go(func() {
			if _, err := s.Bucket(bucket).PutIfAbsent(ctx, key, []byte("x")); err != nil {
				t.Error(err)
			}
		})
	}
	put(context.Background(), "express-a", "other")
	poll.Until(t, 10*time.Second, "a sync is under way", func() bool { return g.waiting.Load() == 1 })
	before := s.j.syncs.Load()
	ctx := objstore.WithCopies(context.Background(), len(buckets))
	put(ctx, "express-a", "slot/1")
	put(ctx, "express-b", "slot/1")
	poll.Until(t, 10*time.Second, "two copies queued", func() bool {
		s.j.mu.Lock()
		defer s.j.mu.Unlock()
		return len(s.j.batch) == 2
	})
	g.gate.Store(false)
	close(g.release)
	poll.Until(t, 10*time.Second, "the group after the sync waits for the third copy", func() bool {
		s.j.mu.Lock()
		defer s.j.mu.Unlock()
		return s.j.joined != nil && len(s.j.batch) == 2
	})
	put(ctx, "express-c", "slot/1")
	wg.Wait()
	if n := s.j.syncs.Load() - before; n != 2 {
		t.Fatalf("the sync under way and the copies took %d syncs after it began, want 2 (one for the copies)", n)
	}
}

// A spare segment is filled with zeros, synced, before a PUT opens it:
// records then go over blocks already on the disk, and their data sync
// writes no metadata. The fill follows the size the last segment sealed
// at. (TestCrashConsistencyEveryPrefix replays records written over a
// spare's zeros and past them, at every prefix.)
func TestSpareIsFilledWithZeros(t *testing.T) {
	for _, c := range []struct{ lastSealed, limit, want int64 }{
		{0, segmentBytes, minFill},
		{1, segmentBytes, minFill},
		{100 << 10, segmentBytes, 128 << 10},
		{1 << 20, segmentBytes, 1<<20 + 256<<10},
		{segmentBytes, segmentBytes, segmentBytes},
		{1 << 20, 256, 256},
	} {
		if got := spareFill(c.lastSealed, c.limit); got != c.want {
			t.Errorf("spareFill(%d, %d) = %d, want %d", c.lastSealed, c.limit, got, c.want)
		}
	}

	s := journaledStore(t, osFS{}, "bkt")
	b := s.Bucket("bkt")
	ctx := context.Background()
	body := bytes.Repeat([]byte("x"), 40<<10)
	put := func(key string) {
		t.Helper()
		if _, err := b.PutIfAbsent(ctx, key, body); err != nil {
			t.Fatal(err)
		}
	}
	spareOf := func(id uint64) (path string) {
		poll.Until(t, 10*time.Second, fmt.Sprintf("spare segment %d", id), func() bool {
			s.j.mu.Lock()
			defer s.j.mu.Unlock()
			if s.j.spare != nil && s.j.spare.id == id {
				path = s.j.spare.path
			}
			return path != ""
		})
		return path
	}
	zeros := func(path string, want int) {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != want || slices.ContainsFunc(data, func(c byte) bool { return c != 0 }) {
			t.Fatalf("%s holds %d bytes, not %d zeros", filepath.Base(path), len(data), want)
		}
	}
	put("a")
	put("b")
	// Segment 2 was prepared while segment 1 was new: the least fill.
	zeros(spareOf(2), minFill)
	poll.Until(t, 10*time.Second, "segment 1 retired", func() bool { return s.j.retired.Load() >= 1 })
	put("c") // into segment 2, over its zeros
	put("d") // and past them
	// Segment 1 sealed at two records (about 80 KiB): segment 3 is filled
	// a quarter past, to 128 KiB.
	zeros(spareOf(3), 128<<10)
	for _, key := range []string{"a", "b", "c", "d"} {
		got, err := b.Get(ctx, key, 0, -1)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s: %d bytes, %v", key, len(got), err)
		}
	}
}
