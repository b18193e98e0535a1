package kafka

import (
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The classic group protocol's state machine (docs/kafka.md, "Consumer
// groups"): one group's membership, generation and assignments, as a
// coordinator keeps them in memory. Every method takes the time from its
// caller and answers through the reply functions it is given, so it is
// a pure function of its inputs (group_test.go drives it without a
// server); the coordinator (groups.go) serializes the calls.

// Group states, as DescribeGroups and ListGroups name them.
const (
	stateEmpty      = "Empty"
	statePreparing  = "PreparingRebalance"
	stateCompleting = "CompletingRebalance"
	stateStable     = "Stable"
	stateDead       = "Dead"
)

// Group limits.
const (
	// MinSessionTimeout and MaxSessionTimeout bound a member's session
	// (Kafka's group.min.session.timeout.ms and group.max.session.timeout.ms).
	MinSessionTimeout = 6 * time.Second
	MaxSessionTimeout = 30 * time.Minute
	// MaxRebalanceTimeout caps how long a join phase waits for members to
	// rejoin (and so how long a JoinGroup may wait): clients ask for
	// their max.poll.interval.ms, 5 minutes by default.
	MaxRebalanceTimeout = 5 * time.Minute
	// MaxGroupMembers bounds a group (Kafka's group.max.size); one more
	// is GROUP_MAX_SIZE_REACHED.
	MaxGroupMembers = 1000
)

type groupProtocol struct {
	name string
	meta []byte
}

// joinReq is a JoinGroup as the state machine sees it.
type joinReq struct {
	memberID, instanceID, clientID, clientHost string
	protocolType                               string
	protocols                                  []groupProtocol
	session, rebalance                         time.Duration
	// requireID: the client may be handed a member id and asked to join
	// again with it (KIP-394, JoinGroup v4+).
	requireID bool
}

type joinResult struct {
	code         int16
	generation   int32
	protocolType string
	protocol     string
	leader       string
	memberID     string
	members      []joinMember // the leader's only
}

type joinMember struct {
	id, instanceID string
	meta           []byte
}

type syncResult struct {
	code         int16
	protocolType string
	protocol     string
	assignment   []byte
}

type member struct {
	id, instanceID, clientID, clientHost string
	protocols                            []groupProtocol
	session, rebalance                   time.Duration
	// expires is when the member is gone without a heartbeat (not while
	// its JoinGroup waits: the join phase's deadline governs then).
	expires    time.Time
	assignment []byte
	joined     func(joinResult) // set while its JoinGroup waits
	synced     func(syncResult) // set while its SyncGroup waits
}

// group is one group's membership. Its zero generation is 0; the first
// completed join phase makes generation 1.
type group struct {
	id           string
	state        string
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	order        []string             // member ids in join order: the leader is the first still there
	pending      map[string]time.Time // ids handed out with MEMBER_ID_REQUIRED, until when they may join
	deadline     time.Time            // PreparingRebalance: when the join phase ends
	newID        func(clientID string) string
}

func newGroup(id string, newID func(string) string) *group {
	return &group{id: id, state: stateEmpty, members: map[string]*member{}, pending: map[string]time.Time{}, newID: newID}
}

// idle reports whether the group holds nothing but its generation: the
// coordinator may forget it (its offsets are in the metastore).
func (g *group) idle() bool { return len(g.members) == 0 && len(g.pending) == 0 }

func (g *group) join(now time.Time, r joinReq, reply func(joinResult)) {
	fail := func(code int16) { reply(joinResult{code: code, generation: -1, memberID: r.memberID}) }
	switch {
	case r.session < MinSessionTimeout || r.session > MaxSessionTimeout:
		fail(kerr.InvalidSessionTimeout.Code)
		return
	case r.protocolType == "" || len(r.protocols) == 0:
		fail(kerr.InconsistentGroupProtocol.Code)
		return
	case len(g.members) > 0 && (r.protocolType != g.protocolType || !g.supports(r.memberID, r.protocols)):
		fail(kerr.InconsistentGroupProtocol.Code)
		return
	}
	r.rebalance = min(max(r.rebalance, r.session), MaxRebalanceTimeout)
	m := g.members[r.memberID]
	switch {
	case r.memberID == "":
		if len(g.members)+len(g.pending) >= MaxGroupMembers {
			fail(kerr.GroupMaxSizeReached.Code)
			return
		}
		r.memberID = g.newID(r.clientID)
		if r.requireID {
			g.pending[r.memberID] = now.Add(r.session)
			reply(joinResult{code: kerr.MemberIDRequired.Code, generation: -1, memberID: r.memberID})
			return
		}
	case m == nil:
		if _, ok := g.pending[r.memberID]; !ok {
			fail(kerr.UnknownMemberID.Code)
			return
		}
		delete(g.pending, r.memberID)
	}
	if m == nil {
		m = &member{id: r.memberID}
		g.members[m.id] = m
		g.order = append(g.order, m.id)
	}
	if m.joined != nil {
		// A second JoinGroup of the same member while its first waits:
		// the first is superseded.
		m.joined(joinResult{code: kerr.RebalanceInProgress.Code, generation: -1, memberID: m.id})
	}
	m.instanceID, m.clientID, m.clientHost = r.instanceID, r.clientID, r.clientHost
	m.protocols, m.session, m.rebalance = r.protocols, r.session, r.rebalance
	m.joined = reply
	g.protocolType = r.protocolType
	if g.state != statePreparing {
		g.prepare(now)
	} else {
		g.deadline = later(g.deadline, now.Add(r.rebalance))
	}
	g.maybeCompleteJoin(now)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// supports reports whether protocols shares a protocol with every member
// other than id.
func (g *group) supports(id string, protocols []groupProtocol) bool {
	for _, p := range protocols {
		all := true
		for _, m := range g.members {
			if m.id != id && !slices.ContainsFunc(m.protocols, func(q groupProtocol) bool { return q.name == p.name }) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// prepare begins a join phase: members learn of it from their next
// heartbeat (REBALANCE_IN_PROGRESS) and rejoin; those that have not when
// the longest rebalance timeout is up are dropped.
func (g *group) prepare(now time.Time) {
	for _, m := range g.members {
		if m.synced != nil {
			m.synced(syncResult{code: kerr.RebalanceInProgress.Code})
			m.synced = nil
		}
	}
	g.state = statePreparing
	var longest time.Duration
	for _, m := range g.members {
		longest = max(longest, m.rebalance)
	}
	g.deadline = now.Add(longest)
}

// maybeCompleteJoin ends the join phase once every member has rejoined or
// its deadline has passed: a new generation, its protocol and leader, and
// every waiting JoinGroup answered.
func (g *group) maybeCompleteJoin(now time.Time) {
	if g.state != statePreparing {
		return
	}
	waiting := 0
	for _, m := range g.members {
		if m.joined != nil {
			waiting++
		}
	}
	if waiting < len(g.members) && now.Before(g.deadline) {
		return
	}
	for id, m := range g.members {
		if m.joined == nil {
			g.remove(id)
		}
	}
	g.generation++
	g.protocol = ""
	if len(g.members) == 0 {
		g.state, g.leader, g.protocolType = stateEmpty, "", ""
		return
	}
	g.protocol = g.vote()
	if _, ok := g.members[g.leader]; !ok {
		g.leader = g.order[0]
	}
	var all []joinMember
	for _, id := range g.order {
		m := g.members[id]
		all = append(all, joinMember{id: id, instanceID: m.instanceID, meta: m.meta(g.protocol)})
	}
	g.state = stateCompleting
	for _, id := range g.order {
		m := g.members[id]
		res := joinResult{generation: g.generation, protocolType: g.protocolType, protocol: g.protocol, leader: g.leader, memberID: id}
		if id == g.leader {
			res.members = all
		}
		m.assignment = nil
		m.expires = now.Add(m.session)
		reply := m.joined
		m.joined = nil
		reply(res)
	}
}

// vote picks the protocol every member supports that most members list
// first among those; ties go to the leader's (or the first member's)
// preference order.
func (g *group) vote() string {
	votes := map[string]int{}
	var candidates []string
	first := g.members[g.leader]
	if first == nil {
		first = g.members[g.order[0]]
	}
	for _, p := range first.protocols {
		if g.supports("", []groupProtocol{p}) {
			candidates = append(candidates, p.name)
		}
	}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if slices.Contains(candidates, p.name) {
				votes[p.name]++
				break
			}
		}
	}
	best := ""
	for _, c := range candidates {
		if best == "" || votes[c] > votes[best] {
			best = c
		}
	}
	return best
}

func (m *member) meta(protocol string) []byte {
	for _, p := range m.protocols {
		if p.name == protocol {
			return p.meta
		}
	}
	return nil
}

// remove drops a member (its waiting requests answered).
func (g *group) remove(id string) {
	m := g.members[id]
	if m == nil {
		return
	}
	if m.joined != nil {
		m.joined(joinResult{code: kerr.UnknownMemberID.Code, generation: -1, memberID: id})
	}
	if m.synced != nil {
		m.synced(syncResult{code: kerr.UnknownMemberID.Code})
	}
	delete(g.members, id)
	g.order = slices.DeleteFunc(g.order, func(o string) bool { return o == id })
}

// membersChanged reacts to members gone: a new join phase for those left.
func (g *group) membersChanged(now time.Time) {
	switch g.state {
	case stateStable, stateCompleting:
		g.prepare(now)
	}
	g.maybeCompleteJoin(now)
}

// check is the member and generation check of SyncGroup and Heartbeat.
func (g *group) check(id string, generation int32) (*member, int16) {
	m := g.members[id]
	switch {
	case m == nil:
		return nil, kerr.UnknownMemberID.Code
	case generation != g.generation:
		return nil, kerr.IllegalGeneration.Code
	}
	return m, 0
}

type assignment struct {
	memberID string
	data     []byte
}

// sync answers a SyncGroup: at once in Stable, when the leader's
// assignments arrive in CompletingRebalance.
func (g *group) sync(now time.Time, id string, generation int32, protocolType, protocol *string, assignments []assignment, reply func(syncResult)) {
	m, code := g.check(id, generation)
	switch {
	case code != 0:
		reply(syncResult{code: code})
		return
	case protocolType != nil && *protocolType != g.protocolType, protocol != nil && *protocol != g.protocol:
		reply(syncResult{code: kerr.InconsistentGroupProtocol.Code})
		return
	case g.state == statePreparing:
		reply(syncResult{code: kerr.RebalanceInProgress.Code})
		return
	case g.state == stateStable:
		reply(syncResult{protocolType: g.protocolType, protocol: g.protocol, assignment: m.assignment})
		return
	}
	// CompletingRebalance.
	m.expires = now.Add(m.session)
	if m.synced != nil {
		m.synced(syncResult{code: kerr.RebalanceInProgress.Code})
	}
	m.synced = reply
	if id != g.leader {
		return
	}
	for _, a := range assignments {
		if o := g.members[a.memberID]; o != nil {
			o.assignment = a.data
		}
	}
	g.state = stateStable
	for _, oid := range g.order {
		o := g.members[oid]
		if o.synced != nil {
			reply := o.synced
			o.synced = nil
			reply(syncResult{protocolType: g.protocolType, protocol: g.protocol, assignment: o.assignment})
		}
	}
}

func (g *group) heartbeat(now time.Time, id string, generation int32) int16 {
	m, code := g.check(id, generation)
	if code != 0 {
		return code
	}
	m.expires = now.Add(m.session)
	if g.state == statePreparing {
		return kerr.RebalanceInProgress.Code
	}
	return 0
}

// leave removes members (LeaveGroup): the code of each.
func (g *group) leave(now time.Time, ids []string) []int16 {
	codes := make([]int16, len(ids))
	changed := false
	for i, id := range ids {
		if _, ok := g.pending[id]; ok {
			delete(g.pending, id)
			continue
		}
		if g.members[id] == nil {
			codes[i] = kerr.UnknownMemberID.Code
			continue
		}
		g.remove(id)
		changed = true
	}
	if changed {
		g.membersChanged(now)
	}
	return codes
}

// tick expires sessions and handed-out ids and ends a join phase whose
// deadline has passed.
func (g *group) tick(now time.Time) {
	for id, until := range g.pending {
		if !now.Before(until) {
			delete(g.pending, id)
		}
	}
	changed := false
	for id, m := range g.members {
		if m.joined == nil && !now.Before(m.expires) {
			g.remove(id)
			changed = true
		}
	}
	if changed {
		g.membersChanged(now)
		return
	}
	g.maybeCompleteJoin(now)
}

// commitCheck is OffsetCommit's member and generation check: a commit
// with no member and generation -1 is a plain store of offsets, allowed
// while the group has no members (Kafka's "simple" groups, and tools
// that reset offsets).
func (g *group) commitCheck(id string, generation int32) int16 {
	if generation < 0 && id == "" && len(g.members) == 0 {
		return 0
	}
	if g.state == stateCompleting {
		return kerr.RebalanceInProgress.Code
	}
	_, code := g.check(id, generation)
	return code
}
