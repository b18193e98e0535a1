package kafka

import (
	"math"
	"testing"

	"github.com/starlog/starlog/star/kafka/groups"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A JoinGroup's wait comes from the client's int32 milliseconds: at their
// extremes it stays within [0, groups.MaxRebalanceTimeout].
func TestGroupWaitOfClientExtremes(t *testing.T) {
	for _, ms := range []int32{math.MinInt32, -1, 0, 1, 6000, math.MaxInt32} {
		for _, session := range []int32{math.MinInt32, 0, 6000, math.MaxInt32} {
			req := kmsg.NewPtrJoinGroupRequest()
			req.RebalanceTimeoutMillis, req.SessionTimeoutMillis = ms, session
			if w := groupWaitOf(req); w < 0 || w > groups.MaxRebalanceTimeout {
				t.Errorf("rebalance %d ms, session %d ms: wait %v, want within [0, %v]", ms, session, w, groups.MaxRebalanceTimeout)
			}
		}
	}
	if w := groupWaitOf(kmsg.NewPtrJoinGroupRequest()); w != 0 {
		t.Errorf("zero timeouts: wait %v", w)
	}
	if w := groupWaitOf(kmsg.NewPtrSyncGroupRequest()); w != groups.MaxRebalanceTimeout {
		t.Errorf("SyncGroup: wait %v", w)
	}
}
