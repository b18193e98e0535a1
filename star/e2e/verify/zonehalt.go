package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// ZoneHalt halts the Express epochs of the stars while one Express zone
// is black-holed, the case a writer's own fence must decide without that
// zone (docs/write-path.md "Self-recovery"):
//
//  1. One Express bucket X goes down and hangs on every star (its
//     requests block until their context ends). With W=2 of K=3 the
//     stars keep acking on the other two.
//  2. A deadline halt: a second bucket Y gets the flight deadline + 1 s
//     of latency on every star for half the deadline, so every flight
//     cut meanwhile misses its deadline and halts its epoch.
//  3. A foreign occupant: once the stars recovered, the test process
//     writes poison straight into the object folder, in one live bucket
//     P, at the next slot keys of every Express epoch that is being
//     written (the head read from the metastore, the frontier listed from
//     P), while P answers the stars 20 ms late, so the writer's copy in
//     the other live bucket tends to land first: the halted slot then
//     holds one flight copy and one poison and only X could decide it.
//  4. X stays down Tail longer, then comes back.
//
// It asserts, beyond linearizability and read-back: both halts happened
// (the stars' starlog_epoch_halts_total rose) and each poisoned chain
// moved on to a new open epoch while X was down; no recovery overran its
// deadline or was deposed (starlog_epoch_recoveries_total); and, from
// the history (Check): on every Express stream, appends called after each
// halt were acknowledged while X was still down, and no append failed
// definitely (nor with a storage 503) from X's outage until shortly after
// it ended.
type ZoneHalt struct {
	// Express is the stars' Express bucket set (K ≥ 3).
	Express []string
	// Deadline is the stars' Express flight deadline.
	Deadline time.Duration
	// Lead is how long X is down before the deadline halt; Tail how long
	// it stays down after the foreign occupant's recovery window.
	Lead, Tail time.Duration
	// ReadTimeout is the clients' bound on a read (Workload.ReadTimeout):
	// reads that waited it out are counted apart.
	ReadTimeout time.Duration
	// DeadAfter is the stars' --dead-after: the fault starts once every
	// star's heartbeat is younger than a quarter of it, so a heartbeat
	// still late from an earlier fault (a metastore catching up) is not
	// blamed on the zone.
	DeadAfter time.Duration
	Rand      *rand.Rand
	mu        sync.Mutex
}

// Name implements Fault.
func (*ZoneHalt) Name() string { return "zone-halt" }

// zoneHaltRecover is how long a halted epoch is given to recover before
// the next step: its own fence waits at most OwnFenceWait (1 s) for the
// black-holed bucket, then it mints.
const zoneHaltRecover = 2500 * time.Millisecond

// zoneHaltPoisonSlots is how many slot keys ahead of an epoch's frontier
// the foreign occupant takes (the writer reaches the first ones at once).
const zoneHaltPoisonSlots = 64

// Inject implements Fault.
func (f *ZoneHalt) Inject(ctx context.Context, c *Cluster) (FaultEvent, error) {
	ev := FaultEvent{Fault: f.Name(), Star: -1}
	express := c.ExpressStreams()
	switch {
	case len(f.Express) < 3:
		ev.Failed, ev.Detail = true, fmt.Sprintf("needs 3 Express buckets, have %v", f.Express)
		return ev, nil
	case len(express) == 0:
		ev.Failed, ev.Detail = true, "no Express stream in the round"
		return ev, nil
	}
	if err := settledHeartbeats(ctx, c, f.DeadAfter/4, 15*time.Second); err != nil {
		ev.Failed, ev.Detail = true, err.Error()
		return ev, nil
	}
	f.mu.Lock()
	perm := f.Rand.Perm(len(f.Express))
	x, y := f.Express[perm[0]], f.Express[perm[1]]
	p := f.Express[perm[1+f.Rand.IntN(2)]] // the poisoned bucket: one of the live two
	f.mu.Unlock()
	t0 := time.Now()
	ev.Detail = fmt.Sprintf("%s black-holed on every star", x)
	procs := newProcs(c)

	yes, zero := true, int64(0)
	// Repair whatever happens (even when ctx ends): the read-back needs
	// the stores.
	repair := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return putEvery(rctx, c, nil)
	}
	fail := func(err error) (FaultEvent, error) {
		_ = repair()
		return ev, fmt.Errorf("inject %s: %w", ev.Detail, err)
	}
	// A violation that says the fault did not bite is only a note when a
	// star process went away meanwhile (presumed dead by a slow metastore,
	// say): what the fault should have hit was not there.
	var notBitten []string

	before := procs.scrape(ctx)
	if err := putEvery(ctx, c, &FaultsPatch{Buckets: map[string]*FaultPatch{x: {Down: &yes, Hang: &yes}}}); err != nil {
		return fail(err)
	}
	zoneDown := c.Now()
	sleepCtx(ctx, f.Lead)

	// The deadline halt: every flight cut while y is slow halts at its
	// deadline; y is fast again by then, so the recovery reads it.
	slowFor := f.Deadline / 2
	ms := (f.Deadline + time.Second).Milliseconds()
	if err := putEvery(ctx, c, &FaultsPatch{Buckets: map[string]*FaultPatch{y: {LatencyMS: &ms}}}); err != nil {
		return fail(err)
	}
	sleepCtx(ctx, slowFor)
	if err := putEvery(ctx, c, &FaultsPatch{Buckets: map[string]*FaultPatch{y: {LatencyMS: &zero}}}); err != nil {
		return fail(err)
	}
	haltedBy := c.Now() + f.Deadline
	ev.Detail += fmt.Sprintf("; deadline halt: %s +%dms for %v", y, ms, slowFor.Round(time.Millisecond))
	sleepCtx(ctx, f.Deadline+zoneHaltRecover)
	mid := procs.scrape(ctx)
	halts := procs.delta(before, mid, "starlog_epoch_halts_total", `class="express"`)
	ev.Detail += fmt.Sprintf(" (%g halts)", halts)
	if halts == 0 {
		notBitten = append(notBitten, fmt.Sprintf("zone-halt: no Express epoch halted while %s was %v slow with %s down", y, f.Deadline+time.Second, x))
	}

	// The foreign occupant.
	slow := int64(20)
	if err := putEvery(ctx, c, &FaultsPatch{Buckets: map[string]*FaultPatch{p: {LatencyMS: &slow}}}); err != nil {
		return fail(err)
	}
	poisons := poisonAhead(ctx, c, leaderStars(readLeaders(ctx, c, express)), p, zoneHaltPoisonSlots)
	if err := putEvery(ctx, c, &FaultsPatch{Buckets: map[string]*FaultPatch{p: {LatencyMS: &zero}}}); err != nil {
		return fail(err)
	}
	poisoned := c.Now()
	var parts []string
	won := 0
	for _, r := range poisons {
		parts = append(parts, r.String())
		won += r.won
		if r.err != nil {
			ev.Violations = append(ev.Violations, fmt.Sprintf("zone-halt: foreign occupant for %s: %v", r.star, r.err))
		}
	}
	ev.Detail += fmt.Sprintf("; foreign occupant in %s: %s", p, strings.Join(parts, ", "))
	if won == 0 {
		notBitten = append(notBitten, fmt.Sprintf("zone-halt: no foreign occupant landed ahead of the Express epochs of the streams' leaders (%s)", strings.Join(parts, ", ")))
	}
	sleepCtx(ctx, zoneHaltRecover)
	for _, r := range poisons {
		if r.won == 0 {
			continue
		}
		h, _, ok, err := chain.New(r.star, meta.Express, "verify", c.Meta, c.Objects).Head(ctx)
		switch {
		case err != nil:
			ev.Violations = append(ev.Violations, fmt.Sprintf("zone-halt: read %s's Express head: %v", r.star, err))
		case !ok || h.Epoch <= r.epoch || h.State != meta.HeadOpen:
			notBitten = append(notBitten, fmt.Sprintf("zone-halt: %s's Express chain did not recover from the foreign occupant in epoch %d within %v while %s was down: head %+v",
				r.star, r.epoch, zoneHaltRecover, x, h))
		}
	}
	after := procs.scrape(ctx)
	ev.Detail += fmt.Sprintf(" (%g halts)", procs.delta(mid, after, "starlog_epoch_halts_total", `class="express"`))
	for _, result := range []string{"late", "deposed"} {
		if d := procs.delta(before, after, "starlog_epoch_recoveries_total", `result="`+result+`"`); d > 0 {
			ev.Violations = append(ev.Violations, fmt.Sprintf("zone-halt: %g recoveries ended %s with one Express zone down", d, result))
		}
	}

	sleepCtx(ctx, f.Tail)
	stillDown := c.Now()
	if err := repair(); err != nil {
		return ev, fmt.Errorf("repair %s: %w", ev.Detail, err)
	}
	zoneUp := c.Now()
	ev.Detail += fmt.Sprintf("; %s down %v", x, (zoneUp - zoneDown).Round(time.Millisecond))
	gone := procs.gone()
	if len(gone) > 0 {
		ev.Detail += "; disturbed: " + strings.Join(gone, ", ")
		for _, n := range notBitten {
			ev.Detail += "; (" + n + ")"
		}
	} else {
		ev.Violations = append(ev.Violations, notBitten...)
	}
	ev.Recovered = time.Since(t0)

	// What the clients saw, judged once the round ended.
	grace := f.Deadline + time.Second
	disturbed := len(gone) > 0
	ev.Check = func(h *History, until time.Duration) (string, []string) {
		var bad []string
		acks := h.AckTimes()
		var counts []string
		for _, s := range express {
			n1 := countAcks(acks[s], haltedBy, stillDown)
			n2 := countAcks(acks[s], poisoned, stillDown)
			counts = append(counts, fmt.Sprintf("%s %d/%d", s, n1, n2))
			switch {
			case disturbed:
			case n1 == 0:
				bad = append(bad, fmt.Sprintf("zone-halt: %s: no append called after the deadline halt (%v) was acknowledged while %s was still down (until %v)",
					s, haltedBy.Round(time.Millisecond), x, stillDown.Round(time.Millisecond)))
			case n2 == 0:
				bad = append(bad, fmt.Sprintf("zone-halt: %s: no append called after the foreign occupant (%v) was acknowledged while %s was still down (until %v)",
					s, poisoned.Round(time.Millisecond), x, stillDown.Round(time.Millisecond)))
			}
		}
		definite, indefinite, refused, guarded, others, reads, slowReads := 0, 0, 0, 0, 0, 0, 0
		subjects := map[string]bool{}
		for _, s := range express {
			subjects[s] = true
		}
		var examples []string
		for _, fl := range h.Failures() {
			// From the zone's outage until shortly after it, short of
			// the next fault.
			if time.Duration(fl.Call) < zoneDown || time.Duration(fl.Call) > zoneUp+grace || time.Duration(fl.Return) >= until {
				continue
			}
			if fl.Kind != KindAppend {
				// Reads may fail; one that waited out its whole timeout
				// hung on the black-holed bucket.
				reads++
				if time.Duration(fl.Return-fl.Call) >= f.ReadTimeout-100*time.Millisecond {
					slowReads++
				}
				continue
			}
			switch zoneHaltFailure(fl, subjects, disturbed) {
			case zoneNotSubject:
				// Not one of the round's Express streams: a Standard one
				// (the zone holds none of its data) or a catalog stream,
				// which the re-create nemesis deletes and makes again
				// meanwhile (a new incarnation's first append may answer
				// 503 "led by another star" while its lease settles):
				// those refusals are the re-create's; the model judges
				// what they did.
				others++
			case zoneGuarded:
				// A conditional append the star would have rejected (412)
				// while its heartbeat was late (the metastore, not the
				// zone): it does not answer a rejection from memory then.
				guarded++
			case zoneRefused:
				// A star that had exited: asked directly, or through a
				// star whose forward to it was refused (the same refusal,
				// one hop on).
				refused++
			case zoneDefinite:
				definite++
				if definite <= 5 {
					bad = append(bad, fmt.Sprintf("zone-halt: %s: append %s [%v, %v] failed with one Express zone down: %s",
						fl.Stream, fl.Label, time.Duration(fl.Call).Round(time.Millisecond), time.Duration(fl.Return).Round(time.Millisecond), fl.Err))
				}
			default:
				indefinite++
				if len(examples) < 2 {
					examples = append(examples, fmt.Sprintf("%s after %v: %s", fl.Label, time.Duration(fl.Return-fl.Call).Round(time.Millisecond), fl.Err))
				}
			}
		}
		if definite > 5 {
			bad = append(bad, fmt.Sprintf("zone-halt: %d appends failed definitely in all", definite))
		}
		var worst time.Duration
		for _, s := range express {
			for _, a := range acks[s] {
				if time.Duration(a[1]) >= zoneDown && time.Duration(a[0]) <= zoneUp {
					worst = max(worst, time.Duration(a[1]-a[0]))
				}
			}
		}
		note := ""
		if len(examples) > 0 {
			note = " (indefinite, e.g. " + strings.Join(examples, "; ") + ")"
		}
		if disturbed {
			note += fmt.Sprintf(" (disturbed: %s; %d refused by an exited star)", strings.Join(gone, ", "), refused)
		}
		if guarded > 0 {
			note += fmt.Sprintf(" (%d rejections refused under the clock guard: a heartbeat was late)", guarded)
		}
		if others > 0 {
			note += fmt.Sprintf(" (%d failed appends to streams outside the round's Express set)", others)
		}
		return fmt.Sprintf("zone-halt at %v: acks called after the deadline halt / the foreign occupant and returned with %s down: %s; slowest Express ack in the window %v; failed appends in it: %d definite, %d indefinite; failed reads and check-tails: %d (%d timed out after %v)%s",
			zoneDown.Round(time.Millisecond), x, strings.Join(counts, ", "), worst.Round(time.Millisecond), definite, indefinite, reads, slowReads, f.ReadTimeout, note), bad
	}
	return ev, nil
}

// zoneFailure classes a failed append in the zone's window.
type zoneFailure int

const (
	zoneIndefinite zoneFailure = iota
	zoneNotSubject             // not one of the round's Express streams
	zoneGuarded                // a 412 the star would not answer from memory
	zoneRefused                // an exited star refused it (only when disturbed)
	zoneDefinite               // failed surely, or the store refused it: the zone showed
)

// zoneHaltFailure classes fl for the zone-halt check: subjects are the
// round's Express streams (the only ones whose copies the zone holds);
// disturbed says a star process went away during the fault. Pure.
func zoneHaltFailure(fl Failure, subjects map[string]bool, disturbed bool) zoneFailure {
	switch {
	case !subjects[fl.Stream]:
		return zoneNotSubject
	case ClockGuarded(fl.Err):
		return zoneGuarded
	case disturbed && (strings.Contains(fl.Err, "connection refused") || strings.Contains(fl.Err, "leader could not be reached")):
		return zoneRefused
	case fl.Definite || strings.Contains(fl.Err, "object store is not taking"):
		return zoneDefinite
	}
	return zoneIndefinite
}

// procs remembers which process of each star a fault began with, so
// counters are compared within one process only.
type procs struct {
	c      *Cluster
	starts []int
}

func newProcs(c *Cluster) *procs {
	p := &procs{c: c, starts: make([]int, len(c.Stars))}
	for i, s := range c.Stars {
		p.starts[i] = s.Starts()
	}
	return p
}

// scrape reads every star's /metrics; a star that does not answer gets
// nil.
func (p *procs) scrape(ctx context.Context) []Metrics {
	ms, _ := ScrapeAll(ctx, p.c)
	return ms
}

// delta sums the growth of a counter between two scrapes over the stars
// still in the process the fault began with.
func (p *procs) delta(a, b []Metrics, name string, labels ...string) float64 {
	var d float64
	for i, s := range p.c.Stars {
		if a[i] == nil || b[i] == nil || s.Exited() || s.Starts() != p.starts[i] {
			continue
		}
		d += b[i].Sum(name, labels...) - a[i].Sum(name, labels...)
	}
	return d
}

// gone names the stars whose process exited (or was replaced) since the
// fault began, with why when they said.
func (p *procs) gone() []string {
	var out []string
	for i, s := range p.c.Stars {
		if !s.Exited() && s.Starts() == p.starts[i] {
			continue
		}
		why := "exited"
		if s.SaidZombie() {
			why = "exited as a zombie (presumed dead or deposed)"
		}
		out = append(out, fmt.Sprintf("star %d %s", i, why))
	}
	return out
}

// countAcks counts the acks called at or after from and returned by to.
func countAcks(acks [][2]int64, from, to time.Duration) int {
	n := 0
	for _, a := range acks {
		if time.Duration(a[0]) >= from && time.Duration(a[1]) <= to {
			n++
		}
	}
	return n
}

// putEvery applies p to every running star's fault control (nil: clears
// every fault). A star that exited since is left to the supervisor.
func putEvery(ctx context.Context, c *Cluster, p *FaultsPatch) error {
	var errs []string
	for i, s := range c.Stars {
		var err error
		if p == nil {
			_, err = ClearFaults(ctx, s)
		} else {
			_, err = PutFaults(ctx, s, *p)
		}
		if err != nil && !s.Exited() {
			errs = append(errs, fmt.Sprintf("star %d: %v", i, err))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// poisonResult is what poisonAhead did to one star's Express chain.
type poisonResult struct {
	star       string
	skip       string // why the chain was left alone
	epoch      uint64
	from, upto uint64
	won        int
	err        error
}

func (r poisonResult) String() string {
	if r.skip != "" {
		return r.star + " " + r.skip
	}
	return fmt.Sprintf("%s epoch %d slots [%d,%d) %d won", r.star, r.epoch, r.from, r.upto, r.won)
}

// foreignNonce marks the checker's poison (no epoch has it: nonces are
// random 128-bit values).
var foreignNonce = format.Nonce{0xF0, 0x5E, 0x1C, 0x4E}

// poisonAhead writes a foreign occupant into bucket at the next n slot
// keys of the open Express epoch of each of stars (the leaders of the
// round's Express streams), straight through the test process's object
// store, in increasing slot order from the bucket's frontier, so the
// writer, a slot at a time, meets the first one it did not win. Slots
// below the frontier hold the writer's copies already (create-once), so
// no acknowledged slot is touched: a slot is acknowledged only at W
// copies, and with one zone down both live copies must stand.
func poisonAhead(ctx context.Context, c *Cluster, stars []string, bucket string, n int) []poisonResult {
	out := make([]poisonResult, len(stars))
	if c.Meta == nil || c.Objects == nil {
		for i, s := range stars {
			out[i] = poisonResult{star: s, skip: "skipped (no metastore or object store handle)"}
		}
		return out
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, s := range stars {
		wg.Go(func() { out[i] = poisonChain(pctx, c, s, bucket, n) })
	}
	wg.Wait()
	return out
}

// leaderStars are the distinct stars of a stream → leader map, sorted.
func leaderStars(leaders map[string]string) []string {
	var out []string
	for _, l := range leaders {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

func poisonChain(ctx context.Context, c *Cluster, star, bucket string, n int) poisonResult {
	r := poisonResult{star: star}
	h, _, ok, err := chain.New(star, meta.Express, "verify", c.Meta, c.Objects).Head(ctx)
	switch {
	case err != nil:
		r.err = err
		return r
	case !ok:
		r.skip = "never minted"
		return r
	case h.State != meta.HeadOpen:
		r.skip = fmt.Sprintf("epoch %d %s", h.Epoch, h.State)
		return r
	case !slices.Contains(h.Params.Buckets, bucket):
		r.skip = fmt.Sprintf("epoch %d not on %s", h.Epoch, bucket)
		return r
	}
	r.epoch = h.Epoch
	b := c.Objects.Bucket(bucket)
	dir := path.Dir(chain.SlotKey(star, meta.Express, h.Epoch, 0)) + "/"
	top, ok, err := frontier(ctx, b, dir)
	if err != nil {
		r.err = err
		return r
	}
	if ok {
		r.from = top + 1
	}
	r.upto = r.from + uint64(n)
	for slot := r.from; slot < r.upto; slot++ {
		_, err := b.PutIfAbsent(ctx, chain.SlotKey(star, meta.Express, h.Epoch, slot), format.EncodePoison(h.Epoch, slot, foreignNonce))
		switch {
		case err == nil:
			r.won++
		case errors.Is(err, objstore.ErrExists):
		default:
			r.err = fmt.Errorf("poison slot %d: %w", slot, err)
			return r
		}
	}
	return r
}

// frontier is the highest slot of an epoch (its key folder dir) that
// bucket holds.
func frontier(ctx context.Context, b objstore.Bucket, dir string) (uint64, bool, error) {
	var top uint64
	found := false
	for info, err := range b.List(ctx, dir) {
		if err != nil {
			return 0, false, fmt.Errorf("list %s: %w", dir, err)
		}
		s, err := strconv.ParseUint(path.Base(info.Key), 10, 64)
		if err != nil {
			continue
		}
		if !found || s > top {
			top, found = s, true
		}
	}
	return top, found, nil
}

// settledHeartbeats waits, at most wait, until every star is ready and its
// last heartbeat is younger than fresh.
func settledHeartbeats(ctx context.Context, c *Cluster, fresh, wait time.Duration) error {
	if fresh <= 0 {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		late := ""
		for _, s := range c.Stars {
			doc, ok, body := ReadHealth(ctx, s.Endpoint())
			if !ok || time.Duration(doc.HeartbeatAgeMS)*time.Millisecond >= fresh {
				late = fmt.Sprintf("star %s: ready %v, heartbeat %dms old (%s)", s.ID(), ok, doc.HeartbeatAgeMS, body)
				break
			}
		}
		if late == "" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("heartbeats not settled within %v: %s", wait, late)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}
