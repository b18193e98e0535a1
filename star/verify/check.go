package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// ReadBack reads every stream from 0 to its tail through endpoint,
// retrying calls until ctx ends (the star may still be restarting), and
// records each page into h as a read by client id client. It returns the
// records' hashes by stream, indexed by seq num.
func ReadBack(ctx context.Context, c *sdk.Client, basin string, streams []string, h *History, client int) (map[string][]uint64, error) {
	got := map[string][]uint64{}
	for _, name := range streams {
		s := c.Basin(basin).Stream(name)
		var tail api.StreamPosition
		err := retry(ctx, func() error {
			call := h.Now()
			t, err := s.CheckTail(ctx)
			h.RecordCheckTail(client, name, call, t, err)
			tail = t
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("read-back %s: check tail: %w", name, err)
		}
		var recs []uint64
		for next := uint64(0); next < tail.SeqNum; {
			count := uint64(1000)
			var b *api.ReadBatch
			err := retry(ctx, func() error {
				call := h.Now()
				var err error
				b, err = s.Read(ctx, api.ReadRequest{From: api.FromSeqNum, Value: next, Count: &count})
				h.RecordRead(client, &Input{Stream: name, Kind: KindRead, From: next, Count: count}, call, b, err)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("read-back %s at %d: %w", name, next, err)
			}
			if len(b.Records) == 0 {
				return nil, fmt.Errorf("read-back %s at %d: no records below the tail %d", name, next, tail.SeqNum)
			}
			for i := range b.Records {
				if b.Records[i].SeqNum != next {
					return nil, fmt.Errorf("read-back %s: seq %d where %d was expected", name, b.Records[i].SeqNum, next)
				}
				recs = append(recs, RecordHash(&b.Records[i]))
				next++
			}
		}
		got[name] = recs
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
// many acknowledged records it verified and the violations.
func VerifyAcks(h *History, readBack map[string][]uint64) (int, []string) {
	var bad []string
	verified := 0
	for _, a := range h.Acks() {
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
		if in.Kind != KindRead || out.Outcome != OutOK {
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
