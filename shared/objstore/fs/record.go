package fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A journal record is one create-once PUT:
//
//	length  uint32  bytes of the payload
//	crc     uint32  CRC-32C of the payload
//	payload: seq uint64, stamp int64 (the object's mtime, µs since the
//	         epoch), bucket length uint8, bucket, key length uint16, key,
//	         body (the rest)
//
// all little-endian. Replay stops at the first record that is short or
// fails its checksum: the torn tail of the last group written before a
// crash, never acknowledged.
type record struct {
	seq    uint64
	stamp  int64
	bucket string
	key    string
	body   []byte
}

const (
	recordHeader = 8             // length and CRC
	recordFixed  = 8 + 8 + 1 + 2 // seq, stamp and the two name lengths
	// maxRecord bounds a record's payload: the largest body, bucket and
	// key. A longer length field is corruption, not a record.
	maxRecord = recordFixed + 255 + 1024 + MaxJournaled
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errTorn ends a replay: the bytes from here on are not a whole record.
var errTorn = errors.New("fs: journal: torn or corrupt record")

// appendRecord appends r's encoding to buf.
func appendRecord(buf []byte, r record) []byte {
	n := recordFixed + len(r.bucket) + len(r.key) + len(r.body)
	start := len(buf)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(n))
	buf = binary.LittleEndian.AppendUint32(buf, 0) // the CRC, below
	buf = binary.LittleEndian.AppendUint64(buf, r.seq)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(r.stamp))
	buf = append(buf, byte(len(r.bucket)))
	buf = append(buf, r.bucket...)
	buf = binary.LittleEndian.AppendUint16(buf, uint16(len(r.key)))
	buf = append(buf, r.key...)
	buf = append(buf, r.body...)
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(buf[start+recordHeader:], castagnoli))
	return buf
}

// decodeRecord decodes the record at the start of buf and returns it with
// its encoded length. The record's strings and body alias buf.
func decodeRecord(buf []byte) (record, int, error) {
	if len(buf) < recordHeader {
		return record{}, 0, errTorn
	}
	n := int(binary.LittleEndian.Uint32(buf))
	if n < recordFixed || n > maxRecord || len(buf)-recordHeader < n {
		return record{}, 0, errTorn
	}
	p := buf[recordHeader : recordHeader+n]
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(buf[4:]) {
		return record{}, 0, errTorn
	}
	r := record{seq: binary.LittleEndian.Uint64(p), stamp: int64(binary.LittleEndian.Uint64(p[8:]))}
	p = p[16:]
	bl := int(p[0])
	if len(p) < 1+bl+2 {
		return record{}, 0, fmt.Errorf("%w: bucket name overruns", errTorn)
	}
	r.bucket = string(p[1 : 1+bl])
	p = p[1+bl:]
	kl := int(binary.LittleEndian.Uint16(p))
	if len(p) < 2+kl {
		return record{}, 0, fmt.Errorf("%w: key overruns", errTorn)
	}
	r.key = string(p[2 : 2+kl])
	r.body = p[2+kl:]
	return r, recordHeader + n, nil
}
