package hist

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestBuckets checks the bucket layout: contiguous, every value inside its
// bucket, and widths within the relative error bound.
func TestBuckets(t *testing.T) {
	var next uint64
	for i := range nBuckets {
		low, width := bounds(i)
		if low != next {
			t.Fatalf("bucket %d starts at %d, want %d", i, low, next)
		}
		if bucket(low) != i || bucket(low+width-1) != i {
			t.Fatalf("bucket %d: [%d, %d] maps to %d..%d", i, low, low+width-1, bucket(low), bucket(low+width-1))
		}
		if low >= subBuckets && float64(width)/float64(low) > 1.0/subBuckets {
			t.Fatalf("bucket %d: width %d too wide for %d", i, width, low)
		}
		next = low + width
		if next == 0 { // wrapped past 2^64-1: the last bucket
			if i != nBuckets-1 {
				t.Fatalf("buckets end early at %d", i)
			}
		}
	}
	if bucket(math.MaxUint64) != nBuckets-1 {
		t.Fatalf("max value in bucket %d", bucket(math.MaxUint64))
	}
}

// exact is the nearest-rank quantile of sorted values.
func exact(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = max(rank, 1)
	return sorted[rank-1]
}

func TestQuantilesMatchExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dist := range []struct {
		name string
		gen  func() time.Duration
	}{
		{"uniform", func() time.Duration { return time.Duration(rng.Int64N(int64(50 * time.Millisecond))) }},
		{"lognormal", func() time.Duration {
			return time.Duration(math.Exp(rng.NormFloat64()*1.5 + 13)) // ~0.4 ms median, long tail
		}},
		{"small", func() time.Duration { return time.Duration(rng.IntN(300)) }},
	} {
		t.Run(dist.name, func(t *testing.T) {
			var h Histogram
			vals := make([]time.Duration, 100_000)
			for i := range vals {
				vals[i] = dist.gen()
				h.Record(vals[i])
			}
			slices.Sort(vals)
			for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 0.999, 1} {
				got, want := h.Quantile(q), exact(vals, q)
				if diff := math.Abs(float64(got - want)); diff > float64(want)/subBuckets+1 {
					t.Errorf("q%.3f: got %v, want %v (±%.2f%%)", q, got, want, 100.0/subBuckets)
				}
			}
			if h.Min() != vals[0] || h.Max() != vals[len(vals)-1] || h.Count() != uint64(len(vals)) {
				t.Fatalf("min %v max %v count %d", h.Min(), h.Max(), h.Count())
			}
			var sum float64
			for _, v := range vals {
				sum += float64(v)
			}
			if mean := time.Duration(sum / float64(len(vals))); math.Abs(float64(h.Mean()-mean)) > 1 {
				t.Fatalf("mean %v, want %v", h.Mean(), mean)
			}
		})
	}
}

func TestEdges(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Count() != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram not zero")
	}
	h.Record(-5)
	if h.Quantile(1) != 0 || h.Min() != 0 {
		t.Fatal("negative not counted as zero")
	}
	var big Histogram
	big.Record(math.MaxInt64)
	if big.Quantile(0.5) != math.MaxInt64 {
		t.Fatalf("max duration: %v", big.Quantile(0.5))
	}
	var one Histogram
	one.Record(1234567 * time.Nanosecond)
	for _, q := range []float64{0, 0.5, 1} {
		if one.Quantile(q) != 1234567 {
			t.Fatalf("single value at q%v: %v", q, one.Quantile(q))
		}
	}
}

func TestMergeAndConcurrency(t *testing.T) {
	var a, b, all Histogram
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				d := time.Duration(w*1000+i) * time.Microsecond
				if w%2 == 0 {
					a.Record(d)
				} else {
					b.Record(d)
				}
				all.Record(d)
			}
		})
	}
	wg.Wait()
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&Histogram{})
	if m.Summary() != all.Summary() {
		t.Fatalf("merged %+v, direct %+v", m.Summary(), all.Summary())
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	for i := 0; b.Loop(); i++ {
		h.Record(time.Duration(i))
	}
}
