package server_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/starlog/starlog/star/auth"
)

// The profiler is served by Admin (the internal listener) only: the client
// port answers an error for every /debug/pprof path: 404 when it is Public
// (beside an internal listener), the router's bad-path error when the server
// is the only listener.
func TestPprofOnAdminListenerOnly(t *testing.T) {
	t.Parallel()
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

// With authentication on, the profiler answers the star's own host or the
// internal credential; a remote caller without it gets 403, with a
// client's access token too.
func TestPprofNeedsLoopbackOrTheInternalCredential(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	get := func(remote string, headers ...string) int {
		r := httptest.NewRequest(http.MethodGet, "/debug/pprof/cmdline", nil)
		r.RemoteAddr = remote
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		rec := httptest.NewRecorder()
		e.srv.Admin().ServeHTTP(rec, r)
		return rec.Code
	}
	cred, err := auth.InternalCredential([]byte(testKey))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		remote  string
		headers []string
		want    int
	}{
		"remote, no credential":  {"192.0.2.1:4000", nil, http.StatusForbidden},
		"remote, admin token":    {"192.0.2.1:4000", bearer(testAdmin), http.StatusForbidden},
		"remote, internal":       {"192.0.2.1:4000", []string{auth.HeaderInternal, cred}, http.StatusOK},
		"loopback v4":            {"127.0.0.1:4000", nil, http.StatusOK},
		"loopback v6":            {"[::1]:4000", nil, http.StatusOK},
		"remote, wrong internal": {"192.0.2.1:4000", []string{auth.HeaderInternal, "nope"}, http.StatusForbidden},
	} {
		if got := get(tc.remote, tc.headers...); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
}
