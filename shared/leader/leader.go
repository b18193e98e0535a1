// Package leader holds the rules of multi-star leadership (docs/design.md §9) that
// the star and the janitor share: when a registered star incarnation is
// live, how a stale one is marked dead, and how a stream's lease passes
// from one holder to the next.
//
// Liveness is judged from heartbeats and so from clocks; safety is not:
// a successor fences the previous holder's chain before it serves, so a
// holder presumed dead too early can never acknowledge past the fence.
package leader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// DefaultDeadAfter is how old a heartbeat may get before its star is
// presumed dead.
const DefaultDeadAfter = 30 * time.Second

// ErrLost means a lease CAS lost a race: re-read the lease and re-decide.
var ErrLost = errors.New("leader: lease moved concurrently")

// Live reports whether incarnation inc of the star whose registration is
// reg is live at now: the row names that incarnation, says live or
// draining, and its heartbeat is younger than deadAfter.
func Live(reg meta.Registration, inc uint64, now time.Time, deadAfter time.Duration) bool {
	if reg.Incarnation != inc {
		return false
	}
	switch reg.State {
	case meta.StarLive, meta.StarDraining:
	default:
		return false
	}
	return now.Sub(time.UnixMilli(reg.Heartbeat)) < deadAfter
}

// Stale reports whether reg claims to be live (or draining) but its
// heartbeat is at least deadAfter old at now: it may be marked dead.
func Stale(reg meta.Registration, now time.Time, deadAfter time.Duration) bool {
	if reg.State != meta.StarLive && reg.State != meta.StarDraining {
		return false
	}
	return now.Sub(time.UnixMilli(reg.Heartbeat)) >= deadAfter
}

// Witness is a star's registration offered as evidence that the
// metastore was reachable: its heartbeats landed without a gap from
// ConnectedSince to Heartbeat.
type Witness struct {
	Star string
	Reg  meta.Registration
}

// PresumeDead judges whether the star whose registration is reg may be
// presumed dead at now, and names the witness that shows it. A stale
// heartbeat alone does not say the star died: a metastore outage between
// the stars and the metastore silences every star at once, and a judge
// that can still reach the metastore (the janitor) would then depose
// them all, at the outage's start (one star's last beat is a little older
// than the others') and at its end (a peer beats first). So reg must be
// Stale, and some other star w, live at now, must show the metastore was
// reachable for a whole deadAfter bound after reg's last heartbeat: its
// heartbeats landed without a gap from before that bound began until
// after it ended,
//
//	max(reg.Heartbeat, w.ConnectedSince) + deadAfter ≤ w.Heartbeat.
//
// At an outage's start no w beats that late; at its end every w's run
// began after reg's last beat, and reg's own star beats again within the
// bound; a star that died, or that alone is cut off, is presumed dead
// once a peer has beaten for a bound without it. A star judging a lease
// offers itself as the witness, with Heartbeat the time of the reads it
// judges on (they landed, and its heartbeat is recent). A row without
// ConnectedSince (written by a star that predates it: a rolling upgrade)
// is read as connected since it registered, the assumption the judges
// made before; such a witness still fixes an outage's start, not its end.
// Heartbeats come from the stars' clocks, so a skew between two stars
// shifts the bound by as much; safety never rests on it (the fence).
func PresumeDead(star string, reg meta.Registration, witnesses []Witness, now time.Time, deadAfter time.Duration) (by string, dead bool) {
	if !Stale(reg, now, deadAfter) {
		return "", false
	}
	for _, w := range witnesses {
		if w.Star == star || !Live(w.Reg, w.Reg.Incarnation, now, deadAfter) {
			continue
		}
		since := w.Reg.ConnectedSince
		if since == 0 {
			since = w.Reg.StartedAt
		}
		if max(reg.Heartbeat, since)+deadAfter.Milliseconds() <= w.Reg.Heartbeat {
			return w.Star, true
		}
	}
	return "", false
}

// ReadRegistration reads star's registry row; ok is false when the star
// never registered.
func ReadRegistration(ctx context.Context, ms meta.Store, star string) (reg meta.Registration, ver int64, ok bool, err error) {
	k := meta.RegistryKey(star)
	it, err := ms.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return reg, 0, false, nil
	}
	if err != nil {
		return reg, 0, false, fmt.Errorf("leader: read registry of %s: %w", star, err)
	}
	if err := meta.Decode(it.Val, &reg); err != nil {
		return reg, 0, false, fmt.Errorf("leader: registry of %s: %w", star, err)
	}
	return reg, it.Ver, true, nil
}

// MarkDead marks star dead when its registration is stale at now, on no
// other evidence (an operator's or a test's verdict; the stars and the
// janitor use MarkPresumedDead). See markDead.
func MarkDead(ctx context.Context, ms meta.Store, star string, now time.Time, deadAfter time.Duration) (meta.Registration, bool, error) {
	return markDead(ctx, ms, star, func(reg meta.Registration) bool { return Stale(reg, now, deadAfter) })
}

// MarkPresumedDead marks star dead when PresumeDead judges it so on the
// witnesses, judged again on every row it reads; by names the witness.
// See markDead.
func MarkPresumedDead(ctx context.Context, ms meta.Store, star string, witnesses []Witness, now time.Time, deadAfter time.Duration) (reg meta.Registration, dead bool, by string, err error) {
	reg, dead, err = markDead(ctx, ms, star, func(reg meta.Registration) bool {
		by, _ = PresumeDead(star, reg, witnesses, now, deadAfter)
		return by != ""
	})
	return reg, dead, by, err
}

// markDead marks star dead when judge says so of its registration, by CAS
// on the row it read (so a heartbeat that lands first wins, and the star
// learns from its next lost heartbeat CAS that it was presumed dead). It
// returns the registration as it stands and whether it is dead or stopped
// now (false: live, or never registered).
func markDead(ctx context.Context, ms meta.Store, star string, judge func(meta.Registration) bool) (meta.Registration, bool, error) {
	k := meta.RegistryKey(star)
	for {
		reg, ver, ok, err := ReadRegistration(ctx, ms, star)
		if err != nil || !ok {
			return reg, false, err
		}
		if reg.State == meta.StarDead || reg.State == meta.StarStopped {
			return reg, true, nil
		}
		if !judge(reg) {
			return reg, false, nil
		}
		reg.State = meta.StarDead
		_, err = ms.Put(ctx, k.PK, k.SK, meta.Encode(reg), meta.IfVer(ver))
		if err == nil {
			return reg, true, nil
		}
		if !errors.Is(err, meta.ErrConditionFailed) {
			return reg, false, fmt.Errorf("leader: mark %s dead: %w", star, err)
		}
		if err := ctx.Err(); err != nil {
			return reg, false, err
		}
	}
}

// Stars lists the star directory (`stars` / <id>): every star id that
// ever registered (a star lists itself before its first registration).
func Stars(ctx context.Context, ms meta.Store) ([]string, error) {
	var out []string
	q := meta.Query{PK: meta.StarDirKey("").PK}
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("leader: list star directory: %w", err)
		}
		for _, it := range pg.Items {
			out = append(out, it.SK)
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
}

// ReadLease reads a stream's lease; ok is false when the stream was never
// led.
func ReadLease(ctx context.Context, ms meta.Store, streamID string) (l meta.Lease, ver int64, ok bool, err error) {
	k := meta.LeaseKey(streamID)
	it, err := ms.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return l, 0, false, nil
	}
	if err != nil {
		return l, 0, false, fmt.Errorf("leader: read lease of %s: %w", streamID, err)
	}
	if err := meta.Decode(it.Val, &l); err != nil {
		return l, 0, false, fmt.Errorf("leader: lease of %s: %w", streamID, err)
	}
	if l.Star == "" {
		return l, 0, false, fmt.Errorf("leader: lease of %s names no star", streamID)
	}
	return l, it.Ver, true, nil
}

// Successor is the lease me takes over from prev (nil: the stream was
// never led). Every earlier holder whose chain may hold records no row
// covers goes on Pending: prev itself unless it released cleanly, and
// whatever prev had not settled yet.
func Successor(prev *meta.Lease, me meta.LeaseHolder, now time.Time) meta.Lease {
	next := meta.Lease{LeaseHolder: me, Version: 1, AcquiredAt: now.UnixMilli()}
	if prev == nil {
		return next
	}
	next.Version = prev.Version + 1
	next.Pending = slices.Clone(prev.Pending)
	if !prev.Released && !slices.Contains(next.Pending, prev.LeaseHolder) {
		next.Pending = append(next.Pending, prev.LeaseHolder)
	}
	return next
}

// Acquire writes next over the lease at version ver (0: the stream was
// never led) and returns the new version; ErrLost when the lease moved.
func Acquire(ctx context.Context, ms meta.Store, streamID string, next meta.Lease, ver int64) (int64, error) {
	k := meta.LeaseKey(streamID)
	cond := meta.IfVer(ver)
	if ver == 0 {
		cond = meta.IfAbsent()
	}
	v, err := ms.Put(ctx, k.PK, k.SK, meta.Encode(next), cond)
	if errors.Is(err, meta.ErrConditionFailed) {
		return 0, ErrLost
	}
	if err != nil {
		return 0, fmt.Errorf("leader: write lease of %s: %w", streamID, err)
	}
	return v, nil
}

// ErrNotHolder means a release found the lease held by someone else (or
// already released): the caller no longer leads the stream.
var ErrNotHolder = errors.New("leader: lease not held by this incarnation")

// Release gives up me's lease on streamID cleanly: every record below
// frontier is covered by rows, so a successor opens there without settling
// me's chain (Successor leaves a released holder off Pending). The CAS
// retries only while the lease still names me unreleased. A non-empty to
// names the star the stream is handed to: the others leave it that star.
func Release(ctx context.Context, ms meta.Store, streamID string, me meta.LeaseHolder, frontier uint64, to string) error {
	for {
		cur, ver, ok, err := ReadLease(ctx, ms, streamID)
		if err != nil {
			return err
		}
		if !ok || cur.LeaseHolder != me || cur.Released {
			return fmt.Errorf("release lease of %s: %w", streamID, ErrNotHolder)
		}
		cur.Released, cur.Frontier, cur.To = true, frontier, to
		_, err = Acquire(ctx, ms, streamID, cur, ver)
		if errors.Is(err, ErrLost) {
			if err := ctx.Err(); err != nil {
				return err
			}
			continue
		}
		return err
	}
}
