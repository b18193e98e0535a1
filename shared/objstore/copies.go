package objstore

import "context"

type copiesKey struct{}

// WithCopies marks the create-once PUTs made with ctx as n copies of one
// object started together, one per bucket (a flight's copies in its K
// buckets). A store that groups writes may hold a group open for the
// other copies when they land in the same store (the directory store's
// journal does: one data sync for all of them rather than one after
// another); other stores ignore it.
func WithCopies(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, copiesKey{}, n)
}

// Copies is the n of WithCopies, or 1 when ctx has none.
func Copies(ctx context.Context) int {
	if n, ok := ctx.Value(copiesKey{}).(int); ok && n > 1 {
		return n
	}
	return 1
}
