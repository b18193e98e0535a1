package chain

import (
	"errors"
	"hash/crc32"
	"testing"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/objstore"
)

// withVersion rewrites an envelope's version byte and fixes its CRC, so it
// is well-formed for a reader of that version and unknown to older ones.
func withVersion(obj []byte, v byte) []byte {
	out := append([]byte(nil), obj...)
	out[4] = v
	sum := crc32.Checksum(out[:56], crc32.MakeTable(crc32.Castagnoli))
	out[56], out[57], out[58], out[59] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
	return out
}

// Every kind of answer a read of a slot's envelope can give, classified
// for the writer of (epoch 3, slot 9, nonce n).
func TestClassify(t *testing.T) {
	n := format.Nonce{1, 2, 3}
	other := format.Nonce{9}
	want := copyID{3, 9, n}
	flight, err := format.EncodeBundle(3, 9, n, []format.Batch{{StreamID: "s", Records: []format.Record{{SeqNum: 0, Timestamp: 1, Body: []byte("x")}}}})
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), flight...)
	flipped[20] ^= 0x10 // inside the epoch field: the envelope CRC no longer matches
	foreign, _ := format.EncodeBundle(3, 9, other, []format.Batch{{StreamID: "s", Records: []format.Record{{SeqNum: 0, Timestamp: 1}}}})
	misplaced, _ := format.EncodeBundle(3, 8, n, []format.Batch{{StreamID: "s", Records: []format.Record{{SeqNum: 0, Timestamp: 1}}}})
	cases := []struct {
		name string
		raw  []byte
		err  error
		max  uint8
		occ  Occupant
		fail bool
	}{
		{"absent", nil, objstore.ErrNotFound, 1, Unknown, false},
		{"read failed", nil, errors.New("timeout"), 1, Unknown, true},
		{"the writer's copy", flight[:60], nil, 1, Flight, false},
		{"a poison", format.EncodePoison(3, 9, other), nil, 1, Poison, false},
		{"a poison of another slot", format.EncodePoison(4, 9, other), nil, 1, Poison, false},
		{"a copy by another nonce", foreign[:60], nil, 1, Poison, false},
		{"a copy of another slot", misplaced[:60], nil, 1, Poison, false},
		{"a flipped bit", flipped[:60], nil, 1, Unreadable, false},
		{"truncated", flight[:30], nil, 1, Unreadable, false},
		{"garbage", []byte("not an envelope at all, not even close, sixty bytes or more...."), nil, 1, Unreadable, false},
		{"a newer version (old reader)", withVersion(flight[:60], 2), nil, 1, Unreadable, false},
		{"a newer version (new reader)", withVersion(flight[:60], 2), nil, 2, Flight, false},
		{"a newer poison (old reader)", withVersion(format.EncodePoison(3, 9, other), 2), nil, 1, Unreadable, false},
		{"version zero", withVersion(flight[:60], 0), nil, 2, Unreadable, false},
	}
	for _, c := range cases {
		occ, err := classify(c.raw, c.err, want, c.max)
		if occ != c.occ || (err != nil) != c.fail {
			t.Errorf("%s: got (%v, %v), want (%v, fail=%v)", c.name, occ, err, c.occ, c.fail)
		}
	}
}
