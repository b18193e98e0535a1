package subs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/durable/durabletest"
	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/durable/subs"
)

// TestBusySubscriptionWakesWhenTheWakeEndsElsewhere: an append that finds
// its subscription's wake in flight marks it busy; when that wake ends on
// another star (its row written there, not through this star's cache),
// this star reads the row again within subFresh and wakes the worker for
// the append at once, not at the next audit (an hour here).
func TestBusySubscriptionWakesWhenTheWakeEndsElsewhere(t *testing.T) {
	ms := testsvc.SQLite(t)
	h, err := durable.New(durable.Config{Node: durabletest.OpenNode(t, ms), AllowLoopbackWebhooks: true, SubscriptionAudit: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	star := serve(t, h)
	m := h.Subscriptions()
	hook := durabletest.NewWebhook(t)
	if code, b := star.call(t, "PUT", "/q", "", "text/plain", ""); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	if code, b := star.call(t, "PUT", "/__ds/subscriptions/busy", "", "application/json",
		`{"type":"webhook","streams":["q"],"webhook":{"url":"`+hook.URL+`"},"lease_ttl_ms":600000}`); code != http.StatusCreated {
		t.Fatalf("subscribe: %d %s", code, b)
	}
	if code, b := star.call(t, "POST", "/q", "", "text/plain", "one"); code != http.StatusNoContent {
		t.Fatalf("append: %d %s", code, b)
	}
	w1 := receive(t, hook)

	// More data while the wake is in flight: busy, no second wake.
	if code, b := star.call(t, "POST", "/q", "", "text/plain", "two"); code != http.StatusNoContent {
		t.Fatalf("append: %d %s", code, b)
	}
	k := subs.SubKey(h.Basin(), "", "busy")
	poll.Until(t, 5*time.Second, "the append during the wake marks the subscription busy", func() bool {
		return m.Busy(h.Basin(), "", "busy")
	})
	hook.Quiet(t, 300*time.Millisecond)

	// Another star's callback ends the wake, acking what it saw: the row
	// is written behind this star's cache.
	it, err := ms.Get(context.Background(), k.PK, k.SK)
	if err != nil {
		t.Fatal(err)
	}
	wakeID, val, err := subs.EndWake(it.Val)
	if err != nil || wakeID != w1.Wake.WakeID {
		t.Fatalf("row %s (%v), want the wake %s in flight", it.Val, err, w1.Wake.WakeID)
	}
	if _, err := ms.Put(context.Background(), k.PK, k.SK, val, meta.IfVer(it.Ver)); err != nil {
		t.Fatal(err)
	}
	w2 := receive(t, hook)
	if w2.Wake.Generation != w1.Wake.Generation+1 || len(w2.Wake.Streams) != 1 || w2.Wake.Streams[0].TailOffset != offsets.Format(2) {
		t.Fatalf("the wake for the second append: %+v after %+v", w2.Wake, w1.Wake)
	}
	if got := m.Passes("busy", "written"); got != 1 {
		t.Fatalf("busy passes written: %v, want 1", got)
	}
}

// TestPatternBackfill: a subscription links the existing streams its
// pattern matches when it is created, a pattern that starts with a
// wildcard and a "**" that matches its literal prefix itself included.
func TestPatternBackfill(t *testing.T) {
	h, err := durable.New(durable.Config{Node: durabletest.OpenNode(t, testsvc.SQLite(t)), AllowLoopbackWebhooks: true, SubscriptionAudit: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	star := serve(t, h)
	for _, s := range []string{"events", "events/a", "eventsx", "x/log", "log", "other"} {
		if code, b := star.call(t, "PUT", "/"+s, "", "text/plain", ""); code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", s, code, b)
		}
	}
	for pat, want := range map[string][]string{
		"**/log":    {"log", "x/log"},
		"events/**": {"events", "events/a"},
		"*":         {"events", "eventsx", "log", "other"},
	} {
		id := fmt.Sprintf("s%d", len(pat))
		code, b := star.call(t, "PUT", "/__ds/subscriptions/"+id, "", "application/json",
			`{"type":"webhook","pattern":"`+pat+`","webhook":{"url":"http://127.0.0.1:9/"}}`)
		if code != http.StatusCreated {
			t.Fatalf("subscribe %q: %d %s", pat, code, b)
		}
		var v struct{ Streams []struct{ Path string } }
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range v.Streams {
			got = append(got, s.Path)
		}
		if !slices.Equal(got, want) {
			t.Errorf("pattern %q linked %v at creation, want %v", pat, got, want)
		}
	}
}
