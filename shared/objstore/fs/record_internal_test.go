package fs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/starlog/starlog/shared/objstore"
)

func seedRecords() [][]byte {
	a := appendRecord(nil, record{seq: 1, stamp: 1_700_000_000_000_000_000, bucket: "bkt", key: "chains/s1/standard/0001/000000", body: []byte("hello")})
	b := appendRecord(nil, record{seq: 2, stamp: 7, bucket: "standard--use1-az4--x-s3", key: "k", body: nil})
	two := append(bytes.Clone(a), b...)
	flipped := bytes.Clone(a)
	flipped[len(flipped)-1] ^= 1
	return [][]byte{a, b, two, a[:len(a)-1], a[:5], flipped, {}, {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}}
}

// FuzzJournalRecord feeds the decoder arbitrary bytes: it never panics or
// reads past its input, and whatever it accepts encodes back to exactly
// the bytes it consumed.
func FuzzJournalRecord(f *testing.F) {
	for _, s := range seedRecords() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, buf []byte) {
		for len(buf) > 0 {
			r, n, err := decodeRecord(buf)
			if err != nil {
				if !errors.Is(err, errTorn) {
					t.Fatalf("decode error %v is not errTorn", err)
				}
				return
			}
			if n <= 0 || n > len(buf) {
				t.Fatalf("decoded %d bytes of %d", n, len(buf))
			}
			if re := appendRecord(nil, r); !bytes.Equal(re, buf[:n]) {
				t.Fatalf("record %+v re-encodes to %x, consumed %x", r, re, buf[:n])
			}
			buf = buf[n:]
		}
	})
}

// A segment whose last record is torn (cut short, or its bytes changed
// after the length) replays every whole record before it and nothing of
// the torn one.
func TestReplayDropsTornTail(t *testing.T) {
	for name, tear := range map[string]func([]byte) []byte{
		"cut":     func(b []byte) []byte { return b[:len(b)-3] },
		"flipped": func(b []byte) []byte { b[len(b)-2] ^= 0x40; return b },
		"zeros":   func(b []byte) []byte { return append(b[:len(b)-len("third")], make([]byte, 64)...) },
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			pre, err := New(root)
			if err != nil {
				t.Fatal(err)
			}
			if err := pre.CreateBucket("bkt"); err != nil {
				t.Fatal(err)
			}
			pre.Close()
			var seg []byte
			for i, key := range []string{"a/1", "a/2", "a/3"} {
				seg = appendRecord(seg, record{seq: uint64(i + 1), stamp: int64(i + 1), bucket: "bkt", key: key, body: []byte([]string{"first", "second", "third"}[i])})
			}
			seg = tear(seg)
			if err := os.MkdirAll(filepath.Join(root, journalDir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, journalDir, "0000000000000001.seg"), seg, 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := Open(root, Options{Journal: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			b := s.Bucket("bkt")
			ctx := context.Background()
			for key, want := range map[string]string{"a/1": "first", "a/2": "second"} {
				if got, err := b.Get(ctx, key, 0, -1); err != nil || string(got) != want {
					t.Fatalf("%s after the replay: %q, %v", key, got, err)
				}
			}
			if got, err := b.Get(ctx, "a/3", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("the torn record was replayed: %q, %v", got, err)
			}
			if names, _ := os.ReadDir(filepath.Join(root, journalDir)); len(names) != 0 {
				t.Fatalf("the replayed segment was not retired: %v", names)
			}
		})
	}
}
