package subs

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/durable/subs/signing"
)

func TestWebhookURLPolicy(t *testing.T) {
	strict, dev := webhookPolicy{}, webhookPolicy{AllowLoopback: true}
	for _, tc := range []struct {
		url         string
		strict, dev bool
	}{
		{"https://hooks.example.com/x", true, true},
		{"https://93.184.216.34/x", true, true},
		{"https://[2606:4700::1111]/x", true, true},
		{"http://hooks.example.com/x", false, false}, // http only to loopback
		{"http://127.0.0.1:8080/webhook", false, true},
		{"http://127.0.0.9/webhook", false, true},
		{"http://localhost:9/x", false, true},
		{"http://[::1]:9/x", false, true},
		{"https://localhost/x", false, true},
		{"http://10.0.0.1/hook", false, false}, // the suite's unsafe URL
		{"https://10.0.0.1/hook", false, false},
		{"https://172.16.3.4/", false, false},
		{"https://192.168.1.1/", false, false},
		{"https://169.254.169.254/latest/meta-data", false, false}, // link-local (cloud metadata)
		{"https://100.64.0.1/", false, false},                      // shared (CGNAT)
		{"https://0.0.0.0/", false, false},
		{"https://[fd00::1]/", false, false},
		{"https://[fe80::1]/", false, false},
		{"https://[::ffff:10.0.0.1]/", false, false},
		{"https://224.0.0.1/", false, false},
		// Loopback and private addresses spelled as the C resolvers
		// read them, not as netip does: not a DNS name, not an address.
		{"https://127.1/x", false, false},
		{"http://127.1/x", false, false},
		{"https://0x7f000001/x", false, false},
		{"https://2130706433/x", false, false},
		{"https://0177.0.0.1/x", false, false},
		{"https://10.1/x", false, false},
		{"https://hooks.example.123/x", false, false},
		{"https://hooks.0x10/x", false, false},
		// IPv6 ranges that carry an IPv4 address inside: NAT64 (well
		// known and local-use), 6to4, the deprecated IPv4-compatible
		// form and Teredo.
		{"https://[64:ff9b::a00:1]/", false, false},      // NAT64 of 10.0.0.1
		{"https://[64:ff9b::7f00:1]/", false, false},     // NAT64 of 127.0.0.1
		{"https://[64:ff9b:1::a00:1]/", false, false},    // local-use NAT64
		{"https://[2002:a00:1::1]/", false, false},       // 6to4 of 10.0.0.1
		{"https://[2002:c0a8:101::1]/", false, false},    // 6to4 of 192.168.1.1
		{"https://[::a00:1]/", false, false},             // IPv4-compatible
		{"https://[2001:0:4136:e378::1]/", false, false}, // Teredo
		{"https://[64:ff9b::5db8:d822]/", true, true},    // NAT64 of 93.184.216.34
		{"https://[2002:5db8:d822::1]/", true, true},     // 6to4 of 93.184.216.34
		{"ftp://hooks.example.com/", false, false},
		{"https://user:pw@hooks.example.com/", false, false},
		{"/relative", false, false},
		{"not a url", false, false},
	} {
		if got := strict.check(tc.url) == nil; got != tc.strict {
			t.Errorf("strict %s: allowed %v, want %v", tc.url, got, tc.strict)
		}
		if got := dev.check(tc.url) == nil; got != tc.dev {
			t.Errorf("loopback allowed %s: allowed %v, want %v", tc.url, got, tc.dev)
		}
	}
	// The dial-time check: a public name resolving to a private address.
	for _, ip := range []string{"10.1.2.3", "127.0.0.1", "169.254.1.1", "::1", "fc00::1",
		"64:ff9b::a00:1", "64:ff9b::7f00:1", "2002:a00:1::1", "2002:7f00:1::1", "::7f00:1", "2001:0:4136:e378::1"} {
		if strict.allowedIP(netip.MustParseAddr(ip)) {
			t.Errorf("dial to %s allowed", ip)
		}
	}
	if !dev.allowedIP(netip.MustParseAddr("127.0.0.1")) || dev.allowedIP(netip.MustParseAddr("10.1.2.3")) {
		t.Error("loopback policy: want 127.0.0.1 only")
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pat, path string
		want      bool
	}{
		{"events/*", "events/a", true},
		{"events/*", "events/a/b", false},
		{"events/*", "events", false},
		{"events/**", "events", true},
		{"events/**", "events/a/b", true},
		{"**/log", "a/b/log", true},
		{"**/log", "log", true},
		{"a/*/c", "a/b/c", true},
		{"a/*/c", "a/b/d", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	} {
		if got := globMatch(tc.pat, tc.path); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.pat, tc.path, got)
		}
	}
	// globPrefix starts every name the pattern matches: the range a
	// backfill lists.
	for pat, want := range map[string]string{
		"events/*/x": "events/",
		"events/**":  "events", // matches "events" itself
		"a/b/**/c":   "a/b",
		"**":         "",
		"**/log":     "",
		"*/json":     "",
		"exact/name": "exact/name",
	} {
		if p := globPrefix(pat); p != want {
			t.Errorf("globPrefix(%q) = %q, want %q", pat, p, want)
		}
	}
}

func TestSubConfigHash(t *testing.T) {
	a, err := parseSubConfig([]byte(`{"type":"webhook","pattern":"/events/*/","streams":["b","a","a"],"webhook":{"url":"https://h.example/x"},"lease_ttl_ms":1000}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseSubConfig([]byte(`{"lease_ttl_ms":1000,"webhook":{"url":"https://h.example/x"},"streams":["a","b"],"pattern":"events/*","type":"webhook"}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.hash() != b.hash() {
		t.Fatal("normalized configs hash differently")
	}
	c, _ := parseSubConfig([]byte(`{"lease_ttl_ms":1000,"webhook":{"url":"https://h.example/x"},"streams":["a","b"],"pattern":"events/*","type":"webhook","description":"d"}`))
	if c.hash() == a.hash() {
		t.Fatal("the description is not in the hash")
	}
	for _, bad := range []string{
		`{"type":"webhook","pattern":"e/*"}`,                                        // no url
		`{"type":"pull-wake","pattern":"e/*"}`,                                      // no wake stream
		`{"type":"webhook","webhook":{"url":"https://h.example/"}}`,                 // no pattern or streams
		`{"type":"x","pattern":"e/*"}`,                                              // type
		`{"type":"pull-wake","pattern":"e/*","wake_stream":"w","lease_ttl_ms":999}`, // lease
		`{"type":"pull-wake","pattern":"e/*","wake_stream":"w","lease_ttl_ms":600001}`,
		`{"type":"pull-wake","pattern":"e/*","wake_stream":"w","lease_ttl_ms":1.5}`,
		`{"type":"pull-wake","streams":["__ds/x"],"wake_stream":"w"}`, // reserved
		`[]`,
	} {
		if _, err := parseSubConfig([]byte(bad)); err == nil || err.Code != codeInvalidRequest {
			t.Errorf("%s: %v, want INVALID_REQUEST", bad, err)
		}
	}
}

func testTails(at map[string]uint64) tails {
	t := tails{at: at, present: map[string]bool{}}
	for p := range at {
		t.present[p] = true
	}
	return t
}

// The fence: a callback counts only for the current generation and wake.
func TestSubFencing(t *testing.T) {
	now := time.Unix(1000, 0)
	s := subRow{ID: "s", Incarnation: "i1", Config: subConfig{Type: subWebhook, LeaseTTLms: 1000}}
	s.addLink("events/a", false, 0)
	tl := testTails(map[string]uint64{"events/a": 3})
	w, changed := s.step(now, "w_1", tl)
	if w == nil || !changed || w.Generation != 1 || s.WakeID != "w_1" || s.Snapshot["events/a"] != 3 {
		t.Fatalf("step: %+v %v %+v", w, changed, s)
	}
	// While in flight, no second wake.
	if w2, _ := s.step(now.Add(500*time.Millisecond), "w_x", tl); w2 != nil {
		t.Fatal("a second wake while one is in flight")
	}
	tok := signing.WakeToken{Incarnation: "i1", Generation: 1, WakeID: "w_1"}
	if err := s.checkWake(tok, 1, "w_1"); err != nil {
		t.Fatalf("current wake fenced: %v", err)
	}
	for name, tc := range map[string]struct {
		tok  signing.WakeToken
		gen  uint64
		wake string
		code string
	}{
		"stale generation":  {tok, 0, "w_1", codeFenced},
		"other wake id":     {tok, 1, "w_0", codeFenced},
		"token of gen 0":    {signing.WakeToken{Incarnation: "i1", Generation: 0, WakeID: "w_1"}, 1, "w_1", codeFenced},
		"token of old wake": {signing.WakeToken{Incarnation: "i1", Generation: 1, WakeID: "w_0"}, 1, "w_1", codeFenced},
		"re-created sub":    {signing.WakeToken{Incarnation: "i0", Generation: 1, WakeID: "w_1"}, 1, "w_1", codeTokenInvalid},
	} {
		if err := s.checkWake(tc.tok, tc.gen, tc.wake); err == nil || err.Code != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
	// Acks: past the tail, behind the cursor, unknown streams, -1: none applies.
	for _, bad := range [][]ackReq{
		{{Stream: "events/a", Offset: offsets.Format(4)}},
		{{Stream: "events/b", Offset: offsets.Format(1)}},
		{{Stream: "events/a", Offset: "-1"}},
		{{Stream: "events/a", Offset: offsets.Format(2)}, {Stream: "events/a", Offset: offsets.Format(9)}},
	} {
		if err := s.applyAcks(bad, tl); err == nil || err.Code != codeInvalidOffset {
			t.Errorf("acks %+v: %v", bad, err)
		}
		if s.link("events/a").Acked != 0 {
			t.Fatalf("a refused ack moved the cursor")
		}
	}
	if err := s.applyAcks([]ackReq{{Stream: "events/a", Offset: offsets.Format(3)}}, tl); err != nil {
		t.Fatal(err)
	}
	if next := s.done(now, "w_2", tl); next != nil {
		t.Fatal("a next wake with nothing pending")
	}
	// The same callback again: the wake is over.
	if err := s.checkWake(tok, 1, "w_1"); err == nil || err.Code != codeFenced {
		t.Fatalf("replayed callback: %v, want FENCED", err)
	}
	// More data: the next wake is generation 2; the old token stays fenced.
	tl = testTails(map[string]uint64{"events/a": 5})
	w, _ = s.step(now, "w_2", tl)
	if w == nil || w.Generation != 2 {
		t.Fatalf("next wake %+v", w)
	}
	if err := s.checkWake(tok, 1, "w_1"); err == nil || err.Code != codeFenced {
		t.Fatalf("old token on a new wake: %v", err)
	}
	// The lease runs out: the wake is withdrawn and issued again.
	w, _ = s.step(now.Add(time.Second), "w_3", tl)
	if w == nil || w.Generation != 3 || s.WakeID != "w_3" {
		t.Fatalf("after the lease: %+v %+v", w, s)
	}
	// {"done": true}: the snapshot is acked.
	s.ackSnapshot()
	if s.link("events/a").Acked != 5 {
		t.Fatalf("ackSnapshot: acked %d", s.link("events/a").Acked)
	}
}

func TestPullWakeClaim(t *testing.T) {
	now := time.Unix(1000, 0)
	s := subRow{ID: "p", Incarnation: "i", Config: subConfig{Type: subPullWake, WakeStream: "wake/pool", LeaseTTLms: 1000}}
	s.addLink("events/a", false, 0)
	idle := testTails(map[string]uint64{"events/a": 0})
	if err := s.claim(now, "w1", "w_1", idle); err == nil || err.Code != codeNoPending {
		t.Fatalf("claim with nothing pending: %v", err)
	}
	tl := testTails(map[string]uint64{"events/a": 2})
	w, _ := s.step(now, "w_1", tl)
	if w == nil || !s.LeaseUntil.IsZero() {
		t.Fatalf("a pull wake waits unleased: %+v", s)
	}
	if err := s.claim(now, "worker-1", "w_x", tl); err != nil || s.WakeID != "w_1" || s.Holder != "worker-1" {
		t.Fatalf("claim: %v %+v", err, s)
	}
	err := s.claim(now, "worker-2", "w_x", tl)
	if err == nil || err.Code != codeClaimed || err.Holder != "worker-1" || err.Generation != 1 {
		t.Fatalf("second claim: %+v", err)
	}
	// After the lease, another worker may claim (a new wake).
	if err := s.claim(now.Add(time.Second), "worker-2", "w_2", tl); err != nil || s.Holder != "worker-2" || s.Generation != 2 {
		t.Fatalf("claim after the lease: %v %+v", err, s)
	}
}

func TestRetryBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 6: 32 * time.Second, 7: 60 * time.Second, 100: 60 * time.Second} {
		if got := retryBackoff(n, 0.5); got != want {
			t.Errorf("retryBackoff(%d) = %v, want %v", n, got, want)
		}
	}
	if lo, hi := retryBackoff(7, 0), retryBackoff(7, 0.999999); lo != 48*time.Second || hi < 71*time.Second || hi > 72*time.Second {
		t.Errorf("jitter bounds %v %v", lo, hi)
	}
	// A failed delivery withdraws the wake and holds the next back.
	now := time.Unix(1000, 0)
	s := subRow{Config: subConfig{Type: subWebhook, LeaseTTLms: 30000}}
	s.addLink("a", false, 0)
	tl := testTails(map[string]uint64{"a": 1})
	s.step(now, "w_1", tl)
	s.deliveryFailed(now, 0.5)
	if s.inFlight() || !s.Failed || s.Retries != 1 {
		t.Fatalf("after a failure: %+v", s)
	}
	if w, _ := s.step(now.Add(999*time.Millisecond), "w_2", tl); w != nil {
		t.Fatal("woken before the backoff")
	}
	if w, _ := s.step(now.Add(time.Second), "w_2", tl); w == nil || w.Generation != 2 {
		t.Fatal("not woken after the backoff")
	}
}

func TestSubLinks(t *testing.T) {
	s := subRow{Config: subConfig{Pattern: "events/*"}}
	s.addLink("events/a", false, 1)
	s.addLink("events/a", true, 9) // explicit too; keeps its cursor
	s.addLink("manual/b", true, 0)
	if l := s.link("events/a"); l == nil || !l.Explicit || !l.Glob || l.Acked != 1 || l.linkType() != "explicit" {
		t.Fatalf("link %+v", l)
	}
	s.removeExplicit("events/a") // the glob link stays
	if l := s.link("events/a"); l == nil || l.Explicit || l.linkType() != "glob" {
		t.Fatalf("after removing the explicit link: %+v", l)
	}
	s.removeExplicit("manual/b")
	if s.link("manual/b") != nil {
		t.Fatal("explicit-only link kept")
	}
	s.addLink("manual/c", true, 0)
	// A deleted stream drops its glob-only links, not explicit ones.
	if !s.dropGone(tails{present: map[string]bool{}}) || s.link("events/a") != nil || s.link("manual/c") == nil {
		t.Fatalf("dropGone: %+v", s.Links)
	}
	// A pull-wake subscription never links its own wake stream.
	p := subRow{Config: subConfig{Type: subPullWake, Pattern: "**", WakeStream: "wake/pool"}}
	if p.globs("wake/pool") || !p.globs("events/a") {
		t.Fatal("globs and the wake stream")
	}
}

// lease_ttl_ms takes 1,000 to 600,000 and nothing else (INVALID_REQUEST,
// 400): −1, 2^31, 2^53, 2^63−1, 2^64−1, fractions and exponents.
func TestLeaseTTLNumbers(t *testing.T) {
	for _, v := range []string{"-1", "0", "999", "600001", "2147483648", "9007199254740993", "9223372036854775807",
		"18446744073709551615", "1e3", "1000.5"} {
		body := `{"type":"pull-wake","streams":["a"],"wake_stream":"w","lease_ttl_ms":` + v + `}`
		if c, err := parseSubConfig([]byte(body)); err == nil || err.Status != http.StatusBadRequest {
			t.Errorf("lease_ttl_ms %s: %+v %v, want 400", v, c, err)
		}
	}
	for _, v := range []int64{1000, 30000, 600000} {
		body := fmt.Sprintf(`{"type":"pull-wake","streams":["a"],"wake_stream":"w","lease_ttl_ms":%d}`, v)
		c, err := parseSubConfig([]byte(body))
		if err != nil || c.leaseTTL() != time.Duration(v)*time.Millisecond {
			t.Errorf("lease_ttl_ms %d: %v %v", v, c.leaseTTL(), err)
		}
	}
}

// A retired key verifies what it signed for a lease, a delivery and a
// reread after it stopped signing (signing.KeyRetain's promise).
func TestKeyRetainCoversAWake(t *testing.T) {
	if signing.KeyRetain < maxLeaseTTL+webhookTimeout+signing.KeyReload {
		t.Errorf("retain %v is shorter than a lease, a delivery and a reread", signing.KeyRetain)
	}
}
