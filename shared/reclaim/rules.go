package reclaim

import (
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// TrimPlan is what one trim of a stream's catalog rows does with the rows
// it read (PlanTrim).
type TrimPlan struct {
	// Drop is how many rows, from the first, go: each row's object gets a
	// reclaim entry marked Drop, then the row is deleted, oldest first.
	Drop int
	// Reserve: the row after them may go by the policy, but the storage
	// bound defers it: its entry is marked Drop and the row stays.
	Reserve bool
	// MarkTrimmed: the row after them is the stream's greatest catalog
	// row and all its records are past the policy: its entry is marked
	// Drop, then the row is marked Trimmed and Sealed (it stays for the
	// stream's tail; readers skip it; the reclaim deletes its object).
	MarkTrimmed bool
}

// PlanTrim decides a trim of stream id's rows (docs/settle.md,
// "Retention and trims"), given them in seq order from the first, the
// stream's trim point, the age cut (unix ms; 0: no age limit), what the
// stream already has waiting for the reclaim (w: read when the first row
// may go, else unused) and the output cap. Rows go oldest first while
// they are trimmable (a catalog row chained to a following catalog row,
// all of whose records are below the trim point or older than the cut,
// or which an earlier trim marked Trimmed: never a record its policy
// still keeps) and fit the storage bound (trimFits); it stops at the
// first row it keeps, so the rows left still chain. The stream's greatest
// catalog row is never deleted (it carries the stream's tail): when every
// row before it goes and all its records are past the policy, it is
// marked Trimmed instead, under the same bound. Pure.
func PlanTrim(id string, rows []meta.Ref, trim, cut uint64, w settle.Waiting, outputCap uint64) TrimPlan {
	var retained uint64
	greatest := -1
	for i, r := range rows {
		if r.Settled != nil {
			greatest = i
			if !r.Settled.Trimmed {
				retained += r.Settled.Bytes
			}
		}
	}
	dropped := w.Dropped
	var p TrimPlan
	for i := 0; i <= greatest; i++ {
		r := rows[i]
		if i < greatest && !trimmable(r, rows[i+1], trim, cut) || i == greatest && !forgettable(r, trim, cut) {
			break
		}
		s := r.Settled
		if s.Trimmed {
			// Marked by an earlier trim: its object already waits for
			// the reclaim (or is gone), so deleting the row adds nothing.
			p.Drop++
			continue
		}
		sk := meta.ReclaimKey(id, s.Epoch, s.FirstSeq, s.Revision).SK
		pending := w.Superseded + dropped - w.Drops[sk] // without its own reservation
		if !trimFits(pending, s.Bytes, retained, outputCap) {
			// Reserve: the settle stops extending (its bound counts the
			// reservation) until the reclaim has deleted what waits.
			p.Reserve = true
			break
		}
		if i == greatest {
			p.MarkTrimmed = true
			break
		}
		if w.Drops[sk] == 0 {
			dropped += s.Bytes
		}
		retained -= s.Bytes
		p.Drop++
	}
	return p
}

// trimFits is the storage bound's rule for a trim: the object of b bytes
// may move from retained to waiting (for the reclaim, a grace) only while
// everything waiting stays within a tenth of what is retained after it
// plus one output cap, so stored ≤ 1.1 × retained + cap holds; or when
// nothing else waits, so a trim always progresses (an object larger than
// that bound goes alone). Pure.
func trimFits(pending, b, retained, outputCap uint64) bool {
	return pending == 0 || pending+b <= outputCap+(retained-b)/10
}

// trimmable reports whether catalog row r may go, given the row after it:
// a catalog row follows it (so r is not the stream's greatest catalog
// row) and chains from it, and all of r's records are below the trim
// point or older than cut (unix ms; 0: no age limit), or an earlier trim
// marked r Trimmed. Pure.
func trimmable(r, next meta.Ref, trim, cut uint64) bool {
	if r.Settled == nil || next.Settled == nil || next.FirstSeq != r.EndSeq {
		return false
	}
	return r.Settled.Trimmed || expired(r, trim, cut)
}

// forgettable reports whether the stream's greatest catalog row r is to
// be marked Trimmed: not marked yet, and all its records past the policy.
// Pure.
func forgettable(r meta.Ref, trim, cut uint64) bool {
	return r.Settled != nil && !r.Settled.Trimmed && expired(r, trim, cut)
}

// expired reports whether all of row r's records are below the trim
// point or older than cut (unix ms; 0: no age limit). Pure.
func expired(r meta.Ref, trim, cut uint64) bool {
	return r.EndSeq <= trim || cut > 0 && r.MaxTimestamp < cut
}
