package leader_test

import (
	"context"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
)

// rowStore serves one lease and one registration value.
type rowStore struct {
	meta.Store
	val []byte
}

func (s rowStore) Get(_ context.Context, pk, sk string) (meta.Item, error) {
	return meta.Item{PK: pk, SK: sk, Ver: 1, Val: s.val}, nil
}

// FuzzDecode: the lease and registration decoders never panic; a lease
// they accept names a star and survives Successor.
func FuzzDecode(f *testing.F) {
	a1 := meta.LeaseHolder{Star: "a", Incarnation: 1}
	f.Add(meta.Encode(meta.Lease{LeaseHolder: a1, Version: 2, Pending: []meta.LeaseHolder{{Star: "b", Incarnation: 9}}}))
	f.Add(meta.Encode(meta.Lease{LeaseHolder: a1, Version: 5, Released: true, Frontier: 100}))
	f.Add(meta.Encode(meta.Registration{Incarnation: 3, State: meta.StarLive, Address: "127.0.0.1:7480", Heartbeat: 1}))
	f.Add([]byte(`{"star":"","inc":1}`))
	f.Add([]byte(`{"star":"a","pending":[{"star":7}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, val []byte) {
		ctx := context.Background()
		ms := rowStore{val: val}
		if l, _, ok, err := leader.ReadLease(ctx, ms, "s"); err == nil && ok {
			if l.Star == "" {
				t.Fatal("accepted a lease naming no star")
			}
			next := leader.Successor(&l, meta.LeaseHolder{Star: "z", Incarnation: 1}, time.Now())
			if next.Version != l.Version+1 {
				t.Fatalf("successor version %d after %d", next.Version, l.Version)
			}
		}
		if r, _, ok, err := leader.ReadRegistration(ctx, ms, "a"); err == nil && ok {
			leader.Live(r, r.Incarnation, time.Now(), time.Second)
		}
	})
}
