package chainsim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"slices"
	"strings"

	"github.com/starlog/starlog/shared/objstore"
)

// object is one stored object. Only the scheduler goroutine touches it.
type object struct {
	data []byte // what a read returns now
	orig []byte // what the write landed: a fault may damage data, never orig
	// damage names what a fault did to data ("" none, "corrupt", "foreign").
	damage string
}

// objects is the simulated object store's content: K buckets of keys.
// Every mutation goes through apply functions that run on the scheduler
// goroutine, and marks the key dirty for the invariant checker.
type objects struct {
	names   []string
	buckets []map[string]*object
	print   uint64 // fingerprint of the content (xor of per-object hashes)
	dirty   map[string]bool
	deleted []deletion // this step's deletions, for the checker
}

// deletion records one object a request removed.
type deletion struct {
	bucket int
	key    string
	by     *actor
}

func newObjects(k int) *objects {
	o := &objects{dirty: map[string]bool{}}
	for i := range k {
		o.names = append(o.names, fmt.Sprintf("b%d", i))
		o.buckets = append(o.buckets, map[string]*object{})
	}
	return o
}

func (o *objects) index(name string) int { return slices.Index(o.names, name) }

func objHash(bucket int, key string, data []byte) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/", bucket, key)
	h.Write(data)
	return h.Sum64()
}

func (o *objects) set(b int, key string, obj *object) {
	if old := o.buckets[b][key]; old != nil {
		o.print ^= objHash(b, key, old.data)
	}
	if obj == nil {
		delete(o.buckets[b], key)
	} else {
		o.buckets[b][key] = obj
		o.print ^= objHash(b, key, obj.data)
	}
	o.dirty[key] = true
}

func (o *objects) putIfAbsent(b int, key string, body []byte) (objstore.ObjectInfo, error) {
	if _, ok := o.buckets[b][key]; ok {
		return objstore.ObjectInfo{}, fmt.Errorf("chainsim: put %s/%s: %w", o.names[b], key, objstore.ErrExists)
	}
	data := slices.Clone(body)
	o.set(b, key, &object{data: data, orig: data})
	return objstore.ObjectInfo{Key: key, Size: int64(len(data)), ETag: etag(data)}, nil
}

func etag(data []byte) string {
	h := fnv.New64a()
	h.Write(data)
	return fmt.Sprintf("%016x", h.Sum64())
}

func (o *objects) get(b int, key string, off, n int64) ([]byte, error) {
	obj, ok := o.buckets[b][key]
	if !ok {
		return nil, fmt.Errorf("chainsim: get %s/%s: %w", o.names[b], key, objstore.ErrNotFound)
	}
	start, end, err := objstore.ClampRange(int64(len(obj.data)), off, n)
	if err != nil {
		return nil, err
	}
	return slices.Clone(obj.data[start:end]), nil
}

func (o *objects) head(b int, key string) (objstore.ObjectInfo, error) {
	obj, ok := o.buckets[b][key]
	if !ok {
		return objstore.ObjectInfo{}, fmt.Errorf("chainsim: head %s/%s: %w", o.names[b], key, objstore.ErrNotFound)
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(obj.data)), ETag: etag(obj.data)}, nil
}

func (o *objects) remove(b int, keys []string, by *actor) {
	for _, k := range keys {
		if _, ok := o.buckets[b][k]; ok {
			o.set(b, k, nil)
			o.deleted = append(o.deleted, deletion{b, k, by})
		}
	}
}

func (o *objects) list(b int, prefix string) []objstore.ObjectInfo {
	var out []objstore.ObjectInfo
	for k, obj := range o.buckets[b] {
		if strings.HasPrefix(k, prefix) {
			out = append(out, objstore.ObjectInfo{Key: k, Size: int64(len(obj.data)), ETag: etag(obj.data)})
		}
	}
	slices.SortFunc(out, func(x, y objstore.ObjectInfo) int { return strings.Compare(x.Key, y.Key) })
	return out
}

// keys returns every stored (bucket, key) in a stable order.
func (o *objects) keys() [][2]string {
	var out [][2]string
	for b, m := range o.buckets {
		for k := range m {
			out = append(out, [2]string{o.names[b], k})
		}
	}
	slices.SortFunc(out, func(x, y [2]string) int {
		if c := strings.Compare(x[0], y[0]); c != 0 {
			return c
		}
		return strings.Compare(x[1], y[1])
	})
	return out
}

// storeView is one actor's objstore.Store over the simulated buckets:
// every request becomes a call the scheduler serves.
type storeView struct {
	s *Sim
	a *actor
}

func (v storeView) Bucket(name string) objstore.Bucket {
	return bucketView{s: v.s, a: v.a, name: name, i: v.s.objs.index(name)}
}

type bucketView struct {
	s    *Sim
	a    *actor
	name string
	i    int // -1: no such bucket
}

var _ objstore.Bucket = bucketView{}

// errNoMultipart: the chain never builds multipart objects.
var errNoMultipart = errors.New("chainsim: multipart uploads are not simulated")

func (b bucketView) Name() string { return b.name }

func (b bucketView) call(ctx context.Context, op string, key string, body []byte, write bool, apply func() (any, error)) (any, error) {
	if b.i < 0 {
		return nil, fmt.Errorf("chainsim: bucket %q: %w", b.name, objstore.ErrNotFound)
	}
	if err := objstore.ValidateKey(key); key != "" && err != nil {
		return nil, err
	}
	return b.s.do(ctx, &call{actor: b.a, op: op, bucket: b.i, key: key, digest: digest(body), write: write, apply: apply})
}

func (b bucketView) PutIfAbsent(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	body = slices.Clone(body)
	v, err := b.call(ctx, "put", key, body, true, func() (any, error) { return b.s.objs.putIfAbsent(b.i, key, body) })
	info, _ := v.(objstore.ObjectInfo)
	return info, err
}

func (b bucketView) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	v, err := b.call(ctx, "get", key, nil, false, func() (any, error) { return b.s.objs.get(b.i, key, off, n) })
	data, _ := v.([]byte)
	return data, err
}

func (b bucketView) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	v, err := b.call(ctx, "head", key, nil, false, func() (any, error) { return b.s.objs.head(b.i, key) })
	info, _ := v.(objstore.ObjectInfo)
	return info, err
}

func (b bucketView) Delete(ctx context.Context, key string) error {
	_, err := b.call(ctx, "delete", key, nil, true, func() (any, error) { b.s.objs.remove(b.i, []string{key}, b.a); return nil, nil })
	return err
}

func (b bucketView) DeleteMany(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := objstore.ValidateKey(k); err != nil {
			return err
		}
	}
	keys = slices.Clone(keys)
	first := ""
	if len(keys) > 0 {
		first = keys[0]
	}
	_, err := b.call(ctx, "deletes", first, []byte(strings.Join(keys, "\n")), true, func() (any, error) {
		b.s.objs.remove(b.i, keys, b.a)
		return nil, nil
	})
	return err
}

func (b bucketView) List(ctx context.Context, prefix string) iter.Seq2[objstore.ObjectInfo, error] {
	return func(yield func(objstore.ObjectInfo, error) bool) {
		v, err := b.call(ctx, "list", "", []byte(prefix), false, func() (any, error) { return b.s.objs.list(b.i, prefix), nil })
		if err != nil {
			yield(objstore.ObjectInfo{}, err)
			return
		}
		for _, info := range v.([]objstore.ObjectInfo) {
			if !yield(info, nil) {
				return
			}
		}
	}
}

func (b bucketView) NewMultipart(context.Context, string) (objstore.Multipart, error) {
	return nil, errNoMultipart
}

func digest(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}
