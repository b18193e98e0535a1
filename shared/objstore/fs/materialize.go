package fs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/starlog/starlog/shared/objstore"
)

// run is the materializer: it seals the open segment once its first record
// is materializeAfter old (at once when a delete waits on it, the journal
// is half full, or the store closes), writes each sealed segment's records
// to their files, and retires the segment. Segments retire in order.
func (j *journal) run() {
	defer close(j.stopped)
	j.mu.Lock()
	defer j.mu.Unlock()
	for {
		if j.failed != nil {
			return // the next open's replay settles what is left
		}
		if j.spare == nil && j.spareFor != j.lastSeg && !j.closing {
			// A segment was put to use: have its successor ready.
			j.prepareSpareLocked()
			continue
		}
		var seg *segment
		if len(j.segs) > 0 {
			seg = j.segs[0]
		}
		var wait <-chan time.Time
		switch {
		case seg == nil:
			if j.closing {
				j.dropSpareLocked()
				return
			}
		case seg.sealed:
		case j.flushing:
			// The flusher may be writing to it: its end notifies.
		case j.dueLocked(seg):
			j.sealLocked()
		case len(seg.entries) > 0:
			wait = time.After(materializeAfter - time.Since(seg.first))
		}
		if seg == nil || !seg.sealed {
			ch := j.changed
			j.mu.Unlock()
			select {
			case <-ch:
			case <-wait:
			}
			j.mu.Lock()
			continue
		}
		entries := seg.entries
		j.mu.Unlock()
		err := j.materialize(entries)
		if err == nil {
			err = j.retire(seg.path)
		}
		j.mu.Lock()
		if err != nil {
			if j.closing {
				j.failed = err
				return
			}
			j.mu.Unlock()
			time.Sleep(retryAfter)
			j.mu.Lock()
			continue
		}
		for _, e := range entries {
			j.removeLocked(e)
			j.bytes -= int64(len(e.body))
		}
		j.segs = j.segs[1:]
		j.retired.Add(1)
		j.notifyLocked()
	}
}

// prepareSpareLocked makes the next segment's file and its name durable
// ahead of the PUT that will open it (lock held on entry and exit,
// released for the I/O). Once per segment put to use: after a failure the
// flusher makes its own, and meets the error if it lasts.
func (j *journal) prepareSpareLocked() {
	j.spareFor = j.lastSeg
	id := j.nextSeg
	j.nextSeg++
	fill := spareFill(j.lastSealed, j.fillMax)
	j.mu.Unlock()
	seg, err := j.newSegment(id)
	if err == nil {
		if err = zeroFill(seg.f, fill); err != nil {
			seg.f.Close()
			j.fsys.Unlink(seg.path)
		}
	}
	j.mu.Lock()
	if err != nil {
		return
	}
	j.spare = seg
	if j.lastSeg > id || j.closing {
		// A flusher opened a later segment meanwhile (ids must follow the
		// order of use), or the store closes.
		j.dropSpareLocked()
	}
}

// spareFill is how many zeros a spare segment is filled with: a quarter
// past the size the last segment sealed at (a segment seals by age, so
// that is about what the next one will take), within [minFill, limit],
// in whole 64 KiB.
func spareFill(lastSealed, limit int64) int64 {
	n := lastSealed + lastSealed/4
	n = (n + minFill - 1) / minFill * minFill
	return min(max(n, minFill), limit)
}

// zeroFill writes n zero bytes at the start of f and syncs them. A replay
// stops at the zeros (a record's length is never 0), as at a torn tail.
func zeroFill(f file, n int64) error {
	if n <= 0 {
		return nil
	}
	zeros := make([]byte, min(n, 256<<10))
	for off := int64(0); off < n; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), n-off)], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// dropSpareLocked removes an unused spare. It holds no record, so its
// removal needs no sync: a replay retires a segment without records.
func (j *journal) dropSpareLocked() {
	if j.spare == nil {
		return
	}
	j.spare.f.Close()
	j.fsys.Unlink(j.spare.path)
	j.spare = nil
}

// dueLocked reports whether the open segment seg should be sealed now:
// the store is closing, a delete waits on it, the journal is half full,
// or its first record is materializeAfter old.
func (j *journal) dueLocked(seg *segment) bool {
	return j.closing || seg.id <= j.urgent || j.bytes >= maxUnretired/2 ||
		len(seg.entries) > 0 && time.Since(seg.first) >= materializeAfter
}

// retire removes a materialized segment and makes the removal durable
// before any of its keys may be deleted: a replay of it after a delete
// would resurrect the key.
func (j *journal) retire(path string) error {
	if err := j.fsys.Unlink(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return j.fsys.SyncDir(j.dir)
}

// materialize writes the entries' files one after another, unsynced,
// then makes all of them durable with one syncfs(2): the journal holds
// them until then, so one sync of the file system replaces a data sync
// per file and a sync per folder (the disk's cache flush is the cost).
// One writer, not several: each file is a create and a link (and a
// removal) in shared folders, which serialize on the folders' locks, and
// more writers only crowd the PUTs' own system calls and syncs (a lone
// journaled 1 KiB PUT in BenchmarkFSPutIfAbsent1KiB took 0.33–0.35 ms
// beside one writer, 0.41–0.43 ms beside eight, and sixteen PUTting at
// once went no faster with eight).
func (j *journal) materialize(entries []*jentry) error {
	for _, e := range entries {
		if err := j.materializeOne(e); err != nil {
			return fmt.Errorf("fs: materialize %s/%s: %w", e.bucket, e.key, err)
		}
	}
	if len(entries) == 0 {
		return nil
	}
	return j.fsys.SyncFS(j.root)
}

// materializeOne writes e's body to a temp file in staging, stamped with
// e's mtime, and links it to the key create-once. A key already there is
// this record's own file (materialized before a crash that came before its
// segment retired): only one unretired record may name a key, and no
// other writer shares a journaled store.
func (j *journal) materializeOne(e *jentry) error {
	bdir := filepath.Join(j.root, e.bucket)
	if _, err := os.Stat(bdir); err != nil {
		return nil // no such bucket: nothing can be stored there
	}
	target := filepath.Join(bdir, filepath.FromSlash(e.key))
	tmp := filepath.Join(j.root, stagingDir, e.bucket, "journal-"+strconv.FormatUint(e.seq, 16))
	if err := j.writeFile(tmp, e.body, e.stamp); err != nil {
		return err
	}
	defer j.fsys.Unlink(tmp)
	for range publishAttempts {
		err := j.fsys.Link(tmp, target)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EEXIST):
			fi, lerr := os.Lstat(target)
			if lerr != nil {
				continue
			}
			if !fi.IsDir() {
				return nil // materialized before
			}
			if j.fsys.Rmdir(target) != nil { // only an empty folder gives way
				return fmt.Errorf("%w: %q is a folder of existing keys", objstore.ErrKeyConflict, e.key)
			}
		case errors.Is(err, syscall.ENOENT):
			for _, p := range objstore.ParentKeys(e.key) {
				d := filepath.Join(bdir, filepath.FromSlash(p))
				if err := j.fsys.Mkdir(d); err != nil && !errors.Is(err, syscall.EEXIST) {
					break // pruned meanwhile: link again
				}
			}
		default:
			return err
		}
	}
	return fmt.Errorf("fs: gave up after %d attempts racing folder removals", publishAttempts)
}

// writeFile writes a new file at path with mtime stamp (not synced: the
// caller syncs the file system), replacing a leftover of a crashed
// materialization.
func (j *journal) writeFile(path string, body []byte, stamp int64) error {
	f, err := j.fsys.Create(path)
	if errors.Is(err, os.ErrExist) {
		j.fsys.Unlink(path)
		f, err = j.fsys.Create(path)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(body)
	if err == nil {
		err = f.Stamp(time.Unix(0, stamp))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		j.fsys.Unlink(path)
	}
	return err
}

// recover replays the segments a previous process left, oldest first:
// every whole record of each is materialized (its torn tail, never
// acknowledged, is dropped), then the segment is retired.
func (j *journal) recover() error {
	// The journal's folder must itself be durable before a segment in it
	// acknowledges anything.
	if err := j.fsys.Mkdir(j.dir); err == nil {
		if err := j.fsys.SyncDir(j.root); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrExist) {
		return err
	}
	names, err := j.fsys.ReadDir(j.dir)
	if err != nil {
		return err
	}
	slices.Sort(names)
	j.nextSeg = 1
	for _, name := range names {
		hex, ok := strings.CutSuffix(name, ".seg")
		id, perr := strconv.ParseUint(hex, 16, 64)
		if !ok || perr != nil {
			continue
		}
		j.nextSeg = max(j.nextSeg, id+1)
		path := filepath.Join(j.dir, name)
		data, err := j.fsys.ReadFile(path)
		if err != nil {
			return err
		}
		var entries []*jentry
		for len(data) > 0 {
			r, n, err := decodeRecord(data)
			if err != nil {
				break // the torn tail
			}
			data = data[n:]
			j.seq = max(j.seq, r.seq)
			entries = append(entries, &jentry{bucket: r.bucket, key: r.key, body: r.body, stamp: r.stamp, seq: r.seq})
		}
		// A record naming an invalid bucket or key is not one this store
		// wrote: skip it rather than write outside a bucket.
		entries = slices.DeleteFunc(entries, func(e *jentry) bool {
			return objstore.ValidateBucketName(e.bucket) != nil || objstore.ValidateKey(e.key) != nil
		})
		if err := j.materialize(entries); err != nil {
			return err
		}
		if err := j.retire(path); err != nil {
			return err
		}
	}
	return nil
}

// close stops taking writes, materializes and retires everything, and
// waits for the materializer.
func (j *journal) close() error {
	j.mu.Lock()
	j.closing = true
	j.notifyLocked()
	j.mu.Unlock()
	<-j.stopped
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failed != nil && !errors.Is(j.failed, errClosed) {
		return j.failed
	}
	return nil
}
