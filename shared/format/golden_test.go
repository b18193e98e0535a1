package format

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current encoders")

// goldenVectors are fixed inputs whose encodings are checked in: any change
// to a layout, deliberate or not, fails here until the vectors are
// regenerated with `go test ./shared/format -run Golden -update` (and the
// version bumped, see docs/format.md).
func goldenVectors(t *testing.T) map[string][]byte {
	settled, _ := sampleSettled(t)
	env := Envelope{Kind: KindFlight, Epoch: 0x0102030405060708, Slot: 42, Nonce: sampleNonce,
		ObjectSize: 4096, FooterOffset: 4000, FooterLen: 96}.Marshal()
	return map[string][]byte{
		"envelope_flight": env[:],
		"poison":          EncodePoison(7, 13, sampleNonce),
		"block":           AppendBlock(nil, sampleRecords(1000, 6, 1_700_000_000_000)),
		"bundle":          sampleBundle(t),
		"bundle_empty": func() []byte {
			b, err := EncodeBundle(1, 0, sampleNonce, nil)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}(),
		"settled": settled,
	}
}

func TestGolden(t *testing.T) {
	for name, got := range goldenVectors(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", "golden", name+".hex")
			if *update {
				if err := os.WriteFile(path, []byte(toHexLines(got)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			want, err := hex.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding changed from %s:\n got %x\nwant %x", path, got, want)
			}
			checkGoldenDecodes(t, name, want)
		})
	}
}

// checkGoldenDecodes decodes the checked-in bytes, so a decoder change that
// stops reading existing objects fails too.
func checkGoldenDecodes(t *testing.T, name string, b []byte) {
	var err error
	switch name {
	case "envelope_flight":
		var e Envelope
		e, err = DecodeEnvelope(b)
		if err == nil && (e.Epoch != 0x0102030405060708 || e.Slot != 42 || e.FooterOffset != 4000) {
			t.Fatalf("decoded %+v", e)
		}
	case "poison":
		var e Envelope
		e, err = DecodeEnvelope(b)
		if err == nil && (e.Kind != KindPoison || e.Epoch != 7 || e.Slot != 13 || e.Nonce != sampleNonce) {
			t.Fatalf("decoded %+v", e)
		}
	case "block":
		var recs []Record
		recs, _, err = DecodeBlock(b)
		if err == nil {
			err = recordsEqual(recs, sampleRecords(1000, 6, 1_700_000_000_000))
		}
	case "bundle", "bundle_empty":
		_, _, err = DecodeBundle(b)
	case "settled":
		var f SettledFooter
		f, err = VerifySettledObject(b)
		if err == nil && (f.StreamID != "s-alpha" || f.FirstSeq != 100 || f.EndSeq != 109 || len(f.Entries) != 3) {
			t.Fatalf("decoded %+v", f)
		}
	default:
		t.Fatalf("no decoder check for %s", name)
	}
	if err != nil {
		t.Fatalf("golden %s no longer decodes: %v", name, err)
	}
}

func toHexLines(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		n := min(len(b), 32)
		sb.WriteString(hex.EncodeToString(b[:n]))
		sb.WriteByte('\n')
		b = b[n:]
	}
	return sb.String()
}
