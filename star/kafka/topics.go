package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/auth"
)

// Topic limits.
const (
	// MaxTopicNameLen is Kafka's own bound on a topic name.
	MaxTopicNameLen = 249
	// MaxPartitions bounds a topic's partition count: each is a stream,
	// and Metadata answers every one.
	MaxPartitions = 1024
	// DefaultPartitions is the count of a CreateTopics that asks for the
	// broker's default (-1), as Kafka's num.partitions default.
	DefaultPartitions = 1
)

// topicKey is a topic's row: in a partition of its own per basin, beside
// starlog's rows (shared/meta/rows.go) and the Durable Streams face's.
func topicKey(basin, topic string) meta.Key { return meta.Key{PK: "kafka#" + basin, SK: "t#" + topic} }

// topicRow is what makes the streams T/0 … T/N-1 a topic: the partition
// count (a stream named T/7 that exists without the row saying 8 is not
// partition 7) and the topic id Kafka clients key topics by.
type topicRow struct {
	ID         string    `json:"id"` // 32 hex digits: the topic's UUID
	Partitions int32     `json:"partitions"`
	Created    time.Time `json:"created"`
	// MaxMessageBytes is the topic's max.message.bytes: the largest
	// record batch, as sent, a produce may carry (0: not set).
	MaxMessageBytes int32 `json:"max_message_bytes,omitempty"`
}

func (t topicRow) uuid() (id [16]byte) {
	_, _ = hex.Decode(id[:], []byte(t.ID))
	return id
}

var errNoTopic = errors.New("kafka: no such topic")

// metaError is a metastore failure reading topic rows: retryable.
type metaError struct{ err error }

func (e *metaError) Error() string { return e.err.Error() }
func (e *metaError) Unwrap() error { return e.err }

// partitionStream is the stream of partition p of topic.
func partitionStream(topic string, p int32) string { return topic + "/" + strconv.Itoa(int(p)) }

// validTopicName applies Kafka's rules: 1 to 249 of [a-zA-Z0-9._-], not
// "." or "..". They leave no "/" in a name, so T/p names one partition.
func validTopicName(t string) error {
	if len(t) == 0 || len(t) > MaxTopicNameLen {
		return fmt.Errorf("topic name must be 1 to %d characters", MaxTopicNameLen)
	}
	if t == "." || t == ".." {
		return fmt.Errorf("topic name must not be %q", t)
	}
	for _, c := range []byte(t) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q has %q: only ASCII letters, digits, '.', '_' and '-' are allowed", t, c)
		}
	}
	return nil
}

func (s *Server) getTopic(ctx context.Context, topic string) (topicRow, int64, error) {
	k := topicKey(s.basin, topic)
	it, err := s.star.Meta().Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return topicRow{}, 0, errNoTopic
	}
	if err != nil {
		return topicRow{}, 0, &metaError{fmt.Errorf("kafka: read topic %s: %w", topic, err)}
	}
	var row topicRow
	if err := json.Unmarshal(it.Val, &row); err != nil {
		return topicRow{}, 0, fmt.Errorf("kafka: decode topic %s: %w", topic, err)
	}
	return row, it.Ver, nil
}

type namedTopic struct {
	name string
	row  topicRow
}

// maxListPages bounds a topic listing (256 rows a page).
const maxListPages = 1024

// listTopics reads every topic row of the basin, in name order.
func (s *Server) listTopics(ctx context.Context) ([]namedTopic, error) {
	pk := "kafka#" + s.basin
	q := meta.Query{PK: pk, From: "t#", To: "t$", Limit: 256}
	var out []namedTopic
	for range maxListPages {
		pg, err := s.star.Meta().Query(ctx, q)
		if err != nil {
			return nil, &metaError{fmt.Errorf("kafka: list topics: %w", err)}
		}
		for _, it := range pg.Items {
			var row topicRow
			if err := json.Unmarshal(it.Val, &row); err != nil {
				return nil, fmt.Errorf("kafka: decode topic %s: %w", it.SK, err)
			}
			out = append(out, namedTopic{name: it.SK[len("t#"):], row: row})
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
	return out, errors.New("kafka: list topics: too many pages")
}

// ensureBasin creates the face's basin on first use (no streams created
// on append or read: a partition is created with its topic).
func (s *Server) ensureBasin(ctx context.Context) error {
	s.basinMu.Lock()
	defer s.basinMu.Unlock()
	if s.basinOK {
		return nil
	}
	class := s.cfg.StorageClass
	_, err := s.star.CreateBasin(ctx, api.CreateBasinRequest{Basin: s.basin, Config: &api.BasinConfig{
		DefaultStreamConfig: &api.StreamConfig{StorageClass: &class},
	}}, "")
	var ae *api.Error
	if err != nil && !(errors.As(err, &ae) && ae.Status == 409) {
		return fmt.Errorf("kafka: create basin %s: %w", s.basin, err)
	}
	s.basinOK = true
	return nil
}

// authorize reports whether the connection may do op on stream (or on
// the basin when stream is "").
func (cs *conn) authorize(op auth.Op, stream string) *api.Error {
	return cs.principal.Authorize(auth.Request{Op: op, Basin: cs.s.basin, Stream: stream})
}

// authorizeTopic checks op on every partition of a topic of n
// partitions from partition `from`: all must pass before any has effect.
func (cs *conn) authorizeTopic(op auth.Op, topic string, from, n int32) *api.Error {
	if err := cs.authorize(op, partitionStream(topic, from)); err != nil {
		return err
	}
	for p := from + 1; p < n; p++ {
		if err := cs.authorize(op, partitionStream(topic, p)); err != nil {
			return err
		}
	}
	return nil
}

// createPartitionStreams creates the streams of partitions [from, to);
// one that exists already is kept (a retry after a partial create, or a
// stream an S2 client made, which the topic then adopts).
func (s *Server) createPartitionStreams(ctx context.Context, topic string, from, to int32, cfg *api.StreamConfig) error {
	if err := s.ensureBasin(ctx); err != nil {
		return err
	}
	for p := from; p < to; p++ {
		_, err := s.star.CreateStream(ctx, s.basin, api.CreateStreamRequest{Stream: partitionStream(topic, p), Config: cfg}, "")
		var ae *api.Error
		if err != nil && !(errors.As(err, &ae) && ae.Code == api.CodeResourceAlreadyExists) {
			return fmt.Errorf("kafka: create partition %d of %s: %w", p, topic, err)
		}
	}
	return nil
}

// newTopicID draws a topic's UUID.
func newTopicID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
