package meta

import (
	"bytes"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// FuzzDecodeRows: the row decoders never panic, and a row they accept
// re-encodes to a value that decodes to the same row.
func FuzzDecodeRows(f *testing.F) {
	now := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	ex := api.StorageExpress
	f.Add(Encode(BasinRow{ID: "b1", Config: api.BasinConfig{CreateStreamOnAppend: true}, CreatedAt: now}))
	f.Add(Encode(StreamRow{ID: "s1", BasinID: "b1", Config: api.StreamConfig{StorageClass: &ex}, CreatedAt: now, DeletedAt: &now}))
	f.Add(Encode(Registration{Incarnation: 3, State: StarLive}))
	f.Add([]byte(`{"id":""}`))
	f.Add([]byte(`{"id":"x","config":{"default_stream_config":{"storage_class":"glacier"}}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, val []byte) {
		it := Item{PK: "basin#b", SK: "cfg", Val: val}
		if b, err := DecodeBasinRow(it); err == nil {
			again, err := DecodeBasinRow(Item{Val: Encode(b)})
			if err != nil || !bytes.Equal(Encode(again), Encode(b)) {
				t.Fatalf("basin row does not round-trip: %v", err)
			}
		}
		if s, err := DecodeStreamRow(it); err == nil {
			again, err := DecodeStreamRow(Item{Val: Encode(s)})
			if err != nil || !bytes.Equal(Encode(again), Encode(s)) {
				t.Fatalf("stream row does not round-trip: %v", err)
			}
		}
		DecodeBasinRowLenient(it)
		DecodeStreamRowLenient(it)
		DecodeBasinDirRow(it)
		DecodeTombstone(it)
	})
}

// The stars and the auditor kept two copies of these rows: the stars'
// refused a row without an id, the auditor's (which knew only some
// fields) took it with an empty id and skipped it. One definition keeps
// both readings: an old-shape row (written before S2 fidelity stored the
// resolved config, before create keys and ciphers, with a field no
// build knows) decodes the same both ways; a row without an id is an
// error strictly and an empty id leniently.
func TestCatalogRowsDecodeBothWays(t *testing.T) {
	oldStream := Item{PK: "basin#b", SK: "s#old", Val: []byte(`{"id":"s1","basin_id":"b1","config":{"retention_policy":{"age":60}},` +
		`"created_at":"2024-01-02T03:04:05Z","request_token":"tok","later_field":{"x":1}}`)}
	strict, err := DecodeStreamRow(oldStream)
	if err != nil {
		t.Fatalf("strict decode of an old-shape stream row: %v", err)
	}
	lenient, err := DecodeStreamRowLenient(oldStream)
	if err != nil {
		t.Fatalf("lenient decode of an old-shape stream row: %v", err)
	}
	if !bytes.Equal(Encode(strict), Encode(lenient)) {
		t.Fatalf("the two readings differ:\nstrict  %s\nlenient %s", Encode(strict), Encode(lenient))
	}
	if strict.ID != "s1" || strict.BasinID != "b1" || strict.DeletedAt != nil || strict.CreateKey != "" || strict.Cipher != "" ||
		strict.RequestToken != "tok" || strict.Config.StorageClass != nil || !strict.CreatedAt.Equal(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("old-shape stream row decoded as %+v", strict)
	}
	if r := strict.Config.RetentionPolicy; r == nil || r.AgeSecs != 60 {
		t.Fatalf("old-shape stream row's retention: %+v", strict.Config.RetentionPolicy)
	}

	oldBasin := Item{PK: "basin#b", SK: "cfg", Val: []byte(`{"id":"b1","config":{"create_stream_on_append":true},"created_at":"2024-01-02T03:04:05Z",` +
		`"deleted_at":"2024-02-02T00:00:00Z","later_field":7}`)}
	sb, err := DecodeBasinRow(oldBasin)
	if err != nil {
		t.Fatalf("strict decode of an old-shape basin row: %v", err)
	}
	lb, err := DecodeBasinRowLenient(oldBasin)
	if err != nil || !bytes.Equal(Encode(sb), Encode(lb)) {
		t.Fatalf("lenient basin decode %+v (%v) differs from strict %+v", lb, err, sb)
	}
	if sb.ID != "b1" || !sb.Config.CreateStreamOnAppend || sb.DeletedAt == nil {
		t.Fatalf("old-shape basin row decoded as %+v", sb)
	}

	noID := Item{PK: "basin#b", SK: "s#x", Val: []byte(`{"config":{}}`)}
	if _, err := DecodeStreamRow(noID); err == nil {
		t.Fatal("strict decode took a stream row without an id")
	}
	if r, err := DecodeStreamRowLenient(noID); err != nil || r.ID != "" {
		t.Fatalf("lenient decode of a stream row without an id: %+v, %v; want an empty id and no error", r, err)
	}
	if _, err := DecodeBasinRow(Item{Val: []byte(`{}`)}); err == nil {
		t.Fatal("strict decode took a basin row without an id")
	}
	if r, err := DecodeBasinRowLenient(Item{Val: []byte(`{}`)}); err != nil || r.ID != "" {
		t.Fatalf("lenient decode of a basin row without an id: %+v, %v", r, err)
	}
	if _, err := DecodeStreamRowLenient(Item{Val: []byte(`{`)}); err == nil {
		t.Fatal("lenient decode took a corrupt row")
	}
}
