package chainsim

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/starlog/starlog/shared/meta"
)

// metaView is one actor's meta.Store over the simulated table: every
// request becomes a call the scheduler serves.
type metaView struct {
	s *Sim
	a *actor
}

var _ meta.Store = metaView{}

func (v metaView) call(ctx context.Context, op, key string, val []byte, write bool, apply func() (any, error)) (any, error) {
	return v.s.do(ctx, &call{actor: v.a, op: op, bucket: -1, key: key, digest: digest(val), write: write, apply: apply})
}

func (v metaView) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	r, err := v.call(ctx, "m.get", pk+" "+sk, nil, false, func() (any, error) { return v.s.meta.Get(pk, sk) })
	it, _ := r.(meta.Item)
	return it, err
}

func (v metaView) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	val = slices.Clone(val)
	r, err := v.call(ctx, "m.put", pk+" "+sk, val, true, func() (any, error) { return v.s.meta.Put(pk, sk, val, cond) })
	ver, _ := r.(int64)
	return ver, err
}

func (v metaView) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	_, err := v.call(ctx, "m.del", pk+" "+sk, nil, true, func() (any, error) { return nil, v.s.meta.Delete(pk, sk, cond) })
	return err
}

func (v metaView) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	key := fmt.Sprintf("%s %s..%s back=%v lim=%d after=%s", q.PK, q.From, q.To, q.Backward, q.Limit, q.PageToken)
	r, err := v.call(ctx, "m.query", key, nil, false, func() (any, error) { return v.s.meta.Query(q) })
	pg, _ := r.(meta.Page)
	return pg, err
}

func (v metaView) BatchPut(ctx context.Context, items []meta.Item) error {
	items = slices.Clone(items)
	var keys []string
	for i := range items {
		items[i].Val = slices.Clone(items[i].Val)
		keys = append(keys, items[i].PK+" "+items[i].SK)
	}
	_, err := v.call(ctx, "m.batchput", strings.Join(keys, ","), nil, true, func() (any, error) { return nil, v.s.meta.BatchPut(items) })
	return err
}

func (v metaView) BatchDelete(ctx context.Context, keys []meta.Key) error {
	keys = slices.Clone(keys)
	var ks []string
	for _, k := range keys {
		ks = append(ks, k.PK+" "+k.SK)
	}
	_, err := v.call(ctx, "m.batchdel", strings.Join(ks, ","), nil, true, func() (any, error) { return nil, v.s.meta.BatchDelete(keys) })
	return err
}

func (v metaView) Close() error { return nil }
