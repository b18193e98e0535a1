package settle_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/stores"
)

// gcChain is one chain of the chain-garbage tests: its star's registry
// row, and three spent epochs (settled, trimmed to cut 5, reaped) whose
// garbage windows [5,9) hold poison in every bucket of the set.
type gcChain struct {
	star           string
	decommissioned bool
	marker         uint64 // an epoch with a batch marker left (0: none)
}

const gcCut, gcWindow, gcEpochs = 5, 4, 3

func writeGCChain(t testing.TB, ms meta.Store, objs objstore.Store, g gcChain) {
	t.Helper()
	ctx := context.Background()
	put := func(k meta.Key, v []byte) {
		t.Helper()
		if _, err := ms.Put(ctx, k.PK, k.SK, v, meta.Always()); err != nil {
			t.Fatal(err)
		}
	}
	put(meta.RegistryKey(g.star), meta.Encode(meta.Registration{Incarnation: gcEpochs, State: meta.StarStopped, Decommissioned: g.decommissioned}))
	put(meta.ChainDirKey(g.star, meta.Express), nil)
	var nonce format.Nonce
	copy(nonce[:], "0123456789abcdef")
	params := meta.EpochParams{Buckets: zones, W: 2, Window: gcWindow, Nonce: fmt.Sprintf("%x", nonce[:])}
	cut := uint64(gcCut)
	put(meta.HeadKey(g.star, meta.Express), meta.Encode(meta.Head{Epoch: gcEpochs, State: meta.HeadSettled, Owner: chain.Incarnation(g.star, gcEpochs), Cut: &cut, Params: params}))
	for e := uint64(1); e <= gcEpochs; e++ {
		put(meta.EpochKey(g.star, meta.Express, e), meta.Encode(meta.Epoch{Epoch: e, Owner: chain.Incarnation(g.star, e), Params: params,
			Cut: &cut, Checkpoint: cut, Rewritten: cut, Trimmed: cut, Settled: true, Reaped: true}))
		for s := uint64(gcCut); s < gcCut+gcWindow; s++ {
			for _, b := range zones {
				if _, err := objs.Bucket(b).PutIfAbsent(ctx, chain.SlotKey(g.star, meta.Express, e, s), format.EncodePoison(e, s, nonce)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if g.marker != 0 {
		put(meta.MarkerKey(g.star, meta.Express, g.marker, 0), meta.Encode(meta.Marker{Epoch: g.marker, FromSlot: 0, EndSlot: 1}))
	}
}

// gcState renders what the tests compare: the chain rows, the chain
// directory and the slot keys in every bucket.
func gcState(t testing.TB, ms meta.Store, objs objstore.Store, stars []string) string {
	t.Helper()
	ctx := context.Background()
	var lines []string
	pks := []string{"chains"}
	for _, s := range stars {
		pks = append(pks, meta.ChainPK(s, meta.Express))
	}
	for _, pk := range pks {
		pg, err := ms.Query(ctx, meta.Query{PK: pk})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range pg.Items {
			lines = append(lines, it.PK+"/"+it.SK)
		}
	}
	for _, b := range zones {
		for info, err := range objs.Bucket(b).List(ctx, "chains/") {
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, b+"/"+info.Key)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// The trim job collects a decommissioned star's chain garbage: the poison
// of the garbage windows and the records of the spent epochs below the
// head, then the chain directory row; the head and the head epoch's
// record (and its poison) stay. A star that only stopped keeps all of it
// (its incarnations may still run), and an epoch with a marker left keeps
// its record and poison (and so the chain its directory row). The plan
// queues a trim only for the chains with something to collect. On both
// backends.
func TestChainGarbageCollected(t *testing.T) {
	for _, aws := range []bool{false, true} {
		t.Run(map[bool]string{false: "mem", true: "aws"}[aws], func(t *testing.T) {
			if aws && testing.Short() {
				t.Skip("starts versitygw and DynamoDB Local")
			}
			ctx := context.Background()
			var objs objstore.Store
			var ms meta.Store
			if aws {
				objs, ms = stores.S3(t, append(slices.Clone(zones), settledB)...), stores.Dynamo(t, &sharedDyn)
			} else {
				m, err := mem.New(append(slices.Clone(zones), settledB)...)
				if err != nil {
					t.Fatal(err)
				}
				objs, ms = m, testsvc.SQLite(t)
			}
			chains := []gcChain{{star: "gone", decommissioned: true}, {star: "stopped"}, {star: "marked", decommissioned: true, marker: 1}}
			for _, g := range chains {
				writeGCChain(t, ms, objs, g)
			}
			st := &settle.Stores{Meta: ms, Objects: objs, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: ms},
				Config: defaultSettleConfig(t), Logger: quietLog()}
			now := time.Now()
			jobs, err := plan.Plan(ctx, st, now)
			if err != nil {
				t.Fatal(err)
			}
			var trims []string
			for _, j := range jobs {
				trims = append(trims, j.Chain.Star+":"+string(j.Kind))
			}
			slices.Sort(trims)
			if want := []string{"gone:trim", "marked:trim"}; !slices.Equal(trims, want) {
				t.Fatalf("planned %v, want %v", trims, want)
			}
			for _, j := range jobs {
				if err := doJob(ctx, st, j); err != nil {
					t.Fatal(err)
				}
			}
			got := gcState(t, ms, objs, []string{"gone", "stopped", "marked"})
			var want []string
			want = append(want, "chains/marked/express", "chains/stopped/express")
			for _, g := range chains {
				pk := meta.ChainPK(g.star, meta.Express)
				want = append(want, pk+"/head")
				for e := uint64(1); e <= gcEpochs; e++ {
					kept := g.star == "stopped" || e == gcEpochs || e == g.marker
					if !kept {
						continue
					}
					want = append(want, pk+"/"+meta.EpochKey(g.star, meta.Express, e).SK)
					for s := uint64(gcCut); s < gcCut+gcWindow; s++ {
						for _, b := range zones {
							want = append(want, b+"/"+chain.SlotKey(g.star, meta.Express, e, s))
						}
					}
				}
				if g.marker != 0 {
					want = append(want, pk+"/"+meta.MarkerKey(g.star, meta.Express, g.marker, 0).SK)
				}
			}
			slices.Sort(want)
			if w := strings.Join(want, "\n"); got != w {
				t.Fatalf("after the trim jobs:\n%s\nwant:\n%s", got, w)
			}
			// Nothing more to do for the collected chain; the marked one is
			// planned again (its marker's settle resolves it in real life).
			jobs, err = plan.Plan(ctx, st, now)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				if j.Chain.Star != "marked" {
					t.Errorf("planned again: %+v", j)
				}
			}
		})
	}
}

// A crash before and after every mutating step of the collection, then
// a clean re-run, ends in the state of an uncrashed run.
func TestChainGarbageCrashAtEveryStepConverges(t *testing.T) {
	ctx := context.Background()
	run := func(left int, after bool) (string, int) {
		m, err := mem.New(append(slices.Clone(zones), settledB)...)
		if err != nil {
			t.Fatal(err)
		}
		ms := testsvc.SQLite(t)
		g := gcChain{star: "gone", decommissioned: true}
		writeGCChain(t, ms, m, g)
		c := &crasher{left: left, after: after}
		cfg := defaultSettleConfig(t)
		crashed := &settle.Stores{Meta: crashMeta{ms, c}, Objects: crashObjects{m, c}, SettledBucket: settledB,
			Streams: settle.MetaStreams{Meta: ms}, Config: cfg, Logger: quietLog()}
		ch := settle.ChainRef{Star: g.star, Class: meta.Express}
		_, _ = reclaim.TrimCheck(ctx, crashed, ch, time.Now())
		clean := &settle.Stores{Meta: ms, Objects: m, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: ms}, Config: cfg, Logger: quietLog()}
		if _, err := reclaim.TrimCheck(ctx, clean, ch, time.Now()); err != nil {
			t.Fatalf("re-run after a crash at step %d: %v", left, err)
		}
		return gcState(t, ms, m, []string{g.star}), c.steps
	}
	want, steps := run(1<<30, false)
	if steps < 5 {
		t.Fatalf("only %d mutating steps", steps)
	}
	for left := range steps {
		for _, after := range []bool{false, true} {
			if got, _ := run(left, after); got != want {
				t.Fatalf("crash at step %d of %d (after %v):\n%s\nwant:\n%s", left, steps, after, got, want)
			}
		}
	}
	t.Logf("%d steps", steps)
}
