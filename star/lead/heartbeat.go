package lead

import (
	"context"
	"errors"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// The heartbeat: this incarnation's registry row, written by Register,
// is rewritten every beat with a fresh heartbeat, the run of beats that
// landed without a gap, the streams led and the state; Stop writes it a
// last time as stopped.

// Beats is what a heartbeat reports of the star: how many streams it
// leads, whether it drains, and what to do once it turns out a zombie.
type Beats struct {
	Every    time.Duration
	Leads    func() int
	Draining func() bool
	// Superseded runs once a beat finds the row taken (the loop then
	// ends); After runs after every other beat.
	Superseded func()
	After      func()
}

// Heartbeat refreshes the registry row until ctx ends, retrying sooner
// after a failure so one slow write does not cost the star its liveness.
// A lost CAS means a later incarnation of this star id registered, or a
// peer marked this one dead: this process is a zombie and leads nothing
// more (a successor fences its chains, so it can never ack past them).
func (ls *Leadership) Heartbeat(ctx context.Context, b Beats) {
	t := time.NewTimer(b.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		reg := ls.cfg.Reg
		var newRun bool
		reg.Heartbeat = sent.UnixMilli()
		reg.ConnectedSince, newRun = ls.NextBeat(sent, ls.cfg.DeadAfter)
		reg.Leads = b.Leads()
		if b.Draining() {
			reg.State = meta.StarDraining
		}
		// A beat is not cut short by Close: a write that lands after its
		// context was cancelled would leave regVer stale, and the stopped
		// mark would then lose its CAS.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ls.cfg.DeadAfter/2)
		v, err := Beat(wctx, ls.meta, ls.me.Star, reg, ls.regVer)
		cancel()
		next := b.Every
		switch {
		case errors.Is(err, ErrSuperseded):
			ls.MarkSuperseded()
			ls.log.Error("registry: this incarnation was superseded or presumed dead by a peer; it leads no stream until restarted")
			b.Superseded()
			return
		case err != nil:
			ls.log.Warn("registry heartbeat failed", "err", err)
			ls.BeatFailed()
			next = max(b.Every/4, time.Millisecond)
		default:
			ls.regVer = v
			ls.BeatAt(sent, newRun)
		}
		b.After()
		t.Reset(next)
	}
}

// Stop marks the registry row stopped, once the heartbeat has ended:
// decommissioned after a drain that settled every chain (the janitor may
// then collect the chain garbage). A zombie's row is no longer its own:
// there is nothing to mark.
func (ls *Leadership) Stop(ctx context.Context, decommissioned bool) error {
	reg := ls.cfg.Reg
	reg.State, reg.Heartbeat = meta.StarStopped, time.Now().UnixMilli()
	reg.Decommissioned = decommissioned
	if _, err := Beat(ctx, ls.meta, ls.me.Star, reg, ls.regVer); err != nil && !errors.Is(err, ErrSuperseded) {
		return err
	}
	return nil
}
