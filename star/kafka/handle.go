package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handle decodes one request frame and answers it: the response to
// write (nil: none, for acks=0), or errClose (wrapped) to close the
// connection without one.
func (cs *conn) handle(frame []byte) (header, kmsg.Response, error) {
	h, req, body, err := parseHeader(frame)
	if err != nil {
		cs.count("unknown", "refused")
		return h, nil, err
	}
	if req == nil {
		cs.count("unknown", "refused")
		return h, nil, fmt.Errorf("%w: unknown API key %d", errClose, h.key)
	}
	name := kmsg.NameForKey(h.key)
	if h.key == 18 && !servedVersion(18, h.version) {
		// Answered without reading the body: a newer version's may not
		// parse at all (KIP-511).
		cs.count(name, "error")
		return h, apiVersions(h.version), nil
	}
	if err := req.ReadFrom(body); err != nil {
		cs.count(name, "refused")
		return h, nil, fmt.Errorf("%w: malformed %s v%d: %v", errClose, name, h.version, err)
	}
	// Nothing but the handshake before authentication: a Kafka broker
	// closes such a connection ("unexpected request during SASL").
	if cs.principal == nil && h.key != 18 && h.key != 17 && h.key != 36 {
		cs.count(name, "refused")
		return h, nil, fmt.Errorf("%w: %s before authenticating", errClose, name)
	}
	if h.key != 18 && h.key != 17 && h.key != 36 {
		if err := cs.recheck(); err != nil {
			cs.count(name, "refused")
			return h, nil, err
		}
	}
	if !servedVersion(h.key, h.version) {
		if resp := unsupported(req); resp != nil {
			cs.count(name, "error")
			return h, resp, nil
		}
		cs.count(name, "refused")
		return h, nil, fmt.Errorf("%w: %s v%d is not served", errClose, name, h.version)
	}
	cs.clientID = ""
	if h.clientID != nil {
		cs.clientID = *h.clientID
	}
	ctx, cancel := context.WithTimeout(withToken(cs.s.ctx, cs.token), cs.s.requestTimeout+fetchWaitOf(req)+groupWaitOf(req))
	defer cancel()
	ctx, span := cs.s.startSpan(ctx, req, false)
	resp, err := cs.dispatch(ctx, req)
	cs.s.endSpan(span, req, resp, err, false)
	if err != nil {
		cs.count(name, "refused")
		return h, nil, err
	}
	cs.count(name, "ok")
	return h, resp, nil
}

// fetchWaitOf is how long req may wait beyond RequestTimeout: a fetch's
// long-poll.
func fetchWaitOf(req kmsg.Request) time.Duration {
	if f, ok := req.(*kmsg.FetchRequest); ok {
		return fetchWait(f)
	}
	return 0
}

func (cs *conn) count(api, result string) { cs.s.requests.WithLabelValues(api, result).Inc() }

// dispatch runs a served request.
func (cs *conn) dispatch(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		return apiVersions(r.Version), nil
	case *kmsg.SASLHandshakeRequest:
		return cs.saslHandshake(r), nil
	case *kmsg.SASLAuthenticateRequest:
		return cs.saslAuthenticate(ctx, r)
	case *kmsg.MetadataRequest:
		return cs.metadata(ctx, r), nil
	case *kmsg.DescribeClusterRequest:
		return cs.describeCluster(r), nil
	case *kmsg.CreateTopicsRequest:
		return cs.createTopics(ctx, r), nil
	case *kmsg.DeleteTopicsRequest:
		return cs.deleteTopics(ctx, r), nil
	case *kmsg.CreatePartitionsRequest:
		return cs.createPartitions(ctx, r), nil
	case *kmsg.DescribeConfigsRequest:
		return cs.describeConfigs(ctx, r), nil
	case *kmsg.ListOffsetsRequest:
		return cs.listOffsets(ctx, r), nil
	case *kmsg.InitProducerIDRequest:
		return cs.initProducerID(ctx, r), nil
	case *kmsg.ProduceRequest:
		return cs.produce(ctx, r), nil
	case *kmsg.FetchRequest:
		return cs.fetch(ctx, r), nil
	case *kmsg.FindCoordinatorRequest:
		return cs.findCoordinator(r), nil
	case *kmsg.ListGroupsRequest:
		return cs.listGroups(ctx, r), nil
	case *kmsg.JoinGroupRequest, *kmsg.SyncGroupRequest, *kmsg.HeartbeatRequest, *kmsg.LeaveGroupRequest,
		*kmsg.OffsetCommitRequest, *kmsg.OffsetFetchRequest, *kmsg.DescribeGroupsRequest, *kmsg.DeleteGroupsRequest:
		// At the group's coordinator, this star or another (groupforward.go).
		if resp, ok := cs.splitGroups(ctx, req); ok {
			return resp, nil
		}
		return cs.groupRequest(ctx, req), nil
	}
	return nil, fmt.Errorf("%w: %s has no handler", errClose, kmsg.NameForKey(req.Key()))
}

// serveGroup answers a group request here, as the group's coordinator
// (or NOT_COORDINATOR when this star is not).
func (cs *conn) serveGroup(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		return cs.joinGroup(ctx, r), nil
	case *kmsg.SyncGroupRequest:
		return cs.syncGroup(ctx, r), nil
	case *kmsg.HeartbeatRequest:
		return cs.heartbeat(ctx, r), nil
	case *kmsg.LeaveGroupRequest:
		return cs.leaveGroup(ctx, r), nil
	case *kmsg.OffsetCommitRequest:
		return cs.offsetCommit(ctx, r), nil
	case *kmsg.OffsetFetchRequest:
		return cs.offsetFetch(ctx, r), nil
	case *kmsg.DescribeGroupsRequest:
		return cs.describeGroups(ctx, r), nil
	case *kmsg.DeleteGroupsRequest:
		return cs.deleteGroups(ctx, r), nil
	case *kmsg.ListGroupsRequest:
		return cs.listGroups(ctx, r), nil
	}
	return nil, fmt.Errorf("%w: %s is not a group request", errClose, kmsg.NameForKey(req.Key()))
}
