package format

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// BlockHeaderSize is the fixed header in front of every record block.
//
// Block layout (little-endian):
//
//	[0,4)   magic "STLB"
//	[4]     version u8
//	[5]     flags u8 (0; reserved for compression)
//	[6,8)   reserved u16 (0)
//	[8,12)  length u32: the whole block, header included
//	[12,16) record count u32 (1..MaxBlockRecords)
//	[16,24) first seq u64; record i has seq first+i
//	[24,32) min timestamp u64 (the first record's)
//	[32,40) max timestamp u64 (the last record's)
//	[40,44) total header count u32 over all records
//	[44,48) CRC-32C of the payload [52,length)
//	[48,52) CRC-32C of the header [0,48)
//	[52,length) payload: per record, uvarint timestamp delta from the
//	        previous record (from min timestamp for the first, so 0),
//	        uvarint header count, per header uvarint name length, name,
//	        uvarint value length, value; then uvarint body length, body.
//
// A block holds no object coordinates, so it is relocatable: it is copied
// byte-for-byte from a transit bundle into a settled object.
const BlockHeaderSize = 52

// minRecordSize is the smallest framed record: three one-byte varints.
const minRecordSize = 3

var blockMagic = [4]byte{'S', 'T', 'L', 'B'}

const (
	blkOffVersion  = 4
	blkOffFlags    = 5
	blkOffReserved = 6
	blkOffLength   = 8
	blkOffCount    = 12
	blkOffFirstSeq = 16
	blkOffMinTs    = 24
	blkOffMaxTs    = 32
	blkOffHeaders  = 40
	blkOffDataCRC  = 44
	blkOffHeadCRC  = 48
)

// BlockInfo is what a block's header says about it.
type BlockInfo struct {
	FirstSeq                   uint64
	Count                      uint32
	MinTimestamp, MaxTimestamp uint64
	Length                     uint32
}

// EndSeq is one past the block's last seq.
func (i BlockInfo) EndSeq() uint64 { return i.FirstSeq + uint64(i.Count) }

// minBlockLen is the smallest valid length of a block of count records.
func minBlockLen(count uint32) uint64 {
	return BlockHeaderSize + uint64(count)*minRecordSize
}

// BlockSize is the encoded size of a block holding records. It does not
// validate; CheckBlock does.
func BlockSize(records []Record) int {
	n, _ := blockSize(records)
	return n
}

func blockSize(records []Record) (size, headers int) {
	size = BlockHeaderSize
	var prev uint64
	if len(records) > 0 {
		prev = records[0].Timestamp
	}
	for i := range records {
		r := &records[i]
		size += uvarintLen(r.Timestamp-prev) + uvarintLen(uint64(len(r.Headers))) +
			uvarintLen(uint64(len(r.Body))) + len(r.Body)
		prev = r.Timestamp
		for _, h := range r.Headers {
			size += uvarintLen(uint64(len(h.Name))) + len(h.Name) + uvarintLen(uint64(len(h.Value))) + len(h.Value)
		}
		headers += len(r.Headers)
	}
	return size, headers
}

// CheckBlock reports whether records can form one block: 1..MaxBlockRecords
// records with dense seqs (records[i].SeqNum == records[0].SeqNum+i),
// non-decreasing timestamps, and an encoded size of at most MaxBlockSize.
func CheckBlock(records []Record) error {
	_, _, err := checkBlock(records)
	return err
}

func checkBlock(records []Record) (size, headers int, err error) {
	if len(records) == 0 || len(records) > MaxBlockRecords {
		return 0, 0, invalidf("block of %d records, want 1..%d", len(records), MaxBlockRecords)
	}
	first := records[0].SeqNum
	if first > math.MaxUint64-uint64(len(records)) {
		return 0, 0, invalidf("block seqs from %d overflow", first)
	}
	for i := 1; i < len(records); i++ {
		if records[i].SeqNum != first+uint64(i) {
			return 0, 0, invalidf("record %d has seq %d, want %d (seqs must be dense)", i, records[i].SeqNum, first+uint64(i))
		}
		if records[i].Timestamp < records[i-1].Timestamp {
			return 0, 0, invalidf("record %d timestamp %d below previous %d", i, records[i].Timestamp, records[i-1].Timestamp)
		}
	}
	size, headers = blockSize(records)
	if size > MaxBlockSize {
		return 0, 0, invalidf("block of %d bytes exceeds %d", size, MaxBlockSize)
	}
	return size, headers, nil
}

// AppendBlock appends one block holding records to dst. It panics if records
// fail CheckBlock: encoding them would write bytes no reader accepts, and the
// signature leaves no room for an error. Call CheckBlock first on records that
// did not come from a sequencer (EncodeBundle does).
func AppendBlock(dst []byte, records []Record) []byte {
	size, headers, err := checkBlock(records)
	if err != nil {
		panic(fmt.Sprintf("format.AppendBlock: %v", err))
	}
	return appendBlock(dst, records, size, headers)
}

// appendBlock renders a checked block whose size and header count are known.
func appendBlock(dst []byte, records []Record, size, headers int) []byte {
	dst = slices.Grow(dst, size)
	start := len(dst)
	dst = dst[:start+BlockHeaderSize] // filled in below, once the payload is written
	prev := records[0].Timestamp
	for i := range records {
		r := &records[i]
		dst = binary.AppendUvarint(dst, r.Timestamp-prev)
		prev = r.Timestamp
		dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
		for _, h := range r.Headers {
			dst = appendBytes(dst, h.Name)
			dst = appendBytes(dst, h.Value)
		}
		dst = appendBytes(dst, r.Body)
	}
	h := dst[start : start+BlockHeaderSize]
	copy(h[0:4], blockMagic[:])
	h[blkOffVersion] = Version
	h[blkOffFlags] = 0
	le.PutUint16(h[blkOffReserved:], 0)
	le.PutUint32(h[blkOffLength:], uint32(len(dst)-start))
	le.PutUint32(h[blkOffCount:], uint32(len(records)))
	le.PutUint64(h[blkOffFirstSeq:], records[0].SeqNum)
	le.PutUint64(h[blkOffMinTs:], records[0].Timestamp)
	le.PutUint64(h[blkOffMaxTs:], records[len(records)-1].Timestamp)
	le.PutUint32(h[blkOffHeaders:], uint32(headers))
	le.PutUint32(h[blkOffDataCRC:], checksum(dst[start+BlockHeaderSize:]))
	le.PutUint32(h[blkOffHeadCRC:], checksum(h[:blkOffHeadCRC]))
	return dst
}

// blockHeader is a parsed, header-CRC-checked block header.
type blockHeader struct {
	BlockInfo
	headers uint32
	dataCRC uint32
}

// parseBlockHeader checks everything the 52 header bytes alone can prove.
func parseBlockHeader(b []byte) (blockHeader, error) {
	if len(b) < BlockHeaderSize {
		return blockHeader{}, corruptf("block: %d bytes, need a %d-byte header", len(b), BlockHeaderSize)
	}
	if [4]byte(b[0:4]) != blockMagic {
		return blockHeader{}, corruptf("block: bad magic %x", b[0:4])
	}
	if v := b[blkOffVersion]; v < 1 || v > MaxVersion {
		return blockHeader{}, versionErr("block", v)
	}
	if want, got := checksum(b[:blkOffHeadCRC]), le.Uint32(b[blkOffHeadCRC:]); want != got {
		return blockHeader{}, corruptf("block: header crc %08x, computed %08x", got, want)
	}
	if b[blkOffFlags] != 0 || le.Uint16(b[blkOffReserved:]) != 0 {
		return blockHeader{}, corruptf("block: reserved flags %02x/%04x set", b[blkOffFlags], le.Uint16(b[blkOffReserved:]))
	}
	h := blockHeader{
		BlockInfo: BlockInfo{
			Length:       le.Uint32(b[blkOffLength:]),
			Count:        le.Uint32(b[blkOffCount:]),
			FirstSeq:     le.Uint64(b[blkOffFirstSeq:]),
			MinTimestamp: le.Uint64(b[blkOffMinTs:]),
			MaxTimestamp: le.Uint64(b[blkOffMaxTs:]),
		},
		headers: le.Uint32(b[blkOffHeaders:]),
		dataCRC: le.Uint32(b[blkOffDataCRC:]),
	}
	if p := blockInfoProblem(h.BlockInfo); p != "" {
		return blockHeader{}, corruptf("block: %s", p)
	}
	// Every record needs minRecordSize bytes and every header two length
	// bytes: this bounds what a decoder allocates by the block length.
	if payload := uint64(h.Length) - BlockHeaderSize; uint64(h.Count)*minRecordSize+uint64(h.headers)*2 > payload {
		return blockHeader{}, corruptf("block: %d records and %d headers cannot fit %d payload bytes", h.Count, h.headers, payload)
	}
	return h, nil
}

// blockInfoProblem checks the fields any index entry (extent, settled entry)
// shares with a block header, describing the first problem found ("" if
// none) so that decoders and encoders can wrap it as corrupt or invalid.
func blockInfoProblem(i BlockInfo) string {
	switch {
	case i.Count == 0 || i.Count > MaxBlockRecords:
		return fmt.Sprintf("%d records, want 1..%d", i.Count, MaxBlockRecords)
	case i.FirstSeq > math.MaxUint64-uint64(i.Count):
		return fmt.Sprintf("seqs from %d overflow", i.FirstSeq)
	case uint64(i.Length) < minBlockLen(i.Count) || i.Length > MaxBlockSize:
		return fmt.Sprintf("length %d impossible for %d records", i.Length, i.Count)
	case i.MinTimestamp > i.MaxTimestamp:
		return fmt.Sprintf("min timestamp %d above max %d", i.MinTimestamp, i.MaxTimestamp)
	}
	return ""
}

// PeekBlock reads a block's header from b (at least BlockHeaderSize bytes;
// the block's payload need not be present) and checks the header's CRC. Use
// it to skip or seek through blocks without decoding records.
func PeekBlock(b []byte) (BlockInfo, error) {
	h, err := parseBlockHeader(b)
	return h.BlockInfo, err
}

// VerifyBlock checks the block at the start of b (b may continue past it):
// its header, and its payload CRC. It does not decode records.
func VerifyBlock(b []byte) (BlockInfo, error) {
	h, err := parseBlockHeader(b)
	if err != nil {
		return BlockInfo{}, err
	}
	if uint64(len(b)) < uint64(h.Length) {
		return BlockInfo{}, corruptf("block: %d bytes present, header says %d", len(b), h.Length)
	}
	if got := checksum(b[BlockHeaderSize:h.Length]); got != h.dataCRC {
		return BlockInfo{}, corruptf("block: payload crc %08x, computed %08x", h.dataCRC, got)
	}
	return h.BlockInfo, nil
}

// DecodeBlock decodes b, which must be exactly one block.
//
// Aliasing: every Record.Body, Header.Name and Header.Value is a subslice of
// b (nil when empty) with its capacity clipped, so appending to one never
// overwrites its neighbours; but modifying b, or reusing its buffer, changes
// the records. Copy what must outlive b. The records of one block share one
// backing array of Headers.
func DecodeBlock(b []byte) ([]Record, BlockInfo, error) {
	h, err := parseBlockHeader(b)
	if err != nil {
		return nil, BlockInfo{}, err
	}
	if uint64(len(b)) != uint64(h.Length) {
		return nil, BlockInfo{}, corruptf("block: %d bytes given, header says %d", len(b), h.Length)
	}
	recs := make([]Record, h.Count)
	var hdrs []Header
	if h.headers > 0 {
		hdrs = make([]Header, h.headers)
	}
	if err := decodeBlockInto(b, h, recs, hdrs); err != nil {
		return nil, BlockInfo{}, err
	}
	return recs, h.BlockInfo, nil
}

// DecodeBlocks decodes a concatenation of whole blocks (a bundle extent range
// or a settled object's block range) into one slice of records, in order.
// Records alias b as in DecodeBlock. It allocates the records and headers of
// all blocks at once, after a first pass over the block headers.
func DecodeBlocks(b []byte) ([]Record, error) {
	if len(b) == 0 {
		return nil, corruptf("blocks: empty range")
	}
	var records, headers uint64
	for off := 0; off < len(b); {
		h, err := parseBlockHeader(b[off:])
		if err != nil {
			return nil, fmt.Errorf("block at %d: %w", off, err)
		}
		if uint64(h.Length) > uint64(len(b)-off) {
			return nil, corruptf("block at %d: %d bytes, %d remain", off, h.Length, len(b)-off)
		}
		records += uint64(h.Count)
		headers += uint64(h.headers)
		off += int(h.Length)
	}
	all := make([]Record, records)
	recs := all
	var hdrs []Header
	if headers > 0 {
		hdrs = make([]Header, headers)
	}
	for off := 0; off < len(b); {
		h, _ := parseBlockHeader(b[off:]) // checked in the first pass
		end := off + int(h.Length)
		n, nh := int(h.Count), int(h.headers)
		if err := decodeBlockInto(b[off:end], h, recs[:n:n], hdrs[:nh:nh]); err != nil {
			return nil, fmt.Errorf("block at %d: %w", off, err)
		}
		recs, hdrs = recs[n:], hdrs[nh:]
		off = end
	}
	return all, nil
}

// decodeBlockInto verifies the payload CRC of block b (exactly h.Length bytes)
// and decodes its records into recs (len h.Count) and hdrs (len h.headers).
func decodeBlockInto(b []byte, h blockHeader, recs []Record, hdrs []Header) error {
	p := b[BlockHeaderSize:]
	if got := checksum(p); got != h.dataCRC {
		return corruptf("block: payload crc %08x, computed %08x", h.dataCRC, got)
	}
	off := 0
	ts := h.MinTimestamp
	for i := range recs {
		d, next, ok := readUvarint(p, off)
		if !ok {
			return corruptf("block: record %d: bad timestamp delta", i)
		}
		if (i == 0 && d != 0) || d > h.MaxTimestamp-ts {
			return corruptf("block: record %d: timestamp delta %d leaves [%d,%d]", i, d, h.MinTimestamp, h.MaxTimestamp)
		}
		ts += d
		nh, next, ok := readUvarint(p, next)
		if !ok || nh > uint64(len(hdrs)) {
			return corruptf("block: record %d: bad header count", i)
		}
		off = next
		var rh []Header
		if nh > 0 {
			rh = hdrs[:nh:nh]
			hdrs = hdrs[nh:]
			for j := range rh {
				if rh[j].Name, off, ok = readBytes(p, off); !ok {
					return corruptf("block: record %d header %d: bad name", i, j)
				}
				if rh[j].Value, off, ok = readBytes(p, off); !ok {
					return corruptf("block: record %d header %d: bad value", i, j)
				}
			}
		}
		body, next, ok := readBytes(p, off)
		if !ok {
			return corruptf("block: record %d: bad body", i)
		}
		off = next
		recs[i] = Record{SeqNum: h.FirstSeq + uint64(i), Timestamp: ts, Headers: rh, Body: body}
	}
	if off != len(p) {
		return corruptf("block: %d trailing payload bytes", len(p)-off)
	}
	if len(hdrs) != 0 {
		return corruptf("block: header says %d more headers than records hold", len(hdrs))
	}
	if ts != h.MaxTimestamp {
		return corruptf("block: last timestamp %d, header says max %d", ts, h.MaxTimestamp)
	}
	return nil
}
