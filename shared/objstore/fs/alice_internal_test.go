package fs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/poll"
)

// The crash-consistency test, in the manner of ALICE (Pillai et al.,
// OSDI '14): the store runs a workload on a recorder that logs every
// write, sync (of a file, a folder or the file system) and directory
// change it issues; then for every prefix of
// the log a crash image is built twice, once keeping only what was synced
// by then (a file's data as of its last fsync, a folder's entries as of
// its last fsync: a power cut) and once keeping everything (kill -9), the
// store is reopened on each image, and the contract is checked against
// what the workload was told.

type opKind uint8

const (
	opCreate opKind = iota
	opWrite
	opSync
	opMkdir
	opLink
	opUnlink
	opRmdir
	opSyncDir
	opSyncFS
)

type op struct {
	kind      opKind
	path, dst string // relative to the root
	ino       int
	data      []byte
	off       int64 // a write's offset; -1 appends
}

// recorder is a fileSys that runs every call on the real folder and logs
// it. A mutating call is done and logged under one lock, so the log's
// order is the order of effects; a sync is logged when it starts (it
// covers what was logged before it, and maybe not what comes during it).
type recorder struct {
	root string
	mu   sync.Mutex
	log  []op
	inos map[string]int // path → inode, for links and writes
	next int
}

func (r *recorder) rel(p string) string {
	rel, err := filepath.Rel(r.root, p)
	if err != nil {
		panic(err)
	}
	return filepath.ToSlash(rel)
}

func (r *recorder) pos() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.log)
}

func (r *recorder) do(o op, f func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := f()
	if err == nil {
		r.log = append(r.log, o)
	}
	return err
}

func (r *recorder) Create(path string) (file, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := (osFS{}).Create(path)
	if err != nil {
		return nil, err
	}
	r.next++
	rel := r.rel(path)
	r.inos[rel] = r.next
	r.log = append(r.log, op{kind: opCreate, path: rel, ino: r.next})
	return &recFile{r: r, f: f, ino: r.next}, nil
}

func (r *recorder) ReadFile(path string) ([]byte, error) { return osFS{}.ReadFile(path) }
func (r *recorder) ReadDir(dir string) ([]string, error) { return osFS{}.ReadDir(dir) }

func (r *recorder) Mkdir(path string) error {
	return r.do(op{kind: opMkdir, path: r.rel(path)}, func() error { return osFS{}.Mkdir(path) })
}

func (r *recorder) Link(old, new string) error {
	o := op{kind: opLink, path: r.rel(old), dst: r.rel(new)}
	return r.do(o, func() error {
		err := osFS{}.Link(old, new)
		if err == nil {
			r.inos[o.dst] = r.inos[o.path]
		}
		return err
	})
}

func (r *recorder) Unlink(path string) error {
	return r.do(op{kind: opUnlink, path: r.rel(path)}, func() error { return osFS{}.Unlink(path) })
}

func (r *recorder) Rmdir(path string) error {
	return r.do(op{kind: opRmdir, path: r.rel(path)}, func() error { return osFS{}.Rmdir(path) })
}

func (r *recorder) SyncDir(dir string) error {
	r.mu.Lock()
	r.log = append(r.log, op{kind: opSyncDir, path: r.rel(dir)})
	r.mu.Unlock()
	return osFS{}.SyncDir(dir)
}

func (r *recorder) SyncFS(path string) error {
	r.mu.Lock()
	r.log = append(r.log, op{kind: opSyncFS})
	r.mu.Unlock()
	return osFS{}.SyncFS(path)
}

type recFile struct {
	r   *recorder
	f   file
	ino int
}

func (w *recFile) Write(p []byte) (int, error) {
	var n int
	err := w.r.do(op{kind: opWrite, ino: w.ino, data: append([]byte(nil), p...), off: -1}, func() error {
		var err error
		n, err = w.f.Write(p)
		return err
	})
	return n, err
}

func (w *recFile) WriteAt(p []byte, off int64) (int, error) {
	var n int
	err := w.r.do(op{kind: opWrite, ino: w.ino, data: append([]byte(nil), p...), off: off}, func() error {
		var err error
		n, err = w.f.WriteAt(p, off)
		return err
	})
	return n, err
}

func (w *recFile) Sync() error {
	w.r.mu.Lock()
	w.r.log = append(w.r.log, op{kind: opSync, ino: w.ino})
	w.r.mu.Unlock()
	return w.f.Sync()
}

func (w *recFile) Stamp(t time.Time) error { return w.f.Stamp(t) }
func (w *recFile) Close() error            { return w.f.Close() }

// model is the file system the log describes: per folder its entries now
// and as of its last sync, per inode its data now and as of its last sync.
type model struct {
	dirs    map[string]map[string]int // folder → name → inode (0: a folder)
	durDirs map[string]map[string]int
	data    map[int][]byte
	durData map[int][]byte
	ino     map[string]int // the recorder's inode numbers of the initial files
}

// snapshot reads root as the model's starting point, all of it durable.
func snapshot(t *testing.T, root string) *model {
	m := &model{dirs: map[string]map[string]int{}, durDirs: map[string]map[string]int{}, data: map[int][]byte{}, durData: map[int][]byte{}, ino: map[string]int{}}
	next := -1 // initial inodes are negative: the recorder's count up from 1
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "."
		if p != root {
			rel = filepath.ToSlash(p[len(root)+1:])
		}
		if d.IsDir() {
			m.dirs[rel] = map[string]int{}
			m.durDirs[rel] = map[string]int{}
		} else {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m.ino[rel] = next
			m.data[next], m.durData[next] = b, b
			next--
		}
		if rel != "." {
			parent, name := pathSplit(rel)
			m.dirs[parent][name] = m.ino[rel]
			m.durDirs[parent][name] = m.ino[rel]
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func pathSplit(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

func (m *model) clone() *model {
	c := &model{dirs: map[string]map[string]int{}, durDirs: map[string]map[string]int{}, data: maps.Clone(m.data), durData: maps.Clone(m.durData)}
	for d, es := range m.dirs {
		c.dirs[d] = maps.Clone(es)
	}
	for d, es := range m.durDirs {
		c.durDirs[d] = maps.Clone(es)
	}
	return c
}

func (m *model) apply(o op) {
	switch o.kind {
	case opCreate:
		parent, name := pathSplit(o.path)
		m.dirs[parent][name] = o.ino
		m.data[o.ino] = nil
	case opWrite:
		d := slices.Clone(m.data[o.ino]) // the durable image may share the old bytes
		if o.off < 0 {
			d = append(d, o.data...)
		} else {
			if end := int(o.off) + len(o.data); end > len(d) {
				d = append(d, make([]byte, end-len(d))...)
			}
			copy(d[o.off:], o.data)
		}
		m.data[o.ino] = d
	case opSync:
		m.durData[o.ino] = m.data[o.ino]
	case opMkdir:
		parent, name := pathSplit(o.path)
		m.dirs[parent][name] = 0
		m.dirs[o.path] = map[string]int{}
		m.durDirs[o.path] = map[string]int{}
	case opLink:
		sp, sn := pathSplit(o.path)
		dp, dn := pathSplit(o.dst)
		m.dirs[dp][dn] = m.dirs[sp][sn]
	case opUnlink, opRmdir:
		parent, name := pathSplit(o.path)
		delete(m.dirs[parent], name)
	case opSyncDir:
		m.durDirs[o.path] = maps.Clone(m.dirs[o.path])
	case opSyncFS:
		for d, es := range m.dirs {
			m.durDirs[d] = maps.Clone(es)
		}
		maps.Copy(m.durData, m.data)
	}
}

// write lays out the model at dir: durable only what was synced, else
// everything done.
func (m *model) write(t *testing.T, dir string, durable bool) {
	dirs, data := m.dirs, m.data
	if durable {
		dirs, data = m.durDirs, m.durData
	}
	var walk func(rel string)
	walk = func(rel string) {
		for name, ino := range dirs[rel] {
			child := name
			if rel != "." {
				child = rel + "/" + name
			}
			p := filepath.Join(dir, filepath.FromSlash(child))
			if ino == 0 {
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
				walk(child)
				continue
			}
			if err := os.WriteFile(p, data[ino], 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	walk(".")
}

// attempt is one call of the workload and where in the log it began and
// ended (end -1: not acknowledged).
type attempt struct {
	key        string
	body       string // "" for a delete
	start, end int
	err        error
}

func TestCrashConsistencyEveryPrefix(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "store")
	// The starting folder: buckets made, no journal yet.
	pre, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := pre.CreateBucket("bkt"); err != nil {
		t.Fatal(err)
	}
	pre.Close()
	initial := snapshot(t, root)

	rec := &recorder{root: root, inos: map[string]int{}}
	for rel, ino := range initial.ino {
		rec.inos[rel] = ino
	}
	s, err := open(root, Options{Journal: true}, rec)
	if err != nil {
		t.Fatal(err)
	}
	// Spares are filled with fewer zeros than round 1 writes: its records
	// go over the zeros, then past them.
	s.j.mu.Lock()
	s.j.fillMax = 256
	s.j.mu.Unlock()
	b := s.Bucket("bkt")
	ctx := context.Background()
	var (
		mu       sync.Mutex
		attempts []attempt
	)
	put := func(key, body string) {
		a := attempt{key: key, body: body, start: rec.pos(), end: -1}
		_, a.err = b.PutIfAbsent(ctx, key, []byte(body))
		if a.err == nil {
			a.end = rec.pos()
		}
		mu.Lock()
		attempts = append(attempts, a)
		mu.Unlock()
	}
	del := func(key string) {
		a := attempt{key: key, start: rec.pos(), end: -1}
		if a.err = b.Delete(ctx, key); a.err == nil {
			a.end = rec.pos()
		}
		mu.Lock()
		attempts = append(attempts, a)
		mu.Unlock()
	}
	key := func(round, i int) string { return fmt.Sprintf("chains/s%d/standard/%04d/%06d", i%3, round, i) }

	// Round 0: racing writers per key (a group of concurrent PUTs, one
	// winner and one loser each); then a delete of a key whose segment has
	// not retired (the delete retires it first).
	var wg sync.WaitGroup
	for i := range 6 {
		for w := range 2 {
			wg.Go(func() { put(key(0, i), fmt.Sprintf("%s#writer%d", key(0, i), w)) })
		}
	}
	wg.Wait()
	del(key(0, 0))
	// Round 1 after the journal is retired: deletes of materialized keys,
	// and new PUTs beside them.
	poll.Until(t, 30*time.Second, "the journal retired", func() bool {
		s.j.mu.Lock()
		defer s.j.mu.Unlock()
		return len(s.j.segs) == 0
	})
	for i := range 4 {
		wg.Go(func() { put(key(1, i), key(1, i)+"#only") })
	}
	wg.Go(func() { del(key(0, 1)) })
	wg.Go(func() { del(key(0, 2)) })
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, a := range attempts {
		if a.err != nil && !(a.body != "" && errors.Is(a.err, objstore.ErrExists)) {
			t.Fatalf("workload: %s %q: %v", a.key, a.body, a.err)
		}
	}
	log := rec.log
	t.Logf("%d operations logged, %d calls", len(log), len(attempts))

	m := initial.clone()
	images := filepath.Join(memoryDir(t), "images")
	for p := 0; p <= len(log); p++ {
		if p > 0 {
			m.apply(log[p-1])
		}
		for _, durable := range []bool{true, false} {
			dir := filepath.Join(images, fmt.Sprintf("%d-%v", p, durable))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			m.write(t, dir, durable)
			checkImage(t, dir, p, attempts, fmt.Sprintf("prefix %d/%d (%s)", p, len(log), map[bool]string{true: "synced only", false: "everything"}[durable]))
			os.RemoveAll(dir)
		}
	}
}

// checkImage reopens a journaled store on a crash image and checks it
// against the workload's calls that began before the crash (at p).
func checkImage(t *testing.T, dir string, p int, attempts []attempt, what string) {
	t.Helper()
	s, err := Open(dir, Options{Journal: true})
	if err != nil {
		t.Fatalf("%s: reopen: %v", what, err)
	}
	defer s.Close()
	// The replay retired every segment it found (before any new PUT).
	if names, _ := os.ReadDir(filepath.Join(dir, journalDir)); len(names) != 0 {
		t.Fatalf("%s: the replay left %d segments", what, len(names))
	}
	ctx := context.Background()
	b := s.Bucket("bkt")
	keys := map[string]bool{}
	for _, a := range attempts {
		keys[a.key] = true
	}
	for key := range keys {
		var bodies []string // bodies a PUT begun by p may have left
		mustHave, mustNot, deleting := "", false, false
		for _, a := range attempts {
			if a.key != key || a.start >= p {
				continue
			}
			switch {
			case a.body == "":
				deleting = true
				mustNot = mustNot || a.end >= 0 && a.end <= p
			case a.err == nil:
				bodies = append(bodies, a.body)
				if a.end <= p {
					mustHave = a.body
				}
			}
		}
		got, err := b.Get(ctx, key, 0, -1)
		present := err == nil
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%s: get %s: %v", what, key, err)
		}
		switch {
		case present && mustNot:
			t.Fatalf("%s: %s was deleted (acknowledged) but holds %q", what, key, got)
		case present && !slices.Contains(bodies, string(got)):
			t.Fatalf("%s: %s holds %q, which no winning PUT begun by then wrote (%q)", what, key, got, bodies)
		case !present && mustHave != "" && !deleting:
			t.Fatalf("%s: acknowledged %s (%q) is missing", what, key, mustHave)
		}
		// Create-once still holds after the replay.
		_, err = b.PutIfAbsent(ctx, key, []byte("after"))
		if present && !errors.Is(err, objstore.ErrExists) || !present && err != nil {
			t.Fatalf("%s: PUT of %s (present %v) after the crash: %v", what, key, present, err)
		}
	}
}

// memoryDir is a folder on tmpfs when there is one: the images are checked
// for what they hold, and hundreds of reopens sync.
func memoryDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/dev/shm", "starlog-fs-alice-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
