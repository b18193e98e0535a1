package assemble

import (
	"context"
	"errors"
	"fmt"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/objstore"
)

// Source is one piece of an object's blocks, N bytes at Off of object
// Bucket/Key: read from the warm slot Warm when there is one, else by a
// ranged GET; either way copyable server-side.
type Source struct {
	Bucket, Key string
	Off, N      int64
	Warm        *Slot
}

// source is where a piece's bytes are: a warm slot (read from scratch,
// copied from its bucket), an object in storage, or bytes in memory.
type source struct {
	bucket, key string
	off         int64 // of the piece in the source object
	warm        *Slot
	data        []byte
}

// Result is what Publish left at the key: the object's footer and size,
// whether it was already there (adopted), and the bytes copied
// server-side and uploaded to write it (none when adopted).
type Result struct {
	Footer         format.SettledFooter
	Size           uint64
	Adopted        bool
	Copied, Staged int64
}

// Publish assembles the object of blocks srcs and footer f at key in
// bucket (one PUT below the part size, else one multipart upload) and
// publishes it create-once. When the key is already there (a concurrent
// settler, or an earlier run that crashed before its commit), the
// standing object's footer is read back and, once adopt accepts it,
// describes the durable bytes instead: they are never replaced.
func Publish(ctx context.Context, objs objstore.Store, bucket, key string, f format.SettledFooter, srcs []Source, adopt func(got format.SettledFooter) error) (Result, error) {
	fb, err := format.AppendSettledFooter(nil, f)
	if err != nil {
		return Result{}, fmt.Errorf("settle: footer of %s: %w", key, err)
	}
	pieces := make([]piece, 0, len(srcs)+1)
	from := make([]source, 0, len(srcs)+1)
	for _, s := range srcs {
		pieces = append(pieces, piece{n: s.N, copyable: true})
		from = append(from, source{bucket: s.Bucket, key: s.Key, off: s.Off, warm: s.Warm})
	}
	pieces = append(pieces, piece{n: int64(len(fb))})
	from = append(from, source{data: fb})
	size := uint64(f.BlocksLen()) + uint64(len(fb))

	b := objs.Bucket(bucket)
	parts := planParts(pieces, objstore.MinPartSize)
	var copied, staged int64
	var mp objstore.Multipart
	if len(parts) == 1 && !parts[0].copy {
		// Below the part size nothing can be copied server-side: one
		// create-once PUT instead of a three-request upload (at 10,000
		// streams most eras settle kilobytes per stream).
		var body []byte
		if body, err = partBody(ctx, objs, from, parts[0]); err != nil {
			return Result{}, fmt.Errorf("settle: body of %s: %w", key, err)
		}
		_, err = b.PutIfAbsent(ctx, key, body)
		staged = int64(len(body))
	} else {
		if mp, err = b.NewMultipart(ctx, key); err != nil {
			return Result{}, fmt.Errorf("settle: start upload of %s: %w", key, err)
		}
		for i, pt := range parts {
			if pt.copy {
				s, sg := from[pt.segs[0].piece], pt.segs[0]
				err = mp.AddCopyPart(ctx, s.bucket, s.key, s.off+sg.off, sg.n)
				copied += sg.n
			} else {
				var body []byte
				if body, err = partBody(ctx, objs, from, pt); err == nil {
					err = mp.AddPart(ctx, body)
					staged += int64(len(body))
				}
			}
			if err != nil {
				return Result{}, abort(ctx, mp, fmt.Errorf("settle: part %d of %s: %w", i+1, key, err))
			}
		}
		_, err = mp.Complete(ctx)
	}
	switch {
	case err == nil:
		return Result{Footer: f, Size: size, Copied: copied, Staged: staged}, nil
	case errors.Is(err, objstore.ErrExists):
	case objstore.IsIndefinite(err):
		// Published or not: the footer read below decides.
	default:
		return Result{}, abort(ctx, mp, fmt.Errorf("settle: publish %s: %w", key, err))
	}
	got, gotSize, ferr := SettledFooter(ctx, b, key, 0)
	if ferr != nil {
		return Result{}, abort(ctx, mp, fmt.Errorf("settle: publish %s: %w; reading the standing object: %w", key, err, ferr))
	}
	if err := adopt(got); err != nil {
		return Result{}, err
	}
	return Result{Footer: got, Size: gotSize, Adopted: true}, nil
}

// abort discards an upload after a failure, keeping the failure (a
// single PUT, mp nil, has nothing to discard).
func abort(ctx context.Context, mp objstore.Multipart, cause error) error {
	if mp == nil {
		return cause
	}
	if err := mp.Abort(ctx); err != nil {
		return errors.Join(cause, fmt.Errorf("settle: abort upload: %w", err))
	}
	return cause
}

// partBody gathers an uploaded part's bytes: from the fetch cache, from
// memory, or (a small tail object's blocks) by a ranged GET.
func partBody(ctx context.Context, objs objstore.Store, srcs []source, pt part) ([]byte, error) {
	body := make([]byte, 0, pt.size())
	for _, sg := range pt.segs {
		s := srcs[sg.piece]
		switch {
		case s.data != nil:
			body = append(body, s.data[sg.off:sg.off+sg.n]...)
		case s.warm != nil:
			b, err := s.warm.ReadAt(s.off+sg.off, sg.n)
			if err != nil {
				return nil, err
			}
			body = append(body, b...)
		default:
			b, err := objs.Bucket(s.bucket).Get(ctx, s.key, s.off+sg.off, sg.n)
			if err != nil {
				return nil, fmt.Errorf("settle: read %s/%s [%d,+%d): %w", s.bucket, s.key, s.off+sg.off, sg.n, err)
			}
			if int64(len(b)) != sg.n {
				return nil, fmt.Errorf("settle: read %s/%s [%d,+%d): %w: got %d bytes", s.bucket, s.key, s.off+sg.off, sg.n, format.ErrCorrupt, len(b))
			}
			body = append(body, b...)
		}
	}
	return body, nil
}
