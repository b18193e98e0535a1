package node_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/node"
)

// The deposed writer, by partition: star a, cut off from the metastore,
// keeps appending to the buckets (the write path never touches the
// metastore) while b presumes it dead, takes the stream over and fences
// a's chain. a is given a dead-after far above b's, as a star whose clock
// runs slow would have, so its own liveness check does not stop it:
// safety must come from the fence. Every append a acknowledged is below
// b's first seq num and reads back at its seq; a acknowledges nothing
// after b's takeover; and once the partition heals a is a zombie that
// sheds the stream instead of serving it.
func TestPartitionedLeaderIsDeposed(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	aMeta := mfaults.New(st.meta, 1)
	ca := clusterConfig("a")
	ca.DeadAfter = 3 * time.Hour
	a, err := node.Open(ctx, ca, node.Deps{Meta: aMeta, Objects: st.objects, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		aMeta.SetUnavailable(false)
		a.Close(context.Background())
	})
	cb := clusterConfig("b")
	b := open(t, st, cb)
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}

	type ack struct {
		seq  uint64
		body string
		at   time.Time
	}
	var (
		mu          sync.Mutex
		acks        []ack
		indefinite  int
		attempts    int
		stop        = make(chan struct{})
		producer    sync.WaitGroup
		partitioned time.Time
	)
	producer.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			body := fmt.Sprintf("a-%d", i)
			in := &api.AppendInput{Records: []api.Record{{Body: []byte(body)}}}
			// A client's deadline: an append a's backlog budget stalls (its
			// absorb cannot reach the metastore) times out indefinite.
			actx, cancel := context.WithTimeout(ctx, time.Second)
			r, err := a.Append(actx, "basin-one", "s1", in, nil)
			cancel()
			mu.Lock()
			attempts++
			switch {
			case err == nil:
				acks = append(acks, ack{seq: r.Start.SeqNum, body: body, at: time.Now()})
			case strings.Contains(err.Error(), "may or may not be durable"), errors.Is(err, context.DeadlineExceeded):
				indefinite++
			}
			mu.Unlock()
			if err != nil {
				time.Sleep(2 * time.Millisecond)
			}
		}
	})
	poll.Until(t, 5*time.Second, "a acknowledges appends", func() bool { mu.Lock(); defer mu.Unlock(); return len(acks) >= 20 })

	aMeta.SetUnavailable(true)
	mu.Lock()
	partitioned, before := time.Now(), len(acks)
	mu.Unlock()
	// a goes on acknowledging while b waits out its dead-after bound:
	// until a's heartbeat is that old to b, so b may take over.
	poll.Until(t, 10*time.Second, "a's heartbeat ages past b's dead-after bound", func() bool { return a.HeartbeatAge() >= cb.DeadAfter })
	mu.Lock()
	during := len(acks) - before
	mu.Unlock()
	if during == 0 {
		t.Fatal("a acknowledged nothing while partitioned from the metastore: the test shows nothing")
	}

	first := appendUntil(t, b, "s1", records("b", 1))
	tookOver := time.Now()
	// a keeps trying against the fenced chain: two more of its appends end.
	mu.Lock()
	triedBefore := attempts
	mu.Unlock()
	poll.Until(t, 10*time.Second, "a tries again after the takeover", func() bool { mu.Lock(); defer mu.Unlock(); return attempts >= triedBefore+2 })
	close(stop)
	producer.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("a acknowledged %d appends before the partition and %d after it; %d failed indefinite; b's first seq %d, %v after the partition",
		before, len(acks)-before, indefinite, first.Start.SeqNum, tookOver.Sub(partitioned).Round(time.Millisecond))
	seen := map[uint64]bool{}
	for _, k := range acks {
		if k.seq >= first.Start.SeqNum {
			t.Fatalf("a acknowledged seq %d (%q) at or past b's first seq %d", k.seq, k.body, first.Start.SeqNum)
		}
		if seen[k.seq] {
			t.Fatalf("seq %d acknowledged twice", k.seq)
		}
		seen[k.seq] = true
		if k.at.After(tookOver) {
			t.Fatalf("a acknowledged seq %d after b took over", k.seq)
		}
	}
	got := readAll(t, b, "basin-one", "s1")
	if uint64(len(got)) != first.End.SeqNum {
		t.Fatalf("read back %d records, want %d", len(got), first.End.SeqNum)
	}
	for _, k := range acks {
		if string(got[k.seq].Body) != k.body {
			t.Fatalf("seq %d reads %q, a acknowledged %q", k.seq, got[k.seq].Body, k.body)
		}
	}
	if string(got[first.Start.SeqNum].Body) != "b-0" {
		t.Fatalf("b's seq %d reads %q", first.Start.SeqNum, got[first.Start.SeqNum].Body)
	}

	// The partition heals: a learns it was deposed and sheds the stream.
	aMeta.SetUnavailable(false)
	poll.Until(t, 5*time.Second, "a reports unhealthy", func() bool { return a.Healthy() != nil })
	select {
	case <-a.Zombied():
	case <-time.After(5 * time.Second):
		t.Fatal("the deposed star does not know it is a zombie")
	}
	if r, err := a.Append(ctx, "basin-one", "s1", records("late", 1), nil); err == nil {
		t.Fatalf("the deposed star acknowledged seq %d after the partition healed", r.Start.SeqNum)
	}
}

// A star that just regained the metastore does not judge its peers by
// heartbeats it could not see being written: it marks a stale-looking
// leader dead only once its own heartbeats have landed for a whole
// dead-after bound. (After a metastore outage every star looks stale, and
// the first one back must not depose the rest.) Until then b refuses with
// a 503: its clock guard (no beat landed for half the bound, as right
// after the outage or in a pause under load) or the wait for a whole
// bound of beats; the second must be seen, and a's row stays live.
func TestReconnectedStarWaitsBeforeJudging(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	ca := clusterConfig("a")
	ca.HeartbeatEvery, ca.DeadAfter = time.Hour, 3*time.Hour // a's row goes stale, a does not mind
	a := open(t, st, ca)
	bMeta := mfaults.New(st.meta, 1)
	cb := clusterConfig("b")
	cb.DeadAfter = 600 * time.Millisecond // a wide window for the wait, against pauses of a loaded machine
	b, err := node.Open(ctx, cb, node.Deps{Meta: bMeta, Objects: st.objects, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("a", 3), nil); err != nil {
		t.Fatal(err)
	}
	bMeta.SetUnavailable(true)
	poll.Until(t, 20*cb.DeadAfter, "b's outage outlasts two dead-after bounds", func() bool { return b.HeartbeatAge() >= 2*cb.DeadAfter })
	beforeOutage, _, _, err := leader.ReadRegistration(ctx, st.meta, "b")
	if err != nil {
		t.Fatal(err)
	}
	bMeta.SetUnavailable(false)

	var waited int
	var ack api.AppendAck
	poll.UntilErr(t, 10*time.Second, "b takes the stream over", func() error {
		if ack, err = b.Append(ctx, "basin-one", "s1", records("b", 1), nil); err == nil {
			return nil
		}
		switch e := apiErr(t, err, 503, api.CodeUnavailable); {
		case strings.Contains(e.Message, "only just regained the metastore"):
			waited++
		case strings.Contains(e.Message, "has not renewed its registration"):
		default:
			t.Fatalf("b refused for another reason: %s", e.Message)
		}
		if reg, _, _, err := leader.ReadRegistration(ctx, st.meta, "a"); err != nil || reg.State != meta.StarLive {
			t.Fatalf("a's registration while b refuses: %+v %v", reg, err)
		}
		return err
	})
	tookOver := time.Now()
	if waited == 0 {
		t.Fatal("b never refused for want of a whole bound of heartbeats: the test shows nothing")
	}
	if ack.Start.SeqNum != 3 {
		t.Fatalf("b's first append at %d, want 3", ack.Start.SeqNum)
	}
	// The run b judged by began after the outage, a whole bound before
	// the takeover.
	reg, _, _, err := leader.ReadRegistration(ctx, st.meta, "b")
	if err != nil {
		t.Fatal(err)
	}
	if reg.ConnectedSince <= beforeOutage.Heartbeat {
		t.Fatalf("b's run began at %d, not after its last beat before the outage (%d)", reg.ConnectedSince, beforeOutage.Heartbeat)
	}
	if ran := tookOver.Sub(time.UnixMilli(reg.ConnectedSince)); ran < cb.DeadAfter {
		t.Fatalf("b took over %v into its run of heartbeats, before a whole bound (%v)", ran, cb.DeadAfter)
	}
	t.Logf("b refused %d times for the wait; took over %v into its run of heartbeats", waited, tookOver.Sub(time.UnixMilli(reg.ConnectedSince)).Round(time.Millisecond))
}

// A partitioned leader does not answer 412s from its stale sequencer: a,
// cut off from the metastore and idle (so it meets no poison), still
// believes the stream's next seq is 3 after b took it over and
// acknowledged 3..8. Rejections that report a's memory (a match_seq_num
// or fencing token mismatch) are refused with a definite 503 once the
// clock guard no longer holds, through a unary append and through an
// append session alike; before the partition, a answers them as 412s.
func TestPartitionedLeaderRefusesStaleRejections(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	aMeta := mfaults.New(st.meta, 1)
	ca := clusterConfig("a")
	ca.BalanceEvery = 0
	a, err := node.Open(ctx, ca, node.Deps{Meta: aMeta, Objects: st.objects, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		aMeta.SetUnavailable(false)
		a.Close(context.Background())
	})
	cb := clusterConfig("b")
	cb.BalanceEvery = 0
	b := open(t, st, cb)
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("a", 3), nil); err != nil {
		t.Fatal(err)
	}
	mismatch := func(in *api.AppendInput) *api.AppendInput {
		in.MatchSeqNum = api.Uint64(9)
		return in
	}
	tokened := func(in *api.AppendInput) *api.AppendInput {
		in.FencingToken = api.String("not-the-token")
		return in
	}
	// Connected, a answers both from its sequencer.
	_, err = a.Append(ctx, "basin-one", "s1", mismatch(records("x", 1)), nil)
	if e := apiErr(t, err, 412, api.CodeSeqNumMismatch); expected(e) != 3 {
		t.Fatalf("a's 412 before the partition: %+v", e.Body)
	}
	_, err = a.Append(ctx, "basin-one", "s1", tokened(records("x", 1)), nil)
	apiErr(t, err, 412, api.CodeFencingTokenMismatch)

	aMeta.SetUnavailable(true)
	first := appendUntil(t, b, "s1", records("b", 6))
	if first.Start.SeqNum != 3 || first.End.SeqNum != 9 {
		t.Fatalf("b's takeover append: %+v", first)
	}
	// a is still the leader in its own eyes: its loglet is not deposed.
	if err := a.Healthy(); err != nil {
		t.Fatalf("a should not know it was deposed yet: %v", err)
	}
	refused := func(what string, err error) {
		t.Helper()
		e := apiErr(t, err, 503, api.CodeUnavailable)
		if !strings.HasSuffix(e.Message, "; retry") || !strings.Contains(e.Message, "not renewed its registration") {
			t.Fatalf("%s through the cut-off star: %s", what, e.Message)
		}
	}
	_, err = a.Append(ctx, "basin-one", "s1", mismatch(records("x", 1)), nil)
	refused("append(match=9)", err)
	_, err = a.Append(ctx, "basin-one", "s1", tokened(records("x", 1)), nil)
	refused("append(token)", err)
	// The same Submit serves append sessions (S2S and the SDK's), which
	// send the refusal as their terminal frame.
	ap, err := a.OpenAppend(ctx, "basin-one", "s1", nil)
	if err != nil {
		t.Fatalf("a opens its stream for appending: %v", err)
	}
	_, err = ap.Submit(ctx, mismatch(records("x", 1)))
	refused("session append(match=9)", err)
	_, err = ap.Submit(ctx, tokened(records("x", 1)))
	refused("session append(token)", err)

	// b, the leader, answers the truth.
	_, err = b.Append(ctx, "basin-one", "s1", &api.AppendInput{Records: records("y", 1).Records, MatchSeqNum: api.Uint64(3)}, nil)
	if e := apiErr(t, err, 412, api.CodeSeqNumMismatch); expected(e) != 9 {
		t.Fatalf("b's 412: %+v", e.Body)
	}
}

// expected is the next seq num a 412 reports (MaxUint64: none).
func expected(e *api.Error) uint64 {
	n, ok := e.ExpectedSeqNum()
	if !ok {
		return math.MaxUint64
	}
	return n
}
