package server_test

import (
	"strings"
	"testing"
)

// A name sent in a JSON body must arrive as sent: a lone UTF-16
// surrogate escape or bytes that are not UTF-8 would be stored as U+FFFD
// by a lenient decoder (a stream the client cannot name again), so they
// are 400 bad_json, as a JSON append's text is.
func TestResourceBodiesKeepNamesExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	want(t, e.call("POST", "basins", jsonBody(map[string]any{"basin": "exactnames"}), bearer(testAdmin)...), 201, "")
	for name, body := range map[string]string{
		"lone high surrogate": `{"stream":"room-\ud800"}`,
		"lone low surrogate":  `{"stream":"room-\udc00x"}`,
		"not UTF-8":           "{\"stream\":\"room-\xff\"}",
	} {
		r := e.stream("exactnames", "POST", "streams", []byte(body), append(bearer(testAdmin), "Content-Type", "application/json")...)
		if r.status != 400 || !strings.Contains(string(r.body), "bad_json") {
			t.Errorf("create stream, %s: %s, want 400 bad_json", name, r)
		}
	}
	for name, body := range map[string]string{
		"basin, lone surrogate":    `{"basin":"\ud800abc"}`,
		"token id, lone surrogate": `{"id":"t-\ud800","scope":{"ops":["list-basins"]}}`,
	} {
		path := "basins"
		if strings.HasPrefix(name, "token") {
			path = "access-tokens"
		}
		if r := e.call("POST", path, []byte(body), append(bearer(testAdmin), "Content-Type", "application/json")...); r.status != 400 {
			t.Errorf("%s: %s, want 400", name, r)
		}
	}
	// A paired surrogate is a character like any other.
	r := e.stream("exactnames", "POST", "streams", []byte(`{"stream":"room-\ud83d\ude00"}`), append(bearer(testAdmin), "Content-Type", "application/json")...)
	want(t, r, 201, "")
	if !strings.Contains(string(r.body), "room-\U0001F600") {
		t.Errorf("paired surrogates: %s", r)
	}
	list := e.stream("exactnames", "GET", "streams", nil, bearer(testAdmin)...)
	if strings.Contains(string(list.body), "\ufffd") {
		t.Errorf("a replacement character was stored: %s", list)
	}
}
