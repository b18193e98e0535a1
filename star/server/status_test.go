package server_test

import (
	"encoding/json"
	"testing"

	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/server"
)

// star status's endpoint: any star answers for the cluster, with every
// registered star's row and each live star's own figures, asked over the
// internal path; a stopped star is listed from its row alone.
func TestClusterStatus(t *testing.T) {
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	opts := server.Options{Auth: auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}}
	a := starServing(t, "a", ms, objs, nil, opts)
	b := starServing(t, "b", ms, objs, nil, opts)
	c := starServing(t, "c", ms, objs, nil, opts)
	cred, err := auth.InternalCredential([]byte(testKey))
	if err != nil {
		t.Fatal(err)
	}
	want(t, a.call("POST", "basins", jsonBody(map[string]any{"basin": "status-basin", "config": map[string]any{"create_stream_on_append": true}}), bearer(testAdmin)...), 201, "")
	for _, s := range []string{"s1", "s2", "s3"} {
		want(t, a.appendJSON("status-basin", s, textRecords("x", 2), bearer(testAdmin)...), 200, "")
	}
	c.stop(t)

	r := b.call("GET", server.StatusPath, nil, auth.HeaderInternal, cred)
	want(t, r, 200, "")
	var st server.ClusterStatus
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatal(err)
	}
	if st.Via != "b" || len(st.Stars) != 3 {
		t.Fatalf("status via %s lists %d stars: %s", st.Via, len(st.Stars), r.body)
	}
	byID := map[string]server.StarStatus{}
	for _, s := range st.Stars {
		byID[s.ID] = s
	}
	for _, id := range []string{"a", "b"} {
		s := byID[id]
		if s.State != "live" || s.Local == nil || s.Local.Star != id || s.Error != "" {
			t.Fatalf("star %s: %+v (local %+v)", id, s, s.Local)
		}
		if len(s.Local.Chains) != 2 || s.Local.Chains[0].Class != "standard" || s.Local.Chains[1].Class != "express" {
			t.Fatalf("star %s chains: %+v", id, s.Local.Chains)
		}
	}
	if got := byID["a"].Local.StreamsLed; got != 3 {
		t.Fatalf("star a leads %d streams, want 3", got)
	}
	if s := byID["c"]; s.State == "live" || s.Local != nil {
		t.Fatalf("stopped star c: %+v", s)
	}

	// One star's own figures, and only with the internal credential.
	want(t, a.call("GET", server.StatusPath+"?scope=star", nil, bearer(testAdmin)...), 403, auth.CodePermissionDenied)
	r = a.call("GET", server.StatusPath+"?scope=star", nil, auth.HeaderInternal, cred)
	want(t, r, 200, "")
	var ls server.LocalStatus
	if err := json.Unmarshal(r.body, &ls); err != nil || ls.Star != "a" {
		t.Fatalf("local status: %v %s", err, r.body)
	}
}
