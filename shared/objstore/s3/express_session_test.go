package s3_test

import (
	"context"
	"errors"
	"testing"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/expressfront"
)

func TestExpressReadOnlySession(t *testing.T) {
	ctx := context.Background()
	v := testsvc.StartVersity(t)
	e := testsvc.StartExpress(t, v)
	m := &bucketMaker{v: v, zone: "use1-az5"}
	name := m.make(t)
	rw := newExpressStore(t, e, e.AccessKey, e.SecretKey).Bucket(name)
	ro := newExpressStore(t, e, e.ReadOnlyAccessKey, e.ReadOnlySecretKey).Bucket(name)
	if _, err := rw.PutIfAbsent(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// The settle role's sessions are ReadOnly: reads work ...
	if got, err := ro.Get(ctx, "k", 0, -1); err != nil || string(got) != "v" {
		t.Fatalf("read-only Get = %q, %v", got, err)
	}
	// ... and every write is a definite refusal (403 AccessDenied), never
	// "exists" and never indefinite.
	_, err := ro.PutIfAbsent(ctx, "k2", []byte("x"))
	t.Logf("read-only PutIfAbsent: %v", err)
	if err == nil || errors.Is(err, objstore.ErrExists) || objstore.IsIndefinite(err) {
		t.Fatalf("read-only PutIfAbsent: %v, want a definite refusal", err)
	}
	if err := ro.Delete(ctx, "k"); err == nil || objstore.IsIndefinite(err) {
		t.Fatalf("read-only Delete: %v, want a definite refusal", err)
	}
	if _, err := ro.NewMultipart(ctx, "mp"); err == nil || objstore.IsIndefinite(err) {
		t.Fatalf("read-only NewMultipart: %v, want a definite refusal", err)
	}
	st := e.Front.Stats()
	if st.Sessions[expressfront.ReadOnly] != 1 || st.Refused["AccessDenied"] != 3 {
		t.Fatalf("front stats %+v: want one ReadOnly session and three AccessDenied", st)
	}
}

// A directory bucket that does not exist fails CreateSession (404
// NoSuchBucket) before any data request is sent.
func TestExpressMissingBucket(t *testing.T) {
	ctx := context.Background()
	v := testsvc.StartVersity(t)
	e := testsvc.StartExpress(t, v)
	b := newExpressStore(t, e, e.AccessKey, e.SecretKey).Bucket(testsvc.DirectoryBucket("starlog-no-such-bucket", "use1-az4"))
	_, err := b.Get(ctx, "k", 0, -1)
	wantDefinite(t, "Get", err, objstore.ErrNotFound)
	_, err = b.Head(ctx, "k")
	wantDefinite(t, "Head", err, objstore.ErrNotFound)
	_, err = b.PutIfAbsent(ctx, "k", []byte("x"))
	wantDefinite(t, "PutIfAbsent", err, nil)
	err = b.Delete(ctx, "k")
	wantDefinite(t, "Delete", err, nil)

	// Unknown long-term keys: CreateSession is refused 403.
	bad := newExpressStore(t, e, "nosuchkey", "nosuchsecret").Bucket(testsvc.DirectoryBucket("bucket-x", "use1-az4"))
	_, err = bad.PutIfAbsent(ctx, "k", []byte("x"))
	wantDefinite(t, "PutIfAbsent with unknown keys", err, nil)
}

// wantDefinite fails unless err is a definite failure (wrapping want, if
// want is not nil).
func wantDefinite(t *testing.T, what string, err, want error) {
	t.Helper()
	t.Logf("%s: %v", what, err)
	if err == nil || objstore.IsIndefinite(err) || errors.Is(err, objstore.ErrExists) {
		t.Fatalf("%s: %v, want a definite failure", what, err)
	}
	if want != nil && !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}
