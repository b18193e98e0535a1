package clientcmd

import (
	"fmt"
	"io"
	"time"

	"github.com/starlog/starlog/star/clientcmd/hist"
)

// latencyJSON is a latency summary in milliseconds.
type latencyJSON struct {
	Count  uint64  `json:"count"`
	MeanMS float64 `json:"mean_ms"`
	P50MS  float64 `json:"p50_ms"`
	P90MS  float64 `json:"p90_ms"`
	P99MS  float64 `json:"p99_ms"`
	P999MS float64 `json:"p999_ms"`
	MaxMS  float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func latencyOf(h *hist.Histogram) latencyJSON {
	s := h.Summary()
	return latencyJSON{Count: s.Count, MeanMS: ms(s.Mean), P50MS: ms(s.P50), P90MS: ms(s.P90),
		P99MS: ms(s.P99), P999MS: ms(s.P999), MaxMS: ms(s.Max)}
}

// throughputJSON is a count over a duration.
type throughputJSON struct {
	Records       uint64  `json:"records"`
	Bytes         uint64  `json:"metered_bytes"`
	MiBPerSec     float64 `json:"mib_per_s"`
	RecordsPerSec float64 `json:"records_per_s"`
	Errors        uint64  `json:"errors,omitempty"`
	// Missing are acked records a reader never received.
	Missing uint64 `json:"missing,omitempty"`
}

func throughput(records, bytes uint64, d time.Duration) throughputJSON {
	secs := d.Seconds()
	if secs <= 0 {
		return throughputJSON{Records: records, Bytes: bytes}
	}
	return throughputJSON{Records: records, Bytes: bytes,
		MiBPerSec: float64(bytes) / secs / (1 << 20), RecordsPerSec: float64(records) / secs}
}

// benchResult is bench's report; its JSON form is the --json output.
type benchResult struct {
	Streams       int            `json:"streams"`
	Producers     int            `json:"producers"`
	ReadersPerStr int            `json:"readers_per_stream"`
	RecordSize    int            `json:"record_size"`
	Mode          string         `json:"mode"`
	Batch         int            `json:"batch,omitempty"`     // unary: records per append
	InFlight      int            `json:"in_flight,omitempty"` // unary: appends outstanding per producer
	TargetRate    float64        `json:"target_rate,omitempty"`
	DurationS     float64        `json:"duration_s"`
	Append        throughputJSON `json:"append"`
	AckLatency    latencyJSON    `json:"ack_latency"`
	Read          throughputJSON `json:"read"`
	E2ELatency    latencyJSON    `json:"e2e_latency"`
}

// result summarises a run: appends over the producing time, reads over the
// whole time including the catch-up.
func (st *benchState) result(cfg benchConfig, appendElapsed, readElapsed time.Duration) *benchResult {
	r := &benchResult{
		Streams:       cfg.streams,
		Producers:     cfg.producers,
		ReadersPerStr: cfg.readers,
		RecordSize:    cfg.recordSize,
		Mode:          cfg.mode,
		TargetRate:    cfg.rate,
		DurationS:     appendElapsed.Seconds(),
		Append:        throughput(st.appended.Load(), st.appendBytes.Load(), appendElapsed),
		AckLatency:    latencyOf(&st.ackLat),
		Read:          throughput(st.read.Load(), st.readBytes.Load(), readElapsed),
		E2ELatency:    latencyOf(&st.e2eLat),
	}
	if cfg.mode == benchModeUnary {
		r.Batch, r.InFlight = cfg.unary.batch, cfg.unary.inFlight
	}
	r.Append.Errors = st.appendErrors.Load()
	if want := r.Append.Records * uint64(cfg.readers); r.Read.Records < want {
		r.Read.Missing = want - r.Read.Records
	}
	return r
}

func (l latencyJSON) String() string {
	return fmt.Sprintf("p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  p99.9 %.3f ms  max %.3f ms  (mean %.3f ms, n=%d)",
		l.P50MS, l.P90MS, l.P99MS, l.P999MS, l.MaxMS, l.MeanMS, l.Count)
}

func (r *benchResult) print(w io.Writer) {
	fmt.Fprintf(w, "streams %d, producers %d, readers/stream %d, record size %d B, duration %.1f s\n",
		r.Streams, r.Producers, r.ReadersPerStr, r.RecordSize, r.DurationS)
	if r.Mode == benchModeUnary {
		fmt.Fprintf(w, "unary appends of %d records, %d in flight per producer\n", r.Batch, r.InFlight)
	}
	fmt.Fprintf(w, "append:  %d records, %.2f MiB/s, %.0f records/s", r.Append.Records, r.Append.MiBPerSec, r.Append.RecordsPerSec)
	if r.Append.Errors > 0 {
		fmt.Fprintf(w, ", %d errors", r.Append.Errors)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "ack:     %s\n", r.AckLatency)
	if r.ReadersPerStr > 0 {
		fmt.Fprintf(w, "read:    %d records, %.2f MiB/s, %.0f records/s", r.Read.Records, r.Read.MiBPerSec, r.Read.RecordsPerSec)
		if r.Read.Missing > 0 {
			fmt.Fprintf(w, ", %d missing", r.Read.Missing)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "e2e:     %s\n", r.E2ELatency)
	}
}
