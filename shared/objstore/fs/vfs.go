package fs

import (
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fileSys is the handful of file operations the journal, its
// materialization and its recovery issue. The store runs on osFS; the
// crash-consistency test runs it on a recorder that logs every write and
// sync and rebuilds, for each prefix of the log, what a power cut there
// would leave (what was synced).
type fileSys interface {
	// Create makes a new file at path (O_EXCL: an existing name fails).
	Create(path string) (file, error)
	ReadFile(path string) ([]byte, error)
	// ReadDir lists the names in dir.
	ReadDir(dir string) ([]string, error)
	Mkdir(path string) error
	// Link names old's file new too; EEXIST when new exists.
	Link(old, new string) error
	// Unlink removes a file's name (never a folder: EISDIR).
	Unlink(path string) error
	// Rmdir removes an empty folder.
	Rmdir(path string) error
	// SyncDir makes dir's entries (creates, links, removes) durable.
	SyncDir(dir string) error
	// SyncFS makes everything written on the file system holding path
	// durable, data and folders (syncfs(2)).
	SyncFS(path string) error
}

// file is a file being written by the journal.
type file interface {
	Write(p []byte) (int, error)
	// WriteAt writes p at offset off (a journal segment's records go after
	// the ones before them, over the zeros a spare was filled with).
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes the file's data durable (fdatasync).
	Sync() error
	// Stamp sets the modification time, which the store's ETags show.
	Stamp(t time.Time) error
	Close() error
}

type osFS struct{}

func (osFS) Create(path string) (file, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

func (osFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, err
}

func (osFS) Mkdir(path string) error    { return os.Mkdir(path, 0o755) }
func (osFS) Link(old, new string) error { return os.Link(old, new) }
func (osFS) Unlink(path string) error   { return pathErr("unlink", path, syscall.Unlink(path)) }
func (osFS) Rmdir(path string) error    { return pathErr("rmdir", path, syscall.Rmdir(path)) }

func pathErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}
func (osFS) SyncDir(dir string) error { return syncDir(dir) }

func (osFS) SyncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pathErr("syncfs", path, unix.Syncfs(int(f.Fd())))
}

type osFile struct{ f *os.File }

func (o osFile) Write(p []byte) (int, error) { return o.f.Write(p) }
func (o osFile) WriteAt(p []byte, off int64) (int, error) {
	return o.f.WriteAt(p, off)
}
func (o osFile) Sync() error             { return unix.Fdatasync(int(o.f.Fd())) }
func (o osFile) Stamp(t time.Time) error { return stampFile(o.f, t) }
func (o osFile) Close() error            { return o.f.Close() }

// stampFile sets f's mtime (and atime) to t: utimensat(fd, NULL, ...),
// which is futimens(3), on the open file (an unnamed one has no path).
func stampFile(f *os.File, t time.Time) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(t.UnixNano()), unix.NsecToTimespec(t.UnixNano())}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return &os.PathError{Op: "futimens", Path: f.Name(), Err: errno}
	}
	return nil
}
