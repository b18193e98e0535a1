package lead

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
)

// Register starts a new incarnation of star: it reads the registry row and
// CASes the incarnation counter up by one, retrying on a lost race (two
// processes started with one id get distinct incarnations; the older one is
// then deposed by the chain mint). The star is listed in the star directory
// first, so a peer that lists it may find no registration yet, but never
// the reverse.
func Register(ctx context.Context, ms meta.Store, star, addr string, now time.Time) (meta.Registration, int64, error) {
	if err := listStar(ctx, ms, star); err != nil {
		return meta.Registration{}, 0, err
	}
	k := meta.RegistryKey(star)
	for {
		var prev meta.Registration
		cond := meta.IfAbsent()
		it, err := ms.Get(ctx, k.PK, k.SK)
		switch {
		case err == nil:
			if err := meta.Decode(it.Val, &prev); err != nil {
				return meta.Registration{}, 0, fmt.Errorf("registry %s: %w", star, err)
			}
			cond = meta.IfVer(it.Ver)
		case !errors.Is(err, meta.ErrNotFound):
			return meta.Registration{}, 0, fmt.Errorf("registry %s: read: %w", star, err)
		}
		reg := meta.Registration{
			Incarnation: prev.Incarnation + 1,
			Address:     addr,
			State:       meta.StarLive,
			StartedAt:   now.UnixMilli(),
			Heartbeat:   now.UnixMilli(),
			// The first run of heartbeats begins at the registration.
			ConnectedSince: now.UnixMilli(),
		}
		ver, err := ms.Put(ctx, k.PK, k.SK, meta.Encode(reg), cond)
		if err == nil {
			return reg, ver, nil
		}
		if !errors.Is(err, meta.ErrConditionFailed) {
			return meta.Registration{}, 0, fmt.Errorf("registry %s: register incarnation %d: %w", star, reg.Incarnation, err)
		}
		if err := ctx.Err(); err != nil {
			return meta.Registration{}, 0, err
		}
	}
}

// listStar writes star's directory row (stars/<id>) unless it exists: the
// first start of a star id writes it, later ones find it.
func listStar(ctx context.Context, ms meta.Store, star string) error {
	k := meta.StarDirKey(star)
	_, err := ms.Put(ctx, k.PK, k.SK, nil, meta.IfAbsent())
	if err != nil && !errors.Is(err, meta.ErrConditionFailed) {
		return fmt.Errorf("star directory %s: %w", star, err)
	}
	return nil
}

// ErrSuperseded means the registry row is no longer this incarnation's:
// another process registered a later incarnation of this star id, or a
// peer or the janitor marked it dead.
var ErrSuperseded = errors.New("registry: this incarnation's row changed: a later incarnation registered or peers presumed it dead")

// Beat rewrites the registry row at version ver (ours since we wrote it)
// with a fresh heartbeat and state. It never overwrites another
// incarnation's row: ErrSuperseded when the row says a later incarnation
// registered or peers presumed this one dead. A lost CAS alone does not
// say so: an earlier beat whose reply was lost (a metastore timeout)
// moved the row past ver, and a star that read that as its deposition
// would depose itself after every flaky outage. So the row is read again,
// and a row that is still this incarnation's, live or draining (only this
// process writes those), is adopted.
func Beat(ctx context.Context, ms meta.Store, star string, reg meta.Registration, ver int64) (int64, error) {
	k := meta.RegistryKey(star)
	v, err := ms.Put(ctx, k.PK, k.SK, meta.Encode(reg), meta.IfVer(ver))
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, meta.ErrConditionFailed) {
		return ver, fmt.Errorf("registry %s: heartbeat: %w", star, err)
	}
	cur, cver, ok, err := leader.ReadRegistration(ctx, ms, star)
	if err != nil {
		return ver, fmt.Errorf("registry %s: heartbeat lost its CAS and the row could not be read again: %w", star, err)
	}
	if !ok || !ownRow(cur, reg.Incarnation) {
		return ver, ErrSuperseded
	}
	v, err = ms.Put(ctx, k.PK, k.SK, meta.Encode(reg), meta.IfVer(cver))
	if err != nil {
		// Not a verdict either: the next beat reads the row again.
		return ver, fmt.Errorf("registry %s: heartbeat over this incarnation's own newer row: %w", star, err)
	}
	return v, nil
}

// ownRow reports whether a registry row is still incarnation inc's own:
// peers and the janitor only ever write dead, and a restart writes a
// later incarnation.
func ownRow(cur meta.Registration, inc uint64) bool {
	return cur.Incarnation == inc && (cur.State == meta.StarLive || cur.State == meta.StarDraining)
}
