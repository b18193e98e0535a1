package awsenv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/starlog/starlog/shared/auditjob"
)

// sqsBatchMax is SendMessageBatch's entry limit.
const sqsBatchMax = 10

// sendAttempts bounds the re-sends of entries a batch reports failed
// (throttling, internal errors); the SDK already retries whole requests.
const sendAttempts = 3

// Queues sends jobs to SQS, each to its kind's queue, one message per job
// whose body is the job's deterministic encoding.
type Queues struct {
	client *sqs.Client
	urls   map[string]string
}

// NewQueues sends through client to the queue URLs by job kind.
func NewQueues(client *sqs.Client, urls map[string]string) *Queues {
	return &Queues{client: client, urls: urls}
}

// Send implements auditjob.Sender. A job listed twice is sent once. Every
// job is sent or the error names what was not.
func (q *Queues) Send(ctx context.Context, jobs []auditjob.Job) error {
	byQueue := map[string][]auditjob.Job{}
	seen := map[string]bool{}
	var order []string
	for _, j := range jobs {
		if seen[j.Key()] {
			continue
		}
		seen[j.Key()] = true
		if _, ok := byQueue[j.Queue()]; !ok {
			order = append(order, j.Queue())
		}
		byQueue[j.Queue()] = append(byQueue[j.Queue()], j)
	}
	var errs []error
	for _, name := range order {
		url, ok := q.urls[name]
		if !ok {
			errs = append(errs, fmt.Errorf("awsenv: no queue URL for %s jobs (%s)", name, QueueURLEnv(name)))
			continue
		}
		js := byQueue[name]
		for i := 0; i < len(js); i += sqsBatchMax {
			if err := q.sendBatch(ctx, url, js[i:min(i+sqsBatchMax, len(js))]); err != nil {
				errs = append(errs, fmt.Errorf("awsenv: send to %s queue: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// sendBatch sends up to ten jobs, re-sending the entries SQS reports
// failed unless the fault is the sender's.
func (q *Queues) sendBatch(ctx context.Context, url string, jobs []auditjob.Job) error {
	pending := map[string]auditjob.Job{}
	for i, j := range jobs {
		pending[strconv.Itoa(i)] = j
	}
	var last error
	for attempt := 0; attempt < sendAttempts && len(pending) > 0; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		entries := make([]types.SendMessageBatchRequestEntry, 0, len(pending))
		for id, j := range pending {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(string(j.Marshal()))})
		}
		out, err := q.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			return err
		}
		for _, s := range out.Successful {
			delete(pending, aws.ToString(s.Id))
		}
		var errs []error
		for _, f := range out.Failed {
			id := aws.ToString(f.Id)
			err := fmt.Errorf("%s: %s %s", pending[id], aws.ToString(f.Code), aws.ToString(f.Message))
			if f.SenderFault {
				delete(pending, id)
				return err // the same body fails again
			}
			errs = append(errs, err)
		}
		last = errors.Join(errs...)
	}
	if len(pending) > 0 {
		return fmt.Errorf("%d jobs not sent: %w", len(pending), last)
	}
	return nil
}
