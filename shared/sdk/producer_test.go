package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/sdk/sdktest"
)

// batchLog records the batches the server receives.
type batchLog struct {
	mu      sync.Mutex
	sizes   []int
	bytes   []uint64
	matches []*uint64
}

func (l *batchLog) hook(_ context.Context, c sdktest.AppendCall) sdktest.Fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sizes = append(l.sizes, len(c.Input.Records))
	l.bytes = append(l.bytes, api.MeteredBytes(c.Input.Records))
	l.matches = append(l.matches, c.Input.MatchSeqNum)
	return sdktest.Fault{}
}

func (l *batchLog) get() ([]int, []uint64, []*uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.sizes...), append([]uint64(nil), l.bytes...), append([]*uint64(nil), l.matches...)
}

func submitAll(t *testing.T, p *Producer, recs []api.Record) []*RecordFuture {
	t.Helper()
	ctx := testCtx(t)
	futs := make([]*RecordFuture, len(recs))
	for i, r := range recs {
		f, err := p.Submit(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		futs[i] = f
	}
	return futs
}

func checkSeqNums(t *testing.T, futs []*RecordFuture) {
	t.Helper()
	for i, f := range futs {
		ack, err := f.Wait(testCtx(t))
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if ack.SeqNum != uint64(i) || ack.SeqNum < ack.Batch.Start.SeqNum || ack.SeqNum >= ack.Batch.End.SeqNum {
			t.Fatalf("record %d: ack %+v", i, ack)
		}
	}
}

func TestProducerBatchesByCount(t *testing.T) {
	var log batchLog
	srv, _, s := setup(t, sdktest.Options{AppendHook: log.hook}, nil)
	ctx := testCtx(t)
	p, err := s.NewProducer(ctx, ProducerOptions{Linger: time.Hour, MaxBatchRecords: 10})
	if err != nil {
		t.Fatal(err)
	}
	futs := submitAll(t, p, textRecords(make([]string, 35)...))
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkSeqNums(t, futs)
	sizes, _, _ := log.get()
	if fmt.Sprint(sizes) != "[10 10 10 5]" {
		t.Fatalf("batch sizes %v", sizes)
	}
	if got := len(srv.Records(testBasin, "s")); got != 35 {
		t.Fatalf("stream has %d records", got)
	}
}

func TestProducerBatchesByBytes(t *testing.T) {
	var log batchLog
	_, _, s := setup(t, sdktest.Options{AppendHook: log.hook}, nil)
	ctx := testCtx(t)
	p, err := s.NewProducer(ctx, ProducerOptions{Linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rec := api.Record{Body: bytes.Repeat([]byte{1}, 100_000-8)} // 100,000 metered
	recs := make([]api.Record, 25)
	for i := range recs {
		recs[i] = rec
	}
	futs := submitAll(t, p, recs)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkSeqNums(t, futs)
	sizes, metered, _ := log.get()
	// 10 records are 1,000,000 metered bytes; an 11th would pass 1 MiB.
	if fmt.Sprint(sizes) != "[10 10 5]" {
		t.Fatalf("batch sizes %v", sizes)
	}
	for _, m := range metered {
		if m > api.MaxBatchMeteredBytes {
			t.Fatalf("batch of %d metered bytes", m)
		}
	}
	// A record that fits no batch is refused at once.
	_, err = p.Submit(ctx, api.Record{Body: make([]byte, api.MaxBatchMeteredBytes)})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusUnprocessableEntity {
		t.Fatalf("oversized record: %v", err)
	}
}

// TestProducerLinger: a lone record goes out after the linger, without a
// flush or close.
func TestProducerLinger(t *testing.T) {
	var log batchLog
	_, _, s := setup(t, sdktest.Options{AppendHook: log.hook}, nil)
	ctx := testCtx(t)
	p, err := s.NewProducer(ctx, ProducerOptions{Linger: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	start := time.Now()
	f, err := p.Submit(ctx, api.Record{Body: []byte("alone")})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, f.Done(), 5*time.Second, "the lingering record's ack")
	if ack, err := f.Result(); err != nil || ack.SeqNum != 0 {
		t.Fatalf("ack %+v %v", ack, err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("acked after %v, before the linger", d)
	}
	// Records submitted together within the linger share a batch.
	f1, _ := p.Submit(ctx, api.Record{Body: []byte("a")})
	f2, _ := p.Submit(ctx, api.Record{Body: []byte("b")})
	a1, err1 := f1.Wait(ctx)
	a2, err2 := f2.Wait(ctx)
	if err1 != nil || err2 != nil || a1.Batch != a2.Batch || a2.SeqNum != 2 {
		t.Fatalf("acks %+v %+v (%v %v)", a1, a2, err1, err2)
	}
	if sizes, _, _ := log.get(); fmt.Sprint(sizes) != "[1 2]" {
		t.Fatalf("batch sizes %v", sizes)
	}
}

// TestProducerMatchSeqNum: every batch carries the seq num its first
// record must get.
func TestProducerMatchSeqNum(t *testing.T) {
	var log batchLog
	_, _, s := setup(t, sdktest.Options{AppendHook: log.hook}, nil)
	appendText(t, s, "x", "y", "z")
	ctx := testCtx(t)
	p, err := s.NewProducer(ctx, ProducerOptions{Linger: time.Hour, MaxBatchRecords: 4, MatchSeqNum: api.Uint64(3)})
	if err != nil {
		t.Fatal(err)
	}
	submitAll(t, p, textRecords(make([]string, 10)...))
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, matches := log.get()
	var got []uint64
	for _, m := range matches[1:] { // the first batch is appendText's
		if m == nil {
			t.Fatal("a producer batch lacks match_seq_num")
		}
		got = append(got, *m)
	}
	if fmt.Sprint(got) != "[3 7 11]" {
		t.Fatalf("match_seq_nums %v", got)
	}
}

// TestProducerFailure: once a batch fails (here on match_seq_num), its
// records and all later ones fail, and Submit refuses new records.
func TestProducerFailure(t *testing.T) {
	_, _, s := setup(t, sdktest.Options{}, nil)
	appendText(t, s, "x")
	ctx := testCtx(t)
	p, err := s.NewProducer(ctx, ProducerOptions{Linger: time.Hour, MaxBatchRecords: 2, MatchSeqNum: api.Uint64(0)})
	if err != nil {
		t.Fatal(err)
	}
	futs := submitAll(t, p, textRecords("a", "b", "c"))
	p.Flush()
	for i, f := range futs {
		_, err := f.Wait(ctx)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusPreconditionFailed {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	// The failure is seen by the resolver; Submit refuses soon after.
	poll.Until(t, 5*time.Second, "Submit to refuse records after the failure", func() bool {
		_, err := p.Submit(ctx, api.Record{Body: []byte("d")})
		if err != nil && !IsDefinite(err) {
			t.Fatalf("refused submit should be definite: %v", err)
		}
		return err != nil
	})
	if err := p.Close(ctx); err == nil {
		t.Fatal("Close after a failure returned nil")
	}
}

// TestProducerConcurrent: many goroutines submit; every record is acked
// exactly once with a distinct seq num, and each goroutine's records keep
// their order.
func TestProducerConcurrent(t *testing.T) {
	srv, _, s := setup(t, sdktest.Options{}, nil)
	ctx := testCtx(t)
	p, err := s.NewProducer(ctx, ProducerOptions{Linger: time.Millisecond, MaxBatchRecords: 7})
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 50
	seqs := make([][]uint64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var futs []*RecordFuture
			for i := range each {
				f, err := p.Submit(ctx, api.Record{Body: fmt.Appendf(nil, "%d/%d", w, i)})
				if err != nil {
					t.Error(err)
					return
				}
				futs = append(futs, f)
			}
			for _, f := range futs {
				ack, err := f.Wait(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				seqs[w] = append(seqs[w], ack.SeqNum)
			}
		})
	}
	wg.Wait()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	recs := srv.Records(testBasin, "s")
	if len(recs) != workers*each {
		t.Fatalf("stream has %d records", len(recs))
	}
	for w := range workers {
		for i, sn := range seqs[w] {
			if want := fmt.Sprintf("%d/%d", w, i); string(recs[sn].Body) != want {
				t.Fatalf("seq %d holds %q, want %q", sn, recs[sn].Body, want)
			}
			if i > 0 && sn <= seqs[w][i-1] {
				t.Fatalf("worker %d: seq nums out of order", w)
			}
		}
	}
}

// TestProducerBackpressure: with acks held, Submit eventually blocks and
// gives up with its context; that leaves the records already accepted
// alone, and they are acked once the server lets acks through.
func TestProducerBackpressure(t *testing.T) {
	g := newGate()
	srv, _, s := setup(t, sdktest.Options{AppendHook: g.hook}, nil)
	ctx := testCtx(t)
	p, err := s.NewProducer(ctx, ProducerOptions{
		Linger:          time.Hour,
		MaxBatchRecords: 10,
		Session:         AppendSessionOptions{MaxUnackedBytes: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	var accepted []*RecordFuture
	for i := 0; ; i++ {
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		f, err := p.Submit(short, api.Record{Body: fmt.Appendf(nil, "%d", i)})
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("record %d: %v", i, err)
			}
			break
		}
		accepted = append(accepted, f)
		if i > 1000 {
			t.Fatal("Submit never blocked")
		}
	}
	// One batch in the session, two queued, one being filled: at most 40.
	if n := len(accepted); n < 30 || n > 40 {
		t.Fatalf("accepted %d records before blocking", n)
	}
	g.release()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkSeqNums(t, accepted)
	if got := len(srv.Records(testBasin, "s")); got != len(accepted) {
		t.Fatalf("stream has %d records, %d accepted", got, len(accepted))
	}
}
