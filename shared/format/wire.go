package format

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
)

// castagnoli is read-only after init; hash/crc32 uses the SSE4.2/ARMv8
// instructions for this polynomial.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

var le = binary.LittleEndian

// uvarintLen is the length of x as a minimal unsigned LEB128 varint.
func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// readUvarint decodes a minimal uvarint at b[off:]. Non-minimal encodings
// (a trailing zero group) are rejected so that every decodable layout has
// exactly one encoding.
func readUvarint(b []byte, off int) (v uint64, next int, ok bool) {
	if off < len(b) && b[off] < 0x80 {
		return uint64(b[off]), off + 1, true
	}
	var shift uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		if off+i >= len(b) {
			return 0, 0, false
		}
		c := b[off+i]
		if i == binary.MaxVarintLen64-1 && c > 1 {
			return 0, 0, false // overflows 64 bits
		}
		if c < 0x80 {
			if i > 0 && c == 0 {
				return 0, 0, false // non-minimal
			}
			return v | uint64(c)<<shift, off + i + 1, true
		}
		v |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, 0, false
}

// readBytes decodes a uvarint length followed by that many bytes. The result
// aliases b with its capacity clipped, so appending to it cannot overwrite the
// bytes that follow; an empty field decodes to nil.
func readBytes(b []byte, off int) (field []byte, next int, ok bool) {
	n, off, ok := readUvarint(b, off)
	if !ok || n > uint64(len(b)-off) {
		return nil, 0, false
	}
	end := off + int(n)
	if n == 0 {
		return nil, end, true
	}
	return b[off:end:end], end, true
}

func appendBytes(dst, field []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(field)))
	return append(dst, field...)
}
