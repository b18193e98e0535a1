// Package metatest is the conformance suite every meta.Store backend passes
// (docs/design.md §15): the same assertions against SQLite and DynamoDB Local, so
// the two cannot drift apart.
package metatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// Run runs the suite. newStore returns a fresh, empty store for one subtest
// and arranges its own cleanup.
func Run(t *testing.T, newStore func(t *testing.T) meta.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s meta.Store)
	}{
		{"CreateIfAbsent", testCreateIfAbsent},
		{"GetMissing", testGetMissing},
		{"VersionsIncreaseByOne", testVersions},
		{"CASRaceOneWinner", testCASRace},
		{"ConditionalDelete", testConditionalDelete},
		{"AlwaysPutDelete", testAlways},
		{"EmptyValue", testEmptyValue},
		{"InvalidArguments", testInvalid},
		{"FloorLookup", testFloor},
		{"Ranges", testRanges},
		{"Paging", testPaging},
		{"LargeValue", testLargeValue},
		{"BatchPut", testBatchPut},
		{"BatchDelete", testBatchDelete},
		{"PartitionIsolation", testIsolation},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustPut(t *testing.T, s meta.Store, pk, sk string, val []byte, c meta.Cond) int64 {
	t.Helper()
	v, err := s.Put(ctxFor(t), pk, sk, val, c)
	if err != nil {
		t.Fatalf("Put(%s/%s): %v", pk, sk, err)
	}
	return v
}

func mustGet(t *testing.T, s meta.Store, pk, sk string) meta.Item {
	t.Helper()
	it, err := s.Get(ctxFor(t), pk, sk)
	if err != nil {
		t.Fatalf("Get(%s/%s): %v", pk, sk, err)
	}
	if it.PK != pk || it.SK != sk {
		t.Fatalf("Get(%s/%s) returned key %s/%s", pk, sk, it.PK, it.SK)
	}
	return it
}

func wantNotFound(t *testing.T, s meta.Store, pk, sk string) {
	t.Helper()
	if it, err := s.Get(ctxFor(t), pk, sk); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("Get(%s/%s) = %+v, %v; want ErrNotFound", pk, sk, it, err)
	}
}

func wantItem(t *testing.T, s meta.Store, pk, sk string, ver int64, val []byte) {
	t.Helper()
	it := mustGet(t, s, pk, sk)
	if it.Ver != ver || !bytes.Equal(it.Val, val) {
		t.Fatalf("Get(%s/%s) = ver %d val %q; want ver %d val %q", pk, sk, it.Ver, short(it.Val), ver, short(val))
	}
}

func short(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

func testCreateIfAbsent(t *testing.T, s meta.Store) {
	ctx := ctxFor(t)
	if v := mustPut(t, s, "basin#a", "cfg", []byte("one"), meta.IfAbsent()); v != 1 {
		t.Fatalf("first IfAbsent put: ver %d, want 1", v)
	}
	v, err := s.Put(ctx, "basin#a", "cfg", []byte("two"), meta.IfAbsent())
	if !errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("second IfAbsent put = %d, %v; want ErrConditionFailed", v, err)
	}
	wantItem(t, s, "basin#a", "cfg", 1, []byte("one"))
	// Absence is per key: a sibling sort key and a sibling partition are free.
	mustPut(t, s, "basin#a", "cfg2", []byte("x"), meta.IfAbsent())
	mustPut(t, s, "basin#b", "cfg", []byte("y"), meta.IfAbsent())
}

func testGetMissing(t *testing.T, s meta.Store) {
	wantNotFound(t, s, "stream#1", "lease")
	mustPut(t, s, "stream#1", "lease", []byte("x"), meta.Always())
	wantNotFound(t, s, "stream#1", "leasf")
	wantNotFound(t, s, "stream#1", "leas")
	wantNotFound(t, s, "stream#2", "lease")
}

func testVersions(t *testing.T, s meta.Store) {
	ctx := ctxFor(t)
	pk, sk := "chain#s1/standard", "head"
	for want := int64(1); want <= 3; want++ {
		if v := mustPut(t, s, pk, sk, fmt.Appendf(nil, "always %d", want), meta.Always()); v != want {
			t.Fatalf("Always put #%d: ver %d", want, v)
		}
	}
	for want := int64(4); want <= 6; want++ {
		v := mustPut(t, s, pk, sk, fmt.Appendf(nil, "cas %d", want), meta.IfVer(want-1))
		if v != want {
			t.Fatalf("IfVer(%d): ver %d, want %d", want-1, v, want)
		}
		wantItem(t, s, pk, sk, want, fmt.Appendf(nil, "cas %d", want))
	}
	for _, stale := range []int64{0, 1, 5, 7} {
		if v, err := s.Put(ctx, pk, sk, []byte("stale"), meta.IfVer(stale)); !errors.Is(err, meta.ErrConditionFailed) {
			t.Fatalf("IfVer(%d) at ver 6 = %d, %v; want ErrConditionFailed", stale, v, err)
		}
	}
	wantItem(t, s, pk, sk, 6, []byte("cas 6"))
	// IfVer never creates.
	if v, err := s.Put(ctx, pk, "missing", []byte("x"), meta.IfVer(1)); !errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("IfVer(1) on a missing item = %d, %v; want ErrConditionFailed", v, err)
	}
	if v, err := s.Put(ctx, pk, "missing", []byte("x"), meta.IfVer(0)); !errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("IfVer(0) on a missing item = %d, %v; want ErrConditionFailed", v, err)
	}
	wantNotFound(t, s, pk, "missing")
}

// testCASRace: 16 racers read the same version, then all try IfVer on it at
// once; exactly one wins each round and its value is the one stored.
func testCASRace(t *testing.T, s meta.Store) {
	const racers, rounds = 16, 4
	ctx := ctxFor(t)
	pk, sk := "stream#race", "lease"
	mustPut(t, s, pk, sk, []byte("start"), meta.IfAbsent())
	for round := range rounds {
		base := mustGet(t, s, pk, sk).Ver
		var (
			start   = make(chan struct{})
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []int
			errs    []error
		)
		for g := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				v, err := s.Put(ctx, pk, sk, fmt.Appendf(nil, "round %d racer %d", round, g), meta.IfVer(base))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners = append(winners, g)
					if v != base+1 {
						errs = append(errs, fmt.Errorf("winner %d got ver %d, want %d", g, v, base+1))
					}
				case !errors.Is(err, meta.ErrConditionFailed):
					errs = append(errs, fmt.Errorf("racer %d: %w", g, err))
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("round %d: %v", round, errors.Join(errs...))
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners %v, want exactly 1", round, len(winners), winners)
		}
		wantItem(t, s, pk, sk, base+1, fmt.Appendf(nil, "round %d racer %d", round, winners[0]))
	}
}

func testConditionalDelete(t *testing.T, s meta.Store) {
	ctx := ctxFor(t)
	pk, sk := "star#s1", "reg"
	mustPut(t, s, pk, sk, []byte("a"), meta.IfAbsent())
	mustPut(t, s, pk, sk, []byte("b"), meta.IfVer(1))
	for _, wrong := range []int64{0, 1, 3} {
		if err := s.Delete(ctx, pk, sk, meta.IfVer(wrong)); !errors.Is(err, meta.ErrConditionFailed) {
			t.Fatalf("Delete IfVer(%d) at ver 2 = %v; want ErrConditionFailed", wrong, err)
		}
	}
	wantItem(t, s, pk, sk, 2, []byte("b"))
	if err := s.Delete(ctx, pk, sk, meta.IfVer(2)); err != nil {
		t.Fatalf("Delete IfVer(2): %v", err)
	}
	wantNotFound(t, s, pk, sk)
	if err := s.Delete(ctx, pk, sk, meta.IfVer(2)); !errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("Delete IfVer(2) of a deleted item = %v; want ErrConditionFailed", err)
	}
	// A recreated item starts again at ver 1.
	if v := mustPut(t, s, pk, sk, []byte("c"), meta.IfAbsent()); v != 1 {
		t.Fatalf("recreate: ver %d, want 1", v)
	}
	err := s.Delete(ctx, pk, sk, meta.IfAbsent())
	if err == nil || errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("Delete IfAbsent = %v; want an argument error", err)
	}
	wantItem(t, s, pk, sk, 1, []byte("c"))
}

func testAlways(t *testing.T, s meta.Store) {
	ctx := ctxFor(t)
	pk, sk := "chains", "s1/express"
	if v := mustPut(t, s, pk, sk, []byte("a"), meta.Always()); v != 1 {
		t.Fatalf("Always put on a missing item: ver %d, want 1", v)
	}
	if v := mustPut(t, s, pk, sk, []byte("b"), meta.Always()); v != 2 {
		t.Fatalf("Always put on ver 1: ver %d, want 2", v)
	}
	wantItem(t, s, pk, sk, 2, []byte("b"))
	if err := s.Delete(ctx, pk, sk, meta.Always()); err != nil {
		t.Fatalf("Delete Always: %v", err)
	}
	wantNotFound(t, s, pk, sk)
	if err := s.Delete(ctx, pk, sk, meta.Always()); err != nil {
		t.Fatalf("Delete Always of a missing item: %v", err)
	}
	if v := mustPut(t, s, pk, sk, []byte("c"), meta.Always()); v != 1 {
		t.Fatalf("Always put after delete: ver %d, want 1", v)
	}
}

func testEmptyValue(t *testing.T, s meta.Store) {
	mustPut(t, s, "basin#e", "nil", nil, meta.IfAbsent())
	mustPut(t, s, "basin#e", "empty", []byte{}, meta.Always())
	for _, sk := range []string{"nil", "empty"} {
		if it := mustGet(t, s, "basin#e", sk); len(it.Val) != 0 || it.Ver != 1 {
			t.Fatalf("%s: ver %d val %q; want ver 1, empty value", sk, it.Ver, it.Val)
		}
	}
}

func testInvalid(t *testing.T, s meta.Store) {
	ctx := ctxFor(t)
	notArgErr := func(err error) bool {
		return err == nil || errors.Is(err, meta.ErrConditionFailed) || errors.Is(err, meta.ErrNotFound)
	}
	if _, err := s.Put(ctx, "", "sk", []byte("x"), meta.Always()); notArgErr(err) {
		t.Errorf("Put with empty pk = %v; want an argument error", err)
	}
	if _, err := s.Put(ctx, "pk", "", []byte("x"), meta.Always()); notArgErr(err) {
		t.Errorf("Put with empty sk = %v; want an argument error", err)
	}
	if _, err := s.Get(ctx, "", "sk"); notArgErr(err) {
		t.Errorf("Get with empty pk = %v; want an argument error", err)
	}
	if _, err := s.Query(ctx, meta.Query{PK: ""}); err == nil {
		t.Errorf("Query with empty pk succeeded")
	}
	if _, err := s.Query(ctx, meta.Query{PK: "p", Limit: -1}); err == nil {
		t.Errorf("Query with negative limit succeeded")
	}
	for _, tok := range []string{"!!!", "AAAA", "not a token"} {
		if _, err := s.Query(ctx, meta.Query{PK: "p", PageToken: tok}); err == nil {
			t.Errorf("Query with page token %q succeeded", tok)
		}
	}
	if err := s.BatchPut(ctx, []meta.Item{{PK: "p", SK: "a"}, {PK: "", SK: "b"}}); err == nil {
		t.Errorf("BatchPut with an empty pk succeeded")
	}
	if err := s.BatchDelete(ctx, []meta.Key{{PK: "p", SK: ""}}); err == nil {
		t.Errorf("BatchDelete with an empty sk succeeded")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Get(cctx, "p", "a"); err == nil {
		t.Errorf("Get with a canceled context succeeded")
	}
}

// refSK is the sort key of a span ref or catalog row (meta.RefKey's layout).
func refSK(n uint64) string { return fmt.Sprintf("r#%020d", n) }

func testFloor(t *testing.T, s meta.Store) {
	ctx := ctxFor(t)
	pk := "stream#floor"
	mustPut(t, s, pk, "lease", []byte("lease"), meta.Always())
	var items []meta.Item
	for n := uint64(100); n <= 1000; n += 100 {
		items = append(items, meta.Item{PK: pk, SK: refSK(n), Val: fmt.Appendf(nil, "ref %d", n)})
	}
	if err := s.BatchPut(ctx, items); err != nil {
		t.Fatal(err)
	}
	floor := func(q meta.Query) (meta.Item, bool) {
		t.Helper()
		p, err := s.Query(ctx, q)
		if err != nil {
			t.Fatalf("Query(%+v): %v", q, err)
		}
		if len(p.Items) > 1 {
			t.Fatalf("Query(%+v) with Limit 1 returned %d items", q, len(p.Items))
		}
		if len(p.Items) == 0 {
			return meta.Item{}, false
		}
		return p.Items[0], true
	}
	cases := []struct {
		seq  uint64
		want uint64 // 0: no ref at or below seq
	}{{150, 100}, {100, 100}, {199, 100}, {200, 200}, {999, 900}, {1000, 1000}, {5000, 1000}, {99, 0}, {0, 0}}
	for _, c := range cases {
		// The brief's floor lookup: no lower bound, so it must not stray
		// past the refs onto "lease" when a ref exists.
		it, ok := floor(meta.Query{PK: pk, To: refSK(c.seq), Backward: true, Limit: 1})
		if c.want != 0 && (!ok || it.SK != refSK(c.want) || string(it.Val) != fmt.Sprintf("ref %d", c.want)) {
			t.Errorf("floor(%d) = %q %v, want %s", c.seq, it.SK, ok, refSK(c.want))
		}
		// With the ref prefix as the lower bound (meta.FloorQuery's form) a
		// seq below every ref finds nothing.
		it, ok = floor(meta.Query{PK: pk, From: "r#", To: refSK(c.seq), Backward: true, Limit: 1})
		switch {
		case c.want == 0 && ok:
			t.Errorf("bounded floor(%d) = %q, want nothing", c.seq, it.SK)
		case c.want != 0 && (!ok || it.SK != refSK(c.want)):
			t.Errorf("bounded floor(%d) = %q %v, want %s", c.seq, it.SK, ok, refSK(c.want))
		}
	}
	// The greatest row: the stream's durable tail.
	if it, ok := floor(meta.Query{PK: pk, From: "r#", To: "r$", Backward: true, Limit: 1}); !ok || it.SK != refSK(1000) {
		t.Errorf("greatest ref = %q %v, want %s", it.SK, ok, refSK(1000))
	}
}

func sks(items []meta.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.SK
	}
	return out
}

func testRanges(t *testing.T, s meta.Store) {
	ctx := ctxFor(t)
	pk := "chain#s1/standard"
	all := []string{"a", "b", "c", "d", "e"}
	var items []meta.Item
	for _, sk := range all {
		items = append(items, meta.Item{PK: pk, SK: sk, Val: []byte(sk)})
	}
	if err := s.BatchPut(ctx, items); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		from, to string
		want     []string
	}{
		{"", "", all},
		{"c", "", []string{"c", "d", "e"}},
		{"bb", "", []string{"c", "d", "e"}},
		{"", "c", []string{"a", "b", "c"}},
		{"", "cc", []string{"a", "b", "c"}},
		{"b", "d", []string{"b", "c", "d"}},
		{"c", "c", []string{"c"}},
		{"cc", "cd", nil},
		{"d", "b", nil}, // inverted: empty, not an error
		{"f", "", nil},
		{"", "0", nil},
	}
	for _, c := range cases {
		for _, back := range []bool{false, true} {
			q := meta.Query{PK: pk, From: c.from, To: c.to, Backward: back}
			p, err := s.Query(ctx, q)
			if err != nil {
				t.Fatalf("Query(%+v): %v", q, err)
			}
			want := slices.Clone(c.want)
			if back {
				slices.Reverse(want)
			}
			if got := sks(p.Items); !slices.Equal(got, want) || p.Next != "" {
				t.Errorf("Query(from %q, to %q, backward %v) = %q next %q; want %q and no next page",
					c.from, c.to, back, got, p.Next, want)
			}
			for _, it := range p.Items {
				if it.PK != pk || string(it.Val) != it.SK || it.Ver != 1 {
					t.Errorf("Query returned %+v", it)
				}
			}
		}
	}
	// Limit applies from the query's start in its direction.
	p, err := s.Query(ctx, meta.Query{PK: pk, From: "b", Backward: true, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := sks(p.Items); !slices.Equal(got, []string{"e", "d"}) || p.Next == "" {
		t.Errorf("backward from b, limit 2 = %q next %q; want [e d] and a next page", got, p.Next)
	}
	p, err = s.Query(ctx, meta.Query{PK: pk, From: "b", Backward: true, Limit: 2, PageToken: p.Next})
	if err != nil {
		t.Fatal(err)
	}
	if got := sks(p.Items); !slices.Equal(got, []string{"c", "b"}) || p.Next != "" {
		t.Errorf("second page = %q next %q; want [c b] and no next page", got, p.Next)
	}
}

// collect pages through q, checking page sizes, and returns every item.
func collect(t *testing.T, s meta.Store, q meta.Query) ([]meta.Item, int) {
	t.Helper()
	ctx := ctxFor(t)
	var out []meta.Item
	pages := 0
	for {
		p, err := s.Query(ctx, q)
		if err != nil {
			t.Fatalf("Query page %d: %v", pages, err)
		}
		pages++
		if q.Limit > 0 && len(p.Items) > q.Limit {
			t.Fatalf("page %d has %d items, limit %d", pages, len(p.Items), q.Limit)
		}
		out = append(out, p.Items...)
		if p.Next == "" {
			return out, pages
		}
		if pages > 10000 {
			t.Fatal("query does not end")
		}
		q.PageToken = p.Next
	}
}

func testPaging(t *testing.T, s meta.Store) {
	const n = 2500
	ctx := ctxFor(t)
	pk := "stream#paging"
	items := make([]meta.Item, n)
	for i := range items {
		items[i] = meta.Item{PK: pk, SK: refSK(uint64(i) * 7), Val: fmt.Appendf(nil, "v%d", i)}
	}
	// Shuffled, so order comes from the store, not from insertion.
	shuffled := slices.Clone(items)
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	if err := s.BatchPut(ctx, shuffled); err != nil {
		t.Fatal(err)
	}
	check := func(name string, got, want []meta.Item) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d items, want %d", name, len(got), len(want))
		}
		for i := range want {
			if got[i].SK != want[i].SK || !bytes.Equal(got[i].Val, want[i].Val) || got[i].PK != pk {
				t.Fatalf("%s: item %d is %s/%s=%q, want %s=%q", name, i, got[i].PK, got[i].SK, got[i].Val, want[i].SK, want[i].Val)
			}
		}
	}
	reversed := slices.Clone(items)
	slices.Reverse(reversed)

	got, pages := collect(t, s, meta.Query{PK: pk, Limit: 100})
	check("forward", got, items)
	if pages != n/100 {
		t.Errorf("forward: %d pages, want %d (no trailing empty page)", pages, n/100)
	}
	got, pages = collect(t, s, meta.Query{PK: pk, Limit: 100, Backward: true})
	check("backward", got, reversed)
	if pages != n/100 {
		t.Errorf("backward: %d pages, want %d", pages, n/100)
	}
	// Default limit: one page of 1000, then more.
	p, err := s.Query(ctx, meta.Query{PK: pk})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 1000 || p.Next == "" {
		t.Errorf("default page: %d items, next %q; want 1000 and a next page", len(p.Items), p.Next)
	}
	// A bounded range, paged with an odd limit, both ways.
	lo, hi := 313, 1999
	sub := items[lo : hi+1]
	got, _ = collect(t, s, meta.Query{PK: pk, From: sub[0].SK, To: sub[len(sub)-1].SK, Limit: 37})
	check("bounded forward", got, sub)
	subRev := slices.Clone(sub)
	slices.Reverse(subRev)
	got, _ = collect(t, s, meta.Query{PK: pk, From: sub[0].SK, To: sub[len(sub)-1].SK, Limit: 37, Backward: true})
	check("bounded backward", got, subRev)
	// Rows added behind the cursor are not seen; rows ahead of it are.
	p, err = s.Query(ctx, meta.Query{PK: pk, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, pk, refSK(1), []byte("behind"), meta.IfAbsent())
	mustPut(t, s, pk, refSK(71), []byte("ahead"), meta.IfAbsent())
	p, err = s.Query(ctx, meta.Query{PK: pk, Limit: 3, PageToken: p.Next})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sks(p.Items), []string{refSK(70), refSK(71), refSK(77)}; !slices.Equal(got, want) {
		t.Errorf("page after concurrent inserts = %q, want %q", got, want)
	}
}

func testLargeValue(t *testing.T, s meta.Store) {
	ctx := ctxFor(t)
	big := make([]byte, 350*1024)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	pk := "stream#big"
	mustPut(t, s, pk, refSK(0), big, meta.IfAbsent())
	wantItem(t, s, pk, refSK(0), 1, big)
	big2 := slices.Clone(big)
	big2[len(big2)-1] ^= 0xff
	mustPut(t, s, pk, refSK(0), big2, meta.IfVer(1))
	wantItem(t, s, pk, refSK(0), 2, big2)
	if err := s.BatchPut(ctx, []meta.Item{{PK: pk, SK: refSK(1), Val: big}, {PK: pk, SK: refSK(2), Val: big2}}); err != nil {
		t.Fatalf("BatchPut of two 350 KB items: %v", err)
	}
	got, _ := collect(t, s, meta.Query{PK: pk})
	if len(got) != 3 || !bytes.Equal(got[0].Val, big2) || !bytes.Equal(got[1].Val, big) || !bytes.Equal(got[2].Val, big2) {
		t.Fatalf("query of large items returned %d items or wrong values", len(got))
	}
	// Past DynamoDB's 400 KB item limit every backend refuses.
	tooBig := make([]byte, 401*1024)
	if _, err := s.Put(ctx, pk, refSK(9), tooBig, meta.Always()); err == nil || errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("Put of a 401 KB value = %v; want a size error", err)
	}
	wantNotFound(t, s, pk, refSK(9))
}

func testBatchPut(t *testing.T, s meta.Store) {
	ctx := ctxFor(t)
	var items []meta.Item
	for i := range 60 { // more than one DynamoDB batch (25)
		pk := fmt.Sprintf("chain#s%d/standard", i%2)
		items = append(items, meta.Item{PK: pk, SK: fmt.Sprintf("m#%04d", i), Val: fmt.Appendf(nil, "marker %d", i), Ver: 99})
	}
	check := func(when string) {
		t.Helper()
		for pkIdx := range 2 {
			pk := fmt.Sprintf("chain#s%d/standard", pkIdx)
			got, _ := collect(t, s, meta.Query{PK: pk})
			if len(got) != 30 {
				t.Fatalf("%s: %s holds %d items, want 30", when, pk, len(got))
			}
			for j, it := range got {
				i := pkIdx + 2*j
				if it.SK != fmt.Sprintf("m#%04d", i) || string(it.Val) != fmt.Sprintf("marker %d", i) || it.Ver != 1 {
					t.Fatalf("%s: item %+v, want sk m#%04d, marker %d, ver 1", when, it, i, i)
				}
			}
		}
	}
	if err := s.BatchPut(ctx, items); err != nil {
		t.Fatalf("BatchPut: %v", err)
	}
	check("first run")
	if err := s.BatchPut(ctx, items); err != nil {
		t.Fatalf("BatchPut re-run: %v", err)
	}
	check("re-run")
	// A batch-written item always gets ver 1, even over a newer version
	// (DynamoDB's BatchWriteItem cannot increment). Do not mix BatchPut and
	// CAS on one key.
	mustPut(t, s, "chain#s0/standard", "m#0000", []byte("cas"), meta.IfVer(1))
	if err := s.BatchPut(ctx, items[:1]); err != nil {
		t.Fatal(err)
	}
	wantItem(t, s, "chain#s0/standard", "m#0000", 1, []byte("marker 0"))
	// A key given twice keeps its last value.
	dup := []meta.Item{
		{PK: "chains", SK: "s1/standard", Val: []byte("first")},
		{PK: "chains", SK: "s2/standard", Val: []byte("other")},
		{PK: "chains", SK: "s1/standard", Val: []byte("last")},
	}
	if err := s.BatchPut(ctx, dup); err != nil {
		t.Fatalf("BatchPut with a repeated key: %v", err)
	}
	wantItem(t, s, "chains", "s1/standard", 1, []byte("last"))
	wantItem(t, s, "chains", "s2/standard", 1, []byte("other"))
	if err := s.BatchPut(ctx, nil); err != nil {
		t.Fatalf("empty BatchPut: %v", err)
	}
}

func testBatchDelete(t *testing.T, s meta.Store) {
	ctx := ctxFor(t)
	pk := "stream#del"
	var items []meta.Item
	for i := range 70 {
		items = append(items, meta.Item{PK: pk, SK: refSK(uint64(i)), Val: []byte{byte(i)}})
	}
	if err := s.BatchPut(ctx, items); err != nil {
		t.Fatal(err)
	}
	// Delete the even ones, plus 20 keys that never existed, plus a repeat.
	var keys []meta.Key
	for i := 0; i < 70; i += 2 {
		keys = append(keys, meta.Key{PK: pk, SK: refSK(uint64(i))})
	}
	for i := range 20 {
		keys = append(keys, meta.Key{PK: pk, SK: refSK(uint64(1000 + i))}, meta.Key{PK: "stream#none", SK: "lease"})
	}
	keys = append(keys, keys[0])
	if err := s.BatchDelete(ctx, keys); err != nil {
		t.Fatalf("BatchDelete: %v", err)
	}
	got, _ := collect(t, s, meta.Query{PK: pk})
	if len(got) != 35 {
		t.Fatalf("%d items left, want 35", len(got))
	}
	for j, it := range got {
		if want := refSK(uint64(2*j + 1)); it.SK != want {
			t.Fatalf("item %d is %s, want %s", j, it.SK, want)
		}
	}
	if err := s.BatchDelete(ctx, keys); err != nil {
		t.Fatalf("BatchDelete re-run: %v", err)
	}
	if err := s.BatchDelete(ctx, nil); err != nil {
		t.Fatalf("empty BatchDelete: %v", err)
	}
}

func testIsolation(t *testing.T, s meta.Store) {
	ctx := ctxFor(t)
	// Partitions whose names are prefixes of each other, and sort keys that
	// would interleave if the store concatenated pk and sk.
	pks := []string{"stream#1", "stream#10", "stream#1#", "stream#"}
	var items []meta.Item
	for _, pk := range pks {
		for _, sk := range []string{"0", "lease", "r#1", "r#10"} {
			items = append(items, meta.Item{PK: pk, SK: sk, Val: []byte(pk + "|" + sk)})
		}
	}
	if err := s.BatchPut(ctx, items); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "stream#1", "zz", []byte("stream#1|zz"), meta.IfAbsent())
	for _, pk := range pks {
		want := []string{"0", "lease", "r#1", "r#10"}
		if pk == "stream#1" {
			want = append(want, "zz")
		}
		for _, q := range []meta.Query{
			{PK: pk}, {PK: pk, Backward: true}, {PK: pk, From: "r#"}, {PK: pk, To: "r#2", Backward: true},
			{PK: pk, Limit: 1},
		} {
			got, _ := collect(t, s, q)
			for _, it := range got {
				if it.PK != pk || string(it.Val) != pk+"|"+it.SK {
					t.Fatalf("Query(%+v) leaked %s/%s=%q", q, it.PK, it.SK, it.Val)
				}
			}
			if q.From == "" && q.To == "" {
				g := sks(got)
				if q.Backward {
					slices.Reverse(g)
				}
				if !slices.Equal(g, want) {
					t.Fatalf("Query(%+v) = %q, want %q", q, g, want)
				}
			}
		}
	}
	if _, err := s.Get(ctx, "stream#10", "zz"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("Get(stream#10/zz) = %v, want ErrNotFound", err)
	}
	if p, err := s.Query(ctx, meta.Query{PK: "stream#100"}); err != nil || len(p.Items) != 0 {
		t.Fatalf("Query of an empty partition = %d items, %v", len(p.Items), err)
	}
}
