package kafka

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/star/server"
)

// Group requests on a star that does not coordinate the group
// (docs/kafka.md, "Many stars"). Every star answers FindCoordinator with
// itself, as Metadata names it the one broker: behind the load balancer a
// client cannot reach a chosen star. A group request that lands on a star
// whose group stream another star leads is sent on to that star, the
// coordinator, over the internal path the partitions' reads and appends
// take (the lease's address, the internal credential, the forwarded-by
// header, the client's token), as the request's bytes to the star's
// server.KafkaPath; the coordinator answers it as if the client had
// connected to it (grouppeer.go). While the group's stream moves (a
// handoff, a failover) the coordinator answers NOT_COORDINATOR or cannot
// be reached: the forwarding star resolves the lease again and retries
// until the request's own deadline, so a client sees the move only as a
// slower answer.

// Headers of a forwarded group request.
const (
	headerKafkaKey      = "Starlog-Kafka-Key"
	headerKafkaVersion  = "Starlog-Kafka-Version"
	headerKafkaClientID = "Starlog-Kafka-Client-Id"
	headerKafkaClient   = "Starlog-Kafka-Client"
	// headerKafkaWait is the time left to the forwarding star's deadline,
	// in ms: the coordinator answers within it.
	headerKafkaWait = "Starlog-Kafka-Wait-Ms"
)

const (
	// forwardBackoffMin and forwardBackoffMax bound the wait between
	// attempts while the coordinator moves.
	forwardBackoffMin = 20 * time.Millisecond
	forwardBackoffMax = 500 * time.Millisecond
	// forwardReserve is kept from the request's deadline for the last
	// answer: once retries end, the star answers NOT_COORDINATOR itself.
	forwardReserve = time.Second
	// maxGroupResponseBytes bounds a coordinator's answer as read by the
	// forwarding star (a frame's bound).
	maxGroupResponseBytes = MaxFrameBytes
)

// groupOf is the group of a request that one coordinator answers; false
// for other requests and for those naming several groups (split first,
// splitGroups).
func groupOf(req kmsg.Request) (string, groupAccess, bool) {
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		return r.Group, groupRead, true
	case *kmsg.SyncGroupRequest:
		return r.Group, groupRead, true
	case *kmsg.HeartbeatRequest:
		return r.Group, groupRead, true
	case *kmsg.LeaveGroupRequest:
		return r.Group, groupRead, true
	case *kmsg.OffsetCommitRequest:
		return r.Group, groupRead, true
	case *kmsg.OffsetFetchRequest:
		if r.Version < 8 {
			return r.Group, groupRead, true
		}
		if len(r.Groups) == 1 {
			return r.Groups[0].Group, groupRead, true
		}
	case *kmsg.DescribeGroupsRequest:
		if len(r.Groups) == 1 {
			return r.Groups[0], groupDescribe, true
		}
	case *kmsg.DeleteGroupsRequest:
		if len(r.Groups) == 1 {
			return r.Groups[0], groupDelete, true
		}
	}
	return "", 0, false
}

// atCoordinator answers a request of one group: here (local) when this
// star coordinates the group, when it cannot forward, or when the
// request fails its checks here (an invalid id, a token without access:
// answered without a hop); else at the coordinator, retried while it
// moves, until ctx's deadline less forwardReserve.
func (cs *conn) atCoordinator(ctx context.Context, req kmsg.Request, group string, a groupAccess, local func(context.Context) kmsg.Response) kmsg.Response {
	s := cs.s
	if cs.peer || s.peers == nil || !validGroupID(group) || !cs.mayGroup(a, group) {
		return local(ctx)
	}
	stop, ok := ctx.Deadline()
	if !ok {
		stop = time.Now().Add(s.requestTimeout)
	}
	stop = stop.Add(-forwardReserve)
	backoff := forwardBackoffMin
	api := kmsg.NameForKey(req.Key())
	var done func(outcome string) // set at the first forward
	end := func(outcome string) {
		if done != nil {
			done(outcome)
		}
	}
	for {
		addr := s.leaderOf(s.leadGroup(ctx, group))
		if addr == "" {
			end(forwardHere)
			return local(ctx) // this star coordinates, or cannot tell (answered so)
		}
		if done == nil {
			done = s.fwd.start(api)
		}
		actx, cancel := context.WithDeadline(ctx, stop)
		resp, err := s.peers.kafka(actx, addr, cs, req)
		cancel()
		switch {
		case err != nil:
			s.fwd.attempts.WithLabelValues(api, attemptError).Inc()
		case coordinatorMoving(resp):
			s.fwd.attempts.WithLabelValues(api, attemptMoving).Inc()
		default:
			s.fwd.attempts.WithLabelValues(api, attemptAnswered).Inc()
			end(forwardAnswered)
			return resp
		}
		s.log.Debug("kafka: group request not answered by its coordinator; retrying", "group", group,
			"api", api, "coordinator", addr, "err", err)
		if time.Now().Add(backoff).After(stop) {
			// Out of time: this star's own answer, NOT_COORDINATOR while
			// another star leads the group, which the client retries.
			end(forwardExpired)
			return local(ctx)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			end(forwardCanceled)
			return local(ctx)
		case <-t.C:
		}
		backoff = min(2*backoff, forwardBackoffMax)
	}
}

// coordinatorMoving reports whether a coordinator's answer says the
// group is moving (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS): the
// forwarding star retries it at the group's next coordinator.
func coordinatorMoving(resp kmsg.Response) bool {
	moving := func(code int16) bool {
		return code == kerr.NotCoordinator.Code || code == kerr.CoordinatorLoadInProgress.Code
	}
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		return moving(r.ErrorCode)
	case *kmsg.SyncGroupResponse:
		return moving(r.ErrorCode)
	case *kmsg.HeartbeatResponse:
		return moving(r.ErrorCode)
	case *kmsg.LeaveGroupResponse:
		return moving(r.ErrorCode)
	case *kmsg.OffsetCommitResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if moving(p.ErrorCode) {
					return true
				}
			}
		}
	case *kmsg.OffsetFetchResponse:
		if moving(r.ErrorCode) {
			return true
		}
		for _, g := range r.Groups {
			if moving(g.ErrorCode) {
				return true
			}
		}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if moving(p.ErrorCode) {
					return true
				}
			}
		}
	case *kmsg.DescribeGroupsResponse:
		for _, g := range r.Groups {
			if moving(g.ErrorCode) {
				return true
			}
		}
	case *kmsg.DeleteGroupsResponse:
		for _, g := range r.Groups {
			if moving(g.ErrorCode) {
				return true
			}
		}
	}
	return false
}

// splitGroups answers a request naming several groups (DescribeGroups,
// DeleteGroups, OffsetFetch v8 and later) one group at a time, each at
// its coordinator, in the request's order; false for other requests.
func (cs *conn) splitGroups(ctx context.Context, req kmsg.Request) (kmsg.Response, bool) {
	switch r := req.(type) {
	case *kmsg.DescribeGroupsRequest:
		if len(r.Groups) < 2 {
			return nil, false
		}
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, g := range r.Groups {
			one := *r
			one.Groups = []string{g}
			resp.Groups = append(resp.Groups, cs.groupRequest(ctx, &one).(*kmsg.DescribeGroupsResponse).Groups...)
		}
		return resp, true
	case *kmsg.DeleteGroupsRequest:
		if len(r.Groups) < 2 {
			return nil, false
		}
		resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
		for _, g := range r.Groups {
			one := *r
			one.Groups = []string{g}
			resp.Groups = append(resp.Groups, cs.groupRequest(ctx, &one).(*kmsg.DeleteGroupsResponse).Groups...)
		}
		return resp, true
	case *kmsg.OffsetFetchRequest:
		if r.Version < 8 || len(r.Groups) < 2 {
			return nil, false
		}
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		for _, g := range r.Groups {
			one := *r
			one.Groups = []kmsg.OffsetFetchRequestGroup{g}
			resp.Groups = append(resp.Groups, cs.groupRequest(ctx, &one).(*kmsg.OffsetFetchResponse).Groups...)
		}
		return resp, true
	}
	return nil, false
}

// groupRequest answers a group request of one group at its coordinator.
func (cs *conn) groupRequest(ctx context.Context, req kmsg.Request) kmsg.Response {
	local := func(ctx context.Context) kmsg.Response {
		resp, _ := cs.serveGroup(ctx, req)
		return resp
	}
	group, a, ok := groupOf(req)
	if !ok { // a request naming no group: every part answered here
		return local(ctx)
	}
	return cs.atCoordinator(ctx, req, group, a, local)
}

// kafka sends a group request to the star at addr (its server.KafkaPath)
// and reads its answer, of the request's version.
func (p *peers) kafka(ctx context.Context, addr string, cs *conn, req kmsg.Request) (kmsg.Response, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, p.baseURL(addr)+server.KafkaPath, bytes.NewReader(req.AppendTo(nil)))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/octet-stream")
	hr.Header.Set(headerKafkaKey, strconv.Itoa(int(req.Key())))
	hr.Header.Set(headerKafkaVersion, strconv.Itoa(int(req.GetVersion())))
	hr.Header.Set(headerKafkaClientID, cs.clientID)
	hr.Header.Set(headerKafkaClient, cs.client)
	if d, ok := ctx.Deadline(); ok {
		hr.Header.Set(headerKafkaWait, strconv.FormatInt(max(time.Until(d).Milliseconds(), 1), 10))
	}
	res, err := p.http.Do(hr)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxGroupResponseBytes+1))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kafka: coordinator %s answered %s: %.256s", addr, res.Status, body)
	}
	if len(body) > maxGroupResponseBytes {
		return nil, fmt.Errorf("kafka: coordinator %s answered over %d bytes", addr, maxGroupResponseBytes)
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("kafka: coordinator %s's %s answer: %w", addr, kmsg.NameForKey(req.Key()), err)
	}
	return resp, nil
}
