// Package plan is the auditor's plan job: for every chain, the settle
// jobs of its eras of ripe markers and its trim-check when one is due.
// Planning is split as absorb.Plan is: Plan (read.go) reads each chain's
// epoch records and live markers into a ChainView, and PlanOf turns a view
// into the chain's jobs without I/O. It sits above shared/settle, whose
// jobs it plans and whose marker and epoch rules (settle.Ripe, Due,
// DueTrim, …) it reads.
package plan

import (
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// Everything in this file is pure.

// Era is a contiguous run of one epoch's due markers: [From, End) in slots.
type Era struct {
	From, End uint64
	Markers   int // due markers in the run
	Slots     int // slots of those markers
}

// CutEras cuts an epoch's live markers (ascending by first slot) into
// eras: maximal runs of due markers (settle.Due) that start at a ripe
// one and are not interrupted by a marker that is not due, each of at most
// maxSlots slots and maxBytes bytes (a single larger ripe marker is an era
// of its own). Slots between markers of a run are already resolved. Pure.
func CutEras(markers []meta.Marker, checkpoint uint64, now time.Time, gather time.Duration, maxSlots int, maxBytes uint64) []Era {
	var eras []Era
	var cur *Era
	var curBytes uint64
	for _, m := range markers {
		if !settle.Due(m, checkpoint, now, gather) {
			cur = nil
			continue
		}
		n := int(m.EndSlot - m.FromSlot)
		if cur != nil && (cur.Slots+n > maxSlots || curBytes+m.Bytes > maxBytes) {
			cur = nil
		}
		if cur == nil {
			if !settle.Ripe(m, checkpoint, now) {
				continue // gathered only behind a ripe marker
			}
			eras = append(eras, Era{From: m.FromSlot})
			cur, curBytes = &eras[len(eras)-1], 0
		}
		cur.End = m.EndSlot
		cur.Markers++
		cur.Slots += n
		curBytes += m.Bytes
	}
	return eras
}

// EpochView is one epoch record as Plan read it and, when Plan read its
// markers (Scanned: the epoch has slots below its checkpoint that are not
// rewritten, and the chain's marker budget was not spent), its live
// markers from the settle frontier up, ascending by first slot. A marker
// row that did not decode stands as a marker that never ripens (scanMarkers).
type EpochView struct {
	Epoch   meta.Epoch
	Scanned bool
	Markers []meta.Marker
}

// ChainView is what Plan reads of one chain: its epoch records, ascending.
type ChainView struct {
	Chain  settle.ChainRef
	Epochs []EpochView
	// Decommissioned is whether the chain's garbage may be collected (its
	// star stopped after a decommission, its head settled): read only when
	// a plan asks for it (ChainPlan.AskDecommissioned).
	Decommissioned bool
}

// ChainPlan is one chain's due work and its share of Plan's gauges.
type ChainPlan struct {
	// Jobs: one settle job per era, in epoch and slot order, then the
	// chain's trim-check when one is due.
	Jobs []settle.Job
	// AskDecommissioned: every epoch record is spent and nothing else makes
	// a trim-check due, so one is due exactly when the star is
	// decommissioned: the planner reads that and plans again.
	AskDecommissioned bool
	// Lag is how long the oldest ripe marker read has been ripe, TrimLag
	// how long the oldest rewrite not yet trimmed has waited, Unsettled
	// the bytes of the markers read.
	Lag, TrimLag time.Duration
	Unsettled    uint64
}

// PlanOf plans one chain from what Plan read of it (docs/settle.md,
// "Plan"): one settle job per era of due markers (CutEras, with the
// class's gather and cfg's era bounds), and one trim-check when the
// chain's rewritten cursor can advance (the first live marker read, or the
// checkpoint, is past it), a recorded rewrite has waited out the read
// grace past the trimmed cursor, a recorded rewrite is stale, a settled
// epoch's garbage window is due for its reap, or every epoch is spent and
// the star is decommissioned (its garbage collection). Pure.
func PlanOf(v ChainView, cfg settle.Config, now time.Time) ChainPlan {
	var p ChainPlan
	cfg = cfg.WithDefaults()
	gather := cfg.Timers(v.Chain.Class).EraGather()
	trimDue := false
	epochs := make([]meta.Epoch, len(v.Epochs))
	for i, ev := range v.Epochs {
		e := ev.Epoch
		epochs[i] = e
		if due, ok := settle.DueTrim(e, now, cfg.ReadGrace); ok && due > e.Trimmed || settle.StaleRewrites(e) || settle.GarbageDue(e) {
			trimDue = true
		}
		for _, rw := range e.Rewrites {
			if rw.Upto > e.Trimmed {
				p.TrimLag = max(p.TrimLag, now.Sub(time.UnixMilli(rw.At)))
			}
		}
		if !ev.Scanned {
			continue // no live marker below the checkpoint, or none read now
		}
		firstLive := e.Checkpoint
		if len(ev.Markers) > 0 {
			firstLive = min(firstLive, ev.Markers[0].FromSlot)
		}
		if firstLive > e.Rewritten {
			trimDue = true
		}
		for _, m := range ev.Markers {
			p.Unsettled += m.Bytes
			if settle.Ripe(m, e.Checkpoint, now) {
				p.Lag = max(p.Lag, now.Sub(time.UnixMilli(m.Ripen)))
			}
		}
		for _, era := range CutEras(ev.Markers, e.Checkpoint, now, gather, cfg.EraMaxSlots, cfg.EraMaxBytes) {
			p.Jobs = append(p.Jobs, settle.Job{Kind: settle.KindSettle, Chain: v.Chain, Epoch: e.Epoch, From: era.From, End: era.End})
		}
	}
	if !trimDue && settle.CollectDue(epochs) {
		// A chain whose epochs are all spent: its trim-check collects the
		// garbage if its star is decommissioned.
		p.AskDecommissioned = true
		trimDue = v.Decommissioned
	}
	if trimDue {
		p.Jobs = append(p.Jobs, settle.Job{Kind: settle.KindTrim, Chain: v.Chain})
	}
	return p
}
