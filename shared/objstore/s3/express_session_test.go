package s3_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/objstore"
	s3store "github.com/starlog/starlog/shared/objstore/s3"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/expressfront"
)

// expressBucket starts versitygw behind the S3 Express front (tuned by
// tune) and makes one directory bucket in zone.
func expressBucket(t *testing.T, zone string, tune ...func(*expressfront.Config)) (testsvc.ExpressServer, string) {
	t.Helper()
	v := testsvc.StartVersity(t)
	e := testsvc.StartExpress(t, v, tune...)
	m := &bucketMaker{v: v, zone: zone}
	return e, m.make(t)
}

func TestExpressReadOnlySession(t *testing.T) {
	ctx := context.Background()
	e, name := expressBucket(t, "use1-az5")
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

// Sessions that live 2 s: the SDK must open new ones as they run out, and
// never sign with an expired one.
func TestExpressSessionRefresh(t *testing.T) {
	ctx := context.Background()
	const lifetime = 2 * time.Second
	e, name := expressBucket(t, "use1-az6", func(c *expressfront.Config) { c.SessionLifetime = lifetime })
	b := newExpressStore(t, e, e.AccessKey, e.SecretKey).Bucket(name)
	sessions := func() int { return e.Front.Stats().SessionsByBucket[name] }

	if _, err := b.PutIfAbsent(ctx, "first", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if n := sessions(); n != 1 {
		t.Fatalf("%d sessions after the first write, want 1", n)
	}
	// Idle past the session's end: the cached session has expired, so the
	// SDK opens a new one before it signs the read.
	time.Sleep(lifetime + 500*time.Millisecond)
	before := sessions()
	if got, err := b.Get(ctx, "first", 0, -1); err != nil || string(got) != "1" {
		t.Fatalf("read after expiry: %q, %v", got, err)
	}
	if n := sessions(); n <= before {
		t.Fatalf("sessions %d → %d across an expiry, want a new one", before, n)
	}
	// Busy across an expiry: the SDK refreshes ahead of it in the
	// background (its window, a fixed minute, covers all of a 2 s session,
	// so nearly every request starts a single-flight CreateSession) while
	// requests keep using the current session.
	before = sessions()
	deadline := time.Now().Add(lifetime + 500*time.Millisecond)
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				key := fmt.Sprintf("busy/%d/%04d", w, i)
				if _, err := b.PutIfAbsent(ctx, key, []byte(key)); err != nil {
					errc <- err
					return
				}
				if _, err := b.Head(ctx, key); err != nil {
					errc <- err
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("busy writer: %v", err)
	}
	st := e.Front.Stats()
	t.Logf("sessions for %s: %d (%d during the busy phase); refusals %v; accepted within the expiry grace: %d",
		name, st.SessionsByBucket[name], st.SessionsByBucket[name]-before, st.Refused, st.InGrace)
	if st.SessionsByBucket[name]-before < 2 {
		t.Fatalf("busy phase over a lifetime opened %d sessions, want at least 2", st.SessionsByBucket[name]-before)
	}
	if len(st.Refused) != 0 {
		t.Fatalf("the front refused requests %v: the SDK signed with a dead session", st.Refused)
	}
}

// A session the service refuses (it forgot the session, or its clock and
// ours disagree on its expiry) is replaced at once: the request that met
// the refusal fails, definitely, and the next opens a new session, where
// the SDK's provider alone would keep sending the refused token until it
// expires by our clock (5 minutes here). Found as a star whose Express
// class stayed degraded after the front's clock had jumped an hour and
// forgotten its sessions.
func TestExpressRefusedSessionIsReplaced(t *testing.T) {
	ctx := context.Background()
	e, name := expressBucket(t, "use1-az6")
	st := newExpressStore(t, e, e.AccessKey, e.SecretKey)
	b := st.Bucket(name)
	sessions := func() int { return e.Front.Stats().SessionsByBucket[name] }

	if _, err := b.PutIfAbsent(ctx, "first", []byte("1")); err != nil {
		t.Fatal(err)
	}
	e.Front.ForgetSessions()
	_, err := b.PutIfAbsent(ctx, "second", []byte("2"))
	if err == nil || objstore.IsIndefinite(err) {
		t.Fatalf("a write with a forgotten session: %v, want a definite failure", err)
	}
	if _, err := b.PutIfAbsent(ctx, "third", []byte("3")); err != nil {
		t.Fatalf("the write after a refused session: %v", err)
	}
	if n := sessions(); n != 2 {
		t.Fatalf("%d sessions, want 2: the first and one after the refusal", n)
	}
	// The new session serves the rest, reads included.
	for _, key := range []string{"first", "third"} {
		if _, err := b.Get(ctx, key, 0, -1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Get(ctx, "second", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the refused write: %v, want not found", err)
	}
	if n := sessions(); n != 2 {
		t.Fatalf("%d sessions after the reads, want 2", n)
	}
	if got := st.SessionStats(); got != (s3store.SessionStats{Refused: 1, Reopened: 1}) {
		t.Fatalf("session stats %+v, want one refused and one reopened", got)
	}
}
