package subs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/auth"
)

// When the driver passes over a subscription. A pass reads the tails of
// its links and decides on the cached row first: only a pass that would
// change the row reads it fresh and writes it (a conditional put, so any
// star may make any pass; the version fences them). Work is divided so
// that its cost does not grow with the number of stars:
//
//   - append: a write this star served (it leads the stream; other stars
//     forward theirs here) passes at once over the cached subscriptions
//     that link or match the name, whoever owns them. One that has a wake
//     in flight is marked busy instead: an append cannot change it until
//     the wake ends.
//   - busy (every subTick): a busy subscription whose wake ended is
//     passed; its cached row is read again at most every subFresh, since
//     the wake may end on another star (a callback there).
//   - timer (every subTick): the owner of a subscription passes when its
//     cached row says the clock brought a transition (a lease ran out, a
//     retry's backoff ended).
//   - audit (every Config.SubscriptionAudit): every star lists every row
//     (new, changed and deleted subscriptions reach its cache) and the
//     live stars; each subscription has one owner among them (rendezvous
//     hashing), which passes over it against its links' tails. The audit
//     finds what no nudge reported: an append through a star that did
//     not know the subscription yet, a nudge dropped under load, a star
//     killed between an ack and its pass. An audit runs beside the loop
//     (one at a time), so it holds up no append's pass.
//
// Each batch of passes runs at most maxPasses at once. A star that is not among the live stars (draining, its heartbeat
// stale) owns nothing; one that could not list them keeps its last view;
// with no view at all it owns everything (twice is safe, never is not).
const (
	// DefaultSubscriptionAudit is Config.SubscriptionAudit's default.
	DefaultSubscriptionAudit = 10 * time.Second
	// subTick is how often the timers and busy subscriptions are checked
	// (from the cache: no I/O unless a pass is due).
	subTick = time.Second
	// subFresh is how old a busy subscription's cached row may be before
	// the tick reads it again.
	subFresh = time.Second
	// maxPasses bounds the passes one batch of work (the appends since the
	// driver last looked, a tick, an audit) runs at once: a pass waits on
	// tails, perhaps on another star, and on the metastore.
	maxPasses = 8
	// maxRecent bounds the names this star remembers it saw appended, to
	// link them to a subscription created on another star meanwhile (its
	// row reaches this star's cache at the next audit); they are kept for
	// two audit periods.
	maxRecent = 4096
)

// Pass triggers and results (the passes metric's labels).
const (
	trigAppend = "append"
	trigBusy   = "busy"
	trigTimer  = "timer"
	trigAudit  = "audit"

	passUnchanged = "unchanged"
	passWritten   = "written"
	passFenced    = "fenced"
	passGone      = "gone"
	passError     = "error"
)

// Notify tells the driver a stream was appended to (or created, or
// deleted) through this star. It never blocks; past maxRecent names
// waiting, the audit finds the work.
func (m *Manager) Notify(name string) {
	m.mu.Lock()
	if len(m.appended) < maxRecent {
		m.appended[name] = struct{}{}
	}
	m.mu.Unlock()
	select {
	case m.nudged <- struct{}{}:
	default:
	}
}

func (m *Manager) run() {
	defer m.wg.Done()
	t := time.NewTicker(subTick)
	defer t.Stop()
	// Audits run beside the loop (one at a time), so appends and timers
	// are not held up by an audit's passes; they start on ticks, one
	// period apart.
	audited := make(chan struct{}, 1)
	audited <- struct{}{}
	startAudit := func() {
		select {
		case <-audited:
		default:
			return // the last one is still running
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer func() { audited <- struct{}{} }()
			m.audit()
		}()
	}
	last := time.Now()
	startAudit()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.nudged:
			m.onAppended()
		case now := <-t.C:
			if now.Sub(last) >= m.auditEvery-subTick/2 {
				last = now
				startAudit()
			}
			m.tick(now)
		}
	}
}

// passJob is one pass to make.
type passJob struct {
	row      subRow
	appended []string
	trigger  string
}

// passAll makes the passes, at most maxPasses at once, and returns when
// they are done.
func (m *Manager) passAll(jobs []passJob) {
	m.each(len(jobs), func(i int) { m.pass(jobs[i].row, jobs[i].appended, jobs[i].trigger) })
}

// each runs f(0), …, f(n-1), at most maxPasses at once, and returns when
// they are done (or, once the driver stops, after the ones started).
func (m *Manager) each(n int, f func(int)) {
	sem := make(chan struct{}, maxPasses)
	var wg sync.WaitGroup
	for i := range n {
		if m.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// onAppended passes over the cached subscriptions the names appended
// since the last call fall under. The driver's lock is held only to take
// the names and the candidate rows: an append's notify waits on it, so
// the pattern matching runs after it is released.
func (m *Manager) onAppended() {
	now := time.Now()
	type candidate struct {
		k   meta.Key
		row subRow
		rel string
	}
	var cands []candidate
	m.mu.Lock()
	names := m.appended
	m.appended = make(map[string]struct{}, len(names))
	if len(m.recent)+len(names) > maxRecent {
		m.pruneRecent(now)
	}
	for name := range names {
		if len(m.recent) < maxRecent {
			m.recent[name] = now
		}
		for root, keys := range m.byRoot {
			if !strings.HasPrefix(name, root) {
				continue
			}
			for k := range keys {
				c := m.cache[k]
				if rel, ok := c.row.relative(name); ok {
					cands = append(cands, candidate{k, c.row, rel})
				}
			}
		}
	}
	m.mu.Unlock()
	var jobs []passJob
	var busy []meta.Key
	for _, c := range cands {
		linked := c.row.link(c.rel) != nil
		switch {
		case !linked && !c.row.globs(c.rel):
		case linked && c.row.inFlight() && !c.row.leaseExpired(now):
			busy = append(busy, c.k)
		default:
			jobs = append(jobs, passJob{c.row, []string{c.rel}, trigAppend})
		}
	}
	if len(busy) > 0 {
		m.mu.Lock()
		for _, k := range busy {
			m.busy[k] = now
		}
		m.mu.Unlock()
	}
	m.passAll(jobs)
}

// tick passes over the busy subscriptions whose wake ended and the owned
// ones the clock made due, deciding from the cache.
func (m *Manager) tick(now time.Time) {
	var stale []meta.Key
	var jobs []passJob
	m.mu.Lock()
	for k, since := range m.busy {
		c, ok := m.cache[k]
		switch {
		case !ok || now.Sub(since) > 2*m.auditEvery:
			delete(m.busy, k) // the audit has passed over it since
		case !c.row.inFlight() || c.row.leaseExpired(now):
			delete(m.busy, k)
			jobs = append(jobs, passJob{c.row, nil, trigBusy})
		case now.Sub(c.at) >= subFresh:
			stale = append(stale, k)
		}
	}
	for k, c := range m.cache {
		if _, busy := m.busy[k]; busy || !c.owned || !c.row.due(now) {
			continue
		}
		if !c.row.inFlight() && m.retried[k].Equal(c.row.NotBefore) {
			continue // passed for this retry already: nothing was pending
		}
		if !c.row.inFlight() {
			m.retried[k] = c.row.NotBefore
		}
		jobs = append(jobs, passJob{c.row, nil, trigTimer})
	}
	m.mu.Unlock()
	m.passAll(jobs)
	// A busy row read a while ago: read it again (the wake may have ended
	// on another star); the next tick passes it if it did.
	m.each(len(stale), func(i int) {
		ctx, cancel := context.WithTimeout(m.ctx, passTimeout)
		defer cancel()
		s, err := m.read(ctx, stale[i])
		if err == nil {
			m.recache(stale[i], s)
		} else if errors.Is(err, errSubNotFound) {
			m.uncache(stale[i])
		}
	})
}

// audit reads every subscription row and the live stars, and passes over
// the subscriptions this star owns, and over any other with names
// appended here lately that it would link.
func (m *Manager) audit() {
	ctx, cancel := context.WithTimeout(m.ctx, passTimeout)
	rows, err := m.list(ctx)
	var stars []string
	var serr error
	if err == nil {
		stars, serr = m.cluster.LiveStars(ctx)
	}
	cancel()
	if err != nil {
		if m.ctx.Err() == nil {
			m.log.Warn("subscription audit: listing failed", "err", err)
		}
		return
	}
	now := time.Now()
	m.mu.Lock()
	m.pruneRecent(now)
	if serr == nil {
		m.stars = stars
	} else if m.ctx.Err() == nil {
		m.log.Warn("subscription audit: listing the live stars failed; keeping the last view", "err", serr)
	}
	m.cache = make(map[meta.Key]cachedSub, len(rows))
	m.byRoot = map[string]map[meta.Key]struct{}{}
	for _, s := range rows {
		k := subKey(m.basin, s.Root, s.ID)
		m.cacheLocked(k, cachedSub{row: s, at: now, owned: m.ownsLocked(k)})
	}
	var jobs []passJob
	owned := 0
	for _, c := range m.cache {
		recent := m.recentForLocked(&c.row)
		if c.owned {
			owned++
		}
		if c.owned || len(recent) > 0 {
			jobs = append(jobs, passJob{c.row, recent, trigAudit})
		}
	}
	m.mu.Unlock()
	m.owned.Set(float64(owned))
	m.passAll(jobs)
}

// ownsLocked reports whether this star owns the subscription (m.mu held).
func (m *Manager) ownsLocked(k meta.Key) bool {
	if len(m.stars) == 0 {
		return true
	}
	return ownerOf(m.stars, k) == m.cluster.StarID()
}

// ownerOf is the star that owns a subscription: the highest rendezvous
// score of (star, row key), so a star joining or leaving moves only the
// subscriptions it wins or held.
func ownerOf(stars []string, k meta.Key) string {
	var best string
	var top uint64
	for _, s := range stars {
		h := sha256.New()
		h.Write([]byte(s))
		h.Write([]byte{0})
		h.Write([]byte(k.SK))
		if score := binary.BigEndian.Uint64(h.Sum(nil)); best == "" || score > top {
			best, top = s, score
		}
	}
	return best
}

func (m *Manager) pruneRecent(now time.Time) {
	for k, t := range m.recent {
		if now.Sub(t) > 2*m.auditEvery {
			delete(m.recent, k)
		}
	}
}

// recentForLocked is the names appended lately, after s was created,
// that its pattern matches and it does not link yet (m.mu held).
func (m *Manager) recentForLocked(s *subRow) []string {
	var out []string
	for name, t := range m.recent {
		if rel, ok := s.relative(name); ok && t.After(s.Created) && s.link(rel) == nil && s.globs(rel) {
			out = append(out, rel)
		}
	}
	slices.Sort(out)
	return out
}

func (m *Manager) list(ctx context.Context) ([]subRow, error) {
	q := meta.Query{PK: "ds#" + m.basin, From: subSKPrefix, To: subSKPrefix + keyEnd, Limit: 256}
	var out []subRow
	for len(out) < maxSubsPerSweep {
		pg, err := m.meta.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, it := range pg.Items {
			var s subRow
			if err := json.Unmarshal(it.Val, &s); err != nil {
				m.log.Warn("undecodable subscription row", "sk", it.SK, "err", err)
				continue
			}
			out = append(out, s)
		}
		if pg.Next == "" {
			break
		}
		q.PageToken = pg.Next
	}
	return out, nil
}

// read is the subscription's row as stored now.
func (m *Manager) read(ctx context.Context, k meta.Key) (subRow, error) {
	it, err := m.meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return subRow{}, errSubNotFound
	}
	if err != nil {
		return subRow{}, &metaError{err}
	}
	var s subRow
	if err := json.Unmarshal(it.Val, &s); err != nil {
		return subRow{}, err
	}
	return s, nil
}

// relative is name relative to the subscription's root.
func (s *subRow) relative(name string) (string, bool) {
	rel, ok := strings.CutPrefix(name, s.Root)
	return rel, ok && rel != ""
}

// globs reports whether the pattern links rel. A pull-wake subscription
// never links its own wake stream: each wake event would wake it again.
// Only streams the creator may read are linked (a pattern's reach is
// checked at creation, but "a/**" matches "a" too).
func (s *subRow) globs(rel string) bool {
	return s.Config.Pattern != "" && rel != s.Config.WakeStream && globMatch(s.Config.Pattern, rel) && checkRelPath(rel) == nil &&
		s.Creator.allows(auth.Read, s.Root+rel)
}

// pass reads the tails of the cached row's links (and of the appended
// names) and decides on the cached row; only a change is decided again on
// the fresh row and written.
func (m *Manager) pass(cached subRow, appended []string, trigger string) {
	ctx, cancel := context.WithTimeout(m.ctx, passTimeout)
	defer cancel()
	paths := append(linkPaths(&cached), appended...)
	t, err := m.tails(ctx, cached.Root, paths)
	if err != nil {
		m.passed(trigger, passError, cached.ID, err)
		return
	}
	dry := cached.clone()
	if _, changed := dry.advance(time.Now(), "", appended, t); !changed {
		m.passed(trigger, passUnchanged, cached.ID, nil)
		return
	}
	var wk *wake
	wrote := false
	row, err := m.mutateWith(ctx, cached.Root, cached.ID, appended, &t, nil, func(s *subRow, t tails) (bool, error) {
		var changed bool
		wk, changed = s.advance(time.Now(), newWakeID(), appended, t)
		wrote = changed
		return changed, nil
	})
	switch {
	case errors.Is(err, errSubNotFound):
		m.passed(trigger, passGone, cached.ID, nil)
		return
	case err != nil:
		m.passed(trigger, passError, cached.ID, err)
		return
	case !wrote:
		m.recache(subKey(m.basin, row.Root, row.ID), row) // the cache was behind
		m.passed(trigger, passFenced, cached.ID, nil)
		return
	}
	m.passed(trigger, passWritten, cached.ID, nil)
	if wk != nil {
		m.dispatch(row, *wk)
	}
}

func (m *Manager) passed(trigger, result, id string, err error) {
	m.passes.WithLabelValues(trigger, result).Inc()
	if err != nil && m.ctx.Err() == nil {
		m.log.Warn("subscription pass failed", "subscription", id, "trigger", trigger, "err", err)
	}
}
