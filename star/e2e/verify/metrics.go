package verify

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

var metricsHTTP = &http.Client{Timeout: 3 * time.Second}

// Metrics is one scrape of a star's GET /metrics: each series (name and
// labels as printed, e.g. `starlog_epoch_halts_total{class="express"}`)
// and its value.
type Metrics map[string]float64

// ScrapeMetrics reads a star's /metrics (Prometheus text format).
func ScrapeMetrics(ctx context.Context, endpoint string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := metricsHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return nil, fmt.Errorf("GET %s/metrics: %s: %s", endpoint, res.Status, strings.TrimSpace(string(b)))
	}
	m := Metrics{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", endpoint, err)
	}
	return m, nil
}

// Sum adds the series of name whose labels include every one of labels
// (`cause="metastore_slow"`, …).
func (m Metrics) Sum(name string, labels ...string) float64 {
	var t float64
	for k, v := range m {
		rest, ok := strings.CutPrefix(k, name)
		if !ok || rest != "" && rest[0] != '{' {
			continue
		}
		all := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				all = false
				break
			}
		}
		if all {
			t += v
		}
	}
	return t
}

// ScrapeAll scrapes every star; a star that does not answer gets a nil
// entry and its error is joined into the returned one.
func ScrapeAll(ctx context.Context, c *Cluster) ([]Metrics, error) {
	out := make([]Metrics, len(c.Stars))
	var errs []string
	for i, s := range c.Stars {
		m, err := ScrapeMetrics(ctx, s.Endpoint())
		if err != nil {
			errs = append(errs, fmt.Sprintf("star %d: %v", i, err))
			continue
		}
		out[i] = m
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("scrape: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

// HealthDoc is what GET /health answers when the star is ready.
type HealthDoc struct {
	Status         string `json:"status"`
	Star           string `json:"star"`
	Incarnation    uint64 `json:"incarnation"`
	HeartbeatAgeMS int64  `json:"heartbeat_age_ms"`
}

// ReadHealth reads a star's /health: ok is false when it is not ready,
// and body says what it answered then.
func ReadHealth(ctx context.Context, endpoint string) (doc HealthDoc, ok bool, body string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/health", nil)
	if err != nil {
		return doc, false, err.Error()
	}
	res, err := healthHTTP.Do(req)
	if err != nil {
		return doc, false, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	if res.StatusCode != http.StatusOK {
		return doc, false, fmt.Sprintf("%d %s", res.StatusCode, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return doc, false, fmt.Sprintf("200 but %v: %s", err, b)
	}
	return doc, true, string(b)
}
