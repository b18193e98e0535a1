// Package fs is the objstore backend over a local directory: one directory
// per bucket under a root, one file per object, keys split on '/' into
// nested directories (like versitygw's posix backend).
//
// Create-once writes are safe across processes: the body goes to a temp
// file that is fsynced, then link(2)ed to its final name, which fails with
// EEXIST when the key exists. Readers never see a partial object.
package fs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/starlog/starlog/shared/objstore"
)

// stagingDir holds, per bucket, temp files and multipart parts. It sits in
// the root beside the buckets (same file system, so link works) and can
// never be a bucket: bucket names start with a letter or digit.
const stagingDir = ".starlog-staging"

// publishAttempts bounds the retries of a create racing a concurrent
// delete that prunes the folder being created in.
const publishAttempts = 16

// Store is a directory of buckets.
type Store struct {
	root string
	dirs *dirSyncs // directory fsyncs shared by concurrent publishes
}

// New opens (creating if needed) a store rooted at root.
func New(root string) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("fs: root %q: %w", root, err)
	}
	if err := os.MkdirAll(filepath.Join(abs, stagingDir), 0o755); err != nil {
		return nil, fmt.Errorf("fs: create root: %w", err)
	}
	return &Store{root: abs, dirs: newDirSyncs()}, nil
}

// DirSyncs reports the publishes that needed a directory fsync and the
// directory fsyncs issued for them (fewer under concurrency: dirSyncs).
func (s *Store) DirSyncs() (needed, issued uint64) {
	return s.dirs.calls.Load(), s.dirs.syncs.Load()
}

// Root is the store's directory.
func (s *Store) Root() string { return s.root }

// CreateBucket creates the bucket's directory (and its staging directory);
// an existing bucket is left as it is.
func (s *Store) CreateBucket(name string) error {
	if err := objstore.ValidateBucketName(name); err != nil {
		return err
	}
	for _, dir := range []string{filepath.Join(s.root, stagingDir, name), filepath.Join(s.root, name)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("fs: create bucket %q: %w", name, err)
		}
	}
	if err := syncDir(s.root); err != nil {
		return fmt.Errorf("fs: create bucket %q: %w", name, err)
	}
	return nil
}

// SweepStaging removes temp files and abandoned multipart uploads older
// than age, left behind by processes that crashed mid-write.
func (s *Store) SweepStaging(age time.Duration) error {
	cutoff := time.Now().Add(-age)
	buckets, err := os.ReadDir(filepath.Join(s.root, stagingDir))
	if err != nil {
		return fmt.Errorf("fs: sweep staging: %w", err)
	}
	var errs []error
	for _, b := range buckets {
		dir := filepath.Join(s.root, stagingDir, b.Name())
		entries, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			info, err := e.Info()
			if err != nil || !info.ModTime().Before(cutoff) {
				continue // gone already, or still young
			}
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fs: sweep staging: %w", err)
	}
	return nil
}

// Bucket implements objstore.Store.
func (s *Store) Bucket(name string) objstore.Bucket {
	return &bucket{
		s:       s,
		name:    name,
		nameErr: objstore.ValidateBucketName(name),
		dir:     filepath.Join(s.root, name),
		staging: filepath.Join(s.root, stagingDir, name),
	}
}

type bucket struct {
	s       *Store
	name    string
	nameErr error
	dir     string // <root>/<bucket>
	staging string // <root>/.starlog-staging/<bucket>
}

var _ objstore.Bucket = (*bucket)(nil)

func (b *bucket) Name() string { return b.name }

func (b *bucket) what(key string) string { return b.name + "/" + key }

// path maps a valid key to its file.
func (b *bucket) path(key string) string { return filepath.Join(b.dir, filepath.FromSlash(key)) }

// ready checks the bucket name, the key and that the bucket exists.
func (b *bucket) ready(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.nameErr != nil {
		return b.nameErr
	}
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	return b.exists()
}

func (b *bucket) exists() error {
	fi, err := os.Stat(b.dir)
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("fs: bucket %q: %w", b.name, objstore.ErrNotFound)
	}
	return nil
}

// etag identifies one incarnation of an object: the inode and mtime of its
// file change when the key is deleted and created again.
func etag(fi os.FileInfo) string {
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return strconv.FormatUint(ino, 16) + "-" + strconv.FormatInt(fi.ModTime().UnixNano(), 16)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// writeTemp writes body to a new fsynced temp file in the staging dir.
func (b *bucket) writeTemp(prefix string, body []byte) (string, error) {
	f, err := os.CreateTemp(b.staging, prefix)
	if err != nil {
		return "", err
	}
	name := f.Name()
	_, err = f.Write(body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

// publish links the finished temp file tmp to key create-once and makes
// the new name durable. It returns the object's info.
func (b *bucket) publish(tmp, key string) (objstore.ObjectInfo, error) {
	target := b.path(key)
	for range publishAttempts {
		created, err := b.mkParents(key)
		if errors.Is(err, errRetry) {
			continue
		}
		if err != nil {
			return objstore.ObjectInfo{}, err
		}
		err = os.Link(tmp, target)
		switch {
		case err == nil:
			return b.finishPublish(key, target, created)
		case errors.Is(err, syscall.EEXIST):
			fi, lerr := os.Lstat(target)
			if lerr != nil {
				continue // deleted meanwhile: try again
			}
			if !fi.IsDir() {
				return objstore.ObjectInfo{}, objstore.ErrExists
			}
			// A folder: only an empty one (left by a delete's prune that
			// lost a race) may give way to the key.
			if os.Remove(target) != nil {
				return objstore.ObjectInfo{}, fmt.Errorf("%w: %q is a folder of existing keys", objstore.ErrKeyConflict, key)
			}
		case errors.Is(err, syscall.ENOENT):
			// A concurrent delete pruned a parent we just made: remake it.
		case errors.Is(err, syscall.ENOTDIR):
			return objstore.ObjectInfo{}, fmt.Errorf("%w: %q is below an existing key", objstore.ErrKeyConflict, key)
		default:
			return objstore.ObjectInfo{}, err
		}
	}
	return objstore.ObjectInfo{}, fmt.Errorf("fs: gave up after %d attempts racing folder removals", publishAttempts)
}

var errRetry = errors.New("retry")

// mkParents creates key's parent folders, returning the ones it created.
// A parent that is an object is a key conflict.
func (b *bucket) mkParents(key string) ([]string, error) {
	var created []string
	for _, p := range objstore.ParentKeys(key) {
		dir := b.path(p)
		err := os.Mkdir(dir, 0o755)
		switch {
		case err == nil:
			created = append(created, dir)
		case errors.Is(err, syscall.EEXIST):
			fi, serr := os.Lstat(dir)
			if serr != nil {
				return nil, errRetry // removed meanwhile
			}
			if !fi.IsDir() {
				return nil, fmt.Errorf("%w: %q is below existing key %q", objstore.ErrKeyConflict, key, p)
			}
		case errors.Is(err, syscall.ENOENT):
			return nil, errRetry // an outer folder was pruned meanwhile
		case errors.Is(err, syscall.ENOTDIR):
			return nil, fmt.Errorf("%w: %q is below an existing key", objstore.ErrKeyConflict, key)
		default:
			return nil, err
		}
	}
	return created, nil
}

// finishPublish makes the new link and any folders made for it durable.
func (b *bucket) finishPublish(key, target string, created []string) (objstore.ObjectInfo, error) {
	dirs := []string{filepath.Dir(target)}
	for _, d := range created {
		dirs = append(dirs, filepath.Dir(d))
	}
	for _, d := range dirs {
		if err := b.s.dirs.syncDir(d); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return objstore.ObjectInfo{}, &objstore.IndefiniteError{Err: err}
		}
	}
	fi, err := os.Lstat(target)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("stat after publish: %w", err)
	}
	return objstore.ObjectInfo{Key: key, Size: fi.Size(), ETag: etag(fi)}, nil
}

func (b *bucket) PutIfAbsent(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	if err := b.ready(ctx, key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	// Writing first and probing never: link(2) is the arbiter.
	tmp, err := b.writeTemp("put-*", body)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", b.what(key), err)
	}
	defer os.Remove(tmp)
	info, err := b.publish(tmp, key)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", b.what(key), err)
	}
	return info, nil
}

// open opens key's file, mapping a missing file or a folder to ErrNotFound.
func (b *bucket) open(key string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(b.path(key))
	if errors.Is(err, iofs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil, fmt.Errorf("fs: %s: %w", b.what(key), objstore.ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("fs: %s: %w", b.what(key), err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("fs: %s: %w", b.what(key), err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("fs: %s: %w", b.what(key), objstore.ErrNotFound)
	}
	return f, fi, nil
}

func (b *bucket) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := b.ready(ctx, key); err != nil {
		return nil, err
	}
	f, fi, err := b.open(key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	start, end, err := objstore.ClampRange(fi.Size(), off, n)
	if err != nil {
		return nil, fmt.Errorf("fs: get %s: %w", b.what(key), err)
	}
	buf := make([]byte, end-start)
	// Objects never change once linked, so the size from Stat holds.
	if _, err := f.ReadAt(buf, start); err != nil {
		return nil, fmt.Errorf("fs: get %s: %w", b.what(key), err)
	}
	return buf, nil
}

func (b *bucket) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := b.ready(ctx, key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	fi, err := os.Lstat(b.path(key))
	if err != nil || !fi.Mode().IsRegular() {
		if err == nil || errors.Is(err, iofs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return objstore.ObjectInfo{}, fmt.Errorf("fs: %s: %w", b.what(key), objstore.ErrNotFound)
		}
		return objstore.ObjectInfo{}, fmt.Errorf("fs: head %s: %w", b.what(key), err)
	}
	return objstore.ObjectInfo{Key: key, Size: fi.Size(), ETag: etag(fi)}, nil
}

func (b *bucket) Delete(ctx context.Context, key string) error {
	if err := b.ready(ctx, key); err != nil {
		return err
	}
	return b.delete(key)
}

func (b *bucket) delete(key string) error {
	target := b.path(key)
	// unlink(2), never rmdir: a folder name is not an object, and a missing
	// key (or one below a file) is already deleted.
	err := syscall.Unlink(target)
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		return nil
	case err != nil:
		return fmt.Errorf("fs: delete %s: %w", b.what(key), err)
	}
	if err := syncDir(filepath.Dir(target)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return &objstore.IndefiniteError{Err: fmt.Errorf("fs: delete %s: %w", b.what(key), err)}
	}
	// Prune emptied folders so their names can become keys; rmdir fails on
	// a folder that is not empty, which ends the walk.
	for dir := filepath.Dir(target); dir != b.dir; dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

func (b *bucket) DeleteMany(ctx context.Context, keys []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.nameErr != nil {
		return b.nameErr
	}
	for _, k := range keys {
		if err := objstore.ValidateKey(k); err != nil {
			return err
		}
	}
	if err := b.exists(); err != nil {
		return err
	}
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := b.delete(k); err != nil {
			return err
		}
	}
	return nil
}
