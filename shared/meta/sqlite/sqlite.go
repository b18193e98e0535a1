// Package sqlite is the embedded metastore backend (docs/design.md §5): one SQLite
// file in WAL mode on modernc.org/sqlite (pure Go), safe for several
// processes on one host sharing the file (WAL needs shared memory, so never
// put the file on a network filesystem).
//
// Every conditional write is a single statement (INSERT … ON CONFLICT DO
// NOTHING, UPDATE/DELETE … WHERE ver = ?), so two processes racing a CAS
// have exactly one winner: SQLite serialises writers on the WAL write lock
// and each statement sees the latest committed row. SQLITE_BUSY means the
// statement did not run; it is retried with backoff until the context ends.
//
// Versions match the dynamo backend exactly: a created item has ver 1, every
// Put and conditional write adds one, and BatchPut writes ver 1 whether or
// not the item existed (DynamoDB's BatchWriteItem cannot increment).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/internal/keyplan"
)

// DefaultLimit is the page size of a Query without a Limit.
const DefaultLimit = 1000

// rules enforce DynamoDB's key and item limits here too, so that whatever
// works on the embedded store also works on DynamoDB; page tokens carry 's'.
var rules = keyplan.Rules{Backend: "meta/sqlite", TokenTag: 's', DefaultLimit: DefaultLimit}

// batchChunk is how many items one BatchPut/BatchDelete transaction writes:
// large enough to amortise the commit's fsync, small enough not to hold the
// write lock long against other processes.
const batchChunk = 256

// busyTimeoutMS is how long SQLite itself waits for the write lock before
// returning SQLITE_BUSY, which we then retry with backoff; kept short so a
// waiting call notices its context ending (the busy handler does not).
const busyTimeoutMS = 1000

const schema = `CREATE TABLE IF NOT EXISTS items (
	pk  TEXT NOT NULL,
	sk  TEXT NOT NULL,
	ver INTEGER NOT NULL,
	val BLOB NOT NULL,
	PRIMARY KEY (pk, sk)
) WITHOUT ROWID`

// Store is a meta.Store on one SQLite file.
type Store struct {
	db   *sql.DB
	path string
	// wsem serialises this process's writers so they queue in Go rather than
	// spin in SQLite's busy handler; other processes still contend on the
	// file's write lock.
	wsem chan struct{}
	// The fixed statements, prepared once: parsing and planning one in
	// SQLite was half of a Get's CPU (sqlite3_prepare_v2 in a profile of
	// the Durable Streams face, which reads a stream's row per append).
	get, putIfAbsent, putIfVer, upsert, del, delIfVer *sql.Stmt
}

// prepare prepares the fixed statements (database/sql prepares each again
// on every connection it is run on).
func (s *Store) prepare(ctx context.Context) error {
	for _, p := range []struct {
		st  **sql.Stmt
		sql string
	}{
		{&s.get, `SELECT ver, val FROM items WHERE pk = ? AND sk = ?`},
		{&s.putIfAbsent, `INSERT INTO items (pk, sk, ver, val) VALUES (?, ?, 1, ?) ON CONFLICT (pk, sk) DO NOTHING`},
		{&s.putIfVer, `UPDATE items SET val = ?, ver = ver + 1 WHERE pk = ? AND sk = ? AND ver = ?`},
		{&s.upsert, `INSERT INTO items (pk, sk, ver, val) VALUES (?, ?, 1, ?)
			ON CONFLICT (pk, sk) DO UPDATE SET val = excluded.val, ver = items.ver + 1
			RETURNING ver`},
		{&s.del, `DELETE FROM items WHERE pk = ? AND sk = ?`},
		{&s.delIfVer, `DELETE FROM items WHERE pk = ? AND sk = ? AND ver = ?`},
	} {
		err := s.retry(ctx, func() error {
			st, err := s.db.PrepareContext(ctx, p.sql)
			*p.st = st
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

var _ meta.Store = (*Store)(nil)

// Open opens (creating if needed) the metastore file at path.
//
// synchronous=FULL: in WAL mode NORMAL already survives kill -9 (committed
// frames sit in the OS page cache), but it can lose the last commits on an
// OS crash or power loss. Acks never depend on the metastore, but CAS
// results do: a lost epoch mint, lease or fence cut that a process already
// acted on would let a successor win the same CAS again. FULL fsyncs the WAL
// at every commit; the metastore sees tens of writes per second, so the cost
// is small.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("meta/sqlite: empty path")
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Set("_txlock", "immediate") // BEGIN IMMEDIATE: take the write lock up front
	dsn := "file:" + escapePath(path) + "?" + q.Encode()

	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("meta/sqlite: open %s: %w", path, err)
	}
	// A few connections let reads run beside the single writer (WAL allows
	// readers concurrent with one writer).
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(time.Minute)

	s := &Store{db: db, path: path, wsem: make(chan struct{}, 1)}
	if err := s.retry(ctx, func() error {
		_, err := db.ExecContext(ctx, schema)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("meta/sqlite: create schema in %s: %w", path, err)
	}
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, fmt.Errorf("meta/sqlite: read journal mode of %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		db.Close()
		return nil, fmt.Errorf("meta/sqlite: %s is in journal mode %q, want wal", path, mode)
	}
	if err := s.prepare(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("meta/sqlite: prepare statements in %s: %w", path, err)
	}
	return s, nil
}

// escapePath keeps '?' and '#' in a file name from being read as DSN syntax.
func escapePath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

// Close closes the database.
func (s *Store) Close() error {
	for _, st := range []*sql.Stmt{s.get, s.putIfAbsent, s.putIfVer, s.upsert, s.del, s.delIfVer} {
		if st != nil {
			st.Close()
		}
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("meta/sqlite: close %s: %w", s.path, err)
	}
	return nil
}

// Get returns the item or meta.ErrNotFound.
func (s *Store) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	if err := rules.CheckKey(pk, sk); err != nil {
		return meta.Item{}, err
	}
	it := meta.Item{PK: pk, SK: sk}
	err := s.retry(ctx, func() error {
		return s.get.QueryRowContext(ctx, pk, sk).Scan(&it.Ver, &it.Val)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return meta.Item{}, fmt.Errorf("meta/sqlite: get pk=%s sk=%s: %w", pk, sk, meta.ErrNotFound)
	}
	if err != nil {
		return meta.Item{}, fmt.Errorf("meta/sqlite: get pk=%s sk=%s: %w", pk, sk, err)
	}
	return it, nil
}

// Put writes val if cond holds and returns the new version.
func (s *Store) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	if err := rules.CheckItem(pk, sk, val); err != nil {
		return 0, err
	}
	if val == nil {
		val = []byte{} // the column is NOT NULL
	}
	var ver int64
	err := s.write(ctx, func() error {
		switch v, isVer := cond.Ver(); {
		case cond.IsIfAbsent():
			n, err := rowsAffected(s.putIfAbsent.ExecContext(ctx, pk, sk, val))
			if err != nil {
				return err
			}
			if n == 0 {
				return meta.ErrConditionFailed
			}
			ver = 1
		case isVer:
			n, err := rowsAffected(s.putIfVer.ExecContext(ctx, val, pk, sk, v))
			if err != nil {
				return err
			}
			if n == 0 {
				return meta.ErrConditionFailed
			}
			ver = v + 1
		default:
			return s.upsert.QueryRowContext(ctx, pk, sk, val).Scan(&ver)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("meta/sqlite: put pk=%s sk=%s: %w", pk, sk, err)
	}
	return ver, nil
}

// Delete removes the item if cond holds.
func (s *Store) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	if err := rules.CheckKey(pk, sk); err != nil {
		return err
	}
	if cond.IsIfAbsent() {
		return fmt.Errorf("meta/sqlite: delete pk=%s sk=%s: IfAbsent is not a delete condition", pk, sk)
	}
	err := s.write(ctx, func() error {
		if v, ok := cond.Ver(); ok {
			n, err := rowsAffected(s.delIfVer.ExecContext(ctx, pk, sk, v))
			if err != nil {
				return err
			}
			if n == 0 {
				return meta.ErrConditionFailed
			}
			return nil
		}
		_, err := s.del.ExecContext(ctx, pk, sk)
		return err
	})
	if err != nil {
		return fmt.Errorf("meta/sqlite: delete pk=%s sk=%s: %w", pk, sk, err)
	}
	return nil
}

// Query returns one page of a range query.
func (s *Store) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	p, err := rules.PlanQuery(q)
	if err != nil {
		return meta.Page{}, fmt.Errorf("meta/sqlite: query %s: %w", q.PK, err)
	}
	if p.Empty {
		return meta.Page{}, nil
	}
	var (
		where = []string{"pk = ?"}
		args  = []any{q.PK}
	)
	if p.From != "" {
		where, args = append(where, "sk >= ?"), append(args, p.From)
	}
	if p.To != "" {
		where, args = append(where, "sk <= ?"), append(args, p.To)
	}
	if p.After != "" {
		op := "sk > ?"
		if q.Backward {
			op = "sk < ?"
		}
		where, args = append(where, op), append(args, p.After)
	}
	order := "ASC"
	if q.Backward {
		order = "DESC"
	}
	stmt := `SELECT sk, ver, val FROM items WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY sk ` + order + ` LIMIT ?`
	args = append(args, p.Limit+1) // one more than asked tells whether a next page exists

	var items []meta.Item
	err = s.retry(ctx, func() error {
		items = items[:0]
		rows, err := s.db.QueryContext(ctx, stmt, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			it := meta.Item{PK: q.PK}
			if err := rows.Scan(&it.SK, &it.Ver, &it.Val); err != nil {
				return err
			}
			items = append(items, it)
		}
		return rows.Err()
	})
	if err != nil {
		return meta.Page{}, fmt.Errorf("meta/sqlite: query %s: %w", q.PK, err)
	}
	var page meta.Page
	if len(items) > p.Limit {
		items = items[:p.Limit]
		page.Next = rules.EncodeToken(items[len(items)-1].SK)
	}
	page.Items = items
	return page, nil
}

// BatchPut writes every item unconditionally with ver 1 (see the package
// doc). A key given twice keeps its last value.
func (s *Store) BatchPut(ctx context.Context, items []meta.Item) error {
	for _, it := range items {
		if err := rules.CheckItem(it.PK, it.SK, it.Val); err != nil {
			return err
		}
	}
	for start := 0; start < len(items); start += batchChunk {
		chunk := items[start:min(start+batchChunk, len(items))]
		err := s.writeTx(ctx, func(tx *sql.Tx) error {
			st, err := tx.PrepareContext(ctx, `INSERT INTO items (pk, sk, ver, val) VALUES (?, ?, 1, ?)
				ON CONFLICT (pk, sk) DO UPDATE SET val = excluded.val, ver = 1`)
			if err != nil {
				return err
			}
			defer st.Close()
			for _, it := range chunk {
				val := it.Val
				if val == nil {
					val = []byte{}
				}
				if _, err := st.ExecContext(ctx, it.PK, it.SK, val); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("meta/sqlite: batch put of %d items (from pk=%s sk=%s): %w",
				len(chunk), chunk[0].PK, chunk[0].SK, err)
		}
	}
	return nil
}

// BatchDelete removes every key unconditionally.
func (s *Store) BatchDelete(ctx context.Context, keys []meta.Key) error {
	for _, k := range keys {
		if err := rules.CheckKey(k.PK, k.SK); err != nil {
			return err
		}
	}
	for start := 0; start < len(keys); start += batchChunk {
		chunk := keys[start:min(start+batchChunk, len(keys))]
		err := s.writeTx(ctx, func(tx *sql.Tx) error {
			st, err := tx.PrepareContext(ctx, `DELETE FROM items WHERE pk = ? AND sk = ?`)
			if err != nil {
				return err
			}
			defer st.Close()
			for _, k := range chunk {
				if _, err := st.ExecContext(ctx, k.PK, k.SK); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("meta/sqlite: batch delete of %d keys (from pk=%s sk=%s): %w",
				len(chunk), chunk[0].PK, chunk[0].SK, err)
		}
	}
	return nil
}

// write runs one write statement under the process's writer slot, retrying
// SQLITE_BUSY.
func (s *Store) write(ctx context.Context, fn func() error) error {
	select {
	case s.wsem <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	defer func() { <-s.wsem }()
	return s.retry(ctx, fn)
}

// writeTx runs fn in a BEGIN IMMEDIATE transaction, retrying it whole on
// SQLITE_BUSY (a busy transaction is rolled back, so nothing of it stays).
func (s *Store) writeTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return s.write(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// maxBusyWait bounds how long one call keeps retrying a locked database:
// a lock held that long means a stuck process, which is an error to report.
const maxBusyWait = time.Minute

// retry runs fn until it returns something other than SQLITE_BUSY/LOCKED.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     2 * time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         250 * time.Millisecond,
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := fn()
		if err != nil && !isBusy(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(maxBusyWait))
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// isBusy reports a lock conflict: the statement did not run and may be
// retried as is.
func isBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff { // primary code; extended codes keep it in the low byte
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

func rowsAffected(r sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}
