package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/kafka"
)

// groupMember is a kgo consumer in a group, polling in the background:
// what it is assigned and every record it has seen.
type groupMember struct {
	c        *kgo.Client
	mu       sync.Mutex
	assigned map[int32]bool
	seen     map[int32][]int64 // partition → offsets, in order
	stop     context.CancelFunc
	done     chan struct{}
}

// joinGroup starts a consumer of topic in group on the broker at addr
// (kgo's own group code: JoinGroup, SyncGroup, heartbeats every 100 ms
// so a rebalance is seen at once; what it read is committed on a revoke,
// on close, or when the test asks, not on a timer).
func joinGroup(t *testing.T, addr, group, topic string, opts ...kgo.Opt) *groupMember {
	t.Helper()
	m := &groupMember{assigned: map[int32]bool{}, seen: map[int32][]int64{}, done: make(chan struct{})}
	base := []kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(time.Hour),
		kgo.HeartbeatInterval(100 * time.Millisecond), kgo.SessionTimeout(10 * time.Second),
		kgo.RetryTimeout(5 * time.Second), kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range a[topic] {
				m.assigned[p] = true
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, c *kgo.Client, r map[string][]int32) {
			m.mu.Lock()
			for _, p := range r[topic] {
				delete(m.assigned, p)
			}
			m.mu.Unlock()
			_ = c.CommitMarkedOffsets(ctx)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range l[topic] {
				delete(m.assigned, p)
			}
		}),
		kgo.AutoCommitMarks(),
	}
	c, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	m.c = c
	ctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			fs := c.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				m.mu.Lock()
				m.seen[r.Partition] = append(m.seen[r.Partition], r.Offset)
				m.mu.Unlock()
				c.MarkCommitRecords(r)
			})
		}
	}()
	t.Cleanup(m.close)
	return m
}

// close stops polling and leaves the group (kgo's Close sends
// LeaveGroup after committing what was marked).
func (m *groupMember) close() {
	m.stop()
	<-m.done
	m.c.Close()
}

func (m *groupMember) partitions() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int32
	for p := range m.assigned {
		out = append(out, p)
	}
	return out
}

// next is the offset after the last record seen of a partition.
func (m *groupMember) next(p int32) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.seen[p]
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1] + 1
}

// produceTo appends n records to each of partitions 0 … parts-1.
func produceTo(t *testing.T, c *kgo.Client, topic string, parts int32, n int) {
	t.Helper()
	var rs []*kgo.Record
	for p := range parts {
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprintf("p%d-%d", p, i))})
		}
	}
	if err := c.ProduceSync(ctxT(t), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// committedOffsets reads a group's committed offsets of topic with an
// OffsetFetch: partition → offset.
func committedOffsets(t *testing.T, c *kgo.Client, group, topic string, parts int32) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range parts {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctxT(t), c)
	if err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	out := map[int32]int64{}
	for _, t2 := range resp.Topics {
		for _, p := range t2.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				t.Fatalf("OffsetFetch %s/%d: %v", t2.Topic, p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	return out
}

// Two consumers of a group split a topic's partitions; when one leaves
// the other gets them all; what they commit is where the group resumes.
func TestConsumerGroupSplitsRebalancesAndResumes(t *testing.T) {
	s := startStar(t, true)
	adm := s.admin(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createTopic(t, adm, "orders", 4)
	produceTo(t, adm, "orders", 4, 10)

	a := joinGroup(t, s.kafka, "billing", "orders")
	b := joinGroup(t, s.kafka, "billing", "orders")
	poll.Until(t, 20*time.Second, "a and b split the 4 partitions", func() bool {
		pa, pb := a.partitions(), b.partitions()
		return len(pa) == 2 && len(pb) == 2
	})
	t.Logf("split: a %v, b %v", a.partitions(), b.partitions())

	a.close() // commits what it marked, then LeaveGroup
	poll.Until(t, 20*time.Second, "b has all 4 partitions after a left", func() bool { return len(b.partitions()) == 4 })
	// b resumes a's partitions from a's commits: between them every
	// record is read, and what a committed b does not read again.
	poll.Until(t, 20*time.Second, "the group committed 10 on every partition", func() bool {
		if err := b.c.CommitMarkedOffsets(ctxT(t)); err != nil {
			t.Fatalf("b's commit: %v", err)
		}
		got := committedOffsets(t, adm, "billing", "orders", 4)
		for p := range int32(4) {
			if got[p] != 10 {
				return false
			}
		}
		return true
	})
	for p := range int32(4) {
		if a.next(p) == 10 && b.next(p) != 0 {
			t.Fatalf("partition %d: a read and committed it to 10, yet b read it again (from %v)", p, b.seen[p])
		}
		if a.next(p) != 10 && b.next(p) != 10 {
			t.Fatalf("partition %d: read to %d by a, %d by b; want 10", p, a.next(p), b.next(p))
		}
	}
	b.close()

	// A new member resumes from the commits: it sees only what came
	// after them.
	produceTo(t, adm, "orders", 4, 3)
	c := joinGroup(t, s.kafka, "billing", "orders")
	poll.Until(t, 20*time.Second, "c read the 3 new records of each partition", func() bool {
		for p := range int32(4) {
			if c.next(p) != 13 {
				return false
			}
		}
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, offs := range c.seen {
		if offs[0] != 10 {
			t.Fatalf("c began partition %d at offset %d, want the commit, 10 (saw %v)", p, offs[0], offs)
		}
	}
}

// The admin requests: DescribeGroups shows the members, ListGroups the
// group, DeleteGroups refuses a group with members and deletes one
// without, its offsets with it.
func TestGroupAdminRequests(t *testing.T) {
	s := startStar(t, true)
	adm := s.admin(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createTopic(t, adm, "audit", 2)
	produceTo(t, adm, "audit", 2, 2)
	m := joinGroup(t, s.kafka, "auditors", "audit")
	poll.Until(t, 20*time.Second, "m has both partitions", func() bool { return len(m.partitions()) == 2 })

	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{"auditors", "nobody"}
	dresp, err := dg.RequestWith(ctxT(t), adm)
	if err != nil {
		t.Fatal(err)
	}
	if g := dresp.Groups[0]; g.ErrorCode != 0 || g.State != "Stable" || g.ProtocolType != "consumer" || len(g.Members) != 1 || len(g.Members[0].MemberAssignment) == 0 {
		t.Fatalf("DescribeGroups auditors: %+v", g)
	}
	if g := dresp.Groups[1]; g.ErrorCode != 0 || g.State != "Dead" {
		t.Fatalf("DescribeGroups of no group: %+v", g)
	}
	lresp, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctxT(t), adm)
	if err != nil || lresp.ErrorCode != 0 || len(lresp.Groups) != 1 || lresp.Groups[0].Group != "auditors" {
		t.Fatalf("ListGroups: %v %+v", err, lresp)
	}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"auditors"}
	if r, err := del.RequestWith(ctxT(t), adm); err != nil || r.Groups[0].ErrorCode != kerr.NonEmptyGroup.Code {
		t.Fatalf("DeleteGroups of a group with a member: %v %+v", err, r)
	}
	poll.Until(t, 20*time.Second, "m read both partitions", func() bool { return m.next(0) == 2 && m.next(1) == 2 })
	m.close()
	if got := committedOffsets(t, adm, "auditors", "audit", 2); got[0] != 2 || got[1] != 2 {
		t.Fatalf("committed on close: %v", got)
	}
	if r, err := del.RequestWith(ctxT(t), adm); err != nil || r.Groups[0].ErrorCode != 0 {
		t.Fatalf("DeleteGroups: %v %+v", err, r)
	}
	if got := committedOffsets(t, adm, "auditors", "audit", 2); got[0] != -1 || got[1] != -1 {
		t.Fatalf("offsets after DeleteGroups: %v, want none (-1)", got)
	}
	if r, err := del.RequestWith(ctxT(t), adm); err != nil || r.Groups[0].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("DeleteGroups again: %v %+v", err, r)
	}
}

// A token's scope governs groups as it governs topics: a group G is the
// stream G/#group, so a token scoped to the prefix "shop" joins and
// commits in group "shop-billing" on topic "shop-orders", and is refused
// group "billing" (GROUP_AUTHORIZATION_FAILED) and a commit of a topic
// out of its scope (TOPIC_AUTHORIZATION_FAILED), before any effect.
func TestGroupScopes(t *testing.T) {
	s := startStar(t, false)
	adm := s.admin(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createTopic(t, adm, "shop-orders", 1)
	createTopic(t, adm, "other", 1)
	produceTo(t, adm, "shop-orders", 1, 2)
	tok := s.issue(`{"id":"kafka-shop","scope":{"basins":{"exact":"` + kafka.DefaultBasin + `"},"streams":{"prefix":"shop"},"op_groups":{"stream":{"read":true}}}}`)

	m := joinGroup(t, s.kafka, "shop-billing", "shop-orders", kgo.SASL(plain.Auth{User: "u", Pass: tok}.AsMechanism()))
	poll.Until(t, 20*time.Second, "the scoped member read its partition", func() bool { return m.next(0) == 2 })
	if err := m.c.CommitMarkedOffsets(ctxT(t)); err != nil {
		t.Fatalf("commit in scope: %v", err)
	}
	if got := committedOffsets(t, adm, "shop-billing", "shop-orders", 1); got[0] != 2 {
		t.Fatalf("committed in scope: %v", got)
	}

	c := s.client(tok)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = "billing"
	if r, err := fc.RequestWith(ctxT(t), c); err != nil || r.ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("FindCoordinator of a group out of scope: %v %+v", err, r)
	}
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Group, jg.ProtocolType, jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis = "billing", "consumer", 10000, 10000
	jg.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	// kgo turns a JoinGroup's error code into the request's error.
	if r, err := jg.RequestWith(ctxT(t), c); !errors.Is(err, kerr.GroupAuthorizationFailed) && (err != nil || r.ErrorCode != kerr.GroupAuthorizationFailed.Code) {
		t.Fatalf("JoinGroup out of scope: %v %+v", err, r)
	}
	if err := commitPlain(t, c, "shop-tools", "other", 1); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("a commit of a topic out of scope: %v", err)
	}
	if err := commitPlain(t, c, "billing", "shop-orders", 1); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("a commit in a group out of scope: %v", err)
	}
	if got := committedOffsets(t, adm, "billing", "shop-orders", 1); got[0] != -1 {
		t.Fatalf("a refused commit stored %v", got)
	}
	lg, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctxT(t), c)
	if err != nil || lg.ErrorCode != 0 || len(lg.Groups) != 1 || lg.Groups[0].Group != "shop-billing" {
		t.Fatalf("the scoped token's ListGroups: %v %+v", err, lg)
	}
}
