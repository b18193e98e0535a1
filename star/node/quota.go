package node

import (
	"context"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/quota"
)

// The star's part of the basins' quotas (star/quota): appends are taken
// from it in Appender.Submit, stream creation asks it through the
// catalog, and its loop exchanges the usage rows with the other stars.

// newQuota builds the star's quota enforcement over its catalog.
func (n *Node) newQuota() *quota.Manager {
	return quota.New(quota.Config{Star: n.cfg.StarID, Period: n.cfg.QuotaPeriod}, quota.Deps{
		Meta: n.meta, Now: n.now, Registry: n.reg, Logger: n.log,
		Basin: func(ctx context.Context, name string) (string, *api.BasinQuotas, error) {
			b, err := n.cat.LiveBasin(ctx, name)
			if err != nil {
				return "", nil, err
			}
			return b.Row.ID, b.Row.Config.Quotas, nil
		},
		Stored: n.cat.BasinStorageBytes,
	})
}

// admitCreate is the catalog's AdmitCreate: the basin's stream quota.
func (n *Node) admitCreate(ctx context.Context, basin, basinID string, q api.BasinQuotas) error {
	return n.quota.AdmitCreate(ctx, basin, basinID, q)
}

// startQuota starts the usage rows' loop.
func (n *Node) startQuota() { n.quotaLoop.start(n.drainCtx, n.quota.Run) }
