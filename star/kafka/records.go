package kafka

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
)

// HeaderKey is the record header that holds a Kafka record's key: the
// first header of a record produced with a key (an empty value is an
// empty key; no such header is a null key). Kafka headers follow it,
// name for name; a Kafka header may not be named HeaderKey or as an
// idempotent producer's mark (producerHeader), nor have an empty name (a
// starlog record whose one header has an empty name is a command record).
const HeaderKey = "kafka.key"

// Record batch v2 layout (the offsets kmsg.RecordBatch reads at).
const (
	batchHeaderLen    = 61 // FirstOffset … NumRecords
	batchLengthAt     = 8  // Length: the bytes after it
	batchCRCAt        = 17 // CRC-32C of everything after it
	batchAttrsAt      = 21
	batchFirstTSAt    = 27
	batchMaxTSAt      = 35
	batchNumRecordsAt = 57
	attrCompression   = 0x07
	attrLogAppend     = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// recordError is a produce partition refused for its records: nothing of
// it was appended.
type recordError struct {
	code int16
	msg  string
}

func (e *recordError) Error() string { return e.msg }

func corrupt(format string, args ...any) *recordError {
	return &recordError{code: kerr.CorruptMessage.Code, msg: fmt.Sprintf(format, args...)}
}

// producedBatch is one record batch of a produce: its records, and its
// idempotent producer (pid -1 when it has none).
type producedBatch struct {
	recs  []api.Record
	pid   int64
	epoch int16
	seq   int32 // the batch's first record's sequence
}

// decodeBatches is decodeProduce's records, the batches run together.
func decodeBatches(data []byte, budget *int64) ([]api.Record, error) {
	bs, err := decodeProduce(data, budget)
	var out []api.Record
	for _, b := range bs {
		out = append(out, b.recs...)
	}
	return out, err
}

// decodeProduce reads the record batches of one produce partition into
// starlog records, in order. Only magic 2 is accepted; every batch's CRC
// is checked; transactional and control batches are refused (no
// transactions are served), as is a batch with a producer id but a
// negative epoch or sequence. The batches' records, decompressed, take
// from *budget (the bytes left of the request's MaxProduceRecordBytes);
// past it the partition is refused.
func decodeProduce(data []byte, budget *int64) ([]producedBatch, error) {
	var out []producedBatch
	for len(data) > 0 {
		if len(data) < batchHeaderLen {
			return nil, corrupt("record batch truncated: %d bytes", len(data))
		}
		n := int32(binary.BigEndian.Uint32(data[batchLengthAt:]))
		if n < batchHeaderLen-12 || int(n) > len(data)-12 {
			return nil, corrupt("record batch length %d out of bounds", n)
		}
		raw := data[:12+int(n)]
		data = data[12+int(n):]
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw); err != nil {
			return nil, corrupt("record batch: %v", err)
		}
		if b.Magic != 2 {
			return nil, &recordError{code: kerr.UnsupportedForMessageFormat.Code, msg: fmt.Sprintf("record batch magic %d: only v2 is served", b.Magic)}
		}
		if uint32(b.CRC) != crcOf(raw) {
			return nil, corrupt("record batch CRC mismatch")
		}
		if b.Attributes&(attrTransactional|attrControl) != 0 {
			return nil, &recordError{code: kerr.UnsupportedVersion.Code, msg: "transactional and control batches are not served"}
		}
		pb := producedBatch{pid: -1}
		if b.ProducerID >= 0 {
			if b.ProducerEpoch < 0 || b.FirstSequence < 0 {
				return nil, &recordError{code: kerr.InvalidRecord.Code,
					msg: fmt.Sprintf("a batch of producer id %d has epoch %d and sequence %d", b.ProducerID, b.ProducerEpoch, b.FirstSequence)}
			}
			pb.pid, pb.epoch, pb.seq = b.ProducerID, b.ProducerEpoch, b.FirstSequence
		}
		recs, err := decompress(b.Records, b.Attributes&attrCompression, *budget)
		if err != nil {
			return nil, err
		}
		*budget -= int64(len(recs))
		if pb.recs, err = appendRecords(nil, &b, recs); err != nil {
			return nil, err
		}
		if len(pb.recs) > 0 {
			out = append(out, pb)
		}
	}
	return out, nil
}

// appendRecords decodes a batch's (uncompressed) records onto out.
func appendRecords(out []api.Record, b *kmsg.RecordBatch, recs []byte) ([]api.Record, error) {
	if b.NumRecords < 0 || int(b.NumRecords) > len(recs) {
		return nil, corrupt("record batch claims %d records in %d bytes", b.NumRecords, len(recs))
	}
	for range b.NumRecords {
		l, w := binary.Varint(recs)
		if w <= 0 || l < 0 || int64(len(recs)-w) < l {
			return nil, corrupt("record length out of bounds")
		}
		var kr kmsg.Record
		if err := kr.ReadFrom(recs[:w+int(l)]); err != nil {
			return nil, corrupt("record: %v", err)
		}
		recs = recs[w+int(l):]
		r, err := fromKafka(b, &kr)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if len(recs) != 0 {
		return nil, corrupt("record batch has %d bytes after its records", len(recs))
	}
	return out, nil
}

// fromKafka maps one Kafka record onto a starlog record: the key (if not
// null) as the first header, the Kafka headers after it, the value as the
// body (a null value reads back as empty), the timestamp as the record's
// (a LogAppendTime batch, or a negative timestamp, leaves it to the star).
func fromKafka(b *kmsg.RecordBatch, kr *kmsg.Record) (api.Record, error) {
	var r api.Record
	if kr.Key != nil {
		r.Headers = append(r.Headers, api.Header{Name: []byte(HeaderKey), Value: kr.Key})
	}
	for _, h := range kr.Headers {
		if h.Key == "" || h.Key == HeaderKey || producerHeader(h.Key) {
			return api.Record{}, &recordError{code: kerr.InvalidRecord.Code,
				msg: fmt.Sprintf("a record header may not be named %q (docs/kafka.md)", h.Key)}
		}
		r.Headers = append(r.Headers, api.Header{Name: []byte(h.Key), Value: h.Value})
	}
	r.Body = kr.Value
	if r.Body == nil {
		r.Body = []byte{}
	}
	if b.Attributes&attrLogAppend == 0 {
		if ts := b.FirstTimestamp + kr.TimestampDelta64; ts >= 0 {
			r.Timestamp = api.Uint64(uint64(ts))
		}
	}
	return r, nil
}

// toKafka maps a starlog record back: a first header named HeaderKey is
// the key, the other headers are Kafka headers, but for an idempotent
// producer's mark (producerHeader), which Kafka carries in the batch, not
// the record.
func toKafka(r *api.Record) (key []byte, headers []kmsg.Header) {
	hs := r.Headers
	if len(hs) > 0 && string(hs[0].Name) == HeaderKey {
		key, hs = hs[0].Value, hs[1:]
		if key == nil {
			key = []byte{}
		}
	}
	for _, h := range hs {
		if producerHeader(string(h.Name)) {
			continue
		}
		headers = append(headers, kmsg.Header{Key: string(h.Name), Value: h.Value})
	}
	return key, headers
}

// producerHeader reports whether name is one of an idempotent producer's
// mark (shared/api's starlog-producer headers): the face writes them on
// the first record of an idempotent batch, so a Kafka header may not be
// named so, and a fetch leaves them out.
func producerHeader(name string) bool {
	switch name {
	case api.HeaderProducer, api.HeaderProducerEpoch, api.HeaderProducerSeq, api.HeaderProducerRecords:
		return true
	}
	return false
}

// appendBatch appends one uncompressed record batch v2 holding recs (seq
// nums ascending, as read) to dst. Command records (fence, trim) are left
// out: their offsets are gaps, as in a compacted Kafka topic, and
// lastSeq (the last seq num read, command or not) ends the batch so a
// consumer moves past them. No records and no commands: dst unchanged.
//
// Each record is encoded once, straight into dst after the batch header,
// its length computed beforehand (recordLen), and the header's counts,
// timestamps, length and CRC are filled in at the end: the fetch path
// copies a body once here, not through a scratch record and a body
// buffer as well.
func appendBatch(dst []byte, recs []api.Record) []byte {
	if len(recs) == 0 {
		return dst
	}
	first, last := recs[0].SeqNum, recs[len(recs)-1].SeqNum
	var firstTS int64 = -1
	size := batchHeaderLen
	for i := range recs {
		r := &recs[i]
		if api.IsCommand(r.Headers) {
			continue
		}
		if firstTS < 0 {
			firstTS = timestampOf(r)
		}
		size += len(r.Body) + 24 // the varints and attributes, about
		for _, h := range r.Headers {
			size += len(h.Name) + len(h.Value) + 10
		}
	}
	dst = slices.Grow(dst, size)
	start := len(dst)
	hdr := kmsg.RecordBatch{
		FirstOffset: int64(first), Magic: 2,
		LastOffsetDelta: int32(last - first),
		ProducerID:      -1, ProducerEpoch: -1, FirstSequence: -1,
	}
	dst = hdr.AppendTo(dst)
	var maxTS int64 = -1
	var n int32
	for i := range recs {
		r := &recs[i]
		if api.IsCommand(r.Headers) {
			continue
		}
		ts := timestampOf(r)
		maxTS = max(maxTS, ts)
		key, headers := toKafka(r)
		kr := kmsg.Record{TimestampDelta64: ts - firstTS, OffsetDelta: int32(r.SeqNum - first),
			Key: key, Value: r.Body, Headers: headers}
		kr.Length = recordLen(&kr)
		dst = kr.AppendTo(dst)
		n++
	}
	if firstTS < 0 {
		firstTS, maxTS = 0, 0
	}
	raw := dst[start:]
	binary.BigEndian.PutUint32(raw[batchLengthAt:], uint32(len(raw)-12))
	binary.BigEndian.PutUint64(raw[batchFirstTSAt:], uint64(firstTS))
	binary.BigEndian.PutUint64(raw[batchMaxTSAt:], uint64(maxTS))
	binary.BigEndian.PutUint32(raw[batchNumRecordsAt:], uint32(n))
	binary.BigEndian.PutUint32(raw[batchCRCAt:], crcOf(raw))
	return dst
}

// timestampOf is a record's timestamp in ms (0: none).
func timestampOf(r *api.Record) int64 {
	if r.Timestamp == nil {
		return 0
	}
	return int64(*r.Timestamp)
}

// recordLen is the length kr.AppendTo writes after its Length varint:
// the attributes byte, the varints and the fields, as kmsg lays them
// out (TestAppendBatchRecordLen holds it to kmsg's encoding).
func recordLen(kr *kmsg.Record) int32 {
	n := 1 + kbin.VarlongLen(kr.TimestampDelta64) + kbin.VarintLen(kr.OffsetDelta) +
		varintBytesLen(kr.Key) + varintBytesLen(kr.Value) + kbin.VarintLen(int32(len(kr.Headers)))
	for i := range kr.Headers {
		h := &kr.Headers[i]
		n += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + varintBytesLen(h.Value)
	}
	return int32(n)
}

// varintBytesLen is the encoded length of nullable varint-prefixed bytes.
func varintBytesLen(b []byte) int {
	if b == nil {
		return kbin.VarintLen(-1)
	}
	return kbin.VarintLen(int32(len(b))) + len(b)
}

// crcOf is the CRC a record batch must carry.
func crcOf(raw []byte) uint32 { return crc32.Checksum(raw[batchAttrsAt:], crcTable) }
