package kafka

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/star/auth"
)

// brokerID is the one broker a client sees: whichever star it reached,
// at the advertised address (the load balancer's) or the one it
// connected to, leads every partition; a star reads and appends a
// partition another star leads at that star (forward.go). docs/kafka.md,
// "Many stars", says why one broker rather than one per star.
const brokerID = 0

// self is the broker's host and port: Config.Advertise, else the
// connection's local address.
func (cs *conn) self() (string, int32) {
	if a := cs.s.cfg.Advertise; a != "" {
		if h, p, err := advertised(a); err == nil {
			return h, p
		}
	}
	host, p, err := advertised(cs.c.LocalAddr().String())
	if err != nil {
		return "127.0.0.1", 9092
	}
	return host, p
}

// advertised splits a host:port with a port of 1 to 65535.
func advertised(a string) (string, int32, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || host == "" {
		return "", 0, fmt.Errorf("want host:port with a port of 1 to 65535")
	}
	return host, int32(p), nil
}

// visible reports whether the connection may see a topic: Kafka's
// DESCRIBE, which its READ and WRITE imply, so any of the stream reads
// or appends on partition 0 allows it.
func (cs *conn) visible(topic string) bool {
	for _, op := range []auth.Op{auth.GetStreamConfig, auth.Read, auth.Append, auth.CheckTail} {
		if cs.authorize(op, partitionStream(topic, 0)) == nil {
			return true
		}
	}
	return false
}

func (cs *conn) metadata(ctx context.Context, r *kmsg.MetadataRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	host, port := cs.self()
	resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: brokerID, Host: host, Port: port}}
	resp.ClusterID = &cs.s.cfg.ClusterID
	resp.ControllerID = brokerID
	all := r.Topics == nil || (r.Version == 0 && len(r.Topics) == 0)
	var listed []namedTopic
	if all || needsIDs(r.Topics) {
		var err error
		if listed, err = cs.s.listTopics(ctx); err != nil {
			// Metadata has no request-level error before v13: a client
			// sees no topics and asks again.
			cs.s.log.Warn("kafka metadata: listing topics", "err", err)
			return resp
		}
	}
	if all {
		for _, t := range listed {
			if cs.visible(t.name) {
				resp.Topics = append(resp.Topics, topicMetadata(t.name, t.row))
			}
		}
		return resp
	}
	for _, rt := range r.Topics {
		name := ""
		if rt.Topic != nil {
			name = *rt.Topic
		} else {
			for _, t := range listed {
				if t.row.uuid() == rt.TopicID {
					name = t.name
				}
			}
		}
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.TopicID = rt.Topic, rt.TopicID
		switch {
		case name == "":
			mt.ErrorCode = kerr.UnknownTopicID.Code
		case validTopicName(name) != nil:
			mt.ErrorCode = kerr.InvalidTopicException.Code
		case !cs.visible(name):
			mt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		default:
			row, err := cs.s.topic(ctx, name)
			if err != nil {
				mt.ErrorCode = codeOf(err)
				if mt.ErrorCode == kerr.KafkaStorageError.Code {
					// A metastore outage: the client asks again.
					mt.ErrorCode = kerr.LeaderNotAvailable.Code
				}
			} else {
				mt = topicMetadata(name, row)
			}
		}
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

func needsIDs(ts []kmsg.MetadataRequestTopic) bool {
	for _, t := range ts {
		if t.Topic == nil {
			return true
		}
	}
	return false
}

func topicMetadata(name string, row topicRow) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	mt.Topic, mt.TopicID = &name, row.uuid()
	for p := range row.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader, mp.LeaderEpoch = p, brokerID, 0
		mp.Replicas, mp.ISR = []int32{brokerID}, []int32{brokerID}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

func (cs *conn) describeCluster(r *kmsg.DescribeClusterRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	host, port := cs.self()
	resp.ClusterID, resp.ControllerID = cs.s.cfg.ClusterID, brokerID
	resp.Brokers = []kmsg.DescribeClusterResponseBroker{{NodeID: brokerID, Host: host, Port: port}}
	return resp
}

func (cs *conn) describeConfigs(ctx context.Context, r *kmsg.DescribeConfigsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, res := range r.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		switch res.ResourceType {
		case kmsg.ConfigResourceTypeBroker:
			// No broker config is served; an empty list, as tools expect.
		case kmsg.ConfigResourceTypeTopic:
			rr.ErrorCode, rr.ErrorMessage, rr.Configs = cs.topicConfigs(ctx, res)
		default:
			msg := "only topic and broker configs are described"
			rr.ErrorCode, rr.ErrorMessage = kerr.InvalidRequest.Code, &msg
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

func (cs *conn) topicConfigs(ctx context.Context, res kmsg.DescribeConfigsRequestResource) (int16, *string, []kmsg.DescribeConfigsResponseResourceConfig) {
	topic := res.ResourceName
	if aerr := cs.authorize(auth.GetStreamConfig, partitionStream(topic, 0)); aerr != nil {
		return kerr.TopicAuthorizationFailed.Code, &aerr.Message, nil
	}
	row, _, err := cs.s.getTopic(ctx, topic)
	if err != nil {
		return codeOf(err), msgOf(err), nil
	}
	maxMsg := kmsg.DescribeConfigsResponseResourceConfig{Name: configMaxMessage, Value: new(strconv.Itoa(MaxFrameBytes)),
		IsDefault: true, Source: kmsg.ConfigSourceDefaultConfig, ConfigType: kmsg.ConfigTypeInt}
	if row.MaxMessageBytes > 0 {
		maxMsg.Value, maxMsg.IsDefault, maxMsg.Source = new(strconv.Itoa(int(row.MaxMessageBytes))), false, kmsg.ConfigSourceDynamicTopicConfig
	}
	sc, err := cs.s.star.StreamConfig(ctx, cs.s.basin, partitionStream(topic, 0))
	if err != nil {
		return codeOf(err), msgOf(err), nil
	}
	ret := "604800000" // the built-in default, should the config lack it
	if sc.RetentionPolicy != nil {
		ret = retentionMs(*sc.RetentionPolicy)
	}
	configs := []kmsg.DescribeConfigsResponseResourceConfig{
		{Name: configRetentionMs, Value: &ret, Source: kmsg.ConfigSourceDynamicTopicConfig, ConfigType: kmsg.ConfigTypeLong},
		{Name: configCleanupPolicy, Value: new("delete"), ReadOnly: true, IsDefault: true, Source: kmsg.ConfigSourceDefaultConfig, ConfigType: kmsg.ConfigTypeList},
		maxMsg,
	}
	if res.ConfigNames != nil {
		var keep []kmsg.DescribeConfigsResponseResourceConfig
		for _, c := range configs {
			for _, n := range res.ConfigNames {
				if c.Name == n {
					keep = append(keep, c)
				}
			}
		}
		configs = keep
	}
	return 0, nil, configs
}
