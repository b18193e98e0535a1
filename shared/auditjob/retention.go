package auditjob

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
)

// The retention pass reads the basin and stream rows the stars write
// (meta.BasinRow, meta.StreamRow) leniently: a row without an id is
// skipped, never an error (meta.DecodeStreamRowLenient).

// RetentionReport says what one retention pass did.
type RetentionReport struct {
	Streams int // live streams visited
	Trimmed int // of which some rows were trimmed
	Rows    int // catalog rows deleted
	// Marked counts streams whose greatest catalog row was marked Trimmed
	// (every record they had settled is past their policy; the row keeps
	// the tail).
	Marked int
	Bytes  uint64 // bytes of their objects (deleted a read grace later)
	// Forgotten counts deleted streams seen (registered for reclamation
	// with reclaim.ForgetStream; registering twice is a no-op).
	Forgotten int
	// Emptied counts live streams deleted under delete_on_empty.
	Emptied int
}

// maxRetentionErrors bounds the errors one pass collects before it stops.
const maxRetentionErrors = 8

// Retention trims every live stream by its trim point and its resolved
// retention age (reclaim.TrimStream), then applies its delete_on_empty
// (deleteOnEmpty): basins from the basin directory,
// streams from each basin's stream rows. A stream deleted itself, of a
// deleted basin, or of an earlier basin of the same name is registered
// for the deleted-stream reclamation instead (reclaim.ForgetStream).
func Retention(ctx context.Context, st *settle.Stores, now time.Time) (RetentionReport, error) {
	var rep RetentionReport
	var errs []error
	err := pages(ctx, st.Meta, meta.Query{PK: meta.BasinDirPK}, func(it meta.Item) error {
		b, ok, err := readBasin(ctx, st.Meta, it.SK)
		if err != nil || b.row.ID == "" {
			return err // a basin being created has no config row yet
		}
		pk := meta.StreamNameKey(it.SK, "").PK
		return pages(ctx, st.Meta, meta.Query{PK: pk, From: "s#", To: "s#~"}, func(it meta.Item) error {
			s, err := meta.DecodeStreamRowLenient(it)
			if err != nil {
				return err
			}
			if s.ID == "" {
				return nil
			}
			if s.DeletedAt == nil && (!ok || s.BasinID != b.row.ID) {
				// The basin read before the listing says the stream is an
				// earlier basin's, or its basin is deleted: read the basin
				// again, lest a basin re-created meanwhile (and a stream
				// created in it) be taken for a deleted one.
				fresh, fok, err := readBasin(ctx, st.Meta, b.name)
				if err != nil {
					return err
				}
				if fresh.row.ID == "" || fok && fresh.row.ID == s.BasinID {
					return nil // live in the basin as it is now (the next pass trims it), or no basin row to judge by
				}
			}
			if !ok || s.BasinID != b.row.ID || s.DeletedAt != nil {
				at := now
				if s.DeletedAt != nil {
					at = *s.DeletedAt
				}
				rep.Forgotten++
				return reclaim.ForgetStream(ctx, st, b.name, strings.TrimPrefix(it.SK, "s#"), s.ID, at)
			}
			rep.Streams++
			var before time.Time
			var age time.Duration
			cfg := s.Config.Resolve(b.row.Config.DefaultStreamConfig)
			if r := cfg.Retention; !r.Infinite {
				// Saturating: an age past a Duration's range (about 292
				// years) keeps every record instead of wrapping negative.
				age = api.Seconds(r.AgeSecs)
				before = now.Add(-age)
			}
			tr, err := reclaim.TrimStream(ctx, st, s.ID, b.name, before)
			if tr.Rows > 0 || tr.Marked {
				rep.Trimmed++
				rep.Rows += tr.Rows
				rep.Bytes += tr.Bytes
			}
			if tr.Marked {
				rep.Marked++
			}
			if err == nil {
				name := strings.TrimPrefix(it.SK, "s#")
				minAge := api.Seconds(cfg.DeleteOnEmptyMinAgeSecs)
				var gone bool
				if gone, err = deleteOnEmpty(ctx, st, b.name, name, s, tr, minAge, age, now); gone {
					rep.Emptied++
					st.CountEmptied()
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("stream %s: %w", s.ID, err))
				if len(errs) >= maxRetentionErrors {
					return errors.Join(errs...)
				}
			}
			return nil
		})
	})
	if err != nil {
		return rep, fmt.Errorf("auditjob: retention: %w", err)
	}
	if len(errs) > 0 {
		return rep, fmt.Errorf("auditjob: retention: %w", errors.Join(errs...))
	}
	return rep, nil
}

type basin struct {
	name string
	row  meta.BasinRow
}

// readBasin reads a basin's config row; ok is false for a basin deleted
// or not there (then its row's ID is empty).
func readBasin(ctx context.Context, ms meta.Store, name string) (basin, bool, error) {
	k := meta.BasinKey(name)
	it, err := ms.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return basin{}, false, nil
	}
	if err != nil {
		return basin{}, false, err
	}
	r, err := meta.DecodeBasinRowLenient(it)
	if err != nil {
		return basin{}, false, err
	}
	return basin{name: name, row: r}, r.ID != "" && r.DeletedAt == nil, nil
}

// pages runs fn on every item of q, page by page; an error from fn stops.
func pages(ctx context.Context, ms meta.Store, q meta.Query, fn func(meta.Item) error) error {
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return fmt.Errorf("query %s: %w", q.PK, err)
		}
		for _, it := range pg.Items {
			if err := fn(it); err != nil {
				return err
			}
		}
		if pg.Next == "" {
			return nil
		}
		q.PageToken = pg.Next
	}
}
