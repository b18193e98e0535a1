package soak

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"

	_ "modernc.org/sqlite" // the "sqlite" driver, for OpenRowCounter
)

// StreamRef names one stream id to measure: a live stream (the current
// id of its name) or a deleted one whose storage must drain to nothing.
type StreamRef struct {
	Name string
	ID   string
	Live bool
}

// StreamSample is one stream id measured from the object store (a walk
// of its folder of settled objects) and the metastore (its rows).
type StreamSample struct {
	StreamRef
	// Stored is every byte under streams/<basin>/<id>/ in the settled
	// bucket, in Objects files.
	Stored  uint64
	Objects int
	// Retained is the bytes of the settled objects the stream's catalog
	// rows name (the larger of two reads, before and after the walk, so
	// a settle committing during the walk is not counted against it).
	Retained uint64
	// The stored bytes no row names, by why they are still there:
	// Superseded (a reclaim entry, not a trim: an earlier revision of an
	// extended object, waiting out the read grace), Trimmed (a reclaim
	// entry marked Drop: a row retention or a trim deleted, waiting out
	// the grace) and Unnamed (no row and no entry: an object published
	// by a settle that has not committed it yet, or a leak).
	Superseded, Trimmed, Unnamed uint64
	// CatalogRows and SpanRefs are the stream's ref rows; Rows counts
	// every row of its partition (meta, lease and refs).
	CatalogRows, SpanRefs, Rows int
	// Entries are the stream's reclaim entries.
	Entries int
	// Unsettled is the stream's metered bytes in span refs only (not
	// settled yet): the greatest CumBytes of all refs less that of the
	// catalog rows.
	Unsettled uint64
	// Readable and OldestAge are filled by the caller's read-back of a
	// live stream: the metered bytes of the records a read from seq 0
	// returned, and the age of the first of them.
	Readable  uint64
	OldestAge time.Duration
}

// Over is how far the stream stands above the bound stored ≤ 1.1 ×
// retained + outputCap (≤ 0: within it).
func (s StreamSample) Over(outputCap uint64) int64 {
	return int64(s.Stored) - int64(s.Retained+s.Retained/10+outputCap)
}

// Sample is one measurement of the whole store.
type Sample struct {
	At      time.Duration
	Streams []StreamSample
	// The object store's bytes by kind, from a walk of its root:
	// settled objects (streams/ of the settled bucket), transit slots
	// (chains/ of every bucket), staging (temp files and multipart parts)
	// and anything else.
	SettledBytes, TransitBytes, StagingBytes, OtherBytes uint64
	SettledObjects, TransitObjects                       int
	// MetaRows counts the metastore's rows by partition kind (the pk up
	// to its first '#' or '/').
	MetaRows map[string]int
}

// Meter measures a cluster's stores: the directory object store under
// Root and the metastore (Meta for typed reads, DB for a count of every
// row).
type Meter struct {
	Meta          meta.Store
	DB            *sql.DB
	Root          string
	SettledBucket string
	Basin         string
}

// OpenRowCounter opens the SQLite metastore file read-only, for counting
// its rows (the metastore contract has no scan of every partition).
func OpenRowCounter(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(2000)")
	if err != nil {
		return nil, fmt.Errorf("soak: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// Measure takes one sample of refs.
func (m *Meter) Measure(ctx context.Context, at time.Duration, refs []StreamRef) (Sample, error) {
	s := Sample{At: at, MetaRows: map[string]int{}}
	for _, ref := range refs {
		ss, err := m.measureStream(ctx, ref)
		if err != nil {
			return s, fmt.Errorf("soak: measure %s (%s): %w", ref.Name, ref.ID, err)
		}
		s.Streams = append(s.Streams, ss)
	}
	if err := m.walkAll(&s); err != nil {
		return s, err
	}
	if m.DB != nil {
		if err := m.countRows(ctx, s.MetaRows); err != nil {
			return s, err
		}
	}
	return s, nil
}

// rowsOf reads every row of a stream's partition.
func (m *Meter) rowsOf(ctx context.Context, id string) ([]meta.Item, error) {
	var out []meta.Item
	q := meta.Query{PK: meta.StreamMetaKey(id).PK}
	for range 10000 {
		pg, err := m.Meta.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, pg.Items...)
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
	return nil, errors.New("more than 10000 pages of rows")
}

// refsOf decodes the ref rows among items: the keys of the objects the
// catalog rows name, their bytes, the counts, and the greatest CumBytes
// of all refs and of the catalog rows.
func (m *Meter) refsOf(id string, items []meta.Item) (named map[string]uint64, catalog, spans int, cumAll, cumSettled uint64, err error) {
	named = map[string]uint64{}
	for _, it := range items {
		if !strings.HasPrefix(it.SK, meta.RefPrefix) {
			continue
		}
		var r meta.Ref
		if err := meta.Decode(it.Val, &r); err != nil {
			return nil, 0, 0, 0, 0, fmt.Errorf("ref row %s: %w", it.SK, err)
		}
		cumAll = max(cumAll, r.CumBytes)
		if st := r.Settled; st != nil {
			catalog++
			cumSettled = max(cumSettled, r.CumBytes)
			named[format.SettledKey(m.Basin, id, st.Epoch, st.FirstSeq, st.Revision)] = st.Bytes
		} else {
			spans++
		}
	}
	return named, catalog, spans, cumAll, cumSettled, nil
}

func (m *Meter) measureStream(ctx context.Context, ref StreamRef) (StreamSample, error) {
	ss := StreamSample{StreamRef: ref}
	before, err := m.rowsOf(ctx, ref.ID)
	if err != nil {
		return ss, err
	}
	prefix := "streams/" + m.Basin + "/" + ref.ID + "/"
	files := map[string]uint64{}
	dir := filepath.Join(m.Root, m.SettledBucket, filepath.FromSlash(prefix))
	err = filepath.WalkDir(dir, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				return nil // no object yet, or a delete pruned the folder
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, iofs.ErrNotExist) {
			return nil // deleted during the walk
		} else if err != nil {
			return err
		}
		rel, err := filepath.Rel(filepath.Join(m.Root, m.SettledBucket), p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = uint64(info.Size())
		return nil
	})
	if err != nil {
		return ss, fmt.Errorf("walk %s: %w", dir, err)
	}
	after, err := m.rowsOf(ctx, ref.ID)
	if err != nil {
		return ss, err
	}
	named1, _, _, _, _, err := m.refsOf(ref.ID, before)
	if err != nil {
		return ss, err
	}
	named2, catalog, spans, cumAll, cumSettled, err := m.refsOf(ref.ID, after)
	if err != nil {
		return ss, err
	}
	var r1, r2 uint64
	for _, b := range named1 {
		r1 += b
	}
	for _, b := range named2 {
		r2 += b
	}
	ss.Retained = max(r1, r2)
	ss.CatalogRows, ss.SpanRefs, ss.Rows = catalog, spans, len(after)
	if cumAll > cumSettled {
		ss.Unsettled = cumAll - cumSettled
	}
	entries, err := m.entriesOf(ctx, ref.ID)
	if err != nil {
		return ss, err
	}
	ss.Entries = len(entries)
	for key, size := range files {
		ss.Stored += size
		ss.Objects++
		_, n1 := named1[key]
		_, n2 := named2[key]
		switch e, ok := entries[key]; {
		case n1 || n2:
		case ok && e.Drop:
			ss.Trimmed += size
		case ok:
			ss.Superseded += size
		default:
			ss.Unnamed += size
		}
	}
	return ss, nil
}

// entriesOf reads a stream's reclaim entries, by the key of the object
// each names.
func (m *Meter) entriesOf(ctx context.Context, id string) (map[string]meta.Reclaim, error) {
	out := map[string]meta.Reclaim{}
	q := meta.Query{PK: meta.ReclaimPK, From: id + "/", To: id + "/~"}
	for range 10000 {
		pg, err := m.Meta.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, it := range pg.Items {
			var rc meta.Reclaim
			if err := meta.Decode(it.Val, &rc); err != nil {
				return nil, fmt.Errorf("reclaim entry %s: %w", it.SK, err)
			}
			out[format.SettledKey(m.Basin, id, rc.Epoch, rc.First, rc.Rev)] = rc
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
	return nil, errors.New("more than 10000 pages of reclaim entries")
}

// walkAll sums the whole object store by kind.
func (m *Meter) walkAll(s *Sample) error {
	err := filepath.WalkDir(m.Root, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, iofs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		size := uint64(info.Size())
		rel, err := filepath.Rel(m.Root, p)
		if err != nil {
			return err
		}
		parts := strings.SplitN(filepath.ToSlash(rel), "/", 3)
		switch {
		case parts[0] == ".starlog-staging":
			s.StagingBytes += size
		case len(parts) == 3 && parts[1] == "streams" && parts[0] == m.SettledBucket:
			s.SettledBytes += size
			s.SettledObjects++
		case len(parts) == 3 && parts[1] == "chains":
			s.TransitBytes += size
			s.TransitObjects++
		default:
			s.OtherBytes += size
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("soak: walk %s: %w", m.Root, err)
	}
	return nil
}

// countRows counts every metastore row by partition kind.
func (m *Meter) countRows(ctx context.Context, into map[string]int) error {
	rows, err := m.DB.QueryContext(ctx, "SELECT pk FROM items")
	if err != nil {
		return fmt.Errorf("soak: count rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var pk string
		if err := rows.Scan(&pk); err != nil {
			return fmt.Errorf("soak: count rows: %w", err)
		}
		into[PartitionKind(pk)]++
	}
	return rows.Err()
}

// PartitionKind is a partition key's kind: up to its first '#' or '/'.
func PartitionKind(pk string) string {
	if i := strings.IndexAny(pk, "#/"); i >= 0 {
		return pk[:i]
	}
	return pk
}

// Kinds are the row kinds of samples, sorted.
func Kinds(samples []Sample) []string {
	seen := map[string]bool{}
	for _, s := range samples {
		for k := range s.MetaRows {
			seen[k] = true
		}
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
