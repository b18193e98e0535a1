package durable

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/node"
)

// A lease that moved while a request ran is 503 with the not-leader
// header (so a forwarding star resolves the lease again and retries),
// though a NotLeaderError also unwraps to an API error.
func TestWriteErrNotLeader(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	(&Handler{}).writeErr(w, &node.NotLeaderError{StreamID: "id", Leader: meta.LeaseHolder{Star: "a"}})
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Starlog-Not-Leader") != "a" || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("NotLeaderError answered %d, Starlog-Not-Leader %q, Retry-After %q", w.Code, w.Header().Get("Starlog-Not-Leader"), w.Header().Get("Retry-After"))
	}
}
