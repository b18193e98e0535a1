package subs

import (
	"testing"
	"time"

	"github.com/starlog/starlog/star/auth"
)

// TestPatternReach: the names a pattern under a root may link, as a
// token's stream scope is checked against them.
func TestPatternReach(t *testing.T) {
	for _, tc := range []struct {
		root, pattern, want string
		exact               bool
	}{
		{"", "room/**", "room/", false},
		{"", "room/*/log", "room/", false},
		{"", "**", "", false},
		{"", "*/json", "", false},
		{"room/", "**", "room/", false},
		{"room/", "a/b/*", "room/a/b/", false},
		{"", "victim/json", "victim/json", true},
		{"room/", "a", "room/a", true},
	} {
		name, exact := patternReach(tc.root, tc.pattern)
		if name != tc.want || exact != tc.exact {
			t.Errorf("patternReach(%q, %q) = %q, %v; want %q, %v", tc.root, tc.pattern, name, exact, tc.want, tc.exact)
		}
	}
}

// TestPatternLinksWithinTheCreatorsScope: a pattern links only streams
// its creator's token may read ("room/**" matches "room" too, outside
// a "room/" scope); the admin's, and a row from before creators were
// kept, link whatever they match.
func TestPatternLinksWithinTheCreatorsScope(t *testing.T) {
	room := &subCreator{TokenID: "room", Scope: auth.Scope{Streams: auth.PrefixSet("room/"),
		OpGroups: auth.OpGroups{Stream: auth.ReadWrite{Read: true}}}}
	writeOnly := &subCreator{TokenID: "w", Scope: auth.Scope{Streams: auth.PrefixSet(""), Ops: []auth.Op{auth.Append}}}
	for _, tc := range []struct {
		creator *subCreator
		root    string
		rel     string
		want    bool
	}{
		{room, "", "room/a", true},
		{room, "", "room/a/b", true},
		{room, "", "room", false},
		{room, "room/", "a", true},
		{writeOnly, "", "room/a", false},
		{&subCreator{Admin: true}, "", "room", true},
		{nil, "", "room", true},
	} {
		s := subRow{Root: tc.root, Config: subConfig{Type: subWebhook, Pattern: "**"}, Creator: tc.creator}
		if tc.root == "" {
			s.Config.Pattern = "room/**"
		}
		if got := s.globs(tc.rel); got != tc.want {
			t.Errorf("creator %+v, root %q: globs(%q) = %v, want %v", tc.creator, tc.root, tc.rel, got, tc.want)
		}
	}
	// advance links a matching append only within the scope, too.
	s := subRow{Config: subConfig{Type: subWebhook, Pattern: "room/**"}, Creator: room}
	present := tails{at: map[string]uint64{"room": 1, "room/x": 1}, present: map[string]bool{"room": true, "room/x": true}}
	s.advance(time.Now(), "w1", []string{"room", "room/x"}, present)
	if s.link("room") != nil || s.link("room/x") == nil {
		t.Errorf("links after appends to room and room/x: %+v", s.Links)
	}
}

// TestAcksWithinTheHoldersScope: a pull-wake worker's acks name only
// streams its token could read when it claimed.
func TestAcksWithinTheHoldersScope(t *testing.T) {
	set := auth.PrefixSet("room/")
	s := subRow{Root: "", HolderStreams: &set}
	if err := s.authorizeAcks([]ackReq{{Stream: "room/a"}, {Path: "/room/b/"}}); err != nil {
		t.Errorf("in scope: %v", err)
	}
	for _, a := range []ackReq{{Stream: "victim/json"}, {Path: "victim/json"}, {Stream: "room"}} {
		if err := s.authorizeAcks([]ackReq{{Stream: "room/a"}, a}); err == nil || err.Code != "PERMISSION_DENIED" {
			t.Errorf("ack %+v: %v, want PERMISSION_DENIED", a, err)
		}
	}
	s.HolderStreams = nil // claimed before holders' scopes were kept
	if err := s.authorizeAcks([]ackReq{{Stream: "victim/json"}}); err != nil {
		t.Errorf("no holder scope: %v", err)
	}
}
