package fs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/starlog/starlog/shared/objstore/fs"
)

// mode is how a benchmark's store writes: a temp file per PUT (unnamed,
// O_TMPFILE, the default where the kernel has it; or named in staging),
// or the journal.
type mode int

const (
	unnamed mode = iota
	named
	journal
)

func benchStore(b *testing.B, m mode) *fs.Store {
	// b.TempDir: the same disk as the repo here.
	st := openStoreAt(b, b.TempDir(), fs.Options{Journal: m == journal}, "bucket-a")
	if m == named {
		fs.NamedTemps(st)
	}
	return st
}

func benchBody(size int) []byte {
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i * 7)
	}
	return body
}

func benchPut(b *testing.B, size int, m mode) {
	bk := benchStore(b, m).Bucket("bucket-a")
	body := benchBody(size)
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

// modes runs a benchmark on each way of writing.
func modes(b *testing.B, f func(b *testing.B, m mode)) {
	b.Run("unnamed", func(b *testing.B) { f(b, unnamed) })
	b.Run("named", func(b *testing.B) { f(b, named) })
	b.Run("journal", func(b *testing.B) { f(b, journal) })
}

// BenchmarkFSPutIfAbsent4MiB is one durable create-once slot write: temp
// file, fsync, link, fsync of the folder (too big for the journal).
func BenchmarkFSPutIfAbsent4MiB(b *testing.B) {
	modes(b, func(b *testing.B, m mode) { benchPut(b, 4<<20, m) })
}

// BenchmarkFSPutIfAbsent64KiB shows the fixed (fsync-bound) cost; it is
// the largest body the journal takes.
func BenchmarkFSPutIfAbsent64KiB(b *testing.B) {
	modes(b, func(b *testing.B, m mode) { benchPut(b, 64<<10, m) })
}

// BenchmarkFSPutIfAbsent1KiB is the flight of one 1 KiB append (about
// 1.2 KiB rendered): the one-in-flight latency row of make bench-peer.
func BenchmarkFSPutIfAbsent1KiB(b *testing.B) {
	modes(b, func(b *testing.B, m mode) { benchPut(b, 1200, m) })
}

// BenchmarkFSPutIfAbsent1KiBx16 is 16 writers with one 1 KiB PUT in
// flight each, into 16 chains' folders: the 16-producer row, where the
// journal's group commit shares one data sync.
func BenchmarkFSPutIfAbsent1KiBx16(b *testing.B) {
	modes(b, func(b *testing.B, m mode) {
		bk := benchStore(b, m).Bucket("bucket-a")
		body := benchBody(1200)
		ctx := context.Background()
		var next atomic.Int64
		b.SetBytes(1200)
		b.SetParallelism(8) // 16 goroutines on this 2-core machine
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := next.Add(1)
				if _, err := bk.PutIfAbsent(ctx, fmt.Sprintf("chains/s%d/standard/0001/%012d", i%16, i), body); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
