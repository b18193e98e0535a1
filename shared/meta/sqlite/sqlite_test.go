package sqlite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/metatest"
	"github.com/starlog/starlog/shared/poll"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	metatest.Run(t, func(t *testing.T) meta.Store { return openTemp(t) })
}

func TestPragmas(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	// Every pooled connection carries the settings, not just the first.
	conns := make([]interface{ Close() error }, 0, 4)
	for range 4 {
		c, err := s.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var mode string
		var sync, busy int
		if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || sync != 2 || busy != busyTimeoutMS {
			t.Fatalf("journal_mode %q synchronous %d busy_timeout %d; want wal, 2 (FULL), %d", mode, sync, busy, busyTimeoutMS)
		}
	}
	for _, c := range conns {
		c.Close()
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "dir with ?#% chars", "meta.db")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "p", "s", []byte("v"), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at the path given: %v", err)
	}
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	it, err := s.Get(ctx, "p", "s")
	if err != nil || string(it.Val) != "v" || it.Ver != 1 {
		t.Fatalf("after reopen: %+v, %v", it, err)
	}
}

func TestOpenRejectsBadPath(t *testing.T) {
	if _, err := Open(context.Background(), ""); err == nil {
		t.Fatal("Open(\"\") succeeded")
	}
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "missing", "dir", "meta.db")); err == nil {
		t.Fatal("Open in a missing directory succeeded")
	}
}

// helperEnv switches the test binary into a helper process (see TestMain).
const (
	helperEnv  = "STARLOG_SQLITE_HELPER"
	helperItem = "counter"
)

// TestTwoProcessCAS: two processes (and several goroutines in each) hammer
// one item with IfVer increments. Every success installs a distinct value,
// and the final counter equals the number of successes both report.
func TestTwoProcessCAS(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "meta.db")
	ctx := context.Background()
	s, err := Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Put(ctx, "p", helperItem, []byte("0"), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}

	const procs, attempts = 2, 150
	outs := make([]string, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range procs {
		outs[i] = filepath.Join(dir, fmt.Sprintf("out%d", i))
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			helperEnv+"=cas",
			"STARLOG_SQLITE_HELPER_DB="+db,
			"STARLOG_SQLITE_HELPER_OUT="+outs[i],
			"STARLOG_SQLITE_HELPER_N="+strconv.Itoa(attempts),
		)
		cmds[i] = cmd
	}
	results := make(chan error, procs)
	for i, cmd := range cmds {
		go func() {
			out, err := cmd.CombinedOutput()
			if err != nil {
				err = fmt.Errorf("helper %d: %w\n%s", i, err, out)
			}
			results <- err
		}()
	}
	for range procs {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	var installed []int
	perProc := make([]int, procs)
	for i, o := range outs {
		vals := readInts(t, o)
		perProc[i] = len(vals)
		if len(vals) == 0 {
			t.Errorf("helper %s won no CAS at all: the race did not contend", o)
		}
		installed = append(installed, vals...)
	}
	it, err := s.Get(ctx, "p", helperItem)
	if err != nil {
		t.Fatal(err)
	}
	final, err := strconv.Atoi(string(it.Val))
	if err != nil {
		t.Fatal(err)
	}
	if final != len(installed) {
		t.Fatalf("counter is %d, but the processes report %d successful CASes", final, len(installed))
	}
	if it.Ver != int64(final)+1 {
		t.Fatalf("ver %d after %d increments of a ver-1 item", it.Ver, final)
	}
	slices.Sort(installed)
	for i, v := range installed {
		if v != i+1 {
			t.Fatalf("installed values are not 1..%d exactly once: position %d holds %d", final, i, v)
		}
	}
	t.Logf("%d successful CASes (per process %v) out of %d attempts", final, perProc, procs*attempts*helperGoroutines)
}

const helperGoroutines = 3

func readInts(t *testing.T, path string) []int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, n)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMain doubles as the helper process of TestTwoProcessCAS and
// TestKillNineKeepsAckedWrites: with helperEnv set, the test binary runs
// the helper instead of the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		if err := runHelper(mode); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runHelper(mode string) error {
	db, out := os.Getenv("STARLOG_SQLITE_HELPER_DB"), os.Getenv("STARLOG_SQLITE_HELPER_OUT")
	n, _ := strconv.Atoi(os.Getenv("STARLOG_SQLITE_HELPER_N"))
	ctx := context.Background()
	s, err := Open(ctx, db)
	if err != nil {
		return err
	}
	defer s.Close()
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	switch mode {
	case "cas":
		return helperCAS(s, f, n)
	case "kill9":
		return helperKill9(s, f)
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}

// helperCAS runs n read-then-CAS increments on each of a few goroutines and
// writes every value it installed to f.
func helperCAS(s *Store, f *os.File, n int) error {
	ctx := context.Background()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, helperGoroutines)
	for range helperGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				it, err := s.Get(ctx, "p", helperItem)
				if err != nil {
					errs <- err
					return
				}
				cur, err := strconv.Atoi(string(it.Val))
				if err != nil {
					errs <- err
					return
				}
				next := strconv.Itoa(cur + 1)
				_, err = s.Put(ctx, "p", helperItem, []byte(next), meta.IfVer(it.Ver))
				if errors.Is(err, meta.ErrConditionFailed) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				fmt.Fprintln(f, next)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// helperKill9 writes until its parent kills it, reporting each
// acknowledged write to f (fsynced, so the parent sees every ack).
func helperKill9(s *Store, f *os.File) error {
	ctx := context.Background()
	for i := 1; ; i++ {
		if _, err := s.Put(ctx, "p", fmt.Sprintf("k%08d", i), []byte("v"), meta.IfAbsent()); err != nil {
			return err
		}
		if _, err := s.Put(ctx, "p", helperItem, []byte(strconv.Itoa(i)), meta.Always()); err != nil {
			return err
		}
		fmt.Fprintln(f, i)
		if err := f.Sync(); err != nil {
			return err
		}
	}
}

// TestKillNineKeepsAckedWrites: a writer process killed with SIGKILL loses
// no write it saw acknowledged, and the file opens cleanly afterwards.
func TestKillNineKeepsAckedWrites(t *testing.T) {
	dir := t.TempDir()
	db, out := filepath.Join(dir, "meta.db"), filepath.Join(dir, "acked")
	// Create the file first so the child never races the schema.
	s0, err := Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	s0.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=kill9", "STARLOG_SQLITE_HELPER_DB="+db, "STARLOG_SQLITE_HELPER_OUT="+out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if poll.Wait(20*time.Second, func() error {
		if b, _ := os.ReadFile(out); strings.Count(string(b), "\n") < 50 {
			return errors.New("fewer than 50 writes acknowledged")
		}
		return nil
	}) != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("helper made no progress")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	acked := readInts(t, out)
	last := acked[len(acked)-1]

	s, err := Open(context.Background(), db)
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	it, err := s.Get(ctx, "p", helperItem)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := strconv.Atoi(string(it.Val))
	if got < last {
		t.Fatalf("counter is %d after kill -9, but %d was acknowledged", got, last)
	}
	// Every acknowledged create is there, densely.
	rows := 0
	q := meta.Query{PK: "p", From: "k", To: "l"}
	for {
		p, err := s.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			rows++
			if want := fmt.Sprintf("k%08d", rows); it.SK != want {
				t.Fatalf("row %d is %s, want %s", rows, it.SK, want)
			}
		}
		if p.Next == "" {
			break
		}
		q.PageToken = p.Next
	}
	if rows < last {
		t.Fatalf("%d rows after kill -9, %d acknowledged", rows, last)
	}
	t.Logf("killed after %d acknowledged writes; %d rows survive", last, rows)
}

// TestBusyIsRetried holds the write lock from another connection for a
// while: a Put waits it out instead of failing.
func TestBusyIsRetried(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "meta.db")
	ctx := context.Background()
	a, err := Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, db) // a second handle stands in for another process
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tx, err := a.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO items VALUES ('p', 'held', 1, x'')`); err != nil {
		t.Fatal(err)
	}
	// Hold the lock longer than SQLite's own busy timeout, so the busy
	// error reaches our retry loop.
	release := time.AfterFunc(busyTimeoutMS*time.Millisecond+500*time.Millisecond, func() { tx.Commit() })
	defer release.Stop()
	start := time.Now()
	if _, err := b.Put(ctx, "p", "k", []byte("v"), meta.IfAbsent()); err != nil {
		t.Fatalf("Put behind a held write lock: %v", err)
	}
	if waited := time.Since(start); waited < busyTimeoutMS*time.Millisecond {
		t.Fatalf("Put returned after %v, before the lock was released", waited)
	}
	// A context that ends while waiting ends the call.
	tx, err = a.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := b.Put(cctx, "p", "k2", []byte("v"), meta.IfAbsent()); err == nil || errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("Put with an expiring context behind a held lock = %v; want a context error", err)
	}
}

func TestRulesAreThisBackends(t *testing.T) {
	// Errors name this backend, its tokens carry the 's' tag, and a dynamo
	// token ('d' tag) is not taken for an sqlite one.
	if err := rules.CheckKey("", "s"); err == nil || !strings.HasPrefix(err.Error(), "meta/sqlite: ") {
		t.Errorf("CheckKey error %v does not name meta/sqlite", err)
	}
	if sk, err := rules.DecodeToken("c2xlYXNl"); err != nil || sk != "lease" { // base64url("slease")
		t.Errorf("own page token: %q, %v", sk, err)
	}
	if _, err := rules.DecodeToken("ZGxlYXNl"); err == nil { // base64url("dlease")
		t.Error("accepted another backend's page token")
	}
}

// BenchmarkGet is one read of an item that exists, the Durable Streams
// face's per-append read of its stream's row.
func BenchmarkGet(b *testing.B) {
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "meta.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	val := []byte(`{"content_type":"application/octet-stream","created":"2026-12-07T00:00:00Z"}`)
	if _, err := s.Put(ctx, "basin#b", "stream#s", val, meta.Cond{}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Get(ctx, "basin#b", "stream#s"); err != nil {
			b.Fatal(err)
		}
	}
}
