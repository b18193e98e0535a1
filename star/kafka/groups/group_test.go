package groups

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
	g     *Group
	now   time.Time
	ids   int
	joins map[string]*JoinResult // by the client id that joined
	syncs map[string]*SyncResult // by member id
}

func newRig(t *testing.T) *groupRig {
	r := &groupRig{t: t, now: time.Unix(1000, 0), joins: map[string]*JoinResult{}, syncs: map[string]*SyncResult{}}
	r.g = New("g", func(client string) string { r.ids++; return fmt.Sprintf("%s-%d", client, r.ids) })
	return r
}

func (r *groupRig) Join(client, memberID string, protocols ...string) {
	jr := JoinReq{MemberID: memberID, ClientID: client, ProtocolType: "consumer",
		Session: 10 * time.Second, Rebalance: 20 * time.Second, RequireID: true}
	for _, p := range protocols {
		jr.Protocols = append(jr.Protocols, Protocol{Name: p, Meta: []byte(client)})
	}
	delete(r.joins, client)
	r.g.Join(r.now, jr, func(res JoinResult) { r.joins[client] = &res })
}

// joinFully joins a new member through MEMBER_ID_REQUIRED: its id.
func (r *groupRig) joinFully(client string) string {
	r.Join(client, "", "range")
	res := r.joins[client]
	if res == nil || res.Code != kerr.MemberIDRequired.Code {
		r.t.Fatalf("first join of %s: %+v, want MEMBER_ID_REQUIRED", client, res)
	}
	r.Join(client, res.MemberID, "range")
	return res.MemberID
}

func (r *groupRig) Sync(id string, gen int32, assign ...string) {
	var as []Assignment
	for i := 0; i+1 < len(assign); i += 2 {
		as = append(as, Assignment{MemberID: assign[i], Data: []byte(assign[i+1])})
	}
	delete(r.syncs, id)
	r.g.Sync(r.now, id, gen, nil, nil, as, func(res SyncResult) { r.syncs[id] = &res })
}

func TestGroupFormsRebalancesAndExpires(t *testing.T) {
	r := newRig(t)
	a := r.joinFully("a")
	ja := r.joins["a"]
	if ja == nil || ja.Code != 0 || ja.Generation != 1 || ja.Leader != a || len(ja.Members) != 1 || r.g.State != StateCompleting {
		t.Fatalf("a alone: %+v, state %s", ja, r.g.State)
	}
	r.Sync(a, 1, a, "p0,p1")
	if s := r.syncs[a]; s == nil || s.Code != 0 || string(s.Assignment) != "p0,p1" || r.g.State != StateStable {
		t.Fatalf("a's sync: %+v, state %s", s, r.g.State)
	}

	// b joins: a rebalance; b waits until a rejoins.
	b := r.joinFully("b")
	if r.joins["b"] != nil || r.g.State != StatePreparing {
		t.Fatalf("b answered before a rejoined: %+v, state %s", r.joins["b"], r.g.State)
	}
	if code := r.g.Heartbeat(r.now, a, 1); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("a's heartbeat during the join phase: %d, want REBALANCE_IN_PROGRESS", code)
	}
	if code := r.g.CommitCheck(a, 1); code != 0 {
		t.Fatalf("a's commit at its generation during the join phase: %d, want 0", code)
	}
	r.Join("a", a, "range")
	ja, jb := r.joins["a"], r.joins["b"]
	if ja == nil || jb == nil || ja.Generation != 2 || jb.Generation != 2 || ja.Leader != a || len(ja.Members) != 2 || len(jb.Members) != 0 {
		t.Fatalf("generation 2: a %+v, b %+v", ja, jb)
	}
	// Stale generation, unknown member.
	if code := r.g.Heartbeat(r.now, a, 1); code != kerr.IllegalGeneration.Code {
		t.Fatalf("heartbeat at generation 1: %d, want ILLEGAL_GENERATION", code)
	}
	if code := r.g.Heartbeat(r.now, "nobody", 2); code != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat of an unknown member: %d, want UNKNOWN_MEMBER_ID", code)
	}
	if code := r.g.CommitCheck(b, 2); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("commit while assignments are awaited: %d, want REBALANCE_IN_PROGRESS", code)
	}
	// b's sync waits for the leader's.
	r.Sync(b, 2)
	if r.syncs[b] != nil {
		t.Fatalf("b's sync answered before the leader's: %+v", r.syncs[b])
	}
	r.Sync(a, 2, a, "p0", b, "p1")
	if sa, sb := r.syncs[a], r.syncs[b]; sa == nil || sb == nil || string(sa.Assignment) != "p0" || string(sb.Assignment) != "p1" {
		t.Fatalf("generation 2's syncs: a %+v, b %+v", sa, sb)
	}

	// a leaves: b rejoins alone and leads.
	if codes := r.g.Leave(r.now, []string{a, "nobody"}); codes[0] != 0 || codes[1] != kerr.UnknownMemberID.Code {
		t.Fatalf("leave: %v", codes)
	}
	if code := r.g.Heartbeat(r.now, b, 2); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("b's heartbeat after a left: %d", code)
	}
	r.Join("b", b, "range")
	if jb := r.joins["b"]; jb == nil || jb.Generation != 3 || jb.Leader != b || len(jb.Members) != 1 {
		t.Fatalf("b alone: %+v", jb)
	}
	r.Sync(b, 3, b, "p0,p1")

	// b's session runs out without heartbeats: the group is empty, and a
	// plain commit (no member, generation -1) is allowed again.
	if code := r.g.CommitCheck("", -1); code != kerr.UnknownMemberID.Code {
		t.Fatalf("plain commit while b is a member: %d, want UNKNOWN_MEMBER_ID", code)
	}
	r.now = r.now.Add(9 * time.Second)
	r.g.Tick(r.now)
	if r.g.Members[b] == nil {
		t.Fatal("b expired before its session")
	}
	r.now = r.now.Add(2 * time.Second)
	r.g.Tick(r.now)
	if len(r.g.Members) != 0 || r.g.State != StateEmpty || r.g.Generation != 4 || !r.g.Idle() {
		t.Fatalf("after b's Session: %d members, state %s, generation %d", len(r.g.Members), r.g.State, r.g.Generation)
	}
	if code := r.g.CommitCheck("", -1); code != 0 {
		t.Fatalf("plain commit of an empty group: %d", code)
	}
}

// A member that heartbeats but does not rejoin within the rebalance
// timeout is dropped, and the others go on without it.
func TestGroupJoinPhaseEndsAtTheRebalanceTimeout(t *testing.T) {
	r := newRig(t)
	a := r.joinFully("a")
	r.Sync(a, 1, a, "x")
	b := r.joinFully("b")
	for range 3 {
		r.now = r.now.Add(5 * time.Second)
		r.g.Tick(r.now)
		if code := r.g.Heartbeat(r.now, a, 1); code != kerr.RebalanceInProgress.Code {
			t.Fatalf("a's heartbeat in the join phase: %d", code)
		}
	}
	r.now = r.now.Add(4 * time.Second)
	r.g.Tick(r.now)
	if r.joins["b"] != nil {
		t.Fatal("the join phase ended before its deadline (20 s)")
	}
	r.now = r.now.Add(time.Second)
	r.g.Tick(r.now)
	jb := r.joins["b"]
	if jb == nil || jb.Code != 0 || jb.Generation != 2 || jb.Leader != b || len(jb.Members) != 1 || r.g.Members[a] != nil {
		t.Fatalf("at the Deadline: b %+v, a still a member: %v", jb, r.g.Members[a] != nil)
	}
	if code := r.g.Heartbeat(r.now, a, 1); code != kerr.UnknownMemberID.Code {
		t.Fatalf("a after it was dropped: %d, want UNKNOWN_MEMBER_ID", code)
	}
}

func TestGroupRefusesWhatTheProtocolRefuses(t *testing.T) {
	r := newRig(t)
	r.Join("a", "unknown-id", "range")
	if res := r.joins["a"]; res == nil || res.Code != kerr.UnknownMemberID.Code {
		t.Fatalf("join with an id never handed out: %+v", res)
	}
	a := r.joinFully("a")
	r.Join("b", "", "roundrobin")
	if res := r.joins["b"]; res == nil || res.Code != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("join with no protocol in common: %+v", res)
	}
	jr := JoinReq{ClientID: "c", ProtocolType: "consumer", Protocols: []Protocol{{Name: "range"}}, Session: time.Second}
	var got *JoinResult
	r.g.Join(r.now, jr, func(res JoinResult) { got = &res })
	if got == nil || got.Code != kerr.InvalidSessionTimeout.Code {
		t.Fatalf("a 1 s Session: %+v", got)
	}
	r.Sync("nobody", 1)
	if s := r.syncs["nobody"]; s == nil || s.Code != kerr.UnknownMemberID.Code {
		t.Fatalf("sync of an unknown member: %+v", s)
	}
	r.Sync(a, 7)
	if s := r.syncs[a]; s == nil || s.Code != kerr.IllegalGeneration.Code {
		t.Fatalf("sync at a wrong Generation: %+v", s)
	}
}
