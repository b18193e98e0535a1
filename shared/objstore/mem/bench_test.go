package mem_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/starlog/starlog/shared/objstore/mem"
)

func BenchmarkMemPutIfAbsent4MiB(b *testing.B) {
	st, err := mem.New("bucket-a")
	if err != nil {
		b.Fatal(err)
	}
	bk := st.Bucket("bucket-a")
	body := make([]byte, 4<<20)
	ctx := context.Background()
	b.SetBytes(int64(len(body)))
	i := 0
	for b.Loop() {
		key := fmt.Sprintf("chains/s1/standard/0001/%012d", i)
		if _, err := bk.PutIfAbsent(ctx, key, body); err != nil {
			b.Fatal(err)
		}
		// Keep the heap flat: the benchmark measures the put, not growth.
		b.StopTimer()
		if err := bk.Delete(ctx, key); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		i++
	}
}
