package meta

import (
	"encoding/json"
	"fmt"
)

// The row schema (docs/design.md §5). Every number inside a key is zero-padded to
// 20 digits so that string order is numeric order. Values are JSON: rows are
// written off the ack path, rarely, and legibility beats a few bytes.

// Class is a stream's storage class, and so the chain its records ride.
type Class string

const (
	Standard Class = "standard"
	Express  Class = "express"
)

// Valid reports whether c is a known class.
func (c Class) Valid() bool { return c == Standard || c == Express }

func pad(n uint64) string { return fmt.Sprintf("%020d", n) }

// BasinKey is the basin config row.
func BasinKey(basin string) Key { return Key{PK: "basin#" + basin, SK: "cfg"} }

// StreamNameKey maps a stream name to its id and config.
func StreamNameKey(basin, name string) Key { return Key{PK: "basin#" + basin, SK: "s#" + name} }

// StreamMetaKey is a stream id's identity row, written once (IfAbsent) when
// the stream is created, before its first append. Span refs carry only the
// stream id, but settled-object keys name the basin: the auditor reads the
// basin here with one point read per stream per settle job, never a scan.
func StreamMetaKey(streamID string) Key { return Key{PK: "stream#" + streamID, SK: "meta"} }

// StreamMeta is the value of stream#<id>/meta. It never changes: a deleted
// stream keeps it (its tombstone says it is deleted), and a re-created name
// gets a new id and a new row.
type StreamMeta struct {
	Basin string `json:"basin"`
	Name  string `json:"name"`
	Class Class  `json:"class"`
}

// LeaseKey is a stream's leadership lease.
func LeaseKey(streamID string) Key { return Key{PK: "stream#" + streamID, SK: "lease"} }

// RefPrefix is the sort-key prefix of a stream's span refs and catalog rows.
const RefPrefix = "r#"

// RefKey is the span ref or catalog row keyed by the first seq it covers.
func RefKey(streamID string, firstSeq uint64) Key {
	return Key{PK: "stream#" + streamID, SK: RefPrefix + pad(firstSeq)}
}

// FloorQuery finds the row covering seq: the greatest ref key ≤ seq.
func FloorQuery(streamID string, seq uint64) Query {
	return Query{PK: "stream#" + streamID, From: RefPrefix, To: RefPrefix + pad(seq), Backward: true, Limit: 1}
}

// RegistryKey is a star's registry row.
func RegistryKey(star string) Key { return Key{PK: "star#" + star, SK: "reg"} }

// StarDirKey lists a star in the star directory (value empty), written
// IfAbsent at each start before the registration (the first start of an
// id creates it), so peers find every star's registry row without a scan.
func StarDirKey(star string) Key { return Key{PK: "stars", SK: star} }

// TokensPK is the partition of access tokens, one row per token id
// (star/server/tokens.go): the keyed hash of the token, never the token,
// and its info (scope, expiry). Revoking deletes the row.
const TokensPK = "tokens"

// TokenKey is the row of the access token id.
func TokenKey(id string) Key { return Key{PK: TokensPK, SK: id} }

// ChainPK is the partition of one chain's head, epochs and markers.
func ChainPK(star string, class Class) string { return "chain#" + star + "/" + string(class) }

// HeadKey is a chain's mint head.
func HeadKey(star string, class Class) Key { return Key{PK: ChainPK(star, class), SK: "head"} }

// EpochKey is one epoch's record.
func EpochKey(star string, class Class, epoch uint64) Key {
	return Key{PK: ChainPK(star, class), SK: "e#" + pad(epoch)}
}

// MarkerPrefix is the sort-key prefix of a chain's batch markers.
const MarkerPrefix = "m#"

// MarkerKey is the batch marker of the absorb pass that starts at slot.
func MarkerKey(star string, class Class, epoch, slot uint64) Key {
	return Key{PK: ChainPK(star, class), SK: MarkerPrefix + pad(epoch) + "/" + pad(slot)}
}

// MarkerShardPrefix is the sort-key prefix of the shards of the batch
// markers' stream sets: apart from the markers, so a scan of markers never
// reads stream lists.
const MarkerShardPrefix = "ms#"

// MarkerShardKey is shard i of the stream set of the marker at slot.
func MarkerShardKey(star string, class Class, epoch, slot uint64, i int) Key {
	return Key{PK: ChainPK(star, class), SK: MarkerShardPrefix + pad(epoch) + "/" + pad(slot) + "/" + pad(uint64(i))}
}

// Marker stream sets: a pass's streams fit in its marker row up to
// MarkerInlineBytes of ids; a larger set goes to shard rows of at most
// MarkerShardBytes of ids each, so no item grows with the stream count
// (DynamoDB refuses items over 400 KB: about 11,500 ids of 32 hex digits).
const (
	MarkerInlineBytes = 1 << 10
	MarkerShardBytes  = 32 << 10
)

// ShardStreams cuts a sorted stream set into the marker's layout: nil when
// it fits inline, otherwise the shards in order, each of at most
// MarkerShardBytes of ids (an id longer than that gets a shard alone).
// Deterministic: one set, one layout, so every absorber of a pass writes the
// same shard rows.
func ShardStreams(ids []string) [][]string {
	total := 0
	for _, id := range ids {
		total += len(id) + 3 // the quotes and comma of its JSON
	}
	if total <= MarkerInlineBytes {
		return nil
	}
	var out [][]string
	var cur []string
	size := 0
	for _, id := range ids {
		n := len(id) + 3
		if len(cur) > 0 && size+n > MarkerShardBytes {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, id)
		size += n
	}
	return append(out, cur)
}

// MarkerShardedStream stands alone in the Streams of a marker whose set is
// in shard rows. No stream has that id, so a settler of an earlier build,
// which reads only Streams, finds the stream unknown and leaves the marker
// alone instead of resolving it with its streams unsettled.
const MarkerShardedStream = "~sharded"

// MarkerShard is one shard row of a marker's stream set.
type MarkerShard struct {
	Streams []string `json:"streams"`
}

// ChainDirKey lists a chain in the chain directory.
func ChainDirKey(star string, class Class) Key {
	return Key{PK: "chains", SK: star + "/" + string(class)}
}

// HeadState is the state of a chain's current epoch.
type HeadState string

const (
	HeadOpen    HeadState = "open"    // Owner writes the epoch
	HeadFencing HeadState = "fencing" // Fencer is fencing it; Cut once recorded
	HeadSettled HeadState = "settled" // fenced, walked, absorbed, probed
)

// Head is the mint head of a chain: the current epoch and who may write it.
// The epoch's parameters are minted here first (the CAS that decides the
// mint) and copied to its epoch record.
type Head struct {
	Epoch  uint64      `json:"epoch"`
	State  HeadState   `json:"state"`
	Owner  string      `json:"owner"`            // incarnation that minted Epoch
	Fencer string      `json:"fencer,omitempty"` // incarnation fencing Epoch
	Cut    *uint64     `json:"cut,omitempty"`
	Params EpochParams `json:"params"`
}

// EpochParams are fixed when an epoch is minted.
type EpochParams struct {
	Buckets []string `json:"buckets"` // the bucket set, K = len(Buckets)
	W       int      `json:"w"`
	Window  int      `json:"window"` // slots assignable ahead of release
	Nonce   string   `json:"nonce"`  // hex of the writer's 128-bit nonce
	// PassSlots is the most slots one of the writer's own absorb passes
	// takes (its AbsorbMaxSlots): a chain settlement's walk passes no more,
	// so a marker it records and leaves stays one the writer can complete.
	// 0 in records minted before it was kept (a walk then takes 6,144).
	PassSlots int `json:"pass_slots,omitempty"`
}

// K is the size of the bucket set.
func (p EpochParams) K() int { return len(p.Buckets) }

// Validate checks 1 ≤ W ≤ K and a positive window.
func (p EpochParams) Validate() error {
	if p.K() == 0 || p.W < 1 || p.W > p.K() {
		return fmt.Errorf("meta: epoch params: need 1 ≤ W ≤ K, have W=%d K=%d", p.W, p.K())
	}
	if p.Window < 1 {
		return fmt.Errorf("meta: epoch params: window %d < 1", p.Window)
	}
	return nil
}

// Epoch is one epoch's record. Every cursor only moves forward.
type Epoch struct {
	Epoch      uint64      `json:"epoch"`
	Owner      string      `json:"owner"`
	Params     EpochParams `json:"params"`
	Checkpoint uint64      `json:"checkpoint"`    // every slot below is absorbed
	Cut        *uint64     `json:"cut,omitempty"` // first dead slot, once fenced
	Settled    bool        `json:"settled,omitempty"`
	Rewritten  uint64      `json:"rewritten"` // slots below have no live marker
	Trimmed    uint64      `json:"trimmed"`   // slots below are deleted
	// Reaped: the trim deleted the flight copies left in the garbage
	// window [cut, cut+window) (their poison stays).
	Reaped   bool   `json:"reaped,omitempty"`
	Frontier string `json:"frontier,omitempty"`
	// Rewrites are the rewritten cursor's advances not yet trimmed, with
	// when the trim-check saw them: a slot is deleted only once the read
	// grace has passed since its marker was seen resolved.
	Rewrites []Rewrite `json:"rewrites,omitempty"`
}

// Rewrite records that the rewritten cursor reached Upto at unix ms At.
type Rewrite struct {
	Upto uint64 `json:"upto"`
	At   int64  `json:"at"`
}

// SlotRef locates one stream's records in one slot.
type SlotRef struct {
	Slot     uint64 `json:"slot"`
	FirstSeq uint64 `json:"first"`
	Count    uint64 `json:"n"`
	Offset   uint64 `json:"off"` // object-absolute byte offset of the stream's blocks
	Length   uint64 `json:"len"`
}

// Ref is the floor-lookup target of a stream at its first seq: a span ref
// (Span set: records in an epoch's transit bundles, written by the absorb)
// or a catalog row (Settled set: records in one settled object, swapped in
// by the settle's visibility CAS). Either way the row is its own seal: it
// carries the extent and cumulative fields every later guard reads.
type Ref struct {
	FirstSeq     uint64 `json:"first"`
	EndSeq       uint64 `json:"end"`
	CumBytes     uint64 `json:"cum_bytes"` // the stream's metered bytes below EndSeq
	MinTimestamp uint64 `json:"min_ts"`
	MaxTimestamp uint64 `json:"max_ts"`
	FencingToken string `json:"token,omitempty"` // the stream's token as of EndSeq
	TrimPoint    uint64 `json:"trim,omitempty"`  // the stream's trim point as of EndSeq

	Span    *Span    `json:"span,omitempty"`
	Settled *Settled `json:"settled,omitempty"`
}

// Span locates a ref's records in one epoch of one chain.
type Span struct {
	Class Class     `json:"class"`
	Star  string    `json:"star"`
	Epoch uint64    `json:"epoch"`
	Slots []SlotRef `json:"slots"`
}

// Settled names the settled object holding a catalog row's window; its key
// is derivable (streams/<basin>/<streamID>/<epoch>/<firstSeq>[~<revision>]).
type Settled struct {
	Epoch    uint64 `json:"epoch"`
	FirstSeq uint64 `json:"first"`
	Revision uint64 `json:"rev,omitempty"`
	Bytes    uint64 `json:"bytes"`
	// Recent are the earlier revisions of this object superseded lately,
	// which may still be in storage: the settle extends the object only
	// while they and the object together stay within the output cap.
	Recent []Superseded `json:"recent,omitempty"`
	// Sealed: a settle decided that the next object starts after this one
	// (written by CAS before that object commits), so this row is never
	// extended again and, once followed, never changes (docs/settle.md).
	Sealed bool `json:"sealed,omitempty"`
	// Trimmed: every record of the object is below the stream's trim
	// point or past its retention age, and the row is the stream's
	// greatest catalog row when the trim marked it (written with Sealed,
	// by CAS, after the object's reclaim entry is marked Drop). The row
	// stays for the stream's tail (next seq, last timestamp, fencing
	// token, trim point); readers skip its records and the reclaim deletes
	// its object a read grace later (docs/settle.md, "Retention and
	// trims").
	Trimmed bool `json:"trimmed,omitempty"`
}

// Superseded is a revision of a settled object replaced at unix ms At.
type Superseded struct {
	Rev   uint64 `json:"rev"`
	Bytes uint64 `json:"bytes"`
	At    int64  `json:"at"`
}

// Marker is the batch marker of one absorb pass of a chain.
type Marker struct {
	Epoch    uint64 `json:"epoch"`
	FromSlot uint64 `json:"from"`
	EndSlot  uint64 `json:"end"`
	Birth    int64  `json:"birth"` // unix ms
	Ripen    int64  `json:"ripen"` // unix ms
	Cause    string `json:"cause"` // "linger" or "cap"
	// Streams is the pass's stream set when it fits inline; otherwise it
	// is MarkerShardedStream alone and Shards says how many shard rows
	// (MarkerShardKey) hold it. The shards are written after the marker and before the pass's
	// refs, so every marker below the checkpoint has all of its shards.
	Streams []string `json:"streams,omitempty"`
	Shards  int      `json:"shards,omitempty"`
	// Bytes are the block bytes of the pass (0 on markers written before
	// the field existed): the auditor's unsettled-bytes gauge sums them.
	Bytes uint64 `json:"bytes,omitempty"`
}

// Encode marshals a row value.
func Encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil { // only unsupported types fail, and rows have none
		panic(fmt.Sprintf("meta: encode %T: %v", v, err))
	}
	return b
}

// Decode unmarshals a row value, naming the row in the error.
func Decode(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("meta: decode %T: %w", v, err)
	}
	return nil
}

// From returns the part of the span from seq on, when seq is the first seq
// of one of its slot refs.
func (s *Span) From(seq uint64) (*Span, bool) {
	for i, sl := range s.Slots {
		if sl.FirstSeq == seq {
			out := *s
			out.Slots = append([]SlotRef(nil), s.Slots[i:]...)
			return &out, true
		}
	}
	return nil, false
}

// Registry states of a star (docs/design.md §5). A star that shuts down cleanly
// writes stopped, so peers need not wait for its heartbeat to age.
const (
	StarLive     = "live"
	StarDraining = "draining"
	StarStopped  = "stopped"
	StarDead     = "dead"
)

// Registration is the value of the registry row star#<id>/reg.
type Registration struct {
	// Incarnation counts the star's process starts; each start CASes it up
	// by one, so the row's history totally orders incarnations.
	Incarnation uint64 `json:"incarnation"`
	// Address is where peers reach the star's API (forwarded requests).
	Address   string `json:"address,omitempty"`
	State     string `json:"state"`
	StartedAt int64  `json:"started_at"` // unix ms
	Heartbeat int64  `json:"heartbeat"`  // unix ms
	// ConnectedSince is the heartbeat (unix ms) that began the star's
	// current run of heartbeats landing without a gap: its registration,
	// or the first beat after one that failed. Peers take a run that
	// spans a whole dead-after bound after another star's last heartbeat
	// as evidence that the metastore was reachable while that star failed
	// to beat (leader.PresumeDead). 0 in rows written before the field
	// existed: read as StartedAt.
	ConnectedSince int64 `json:"connected_since,omitempty"`
	// Leads is how many streams the star had open as leader at its last
	// heartbeat (the balancer compares it to the fair share).
	Leads int `json:"leads,omitempty"`
	// Decommissioned says the incarnation stopped after a decommission:
	// its drain settled its chains and its terminate gate opened, so its
	// host is terminated and no process of this or an earlier incarnation
	// writes again. The janitor then collects the star's chain garbage
	// (settle.CollectChains). A later start writes a fresh row without it.
	Decommissioned bool `json:"decommissioned,omitempty"`
}

// LeaseHolder names one incarnation of a star.
type LeaseHolder struct {
	Star        string `json:"star"`
	Incarnation uint64 `json:"inc"`
}

// Lease is the value of stream#<id>/lease: the stream's leader. It is
// valid while its holder's registration is live, so it costs no write per
// stream per second; a successor takes it over by CAS.
type Lease struct {
	LeaseHolder
	// Version counts acquisitions of the stream's lease (1 for the first).
	Version    uint64 `json:"version"`
	AcquiredAt int64  `json:"acquired_at"` // unix ms, informational
	// Pending are earlier holders whose chains may still hold acknowledged
	// records of the stream that no row covers: the holder settles them
	// (the open gate) before it serves, then clears the list. A successor
	// that takes the lease over before that inherits them.
	Pending []LeaseHolder `json:"pending,omitempty"`
	// Released says the holder gave the stream up cleanly with rows
	// covering every record below Frontier (handoff, graceful close): a
	// successor opens there without settling the holder's chain.
	Released bool   `json:"released,omitempty"`
	Frontier uint64 `json:"frontier,omitempty"`
	// To is the star a handoff released the lease to: while it is live,
	// every other star forwards to it instead of taking the lease.
	To string `json:"to,omitempty"`
	// Emptied says the auditor took the lease to delete the stream under
	// its delete_on_empty config (Holder names EmptiedBy): no star takes
	// it or appends, so the stream stays as empty as the auditor judged
	// it while its deletion is written.
	Emptied bool `json:"emptied,omitempty"`
	// Deleted says the stream was deleted and its lease retired (Holder
	// names DeletedBy): no star takes it or appends, so once a name
	// moves to a new stream id no star acknowledges into the old one.
	Deleted bool `json:"deleted,omitempty"`
}

// EmptiedBy is the holder of an Emptied lease: no star's name.
const EmptiedBy = "~auditor"

// DeletedBy is the holder of a Deleted lease: no star's name.
const DeletedBy = "~deleted"
