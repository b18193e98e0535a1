package fs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/starlog/starlog/shared/objstore/fs"
)

func benchPut(b *testing.B, size int, named bool) {
	st := newStore(b, "bucket-a") // b.TempDir: the same disk as the repo here
	if named {
		fs.NamedTemps(st)
	}
	bk := st.Bucket("bucket-a")
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i * 7)
	}
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, err := bk.PutIfAbsent(ctx, fmt.Sprintf("chains/s1/standard/0001/%012d", i), body); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// temps runs a benchmark on both kinds of temp file: unnamed (O_TMPFILE,
// the default where the kernel has it) and named in staging.
func temps(b *testing.B, size int) {
	b.Run("unnamed", func(b *testing.B) { benchPut(b, size, false) })
	b.Run("named", func(b *testing.B) { benchPut(b, size, true) })
}

// BenchmarkFSPutIfAbsent4MiB is one durable create-once slot write: temp
// file, fsync, link, fsync of the folder.
func BenchmarkFSPutIfAbsent4MiB(b *testing.B) { temps(b, 4<<20) }

// BenchmarkFSPutIfAbsent64KiB shows the fixed (fsync-bound) cost.
func BenchmarkFSPutIfAbsent64KiB(b *testing.B) { temps(b, 64<<10) }

// BenchmarkFSPutIfAbsent1KiB is the flight of one 1 KiB append (about
// 1.2 KiB rendered): the one-in-flight latency row of make bench-peer.
func BenchmarkFSPutIfAbsent1KiB(b *testing.B) { temps(b, 1200) }
