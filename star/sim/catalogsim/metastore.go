package catalogsim

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/starlog/starlog/shared/meta"
)

// table is the simulated metastore's content: items by (pk, sk). Only the
// scheduler goroutine touches it.
type table struct {
	items map[string]map[string]meta.Item // pk → sk → item
	print uint64                          // fingerprint (xor of per-item hashes)
	dirty map[meta.Key]bool               // keys written this step
}

func newTable() *table {
	return &table{items: map[string]map[string]meta.Item{}, dirty: map[meta.Key]bool{}}
}

// defaultLimit is a Query's page size without a Limit (as the backends).
const defaultLimit = 1000

func itemHash(it meta.Item) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", it.PK, it.SK, it.Ver)
	h.Write(it.Val)
	return h.Sum64()
}

func checkKey(pk, sk string) error {
	if pk == "" || sk == "" {
		return fmt.Errorf("catalogsim meta: empty key pk=%q sk=%q", pk, sk)
	}
	return nil
}

// maxItemBytes is DynamoDB's item limit, which every backend enforces.
const maxItemBytes = 400 * 1024

func checkItem(pk, sk string, val []byte) error {
	if err := checkKey(pk, sk); err != nil {
		return err
	}
	if n := len(pk) + len(sk) + len(val) + 32; n > maxItemBytes {
		return fmt.Errorf("catalogsim meta: item %s/%s of %d bytes exceeds %d", pk, sk, n, maxItemBytes)
	}
	return nil
}

func (t *table) lookup(pk, sk string) (meta.Item, bool) {
	it, ok := t.items[pk][sk]
	return it, ok
}

func (t *table) set(it meta.Item, del bool) {
	if old, ok := t.lookup(it.PK, it.SK); ok {
		t.print ^= itemHash(old)
	}
	p := t.items[it.PK]
	if del {
		delete(p, it.SK)
	} else {
		if p == nil {
			p = map[string]meta.Item{}
			t.items[it.PK] = p
		}
		p[it.SK] = it
		t.print ^= itemHash(it)
	}
	t.dirty[meta.Key{PK: it.PK, SK: it.SK}] = true
}

func (t *table) get(pk, sk string) (meta.Item, error) {
	if err := checkKey(pk, sk); err != nil {
		return meta.Item{}, err
	}
	it, ok := t.lookup(pk, sk)
	if !ok {
		return meta.Item{}, fmt.Errorf("catalogsim meta: %s/%s: %w", pk, sk, meta.ErrNotFound)
	}
	it.Val = slices.Clone(it.Val)
	return it, nil
}

func (t *table) put(pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	if err := checkItem(pk, sk, val); err != nil {
		return 0, err
	}
	old, ok := t.lookup(pk, sk)
	if err := holds(old, ok, cond); err != nil {
		return 0, err
	}
	it := meta.Item{PK: pk, SK: sk, Ver: old.Ver + 1, Val: slices.Clone(val)}
	t.set(it, false)
	return it.Ver, nil
}

func holds(old meta.Item, ok bool, cond meta.Cond) error {
	v, isVer := cond.Ver()
	switch {
	case cond.IsIfAbsent() && ok, isVer && (!ok || old.Ver != v):
		return meta.ErrConditionFailed
	}
	return nil
}

func (t *table) del(pk, sk string, cond meta.Cond) error {
	if err := checkKey(pk, sk); err != nil {
		return err
	}
	if cond.IsIfAbsent() {
		return errors.New("catalogsim meta: Delete with IfAbsent")
	}
	old, ok := t.lookup(pk, sk)
	if err := holds(old, ok, cond); err != nil {
		return err
	}
	if ok {
		t.set(old, true)
	}
	return nil
}

const tokenTag = 'c'

func (t *table) query(q meta.Query) (meta.Page, error) {
	if q.PK == "" {
		return meta.Page{}, errors.New("catalogsim meta: query without pk")
	}
	if q.Limit < 0 {
		return meta.Page{}, fmt.Errorf("catalogsim meta: negative limit %d", q.Limit)
	}
	limit := q.Limit
	if limit == 0 {
		limit = defaultLimit
	}
	after, hasAfter := "", false
	if q.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.PageToken)
		if err != nil || len(b) < 2 || b[0] != tokenTag {
			return meta.Page{}, fmt.Errorf("catalogsim meta: invalid page token %q", q.PageToken)
		}
		after, hasAfter = string(b[1:]), true
	}
	var sks []string
	for sk := range t.items[q.PK] {
		switch {
		case q.From != "" && sk < q.From, q.To != "" && sk > q.To:
		case hasAfter && !q.Backward && sk <= after, hasAfter && q.Backward && sk >= after:
		default:
			sks = append(sks, sk)
		}
	}
	slices.Sort(sks)
	if q.Backward {
		slices.Reverse(sks)
	}
	var pg meta.Page
	for i, sk := range sks {
		if i == limit {
			pg.Next = base64.RawURLEncoding.EncodeToString(append([]byte{tokenTag}, pg.Items[i-1].SK...))
			break
		}
		it := t.items[q.PK][sk]
		it.Val = slices.Clone(it.Val)
		pg.Items = append(pg.Items, it)
	}
	return pg, nil
}

func (t *table) batchPut(items []meta.Item) error {
	for _, it := range items {
		if err := checkItem(it.PK, it.SK, it.Val); err != nil {
			return err
		}
	}
	for _, it := range items { // ver 1 always, as DynamoDB's BatchWriteItem
		t.set(meta.Item{PK: it.PK, SK: it.SK, Ver: 1, Val: slices.Clone(it.Val)}, false)
	}
	return nil
}

func (t *table) batchDelete(keys []meta.Key) error {
	for _, k := range keys {
		if err := checkKey(k.PK, k.SK); err != nil {
			return err
		}
	}
	for _, k := range keys {
		if old, ok := t.lookup(k.PK, k.SK); ok {
			t.set(old, true)
		}
	}
	return nil
}

// metaView is one star incarnation's meta.Store over the simulated
// table: every request becomes a call the scheduler serves, labelled with
// the client whose request made it (ctx) or the incarnation itself.
type metaView struct {
	s   *Sim
	inc *incarnation
}

var _ meta.Store = metaView{}

type whoKey struct{}

// withWho labels the metastore calls made under ctx with a client's name.
func withWho(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, whoKey{}, who)
}

func (v metaView) call(ctx context.Context, op, key string, val []byte, write bool, apply func() (any, error)) (any, error) {
	who := v.inc.name
	if w, ok := ctx.Value(whoKey{}).(string); ok {
		who = w + "@" + v.inc.name
	}
	return v.s.do(ctx, &call{inc: v.inc, who: who, op: op, key: key, digest: digest(val), write: write, apply: apply})
}

func digest(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

func (v metaView) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	r, err := v.call(ctx, "m.get", pk+" "+sk, nil, false, func() (any, error) { return v.s.meta.get(pk, sk) })
	it, _ := r.(meta.Item)
	return it, err
}

func (v metaView) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	val = slices.Clone(val)
	r, err := v.call(ctx, "m.put", pk+" "+sk, val, true, func() (any, error) { return v.s.meta.put(pk, sk, val, cond) })
	ver, _ := r.(int64)
	return ver, err
}

func (v metaView) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	_, err := v.call(ctx, "m.del", pk+" "+sk, nil, true, func() (any, error) { return nil, v.s.meta.del(pk, sk, cond) })
	return err
}

func (v metaView) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	key := fmt.Sprintf("%s %s..%s back=%v lim=%d after=%s", q.PK, q.From, q.To, q.Backward, q.Limit, q.PageToken)
	r, err := v.call(ctx, "m.query", key, nil, false, func() (any, error) { return v.s.meta.query(q) })
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
	_, err := v.call(ctx, "m.batchput", strings.Join(keys, ","), nil, true, func() (any, error) { return nil, v.s.meta.batchPut(items) })
	return err
}

func (v metaView) BatchDelete(ctx context.Context, keys []meta.Key) error {
	keys = slices.Clone(keys)
	var ks []string
	for _, k := range keys {
		ks = append(ks, k.PK+" "+k.SK)
	}
	_, err := v.call(ctx, "m.batchdel", strings.Join(ks, ","), nil, true, func() (any, error) { return nil, v.s.meta.batchDelete(keys) })
	return err
}

func (v metaView) Close() error { return nil }
