// Package functions_test runs the auditor functions as built binaries
// under the Lambda Runtime Interface Emulator, against versitygw,
// DynamoDB Local and local-aws-sqs on loopback, on state written by the
// production write path; and checks SQS delivery semantics in process.
package functions_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/starlog/starlog/functions/internal/handler"
	"github.com/starlog/starlog/functions/internal/localsqs"
	"github.com/starlog/starlog/functions/internal/testenv"
	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/auditjob/awsenv"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
)

var dyn testsvc.SharedDynamo

func TestMain(m *testing.M) {
	code := m.Run()
	dyn.Stop()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// queues are the three job queues with their dead-letter queues, as the
// CDK stack makes them.
type queues map[string]*localsqs.Queue

func makeQueues(t *testing.T, srv *localsqs.Server, visibility time.Duration) queues {
	q := queues{}
	for _, k := range auditjob.Kinds {
		q[string(k)] = srv.CreateWithDLQ(t, string(k), visibility, 5)
	}
	return q
}

func (q queues) env() map[string]string {
	m := map[string]string{}
	for k, v := range q {
		m[awsenv.QueueURLEnv(k)] = v.URL
	}
	return m
}

func (q queues) urls() map[string]string {
	m := map[string]string{}
	for k, v := range q {
		m[k] = v.URL
	}
	return m
}

// writeState writes three streams, halts the epoch once midway (so a
// halted epoch 1 sits below the live epoch 2), writes on, and waits until
// everything is absorbed.
func writeState(t *testing.T, e *testenv.Env) {
	e.Write("a", 30, 4, 1024)
	e.Write("b", 10, 2, 300)
	e.Write("c", 3, 1, 50)
	e.Halt("a")
	e.Write("a", 5, 2, 500)
	e.Write("b", 3, 2, 100)
	e.WaitAbsorbed()
	if eps := e.Epochs(); len(eps) != 2 || eps[0].Cut == nil || eps[0].Settled {
		t.Fatalf("want a halted epoch 1 below epoch 2: %+v", eps)
	}
	e.WaitRipe()
}

// waitGraceOver waits until every epoch's rewrites are older than the read
// grace, so that a trim retires every slot below the rewritten cursor.
func waitGraceOver(t *testing.T, e *testenv.Env) {
	t.Helper()
	poll.Until(t, 10*time.Second, "the read grace to pass", func() bool {
		cutoff := time.Now().Add(-e.Policy.ReadGrace).UnixMilli()
		for _, ep := range e.Epochs() {
			for _, rw := range ep.Rewrites {
				if rw.At >= cutoff {
					return false
				}
			}
		}
		return true
	})
}

func sortedBodies(jobs []auditjob.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, string(j.Marshal()))
	}
	slices.Sort(out)
	return out
}

// deliverAll plays the event source mapping with batch size n until the
// queue is empty; every record must succeed. It returns the job bodies.
func deliverAll(t *testing.T, srv *localsqs.Server, q *localsqs.Queue, n int, h localsqs.Handler) []string {
	t.Helper()
	ctx := context.Background()
	var bodies []string
	for {
		msgs, resp, err := srv.Deliver(ctx, q, n, h)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			slices.Sort(bodies)
			return bodies
		}
		if len(resp.BatchItemFailures) > 0 {
			t.Fatalf("batch item failures %+v", resp.BatchItemFailures)
		}
		for _, m := range msgs {
			bodies = append(bodies, *m.Body)
		}
	}
}

// Each function as a built bootstrap under the emulator, one after the
// other, on one evolving state: plan enqueues the due settle and trim
// jobs; settle turns the transit window into catalog rows and settled
// objects; trim deletes the retired slots once the grace has passed;
// janitor finds the halted epoch and chain-settle settles it without
// displacing the live head; every record reads back throughout.
func TestFunctionsUnderRIE(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the functions and starts versitygw, DynamoDB Local, local-aws-sqs and the emulator")
	}
	if _, err := buildFunctions(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := testenv.New(t, &dyn)
	srv := localsqs.Start(t)
	qs := makeQueues(t, srv, 30*time.Second)
	extra := qs.env()
	extra[awsenv.EnvSQSEndpoint] = srv.Endpoint
	env := e.FunctionEnv(extra)
	writeState(t, e)
	e.CheckReads()

	var planned []auditjob.Job
	t.Run("plan", func(t *testing.T) {
		want, err := auditjob.Plan(ctx, e.Stores, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		r := startRIE(t, "plan", env)
		if body := r.invokeOK(t, scheduledEvent("Starlog-plan")); string(body) != "null" {
			t.Fatalf("plan returned %s", body)
		}
		r.stop()
		var got []string
		for _, k := range []string{"settle", "trim"} {
			bodies, err := srv.Peek(ctx, qs[k])
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range bodies {
				j, err := auditjob.Parse([]byte(b))
				if err != nil || j.Queue() != k {
					t.Fatalf("message %s on the %s queue: %v", b, k, err)
				}
				planned = append(planned, j)
				got = append(got, b)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, sortedBodies(want)) {
			t.Fatalf("queued %q, planned in process %q", got, sortedBodies(want))
		}
		// Every marker is ripe and live: settle work in both epochs, and
		// no trim yet (no marker is resolved, so no slot can retire).
		epochs := map[uint64]bool{}
		for _, j := range planned {
			if j.Kind != settle.KindSettle {
				t.Fatalf("planned %s before anything settled", j)
			}
			epochs[j.Epoch] = true
		}
		if !epochs[1] || !epochs[2] {
			t.Fatalf("want settle jobs in epochs 1 and 2: %v", planned)
		}
	})

	t.Run("settle", func(t *testing.T) {
		r := startRIE(t, "settle", env)
		bodies := deliverAll(t, srv, qs["settle"], 1, r.sqsHandler(t))
		var settles []auditjob.Job
		for _, j := range planned {
			if j.Kind == settle.KindSettle {
				settles = append(settles, j)
			}
		}
		if !slices.Equal(bodies, sortedBodies(settles)) {
			t.Fatalf("settled %q, want %q", bodies, sortedBodies(settles))
		}
		if n := e.CheckSettled(); n < 3 {
			t.Fatalf("%d catalog rows for 3 streams", n)
		}
		for _, id := range e.IDs() {
			for _, row := range e.Rows(id) {
				if row.Settled == nil {
					t.Fatalf("stream %s: span ref [%d,%d) left after settling cap-ripe eras", id, row.FirstSeq, row.EndSeq)
				}
			}
		}
		if m := e.Markers(); len(m) != 0 {
			t.Fatalf("%d markers left unresolved: %+v", len(m), m)
		}
		e.CheckReads()

		// A batch with a job already done (harmless again) and a body
		// that is not a job: only the latter is reported.
		resp := r.sqsEvent(t, qs["settle"], map[string]string{"again": string(settles[0].Marshal()), "garbage": `{"kind":"settle","chain":{}}`})
		if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "garbage" {
			t.Fatalf("batch item failures %+v, want only the garbage record", resp.BatchItemFailures)
		}
	})

	t.Run("trim", func(t *testing.T) {
		before := map[uint64]int{}
		for _, ep := range e.Epochs() {
			before[ep.Epoch] = len(e.Slots(ep.Epoch))
		}
		// Now that the markers are resolved, plan finds the chain's slots
		// retirable: one trim job.
		p := startRIE(t, "plan", env)
		p.invokeOK(t, scheduledEvent("Starlog-plan"))
		p.stop()
		trim := auditjob.FromSettle(settle.Job{Kind: settle.KindTrim, Chain: e.Chain})
		if bodies, err := srv.Peek(ctx, qs["trim"]); err != nil || !slices.Equal(bodies, []string{string(trim.Marshal())}) {
			t.Fatalf("trim queue holds %q (%v), want one %s", bodies, err, trim)
		}
		if bodies, _ := srv.Peek(ctx, qs["settle"]); len(bodies) != 0 {
			t.Fatalf("settle jobs planned after settling everything: %q", bodies)
		}
		r := startRIE(t, "trim", env)
		deliverAll(t, srv, qs["trim"], 10, r.sqsHandler(t))
		for _, ep := range e.Epochs() {
			if ep.Rewritten != ep.Checkpoint || ep.Trimmed != 0 || len(e.Slots(ep.Epoch)) != before[ep.Epoch] {
				t.Fatalf("epoch %d within the grace: rewritten %d of %d, trimmed %d, slots %d of %d",
					ep.Epoch, ep.Rewritten, ep.Checkpoint, ep.Trimmed, len(e.Slots(ep.Epoch)), before[ep.Epoch])
			}
		}
		waitGraceOver(t, e)
		if resp := r.sqsEvent(t, qs["trim"], map[string]string{"trim-2": string(trim.Marshal())}); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("batch item failures %+v", resp.BatchItemFailures)
		}
		for _, ep := range e.Epochs() {
			if ep.Trimmed != ep.Checkpoint || ep.Checkpoint == 0 {
				t.Fatalf("epoch %d: trimmed %d of %d", ep.Epoch, ep.Trimmed, ep.Checkpoint)
			}
			for _, key := range e.Slots(ep.Epoch) {
				var z, star, class string
				var epoch, slot uint64
				if _, err := fmt.Sscanf(key, "%3s/chains/%5s/%7s/%d/%d", &z, &star, &class, &epoch, &slot); err != nil {
					t.Fatalf("slot key %s: %v", key, err)
				}
				if slot < ep.Trimmed {
					t.Fatalf("slot %s below the trimmed cursor %d survived", key, ep.Trimmed)
				}
			}
		}
		e.CheckReads()
	})

	t.Run("janitor", func(t *testing.T) {
		r := startRIE(t, "janitor", env)
		if body := r.invokeOK(t, scheduledEvent("Starlog-janitor")); string(body) != "null" {
			t.Fatalf("janitor returned %s", body)
		}
		r.stop()
		bodies, err := srv.Peek(ctx, qs["chain-settle"])
		if err != nil {
			t.Fatal(err)
		}
		if want := string(auditjob.ChainSettle(e.Chain, 1).Marshal()); !slices.Equal(bodies, []string{want}) {
			t.Fatalf("chain-settle queue holds %q, want %q", bodies, want)
		}
	})

	t.Run("chain-settle", func(t *testing.T) {
		r := startRIE(t, "chain-settle", env)
		deliverAll(t, srv, qs["chain-settle"], 1, r.sqsHandler(t))
		eps := e.Epochs()
		if !eps[0].Settled || eps[1].Settled {
			t.Fatalf("epoch 1 settled %v, head epoch 2 settled %v", eps[0].Settled, eps[1].Settled)
		}
		// The live head was not displaced: the star keeps appending.
		e.Write("a", 2, 2, 100)
		e.WaitAbsorbed()
		if eps := e.Epochs(); len(eps) != 2 {
			t.Fatalf("appending after chain-settle minted epoch %d", len(eps))
		}
		e.CheckReads()
	})

	t.Run("error payload", func(t *testing.T) {
		bad := append(slices.Clone(env), awsenv.EnvTable+"=no-such-table")
		r := startRIE(t, "plan", bad)
		body := r.invoke(t, scheduledEvent("Starlog-plan"))
		le, ok := hasError(body)
		if !ok {
			t.Fatalf("plan on a missing table returned %s, want an error payload", body)
		}
		t.Logf("error payload: %s (%s)", le.Message, le.Type)
	})
}

// sqsEvent invokes an SQS function with a hand-made event: one record per
// message id, with the attributes Lambda sets.
func (r *rie) sqsEvent(t *testing.T, q *localsqs.Queue, bodies map[string]string) events.SQSEventResponse {
	t.Helper()
	var ev events.SQSEvent
	ids := make([]string, 0, len(bodies))
	for id := range bodies {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	now := fmt.Sprint(time.Now().UnixMilli())
	for _, id := range ids {
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId: id, ReceiptHandle: "handle-" + id, Body: bodies[id],
			Attributes: map[string]string{"ApproximateReceiveCount": "1", "SentTimestamp": now,
				"SenderId": "AROAEXAMPLE:plan", "ApproximateFirstReceiveTimestamp": now},
			EventSource: "aws:sqs", EventSourceARN: q.ARN, AWSRegion: localsqs.Region,
		})
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(r.invokeOK(t, ev), &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// snapshot is the durable state a job acts on: every stream's rows, the
// live markers, the epoch records (without the trim-check's own times),
// and the settled objects.
func snapshot(t *testing.T, e *testenv.Env) string {
	t.Helper()
	type state struct {
		Rows    map[string][]meta.Ref
		Markers []meta.Marker
		Epochs  []meta.Epoch
		Objects []string
	}
	st := state{Rows: map[string][]meta.Ref{}, Markers: e.Markers()}
	for _, id := range e.IDs() {
		st.Rows[id] = e.Rows(id)
	}
	for _, ep := range e.Epochs() {
		ep.Rewrites = nil
		st.Epochs = append(st.Epochs, ep)
	}
	for info, err := range e.Objects.Bucket(testenv.SettledBucket).List(context.Background(), "streams/") {
		if err != nil {
			t.Fatal(err)
		}
		st.Objects = append(st.Objects, fmt.Sprintf("%s %d", info.Key, info.Size))
	}
	slices.Sort(st.Objects)
	b, _ := json.MarshalIndent(st, "", " ")
	return string(b)
}

// SQS delivers at least once: a job whose function did its work but
// whose reply was lost (a timeout, a crash after the commit) comes back
// after the visibility timeout and runs again. The second run changes
// nothing: same rows, markers, cursors and objects; and a job planned
// twice (two messages with the same body) is as harmless.
func TestSQSRedeliveryIsHarmless(t *testing.T) {
	if testing.Short() {
		t.Skip("starts versitygw, DynamoDB Local and local-aws-sqs")
	}
	ctx := context.Background()
	e := testenv.New(t, &dyn)
	srv := localsqs.Start(t)
	qs := makeQueues(t, srv, time.Second)
	writeState(t, e)
	sender := awsenv.NewQueues(srv.Client, qs.urls())
	rt := &handler.Runtime{Stores: e.Stores, Sender: sender, Logger: testenv.Log()}
	if err := handler.Plan(rt)(ctx, events.EventBridgeEvent{ID: "tick-1"}); err != nil {
		t.Fatal(err)
	}
	// The same plan again, as a second scheduled run would: every job is
	// now queued twice.
	if err := handler.Plan(rt)(ctx, events.EventBridgeEvent{ID: "tick-2"}); err != nil {
		t.Fatal(err)
	}

	settleH := handler.Queue(rt, settle.KindSettle)
	// The reply is lost: the work is done, the message stays.
	lost := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		resp, err := settleH(ctx, ev)
		if err != nil || len(resp.BatchItemFailures) > 0 {
			t.Errorf("first delivery failed: %+v %v", resp, err)
		}
		return resp, errors.New("reply lost")
	}
	msgs, _, err := srv.Deliver(ctx, qs["settle"], 10, lost)
	if err != nil || len(msgs) == 0 {
		t.Fatalf("first delivery: %d messages, %v", len(msgs), err)
	}
	first := snapshot(t, e)
	if n := e.CheckSettled(); n == 0 {
		t.Fatal("the first delivery settled nothing")
	}

	// Redelivered after the visibility timeout, with a receive count of 2
	// for the lost ones; every copy succeeds and is deleted.
	var counts []string
	if err := poll.Wait(20*time.Second, func() error {
		got, resp, err := srv.Deliver(ctx, qs["settle"], 10, settleH)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.BatchItemFailures) > 0 {
			t.Fatalf("redelivery failed: %+v", resp.BatchItemFailures)
		}
		for _, m := range got {
			counts = append(counts, m.Attributes["ApproximateReceiveCount"])
		}
		if !slices.Contains(counts, "2") || len(got) > 0 {
			return errors.New("redelivery not over")
		}
		return nil
	}); err != nil {
		t.Fatalf("no redelivery after 20 s (receive counts %v)", counts)
	}
	if second := snapshot(t, e); second != first {
		t.Fatalf("a redelivered settle job changed the state:\nafter the first run:\n%s\nafter the redelivery:\n%s", first, second)
	}
	e.CheckSettled()
	e.CheckReads()

	// Trim: plan finds the retirable slots; run the trim job twice within
	// the grace and twice past it: the same cursors and slots each time.
	if err := handler.Plan(rt)(ctx, events.EventBridgeEvent{ID: "tick-3"}); err != nil {
		t.Fatal(err)
	}
	trimH := handler.Queue(rt, settle.KindTrim)
	trimBody := string(auditjob.FromSettle(settle.Job{Kind: settle.KindTrim, Chain: e.Chain}).Marshal())
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "t1", Body: trimBody}, {MessageId: "t2", Body: trimBody}}}
	for round := range 2 {
		if round == 1 {
			waitGraceOver(t, e)
		}
		resp, err := trimH(ctx, ev)
		if err != nil || len(resp.BatchItemFailures) > 0 {
			t.Fatalf("trim round %d: %+v %v", round, resp, err)
		}
		once := snapshot(t, e)
		slots := len(e.Slots(1)) + len(e.Slots(2))
		if resp, err := trimH(ctx, ev); err != nil || len(resp.BatchItemFailures) > 0 {
			t.Fatalf("trim round %d again: %+v %v", round, resp, err)
		}
		if again := snapshot(t, e); again != once || len(e.Slots(1))+len(e.Slots(2)) != slots {
			t.Fatalf("trim round %d: a repeated trim job changed the state", round)
		}
	}
	for _, ep := range e.Epochs() {
		if ep.Trimmed != ep.Checkpoint {
			t.Fatalf("epoch %d trimmed %d of %d", ep.Epoch, ep.Trimmed, ep.Checkpoint)
		}
	}
	e.CheckReads()
}
