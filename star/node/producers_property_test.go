package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// For any interleaving of producers, retries (sequential and concurrent
// with their original), new epochs and restarts (a new incarnation over
// the same stores, the old one never closed: kill -9), each (producer,
// epoch, seq) is applied at most once, every retry is answered with its
// original's ack, and every acknowledged batch reads back once at its
// ack's seq nums. Seedable: STARLOG_PRODUCER_SEED=<n> runs that seed.
func TestProducerPropertyAtMostOnce(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if s := os.Getenv("STARLOG_PRODUCER_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{v}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { producerProperty(t, seed) })
	}
}

type sentBatch struct {
	mark api.ProducerMark
	n    int
	ack  api.AppendAck
}

func producerProperty(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	st := newStores(t)
	ctx := context.Background()
	n := open(t, st, testConfig())
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "prop-basin", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	type prod struct {
		epoch, next uint64
		acked       []sentBatch // this epoch's, in seq order
	}
	prods := map[string]*prod{"p0": {}, "p1": {}, "p2": {}}
	ids := []string{"p0", "p1", "p2"}
	var all []sentBatch
	body := func(m api.ProducerMark, i int) string { return fmt.Sprintf("%s/%d/%d/%d", m.ID, m.Epoch, m.Seq, i) }
	input := func(m api.ProducerMark, k int) *api.AppendInput {
		in := &api.AppendInput{}
		for i := range k {
			in.Records = append(in.Records, api.Record{Body: []byte(body(m, i))})
		}
		in.Records[0].Headers = api.ProducerHeaders(m)
		return in
	}
	check := func(what string, got, want api.AppendAck) {
		t.Helper()
		if got.Start != want.Start || got.End != want.End {
			t.Fatalf("seed %d: %s acked [%+v, %+v), the original [%+v, %+v)", seed, what, got.Start, got.End, want.Start, want.End)
		}
	}
	restarts := 0
	for step := range 80 {
		id := ids[rng.IntN(len(ids))]
		p := prods[id]
		switch r := rng.IntN(20); {
		case r < 10: // the next batch, perhaps with a retry racing it
			m := api.ProducerMark{ID: id, Epoch: p.epoch, Seq: p.next}
			k := 1 + rng.IntN(4)
			var wg sync.WaitGroup
			var acks [2]api.AppendAck
			var errs [2]error
			racers := 1 + rng.IntN(2)
			for i := range racers {
				wg.Go(func() { acks[i], errs[i] = n.Append(ctx, "prop-basin", "s", input(m, k), nil) })
			}
			wg.Wait()
			for i := range racers {
				if errs[i] != nil {
					t.Fatalf("seed %d step %d: %+v: %v", seed, step, m, errs[i])
				}
			}
			if racers == 2 {
				check(fmt.Sprintf("step %d: a racing retry of %+v", step, m), acks[1], acks[0])
			}
			b := sentBatch{mark: m, n: k, ack: acks[0]}
			p.acked, p.next = append(p.acked, b), p.next+1
			all = append(all, b)
		case r < 15 && len(p.acked) > 0: // a retry of one of the last 8
			b := p.acked[len(p.acked)-1-rng.IntN(min(len(p.acked), 8))]
			ack, err := n.Append(ctx, "prop-basin", "s", input(b.mark, b.n), nil)
			if err != nil {
				t.Fatalf("seed %d step %d: retry %+v: %v", seed, step, b.mark, err)
			}
			check(fmt.Sprintf("step %d: retry of %+v", step, b.mark), ack, b.ack)
		case r < 17: // a new epoch
			p.epoch, p.next, p.acked = p.epoch+1, 0, nil
		case r < 18 && len(p.acked) > 0: // a gap
			_, err := n.Append(ctx, "prop-basin", "s", input(api.ProducerMark{ID: id, Epoch: p.epoch, Seq: p.next + 1}, 1), nil)
			if e := apiErr(t, err, 409, api.CodeProducerSeqGap); func() bool { x, _ := e.ProducerExpectedSeq(); return x != p.next }() {
				t.Fatalf("seed %d step %d: gap names %v, want %d", seed, step, e, p.next)
			}
		default: // kill -9 and restart over the same stores
			if restarts < 3 {
				n = open(t, st, testConfig())
				restarts++
			}
		}
	}
	// Every acknowledged batch reads back once, at its ack; no mark twice.
	recs := readAll(t, n, "prop-basin", "s")
	seen := map[string]int{}
	for _, r := range recs {
		seen[string(r.Body)]++
		if m, ok, _ := api.ProducerOf(r.Headers); ok && !strings.HasPrefix(string(r.Body), fmt.Sprintf("%s/%d/%d/0", m.ID, m.Epoch, m.Seq)) {
			t.Fatalf("seed %d: mark %+v on record %q", seed, m, r.Body)
		}
	}
	for b, c := range seen {
		if c != 1 {
			t.Fatalf("seed %d: %q read back %d times", seed, b, c)
		}
	}
	total := 0
	for _, b := range all {
		for i := range b.n {
			seq := b.ack.Start.SeqNum + uint64(i)
			if seq >= uint64(len(recs)) || string(recs[seq].Body) != body(b.mark, i) {
				t.Fatalf("seed %d: %+v record %d not at seq %d", seed, b.mark, i, seq)
			}
		}
		total += b.n
	}
	if len(recs) != total {
		t.Fatalf("seed %d: %d records read back, %d acknowledged", seed, len(recs), total)
	}
}
