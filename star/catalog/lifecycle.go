package catalog

import "time"

// Basins and streams are deleted in two steps (docs/design.md §5): DELETE
// stamps deleted_at; for Config.DeletionPending after that the resource
// answers 409 *_deletion_pending, then 404, and its name can be created
// again with a new id.

// Lifecycle is where a deleted resource stands at time now.
type Lifecycle uint8

const (
	Alive Lifecycle = iota
	Deleting
	Gone
)

// LifecycleOf judges a resource deleted at deletedAt (nil: not deleted)
// at now, pending being the deletion-pending window.
func LifecycleOf(deletedAt *time.Time, pending time.Duration, now time.Time) Lifecycle {
	switch {
	case deletedAt == nil:
		return Alive
	case now.Sub(*deletedAt) < pending:
		return Deleting
	default:
		return Gone
	}
}
