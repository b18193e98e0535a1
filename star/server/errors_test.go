package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// Every documented error status and code, for bad input of every kind;
// never a 500, and a rejected append leaves the stream unchanged.
func TestErrorCodes(t *testing.T) {
	t.Parallel()
	// A deletion stays pending through the table, however slow the machine.
	e := newEnv(t, func(c *node.Config, _ *server.Options) { c.DeletionPending = time.Hour })
	e.setupBasin("err-basin")
	want(t, e.call("POST", "basins", []byte(`{"basin":"plain-basin"}`)), 201, "")
	want(t, e.appendJSON("err-basin", "s", textRecords("a", 3)), 200, "")
	json1001 := textRecords("x", 1001)
	bigBody := `{"records":[{"body":"` + strings.Repeat("y", 1<<20) + `"}]}`
	proto1001, _ := api.EncodeAppendProto(batch("p", 1001))
	jsonCT := []string{"Content-Type", "application/json"}
	encKey := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	want(t, e.call("POST", "basins", []byte(`{"basin":"enc-err-basin","config":{"stream_cipher":"aes-256-gcm","create_stream_on_append":true}}`)), 201, "")
	want(t, e.appendJSON("enc-err-basin", "x", textRecords("s", 1), "s2-encryption-key", encKey), 200, "")
	want(t, e.appendJSON("err-basin", "doomed", textRecords("d", 1)), 200, "")
	want(t, e.stream("err-basin", "DELETE", "streams/doomed", nil), 202, "")

	cases := []struct {
		name    string
		method  string
		path    string
		body    string
		headers []string
		status  int
		code    string
	}{
		// 400 bad_path
		{"unknown endpoint", "GET", "/v1/nope", "", nil, 400, api.CodeBadPath},
		{"unknown top level", "GET", "/v2/basins", "", nil, 400, api.CodeBadPath},
		{"too deep", "GET", "/v1/streams/s/records/tail/x", "", []string{"s2-basin", "err-basin"}, 400, api.CodeBadPath},
		{"trailing slash", "GET", "/v1/basins/", "", nil, 400, api.CodeBadPath},
		// 400 bad_path for a bad name in the path, bad_json in a body (as S2)
		{"invalid basin in path", "GET", "/v1/basins/UPPER-CASE", "", nil, 400, api.CodeBadPath},
		{"short basin in path", "DELETE", "/v1/basins/ab", "", nil, 400, api.CodeBadPath},
		{"invalid basin name", "POST", "/v1/basins", `{"basin":"ab"}`, jsonCT, 400, api.CodeBadJSON},
		{"invalid stream name", "POST", "/v1/streams", `{"stream":""}`, []string{"s2-basin", "err-basin", "Content-Type", "application/json"}, 400, api.CodeBadJSON},
		{"stream name dot in body", "POST", "/v1/streams", `{"stream":"."}`, []string{"s2-basin", "err-basin", "Content-Type", "application/json"}, 400, api.CodeBadJSON},
		{"stream name dot-dot in body", "POST", "/v1/streams", `{"stream":".."}`, []string{"s2-basin", "err-basin", "Content-Type", "application/json"}, 400, api.CodeBadJSON},
		{"stream name dot in path", "PUT", "/v1/streams/%2E", "", []string{"s2-basin", "err-basin"}, 400, api.CodeBadPath},
		{"stream name dot-dot in path", "GET", "/v1/streams/%2E%2E/records/tail", "", []string{"s2-basin", "err-basin"}, 400, api.CodeBadPath},
		{"stream name dot-dot appended", "POST", "/v1/streams/%2e%2e/records", `{"records":[{"body":"a"}]}`, []string{"s2-basin", "err-basin"}, 400, api.CodeBadPath},
		{"stream name too long", "GET", "/v1/streams/" + strings.Repeat("n", 513), "", []string{"s2-basin", "err-basin"}, 400, api.CodeBadPath},
		// 405 (S2 has no code for it: not_implemented, with Allow)
		{"method", "DELETE", "/v1/basins", "", nil, 405, api.CodeNotImplemented},
		{"method on tail", "POST", "/v1/streams/s/records/tail", "", []string{"s2-basin", "err-basin"}, 405, api.CodeNotImplemented},
		{"method on locations", "POST", "/v1/locations", "", nil, 405, api.CodeNotImplemented},
		// 501 not_implemented: S2 endpoints this deployment does not offer
		{"set default location", "PUT", "/v1/locations/default", `"elsewhere"`, jsonCT, 501, api.CodeNotImplemented},
		// 400 bad_header
		{"missing s2-basin", "GET", "/v1/streams", "", nil, 400, api.CodeBadHeader},
		{"invalid s2-basin", "GET", "/v1/streams", "", []string{"s2-basin", "Bad_Basin"}, 400, api.CodeBadHeader},
		{"two s2-basin", "GET", "/v1/streams", "", []string{"s2-basin", "err-basin", "s2-basin", "err-basin"}, 400, api.CodeBadHeader},
		{"bad s2-format", "POST", "/v1/streams/s/records", `{"records":[{"body":"a"}]}`, []string{"s2-basin", "err-basin", "s2-format", "hex"}, 400, api.CodeBadHeader},
		{"bad s2-stream-config", "POST", "/v1/streams/new/records", `{"records":[{"body":"a"}]}`, []string{"s2-basin", "err-basin", "s2-stream-config", "{"}, 400, api.CodeBadHeader},
		{"unsupported content-encoding", "POST", "/v1/streams/s/records", `{"records":[{"body":"a"}]}`, []string{"s2-basin", "err-basin", "Content-Encoding", "br"}, 400, api.CodeBadHeader},
		{"bad content-type", "POST", "/v1/streams/s/records", `a`, []string{"s2-basin", "err-basin", "Content-Type", "text/plain"}, 400, api.CodeBadHeader},
		// 400 bad_query
		{"bad count", "GET", "/v1/streams/s/records?count=abc", "", []string{"s2-basin", "err-basin"}, 400, api.CodeBadQuery},
		{"repeated param", "GET", "/v1/streams/s/records?seq_num=1&seq_num=2", "", []string{"s2-basin", "err-basin"}, 400, api.CodeBadQuery},
		{"bad clamp", "GET", "/v1/streams/s/records?clamp=yes", "", []string{"s2-basin", "err-basin"}, 400, api.CodeBadQuery},
		{"bad limit", "GET", "/v1/basins?limit=-1", "", nil, 400, api.CodeBadQuery},
		{"malformed escape", "GET", "/v1/streams/s/records?seq_num=%ZZ", "", []string{"s2-basin", "err-basin"}, 400, api.CodeBadQuery},
		{"malformed escape, unknown param", "GET", "/v1/streams/s/records?x=%Z&seq_num=0", "", []string{"s2-basin", "err-basin"}, 400, api.CodeBadQuery},
		{"malformed escape in a session", "GET", "/v1/streams/s/records?count=%ZZ", "", []string{"s2-basin", "err-basin", "Accept", "text/event-stream"}, 400, api.CodeBadQuery},
		{"malformed escape in a list", "GET", "/v1/basins?prefix=%ZZ", "", nil, 400, api.CodeBadQuery},
		{"semicolon separator", "GET", "/v1/streams?prefix=a;limit=1", "", []string{"s2-basin", "err-basin"}, 400, api.CodeBadQuery},
		{"prefix not UTF-8", "GET", "/v1/streams?prefix=%FF", "", []string{"s2-basin", "err-basin"}, 400, api.CodeBadQuery},
		{"repeated list param", "GET", "/v1/basins?limit=1&limit=2", "", nil, 400, api.CodeBadQuery},
		// 400 bad_json / bad_proto
		{"malformed append JSON", "POST", "/v1/streams/s/records", `{"records":[{"body":`, []string{"s2-basin", "err-basin"}, 400, api.CodeBadJSON},
		{"wrong JSON type", "POST", "/v1/streams/s/records", `{"records":"x"}`, []string{"s2-basin", "err-basin"}, 400, api.CodeBadJSON},
		{"malformed basin JSON", "POST", "/v1/basins", `{"basin":`, jsonCT, 400, api.CodeBadJSON},
		{"malformed stream JSON", "POST", "/v1/streams", `[]`, []string{"s2-basin", "err-basin", "Content-Type", "application/json"}, 400, api.CodeBadJSON},
		{"unknown storage class", "POST", "/v1/streams", `{"stream":"x","config":{"storage_class":"glacier"}}`, []string{"s2-basin", "err-basin", "Content-Type", "application/json"}, 400, api.CodeBadJSON},
		{"raw append not UTF-8", "POST", "/v1/streams/s/records", "{\"records\":[{\"body\":\"\xff\"}]}", []string{"s2-basin", "err-basin"}, 400, api.CodeBadJSON},
		{"raw append lone surrogate", "POST", "/v1/streams/s/records", `{"records":[{"body":"\ud800"}]}`, []string{"s2-basin", "err-basin"}, 400, api.CodeBadJSON},
		{"malformed proto", "POST", "/v1/streams/s/records", "\xff\xff\xff", []string{"s2-basin", "err-basin", "Content-Type", "application/protobuf"}, 400, api.CodeBadProto},
		// 400 for stream encryption (S2's codes)
		{"encrypted append without a key", "POST", "/v1/streams/x/records", `{"records":[{"body":"a"}]}`, []string{"s2-basin", "enc-err-basin"}, 400, api.CodeBadHeader},
		{"encrypted read without a key", "GET", "/v1/streams/x/records?seq_num=0", "", []string{"s2-basin", "enc-err-basin"}, 400, api.CodeBadHeader},
		{"encryption key not base64", "GET", "/v1/streams/x/records?seq_num=0", "", []string{"s2-basin", "enc-err-basin", "s2-encryption-key", "%%%"}, 400, api.CodeBadHeader},
		{"encryption key too short", "GET", "/v1/streams/x/records?seq_num=0", "", []string{"s2-basin", "enc-err-basin", "s2-encryption-key", "AAECAw=="}, 400, api.CodeBadHeader},
		{"wrong encryption key", "GET", "/v1/streams/x/records?seq_num=0", "", []string{"s2-basin", "enc-err-basin", "s2-encryption-key", "HxwdHhscGRoXGBUWExQREg8QDQ4LDAkKBwgFBgMEAQI="}, 400, api.CodeDecryptionFailed},
		{"short encryption key in SSE", "GET", "/v1/streams/x/records?seq_num=0", "", []string{"s2-basin", "enc-err-basin", "s2-encryption-key", "AAEC", "Accept", "text/event-stream"}, 400, api.CodeBadHeader},
		// 400 bad_query for metrics
		{"metrics without a set", "GET", "/v1/metrics", "", nil, 400, api.CodeBadQuery},
		{"metrics: a stream set for a basin", "GET", "/v1/metrics/err-basin?set=active-basins", "", nil, 400, api.CodeBadQuery},
		{"metrics: bad interval", "GET", "/v1/metrics/err-basin?set=read-ops&interval=week", "", nil, 400, api.CodeBadQuery},
		{"metrics: bad basin in path", "GET", "/v1/metrics/Err?set=storage", "", nil, 400, api.CodeBadPath},
		// 404
		{"no basin", "GET", "/v1/basins/missing-basin", "", nil, 404, api.CodeBasinNotFound},
		{"no basin for metrics", "GET", "/v1/metrics/missing-basin?set=storage", "", nil, 404, api.CodeBasinNotFound},
		{"no basin for streams", "GET", "/v1/streams", "", []string{"s2-basin", "missing-basin"}, 404, api.CodeBasinNotFound},
		{"no stream", "GET", "/v1/streams/missing", "", []string{"s2-basin", "err-basin"}, 404, api.CodeStreamNotFound},
		{"no stream to append (no auto-create)", "POST", "/v1/streams/missing/records", `{"records":[{"body":"a"}]}`, []string{"s2-basin", "plain-basin"}, 404, api.CodeStreamNotFound},
		{"no stream to read (no auto-create)", "GET", "/v1/streams/missing/records", "", []string{"s2-basin", "plain-basin"}, 404, api.CodeStreamNotFound},
		{"no stream tail", "GET", "/v1/streams/missing/records/tail", "", []string{"s2-basin", "plain-basin"}, 404, api.CodeStreamNotFound},
		{"delete no stream", "DELETE", "/v1/streams/missing", "", []string{"s2-basin", "err-basin"}, 404, api.CodeStreamNotFound},
		// 409
		{"basin exists", "POST", "/v1/basins", `{"basin":"err-basin"}`, jsonCT, 409, api.CodeResourceAlreadyExists},
		{"stream exists", "POST", "/v1/streams", `{"stream":"s"}`, []string{"s2-basin", "err-basin", "Content-Type", "application/json"}, 409, api.CodeResourceAlreadyExists},
		{"re-create while deletion is pending", "POST", "/v1/streams", `{"stream":"doomed"}`, []string{"s2-basin", "err-basin", "Content-Type", "application/json"}, 409, api.CodeStreamDeletionPending},
		{"ensure while deletion is pending", "PUT", "/v1/streams/doomed", "", []string{"s2-basin", "err-basin"}, 409, api.CodeStreamDeletionPending},
		{"stream exists, other config, same token", "POST", "/v1/streams", `{"stream":"s","config":{"storage_class":"express"}}`, []string{"s2-basin", "err-basin", "Content-Type", "application/json", "s2-request-token", "tok"}, 409, api.CodeResourceAlreadyExists},
		// 412
		{"seq mismatch", "POST", "/v1/streams/s/records", `{"records":[{"body":"a"}],"match_seq_num":7}`, []string{"s2-basin", "err-basin"}, 412, ""},
		// 416
		{"past the tail", "GET", "/v1/streams/s/records?seq_num=4", "", []string{"s2-basin", "err-basin"}, 416, ""},
		// 422
		{"basin in another location", "POST", "/v1/basins", `{"basin":"where-basin","location":"aws:mars-1"}`, jsonCT, 422, api.CodeInvalid},
		{"empty batch", "POST", "/v1/streams/s/records", `{"records":[]}`, []string{"s2-basin", "err-basin"}, 422, api.CodeInvalid},
		{"1001 records", "POST", "/v1/streams/s/records", json1001, []string{"s2-basin", "err-basin"}, 422, api.CodeInvalid},
		{"1001 records proto", "POST", "/v1/streams/s/records", string(proto1001), []string{"s2-basin", "err-basin", "Content-Type", "application/protobuf"}, 422, api.CodeInvalid},
		{"over 1 MiB metered", "POST", "/v1/streams/s/records", bigBody, []string{"s2-basin", "err-basin"}, 422, api.CodeInvalid},
		{"body over the bound", "POST", "/v1/streams/s/records", strings.Repeat(" ", 9<<20), []string{"s2-basin", "err-basin"}, 422, api.CodeInvalid},
		{"bad base64", "POST", "/v1/streams/s/records", `{"records":[{"body":"***"}]}`, []string{"s2-basin", "err-basin", "s2-format", "base64"}, 422, api.CodeInvalid},
		{"long fencing token", "POST", "/v1/streams/s/records", `{"records":[{"body":"a"}],"fencing_token":"` + strings.Repeat("t", 37) + `"}`, []string{"s2-basin", "err-basin"}, 422, api.CodeInvalid},
		{"bad command", "POST", "/v1/streams/s/records", `{"records":[{"headers":[["","fence"],["a","b"]]}]}`, []string{"s2-basin", "err-basin"}, 422, api.CodeInvalid},
		{"two starts", "GET", "/v1/streams/s/records?seq_num=0&tail_offset=1", "", []string{"s2-basin", "err-basin"}, 422, api.CodeInvalid},
		{"timestamp at until", "GET", "/v1/streams/s/records?timestamp=5&until=5", "", []string{"s2-basin", "err-basin"}, 422, api.CodeInvalid},
		{"zero age", "POST", "/v1/streams", `{"stream":"z","config":{"retention_policy":{"age":0}}}`, []string{"s2-basin", "err-basin", "Content-Type", "application/json"}, 422, api.CodeInvalid},
		{"cipher", "POST", "/v1/basins", `{"basin":"cipher-basin","config":{"stream_cipher":"aes"}}`, jsonCT, 422, api.CodeInvalid},
		{"start_after before prefix", "GET", "/v1/basins?prefix=b&start_after=a", "", nil, 422, api.CodeInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body []byte
			if c.body != "" {
				body = []byte(c.body)
			}
			r := e.call(c.method, c.path, body, c.headers...)
			want(t, r, c.status, c.code)
		})
	}
	if tail := e.tail("err-basin", "s"); tail.SeqNum != 3 {
		t.Fatalf("rejected appends moved the tail to %d", tail.SeqNum)
	}
	// The 412 and 416 bodies are exact.
	r := e.appendJSON("err-basin", "s", `{"records":[{"body":"a"}],"match_seq_num":7}`)
	if string(r.body) != `{"seq_num_mismatch":3}` {
		t.Fatalf("412 body %s", r)
	}
	r = e.stream("err-basin", "GET", "streams/s/records?seq_num=4", nil)
	var tr map[string]map[string]uint64
	if json.Unmarshal(r.body, &tr) != nil || len(tr) != 1 || tr["tail"]["seq_num"] != 3 {
		t.Fatalf("416 body %s", r)
	}
}

// Basin lifecycle errors: 409 while deleting, 404 after.
func TestBasinDeletion(t *testing.T) {
	t.Parallel()
	// A deletion pending for 2 s (newEnv's is 300 ms): the 409s below must
	// all land inside it, however slowly a loaded machine sends them.
	e := newEnv(t, func(c *node.Config, _ *server.Options) { c.DeletionPending = 2 * time.Second })
	e.setupBasin("gone-basin")
	want(t, e.appendJSON("gone-basin", "s", textRecords("a", 1)), 200, "")
	r := e.call("DELETE", "basins/gone-basin", nil)
	want(t, r, 202, "")
	if r.header.Get("Content-Length") != "0" {
		t.Fatalf("202 without Content-Length: 0: %v", r.header)
	}
	want(t, e.call("GET", "basins/gone-basin", nil), 409, api.CodeBasinDeletionPending)
	want(t, e.appendJSON("gone-basin", "s", textRecords("b", 1)), 409, api.CodeBasinDeletionPending)
	want(t, e.call("POST", "basins", []byte(`{"basin":"gone-basin"}`)), 409, api.CodeBasinDeletionPending)
	r = e.call("GET", "basins", nil)
	if !strings.Contains(string(r.body), `"state":"deleting"`) {
		t.Fatalf("listing a deleting basin: %s", r)
	}
	poll.Until(t, 10*time.Second, "the deletion to end", func() bool {
		r := e.call("GET", "basins/gone-basin", nil)
		if r.status == 409 {
			want(t, r, 409, api.CodeBasinDeletionPending)
			return false
		}
		want(t, r, 404, api.CodeBasinNotFound)
		return true
	})
	// Created again: it starts empty (the old streams belong to the old basin).
	want(t, e.call("POST", "basins", []byte(`{"basin":"gone-basin"}`)), 201, "")
	want(t, e.stream("gone-basin", "GET", "streams/s", nil), 404, api.CodeStreamNotFound)
	r = e.stream("gone-basin", "GET", "streams", nil)
	if string(r.body) != `{"streams":[],"has_more":false}` {
		t.Fatalf("streams of a re-created basin: %s", r)
	}
}

// Ensure (PUT) and reconfigure (PATCH) on basins and streams, and the
// request token that makes a retried create succeed.
func TestEnsureAndReconfigure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.call("PUT", "basins/ens-basin", nil)
	want(t, r, 201, "")
	if r.header.Get("s2-provision-result") != "created" {
		t.Fatalf("provision result %q", r.header.Get("s2-provision-result"))
	}
	r = e.call("PUT", "basins/ens-basin", nil)
	if r.status != 200 || r.header.Get("s2-provision-result") != "noop" {
		t.Fatalf("second PUT: %s %q", r, r.header.Get("s2-provision-result"))
	}
	r = e.call("PUT", "basins/ens-basin", []byte(`{"config":{"create_stream_on_append":true}}`))
	if r.status != 200 || r.header.Get("s2-provision-result") != "updated" {
		t.Fatalf("PUT with config: %s %q", r, r.header.Get("s2-provision-result"))
	}
	r = e.call("PATCH", "basins/ens-basin", []byte(`{"default_stream_config":{"timestamping":{"mode":"arrival"}}}`))
	want(t, r, 200, "")
	if !strings.Contains(string(r.body), `"mode":"arrival"`) || !strings.Contains(string(r.body), `"create_stream_on_append":true`) {
		t.Fatalf("PATCH basin: %s", r)
	}
	r = e.stream("ens-basin", "PUT", "streams/st", nil)
	if r.status != 201 || r.header.Get("s2-provision-result") != "created" {
		t.Fatalf("PUT stream: %s", r)
	}
	r = e.stream("ens-basin", "PUT", "streams/st", []byte(`{"storage_class":"express"}`))
	if r.status != 200 || r.header.Get("s2-provision-result") != "updated" {
		t.Fatalf("PUT stream config: %s", r)
	}
	// Arrival timestamps (from the basin default) ignore the client's.
	want(t, e.appendJSON("ens-basin", "st", `{"records":[{"timestamp":1,"body":"a"}]}`), 200, "")
	b, _ := e.readJSON("ens-basin", "st", "seq_num=0")
	if *b.Records[0].Timestamp == 1 {
		t.Fatal("arrival mode kept the client timestamp")
	}
	r = e.stream("ens-basin", "PATCH", "streams/st", []byte(`{"timestamping":{"mode":"client-prefer"},"retention_policy":{"infinite":{}}}`))
	want(t, r, 200, "")
	if !strings.Contains(string(r.body), `"mode":"client-prefer"`) || !strings.Contains(string(r.body), `{"infinite":{}}`) || !strings.Contains(string(r.body), `"storage_class":"express"`) {
		t.Fatalf("PATCH stream: %s", r)
	}
	// Applied at once to the open stream.
	want(t, e.appendJSON("ens-basin", "st", `{"records":[{"timestamp":1,"body":"b"}]}`), 200, "")
	b, _ = e.readJSON("ens-basin", "st", "seq_num=1")
	if *b.Records[0].Timestamp != *func() *uint64 { bb, _ := e.readJSON("ens-basin", "st", "seq_num=0"); return bb.Records[0].Timestamp }() {
		t.Fatal("client-prefer after PATCH: a lower client timestamp must be raised to the previous one")
	}
	// A retried create with the same request token succeeds.
	body := []byte(`{"stream":"tok"}`)
	want(t, e.stream("ens-basin", "POST", "streams", body, "s2-request-token", "t-1"), 201, "")
	want(t, e.stream("ens-basin", "POST", "streams", body, "s2-request-token", "t-1"), 201, "")
	want(t, e.stream("ens-basin", "POST", "streams", body, "s2-request-token", "t-2"), 409, api.CodeResourceAlreadyExists)
	want(t, e.call("POST", "basins", []byte(`{"basin":"tok-basin"}`), "s2-request-token", "b-1"), 201, "")
	want(t, e.call("POST", "basins", []byte(`{"basin":"tok-basin"}`), "s2-request-token", "b-1"), 201, "")
}

// A body cut off mid-way is 400 and applies nothing.
func TestTruncatedBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("cut-basin")
	want(t, e.appendJSON("cut-basin", "c", textRecords("a", 2)), 200, "")
	full := textRecords("b", 50)
	pb, _ := api.EncodeAppendProto(batch("c", 50))
	for _, c := range []struct {
		ct, body, code string
	}{
		{"application/json", full, api.CodeBadJSON},
		{"application/protobuf", string(pb), api.CodeBadProto},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/streams/c/records HTTP/1.1\r\nHost: x\r\ns2-basin: cut-basin\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", c.ct, len(c.body))
		io.WriteString(conn, c.body[:len(c.body)/2])
		conn.(*net.TCPConn).CloseWrite()
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		conn.Close()
		want(t, resp{status: res.StatusCode, header: res.Header, body: b}, 400, c.code)
	}
	if tail := e.tail("cut-basin", "c"); tail.SeqNum != 2 {
		t.Fatalf("a truncated body moved the tail to %d", tail.SeqNum)
	}
}

// After the star stops taking appends, they fail with a retryable 503.
func TestUnavailableAfterClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("close-basin")
	want(t, e.appendJSON("close-basin", "c", textRecords("a", 1)), 200, "")
	if err := e.n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want(t, e.appendJSON("close-basin", "c", textRecords("b", 1)), 503, api.CodeUnavailable)
	want(t, e.call("GET", "/health", nil), 503, api.CodeUnavailable)
}

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.call("GET", "/health", nil)
	want(t, r, 200, "")
	if !strings.Contains(string(r.body), `"status":"ok"`) {
		t.Fatalf("health %s", r)
	}
	e.setupBasin("metrics-basin")
	want(t, e.appendJSON("metrics-basin", "m", textRecords("a", 1)), 200, "")
	want(t, e.call("GET", "/v1/nope", nil), 400, api.CodeBadPath)
	r = e.call("GET", "/metrics", nil)
	want(t, r, 200, "")
	for _, m := range []string{
		`starlog_http_requests_total{method="POST",route="records",status="200"} 1`,
		`starlog_http_requests_total{method="GET",route="unknown",status="400"} 1`,
		`starlog_ack_latency_seconds_count{class="standard"}`,
		`starlog_objstore_requests_total{bucket="standard",op="put"`,
		`starlog_meta_requests_total{op="put"`,
		`starlog_reader_read_duration_seconds`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(r.body), m) {
			t.Errorf("metrics lack %s", m)
		}
	}
}

// TestResourceBodiesNeedJSONContentType: as S2 does, a create, reconfigure
// or issue whose body is not declared JSON is 400 bad_json and changes
// nothing; a PUT (ensure) may leave the Content-Type out only without a
// body. application/*+json and parameters are JSON.
func TestResourceBodiesNeedJSONContentType(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("ctype-basin")
	sb := []string{"s2-basin", "ctype-basin"}
	cases := []struct {
		name, method, path string
		headers            []string
		body               string
	}{
		{"create basin", "POST", "basins", nil, `{"basin":"ctype-new"}`},
		{"reconfigure basin", "PATCH", "basins/ctype-basin", nil, `{"create_stream_on_append":false}`},
		{"ensure basin", "PUT", "basins/ctype-put", nil, `{}`},
		{"create stream", "POST", "streams", sb, `{"stream":"ctype-s"}`},
		{"reconfigure stream", "PATCH", "streams/ctype-s0", sb, `{}`},
		{"ensure stream", "PUT", "streams/ctype-put", sb, `{}`},
		{"issue token", "POST", "access-tokens", nil, `{"id":"ctype-t","scope":{"ops":["read"]}}`},
	}
	if r := e.stream("ctype-basin", "POST", "streams", []byte(`{"stream":"ctype-s0"}`)); r.status != 201 {
		t.Fatalf("create ctype-s0: %s", r)
	}
	for _, c := range cases {
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/protobuf", "json", ""} {
			if ct == "" && c.method == "PUT" {
				continue // below
			}
			h := append(append([]string{}, c.headers...), "Content-Type", ct)
			r := e.do(e.h1, c.method, c.path, []byte(c.body), h...)
			if r.status != 400 || !strings.Contains(string(r.body), `"bad_json"`) {
				t.Errorf("%s with Content-Type %q: %s, want 400 bad_json", c.name, ct, r)
			}
		}
	}
	// Nothing was created or changed.
	if r := e.call("GET", "basins/ctype-new", nil); r.status != 404 {
		t.Errorf("ctype-new after refused creates: %s", r)
	}
	if r := e.stream("ctype-basin", "GET", "streams/ctype-s", nil); r.status != 404 {
		t.Errorf("ctype-s after refused creates: %s", r)
	}
	if r := e.call("GET", "basins/ctype-basin", nil); !strings.Contains(string(r.body), `"create_stream_on_append":true`) {
		t.Errorf("ctype-basin after a refused reconfigure: %s", r)
	}
	// A PUT without Content-Type and without a body ensures; with a body
	// it is refused (rather than drop the config).
	if r := e.do(e.h1, "PUT", "basins/ctype-put", nil); r.status != 201 {
		t.Errorf("PUT without a body: %s", r)
	}
	if r := e.do(e.h1, "PUT", "basins/ctype-put2", []byte(`{"config":{"create_stream_on_append":true}}`)); r.status != 400 || !strings.Contains(string(r.body), `"bad_json"`) {
		t.Errorf("PUT with a body but no Content-Type: %s", r)
	}
	// JSON spelt otherwise is JSON.
	for i, ct := range []string{"application/json; charset=utf-8", "Application/JSON", "application/vnd.s2+json"} {
		r := e.do(e.h1, "POST", "basins", []byte(fmt.Sprintf(`{"basin":"ctype-ok-%d"}`, i)), "Content-Type", ct)
		if r.status != 201 {
			t.Errorf("create basin with Content-Type %q: %s", ct, r)
		}
	}
}
