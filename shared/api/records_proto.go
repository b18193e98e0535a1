package api

import (
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

// DecodeReadBatchProto decodes a protobuf ReadBatch (for clients).
func DecodeReadBatchProto(body []byte) (*ReadBatch, *Error) {
	var m s2pb.ReadBatch
	if err := proto.Unmarshal(body, &m); err != nil {
		return nil, BadProto("read batch: %v", err)
	}
	b := &ReadBatch{Records: make([]Record, len(m.Records))}
	ts := make([]uint64, len(m.Records))
	for i, r := range m.Records {
		ts[i] = r.GetTimestamp()
		b.Records[i] = Record{
			SeqNum:    r.GetSeqNum(),
			Timestamp: &ts[i],
			Headers:   headersFromPB(r.Headers),
			Body:      r.GetBody(),
		}
	}
	if m.Tail != nil {
		t := positionFromPB(m.Tail)
		b.Tail = &t
	}
	return b, nil
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
