package fs_test

import (
	"context"
	"fmt"
	"testing"
)

func benchPut(b *testing.B, size int) {
	st := newStore(b, "bucket-a") // b.TempDir: the same disk as the repo here
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

// BenchmarkFSPutIfAbsent4MiB is one durable create-once slot write: temp
// file, fsync, link, fsync of the folder.
func BenchmarkFSPutIfAbsent4MiB(b *testing.B) { benchPut(b, 4<<20) }

// BenchmarkFSPutIfAbsent64KiB shows the fixed (fsync-bound) cost.
func BenchmarkFSPutIfAbsent64KiB(b *testing.B) { benchPut(b, 64<<10) }
