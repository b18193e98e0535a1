package node

import (
	"context"
	"fmt"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// OpenStores opens the metastore and the object store cfg selects, exactly
// as Open does when its Deps leave them nil (a directory store gets every
// bucket of both sets created). It is for callers that wrap the stores
// before passing them to Open in Deps (the dev fault control of `star
// serve`); the caller closes the metastore after the node.
func OpenStores(ctx context.Context, cfg Config) (meta.Store, objstore.Store, error) {
	ms, err := openMeta(ctx, cfg.Meta)
	if err != nil {
		return nil, nil, fmt.Errorf("node: %w", err)
	}
	objs, err := openObjects(ctx, cfg.Objects, Buckets(cfg))
	if err != nil {
		ms.Close()
		return nil, nil, fmt.Errorf("node: %w", err)
	}
	return ms, objs, nil
}

// Buckets are the buckets a star on cfg uses: its Standard set, then its
// Express set, with the defaults applied as Open applies them.
func Buckets(cfg Config) []string {
	cfg = cfg.WithDefaults()
	return append(append([]string(nil), cfg.Standard.Buckets...), cfg.Express.Buckets...)
}
