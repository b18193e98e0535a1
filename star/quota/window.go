package quota

import "time"

// windowBuckets is how many buckets a window is cut into: the rate
// forgets a burst a bucket at a time, not all at once.
const windowBuckets = 10

// window counts the bytes a star admitted to one basin over the last
// span, in buckets of span/windowBuckets; Rate is their sum over span.
// Not safe for concurrent use (the Manager's lock guards it).
type window struct {
	span   time.Duration
	bucket time.Duration
	counts [windowBuckets]uint64
	idx    [windowBuckets]int64 // the bucket number each count is for
}

func newWindow(span time.Duration) *window {
	return &window{span: span, bucket: max(span/windowBuckets, time.Millisecond)}
}

// add counts n bytes at now.
func (w *window) add(now time.Time, n uint64) {
	b := now.UnixNano() / int64(w.bucket)
	i := int(b % windowBuckets)
	if w.idx[i] != b {
		w.idx[i], w.counts[i] = b, 0
	}
	w.counts[i] = satAdd(w.counts[i], n)
}

// sum is the bytes counted in the buckets of the last span at now.
func (w *window) sum(now time.Time) uint64 {
	b := now.UnixNano() / int64(w.bucket)
	var s uint64
	for i := range w.counts {
		if w.idx[i] > b-windowBuckets && w.idx[i] <= b {
			s = satAdd(s, w.counts[i])
		}
	}
	return s
}

// rate is sum as bytes per second.
func (w *window) rate(now time.Time) uint64 {
	return uint64(float64(w.sum(now)) / (time.Duration(windowBuckets) * w.bucket).Seconds())
}
