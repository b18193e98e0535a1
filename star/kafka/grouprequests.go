package kafka

import (
	"cmp"
	"context"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/kafka/groups"
)

// The group protocol's requests: FindCoordinator, JoinGroup, SyncGroup,
// Heartbeat, LeaveGroup, and the admin's ListGroups, DescribeGroups and
// DeleteGroups. Each checks the group (groupGate) before the state
// machine (star/kafka/groups) sees it.

// groupWaitOf is how long a JoinGroup or SyncGroup may wait beyond
// RequestTimeout: for the other members to rejoin, or for the leader's
// assignments. The state machine answers it within the group's rebalance
// timeout or a session; this is the backstop.
func groupWaitOf(req kmsg.Request) time.Duration {
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		// The client's int32 milliseconds: never below 0 (the state
		// machine refuses a session that short), never above the cap.
		return min(max(time.Duration(r.RebalanceTimeoutMillis), time.Duration(r.SessionTimeoutMillis), 0)*time.Millisecond, groups.MaxRebalanceTimeout)
	case *kmsg.SyncGroupRequest:
		return groups.MaxRebalanceTimeout
	}
	return 0
}

// findCoordinator answers this star, broker 0, for every group it may
// describe, as Metadata names it the one broker: a star that does not
// coordinate the group forwards its requests to the one that does
// (groupforward.go).
func (cs *conn) findCoordinator(r *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	host, port := cs.self()
	answer := func(key string) kmsg.FindCoordinatorResponseCoordinator {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID = key, -1
		switch {
		case r.CoordinatorType != 0:
			msg := "transactions are not served by this starlog star (docs/kafka.md)"
			c.ErrorCode, c.ErrorMessage = unsupportedCode, &msg
		case !validGroupID(key):
			c.ErrorCode = kerr.InvalidGroupID.Code
		case !cs.mayGroup(groupDescribe, key):
			c.ErrorCode = kerr.GroupAuthorizationFailed.Code
		}
		if c.ErrorCode == 0 {
			c.NodeID, c.Host, c.Port = brokerID, host, port
		}
		return c
	}
	if r.Version >= 4 {
		for _, k := range r.CoordinatorKeys {
			resp.Coordinators = append(resp.Coordinators, answer(k))
		}
		return resp
	}
	c := answer(r.CoordinatorKey)
	resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = c.ErrorCode, c.ErrorMessage, c.NodeID, c.Host, c.Port
	return resp
}

func (cs *conn) joinGroup(ctx context.Context, r *kmsg.JoinGroupRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation, resp.MemberID = -1, r.MemberID
	if resp.ErrorCode = cs.groupGate(ctx, groupRead, r.Group); resp.ErrorCode != 0 {
		return resp
	}
	jr := groups.JoinReq{MemberID: r.MemberID, ClientID: cs.clientID, ClientHost: cs.client, ProtocolType: r.ProtocolType,
		Session:   time.Duration(r.SessionTimeoutMillis) * time.Millisecond,
		Rebalance: time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond,
		RequireID: r.Version >= 4}
	if r.Version == 0 {
		jr.Rebalance = jr.Session
	}
	if r.InstanceID != nil {
		jr.InstanceID = *r.InstanceID
	}
	for _, p := range r.Protocols {
		jr.Protocols = append(jr.Protocols, groups.Protocol{Name: p.Name, Meta: p.Metadata})
	}
	ch := make(chan groups.JoinResult, 1)
	if !cs.s.groups.do(r.Group, true, func(g *groups.Group, now time.Time) {
		g.Join(now, jr, func(res groups.JoinResult) {
			select {
			case ch <- res:
			default:
			}
		})
	}) {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	var res groups.JoinResult
	select {
	case res = <-ch:
	case <-ctx.Done():
		res = groups.JoinResult{Code: kerr.RebalanceInProgress.Code, Generation: -1, MemberID: r.MemberID}
	}
	resp.ErrorCode, resp.Generation, resp.MemberID, resp.LeaderID = res.Code, res.Generation, res.MemberID, res.Leader
	if res.Code == 0 {
		resp.ProtocolType, resp.Protocol = &res.ProtocolType, &res.Protocol
	}
	for _, m := range res.Members {
		rm := kmsg.NewJoinGroupResponseMember()
		rm.MemberID, rm.ProtocolMetadata = m.ID, m.Meta
		if m.InstanceID != "" {
			rm.InstanceID = &m.InstanceID
		}
		resp.Members = append(resp.Members, rm)
	}
	return resp
}

func (cs *conn) syncGroup(ctx context.Context, r *kmsg.SyncGroupRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
	if resp.ErrorCode = cs.groupGate(ctx, groupRead, r.Group); resp.ErrorCode != 0 {
		return resp
	}
	var as []groups.Assignment
	for _, a := range r.GroupAssignment {
		as = append(as, groups.Assignment{MemberID: a.MemberID, Data: a.MemberAssignment})
	}
	ch := make(chan groups.SyncResult, 1)
	cs.s.groups.do(r.Group, false, func(g *groups.Group, now time.Time) {
		g.Sync(now, r.MemberID, r.Generation, r.ProtocolType, r.Protocol, as, func(res groups.SyncResult) {
			select {
			case ch <- res:
			default:
			}
		})
	})
	var res groups.SyncResult
	select {
	case res = <-ch:
	case <-ctx.Done():
		res = groups.SyncResult{Code: kerr.RebalanceInProgress.Code}
	}
	resp.ErrorCode, resp.MemberAssignment = res.Code, res.Assignment
	if res.Code == 0 {
		resp.ProtocolType, resp.Protocol = &res.ProtocolType, &res.Protocol
	}
	return resp
}

func (cs *conn) heartbeat(ctx context.Context, r *kmsg.HeartbeatRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	if resp.ErrorCode = cs.groupGate(ctx, groupRead, r.Group); resp.ErrorCode != 0 {
		return resp
	}
	cs.s.groups.do(r.Group, false, func(g *groups.Group, now time.Time) { resp.ErrorCode = g.Heartbeat(now, r.MemberID, r.Generation) })
	return resp
}

func (cs *conn) leaveGroup(ctx context.Context, r *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	ids := []string{r.MemberID}
	if r.Version >= 3 {
		ids = ids[:0]
		for _, m := range r.Members {
			ids = append(ids, m.MemberID)
		}
	}
	if resp.ErrorCode = cs.groupGate(ctx, groupRead, r.Group); resp.ErrorCode != 0 {
		return resp
	}
	var codes []int16
	cs.s.groups.do(r.Group, false, func(g *groups.Group, now time.Time) { codes = g.Leave(now, ids) })
	if r.Version < 3 {
		resp.ErrorCode = codes[0]
		return resp
	}
	for i, m := range r.Members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ErrorCode = m.MemberID, m.InstanceID, codes[i]
		resp.Members = append(resp.Members, rm)
	}
	return resp
}

// groupSummary is what ListGroups and DescribeGroups show of a group.
type groupSummary struct {
	state, protocolType, protocol string
	members                       []kmsg.DescribeGroupsResponseGroupMember
}

// summary describes a group this star holds, or one with only committed
// offsets (Empty) or nothing (Dead), as Kafka does.
func (s *Server) summary(ctx context.Context, id string) (groupSummary, error) {
	var sum groupSummary
	if s.groups.peek(id, func(g *groups.Group) {
		sum = groupSummary{state: g.State, protocolType: g.ProtocolType, protocol: g.Protocol}
		for _, mid := range g.Order {
			m := g.Members[mid]
			dm := kmsg.NewDescribeGroupsResponseGroupMember()
			dm.MemberID, dm.ClientID, dm.ClientHost = m.ID, m.ClientID, m.ClientHost
			dm.ProtocolMetadata, dm.MemberAssignment = m.Meta(g.Protocol), m.Assignment
			if m.InstanceID != "" {
				iid := m.InstanceID
				dm.InstanceID = &iid
			}
			sum.members = append(sum.members, dm)
		}
	}) {
		return sum, nil
	}
	_, ver, err := s.readGroupRow(ctx, id)
	if err != nil {
		return sum, err
	}
	sum.state = groups.StateDead
	if ver != 0 {
		sum.state = groups.StateEmpty
	}
	return sum, nil
}

func (cs *conn) describeGroups(ctx context.Context, r *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range r.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = id
		if rg.ErrorCode = cs.groupGate(ctx, groupDescribe, id); rg.ErrorCode == 0 {
			sum, err := cs.s.summary(ctx, id)
			rg.ErrorCode = groupErrCode(err)
			rg.State, rg.ProtocolType, rg.Protocol, rg.Members = sum.state, sum.protocolType, sum.protocol, sum.members
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// listGroups answers the groups of the cluster the token may describe:
// those this star holds members of, every group with committed offsets
// (Empty unless a star holds it), and on a cluster those every other live
// star holds, asked over the internal path (a peer's own ListGroups
// answers only its own). A star that cannot be asked makes the answer
// COORDINATOR_NOT_AVAILABLE, which clients retry, with what was gathered.
func (cs *conn) listGroups(ctx context.Context, r *kmsg.ListGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	listed, err := cs.localGroups(ctx)
	if err != nil {
		resp.ErrorCode = groupErrCode(err)
		return resp
	}
	if !cs.peer && cs.s.peers != nil {
		all := *r
		all.StatesFilter = nil // filtered here, once the states are merged
		others, code := cs.peerGroups(ctx, &all)
		resp.ErrorCode = code
		at := map[string]int{}
		for i, g := range listed {
			at[g.Group] = i
		}
		for _, g := range others {
			i, ok := at[g.Group]
			switch {
			case !ok:
				at[g.Group] = len(listed)
				listed = append(listed, g)
			case listed[i].GroupState == groups.StateEmpty && g.GroupState != groups.StateEmpty:
				listed[i] = g // held by that star, with members
			}
		}
	}
	for _, g := range listed {
		if len(r.StatesFilter) == 0 || containsFold(r.StatesFilter, g.GroupState) {
			resp.Groups = append(resp.Groups, g)
		}
	}
	return resp
}

// localGroups lists the groups this star holds and every group with
// committed offsets, which the token may describe.
func (cs *conn) localGroups(ctx context.Context) ([]kmsg.ListGroupsResponseGroup, error) {
	ids, err := cs.s.listGroupRows(ctx)
	if err != nil {
		return nil, err
	}
	cs.s.groups.mu.Lock()
	held := map[string]groupSummary{}
	for id, g := range cs.s.groups.groups {
		held[id] = groupSummary{state: g.State, protocolType: g.ProtocolType}
		ids = append(ids, id)
	}
	cs.s.groups.mu.Unlock()
	done := map[string]bool{}
	var out []kmsg.ListGroupsResponseGroup
	for _, id := range ids {
		if done[id] || !validGroupID(id) || !cs.mayGroup(groupDescribe, id) {
			continue
		}
		done[id] = true
		sum, ok := held[id]
		if !ok {
			sum.state = groups.StateEmpty
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState = id, sum.protocolType, sum.state
		out = append(out, lg)
	}
	return out, nil
}

// peerGroups asks every other live star of the registry for its own
// listing (at once, each within the request's deadline), and a code for
// a star that could not be asked.
func (cs *conn) peerGroups(ctx context.Context, r *kmsg.ListGroupsRequest) ([]kmsg.ListGroupsResponseGroup, int16) {
	stars, err := cs.s.star.Stars(ctx)
	if err != nil {
		cs.s.log.Warn("kafka: ListGroups: cannot list the stars", "err", err)
		return nil, kerr.CoordinatorNotAvailable.Code
	}
	type answer struct {
		groups []kmsg.ListGroupsResponseGroup
		code   int16
	}
	ch := make(chan answer, len(stars))
	asked := 0
	for _, st := range stars {
		if st.ID == cs.s.peers.cfg.StarID || st.Address == "" || (st.State != meta.StarLive && st.State != meta.StarDraining) {
			continue
		}
		asked++
		go func() {
			resp, err := cs.s.peers.kafka(ctx, st.Address, cs, r)
			if err != nil {
				cs.s.log.Warn("kafka: ListGroups: a star did not answer", "star", st.ID, "err", err)
				ch <- answer{code: kerr.CoordinatorNotAvailable.Code}
				return
			}
			lr := resp.(*kmsg.ListGroupsResponse)
			ch <- answer{groups: lr.Groups, code: lr.ErrorCode}
		}()
	}
	var out []kmsg.ListGroupsResponseGroup
	var code int16
	for range asked {
		a := <-ch
		out = append(out, a.groups...)
		code = cmp.Or(code, a.code)
	}
	return out, code
}

func containsFold(list []string, s string) bool {
	for _, l := range list {
		if strings.EqualFold(l, s) {
			return true
		}
	}
	return false
}

// deleteGroups deletes groups without members: their committed offsets.
// The group's stream stays (its lease keeps naming the coordinator).
func (cs *conn) deleteGroups(ctx context.Context, r *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, id := range r.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = id
		if rg.ErrorCode = cs.groupGate(ctx, groupDelete, id); rg.ErrorCode == 0 {
			rg.ErrorCode = cs.s.deleteGroup(ctx, id)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (s *Server) deleteGroup(ctx context.Context, id string) int16 {
	busy := false
	s.groups.peek(id, func(g *groups.Group) { busy = len(g.Members) > 0 })
	if busy {
		return kerr.NonEmptyGroup.Code
	}
	_, ver, err := s.readGroupRow(ctx, id)
	if err != nil {
		return groupErrCode(err)
	}
	if ver == 0 {
		return kerr.GroupIDNotFound.Code
	}
	return groupErrCode(s.deleteGroupRow(ctx, id))
}
