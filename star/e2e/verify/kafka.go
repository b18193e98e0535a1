package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/starlog/starlog/shared/api"
)

// Idempotent Kafka producers in the history (docs/kafka.md "Idempotent
// producers"): a Kafka client is a franz-go (kgo) producer, idempotent as
// kgo is by default, producing 1–3 records at a time to one partition of
// the round's topic, whose partition p is the round's stream p
// (TopicStream), so its records land among the S2 clients' appends. kgo
// retries a batch itself, with its producer id, epoch and sequence, until
// its delivery timeout: each record is one operation of the history,
// definite at the offset its ack names, indefinite when kgo gave up or
// the run ended first (the star may have applied it, once).
//
// A record's value is unique and its key and headers are the S2 record's
// first headers (docs/kafka.md "Topics are streams"), so its hash is
// known before the call (kafkaRecord). The face adds an idempotent
// producer's mark to the first record of each batch it appends (which
// record that is, kgo's batching decides): RecordHash leaves those
// headers out.

// TopicStream is the stream of a topic's partition p (the Kafka face's
// mapping): the round's streams are named so when Kafka clients run.
func TopicStream(topic string, p int) string { return fmt.Sprintf("%s/%d", topic, p) }

// topicOf splits a stream named by TopicStream.
func topicOf(stream string) (topic string, p int32, ok bool) {
	i := strings.LastIndexByte(stream, '/')
	if i <= 0 {
		return "", 0, false
	}
	var n int32
	if _, err := fmt.Sscanf(stream[i+1:], "%d", &n); err != nil || n < 0 {
		return "", 0, false
	}
	return stream[:i], n, true
}

// kafkaHeaderKey is the Kafka face's header holding a record's key
// (star/kafka.HeaderKey; e2e does not import the face's package).
const kafkaHeaderKey = "kafka.key"

// kafkaRecord is the S2 record the face stores for a Kafka record (its
// producer mark aside): the key, if any, as the first header, then the
// record's headers, the value as the body.
func kafkaRecord(r *kgo.Record) api.Record {
	var out api.Record
	if r.Key != nil {
		out.Headers = append(out.Headers, api.Header{Name: []byte(kafkaHeaderKey), Value: r.Key})
	}
	for _, h := range r.Headers {
		out.Headers = append(out.Headers, api.Header{Name: []byte(h.Key), Value: h.Value})
	}
	out.Body = r.Value
	if out.Body == nil {
		out.Body = []byte{}
	}
	return out
}

// kafkaOpts are a Kafka client's connection: every star's Kafka
// address (each star answers as the one broker), SASL/PLAIN with the
// admin token.
func kafkaOpts(brokers []string, extra ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.SASL(plain.Auth{User: "verify", Pass: AdminToken}.AsMechanism()),
		kgo.DialTimeout(2 * time.Second),
		kgo.RequestTimeoutOverhead(2 * time.Second),
		kgo.RetryTimeout(opTimeout),
		kgo.MetadataMinAge(250 * time.Millisecond),
	}, extra...)
}

// CreateTopic makes topic of n partitions through the Kafka face of the
// stars at brokers; the partitions' streams (TopicStream) exist already
// and are adopted, their class kept.
func CreateTopic(ctx context.Context, brokers []string, topic string, n int) error {
	cl, err := kgo.NewClient(kafkaOpts(brokers)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, int32(n), -1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		// An earlier attempt may have made it.
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	return nil
}

type kafkaClient struct {
	id     int
	stream string
	topic  string
	part   int32
	cl     *kgo.Client
	h      *History
	rng    *rand.Rand
	ops    int
}

func newKafkaClient(id int, brokers []string, stream string, h *History, rng *rand.Rand) (*kafkaClient, error) {
	topic, p, ok := topicOf(stream)
	if !ok {
		return nil, fmt.Errorf("stream %q is no topic's partition (TopicStream)", stream)
	}
	cl, err := kgo.NewClient(kafkaOpts(brokers,
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		// A record kgo has not had acknowledged by then fails: an
		// indefinite operation, and the client goes on.
		kgo.RecordDeliveryTimeout(opTimeout),
		kgo.ProduceRequestTimeout(opTimeout),
	)...)
	if err != nil {
		return nil, err
	}
	return &kafkaClient{id: id, stream: stream, topic: topic, part: p, cl: cl, h: h, rng: rng}, nil
}

func (c *kafkaClient) run(ctx context.Context) {
	defer c.cl.Close()
	for ctx.Err() == nil {
		if c.produce(ctx) {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(20+c.rng.IntN(40)) * time.Millisecond):
			}
		}
	}
}

// errKafkaIndefinite is a produce kgo did not see acknowledged: applied
// once or not at all (Classify: indefinite, whatever kgo's error wraps).
type errKafkaIndefinite struct{ msg string }

func (e *errKafkaIndefinite) Error() string { return "kafka produce: " + e.msg }

// produce produces 1–3 records at once (kgo may batch them together);
// it reports whether one failed.
func (c *kafkaClient) produce(ctx context.Context) (failed bool) {
	c.ops++
	n := 1 + c.rng.IntN(3)
	recs := make([]*kgo.Record, n)
	ins := make([]*Input, n)
	for i := range recs {
		r := &kgo.Record{Partition: c.part, Value: fmt.Appendf(nil, "%s/k%d/o%d/r%d", c.stream, c.id, c.ops, i)}
		if i%2 == 0 {
			r.Key = fmt.Appendf(nil, "k%d", c.id)
		}
		if c.rng.IntN(3) == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "v%d", i)}}
		}
		recs[i] = r
		s := kafkaRecord(r)
		ins[i] = &Input{Stream: c.stream, Kind: KindAppend, Records: []uint64{RecordHash(&s)},
			Label: fmt.Sprintf("k%d/o%d/r%d", c.id, c.ops, i)}
	}
	call := c.h.Now()
	res := c.cl.ProduceSync(ctx, recs...)
	for i, r := range res {
		var err error
		if r.Err != nil {
			err = &errKafkaIndefinite{msg: r.Err.Error()}
			failed = true
		}
		c.h.RecordKafkaProduce(c.id, ins[i], call, r.Record.Offset, err)
	}
	return failed
}
