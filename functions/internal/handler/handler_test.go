package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/functions/internal/handler"
	"github.com/starlog/starlog/functions/internal/localsqs"
	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/auditjob/awsenv"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
)

// memStores are auditor stores over an embedded metastore and in-memory
// buckets, holding one express chain (star1) with a halted epoch 1 below
// its head epoch 2, absorbed to its cut.
func memStores(t *testing.T) *settle.Stores {
	t.Helper()
	ctx := context.Background()
	zones := []string{"az1", "az2", "az3"}
	objs, err := mem.New(append(slices.Clone(zones), "std")...)
	if err != nil {
		t.Fatal(err)
	}
	ms := testsvc.SQLite(t)
	c := chain.New("star1", meta.Express, "star1:1", ms, objs)
	p := meta.EpochParams{Buckets: zones, W: 2, Window: 2}
	ep, err := c.Mint(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fence(ctx, ep.Epoch, true); err != nil { // cut 0: nothing to absorb
		t.Fatal(err)
	}
	if _, err := c.Mint(ctx, p); err != nil {
		t.Fatal(err)
	}
	return &settle.Stores{Meta: ms, Objects: objs, SettledBucket: "std", Streams: settle.MetaStreams{Meta: ms},
		Config: settle.Config{ScratchDir: t.TempDir()}}
}

func quiet() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

type captured struct {
	mu   sync.Mutex
	jobs []auditjob.Job
	err  error
}

func (c *captured) Send(_ context.Context, jobs []auditjob.Job) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jobs = append(c.jobs, jobs...)
	return c.err
}

func record(id, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: id, Body: body, EventSource: "aws:sqs", Attributes: map[string]string{"ApproximateReceiveCount": "1"}}
}

func failures(r events.SQSEventResponse) []string {
	var ids []string
	for _, f := range r.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

func TestQueueReportsEachFailedRecord(t *testing.T) {
	st := memStores(t)
	rt := &handler.Runtime{Stores: st, Logger: quiet()}
	ch := settle.ChainRef{Star: "star1", Class: meta.Express}
	ev := events.SQSEvent{Records: []events.SQSMessage{
		record("ok-settle-epoch-1", string(auditjob.ChainSettle(ch, 1).Marshal())),
		record("malformed", `{"kind":"chain-settle","chain":`),
		record("unknown-field", `{"kind":"chain-settle","chain":{"star":"star1","class":"express"},"epoch":1,"x":1}`),
		record("wrong-queue", string(auditjob.FromSettle(settle.Job{Kind: settle.KindTrim, Chain: ch}).Marshal())),
		record("head-epoch", string(auditjob.ChainSettle(ch, 2).Marshal())),
		record("ok-again", string(auditjob.ChainSettle(ch, 1).Marshal())),
	}}
	resp, err := handler.Queue(rt, auditjob.KindChainSettle)(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failures(resp), []string{"malformed", "unknown-field", "wrong-queue", "head-epoch"}; !slices.Equal(got, want) {
		t.Fatalf("batch item failures %v, want %v", got, want)
	}
	rec, _, err := chain.New("star1", meta.Express, "t", st.Meta, st.Objects).Epoch(context.Background(), 1)
	if err != nil || !rec.Settled {
		t.Fatalf("epoch 1 not settled by the good records: %+v %v", rec, err)
	}
	// Lambda's JSON for the response: every failure by messageId, and an
	// empty list (not null) when nothing failed.
	b, _ := json.Marshal(resp)
	if !strings.Contains(string(b), `"itemIdentifier":"malformed"`) {
		t.Fatalf("response JSON %s", b)
	}
	resp, _ = handler.Queue(rt, auditjob.KindChainSettle)(context.Background(), events.SQSEvent{Records: ev.Records[:1]})
	if b, _ := json.Marshal(resp); string(b) != `{"batchItemFailures":[]}` {
		t.Fatalf("all-good response JSON %s", b)
	}
}

// Records left when the invocation's time runs out are reported failed
// (so redelivered), not run half-way.
func TestQueueOutOfTime(t *testing.T) {
	rt := &handler.Runtime{Stores: memStores(t), Reserve: time.Hour, Logger: quiet()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ch := settle.ChainRef{Star: "star1", Class: meta.Express}
	ev := events.SQSEvent{Records: []events.SQSMessage{record("a", string(auditjob.ChainSettle(ch, 1).Marshal())), record("b", "{}")}}
	resp, err := handler.Queue(rt, auditjob.KindChainSettle)(ctx, ev)
	if err != nil || !slices.Equal(failures(resp), []string{"a", "b"}) {
		t.Fatalf("out of time: %v %v", failures(resp), err)
	}
}

func TestScheduledHandlers(t *testing.T) {
	st := memStores(t)
	var sent captured
	rt := &handler.Runtime{Stores: st, Sender: &sent, Logger: quiet()}
	ev := events.EventBridgeEvent{ID: "e1", DetailType: "Scheduled Event", Source: "aws.events"}
	if err := handler.Janitor(rt)(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	want := auditjob.ChainSettle(settle.ChainRef{Star: "star1", Class: meta.Express}, 1)
	if len(sent.jobs) != 1 || sent.jobs[0] != want {
		t.Fatalf("janitor sent %v, want %s", sent.jobs, want)
	}
	sent.jobs = nil
	if err := handler.Plan(rt)(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	for _, j := range sent.jobs {
		if j.Kind != settle.KindTrim && j.Kind != settle.KindSettle {
			t.Fatalf("plan sent %s", j)
		}
	}
	// A send that fails fails the invocation (the errors alarm sees it).
	sent.err = errors.New("queue down")
	if err := handler.Janitor(rt)(context.Background(), ev); err == nil {
		t.Fatal("janitor hid a failed send")
	}
	if err := handler.Plan(&handler.Runtime{Stores: st, Logger: quiet()})(context.Background(), ev); err == nil {
		t.Fatal("plan without queues succeeded")
	}
}

func TestEMF(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: handler.SettleLagMetric}, []string{"class"})
	reg.MustRegister(g)
	g.WithLabelValues("standard").Set(3)
	g.WithLabelValues("express").Set(42.5)
	q := prometheus.NewGauge(prometheus.GaugeOpts{Name: handler.QuarantinedMetric})
	reg.MustRegister(q)
	q.Set(2)
	var out bytes.Buffer
	e := handler.EMF{Namespace: "Starlog", Cluster: "Prod", Out: &out, Gatherer: reg}
	if err := e.Publish(time.UnixMilli(1700000000000)); err != nil {
		t.Fatal(err)
	}
	var line struct {
		AWS struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
		Cluster     string  `json:"cluster"`
		Lag         float64 `json:"starlog_settle_lag_seconds"`
		Quarantined float64 `json:"starlog_settle_quarantined_streams"`
	}
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("%s: %v", out.String(), err)
	}
	d := line.AWS.CloudWatchMetrics
	if line.AWS.Timestamp != 1700000000000 || len(d) != 1 || d[0].Namespace != "Starlog" || len(d[0].Dimensions) != 1 ||
		d[0].Dimensions[0][0] != "cluster" || len(d[0].Metrics) != 2 || d[0].Metrics[0].Name != handler.SettleLagMetric ||
		d[0].Metrics[1].Name != handler.QuarantinedMetric || line.Cluster != "Prod" || line.Lag != 42.5 || line.Quarantined != 2 {
		t.Fatalf("EMF line %s", out.String())
	}
	if !strings.HasSuffix(out.String(), "}\n") || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("want one line: %q", out.String())
	}
}

// A poison message — malformed, or a job that fails every time — is
// reported in BatchItemFailures on every delivery and, after the queue's
// maxReceiveCount, is moved to the dead-letter queue by SQS's redrive
// policy (local-aws-sqs implements it); a good record of the same batches
// is deleted once.
func TestPoisonMessageDeadLetters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts local-aws-sqs")
	}
	ctx := context.Background()
	srv := localsqs.Start(t)
	const maxReceive = 3
	q := srv.CreateWithDLQ(t, "settle", time.Second, maxReceive)
	ghost := settle.Job{Kind: settle.KindSettle, Chain: settle.ChainRef{Star: "ghost", Class: meta.Express}, Epoch: 1, From: 0, End: 1}
	// An era with no marker left: settles nothing, succeeds.
	good := settle.Job{Kind: settle.KindSettle, Chain: settle.ChainRef{Star: "star1", Class: meta.Express}, Epoch: 1, From: 0, End: 1}
	rt := &handler.Runtime{Stores: memStores(t), Logger: quiet()}
	sender := awsenv.NewQueues(srv.Client, map[string]string{"settle": q.URL})
	if err := sender.Send(ctx, []auditjob.Job{auditjob.FromSettle(ghost), auditjob.FromSettle(good)}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{"kind":"settle"`, `not json`} {
		if _, err := srv.Client.SendMessage(ctx, sqsSend(q.URL, body)); err != nil {
			t.Fatal(err)
		}
	}
	h := handler.Queue(rt, settle.KindSettle)
	receives := map[string][]int{}
	// Poll as the event source mapping does until every failed message
	// has come back maxReceive times and then left for the DLQ (SQS moves
	// it there on the receive after its last).
	if err := poll.Wait(45*time.Second, func() error {
		msgs, resp, err := srv.Deliver(ctx, q, 10, h)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			if dead, err := srv.Peek(ctx, q.DLQ); err != nil || len(dead) < 3 {
				return fmt.Errorf("dead-letter queue holds %d of 3 (%v)", len(dead), err)
			}
			return nil
		}
		failed := failures(resp)
		for _, m := range msgs {
			id := aws.ToString(m.MessageId)
			if isGood := aws.ToString(m.Body) == string(good.Marshal()); isGood == slices.Contains(failed, id) {
				t.Fatalf("message %s (%s): reported failed %v", id, aws.ToString(m.Body), !isGood)
			}
			c, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
			receives[aws.ToString(m.Body)] = append(receives[aws.ToString(m.Body)], c)
		}
		return errors.New("messages still arriving")
	}); err != nil {
		t.Fatalf("after 45 s: %v; received %v", err, receives)
	}
	if len(receives) != 4 {
		t.Fatalf("received %d distinct messages, want 4: %v", len(receives), receives)
	}
	if c := receives[string(good.Marshal())]; !slices.Equal(c, []int{1}) {
		t.Fatalf("the good message was received %v times", c)
	}
	delete(receives, string(good.Marshal()))
	for body, counts := range receives {
		if !slices.Equal(counts, []int{1, 2, 3}) {
			t.Fatalf("message %s received with counts %v, want 1, 2, 3", body, counts)
		}
	}
	dead, err := srv.Drain(ctx, q.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dead)
	want := []string{string(auditjob.FromSettle(ghost).Marshal()), `not json`, `{"kind":"settle"`}
	slices.Sort(want)
	if !slices.Equal(dead, want) {
		t.Fatalf("dead-letter queue holds %q, want %q", dead, want)
	}
}

func sqsSend(url, body string) *sqs.SendMessageInput {
	return &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}
}
