package faults

import (
	"context"
	"iter"

	"github.com/starlog/starlog/shared/objstore"
)

// Bucket implements objstore.Store.
func (s *Store) Bucket(name string) objstore.Bucket {
	return &bucket{inner: s.inner.Bucket(name), name: name, st: s.state(name)}
}

type bucket struct {
	inner objstore.Bucket
	name  string
	st    *state
}

var _ objstore.Bucket = (*bucket)(nil)

func (b *bucket) Name() string { return b.name }

// call runs one request through the plan and records it. Bytes count when
// the request reached the inner store, whatever it answered (a refused PUT
// still carried its body).
func (b *bucket) call(ctx context.Context, op objstore.Op, bytes func() int64, do func() error) error {
	fault, err := b.st.before(ctx, b.name, op)
	n := int64(0)
	if err == nil {
		err = after(fault, b.name, op, do())
		n = bytes()
	}
	b.st.record(op, 1, n, err)
	return err
}

func (b *bucket) PutIfAbsent(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	var info objstore.ObjectInfo
	err := b.call(ctx, objstore.OpPut, func() int64 { return int64(len(body)) }, func() (err error) {
		info, err = b.inner.PutIfAbsent(ctx, key, body)
		return err
	})
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return info, nil
}

func (b *bucket) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	var data []byte
	err := b.call(ctx, objstore.OpGet, func() int64 { return int64(len(data)) }, func() (err error) {
		data, err = b.inner.Get(ctx, key, off, n)
		return err
	})
	if err != nil {
		return nil, err
	}
	return data, nil
}

func (b *bucket) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	var info objstore.ObjectInfo
	err := b.call(ctx, objstore.OpHead, func() int64 { return 0 }, func() (err error) {
		info, err = b.inner.Head(ctx, key)
		return err
	})
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return info, nil
}

func (b *bucket) Delete(ctx context.Context, key string) error {
	return b.call(ctx, objstore.OpDelete, func() int64 { return 0 }, func() error {
		return b.inner.Delete(ctx, key)
	})
}

// DeleteMany counts one request per 1000 keys, as S3's DeleteObjects.
func (b *bucket) DeleteMany(ctx context.Context, keys []string) error {
	fault, err := b.st.before(ctx, b.name, objstore.OpDeleteMany)
	if err == nil {
		err = after(fault, b.name, objstore.OpDeleteMany, b.inner.DeleteMany(ctx, keys))
	}
	b.st.record(objstore.OpDeleteMany, max(1, (int64(len(keys))+999)/1000), 0, err)
	return err
}

// List counts one request per 1000 keys listed (S3's page), at least one.
// A LostReply yields the listing and then the indefinite error.
func (b *bucket) List(ctx context.Context, prefix string) iter.Seq2[objstore.ObjectInfo, error] {
	return func(yield func(objstore.ObjectInfo, error) bool) {
		var listed int64
		fault, err := b.st.before(ctx, b.name, objstore.OpList)
		defer func() { b.st.record(objstore.OpList, max(1, (listed+999)/1000), 0, err) }()
		if err != nil {
			yield(objstore.ObjectInfo{}, err)
			return
		}
		for info, ierr := range b.inner.List(ctx, prefix) {
			if ierr != nil {
				err = after(fault, b.name, objstore.OpList, ierr)
				yield(objstore.ObjectInfo{}, err)
				return
			}
			listed++
			if !yield(info, nil) {
				return
			}
		}
		if err = after(fault, b.name, objstore.OpList, nil); err != nil {
			yield(objstore.ObjectInfo{}, err)
		}
	}
}

func (b *bucket) NewMultipart(ctx context.Context, key string) (objstore.Multipart, error) {
	var inner objstore.Multipart
	err := b.call(ctx, objstore.OpMultipartCreate, func() int64 { return 0 }, func() (err error) {
		inner, err = b.inner.NewMultipart(ctx, key)
		return err
	})
	if err != nil {
		if inner != nil {
			// A created upload whose reply was "lost": nobody can use it,
			// and S3 would expire it; drop it now.
			_ = inner.Abort(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	return &multipart{b: b, inner: inner}, nil
}

type multipart struct {
	b     *bucket
	inner objstore.Multipart
}

func (m *multipart) AddCopyPart(ctx context.Context, srcBucket, srcKey string, off, n int64) error {
	return m.b.call(ctx, objstore.OpMultipartCopy, func() int64 { return n }, func() error {
		return m.inner.AddCopyPart(ctx, srcBucket, srcKey, off, n)
	})
}

func (m *multipart) AddPart(ctx context.Context, body []byte) error {
	return m.b.call(ctx, objstore.OpMultipartPart, func() int64 { return int64(len(body)) }, func() error {
		return m.inner.AddPart(ctx, body)
	})
}

func (m *multipart) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	var info objstore.ObjectInfo
	err := m.b.call(ctx, objstore.OpMultipartComplete, func() int64 { return 0 }, func() (err error) {
		info, err = m.inner.Complete(ctx)
		return err
	})
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return info, nil
}

func (m *multipart) Abort(ctx context.Context) error {
	return m.b.call(ctx, objstore.OpMultipartAbort, func() int64 { return 0 }, func() error {
		return m.inner.Abort(ctx)
	})
}
