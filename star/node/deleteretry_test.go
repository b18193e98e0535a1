package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/star/node"
)

var errInjected = errors.New("test: injected metastore failure")

// registeredFor says whether stream id has its reclamation row.
func registeredFor(t *testing.T, ms meta.Store, id string) bool {
	t.Helper()
	k := meta.ReclaimStreamKey(id)
	_, err := ms.Get(context.Background(), k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// deleteHalfDone opens a star on a fault-wrapped metastore, creates
// basin-one/s1, and deletes what (the stream, or the basin)
// so that the deletion mark lands and the writes after it do not: the
// stream's deleted_at lands and its reply is lost (nothing after it is
// written), or the basin's tombstone batch fails. It returns the star,
// the wrapper and s1's id.
func deleteHalfDone(t *testing.T, what string) (stores, *node.Node, *mfaults.Store, string) {
	t.Helper()
	ctx := context.Background()
	st := newStores(t)
	fm := mfaults.New(st.meta, 1)
	n := openOn(t, fm, st.objects, testConfig())
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "s1"}, ""); err != nil {
		t.Fatal(err)
	}
	// No appends: the star then writes nothing in the background (no
	// absorb) that could take the injected failure instead of the delete.
	id := streamID(t, st, "s1")
	var err error
	switch what {
	case "stream":
		fm.FailNext(1, errInjected, mfaults.After, mfaults.OpPut)
		err = n.DeleteStream(ctx, "basin-one", "s1")
	case "basin":
		fm.FailNext(1, errInjected, mfaults.Before, mfaults.OpBatch)
		err = n.DeleteBasin(ctx, "basin-one")
	}
	if err == nil {
		t.Fatal("the delete succeeded despite the injected failure")
	}
	if registeredFor(t, st.meta, id) {
		t.Fatal("the failed delete registered the stream: the injection shows nothing")
	}
	return st, n, fm, id
}

// Issue 26 defect 5: a delete whose later writes fail is finished by the
// client's retry (which still answers 409 *_deletion_pending).
func TestRetriedDeleteFinishes(t *testing.T) {
	for _, what := range []string{"stream", "basin"} {
		t.Run(what, func(t *testing.T) {
			st, n, _, id := deleteHalfDone(t, what)
			var err error
			switch what {
			case "stream":
				err = n.DeleteStream(context.Background(), "basin-one", "s1")
				apiErr(t, err, 409, api.CodeStreamDeletionPending)
			case "basin":
				err = n.DeleteBasin(context.Background(), "basin-one")
				apiErr(t, err, 409, api.CodeBasinDeletionPending)
			}
			if !registeredFor(t, st.meta, id) {
				t.Fatalf("the retried %s delete left stream %s unregistered for reclamation", what, id)
			}
		})
	}
}

// Without a retry, a re-create of the name registers the old id before it
// takes the name: at once (the Durable Streams face's replace), or after
// the deletion-pending window (in a re-created basin for a basin delete).
func TestRecreateFinishesDelete(t *testing.T) {
	for _, what := range []string{"stream", "basin"} {
		t.Run(what, func(t *testing.T) {
			st, n, _, id := deleteHalfDone(t, what)
			ctx := context.Background()
			if what == "basin" {
				recreateBasin(t, n, nil)
			}
			poll.UntilErr(t, 5*time.Second, "re-create s1", func() (err error) {
				if what == "stream" {
					_, _, err = n.EnsureStream(node.ReplaceDeleting(ctx), "basin-one", "s1", api.StreamConfig{})
				} else {
					_, err = n.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "s1"}, "")
				}
				return err
			})
			if streamID(t, st, "s1") == id {
				t.Fatal("s1 was not re-created")
			}
			if !registeredFor(t, st.meta, id) {
				t.Fatalf("s1 re-created over stream %s, which no row now names and none registered for reclamation", id)
			}
		})
	}
}

// Without a retry or a re-create, the janitor's passes register and then
// reclaim the half-deleted stream.
func TestJanitorFinishesDelete(t *testing.T) {
	for _, what := range []string{"stream", "basin"} {
		t.Run(what, func(t *testing.T) {
			st, _, _, id := deleteHalfDone(t, what)
			now := time.Now()
			js := &settle.Stores{Meta: st.meta, Objects: st.objects, SettledBucket: "standard", Streams: settle.MetaStreams{Meta: st.meta},
				Config: settle.Config{ScratchDir: t.TempDir()}, Logger: testLog(), Now: func() time.Time { return now }}
			grace := js.Config.WithDefaults().ReadGrace
			registered := false
			for range 6 {
				if _, err := auditjob.Janitor(context.Background(), js); err != nil {
					t.Logf("janitor: %v", err)
				}
				registered = registered || registeredFor(t, st.meta, id)
				now = now.Add(grace + time.Second)
			}
			if !registered {
				t.Fatalf("the janitor never registered stream %s", id)
			}
			if registeredFor(t, st.meta, id) {
				t.Fatalf("stream %s is still being reclaimed after six janitor passes a read grace apart", id)
			}
		})
	}
}
