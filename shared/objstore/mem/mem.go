// Package mem is an in-memory objstore backend for tests and benchmarks. It
// follows S3's rules exactly where callers could come to depend on them:
// create-once writes, the multipart part-size rule, and (like versitygw)
// no key may be a "folder" of another key.
package mem

import (
	"context"
	"fmt"
	"hash/crc32"
	"iter"
	"strings"
	"sync"

	"github.com/starlog/starlog/shared/objstore"
)

// Store holds buckets of objects in memory. Stored bytes are never aliased
// by callers: puts and gets copy.
type Store struct {
	mu      sync.RWMutex
	buckets map[string]*bucketData
}

type bucketData struct {
	objects map[string]object
	// dirs counts, for every proper folder prefix ("a", "a/b" of "a/b/c"),
	// the objects under it: a key is refused while it is a counted folder.
	dirs map[string]int
}

type object struct {
	data []byte
	etag string
}

// New returns a store holding the given (empty) buckets.
func New(buckets ...string) (*Store, error) {
	s := &Store{buckets: make(map[string]*bucketData)}
	for _, b := range buckets {
		if err := s.CreateBucket(b); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// CreateBucket adds an empty bucket; an existing one is left as it is.
func (s *Store) CreateBucket(name string) error {
	if err := objstore.ValidateBucketName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets[name] == nil {
		s.buckets[name] = &bucketData{objects: make(map[string]object), dirs: make(map[string]int)}
	}
	return nil
}

// Bucket implements objstore.Store. The bucket is looked up on every call,
// so a handle to a missing bucket fails with ErrNotFound.
func (s *Store) Bucket(name string) objstore.Bucket { return &bucket{s: s, name: name} }

// data returns the bucket's state; the caller holds s.mu.
func (s *Store) data(name string) (*bucketData, error) {
	d := s.buckets[name]
	if d == nil {
		return nil, fmt.Errorf("mem: bucket %q: %w", name, objstore.ErrNotFound)
	}
	return d, nil
}

// create stores data at key unless it or a nested key is there; the caller
// holds s.mu for writing.
func (d *bucketData) create(key string, data []byte, etag string) error {
	if _, ok := d.objects[key]; ok {
		return objstore.ErrExists
	}
	if d.dirs[key] > 0 {
		return fmt.Errorf("%w: %q is a folder of existing keys", objstore.ErrKeyConflict, key)
	}
	parents := objstore.ParentKeys(key)
	for _, p := range parents {
		if _, ok := d.objects[p]; ok {
			return fmt.Errorf("%w: %q is below existing key %q", objstore.ErrKeyConflict, key, p)
		}
	}
	d.objects[key] = object{data: data, etag: etag}
	for _, p := range parents {
		d.dirs[p]++
	}
	return nil
}

func (d *bucketData) remove(key string) {
	if _, ok := d.objects[key]; !ok {
		return
	}
	delete(d.objects, key)
	for _, p := range objstore.ParentKeys(key) {
		if d.dirs[p]--; d.dirs[p] == 0 {
			delete(d.dirs, p)
		}
	}
}

type bucket struct {
	s    *Store
	name string
}

var _ objstore.Bucket = (*bucket)(nil)

func (b *bucket) Name() string { return b.name }

func (b *bucket) what(key string) string { return b.name + "/" + key }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// contentETag names content by its CRC-32C and size: cheap (this backend
// serves benchmarks), and like S3's MD5 ETag it is the same for the same
// bytes. Callers treat ETags as opaque.
func contentETag(p []byte) string {
	return fmt.Sprintf("%08x-%x", crc32.Checksum(p, castagnoli), len(p))
}

func (b *bucket) PutIfAbsent(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	data := append([]byte(nil), body...)
	etag := contentETag(data)
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	d, err := b.s.data(b.name)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := d.create(key, data, etag); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("mem: put %s: %w", b.what(key), err)
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(data)), ETag: etag}, nil
}

func (b *bucket) lookup(ctx context.Context, key string) (object, error) {
	if err := ctx.Err(); err != nil {
		return object{}, err
	}
	if err := objstore.ValidateKey(key); err != nil {
		return object{}, err
	}
	b.s.mu.RLock()
	defer b.s.mu.RUnlock()
	d, err := b.s.data(b.name)
	if err != nil {
		return object{}, err
	}
	o, ok := d.objects[key]
	if !ok {
		return object{}, fmt.Errorf("mem: %s: %w", b.what(key), objstore.ErrNotFound)
	}
	return o, nil
}

func (b *bucket) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	o, err := b.lookup(ctx, key)
	if err != nil {
		return nil, err
	}
	start, end, err := objstore.ClampRange(int64(len(o.data)), off, n)
	if err != nil {
		return nil, fmt.Errorf("mem: get %s: %w", b.what(key), err)
	}
	// Objects are immutable once stored, so copying outside the lock is safe.
	return append([]byte{}, o.data[start:end]...), nil
}

func (b *bucket) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	o, err := b.lookup(ctx, key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(o.data)), ETag: o.etag}, nil
}

func (b *bucket) Delete(ctx context.Context, key string) error {
	return b.DeleteMany(ctx, []string{key})
}

func (b *bucket) DeleteMany(ctx context.Context, keys []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		if err := objstore.ValidateKey(k); err != nil {
			return err
		}
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	d, err := b.s.data(b.name)
	if err != nil {
		return err
	}
	for _, k := range keys {
		d.remove(k)
	}
	return nil
}

// List snapshots the matching keys, then yields them in map order: callers
// that wrongly depend on sorted listings fail here first.
func (b *bucket) List(ctx context.Context, prefix string) iter.Seq2[objstore.ObjectInfo, error] {
	return func(yield func(objstore.ObjectInfo, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(objstore.ObjectInfo{}, err)
			return
		}
		b.s.mu.RLock()
		d, err := b.s.data(b.name)
		var infos []objstore.ObjectInfo
		if err == nil {
			for k, o := range d.objects {
				if strings.HasPrefix(k, prefix) {
					infos = append(infos, objstore.ObjectInfo{Key: k, Size: int64(len(o.data)), ETag: o.etag})
				}
			}
		}
		b.s.mu.RUnlock()
		if err != nil {
			yield(objstore.ObjectInfo{}, err)
			return
		}
		for _, info := range infos {
			if err := ctx.Err(); err != nil {
				yield(objstore.ObjectInfo{}, err)
				return
			}
			if !yield(info, nil) {
				return
			}
		}
	}
}
