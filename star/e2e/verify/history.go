package verify

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// History collects the operations of one checked run. Safe for concurrent
// use by the clients.
type History struct {
	base time.Time

	mu  sync.Mutex
	ops []porcupine.Operation
	// unread are the incarnations no final read-back covers (Unread).
	unread map[string]bool
	// acks are the acknowledged appends, for the final read-back.
	acks []Ack
	// seen are the hashes every read returned, by stream, each with the
	// earliest return time of a read that returned it and the seq it was
	// read at: an indefinite append none of whose records was ever read
	// did not happen (the final read-back covers every stream to its
	// tail), and one whose records were read happened before that read
	// returned, at the seq it was read at.
	seen  map[string]map[uint64]sighting
	stats Stats
	// anomalies are violations found while recording, which the model
	// cannot express (a read whose seq nums do not follow its start).
	anomalies  []string
	shortReads []string
	// failures are the operations that failed other than with a 412 or
	// a 416, for the faults' own assertions (a definite failure and a
	// failed read carry no information for the model and are not in ops).
	failures []Failure
}

// Failure is one operation that failed other than with a 412 or a 416.
type Failure struct {
	Kind         Kind
	Client       int
	Stream       string
	Label        string
	Call, Return int64
	// Definite says an append surely had no effect: the SDK proves it
	// (a 4xx, a refused connection) or the star says it refused the
	// batch before sequencing it (ServerRefused). The model treats the
	// latter as indefinite, which is sound, only weaker.
	Definite bool
	Err      string
}

// ServerRefused reports whether err is a 503 with which the star says it
// refused an append before sequencing it (its message ends "; retry":
// not leading, no pool budget in time, the object store not taking the
// star's writes and the batch not yet sequenced). Over the wire every 503
// is indefinite; only the message tells the two apart.
func ServerRefused(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Status == 503 && strings.HasSuffix(ae.Message, "; retry")
}

// ClockGuarded reports whether a failure's message is the star's refusal
// to answer a match_seq_num or fencing token mismatch (a 412) from its
// own state while its heartbeat is late (star/node fromMemory): a
// definite 503 of a conditional append that would have been rejected.
func ClockGuarded(msg string) bool {
	return strings.Contains(msg, "not renewed its registration") && strings.Contains(msg, "from its own state")
}

// sighting is where and when a record was first read.
type sighting struct {
	at  int64
	seq uint64
}

// Ack is one acknowledged append.
type Ack struct {
	Stream  string
	Start   uint64
	Records []uint64
}

// Stats counts a history's operations by outcome.
type Stats struct {
	Appends, Reads, CheckTails int
	// Acked counts acknowledged appends, AckedRecords their records.
	Acked, AckedRecords int
	// Definite412 counts 412s (seq or token), RangeNotSatisfiable 416s.
	Definite412, RangeNotSatisfiable int
	// Indefinite counts appends that failed indefinitely; Pruned those of
	// them whose records no read ever returned (they did not happen),
	// Observed those whose records a read returned (they happened).
	Indefinite, Pruned, Observed int
	// Unplaceable counts those of Pruned that went into a deleted
	// incarnation (no final read-back) and that no seq the run's reads
	// and acks leave free could hold (extent.canPlace).
	Unplaceable int
	// ShortReads counts reads that returned fewer records than asked
	// although the client knew of more (its own acks and tails).
	ShortReads int
	// NoEffect counts failures proven to have had no effect (a refused
	// connection, a definite 4xx other than 412 and 416) and failed reads
	// and check-tails: they carry no information and stay out of the
	// history.
	NoEffect int
	// DurableAppends counts the appends made through the Durable Streams
	// face (durable.go), DurableAcked those acknowledged 200, and
	// DurableRefused those the face refused (a 4xx: nothing appended).
	DurableAppends, DurableAcked, DurableRefused int
	// DurableDuplicates counts appends whose last attempt was answered
	// 204 (an earlier attempt applied it), DurableRetries the attempts
	// sent again after no answer or a 5xx.
	DurableDuplicates, DurableRetries int
	// ProducerAppends counts the appends of the S2 face's idempotent
	// producers (producers.go), ProducerAcked those acknowledged,
	// ProducerRefused those refused definitely (nothing appended), and
	// ProducerRetries the attempts sent again with the same mark.
	ProducerAppends, ProducerAcked, ProducerRefused, ProducerRetries int
	// KafkaProduces counts the records produced through the Kafka face
	// (kafka.go), each an operation, KafkaAcked those acknowledged.
	KafkaProduces, KafkaAcked int
}

// NewHistory starts a history; times are measured from now.
func NewHistory() *History {
	return &History{base: time.Now(), seen: map[string]map[uint64]sighting{}}
}

// Now is the history's clock (monotonic nanoseconds since its start).
func (h *History) Now() int64 { return int64(time.Since(h.base)) }

// Classify turns an SDK result into the model's outcome. It returns
// ok=false for a failure that carries no information: a definite failure
// other than 412/416 (nothing happened), or a failed read or check-tail
// (reads have no effect).
func Classify(kind Kind, err error) (Outcome, bool) {
	if err == nil {
		return OutOK, true
	}
	var ae *api.Error
	if errors.As(err, &ae) && sdk.IsDefinite(err) {
		switch {
		case ae.Status == 412:
			if _, ok := ae.ExpectedSeqNum(); ok {
				return OutSeqMismatch, true
			}
			if _, ok := ae.CurrentFencingToken(); ok {
				return OutTokenMismatch, true
			}
		case ae.Status == 416:
			if _, ok := ae.Tail(); ok {
				return OutRangeNotSatisfiable, true
			}
		}
		return 0, false
	}
	if kind != KindAppend || sdk.IsDefinite(err) {
		return 0, false
	}
	return OutUnknown, true
}

// outputFromError fills an Output from a classified failure.
func outputFromError(o Outcome, err error) *Output {
	out := &Output{Outcome: o}
	var ae *api.Error
	if errors.As(err, &ae) {
		if t, ok := ae.ExpectedSeqNum(); ok {
			out.Tail = t
		}
		if t, ok := ae.CurrentFencingToken(); ok {
			out.Token = t
		}
		if t, ok := ae.Tail(); ok {
			out.Tail = t.SeqNum
		}
	}
	return out
}

// RecordAppend adds an append that was called at call and returned err (or
// ack) now.
func (h *History) RecordAppend(client int, in *Input, call int64, ack api.AppendAck, err error) Outcome {
	ret := h.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.Appends++
	o, ok := Classify(KindAppend, err)
	if err != nil && o != OutSeqMismatch && o != OutTokenMismatch {
		h.failures = append(h.failures, Failure{Kind: KindAppend, Client: client, Stream: in.Stream, Label: in.Label,
			Call: call, Return: ret, Definite: !ok || ServerRefused(err), Err: err.Error()})
	}
	if !ok {
		h.stats.NoEffect++
		return o
	}
	var out *Output
	switch o {
	case OutOK:
		out = &Output{Outcome: OutOK, Start: ack.Start.SeqNum, End: ack.End.SeqNum}
		h.stats.Acked++
		h.stats.AckedRecords += len(in.Records)
		h.acks = append(h.acks, Ack{Stream: in.Stream, Start: ack.Start.SeqNum, Records: in.Records})
	case OutUnknown:
		out = &Output{Outcome: OutUnknown}
		ret = math.MaxInt64
		h.stats.Indefinite++
	default:
		out = outputFromError(o, err)
		h.stats.Definite412++
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	return o
}

// RecordDurableAppend adds an append made through the Durable Streams
// face: as RecordAppend, and counted apart.
func (h *History) RecordDurableAppend(client int, in *Input, call int64, ack api.AppendAck, err error, duplicate bool, retries int) Outcome {
	o := h.RecordAppend(client, in, call, ack, err)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.DurableAppends++
	h.stats.DurableRetries += retries
	if duplicate {
		h.stats.DurableDuplicates++
	}
	if err == nil {
		h.stats.DurableAcked++
	}
	return o
}

// RecordProducerAppend adds an idempotent producer's append of the S2
// face: one operation for all its attempts.
func (h *History) RecordProducerAppend(client int, in *Input, call int64, ack api.AppendAck, err error, retries int) Outcome {
	o := h.RecordAppend(client, in, call, ack, err)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.ProducerAppends++
	h.stats.ProducerRetries += retries
	if err == nil {
		h.stats.ProducerAcked++
	}
	return o
}

// RecordKafkaProduce adds one record a Kafka producer produced: acked at
// offset when err is nil, indefinite otherwise.
func (h *History) RecordKafkaProduce(client int, in *Input, call int64, offset int64, err error) Outcome {
	var ack api.AppendAck
	if err == nil {
		ack.Start.SeqNum, ack.End.SeqNum = uint64(offset), uint64(offset)+uint64(len(in.Records))
	}
	o := h.RecordAppend(client, in, call, ack, err)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.KafkaProduces++
	if err == nil {
		h.stats.KafkaAcked++
	}
	return o
}

// RecordProducerRefusal counts a producer append refused definitely
// (nothing appended); it stays out of the history.
func (h *History) RecordProducerRefusal(client int, in *Input, call int64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.Appends++
	h.stats.ProducerAppends++
	h.stats.ProducerRefused++
	h.stats.NoEffect++
}

// RecordDurableRefusal counts a Durable Streams append the face refused
// definitely (a 4xx: nothing appended); it stays out of the history.
func (h *History) RecordDurableRefusal(client int, in *Input, call int64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.Appends++
	h.stats.DurableAppends++
	h.stats.DurableRefused++
	h.stats.NoEffect++
}

// RecordRead adds a read of in.From, in.Count called at call.
func (h *History) RecordRead(client int, in *Input, call int64, b *api.ReadBatch, err error) {
	ret := h.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.Reads++
	o, ok := Classify(KindRead, err)
	if err != nil && o != OutRangeNotSatisfiable {
		h.failures = append(h.failures, Failure{Kind: KindRead, Client: client, Stream: in.Stream, Call: call, Return: ret, Err: err.Error()})
	}
	if !ok {
		h.stats.NoEffect++
		return
	}
	out := outputFromError(o, err)
	if o == OutOK {
		out.Records = make([]uint64, len(b.Records))
		seen := h.seen[in.Stream]
		if seen == nil {
			seen = map[uint64]sighting{}
			h.seen[in.Stream] = seen
		}
		for i := range b.Records {
			if want := in.From + uint64(i); b.Records[i].SeqNum != want {
				h.anomalies = append(h.anomalies, fmt.Sprintf("%s: read from %d returned seq %d at position %d (want %d)",
					in.Stream, in.From, b.Records[i].SeqNum, i, want))
			}
			out.Records[i] = RecordHash(&b.Records[i])
			if sg, ok := seen[out.Records[i]]; !ok || ret < sg.at {
				seen[out.Records[i]] = sighting{at: ret, seq: b.Records[i].SeqNum}
			}
		}
	} else {
		h.stats.RangeNotSatisfiable++
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// RecordCheckTail adds a check-tail called at call.
func (h *History) RecordCheckTail(client int, stream string, call int64, tail api.StreamPosition, err error) {
	ret := h.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.CheckTails++
	if err != nil {
		h.failures = append(h.failures, Failure{Kind: KindCheckTail, Client: client, Stream: stream, Call: call, Return: ret, Err: err.Error()})
		h.stats.NoEffect++
		return
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: &Input{Stream: stream, Kind: KindCheckTail},
		Call: call, Output: &Output{Outcome: OutOK, Tail: tail.SeqNum}, Return: ret})
}

// Unread names the streams (incarnations) the final read-back does not
// cover: the deleted ones.
func (h *History) Unread(streams map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unread = streams
}

// Operations returns the history to check: every recorded operation except
// the indefinite appends no read ever observed. Such an append did not
// happen: had it, the final read-back (which is in the history and covers
// every stream to its tail) would have returned its records. Dropping them
// keeps the search small; every unknown operation otherwise stays open to
// the end of the history.
//
// An indefinite append some read observed did happen, and took effect
// before the first read that returned one of its records returned, at the
// seq that read placed it: it is checked as OutObserved (applied, its
// conditions held, its records starting at Output.Start) with that read's
// return time. All three are what any linearization has to satisfy anyway
// (the read follows the append, and the model's read checks each record
// at its seq, which only this append carries), so nothing is lost, and
// the search no longer weighs "never happened" for operations that did,
// nor every position for one whose position a read fixed: without it,
// the appends a long metastore outage leaves pending each stay open for
// minutes and porcupine cannot decide. (A read that returned before the
// append was called leaves the append open to the end, where the checker
// rejects it.)
//
// A deleted incarnation (Catalog.Retired, given by Unread) has no final
// read-back, so an append into it that no read saw may still have taken
// effect: such an append stays open (OutUnknown) instead of being pruned,
// unless no seq the reads and acks of the run leave free could hold its
// records (extent.canPlace): then, had it taken effect, no checked
// operation could see it, and it is pruned as well.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Only a record no other append carries tells that an append happened
	// (every batch that clears the fencing token carries the same fence
	// record).
	carriers := map[string]map[uint64]int{}
	for _, op := range h.ops {
		in := op.Input.(*Input)
		if in.Kind != KindAppend {
			continue
		}
		m := carriers[in.Stream]
		if m == nil {
			m = map[uint64]int{}
			carriers[in.Stream] = m
		}
		for _, r := range in.Records {
			m[r]++
		}
	}
	ops := make([]porcupine.Operation, 0, len(h.ops))
	pruned, observed := 0, 0
	open := map[string]bool{} // unread streams with appends left open
	for _, op := range h.ops {
		in := op.Input.(*Input)
		if in.Kind == KindAppend && op.Output.(*Output).Outcome == OutUnknown {
			sg, k, ok := h.observed(in, carriers[in.Stream])
			if !ok && h.unread[in.Stream] {
				ops = append(ops, op) // open: it may or may not have happened
				open[in.Stream] = true
				continue
			}
			if !ok {
				pruned++
				continue
			}
			observed++
			out := &Output{Outcome: OutObserved}
			if sg.seq >= uint64(k) {
				out.Placed, out.Start = true, sg.seq-uint64(k)
				out.End = out.Start + uint64(len(in.Records))
			}
			op.Output = out
			if sg.at >= op.Call {
				op.Return = sg.at
			}
		}
		ops = append(ops, op)
	}
	if len(open) > 0 {
		var placed int
		ops, placed = pruneUnplaceable(ops, open)
		pruned += placed
		h.stats.Unplaceable = placed
	}
	h.stats.Pruned = pruned
	h.stats.Observed = observed
	return ops
}

// pruneUnplaceable drops the open appends of the streams in open that no
// seq the other operations leave free could hold (extent.canPlace), and
// says how many it dropped.
func pruneUnplaceable(ops []porcupine.Operation, open map[string]bool) ([]porcupine.Operation, int) {
	byStream := map[string][]porcupine.Operation{}
	for _, op := range ops {
		if s := op.Input.(*Input).Stream; open[s] {
			byStream[s] = append(byStream[s], op)
		}
	}
	ext := map[string]*extent{}
	for s, part := range byStream {
		ext[s] = extentOf(part)
	}
	kept, dropped := ops[:0], 0
	for _, op := range ops {
		in := op.Input.(*Input)
		if e := ext[in.Stream]; e != nil && in.Kind == KindAppend && op.Output.(*Output).Outcome == OutUnknown && !e.canPlace(in) {
			dropped++
			continue
		}
		kept = append(kept, op)
	}
	return kept, dropped
}

// observed reports whether a read returned a record of in that no other
// append carries: the earliest such sighting, and the record's index in
// in.
func (h *History) observed(in *Input, carriers map[uint64]int) (sighting, int, bool) {
	seen := h.seen[in.Stream]
	first, k, ok := sighting{at: math.MaxInt64}, 0, false
	for i, r := range in.Records {
		if carriers[r] != 1 {
			continue
		}
		if sg, hit := seen[r]; hit && sg.at < first.at {
			first, k, ok = sg, i, true
		}
	}
	return first, k, ok
}

// Failures returns the operations that failed other than with a 412 or
// a 416.
func (h *History) Failures() []Failure {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Failure(nil), h.failures...)
}

// AckTimes returns, by stream, the call and return times of the
// acknowledged appends, in the order they were recorded.
func (h *History) AckTimes() map[string][][2]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][][2]int64{}
	for _, op := range h.ops {
		in, o := op.Input.(*Input), op.Output.(*Output)
		if in.Kind == KindAppend && o.Outcome == OutOK {
			out[in.Stream] = append(out[in.Stream], [2]int64{op.Call, op.Return})
		}
	}
	return out
}

// Acks returns the acknowledged appends.
func (h *History) Acks() []Ack {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Ack(nil), h.acks...)
}

// Stats returns the counts so far.
func (h *History) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}

// Len is the number of recorded operations.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// NoteShortRead counts a read that stopped before records the client
// knew to exist, keeping the first few as examples.
func (h *History) NoteShortRead(desc string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.ShortReads++
	if len(h.shortReads) < 5 {
		h.shortReads = append(h.shortReads, desc)
	}
}

// ShortReads returns examples of short reads.
func (h *History) ShortReads() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.shortReads...)
}

// Anomalies returns the violations found while recording.
func (h *History) Anomalies() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.anomalies...)
}

// CheckReports checks what the 412s of the history report against the
// appends around them; the model can check a 412 only loosely, since it
// reports the sequencer's view, which counts batches not yet durable.
//
//   - A reported token is "" or the token of a fence batch called before
//     the 412 returned (acknowledged or indefinite).
//   - A reported next seq is at most the number of records of every append
//     (acknowledged or indefinite) called before the 412 returned: each
//     assigned seq belongs to one of them.
func (h *History) CheckReports() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	type rep struct {
		op  porcupine.Operation
		out *Output
	}
	type appended struct {
		call    int64
		records int
		fenceTo *string
	}
	reps := map[string][]rep{}
	apps := map[string][]appended{}
	for _, op := range h.ops {
		in, out := op.Input.(*Input), op.Output.(*Output)
		if in.Kind != KindAppend {
			continue
		}
		switch out.Outcome {
		case OutOK, OutUnknown:
			apps[in.Stream] = append(apps[in.Stream], appended{op.Call, len(in.Records), in.FenceTo})
		case OutSeqMismatch, OutTokenMismatch:
			reps[in.Stream] = append(reps[in.Stream], rep{op, out})
		}
	}
	var bad []string
	for stream, rs := range reps {
		for _, r := range rs {
			records, tokenSeen := 0, r.out.Token == ""
			for _, a := range apps[stream] {
				if a.call > r.op.Return {
					continue
				}
				records += a.records
				if a.fenceTo != nil && *a.fenceTo == r.out.Token {
					tokenSeen = true
				}
			}
			in := r.op.Input.(*Input)
			switch {
			case r.out.Outcome == OutTokenMismatch && !tokenSeen:
				bad = append(bad, fmt.Sprintf("%s: %s reports token %q, which no fence called before it set",
					stream, in.Label, r.out.Token))
			case r.out.Outcome == OutSeqMismatch && r.out.Tail > uint64(records):
				bad = append(bad, fmt.Sprintf("%s: %s reports next seq %d, but appends called before it hold only %d records",
					stream, in.Label, r.out.Tail, records))
			}
		}
	}
	return bad
}
