package auditjob_test

import (
	"context"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/stores"
)

// catalogEnv is one backend's stores for a test that writes catalog rows
// by hand (as star/catalog writes them) and runs the janitor at a fixed
// now: a "std" settled bucket and the metastore.
type catalogEnv struct {
	ms   meta.Store
	objs objstore.Store
	st   *settle.Stores
	now  time.Time
}

func newCatalogEnv(t *testing.T, b backend) *catalogEnv {
	t.Helper()
	e := &catalogEnv{now: time.Now()}
	if b == onAWS {
		e.objs, e.ms = stores.S3(t, "std"), stores.Dynamo(t, &sharedDyn)
	} else {
		m, err := mem.New("std")
		if err != nil {
			t.Fatal(err)
		}
		e.objs, e.ms = m, testsvc.SQLite(t)
	}
	e.st = &settle.Stores{Meta: e.ms, Objects: e.objs, SettledBucket: "std", Streams: settle.MetaStreams{Meta: e.ms},
		Config: settle.Config{ScratchDir: t.TempDir()}, Now: func() time.Time { return e.now }}
	return e
}

// put writes a row unconditionally.
func (e *catalogEnv) put(t *testing.T, pk, sk string, val []byte) {
	t.Helper()
	if _, err := e.ms.Put(context.Background(), pk, sk, val, meta.Always()); err != nil {
		t.Fatal(err)
	}
}
