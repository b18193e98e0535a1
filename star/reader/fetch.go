package reader

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"unsafe"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// Approximate in-memory costs of decoded values, for the byte-bounded cache.
const (
	recordCost = int64(unsafe.Sizeof(format.Record{}))
	headerCost = int64(unsafe.Sizeof(format.Header{}))
	entryCost  = int64(unsafe.Sizeof(format.SettledEntry{}))
	entryOver  = 128 // key, list element and map slot
)

// recordsCost is what decoded records hold: the block bytes they alias plus
// their structs.
func recordsCost(raw int, recs []format.Record) int64 {
	c := int64(raw) + entryOver + recordCost*int64(len(recs))
	for i := range recs {
		c += headerCost * int64(len(recs[i].Headers))
	}
	return c
}

// buckets returns the bucket set of an epoch from its record, cached for
// good: epoch params never change once minted.
func (r *Reader) buckets(ctx context.Context, star string, class meta.Class, epoch uint64) ([]string, error) {
	key := star + "/" + string(class) + "/" + strconv.FormatUint(epoch, 10)
	return r.epochs.get(ctx, key, func(ctx context.Context) ([]string, int64, error) {
		k := meta.EpochKey(star, class, epoch)
		it, err := r.cfg.Meta.Get(ctx, k.PK, k.SK)
		if err != nil {
			return nil, 0, fmt.Errorf("read epoch record %s/%s: %w", k.PK, k.SK, err)
		}
		var e meta.Epoch
		if err := meta.Decode(it.Val, &e); err != nil {
			return nil, 0, err
		}
		if len(e.Params.Buckets) == 0 {
			return nil, 0, fmt.Errorf("epoch record %s/%s has no buckets", k.PK, k.SK)
		}
		return e.Params.Buckets, 1, nil
	})
}

// extent returns the records of one slot ref, read with one ranged GET of
// [Offset, Offset+Length) of the slot from the first bucket of the epoch's
// set that has a good copy (hedged: healthy buckets first, each attempt
// bounded, a slow one overtaken by the next): a bucket that errors, lacks
// the key (a straggling copy) or returns bytes that do not decode is
// skipped.
func (r *Reader) extent(ctx context.Context, sp *meta.Span, sl meta.SlotRef) ([]format.Record, error) {
	return r.extentIn(ctx, sp, sl, nil)
}

// extentIn is extent with the epoch's bucket set known (nil: read it from
// the epoch record): the tail window names the set of the flights it no
// longer holds, so reading them needs no metastore.
func (r *Reader) extentIn(ctx context.Context, sp *meta.Span, sl meta.SlotRef, set []string) ([]format.Record, error) {
	key := chain.SlotKey(sp.Star, sp.Class, sp.Epoch, sl.Slot)
	return r.extents.get(ctx, extentKey(sp, sl), func(ctx context.Context) ([]format.Record, int64, error) {
		if len(set) == 0 {
			var err error
			if set, err = r.buckets(ctx, sp.Star, sp.Class, sp.Epoch); err != nil {
				return nil, 0, err
			}
		}
		type got struct {
			recs []format.Record
			size int
		}
		g, errs, err := hedged(ctx, r, set, func(ctx context.Context, name string) (got, error) {
			r.m.gets.WithLabelValues(kindExtent).Inc()
			gctx, rs := startRequest(ctx, "GET", name, kindExtent, key, int64(sl.Offset), int64(sl.Length))
			b, err := r.cfg.Objects.Bucket(name).Get(gctx, key, int64(sl.Offset), int64(sl.Length))
			rs.end(gctx, len(b), err)
			if err == nil {
				recs, derr := decodeExtent(b, sl)
				if derr == nil {
					return got{recs, len(b)}, nil
				}
				err = errDamaged{derr}
			}
			if c := context.Cause(ctx); c != nil && !errors.Is(c, errAttemptTimeout) {
				return got{}, err // outpaced by another bucket, or the read ended
			}
			r.m.getErrors.WithLabelValues(kindExtent).Inc()
			if !errors.Is(err, objstore.ErrNotFound) { // a straggling copy, or trimmed: normal
				r.log.Warn("reader: bucket copy of a slot unreadable; trying the next bucket",
					"bucket", name, "key", key, "offset", sl.Offset, "length", sl.Length, "err", err)
			}
			return got{}, err
		})
		if err != nil {
			return nil, 0, err
		}
		if errs == nil {
			return g.recs, recordsCost(g.size, g.recs), nil
		}
		missing := 0
		for _, e := range errs {
			if errors.Is(e, objstore.ErrNotFound) {
				missing++
			}
		}
		err = errors.Join(errs...)
		if missing == len(set) {
			err = fmt.Errorf("%w: %w", errSlotGone, err)
		}
		return nil, 0, fmt.Errorf("extent [%d,+%d) of %s (seqs %d+%d): no bucket of the set served it: %w",
			sl.Offset, sl.Length, key, sl.FirstSeq, sl.Count, err)
	})
}

// decodeExtent decodes a slot ref's bytes and checks they hold exactly the
// seqs the ref names.
func decodeExtent(b []byte, sl meta.SlotRef) ([]format.Record, error) {
	if uint64(len(b)) != sl.Length {
		return nil, fmt.Errorf("%w: extent of %d bytes, ref says %d", format.ErrCorrupt, len(b), sl.Length)
	}
	recs, err := format.DecodeBlocks(b)
	if err != nil {
		return nil, err
	}
	if err := checkSeqs(recs, sl.FirstSeq, sl.Count); err != nil {
		return nil, fmt.Errorf("extent: %w", err)
	}
	return recs, nil
}

// checkSeqs checks that recs are seqs [first, first+n), in order.
func checkSeqs(recs []format.Record, first, n uint64) error {
	if uint64(len(recs)) != n {
		return fmt.Errorf("%w: %d records, expected %d from seq %d", format.ErrCorrupt, len(recs), n, first)
	}
	for i := range recs {
		if recs[i].SeqNum != first+uint64(i) {
			return fmt.Errorf("%w: record %d has seq %d, expected %d", format.ErrCorrupt, i, recs[i].SeqNum, first+uint64(i))
		}
	}
	return nil
}

// footer returns a settled object's footer. size is the object's size from
// the catalog row (0: unknown, one HEAD finds it). The first GET asks for
// the last FooterSuffixBytes, which hold trailer and footer unless the
// footer is larger; then one more GET fetches exactly the footer.
func (r *Reader) footer(ctx context.Context, key string, size uint64) (*format.SettledFooter, error) {
	return r.footers.get(ctx, key, func(ctx context.Context) (*format.SettledFooter, int64, error) {
		b := r.cfg.Objects.Bucket(r.cfg.SettledBucket)
		fail := func(kind string, err error) (*format.SettledFooter, int64, error) {
			r.m.getErrors.WithLabelValues(kind).Inc()
			return nil, 0, fmt.Errorf("settled object %s/%s: %w", r.cfg.SettledBucket, key, err)
		}
		if size == 0 {
			r.m.gets.WithLabelValues(kindHead).Inc()
			hctx, rs := startRequest(ctx, "HEAD", r.cfg.SettledBucket, kindHead, key, 0, 0)
			info, err := b.Head(hctx, key)
			rs.end(hctx, 0, err)
			if err != nil {
				return fail(kindHead, err)
			}
			size = uint64(info.Size)
		}
		n := min(size, uint64(r.cfg.FooterSuffixBytes))
		r.m.gets.WithLabelValues(kindFooter).Inc()
		gctx, rs := startRequest(ctx, "GET", r.cfg.SettledBucket, kindFooter, key, int64(size-n), int64(n))
		suffix, err := b.Get(gctx, key, int64(size-n), int64(n))
		rs.end(gctx, len(suffix), err)
		if err != nil {
			return fail(kindFooter, err)
		}
		if uint64(len(suffix)) != n {
			return fail(kindFooter, fmt.Errorf("%w: object shorter than the %d bytes its catalog row says", format.ErrCorrupt, size))
		}
		off, flen, err := format.LocateSettledFooter(size, suffix)
		if err != nil {
			return fail(kindFooter, err)
		}
		var fb []byte
		if uint64(flen)+format.SettledTrailerSize <= n {
			fb = suffix[n-format.SettledTrailerSize-uint64(flen) : n-format.SettledTrailerSize]
		} else {
			r.m.gets.WithLabelValues(kindFooter).Inc()
			gctx, rs := startRequest(ctx, "GET", r.cfg.SettledBucket, kindFooter, key, int64(off), int64(flen))
			fb, err = b.Get(gctx, key, int64(off), int64(flen))
			rs.end(gctx, len(fb), err)
			if err != nil {
				return fail(kindFooter, err)
			}
			if len(fb) != int(flen) {
				return fail(kindFooter, fmt.Errorf("%w: footer read %d bytes, expected %d", format.ErrCorrupt, len(fb), flen))
			}
		}
		f, err := format.DecodeSettledFooter(fb)
		if err != nil {
			return fail(kindFooter, err)
		}
		if f.BlocksLen() != off {
			return fail(kindFooter, fmt.Errorf("%w: blocks end at %d, footer starts at %d", format.ErrCorrupt, f.BlocksLen(), off))
		}
		return &f, entryOver + int64(len(f.StreamID)) + entryCost*int64(len(f.Entries)), nil
	})
}

// chunk returns the records of chunk c of a settled object: the blocks
// whose offsets fall in [c·C, (c+1)·C) for C = SettledChunkBytes, read with
// one ranged GET. Chunks are aligned to the object, not to the read, so
// readers starting anywhere share them in the cache.
func (r *Reader) chunk(ctx context.Context, key string, f *format.SettledFooter, c uint64) ([]format.Record, error) {
	i, j := chunkEntries(f, uint64(r.cfg.SettledChunkBytes), c)
	if i == j {
		return nil, fmt.Errorf("settled object %s: chunk %d is empty", key, c)
	}
	return r.chunks.get(ctx, chunkKey(key, c), func(ctx context.Context) ([]format.Record, int64, error) {
		first, last := f.Entries[i], f.Entries[j-1]
		n := last.Offset + uint64(last.Length) - first.Offset
		r.m.gets.WithLabelValues(kindSettled).Inc()
		gctx, rs := startRequest(ctx, "GET", r.cfg.SettledBucket, kindSettled, key, int64(first.Offset), int64(n))
		b, err := r.cfg.Objects.Bucket(r.cfg.SettledBucket).Get(gctx, key, int64(first.Offset), int64(n))
		rs.end(gctx, len(b), err)
		if err == nil {
			var recs []format.Record
			if recs, err = decodeChunk(b, f.Entries[i:j]); err == nil {
				return recs, recordsCost(len(b), recs), nil
			}
		}
		r.m.getErrors.WithLabelValues(kindSettled).Inc()
		return nil, 0, fmt.Errorf("settled object %s/%s: blocks [%d,+%d): %w", r.cfg.SettledBucket, key, first.Offset, n, err)
	})
}

// decodeChunk decodes the blocks of consecutive footer entries and checks
// them against the entries.
func decodeChunk(b []byte, entries []format.SettledEntry) ([]format.Record, error) {
	var n uint64
	for _, e := range entries {
		n += uint64(e.Length)
	}
	if uint64(len(b)) != n {
		return nil, fmt.Errorf("%w: %d bytes, entries say %d", format.ErrCorrupt, len(b), n)
	}
	recs, err := format.DecodeBlocks(b)
	if err != nil {
		return nil, err
	}
	last := entries[len(entries)-1]
	return recs, checkSeqs(recs, entries[0].FirstSeq, last.EndSeq()-entries[0].FirstSeq)
}

// chunkOf is the chunk holding entry e.
func chunkOf(e format.SettledEntry, size uint64) uint64 { return e.Offset / size }

// chunkEntries returns the entries [i, j) of chunk c: those whose offset is
// in [c·size, (c+1)·size). Pure.
func chunkEntries(f *format.SettledFooter, size, c uint64) (i, j int) {
	lo := c * size
	i = sort.Search(len(f.Entries), func(k int) bool { return f.Entries[k].Offset >= lo })
	j = sort.Search(len(f.Entries), func(k int) bool { return f.Entries[k].Offset/size > c })
	return i, j
}

// errSlotGone reports a slot missing from every bucket of its set: trimmed
// after a settle replaced the span ref being read, if the row is stale.
var errSlotGone = errors.New("slot missing from every bucket of the set")
