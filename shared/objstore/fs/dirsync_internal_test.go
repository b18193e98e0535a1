package fs

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/poll"
)

// fakeSyncs is a directory fsync the test releases by hand, one at a time.
type fakeSyncs struct {
	began   chan string
	release chan error
}

func newFake() (*dirSyncs, *fakeSyncs) {
	f := &fakeSyncs{began: make(chan string, 16), release: make(chan error)}
	d := newDirSyncs()
	d.sync = func(dir string) error {
		f.began <- dir
		return <-f.release
	}
	return d, f
}

const long = 30 * time.Second // liveness bound, not speed

func (f *fakeSyncs) await(t *testing.T) string {
	t.Helper()
	select {
	case dir := <-f.began:
		return dir
	case <-time.After(long):
		t.Fatal("no fsync began")
		return ""
	}
}

// Callers that arrive while a sync runs do not take it (it began before
// their links): they wait for it and share the next one. Three callers,
// two fsyncs; nobody returns before a sync that began after its call.
func TestDirSyncsShareTheNextSync(t *testing.T) {
	d, f := newFake()
	results := make(chan string, 3)
	call := func(name string) {
		if err := d.syncDir("/x"); err != nil {
			t.Error(err)
		}
		results <- name
	}
	go call("a")
	f.await(t) // a's sync (generation 1) is running

	var wg sync.WaitGroup
	wg.Go(func() { call("b") })
	wg.Go(func() { call("c") })
	poll.Until(t, long, "three callers on /x", func() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.dirs["/x"].refs == 3 })

	f.release <- nil // generation 1 done: covers a only
	if got := <-results; got != "a" {
		t.Fatalf("%s returned on a sync that began before its call", got)
	}
	f.await(t) // generation 2, for b and c
	select {
	case got := <-results:
		t.Fatalf("%s returned before the sync covering it finished", got)
	default:
	}
	f.release <- nil
	wg.Wait()
	if n := len(results); n != 2 {
		t.Fatalf("%d of b and c returned", n)
	}
	if calls, syncs := d.calls.Load(), d.syncs.Load(); calls != 3 || syncs != 2 {
		t.Fatalf("%d calls, %d fsyncs; want 3 and 2", calls, syncs)
	}
	if len(d.dirs) != 0 {
		t.Fatalf("folder state left behind: %v", d.dirs)
	}
}

// A failed fsync fails the callers it covers; a later caller gets its own.
func TestDirSyncsReportTheCoveringError(t *testing.T) {
	d, f := newFake()
	boom := errors.New("EIO")
	errc := make(chan error, 1)
	go func() { errc <- d.syncDir("/x") }()
	f.await(t)
	f.release <- boom
	if err := <-errc; !errors.Is(err, boom) {
		t.Fatalf("err %v, want the fsync's", err)
	}
	go func() { errc <- d.syncDir("/x") }()
	f.await(t)
	f.release <- nil
	if err := <-errc; err != nil {
		t.Fatalf("a fresh sync after a failed one: %v", err)
	}
}

// Different folders never wait for each other.
func TestDirSyncsFoldersIndependent(t *testing.T) {
	d, f := newFake()
	done := make(chan string, 2)
	go func() { d.syncDir("/a"); done <- "/a" }()
	f.await(t)
	go func() { d.syncDir("/b"); done <- "/b" }()
	f.await(t) // /b's sync began while /a's is still running
	f.release <- nil
	f.release <- nil
	<-done
	<-done
}

// Concurrent creates into one folder on a real store: every one succeeds
// and is readable, and they share directory fsyncs (never more than one
// per create).
func TestConcurrentPutsShareDirSyncs(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBucket("bkt"); err != nil {
		t.Fatal(err)
	}
	b := s.Bucket("bkt")
	var wg sync.WaitGroup
	const n = 64
	for i := range n {
		wg.Go(func() {
			key := "chains/x/" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			if _, err := b.PutIfAbsent(t.Context(), key, []byte(key)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	needed, issued := s.DirSyncs()
	if needed < n || issued > needed {
		t.Fatalf("%d publishes needed a directory fsync, %d issued", needed, issued)
	}
	t.Logf("%d creates: %d directory syncs needed, %d issued", n, needed, issued)
}
