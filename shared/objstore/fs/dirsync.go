package fs

import (
	"sync"
	"sync/atomic"
)

// dirSyncs shares directory fsyncs between concurrent publishes into one
// folder (a chain's slots of one epoch all land in one). A publish needs a
// sync of its folder that began after its link: one already running began
// earlier and may miss it, so the publish waits for that one and then joins
// the next, which covers everyone who linked meanwhile. Under concurrency
// N publishes into a folder cost about two directory fsyncs instead of N;
// alone, a publish costs one, as before. What is made durable, and when a
// publish returns, do not change: only who calls fsync.
type dirSyncs struct {
	sync func(dir string) error // syncDir; tests substitute it

	mu   sync.Mutex
	dirs map[string]*dirSync

	calls atomic.Uint64 // publishes that needed a directory sync
	syncs atomic.Uint64 // fsyncs actually issued
}

type dirSync struct {
	refs     int // callers inside sync for this folder
	running  bool
	started  uint64        // generations begun
	finished uint64        // the generation that finished last
	err      error         // its result
	done     chan struct{} // closed when the running generation finishes
}

func newDirSyncs() *dirSyncs {
	return &dirSyncs{sync: syncDir, dirs: map[string]*dirSync{}}
}

// syncDir returns once a directory fsync of dir that began after the call
// has finished, with that fsync's error.
func (d *dirSyncs) syncDir(dir string) error {
	d.calls.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.dirs[dir]
	if s == nil {
		s = &dirSync{}
		d.dirs[dir] = s
	}
	s.refs++
	defer func() {
		if s.refs--; s.refs == 0 {
			delete(d.dirs, dir)
		}
	}()
	want := s.started + 1 // the first generation to begin after now
	for s.finished < want {
		if s.running {
			done := s.done
			d.mu.Unlock()
			<-done
			d.mu.Lock()
			continue
		}
		s.running = true
		s.started++
		gen, done := s.started, make(chan struct{})
		s.done = done
		d.mu.Unlock()
		d.syncs.Add(1)
		err := d.sync(dir)
		d.mu.Lock()
		s.running, s.finished, s.err = false, gen, err
		close(done)
	}
	// The last finished generation began after the call (want ≤ it), so it
	// covers this caller's link whatever earlier ones returned.
	return s.err
}
