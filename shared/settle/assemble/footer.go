package assemble

import (
	"context"
	"fmt"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/objstore"
)

// SettledFooter reads the footer of a settled object in bucket b (size 0:
// unknown, one HEAD finds it): a suffix GET, and a second GET when the
// footer is larger than the suffix.
func SettledFooter(ctx context.Context, b objstore.Bucket, key string, size uint64) (format.SettledFooter, uint64, error) {
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
