package verify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// ReadBack reads every stream from 0 to its tail through the clients'
// endpoints (the next one after each failure), retrying calls until ctx
// ends (a star may still be restarting), and records each page into h as a
// read by client id client. It returns the records' hashes by stream,
// indexed by seq num. key names a stream in the history (nil: its name;
// see Catalog.Key).
func ReadBack(ctx context.Context, cs []*sdk.Client, basin string, streams []string, key func(string) string, h *History, client int) (map[string][]uint64, error) {
	got := map[string][]uint64{}
	next := 0
	handle := func(name string) *sdk.Stream { return cs[next%len(cs)].Basin(basin).Stream(name) }
	for _, name := range streams {
		k := name
		if key != nil {
			k = key(name)
		}
		var tail api.StreamPosition
		err := retry(ctx, func() error {
			call := h.Now()
			t, err := handle(name).CheckTail(ctx)
			h.RecordCheckTail(client, k, call, t, err)
			if err != nil {
				next++
			}
			tail = t
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("read-back %s: check tail: %w", name, err)
		}
		var recs []uint64
		for at := uint64(0); at < tail.SeqNum; {
			count := uint64(1000)
			var b *api.ReadBatch
			err := retry(ctx, func() error {
				call := h.Now()
				var err error
				b, err = handle(name).Read(ctx, api.ReadRequest{From: api.FromSeqNum, Value: at, Count: &count})
				h.RecordRead(client, &Input{Stream: k, Kind: KindRead, From: at, Count: count}, call, b, err)
				if err != nil {
					next++
				}
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("read-back %s at %d: %w", name, at, err)
			}
			if len(b.Records) == 0 {
				return nil, fmt.Errorf("read-back %s at %d: no records below the tail %d", name, at, tail.SeqNum)
			}
			for i := range b.Records {
				if b.Records[i].SeqNum != at {
					return nil, fmt.Errorf("read-back %s: seq %d where %d was expected", name, b.Records[i].SeqNum, at)
				}
				recs = append(recs, RecordHash(&b.Records[i]))
				at++
			}
		}
		got[k] = recs
	}
	return got, nil
}

// retry runs f until it succeeds, fails definitely with an API error, or
// ctx ends.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		var ae *api.Error
		if err == nil || (errors.As(err, &ae) && sdk.IsDefinite(err) && ae.Status != 429 && ae.Status != 409) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// VerifyAcks checks every acknowledged record against the read-back: it
// is at its seq num. It also checks every read of the history against the
// read-back: no seq num ever read two different records. It returns how
// many acknowledged records it verified and the violations. Streams in
// retired (deleted incarnations, see Catalog.Retired) are skipped: their
// records are gone by design.
func VerifyAcks(h *History, readBack map[string][]uint64, retired map[string]bool) (int, []string) {
	var bad []string
	verified := 0
	for _, a := range h.Acks() {
		if retired[a.Stream] {
			continue
		}
		recs := readBack[a.Stream]
		for i, r := range a.Records {
			seq := a.Start + uint64(i)
			switch {
			case seq >= uint64(len(recs)):
				bad = append(bad, fmt.Sprintf("%s: acknowledged seq %d is past the read-back tail %d", a.Stream, seq, len(recs)))
			case recs[seq] != r:
				bad = append(bad, fmt.Sprintf("%s: acknowledged seq %d reads back as another record", a.Stream, seq))
			default:
				verified++
			}
		}
	}
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	for _, op := range ops {
		in, out := op.Input.(*Input), op.Output.(*Output)
		if in.Kind != KindRead || out.Outcome != OutOK || retired[in.Stream] {
			continue
		}
		recs := readBack[in.Stream]
		for i, r := range out.Records {
			seq := in.From + uint64(i)
			if seq >= uint64(len(recs)) {
				bad = append(bad, fmt.Sprintf("%s: a read returned seq %d, past the read-back tail %d", in.Stream, seq, len(recs)))
			} else if recs[seq] != r {
				bad = append(bad, fmt.Sprintf("%s: seq %d was read as two different records", in.Stream, seq))
			}
		}
	}
	return verified, bad
}

// WriteHistory writes ops as JSON, one operation a line (client, call and
// return in nanoseconds of the history clock, input, output), so a history
// that failed can be studied and checked again.
func WriteHistory(path string, ops []porcupine.Operation) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, op := range ops {
		if err := enc.Encode(struct {
			Client       int
			Call, Return int64
			Input        *Input
			Output       *Output
		}{op.ClientId, op.Call, op.Return, op.Input.(*Input), op.Output.(*Output)}); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// CheckResult is the outcome of a linearizability check.
type CheckResult struct {
	Result porcupine.CheckResult
	// Operations is how many operations were checked (after pruning).
	Operations int
	Duration   time.Duration
	// Visualization is the HTML file written for an illegal or undecided
	// history, "" otherwise.
	Visualization string
	// Explanation describes where an illegal history gets stuck.
	Explanation string
}

// Check checks h for linearizability under Model within timeout. For a
// history that is not Ok it writes porcupine's visualization into dir
// (a new temporary folder when dir is "").
func Check(h *History, timeout time.Duration, dir string) (CheckResult, error) {
	ops := h.Operations()
	m := Model()
	t0 := time.Now()
	res, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	cr := CheckResult{Result: res, Operations: len(ops), Duration: time.Since(t0)}
	if res == porcupine.Ok {
		return cr, nil
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "starlog-verify-"); err != nil {
			return cr, fmt.Errorf("visualization folder: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return cr, fmt.Errorf("visualization folder: %w", err)
	}
	if res == porcupine.Illegal {
		cr.Explanation = Explain(info, ops, 12)
	}
	cr.Visualization = filepath.Join(dir, "history.html")
	if err := porcupine.VisualizePath(m, info, cr.Visualization); err != nil {
		return cr, fmt.Errorf("write visualization: %w", err)
	}
	return cr, nil
}

// OpsByStream counts a history's checked operations per stream, sorted
// by stream name.
func OpsByStream(ops []porcupine.Operation) []int {
	m := map[string]int{}
	for _, op := range ops {
		m[op.Input.(*Input).Stream]++
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]int, len(names))
	for i, n := range names {
		out[i] = m[n]
	}
	return out
}

// Explain describes where an illegal history gets stuck: for each
// partition that could not be fully linearized, the end of the longest
// partial linearization, the model state there, and the earliest-called
// operations that could not follow it.
func Explain(info porcupine.LinearizationInfo, ops []porcupine.Operation, max int) string {
	m := Model()
	parts := partitionByStream(ops)
	var b strings.Builder
	for pi, lins := range info.PartialLinearizations() {
		if pi >= len(parts) {
			break
		}
		part := parts[pi]
		var best []int
		for _, l := range lins {
			if len(l) > len(best) {
				best = l
			}
		}
		if len(best) == len(part) {
			continue
		}
		st := m.Init()
		for _, i := range best {
			_, st = m.Step(st, part[i].Input, part[i].Output)
		}
		in := map[int]bool{}
		for _, i := range best {
			in[i] = true
		}
		fmt.Fprintf(&b, "partition %d: %d of %d operations linearized; state %s\n", pi, len(best), len(part), m.DescribeState(st))
		for _, i := range best[max0(len(best)-max):] {
			fmt.Fprintf(&b, "  linearized: [%d,%s] c%d %s\n", part[i].Call, retString(part[i].Return), part[i].ClientId, m.DescribeOperation(part[i].Input, part[i].Output))
		}
		var rest []int
		for i := range part {
			if !in[i] {
				rest = append(rest, i)
			}
		}
		sort.Slice(rest, func(a, b int) bool { return part[rest[a]].Call < part[rest[b]].Call })
		for _, i := range rest[:min(len(rest), max)] {
			fmt.Fprintf(&b, "  pending:    [%d,%s] c%d %s\n", part[i].Call, retString(part[i].Return), part[i].ClientId, m.DescribeOperation(part[i].Input, part[i].Output))
		}
	}
	return b.String()
}

func max0(n int) int { return max(n, 0) }

func retString(r int64) string {
	if r == math.MaxInt64 {
		return "∞"
	}
	return strconv.FormatInt(r, 10)
}

// DuplicateAcks reports every seq num acknowledged to two appends (each
// batch is unique, so one of them was lost or the seq reused).
func DuplicateAcks(acks []Ack) []string {
	seen := map[string]map[uint64]int{}
	var bad []string
	for i, a := range acks {
		m := seen[a.Stream]
		if m == nil {
			m = map[uint64]int{}
			seen[a.Stream] = m
		}
		for j := range a.Records {
			seq := a.Start + uint64(j)
			if k, dup := m[seq]; dup {
				bad = append(bad, fmt.Sprintf("%s: seq %d acknowledged twice (appends [%d,%d) and [%d,%d))",
					a.Stream, seq, acks[k].Start, acks[k].Start+uint64(len(acks[k].Records)), a.Start, a.Start+uint64(len(a.Records))))
				continue
			}
			m[seq] = i
		}
	}
	return bad
}

// Blip is what the clients of a stream saw around one handoff of it.
type Blip struct {
	Stream string
	// At and End bound the handoff (history clock: the admin call's
	// start and its answer).
	At, End time.Duration
	// MaxAckLatency is the longest acknowledged append on the stream
	// whose call overlapped the handoff (up to Margin after it).
	MaxAckLatency time.Duration
	// AckGap is the longest time without any acknowledgement on the
	// stream, among the gaps overlapping the handoff: what a producer that
	// retries saw.
	AckGap time.Duration
	// Acks is how many appends were acknowledged within the window.
	Acks int
	// Clean is a handoff with no other fault within BlipMargin of it
	// (before or after): its blip is the handoff's alone.
	Clean bool
}

// BlipMargin extends a handoff's window: appends called shortly after the
// admin call answered still meet its effects (forwarding peers learning
// the new leader).
const BlipMargin = time.Second

// HandoffBlips measures, for each handoff in evs (in order) that took
// place, the append latency and the acknowledgement gap its stream's
// clients saw; an ack gap counts from the handoff's start and is cut where
// the next fault starts.
func HandoffBlips(h *History, evs []FaultEvent) []Blip {
	h.mu.Lock()
	type ackT struct{ call, ret int64 }
	byStream := map[string][]ackT{}
	for _, op := range h.ops {
		in, out := op.Input.(*Input), op.Output.(*Output)
		if in.Kind == KindAppend && out.Outcome == OutOK {
			byStream[in.Stream] = append(byStream[in.Stream], ackT{op.Call, op.Return})
		}
	}
	h.mu.Unlock()
	var blips []Blip
	for i, ev := range evs {
		if ev.Fault != "handoff" || ev.Failed {
			continue
		}
		// What the next fault does is not the handoff's.
		limit := int64(math.MaxInt64)
		if i+1 < len(evs) {
			limit = int64(evs[i+1].At)
		}
		clean := limit-int64(ev.Recovered) >= int64(BlipMargin) &&
			(i == 0 || ev.At-evs[i-1].Recovered >= BlipMargin)
		acks := byStream[ev.Stream]
		sort.Slice(acks, func(i, j int) bool { return acks[i].ret < acks[j].ret })
		lo, hi := int64(ev.At), min(int64(ev.Recovered+BlipMargin), limit)
		b := Blip{Stream: ev.Stream, At: ev.At, End: ev.Recovered, Clean: clean}
		prev := int64(-1)
		for _, a := range acks {
			if a.call <= hi && a.ret >= lo {
				b.MaxAckLatency = max(b.MaxAckLatency, time.Duration(a.ret-a.call))
			}
			if a.ret >= lo && a.ret <= hi {
				b.Acks++
			}
			// The gap (prev, a.ret) overlaps [lo, hi]; only its part from
			// the handoff's start counts.
			if prev >= 0 && prev <= hi && a.ret >= lo {
				b.AckGap = max(b.AckGap, time.Duration(min(a.ret, limit)-max(prev, lo)))
			}
			prev = a.ret
		}
		if prev >= 0 && prev < hi {
			// No ack after the window's start at all: the gap runs on.
			b.AckGap = max(b.AckGap, time.Duration(hi-max(prev, lo)))
		}
		blips = append(blips, b)
	}
	return blips
}

// AckLatencies are the latencies of the history's acknowledged appends,
// sorted.
func AckLatencies(h *History) []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ls []time.Duration
	for _, op := range h.ops {
		in, out := op.Input.(*Input), op.Output.(*Output)
		if in.Kind == KindAppend && out.Outcome == OutOK {
			ls = append(ls, time.Duration(op.Return-op.Call))
		}
	}
	slices.Sort(ls)
	return ls
}

// Quantile is the q-quantile of sorted values (0 when empty).
func Quantile[T cmp.Ordered](sorted []T, q float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[min(max(i, 0), len(sorted)-1)]
}
