package api

// BasinQuotas is starlog's extension to S2's BasinConfig (docs/api.md,
// "Quotas"): an operator's limits on one basin, enforced by star/quota.
// Each field is optional: unset (absent or null) is unlimited. A value of
// 0 admits nothing of that dimension (a basin frozen by its operator).
type BasinQuotas struct {
	// StoredBytes bounds the metered bytes the basin's streams retain.
	StoredBytes *uint64 `json:"stored_bytes,omitempty"`
	// AppendBytesPerSec bounds the metered bytes appended to the basin per
	// second, summed over every star.
	AppendBytesPerSec *uint64 `json:"append_bytes_per_sec,omitempty"`
	// Streams bounds how many live streams the basin holds.
	Streams *uint64 `json:"streams,omitempty"`
}

// MaxQuota bounds a quota's value: 2^53, the largest integer every JSON
// client (JavaScript's numbers among them) reads exactly.
const MaxQuota uint64 = 1 << 53

// IsZero says no quota is set (json omitzero drops it).
func (q BasinQuotas) IsZero() bool {
	return q.StoredBytes == nil && q.AppendBytesPerSec == nil && q.Streams == nil
}

// Validate checks the values (422 invalid). JSON decoding already refuses
// a negative, fractional or over-64-bit value (400 bad_json).
func (q *BasinQuotas) Validate() *Error {
	for _, f := range []struct {
		name string
		v    *uint64
	}{{"stored_bytes", q.StoredBytes}, {"append_bytes_per_sec", q.AppendBytesPerSec}, {"streams", q.Streams}} {
		if f.v != nil && *f.v > MaxQuota {
			return Invalid("quotas.%s must be at most %d, got %d", f.name, MaxQuota, *f.v)
		}
	}
	return nil
}

// BasinQuotasReconfiguration patches BasinQuotas field by field: an
// absent field keeps its value, null unsets it (unlimited), a number sets it.
type BasinQuotasReconfiguration struct {
	StoredBytes       Patch[uint64] `json:"stored_bytes,omitzero"`
	AppendBytesPerSec Patch[uint64] `json:"append_bytes_per_sec,omitzero"`
	Streams           Patch[uint64] `json:"streams,omitzero"`
}

// Validate checks the values the patch sets (422 invalid).
func (r *BasinQuotasReconfiguration) Validate() *Error {
	q := BasinQuotas{StoredBytes: r.StoredBytes.Value, AppendBytesPerSec: r.AppendBytesPerSec.Value, Streams: r.Streams.Value}
	return q.Validate()
}

// reconfigureQuotas applies r to cur: null for the whole object unsets
// every quota; nil is the result when none is left.
func reconfigureQuotas(cur *BasinQuotas, p Patch[BasinQuotasReconfiguration]) *BasinQuotas {
	if !p.Set {
		return cur
	}
	if p.Value == nil {
		return nil
	}
	var q BasinQuotas
	if cur != nil {
		q = *cur
	}
	q.StoredBytes = p.Value.StoredBytes.apply(q.StoredBytes)
	q.AppendBytesPerSec = p.Value.AppendBytesPerSec.apply(q.AppendBytesPerSec)
	q.Streams = p.Value.Streams.apply(q.Streams)
	if q.IsZero() {
		return nil
	}
	return &q
}
