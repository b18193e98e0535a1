package mem

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/starlog/starlog/shared/objstore"
)

func (b *bucket) NewMultipart(ctx context.Context, key string) (objstore.Multipart, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	b.s.mu.RLock()
	_, err := b.s.data(b.name)
	b.s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	return &multipart{b: b, key: key}, nil
}

// multipart holds its parts until Complete; like S3, a copy part reads its
// source when it is added.
type multipart struct {
	b   *bucket
	key string

	mu    sync.Mutex
	parts [][]byte
	done  bool
}

var errFinished = errors.New("multipart upload already completed or aborted")

func (m *multipart) add(p []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return fmt.Errorf("mem: multipart %s: %w", m.b.what(m.key), errFinished)
	}
	if len(m.parts) >= objstore.MaxParts {
		return fmt.Errorf("mem: multipart %s: more than %d parts", m.b.what(m.key), objstore.MaxParts)
	}
	m.parts = append(m.parts, p)
	return nil
}

func (m *multipart) AddCopyPart(ctx context.Context, srcBucket, srcKey string, off, n int64) error {
	if err := objstore.ValidateBucketName(srcBucket); err != nil {
		return err
	}
	src, err := (&bucket{s: m.b.s, name: srcBucket}).lookup(ctx, srcKey)
	if err != nil {
		return fmt.Errorf("mem: multipart %s: copy source: %w", m.b.what(m.key), err)
	}
	if err := objstore.CheckCopyRange(int64(len(src.data)), off, n); err != nil {
		return fmt.Errorf("mem: multipart %s: %w", m.b.what(m.key), err)
	}
	return m.add(append([]byte(nil), src.data[off:off+n]...))
}

func (m *multipart) AddPart(ctx context.Context, body []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.add(append([]byte(nil), body...))
}

func (m *multipart) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return objstore.ObjectInfo{}, fmt.Errorf("mem: multipart %s: %w", m.b.what(m.key), errFinished)
	}
	// Every outcome below is definite, and a definite failure aborts.
	m.done = true
	sizes := make([]int64, len(m.parts))
	var total int64
	for i, p := range m.parts {
		sizes[i] = int64(len(p))
		total += sizes[i]
	}
	if err := objstore.CheckParts(sizes); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("mem: multipart %s: %w", m.b.what(m.key), err)
	}
	data := make([]byte, 0, total)
	for _, p := range m.parts {
		data = append(data, p...)
	}
	m.parts = nil
	// S3 marks multipart ETags with the part count.
	etag := fmt.Sprintf("%s-%d", contentETag(data), len(sizes))

	m.b.s.mu.Lock()
	defer m.b.s.mu.Unlock()
	d, err := m.b.s.data(m.b.name)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := d.create(m.key, data, etag); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("mem: multipart %s: %w", m.b.what(m.key), err)
	}
	return objstore.ObjectInfo{Key: m.key, Size: total, ETag: etag}, nil
}

func (m *multipart) Abort(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.done = true
	m.parts = nil
	return nil
}
