package s3_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/smithy-go"

	"github.com/starlog/starlog/shared/objstore"
	s3store "github.com/starlog/starlog/shared/objstore/s3"
	"github.com/starlog/starlog/shared/testsvc"
)

// classifyEnv is one versitygw with a bucket, reached directly and through
// a fault proxy.
type classifyEnv struct {
	v       testsvc.VersityServer
	proxy   *faultProxy
	direct  objstore.Bucket
	proxied objstore.Bucket
}

func newClassifyEnv(t *testing.T) *classifyEnv {
	v := testsvc.StartVersity(t, "bucket-cls")
	p := newFaultProxy(t, v.Endpoint)
	return &classifyEnv{
		v:       v,
		proxy:   p,
		direct:  newStore(t, v, v.Endpoint).Bucket("bucket-cls"),
		proxied: newStore(t, v, p.URL).Bucket("bucket-cls"),
	}
}

// probe reads key back directly, as a caller resolving an indefinite
// outcome would.
func (e *classifyEnv) probe(t *testing.T, key string, want []byte) {
	t.Helper()
	got, err := e.direct.Get(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatalf("probe %s: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("probe %s: got %q, want %q", key, got, want)
	}
}

func requireIndefinite(t *testing.T, what string, err error) {
	t.Helper()
	if !objstore.IsIndefinite(err) {
		t.Fatalf("%s: %v, want an IndefiniteError", what, err)
	}
	if errors.Is(err, objstore.ErrExists) {
		t.Fatalf("%s: indefinite error also matches ErrExists: %v", what, err)
	}
}

func TestErrorClassification(t *testing.T) {
	e := newClassifyEnv(t)
	ctx := context.Background()
	body := []byte("envelope+bundle")

	t.Run("412IsExists", func(t *testing.T) {
		if _, err := e.direct.PutIfAbsent(ctx, "c/412", body); err != nil {
			t.Fatal(err)
		}
		_, err := e.direct.PutIfAbsent(ctx, "c/412", []byte("other"))
		if !errors.Is(err, objstore.ErrExists) || objstore.IsIndefinite(err) {
			t.Fatalf("second put: %v, want definite ErrExists", err)
		}
	})

	t.Run("409ConditionalRequestConflictAfterWrite", func(t *testing.T) {
		e.proxy.arm(isPutObject, forwardThen409)
		_, err := e.proxied.PutIfAbsent(ctx, "c/409", body)
		requireIndefinite(t, "409 after the write landed", err)
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "ConditionalRequestConflict" {
			t.Fatalf("409: cause %v, want ConditionalRequestConflict", err)
		}
		e.probe(t, "c/409", body)
	})

	t.Run("409ConditionalRequestConflictNotDone", func(t *testing.T) {
		e.proxy.arm(isPutObject, conflict409)
		_, err := e.proxied.PutIfAbsent(ctx, "c/409-nd", body)
		requireIndefinite(t, "409 before the write", err)
		if _, err := e.direct.Head(ctx, "c/409-nd"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("probe: %v, want ErrNotFound", err)
		}
		// The caller may retry the same write and win.
		if _, err := e.proxied.PutIfAbsent(ctx, "c/409-nd", body); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("TimeoutAfterWrite", func(t *testing.T) {
		e.proxy.arm(isPutObject, forwardThenHang)
		tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := e.proxied.PutIfAbsent(tctx, "c/timeout", body)
		requireIndefinite(t, "timed-out put", err)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("timed-out put: %v, want it to wrap context.DeadlineExceeded", err)
		}
		e.probe(t, "c/timeout", body)
	})

	// A dropped connection and a 500 are retryable for the SDK: a retry
	// would meet the first attempt's object and turn a won write into a
	// 412. PutIfAbsent must send exactly one attempt and report it
	// indefinite.
	for _, c := range []struct {
		name string
		mode faultMode
	}{{"DroppedConnectionAfterWrite", forwardThenDrop}, {"500AfterWrite", forwardThen500}} {
		t.Run(c.name, func(t *testing.T) {
			key := "c/" + c.name
			e.proxy.arm(isPutObject, c.mode)
			_, err := e.proxied.PutIfAbsent(ctx, key, body)
			requireIndefinite(t, c.name, err)
			if n := e.proxy.matched(); n != 1 {
				t.Fatalf("PutIfAbsent sent %d attempts, want 1 (no SDK retry)", n)
			}
			e.probe(t, key, body)
		})
	}

	t.Run("CompleteDroppedAfterWrite", func(t *testing.T) {
		mp, err := e.proxied.NewMultipart(ctx, "c/mp")
		if err != nil {
			t.Fatal(err)
		}
		if err := mp.AddPart(ctx, body); err != nil {
			t.Fatal(err)
		}
		e.proxy.arm(isComplete, forwardThenDrop)
		_, err = mp.Complete(ctx)
		requireIndefinite(t, "dropped Complete", err)
		if n := e.proxy.matched(); n != 1 {
			t.Fatalf("Complete sent %d attempts, want 1", n)
		}
		e.probe(t, "c/mp", body)
		// The upload is gone (it completed); Abort tolerates that.
		if err := mp.Abort(ctx); err != nil {
			t.Fatalf("Abort after an indefinite Complete that won: %v", err)
		}
	})

	t.Run("ReadsAreRetried", func(t *testing.T) {
		if _, err := e.direct.PutIfAbsent(ctx, "c/read", body); err != nil {
			t.Fatal(err)
		}
		e.proxy.arm(isGet, refuse500)
		got, err := e.proxied.Get(ctx, "c/read", 0, -1)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("get after one 500: %q, %v (want the SDK to retry)", got, err)
		}
		if n := e.proxy.matched(); n != 2 {
			t.Fatalf("get took %d attempts, want 2", n)
		}
	})

	t.Run("403IsDefinite", func(t *testing.T) {
		c, err := s3store.NewClient(ctx, s3store.Config{
			Endpoint: e.v.Endpoint, Region: e.v.Region, AccessKey: e.v.AccessKey, SecretKey: "wrong-secret", PathStyle: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s3store.New(c).Bucket("bucket-cls").PutIfAbsent(ctx, "c/403", body)
		if err == nil || objstore.IsIndefinite(err) || errors.Is(err, objstore.ErrExists) {
			t.Fatalf("put with a bad signature: %v, want a definite failure", err)
		}
	})
}
