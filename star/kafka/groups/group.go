package groups

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
// server); star/kafka's coordinator (groups.go) serializes the calls.

// Group states, as DescribeGroups and ListGroups name them.
const (
	StateEmpty      = "Empty"
	StatePreparing  = "PreparingRebalance"
	StateCompleting = "CompletingRebalance"
	StateStable     = "Stable"
	StateDead       = "Dead"
)

// Group limits.
const (
	// MinSessionTimeout and MaxSessionTimeout bound a member's session
	// (Kafka's group.min.Session.timeout.ms and group.max.Session.timeout.ms).
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

type Protocol struct {
	Name string
	Meta []byte
}

// JoinReq is a JoinGroup as the state machine sees it.
type JoinReq struct {
	MemberID, InstanceID, ClientID, ClientHost string
	ProtocolType                               string
	Protocols                                  []Protocol
	Session, Rebalance                         time.Duration
	// RequireID: the client may be handed a member id and asked to join
	// again with it (KIP-394, JoinGroup v4+).
	RequireID bool
}

type JoinResult struct {
	Code         int16
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	MemberID     string
	Members      []JoinMember // the leader's only
}

type JoinMember struct {
	ID, InstanceID string
	Meta           []byte
}

type SyncResult struct {
	Code         int16
	ProtocolType string
	Protocol     string
	Assignment   []byte
}

type Member struct {
	ID, InstanceID, ClientID, ClientHost string
	Protocols                            []Protocol
	Session, Rebalance                   time.Duration
	// expires is when the member is gone without a heartbeat (not while
	// its JoinGroup waits: the join phase's deadline governs then).
	Expires    time.Time
	Assignment []byte
	Joined     func(JoinResult) // set while its JoinGroup waits
	Synced     func(SyncResult) // set while its SyncGroup waits
}

// group is one group's membership. Its zero generation is 0; the first
// completed join phase makes generation 1.
type Group struct {
	ID           string
	State        string
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	Members      map[string]*Member
	Order        []string             // member ids in join Order: the leader is the first still there
	Pending      map[string]time.Time // ids handed out with MEMBER_ID_REQUIRED, until when they may join
	Deadline     time.Time            // PreparingRebalance: when the join phase ends
	NewID        func(clientID string) string
}

func New(id string, newID func(string) string) *Group {
	return &Group{ID: id, State: StateEmpty, Members: map[string]*Member{}, Pending: map[string]time.Time{}, NewID: newID}
}

// idle reports whether the group holds nothing but its Generation: the
// coordinator may forget it (its offsets are in the metastore).
func (g *Group) Idle() bool { return len(g.Members) == 0 && len(g.Pending) == 0 }

func (g *Group) Join(now time.Time, r JoinReq, reply func(JoinResult)) {
	fail := func(code int16) { reply(JoinResult{Code: code, Generation: -1, MemberID: r.MemberID}) }
	switch {
	case r.Session < MinSessionTimeout || r.Session > MaxSessionTimeout:
		fail(kerr.InvalidSessionTimeout.Code)
		return
	case r.ProtocolType == "" || len(r.Protocols) == 0:
		fail(kerr.InconsistentGroupProtocol.Code)
		return
	case len(g.Members) > 0 && (r.ProtocolType != g.ProtocolType || !g.Supports(r.MemberID, r.Protocols)):
		fail(kerr.InconsistentGroupProtocol.Code)
		return
	}
	r.Rebalance = min(max(r.Rebalance, r.Session), MaxRebalanceTimeout)
	m := g.Members[r.MemberID]
	switch {
	case r.MemberID == "":
		if len(g.Members)+len(g.Pending) >= MaxGroupMembers {
			fail(kerr.GroupMaxSizeReached.Code)
			return
		}
		r.MemberID = g.NewID(r.ClientID)
		if r.RequireID {
			g.Pending[r.MemberID] = now.Add(r.Session)
			reply(JoinResult{Code: kerr.MemberIDRequired.Code, Generation: -1, MemberID: r.MemberID})
			return
		}
	case m == nil:
		if _, ok := g.Pending[r.MemberID]; !ok {
			fail(kerr.UnknownMemberID.Code)
			return
		}
		delete(g.Pending, r.MemberID)
	}
	if m == nil {
		m = &Member{ID: r.MemberID}
		g.Members[m.ID] = m
		g.Order = append(g.Order, m.ID)
	}
	if m.Joined != nil {
		// A second JoinGroup of the same member while its first waits:
		// the first is superseded.
		m.Joined(JoinResult{Code: kerr.RebalanceInProgress.Code, Generation: -1, MemberID: m.ID})
	}
	m.InstanceID, m.ClientID, m.ClientHost = r.InstanceID, r.ClientID, r.ClientHost
	m.Protocols, m.Session, m.Rebalance = r.Protocols, r.Session, r.Rebalance
	m.Joined = reply
	g.ProtocolType = r.ProtocolType
	if g.State != StatePreparing {
		g.Prepare(now)
	} else {
		g.Deadline = later(g.Deadline, now.Add(r.Rebalance))
	}
	g.MaybeCompleteJoin(now)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// supports reports whether protocols shares a protocol with every member
// other than id.
func (g *Group) Supports(id string, protocols []Protocol) bool {
	for _, p := range protocols {
		all := true
		for _, m := range g.Members {
			if m.ID != id && !slices.ContainsFunc(m.Protocols, func(q Protocol) bool { return q.Name == p.Name }) {
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
func (g *Group) Prepare(now time.Time) {
	for _, m := range g.Members {
		if m.Synced != nil {
			m.Synced(SyncResult{Code: kerr.RebalanceInProgress.Code})
			m.Synced = nil
		}
	}
	g.State = StatePreparing
	var longest time.Duration
	for _, m := range g.Members {
		longest = max(longest, m.Rebalance)
	}
	g.Deadline = now.Add(longest)
}

// maybeCompleteJoin ends the join phase once every member has rejoined or
// its deadline has passed: a new generation, its protocol and leader, and
// every waiting JoinGroup answered.
func (g *Group) MaybeCompleteJoin(now time.Time) {
	if g.State != StatePreparing {
		return
	}
	waiting := 0
	for _, m := range g.Members {
		if m.Joined != nil {
			waiting++
		}
	}
	if waiting < len(g.Members) && now.Before(g.Deadline) {
		return
	}
	for id, m := range g.Members {
		if m.Joined == nil {
			g.Remove(id)
		}
	}
	g.Generation++
	g.Protocol = ""
	if len(g.Members) == 0 {
		g.State, g.Leader, g.ProtocolType = StateEmpty, "", ""
		return
	}
	g.Protocol = g.Vote()
	if _, ok := g.Members[g.Leader]; !ok {
		g.Leader = g.Order[0]
	}
	var all []JoinMember
	for _, id := range g.Order {
		m := g.Members[id]
		all = append(all, JoinMember{ID: id, InstanceID: m.InstanceID, Meta: m.Meta(g.Protocol)})
	}
	g.State = StateCompleting
	for _, id := range g.Order {
		m := g.Members[id]
		res := JoinResult{Generation: g.Generation, ProtocolType: g.ProtocolType, Protocol: g.Protocol, Leader: g.Leader, MemberID: id}
		if id == g.Leader {
			res.Members = all
		}
		m.Assignment = nil
		m.Expires = now.Add(m.Session)
		reply := m.Joined
		m.Joined = nil
		reply(res)
	}
}

// vote picks the protocol every member supports that most members list
// first among those; ties go to the leader's (or the first member's)
// preference order.
func (g *Group) Vote() string {
	votes := map[string]int{}
	var candidates []string
	first := g.Members[g.Leader]
	if first == nil {
		first = g.Members[g.Order[0]]
	}
	for _, p := range first.Protocols {
		if g.Supports("", []Protocol{p}) {
			candidates = append(candidates, p.Name)
		}
	}
	for _, m := range g.Members {
		for _, p := range m.Protocols {
			if slices.Contains(candidates, p.Name) {
				votes[p.Name]++
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

func (m *Member) Meta(protocol string) []byte {
	for _, p := range m.Protocols {
		if p.Name == protocol {
			return p.Meta
		}
	}
	return nil
}

// remove drops a member (its waiting requests answered).
func (g *Group) Remove(id string) {
	m := g.Members[id]
	if m == nil {
		return
	}
	if m.Joined != nil {
		m.Joined(JoinResult{Code: kerr.UnknownMemberID.Code, Generation: -1, MemberID: id})
	}
	if m.Synced != nil {
		m.Synced(SyncResult{Code: kerr.UnknownMemberID.Code})
	}
	delete(g.Members, id)
	g.Order = slices.DeleteFunc(g.Order, func(o string) bool { return o == id })
}

// membersChanged reacts to members gone: a new join phase for those left.
func (g *Group) MembersChanged(now time.Time) {
	switch g.State {
	case StateStable, StateCompleting:
		g.Prepare(now)
	}
	g.MaybeCompleteJoin(now)
}

// check is the member and generation check of SyncGroup and Heartbeat.
func (g *Group) Check(id string, generation int32) (*Member, int16) {
	m := g.Members[id]
	switch {
	case m == nil:
		return nil, kerr.UnknownMemberID.Code
	case generation != g.Generation:
		return nil, kerr.IllegalGeneration.Code
	}
	return m, 0
}

type Assignment struct {
	MemberID string
	Data     []byte
}

// sync answers a SyncGroup: at once in Stable, when the leader's
// assignments arrive in CompletingRebalance.
func (g *Group) Sync(now time.Time, id string, generation int32, protocolType, protocol *string, assignments []Assignment, reply func(SyncResult)) {
	m, code := g.Check(id, generation)
	switch {
	case code != 0:
		reply(SyncResult{Code: code})
		return
	case protocolType != nil && *protocolType != g.ProtocolType, protocol != nil && *protocol != g.Protocol:
		reply(SyncResult{Code: kerr.InconsistentGroupProtocol.Code})
		return
	case g.State == StatePreparing:
		reply(SyncResult{Code: kerr.RebalanceInProgress.Code})
		return
	case g.State == StateStable:
		reply(SyncResult{ProtocolType: g.ProtocolType, Protocol: g.Protocol, Assignment: m.Assignment})
		return
	}
	// CompletingRebalance.
	m.Expires = now.Add(m.Session)
	if m.Synced != nil {
		m.Synced(SyncResult{Code: kerr.RebalanceInProgress.Code})
	}
	m.Synced = reply
	if id != g.Leader {
		return
	}
	for _, a := range assignments {
		if o := g.Members[a.MemberID]; o != nil {
			o.Assignment = a.Data
		}
	}
	g.State = StateStable
	for _, oid := range g.Order {
		o := g.Members[oid]
		if o.Synced != nil {
			reply := o.Synced
			o.Synced = nil
			reply(SyncResult{ProtocolType: g.ProtocolType, Protocol: g.Protocol, Assignment: o.Assignment})
		}
	}
}

func (g *Group) Heartbeat(now time.Time, id string, generation int32) int16 {
	m, code := g.Check(id, generation)
	if code != 0 {
		return code
	}
	m.Expires = now.Add(m.Session)
	if g.State == StatePreparing {
		return kerr.RebalanceInProgress.Code
	}
	return 0
}

// leave removes members (LeaveGroup): the code of each.
func (g *Group) Leave(now time.Time, ids []string) []int16 {
	codes := make([]int16, len(ids))
	changed := false
	for i, id := range ids {
		if _, ok := g.Pending[id]; ok {
			delete(g.Pending, id)
			continue
		}
		if g.Members[id] == nil {
			codes[i] = kerr.UnknownMemberID.Code
			continue
		}
		g.Remove(id)
		changed = true
	}
	if changed {
		g.MembersChanged(now)
	}
	return codes
}

// tick expires sessions and handed-out ids and ends a join phase whose
// deadline has passed.
func (g *Group) Tick(now time.Time) {
	for id, until := range g.Pending {
		if !now.Before(until) {
			delete(g.Pending, id)
		}
	}
	changed := false
	for id, m := range g.Members {
		if m.Joined == nil && !now.Before(m.Expires) {
			g.Remove(id)
			changed = true
		}
	}
	if changed {
		g.MembersChanged(now)
		return
	}
	g.MaybeCompleteJoin(now)
}

// commitCheck is OffsetCommit's member and generation check: a commit
// with no member and generation -1 is a plain store of offsets, allowed
// while the group has no members (Kafka's "simple" groups, and tools
// that reset offsets).
func (g *Group) CommitCheck(id string, generation int32) int16 {
	if generation < 0 && id == "" && len(g.Members) == 0 {
		return 0
	}
	if g.State == StateCompleting {
		return kerr.RebalanceInProgress.Code
	}
	_, code := g.Check(id, generation)
	return code
}
