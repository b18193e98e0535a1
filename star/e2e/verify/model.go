package verify

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/starlog/starlog/shared/api"
)

// Kind is what a client operation does.
type Kind uint8

const (
	// KindAppend appends one batch.
	KindAppend Kind = iota
	// KindRead reads up to Count records from seq From (unary, no wait).
	KindRead
	// KindCheckTail asks for the stream's tail.
	KindCheckTail
)

func (k Kind) String() string {
	switch k {
	case KindAppend:
		return "append"
	case KindRead:
		return "read"
	case KindCheckTail:
		return "check-tail"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Input is one operation as the model sees it. Records are kept as hashes
// (see RecordHash): the model needs only to tell records apart.
type Input struct {
	Stream string
	Kind   Kind

	// Append.
	Records []uint64
	// FenceTo is the token the batch's last fence command record sets;
	// nil when the batch has no fence record.
	FenceTo      *string
	MatchSeqNum  *uint64
	FencingToken *string
	// Label names the batch for humans (its first record's body).
	Label string

	// Read.
	From  uint64
	Count uint64
}

// Outcome is how an operation ended.
type Outcome uint8

const (
	// OutOK is a success: an ack, records, or a tail.
	OutOK Outcome = iota
	// OutSeqMismatch is a definite 412 seq_num_mismatch (Tail: the
	// stream's next seq num).
	OutSeqMismatch
	// OutTokenMismatch is a definite 412 fencing_token_mismatch (Token: the
	// stream's token).
	OutTokenMismatch
	// OutRangeNotSatisfiable is a 416 of a read at or past the tail (Tail).
	OutRangeNotSatisfiable
	// OutUnknown is an indefinite failure: the append may or may not have
	// been applied. Such an operation gets an infinite return time, so the
	// checker may place it anywhere after its call, including after every
	// other operation (where it is indistinguishable from "never
	// happened").
	OutUnknown
	// OutObserved is an indefinite failure of an append whose records a
	// read returned: the append happened, before that read returned (the
	// history gives it that read's return time, see History.Operations).
	OutObserved
)

func (o Outcome) String() string {
	switch o {
	case OutOK:
		return "ok"
	case OutSeqMismatch:
		return "412 seq"
	case OutTokenMismatch:
		return "412 token"
	case OutRangeNotSatisfiable:
		return "416"
	case OutUnknown:
		return "unknown"
	case OutObserved:
		return "observed"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Output is an operation's result as the model sees it.
type Output struct {
	Outcome Outcome
	// Start and End are an append ack's [start, end), or where a read
	// placed an observed append's records (Placed).
	Start, End uint64
	// Placed says an OutObserved append's Start is known: a read returned
	// one of its records, which no other append carries, at its seq.
	Placed bool
	// Tail is a check-tail's tail, a 412 seq mismatch's expected seq or a
	// 416's tail.
	Tail uint64
	// Token is the stream's token carried by a 412 token mismatch.
	Token string
	// Records are the hashes of a read's records, from Input.From on.
	Records []uint64
}

// RecordHash identifies a record by its headers (but an idempotent
// producer's mark) and body (FNV-1a over a
// length-prefixed encoding, so header and body boundaries count).
func RecordHash(r *api.Record) uint64 {
	h := fnv.New64a()
	var n [8]byte
	put := func(b []byte) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	// An idempotent producer's mark is left out: the Kafka face adds it
	// to the first record of each batch it appends, which its client
	// cannot tell (kafka.go); every record's body is unique anyway.
	headers := 0
	for _, hd := range r.Headers {
		if !isProducerMark(hd.Name) {
			headers++
		}
	}
	binary.LittleEndian.PutUint64(n[:], uint64(headers))
	h.Write(n[:])
	for _, hd := range r.Headers {
		if isProducerMark(hd.Name) {
			continue
		}
		put(hd.Name)
		put(hd.Value)
	}
	put(r.Body)
	return h.Sum64()
}

// isProducerMark reports whether a header is one of the S2 face's
// idempotent producer headers (api.HeaderProducer and its kin).
func isProducerMark(name []byte) bool {
	return bytes.HasPrefix(name, []byte(api.HeaderProducer))
}

// state is the model's view of one stream. It is immutable: Step returns
// a new state sharing the older batches.
type state struct {
	tail  uint64
	token string
	// chain is a chained hash of every record in seq order: two states
	// with equal tails, tokens and chains hold the same records.
	chain uint64
	log   *batch
}

// batch is one applied append in a persistent list, newest first.
type batch struct {
	prev   *batch
	start  uint64
	hashes []uint64
}

func mix(h uint64) uint64 {
	// splitmix64's finaliser.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// apply returns s with the batch appended.
func (s *state) apply(in *Input) *state {
	n := &state{tail: s.tail + uint64(len(in.Records)), token: s.token, chain: s.chain}
	for _, r := range in.Records {
		n.chain = mix(n.chain*31 + r + 1)
	}
	if len(in.Records) > 0 {
		n.log = &batch{prev: s.log, start: s.tail, hashes: in.Records}
	} else {
		n.log = s.log
	}
	if in.FenceTo != nil {
		n.token = *in.FenceTo
	}
	return n
}

// matches reports whether the records at [from, from+len(got)) are got.
func (s *state) matches(from uint64, got []uint64) bool {
	end := from + uint64(len(got))
	if end > s.tail {
		return false
	}
	for b := s.log; b != nil && b.start+uint64(len(b.hashes)) > from; b = b.prev {
		for i, h := range b.hashes {
			seq := b.start + uint64(i)
			if seq >= from && seq < end && got[seq-from] != h {
				return false
			}
		}
	}
	return true
}

// admits reports the append's condition checks in the star's order: the
// fencing token first, then match_seq_num.
func (s *state) admits(in *Input) (tokenOK, seqOK bool) {
	tokenOK = in.FencingToken == nil || *in.FencingToken == s.token
	seqOK = in.MatchSeqNum == nil || *in.MatchSeqNum == s.tail
	return tokenOK, seqOK
}

// step is the sequential specification of one stream.
func step(st, inv, outv any) (bool, any) {
	s := st.(*state)
	in := inv.(*Input)
	out := outv.(*Output)
	switch in.Kind {
	case KindAppend:
		tokenOK, seqOK := s.admits(in)
		switch out.Outcome {
		case OutUnknown:
			if tokenOK && seqOK {
				return true, s.apply(in)
			}
			return true, s
		case OutObserved:
			// It happened (a read returned its records), so its
			// conditions held where it took effect, and where that read
			// placed it.
			if tokenOK && seqOK && (!out.Placed || out.Start == s.tail) {
				return true, s.apply(in)
			}
			return false, s
		case OutOK:
			n := uint64(len(in.Records))
			if tokenOK && seqOK && out.Start == s.tail && out.End == s.tail+n {
				return true, s.apply(in)
			}
			return false, s
		case OutTokenMismatch:
			// A 412 is definite: nothing changes. What it reports is the
			// sequencer's view, which counts pipelined batches not yet
			// durable (docs/design.md §16.2: conditions are checked against the next
			// assignable seq and the token after pending fences). So it
			// may run ahead of every acknowledged append, and only its
			// self-consistency is checked here; CheckReports checks the
			// reported token against the fences of the history.
			return in.FencingToken != nil && *in.FencingToken != out.Token, s
		case OutSeqMismatch:
			// As above; a reported seq below the tail would disown acks.
			return in.MatchSeqNum != nil && *in.MatchSeqNum != out.Tail && out.Tail >= s.tail, s
		}
		return false, s
	case KindRead:
		switch out.Outcome {
		case OutRangeNotSatisfiable:
			// A unary read without wait at or past the tail is a 416.
			return in.From >= s.tail && out.Tail == s.tail, s
		case OutOK:
			if in.From >= s.tail {
				return false, s
			}
			// A read returns at least one record and at most what is
			// available up to its count. The star may stop a unary read
			// early (at a boundary between span refs and the tail
			// window), so a short read is accepted here as a prefix; the
			// clients count such reads (Stats.ShortReads) and 416s and
			// check-tails still catch a stale tail.
			n := uint64(len(out.Records))
			return n >= 1 && n <= min(in.Count, s.tail-in.From) && s.matches(in.From, out.Records), s
		}
		return false, s
	case KindCheckTail:
		return out.Outcome == OutOK && out.Tail == s.tail, s
	}
	return false, s
}

// Model is the porcupine model of starlog streams, partitioned by stream:
// each stream is linearizable on its own.
func Model() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByStream,
		Init:      func() any { return &state{} },
		Step:      step,
		Equal: func(a, b any) bool {
			x, y := a.(*state), b.(*state)
			return x.tail == y.tail && x.token == y.token && x.chain == y.chain
		},
		Hash: func(st any) uint64 {
			s := st.(*state)
			h := fnv.New64a()
			h.Write([]byte(s.token))
			return s.chain ^ mix(s.tail) ^ h.Sum64()
		},
		DescribeOperation: describeOperation,
		DescribeState: func(st any) string {
			s := st.(*state)
			return fmt.Sprintf("tail=%d token=%q", s.tail, s.token)
		},
	}
}

func partitionByStream(history []porcupine.Operation) [][]porcupine.Operation {
	idx := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range history {
		s := op.Input.(*Input).Stream
		i, ok := idx[s]
		if !ok {
			i = len(parts)
			idx[s] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

func describeOperation(inv, outv any) string {
	in := inv.(*Input)
	out := outv.(*Output)
	var b strings.Builder
	switch in.Kind {
	case KindAppend:
		fmt.Fprintf(&b, "append(%s n=%d", in.Label, len(in.Records))
		if in.MatchSeqNum != nil {
			fmt.Fprintf(&b, " match=%d", *in.MatchSeqNum)
		}
		if in.FencingToken != nil {
			fmt.Fprintf(&b, " token=%q", *in.FencingToken)
		}
		if in.FenceTo != nil {
			fmt.Fprintf(&b, " fence→%q", *in.FenceTo)
		}
		b.WriteString(")")
		switch out.Outcome {
		case OutOK:
			fmt.Fprintf(&b, " → [%d,%d)", out.Start, out.End)
		case OutSeqMismatch:
			fmt.Fprintf(&b, " → 412 seq %d", out.Tail)
		case OutTokenMismatch:
			fmt.Fprintf(&b, " → 412 token %q", out.Token)
		default:
			fmt.Fprintf(&b, " → %s", out.Outcome)
		}
	case KindRead:
		fmt.Fprintf(&b, "read(%d, %d) → ", in.From, in.Count)
		if out.Outcome == OutOK {
			fmt.Fprintf(&b, "%d records", len(out.Records))
		} else {
			fmt.Fprintf(&b, "%s tail %d", out.Outcome, out.Tail)
		}
	case KindCheckTail:
		fmt.Fprintf(&b, "check-tail → %d", out.Tail)
	}
	return in.Stream + ": " + b.String()
}
