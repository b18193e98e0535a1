package faults

import "github.com/starlog/starlog/shared/objstore"

// Count is the traffic of one request kind.
type Count struct {
	Requests int64
	Errors   int64 // calls that returned an error, ErrExists included
	// Bytes is the payload moved: the body of a put or uploaded part, the
	// bytes a get returned, the range of a copy part.
	Bytes int64
}

func (c Count) add(o Count) Count {
	return Count{c.Requests + o.Requests, c.Errors + o.Errors, c.Bytes + o.Bytes}
}

func (c Count) sub(o Count) Count {
	return Count{c.Requests - o.Requests, c.Errors - o.Errors, c.Bytes - o.Bytes}
}

// BucketCounts is one bucket's traffic, indexed by objstore.Op.
type BucketCounts [objstore.NumOps]Count

// Total sums every kind.
func (b BucketCounts) Total() Count {
	var t Count
	for _, c := range b {
		t = t.add(c)
	}
	return t
}

// Counters is a snapshot of traffic by bucket.
type Counters map[string]BucketCounts

// Op sums one kind over every bucket.
func (c Counters) Op(op objstore.Op) Count {
	var t Count
	for _, b := range c {
		t = t.add(b[op])
	}
	return t
}

// Total sums everything.
func (c Counters) Total() Count {
	var t Count
	for _, b := range c {
		t = t.add(b.Total())
	}
	return t
}

// Sub returns the traffic since prev (an earlier snapshot).
func (c Counters) Sub(prev Counters) Counters {
	out := make(Counters, len(c))
	for name, b := range c {
		p := prev[name]
		var d BucketCounts
		for i := range b {
			d[i] = b[i].sub(p[i])
		}
		out[name] = d
	}
	return out
}
