// Package format holds starlog's durable byte layouts: the slot envelope, the
// transit bundle and its footer, relocatable record blocks, settled objects
// and poison. It is pure: no I/O, no clocks. Layouts are documented in
// docs/format.md.
package format

// Header is one record header. A command record has exactly one header whose
// name is empty (see the API's fence and trim commands).
type Header struct {
	Name  []byte
	Value []byte
}

// Record is one sequenced record as stored: its seq num, its (final,
// non-decreasing) timestamp in milliseconds, its headers and its body.
type Record struct {
	SeqNum    uint64
	Timestamp uint64
	Headers   []Header
	Body      []byte
}

// MeteredSize is S2's metered size of a record:
// 8 + 2·len(headers) + Σ(len(name)+len(value)) + len(body).
func (r *Record) MeteredSize() int {
	n := 8 + 2*len(r.Headers) + len(r.Body)
	for _, h := range r.Headers {
		n += len(h.Name) + len(h.Value)
	}
	return n
}
