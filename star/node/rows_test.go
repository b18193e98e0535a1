package node

import (
	"bytes"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
)

// FuzzDecodeRows: the row decoders never panic, and a row they accept
// re-encodes to a value that decodes to the same row.
func FuzzDecodeRows(f *testing.F) {
	now := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	ex := api.StorageExpress
	f.Add(meta.Encode(BasinRow{ID: "b1", Config: api.BasinConfig{CreateStreamOnAppend: true}, CreatedAt: now}))
	f.Add(meta.Encode(StreamRow{ID: "s1", BasinID: "b1", Config: api.StreamConfig{StorageClass: &ex}, CreatedAt: now, DeletedAt: &now}))
	f.Add(meta.Encode(Registration{Incarnation: 3, State: StateLive}))
	f.Add([]byte(`{"id":""}`))
	f.Add([]byte(`{"id":"x","config":{"default_stream_config":{"storage_class":"glacier"}}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, val []byte) {
		it := meta.Item{PK: "basin#b", SK: "cfg", Val: val}
		if b, err := decodeBasinRow(it); err == nil {
			again, err := decodeBasinRow(meta.Item{Val: meta.Encode(b)})
			if err != nil || !bytes.Equal(meta.Encode(again), meta.Encode(b)) {
				t.Fatalf("basin row does not round-trip: %v", err)
			}
		}
		if s, err := decodeStreamRow(it); err == nil {
			again, err := decodeStreamRow(meta.Item{Val: meta.Encode(s)})
			if err != nil || !bytes.Equal(meta.Encode(again), meta.Encode(s)) {
				t.Fatalf("stream row does not round-trip: %v", err)
			}
		}
		decodeRow[Registration](it)
		decodeRow[BasinDirRow](it)
	})
}

func TestLifecycle(t *testing.T) {
	now := time.Now()
	del := now.Add(-time.Second)
	if lifecycleOf(nil, time.Minute, now) != alive {
		t.Fatal("undeleted is alive")
	}
	if lifecycleOf(&del, time.Minute, now) != deleting {
		t.Fatal("recently deleted is deleting")
	}
	if lifecycleOf(&del, time.Second, now) != gone {
		t.Fatal("deleted past the pending time is gone")
	}
}

func TestValidateStarID(t *testing.T) {
	for _, ok := range []string{"a", "star-1", "ip-10-0-0-1"} {
		if err := ValidateStarID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a/b", "a:b", string(make([]byte, 64))} {
		if ValidateStarID(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for in, want := range map[string]string{"Host.Example.COM": "host-example-com", "---": "star", "ip_10_0_0_1": "ip-10-0-0-1"} {
		if got := SanitizeStarID(in); got != want || ValidateStarID(got) != nil {
			t.Errorf("SanitizeStarID(%q) = %q, want %q", in, got, want)
		}
	}
}
