package fs

import (
	"context"
	"fmt"
	"path/filepath"

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

// A flight's copies reach the journal together (chain.Writer starts one
// goroutine per bucket, its context marked with objstore.WithCopies): the
// leader holds its group open until all three have queued, so they share
// one data sync and a W=2 commit waits for one fdatasync, not two in a
// row. The test lengthens the wait's bound so that a slow machine cannot
// end it first.
func TestCopiesStartedTogetherShareOneSync(t *testing.T) {
	s, err := Open(t.TempDir(), Options{Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	buckets := []string{"express-a", "express-b", "express-c"}
	for _, name := range buckets {
		if err := s.CreateBucket(name); err != nil {
			t.Fatal(err)
		}
	}
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
	if !s.j.noWaitUntil.IsZero() {
		t.Fatal("a leader's wait for its copies ran out")
	}
}

// Copies marked for three buckets of which this store has one (the others
// are other stores) cost the leader one bounded wait, after which leaders
// stop waiting for copiesBackoff: a PUT alone is not held again.
func TestCopiesElsewhereCostOneBoundedWait(t *testing.T) {
	s, err := Open(t.TempDir(), Options{Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateBucket("express-a"); err != nil {
		t.Fatal(err)
	}
	s.j.copiesWait = 20 * time.Millisecond
	b := s.Bucket("express-a")
	ctx := objstore.WithCopies(context.Background(), 3)
	start := time.Now()
	if _, err := b.PutIfAbsent(ctx, "slot/1", []byte("copy")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Fatalf("the first PUT took %v: it did not wait for its copies", took)
	}
	s.j.mu.Lock()
	until := s.j.noWaitUntil
	s.j.mu.Unlock()
	if time.Until(until) <= 0 {
		t.Fatal("the wait ran out but leaders did not stop waiting")
	}
	for i := range 5 {
		if _, err := b.PutIfAbsent(ctx, fmt.Sprintf("slot/%d", i+2), []byte("copy")); err != nil {
			t.Fatal(err)
		}
	}
	s.j.mu.Lock()
	again := s.j.noWaitUntil
	s.j.mu.Unlock()
	if !again.Equal(until) {
		t.Fatal("a PUT within the backoff waited for its copies again")
	}
}
