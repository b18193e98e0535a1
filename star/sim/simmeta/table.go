// Package simmeta is the simulated metastore's table the simulations
// (star/sim/chainsim, star/sim/catalogsim) share: items by (pk, sk) with
// the meta.Store contract's conditions, paging and limits, a fingerprint
// of the content and the keys written since the checker last looked.
// Each simulation wraps it in a meta.Store whose every call is a pending
// call its scheduler serves; only the scheduler touches the table.
package simmeta

import (
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/starlog/starlog/shared/meta"
)

// Table is the simulated metastore's content: items by (pk, sk). Only the
// scheduler goroutine touches it.
type Table struct {
	Items map[string]map[string]meta.Item // pk → sk → item
	Print uint64                          // fingerprint (xor of per-item hashes)
	Dirty map[meta.Key]bool               // keys written this step
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{Items: map[string]map[string]meta.Item{}, Dirty: map[meta.Key]bool{}}
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
		return fmt.Errorf("simmeta: empty key pk=%q sk=%q", pk, sk)
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
		return fmt.Errorf("simmeta: item %s/%s of %d bytes exceeds %d", pk, sk, n, maxItemBytes)
	}
	return nil
}

func (t *Table) Lookup(pk, sk string) (meta.Item, bool) {
	it, ok := t.Items[pk][sk]
	return it, ok
}

func (t *Table) Set(it meta.Item, del bool) {
	if old, ok := t.Lookup(it.PK, it.SK); ok {
		t.Print ^= itemHash(old)
	}
	p := t.Items[it.PK]
	if del {
		delete(p, it.SK)
	} else {
		if p == nil {
			p = map[string]meta.Item{}
			t.Items[it.PK] = p
		}
		p[it.SK] = it
		t.Print ^= itemHash(it)
	}
	t.Dirty[meta.Key{PK: it.PK, SK: it.SK}] = true
}

func (t *Table) Get(pk, sk string) (meta.Item, error) {
	if err := checkKey(pk, sk); err != nil {
		return meta.Item{}, err
	}
	it, ok := t.Lookup(pk, sk)
	if !ok {
		return meta.Item{}, fmt.Errorf("simmeta: %s/%s: %w", pk, sk, meta.ErrNotFound)
	}
	it.Val = slices.Clone(it.Val)
	return it, nil
}

func (t *Table) Put(pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	if err := checkItem(pk, sk, val); err != nil {
		return 0, err
	}
	old, ok := t.Lookup(pk, sk)
	if err := holds(old, ok, cond); err != nil {
		return 0, err
	}
	it := meta.Item{PK: pk, SK: sk, Ver: old.Ver + 1, Val: slices.Clone(val)}
	t.Set(it, false)
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

func (t *Table) Delete(pk, sk string, cond meta.Cond) error {
	if err := checkKey(pk, sk); err != nil {
		return err
	}
	if cond.IsIfAbsent() {
		return errors.New("simmeta: Delete with IfAbsent")
	}
	old, ok := t.Lookup(pk, sk)
	if err := holds(old, ok, cond); err != nil {
		return err
	}
	if ok {
		t.Set(old, true)
	}
	return nil
}

const tokenTag = 'c'

func (t *Table) Query(q meta.Query) (meta.Page, error) {
	if q.PK == "" {
		return meta.Page{}, errors.New("simmeta: query without pk")
	}
	if q.Limit < 0 {
		return meta.Page{}, fmt.Errorf("simmeta: negative limit %d", q.Limit)
	}
	limit := q.Limit
	if limit == 0 {
		limit = defaultLimit
	}
	after, hasAfter := "", false
	if q.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.PageToken)
		if err != nil || len(b) < 2 || b[0] != tokenTag {
			return meta.Page{}, fmt.Errorf("simmeta: invalid page token %q", q.PageToken)
		}
		after, hasAfter = string(b[1:]), true
	}
	var sks []string
	for sk := range t.Items[q.PK] {
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
		it := t.Items[q.PK][sk]
		it.Val = slices.Clone(it.Val)
		pg.Items = append(pg.Items, it)
	}
	return pg, nil
}

func (t *Table) BatchPut(items []meta.Item) error {
	for _, it := range items {
		if err := checkItem(it.PK, it.SK, it.Val); err != nil {
			return err
		}
	}
	for _, it := range items { // ver 1 always, as DynamoDB's BatchWriteItem
		t.Set(meta.Item{PK: it.PK, SK: it.SK, Ver: 1, Val: slices.Clone(it.Val)}, false)
	}
	return nil
}

func (t *Table) BatchDelete(keys []meta.Key) error {
	for _, k := range keys {
		if err := checkKey(k.PK, k.SK); err != nil {
			return err
		}
	}
	for _, k := range keys {
		if old, ok := t.Lookup(k.PK, k.SK); ok {
			t.Set(old, true)
		}
	}
	return nil
}
