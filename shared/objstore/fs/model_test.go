package fs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"pgregory.net/rapid"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/fs"
	"github.com/starlog/starlog/shared/objstore/mem"
)

// outcome classes an error the way callers branch on it.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case objstore.IsIndefinite(err):
		return "indefinite"
	case errors.Is(err, objstore.ErrExists):
		return "exists"
	case errors.Is(err, objstore.ErrNotFound):
		return "not-found"
	case errors.Is(err, objstore.ErrKeyConflict):
		return "conflict"
	case errors.Is(err, objstore.ErrPartTooSmall):
		return "too-small"
	}
	return "error: " + err.Error()
}

// TestSameBehaviourAsMem runs random operations over a small set of keys
// that nest into each other, on fs and on mem, and requires the same
// outcome from both at every step: mem is the executable model of the
// nesting rules versitygw imposes.
func TestSameBehaviourAsMem(t *testing.T) {
	keys := []string{"a", "a/b", "a/c", "a/b/c", "a/b/d", "b", "b/a", "c/d/e", "c/d", "c"}
	base := memoryTempDir(t)
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		root, err := os.MkdirTemp(base, "model-")
		if err != nil {
			rt.Fatal(err)
		}
		journal := rapid.Bool().Draw(rt, "journal")
		fst := openStoreAt(t, root, fs.Options{Journal: journal}, "bucket-a")
		if rapid.Bool().Draw(rt, "named temps") {
			fs.NamedTemps(fst)
		}
		mst, err := mem.New("bucket-a")
		if err != nil {
			rt.Fatal(err)
		}
		f, m := fst.Bucket("bucket-a"), mst.Bucket("bucket-a")
		key := rapid.SampledFrom(keys)
		same := func(what string, fe, me error) {
			if outcome(fe) != outcome(me) {
				rt.Fatalf("%s: fs %s, mem %s", what, outcome(fe), outcome(me))
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"put": func(rt *rapid.T) {
				k := key.Draw(rt, "key")
				body := []byte(fmt.Sprintf("%s#%d", k, rapid.IntRange(0, 9).Draw(rt, "v")))
				_, fe := f.PutIfAbsent(ctx, k, body)
				_, me := m.PutIfAbsent(ctx, k, body)
				same("put "+k, fe, me)
			},
			"delete": func(rt *rapid.T) {
				k := key.Draw(rt, "key")
				same("delete "+k, f.Delete(ctx, k), m.Delete(ctx, k))
			},
			"deleteMany": func(rt *rapid.T) {
				ks := []string{key.Draw(rt, "k1"), key.Draw(rt, "k2")}
				same(fmt.Sprint("deleteMany ", ks), f.DeleteMany(ctx, ks), m.DeleteMany(ctx, ks))
			},
			"multipart": func(rt *rapid.T) {
				k := key.Draw(rt, "key")
				fmp, fe := f.NewMultipart(ctx, k)
				mmp, me := m.NewMultipart(ctx, k)
				same("new multipart "+k, fe, me)
				if fe != nil {
					return
				}
				body := []byte("mp:" + k)
				same("part", fmp.AddPart(ctx, body), mmp.AddPart(ctx, body))
				_, fe = fmp.Complete(ctx)
				_, me = mmp.Complete(ctx)
				same("complete "+k, fe, me)
			},
			"get": func(rt *rapid.T) {
				k := key.Draw(rt, "key")
				fb, fe := f.Get(ctx, k, 0, -1)
				mb, me := m.Get(ctx, k, 0, -1)
				same("get "+k, fe, me)
				if !bytes.Equal(fb, mb) {
					rt.Fatalf("get %s: fs %q, mem %q", k, fb, mb)
				}
			},
			"": func(rt *rapid.T) {
				// Invariant after every step: the same set of objects.
				want := map[string]int64{}
				for info, err := range m.List(ctx, "") {
					if err != nil {
						rt.Fatal(err)
					}
					want[info.Key] = info.Size
				}
				n := 0
				for info, err := range f.List(ctx, "") {
					if err != nil {
						rt.Fatal(err)
					}
					if size, ok := want[info.Key]; !ok || size != info.Size {
						rt.Fatalf("fs lists %q (%d bytes); mem has %v", info.Key, info.Size, want)
					}
					n++
				}
				if n != len(want) {
					rt.Fatalf("fs lists %d objects, mem %d", n, len(want))
				}
			},
		})
	})
}

// memoryTempDir is a temp dir on tmpfs when there is one: the model test
// checks semantics, not durability, and thousands of fsyncs on a shared
// disk would take most of a minute.
func memoryTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/dev/shm", "starlog-fs-model-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
