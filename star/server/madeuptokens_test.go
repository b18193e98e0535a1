package server_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// madeUpToken is a well-formed token no star issued: a fresh id each i.
func madeUpToken(i int) string {
	enc := base64.RawURLEncoding
	return "stl1." + enc.EncodeToString(fmt.Appendf(nil, "made-up-%d", i)) + "." + enc.EncodeToString([]byte(strings.Repeat("s", 32)))
}

// Made-up tokens cost the metastore a bounded number of reads per client:
// past TokenLookupBurst (and TokenLookupsPerSec) a check of a token this
// star has not verified answers 429 without a read, while a token it
// verified before is still served.
func TestMadeUpTokensAreBounded(t *testing.T) {
	t.Parallel()
	fm := mfaults.New(testsvc.SQLite(t), 1)
	e := starAuthed(t, "a", fm, memObjects(t), nil, auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)})
	known := e.issue(map[string]any{"id": "known", "scope": map[string]any{"ops": []string{"list-basins"}}})
	want(t, e.call("GET", "basins", nil, bearer(known)...), 200, "")

	const n = 400
	fm.ResetCounts()
	var unauthorized, throttled int
	for i := range n {
		r := e.call("GET", "basins", nil, bearer(madeUpToken(i))...)
		switch r.status {
		case 401:
			unauthorized++
		case 429:
			throttled++
			if r.header.Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After: %s", r)
			}
		default:
			t.Fatalf("made-up token %d: %s", i, r)
		}
	}
	gets := fm.Counts().Get
	// The burst, plus what the rate refills while the loop runs (it
	// runs well under 5 s here), plus slack.
	bound := int64(server.TokenLookupBurst + 5*server.TokenLookupsPerSec)
	if gets > bound || throttled == 0 {
		t.Fatalf("%d made-up tokens: %d metastore reads (bound %d), %d answered 401, %d 429", n, gets, bound, unauthorized, throttled)
	}
	t.Logf("%d made-up tokens: %d metastore reads, %d answered 401, %d 429", n, gets, unauthorized, throttled)
	want(t, e.call("GET", "basins", nil, bearer(known)...), 200, "")
}

// With a per-client rate, requests refused for their credentials count
// against the client's address: past the rate they are 429s.
func TestFailedAuthCountsAgainstTheClientRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth, func(_ *node.Config, o *server.Options) { o.ClientRate = server.ClientRate{PerSec: 0.2, Burst: 3} })
	for range 3 {
		want(t, e.call("GET", "basins", nil, bearer("not-a-token")...), 401, "")
	}
	r := e.call("GET", "basins", nil, bearer(madeUpToken(0))...)
	want(t, r, 429, "rate_limited")
	if r.header.Get("Retry-After") == "" {
		t.Fatalf("429 without Retry-After: %s", r)
	}
}
