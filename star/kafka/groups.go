package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/kafka/groups"
	"github.com/starlog/starlog/star/node"
)

// The coordinator of consumer groups (docs/kafka.md, "Consumer groups").
// A group's coordinator is the star that leads its stream, <id>/#group
// in the topics' basin: the lease every star already claims for a stream
// decides it, with no lease of the face's own. The stream holds no
// records; a topic's partition is never named so (a partition's stream
// ends in /<digits>). The group id comes first so that a token scoped to
// a stream prefix governs the groups named with it, as it does topics. Membership lives here, in memory: a new coordinator starts
// with none, and members rejoin on its UNKNOWN_MEMBER_ID or
// NOT_COORDINATOR as Kafka clients do. Committed offsets live in the
// metastore (grouprow.go).

const (
	// groupTick is how often sessions and join-phase deadlines are
	// checked: their granularity.
	groupTick = 200 * time.Millisecond
	// MaxGroups bounds the groups a star holds members of (each holds at
	// most groups.MaxGroupMembers): a JoinGroup that would make one more is
	// COORDINATOR_NOT_AVAILABLE, which clients retry.
	MaxGroups = 10_000
	// groupStreamSuffix names a group's stream after its id.
	groupStreamSuffix = "/#group"
)

func groupStream(group string) string { return group + groupStreamSuffix }

// coordinator holds the groups this star has members of.
type coordinator struct {
	mu     sync.Mutex
	groups map[string]*groups.Group
	now    func() time.Time
}

func newCoordinator() *coordinator {
	return &coordinator{groups: map[string]*groups.Group{}, now: time.Now}
}

// do runs fn on the group (made when missing) under the coordinator's
// lock, and forgets the group after if it has become idle. Only a join
// adds members, so only a join (joining) may make a group past MaxGroups:
// false, fn not run.
func (c *coordinator) do(id string, joining bool, fn func(g *groups.Group, now time.Time)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[id]
	if g == nil {
		if joining && len(c.groups) >= MaxGroups {
			return false
		}
		g = groups.New(id, newMemberID)
		c.groups[id] = g
	}
	fn(g, c.now())
	if g.Idle() {
		delete(c.groups, id)
	}
	return true
}

// peek runs fn on the group if this star holds it.
func (c *coordinator) peek(id string, fn func(g *groups.Group)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[id]
	if g == nil {
		return false
	}
	fn(g)
	return true
}

// run expires sessions and ends join phases until ctx ends.
func (c *coordinator) run(ctx context.Context) {
	t := time.NewTicker(groupTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.tick()
		}
	}
}

func (c *coordinator) tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for id, g := range c.groups {
		g.Tick(now)
		if g.Idle() {
			delete(c.groups, id)
		}
	}
}

// newMemberID is Kafka's form: the client id, a dash, a random id.
func newMemberID(clientID string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	if len(clientID) > 128 {
		clientID = clientID[:128]
	}
	return clientID + "-" + hex.EncodeToString(b[:])
}

// groupAccess is what a request does to a group, as Kafka's ACLs name it.
type groupAccess int

const (
	groupRead     groupAccess = iota // join, sync, heartbeat, leave, commit, fetch offsets
	groupDescribe                    // FindCoordinator, DescribeGroups, ListGroups
	groupDelete                      // DeleteGroups
)

// mayGroup reports whether the connection's token allows access to a
// group: the S2 operation on the group's stream (docs/kafka.md's table).
func (cs *conn) mayGroup(a groupAccess, group string) bool {
	stream := groupStream(group)
	switch a {
	case groupRead:
		return cs.authorize(auth.Read, stream) == nil
	case groupDescribe:
		return cs.authorize(auth.Read, stream) == nil || cs.authorize(auth.GetStreamConfig, stream) == nil
	case groupDelete:
		return cs.authorize(auth.DeleteStream, stream) == nil
	}
	return false
}

func validGroupID(group string) bool {
	return group != "" && len(group) <= MaxGroupIDLen && api.ValidateStreamName(groupStream(group)) == nil
}

// leadGroup makes sure this star coordinates group: it leads the group's
// stream, which is created on first use. A *node.NotLeaderError says
// another star does.
func (s *Server) leadGroup(ctx context.Context, group string) error {
	stream := groupStream(group)
	_, err := s.star.CheckTail(ctx, s.basin, stream, nil)
	if _, missing := isStatus(err, 404); !missing {
		return err
	}
	if err := s.ensureBasin(ctx); err != nil {
		return err
	}
	_, err = s.star.CreateStream(ctx, s.basin, api.CreateStreamRequest{Stream: stream}, "")
	if _, exists := asCode(err, api.CodeResourceAlreadyExists); err != nil && !exists {
		return err
	}
	_, err = s.star.CheckTail(ctx, s.basin, stream, nil)
	return err
}

// groupGate checks a group request before it has any effect: the id, the
// token's access, and that this star coordinates the group. 0 lets it
// through.
func (cs *conn) groupGate(ctx context.Context, a groupAccess, group string) int16 {
	switch {
	case !validGroupID(group):
		return kerr.InvalidGroupID.Code
	case !cs.mayGroup(a, group):
		return kerr.GroupAuthorizationFailed.Code
	}
	return cs.s.coordinatorCode(ctx, group, kerr.NotCoordinator.Code)
}

// coordinatorCode is 0 when this star coordinates group, else notUs when
// another star does, or COORDINATOR_NOT_AVAILABLE (retryable) when it
// cannot be told.
func (s *Server) coordinatorCode(ctx context.Context, group string, notUs int16) int16 {
	err := s.leadGroup(ctx, group)
	var nl *node.NotLeaderError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &nl):
		return notUs
	}
	s.log.Warn("kafka: cannot coordinate group", "group", group, "err", err)
	return kerr.CoordinatorNotAvailable.Code
}

// groupErrCode maps a failure of the offsets row to a code clients retry.
func groupErrCode(err error) int16 {
	var me *metaError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errRowTooLarge):
		return kerr.InvalidCommitOffsetSize.Code
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return kerr.RequestTimedOut.Code
	case errors.As(err, &me):
		return kerr.CoordinatorNotAvailable.Code
	}
	return kerr.UnknownServerError.Code
}
