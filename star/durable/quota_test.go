package durable

import (
	"net/http"
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/testsvc"
)

// A basin's quotas hold on the Durable Streams face: an append past the
// append quota and a create past the stream quota are 403 with the
// reason, nothing appended or created.
func TestQuotasOnTheDurableFace(t *testing.T) {
	t.Parallel()
	s := startTestStar(t, testsvc.SQLite(t))
	text := map[string]string{"Content-Type": "text/plain"}
	if code, body := ttlCall(t, http.MethodPut, s.url+"/q/one", text, "first"); code != http.StatusCreated {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if _, err := s.h.n.ReconfigureBasin(t.Context(), DefaultBasin, api.BasinReconfiguration{Quotas: api.SetTo(api.BasinQuotasReconfiguration{
		AppendBytesPerSec: api.SetTo[uint64](0), Streams: api.SetTo[uint64](1),
	})}); err != nil {
		t.Fatal(err)
	}
	code, body := ttlCall(t, http.MethodPost, s.url+"/q/one", text, "more")
	if code != http.StatusForbidden || !strings.Contains(body, "append quota is exhausted") {
		t.Fatalf("append past the quota: %d %q, want 403 with the reason", code, body)
	}
	code, body = ttlCall(t, http.MethodPut, s.url+"/q/two", text, "")
	if code != http.StatusForbidden || !strings.Contains(body, "stream quota is exhausted") {
		t.Fatalf("create past the quota: %d %q, want 403 with the reason", code, body)
	}
	if code, _ := ttlCall(t, http.MethodHead, s.url+"/q/two", nil, ""); code != http.StatusNotFound {
		t.Fatalf("the refused create left a stream: HEAD %d", code)
	}
	if code, body := ttlCall(t, http.MethodGet, s.url+"/q/one?offset=-1", nil, ""); code != http.StatusOK || body != "first" {
		t.Fatalf("read back %d %q, want only the first append", code, body)
	}
}
