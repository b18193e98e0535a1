package quota

import (
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
)

// Usage is a basin's use of its quotas, as one star knows it.
type Usage struct {
	// AppendBytesPerSec is the metered bytes per second admitted to the
	// basin over the window.
	AppendBytesPerSec uint64
	// StoredBytes is the basin's retained bytes as last read.
	StoredBytes uint64
}

// Others sums the usage rows of the stars other than self that are of
// the basin's incarnation basinID and no older than stale at now: the
// append rates add up (each star counts what it admitted to the streams it
// leads); the stored bytes are each a reading of the whole basin, so the
// newest one counts. A row past stale is a star that stopped writing it
// (stopped, or no longer appending to the basin): it counts for nothing.
func Others(self, basinID string, rows map[string]meta.QuotaUsageRow, now time.Time, stale time.Duration) (u Usage, storedAt time.Time) {
	for star, r := range rows {
		if r.BasinID != basinID || now.Sub(r.At) > stale {
			continue
		}
		if r.StoredBytes > 0 && r.At.After(storedAt) {
			u.StoredBytes, storedAt = r.StoredBytes, r.At
		}
		if star != self {
			u.AppendBytesPerSec = satAdd(u.AppendBytesPerSec, r.AppendBytesPerSec)
		}
	}
	return u, storedAt
}

// DecideAppend says whether a basin under quotas q admits an append, its
// use summed over the stars being u: refused (403 quota_exhausted) when
// the stored bytes or the append rate are at or over their quota.
func DecideAppend(q api.BasinQuotas, u Usage) (dimension string, err *api.Error) {
	if q.StoredBytes != nil && u.StoredBytes >= *q.StoredBytes {
		return DimStoredBytes, api.QuotaExhausted("basin's stored bytes quota is exhausted: %d bytes stored, quota %d", u.StoredBytes, *q.StoredBytes)
	}
	if q.AppendBytesPerSec != nil && u.AppendBytesPerSec >= *q.AppendBytesPerSec {
		return DimAppendRate, api.QuotaExhausted("basin's append quota is exhausted: %d bytes/s appended, quota %d bytes/s", u.AppendBytesPerSec, *q.AppendBytesPerSec)
	}
	return "", nil
}

// DecideCreate says whether a basin under quotas q holding live streams
// admits one more.
func DecideCreate(q api.BasinQuotas, live uint64) *api.Error {
	if q.Streams != nil && live >= *q.Streams {
		return api.QuotaExhausted("basin's stream quota is exhausted: %d streams, quota %d", live, *q.Streams)
	}
	return nil
}

// The quota dimensions, the metrics' dimension label.
const (
	DimStoredBytes = "stored_bytes"
	DimAppendRate  = "append_bytes_per_sec"
	DimStreams     = "streams"
)

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}
