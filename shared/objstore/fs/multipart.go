package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/objstore"
)

func (b *bucket) NewMultipart(ctx context.Context, key string) (objstore.Multipart, error) {
	if err := b.ready(ctx, key); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(b.staging, "mpu-*")
	if err != nil {
		return nil, fmt.Errorf("fs: multipart %s: %w", b.what(key), err)
	}
	return &multipart{b: b, key: key, dir: dir}, nil
}

// multipart stages each part as a file in its own staging folder; like
// S3, a copy part reads its source when it is added.
type multipart struct {
	b   *bucket
	key string
	dir string

	mu    sync.Mutex
	sizes []int64
	done  bool
}

var errFinished = errors.New("multipart upload already completed or aborted")

func (m *multipart) what() string { return m.b.what(m.key) }

func (m *multipart) partPath(i int) string { return filepath.Join(m.dir, strconv.Itoa(i+1)) }

// addPart writes the next part with fill.
func (m *multipart) addPart(ctx context.Context, fill func(*os.File) (int64, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return fmt.Errorf("fs: multipart %s: %w", m.what(), errFinished)
	}
	if len(m.sizes) >= objstore.MaxParts {
		return fmt.Errorf("fs: multipart %s: more than %d parts", m.what(), objstore.MaxParts)
	}
	path := m.partPath(len(m.sizes))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("fs: multipart %s part %d: %w", m.what(), len(m.sizes)+1, err)
	}
	n, err := fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("fs: multipart %s part %d: %w", m.what(), len(m.sizes)+1, err)
	}
	m.sizes = append(m.sizes, n)
	return nil
}

func (m *multipart) AddPart(ctx context.Context, body []byte) error {
	return m.addPart(ctx, func(f *os.File) (int64, error) {
		n, err := f.Write(body)
		return int64(n), err
	})
}

func (m *multipart) AddCopyPart(ctx context.Context, srcBucket, srcKey string, off, n int64) error {
	if err := objstore.ValidateBucketName(srcBucket); err != nil {
		return err
	}
	src := m.b.s.Bucket(srcBucket).(*bucket)
	if err := src.ready(ctx, srcKey); err != nil {
		return fmt.Errorf("fs: multipart %s: copy source: %w", m.what(), err)
	}
	if j := src.s.j; j != nil {
		if e := j.lookup(src.name, srcKey); e != nil {
			if err := objstore.CheckCopyRange(int64(len(e.body)), off, n); err != nil {
				return fmt.Errorf("fs: multipart %s: %w", m.what(), err)
			}
			return m.addPart(ctx, func(f *os.File) (int64, error) {
				k, err := f.Write(e.body[off : off+n])
				return int64(k), err
			})
		}
	}
	sf, fi, err := src.open(srcKey)
	if err != nil {
		return fmt.Errorf("fs: multipart %s: copy source: %w", m.what(), err)
	}
	defer sf.Close()
	if err := objstore.CheckCopyRange(fi.Size(), off, n); err != nil {
		return fmt.Errorf("fs: multipart %s: %w", m.what(), err)
	}
	return m.addPart(ctx, func(f *os.File) (int64, error) {
		return io.Copy(f, io.NewSectionReader(sf, off, n))
	})
}

// Complete concatenates the parts into one fsynced temp file and links it
// create-once. Every refusal is definite and aborts the upload.
func (m *multipart) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return objstore.ObjectInfo{}, fmt.Errorf("fs: multipart %s: %w", m.what(), errFinished)
	}
	defer m.abort()
	if err := objstore.CheckParts(m.sizes); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("fs: multipart %s: %w", m.what(), err)
	}
	out := filepath.Join(m.dir, "object")
	if err := m.concat(out); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("fs: multipart %s: %w", m.what(), err)
	}
	if j := m.b.s.j; j != nil {
		release, err := j.hold(ctx, m.b.name, m.key, kindDirect)
		if err != nil {
			return objstore.ObjectInfo{}, fmt.Errorf("fs: multipart %s: %w", m.what(), err)
		}
		defer release()
	}
	info, err := m.b.publish(temp{path: out}, m.key)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("fs: multipart %s: %w", m.what(), err)
	}
	return info, nil
}

func (m *multipart) concat(out string) error {
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = func() error {
		for i := range m.sizes {
			p, err := os.Open(m.partPath(i))
			if err != nil {
				return err
			}
			// File to file: io.Copy uses copy_file_range where it can.
			_, err = io.Copy(f, p)
			p.Close()
			if err != nil {
				return err
			}
		}
		if err := stampFile(f, time.Unix(0, m.b.s.stamp())); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (m *multipart) Abort(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.abort()
}

// abort removes the staging folder; the caller holds m.mu.
func (m *multipart) abort() error {
	m.done = true
	if err := os.RemoveAll(m.dir); err != nil {
		return fmt.Errorf("fs: multipart %s: abort: %w", m.what(), err)
	}
	return nil
}
