package catalogsim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/node"
)

// The invariants, checked after every step from the sim's own record of
// client operations and the metastore's bytes:
//
//   - ack-named: an acknowledged record's stream id stays under its name
//     (basin row live with the stream's basin id, name row live with the
//     id) until a delete of the name or its basin ran at some point since
//     the id took the name;
//   - seq-unique: no two acknowledgements cover one seq num of a stream id
//     with different records (two stars, or one, sequencing it twice);
//   - ack-into-deleted: no append that started after a delete of its name
//     or basin answered is acknowledged into an id that delete tombstoned
//     once the name holds another id, nor more than the deletion-pending
//     window after the delete by a star connected to the metastore since
//     (docs/write-path.md, "Catalog invariants", items 3 and 4: within
//     the window a leader not yet told acknowledges into the deleted id);
//   - read-matches-ack: a read returns every acknowledged record of the id
//     it read at its acknowledged seq num, up to the tail it saw;
//   - refs-disjoint: the catalog rows (settled objects) of a stream
//     never overlap;
//   - reclaimed (swarms with the auditor, at the end of the run): every
//     id no longer under its name has no ref row and no registration for
//     reclamation left once the janitor found nothing more to reclaim.
type checker struct {
	s      *Sim
	checks int
	stats  map[string]int
	ids    map[string]*streamState
	order  []string          // ids in the order they appeared
	bodies map[string]seqRef // an acknowledged record's body → where
	delops []*op             // delete operations, in start order
	// lastAck is the incarnation that acknowledged the last append to a
	// name (basin, stream).
	lastAck map[[2]string]string
}

// ledBy lists the names whose last acknowledged append inc served, in
// name order: the streams it most likely leads.
func (c *checker) ledBy(inc string) [][2]string {
	var out [][2]string
	for k, v := range c.lastAck {
		if v == inc {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	return out
}

// streamState is what the checker knows of one stream id.
type streamState struct {
	id, basin, name, basinID string
	named                    bool
	namedSince               int
	// tombAnswered is the step at which a delete that tombstoned this id
	// answered its client (-1: none yet), tombAt its fake time.
	tombAnswered int
	tombAt       time.Time
	acks         map[uint64]ackRec
}

type ackRec struct {
	body, op, via string
	step          int
}

type seqRef struct {
	id  string
	seq uint64
}

func newChecker(s *Sim) *checker {
	return &checker{s: s, stats: map[string]int{}, ids: map[string]*streamState{}, bodies: map[string]seqRef{}, lastAck: map[[2]string]string{}}
}

func (c *checker) fail(inv, detail string) {
	c.s.fail("safety", inv, detail)
}

func (c *checker) stream(id, basin, name, basinID string) *streamState {
	st := c.ids[id]
	if st == nil {
		st = &streamState{id: id, basin: basin, name: name, basinID: basinID, tombAnswered: -1, acks: map[uint64]ackRec{}}
		c.ids[id] = st
		c.order = append(c.order, id)
	}
	if st.basinID == "" {
		st.basinID = basinID
	}
	return st
}

// afterStep checks what the last step changed in the metastore.
func (c *checker) afterStep() {
	t := c.s.meta
	keys := make([]meta.Key, 0, len(t.Dirty))
	for k := range t.Dirty {
		keys = append(keys, k)
	}
	clear(t.Dirty)
	slices.SortFunc(keys, func(a, b meta.Key) int { return cmp.Or(cmp.Compare(a.PK, b.PK), cmp.Compare(a.SK, b.SK)) })
	catalog := false
	var refs []string
	for _, k := range keys {
		switch {
		case strings.HasPrefix(k.PK, "basin#"):
			catalog = true
			if name, ok := strings.CutPrefix(k.SK, "s#"); ok {
				if it, ok := t.Lookup(k.PK, k.SK); ok {
					var row node.StreamRow
					if meta.Decode(it.Val, &row) == nil && row.ID != "" {
						c.stream(row.ID, strings.TrimPrefix(k.PK, "basin#"), name, row.BasinID)
					}
				}
			}
		case strings.HasPrefix(k.PK, "stream#") && strings.HasPrefix(k.SK, meta.RefPrefix):
			if id := strings.TrimPrefix(k.PK, "stream#"); !slices.Contains(refs, id) {
				refs = append(refs, id)
			}
		}
	}
	if catalog {
		for _, id := range c.order {
			c.judgeName(c.ids[id])
		}
	}
	for _, id := range refs {
		c.checkRefs(id)
	}
}

// namedNow says whether st's id is under its name in the metastore.
func (c *checker) namedNow(st *streamState) bool {
	t := c.s.meta
	bk := meta.BasinKey(st.basin)
	it, ok := t.Lookup(bk.PK, bk.SK)
	if !ok {
		return false
	}
	var b node.BasinRow
	if meta.Decode(it.Val, &b) != nil || b.DeletedAt != nil || b.ID != st.basinID {
		return false
	}
	sk := meta.StreamNameKey(st.basin, st.name)
	if it, ok = t.Lookup(sk.PK, sk.SK); !ok {
		return false
	}
	var r node.StreamRow
	return meta.Decode(it.Val, &r) == nil && r.ID == st.id && r.DeletedAt == nil
}

func (c *checker) judgeName(st *streamState) {
	c.checks++
	named := c.namedNow(st)
	switch {
	case named && !st.named:
		st.named, st.namedSince = true, c.s.step
	case !named && st.named:
		st.named = false
		if len(st.acks) > 0 {
			if d := c.excuse(st); d != nil {
				c.stats["names-deleted"]++
				return
			}
			c.fail("ack-named", fmt.Sprintf("stream %s/%s: id %s (basin id %s, %d acknowledged records) is no longer under its name, and no delete of %s/%s or %s ran since it took the name at step %d; the name now: %s",
				st.basin, st.name, abbrev(st.id), abbrev(st.basinID), len(st.acks), st.basin, st.name, st.basin, st.namedSince, c.describe(st.basin, st.name)))
		}
	}
}

// nameHoldsAnother says whether st's name, in a live basin, now names
// a live stream of another id.
func (c *checker) nameHoldsAnother(st *streamState) bool {
	t := c.s.meta
	bk := meta.BasinKey(st.basin)
	it, ok := t.Lookup(bk.PK, bk.SK)
	if !ok {
		return false
	}
	var b node.BasinRow
	if meta.Decode(it.Val, &b) != nil || b.DeletedAt != nil {
		return false
	}
	sk := meta.StreamNameKey(st.basin, st.name)
	if it, ok = t.Lookup(sk.PK, sk.SK); !ok {
		return false
	}
	var r node.StreamRow
	return meta.Decode(it.Val, &r) == nil && r.ID != st.id && r.BasinID == b.ID && r.DeletedAt == nil
}

// cutOffSince says whether incarnation name was cut off from the
// metastore at some time after since (its row checks could not run).
func (c *checker) cutOffSince(name string, since time.Time) bool {
	for _, inc := range c.s.incs {
		if inc.name == name {
			return inc.cutUntil.After(since)
		}
	}
	return false
}

// excuse is a delete of st's name or basin that ran at some point since
// st's id took the name (nil: none).
func (c *checker) excuse(st *streamState) *op {
	for _, d := range c.delops {
		if d.basin == st.basin && (d.stream == "" || d.stream == st.name) && (d.end < 0 || d.end >= st.namedSince) {
			return d
		}
	}
	return nil
}

// describe is what the metastore holds under a name, for failure reports.
func (c *checker) describe(basin, name string) string {
	t := c.s.meta
	out := "basin row "
	bk := meta.BasinKey(basin)
	if it, ok := t.Lookup(bk.PK, bk.SK); ok {
		var b node.BasinRow
		_ = meta.Decode(it.Val, &b)
		out += fmt.Sprintf("id %s deleted=%v", abbrev(b.ID), b.DeletedAt != nil)
	} else {
		out += "missing"
	}
	sk := meta.StreamNameKey(basin, name)
	if it, ok := t.Lookup(sk.PK, sk.SK); ok {
		var r node.StreamRow
		_ = meta.Decode(it.Val, &r)
		out += fmt.Sprintf("; stream row id %s basin id %s deleted=%v", abbrev(r.ID), abbrev(r.BasinID), r.DeletedAt != nil)
	} else {
		out += "; stream row missing"
	}
	return out
}

func (c *checker) checkRefs(id string) {
	c.checks++
	items := c.s.meta.Items["stream#"+id]
	var sks []string
	for sk := range items {
		if strings.HasPrefix(sk, meta.RefPrefix) {
			sks = append(sks, sk)
		}
	}
	slices.Sort(sks)
	// Catalog rows (settled objects) never overlap each other. Span refs
	// may for a moment: a commit overlaps the span refs it covers with
	// its catalog row from its pivot CAS, and a split ref with its
	// remainder from the remainder's put, until it deletes them
	// (docs/settle.md, "Catalog rows and the commit order").
	var prev *meta.Ref
	for _, sk := range sks {
		var r meta.Ref
		if err := meta.Decode(items[sk].Val, &r); err != nil {
			c.fail("refs-disjoint", fmt.Sprintf("stream %s: ref %s undecodable: %v", abbrev(id), sk, err))
			return
		}
		if r.Settled == nil {
			continue
		}
		if prev != nil && r.FirstSeq < prev.EndSeq {
			c.fail("refs-disjoint", fmt.Sprintf("stream %s: catalog rows [%d,%d) (revision %d) and [%d,%d) (revision %d) overlap",
				abbrev(id), prev.FirstSeq, prev.EndSeq, prev.Settled.Revision, r.FirstSeq, r.EndSeq, r.Settled.Revision))
			return
		}
		prev = &r
	}
}

func (c *checker) opStart(o *op) {
	o.start, o.startAt = c.s.step, time.Now()
	c.stats["op-"+o.kind]++
	if strings.HasPrefix(o.kind, "delete-") {
		c.delops = append(c.delops, o)
	}
	name := o.basin
	if o.stream != "" {
		name += "/" + o.stream
	}
	c.s.trace.add(c.s, fmt.Sprintf("%s %s %s via %s", o.id, o.kind, name, o.via))
}

func (c *checker) sequenced(o, info *op) {
	o.streamID, o.seqStart, o.bodies, o.seqAt = info.streamID, info.seqStart, info.bodies, c.s.step
	st := c.stream(info.streamID, o.basin, o.stream, "")
	c.checks++
	if st.tombAnswered >= 0 && o.start > st.tombAnswered {
		// What docs/write-path.md ("Catalog invariants", items 3 and 4)
		// promises: nothing is acknowledged into an id once its name
		// holds another, and a star connected to the metastore stops
		// leading a deleted stream within the deletion-pending window
		// (before then its acks go into the deleted id, as documented).
		via := info.via
		if i := strings.LastIndexByte(via, '>'); i >= 0 {
			via = via[i+1:]
		}
		window := c.s.sw.DeletionPending
		why := ""
		switch {
		case c.nameHoldsAnother(st):
			why = "the name already holds another id"
		case o.startAt.Sub(st.tombAt) > window && !c.cutOffSince(via, st.tombAt):
			why = fmt.Sprintf("more than the deletion-pending window (%v) after it, by a star connected to the metastore since", window)
		default:
			c.stats["acked-into-deleted-within-window"]++
		}
		if why != "" {
			o.intoDeleted = fmt.Sprintf("the append started at step %d, after a delete tombstoning id %s answered at step %d, %s; sequenced at step %d by %s (the name now: %s)",
				o.start, abbrev(st.id), st.tombAnswered, why, c.s.step, info.via, c.describe(st.basin, st.name))
		}
	}
	if !st.named {
		c.stats["sequenced-into-unnamed"]++
	}
	c.s.trace.add(c.s, fmt.Sprintf("%s sequenced into %s at %d..%d by %s", o.id, abbrev(info.streamID), info.seqStart, info.seqStart+uint64(len(info.bodies)), info.via))
}

func (c *checker) opEnd(o *op, note string, acked bool, read []readRecord, readDone bool) {
	o.end = c.s.step
	c.s.trace.add(c.s, fmt.Sprintf("%s %s", o.id, note))
	outcome := "ok"
	if o.err != nil {
		outcome = "err"
	}
	c.stats[o.kind+"-"+outcome]++
	if acked {
		c.ack(o)
	}
	if strings.HasPrefix(o.kind, "delete-") && o.err == nil {
		for _, id := range c.order {
			st := c.ids[id]
			if st.basin == o.basin && (o.stream == "" || st.name == o.stream) && !st.named && st.tombAnswered < 0 {
				st.tombAnswered, st.tombAt = c.s.step, time.Now()
			}
		}
	}
	if len(read) > 0 {
		c.read(o, read, readDone)
	}
}

func (c *checker) ack(o *op) {
	st := c.ids[o.streamID]
	o.ackAt = c.s.step
	c.stats["acks"]++
	via := o.via
	if i := strings.LastIndexByte(via, '>'); i >= 0 {
		via = via[i+1:]
	}
	c.lastAck[[2]string{o.basin, o.stream}] = via
	c.checks++
	if o.intoDeleted != "" {
		c.fail("ack-into-deleted", fmt.Sprintf("%s acknowledged %d records into stream %s/%s id %s: %s", o.id, len(o.bodies), o.basin, o.stream, abbrev(o.streamID), o.intoDeleted))
		return
	}
	for i, body := range o.bodies {
		seq := o.seqStart + uint64(i)
		c.checks++
		if prev, ok := st.acks[seq]; ok && prev.body != body {
			c.fail("seq-unique", fmt.Sprintf("stream %s/%s id %s: seq %d acknowledged twice: %q by %s (%s, step %d) and %q by %s (%s)",
				o.basin, o.stream, abbrev(st.id), seq, prev.body, prev.op, prev.via, prev.step, body, o.id, o.via))
			return
		}
		st.acks[seq] = ackRec{body: body, op: o.id, via: o.via, step: c.s.step}
		c.bodies[body] = seqRef{id: st.id, seq: seq}
	}
}

// read checks a read from seq 0 against the acknowledged records of the
// id it read (known from any acknowledged record it returned); one that
// reached the tail (416) must hold every record acknowledged before it
// started.
func (c *checker) read(o *op, recs []readRecord, toTail bool) {
	c.stats["reads"]++
	var st *streamState
	for _, r := range recs {
		if ref, ok := c.bodies[r.body]; ok {
			st = c.ids[ref.id]
			break
		}
	}
	if st == nil {
		return
	}
	for _, r := range recs {
		c.checks++
		if ref, ok := c.bodies[r.body]; ok && (ref.id != st.id || ref.seq != r.seq) {
			c.fail("read-matches-ack", fmt.Sprintf("%s read %s/%s: record %q at seq %d, acknowledged at seq %d of id %s (the read is of id %s)",
				o.id, o.basin, o.stream, r.body, r.seq, ref.seq, abbrev(ref.id), abbrev(st.id)))
			return
		}
		if a, ok := st.acks[r.seq]; ok && a.body != r.body {
			c.fail("read-matches-ack", fmt.Sprintf("%s read %s/%s id %s via %s: seq %d is %q, but %s acknowledged %q there (via %s, step %d)",
				o.id, o.basin, o.stream, abbrev(st.id), o.via, r.seq, r.body, a.op, a.body, a.via, a.step))
			return
		}
	}
	if !toTail {
		return
	}
	end := uint64(0)
	if len(recs) > 0 {
		end = recs[len(recs)-1].seq + 1
	}
	seqs := slices.Sorted(maps.Keys(st.acks))
	for _, seq := range seqs {
		a := st.acks[seq]
		if seq >= end && a.step < o.start {
			c.fail("read-matches-ack", fmt.Sprintf("%s read %s/%s id %s via %s: the read ends at seq %d, but %s acknowledged %q at seq %d (via %s, step %d) before the read started",
				o.id, o.basin, o.stream, abbrev(st.id), o.via, end, a.op, a.body, seq, a.via, a.step))
			return
		}
	}
}
