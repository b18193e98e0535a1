package subs

import (
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/durable/subs/signing"
)

// subRow is a subscription as stored: one metastore item (subKey), the
// config and the cursor state together, written with conditional puts,
// so every transition below is decided on the latest state and only one
// star wins it (the version is the fence between stars). The methods are
// pure: they take the time, the tails and fresh ids from the caller and
// only change the row; the driver does the I/O their results ask for.
type subRow struct {
	ID   string `json:"id"`
	Root string `json:"root"` // the stored name prefix its paths are relative to
	// Incarnation tells a re-created subscription from a deleted one of
	// the same id: a token of the old one never matches.
	Incarnation string `json:"incarnation"`
	// Base is the client-visible URL of the root ("…/ds/v1/stream/"),
	// from the PUT that created it: callback URLs are built on it.
	Base    string    `json:"base"`
	Config  subConfig `json:"config"`
	Hash    string    `json:"hash"`
	Created time.Time `json:"created"`
	Links   []subLink `json:"links,omitempty"` // sorted by path
	// Creator is the token the subscription acts as (scope.go); nil
	// in a row written before subscriptions kept it.
	Creator *subCreator `json:"creator,omitempty"`

	// The wake in flight, if WakeID is set: Snapshot is each link's tail
	// when it was issued (what `done` acks).
	Generation uint64            `json:"generation"`
	WakeID     string            `json:"wake_id,omitempty"`
	Snapshot   map[string]uint64 `json:"snapshot,omitempty"`
	Holder     string            `json:"holder,omitempty"`      // pull-wake worker
	LeaseUntil time.Time         `json:"lease_until,omitzero"`  // zero: no lease
	Failed     bool              `json:"failed,omitempty"`      // a webhook retry is scheduled
	Retries    int               `json:"retries,omitempty"`     // failed deliveries in a row
	NotBefore  time.Time         `json:"next_attempt,omitzero"` // no wake before this (retry backoff)

	// HolderStreams is the stream set of the holder's token: its acks
	// name only these (authorizeAcks).
	HolderStreams *auth.ResourceSet `json:"holder_streams,omitempty"`
	// HolderToken and HolderCredential name the access token that claimed
	// the wake (none for the admin's or an open star's claim): every ack
	// checks it still stands (holderStands), so a revoked or expired
	// token's worker can neither move a cursor nor extend its lease.
	HolderToken      string `json:"holder_token,omitempty"`
	HolderCredential string `json:"holder_credential,omitempty"`
}

// subLink is one linked stream: its cursor and why it is linked.
type subLink struct {
	Path     string `json:"path"`
	Explicit bool   `json:"explicit,omitempty"`
	Glob     bool   `json:"glob,omitempty"`
	// Acked is the offset (a seq: records below it are processed) the
	// subscription acknowledged.
	Acked uint64 `json:"acked"`
}

func (l *subLink) linkType() string {
	if l.Explicit {
		return "explicit"
	}
	return "glob"
}

// tails maps a root-relative path to its stream's Durable Streams tail
// (0 for a stream that does not exist); present reports which exist.
type tails struct {
	at      map[string]uint64
	present map[string]bool
}

func (t tails) of(path string) uint64 { return t.at[path] }

// cover reports whether t holds every path (present or not).
func (t tails) cover(paths []string) bool {
	for _, p := range paths {
		if _, ok := t.present[p]; !ok {
			return false
		}
	}
	return true
}

func (s *subRow) link(path string) *subLink {
	i, ok := slices.BinarySearchFunc(s.Links, path, func(l subLink, p string) int { return strings.Compare(l.Path, p) })
	if !ok {
		return nil
	}
	return &s.Links[i]
}

// addLink links path (or marks an existing link explicit or glob too); a
// new link starts at acked. It reports false when the row is full.
func (s *subRow) addLink(path string, explicit bool, acked uint64) bool {
	i, ok := slices.BinarySearchFunc(s.Links, path, func(l subLink, p string) int { return strings.Compare(l.Path, p) })
	if !ok {
		if len(s.Links) >= maxSubLinks {
			return false
		}
		s.Links = slices.Insert(s.Links, i, subLink{Path: path, Acked: acked})
	}
	if explicit {
		s.Links[i].Explicit = true
	} else {
		s.Links[i].Glob = true
	}
	return true
}

// removeExplicit drops the explicit link of path; a glob link stays while
// the pattern matches.
func (s *subRow) removeExplicit(path string) {
	l := s.link(path)
	if l == nil {
		return
	}
	l.Explicit = false
	if !l.Glob || s.Config.Pattern == "" || !globMatch(s.Config.Pattern, path) {
		s.Links = slices.DeleteFunc(s.Links, func(x subLink) bool { return x.Path == path })
	}
}

// dropGone unlinks glob-only links whose stream no longer exists (it was
// deleted); explicit links stay, at their cursor.
func (s *subRow) dropGone(t tails) bool {
	n := len(s.Links)
	s.Links = slices.DeleteFunc(s.Links, func(l subLink) bool { return !l.Explicit && !t.present[l.Path] })
	return len(s.Links) != n
}

func (s *subRow) pending(t tails) bool {
	for i := range s.Links {
		if t.of(s.Links[i].Path) > s.Links[i].Acked {
			return true
		}
	}
	return false
}

func (s *subRow) firstPending(t tails) string {
	for i := range s.Links {
		if t.of(s.Links[i].Path) > s.Links[i].Acked {
			return s.Links[i].Path
		}
	}
	return ""
}

// clone is a deep copy (a pass decides on a copy of the cached row).
func (s *subRow) clone() subRow {
	c := *s
	c.Links = slices.Clone(s.Links)
	c.Snapshot = maps.Clone(s.Snapshot)
	return c
}

// advance is a pass over the row: the appended names the pattern matches
// are linked (at the start: the append that revealed them is pending),
// then step. changed says the row must be written.
func (s *subRow) advance(now time.Time, wakeID string, appended []string, t tails) (w *wake, changed bool) {
	for _, rel := range appended {
		if s.link(rel) == nil && s.globs(rel) && t.present[rel] {
			changed = s.addLink(rel, false, 0) || changed
		}
	}
	w, c := s.step(now, wakeID, t)
	return w, changed || c
}

// due reports a transition the clock brings (no tails needed to know
// it): a lease that ran out, or a webhook retry whose backoff ended.
func (s *subRow) due(now time.Time) bool {
	return s.leaseExpired(now) || !s.inFlight() && s.Failed && !now.Before(s.NotBefore)
}

// inFlight reports a wake issued and not yet finished.
func (s *subRow) inFlight() bool { return s.WakeID != "" }

// leaseExpired reports a lease that ran out: the wake (and its holder)
// is withdrawn, so pending work wakes again (protocol §7.3).
func (s *subRow) leaseExpired(now time.Time) bool {
	return s.inFlight() && !s.LeaseUntil.IsZero() && !now.Before(s.LeaseUntil)
}

// finishWake ends the wake in flight: no holder, no lease, no token.
func (s *subRow) finishWake() {
	s.WakeID, s.Holder, s.HolderStreams, s.Snapshot, s.LeaseUntil = "", "", nil, nil, time.Time{}
	s.HolderToken, s.HolderCredential = "", ""
}

// wake is what a transition asks the driver to do once its row is
// written: deliver a webhook or append a wake event, for this generation.
type wake struct {
	Type       string
	Generation uint64
	WakeID     string
	Stream     string // the pending stream that triggered it
}

// startWake issues a wake with a fresh generation (protocol §7): the
// snapshot holds every link's tail. A webhook wake holds the lease from
// now; a pull-wake one waits unleased for a claim.
func (s *subRow) startWake(now time.Time, wakeID string, t tails) wake {
	s.Generation++
	s.WakeID = wakeID
	s.Holder = ""
	s.Snapshot = make(map[string]uint64, len(s.Links))
	for i := range s.Links {
		s.Snapshot[s.Links[i].Path] = t.of(s.Links[i].Path)
	}
	s.LeaseUntil = time.Time{}
	if s.Config.Type == subWebhook {
		s.LeaseUntil = now.Add(s.Config.leaseTTL())
	}
	return wake{Type: s.Config.Type, Generation: s.Generation, WakeID: wakeID, Stream: s.firstPending(t)}
}

// step is a pass of the dispatcher over the row: a lease that ran out is
// withdrawn, and an idle subscription with pending work (and no retry
// backoff still running) is woken. changed says the row must be written.
func (s *subRow) step(now time.Time, wakeID string, t tails) (w *wake, changed bool) {
	if s.dropGone(t) {
		changed = true
	}
	if s.leaseExpired(now) {
		s.finishWake()
		changed = true
	}
	if s.inFlight() || !s.pending(t) || now.Before(s.NotBefore) {
		return nil, changed
	}
	wk := s.startWake(now, wakeID, t)
	return &wk, true
}

// checkWake is the fence (protocol §7.3): a callback, ack or release
// counts only for the current generation and wake, with a token minted
// for them.
func (s *subRow) checkWake(tok signing.WakeToken, generation uint64, wakeID string) *subError {
	if tok.Incarnation != s.Incarnation {
		return errTokenBad
	}
	if !s.inFlight() || tok.Generation != s.Generation || generation != s.Generation ||
		wakeID != s.WakeID || tok.WakeID != s.WakeID {
		return errFenced
	}
	return nil
}

// ackReq is one ack of a callback or an ack request.
type ackReq struct {
	Stream string `json:"stream"`
	Path   string `json:"path"`
	Offset string `json:"offset"`
}

// applyAcks moves cursors forward: every ack must name a linked stream
// and an offset between its cursor and its tail, or none applies.
func (s *subRow) applyAcks(acks []ackReq, t tails) *subError {
	type move struct {
		l  *subLink
		at uint64
	}
	var moves []move
	for _, a := range acks {
		p := normPath(a.Stream)
		if p == "" {
			p = normPath(a.Path)
		}
		l := s.link(p)
		if l == nil {
			return &subError{Status: http.StatusConflict, Code: codeInvalidOffset, Message: "an ack names a stream the subscription does not link: " + p}
		}
		at, ok := offsets.Parse(a.Offset)
		if !ok {
			return &subError{Status: http.StatusConflict, Code: codeInvalidOffset, Message: "an ack offset must be an offset this server minted"}
		}
		if at < l.Acked {
			return &subError{Status: http.StatusConflict, Code: codeInvalidOffset, Message: "an ack offset is behind the acked cursor of " + p}
		}
		if at > t.of(p) {
			return &subError{Status: http.StatusConflict, Code: codeInvalidOffset, Message: "an ack offset is past the tail of " + p}
		}
		moves = append(moves, move{l, at})
	}
	for _, m := range moves {
		m.l.Acked = m.at
	}
	return nil
}

// ackSnapshot acks the tails of the wake's snapshot (a webhook's
// synchronous {"done": true}).
func (s *subRow) ackSnapshot() {
	for p, at := range s.Snapshot {
		if l := s.link(p); l != nil && at > l.Acked {
			l.Acked = at
		}
	}
}

// done finishes the wake after acks with done: true (or a release) and
// issues the next one at once if work is still pending.
func (s *subRow) done(now time.Time, wakeID string, t tails) *wake {
	s.finishWake()
	if !s.pending(t) || now.Before(s.NotBefore) {
		return nil
	}
	w := s.startWake(now, wakeID, t)
	return &w
}

// claim gives a pull-wake subscription's wake to worker (protocol §7.2),
// issuing one first if none is in flight.
func (s *subRow) claim(now time.Time, worker, wakeID string, t tails) *subError {
	if s.Config.Type != subPullWake {
		return invalidReq("the subscription is not pull-wake")
	}
	if s.leaseExpired(now) {
		s.finishWake()
	}
	if s.Holder != "" {
		return &subError{Status: http.StatusConflict, Code: codeClaimed, Message: "another worker holds the lease",
			Holder: s.Holder, Generation: s.Generation}
	}
	if !s.pending(t) {
		return &subError{Status: http.StatusConflict, Code: codeNoPending, Message: "the subscription has no pending work"}
	}
	if !s.inFlight() {
		s.startWake(now, wakeID, t)
	}
	s.Holder = worker
	s.LeaseUntil = now.Add(s.Config.leaseTTL())
	return nil
}

// deliveryFailed withdraws a webhook wake whose delivery failed and
// schedules the next one after an exponential backoff (1 s doubling to
// 60 s, ±20 % jitter; jitter in [0, 1) from the caller).
func (s *subRow) deliveryFailed(now time.Time, jitter float64) {
	s.finishWake()
	s.Retries++
	s.Failed = true
	s.NotBefore = now.Add(retryBackoff(s.Retries, jitter))
}

func (s *subRow) deliveryOK() { s.Failed, s.Retries, s.NotBefore = false, 0, time.Time{} }

// Webhook retry backoff (protocol §7.1).
const (
	retryBase = time.Second
	retryCap  = 60 * time.Second
)

func retryBackoff(n int, jitter float64) time.Duration {
	d := retryCap
	if n <= 6 { // 2^6 s is past the cap
		d = min(retryBase<<max(n-1, 0), retryCap)
	}
	f := 1 + 0.2*(2*jitter-1)
	return time.Duration(math.Round(float64(d) * f))
}
