package reclaim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/reclaim"
)

// churnResult is what a steady-churn run measured.
type churnResult struct {
	oldest   time.Duration // the oldest superseded revision still stored, at worst (just before a pass)
	standing int           // entries standing, at most (just before a pass)
	gets     float64       // metastore reads (Get) per pass once deletes run, on average
	queries  float64       // list pages per pass once deletes run, on average
}

// runChurn drives the reclaim pass with steady churn: every simulated
// minute perMinute tail revisions are superseded, spread over streams
// stream ids whose keys sort in no order of time (an entry per revision,
// written as a settle does, and the catalog row naming the next
// revision), then one pass runs, as the janitor's every minute. Before
// each pass it measures how long ago the oldest revision still stored
// (its entry is deleted after its object) was superseded: a pass that
// keeps up deletes each a grace after the pass that first saw it, so
// within the grace plus a pass interval (and a second one when a pass
// stops at its limit).
func runChurn(tb testing.TB, perMinute, streams, minutes int) churnResult {
	st := bareStores(tb)
	counting := mfaults.New(st.Meta, 1)
	st.Meta = counting
	ctx := context.Background()
	grace := st.Config.ReadGrace
	rng := rand.New(rand.NewPCG(uint64(perMinute), uint64(streams)))
	ids := make([]string, streams)
	for i := range ids {
		ids[i] = fmt.Sprintf("%016x", rng.Uint64())
	}
	rev := make([]uint64, streams)
	superseded := map[string]time.Time{} // entry key → when its revision was superseded
	start := time.Now()
	var res churnResult
	var passes int
	for m := range minutes {
		at := start.Add(time.Duration(m) * time.Minute)
		var items []meta.Item
		for k := range perMinute {
			i := rng.IntN(streams)
			id := ids[i]
			when := at.Add(time.Duration(k) * time.Minute / time.Duration(perMinute))
			rc := meta.Reclaim{Basin: basin, Stream: id, Epoch: 1, Rev: rev[i], Bytes: 1 << 20, Extend: true}
			it := entryItem(rc)
			superseded[it.SK] = when
			rev[i]++
			row := catalogRow(0, rev[i]+1, 1<<20)
			row.Settled.Revision = rev[i]
			k := meta.RefKey(id, 0)
			items = append(items, it, meta.Item{PK: k.PK, SK: k.SK, Val: meta.Encode(row)})
		}
		batchPut(tb, st.Meta, items)
		now := at.Add(time.Minute)
		standing, oldest := 0, now
		q := meta.Query{PK: meta.ReclaimPK}
		for {
			pg, err := st.Meta.Query(ctx, q)
			if err != nil {
				tb.Fatal(err)
			}
			for _, it := range pg.Items {
				standing++
				if s, ok := superseded[it.SK]; ok && s.Before(oldest) {
					oldest = s
				}
			}
			if pg.Next == "" {
				break
			}
			q.PageToken = pg.Next
		}
		res.standing = max(res.standing, standing)
		res.oldest = max(res.oldest, now.Sub(oldest))
		counting.ResetCounts()
		if _, err := reclaim.Reclaim(ctx, st, now); err != nil {
			tb.Fatal(err)
		}
		c := counting.Counts()
		if now.Sub(start) > grace+time.Minute {
			passes++
			res.gets += float64(c.Get)
			res.queries += float64(c.Query)
		}
	}
	res.gets /= float64(passes)
	res.queries /= float64(passes)
	return res
}

// envInts is the comma-separated numbers in the environment variable
// name, or in def when it is unset.
func envInts(name, def string) []int {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			panic(fmt.Sprintf("%s: %v", name, err))
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkReclaimChurn measures the reclaim pass under steady churn
// (docs/settle.md, "Reclaim entries"): superseded revisions a minute
// from RECLAIM_CHURN_RATES (default 1000,2000,4000), over
// RECLAIM_CHURN_STREAMS stream ids (default 10,000), for
// RECLAIM_CHURN_MINUTES simulated minutes (default 30) with one pass a
// minute and a 5-minute grace, on the SQLite metastore. It reports the
// oldest superseded revision still stored after any pass past the first
// grace (a pass that keeps up holds it within the grace plus two passes),
// the most entries standing, and the metastore reads and list pages a
// pass makes. Run: go test -run '^$' -bench ReclaimChurn -benchtime 1x ./shared/settle/
func BenchmarkReclaimChurn(b *testing.B) {
	streams := envInts("RECLAIM_CHURN_STREAMS", "10000")[0]
	minutes := envInts("RECLAIM_CHURN_MINUTES", "30")[0]
	for _, rate := range envInts("RECLAIM_CHURN_RATES", "1000,2000,4000") {
		b.Run(fmt.Sprintf("per-minute=%d", rate), func(b *testing.B) {
			var r churnResult
			for range b.N {
				r = runChurn(b, rate, streams, minutes)
			}
			b.ReportMetric(r.oldest.Minutes(), "oldest-min")
			b.ReportMetric(float64(r.standing), "standing")
			b.ReportMetric(r.gets, "gets/pass")
			b.ReportMetric(r.queries, "pages/pass")
			b.Logf("%d superseded a minute over %d streams, %d minutes: oldest still stored %.1f min after it was superseded, %d entries standing at most, %.0f reads and %.0f pages a pass",
				rate, streams, minutes, r.oldest.Minutes(), r.standing, r.gets, r.queries)
		})
	}
}
