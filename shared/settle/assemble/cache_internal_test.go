package assemble

import (
	"bytes"
	"os"
	"testing"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// openFiles counts the process's open descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(fds)
}

// A warm bundle holds no descriptor: an era warms tens of thousands of
// bundles (41,510 in a 10,000-stream run of star dev), and one descriptor
// each exhausted the process's limit, failing every stream's settle and
// the star's own writes with EMFILE (a Lambda has 1,024).
func TestWarmBundlesHoldNoDescriptors(t *testing.T) {
	c, err := New(Options{ScratchDir: t.TempDir(), MaxBytes: 1 << 30, MaxFooter: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var nonce format.Nonce
	nonce[0] = 7
	const slots = 300
	before := openFiles(t)
	var warmed []*Slot
	for i := range uint64(slots) {
		body, err := format.EncodeBundle(1, i, nonce, []format.Batch{{StreamID: "s", Records: []format.Record{{SeqNum: i, Body: []byte{byte(i), 1, 2, 3}}}}})
		if err != nil {
			t.Fatal(err)
		}
		w := &Slot{ready: make(chan struct{})}
		if err := c.accept(SlotID{Star: "star1", Class: meta.Standard, Epoch: 1, Slot: i}, nonce, "standard", body, w); err != nil {
			t.Fatal(err)
		}
		warmed = append(warmed, w)
	}
	if grown := openFiles(t) - before; grown >= slots/10 {
		t.Fatalf("%d warm bundles hold %d more open descriptors", slots, grown)
	}
	for i, w := range warmed {
		xs := w.extents["s"]
		if len(xs) != 1 {
			t.Fatalf("slot %d: extents %v", i, xs)
		}
		raw, err := w.ReadAt(int64(xs[0].Offset), int64(xs[0].Length))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := format.DecodeBlocks(raw)
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		if len(recs) != 1 || !bytes.Equal(recs[0].Body, []byte{byte(i), 1, 2, 3}) {
			t.Fatalf("slot %d: read back %v", i, recs)
		}
	}
}
