package format

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
)

// A settled object is one stream's contiguous history:
//
//	[0,B)          record blocks, seq-contiguous, copied byte-for-byte
//	[B,B+F)        settled footer
//	[B+F,B+F+8)    trailer: footer length u32 | magic "STLT"
//
// so a reader finds the footer from the object's last bytes alone.
//
// Settled footer layout (little-endian):
//
//	[0,4)   magic "STLS"
//	[4]     version u8
//	[5]     reserved u8 (0)
//	[6,8)   stream id length u16 (1..512)
//	[8,16)  first seq u64
//	[16,24) end seq u64 (one past the last record)
//	[24,28) entry count u32 (at least 1)
//	[28,..) stream id bytes
//	entries, one per block in object order:
//	        uvarint record count | uvarint block length |
//	        uvarint min timestamp minus the previous entry's max timestamp
//	        (the absolute min timestamp for the first entry) |
//	        uvarint max timestamp minus min timestamp
//	CRC-32C u32 of all preceding footer bytes
//
// An entry's first seq and offset are not stored: blocks tile the object from
// offset 0 and seqs from the footer's first seq, so both are running sums.
// Entries are varint-coded because a settled object can index hundreds of
// thousands of small batches and its footer is what a cold reader fetches.

// SettledTrailerSize is the fixed trailer ending every settled object.
const SettledTrailerSize = 8

var (
	settledFooterMagic  = [4]byte{'S', 'T', 'L', 'S'}
	settledTrailerMagic = [4]byte{'S', 'T', 'L', 'T'}
)

const (
	settledFooterHeaderLen = 28
	settledEntryMinLen     = 4
	settledFooterMinLen    = settledFooterHeaderLen + 1 + settledEntryMinLen + 4
)

// SettledEntry indexes one block of a settled object. Offset is
// object-absolute (blocks start at 0).
type SettledEntry struct {
	FirstSeq                   uint64
	Count                      uint32
	Offset                     uint64
	Length                     uint32
	MinTimestamp, MaxTimestamp uint64
}

// EndSeq is one past the entry's last seq.
func (e SettledEntry) EndSeq() uint64 { return e.FirstSeq + uint64(e.Count) }

// BlockInfo is what the entry's block header must say.
func (e SettledEntry) BlockInfo() BlockInfo {
	return BlockInfo{FirstSeq: e.FirstSeq, Count: e.Count, MinTimestamp: e.MinTimestamp, MaxTimestamp: e.MaxTimestamp, Length: e.Length}
}

// SettledFooter indexes a settled object: the stream, its seq window
// [FirstSeq, EndSeq) and one entry per block.
type SettledFooter struct {
	StreamID         string
	FirstSeq, EndSeq uint64
	Entries          []SettledEntry
}

// NewSettledFooter builds the footer of an object whose blocks, described by
// blocks (from PeekBlock, Extent.BlockInfo or SettledEntry.BlockInfo), are
// laid out from offset 0 in the given order.
func NewSettledFooter(streamID string, blocks []BlockInfo) (SettledFooter, error) {
	f := SettledFooter{StreamID: streamID, Entries: make([]SettledEntry, len(blocks))}
	var off uint64
	for i, b := range blocks {
		f.Entries[i] = SettledEntry{FirstSeq: b.FirstSeq, Count: b.Count, Offset: off, Length: b.Length,
			MinTimestamp: b.MinTimestamp, MaxTimestamp: b.MaxTimestamp}
		off += uint64(b.Length)
	}
	if len(blocks) > 0 {
		f.FirstSeq, f.EndSeq = blocks[0].FirstSeq, blocks[len(blocks)-1].EndSeq()
	}
	if err := f.Validate(); err != nil {
		return SettledFooter{}, err
	}
	return f, nil
}

// BlocksLen is the length of the block region, which is where the footer
// starts.
func (f SettledFooter) BlocksLen() uint64 {
	if len(f.Entries) == 0 {
		return 0
	}
	last := f.Entries[len(f.Entries)-1]
	return last.Offset + uint64(last.Length)
}

// Validate checks the rules the layout relies on: a stream id of 1..512
// bytes; at least one entry; entries that tile offsets from 0 and seqs from
// FirstSeq to EndSeq; per entry 1..1000 records, a possible block length and
// MinTimestamp <= MaxTimestamp; timestamps non-decreasing across entries.
func (f SettledFooter) Validate() error {
	if len(f.StreamID) == 0 || len(f.StreamID) > MaxStreamIDLen {
		return invalidf("settled footer: stream id of %d bytes, want 1..%d", len(f.StreamID), MaxStreamIDLen)
	}
	if len(f.Entries) == 0 || uint64(len(f.Entries)) > math.MaxUint32 {
		return invalidf("settled footer: %d entries", len(f.Entries))
	}
	seq, off := f.FirstSeq, uint64(0)
	var prevMax uint64
	for i, e := range f.Entries {
		if p := blockInfoProblem(e.BlockInfo()); p != "" {
			return invalidf("settled footer: entry %d: %s", i, p)
		}
		if e.FirstSeq != seq || e.Offset != off {
			return invalidf("settled footer: entry %d at seq %d offset %d, want seq %d offset %d", i, e.FirstSeq, e.Offset, seq, off)
		}
		if i > 0 && e.MinTimestamp < prevMax {
			return invalidf("settled footer: entry %d min timestamp %d below previous max %d", i, e.MinTimestamp, prevMax)
		}
		seq, off, prevMax = e.EndSeq(), off+uint64(e.Length), e.MaxTimestamp
	}
	if seq != f.EndSeq {
		return invalidf("settled footer: entries end at seq %d, footer says %d", seq, f.EndSeq)
	}
	return nil
}

func (f SettledFooter) encodedLen() int {
	n := settledFooterHeaderLen + len(f.StreamID) + 4
	prevMax := uint64(0)
	for _, e := range f.Entries {
		n += uvarintLen(uint64(e.Count)) + uvarintLen(uint64(e.Length)) +
			uvarintLen(e.MinTimestamp-prevMax) + uvarintLen(e.MaxTimestamp-e.MinTimestamp)
		prevMax = e.MaxTimestamp
	}
	return n
}

// AppendSettledFooter validates f and appends its footer and trailer to dst.
// On error dst is returned unchanged.
func AppendSettledFooter(dst []byte, f SettledFooter) ([]byte, error) {
	if err := f.Validate(); err != nil {
		return dst, err
	}
	flen := f.encodedLen()
	dst = slices.Grow(dst, flen+SettledTrailerSize)
	start := len(dst)
	dst = append(dst, settledFooterMagic[:]...)
	dst = append(dst, Version, 0)
	dst = le.AppendUint16(dst, uint16(len(f.StreamID)))
	dst = le.AppendUint64(dst, f.FirstSeq)
	dst = le.AppendUint64(dst, f.EndSeq)
	dst = le.AppendUint32(dst, uint32(len(f.Entries)))
	dst = append(dst, f.StreamID...)
	prevMax := uint64(0)
	for _, e := range f.Entries {
		dst = binary.AppendUvarint(dst, uint64(e.Count))
		dst = binary.AppendUvarint(dst, uint64(e.Length))
		dst = binary.AppendUvarint(dst, e.MinTimestamp-prevMax)
		dst = binary.AppendUvarint(dst, e.MaxTimestamp-e.MinTimestamp)
		prevMax = e.MaxTimestamp
	}
	dst = le.AppendUint32(dst, checksum(dst[start:]))
	dst = le.AppendUint32(dst, uint32(flen))
	dst = append(dst, settledTrailerMagic[:]...)
	return dst, nil
}

// EncodeSettledFooter returns the footer and trailer to append after the
// blocks. It panics if f fails Validate: the object is create-once, and
// writing a footer no reader accepts would be worse. Use AppendSettledFooter
// to get an error instead.
func EncodeSettledFooter(f SettledFooter) []byte {
	b, err := AppendSettledFooter(nil, f)
	if err != nil {
		panic(fmt.Sprintf("format.EncodeSettledFooter: %v", err))
	}
	return b
}

// DecodeSettledTrailer reads the trailer in the last SettledTrailerSize bytes
// of b (b may be any suffix of the object at least that long) and returns
// the footer's length.
func DecodeSettledTrailer(b []byte) (footerLen uint32, err error) {
	if len(b) < SettledTrailerSize {
		return 0, corruptf("settled trailer: %d bytes, need %d", len(b), SettledTrailerSize)
	}
	t := b[len(b)-SettledTrailerSize:]
	if [4]byte(t[4:8]) != settledTrailerMagic {
		return 0, corruptf("settled trailer: bad magic %x", t[4:8])
	}
	footerLen = le.Uint32(t)
	if footerLen < settledFooterMinLen {
		return 0, corruptf("settled trailer: footer length %d below minimum %d", footerLen, settledFooterMinLen)
	}
	return footerLen, nil
}

// LocateSettledFooter returns where the footer of an object of objectSize
// bytes lies, given any suffix of the object holding the trailer (a suffix
// GET returns both the bytes and, in Content-Range, the object size).
func LocateSettledFooter(objectSize uint64, suffix []byte) (offset uint64, length uint32, err error) {
	n, err := DecodeSettledTrailer(suffix)
	if err != nil {
		return 0, 0, err
	}
	if uint64(n)+SettledTrailerSize > objectSize {
		return 0, 0, corruptf("settled trailer: footer of %d bytes does not fit object of %d", n, objectSize)
	}
	return objectSize - SettledTrailerSize - uint64(n), n, nil
}

// DecodeSettledFooter decodes footer bytes (without the trailer), checking
// the CRC and every rule Validate states.
func DecodeSettledFooter(b []byte) (SettledFooter, error) {
	if len(b) < settledFooterMinLen {
		return SettledFooter{}, corruptf("settled footer: %d bytes, need at least %d", len(b), settledFooterMinLen)
	}
	if [4]byte(b[0:4]) != settledFooterMagic {
		return SettledFooter{}, corruptf("settled footer: bad magic %x", b[0:4])
	}
	if v := b[4]; v < 1 || v > MaxVersion {
		return SettledFooter{}, versionErr("settled footer", v)
	}
	body := b[:len(b)-4]
	if want, got := checksum(body), le.Uint32(b[len(b)-4:]); want != got {
		return SettledFooter{}, corruptf("settled footer: crc %08x, computed %08x", got, want)
	}
	if b[5] != 0 {
		return SettledFooter{}, corruptf("settled footer: reserved byte set")
	}
	idLen := int(le.Uint16(body[6:]))
	f := SettledFooter{FirstSeq: le.Uint64(body[8:]), EndSeq: le.Uint64(body[16:])}
	n := le.Uint32(body[24:])
	if idLen == 0 || idLen > MaxStreamIDLen || idLen > len(body)-settledFooterHeaderLen {
		return SettledFooter{}, corruptf("settled footer: stream id of %d bytes", idLen)
	}
	off := settledFooterHeaderLen + idLen
	f.StreamID = string(body[settledFooterHeaderLen:off])
	if n == 0 || uint64(n)*settledEntryMinLen > uint64(len(body)-off) {
		return SettledFooter{}, corruptf("settled footer: %d entries cannot fit %d bytes", n, len(body)-off)
	}
	f.Entries = make([]SettledEntry, n)
	seq, pos, prevMax := f.FirstSeq, uint64(0), uint64(0)
	for i := range f.Entries {
		var v [4]uint64
		for k := range v {
			var ok bool
			if v[k], off, ok = readUvarint(body, off); !ok {
				return SettledFooter{}, corruptf("settled footer: entry %d truncated or malformed", i)
			}
		}
		if v[0] > math.MaxUint32 || v[1] > math.MaxUint32 {
			return SettledFooter{}, corruptf("settled footer: entry %d count %d length %d", i, v[0], v[1])
		}
		if v[2] > math.MaxUint64-prevMax || v[3] > math.MaxUint64-(prevMax+v[2]) {
			return SettledFooter{}, corruptf("settled footer: entry %d timestamps overflow", i)
		}
		e := SettledEntry{FirstSeq: seq, Count: uint32(v[0]), Offset: pos, Length: uint32(v[1]),
			MinTimestamp: prevMax + v[2]}
		e.MaxTimestamp = e.MinTimestamp + v[3]
		if p := blockInfoProblem(e.BlockInfo()); p != "" {
			return SettledFooter{}, corruptf("settled footer: entry %d: %s", i, p)
		}
		f.Entries[i] = e
		seq, pos, prevMax = e.EndSeq(), pos+uint64(e.Length), e.MaxTimestamp
	}
	if off != len(body) {
		return SettledFooter{}, corruptf("settled footer: %d trailing bytes", len(body)-off)
	}
	if seq != f.EndSeq {
		return SettledFooter{}, corruptf("settled footer: entries end at seq %d, footer says %d", seq, f.EndSeq)
	}
	return f, nil
}

// VerifySettledObject decodes and verifies a whole settled object: trailer,
// footer, and every block's header and payload CRC against its entry.
func VerifySettledObject(obj []byte) (SettledFooter, error) {
	off, n, err := LocateSettledFooter(uint64(len(obj)), obj)
	if err != nil {
		return SettledFooter{}, err
	}
	f, err := DecodeSettledFooter(obj[off : off+uint64(n)])
	if err != nil {
		return SettledFooter{}, err
	}
	if f.BlocksLen() != off {
		return SettledFooter{}, corruptf("settled object: blocks end at %d, footer starts at %d", f.BlocksLen(), off)
	}
	for i, e := range f.Entries {
		info, err := VerifyBlock(obj[e.Offset : e.Offset+uint64(e.Length)])
		if err != nil {
			return SettledFooter{}, fmt.Errorf("settled object: entry %d: %w", i, err)
		}
		if info != e.BlockInfo() {
			return SettledFooter{}, corruptf("settled object: entry %d says %+v, block says %+v", i, e.BlockInfo(), info)
		}
	}
	return f, nil
}

// Find returns the entry whose block holds seq.
func (f SettledFooter) Find(seq uint64) (SettledEntry, bool) {
	i := sort.Search(len(f.Entries), func(i int) bool { return f.Entries[i].EndSeq() > seq })
	if i == len(f.Entries) || f.Entries[i].FirstSeq > seq {
		return SettledEntry{}, false
	}
	return f.Entries[i], true
}

// FindTime returns the first entry with MaxTimestamp >= ts: the block holding
// the first record with timestamp >= ts, since timestamps never decrease.
func (f SettledFooter) FindTime(ts uint64) (SettledEntry, bool) {
	i := sort.Search(len(f.Entries), func(i int) bool { return f.Entries[i].MaxTimestamp >= ts })
	if i == len(f.Entries) {
		return SettledEntry{}, false
	}
	return f.Entries[i], true
}
