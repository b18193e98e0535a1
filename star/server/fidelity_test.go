package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

func streamConfigOf(t *testing.T, e *env, basin, name string) api.StreamConfig {
	t.Helper()
	r := e.stream(basin, "GET", "streams/"+name, nil)
	want(t, r, 200, "")
	var c api.StreamConfig
	if err := json.Unmarshal(r.body, &c); err != nil {
		t.Fatalf("stream config %s: %v", r, err)
	}
	return c
}

// S2 copies the basin's default stream config into a stream when it is
// created or reconfigured: a later PATCH of the default leaves existing
// streams as they are, and only new streams (or a field a reconfiguration
// unsets) take the new default.
func TestBasinDefaultCopiedAtCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	want(t, e.call("POST", "basins", []byte(`{"basin":"dflt-basin","config":{"create_stream_on_append":true,"default_stream_config":{"retention_policy":{"age":3600}}}}`)), 201, "")
	want(t, e.stream("dflt-basin", "POST", "streams", []byte(`{"stream":"old"}`)), 201, "")
	want(t, e.appendJSON("dflt-basin", "auto-old", textRecords("a", 1)), 200, "") // created on append
	want(t, e.call("PATCH", "basins/dflt-basin", []byte(`{"default_stream_config":{"retention_policy":{"age":60},"timestamping":{"mode":"arrival"}}}`)), 200, "")

	for _, name := range []string{"old", "auto-old"} {
		c := streamConfigOf(t, e, "dflt-basin", name)
		if c.RetentionPolicy.AgeSecs != 3600 || *c.Timestamping.Mode != api.ClientPrefer {
			t.Errorf("%s after the basin default changed: retention %+v, mode %s; want 3600 s, client-prefer", name, *c.RetentionPolicy, *c.Timestamping.Mode)
		}
	}
	// The stream still keeps a client timestamp: it is not in arrival mode.
	// (One within the stream's hour of retention: an older one is past it,
	// and reads skip it at once.)
	ts := uint64(time.Now().Add(-10 * time.Minute).UnixMilli())
	want(t, e.appendJSON("dflt-basin", "old", fmt.Sprintf(`{"records":[{"timestamp":%d,"body":"a"}]}`, ts)), 200, "")
	if b, _ := e.readJSON("dflt-basin", "old", "seq_num=0"); b == nil || *b.Records[0].Timestamp != ts {
		t.Fatalf("an existing stream took the basin's new arrival timestamping: %+v", b)
	}

	want(t, e.stream("dflt-basin", "POST", "streams", []byte(`{"stream":"new"}`)), 201, "")
	if c := streamConfigOf(t, e, "dflt-basin", "new"); c.RetentionPolicy.AgeSecs != 60 || *c.Timestamping.Mode != api.Arrival {
		t.Errorf("new stream: retention %+v, mode %s; want the new default 60 s, arrival", *c.RetentionPolicy, *c.Timestamping.Mode)
	}
	// A reconfiguration that unsets a field takes the default as it is now.
	r := e.stream("dflt-basin", "PATCH", "streams/old", []byte(`{"retention_policy":null}`))
	want(t, r, 200, "")
	if c := streamConfigOf(t, e, "dflt-basin", "old"); c.RetentionPolicy.AgeSecs != 60 || *c.Timestamping.Mode != api.ClientPrefer {
		t.Errorf("old after unsetting retention: retention %+v, mode %s; want 60 s, client-prefer", *c.RetentionPolicy, *c.Timestamping.Mode)
	}
	// And a second change of the default moves nothing either.
	want(t, e.call("PATCH", "basins/dflt-basin", []byte(`{"default_stream_config":{"retention_policy":{"age":7}}}`)), 200, "")
	if c := streamConfigOf(t, e, "dflt-basin", "old"); c.RetentionPolicy.AgeSecs != 60 {
		t.Errorf("old after a second default change: retention %+v, want 60 s", *c.RetentionPolicy)
	}
	// Ensure compares against the config as it would be stored now.
	r = e.stream("dflt-basin", "PUT", "streams/new", []byte(`{}`))
	if r.status != 200 || r.header.Get(api.HeaderProvisionResult) != api.ProvisionUpdated {
		t.Fatalf("PUT {} after the default changed: %s %q, want 200 updated", r, r.header.Get(api.HeaderProvisionResult))
	}
	r = e.stream("dflt-basin", "PUT", "streams/new", []byte(`{}`))
	if r.status != 200 || r.header.Get(api.HeaderProvisionResult) != api.ProvisionNoop {
		t.Fatalf("second PUT {}: %s %q, want 200 noop", r, r.header.Get(api.HeaderProvisionResult))
	}
}

// As S2: a name whose stream or basin is being deleted cannot be created
// again (POST or PUT) until the deletion is no longer pending; after it,
// it can.
func TestCreateWhileDeletionPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *node.Config, _ *server.Options) { c.DeletionPending = 2 * time.Second })
	e.setupBasin("pend-basin")
	want(t, e.stream("pend-basin", "POST", "streams", []byte(`{"stream":"p"}`)), 201, "")
	want(t, e.appendJSON("pend-basin", "p", textRecords("a", 2)), 200, "")
	want(t, e.stream("pend-basin", "DELETE", "streams/p", nil), 202, "")
	want(t, e.stream("pend-basin", "POST", "streams", []byte(`{"stream":"p"}`)), 409, api.CodeStreamDeletionPending)
	want(t, e.stream("pend-basin", "PUT", "streams/p", nil), 409, api.CodeStreamDeletionPending)
	want(t, e.appendJSON("pend-basin", "p", textRecords("b", 1)), 409, api.CodeStreamDeletionPending)

	want(t, e.call("POST", "basins", []byte(`{"basin":"pend-basin2"}`)), 201, "")
	want(t, e.call("DELETE", "basins/pend-basin2", nil), 202, "")
	want(t, e.call("POST", "basins", []byte(`{"basin":"pend-basin2"}`)), 409, api.CodeBasinDeletionPending)
	want(t, e.call("PUT", "basins/pend-basin2", nil), 409, api.CodeBasinDeletionPending)

	poll.Until(t, 30*time.Second, "the stream's deletion window (2 s) to end", func() bool {
		r := e.stream("pend-basin", "POST", "streams", []byte(`{"stream":"p"}`))
		if r.status != 201 {
			want(t, r, 409, api.CodeStreamDeletionPending)
		}
		return r.status == 201
	})
	if tail := e.tail("pend-basin", "p"); tail.SeqNum != 0 {
		t.Fatalf("the re-created stream has tail %d, want a new empty stream", tail.SeqNum)
	}
	// The basin's window began a little after the stream's.
	poll.Until(t, 30*time.Second, "the basin's deletion window (2 s) to end", func() bool {
		r := e.call("PUT", "basins/pend-basin2", nil)
		if r.status != 201 {
			want(t, r, 409, api.CodeBasinDeletionPending)
		}
		return r.status == 201
	})
}

// Idempotent create keys on the request token and the config, as S2: a
// retry (same token, same config) is 201 with s2-provision-result: noop;
// the same token with another config is 409; a first create says created.
func TestIdempotentCreateKeysOnConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("idem-basin")
	cases := []struct {
		name           string
		call           func(body string, token string) resp
		first, other   string
		firstDifferent string
	}{
		{"stream", func(body, tok string) resp {
			return e.stream("idem-basin", "POST", "streams", []byte(body), "s2-request-token", tok)
		}, `{"stream":"i","config":{"storage_class":"express"}}`, `{"stream":"i","config":{"storage_class":"standard"}}`, `{"stream":"i"}`},
		{"basin", func(body, tok string) resp {
			return e.call("POST", "basins", []byte(body), "s2-request-token", tok)
		}, `{"basin":"idem-new1","config":{"create_stream_on_read":true}}`, `{"basin":"idem-new1","config":{"create_stream_on_read":false}}`, `{"basin":"idem-new1"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.call(c.first, "tok-1")
			if r.status != 201 || r.header.Get(api.HeaderProvisionResult) != api.ProvisionCreated {
				t.Fatalf("first create: %s %q", r, r.header.Get(api.HeaderProvisionResult))
			}
			r = c.call(c.first, "tok-1")
			if r.status != 201 || r.header.Get(api.HeaderProvisionResult) != api.ProvisionNoop {
				t.Fatalf("retried create: %s %q, want 201 noop", r, r.header.Get(api.HeaderProvisionResult))
			}
			if !strings.Contains(string(r.body), `"name":"`) {
				t.Fatalf("retried create body: %s", r)
			}
			want(t, c.call(c.other, "tok-1"), 409, api.CodeResourceAlreadyExists)
			want(t, c.call(c.firstDifferent, "tok-1"), 409, api.CodeResourceAlreadyExists)
			want(t, c.call(c.first, "tok-2"), 409, api.CodeResourceAlreadyExists)
			want(t, c.call(c.first, ""), 409, api.CodeResourceAlreadyExists)
		})
	}
}

// A storage-class change applies to an open stream at once: the PATCH
// releases it and the next append opens it on the new class's chain (the
// express ack histogram counts it), with every record still read back in
// order.
func TestStorageClassChangeAppliesPromptly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("class-basin")
	want(t, e.stream("class-basin", "POST", "streams", []byte(`{"stream":"c","config":{"storage_class":"standard"}}`)), 201, "")
	want(t, e.appendJSON("class-basin", "c", textRecords("std", 3)), 200, "")
	before := expressAcks(t, e)
	want(t, e.stream("class-basin", "PATCH", "streams/c", []byte(`{"storage_class":"express"}`)), 200, "")
	poll.UntilErr(t, 30*time.Second, "an append after the class change", func() error {
		// The release may still be under way: a retryable 503 meanwhile.
		r := e.appendJSON("class-basin", "c", textRecords("exp", 2))
		if r.status != 200 && r.status != 503 {
			t.Fatalf("append after the class change: %s", r)
		}
		if r.status != 200 {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	if after := expressAcks(t, e); after <= before {
		t.Fatalf("express acks %v → %v: the append after the class change did not go to the express chain", before, after)
	}
	b, r := e.readJSON("class-basin", "c", "seq_num=0")
	if b == nil || len(b.Records) != 5 {
		t.Fatalf("read back after the class change: %s", r)
	}
	for i, rec := range b.Records {
		if rec.SeqNum != uint64(i) {
			t.Fatalf("record %d has seq %d", i, rec.SeqNum)
		}
	}
}

// expressAcks is the count of the express chain's ack-latency histogram.
func expressAcks(t *testing.T, e *env) float64 {
	t.Helper()
	r := e.call("GET", "/metrics", nil)
	want(t, r, 200, "")
	for _, line := range strings.Split(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(line, `starlog_ack_latency_seconds_count{class="express"} `); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// Locations: the deployment's one location, in /v1/locations, the default
// and basin info; a create may name it, not another.
func TestLocations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(_ *node.Config, o *server.Options) { o.Location = "aws:test-1" })
	r := e.call("GET", "/v1/locations", nil)
	want(t, r, 200, "")
	if string(r.body) != `[{"name":"aws:test-1","is_private":false}]` {
		t.Fatalf("locations: %s", r)
	}
	r = e.call("GET", "/v1/locations/default", nil)
	if r.status != 200 || string(r.body) != `{"name":"aws:test-1","is_private":false}` {
		t.Fatalf("default location: %s", r)
	}
	r = e.call("POST", "basins", []byte(`{"basin":"loc-basin","location":"aws:test-1"}`))
	want(t, r, 201, "")
	if !strings.Contains(string(r.body), `"location":"aws:test-1"`) {
		t.Fatalf("created basin info: %s", r)
	}
	r = e.call("GET", "basins?prefix=loc-", nil)
	if !strings.Contains(string(r.body), `"location":"aws:test-1"`) {
		t.Fatalf("listed basin info: %s", r)
	}
	r = e.call("PUT", "basins/loc-basin2", []byte(`{"location":"aws:test-1"}`))
	if r.status != 201 || !strings.Contains(string(r.body), `"location":"aws:test-1"`) {
		t.Fatalf("ensured basin info: %s", r)
	}
	want(t, e.call("PUT", "basins/loc-basin3", []byte(`{"location":"aws:elsewhere"}`)), 422, api.CodeInvalid)
	want(t, e.call("GET", "basins/loc-basin3", nil), 404, api.CodeBasinNotFound)
}

// The metrics API answers S2's sets and shapes: storage from the
// metastore, the timeseries from what this star served.
func TestMetricsAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setupBasin("mtr-basin")
	rec := `{"records":[{"body":"0123456789"}]}` // 8 + 10 metered bytes
	for range 3 {
		want(t, e.appendJSON("mtr-basin", "m", rec), 200, "")
	}
	if b, r := e.readJSON("mtr-basin", "m", "seq_num=0"); b == nil || len(b.Records) != 3 {
		t.Fatalf("read: %s", r)
	}
	get := func(path string) api.MetricSetResponse {
		t.Helper()
		r := e.call("GET", path, nil)
		want(t, r, 200, "")
		var out api.MetricSetResponse
		if err := json.Unmarshal(r.body, &out); err != nil || len(out.Values) != 1 {
			t.Fatalf("%s: %s %v", path, r, err)
		}
		return out
	}
	sum := func(a *api.AccumulationMetric) float64 {
		var v float64
		for _, p := range a.Values {
			v += p[1]
		}
		return v
	}
	for _, c := range []struct {
		set, unit string
		total     float64
	}{
		{"append-ops", "operations", 3}, {"append-throughput", "bytes", 54},
		{"read-ops", "operations", 1}, {"read-throughput", "bytes", 54},
	} {
		for _, iv := range []string{"", "&interval=minute", "&interval=hour", "&interval=day"} {
			m := get("/v1/metrics/mtr-basin?set=" + c.set + iv).Values[0].Accumulation
			if m == nil || m.Name != c.set || m.Unit != c.unit || sum(m) != c.total {
				t.Fatalf("%s%s: %+v, want %s total %v", c.set, iv, m, c.unit, c.total)
			}
		}
	}
	want(t, e.stream("mtr-basin", "GET", "streams", nil), 200, "")
	want(t, e.stream("mtr-basin", "GET", "streams/m", nil), 200, "")
	if m := get("/v1/metrics/mtr-basin?set=basin-ops").Values[0].Accumulation; m == nil || sum(m) != 2 {
		t.Fatalf("basin-ops: %+v", m)
	}
	if m := get("/v1/metrics?set=account-ops").Values[0].Accumulation; m == nil || sum(m) < 1 {
		t.Fatalf("account-ops: %+v", m)
	}
	if m := get("/v1/metrics?set=active-basins").Values[0].Label; m == nil || len(m.Values) != 1 || m.Values[0] != "mtr-basin" {
		t.Fatalf("active-basins: %+v", m)
	}
	// Storage appears once the absorb has written the stream's refs.
	poll.Until(t, 30*time.Second, "the stream's storage above 0", func() bool {
		s := get("/v1/metrics/mtr-basin/m?set=storage").Values[0].Gauge
		b := get("/v1/metrics/mtr-basin?set=storage").Values[0].Gauge
		if s == nil || b == nil || s.Unit != "bytes" || len(s.Values) != 1 {
			t.Fatalf("storage: %+v %+v", s, b)
		}
		if s.Values[0][1] == 0 {
			return false
		}
		if b.Values[0][1] != s.Values[0][1] {
			t.Fatalf("basin storage %v, its one stream %v", b.Values[0][1], s.Values[0][1])
		}
		return true
	})
	// Errors: an unknown set, a bad interval, a bad name, a missing stream.
	want(t, e.call("GET", "/v1/metrics?set=storage", nil), 400, api.CodeBadQuery)
	want(t, e.call("GET", "/v1/metrics/mtr-basin?set=append-ops&interval=week", nil), 400, api.CodeBadQuery)
	want(t, e.call("GET", "/v1/metrics/mtr-basin?set=append-ops&start=x", nil), 400, api.CodeBadQuery)
	// A range that ends before it starts is refused, as S2 does; one
	// point is a range.
	want(t, e.call("GET", "/v1/metrics/mtr-basin?set=append-ops&start=1700000100&end=1700000000", nil), 400, api.CodeBadQuery)
	want(t, e.call("GET", "/v1/metrics?set=account-ops&start=1700000100&end=1700000000", nil), 400, api.CodeBadQuery)
	want(t, e.call("GET", "/v1/metrics/mtr-basin?set=append-ops&start=1700000000&end=1700000000", nil), 200, "")
	want(t, e.call("GET", "/v1/metrics/BAD?set=storage", nil), 400, api.CodeBadPath)
	want(t, e.call("GET", "/v1/metrics/mtr-basin/nope?set=storage", nil), 404, api.CodeStreamNotFound)
	want(t, e.call("GET", "/v1/metrics/no-such-basin?set=append-ops", nil), 404, api.CodeBasinNotFound)
}

// Stream encryption: a stream of a basin with stream_cipher aes-256-gcm
// takes and gives records only with the s2-encryption-key it was written
// with; what the node stores is not the plaintext.
func TestStreamEncryption(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	want(t, e.call("POST", "basins", []byte(`{"basin":"enc-basin","config":{"stream_cipher":"aes-256-gcm","create_stream_on_append":true}}`)), 201, "")
	r := e.stream("enc-basin", "POST", "streams", []byte(`{"stream":"secret"}`))
	want(t, r, 201, "")
	if !strings.Contains(string(r.body), `"cipher":"aes-256-gcm"`) {
		t.Fatalf("stream info of an encrypted stream: %s", r)
	}
	key := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" // bytes 0..31
	other := "HxwdHhscGRoXGBUWExQREg8QDQ4LDAkKBwgFBgMEAQI="
	kh := []string{"s2-encryption-key", key}
	body := `{"records":[{"headers":[["h","v"]],"body":"top secret"},{"body":"two"}]}`
	want(t, e.appendJSON("enc-basin", "secret", body, kh...), 200, "")
	want(t, e.appendJSON("enc-basin", "secret", `{"records":[{"headers":[["","trim"]],"body":"\u0000\u0000\u0000\u0000\u0000\u0000\u0000\u0000"}]}`, kh...), 200, "")
	b, r := e.readJSON("enc-basin", "secret", "seq_num=0", kh...)
	if b == nil || len(b.Records) != 3 || string(b.Records[0].Body) != "top secret" || string(b.Records[0].Headers[0].Name) != "h" ||
		string(b.Records[0].Headers[0].Value) != "v" || string(b.Records[1].Body) != "two" || len(b.Records[1].Headers) != 0 {
		t.Fatalf("read with the key: %s", r)
	}
	// What the node holds is ciphertext.
	raw, err := e.n.Read(context.Background(), "enc-basin", "secret", api.ReadRequest{From: api.FromSeqNum, Count: ptr(uint64(10))}, nil)
	if err != nil || len(raw.Records) != 3 || strings.Contains(string(raw.Records[0].Body), "top secret") || len(raw.Records[0].Headers) != 0 {
		t.Fatalf("stored record: %+v %v", raw.Records, err)
	}
	want(t, e.stream("enc-basin", "GET", "streams/secret/records?seq_num=0", nil), 400, api.CodeBadHeader)
	want(t, e.stream("enc-basin", "GET", "streams/secret/records?seq_num=0", nil, "s2-encryption-key", other), 400, api.CodeDecryptionFailed)
	want(t, e.stream("enc-basin", "GET", "streams/secret/records?seq_num=0", nil, "s2-encryption-key", "not base64!"), 400, api.CodeBadHeader)
	want(t, e.stream("enc-basin", "GET", "streams/secret/records?seq_num=0", nil, "s2-encryption-key", "AAEC"), 400, api.CodeBadHeader)
	want(t, e.appendJSON("enc-basin", "secret", body), 400, api.CodeBadHeader)
	// An auto-created stream takes the basin's cipher too.
	want(t, e.appendJSON("enc-basin", "auto", body), 400, api.CodeBadHeader)
	want(t, e.appendJSON("enc-basin", "auto", body, kh...), 200, "")
	if b, r := e.readJSON("enc-basin", "auto", "seq_num=0", kh...); b == nil || string(b.Records[0].Body) != "top secret" {
		t.Fatalf("auto-created encrypted stream: %s", r)
	}
	// A plain stream ignores a key.
	e.setupBasin("plain-enc-basin")
	want(t, e.appendJSON("plain-enc-basin", "p", body, kh...), 200, "")
	if b, r := e.readJSON("plain-enc-basin", "p", "seq_num=0"); b == nil || string(b.Records[0].Body) != "top secret" {
		t.Fatalf("plain stream: %s", r)
	}
}

func ptr[T any](v T) *T { return &v }
