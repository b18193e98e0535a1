// Package dsbench measures the Durable Streams face against the protocol's
// reference server (`@durable-streams/server`, file mode, an fdatasync per
// append): appends of one body each from a keep-alive HTTP/1.1 client,
// one stream at a time, 16 streams at once, and an idempotent producer
// (Producer-Id, -Epoch, -Seq on every append). Issue 31's goal is 1.5× the
// reference server on each row.
package dsbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Workload is one row.
type Workload struct {
	Name       string
	Streams    int  // one appender per stream
	Idempotent bool // Producer-* headers on every append
}

// Workloads are the three rows.
func Workloads() []Workload {
	return []Workload{
		{Name: "sequential, 1 stream", Streams: 1},
		{Name: "16 streams, 1 in flight each", Streams: 16},
		{Name: "idempotent producer, 1 stream", Streams: 1, Idempotent: true},
	}
}

// Client is a keep-alive HTTP/1.1 client with room for every appender's
// connection.
func Client() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	t.ForceAttemptHTTP2 = false
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// Run creates w's streams under base+"/"+prefix+i (base is the server's
// protocol root) and appends bodies of size bytes to them for d; it
// returns the acknowledged appends per second.
func Run(ctx context.Context, c *http.Client, base, prefix string, w Workload, size int, d time.Duration) (float64, error) {
	body := make([]byte, size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	for i := range w.Streams {
		if err := do(ctx, c, http.MethodPut, streamURL(base, prefix, i), nil, nil, http.StatusCreated, http.StatusOK); err != nil {
			return 0, fmt.Errorf("create: %w", err)
		}
	}
	var acked atomic.Int64
	var firstErr error
	var once sync.Once
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range w.Streams {
		wg.Go(func() {
			u := streamURL(base, prefix, i)
			hdr := http.Header{"Content-Type": {"application/octet-stream"}}
			for seq := 0; rctx.Err() == nil; seq++ {
				if w.Idempotent {
					hdr.Set("Producer-Id", prefix+strconv.Itoa(i))
					hdr.Set("Producer-Epoch", "0")
					hdr.Set("Producer-Seq", strconv.Itoa(seq))
				}
				if err := do(ctx, c, http.MethodPost, u, hdr, body, http.StatusOK, http.StatusNoContent); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				acked.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(acked.Load()) / time.Since(start).Seconds(), nil
}

func streamURL(base, prefix string, i int) string {
	return fmt.Sprintf("%s/%s%d", base, prefix, i)
}

func do(ctx context.Context, c *http.Client, method, url string, hdr http.Header, body []byte, ok ...int) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if method == http.MethodPut {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	for _, s := range ok {
		if resp.StatusCode == s {
			return nil
		}
	}
	return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, msg)
}
