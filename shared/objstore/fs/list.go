package fs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"iter"
	"path/filepath"
	"strings"

	"github.com/starlog/starlog/shared/objstore"
)

// List walks the folders that can hold keys with prefix, yielding regular
// files. Folders that vanish during the walk (a concurrent delete pruning
// them) are skipped.
func (b *bucket) List(ctx context.Context, prefix string) iter.Seq2[objstore.ObjectInfo, error] {
	return func(yield func(objstore.ObjectInfo, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(objstore.ObjectInfo{}, err)
			return
		}
		if b.nameErr != nil {
			yield(objstore.ObjectInfo{}, b.nameErr)
			return
		}
		if err := b.exists(); err != nil {
			yield(objstore.ObjectInfo{}, err)
			return
		}
		// A journaled store's keys not yet retired are listed from the
		// journal (materialized or not), their files skipped.
		var journaled map[string]*jentry
		if j := b.s.j; j != nil {
			journaled = j.snapshot(b.name, prefix)
			for key, e := range journaled {
				if !yield(objstore.ObjectInfo{Key: key, Size: int64(len(e.body)), ETag: stampETag(e.stamp)}, nil) {
					return
				}
			}
		}
		// Start at the deepest folder the prefix names completely.
		start := b.dir
		if i := strings.LastIndexByte(prefix, '/'); i > 0 {
			if objstore.ValidateKey(prefix[:i]) != nil {
				return // no valid key has this prefix
			}
			start = b.path(prefix[:i])
		}
		stop := false
		err := filepath.WalkDir(start, func(path string, d iofs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, iofs.ErrNotExist) {
					return nil
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if d.IsDir() {
				if path == start {
					return nil
				}
				// Skip folders that cannot hold a matching key.
				rel := filepath.ToSlash(path[len(b.dir)+1:]) + "/"
				if !strings.HasPrefix(rel, prefix) && !strings.HasPrefix(prefix, rel) {
					return iofs.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			key := filepath.ToSlash(path[len(b.dir)+1:])
			if !strings.HasPrefix(key, prefix) || journaled[key] != nil {
				return nil
			}
			fi, err := d.Info()
			if errors.Is(err, iofs.ErrNotExist) {
				return nil // deleted meanwhile
			}
			if err != nil {
				return err
			}
			if !yield(objstore.ObjectInfo{Key: key, Size: fi.Size(), ETag: etag(fi)}, nil) {
				stop = true
				return iofs.SkipAll
			}
			return nil
		})
		if err != nil && !stop {
			yield(objstore.ObjectInfo{}, fmt.Errorf("fs: list %s: %w", b.what(prefix+"*"), err))
		}
	}
}
