package settle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle/assemble"
)

// Report is what one settle job did.
type Report struct {
	Markers     int // ripe markers of the era the job judged
	Resolved    int // markers resolved (deleted)
	Rescheduled int // linger markers left with residue, moved to their age cap
	Streams     int // streams the markers name
	Deleted     int // of which deleted: resolved without a byte staged
	Settled     int // live streams whose window this job settled
	Left        int // live streams left standing (below the trigger, or owned by an earlier era)
	Failed      int // streams whose settle failed (their markers are left alone)
	Quarantined int // streams set aside: their markers resolve without them
	Objects     int // settled objects committed
	Adopted     int // of which published earlier by a concurrent or crashed settler
	Bundles     int // bundles warmed into the fetch cache
	BundleBytes int64
	// Rounds is how many fetch caches the qualifying streams were settled
	// through (more than one when their bundles pass the scratch or footer
	// limit); PeakScratch and PeakFooter are the most bundle bytes and
	// footer-entry memory one round held.
	Rounds                  int
	PeakScratch, PeakFooter int64
	Copied                  int64 // object bytes copied server-side
	Staged                  int64 // object bytes uploaded as parts (footers included)
	RefsDeleted             int   // covered span refs deleted
	Splits                  int   // span refs split where an object ended inside them
}

// errRaced means a conditional write found a row other than the one the
// view was built from: another settler moved the stream's rows. The
// stream's rows are read again and the settle continues from them.
var errRaced = errors.New("settle: rows changed under the settle")

// maxRounds bounds one stream's settle loop (one object per round, plus a
// round per race lost); a window of 256 slots makes at most a few objects.
const maxRounds = 64

// streamWork is one stream's part of a settle job.
type streamWork struct {
	id     string
	judged bool // false if the job ended before it got to the stream
	// quarantined: set aside (quarantine.go); not judged, no residue.
	quarantined bool
	alive       bool
	basin       string
	view        view
	qualifies   bool
	err         error

	objects, adopted int
	copied, staged   int64
	refsDeleted      int
	splits           int
}

// Settle runs one group-settle job (docs/design.md §10): it
// judges the era's ripe markers (a marker whose streams are all deleted
// resolves with nothing staged), warms exactly the bundles the qualifying
// streams' windows need into a scratch fetch cache (each bundle read once,
// verified), assembles each qualifying stream's settled objects through a
// bounded worker pool, commits them (the CAS of the row at the object's
// first seq is the visibility commit; covered span refs are deleted
// ascending after it), resolves the markers left without residue,
// re-schedules linger markers with residue to their age cap, and advances
// the epoch's settle frontier.
//
// Every step is idempotent and each stream converges on its own: a re-run
// after a crash at any step, or a concurrent run of the same job, ends in
// the same objects and rows.
func Settle(ctx context.Context, st *Stores, job Job) (rep Report, err error) {
	if err := st.Check(); err != nil {
		return rep, err
	}
	if job.Kind != KindSettle {
		return rep, fmt.Errorf("settle: %s is not a settle job", job)
	}
	if err := job.Validate(); err != nil {
		return rep, err
	}
	cfg, m, log := st.cfg(), st.metrics(), st.Log()
	class := string(job.Chain.Class)
	t0 := time.Now()
	defer func() {
		m.jobSeconds.WithLabelValues(class, string(KindSettle)).Observe(time.Since(t0).Seconds())
		if err != nil {
			m.jobErrors.WithLabelValues(class, string(KindSettle)).Inc()
			return
		}
		m.erasSettled.WithLabelValues(class).Inc()
	}()
	now := st.now()
	rec, err := ReadEpoch(ctx, st.Meta, job.Chain, job.Epoch)
	if err != nil {
		return rep, err
	}
	era := &eraSet{ch: job.Chain, epoch: job.Epoch, checkpoints: map[epochRef]uint64{{job.Chain, job.Epoch}: rec.Checkpoint}}
	all, err := markersIn(ctx, st.Meta, job.Chain, job.Epoch, job.From, job.End)
	if err != nil {
		return rep, err
	}
	gather := cfg.Timers(job.Chain.Class).EraGather()
	for _, lm := range all {
		if Due(lm.M, rec.Checkpoint, now, gather) && lm.M.EndSlot <= job.End {
			era.markers = append(era.markers, lm)
		}
	}
	rep.Markers = len(era.markers)
	if len(era.markers) == 0 {
		return rep, advanceFrontier(ctx, st, job.Chain, job.Epoch)
	}
	if err := loadStreams(ctx, st.Meta, job.Chain, era.markers); err != nil {
		return rep, err
	}
	var ids []string
	for _, lm := range era.markers {
		ids = append(ids, lm.Streams...)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	works := make([]*streamWork, len(ids))
	for i, id := range ids {
		works[i] = &streamWork{id: id}
	}
	rep.Streams = len(works)
	timers := cfg.Timers(job.Chain.Class)

	// Quarantined streams are set aside (their slots pinned), unjudged.
	fails, err := readFailures(ctx, st.Meta)
	if err != nil {
		return rep, err
	}
	setAside(ctx, st, era, works, fails)

	// Judge: deleted or alive, then read the live streams' rows.
	forEach(ctx, len(works), cfg.Workers, func(ctx context.Context, i int) {
		if w := works[i]; !w.judged {
			w.err = judge(ctx, st, era, w, cfg.Trigger, timers.AgeCap, now)
		}
	})
	// Streams judged but not settling now: a commit a crash left half
	// done is finished, or its leftovers would outlive their slots.
	forEach(ctx, len(works), cfg.Workers, func(ctx context.Context, i int) {
		if w := works[i]; w.err == nil && w.alive && !w.qualifies {
			w.err = finishLeftovers(ctx, st, w)
		}
	})
	// Warm, assemble and commit the qualifying streams in rounds whose
	// bundles fit the scratch and footer limits.
	var queue []*streamWork
	for _, w := range works {
		if w.err == nil && w.alive && w.qualifies {
			queue = append(queue, w)
		}
	}
	alone := false // the last round deferred every stream: run the first by itself
	for len(queue) > 0 && ctx.Err() == nil {
		round, rest := nextRound(era, queue, cfg.ScratchBytes, cfg.FooterBytes)
		if alone {
			round, rest = queue[:1], queue[1:]
		}
		deferred, err := settleBatch(ctx, st, job, era, round, &rep)
		if err != nil {
			return rep, err
		}
		rep.Rounds++
		alone = len(deferred) == len(round)
		queue = append(deferred, rest...)
	}
	if err := ctx.Err(); err != nil {
		for _, w := range queue {
			w.err = err
		}
	}

	for _, w := range works {
		if !w.judged && w.err == nil {
			w.err = errors.New("settle: job ended before the stream was judged")
		}
	}
	noteOutcomes(ctx, st, era, works, fails, now)
	var errs []error
	for _, w := range works {
		switch {
		case w.quarantined:
			rep.Quarantined++
		case w.err != nil:
			rep.Failed++
			if len(errs) < 8 {
				errs = append(errs, fmt.Errorf("stream %s: %w", w.id, w.err))
			}
		case !w.alive:
			rep.Deleted++
		case w.qualifies:
			rep.Settled++
		default:
			rep.Left++
		}
		rep.Objects += w.objects
		rep.Adopted += w.adopted
		rep.Copied += w.copied
		rep.Staged += w.staged
		rep.RefsDeleted += w.refsDeleted
		rep.Splits += w.splits
	}
	m.settledBytes.WithLabelValues(class, "copied").Add(float64(rep.Copied))
	m.settledBytes.WithLabelValues(class, "staged").Add(float64(rep.Staged))
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if err := resolveMarkers(ctx, st, era, works, timers.AgeCap, now, &rep); err != nil {
		errs = append(errs, err)
	}
	if err := advanceFrontier(ctx, st, job.Chain, job.Epoch); err != nil {
		errs = append(errs, err)
	}
	log.Info("settle: era settled", "job", job.String(), "markers", rep.Markers, "resolved", rep.Resolved,
		"rescheduled", rep.Rescheduled, "streams", rep.Streams, "settled", rep.Settled, "deleted", rep.Deleted,
		"left", rep.Left, "failed", rep.Failed, "quarantined", rep.Quarantined, "objects", rep.Objects, "copied", rep.Copied, "staged", rep.Staged)
	if len(errs) > 0 {
		return rep, fmt.Errorf("settle: %s: %d of %d streams failed: %w", job, rep.Failed, rep.Streams, errors.Join(errs...))
	}
	return rep, nil
}

// settleBatch warms the bundles round's streams need into a fresh fetch
// cache that indexes only their extents, then assembles and commits each.
// A stream one of whose bundles the limits refused is handed back to run
// in a later round, unless it ran alone (then it fails with
// ErrScratchBudget: its own window passes the limits).
func settleBatch(ctx context.Context, st *Stores, job Job, era *eraSet, round []*streamWork, rep *Report) (deferred []*streamWork, err error) {
	cfg, log := st.cfg(), st.Log()
	only := map[string]bool{}
	for _, w := range round {
		only[w.id] = true
	}
	class := string(job.Chain.Class)
	m := st.metrics()
	fc, err := assemble.New(assemble.Options{Meta: st.Meta, Objects: st.Objects, ScratchDir: cfg.ScratchDir,
		MaxBytes: cfg.ScratchBytes, MaxFooter: cfg.FooterBytes, Only: only,
		Warmed: func(n int) {
			m.bundles.WithLabelValues(class).Inc()
			m.bundleBytes.WithLabelValues(class).Add(float64(n))
		}})
	if err != nil {
		return nil, err
	}
	cache := &jobCache{Cache: fc, class: class}
	defer func() {
		if cerr := cache.Close(); cerr != nil {
			log.Warn("settle: removing the fetch cache", "dir", cache.Dir(), "err", cerr)
		}
	}()
	need := neededSlots(era, round)
	refused := map[assemble.SlotID]bool{}
	var mu sync.Mutex
	forEach(ctx, len(need), cfg.Workers, func(ctx context.Context, i int) {
		// A failure is not fatal here: the stream that needs the slot tries
		// once more and fails alone.
		if _, err := cache.Get(ctx, need[i]); err != nil {
			if errors.Is(err, ErrScratchBudget) {
				mu.Lock()
				refused[need[i]] = true
				mu.Unlock()
				return
			}
			log.Warn("settle: warming a bundle", "job", job.String(), "slot", need[i].Slot, "err", err)
		}
	})
	var run []*streamWork
	for _, w := range round {
		if len(round) > 1 && len(refused) > 0 && slices.ContainsFunc(neededSlots(era, []*streamWork{w}), func(id assemble.SlotID) bool { return refused[id] }) {
			deferred = append(deferred, w)
			continue
		}
		run = append(run, w)
	}
	forEach(ctx, len(run), cfg.Workers, func(ctx context.Context, i int) {
		run[i].err = settleStream(ctx, st, cache, era, run[i])
	})
	held := cache.Stats()
	rep.Bundles += held.Bundles
	rep.BundleBytes += held.Bytes
	rep.PeakScratch = max(rep.PeakScratch, held.Bytes)
	rep.PeakFooter = max(rep.PeakFooter, held.Footer)
	return deferred, nil
}

// jobCache is a settle job's fetch cache, with the chain class its
// metrics are labelled by.
type jobCache struct {
	*assemble.Cache
	class string
}

// ErrScratchBudget means a bundle would pass a settle job's scratch or
// footer-memory limit (Config.ScratchBytes, FooterBytes): assemble's error,
// named here for settle's callers.
var ErrScratchBudget = assemble.ErrScratchBudget

// slotOf names slot sl of span ref sp's chain epoch.
func slotOf(sp *meta.Span, slot uint64) assemble.SlotID {
	return assemble.SlotID{Star: sp.Star, Class: sp.Class, Epoch: sp.Epoch, Slot: slot}
}

// neededSlots lists the slots the streams' windows read, ascending.
func neededSlots(era *eraSet, ws []*streamWork) []assemble.SlotID {
	var need []assemble.SlotID
	seen := map[assemble.SlotID]bool{}
	for _, w := range ws {
		for _, r := range era.window(w.view.standing) {
			for _, sl := range r.Ref.Span.Slots {
				id := slotOf(r.Ref.Span, sl.Slot)
				if !seen[id] {
					seen[id] = true
					need = append(need, id)
				}
			}
		}
	}
	slices.SortFunc(need, func(a, b assemble.SlotID) int {
		return cmp.Or(cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.Slot, b.Slot))
	})
	return need
}

// nextRound takes streams from the head of queue while the bundles they
// need, as far as their own refs show (a lower bound: a bundle is at least
// as long as the end of every extent it holds), and their extents' footer
// memory, fit the limits; at least one stream. The fetch cache enforces
// the limits on the real sizes.
func nextRound(era *eraSet, queue []*streamWork, maxBytes, maxFooter int64) (round, rest []*streamWork) {
	size := map[assemble.SlotID]int64{}
	var bytes, footer int64
	for i, w := range queue {
		add := map[assemble.SlotID]int64{}
		var f int64
		for _, r := range era.window(w.view.standing) {
			for _, sl := range r.Ref.Span.Slots {
				id := slotOf(r.Ref.Span, sl.Slot)
				end := int64(sl.Offset + sl.Length)
				if end > size[id] && end > add[id] {
					add[id] = end
				}
				f += int64(unsafe.Sizeof(format.Extent{})) + int64(len(w.id))
			}
		}
		var grow int64
		for id, end := range add {
			grow += end - size[id]
		}
		if i > 0 && (bytes+grow > maxBytes || footer+f > maxFooter) {
			return queue[:i], queue[i:]
		}
		for id, end := range add {
			size[id] = end
		}
		bytes, footer = bytes+grow, footer+f
	}
	return queue, nil
}

// judge decides a stream's part in the job: deleted streams stage nothing;
// a live stream's rows are read and its window sized against the policy.
func judge(ctx context.Context, st *Stores, era *eraSet, w *streamWork, trigger uint64, ageCap time.Duration, now time.Time) error {
	alive, basin, err := st.Streams.StreamState(ctx, w.id)
	if err != nil {
		return err
	}
	w.judged, w.alive, w.basin = true, alive, basin
	if !alive {
		return nil
	}
	if err := reread(ctx, st, era, w); err != nil {
		return err
	}
	w.qualifies = era.qualifies(era.window(w.view.standing), trigger, ageCap, now)
	return nil
}

// reread reads the stream's rows, rebuilds its view, and learns the
// checkpoints of the epochs its standing refs ride.
func reread(ctx context.Context, st *Stores, era *eraSet, w *streamWork) error {
	rows, err := readRows(ctx, st.Meta, w.id)
	if err != nil {
		return err
	}
	v, err := analyze(rows)
	if err != nil {
		return fmt.Errorf("stream %s: %w", w.id, err)
	}
	w.view = v
	return era.learn(ctx, st.Meta, v.standing)
}

// ReadRefs reads a stream's ref rows from the greatest down (readRows
// without their versions).
func ReadRefs(ctx context.Context, ms meta.Store, id string) ([]meta.Ref, error) {
	rows, err := readRows(ctx, ms, id)
	if err != nil {
		return nil, err
	}
	refs := make([]meta.Ref, len(rows))
	for i, r := range rows {
		refs[i] = r.Ref
	}
	return refs, nil
}

// readRows reads a stream's ref rows from the greatest down to the
// greatest catalog row (or all when there is none), ascending.
func readRows(ctx context.Context, ms meta.Store, id string) ([]refRow, error) {
	q := meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~", Backward: true, Limit: 256}
	var rows []refRow
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("settle: rows of stream %s: %w", id, err)
		}
		done := pg.Next == ""
		for _, it := range pg.Items {
			var r meta.Ref
			if err := meta.Decode(it.Val, &r); err != nil {
				return nil, fmt.Errorf("settle: row %s/%s: %w", it.PK, it.SK, err)
			}
			if k := meta.RefKey(id, r.FirstSeq); k.SK != it.SK || r.EndSeq <= r.FirstSeq || (r.Span == nil) == (r.Settled == nil) {
				return nil, fmt.Errorf("%w: row %s/%s is malformed (extent [%d,%d))", ErrRows, it.PK, it.SK, r.FirstSeq, r.EndSeq)
			}
			rows = append(rows, refRow{Ver: it.Ver, Ref: r})
			if r.Settled != nil {
				done = true
				break
			}
		}
		if done {
			slices.Reverse(rows)
			return rows, nil
		}
		q.PageToken = pg.Next
	}
}

// settleStream settles a qualifying stream's window, one object per round.
func settleStream(ctx context.Context, st *Stores, cache *jobCache, era *eraSet, w *streamWork) error {
	for range maxRounds {
		done, err := settleRound(ctx, st, cache, era, w)
		if errors.Is(err, errRaced) {
			if err := reread(ctx, st, era, w); err != nil {
				return err
			}
			continue
		}
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("settle: stream %s did not converge in %d rounds", w.id, maxRounds)
}

// settleRound finishes any half-done commit, then assembles and commits
// the next object of the stream's window; done when the window is empty.
func settleRound(ctx context.Context, st *Stores, cache *jobCache, era *eraSet, w *streamWork) (done bool, err error) {
	if err := finishLeftovers(ctx, st, w); err != nil {
		return false, err
	}
	window := era.window(w.view.standing)
	if len(window) == 0 {
		return true, nil
	}
	cfg, now := st.cfg(), st.now()
	tail, err := loadTail(ctx, st, w, cfg.OutputCap)
	if err != nil {
		return false, err
	}
	if tail != nil {
		ext, err := decideExtend(ctx, st, w, tail, now)
		if err != nil {
			return false, err
		}
		if !ext {
			tail = nil // the tail stays as it is; a new object follows it
		}
	}
	if tail == nil && w.view.base != nil && !w.view.base.Ref.Settled.Sealed {
		if err := seal(ctx, st, w); err != nil {
			return false, err
		}
	}
	p := planObject(tail, window, cfg.OutputCap)
	if tail != nil {
		s := tail.row.Ref.Settled
		p.recent = append(recent(s, now, recentWindow(cfg.ReadGrace)), meta.Superseded{Rev: s.Revision, Bytes: s.Bytes, At: millis(now)})
	}
	f, size, adopted, err := publish(ctx, st, cache, w, p)
	if err != nil {
		return false, err
	}
	return false, commitObject(ctx, st, cache, w, p, f, size, adopted)
}

// finishLeftovers completes a commit a crash (or a racing settler) left
// half done: the remainder of a split ref is put at the catalog row's end,
// then the covered span refs are deleted in ascending order.
func finishLeftovers(ctx context.Context, st *Stores, w *streamWork) error {
	v := &w.view
	if v.remainder != nil {
		ver, err := putRemainder(ctx, st.Meta, w.id, *v.remainder)
		if err != nil {
			return err
		}
		v.standing[0].Ver = ver
		v.remainder = nil
		w.splits++
	}
	for len(v.leftovers) > 0 {
		if err := deleteRef(ctx, st.Meta, w.id, v.leftovers[0]); err != nil {
			return err
		}
		w.refsDeleted++
		v.leftovers = v.leftovers[1:]
	}
	return nil
}

// putRemainder puts the remainder of a split span ref, once.
func putRemainder(ctx context.Context, ms meta.Store, id string, r meta.Ref) (int64, error) {
	k := meta.RefKey(id, r.FirstSeq)
	ver, err := ms.Put(ctx, k.PK, k.SK, meta.Encode(r), meta.IfAbsent())
	if err == nil {
		return ver, nil
	}
	if !errors.Is(err, meta.ErrConditionFailed) {
		return 0, fmt.Errorf("settle: put remainder %s/%s: %w", k.PK, k.SK, err)
	}
	it, err := ms.Get(ctx, k.PK, k.SK)
	if err != nil {
		return 0, fmt.Errorf("settle: read remainder %s/%s: %w", k.PK, k.SK, err)
	}
	var have meta.Ref
	if err := meta.Decode(it.Val, &have); err != nil {
		return 0, err
	}
	if have.Span == nil || have.EndSeq != r.EndSeq {
		return 0, errRaced
	}
	return it.Ver, nil
}

// deleteRef deletes a covered span ref if it is still the row read.
func deleteRef(ctx context.Context, ms meta.Store, id string, r refRow) error {
	k := meta.RefKey(id, r.Ref.FirstSeq)
	err := ms.Delete(ctx, k.PK, k.SK, meta.IfVer(r.Ver))
	if err == nil {
		return nil
	}
	if !errors.Is(err, meta.ErrConditionFailed) {
		return fmt.Errorf("settle: delete covered ref %s/%s: %w", k.PK, k.SK, err)
	}
	if _, err := ms.Get(ctx, k.PK, k.SK); errors.Is(err, meta.ErrNotFound) {
		return nil // a concurrent settler deleted it
	} else if err != nil {
		return fmt.Errorf("settle: read covered ref %s/%s: %w", k.PK, k.SK, err)
	}
	return errRaced
}

// seal marks the stream's greatest catalog row Sealed, by CAS on the
// version the view read, before the object that follows it is published:
// no settle extends a sealed row, and an extension by a settler that read
// the row before the seal fails its CAS. So the pivot of a follower
// commits only after its tail can no longer change, and the extension and
// the follower can never both commit, whatever a stalled settler decides
// later (the decision entry, which the reclaim deletes once the follower
// committed, is not what keeps them apart). A lost CAS is errRaced.
func seal(ctx context.Context, st *Stores, w *streamWork) error {
	b := w.view.base
	r := b.Ref
	s := *r.Settled
	s.Sealed = true
	r.Settled = &s
	k := meta.RefKey(w.id, r.FirstSeq)
	ver, err := st.Meta.Put(ctx, k.PK, k.SK, meta.Encode(r), meta.IfVer(b.Ver))
	if errors.Is(err, meta.ErrConditionFailed) {
		return errRaced
	}
	if err != nil {
		return fmt.Errorf("settle: seal catalog row %s/%s: %w", k.PK, k.SK, err)
	}
	w.view.base = &refRow{Ver: ver, Ref: r}
	return nil
}

// loadTail returns the stream's tail object when the next object should
// extend it: the greatest catalog row, not sealed, whose object is below
// the output cap and starts at the row.
func loadTail(ctx context.Context, st *Stores, w *streamWork, outputCap uint64) (*tailObj, error) {
	b := w.view.base
	if b == nil || b.Ref.Settled.Sealed || b.Ref.Settled.Bytes >= outputCap || b.Ref.Settled.FirstSeq != b.Ref.FirstSeq {
		return nil, nil
	}
	s := b.Ref.Settled
	key := format.SettledKey(w.basin, w.id, s.Epoch, s.FirstSeq, s.Revision)
	f, size, err := assemble.SettledFooter(ctx, st.Objects.Bucket(st.SettledBucket), key, s.Bytes)
	if err != nil {
		return nil, err
	}
	if f.StreamID != w.id || f.FirstSeq != b.Ref.FirstSeq || f.EndSeq != b.Ref.EndSeq {
		return nil, fmt.Errorf("%w: catalog row [%d,%d) names %s, which holds [%d,%d) of %s",
			ErrRows, b.Ref.FirstSeq, b.Ref.EndSeq, key, f.FirstSeq, f.EndSeq, f.StreamID)
	}
	return &tailObj{row: *b, key: key, footer: f, size: size}, nil
}

// forEach runs fn(i) for i in [0, n) on at most workers goroutines, and
// starts no more once ctx ends.
func forEach(ctx context.Context, n, workers int, fn func(ctx context.Context, i int)) {
	sem := make(chan struct{}, max(workers, 1))
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(ctx, i)
		})
	}
	wg.Wait()
}

// ReadEpoch reads one epoch record.
func ReadEpoch(ctx context.Context, ms meta.Store, ch ChainRef, epoch uint64) (meta.Epoch, error) {
	k := meta.EpochKey(ch.Star, ch.Class, epoch)
	it, err := ms.Get(ctx, k.PK, k.SK)
	if err != nil {
		return meta.Epoch{}, fmt.Errorf("settle: epoch %d of %s: %w", epoch, ch, err)
	}
	var e meta.Epoch
	if err := meta.Decode(it.Val, &e); err != nil {
		return e, err
	}
	return e, nil
}

// markersIn reads the epoch's markers whose passes start in [from, end).
func markersIn(ctx context.Context, ms meta.Store, ch ChainRef, epoch, from, end uint64) ([]liveMarker, error) {
	e := meta.Epoch{Epoch: epoch, Rewritten: from, Checkpoint: end}
	return liveMarkers(ctx, ms, ch, e, 0)
}

// resolveMarkers judges each marker of the era after the streams settled:
// no live stream left standing in its slots, it is resolved (deleted);
// otherwise a linger marker is moved to its age cap (a cap marker stays
// ripe, and the next plan retries it). A marker naming a stream whose
// settle failed is left alone. Conditional writes lost to a concurrent
// settler are fine: it judged the same rows.
func resolveMarkers(ctx context.Context, st *Stores, era *eraSet, works []*streamWork, ageCap time.Duration, now time.Time, rep *Report) error {
	n := len(era.markers)
	residue, blocked := make([]bool, n), make([]bool, n)
	failed := map[string]bool{}
	for _, w := range works {
		switch {
		case w.err != nil:
			failed[w.id] = true
		case w.alive:
			era.residue(w.view.standing, residue)
		}
	}
	for i, lm := range era.markers {
		for _, id := range lm.Streams {
			blocked[i] = blocked[i] || failed[id]
		}
	}
	m := st.metrics()
	class := string(era.ch.Class)
	var errs []error
	for i, lm := range era.markers {
		k := meta.MarkerKey(era.ch.Star, era.ch.Class, era.epoch, lm.M.FromSlot)
		switch {
		case blocked[i]:
		case !residue[i]:
			err := st.Meta.Delete(ctx, k.PK, k.SK, meta.IfVer(lm.Ver))
			if err != nil && !errors.Is(err, meta.ErrConditionFailed) {
				errs = append(errs, fmt.Errorf("settle: resolve marker %s: %w", k.SK, err))
				continue
			}
			if err == nil {
				// Only the settler whose delete won: a marker re-scheduled
				// meanwhile (a new version) still needs its shards.
				if err := deleteShards(ctx, st.Meta, era.ch, lm.M); err != nil {
					errs = append(errs, err)
				}
			}
			rep.Resolved++
			m.markers.WithLabelValues(class, "resolved").Inc()
		case !era.capRipe(i, ageCap, now):
			mk := lm.M
			mk.Ripen, mk.Cause = mk.Birth+ageCap.Milliseconds(), "cap"
			_, err := st.Meta.Put(ctx, k.PK, k.SK, meta.Encode(mk), meta.IfVer(lm.Ver))
			if err != nil && !errors.Is(err, meta.ErrConditionFailed) {
				errs = append(errs, fmt.Errorf("settle: reschedule marker %s: %w", k.SK, err))
				continue
			}
			rep.Rescheduled++
			m.markers.WithLabelValues(class, "rescheduled").Inc()
		}
	}
	return errors.Join(errs...)
}

// advanceFrontier moves the epoch's settle frontier up to its first live
// marker (or to the checkpoint when none is left). The checkpoint is read
// before the markers: a marker is written before the checkpoint passes its
// pass, so none below the checkpoint read can be missed.
func advanceFrontier(ctx context.Context, st *Stores, ch ChainRef, epoch uint64) error {
	e, err := ReadEpoch(ctx, st.Meta, ch, epoch)
	if err != nil {
		return err
	}
	first, err := FirstLive(ctx, st, ch, e)
	if err != nil {
		return err
	}
	f := meta.MarkerKey(ch.Star, ch.Class, epoch, first).SK
	c := chain.New(ch.Star, ch.Class, AuditorID, st.Meta, st.Objects)
	_, err = c.UpdateEpoch(ctx, epoch, func(e *meta.Epoch) bool {
		if e.Frontier >= f {
			return false
		}
		e.Frontier = f
		return true
	})
	if err != nil {
		return fmt.Errorf("settle: advance frontier of %s epoch %d: %w", ch, epoch, err)
	}
	return nil
}

// AuditorID names the auditor in chain handles; it never mints or fences.
const AuditorID = "auditor"
