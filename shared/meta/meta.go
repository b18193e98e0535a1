// Package meta is the metastore contract (docs/design.md §5): one table of items
// keyed by (pk, sk), each with a version for compare-and-swap and an opaque
// value. Every operation touches one item; there are no multi-item
// transactions, so DynamoDB, DynamoDB Local, dynalite and SQLite behave alike.
package meta

import (
	"context"
	"errors"
)

// ErrNotFound reports a missing item.
var ErrNotFound = errors.New("meta: item not found")

// ErrConditionFailed reports a conditional write whose condition did not
// hold. It is definite: nothing was written.
var ErrConditionFailed = errors.New("meta: condition failed")

// Item is one row. Ver starts at 1 when an item is created and grows by one
// on every successful write.
type Item struct {
	PK  string
	SK  string
	Ver int64
	Val []byte
}

// Cond is the condition of a conditional write.
type Cond struct {
	kind condKind
	ver  int64
}

type condKind uint8

const (
	condAlways condKind = iota
	condIfAbsent
	condIfVer
)

// Always is the unconditional write.
func Always() Cond { return Cond{kind: condAlways} }

// IfAbsent holds only when the item does not exist.
func IfAbsent() Cond { return Cond{kind: condIfAbsent} }

// IfVer holds only when the item exists with version v.
func IfVer(v int64) Cond { return Cond{kind: condIfVer, ver: v} }

// IsAlways, IsIfAbsent and Ver let backends read a Cond.
func (c Cond) IsAlways() bool   { return c.kind == condAlways }
func (c Cond) IsIfAbsent() bool { return c.kind == condIfAbsent }

// Ver returns the version an IfVer condition requires and whether c is one.
func (c Cond) Ver() (int64, bool) { return c.ver, c.kind == condIfVer }

// Query selects items of one partition with From ≤ sk ≤ To (an empty From
// or To is unbounded on that side), in ascending sk order or descending when
// Backward, at most Limit items per page (0: backend default), resuming
// after PageToken when it is set.
type Query struct {
	PK        string
	From, To  string
	Backward  bool
	Limit     int
	PageToken string
}

// Page is one page of a Query. Next is empty on the last page.
type Page struct {
	Items []Item
	Next  string
}

// Store is the metastore. All methods are safe for concurrent use, from
// several goroutines and (for the backends that allow it) several processes.
type Store interface {
	// Get returns the item or ErrNotFound.
	Get(ctx context.Context, pk, sk string) (Item, error)
	// Put writes val under (pk, sk) if cond holds and returns the new version;
	// ErrConditionFailed if it does not hold.
	Put(ctx context.Context, pk, sk string, val []byte, cond Cond) (int64, error)
	// Delete removes the item if cond holds (IfAbsent is not allowed here);
	// deleting a missing item with Always is not an error.
	Delete(ctx context.Context, pk, sk string, cond Cond) error
	// Query returns one page of a range query.
	Query(ctx context.Context, q Query) (Page, error)
	// BatchPut writes every item unconditionally. It is idempotent: writing
	// the same items twice leaves the same values. Item.Ver is ignored.
	BatchPut(ctx context.Context, items []Item) error
	// BatchDelete removes every key unconditionally; missing keys are fine.
	BatchDelete(ctx context.Context, keys []Key) error
	// Close releases the store's resources.
	Close() error
}

// Key names one item.
type Key struct{ PK, SK string }
