package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/testsvc"
)

// A 412 judged on a tail that earlier appends have not yet made durable
// is answered only once they are: answered at once it names a tail a read
// after it does not see (star/e2e/verify found a 412 reporting seq 9642, then
// a read answering 416 with the durable tail 9628, while the appends
// between waited out a zone halt). While the object store holds the first
// append, the conditional one waits; when the store comes back, the first
// is acknowledged before the 412 returns, and a read after the 412 sees
// the tail it named. If the store stays away past the admission timeout,
// the conditional append is refused 503 (nothing sequenced), not 412.
func TestRejectionWaitsForEarlierAppends(t *testing.T) {
	ctx := context.Background()
	inner, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	objs := faults.Wrap(inner)
	cfg := testConfig()
	cfg.AdmitTimeout = 2 * time.Second
	n := openOn(t, testsvc.SQLite(t), objs, cfg)
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "s1"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Append(ctx, "basin-one", "s1", records("warm", 1), nil); err != nil {
		t.Fatal(err)
	}
	conditional := func() *api.AppendInput {
		in := records("cond", 1)
		zero := uint64(0)
		in.MatchSeqNum = &zero // the tail is past 0: a mismatch
		return in
	}

	for _, back := range []bool{true, false} {
		objs.SetDown("standard", faults.Down{Delay: 20 * time.Millisecond}) // PUTs fail and are retried
		app, err := n.OpenAppend(ctx, "basin-one", "s1", nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := app.Submit(ctx, records("held", 3)) // sequenced, held by the store
		if err != nil {
			t.Fatal(err)
		}
		acked := make(chan time.Time, 1)
		first := make(chan error, 1)
		go func() {
			_, err := p.Wait(ctx)
			acked <- time.Now()
			first <- err
		}()
		done := make(chan error, 1)
		var returned time.Time
		go func() {
			_, err := n.Append(ctx, "basin-one", "s1", conditional(), nil)
			returned = time.Now()
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("back=%v: the conditional append returned while the earlier one was held: %v", back, err)
		case <-time.After(300 * time.Millisecond):
		}
		if !back {
			// Held past the admission timeout: refused, nothing sequenced.
			err := <-done
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status != 503 || !ae.Definite() && ae.Code == api.CodeSeqNumMismatch {
				t.Fatalf("held past the admission timeout: %v, want 503", err)
			}
			if got := metric(t, n, "starlog_append_rejections_unconfirmed_total"); got != 1 {
				t.Fatalf("starlog_append_rejections_unconfirmed_total = %v, want 1", got)
			}
			objs.SetUp("standard")
			<-acked
			<-first
			app.Close()
			continue
		}
		objs.SetUp("standard")
		err = <-done
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeSeqNumMismatch {
			t.Fatalf("after the store came back: %v, want 412 seq_num_mismatch", err)
		}
		at := <-acked
		if err := <-first; err != nil {
			t.Fatalf("the held append: %v", err)
		}
		if returned.Before(at) && at.Sub(returned) > 50*time.Millisecond {
			t.Fatalf("the 412 returned %v before the earlier append was acknowledged", at.Sub(returned))
		}
		next, _ := ae.ExpectedSeqNum()
		tail, err := n.CheckTail(ctx, "basin-one", "s1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tail.SeqNum < next {
			t.Fatalf("check-tail after the 412 says %d, below the %d the 412 named", tail.SeqNum, next)
		}
		app.Close()
	}
}
