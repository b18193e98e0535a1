package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/auth"
)

// Topic configs this face understands (docs/kafka.md).
const (
	configRetentionMs   = "retention.ms"
	configCleanupPolicy = "cleanup.policy"
	configMaxMessage    = "max.message.bytes"
)

// maxMessageBytesOf is a CreateTopics config list's max.message.bytes:
// the largest record batch, as sent, a produce may carry to the topic
// (0 when not given: no bound but the request's own).
func maxMessageBytesOf(cfgs []kmsg.CreateTopicsRequestTopicConfig) (int32, error) {
	var n int32
	for _, c := range cfgs {
		if c.Name != configMaxMessage || c.Value == nil {
			continue
		}
		v, err := strconv.ParseInt(*c.Value, 10, 32)
		if err != nil || v <= 0 {
			return 0, fmt.Errorf("%s must be a positive number of bytes, got %q", configMaxMessage, *c.Value)
		}
		n = int32(v)
	}
	return n, nil
}

// streamConfigOf turns a CreateTopics config list into the partitions'
// stream config: retention.ms is the streams' retention (whole seconds,
// rounded up; -1 is infinite), cleanup.policy may only be delete (no
// compaction); max.message.bytes is the topic row's (maxMessageBytesOf).
// Any other name is INVALID_CONFIG.
func streamConfigOf(cfgs []kmsg.CreateTopicsRequestTopicConfig) (*api.StreamConfig, error) {
	var sc api.StreamConfig
	for _, c := range cfgs {
		if c.Value == nil {
			continue // the default
		}
		switch c.Name {
		case configRetentionMs:
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			switch {
			case err != nil || ms < -1 || ms == 0:
				return nil, fmt.Errorf("%s must be -1 (infinite) or a positive number of milliseconds, got %q", configRetentionMs, *c.Value)
			case ms == -1:
				sc.RetentionPolicy = &api.RetentionPolicy{Infinite: true}
			default:
				sc.RetentionPolicy = &api.RetentionPolicy{AgeSecs: uint64((ms + 999) / 1000)}
			}
		case configCleanupPolicy:
			if *c.Value != "delete" {
				return nil, fmt.Errorf("%s %q: only delete is served (no compaction)", configCleanupPolicy, *c.Value)
			}
		case configMaxMessage:
		default:
			return nil, fmt.Errorf("config %q is not served (only %s, %s and %s)", c.Name, configRetentionMs, configCleanupPolicy, configMaxMessage)
		}
	}
	if sc.RetentionPolicy == nil {
		return nil, nil
	}
	return &sc, nil
}

// retentionMs is retention.ms of a partition's effective config.
func retentionMs(rp api.RetentionPolicy) string {
	if rp.Infinite {
		return "-1"
	}
	return strconv.FormatUint(rp.AgeSecs*1000, 10)
}

func (cs *conn) createTopics(ctx context.Context, r *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		fail := func(code int16, format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			rt.ErrorCode, rt.ErrorMessage = code, &msg
		}
		n := t.NumPartitions
		if n == -1 {
			n = DefaultPartitions
		}
		sc, cerr := streamConfigOf(t.Configs)
		maxMsg, merr := maxMessageBytesOf(t.Configs)
		cerr = cmp.Or(cerr, merr)
		switch {
		case validTopicName(t.Topic) != nil:
			fail(kerr.InvalidTopicException.Code, "%v", validTopicName(t.Topic))
		case n <= 0 || n > MaxPartitions:
			fail(kerr.InvalidPartitions.Code, "partitions must be 1 to %d (or -1 for %d), got %d", MaxPartitions, DefaultPartitions, t.NumPartitions)
		case t.ReplicationFactor == 0 || t.ReplicationFactor < -1:
			fail(kerr.InvalidReplicationFactor.Code, "replication factor must be -1 or positive (records are kept at W of K buckets whatever it says)")
		case len(t.ReplicaAssignment) > 0:
			fail(kerr.InvalidReplicaAssignment.Code, "replica assignments are not served: partitions are streams, not replicas on brokers")
		case cerr != nil:
			fail(kerr.InvalidConfig.Code, "%v", cerr)
		}
		if rt.ErrorCode == 0 {
			if aerr := cs.authorizeTopic(auth.CreateStream, t.Topic, 0, n); aerr != nil {
				fail(kerr.TopicAuthorizationFailed.Code, "%s", aerr.Message)
			}
		}
		if rt.ErrorCode == 0 && !r.ValidateOnly {
			row, err := cs.s.createTopic(ctx, t.Topic, topicRow{Partitions: n, MaxMessageBytes: maxMsg}, sc)
			if errors.Is(err, meta.ErrConditionFailed) {
				fail(kerr.TopicAlreadyExists.Code, "topic %q already exists", t.Topic)
			} else if ae, ok := asCode(err, api.CodeStreamDeletionPending); ok {
				// Kafka's answer for a topic still being deleted.
				fail(kerr.TopicAlreadyExists.Code, "topic %q is still being deleted: %s; retry", t.Topic, ae.Message)
			} else if err != nil {
				rt.ErrorCode, rt.ErrorMessage = codeOf(err), msgOf(err)
			} else {
				rt.TopicID = row.uuid()
			}
		}
		if rt.ErrorCode == 0 {
			rt.NumPartitions, rt.ReplicationFactor = n, 1
			if sc != nil {
				v := retentionMs(*sc.RetentionPolicy)
				rt.Configs = append(rt.Configs, kmsg.CreateTopicsResponseTopicConfig{Name: configRetentionMs, Value: &v, Source: int8(kmsg.ConfigSourceDynamicTopicConfig)})
			}
			if maxMsg > 0 {
				v := strconv.Itoa(int(maxMsg))
				rt.Configs = append(rt.Configs, kmsg.CreateTopicsResponseTopicConfig{Name: configMaxMessage, Value: &v, Source: int8(kmsg.ConfigSourceDynamicTopicConfig)})
			}
		} else {
			rt.NumPartitions, rt.ReplicationFactor = -1, -1
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// createTopic creates the partitions' streams, then writes the topic's
// row (meta.ErrConditionFailed when the topic exists). The row comes
// last so a topic never names a partition whose stream was not made, and
// nothing but CreateTopics and CreatePartitions creates a partition's
// stream (a produce racing a delete cannot bring one back). A crash
// between the two leaves streams no topic names, which a retry adopts.
// row holds the partition count and the topic's configs kept in it.
func (s *Server) createTopic(ctx context.Context, topic string, row topicRow, sc *api.StreamConfig) (topicRow, error) {
	if _, _, err := s.getTopic(ctx, topic); err == nil {
		return topicRow{}, meta.ErrConditionFailed
	} else if !errors.Is(err, errNoTopic) {
		return topicRow{}, err
	}
	if err := s.createPartitionStreams(ctx, topic, 0, row.Partitions, sc); err != nil {
		return topicRow{}, err
	}
	row.ID, row.Created = newTopicID(), time.Now().UTC()
	k := topicKey(s.basin, topic)
	defer s.topics.forget(topic) // after the put: a read racing it is not kept
	if _, err := s.star.Meta().Put(ctx, k.PK, k.SK, meta.Encode(row), meta.IfAbsent()); err != nil {
		return topicRow{}, err
	}
	return row, nil
}

func (cs *conn) deleteTopics(ctx context.Context, r *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type ask struct {
		name *string
		id   [16]byte
	}
	var asks []ask
	for _, n := range r.TopicNames {
		asks = append(asks, ask{name: &n})
	}
	for _, t := range r.Topics {
		asks = append(asks, ask{name: t.Topic, id: t.TopicID})
	}
	var all []namedTopic // read once, for topics named by id
	for _, a := range asks {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID = a.name, a.id
		name := ""
		if a.name != nil {
			name = *a.name
		} else {
			if all == nil {
				var err error
				if all, err = cs.s.listTopics(ctx); err != nil {
					rt.ErrorCode, rt.ErrorMessage = codeOf(err), msgOf(err)
					resp.Topics = append(resp.Topics, rt)
					continue
				}
			}
			for _, t := range all {
				if t.row.uuid() == a.id {
					name = t.name
				}
			}
			if name == "" {
				rt.ErrorCode = kerr.UnknownTopicID.Code
				resp.Topics = append(resp.Topics, rt)
				continue
			}
			rt.Topic = &name
		}
		rt.ErrorCode, rt.ErrorMessage = cs.deleteTopic(ctx, name)
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// deleteTopic deletes every partition's stream, then the row, so a
// retry after a failure part-way finishes the job (the row still names
// the partitions).
func (cs *conn) deleteTopic(ctx context.Context, topic string) (int16, *string) {
	row, ver, err := cs.s.getTopic(ctx, topic)
	if err != nil {
		return codeOf(err), msgOf(err)
	}
	if aerr := cs.authorizeTopic(auth.DeleteStream, topic, 0, row.Partitions); aerr != nil {
		return kerr.TopicAuthorizationFailed.Code, &aerr.Message
	}
	for p := range row.Partitions {
		err := cs.s.star.DeleteStream(ctx, cs.s.basin, partitionStream(topic, p))
		var ae *api.Error
		if err != nil && !(errors.As(err, &ae) && ae.Status == 404) {
			return codeOf(err), msgOf(err)
		}
	}
	k := topicKey(cs.s.basin, topic)
	defer cs.s.topics.forget(topic)
	if err := cs.s.star.Meta().Delete(ctx, k.PK, k.SK, meta.IfVer(ver)); err != nil {
		if errors.Is(err, meta.ErrConditionFailed) {
			m := "the topic changed while it was being deleted; retry"
			return kerr.RequestTimedOut.Code, &m
		}
		return codeOf(err), msgOf(err)
	}
	return 0, nil
}

func (cs *conn) createPartitions(ctx context.Context, r *kmsg.CreatePartitionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		rt.ErrorCode, rt.ErrorMessage = cs.createPartitionsOf(ctx, t, r.ValidateOnly)
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (cs *conn) createPartitionsOf(ctx context.Context, t kmsg.CreatePartitionsRequestTopic, validateOnly bool) (int16, *string) {
	fail := func(code int16, format string, args ...any) (int16, *string) {
		msg := fmt.Sprintf(format, args...)
		return code, &msg
	}
	row, ver, err := cs.s.getTopic(ctx, t.Topic)
	if err != nil {
		return codeOf(err), msgOf(err)
	}
	switch {
	case t.Count <= row.Partitions:
		return fail(kerr.InvalidPartitions.Code, "topic %q has %d partitions; the count can only grow", t.Topic, row.Partitions)
	case t.Count > MaxPartitions:
		return fail(kerr.InvalidPartitions.Code, "at most %d partitions", MaxPartitions)
	case len(t.Assignment) > 0:
		return fail(kerr.InvalidReplicaAssignment.Code, "replica assignments are not served")
	}
	if aerr := cs.authorizeTopic(auth.CreateStream, t.Topic, row.Partitions, t.Count); aerr != nil {
		return kerr.TopicAuthorizationFailed.Code, &aerr.Message
	}
	if validateOnly {
		return 0, nil
	}
	// The new partitions take partition 0's config (its retention).
	var sc *api.StreamConfig
	if c, err := cs.s.star.StreamConfig(ctx, cs.s.basin, partitionStream(t.Topic, 0)); err == nil {
		sc = &c
	}
	// The streams first, then the row, as for a new topic.
	if err := cs.s.createPartitionStreams(ctx, t.Topic, row.Partitions, t.Count, sc); err != nil {
		return codeOf(err), msgOf(err)
	}
	row.Partitions = t.Count
	k := topicKey(cs.s.basin, t.Topic)
	defer cs.s.topics.forget(t.Topic)
	if _, err := cs.s.star.Meta().Put(ctx, k.PK, k.SK, meta.Encode(row), meta.IfVer(ver)); err != nil {
		if errors.Is(err, meta.ErrConditionFailed) {
			return fail(kerr.RequestTimedOut.Code, "the topic changed meanwhile; retry")
		}
		return codeOf(err), msgOf(err)
	}
	return 0, nil
}
