package chainsim

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// checker holds the invariants of docs/design.md §7 against the sim's own bytes
// and rows, never against what the chain code believes. It runs on the
// scheduler goroutine after every step, on what the step changed.
type checker struct {
	s      *Sim
	epochs map[uint64]*epochView
	head   *meta.Head
	// maxMinter is the highest incarnation that minted so far.
	maxMinter uint64
	// acked is every acknowledged record: stream → seq → record digest.
	acked map[string]map[uint64]uint64
	// archived are the records the (modelled) settle moved out of slots
	// before the trim deleted them: slot → "stream#seq" → digest.
	archived     map[slotID]map[string]uint64
	checks       int
	flightsAcked int
	// stats count what the run did (mints, cuts, settlements, trims…).
	stats map[string]int
}

type slotID struct{ epoch, slot uint64 }

// epochView is what the checker knows of one epoch.
type epochView struct {
	epoch  uint64
	owner  string
	nonce  format.Nonce
	known  bool // params seen on the head or the record
	window int
	cut    *uint64 // the recorded cut, once seen
	// ownCut: the epoch's writer recorded the cut (chain.FenceOwn). It may
	// cut at a slot it never released without deciding it in the bytes;
	// the garbage probe kills it at settlement.
	ownCut bool
	reaped bool // the trim reaped the garbage window
	// cursors of the record, as last seen
	checkpoint, rewritten, trimmed uint64
	settled                        bool
	fate                           map[uint64]chain.Fate // the decided fate per slot (from landed bytes)
	everCommitted                  map[uint64]bool
	maxSlot                        uint64
	acks                           []ackRecord
	nextAck                        map[string]uint64 // per incarnation, the slot its next ack must release
}

type ackRecord struct {
	inc    string
	slot   uint64
	stream string
	seq    uint64
	digest uint64
}

func newChecker(s *Sim) *checker {
	return &checker{s: s, epochs: map[uint64]*epochView{}, acked: map[string]map[uint64]uint64{}, archived: map[slotID]map[string]uint64{}, stats: map[string]int{}}
}

func (c *checker) fail(inv, format string, args ...any) {
	c.s.fail("safety", inv, fmt.Sprintf(format, args...))
}

func (c *checker) epoch(e uint64) *epochView {
	ev := c.epochs[e]
	if ev == nil {
		ev = &epochView{epoch: e, fate: map[uint64]chain.Fate{}, everCommitted: map[uint64]bool{}, nextAck: map[string]uint64{}}
		c.epochs[e] = ev
	}
	return ev
}

func (c *checker) sortedEpochs() []*epochView {
	return slices.SortedFunc(maps.Values(c.epochs), func(a, b *epochView) int { return cmp.Compare(a.epoch, b.epoch) })
}

func recordDigest(r format.Record) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/", r.SeqNum, r.Timestamp)
	h.Write(r.Body)
	return h.Sum64()
}

// afterStep checks what the last step changed: rows first (a cut or a
// settlement changes what the bytes must show), then slots.
func (c *checker) afterStep() {
	rows := slices.SortedFunc(maps.Keys(c.s.meta.Dirty), func(a, b meta.Key) int {
		return cmp.Or(strings.Compare(a.PK, b.PK), strings.Compare(a.SK, b.SK))
	})
	clear(c.s.meta.Dirty)
	streams := map[string]bool{}
	for _, k := range rows {
		switch {
		case k == meta.HeadKey(chainStar, chainClass):
			c.onHead()
		case k.PK == meta.ChainPK(chainStar, chainClass) && strings.HasPrefix(k.SK, "e#"):
			c.onEpoch(k)
		case strings.HasPrefix(k.PK, "stream#") && strings.HasPrefix(k.SK, meta.RefPrefix):
			streams[strings.TrimPrefix(k.PK, "stream#")] = true
		}
	}
	for _, st := range slices.Sorted(maps.Keys(streams)) {
		c.checkDense(st)
	}
	for _, d := range c.s.objs.deleted {
		if d.by.role == roleTrimmer {
			c.stats["copies-trimmed"]++
		} else {
			c.stats["copies-reaped"]++
		}
	}
	keys := slices.Sorted(maps.Keys(c.s.objs.dirty))
	clear(c.s.objs.dirty)
	for _, key := range keys {
		if e, s, ok := parseSlotKey(key); ok {
			c.onSlot(c.epoch(e), s, key)
		}
	}
	c.s.objs.deleted = nil
}

// onHead: mint order (I8), the cut on the head (I3), who is deposed.
func (c *checker) onHead() {
	it, ok := c.s.meta.Lookup(meta.HeadKey(chainStar, chainClass).PK, "head")
	if !ok {
		if c.head != nil {
			c.fail("head-permanent", "the chain head was deleted")
		}
		return
	}
	var h meta.Head
	if err := meta.Decode(it.Val, &h); err != nil {
		c.fail("rows-decode", "head: %v", err)
		return
	}
	c.checks++
	prev := c.head
	switch {
	case prev == nil && h.Epoch != 1:
		c.fail("mint-order", "the first head names epoch %d", h.Epoch)
	case prev != nil && h.Epoch < prev.Epoch:
		c.fail("mint-order", "the head went back from epoch %d to %d", prev.Epoch, h.Epoch)
	case prev != nil && h.Epoch > prev.Epoch+1:
		c.fail("mint-order", "the head jumped from epoch %d to %d", prev.Epoch, h.Epoch)
	case prev != nil && h.Epoch == prev.Epoch && (h.Owner != prev.Owner || h.Params.Nonce != prev.Params.Nonce):
		c.fail("mint-order", "epoch %d changed owner %s→%s or nonce on the head", h.Epoch, prev.Owner, h.Owner)
	}
	if prev == nil || h.Epoch > prev.Epoch {
		c.stats["epochs-minted"]++
		n, err := chain.ParseIncarnation(h.Owner, chainStar)
		c.checks++
		switch {
		case err != nil:
			c.fail("mint-order", "epoch %d minted by %q: %v", h.Epoch, h.Owner, err)
		case n < c.maxMinter:
			c.fail("mint-order", "incarnation %d minted epoch %d after incarnation %d minted", n, h.Epoch, c.maxMinter)
		}
		c.maxMinter = max(c.maxMinter, n)
		for _, a := range c.s.actors {
			if a.role == roleWriter && a.id == h.Owner {
				a.epoch = h.Epoch
			}
		}
	}
	c.head = &h
	ev := c.epoch(h.Epoch)
	c.learn(ev, h.Owner, h.Params)
	if h.Cut != nil {
		if ev.cut == nil && h.Fencer == h.Owner {
			ev.ownCut = true
		}
		c.onCut(ev, *h.Cut, "head")
	}
	if h.State == meta.HeadSettled && h.Cut == nil {
		c.fail("cut-recorded", "head epoch %d settled without a cut", h.Epoch)
	}
	// A writer is deposed once another incarnation minted past its epoch,
	// or another actor fenced it: from then on it must stop (I12).
	for _, a := range c.s.actors {
		if a.role != roleWriter || a.epoch == 0 || a.deposedAt >= 0 {
			continue
		}
		if (h.Epoch > a.epoch && h.Owner != a.id) || (h.Epoch == a.epoch && h.Fencer != "" && h.Fencer != a.id) {
			a.deposedAt = a.headReads
			c.s.trace.add(c.s, fmt.Sprintf("check: %s deposed (head e%d %s owner %s fencer %s)", a.name, h.Epoch, h.State, h.Owner, h.Fencer))
		}
	}
}

// deposedRead is called when a writer was served a head read: a deposed
// writer that keeps reading the head is retrying forever.
func (c *checker) deposedRead(a *actor) {
	if a.role != roleWriter || a.deposedAt < 0 {
		return
	}
	c.checks++
	if a.headReads-a.deposedAt > deposedReads {
		c.s.fail("liveness", "deposed-stops", fmt.Sprintf("%s (%s) was deposed but read the head %d more times: it retries forever instead of stopping",
			a.name, a.id, a.headReads-a.deposedAt))
	}
}

func (c *checker) learn(ev *epochView, owner string, p meta.EpochParams) {
	n, err := chain.ParseNonce(p.Nonce)
	if err != nil {
		c.fail("rows-decode", "epoch %d nonce: %v", ev.epoch, err)
		return
	}
	c.checks++
	if ev.known && (ev.nonce != n || ev.owner != owner) {
		c.fail("epoch-params", "epoch %d: owner %s nonce %x on one row, %s %x on another", ev.epoch, ev.owner, ev.nonce, owner, n)
		return
	}
	ev.known, ev.owner, ev.nonce, ev.window = true, owner, n, p.Window
}

// onEpoch: the record's cut (I3), its cursors only move forward, and a
// settlement triggers the no-ack-disowned check (I9).
func (c *checker) onEpoch(k meta.Key) {
	it, ok := c.s.meta.Lookup(k.PK, k.SK)
	if !ok {
		c.fail("epoch-permanent", "epoch record %s was deleted", k.SK)
		return
	}
	var e meta.Epoch
	if err := meta.Decode(it.Val, &e); err != nil {
		c.fail("rows-decode", "%s: %v", k.SK, err)
		return
	}
	ev := c.epoch(e.Epoch)
	c.learn(ev, e.Owner, e.Params)
	if e.Cut != nil {
		c.onCut(ev, *e.Cut, "record")
	}
	c.checks++
	switch {
	case e.Checkpoint < ev.checkpoint || e.Rewritten < ev.rewritten || e.Trimmed < ev.trimmed:
		c.fail("cursors-forward", "epoch %d cursors went back: checkpoint %d→%d rewritten %d→%d trimmed %d→%d",
			e.Epoch, ev.checkpoint, e.Checkpoint, ev.rewritten, e.Rewritten, ev.trimmed, e.Trimmed)
	case e.Cut != nil && e.Checkpoint > *e.Cut:
		c.fail("cursors-forward", "epoch %d checkpoint %d past its cut %d", e.Epoch, e.Checkpoint, *e.Cut)
	case e.Rewritten > e.Checkpoint || e.Trimmed > e.Rewritten:
		c.fail("cursors-forward", "epoch %d: trimmed %d ≤ rewritten %d ≤ checkpoint %d does not hold", e.Epoch, e.Trimmed, e.Rewritten, e.Checkpoint)
	case ev.settled && !e.Settled:
		c.fail("settled-permanent", "epoch %d became unsettled", e.Epoch)
	}
	ev.checkpoint, ev.rewritten, ev.trimmed = e.Checkpoint, e.Rewritten, e.Trimmed
	if e.Settled && !ev.settled {
		ev.settled = true
		c.stats["epochs-settled"]++
		c.onSettled(ev)
	}
	if e.Reaped && !ev.reaped {
		ev.reaped = true
		c.stats["epochs-reaped"]++
		c.onReaped(ev)
	}
}

// onCut: a recorded cut never changes, every slot below it is committed,
// the cut is dead, and every ack of the epoch is below it (I3, I4).
func (c *checker) onCut(ev *epochView, cut uint64, where string) {
	c.checks++
	if ev.cut != nil {
		if *ev.cut != cut {
			c.fail("cut-permanent", "epoch %d: the %s records cut %d, %d was recorded before", ev.epoch, where, cut, *ev.cut)
		}
		return
	}
	ev.cut = &cut
	c.stats["cuts-recorded"]++
	c.s.trace.add(c.s, fmt.Sprintf("check: e%d cut %d recorded (%s)", ev.epoch, cut, where))
	for s := uint64(0); s <= cut; s++ {
		c.slotAgainstCut(ev, s, c.fateOf(ev, s))
	}
	for _, a := range ev.acks {
		c.checks++
		if a.slot >= cut {
			c.fail("ack-below-cut", "epoch %d cut %d recorded at or below slot %d that %s acknowledged (%s seq %d)", ev.epoch, cut, a.slot, a.inc, a.stream, a.seq)
			return
		}
	}
}

// slotAgainstCut: below the cut committed (or trimmed after settlement),
// the cut itself dead.
func (c *checker) slotAgainstCut(ev *epochView, s uint64, f chain.Fate) {
	cut := *ev.cut
	c.checks++
	switch {
	case s < cut && f != chain.Committed && !(ev.everCommitted[s] && ev.settled && s < ev.rewritten):
		c.fail("committed-below-cut", "epoch %d slot %d below the cut %d is %v in the bytes (%s)", ev.epoch, s, cut, f, c.describe(ev, s))
	case s == cut && f != chain.Dead && !ev.ownCut:
		c.fail("cut-dead", "epoch %d: the cut %d is %v in the bytes, not dead (%s)", ev.epoch, s, f, c.describe(ev, s))
	}
}

// fateOf reads a slot's fate from what the writes landed (a fault that
// damaged a copy at rest does not change what was written).
func (c *checker) fateOf(ev *epochView, s uint64) chain.Fate {
	flights, poisons := c.landed(ev, s)
	k, w := c.s.sw.K, c.s.sw.W
	switch {
	case flights >= w && poisons >= k-w+1:
		c.fail("committed-xor-dead", "epoch %d slot %d holds %d flight copies and %d poisons", ev.epoch, s, flights, poisons)
		return chain.Undecided
	case flights >= w:
		return chain.Committed
	case poisons >= k-w+1:
		return chain.Dead
	}
	return chain.Undecided
}

func (c *checker) landed(ev *epochView, s uint64) (flights, poisons int) {
	key := chain.SlotKey(chainStar, chainClass, ev.epoch, s)
	for b := range c.s.objs.buckets {
		obj := c.s.objs.buckets[b][key]
		if obj == nil {
			continue
		}
		switch classify(obj.orig, ev.epoch, s, ev.nonce) {
		case occFlight:
			flights++
		case occPoison, occOther:
			poisons++
		case occUnreadable:
			c.fail("landed-valid", "%s/%s landed unreadable bytes", c.s.objs.names[b], key)
		}
	}
	return flights, poisons
}

// describe is a slot's buckets for a failure message: landed/now.
func (c *checker) describe(ev *epochView, s uint64) string {
	key := chain.SlotKey(chainStar, chainClass, ev.epoch, s)
	var parts []string
	names := [...]string{"absent", "flight", "poison", "unreadable", "other"}
	for b := range c.s.objs.buckets {
		obj := c.s.objs.buckets[b][key]
		if obj == nil {
			parts = append(parts, c.s.objs.names[b]+"=absent")
			continue
		}
		o, n := classify(obj.orig, ev.epoch, s, ev.nonce), classify(obj.data, ev.epoch, s, ev.nonce)
		p := c.s.objs.names[b] + "=" + names[o]
		if n != o {
			p += "→" + names[n]
		}
		if obj.damage != "" {
			p += "(" + obj.damage + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

// onSlot: committed xor dead, forever (I1, I2); against the cut (I3).
func (c *checker) onSlot(ev *epochView, s uint64, key string) {
	if !ev.known {
		return
	}
	ev.maxSlot = max(ev.maxSlot, s)
	f := c.fateOf(ev, s)
	prev := ev.fate[s]
	c.checks++
	if f == chain.Committed {
		ev.everCommitted[s] = true
	}
	// At and above the cut is garbage: the probe reaps it (the cut slot
	// too, which a writer's own fence may cut without deciding).
	garbage := ev.cut != nil && s >= *ev.cut
	switch {
	case prev == chain.Committed && f != chain.Committed && !garbage && !c.trimmed(ev, s, key):
		c.fail("committed-permanent", "epoch %d slot %d was committed and is now %v (%s)", ev.epoch, s, f, c.describe(ev, s))
	case prev == chain.Dead && f != chain.Dead:
		c.fail("dead-permanent", "epoch %d slot %d was dead and is now %v (%s)", ev.epoch, s, f, c.describe(ev, s))
	}
	ev.fate[s] = f
	if ev.cut != nil && s <= *ev.cut {
		c.slotAgainstCut(ev, s, f)
	}
}

// trimmed: every copy of the slot deleted this step was deleted by the
// auditor, below rewritten, after settlement.
func (c *checker) trimmed(ev *epochView, s uint64, key string) bool {
	any := false
	for _, d := range c.s.objs.deleted {
		if d.key != key {
			continue
		}
		any = true
		if d.by.role != roleTrimmer || !ev.settled || s >= ev.rewritten {
			return false
		}
	}
	return any
}

// ack checks one release (I4–I7) and records its records.
func (c *checker) ack(a *actor, ack Ack) {
	ev := c.epoch(ack.Epoch)
	c.flightsAcked++
	c.checks += 4
	if want := ev.nextAck[a.id]; ack.Slot != want {
		c.fail("ack-order", "%s acknowledged epoch %d slot %d, its next release was slot %d", a.name, ack.Epoch, ack.Slot, want)
	}
	ev.nextAck[a.id] = ack.Slot + 1
	if f := c.fateOf(ev, ack.Slot); f != chain.Committed && !ev.everCommitted[ack.Slot] {
		c.fail("ack-committed", "%s acknowledged epoch %d slot %d, which is %v in the bytes (%s)", a.name, ack.Epoch, ack.Slot, f, c.describe(ev, ack.Slot))
	}
	if ev.cut != nil && ack.Slot >= *ev.cut {
		c.fail("ack-below-cut", "%s acknowledged epoch %d slot %d at or above its recorded cut %d", a.name, ack.Epoch, ack.Slot, *ev.cut)
	}
	var added []ackRecord
	for _, b := range ack.Batches {
		seqs := c.acked[b.StreamID]
		if seqs == nil {
			seqs = map[uint64]uint64{}
			c.acked[b.StreamID] = seqs
		}
		for _, r := range b.Records {
			d := recordDigest(r)
			if prev, ok := seqs[r.SeqNum]; ok && prev != d {
				c.fail("seq-once", "%s acknowledged %s seq %d (%q) a second time with a different record", a.name, b.StreamID, r.SeqNum, r.Body)
			}
			seqs[r.SeqNum] = d
			added = append(added, ackRecord{inc: a.id, slot: ack.Slot, stream: b.StreamID, seq: r.SeqNum, digest: d})
		}
	}
	ev.acks = append(ev.acks, added...)
	if ev.settled {
		c.readBack(ev, added)
	}
}

// onSettled: no ack of the epoch is disowned (I9). The garbage window is
// the trim's to reap (onReaped): a star's settlement only poisons it.
func (c *checker) onSettled(ev *epochView) {
	c.checks++
	if ev.cut == nil {
		c.fail("cut-recorded", "epoch %d settled without a recorded cut", ev.epoch)
		return
	}
	c.readBack(ev, ev.acks)
	c.checkRefs(ev)
}

// onReaped: once the trim reaped the garbage window [cut, cut+window)
// (I13), no bucket that is up holds a flight copy of the writer there,
// and with every bucket up each slot is dead. A slot holding a copy the
// sim damaged is left out: an unreadable object is never reaped (it may
// be a poison).
func (c *checker) onReaped(ev *epochView) {
	if ev.cut == nil {
		c.fail("cut-recorded", "epoch %d reaped without a recorded cut", ev.epoch)
		return
	}
	allUp := true
	for _, h := range c.s.health {
		allUp = allUp && h.mode != "down" && h.mode != "hang"
	}
	for s := *ev.cut; s < *ev.cut+uint64(ev.window); s++ {
		c.checks++
		if c.damaged(ev, s) {
			continue
		}
		for b, o := range c.occupants(ev, s) {
			if h := c.s.health[b]; o == occFlight && h.mode != "down" && h.mode != "hang" {
				c.fail("garbage-reaped", "epoch %d reaped but slot %d in its garbage window holds a flight copy in b%d (%s)", ev.epoch, s, b, c.describe(ev, s))
				return
			}
		}
		if f := c.fateOf(ev, s); allUp && f != chain.Dead {
			c.fail("garbage-reaped", "epoch %d reaped but slot %d in its garbage window is %v (%s)", ev.epoch, s, f, c.describe(ev, s))
		}
	}
}

// damaged reports whether a copy of slot s was damaged at rest.
func (c *checker) damaged(ev *epochView, s uint64) bool {
	key := chain.SlotKey(chainStar, chainClass, ev.epoch, s)
	for b := range c.s.objs.buckets {
		if obj := c.s.objs.buckets[b][key]; obj != nil && obj.damage != "" {
			return true
		}
	}
	return false
}

// readBack: every acknowledged record is covered by a span ref at its seq
// that names its epoch and slot, and reads back from a flight copy (or
// from what the settle moved out before a trim).
func (c *checker) readBack(ev *epochView, acks []ackRecord) {
	for _, a := range acks {
		c.checks++
		r, ok := c.floor(a.stream, a.seq)
		if !ok || a.seq >= r.EndSeq {
			c.fail("no-ack-disowned", "%s seq %d (acked in e%d/%d) is covered by no ref after epoch %d settled", a.stream, a.seq, ev.epoch, a.slot, ev.epoch)
			return
		}
		if r.Span == nil {
			continue // a catalog row: the sim has no group settle
		}
		var sr *meta.SlotRef
		for i := range r.Span.Slots {
			x := &r.Span.Slots[i]
			if x.FirstSeq <= a.seq && a.seq < x.FirstSeq+x.Count {
				sr = x
			}
		}
		if r.Span.Epoch != ev.epoch || sr == nil || sr.Slot != a.slot {
			c.fail("no-ack-disowned", "%s seq %d acked in e%d/%d is covered by a ref of epoch %d that does not place it there (%+v)", a.stream, a.seq, ev.epoch, a.slot, r.Span.Epoch, r.Span.Slots)
			return
		}
		d, ok := c.readRecord(ev, *sr, a.stream, a.seq)
		if !ok {
			c.fail("no-ack-disowned", "%s seq %d acked in e%d/%d reads back from no flight copy (%s; ref %+v)", a.stream, a.seq, ev.epoch, a.slot, c.describe(ev, a.slot), *sr)
			return
		}
		if d != a.digest {
			c.fail("no-ack-disowned", "%s seq %d acked in e%d/%d reads back a different record", a.stream, a.seq, ev.epoch, a.slot)
			return
		}
	}
}

// floor is the row covering seq: the greatest ref key ≤ seq.
func (c *checker) floor(stream string, seq uint64) (meta.Ref, bool) {
	k := meta.RefKey(stream, seq)
	best := ""
	for sk := range c.s.meta.Items[k.PK] {
		if strings.HasPrefix(sk, meta.RefPrefix) && sk <= k.SK && sk > best {
			best = sk
		}
	}
	if best == "" {
		return meta.Ref{}, false
	}
	var r meta.Ref
	if err := meta.Decode(c.s.meta.Items[k.PK][best].Val, &r); err != nil {
		c.fail("rows-decode", "%s %s: %v", k.PK, best, err)
		return r, false
	}
	return r, true
}

// readRecord decodes one record from a valid flight copy of its slot, in
// any bucket, or from the archive.
func (c *checker) readRecord(ev *epochView, sr meta.SlotRef, stream string, seq uint64) (uint64, bool) {
	key := chain.SlotKey(chainStar, chainClass, ev.epoch, sr.Slot)
	for b := range c.s.objs.buckets {
		obj := c.s.objs.buckets[b][key]
		if obj == nil || classify(obj.data, ev.epoch, sr.Slot, ev.nonce) != occFlight {
			continue
		}
		end := sr.Offset + sr.Length
		if end > uint64(len(obj.data)) || sr.Offset > end {
			continue
		}
		recs, err := format.DecodeBlocks(obj.data[sr.Offset:end])
		if err != nil {
			continue
		}
		for _, r := range recs {
			if r.SeqNum == seq {
				return recordDigest(r), true
			}
		}
	}
	d, ok := c.archived[slotID{ev.epoch, sr.Slot}][stream+"#"+strconv.FormatUint(seq, 10)]
	return d, ok
}

// checkRefs: every span ref into a settled epoch points below its cut.
func (c *checker) checkRefs(ev *epochView) {
	for _, pk := range slices.Sorted(maps.Keys(c.s.meta.Items)) {
		if !strings.HasPrefix(pk, "stream#") {
			continue
		}
		for _, sk := range slices.Sorted(maps.Keys(c.s.meta.Items[pk])) {
			var r meta.Ref
			if !strings.HasPrefix(sk, meta.RefPrefix) || meta.Decode(c.s.meta.Items[pk][sk].Val, &r) != nil || r.Span == nil || r.Span.Epoch != ev.epoch {
				continue
			}
			for _, sl := range r.Span.Slots {
				c.checks++
				if sl.Slot >= *ev.cut {
					c.fail("refs-below-cut", "%s %s points at epoch %d slot %d, at or above the cut %d", pk, sk, ev.epoch, sl.Slot, *ev.cut)
					return
				}
			}
		}
	}
}

// checkDense: a stream's rows tile [0, end) with no gap and no overlap,
// so no read returns two records for one seq (I10).
func (c *checker) checkDense(stream string) {
	p := c.s.meta.Items["stream#"+stream]
	next := uint64(0)
	for _, sk := range slices.Sorted(maps.Keys(p)) {
		if !strings.HasPrefix(sk, meta.RefPrefix) {
			continue
		}
		var r meta.Ref
		if err := meta.Decode(p[sk].Val, &r); err != nil {
			c.fail("rows-decode", "stream %s %s: %v", stream, sk, err)
			return
		}
		c.checks++
		if r.FirstSeq != next || r.EndSeq <= r.FirstSeq {
			c.fail("refs-dense", "stream %s: row %s covers [%d,%d) after rows ending at %d", stream, sk, r.FirstSeq, r.EndSeq, next)
			return
		}
		next = r.EndSeq
	}
}

// archive models the group settle moving slots [from, to) of an epoch out
// of the chain: the records of a valid flight copy of each, kept for the
// read-back check once the trim deleted them.
func (c *checker) archive(epoch, from, to uint64) {
	ev := c.epoch(epoch)
	for s := from; s < to; s++ {
		key := chain.SlotKey(chainStar, chainClass, epoch, s)
		for b := range c.s.objs.buckets {
			obj := c.s.objs.buckets[b][key]
			if obj == nil || classify(obj.data, epoch, s, ev.nonce) != occFlight {
				continue
			}
			recs, ok := bundleRecords(obj.data)
			if !ok {
				continue
			}
			c.archived[slotID{epoch, s}] = recs
			break
		}
	}
}

func bundleRecords(data []byte) (map[string]uint64, bool) {
	_, footer, err := format.DecodeBundle(data)
	if err != nil {
		return nil, false
	}
	out := map[string]uint64{}
	for _, x := range footer.Extents {
		end := x.Offset + uint64(x.Length)
		if end > uint64(len(data)) {
			return nil, false
		}
		recs, err := format.DecodeBlocks(data[x.Offset:end])
		if err != nil {
			return nil, false
		}
		for _, r := range recs {
			out[x.StreamID+"#"+strconv.FormatUint(r.SeqNum, 10)] = recordDigest(r)
		}
	}
	return out, true
}

// finalCheck runs after the final settlement: the whole chain is settled,
// and every acknowledged record of every epoch reads back.
func (c *checker) finalCheck() {
	c.checks++
	if c.head == nil {
		return
	}
	if c.head.State != meta.HeadSettled {
		c.s.fail("liveness", "settle-complete", fmt.Sprintf("the final settlement returned with the head epoch %d %s", c.head.Epoch, c.head.State))
		return
	}
	for _, ev := range c.sortedEpochs() {
		c.checks++
		if !ev.settled {
			c.s.fail("liveness", "settle-complete", fmt.Sprintf("the final settlement returned with epoch %d unsettled", ev.epoch))
			return
		}
		c.readBack(ev, ev.acks)
	}
}

// parseSlotKey splits chains/<star>/<class>/<epoch>/<slot>.
func parseSlotKey(key string) (uint64, uint64, bool) {
	rest, ok := strings.CutPrefix(key, "chains/"+chainStar+"/"+string(chainClass)+"/")
	if !ok {
		return 0, 0, false
	}
	es, ss, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, false
	}
	e, err1 := strconv.ParseUint(es, 10, 64)
	s, err2 := strconv.ParseUint(ss, 10, 64)
	return e, s, err1 == nil && err2 == nil
}
