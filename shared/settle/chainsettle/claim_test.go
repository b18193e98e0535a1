package chainsettle_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/sqlite"
	"github.com/starlog/starlog/shared/settle/chainsettle"
)

// A claim held by one settler: a second that does not wait skips at once
// (ran = false, fn not run); once the first is done the row is gone and
// the next holder runs.
func TestHoldClaimTakesTurns(t *testing.T) {
	ctx := context.Background()
	ms, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	k := meta.SettleClaimKey("s1", meta.Express)
	ran, err := chainsettle.HoldClaim(ctx, ms, k, chainsettle.Holder("a"), false, func(ctx context.Context) error {
		inner, err := chainsettle.HoldClaim(ctx, ms, k, chainsettle.Holder("b"), false, func(context.Context) error {
			t.Error("second holder ran while the claim was held")
			return nil
		})
		if inner || err != nil {
			t.Errorf("second holder: ran %v, err %v; want false, nil", inner, err)
		}
		return nil
	})
	if !ran || err != nil {
		t.Fatalf("first holder: ran %v, err %v; want true, nil", ran, err)
	}
	if _, err := ms.Get(ctx, k.PK, k.SK); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("claim row after release: %v, want ErrNotFound", err)
	}
	ran, err = chainsettle.HoldClaim(ctx, ms, k, chainsettle.Holder("b"), false, func(context.Context) error { return nil })
	if !ran || err != nil {
		t.Fatalf("holder after release: ran %v, err %v; want true, nil", ran, err)
	}
}
