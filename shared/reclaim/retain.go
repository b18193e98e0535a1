package reclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// StreamTrimReport is what one trim of a stream's catalog rows did.
type StreamTrimReport struct {
	Rows  int    // catalog rows deleted
	Bytes uint64 // bytes of the objects they and a marked row named (reclaimed a grace later)
	// Marked: the stream's greatest catalog row was marked Trimmed (every
	// record the stream had settled is past its policy; the row stays for
	// the stream's tail).
	Marked bool
	// Deferred: a trimmable row was kept because its object, on top of
	// what the stream already has waiting for the reclaim, would pass the
	// output cap the storage bound allows; a later pass trims it.
	Deferred bool
	First    uint64 // the stream's first row after the trim
	// The stream's tail as its rows say: Written is false when it has no
	// row at all; Tail and LastTimestamp are its greatest row's end seq
	// and max timestamp; TrimPoint is trimPoint's.
	Written       bool
	Tail          uint64
	LastTimestamp uint64
	TrimPoint     uint64
}

// Empty reports whether every record of the stream as the report saw it
// is gone from what it retains, and since when (unix ms): a stream never
// written since created (created: unix ms); one trimmed to its tail since
// its last record (the trim command); one whose records all aged past
// age (0: infinite) since its last record's timestamp plus age. Pure.
func (r StreamTrimReport) Empty(created uint64, age time.Duration) (since uint64, empty bool) {
	switch {
	case !r.Written || r.Tail == 0:
		return created, true
	case r.TrimPoint >= r.Tail:
		return r.LastTimestamp, true
	case age > 0:
		return r.LastTimestamp + min(uint64(max(age.Milliseconds(), 0)), ^uint64(0)-r.LastTimestamp), true // saturating: a client's timestamp may be near 2^64
	}
	return 0, false
}

// refRow is one ref row of a stream as read, with its version for CAS.
type refRow struct {
	Ver int64
	Ref meta.Ref
}

// maxTrimRows bounds the rows one pass deletes from one stream.
const maxTrimRows = 1024

// TrimStream moves a stream's first readable seq up: oldest first, it
// deletes each catalog row whose records are all below the stream's trim
// point (from its trim command records: trimPoint) or, when before
// is not zero, older than before (age retention), and stops at the first
// row it keeps, so the rows left still chain from the new first seq. The
// stream's greatest catalog row is never deleted (nor any span ref): it
// carries the stream's tail, which a re-opened leader and check-tail
// read. A settle changes a catalog row only while it is the greatest (an
// extension, or the seal before a follower commits: settle's seal), and this
// deletes only rows another catalog row follows, so it never races one.
//
// When every row before it goes and all its records are past the policy
// too (an idle stream, or one trimmed to its tail), the greatest catalog
// row is marked Trimmed and Sealed instead (markTrimmed): readers skip
// it, the reclaim deletes its object a grace later, and the row keeps
// the tail. That is a CAS on the row, so it races a settle's extension or
// seal as two settlers do: whichever writes first wins, the other fails
// its CAS and reads again (the settle then sees the row sealed and starts
// a new object after it; this pass returns settle.ErrRows and a later
// one marks or trims what is then there).
//
// Rows go before objects: the row's object first gets a reclaim entry
// marked Drop, then the row is deleted, and the reclaim pass deletes the
// object a read grace after it first sees no row name it. A reader that
// meets no row below the first one starts there (S2's behaviour for a
// read that starts below the first retained record); one holding a row
// it read before the delete reads its object for the whole grace. Every
// step is conditional or idempotent: a crash leaves at worst an entry
// marked Drop beside its row, which the next pass deletes.
//
// The storage bound (docs/settle.md): a row is trimmed only while its
// object, the stream's superseded revisions and its trimmed objects still
// waiting for the reclaim together fit one output cap, or when nothing
// else waits (so a trim always progresses). A deferred row stays readable,
// so a stream never stores more than its retained bytes plus one output
// cap (or one object, when an object is larger); retention lags by at
// most the time the reclaim takes to delete what waits (two read graces
// and a pass).
func TrimStream(ctx context.Context, st *settle.Stores, id, basin string, before time.Time) (rep StreamTrimReport, err error) {
	if err := st.Check(); err != nil {
		return rep, err
	}
	trim, top, err := trimPoint(ctx, st.Meta, id)
	if err != nil {
		return rep, err
	}
	rep.TrimPoint = trim
	if top != nil {
		rep.Written, rep.Tail, rep.LastTimestamp = true, top.EndSeq, top.MaxTimestamp
	}
	var cut uint64
	if !before.IsZero() {
		cut = uint64(max(before.UnixMilli(), 0))
	}
	// Read on past the first page only when the first row goes: the
	// retained bytes the trim rule needs are read for a trim, not on every
	// pass over a stream with nothing to trim.
	rows, complete, err := catalogRows(ctx, st.Meta, id, func(rows []refRow) bool {
		return len(rows) < 2 || trimmable(rows[0].Ref, rows[1].Ref, trim, cut)
	})
	if err != nil {
		return rep, err
	}
	if len(rows) > 0 {
		rep.First = rows[0].Ref.FirstSeq
	}
	var w settle.Waiting // read once the first row may go
	if len(rows) >= 2 && trimmable(rows[0].Ref, rows[1].Ref, trim, cut) {
		if w, err = settle.ReadWaiting(ctx, st.Meta, id); err != nil {
			return rep, err
		}
	}
	refs := make([]meta.Ref, len(rows))
	for i, r := range rows {
		refs[i] = r.Ref
	}
	p := PlanTrim(id, refs, trim, cut, w, st.Config.WithDefaults().OutputCap)
	if !complete {
		// The last catalog row read may not be the stream's greatest: a
		// later pass, with fewer rows left, marks it.
		p.MarkTrimmed = false
	}
	for _, r := range rows[:p.Drop] {
		if err := dropRow(ctx, st, id, basin, r); err != nil {
			return rep, err
		}
		rep.Rows++
		rep.Bytes += r.Ref.Settled.Bytes
		st.Instruments().RowsReclaimed("trimmed", 1)
		rep.First = rows[rep.Rows].Ref.FirstSeq
	}
	if p.Reserve {
		// Keep the row and mark its entry Drop, so the settle stops
		// extending (its bound counts the reservation) until the reclaim
		// has deleted what waits.
		if err := markDrop(ctx, st, id, basin, rows[p.Drop].Ref.Settled); err != nil {
			return rep, err
		}
		rep.Deferred = true
		st.Instruments().TrimDeferred()
	}
	if p.MarkTrimmed {
		if err := markTrimmed(ctx, st, id, basin, rows[p.Drop]); err != nil {
			return rep, err
		}
		rep.Marked = true
		rep.Bytes += rows[p.Drop].Ref.Settled.Bytes
	}
	return rep, nil
}

// markTrimmed marks the stream's greatest catalog row Trimmed and Sealed,
// by CAS on the version read, after marking its object's reclaim entry
// Drop: the row keeps every field of the tail, and the reclaim deletes
// the object a grace after it sees the mark. A lost CAS (a settle
// extended or sealed the row meanwhile) is settle.ErrRows.
func markTrimmed(ctx context.Context, st *settle.Stores, id, basin string, row refRow) error {
	if err := markDrop(ctx, st, id, basin, row.Ref.Settled); err != nil {
		return err
	}
	r := row.Ref
	s := *r.Settled
	s.Sealed, s.Trimmed = true, true
	r.Settled = &s
	rk := meta.RefKey(id, r.FirstSeq)
	_, err := st.Meta.Put(ctx, rk.PK, rk.SK, meta.Encode(r), meta.IfVer(row.Ver))
	if errors.Is(err, meta.ErrConditionFailed) {
		return fmt.Errorf("%w: greatest catalog row %s/%s changed", settle.ErrRows, rk.PK, rk.SK)
	}
	if err != nil {
		return fmt.Errorf("settle: mark catalog row %s/%s trimmed: %w", rk.PK, rk.SK, err)
	}
	return nil
}

// catalogRows reads a stream's ref rows in seq order, up to maxTrimRows
// (a stream with more counts only those as retained, which errs on the
// safe side), page by page while more says so; complete reports that it
// read them all (so the last catalog row read is the greatest).
func catalogRows(ctx context.Context, ms meta.Store, id string, more func([]refRow) bool) (rows []refRow, complete bool, err error) {
	q := meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~", Limit: 64}
	for len(rows) < maxTrimRows {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, false, fmt.Errorf("settle: rows of stream %s: %w", id, err)
		}
		for _, it := range pg.Items {
			var r meta.Ref
			if err := meta.Decode(it.Val, &r); err != nil {
				return nil, false, fmt.Errorf("settle: row %s/%s: %w", it.PK, it.SK, err)
			}
			rows = append(rows, refRow{Ver: it.Ver, Ref: r})
		}
		if pg.Next == "" {
			return rows, true, nil
		}
		if !more(rows) {
			break
		}
		q.PageToken = pg.Next
	}
	return rows, false, nil
}

// trimPoint is the stream's trim point: the greatest over its rows from
// the greatest down to the greatest catalog row. The settle derives a
// catalog row's from the trim command records it settles; a span ref
// above it carries the absorb's chained value, which may be lower (bundle
// footers hold no trim point), never higher than what the records said.
//
// It also returns the greatest row (nil: the stream has none).
func trimPoint(ctx context.Context, ms meta.Store, id string) (uint64, *meta.Ref, error) {
	q := meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~", Backward: true, Limit: 64}
	var trim uint64
	var top *meta.Ref
	for range maxTrimRows / 64 {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return 0, nil, fmt.Errorf("settle: greatest rows of stream %s: %w", id, err)
		}
		for _, it := range pg.Items {
			var r meta.Ref
			if err := meta.Decode(it.Val, &r); err != nil {
				return 0, nil, err
			}
			if top == nil {
				top = &r
			}
			trim = max(trim, r.TrimPoint)
			if r.Settled != nil {
				return trim, top, nil
			}
		}
		if pg.Next == "" {
			return trim, top, nil
		}
		q.PageToken = pg.Next
	}
	return trim, top, nil
}

// dropRow deletes a catalog row after marking its object's reclaim entry
// Drop (writing it when there is none).
func dropRow(ctx context.Context, st *settle.Stores, id, basin string, row refRow) error {
	if err := markDrop(ctx, st, id, basin, row.Ref.Settled); err != nil {
		return err
	}
	rk := meta.RefKey(id, row.Ref.FirstSeq)
	err := st.Meta.Delete(ctx, rk.PK, rk.SK, meta.IfVer(row.Ver))
	if err != nil && !errors.Is(err, meta.ErrConditionFailed) {
		return fmt.Errorf("settle: delete trimmed row %s/%s: %w", rk.PK, rk.SK, err)
	}
	if err != nil {
		return fmt.Errorf("%w: trimmed row %s/%s changed", settle.ErrRows, rk.PK, rk.SK)
	}
	return nil
}

// markDrop marks the reclaim entry of settled object s Drop, writing it
// when there is none. The reclaim pass deletes the object only once no
// catalog row names it, so a mark beside a row that stays is harmless.
func markDrop(ctx context.Context, st *settle.Stores, id, basin string, s *meta.Settled) error {
	k := meta.ReclaimKey(id, s.Epoch, s.FirstSeq, s.Revision)
	marked := false
	for range 4 {
		it, err := st.Meta.Get(ctx, k.PK, k.SK)
		switch {
		case errors.Is(err, meta.ErrNotFound):
			rc := meta.Reclaim{Basin: basin, Stream: id, Epoch: s.Epoch, First: s.FirstSeq, Rev: s.Revision, Bytes: s.Bytes, Drop: true}
			_, err = st.Meta.Put(ctx, k.PK, k.SK, meta.Encode(rc), meta.IfAbsent())
		case err == nil:
			var rc meta.Reclaim
			if err := meta.Decode(it.Val, &rc); err != nil {
				return err
			}
			if rc.Drop {
				marked = true
				break
			}
			rc.Drop = true
			_, err = st.Meta.Put(ctx, k.PK, k.SK, meta.Encode(rc), meta.IfVer(it.Ver))
		}
		if errors.Is(err, meta.ErrConditionFailed) {
			continue // a reclaim pass or settle moved the entry: read it again
		}
		if err != nil {
			return fmt.Errorf("settle: mark reclaim entry %s: %w", k.SK, err)
		}
		marked = true
		break
	}
	if !marked {
		return fmt.Errorf("settle: reclaim entry %s kept changing", k.SK)
	}
	return nil
}
