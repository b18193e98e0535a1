package servecmd_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/poll"
)

// metricSum adds up every series of a metric on the star's /metrics whose
// labels contain all of the given label pairs.
func metricSum(t *testing.T, p *proc, name string, labels ...string) float64 {
	t.Helper()
	res, err := client.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	sum := 0.0
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// `star dev` (what `make run` starts) settles and trims by itself: with a
// tiny policy, records appended to a Standard and an Express stream end
// up in settled objects under the data folder, the auditor's trim-check
// deletes their slots after the read grace, every acknowledged record
// still reads back, and a SIGTERM stops the star and its auditor cleanly.
func TestDevSettlesAndTrimsByItself(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	data := t.TempDir()
	p := startDev(t, data, "--auditor-interval", "100ms",
		"--settle-linger", "10ms", "--settle-age-cap", "50ms", "--settle-express-linger", "10ms", "--settle-express-age-cap", "50ms",
		"--settle-trigger-mib", "1", "--settle-output-cap-mib", "1", "--read-grace", "300ms")
	if status, out, err := call(p, "POST", "/v1/streams", `{"stream":"exp","config":{"storage_class":"express"}}`); err != nil || status != 201 {
		t.Fatalf("create express stream: %d %s %v", status, out, err)
	}
	a := &acked{recs: map[string]map[uint64]string{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range []string{"std", "exp"} {
		wg.Go(func() { appendLoop(p, s, "w", a, stop) })
	}
	a.waitMore(t, 100, "std", "exp")
	close(stop)
	wg.Wait()
	// The journal's counters move: every sync carried at least one record,
	// and an Express flight's three copies share syncs.
	syncs := metricSum(t, p, "starlog_fs_journal_syncs_total")
	records := metricSum(t, p, "starlog_fs_journal_records_total")
	if syncs == 0 || records < syncs {
		t.Fatalf("journal metrics: %v syncs carried %v records, want some syncs and at least one record each", syncs, records)
	}
	t.Logf("journal: %v records in %v syncs", records, syncs)

	if err := poll.Wait(30*time.Second, func() error {
		settled := metricSum(t, p, "starlog_auditor_jobs_total", `kind="settle"`, `outcome="done"`)
		objects := metricSum(t, p, "starlog_settle_objects_total")
		stdTrim := metricSum(t, p, "starlog_settle_slots_trimmed_total", `class="standard"`)
		expTrim := metricSum(t, p, "starlog_settle_slots_trimmed_total", `class="express"`)
		if settled == 0 || objects == 0 || stdTrim == 0 || expTrim == 0 {
			return fmt.Errorf("settle jobs %v, objects %v, trimmed standard %v express %v", settled, objects, stdTrim, expTrim)
		}
		t.Logf("settle jobs %v, settled objects %v, slots trimmed: standard %v express %v", settled, objects, stdTrim, expTrim)
		return nil
	}); err != nil {
		t.Fatalf("after 30 s: %v\n%s", err, p.stderr)
	}
	var objs []string
	filepath.WalkDir(filepath.Join(data, "objects", "standard", "streams"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			objs = append(objs, path)
		}
		return nil
	})
	if len(objs) < 2 {
		t.Fatalf("settled objects on disk: %v", objs)
	}
	for stream, want := range a.recs {
		got, tail := readAll(t, p, stream)
		for seq, body := range want {
			if got[seq] != body {
				t.Fatalf("%s: acknowledged seq %d (%q) reads back as %q (tail %d)", stream, seq, body, got[seq], tail)
			}
		}
		t.Logf("%s: %d acknowledged records read back", stream, len(want))
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.done; err != nil {
		t.Fatalf("star dev after SIGTERM: %v\n%s", err, p.stderr)
	}
	if s := p.stderr.String(); strings.Contains(s, "level=ERROR") {
		t.Fatalf("errors logged:\n%s", s)
	}
}
