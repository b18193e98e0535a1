package chainsettle

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
	ran, err := HoldClaim(ctx, c.Meta, meta.SettleClaimKey(c.Star, c.Class), Holder(c.Me), true, fn)
	if err != nil && !ran {
		return fmt.Errorf("settle %s/%s: %w", c.Star, c.Class, err)
	}
	return err
}

// HoldClaim runs fn while holding the claim row at k, renewing it in the
// background and deleting it after. With wait it polls while another
// holder has the claim; without, it returns ran = false at once (the
// other holder is doing the work). holder names the claimant (Holder).
// shared/settle's era jobs hold their in-flight claim (meta.JobClaimKey)
// through it too.
func HoldClaim(ctx context.Context, ms meta.Store, k meta.Key, holder string, wait bool, fn func(context.Context) error) (ran bool, err error) {
	ver, ok, err := acquireClaim(ctx, ms, k, holder, wait)
	if err != nil {
		return false, fmt.Errorf("claim: %w", err)
	}
	if !ok {
		return false, nil
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
			nv, err := ms.Put(rctx, k.PK, k.SK, meta.Encode(claimUntil(holder)), meta.IfVer(v))
			if err != nil {
				return // lost or failing: let it lapse
			}
			v = nv
		}
	}()
	err = fn(ctx)
	stop()
	v := <-renewed
	// Free the claim for the next holder; a failed delete only makes it
	// wait out the TTL.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ms.Delete(dctx, k.PK, k.SK, meta.IfVer(v)) //nolint:errcheck // see above
	return true, err
}

// acquireClaim takes the claim row at k for holder once it is free or
// lapsed, polling while another settler holds it (wait), or reporting
// ok = false at once (!wait).
func acquireClaim(ctx context.Context, ms meta.Store, k meta.Key, holder string, wait bool) (ver int64, ok bool, err error) {
	poll := claimPoll
	for {
		cond := meta.IfAbsent()
		it, err := ms.Get(ctx, k.PK, k.SK)
		switch {
		case err == nil:
			var cur meta.SettleClaim
			if err := meta.Decode(it.Val, &cur); err != nil {
				return 0, false, err
			}
			if time.Now().UnixMilli() < cur.Until {
				if !wait {
					return 0, false, nil
				}
				select {
				case <-ctx.Done():
					return 0, false, ctx.Err()
				case <-time.After(poll):
				}
				poll = min(2*poll, claimPollX)
				continue
			}
			cond = meta.IfVer(it.Ver)
		case !errors.Is(err, meta.ErrNotFound):
			return 0, false, err
		}
		v, err := ms.Put(ctx, k.PK, k.SK, meta.Encode(claimUntil(holder)), cond)
		if err == nil {
			return v, true, nil
		}
		if !errors.Is(err, meta.ErrConditionFailed) {
			return 0, false, err
		}
		if err := ctx.Err(); err != nil {
			return 0, false, err
		}
	}
}

func claimUntil(holder string) meta.SettleClaim {
	return meta.SettleClaim{Holder: holder, Until: time.Now().Add(ClaimTTL).UnixMilli()}
}

// Holder is a claimant's name: the actor id and a random token, which
// tells apart two settlers of one actor id (two jobs of one auditor
// process, two gate runs of one star).
func Holder(id string) string { return id + "/" + token() }

func token() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
