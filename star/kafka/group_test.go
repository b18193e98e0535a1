package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// The group state machine as a pure function: a clock the test moves,
// replies recorded as they are given.

type groupRig struct {
	t     *testing.T
	g     *group
	now   time.Time
	ids   int
	joins map[string]*joinResult // by the client id that joined
	syncs map[string]*syncResult // by member id
}

func newRig(t *testing.T) *groupRig {
	r := &groupRig{t: t, now: time.Unix(1000, 0), joins: map[string]*joinResult{}, syncs: map[string]*syncResult{}}
	r.g = newGroup("g", func(client string) string { r.ids++; return fmt.Sprintf("%s-%d", client, r.ids) })
	return r
}

func (r *groupRig) join(client, memberID string, protocols ...string) {
	jr := joinReq{memberID: memberID, clientID: client, protocolType: "consumer",
		session: 10 * time.Second, rebalance: 20 * time.Second, requireID: true}
	for _, p := range protocols {
		jr.protocols = append(jr.protocols, groupProtocol{name: p, meta: []byte(client)})
	}
	delete(r.joins, client)
	r.g.join(r.now, jr, func(res joinResult) { r.joins[client] = &res })
}

// joinFully joins a new member through MEMBER_ID_REQUIRED: its id.
func (r *groupRig) joinFully(client string) string {
	r.join(client, "", "range")
	res := r.joins[client]
	if res == nil || res.code != kerr.MemberIDRequired.Code {
		r.t.Fatalf("first join of %s: %+v, want MEMBER_ID_REQUIRED", client, res)
	}
	r.join(client, res.memberID, "range")
	return res.memberID
}

func (r *groupRig) sync(id string, gen int32, assign ...string) {
	var as []assignment
	for i := 0; i+1 < len(assign); i += 2 {
		as = append(as, assignment{memberID: assign[i], data: []byte(assign[i+1])})
	}
	delete(r.syncs, id)
	r.g.sync(r.now, id, gen, nil, nil, as, func(res syncResult) { r.syncs[id] = &res })
}

func TestGroupFormsRebalancesAndExpires(t *testing.T) {
	r := newRig(t)
	a := r.joinFully("a")
	ja := r.joins["a"]
	if ja == nil || ja.code != 0 || ja.generation != 1 || ja.leader != a || len(ja.members) != 1 || r.g.state != stateCompleting {
		t.Fatalf("a alone: %+v, state %s", ja, r.g.state)
	}
	r.sync(a, 1, a, "p0,p1")
	if s := r.syncs[a]; s == nil || s.code != 0 || string(s.assignment) != "p0,p1" || r.g.state != stateStable {
		t.Fatalf("a's sync: %+v, state %s", s, r.g.state)
	}

	// b joins: a rebalance; b waits until a rejoins.
	b := r.joinFully("b")
	if r.joins["b"] != nil || r.g.state != statePreparing {
		t.Fatalf("b answered before a rejoined: %+v, state %s", r.joins["b"], r.g.state)
	}
	if code := r.g.heartbeat(r.now, a, 1); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("a's heartbeat during the join phase: %d, want REBALANCE_IN_PROGRESS", code)
	}
	if code := r.g.commitCheck(a, 1); code != 0 {
		t.Fatalf("a's commit at its generation during the join phase: %d, want 0", code)
	}
	r.join("a", a, "range")
	ja, jb := r.joins["a"], r.joins["b"]
	if ja == nil || jb == nil || ja.generation != 2 || jb.generation != 2 || ja.leader != a || len(ja.members) != 2 || len(jb.members) != 0 {
		t.Fatalf("generation 2: a %+v, b %+v", ja, jb)
	}
	// Stale generation, unknown member.
	if code := r.g.heartbeat(r.now, a, 1); code != kerr.IllegalGeneration.Code {
		t.Fatalf("heartbeat at generation 1: %d, want ILLEGAL_GENERATION", code)
	}
	if code := r.g.heartbeat(r.now, "nobody", 2); code != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat of an unknown member: %d, want UNKNOWN_MEMBER_ID", code)
	}
	if code := r.g.commitCheck(b, 2); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("commit while assignments are awaited: %d, want REBALANCE_IN_PROGRESS", code)
	}
	// b's sync waits for the leader's.
	r.sync(b, 2)
	if r.syncs[b] != nil {
		t.Fatalf("b's sync answered before the leader's: %+v", r.syncs[b])
	}
	r.sync(a, 2, a, "p0", b, "p1")
	if sa, sb := r.syncs[a], r.syncs[b]; sa == nil || sb == nil || string(sa.assignment) != "p0" || string(sb.assignment) != "p1" {
		t.Fatalf("generation 2's syncs: a %+v, b %+v", sa, sb)
	}

	// a leaves: b rejoins alone and leads.
	if codes := r.g.leave(r.now, []string{a, "nobody"}); codes[0] != 0 || codes[1] != kerr.UnknownMemberID.Code {
		t.Fatalf("leave: %v", codes)
	}
	if code := r.g.heartbeat(r.now, b, 2); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("b's heartbeat after a left: %d", code)
	}
	r.join("b", b, "range")
	if jb := r.joins["b"]; jb == nil || jb.generation != 3 || jb.leader != b || len(jb.members) != 1 {
		t.Fatalf("b alone: %+v", jb)
	}
	r.sync(b, 3, b, "p0,p1")

	// b's session runs out without heartbeats: the group is empty, and a
	// plain commit (no member, generation -1) is allowed again.
	if code := r.g.commitCheck("", -1); code != kerr.UnknownMemberID.Code {
		t.Fatalf("plain commit while b is a member: %d, want UNKNOWN_MEMBER_ID", code)
	}
	r.now = r.now.Add(9 * time.Second)
	r.g.tick(r.now)
	if r.g.members[b] == nil {
		t.Fatal("b expired before its session")
	}
	r.now = r.now.Add(2 * time.Second)
	r.g.tick(r.now)
	if len(r.g.members) != 0 || r.g.state != stateEmpty || r.g.generation != 4 || !r.g.idle() {
		t.Fatalf("after b's session: %d members, state %s, generation %d", len(r.g.members), r.g.state, r.g.generation)
	}
	if code := r.g.commitCheck("", -1); code != 0 {
		t.Fatalf("plain commit of an empty group: %d", code)
	}
}

// A member that heartbeats but does not rejoin within the rebalance
// timeout is dropped, and the others go on without it.
func TestGroupJoinPhaseEndsAtTheRebalanceTimeout(t *testing.T) {
	r := newRig(t)
	a := r.joinFully("a")
	r.sync(a, 1, a, "x")
	b := r.joinFully("b")
	for range 3 {
		r.now = r.now.Add(5 * time.Second)
		r.g.tick(r.now)
		if code := r.g.heartbeat(r.now, a, 1); code != kerr.RebalanceInProgress.Code {
			t.Fatalf("a's heartbeat in the join phase: %d", code)
		}
	}
	r.now = r.now.Add(4 * time.Second)
	r.g.tick(r.now)
	if r.joins["b"] != nil {
		t.Fatal("the join phase ended before its deadline (20 s)")
	}
	r.now = r.now.Add(time.Second)
	r.g.tick(r.now)
	jb := r.joins["b"]
	if jb == nil || jb.code != 0 || jb.generation != 2 || jb.leader != b || len(jb.members) != 1 || r.g.members[a] != nil {
		t.Fatalf("at the deadline: b %+v, a still a member: %v", jb, r.g.members[a] != nil)
	}
	if code := r.g.heartbeat(r.now, a, 1); code != kerr.UnknownMemberID.Code {
		t.Fatalf("a after it was dropped: %d, want UNKNOWN_MEMBER_ID", code)
	}
}

func TestGroupRefusesWhatTheProtocolRefuses(t *testing.T) {
	r := newRig(t)
	r.join("a", "unknown-id", "range")
	if res := r.joins["a"]; res == nil || res.code != kerr.UnknownMemberID.Code {
		t.Fatalf("join with an id never handed out: %+v", res)
	}
	a := r.joinFully("a")
	r.join("b", "", "roundrobin")
	if res := r.joins["b"]; res == nil || res.code != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("join with no protocol in common: %+v", res)
	}
	jr := joinReq{clientID: "c", protocolType: "consumer", protocols: []groupProtocol{{name: "range"}}, session: time.Second}
	var got *joinResult
	r.g.join(r.now, jr, func(res joinResult) { got = &res })
	if got == nil || got.code != kerr.InvalidSessionTimeout.Code {
		t.Fatalf("a 1 s session: %+v", got)
	}
	r.sync("nobody", 1)
	if s := r.syncs["nobody"]; s == nil || s.code != kerr.UnknownMemberID.Code {
		t.Fatalf("sync of an unknown member: %+v", s)
	}
	r.sync(a, 7)
	if s := r.syncs[a]; s == nil || s.code != kerr.IllegalGeneration.Code {
		t.Fatalf("sync at a wrong generation: %+v", s)
	}
}

// A star holds at most MaxGroups groups: a join that would make one more
// is refused (the handler answers COORDINATOR_NOT_AVAILABLE); requests
// that add no member still run, on a group forgotten at once.
func TestCoordinatorBoundsItsGroups(t *testing.T) {
	c := newCoordinator()
	for i := range MaxGroups {
		g := newGroup(fmt.Sprint(i), newMemberID)
		g.pending["m"] = time.Now().Add(time.Minute)
		c.groups[g.id] = g
	}
	ran := false
	if c.do("one-more", true, func(*group, time.Time) { ran = true }) || ran {
		t.Fatalf("a join made group %d past the bound of %d", len(c.groups), MaxGroups)
	}
	var code int16
	if !c.do("one-more", false, func(g *group, now time.Time) { code = g.heartbeat(now, "m", 1) }) || code != kerr.UnknownMemberID.Code {
		t.Fatalf("a heartbeat of a group not held: code %d", code)
	}
	if len(c.groups) != MaxGroups {
		t.Fatalf("%d groups held after a heartbeat of an unknown one, want %d", len(c.groups), MaxGroups)
	}
	delete(c.groups, "0")
	if !c.do("one-more", true, func(*group, time.Time) {}) {
		t.Fatal("a join refused below the bound")
	}
}
