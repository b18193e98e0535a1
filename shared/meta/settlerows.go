package meta

// Rows of chain settlement beside a chain's head (DESIGN §9): the claim
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
