package api

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/starlog/starlog/shared/api/s2pb"
)

// Field numbers of s2.v1 (shared/api/s2/v1/s2.proto), for the hand-written
// encoders of the read path.
const (
	fieldPositionSeqNum    = 1
	fieldPositionTimestamp = 2
	fieldHeaderName        = 1
	fieldHeaderValue       = 2
	fieldSeqRecSeqNum      = 1
	fieldSeqRecTimestamp   = 2
	fieldSeqRecHeaders     = 3
	fieldSeqRecBody        = 4
	fieldBatchRecords      = 1
	fieldBatchTail         = 2
	fieldAckStart          = 1
	fieldAckEnd            = 2
	fieldAckTail           = 3
)

func headersFromPB(hs []*s2pb.Header) []Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]Header, len(hs))
	for i, h := range hs {
		out[i] = Header{Name: h.GetName(), Value: h.GetValue()}
	}
	return out
}

func headersToPB(hs []Header) []*s2pb.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]*s2pb.Header, len(hs))
	for i, h := range hs {
		out[i] = &s2pb.Header{Name: h.Name, Value: h.Value}
	}
	return out
}

func positionFromPB(p *s2pb.StreamPosition) StreamPosition {
	return StreamPosition{SeqNum: p.GetSeqNum(), Timestamp: p.GetTimestamp()}
}

func positionToPB(p StreamPosition) *s2pb.StreamPosition {
	return &s2pb.StreamPosition{SeqNum: p.SeqNum, Timestamp: p.Timestamp}
}

// DecodeAppendProto decodes and validates a protobuf AppendInput (a unary
// body or one s2s frame's payload). Malformed protobuf (including a
// fencing token that is not UTF-8) is 400 bad_proto; ValidateAppendInput
// failures are 422 invalid.
func DecodeAppendProto(b []byte) (*AppendInput, *Error) {
	var m s2pb.AppendInput
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, BadProto("append: %v", err)
	}
	in := &AppendInput{
		Records:      make([]Record, len(m.Records)),
		MatchSeqNum:  m.MatchSeqNum,
		FencingToken: m.FencingToken,
	}
	for i, r := range m.Records {
		in.Records[i] = Record{
			Timestamp: r.Timestamp,
			Headers:   headersFromPB(r.Headers),
			Body:      r.GetBody(),
		}
	}
	if err := ValidateAppendInput(in); err != nil {
		return nil, err
	}
	return in, nil
}

// EncodeAppendProto encodes a protobuf AppendInput (for clients).
func EncodeAppendProto(in *AppendInput) ([]byte, error) {
	m := &s2pb.AppendInput{
		Records:      make([]*s2pb.AppendRecord, len(in.Records)),
		MatchSeqNum:  in.MatchSeqNum,
		FencingToken: in.FencingToken,
	}
	for i := range in.Records {
		r := &in.Records[i]
		m.Records[i] = &s2pb.AppendRecord{Timestamp: r.Timestamp, Headers: headersToPB(r.Headers), Body: r.Body}
	}
	return proto.Marshal(m)
}

func sizePosition(p StreamPosition) int {
	n := 0
	if p.SeqNum != 0 {
		n += protowire.SizeTag(fieldPositionSeqNum) + protowire.SizeVarint(p.SeqNum)
	}
	if p.Timestamp != 0 {
		n += protowire.SizeTag(fieldPositionTimestamp) + protowire.SizeVarint(p.Timestamp)
	}
	return n
}

// appendPositionField appends a StreamPosition as message field num.
func appendPositionField(dst []byte, num protowire.Number, p StreamPosition) []byte {
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(sizePosition(p)))
	if p.SeqNum != 0 {
		dst = protowire.AppendTag(dst, fieldPositionSeqNum, protowire.VarintType)
		dst = protowire.AppendVarint(dst, p.SeqNum)
	}
	if p.Timestamp != 0 {
		dst = protowire.AppendTag(dst, fieldPositionTimestamp, protowire.VarintType)
		dst = protowire.AppendVarint(dst, p.Timestamp)
	}
	return dst
}

func sizeBytesField(num protowire.Number, b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(b))
}

func appendBytesField(dst []byte, num protowire.Number, b []byte) []byte {
	if len(b) == 0 {
		return dst
	}
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	return protowire.AppendBytes(dst, b)
}

func sizeHeader(h *Header) int {
	return sizeBytesField(fieldHeaderName, h.Name) + sizeBytesField(fieldHeaderValue, h.Value)
}

func sizeSequencedRecord(r *Record) int {
	n := 0
	if r.SeqNum != 0 {
		n += protowire.SizeTag(fieldSeqRecSeqNum) + protowire.SizeVarint(r.SeqNum)
	}
	if ts := r.ts(); ts != 0 {
		n += protowire.SizeTag(fieldSeqRecTimestamp) + protowire.SizeVarint(ts)
	}
	for i := range r.Headers {
		n += protowire.SizeTag(fieldSeqRecHeaders) + protowire.SizeBytes(sizeHeader(&r.Headers[i]))
	}
	return n + sizeBytesField(fieldSeqRecBody, r.Body)
}

// AppendReadBatchProto appends the protobuf ReadBatch encoding of b. It
// produces the bytes proto.Marshal would, without building the message:
// reads are the hot path.
func AppendReadBatchProto(dst []byte, b *ReadBatch) []byte {
	for i := range b.Records {
		r := &b.Records[i]
		dst = protowire.AppendTag(dst, fieldBatchRecords, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(sizeSequencedRecord(r)))
		if r.SeqNum != 0 {
			dst = protowire.AppendTag(dst, fieldSeqRecSeqNum, protowire.VarintType)
			dst = protowire.AppendVarint(dst, r.SeqNum)
		}
		if ts := r.ts(); ts != 0 {
			dst = protowire.AppendTag(dst, fieldSeqRecTimestamp, protowire.VarintType)
			dst = protowire.AppendVarint(dst, ts)
		}
		for j := range r.Headers {
			h := &r.Headers[j]
			dst = protowire.AppendTag(dst, fieldSeqRecHeaders, protowire.BytesType)
			dst = protowire.AppendVarint(dst, uint64(sizeHeader(h)))
			dst = appendBytesField(dst, fieldHeaderName, h.Name)
			dst = appendBytesField(dst, fieldHeaderValue, h.Value)
		}
		dst = appendBytesField(dst, fieldSeqRecBody, r.Body)
	}
	if b.Tail != nil {
		dst = appendPositionField(dst, fieldBatchTail, *b.Tail)
	}
	return dst
}

// EncodeReadBatchProto is AppendReadBatchProto into a new slice.
func EncodeReadBatchProto(b *ReadBatch) []byte {
	n := 16
	for i := range b.Records {
		n += 4 + sizeSequencedRecord(&b.Records[i])
	}
	return AppendReadBatchProto(make([]byte, 0, n), b)
}

// DecodeReadBatchProto decodes a protobuf ReadBatch (for clients). It is
// hand-written for a reader's hot loop: the batch's bytes are copied once
// and every body, header name and value aliases that copy, so a batch of
// any size costs a handful of allocations, not several per record (as
// proto.Unmarshal does). Unknown fields are skipped.
func DecodeReadBatchProto(body []byte) (*ReadBatch, *Error) {
	nrec, nhdr, err := countReadBatch(body)
	if err != nil {
		return nil, BadProto("read batch: %v", err)
	}
	b := &ReadBatch{}
	var recs []Record
	if nrec > 0 {
		recs = make([]Record, 0, nrec)
	}
	decodeReadBatch(b, append([]byte(nil), body...), recs, make([]uint64, nrec), make([]Header, 0, nhdr), nil)
	return b, nil
}

// ReadBatchDecoder decodes ReadBatch payloads one after another without
// copying them: the batch Decode returns (its records, their bodies,
// headers and timestamps) aliases the payload and the decoder's own
// slices, so it is valid only until the next Decode and while the
// payload is. A reader that is done with each batch before it reads the
// next frame (`star read`) saves a copy and a fresh allocation of every
// batch; DecodeReadBatchProto is for batches kept longer. The zero value
// is ready to use.
type ReadBatchDecoder struct {
	b    ReadBatch
	tail StreamPosition
	recs []Record
	ts   []uint64
	hdrs []Header
}

// Decode decodes payload as DecodeReadBatchProto does, into the decoder.
func (d *ReadBatchDecoder) Decode(payload []byte) (*ReadBatch, *Error) {
	nrec, nhdr, err := countReadBatch(payload)
	if err != nil {
		return nil, BadProto("read batch: %v", err)
	}
	if cap(d.recs) < nrec {
		d.recs = make([]Record, 0, nrec)
		d.ts = make([]uint64, nrec)
	}
	if cap(d.hdrs) < nhdr {
		d.hdrs = make([]Header, 0, nhdr)
	}
	ts := d.ts[:nrec]
	clear(ts) // a record without a timestamp field has 0
	d.b = ReadBatch{}
	var recs []Record
	if nrec > 0 {
		recs = d.recs[:0]
	}
	decodeReadBatch(&d.b, payload, recs, ts, d.hdrs[:0], &d.tail)
	return &d.b, nil
}

// decodeReadBatch decodes p, a ReadBatch countReadBatch checked, into b:
// its records appended to recs (capacity for all of them), their
// timestamps in ts (one each, zeroed), their headers appended to hdrs
// (capacity for all), all aliasing p. tail holds the tail (nil: a new
// one).
func decodeReadBatch(b *ReadBatch, p []byte, recs []Record, ts []uint64, hdrs []Header, tail *StreamPosition) {
	b.Records = recs
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		p = p[n:]
		switch {
		case num == fieldBatchRecords && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(p)
			p = p[n:]
			i := len(b.Records)
			r, h := decodeSeqRecord(v, &ts[i], hdrs)
			hdrs = h
			b.Records = append(b.Records, r)
		case num == fieldBatchTail && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(p)
			p = p[n:]
			if b.Tail == nil {
				if tail == nil {
					tail = new(StreamPosition)
				}
				*tail = StreamPosition{}
				b.Tail = tail
			}
			decodePosition(v, b.Tail) // a repeated message field merges
		default:
			p = p[protowire.ConsumeFieldValue(num, typ, p):]
		}
	}
}

// countReadBatch checks a ReadBatch's wire shape (every field well formed,
// the known ones of the right wire type, scalars in range) and counts its
// records and headers.
func countReadBatch(p []byte) (records, headers int, err error) {
	err = walkFields(p, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case fieldBatchRecords:
			if typ != protowire.BytesType {
				return errWireType
			}
			records++
			return walkFields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				switch num {
				case fieldSeqRecSeqNum, fieldSeqRecTimestamp:
					if typ != protowire.VarintType {
						return errWireType
					}
				case fieldSeqRecHeaders:
					if typ != protowire.BytesType {
						return errWireType
					}
					headers++
					return walkFields(v, func(num protowire.Number, typ protowire.Type, _ []byte) error {
						if (num == fieldHeaderName || num == fieldHeaderValue) && typ != protowire.BytesType {
							return errWireType
						}
						return nil
					})
				case fieldSeqRecBody:
					if typ != protowire.BytesType {
						return errWireType
					}
				}
				return nil
			})
		case fieldBatchTail:
			if typ != protowire.BytesType {
				return errWireType
			}
			return walkFields(v, func(num protowire.Number, typ protowire.Type, _ []byte) error {
				if (num == fieldPositionSeqNum || num == fieldPositionTimestamp) && typ != protowire.VarintType {
					return errWireType
				}
				return nil
			})
		}
		return nil
	})
	return records, headers, err
}

var errWireType = errors.New("field of the wrong wire type")

// walkFields calls f with every field of message p: its number, wire type
// and, for a length-delimited field, its bytes.
func walkFields(p []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			return errors.New("field number out of range")
		}
		p = p[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(p)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, p)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		p = p[n:]
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// decodeSeqRecord decodes one checked SequencedRecord, appending its
// headers to hdrs.
func decodeSeqRecord(p []byte, ts *uint64, hdrs []Header) (Record, []Header) {
	r := Record{Timestamp: ts}
	start := len(hdrs)
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		p = p[n:]
		switch {
		case num == fieldSeqRecSeqNum && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(p)
			r.SeqNum, p = v, p[n:]
		case num == fieldSeqRecTimestamp && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(p)
			*ts, p = v, p[n:]
		case num == fieldSeqRecHeaders && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(p)
			p = p[n:]
			var h Header
			for len(v) > 0 {
				hn, ht, k := protowire.ConsumeTag(v)
				v = v[k:]
				if ht == protowire.BytesType && (hn == fieldHeaderName || hn == fieldHeaderValue) {
					b, k := protowire.ConsumeBytes(v)
					v = v[k:]
					if hn == fieldHeaderName {
						h.Name = nonEmpty(b)
					} else {
						h.Value = nonEmpty(b)
					}
					continue
				}
				v = v[protowire.ConsumeFieldValue(hn, ht, v):]
			}
			hdrs = append(hdrs, h)
		case num == fieldSeqRecBody && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(p)
			r.Body, p = nonEmpty(v), p[n:]
		default:
			p = p[protowire.ConsumeFieldValue(num, typ, p):]
		}
	}
	if len(hdrs) > start {
		r.Headers = hdrs[start:len(hdrs):len(hdrs)]
	}
	return r, hdrs
}

func decodePosition(p []byte, t *StreamPosition) {
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		p = p[n:]
		if typ == protowire.VarintType && (num == fieldPositionSeqNum || num == fieldPositionTimestamp) {
			v, n := protowire.ConsumeVarint(p)
			p = p[n:]
			if num == fieldPositionSeqNum {
				t.SeqNum = v
			} else {
				t.Timestamp = v
			}
			continue
		}
		p = p[protowire.ConsumeFieldValue(num, typ, p):]
	}
}

// nonEmpty is b, or nil when empty (what proto.Unmarshal leaves for an
// empty proto3 bytes field's getter).
func nonEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// EncodeAppendAckProto encodes a protobuf AppendAck.
func EncodeAppendAckProto(a AppendAck) []byte {
	dst := make([]byte, 0, 3*24)
	dst = appendPositionField(dst, fieldAckStart, a.Start)
	dst = appendPositionField(dst, fieldAckEnd, a.End)
	return appendPositionField(dst, fieldAckTail, a.Tail)
}

// DecodeAppendAckProto decodes a protobuf AppendAck (for clients). Absent
// positions decode as zero, as in proto3.
func DecodeAppendAckProto(body []byte) (AppendAck, *Error) {
	var m s2pb.AppendAck
	if err := proto.Unmarshal(body, &m); err != nil {
		return AppendAck{}, BadProto("append ack: %v", err)
	}
	return AppendAck{
		Start: positionFromPB(m.Start),
		End:   positionFromPB(m.End),
		Tail:  positionFromPB(m.Tail),
	}, nil
}
