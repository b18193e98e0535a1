package server

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzParsePath: routing never panics, and a routed stream or basin name
// is the percent-decoding of exactly one path segment.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{
		"/v1/basins", "/v1/basins/my-basin", "/v1/streams", "/v1/streams/a%2Fb",
		"/v1/streams/a%2Fb/records", "/v1/streams/x/records/tail", "/health", "/metrics",
		"/v1/streams//records", "/v1/streams/%zz", "/v1/", "/", "", "/v1/streams/a/b/records",
		"/v1/starlog/drain", "/v1/starlog/streams/a%2Fb/handoff", "/v1/starlog/streams/x/y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rt, err := parsePath(p)
		if err != nil {
			if err.Status != 400 || err.Code != "bad_path" {
				t.Fatalf("%q: error %d %s", p, err.Status, err.Code)
			}
			return
		}
		switch rt.kind {
		case routeBasin, routeStream, routeRecords, routeTail:
			segs := strings.Split(strings.TrimPrefix(p, "/v1/"), "/")
			dec, derr := url.PathUnescape(segs[1])
			if derr != nil || dec != rt.name {
				t.Fatalf("%q: routed name %q, segment decodes to %q (%v)", p, rt.name, dec, derr)
			}
		case routeHandoff:
			segs := strings.Split(strings.TrimPrefix(p, "/v1/starlog/"), "/")
			dec, derr := url.PathUnescape(segs[1])
			if derr != nil || dec != rt.name || len(segs) != 3 || segs[2] != "handoff" {
				t.Fatalf("%q: routed handoff of %q, segment decodes to %q (%v)", p, rt.name, dec, derr)
			}
		case routeUnknown:
			t.Fatalf("%q: unknown route without an error", p)
		}
	})
}
