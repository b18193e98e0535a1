package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/starlog/starlog/shared/objstore"
)

// MaxJournaled is the largest body a create-once PUT appends to the
// journal; larger ones, and multipart uploads, are written to their own
// file at once (the direct path).
const MaxJournaled = 64 << 10

const (
	// journalDir holds the journal's segments, beside the buckets (not a
	// bucket name: those start with a letter or digit).
	journalDir = ".starlog-journal"
	// segmentBytes seals a segment once this much is in it.
	segmentBytes = 4 << 20
	// materializeAfter seals the open segment and materializes it once its
	// first record is this old. Each materialization ends in a syncfs(2),
	// whose flush the PUTs' own syncs queue behind: at 50 ms, sixteen
	// producers' appends through star dev ran 11 % slower (docs/bench.md).
	materializeAfter = 500 * time.Millisecond
	// maxUnretired bounds the journaled bytes not yet retired (held in
	// memory for reads): a PUT past it waits for the materializer.
	maxUnretired = 32 << 20
	// minFill is the fewest zeros a spare segment is filled with ahead of
	// use (spareFill): a record written over zeros already on the disk is
	// made durable by a data sync that writes no metadata (a 1 KiB
	// record's fdatasync on this machine's ext4: 97–117 µs at the median
	// against 143–179 µs appending, docs/bench.md). Past the filled bytes
	// the segment grows as before.
	minFill = 64 << 10
	// retryAfter spaces the materializer's attempts after an error.
	retryAfter = 100 * time.Millisecond
	// copiesWait bounds how long a group is held open for the other copies
	// of its objects (objstore.WithCopies); after copiesMisses waits in a
	// row ran out (the copies go to other stores), groups stop waiting for
	// copiesBackoff.
	copiesWait    = 500 * time.Microsecond
	copiesMisses  = 8
	copiesBackoff = time.Second
)

// ErrJournalFailed is the refusal of every write after a journal write or
// sync failed: what reached the disk is unknown (a failed fsync may have
// dropped dirty pages), so the store stops writing until it is reopened,
// whose replay settles it.
var ErrJournalFailed = errors.New("fs: journal failed; reopen the store")

var errClosed = errors.New("fs: store closed")

type entryKind uint8

const (
	kindPut    entryKind = iota // a journaled PUT
	kindDirect                  // a direct-path PUT in progress (holds the key)
	kindDelete                  // a delete in progress (holds the key)
)

// jentry is one key the journal holds: a journaled PUT (pending until its
// group's sync, then durable until its segment retires) or a hold on the
// key by a direct PUT or a delete.
type jentry struct {
	kind    entryKind
	id      string // bucket + "\x00" + key
	bucket  string
	key     string
	body    []byte
	stamp   int64 // the object's mtime, ns
	seq     uint64
	durable bool
	copies  int // objstore.Copies of its PUT: the copies of its object started together
	seg     *segment
	done    chan struct{} // closed when a pending PUT or a hold ends
	err     error         // a pending PUT's outcome
}

type segment struct {
	id      uint64
	path    string
	f       file
	size    int64
	entries []*jentry // durable records, in order
	first   time.Time // when its first group was synced
	sealed  bool
}

// journal is the store's append-only journal of small create-once PUTs
// (docs/design.md §4.1): a PUT appends one record, one data sync covers
// every PUT that arrived while the previous sync ran (group commit), an
// index in memory serves the journaled keys at once, and a materializer
// writes each sealed segment's records to their own files, then retires
// the segment. Only one process may write a journaled store: Open takes an
// exclusive lock on the root.
type journal struct {
	fsys fileSys
	root string
	dir  string

	mu       sync.Mutex
	live     map[string]*jentry // keys journaled or held
	folders  map[string]int     // bucket+"\x00"+prefix: live PUTs below it
	buf      []byte             // records awaiting the next sync
	batch    []*jentry          // their entries
	flushing bool
	cur      *segment // the open segment (nil: the next flush takes spare or makes one)
	segs     []*segment
	nextSeg  uint64
	// spare is a segment without records (zeros, synced), its name
	// already durable, that the materializer prepares once a segment is
	// put to use, so the PUT that opens the next one does not wait for a
	// create, a fill and their syncs.
	spare    *segment
	lastSeg  uint64 // the newest segment's id put to use
	spareFor uint64 // lastSeg when the materializer last prepared a spare
	// fillMax bounds a spare's zeros (segmentBytes; a test makes it
	// small), and lastSealed is the size the last segment sealed at,
	// which a spare is filled to a quarter past.
	fillMax    int64
	lastSealed int64
	seq        uint64
	bytes      int64  // journaled bytes not yet retired
	urgent     uint64 // retire segments up to this id now (ids start at 1): a delete waits
	failed     error
	closing    bool
	changed    chan struct{} // closed and replaced on every change
	stopped    chan struct{}

	syncs, records, retired, copyMisses atomic.Uint64
	stamp                               func() int64
	// joined, when not nil, is closed by the next PUT to join the group a
	// leader holds open for its object's copies (awaitCopiesLocked).
	joined chan struct{}
	// copiesWait is copiesWait (tests change it); missed counts the waits
	// in a row that ran out, and noWaitUntil is when groups may wait for
	// copies again after copiesMisses of them.
	copiesWait  time.Duration
	missed      int
	noWaitUntil time.Time
}

func newJournal(fsys fileSys, root string, stamp func() int64) *journal {
	return &journal{
		fsys: fsys, root: root, dir: filepath.Join(root, journalDir),
		live: map[string]*jentry{}, folders: map[string]int{},
		changed: make(chan struct{}), stopped: make(chan struct{}),
		stamp: stamp, copiesWait: copiesWait, fillMax: segmentBytes,
	}
}

func (j *journal) notifyLocked() {
	close(j.changed)
	j.changed = make(chan struct{})
}

// waitLocked releases the lock until the journal changes or ctx ends.
func (j *journal) waitLocked(ctx context.Context) error {
	ch := j.changed
	j.mu.Unlock()
	defer j.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (j *journal) writableLocked() error {
	if j.failed != nil {
		return fmt.Errorf("%w: %w", ErrJournalFailed, j.failed)
	}
	if j.closing {
		return errClosed
	}
	return nil
}

func (j *journal) addLocked(e *jentry) {
	j.live[e.id] = e
	if e.kind != kindDelete {
		for _, p := range objstore.ParentKeys(e.key) {
			j.folders[e.bucket+"\x00"+p]++
		}
	}
}

func (j *journal) removeLocked(e *jentry) {
	if j.live[e.id] != e {
		return
	}
	delete(j.live, e.id)
	if e.kind != kindDelete {
		for _, p := range objstore.ParentKeys(e.key) {
			id := e.bucket + "\x00" + p
			if j.folders[id]--; j.folders[id] <= 0 {
				delete(j.folders, id)
			}
		}
	}
}

// conflictLocked applies the nesting rule to the keys the journal holds.
func (j *journal) conflictLocked(bucket, key string) error {
	for _, p := range objstore.ParentKeys(key) {
		if e := j.live[bucket+"\x00"+p]; e != nil && e.kind != kindDelete {
			return fmt.Errorf("%w: %q is below key %q", objstore.ErrKeyConflict, key, p)
		}
	}
	if j.folders[bucket+"\x00"+key] > 0 {
		return fmt.Errorf("%w: %q is a folder of existing keys", objstore.ErrKeyConflict, key)
	}
	return nil
}

// diskCheck applies create-once and the nesting rule to the files: one
// lstat in the common case (a missing name whose folders are folders).
func diskCheck(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.IsDir():
		d, err := os.Open(path)
		if err != nil {
			return nil // removed meanwhile
		}
		names, _ := d.Readdirnames(1)
		d.Close()
		if len(names) > 0 {
			return fmt.Errorf("%w: a folder of existing keys", objstore.ErrKeyConflict)
		}
		return nil // an empty folder gives way to the key
	case err == nil:
		return objstore.ErrExists
	case errors.Is(err, syscall.ENOENT):
		return nil
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: below an existing key", objstore.ErrKeyConflict)
	}
	return err
}

// put journals a create-once PUT and returns once its group is synced.
func (j *journal) put(ctx context.Context, b *bucket, key string, body []byte) (objstore.ObjectInfo, error) {
	id := b.name + "\x00" + key
	j.mu.Lock()
	for {
		if err := j.writableLocked(); err != nil {
			j.mu.Unlock()
			return objstore.ObjectInfo{}, err
		}
		if e := j.live[id]; e != nil {
			if e.kind == kindPut && e.durable {
				j.mu.Unlock()
				return objstore.ObjectInfo{}, objstore.ErrExists
			}
		} else if err := j.conflictLocked(b.name, key); err != nil {
			j.mu.Unlock()
			return objstore.ObjectInfo{}, err
		} else if j.bytes < maxUnretired {
			if err := diskCheck(b.path(key)); err != nil {
				j.mu.Unlock()
				return objstore.ObjectInfo{}, err
			}
			break
		}
		// A pending PUT or a hold on the key, or the journal is full:
		// wait for the outcome, or for the materializer.
		if err := j.waitLocked(ctx); err != nil {
			j.mu.Unlock()
			return objstore.ObjectInfo{}, err
		}
	}
	j.seq++
	body = bytes.Clone(body) // the caller may reuse its buffer
	e := &jentry{kind: kindPut, id: id, bucket: b.name, key: key, body: body, stamp: j.stamp(), seq: j.seq, copies: objstore.Copies(ctx), done: make(chan struct{})}
	j.buf = appendRecord(j.buf, record{seq: e.seq, stamp: e.stamp, bucket: e.bucket, key: key, body: body})
	j.batch = append(j.batch, e)
	j.addLocked(e)
	j.bytes += int64(len(body))
	if j.joined != nil {
		close(j.joined)
		j.joined = nil
	}
	if !j.flushing {
		// Lead this group: its sync covers everyone queued so far.
		j.flushing = true
		j.flushLocked()
	}
	j.mu.Unlock()
	select {
	case <-e.done:
	case <-ctx.Done():
		return objstore.ObjectInfo{}, &objstore.IndefiniteError{Err: ctx.Err()}
	}
	if e.err != nil {
		return objstore.ObjectInfo{}, e.err
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(body)), ETag: stampETag(e.stamp)}, nil
}

// awaitCopiesLocked holds the group about to be written open until every
// object it holds copies of has all of them queued (a flight's copies are
// started together, one goroutine per bucket, and marked with
// objstore.WithCopies), for at most copiesWait: otherwise the first copy
// syncs alone and a W=2 commit waits for two syncs in a row. The copies
// are runnable already, so they come within microseconds when they are
// this store's (on a busy machine a wait sometimes runs out all the same);
// after copiesMisses waits in a row ran out, groups stop waiting for
// copiesBackoff, which bounds what copies sent to other stores cost. (It
// replaces a runtime.Gosched of the group's leader, which queued it
// behind every runnable goroutine: up to 4.4 ms behind a materialization's
// workers in a trace of star dev.)
func (j *journal) awaitCopiesLocked() {
	var timer *time.Timer
	for j.missingCopiesLocked() {
		if time.Now().Before(j.noWaitUntil) {
			return
		}
		if timer == nil {
			timer = time.NewTimer(j.copiesWait)
			defer timer.Stop()
		}
		if j.joined == nil {
			j.joined = make(chan struct{})
		}
		ch := j.joined
		j.mu.Unlock()
		select {
		case <-ch:
			j.mu.Lock()
		case <-timer.C:
			j.mu.Lock()
			if !j.missingCopiesLocked() {
				break // they came, but the waiter ran late
			}
			j.copyMisses.Add(1)
			if j.missed++; j.missed >= copiesMisses {
				j.missed = 0
				j.noWaitUntil = time.Now().Add(copiesBackoff)
			}
			return
		}
	}
	if timer != nil {
		j.missed = 0 // the copies came
	}
}

// missingCopiesLocked reports whether a queued PUT's object has fewer of
// its copies queued than its PUT said were started.
func (j *journal) missingCopiesLocked() bool {
	var queued map[string]int
	for _, e := range j.batch {
		if e.copies <= 1 {
			continue
		}
		if queued == nil {
			queued = map[string]int{}
		}
		queued[e.key]++
	}
	for _, e := range j.batch {
		if e.copies > 1 && queued[e.key] < e.copies {
			return true
		}
	}
	return false
}

// flushLocked writes and syncs the queued records as one group, once the
// copies of its objects have joined it (awaitCopiesLocked), with the lock
// held on entry and exit (released for the waits and the I/O). Records
// queued meanwhile are flushed by a goroutine of their own, so the leader
// returns after its own group.
func (j *journal) flushLocked() {
	j.awaitCopiesLocked()
	buf, batch := j.buf, j.batch
	j.buf, j.batch = nil, nil
	seg, err := j.cur, j.failed
	fresh, id := false, uint64(0)
	if err == nil && seg == nil {
		if j.spare != nil {
			seg, j.spare, fresh = j.spare, nil, true
			j.lastSeg = seg.id
		} else {
			id = j.nextSeg
			j.nextSeg++
			j.lastSeg = id
		}
	}
	j.mu.Unlock()
	if id != 0 {
		seg, err = j.newSegment(id)
		fresh = err == nil
	}
	if err == nil {
		if _, err = seg.f.WriteAt(buf, seg.size); err == nil {
			err = seg.f.Sync()
		}
	}
	j.mu.Lock()
	if fresh {
		j.cur = seg
		j.segs = append(j.segs, seg)
	}
	if err != nil {
		if j.failed == nil {
			j.failed = fmt.Errorf("fs: journal: %w", err)
		}
		for _, e := range batch {
			e.err = &objstore.IndefiniteError{Err: j.failed}
			j.removeLocked(e)
			j.bytes -= int64(len(e.body))
			close(e.done)
		}
	} else {
		j.syncs.Add(1)
		j.records.Add(uint64(len(batch)))
		if seg.first.IsZero() {
			seg.first = time.Now()
		}
		seg.size += int64(len(buf))
		for _, e := range batch {
			e.durable, e.seg = true, seg
			seg.entries = append(seg.entries, e)
			close(e.done)
		}
		// The flusher seals too: under steady load it hands off to the
		// next group without ever going idle for the materializer.
		if seg.size >= segmentBytes || j.dueLocked(seg) {
			j.sealLocked()
		}
	}
	j.notifyLocked()
	if len(j.buf) > 0 {
		go func() {
			j.mu.Lock()
			j.flushLocked()
			j.mu.Unlock()
		}()
		return
	}
	j.flushing = false
}

// newSegment creates segment id's file and makes its name durable, so a
// replay finds every record acknowledged in it. Ids are taken under the
// lock, in the order segments are put to use.
func (j *journal) newSegment(id uint64) (*segment, error) {
	path := filepath.Join(j.dir, fmt.Sprintf("%016x.seg", id))
	f, err := j.fsys.Create(path)
	if err != nil {
		return nil, err
	}
	if err := j.fsys.SyncDir(j.dir); err != nil {
		f.Close()
		return nil, err
	}
	return &segment{id: id, path: path, f: f}, nil
}

// sealLocked closes the open segment to new records; the flusher must not
// be writing to it.
func (j *journal) sealLocked() {
	if j.cur == nil {
		return
	}
	j.cur.sealed = true
	j.lastSealed = j.cur.size
	j.cur.f.Close()
	j.cur = nil
}

// lookup returns key's journaled PUT if it is durable and not retired.
func (j *journal) lookup(bucket, key string) *jentry {
	j.mu.Lock()
	defer j.mu.Unlock()
	if e := j.live[bucket+"\x00"+key]; e != nil && e.kind == kindPut && e.durable {
		return e
	}
	return nil
}

// snapshot returns the durable journaled PUTs of bucket under prefix.
func (j *journal) snapshot(bucket, prefix string) map[string]*jentry {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string]*jentry{}
	for _, e := range j.live {
		if e.kind == kindPut && e.durable && e.bucket == bucket && strings.HasPrefix(e.key, prefix) {
			out[e.key] = e
		}
	}
	return out
}

// hold takes key for a direct PUT (kindDirect: create-once and the nesting
// rule against the journal's keys) or a delete (kindDelete: the key's
// journaled PUT is retired first, so no segment replays it after the
// delete). Release ends the hold.
func (j *journal) hold(ctx context.Context, bucket, key string, kind entryKind) (release func(), err error) {
	id := bucket + "\x00" + key
	j.mu.Lock()
	defer j.mu.Unlock()
	for {
		if err := j.writableLocked(); err != nil {
			return nil, err
		}
		e := j.live[id]
		if e == nil {
			break
		}
		if e.kind == kindPut && e.durable {
			if kind == kindDirect {
				return nil, objstore.ErrExists
			}
			if e.seg.id > j.urgent {
				j.urgent = e.seg.id
				j.notifyLocked()
			}
		}
		if err := j.waitLocked(ctx); err != nil {
			return nil, err
		}
	}
	if kind == kindDirect {
		if err := j.conflictLocked(bucket, key); err != nil {
			return nil, err
		}
	}
	h := &jentry{kind: kind, id: id, bucket: bucket, key: key, done: make(chan struct{})}
	j.addLocked(h)
	return func() {
		j.mu.Lock()
		j.removeLocked(h)
		close(h.done)
		j.notifyLocked()
		j.mu.Unlock()
	}, nil
}
