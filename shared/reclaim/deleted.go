package reclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// ForgetStream registers a deleted stream for reclamation: it writes the
// stream's tombstone if it is missing (a delete that crashed between the
// name row and the tombstone), so no settle stages its records again,
// then the stream's reclamation row (IfAbsent). Both are idempotent. A
// stream whose tombstone stands and that has no ref row left is already
// reclaimed, or being reclaimed (its reclamation row deletes its objects
// before it goes): it is not registered again, so a deleted name row the
// janitor meets on every run costs a write and a query.
func ForgetStream(ctx context.Context, st *settle.Stores, basin, name, id string, deletedAt time.Time) error {
	tk := meta.Key{PK: meta.StreamMetaKey(id).PK, SK: "deleted"}
	ts := struct {
		Basin     string    `json:"basin"`
		Name      string    `json:"name"`
		DeletedAt time.Time `json:"deleted_at"`
	}{basin, name, deletedAt}
	_, err := st.Meta.Put(ctx, tk.PK, tk.SK, meta.Encode(ts), meta.IfAbsent())
	switch {
	case errors.Is(err, meta.ErrConditionFailed):
		pg, err := st.Meta.Query(ctx, meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~", Limit: 1})
		if err != nil {
			return fmt.Errorf("settle: rows of deleted stream %s: %w", id, err)
		}
		if len(pg.Items) == 0 {
			return nil
		}
	case err != nil:
		return fmt.Errorf("settle: tombstone of deleted stream %s: %w", id, err)
	}
	k := meta.ReclaimStreamKey(id)
	_, err = st.Meta.Put(ctx, k.PK, k.SK, meta.Encode(meta.ReclaimStream{Basin: basin, Stream: id}), meta.IfAbsent())
	if err != nil && !errors.Is(err, meta.ErrConditionFailed) {
		return fmt.Errorf("settle: register deleted stream %s: %w", id, err)
	}
	return nil
}

// StreamsReport is what one deleted-stream reclamation pass did.
type StreamsReport struct {
	Streams int // deleted streams being reclaimed
	Rows    int // their ref rows deleted
	Objects int // their settled objects deleted
	Done    int // streams finished
}

// ReclaimStreams reclaims the deleted streams registered by ForgetStream,
// rows before objects: each pass deletes the stream's ref rows (span refs
// and catalog rows) and deletes or retires its lease (retireLease); the
// first pass that finds none left
// arms the stream; a pass a read grace later deletes every settled object
// under the stream's prefix (a listing, which also finds objects a settle
// racing the delete published and never committed), the stream's reclaim
// entries, and then its reclamation row. A row that appears after the
// arming (a settle or absorb that raced the delete) disarms it. The
// identity row and the tombstone stay: a batch marker not yet resolved
// may still name the stream, and its settle must find it deleted.
func ReclaimStreams(ctx context.Context, st *settle.Stores, now time.Time) (rep StreamsReport, err error) {
	if err := st.Check(); err != nil {
		return rep, err
	}
	grace := st.Config.WithDefaults().ReadGrace
	q := meta.Query{PK: meta.ReclaimStreamsPK, Limit: 64}
	var errs []error
	for {
		pg, err := st.Meta.Query(ctx, q)
		if err != nil {
			return rep, fmt.Errorf("settle: list deleted streams: %w", err)
		}
		for _, it := range pg.Items {
			rep.Streams++
			if err := reclaimStream(ctx, st, it, now, grace, &rep); err != nil {
				errs = append(errs, err)
				if len(errs) >= 8 {
					return rep, errors.Join(errs...)
				}
			}
		}
		if pg.Next == "" {
			return rep, errors.Join(errs...)
		}
		q.PageToken = pg.Next
	}
}

func reclaimStream(ctx context.Context, st *settle.Stores, it meta.Item, now time.Time, grace time.Duration, rep *StreamsReport) error {
	var rs meta.ReclaimStream
	if err := meta.Decode(it.Val, &rs); err != nil {
		return err
	}
	if rs.Stream != it.SK || rs.Basin == "" {
		return fmt.Errorf("settle: deleted-stream row %s is malformed", it.SK)
	}
	id := rs.Stream
	// The lease is retired before any row goes: a star that opens the
	// stream checks after reading its rows that it still holds the lease
	// (star/lead's StillHeld), so rows it read under a lease not yet
	// retired were whole, never a remainder this pass left.
	if err := retireLease(ctx, st.Meta, id, now); err != nil {
		return err
	}
	n, err := deleteRefRows(ctx, st.Meta, id)
	rep.Rows += n
	st.Instruments().RowsReclaimed("deleted", n)
	if err != nil {
		return err
	}
	switch {
	case n > 0 && rs.Armed != 0:
		rs.Armed = 0 // rows appeared after the arming: wait a whole grace again
	case n > 0:
		return nil
	case rs.Armed == 0:
		rs.Armed = millis(now)
	case millis(now) < rs.Armed+grace.Milliseconds():
		return nil
	default:
		objs, err := deletePrefix(ctx, st, "streams/"+rs.Basin+"/"+id+"/")
		rep.Objects += objs
		st.Instruments().ObjectsReclaimed("deleted", objs)
		if err != nil {
			return err
		}
		if err := deleteEntries(ctx, st.Meta, id); err != nil {
			return err
		}
		if err := st.Meta.Delete(ctx, it.PK, it.SK, meta.IfVer(it.Ver)); err != nil && !errors.Is(err, meta.ErrConditionFailed) {
			return fmt.Errorf("settle: delete deleted-stream row %s: %w", id, err)
		}
		rep.Done++
		return nil
	}
	if _, err := st.Meta.Put(ctx, it.PK, it.SK, meta.Encode(rs), meta.IfVer(it.Ver)); err != nil && !errors.Is(err, meta.ErrConditionFailed) {
		return fmt.Errorf("settle: arm deleted stream %s: %w", id, err)
	}
	return nil
}

// retireLease retires a deleted stream's lease in place (meta.Lease.Deleted,
// the holder, if any, put on Pending), whoever held it: no star takes a
// retired lease, so none opens the stream once its rows start to go. The
// row stays, as the stream's identity row and tombstone do: deleting it
// would let a star whose judgment of the stream row predates the delete
// take a fresh lease and open the id on whatever rows are left. A retired
// lease with holders pending is what a create under the name fences
// (star/lead's retire, docs/write-path.md, "Catalog invariants").
func retireLease(ctx context.Context, ms meta.Store, id string, now time.Time) error {
	l, ver, ok, err := leader.ReadLease(ctx, ms, id)
	if err != nil || ok && l.Deleted {
		return err
	}
	var prev *meta.Lease // a stream never led gets a retired lease too
	if ok {
		prev = &l
	}
	next := leader.Successor(prev, meta.LeaseHolder{Star: meta.DeletedBy}, now)
	if ok && l.Emptied {
		// The auditor's delete_on_empty holder is no star to fence.
		next.Pending = slices.DeleteFunc(next.Pending, func(h meta.LeaseHolder) bool { return h == l.LeaseHolder })
	}
	next.Deleted = true
	if _, err := leader.Acquire(ctx, ms, id, next, ver); err != nil {
		// Lost to a star taking the lease: its rows stay this pass (the
		// next one retires the lease again before it deletes any).
		return fmt.Errorf("settle: retire lease of deleted stream %s: %w", id, err)
	}
	return nil
}

// deleteRefRows deletes every ref row of a stream (each if it is still the
// row read) and returns how many it found.
func deleteRefRows(ctx context.Context, ms meta.Store, id string) (int, error) {
	q := meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~", Limit: 256}
	n := 0
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return n, fmt.Errorf("settle: rows of deleted stream %s: %w", id, err)
		}
		for _, it := range pg.Items {
			n++
			if err := ms.Delete(ctx, it.PK, it.SK, meta.IfVer(it.Ver)); err != nil && !errors.Is(err, meta.ErrConditionFailed) {
				return n, fmt.Errorf("settle: delete row %s/%s of a deleted stream: %w", it.PK, it.SK, err)
			}
		}
		if pg.Next == "" {
			return n, nil
		}
		q.PageToken = pg.Next
	}
}

// deletePrefix deletes every settled object under prefix.
func deletePrefix(ctx context.Context, st *settle.Stores, prefix string) (int, error) {
	b := st.Objects.Bucket(st.SettledBucket)
	var keys []string
	for info, err := range b.List(ctx, prefix) {
		if err != nil {
			return 0, fmt.Errorf("settle: list %s: %w", prefix, err)
		}
		keys = append(keys, info.Key)
	}
	total := len(keys)
	for len(keys) > 0 {
		n := min(len(keys), 1000) // S3's DeleteObjects bound
		if err := b.DeleteMany(ctx, keys[:n]); err != nil {
			return 0, fmt.Errorf("settle: delete objects under %s: %w", prefix, err)
		}
		keys = keys[n:]
	}
	return total, nil
}

// deleteEntries deletes a stream's reclaim entries (its objects are gone).
func deleteEntries(ctx context.Context, ms meta.Store, id string) error {
	q := meta.Query{PK: meta.ReclaimPK, From: id + "/", To: id + "/~", Limit: 256}
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return fmt.Errorf("settle: reclaim entries of %s: %w", id, err)
		}
		for _, it := range pg.Items {
			if err := ms.Delete(ctx, it.PK, it.SK, meta.Always()); err != nil {
				return fmt.Errorf("settle: delete reclaim entry %s: %w", it.SK, err)
			}
		}
		if pg.Next == "" {
			return nil
		}
		q.PageToken = pg.Next
	}
}
