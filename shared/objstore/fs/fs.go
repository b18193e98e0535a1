// Package fs is the objstore backend over a local directory: one directory
// per bucket under a root, one file per object, keys split on '/' into
// nested directories (like versitygw's posix backend).
//
// Create-once writes are safe across processes: the body goes to a temp
// file that is fsynced, then link(2)ed to its final name, which fails with
// EEXIST when the key exists, and the name's folder is fsynced before the
// PUT returns. Readers never see a partial object. Where the kernel has
// O_TMPFILE (Linux on ext4, xfs, btrfs, tmpfs) the temp file is an unnamed
// inode: no staging entry is created or removed per PUT, and one that a
// crash leaves unlinked is freed by the kernel, not swept.
package fs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
	lock *os.File // the root's flock (lockRoot)
	j    *journal // nil without Options.Journal
	// fsys serves the journal and deletes (osFS; the crash-consistency
	// test records through it).
	fsys fileSys
	// lastStamp is the last mtime stamped on an object (stamp).
	lastStamp atomic.Int64
	dirs      *dirSyncs // directory fsyncs shared by concurrent publishes
	// unnamed: PUTs write their temp file as an O_TMPFILE inode (probed by
	// New); false falls back to named temp files in staging.
	unnamed bool
	// step, when set (tests only), is called between the steps of a PUT,
	// so a crash test can kill the process at each one.
	step func(name string)
}

// Options chooses how a store is opened.
type Options struct {
	// Journal appends create-once PUTs of up to MaxJournaled bytes to the
	// store's journal (one data sync per group of concurrent PUTs) and
	// materializes them in the background. It takes the root's lock
	// exclusively: no other process may open the store meanwhile, with or
	// without a journal. Without it, any number of processes share the
	// root (each PUT links its own file), and none may journal.
	Journal bool
}

// ErrLocked is the refusal to open a root that another store holds in a
// way this one cannot share: a journaled store excludes every other.
var ErrLocked = errors.New("fs: the store is in use by a journaled store (or, to journal, by another)")

// lockFile is the root's lock: flock(2) shared by stores without a
// journal, exclusive for a journaled one; the kernel drops it when the
// process dies, so a crash never leaves the root locked.
const lockFile = ".starlog-lock"

// New opens (creating if needed) a store rooted at root, without a
// journal: any number of processes may share the root this way.
func New(root string) (*Store, error) { return Open(root, Options{}) }

// Open opens (creating if needed) a store rooted at root. A journaled
// store first replays what a previous process left in the journal.
func Open(root string, o Options) (*Store, error) {
	return open(root, o, osFS{})
}

func open(root string, o Options, fsys fileSys) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("fs: root %q: %w", root, err)
	}
	staging := filepath.Join(abs, stagingDir)
	if err := os.MkdirAll(staging, 0o755); err != nil {
		return nil, fmt.Errorf("fs: create root: %w", err)
	}
	lock, err := lockRoot(abs, o.Journal)
	if err != nil {
		return nil, err
	}
	s := &Store{root: abs, lock: lock, fsys: fsys, dirs: newDirSyncs(), unnamed: unnamedWorks(staging)}
	if o.Journal {
		s.j = newJournal(fsys, abs, s.stamp)
		if err := s.j.recover(); err != nil {
			lock.Close()
			return nil, fmt.Errorf("fs: journal replay: %w", err)
		}
		go s.j.run()
	}
	return s, nil
}

func lockRoot(root string, exclusive bool) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(root, lockFile), os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("fs: lock: %w", err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, root)
		}
		return nil, fmt.Errorf("fs: lock: %w", err)
	}
	return f, nil
}

// Close materializes and retires the journal (if any) and releases the
// root's lock. The store must not be used afterwards.
func (s *Store) Close() error {
	var err error
	if s.j != nil {
		err = s.j.close()
	}
	if s.lock != nil {
		if cerr := s.lock.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// stamp returns a modification time for a new object, in ns, unique in
// this store: the object's ETag, stable from its PUT on (a journaled
// object's file is stamped with it when materialized).
func (s *Store) stamp() int64 {
	for {
		last, now := s.lastStamp.Load(), time.Now().UnixNano()
		if now <= last {
			now = last + 1
		}
		if s.lastStamp.CompareAndSwap(last, now) {
			return now
		}
	}
}

// JournalStats are a journaled store's counters so far (zero without a
// journal).
type JournalStats struct {
	Syncs   uint64 // group syncs
	Records uint64 // records they covered
	Retired uint64 // segments materialized and removed
	// CopyWaitsMissed counts groups that stopped waiting for their
	// objects' copies when the wait's bound passed (copiesWait).
	CopyWaitsMissed uint64
}

// JournalStats reports the journal's counters.
func (s *Store) JournalStats() JournalStats {
	if s.j == nil {
		return JournalStats{}
	}
	return JournalStats{Syncs: s.j.syncs.Load(), Records: s.j.records.Load(), Retired: s.j.retired.Load(), CopyWaitsMissed: s.j.copyMisses.Load()}
}

// unnamedWorks reports whether dir's file system gives O_TMPFILE inodes
// that linkat can name through /proc/self/fd (both are needed: the flag
// fails with EOPNOTSUPP on file systems without it, and /proc may be
// absent in a container).
func unnamedWorks(dir string) bool {
	f, err := openUnnamed(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	probe := filepath.Join(dir, fmt.Sprintf("probe-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := linkUnnamed(f, probe); err != nil {
		return false
	}
	os.Remove(probe)
	return true
}

func openUnnamed(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600) // as os.CreateTemp
	if err != nil {
		return nil, &os.PathError{Op: "open O_TMPFILE", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir+"/(unnamed)"), nil
}

// linkUnnamed gives f's unnamed inode the name target, create-once: it
// fails with EEXIST when target exists, as link(2) does.
func linkUnnamed(f *os.File, target string) error {
	proc := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	if err := unix.Linkat(unix.AT_FDCWD, proc, unix.AT_FDCWD, target, unix.AT_SYMLINK_FOLLOW); err != nil {
		return &os.LinkError{Op: "linkat", Old: proc, New: target, Err: err}
	}
	return nil
}

func (s *Store) at(step string) {
	if s.step != nil {
		s.step(step)
	}
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

// etag identifies one incarnation of an object: its file's mtime, which
// every PUT stamps with a time unique in the store (Store.stamp), so a key
// deleted and created again changes it, and a journaled object keeps the
// ETag its PUT returned once its file is materialized.
func etag(fi os.FileInfo) string { return stampETag(fi.ModTime().UnixNano()) }

func stampETag(ns int64) string { return strconv.FormatInt(ns, 16) }

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

// temp is a finished, fsynced temp file, named in staging or unnamed.
type temp struct {
	path string   // named: its path in staging
	f    *os.File // unnamed: its open inode
}

// link names the temp file target, create-once.
func (t temp) link(target string) error {
	if t.f != nil {
		return linkUnnamed(t.f, target)
	}
	return os.Link(t.path, target)
}

// discard drops the temp file: an unnamed one is freed on close, and a
// linked one lives on under its key.
func (t temp) discard() {
	if t.f != nil {
		t.f.Close()
		return
	}
	os.Remove(t.path)
}

// writeTemp writes body to a new fsynced temp file.
func (b *bucket) writeTemp(prefix string, body []byte) (temp, error) {
	var t temp
	var f *os.File
	var err error
	if b.s.unnamed {
		f, err = openUnnamed(b.staging)
		t.f = f
	} else {
		f, err = os.CreateTemp(b.staging, prefix)
		if err == nil {
			t.path = f.Name()
		}
	}
	if err != nil {
		return temp{}, err
	}
	b.s.at("created")
	_, err = f.Write(body)
	if err == nil {
		err = stampFile(f, time.Unix(0, b.s.stamp()))
	}
	b.s.at("written")
	if err == nil {
		err = f.Sync()
	}
	b.s.at("synced")
	if t.f == nil {
		// A named temp is linked by its path; an unnamed one must stay
		// open until it has a name.
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.discard()
		return temp{}, err
	}
	return t, nil
}

// publish links the finished temp file tmp to key create-once and makes
// the new name durable. It returns the object's info.
//
// It links first and makes key's folders only when the link finds one
// missing: a chain's slots share a folder, so most PUTs find it there and
// pay one link(2), not a mkdir and an lstat per parent folder.
func (b *bucket) publish(tmp temp, key string) (objstore.ObjectInfo, error) {
	target := b.path(key)
	var created []string
	for range publishAttempts {
		err := tmp.link(target)
		switch {
		case err == nil:
			b.s.at("linked")
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
			// A parent folder is missing (new, or pruned by a concurrent
			// delete): make them, then link again.
			made, merr := b.mkParents(key)
			created = append(created, made...)
			if merr != nil && !errors.Is(merr, errRetry) {
				return objstore.ObjectInfo{}, merr
			}
		case errors.Is(err, syscall.ENOTDIR):
			return objstore.ObjectInfo{}, fmt.Errorf("%w: %q is below an existing key", objstore.ErrKeyConflict, key)
		default:
			return objstore.ObjectInfo{}, err
		}
	}
	return objstore.ObjectInfo{}, fmt.Errorf("fs: gave up after %d attempts racing folder removals", publishAttempts)
}

var errRetry = errors.New("retry")

// mkParents creates key's parent folders, returning the ones it created
// (also on error: they need a sync once the key is linked). A parent that
// is an object is a key conflict.
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
				return created, errRetry // removed meanwhile
			}
			if !fi.IsDir() {
				return created, fmt.Errorf("%w: %q is below existing key %q", objstore.ErrKeyConflict, key, p)
			}
		case errors.Is(err, syscall.ENOENT):
			return created, errRetry // an outer folder was pruned meanwhile
		case errors.Is(err, syscall.ENOTDIR):
			return created, fmt.Errorf("%w: %q is below an existing key", objstore.ErrKeyConflict, key)
		default:
			return created, err
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
	b.s.at("dir-synced")
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
	if j := b.s.j; j != nil {
		if len(body) <= MaxJournaled {
			info, err := j.put(ctx, b, key, body)
			if err != nil {
				return objstore.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", b.what(key), err)
			}
			return info, nil
		}
		release, err := j.hold(ctx, b.name, key, kindDirect)
		if err != nil {
			return objstore.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", b.what(key), err)
		}
		defer release()
	}
	// Writing first and probing never: link(2) is the arbiter.
	tmp, err := b.writeTemp("put-*", body)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", b.what(key), err)
	}
	defer tmp.discard()
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
	if j := b.s.j; j != nil {
		if e := j.lookup(b.name, key); e != nil {
			start, end, err := objstore.ClampRange(int64(len(e.body)), off, n)
			if err != nil {
				return nil, fmt.Errorf("fs: get %s: %w", b.what(key), err)
			}
			return append([]byte(nil), e.body[start:end]...), nil
		}
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
	if j := b.s.j; j != nil {
		if e := j.lookup(b.name, key); e != nil {
			return objstore.ObjectInfo{Key: key, Size: int64(len(e.body)), ETag: stampETag(e.stamp)}, nil
		}
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
	return b.delete(ctx, key)
}

// delete removes key; in a journaled store it first holds the key, which
// retires a segment that journaled it (a replay must not bring it back).
func (b *bucket) delete(ctx context.Context, key string) error {
	if j := b.s.j; j != nil {
		release, err := j.hold(ctx, b.name, key, kindDelete)
		if err != nil {
			return fmt.Errorf("fs: delete %s: %w", b.what(key), err)
		}
		defer release()
	}
	target := b.path(key)
	// unlink(2), never rmdir: a folder name is not an object, and a missing
	// key (or one below a file) is already deleted.
	err := b.s.fsys.Unlink(target)
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		return nil
	case err != nil:
		return fmt.Errorf("fs: delete %s: %w", b.what(key), err)
	}
	if err := b.s.fsys.SyncDir(filepath.Dir(target)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return &objstore.IndefiniteError{Err: fmt.Errorf("fs: delete %s: %w", b.what(key), err)}
	}
	// Prune emptied folders so their names can become keys; rmdir fails on
	// a folder that is not empty, which ends the walk.
	for dir := filepath.Dir(target); dir != b.dir; dir = filepath.Dir(dir) {
		if b.s.fsys.Rmdir(dir) != nil {
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
		if err := b.delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}
