package durable

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable/durabletest"
)

// testStar is a real node on ms and in-memory buckets behind the
// handler. Every request is the admin's (the handler's own authorization
// is not what these test).
type testStar struct {
	h   *Handler
	url string
}

func startTestStar(t *testing.T, ms meta.Store) *testStar {
	t.Helper()
	h, err := New(Config{Node: durabletest.OpenNode(t, ms)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), auth.AdminPrincipal())))
	}))
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	return &testStar{h: h, url: srv.URL + DefaultPrefix}
}
