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
	"testing"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/fs"
)

const helperEnv = "STARLOG_FS_HELPER_ROOT"

// TestHelperProcess is the child side of TestCrossProcessPutIfAbsent: it
// races to create every key and prints one line per key.
func TestHelperProcess(t *testing.T) {
	root := os.Getenv(helperEnv)
	if root == "" {
		return // not a child
	}
	id := os.Getenv("STARLOG_FS_HELPER_ID")
	s, err := fs.New(root)
	if err != nil {
		fmt.Println("fatal", err)
		os.Exit(1)
	}
	if os.Getenv("STARLOG_FS_HELPER_NAMED") != "" {
		fs.NamedTemps(s)
	}
	b := s.Bucket("bucket-a")
	for i := range 40 {
		key := fmt.Sprintf("chains/star/standard/0001/%06d", i)
		_, err := b.PutIfAbsent(context.Background(), key, []byte("writer-"+id))
		switch {
		case err == nil:
			fmt.Println(key, "won")
		case errors.Is(err, objstore.ErrExists):
			fmt.Println(key, "exists")
		default:
			fmt.Println(key, "error", strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	os.Exit(0)
}

func TestCrossProcessPutIfAbsent(t *testing.T) {
	st := newStore(t, "bucket-a")
	const procs = 4
	outs := make([][]byte, procs)
	var wg sync.WaitGroup
	for p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"="+st.Root(), fmt.Sprintf("STARLOG_FS_HELPER_ID=%d", p))
			if p%2 == 1 { // half the writers on named temps: the two paths race
				cmd.Env = append(cmd.Env, "STARLOG_FS_HELPER_NAMED=1")
			}
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("helper %d: %v\n%s", p, err, out)
			}
			outs[p] = out
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	winners := map[string]int{}
	for p, out := range outs {
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 || !strings.HasPrefix(f[0], "chains/") {
				continue
			}
			switch f[1] {
			case "won":
				if w, dup := winners[f[0]]; dup {
					t.Fatalf("%s created by processes %d and %d", f[0], w, p)
				}
				winners[f[0]] = p
			case "exists":
			default:
				t.Fatalf("process %d: %s", p, sc.Text())
			}
		}
	}
	if len(winners) != 40 {
		t.Fatalf("%d keys have a winner, want 40", len(winners))
	}
	b := st.Bucket("bucket-a")
	for key, p := range winners {
		got, err := b.Get(context.Background(), key, 0, -1)
		if err != nil || string(got) != fmt.Sprintf("writer-%d", p) {
			t.Fatalf("%s = %q, %v; want process %d's body", key, got, err, p)
		}
	}
	requireEmptyStaging(t, st)
}

func requireEmptyStaging(t *testing.T, st *fs.Store) {
	t.Helper()
	entries, err := os.ReadDir(st.Root() + "/.starlog-staging/bucket-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("staging holds %d leftovers (first %q)", len(entries), entries[0].Name())
	}
}
