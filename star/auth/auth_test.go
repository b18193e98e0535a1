package auth

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Every operation is in exactly one group, and a group permission grants
// exactly its operations.
func TestGroupsCoverEveryOp(t *testing.T) {
	if len(groupOf) != len(AllOps) {
		t.Fatalf("%d operations grouped, %d operations", len(groupOf), len(AllOps))
	}
	for _, g := range []Group{GroupAccount, GroupBasin, GroupStream} {
		for _, write := range []bool{false, true} {
			var s Scope
			rw := ReadWrite{Read: !write, Write: write}
			switch g {
			case GroupAccount:
				s.OpGroups.Account = rw
			case GroupBasin:
				s.OpGroups.Basin = rw
			case GroupStream:
				s.OpGroups.Stream = rw
			}
			for _, o := range AllOps {
				og, ow := GroupOf(o)
				if got, want := s.Allows(o), og == g && ow == write; got != want {
					t.Errorf("group %d write=%v allows %s: %v, want %v", g, write, o, got, want)
				}
			}
		}
	}
	for _, o := range AllOps {
		if !(Scope{Ops: []Op{o}}).Allows(o) || (Scope{}).Allows(o) {
			t.Errorf("explicit op %s", o)
		}
	}
}

var names = []string{"", "a", "ab", "abc", "b", "in/", "in/x", "in/x/y", "inx", "tenant-1/", "tenant-1/events"}

func sets() []ResourceSet {
	out := []ResourceSet{None, All}
	for _, n := range names {
		if n != "" {
			out = append(out, Exact(n))
		}
		out = append(out, PrefixSet(n))
	}
	return out
}

// Within is sound: a set within another has no name outside it (checked
// on names and their extensions).
func TestWithinIsSound(t *testing.T) {
	probe := slices.Clone(names)
	for _, n := range names {
		probe = append(probe, n+"zz", n+"/q")
	}
	for _, c := range sets() {
		for _, p := range sets() {
			if !c.Within(p) {
				continue
			}
			for _, n := range probe {
				if c.Contains(n) && !p.Contains(n) {
					t.Errorf("%+v within %+v, but %q is in the first only", c, p, n)
				}
			}
		}
		if !c.Within(c) || !c.Within(All) || !None.Within(c) {
			t.Errorf("%+v: reflexive, within all, none within it", c)
		}
	}
	if None.Contains("") || Exact("a").Contains("") || !All.Contains("") {
		t.Error("the empty name")
	}
}

// Narrow enumerates exactly the names of s that start with want.
func TestNarrow(t *testing.T) {
	probe := slices.Clone(names)
	for _, n := range names {
		probe = append(probe, n+"zz")
	}
	for _, s := range sets() {
		for _, want := range names {
			list, ok := s.Narrow(want)
			for _, n := range probe {
				in := s.Contains(n) && strings.HasPrefix(n, want)
				if in && (!ok || !strings.HasPrefix(n, list)) {
					t.Errorf("%+v narrowed by %q to (%q, %v) loses %q", s, want, list, ok, n)
				}
			}
		}
	}
}

func TestAuthorize(t *testing.T) {
	p := Principal{Info: Info{ID: "t", Scope: Scope{Basins: Exact("basin-one"), Streams: PrefixSet("in/"), AccessTokens: PrefixSet("kid/"),
		OpGroups: OpGroups{Stream: ReadWrite{Read: true}}, Ops: []Op{IssueAccessToken}}}}
	for _, c := range []struct {
		req Request
		ok  bool
	}{
		{Request{Op: Read, Basin: "basin-one", Stream: "in/a"}, true},
		{Request{Op: Read, Basin: "basin-two", Stream: "in/a"}, false},
		{Request{Op: Read, Basin: "basin-one", Stream: "out"}, false},
		{Request{Op: Append, Basin: "basin-one", Stream: "in/a"}, false},
		{Request{Op: ListStreams, Basin: "basin-one"}, true},
		{Request{Op: ListStreams, Basin: "basin-two"}, false},
		{Request{Op: IssueAccessToken, TokenID: "kid/1"}, true},
		{Request{Op: IssueAccessToken, TokenID: "other"}, false},
		{Request{Op: RevokeAccessToken, TokenID: "kid/1"}, false},
		{Request{Op: ListBasins}, false},
	} {
		err := p.Authorize(c.req)
		if (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok=%v", c.req, err, c.ok)
		}
		if err != nil && (err.Status != http.StatusForbidden || err.Code != CodePermissionDenied) {
			t.Errorf("%+v: %d %s", c.req, err.Status, err.Code)
		}
	}
	if FromContext(t.Context()).Scope.Allows(Read) {
		t.Error("a context without a principal allows something")
	}
}

func TestAutoPrefix(t *testing.T) {
	p := Principal{Info: Info{AutoPrefixStreams: true, Scope: Scope{Streams: PrefixSet("t1/")}}}
	if p.StreamName("a") != "t1/a" || p.ClientStream("t1/a") != "a" || p.ClientStream("x") != "x" {
		t.Error("auto prefix")
	}
	if p.ClientMessage(`stream "t1/a" not found`, "t1/a") != `stream "a" not found` {
		t.Error("message")
	}
	off := Principal{Info: Info{Scope: Scope{Streams: PrefixSet("t1/")}}}
	if off.StreamName("a") != "a" {
		t.Error("prefix without auto_prefix_streams")
	}
}

func TestIssueRequestRoundTrip(t *testing.T) {
	body := `{"id":"svc/x","expires_at":"2030-01-02T03:04:05Z","auto_prefix_streams":true,"scope":{"basins":{"prefix":"prod-"},"streams":{"prefix":"svc/"},"access_tokens":{"exact":""},"op_groups":{"stream":{"read":true}},"ops":["append","append"]}}`
	req, err := ParseIssueRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if !req.Scope.AccessTokens.IsNone() || len(req.Scope.Ops) != 1 || !req.Scope.Basins.Prefix {
		t.Fatalf("%+v", req)
	}
	info, aerr := AdminPrincipal().Issue(req, time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC))
	if aerr != nil {
		t.Fatal(aerr)
	}
	b, _ := json.Marshal(info)
	var back Info
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, info) {
		t.Fatalf("round trip: %s → %+v (%v)", b, back, err)
	}
	if strings.Contains(string(b), "access_tokens") {
		t.Errorf("an empty set is listed: %s", b)
	}
}

func TestTokens(t *testing.T) {
	tok, err := NewToken("svc/écrit")
	if err != nil {
		t.Fatal(err)
	}
	if id, err := ParseToken(tok); err != nil || id != "svc/écrit" {
		t.Fatalf("%q → %q, %v", tok, id, err)
	}
	for _, bad := range []string{"", "stl1.", "stl1.c3Zj", "stl1.c3Zj.short", tok + ".x", strings.Replace(tok, "stl1", "stl2", 1), "stl1..AAAA"} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if Bearer("Bearer abc") != "abc" || Bearer("bearer abc") != "abc" || Bearer("Basic abc") != "" || Bearer("abc") != "" {
		t.Error("bearer")
	}
}

func TestKeys(t *testing.T) {
	key := []byte(strings.Repeat("k", MinInternalKeyBytes))
	k, err := Derive(Config{AdminToken: "admin-admin-admin", InternalKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if !k.IsAdmin("admin-admin-admin") || k.IsAdmin("admin-admin-admiN") || k.IsAdmin("") {
		t.Error("admin")
	}
	cred, _ := InternalCredential(key)
	if !k.IsInternal(cred) || k.IsInternal("") || k.IsInternal(cred+"0") || k.Internal() != cred {
		t.Error("internal credential")
	}
	// Distinct labels: the credential is not the hash key, nor a token hash.
	if string(k.hashKey) == cred || strings.Contains(cred, string(k.Hash(""))) {
		t.Error("derived keys collide")
	}
	other, _ := Derive(Config{AdminToken: "admin-admin-admin", InternalKey: []byte(strings.Repeat("j", MinInternalKeyBytes))})
	if string(other.Hash("t")) == string(k.Hash("t")) {
		t.Error("hashes do not depend on the key")
	}
	if _, err := Derive(Config{}); err == nil {
		t.Error("an empty config derived keys: only Open() may run without secrets")
	}
	if o, _ := Derive(Open()); !o.IsOpen() || !o.IsInternal("") || o.IsAdmin("") {
		t.Error("open")
	}
}
