package settle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
)

// Claim timing: a claim holds ClaimTTL past its last renewal and is
// renewed every ClaimTTL/3, so only a settler that stopped (crashed, or
// cut off from the metastore) lets it lapse; waiters poll for it.
const (
	ClaimTTL   = 5 * time.Second
	claimPoll  = 25 * time.Millisecond
	claimPollX = 200 * time.Millisecond
)

// serialised runs fn while holding c's settle claim, so concurrent
// settlers of one chain (a successor's open gate, the janitor's job, a
// restarted incarnation) take turns: whoever arrives second waits for the
// first and then finds the work done (fn's every step re-reads the chain,
// and a settled epoch is a no-op). The claim orders work only; safety
// rests on the fence and the CAS-guarded steps, so a claim that lapses
// (its holder died; clocks disagree) costs a duplicate walk, never a
// wrong row.
func serialised(ctx context.Context, c *chain.Chain, fn func(context.Context) error) error {
	holder := c.Me + "/" + token()
	k := meta.SettleClaimKey(c.Star, c.Class)
	ver, err := acquireClaim(ctx, c.Meta, k, holder)
	if err != nil {
		return fmt.Errorf("settle %s/%s: claim: %w", c.Star, c.Class, err)
	}
	// Renew in the background; fn is not stopped when a renewal fails
	// (the claim is an ordering aid, not a lock that guards anything).
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	renewed := make(chan int64, 1)
	go func() {
		v := ver
		defer func() { renewed <- v }()
		t := time.NewTicker(ClaimTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			nv, err := c.Meta.Put(rctx, k.PK, k.SK, meta.Encode(claimUntil(holder)), meta.IfVer(v))
			if err != nil {
				return // lost or failing: let it lapse
			}
			v = nv
		}
	}()
	err = fn(ctx)
	stop()
	v := <-renewed
	// Free the claim for the next settler; a failed delete only makes it
	// wait out the TTL.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	c.Meta.Delete(dctx, k.PK, k.SK, meta.IfVer(v)) //nolint:errcheck // see above
	return err
}

// acquireClaim takes the claim row at k for holder once it is free or
// lapsed, polling while another settler holds it.
func acquireClaim(ctx context.Context, ms meta.Store, k meta.Key, holder string) (int64, error) {
	wait := claimPoll
	for {
		cond := meta.IfAbsent()
		it, err := ms.Get(ctx, k.PK, k.SK)
		switch {
		case err == nil:
			var cur meta.SettleClaim
			if err := meta.Decode(it.Val, &cur); err != nil {
				return 0, err
			}
			if time.Now().UnixMilli() < cur.Until {
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-time.After(wait):
				}
				wait = min(2*wait, claimPollX)
				continue
			}
			cond = meta.IfVer(it.Ver)
		case !errors.Is(err, meta.ErrNotFound):
			return 0, err
		}
		v, err := ms.Put(ctx, k.PK, k.SK, meta.Encode(claimUntil(holder)), cond)
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, meta.ErrConditionFailed) {
			return 0, err
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
}

func claimUntil(holder string) meta.SettleClaim {
	return meta.SettleClaim{Holder: holder, Until: time.Now().Add(ClaimTTL).UnixMilli()}
}

// token tells apart two settlers of one actor id (two jobs of one
// auditor process, two gate runs of one star).
func token() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
