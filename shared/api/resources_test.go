package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestResourceInfosGolden(t *testing.T) {
	created := time.Date(2025, 3, 4, 5, 6, 7, 890_000_000, time.FixedZone("x", 3600))
	deleted := time.Date(2025, 3, 5, 0, 0, 0, 0, time.UTC)

	b, _ := json.Marshal(BasinInfo{Name: "my-basin", CreatedAt: created})
	if string(b) != `{"name":"my-basin","created_at":"2025-03-04T04:06:07.89Z","deleted_at":null,"state":"active"}` {
		t.Fatalf("basin %s", b)
	}
	b, _ = json.Marshal(BasinInfo{Name: "my-basin", CreatedAt: created, DeletedAt: &deleted})
	if string(b) != `{"name":"my-basin","created_at":"2025-03-04T04:06:07.89Z","deleted_at":"2025-03-05T00:00:00Z","state":"deleting"}` {
		t.Fatalf("deleting basin %s", b)
	}
	var bi BasinInfo
	if err := json.Unmarshal(b, &bi); err != nil || !bi.CreatedAt.Equal(created) || !bi.DeletedAt.Equal(deleted) {
		t.Fatalf("basin round trip %+v %v", bi, err)
	}

	s, _ := json.Marshal(StreamInfo{Name: "a/b", CreatedAt: deleted})
	if string(s) != `{"name":"a/b","created_at":"2025-03-05T00:00:00Z","deleted_at":null}` {
		t.Fatalf("stream %s", s)
	}
	var si StreamInfo
	if err := json.Unmarshal(s, &si); err != nil || si.Name != "a/b" || si.DeletedAt != nil || !si.CreatedAt.Equal(deleted) {
		t.Fatalf("stream round trip %+v %v", si, err)
	}
	if err := json.Unmarshal([]byte(`{"name":"x","created_at":"yesterday"}`), &si); err == nil {
		t.Fatal("non-RFC 3339 time accepted")
	}
}

func TestListResponsesGolden(t *testing.T) {
	b, _ := json.Marshal(ListBasinsResponse{})
	if string(b) != `{"basins":[],"has_more":false}` {
		t.Fatalf("empty basins %s", b)
	}
	b, _ = json.Marshal(ListStreamsResponse{})
	if string(b) != `{"streams":[],"has_more":false}` {
		t.Fatalf("empty streams %s", b)
	}
	at := time.Unix(0, 0)
	b, _ = json.Marshal(ListStreamsResponse{Streams: []StreamInfo{{Name: "s", CreatedAt: at}}, HasMore: true})
	if string(b) != `{"streams":[{"name":"s","created_at":"1970-01-01T00:00:00Z","deleted_at":null}],"has_more":true}` {
		t.Fatalf("streams %s", b)
	}
	var back ListStreamsResponse
	if err := json.Unmarshal(b, &back); err != nil || len(back.Streams) != 1 || !back.HasMore {
		t.Fatalf("round trip %+v %v", back, err)
	}
}

func TestCreateRequests(t *testing.T) {
	r, err := DecodeCreateBasinRequest([]byte(`{"basin":"my-basin-1","config":{"create_stream_on_append":true},"location":"aws:us-east-1"}`))
	if err != nil || r.Basin != "my-basin-1" || !r.Config.CreateStreamOnAppend {
		t.Fatalf("%+v %v", r, err)
	}
	_, err = DecodeCreateBasinRequest([]byte(`{"basin":"Bad"}`))
	wantErr(t, err, 400, CodeBadJSON) // S2: the name does not deserialize
	_, err = DecodeCreateBasinRequest([]byte(`{"basin":"my-basin-1","config":{"default_stream_config":{"retention_policy":{"age":0}}}}`))
	wantErr(t, err, 422, CodeInvalid)
	_, err = DecodeCreateBasinRequest([]byte(`{"basin":`))
	wantErr(t, err, 400, CodeBadJSON)

	e, err := DecodeEnsureBasinRequest(nil)
	if err != nil || e.Config != nil {
		t.Fatalf("empty ensure: %+v %v", e, err)
	}
	e, err = DecodeEnsureBasinRequest([]byte(`{"config":{"create_stream_on_read":true}}`))
	if err != nil || !e.Config.CreateStreamOnRead {
		t.Fatalf("ensure: %+v %v", e, err)
	}

	s, err := DecodeCreateStreamRequest([]byte(`{"stream":"a/b","config":{"storage_class":"express"}}`))
	if err != nil || s.Stream != "a/b" || *s.Config.StorageClass != StorageExpress {
		t.Fatalf("%+v %v", s, err)
	}
	for _, body := range []string{`{}`, `{"stream":""}`, `{"stream":"` + strings.Repeat("x", 513) + `"}`, `{"stream":"."}`, `{"stream":".."}`} {
		_, err = DecodeCreateStreamRequest([]byte(body))
		wantErr(t, err, 400, CodeBadJSON)
	}
	_, err = DecodeCreateStreamRequest([]byte(`{"stream":"s","config":{"timestamping":{"mode":1}}}`))
	wantErr(t, err, 400, CodeBadJSON)
}

func TestHeaderHelpers(t *testing.T) {
	for v, want := range map[string]Format{"": FormatRaw, "raw": FormatRaw, "json": FormatRaw, " base64 ": FormatBase64, "json-binsafe": FormatBase64} {
		if f, err := ParseFormat(v); err != nil || f != want {
			t.Errorf("ParseFormat(%q) = %v %v", v, f, err)
		}
	}
	_, err := ParseFormat("hex")
	wantErr(t, err, 400, CodeBadHeader)

	media := map[string]MediaType{
		"":                                       MediaNone,
		"application/json":                       MediaJSON,
		"application/json; charset=utf-8":        MediaJSON,
		"Application/Problem+JSON":               MediaJSON,
		"application/protobuf":                   MediaProto,
		"application/x-protobuf, text/plain":     MediaProto,
		"application/json, application/protobuf": MediaJSON,
		"text/event-stream":                      MediaSSE,
		"s2s/proto":                              MediaS2S,
		"text/plain":                             MediaOther,
		"*/*":                                    MediaOther,
		"garbage":                                MediaOther,
	}
	for v, want := range media {
		if got := ParseMediaType(v); got != want {
			t.Errorf("ParseMediaType(%q) = %d, want %d", v, got, want)
		}
	}

	comp := map[string]Compression{
		"":                    CompressionNone,
		"gzip, deflate":       CompressionGzip,
		"deflate, gzip, zstd": CompressionZstd,
		"ZSTD;q=0.5":          CompressionZstd,
		"zstd;q=0, gzip":      CompressionGzip,
		"gzip;q=0":            CompressionNone,
		"br, identity":        CompressionNone,
	}
	for v, want := range comp {
		if got := NegotiateCompression(v); got != want {
			t.Errorf("NegotiateCompression(%q) = %v, want %v", v, got, want)
		}
	}
	if NegotiateCompression("gzip", "zstd") != CompressionZstd {
		t.Error("several header values")
	}
}
