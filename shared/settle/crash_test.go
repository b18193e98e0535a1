package settle_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/loglet"
)

// errCrash is what every call returns once the process "died".
var errCrash = errors.New("crashed")

// crasher kills a process at its k-th mutating call to either store: the
// call fails without effect (before) or takes effect and its reply is lost
// (after), and every later call fails.
type crasher struct {
	mu      sync.Mutex
	left    int
	after   bool
	crashed bool
	steps   int
}

// mutate gates one mutating call: do runs it unless the crash comes first.
func (c *crasher) mutate(do func() error) error {
	c.mu.Lock()
	if c.crashed {
		c.mu.Unlock()
		return errCrash
	}
	c.steps++
	if c.left > 0 {
		c.left--
		c.mu.Unlock()
		return do()
	}
	c.crashed = true
	after := c.after
	c.mu.Unlock()
	if after {
		_ = do()
	}
	return errCrash
}

func (c *crasher) read() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return errCrash
	}
	return nil
}

type crashMeta struct {
	meta.Store
	c *crasher
}

func (m crashMeta) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	if err := m.c.read(); err != nil {
		return meta.Item{}, err
	}
	return m.Store.Get(ctx, pk, sk)
}

func (m crashMeta) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	if err := m.c.read(); err != nil {
		return meta.Page{}, err
	}
	return m.Store.Query(ctx, q)
}

func (m crashMeta) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (v int64, err error) {
	err = m.c.mutate(func() error { v, err = m.Store.Put(ctx, pk, sk, val, cond); return err })
	return v, err
}

func (m crashMeta) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	return m.c.mutate(func() error { return m.Store.Delete(ctx, pk, sk, cond) })
}

func (m crashMeta) BatchPut(ctx context.Context, items []meta.Item) error {
	return m.c.mutate(func() error { return m.Store.BatchPut(ctx, items) })
}

func (m crashMeta) BatchDelete(ctx context.Context, keys []meta.Key) error {
	return m.c.mutate(func() error { return m.Store.BatchDelete(ctx, keys) })
}

type crashObjects struct {
	objstore.Store
	c *crasher
}

func (s crashObjects) Bucket(name string) objstore.Bucket {
	return crashBucket{Bucket: s.Store.Bucket(name), c: s.c}
}

type crashBucket struct {
	objstore.Bucket
	c *crasher
}

func (b crashBucket) PutIfAbsent(ctx context.Context, key string, body []byte) (info objstore.ObjectInfo, err error) {
	err = b.c.mutate(func() error { info, err = b.Bucket.PutIfAbsent(ctx, key, body); return err })
	return info, err
}

func (b crashBucket) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := b.c.read(); err != nil {
		return nil, err
	}
	return b.Bucket.Get(ctx, key, off, n)
}

func (b crashBucket) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := b.c.read(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return b.Bucket.Head(ctx, key)
}

func (b crashBucket) Delete(ctx context.Context, key string) error {
	return b.c.mutate(func() error { return b.Bucket.Delete(ctx, key) })
}

func (b crashBucket) DeleteMany(ctx context.Context, keys []string) error {
	return b.c.mutate(func() error { return b.Bucket.DeleteMany(ctx, keys) })
}

func (b crashBucket) List(ctx context.Context, prefix string) iter.Seq2[objstore.ObjectInfo, error] {
	return b.Bucket.List(ctx, prefix)
}

func (b crashBucket) NewMultipart(ctx context.Context, key string) (mp objstore.Multipart, err error) {
	err = b.c.mutate(func() error { mp, err = b.Bucket.NewMultipart(ctx, key); return err })
	if err != nil {
		return nil, err
	}
	return crashMultipart{Multipart: mp, c: b.c}, nil
}

type crashMultipart struct {
	objstore.Multipart
	c *crasher
}

func (m crashMultipart) AddCopyPart(ctx context.Context, srcBucket, srcKey string, off, n int64) error {
	return m.c.mutate(func() error { return m.Multipart.AddCopyPart(ctx, srcBucket, srcKey, off, n) })
}

func (m crashMultipart) AddPart(ctx context.Context, body []byte) error {
	return m.c.mutate(func() error { return m.Multipart.AddPart(ctx, body) })
}

func (m crashMultipart) Complete(ctx context.Context) (info objstore.ObjectInfo, err error) {
	err = m.c.mutate(func() error { info, err = m.Multipart.Complete(ctx); return err })
	return info, err
}

func (m crashMultipart) Abort(ctx context.Context) error {
	return m.c.mutate(func() error { return m.Multipart.Abort(ctx) })
}

// snapshot is a copy of everything the auditor reads and writes: every
// object of every bucket, and the rows of the chain, the chain directory
// and the streams.
type snapshot struct {
	objects map[string][]byte // "<bucket>/<key>"
	rows    []meta.Item
}

func takeSnapshot(t testing.TB, e *env) snapshot {
	t.Helper()
	ctx := context.Background()
	s := snapshot{objects: map[string][]byte{}}
	for _, b := range append(slices.Clone(zones), settledB) {
		for info, err := range e.objs.Bucket(b).List(ctx, "") {
			if err != nil {
				t.Fatal(err)
			}
			body, err := e.objs.Bucket(b).Get(ctx, info.Key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			s.objects[b+"/"+info.Key] = body
		}
	}
	pks := []string{"chains", meta.ChainPK(e.cfg.Star, e.cfg.Class), meta.ReclaimPK}
	for _, id := range e.ids() {
		pks = append(pks, meta.RefKey(id, 0).PK)
	}
	for _, pk := range pks {
		q := meta.Query{PK: pk}
		for {
			pg, err := e.meta.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			s.rows = append(s.rows, pg.Items...)
			if pg.Next == "" {
				break
			}
			q.PageToken = pg.Next
		}
	}
	return s
}

// restore builds fresh stores holding the snapshot.
func (s snapshot) restore(t testing.TB) (meta.Store, objstore.Store) {
	t.Helper()
	ctx := context.Background()
	m, err := mem.New(append(slices.Clone(zones), settledB)...)
	if err != nil {
		t.Fatal(err)
	}
	for k, body := range s.objects {
		b, key, _ := strings.Cut(k, "/")
		if _, err := m.Bucket(b).PutIfAbsent(ctx, key, body); err != nil {
			t.Fatal(err)
		}
	}
	ms := testsvc.SQLite(t)
	for _, it := range s.rows {
		if _, err := ms.Put(ctx, it.PK, it.SK, it.Val, meta.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	return ms, m
}

// dump renders the state of fresh stores for comparison: every object's
// hash and every row's value (versions aside: they count writes).
func dump(t testing.TB, ms meta.Store, os objstore.Store, pks []string) string {
	t.Helper()
	ctx := context.Background()
	var lines []string
	for _, b := range append(slices.Clone(zones), settledB) {
		for info, err := range os.Bucket(b).List(ctx, "") {
			if err != nil {
				t.Fatal(err)
			}
			body, err := os.Bucket(b).Get(ctx, info.Key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.Sum256(body)
			lines = append(lines, fmt.Sprintf("obj %s/%s %s", b, info.Key, hex.EncodeToString(h[:8])))
		}
	}
	for _, pk := range pks {
		pg, err := ms.Query(ctx, meta.Query{PK: pk})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range pg.Items {
			var v any
			if len(it.Val) > 0 {
				if err := json.Unmarshal(it.Val, &v); err != nil {
					t.Fatal(err)
				}
			}
			b, _ := json.Marshal(v)
			lines = append(lines, fmt.Sprintf("row %s/%s %s", it.PK, it.SK, b))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// tick is one auditor tick at now: plan, settle, trim-check; then a later
// trim-check past the read grace.
func tick(ctx context.Context, st *settle.Stores, ch settle.ChainRef, now time.Time) (settle.Report, error) {
	var total settle.Report
	reps, err := settleAll(ctx, st, now, true)
	for _, r := range reps {
		total.Objects += r.Objects
		total.Splits += r.Splits
		total.Deleted += r.Deleted
		total.Resolved += r.Resolved
	}
	if err != nil {
		return total, err
	}
	_, err = reclaim.TrimCheck(ctx, st, ch, now.Add(st.Config.WithDefaults().ReadGrace))
	return total, err
}

// crashState builds a chain whose next settle extends tail objects, cuts
// objects inside refs, and resolves markers of a deleted stream too. A
// long absorb interval makes passes of several slots, so refs hold several
// slot refs and the output cap falls inside one.
func crashState(t *testing.T) (*env, snapshot) {
	e := newEnv(t, envOpts{tweak: func(c *loglet.Config) { c.AbsorbInterval = 300 * time.Millisecond }})
	e.write("a", 12, 6, 250)
	e.write("b", 5, 3, 120)
	e.write("c", 2, 2, 40)
	e.waitAbsorbed()
	if _, err := settleAll(context.Background(), e.st, time.Now().Add(time.Hour), false); err != nil {
		t.Fatal(err)
	}
	e.write("a", 40, 6, 250)
	e.write("b", 3, 3, 120)
	e.write("c", 1, 1, 40)
	e.write("d", 2, 1, 30)
	e.waitAbsorbed()
	// Stream d is deleted: its markers resolve without staging.
	k := meta.Key{PK: meta.RefKey("d", 0).PK, SK: "deleted"}
	if _, err := e.meta.Put(context.Background(), k.PK, k.SK, []byte(`{"basin":"b1","name":"d"}`), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	e.loglet.Close()
	return e, takeSnapshot(t, e)
}

// A crash at every step of a settle tick (before the step takes effect,
// and after it took effect with its reply lost), followed by a clean
// re-run, ends in exactly the objects and rows of an uncrashed run.
func TestCrashAtEveryStepConverges(t *testing.T) {
	e, snap := crashState(t)
	ctx := context.Background()
	now := time.Now().Add(3 * time.Hour)
	ch := settle.ChainRef{Star: e.cfg.Star, Class: e.cfg.Class}
	pks := []string{"chains", meta.ChainPK(e.cfg.Star, e.cfg.Class), meta.ReclaimPK}
	for _, id := range e.ids() {
		pks = append(pks, meta.RefKey(id, 0).PK)
	}
	stores := func(ms meta.Store, os objstore.Store) *settle.Stores {
		cfg := e.st.Config
		cfg.Workers = 1 // one order of steps, so step k is one step
		cfg.ScratchDir = t.TempDir()
		return &settle.Stores{Meta: ms, Objects: os, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: ms}, Config: cfg, Logger: quietLog()}
	}
	ms, os := snap.restore(t)
	ref := &crasher{left: 1 << 30}
	rep, err := tick(ctx, stores(crashMeta{ms, ref}, crashObjects{os, ref}), ch, now)
	if err != nil {
		t.Fatal(err)
	}
	want := dump(t, ms, os, pks)
	t.Logf("reference run: %+v", rep)
	if !strings.Contains(want, "streams/b1/a/") || strings.Contains(want, "streams/b1/d/") || !strings.Contains(want, "~0000") {
		t.Fatalf("reference run: expected objects of a, tail extensions, and none of d:\n%s", want)
	}
	if rep.Splits == 0 || rep.Objects < 4 || rep.Deleted == 0 {
		t.Fatalf("reference run should extend, split, start new objects and skip a deleted stream: %+v", rep)
	}
	steps := ref.steps
	t.Logf("a clean tick takes %d mutating steps", steps)
	for _, after := range []bool{false, true} {
		for k := 0; k < steps; k++ {
			ms, os := snap.restore(t)
			c := &crasher{left: k, after: after}
			if _, err := tick(ctx, stores(crashMeta{ms, c}, crashObjects{os, c}), ch, now); !errors.Is(err, errCrash) {
				t.Fatalf("crash at step %d (after=%v): tick returned %v", k, after, err)
			}
			if _, err := tick(ctx, stores(ms, os), ch, now); err != nil {
				t.Fatalf("re-run after a crash at step %d (after=%v): %v", k, after, err)
			}
			if got := dump(t, ms, os, pks); got != want {
				t.Fatalf("crash at step %d (after=%v) then re-run diverges:\n%s", k, after, diff(want, got))
			}
		}
	}
}

// Two settlers racing on every job of a tick: one object per key, and the
// same rows and objects as one settler alone.
func TestRacingSettlersConverge(t *testing.T) {
	e, snap := crashState(t)
	ctx := context.Background()
	now := time.Now().Add(3 * time.Hour)
	pks := []string{"chains", meta.ChainPK(e.cfg.Star, e.cfg.Class), meta.ReclaimPK}
	for _, id := range e.ids() {
		pks = append(pks, meta.RefKey(id, 0).PK)
	}
	mk := func(ms meta.Store, os objstore.Store, workers int) *settle.Stores {
		cfg := e.st.Config
		cfg.Workers = workers
		cfg.ScratchDir = t.TempDir()
		return &settle.Stores{Meta: ms, Objects: os, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: ms}, Config: cfg, Logger: quietLog(),
			Now: func() time.Time { return now }}
	}
	ms, os := snap.restore(t)
	if _, err := settleAll(ctx, mk(ms, os, 4), now, false); err != nil {
		t.Fatal(err)
	}
	want := dump(t, ms, os, pks)
	for run := range 4 {
		ms, os := snap.restore(t)
		a, b := mk(ms, os, 1+run%3), mk(ms, os, 4)
		jobs, err := plan.Plan(ctx, a, now)
		if err != nil {
			t.Fatal(err)
		}
		var adopted int
		for _, j := range jobs {
			if j.Kind != settle.KindSettle {
				continue
			}
			var wg sync.WaitGroup
			var reps [2]settle.Report
			var errs [2]error
			for i, st := range []*settle.Stores{a, b} {
				wg.Go(func() { reps[i], errs[i] = settle.Settle(ctx, st, j) })
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatalf("run %d: racing settle of %s: %v", run, j, err)
				}
			}
			adopted += reps[0].Adopted + reps[1].Adopted
		}
		if got := dump(t, ms, os, pks); got != want {
			t.Fatalf("run %d: racing settlers diverge from one settler:\n%s", run, diff(want, got))
		}
		t.Logf("run %d: %d objects adopted from the other settler", run, adopted)
	}
}

// diff shows the lines only in one of two dumps.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b bytes.Buffer
	for _, l := range w {
		if !slices.Contains(g, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}

// A crash at every step of a settle tick followed by the janitor's two
// reclaim passes (the first arms the superseded revisions, the second,
// a grace later, deletes them), then a clean re-run of the whole: the
// same objects and rows as an uncrashed run, and no superseded revision
// left in storage.
func TestReclaimCrashAtEveryStepConverges(t *testing.T) {
	e, snap := crashState(t)
	ctx := context.Background()
	now := time.Now().Add(3 * time.Hour)
	grace := e.st.Config.WithDefaults().ReadGrace
	ch := settle.ChainRef{Star: e.cfg.Star, Class: e.cfg.Class}
	pks := []string{"chains", meta.ChainPK(e.cfg.Star, e.cfg.Class), meta.ReclaimPK}
	for _, id := range e.ids() {
		pks = append(pks, meta.RefKey(id, 0).PK)
	}
	stores := func(ms meta.Store, os objstore.Store) *settle.Stores {
		cfg := e.st.Config
		cfg.Workers = 1
		cfg.ScratchDir = t.TempDir()
		return &settle.Stores{Meta: ms, Objects: os, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: ms}, Config: cfg, Logger: quietLog()}
	}
	var deleted int
	run := func(st *settle.Stores) error {
		if _, err := tick(ctx, st, ch, now); err != nil {
			return err
		}
		for _, at := range []time.Time{now.Add(grace), now.Add(2*grace + time.Second)} {
			rep, err := reclaim.Reclaim(ctx, st, at)
			deleted += rep.Deleted
			if err != nil {
				return err
			}
		}
		return nil
	}
	ms, os := snap.restore(t)
	ref := &crasher{left: 1 << 30}
	if err := run(stores(crashMeta{ms, ref}, crashObjects{os, ref})); err != nil {
		t.Fatal(err)
	}
	want := dump(t, ms, os, pks)
	if deleted == 0 || strings.Contains(want, "row reclaim/") {
		t.Fatalf("reference run: %d superseded revisions deleted, entries left:\n%s", deleted, want)
	}
	if err := onlyCurrentRevisions(t, ms, os, e.ids()); err != nil {
		t.Fatalf("reference run: %v", err)
	}
	steps := ref.steps
	t.Logf("a clean tick and two reclaim passes take %d mutating steps; %d revisions deleted", steps, deleted)
	for _, after := range []bool{false, true} {
		for k := 0; k < steps; k++ {
			ms, os := snap.restore(t)
			c := &crasher{left: k, after: after}
			if err := run(stores(crashMeta{ms, c}, crashObjects{os, c})); !errors.Is(err, errCrash) {
				t.Fatalf("crash at step %d (after=%v): run returned %v", k, after, err)
			}
			if err := run(stores(ms, os)); err != nil {
				t.Fatalf("re-run after a crash at step %d (after=%v): %v", k, after, err)
			}
			if got := dump(t, ms, os, pks); got != want {
				t.Fatalf("crash at step %d (after=%v) then re-run diverges:\n%s", k, after, diff(want, got))
			}
		}
	}
}

// onlyCurrentRevisions checks that every settled object in storage is
// one a catalog row names.
func onlyCurrentRevisions(t testing.TB, ms meta.Store, os objstore.Store, ids []string) error {
	t.Helper()
	named := map[string]bool{}
	for _, id := range ids {
		for _, r := range rowsOf(t, ms, id) {
			if s := r.ref.Settled; s != nil {
				named[format.SettledKey(basin, id, s.Epoch, s.FirstSeq, s.Revision)] = true
			}
		}
	}
	for info, err := range os.Bucket(settledB).List(context.Background(), "streams/") {
		if err != nil {
			return err
		}
		if !named[info.Key] {
			return fmt.Errorf("settled object %s is named by no catalog row", info.Key)
		}
	}
	return nil
}
