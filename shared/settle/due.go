package settle

import (
	"context"
	"errors"
	"fmt"

	"github.com/starlog/starlog/shared/meta"
)

// ReadDue reads a chain's durable settle marker (meta.SettleDue), left by
// a star that closed gracefully with the chain unsettled.
func ReadDue(ctx context.Context, ms meta.Store, ch ChainRef) (meta.SettleDue, bool, error) {
	k := meta.SettleDueKey(ch.Star, ch.Class)
	it, err := ms.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return meta.SettleDue{}, false, nil
	}
	if err != nil {
		return meta.SettleDue{}, false, fmt.Errorf("settle: read marker of %s: %w", ch, err)
	}
	var d meta.SettleDue
	if err := meta.Decode(it.Val, &d); err != nil {
		return d, false, fmt.Errorf("settle: marker of %s: %w", ch, err)
	}
	return d, true, nil
}

// ClearDue deletes ch's settle marker once the chain is settled through
// the marked epoch (through ≥ its epoch); a marker rewritten meanwhile
// stays (the delete is by version).
func ClearDue(ctx context.Context, ms meta.Store, ch ChainRef, through uint64) error {
	k := meta.SettleDueKey(ch.Star, ch.Class)
	it, err := ms.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("settle: read marker of %s: %w", ch, err)
	}
	var d meta.SettleDue
	if err := meta.Decode(it.Val, &d); err != nil {
		return fmt.Errorf("settle: marker of %s: %w", ch, err)
	}
	if d.Epoch > through {
		return nil
	}
	err = ms.Delete(ctx, k.PK, k.SK, meta.IfVer(it.Ver))
	if err != nil && !errors.Is(err, meta.ErrConditionFailed) && !errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("settle: clear marker of %s: %w", ch, err)
	}
	return nil
}
