package catalogsim

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
)

// The auditor of a swarm with Audit on: two settle runs and a janitor,
// the real shared/settle and shared/auditjob code over the simulated
// metastore (calls labelled s1, s2, j) and the shared object store.
const (
	settleEvery  = time.Second // a settle run plans and settles this often
	janitorEvery = time.Second // the janitor's passes
	// reclaimFor bounds the end of a run, after the clients stopped, in
	// which the janitor must reclaim every deleted id.
	reclaimFor = 2 * time.Minute
)

// settleConfig is the settlement policy of the stars and the auditor: a
// second at most to ripen, a small output cap and a one-second read
// grace, so a tail is extended every second or so until the revisions it
// superseded within the last two seconds fill the cap, then followed
// (issue 26 defect 3 needs both, and a settle stalled past that window
// deciding afresh).
func settleConfig(scratch string) settle.Config {
	c := settle.DefaultConfig()
	c.Trigger = 256
	timers := settle.ClassTimers{Linger: 500 * time.Millisecond, AgeCap: time.Second, Gather: -1}
	c.Standard, c.Express = timers, timers
	c.OutputCap = 2 << 10
	c.ReadGrace = time.Second
	c.Workers = 1 // two workers race for the streams: a seed would not replay
	c.ScratchDir = scratch
	c.DeadAfter = deadAfter
	return c
}

// auditor is one of the auditor's actors: a pseudo-incarnation its
// metastore calls are labelled with (never crashed, never cut off).
func (s *Sim) auditor(name string) (*incarnation, *settle.Stores) {
	inc := &incarnation{name: name, star: "auditor", state: incUp}
	inc.ctx, inc.cancel = context.WithCancel(s.auditCtx)
	mv := metaView(s, inc)
	return inc, &settle.Stores{Meta: mv, Objects: s.objs, SettledBucket: "standard", Streams: settle.MetaStreams{Meta: mv},
		Config: s.settleCfg, Logger: s.logger().With("inc", name), Now: time.Now}
}

// startAudit starts the settle runs and the janitor.
func (s *Sim) startAudit() {
	for i, name := range []string{"s1", "s2"} {
		inc, st := s.auditor(name)
		s.settlers = append(s.settlers, inc)
		offset := time.Duration(i) * settleEvery / 2
		s.task("audit-"+name, func() string {
			s.settleLoop(inc.ctx, name, st, offset)
			return "stopped"
		})
	}
	inc, st := s.auditor("j")
	s.task("audit-j", func() string {
		s.janitorLoop(inc.ctx, st)
		return "stopped"
	})
}

// sleep waits d of fake time, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// settleLoop is one settle run: every settleEvery, plan and settle every
// planned era (settle.Settle, without the era's claim, so the two runs
// can work on one era at once: what the claim avoids, a stall past its
// TTL allows).
func (s *Sim) settleLoop(ctx context.Context, name string, st *settle.Stores, offset time.Duration) {
	if !sleep(ctx, offset) {
		return
	}
	for sleep(ctx, settleEvery) {
		jobs, err := plan.Plan(ctx, st, time.Now())
		if err != nil {
			continue
		}
		for _, j := range jobs {
			if j.Kind != settle.KindSettle || ctx.Err() != nil {
				continue
			}
			rep, err := settle.Settle(ctx, st, j)
			if err != nil || rep.Objects > 0 || rep.Failed > 0 {
				s.emit(event{src: name, note: fmt.Sprintf("settle %s: %d streams settled, %d objects committed, %d failed: %s", j, rep.Settled, rep.Objects, rep.Failed, errString(err))})
			}
		}
	}
}

// janitorLoop runs the janitor's passes that reclaim (retention, which
// also finishes deletes; the deleted streams; the superseded revisions)
// and reports each pass that found deleted streams still registered.
func (s *Sim) janitorLoop(ctx context.Context, st *settle.Stores) {
	for sleep(ctx, janitorEvery) {
		now := time.Now()
		_, rerr := auditjob.Retention(ctx, st, now)
		del, derr := reclaim.ReclaimStreams(ctx, st, now)
		rec, cerr := reclaim.Reclaim(ctx, st, now)
		note := fmt.Sprintf("janitor: %d deleted streams (%d rows, %d objects, %d done), %d reclaim entries (%d resolved, %d orphans, %d pending)",
			del.Streams, del.Rows, del.Objects, del.Done, rec.Entries, rec.Resolved, rec.Orphans, rec.Pending)
		clean := rerr == nil && derr == nil && cerr == nil && del.Streams == 0
		s.emit(event{src: "j", note: note, janitor: true, clean: clean})
	}
}

// newScratch is the settle runs' scratch folder of one run.
func newScratch() string {
	dir, err := os.MkdirTemp("", "catalogsim-scratch-")
	if err != nil {
		panic(err)
	}
	return dir
}

// unreclaimed describes the first id no longer under its name that
// still has a ref row (span ref, catalog row) or a registration for
// reclamation ("" when there is none).
func (c *checker) unreclaimed() string {
	t := c.s.meta
	for _, id := range c.order {
		st := c.ids[id]
		if c.namedNow(st) {
			continue
		}
		rows := 0
		for sk := range t.Items["stream#"+id] {
			if strings.HasPrefix(sk, meta.RefPrefix) {
				rows++
			}
		}
		rk := meta.ReclaimStreamKey(id)
		_, registered := t.Lookup(rk.PK, rk.SK)
		if rows > 0 || registered {
			return fmt.Sprintf("stream %s/%s id %s is deleted (the name now: %s), but has %d ref rows (registered for reclamation: %v)",
				st.basin, st.name, abbrev(id), c.describe(st.basin, st.name), rows, registered)
		}
	}
	return ""
}

// checkReclaimed is the end of a run's check that every deleted id was
// reclaimed (unreclaimed), once the janitor ran reclaimFor after the
// clients stopped without a pass that left nothing deleted.
func (c *checker) checkReclaimed() {
	c.checks++
	if d := c.unreclaimed(); d != "" {
		c.fail("reclaimed", fmt.Sprintf("%v after the clients stopped, the janitor has not reclaimed every deleted id: %s", reclaimFor, d))
	}
}
