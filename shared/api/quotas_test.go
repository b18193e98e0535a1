package api

import (
	"encoding/json"
	"testing"
)

func TestBasinQuotasDecode(t *testing.T) {
	c, err := DecodeBasinConfig([]byte(`{"quotas":{"stored_bytes":1000,"append_bytes_per_sec":10,"streams":0,"bogus":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	q := c.Quotas
	if q == nil || *q.StoredBytes != 1000 || *q.AppendBytesPerSec != 10 || *q.Streams != 0 {
		t.Fatalf("quotas = %+v", q)
	}
	if out, _ := json.Marshal(BasinConfig{}); string(out) != `{"create_stream_on_append":false,"create_stream_on_read":false}` {
		t.Fatalf("a basin without quotas encodes them: %s", out)
	}
	for body, want := range map[string]string{
		`{"quotas":{"streams":-1}}`:                        CodeBadJSON,
		`{"quotas":{"stored_bytes":18446744073709551616}}`: CodeBadJSON,
		`{"quotas":{"append_bytes_per_sec":1.5}}`:          CodeBadJSON,
		`{"quotas":{"stored_bytes":"1"}}`:                  CodeBadJSON,
		`{"quotas":{"stored_bytes":9007199254740993}}`:     CodeInvalid,
		`{"quotas":7}`: CodeBadJSON,
	} {
		_, err := DecodeBasinConfig([]byte(body))
		if err == nil || err.Code != want {
			t.Errorf("%s: err %v, want %s", body, err, want)
		}
		if _, err := DecodeBasinReconfiguration([]byte(body)); err == nil || err.Code != want {
			t.Errorf("reconfigure %s: err %v, want %s", body, err, want)
		}
	}
}

func TestBasinQuotasReconfigure(t *testing.T) {
	c, _ := DecodeBasinConfig([]byte(`{"quotas":{"stored_bytes":1000,"streams":3}}`))
	r, err := DecodeBasinReconfiguration([]byte(`{"quotas":{"stored_bytes":null,"append_bytes_per_sec":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Reconfigure(r).Quotas
	if got == nil || got.StoredBytes != nil || *got.AppendBytesPerSec != 5 || *got.Streams != 3 {
		t.Fatalf("patched quotas = %+v", got)
	}
	if c.Quotas.StoredBytes == nil {
		t.Fatal("the patch changed the config it was applied to")
	}
	r, _ = DecodeBasinReconfiguration([]byte(`{"create_stream_on_read":true}`))
	if got := c.Reconfigure(r).Quotas; got == nil || *got.StoredBytes != 1000 {
		t.Fatalf("an absent quotas field changed them: %+v", got)
	}
	r, _ = DecodeBasinReconfiguration([]byte(`{"quotas":null}`))
	if got := c.Reconfigure(r).Quotas; got != nil {
		t.Fatalf("null quotas left %+v", got)
	}
	r, _ = DecodeBasinReconfiguration([]byte(`{"quotas":{"stored_bytes":null,"streams":null}}`))
	if got := c.Reconfigure(r).Quotas; got != nil {
		t.Fatalf("every quota unset left %+v", got)
	}
}
