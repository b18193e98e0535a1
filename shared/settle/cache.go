package settle

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

// slotID names one slot of one chain epoch.
type slotID struct {
	star  string
	class meta.Class
	epoch uint64
	slot  uint64
}

func (s slotID) key() string { return chain.SlotKey(s.star, s.class, s.epoch, s.slot) }

// warmSlot is a bundle in the fetch cache: verified, on local disk, with
// its footer indexed by stream.
type warmSlot struct {
	ready chan struct{}
	err   error

	file   *os.File
	bucket string // the bucket the verified copy came from: a copy source
	size   int64
	// extents of each stream, in offset order.
	extents map[string][]format.Extent
}

// readAt reads n bytes at object offset off.
func (w *warmSlot) readAt(off, n int64) ([]byte, error) {
	b := make([]byte, n)
	if _, err := w.file.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("settle: fetch cache read [%d,+%d): %w", off, n, err)
	}
	return b, nil
}

// blocks returns the extents of stream id that tile slot ref sl exactly.
func (w *warmSlot) blocks(id string, sl meta.SlotRef) ([]format.Extent, error) {
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

// fetchCache warms bundles into a scratch directory, each read once
// however many streams need it, and serves ranges from disk.
type fetchCache struct {
	dir     string
	st      *Stores
	m       *Metrics
	class   string
	mu      sync.Mutex
	slots   map[slotID]*warmSlot
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

func newFetchCache(st *Stores, class meta.Class) (*fetchCache, error) {
	dir, err := os.MkdirTemp(st.cfg().ScratchDir, "settle-*")
	if err != nil {
		return nil, fmt.Errorf("settle: fetch cache: %w", err)
	}
	cfg := st.cfg()
	return &fetchCache{dir: dir, st: st, m: st.metrics(), class: string(class), slots: map[slotID]*warmSlot{}, epochs: map[string]epochInfo{},
		maxBytes: cfg.ScratchBytes, maxFooter: cfg.FooterBytes}, nil
}

// close removes the scratch directory.
func (c *fetchCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.slots {
		select {
		case <-w.ready:
			if w.file != nil {
				w.file.Close()
			}
		default: // still warming: its goroutine ended with the job's context
		}
	}
	return os.RemoveAll(c.dir)
}

// epoch reads (once) the bucket set and nonce of a chain epoch.
func (c *fetchCache) epoch(ctx context.Context, star string, class meta.Class, epoch uint64) (epochInfo, error) {
	k := meta.EpochKey(star, class, epoch)
	c.mu.Lock()
	info, ok := c.epochs[k.PK+k.SK]
	c.mu.Unlock()
	if ok {
		return info, nil
	}
	it, err := c.st.Meta.Get(ctx, k.PK, k.SK)
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

// get returns the warm slot, reading it first if no one has.
func (c *fetchCache) get(ctx context.Context, id slotID) (*warmSlot, error) {
	c.mu.Lock()
	w, ok := c.slots[id]
	if !ok {
		w = &warmSlot{ready: make(chan struct{})}
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
func (c *fetchCache) warm(ctx context.Context, id slotID, w *warmSlot) error {
	info, err := c.epoch(ctx, id.star, id.class, id.epoch)
	if err != nil {
		return err
	}
	key := id.key()
	var errs []error
	for i := range info.buckets {
		name := info.buckets[(int(id.slot)+i)%len(info.buckets)] // spread reads over the set
		body, err := c.st.Objects.Bucket(name).Get(ctx, key, 0, -1)
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

func (c *fetchCache) accept(id slotID, nonce format.Nonce, bucket string, body []byte, w *warmSlot) error {
	env, f, err := format.VerifyBundle(body)
	if err != nil {
		return err
	}
	if env.Epoch != id.epoch || env.Slot != id.slot || env.Nonce != nonce {
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
			ErrScratchBudget, id.slot, len(body), footer, held, heldF, c.maxBytes, c.maxFooter)
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
	path := filepath.Join(c.dir, strconv.FormatUint(id.epoch, 10)+"-"+strconv.FormatUint(id.slot, 10)+"-"+id.star+"-"+string(id.class))
	if err := os.WriteFile(path, body, 0o600); err != nil {
		unreserve()
		return fmt.Errorf("settle: fetch cache: %w", err)
	}
	file, err := os.Open(path)
	if err != nil {
		unreserve()
		return fmt.Errorf("settle: fetch cache: %w", err)
	}
	w.file, w.bucket, w.size = file, bucket, int64(len(body))
	w.extents = map[string][]format.Extent{}
	for _, x := range f.Extents {
		if c.only == nil || c.only[x.StreamID] {
			w.extents[x.StreamID] = append(w.extents[x.StreamID], x)
		}
	}
	c.m.bundles.WithLabelValues(c.class).Inc()
	c.m.bundleBytes.WithLabelValues(c.class).Add(float64(len(body)))
	return nil
}

// settledFooter reads the footer of a settled object in bucket b (size 0:
// unknown, one HEAD finds it): a suffix GET, and a second GET when the
// footer is larger than the suffix.
func settledFooter(ctx context.Context, b objstore.Bucket, key string, size uint64) (format.SettledFooter, uint64, error) {
	fail := func(err error) (format.SettledFooter, uint64, error) {
		return format.SettledFooter{}, 0, fmt.Errorf("settle: footer of %s/%s: %w", b.Name(), key, err)
	}
	if size == 0 {
		info, err := b.Head(ctx, key)
		if err != nil {
			return fail(err)
		}
		size = uint64(info.Size)
	}
	const suffix = 64 << 10
	n := min(size, suffix)
	tail, err := b.Get(ctx, key, int64(size-n), int64(n))
	if err != nil {
		return fail(err)
	}
	if uint64(len(tail)) != n {
		return fail(fmt.Errorf("%w: object shorter than %d bytes", format.ErrCorrupt, size))
	}
	off, flen, err := format.LocateSettledFooter(size, tail)
	if err != nil {
		return fail(err)
	}
	var fb []byte
	if uint64(flen)+format.SettledTrailerSize <= n {
		fb = tail[n-format.SettledTrailerSize-uint64(flen) : n-format.SettledTrailerSize]
	} else if fb, err = b.Get(ctx, key, int64(off), int64(flen)); err != nil {
		return fail(err)
	}
	f, err := format.DecodeSettledFooter(fb)
	if err != nil {
		return fail(err)
	}
	if f.BlocksLen() != off {
		return fail(fmt.Errorf("%w: blocks end at %d, footer starts at %d", format.ErrCorrupt, f.BlocksLen(), off))
	}
	return f, size, nil
}
