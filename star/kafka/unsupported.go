package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// unsupportedCode answers the requests of transactions, which this face
// does not serve, and the group requests at a version it does not serve
// (groups.go serves the others): clients that send them although
// ApiVersions does not list them (the group and transaction clients do
// not all check) get UNSUPPORTED_VERSION, which none retries, so they
// fail at once with a clear error.
var unsupportedCode = kerr.UnsupportedVersion.Code

// unsupported returns the error response of a transaction request or of
// a group request at a version not served, or nil for any other request (the connection is then closed,
// as a Kafka broker does for a request it does not know).
func unsupported(req kmsg.Request) kmsg.Response {
	msg := "not served by this starlog star (docs/kafka.md)"
	switch r := req.(type) {
	case *kmsg.FindCoordinatorRequest:
		resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.ErrorCode, resp.ErrorMessage, resp.NodeID = unsupportedCode, &msg, -1
		for _, k := range r.CoordinatorKeys {
			resp.Coordinators = append(resp.Coordinators, kmsg.FindCoordinatorResponseCoordinator{
				Key: k, NodeID: -1, ErrorCode: unsupportedCode, ErrorMessage: &msg})
		}
		return resp
	case *kmsg.JoinGroupRequest:
		resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode, resp.Generation = unsupportedCode, -1
		return resp
	case *kmsg.SyncGroupRequest:
		resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = unsupportedCode
		return resp
	case *kmsg.HeartbeatRequest:
		resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = unsupportedCode
		return resp
	case *kmsg.LeaveGroupRequest:
		resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
		resp.ErrorCode = unsupportedCode
		return resp
	case *kmsg.OffsetCommitRequest:
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range r.Topics {
			rt := kmsg.OffsetCommitResponseTopic{Topic: t.Topic, TopicID: t.TopicID}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: unsupportedCode})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	case *kmsg.OffsetFetchRequest:
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.ErrorCode = unsupportedCode
		for _, g := range r.Groups {
			resp.Groups = append(resp.Groups, kmsg.OffsetFetchResponseGroup{Group: g.Group, ErrorCode: unsupportedCode})
		}
		return resp
	case *kmsg.DescribeGroupsRequest:
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, g := range r.Groups {
			resp.Groups = append(resp.Groups, kmsg.DescribeGroupsResponseGroup{Group: g, ErrorCode: unsupportedCode, ErrorMessage: &msg})
		}
		return resp
	case *kmsg.ListGroupsRequest:
		resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
		resp.ErrorCode = unsupportedCode
		return resp
	case *kmsg.DeleteGroupsRequest:
		resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
		for _, g := range r.Groups {
			resp.Groups = append(resp.Groups, kmsg.DeleteGroupsResponseGroup{Group: g, ErrorCode: unsupportedCode, ErrorMessage: &msg})
		}
		return resp
	case *kmsg.InitProducerIDRequest:
		resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = unsupportedCode, -1, -1
		return resp
	case *kmsg.AddPartitionsToTxnRequest:
		resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		resp.ErrorCode = unsupportedCode
		for _, t := range r.Topics {
			rt := kmsg.AddPartitionsToTxnResponseTopic{Topic: t.Topic}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.AddPartitionsToTxnResponseTopicPartition{Partition: p, ErrorCode: unsupportedCode})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	case *kmsg.AddOffsetsToTxnRequest:
		resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		resp.ErrorCode = unsupportedCode
		return resp
	case *kmsg.EndTxnRequest:
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = unsupportedCode, -1, -1
		return resp
	case *kmsg.TxnOffsetCommitRequest:
		resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, t := range r.Topics {
			rt := kmsg.TxnOffsetCommitResponseTopic{Topic: t.Topic}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.TxnOffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: unsupportedCode})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	return nil
}
