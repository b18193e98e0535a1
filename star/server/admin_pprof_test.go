package server_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The profiler is served by Admin (the internal listener) only: the client
// port answers an error for every /debug/pprof path: 404 when it is Public
// (beside an internal listener), the router's bad-path error when the server
// is the only listener.
func TestPprofOnAdminListenerOnly(t *testing.T) {
	e := newEnv(t)
	paths := []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/heap"}
	for _, path := range paths {
		for name, h := range map[string]http.Handler{"public": e.srv.Public(), "single listener": e.srv} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			if rec.Code < 400 || name == "public" && rec.Code != http.StatusNotFound {
				t.Errorf("%s %s: %d %.100s, want an error (404 on public)", name, path, rec.Code, rec.Body)
			}
		}
		rec := httptest.NewRecorder()
		e.srv.Admin().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("admin %s: %d %s", path, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	e.srv.Admin().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/goroutine?debug=1", nil))
	if !strings.Contains(rec.Body.String(), "goroutine") {
		t.Fatalf("admin goroutine profile: %.200s", rec.Body)
	}
	// The rest of the API is still there on the admin listener.
	rec = httptest.NewRecorder()
	e.srv.Admin().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("admin /health: %d", rec.Code)
	}
}
