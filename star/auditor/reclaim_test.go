package auditor_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auditor"
	"github.com/starlog/starlog/star/node"
)

// The in-process runner reclaims by itself: beside a star as `star dev`
// runs it, a stream with a one-second retention loses its old records
// (a read from 0 starts past them, and check-tail is unmoved), every
// settled object left in storage is one a catalog row names (superseded
// revisions and trimmed rows' objects are deleted behind the grace), and a
// stream with the default retention reads back whole.
func TestDevStarReclaimsByItself(t *testing.T) {
	ctx := context.Background()
	ms := testsvc.SQLite(t)
	inner, err := mem.New("standard")
	if err != nil {
		t.Fatal(err)
	}
	policy := settle.Config{
		Trigger:   32 << 10,
		Standard:  settle.ClassTimers{Linger: 20 * time.Millisecond, AgeCap: 60 * time.Millisecond},
		Express:   settle.ClassTimers{Linger: 20 * time.Millisecond, AgeCap: 60 * time.Millisecond},
		OutputCap: 64 << 10, ReadGrace: 200 * time.Millisecond, Workers: 2, ScratchDir: t.TempDir(),
	}
	cfg := node.Defaults()
	cfg.StarID = "dev-star"
	cfg.Standard.FlushInterval = 2 * time.Millisecond
	cfg.Standard.TargetFlightBytes = 16 << 10
	cfg.Settle = policy
	cfg.DeletionPending = 100 * time.Millisecond
	n, err := node.Open(ctx, cfg, node.Deps{Meta: ms, Objects: inner, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	reg := prometheus.NewRegistry()
	st := &settle.Stores{Meta: ms, Objects: inner, SettledBucket: "standard", Streams: settle.MetaStreams{Meta: ms},
		Config: policy, Metrics: settle.NewMetrics(reg), Logger: testLog()}
	r, err := auditor.New(st, auditor.Options{Interval: 50 * time.Millisecond, RetryBase: 20 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(rctx) })
	defer func() { stop(); wg.Wait() }()

	const basin = "dev-basin"
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: basin}, ""); err != nil {
		t.Fatal(err)
	}
	names := map[string]*api.StreamConfig{"kept": nil, "aged": {RetentionPolicy: &api.RetentionPolicy{AgeSecs: 1}}, "gone": nil}
	for name, sc := range names {
		if _, err := n.CreateStream(ctx, basin, api.CreateStreamRequest{Stream: name, Config: sc}, ""); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][][]byte{}
	// agedOut is when every record of stream aged is past its retention (a
	// loaded machine can take that long between its last append and a
	// read: the read then rightly finds nothing).
	var agedOut time.Time
	for round := range 30 {
		for name := range names {
			in := &api.AppendInput{}
			for i := range 10 {
				in.Records = append(in.Records, api.Record{Body: []byte(fmt.Sprintf("%s-%d-%d-%s", name, round, i, strings.Repeat("x", 400)))})
			}
			if _, err := n.Append(ctx, basin, name, in, nil); err != nil {
				t.Fatal(err)
			}
			if name == "aged" {
				agedOut = time.Now().Add(time.Second) // its retention age
			}
			for _, rec := range in.Records {
				want[name] = append(want[name], rec.Body)
			}
		}
		readRetained(t, n, basin, "aged", want["aged"], agedOut)
		nextPass(t, reg)
	}
	ids := map[string]string{}
	for name := range names {
		ids[name] = streamID(t, ms, basin, name)
	}
	// Stream gone is deleted and, once its deletion is no longer pending,
	// created again under the same name: a new stream, none of the old one.
	old := ids["gone"]
	delete(ids, "gone")
	if err := n.DeleteStream(ctx, basin, "gone"); err != nil {
		t.Fatal(err)
	}
	poll.UntilErr(t, 10*time.Second, "re-creating stream gone once its deletion is no longer pending", func() error {
		_, err := n.CreateStream(ctx, basin, api.CreateStreamRequest{Stream: "gone"}, "")
		if ae := (*api.Error)(nil); err != nil && !(errors.As(err, &ae) && ae.Code == api.CodeStreamDeletionPending) {
			t.Fatalf("re-create gone: %v", err)
		}
		return err
	})
	in := &api.AppendInput{Records: []api.Record{{Body: []byte("new-0")}, {Body: []byte("new-1")}}}
	if _, err := n.Append(ctx, basin, "gone", in, nil); err != nil {
		t.Fatal(err)
	}
	checkReads(t, n, basin, "gone", [][]byte{[]byte("new-0"), []byte("new-1")})
	ids["gone"] = streamID(t, ms, basin, "gone")
	if err := poll.Wait(30*time.Second, func() error {
		start := readRetained(t, n, basin, "aged", want["aged"], agedOut)
		stray := strayObjects(t, ms, inner, basin, ids)
		oldRows := refRows(t, ms, old)
		if start == 0 || len(stray) > 0 || oldRows > 0 {
			return fmt.Errorf("the aged stream's reads start at %d, stray objects %v, %d rows of the deleted stream", start, stray, oldRows)
		}
		t.Logf("aged stream: reads start at %d of %d; no stray settled object; the deleted stream's rows and objects are gone", start, len(want["aged"]))
		return nil
	}); err != nil {
		t.Fatalf("after 30 s: %v; metrics:\n%s", err, dump(t, reg))
	}
	checkReads(t, n, basin, "gone", [][]byte{[]byte("new-0"), []byte("new-1")})
	checkReads(t, n, basin, "kept", want["kept"])
	tail, err := n.CheckTail(ctx, basin, "aged", nil)
	if err != nil {
		t.Fatal(err)
	}
	if tail.SeqNum != uint64(len(want["aged"])) {
		t.Fatalf("check-tail of the aged stream: %d, want %d", tail.SeqNum, len(want["aged"]))
	}
}

// readKept reads a stream from seq 0 and checks that every record read is
// the one appended at its seq; it returns where the read started.
func readKept(t *testing.T, n *node.Node, basin, name string, want [][]byte) uint64 {
	t.Helper()
	return readRetained(t, n, basin, name, want, time.Time{})
}

// readRetained is readKept for a stream under a retention age: once every
// record is past it (expired: the last append's return plus the age), a
// read from 0 may find nothing, and the read starts past the last record.
func readRetained(t *testing.T, n *node.Node, basin, name string, want [][]byte, expired time.Time) uint64 {
	t.Helper()
	var start, next uint64
	for first := true; next < uint64(len(want)); first = false {
		asked := time.Now()
		b, err := n.Read(context.Background(), basin, name, api.ReadRequest{From: api.FromSeqNum, Value: next, Count: api.Uint64(1000), Bytes: api.Uint64(1 << 20)}, nil)
		if err != nil {
			t.Fatalf("read %s from %d: %v", name, next, err)
		}
		if len(b.Records) == 0 && first && !expired.IsZero() && asked.After(expired) {
			return uint64(len(want)) // every record past retention
		}
		if len(b.Records) == 0 {
			t.Fatalf("read %s from %d: no records", name, next)
		}
		if first {
			start = b.Records[0].SeqNum
		}
		for _, r := range b.Records {
			if r.SeqNum >= uint64(len(want)) || !bytes.Equal(r.Body, want[r.SeqNum]) {
				t.Fatalf("%s record %d: body %.20q is not the one appended there", name, r.SeqNum, r.Body)
			}
		}
		next = b.Records[len(b.Records)-1].SeqNum + 1
	}
	return start
}

func refRows(t *testing.T, ms meta.Store, id string) int {
	t.Helper()
	pg, err := ms.Query(context.Background(), meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~"})
	if err != nil {
		t.Fatal(err)
	}
	return len(pg.Items)
}

// strayObjects lists the settled objects no catalog row names.
func strayObjects(t *testing.T, ms meta.Store, objs *mem.Store, basin string, ids map[string]string) []string {
	t.Helper()
	named := map[string]bool{}
	for _, id := range ids {
		pg, err := ms.Query(context.Background(), meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~"})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range pg.Items {
			var r meta.Ref
			if err := meta.Decode(it.Val, &r); err != nil {
				t.Fatal(err)
			}
			if s := r.Settled; s != nil {
				named[format.SettledKey(basin, id, s.Epoch, s.FirstSeq, s.Revision)] = true
			}
		}
	}
	var stray []string
	for info, err := range objs.Bucket("standard").List(context.Background(), "streams/") {
		if err != nil {
			t.Fatal(err)
		}
		if !named[info.Key] {
			stray = append(stray, info.Key)
		}
	}
	return stray
}

// The in-process runner applies trim commands and delete_on_empty beside
// a star as `star dev` runs it: a trim command appended to a stream makes
// reads from 0 start past the rows below its point, with every record
// read the one appended; a stream whose records age out and whose leader
// releases it idle is deleted once empty for its min age, while a stream
// with the same config that keeps being appended to is kept.
func TestDevStarTrimsAndDeletesEmpty(t *testing.T) {
	ctx := context.Background()
	ms := testsvc.SQLite(t)
	inner, err := mem.New("standard")
	if err != nil {
		t.Fatal(err)
	}
	policy := settle.Config{
		Trigger:   32 << 10,
		Standard:  settle.ClassTimers{Linger: 20 * time.Millisecond, AgeCap: 60 * time.Millisecond},
		Express:   settle.ClassTimers{Linger: 20 * time.Millisecond, AgeCap: 60 * time.Millisecond},
		OutputCap: 32 << 10, ReadGrace: 200 * time.Millisecond, Workers: 2, ScratchDir: t.TempDir(),
	}
	cfg := node.Defaults()
	cfg.StarID = "dev-star"
	cfg.Standard.FlushInterval = 2 * time.Millisecond
	cfg.Standard.TargetFlightBytes = 16 << 10
	cfg.Settle = policy
	cfg.DeletionPending = 100 * time.Millisecond
	cfg.IdleRelease = 400 * time.Millisecond
	n, err := node.Open(ctx, cfg, node.Deps{Meta: ms, Objects: inner, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	reg := prometheus.NewRegistry()
	st := &settle.Stores{Meta: ms, Objects: inner, SettledBucket: "standard", Streams: settle.MetaStreams{Meta: ms},
		Config: policy, Metrics: settle.NewMetrics(reg), Logger: testLog()}
	r, err := auditor.New(st, auditor.Options{Interval: 50 * time.Millisecond, RetryBase: 20 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(rctx) })
	defer func() { stop(); wg.Wait() }()

	const basin = "dev-basin"
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: basin}, ""); err != nil {
		t.Fatal(err)
	}
	doe := &api.StreamConfig{RetentionPolicy: &api.RetentionPolicy{AgeSecs: 1}, DeleteOnEmpty: &api.DeleteOnEmptyConfig{MinAgeSecs: 1}}
	// The busy stream ages out as fast, but must stay empty for 10 s before
	// it may go: appends a loaded machine spaces more than 2 s apart
	// would otherwise empty and delete it, as the policy says they may.
	busy := &api.StreamConfig{RetentionPolicy: &api.RetentionPolicy{AgeSecs: 1}, DeleteOnEmpty: &api.DeleteOnEmptyConfig{MinAgeSecs: 10}}
	names := map[string]*api.StreamConfig{"trimmed": nil, "emptied": doe, "busy": busy}
	for name, sc := range names {
		if _, err := n.CreateStream(ctx, basin, api.CreateStreamRequest{Stream: name, Config: sc}, ""); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][][]byte{}
	appendTo := func(name string, recs ...api.Record) {
		t.Helper()
		in := &api.AppendInput{Records: recs}
		if _, err := n.Append(ctx, basin, name, in, nil); err != nil {
			t.Fatalf("append to %s: %v", name, err)
		}
		for _, rec := range recs {
			want[name] = append(want[name], rec.Body)
		}
	}
	batch := func(name string, round int) []api.Record {
		var recs []api.Record
		for i := range 10 {
			recs = append(recs, api.Record{Body: []byte(fmt.Sprintf("%s-%d-%d-%s", name, round, i, strings.Repeat("x", 400)))})
		}
		return recs
	}
	for round := range 20 {
		for _, name := range []string{"trimmed", "emptied", "busy"} {
			appendTo(name, batch(name, round)...)
		}
		nextPass(t, reg)
	}
	const point = 150
	appendTo("trimmed", api.TrimRecord(point))
	appendTo("trimmed", batch("trimmed", 99)...)
	round := 100
	if err := poll.Wait(30*time.Second, func() error {
		appendTo("busy", batch("busy", round)...) // busy stays busy meanwhile
		round++
		start := readKept(t, n, basin, "trimmed", want["trimmed"])
		gone := deletedAt(t, ms, basin, "emptied")
		if start == 0 || !gone {
			return fmt.Errorf("the trimmed stream's reads start at %d, the emptied stream deleted %v", start, gone)
		}
		if start > point {
			t.Fatalf("reads of the trimmed stream start at %d, past the trim point %d", start, point)
		}
		t.Logf("trimmed stream: reads start at %d (point %d); the empty stream is deleted", start, point)
		return nil
	}); err != nil {
		t.Fatalf("after 30 s: %v; metrics:\n%s", err, dump(t, reg))
	}
	if _, err := n.Append(ctx, basin, "emptied", &api.AppendInput{Records: []api.Record{{Body: []byte("late")}}}, nil); err == nil {
		t.Fatal("an append to the deleted empty stream was acknowledged")
	}
	if deletedAt(t, ms, basin, "busy") {
		t.Fatal("the busy stream with delete_on_empty was deleted")
	}
	readKept(t, n, basin, "busy", want["busy"])
}

// deletedAt reports whether a stream's name row says it is deleted.
func deletedAt(t *testing.T, ms meta.Store, basin, name string) bool {
	t.Helper()
	k := meta.StreamNameKey(basin, name)
	it, err := ms.Get(context.Background(), k.PK, k.SK)
	if err != nil {
		t.Fatal(err)
	}
	var row struct {
		DeletedAt *time.Time `json:"deleted_at"`
	}
	if err := meta.Decode(it.Val, &row); err != nil {
		t.Fatal(err)
	}
	return row.DeletedAt != nil
}
