// Package assemble builds a settle job's settled objects: the fetch
// cache (cache.go) reads each transit bundle the job needs once, from the
// first bucket of its epoch's set that holds a good copy, verifies it,
// keeps it on scratch under the job's limits (bundle bytes, footer-entry
// memory) and serves one stream's blocks of a slot ref from disk; Publish
// (publish.go) lays an object's pieces out as one PUT or a multipart
// upload of server-side copies and staged parts, create-once, adopting
// an object already standing at its key; SettledFooter (footer.go) reads
// a settled object's footer back, and TrimThrough (trim.go) the trim
// commands of the warm bundles. What goes in an object, and committing
// it to the catalog, stay in shared/settle.
package assemble

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"unsafe"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// SlotID names one slot of one chain epoch.
type SlotID struct {
	Star  string
	Class meta.Class
	Epoch uint64
	Slot  uint64
}

// Key is the slot's object key.
func (s SlotID) Key() string { return chain.SlotKey(s.Star, s.Class, s.Epoch, s.Slot) }

// Slot is a bundle in the fetch cache: verified, on local disk, with
// its footer indexed by stream.
type Slot struct {
	ready chan struct{}
	err   error

	// path is the bundle's scratch file, opened for each read: an era
	// warms tens of thousands of bundles, and a descriptor held for each
	// exhausted the process's (a directory store's star, and a Lambda's
	// 1,024, fail every open then).
	path   string
	bucket string // the bucket the verified copy came from: a copy source
	size   int64
	// extents of each stream, in offset order.
	extents map[string][]format.Extent
}

// Bucket is the bucket the verified copy came from: a copy source.
func (w *Slot) Bucket() string { return w.bucket }

// ReadAt reads n bytes at object offset off.
func (w *Slot) ReadAt(off, n int64) ([]byte, error) {
	f, err := os.Open(w.path)
	if err != nil {
		return nil, fmt.Errorf("settle: fetch cache read [%d,+%d): %w", off, n, err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("settle: fetch cache read [%d,+%d): %w", off, n, err)
	}
	return b, nil
}

// Blocks returns the extents of stream id that tile slot ref sl exactly.
func (w *Slot) Blocks(id string, sl meta.SlotRef) ([]format.Extent, error) {
	xs := w.extents[id]
	i := sort.Search(len(xs), func(i int) bool { return xs[i].Offset >= sl.Offset })
	off, seq := sl.Offset, sl.FirstSeq
	j := i
	for ; j < len(xs) && off < sl.Offset+sl.Length; j++ {
		if xs[j].Offset != off || xs[j].FirstSeq != seq {
			break
		}
		off += uint64(xs[j].Length)
		seq = xs[j].EndSeq()
	}
	if j == i || off != sl.Offset+sl.Length || seq != sl.FirstSeq+sl.Count {
		return nil, fmt.Errorf("settle: slot %d: stream %s's blocks do not tile its ref (seqs %d+%d, bytes [%d,+%d))",
			sl.Slot, id, sl.FirstSeq, sl.Count, sl.Offset, sl.Length)
	}
	return xs[i:j], nil
}

// epochInfo is what reading a slot needs from its epoch record.
type epochInfo struct {
	buckets []string
	nonce   format.Nonce
}

// Cache warms bundles into a scratch directory, each read once
// however many streams need it, and serves ranges from disk.
type Cache struct {
	dir     string
	meta    meta.Store
	objects objstore.Store
	warmed  func(bytes int)
	mu      sync.Mutex
	slots   map[SlotID]*Slot
	epochs  map[string]epochInfo
	bytes   int64 // bundle bytes read (and held on scratch)
	bundles int

	// Limits: bundle bytes on scratch and footer-entry memory, and the
	// streams whose extents are indexed (nil: every stream).
	maxBytes, maxFooter int64
	footer              int64 // footer-entry memory held
	only                map[string]bool
}

// ErrScratchBudget means a bundle would pass a settle job's scratch or
// footer-memory limit (Config.ScratchBytes, FooterBytes). Settle splits an
// era into rounds before it gets there; a stream whose own window needs
// more than the limits fails with it.
var ErrScratchBudget = errors.New("settle: the settle job's scratch budget is spent")

// extentMem is the footer memory one indexed extent takes.
func extentMem(x format.Extent) int64 {
	return int64(unsafe.Sizeof(x)) + int64(len(x.StreamID)+len(x.FencingToken))
}

// Options are a cache's stores, scratch and limits.
type Options struct {
	Meta    meta.Store     // the epoch records (bucket set, nonce)
	Objects objstore.Store // the transit buckets
	// ScratchDir holds the cache's own temporary directory ("": the
	// system's); MaxBytes and MaxFooter bound the bundle bytes on scratch
	// and the footer-entry memory (a bundle past either: ErrScratchBudget).
	ScratchDir          string
	MaxBytes, MaxFooter int64
	// Only, when not nil, names the streams whose extents are indexed.
	Only map[string]bool
	// Warmed, when not nil, is told the size of each bundle read.
	Warmed func(bytes int)
}

// New makes a cache in a fresh directory under o.ScratchDir.
func New(o Options) (*Cache, error) {
	dir, err := os.MkdirTemp(o.ScratchDir, "settle-*")
	if err != nil {
		return nil, fmt.Errorf("settle: fetch cache: %w", err)
	}
	return &Cache{dir: dir, meta: o.Meta, objects: o.Objects, warmed: o.Warmed, slots: map[SlotID]*Slot{}, epochs: map[string]epochInfo{},
		maxBytes: o.MaxBytes, maxFooter: o.MaxFooter, only: o.Only}, nil
}

// Dir is the cache's scratch directory.
func (c *Cache) Dir() string { return c.dir }

// Stats are the bundles the cache holds, their bytes on scratch and the
// memory of their indexed footer entries.
type Stats struct {
	Bundles       int
	Bytes, Footer int64
}

// Stats reads the cache's holdings.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Bundles: c.bundles, Bytes: c.bytes, Footer: c.footer}
}

// Close removes the scratch directory.
func (c *Cache) Close() error {
	return os.RemoveAll(c.dir)
}

// epoch reads (once) the bucket set and nonce of a chain epoch.
func (c *Cache) epoch(ctx context.Context, star string, class meta.Class, epoch uint64) (epochInfo, error) {
	k := meta.EpochKey(star, class, epoch)
	c.mu.Lock()
	info, ok := c.epochs[k.PK+k.SK]
	c.mu.Unlock()
	if ok {
		return info, nil
	}
	it, err := c.meta.Get(ctx, k.PK, k.SK)
	if err != nil {
		return info, fmt.Errorf("settle: epoch record %s/%s: %w", k.PK, k.SK, err)
	}
	var e meta.Epoch
	if err := meta.Decode(it.Val, &e); err != nil {
		return info, err
	}
	n, err := chain.ParseNonce(e.Params.Nonce)
	if err != nil {
		return info, err
	}
	if len(e.Params.Buckets) == 0 {
		return info, fmt.Errorf("settle: epoch record %s/%s has no buckets", k.PK, k.SK)
	}
	info = epochInfo{buckets: e.Params.Buckets, nonce: n}
	c.mu.Lock()
	c.epochs[k.PK+k.SK] = info
	c.mu.Unlock()
	return info, nil
}

// Get returns the warm slot, reading it first if no one has.
func (c *Cache) Get(ctx context.Context, id SlotID) (*Slot, error) {
	c.mu.Lock()
	w, ok := c.slots[id]
	if !ok {
		w = &Slot{ready: make(chan struct{})}
		c.slots[id] = w
	}
	c.mu.Unlock()
	if ok {
		select {
		case <-w.ready:
			return w, w.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	w.err = c.warm(ctx, id, w)
	if w.err != nil {
		// A failed warm is not cached: a later caller (or the re-run) tries
		// again.
		c.mu.Lock()
		delete(c.slots, id)
		c.mu.Unlock()
	}
	close(w.ready)
	return w, w.err
}

// warm reads the whole bundle from the first bucket of the set holding a
// good copy (its epoch, slot and nonce, every block's CRC), writes it to
// scratch, and indexes its footer.
func (c *Cache) warm(ctx context.Context, id SlotID, w *Slot) error {
	info, err := c.epoch(ctx, id.Star, id.Class, id.Epoch)
	if err != nil {
		return err
	}
	key := id.Key()
	var errs []error
	for i := range info.buckets {
		name := info.buckets[(int(id.Slot)+i)%len(info.buckets)] // spread reads over the set
		body, err := c.objects.Bucket(name).Get(ctx, key, 0, -1)
		if err == nil {
			err = c.accept(id, info.nonce, name, body, w)
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrScratchBudget) {
			return err // another copy is no smaller
		}
		errs = append(errs, fmt.Errorf("bucket %s: %w", name, err))
	}
	return fmt.Errorf("settle: warm slot %s: no good copy in the set: %w", key, errors.Join(errs...))
}

func (c *Cache) accept(id SlotID, nonce format.Nonce, bucket string, body []byte, w *Slot) error {
	env, f, err := format.VerifyBundle(body)
	if err != nil {
		return err
	}
	if env.Epoch != id.Epoch || env.Slot != id.Slot || env.Nonce != nonce {
		return fmt.Errorf("%w: envelope names epoch %d slot %d, not this epoch's flight", format.ErrCorrupt, env.Epoch, env.Slot)
	}
	var footer int64
	for _, x := range f.Extents {
		if c.only == nil || c.only[x.StreamID] {
			footer += extentMem(x)
		}
	}
	// Reserve before the write, so concurrent warms cannot pass the limits
	// together.
	c.mu.Lock()
	if c.bytes+int64(len(body)) > c.maxBytes || c.footer+footer > c.maxFooter {
		held, heldF := c.bytes, c.footer
		c.mu.Unlock()
		return fmt.Errorf("%w: slot %d (%d bytes, %d of footer entries) on top of %d bytes and %d of entries held (limits %d, %d)",
			ErrScratchBudget, id.Slot, len(body), footer, held, heldF, c.maxBytes, c.maxFooter)
	}
	c.bytes += int64(len(body))
	c.footer += footer
	c.bundles++
	c.mu.Unlock()
	unreserve := func() {
		c.mu.Lock()
		c.bytes -= int64(len(body))
		c.footer -= footer
		c.bundles--
		c.mu.Unlock()
	}
	path := filepath.Join(c.dir, strconv.FormatUint(id.Epoch, 10)+"-"+strconv.FormatUint(id.Slot, 10)+"-"+id.Star+"-"+string(id.Class))
	if err := os.WriteFile(path, body, 0o600); err != nil {
		unreserve()
		return fmt.Errorf("settle: fetch cache: %w", err)
	}
	w.path, w.bucket, w.size = path, bucket, int64(len(body))
	w.extents = map[string][]format.Extent{}
	for _, x := range f.Extents {
		if c.only == nil || c.only[x.StreamID] {
			w.extents[x.StreamID] = append(w.extents[x.StreamID], x)
		}
	}
	if c.warmed != nil {
		c.warmed(len(body))
	}
	return nil
}
