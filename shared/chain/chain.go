package chain

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// SlotKey is a slot's object key, identical in every bucket of the set.
func SlotKey(star string, class meta.Class, epoch, slot uint64) string {
	return fmt.Sprintf("chains/%s/%s/%020d/%020d", star, class, epoch, slot)
}

// Incarnation names one run of a star process: "<star>:<n>". Only an
// incarnation of a chain's star may mint on it.
func Incarnation(star string, n uint64) string { return fmt.Sprintf("%s:%d", star, n) }

// ParseIncarnation is the n of an incarnation id "<star>:<n>" of star.
func ParseIncarnation(id, star string) (uint64, error) {
	s, ok := strings.CutPrefix(id, star+":")
	if !ok {
		return 0, fmt.Errorf("chain of %s: %q is not an incarnation of it", star, id)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("chain of %s: incarnation %q: %w", star, id, err)
	}
	return n, nil
}

// Chain is one star's per-class write log as seen by one actor: the writer
// (an incarnation of the chain's star) or a successor that fences, walks,
// probes and trims it. Me names the actor in head rows (owner or fencer).
type Chain struct {
	Star  string
	Class meta.Class
	Me    string // this actor's incarnation id
	Meta  meta.Store
	Store objstore.Store
	// AttemptTimeout bounds one request to one bucket, so a black-holed
	// bucket is retried when it comes back (default 10 s).
	AttemptTimeout time.Duration
	// OwnFenceWait bounds how long a writer fencing its own epoch waits
	// for a bucket that could decide a slot it never released, before it
	// cuts there on what it knows (default 1 s; FenceOwn).
	OwnFenceWait time.Duration
	// OnAbandoned, when set, hears how many requests a fence left still
	// running when its wait for them passed its bound (a store that
	// ignores its deadline; for a metric).
	OnAbandoned func(n int)
	// ReadVersion is the newest envelope version this actor reads (0:
	// format.MaxVersion). Tests set it to act as another build.
	ReadVersion uint8

	// The chain's randomness: the nonces it mints and writes into poison,
	// and the retry jitter. Drawn from crypto/rand unless Seed fixed it.
	seed       uint64
	randMu     sync.Mutex
	rand       *rand.Rand   // nil: nonces from crypto/rand
	fenceNonce format.Nonce // written into this actor's poison
}

// New returns the chain (star, class) as seen by actor me.
func New(star string, class meta.Class, me string, ms meta.Store, os objstore.Store) *Chain {
	c := &Chain{Star: star, Class: class, Me: me, Meta: ms, Store: os}
	n := NewNonce()
	c.seed = binary.LittleEndian.Uint64(n[:8])
	c.fenceNonce = NewNonce()
	return c
}

// Seed makes every random choice of this chain a function of seed: the
// nonces it mints and poisons with, and its retry jitter. A simulation
// seeds each actor's chain so that one seed replays one run; production
// leaves the crypto/rand default.
func (c *Chain) Seed(seed uint64) *Chain {
	c.randMu.Lock()
	defer c.randMu.Unlock()
	c.seed = seed
	c.rand = rand.New(rand.NewPCG(seed, 0x5eed))
	c.fenceNonce = c.drawLocked()
	return c
}

// nonce draws a nonce from the chain's source.
func (c *Chain) nonce() format.Nonce {
	c.randMu.Lock()
	defer c.randMu.Unlock()
	return c.drawLocked()
}

func (c *Chain) drawLocked() format.Nonce {
	if c.rand == nil {
		return NewNonce()
	}
	var n format.Nonce
	binary.LittleEndian.PutUint64(n[:8], c.rand.Uint64())
	binary.LittleEndian.PutUint64(n[8:], c.rand.Uint64())
	return n
}

// NewNonce draws a random 128-bit nonce.
func NewNonce() format.Nonce {
	var n format.Nonce
	if _, err := crand.Read(n[:]); err != nil {
		panic("chain: crypto/rand: " + err.Error())
	}
	return n
}

// ParseNonce decodes the hex nonce of an epoch's params.
func ParseNonce(s string) (format.Nonce, error) {
	var n format.Nonce
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(n) {
		return n, fmt.Errorf("chain: bad nonce %q", s)
	}
	copy(n[:], b)
	return n, nil
}

// attempt bounds one bucket request.
func (c *Chain) attempt(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.attemptTimeout())
}

// attemptTimeout is AttemptTimeout or its default.
func (c *Chain) attemptTimeout() time.Duration {
	if c.AttemptTimeout <= 0 {
		return 10 * time.Second
	}
	return c.AttemptTimeout
}

func (c *Chain) slotKey(epoch, slot uint64) string { return SlotKey(c.Star, c.Class, epoch, slot) }

func (c *Chain) buckets(p meta.EpochParams) []objstore.Bucket {
	bs := make([]objstore.Bucket, len(p.Buckets))
	for i, name := range p.Buckets {
		bs[i] = c.Store.Bucket(name)
	}
	return bs
}

// Head reads the chain's mint head; ok is false when the chain was never
// minted.
func (c *Chain) Head(ctx context.Context) (h meta.Head, ver int64, ok bool, err error) {
	k := meta.HeadKey(c.Star, c.Class)
	it, err := c.Meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return h, 0, false, nil
	}
	if err != nil {
		return h, 0, false, fmt.Errorf("chain %s/%s: read head: %w", c.Star, c.Class, err)
	}
	if err := meta.Decode(it.Val, &h); err != nil {
		return h, 0, false, err
	}
	return h, it.Ver, true, nil
}

// casHead writes h over version ver (0: create); false when the CAS lost.
func (c *Chain) casHead(ctx context.Context, h meta.Head, ver int64) (bool, error) {
	k := meta.HeadKey(c.Star, c.Class)
	cond := meta.IfVer(ver)
	if ver == 0 {
		cond = meta.IfAbsent()
	}
	_, err := c.Meta.Put(ctx, k.PK, k.SK, meta.Encode(h), cond)
	if errors.Is(err, meta.ErrConditionFailed) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("chain %s/%s: write head: %w", c.Star, c.Class, err)
	}
	return true, nil
}

// Epoch reads one epoch's record.
func (c *Chain) Epoch(ctx context.Context, epoch uint64) (meta.Epoch, int64, error) {
	k := meta.EpochKey(c.Star, c.Class, epoch)
	it, err := c.Meta.Get(ctx, k.PK, k.SK)
	if err != nil {
		return meta.Epoch{}, 0, fmt.Errorf("chain %s/%s: read epoch %d: %w", c.Star, c.Class, epoch, err)
	}
	var e meta.Epoch
	if err := meta.Decode(it.Val, &e); err != nil {
		return e, 0, err
	}
	return e, it.Ver, nil
}

// UpdateEpoch applies fn to the epoch record by CAS, re-reading and
// re-applying on a lost race. fn returns false to leave the row as it is
// (every cursor only moves forward, so fn decides from what it reads).
func (c *Chain) UpdateEpoch(ctx context.Context, epoch uint64, fn func(*meta.Epoch) bool) (meta.Epoch, error) {
	k := meta.EpochKey(c.Star, c.Class, epoch)
	for {
		e, ver, err := c.Epoch(ctx, epoch)
		if err != nil {
			return e, err
		}
		if !fn(&e) {
			return e, nil
		}
		_, err = c.Meta.Put(ctx, k.PK, k.SK, meta.Encode(e), meta.IfVer(ver))
		if err == nil {
			return e, nil
		}
		if !errors.Is(err, meta.ErrConditionFailed) {
			return e, fmt.Errorf("chain %s/%s: update epoch %d: %w", c.Star, c.Class, epoch, err)
		}
		if err := ctx.Err(); err != nil {
			return e, err
		}
	}
}

// ensureEpochRecord creates epoch's record from the head that minted it; a
// record already there must carry the same nonce.
func (c *Chain) ensureEpochRecord(ctx context.Context, h meta.Head) (meta.Epoch, error) {
	rec := meta.Epoch{Epoch: h.Epoch, Owner: h.Owner, Params: h.Params}
	k := meta.EpochKey(c.Star, c.Class, h.Epoch)
	_, err := c.Meta.Put(ctx, k.PK, k.SK, meta.Encode(rec), meta.IfAbsent())
	if err == nil {
		return rec, nil
	}
	if !errors.Is(err, meta.ErrConditionFailed) {
		return rec, fmt.Errorf("chain %s/%s: create epoch %d: %w", c.Star, c.Class, h.Epoch, err)
	}
	got, _, err := c.Epoch(ctx, h.Epoch)
	if err != nil {
		return got, err
	}
	if got.Params.Nonce != h.Params.Nonce {
		return got, fmt.Errorf("chain %s/%s: epoch %d record has nonce %s, head minted %s", c.Star, c.Class, h.Epoch, got.Params.Nonce, h.Params.Nonce)
	}
	return got, nil
}

// Mint opens the next epoch for this actor as the chain's writer. It is the
// CAS on the head that decides ownership (judgeMint): from no head (the
// first epoch), from the actor's own fence with its cut recorded
// (self-recovery), or from a settled epoch of an earlier incarnation (a
// restart after settlement). A later incarnation on the head, a foreign
// fence of this actor's epoch or a settle of it mean a successor took
// over: ErrDeposed. An earlier incarnation's open epoch must be settled
// first: ErrNotFenced.
func (c *Chain) Mint(ctx context.Context, p meta.EpochParams) (meta.Epoch, error) {
	if err := p.Validate(); err != nil {
		return meta.Epoch{}, err
	}
	if incarnationOf(c.Me, c.Star) == 0 {
		return meta.Epoch{}, fmt.Errorf("chain %s/%s: %s is not an incarnation of star %s and may not mint", c.Star, c.Class, c.Me, c.Star)
	}
	p.Nonce = hex.EncodeToString(func() []byte { n := c.nonce(); return n[:] }())
	for {
		h, ver, ok, err := c.Head(ctx)
		if err != nil {
			return meta.Epoch{}, err
		}
		next := meta.Head{Epoch: 1, State: meta.HeadOpen, Owner: c.Me, Params: p}
		switch v := judgeMint(h, ok, c.Star, c.Me); v {
		case vMintFirst:
		case vMintNext:
			if h.State == meta.HeadFencing {
				// Seal the fenced epoch's cut onto its record before the
				// head moves on: below the head, every epoch record has its
				// cut.
				if err := c.recordCutOnEpoch(ctx, h.Epoch, *h.Cut); err != nil {
					return meta.Epoch{}, err
				}
			}
			next.Epoch = h.Epoch + 1
		case vAdoptOpen:
			// Our own earlier mint whose reply was lost (the metastore
			// reported an unknown outcome): adopt it. An actor mints only
			// at start or after fencing, so an open epoch of ours that we
			// did not get back was never written.
			return c.ensureEpochRecord(ctx, h)
		case vNotFenced:
			return meta.Epoch{}, fmt.Errorf("chain %s/%s epoch %d (%s, owner %s, fencer %q): %w", c.Star, c.Class, h.Epoch, h.State, h.Owner, h.Fencer, ErrNotFenced)
		default:
			return meta.Epoch{}, fmt.Errorf("chain %s/%s epoch %d (%s, owner %s, fencer %q): %w", c.Star, c.Class, h.Epoch, h.State, h.Owner, h.Fencer, ErrDeposed)
		}
		won, err := c.casHead(ctx, next, ver)
		if err != nil {
			return meta.Epoch{}, err
		}
		if !won {
			// Someone moved the head between our read and our CAS: re-judge.
			if err := ctx.Err(); err != nil {
				return meta.Epoch{}, err
			}
			continue
		}
		{
			// On every mint, not only the first: the janitor deletes the
			// directory row of a decommissioned star's chain
			// (settle.CollectChains), and a restart of the id lists it again.
			dk := meta.ChainDirKey(c.Star, c.Class)
			if _, err := c.Meta.Put(ctx, dk.PK, dk.SK, nil, meta.Always()); err != nil {
				return meta.Epoch{}, fmt.Errorf("chain %s/%s: register in chain directory: %w", c.Star, c.Class, err)
			}
		}
		return c.ensureEpochRecord(ctx, next)
	}
}

func (c *Chain) recordCutOnEpoch(ctx context.Context, epoch, cut uint64) error {
	var conflict error
	_, err := c.UpdateEpoch(ctx, epoch, func(e *meta.Epoch) bool {
		if e.Cut != nil {
			if *e.Cut != cut {
				conflict = fmt.Errorf("chain %s/%s epoch %d: recorded cut %d, fence found %d", c.Star, c.Class, epoch, *e.Cut, cut)
			}
			return false
		}
		e.Cut = &cut
		return true
	})
	if err != nil {
		return err
	}
	return conflict
}
