package meta

// SettleFailPK is the partition of the streams whose settle failed: one
// row per stream, few by nature (a stream leaves it when a settle of it
// succeeds), so the auditor reads it whole once per settle or trim job.
const SettleFailPK = "settle-fail"

// SettleFailKey is stream's row in SettleFailPK.
func SettleFailKey(stream string) Key { return Key{PK: SettleFailPK, SK: stream} }

// SettleFail counts a stream's consecutive failed settles and, once it is
// quarantined, pins the slots its standing bytes ride: its markers then
// resolve without it, so the trim-check retires every other slot, and
// these stay until the stream settles (or is forced).
type SettleFail struct {
	Failures int    `json:"failures"` // consecutive settle jobs it failed in
	Err      string `json:"err"`      // the last failure, truncated
	At       int64  `json:"at"`       // unix ms of the last failure
	// Quarantined is when the stream was set aside (unix ms; 0: not).
	Quarantined int64 `json:"quarantined,omitempty"`
	// Basin is the stream's basin when last known (for the operator).
	Basin string    `json:"basin,omitempty"`
	Pins  []SlotPin `json:"pins,omitempty"`
}

// SlotPin keeps slots [From, End) of one chain epoch from the trim-check:
// the slots of a marker a quarantined stream was released from.
type SlotPin struct {
	Star  string `json:"star"`
	Class Class  `json:"class"`
	Epoch uint64 `json:"epoch"`
	From  uint64 `json:"from"`
	End   uint64 `json:"end"`
}
