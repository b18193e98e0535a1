package meta

// Rows of chain settlement beside a chain's head (docs/design.md §9): the claim
// concurrent settlers serialise on, and the durable settle marker a
// closing star leaves for its unsettled chain.

// SettleClaimKey is the claim one settler of a chain holds while it runs.
func SettleClaimKey(star string, class Class) Key {
	return Key{PK: ChainPK(star, class), SK: "claim"}
}

// SettleClaim names the settler running on a chain and until when its
// claim holds unless renewed. It orders work only: every settle step is
// idempotent and CAS-guarded, so an expired claim (a settler that died,
// or clocks that disagree) costs duplicate work, never correctness.
type SettleClaim struct {
	Holder string `json:"holder"`
	Until  int64  `json:"until"` // unix ms
}

// SettleDueKey is a chain's durable settle marker.
func SettleDueKey(star string, class Class) Key {
	return Key{PK: ChainPK(star, class), SK: "due"}
}

// SettleDue is written by a star closing gracefully for each chain it
// leaves unsettled: Owner will never write Epoch again, so any settler
// may fence it even while the star's registration still looks live (the
// crash insurance of a close that dies before it deregisters).
type SettleDue struct {
	Owner string `json:"owner"` // the incarnation that minted Epoch
	Epoch uint64 `json:"epoch"`
	At    int64  `json:"at"` // unix ms
}

// ReclaimPK is the partition of the auditor's reclaim entries: one per
// tail object a settle decided whether to extend (docs/settle.md,
// "Reclamation"). One partition for now: an entry is written once per
// settle round that finds a tail, far below a partition's write rate.
const ReclaimPK = "reclaim"

// ReclaimKey is the reclaim entry of revision rev of the settled object
// (streamID, epoch, first): derivable from the tail's catalog row, so a
// settle re-run finds the decision an earlier run made.
func ReclaimKey(streamID string, epoch, first, rev uint64) Key {
	return Key{PK: ReclaimPK, SK: streamID + "/" + pad(epoch) + "/" + pad(first) + "/" + pad(rev)}
}

// Reclaim is a reclaim entry, written (IfAbsent) by a settle before it
// publishes the object that follows a stream's tail. Extend records the
// decision: the next object is the tail's next revision (the tail is then
// superseded, and deleted a read grace after a reclaim pass saw the
// catalog row name the later revision), or a new object after the tail
// (the entry only keeps the decision until that object is committed).
// A trim or retention that deletes a catalog row first writes (or marks)
// the entry of the row's object with Drop.
type Reclaim struct {
	Basin  string `json:"basin"`
	Stream string `json:"stream"`
	Epoch  uint64 `json:"epoch"`
	First  uint64 `json:"first"`
	Rev    uint64 `json:"rev"`
	Bytes  uint64 `json:"bytes"`
	Extend bool   `json:"extend"`
	// Drop: a trim or retention is deleting the object's catalog row, so
	// the object goes once no row names it, whatever Extend says.
	Drop bool `json:"drop,omitempty"`
	// Armed is when (unix ms) a reclaim pass first saw no row name the
	// object; it is deleted a read grace later. 0: not seen yet.
	Armed int64 `json:"armed,omitempty"`
}

// ReclaimStreamsPK is the partition of deleted streams whose rows and
// settled objects the janitor is reclaiming: one row per stream id (sk),
// written when the janitor first sees the stream deleted, so the work
// finishes even after the name is re-created (the new stream has a new
// id).
const ReclaimStreamsPK = "reclaim-streams"

// ReclaimStreamKey is a deleted stream's reclamation row.
func ReclaimStreamKey(streamID string) Key { return Key{PK: ReclaimStreamsPK, SK: streamID} }

// ReclaimStream is the value of a deleted stream's reclamation row.
type ReclaimStream struct {
	Basin  string `json:"basin"`
	Stream string `json:"stream"`
	// Armed is when (unix ms) a pass first found none of the stream's ref
	// rows left; its objects are deleted a read grace later. 0: not yet.
	Armed int64 `json:"armed,omitempty"`
}
