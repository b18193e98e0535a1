// Package hist is a log-bucketed histogram of durations, for latency
// percentiles in benchmarks: constant memory, O(1) recording, and a
// relative error below 1% at every percentile.
//
// Layout (as in HdrHistogram): values below 2^subBits nanoseconds have one
// bucket each; every power-of-two range [2^k, 2^(k+1)) above is split into
// 2^subBits buckets of equal width, so a bucket's width is at most
// 1/2^subBits of its lower bound.
package hist

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

const (
	subBits    = 7
	subBuckets = 1 << subBits
	// nBuckets covers every non-negative int64.
	nBuckets = (64 - subBits + 1) << subBits
)

// Histogram counts durations. It is safe for concurrent use; the zero value
// is empty and ready.
type Histogram struct {
	mu     sync.Mutex
	counts []uint64
	n      uint64
	sum    float64
	min    time.Duration
	max    time.Duration
}

// bucket is the index of v's bucket (v ≥ 0).
func bucket(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	k := bits.Len64(v) - 1 // 2^k ≤ v < 2^(k+1), k ≥ subBits
	shift := k - subBits
	return (shift+1)<<subBits + int(v>>shift) - subBuckets
}

// bounds returns the smallest value of bucket i and its width.
func bounds(i int) (low, width uint64) {
	if i < subBuckets {
		return uint64(i), 1
	}
	g := i >> subBits // ≥ 1
	shift := g - 1
	sub := uint64(i & (subBuckets - 1))
	return (subBuckets + sub) << shift, 1 << shift
}

// Record adds one duration; negative ones count as zero.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counts == nil {
		h.counts = make([]uint64, nBuckets)
	}
	h.counts[bucket(uint64(d))]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += float64(d)
}

// Merge adds every count of o into h.
func (h *Histogram) Merge(o *Histogram) {
	if h == o {
		return
	}
	o.mu.Lock()
	counts := append([]uint64(nil), o.counts...)
	n, sum, lo, hi := o.n, o.sum, o.min, o.max
	o.mu.Unlock()
	if n == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counts == nil {
		h.counts = make([]uint64, nBuckets)
	}
	for i, c := range counts {
		h.counts[i] += c
	}
	if h.n == 0 || lo < h.min {
		h.min = lo
	}
	if hi > h.max {
		h.max = hi
	}
	h.n += n
	h.sum += sum
}

// Count is the number of recorded durations.
func (h *Histogram) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Min and Max are exact; zero when empty.
func (h *Histogram) Min() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.min
}

func (h *Histogram) Max() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max
}

// Mean is exact up to float rounding; zero when empty.
func (h *Histogram) Mean() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) by the nearest-rank rule:
// the smallest recorded value with at least ⌈q·n⌉ values at or below it,
// approximated by the middle of its bucket and clamped to [Min, Max].
// Zero when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return 0
	}
	q = math.Max(0, math.Min(1, q))
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen < rank {
			continue
		}
		low, width := bounds(i)
		mid := low + (width-1)/2
		if mid > math.MaxInt64 {
			mid = math.MaxInt64
		}
		return min(max(time.Duration(mid), h.min), h.max)
	}
	return h.max
}

// Snapshot is a summary of a histogram.
type Snapshot struct {
	Count uint64        `json:"count"`
	Min   time.Duration `json:"-"`
	Mean  time.Duration `json:"-"`
	P50   time.Duration `json:"-"`
	P90   time.Duration `json:"-"`
	P99   time.Duration `json:"-"`
	P999  time.Duration `json:"-"`
	Max   time.Duration `json:"-"`
}

// Summary returns the usual percentiles.
func (h *Histogram) Summary() Snapshot {
	return Snapshot{
		Count: h.Count(),
		Min:   h.Min(),
		Mean:  h.Mean(),
		P50:   h.Quantile(0.50),
		P90:   h.Quantile(0.90),
		P99:   h.Quantile(0.99),
		P999:  h.Quantile(0.999),
		Max:   h.Max(),
	}
}
