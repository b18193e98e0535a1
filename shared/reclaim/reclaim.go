package reclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// ReclaimReport is what one reclaim pass did.
type ReclaimReport struct {
	Entries  int    // reclaim entries listed
	Read     int    // of which acted on or read a row for (the pass's work)
	Armed    int    // superseded objects first seen unreferenced
	Deleted  int    // superseded objects deleted
	Bytes    uint64 // their bytes
	Resolved int    // decisions to start a new object, done with
	Orphans  int    // revisions of a stale extension deleted (staleExtension)
	Pending  int    // entries left for a later pass (those in their grace included)
	// Resume is the entry the next pass starts after ("" the first): where
	// this one stopped at its limits, or "" once it went round every entry.
	Resume string
}

// A pass reads a row for (or acts on) at most maxReclaimWork entries and
// lists at most maxReclaimScan. An entry armed and still in its grace is
// passed over without a read (only a pass past the grace deletes, and it
// reads the row again first), so at most the work limit's entries stand
// between a due entry and the pass; and a pass that stops at a limit
// leaves a cursor (reclaimCursor) where the next one resumes, so every
// entry is visited within ceil(entries / limit) passes, whatever their
// keys. Measured to keep up (BenchmarkReclaimChurn, docs/settle.md).
const (
	maxReclaimWork = 4096
	maxReclaimScan = 65536
)

// reclaimCursor holds the sort key of the last entry a pass visited when
// it stopped at a limit (absent, or "", when the last pass went round).
var reclaimCursor = meta.Key{PK: meta.ReclaimPK + "-cursor", SK: "pass"}

// Reclaim is the reclaim pass over the reclaim entries (run by the
// janitor, the one deleter of settled objects). It starts after the entry
// the last pass stopped at, wraps round to the first, and stops at its
// limits or where it started. Per entry, from the catalog row at the
// object's first seq:
//
//   - the row names a later revision of the object (an extension
//     superseded it), or no row is left (a trim or retention deleted it,
//     after marking the entry Drop), or the row is marked Trimmed (the
//     stream's greatest catalog row, kept for its tail). The first pass that sees this
//     arms the entry (Armed = now); a pass a read grace later deletes the
//     object, then the entry. A reader holding the old row therefore
//     keeps its bytes for a whole grace after the commit landed.
//   - the row still names the object: the extension has not committed
//     (a settle crashed or runs), or the trim deleting the row has not
//     yet: the entry stays. A decision to start a new object instead is
//     done with once a catalog row follows the tail (that object
//     committed); its entry is deleted, unless a trim marked it Drop.
//     A decision to extend a sealed row is stale (staleExtension).
//
// Every step is conditional or idempotent (an absent object or entry is
// fine), so a crash anywhere leaves an entry the next pass finishes; two
// passes at once are safe too (the cursor is the last writer's).
func Reclaim(ctx context.Context, st *settle.Stores, now time.Time) (rep ReclaimReport, err error) {
	if err := st.Check(); err != nil {
		return rep, err
	}
	grace := st.Config.WithDefaults().ReadGrace
	start, err := readCursor(ctx, st.Meta)
	if err != nil {
		return rep, err
	}
	// The legs: the entries after the cursor, then those up to it.
	legs := []meta.Query{{PK: meta.ReclaimPK, From: start, Limit: 256}}
	if start != "" {
		legs = append(legs, meta.Query{PK: meta.ReclaimPK, To: start, Limit: 256})
	}
	var errs []error
	last, round := "", true
	func() {
		for i, q := range legs {
			for {
				pg, err := st.Meta.Query(ctx, q)
				if err != nil {
					errs = append(errs, fmt.Errorf("settle: list reclaim entries: %w", err))
					round = false
					return
				}
				for _, it := range pg.Items {
					if i == 0 && it.SK == start {
						continue // visited by the last pass
					}
					if rep.Entries >= maxReclaimScan || rep.Read >= maxReclaimWork || len(errs) >= 8 {
						round = false
						return
					}
					rep.Entries++
					last = it.SK
					if err := reclaimOne(ctx, st, it, now, grace, &rep); err != nil {
						errs = append(errs, err)
					}
				}
				if pg.Next == "" {
					break
				}
				q.PageToken = pg.Next
			}
		}
	}()
	switch {
	case round:
		rep.Resume = ""
	case last == "":
		rep.Resume = start
	default:
		rep.Resume = last
	}
	if rep.Resume != start {
		if err := writeCursor(ctx, st.Meta, rep.Resume); err != nil {
			errs = append(errs, err)
		}
	}
	return rep, errors.Join(errs...)
}

// readCursor is where the last pass stopped ("" when it went round).
func readCursor(ctx context.Context, ms meta.Store) (string, error) {
	it, err := ms.Get(ctx, reclaimCursor.PK, reclaimCursor.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("settle: read the reclaim cursor: %w", err)
	}
	var c struct {
		After string `json:"after"`
	}
	if err := meta.Decode(it.Val, &c); err != nil {
		return "", fmt.Errorf("settle: reclaim cursor: %w", err)
	}
	return c.After, nil
}

// writeCursor records where the next pass starts; "" deletes the row.
func writeCursor(ctx context.Context, ms meta.Store, after string) error {
	var err error
	if after == "" {
		err = ms.Delete(ctx, reclaimCursor.PK, reclaimCursor.SK, meta.Always())
	} else {
		_, err = ms.Put(ctx, reclaimCursor.PK, reclaimCursor.SK, meta.Encode(struct {
			After string `json:"after"`
		}{after}), meta.Always())
	}
	if err != nil {
		return fmt.Errorf("settle: write the reclaim cursor: %w", err)
	}
	return nil
}

func reclaimOne(ctx context.Context, st *settle.Stores, it meta.Item, now time.Time, grace time.Duration, rep *ReclaimReport) error {
	var rc meta.Reclaim
	if err := meta.Decode(it.Val, &rc); err != nil {
		return fmt.Errorf("settle: reclaim entry %s: %w", it.SK, err)
	}
	if it.SK != meta.ReclaimKey(rc.Stream, rc.Epoch, rc.First, rc.Rev).SK {
		return fmt.Errorf("settle: reclaim entry %s does not match its key", it.SK)
	}
	if rc.Armed != 0 && millis(now) < rc.Armed+grace.Milliseconds() {
		// Armed: a pass saw no row name the object, which no row will
		// again; the pass past the grace reads the row before it deletes.
		rep.Pending++
		return nil
	}
	rep.Read++
	rk := meta.RefKey(rc.Stream, rc.First)
	var unreferenced, done, gone bool
	row, err := st.Meta.Get(ctx, rk.PK, rk.SK)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		// A trim or retention deleted the row before the object.
		unreferenced, gone = true, true
	case err != nil:
		return fmt.Errorf("settle: reclaim %s: read row: %w", it.SK, err)
	default:
		var ref meta.Ref
		if err := meta.Decode(row.Val, &ref); err != nil {
			return err
		}
		s := ref.Settled
		if s == nil || s.Epoch != rc.Epoch || s.FirstSeq != rc.First {
			// Not the row the entry was written from: leave it to look at.
			rep.Pending++
			st.Log().Warn("settle: reclaim entry names an object its row does not", "entry", it.SK)
			return nil
		}
		switch {
		case s.Revision > rc.Rev:
			unreferenced = true
		case rc.Extend && s.Sealed:
			return staleExtension(ctx, st, it, rc, rep)
		case rc.Drop && s.Trimmed:
			// The stream's greatest catalog row, marked Trimmed: it keeps
			// the tail and names no record a reader may read.
			unreferenced = true
		case !rc.Extend && !rc.Drop:
			if done, err = followed(ctx, st, rc.Stream, ref.EndSeq); err != nil {
				return err
			}
		}
	}
	switch {
	case done:
		rep.Resolved++
		return deleteEntry(ctx, st, it)
	case !unreferenced:
		rep.Pending++
		return nil
	case rc.Armed == 0:
		rc.Armed = millis(now)
		if _, err := st.Meta.Put(ctx, it.PK, it.SK, meta.Encode(rc), meta.IfVer(it.Ver)); err != nil && !errors.Is(err, meta.ErrConditionFailed) {
			return fmt.Errorf("settle: arm reclaim entry %s: %w", it.SK, err)
		}
		rep.Armed++
		return nil
	case millis(now) < rc.Armed+grace.Milliseconds():
		rep.Pending++
		return nil
	}
	if rc.Extend && gone {
		if err := deleteOrphan(ctx, st, rc, rep); err != nil {
			return err
		}
	}
	key := format.SettledKey(rc.Basin, rc.Stream, rc.Epoch, rc.First, rc.Rev)
	if err := st.Objects.Bucket(st.SettledBucket).Delete(ctx, key); err != nil {
		return fmt.Errorf("settle: delete superseded %s: %w", key, err)
	}
	rep.Deleted++
	rep.Bytes += rc.Bytes
	kind := "superseded"
	if rc.Drop {
		kind = "trimmed"
	}
	m := st.Instruments()
	m.ObjectsReclaimed(kind, 1)
	m.BytesReclaimed(kind, rc.Bytes)
	return deleteEntry(ctx, st, it)
}

// staleExtension handles a decision to extend a row that is sealed: a
// settler that stalled across the commit of the tail's follower decided
// afresh after the entry of the first decision was done with. Its
// extension can never commit (its CAS on the row fails: the seal changed
// it), so the revision it may have published is named by no row, now or
// later, and no reader can hold it: it is deleted at once, and the entry
// becomes a decision not to extend (which the seal made), done with once
// the follower has committed.
func staleExtension(ctx context.Context, st *settle.Stores, it meta.Item, rc meta.Reclaim, rep *ReclaimReport) error {
	key := format.SettledKey(rc.Basin, rc.Stream, rc.Epoch, rc.First, rc.Rev+1)
	if err := st.Objects.Bucket(st.SettledBucket).Delete(ctx, key); err != nil {
		return fmt.Errorf("settle: delete orphaned revision %s: %w", key, err)
	}
	rep.Orphans++
	st.Instruments().ObjectsReclaimed("orphaned", 1)
	rc.Extend = false
	if _, err := st.Meta.Put(ctx, it.PK, it.SK, meta.Encode(rc), meta.IfVer(it.Ver)); err != nil && !errors.Is(err, meta.ErrConditionFailed) {
		return fmt.Errorf("settle: reclaim entry %s: %w", it.SK, err)
	}
	rep.Pending++
	return nil
}

// deleteOrphan deletes the revision after rc's when no row and no entry
// name it, before the entry of a decision to extend goes with its object
// (the row is gone: a trim deleted it). A revision that was committed has
// its own entry until its object is deleted (the trim marked it Drop
// before deleting the row), so one without an entry is either deleted
// already or was published by an extension that never committed (a stale
// one, staleExtension, whose row a trim deleted first).
func deleteOrphan(ctx context.Context, st *settle.Stores, rc meta.Reclaim, rep *ReclaimReport) error {
	k := meta.ReclaimKey(rc.Stream, rc.Epoch, rc.First, rc.Rev+1)
	_, err := st.Meta.Get(ctx, k.PK, k.SK)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, meta.ErrNotFound):
		return fmt.Errorf("settle: reclaim: read entry %s: %w", k.SK, err)
	}
	key := format.SettledKey(rc.Basin, rc.Stream, rc.Epoch, rc.First, rc.Rev+1)
	if err := st.Objects.Bucket(st.SettledBucket).Delete(ctx, key); err != nil {
		return fmt.Errorf("settle: delete orphaned revision %s: %w", key, err)
	}
	return nil
}

// followed reports whether a catalog row starts at end: the object after
// a tail that was not extended has committed.
func followed(ctx context.Context, st *settle.Stores, id string, end uint64) (bool, error) {
	k := meta.RefKey(id, end)
	it, err := st.Meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("settle: reclaim: read row %s/%s: %w", k.PK, k.SK, err)
	}
	var ref meta.Ref
	if err := meta.Decode(it.Val, &ref); err != nil {
		return false, err
	}
	return ref.Settled != nil, nil
}

// deleteEntry deletes a reclaim entry if it is still the one read (a
// settle re-writing it, or a racing pass, keeps its own).
func deleteEntry(ctx context.Context, st *settle.Stores, it meta.Item) error {
	err := st.Meta.Delete(ctx, it.PK, it.SK, meta.IfVer(it.Ver))
	if err != nil && !errors.Is(err, meta.ErrConditionFailed) {
		return fmt.Errorf("settle: delete reclaim entry %s: %w", it.SK, err)
	}
	return nil
}

// millis is t in unix milliseconds, the unit of the entries' times.
func millis(t time.Time) int64 { return t.UnixMilli() }
