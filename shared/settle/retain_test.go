package settle_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/reader"
)

// catalog is a stream's catalog rows, ascending.
func catalog(t testing.TB, ms meta.Store, id string) []meta.Ref {
	t.Helper()
	var out []meta.Ref
	for _, r := range rowsOf(t, ms, id) {
		if r.ref.Settled != nil {
			out = append(out, r.ref)
		}
	}
	return out
}

// retainedState writes stream r over rounds, settling each, so it has
// several catalog rows with distinct timestamps.
func retainedState(t *testing.T, e *env) time.Time {
	ctx := context.Background()
	now := time.Now().Add(time.Hour)
	for range 10 {
		e.write("r", 4, 8, 500)
		e.waitAbsorbed()
		now = now.Add(time.Hour)
		if _, err := settleAll(ctx, e.st, now, true); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(catalog(t, e.meta, "r")); n < 4 {
		t.Fatalf("%d catalog rows, want at least 4", n)
	}
	// The janitor's reclaim passes have deleted the superseded revisions,
	// so nothing waits and trims are not deferred for the storage bound.
	for _, at := range []time.Time{now, now.Add(e.st.Config.ReadGrace + time.Second)} {
		if _, err := reclaim.Reclaim(ctx, e.st, at); err != nil {
			t.Fatal(err)
		}
	}
	return now.Add(e.st.Config.ReadGrace + time.Second)
}

// trimAll trims stream id (age cut before) to completion the way the
// janitor does across passes: a trim the storage bound defers waits for
// reclaim passes a grace apart to delete what waits, then goes on. It
// returns the rows deleted, the first seq left and the time after.
func trimAll(ctx context.Context, st *settle.Stores, id string, before, now time.Time) (rows int, first uint64, after time.Time, err error) {
	grace := st.Config.WithDefaults().ReadGrace
	for range 16 {
		rep, err := reclaim.TrimStream(ctx, st, id, basin, before)
		if err != nil {
			return rows, first, now, err
		}
		rows, first = rows+rep.Rows, rep.First
		for _, at := range []time.Time{now, now.Add(grace + time.Second)} {
			if _, err := reclaim.Reclaim(ctx, st, at); err != nil {
				return rows, first, now, err
			}
		}
		now = now.Add(grace + time.Second)
		if !rep.Deferred {
			return rows, first, now, nil
		}
	}
	return rows, first, now, fmt.Errorf("trim of %s still deferred after 16 rounds", id)
}

// readFrom reads stream id from seq 0 up to end and checks every record
// against what was acknowledged at its seq; it returns where the read
// started (past whatever was trimmed: end, when every record up to end
// is).
func (e *env) readFrom(ctx context.Context, rd *reader.Reader, id string, end uint64) (uint64, error) {
	e.mu.Lock()
	acked := e.acked[id]
	e.mu.Unlock()
	start, next := uint64(0), uint64(0)
	for first := true; next < end; first = false {
		res, err := rd.Read(ctx, reader.Stream{ID: id, Basin: basin}, reader.AtSeq(next), reader.Limits{Count: int(end - next)}, nil)
		if err != nil {
			return start, err
		}
		if first {
			start = res.Start
		} else if res.Start < next {
			return start, fmt.Errorf("read from %d started at %d", next, res.Start)
		}
		if len(res.Records) == 0 && first && res.Start >= end {
			return res.Start, nil // every record below end is trimmed
		}
		if len(res.Records) == 0 && res.Start >= end {
			return start, nil // the rest was trimmed meanwhile: the read ends at the tail
		}
		if len(res.Records) == 0 {
			return start, fmt.Errorf("read %s from %d: no records (stop %s)", id, next, res.Stop)
		}
		for i, r := range res.Records {
			if r.SeqNum != res.Start+uint64(i) {
				return start, fmt.Errorf("record %d of a read from %d has seq %d", i, res.Start, r.SeqNum)
			}
			if err := sameRecords([]format.Record{r}, acked[r.SeqNum:r.SeqNum+1]); err != nil {
				return start, err
			}
		}
		next = res.Next
	}
	return start, nil
}

// Retention by age trims a stream's oldest catalog rows, oldest first:
// reads from below start at the first retained record and every record
// read is the one acknowledged at its seq, while readers race the trim
// and the reclaim; the objects go a grace after the rows; the greatest
// catalog row (the stream's tail) always stays, marked Trimmed once its
// records are past their age too, when a read from below starts at the
// tail and its object goes as well.
func TestRetention(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	now := retainedState(t, e)
	cat := catalog(t, e.meta, "r")
	end := cat[len(cat)-1].EndSeq
	var wg sync.WaitGroup
	rctx, cancel := context.WithCancel(ctx)
	var raceErr error
	var starts []uint64
	var reads atomic.Int64  // racing reads finished
	var stopped atomic.Bool // the reader returned (an error, or the end)
	ready := make(chan struct{})
	wg.Go(func() {
		defer stopped.Store(true)
		defer close(ready)
		for rctx.Err() == nil {
			rd, err := reader.New(reader.Config{Meta: e.meta, Objects: e.objs, SettledBucket: settledB, Logger: quietLog()})
			if err != nil {
				raceErr = err
				return
			}
			start, err := e.readFrom(rctx, rd, "r", end)
			if err != nil && rctx.Err() == nil {
				raceErr = err
				return
			}
			reads.Add(1)
			if starts = append(starts, start); len(starts) == 3 {
				ready <- struct{}{}
			}
		}
	})
	<-ready // trim while reads are under way
	before := time.UnixMilli(int64(cat[1].MaxTimestamp) + 1)
	n, first, now, err := trimAll(ctx, e.st, "r", before, now)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || first != cat[2].FirstSeq {
		t.Fatalf("trim by age before row 2: %d rows deleted, first seq %d; want 2 and %d", n, first, cat[2].FirstSeq)
	}
	// Past every record's age: all but the greatest catalog row go, and
	// it is marked Trimmed.
	n, first, _, err = trimAll(ctx, e.st, "r", now.Add(24*time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	last := cat[len(cat)-1]
	if first != last.FirstSeq || n != len(cat)-3 {
		t.Fatalf("trim past every age: %d rows deleted, first seq %d; want %d and first seq %d", n, first, len(cat)-3, last.FirstSeq)
	}
	if rows := rowsOf(t, e.meta, "r"); len(rows) != 1 || !rows[0].ref.Settled.Trimmed {
		t.Fatalf("trim past every age: rows %+v, want the greatest catalog row alone, marked Trimmed", rows)
	}
	// Let the readers race on into the trimmed rows: a read that started
	// after the trims has finished (the one under way at n, then the next).
	n0 := reads.Load()
	poll.Until(t, 10*time.Second, "a racing read after the trims", func() bool { return reads.Load() >= n0+2 || stopped.Load() })
	cancel()
	wg.Wait()
	if raceErr != nil {
		t.Fatalf("a reader racing the trim: %v", raceErr)
	}
	t.Logf("%d racing reads started at %v…", len(starts), starts[:min(len(starts), 8)])
	start, err := e.readFrom(ctx, e.rd, "r", end)
	if err != nil || start != end {
		t.Fatalf("read from 0 after the trim: start %d (want the tail, %d), %v", start, end, err)
	}
	if f := frontier(t, e.meta, "r"); f != end {
		t.Fatalf("the stream's tail moved: %d, was %d", f, end)
	}
	if err := onlyCurrentRevisions(t, e.meta, e.objs, e.ids()); err != nil {
		t.Fatal(err)
	}
	stored, retained, objects := storage(t, e, "r")
	if stored != retained || objects != 0 {
		t.Fatalf("after the reclaim: %d B stored in %d objects for %d B retained", stored, objects, retained)
	}
	if left := entries(t, e); len(left) != 0 {
		t.Fatalf("reclaim entries left: %v", left)
	}
}

// The auditor deletes the catalog rows wholly below a stream's trim
// point, and nothing at or above it. The write path does not carry a
// trim command's point into the rows yet (bundle footers lack it; see
// docs/settle.md), so the test sets it on the greatest row as the absorb
// would.
func TestTrimPointReclaims(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	now := retainedState(t, e)
	cat := catalog(t, e.meta, "r")
	point := cat[2].FirstSeq + 1 // inside row 2: rows 0 and 1 go, row 2 stays whole
	rows := rowsOf(t, e.meta, "r")
	top := rows[len(rows)-1]
	top.ref.TrimPoint = point
	k := meta.RefKey("r", top.ref.FirstSeq)
	if _, err := e.meta.Put(ctx, k.PK, k.SK, meta.Encode(top.ref), meta.IfVer(top.ver)); err != nil {
		t.Fatal(err)
	}
	n, first, _, err := trimAll(ctx, e.st, "r", time.Time{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || first != cat[2].FirstSeq {
		t.Fatalf("trim to %d: %d rows deleted, first seq %d; want rows 0 and 1 deleted", point, n, first)
	}
	if start, err := e.readFrom(ctx, e.rd, "r", frontier(t, e.meta, "r")); err != nil || start != cat[2].FirstSeq {
		t.Fatalf("read from 0: start %d (want %d), %v", start, cat[2].FirstSeq, err)
	}
	if err := onlyCurrentRevisions(t, e.meta, e.objs, e.ids()); err != nil {
		t.Fatal(err)
	}
}

// A crash at every step of a retention trim and the two reclaim passes
// after it, then a clean re-run, ends in the state of an uncrashed run.
func TestRetentionCrashAtEveryStepConverges(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	now := retainedState(t, e)
	cat := catalog(t, e.meta, "r")
	e.loglet.Close()
	snap := takeSnapshot(t, e)
	before := time.UnixMilli(int64(cat[2].MaxTimestamp) + 1)
	pks := []string{meta.ReclaimPK, meta.RefKey("r", 0).PK}
	stores := func(ms meta.Store, os objstore.Store) *settle.Stores {
		return &settle.Stores{Meta: ms, Objects: os, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: ms}, Config: e.st.Config, Logger: quietLog()}
	}
	grace := e.st.Config.WithDefaults().ReadGrace
	run := func(st *settle.Stores) error {
		// A re-run starts from the same time; its passes go on past the
		// grace of whatever the crashed run armed later, as the janitor's
		// passes would.
		_, _, after, err := trimAll(ctx, st, "r", before, now)
		if err != nil {
			return err
		}
		for _, at := range []time.Time{after.Add(grace), after.Add(3 * grace)} {
			if _, err := reclaim.Reclaim(ctx, st, at); err != nil {
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
	if strings.Contains(want, "row reclaim/") || len(catalog(t, ms, "r")) != len(cat)-3 {
		t.Fatalf("reference run left entries or rows:\n%s", want)
	}
	steps := ref.steps
	t.Logf("a retention trim of 3 rows to completion (with its deferrals and reclaim passes) takes %d mutating steps", steps)
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

// hookMeta runs hook before the at-th query through it.
type hookMeta struct {
	meta.Store
	mu   sync.Mutex
	n    int
	at   int
	hook func()
}

func (m *hookMeta) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	m.mu.Lock()
	m.n++
	run := m.n == m.at
	m.mu.Unlock()
	if run {
		m.hook()
	}
	return m.Store.Query(ctx, q)
}

// A read under way when the trim deletes the rows it is about to reach
// ends its batch with what it read; the next read starts past the trim
// (it is told the records are trimmed), never a "missing records" error.
func TestReadRacingTrim(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	retainedState(t, e)
	cat := catalog(t, e.meta, "r")
	e.loglet.Close()
	snap := takeSnapshot(t, e)
	before := time.UnixMilli(int64(cat[1].MaxTimestamp) + 1)
	end := cat[len(cat)-1].EndSeq
	for at := 1; at <= 6; at++ {
		ms, os := snap.restore(t)
		st := &settle.Stores{Meta: ms, Objects: os, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: ms}, Config: e.st.Config, Logger: quietLog()}
		hm := &hookMeta{Store: ms, at: at}
		hm.hook = func() {
			if _, err := reclaim.TrimStream(ctx, st, "r", basin, before); err != nil {
				t.Error(err)
			}
		}
		rd, err := reader.New(reader.Config{Meta: hm, Objects: os, SettledBucket: settledB, RowPage: 1, Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		start, err := e.readFrom(ctx, rd, "r", end)
		if err != nil {
			t.Fatalf("trim before query %d of the read: %v", at, err)
		}
		t.Logf("trim before query %d: the read started at %d", at, start)
	}
}

// trim appends a trim command record asking for point to stream id and
// remembers it as acknowledged.
func (e *env) trim(id string, point uint64) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tk, err := e.stream(id).Submit(ctx, facade.Request{Records: []facade.Input{{
		Headers: []format.Header{{Value: []byte(api.CommandTrim)}},
		Body:    binary.BigEndian.AppendUint64(nil, point),
	}}})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tk.Wait(ctx); err != nil {
		e.t.Fatalf("trim %s to %d: %v", id, point, err)
	}
	e.mu.Lock()
	e.acked[id] = append(e.acked[id], tk.Sequenced().Records...)
	e.mu.Unlock()
}

// A trim command record, appended through the write path, reaches the
// rows: the settle that takes it into a catalog row derives the row's
// trim point from the records, and the janitor's passes then delete the
// catalog rows wholly below it and, a grace later, their objects. A read
// from 0 starts at the first retained row (as S2 starts a read below the
// first retained record), every record read is the one acknowledged, and
// a later trim command with a smaller point moves nothing back. On both
// backends.
func TestTrimCommandReclaims(t *testing.T) {
	for _, aws := range []bool{false, true} {
		t.Run(map[bool]string{false: "mem", true: "aws"}[aws], func(t *testing.T) {
			if aws && testing.Short() {
				t.Skip("starts versitygw and DynamoDB Local")
			}
			e := newEnv(t, envOpts{aws: aws})
			ctx := context.Background()
			now := retainedState(t, e)
			cat := catalog(t, e.meta, "r")
			point := cat[2].FirstSeq + 1 // inside row 2: rows 0 and 1 go, row 2 stays whole
			e.trim("r", point)
			e.write("r", 2, 8, 500)
			e.trim("r", 1) // below the point: the point stays
			e.write("r", 1, 8, 500)
			e.waitAbsorbed()
			now = now.Add(time.Hour)
			if _, err := settleAll(ctx, e.st, now, true); err != nil {
				t.Fatal(err)
			}
			after := catalog(t, e.meta, "r")
			if got := after[len(after)-1].TrimPoint; got != point {
				t.Fatalf("the greatest catalog row's trim point is %d, want %d", got, point)
			}
			stored, _, _ := storage(t, e, "r")
			n, first, _, err := trimAll(ctx, e.st, "r", time.Time{}, now)
			if err != nil {
				t.Fatal(err)
			}
			if n != 2 || first != cat[2].FirstSeq {
				t.Fatalf("trim to %d: %d rows deleted, first seq %d; want rows 0 and 1 deleted, first seq %d", point, n, first, cat[2].FirstSeq)
			}
			if start, err := e.readFrom(ctx, e.rd, "r", frontier(t, e.meta, "r")); err != nil || start != cat[2].FirstSeq {
				t.Fatalf("read from 0 after the trim: start %d (want %d), %v", start, cat[2].FirstSeq, err)
			}
			if err := onlyCurrentRevisions(t, e.meta, e.objs, e.ids()); err != nil {
				t.Fatal(err)
			}
			for _, r := range cat[:2] {
				s := r.Settled
				if _, err := e.objs.Bucket(settledB).Head(ctx, format.SettledKey(basin, "r", s.Epoch, s.FirstSeq, s.Revision)); !errors.Is(err, objstore.ErrNotFound) {
					t.Fatalf("the object of trimmed row [%d,%d) is still stored: %v", r.FirstSeq, r.EndSeq, err)
				}
			}
			left, retained, _ := storage(t, e, "r")
			if left != retained {
				t.Fatalf("after the reclaim: %d B stored (was %d) for %d B retained", left, stored, retained)
			}
			t.Logf("trim to %d reclaimed %d B of %d", point, stored-left, stored)
		})
	}
}
