package kafka_test

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/kafka"
)

// A group on a cluster, its members connected to stars that do not
// coordinate it (docs/kafka.md, "Many stars"): star a coordinates the
// group (its first request landed there), one member reaches star b and
// the other star c, as a load balancer would spread them. Each star
// answers FindCoordinator with itself and forwards the group's requests
// to a. The two split the partitions; one leaves, the other takes them
// all and resumes from the commits. DescribeGroups through c and
// ListGroups through b show the membership a holds. Authenticated, so the
// forwarded requests carry the client's token.
func TestGroupAcrossStars(t *testing.T) {
	ms := testsvc.SQLite(t)
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string) *star { return startStarWith(t, starOpts{meta: ms, objs: objs, id: id, cluster: true}) }
	a, b, c := mk("a"), mk("b"), mk("c")
	adm := a.admin(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createTopic(t, adm, "orders", 4)
	produceTo(t, adm, "orders", 4, 5)

	// The group's first request lands on a, which then leads its stream.
	if got := committedOffsets(t, adm, "billing", "orders", 4); got[0] != -1 {
		t.Fatalf("offsets of a new group: %v", got)
	}
	if nl := b.n.LeaderOf(ctxT(t), kafka.DefaultBasin, "billing/#group"); nl == nil || nl.Leader.Star != "a" {
		t.Fatalf("star b sees the coordinator of billing as %v, want a", nl)
	}

	sasl := kgo.SASL(plain.Auth{User: "test", Pass: testAdmin}.AsMechanism())
	m1 := joinGroup(t, b.kafka, "billing", "orders", sasl)
	m2 := joinGroup(t, c.kafka, "billing", "orders", sasl)
	poll.Until(t, 30*time.Second, "the members through b and c split the 4 partitions", func() bool {
		return len(m1.partitions()) == 2 && len(m2.partitions()) == 2
	})
	t.Logf("split: through b %v, through c %v", m1.partitions(), m2.partitions())

	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{"billing"}
	dresp, err := dg.RequestWith(ctxT(t), c.admin())
	if err != nil {
		t.Fatal(err)
	}
	if g := dresp.Groups[0]; g.ErrorCode != 0 || g.State != "Stable" || len(g.Members) != 2 {
		t.Fatalf("DescribeGroups billing through c: code %d state %q, %d members; want Stable with 2", g.ErrorCode, g.State, len(g.Members))
	}
	lresp, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctxT(t), b.admin())
	if err != nil || lresp.ErrorCode != 0 {
		t.Fatalf("ListGroups through b: %v %+v", err, lresp)
	}
	if i := slices.IndexFunc(lresp.Groups, func(g kmsg.ListGroupsResponseGroup) bool { return g.Group == "billing" }); i < 0 || lresp.Groups[i].GroupState != "Stable" {
		t.Fatalf("ListGroups through b: %+v, want billing Stable (held by a)", lresp.Groups)
	}

	poll.Until(t, 20*time.Second, "the members read their partitions to 5", func() bool {
		for p := range int32(4) {
			if m1.next(p) != 5 && m2.next(p) != 5 {
				return false
			}
		}
		return true
	})
	left := m1.partitions()
	m1.close() // commits what it read, then LeaveGroup, through b
	poll.Until(t, 30*time.Second, "the member through c has all 4 partitions after the other left", func() bool { return len(m2.partitions()) == 4 })
	produceTo(t, adm, "orders", 4, 3)
	poll.Until(t, 20*time.Second, "the member through c read every partition to 8", func() bool {
		for p := range int32(4) {
			if m2.next(p) != 8 {
				return false
			}
		}
		return true
	})
	// Between the two every record was read once: each partition moved
	// on (a join, the leave) from what the member before had committed.
	for p := range int32(4) {
		m1.mu.Lock()
		m2.mu.Lock()
		all := append(slices.Clone(m1.seen[p]), m2.seen[p]...)
		m2.mu.Unlock()
		m1.mu.Unlock()
		slices.Sort(all)
		if want := []int64{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(all, want) {
			t.Fatalf("partition %d read %v between the two members (the leaver had %v), want %v (each once)", p, all, left, want)
		}
	}
	if err := m2.c.CommitMarkedOffsets(ctxT(t)); err != nil {
		t.Fatalf("commit through c: %v", err)
	}
	if got := committedOffsets(t, b.admin(), "billing", "orders", 4); got[0] != 8 || got[1] != 8 || got[2] != 8 || got[3] != 8 {
		t.Fatalf("committed offsets through b: %v, want 8 on every partition", got)
	}
}
