package auth

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// FuzzParseIssueRequest: any body either fails with a 400 or 422, or
// parses into a request whose scope is valid and survives a JSON round
// trip; issuing it from the admin never panics, and a token issued from
// it can issue nothing wider than itself.
func FuzzParseIssueRequest(f *testing.F) {
	f.Add([]byte(`{"id":"a","scope":{}}`))
	f.Add([]byte(`{"id":"svc/x","expires_at":"2030-01-02T03:04:05Z","auto_prefix_streams":true,"scope":{"basins":{"prefix":"prod-"},"streams":{"prefix":"svc/"},"op_groups":{"stream":{"read":true,"write":true}},"ops":["trim"]}}`))
	f.Add([]byte(`{"id":"x","scope":{"basins":{"exact":"","prefix":""}}}`))
	now := time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseIssueRequest(body)
		if err != nil {
			if err.Status != 400 && err.Status != 422 {
				t.Fatalf("status %d", err.Status)
			}
			return
		}
		if verr := req.Scope.Validate(); verr != nil {
			t.Fatalf("parsed an invalid scope: %v", verr)
		}
		b, merr := json.Marshal(req.Scope)
		if merr != nil {
			t.Fatal(merr)
		}
		var back Scope
		if uerr := json.Unmarshal(b, &back); uerr != nil || !reflect.DeepEqual(back, req.Scope) {
			t.Fatalf("scope round trip: %s → %+v, %v (from %+v)", b, back, uerr, req.Scope)
		}
		info, ierr := AdminPrincipal().Issue(req, now)
		if ierr != nil {
			return
		}
		child := Principal{Info: info}
		if _, cerr := child.Issue(IssueRequest{ID: info.ID, Scope: FullScope()}, now); cerr == nil {
			sc := info.Scope
			for _, o := range AllOps {
				if !sc.Allows(o) {
					t.Fatalf("a token without %s issued the full scope: %+v", o, sc)
				}
			}
			if sc.Basins != All || sc.Streams != All || sc.AccessTokens != All {
				t.Fatalf("a token of scope %+v issued the full scope", sc)
			}
		}
	})
}

// FuzzParseToken: parsing never panics, and what parses has a valid id.
func FuzzParseToken(f *testing.F) {
	tok, _ := NewToken("seed")
	f.Add(tok)
	f.Add("stl1.c2VlZA.AAAA")
	f.Add("Bearer stl1..")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseToken(s)
		if err == nil && ValidateTokenID(id) != nil {
			t.Fatalf("%q parsed to the invalid id %q", s, id)
		}
		_ = Bearer(s)
	})
}
