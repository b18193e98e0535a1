// Package localsqs runs local-aws-sqs (the npm package pinned in
// .ci/tools, installed by `make tools`) on 127.0.0.1 for tests, and plays
// Lambda's SQS event source mapping against it: receive a batch, hand it to
// a handler as the SQS event Lambda would send, delete what the handler
// did not report failed. Redrive to a dead-letter queue is the server's
// own (RedrivePolicy with maxReceiveCount), as on SQS.
package localsqs

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/starlog/starlog/shared/testsvc"
)

//go:embed testdata/sqs-server.cjs
var launcher []byte

// Region and the static credentials the server is spoken to with.
const (
	Region    = "us-east-1"
	AccessKey = "starlogtest"
	SecretKey = "starlogtest"
)

// Server is a running local-aws-sqs.
type Server struct {
	Endpoint string
	Client   *sqs.Client
}

// Start runs the server until the test ends. A missing package or node
// fails the test with an install hint.
func Start(tb testing.TB) *Server {
	tb.Helper()
	mod := filepath.Join(testsvc.NodeToolsDir(tb), "local-aws-sqs")
	testsvc.RequireFile(tb, filepath.Join(mod, "package.json"), "local-aws-sqs")
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Fatalf("localsqs: node not found on PATH: %v", err)
	}
	script := filepath.Join(tb.TempDir(), "sqs-server.cjs")
	if err := os.WriteFile(script, launcher, 0o644); err != nil {
		tb.Fatal(err)
	}
	port := testsvc.FreePort(tb)
	p := testsvc.Start(tb, "local-aws-sqs", exec.Command(node, script, mod, strconv.Itoa(port)))
	p.WaitTCP(tb, testsvc.Addr(port), 30*time.Second)
	s := &Server{Endpoint: "http://" + testsvc.Addr(port)}
	s.Client = sqs.New(sqs.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
	})
	return s
}

// Queue is a queue and, if it has one, its dead-letter queue.
type Queue struct {
	URL, ARN string
	DLQ      *Queue
}

// CreateQueue creates a queue whose messages stay invisible for visibility
// after a receive.
func (s *Server) CreateQueue(tb testing.TB, name string, visibility time.Duration, attrs map[string]string) *Queue {
	tb.Helper()
	ctx := context.Background()
	a := map[string]string{"VisibilityTimeout": strconv.Itoa(int(visibility / time.Second))}
	for k, v := range attrs {
		a[k] = v
	}
	out, err := s.Client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: a})
	if err != nil {
		tb.Fatalf("localsqs: create queue %s: %v", name, err)
	}
	q := &Queue{URL: aws.ToString(out.QueueUrl)}
	ga, err := s.Client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		tb.Fatalf("localsqs: queue arn of %s: %v", name, err)
	}
	q.ARN = ga.Attributes[string(types.QueueAttributeNameQueueArn)]
	return q
}

// CreateWithDLQ creates name and name-dlq, with the redrive policy the
// CDK stack sets: after maxReceive receives a message moves to the DLQ.
func (s *Server) CreateWithDLQ(tb testing.TB, name string, visibility time.Duration, maxReceive int) *Queue {
	tb.Helper()
	dlq := s.CreateQueue(tb, name+"-dlq", visibility, nil)
	policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": dlq.ARN, "maxReceiveCount": maxReceive})
	q := s.CreateQueue(tb, name, visibility, map[string]string{"RedrivePolicy": string(policy)})
	q.DLQ = dlq
	return q
}

// Receive takes up to max visible messages, with every system attribute
// (ApproximateReceiveCount, SentTimestamp, …) as the event source mapping
// gets them. It never long-polls: local-aws-sqs 2.0.2 returns a message
// twice (and counts two receives) when a long poll is woken by it.
func (s *Server) Receive(ctx context.Context, q *Queue, max int) ([]types.Message, error) {
	out, err := s.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(q.URL),
		MaxNumberOfMessages:         int32(max),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		// local-aws-sqs reads only the older parameter.
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return nil, fmt.Errorf("localsqs: receive from %s: %w", q.URL, err)
	}
	return out.Messages, nil
}

// Event is the SQS event Lambda sends for msgs received from q.
func Event(q *Queue, msgs []types.Message) events.SQSEvent {
	var ev events.SQSEvent
	for _, m := range msgs {
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId:      aws.ToString(m.MessageId),
			ReceiptHandle:  aws.ToString(m.ReceiptHandle),
			Body:           aws.ToString(m.Body),
			Md5OfBody:      aws.ToString(m.MD5OfBody),
			Attributes:     m.Attributes,
			EventSource:    "aws:sqs",
			EventSourceARN: q.ARN,
			AWSRegion:      Region,
		})
	}
	return ev
}

// Handler is an SQS-fed function: in process, or a call through the RIE.
type Handler func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// Deliver plays one poll of the event source mapping: receive up to
// batch messages, invoke h with them, delete those it did not report
// failed (all of them stay when it returns an error, as on Lambda). It
// returns the messages received and the response.
func (s *Server) Deliver(ctx context.Context, q *Queue, batch int, h Handler) ([]types.Message, events.SQSEventResponse, error) {
	msgs, err := s.Receive(ctx, q, batch)
	if err != nil || len(msgs) == 0 {
		return msgs, events.SQSEventResponse{}, err
	}
	resp, err := h(ctx, Event(q, msgs))
	if err != nil {
		return msgs, resp, nil
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	for _, m := range msgs {
		if failed[aws.ToString(m.MessageId)] {
			continue
		}
		if _, err := s.Client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle}); err != nil {
			return msgs, resp, fmt.Errorf("localsqs: delete %s: %w", aws.ToString(m.MessageId), err)
		}
	}
	return msgs, resp, nil
}

// Release makes received messages visible again at once (a consumer
// that looked and put them back).
func (s *Server) Release(ctx context.Context, q *Queue, msgs []types.Message) error {
	for _, m := range msgs {
		if _, err := s.Client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.URL),
			ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			return fmt.Errorf("localsqs: release %s: %w", aws.ToString(m.MessageId), err)
		}
	}
	return nil
}

// Peek receives every visible message of q and makes them visible again.
func (s *Server) Peek(ctx context.Context, q *Queue) ([]string, error) {
	var all []types.Message
	for {
		msgs, err := s.Receive(ctx, q, 10)
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			break
		}
		all = append(all, msgs...)
	}
	bodies := make([]string, len(all))
	for i, m := range all {
		bodies[i] = aws.ToString(m.Body)
	}
	return bodies, s.Release(ctx, q, all)
}

// Drain receives every visible message of q (deleting them) and returns
// their bodies.
func (s *Server) Drain(ctx context.Context, q *Queue) ([]string, error) {
	var bodies []string
	for {
		msgs, err := s.Receive(ctx, q, 10)
		if err != nil {
			return bodies, err
		}
		if len(msgs) == 0 {
			return bodies, nil
		}
		for _, m := range msgs {
			bodies = append(bodies, aws.ToString(m.Body))
			if _, err := s.Client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return bodies, err
			}
		}
	}
}
