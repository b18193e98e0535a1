package fs_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/fs"
)

const journalCrashEnv = "STARLOG_FS_JOURNAL_CRASH_ROOT"

func journalKey(i int) string { return fmt.Sprintf("chains/s%d/standard/0001/%06d", i%4, i) }

// TestJournalCrashHelperProcess is the child of TestJournalKill9: it
// journals PUTs from 8 goroutines and deletes some, printing each
// acknowledgement as it comes, and kills itself with SIGKILL while the
// journal still holds most of them.
func TestJournalCrashHelperProcess(t *testing.T) {
	root := os.Getenv(journalCrashEnv)
	if root == "" {
		return // not a child
	}
	s, err := fs.Open(root, fs.Options{Journal: true})
	if err != nil {
		fmt.Println("fatal", err)
		os.Exit(1)
	}
	b := s.Bucket("bucket-a")
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < 200; i += 8 {
				if _, err := b.PutIfAbsent(ctx, journalKey(i), []byte(journalKey(i))); err != nil {
					fmt.Println("error", err)
					continue
				}
				fmt.Println("acked", journalKey(i))
				if i%5 == 0 {
					if err := b.Delete(ctx, journalKey(i)); err == nil {
						fmt.Println("deleted", journalKey(i))
					}
				}
			}
		})
	}
	wg.Wait()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// TestJournalKill9 kills a process that journals and deletes keys, then
// reopens its folder: every acknowledged PUT is there with its body,
// every acknowledged delete stays deleted, a key never acknowledged is
// absent or whole, and create-once holds.
func TestJournalKill9(t *testing.T) {
	st := newStore(t, "bucket-a")
	root := st.Root()
	st.Close() // the child takes the root exclusively
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalCrashHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), journalCrashEnv+"="+root)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed: %v\n%s", err, out)
	}
	acked, deleted := map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		switch f := strings.Fields(sc.Text()); f[0] {
		case "acked":
			acked[f[1]] = true
		case "deleted":
			deleted[f[1]] = true
		default:
			t.Fatalf("child: %s", sc.Text())
		}
	}
	if len(acked) != 200 || len(deleted) != 40 {
		t.Fatalf("child acknowledged %d PUTs and %d deletes, want 200 and 40", len(acked), len(deleted))
	}
	re := openStoreAt(t, root, fs.Options{Journal: true})
	b := re.Bucket("bucket-a")
	ctx := context.Background()
	for i := range 200 {
		key := journalKey(i)
		got, err := b.Get(ctx, key, 0, -1)
		switch {
		case deleted[key] && !errors.Is(err, objstore.ErrNotFound):
			t.Fatalf("deleted %s came back: %q, %v", key, got, err)
		case !deleted[key] && (err != nil || string(got) != key):
			t.Fatalf("acknowledged %s: %q, %v", key, got, err)
		}
		_, err = b.PutIfAbsent(ctx, key, []byte("second writer"))
		if deleted[key] && err != nil || !deleted[key] && !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("second writer on %s (deleted %v): %v", key, deleted[key], err)
		}
	}
}

// A journaled store excludes every other store on its root, and a store
// without a journal excludes a journaled one; closing releases the root.
func TestJournalLockRefusesSecondWriter(t *testing.T) {
	root := t.TempDir()
	j, err := fs.Open(root, fs.Options{Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []fs.Options{{}, {Journal: true}} {
		if s, err := fs.Open(root, o); !errors.Is(err, fs.ErrLocked) {
			t.Fatalf("second store (%+v) beside a journaled one: %v, want ErrLocked", o, err)
		} else if s != nil {
			s.Close()
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	a := newStoreAt(t, root)
	b := newStoreAt(t, root) // stores without a journal share the root
	if _, err := fs.Open(root, fs.Options{Journal: true}); !errors.Is(err, fs.ErrLocked) {
		t.Fatalf("journaled store beside two plain ones: %v, want ErrLocked", err)
	}
	a.Close()
	b.Close()
	again := openStoreAt(t, root, fs.Options{Journal: true})
	again.Close()
}

// Concurrent PUTs share the journal's data syncs (group commit), are
// served at once, and are in their own files after Close.
func TestJournalGroupCommit(t *testing.T) {
	st := newJournaled(t, "bucket-a")
	b := st.Bucket("bucket-a")
	ctx := context.Background()
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := b.PutIfAbsent(ctx, journalKey(i), []byte(journalKey(i))); err != nil {
				t.Error(err)
			}
			if got, err := b.Get(ctx, journalKey(i), 0, -1); err != nil || string(got) != journalKey(i) {
				t.Errorf("read after the PUT: %q, %v", got, err)
			}
		})
	}
	wg.Wait()
	js := st.JournalStats()
	syncs, records := js.Syncs, js.Records
	t.Logf("%d PUTs: %d records in %d group syncs", n, records, syncs)
	if records != n || syncs >= n {
		t.Fatalf("%d records in %d syncs; want %d records in fewer syncs", records, syncs, n)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		got, err := os.ReadFile(st.Root() + "/bucket-a/" + journalKey(i))
		if err != nil || string(got) != journalKey(i) {
			t.Fatalf("%s's file after Close: %q, %v", journalKey(i), got, err)
		}
	}
}
