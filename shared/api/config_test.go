package api

import (
	"encoding/json"
	"reflect"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestStreamConfigJSONGolden(t *testing.T) {
	full := `{"storage_class":"express","retention_policy":{"age":3600},"timestamping":{"mode":"client-require","uncapped":true},"delete_on_empty":{"min_age_secs":60}}`
	c, err := DecodeStreamConfig([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	want := StreamConfig{
		StorageClass:    ptr(StorageExpress),
		RetentionPolicy: &RetentionPolicy{AgeSecs: 3600},
		Timestamping:    &TimestampingConfig{Mode: ptr(ClientRequire), Uncapped: ptr(true)},
		DeleteOnEmpty:   &DeleteOnEmptyConfig{MinAgeSecs: 60},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %+v", c)
	}
	out, _ := json.Marshal(c)
	if string(out) != full {
		t.Fatalf("re-encoded %s", out)
	}
	inf, err := DecodeStreamConfig([]byte(`{"retention_policy":{"infinite":{}},"storage_class":null}`))
	if err != nil || inf.RetentionPolicy == nil || !inf.RetentionPolicy.Infinite || inf.StorageClass != nil {
		t.Fatalf("infinite: %+v %v", inf, err)
	}
	if out, _ := json.Marshal(inf); string(out) != `{"retention_policy":{"infinite":{}}}` {
		t.Fatalf("infinite re-encoded %s", out)
	}
	for _, empty := range []string{"", " ", "null", "{}"} {
		c, err := DecodeStreamConfig([]byte(empty))
		if err != nil || !reflect.DeepEqual(c, StreamConfig{}) {
			t.Errorf("%q: %+v %v", empty, c, err)
		}
	}
}

func TestStreamConfigErrors(t *testing.T) {
	cases := []struct {
		body   string
		status int
		code   string
	}{
		{`{"retention_policy":{"age":0}}`, 422, CodeInvalid},
		{`{"storage_class":"premium"}`, 400, CodeBadJSON},
		{`{"storage_class":1}`, 400, CodeBadJSON},
		{`{"timestamping":{"mode":"client"}}`, 400, CodeBadJSON},
		{`{"retention_policy":{"age":1,"infinite":{}}}`, 400, CodeBadJSON},
		{`{"retention_policy":{}}`, 400, CodeBadJSON},
		{`{"retention_policy":{"forever":{}}}`, 400, CodeBadJSON},
		{`{"retention_policy":{"age":-5}}`, 400, CodeBadJSON},
		{`{"retention_policy":{"age":null}}`, 400, CodeBadJSON},
		{`{"retention_policy":{"infinite":true}}`, 400, CodeBadJSON},
		{`{"retention_policy":"infinite"}`, 400, CodeBadJSON},
		{`{"delete_on_empty":{"min_age_secs":"1"}}`, 400, CodeBadJSON},
		{`[]`, 400, CodeBadJSON},
	}
	for _, c := range cases {
		_, err := DecodeStreamConfig([]byte(c.body))
		if err == nil || err.Status != c.status || err.Code != c.code {
			t.Errorf("%s: got %v, want %d %s", c.body, err, c.status, c.code)
		}
	}
	_, err := ParseStreamConfigHeader(`{"storage_class":`)
	wantErr(t, err, 400, CodeBadHeader)
	_, err = ParseStreamConfigHeader(`{"retention_policy":{"age":0}}`)
	wantErr(t, err, 422, CodeInvalid)
	c, err := ParseStreamConfigHeader(`{"storage_class":"express"}`)
	if err != nil || *c.StorageClass != StorageExpress {
		t.Fatalf("header: %+v %v", c, err)
	}
}

func TestDefaultsAndResolve(t *testing.T) {
	d := StreamConfig{}.Resolve(nil)
	want := EffectiveStreamConfig{StorageClass: StorageStandard, Retention: RetentionPolicy{AgeSecs: 604800}, TimestampingMode: ClientPrefer}
	if d != want || DefaultStreamConfig() != want {
		t.Fatalf("defaults %+v", d)
	}
	// GET config returns the fully merged config.
	out, _ := json.Marshal(d.StreamConfig())
	if string(out) != `{"storage_class":"standard","retention_policy":{"age":604800},"timestamping":{"mode":"client-prefer","uncapped":false},"delete_on_empty":{"min_age_secs":0}}` {
		t.Fatalf("resolved JSON %s", out)
	}
	basin := &StreamConfig{
		StorageClass: ptr(StorageExpress),
		Timestamping: &TimestampingConfig{Uncapped: ptr(true)},
	}
	stream := StreamConfig{
		RetentionPolicy: &RetentionPolicy{Infinite: true},
		Timestamping:    &TimestampingConfig{Mode: ptr(Arrival)},
	}
	got := stream.Resolve(basin)
	want = EffectiveStreamConfig{StorageClass: StorageExpress, Retention: RetentionPolicy{Infinite: true}, TimestampingMode: Arrival, Uncapped: true}
	if got != want {
		t.Fatalf("resolve %+v", got)
	}
	// The stream's own fields win over the basin's.
	stream.StorageClass = ptr(StorageStandard)
	if stream.Resolve(basin).StorageClass != StorageStandard {
		t.Fatal("stream storage class lost to basin default")
	}
	// Merge fills timestamping field by field and leaves its inputs alone.
	m := stream.Merge(*basin)
	if *m.Timestamping.Mode != Arrival || !*m.Timestamping.Uncapped || stream.Timestamping.Uncapped != nil {
		t.Fatalf("merge %+v, stream %+v", m.Timestamping, stream.Timestamping)
	}
}

func TestPatchNullVersusAbsent(t *testing.T) {
	var r StreamReconfiguration
	if err := json.Unmarshal([]byte(`{"storage_class":null,"retention_policy":{"age":10},"timestamping":{"uncapped":null}}`), &r); err != nil {
		t.Fatal(err)
	}
	if !r.StorageClass.Set || r.StorageClass.Value != nil {
		t.Fatalf("null storage_class: %+v", r.StorageClass)
	}
	if !r.RetentionPolicy.Set || r.RetentionPolicy.Value.AgeSecs != 10 {
		t.Fatalf("retention: %+v", r.RetentionPolicy)
	}
	if r.DeleteOnEmpty.Set {
		t.Fatal("absent delete_on_empty marked set")
	}
	ts := r.Timestamping.Value
	if ts == nil || ts.Mode.Set || !ts.Uncapped.Set || ts.Uncapped.Value != nil {
		t.Fatalf("timestamping: %+v", ts)
	}
	out, _ := json.Marshal(r)
	if string(out) != `{"storage_class":null,"retention_policy":{"age":10},"timestamping":{"uncapped":null}}` {
		t.Fatalf("re-encoded %s", out)
	}
}

func TestReconfigure(t *testing.T) {
	base := StreamConfig{
		StorageClass:    ptr(StorageExpress),
		RetentionPolicy: &RetentionPolicy{AgeSecs: 100},
		Timestamping:    &TimestampingConfig{Mode: ptr(Arrival), Uncapped: ptr(true)},
		DeleteOnEmpty:   &DeleteOnEmptyConfig{MinAgeSecs: 5},
	}
	// Empty: nothing changes.
	r, err := DecodeStreamReconfiguration([]byte(`{}`))
	if err != nil || !reflect.DeepEqual(base.Reconfigure(r), base) {
		t.Fatalf("empty reconfiguration changed %+v", base.Reconfigure(r))
	}
	// Nulls reset to unset (so defaults apply again).
	r, _ = DecodeStreamReconfiguration([]byte(`{"storage_class":null,"retention_policy":null,"timestamping":null,"delete_on_empty":null}`))
	if got := base.Reconfigure(r); !reflect.DeepEqual(got, StreamConfig{}) {
		t.Fatalf("nulls: %+v", got)
	}
	// Objects patch field by field.
	r, _ = DecodeStreamReconfiguration([]byte(`{"timestamping":{"mode":"client-prefer"},"delete_on_empty":{"min_age_secs":9}}`))
	got := base.Reconfigure(r)
	if *got.Timestamping.Mode != ClientPrefer || !*got.Timestamping.Uncapped || got.DeleteOnEmpty.MinAgeSecs != 9 || *got.StorageClass != StorageExpress {
		t.Fatalf("patch: %+v", got)
	}
	if *base.Timestamping.Mode != Arrival {
		t.Fatal("Reconfigure mutated its receiver")
	}
	r, _ = DecodeStreamReconfiguration([]byte(`{"delete_on_empty":{}}`))
	if got := base.Reconfigure(r); got.DeleteOnEmpty == nil || got.DeleteOnEmpty.MinAgeSecs != 5 {
		t.Fatalf("empty delete_on_empty object: %+v", got.DeleteOnEmpty)
	}
	r, _ = DecodeStreamReconfiguration([]byte(`{"delete_on_empty":{"min_age_secs":null}}`))
	if got := base.Reconfigure(r); got.DeleteOnEmpty != nil {
		t.Fatalf("null min_age_secs: %+v", got.DeleteOnEmpty)
	}
	_, err = DecodeStreamReconfiguration([]byte(`{"retention_policy":{"age":0}}`))
	wantErr(t, err, 422, CodeInvalid)
	_, err = DecodeStreamReconfiguration([]byte(`{"storage_class":"gold"}`))
	wantErr(t, err, 400, CodeBadJSON)
}

func TestBasinConfig(t *testing.T) {
	body := `{"default_stream_config":{"storage_class":"express","retention_policy":{"age":86400}},"create_stream_on_append":true,"create_stream_on_read":false}`
	c, err := DecodeBasinConfig([]byte(body))
	if err != nil || !c.CreateStreamOnAppend || c.CreateStreamOnRead || *c.DefaultStreamConfig.StorageClass != StorageExpress {
		t.Fatalf("%+v %v", c, err)
	}
	if out, _ := json.Marshal(c); string(out) != body {
		t.Fatalf("re-encoded %s", out)
	}
	if out, _ := json.Marshal(BasinConfig{}); string(out) != `{"create_stream_on_append":false,"create_stream_on_read":false}` {
		t.Fatalf("empty basin config %s", out)
	}
	_, err = DecodeBasinConfig([]byte(`{"default_stream_config":{"retention_policy":{"age":0}}}`))
	wantErr(t, err, 422, CodeInvalid)
	_, err = DecodeBasinConfig([]byte(`{"stream_cipher":"aegis-256"}`))
	wantErr(t, err, 422, CodeInvalid)
	if _, err = DecodeBasinConfig([]byte(`{"stream_cipher":null}`)); err != nil {
		t.Fatalf("null cipher: %v", err)
	}
	if bc, err := DecodeBasinConfig([]byte(`{"stream_cipher":"aes-256-gcm"}`)); err != nil || *bc.StreamCipher != CipherAES256GCM {
		t.Fatalf("aes-256-gcm cipher: %v", err)
	}
	_, err = DecodeBasinConfig([]byte(`{"create_stream_on_append":"yes"}`))
	wantErr(t, err, 400, CodeBadJSON)

	r, err := DecodeBasinReconfiguration([]byte(`{"default_stream_config":{"storage_class":null,"timestamping":{"mode":"arrival"}},"create_stream_on_read":true}`))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Reconfigure(r)
	if got.DefaultStreamConfig.StorageClass != nil || *got.DefaultStreamConfig.Timestamping.Mode != Arrival ||
		got.DefaultStreamConfig.RetentionPolicy.AgeSecs != 86400 || !got.CreateStreamOnAppend || !got.CreateStreamOnRead {
		t.Fatalf("basin reconfigure %+v / %+v", got, got.DefaultStreamConfig)
	}
	r, _ = DecodeBasinReconfiguration([]byte(`{"default_stream_config":null,"create_stream_on_append":null}`))
	if got := c.Reconfigure(r); got.DefaultStreamConfig != nil || got.CreateStreamOnAppend {
		t.Fatalf("basin nulls %+v", got)
	}
	if r, err := DecodeBasinReconfiguration([]byte(`{"stream_cipher":"aes-256-gcm"}`)); err != nil || *c.Reconfigure(r).StreamCipher != CipherAES256GCM {
		t.Fatalf("cipher reconfiguration: %v", err)
	}
	_, err = DecodeBasinReconfiguration([]byte(`{"stream_cipher":"aegis-256"}`))
	wantErr(t, err, 422, CodeInvalid)
	_, err = DecodeBasinReconfiguration([]byte(`{"stream_cipher":"rot13"}`))
	wantErr(t, err, 422, CodeInvalid)
	_, err = DecodeBasinReconfiguration([]byte(`{"default_stream_config":{"retention_policy":{"age":0}}}`))
	wantErr(t, err, 422, CodeInvalid)
}
