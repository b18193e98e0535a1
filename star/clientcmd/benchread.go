package clientcmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// benchReadConfig is what `star bench read` runs.
type benchReadConfig struct {
	stream     string
	from       uint64
	bytes      uint64
	sse        bool
	metricsURL string
	asJSON     bool
	cpuProfile string
}

func (c *conn) benchReadCmd() *cobra.Command {
	cfg := benchReadConfig{}
	cmd := &cobra.Command{
		Use:   "read",
		Short: "Measure catch-up read throughput of one stream",
		Long: `Read --stream from --seq-num as fast as possible on one read session (S2S,
or SSE with --sse, bodies in base64) until --bytes metered bytes (0: to the tail), discarding
the records, and report MiB/s of metered bytes, the first batch's latency,
and CPU seconds per GiB on both sides: this process's (getrusage) and the
star's (process_cpu_seconds_total from --metrics-url, default the
endpoint's /metrics; omitted when it cannot be scraped, as behind a
public listener).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.stream == "" {
				return errors.New("--stream is required")
			}
			b, err := c.basinHandle()
			if err != nil {
				return err
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			endpoint := c.fromEnv(c.basinEndpoint, EnvBasinEndpoint)
			if endpoint == "" {
				endpoint = c.fromEnv(c.endpoint, EnvEndpoint, EnvAccountEndpoint)
			}
			if cfg.metricsURL == "" && endpoint != "" {
				cfg.metricsURL = strings.TrimSuffix(endpoint, "/") + "/metrics"
			}
			stopProfile, err := startCPUProfile(cfg.cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			sseTarget := sseTarget{endpoint: endpoint, basin: c.fromEnv(c.basin, EnvBasin), token: c.fromEnv(c.token, EnvToken)}
			res, err := runBenchRead(ctx, b.Stream(cfg.stream), sseTarget, cfg)
			if err != nil {
				return err
			}
			if cfg.asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			res.print(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.stream, "stream", "", "stream to read")
	f.Uint64Var(&cfg.from, "seq-num", 0, "start at this seq num")
	f.Uint64Var(&cfg.bytes, "bytes", 0, "stop after this many metered bytes (0: at the tail)")
	f.BoolVar(&cfg.sse, "sse", false, "read over SSE (JSON events, bodies in base64) instead of S2S")
	f.StringVar(&cfg.metricsURL, "metrics-url", "", "the star's Prometheus endpoint, for its CPU (default: <endpoint>/metrics)")
	f.BoolVar(&cfg.asJSON, "json", false, "print the result as JSON")
	f.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write this process's CPU profile of the read to the file")
	return cmd
}

// benchReadResult is one catch-up read's figures.
type benchReadResult struct {
	Transport      string   `json:"transport"`
	Records        uint64   `json:"records"`
	MeteredBytes   uint64   `json:"metered_bytes"`
	Seconds        float64  `json:"seconds"`
	MiBPerSec      float64  `json:"mib_per_sec"`
	FirstBatchMs   float64  `json:"first_batch_ms"`
	ClientCPUPerGi float64  `json:"client_cpu_s_per_gib"`
	StarCPUPerGi   *float64 `json:"star_cpu_s_per_gib,omitempty"`
}

func (r *benchReadResult) print(w io.Writer) {
	fmt.Fprintf(w, "read %d records, %.1f MiB (%s) in %.2fs: %.1f MiB/s, first batch %.1f ms\n",
		r.Records, float64(r.MeteredBytes)/(1<<20), r.Transport, r.Seconds, r.MiBPerSec, r.FirstBatchMs)
	fmt.Fprintf(w, "cpu per GiB: client %.2f s", r.ClientCPUPerGi)
	if r.StarCPUPerGi != nil {
		fmt.Fprintf(w, ", star %.2f s", *r.StarCPUPerGi)
	}
	fmt.Fprintln(w)
}

type sseTarget struct{ endpoint, basin, token string }

func runBenchRead(ctx context.Context, s *sdk.Stream, target sseTarget, cfg benchReadConfig) (*benchReadResult, error) {
	req := api.ReadRequest{From: api.FromSeqNum, Value: cfg.from}
	if cfg.bytes > 0 {
		req.Bytes = api.Uint64(cfg.bytes)
	}
	noWait := time.Duration(0)
	req.Wait = &noWait // end at the tail
	star0, starOK := scrapeCPU(ctx, cfg.metricsURL)
	cpu0 := processCPU()
	t0 := time.Now()
	var first time.Duration
	var records, bytes uint64
	batch := func(recs []api.Record) {
		if first == 0 {
			first = time.Since(t0)
		}
		records += uint64(len(recs))
		bytes += api.MeteredBytes(recs)
	}
	var err error
	transport := "s2s"
	if cfg.sse {
		transport = "sse"
		err = benchReadSSE(ctx, target, s.Name(), req, batch)
	} else {
		err = benchReadS2S(ctx, s, req, batch)
	}
	if err != nil {
		return nil, err
	}
	wall, cpu := time.Since(t0), processCPU()-cpu0
	gib := float64(bytes) / (1 << 30)
	res := &benchReadResult{Transport: transport, Records: records, MeteredBytes: bytes, Seconds: wall.Seconds(),
		MiBPerSec: float64(bytes) / (1 << 20) / wall.Seconds(), FirstBatchMs: float64(first) / float64(time.Millisecond)}
	if gib > 0 {
		res.ClientCPUPerGi = cpu.Seconds() / gib
		if star1, ok := scrapeCPU(ctx, cfg.metricsURL); ok && starOK {
			v := (star1 - star0) / gib
			res.StarCPUPerGi = &v
		}
	}
	return res, nil
}

func benchReadS2S(ctx context.Context, s *sdk.Stream, req api.ReadRequest, batch func([]api.Record)) error {
	rs, err := s.ReadSession(ctx, req, sdk.ReadSessionOptions{})
	if err != nil {
		return err
	}
	defer rs.Close()
	for {
		b, err := rs.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		batch(b.Records)
	}
}

// benchReadSSE reads an SSE session with plain HTTP (the SDK reads S2S).
func benchReadSSE(ctx context.Context, t sseTarget, stream string, req api.ReadRequest, batch func([]api.Record)) error {
	if t.endpoint == "" {
		return errors.New("--sse needs an endpoint (--endpoint or " + EnvEndpoint + ")")
	}
	u := strings.TrimSuffix(t.endpoint, "/") + "/v1/streams/" + url.PathEscape(stream) + "/records?" + req.Query().Encode()
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	hr.Header.Set("Accept", api.ContentTypeSSE)
	// Base64: raw JSON would replace a binary body's invalid UTF-8.
	hr.Header.Set("s2-format", "base64")
	hr.Header.Set("s2-basin", t.basin)
	if t.token != "" {
		hr.Header.Set("Authorization", "Bearer "+t.token)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("sse read: %s: %s", resp.Status, b)
	}
	sr := api.NewSSEReader(bufio.NewReaderSize(resp.Body, 1<<20), 0)
	for {
		ev, err := sr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sse read: %w", err)
		}
		re, derr := api.DecodeReadEvent(ev, api.FormatBase64)
		if derr != nil {
			return fmt.Errorf("sse read: %w", derr)
		}
		switch re.Kind {
		case api.ReadEventBatch:
			batch(re.Batch.Records)
		case api.ReadEventDone:
			return nil
		case api.ReadEventError:
			return fmt.Errorf("sse read: %v", re.Err)
		}
	}
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scrapeCPU reads process_cpu_seconds_total from a Prometheus text
// endpoint; ok is false when it cannot (no URL, an error, no such line).
func scrapeCPU(ctx context.Context, u string) (float64, bool) {
	if u == "" {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}
