package server

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
)

// gatedMeta counts the reads of token rows and holds each until gate is
// closed (when set).
type gatedMeta struct {
	meta.Store
	gets atomic.Int64
	gate chan struct{}
}

func (m *gatedMeta) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	if pk == meta.TokensPK {
		m.gets.Add(1)
		if m.gate != nil {
			<-m.gate
		}
	}
	return m.Store.Get(ctx, pk, sk)
}

// The checks of one token that fall due together (the sessions of a
// token re-check when the cache entry they share goes stale) cost one
// metastore read between them, not one each.
func TestTokenChecksShareOneRead(t *testing.T) {
	t.Parallel()
	keys, err := auth.Derive(auth.Config{AdminToken: "admin-token-for-tests-0123456789", InternalKey: []byte("internal-key-for-tests-0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	ms := &gatedMeta{Store: testsvc.SQLite(t)}
	ts := newTokenStore(keys, ms)
	now := time.Unix(1_800_000_000, 0)
	var clock sync.Mutex
	ts.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	tok, err := auth.NewToken("shared")
	if err != nil {
		t.Fatal(err)
	}
	val, _ := json.Marshal(tokenRow{Info: auth.Info{ID: "shared"}, Hash: hex.EncodeToString(keys.Hash(tok))})
	k := meta.TokenKey("shared")
	if _, err := ms.Put(context.Background(), k.PK, k.SK, val, meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	if _, _, aerr := ts.authenticate(context.Background(), tok, ""); aerr != nil {
		t.Fatal(aerr)
	}
	clock.Lock()
	now = now.Add(TokenCacheTTL) // the entry is stale: every check reads
	clock.Unlock()
	ms.gets.Store(0)
	ms.gate = make(chan struct{})
	const sessions = 50
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for range sessions {
		wg.Go(func() {
			if _, _, aerr := ts.authenticate(context.Background(), tok, ""); aerr != nil {
				errs <- aerr
			}
		})
	}
	// Let every check reach the metastore or join the read in flight.
	poll.Until(t, 10*time.Second, "every check at the metastore or sharing a read", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		shared := 0
		for _, rd := range ts.reads {
			shared += rd.sharers
		}
		return ms.gets.Load()+int64(shared) >= sessions
	})
	close(ms.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := ms.gets.Load(); n != 1 {
		t.Fatalf("%d checks of one token due together made %d metastore reads, want 1", sessions, n)
	}
}
