package simmeta

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/starlog/starlog/shared/meta"
)

// CallFunc makes one metastore request a call its simulation's scheduler
// serves: op and key name it in the trace, val is what a write carries
// (for the call's digest), and apply is its effect on the table, run when
// the scheduler serves the call.
type CallFunc func(ctx context.Context, op, key string, val []byte, write bool, apply func() (any, error)) (any, error)

// View is a meta.Store over a Table whose every request goes through
// Call. Writes copy their values first: the caller may reuse its buffers
// while the call waits.
type View struct {
	T    *Table
	Call CallFunc
}

var _ meta.Store = View{}

func (v View) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	r, err := v.Call(ctx, "m.get", pk+" "+sk, nil, false, func() (any, error) { return v.T.Get(pk, sk) })
	it, _ := r.(meta.Item)
	return it, err
}

func (v View) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	val = slices.Clone(val)
	r, err := v.Call(ctx, "m.put", pk+" "+sk, val, true, func() (any, error) { return v.T.Put(pk, sk, val, cond) })
	ver, _ := r.(int64)
	return ver, err
}

func (v View) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	_, err := v.Call(ctx, "m.del", pk+" "+sk, nil, true, func() (any, error) { return nil, v.T.Delete(pk, sk, cond) })
	return err
}

func (v View) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	key := fmt.Sprintf("%s %s..%s back=%v lim=%d after=%s", q.PK, q.From, q.To, q.Backward, q.Limit, q.PageToken)
	r, err := v.Call(ctx, "m.query", key, nil, false, func() (any, error) { return v.T.Query(q) })
	pg, _ := r.(meta.Page)
	return pg, err
}

func (v View) BatchPut(ctx context.Context, items []meta.Item) error {
	items = slices.Clone(items)
	var keys []string
	for i := range items {
		items[i].Val = slices.Clone(items[i].Val)
		keys = append(keys, items[i].PK+" "+items[i].SK)
	}
	_, err := v.Call(ctx, "m.batchput", strings.Join(keys, ","), nil, true, func() (any, error) { return nil, v.T.BatchPut(items) })
	return err
}

func (v View) BatchDelete(ctx context.Context, keys []meta.Key) error {
	keys = slices.Clone(keys)
	var ks []string
	for _, k := range keys {
		ks = append(ks, k.PK+" "+k.SK)
	}
	_, err := v.Call(ctx, "m.batchdel", strings.Join(ks, ","), nil, true, func() (any, error) { return nil, v.T.BatchDelete(keys) })
	return err
}

func (v View) Close() error { return nil }
