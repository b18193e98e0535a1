package fs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/fs"
)

const (
	crashRootEnv  = "STARLOG_FS_CRASH_ROOT"
	crashStepEnv  = "STARLOG_FS_CRASH_STEP"
	crashNamedEnv = "STARLOG_FS_CRASH_NAMED"
	// crashKey is in a folder no earlier PUT made, so the crashing PUT
	// also makes its parents.
	crashKey   = "chains/star/standard/0002/000001"
	crashAcked = "chains/star/standard/0001/000000"
)

// putSteps are the points between the steps of a PUT, in order; a crash
// at any one before "linked" must leave the key absent.
var putSteps = []string{"created", "written", "synced", "linked", "dir-synced"}

func crashBody() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(i*31 + 7)
	}
	return b
}

// TestCrashHelperProcess is the child of TestCrashAtEveryStep: it runs one
// PUT and kills itself with SIGKILL (no deferred cleanup runs, as with
// kill -9) at the named step.
func TestCrashHelperProcess(t *testing.T) {
	root := os.Getenv(crashRootEnv)
	if root == "" {
		return // not a child
	}
	s, err := fs.New(root)
	if err != nil {
		fmt.Println("fatal", err)
		os.Exit(1)
	}
	if os.Getenv(crashNamedEnv) != "" {
		fs.NamedTemps(s)
	}
	want := os.Getenv(crashStepEnv)
	fs.SetStep(s, func(step string) {
		if step == want {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	})
	_, err = s.Bucket("bucket-a").PutIfAbsent(context.Background(), crashKey, crashBody())
	fmt.Println("survived", err) // the step never came: the parent fails
	os.Exit(0)
}

// TestCrashAtEveryStep kills a process between every two steps of a PUT
// (temp file created, written, fsynced, linked, folder fsynced) and then,
// as a restarted process on the same folder, requires: the key is absent
// if the kill came before the link and holds the whole body after it; a
// second writer's create-once PUT wins exactly when the key is absent and
// never changes a present one; an earlier acknowledged PUT is intact; and
// nothing is left in staging (unnamed temps) or only what SweepStaging
// removes (named temps).
func TestCrashAtEveryStep(t *testing.T) {
	ctx := context.Background()
	for _, named := range []bool{false, true} {
		for i, step := range putSteps {
			t.Run(fmt.Sprintf("named=%v/%s", named, step), func(t *testing.T) {
				st := newStore(t, "bucket-a")
				if !named && !fs.Unnamed(st) {
					t.Skip("this file system has no O_TMPFILE: the named path is the one in use")
				}
				if _, err := st.Bucket("bucket-a").PutIfAbsent(ctx, crashAcked, []byte("acked")); err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$", "-test.count=1")
				cmd.Env = append(os.Environ(), crashRootEnv+"="+st.Root(), crashStepEnv+"="+step)
				if named {
					cmd.Env = append(cmd.Env, crashNamedEnv+"=1")
				}
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("child was not killed at %s: %v\n%s", step, err, out)
				}

				// The restart: a new store on the same folder.
				re := newStoreAt(t, st.Root())
				b := re.Bucket("bucket-a")
				if got, err := b.Get(ctx, crashAcked, 0, -1); err != nil || string(got) != "acked" {
					t.Fatalf("acknowledged PUT after the crash: %q, %v", got, err)
				}
				linked := i >= 3
				got, err := b.Get(ctx, crashKey, 0, -1)
				switch {
				case linked && (err != nil || !bytes.Equal(got, crashBody())):
					t.Fatalf("killed after the link: key holds %d bytes, %v; want the whole body", len(got), err)
				case !linked && !errors.Is(err, objstore.ErrNotFound):
					t.Fatalf("killed before the link: key holds %d bytes, %v; want absent", len(got), err)
				}
				_, err = b.PutIfAbsent(ctx, crashKey, []byte("second writer"))
				switch {
				case linked && !errors.Is(err, objstore.ErrExists):
					t.Fatalf("second writer over the crashed writer's key: %v, want ErrExists", err)
				case !linked && err != nil:
					t.Fatalf("second writer on the absent key: %v", err)
				}
				want := crashBody()
				if !linked {
					want = []byte("second writer")
				}
				if got, err := b.Get(ctx, crashKey, 0, -1); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("key after the second writer: %d bytes, %v", len(got), err)
				}
				if named {
					if err := re.SweepStaging(0); err != nil {
						t.Fatal(err)
					}
				}
				requireEmptyStaging(t, re)
			})
		}
	}
}
