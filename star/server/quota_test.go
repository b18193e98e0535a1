package server_test

import (
	"encoding/json"
	"testing"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
)

// A basin's quotas round-trip through the API (create, get, patch field
// by field), bad values are refused as the API refuses them elsewhere,
// and a basin over a quota answers S2's 403 quota_exhausted on a unary
// append, an append session's terminal frame and a stream's creation.
func TestQuotasThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	create := `{"basin":"quota-basin","config":{"create_stream_on_append":true,"quotas":{"stored_bytes":1000000,"append_bytes_per_sec":0}}}`
	want(t, e.call("POST", "basins", []byte(create)), 201, "")
	cfgOf := func() api.BasinConfig {
		r := e.call("GET", "basins/quota-basin", nil)
		want(t, r, 200, "")
		var c api.BasinConfig
		if err := json.Unmarshal(r.body, &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if q := cfgOf().Quotas; q == nil || *q.StoredBytes != 1000000 || *q.AppendBytesPerSec != 0 || q.Streams != nil {
		t.Fatalf("created quotas %+v", q)
	}
	// append_bytes_per_sec 0 admits nothing: the stream is created (no
	// stream quota) and the append refused, definite.
	r := e.appendJSON("quota-basin", "s", `{"records":[{"body":"a"}]}`)
	want(t, r, 403, api.CodeQuotaExhausted)
	if !api.IsDefinite(&api.Error{Status: r.status, Code: api.CodeQuotaExhausted}) {
		t.Fatal("quota_exhausted is not definite")
	}
	s := e.openAppendSession("quota-basin", "s", api.CompressionNone)
	s.send(t, batch("x", 1))
	if _, terr := s.ack(t); terr == nil || terr.Status != 403 || terr.Code != api.CodeQuotaExhausted {
		t.Fatalf("append session: want terminal 403 quota_exhausted, got %v", terr)
	}

	// PATCH: the rate unset (unlimited), a stream quota of the one stream.
	r = e.call("PATCH", "basins/quota-basin", []byte(`{"quotas":{"append_bytes_per_sec":null,"streams":1}}`))
	want(t, r, 200, "")
	if q := cfgOf().Quotas; q == nil || *q.StoredBytes != 1000000 || q.AppendBytesPerSec != nil || *q.Streams != 1 {
		t.Fatalf("patched quotas %+v", q)
	}
	want(t, e.appendJSON("quota-basin", "s", `{"records":[{"body":"a"}]}`), 200, "")
	want(t, e.stream("quota-basin", "POST", "streams", []byte(`{"stream":"second"}`)), 403, api.CodeQuotaExhausted)
	want(t, e.appendJSON("quota-basin", "auto", `{"records":[{"body":"a"}]}`), 403, api.CodeQuotaExhausted)
	want(t, e.stream("quota-basin", "PUT", "streams/ensured", []byte(`{}`)), 403, api.CodeQuotaExhausted)

	for body, code := range map[string]string{
		`{"quotas":{"streams":-1}}`:                        api.CodeBadJSON,
		`{"quotas":{"stored_bytes":99999999999999999999}}`: api.CodeBadJSON,
		`{"quotas":{"stored_bytes":9007199254740993}}`:     api.CodeInvalid,
		`{"quotas":"lots"}`:                                api.CodeBadJSON,
	} {
		status := 400
		if code == api.CodeInvalid {
			status = 422
		}
		want(t, e.call("PATCH", "basins/quota-basin", []byte(body)), status, code)
	}
	// null unsets them all.
	want(t, e.call("PATCH", "basins/quota-basin", []byte(`{"quotas":null}`)), 200, "")
	if q := cfgOf().Quotas; q != nil {
		t.Fatalf("quotas after null: %+v", q)
	}
	want(t, e.stream("quota-basin", "POST", "streams", []byte(`{"stream":"second"}`)), 201, "")
}

// Setting a quota needs the reconfigure-basin operation, at creation too:
// a token that may only create basins cannot create one with quotas.
func TestSettingQuotasNeedsReconfigure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	creator := e.issue(map[string]any{"id": "creator", "scope": map[string]any{"basins": map[string]string{"prefix": ""}, "ops": []string{"create-basin"}}})
	operator := e.issue(map[string]any{"id": "operator", "scope": map[string]any{"basins": map[string]string{"prefix": ""}, "ops": []string{"create-basin", "reconfigure-basin"}}})
	withQuota := func(name string) []byte {
		return jsonBody(map[string]any{"basin": name, "config": map[string]any{"quotas": map[string]any{"streams": 5}}})
	}
	want(t, e.call("POST", "basins", withQuota("quota-basin-1"), bearer(creator)...), 403, auth.CodePermissionDenied)
	want(t, e.call("POST", "basins", jsonBody(map[string]any{"basin": "quota-basin-2"}), bearer(creator)...), 201, "")
	want(t, e.call("PATCH", "basins/quota-basin-2", []byte(`{"quotas":{"streams":5}}`), bearer(creator)...), 403, auth.CodePermissionDenied)
	want(t, e.call("POST", "basins", withQuota("quota-basin-3"), bearer(operator)...), 201, "")
	want(t, e.call("PATCH", "basins/quota-basin-2", []byte(`{"quotas":{"streams":5}}`), bearer(operator)...), 200, "")
}
