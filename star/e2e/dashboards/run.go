package dashboards

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/star/e2e/internal/benchproc"
)

// Run is a run's parameters.
type Run struct {
	Star     string        // the star binary
	Work     string        // folder for star dev's data and the logs (wiped first)
	Scrape   time.Duration // scrape interval
	Load     time.Duration // how long the producers append
	Settle   time.Duration // the idle round after the load, for the auditor to settle
	Rate     int           // records/s of each storage class's producers
	Record   int           // record size in bytes
	Streams  int           // streams per storage class
	Latency  string        // --dev-express-latency (P50,P99), empty: none
	Interval time.Duration // --auditor-interval
}

// Buckets are star dev's buckets in the stack's order (Standard, then one
// Express bucket per zone).
var Buckets = []string{"standard", "express-a", "express-b", "express-c"}

// Caption says what the run was, for the images.
func (r Run) Caption(start time.Time, load string) string {
	lat := "no added Express latency"
	if r.Latency != "" {
		lat = "Express buckets at p50,p99 " + r.Latency
	}
	return fmt.Sprintf("star dev %s: %d Standard and %d Express streams, %d records/s of %d B on each class with a tailing reader per stream for %s, "+
		"then a %s settle round and a catch-up read of a settled stream; auditor every %s; %s; /metrics scraped every %s; load avg %s",
		start.UTC().Format("2006-01-02 15:04 UTC"), r.Streams, r.Streams, r.Rate, r.Record, r.Load, r.Settle, r.Interval, lat, r.Scrape, load)
}

// Execute starts star dev, runs the workload while scraping /metrics
// every r.Scrape, and returns the scrapes. A failed workload step fails
// the run: an image of a broken run would show nothing true.
func (r Run) Execute(ctx context.Context, logf func(string, ...any)) (*Store, error) {
	if err := os.RemoveAll(r.Work); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.Work, 0o755); err != nil {
		return nil, err
	}
	api, err := benchproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	internal, err := benchproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	kafka, err := benchproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"dev", "--open", "--data", filepath.Join(r.Work, "data"), "--listen", api, "--internal-listen", internal,
		"--kafka-listen", kafka, "--auditor-interval", r.Interval.String(),
		// Settle within the run: ripe after seconds, not minutes.
		"--settle-trigger-mib", "1", "--settle-linger", "5s", "--settle-express-linger", "5s",
		"--settle-age-cap", "30s", "--settle-express-age-cap", "30s", "--read-grace", "20s"}
	if r.Latency != "" {
		args = append(args, "--dev-express-latency", r.Latency)
	}
	star, err := benchproc.Start(r.Work, "star-dev", r.Star, args...)
	if err != nil {
		return nil, err
	}
	defer star.Stop()
	if err := benchproc.WaitHealth(ctx, "http://"+api+"/health"); err != nil {
		return nil, fmt.Errorf("star dev (log %s): %w", star.LogPath, err)
	}
	logf("star dev serving on %s, /metrics on %s", api, internal)

	scrapes := filepath.Join(r.Work, "scrapes")
	if err := os.MkdirAll(scrapes, 0o755); err != nil {
		return nil, err
	}
	st := NewStore()
	sctx, stopScrape := context.WithCancel(ctx)
	var scrapeErr error
	var wg sync.WaitGroup
	wg.Go(func() { scrapeErr = scrapeEvery(sctx, st, "http://"+internal+"/metrics", r.Scrape, scrapes) })
	defer func() { stopScrape(); wg.Wait() }()

	endpoint := "http://" + api
	bench := func(name string, extra ...string) error {
		a := append([]string{"bench", "--endpoint", endpoint, "--basin", "starlog-dev", "--json"}, extra...)
		out, err := os.Create(filepath.Join(r.Work, name+".log"))
		if err != nil {
			return err
		}
		defer out.Close()
		cmd := exec.CommandContext(ctx, r.Star, a...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("star %s (log %s): %w", strings.Join(a, " "), out.Name(), err)
		}
		return nil
	}
	// A scrape before any traffic, so rates start from the idle star.
	if err := sleep(ctx, 2*r.Scrape); err != nil {
		return nil, err
	}
	logf("load: %s of appends and tailing reads on both classes", r.Load)
	var lwg sync.WaitGroup
	errs := make([]error, 2)
	for i, class := range []string{"standard", "express"} {
		lwg.Go(func() {
			errs[i] = bench("bench-"+class, "--storage-class", class, "--stream-prefix", class+"-",
				"--streams", fmt.Sprint(r.Streams), "--producers", fmt.Sprint(r.Streams), "--readers", "1",
				"--rate", fmt.Sprint(r.Rate), "--record-size", fmt.Sprint(r.Record), "--duration", r.Load.String())
		})
	}
	lwg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	logf("settle round: %s idle", r.Settle)
	if err := sleep(ctx, r.Settle); err != nil {
		return nil, err
	}
	logf("catch-up read of standard-0 from its start")
	if err := bench("bench-read", "read", "--stream", "standard-0", "--metrics-url", "http://"+internal+"/metrics"); err != nil {
		return nil, err
	}
	if err := sleep(ctx, 3*r.Scrape); err != nil { // the read's rates in the last scrapes
		return nil, err
	}
	stopScrape()
	wg.Wait()
	if scrapeErr != nil {
		return nil, scrapeErr
	}
	return st, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// scrapeEvery scrapes url into st every d until ctx ends, each scrape
// also kept in dir as <unix ms>.prom (to check the evaluation against
// another); a failed scrape fails the run (each is bounded by d).
func scrapeEvery(ctx context.Context, st *Store, url string, d time.Duration, dir string) error {
	c := &http.Client{Timeout: d}
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		now := time.Now()
		res, err := c.Get(url)
		var body []byte
		if err == nil {
			body, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("scrape %s: %w", url, err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.prom", now.UnixMilli())), body, 0o644); err != nil {
			return err
		}
		if err := st.AddScrape(now, bytes.NewReader(body)); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
