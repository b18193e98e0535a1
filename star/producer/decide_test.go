package producer

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/starlog/starlog/shared/api"
)

// TestDecide runs the scenarios of testdata/decide: the pure decision and
// its state, batch by batch.
//
//	batch id=p epoch=E seq=S at=<first stream seq> n=<records> ts=<ms> [records]
//	    decides at ts; an Apply is recorded as applied at [at, at+n).
//	    With records the seq counts records (the mark carries n).
//	fold
//	<stream seq> <ts> <id> <epoch> <seq> [<records>]   (one record a line)
//	    folds the records into a fresh table (a restart).
//	snapshot tail=T now=N   then   restore
//	    checkpoints the table as of the durable tail T, and restarts from it.
//	checkpoint   (a checkpoint's JSON as input)
//	    restarts from that checkpoint.
//	show
func TestDecide(t *testing.T) {
	datadriven.RunTest(t, "testdata/decide", func(t *testing.T, d *datadriven.TestData) string {
		return run(t, d)
	})
}

// TestDecideRecords runs testdata/records: seqs counted in records, as
// the Kafka face's producers count them.
func TestDecideRecords(t *testing.T) {
	datadriven.RunTest(t, "testdata/records", func(t *testing.T, d *datadriven.TestData) string {
		return run(t, d)
	})
}

var ddTable *Table
var ddCkpt Checkpoint

func arg(t *testing.T, d *datadriven.TestData, key string) uint64 {
	t.Helper()
	var s string
	d.ScanArgs(t, key, &s)
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return v
}

func run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "reset":
		ddTable = New()
		return "ok"
	case "batch":
		var id string
		d.ScanArgs(t, "id", &id)
		m := api.ProducerMark{ID: id, Epoch: arg(t, d, "epoch"), Seq: arg(t, d, "seq")}
		at, n, ts := arg(t, d, "at"), arg(t, d, "n"), arg(t, d, "ts")
		if d.HasArg("records") {
			m.Records = n
		}
		dec := ddTable.Decide(m, ts)
		if dec.Kind == Apply {
			ddTable.Applied(m, Batch{Seq: m.Seq, Records: m.Records, Start: Pos{at, ts}, End: Pos{at + n, ts}})
		}
		return describe(m, dec)
	case "fold":
		ddTable = New()
		var recs []api.Record
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			if len(f) != 5 && len(f) != 6 {
				t.Fatalf("fold line %q: want <seq> <ts> <id> <epoch> <seq> [<records>]", line)
			}
			seq, _ := strconv.ParseUint(f[0], 10, 64)
			ts, _ := strconv.ParseUint(f[1], 10, 64)
			hs := []api.Header{{Name: []byte(api.HeaderProducer), Value: []byte(f[2])},
				{Name: []byte(api.HeaderProducerEpoch), Value: []byte(f[3])},
				{Name: []byte(api.HeaderProducerSeq), Value: []byte(f[4])}}
			if len(f) == 6 {
				hs = append(hs, api.Header{Name: []byte(api.HeaderProducerRecords), Value: []byte(f[5])})
			}
			if f[2] == "-" {
				hs = nil
			}
			recs = append(recs, api.Record{SeqNum: seq, Timestamp: &ts, Headers: hs})
		}
		ddTable.Fold(recs)
		return show(ddTable)
	case "snapshot":
		c, ok := ddTable.Snapshot(arg(t, d, "tail"), arg(t, d, "now"))
		if !ok {
			return "not now: a producer's remembered batches are all pending"
		}
		b, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if ddCkpt, err = DecodeCheckpoint(b); err != nil {
			t.Fatal(err)
		}
		return string(b)
	case "checkpoint":
		var err error
		if ddCkpt, err = DecodeCheckpoint([]byte(d.Input)); err != nil {
			t.Fatal(err)
		}
		ddTable = FromCheckpoint(ddCkpt)
		return show(ddTable)
	case "restore":
		ddTable = FromCheckpoint(ddCkpt)
		return show(ddTable)
	case "show":
		return show(ddTable)
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

func describe(m api.ProducerMark, d Decision) string {
	switch d.Kind {
	case Apply:
		return "apply"
	case Duplicate:
		if !d.Batch.EndKnown() {
			return fmt.Sprintf("duplicate start=%d end=? (from the retry)", d.Batch.Start.SeqNum)
		}
		return fmt.Sprintf("duplicate start=%d end=%d", d.Batch.Start.SeqNum, d.Batch.End.SeqNum)
	default:
		e := d.Err(m)
		return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
	}
}

func show(t *Table) string {
	ids := make([]string, 0, len(t.byID))
	for id := range t.byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for _, id := range ids {
		e := t.byID[id]
		fmt.Fprintf(&b, "%s epoch=%d next=%d batches=", id, e.epoch, e.next)
		for i, x := range e.batches {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d@%d", x.Seq, x.Start.SeqNum)
		}
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return "empty"
	}
	return strings.TrimSuffix(b.String(), "\n")
}
